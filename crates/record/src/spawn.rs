//! Starting the program: PATH search, fork, the child's preparation (the signal dispositions,
//! mask, limits and descriptors thplab inherited (crate `exec-state`), THP disabled, no address
//! randomisation, waiting for the recorder), the tracer attached (`ptrace`: with exec snapshots,
//! every execve of every process stops once for /proc/PID/maps), execve, and waiting.

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use trace::{perm, MapEntry};

use crate::{RecordError, RecordOptions};

extern "C" {
    static environ: *const *const libc::c_char;
}

/// The file `program` names: itself when it contains a `/`, else the first executable file of
/// that name in PATH.
pub fn resolve_program(program: &OsStr) -> Result<OsString, RecordError> {
    let name = program.to_string_lossy().into_owned();
    if program.as_bytes().contains(&b'/') {
        return Ok(program.to_os_string());
    }
    let path =
        std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
    for dir in std::env::split_paths(&path) {
        let cand = dir.join(program);
        if let Ok(c) = CString::new(cand.as_os_str().as_bytes()) {
            // SAFETY: c is a valid C string.
            if unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0 && cand.is_file() {
                return Ok(cand.into_os_string());
            }
        }
    }
    Err(RecordError::Exec {
        program: name,
        reason: "command not found".into(),
        not_found: true,
    })
}

/// The forked program, waiting for [`Child::release`].
pub struct Child {
    pid: i32,
    /// The seccomp listener taken from the child (see `notify`), or why there is none; `None`
    /// when neither paths nor THP answers were asked for.
    listener: Option<Result<OwnedFd, String>>,
    go: Option<OwnedFd>,
    err: OwnedFd,
    status: std::cell::Cell<Option<u32>>,
    program: String,
    /// With exec snapshots: the thread that traces the program and its descendants (it also
    /// waits for the program: see `ptrace`).
    tracer: Option<crate::ptrace::Tracer>,
    snapshots: Vec<crate::ptrace::Snapshot>,
}

fn pipe() -> Result<(OwnedFd, OwnedFd), RecordError> {
    let mut fds = [0i32; 2];
    // SAFETY: fds is a two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(RecordError::Other(format!(
            "pipe: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: pipe2 returned two new descriptors.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

const STAGES: [&str; 5] = [
    "",
    "prctl(PR_SET_THP_DISABLE)",
    "personality(ADDR_NO_RANDOMIZE)",
    // (Stage 3 was PTRACE_TRACEME; the tracer now attaches from the recorder.)
    "",
    "execve",
];

pub(crate) fn status_code(st: i32) -> u32 {
    if libc::WIFEXITED(st) {
        libc::WEXITSTATUS(st) as u32
    } else if libc::WIFSIGNALED(st) {
        128 + libc::WTERMSIG(st) as u32
    } else {
        255
    }
}

/// The C path and argument vector of an execve, prepared before the fork.
#[allow(clippy::type_complexity)]
fn exec_args(path: &OsStr, argv: &[OsString], program: &str) -> Result<(CString, Vec<CString>, Vec<*const libc::c_char>), RecordError> {
    let cpath = CString::new(path.as_bytes()).map_err(|_| RecordError::Exec {
        program: program.to_string(),
        reason: "NUL byte in the path".into(),
        not_found: false,
    })?;
    let cargs: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.clone().into_vec()))
        .collect::<Result<_, _>>()
        .map_err(|_| RecordError::Exec {
            program: program.to_string(),
            reason: "NUL byte in an argument".into(),
            not_found: false,
        })?;
    let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    Ok((cpath, cargs, ptrs))
}

/// The child's ends of the go, error and listener pipes.
struct ChildFds {
    go_r: i32,
    err_w: i32,
    lis_w: i32,
}

