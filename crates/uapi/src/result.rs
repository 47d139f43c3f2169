//! The run result: one JSON object that `thplab sim` and `thplab live` both print.
//!
//! Schema `thplab-run/2`, documented in docs/results-schema.md. Counter names are the kernel's;
//! a consumer cannot tell from the counters whether the model or the kernel produced them. What
//! only one side knows is in the typed sections [`ModelSection`] and [`LiveSection`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thp_abi::{FallbackKey, FolioSize, KnobPath, MeminfoKey, MthpStatKey, SizeDir, VmStatKey};

pub const RESULT_SCHEMA: &str = "thplab-run/2";

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

// The folio census is the kernel's ABI: thp_abi::census.
use thp_abi::census::Census;

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
    pub settings: BTreeMap<KnobPath, String>,
    /// `/proc/vmstat` `thp_*` deltas.
    pub vmstat: BTreeMap<VmStatKey, i64>,
    /// `hugepages-<N>kB` → stats file → delta.
    #[serde(serialize_with = "thp_abi::keys::serialize_by_name")]
    pub mthp: BTreeMap<SizeDir, BTreeMap<MthpStatKey, i64>>,
    pub process: ProcessStats,
    /// Folio size → folios mapped at the end.
    #[serde(serialize_with = "thp_abi::keys::serialize_by_name")]
    pub folios: BTreeMap<FolioSize, u64>,
    pub census: Census,
    /// Model only: `hugepages-<N>kB` → reason → how often a fault did not get that size.
    /// Always written (empty in live results and when no fault fell back).
    #[serde(default)]
    #[serde(serialize_with = "thp_abi::keys::serialize_by_name")]
    pub fallbacks: BTreeMap<SizeDir, BTreeMap<FallbackKey, u64>>,
    pub regions: Vec<RegionPlacement>,
    /// /proc/meminfo lines that the run moved, in kB: `Shmem`, `ShmemHugePages`, `ShmemPmdMapped`
    /// (model: the level at the end; live: the system-wide delta).
    #[serde(default)]
    pub meminfo: BTreeMap<MeminfoKey, i64>,
    /// The return of every non-touch operation, in order.
    #[serde(default)]
    pub calls: Vec<CallResult>,
    /// Model only: scan results, buddy state, page-table pages, khugepaged; for a recording,
    /// what the replay did.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub model: Option<ModelSection>,
    /// Live only: kernel release, runs, spread and noise; for a program, its processes.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub live: Option<LiveSection>,
    /// Model only: the folio-size map, one entry per VMA at the end of the run (for a
    /// recording, each process's VMAs at its exit), in the shape `thplab observe` prints.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub vmas: Vec<VmaMap>,
    /// Model only: the process at its largest Rss (for a recording, the sum of each process's
    /// peak), with the census taken then.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub peak: Option<Peak>,
    /// Model only, with `--explain`: every fault in the explained range and why each larger
    /// order was refused.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub explain: Option<Explain>,
    /// Model only, with `--profile`: the run's time from the profile's `[fault]` costs.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub time: Option<TimeEstimate>,
    /// Model only, when the workload has `access` statements: the TLB model's counts and time
    /// estimate per region and in total (docs/tlb-model.md).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub accesses: Option<AccessReport>,
    /// Model only, when the workload has `read_direct` statements: what the reads pinned, and
    /// with `sim --profile` what that costs.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub io: Option<IoResult>,
    /// When the workload forks: every process, `main` first. The top-level `process`,
    /// `folios` and `census` are then `main`'s.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub processes: Vec<ProcResult>,
    /// With `--sample MS`: the run's state every MS ms, model (on its clock) and live (on the
    /// wall clock) alike.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub timeline: Option<Timeline>,
    /// The workload's `repeat DURATION` blocks, in the order they ran, and how many
    /// iterations each ran (model: on the simulated clock; live: on CLOCK_MONOTONIC).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub repeats: Vec<RepeatRun>,
}

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

/// One `repeat DURATION { … }` block of a workload as it ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepeatRun {
    /// The line of its `repeat`.
    pub line: usize,
    /// The duration it was given, ns.
    pub duration_ns: u64,
    /// Times its block ran: each started while the clock was before its start + duration.
    pub iterations: u64,
}

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
}

