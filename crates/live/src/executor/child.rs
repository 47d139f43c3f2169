//! The child (`thplab __exec`): reads the spec, mounts, opens nothing yet, computes every
//! operation's addresses and plans ([`Resolved`]), warms up everything the op loop calls, starts
//! the workload's threads, says `ready`, and on `go` runs the op loop (crate::executor::tasks)
//! without allocating until `done`.

use mm_types::PAGE_SIZE;
use workload::{Backing, OpKind, Touch, TouchPlan};

use super::protocol::{raw_read_line, raw_write_all, Done, Ready, Turns, TOKEN_END, TOKEN_QUIT};
use super::spec::{range_calls, ExecOp, ExecSpec, FileSpecKind, Piece, SHM_PREFIX};
use super::sys::{errno, file_mappings, map_write_buffer, minflt_now, mono_ns, pretouch_stack, setup_mounts, stack_range, sys_brk};
use super::tasks::{map_vfork_stack, run_ops, task_minflt, thread_main, Ended, Role, Task, THREAD_STACK};
use super::{wire, CONTROL_FD, STATUS_FD};

/// What the child computes of an operation before `go`, so that running it allocates nothing.
/// By the shape of what the operation acts on, not by statement: a new statement over a range
/// gets its calls here without a line of its own.
pub(super) enum Resolved {
    /// Nothing to compute (file calls, brk, sleep, processes).
    Nothing,
    /// `mmap`: the address and the flags (MAP_FIXED_NOREPLACE).
    Map { addr: u64, flags: i32 },
    /// The (address, length) of each call over a range (`every=` expanded).
    Calls(Vec<(u64, u64)>),
    Touch { plan: TouchPlan, pacing: Option<workload::Pacing> },
    Access { addr: u64, plan: workload::AccessPlan },
}

/// What every task of the executor shares: the operations and what was resolved of them, the
/// turn pipes, the files' descriptors (threads share the fd table).
pub(super) struct Exec {
    pub spec: ExecSpec,
    pub resolved: Vec<Resolved>,
    pub turns: Turns,
    pub fds: Vec<std::sync::atomic::AtomicI32>,
    pub file_names: Vec<std::ffi::CString>,
    /// The pwrite buffer (address) and its length.
    pub wbuf: usize,
    pub wbuf_len: u64,
    pub stack_top: u64,
    pub file_maps: Vec<(u64, u64)>,
    pub multi: bool,
    /// The index of each process's `exit`.
    pub exit_op: Vec<Option<usize>>,
    /// Whether each task is a thread (its `wait` is pthread_join).
    pub is_thread: Vec<bool>,
    /// (address, length) of the vfork children's stack.
    pub vfork_stack: (u64, u64),
    /// Forks so far: a thread that sees a new one rewrites its stack before its next operation.
    pub forks: std::sync::atomic::AtomicU32,
}