/// The child between fork and execve: restore what thplab inherited, PR_SET_THP_DISABLE,
/// ADDR_NO_RANDOMIZE, install the seccomp listener (`filter`, if any) and report it, wait for
/// the recorder's go, execve; a failing stage writes its number and errno to the error pipe.
///
/// # Safety
/// Only in the child after fork(): it makes only async-signal-safe calls.
unsafe fn exec_in_child(
    cpath: &CString,
    ptrs: &[*const libc::c_char],
    fds: ChildFds,
    inherited: &exec_state::ExecState,
    thp_disable: bool,
    filter: Option<&[libc::sock_filter]>,
) -> ! {
    let fail = |stage: u8| -> ! {
        let e = *libc::__errno_location();
        let mut msg = [0u8; 5];
        msg[0] = stage;
        msg[1..].copy_from_slice(&e.to_ne_bytes());
        libc::write(fds.err_w, msg.as_ptr() as *const libc::c_void, 5);
        libc::_exit(127)
    };
    // What thplab inherited, not what it changed (SIGPIPE ignored by Rust's
    // runtime, descriptors it opened): the program starts as it would without it.
    inherited.restore_in_child();
    if thp_disable && libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0 {
        fail(1);
    }
    let cur = libc::personality(0xffff_ffff);
    if cur == -1
        || libc::personality(
            (cur as libc::c_ulong) | libc::ADDR_NO_RANDOMIZE as libc::c_ulong,
        ) == -1
    {
        fail(2);
    }
    if let Some(prog) = filter {
        // The listener's number, or minus errno, for the parent to take.
        let fd = crate::notify::install_in_child(prog);
        let v: i32 = if fd >= 0 { fd } else { -*libc::__errno_location() };
        libc::write(fds.lis_w, v.to_ne_bytes().as_ptr() as *const libc::c_void, 4);
    }
    let mut b = 0u8;
    loop {
        let r = libc::read(fds.go_r, &mut b as *mut u8 as *mut libc::c_void, 1);
        if r == 1 {
            break;
        }
        if r < 0 && *libc::__errno_location() == libc::EINTR {
            continue;
        }
        // The recorder went away without releasing us.
        libc::_exit(127);
    }
    libc::execve(cpath.as_ptr(), ptrs.as_ptr(), environ);
    fail(4);
}

/// The seccomp listener the child reports on its pipe, taken with pidfd_getfd.
fn take_child_listener(lis_r: &OwnedFd, pid: i32) -> Result<OwnedFd, String> {
    let mut v = [0u8; 4];
    // SAFETY: reading 4 bytes into v; the child writes them before waiting.
    let n = unsafe { libc::read(lis_r.as_raw_fd(), v.as_mut_ptr() as *mut libc::c_void, 4) };
    let fd = i32::from_ne_bytes(v);
    if n != 4 {
        Err("the child did not report its seccomp listener".to_string())
    } else if fd < 0 {
        Err(format!("seccomp user notification: {}", std::io::Error::from_raw_os_error(-fd)))
    } else {
        crate::notify::take_listener(pid, fd).map_err(|e| format!("pidfd_getfd: {e}"))
    }
}

