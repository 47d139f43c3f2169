//! What a program run by thplab (`thplab record`, `live::run_program`) starts with: the state
//! it would have without thplab in between. A child inherits its parent's ignored signals
//! (SIG_IGN survives execve; handlers are reset to SIG_DFL), signal mask, resource limits and
//! every file descriptor without FD_CLOEXEC (fs/exec.c `begin_new_exec`: `flush_signal_handlers`
//! keeps SIG_IGN; `do_close_on_exec`). thplab's own changes must not reach the program:
//!
//! - **SIGPIPE**: Rust's runtime sets it to SIG_IGN before `main`, so the program would see
//!   EPIPE instead of dying quietly (`yes | head -1` printing "Broken pipe"). It is reset to
//!   SIG_DFL, as `std::process::Command` and shells do (whether thplab's own parent ignored it
//!   is lost before `main` runs).
//! - **Other signals** are set to what they were when [`ExecState::capture`] first ran:
//!   SIG_IGN if they were ignored then, else SIG_DFL (undoing the recorder's SIG_IGN of SIGINT
//!   and SIGQUIT and the settings guard's handlers, which would turn an ignored signal into a
//!   default one).
//! - **The signal mask and the resource limits** are set to the captured ones.
//! - **File descriptors** thplab opened itself (not open at the capture) are marked close-on-exec
//!   (`close_range(CLOSE_RANGE_CLOEXEC)`), so the program sees only the descriptors thplab
//!   inherited; the child's own pipes to its parent stay usable until the execve.
//!
//! Dispositions are read and set with the raw `rt_sigaction` system call, not the C library's
//! `sigaction`: glibc refuses the two signals it reserves for itself (32 and 33, SIGCANCEL and
//! SIGSETXID), yet a program inherits SIG_IGN on those too. Left to the C library, they kept
//! whatever the forking thplab process had at the time, which differed between the recorder
//! (which traces from a thread of its own) and the live runner: a recorded program saw 33 at
//! SIG_DFL where the live run of the same program had it ignored, as thplab's parent did.
//!
//! The environment is passed unchanged by the callers. Capture as early as possible (thplab's
//! `main` does it first); a later first call captures the state at that moment.

use std::sync::OnceLock;

/// Highest signal number on Linux (`_NSIG - 1`).
const NSIG_MAX: i32 = 64;
/// `RLIM_NLIMITS` on Linux.
const NLIMITS: usize = 16;
/// `include/uapi/linux/close_range.h`.
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

/// The kernel's `struct sigaction` (x86-64 and arm64: handler, flags, restorer, mask; the
/// `rt_sigaction` system call takes its size of the mask, 8 bytes).
#[repr(C)]
struct KernelSigaction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

/// `rt_sigaction(sig, act, old)`: the raw system call (kernel/signal.c: `do_sigaction`).
///
/// # Safety
/// `act` and `old` are null or valid.
unsafe fn rt_sigaction(sig: i32, act: *const KernelSigaction, old: *mut KernelSigaction) -> i64 {
    libc::syscall(libc::SYS_rt_sigaction, sig as libc::c_long, act, old, 8 as libc::c_long)
}

/// The inherited state, captured once per process.
pub struct ExecState {
    /// Signals ignored at the capture (bit `sig - 1`), SIGPIPE left out.
    ignored: u64,
    mask: libc::sigset_t,
    limits: [Option<libc::rlimit>; NLIMITS],
    /// Open file descriptors at the capture, ascending.
    fds: Vec<i32>,
}

static STATE: OnceLock<ExecState> = OnceLock::new();