impl Exec {
    pub fn fd(&self, file: usize) -> i32 {
        self.fds[file].load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Body of `thplab __exec`: run the spec (JSON, read from stdin by the caller) under the
/// protocol in the module docs. Never returns.
pub fn exec_child_main(spec_json: &str) -> ! {
    let code = match child_run(spec_json) {
        Ok(()) => 0,
        Err(msg) => {
            eprintln!("thplab __exec: {msg}");
            2
        }
    };
    // SAFETY: leave without running destructors or atexit handlers of the parent's libraries.
    unsafe { libc::_exit(code) }
}

/// `start_brk + addr` for a heap piece, `addr` otherwise.
fn absolute(p: &Piece, start_brk: u64) -> u64 {
    if p.heap {
        start_brk + p.addr
    } else {
        p.addr
    }
}

/// What running `op` needs computed before `go`.
pub(super) fn resolve(op: &ExecOp, start_brk: u64) -> Resolved {
    let Some(base) = op.at else { return Resolved::Nothing };
    match &op.op {
        OpKind::Mmap { backing, .. } => Resolved::Map { addr: base.addr, flags: mmap_flags(backing) },
        OpKind::Touch(t) => {
            let t = Touch { stride: t.stride.max(PAGE_SIZE), ..t.resolved(base.len) };
            let plan = TouchPlan::new(&t, absolute(&base, start_brk));
            if !plan.is_empty() {
                std::hint::black_box(plan.get(0));
            }
            let pacing = t.pace.map(|p| workload::Pacing::new(p, plan.len()));
            Resolved::Touch { plan, pacing }
        }
        OpKind::Access(a) => {
            let len = a.range.len_in(base.len);
            Resolved::Access { addr: absolute(&base, start_brk) + a.range.offset, plan: workload::AccessPlan::new(a, len) }
        }
        k => match k.range() {
            Some(r) => Resolved::Calls(range_calls(r, &base, start_brk)),
            None => Resolved::Nothing,
        },
    }
}

/// mmap(2)'s flags for a backing (always MAP_FIXED_NOREPLACE at the resolved address).
fn mmap_flags(b: &Backing) -> i32 {
    (match b {
        Backing::PrivateAnon => libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
        Backing::PrivateFile { .. } => libc::MAP_PRIVATE,
        Backing::SharedAnon => libc::MAP_SHARED | libc::MAP_ANONYMOUS,
        Backing::SharedFile { .. } => libc::MAP_SHARED,
        Backing::Hugetlb { page, shared, noreserve } => super::hugetlb::mmap_flags(*page, *shared, *noreserve),
    }) | libc::MAP_FIXED_NOREPLACE
}

/// The NUL-terminated name of each file, and those this run creates on the machine's /dev/shm
/// (unlinked at the end).
fn file_names(spec: &ExecSpec) -> Result<(Vec<std::ffi::CString>, Vec<std::ffi::CString>), String> {
    let pid = std::process::id();
    let mut names = Vec::with_capacity(spec.files.len());
    let mut machine_shm = Vec::new();
    for f in &spec.files {
        let name = match f.kind {
            FileSpecKind::Memfd | FileSpecKind::HugetlbMemfd(_) => f.name.clone(),
            FileSpecKind::Shm => format!("/{SHM_PREFIX}{pid}-{}", f.name),
            FileSpecKind::Open => {
                let m = f.mount.and_then(|m| spec.mounts.get(m)).ok_or_else(|| format!("file '{}' has no mount", f.name))?;
                format!("{}/{}", m.dir, f.name)
            }
        };
        let c = std::ffi::CString::new(name).map_err(|_| format!("file name '{}' contains NUL", f.name))?;
        if f.kind == FileSpecKind::Shm && spec.dev_shm.is_none() {
            machine_shm.push(c.clone());
        }
        names.push(c);
    }
    Ok((names, machine_shm))
}

/// Bring in now every page of code and stack the op loop uses, so that its first use faults
/// nothing inside an operation.
fn warm_up(spec: &ExecSpec, multi: bool) {
    // With processes, the executor's stack gets base pages only (MADV_NOHUGEPAGE before the
    // pre-touch): a large folio of its own that fork shares and copy-on-write frees would move
    // nr_anon and the split counters, which the comparison reads system-wide.
    if multi {
        if let Some((lo, hi)) = stack_range() {
            // SAFETY: advice on our own stack mapping.
            unsafe { libc::madvise(lo as *mut libc::c_void, (hi - lo) as usize, libc::MADV_NOHUGEPAGE) };
        }
    }
    pretouch_stack();
    // SAFETY: harmless calls (zero lengths, a query).
    unsafe {
        libc::madvise(std::ptr::null_mut(), 0, libc::MADV_NORMAL);
        libc::mprotect(std::ptr::null_mut(), 0, libc::PROT_NONE);
        libc::munmap(std::ptr::null_mut(), 0);
        libc::mmap(std::ptr::null_mut(), 0, 0, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
        libc::prctl(linux_abi::prctl::PR_GET_THP_DISABLE as libc::c_int, 0, 0, 0, 0);
        if !spec.files.is_empty() {
            // Each fails at once (bad flags or fd) but brings its code in.
            libc::memfd_create(c"".as_ptr(), !0);
            libc::shm_open(c"".as_ptr(), 0, 0);
            libc::open(c"".as_ptr(), 0);
            libc::ftruncate(-1, 0);
            libc::fallocate(-1, 0, 0, 0);
            libc::pwrite(-1, std::ptr::null(), 0, 0);
        }
    }
    let _ = errno();
    // A paced touch's sleep: an absolute time long past returns at once.
    // SAFETY: a valid timespec, no remainder.
    unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &libc::timespec { tv_sec: 0, tv_nsec: 0 }, std::ptr::null_mut()) };
    sys_brk(0);
    minflt_now();
    task_minflt();
    mono_ns();
}

/// The children of the statements that create tasks of this kind.
fn children(spec: &ExecSpec, of: fn(&OpKind) -> Option<usize>) -> Vec<usize> {
    spec.ops.iter().filter_map(|o| of(&o.op)).collect()
}

/// Everything the tasks share, built and leaked (the process ends with _exit).
fn build_exec(spec: ExecSpec, start_brk: u64, (wbuf, wbuf_len): (usize, u64)) -> Result<&'static Exec, String> {
    let resolved = spec.ops.iter().map(|op| resolve(op, start_brk)).collect();
    let (file_names, _) = file_names(&spec)?;
    let multi = spec.procs > 1;
    warm_up(&spec, multi);
    // Processes: the turn pipes that keep the workload's global order across them, made before
    // the first fork and before the threads start, so that every process and thread holds
    // every pipe.
    let turns = if multi { Turns::new(spec.procs)? } else { Turns::default() };
    // The top of this thread's stack: the warm-up after fork rewrites the frames above it.
    let stack_top = if multi { stack_range().map_or(0, |r| r.1) } else { 0 };
    // The program's file mappings (text, read-only data): fork copies no page table of a VMA
    // without an anon_vma, so a child would fault on the executor's code inside an operation;
    // and main itself runs code inside the operations that it may not have run before (a
    // page of it first executed there is a fault in the run's minflt: seen as one fault more
    // than the model, after a rebuild moved the executor's code).
    // Map it all now: main's own code, and for a thread or vfork child, in the one mm.
    let file_maps = file_mappings();
    for &(a, b) in &file_maps {
        // SAFETY: read-populating our own file mappings changes no content.
        unsafe { libc::madvise(a as *mut libc::c_void, (b - a) as usize, libc::MADV_POPULATE_READ) };
    }
    let vfork_stack = if spec.ops.iter().any(|o| matches!(o.op, OpKind::Vfork(_))) { map_vfork_stack()? } else { (0, 0) };
    let exit_op = (0..spec.procs).map(|p| spec.ops.iter().position(|o| o.proc == p && o.op == OpKind::Exit)).collect();
    let mut is_thread = vec![false; spec.procs];
    for c in children(&spec, |k| if let OpKind::Thread(c) = k { Some(c.0 as usize) } else { None }) {
        is_thread[c] = true;
    }
    let n_files = spec.files.len();
    Ok(Box::leak(Box::new(Exec {
        spec,
        resolved,
        turns,
        fds: (0..n_files).map(|_| std::sync::atomic::AtomicI32::new(-1)).collect(),
        file_names,
        wbuf,
        wbuf_len,
        stack_top,
        file_maps,
        multi,
        exit_op,
        is_thread,
        vfork_stack,
        forks: std::sync::atomic::AtomicU32::new(0),
    })))
}

