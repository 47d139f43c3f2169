//! THP bloat and cost of a process, per VMA: how much of the memory in large folios is
//! zero-filled (so most likely never written: with 4 KiB pages it would not be resident), the
//! RSS the process would have with 4 KiB pages, page-table memory, and the partially mapped
//! large folios (queued for a deferred split, `mm/huge_memory.c: deferred_split_folio`).
//!
//! How: the census ([`crate::census`]) gives the address ranges mapped by pages of large
//! folios; pages drawn from them uniformly without replacement (a shuffled order, seeded) are
//! read through `/proc/PID/mem` (`fs/proc/base.c: mem_rw`, `access_remote_vm`: a read does not
//! change the page, though the walk may mark it accessed) and checked for all zero bytes, until
//! the time budget runs out or every page was read. The estimate per VMA is
//! `zero fraction × pages in large folios`, with the 95 % error of a sample without
//! replacement: `1.96 · sqrt(p(1-p)/n · (N-n)/(N-1)) · N` pages (0 when every page was read).
//! Page tables: `VmPTE` of `/proc/PID/status` (`fs/proc/task_mmu.c: task_mem`). A subpage that
//! was written with zeros counts as bloat too: contents cannot tell it from a never-written one.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use mm_types::prng::Prng;
use mm_types::PAGE_SIZE;
use serde::Serialize;

use crate::{io_err, LiveError, Result};

/// Bloat of one VMA (or of the whole process).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Bloat {
    /// KiB mapped by pages of large folios.
    pub large_kb: u64,
    /// Pages of those sampled, and how many were all zero.
    pub sampled_pages: u64,
    pub zero_pages_sampled: u64,
    /// Estimated zero-filled KiB in large folios, and its 95 % error (KiB).
    pub zero_kb: u64,
    pub zero_kb_error: u64,
    /// Rss minus the zero-filled subpages of large folios: the RSS with 4 KiB pages.
    pub rss_4k_kb: u64,
}

/// Bloat of a process.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct BloatReport {
    pub total: Bloat,
    /// Parallel to the VMAs given.
    pub per_vma: Vec<Bloat>,
    /// `VmPTE` (KiB).
    pub page_tables_kb: u64,
    /// Large folios partially mapped (waiting on the deferred split queue).
    pub partially_mapped_folios: u64,
    pub budget_ms: u64,
    pub elapsed_ms: f64,
    /// The budget ran out before every page was read (the figures are estimates).
    pub sampled: bool,
}

/// `(zero estimate, 95 % error)` in pages for `zeros` of `n` sampled among `total`.
pub fn estimate(zeros: u64, n: u64, total: u64) -> (f64, f64) {
    if n == 0 {
        return (0.0, total as f64);
    }
    let p = zeros as f64 / n as f64;
    let fpc = if total > 1 { (total - n) as f64 / (total - 1) as f64 } else { 0.0 };
    (p * total as f64, 1.96 * (p * (1.0 - p) / n as f64 * fpc).sqrt() * total as f64)
}

/// Sample the pages of `large_ranges` (per VMA) of `pid` within `budget`. `rss_kb` and
/// `partially_mapped` are per VMA, from smaps and the census.
pub fn sample_bloat(pid: i32, large_ranges: &[Vec<(u64, u64)>], rss_kb: &[u64], partially_mapped: u64, budget: Duration) -> Result<BloatReport> {
    let t0 = Instant::now();
    let path = format!("/proc/{pid}/mem");
    let mem = File::open(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => LiveError::NoSuchProcess { pid },
        _ => io_err("cannot open", &path, e),
    })?;
    // Every page of the large-folio ranges, as (vma, address); shuffled for sampling.
    let mut pages: Vec<(u32, u64)> = Vec::new();
    for (vi, ranges) in large_ranges.iter().enumerate() {
        for &(a, b) in ranges {
            pages.extend((a..b).step_by(PAGE_SIZE as usize).map(|va| (vi as u32, va)));
        }
    }
    let nv = large_ranges.len();
    let mut totals = vec![0u64; nv];
    for &(vi, _) in &pages {
        totals[vi as usize] += 1;
    }
    Prng::new(0x7468_706c_6162 ^ pid as u64).shuffle(&mut pages);
    let mut n = vec![0u64; nv];
    let mut zeros = vec![0u64; nv];
    let mut buf = vec![0u8; PAGE_SIZE as usize];
    let mut read = 0usize;
    for &(vi, va) in &pages {
        if read % 64 == 0 && t0.elapsed() >= budget {
            break;
        }
        read += 1;
        match mem.read_at(&mut buf, va) {
            Ok(k) if k == buf.len() => {}
            // Unmapped since the census (or not readable): not sampled.
            _ => continue,
        }
        n[vi as usize] += 1;
        if buf.iter().all(|&b| b == 0) {
            zeros[vi as usize] += 1;
        }
    }
    let kb = PAGE_SIZE / 1024;
    let mut per_vma = Vec::with_capacity(nv);
    let mut total = Bloat::default();
    let (mut zsum, mut var) = (0.0, 0.0);
    for vi in 0..nv {
        let (z, err) = estimate(zeros[vi], n[vi], totals[vi]);
        let b = Bloat {
            large_kb: totals[vi] * kb,
            sampled_pages: n[vi],
            zero_pages_sampled: zeros[vi],
            zero_kb: (z * kb as f64).round() as u64,
            zero_kb_error: (err * kb as f64).round() as u64,
            rss_4k_kb: rss_kb.get(vi).copied().unwrap_or(0).saturating_sub((z * kb as f64).round() as u64),
        };
        zsum += z;
        var += (err / 1.96).powi(2);
        total.large_kb += b.large_kb;
        total.sampled_pages += b.sampled_pages;
        total.zero_pages_sampled += b.zero_pages_sampled;
        total.rss_4k_kb += b.rss_4k_kb;
        per_vma.push(b);
    }
    total.zero_kb = (zsum * kb as f64).round() as u64;
    total.zero_kb_error = (1.96 * var.sqrt() * kb as f64).round() as u64;
    let status_path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&status_path).map_err(|e| io_err("cannot read", &status_path, e))?;
    let page_tables_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmPTE:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    Ok(BloatReport {
        total,
        per_vma,
        page_tables_kb,
        partially_mapped_folios: partially_mapped,
        budget_ms: budget.as_millis() as u64,
        elapsed_ms: t0.elapsed().as_secs_f64() * 1e3,
        sampled: read < pages.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_and_errors() {
        // Every page read: exact.
        assert_eq!(estimate(511, 512, 512), (511.0, 0.0));
        // Half zero, 100 of 10000 sampled: 5000 ± 1.96·sqrt(.25/100·9900/9999)·10000 = 975.1.
        let (z, e) = estimate(50, 100, 10_000);
        assert_eq!(z, 5000.0);
        assert!((e - 975.1).abs() < 0.1, "{e}");
        // Nothing sampled: the error is the whole population.
        assert_eq!(estimate(0, 0, 7), (0.0, 7.0));
    }
}
