//! The workload language (docs/workload-format.md, version 1): what a program does to its
//! address space, written so that the model and the live executor run the very same operations.
//!
//! ```text
//! thplab-workload 1
//! mmap big 256M+12K              # private anonymous, placed as the kernel places it
//! touch big write                # one write per 4 KiB page, in address order
//! mmap small 3M align=2M offset=4K
//! touch small read
//! touch small write stride=8K    # every other page
//! mmap hp 8M
//! madvise hp hugepage
//! touch hp write stride=64K      # every 16th page
//! munmap big[248K+8K] every=256K # an 8 KiB hole at the end of every 256 KiB
//! ```
//!
//! Parsing is the only thing here that can fail; the error names the file, the line and what is
//! valid. Nothing in this crate does I/O: callers pass the text.
//!
//! One operation type. [`OpKind`] is the statement the model steps and the live executor runs:
//! the model's workload source (`sim::run_with`, its step `Sim::op`) matches on it and performs it
//! as the kernel calls of the driver (`sim::driver::Step`); the live executor sends it to its child
//! as is (serde, `live::executor::wire`) with the address the parent resolved for it, and the
//! child's op loop (`live::executor::tasks`) matches on it and makes the system call. The call's
//! name in the results is [`Workload::call_name`]. A new statement is added here (parser,
//! [`OpKind`], [`OpKind::range`] if it acts on a range, [`Workload::call_name`]), in the model's
//! step and in the live op loop, and nowhere else (the `mlock`/`munlock` commit shows it).
//!
//! Recordings (`sim::replay`) do not go through this type: a recorded system call carries the
//! kernel's own arguments (addresses, flags, fds of a program we did not write), replays what the
//! workload language cannot say (mremap, execve, clone without CLONE_VM, userfaultfd, io_uring
//! buffers, recorded faults at recorded addresses) and needs the kernel-level split the language
//! hides (`mlock` as its VM_LOCKED flags and its populate apart, a brk learnt from `brk(0)`). They
//! feed the driver's `Step`, the machine's kernel-call interface that the workload source, the
//! replay and torture's draws share; making recordings produce `OpKind` would give the language
//! statements no workload should write. So the driver keeps kernel calls, and a statement is a
//! sequence of them, written once in the model's step.
//!
//! Module map:
//! - [`parse`]: the parser of the language (docs/workload-format.md).
//! - [`touch`]: which pages a `touch` visits, in which order (model and executor alike).
//! - [`access`]: access streams: the byte offsets an `access` statement visits.

use serde::{Deserialize, Serialize};

pub mod access;
mod parse;
mod touch;

pub use parse::{parse, MAX_REPEAT_ITERATIONS};
pub use access::{AccessPlan, AccessStream, Pattern};
pub use touch::{Pacing, TouchPlan};

/// The format version this parser reads.
pub const FORMAT_VERSION: u32 = 1;

/// A parsed workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// Where the text came from, for messages (`examples/seed-anon-1g.thpw`).
    pub source: String,
    pub regions: Vec<RegionDecl>,
    /// Files: memfds, POSIX shm objects, files on tmpfs mounts.
    pub files: Vec<FileDecl>,
    /// Private tmpfs mounts the workload asks for.
    pub mounts: Vec<MountDecl>,
    /// Processes and threads: `main` (index 0, the workload's own process) and every `fork NAME`,
    /// `thread NAME` and `vfork NAME`.
    pub procs: Vec<ProcDecl>,
    pub ops: Vec<Op>,
    /// `hugetlb_pool` statements, in order (they come before every operation).
    pub hugetlb_pools: Vec<HugetlbPool>,
}

/// A task of the workload: `main`, or one that `fork NAME`, `thread NAME` or `vfork NAME`
/// created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcDecl {
    pub name: String,
    /// The line of its `fork`, `thread` or `vfork` (0 for `main`).
    pub line: usize,
    /// The process that created it (`None` for `main`).
    pub parent: Option<ProcId>,
    /// How it was created: whether it has an mm of its own.
    pub kind: ProcKind,
}

