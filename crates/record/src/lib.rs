//! The recorder (Linux, x86_64): runs a program with THP disabled for it alone and records
//! what it does to its address space into the trace format (crate `trace`, docs/trace-format.md).
//!
//! How: fork; the child sets `prctl(PR_SET_THP_DISABLE)` and `personality(ADDR_NO_RANDOMIZE)`
//! and waits on a pipe; the parent opens, on every online CPU, one perf event per tracepoint
//! (`exceptions:page_fault_user`, `exceptions:page_fault_kernel`, `syscalls:sys_enter_*` /
//! `sys_exit_*` of the calls in `trace::SyscallKind`) on the child with `inherit` (threads and
//! child processes are followed) and `enable_on_exec`, all of one CPU writing into one ring
//! buffer; the first event of each CPU also asks for task, comm and mmap records. Then the child
//! is released; traced from a thread of the recorder (`ptrace`), every process of the program
//! stops once inside each of its execves, where the recorder reads /proc/PID/maps (the address
//! space the kernel built) and lets it go on. While the program runs the
//! ring buffers are drained; at its end the records are merged in time order, system call
//! entries and exits are paired per thread, and the [`Recording`] is returned.
//!
//! [`command`] is `thplab record` and `thplab trace show|stats`: what was recorded and lost, said
//! on stderr; a recording printed or summarised.
//!
//! Module map:
//! - [`spawn`]: starting the program: PATH search, fork, the child's preparation.
//! - [`perf`]: perf_event_open on tracepoints and the ring buffers.
//! - [`tracefs`]: tracepoint ids and field layouts from tracefs.
//! - [`notify`]: the seccomp user-notification listener that answers MADV_COLLAPSE and reads paths.
//! - [`ptrace`]: the exec snapshots: each process's address space read inside every execve.
//! - [`accesses`]: `record --accesses`: data accesses at page granularity from QEMU user-mode
//!   with thplab's TCG plugin ([`accesses::qemu`]) or valgrind lackey.
//! - [`hwcounters`]: hardware TLB counters (dTLB/iTLB misses, page walks) through perf_event_open.
//! - [`timed`]: `record --timed N`: the program's wall time without the recorder.
//! - [`command`]: `thplab record` and `thplab trace show|stats` on parsed arguments.

pub mod accesses;
pub mod command;
mod notify;
pub mod hwcounters;
mod perf;
mod ptrace;
mod spawn;
mod timed;
mod tracefs;

use std::collections::HashMap;
use std::ffi::{CString, OsString};
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use trace::{flags, Event, EventBody, Header, MapInfo, Syscall, SyscallKind};

pub use spawn::resolve_program;
pub use timed::{time_untraced, time_untraced_ok, time_untraced_on};

/// How to record.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    /// Ring buffer per CPU, in KiB (rounded down to a power of two pages; at least 64 KiB).
    pub buffer_kib: usize,
    /// Record `exceptions:page_fault_kernel` on user addresses too (the kernel faulting in user
    /// memory in read(), execve's argument copy, ...: these count as the program's minflt).
    pub kernel_faults: bool,
    /// Stop every process of the program inside each execve and record its new address space
    /// ([`EventBody::ExecMaps`]); off: no ptrace at all.
    pub exec_snapshot: bool,
    /// Disable THP for the program (`PR_SET_THP_DISABLE`); on by default.
    pub thp_disable: bool,
    /// Resolve the paths of open/openat/creat/unlink/unlinkat (a seccomp user-notification
    /// filter stops each at its entry while the recorder looks; see `notify`); on by default.
    pub paths: bool,
    /// A cgroup's `cgroup.procs` the program joins before its execve (the recorder stays where
    /// it is): a memcg of its own under `--memory-max` (`live::pressure`).
    pub cgroup_procs: Option<std::path::PathBuf>,
}

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            buffer_kib: 32 * 1024,
            kernel_faults: true,
            exec_snapshot: true,
            thp_disable: true,
            paths: true,
            cgroup_procs: None,
        }
    }
}

/// A finished recording: the header (counts filled in) and the events in time order.
#[derive(Clone, Debug)]
pub struct Recording {
    pub header: Header,
    pub events: Vec<Event>,
    /// System call exits with no entry in the same thread (the child's side of fork/clone
    /// returning 0, the first return of execve in a thread that was not the leader, ...).
    pub unpaired_exits: u64,
    /// Tracepoints that do not exist on this kernel (what they report is not recorded).
    pub missing_tracepoints: Vec<String>,
    /// Why paths were not resolved (no seccomp user notification here), if they were asked for.
    pub paths_unavailable: Option<String>,
    /// Why the calls whose result PR_SET_THP_DISABLE changes were not answered as without it
    /// (no seccomp user notification here), if THP was disabled for the program: then
    /// madvise(MADV_COLLAPSE) fails with EINVAL while recorded.
    pub answers_unavailable: Option<String>,
    /// Path-taking calls whose thread went away before the recorder could look.
    pub paths_vanished: u64,
    /// Bytes drained from the ring buffers.
    pub perf_bytes: u64,
    /// The ring buffer of each CPU, in bytes.
    pub buffer_bytes_per_cpu: usize,
}

