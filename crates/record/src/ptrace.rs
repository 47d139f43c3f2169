//! The exec snapshots: every process of the recording is traced with ptrace so that each
//! successful execve stops it once, inside the call, where the recorder reads the address space
//! the kernel built (/proc/PID/maps) before the program runs an instruction.
//!
//! How (kernel/ptrace.c, include/linux/ptrace.h, fs/exec.c, kernel/signal.c):
//! - One thread of the recorder is the tracer (ptrace requests and the waits for a tracee's stops
//!   belong to the tracing thread). It attaches to the forked program with `PTRACE_SEIZE` while
//!   the program still waits on the recorder's pipe, before its execve, with
//!   `PTRACE_O_TRACEEXEC | TRACEFORK | TRACEVFORK | TRACECLONE`: every child and thread the
//!   program makes is traced from its creation on (`kernel/fork.c: copy_process` →
//!   `ptrace_init_task`), so every execve of every process stops.
//! - `fs/exec.c: exec_binprm` stops the task at `PTRACE_EVENT_EXEC` after the new image is loaded
//!   (stack, ELF, interpreter, vDSO) and before the call returns, so the snapshot lies between the
//!   execve's `raw_syscalls:sys_enter` and its `sys_exit`. The record's time is taken after the
//!   stop is seen and before the tracee is let go: later than the call's entry (the time the
//!   execve record carries) and earlier than anything the new image does.
//! - The other stops let the tracee go at once: fork, vfork and clone events, and the first stop
//!   of a new traced task (`PTRACE_EVENT_STOP` with SIGTRAP), with `PTRACE_CONT`; a
//!   signal-delivery stop with `PTRACE_CONT` and the same signal (the tracee gets it as it
//!   would untraced); a group-stop (`PTRACE_EVENT_STOP` with SIGSTOP, SIGTSTP, SIGTTIN or
//!   SIGTTOU) with `PTRACE_LISTEN`, so it stays stopped until SIGCONT as without a tracer. No
//!   system call stops: the program's faults are the ones it takes untraced.
//! - The waits are `waitpid(-1, __WALL | __WNOTHREAD)` in the tracer thread: only its tracees
//!   (`kernel/exit.c: do_wait` with `__WNOTHREAD` looks at the calling thread's children and
//!   tracees only), never another thread's children. The first process is the recorder's child
//!   (forked by another thread of the same process), so its tracer's wait also reaps it
//!   (`kernel/exit.c: wait_task_zombie`: not `ptrace_reparented`); its status is the tracer's
//!   result.
//! - When the first process has exited the tracer thread ends; the kernel detaches every task it
//!   still traces (`kernel/exit.c: exit_ptrace`), so descendants that outlive the program run on
//!   untraced, as they do unrecorded. No `PTRACE_O_EXITKILL`: it would kill them there.

use std::sync::mpsc;
use std::thread::JoinHandle;

use trace::MapEntry;

use crate::spawn::{parse_maps, status_code};

/// A snapshot: CLOCK_MONOTONIC ns, the process (thread group id), its maps, and where its
/// stack starts (`mm->start_stack`, if /proc/PID/stat could be read).
pub type Snapshot = (u64, u32, Vec<MapEntry>, Option<u64>);

/// What the tracer leaves when the program and every process it started have ended.
pub struct Traced {
    /// Its exit status (code, or 128 + signal).
    pub status: u32,
    pub snapshots: Vec<Snapshot>,
}

/// The tracer thread.
pub struct Tracer {
    handle: Option<JoinHandle<Result<Traced, String>>>,
}

const STOP_SIGNALS: [i32; 4] = [libc::SIGSTOP, libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU];

