//! The one driver of the simulated machine: every operation of every source goes through
//! [`Machine::step`].
//!
//! Three sources turn their input into [`Step`]s: workload statements (`crate::run_with`),
//! recorded system calls and faults (`crate::replay`), and torture's draws (crates/torture).
//! A step names the process (`MmId`) it runs in, as a system call runs in `current->mm`; the
//! machine switches to it (`Kernel::switch_mm`), performs it through the mm core (which is
//! clockless and does no I/O), and then does what the machine does between any two
//! operations, whatever their source: it moves the simulated clock (`Step::Sleep`) and wakes
//! the daemons whose time has come (`crate::daemons`: khugepaged's schedule, mm/khugepaged.c:
//! `khugepaged`, `khugepaged_wait_work`). A capability that runs on time (a cost model
//! advancing the clock per operation, another daemon) is added here once for all three.
//!
//! Reads of the model (census, VMAs, statistics) do not change it and go to the kernel
//! directly (`Machine` dereferences to `&Kernel`); so does the setup of a machine before its
//! first step (fragmentation, the TLB observer, `--explain`), through [`Machine::kernel_mut`].
//! Invariant checks are the sources' to place (after a workload statement, a recorded event or
//! a torture draw, each of which may take several steps): [`Machine::check`] is the one
//! function they call.

use mm::gup::{Pinned, Populate, Populated};
use mm::madvise::{Madvise, ThpDisable};
use mm::mmap::{MapBacking, MmapPlacement};
use mm::shmem::{InodeId, SbHuge, SbId};
use mm::fork::ForkWork;
use mm::{Access, Errno, Kernel, MmId};
use mm_types::{Order, PMD_ORDER};
use thp_abi::counters::sysfs_orders;
use uapi::profile::FaultCosts;
use thp_abi::{MthpStat, ThpSettings, VmEvent};
use uapi::{TimeEstimate, TimelineSample};

use crate::daemons;
use crate::latency::{self, FaultKind, LatencyRecorder, PressureWork};

