//! The simulation engine: boot a machine, run a workload, report the kernel's counters.
//!
//! API boundary: [`run`] takes a parsed workload, resolved settings and a machine description and
//! returns a [`uapi::RunResult`]; nothing here reads files, the clock or ambient randomness, so the
//! same inputs give byte-identical output. Progress goes out as [`SimEvent`]s; only the CLI turns
//! them into progress bars.
//!
//! Module map:
//! - [`driver`]: the one driver: every operation of every source goes through `Machine::step`.
//! - [`daemons`]: khugepaged and page reporting on the driver's clock.
//! - [`hint_daemon`]: a hint policy's source (MGLRU aging, DAMON sampling) on the driver's clock.
//! - [`access`]: `access` statements through the TLB model.
//! - [`host`]: the host side of a VM (model-only): host THP, khugepaged, EPT A/D bits, FHPM.
//! - [`file_pages`]: pages of the file mappings a replay does not back.
//! - [`hugetlb`]: a workload's hugetlb pools, mappings and memfds, and its meminfo lines.
//! - [`profile`]: what a run is priced and observed with (one type for runs and replays).
//! - [`replay`]: replay of a recording in the model under any settings.
//! - [`time`]: the run's time from a machine profile.
//! - [`tiers`]: the tier study (model-only): Linux's NUMA-balancing tiering against MTM.
//! - [`latency`]: reclaim, swap and compaction priced on the clock, and each fault's latency.
//! - [`views`]: the folio-size map, the peak and `--explain` of a finished run.

use std::collections::BTreeMap;

use mm::madvise::{Madvise, ThpDisable as MmThpDisable};
use mm::mmap::{prot_to_vm, MapBacking, MmapPlacement};
use mm::shmem::{SbHuge, DEV_SHM, SHM_MNT};
use mm::{Access, BootParams, Errno, Kernel};

use driver::{Machine, Outcome, Step};
use mm_types::{Order, PMD_ORDER};
use thp_abi::counters::sysfs_orders;
use uapi::result::RegionPlacement;
use thp_abi::{MthpStat, ThpSettings, VmEvent};
use uapi::{CallResult, RunResult};
use thp_abi::{FallbackReason, Meminfo, MthpStatKey, SizeDir};
use workload::{Advice, Backing, FallocMode, FileKind, OpKind, Placement, Prot, ThpDisable, TmpfsHuge, TouchPlan, Workload, HEAP};

pub use mm::{MAX_MEM_BYTES, MIN_MEM_BYTES};
pub use profile::{Profile, RecordedAccessInput, TlbSetup};

/// Bytes for people: `24 GiB`, `47.3 MiB`, `12 KiB`.
pub fn human_bytes(b: u64) -> String {
    let units = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
    for (name, shift) in units {
        if b >= 1 << shift {
            let v = b as f64 / (1u64 << shift) as f64;
            return if b % (1 << shift) == 0 { format!("{} {name}", b >> shift) } else { format!("{v:.1} {name}") };
        }
    }
    format!("{b} B")
}

/// Why an allocation failed, from where the machine's frames are: what the simulated machine
/// has (`--mem`), what is in folios and page tables, and the min watermark's reserve that the
/// fault path may not take.
pub fn oom_report(k: &mm::Kernel) -> String {
    if let Some(memcg) = k.memcg_oom_report() {
        return memcg;
    }
    let u = k.memory_use();
    let b = |pages: u64| human_bytes(pages * mm_types::PAGE_SIZE);
    let held = if u.held > 0 { format!(", {} held by the rest of the system", b(u.held)) } else { String::new() };
    format!(
        "the simulated machine has {} (--mem): {} in folios, {} in page tables{held}, {} free, and no allocation may take the free memory below the min watermark of {}; raise --mem (at most {})",
        b(u.managed),
        b(u.folios),
        b(u.pgtables),
        b(u.free),
        b(u.min_watermark),
        human_bytes(mm::MAX_MEM_BYTES),
    )
}

/// The simulated machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineConfig {
    /// Physical memory in bytes (one zone). Default 24 GiB, this machine kind.
    pub mem_bytes: u64,
    /// `vm.min_free_kbytes`: 67584 on this machine (raised by khugepaged at boot).
    pub min_free_kbytes: u64,
    /// Top of the mmap area: placement searches top-down below it (`mm->mmap_base`).
    /// Default 0x7dff_fffc_5000: 4 KiB-aligned but not 64 KiB-aligned, as the address below a
    /// real process's libraries is, and free in the live executor.
    pub mmap_base: u64,
    /// Start of the heap (`mm->start_brk`).
    pub brk_start: u64,
    /// `huge=` of the machine's /dev/shm mount (this machine: none given, so never).
    pub dev_shm_huge: TmpfsHuge,
    /// CONFIG_HZ: khugepaged sleeps in jiffies (`daemons`). 250 on this machine kind.
    pub hz: u32,
    /// The run's memcg limit and swap device (`--memory-max`, `--swap`); default none.
    pub pressure: thp_abi::Pressure,
    /// hugetlb pools set at boot (a replay of a program that maps MAP_HUGETLB needs one); a
    /// workload's `hugetlb_pool` statements are set after these. Default none.
    pub hugetlb_pools: Vec<workload::HugetlbPool>,
    /// The base page size and what follows from it (`--page-size`, docs/page-sizes.md). The
    /// model's fault path runs 4 KiB pages only so far: `experiment::resolve::page_size` refuses
    /// 16 KiB and 64 KiB, and [`MachineConfig::boot_params`] checks it.
    pub geometry: mm_types::PageGeometry,
}

impl MachineConfig {
    /// The kernel's boot parameters of this machine (memory, `vm.min_free_kbytes`, the mmap
    /// base, the heap's start, /dev/shm's `huge=`).
    pub fn boot_params(&self) -> BootParams {
        assert_eq!(self.geometry, mm_types::PageGeometry::X86_4K, "the model's fault path runs 4 KiB base pages only");
        BootParams {
            mem_bytes: self.mem_bytes,
            min_free_kbytes: self.min_free_kbytes,
            mmap_base: self.mmap_base,
            brk_start: self.brk_start,
            dev_shm_huge: sb_huge(self.dev_shm_huge),
            pressure: self.pressure,
        }
    }
}

impl Default for MachineConfig {
    fn default() -> Self {
        MachineConfig {
            mem_bytes: 24 << 30,
            min_free_kbytes: 67584,
            mmap_base: 0x7dff_fffc_5000,
            brk_start: 0x5555_5557_9000,
            dev_shm_huge: TmpfsHuge::Never,
            hz: daemons::DEFAULT_HZ,
            pressure: thp_abi::Pressure::default(),
            hugetlb_pools: Vec::new(),
            geometry: mm_types::PageGeometry::X86_4K,
        }
    }
}

fn sb_huge(h: TmpfsHuge) -> SbHuge {
    match h {
        TmpfsHuge::Never => SbHuge::Never,
        TmpfsHuge::Always => SbHuge::Always,
        TmpfsHuge::WithinSize => SbHuge::WithinSize,
        TmpfsHuge::Advise => SbHuge::Advise,
    }
}

