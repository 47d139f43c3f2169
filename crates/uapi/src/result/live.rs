//! The `live` section: what only the live harness knows: a workload's repeated runs and their
//! spread (`LiveWorkloadRun`, `Spread`, `Noise`), a program's processes (`LiveProgramRun`,
//! `ProgramProcess`), the daemon's counters (`LiveKhugepaged`) and the runs' time range.

use super::*;

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
    /// With `--memory-max` or `--swap`: the run's memcg and swap, and what reclaim did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pressure: Option<LivePressure>,
    /// When the model ran accesses and the machine's PMU has TLB events: the hardware counters
    /// over the live run(s), the workload's process and the tasks it started
    /// (record::hwcounters); absent where the PMU is not available.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hw_tlb: Vec<HwCount>,
}

/// One hardware event's count over a live run (perf's name: `dTLB-load-misses`, or a core
/// event such as `DTLB_LOAD_MISSES.WALK_COMPLETED`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HwCount {
    pub event: String,
    pub count: u64,
}

/// A live run under memory pressure: the memcg its processes ran in and the swap it had
/// (created by the settings guard), the reclaim, swap and compaction counters over the run
/// (the `thp_*` ones, `thp_swpout` and `thp_swpout_fallback` among them, are in the result's
/// `vmstat`; per-size `swpout`, `swpout_fallback`, `swpin`, `swpin_fallback` in its `mthp`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LivePressure {
    /// `--memory-max` in bytes (null: no limit).
    pub memory_max: Option<u64>,
    /// `--swap` as given: `zram:SIZE`, `file:SIZE` or `none`.
    pub swap: String,
    /// The cgroup interface the memcg was driven through: `v1` or `v2`.
    pub cgroup: String,
    /// /proc/vmstat deltas over the run of [`thp_abi::ReclaimEvent`] (`pswpin`, `pswpout`,
    /// `pgmajfault`, `pgscan_*`, `pgsteal_*`, `compact_*`, `zswp*`, ...): system-wide, like
    /// `vmstat`. Of the median run.
    pub vmstat: BTreeMap<String, i64>,
    /// Major faults of the workload's processes (getrusage `ru_majflt` of the executor; a
    /// program's processes' `majflt` summed). Of the median run.
    pub majflt: u64,
    /// The memcg's own counters at the end of the median run: v2 `memory.events` (`max`,
    /// `oom`, `oom_kill`, ...) and `peak`; v1 `failcnt`, `memsw.failcnt`, `max_usage_in_bytes`.
    pub memcg: BTreeMap<String, i64>,
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
    /// `--latency`: each fault of the workload's `touch` statements timed (the first access of
    /// a page, clock_gettime around it; the slowest touches of each statement, as many as its
    /// minflt + majflt grew, are its faults), all runs together (`live::executor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault_latency: Option<crate::latency::FaultLatency>,
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
