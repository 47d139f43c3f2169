//! Replay of a recording (`thplab record`, docs/trace-format.md) in the model under any
//! settings.
//!
//! shmem: memfd_create, files opened on a tmpfs (the recorder resolves every open's path and
//! device, and the tmpfs mounts with their `huge=`), /dev/zero and MAP_SHARED|MAP_ANONYMOUS
//! become shmem inodes of the image's model, with a per-process fd table (dup, dup2, dup3,
//! fcntl F_DUPFD, close; file positions through write, read, lseek and O_APPEND). write,
//! pwrite64, writev, pwritev(2), ftruncate and fallocate go through the model's shmem paths;
//! MAP_SHARED mappings of these files fault through the model's shmem fault path; unlink makes a
//! file's later mappings anonymous shmem (`shmem_mmap`: i_nlink 0).
//!
//! Placement: shmem placement depends on the THP knobs (`shmem_get_unmapped_area`), so a
//! mapping recorded under the recording machine's knobs may sit elsewhere under others. Every
//! mapping the model does not back is kept as a placeholder VMA, so the model's address space is
//! the recorded one; for a mapping without MAP_FIXED the model computes its placement under the
//! recording's knobs (which must give the recorded address: counted in `placements_checked` /
//! `placements_matched`) and under the replay's; when they differ, the mapping is relocated and
//! from then on every non-fixed mapping is placed by the model, with recorded addresses (faults,
//! munmap, mprotect, madvise, mremap) translated range by range.
//!
//! The recording was made with THP disabled for the program (PR_SET_THP_DISABLE) and without
//! address randomisation, so it holds every first touch of every 4 KiB page and the real
//! address of every mapping. The replay runs every process of the recording in one simulated
//! machine, one mm per process image (a new one at each successful execve, `mm_alloc`; a
//! child forked without CLONE_VM gets a copy of its parent's mm, `fork`, when the parent's
//! clone record says so, and its events wait for that record): anonymous private mappings
//! (mmap, brk, the stack and anonymous areas of the exec snapshot) go through the model, which
//! decides under the given settings whether each recorded fault still faults (a write to a page
//! fork shared copies it) and which folio size it gets; faults elsewhere (file mappings, the
//! vDSO, CLONE_VM children before their execve) do not depend on the anonymous THP settings and
//! count as recorded ("passthrough"). The census is of anonymous memory, taken at each
//! process's exit_group, before teardown; an image that a later execve replaced is not in it
//! (its memory is gone by the process's exit).
//!
//! Kernel sources for the syscall semantics: `mm/mmap.c` (MAP_FIXED replaces), `mm/mremap.c`,
//! `mm/madvise.c`, `mm/mmap.c: brk`, `mm/mmap.c: expand_downwards` (stack growth),
//! `kernel/sys.c: prctl_set_thp_disable`, `arch/x86/include/asm/trap_pf.h` (error code bits).
//!
//! Modules, one job each (all `impl Replay` blocks over the types defined here):
//! - `events`: an event to what it models, and `--check` over what it touched.
//! - `image`: process images (their relocation and fd tables), retired at exit or execve.
//! - `process`: execve, fork and CLONE_VM children, exit_group.
//! - `mm_calls`: munmap, mremap, mprotect, madvise, mlock and friends, brk, prctl.
//! - `placement`: where mmap puts a mapping, relocation, SysV shm attach and detach.
//! - `files`: memfd, tmpfs opens, the fd table, shmem writes, ftruncate, fallocate, unlink.
//! - `gup`: populating calls, O_DIRECT pins' neighbours, userfaultfd.
//! - `accesses`: recorded faults, stack growth, recorded accesses for the TLB model.
//! - `report`: the end of the replay and its warnings.
//!
//! Module map:
//! - [`events`]: the dispatch of a recorded event to what it models, and `--check`.
//! - [`image`]: process images: one process between execve and exit.
//! - [`process`]: execve, fork/clone and exit of a recording.
//! - [`mm_calls`]: the memory system calls: munmap, mremap, mprotect, madvise, mlock, brk, prctl.
//! - [`placement`]: where each mapping goes (MAP_FIXED, hints, the recorded address).
//! - [`files`]: memfd_create, tmpfs opens, /dev/zero, the fd table and file I/O.
//! - [`gup`]: get_user_pages users: populating calls, O_DIRECT pins, userfaultfd.
//! - [`accesses`]: recorded page faults and accesses entering `handle_mm_fault`.
//! - [`report`]: the end of a replay: images retired, counters summed, warnings.