/// Why a simulation stopped early: the workload did something the kernel would kill it for,
/// or that leaves it nothing to run on.
///
/// Its place is `SOURCE:LINE` in a workload; in a recording, the record (counted from 1 after
/// the header, in file order as `thplab trace show` prints them) and, where the reader knows it,
/// the byte offset of that record: `py.trace: record 1234 at byte 56789`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", self.place())]
pub struct SimError {
    pub source_name: String,
    pub line: usize,
    pub message: String,
    /// In a recording: the record number (from 1) and, once known, its byte offset.
    pub record: Option<(u64, Option<u64>)>,
}

impl SimError {
    /// `SOURCE:LINE`, or `SOURCE: record N at byte B` in a recording.
    pub fn place(&self) -> String {
        match self.record {
            Some((n, Some(b))) => format!("{}: record {n} at byte {b}", self.source_name),
            Some((n, None)) => format!("{}: record {n}", self.source_name),
            None => format!("{}:{}", self.source_name, self.line),
        }
    }
}

/// What the engine reports while it runs (the CLI draws progress from these).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimEvent {
    /// Accesses done so far of the total the workload will make.
    Progress { accesses_done: u64, accesses_total: u64 },
}

/// Knobs of one run that are not the machine's.
#[derive(Default)]
pub struct RunOptions<'a> {
    /// Run `Kernel::check_invariants` after every operation (tests and torture).
    pub check_invariants: bool,
    /// Called with progress events.
    pub on_event: Option<&'a mut dyn FnMut(SimEvent)>,
    /// Walk every touch one `Kernel::access` at a time, never with the batched
    /// `Kernel::access_run` (the reference that the batched walk is tested against).
    pub per_access: bool,
    /// `--explain`: keep the decisions of the faults in `[start, end)` (the result's `explain`).
    pub explain: Option<(u64, u64)>,
    /// What the run is priced and observed with: the TLB model, the `[fault]` and `[host]`
    /// costs, the sampling interval (`--sample MS`: the result's `timeline`).
    pub profile: Profile,
}

/// Run `workload` under `settings` on `machine`.
pub fn run(workload: &Workload, settings: &ThpSettings, machine: &MachineConfig) -> Result<RunResult, SimError> {
    run_with(workload, settings, machine, &mut RunOptions::default()).map(|(r, _)| r)
}

/// Run and also return the kernel at the end, for tests that look inside.
pub fn run_with(
    workload: &Workload,
    settings: &ThpSettings,
    machine: &MachineConfig,
    opts: &mut RunOptions,
) -> Result<(RunResult, Kernel), SimError> {
    let mut k = Kernel::boot(&machine.boot_params(), settings);
    views::start_explaining(&mut k, opts.explain);
    hugetlb::set_pools(&mut k, &machine.hugetlb_pools).and_then(|_| hugetlb::set_pools(&mut k, &workload.hugetlb_pools)).map_err(|(line, message)| SimError { source_name: workload.source.clone(), line, message, record: None })?;
    let hugetlb_start = k.hugetlb_meminfo();
    let main = k.current_mm();
    let mut sim = Sim::new(workload, k, main);
    let p = &opts.profile;
    if let Some(c) = &p.costs {
        sim.m.set_costs(c.clone());
        if let Some((host, free_areas)) = &p.host {
            sim.m.set_host(host, free_areas.as_ref());
        }
        if p.latency {
            sim.m.set_latency();
        }
    }
    sim.m.set_hz(machine.hz);
    if let Some(ms) = p.sample_ms {
        sim.m.set_sampling(ms.saturating_mul(1_000_000));
    }
    let has_access = workload.ops.iter().any(|op| matches!(op.kind, OpKind::Access(_)));
    if has_access || p.tlb.is_some() {
        let (cpu, paging) = p.tlb_or_default();
        sim.m.kernel_mut().set_tlb_observer(true);
        let host = host::for_run(p.vm_host.as_ref(), settings);
        let paging = host.as_ref().map_or(paging, |c| host::paging_for(c, paging));
        sim.tlb = Some(access::TlbRun::new(cpu, paging, workload.regions.len(), p.order0_scatter));
        sim.tlb.as_mut().unwrap().host = host.map(host::Host::new);
    }
    sim.run_ops(opts)?;
    let regions = sim.regions.clone();
    let calls = std::mem::take(&mut sim.calls);
    let tlb_run = sim.tlb.take();
    let io = sim.io.take();
    let mms = std::mem::take(&mut sim.mms);
    let accesses_on_clock = tlb_run.as_ref().map_or(0, |t| t.on_clock_ns());
    let time = sim.m.time().map(|mut t| {
        t.elapsed_ns = sim.m.clock_ns();
        t.phases = std::mem::take(&mut sim.phases);
        t
    });
    let timeline = opts.profile.sample_ms.map(|ms| uapi::Timeline { interval_ms: ms, samples: sim.m.timeline().to_vec() });
    let tasks = std::mem::take(&mut sim.tasks);
    let repeats = std::mem::take(&mut sim.repeats);
    let mut k = sim.m.into_kernel();
    let ranges: Vec<(u64, u64)> = regions.iter().flatten().map(|&(s, l)| (s, s + l)).collect();
    let processes = proc_results(workload, &mut k, &mms, &tasks, &ranges);
    k.switch_mm(mms[0].expect("main"));
    let mut result = report(workload, settings, &k, &regions, calls);
    if workload.uses_hugetlb() {
        hugetlb::meminfo_into(&mut result, &k, &hugetlb_start);
    }
    if workload.forks() {
        // main's own faults, as for every process (with threads, its mm's count is theirs too).
        result.process.minflt = tasks[0].minflt;
    }
    result.processes = processes;
    result.vm_host = tlb_run.as_ref().and_then(|t| t.host.as_ref()).map(host::Host::report);
    result.accesses = tlb_run.filter(|_| has_access).map(|t| t.report(workload));
    result.io = io;
    result.time = time.map(|mut t| {
        // The accesses' time, estimated over the run's whole stream: the clock already holds
        // it (`Sim::charge_accesses`), but for what a last estimate below an earlier one left.
        time::add_accesses(&mut t, &result, time::AccessPrice::Whole);
        t.elapsed_ns += (t.accesses_ns.round() as u64).saturating_sub(accesses_on_clock);
        let ends: Vec<u64> = t.phases.iter().skip(1).map(|p| p.start_ns).chain([t.elapsed_ns]).collect();
        for (p, end) in t.phases.iter_mut().zip(ends) {
            p.ns = end - p.start_ns;
        }
        t
    });
    result.timeline = timeline;
    result.repeats = repeats;
    Ok((result, k))
}

/// A workload that forks: each declared process's result (none otherwise).
fn proc_results(workload: &Workload, k: &mut Kernel, mms: &[Option<mm::MmId>], tasks: &[TaskCounts], ranges: &[(u64, u64)]) -> Vec<uapi::result::ProcResult> {
    if !workload.forks() {
        return Vec::new();
    }
    workload
        .procs
        .iter()
        .zip(mms)
        .zip(tasks)
        .map(|((p, mm), t)| {
            let shares = p.shares_mm().then(|| workload.proc(p.parent.expect("a thread or vfork child has a parent")).name.clone());
            proc_result(k, &p.name, mm.expect("every declared process is forked"), t, shares, ranges)
        })
        .collect()
}

