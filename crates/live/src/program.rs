//! Run a real program live under THP settings and measure it as the replay of a recording
//! (`sim::run_recording`) predicts it: minor faults and the folio census of its anonymous
//! private memory, summed over every process it starts.
//!
//! How:
//! - The settings are applied through [`SettingsGuard`] (the only writer of the knobs) and
//!   restored when the program and all its descendants have ended.
//! - The program is forked; the child sets `personality(ADDR_NO_RANDOMIZE)` (as the recorder
//!   does, so addresses are the recording's), `PTRACE_TRACEME`, stops itself with SIGSTOP and
//!   execs. Unlike the recorder it does **not** set PR_SET_THP_DISABLE: the live run is the
//!   program under the setting. Its stdin/stdout/stderr are ours, or /dev/null.
//! - ptrace (`PTRACE_O_TRACEEXEC | TRACEEXIT | TRACEFORK | TRACEVFORK | TRACECLONE | EXITKILL`)
//!   only stops tasks at exec, fork/clone and exit (kernel: `kernel/ptrace.c`, `ptrace_event` in
//!   `kernel/fork.c`, `fs/exec.c: exec_binprm`, `kernel/exit.c: do_exit`); no system call stops,
//!   so the overhead is a few context switches per task.
//! - minflt (`/proc/PID/stat` field 10, the whole thread group's `min_flt`, `fs/proc/array.c:
//!   do_task_stat`) is read at the program's **first exec** event (its baseline) and at each
//!   process's **exit** event: `PTRACE_EVENT_EXIT` comes before `exit_mm`, so the address space
//!   is still intact and `/proc/TID/smaps` and `/proc/TID/pagemap` of the stopped thread show
//!   it. The run's minflt is Σ (exit − baseline) over processes. The program's faults before its
//!   first exec event (our forked child before execve, execve copying the arguments, the ELF
//!   loader filling the stack) are not the program's: the recording starts at the same execve.
//!   A descendant's baseline is 0 (`kernel/fork.c: copy_mm` zeroes `min_flt`): the recording
//!   follows it from its creation, so a fork child's faults before its execve are the
//!   program's, and so are those inside every execve but the program's first.
//! - A process ends when every thread of it is held at its exit stop or dying. `exit_group`
//!   queues SIGKILL for the other threads (`kernel/signal.c: zap_other_threads`, seen in
//!   /proc/TID/status SigPnd); each takes it and stops at its own exit event (the SIGKILL is
//!   dequeued by then, so ptrace still stops it) or is already past it (PF_EXITING) or dead. A
//!   thread at its exit stop is held (for at most 50 ms) until the rest of its process is there
//!   too; then the snapshot is taken from the first held thread (the mm is intact while it is
//!   stopped before `exit_mm`, and /proc/TGID/stat sums the faults of live and dead threads
//!   alike) and all are let go. A thread whose process goes on for 50 ms is a thread leaving
//!   (`pthread_exit`) and is let go then. A process killed by a
//!   signal (SIGKILL, or any fatal signal: the kernel turns it into SIGKILL for every thread,
//!   and a task with a fatal signal pending does not stop for ptrace) gets no exit snapshot;
//!   the result lists it under `live.unmeasured`.
//! - The census at exit: every VMA of the process that is anonymous and private (smaps name
//!   empty, `[heap]`, `[stack]` or `[anon:NAME]`, perms `?? ?p`), read with [`census_of_ranges`].
//!   Such VMAs map only anonymous folios and the zero pages, so no KPF_ANON filter is needed.
//!   Anonymous copy-on-write pages inside private **file** mappings (a written `.data` page, a
//!   relocated GOT) are left out: the replay models file mappings as passthrough and does not
//!   count them either. Fork children (PTRACE_EVENT_FORK: their own copy of the parent's mm)
//!   count in the census total, as the replay, which forks their mm, does; vfork and
//!   posix_spawn children that never exec share their parent's mm and are measured (in
//!   `live.processes`) but left out, as the replay counts their faults as recorded.
//! - `Rss` and `AnonHugePages` are summed over the same VMAs of the same processes.
//! - System-wide counters (/proc/vmstat `thp_*`, `hugepages-*/stats`) are deltas over the run.
//!
//! Not measured: the memory of an image that a later exec replaced (it is gone at the exec
//! event; the replay leaves such images out of its census too), descendants killed by a
//! signal.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, Instant};