use std::collections::{BTreeMap, HashMap};

use mm::debug::CensusReport;
use thp_abi::FallbackReason;
use mm::gup::Populate;
use mm::madvise::{Madvise, ThpDisable};
use mm::mmap::{prot_to_vm, MapBacking, MmapPlacement};
use mm::shmem::{InodeId, SbHuge, SbId, SHM_MNT};
use mm::{Access, BootParams, Kernel};
use mm_types::PAGE_SIZE;
use trace::{perm, Event, EventBody, Header, MountEntry, PathInfo, SyscallKind, TMPFS_MAGIC};
use thp_abi::{Counters, ThpSettings};

use crate::driver::{Machine, Outcome, Step};
use crate::file_pages::FilePages;
use crate::{MachineConfig, SimError};

use linux_abi::fcntl::{AT_REMOVEDIR, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, F_DUPFD, F_DUPFD_CLOEXEC, O_APPEND, O_CREAT, O_DIRECT, O_TRUNC, O_WRONLY, RWF_APPEND};
use linux_abi::io_uring;
use linux_abi::memfd::MFD_HUGETLB;
use linux_abi::mman::{
    MADV_COLLAPSE, MADV_DOFORK, MADV_DONTFORK, MADV_DONTNEED, MADV_FREE, MADV_HUGEPAGE, MADV_KEEPONFORK, MADV_REMOVE, MADV_WIPEONFORK, MADV_NOHUGEPAGE, MADV_POPULATE_READ, MADV_POPULATE_WRITE, MAP_ANONYMOUS,
    MAP_FIXED, MAP_FIXED_NOREPLACE, MAP_LOCKED, MAP_NORESERVE, MAP_POPULATE, MAP_SHARED, MAP_STACK, MREMAP_FIXED, PROT_READ, PROT_WRITE,
};
use linux_abi::prctl::PR_SET_THP_DISABLE;
use linux_abi::sched::{CLONE_VFORK, CLONE_VM};
use linux_abi::x86_pf::PF_WRITE;

mod accesses;
mod events;
mod files;
mod gup;
mod image;
mod mm_calls;
mod placement;
mod process;
mod report;

pub use report::{warnings, MAX_MISSES};

const O_CREAT_WRONLY_TRUNC: u64 = O_CREAT | O_WRONLY | O_TRUNC;
/// How far below its start a stack may grow in one step (the default RLIMIT_STACK).
const STACK_LIMIT: u64 = 8 << 20;

/// Counts of what the replay did: the result's `model.replay` section itself (every field is
/// documented there); `warnings` holds the replay's own sentences until [`warnings`] adds the
/// placement misses at the end, and `placement_misses` is filled from [`PlacementMiss`]es then.
pub type ReplayStats = uapi::ReplayReport;

/// The knob a path of the THP sysfs tree names (`enabled`, `hugepages-64kB/enabled`,
/// `khugepaged/max_ptes_none`), or None for any other path.
pub fn thp_knob_of_path(path: &[u8]) -> Option<&str> {
    let rest = path.strip_prefix(b"/sys/kernel/mm/transparent_hugepage/")?;
    std::str::from_utf8(rest).ok().map(|k| k.trim_end_matches('/')).filter(|k| !k.is_empty())
}

/// A mapping without MAP_FIXED that the model, under the recording's knobs, would have placed
/// elsewhere than the kernel did: it stays where the kernel put it. The schema's type (addresses
/// as `0x…` text, the model's errno name where it finds no room).
pub use uapi::result::PlacementMiss;

