//! Read-only probing of the live kernel: what `/proc` and the THP sysfs tree say about the
//! machine and its processes. Nothing here writes a knob, runs a workload or changes a process
//! (the tracer adds an instance of its own to tracefs and removes it); running workloads under
//! chosen settings is crates/live (the harness), and the commands built on both (agent,
//! calibrate, chase, explain, exporter, bench io) are crates of their own. The split is by job:
//! a module belongs here if all it does is read, so that tools which only look (observe,
//! explain, exporter, agent's candidate search) need neither the guard nor the executor.
//!
//! - [`procfs`]: `/proc/vmstat` (`mm/vmstat.c: vmstat_text`), `hugepages-<N>kB/stats/*`
//!   (`mm/huge_memory.c: DEFINE_MTHP_STAT_ATTR`), `/proc/PID/smaps` (`fs/proc/task_mmu.c:
//!   show_smap`), `/proc/PID/stat` (`fs/proc/array.c: do_task_stat`) and khugepaged's
//!   `/proc/PID/schedstat` (`fs/proc/base.c: proc_pid_schedstat`).
//! - [`sysfs`]: where the knobs are ([`sysfs::Paths`]), one knob's selected value
//!   (`mm/huge_memory.c: enabled_show`), the settings the tree holds, a whole tree as lines.
//! - [`census`]: which folio sizes a process maps, from `/proc/PID/pagemap`
//!   (`fs/proc/task_mmu.c: pagemap_read, pagemap_pmd_range, pte_to_pagemap_entry`: bit 63
//!   present, bits 0–54 PFN) and `/proc/kpageflags` (`fs/proc/page.c: stable_page_flags`,
//!   `include/uapi/linux/kernel-page-flags.h`: COMPOUND_HEAD 15, COMPOUND_TAIL 16, HUGE 17,
//!   THP 22, ZERO_PAGE 24), following `tools/mm/thpmaps`.
//! - [`bloat`]: how much of the memory in large folios is zero-filled, sampled through
//!   `/proc/PID/mem` (`fs/proc/base.c: mem_rw`).
//! - [`observe`]: the census of every VMA of any process, for `thplab observe`.
//! - [`inputs`]: what the order policy of a process depends on (knobs, kernel command line,
//!   `THP_enabled`, VMA flags, backing, tmpfs `huge=`), for `thplab explain`.
//! - [`khugepaged`]: khugepaged's work per process from its tracepoints
//!   (`include/trace/events/huge_memory.h`), for `thplab khugepaged`.
//! - [`metrics`]: the system-wide counters and settings and per-process census, RSS and bloat
//!   under a procfs/sysfs root, for `thplab exporter`.
//! - [`command`]: `thplab observe` and `thplab khugepaged` (the CLI keeps their arguments), and
//!   the check that a `--pid` names a process with a user address space.
//!
//! Reading PFNs needs root (`fs/proc/task_mmu.c: pagemap_read` hides them from others);
//! where the tree or the rights are missing, calls return [`LiveError::NotAvailable`].
//! [`LiveError`] is the one error type of the live side (this crate, the harness and the
//! tools), so that the CLI maps it to exit codes in one place; crates/live re-exports it.

pub mod bloat;
pub mod census;
pub mod command;
pub mod inputs;
pub mod khugepaged;
pub mod metrics;
pub mod observe;
pub mod procfs;
pub mod sysfs;

use std::path::Path;

/// Everything that can go wrong on the live side (probing, the harness, the tools). Messages
/// say what and where.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The live harness cannot run here (not root, no THP sysfs tree, not Linux, ...).
    #[error("live runs are not available here: {0}")]
    NotAvailable(String),
    /// A file operation failed.
    #[error("{what} {path}: {error}")]
    Io {
        what: &'static str,
        path: String,
        /// Not a `#[source]`: the message already holds it (it would print twice).
        error: std::io::Error,
    },
    /// Another thplab live run holds the settings lock.
    #[error("another thplab live run holds {path}{}; waited {waited_s} s", holder.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    Locked { path: String, holder: Option<i32>, waited_s: u64 },
    /// The kernel refused a knob value, or read back something else.
    #[error("THP knob {path}: {message}")]
    Knob { path: String, message: String },
    /// A file had content we could not understand.
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    /// The workload failed at a line (for example a touch of unmapped memory).
    #[error("{source_name}:{line}: {message}")]
    Workload { source_name: String, line: usize, message: String },
    /// The executor child misbehaved.
    #[error("live executor: {0}")]
    Child(String),
    /// A process to observe does not exist (any more).
    #[error("process {pid} does not exist (or has exited)")]
    NoSuchProcess { pid: i32 },
}

pub type Result<T, E = LiveError> = std::result::Result<T, E>;

/// A [`LiveError::Io`] naming what was done to which path.
pub fn io_err(what: &'static str, path: impl AsRef<Path>, source: std::io::Error) -> LiveError {
    LiveError::Io { what, path: path.as_ref().display().to_string(), error: source }
}

/// The release of the running kernel (`uname -r`).
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_default()
}