use uapi::result::{LiveProgramRun, LiveSection};
use thp_abi::{Census, ThpSettings};
use uapi::{ProcessStats, RunResult};

use probe::census::census_of_ranges;
use crate::guard::SettingsGuard;
use probe::procfs::{read_smaps, stat_field, CounterSnapshot, Vma};
use crate::sysfs::Paths;
use crate::{LiveError, Result};

/// How to run the program.
#[derive(Clone, Debug)]
pub struct ProgramOptions {
    /// stdin, stdout and stderr of the program go to /dev/null instead of being ours.
    pub quiet: bool,
}

impl Default for ProgramOptions {
    fn default() -> Self {
        ProgramOptions { quiet: false }
    }
}

/// What was measured of one process (the result's `live.processes`).
pub use uapi::result::ProgramProcess as ProcessReport;

#[derive(Default)]
struct Proc {
    report: ProcessReport,
    alive: HashSet<i32>,
    /// Threads held at their exit stop: (tid, since).
    held: Vec<(i32, Instant)>,
    snapshot_done: bool,
    /// maj_flt where `report.minflt_base` was taken.
    majflt_base: u64,
}

/// How long a thread is held at its exit stop while other threads of its process go on: if
/// they do not reach their own exit within this time, it is a thread leaving alone.
const HOLD: Duration = Duration::from_millis(50);

/// When every other live thread of `p` is held at its exit stop or dying, the process is
/// ending: take the snapshot (once) and let the held threads go.
fn group_check(p: &mut Proc) -> Result<()> {
    if p.held.is_empty() {
        return Ok(());
    }
    let ending = p.alive.iter().all(|t| p.held.iter().any(|h| h.0 == *t) || dying(*t));
    if !ending {
        return Ok(());
    }
    if !p.snapshot_done {
        p.snapshot_done = true;
        // A thread held at its exit stop can still be woken by the SIGKILL of another thread's
        // exit_group and finish exiting (a zombie has no mm: python's multiprocessing pool
        // workers): the snapshot is read through the first held thread that still has one.
        let held: Vec<i32> = p.held.iter().map(|h| h.0).collect();
        for tid in held {
            if snapshot(p, tid)? {
                break;
            }
        }
    }
    for (tid, _) in p.held.drain(..) {
        ptrace_cont(tid, 0);
    }
    Ok(())
}

/// Let go of held threads whose process did not follow them within [`HOLD`].
fn release_expired(p: &mut Proc) {
    let now = Instant::now();
    p.held.retain(|&(tid, since)| {
        if now.duration_since(since) > HOLD {
            ptrace_cont(tid, 0);
            false
        } else {
            true
        }
    });
}

fn last_errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

fn ptrace_cont(tid: i32, sig: i32) {
    // SAFETY: plain ptrace request on a tracee; failure (the task died) is harmless.
    unsafe {
        libc::ptrace(libc::PTRACE_CONT, tid, 0, sig as libc::c_long);
    }
}

fn event_msg(tid: i32) -> u64 {
    let mut m: libc::c_ulong = 0;
    // SAFETY: m is a valid c_ulong for the kernel to write.
    unsafe {
        libc::ptrace(libc::PTRACE_GETEVENTMSG, tid, 0, &mut m as *mut libc::c_ulong);
    }
    m as u64
}

fn status_text(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default()
}

fn status_field(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| l.strip_prefix(key)).map(|v| v.trim().to_string())
}

fn tgid_of(tid: i32) -> Option<i32> {
    status_field(&status_text(tid), "Tgid:")?.parse().ok()
}

/// Whether `tid` is dead or dying: gone, a zombie, SIGKILL pending (queued by a group exit and
/// not yet taken), or PF_EXITING set (`/proc/TID/stat` field 9: it took the SIGKILL and is in
/// `do_exit`).
fn dying(tid: i32) -> bool {
    const PF_EXITING: u64 = 0x4;
    let s = status_text(tid);
    if s.is_empty() {
        return true;
    }
    if let Some(st) = status_field(&s, "State:") {
        if st.starts_with('Z') || st.starts_with('X') {
            return true;
        }
    }
    let kill_bit = 1u64 << (libc::SIGKILL - 1);
    if ["SigPnd:", "ShdPnd:"].iter().any(|k| {
        status_field(&s, k).and_then(|v| u64::from_str_radix(&v, 16).ok()).is_some_and(|m| m & kill_bit != 0)
    }) {
        return true;
    }
    match std::fs::read_to_string(format!("/proc/{tid}/stat")) {
        Ok(text) => stat_field(&text, 9).is_some_and(|f| f & PF_EXITING != 0),
        Err(_) => true,
    }
}

