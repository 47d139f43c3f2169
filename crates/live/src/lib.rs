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
//! - [`program`]: runs a real program under the settings, followed with ptrace (exec, fork,
//!   exit stops only), and measures minflt and the census of its anonymous private memory at
//!   each process's exit, for `thplab compare --record`.
//! - [`timeline`]: `--sample MS` while a workload runs: the census of its ranges, its smaps and
//!   the collapse counters every interval, and the progress line.
//! - [`host`]: the host behind a virtual machine: whether a balloon reports free pages
//!   (`mm/page_reporting.c`), the free lists a run starts from (`/proc/pagetypeinfo`,
//!   `/proc/buddyinfo`), the CPU whose per-CPU lists are quietest (`/proc/zoneinfo`), pinning a
//!   run there and holding that CPU's free THPs while it runs. Much of it reads, but its job is
//!   to prepare the state a run starts from, so it stays with the harness.
//! - [`pressure`]: `--memory-max`/`--swap`: the run's memcg (cgroup v1 `memory.limit_in_bytes`
//!   or v2 `memory.max`, chosen by /proc/self/mountinfo) and its zram or file swap
//!   (`mm/swapfile.c: SYSCALL_DEFINE2(swapon)`, `drivers/block/zram/zram_drv.c:
//!   disksize_store`), created and torn down by the guard and journalled with the knobs.
//! - [`command`]: the recovery every thplab command starts with, and the hidden `__exec` and
//!   `__hold` subcommands.
//! - [`sysfs`]: writes a knob and reads it back (`mm/huge_memory.c: enabled_store`), for the
//!   guard; the reading half is `probe::sysfs`, re-exported in it.
//!
//! The job of this crate is running workloads. Read-only probing of /proc and sysfs (the
//! counters, smaps, the folio census, bloat, observe, the policy inputs, khugepaged tracing,
//! the exporter's scrape) is crates/probe (`probe::census`, `probe::procfs`, ...). The commands built on
//! both (agent, calibrate, chase, and bench io, explain, exporter) are crates of their own.
//!
//! Everything here needs root (PFNs are hidden from others, sysfs writes need CAP_SYS_ADMIN) and
//! a kernel with the THP sysfs tree; otherwise calls return [`LiveError::NotAvailable`] (the
//! error type is probe's, one for the whole live side).

pub mod command;
pub mod executor;
pub mod guard;
pub mod host;
pub mod pressure;
pub mod program;
pub mod sysfs;
pub mod timeline;

pub use probe::{kernel_release, LiveError, Result};
pub(crate) use probe::io_err;

pub use executor::{exec_child_main, run_live, ExecOptions};
pub use guard::{recover_if_needed, SettingsGuard};
pub use program::{run_program, run_program_under, ProgramOptions};

/// Minor faults of this process so far (getrusage `ru_minflt`), as the executor counts them;
/// for tools that time faults (crates/calibrate).
pub fn minflt_now() -> u64 {
    executor::minflt_now()
}

/// One byte written to `p` and fenced, as the executor touches a page (see
/// `executor::store_page_byte` for why the fence); for tools that time faults (crates/calibrate).
///
/// # Safety
/// `p` must be a writable address of this process (a bad one kills it with SIGSEGV).
#[inline(always)]
pub unsafe fn store_page_byte(p: *mut u8) {
    // SAFETY: the caller's.
    unsafe { executor::store_page_byte(p) }
}