/// `model.replay`: what the replay of a recording modelled, passed through and could not do.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayReport {
    /// Processes (thread groups) in the recording.
    pub processes: u64,
    /// Process images (a process between its execve and its exit or next execve).
    pub images: u64,
    /// Records replayed.
    pub events: u64,
    /// Page faults recorded.
    pub recorded_faults: u64,
    /// Recorded faults in modelled memory that the model says still fault under the settings.
    pub modelled_faults: u64,
    /// Recorded faults outside the memory the model backs, counted as recorded.
    pub passthrough_faults: u64,
    /// Recorded faults in modelled memory that the model could not resolve (SIGSEGV/SIGBUS in
    /// the model): counted as recorded; they point at a model gap.
    pub unresolved_faults: u64,
    /// Recorded faults inside execve, before its exec snapshot: the program's first execve's
    /// are before its count starts; any other execve's count as recorded (in
    /// `passthrough_faults`).
    pub exec_faults: u64,
    /// Events the recorder lost (trace buffer overruns).
    pub lost_events: u64,
    /// shmem files the replay modelled (memfd, tmpfs files, shared anonymous, /dev/zero).
    pub shmem_files: u64,
    /// write-family calls on shmem files replayed through the model's write path.
    pub shmem_writes: u64,
    /// Calls on shmem files the model cannot replay (truncating cached pages, hole punching,
    /// MAP_PRIVATE file mappings, mremap of shmem): their effect is left out.
    pub shmem_unmodelled: u64,
    /// Files that existed before the program and had data (modelled as 4 KiB pages).
    pub preexisting_files: u64,
    /// Mappings without MAP_FIXED whose placement the model computed under the recording's
    /// knobs, and how many of those gave the recorded address.
    pub placements_checked: u64,
    pub placements_matched: u64,
    /// Mappings placed elsewhere than recorded because the replay's knobs move them.
    pub relocated: u64,
    /// Processes forked without CLONE_VM whose mm the model copied: their faults are modelled.
    pub forked_images: u64,
    /// With a profile's `[host]` (a VM that reports free pages to its host): 4 KiB frames the
    /// replay wrote that the host had dropped (host faults, `time.host_faults`).
    #[serde(default)]
    pub host_faults: u64,
    /// Of `host_faults`, the frames of base pages (order-0 allocations), which a profile's
    /// `base_fault_ns_per_page` prices.
    #[serde(default)]
    pub host_base_faults: u64,
    /// Images whose address space was read at their execve (`exec_maps` records).
    #[serde(default)]
    pub exec_snapshots: u64,
    /// O_DIRECT reads (or parts of one) into memory the model does not back, not pinned (the
    /// pinned ones are the result's `io`).
    #[serde(default)]
    pub direct_reads_unmodelled: u64,
    /// The first 20 mappings the model could not place where the kernel did.
    pub placement_misses: Vec<PlacementMiss>,
    /// Calls that populate memory without faults the recorder sees (MAP_POPULATE, MAP_LOCKED,
    /// MADV_POPULATE_READ/WRITE, mlock, mlock2, mlockall), the GUP faults the model took for
    /// them (in minflt: in the model's VMAs, and in file mappings and the vDSO, which the replay
    /// follows page by page from the recorded faults and fault-around), populates that failed
    /// in the model, and the pages of file mappings and the vDSO they walked.
    pub populate_calls: u64,
    pub populate_faults: u64,
    pub populate_failed: u64,
    pub populate_file_pages: u64,
    /// Calls by which the kernel takes or populates the program's pages without a fault the
    /// recorder sees, which the replay does not model (`vmsplice`, `io_uring_register` of
    /// buffers, `process_vm_writev` into a recorded process): call → times (each kind also a
    /// warning).
    #[serde(default)]
    pub populate_unmodelled: BTreeMap<String, u64>,
    /// What the replay could not model faithfully, one sentence each (also printed on stderr).
    pub warnings: Vec<String>,
    /// `uname -r` of the recording machine.
    pub recorded_kernel: String,
    /// Knobs of the recording's THP tree that the model does not know, path → value.
    pub recorded_settings_unknown: BTreeMap<String, String>,
    /// Knobs the program opened while recorded (paths under /sys/kernel/mm/transparent_hugepage,
    /// `enabled`, `hpage_pmd_size`): what it did may depend on what it read there.
    #[serde(default)]
    pub knobs_read: Vec<String>,
    /// Of those, the ones whose value when recorded differs from the replay's, `knob: recorded
    /// → replayed` (each also a warning).
    #[serde(default)]
    pub knobs_read_differing: Vec<String>,
    /// What the census counts, in words.
    pub census_scope: String,
    /// One entry per process image.
    pub per_process: Vec<ReplayProcess>,
    /// `sim --salvage` of a damaged recording only: what was lost.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub salvage: Option<SalvageReport>,
    /// With `sim --recorded-time`: khugepaged's work on the recording's own timestamps
    /// (`registered`: some mm of the recording joined its list). Absent otherwise: the daemon
    /// did not run.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub khugepaged: Option<ModelKhugepaged>,
}

