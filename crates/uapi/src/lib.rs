//! The result schema that the model and the live harness both print, spelled as the kernel
//! spells it; the kernel's ABI itself (knobs, counters, sizes, the census) is `thp_abi`'s.
//!
//! - [`result`]: the versioned run result that `thplab sim` and `thplab live` both print.
//! - [`compare`]: a model result beside a live one: rows, time verdicts, timelines side by side,
//!   where a recorded program's model and live part (computed by `experiment`, rendered by
//!   `report`).
//! - [`latency`]: fault latency histograms and the percentiles a result reports.
//! - [`profile`]: the machine profile (what this machine charges for the work the model counts).
//! - [`vm_host`]: the result's `vm_host`: the modelled host of a VM (model-only).
//!
//! Serde lives here and in `thp_abi`, in no model crate: serialization is a compatibility
//! promise.

pub mod compare;
pub mod latency;
pub mod profile;
pub mod result;
pub mod vm_host;

pub use result::{AccessCounts, AccessReport, CallResult, RecordedAccesses, Explain, ExplainedFault, Peak, ProcessStats, RegionPlacement, RunResult, TimeEstimate, VmaMap};
pub use result::{LiveSection, ModelSection, ReplayReport, Timeline, TimelineSample};
