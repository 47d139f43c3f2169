//! Human-readable output: tables that speak procfs, and the progress bar.

use std::collections::BTreeSet;
use std::io::{self, Write};

use thp_abi::ThpSettings;
use uapi::RunResult;

use crate::text;

#[cfg(test)]
mod tests {
    #[test]
    fn wrapping_keeps_the_indent_and_the_width() {
        let text = "  hugepages-2048kB  anon_fault_alloc 131  nr_anon 131  nr_anon_partially_mapped 127";
        assert_eq!(super::wrap(text, Some(50), 20), ["  hugepages-2048kB  anon_fault_alloc 131  nr_anon", "                    131  nr_anon_partially_mapped", "                    127"]);
        assert_eq!(super::wrap(text, None, 20), [text]);
        assert_eq!(super::wrap("short", Some(50), 4), ["short"]);
    }

    #[test]
    fn columns_go_in_blocks_that_fit() {
        // 42 + 4 × 14 = 98: 4 a block; pairs of 13 wide: 4 (not 4 and a half).
        assert_eq!(super::column_blocks(11, 42, 14, Some(100), false), [0..4, 4..8, 8..11]);
        assert_eq!(super::column_blocks(6, 42, 13, Some(100), true), [0..4, 4..6]);
        assert_eq!(super::column_blocks(5, 42, 20, Some(100), true), [0..2, 2..4, 4..5]);
        assert_eq!(super::column_blocks(11, 42, 14, None, false), [0..11]);
    }

    #[test]
    fn a_salvaged_span_is_in_seconds_of_the_recording() {
        let mut s = uapi::result::SalvageReport { kept_from_ns: Some(0), kept_to_ns: Some(412_000_000), duration_ns: Some(1_234_000_000), ..Default::default() };
        assert_eq!(super::span(&s), ", 0.000 s to 0.412 s of the recording's 1.234 s");
        s.duration_ns = None;
        assert_eq!(super::span(&s), ", 0.000 s to 0.412 s");
        s.kept_to_ns = None;
        assert_eq!(super::span(&s), "", "no timestamps, no span");
    }

    #[test]
    fn rates_are_short() {
        assert_eq!(super::rate(379_924.6571), "380k/s");
        assert_eq!(super::rate(5_441_603.8858), "5.44M/s");
        assert_eq!(super::rate(12.5), "12.5/s");
        assert_eq!(super::rate(0.0), "-/s");
    }
}

/// A progress bar over simulated accesses, shown only on a terminal for long runs.
pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    /// A bar over `total` accesses (known before the run starts, so it never shows 0/0).
    pub fn new(show: bool, what: &str, total: u64) -> Progress {
        use std::io::IsTerminal;
        let bar = (show && io::stderr().is_terminal()).then(|| {
            let b = indicatif::ProgressBar::new(total);
            b.set_style(
                indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} accesses ({rate})")
                    .expect("valid template")
                    .with_key("rate", |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        let _ = write!(w, "{}", rate(s.per_sec()));
                    })
                    .progress_chars("=> "),
            );
            b.set_message(what.to_string());
            b
        });
        Progress { bar }
    }

    /// `done` of `total` accesses (`sim::SimEvent::Progress`).
    pub fn set(&mut self, done: u64, total: u64) {
        if let Some(b) = &self.bar {
            b.set_length(total);
            b.set_position(done);
        }
    }

    pub fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

/// Accesses per second, rounded to 3 significant digits with a unit: `379k/s`, `5.44M/s`.
pub fn rate(per_sec: f64) -> String {
    if !per_sec.is_finite() || per_sec < 1.0 {
        return "-/s".into();
    }
    let (v, unit) = match per_sec {
        x if x >= 1e9 => (x / 1e9, "G"),
        x if x >= 1e6 => (x / 1e6, "M"),
        x if x >= 1e3 => (x / 1e3, "k"),
        x => (x, ""),
    };
    let digits = if v >= 100.0 { 0 } else if v >= 10.0 { 1 } else { 2 };
    format!("{v:.digits$}{unit}/s")
}

fn kb(bytes: u64) -> String {
    format!("{} kB", bytes / 1024)
}

/// `model.contig_hint` (`--policy contig-hint`, model-only): the 64 KiB chunks' counts.
fn contig_hint_rows(out: &mut impl Write, c: &uapi::result::ContigHintStats) -> io::Result<()> {
    writeln!(
        out,
        "  contig-hint chunks {} allocated, {} completed, {} split, {} failed (model-only); now {} filling, {} completed",
        c.chunks_allocated, c.chunks_completed, c.chunks_split, c.alloc_failed, c.filling, c.completed
    )?;
    writeln!(out, "  contig-hint unmapped {:>9}   (allocated to chunks, not mapped; peak {})", kb(c.unmapped_bytes), kb(c.peak_unmapped_bytes))
}

