//! The result's `vm_host` (model-only): what the modelled host of a VM did while the guest ran
//! (`sim::host`, `--host` / `--policy fhpm`, docs/vm-host.md). Counts are of the host's
//! EPT-like table and its THP management; times are the model's estimates.

use serde::{Deserialize, Serialize};

/// The host side of a VM over one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VmHostReport {
    /// Always true: no live kernel checks this (the machine's own host cannot be controlled).
    pub model_only: bool,
    /// The host's settings as given (`enabled=always`, ...), and its policy (`fhpm:...` or none).
    pub settings: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub policy: Option<String>,
    /// Guest-physical memory the host backs at the end, in bytes, and at most during the run.
    pub resident_bytes: u64,
    pub peak_resident_bytes: u64,
    /// Of the end's, bytes mapped by host 2 MiB pages.
    pub huge_bytes: u64,
    /// EPT violations (VM exits to fault a guest-physical page in or re-map it), and those the
    /// proactive EPT fill saved (entries filled before the guest's first access).
    pub ept_violations: u64,
    pub exits_saved: u64,
    /// Host faults by size.
    pub faults_4k: u64,
    pub faults_2m: u64,
    /// Host khugepaged: 2 MiB ranges scanned and collapsed.
    pub khugepaged_scanned: u64,
    pub khugepaged_collapsed: u64,
    /// Monitoring windows ended, companion page tables set up (fine windows), FHPM splits and
    /// promotions, and base pages a split freed (cold, never written: shared zero pages).
    pub windows: u64,
    pub companion_tables: u64,
    pub splits: u64,
    pub promotions: u64,
    pub freed_pages: u64,
    /// Hot bloat, summed over windows: base pages inside host huge pages whose EPT A bit was set
    /// but which the guest did not access in the window; `hot_pages`: base pages the host's A
    /// bits called hot (512 per young huge page, one per young base page). `hot_bloat_ratio`:
    /// their quotient (0 with no hot page). `hot_bloat_max`: the most of one window.
    pub hot_bloat_pages: u64,
    pub hot_pages: u64,
    pub hot_bloat_ratio: f64,
    pub hot_bloat_max: u64,
    /// The host's time, model estimates: VM exits and host faults, monitoring (A-bit scans,
    /// companion tables), splits and merges; on the run's clock where it is priced.
    pub exit_ns: u64,
    pub monitor_ns: u64,
    pub manage_ns: u64,
}
