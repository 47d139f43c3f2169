//! The protocol between the parent and the child. fd 3 (child → parent lines): `ready {json}`,
//! `o<index>` before each operation, `pdone {json}` of each other process, `done {json}`; fd 4
//! (parent → child lines): `go`, `exit`. Inside the child, between its processes and threads:
//! the turn pipes (a u32 operation index or a token each), which keep the workload's global
//! order. The lines the child writes during the run are formatted on the stack, with raw
//! system calls (no allocation between `go` and `done`).

use serde::{Deserialize, Serialize};

use super::spec::ExecSpec;
use super::sys::{die_of, errno};
use super::STATUS_FD;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct Ready {
    pub pid: i32,
    pub start_brk: u64,
    pub brk: u64,
}

/// What a forked process reports when it exits or when the run ends (`pdone {json}`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct ProcDone {
    pub proc: usize,
    pub pid: i32,
    pub minflt: u64,
    pub exited: bool,
    /// (op index, result) of the operations it ran.
    pub results: Vec<(usize, i64)>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct Done {
    pub minflt: u64,
    pub wall_ns: u64,
    /// CLOCK_MONOTONIC at the start of the operations (the results of `phase` are times on it).
    #[serde(default)]
    pub start_ns: u64,
    /// Per op: 0 or errno; for brk the new break; touches 0.
    pub results: Vec<i64>,
    pub brk_end: u64,
    /// `--latency`: the main process's touch faults, as (bucket, count) of a
    /// `uapi::latency::Histogram`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latency: Vec<(usize, u64)>,
}

/// Write all of `buf` to `fd` (raw write(2), retried on EINTR); false on error.
pub(super) fn raw_write_all(fd: i32, mut buf: &[u8]) -> bool {
    while !buf.is_empty() {
        // SAFETY: write from a valid buffer.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return false;
        }
        buf = &buf[n as usize..];
    }
    true
}

/// Read one line (without allocating) into `buf`; `None` on EOF or error.
pub(super) fn raw_read_line(fd: i32, buf: &mut [u8; 64]) -> Option<usize> {
    let mut n = 0;
    loop {
        let mut c = 0u8;
        // SAFETY: read one byte into a valid location.
        let r = unsafe { libc::read(fd, (&mut c as *mut u8).cast(), 1) };
        if r == 0 {
            return None;
        }
        if r < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return None;
        }
        if c == b'\n' {
            return Some(n);
        }
        if n < buf.len() {
            buf[n] = c;
            n += 1;
        }
    }
}