/// min_flt and maj_flt of /proc/PID/stat (fields 10 and 12).
fn faults_of(pid: i32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some((stat_field(&text, 10)?, stat_field(&text, 12)?))
}

/// An anonymous private VMA: no file (empty name, `[heap]`, `[stack]`, `[anon:...]`), private.
pub fn is_anon_private(v: &Vma) -> bool {
    let anon_name = v.name.is_empty() || v.name == "[heap]" || v.name == "[stack]" || v.name.starts_with("[anon:");
    anon_name && v.perms.as_bytes().get(3) == Some(&b'p')
}

/// A mapping of shmem, shared or private (both modelled): a memfd, MAP_SHARED|MAP_ANONYMOUS
/// (`/dev/zero (deleted)`), SysV shm, or a file under one of the tmpfs mount points `mps`; and
/// a private mapping of /dev/zero, which is anonymous memory under the device's name.
pub fn is_shmem(v: &Vma, mps: &[String]) -> bool {
    let n = v.name.as_str();
    n.starts_with("/memfd:")
        || n.starts_with("/dev/zero")
        || n.starts_with("/SYSV")
        || mps.iter().any(|mp| n.strip_prefix(mp.as_str()).is_some_and(|rest| rest.starts_with('/')))
}

/// The mount points of the tmpfs mounts process `pid` sees (/proc/PID/mountinfo).
pub fn tmpfs_mount_points(pid: i32) -> Vec<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let dash = f.iter().position(|x| *x == "-")?;
            (f.get(dash + 1) == Some(&"tmpfs")).then(|| f.get(4).map(|m| m.replace("\\040", " ")))?
        })
        .filter(|m| m != "/")
        .collect()
}

/// Search PATH as execvp does.
fn resolve(program: &str) -> Option<std::path::PathBuf> {
    if program.contains('/') {
        return Some(program.into());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path).map(|d| d.join(program)).find(|c| {
        let Ok(cs) = CString::new(c.as_os_str().as_bytes()) else { return false };
        // SAFETY: cs is a valid C string.
        c.is_file() && unsafe { libc::access(cs.as_ptr(), libc::X_OK) } == 0
    })
}

/// The program's path, argument vector, quiet stdio and the pipe its child reports a failed
/// exec through, all prepared before the fork (the child makes only async-signal-safe calls).
struct ExecPrep {
    program: String,
    err_w: OwnedFd,
    err_r: OwnedFd,
    devnull: Option<OwnedFd>,
    /// The run's memcg's `cgroup.procs`, which the child joins before it execs.
    join: Option<CString>,
    ptrs: Vec<*const libc::c_char>,
    _cargs: Vec<CString>,
    cpath: CString,
}

/// Resolve `argv[0]` on PATH, build the C argument vector, open /dev/null for a quiet run
/// and the close-on-exec error pipe.
fn prepare_exec(argv: &[String], opts: &ProgramOptions) -> Result<ExecPrep> {
    let Some(program) = argv.first() else { return Err(LiveError::Child("no program given".into())) };
    let exe = resolve(program).ok_or_else(|| LiveError::Child(format!("{program}: command not found")))?;
    let cpath = CString::new(exe.as_os_str().as_bytes()).map_err(|_| LiveError::Child("NUL byte in the path".into()))?;
    let cargs: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| LiveError::Child("NUL byte in an argument".into()))?;
    let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let devnull = if opts.quiet {
        // SAFETY: opening a fixed path.
        let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(crate::io_err("cannot open", "/dev/null", last_errno()));
        }
        // SAFETY: fd was just opened.
        Some(unsafe { OwnedFd::from_raw_fd(fd) })
    } else {
        None
    };
    let mut fds = [0i32; 2];
    // SAFETY: fds is a two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(LiveError::Child(format!("pipe: {}", last_errno())));
    }
    // SAFETY: pipe2 returned two new descriptors.
    let (err_r, err_w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok(ExecPrep { program: program.clone(), err_w, err_r, devnull, join: None, ptrs, _cargs: cargs, cpath })
}