/// What an fd refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FileRef {
    Shmem(InodeId),
    DevZero,
    /// A file of a filesystem whose `get_unmapped_area` is `thp_get_unmapped_area` (ext2/3/4,
    /// xfs, btrfs, erofs, fuse: their file_operations), by the `statfs` type recorded at open.
    ThpArea,
    Other,
}

/// The kernel's identity of a file: device major, minor and inode number (`map` records,
/// `path` records).
type FileId = (u32, u32, u64);

/// `statfs` f_type of the filesystems whose files are placed by `thp_get_unmapped_area`
/// (fs/ext4/file.c, fs/ext2/file.c, fs/xfs/xfs_file.c, fs/btrfs/file.c, fs/erofs/data.c,
/// fs/fuse/file.c: `.get_unmapped_area`; include/uapi/linux/magic.h). Not overlayfs, whose
/// file_operations have none.
const THP_AREA_FS_MAGIC: [u64; 5] = [0xEF53, 0x5846_5342, 0x9123_683E, 0xE0F5_E1E2, 0x6573_5546];

/// An open file description (shared by dup'ed fds).
#[derive(Clone, Copy, Debug)]
struct Desc {
    file: FileRef,
    pos: u64,
    append: bool,
    /// Opened with O_DIRECT: a read pins its buffer (mm/gup.c: `pin_user_pages_fast` through
    /// `iov_iter_extract_pages` in the block layer's direct I/O) instead of copying into it.
    direct: bool,
}

struct Image {
    /// Its mm in the replay's one machine.
    mm: mm::MmId,
    /// The process and which of the replay's images this is (0 = the first).
    pid: u32,
    ordinal: u64,
    exe: String,
    stack: Option<(u64, u64)>,
    brk_known: bool,
    /// Made by an execve (or the first process's): an exec snapshot sets it up.
    from_exec: bool,
    /// Its layout came from an exec snapshot (a forked image: its parent's did).
    exec_snapshot: bool,
    populate_faults: u64,
    /// The mapped pages of its file mappings and vDSO (which the model does not back), and the
    /// faults GUP took for them (in its minflt).
    files: FilePages,
    file_gup_faults: u64,
    fds: HashMap<i32, usize>,
    descs: Vec<Desc>,
    /// tmpfs devices → the image's mounts.
    sbs: HashMap<(u32, u32), SbId>,
    /// Recorded range start → (end, model start), for relocated mappings.
    reloc: BTreeMap<u64, (u64, u64)>,
    relocating: bool,
    /// The io_uring buffers it registered (model addresses): their folios are pinned for the
    /// long term (until the ring goes), and a fork copies them for the child.
    pinned: Vec<(u64, u64)>,
    /// It registered buffers whose ranges the recording does not give.
    pinned_unknown: bool,
}

#[derive(Default)]
struct Proc {
    image: Option<Image>,
    /// A new process whose parent's clone/fork record has not come yet: (the parent, its
    /// events so far). Whether it shares the parent's mm (CLONE_VM: vfork, posix_spawn) or
    /// got a copy (fork) is known from that record; its events wait for it.
    pending: Option<(u32, Vec<Event>)>,
    passthrough: u64,
    exited: bool,
    /// Faults before this time happen inside execve (bss clearing, the loader's mappings):
    /// the program's own count starts after its first execve, as minflt measured from that
    /// exec does; a later execve's, and a descendant's, count as recorded.
    exec_until_ns: u64,
    /// An exec snapshot that came before the record of its execve (time, maps): applied to the
    /// image that execve makes.
    early_snapshot: Option<(u64, Vec<trace::MapEntry>)>,
    /// Where the stack of its next exec snapshot starts (an `exec_stack` record, which comes
    /// just before its `exec_maps`; recordings before format 2.4 have none).
    start_stack: Option<u64>,
}