/// One operation on the machine, from any source. Memory system calls act on the step's
/// process; shmem file operations act on the machine's page cache; `Sleep` and `Settings`
/// act on the machine.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// `mmap` (mm/mmap.c: `do_mmap`).
    Mmap { len: u64, prot: u32, placement: MmapPlacement, backing: MapBacking },
    /// `munmap` (mm/vma.c: `do_vmi_munmap`).
    Munmap { start: u64, len: u64 },
    /// `mprotect` (mm/mprotect.c: `do_mprotect_pkey`).
    Mprotect { start: u64, len: u64, prot: u32 },
    /// `madvise` (mm/madvise.c: `do_madvise`).
    Madvise { start: u64, len: u64, advice: Madvise },
    /// `mremap` to `dest` (mm/mremap.c: `do_mremap`; `dest == start` resizes in place).
    Mremap { start: u64, old_len: u64, new_len: u64, dest: u64 },
    /// `brk(to)` (mm/mmap.c: `brk`).
    Brk { to: u64 },
    /// `prctl(PR_SET_THP_DISABLE)` (kernel/sys.c).
    Prctl(ThpDisable),
    /// `mlock2` (mm/mlock.c: `do_mlock`).
    Mlock { start: u64, len: u64, flags: u64 },
    /// The VM_LOCKED/VM_LOCKONFAULT flags of `mlock2` without its populate (a replay
    /// populates as the recording did, `Populate`).
    MlockFlags { start: u64, len: u64, flags: u64 },
    /// The flags of `mlockall` without its populate.
    MlockallFlags { flags: u64 },
    /// `munlock`.
    Munlock { start: u64, len: u64 },
    /// `mlockall` (mm/mlock.c: `do_mlockall`).
    Mlockall { flags: u64 },
    /// `munlockall`.
    Munlockall,
    /// Fault a range in without touching it (mm/gup.c: `populate_vma_page_range`,
    /// `faultin_page_range`).
    Populate { start: u64, end: u64, how: Populate },
    /// An O_DIRECT read's buffer (mm/gup.c: `pin_user_pages_fast`).
    PinUserPages { start: u64, len: u64 },
    /// UFFDIO_API (fs/userfaultfd.c: `userfaultfd_api`): the features asked for.
    UffdApi { features: u64 },
    /// UFFDIO_REGISTER (`userfaultfd_register`).
    UffdRegister { start: u64, len: u64, mode: u64 },
    /// UFFDIO_UNREGISTER (`userfaultfd_unregister`).
    UffdUnregister { start: u64, len: u64 },
    /// UFFDIO_COPY or UFFDIO_ZEROPAGE (mm/userfaultfd.c: `mfill_atomic`).
    Mfill { start: u64, len: u64, what: mm::userfaultfd::Mfill },
    /// One load or store (the MMU; a fault enters `handle_mm_fault`).
    Access { addr: u64, write: bool },
    /// An access of a workload's `access` statement: as `Access`, but the TLB model prices it
    /// (`crate::access`), so a hit costs no `touch_ns_per_page` here.
    TlbAccess { addr: u64, write: bool },
    /// `n` loads or stores from `first`, `stride` apart, in address order.
    AccessRun { first: u64, n: u64, stride: u64, write: bool },
    /// Mount a tmpfs (mm/shmem.c: `shmem_fill_super`).
    ShmemMount(SbHuge),
    /// Create a file on a mount (`shmem_get_inode`); `linked`: it has a name.
    ShmemCreate { sb: SbId, linked: bool },
    /// `ftruncate` of a shmem file.
    Ftruncate { ino: InodeId, size: u64 },
    /// `memfd_create(MFD_HUGETLB)` (fs/hugetlbfs/inode.c: `hugetlb_file_setup`): a file of size 0.
    HugetlbFileSetup(mm::hugetlb::HugeSize),
    /// `ftruncate` of a hugetlbfs file (`hugetlbfs_setattr`).
    HugetlbTruncate { ino: u32, size: u64 },
    /// `fallocate` of a shmem file (`keep_size`: FALLOC_FL_KEEP_SIZE).
    Fallocate { ino: InodeId, offset: u64, len: u64, keep_size: bool },
    /// `fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)` of a shmem file.
    PunchHole { ino: InodeId, offset: u64, len: u64 },
    /// `write` to a shmem file (`shmem_write_begin`).
    ShmemWrite { ino: InodeId, offset: u64, len: u64 },
    /// `unlink` of a shmem file: later mappings of it map an unlinked inode.
    ShmemUnlink(InodeId),
    /// A file's data from before the run, `size` bytes in 4 KiB pages (a replay cannot know
    /// its folio sizes).
    ShmemPreexisting { ino: InodeId, size: u64 },
    /// What execve set, as a recording shows it: `mm->mmap_base`, and `start_brk`/`brk`
    /// (learnt from the exec snapshot or the first `brk(0)`).
    SetLayout { mmap_base: Option<u64>, brk: Option<(u64, u64)> },
    /// `fork` (kernel/fork.c: `copy_mm`, `dup_mmap`): the outcome names the child's mm.
    Fork,
    /// Right after a fork, in the parent: the pages of long-term pinned folios in the ranges
    /// are copied for `child` instead of shared (mm/memory.c: `copy_present_page`).
    CopyPinned { child: MmId, ranges: Vec<(u64, u64)> },
    /// The process exits (kernel/exit.c: `exit_mm`, `mmput`, `exit_mmap`).
    Exit,
    /// Time passes: the clock moves forward by `ns` and every daemon wake-up due runs.
    Sleep { ns: u64 },
    /// Settings change (a sysfs write; torture draws them).
    Settings(Box<ThpSettings>),
    /// Fragment the free memory (`mm::Kernel::fragment_free_memory`): the workload's `fragment`.
    Fragment { unmovable_pct: u32 },
    /// `echo 2 > /proc/sys/vm/drop_caches` (`mm::Kernel::drop_slab`).
    DropSlab,
}

impl Step {
    /// A system call (priced at the profile's `syscall_ns`); accesses, sleeps and settings are
    /// not.
    pub fn is_call(&self) -> bool {
        !matches!(self, Step::Access { .. } | Step::TlbAccess { .. } | Step::AccessRun { .. } | Step::Sleep { .. } | Step::Settings(_) | Step::SetLayout { .. } | Step::ShmemPreexisting { .. } | Step::Fragment { .. })
    }
}

/// What a step returned.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// A call with no value (0 or an errno).
    Ret(Result<(), Errno>),
    /// mmap: the address.
    Mapped(Result<u64, Errno>),
    /// brk: the new break.
    Brk(u64),
    /// A populate or mlock: what it faulted in.
    Populated(Result<Populated, Errno>),
    /// A pin: what it pinned.
    Pinned(Result<Pinned, Errno>),
    /// An access.
    Access(Access),
    /// An access run: the accesses done and the last one's outcome.
    Run { done: u64, last: Access },
    /// A tmpfs mount.
    Mounted(SbId),
    /// A new file.
    Created(InodeId),
    /// fork: the child's mm and what was copied.
    Forked(Result<(MmId, ForkWork), Errno>),
    /// CopyPinned: pages copied for the child, and PMD-mapped pinned ranges left shared.
    CopiedPinned { copied: u64, pmd_mapped: u64 },
    /// Mfill: the pages filled.
    Filled(Result<mm::userfaultfd::Mfilled, Errno>),
    /// A step with nothing to return (exit, sleep, settings).
    Done,
}