impl Tracer {
    /// Attach to `pid` (the forked program, not yet exec'd) from a new thread; returns when it
    /// is attached, or why it could not be.
    pub fn seize(pid: i32) -> Result<Tracer, String> {
        let (tx, rx) = mpsc::channel::<Result<(), String>>();
        let handle = std::thread::Builder::new()
            .name("thplab-ptrace".into())
            .spawn(move || {
                let options = libc::PTRACE_O_TRACEEXEC | libc::PTRACE_O_TRACEFORK | libc::PTRACE_O_TRACEVFORK | libc::PTRACE_O_TRACECLONE;
                // SAFETY: plain ptrace request on our child.
                if unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, 0, options as libc::c_long) } != 0 {
                    let e = std::io::Error::last_os_error();
                    let _ = tx.send(Err(format!("ptrace(PTRACE_SEIZE): {e}")));
                    return Err(e.to_string());
                }
                let _ = tx.send(Ok(()));
                drop(tx);
                trace_until_exit(pid)
            })
            .map_err(|e| format!("starting the tracer thread: {e}"))?;
        match rx.recv() {
            Ok(Ok(())) => Ok(Tracer { handle: Some(handle) }),
            Ok(Err(e)) => {
                let _ = handle.join();
                Err(e)
            }
            Err(_) => Err("the tracer thread ended before attaching".into()),
        }
    }

    /// The result once the program and its descendants have exited (`None` while any runs).
    pub fn try_finish(&mut self) -> Option<Result<Traced, String>> {
        if !self.handle.as_ref()?.is_finished() {
            return None;
        }
        self.finish()
    }

    /// Wait for the program and its descendants to exit.
    pub fn finish(&mut self) -> Option<Result<Traced, String>> {
        let h = self.handle.take()?;
        Some(h.join().unwrap_or_else(|_| Err("the tracer thread panicked".into())))
    }
}

fn cont(pid: i32, request: libc::c_uint, sig: i32) {
    // SAFETY: plain ptrace request on a stopped tracee; failure (the task was killed meanwhile)
    // is harmless.
    unsafe {
        libc::ptrace(request, pid, 0, sig as libc::c_long);
    }
}

/// The tracer's loop: serve every tracee's stops until `root` and every process it started
/// have exited (waitpid: ECHILD), as the live run waits for them: a child the program leaves
/// running (python's multiprocessing resource tracker, a shell's background job) goes on doing
/// its work after the program's exit, and the live run measures it at its own exit.
fn trace_until_exit(root: i32) -> Result<Traced, String> {
    let mut snapshots = Vec::new();
    let mut root_status = None;
    loop {
        let mut st = 0;
        // SAFETY: waiting for this thread's tracees.
        let pid = unsafe { libc::waitpid(-1, &mut st, libc::__WALL | libc::__WNOTHREAD) };
        if pid < 0 {
            let e = std::io::Error::last_os_error();
            match (e.raw_os_error(), root_status) {
                (Some(libc::EINTR), _) => continue,
                (Some(libc::ECHILD), Some(status)) => return Ok(Traced { status, snapshots }),
                _ => return Err(format!("waitpid: {e}")),
            }
        }
        if libc::WIFEXITED(st) || libc::WIFSIGNALED(st) {
            if pid == root {
                root_status = Some(status_code(st));
            }
            continue;
        }
        if !libc::WIFSTOPPED(st) {
            continue;
        }
        let sig = libc::WSTOPSIG(st);
        match (st >> 16) & 0xff {
            libc::PTRACE_EVENT_EXEC => {
                // After de_thread the task that exec'd has the thread group id (fs/exec.c:
                // de_thread), which waitpid reports.
                let t = crate::monotonic_ns();
                if let Ok(b) = std::fs::read(format!("/proc/{pid}/maps")) {
                    // Field 28, startstack: `mm->start_stack`, which fs/binfmt_elf.c:
                    // load_elf_binary sets to the address of argc once create_elf_tables has
                    // written the stack.
                    let stack = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|s| linux_abi::stat::field(&s, 28));
                    snapshots.push((t, pid as u32, parse_maps(&b), stack));
                }
                cont(pid, libc::PTRACE_CONT, 0);
            }
            libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK | libc::PTRACE_EVENT_CLONE => cont(pid, libc::PTRACE_CONT, 0),
            // kernel/signal.c: do_jobctl_trap reports a group-stop with its stop signal and any
            // other trap (a new task's first stop) with SIGTRAP.
            libc::PTRACE_EVENT_STOP if STOP_SIGNALS.contains(&sig) => cont(pid, libc::PTRACE_LISTEN as libc::c_uint, 0),
            libc::PTRACE_EVENT_STOP => cont(pid, libc::PTRACE_CONT, 0),
            // A signal-delivery stop: the signal goes on to the tracee.
            _ => cont(pid, libc::PTRACE_CONT, sig),
        }
    }
}