/// Main's task, with a task for each vfork child; the workload's threads started.
fn main_task(ex: &'static Exec) -> Result<Task, String> {
    let (n_ops, procs) = (ex.spec.ops.len(), ex.spec.procs);
    let mut t = Task::new(0, Role::Main, n_ops, procs);
    for c in children(&ex.spec, |k| if let OpKind::Vfork(c) = k { Some(c.0 as usize) } else { None }) {
        t.vforks[c] = Some(Task::new(c, Role::Vforked, n_ops, procs));
    }
    // Threads: real threads of this process (pthread_create: clone with CLONE_VM|CLONE_THREAD|…),
    // started now, before 'go', so that nothing is allocated during the run (their stacks are
    // MAP_STACK, hence VM_NOHUGEPAGE: include/linux/mman.h calc_vm_flag_bits). Each warms up its
    // stack and its malloc arena, says so on main's pipe, and waits for its first turn; its
    // `thread` statement only marks it started.
    for c in children(&ex.spec, |k| if let OpKind::Thread(c) = k { Some(c.0 as usize) } else { None }) {
        let task = Task::new(c, Role::Thread, n_ops, procs);
        let h = std::thread::Builder::new()
            .name(format!("thplab-t{c}"))
            .stack_size(THREAD_STACK)
            .spawn(move || thread_main(ex, task))
            .map_err(|e| format!("cannot start a thread: {e}"))?;
        t.joins[c] = Some(h);
        if ex.turns.read_token(0).is_none() {
            return Err("a thread of the workload did not start".into());
        }
    }
    Ok(t)
}