impl Recording {
    /// Write the recording in the trace format.
    pub fn write_to(&self, w: impl Write) -> std::io::Result<()> {
        let mut tw = trace::TraceWriter::new(w, &self.header)?;
        for e in &self.events {
            tw.write(e)?;
        }
        tw.finish()?.flush()
    }
}

/// Why recording failed.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Recording cannot work here (no perf_event_open, no tracepoints, no tracefs).
    #[error("recording is not available here: {0}")]
    Unavailable(String),
    /// The program was not found or could not be executed.
    #[error("{program}: {reason}")]
    Exec {
        program: String,
        reason: String,
        not_found: bool,
    },
    #[error("{0}")]
    Other(String),
}

enum Tp {
    Fault,
    Enter,
    Exit,
}

struct TpTable {
    by_id: HashMap<u16, Tp>,
    fault_addr: (usize, usize),
    fault_ec: (usize, usize),
    enter_id: (usize, usize),
    enter_args: usize,
    exit_id: (usize, usize),
    exit_ret: (usize, usize),
    /// System call number → kind.
    kinds: HashMap<u64, SyscallKind>,
    /// The tracepoint filter that keeps only these system calls (`id == 9 || id == 11 ...`).
    filter: CString,
    /// Tracepoints asked for that this kernel does not have.
    missing: Vec<String>,
}

enum RawKind {
    Fault { addr: u64, ec: u64 },
    Enter(SyscallKind, Box<[u64]>),
    Exit(SyscallKind, i64),
    Body(Box<EventBody>),
}

struct Raw {
    time: u64,
    pid: u32,
    tid: u32,
    what: RawKind,
}

fn field(raw: &[u8], (off, size): (usize, usize)) -> u64 {
    let Some(b) = raw.get(off..off + size) else {
        return 0;
    };
    match size {
        1 => b[0] as u64,
        2 => u16::from_ne_bytes([b[0], b[1]]) as u64,
        4 => u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as u64,
        8 => u64::from_ne_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
        _ => 0,
    }
}

/// The x86_64 number of each recorded system call.
#[cfg(target_arch = "x86_64")]
fn syscall_number(k: SyscallKind) -> Option<i64> {
    use SyscallKind as K;
    Some(match k {
        K::Mmap => libc::SYS_mmap,
        K::Munmap => libc::SYS_munmap,
        K::Mremap => libc::SYS_mremap,
        K::Mprotect => libc::SYS_mprotect,
        K::Madvise => libc::SYS_madvise,
        K::Brk => libc::SYS_brk,
        K::Prctl => libc::SYS_prctl,
        K::Clone => libc::SYS_clone,
        K::Clone3 => libc::SYS_clone3,
        K::Fork => libc::SYS_fork,
        K::Vfork => libc::SYS_vfork,
        K::Execve => libc::SYS_execve,
        K::Execveat => libc::SYS_execveat,
        K::ExitGroup => libc::SYS_exit_group,
        K::Exit => libc::SYS_exit,
        K::MemfdCreate => libc::SYS_memfd_create,
        K::Ftruncate => libc::SYS_ftruncate,
        K::Fallocate => libc::SYS_fallocate,
        K::Openat => libc::SYS_openat,
        K::Open => libc::SYS_open,
        K::Close => libc::SYS_close,
        K::Mlock => libc::SYS_mlock,
        K::Mlock2 => libc::SYS_mlock2,
        K::Munlock => libc::SYS_munlock,
        K::Mlockall => libc::SYS_mlockall,
        K::Munlockall => libc::SYS_munlockall,
        K::Shmat => libc::SYS_shmat,
        K::Shmdt => libc::SYS_shmdt,
        K::ProcessMadvise => libc::SYS_process_madvise,
        K::Write => libc::SYS_write,
        K::Pwrite64 => libc::SYS_pwrite64,
        K::Writev => libc::SYS_writev,
        K::Pwritev => libc::SYS_pwritev,
        K::Pwritev2 => libc::SYS_pwritev2,
        K::Lseek => libc::SYS_lseek,
        K::Read => libc::SYS_read,
        K::Readv => libc::SYS_readv,
        K::Dup => libc::SYS_dup,
        K::Dup2 => libc::SYS_dup2,
        K::Dup3 => libc::SYS_dup3,
        K::Fcntl => libc::SYS_fcntl,
        K::Unlink => libc::SYS_unlink,
        K::Unlinkat => libc::SYS_unlinkat,
        K::Creat => libc::SYS_creat,
        K::Pread64 => libc::SYS_pread64,
        K::Vmsplice => libc::SYS_vmsplice,
        K::IoUringRegister => libc::SYS_io_uring_register,
        K::ProcessVmWritev => libc::SYS_process_vm_writev,
    })
}

#[cfg(not(target_arch = "x86_64"))]
fn syscall_number(_: SyscallKind) -> Option<i64> {
    None
}