/// A mapping without MAP_FIXED that the model would place elsewhere than the kernel did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementMiss {
    pub pid: u32,
    /// `private anonymous`, `shared anonymous`, `shmem` or `file`.
    pub backing: String,
    /// Length in bytes.
    pub len: u64,
    /// The mmap address hint, hex `0x...`.
    pub hint: String,
    /// Where the kernel put it, hex `0x...`.
    pub recorded: String,
    /// Where the model would, hex `0x...`, or the errno name when it finds no room.
    pub model: String,
}

/// One process image of a replay, at its exit (before teardown).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayProcess {
    pub pid: u32,
    /// Which image of the replay (0: the recorded program's).
    pub image: u64,
    /// The executable: the recorded program's, or the one an execve's snapshot shows (the
    /// lowest file mapping); empty when unknown.
    pub exe: String,
    /// Its address space was read at its execve (`exec_maps`; a forked image inherits its
    /// parent's), so its stack, heap and ELF mappings are the model's from the start.
    #[serde(default)]
    pub exec_snapshot: bool,
    /// A later execve of its process replaced it: its Rss and census are at that execve, and
    /// the run's census (taken at each process's exit) leaves it out.
    #[serde(default)]
    pub replaced: bool,
    /// Faults the model took in memory it backs.
    pub modelled_faults: u64,
    /// Rss and AnonHugePages of its modelled memory at exit.
    pub rss_bytes: u64,
    pub anon_huge_bytes: u64,
    /// Its largest Rss (VmHWM of the modelled memory).
    pub peak_rss_bytes: u64,
    /// Folio size → folios mapped at exit.
    #[serde(serialize_with = "thp_abi::keys::serialize_by_name")]
    pub folios: BTreeMap<FolioSize, u64>,
    pub census: Census,
}

/// What `--salvage` lost of a damaged recording.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SalvageReport {
    /// The reader's error, with the byte offset where it found the damage.
    pub error: String,
    /// Where the replayed part ends, the first byte not replayed: in a 3.x recording the start
    /// of the damaged block (of the trailer when only the trailer is damaged); in a 1.x or 2.x
    /// recording where the reader found the damage.
    pub offset: u64,
    /// Bytes from `offset` to the end of the file.
    pub bytes_lost: u64,
    pub file_bytes: u64,
    /// Records replayed (read whole before the damage).
    pub records_read: u64,
    /// Records the header counts but were not read; None (null) when the header counts none (a
    /// recorder killed before it finished the file).
    pub records_lost: Option<u64>,
    /// 3.x: the damaged block, numbered from 1; absent when only the trailer is damaged, and
    /// for a 1.x or 2.x recording (no blocks).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub block: Option<u64>,
    /// 3.x: the blocks replayed, each checked by its CRC-32C before any of its records was read.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub blocks_kept: Option<u64>,
    /// The time span of the replayed records, ns after the recording's start (first and last
    /// record); absent when none was replayed.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub kept_from_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub kept_to_ns: Option<u64>,
    /// The recording's duration as its header gives it (0: a recorder that did not finish).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub duration_ns: Option<u64>,
    /// A 1.x or 2.x recording: no block checksums, so the records replayed were not checked
    /// (any of them may be misread, back to where the damage is: the reader finds it later).
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub unchecked: bool,
}

/// The `live` section: what only the live harness knows. A workload run fills
/// [`LiveWorkloadRun`], a program run ([`LiveProgramRun`]) the other; their fields sit directly
/// in `live`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveSection {
    /// `uname -r` of the kernel that ran it.
    pub kernel_release: String,
    /// Wall time: of the workload's operations (median over the runs), or of the whole program.
    pub wall_ms: f64,
    /// A program compared with a profile (`compare --record --profile`): the median wall time
    /// of 3 untraced runs under the same setting, timed as `record --timed` times the recorded
    /// program (fork to reaping, no ptrace stops, no census), which the time row uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub untraced_ms: Option<f64>,
    /// With more than one run: the lowest and highest of the times whose median is the live
    /// time compared (`untraced_ms` when set, else `wall_ms`), ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_range_ms: Option<MsRange>,
    /// The khugepaged daemon's counters over the run (summed over the runs).
    pub khugepaged: LiveKhugepaged,
    /// A workload run (`thplab live`, `compare`).
    #[serde(flatten)]
    pub workload: Option<LiveWorkloadRun>,
    /// A program run (`compare --record`).
    #[serde(flatten)]
    pub program: Option<LiveProgramRun>,
}

/// The lowest and highest of some runs' times, ms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MsRange {
    pub min: f64,
    pub max: f64,
}

impl MsRange {
    /// The range of `v` (None with fewer than two values).
    pub fn of(v: &[f64]) -> Option<MsRange> {
        (v.len() > 1).then(|| MsRange { min: v.iter().copied().fold(f64::INFINITY, f64::min), max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max) })
    }
}