struct Sim<'a> {
    w: &'a Workload,
    /// The machine every statement runs on, as steps of the statement's process.
    m: Machine,
    /// (start, len) of each region once mapped.
    regions: Vec<Option<(u64, u64)>>,
    /// The model's mount of each declared tmpfs.
    mounts: Vec<mm::shmem::SbId>,
    /// The model's inode of each declared file, once created.
    inodes: Vec<Option<mm::shmem::InodeId>>,
    calls: Vec<CallResult>,
    done: u64,
    total: u64,
    /// The TLB model, when the run has one.
    tlb: Option<access::TlbRun>,
    /// What the `read_direct` statements pinned.
    io: Option<uapi::result::IoResult>,
    /// The mm of each workload process, once forked (a thread's or vfork child's is its
    /// parent's).
    mms: Vec<Option<mm::MmId>>,
    /// What each task of the workload did itself.
    tasks: Vec<TaskCounts>,
    /// The mm of the statement being run.
    mm: mm::MmId,
    /// The `phase` statements so far, with the clock when each started.
    phases: Vec<uapi::result::PhaseTime>,
    /// The `repeat DURATION` blocks run so far and their iterations.
    repeats: Vec<uapi::result::RepeatRun>,
}

impl<'a> Sim<'a> {
    /// The workload's state before its first statement: nothing mapped, main running in `main`.
    fn new(workload: &'a Workload, k: Kernel, main: mm::MmId) -> Sim<'a> {
        let mut mms = vec![None; workload.procs.len()];
        mms[0] = Some(main);
        Sim {
            w: workload,
            m: Machine::new(k),
            regions: vec![None; workload.regions.len()],
            mounts: vec![0; workload.mounts.len()],
            inodes: vec![None; workload.files.len()],
            calls: Vec::new(),
            done: 0,
            total: workload.touched_pages(),
            tlb: None,
            io: None,
            mms,
            tasks: vec![TaskCounts::default(); workload.procs.len()],
            mm: main,
            phases: Vec::new(),
            repeats: Vec::new(),
        }
    }

    /// Every statement in order, a `repeat DURATION` block as one.
    fn run_ops(&mut self, opts: &mut RunOptions) -> Result<(), SimError> {
        let w = self.w;
        let ops = &w.ops;
        let mut i = 0;
        while i < ops.len() {
            let op = &ops[i];
            if let OpKind::RepeatFor { ns, body } = op.kind {
                self.repeat_for(op.line, ns, &ops[i + 1..i + 1 + body], opts)?;
                i += 1 + body;
                continue;
            }
            self.run_op(op, opts)?;
            i += 1;
        }
        Ok(())
    }

    fn err(&self, line: usize, message: String) -> SimError {
        SimError { source_name: self.w.source.clone(), line, message, record: None }
    }

    /// Run one step in the statement's process.
    fn step(&mut self, step: Step) -> Outcome {
        self.m.step(self.mm, step)
    }

    fn region(&self, line: usize, id: workload::RegionId) -> Result<(u64, u64), SimError> {
        let name = &self.w.region(id).name;
        self.regions[id.0 as usize]
            .ok_or_else(|| self.err(line, format!("region '{name}' is used before it is mapped")))
    }

    fn call(&mut self, line: usize, call: String, r: Result<(), Errno>) {
        let ret = match r {
            Ok(()) => "0".into(),
            Err(e) => e.name().into(),
        };
        self.calls.push(CallResult { line, call, ret });
    }

    fn inode(&self, line: usize, f: workload::FileId) -> Result<mm::shmem::InodeId, SimError> {
        self.inodes[f.0 as usize].ok_or_else(|| self.err(line, format!("file '{}' is used before it is created", self.w.file(f).name)))
    }

    /// A result the model cannot produce because it does not model that path.
    fn not_modelled(&self, line: usize, r: Result<(), Errno>, what: &str) -> Result<Result<(), Errno>, SimError> {
        match r {
            Err(Errno::ENOSYS) => Err(self.err(line, format!("{what} is not modelled yet"))),
            other => Ok(other),
        }
    }

    /// One statement in its process, with its task's fault count and the invariant check.
    fn run_op(&mut self, op: &workload::Op, opts: &mut RunOptions) -> Result<(), SimError> {
        self.mm = self.mms[op.proc.0 as usize].expect("the parser lets only forked processes run");
        self.m.switch_mm(self.mm);
        let before = TaskCounts::of(self.m.mm_stats(self.mm));
        self.op(op, opts)?;
        // The kernel counts faults per task (mm/memory.c: mm_account_fault bumps
        // current->min_flt): the op's faults are its task's, whichever tasks share the mm.
        self.tasks[op.proc.0 as usize].add(&before, &TaskCounts::of(self.m.mm_stats(self.mm)));
        if opts.check_invariants {
            self.m.check(None).map_err(|m| self.err(op.line, format!("model invariant broken: {m}")))?;
        }
        Ok(())
    }

    /// `repeat DURATION { body }`: the body again and again while the simulated clock is
    /// before the start + `ns` when an iteration would start. The body's calls are reported
    /// once, as the last iteration made them (the live executor keeps one result per
    /// statement, the last).
    fn repeat_for(&mut self, line: usize, ns: u64, body: &[workload::Op], opts: &mut RunOptions) -> Result<(), SimError> {
        let start = self.m.clock_ns();
        let end = start.saturating_add(ns);
        let first_call = self.calls.len();
        let mut last_calls = first_call;
        let mut iterations = 0u64;
        while self.m.clock_ns() < end {
            if iterations == workload::MAX_REPEAT_ITERATIONS {
                return Err(self.err(line, format!(
                    "repeat ran its block {iterations} times and the simulated clock is at {} of {} ns: its sleeps and paced touches are too short for the duration (the model runs at most {} iterations); lengthen them or repeat a count",
                    self.m.clock_ns() - start,
                    ns,
                    workload::MAX_REPEAT_ITERATIONS
                )));
            }
            let before = self.m.clock_ns();
            last_calls = self.calls.len();
            for op in body {
                self.run_op(op, opts)?;
            }
            iterations += 1;
            if self.m.clock_ns() == before {
                return Err(self.err(line, "an iteration of this repeat DURATION block took no simulated time (its sleeps are 0 and its paced touches touched no page), so it would never end; give it a sleep or a paced touch that takes time".into()));
            }
        }
        self.calls.drain(first_call..last_calls);
        self.repeats.push(uapi::result::RepeatRun { line, duration_ns: ns, iterations });
        Ok(())
    }

    /// One statement: the calls of its group (shmem files, mmap, a call over a range, brk,
    /// tasks, direct I/O, a touch) in the statement's process.
    fn op(&mut self, op: &workload::Op, opts: &mut RunOptions) -> Result<(), SimError> {
        let line = op.line;
        // The call's name in the results, as the live executor names it.
        let call = self.w.call_name(&op.kind);
        match &op.kind {
            OpKind::Mount(_) | OpKind::Create(_) | OpKind::Ftruncate { .. } | OpKind::Fallocate { .. } | OpKind::Write { .. } => self.file_op(line, call, &op.kind)?,
            OpKind::Mmap { region, len, prot, placement, backing } => self.mmap(line, call, *region, *len, *prot, *placement, *backing)?,
            OpKind::Munmap(_) | OpKind::Mprotect(..) | OpKind::Madvise(..) | OpKind::Mlock(_) | OpKind::Munlock(_) => self.range_op(line, call, &op.kind)?,
            OpKind::Brk { delta } => self.brk(line, call, *delta),
            OpKind::Sleep { ns } => {
                self.step(Step::Sleep { ns: *ns });
            }
            OpKind::Fragment { unmovable_pct } => {
                self.step(Step::Fragment { unmovable_pct: *unmovable_pct });
            }
            OpKind::DropSlab => {
                self.step(Step::DropSlab);
                self.call(line, call, Ok(()));
            }
            OpKind::Prctl(form) => {
                self.step(Step::Prctl(match form {
                    ThpDisable::Completely => MmThpDisable::Completely,
                    ThpDisable::ExceptAdvised => MmThpDisable::ExceptAdvised,
                    ThpDisable::Clear => MmThpDisable::Clear,
                }));
                self.call(line, call, Ok(()));
            }
            OpKind::Access(a) => self.access_stream(line, a, op.proc.0 as usize)?,
            OpKind::Fork(_) | OpKind::Thread(_) | OpKind::Vfork(_) | OpKind::Exit | OpKind::Wait(_) => self.task_op(op, call)?,
            OpKind::Phase(name) => self.phases.push(uapi::result::PhaseTime { name: name.clone(), start_ns: self.m.clock_ns(), ns: 0 }),
            OpKind::RepeatFor { .. } => unreachable!("run_with runs a repeat DURATION block itself"),
            OpKind::ReadDirect { range, block } => self.read_direct(line, call, range, *block)?,
            OpKind::Touch(t) => self.touch(line, t, opts)?,
        }
        Ok(())
    }

    /// A shmem file's statement: `mount`, `create` (memfd, POSIX shm, tmpfs), `ftruncate`,
    /// `fallocate` (and its punch-hole and keep-size modes), `write`.
    fn file_op(&mut self, line: usize, call: String, kind: &OpKind) -> Result<(), SimError> {
        match kind {
            OpKind::Mount(m) => {
                let huge = sb_huge(self.w.mount(*m).huge);
                self.mounts[m.0 as usize] = self.step(Step::ShmemMount(huge)).mounted();
                self.call(line, call, Ok(()));
            }
            OpKind::Create(f) => {
                let (sb, linked) = match self.w.file(*f).kind {
                    FileKind::HugetlbMemfd { page } => {
                        self.inodes[f.0 as usize] = Some(self.step(Step::HugetlbFileSetup(hugetlb::huge_size(page))).created());
                        self.call(line, call, Ok(()));
                        return Ok(());
                    }
                    FileKind::Memfd => (SHM_MNT, false),
                    FileKind::PosixShm { mount } => (mount.map_or(DEV_SHM, |m| self.mounts[m.0 as usize]), true),
                    FileKind::Tmpfs { mount } => (self.mounts[mount.0 as usize], true),
                };
                self.inodes[f.0 as usize] = Some(self.step(Step::ShmemCreate { sb, linked }).created());
                self.call(line, call, Ok(()));
            }
            OpKind::Ftruncate { file, size } => {
                let ino = self.inode(line, *file)?;
                let r = match self.w.file(*file).kind {
                    FileKind::HugetlbMemfd { .. } => self.step(Step::HugetlbTruncate { ino, size: *size }).ret(),
                    _ => self.step(Step::Ftruncate { ino, size: *size }).ret(),
                };
                self.call(line, call, r);
            }
            OpKind::Fallocate { file, .. } | OpKind::Write { file, .. } if matches!(self.w.file(*file).kind, FileKind::HugetlbMemfd { .. }) => {
                return Err(self.err(line, "fallocate and write of a hugetlb memfd are not modelled yet (map it and touch it)".into()));
            }
            OpKind::Fallocate { file, offset, len, mode } => {
                let (ino, offset, len) = (self.inode(line, *file)?, *offset, *len);
                let step = match mode {
                    FallocMode::Allocate => Step::Fallocate { ino, offset, len, keep_size: false },
                    FallocMode::KeepSize => Step::Fallocate { ino, offset, len, keep_size: true },
                    FallocMode::PunchHole => Step::PunchHole { ino, offset, len },
                };
                let r = self.step(step).ret();
                self.call(line, call, r);
            }
            OpKind::Write { file, offset, len, chunk } => {
                let ino = self.inode(line, *file)?;
                let r = workload::write_calls(*offset, *len, *chunk).try_for_each(|(offset, len)| self.step(Step::ShmemWrite { ino, offset, len }).ret());
                if r == Err(Errno::ENOMEM) {
                    return Err(self.err(line, format!("out of memory: {}", oom_report(&self.m))));
                }
                self.call(line, call, r);
            }
            _ => unreachable!("op sends only file statements here"),
        }
        Ok(())
    }

    /// `mmap`: the region mapped where the statement places it, with its backing.
    #[allow(clippy::too_many_arguments)]
    fn mmap(&mut self, line: usize, call: String, region: workload::RegionId, len: u64, prot: workload::Prot, placement: Placement, backing: Backing) -> Result<(), SimError> {
        let placement = match placement {
            Placement::Kernel => MmapPlacement::Kernel,
            Placement::Aligned { align, offset } => MmapPlacement::Aligned { align, offset },
            Placement::Fixed(a) => MmapPlacement::FixedNoReplace(a),
        };
        let backing = match backing {
            Backing::Hugetlb { page, shared, noreserve } => MapBacking::Hugetlb(hugetlb::anon_map(page, shared, noreserve)),
            Backing::SharedFile { file, pgoff } if matches!(self.w.file(file).kind, FileKind::HugetlbMemfd { .. }) => {
                let FileKind::HugetlbMemfd { page } = self.w.file(file).kind else { unreachable!() };
                let m = mm::hugetlb::HugetlbMap { file: Some((self.inode(line, file)?, pgoff)), ..hugetlb::anon_map(page, true, false) };
                MapBacking::Hugetlb(m)
            }
            Backing::PrivateFile { file, .. } if matches!(self.w.file(file).kind, FileKind::HugetlbMemfd { .. }) => {
                return Err(self.err(line, "MAP_PRIVATE of a hugetlb memfd is not modelled yet (map it shared)".into()));
            }
            Backing::PrivateAnon => MapBacking::PrivateAnon,
            Backing::SharedAnon => MapBacking::SharedAnon,
            Backing::SharedFile { file, pgoff } => MapBacking::Shmem { ino: self.inode(line, file)?, pgoff: pgoff / mm_types::PAGE_SIZE },
            Backing::PrivateFile { file, pgoff } => MapBacking::ShmemPrivate { ino: self.inode(line, file)?, pgoff: pgoff / mm_types::PAGE_SIZE },
        };
        let addr = self
            .step(Step::Mmap { len, prot: vm_prot(prot), placement, backing })
            .mapped()
            .map_err(|e| self.err(line, format!("mmap of {len} bytes failed with {}", e.name())))?;
        self.regions[region.0 as usize] = Some((addr, len));
        self.call(line, call, Ok(()));
        Ok(())
    }

    /// A call over a region's range (`munmap`, `mprotect`, `madvise`, `mlock`, `munlock`): one
    /// call per piece of the range, the first error returned.
    fn range_op(&mut self, line: usize, call: String, kind: &OpKind) -> Result<(), SimError> {
        let range = match kind {
            OpKind::Munmap(r) | OpKind::Mprotect(r, _) | OpKind::Madvise(r, _) | OpKind::Mlock(r) | OpKind::Munlock(r) => r,
            _ => unreachable!("op sends only range statements here"),
        };
        let (start, len) = self.region(line, range.region)?;
        let mut ret = Ok(());
        for (off, l) in range.pieces(len) {
            let (start, len) = (start + off, l);
            let step = match kind {
                OpKind::Munmap(_) => Step::Munmap { start, len },
                OpKind::Mprotect(_, prot) => Step::Mprotect { start, len, prot: vm_prot(*prot) },
                OpKind::Madvise(_, advice) => Step::Madvise { start, len, advice: madvise_of(*advice) },
                OpKind::Mlock(_) => Step::Mlock { start, len, flags: 0 },
                _ => Step::Munlock { start, len },
            };
            ret = ret.and(self.step(step).ret());
        }
        if matches!(kind, OpKind::Madvise(..)) {
            ret = self.not_modelled(line, ret, "MADV_COLLAPSE of shared memory (collapse_file)")?;
        }
        self.call(line, call, ret);
        Ok(())
    }

    /// `brk +N`/`brk -N`: the break moved, the heap region following it; the call returns the
    /// new break as brk(2) does.
    fn brk(&mut self, line: usize, call: String, delta: i64) {
        let cur = self.m.brk_value();
        let want = cur.checked_add_signed(delta).unwrap_or(0);
        let got = self.step(Step::Brk { to: want }).brk();
        let heap = self.w.region_by_name(HEAP).expect("parser declares heap");
        self.regions[heap.0 as usize] = Some((self.m.start_brk(), got - self.m.start_brk()));
        self.calls.push(CallResult { line, call, ret: format!("{got:#x}") });
    }

    /// A task's statement: `fork` (a copy of the mm), `thread` and `vfork` (the same mm),
    /// `exit`, `wait`.
    fn task_op(&mut self, op: &workload::Op, call: String) -> Result<(), SimError> {
        let line = op.line;
        match &op.kind {
            OpKind::Fork(child) => match self.step(Step::Fork).forked() {
                Ok((mm, _)) => {
                    self.mms[child.0 as usize] = Some(mm);
                    self.call(line, call, Ok(()));
                }
                Err(_) => return Err(self.err(line, format!("fork failed: out of memory for the child's page tables: {}", oom_report(&self.m)))),
            },
            OpKind::Thread(child) | OpKind::Vfork(child) => {
                // kernel/fork.c: copy_mm with CLONE_VM takes a reference to the parent's mm
                // (mmget) instead of dup_mm: no copy_page_range, nothing write-protected. The
                // task runs its statements in the same MmId.
                self.mms[child.0 as usize] = Some(self.mm);
                self.call(line, call, Ok(()));
            }
            OpKind::Exit => {
                let p = op.proc.0 as usize;
                self.tasks[p].exited = true;
                // A task that shares its mm drops a reference only (kernel/exit.c: exit_mm →
                // mmput; __mmput and exit_mmap run for the last user): nothing is torn down.
                if !self.w.procs[p].shares_mm() {
                    self.step(Step::Exit);
                }
            }
            OpKind::Wait(_) => self.call(line, call, Ok(())),
            _ => unreachable!("op sends only task statements here"),
        }
        Ok(())
    }

    /// `read_direct`: O_DIRECT reads into a region, each pinning its buffer
    /// (`pin_user_pages_fast`), counted in the result's `io`.
    fn read_direct(&mut self, line: usize, call: String, range: &workload::Range, block: u64) -> Result<(), SimError> {
        let (start, len) = self.region(line, range.region)?;
        let rlen = range.len_in(len);
        if range.offset + rlen > len {
            let name = &self.w.region(range.region).name;
            return Err(self.err(line, format!("read_direct runs past the end of region '{name}' ({len} bytes now)")));
        }
        self.io.get_or_insert_with(Default::default);
        let mut ret = Ok(());
        for (off, n) in workload::read_direct_calls(start + range.offset, rlen, block) {
            match self.step(Step::PinUserPages { start: off, len: n }).pinned() {
                Ok(p) => {
                    let io = self.io.as_mut().expect("set above");
                    io.direct_reads += 1;
                    io.bytes += n;
                    io.pinned_folios += p.folios;
                    io.pinned_pte_pages += p.pte_pages;
                    io.pinned_pmd_pages += p.pmd_pages;
                    io.pin_faults += p.faults;
                }
                Err(Errno::ENOMEM) => {
                    return Err(self.err(line, format!("out of memory: {}", oom_report(&self.m))));
                }
                Err(e) => {
                    ret = Err(e);
                    break;
                }
            }
        }
        self.call(line, call, ret);
        Ok(())
    }

    /// `touch`: the pages of a range in the plan's order, at once or paced.
    fn touch(&mut self, line: usize, t: &workload::Touch, opts: &mut RunOptions) -> Result<(), SimError> {
        let (start, len) = self.region(line, t.range.region)?;
        let t = t.resolved(len);
        if t.range.offset + t.range.len > len {
            let name = &self.w.region(t.range.region).name;
            return Err(self.err(line, format!("touch runs past the end of region '{name}' ({len} bytes now)")));
        }
        let plan = TouchPlan::new(&t, start);
        let Some(pace) = t.pace else {
            return self.touch_pages(line, &plan, 0, plan.len(), t.write, opts);
        };
        // Paced: chunk after chunk, each followed by a sleep up to the time the next
        // may start (with a profile the chunk's work has moved the clock already; a
        // chunk that ends late is followed by the next at once). khugepaged wakes in
        // those sleeps, as it does during a slow fill on the machine.
        let pacing = workload::Pacing::new(pace, plan.len());
        let t0 = self.m.clock_ns();
        let mut i = 0;
        while i < plan.len() {
            let end = (i + pacing.chunk_pages()).min(plan.len());
            self.touch_pages(line, &plan, i, end, t.write, opts)?;
            let due = t0.saturating_add(pacing.offset_ns(end));
            if self.m.clock_ns() < due {
                let ns = due - self.m.clock_ns();
                self.step(Step::Sleep { ns });
            }
            i = end;
        }
        Ok(())
    }

    /// Accesses `from..to` of a touch's plan.
    fn touch_pages(&mut self, line: usize, plan: &TouchPlan, from: u64, to: u64, write: bool, opts: &mut RunOptions) -> Result<(), SimError> {
        if let Some((first, stride)) = plan.ascending().filter(|_| !opts.per_access && opts.explain.is_none()) {
            // In address order: the model's batched walk, in steps for progress.
            let mut i = from;
            while i < to {
                let step = (to - i).min(0x10000);
                let (done, outcome) = self.step(Step::AccessRun { first: first + i * stride, n: step, stride, write }).run();
                i += done;
                if done < step || !matches!(outcome, Access::Hit | Access::Fault) {
                    let addr = first + (i - 1) * stride;
                    return Err(self.access_error(line, addr, write, outcome));
                }
                self.progress(opts, step);
            }
            return Ok(());
        }
        for i in from..to {
            let addr = plan.get(i);
            let outcome = self.step(Step::Access { addr, write }).access();
            if !matches!(outcome, Access::Hit | Access::Fault) {
                return Err(self.access_error(line, addr, write, outcome));
            }
            if (i - from) & 0xffff == 0xffff {
                self.progress(opts, 0x10000);
            }
        }
        self.progress(opts, (to - from) & 0xffff);
        Ok(())
    }

    /// The error of an access that got neither a hit nor a fault.
    fn access_error(&self, line: usize, addr: u64, write: bool, outcome: Access) -> SimError {
        match outcome {
            Access::Oom => self.err(line, format!("out of memory at {addr:#x}: {}", oom_report(&self.m))),
            Access::Sigbus if hugetlb::in_hugetlb(&self.m, addr) => self.err(
                line,
                format!("access at {addr:#x} found no hugetlb page: the pool is exhausted (or the owner of the mapping took this child's page at a failed copy-on-write), the process would get SIGBUS; give a larger hugetlb_pool"),
            ),
            Access::Sigbus => self.err(line, format!("access at {addr:#x} is beyond the end of the mapped file: the process would get SIGBUS (ftruncate it first)")),
            // A workload cannot register a userfaultfd; its faults never go to one.
            Access::Userfault => self.err(line, format!("access at {addr:#x} went to a userfaultfd, which no workload registers")),
            Access::Segv | Access::Hit | Access::Fault => {
                let kind = if write { "write" } else { "read" };
                self.err(line, format!("{kind} at {addr:#x} would get SIGSEGV: no mapping there or it forbids a {kind}"))
            }
        }
    }

    fn progress(&mut self, opts: &mut RunOptions, n: u64) {
        self.done += n;
        if let Some(f) = opts.on_event.as_mut() {
            f(SimEvent::Progress { accesses_done: self.done, accesses_total: self.total });
        }
    }
}

fn vm_prot(p: Prot) -> u32 {
    prot_to_vm(p.read, p.write, p.exec)
}

/// The language's advice as the model's `madvise` takes it.
fn madvise_of(advice: Advice) -> Madvise {
    match advice {
        Advice::Hugepage => Madvise::Hugepage,
        Advice::Nohugepage => Madvise::Nohugepage,
        Advice::Dontneed => Madvise::Dontneed,
        Advice::Collapse => Madvise::Collapse,
        Advice::Free => Madvise::Free,
        Advice::PopulateRead => Madvise::PopulateRead,
        Advice::PopulateWrite => Madvise::PopulateWrite,
        Advice::Dontfork => Madvise::Dontfork,
        Advice::Dofork => Madvise::Dofork,
        Advice::Wipeonfork => Madvise::Wipeonfork,
        Advice::Keeponfork => Madvise::Keeponfork,
        Advice::Remove => Madvise::Remove,
    }
}

/// vmstat and per-size stats from model counters (the stats files of the settings' kernel
/// version), and the version and policy when they are not 6.18's.
fn counters_into(r: &mut RunResult, c: &thp_abi::Counters, settings: &ThpSettings) {
    if settings.kernel != thp_abi::KernelVersion::V6_18 {
        r.kernel = Some(settings.kernel.to_string());
    }
    r.policy = settings.policy.map(|p| p.to_string());
    for e in VmEvent::ALL {
        r.vmstat.insert((*e).into(), c.vm(*e));
    }
    for order in sysfs_orders() {
        let stats: BTreeMap<MthpStatKey, i64> =
            MthpStat::ALL.iter().filter(|s| s.exists_in(order, settings.kernel)).map(|s| ((*s).into(), c.mthp(order, *s))).collect();
        r.mthp.insert(SizeDir::of(order), stats);
    }
}

/// Under memory pressure (a memcg limit or swap), what a result carries: reclaim's and swap's
/// /proc/vmstat lines (`thp_abi::pressure::RESULT_RECLAIM`), the major faults and the swap
/// device's pages and pages in use. `None` without pressure.
pub(crate) struct PressureLines {
    reclaim: Vec<(thp_abi::ReclaimEvent, u64)>,
    majflt: u64,
    swap: Option<(u64, u64)>,
}

/// The machine's [`PressureLines`], its major faults `majflt`; `None` without pressure.
pub(crate) fn pressure_lines(k: &Kernel, majflt: u64) -> Option<PressureLines> {
    if !k.under_pressure() {
        return None;
    }
    let reclaim = thp_abi::pressure::RESULT_RECLAIM.iter().map(|&e| (e, k.reclaim_event(e).expect("the model keeps every RESULT_RECLAIM line"))).collect();
    Some(PressureLines { reclaim, majflt, swap: k.swap_pages() })
}

/// Under memory pressure: reclaim's and swap's /proc/vmstat lines (`pswpin`, `pswpout`,
/// `pgmajfault`, `pgscan_anon`, `pgsteal_anon`, `pgactivate`, `pgdeactivate`, `oom_kill`), the
/// major faults, and SwapTotal/SwapFree in kB. Nothing without.
fn pressure_into(r: &mut RunResult, p: Option<PressureLines>) {
    let Some(p) = p else { return };
    for (e, v) in p.reclaim {
        r.vmstat.insert(e.name().into(), v as i64);
    }
    r.process.majflt = Some(p.majflt);
    if let Some((total, used)) = p.swap {
        r.meminfo.insert(thp_abi::Meminfo::SwapTotal.into(), (total * 4) as i64);
        r.meminfo.insert(thp_abi::Meminfo::SwapFree.into(), ((total - used) * 4) as i64);
    }
}

/// Process figures and the census from one or more census walks (several processes).
fn census_into(r: &mut RunResult, reports: &[mm::debug::CensusReport]) {
    let mut total = thp_abi::Census::default();
    for c in reports {
        r.process.rss_bytes += c.rss_bytes;
        r.process.anon_huge_bytes += c.anon_huge_bytes;
        *r.process.bloat_bytes.get_or_insert(0) += c.bloat_bytes;
        total.add(&c.census);
    }
    r.folios = total.folio_counts();
    r.census = total;
}

/// The `fallbacks` section from per-order reason counts (summed over processes).
fn fallbacks_into(r: &mut RunResult, rows: &[[[u64; FallbackReason::ALL.len()]; 10]]) {
    for o in 0..=PMD_ORDER {
        let mut row = [0u64; FallbackReason::ALL.len()];
        for f in rows {
            for (i, n) in f[o as usize].iter().enumerate() {
                row[i] += n;
            }
        }
        let reasons: BTreeMap<thp_abi::FallbackKey, u64> = FallbackReason::ALL
            .iter()
            .filter(|reason| row[**reason as usize] > 0)
            .map(|reason| ((*reason).into(), row[*reason as usize]))
            .collect();
        if !reasons.is_empty() {
            r.fallbacks.insert(SizeDir::of(Order(o)), reasons);
        }
    }
}

/// The counters one task of a workload moved itself (several tasks may share one mm), and
/// whether it exited.
#[derive(Clone, Copy, Debug, Default)]
struct TaskCounts {
    minflt: u64,
    cow_copied: u64,
    cow_reused: u64,
    exited: bool,
}

impl TaskCounts {
    fn of(s: &mm::model::stats::ModelStats) -> TaskCounts {
        TaskCounts { minflt: s.minflt, cow_copied: s.cow_copied, cow_reused: s.cow_reused, exited: false }
    }