/// fork(); the child restores what thplab inherited, silences its stdio if asked, sets
/// ADDR_NO_RANDOMIZE, PTRACE_TRACEME, stops itself and execve()s; a failing stage writes its
/// number and errno to the error pipe. Returns the child's pid in the parent.
fn fork_tracee(prep: &ExecPrep, inherited: &exec_state::ExecState) -> Result<i32> {
    extern "C" {
        static environ: *const *const libc::c_char;
    }
    // SAFETY: between fork and execve the child makes only async-signal-safe calls on memory
    // prepared before the fork.
    let root = unsafe { libc::fork() };
    if root < 0 {
        return Err(LiveError::Child(format!("fork: {}", last_errno())));
    }
    if root == 0 {
        unsafe {
            let fail = |stage: u8| -> ! {
                let e = *libc::__errno_location();
                let mut msg = [0u8; 5];
                msg[0] = stage;
                msg[1..].copy_from_slice(&e.to_ne_bytes());
                libc::write(prep.err_w.as_raw_fd(), msg.as_ptr() as *const libc::c_void, 5);
                libc::_exit(127)
            };
            inherited.restore_in_child();
            if let Some(j) = &prep.join {
                if crate::executor::join_memcg(j).is_err() {
                    fail(4);
                }
            }
            if let Some(n) = &prep.devnull {
                for fd in 0..3 {
                    libc::dup2(n.as_raw_fd(), fd);
                }
            }
            let cur = libc::personality(0xffff_ffff);
            if cur == -1 || libc::personality((cur as libc::c_ulong) | libc::ADDR_NO_RANDOMIZE as libc::c_ulong) == -1 {
                fail(1);
            }
            if libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) != 0 {
                fail(2);
            }
            libc::raise(libc::SIGSTOP);
            libc::execve(prep.cpath.as_ptr(), prep.ptrs.as_ptr(), environ);
            fail(3);
        }
    }
    Ok(root)
}

/// Wait for the child's SIGSTOP before its execve and set the ptrace options (exec, exit,
/// fork, vfork and clone events; PTRACE_O_EXITKILL); a failure kills and reaps the child.
fn ptrace_setoptions(root: i32, program: &str) -> Result<()> {
    let mut st = 0;
    // SAFETY: waiting for our child.
    let r = unsafe { libc::waitpid(root, &mut st, libc::__WALL) };
    if r != root || !libc::WIFSTOPPED(st) {
        return Err(LiveError::Child(format!("{program}: the child did not stop before its execve (status {st:#x})")));
    }
    let options = libc::PTRACE_O_TRACEEXEC
        | libc::PTRACE_O_TRACEEXIT
        | libc::PTRACE_O_TRACEFORK
        | libc::PTRACE_O_TRACEVFORK
        | libc::PTRACE_O_TRACECLONE
        | libc::PTRACE_O_EXITKILL;
    // SAFETY: root is our stopped tracee.
    if unsafe { libc::ptrace(libc::PTRACE_SETOPTIONS, root, 0, options as libc::c_long) } != 0 {
        let e = last_errno();
        // SAFETY: killing and reaping our child.
        unsafe {
            libc::kill(root, libc::SIGKILL);
            libc::waitpid(root, &mut st, libc::__WALL);
        }
        return Err(LiveError::Child(format!("PTRACE_SETOPTIONS: {e}")));
    }
    Ok(())
}

/// The stage and errno the child wrote to the error pipe, if it wrote them (the write end is
/// closed here and, after execve or _exit, in the child).
fn read_exec_error(err_r: &OwnedFd, program: &str) -> Option<String> {
    let mut msg = [0u8; 5];
    // SAFETY: reading into msg from our pipe.
    let n = unsafe { libc::read(err_r.as_raw_fd(), msg.as_mut_ptr() as *mut libc::c_void, 5) };
    if n != 5 {
        return None;
    }
    let e = std::io::Error::from_raw_os_error(i32::from_ne_bytes([msg[1], msg[2], msg[3], msg[4]]));
    let stage = ["", "personality(ADDR_NO_RANDOMIZE)", "ptrace(PTRACE_TRACEME)", "execve", "joining the run's memory cgroup"][msg[0].min(4) as usize];
    Some(format!("{program}: {stage}: {e}"))
}