/// The `thplab sim` table.
pub fn result_table(out: &mut impl Write, r: &RunResult, s: &ThpSettings) -> io::Result<()> {
    writeln!(out, "{} ({} of Linux 6.18)", r.workload, if r.source == "sim" { "model" } else { "live kernel" })?;
    wline(out, &format!("settings: {}", s.summary()), 10)?;
    for p in &r.regions {
        writeln!(out, "region {:<12} {:#x}-{:#x} ({})", p.name, p.start, p.start + p.len, mm_types::format_size(p.len))?;
    }
    writeln!(out)?;
    writeln!(out, "process")?;
    writeln!(out, "  minflt          {:>12}", r.process.minflt)?;
    writeln!(out, "  Rss             {:>12}", kb(r.process.rss_bytes))?;
    writeln!(out, "  AnonHugePages   {:>12}", kb(r.process.anon_huge_bytes))?;
    if let Some(b) = r.process.bloat_bytes {
        writeln!(out, "  bloat           {:>12}   (allocated, never touched)", kb(b))?;
    }
    if let Some(p) = &r.peak {
        writeln!(out, "  VmHWM           {:>12}   (peak Rss; AnonHugePages then {})", kb(p.rss_bytes), kb(p.anon_huge_bytes))?;
    }
    if let Some(t) = &r.time {
        time_rows(out, t)?;
    }
    if let Some(c) = r.model.as_ref().and_then(|m| m.run.as_ref()).and_then(|m| m.contig_hint) {
        contig_hint_rows(out, &c)?;
    }
    for rp in &r.repeats {
        writeln!(out, "  repeat, line {:<4} {:>9}   (iterations in {} on the run's clock)", rp.line, rp.iterations, secs(rp.duration_ns as f64))?;
    }
    writeln!(out)?;
    folio_table(out, r)?;
    if r.census.zero_page_ptes > 0 || r.census.huge_zero_pmds > 0 {
        writeln!(out, "  zero page: {} PTEs, huge zero page: {} PMDs", r.census.zero_page_ptes, r.census.huge_zero_pmds)?;
    }
    writeln!(out)?;
    let nonzero: Vec<_> = r.vmstat.iter().filter(|(_, v)| **v != 0).collect();
    writeln!(out, "/proc/vmstat{}", if nonzero.is_empty() { ": no thp_* counter moved" } else { "" })?;
    for (k, v) in nonzero {
        writeln!(out, "  {k} {v}")?;
    }
    writeln!(out)?;
    let moved: Vec<(_, Vec<String>)> = r.mthp.iter()
        .map(|(dir, stats)| (dir, stats.iter().filter(|(_, v)| **v != 0).map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>()))
        .filter(|(_, m)| !m.is_empty())
        .collect();
    writeln!(
        out,
        "/sys/kernel/mm/transparent_hugepage/hugepages-<size>/stats{}",
        if moved.is_empty() { ": no counter moved" } else { " (non-zero)" }
    )?;
    for (dir, m) in moved {
        wline(out, &format!("  {dir:<17} {}", m.join("  ")), 20)?;
    }
    if !r.fallbacks.is_empty() {
        writeln!(out)?;
        writeln!(out, "fallbacks (model only): faults that did not get a size, and why")?;
        for (dir, reasons) in r.fallbacks.iter().rev() {
            let rs: Vec<String> = reasons.iter().map(|(k, v)| format!("{k} {v}")).collect();
            wline(out, &format!("  {dir:<17} {}", rs.join("  ")), 20)?;
        }
    }
    per_process(out, r)?;
    forked(out, r)?;
    folio_map(out, r)?;
    explain(out, r)?;
    accesses(out, r)?;
    vm_host(out, r)?;
    let notable: Vec<_> = r.calls.iter().filter(|c| c.ret != "0" || c.call.starts_with("madvise(collapse")).collect();
    if !notable.is_empty() {
        writeln!(out)?;
        writeln!(out, "calls")?;
        for c in notable {
            writeln!(out, "  line {:<4} {} = {}", c.line, c.call, c.ret)?;
        }
    }
    Ok(())
}

