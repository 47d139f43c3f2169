//! The seccomp user-notification listener, installed in the child before its execve. It stops
//! two sets of calls at their entry:
//!
//! - **Paths** of open, openat, creat, unlink and unlinkat: the recorder reads the path from the
//!   thread's memory, makes it absolute (the thread's working directory or the dirfd's path),
//!   looks the file (or the directory it would be created in) up with stat and statfs through
//!   /proc/TID/root, and lets the call continue unchanged (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`).
//! - **userfaultfd's ioctls** (request type 0xAA: UFFDIO_API, REGISTER, COPY, ZEROPAGE, ...):
//!   the recorder reads the request's struct (its range, mode and source) from the thread's
//!   memory and lets the call continue. UFFDIO_COPY and UFFDIO_ZEROPAGE fill pages without a
//!   fault of the program (mm/userfaultfd.c: `mfill_atomic`), and a registered range takes no
//!   THP at fault: the replay needs both, and no tracepoint gives a user struct.
//! - **Calls whose result PR_SET_THP_DISABLE changes** (the recorder runs the program with it):
//!   madvise(MADV_COLLAPSE) is answered without being performed, with what it would return
//!   without the flag as far as the address space tells ([`collapse_result`]); prctl
//!   (PR_GET_THP_DISABLE) is answered 0 unless the program set PR_SET_THP_DISABLE itself
//!   (prctl(PR_SET_THP_DISABLE) is stopped to know that, and continues). Each answer becomes an
//!   `answered` record and the call's record; the replay performs the collapse.
//!
//! The kernel side: `kernel/seccomp.c` (`seccomp_do_user_notification`, `seccomp_notify_recv`,
//! `seccomp_notify_send`, `seccomp_notify_poll`); an answered call skips the system call, so
//! `raw_syscalls:sys_enter` does not fire for it (only `sys_exit`), and the recorder writes its
//! record itself.
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

/// The calls whose iovecs are read (the recorder does not otherwise see what GUP reaches):
/// the number and the argument indexes of the iovec array and its count: vmsplice(fd, iov,
/// nr_segs), io_uring_register(fd, opcode, iov, nr_args), process_vm_writev(pid, lvec, liovcnt,
/// rvec, riovcnt) (the remote ones).
const IOVEC_CALLS: [(i64, SyscallKind, usize, usize); 3] = [
    (libc::SYS_vmsplice, SyscallKind::Vmsplice, 1, 2),
    (libc::SYS_io_uring_register, SyscallKind::IoUringRegister, 2, 3),
    (libc::SYS_process_vm_writev, SyscallKind::ProcessVmWritev, 3, 4),
];
const IORING_REGISTER_BUFFERS: u32 = linux_abi::io_uring::IORING_REGISTER_BUFFERS as u32;
/// The opcode without IORING_REGISTER_USE_REGISTERED_RING (bit 31).
const IORING_OPCODE_MASK: u32 = !(linux_abi::io_uring::IORING_REGISTER_USE_REGISTERED_RING as u32);

/// The bits of an ioctl request that hold its type (`_IOC_TYPEMASK << _IOC_TYPESHIFT`), and
/// userfaultfd's type there.
const IOC_TYPE_MASK: u32 = 0xff00;
const UFFDIO_TYPE: u32 = (linux_abi::userfaultfd::UFFDIO as u32) << 8;

/// The call numbers the filter compares, as the 32-bit words seccomp data holds.
const MADV_COLLAPSE: u32 = linux_abi::mman::MADV_COLLAPSE as u32;
const PR_SET_THP_DISABLE: u32 = linux_abi::prctl::PR_SET_THP_DISABLE as u32;
const PR_GET_THP_DISABLE: u32 = linux_abi::prctl::PR_GET_THP_DISABLE as u32;
/// Offsets in `struct seccomp_data`: nr, arch, then args\[i\] at 16 + 8 i (the low 32 bits first).
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;
const fn data_arg_low(i: u32) -> u32 {
    16 + 8 * i
}

/// Where a BPF jump goes.
#[derive(Clone, Copy)]
enum To {
    Next,
    /// Over this many instructions.
    Skip(u8),
    Allow,
    Notify,
}

