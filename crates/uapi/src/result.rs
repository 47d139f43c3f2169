//! The run result: one JSON object that `thplab sim` and `thplab live` both print.
//!
//! Schema `thplab-run/2`, documented in docs/results-schema.md. Counter names are the kernel's;
//! a consumer cannot tell from the counters whether the model or the kernel produced them. What
//! only one side knows is in the typed sections [`ModelSection`] and [`LiveSection`].
//!
//! The types are in modules by subject, all re-exported here (`uapi::result::*`):
//! - `process`: `ProcessStats`, `ProcResult`, `IoResult`.
//! - `views`: census views: `VmaMap`, `vma_kind_of_name`, `Peak`.
//! - `time`: `TimeEstimate`, `TimeUncertainty`, `HostStateRange`, `PhaseTime`.
//! - `timeline`: `Timeline`, `TimelineSample`.
//! - `model`: `ModelSection`, `ModelRun`, `ModelKhugepaged`.
//! - `replay`: `ReplayReport`, `PlacementMiss`, `ReplayProcess`, `SalvageReport`.
//! - `live`: `LiveSection`, `LivePressure`, `HwCount`, `MsRange`, `LiveKhugepaged`, `LiveWorkloadRun`, `Spread`,
//!   `Noise`, `NoiseEntry`, `LiveProgramRun`, `ProgramProcess`.
//! - `accesses`: `AccessReport`, `RecordedAccesses`, `AccessCounts`.
//! - `explain`: `Explain`, `ExplainedFault`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thp_abi::{FallbackKey, FolioSize, KnobPath, MeminfoKey, MthpStatKey, SizeDir, VmStatKey};

mod accesses;
mod explain;
mod live;
mod model;
mod process;
mod replay;
mod time;
mod timeline;
mod views;

pub use accesses::*;
pub use explain::*;
pub use live::*;
pub use model::*;
pub use process::*;
pub use replay::*;
pub use time::*;
pub use timeline::*;
pub use views::*;

pub const RESULT_SCHEMA: &str = "thplab-run/2";

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
    /// Model only, with `--kernel` other than 6.18: the kernel version the model followed
    /// (`7.2`); the live kernel (6.18) cannot check what it changed (docs/policies.md).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub kernel: Option<String>,
    /// Model only, with `--policy`: the proposal the model ran, as `--policy` reads it back.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub policy: Option<String>,
    /// Model only: what the modelled kernel warned of once (`pr_warn_once`), such as 7.2's
    /// "mTHP collapse only supports max_ptes_none 0 or 511".
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub kernel_warnings: Vec<String>,
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
    /// Model only, with `--host` or `--policy fhpm`: the VM host's side (docs/vm-host.md).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub vm_host: Option<crate::vm_host::VmHostReport>,
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
            pressure: None,
            hw_tlb: Vec::new(),
        };
        let v = serde_json::to_value(&workload).unwrap();
        assert_eq!(v["khugepaged"]["pages_collapsed"], 1);
        assert_eq!(v["khugepaged"]["runqueue_wait_ms"], 3);
        assert_eq!(v["spread"]["minflt"]["median"], 2);
        assert!(v.get("program").is_none() && v.get("unmeasured").is_none());
        assert!(v.get("pressure").is_none(), "no pressure, no key: results without it stay byte-equal");
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
        let pressured = LiveSection {
            pressure: Some(LivePressure { memory_max: Some(32 << 20), swap: "zram:64M".into(), cgroup: "v1".into(), majflt: 7, ..Default::default() }),
            ..workload.clone()
        };
        let v = serde_json::to_value(&pressured).unwrap();
        assert_eq!((v["pressure"]["memory_max"].as_u64(), v["pressure"]["swap"].as_str(), v["pressure"]["majflt"].as_u64()), (Some(33554432), Some("zram:64M"), Some(7)));
        assert_eq!(serde_json::from_value::<LiveSection>(v).unwrap(), pressured);
    }
}