/// The process block's time rows (with a profile): the priced work by kind, its uncertainty,
/// the elapsed time on the simulated clock, each phase, and the sizes the profile has no cost
/// for.
fn time_rows(out: &mut impl Write, t: &uapi::TimeEstimate) -> io::Result<()> {
    let mut parts: Vec<String> = t.faults_ns.iter().map(|(size, ns)| format!("{} faults of {size} {}", t.faults[size], secs(*ns))).collect();
    if t.zero_page_faults > 0 {
        parts.push(format!("{} zero-page reads {}", t.zero_page_faults, secs(t.zero_page_ns)));
    }
    parts.push(format!("{} touches {}", t.touches_without_fault, secs(t.touch_ns)));
    parts.push(format!("{} calls {}", t.calls, secs(t.calls_ns)));
    if t.collapses > 0 {
        parts.push(format!("{} MADV_COLLAPSE collapses {}", t.collapses, secs(t.collapse_ns)));
    }
    if !t.frees.is_empty() {
        let n: u64 = t.frees.values().sum();
        parts.push(format!("{n} folios freed {}", secs(t.free_ns)));
    }
    if t.pin_ns > 0.0 {
        parts.push(format!("O_DIRECT pinning {}", secs(t.pin_ns)));
    }
    if t.host_faults > 0 {
        parts.push(format!("{} host faults {} (frames the host dropped after page reporting)", t.host_faults, secs(t.host_ns)));
    }
    if t.accesses > 0 {
        parts.push(format!("{} accesses {} (the TLB model's, below)", t.accesses, secs(t.accesses_ns)));
    }
    wline(out, &format!("  time            {:>12}   (profile: {})", secs(t.total_ns), parts.join(", ")), 33)?;
    if let Some(u) = &t.uncertainty {
        time_uncertainty(out, t, u)?;
    }
    if let Some(own) = t.program_ns {
        wline(out, &format!("  elapsed         {:>12}   ({})", secs(t.elapsed_ns as f64), timed_parts(t, own)), 33)?;
    } else if t.elapsed_ns as f64 > t.total_ns + 0.5 {
        writeln!(out, "  elapsed         {:>12}   (the simulated clock: the time above and the sleeps)", secs(t.elapsed_ns as f64))?;
    }
    for p in &t.phases {
        writeln!(out, "  phase {:<9} {:>12}   (from {})", p.name, secs(p.ns as f64), secs(p.start_ns as f64))?;
    }
    if !t.unmeasured_sizes.is_empty() {
        writeln!(out, "  time: the profile has no cost for {}; charged as 4kB faults", t.unmeasured_sizes.join(", "))?;
    }
    Ok(())
}

/// The TLB model's counts and estimate of `access` statements.
/// The modelled VM host's lines (`vm_host`, docs/vm-host.md).
fn vm_host(out: &mut impl Write, r: &RunResult) -> io::Result<()> {
    let Some(h) = &r.vm_host else { return Ok(()) };
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    writeln!(out)?;
    writeln!(out, "vm host (model-only: {}{})", h.settings.join(" "), h.policy.as_ref().map_or(String::new(), |p| format!(", policy {p}")))?;
    writeln!(out, "  resident {:.2} MiB (peak {:.2}, in 2 MiB pages {:.2}); faults 4kB {} 2048kB {}", mib(h.resident_bytes), mib(h.peak_resident_bytes), mib(h.huge_bytes), h.faults_4k, h.faults_2m)?;
    writeln!(out, "  EPT violations {} (exits saved by the fill {}); khugepaged scanned {} collapsed {}", h.ept_violations, h.exits_saved, h.khugepaged_scanned, h.khugepaged_collapsed)?;
    writeln!(out, "  hot bloat {} of {} hot base pages ({:.1} %, at most {} in a window of {})", h.hot_bloat_pages, h.hot_pages, 100.0 * h.hot_bloat_ratio, h.hot_bloat_max, h.windows)?;
    if h.policy.is_some() {
        writeln!(out, "  fhpm: companion tables {} splits {} promotions {} freed base pages {}", h.companion_tables, h.splits, h.promotions, h.freed_pages)?;
    }
    let ms = |ns: u64| ns as f64 / 1e6;
    writeln!(out, "  host time (estimates): exits and faults {:.2} ms, monitoring {:.2} ms, splits and merges {:.2} ms", ms(h.exit_ns), ms(h.monitor_ns), ms(h.manage_ns))
}

fn accesses(out: &mut impl Write, r: &RunResult) -> io::Result<()> {
    let Some(a) = &r.accesses else { return Ok(()) };
    writeln!(out)?;
    writeln!(out, "accesses (TLB model: --cpu {} --paging {}, {} GHz; time for dependent accesses)", a.cpu, a.paging, a.ghz)?;
    writeln!(out, "  {:<12} {:>11} {:>11} {:>11} {:>11} {:>12} {:>10} {:>9}", "region", "accesses", "L1 misses", "L2 hits", "walks", "walk refs", "ns/access", "est. ms")?;
    for c in a.regions.iter().chain(std::iter::once(&a.total)) {
        writeln!(
            out,
            "  {:<12} {:>11} {:>11} {:>11} {:>11} {:>12} {:>10.1} {:>9.2}",
            c.region, c.accesses, c.l1_misses, c.l2_hits, c.walks, c.walk_refs, c.ns_per_access, c.ns / 1e6
        )?;
    }
    Ok(())
}