impl ProcDecl {
    /// A thread or a vfork child: it runs in its parent's mm (clone with CLONE_VM; kernel/fork.c:
    /// `copy_mm` takes a reference to the parent's mm instead of `dup_mm`).
    pub fn shares_mm(&self) -> bool {
        matches!(self.kind, ProcKind::Thread | ProcKind::Vfork)
    }
}

/// How a task of the workload came to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProcKind {
    /// The workload's own process.
    Main,
    /// `fork NAME`: `fork()`, a process with a copy of main's mm.
    Fork,
    /// `thread NAME`: `pthread_create` (clone with CLONE_VM|CLONE_THREAD|...): a thread of main,
    /// in main's mm.
    Thread,
    /// `vfork NAME {`: clone(CLONE_VM|CLONE_VFORK), a process in main's mm; main does not run
    /// until it exits.
    Vfork,
}

impl ProcKind {
    /// The statement that creates it.
    pub fn word(self) -> &'static str {
        match self {
            ProcKind::Main => "main",
            ProcKind::Fork => "fork",
            ProcKind::Thread => "thread",
            ProcKind::Vfork => "vfork",
        }
    }
}

/// Index into [`Workload::procs`]; `ProcId::MAIN` is the workload's own process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ProcId(pub u32);

impl ProcId {
    pub const MAIN: ProcId = ProcId(0);
}

/// The name of the workload's own process.
pub const MAIN_PROC: &str = "main";

/// `huge=` of a tmpfs mount (`mm/shmem.c: shmem_parse_huge`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TmpfsHuge {
    Never,
    Always,
    WithinSize,
    Advise,
}

impl TmpfsHuge {
    pub const WORDS: &'static [&'static str] = &["never", "always", "within_size", "advise"];
    pub fn parse(t: &str) -> Option<TmpfsHuge> {
        Some(match t {
            "never" => TmpfsHuge::Never,
            "always" => TmpfsHuge::Always,
            "within_size" => TmpfsHuge::WithinSize,
            "advise" => TmpfsHuge::Advise,
            _ => return None,
        })
    }
    pub fn word(self) -> &'static str {
        match self {
            TmpfsHuge::Never => "never",
            TmpfsHuge::Always => "always",
            TmpfsHuge::WithinSize => "within_size",
            TmpfsHuge::Advise => "advise",
        }
    }
}

/// A tmpfs mount declared with `tmpfs NAME huge=...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountDecl {
    pub name: String,
    pub huge: TmpfsHuge,
    pub line: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MountId(pub u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FileId(pub u32);

/// What kind of file a name stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// `memfd_create(NAME, 0)`: an unlinked file on the internal shmem mount (shm_mnt).
    Memfd,
    /// `shm_open(NAME, O_CREAT|O_RDWR)`: a linked file on /dev/shm (None: the machine's
    /// /dev/shm) or on a declared tmpfs mount.
    PosixShm { mount: Option<MountId> },
    /// `open(MOUNT/NAME, O_CREAT|O_RDWR)` on a declared tmpfs mount.
    Tmpfs { mount: MountId },
    /// `memfd_create(NAME, MFD_HUGETLB | MFD_HUGE_2MB or MFD_HUGE_1GB)` (`memfd NAME hugetlb[=SIZE]`):
    /// an unlinked file on the internal hugetlbfs mount of that size, grown by ftruncate.
    HugetlbMemfd { page: HugePage },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileDecl {
    pub name: String,
    pub kind: FileKind,
    pub line: usize,
}

/// The mode of a `fallocate`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FallocMode {
    /// 0: allocate, the size grows to cover the range.
    Allocate,
    /// FALLOC_FL_KEEP_SIZE (`keep`): allocate, the size stays.
    KeepSize,
    /// FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE (`punch`).
    PunchHole,
}

impl FallocMode {
    /// The mode argument of fallocate(2).
    pub fn bits(self) -> i32 {
        use linux_abi::fcntl::{FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE};
        (match self {
            FallocMode::Allocate => 0,
            FallocMode::KeepSize => FALLOC_FL_KEEP_SIZE,
            FallocMode::PunchHole => FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
        }) as i32
    }
}