    /// Add what moved from `before` to `after` (an op of this task).
    fn add(&mut self, before: &TaskCounts, after: &TaskCounts) {
        self.minflt += after.minflt - before.minflt;
        self.cow_copied += after.cow_copied - before.cow_copied;
        self.cow_reused += after.cow_reused - before.cow_reused;
    }
}

/// One task's figures: the census of its mm at the end (none once exited) and its own counters.
fn proc_result(k: &mut Kernel, name: &str, mm: mm::MmId, t: &TaskCounts, shares_mm_with: Option<String>, ranges: &[(u64, u64)]) -> uapi::result::ProcResult {
    k.switch_mm(mm);
    let mut one = RunResult::default();
    let exited = t.exited || k.mm_exited(mm);
    if !exited {
        census_into(&mut one, &[k.census(ranges)]);
    }
    one.process.minflt = t.minflt;
    uapi::result::ProcResult {
        name: name.to_string(),
        exited,
        process: one.process,
        census: one.census,
        cow_copied: Some(t.cow_copied),
        cow_reused: Some(t.cow_reused),
        shares_mm_with,
    }
}

/// Build the result the CLI prints.
fn report(workload: &Workload, settings: &ThpSettings, k: &Kernel, regions: &[Option<(u64, u64)>], calls: Vec<CallResult>) -> RunResult {
    let mut r = RunResult::new("sim", &workload.source);
    r.settings = settings.knob_map();
    counters_into(&mut r, &k.counters, settings);
    r.kernel_warnings = k.kernel_warnings().to_vec();
    let ranges: Vec<(u64, u64)> = regions.iter().flatten().map(|&(s, l)| (s, s + l)).collect();
    census_into(&mut r, &[k.census(&ranges)]);
    r.process.minflt = k.stats().minflt;
    pressure_into(&mut r, pressure_lines(k, k.stats().majflt));
    fallbacks_into(&mut r, &[k.stats().fallbacks]);
    r.regions = workload
        .regions
        .iter()
        .zip(regions)
        .filter_map(|(decl, placed)| placed.map(|(start, len)| RegionPlacement { name: decl.name.clone(), start, len }))
        .collect();
    r.calls = calls;
    r.vmas = views::vma_maps(k, None);
    r.peak = Some(views::peak_of(k));
    if let Some(log) = &k.stats().explain {
        let mut x = uapi::Explain::default();
        views::add_explain(&mut x, log, None);
        r.explain = Some(x);
    }
    let (shmem, shmem_huge, shmem_pmd) = k.shmem_meminfo();
    for (name, bytes) in [(Meminfo::Shmem, shmem), (Meminfo::ShmemHugePages, shmem_huge), (Meminfo::ShmemPmdMapped, shmem_pmd)] {
        r.meminfo.insert(name.into(), (bytes / 1024) as i64);
    }
    // Every mm's scans (khugepaged walks them all).
    let mut scans: BTreeMap<String, u64> = BTreeMap::new();
    for id in k.mm_ids() {
        for (s, n) in &k.mm_stats(id).scan_results {
            *scans.entry(s.name()).or_insert(0) += n;
        }
    }
    let kh = k.khugepaged_state();
    r.model = Some(uapi::ModelSection {
        run: Some(uapi::result::ModelRun {
            scan_results: scans,
            nr_free_pages: k.zone().nr_free_pages(),
            buddyinfo: k.zone().buddyinfo().iter().map(|&n| n as u64).collect(),
            pgtable_pages: k.stats().pgtable_pages,
            vmas: k.vmas().count() as u64,
            deferred_split_queue: k.deferred_split_queue().len() as u64,
            accesses_without_fault: k.stats().hits,
            khugepaged: uapi::result::ModelKhugepaged {
                registered: k.khugepaged_registered(k.current_mm()),
                wakeups: kh.wakeups,
                pmds_scanned: kh.pmds_scanned,
                pages_collapsed: kh.pages_collapsed,
                full_scans: kh.full_scans,
                alloc_sleeps: kh.alloc_sleeps,
                hints: crate::hint_daemon::model_hints(k),
            },
            compaction: k.compaction_events().named().iter().filter(|(_, n)| *n > 0).map(|(s, n)| (s.to_string(), *n)).collect(),
            contig_hint: contig_hint_stats(k),
        }),
        replay: None,
    });
    r
}

/// `model.contig_hint` from the model's chunk table (`--policy contig-hint`).
fn contig_hint_stats(k: &Kernel) -> Option<uapi::result::ContigHintStats> {
    let (c, (filling, completed)) = k.contig_hint_counters()?;
    Some(uapi::result::ContigHintStats {
        chunks_allocated: c.allocated,
        chunks_completed: c.completed,
        chunks_split: c.split,
        alloc_failed: c.alloc_failed,
        filling,
        completed,
        unmapped_bytes: c.unmapped_pages * 4096,
        peak_unmapped_bytes: c.peak_unmapped_pages * 4096,
    })
}

/// Replay a recording (`thplab record`) in the model under `settings`: see [`replay`].
pub fn run_recording(
    source: &str,
    header: &trace::Header,
    events: &[trace::Event],
    settings: &ThpSettings,
    machine: &MachineConfig,
    check_invariants: bool,
) -> Result<RunResult, SimError> {
    run_recording_opts(source, header, events, settings, machine, &ReplayOptions { check_invariants, ..Default::default() })
}

/// How a recording is replayed.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// Check the model's invariants as `sim --check` does.
    pub check_invariants: bool,
    /// `--explain`: a range of model addresses whose faults are kept.
    pub explain: Option<(u64, u64)>,
    /// The clock follows the recording's timestamps and khugepaged runs on it
    /// (`replay::Replay::follow_recorded_time`). On by default (issue #27 item 4); `sim
    /// --no-recorded-time` turns it off: the clock stays at 0 and the daemon never wakes.
    pub recorded_time: bool,
    /// What the replay is priced and observed with: the sampling interval (with
    /// `recorded_time`: the result's `timeline`), the recording's accesses and the TLB model
    /// they drive, a profile's `[host]` and the free lists to lay memory out by (the replay
    /// counts the frames it writes that the host had dropped). Its `[fault]` costs price the
    /// replay afterwards (`time::recording`), not during it.
    pub profile: Profile,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions { check_invariants: false, explain: None, recorded_time: true, profile: Profile::default() }
    }
}