/// Folios mapped at the peak and at exit, size by size (the PMD/PTE/partial columns are at exit).
fn folio_table(out: &mut impl Write, r: &RunResult) -> io::Result<()> {
    let Some(p) = &r.peak else {
        writeln!(out, "folios mapped at the end")?;
        writeln!(out, "  {:<8} {:>10} {:>11} {:>11} {:>17}", "size", "folios", "pmd-mapped", "pte-mapped", "partially-mapped")?;
        for (size, e) in r.census.sizes.iter() {
            writeln!(out, "  {:<8} {:>10} {:>11} {:>11} {:>17}", size, e.folios, e.pmd_mapped, e.pte_mapped, e.partially_mapped)?;
        }
        return Ok(());
    };
    writeln!(out, "folios mapped at the peak and at exit (pmd-, pte- and partially-mapped: at exit)")?;
    writeln!(out, "  {:<8} {:>10} {:>10} {:>11} {:>11} {:>17}", "size", "peak", "at exit", "pmd-mapped", "pte-mapped", "partially-mapped")?;
    let sizes: BTreeSet<_> = r.census.sizes.keys().chain(p.census.sizes.keys()).collect();
    for size in sizes {
        let e = r.census.sizes.get(size).copied().unwrap_or_default();
        let at_peak = p.census.sizes.get(size).map_or(0, |e| e.folios);
        writeln!(out, "  {:<8} {:>10} {:>10} {:>11} {:>11} {:>17}", size, at_peak, e.folios, e.pmd_mapped, e.pte_mapped, e.partially_mapped)?;
    }
    // nr_anon's largest value can exceed the census near the peak (a size that came and went).
    let more: Vec<String> = p.max_folios.iter()
        .filter(|(s, n)| **n > p.census.sizes.get(*s).map_or(0, |e| e.folios))
        .map(|(s, n)| format!("{s} {n}"))
        .collect();
    if !more.is_empty() {
        writeln!(out, "  most anonymous folios mapped at once (nr_anon): {}", more.join(", "))?;
    }
    Ok(())
}

/// A workload's processes (`fork NAME`), one row each: minflt since its fork, Rss and
/// AnonHugePages at the end, the copy-on-write faults that copied and that reused a page
/// (`wp_page_copy`, `wp_page_reuse`), and the folios it maps at the end.
fn forked(out: &mut impl Write, r: &RunResult) -> io::Result<()> {
    if r.processes.len() < 2 {
        return Ok(());
    }
    writeln!(out)?;
    wline(out, "processes (minflt since the fork; Rss, AnonHugePages and folios at the end; COW: write faults on pages shared by fork that copied the page or reused it)", 2)?;
    let opt = |v: Option<u64>| v.map_or("-".to_string(), |n| n.to_string());
    let mut cells = vec![["process", "minflt", "Rss", "AnonHugePages", "COW copied", "COW reused", "folios"].map(String::from).to_vec()];
    for p in &r.processes {
        let name = match (&p.shares_mm_with, p.exited) {
            (Some(m), _) => format!("{} (mm of {m})", p.name),
            (None, true) => format!("{} (exited)", p.name),
            (None, false) => p.name.clone(),
        };
        let folios: Vec<String> = p.census.sizes.iter().map(|(k, e)| format!("{k}×{}", e.folios)).collect();
        let (rss, ahp) = if p.exited { ("-".to_string(), "-".to_string()) } else { (kb(p.process.rss_bytes), kb(p.process.anon_huge_bytes)) };
        cells.push(vec![name, p.process.minflt.to_string(), rss, ahp, opt(p.cow_copied), opt(p.cow_reused), if folios.is_empty() { "-".into() } else { folios.join(" ") }]);
    }
    for l in text::layout(&cells, &[true, false, false, false, false, false, true]) {
        writeln!(out, "  {l}")?;
    }
    Ok(())
}

/// A recording's processes, one line each (the census at each one's exit).
fn per_process(out: &mut impl Write, r: &RunResult) -> io::Result<()> {
    let Some(rp) = r.model.as_ref().and_then(|m| m.replay.as_ref()) else { return Ok(()) };
    if let Some(s) = &rp.salvage {
        writeln!(out)?;
        let lost = s.records_lost.map_or("an unknown number of".to_string(), |n| n.to_string());
        let place = match (s.block, s.blocks_kept) {
            (Some(b), _) => format!(" (block {b}; cut there)"),
            (None, Some(_)) => " (its trailer; every block is whole)".to_string(),
            (None, None) => String::new(),
        };
        let unchecked = if s.unchecked { " (not checked: a 2.x recording has no block checksums)" } else { "" };
        let text = format!(
            "SALVAGED: the recording is damaged at byte {}{place}; replayed {} records before it{}{unchecked}; lost {} bytes and {lost} records after it",
            s.offset,
            s.records_read,
            span(s),
            s.bytes_lost
        );
        wline(out, &text, 2)?;
    }
    let warnings = rp.warnings.len();
    let (checked, matched) = (rp.placements_checked, rp.placements_matched);
    if warnings > 0 || checked > matched {
        writeln!(out)?;
        let text = format!(
            "WARNING: {matched} of {checked} placements matched the kernel's, {} relocated; {warnings} replay warning{} (printed on stderr, listed in the JSON's model.replay.warnings)",
            rp.relocated,
            if warnings == 1 { "" } else { "s" }
        );
        wline(out, &text, 2)?;
    }
    let procs = &rp.per_process;
    if procs.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(out, "per process (model; the marks are explained below the table)")?;
    let mut cells = vec![["pid", "image", "snapshot", "faults", "Rss", "VmHWM", "folios", "exe"].map(String::from).to_vec()];
    for p in procs {
        let folios: Vec<String> = p.folios.iter().map(|(k, n)| format!("{k} {n}")).collect();
        cells.push(vec![
            p.pid.to_string(),
            format!("{}{}", p.image, if p.replaced { "*" } else { "" }),
            (if p.exec_snapshot { "yes" } else { "no" }).to_string(),
            p.modelled_faults.to_string(),
            kb(p.rss_bytes),
            kb(p.peak_rss_bytes),
            if folios.is_empty() { "-".to_string() } else { folios.join(", ") },
            p.exe.clone(),
        ]);
    }
    for l in text::layout(&cells, &[false, false, false, false, false, false, true, true]) {
        writeln!(out, "  {l}")?;
    }
    writeln!(out)?;
    wline(out, "  faults: those each process took in memory the model backs; Rss, VmHWM and folios: \
        at its exit, or at the execve that replaced it (image marked *: not in the census); \
        snapshot: its stack, heap, ELF and loader mappings come from the exec snapshot", 4)?;
    Ok(())
}