/// What a mapping maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Backing {
    /// MAP_PRIVATE|MAP_ANONYMOUS.
    PrivateAnon,
    /// MAP_SHARED|MAP_ANONYMOUS (shmem_zero_setup: an unlinked shmem file of the mapping's size).
    SharedAnon,
    /// MAP_SHARED of a file, from byte `pgoff` of it.
    SharedFile { file: FileId, pgoff: u64 },
    /// MAP_PRIVATE of a file, from byte `pgoff` of it: reads map the file's folios read-only,
    /// writes copy a page at a time into anonymous memory.
    PrivateFile { file: FileId, pgoff: u64 },
    /// `MAP_HUGETLB|MAP_ANONYMOUS` with MAP_SHARED or MAP_PRIVATE and MAP_NORESERVE
    /// (`mmap NAME SIZE hugetlb[=2M|1G] [shared] [noreserve]`): pages from the hugetlb pool.
    Hugetlb { page: HugePage, shared: bool, noreserve: bool },
}

/// A hugetlb page size (x86-64's two hstates): `2M` (the default hstate) or `1G`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum HugePage {
    Size2M,
    Size1G,
}

impl HugePage {
    pub const WORDS: [&'static str; 2] = ["2M", "1G"];
    pub fn parse(s: &str) -> Option<HugePage> {
        match s {
            "2M" => Some(HugePage::Size2M),
            "1G" => Some(HugePage::Size1G),
            _ => None,
        }
    }
    pub fn word(self) -> &'static str {
        match self {
            HugePage::Size2M => "2M",
            HugePage::Size1G => "1G",
        }
    }
    /// log2 of the size: MAP_HUGE_2MB/MAP_HUGE_1GB are this << MAP_HUGE_SHIFT.
    pub fn shift(self) -> u32 {
        match self {
            HugePage::Size2M => 21,
            HugePage::Size1G => 30,
        }
    }
    pub fn bytes(self) -> u64 {
        1 << self.shift()
    }
    /// The sysfs directory of its pool: /sys/kernel/mm/hugepages/hugepages-{kB}kB.
    pub fn kb(self) -> u64 {
        self.bytes() >> 10
    }
}

/// `hugetlb_pool SIZE N [overcommit=N]`: the machine's pool of SIZE pages for the run
/// (`nr_hugepages`, `nr_overcommit_hugepages`), set before the first operation; the live run
/// sets it through the settings guard and restores it after.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HugetlbPool {
    pub page: HugePage,
    pub pages: u64,
    pub overcommit: Option<u64>,
    pub line: usize,
}

/// A named mapping, declared by `mmap`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionDecl {
    pub name: String,
    pub len: u64,
    pub line: usize,
}

/// Index into [`Workload::regions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RegionId(pub u32);

/// Where `mmap` puts a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Placement {
    /// No hint: the kernel's rule (`__get_unmapped_area`, 2 MiB alignment for lengths that are
    /// multiples of 2 MiB).
    Kernel,
    /// The highest free address with `addr % align == offset` (the workload cares).
    Aligned { align: u64, offset: u64 },
    /// Exactly here (MAP_FIXED_NOREPLACE).
    Fixed(u64),
}

/// Memory protection of a mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Prot {
    pub read: bool,
    pub write: bool,
    pub exec: bool,
}

impl Prot {
    pub const RW: Prot = Prot { read: true, write: true, exec: false };
    pub const NONE: Prot = Prot { read: false, write: false, exec: false };

    pub fn parse(text: &str) -> Option<Prot> {
        if text == "none" {
            return Some(Prot::NONE);
        }
        let mut p = Prot::NONE;
        for c in text.chars() {
            match c {
                'r' if !p.read => p.read = true,
                'w' if !p.write => p.write = true,
                'x' if !p.exec => p.exec = true,
                _ => return None,
            }
        }
        (!text.is_empty()).then_some(p)
    }

    /// `PROT_*` bits.
    pub fn bits(self) -> i32 {
        (self.read as i32) | ((self.write as i32) << 1) | ((self.exec as i32) << 2)
    }
}