/// The tracer's view of the traced process tree.
struct Tracer<'a> {
    root: i32,
    err_r: &'a OwnedFd,
    program: &'a str,
    tasks: HashMap<i32, i32>, // tid -> tgid
    procs: BTreeMap<i32, Proc>,
    order: Vec<i32>,
    /// Tasks created by a fork/clone event whose initial SIGSTOP has not been seen yet.
    awaiting_stop: HashSet<i32>,
    /// Tasks whose first stop came before their creator's fork/clone event (tid -> tgid): they
    /// may even have exited before that event.
    early: HashMap<i32, i32>,
    root_status: Option<i32>,
    exec_checked: bool,
    first_exec_error: Option<String>,
}

impl<'a> Tracer<'a> {
    fn new(root: i32, err_r: &'a OwnedFd, program: &'a str) -> Self {
        let mut t = Tracer {
            root,
            err_r,
            program,
            tasks: HashMap::new(),
            procs: BTreeMap::new(),
            order: Vec::new(),
            awaiting_stop: HashSet::new(),
            early: HashMap::new(),
            root_status: None,
            exec_checked: false,
            first_exec_error: None,
        };
        t.tasks.insert(root, root);
        let mut p = Proc::default();
        p.report.pid = root;
        p.alive.insert(root);
        t.procs.insert(root, p);
        t.order.push(root);
        t
    }

    fn check_exec_pipe(&mut self) {
        if let Some(e) = read_exec_error(self.err_r, self.program) {
            self.first_exec_error = Some(e);
        }
    }