impl Child {
    pub fn fork(
        path: &OsStr,
        argv: &[OsString],
        opts: &RecordOptions,
    ) -> Result<Child, RecordError> {
        let program = argv[0].to_string_lossy().into_owned();
        let (cpath, _cargs, ptrs) = exec_args(path, argv, &program)?;
        let (go_r, go_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        let (lis_r, lis_w) = pipe()?;
        let paths = opts.paths;
        let thp_disable = opts.thp_disable;
        // The listener stops path calls (paths) and answers the calls whose result
        // PR_SET_THP_DISABLE changes (thp_disable).
        let listen = paths || thp_disable;
        let prog = crate::notify::filter(paths, thp_disable);
        let inherited = exec_state::ExecState::capture();
        // SAFETY: between fork and execve/_exit the child only makes async-signal-safe calls on
        // memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(RecordError::Other(format!(
                "fork: {}",
                std::io::Error::last_os_error()
            )));
        }
        if pid == 0 {
            let fds = ChildFds { go_r: go_r.as_raw_fd(), err_w: err_w.as_raw_fd(), lis_w: lis_w.as_raw_fd() };
            // SAFETY: in the child after fork, on memory prepared before it.
            unsafe { exec_in_child(&cpath, &ptrs, fds, inherited, thp_disable, listen.then_some(&prog[..])) }
        }
        drop(go_r);
        drop(err_w);
        drop(lis_w);
        let listener = listen.then(|| take_child_listener(&lis_r, pid));
        Ok(Child {
            pid,
            listener,
            go: Some(go_w),
            err: err_r,
            status: std::cell::Cell::new(None),
            program,
            tracer: None,
            snapshots: Vec::new(),
        })
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The seccomp listener (once), `None` when neither paths nor THP answers were asked for.
    pub fn take_listener(&mut self) -> Option<Result<OwnedFd, String>> {
        self.listener.take()
    }

    /// Kill and reap the child (recording could not be set up).
    pub fn abort(self) {
        // SAFETY: pid is our child, not yet reaped.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            let mut st = 0;
            libc::waitpid(self.pid, &mut st, 0);
        }
    }

    /// Let the child execve. With `snapshot`, it is traced first (`ptrace::Tracer`): every
    /// execve of it and of its descendants is stopped once for a snapshot of the new address
    /// space, collected by [`Child::take_snapshots`] once it has exited.
    pub fn release(&mut self, snapshot: bool) -> Result<(), RecordError> {
        let this = self;
        if snapshot {
            match crate::ptrace::Tracer::seize(this.pid) {
                Ok(t) => this.tracer = Some(t),
                Err(e) => {
                    // SAFETY: pid is our child, waiting on the pipe, not traced.
                    unsafe {
                        libc::kill(this.pid, libc::SIGKILL);
                        let mut st = 0;
                        libc::waitpid(this.pid, &mut st, 0);
                    }
                    return Err(RecordError::Other(format!("tracing the program for its exec snapshots: {e}")));
                }
            }
        }
        if let Some(go) = this.go.take() {
            // SAFETY: go is the write end of the pipe the child waits on.
            unsafe {
                libc::write(go.as_raw_fd(), b"g".as_ptr() as *const libc::c_void, 1);
            }
        }
        let mut msg = [0u8; 5];
        let mut n = 0;
        while n < 5 {
            // SAFETY: reading into msg.
            let r = unsafe {
                libc::read(
                    this.err.as_raw_fd(),
                    msg.as_mut_ptr().add(n) as *mut libc::c_void,
                    5 - n,
                )
            };
            if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            if r <= 0 {
                break;
            }
            n += r as usize;
        }
        if n == 5 {
            let errno = i32::from_ne_bytes([msg[1], msg[2], msg[3], msg[4]]);
            // The child exits right after writing the message: reap it (through its tracer,
            // which waits for it).
            if let Some(mut t) = this.tracer.take() {
                let _ = t.finish();
            } else {
                let mut st = 0;
                // SAFETY: pid is our child.
                unsafe {
                    libc::waitpid(this.pid, &mut st, 0);
                }
            }
            let stage = STAGES.get(msg[0] as usize).copied().unwrap_or("?");
            return Err(RecordError::Exec {
                program: this.program.clone(),
                reason: format!("{stage}: {}", std::io::Error::from_raw_os_error(errno)),
                not_found: msg[0] == 4 && errno == libc::ENOENT,
            });
        }
        Ok(())
    }

    /// The exec snapshots taken (CLOCK_MONOTONIC ns, pid, maps), in the order taken; complete
    /// once [`Child::try_wait`] has returned the status.
    pub fn take_snapshots(&mut self) -> Vec<crate::ptrace::Snapshot> {
        std::mem::take(&mut self.snapshots)
    }

    /// The exit status (code, or 128 + signal) once the child has exited.
    pub fn try_wait(&mut self) -> Result<Option<u32>, RecordError> {
        if let Some(s) = self.status.get() {
            return Ok(Some(s));
        }
        if let Some(t) = self.tracer.as_mut() {
            // The tracer waits for (and reaps) the traced program.
            return match t.try_finish() {
                None => Ok(None),
                Some(Ok(done)) => {
                    self.tracer = None;
                    self.snapshots = done.snapshots;
                    self.status.set(Some(done.status));
                    Ok(Some(done.status))
                }
                Some(Err(e)) => {
                    self.tracer = None;
                    Err(RecordError::Other(format!("tracing the program: {e}")))
                }
            };
        }
        let mut st = 0;
        // SAFETY: pid is our child.
        let r = unsafe { libc::waitpid(self.pid, &mut st, libc::WNOHANG) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                return Ok(None);
            }
            return Err(RecordError::Other(format!("waitpid: {e}")));
        }
        if r == 0 {
            return Ok(None);
        }
        let s = status_code(st);
        self.status.set(Some(s));
        Ok(Some(s))
    }
}

