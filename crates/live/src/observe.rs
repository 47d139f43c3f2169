//! `thplab observe`: the folio census of every VMA of a running process, from
//! `/proc/PID/smaps` (`fs/proc/task_mmu.c: show_smap`), `/proc/PID/pagemap` and
//! `/proc/kpageflags` (see [`crate::census`]).

use std::fmt;

use serde::Serialize;
use uapi::result::size_sort_key;
use uapi::Census;

use crate::census::census_of_ranges;
use crate::procfs::{comm, read_smaps};
use crate::Result;

/// One VMA and the folios that back it.
#[derive(Clone, Debug, Serialize)]
pub struct ObservedVma {
    pub start: String,
    pub end: String,
    pub perms: String,
    pub name: String,
    pub rss_kb: u64,
    pub anon_huge_kb: u64,
    pub census: Census,
}

/// Every VMA of a process, with the total.
#[derive(Clone, Debug, Serialize)]
pub struct ObserveReport {
    pub pid: i32,
    pub comm: String,
    pub vmas: Vec<ObservedVma>,
    pub total: Census,
    pub rss_kb: u64,
    pub anon_huge_kb: u64,
    pub census_ms: f64,
}

/// Census of every VMA of `pid`. A process that does not exist is
/// [`crate::LiveError::NoSuchProcess`].
pub fn observe(pid: i32) -> Result<ObserveReport> {
    let vmas = read_smaps(pid)?;
    let rep = census_of_ranges(pid, &[(0, u64::MAX)], &vmas)?;
    let out: Vec<ObservedVma> = vmas
        .iter()
        .zip(rep.per_vma)
        .map(|(v, census)| ObservedVma {
            start: format!("{:x}", v.start),
            end: format!("{:x}", v.end),
            perms: v.perms.clone(),
            name: v.name.clone(),
            rss_kb: v.rss_kb,
            anon_huge_kb: v.anon_huge_kb,
            census,
        })
        .collect();
    Ok(ObserveReport {
        pid,
        comm: comm(pid),
        rss_kb: vmas.iter().map(|v| v.rss_kb).sum(),
        anon_huge_kb: vmas.iter().map(|v| v.anon_huge_kb).sum(),
        vmas: out,
        total: rep.total,
        census_ms: rep.elapsed.as_secs_f64() * 1e3,
    })
}

impl fmt::Display for ObserveReport {
    /// One row per VMA: address range, perms, Rss, folios per size (`64kB` ...), how many of
    /// them are PMD-mapped and partially mapped, zero-page PTEs and huge-zero PMDs, name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sizes: Vec<String> = self.total.sizes.keys().cloned().collect();
        sizes.sort_by_key(|s| size_sort_key(s));
        writeln!(
            f,
            "pid {} ({}): {} VMAs, Rss {} kB, AnonHugePages {} kB (census {:.1} ms)",
            self.pid,
            self.comm,
            self.vmas.len(),
            self.rss_kb,
            self.anon_huge_kb,
            self.census_ms
        )?;
        let mut head = format!("{:<33} {:<4} {:>10}", "address range", "perm", "Rss");
        for s in &sizes {
            head += &format!(" {:>8}", s);
        }
        head += &format!(" {:>6} {:>7} {:>6} {:>6}  name", "pmd", "partial", "zero", "hzero");
        writeln!(f, "{head}")?;
        let row = |f: &mut fmt::Formatter<'_>, range: &str, perms: &str, rss: u64, c: &Census, name: &str| {
            let mut line = format!("{:<33} {:<4} {:>7} kB", range, perms, rss);
            for s in &sizes {
                let n = c.sizes.get(s).map(|e| e.folios).unwrap_or(0);
                line += &format!(" {:>8}", if n == 0 { "-".to_string() } else { n.to_string() });
            }
            let pmd: u64 = c.sizes.values().map(|e| e.pmd_mapped).sum();
            let partial: u64 = c.sizes.values().map(|e| e.partially_mapped).sum();
            let dash = |n: u64| if n == 0 { "-".to_string() } else { n.to_string() };
            line += &format!(
                " {:>6} {:>7} {:>6} {:>6}  {}",
                dash(pmd),
                dash(partial),
                dash(c.zero_page_ptes),
                dash(c.huge_zero_pmds),
                name
            );
            writeln!(f, "{}", line.trim_end())
        };
        for v in &self.vmas {
            let name = if v.name.is_empty() { "[anon]" } else { v.name.as_str() };
            row(f, &format!("{}-{}", v.start, v.end), &v.perms, v.rss_kb, &v.census, name)?;
        }
        row(f, "total", "", self.rss_kb, &self.total, "")
    }
}