/// The tracepoints: the two page-fault ones, and `raw_syscalls:sys_enter`/`sys_exit` with a
/// filter on the system call number. (One tracepoint per system call would work too, but each
/// tracepoint perf uses costs one RCU grace period or more when it is released: about 2 s for
/// 60 tracepoints here, against about 0.2 s for these four.)
fn load_tracepoints(opts: &RecordOptions) -> Result<TpTable, RecordError> {
    if !cfg!(target_arch = "x86_64") {
        return Err(RecordError::Unavailable(
            "the recorder knows the system call numbers and fault tracepoints of x86_64 only"
                .into(),
        ));
    }
    let names: Vec<String> = [
        "exceptions/page_fault_user",
        "exceptions/page_fault_kernel",
        "raw_syscalls/sys_enter",
        "raw_syscalls/sys_exit",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let formats = tracefs::formats(&names)?;
    let Some(fault) = formats[0].clone() else {
        return Err(RecordError::Unavailable(
            "no tracepoint exceptions:page_fault_user on this kernel".into(),
        ));
    };
    let (Some(fault_addr), Some(fault_ec)) = (fault.field("address"), fault.field("error_code"))
    else {
        return Err(RecordError::Unavailable(
            "exceptions:page_fault_user has no address or error_code field".into(),
        ));
    };
    let (Some(enter), Some(exit)) = (&formats[2], &formats[3]) else {
        return Err(RecordError::Unavailable(
            "no tracepoints raw_syscalls:sys_enter/sys_exit on this kernel".into(),
        ));
    };
    let need = |f: &tracefs::TpFormat, tp: &str, name: &str| {
        f.field(name)
            .ok_or_else(|| RecordError::Unavailable(format!("{tp} has no field {name}")))
    };
    let enter_id = need(enter, "raw_syscalls:sys_enter", "id")?;
    let (enter_args, args_size) = need(enter, "raw_syscalls:sys_enter", "args")?;
    if args_size != 48 {
        return Err(RecordError::Unavailable(format!(
            "raw_syscalls:sys_enter args is {args_size} bytes, expected 48"
        )));
    }
    let exit_id = need(exit, "raw_syscalls:sys_exit", "id")?;
    let exit_ret = need(exit, "raw_syscalls:sys_exit", "ret")?;
    let mut by_id = HashMap::new();
    by_id.insert(fault.id, Tp::Fault);
    let mut missing = Vec::new();
    if opts.kernel_faults {
        match &formats[1] {
            Some(k)
                if k.field("address") == Some(fault_addr)
                    && k.field("error_code") == Some(fault_ec) =>
            {
                by_id.insert(k.id, Tp::Fault);
            }
            _ => missing.push("exceptions:page_fault_kernel".to_string()),
        }
    }
    by_id.insert(enter.id, Tp::Enter);
    by_id.insert(exit.id, Tp::Exit);
    let mut kinds = HashMap::new();
    let mut terms = Vec::new();
    for &k in SyscallKind::ALL {
        if let Some(nr) = syscall_number(k) {
            kinds.insert(nr as u64, k);
            terms.push(format!("id == {nr}"));
        }
    }
    let filter = CString::new(terms.join(" || "))
        .map_err(|_| RecordError::Other("filter with a NUL byte".into()))?;
    Ok(TpTable {
        by_id,
        fault_addr,
        fault_ec,
        enter_id,
        enter_args,
        exit_id,
        exit_ret,
        kinds,
        filter,
        missing,
    })
}

struct CpuBuffer {
    fds: Vec<OwnedFd>,
    ring: perf::RingBuffer,
}

fn open_events(pid: i32, tps: &TpTable, buffer_kib: usize) -> Result<Vec<CpuBuffer>, RecordError> {
    let mut ids: Vec<u16> = tps.by_id.keys().copied().collect();
    ids.sort_unstable();
    // The fault tracepoint first: it carries the task, comm and mmap records.
    let fault_id = tps
        .by_id
        .iter()
        .find(|(_, t)| matches!(t, Tp::Fault))
        .map(|(id, _)| *id);
    if let Some(f) = fault_id {
        ids.retain(|&i| i != f);
        ids.insert(0, f);
    }
    let page = perf::page_size();
    let want_pages = ((buffer_kib.max(64) * 1024) / page).max(16);
    let mut pages = 1usize << (usize::BITS - 1 - want_pages.leading_zeros());
    let mut out = Vec::new();
    for cpu in perf::online_cpus() {
        let mut fds: Vec<OwnedFd> = Vec::new();
        let mut ring = None;
        for (i, &id) in ids.iter().enumerate() {
            let mut a = perf::PerfEventAttr {
                type_: perf::PERF_TYPE_TRACEPOINT,
                size: std::mem::size_of::<perf::PerfEventAttr>() as u32,
                config: id as u64,
                sample_period: 1,
                sample_type: perf::SAMPLE_TID
                    | perf::SAMPLE_TIME
                    | perf::SAMPLE_CPU
                    | perf::SAMPLE_RAW,
                flags: perf::bit::DISABLED
                    | perf::bit::INHERIT
                    | perf::bit::ENABLE_ON_EXEC
                    | perf::bit::SAMPLE_ID_ALL
                    | perf::bit::USE_CLOCKID,
                clockid: libc::CLOCK_MONOTONIC,
                read_format: perf::FORMAT_LOST,
                ..Default::default()
            };
            if i == 0 {
                a.flags |= perf::bit::TASK
                    | perf::bit::COMM
                    | perf::bit::COMM_EXEC
                    | perf::bit::MMAP
                    | perf::bit::MMAP2
                    | perf::bit::MMAP_DATA
                    | perf::bit::WATERMARK;
                a.wakeup_watermark = (pages * page / 4) as u32;
            }
            let fd = perf::open(&a, pid, cpu).map_err(|e| {
                let hint = match e.raw_os_error() {
                    Some(libc::EACCES) | Some(libc::EPERM) => " (not permitted: run as root or lower /proc/sys/kernel/perf_event_paranoid)",
                    Some(libc::ENOSYS) => " (this kernel has no perf events)",
                    _ => "",
                };
                RecordError::Unavailable(format!("perf_event_open of tracepoint {id} on CPU {cpu}: {e}{hint}"))
            })?;
            if matches!(tps.by_id.get(&id), Some(Tp::Enter) | Some(Tp::Exit)) {
                perf::set_filter(&fd, &tps.filter).map_err(|e| {
                    RecordError::Unavailable(format!(
                        "setting the system call filter on CPU {cpu}: {e}"
                    ))
                })?;
            }
            if i == 0 {
                loop {
                    match perf::RingBuffer::map(&fd, pages) {
                        Ok(r) => {
                            ring = Some(r);
                            break;
                        }
                        Err(e)
                            if pages > 16
                                && matches!(
                                    e.raw_os_error(),
                                    Some(libc::EPERM) | Some(libc::ENOMEM)
                                ) =>
                        {
                            pages /= 2
                        }
                        Err(e) => {
                            return Err(RecordError::Unavailable(format!(
                                "mapping the perf ring buffer of CPU {cpu}: {e}"
                            )))
                        }
                    }
                }
            } else {
                perf::set_output(&fd, &fds[0]).map_err(|e| {
                    RecordError::Other(format!("PERF_EVENT_IOC_SET_OUTPUT on CPU {cpu}: {e}"))
                })?;
            }
            fds.push(fd);
        }
        if let Some(ring) = ring {
            out.push(CpuBuffer { fds, ring });
        }
    }
    Ok(out)
}

/// Decodes ring-buffer records into [`Raw`] events.
struct Decoder<'a> {
    tps: &'a TpTable,
    raws: Vec<Raw>,
    lost: u64,
    bytes: u64,
    start: u64,
}

