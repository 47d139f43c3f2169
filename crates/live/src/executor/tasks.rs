//! The tasks of a workload inside the child and their op loop: main, the children of `fork`
//! (processes with a copy of main's mm), the workload's threads and the children of `vfork` (in
//! main's mm), each running its own operations in the workload's global order by passing turns
//! (crate::executor::protocol). The loop matches on the workload's own operation type
//! ([`workload::OpKind`]): this is the live runner of every statement.

use mm_types::PAGE_SIZE;
use workload::{OpKind, ThpDisable};

use super::child::{Exec, Resolved};
use super::protocol::{send_op_index, MainWatch};
use super::spec::FileSpecKind;
use super::sys::{after_fork_warm_up, die_of, errno, mono_ns, pretouch_stack, pwrite_range, sleep_until, sys_brk, touch_pages};

/// Stack of each thread of the workload (std's threads; the op loop needs far less).
pub(super) const THREAD_STACK: usize = 1 << 20;
/// Stack of the vfork children (one at a time: main is suspended while one runs).
const VFORK_STACK: u64 = 1 << 20;

/// Who runs an op loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    Main,
    /// A child of `fork`.
    Forked,
    /// A thread of main.
    Thread,
    /// A child of vfork, in main's mm.
    Vforked,
}

/// How an op loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ended {
    /// Main ran the last operation.
    Main,
    /// A child or thread is told to leave (or its thread exited).
    Leave,
}

/// The state of one task's op loop, allocated before 'go'.
pub(super) struct Task {
    pub me: usize,
    pub role: Role,
    pub results: Vec<i64>,
    pub my_minflt: u64,
    /// Main only: each child's pid, whether each task was created, main's watch, the join
    /// handles of the threads, the vfork children's tasks.
    pub pids: Vec<i32>,
    pub started: Vec<bool>,
    pub watch: MainWatch,
    pub joins: Vec<Option<std::thread::JoinHandle<()>>>,
    pub vforks: Vec<Option<Task>>,
    /// A thread: its stack block, and the forks it has seen.
    pub stack: (u64, u64),
    pub seen_forks: u32,
    /// Main: the `repeat DURATION` block it is in.
    pub repeat: Option<RepeatState>,
}

/// A `repeat DURATION` block being run: its loop node, the operation after its body, when
/// it ends (CLOCK_MONOTONIC ns) and the iterations so far.
#[derive(Clone, Copy, Debug)]
pub(super) struct RepeatState {
    node: usize,
    end: usize,
    deadline: u64,
    iterations: u64,
}

impl Task {
    pub(super) fn new(me: usize, role: Role, n_ops: usize, procs: usize) -> Task {
        Task {
            me,
            role,
            results: vec![0i64; n_ops],
            my_minflt: 0,
            pids: vec![0i32; procs],
            started: vec![false; procs],
            watch: MainWatch { pidfds: vec![-1; procs], pfds: Vec::with_capacity(procs + 1) },
            joins: (0..procs).map(|_| None).collect(),
            vforks: (0..procs).map(|_| None).collect(),
            stack: (0, 0),
            seen_forks: 0,
            repeat: None,
        }
    }
}

/// A thread of the workload: warm up, tell main, wait for the first turn, run.
pub(super) fn thread_main(ex: &'static Exec, mut t: Task) {
    t.stack = own_stack();
    pretouch_stack();
    // Its malloc arena (its report at the end allocates) and its errno, now.
    std::hint::black_box(Vec::<u8>::with_capacity(256));
    // SAFETY: a call that fails at once, setting errno (TLS).
    unsafe { libc::close(-1) };
    for r in t.results.iter_mut() {
        // SAFETY: volatile read-modify-write of our own element.
        unsafe { std::ptr::write_volatile(r, std::ptr::read_volatile(r)) };
    }
    task_minflt();
    ex.turns.pass(0, 0);
    if let Some(i) = ex.turns.child_wait(t.me, 0, &t.results, &ex.spec) {
        thread_after_forks(ex, &mut t);
        run_ops(ex, &mut t, i as usize);
    }
}