impl std::fmt::Display for Prot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if *self == Prot::NONE {
            return f.write_str("none");
        }
        for (on, c) in [(self.read, 'r'), (self.write, 'w'), (self.exec, 'x')] {
            if on {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

/// `madvise(2)` advice the language knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Advice {
    /// MADV_HUGEPAGE (14)
    Hugepage,
    /// MADV_NOHUGEPAGE (15)
    Nohugepage,
    /// MADV_DONTNEED (4)
    Dontneed,
    /// MADV_COLLAPSE (25)
    Collapse,
    /// MADV_FREE (8)
    Free,
    /// MADV_POPULATE_READ (22)
    PopulateRead,
    /// MADV_POPULATE_WRITE (23)
    PopulateWrite,
    /// MADV_DONTFORK (10): fork leaves the range out of the child.
    Dontfork,
    /// MADV_DOFORK (11)
    Dofork,
    /// MADV_WIPEONFORK (18): the child gets the range empty (private anonymous only).
    Wipeonfork,
    /// MADV_KEEPONFORK (19)
    Keeponfork,
    /// MADV_REMOVE (9): a hole punched in the shmem file of a shared mapping.
    Remove,
}

impl Advice {
    pub const WORDS: &'static [&'static str] = &[
        "hugepage",
        "nohugepage",
        "dontneed",
        "collapse",
        "free",
        "populate_read",
        "populate_write",
        "dontfork",
        "dofork",
        "wipeonfork",
        "keeponfork",
        "remove",
    ];

    pub fn parse(text: &str) -> Option<Advice> {
        Some(match text {
            "hugepage" => Advice::Hugepage,
            "nohugepage" => Advice::Nohugepage,
            "dontneed" => Advice::Dontneed,
            "collapse" => Advice::Collapse,
            "free" => Advice::Free,
            "populate_read" => Advice::PopulateRead,
            "populate_write" => Advice::PopulateWrite,
            "dontfork" => Advice::Dontfork,
            "dofork" => Advice::Dofork,
            "wipeonfork" => Advice::Wipeonfork,
            "keeponfork" => Advice::Keeponfork,
            "remove" => Advice::Remove,
            _ => return None,
        })
    }
    pub fn word(self) -> &'static str {
        match self {
            Advice::Hugepage => "hugepage",
            Advice::Nohugepage => "nohugepage",
            Advice::Dontneed => "dontneed",
            Advice::Collapse => "collapse",
            Advice::Free => "free",
            Advice::PopulateRead => "populate_read",
            Advice::PopulateWrite => "populate_write",
            Advice::Dontfork => "dontfork",
            Advice::Dofork => "dofork",
            Advice::Wipeonfork => "wipeonfork",
            Advice::Keeponfork => "keeponfork",
            Advice::Remove => "remove",
        }
    }
    /// The `MADV_*` constant.
    pub fn madv(self) -> i32 {
        use linux_abi::mman::*;
        (match self {
            Advice::Hugepage => MADV_HUGEPAGE,
            Advice::Nohugepage => MADV_NOHUGEPAGE,
            Advice::Dontneed => MADV_DONTNEED,
            Advice::Collapse => MADV_COLLAPSE,
            Advice::Free => MADV_FREE,
            Advice::PopulateRead => MADV_POPULATE_READ,
            Advice::PopulateWrite => MADV_POPULATE_WRITE,
            Advice::Dontfork => MADV_DONTFORK,
            Advice::Dofork => MADV_DOFORK,
            Advice::Wipeonfork => MADV_WIPEONFORK,
            Advice::Keeponfork => MADV_KEEPONFORK,
            Advice::Remove => MADV_REMOVE,
        }) as i32
    }
}

/// `prctl(PR_SET_THP_DISABLE, ...)` forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ThpDisable {
    /// `prctl(41, 1, 0, 0, 0)`: MMF_DISABLE_THP_COMPLETELY.
    Completely,
    /// `prctl(41, 1, PR_THP_DISABLE_EXCEPT_ADVISED, 0, 0)` (6.18).
    ExceptAdvised,
    /// `prctl(41, 0, 0, 0, 0)`.
    Clear,
}

/// A byte range inside a region: `[offset, offset + len)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    pub region: RegionId,
    pub offset: u64,
    pub len: u64,
    /// Repeat the range shifted by this many bytes while it stays inside the region.
    pub every: Option<u64>,
}

/// `Range::len` of a range that runs to the end of a region whose length is only known when
/// the workload runs (the heap).
pub const TO_END: u64 = u64::MAX;