impl Outcome {
    /// The call's return as 0 or an errno, whatever it returned besides.
    pub fn ret(&self) -> Result<(), Errno> {
        match self {
            Outcome::Ret(r) => *r,
            Outcome::Mapped(r) => r.map(|_| ()),
            Outcome::Populated(r) => r.map(|_| ()),
            Outcome::Pinned(r) => r.map(|_| ()),
            Outcome::Forked(r) => r.map(|_| ()),
            Outcome::Filled(r) => r.map(|_| ()),
            Outcome::Brk(_) | Outcome::Access(_) | Outcome::Run { .. } | Outcome::Mounted(_) | Outcome::Created(_) | Outcome::CopiedPinned { .. } | Outcome::Done => Ok(()),
        }
    }

    /// mmap's address.
    pub fn mapped(&self) -> Result<u64, Errno> {
        match self {
            Outcome::Mapped(r) => *r,
            other => panic!("not an mmap outcome: {other:?}"),
        }
    }

    /// An access's outcome.
    pub fn access(&self) -> Access {
        match self {
            Outcome::Access(a) => *a,
            other => panic!("not an access outcome: {other:?}"),
        }
    }

    /// An access run's (accesses done, last outcome).
    pub fn run(&self) -> (u64, Access) {
        match self {
            Outcome::Run { done, last } => (*done, *last),
            other => panic!("not an access-run outcome: {other:?}"),
        }
    }

    /// brk's new break.
    pub fn brk(&self) -> u64 {
        match self {
            Outcome::Brk(b) => *b,
            other => panic!("not a brk outcome: {other:?}"),
        }
    }

    /// What a populate or mlock faulted in.
    pub fn populated(&self) -> Result<Populated, Errno> {
        match self {
            Outcome::Populated(r) => *r,
            other => panic!("not a populate outcome: {other:?}"),
        }
    }

    /// What a pin pinned.
    pub fn pinned(&self) -> Result<Pinned, Errno> {
        match self {
            Outcome::Pinned(r) => *r,
            other => panic!("not a pin outcome: {other:?}"),
        }
    }

    /// The new mount.
    pub fn mounted(&self) -> SbId {
        match self {
            Outcome::Mounted(sb) => *sb,
            other => panic!("not a mount outcome: {other:?}"),
        }
    }

    /// The new file.
    pub fn created(&self) -> InodeId {
        match self {
            Outcome::Created(ino) => *ino,
            other => panic!("not a create outcome: {other:?}"),
        }
    }

    /// fork's child.
    pub fn forked(&self) -> Result<(MmId, ForkWork), Errno> {
        match self {
            Outcome::Forked(r) => *r,
            other => panic!("not a fork outcome: {other:?}"),
        }
    }
}

/// The work the model counts that a profile prices: read before and after each step, the
/// difference is the step's work.
#[derive(Clone, Copy, Default)]
struct Work {
    /// The step's mm: `min_flt`, accesses that hit, zero-page read faults.
    minflt: u64,
    hits: u64,
    zero: u64,
    /// The machine's `thp_collapse_alloc`.
    collapses: i64,
    /// The machine's folio allocations of each order (`anon_fault_alloc` + `shmem_alloc`).
    allocs: [i64; PMD_ORDER as usize + 1],
    /// Frames written that the host had dropped (free page reporting), and of them those of
    /// base pages.
    host_faults: u64,
    host_base_faults: u64,
    /// The machine's folios freed, by order.
    freed: [u64; ORDERS],
    /// Reclaim, swap and compaction counters (`crate::latency`).
    pressure: PressureWork,
}

/// The simulated machine and its clock: the kernel, the time, and the daemons.
pub struct Machine {
    k: Kernel,
    /// Simulated time in nanoseconds since boot.
    clock_ns: u64,
    khugepaged: daemons::Khugepaged,
    reporting: daemons::PageReporting,
    /// The hint policies' source (MGLRU aging, DAMON), idle without one.
    hints: crate::hint_daemon::HintDaemon,
    steps: u64,
    /// With a profile's `[fault]` costs, every step moves the clock by what its work costs;
    /// without, only `Sleep` moves it.
    costs: Option<FaultCosts>,
    /// The profile's ns per fault by folio order (order 0: 4 KiB), looked up once; a size the
    /// profile lacks costs a 4 KiB fault.
    order_ns: [f64; ORDERS],
    /// Faults the priced steps made by order, and their ns (kept in arrays so that a step
    /// allocates nothing; `time` names the sizes).
    faults: [u64; ORDERS],
    faults_ns: [f64; ORDERS],
    /// The profile's ns per folio freed by order (0 where it has none), and the priced steps'
    /// frees by order.
    free_ns: [f64; ORDERS],
    frees: [u64; ORDERS],
    /// What the priced steps cost, the other kinds of work.
    time: TimeEstimate,
    /// ns per frame written that the host had dropped (the profile's `[host]`; 0 without): by a
    /// large folio's fault, and by a base page's.
    host_fault_ns: f64,
    host_base_fault_ns: f64,
    /// `--sample MS`: the interval and the next sample's time, and the samples taken.
    sampling: Option<(u64, u64)>,
    samples: Vec<TimelineSample>,
    /// What memory pressure cost so far (`[fault.pressure]`, `crate::latency`).
    pressure_time: uapi::result::PressureTime,
    /// `--latency`: each fault's priced time.
    latency: Option<Box<LatencyRecorder>>,
}

