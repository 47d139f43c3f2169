//! Model-only instrumentation: what the model records beside the kernel it models, for
//! reports the kernel cannot give. Nothing here decides anything the kernel decides; the fault
//! path and the daemons only write into it.
//!
//! - [`stats`]: `ModelStats`, the per-mm counts (MM_ANONPAGES, `min_flt`, as
//!   `include/linux/mm.h` keeps them) and the model's records beside them.
//! - `fallbacks` (`thp_abi::fallbacks`, re-exported: the result is keyed by it):
//!   `FallbackReason`, why a fault did not get an enabled size.
//! - [`explain`]: `--explain`, each fault's decisions in one range.
//! - [`peak`]: the process at its largest Rss (`hiwater_rss`) and a census near it.

pub mod explain;
/// The reasons live in `thp_abi` (the result keys its `fallbacks` by them); counted here.
pub use thp_abi::fallbacks;
pub mod peak;
pub mod stats;