impl Range {
    /// The length, with [`TO_END`] resolved against the region's length now.
    pub fn len_in(&self, region_len: u64) -> u64 {
        if self.len == TO_END {
            region_len.saturating_sub(self.offset)
        } else {
            self.len
        }
    }

    /// The (offset, len) pieces this range stands for, with `every=` expanded.
    pub fn pieces(&self, region_len: u64) -> Vec<(u64, u64)> {
        let len = self.len_in(region_len);
        match self.every {
            None => vec![(self.offset, len)],
            Some(step) => {
                let mut v = Vec::new();
                let mut off = self.offset;
                while off + len <= region_len {
                    v.push((off, len));
                    off += step;
                }
                v
            }
        }
    }
}

/// Order in which `touch` visits the selected pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TouchOrder {
    Sequential,
    Reverse,
    /// A permutation drawn with [`mm_types::prng::Prng`] from this seed.
    Random { seed: u64 },
}

impl Touch {
    /// This touch with its range's length resolved against the region's current length.
    pub fn resolved(&self, region_len: u64) -> Touch {
        Touch { range: Range { len: self.range.len_in(region_len), ..self.range }, ..*self }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Touch {
    pub range: Range,
    pub write: bool,
    pub order: TouchOrder,
    /// Distance between touched pages, a multiple of 4 KiB.
    pub stride: u64,
    /// Touch at most this many of the selected pages.
    pub count: Option<u64>,
    /// `rate=` or `duration=`: the pages are visited in chunks, each no earlier than its time
    /// ([`Pacing`]); `None`: as fast as the machine goes.
    pub pace: Option<Pace>,
}

/// How a paced touch spreads its pages over time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Pace {
    /// `rate=SIZE/s`: this many bytes of selected pages (4 KiB each) per second.
    Rate { bytes_per_sec: u64 },
    /// `duration=DURATION`: the whole touch spread evenly over this many ns.
    Duration { ns: u64 },
}

/// One operation, in program order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpKind {
    Mmap { region: RegionId, len: u64, prot: Prot, placement: Placement, backing: Backing },
    /// Mount a private tmpfs (the live executor does it in its own mount namespace).
    Mount(MountId),
    /// Create (and open) a file: memfd_create, shm_open or open(O_CREAT).
    Create(FileId),
    /// `ftruncate(fd, size)`.
    Ftruncate { file: FileId, size: u64 },
    /// `fallocate(fd, 0, offset, len)`.
    Fallocate { file: FileId, offset: u64, len: u64, mode: FallocMode },
    /// `pwrite(fd, buf, chunk, off)` calls covering `[offset, offset + len)`.
    Write { file: FileId, offset: u64, len: u64, chunk: u64 },
    Munmap(Range),
    Mprotect(Range, Prot),
    Madvise(Range, Advice),
    /// `mlock(2)` (mm/mlock.c: `do_mlock`): VM_LOCKED on the range, then `__mm_populate`, which
    /// faults it in through `populate_vma_page_range` (with FOLL_WRITE on a private writable
    /// mapping, mm/gup.c), counted in minflt.
    Mlock(Range),
    /// `munlock(2)`: VM_LOCKED goes (`apply_vma_lock_flags(start, len, 0)`); the pages stay.
    Munlock(Range),
    /// Move the program break by this many bytes (page-rounded like brk(2)).
    Brk { delta: i64 },
    Prctl(ThpDisable),
    Touch(Touch),
    /// Sleep this many nanoseconds (`sleep DURATION`): the model's clock moves on and
    /// khugepaged wakes on it; the live executor calls nanosleep.
    Sleep { ns: u64 },
    /// `phase NAME`: a named part of the run starts here (it ends where the next starts, or
    /// at the end); the result gives each phase's simulated time. No system call.
    Phase(String),
    /// `repeat DURATION {`: the `body` operations that follow run again and again while the
    /// run's own clock (the model's simulated clock, CLOCK_MONOTONIC live) is before this
    /// operation's start + `ns` when an iteration would start (the first always runs). Both
    /// sides count the iterations (the result's `repeats`). No system call.
    RepeatFor { ns: u64, body: usize },
    /// `access RANGE PATTERN ...`: loads and stores for the TLB model (faults like touches).
    Access(AccessStream),
    /// `read(2)` with O_DIRECT into the range, `block` bytes a call: each call pins its part of
    /// the buffer with `pin_user_pages_fast` (FOLL_WRITE), which faults in what is not mapped
    /// writable, and unpins it when the I/O completes.
    ReadDirect { range: Range, block: u64 },
    /// `fork()`: the process running it (always `main`) gets the child `ProcId`.
    Fork(ProcId),
    /// `pthread_create` in main: the thread `ProcId` runs in main's mm.
    Thread(ProcId),
    /// `vfork()` in main: the child `ProcId` runs in main's mm, and main waits until it exits.
    Vfork(ProcId),
    /// `_exit(0)` of the process running it: its address space goes away. In a thread or a
    /// vfork child the mm stays (its other users keep it): nothing happens to memory.
    Exit,
    /// `waitpid` of a child that has exited, or `pthread_join` of a thread that has (reaps it;
    /// nothing happens to memory).
    Wait(ProcId),
    /// `fragment [unmovable=PCT]` (model only): the machine's free memory made to look like a
    /// long-running machine's: every other free page held by the rest of the system, movable
    /// (page cache, other processes) in all but `unmovable_pct` percent of the pageblocks.
    Fragment { unmovable_pct: u32 },
    /// `drop_caches 2`: `echo 2 > /proc/sys/vm/drop_caches` (`drop_slab`): every shrinker runs,
    /// the THP deferred split shrinker among them (mm/huge_memory.c `deferred_split_scan`).
    DropSlab,
}

