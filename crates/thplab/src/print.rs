//! Human-readable output: tables that speak procfs, and the progress bar.

use std::io::{self, Write};

use uapi::result::size_sort_key;
use uapi::{RunResult, ThpSettings};

/// A progress bar over simulated accesses, shown only on a terminal for long runs.
pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    pub fn new(show: bool, what: &str) -> Progress {
        use std::io::IsTerminal;
        let bar = (show && io::stderr().is_terminal()).then(|| {
            let b = indicatif::ProgressBar::new(0);
            b.set_style(
                indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} accesses ({per_sec})")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            b.set_message(what.to_string());
            b
        });
        Progress { bar }
    }

    pub fn event(&mut self, e: sim::SimEvent) {
        if let (Some(b), sim::SimEvent::Progress { accesses_done, accesses_total }) = (&self.bar, e) {
            b.set_length(accesses_total);
            b.set_position(accesses_done);
        }
    }

    pub fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

fn kb(bytes: u64) -> String {
    format!("{} kB", bytes / 1024)
}

fn sorted_sizes<'a, V>(m: impl Iterator<Item = (&'a String, V)>) -> Vec<(&'a String, V)> {
    let mut v: Vec<_> = m.collect();
    v.sort_by_key(|(k, _)| size_sort_key(k));
    v
}

/// The `thplab sim` table.
pub fn result_table(out: &mut impl Write, r: &RunResult, s: &ThpSettings) -> io::Result<()> {
    writeln!(out, "{} ({} of Linux 6.18)", r.workload, if r.source == "sim" { "model" } else { "live kernel" })?;
    writeln!(out, "settings: {}", s.summary())?;
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
    writeln!(out)?;
    writeln!(out, "folios mapped at the end")?;
    writeln!(out, "  {:<8} {:>10} {:>11} {:>11} {:>17}", "size", "folios", "pmd-mapped", "pte-mapped", "partially-mapped")?;
    for (size, e) in sorted_sizes(r.census.sizes.iter()) {
        writeln!(out, "  {:<8} {:>10} {:>11} {:>11} {:>17}", size, e.folios, e.pmd_mapped, e.pte_mapped, e.partially_mapped)?;
    }
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
    writeln!(out, "/sys/kernel/mm/transparent_hugepage/hugepages-<size>/stats (non-zero)")?;
    for (dir, stats) in sorted_sizes(r.mthp.iter()) {
        let moved: Vec<String> = stats.iter().filter(|(_, v)| **v != 0).map(|(k, v)| format!("{k} {v}")).collect();
        if !moved.is_empty() {
            writeln!(out, "  {dir:<17} {}", moved.join("  "))?;
        }
    }
    if !r.fallbacks.is_empty() {
        writeln!(out)?;
        writeln!(out, "fallbacks (model only): faults that did not get a size, and why")?;
        for (dir, reasons) in sorted_sizes(r.fallbacks.iter()).into_iter().rev() {
            let rs: Vec<String> = reasons.iter().map(|(k, v)| format!("{k} {v}")).collect();
            writeln!(out, "  {dir:<17} {}", rs.join("  "))?;
        }
    }
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

/// Several results in columns (the README's main command).
pub fn side_by_side(out: &mut impl Write, cols: &[(String, String, RunResult)]) -> io::Result<()> {
    let w = if cols.len() > 3 { 13 } else { 16 };
    write!(out, "{:<42}", "")?;
    for (label, _, _) in cols {
        write!(out, "{label:>w$}")?;
    }
    writeln!(out)?;
    let row = |out: &mut dyn Write, name: &str, f: &dyn Fn(&RunResult) -> String| -> io::Result<()> {
        write!(out, "{name:<42}")?;
        for (_, _, r) in cols {
            write!(out, "{:>w$}", f(r))?;
        }
        writeln!(out)
    };
    row(out, "minflt", &|r| r.process.minflt.to_string())?;
    row(out, "Rss", &|r| kb(r.process.rss_bytes))?;
    row(out, "AnonHugePages", &|r| kb(r.process.anon_huge_bytes))?;
    row(out, "thp_fault_alloc", &|r| r.vmstat.get("thp_fault_alloc").copied().unwrap_or(0).to_string())?;
    let mut dirs: Vec<&String> = cols.iter().flat_map(|(_, _, r)| r.mthp.keys()).collect();
    dirs.sort_by_key(|d| size_sort_key(d));
    dirs.dedup();
    for d in dirs {
        let any = cols.iter().any(|(_, _, r)| r.mthp.get(d).and_then(|s| s.get("anon_fault_alloc")).copied().unwrap_or(0) != 0);
        if any {
            row(out, &format!("{d}/stats/anon_fault_alloc"), &|r| {
                r.mthp.get(d).and_then(|s| s.get("anon_fault_alloc")).copied().unwrap_or(0).to_string()
            })?;
        }
    }
    let mut sizes: Vec<&String> = cols.iter().flat_map(|(_, _, r)| r.folios.keys()).collect();
    sizes.sort_by_key(|d| size_sort_key(d));
    sizes.dedup();
    for s in sizes {
        row(out, &format!("folios {s}"), &|r| r.folios.get(s).copied().unwrap_or(0).to_string())?;
    }
    if cols.iter().any(|(_, _, r)| r.source == "live") {
        writeln!(out, "\nthp_* and hugepages-*/stats are system-wide: on a busy machine the live columns include other")?;
        writeln!(out, "processes' allocations. minflt, Rss, AnonHugePages and the folios are the process's own.")?;
    }
    writeln!(out)?;
    let mut seen = Vec::new();
    for (label, summary, _) in cols {
        let key = label.split(' ').next().unwrap_or(label);
        if !seen.contains(&key) {
            seen.push(key);
            writeln!(out, "{key}: {summary}")?;
        }
    }
    Ok(())
}
