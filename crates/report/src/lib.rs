//! Text and HTML rendering of results: what a person reads. It reads the result schema
//! (`uapi::RunResult`) and runs nothing: no model, no live run, and it writes no file (the CLI
//! prints or writes what it returns).
//!
//! - [`compare`]: the experiment's text (`thplab compare`, `demo`): rows, timelines side by
//!   side, partings, the time table, read from `uapi::compare`.
//! - [`html`]: `thplab report`, one self-contained HTML page with inline SVG plots.
//! - [`plots`]: the time plots of that page (timelines, elapsed and phase times).
//! - [`print`]: the `thplab sim` table (procfs and sysfs names: /proc/vmstat `thp_*`,
//!   `hugepages-<size>/stats`, smaps' Rss and AnonHugePages), several results side by side
//!   (`sim --matrix`, `demo`), the `--wide` switch, the progress bar over simulated accesses.
//! - [`progress`]: the step progress of a long command (`compare --record --matrix`) on stderr.
//! - [`study`]: `thplab report STUDY.parquet`, a study's time and memory against an axis and
//!   its Pareto fronts.
//! - [`settings`]: `thplab settings` printed: PATH=VALUE lines, `--list`, `--json`.
//! - [`text`]: lays out every text table: cells in columns as wide as their widest cell, words
//!   wrapped, names cut in the middle, the folio-size map per VMA, fitted to `TEXT_WIDTH` (100)
//!   columns unless `--wide`. `probe::observe`, `explain`, the tools and [`compare`] call it
//!   here.

pub mod compare;
pub mod html;
pub mod plots;
pub mod print;
pub mod progress;
pub mod settings;
pub mod study;
pub mod text;

pub use html::{html, runs_of, Run};