impl OpKind {
    /// The range of the region it acts on (munmap, mprotect, madvise, touch, access,
    /// read_direct): the live executor resolves its region's address for it before the run.
    pub fn range(&self) -> Option<&Range> {
        match self {
            OpKind::Munmap(r) | OpKind::Mprotect(r, _) | OpKind::Madvise(r, _) | OpKind::Mlock(r) | OpKind::Munlock(r) => Some(r),
            OpKind::ReadDirect { range, .. } => Some(range),
            OpKind::Touch(t) => Some(&t.range),
            OpKind::Access(a) => Some(&a.range),
            _ => None,
        }
    }

    /// Whether its result is the call's return value (brk: the new break) rather than 0 or an
    /// errno.
    pub fn returns_value(&self) -> bool {
        matches!(self, OpKind::Brk { .. })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    /// 1-based line in the source.
    pub line: usize,
    /// The process that runs it (`main` outside `fork NAME { … }` and `in NAME { … }` blocks).
    pub proc: ProcId,
    pub kind: OpKind,
}

/// The `pwrite` calls a `write FILE[OFFSET+LENGTH] chunk=SIZE` statement makes, as
/// (offset, length): `chunk` bytes each, the last one shorter. The model and the live executor
/// both make exactly these calls.
pub fn write_calls(offset: u64, len: u64, chunk: u64) -> impl Iterator<Item = (u64, u64)> {
    let end = offset + len;
    let chunk = chunk.max(1);
    (0..len.div_ceil(chunk)).map(move |i| {
        let at = offset + i * chunk;
        (at, chunk.min(end - at))
    })
}

/// The calls a `read_direct RANGE block=SIZE` statement makes over `[offset, offset + len)`, as
/// (offset, length): `block` bytes each, the last one shorter.
pub fn read_direct_calls(offset: u64, len: u64, block: u64) -> impl Iterator<Item = (u64, u64)> {
    write_calls(offset, len, block)
}

/// The name of the implicit region that `brk` grows.
pub const HEAP: &str = "heap";

impl Workload {
    /// Whether it uses hugetlb (a pool, a MAP_HUGETLB mapping or an MFD_HUGETLB memfd): its
    /// results then carry the hugetlb lines of /proc/meminfo.
    pub fn uses_hugetlb(&self) -> bool {
        !self.hugetlb_pools.is_empty()
            || self.files.iter().any(|f| matches!(f.kind, FileKind::HugetlbMemfd { .. }))
            || self.ops.iter().any(|o| matches!(o.kind, OpKind::Mmap { backing: Backing::Hugetlb { .. }, .. }))
    }