pub struct Replay<'a> {
    /// The one simulated machine every process image runs in; every change to it is a
    /// `Step` of the event's process.
    m: Box<Machine>,
    settings: &'a ThpSettings,
    /// The recording machine's knobs (from the trace header), when known.
    rec_settings: Option<ThpSettings>,
    mounts: Vec<MountEntry>,
    /// A thread's resolved path, waiting for its system call record.
    paths: HashMap<u32, PathInfo>,
    /// Per thread, the iovecs of its next vmsplice, io_uring_register or process_vm_writev
    /// (an `iovecs` record): the call's kind code and (base, length) each.
    iovecs: HashMap<u32, (u8, Vec<(u64, u64)>)>,
    /// Per process, its shmat's address and flags, until the mapping's `map` record (which
    /// gives the segment's size) comes.
    shmat: HashMap<u32, (u64, u64)>,
    /// System V segments by the inode of their file on shm_mnt (the `map` record's `ino`).
    /// Linked tmpfs files by (device, path): one namespace for every process, so that two
    /// processes that open one name share its page cache.
    names: HashMap<(u32, u32, Vec<u8>), InodeId>,
    sysv: HashMap<u64, InodeId>,
    /// The file of each `map` record by (process, address), oldest first, from
    /// [`Replay::prescan`]: an mmap of a descriptor the replay did not see opened (received over
    /// a unix socket with SCM_RIGHTS, taken with pidfd_getfd, opened through /proc/PID/fd) is
    /// known by the file its `map` record names, which comes after the call's own record.
    map_files: HashMap<(u32, u64), std::collections::VecDeque<(u64, FileId, bool)>>,
    /// The model's shmem inode of each file (device, inode) seen mapped through a descriptor
    /// the replay knows, or opened by a path that existed.
    shmem_ids: HashMap<FileId, InodeId>,
    procs: BTreeMap<u32, Proc>,
    /// Clone records whose child's creation record has not come yet: child → (parent,
    /// whether it shares the parent's mm).
    clone_records: HashMap<u32, (u32, bool)>,
    /// Folded results of finished images.
    done_counters: Counters,
    done_minflt: u64,
    done_images: Vec<ImageResult>,
    /// `--explain`: the range whose faults every image keeps.
    explain: Option<(u64, u64)>,
    pub stats: ReplayStats,
    /// The first [`MAX_MISSES`] placements the model could not reproduce.
    misses: Vec<PlacementMiss>,
    /// The clock follows the recording's timestamps (`follow_recorded_time`).
    recorded_time: bool,
    /// What O_DIRECT reads pinned (the result's `io`, as a workload's `read_direct`).
    io: Option<uapi::result::IoResult>,
    check: bool,
    source: String,
    /// The recording has an exec snapshot for every execve (`flags::EXEC_SNAPSHOT_EVERY`).
    every_exec_snapshot: bool,
    /// Images made by an execve after the first process's that had no exec snapshot.
    images_without_snapshot: u64,
    /// `record --accesses`: the TLB model the recorded accesses drive, their regions' names,
    /// each region's lowest and highest page (its footprint), and what became of them.
    tlb: Option<crate::access::TlbRun>,
    access_names: Vec<String>,
    access_span: Vec<(u64, u64)>,
    access_counts: uapi::RecordedAccesses,
}