/// /proc/PID/maps lines as [`MapEntry`]s (unparseable lines are skipped).
pub fn parse_maps(b: &[u8]) -> Vec<MapEntry> {
    let mut v = Vec::new();
    for line in b.split(|&c| c == b'\n') {
        let s = String::from_utf8_lossy(line);
        let mut it = s.splitn(6, ' ');
        let (Some(range), Some(perms), Some(off), Some(dev), Some(ino)) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            continue;
        };
        let path = it.next().unwrap_or("").trim_start();
        let Some((a, e)) = range.split_once('-') else {
            continue;
        };
        let Some((maj, min)) = dev.split_once(':') else {
            continue;
        };
        let (Ok(start), Ok(end), Ok(offset), Ok(maj), Ok(min), Ok(ino)) = (
            u64::from_str_radix(a, 16),
            u64::from_str_radix(e, 16),
            u64::from_str_radix(off, 16),
            u32::from_str_radix(maj, 16),
            u32::from_str_radix(min, 16),
            ino.parse::<u64>(),
        ) else {
            continue;
        };
        let p = perms.as_bytes();
        let mut bits = 0;
        for (i, (c, bit)) in [
            (b'r', perm::READ),
            (b'w', perm::WRITE),
            (b'x', perm::EXEC),
            (b's', perm::SHARED),
        ]
        .into_iter()
        .enumerate()
        {
            if p.get(i) == Some(&c) {
                bits |= bit;
            }
        }
        v.push(MapEntry {
            start,
            end,
            perms: bits,
            offset,
            maj,
            min,
            ino,
            path: Path::new(path).as_os_str().as_bytes().to_vec(),
        });
    }
    v
}

/// Ignore SIGINT and SIGQUIT while the program runs (as a shell does for a foreground job): a
/// Ctrl-C reaches the program, and the recorder stays to write what it recorded.
pub struct IgnoreInterrupts {
    old: [libc::sighandler_t; 2],
}

impl IgnoreInterrupts {
    pub fn new() -> Self {
        // SAFETY: installing SIG_IGN is always valid.
        unsafe {
            IgnoreInterrupts {
                old: [
                    libc::signal(libc::SIGINT, libc::SIG_IGN),
                    libc::signal(libc::SIGQUIT, libc::SIG_IGN),
                ],
            }
        }
    }
}

impl Drop for IgnoreInterrupts {
    fn drop(&mut self) {
        // SAFETY: restoring the handlers that were installed before.
        unsafe {
            libc::signal(libc::SIGINT, self.old[0]);
            libc::signal(libc::SIGQUIT, self.old[1]);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_maps_lines() {
        let m = super::parse_maps(b"00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon\n7ffd1000-7ffd2000 rw-p 00000000 00:00 0 \n");
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].start, 0x400000);
        assert_eq!(m[0].maj, 8);
        assert_eq!(m[0].ino, 173521);
        assert_eq!(m[0].path, b"/usr/bin/dbus-daemon");
        assert_eq!(m[1].path, b"");
        assert_eq!(m[1].perms, trace::perm::READ | trace::perm::WRITE);
    }
}