    pub fn region(&self, id: RegionId) -> &RegionDecl {
        &self.regions[id.0 as usize]
    }
    pub fn region_by_name(&self, name: &str) -> Option<RegionId> {
        self.regions.iter().position(|r| r.name == name).map(|i| RegionId(i as u32))
    }
    pub fn file(&self, id: FileId) -> &FileDecl {
        &self.files[id.0 as usize]
    }
    pub fn mount(&self, id: MountId) -> &MountDecl {
        &self.mounts[id.0 as usize]
    }
    pub fn file_by_name(&self, name: &str) -> Option<FileId> {
        self.files.iter().position(|f| f.name == name).map(|i| FileId(i as u32))
    }
    pub fn proc(&self, id: ProcId) -> &ProcDecl {
        &self.procs[id.0 as usize]
    }
    /// Whether the workload has processes (or threads) besides `main`.
    pub fn forks(&self) -> bool {
        self.procs.len() > 1
    }
    /// Whether some task of the workload shares main's mm (a thread or a vfork child).
    pub fn shares_mm(&self) -> bool {
        self.procs.iter().any(ProcDecl::shares_mm)
    }
    pub fn mount_by_name(&self, name: &str) -> Option<MountId> {
        self.mounts.iter().position(|m| m.name == name).map(|i| MountId(i as u32))
    }
    /// How a result's `calls` list names the system call a statement makes (`mmap`,
    /// `madvise(collapse)`, `mprotect(r)`, `brk`, `prctl(PR_SET_THP_DISABLE)`), the same for the
    /// model and the live executor; empty for a statement that makes no call (touch, access,
    /// sleep, phase, repeat, exit).
    pub fn call_name(&self, k: &OpKind) -> String {
        match k {
            OpKind::Mmap { .. } => "mmap".into(),
            OpKind::Munmap(_) => "munmap".into(),
            OpKind::Mprotect(_, p) => format!("mprotect({p})"),
            OpKind::Madvise(_, a) => format!("madvise({})", a.word()),
            OpKind::Mlock(_) => "mlock".into(),
            OpKind::Munlock(_) => "munlock".into(),
            OpKind::Brk { .. } => "brk".into(),
            OpKind::Prctl(_) => "prctl(PR_SET_THP_DISABLE)".into(),
            OpKind::Sleep { .. } | OpKind::Phase(_) | OpKind::RepeatFor { .. } => String::new(),
            OpKind::Touch(_) | OpKind::Access(_) | OpKind::Exit | OpKind::Fragment { .. } => String::new(),
            OpKind::DropSlab => "write(drop_caches, 2)".into(),
            OpKind::ReadDirect { .. } => "read(O_DIRECT)".into(),
            OpKind::Mount(_) => "mount(tmpfs)".into(),
            OpKind::Create(f) => match self.file(*f).kind {
                FileKind::Memfd | FileKind::HugetlbMemfd { .. } => "memfd_create".into(),
                FileKind::PosixShm { .. } => "shm_open".into(),
                FileKind::Tmpfs { .. } => "open".into(),
            },
            OpKind::Ftruncate { .. } => "ftruncate".into(),
            OpKind::Fallocate { .. } => "fallocate".into(),
            OpKind::Write { .. } => "pwrite".into(),
            OpKind::Fork(_) => "fork".into(),
            OpKind::Thread(_) => "pthread_create".into(),
            OpKind::Vfork(_) => "vfork".into(),
            OpKind::Wait(p) if self.proc(*p).kind == ProcKind::Thread => "pthread_join".into(),
            OpKind::Wait(_) => "wait4".into(),
        }
    }
    /// Pages the workload touches in total (an upper bound on faults), for progress bars.
    pub fn touched_pages(&self) -> u64 {
        self.ops
            .iter()
            .map(|op| match &op.kind {
                OpKind::Touch(t) if t.range.len != TO_END => TouchPlan::new(t, 0).len(),
                _ => 0,
            })
            .sum()
    }
}

/// Errors carry the source name and the 1-based line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}:{line}: {message}")]
pub struct WorkloadError {
    pub source_name: String,
    pub line: usize,
    pub message: String,
}