impl LiveSection {
    /// The live time compared with the model's (ms): the untraced runs' median where there are
    /// some, else the wall time.
    pub fn time_ms(&self) -> f64 {
        self.untraced_ms.unwrap_or(self.wall_ms)
    }
}

/// Deltas of the daemon's sysfs counters: its own work, not MADV_COLLAPSE
/// (`khugepaged_scan_mm_slot` counts only its successes). The model's are in `model.khugepaged`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveKhugepaged {
    /// `khugepaged/pages_collapsed`.
    pub pages_collapsed: i64,
    /// `khugepaged/full_scans`.
    pub full_scans: i64,
    /// How long the khugepaged thread waited on a runqueue during the run (ms, /proc/PID/schedstat):
    /// it runs at nice 19, and a busy machine delays its wake-ups by that much. `None` where it
    /// could not be read or the thread changed (THP turned off and on again) during the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runqueue_wait_ms: Option<u64>,
}

/// A workload run live, `runs` times.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveWorkloadRun {
    /// Runs made (`--repeat`); counters are the median run's.
    pub runs: u64,
    /// The executor's heap start (`start_brk` of /proc/PID/stat), hex `0x...`.
    pub start_brk: String,
    /// What the census cost: in total, reading /proc/PID/pagemap, reading /proc/kpageflags
    /// (and in how many reads, of how many PFNs).
    pub census_ms: f64,
    pub census_pagemap_ms: f64,
    pub census_kpageflags_ms: f64,
    pub census_kpageflags_reads: u64,
    pub census_kpageflags_pfns: u64,
    /// Counter (`minflt`, `rss_bytes`, `anon_huge_bytes`, `vmstat.NAME`, `hugepages-<N>kB.STAT`,
    /// `meminfo.NAME`, `processes.NAME.minflt`) → its spread over the runs; only with more than
    /// one run, only counters that were not 0 in every run.
    pub spread: BTreeMap<String, Spread>,
    /// Whether some run's census differed from the median run's.
    pub census_varied_between_runs: bool,
    /// Notes on regions the harness placed itself.
    pub placement: Vec<String>,
    /// How much of the system-wide counters this process's census does not explain.
    pub noise: Noise,
    /// The workload's `phase` statements on the wall clock, as the model's
    /// `time.phases` on its own: each from its statement to the next phase or the end of the
    /// operations, the median over the runs. Empty without phases.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<PhaseTime>,
    /// On a VM that reports free pages, in a run priced with a profile's `[host]`: the frames
    /// mapped in the workload's regions at the end (processes alive then) that lay in blocks
    /// page reporting had reported when the run started (/proc/kpageflags read right before
    /// it), each a fault in the host; the median over the runs. The model's count is
    /// `time.host_faults` (which also counts frames written and freed during the run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_faults: Option<u64>,
    /// In the same runs: the free lists the run started from (read right before it, after the
    /// THP-sized pages of its CPU's list were taken; of the run with the median wall time),
    /// which `compare` and `demo` give the model to run again from the state the live run met.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_lists: Option<crate::profile::FreeLists>,
}

/// Lowest, lower median and highest value of a counter over the runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spread {
    pub min: i64,
    pub median: i64,
    pub max: i64,
}

/// The system-wide `anon_fault_alloc` deltas against the process's own census.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Noise {
    /// The finding in words.
    pub note: String,
    /// Size label → the comparison, for sizes where either is not 0.
    pub anon_fault_alloc_vs_census: BTreeMap<String, NoiseEntry>,
    /// Σ of the positive `excess`es.
    pub excess_total: i64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoiseEntry {
    /// `hugepages-<N>kB/stats/anon_fault_alloc` delta (system-wide).
    pub anon_fault_alloc: i64,
    /// Folios of that size in the process's census.
    pub census_folios: i64,
    /// `anon_fault_alloc - census_folios`.
    pub excess: i64,
}

/// A real program run live under ptrace, every process it started measured at its exit.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveProgramRun {
    /// The command line.
    pub program: Vec<String>,
    /// The program's exit code, or 128 + the signal that killed it; null when its end was not
    /// seen.
    pub exit_status: Option<i32>,
    /// Every process, in the order they appeared.
    pub processes: Vec<ProgramProcess>,
    /// Processes without an exit snapshot (`PID (COMM): why`), left out of the census.
    pub unmeasured: Vec<String>,
    /// What the census counts, in words.
    pub census_scope: String,
}