/// Folio orders 0 (4 KiB) to PMD_ORDER.
const ORDERS: usize = PMD_ORDER as usize + 1;

/// Whether a step is one access (its fault, if any, is one fault for `--latency`).
enum StepKind {
    Access,
    Other,
}

/// What the one fault between `b` and `a` mapped (`large`: large folios allocated); None when
/// there was no fault or more than one.
fn fault_kind(b: &Work, a: &Work, large: u64) -> Option<FaultKind> {
    let maj = a.pressure.majflt - b.pressure.majflt;
    let minor = a.minflt - b.minflt;
    if maj + minor != 1 {
        return None;
    }
    if maj == 1 {
        let o = (1..ORDERS).rev().find(|&o| a.pressure.swpin[o] > b.pressure.swpin[o]).unwrap_or(0);
        return Some(FaultKind::Swapin(Order(o as u8)));
    }
    if a.zero > b.zero {
        return Some(FaultKind::Zero);
    }
    let o = if large > 0 { (1..ORDERS).rev().find(|&o| a.allocs[o] > b.allocs[o]).unwrap_or(0) } else { 0 };
    Some(FaultKind::Folio(Order(o as u8)))
}

impl std::ops::Deref for Machine {
    type Target = Kernel;
    fn deref(&self) -> &Kernel {
        &self.k
    }
}

impl Machine {
    pub fn new(k: Kernel) -> Machine {
        Machine {
            k,
            clock_ns: 0,
            khugepaged: daemons::Khugepaged::default(),
            reporting: daemons::PageReporting::default(),
            hints: Default::default(),
            steps: 0,
            costs: None,
            order_ns: [0.0; ORDERS],
            faults: [0; ORDERS],
            faults_ns: [0.0; ORDERS],
            free_ns: [0.0; ORDERS],
            frees: [0; ORDERS],
            time: TimeEstimate::default(),
            host_fault_ns: 0.0,
            host_base_fault_ns: 0.0,
            sampling: None,
            samples: Vec::new(),
            pressure_time: Default::default(),
            latency: None,
        }
    }

    /// Take a [`TimelineSample`] every `interval_ns` of simulated time from now on (`--sample
    /// MS`): sample n when the clock reaches n × interval, after the daemons' wake-ups due
    /// before it and before the steps that start then.
    pub fn set_sampling(&mut self, interval_ns: u64) {
        let interval = interval_ns.max(1);
        self.sampling = Some((interval, (self.clock_ns / interval + 1) * interval));
    }

    /// CONFIG_HZ of the simulated machine: khugepaged sleeps in jiffies of it.
    pub fn set_hz(&mut self, hz: u32) {
        self.khugepaged.hz = hz;
    }

    /// The samples taken so far.
    pub fn timeline(&self) -> &[TimelineSample] {
        &self.samples
    }

    /// Move the clock to `until`, running the daemons' wake-ups due before it and taking the
    /// samples due on the way.
    fn advance(&mut self, until: u64) {
        while let Some((interval, at)) = self.sampling.filter(|&(_, at)| at <= until) {
            self.run_daemons_until(at);
            self.clock_ns = self.clock_ns.max(at);
            let sample = self.sample(at);
            self.samples.push(sample);
            self.sampling = Some((interval, at + interval));
        }
        self.run_daemons_until(until);
        self.clock_ns = until;
    }

    /// Every daemon's work due before `until`, in time order.
    fn run_daemons_until(&mut self, until: u64) {
        while let Some(t) = self.reporting.due().filter(|&t| t < until) {
            self.run_hints_until(t);
            self.khugepaged.run_until(&mut self.k, t);
            self.reporting.run_pass(&mut self.k, t);
        }
        self.run_hints_until(until);
        self.khugepaged.run_until(&mut self.k, until);
    }

    /// The hint source's passes due before `until`, each after khugepaged's wake-ups before it.
    fn run_hints_until(&mut self, until: u64) {
        while let Some(t) = self.hints.due().filter(|&t| t < until) {
            self.khugepaged.run_until(&mut self.k, t);
            self.hints.run_pass(&mut self.k, t);
        }
    }

    /// The state of every mm that has not exited, as `thplab live --sample` reads it of the
    /// run's processes: smaps_rollup's Rss, AnonHugePages and ShmemPmdMapped of the modelled
    /// VMAs, their folio census, and khugepaged's counters.
    fn sample(&mut self, at: u64) -> TimelineSample {
        let current = self.k.current_mm();
        let mut t = TimelineSample { t_ms: at as f64 / 1e6, ..Default::default() };
        let ids: Vec<MmId> = self.k.mm_ids().filter(|&id| !self.k.mm_exited(id)).collect();
        for id in ids {
            self.k.switch_mm(id);
            let c = self.k.census_of_all();
            t.rss_kb += c.rss_bytes / 1024;
            t.anon_huge_pages_kb += c.anon_huge_bytes / 1024;
            t.shmem_pmd_mapped_kb += c.shmem_pmd_bytes / 1024;
            for (size, n) in c.census.folio_counts() {
                *t.folios.entry(size).or_insert(0) += n;
            }
        }
        self.k.switch_mm(current);
        let kh = self.k.khugepaged_state();
        t.pages_collapsed = kh.pages_collapsed as i64;
        t.full_scans = kh.full_scans as i64;
        t.thp_collapse_alloc = self.k.counters.vm(VmEvent::ThpCollapseAlloc);
        t
    }