/// sample_id (TID, TIME, CPU) at the end of a non-sample record.
fn sample_id(b: &[u8]) -> Option<(u32, u32, u64)> {
    let n = b.len().checked_sub(24)?;
    let mut s = perf::Body::new(&b[n..]);
    Some((s.u32()?, s.u32()?, s.u64()?))
}

impl Decoder<'_> {
    fn record(&mut self, ty: u32, misc: u16, body: &[u8]) {
        self.bytes += body.len() as u64 + 8;
        let b = perf::Body::new(body);
        match ty {
            perf::RECORD_SAMPLE => self.sample(b, body),
            perf::RECORD_FORK | perf::RECORD_EXIT => self.fork_or_exit(ty, b),
            perf::RECORD_COMM => self.comm(b, body, misc),
            perf::RECORD_MMAP2 => self.mmap2(b, body),
            perf::RECORD_LOST => self.lost(b, body),
            _ => {}
        }
    }

    fn push(&mut self, time: u64, pid: u32, tid: u32, what: RawKind) {
        self_push(&mut self.raws, time.saturating_sub(self.start), pid, tid, what)
    }

    /// PERF_RECORD_SAMPLE of a tracepoint: page_fault_user, sys_enter or sys_exit.
    fn sample(&mut self, mut b: perf::Body<'_>, body: &[u8]) {
        let (Some(pid), Some(tid), Some(time), Some(_cpu), Some(_res), Some(size)) =
            (b.u32(), b.u32(), b.u64(), b.u32(), b.u32(), b.u32())
        else {
            return;
        };
        let Some(raw) = body.get(b.at..b.at + size as usize) else {
            return;
        };
        let id = field(raw, (0, 2)) as u16;
        match self.tps.by_id.get(&id) {
            Some(Tp::Fault) => {
                let addr = field(raw, self.tps.fault_addr);
                if addr >> 63 == 0 {
                    let ec = field(raw, self.tps.fault_ec);
                    self.push(time, pid, tid, RawKind::Fault { addr, ec });
                }
            }
            Some(Tp::Enter) => {
                if let Some(&k) = self.tps.kinds.get(&field(raw, self.tps.enter_id)) {
                    let args: Box<[u64]> = (0..k.args().len())
                        .map(|i| field(raw, (self.tps.enter_args + 8 * i, 8)))
                        .collect();
                    self.push(time, pid, tid, RawKind::Enter(k, args));
                }
            }
            Some(Tp::Exit) => {
                if let Some(&k) = self.tps.kinds.get(&field(raw, self.tps.exit_id)) {
                    let ret = field(raw, self.tps.exit_ret) as i64;
                    self.push(time, pid, tid, RawKind::Exit(k, ret));
                }
            }
            None => {}
        }
    }

    /// PERF_RECORD_FORK (a new task, under its creator) or PERF_RECORD_EXIT.
    fn fork_or_exit(&mut self, ty: u32, mut b: perf::Body<'_>) {
        let (Some(pid), Some(ppid), Some(tid), Some(ptid), Some(time)) =
            (b.u32(), b.u32(), b.u32(), b.u32(), b.u64())
        else {
            return;
        };
        if ty == perf::RECORD_FORK {
            self.push(time, ppid, ptid, RawKind::Body(Box::new(EventBody::TaskNew { tid, pid })));
        } else {
            self.push(time, pid, tid, RawKind::Body(Box::new(EventBody::TaskExit)));
        }
    }

    /// PERF_RECORD_COMM (PERF_RECORD_MISC_COMM_EXEC when an execve set it).
    fn comm(&mut self, mut b: perf::Body<'_>, body: &[u8], misc: u16) {
        let (Some(pid), Some(tid)) = (b.u32(), b.u32()) else {
            return;
        };
        let Some(comm) = b.cstr_before(24) else {
            return;
        };
        let Some((_, _, time)) = sample_id(body) else {
            return;
        };
        let exec = misc & perf::MISC_COMM_EXEC != 0;
        self.push(time, pid, tid, RawKind::Body(Box::new(EventBody::Comm { comm: comm.to_vec(), exec })));
    }

    /// PERF_RECORD_MMAP2.
    fn mmap2(&mut self, mut b: perf::Body<'_>, body: &[u8]) {
        let v: Option<[u64; 7]> = (|| {
            Some([
                b.u32()? as u64 | (b.u32()? as u64) << 32,
                b.u64()?,
                b.u64()?,
                b.u64()?,
                b.u32()? as u64 | (b.u32()? as u64) << 32,
                b.u64()?,
                b.u64()?,
            ])
        })();
        let (Some(v), Some(prot), Some(fl)) = (v, b.u32(), b.u32()) else {
            return;
        };
        let Some(path) = b.cstr_before(24) else {
            return;
        };
        let Some((_, _, time)) = sample_id(body) else {
            return;
        };
        let (pid, tid) = (v[0] as u32, (v[0] >> 32) as u32);
        let m = MapInfo {
            addr: v[1],
            len: v[2],
            pgoff: v[3],
            maj: v[4] as u32,
            min: (v[4] >> 32) as u32,
            ino: v[5],
            ino_generation: v[6],
            prot,
            flags: fl,
            path: path.to_vec(),
        };
        self.push(time, pid, tid, RawKind::Body(Box::new(EventBody::Map(m))));
    }

    /// PERF_RECORD_LOST: the count is added to the total and recorded.
    fn lost(&mut self, mut b: perf::Body<'_>, body: &[u8]) {
        let (Some(_id), Some(lost)) = (b.u64(), b.u64()) else {
            return;
        };
        self.lost += lost;
        let (pid, tid, time) = sample_id(body).unwrap_or((0, 0, self.start));
        self.push(time, pid, tid, RawKind::Body(Box::new(EventBody::Lost { count: lost })));
    }
}