/// Before which record each block of recorded accesses is replayed. A block's accesses came
/// between the matched call its `anchor` follows and the next matched call (the next block's
/// anchor, that call's record being just before it); the native run's faults of that interval
/// are records inside it, in an order the accesses cannot be aligned with. A block goes at the
/// end of its interval, after those faults, so that its accesses find the pages the run faulted
/// in (an access never faults in the replay: `Replay::accesses`); the last interval ends where
/// the first process exits (its exit_group, exit, or the end of the recording).
fn access_places(blocks: &[trace::accesses::AccessBlock], events: &[trace::Event], root: u32) -> Vec<u64> {
    let last = blocks.last().map_or(0, |b| b.anchor);
    let exit = events
        .iter()
        .enumerate()
        .skip(last as usize)
        .find(|(_, e)| e.pid == root && matches!(&e.body, trace::EventBody::Syscall(s) if matches!(s.kind, trace::SyscallKind::ExitGroup | trace::SyscallKind::Exit)))
        .map_or(events.len() as u64, |(i, _)| i as u64);
    let mut places = Vec::with_capacity(blocks.len());
    for (i, b) in blocks.iter().enumerate() {
        let next = blocks[i..].iter().find(|n| n.anchor > b.anchor).map_or(exit, |n| n.anchor - 1);
        places.push(next.max(b.anchor));
    }
    places
}