/// The direct I/O line under the `thplab sim` table (`read_direct`): reads, bytes, what the
/// reads pinned, the faults taken while pinning, and with a profile the cost of pin + unpin.
pub fn direct_io(out: &mut impl Write, io: &uapi::result::IoResult) -> io::Result<()> {
    write!(
        out,
        "direct I/O: {} reads, {} bytes; pinned {} folios, {} PTE-mapped and {} PMD-mapped pages; {} faults while pinning",
        io.direct_reads, io.bytes, io.pinned_folios, io.pinned_pte_pages, io.pinned_pmd_pages, io.pin_faults
    )?;
    match io.pin_ns {
        Some(ns) => writeln!(out, "; pin + unpin {:.1} us", ns / 1000.0),
        None => writeln!(out, " (give --profile FILE for their cost)"),
    }
}

/// ", 0.000 s to 0.412 s of the recording's 1.234 s": the time the replayed records span.
pub fn span(s: &uapi::result::SalvageReport) -> String {
    let (Some(from), Some(to)) = (s.kept_from_ns, s.kept_to_ns) else { return String::new() };
    let of = match s.duration_ns {
        Some(d) if d > 0 => format!(" of the recording's {:.3} s", d as f64 / 1e9),
        _ => String::new(),
    };
    format!(", {:.3} s to {:.3} s{of}", from as f64 / 1e9, to as f64 / 1e9)
}

/// Rows of the folio-size map printed in text; the JSON has every VMA.
const MAX_MAP_ROWS: usize = 200;

/// The folio-size map: the table `thplab observe` prints, for the model's VMAs at the end.
fn folio_map(out: &mut impl Write, r: &RunResult) -> io::Result<()> {
    if r.vmas.is_empty() {
        return Ok(());
    }
    let shown: Vec<uapi::VmaMap> = r.vmas.iter().filter(|v| v.kind != "placeholder" || v.rss_kb > 0).take(MAX_MAP_ROWS).cloned().collect();
    let placeholders = r.vmas.iter().filter(|v| v.kind == "placeholder" && v.rss_kb == 0).count();
    writeln!(out)?;
    writeln!(out, "folio-size map (folios per VMA at {}, as `thplab observe` prints a live process)", if r.model.as_ref().is_some_and(|m| m.replay.is_some()) { "each process's exit" } else { "the end" })?;
    write!(out, "{}", text::vma_table_fit(&shown, &r.census, r.process.rss_bytes / 1024, fit_width()))?;
    let hidden = r.vmas.len() - placeholders - shown.len();
    if placeholders > 0 || hidden > 0 {
        let mut notes = Vec::new();
        if placeholders > 0 {
            notes.push(format!("{placeholders} placeholder VMAs (mappings the model does not back: files, the vDSO) not shown"));
        }
        if hidden > 0 {
            notes.push(format!("{hidden} more VMAs not shown"));
        }
        wline(out, &format!("  ({}; --json lists every VMA)", notes.join("; ")), 3)?;
    }
    Ok(())
}

/// `--explain`: each fault in the range and why each larger size was refused.
fn explain(out: &mut impl Write, r: &RunResult) -> io::Result<()> {
    let Some(x) = &r.explain else { return Ok(()) };
    writeln!(out)?;
    let n = x.faults.len() as u64 + x.more_faults;
    writeln!(out, "explain {}-{}: {n} fault{} touched it (reasons as in `fallbacks`)", x.start, x.end, if n == 1 { "" } else { "s" })?;
    if n == 0 {
        writeln!(out, "  no anonymous fault touched this range (not mapped, never touched, a shmem mapping, or a replay's placeholder)")?;
    }
    for f in &x.faults {
        let pid = f.pid.map(|p| format!("pid {p} ")).unwrap_or_default();
        let refused = if f.refused.is_empty() {
            "nothing larger enabled or possible".to_string()
        } else {
            f.refused.iter().map(|(o, why)| format!("{o} {why}")).collect::<Vec<_>>().join(", ")
        };
        let head = format!("  {pid}{} {:<5} got {:<14} refused: ", f.addr, f.access, f.got);
        wline(out, &format!("{head}{refused}"), head.chars().count())?;
    }
    if x.more_faults > 0 {
        writeln!(out, "  ... {} more faults not kept (the totals are of the listed ones)", x.more_faults)?;
    }
    if !x.totals.is_empty() {
        writeln!(out, "  totals:")?;
        for (dir, reasons) in x.totals.iter().rev() {
            let rs: Vec<String> = reasons.iter().map(|(k, v)| format!("{k} {v}")).collect();
            wline(out, &format!("    {dir:<17} {}", rs.join("  ")), 22)?;
        }
    }
    Ok(())
}