/// A thread whose stack a fork since its last turn made copy-on-write: rewrite it now, so that
/// its operations copy none of the executor's own pages.
fn thread_after_forks(ex: &Exec, t: &mut Task) {
    let forks = ex.forks.load(std::sync::atomic::Ordering::SeqCst);
    if t.role == Role::Thread && forks != t.seen_forks {
        t.seen_forks = forks;
        rewrite_pages(t.stack.0, t.stack.1);
    }
}

/// Each page of `[lo, hi)` written with its own first byte.
#[inline(never)]
pub(super) fn rewrite_pages(lo: u64, hi: u64) {
    let mut a = lo & !(PAGE_SIZE - 1);
    while a < hi {
        // SAFETY: [lo, hi) is mapped memory of this process (a stack); the byte is written back
        // unchanged, and no other task of the workload runs meanwhile.
        unsafe {
            let p = a as *mut u8;
            std::ptr::write_volatile(p, std::ptr::read_volatile(p));
        }
        a += PAGE_SIZE;
    }
}

/// This thread's stack block (glibc: its stack, TLS and thread descriptor).
fn own_stack() -> (u64, u64) {
    // SAFETY: pthread_getattr_np fills the attribute of the calling thread, destroyed after.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return (0, 0);
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size = 0usize;
        libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        (addr as u64, addr as u64 + size as u64)
    }
}

/// The vfork children's stack: mapped MAP_STACK (VM_NOHUGEPAGE) and written now, in main's
/// mm, so that a child's own frames fault nothing.
pub(super) fn map_vfork_stack() -> std::result::Result<(u64, u64), String> {
    // SAFETY: a fresh private mapping of our own, written in full.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            VFORK_STACK as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return Err(format!("cannot map the vfork stack: {}", std::io::Error::last_os_error()));
        }
        std::ptr::write_bytes(p.cast::<u8>(), 0, VFORK_STACK as usize);
        Ok((p as u64, VFORK_STACK))
    }
}

/// What a vfork child starts with.
struct VforkArg {
    ex: &'static Exec,
    task: *mut Task,
    start: usize,
}

/// The vfork child: its operations from `start`, in main's mm, until its `exit`.
extern "C" fn vfork_entry(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the VforkArg on main's stack; main is suspended until this child exits
    // (CLONE_VFORK), so nothing else uses it or the task.
    unsafe {
        let a = &mut *(arg as *mut VforkArg);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
        run_ops(a.ex, &mut *a.task, a.start);
        libc::_exit(0)
    }
}

/// The faults of the calling task (getrusage RUSAGE_THREAD: the kernel counts them per task,
/// mm/memory.c mm_account_fault).
pub(super) fn task_minflt() -> u64 {
    // SAFETY: getrusage fills a zeroed struct.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
        ru.ru_minflt as u64
    }
}


/// What running one operation asks of the loop besides its result.
#[derive(Default)]
struct After {
    /// This process is the new child of the `fork` just run.
    just_forked: bool,
    /// The next operation (after a vfork child's).
    resume_at: Option<usize>,
    /// The task ends (a thread's `exit`).
    leave: bool,
}

/// The op loop of one task from op `start`: runs its own operations, passes the turn for the
/// others'. No allocation.
pub(super) fn run_ops(ex: &'static Exec, t: &mut Task, start: usize) -> Ended {
    let (spec, turns) = (&ex.spec, &ex.turns);
    let n_ops = spec.ops.len();
    let mut i = start;
    loop {
        if let Some(next) = repeat_turn(t, i) {
            i = next;
            continue;
        }
        if i == n_ops {
            if t.me == 0 {
                return Ended::Main;
            }
            // A child's operation was the last: main ends the run; this child waits for END.
            turns.pass(0, n_ops as u32);
            while turns.child_wait(t.me, t.my_minflt, &t.results, spec).is_some() {}
            return Ended::Leave;
        }
        let owner = spec.ops[i].proc;
        if owner != t.me {
            turns.pass(owner, i as u32);
            let token = if t.me == 0 {
                turns.main_wait(&mut t.watch, spec, &ex.exit_op)
            } else {
                match turns.child_wait(t.me, t.my_minflt, &t.results, spec) {
                    Some(tok) => tok,
                    None => return Ended::Leave,
                }
            };
            thread_after_forks(ex, t);
            i = (token as usize).min(n_ops);
            continue;
        }
        send_op_index(i);
        let fa = if ex.multi { task_minflt() } else { 0 };
        let mut after = After::default();
        let rc = run_one(ex, t, i, &mut after);
        if after.leave {
            return Ended::Leave;
        }
        // The faults of a fork, wait or vfork are the other task's (or the executor's own).
        if ex.multi && !matches!(spec.ops[i].op, OpKind::Fork(_) | OpKind::Wait(_) | OpKind::Vfork(_)) {
            t.my_minflt += task_minflt() - fa;
        }
        t.results[i] = rc;
        i = after.resume_at.unwrap_or(i + 1);
        if after.just_forked {
            // The new process runs when the turn comes to it, as every process does.
            match turns.child_wait(t.me, t.my_minflt, &t.results, spec) {
                Some(tok) => i = (tok as usize).min(n_ops),
                None => return Ended::Leave,
            }
        }
    }
}