/// [`run_recording`] with every option.
pub fn run_recording_opts(
    source: &str,
    header: &trace::Header,
    events: &[trace::Event],
    settings: &ThpSettings,
    machine: &MachineConfig,
    opts: &ReplayOptions,
) -> Result<RunResult, SimError> {
    let mut rp = replay::Replay::new(header, settings, machine, opts.check_invariants, source);
    rp.prescan(events);
    rp.set_explain(opts.explain);
    if opts.recorded_time {
        rp.follow_recorded_time();
    }
    let p = &opts.profile;
    if let Some(ms) = p.sample_ms {
        rp.set_sampling(ms.saturating_mul(1_000_000));
    }
    if let Some((host, free_areas)) = &p.host {
        rp.enable_host(host, free_areas.as_ref());
    }
    // Recorded accesses go at the end of their interval, in the first process.
    let mut blocks = p.accesses.as_ref().map(|a| {
        let (cpu, paging) = p.tlb_or_default();
        rp.enable_accesses(cpu, paging, a.trace.regions.clone());
        a.trace.blocks.iter().zip(access_places(&a.trace.blocks, events, header.root_pid)).peekable()
    });
    for (i, e) in events.iter().enumerate() {
        if let Some(bs) = blocks.as_mut() {
            while let Some((b, _)) = bs.next_if(|(_, at)| *at <= i as u64) {
                rp.accesses(header.root_pid, b.runs());
            }
        }
        rp.event(e).map_err(|mut err| {
            err.record = Some((i as u64 + 1, None));
            err
        })?;
    }
    for (b, _) in blocks.into_iter().flatten() {
        rp.accesses(header.root_pid, b.runs());
    }
    let host_faults = rp.host_faults();
    let replay::Finished { counters, minflt, images, stats: mut st, misses, khugepaged, io, timeline, accesses, pressure } = rp.finish();
    let accesses = accesses.map(|rep| recorded_accesses(rep, opts.profile.accesses.as_ref().expect("accesses were replayed"), &mut st.warnings));
    let mut r = RunResult::new("sim", source);
    r.io = io;
    r.accesses = accesses;
    r.timeline = opts.profile.sample_ms.map(|ms| uapi::Timeline { interval_ms: ms, samples: timeline });
    r.settings = settings.knob_map();
    counters_into(&mut r, &counters, settings);
    // The census is taken at each process's exit: an image an execve replaced is gone by then.
    let census: Vec<mm::debug::CensusReport> = images.iter().filter(|i| !i.replaced).map(|i| i.census.clone()).collect();
    census_into(&mut r, &census);
    r.process.minflt = minflt;
    pressure_into(&mut r, pressure);
    let fallbacks: Vec<_> = images.iter().map(|i| i.fallbacks).collect();
    fallbacks_into(&mut r, &fallbacks);
    let mut peak = uapi::Peak::default();
    let mut explain = opts.explain.map(|_| uapi::Explain::default());
    for i in &images {
        views::add_peak(&mut peak, &i.peak);
        if !i.replaced {
            r.vmas.extend(i.vmas.iter().cloned());
        }
        if let (Some(x), Some(log)) = (explain.as_mut(), &i.explain) {
            views::add_explain(x, log, Some(i.pid));
        }
    }
    r.peak = Some(peak);
    r.explain = explain;
    let per_process = replay_processes(&images);
    let mut rep = st;
    rep.warnings = replay::warnings(&rep, &misses);
    rep.placement_misses = misses;
    rep.recorded_kernel = header.kernel_release.clone();
    (rep.host_faults, rep.host_base_faults) = host_faults;
    rep.census_scope = "anonymous memory and shmem (shared and private mappings) of every process, at its exit".to_string();
    rep.per_process = per_process;
    rep.khugepaged = khugepaged.map(|kh| uapi::result::ModelKhugepaged {
        registered: kh.wakeups > 0 || !kh.mm_slots.is_empty(),
        wakeups: kh.wakeups,
        pmds_scanned: kh.pmds_scanned,
        pages_collapsed: kh.pages_collapsed,
        full_scans: kh.full_scans,
        alloc_sleeps: kh.alloc_sleeps,
        hints: None,
    });
    r.model = Some(uapi::ModelSection { run: None, replay: Some(rep) });
    Ok(r)
}