    /// waitpid(-1, __WALL) until no tracee is left (ECHILD), polling with WNOHANG while exit
    /// stops are held.
    fn wait_all(&mut self) -> Result<()> {
        let mut st = 0;
        loop {
            let holding = self.procs.values().any(|p| !p.held.is_empty());
            let flags = libc::__WALL | if holding { libc::WNOHANG } else { 0 };
            // SAFETY: waiting for any tracee.
            let pid = unsafe { libc::waitpid(-1, &mut st, flags) };
            if pid == 0 {
                for p in self.procs.values_mut() {
                    group_check(p)?;
                    release_expired(p);
                }
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            if pid < 0 {
                let e = last_errno();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::ECHILD) => return Ok(()),
                    _ => return Err(LiveError::Child(format!("waitpid: {e}"))),
                }
            }
            if libc::WIFEXITED(st) || libc::WIFSIGNALED(st) {
                self.on_task_exit(pid, st)?;
            } else if libc::WIFSTOPPED(st) {
                self.on_ptrace_stop(pid, st)?;
            }
        }
    }

    /// A task exited or was killed: its group is checked and, for a group leader, its end noted.
    fn on_task_exit(&mut self, pid: i32, st: i32) -> Result<()> {
        let tgid = self.tasks.remove(&pid).unwrap_or(pid);
        if pid == self.root {
            self.root_status = Some(if libc::WIFEXITED(st) { libc::WEXITSTATUS(st) } else { 128 + libc::WTERMSIG(st) });
            if !self.exec_checked {
                self.check_exec_pipe();
                self.exec_checked = true;
            }
        }
        if let Some(p) = self.procs.get_mut(&tgid) {
            p.alive.remove(&pid);
            p.held.retain(|h| h.0 != pid);
            group_check(p)?;
            if pid == tgid {
                p.report.end = if libc::WIFEXITED(st) {
                    format!("exited {}", libc::WEXITSTATUS(st))
                } else {
                    format!("killed by signal {}", libc::WTERMSIG(st))
                };
            }
        }
        Ok(())
    }

    /// A ptrace stop: an event (fork, vfork, clone, exec, exit, group stop) or a signal.
    fn on_ptrace_stop(&mut self, pid: i32, st: i32) -> Result<()> {
        let sig = libc::WSTOPSIG(st);
        let event = (st >> 16) & 0xff;
        if !self.tasks.contains_key(&pid) {
            // A new task whose first stop came before its creator's event.
            let tgid = tgid_of(pid).unwrap_or(pid);
            register(&mut self.tasks, &mut self.procs, &mut self.order, pid, tgid, 0);
            self.awaiting_stop.insert(pid);
            self.early.insert(pid, tgid);
        }
        let tgid = self.tasks[&pid];
        match event {
            libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK | libc::PTRACE_EVENT_CLONE => {
                self.on_clone_event(pid, tgid, event);
                ptrace_cont(pid, 0);
            }
            libc::PTRACE_EVENT_EXEC => {
                self.on_exec_event(pid, tgid);
                ptrace_cont(pid, 0);
            }
            libc::PTRACE_EVENT_EXIT => {
                let p = self.procs.get_mut(&tgid).expect("registered");
                p.held.push((pid, Instant::now()));
                group_check(p)?;
            }
            libc::PTRACE_EVENT_STOP => ptrace_cont(pid, 0),
            _ => {
                if sig == libc::SIGSTOP && self.awaiting_stop.remove(&pid) {
                    ptrace_cont(pid, 0);
                } else {
                    ptrace_cont(pid, sig);
                }
            }
        }
        Ok(())
    }

    /// PTRACE_EVENT_FORK/VFORK/CLONE: register the new task (or give an early one its creator).
    fn on_clone_event(&mut self, pid: i32, tgid: i32, event: i32) {
        let new = event_msg(pid) as i32;
        let new_tgid = match self.early.remove(&new) {
            // Registered at its first stop, which came first (it may have exited
            // since): its creator is known only now.
            Some(new_tgid) => {
                if let Some(p) = self.procs.get_mut(&new_tgid) {
                    if new_tgid != tgid && p.report.parent == 0 {
                        p.report.parent = tgid;
                    }
                }
                new_tgid
            }
            None => {
                let new_tgid = if event == libc::PTRACE_EVENT_CLONE { tgid_of(new).unwrap_or(tgid) } else { new };
                register(&mut self.tasks, &mut self.procs, &mut self.order, new, new_tgid, tgid);
                self.awaiting_stop.insert(new);
                new_tgid
            }
        };
        if event == libc::PTRACE_EVENT_FORK {
            if let Some(p) = self.procs.get_mut(&new_tgid) {
                p.report.forked = true;
            }
        }
    }

    /// PTRACE_EVENT_EXEC: after de_thread the exec'ing thread has the thread group id; the
    /// message is its former tid.
    fn on_exec_event(&mut self, pid: i32, tgid: i32) {
        let former = event_msg(pid) as i32;
        if former != pid {
            self.tasks.remove(&former);
        }
        if pid == self.root && !self.exec_checked {
            self.exec_checked = true;
        }
        if let Some(p) = self.procs.get_mut(&tgid) {
            p.alive.remove(&former);
            p.alive.insert(pid);
            if p.report.execs == 0 {
                // The recording starts inside the program's execve; a descendant is
                // recorded from its creation (`copy_mm` zeroes its min_flt).
                if tgid == self.root {
                    (p.report.minflt_base, p.majflt_base) = faults_of(pid).unwrap_or_default();
                }
                p.report.exe = std::fs::read_link(format!("/proc/{pid}/exe"))
                    .map(|x| x.display().to_string())
                    .unwrap_or_default();
            }
            p.report.execs += 1;
        }
    }
}

/// Run `argv` under `settings` on the live kernel and measure it (see the module docs). The
/// program's exit status is in `live.exit_status`; a program that exits non-zero is not an
/// error.
pub fn run_program(argv: &[String], settings: &ThpSettings, opts: &ProgramOptions) -> Result<RunResult> {
    run_program_under(argv, settings, opts, &thp_abi::Pressure::default())
}