impl ExecState {
    /// The state captured at the first call in this process.
    pub fn capture() -> &'static ExecState {
        STATE.get_or_init(ExecState::now)
    }

    fn now() -> ExecState {
        let mut ignored = 0u64;
        for sig in 1..=NSIG_MAX {
            if sig == libc::SIGPIPE || sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut old = KernelSigaction { handler: 0, flags: 0, restorer: 0, mask: 0 };
            // SAFETY: reading the disposition into `old`.
            if unsafe { rt_sigaction(sig, std::ptr::null(), &mut old) } == 0 && old.handler == libc::SIG_IGN {
                ignored |= 1 << (sig - 1);
            }
        }
        // SAFETY: reading the calling thread's mask.
        let mut mask: libc::sigset_t = unsafe { std::mem::zeroed() };
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), &mut mask) };
        let mut limits = [None; NLIMITS];
        for (i, l) in limits.iter_mut().enumerate() {
            let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            // SAFETY: getrlimit fills one rlimit.
            if unsafe { libc::getrlimit(i as _, &mut r) } == 0 {
                *l = Some(r);
            }
        }
        let mut fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
            .map(|d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
            .unwrap_or_default();
        // The directory's own descriptor was in the listing and is closed now.
        // SAFETY: F_GETFD only asks whether the descriptor is open.
        fds.retain(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0);
        fds.sort_unstable();
        ExecState { ignored, mask, limits, fds }
    }

    /// Whether `sig` was ignored at the capture (SIGPIPE: never).
    pub fn was_ignored(&self, sig: i32) -> bool {
        (1..=NSIG_MAX).contains(&sig) && self.ignored & (1 << (sig - 1)) != 0
    }

    /// Give the calling process the captured state (see the module docs). For the child
    /// between fork and execve: only system calls, no allocation.
    ///
    /// # Safety
    /// Call in a forked child before execve (it changes the process's signal dispositions,
    /// mask, limits and descriptor flags).
    pub unsafe fn restore_in_child(&self) {
        for sig in 1..=NSIG_MAX {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let act = KernelSigaction { handler: if self.was_ignored(sig) { libc::SIG_IGN } else { libc::SIG_DFL }, flags: 0, restorer: 0, mask: 0 };
            rt_sigaction(sig, &act, std::ptr::null_mut());
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &self.mask, std::ptr::null_mut());
        for (i, l) in self.limits.iter().enumerate() {
            let Some(want) = l else { continue };
            let mut cur = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            if libc::getrlimit(i as _, &mut cur) == 0 && (cur.rlim_cur != want.rlim_cur || cur.rlim_max != want.rlim_max) {
                libc::setrlimit(i as _, want);
            }
        }
        if self.fds.is_empty() {
            // The capture could not list /proc/self/fd: leave the descriptors alone.
            return;
        }
        let mut from: u32 = 0;
        for &fd in &self.fds {
            let fd = fd as u32;
            if fd > from {
                libc::syscall(libc::SYS_close_range, from, fd - 1, CLOSE_RANGE_CLOEXEC);
            }
            from = fd + 1;
        }
        libc::syscall(libc::SYS_close_range, from, u32::MAX, CLOSE_RANGE_CLOEXEC);
    }
}

#[cfg(test)]
mod tests {
    use super::ExecState;

    #[test]
    fn a_forked_child_gets_the_captured_state() {
        let s = ExecState::capture();
        assert!(!s.was_ignored(libc::SIGPIPE), "SIGPIPE is never kept ignored");
        // SAFETY: a pipe without O_CLOEXEC opened after the capture, a fork that only makes
        // system calls, and the child's _exit.
        unsafe {
            let mut fds = [0i32; 2];
            assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
            let pid = libc::fork();
            if pid == 0 {
                s.restore_in_child();
                let mut act: libc::sigaction = std::mem::zeroed();
                libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut act);
                let cloexec = libc::fcntl(fds[1], libc::F_GETFD) & libc::FD_CLOEXEC != 0;
                let ok = act.sa_sigaction == libc::SIG_DFL && cloexec;
                libc::_exit(if ok { 0 } else { 1 });
            }
            let mut st = 0;
            libc::waitpid(pid, &mut st, 0);
            libc::close(fds[0]);
            libc::close(fds[1]);
            assert!(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0, "status {st:#x}");
        }
    }
}