/// `text` wrapped to the output's width, continuation lines indented by `indent`.
fn wline(out: &mut impl Write, text: &str, indent: usize) -> io::Result<()> {
    for l in wrap(text, fit_width(), indent) {
        writeln!(out, "{l}")?;
    }
    Ok(())
}

/// A time's ± (the profile's spreads, the program's own time) and the host state it assumed.
fn time_uncertainty(out: &mut impl Write, t: &uapi::TimeEstimate, u: &uapi::result::TimeUncertainty) -> io::Result<()> {
    let mut parts: Vec<(&String, &f64)> = u.profile_ns.iter().collect();
    parts.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()));
    let named: Vec<String> = parts.iter().take(3).map(|(k, v)| format!("{k} {}", secs(v.abs()))).collect();
    let program = if u.program_ns > 0.0 { format!(", the program's own time {}", secs(u.program_ns)) } else { String::new() };
    wline(out, &format!("  ±               {:>12}   (the profile's calibrated spreads{}{program})", secs(t.sym_ns()), if named.is_empty() { String::new() } else { format!(": {}", named.join(", ")) }), 33)?;
    if let Some(h) = &u.host {
        let text = format!(
            "  host state      {:>12}   (the time from every frame backed, {} host faults, to every frame dropped, {}; assumed: {})",
            format!("{:.2}..{:.2} s", (t.elapsed_ns as f64 - h.down_ns) / 1e9, (t.elapsed_ns as f64 + h.up_ns) / 1e9),
            h.low_faults,
            h.high_faults,
            h.assumed
        );
        wline(out, &text, 33)?;
    }
    Ok(())
}

/// `--wide`: text tables at their full width instead of [`text::TEXT_WIDTH`] columns.
static WIDE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn set_wide(wide: bool) {
    WIDE.store(wide, std::sync::atomic::Ordering::Relaxed);
}

/// The width text output fits: `None` with `--wide`.
pub fn fit_width() -> Option<usize> {
    (!WIDE.load(std::sync::atomic::Ordering::Relaxed)).then_some(text::TEXT_WIDTH)
}

/// Words wrapped to `width` columns (none with `None`), continuation lines indented by `indent`.
pub fn wrap(text: &str, width: Option<usize>, indent: usize) -> Vec<String> {
    crate::text::wrap(text, width, indent)
}

/// Columns of `w` after a name column of `name_w`, in blocks that fit `width` (each block
/// repeats the names): the ranges of columns of each block. Columns that pair up (`4K sim`,
/// `4K live`) are not parted.
pub fn column_blocks(n: usize, name_w: usize, w: usize, width: Option<usize>, pairs: bool) -> Vec<std::ops::Range<usize>> {
    let per = width.map_or(n, |width| (width.saturating_sub(name_w) / w.max(1)).max(1));
    let per = if pairs && per >= 2 { per - per % 2 } else { per };
    (0..n).step_by(per.max(1)).map(|i| i..(i + per).min(n)).collect()
}