/// [`run_program`] with `--memory-max`/`--swap`: the program (and every process it starts)
/// runs in a memcg of its own with that limit and that swap (crate::pressure), and the result
/// has `live.pressure`.
pub fn run_program_under(argv: &[String], settings: &ThpSettings, opts: &ProgramOptions, pressure: &thp_abi::Pressure) -> Result<RunResult> {
    // What thplab inherited, before the settings guard installs its signal handlers: the
    // program starts with it (as a recorded one does), not with thplab's own state.
    let inherited = exec_state::ExecState::capture();
    let paths = Paths::from_env();
    paths.check_available()?;
    let mut prep = prepare_exec(argv, opts)?;

    let guard = SettingsGuard::apply_with_pressure(settings, pressure)?;
    if let Some(m) = guard.recovered() {
        eprintln!("{m}");
    }
    let memcg = guard.memcg();
    prep.join = memcg.as_ref().map(|m| CString::new(m.procs().as_os_str().as_bytes()).unwrap_or_default());
    let before = CounterSnapshot::read(&paths.sysfs)?;
    let reclaim_before = memcg.as_ref().map(|_| crate::pressure::read_reclaim_vmstat()).transpose()?;
    let root = fork_tracee(&prep, inherited)?;
    drop(prep.err_w);
    drop(prep.devnull.take());
    ptrace_setoptions(root, &prep.program)?;

    let mut tracer = Tracer::new(root, &prep.err_r, &prep.program);
    let t0 = Instant::now();
    ptrace_cont(root, 0);
    tracer.wait_all()?;
    let wall = t0.elapsed();
    if !tracer.exec_checked {
        tracer.check_exec_pipe();
    }
    let after = CounterSnapshot::read(&paths.sysfs)?;
    let reclaim_after = memcg.as_ref().map(|_| crate::pressure::read_reclaim_vmstat()).transpose()?;
    let memcg_end = memcg.as_ref().map(|m| (m.clone(), m.counters()));
    guard.restore()?;
    if let Some(e) = tracer.first_exec_error.take() {
        return Err(LiveError::Child(e));
    }
    let counters = before.delta(&after);
    let mut res = program_result(argv, settings, counters, tracer, wall);
    if let (Some((m, memcg_counters)), Some(b), Some(a), Some(live)) = (memcg_end, reclaim_before, reclaim_after, res.live.as_mut()) {
        let majflt = live.program.as_ref().map_or(0, |p| p.processes.iter().map(|q| q.majflt).sum());
        let mut lp = crate::pressure::live_pressure(pressure, &m, &b, &a, majflt);
        lp.memcg = memcg_counters;
        live.pressure = Some(lp);
    }
    if let Some(lp) = res.live.as_ref().and_then(|l| l.pressure.clone()) {
        crate::pressure::result_lines(&mut res, &lp);
    }
    Ok(res)
}

/// The run's result: the counter deltas, and each process's report, census and stats (a
/// process counts in the census if it exec'd or was forked).
fn program_result(argv: &[String], settings: &ThpSettings, counters: CounterSnapshot, mut tracer: Tracer, wall: Duration) -> RunResult {
    let mut res = RunResult::new("live", &argv.join(" "));
    res.settings = settings.knob_map();
    let khugepaged = crate::executor::khugepaged_sum(std::iter::once(&counters));
    res.vmstat = counters.vmstat.into_iter().map(|(k, v)| (k.into(), v)).collect();
    res.mthp = counters.mthp.into_iter().map(|(d, m)| (d.into(), m.into_iter().map(|(k, v)| (k.into(), v)).collect())).collect();
    let mut census = Census::default();
    let mut stats = ProcessStats::default();
    let mut unmeasured = Vec::new();
    let mut reports = Vec::new();
    for pid in &tracer.order {
        let p = &mut tracer.procs.get_mut(pid).expect("registered").report;
        // Decided here, not at its exit: its creator's fork event may come after that.
        p.in_census = p.census.is_some() && (p.execs > 0 || p.forked);
        let p = &*p;
        stats.minflt += p.minflt;
        if p.minflt_exit.is_none() {
            unmeasured.push(format!("{} ({}): {}", p.pid, p.comm, if p.end.is_empty() { "no exit stop" } else { &p.end }));
        }
        if p.in_census {
            stats.rss_bytes += p.rss_kb * 1024;
            stats.anon_huge_bytes += p.anon_huge_kb * 1024;
            if let Some(c) = &p.census {
                census.add(c);
            }
        }
        reports.push(p.clone());
    }
    res.process = stats;
    res.folios = census.folio_counts();
    res.census = census;
    res.live = Some(LiveSection {
        kernel_release: crate::kernel_release(),
        wall_ms: wall.as_secs_f64() * 1e3,
        untraced_ms: None,
        hw_tlb: Vec::new(),
        time_range_ms: None,
        khugepaged,
        workload: None,
        pressure: None,
        program: Some(LiveProgramRun {
            program: argv.to_vec(),
            exit_status: tracer.root_status,
            processes: reports,
            unmeasured,
            census_scope: "anonymous VMAs and shmem VMAs (shared and private) of every process that exec'd or was forked, at its exit event".to_string(),
        }),
    });
    res
}

