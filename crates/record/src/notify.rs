//! Paths of open, openat, creat, unlink and unlinkat: a seccomp filter with a user-notification
//! listener, installed in the child before its execve, stops each of these calls at its entry;
//! the recorder reads the path from the thread's memory, makes it absolute (the thread's working
//! directory or the dirfd's path), looks the file (or the directory it would be created in) up
//! with stat and statfs through /proc/TID/root, and lets the call continue unchanged
//! (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`). The kernel side: `kernel/seccomp.c`
//! (`seccomp_do_user_notification`, `seccomp_notify_recv`, `seccomp_notify_send`,
//! `seccomp_notify_poll`).
//!
//! A perf tracepoint cannot give the path (the argument is a user pointer, and the recorder
//! cannot read user memory soundly after the fact); the notification holds the thread until
//! the recorder has looked.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use trace::{PathInfo, SyscallKind};

/// `_IOWR('!', 0, struct seccomp_notif)`.
const SECCOMP_IOCTL_NOTIF_RECV: libc::c_ulong = 0xc050_2100;
/// `_IOWR('!', 1, struct seccomp_notif_resp)`.
const SECCOMP_IOCTL_NOTIF_SEND: libc::c_ulong = 0xc018_2101;
/// `_IOW('!', 2, __u64)`.
const SECCOMP_IOCTL_NOTIF_ID_VALID: libc::c_ulong = 0x4008_2102;
const SECCOMP_USER_NOTIF_FLAG_CONTINUE: u32 = 1;
const SECCOMP_FILTER_FLAG_NEW_LISTENER: libc::c_ulong = 1 << 3;
const SECCOMP_RET_USER_NOTIF: u32 = 0x7fc0_0000;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const AT_FDCWD: i32 = -100;

/// The calls stopped, with the argument index of their path and of their dirfd.
const CALLS: [(i64, SyscallKind, usize, Option<usize>); 5] = [
    (libc::SYS_open, SyscallKind::Open, 0, None),
    (libc::SYS_openat, SyscallKind::Openat, 1, Some(0)),
    (libc::SYS_creat, SyscallKind::Creat, 0, None),
    (libc::SYS_unlink, SyscallKind::Unlink, 0, None),
    (libc::SYS_unlinkat, SyscallKind::Unlinkat, 1, Some(0)),
];

/// The BPF program: x86_64 and one of [`CALLS`] → notify, else allow.
pub fn filter() -> Vec<libc::sock_filter> {
    let stmt = |code: u16, k: u32| libc::sock_filter { code, jt: 0, jf: 0, k };
    let jeq = |k: u32, jt: u8, jf: u8| libc::sock_filter { code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16, jt, jf, k };
    let ld = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    let ret = (libc::BPF_RET | libc::BPF_K) as u16;
    let n = CALLS.len() as u8;
    let mut v = vec![stmt(ld, 4), jeq(AUDIT_ARCH_X86_64, 0, n + 1), stmt(ld, 0)];
    for (i, (nr, ..)) in CALLS.iter().enumerate() {
        // Match: jump over the remaining compares and the allow to the notify.
        v.push(jeq(*nr as u32, n - i as u8, 0));
    }
    v.push(stmt(ret, SECCOMP_RET_ALLOW));
    v.push(stmt(ret, SECCOMP_RET_USER_NOTIF));
    v
}

/// In the child, before execve (async-signal-safe: no allocation). Returns the listener fd or
/// -1 with errno set. `prog` is [`filter`]'s output, built before the fork.
///
/// # Safety
/// Called between fork and execve with a program built before the fork.
pub unsafe fn install_in_child(prog: &[libc::sock_filter]) -> i32 {
    let fprog = libc::sock_fprog { len: prog.len() as u16, filter: prog.as_ptr() as *mut libc::sock_filter };
    let call = || libc::syscall(libc::SYS_seccomp, 1 as libc::c_ulong, SECCOMP_FILTER_FLAG_NEW_LISTENER, &fprog as *const libc::sock_fprog) as i32;
    let fd = call();
    if fd >= 0 || *libc::__errno_location() != libc::EACCES {
        return fd;
    }
    // Without CAP_SYS_ADMIN a filter needs no_new_privs (set-user-ID programs then run without
    // their privileges).
    if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
        return -1;
    }
    call()
}