/// Several results in columns (the README's main command, `sim --matrix`): as many columns
/// side by side as fit 100 columns (all with `--wide`), the rest in blocks below.
pub fn side_by_side(out: &mut impl Write, cols: &[(String, String, RunResult)]) -> io::Result<()> {
    let rows = side_rows(cols);
    let name_w = rows.iter().map(|(n, _)| n.chars().count() + 2).max().unwrap_or(0).max(42);
    let widest = rows.iter().flat_map(|(_, c)| c.iter()).chain(cols.iter().map(|(l, _, _)| l)).map(|x| x.chars().count() + 2).max().unwrap_or(0);
    let w = widest.max(if cols.len() > 3 { 13 } else { 16 });
    let pairs = cols.len() % 2 == 0 && cols.chunks(2).all(|p| p[0].0.ends_with(" sim") && p[1].0.ends_with(" live"));
    let blocks = column_blocks(cols.len(), name_w, w, fit_width(), pairs);
    if blocks.len() > 1 {
        writeln!(out, "({} settings in {} blocks to fit {} columns; --wide prints one table)\n", cols.len(), blocks.len(), text::TEXT_WIDTH)?;
    }
    for (k, block) in blocks.into_iter().enumerate() {
        if k > 0 {
            writeln!(out)?;
        }
        write!(out, "{:<name_w$}", "")?;
        for (label, _, _) in &cols[block.clone()] {
            write!(out, "{label:>w$}")?;
        }
        writeln!(out)?;
        for (name, cells) in &rows {
            write!(out, "{name:<name_w$}")?;
            for c in &cells[block.clone()] {
                write!(out, "{c:>w$}")?;
            }
            writeln!(out)?;
        }
    }
    if cols.iter().any(|(_, _, r)| r.source == "live") {
        writeln!(out)?;
        let mut note = String::from("thp_* and hugepages-*/stats are system-wide: on a busy machine \
            the live columns include other processes' allocations. minflt, Rss, AnonHugePages and \
            the folios are the process's own.");
        if cols.iter().any(|(_, _, r)| r.time.is_some()) {
            note += "\ntime: the model's from a machine profile (`thplab calibrate` measures one). \
                On a VM whose free pages are reported to its host, writing reported memory is a \
                host fault: once page reporting settled, each live run read the free lists and \
                reported blocks it started from (/proc/pagetypeinfo, /proc/kpageflags) and the \
                per-CPU list of the CPU it was pinned to (/proc/zoneinfo; the THP-sized pages on \
                it, which /proc cannot show, are held by thplab while the run runs), the model ran \
                again from them, and the live run's frames that lay in reported blocks are its host faults.";
        }
        for para in note.split('\n') {
            for l in wrap(para, fit_width(), 0) {
                writeln!(out, "{l}")?;
            }
        }
    }
    writeln!(out)?;
    let mut seen = Vec::new();
    for (label, summary, _) in cols {
        let key = label.split(' ').next().unwrap_or(label);
        if !seen.contains(&key) {
            seen.push(key);
            for l in wrap(&format!("{key}: {summary}"), fit_width(), key.chars().count() + 2) {
                writeln!(out, "{l}")?;
            }
        }
    }
    Ok(())
}

/// The row of the frames written that the host had dropped: the name of compare's row
/// (`experiment::HOST_FAULTS_ROW`; tests model:: and live:: read both by this name).
pub const HOST_FAULTS_ROW: &str = "host faults (frames reported free)";

/// The rows of [`side_by_side`]: a name and a cell per result.
fn side_rows(cols: &[(String, String, RunResult)]) -> Vec<(String, Vec<String>)> {
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row = |name: &str, f: &dyn Fn(&RunResult) -> String| rows.push((name.to_string(), cols.iter().map(|(_, _, r)| f(r)).collect()));
    row("minflt", &|r| r.process.minflt.to_string());
    row("Rss", &|r| kb(r.process.rss_bytes));
    row("AnonHugePages", &|r| kb(r.process.anon_huge_bytes));
    if cols.iter().any(|(_, _, r)| r.peak.is_some()) {
        row("VmHWM (peak Rss)", &|r| r.peak.as_ref().map_or("-".to_string(), |p| kb(p.rss_bytes)));
    }
    if cols.iter().any(|(_, _, r)| r.process.bloat_bytes.is_some()) {
        row("bloat (allocated, never touched)", &|r| r.process.bloat_bytes.map_or("-".to_string(), kb));
    }
    // With a profile: the model's simulated time; beside it a live column's wall time.
    if cols.iter().any(|(_, _, r)| r.time.is_some()) {
        row("time (profile; live: wall time)", &|r| match (&r.time, &r.live) {
            (Some(t), _) => secs(t.elapsed_ns as f64),
            (None, Some(l)) => secs(l.time_ms() * 1e6),
            _ => "-".to_string(),
        });
        // Its ± : the profile's calibrated spreads (model), the range of the runs (live).
        row("time ± (model: profile; live: runs)", &|r| match (&r.time, &r.live) {
            (Some(t), _) => pm_pct(t.elapsed_ns as f64, t.sym_ns(), t.uncertainty.is_some()),
            (None, Some(l)) => {
                let pm = l.time_range_ms.map(|r| (r.max - r.min) * 1e6);
                pm_pct(l.time_ms() * 1e6, pm.unwrap_or(0.0), pm.is_some())
            }
            _ => "-".to_string(),
        });
        // The model's time over the host states it could not know (every frame backed, every
        // frame dropped), where it has a `[host]`.
        let host = |r: &RunResult| r.time.as_ref().and_then(|t| t.uncertainty.as_ref()?.host.as_ref().map(|h| (t.elapsed_ns as f64, h.down_ns, h.up_ns)));
        if cols.iter().any(|(_, _, r)| host(r).is_some()) {
            row("time over the host states (model)", &|r| host(r).map_or("-".into(), |(e, down, up)| format!("{:.2}..{:.2} s", (e - down) / 1e9, (e + up) / 1e9)));
        }
    }
    // On a VM that reports free pages: the frames written that the host had dropped.
    let live_host = |r: &RunResult| r.live.as_ref().and_then(|l| l.workload.as_ref()).and_then(|w| w.host_faults);
    if cols.iter().any(|(_, _, r)| r.time.as_ref().is_some_and(|t| t.host_faults > 0) || live_host(r).is_some()) {
        row(HOST_FAULTS_ROW, &|r| match (&r.time, live_host(r)) {
            (Some(t), _) => t.host_faults.to_string(),
            (None, Some(n)) => n.to_string(),
            _ => "-".to_string(),
        });
    }
    row("thp_fault_alloc", &|r| r.vmstat.get("thp_fault_alloc").copied().unwrap_or(0).to_string());
    let dirs: BTreeSet<_> = cols.iter().flat_map(|(_, _, r)| r.mthp.keys()).collect();
    for d in dirs {
        let any = cols.iter().any(|(_, _, r)| r.mthp.get(d).and_then(|s| s.get("anon_fault_alloc")).copied().unwrap_or(0) != 0);
        if any {
            row(&format!("{d}/stats/anon_fault_alloc"), &|r| r.mthp.get(d).and_then(|s| s.get("anon_fault_alloc")).copied().unwrap_or(0).to_string());
        }
    }
    let sizes: BTreeSet<_> = cols.iter().flat_map(|(_, _, r)| r.folios.keys()).collect();
    for s in sizes {
        row(&format!("folios {s}"), &|r| r.folios.get(s).copied().unwrap_or(0).to_string());
    }
    // A workload that forks: each process's minflt and copy-on-write faults.
    let mut names: Vec<&String> = Vec::new();
    for (_, _, r) in cols.iter().filter(|(_, _, r)| r.processes.len() > 1) {
        names.extend(r.processes.iter().map(|p| &p.name).filter(|n| !names.contains(n)).collect::<Vec<_>>());
    }
    for name in names {
        let get = |r: &RunResult, f: &dyn Fn(&uapi::result::ProcResult) -> Option<u64>| r.processes.iter().find(|p| &p.name == name).and_then(f).map_or("-".to_string(), |v| v.to_string());
        row(&format!("{name}: minflt"), &|r| get(r, &|p| Some(p.process.minflt)));
        row(&format!("{name}: COW copied (wp_page_copy)"), &|r| get(r, &|p| p.cow_copied));
        row(&format!("{name}: COW reused (wp_page_reuse)"), &|r| get(r, &|p| p.cow_reused));
    }
    rows
}

