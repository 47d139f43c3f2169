//! The views of a run beyond the totals, built from a finished model: the folio-size map of
//! every VMA (the shape `thplab observe` prints for a live process), the run at its largest Rss,
//! and the `--explain` log of the faults in one range.

use mm::debug::CensusReport;
use mm::model::explain::{ExplainLog, Got};
use mm::vma::vm;
use mm::Kernel;
use mm_types::{Order, PAGE_SIZE, PMD_ORDER};
use uapi::{Explain, ExplainedFault, Peak, VmaMap};

/// One entry per VMA of `k` (`pid` for the processes of a recording), with its census. The
/// heap is named as /proc/PID/maps names it (fs/proc/task_mmu.c: show_map_vma,
/// `vma_is_initial_heap`: the VMA overlaps [start_brk, brk)).
pub fn vma_maps(k: &Kernel, pid: Option<u32>) -> Vec<VmaMap> {
    let (start_brk, brk) = (k.start_brk(), k.brk());
    k.vmas()
        .map(|v| {
            let kind = if !v.is_modelled() {
                "placeholder"
            } else if v.inode().is_some() {
                "shmem"
            } else {
                "anon"
            };
            let c = if v.is_modelled() { k.census(&[(v.start, v.end)]) } else { CensusReport::default() };
            let bit = |b: u32, ch: char| if v.flags & b != 0 { ch } else { '-' };
            let perms = format!("{}{}{}{}", bit(vm::READ, 'r'), bit(vm::WRITE, 'w'), bit(vm::EXEC, 'x'), if v.flags & vm::SHARED != 0 { 's' } else { 'p' });
            VmaMap {
                start: format!("{:x}", v.start),
                end: format!("{:x}", v.end),
                perms,
                name: if kind == "anon" && v.start < brk && v.end > start_brk { "[heap]".to_string() } else { String::new() },
                kind: kind.to_string(),
                pid,
                rss_kb: c.rss_bytes / 1024,
                anon_huge_kb: c.anon_huge_bytes / 1024,
                census: c.census,
            }
        })
        .collect()
}

/// The peak of one model ([`Kernel::peak`]) as the schema's [`Peak`].
pub fn peak_of(k: &Kernel) -> Peak {
    let (rss_pages, census, max_nr_anon) = k.peak();
    let mut p = Peak { rss_bytes: rss_pages * PAGE_SIZE, anon_huge_bytes: census.anon_huge_bytes, census: census.census, ..Default::default() };
    for o in 1..=PMD_ORDER {
        if max_nr_anon[o as usize] > 0 {
            p.max_folios.insert(thp_abi::FolioSize::of(Order(o)), max_nr_anon[o as usize]);
        }
    }
    p
}

/// Several processes' peaks summed (each at its own peak: an upper bound of the whole's).
pub fn add_peak(total: &mut Peak, p: &Peak) {
    total.rss_bytes += p.rss_bytes;
    total.anon_huge_bytes += p.anon_huge_bytes;
    total.census.add(&p.census);
    for (size, n) in &p.max_folios {
        *total.max_folios.entry(size.clone()).or_default() += n;
    }
}

/// Parse `ADDR` or `ADDR-ADDR` (hex, `0x` optional; the end exclusive): the explained range.
/// One address explains its 4 KiB page.
pub fn parse_explain_range(s: &str) -> Result<(u64, u64), String> {
    let hex = |t: &str| {
        let t = t.trim();
        u64::from_str_radix(t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")).unwrap_or(t), 16)
            .map_err(|_| format!("--explain {s}: '{t}' is not a hex address; give ADDR or START-END, such as 0x7f0000200000 or 7f0000200000-7f0000400000"))
    };
    match s.split_once('-') {
        Some((a, b)) => {
            let (a, b) = (hex(a)?, hex(b)?);
            if b <= a {
                return Err(format!("--explain {s}: the end {b:#x} is not above the start {a:#x}"));
            }
            Ok((a, b))
        }
        None => {
            let a = hex(s)? & !(PAGE_SIZE - 1);
            Ok((a, a + PAGE_SIZE))
        }
    }
}

/// Add one model's explain log (`pid` for recordings) to the schema's [`Explain`].
pub fn add_explain(out: &mut Explain, log: &ExplainLog, pid: Option<u32>) {
    out.start = format!("{:#x}", log.start);
    out.end = format!("{:#x}", log.end);
    out.more_faults += log.more;
    for f in &log.faults {
        let got = match f.got {
            Got::Folio(o) => o.label(),
            Got::ZeroPage => "zero page".to_string(),
            Got::HugeZeroPage => "huge zero page".to_string(),
        };
        for (o, r) in &f.refused {
            *out.totals.entry(thp_abi::SizeDir::of(*o)).or_default().entry((*r).into()).or_default() += 1;
        }
        if out.faults.len() < Explain::MAX_FAULTS {
            out.faults.push(ExplainedFault {
                pid,
                addr: format!("{:#x}", f.addr),
                access: if f.write { "write" } else { "read" }.to_string(),
                got,
                refused: f.refused.iter().map(|(o, r)| (o.sysfs_dir(), r.name().to_string())).collect(),
            });
        } else {
            out.more_faults += 1;
        }
    }
}

/// Start keeping the decisions of faults in `[start, end)`.
pub fn start_explaining(k: &mut Kernel, range: Option<(u64, u64)>) {
    if let Some((s, e)) = range {
        k.stats_mut().explain = Some(Box::new(ExplainLog::new(s, e)));
    }
}