/// Take the child's listener fd `fd` into this process (`pidfd_getfd`).
pub fn take_listener(pid: i32, fd: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: plain system calls; the results are checked.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as i32;
        if pidfd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let pidfd = OwnedFd::from_raw_fd(pidfd);
        let got = libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) as i32;
        if got < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(got))
    }
}

/// One resolved path: when, which thread, what.
pub struct Resolved {
    pub time: u64,
    pub pid: u32,
    pub tid: u32,
    pub info: PathInfo,
}

/// The recorder's side of the listener.
pub struct Listener {
    pub fd: OwnedFd,
    pub resolved: Vec<Resolved>,
    /// Notifications whose thread went away before it could be looked at.
    pub vanished: u64,
}

impl Listener {
    pub fn new(fd: OwnedFd) -> Listener {
        Listener { fd, resolved: Vec::new(), vanished: 0 }
    }

    /// Answer every pending notification (call when poll says POLLIN).
    pub fn serve(&mut self) {
        loop {
            let mut p = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd.
            if unsafe { libc::poll(&mut p, 1, 0) } <= 0 || p.revents & libc::POLLIN == 0 {
                return;
            }
            // SAFETY: seccomp_notif is plain data; the kernel fills it (it must be zeroed).
            let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
            // SAFETY: the ioctl writes one seccomp_notif.
            if unsafe { libc::ioctl(self.fd.as_raw_fd(), SECCOMP_IOCTL_NOTIF_RECV as _, &mut n) } != 0 {
                // ENOENT: the thread was killed between poll and recv.
                continue;
            }
            let time = crate::monotonic_ns();
            let info = self.look(&n);
            // SAFETY: the ioctl reads one u64.
            let valid = unsafe { libc::ioctl(self.fd.as_raw_fd(), SECCOMP_IOCTL_NOTIF_ID_VALID as _, &n.id) } == 0;
            match info {
                Some((pid, info)) if valid => self.resolved.push(Resolved { time, pid, tid: n.pid, info }),
                _ => self.vanished += 1,
            }
            let resp = libc::seccomp_notif_resp { id: n.id, val: 0, error: 0, flags: SECCOMP_USER_NOTIF_FLAG_CONTINUE };
            // SAFETY: the ioctl reads one seccomp_notif_resp; an error means the thread is gone.
            unsafe {
                libc::ioctl(self.fd.as_raw_fd(), SECCOMP_IOCTL_NOTIF_SEND as _, &resp);
            }
        }
    }

    /// Read and resolve the path of a stopped call; (tgid, info).
    fn look(&self, n: &libc::seccomp_notif) -> Option<(u32, PathInfo)> {
        let &(_, kind, path_arg, dirfd_arg) = CALLS.iter().find(|c| c.0 == n.data.nr as i64)?;
        let tid = n.pid;
        let raw = read_cstring(tid, n.data.args[path_arg])?;
        let path = if raw.first() == Some(&b'/') {
            raw
        } else {
            let dirfd = dirfd_arg.map_or(AT_FDCWD, |i| n.data.args[i] as i32);
            let base = if dirfd == AT_FDCWD { format!("/proc/{tid}/cwd") } else { format!("/proc/{tid}/fd/{dirfd}") };
            let mut b = std::fs::read_link(base).ok()?.as_os_str().as_bytes().to_vec();
            if b.last() != Some(&b'/') {
                b.push(b'/');
            }
            b.extend_from_slice(&raw);
            b
        };
        let tgid = tgid_of(tid)?;
        let mut info = PathInfo { call: kind.code(), path, ..Default::default() };
        let rooted = |p: &[u8]| {
            let mut r = format!("/proc/{tid}/root").into_bytes();
            r.extend_from_slice(p);
            CString::new(r).ok()
        };
        let dir = match info.path.iter().rposition(|&c| c == b'/') {
            Some(0) => b"/".to_vec(),
            Some(i) => info.path[..i].to_vec(),
            None => b"/".to_vec(),
        };
        for (p, is_file) in [(info.path.clone(), true), (dir, false)] {
            let Some(c) = rooted(&p) else { continue };
            // SAFETY: stat and statfs fill plain structs from a valid C string.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            if unsafe { libc::stat(c.as_ptr(), &mut st) } != 0 {
                continue;
            }
            let mut sf: libc::statfs = unsafe { std::mem::zeroed() };
            if unsafe { libc::statfs(c.as_ptr(), &mut sf) } == 0 {
                info.fs_magic = sf.f_type as u64;
            }
            info.maj = libc::major(st.st_dev);
            info.min = libc::minor(st.st_dev);
            if is_file {
                info.exists = true;
                info.ino = st.st_ino;
                info.size = st.st_size as u64;
            }
            break;
        }
        Some((tgid, info))
    }
}