/// At the operation after a `repeat DURATION` block's body: the first operation of the body
/// again while the clock is before the deadline; else the loop node's result is set and the
/// run goes on. `None`: go on at `i`.
fn repeat_turn(t: &mut Task, i: usize) -> Option<usize> {
    let r = t.repeat.as_mut()?;
    if i != r.end {
        return None;
    }
    r.iterations += 1;
    if mono_ns() < r.deadline {
        return Some(r.node + 1);
    }
    t.results[r.node] = r.iterations as i64;
    t.repeat = None;
    None
}

/// Run operation `i` (the task's own): 0 or an errno, or the call's value (brk's break, a
/// phase's time, a repeat's iterations).
fn run_one(ex: &'static Exec, t: &mut Task, i: usize, after: &mut After) -> i64 {
    let op = &ex.spec.ops[i].op;
    match op {
        OpKind::Mount(_) | OpKind::Create(_) | OpKind::Ftruncate { .. } | OpKind::Fallocate { .. } | OpKind::Write { .. } => run_file_op(ex, op),
        OpKind::Fork(_) | OpKind::Thread(_) | OpKind::Vfork(_) | OpKind::Exit | OpKind::Wait(_) => run_task_op(ex, t, i, after),
        OpKind::RepeatFor { ns, body } => {
            // The first iteration always runs; the loop's end is checked when `i` reaches the
            // operation after the body (repeat_turn).
            t.repeat = Some(RepeatState { node: i, end: i + 1 + body, deadline: mono_ns().saturating_add(*ns), iterations: 0 });
            0
        }
        _ => run_mm_op(op, &ex.resolved[i], ex),
    }
}

/// `echo 2 > /proc/sys/vm/drop_caches`, without allocating: 0 or the errno.
fn drop_slab() -> i64 {
    // SAFETY: a NUL-terminated path; the fd is ours and closed here; the buffer is static.
    unsafe {
        let fd = libc::open(c"/proc/sys/vm/drop_caches".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return errno() as i64;
        }
        let r = libc::write(fd, b"2".as_ptr().cast(), 1);
        let e = if r == 1 { 0 } else { errno() as i64 };
        libc::close(fd);
        e
    }
}

/// 0, or the errno of a failed call (`r != 0`).
fn ret(r: libc::c_int) -> i64 {
    if r != 0 {
        errno() as i64
    } else {
        0
    }
}