/// The ± of a time as a percentage (`±6%`), `±?` when its spread is unknown.
fn pm_pct(ns: f64, pm: f64, known: bool) -> String {
    if !known || ns <= 0.0 {
        return "±?".into();
    }
    format!("±{:.0}%", pm / ns * 100.0)
}

/// A timed recording's elapsed time in its parts: the program's own time, measured, and the
/// model's work, priced.
fn timed_parts(t: &uapi::TimeEstimate, own: f64) -> String {
    let from = match (t.measured_ns, t.baseline_ns) {
        (Some(m), Some(b)) => format!(
            ": its untraced wall time {} (record --timed) less the model's {} for its work at 4 KiB pages{}",
            secs(m as f64),
            secs(b),
            if (m as f64) < b { ", more than that time: counted as 0" } else { "" }
        ),
        _ => String::new(),
    };
    format!("of which {} the program's own time, measured{from}; {} the model's work, priced by the profile: the time above", secs(own), secs(t.total_ns))
}

/// ns as seconds or milliseconds, three significant digits.
fn secs(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.3} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.1} ms", ns / 1e6)
    } else {
        format!("{:.1} µs", ns / 1e3)
    }
}

/// The heading of `thplab demo`'s table: what the workload is and what ran it (the model, and
/// `live`: this machine's kernel too).
pub fn demo_heading(out: &mut impl Write, live: bool) -> io::Result<()> {
    let head = format!("seed-anon-1g: 1 GiB of private anonymous memory written page by page, model of Linux 6.18{}", if live { " and this machine's live kernel" } else { "" });
    writeln!(out, "{}\n", wrap(&head, fit_width(), 0).join("\n"))
}

/// What the demo's times assumed: the profile's spreads and, for the model, the host state it
/// could not know (with `live`: the free lists each live run started from).
pub fn demo_time_note(out: &mut impl Write, results: &[(String, String, RunResult)], live: bool) -> io::Result<()> {
    let mut note = String::from("time ±: the model's from the built-in profile's calibrated spreads; live: the range of the runs.");
    if let Some(h) = results.iter().find_map(|(_, _, r)| r.time.as_ref()?.uncertainty.as_ref()?.host.clone()) {
        let assumed = if live { "the free lists each live run started from".to_string() } else { h.assumed.clone() };
        note += &format!("\nHost state the model assumed: {assumed}.\nIt cannot know which free \
            frames the host backs during a run (what ran before, what other processes and the other \
            CPU's per-CPU list free meanwhile): `time over the host states` is its time from every \
            frame backed to every frame dropped.");
    }
    writeln!(out)?;
    for para in note.split('\n') {
        for l in wrap(para, fit_width(), 0) {
            writeln!(out, "{l}")?;
        }
    }
    Ok(())
}