    /// Price every step from now on with a profile's `[fault]` section (`sim --profile`): the
    /// clock moves by each step's work, so daemons wake in the middle of the program as they
    /// would on the machine the profile was measured on.
    pub fn set_costs(&mut self, costs: FaultCosts) {
        let four_k = costs.fault_ns(&Order::BASE.label()).unwrap_or(0.0);
        self.order_ns = std::array::from_fn(|o| costs.fault_ns(&Order(o as u8).label()).unwrap_or(four_k));
        self.free_ns = std::array::from_fn(|o| costs.free_ns_per_folio.get(&Order(o as u8).label()).copied().unwrap_or(0.0));
        self.costs = Some(costs);
    }

    /// Record each fault's priced time (`--latency`; with costs set): an access run is then
    /// priced one fault a piece.
    pub fn set_latency(&mut self) {
        self.latency = Some(Box::default());
    }

    /// Give the machine a free page reporting device and the host behind it (a profile's
    /// `[host]`): the kernel's free memory is laid out as `free` says (a live snapshot of the
    /// Movable free lists and of what reporting has reported; else the profile's free lists, in
    /// the state of an idle machine), and every frame a priced step writes that the host had
    /// dropped costs `fault_ns_per_page`. Call before the first step.
    pub fn set_host(&mut self, host: &uapi::profile::HostCosts, free: Option<&uapi::profile::FreeLists>) {
        let profile = (!host.free_areas.is_empty()).then(|| uapi::profile::FreeLists { free: host.free_areas.clone(), ..Default::default() });
        self.k.enable_page_reporting(Order(host.page_reporting_order.min(mm_types::MAX_PAGE_ORDER)), free.or(profile.as_ref()));
        self.host_fault_ns = host.fault_ns_per_page;
        self.host_base_fault_ns = host.base_fault_ns_per_page.unwrap_or(host.fault_ns_per_page);
    }

    /// The time of the priced steps so far (`None` without a profile); `total_ns` is the work,
    /// the clock also holds the sleeps.
    pub fn time(&self) -> Option<TimeEstimate> {
        let c = self.costs.as_ref()?;
        let mut t = self.time.clone();
        for o in (0..ORDERS).filter(|&o| self.faults[o] > 0) {
            let size = Order(o as u8).label();
            t.faults.insert(size.clone(), self.faults[o]);
            t.faults_ns.insert(size, self.faults_ns[o]);
        }
        for o in (0..ORDERS).filter(|&o| self.frees[o] > 0) {
            t.frees.insert(Order(o as u8).label(), self.frees[o]);
            t.free_ns += self.frees[o] as f64 * self.free_ns[o];
        }
        let p = &self.pressure_time;
        let pressure = p.direct_reclaim_ns + p.swapin_ns + p.direct_compaction_ns;
        t.total_ns = t.faults_ns.values().sum::<f64>() + t.zero_page_ns + t.touch_ns + t.calls_ns + t.collapse_ns + t.host_ns + t.free_ns + pressure;
        if !c.pressure.is_zero() && *p != uapi::result::PressureTime::default() {
            t.pressure = Some(p.clone());
        }
        t.latency = self.latency.as_ref().and_then(|l| l.report());
        t.unmeasured_sizes = t.faults.keys().filter(|s| c.fault_ns(s).is_none()).cloned().collect();
        Some(t)
    }

    fn work(&self) -> Work {
        let s = self.k.stats();
        let collapses = self.k.counters.vm(VmEvent::ThpCollapseAlloc);
        let (host_faults, host_base_faults) = self.k.host_stats().map_or((0, 0), |h| (h.faults, h.base_faults));
        let freed = *self.k.folios_freed();
        let pressure = PressureWork::read(&self.k);
        let mut w = Work { minflt: s.minflt, hits: s.hits, zero: s.zero_page_faults, collapses, allocs: [0; PMD_ORDER as usize + 1], host_faults, host_base_faults, freed, pressure };
        for order in sysfs_orders() {
            w.allocs[order.0 as usize] = self.k.counters.mthp(order, MthpStat::AnonFaultAlloc) + self.k.counters.mthp(order, MthpStat::ShmemAlloc);
        }
        w
    }