/// A NUL-terminated string at `addr` in thread `tid` (at most 4096 bytes).
fn read_cstring(tid: u32, addr: u64) -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(format!("/proc/{tid}/mem")).ok()?;
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < 4096 {
        // Up to the end of the page, so that a string near an unmapped page still reads.
        let chunk = (4096 - (at % 4096)) as usize;
        let mut buf = vec![0u8; chunk];
        let n = f.read_at(&mut buf, at).ok()?;
        if n == 0 {
            return None;
        }
        if let Some(z) = buf[..n].iter().position(|&c| c == 0) {
            out.extend_from_slice(&buf[..z]);
            return Some(out);
        }
        out.extend_from_slice(&buf[..n]);
        at += n as u64;
    }
    None
}

fn tgid_of(tid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    s.lines().find_map(|l| l.strip_prefix("Tgid:")).and_then(|v| v.trim().parse().ok())
}

/// After the program's end: if some task still holds the filter (a descendant that outlived
/// it), hand the listener to a detached process that lets every call continue until the last
/// such task is gone; otherwise just close it.
pub fn release(l: Listener) {
    let fd = l.fd;
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, 0) };
    if p.revents & libc::POLLHUP != 0 {
        return;
    }
    // SAFETY: the grandchild only makes system calls on memory prepared before the fork.
    unsafe {
        let pid = libc::fork();
        if pid == 0 {
            if libc::fork() != 0 {
                libc::_exit(0);
            }
            let mut n: libc::seccomp_notif = std::mem::zeroed();
            loop {
                let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
                if libc::poll(&mut p, 1, -1) < 0 {
                    continue;
                }
                if p.revents & libc::POLLHUP != 0 {
                    libc::_exit(0);
                }
                std::ptr::write_bytes(&mut n as *mut libc::seccomp_notif, 0, 1);
                if libc::ioctl(fd.as_raw_fd(), SECCOMP_IOCTL_NOTIF_RECV as _, &mut n) != 0 {
                    continue;
                }
                let resp = libc::seccomp_notif_resp { id: n.id, val: 0, error: 0, flags: SECCOMP_USER_NOTIF_FLAG_CONTINUE };
                libc::ioctl(fd.as_raw_fd(), SECCOMP_IOCTL_NOTIF_SEND as _, &resp);
            }
        }
        if pid > 0 {
            let mut st = 0;
            libc::waitpid(pid, &mut st, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_filter_notifies_exactly_the_path_calls() {
        // Run the BPF program by hand over seccomp_data-like input.
        let prog = super::filter();
        let run = |arch: u32, nr: u32| -> u32 {
            let mut pc = 0;
            let mut acc = 0u32;
            loop {
                let i = &prog[pc];
                match i.code as u32 {
                    c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => acc = if i.k == 4 { arch } else { nr },
                    c if c == libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K => {
                        pc += if acc == i.k { i.jt as usize } else { i.jf as usize };
                    }
                    c if c == libc::BPF_RET | libc::BPF_K => return i.k,
                    c => panic!("unexpected instruction {c:#x}"),
                }
                pc += 1;
            }
        };
        for nr in [2, 257, 85, 87, 263] {
            assert_eq!(run(super::AUDIT_ARCH_X86_64, nr), super::SECCOMP_RET_USER_NOTIF, "nr {nr}");
        }
        for nr in [0, 1, 3, 9, 11, 59, 437] {
            assert_eq!(run(super::AUDIT_ARCH_X86_64, nr), super::SECCOMP_RET_ALLOW, "nr {nr}");
        }
        assert_eq!(run(0x4000_0003, 2), super::SECCOMP_RET_ALLOW, "i386 open is not x86_64's");
    }
}