/// What was measured of one process of a program run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProgramProcess {
    pub pid: i32,
    /// The process that created it (0 for the program itself).
    pub parent: i32,
    pub comm: String,
    /// The executable after its first exec (empty if it never exec'd).
    pub exe: String,
    pub execs: u32,
    /// The program's minflt at its first exec event; 0 for a descendant (counted from its
    /// creation, as the recording follows it).
    pub minflt_base: u64,
    /// minflt at its exit event (None: no exit snapshot).
    pub minflt_exit: Option<u64>,
    /// `minflt_exit - minflt_base`.
    pub minflt: u64,
    /// Major faults over the same span (maj_flt): faults that read a file page from disk. Not
    /// in `minflt`; a recording sees them as faults like any other.
    #[serde(default)]
    pub majflt: u64,
    pub threads: u32,
    /// Rss and AnonHugePages of the VMAs measured, in kB.
    pub rss_kb: u64,
    pub anon_huge_kb: u64,
    /// Anonymous private VMAs measured.
    pub anon_vmas: u64,
    /// Its census at exit (None: no exit snapshot).
    pub census: Option<Census>,
    /// Whether its census is part of the run's census (it exec'd, or was forked with its own
    /// address space).
    pub in_census: bool,
    /// Made by fork (PTRACE_EVENT_FORK: a copy of its parent's mm), not by vfork or clone.
    pub forked: bool,
    pub census_ms: f64,
    /// `exited N`, `killed by signal N`.
    pub end: String,
    /// The VMAs of its census at exit, each with its folios, as the model's `vmas` list them.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub vmas: Vec<VmaMap>,
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

/// What the model's work costs in time on the machine a profile was measured on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeEstimate {
    /// Everything below, in ns.
    pub total_ns: f64,
    /// Size label → ns of the faults that allocated a folio of that size.
    pub faults_ns: BTreeMap<String, f64>,
    /// Size label → those faults.
    pub faults: BTreeMap<String, u64>,
    /// Read faults that mapped the zero page or the huge zero folio, and their ns.
    pub zero_page_faults: u64,
    pub zero_page_ns: f64,
    /// Pages touched without a fault (the rest of a large folio, touches of mapped pages).
    pub touches_without_fault: u64,
    pub touch_ns: f64,
    /// Memory-management calls and their ns.
    pub calls: u64,
    pub calls_ns: f64,
    /// Collapses the program's own calls made (MADV_COLLAPSE: `thp_collapse_alloc` in its
    /// steps; khugepaged's run on another CPU and are not the program's time), charged as a
    /// PMD fault each (a 2 MiB allocation and 2 MiB copied instead of zeroed).
    #[serde(default)]
    pub collapses: u64,
    #[serde(default)]
    pub collapse_ns: f64,
    /// Folios a workload's steps freed (munmap, MADV_DONTNEED, exit, a COW that dropped the last
    /// reference...), by size label, and their ns at the profile's `free_ns_per_folio` (a size it
    /// lacks costs nothing); part of `total_ns`. A recording's frees are in `faults_ns` instead
    /// (`program_fault_ns`: each fault pays its folio's free by the program's exit).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub frees: BTreeMap<String, u64>,
    #[serde(default)]
    pub free_ns: f64,
    /// With a profile that has `[pin]` too: the O_DIRECT reads' pin and unpin time (`io.pin_ns`),
    /// part of `total_ns`.
    #[serde(default)]
    pub pin_ns: f64,
    /// With a profile that has `[host]` (a VM whose free memory is reported to its host): the
    /// 4 KiB frames the run wrote that the host had dropped, and their ns, part of `total_ns`.
    #[serde(default)]
    pub host_faults: u64,
    #[serde(default)]
    pub host_ns: f64,
    /// Accesses the TLB model ran (a workload's `access` statements, a recording's `record
    /// --accesses`) and their time as the model estimates it (`accesses.total.ns`: data and
    /// translation, for dependent accesses), part of `total_ns`. A workload's clock does not
    /// move with accesses: its phases and `repeat` blocks leave them out.
    #[serde(default)]
    pub accesses: u64,
    #[serde(default)]
    pub accesses_ns: f64,
    /// Sizes that faulted but have no cost in the profile (charged as 4kB faults).
    pub unmeasured_sizes: Vec<String>,
    /// The simulated clock at the end: the priced work plus every `sleep` (a workload's); a
    /// timed recording's: the priced work plus `program_ns`.
    #[serde(default)]
    pub elapsed_ns: u64,
    /// A recording timed untraced (`record --timed`): the program's own time, its untraced
    /// wall time less the model's time of the same work under 4 KiB pages (as it ran, THP
    /// disabled). Part of `elapsed_ns`, not of `total_ns`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program_ns: Option<f64>,
    /// With `program_ns`: what it comes from, the program's median untraced wall time as
    /// measured (`record --timed`, the header's `untraced_wall_ns`) ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_ns: Option<u64>,
    /// ... less the model's time of the same work as it ran (THP disabled: 4 KiB pages), which
    /// the profile prices again under the setting (in `total_ns`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_ns: Option<f64>,
    /// The workload's `phase` statements: each phase's simulated time (from its statement to
    /// the next phase or the end), sleeps included. Empty without phases.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<PhaseTime>,
    /// With a profile that carries its calibrated spreads (`spread_pct`): how far `elapsed_ns`
    /// may be off (docs/results-schema.md, "Time uncertainty").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncertainty: Option<TimeUncertainty>,
}

