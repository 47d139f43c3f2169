//! Text and HTML rendering of results: what a person reads. It reads the result schema
//! (`uapi::RunResult`) and runs nothing: no model, no live run, and it writes no file (the CLI
//! prints or writes what it returns).
//!
//! - [`text`]: cells laid out in columns, words wrapped, names cut in the middle, the folio-size
//!   map per VMA, fitted to `TEXT_WIDTH` (100) columns unless `--wide`. Its code is still
//!   `uapi::text`, re-exported here: `live::observe`, `explain`, `compare` and sim's tests lay
//!   out their tables with it through `uapi::result`, and this crate depends on uapi, so the code
//!   can move here only when those callers name `report::text` (and compare's rows are read by
//!   this crate, not the other way round).
//! - [`print`]: the `thplab sim` table (procfs and sysfs names: /proc/vmstat `thp_*`,
//!   `hugepages-<size>/stats`, smaps' Rss and AnonHugePages), several results side by side
//!   (`sim --matrix`, `demo`), the `--wide` switch, the progress bar over simulated accesses.
//! - [`html`]: `thplab report`, one self-contained HTML page with inline SVG plots;
//!   [`plots`] draws its time plots (timelines, elapsed and phase times).
//! - [`progress`]: the step progress of a long command (`compare --record --matrix`) on stderr.

pub mod html;
pub mod plots;
pub mod print;
pub mod progress;

pub use html::{html, runs_of, Run};
pub use uapi::text;