fn self_push(v: &mut Vec<Raw>, time: u64, pid: u32, tid: u32, what: RawKind) {
    v.push(Raw {
        time,
        pid,
        tid,
        what,
    });
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn uname() -> (String, String) {
    // SAFETY: utsname is plain data; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return (String::new(), String::new());
    }
    let s = |f: &[libc::c_char]| {
        let b: Vec<u8> = f
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&b).into_owned()
    };
    (s(&u.release), s(&u.machine))
}

/// Run `argv` (argv\[0\] is searched in PATH) under the recorder until it exits.
pub fn record(argv: &[OsString], opts: &RecordOptions) -> Result<Recording, RecordError> {
    use std::os::unix::ffi::OsStrExt;
    let Some(program) = argv.first() else {
        return Err(RecordError::Other("no program to record".into()));
    };
    // The state the program must start with, if the caller has not captured it earlier.
    exec_state::ExecState::capture();
    let exec_path = spawn::resolve_program(program)?;
    let tps = load_tracepoints(opts)?;
    let missing = tps.missing.clone();
    let mut child = spawn::Child::fork(&exec_path, argv, opts)?;
    let pid = child.pid();
    if let Some(procs) = &opts.cgroup_procs {
        // The child waits on its pipe: it joins before it runs anything of the program.
        if let Err(e) = std::fs::write(procs, pid.to_string()) {
            child.abort();
            return Err(RecordError::Other(format!("putting the program in {}: {e}", procs.display())));
        }
    }
    let (mut listener, unavailable) = match child.take_listener() {
        Some(Ok(fd)) => (Some(notify::Listener::new(fd)), None),
        Some(Err(why)) => (None, Some(why)),
        None => (None, None),
    };
    let paths_unavailable = unavailable.clone().filter(|_| opts.paths);
    let answers_unavailable = unavailable.filter(|_| opts.thp_disable);
    let mounts = tmpfs_mounts(pid);
    let thp_settings = thp_settings_dump();
    let bufs = match open_events(pid, &tps, opts.buffer_kib) {
        Ok(b) => b,
        Err(e) => {
            child.abort();
            return Err(e);
        }
    };
    let start_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let start = monotonic_ns();
    let mut dec = Decoder { tps: &tps, raws: Vec::new(), lost: 0, bytes: 0, start };
    child.release(opts.exec_snapshot)?;
    let mut bufs = bufs;
    let mut flags_ = header_flags(opts, missing.is_empty(), listener.is_some());
    self_push(&mut dec.raws, 0, pid as u32, pid as u32, RawKind::Body(Box::new(EventBody::Mounts(mounts))));
    let _sig = spawn::IgnoreInterrupts::new();
    let status = poll_until_exit(&mut bufs, &mut listener, &mut child, &mut dec)?;
    // The program has been reaped: everything it did is in the buffers.
    for b in bufs.iter_mut() {
        b.ring.drain(|t, m, body| dec.record(t, m, body));
    }
    push_tail_loss(&bufs, &mut dec, pid as u32);
    // One `exec_maps` record per successful execve of any process (`ptrace`), at the time it
    // was taken: after the execve's entry, before anything the new image does.
    if opts.exec_snapshot {
        flags_ |= flags::EXEC_SNAPSHOT_EVERY;
        flags_ |= push_exec_snapshots(&mut child, &mut dec, pid as u32);
    }
    let end = monotonic_ns();
    let mut paths_vanished = 0;
    if let Some(l) = listener.take() {
        paths_vanished = push_listener_records(l, &mut dec, opts.kernel_faults);
    }
    let buffer_bytes_per_cpu = bufs.first().map_or(0, |b| b.ring.data_size());
    drop(bufs);
    let lost = dec.lost;
    let perf_bytes = dec.bytes;
    let mut raws = dec.raws;
    raws.sort_by_key(|r| r.time);
    let (events, unpaired_exits) = pair(raws);
    let counts = kind_counts(&events);
    let (kernel_release, machine) = uname();
    let header = Header {
        program: program.as_bytes().to_vec(),
        exec_path: exec_path.as_bytes().to_vec(),
        argv: argv.iter().map(|a| a.as_bytes().to_vec()).collect(),
        cwd: std::env::current_dir()
            .map(|p| p.as_os_str().as_bytes().to_vec())
            .unwrap_or_default(),
        kernel_release,
        machine,
        start_unix_ns,
        start_monotonic_ns: start,
        root_pid: pid as u32,
        page_size: perf::page_size() as u64,
        flags: flags_,
        counts,
        lost_events: lost,
        exit_status: status,
        duration_ns: end.saturating_sub(start),
        thp_settings,
        untraced_wall_ns: 0,
    };
    Ok(Recording {
        header,
        events,
        unpaired_exits,
        missing_tracepoints: missing,
        paths_unavailable,
        answers_unavailable,
        paths_vanished,
        perf_bytes,
        buffer_bytes_per_cpu,
    })
}

