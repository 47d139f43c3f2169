//! A process's figures: minflt, Rss and AnonHugePages of the run's memory (`ProcessStats`),
//! each process of a workload that forks (`ProcResult`), and its direct I/O (`IoResult`).

use super::*;

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
    /// Major faults (swap-ins); only under memory pressure (`--memory-max`, `--swap`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub majflt: Option<u64>,
}

/// One process (or thread) of a workload that forks or starts threads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcResult {
    /// `main`, or the name its `fork NAME` gave it.
    pub name: String,
    /// Its `exit` ran: `minflt` counts its whole life; Rss and census are not taken (its
    /// memory is gone).
    pub exited: bool,
    /// Minor faults since its fork (main: since the start); Rss and AnonHugePages at the end.
    pub process: ProcessStats,
    /// Folios its page tables map at the end (empty once exited).
    pub census: Census,
    /// Model only: write faults on pages shared by fork that copied the page, and that reused
    /// it (`wp_page_copy`, `wp_page_reuse`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cow_copied: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cow_reused: Option<u64>,
    /// A thread or a vfork child: the process whose mm it runs in (`main`). Its `minflt` is its
    /// own (the kernel counts faults per task); its Rss and census are that shared mm's.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub shares_mm_with: Option<String>,
}

/// The direct I/O of a run (`read_direct`): each read pins its buffer with
/// `pin_user_pages_fast` and unpins it at completion.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IoResult {
    /// read(2) calls.
    pub direct_reads: u64,
    pub bytes: u64,
    /// Folio runs pinned, summed over the reads.
    pub pinned_folios: u64,
    /// Pages pinned through PTEs and through PMD leaves, summed over the reads.
    pub pinned_pte_pages: u64,
    pub pinned_pmd_pages: u64,
    /// Write faults the pinning took (also in `process.minflt`).
    pub pin_faults: u64,
    /// With `sim --profile FILE` whose profile has `[pin]`: the pin + unpin time of all the
    /// reads, ns (`folios × per_folio_ns + pte_pages × per_page_ns + pmd_pages × per_pmd_page_ns`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pin_ns: Option<f64>,
}