/// The memory statements: mappings, calls over ranges, the program break, accesses, time.
fn run_mm_op(op: &OpKind, res: &Resolved, ex: &Exec) -> i64 {
    match (op, res) {
        (OpKind::Mmap { len, prot, backing, .. }, Resolved::Map { addr, flags }) => {
            let file = match backing {
                workload::Backing::SharedFile { file, pgoff } | workload::Backing::PrivateFile { file, pgoff } => Some((file.0 as usize, *pgoff)),
                _ => None,
            };
            mmap_at(*addr, *len, prot.bits(), *flags, file.map_or((-1, 0), |(f, off)| (ex.fd(f), off)))
        }
        (OpKind::Munmap(_), Resolved::Calls(c)) => each_call(c, |p, l| unsafe { libc::munmap(p, l) }),
        (OpKind::Mprotect(_, prot), Resolved::Calls(c)) => each_call(c, |p, l| unsafe { libc::mprotect(p, l, prot.bits()) }),
        (OpKind::Madvise(_, advice), Resolved::Calls(c)) => each_call(c, |p, l| unsafe { libc::madvise(p, l, advice.madv()) }),
        // SAFETY (these four): the workload asked for exactly these calls on its own ranges.
        (OpKind::Mlock(_), Resolved::Calls(c)) => each_call(c, |p, l| unsafe { libc::mlock(p, l) }),
        (OpKind::Munlock(_), Resolved::Calls(c)) => each_call(c, |p, l| unsafe { libc::munlock(p, l) }),
        // The live run faults the buffer in as the read's pin_user_pages_fast(FOLL_WRITE) would
        // (MADV_POPULATE_WRITE: the same __get_user_pages write faults); it issues no I/O.
        (OpKind::ReadDirect { .. }, Resolved::Calls(c)) => each_call(c, |p, l| unsafe { libc::madvise(p, l, libc::MADV_POPULATE_WRITE) }),
        (OpKind::Brk { delta }, _) => {
            // The break is the mm's: read it, as a thread or a vfork child may have moved it.
            let want = (sys_brk(0) as i64 + delta) as u64;
            sys_brk(want) as i64
        }
        (OpKind::Prctl(form), _) => {
            let (arg2, arg3): (libc::c_ulong, libc::c_ulong) = match form {
                ThpDisable::Completely => (1, 0),
                ThpDisable::ExceptAdvised => (1, 2),
                ThpDisable::Clear => (0, 0),
            };
            // SAFETY: PR_SET_THP_DISABLE with the workload's arguments.
            ret(unsafe { libc::prctl(linux_abi::prctl::PR_SET_THP_DISABLE as libc::c_int, arg2, arg3, 0 as libc::c_ulong, 0 as libc::c_ulong) })
        }
        (OpKind::Phase(_), _) => mono_ns() as i64,
        (OpKind::Sleep { ns }, _) => {
            nanosleep(*ns);
            0
        }
        // drop_slab: every shrinker, the THP deferred split one among them (needs root, as
        // every live run does).
        (OpKind::DropSlab, _) => drop_slab(),
        (OpKind::Touch(t), Resolved::Touch { plan, pacing }) => {
            touch(plan, t.write, pacing.as_ref());
            0
        }
        (OpKind::Access(_), Resolved::Access { addr, plan }) => {
            access(*addr, plan);
            0
        }
        (op, _) => unreachable!("an operation without what it needs resolved: {op:?}"),
    }
}

/// mmap at `addr` (MAP_FIXED_NOREPLACE in `flags`) of `fd` from `pgoff` (-1: anonymous).
fn mmap_at(addr: u64, len: u64, prot: i32, flags: i32, (fd, pgoff): (i32, u64)) -> i64 {
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping.
    let p = unsafe { libc::mmap(addr as *mut libc::c_void, len as usize, prot, flags, fd, pgoff as libc::off_t) };
    if p == libc::MAP_FAILED {
        errno() as i64
    } else if p as u64 != addr {
        // A kernel that ignores MAP_FIXED_NOREPLACE placed it elsewhere.
        // SAFETY: unmapping what we just mapped.
        unsafe { libc::munmap(p, len as usize) };
        libc::EEXIST as i64
    } else {
        0
    }
}

/// One call per (address, length): 0, or the errno of the last that failed.
fn each_call(calls: &[(u64, u64)], call: impl Fn(*mut libc::c_void, usize) -> libc::c_int) -> i64 {
    let mut rc = 0;
    for &(a, l) in calls {
        // The workload asked for exactly these calls on its own ranges (the closures' SAFETY).
        if call(a as *mut libc::c_void, l as usize) != 0 {
            rc = errno() as i64;
        }
    }
    rc
}

/// nanosleep for `ns`, resumed with the remainder after a signal.
fn nanosleep(ns: u64) {
    let mut req = libc::timespec { tv_sec: (ns / 1_000_000_000) as libc::time_t, tv_nsec: (ns % 1_000_000_000) as libc::c_long };
    let mut rem = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: nanosleep with valid timespecs.
    while unsafe { libc::nanosleep(&req, &mut rem) } != 0 && errno() == libc::EINTR {
        req = rem;
    }
}