    /// Charge the work between `before` and now (`call`: the step is a system call), as
    /// `crate::time` describes: each fault by the size it allocated, zero-page reads, touches
    /// that did not fault (unless `hits_priced` is false: the TLB model prices them), the folios
    /// freed, the call itself, and the reclaim, swap and compaction it did (`crate::latency`);
    /// with `--latency` and one fault in it (`one_fault`: an access), that fault's time less the
    /// touches goes into the histogram. Returns the ns charged.
    fn charge(&mut self, before: &Work, call: bool, hits_priced: bool, one_fault: bool) -> f64 {
        let Some(c) = self.costs.as_ref() else { return 0.0 };
        let after = self.work();
        let t = &mut self.time;
        let mut ns = 0.0;
        let mut large = 0;
        let mut fault = |o: usize, n: u64| {
            let cost = n as f64 * self.order_ns[o];
            self.faults[o] += n;
            self.faults_ns[o] += cost;
            cost
        };
        for order in sysfs_orders() {
            let n = (after.allocs[order.0 as usize] - before.allocs[order.0 as usize]).max(0) as u64;
            if n > 0 {
                ns += fault(order.0 as usize, n);
                large += n;
            }
        }
        let zero = after.zero.saturating_sub(before.zero);
        let small = after.minflt.saturating_sub(before.minflt).saturating_sub(large + zero);
        if small > 0 {
            ns += fault(0, small);
        }
        t.zero_page_faults += zero;
        t.zero_page_ns += zero as f64 * c.zero_page_read_ns;
        let hits = if hits_priced { after.hits.saturating_sub(before.hits) } else { 0 };
        t.touches_without_fault += hits;
        t.touch_ns += hits as f64 * c.touch_ns_per_page;
        ns += zero as f64 * c.zero_page_read_ns + hits as f64 * c.touch_ns_per_page;
        let collapses = (after.collapses - before.collapses).max(0) as u64;
        if collapses > 0 {
            let cost = collapses as f64 * self.order_ns[PMD_ORDER as usize];
            t.collapses += collapses;
            t.collapse_ns += cost;
            ns += cost;
        }
        if call {
            t.calls += 1;
            t.calls_ns += c.syscall_ns;
            ns += c.syscall_ns;
        }
        for o in 0..ORDERS {
            let n = after.freed[o] - before.freed[o];
            self.frees[o] += n;
            ns += n as f64 * self.free_ns[o];
        }
        let host = after.host_faults - before.host_faults;
        if host > 0 {
            let base = after.host_base_faults - before.host_base_faults;
            let cost = (host - base) as f64 * self.host_fault_ns + base as f64 * self.host_base_fault_ns;
            t.host_faults += host;
            t.host_ns += cost;
            ns += cost;
        }
        ns += latency::price(&c.pressure, &before.pressure, &after.pressure, &mut self.pressure_time);
        if let (Some(l), true) = (self.latency.as_mut(), one_fault) {
            let touches = hits as f64 * c.touch_ns_per_page;
            if let Some(kind) = fault_kind(before, &after, large) {
                l.record(kind, ns - touches);
            }
        }
        ns
    }

    /// Whether steps are priced (a profile's `[fault]` costs were set): the clock moves by work.
    pub fn priced(&self) -> bool {
        self.costs.is_some()
    }

    /// Work priced outside the driver (the TLB model's estimate of a workload's `access`
    /// statements, `crate::access`): with a profile the clock moves by `ns`, and the daemons'
    /// wake-ups and samples due meanwhile run; [`Machine::time`] does not hold it (the run adds
    /// the accesses' estimate to the total itself). Without a profile the clock stays.
    pub fn spend(&mut self, ns: u64) {
        if self.costs.is_some() && ns > 0 {
            self.advance(self.clock_ns.saturating_add(ns));
        }
    }

    /// The kernel, for setup before the first step and for what a source reads with the
    /// current mm switched (`Kernel::switch_mm` changes no state of the machine).
    pub fn kernel_mut(&mut self) -> &mut Kernel {
        &mut self.k
    }

    pub fn into_kernel(self) -> Kernel {
        self.k
    }

    /// Simulated time since boot.
    pub fn clock_ns(&self) -> u64 {
        self.clock_ns
    }

    /// Steps run so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Make `mm` current for reads (census, statistics) without running a step.
    pub fn switch_mm(&mut self, mm: MmId) {
        self.k.switch_mm(mm);
    }

    /// A new, empty mm (`mm_alloc` at execve, or at the start of a recording).
    pub fn mm_alloc(&mut self) -> MmId {
        self.k.mm_alloc()
    }

