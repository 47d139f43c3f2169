//! The run result: one JSON object that `thplab sim` and `thplab live` both print.
//!
//! Schema `thplab-run/1`, documented in docs/results-schema.md. Counter names are the kernel's;
//! a consumer cannot tell from the counters whether the model or the kernel produced them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub const RESULT_SCHEMA: &str = "thplab-run/1";

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessStats {
    /// Minor faults of the workload (getrusage ru_minflt delta).
    pub minflt: u64,
    /// Resident anonymous memory at the end (smaps_rollup Rss of the workload's mappings).
    pub rss_bytes: u64,
    /// PMD-mapped anonymous memory at the end (AnonHugePages).
    pub anon_huge_bytes: u64,
    /// Bytes in mapped folios that the workload never touched (model only: the kernel cannot
    /// see it; the live harness leaves it out).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub bloat_bytes: Option<u64>,
}

/// Folios of one size mapped by the process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CensusEntry {
    /// Distinct folios with at least one page mapped.
    pub folios: u64,
    /// Folios mapped by a PMD entry.
    pub pmd_mapped: u64,
    /// Folios mapped by PTEs.
    pub pte_mapped: u64,
    /// PTE-mapped folios of which some pages are not mapped in this process.
    pub partially_mapped: u64,
}

/// Which folio sizes a process maps, by size label (`4kB`, `64kB`, `2048kB`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Census {
    pub sizes: BTreeMap<String, CensusEntry>,
    /// PTEs that map the shared 4 KiB zero page.
    pub zero_page_ptes: u64,
    /// PMDs that map the huge zero folio.
    pub huge_zero_pmds: u64,
}

impl Census {
    /// `"64kB" -> folio count`, the `folios` section of the result.
    pub fn folio_counts(&self) -> BTreeMap<String, u64> {
        self.sizes.iter().filter(|(_, e)| e.folios > 0).map(|(k, e)| (k.clone(), e.folios)).collect()
    }
}

/// A region of the workload and where it was placed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionPlacement {
    pub name: String,
    pub start: u64,
    pub len: u64,
}

/// What one syscall of the workload returned.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallResult {
    /// Line of the workload.
    pub line: usize,
    /// `madvise(collapse)`, `munmap`, `mprotect(r)`, `brk`, `prctl(thp_disable)`.
    pub call: String,
    /// `0`, or the errno name (`EINVAL`); for brk, the new break in hex.
    pub ret: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub schema: String,
    /// `sim` or `live`.
    pub source: String,
    pub workload: String,
    /// The resolved settings, sysfs path → value.
    pub settings: BTreeMap<String, String>,
    /// `/proc/vmstat` `thp_*` deltas.
    pub vmstat: BTreeMap<String, i64>,
    /// `hugepages-<N>kB` → stats file → delta.
    pub mthp: BTreeMap<String, BTreeMap<String, i64>>,
    pub process: ProcessStats,
    /// Folio size → folios mapped at the end.
    pub folios: BTreeMap<String, u64>,
    pub census: Census,
    /// Model only: `hugepages-<N>kB` → reason → how often a fault did not get that size.
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub fallbacks: BTreeMap<String, BTreeMap<String, u64>>,
    pub regions: Vec<RegionPlacement>,
    /// /proc/meminfo lines that the run moved, in kB: `Shmem`, `ShmemHugePages`, `ShmemPmdMapped`
    /// (model: the level at the end; live: the system-wide delta).
    #[serde(default)]
    pub meminfo: BTreeMap<String, i64>,
    /// The return of every non-touch operation, in order.
    #[serde(default)]
    pub calls: Vec<CallResult>,
    /// Model only: scan results, buddy state, page-table pages.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub model: Option<serde_json::Value>,
    /// Live only: kernel release, runs, spread and noise.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub live: Option<serde_json::Value>,
}

impl RunResult {
    pub fn new(source: &str, workload: &str) -> RunResult {
        RunResult { schema: RESULT_SCHEMA.into(), source: source.into(), workload: workload.into(), ..Default::default() }
    }
}

/// Sort key that orders `4kB < 64kB < 2048kB` and `hugepages-16kB < hugepages-2048kB`.
pub fn size_sort_key(label: &str) -> u64 {
    let digits: String = label.chars().filter(|c| c.is_ascii_digit()).collect();
    digits.parse().unwrap_or(u64::MAX)
}
