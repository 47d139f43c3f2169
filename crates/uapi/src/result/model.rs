//! The `model` section (`ModelSection`): what the model alone knows of a workload run
//! (`ModelRun`, its khugepaged `ModelKhugepaged`) or of the replay of a recording
//! (`ReplayReport`, in `replay`).

use super::*;

/// The `model` section: what the model alone knows. A workload run fills [`ModelRun`] (its
/// fields sit directly in `model`), a replayed recording fills `replay` only.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelSection {
    /// A workload run's machine state at the end (None for a recording).
    #[serde(flatten)]
    pub run: Option<ModelRun>,
    /// A recording's replay (None for a workload).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub replay: Option<ReplayReport>,
}

/// The model's state at the end of a workload run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelRun {
    /// `enum scan_result` name (`SCAN_SUCCEED`, `SCAN_EXCEED_NONE_PTE`, ...) → PMD ranges that
    /// MADV_COLLAPSE or khugepaged scanned with that outcome, summed over every mm.
    pub scan_results: BTreeMap<String, u64>,
    /// Free pages in the zone (`zone_page_state(zone, NR_FREE_PAGES)`).
    pub nr_free_pages: u64,
    /// Free blocks per order 0..=MAX_PAGE_ORDER, the columns of /proc/buddyinfo.
    pub buddyinfo: Vec<u64>,
    /// Page-table pages allocated (`PageTables` in /proc/meminfo, as a count of pages).
    pub pgtable_pages: u64,
    /// VMAs of the current mm (`mm->map_count`).
    pub vmas: u64,
    /// Folios on the deferred split queue (`ds_queue->split_queue_len`).
    pub deferred_split_queue: u64,
    /// Pages touched without a fault (the page was already mapped).
    pub accesses_without_fault: u64,
    /// The khugepaged daemon on the model's clock.
    pub khugepaged: ModelKhugepaged,
    /// The compaction events of /proc/vmstat the run moved (`compact_stall`, `compact_fail`,
    /// `compact_success`, `compact_migrate_scanned`, `compact_free_scanned`, `compact_isolated`,
    /// `compact_daemon_*`, `pgmigrate_success`): only those not zero, absent when none moved.
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub compaction: BTreeMap<String, u64>,
    /// The contiguous page hint's chunks (`--policy contig-hint`, model-only); absent without it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub contig_hint: Option<ContigHintStats>,
}

/// `model.contig_hint`: the contiguous page hint's 64 KiB chunks over the run, every mm's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContigHintStats {
    /// Chunks allocated (first faults in a 64 KiB range that got 64 KiB).
    pub chunks_allocated: u64,
    /// Chunks mapped whole at their fill-th fault (one contpte block each).
    pub chunks_completed: u64,
    /// Chunks split by a change of their mapping (munmap, MADV_DONTNEED, mprotect, mremap, COW,
    /// swap-out, migration).
    pub chunks_split: u64,
    /// First faults whose 64 KiB allocation failed (order 0 then).
    pub alloc_failed: u64,
    /// Chunks tracked at the end: filling, completed.
    pub filling: u64,
    pub completed: u64,
    /// Memory allocated to chunks but not mapped, at the end and at its largest.
    pub unmapped_bytes: u64,
    pub peak_unmapped_bytes: u64,
}

/// khugepaged in the model: the current mm's registration and the daemon's sysfs counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelKhugepaged {
    /// The current mm is on khugepaged's list (`mm_flags` MMF_VM_HUGEPAGE, set by
    /// `khugepaged_enter_vma`).
    pub registered: bool,
    /// Times the daemon woke (`khugepaged_wait_work` ended) before the run's clock stopped.
    pub wakeups: u64,
    /// PMD ranges `hpage_collapse_scan_pmd` scanned.
    pub pmds_scanned: u64,
    /// `khugepaged/pages_collapsed`: PMD-size collapses by the daemon (not MADV_COLLAPSE).
    pub pages_collapsed: u64,
    /// `khugepaged/full_scans`: passes over the whole list of mms.
    pub full_scans: u64,
    /// Times a wake-up slept `alloc_sleep_millisecs` after a failed huge page allocation
    /// (`khugepaged_alloc_sleep`; `thp_collapse_alloc_failed` counts the failures).
    #[serde(default)]
    pub alloc_sleeps: u64,
    /// `--policy collapse-hints|global-hints` only: the hint source and the hints' work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hints: Option<ModelHints>,
}

/// The hint policies' work (docs/collapse-hints.md): the source's passes and modelled CPU
/// time, the queues' counts, and khugepaged's hint / non-hint collapses. Model-only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelHints {
    /// MGLRU agings, or DAMON aggregations whose findings went to the policy.
    pub source_passes: u64,
    /// The source's modelled CPU time (on its own CPU: not in the program's time).
    pub source_cpu_ns: u64,
    /// Hints queued (`khugepaged_add_collapse_hint`), merged into one already queued, dropped
    /// at the per-mm limit.
    pub queued: u64,
    pub deduplicated: u64,
    pub dropped: u64,
    /// Hints a newer pass of the source replaced before khugepaged served them.
    #[serde(default)]
    pub expired: u64,
    /// Hints khugepaged took (each once), and of them: collapsed, and vanished (mm, VMA or
    /// eligibility gone: not scanned).
    pub served: u64,
    pub hint_collapses: u64,
    pub vanished: u64,
    /// khugepaged's collapses that were not hints (`pages_collapsed - hint_collapses`).
    pub non_hint_collapses: u64,
    /// PMD folios split on the policy's proposal (global hints).
    pub splits: u64,
}