    /// Run one step in `mm`, then let time and the daemons move.
    pub fn step(&mut self, mm: MmId, step: Step) -> Outcome {
        self.k.switch_mm(mm);
        self.steps += 1;
        if let (Step::AccessRun { first, n, stride, write }, true) = (&step, self.costs.is_some()) {
            return self.access_run_on_clock(*first, *n, *stride, *write);
        }
        // A sleep's time is its own, and what khugepaged does meanwhile is not the program's.
        let before = (self.costs.is_some() && !matches!(step, Step::Sleep { .. })).then(|| self.work());
        let call = step.is_call();
        let hits_priced = !matches!(step, Step::TlbAccess { .. });
        let step_kind = if matches!(step, Step::Access { .. } | Step::TlbAccess { .. }) { StepKind::Access } else { StepKind::Other };
        let out = self.dispatch(step);
        if let Some(before) = before {
            // The step took this long; wake-ups due meanwhile run after it (the program ran on
            // while the daemon woke), an mm it put on khugepaged's empty list wakes it now.
            let one_fault = matches!(step_kind, StepKind::Access);
            let until = self.clock_ns + self.charge(&before, call, hits_priced, one_fault).round() as u64;
            self.khugepaged.after_op(&self.k, until);
            self.reporting.after_op(&self.k, until);
            self.hints.after_op(&self.k, until);
            self.advance(until);
        } else {
            // An mm that the step put on khugepaged's empty list wakes the daemon now.
            self.khugepaged.after_op(&self.k, self.clock_ns);
            self.reporting.after_op(&self.k, self.clock_ns);
            self.hints.after_op(&self.k, self.clock_ns);
        }
        out
    }

    /// The kernel call a step is (a sleep moves the clock), without pricing it.
    fn dispatch(&mut self, step: Step) -> Outcome {
        let k = &mut self.k;
        match step {
            Step::Mmap { len, prot, placement, backing } => Outcome::Mapped(k.do_mmap_backed(len, prot, placement, backing)),
            Step::Munmap { start, len } => Outcome::Ret(k.do_munmap(start, len)),
            Step::Mprotect { start, len, prot } => Outcome::Ret(k.do_mprotect(start, len, prot)),
            Step::Madvise { start, len, advice } => Outcome::Ret(k.do_madvise(start, len, advice)),
            Step::Mremap { start, old_len, new_len, dest } => Outcome::Ret(k.do_mremap(start, old_len, new_len, dest)),
            Step::Brk { to } => Outcome::Brk(k.sys_brk(to)),
            Step::Prctl(form) => {
                k.prctl_set_thp_disable(form);
                Outcome::Ret(Ok(()))
            }
            Step::Mlock { start, len, flags } => Outcome::Populated(k.do_mlock(start, len, flags)),
            Step::MlockFlags { start, len, flags } => Outcome::Ret(k.apply_vma_lock_flags(start, len, flags)),
            Step::MlockallFlags { flags } => {
                k.apply_mlockall_flags(flags);
                Outcome::Ret(Ok(()))
            }
            Step::Munlock { start, len } => Outcome::Ret(k.do_munlock(start, len)),
            Step::Mlockall { flags } => Outcome::Populated(k.do_mlockall(flags)),
            Step::Munlockall => {
                k.do_munlockall();
                Outcome::Ret(Ok(()))
            }
            Step::Populate { start, end, how } => Outcome::Populated(k.populate_range(start, end, how)),
            Step::PinUserPages { start, len } => Outcome::Pinned(k.pin_user_pages_fast(start, len)),
            Step::UffdApi { features } => {
                k.userfaultfd_api(features);
                Outcome::Done
            }
            Step::UffdRegister { start, len, mode } => Outcome::Ret(k.userfaultfd_register(start, len, mode)),
            Step::UffdUnregister { start, len } => Outcome::Ret(k.userfaultfd_unregister(start, len)),
            Step::Mfill { start, len, what } => Outcome::Filled(k.mfill_atomic(start, len, what)),
            Step::Access { addr, write } | Step::TlbAccess { addr, write } => Outcome::Access(k.access(addr, write)),
            Step::AccessRun { first, n, stride, write } => {
                let (done, last) = k.access_run(first, n, stride, write);
                Outcome::Run { done, last }
            }
            Step::ShmemMount(huge) => Outcome::Mounted(k.shmem_mount(huge)),
            Step::ShmemCreate { sb, linked } => Outcome::Created(k.shmem_create(sb, linked)),
            Step::Ftruncate { ino, size } => Outcome::Ret(k.shmem_ftruncate(ino, size)),
            Step::HugetlbFileSetup(size) => Outcome::Created(k.hugetlb_file_setup(size, 0, false)),
            Step::HugetlbTruncate { ino, size } => Outcome::Ret(k.hugetlb_truncate(ino, size)),
            Step::Fallocate { ino, offset, len, keep_size: false } => Outcome::Ret(k.shmem_fallocate(ino, offset, len)),
            Step::Fallocate { ino, offset, len, keep_size: true } => Outcome::Ret(k.shmem_fallocate_keep_size(ino, offset, len)),
            Step::PunchHole { ino, offset, len } => Outcome::Ret(k.shmem_punch_hole(ino, offset, len)),
            Step::ShmemWrite { ino, offset, len } => Outcome::Ret(k.shmem_write(ino, offset, len)),
            Step::ShmemUnlink(ino) => {
                k.shmem_unlink(ino);
                Outcome::Ret(Ok(()))
            }
            Step::ShmemPreexisting { ino, size } => Outcome::Ret(k.shmem_populate_order0(ino, size)),
            Step::SetLayout { mmap_base, brk } => {
                if let Some(b) = mmap_base {
                    k.set_mmap_base(b);
                }
                if let Some((start, end)) = brk {
                    k.set_brk(start, end);
                }
                Outcome::Done
            }
            Step::Fork => Outcome::Forked(k.fork()),
            Step::CopyPinned { child, ranges } => {
                let (copied, pmd_mapped) = k.copy_pinned_for_child(child, &ranges);
                Outcome::CopiedPinned { copied, pmd_mapped }
            }
            Step::Exit => {
                k.exit_mm();
                Outcome::Done
            }
            Step::Sleep { ns } => {
                self.advance(self.clock_ns.saturating_add(ns));
                Outcome::Done
            }
            Step::Settings(s) => {
                k.set_settings(&s);
                Outcome::Done
            }
            Step::Fragment { unmovable_pct } => {
                k.fragment_free_memory(unmovable_pct);
                Outcome::Done
            }
            Step::DropSlab => {
                k.drop_slab();
                Outcome::Done
            }
        }
    }

