//! The schema that the model and the live kernel share, spelled as the kernel spells it.
//!
//! - [`settings`]: `/sys/kernel/mm/transparent_hugepage`, field by field, as
//!   `tools/testing/selftests/mm/thp_settings.h` models it, plus the boot options that set it.
//! - [`counters`]: `/proc/vmstat` `thp_*` names (`include/linux/vm_event_item.h`) and the per-size
//!   `hugepages-<N>kB/stats/*` names (`include/linux/huge_mm.h: enum mthp_stat_item`).
//! - [`result`]: the versioned run result that `thplab sim` and `thplab live` both print.
//!
//! Serde lives here and in no core crate: serialization is a compatibility promise.

pub mod counters;
pub mod profile;
pub mod result;
pub mod settings;

pub use counters::{Counters, MthpStat, VmEvent};
pub use result::{AccessCounts, AccessReport, CallResult, RecordedAccesses, Census, CensusEntry, Explain, ExplainedFault, Peak, ProcessStats, RegionPlacement, RunResult, TimeEstimate, VmaMap};
pub use result::{LiveSection, ModelSection, ReplayReport, Timeline, TimelineSample};
pub use settings::{SettingsError, ThpSettings};