/// The BPF program: on x86_64, with `paths` the calls of [`CALLS`] and of [`IOVEC_CALLS`]
/// (io_uring_register with IORING_REGISTER_BUFFERS only) and userfaultfd's ioctls, with `answers`
/// madvise(MADV_COLLAPSE) and prctl(PR_SET_THP_DISABLE or PR_GET_THP_DISABLE) → notify;
/// everything else → allow. `int` arguments (advice, option) are compared on their low 32
/// bits, as the kernel reads them.
pub fn filter(paths: bool, answers: bool) -> Vec<libc::sock_filter> {
    // (code, k, jump if true, jump if false), resolved below.
    let ld = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    let jeq = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    let mut p: Vec<(u16, u32, To, To)> = vec![(ld, DATA_ARCH, To::Next, To::Next), (jeq, AUDIT_ARCH_X86_64, To::Next, To::Allow), (ld, DATA_NR, To::Next, To::Next)];
    if paths {
        for (nr, ..) in CALLS {
            p.push((jeq, nr as u32, To::Notify, To::Next));
        }
        // The calls whose iovecs the replay needs (GUP on the program's pages): vmsplice and
        // process_vm_writev always, io_uring_register for IORING_REGISTER_BUFFERS (opcode 0,
        // without the IORING_REGISTER_USE_REGISTERED_RING bit) only.
        for (nr, ..) in IOVEC_CALLS.iter().filter(|c| c.1 != SyscallKind::IoUringRegister) {
            p.push((jeq, *nr as u32, To::Notify, To::Next));
        }
        // ioctl with a userfaultfd request (type 0xAA; the kernel reads `cmd` as 32 bits).
        p.push((jeq, libc::SYS_ioctl as u32, To::Next, To::Skip(3)));
        p.push((ld, data_arg_low(1), To::Next, To::Next));
        p.push(((libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16, IOC_TYPE_MASK, To::Next, To::Next));
        p.push((jeq, UFFDIO_TYPE, To::Notify, To::Allow));
        p.push((jeq, libc::SYS_io_uring_register as u32, To::Next, To::Skip(3)));
        p.push((ld, data_arg_low(1), To::Next, To::Next));
        p.push(((libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16, IORING_OPCODE_MASK, To::Next, To::Next));
        p.push((jeq, IORING_REGISTER_BUFFERS, To::Notify, To::Allow));
    }
    if answers {
        // The accumulator holds nr until a load: not madvise → over the two instructions that
        // load and compare the advice, to the prctl compare.
        p.push((jeq, libc::SYS_madvise as u32, To::Next, To::Skip(2)));
        p.push((ld, data_arg_low(2), To::Next, To::Next));
        p.push((jeq, MADV_COLLAPSE, To::Notify, To::Allow));
        p.push((jeq, libc::SYS_prctl as u32, To::Next, To::Allow));
        p.push((ld, data_arg_low(0), To::Next, To::Next));
        p.push((jeq, PR_SET_THP_DISABLE, To::Notify, To::Next));
        p.push((jeq, PR_GET_THP_DISABLE, To::Notify, To::Allow));
    }
    let allow = p.len();
    let notify = allow + 1;
    let mut v: Vec<libc::sock_filter> = Vec::with_capacity(p.len() + 2);
    for (i, &(code, k, jt, jf)) in p.iter().enumerate() {
        let off = |t: To| -> u8 {
            match t {
                To::Next => 0,
                To::Skip(n) => n,
                To::Allow => (allow - i - 1) as u8,
                To::Notify => (notify - i - 1) as u8,
            }
        };
        v.push(libc::sock_filter { code, jt: off(jt), jf: off(jf), k });
    }
    let ret = (libc::BPF_RET | libc::BPF_K) as u16;
    v.push(libc::sock_filter { code: ret, jt: 0, jf: 0, k: SECCOMP_RET_ALLOW });
    v.push(libc::sock_filter { code: ret, jt: 0, jf: 0, k: SECCOMP_RET_USER_NOTIF });
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
    /// Addresses of the path in pages that were not mapped before the recorder read it: the
    /// read (through /proc/PID/mem, `access_remote_vm` → GUP) faulted them into the program's
    /// page tables, so the fault the kernel's own read (`getname` → `strncpy_from_user`) takes
    /// there without the recorder did not happen, and is recorded as that kernel read fault.
    pub faulted: Vec<u64>,
}

/// The iovecs of a call stopped at its entry: when, which thread, the call, (base, length)
/// each (process_vm_writev: the remote ones).
pub struct Iovecs {
    pub time: u64,
    pub pid: u32,
    pub tid: u32,
    pub kind: SyscallKind,
    pub iovs: Vec<(u64, u64)>,
}

/// A userfaultfd ioctl stopped at its entry: when, which thread, what it asked.
pub struct Uffd {
    pub time: u64,
    pub pid: u32,
    pub tid: u32,
    pub ioctl: trace::UffdIoctl,
}

/// A call the recorder answered without running it: when it was stopped and answered, which
/// thread, the call and its arguments (as the tracepoint would give them), and the result given.
pub struct Answered {
    pub time: u64,
    pub duration_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub kind: SyscallKind,
    pub args: Vec<u64>,
    pub ret: i64,
}

/// The recorder's side of the listener.
pub struct Listener {
    pub fd: OwnedFd,
    pub resolved: Vec<Resolved>,
    pub answered: Vec<Answered>,
    pub iovecs: Vec<Iovecs>,
    pub uffd: Vec<Uffd>,
    /// Notifications whose thread went away before it could be looked at.
    pub vanished: u64,
    /// The program has called prctl(PR_SET_THP_DISABLE) itself, last with a non-zero flag:
    /// then PR_GET_THP_DISABLE runs (its result is the program's own doing).
    own_thp_disable: bool,
}

/// What to do with a stopped call.
enum Reply {
    Continue,
    /// Return this (negative: -errno) without running the call.
    Return(i64),
}

impl Listener {
    pub fn new(fd: OwnedFd) -> Listener {
        Listener { fd, resolved: Vec::new(), answered: Vec::new(), iovecs: Vec::new(), uffd: Vec::new(), vanished: 0, own_thp_disable: false }
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
            let nr = n.data.nr as i64;
            let reply = if nr == libc::SYS_madvise {
                Reply::Return(collapse_result(n.data.args[0], n.data.args[1], Some(n.pid)))
            } else if nr == libc::SYS_prctl {
                self.prctl_reply(&n.data.args)
            } else if nr == libc::SYS_ioctl {
                // Another request of type 0xAA (USERFAULTFD_IOC_NEW on /dev/userfaultfd) is no
                // operation on an address space: it continues unrecorded.
                if let Some(op) = linux_abi::userfaultfd::op_of(n.data.args[1]) {
                    let size = linux_abi::userfaultfd::size_of(n.data.args[1]);
                    match (read_uffd(n.pid, op, n.data.args[0] as u32, n.data.args[2], size), tgid_of(n.pid)) {
                        (Some(ioctl), Some(pid)) => self.uffd.push(Uffd { time, pid, tid: n.pid, ioctl }),
                        _ => self.vanished += 1,
                    }
                }
                Reply::Continue
            } else if let Some(&(_, kind, at, count)) = IOVEC_CALLS.iter().find(|c| c.0 == nr) {
                match (read_iovecs(n.pid, n.data.args[at], n.data.args[count]), tgid_of(n.pid)) {
                    (Some(iovs), Some(pid)) => self.iovecs.push(Iovecs { time, pid, tid: n.pid, kind, iovs }),
                    _ => self.vanished += 1,
                }
                Reply::Continue
            } else {
                let info = self.look(&n);
                // SAFETY: the ioctl reads one u64.
                let valid = unsafe { libc::ioctl(self.fd.as_raw_fd(), SECCOMP_IOCTL_NOTIF_ID_VALID as _, &n.id) } == 0;
                match info {
                    Some((pid, info, faulted)) if valid => self.resolved.push(Resolved { time, pid, tid: n.pid, info, faulted }),
                    _ => self.vanished += 1,
                }
                Reply::Continue
            };
            let Reply::Return(ret) = reply else {
                send(self.fd.as_raw_fd(), n.id, None);
                continue;
            };
            // The answer was computed from /proc while the thread waited: it must still be
            // the same call (the thread may have been killed and its id reused).
            // SAFETY: the ioctl reads one u64.
            let valid = unsafe { libc::ioctl(self.fd.as_raw_fd(), SECCOMP_IOCTL_NOTIF_ID_VALID as _, &n.id) } == 0;
            let pid = tgid_of(n.pid);
            if !valid || !send(self.fd.as_raw_fd(), n.id, Some(ret)) {
                self.vanished += 1;
                continue;
            }
            let kind = if nr == libc::SYS_madvise { SyscallKind::Madvise } else { SyscallKind::Prctl };
            let args = n.data.args[..kind.args().len()].to_vec();
            let duration_ns = crate::monotonic_ns().saturating_sub(time);
            self.answered.push(Answered { time, duration_ns, pid: pid.unwrap_or(n.pid), tid: n.pid, kind, args, ret });
        }
    }

    /// prctl(PR_SET_THP_DISABLE) continues (and is noted); prctl(PR_GET_THP_DISABLE) returns 0,
    /// what it returns without the recorder's flag, unless the program set the flag itself or
    /// passed arguments the kernel refuses (then it runs and gives the kernel's answer).
    fn prctl_reply(&mut self, args: &[u64; 6]) -> Reply {
        match args[0] as u32 {
            PR_SET_THP_DISABLE => {
                self.own_thp_disable = args[1] != 0;
                Reply::Continue
            }
            PR_GET_THP_DISABLE if !self.own_thp_disable && args[1..5].iter().all(|&a| a == 0) => Reply::Return(0),
            _ => Reply::Continue,
        }
    }

    /// Read and resolve the path of a stopped call; (tgid, info, the addresses the read
    /// faulted in: [`Resolved::faulted`]).
    fn look(&self, n: &libc::seccomp_notif) -> Option<(u32, PathInfo, Vec<u64>)> {
        let &(_, kind, path_arg, dirfd_arg) = CALLS.iter().find(|c| c.0 == n.data.nr as i64)?;
        let tid = n.pid;
        let (raw, faulted) = read_cstring(tid, n.data.args[path_arg])?;
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
        Some((tgid, info, faulted))
    }
}

/// `count` iovecs (`struct iovec`: base and length, 8 bytes each) at `addr` in thread `tid`,
/// at most 16384 (io_uring's IORING_MAX_REG_BUFFERS; UIO_MAXIOV is 1024).
fn read_iovecs(tid: u32, addr: u64, count: u64) -> Option<Vec<(u64, u64)>> {
    use std::os::unix::fs::FileExt;
    if count > 1 << 14 {
        return None;
    }
    let f = std::fs::File::open(format!("/proc/{tid}/mem")).ok()?;
    let mut b = vec![0u8; count as usize * 16];
    f.read_exact_at(&mut b, addr).ok()?;
    let word = |c: &[u8]| u64::from_ne_bytes(c.try_into().expect("8 bytes"));
    Some(b.chunks_exact(16).map(|c| (word(&c[..8]), word(&c[8..]))).collect())
}

/// The struct of userfaultfd request `op` (`size` bytes) at `addr` in thread `tid`, as a
/// [`trace::UffdIoctl`] (include/uapi/linux/userfaultfd.h: uffdio_api {api, features, ioctls};
/// uffdio_range {start, len} first in register, zeropage, writeprotect, continue and poison,
/// then their mode; uffdio_copy and uffdio_move {dst, src, len, mode}). None where the memory
/// cannot be read (the thread went away, or the pointer is bad: the call then fails with
/// EFAULT and changes nothing).
fn read_uffd(tid: u32, op: u8, fd: u32, addr: u64, size: usize) -> Option<trace::UffdIoctl> {
    use linux_abi::userfaultfd as u;
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(format!("/proc/{tid}/mem")).ok()?;
    let mut b = vec![0u8; size.max(16)];
    f.read_exact_at(&mut b[..size], addr).ok()?;
    let w = |i: usize| b.get(8 * i..8 * i + 8).map_or(0, |c| u64::from_ne_bytes(c.try_into().expect("8 bytes")));
    let mut r = trace::UffdIoctl { op, fd, ..Default::default() };
    match op {
        u::API => r.mode = w(1),
        u::COPY | u::MOVE => (r.start, r.src, r.len, r.mode) = (w(0), w(1), w(2), w(3)),
        u::UNREGISTER | u::WAKE => (r.start, r.len) = (w(0), w(1)),
        _ => (r.start, r.len, r.mode) = (w(0), w(1), w(2)),
    }
    Some(r)
}

/// A NUL-terminated string at `addr` in thread `tid` (at most 4096 bytes), and the addresses of
/// it in pages that were not mapped (neither present nor swapped, by /proc/PID/pagemap) before
/// this read mapped them.
fn read_cstring(tid: u32, addr: u64) -> Option<(Vec<u8>, Vec<u64>)> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(format!("/proc/{tid}/mem")).ok()?;
    let pagemap = std::fs::File::open(format!("/proc/{tid}/pagemap")).ok();
    let unmapped = |a: u64| {
        let mut e = [0u8; 8];
        let Some(pm) = &pagemap else { return false };
        // Bit 63 present, bit 62 swapped (Documentation/admin-guide/mm/pagemap.rst).
        pm.read_exact_at(&mut e, a / 4096 * 8).is_ok() && u64::from_le_bytes(e) >> 62 == 0
    };
    let mut out = Vec::new();
    let mut faulted = Vec::new();
    let mut at = addr;
    while out.len() < 4096 {
        // Up to the end of the page, so that a string near an unmapped page still reads.
        let chunk = (4096 - (at % 4096)) as usize;
        let mut buf = vec![0u8; chunk];
        let was_unmapped = unmapped(at);
        let n = f.read_at(&mut buf, at).ok()?;
        if n == 0 {
            return None;
        }
        if was_unmapped {
            faulted.push(at);
        }
        if let Some(z) = buf[..n].iter().position(|&c| c == 0) {
            out.extend_from_slice(&buf[..z]);
            return Some((out, faulted));
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

/// Send the reply to notification `id`: `None` lets the call continue, `Some(v)` makes it
/// return `v` (negative: -errno) without running. False when the thread is gone.
fn send(fd: i32, id: u64, ret: Option<i64>) -> bool {
    let resp = match ret {
        None => libc::seccomp_notif_resp { id, val: 0, error: 0, flags: SECCOMP_USER_NOTIF_FLAG_CONTINUE },
        Some(v) if v < 0 => libc::seccomp_notif_resp { id, val: 0, error: v as i32, flags: 0 },
        Some(v) => libc::seccomp_notif_resp { id, val: v, error: 0, flags: 0 },
    };
    // SAFETY: the ioctl reads one seccomp_notif_resp; an error means the thread is gone.
    unsafe { libc::ioctl(fd, SECCOMP_IOCTL_NOTIF_SEND as _, &resp) == 0 }
}

/// What madvise(`start`, `len_in`, MADV_COLLAPSE) returns on this kernel without
/// PR_SET_THP_DISABLE, as far as the address space of thread `tid` tells without collapsing
/// (`None`: the arguments alone). From `madvise()` in mm/madvise.c and `madvise_collapse()` in
/// mm/khugepaged.c:
///
/// - `start` not page-aligned, or the range wraps: -EINVAL; an empty range: 0;
/// - a VMA in the range where THP is disabled or impossible (VM_NOHUGEPAGE `nh`, hugetlb `ht`,
///   VM_IO `io`, VM_PFNMAP `pf`, VM_MIXEDMAP `mm`, VM_DONTEXPAND `de` in smaps' VmFlags): -EINVAL;
/// - no VMA at or after `start`, or a hole in the range: -ENOMEM;
/// - else 0.
///
/// Not predicted: a collapse that fails for want of memory or because pages are busy (-ENOMEM,
/// -EAGAIN), file VMAs the kernel cannot collapse (-EINVAL); the answer is then 0 where the
/// kernel would have failed.
pub fn collapse_result(start: u64, len_in: u64, tid: Option<u32>) -> i64 {
    const PAGE: u64 = 4096;
    let einval = -(libc::EINVAL as i64);
    let enomem = -(libc::ENOMEM as i64);
    if start % PAGE != 0 {
        return einval;
    }
    let Some(len) = len_in.checked_add(PAGE - 1).map(|l| l & !(PAGE - 1)) else { return einval };
    let Some(end) = start.checked_add(len) else { return einval };
    if len_in != 0 && len == 0 {
        return einval;
    }
    if end == start {
        return 0;
    }
    let Some(tid) = tid else { return 0 };
    let Ok(smaps) = std::fs::read(format!("/proc/{tid}/smaps")) else { return 0 };
    let vmas = smaps_vmas(&smaps);
    let mut at = start;
    let mut hole = false;
    let mut any = false;
    for (vs, ve, flags) in vmas.iter().filter(|v| v.1 > start && v.0 < end) {
        any = true;
        hole |= *vs > at;
        at = (*ve).max(at);
        if flags.split(|&c| c == b' ').any(|f| [&b"nh"[..], b"ht", b"io", b"pf", b"mm", b"de"].contains(&f)) {
            return einval;
        }
    }
    if !any || hole || at < end {
        return enomem;
    }
    0
}

/// (start, end, VmFlags) of each VMA in /proc/PID/smaps.
fn smaps_vmas(b: &[u8]) -> Vec<(u64, u64, Vec<u8>)> {
    let mut v: Vec<(u64, u64, Vec<u8>)> = Vec::new();
    for line in b.split(|&c| c == b'\n') {
        if let Some(f) = line.strip_prefix(b"VmFlags:") {
            if let Some(last) = v.last_mut() {
                last.2 = f.trim_ascii().to_vec();
            }
            continue;
        }
        let Some(range) = line.split(|&c| c == b' ').next() else { continue };
        let Ok(range) = std::str::from_utf8(range) else { continue };
        let Some((a, e)) = range.split_once('-') else { continue };
        if let (Ok(a), Ok(e)) = (u64::from_str_radix(a, 16), u64::from_str_radix(e, 16)) {
            v.push((a, e, Vec::new()));
        }
    }
    v
}

/// After the program's end: if some task still holds the filter (a descendant that outlived
/// it), hand the listener to a detached process that lets every path call continue and answers
/// the THP calls as [`Listener::serve`] does (MADV_COLLAPSE from its arguments alone) until the
/// last such task is gone; otherwise just close it.
pub fn release(l: Listener) {
    let own_thp_disable = l.own_thp_disable;
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
                // As `serve` answers, without reading /proc (no allocation after the fork).
                let a = &n.data.args;
                let ret = if n.data.nr as i64 == libc::SYS_madvise {
                    Some(collapse_result(a[0], a[1], None))
                } else if n.data.nr as i64 == libc::SYS_prctl && a[0] as u32 == PR_GET_THP_DISABLE && !own_thp_disable && a[1..5].iter().all(|&x| x == 0) {
                    Some(0)
                } else {
                    None
                };
                send(fd.as_raw_fd(), n.id, ret);
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
    /// Run the BPF program by hand over a seccomp_data-like input (nr, arch, args).
    fn run(prog: &[libc::sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        let word = |off: u32| -> u32 {
            match off {
                0 => nr,
                4 => arch,
                o if o >= 16 && (o - 16) % 4 == 0 => {
                    let a = args[((o - 16) / 8) as usize];
                    if (o - 16) % 8 == 0 { a as u32 } else { (a >> 32) as u32 }
                }
                o => panic!("load of offset {o}"),
            }
        };
        let mut pc = 0;
        let mut acc = 0u32;
        loop {
            let i = &prog[pc];
            match i.code as u32 {
                c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => acc = word(i.k),
                c if c == libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K => {
                    pc += if acc == i.k { i.jt as usize } else { i.jf as usize };
                }
                c if c == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K => acc &= i.k,
                c if c == libc::BPF_RET | libc::BPF_K => return i.k,
                c => panic!("unexpected instruction {c:#x}"),
            }
            pc += 1;
        }
    }

    #[test]
    fn the_filter_notifies_exactly_the_path_calls_and_the_thp_calls() {
        use super::{AUDIT_ARCH_X86_64 as X86, SECCOMP_RET_ALLOW as ALLOW, SECCOMP_RET_USER_NOTIF as NOTIFY};
        let a = |x: &[u64]| {
            let mut v = [0u64; 6];
            v[..x.len()].copy_from_slice(x);
            v
        };
        for (paths, answers) in [(true, true), (true, false), (false, true), (false, false)] {
            let prog = super::filter(paths, answers);
            let want = |b: bool| if b { NOTIFY } else { ALLOW };
            for nr in [2, 257, 85, 87, 263] {
                assert_eq!(run(&prog, X86, nr, a(&[])), want(paths), "nr {nr} {paths} {answers}");
            }
            for nr in [0, 1, 3, 9, 11, 59, 437] {
                assert_eq!(run(&prog, X86, nr, a(&[25, 25, 25])), ALLOW, "nr {nr}");
            }
            // madvise (28): MADV_COLLAPSE only, on the low 32 bits of the advice.
            assert_eq!(run(&prog, X86, 28, a(&[0x7000_0000, 4 << 20, 25])), want(answers));
            assert_eq!(run(&prog, X86, 28, a(&[0x7000_0000, 4 << 20, (1 << 32) | 25])), want(answers));
            assert_eq!(run(&prog, X86, 28, a(&[25, 25, 14])), ALLOW);
            // prctl (157): PR_SET_THP_DISABLE and PR_GET_THP_DISABLE only.
            assert_eq!(run(&prog, X86, 157, a(&[41, 1])), want(answers));
            assert_eq!(run(&prog, X86, 157, a(&[42])), want(answers));
            assert_eq!(run(&prog, X86, 157, a(&[15, 42, 41])), ALLOW);
            // vmsplice (278) and process_vm_writev (311) with the paths; io_uring_register (427)
            // for IORING_REGISTER_BUFFERS (0) only, with or without bit 31
            // (IORING_REGISTER_USE_REGISTERED_RING).
            for nr in [278, 311] {
                assert_eq!(run(&prog, X86, nr, a(&[3, 0x7000_0000, 1])), want(paths), "nr {nr}");
            }
            assert_eq!(run(&prog, X86, 427, a(&[3, 0, 0x7000_0000, 1])), want(paths));
            assert_eq!(run(&prog, X86, 427, a(&[3, 1 << 31, 0x7000_0000, 1])), want(paths));
            assert_eq!(run(&prog, X86, 427, a(&[3, 2, 0x7000_0000, 1])), ALLOW, "IORING_REGISTER_FILES");
            // ioctl (16) with a userfaultfd request (type 0xAA) with the paths, whatever the
            // upper 32 bits; other ioctls (TCGETS 0x5401, FIONREAD 0x541b) run unseen.
            for cmd in [0xc028_aa03, 0xc020_aa00, 0xffff_ffff_c028_aa03, 0xaa00] {
                assert_eq!(run(&prog, X86, 16, a(&[3, cmd, 0x7000_0000])), want(paths), "ioctl {cmd:#x}");
            }
            for cmd in [0x5401, 0x541b, 0xc028_ab03] {
                assert_eq!(run(&prog, X86, 16, a(&[3, cmd, 0x7000_0000])), ALLOW, "ioctl {cmd:#x}");
            }
            // After the ioctl compare, io_uring_register, madvise and prctl still reach theirs.
            assert_eq!(run(&prog, X86, 427, a(&[3, 0, 0x7000_0000, 1])), want(paths));
            // After an io_uring_register compare, madvise and prctl still reach their tests.
            assert_eq!(run(&prog, X86, 28, a(&[0x7000_0000, 4 << 20, 25])), want(answers));
            assert_eq!(run(&prog, 0x4000_0003, 2, a(&[])), ALLOW, "i386 open is not x86_64's");
            assert_eq!(run(&prog, 0x4000_0003, 28, a(&[0, 0, 25])), ALLOW);
        }
    }

    #[test]
    fn collapse_results_from_the_arguments() {
        use super::collapse_result as r;
        assert_eq!(r(0x7000_0001, 4096, None), -(libc::EINVAL as i64));
        assert_eq!(r(0x7000_0000, 0, None), 0);
        assert_eq!(r(u64::MAX & !4095, 8192, None), -(libc::EINVAL as i64));
        assert_eq!(r(0x7000_0000, u64::MAX, None), -(libc::EINVAL as i64));
        assert_eq!(r(0x7000_0000, 4 << 20, None), 0);
    }

    #[test]
    fn collapse_results_from_this_process_s_address_space() {
        use super::collapse_result as r;
        let me = Some(std::process::id());
        // SAFETY: anonymous mappings of our own; unmapped below.
        unsafe {
            let len = 8 << 20;
            let p = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
            assert_ne!(p, libc::MAP_FAILED);
            let a = p as u64;
            assert_eq!(r(a, len as u64, me), 0);
            // A hole in the middle: ENOMEM.
            libc::munmap((a + (2 << 20)) as *mut libc::c_void, 1 << 20);
            assert_eq!(r(a, len as u64, me), -(libc::ENOMEM as i64));
            assert_eq!(r(a + (4 << 20), 4 << 20, me), 0);
            // MADV_NOHUGEPAGE: EINVAL.
            libc::madvise((a + (4 << 20)) as *mut libc::c_void, 2 << 20, libc::MADV_NOHUGEPAGE);
            assert_eq!(r(a + (4 << 20), 4 << 20, me), -(libc::EINVAL as i64));
            libc::munmap(p, len);
            assert_eq!(r(a, len as u64, me), -(libc::ENOMEM as i64));
        }
    }
}
