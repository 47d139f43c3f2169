//! The kernel's transparent-hugepage ABI, spelled as the kernel spells it: what the model (`mm`,
//! `sim`) and the live harness both read and write, and nothing of the result schema (`uapi`).
//!
//! - [`settings`]: `/sys/kernel/mm/transparent_hugepage`, knob by knob, as
//!   `tools/testing/selftests/mm/thp_settings.h` models it, plus the boot options that set it.
//! - [`matrix`]: the standard settings matrices (`sim --matrix`, `compare --matrix`).
//! - [`counters`]: `/proc/vmstat` `thp_*` events (`include/linux/vm_event_item.h`) and the
//!   per-size `hugepages-<N>kB/stats/*` (`include/linux/huge_mm.h: enum mthp_stat_item`).
//! - [`census`]: which folio sizes a process maps, and how.
//! - [`fallbacks`]: why a fault did not get a size the settings enable: the model's record (the
//!   kernel keeps none), the keys of the result's `fallbacks`.
//! - [`pressure`]: a run's memcg limit and swap device (`--memory-max`, `--swap`).
//! - [`free_lists`]: a machine's free lists (/proc/pagetypeinfo, per-CPU lists, reported blocks).
//! - [`version`]: the kernel version (`--kernel 6.18|7.2`) and the proposals (`--policy`) the
//!   model follows, with their sources.
//! - [`fhpm`]: the parameters of the FHPM host policy (`--policy fhpm:...`, model-only).
//! - [`keys`]: typed keys for the kernel's closed sets of names (vmstat events, per-size stats,
//!   folio sizes, size directories, knob paths, /proc/meminfo fields, fallback reasons),
//!   serialised as the kernel (or the model, for fallback reasons) spells them.
//!
//! Sizes and orders themselves (`Order`, `Orders`, `PMD_ORDER`) are `mm_types`'. No I/O here.

pub mod census;
pub mod counters;
pub mod fallbacks;
pub mod fhpm;
pub mod free_lists;
pub mod keys;
pub mod matrix;
pub mod pressure;
pub mod settings;
pub mod version;

pub use census::{Census, CensusEntry};
pub use counters::{Counters, MthpStat, ReclaimEvent, VmEvent};
pub use free_lists::FreeLists;
pub use fallbacks::FallbackReason;
pub use keys::{FallbackKey, FolioSize, Key, KernelName, KnobPath, Meminfo, MeminfoKey, MthpStatKey, SizeDir, VmStatKey};
pub use pressure::{Pressure, SwapKind, SwapSpec};
pub use settings::{SettingsError, ThpSettings};
pub use version::{HintParams, HintSource, KernelVersion, Policy};
