//! `--sample MS`: the run's state at each interval (`Timeline`, `TimelineSample`).

use super::*;

/// `--sample MS`: the state of the run's processes every `interval_ms`, from the start of its
/// first operation (the model: its simulated clock; live: CLOCK_MONOTONIC from `go`). Sample n
/// is due at n × interval_ms, n ≥ 1; the run's end is not a sample (its counters are the
/// result's).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    pub interval_ms: u64,
    pub samples: Vec<TimelineSample>,
}

/// One sample of a [`Timeline`]: the smaps_rollup fields and the folio census summed over the
/// run's live processes (their regions), and the khugepaged counters since the run started.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimelineSample {
    /// When it was taken, ms since the start (live: late by the time the previous sample took).
    pub t_ms: f64,
    /// `Rss`, `AnonHugePages`, `ShmemPmdMapped` (kB).
    pub rss_kb: u64,
    pub anon_huge_pages_kb: u64,
    pub shmem_pmd_mapped_kb: u64,
    /// Folio size → folios mapped (the census).
    #[serde(serialize_with = "thp_abi::keys::serialize_by_name")]
    pub folios: BTreeMap<FolioSize, u64>,
    /// `khugepaged/pages_collapsed`, `khugepaged/full_scans` and `thp_collapse_alloc` since
    /// the start (live: system-wide).
    pub pages_collapsed: i64,
    pub full_scans: i64,
    pub thp_collapse_alloc: i64,
}