impl<'a> Replay<'a> {
    pub fn new(header: &Header, settings: &'a ThpSettings, machine: &MachineConfig, check: bool, source: &str) -> Replay<'a> {
        // A replay boots with /dev/shm's default huge=, whatever the machine's option says.
        let params = BootParams { dev_shm_huge: BootParams::default().dev_shm_huge, ..machine.boot_params() };
        let mut warnings = Vec::new();
        let rec_settings = (!header.thp_settings.is_empty())
            .then(|| {
                let mut s = ThpSettings::default();
                match s.apply_file("the recording's THP knobs", &String::from_utf8_lossy(&header.thp_settings)) {
                    Ok(()) => {
                        if let Some(w) = s.unknown_warning() {
                            warnings.push(format!("recorded on {} with {w}", header.kernel_release));
                        }
                        Some(s)
                    }
                    Err(e) => {
                        warnings.push(format!("{e}: placements are checked under the replay's knobs instead"));
                        None
                    }
                }
            })
            .flatten();
        let recorded_unknown_knobs = rec_settings.as_ref().map(|s| s.unknown.clone()).unwrap_or_default();
        if header.thp_settings.is_empty() {
            warnings.push("the recording has no THP knobs (format 1.x): placements are checked under the replay's knobs".into());
        }
        let mut k = Kernel::boot(&params, settings);
        // The machine's hugetlb pools (what MAP_HUGETLB mappings of the recording take).
        if let Err((_, e)) = crate::hugetlb::set_pools(&mut k, &machine.hugetlb_pools) {
            warnings.push(e);
        }
        let mut r = Replay {
            m: Box::new(Machine::new(k)),
            settings,
            rec_settings,
            mounts: Vec::new(),
            paths: HashMap::new(),
            iovecs: HashMap::new(),
            shmat: HashMap::new(),
            sysv: HashMap::new(),
            map_files: HashMap::new(),
            shmem_ids: HashMap::new(),
            names: HashMap::new(),
            procs: BTreeMap::new(),
            clone_records: HashMap::new(),
            done_counters: Counters::default(),
            done_minflt: 0,
            done_images: Vec::new(),
            explain: None,
            stats: ReplayStats {
                lost_events: header.lost_events,
                warnings,
                recorded_settings_unknown: recorded_unknown_knobs,
                ..Default::default()
            },
            misses: Vec::new(),
            recorded_time: false,
            io: None,
            check,
            source: source.to_string(),
            every_exec_snapshot: header.flags & trace::flags::EXEC_SNAPSHOT_EVERY != 0,
            images_without_snapshot: 0,
            tlb: None,
            access_names: Vec::new(),
            access_span: Vec::new(),
            access_counts: uapi::RecordedAccesses::default(),
        };
        // The recording starts at the root's execve: it runs a fresh image.
        r.m.set_hz(machine.hz);
        let root = r.new_image(header.root_pid, String::from_utf8_lossy(&header.exec_path).into_owned());
        // The root's exec ends where its address-space snapshot is taken (or, without a
        // snapshot, at its first record).
        let until = if header.flags & trace::flags::EXEC_SNAPSHOT != 0 { u64::MAX } else { 0 };
        r.procs.insert(header.root_pid, Proc { image: Some(root), exec_until_ns: until, ..Default::default() });
        r.stats.processes = 1;
        r
    }

    /// `--explain`: keep the decisions of the faults in `[start, end)` (model addresses) in every
    /// image from now on, the first included.
    pub fn set_explain(&mut self, range: Option<(u64, u64)>) {
        self.explain = range;
        for p in self.procs.values_mut() {
            if let Some(img) = p.image.as_mut() {
                self.m.switch_mm(img.mm);
                crate::views::start_explaining(self.m.kernel_mut(), range);
            }
        }
    }

    fn err(&self, message: String) -> SimError {
        SimError { source_name: self.source.clone(), line: 0, message, record: None }
    }

    /// Run the machine's clock on the recording's timestamps: before each event the clock moves
    /// to its time (`Step::Sleep`), and the daemons (khugepaged) wake on it as they would have
    /// during the recorded run. `ReplayOptions` turns it on by default: the live daemon's phase
    /// relative to a program is not known (it sleeps `scan_sleep_millisecs` from wherever it was
    /// when the program started, unless the program's mm is the first on its list), which
    /// `thplab compare --record` allows for and states (`experiment::khugepaged`).
    pub fn follow_recorded_time(&mut self) {
        self.recorded_time = true;
    }

    /// Give the machine a free page reporting device and its host (a profile's `[host]`,
    /// `mm::page_reporting`): the frames the replay writes that the host had dropped are
    /// counted (`ReplayReport::host_faults`), through `Machine::set_host` (unpriced here: a
    /// recording's time prices them from the totals, `crate::time`). Before the first event.
    pub fn enable_host(&mut self, host: &uapi::profile::HostCosts, free_areas: Option<&uapi::profile::FreeLists>) {
        self.m.set_host(host, free_areas);
    }

    /// Frames written that the host had dropped so far, and of them those of base pages.
    pub fn host_faults(&self) -> (u64, u64) {
        self.m.host_stats().map_or((0, 0), |h| (h.faults, h.base_faults))
    }

    /// Sample the machine every `interval_ns` of its clock (`Machine::set_sampling`).
    pub fn set_sampling(&mut self, interval_ns: u64) {
        self.m.set_sampling(interval_ns);
    }
}

/// What one event may change in its process's model, for `--check` (`Replay::check_step`).
enum Touched {
    Nothing,
    /// Model address ranges: their VMAs, PMD slots and folios.
    Ranges(Vec<(u64, u64)>),
    /// Shmem page caches (file calls).
    PageCache,
    /// Anything (exec snapshot, mlockall, prctl): the full check.
    Everything,
}

/// What a replay produced: the summed counters, minflt (modelled and passthrough), and one
/// result per process image.
pub struct Finished {
    pub counters: Counters,
    pub minflt: u64,
    pub images: Vec<ImageResult>,
    pub stats: ReplayStats,
    pub misses: Vec<PlacementMiss>,
    /// khugepaged's work, when the clock followed the recording's timestamps.
    pub khugepaged: Option<mm::khugepaged::KhugepagedScan>,
    /// What O_DIRECT reads pinned.
    pub io: Option<uapi::result::IoResult>,
    /// The samples of `set_sampling`.
    pub timeline: Vec<uapi::TimelineSample>,
    /// `record --accesses`: the TLB model's report of the recorded accesses (`recorded` holds
    /// what the replay did with them).
    pub accesses: Option<uapi::AccessReport>,
    /// Under `--memory-max`/`--swap`: the reclaim lines, every process's major faults, the swap.
    pub(crate) pressure: Option<crate::PressureLines>,
}

/// One process image (a process between its execve and its exit or next execve).
pub struct ImageResult {
    pub pid: u32,
    /// Which image of the replay (0: the recorded program's).
    pub image: u64,
    /// The executable, when known (the recorded program's; a later execve's from its snapshot).
    pub exe: String,
    /// Its layout (stack, heap, ELF and loader mappings, mmap_base) came from an exec snapshot
    /// (a forked image: its parent's did).
    pub exec_snapshot: bool,
    /// An execve replaced it: its memory was gone before the process's exit, where the census
    /// is taken (a live run cannot see it either: `live::program`), so the run's census, Rss
    /// and `vmas` leave it out.
    pub replaced: bool,
    /// Faults the model took for it (without passthrough faults).
    pub minflt: u64,
    /// The census at its end (exit or execve), before teardown.
    pub census: CensusReport,
    pub vmas: Vec<uapi::VmaMap>,
    pub peak: uapi::Peak,
    pub fallbacks: [[u64; FallbackReason::ALL.len()]; 10],
    pub explain: Option<mm::model::explain::ExplainLog>,
}

/// The parts of `[start, end)` that lie in memory the model backs (anonymous or shmem).
fn model_pieces(k: &Kernel, start: u64, end: u64) -> Vec<(u64, u64)> {
    k.vmas_intersecting(start, end).into_iter().filter(|v| v.is_modelled()).map(|v| (v.start.max(start), v.end.min(end))).collect()
}

/// The parts of `[start, end)` that any VMA covers, the model's or a file's.
fn mapped_pieces(k: &Kernel, start: u64, end: u64) -> Vec<(u64, u64)> {
    k.vmas_intersecting(start, end).into_iter().map(|v| (v.start.max(start), v.end.min(end))).collect()
}

fn backing_word(b: MapBacking) -> &'static str {
    match b {
        MapBacking::PrivateAnon => "private anonymous",
        MapBacking::SharedAnon => "shared anonymous",
        MapBacking::Shmem { .. } => "shmem",
        MapBacking::ShmemPrivate { .. } => "private shmem",
        MapBacking::Special | MapBacking::ThpFile { .. } => "file",
        MapBacking::Hugetlb(_) => "hugetlb",
    }
}

#[cfg(test)]
#[path = "../replay_exec_tests.rs"]
mod exec_tests;