fn child_run(spec_json: &str) -> Result<(), String> {
    for fd in [STATUS_FD, CONTROL_FD] {
        // SAFETY: F_GETFD on any integer is harmless.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
            return Err(format!("fd {fd} is not open: this command is started by 'thplab live', not by hand"));
        }
    }
    let spec = wire::decode(spec_json)?;
    // Before anything else of the workload: its tmpfs mounts, in a mount namespace of its own
    // (they vanish with the child, however it ends).
    setup_mounts(&spec)?;
    let (_, machine_shm) = file_names(&spec)?;
    // The buffer pwrite copies from: mapped and faulted now, filled with non-zero bytes.
    let wbuf = match spec.write_buf {
        Some((a, l)) => (map_write_buffer(a, l)? as usize, l),
        None => (0, 0),
    };
    let start_brk = probe::procfs::start_brk("self").map_err(|e| e.to_string())?;
    let brk0 = sys_brk(0);
    if spec.latency {
        super::sys::TouchLatency::enable();
    }
    let ex = build_exec(spec, start_brk, wbuf)?;
    let mut t = main_task(ex)?;
    if ex.multi {
        // Started with PR_SET_THP_DISABLE (run_once) so that the executor's own memory is in
        // base pages: fork shares it, the copy-on-write of the executor's writes after fork
        // then frees no large folio when a child exits (nr_anon and the split counters are
        // read system-wide). The workload runs with the flag cleared, as it would.
        // SAFETY: prctl clearing the flag of this process.
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong) };
    }
    let ready = serde_json::to_string(&Ready { pid: std::process::id() as i32, start_brk, brk: brk0 }).map_err(|e| e.to_string())?;
    if !raw_write_all(STATUS_FD, format!("ready {ready}\n").as_bytes()) {
        return Err("cannot write to the status fd".into());
    }
    let mut line = [0u8; 64];
    match raw_read_line(CONTROL_FD, &mut line) {
        Some(n) if &line[..n] == b"go" => {}
        _ => return Err("the parent went away before 'go'".into()),
    }
    run_and_report(ex, &mut t)?;
    for name in &machine_shm {
        // SAFETY: unlinking our own objects; the parent removes them too if we die first.
        unsafe { libc::shm_unlink(name.as_ptr()) };
    }
    Ok(())
}

/// From `go`: the op loop (no allocation until its end), the children's reports, `done`, and
/// on `exit` the tasks still alive told to quit.
fn run_and_report(ex: &'static Exec, t: &mut Task) -> Result<(), String> {
    let (spec, procs) = (&ex.spec, ex.spec.procs);
    // ---- no allocation from here to 'done' ----
    let f0 = minflt_now();
    let t0 = mono_ns();
    if run_ops(ex, t, 0) == Ended::Leave {
        // A forked child at the end of the run.
        // SAFETY: leave at once.
        unsafe { libc::_exit(0) }
    }
    let t1 = mono_ns();
    let f1 = minflt_now();
    // Children and threads still running report their counts (each acknowledges), before
    // main's 'done'.
    if ex.multi {
        for p in 1..procs {
            if t.started[p] && ex.exit_op[p].is_none() {
                ex.turns.pass(p, TOKEN_END);
                ex.turns.main_wait(&mut t.watch, spec, &ex.exit_op);
            }
        }
    }
    // ---- allocation allowed again ----
    let minflt = if ex.multi { t.my_minflt } else { f1 - f0 };
    let latency = super::sys::TouchLatency::buckets();
    let done = serde_json::to_string(&Done { minflt, wall_ns: t1 - t0, start_ns: t0, results: std::mem::take(&mut t.results), brk_end: sys_brk(0), latency })
        .map_err(|e| e.to_string())?;
    raw_write_all(STATUS_FD, format!("done {done}\n").as_bytes());
    let mut line = [0u8; 64];
    loop {
        match raw_read_line(CONTROL_FD, &mut line) {
            Some(n) if &line[..n] == b"exit" => break,
            Some(_) => {}
            None => break,
        }
    }
    if ex.multi {
        for p in 1..procs {
            if t.started[p] && ex.exit_op[p].is_none() {
                ex.turns.pass(p, TOKEN_QUIT);
                match t.joins[p].take() {
                    Some(h) => {
                        let _ = h.join();
                    }
                    None => {
                        ex.turns.wait_child(t.pids[p]);
                    }
                }
            }
        }
    }
    Ok(())
}