/// How far a time estimate may be off: the profile's calibrated spreads, the program's own
/// time's spread (a timed recording) and the host state the model could not know (a VM whose
/// free pages are reported: which frames the host backs). `low_ns..high_ns` is the interval
/// `elapsed_ns` lies in: `elapsed_ns − host_low − sym` to `elapsed_ns + host_high + sym`, with
/// `sym` the sum of `profile_ns` (absolute values) and `program_ns`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeUncertainty {
    /// The interval, ns.
    pub low_ns: f64,
    pub high_ns: f64,
    /// Profile figure (`fault 4kB`, `filled 4kB`, `free 64kB`, `touch`, `zero page read`,
    /// `syscall`, `host fault`) → ± ns it moves the estimate: its events × its calibrated
    /// `spread_pct` of its cost (a recording timed untraced: less the same of its 4 KiB
    /// baseline, signed, since the program's own time is measured against it). Two settings'
    /// estimates share these errors: their difference carries `|a − b|` of each.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub profile_ns: BTreeMap<String, f64>,
    /// ± ns of the program's own time (`program_ns`): the range of the recording's untraced
    /// runs. The same in every setting: a difference between settings does not carry it.
    #[serde(default)]
    pub program_ns: f64,
    /// The host state assumed, and how far another moves the estimate (absent: no `[host]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostStateRange>,
}

/// The host state a time estimate assumed (which free frames the host had dropped) and the
/// estimate at the two ends of what it could be: every frame the run writes backed (no host
/// fault: right after other processes freed that memory), or every frame it takes from its free
/// lists dropped (every free block reported, the small ones used up: a long idle machine).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostStateRange {
    /// The state the estimate assumed, in words.
    pub assumed: String,
    /// Host faults at the two ends (`time.host_faults` is the assumed state's).
    pub low_faults: u64,
    pub high_faults: u64,
    /// ns the estimate moves down (to no host fault) and up (to every frame dropped).
    pub down_ns: f64,
    pub up_ns: f64,
}

impl TimeEstimate {
    /// The symmetric part of the uncertainty (profile spreads and the program's own time), ns.
    pub fn sym_ns(&self) -> f64 {
        self.uncertainty.as_ref().map_or(0.0, |u| u.profile_ns.values().map(|v| v.abs()).sum::<f64>() + u.program_ns)
    }

    /// Sets `uncertainty.low_ns`/`high_ns` from its parts around `elapsed_ns`.
    pub fn set_bounds(&mut self) {
        let sym = self.sym_ns();
        let e = self.elapsed_ns as f64;
        if let Some(u) = self.uncertainty.as_mut() {
            let (down, up) = u.host.as_ref().map_or((0.0, 0.0), |h| (h.down_ns, h.up_ns));
            u.low_ns = (e - down - sym).max(0.0);
            u.high_ns = e + up + sym;
        }
    }
}

/// One `phase NAME` of a workload and the simulated time it took.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseTime {
    pub name: String,
    /// The clock when it started, and how long it ran, in ns.
    pub start_ns: u64,
    pub ns: u64,
}

/// The TLB model's report of a run's `access` statements.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AccessReport {
    /// The `--cpu` preset and `--paging` mode.
    pub cpu: String,
    pub paging: String,
    /// The preset's clock, for the ns estimate.
    pub ghz: f64,
    /// CPUs whose TLBs the accesses went through: each thread of a workload that makes
    /// accesses runs on a CPU of its own (1: main only, or a recording). Counts are summed
    /// over them, and so are cycles and ns (CPU time, not wall time).
    #[serde(default)]
    pub cpus: u64,
    pub regions: Vec<AccessCounts>,
    pub total: AccessCounts,
    /// A recording's accesses (`record --accesses`): what was recorded and what the replay did
    /// with it; absent for a workload's `access` statements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<RecordedAccesses>,
}