/// A touch's pages; paced: chunk after chunk, the next not before its time (absolute, so that
/// no sleep's lateness adds up; behind time, the next chunk starts at once).
fn touch(plan: &workload::TouchPlan, write: bool, pacing: Option<&workload::Pacing>) {
    if super::sys::TouchLatency::timed(plan, write, pacing.is_none()) {
        return;
    }
    let Some(p) = pacing else {
        touch_pages(plan, 0, plan.len(), write);
        return;
    };
    let t0 = mono_ns();
    let n = plan.len();
    let mut k = 0;
    while k < n {
        let end = (k + p.chunk_pages()).min(n);
        touch_pages(plan, k, end, write);
        sleep_until(t0.saturating_add(p.offset_ns(end)));
        k = end;
    }
}

/// An access statement's loads and stores (the plan iterates without allocating: its generator
/// state is inline).
fn access(addr: u64, plan: &workload::AccessPlan) {
    for (off, write) in plan.clone() {
        let p = (addr + off) as *mut u8;
        // SAFETY: as for touches: the workload accesses its own mapping.
        unsafe {
            if write {
                std::ptr::write_volatile(p, 1);
            } else {
                std::ptr::read_volatile(p);
            }
        }
    }
}

/// The file statements: the mount (made before `go`), creating files, ftruncate, fallocate,
/// pwrite.
fn run_file_op(ex: &Exec, op: &OpKind) -> i64 {
    match op {
        OpKind::Mount(_) => 0,
        OpKind::Create(f) => {
            let file = f.0 as usize;
            let name = ex.file_names[file].as_ptr();
            // SAFETY: NUL-terminated names prepared before 'go'.
            let fd = unsafe {
                match ex.spec.files[file].kind {
                    FileSpecKind::Memfd => libc::memfd_create(name, 0),
                    FileSpecKind::HugetlbMemfd(shift) => libc::memfd_create(name, super::hugetlb::memfd_flags(shift)),
                    FileSpecKind::Shm => libc::shm_open(name, libc::O_CREAT | libc::O_RDWR, 0o600),
                    FileSpecKind::Open => libc::open(name, libc::O_CREAT | libc::O_RDWR, 0o600),
                }
            };
            if fd < 0 {
                return errno() as i64;
            }
            ex.fds[file].store(fd, std::sync::atomic::Ordering::SeqCst);
            0
        }
        // SAFETY: syscalls on the workload's own fd.
        OpKind::Ftruncate { file, size } => ret(unsafe { libc::ftruncate(ex.fd(file.0 as usize), *size as libc::off_t) }),
        OpKind::Fallocate { file, offset, len, mode } => {
            // SAFETY: as above.
            ret(unsafe { libc::fallocate(ex.fd(file.0 as usize), mode.bits(), *offset as libc::off_t, *len as libc::off_t) })
        }
        OpKind::Write { file, offset, len, chunk } => pwrite_range(ex.fd(file.0 as usize), ex.wbuf as *const u8, ex.wbuf_len, *offset, *len, *chunk),
        op => unreachable!("not a file statement: {op:?}"),
    }
}

/// The task statements: fork, thread, vfork, exit, wait.
fn run_task_op(ex: &'static Exec, t: &mut Task, i: usize, after: &mut After) -> i64 {
    match ex.spec.ops[i].op {
        OpKind::Fork(c) => fork(ex, t, c.0 as usize, after),
        OpKind::Thread(c) => {
            // The thread exists since before 'go' (see child::main_task); from here on it runs.
            t.started[c.0 as usize] = true;
            0
        }
        OpKind::Vfork(c) => vfork(ex, t, c.0 as usize, i, after),
        OpKind::Exit => exit(ex, t, i, after),
        OpKind::Wait(c) if ex.is_thread[c.0 as usize] => match t.joins[c.0 as usize].take() {
            Some(h) => match h.join() {
                Ok(()) => 0,
                Err(_) => libc::EINVAL as i64,
            },
            None => libc::ESRCH as i64,
        },
        OpKind::Wait(c) => ex.turns.wait_child(t.pids[c.0 as usize]),
        ref op => unreachable!("not a task statement: {op:?}"),
    }
}