/// The header's flags known before the program runs: what the recorder set up for it.
fn header_flags(opts: &RecordOptions, no_tracepoint_missing: bool, listening: bool) -> u64 {
    let mut flags_ = 0;
    if opts.thp_disable {
        flags_ |= flags::THP_DISABLED;
    }
    flags_ |= flags::NO_RANDOMIZE;
    if opts.kernel_faults && no_tracepoint_missing {
        flags_ |= flags::KERNEL_FAULTS;
    }
    if listening && opts.paths {
        flags_ |= flags::PATHS;
    }
    if listening && opts.thp_disable {
        flags_ |= flags::ANSWERS;
    }
    flags_
}

/// poll() the ring buffers and the seccomp listener, serve the listener and drain the rings,
/// until the program has been reaped; its exit status.
fn poll_until_exit(
    bufs: &mut [CpuBuffer],
    listener: &mut Option<notify::Listener>,
    child: &mut spawn::Child,
    dec: &mut Decoder<'_>,
) -> Result<u32, RecordError> {
    loop {
        let mut pfds: Vec<libc::pollfd> = bufs
            .iter()
            .map(|b| b.fds[0].as_raw_fd())
            .chain(listener.as_ref().map(|l| l.fd.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: pfds is a valid array of pollfd.
        unsafe {
            libc::poll(
                pfds.as_mut_ptr(),
                pfds.len() as libc::nfds_t,
                POLL_INTERVAL.as_millis() as i32,
            );
        }
        if let Some(l) = listener.as_mut() {
            l.serve();
        }
        for b in bufs.iter_mut() {
            b.ring.drain(|t, m, body| dec.record(t, m, body));
        }
        if let Some(st) = child.try_wait()? {
            return Ok(st);
        }
    }
}

/// The kernel reports a loss with the next record it writes to that buffer; losses after the
/// last one written (a buffer full to the program's end) are only in the events' counts.
fn push_tail_loss(bufs: &[CpuBuffer], dec: &mut Decoder<'_>, pid: u32) {
    let lost_in_all: u64 = bufs.iter().flat_map(|b| &b.fds).filter_map(|fd| perf::lost_samples(fd).ok()).sum();
    if lost_in_all > dec.lost {
        let tail = lost_in_all - dec.lost;
        dec.lost = lost_in_all;
        self_push(&mut dec.raws, monotonic_ns().saturating_sub(dec.start), pid, pid, RawKind::Body(Box::new(EventBody::Lost { count: tail })));
    }
}

/// The `exec_stack` and `exec_maps` records of every execve snapshot; EXEC_SNAPSHOT if the
/// root process's own is among them.
fn push_exec_snapshots(child: &mut spawn::Child, dec: &mut Decoder<'_>, pid: u32) -> u64 {
    let start = dec.start;
    let mut flags_ = 0;
    for (t, p, maps, start_stack) in child.take_snapshots() {
        if p == pid {
            flags_ |= flags::EXEC_SNAPSHOT;
        }
        // Before its exec_maps, at the same time (the sort below is stable): the replay
        // holds it for the snapshot.
        if let Some(start_stack) = start_stack {
            self_push(&mut dec.raws, t.saturating_sub(start), p, p, RawKind::Body(Box::new(EventBody::ExecStack { start_stack })));
        }
        self_push(&mut dec.raws, t.saturating_sub(start), p, p, RawKind::Body(Box::new(EventBody::ExecMaps(maps))));
    }
    flags_
}

/// Serve the listener a last time and record what it saw: resolved paths (and the kernel's
/// faults on them), userfaultfd ioctls, iovecs and answered calls; the number of paths that
/// vanished before they could be read.
fn push_listener_records(mut l: notify::Listener, dec: &mut Decoder<'_>, kernel_faults: bool) -> u64 {
    let start = dec.start;
    l.serve();
    let paths_vanished = l.vanished;
    for r in std::mem::take(&mut l.resolved) {
        let t = r.time.saturating_sub(start);
        self_push(&mut dec.raws, t, r.pid, r.tid, RawKind::Body(Box::new(EventBody::Path(r.info))));
        // The kernel's read of the path faults where the recorder's read mapped the page:
        // a read in kernel mode of a page not present (error code 0), recorded as the
        // kernel's other faults are.
        if kernel_faults {
            for addr in r.faulted {
                self_push(&mut dec.raws, t, r.pid, r.tid, RawKind::Body(Box::new(EventBody::Fault { addr, error_code: 0 })));
            }
        }
    }
    for u in std::mem::take(&mut l.uffd) {
        let t = u.time.saturating_sub(start);
        self_push(&mut dec.raws, t, u.pid, u.tid, RawKind::Body(Box::new(EventBody::Uffd(u.ioctl))));
    }
    for v in std::mem::take(&mut l.iovecs) {
        let t = v.time.saturating_sub(start);
        self_push(&mut dec.raws, t, v.pid, v.tid, RawKind::Body(Box::new(EventBody::Iovecs { call: v.kind.code(), iovs: v.iovs })));
    }
    // An answered call did not run: no sys_enter was recorded for it (seccomp skips the
    // call before the tracepoint), only its sys_exit, which `pair` drops. Its record is
    // written here, after the `answered` record that says so.
    for a in std::mem::take(&mut l.answered) {
        let t = a.time.saturating_sub(start);
        self_push(&mut dec.raws, t, a.pid, a.tid, RawKind::Body(Box::new(EventBody::Answered { call: a.kind.code(), ret: a.ret })));
        let sc = Syscall { kind: a.kind, args: a.args, ret: Some(a.ret), duration_ns: a.duration_ns };
        self_push(&mut dec.raws, t, a.pid, a.tid, RawKind::Body(Box::new(EventBody::Syscall(sc))));
    }
    notify::release(l);
    paths_vanished
}

/// The number of events of each kind, by kind code.
fn kind_counts(events: &[Event]) -> Vec<(u8, u64)> {
    let mut counts: Vec<(u8, u64)> = Vec::new();
    for e in events {
        let k = e.body.kind_code();
        match counts.iter_mut().find(|(c, _)| *c == k) {
            Some((_, n)) => *n += 1,
            None => counts.push((k, 1)),
        }
    }
    counts.sort_unstable();
    counts
}

/// A system call entry waiting for its exit: raw index, time, pid, kind, arguments.
type Pending = (usize, u64, u32, SyscallKind, Box<[u64]>);

/// Pair system call entries and exits per thread; everything else passes through. The result
/// is in time order (a system call at its entry time).
fn pair(raws: Vec<Raw>) -> (Vec<Event>, u64) {
    let mut out: Vec<(u64, usize, Event)> = Vec::with_capacity(raws.len());
    let mut pending: HashMap<u32, Pending> = HashMap::new();
    // Per thread: answered calls whose sys_exit (the only event the kernel gives for a call
    // that did not run) is still to come.
    let mut answered: HashMap<u32, u32> = HashMap::new();
    let mut unpaired = 0;
    let unfinished = |(idx, time, pid, kind, args): Pending, tid: u32| {
        (
            time,
            idx,
            Event {
                time_ns: time,
                tid,
                pid,
                body: EventBody::Syscall(Syscall {
                    kind,
                    args: args.into_vec(),
                    ret: None,
                    duration_ns: 0,
                }),
            },
        )
    };
    for (idx, r) in raws.into_iter().enumerate() {
        match r.what {
            RawKind::Fault { addr, ec } => out.push((
                r.time,
                idx,
                Event {
                    time_ns: r.time,
                    tid: r.tid,
                    pid: r.pid,
                    body: EventBody::Fault {
                        addr,
                        error_code: ec,
                    },
                },
            )),
            RawKind::Body(b) => {
                if matches!(*b, EventBody::Answered { .. }) {
                    *answered.entry(r.tid).or_default() += 1;
                }
                out.push((r.time, idx, Event { time_ns: r.time, tid: r.tid, pid: r.pid, body: *b }));
            }
            RawKind::Enter(kind, args) => {
                if let Some(p) = pending.insert(r.tid, (idx, r.time, r.pid, kind, args)) {
                    out.push(unfinished(p, r.tid));
                }
            }
            RawKind::Exit(kind, ret) => match pending.remove(&r.tid) {
                Some((eidx, etime, epid, ekind, args)) if ekind == kind => out.push((
                    etime,
                    eidx,
                    Event {
                        time_ns: etime,
                        tid: r.tid,
                        pid: epid,
                        body: EventBody::Syscall(Syscall {
                            kind,
                            args: args.into_vec(),
                            ret: Some(ret),
                            duration_ns: r.time - etime,
                        }),
                    },
                )),
                Some(p) => {
                    out.push(unfinished(p, r.tid));
                    unpaired += 1;
                }
                None => match answered.get_mut(&r.tid) {
                    Some(n) if *n > 0 && matches!(kind, SyscallKind::Madvise | SyscallKind::Prctl) => *n -= 1,
                    _ => unpaired += 1,
                },
            },
        }
    }
    for (tid, p) in pending {
        out.push(unfinished(p, tid));
    }
    out.sort_by_key(|(t, i, _)| (*t, *i));
    (out.into_iter().map(|(_, _, e)| e).collect(), unpaired)
}

/// The tmpfs mounts process `pid` sees (/proc/PID/mountinfo: `ID PARENT MAJ:MIN ROOT MOUNTPOINT
/// OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS`).
fn tmpfs_mounts(pid: i32) -> Vec<trace::MountEntry> {
    let text = std::fs::read(format!("/proc/{pid}/mountinfo")).unwrap_or_default();
    let mut out = Vec::new();
    for line in text.split(|&c| c == b'\n') {
        let f: Vec<&[u8]> = line.split(|&c| c == b' ').collect();
        let Some(dash) = f.iter().position(|x| *x == b"-") else { continue };
        let (Some(dev), Some(mp), Some(fstype), Some(opts)) = (f.get(2), f.get(4), f.get(dash + 1), f.get(dash + 3)) else { continue };
        if *fstype != b"tmpfs" {
            continue;
        }
        let dev = String::from_utf8_lossy(dev);
        let Some((maj, min)) = dev.split_once(':') else { continue };
        let (Ok(maj), Ok(min)) = (maj.parse(), min.parse()) else { continue };
        out.push(trace::MountEntry { maj, min, fstype: fstype.to_vec(), mount_point: linux_abi::mountinfo::unescape(mp), options: opts.to_vec() });
    }
    out
}

/// The THP knobs as `grep -r . /sys/kernel/mm/transparent_hugepage` prints them (paths relative
/// to that directory, `stats/` left out).
fn thp_settings_dump() -> Vec<u8> {
    fn walk(dir: &std::path::Path, rel: &str, out: &mut Vec<u8>) {
        let Ok(rd) = std::fs::read_dir(dir) else { return };
        let mut entries: Vec<_> = rd.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = e.path();
            let r = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
            if path.is_dir() {
                if name != "stats" {
                    walk(&path, &r, out);
                }
            } else if let Ok(v) = std::fs::read_to_string(&path) {
                out.extend_from_slice(format!("{r}:{}\n", v.trim_end()).as_bytes());
            }
        }
    }
    let mut out = Vec::new();
    walk(std::path::Path::new("/sys/kernel/mm/transparent_hugepage"), "", &mut out);
    out
}

/// Poll interval of the drain loop.
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);