/// The accesses of a recording (`thplab record --accesses`, FILE.accesses) and their replay.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordedAccesses {
    /// The companion file.
    pub file: String,
    /// Data accesses of the run under valgrind, mapped or not, and of them writes.
    pub raw_accesses: u64,
    pub raw_writes: u64,
    /// Runs in the file (accesses in a row to one page).
    pub runs: u64,
    /// Accesses (and writes) the recorder could not map onto the recorded run: not replayed.
    pub unmapped_accesses: u64,
    pub unmapped_writes: u64,
    /// The run under valgrind, and the native run it is compared with, in ns.
    pub valgrind_ns: u64,
    pub native_ns: u64,
    /// Memory system calls of the run under valgrind, and how many were matched to recorded ones.
    pub valgrind_syscalls: u64,
    pub matched_syscalls: u64,
    /// Accesses replayed on memory the model backs (through its page tables: young and dirty
    /// bits), on mappings it keeps as placeholders (file mappings, the vDSO: looked up as 4 KiB
    /// pages), and not replayed (no mapping at that address in the model, or the process had
    /// left the recorded image).
    pub modelled: u64,
    pub placeholder: u64,
    pub not_replayed: u64,
    /// Accesses to a page the model had not mapped at the end of their interval (between two
    /// matched calls), not replayed: an access never faults in the replay, the recording's
    /// faults being the program's (the run under valgrind touches some pages the native run
    /// did not: its stack deeper, its heap laid out a little otherwise).
    #[serde(default)]
    pub not_present: u64,
}

/// Counts of one region (or the total, `region` = `total`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AccessCounts {
    pub region: String,
    pub accesses: u64,
    pub writes: u64,
    pub l1_hits: u64,
    pub l1_misses: u64,
    pub l2_hits: u64,
    pub l2_misses: u64,
    pub walks: u64,
    pub walk_refs: u64,
    /// Entries read by walks per guest table level: PML4/L0, PDPT/L1, PD/L2, PT/L3.
    pub guest_refs: [u64; 4],
    /// Nested paging: host-table entries read per host level.
    pub host_refs: [u64; 4],
    pub tlb_flushed_entries: u64,
    /// Estimated cycles for data reads and for translation, their sum, and ns at `ghz`.
    pub data_cycles: f64,
    pub translation_cycles: f64,
    pub cycles: f64,
    pub ns: f64,
    pub ns_per_access: f64,
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

/// One VMA and the folios that back it: an entry of `thplab observe`'s `vmas` and of the
/// model's `vmas` (one consumer reads both).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmaMap {
    /// Start and end, hex without `0x`, as /proc/PID/maps.
    pub start: String,
    pub end: String,
    /// `rw-p`, as /proc/PID/maps.
    pub perms: String,
    /// The mapping's name (`[heap]`, a path, `/memfd:x (deleted)`); empty for anonymous memory.
    pub name: String,
    /// `anon`, `shmem`, `file`, or `placeholder` (a replayed mapping the model does not back).
    #[serde(default)]
    pub kind: String,
    /// The process, for the VMAs of a replayed recording (several processes).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pid: Option<u32>,
    pub rss_kb: u64,
    pub anon_huge_kb: u64,
    pub census: Census,
}

impl VmaMap {
    /// The start address as a number.
    pub fn start_addr(&self) -> u64 {
        u64::from_str_radix(&self.start, 16).unwrap_or(0)
    }
    pub fn end_addr(&self) -> u64 {
        u64::from_str_radix(&self.end, 16).unwrap_or(0)
    }
}

/// `kind` of a VMA from its /proc/PID/maps name: shared memory (memfd, /dev/shm, SysV,
/// /dev/zero shared mappings), anonymous memory (no name, `[heap]`, `[stack]`, `[anon:...]`),
/// or a file.
pub fn vma_kind_of_name(name: &str) -> &'static str {
    if name.starts_with("/memfd:") || name.starts_with("/dev/shm/") || name.starts_with("/SYSV") || name.starts_with("/dev/zero") {
        "shmem"
    } else if name.is_empty() || name == "[heap]" || name.starts_with("[stack") || name.starts_with("[anon") {
        "anon"
    } else {
        "file"
    }
}


/// The run at its largest Rss.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peak {
    /// The largest Rss (anonymous and shmem pages mapped) the run reached.
    pub rss_bytes: u64,
    /// AnonHugePages when the census below was taken.
    pub anon_huge_bytes: u64,
    /// The census at the peak (taken before the first operation that unmapped or freed memory
    /// after Rss last grew by a sixteenth or more; at the end when Rss never fell).
    pub census: Census,
    /// The largest number of folios of each size mapped at any moment (`nr_anon` per size,
    /// exact, anonymous only), by size label.
    #[serde(serialize_with = "thp_abi::keys::serialize_by_name")]
    pub max_folios: BTreeMap<FolioSize, u64>,
}