/// `fork`: in the child, this task becomes process `child`.
fn fork(ex: &Exec, t: &mut Task, child: usize, after: &mut After) -> i64 {
    // SAFETY: fork of this process; the workload's threads, if any, are blocked on their turn
    // pipes, and the child runs none of their code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return errno() as i64;
    }
    let child_side = pid == 0;
    if child_side {
        t.me = child;
        t.role = Role::Forked;
        after.just_forked = true;
        // SAFETY: the child dies with main, whatever happens to main.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) };
        t.my_minflt = 0;
    } else {
        t.pids[child] = pid;
        t.started[child] = true;
        ex.forks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // SAFETY: pidfd_open of our own child.
        t.watch.pidfds[child] = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    }
    // Both sides copy the executor's pages they write now, not during an op.
    after_fork_warm_up(&mut t.results, &mut t.pids, if child_side { ex.stack_top } else { 0 }, &ex.file_maps);
    0
}

/// `vfork`: a real clone(CLONE_VM|CLONE_VFORK|SIGCHLD), as glibc's vfork() is: a process in
/// this mm (kernel/fork.c: copy_mm, CLONE_VM) while main sleeps until it releases the mm
/// (mm_release → complete_vfork_done, at its exit). libc::vfork itself cannot be used from Rust
/// (the child would return into main's frames on main's stack); the child runs on a stack of
/// its own, mapped and written before 'go', and uses main's TLS, as a vfork child does. A fork
/// since then made that stack copy-on-write: main writes it first, so the child copies nothing
/// of the executor's inside its operations.
fn vfork(ex: &'static Exec, t: &mut Task, child: usize, i: usize, after: &mut After) -> i64 {
    rewrite_pages(ex.vfork_stack.0, ex.vfork_stack.0 + ex.vfork_stack.1);
    let task: *mut Task = t.vforks[child].as_mut().expect("a task for each vfork child");
    let mut arg = VforkArg { ex, task, start: i + 1 };
    let top = (ex.vfork_stack.0 + ex.vfork_stack.1) as *mut libc::c_void;
    // SAFETY: the child runs vfork_entry on its own stack and ends with _exit.
    let pid = unsafe { libc::clone(vfork_entry, top, libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD, (&mut arg as *mut VforkArg).cast()) };
    if pid < 0 {
        return errno() as i64;
    }
    t.pids[child] = pid;
    t.started[child] = true;
    // The child released the mm: it is exiting. Wait until it is a zombie (it stays to be
    // reaped by 'wait'); one that a signal killed kills main.
    // SAFETY: a zeroed siginfo for waitid to fill.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid of our own child, WNOWAIT only looks.
    let rc = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT) };
    if rc == 0 && (info.si_code == libc::CLD_KILLED || info.si_code == libc::CLD_DUMPED) {
        // SAFETY: si_status is valid for SIGCHLD information.
        die_of(unsafe { info.si_status() });
    }
    after.resume_at = Some(ex.exit_op[child].map_or(ex.spec.ops.len(), |e| e + 1));
    0
}

/// `exit` of the task running it.
fn exit(ex: &Exec, t: &mut Task, i: usize, after: &mut After) -> i64 {
    ex.turns.report(t.me, t.my_minflt, true, &t.results, &ex.spec);
    if t.role == Role::Thread {
        // A thread's exit takes nothing of the mm (kernel/exit.c: exit_mm → mmput drops a
        // reference), so the next operation need not wait for it: the thread hands the turn on
        // itself and returns.
        let next = i + 1;
        let owner = if next < ex.spec.ops.len() { ex.spec.ops[next].proc } else { 0 };
        ex.turns.pass(owner, next as u32);
        after.leave = true;
        return 0;
    }
    // A forked child: main hands the turn on once this process is a zombie (MainWatch); a vfork
    // child: main resumes when it has released the mm.
    // SAFETY: leave at once, as the workload's exit does.
    unsafe { libc::_exit(0) }
}