fn register(tasks: &mut HashMap<i32, i32>, procs: &mut BTreeMap<i32, Proc>, order: &mut Vec<i32>, tid: i32, tgid: i32, parent: i32) {
    tasks.insert(tid, tgid);
    let p = procs.entry(tgid).or_insert_with(|| {
        order.push(tgid);
        let mut p = Proc::default();
        p.report.pid = tgid;
        p.report.parent = parent;
        p
    });
    p.alive.insert(tid);
    p.report.threads += 1;
}

/// The process's exit snapshot read through `tid`; false when `tid` has no mm left.
fn snapshot(p: &mut Proc, tid: i32) -> Result<bool> {
    if status_field(&status_text(tid), "State:").is_none_or(|st| st.starts_with('Z') || st.starts_with('X')) {
        return Ok(false);
    }
    let majflt_base = p.majflt_base;
    let r = &mut p.report;
    r.comm = probe::procfs::comm(tid);
    // /proc/TGID/stat: the whole group's faults (dead threads' too).
    let exit = faults_of(r.pid).or_else(|| faults_of(tid));
    r.minflt_exit = exit.map(|f| f.0);
    r.minflt = exit.map_or(0, |f| f.0).saturating_sub(r.minflt_base);
    r.majflt = exit.map_or(0, |f| f.1).saturating_sub(majflt_base);
    let mps = tmpfs_mount_points(tid);
    // The program's own image, mapped by execve, is not a shmem mapping the model makes even
    // when it lies on a tmpfs (a test's temporary directory can be one): left out.
    let exe = std::fs::read_link(format!("/proc/{tid}/exe")).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
    let vmas: Vec<Vma> = match read_smaps(tid) {
        Ok(v) => v.into_iter().filter(|v| is_anon_private(v) || (is_shmem(v, &mps) && !(v.perms.as_bytes().get(3) == Some(&b'p') && v.name == exe))).collect(),
        Err(LiveError::NoSuchProcess { .. }) => return Ok(false),
        Err(e) => return Err(e),
    };
    r.anon_vmas = vmas.len() as u64;
    r.rss_kb = vmas.iter().map(|v| v.rss_kb).sum();
    r.anon_huge_kb = vmas.iter().map(|v| v.anon_huge_kb).sum();
    let c = match census_of_ranges(tid, &[(0, u64::MAX)], &vmas) {
        Ok(c) => c,
        Err(LiveError::NoSuchProcess { .. }) => return Ok(false),
        Err(e) => return Err(e),
    };
    r.census_ms = c.elapsed.as_secs_f64() * 1e3;
    r.census = Some(c.total);
    r.vmas = vmas.iter().zip(c.per_vma).map(|(v, census)| probe::observe::vma_map(v, census)).collect();
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anon_private_vmas() {
        let v = |name: &str, perms: &str| Vma { name: name.into(), perms: perms.into(), ..Default::default() };
        assert!(is_anon_private(&v("", "rw-p")));
        assert!(is_anon_private(&v("[heap]", "rw-p")));
        assert!(is_anon_private(&v("[stack]", "rw-p")));
        assert!(is_anon_private(&v("[anon:jemalloc]", "rw-p")));
        assert!(!is_anon_private(&v("", "rw-s")));
        assert!(!is_anon_private(&v("/usr/lib/libc.so.6", "rw-p")));
        assert!(!is_anon_private(&v("[vdso]", "r-xp")));
        assert!(!is_anon_private(&v("/dev/zero (deleted)", "rw-s")));
    }

    #[test]
    fn shmem_vmas_shared_and_private() {
        let v = |name: &str, perms: &str| Vma { name: name.into(), perms: perms.into(), ..Default::default() };
        let mps = vec!["/dev/shm".to_string()];
        assert!(is_shmem(&v("/memfd:x (deleted)", "rw-s"), &mps));
        assert!(is_shmem(&v("/memfd:x (deleted)", "rw-p"), &mps));
        assert!(is_shmem(&v("/dev/shm/f", "r--p"), &mps));
        assert!(is_shmem(&v("/dev/zero", "rw-p"), &mps));
        assert!(is_shmem(&v("/SYSV00000000", "rw-s"), &mps));
        assert!(!is_shmem(&v("/dev/shmx/f", "rw-s"), &mps));
        assert!(!is_shmem(&v("/usr/lib/libc.so.6", "r--p"), &mps));
        assert!(!is_shmem(&v("", "rw-p"), &mps));
    }
}