/// `--explain`: the faults in a range and what each larger order met.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Explain {
    /// The explained range, hex `0x...`, end exclusive.
    pub start: String,
    pub end: String,
    /// Faults recorded (each fault's page or the folio it got lies in the range).
    pub faults: Vec<ExplainedFault>,
    /// Faults beyond the recorded ones (only the first [`Explain::MAX_FAULTS`] are kept).
    pub more_faults: u64,
    /// Reason → count over the recorded faults, by size (`hugepages-64kB`), the same
    /// reasons as the result's `fallbacks`.
    #[serde(serialize_with = "thp_abi::keys::serialize_by_name")]
    pub totals: BTreeMap<SizeDir, BTreeMap<FallbackKey, u64>>,
}

impl Explain {
    pub const MAX_FAULTS: usize = 10_000;
}

/// One fault and the orders it did not get.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExplainedFault {
    /// The process (recordings only).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pid: Option<u32>,
    /// Faulting address, hex.
    pub addr: String,
    /// `read` or `write`.
    pub access: String,
    /// The folio size it mapped (`4kB`, `64kB`, `2048kB`), or `zero page`, `huge zero page`.
    pub got: String,
    /// Larger sizes the settings enable and why this fault did not get them, largest first:
    /// (`hugepages-2048kB`, `pte_table_exists`).
    pub refused: Vec<(String, String)>,
}

impl RunResult {
    pub fn new(source: &str, workload: &str) -> RunResult {
        RunResult { schema: RESULT_SCHEMA.into(), source: source.into(), workload: workload.into(), ..Default::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(v: &serde_json::Value) -> Vec<&str> {
        v.as_object().unwrap().keys().map(String::as_str).collect()
    }

    /// A workload run's model state sits directly in `model`; a replay's is `model.replay`
    /// alone; each reads back as it was written, with the other part absent.
    #[test]
    fn model_sections_keep_their_shape_and_read_back() {
        let run = ModelSection {
            run: Some(ModelRun {
                scan_results: [("SCAN_SUCCEED".to_string(), 2)].into(),
                nr_free_pages: 7,
                buddyinfo: vec![1, 0, 3],
                khugepaged: ModelKhugepaged { registered: true, wakeups: 10, ..Default::default() },
                ..Default::default()
            }),
            replay: None,
        };
        let v = serde_json::to_value(&run).unwrap();
        let mut k = keys(&v);
        k.sort_unstable();
        assert_eq!(k, ["accesses_without_fault", "buddyinfo", "deferred_split_queue", "khugepaged", "nr_free_pages", "pgtable_pages", "scan_results", "vmas"]);
        assert_eq!(v["khugepaged"]["wakeups"], 10);
        assert_eq!(serde_json::from_value::<ModelSection>(v).unwrap(), run);
        let replay = ModelSection { run: None, replay: Some(ReplayReport { forked_images: 1, ..Default::default() }) };
        let v = serde_json::to_value(&replay).unwrap();
        assert_eq!(keys(&v), ["replay"]);
        assert!(v["replay"].get("salvage").is_none(), "salvage only when there is one");
        assert_eq!(serde_json::from_value::<ModelSection>(v).unwrap(), replay);
    }

    /// The same for `live`: the common fields, then a workload run's or a program run's.
    #[test]
    fn live_sections_keep_their_shape_and_read_back() {
        let workload = LiveSection {
            kernel_release: "6.18.0".into(),
            wall_ms: 1.5,
            untraced_ms: None,
            time_range_ms: None,
            khugepaged: LiveKhugepaged { pages_collapsed: 1, full_scans: 2, runqueue_wait_ms: Some(3) },
            workload: Some(LiveWorkloadRun { runs: 2, start_brk: "0x555555887000".into(), spread: [("minflt".to_string(), Spread { min: 1, median: 2, max: 3 })].into(), ..Default::default() }),
            program: None,
        };
        let v = serde_json::to_value(&workload).unwrap();
        assert_eq!(v["khugepaged"]["pages_collapsed"], 1);
        assert_eq!(v["khugepaged"]["runqueue_wait_ms"], 3);
        assert_eq!(v["spread"]["minflt"]["median"], 2);
        assert!(v.get("program").is_none() && v.get("unmeasured").is_none());
        assert_eq!(serde_json::from_value::<LiveSection>(v).unwrap(), workload);
        let program = LiveSection {
            kernel_release: "6.18.0".into(),
            program: Some(LiveProgramRun { program: vec!["true".into()], exit_status: None, unmeasured: vec!["12 (x): killed by signal 9".into()], ..Default::default() }),
            ..Default::default()
        };
        let v = serde_json::to_value(&program).unwrap();
        assert_eq!(v["exit_status"], serde_json::Value::Null);
        assert!(v.get("runs").is_none() && v.get("spread").is_none());
        assert_eq!(serde_json::from_value::<LiveSection>(v).unwrap(), program);
    }
}