/// `o<index>\n` on the status fd, formatted on the stack.
#[inline(never)]
pub(super) fn send_op_index(i: usize) {
    let mut buf = [0u8; 24];
    let mut digits = [0u8; 20];
    let mut n = 0;
    let mut v = i;
    loop {
        digits[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    buf[0] = b'o';
    for k in 0..n {
        buf[1 + k] = digits[n - 1 - k];
    }
    buf[1 + n] = b'\n';
    raw_write_all(STATUS_FD, &buf[..n + 2]);
}

/// What main watches while it waits: a pidfd per forked child (-1 once it ended or before its
/// fork; threads and vfork children have none), and room for the poll set (allocated before
/// `go`).
pub(super) struct MainWatch {
    pub pidfds: Vec<i32>,
    pub pfds: Vec<libc::pollfd>,
}

/// Turn tokens: an op index, or one of these.
pub(super) const TOKEN_END: u32 = u32::MAX - 1;
pub(super) const TOKEN_QUIT: u32 = u32::MAX;

/// The turn pipes of a workload with processes: each process blocks on its own pipe until an
/// operation of its own is next; the process that ran the previous operation writes that
/// operation's index (a u32) into it. Main polls, so that a child killed by a signal while it
/// holds the turn ends the run (main dies of the same signal) instead of hanging it.
#[derive(Default)]
pub(super) struct Turns {
    /// (read end, write end) per process.
    pipes: Vec<(i32, i32)>,
}

impl Turns {
    pub(super) fn new(n: usize) -> std::result::Result<Turns, String> {
        let mut pipes = Vec::with_capacity(n);
        for _ in 0..n {
            let mut fds = [0i32; 2];
            // SAFETY: pipe2 fills two fds.
            if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
                return Err(format!("pipe2: {}", std::io::Error::last_os_error()));
            }
            pipes.push((fds[0], fds[1]));
        }
        Ok(Turns { pipes })
    }

    pub(super) fn pass(&self, to: usize, token: u32) {
        raw_write_all(self.pipes[to].1, &token.to_le_bytes());
    }

    pub(super) fn read_token(&self, me: usize) -> Option<u32> {
        let mut b = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            // SAFETY: read into a valid buffer.
            let r = unsafe { libc::read(self.pipes[me].0, b[got..].as_mut_ptr().cast(), 4 - got) };
            if r <= 0 {
                if r < 0 && errno() == libc::EINTR {
                    continue;
                }
                return None;
            }
            got += r as usize;
        }
        Some(u32::from_le_bytes(b))
    }

    /// Main waits for its turn. It also watches every child through a pidfd: a child that ran
    /// `exit` hands the turn on only once it is a zombie (its mm torn down, as the model has it
    /// at that point), so main passes it on for it; a child that a signal killed kills main the
    /// same way.
    pub(super) fn main_wait(&self, w: &mut MainWatch, spec: &ExecSpec, exit_op: &[Option<usize>]) -> u32 {
        loop {
            w.pfds.clear();
            w.pfds.push(libc::pollfd { fd: self.pipes[0].0, events: libc::POLLIN, revents: 0 });
            for &fd in w.pidfds.iter().filter(|fd| **fd >= 0) {
                w.pfds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
            }
            // SAFETY: poll of valid pollfds, without a timeout (a child's end wakes it).
            let r = unsafe { libc::poll(w.pfds.as_mut_ptr(), w.pfds.len() as libc::nfds_t, -1) };
            if r <= 0 {
                continue;
            }
            if w.pfds[0].revents & libc::POLLIN != 0 {
                return self.read_token(0).unwrap_or(TOKEN_QUIT);
            }
            for k in 1..w.pfds.len() {
                if w.pfds[k].revents == 0 {
                    continue;
                }
                let fd = w.pfds[k].fd;
                let p = w.pidfds.iter().position(|f| *f == fd).expect("a watched pidfd");
                // SAFETY: waitid with WNOWAIT only looks (P_PIDFD = 3).
                let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
                let rc = unsafe { libc::waitid(3 as libc::idtype_t, fd as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT) };
                // SAFETY: si_status is valid for SIGCHLD information.
                let status = unsafe { info.si_status() };
                if rc == 0 && (info.si_code == libc::CLD_KILLED || info.si_code == libc::CLD_DUMPED) {
                    die_of(status);
                }
                // SAFETY: our own pidfd.
                unsafe { libc::close(fd) };
                w.pidfds[p] = -1;
                if let Some(e) = exit_op[p] {
                    let next = e + 1;
                    let owner = if next < spec.ops.len() { spec.ops[next].proc } else { 0 };
                    if owner == 0 {
                        return next as u32;
                    }
                    self.pass(owner, next as u32);
                }
            }
        }
    }

    /// A child or thread waits for its turn: the op index, or None when it is to leave (a
    /// process then `_exit`s, a thread returns); at the end of the run it reports first and
    /// waits to be told to go.
    pub(super) fn child_wait(&self, me: usize, minflt: u64, results: &[i64], spec: &ExecSpec) -> Option<u32> {
        match self.read_token(me) {
            Some(TOKEN_END) => {
                self.child_wait_end(me, minflt, results, spec);
                None
            }
            Some(TOKEN_QUIT) | None => None,
            Some(i) => Some(i),
        }
    }

    /// The run has ended with this child alive: report, acknowledge to main, wait for QUIT
    /// (the parent takes this process's census meanwhile).
    pub(super) fn child_wait_end(&self, me: usize, minflt: u64, results: &[i64], spec: &ExecSpec) {
        self.report(me, minflt, false, results, spec);
        self.pass(0, TOKEN_END);
        while !matches!(self.read_token(me), Some(TOKEN_QUIT) | None) {}
    }

    /// `pdone {json}` on the status fd: this process's faults and the results of its ops.
    pub(super) fn report(&self, me: usize, minflt: u64, exited: bool, results: &[i64], spec: &ExecSpec) {
        let mine: Vec<(usize, i64)> = spec.ops.iter().enumerate().filter(|(_, o)| o.proc == me).map(|(i, _)| (i, results[i])).collect();
        let d = ProcDone { proc: me, pid: std::process::id() as i32, minflt, exited, results: mine };
        if let Ok(j) = serde_json::to_string(&d) {
            raw_write_all(STATUS_FD, format!("pdone {j}\n").as_bytes());
        }
    }

    /// waitpid: 0 when the child exited with status 0, its status otherwise; a child killed by
    /// a signal kills main the same way.
    pub(super) fn wait_child(&self, pid: i32) -> i64 {
        let mut st = 0;
        // SAFETY: waitpid of our own child.
        let r = unsafe { libc::waitpid(pid, &mut st, 0) };
        if r < 0 {
            return errno() as i64;
        }
        if libc::WIFSIGNALED(st) {
            die_of(libc::WTERMSIG(st));
        }
        libc::WEXITSTATUS(st) as i64
    }
}

