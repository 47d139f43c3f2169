//! Time: what the model's work costs with a machine profile (`TimeEstimate`), how far it may
//! be off (`TimeUncertainty`, `HostStateRange`), each `phase` (`PhaseTime`), and what memory pressure cost (`PressureTime`).

use super::*;

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
    /// With a profile whose `[fault.pressure]` prices something and a run that reclaimed,
    /// swapped or compacted: that work's time (docs/pressure.md, "Latency").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pressure: Option<PressureTime>,
    /// `--latency`: each fault's priced time (its stalls included), as a distribution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<crate::latency::FaultLatency>,
}

/// What memory pressure cost with the profile's `[fault.pressure]`, ns. The direct part is on
/// the faulting tasks' time (in `total_ns`); kswapd's and kcompactd's is CPU time on their
/// own threads (not in `total_ns`, not on the clock).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PressureTime {
    /// Direct reclaim (memcg limit reclaim and `try_to_free_pages`): pages scanned and
    /// reclaimed, and the swap-out of what it reclaimed.
    pub direct_reclaim_ns: f64,
    /// Major faults' swap-ins (`pswpin`).
    pub swapin_ns: f64,
    /// Direct compaction: pageblocks scanned and pages migrated.
    pub direct_compaction_ns: f64,
    /// kswapd's reclaim and swap-out.
    pub kswapd_ns: f64,
    /// kcompactd's compaction.
    pub kcompactd_ns: f64,
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