    /// A priced run of accesses in address order (`Step::AccessRun`), in pieces: while an event
    /// is due (a sample, a khugepaged wake-up, a page reporting pass), each piece holds at most
    /// as many faults as the time left before it pays for at the dearest fault the profile
    /// prices, and as many pages as it pays for at `touch_ns_per_page` (at least one of each).
    /// Each piece moves the clock by its work and runs what fell due, so the samples and the
    /// daemons see a long touch part-done, and the faults between two events cost at most the
    /// time between them plus one fault. With nothing due, one piece: `Kernel::access_run`'s
    /// speed.
    fn access_run_on_clock(&mut self, first: u64, n: u64, stride: u64, write: bool) -> Outcome {
        let (mut done, mut last) = (0, Access::Hit);
        while done < n {
            let (pages, faults) = self.piece_bounds(n - done);
            let before = self.work();
            let (d, l) = self.k.access_run_faults(first + done * stride, pages, stride, write, faults);
            (done, last) = (done + d, l);
            let until = self.clock_ns + self.charge(&before, false, true, true).round() as u64;
            self.khugepaged.after_op(&self.k, until);
            self.reporting.after_op(&self.k, until);
            self.hints.after_op(&self.k, until);
            self.advance(until);
            if !matches!(l, Access::Hit | Access::Fault) {
                break;
            }
        }
        Outcome::Run { done, last }
    }

    /// The pages and faults of the next piece of a priced access run with `left` pages to go
    /// (see [`Machine::access_run_on_clock`]).
    fn piece_bounds(&self, left: u64) -> (u64, u64) {
        let due = [self.sampling.map(|(_, at)| at), self.khugepaged.next_wake_ns, self.reporting.due(), self.hints.due()].into_iter().flatten().min();
        let faults = if self.latency.is_some() { 1 } else { u64::MAX };
        let (Some(at), Some(c)) = (due, self.costs.as_ref()) else { return (left, faults) };
        let rem = at.saturating_sub(self.clock_ns) as f64;
        let faults = ((rem / self.dearest_fault_ns()).floor() as u64).clamp(1, faults);
        let pages = if c.touch_ns_per_page > 0.0 { ((rem / c.touch_ns_per_page).floor() as u64).max(1) } else { left };
        (pages.min(left), faults)
    }

    /// The most one access's fault can cost: a fault of any size the profile prices (a size it
    /// lacks costs a 4 KiB fault), with every frame of it one the host had dropped, or a
    /// zero-page read; plus the dearest folio free (a copy-on-write fault may free the folio it
    /// copied from).
    fn dearest_fault_ns(&self) -> f64 {
        let zero = self.costs.as_ref().map_or(0.0, |c| c.zero_page_read_ns);
        let host = |o: usize| if o == 0 { self.host_base_fault_ns } else { self.host_fault_ns * (1u64 << o) as f64 };
        let fault = (0..ORDERS).map(|o| self.order_ns[o] + host(o)).fold(zero, f64::max);
        (fault + self.free_ns.iter().copied().fold(0.0, f64::max)).max(1.0)
    }

    /// Run one step in the current mm (a source whose events arrive with their process made
    /// current, as the replay's do).
    pub fn step_current(&mut self, step: Step) -> Outcome {
        let mm = self.k.current_mm();
        self.step(mm, step)
    }

    /// The model's invariants (mm/debug.c's checks, CONFIG_DEBUG_VM): all of them, or those of
    /// what touched `ranges` (of the current mm) plus the cheap global ones.
    pub fn check(&self, ranges: Option<&[(u64, u64)]>) -> Result<(), String> {
        match ranges {
            None => self.k.check_invariants(),
            Some(r) => self.k.check_invariants_in(r),
        }
    }
}
