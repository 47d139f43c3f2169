//! `thplab observe`: the folio census of every VMA of a running process, from
//! `/proc/PID/smaps` (`fs/proc/task_mmu.c: show_smap`), `/proc/PID/pagemap` and
//! `/proc/kpageflags` (see [`crate::census`]).

use std::fmt;

use serde::Serialize;
use thp_abi::Census;

use std::time::Duration;

use crate::bloat::{sample_bloat, Bloat, BloatReport};
use crate::census::census_of_ranges;
use crate::procfs::{comm, read_smaps, Vma};
use crate::Result;

/// One VMA and the folios that back it: the schema's [`uapi::VmaMap`] (which the model's
/// `vmas` share, fields flattened in JSON), plus its bloat with `--budget`.
#[derive(Clone, Debug, Serialize)]
pub struct ObservedVma {
    #[serde(flatten)]
    pub map: uapi::VmaMap,
    /// With `--budget`: zero-filled memory in large folios and the RSS with 4 KiB pages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bloat: Option<Bloat>,
}

impl std::ops::Deref for ObservedVma {
    type Target = uapi::VmaMap;
    fn deref(&self) -> &uapi::VmaMap {
        &self.map
    }
}

/// Every VMA of a process, with the total.
#[derive(Clone, Debug, Serialize)]
pub struct ObserveReport {
    /// `thplab-observe/1` (docs/results-schema.md).
    pub schema: &'static str,
    pub pid: i32,
    pub comm: String,
    pub vmas: Vec<ObservedVma>,
    pub total: Census,
    pub rss_kb: u64,
    pub anon_huge_kb: u64,
    pub census_ms: f64,
    /// With `--budget`: bloat and cost of the process ([`crate::bloat`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bloat: Option<BloatReport>,
}

/// Whether a pid names a process with a user address space, from `/proc/PID/stat`
/// (`fs/proc/array.c: do_task_stat`: field 3 the state, field 9 the flags, `PF_KTHREAD`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observable {
    Yes,
    /// No such process.
    Missing,
    /// Exited, not reaped (state `Z`): its mm is gone. The command name is given.
    Zombie(String),
    /// A kernel thread (`PF_KTHREAD`): it has no user address space.
    KernelThread(String),
}

/// `PF_KTHREAD` (include/linux/sched.h).
const PF_KTHREAD: u64 = 0x0020_0000;

/// See [`Observable`].
pub fn observable(pid: i32) -> Observable {
    if pid <= 0 {
        return Observable::Missing;
    }
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return Observable::Missing };
    let comm = match (text.find('('), text.rfind(')')) {
        (Some(a), Some(b)) if a < b => text[a + 1..b].to_string(),
        _ => String::new(),
    };
    let state = text.rfind(')').and_then(|b| text[b + 1..].split_whitespace().next()).unwrap_or("");
    if state == "Z" || state == "X" {
        return Observable::Zombie(comm);
    }
    if crate::procfs::stat_field(&text, 9).is_some_and(|f| f & PF_KTHREAD != 0) {
        return Observable::KernelThread(comm);
    }
    Observable::Yes
}

/// One smaps VMA and its census in the schema's shape (as /proc/PID/maps prints the range).
pub fn vma_map(v: &Vma, census: Census) -> uapi::VmaMap {
    uapi::VmaMap {
        start: format!("{:x}", v.start),
        end: format!("{:x}", v.end),
        perms: v.perms.clone(),
        kind: uapi::result::vma_kind_of_name(&v.name).to_string(),
        pid: None,
        name: v.name.clone(),
        rss_kb: v.rss_kb,
        anon_huge_kb: v.anon_huge_kb,
        census,
    }
}

/// Census of every VMA of `pid`. A process that does not exist is
/// [`crate::LiveError::NoSuchProcess`].
pub fn observe(pid: i32) -> Result<ObserveReport> {
    observe_with(pid, None)
}

/// [`observe`], and with `bloat_budget` the bloat of every VMA sampled within that time.
pub fn observe_with(pid: i32, bloat_budget: Option<Duration>) -> Result<ObserveReport> {
    let vmas = read_smaps(pid)?;
    let rep = census_of_ranges(pid, &[(0, u64::MAX)], &vmas)?;
    let bloat = match bloat_budget {
        Some(b) => {
            let rss: Vec<u64> = vmas.iter().map(|v| v.rss_kb).collect();
            let partial = rep.total.sizes.values().map(|e| e.partially_mapped).sum();
            Some(sample_bloat(pid, &rep.large_ranges, &rss, partial, b)?)
        }
        None => None,
    };
    let out: Vec<ObservedVma> = vmas
        .iter()
        .zip(rep.per_vma)
        .enumerate()
        .map(|(i, (v, census))| ObservedVma {
            bloat: bloat.as_ref().and_then(|b| b.per_vma.get(i).cloned()),
            map: vma_map(v, census),
        })
        .collect();
    Ok(ObserveReport {
        schema: "thplab-observe/1",
        pid,
        comm: comm(pid),
        rss_kb: vmas.iter().map(|v| v.rss_kb).sum(),
        anon_huge_kb: vmas.iter().map(|v| v.anon_huge_kb).sum(),
        vmas: out,
        total: rep.total,
        census_ms: rep.elapsed.as_secs_f64() * 1e3,
        bloat,
    })
}

impl fmt::Display for ObserveReport {
    /// One row per VMA: address range, perms, Rss, folios per size (`64kB` ...), how many of
    /// them are PMD-mapped and partially mapped, zero-page PTEs and huge-zero PMDs, name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
        let maps: Vec<uapi::VmaMap> = self.vmas.iter().map(|v| v.map.clone()).collect();
        // `{:#}` (`observe --wide`): the table at its full width.
        let width = (!f.alternate()).then_some(report::text::TEXT_WIDTH);
        write!(f, "{}", report::text::vma_table_fit(&maps, &self.total, self.rss_kb, width))?;
        if let Some(b) = &self.bloat {
            let t = &b.total;
            writeln!(f, "bloat: {} kB (±{} kB, 95 %) of {} kB in large folios is zero-filled", t.zero_kb, t.zero_kb_error, t.large_kb)?;
            writeln!(f, "  Rss with 4 KiB pages ≈ {} kB (now {} kB); page tables (VmPTE) {} kB", t.rss_4k_kb, self.rss_kb, b.page_tables_kb)?;
            writeln!(f, "  partially mapped large folios (deferred split): {}", b.partially_mapped_folios)?;
            writeln!(
                f,
                "  {} of {} pages read in {:.0} ms{}",
                t.sampled_pages,
                t.large_kb / 4,
                b.elapsed_ms,
                if b.sampled { format!(" (sampled: budget {} ms)", b.budget_ms) } else { String::new() }
            )?;
            // Per VMA with large folios: a table.
            let mut cells = vec![["  address range", "zero-filled kB", "±kB (95 %)", "in large folios kB", "Rss kB", "with 4 KiB pages kB"].map(String::from).to_vec()];
            for v in &self.vmas {
                if let Some(vb) = v.bloat.as_ref().filter(|vb| vb.large_kb > 0) {
                    let n = |x: u64| x.to_string();
                    cells.push(vec![format!("  {}-{}", v.start, v.end), n(vb.zero_kb), n(vb.zero_kb_error), n(vb.large_kb), n(v.rss_kb), n(vb.rss_4k_kb)]);
                }
            }
            if cells.len() > 1 {
                for l in report::text::layout(&cells, &[true, false, false, false, false, false]) {
                    writeln!(f, "{l}")?;
                }
            }
        }
        Ok(())
    }
}
