//! The live-kernel harness: run a workload on real memory under chosen THP settings and report
//! what the kernel did, in the same [`uapi::RunResult`] schema the model prints.
//!
//! - [`guard`]: writes the knobs of `/sys/kernel/mm/transparent_hugepage` and puts them back
//!   (on drop, panic, SIGINT/SIGTERM, or at the next thplab start after a crash). Kernel side:
//!   `mm/huge_memory.c` (`enabled_store`, `defrag_store`, `anon_enabled_store`,
//!   `use_zero_page_store`, `thpsize_create`), `mm/shmem.c` (`shmem_enabled_store`,
//!   `thpsize_shmem_enabled_store`: top-level `force` needs the per-size inherit set to be
//!   exactly PMD), `mm/khugepaged.c` (the `khugepaged/*` stores).
//! - [`executor`]: runs a workload in a child (`thplab __exec`) with `mmap` (private, shared
//!   anonymous, or MAP_SHARED of a file), `munmap`, `mprotect`, `madvise`, `brk`,
//!   `prctl(PR_SET_THP_DISABLE)`, `memfd_create`, `shm_open`, `open`, `ftruncate`, `fallocate`,
//!   `pwrite` and one-byte touches; the workload's tmpfs mounts (`mm/shmem.c: shmem_parse_huge`)
//!   live in the child's own mount namespace (`unshare(CLONE_NEWNS)`) and vanish with it. It reads
//!   `/proc/vmstat` (`mm/vmstat.c: vmstat_text`), `hugepages-<N>kB/stats/*`
//!   (`mm/huge_memory.c: DEFINE_MTHP_STAT_ATTR`), `/proc/PID/smaps` (`fs/proc/task_mmu.c:
//!   show_smap`), `/proc/meminfo` (`Shmem`, `ShmemHugePages`, `ShmemPmdMapped`) and getrusage
//!   minor faults.
//! - [`census`]: which folio sizes a process maps, from `/proc/PID/pagemap`
//!   (`fs/proc/task_mmu.c: pagemap_read, pagemap_pmd_range, pte_to_pagemap_entry`: bit 63
//!   present, bits 0–54 PFN) and `/proc/kpageflags` (`fs/proc/page.c: stable_page_flags`,
//!   `include/uapi/linux/kernel-page-flags.h`: COMPOUND_HEAD 15, COMPOUND_TAIL 16, HUGE 17,
//!   THP 22, ZERO_PAGE 24). The approach follows `tools/mm/thpmaps` (PMD mappings are counted
//!   from smaps `AnonHugePages`/`ShmemPmdMapped`/`FilePmdMapped`, which pagemap cannot show).
//! - [`observe`]: the census of every VMA of any process, for `thplab observe`.
//! - [`program`]: runs a real program under the settings, followed with ptrace (exec, fork,
//!   exit stops only), and measures minflt and the census of its anonymous private memory at
//!   each process's exit, for `thplab compare --record`.
//!
//! Everything here needs root (PFNs are hidden from others, sysfs writes need CAP_SYS_ADMIN) and
//! a kernel with the THP sysfs tree; otherwise calls return [`LiveError::NotAvailable`].

pub mod agent;
pub mod bloat;
pub mod calibrate;
pub mod census;
pub mod chase;
pub mod executor;
pub mod guard;
pub mod host;
pub mod inputs;
pub mod khugepaged;
pub mod metrics;
pub mod observe;
pub mod procfs;
pub mod program;
pub mod sysfs;
pub mod timeline;

use std::path::Path;

pub use census::{census_of_ranges, CensusReport};
pub use executor::{exec_child_main, run_live, ExecOptions};
pub use guard::{recover_if_needed, SettingsGuard};
pub use observe::{observable, observe, Observable, ObserveReport};
pub use program::{run_program, ProgramOptions};

/// Everything that can go wrong in the live harness. Messages say what and where.
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

pub(crate) fn io_err(what: &'static str, path: impl AsRef<Path>, source: std::io::Error) -> LiveError {
    LiveError::Io { what, path: path.as_ref().display().to_string(), error: source }
}

/// The release of the running kernel (`uname -r`).
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_default()
}