/// A replay's report of the recorded accesses (`record --accesses`) with what the recording
/// held (`recorded`), and a warning for the accesses that could not be mapped or replayed.
fn recorded_accesses(mut rep: uapi::AccessReport, a: &RecordedAccessInput, warnings: &mut Vec<String>) -> uapi::AccessReport {
    let t = &a.trace.totals;
    let rec = rep.recorded.get_or_insert_with(Default::default);
    rec.file = a.file.clone();
    rec.raw_accesses = t.raw_accesses;
    rec.raw_writes = t.writes;
    rec.runs = t.runs;
    rec.unmapped_accesses = t.unmapped_accesses;
    rec.unmapped_writes = t.unmapped_writes;
    rec.valgrind_ns = t.valgrind_ns;
    rec.native_ns = t.native_ns;
    rec.valgrind_syscalls = t.valgrind_syscalls;
    rec.matched_syscalls = t.matched_syscalls;
    if rec.unmapped_accesses > 0 {
        let tool = if a.trace.header.flags & trace::accesses::ACCESS_QEMU != 0 { "QEMU" } else { "valgrind" };
        warnings.push(format!(
            "{} of the {} accesses recorded under {tool} ({:.2}%) could not be mapped onto the recorded run ({tool}'s own mappings, or mappings not matched): not replayed (accesses.recorded.unmapped_accesses)",
            rec.unmapped_accesses,
            rec.raw_accesses,
            100.0 * rec.unmapped_accesses as f64 / rec.raw_accesses.max(1) as f64
        ));
    }
    if rec.not_replayed > 0 {
        warnings.push(format!(
            "{} recorded accesses fell where the model has no mapping (or after the first process left its recorded image): not replayed (accesses.recorded.not_replayed)",
            rec.not_replayed
        ));
    }
    rep
}

/// Each process image of a replay, its census at its exit (or execve).
fn replay_processes(images: &[replay::ImageResult]) -> Vec<uapi::result::ReplayProcess> {
    images
    .iter()
    .map(|i| {
        let mut one = RunResult::default();
        census_into(&mut one, std::slice::from_ref(&i.census));
        uapi::result::ReplayProcess {
            pid: i.pid,
            image: i.image,
            exe: i.exe.clone(),
            exec_snapshot: i.exec_snapshot,
            replaced: i.replaced,
            modelled_faults: i.minflt,
            rss_bytes: one.process.rss_bytes,
            anon_huge_bytes: one.process.anon_huge_bytes,
            peak_rss_bytes: i.peak.rss_bytes,
            folios: one.folios,
            census: one.census,
        }
    })
    .collect()
}

pub mod daemons;
pub mod driver;
pub mod hint_daemon;
mod access;
pub mod host;
mod file_pages;
mod latency;
pub mod hugetlb;
mod profile;
pub mod replay;
pub mod tiers;
pub mod time;
pub mod views;

#[cfg(test)]
mod clock_tests;
#[cfg(test)]
mod fork_tests;
#[cfg(test)]
mod replay_khugepaged_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod views_tests;
