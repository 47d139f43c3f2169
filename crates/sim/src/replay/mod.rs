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

use std::collections::{BTreeMap, HashMap};

use mm::debug::CensusReport;
use mm::vmstat::FallbackReason;
use mm::gup::Populate;
use mm::madvise::{Madvise, ThpDisable};
use mm::mmap::{prot_to_vm, MapBacking, MmapPlacement};
use mm::shmem::{InodeId, SbHuge, SbId, SHM_MNT};
use mm::{Access, BootParams, Kernel};
use mm_types::PAGE_SIZE;
use trace::{perm, Event, EventBody, Header, MountEntry, PathInfo, SyscallKind, TMPFS_MAGIC};
use uapi::{Counters, ThpSettings};

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

/// Every warning of a replay, placement misses included, one sentence each: what the text output
/// prints and the JSON lists.
pub fn warnings(st: &ReplayStats, misses: &[PlacementMiss]) -> Vec<String> {
    let mut out = st.warnings.clone();
    if st.shmem_unmodelled > 0 {
        out.push(format!(
            "{} calls on shmem files the model could not replay (a write, ftruncate or fallocate that failed in the model where the kernel's succeeded, a fallocate mode it does not know): the pages they reach are not modelled (shmem_unmodelled)",
            st.shmem_unmodelled
        ));
    }
    if st.populate_failed > 0 {
        out.push(format!("{} populating calls failed in the model where the kernel's succeeded (populate_failed)", st.populate_failed));
    }
    let missed = st.placements_checked - st.placements_matched;
    if missed > 0 {
        out.push(format!(
            "{missed} of {} mappings without MAP_FIXED could not be placed where the kernel put them under the recording's knobs; they stay where recorded, and mappings the replay's knobs would move are not relocated from them",
            st.placements_checked
        ));
    }
    for m in misses {
        // An address, or the errno name of a model that found no room.
        let model = if m.model.starts_with("0x") { m.model.clone() } else { format!("nowhere ({})", m.model) };
        out.push(format!(
            "pid {}: {} mapping of {} bytes (hint {}): the kernel put it at {}, the model would at {model}",
            m.pid, m.backing, m.len, m.hint, m.recorded
        ));
    }
    if missed as usize > misses.len() {
        out.push(format!("{} more placement misses not listed", missed as usize - misses.len()));
    }
    out
}

/// Placement misses listed one by one; the rest are counted (`placements_checked` -
/// `placements_matched`).
pub const MAX_MISSES: usize = 20;

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

impl Image {
    /// The model address of a recorded address.
    fn tr(&self, a: u64) -> u64 {
        if self.reloc.is_empty() {
            return a;
        }
        match self.reloc.range(..=a).next_back() {
            Some((&s, &(e, m))) if a < e => a - s + m,
            _ => a,
        }
    }

    /// The model ranges of a recorded range.
    fn tr_range(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        if self.reloc.is_empty() {
            return vec![(start, end)];
        }
        let mut out = Vec::new();
        let mut at = start;
        while at < end {
            match self.reloc.range(..=at).next_back() {
                Some((&s, &(e, m))) if at < e => {
                    let stop = e.min(end);
                    out.push((at - s + m, stop - s + m));
                    at = stop;
                }
                _ => {
                    let next = self.reloc.range(at..).next().map_or(end, |(&s, _)| s).min(end);
                    out.push((at, next));
                    at = next;
                }
            }
        }
        out
    }

    /// Forget the translation of a recorded range (it was unmapped or replaced).
    fn reloc_remove(&mut self, start: u64, end: u64) {
        if self.reloc.is_empty() {
            return;
        }
        let hit: Vec<(u64, (u64, u64))> = self.reloc.range(..end).filter(|(_, &(e, _))| e > start).map(|(&s, &v)| (s, v)).collect();
        for (s, (e, m)) in hit {
            self.reloc.remove(&s);
            if s < start {
                self.reloc.insert(s, (start, m));
            }
            if e > end {
                self.reloc.insert(end, (e, m + (end - s)));
            }
        }
    }

    fn file_of(&self, fd: u64) -> FileRef {
        self.fds.get(&(fd as i32)).map_or(FileRef::Other, |&d| self.descs[d].file)
    }

    fn install(&mut self, fd: i64, file: FileRef, append: bool, direct: bool) {
        self.descs.push(Desc { file, pos: 0, append, direct });
        self.fds.insert(fd as i32, self.descs.len() - 1);
    }
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
        let params = BootParams {
            mem_bytes: machine.mem_bytes,
            min_free_kbytes: machine.min_free_kbytes,
            mmap_base: machine.mmap_base,
            brk_start: machine.brk_start,
            ..BootParams::default()
        };
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
        let mut r = Replay {
            m: Box::new(Machine::new(Kernel::boot(&params, settings))),
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

    fn new_image(&mut self, pid: u32, exe: String) -> Image {
        self.stats.images += 1;
        let mm = self.m.mm_alloc();
        self.m.switch_mm(mm);
        crate::views::start_explaining(self.m.kernel_mut(), self.explain);
        Image {
            mm,
            pid,
            ordinal: self.stats.images - 1,
            exe,
            stack: None,
            brk_known: false,
            from_exec: true,
            exec_snapshot: false,
            populate_faults: 0,
            files: FilePages::default(),
            file_gup_faults: 0,
            fds: HashMap::new(),
            descs: Vec::new(),
            sbs: HashMap::new(),
            reloc: BTreeMap::new(),
            relocating: false,
            pinned: Vec::new(),
            pinned_unknown: false,
        }
    }

    fn err(&self, message: String) -> SimError {
        SimError { source_name: self.source.clone(), line: 0, message, record: None }
    }

    /// Fold a finished image (exit, or exec when `replaced`) into the totals, with its census,
    /// folio map and peak, taken before teardown.
    fn retire(&mut self, img: Image, replaced: bool) {
        self.m.switch_mm(img.mm);
        let census = self.m.census_of_all();
        let mut vmas = crate::views::vma_maps(&self.m, Some(img.pid));
        // The VMA of the stack execve made (`vma_is_initial_stack`), as /proc/PID/maps names it.
        if let Some((_, top)) = img.stack {
            if let Some(v) = vmas.iter_mut().find(|v| v.start_addr() < top && top <= v.end_addr() && v.kind == "anon") {
                v.name = "[stack]".to_string();
            }
        }
        let peak = crate::views::peak_of(&self.m);
        // The mm is torn down at exit and at execve (exit_mmap), and the live kernel's counters
        // see it: folios straddling two VMAs are deferred-split, nr_anon falls back.
        self.m.step_current(Step::Exit);
        if self.check {
            if let Err(e) = self.m.check(None) {
                self.stats.warnings.push(format!("model invariant broken by exit_mmap: {e}"));
            }
        }
        let k = &mut self.m;
        // Faults inside execve (the new stack's top page) are before the program's count; GUP's
        // faults in its file mappings are in it.
        let minflt = k.stats().minflt - img.populate_faults + img.file_gup_faults;
        if img.from_exec && !img.exec_snapshot && img.ordinal != 0 {
            self.images_without_snapshot += 1;
        }
        self.done_minflt += minflt;
        self.stats.modelled_faults += minflt;
        self.done_images.push(ImageResult {
            pid: img.pid,
            image: img.ordinal,
            exe: img.exe,
            exec_snapshot: img.exec_snapshot,
            replaced,
            minflt,
            census,
            vmas,
            peak,
            fallbacks: k.stats().fallbacks,
            explain: k.kernel_mut().stats_mut().explain.take().map(|b| *b),
        });
    }

    /// Run the machine's clock on the recording's timestamps: before each event the clock moves
    /// to its time (`Step::Sleep`), and the daemons (khugepaged) wake on it as they would have
    /// during the recorded run. `ReplayOptions` turns it on by default: the live daemon's phase
    /// relative to a program is not known (it sleeps `scan_sleep_millisecs` from wherever it was
    /// when the program started, unless the program's mm is the first on its list), which
    /// `thplab compare --record` allows for and states (`compare::khugepaged`).
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

    /// Drive the TLB model of `cpu` under `paging` with recorded accesses ([`Replay::accesses`])
    /// from now on; `names` are their regions.
    pub fn enable_accesses(&mut self, cpu: &'static tlb::CpuPreset, paging: tlb::Paging, names: Vec<String>) {
        self.m.kernel_mut().set_tlb_observer(true);
        // Host entry lines are not computed for recorded regions (their pages are not one
        // range): the footprint's density stands for them (`tlb::cost::estimate`).
        self.tlb = Some(crate::access::TlbRun::new(cpu, paging, names.len(), 0.0));
        self.access_span = vec![(u64::MAX, 0); names.len()];
        self.access_names = names;
    }

    /// Recorded accesses of process `pid` (`record --accesses`: runs of accesses to one page,
    /// in the recorded run's addresses), at this point of the recording (the end of the
    /// interval they were recorded in, after its faults): each run goes through the model as
    /// accesses (`Step::AccessRun`: young and dirty bits, never a fault: the recording's fault
    /// records are the program's faults), then through the TLB model once per access, the
    /// kernel's logged flushes applied first. Pages of placeholder VMAs (file mappings, the
    /// vDSO) are looked up as 4 KiB pages of their own; runs where the model has no mapping,
    /// or has not mapped the page (the run under valgrind touches a few pages the native run
    /// did not), are counted, not replayed.
    pub fn accesses(&mut self, pid: u32, runs: impl Iterator<Item = trace::accesses::AccessRun>) {
        let Some(mut tlb) = self.tlb.take() else { return };
        let Some(mm) = self.procs.get(&pid).and_then(|p| p.image.as_ref()).map(|i| i.mm) else {
            self.access_counts.not_replayed += runs.map(|r| r.count).sum::<u64>();
            self.tlb = Some(tlb);
            return;
        };
        self.m.switch_mm(mm);
        for r in runs {
            let img = self.procs.get(&pid).and_then(|p| p.image.as_ref()).expect("checked above");
            let addr = img.tr(r.page * PAGE_SIZE);
            crate::access::apply_flushes(&mut self.m, &mut tlb);
            let mut vma = self.m.vma_lookup(addr);
            if vma.is_none() && self.expand_stack(pid, addr) {
                vma = self.m.vma_lookup(addr);
            }
            let tr = match vma {
                Some(v) if v.is_modelled() => {
                    // Never a fault: a page not mapped is not replayed, and a store to a page
                    // mapped read-only (COW, the zero page) counts as a load.
                    let Some(mapped) = self.m.translation(addr) else {
                        self.access_counts.not_present += r.count;
                        continue;
                    };
                    let write = r.write && mapped.write;
                    let (_, last) = self.m.step_current(Step::AccessRun { first: addr, n: r.count, stride: 0, write }).run();
                    crate::access::apply_flushes(&mut self.m, &mut tlb);
                    // A hit only set young and dirty bits: the translation is the one it found.
                    let now = if last == Access::Hit { Some(mapped) } else { self.m.translation(addr) };
                    match (last, now) {
                        (Access::Hit | Access::Fault, Some(t)) => {
                            self.access_counts.modelled += r.count;
                            crate::access::tlb_translation(addr, &t)
                        }
                        _ => {
                            self.access_counts.not_replayed += r.count;
                            continue;
                        }
                    }
                }
                Some(_) => {
                    self.access_counts.placeholder += r.count;
                    crate::access::placeholder_translation(addr)
                }
                None => {
                    self.access_counts.not_replayed += r.count;
                    continue;
                }
            };
            let ri = r.region as usize;
            let span = &mut self.access_span[ri];
            *span = (span.0.min(r.page), span.1.max(r.page));
            let footprint = (span.1 - span.0 + 1) * PAGE_SIZE;
            tlb.lookup(ri, &tr, r.count, if r.write { r.count } else { 0 }, footprint);
        }
        self.tlb = Some(tlb);
    }

    /// expand_downwards: an access just below `pid`'s stack grows it; whether it did.
    fn expand_stack(&mut self, pid: u32, addr: u64) -> bool {
        let Some(img) = self.procs.get_mut(&pid).and_then(|p| p.image.as_mut()) else { return false };
        let Some((start, end)) = img.stack else { return false };
        if addr < start && addr + STACK_LIMIT >= start {
            let new_start = addr / PAGE_SIZE * PAGE_SIZE;
            let prot = prot_to_vm(true, true, false);
            if self.m.step_current(Step::Mmap { len: start - new_start, prot, placement: MmapPlacement::FixedNoReplace(new_start), backing: MapBacking::PrivateAnon }).ret().is_ok() {
                img.stack = Some((new_start, end));
                return true;
            }
        }
        false
    }

    pub fn event(&mut self, e: &Event) -> Result<(), SimError> {
        self.stats.events += 1;
        if self.recorded_time && e.time_ns > self.m.clock_ns() {
            let ns = e.time_ns - self.m.clock_ns();
            self.m.step_current(Step::Sleep { ns });
        }
        if let Some((_, buf)) = self.procs.get_mut(&e.pid).and_then(|p| p.pending.as_mut()) {
            buf.push(e.clone());
            return Ok(());
        }
        self.run_event(e)
    }

    fn run_event(&mut self, e: &Event) -> Result<(), SimError> {
        // The event's process is current (its image's mm), as the kernel runs it.
        if let Some(mm) = self.procs.get(&e.pid).and_then(|p| p.image.as_ref()).map(|i| i.mm) {
            self.m.switch_mm(mm);
        }
        let before = if self.check { self.touched(e) } else { Touched::Nothing };
        self.apply(e)?;
        if self.check {
            self.check_step(e, before)?;
        }
        Ok(())
    }

    /// What `e` may change in its process's model, in model addresses as they are now.
    fn touched(&self, e: &Event) -> Touched {
        let Some(img) = self.procs.get(&e.pid).and_then(|p| p.image.as_ref()) else { return Touched::Nothing };
        let range = |start: u64, len: u64| img.tr_range(start, start.saturating_add(len)).into_iter().chain([(start, start.saturating_add(len))]);
        match &e.body {
            EventBody::Fault { addr, .. } => Touched::Ranges(range(*addr, 1).collect()),
            EventBody::Map(m) => Touched::Ranges(range(m.addr, m.len).collect()),
            EventBody::ExecMaps(_) => Touched::Everything,
            EventBody::Syscall(s) => {
                let (a, Some(ret)) = (&s.args, s.ret) else { return Touched::Nothing };
                let arg = |i: usize| a.get(i).copied().unwrap_or(0);
                match s.kind {
                    SyscallKind::Mmap if ret >= 0 => Touched::Ranges(range(ret as u64, arg(1)).collect()),
                    SyscallKind::Munmap | SyscallKind::Mprotect | SyscallKind::Madvise | SyscallKind::Mlock | SyscallKind::Mlock2 | SyscallKind::Munlock => {
                        Touched::Ranges(range(arg(0), arg(1)).collect())
                    }
                    SyscallKind::Mremap => Touched::Ranges(range(arg(0), arg(1)).chain(range(ret as u64, arg(2))).chain(range(arg(4), arg(2))).collect()),
                    SyscallKind::Brk => {
                        let (old, new) = (self.m.brk(), ret as u64);
                        Touched::Ranges(vec![(old.min(new), old.max(new).max(old.min(new) + 1))])
                    }
                    // The GUP calls populate ranges their iovecs name (process_vm_writev: in
                    // another process).
                    SyscallKind::Mlockall
                    | SyscallKind::Munlockall
                    | SyscallKind::Prctl
                    | SyscallKind::Shmat
                    | SyscallKind::Shmdt
                    | SyscallKind::ProcessMadvise
                    | SyscallKind::Vmsplice
                    | SyscallKind::IoUringRegister
                    | SyscallKind::ProcessVmWritev => Touched::Everything,
                    SyscallKind::Clone | SyscallKind::Clone3 | SyscallKind::Fork | SyscallKind::Vfork | SyscallKind::Lseek | SyscallKind::Read => Touched::Nothing,
                    // File calls (memfd_create, open, write, ftruncate, fallocate, close, unlink,
                    // dup): the shmem page caches; exit and execve are checked whole at teardown.
                    _ => Touched::PageCache,
                }
            }
            _ => Touched::Nothing,
        }
    }

    /// `--check` after one event: the invariants of what it touched (`touched`, taken before
    /// it ran, and again after, when mappings may have moved), and the whole model at events 1,
    /// 2, 4, 8, ... (so the full checks cost O(log n) walks of the machine); images are also
    /// checked whole when they are torn down and at the end.
    fn check_step(&mut self, e: &Event, before: Touched) -> Result<(), SimError> {
        let Some(mm) = self.procs.get(&e.pid).and_then(|p| p.image.as_ref()).map(|i| i.mm) else { return Ok(()) };
        self.m.switch_mm(mm);
        let after = self.touched(e);
        let full = self.stats.events.is_power_of_two() || matches!(before, Touched::Everything) || matches!(after, Touched::Everything);
        let r = if full {
            self.m.check(None)
        } else {
            let mut ranges = Vec::new();
            for t in [&before, &after] {
                if let Touched::Ranges(r) = t {
                    ranges.extend_from_slice(r);
                }
            }
            let pc = if matches!(before, Touched::PageCache) { self.m.check_page_cache() } else { Ok(()) };
            pc.and_then(|()| self.m.check(Some(&ranges)))
        };
        r.map_err(|m| self.err(format!("model invariant broken: {m}")))
    }

    fn apply(&mut self, e: &Event) -> Result<(), SimError> {
        match &e.body {
            EventBody::TaskNew { tid, pid } if tid == pid && !self.procs.contains_key(pid) => {
                // A new process (the record is the parent's): a fork gets a copy of the
                // parent's mm, a CLONE_VM child (vfork, posix_spawn) shares it until its
                // execve and its faults count as recorded; the parent's clone record says
                // which, so the child's events wait for it.
                let parent_modelled = self.procs.get(&e.pid).is_some_and(|p| p.image.is_some());
                self.stats.processes += 1;
                match self.clone_records.remove(pid) {
                    // The clone record came first (it is stamped at the call's entry).
                    Some((parent, shares_mm)) => {
                        self.procs.insert(*pid, Proc::default());
                        if parent_modelled && !shares_mm {
                            self.fork_image(parent, *pid)?;
                        }
                    }
                    None => {
                        let pending = parent_modelled.then(|| (e.pid, Vec::new()));
                        self.procs.insert(*pid, Proc { pending, ..Default::default() });
                    }
                }
            }
            EventBody::Fault { addr, error_code } => match self.procs.get_mut(&e.pid) {
                Some(p) if e.time_ns < p.exec_until_ns => {
                    // Inside execve, before its snapshot (bss clearing, the loader's pages):
                    // the task's own faults (mm/memory.c: mm_account_fault). Only the program's
                    // first execve is before its count starts (the recording and the live
                    // baseline start there); the others' count as recorded.
                    self.stats.exec_faults += 1;
                    if !p.image.as_ref().is_some_and(|i| i.ordinal == 0) {
                        p.passthrough += 1;
                        self.stats.recorded_faults += 1;
                        self.stats.passthrough_faults += 1;
                    }
                }
                _ => self.fault(e.pid, *addr, *error_code),
            },
            EventBody::ExecMaps(entries) => {
                let Some(p) = self.procs.get_mut(&e.pid) else { return Ok(()) };
                if p.image.as_ref().is_some_and(|i| i.from_exec && !i.exec_snapshot) {
                    self.exec_snapshot(e.pid, e.time_ns, entries);
                } else {
                    // Its execve's record is still to come (the process runs a forked copy, a
                    // CLONE_VM child's shared mm, or an image that had its snapshot): the image
                    // that execve makes takes it.
                    p.early_snapshot = Some((e.time_ns, entries.clone()));
                }
            }
            EventBody::Syscall(s) => {
                let path = if s.kind.takes_path() { self.paths.remove(&e.tid) } else { None };
                let iovs = self.iovecs.remove(&e.tid).filter(|(call, _)| *call == s.kind.code()).map(|(_, v)| v);
                let Some(ret) = s.ret else { return Ok(()) };
                self.syscall(e.pid, s.kind, &s.args, ret, e.time_ns, s.duration_ns)?;
                self.file_syscall(e.pid, s.kind, &s.args, ret, path);
                if ret >= 0 {
                    self.gup_call(e.pid, s.kind, &s.args, ret, iovs);
                }
            }
            EventBody::Iovecs { call, iovs } => {
                self.iovecs.insert(e.tid, (*call, iovs.clone()));
            }
            EventBody::Uffd(u) => self.uffd(e.pid, u),
            EventBody::Map(m) if m.path.starts_with(b"/SYSV") && m.flags & MAP_SHARED as u32 != 0 => self.shm_map(e.pid, m),
            EventBody::Path(p) => {
                if let Some(knob) = thp_knob_of_path(&p.path) {
                    self.knob_read(e.pid, knob);
                }
                self.paths.insert(e.tid, p.clone());
            }
            EventBody::Mounts(m) => self.mounts = m.clone(),
            EventBody::ExecStack { start_stack } => self.procs.entry(e.pid).or_default().start_stack = Some(*start_stack),
            EventBody::TaskExit if e.tid == e.pid => self.exit(e.pid),
            _ => {}
        }
        Ok(())
    }

    /// A userfaultfd ioctl, performed on the process's mm (the model's one userfaultfd context
    /// per mm: a userfaultfd passed to another process acts on its creator's mm in the
    /// kernel). Its result is not recorded; the model's fails where the kernel's did while the
    /// address spaces agree. UFFDIO_MOVE, UFFDIO_CONTINUE, UFFDIO_POISON and fills of shared
    /// (shmem) VMAs are counted in `populate_unmodelled` and warned about; UFFDIO_WAKE and
    /// UFFDIO_WRITEPROTECT change no folio (a write to a protected page faults, as recorded).
    fn uffd(&mut self, pid: u32, u: &trace::UffdIoctl) {
        use linux_abi::userfaultfd as op;
        let Some(img) = self.procs.get_mut(&pid).and_then(|p| p.image.as_mut()) else { return };
        let (mm, start) = (img.mm, img.tr(u.start));
        let step = match u.op {
            op::API => Step::UffdApi { features: u.mode },
            op::REGISTER => Step::UffdRegister { start, len: u.len, mode: u.mode },
            op::UNREGISTER => Step::UffdUnregister { start, len: u.len },
            op::COPY => Step::Mfill { start, len: u.len, what: mm::userfaultfd::Mfill::Copy },
            op::ZEROPAGE => Step::Mfill { start, len: u.len, what: mm::userfaultfd::Mfill::Zeropage },
            op::WAKE | op::WRITEPROTECT => return,
            _ => {
                let name = op::name(u.op);
                return self.unmodelled(pid, name, &format!("{name} of {:#x}+{:#x}: not modelled (the pages it maps, moves or poisons are not in the model)", u.start, u.len));
            }
        };
        if let Outcome::Filled(Ok(f)) = self.m.step(mm, step) {
            if f.unmodelled {
                let name = op::name(u.op);
                self.unmodelled(pid, name, &format!("{name} of {:#x}+{:#x} into a shared (shmem) mapping: not modelled (its pages are not in the model)", u.start, u.len));
            }
        }
    }

    /// The program opened a knob of the THP tree: it may choose what it does by it (HotSpot
    /// with -XX:+UseTransparentHugePages reads `enabled` and, unless it is `never`, aligns and
    /// commits its heap and code cache in 2 MiB steps). Counted once per knob; a warning when
    /// the replay's value is not the one the program read.
    fn knob_read(&mut self, pid: u32, knob: &str) {
        if self.stats.knobs_read.iter().any(|k| k == knob) {
            return;
        }
        self.stats.knobs_read.push(knob.to_string());
        let Some(rec) = &self.rec_settings else { return };
        let (was, now) = (rec.knob_map().get(knob).cloned(), self.settings.knob_map().get(knob).cloned());
        if was != now {
            let (was, now) = (was.unwrap_or_else(|| "absent".into()), now.unwrap_or_else(|| "absent".into()));
            self.stats.knobs_read_differing.push(format!("{knob}: {was} → {now}"));
            self.stats.warnings.push(format!(
                "pid {pid} read the THP knob `{knob}` while recorded ({was} then, {now} in this replay): what the program did may depend on it (a JVM with -XX:+UseTransparentHugePages does); `thplab compare --record` records it again under such a setting"
            ));
        }
    }

    /// The address space execve built for `pid`'s current image (an `exec_maps` record): the
    /// stack, the heap, mmap_base, and placeholders for the ELF, its interpreter and the vDSO.
    fn exec_snapshot(&mut self, pid: u32, time_ns: u64, entries: &[trace::MapEntry]) {
        let Some(p) = self.procs.get_mut(&pid) else { return };
        // The execve ends at its sys_exit when that was recorded (it is stamped after the
        // snapshot); the first process's execve has no record, so its snapshot ends it.
        p.exec_until_ns = if p.exec_until_ns == u64::MAX { time_ns } else { p.exec_until_ns.max(time_ns) };
        let start_stack = p.start_stack.take();
        let Some(img) = p.image.as_mut() else { return };
        img.exec_snapshot = true;
        self.stats.exec_snapshots += 1;
        if img.exe.is_empty() {
            // fs/binfmt_elf.c: load_elf_binary maps the executable below its interpreter (and
            // below mmap_base): the lowest file mapping is the executable.
            if let Some(m) = entries.iter().filter(|m| m.ino != 0 && m.path.starts_with(b"/")).min_by_key(|m| m.start) {
                img.exe = String::from_utf8_lossy(&m.path).into_owned();
            }
        }
        // mmap_base: execve placed the interpreter (or, without one, the vDSO) first,
        // top-down from it, so the highest mapping below the stack ends there.
        let base = entries.iter().filter(|m| m.path != b"[stack]" && m.end <= mm_types::TASK_SIZE).map(|m| m.end).max();
        if let Some(b) = base {
            self.m.step_current(Step::SetLayout { mmap_base: Some(b), brk: None });
        }
        for m in entries {
            let anon = m.ino == 0 && (m.path.is_empty() || m.path == b"[heap]" || m.path == b"[stack]");
            let prot = prot_to_vm(m.perms & perm::READ != 0, m.perms & perm::WRITE != 0, m.perms & perm::EXEC != 0);
            if !anon || m.perms & perm::SHARED != 0 {
                // The ELF, its interpreter, the vDSO: room the model keeps free.
                img.files.exec_mapping(m.start, m.end, &m.path, m.perms & (perm::WRITE | perm::SHARED) == perm::WRITE);
                self.m.step_current(Step::Mmap { len: m.end - m.start, prot, placement: MmapPlacement::FixedNoReplace(m.start), backing: MapBacking::Special });
                continue;
            }
            self.m.step_current(Step::Mmap { len: m.end - m.start, prot, placement: MmapPlacement::FixedNoReplace(m.start), backing: MapBacking::PrivateAnon });
            if m.path == b"[stack]" {
                img.stack = Some((m.start, m.end));
                // execve writes the top of the new stack before the program runs: the
                // argument and environment strings through get_user_pages (fs/exec.c:
                // copy_strings, get_arg_page), then the platform strings, auxv and the argv
                // and envp arrays down to argc (fs/binfmt_elf.c: create_elf_tables,
                // copy_to_user): every page from `start_stack` to the top, none recorded as a
                // user fault. Without an `exec_stack` record (format before 2.4): the top page.
                // These faults count in the task's min_flt (mm/memory.c: mm_account_fault, with
                // regs NULL for GUP): the image's, except in the program's first execve, before
                // its count starts.
                // Written from the top down (copy_strings copies the last string first).
                let lowest = start_stack.filter(|s| (m.start..m.end).contains(s)).map_or(m.end - PAGE_SIZE, |s| s & !(PAGE_SIZE - 1));
                let before = self.m.stats().minflt;
                for i in (0..(m.end - lowest) / PAGE_SIZE).rev() {
                    self.m.step_current(Step::Access { addr: lowest + i * PAGE_SIZE, write: true });
                }
                if img.ordinal == 0 {
                    img.populate_faults += self.m.stats().minflt - before;
                }
            }
            if m.path == b"[heap]" {
                self.m.step_current(Step::SetLayout { mmap_base: None, brk: Some((m.start, m.end)) });
                img.brk_known = true;
            }
        }
    }

    /// The parent's record of the clone/fork that made `child`: copy its mm if the child got
    /// its own (`copy_mm` without CLONE_VM), then run the child's events held so far.
    fn forked(&mut self, parent: u32, kind: SyscallKind, a: &[u64], child: u32) -> Result<(), SimError> {
        // clone3's flags are in memory the recorder does not read: glibc makes processes with
        // clone3 only in posix_spawn (CLONE_VM|CLONE_VFORK), and forks with clone.
        let shares_mm = match kind {
            SyscallKind::Fork => false,
            SyscallKind::Clone => a.first().is_some_and(|f| f & (CLONE_VM | CLONE_VFORK) != 0),
            _ => true,
        };
        let Some((p, events)) = self.procs.get_mut(&child).and_then(|c| c.pending.take()) else {
            // The child's creation record has not come yet: it decides then.
            if !self.procs.contains_key(&child) {
                self.clone_records.insert(child, (parent, shares_mm));
            }
            return Ok(());
        };
        debug_assert_eq!(p, parent);
        if !shares_mm {
            self.fork_image(parent, child)?;
        }
        for ev in &events {
            self.run_event(ev)?;
        }
        // Back to the parent, whose record this is.
        if let Some(mm) = self.procs.get(&parent).and_then(|p| p.image.as_ref()).map(|i| i.mm) {
            self.m.switch_mm(mm);
        }
        Ok(())
    }

    /// `fork` of `parent`'s mm for `child` (a process without CLONE_VM): the child's image is a
    /// copy of the parent's, fd table and placement state included.
    fn fork_image(&mut self, parent: u32, child: u32) -> Result<(), SimError> {
        let Some(pmm) = self.procs.get(&parent).and_then(|p| p.image.as_ref()).map(|i| i.mm) else { return Ok(()) };
        self.m.switch_mm(pmm);
        let (mm, _) = self.m.step(pmm, Step::Fork).forked().map_err(|e| self.err(format!("fork of process {parent}: {} in the model", e.name())))?;
        self.stats.images += 1;
        self.stats.forked_images += 1;
        // The parent's special VMAs (the fork copied them as they were; the parent's mm is
        // still the current one).
        let special: Vec<mm::vma::Vma> = self.m.vmas().filter(|v| !v.is_modelled()).copied().collect();
        let pimg = self.procs.get_mut(&parent).and_then(|p| p.image.as_mut()).expect("checked above");
        let files = pimg.files.fork(&special);
        let (pinned, pinned_unknown) = (pimg.pinned.clone(), pimg.pinned_unknown);
        let img = Image {
            mm,
            pid: child,
            ordinal: self.stats.images - 1,
            exe: pimg.exe.clone(),
            stack: pimg.stack,
            brk_known: pimg.brk_known,
            from_exec: false,
            exec_snapshot: pimg.exec_snapshot,
            populate_faults: 0,
            files,
            file_gup_faults: 0,
            fds: pimg.fds.clone(),
            descs: pimg.descs.clone(),
            sbs: pimg.sbs.clone(),
            reloc: pimg.reloc.clone(),
            relocating: pimg.relocating,
            pinned: Vec::new(),
            pinned_unknown: false,
        };
        // copy_present_ptes: the parent's long-term pinned folios are copied for the child
        // (copy_present_page, one 4 KiB page per PTE) instead of shared.
        if !pinned.is_empty() {
            if let Outcome::CopiedPinned { pmd_mapped, .. } = self.m.step(pmm, Step::CopyPinned { child: mm, ranges: pinned }) {
                if pmd_mapped > 0 {
                    self.unmodelled(parent, "fork_of_pinned_pmds", "fork of PMD-mapped io_uring-pinned pages: the kernel splits the PMD and copies them for the child; the model shares them");
                }
            }
        }
        if pinned_unknown {
            self.unmodelled(parent, "fork_of_pinned_pages", "fork of io_uring-pinned pages whose ranges the recording does not give: the kernel copied them for the child, 4 KiB each, instead of sharing them");
        }
        self.m.switch_mm(mm);
        crate::views::start_explaining(self.m.kernel_mut(), self.explain);
        self.procs.get_mut(&child).expect("child registered").image = Some(img);
        Ok(())
    }

    /// Calls by which the kernel reaches the program's pages through GUP, faulting in those not
    /// yet mapped as it needs them, without a fault the recorder sees; each fault counts in the
    /// caller's min_flt (`mm_account_fault` charges current). vmsplice takes references on the
    /// pages of the bytes it moved into the pipe, for reading (fs/splice.c: `vmsplice_to_pipe`
    /// → `iov_iter_get_pages2`, no FOLL_WRITE: an untouched anonymous page gets the zero page);
    /// io_uring pins registered buffers for write (io_uring/rsrc.c: `io_sqe_buffer_register` →
    /// `pin_user_pages_fast(FOLL_WRITE | FOLL_LONGTERM)`); process_vm_writev writes the bytes it
    /// moved into the target's pages (mm/process_vm_access.c: `pin_user_pages_remote(FOLL_WRITE)`;
    /// the model counts those faults in the target's mm). The iovecs come from the recorder's
    /// `iovecs` record; without one (no path resolution, or an io_uring registration other than
    /// IORING_REGISTER_BUFFERS) the call is counted as unmodelled and warned about.
    fn gup_call(&mut self, pid: u32, kind: SyscallKind, a: &[u64], ret: i64, iovs: Option<Vec<(u64, u64)>>) {
        let (target, how, bytes) = match kind {
            SyscallKind::Vmsplice => (pid, Populate::Read, ret as u64),
            SyscallKind::IoUringRegister if io_uring::opcode(a[1]) == io_uring::IORING_REGISTER_BUFFERS => (pid, Populate::Write, u64::MAX),
            SyscallKind::ProcessVmWritev => (a[0] as u32, Populate::Write, ret as u64),
            _ => return self.unmodelled_populate(pid, kind, a),
        };
        let Some(iovs) = iovs else { return self.unmodelled_populate(pid, kind, a) };
        let Some(img) = self.procs.get_mut(&target).and_then(|p| p.image.as_mut()) else { return };
        self.m.switch_mm(img.mm);
        let mut left = bytes;
        for (base, len) in iovs {
            let n = len.min(left);
            if n == 0 {
                continue;
            }
            left -= n;
            let (start, end) = (base & !(PAGE_SIZE - 1), (base + n).next_multiple_of(PAGE_SIZE));
            Self::populate(&mut self.m, &mut self.stats, img, start, end, how);
            if kind == SyscallKind::IoUringRegister {
                let model = img.tr_range(start, end);
                img.pinned.extend(model);
            }
        }
        if let Some(mm) = self.procs.get(&pid).and_then(|p| p.image.as_ref()).map(|i| i.mm) {
            self.m.switch_mm(mm);
        }
    }

    /// A call of [`Replay::gup_call`]'s that the replay could not model: counted, and a warning
    /// for the first of each kind.
    fn unmodelled_populate(&mut self, pid: u32, kind: SyscallKind, a: &[u64]) {
        use io_uring::{IORING_REGISTER_BUFFERS, IORING_REGISTER_BUFFERS2, IORING_REGISTER_BUFFERS_UPDATE};
        let what = match kind {
            SyscallKind::Vmsplice => "vmsplice: the kernel took references on the pages of its iovecs (faulting in those not present)",
            SyscallKind::IoUringRegister if matches!(io_uring::opcode(a[1]), IORING_REGISTER_BUFFERS | IORING_REGISTER_BUFFERS2 | IORING_REGISTER_BUFFERS_UPDATE) => {
                "io_uring_register of buffers: the kernel pinned them for write (FOLL_WRITE | FOLL_LONGTERM), populating their pages"
            }
            SyscallKind::ProcessVmWritev if self.procs.contains_key(&(a[0] as u32)) => {
                "process_vm_writev into a recorded process: the kernel wrote its pages through GUP, populating those not present"
            }
            _ => return,
        };
        if kind == SyscallKind::IoUringRegister {
            if let Some(img) = self.procs.get_mut(&pid).and_then(|p| p.image.as_mut()) {
                img.pinned_unknown = true;
            }
        }
        self.unmodelled(pid, kind.name(), &format!("{what}; not modelled (the model lacks the faults it took in place of the program)"));
    }

    /// Something the kernel did to the program's pages that the replay does not model: counted
    /// in `populate_unmodelled` under `key`, and a warning the first time.
    fn unmodelled(&mut self, pid: u32, key: &str, what: &str) {
        let n = self.stats.populate_unmodelled.entry(key.to_string()).or_insert(0);
        *n += 1;
        if *n == 1 {
            self.stats.warnings.push(format!("pid {pid}: {what}"));
        }
    }

    fn exit(&mut self, pid: u32) {
        let Some(p) = self.procs.get_mut(&pid) else { return };
        if p.exited {
            return;
        }
        p.exited = true;
        if let Some(img) = p.image.take() {
            self.retire(img, false);
        }
    }

    fn fault(&mut self, pid: u32, addr: u64, error_code: u64) {
        self.stats.recorded_faults += 1;
        let proc = self.procs.entry(pid).or_default();
        let Some(img) = proc.image.as_mut() else {
            proc.passthrough += 1;
            self.stats.passthrough_faults += 1;
            return;
        };
        let write = error_code & PF_WRITE != 0;
        let addr = img.tr(addr);
        let vma = self.m.vma_lookup(addr);
        let in_model = vma.is_some_and(|v| v.is_modelled());
        if let Some(v) = vma.filter(|v| !v.is_modelled()) {
            img.files.fault(&v, addr, write);
        }
        if !in_model {
            // expand_downwards: a fault just below the stack grows it.
            if self.expand_stack(pid, addr) {
                return self.model_access(pid, addr, write);
            }
            let proc = self.procs.get_mut(&pid).expect("process exists");
            proc.passthrough += 1;
            self.stats.passthrough_faults += 1;
            return;
        }
        self.model_access(pid, addr, write);
    }

    fn model_access(&mut self, pid: u32, addr: u64, write: bool) {
        let proc = self.procs.get_mut(&pid).expect("process exists");
        debug_assert_eq!(proc.image.as_ref().map(|i| i.mm), Some(self.m.current_mm()));
        match self.m.step_current(Step::Access { addr, write }).access() {
            // A userfaultfd's page: its reader's UFFDIO_COPY or UFFDIO_ZEROPAGE follows.
            Access::Hit | Access::Fault | Access::Userfault => {}
            Access::Segv | Access::Sigbus | Access::Oom => {
                proc.passthrough += 1;
                self.stats.passthrough_faults += 1;
                self.stats.unresolved_faults += 1;
            }
        }
    }

    fn syscall(&mut self, pid: u32, kind: SyscallKind, a: &[u64], ret: i64, time_ns: u64, duration_ns: u64) -> Result<(), SimError> {
        if matches!(kind, SyscallKind::Execve | SyscallKind::Execveat) {
            if ret == 0 {
                self.procs.entry(pid).or_default().exec_until_ns = time_ns + duration_ns;
                let mut old = self.procs.entry(pid).or_default().image.take();
                // The open files survive execve (the model keeps no FD_CLOEXEC: a descriptor the
                // kernel closed is only ever reused by a new open, which replaces it).
                let files = old.as_mut().map(|o| (std::mem::take(&mut o.fds), std::mem::take(&mut o.descs), std::mem::take(&mut o.sbs)));
                if let Some(img) = old {
                    self.retire(img, true);
                }
                let mut img = self.new_image(pid, String::new());
                if let Some(files) = files {
                    (img.fds, img.descs, img.sbs) = files;
                }
                let p = self.procs.get_mut(&pid).expect("inserted");
                p.image = Some(img);
                if let Some((t, maps)) = p.early_snapshot.take() {
                    self.exec_snapshot(pid, t, &maps);
                }
            }
            return Ok(());
        }
        if kind == SyscallKind::ExitGroup {
            self.exit(pid);
            return Ok(());
        }
        if matches!(kind, SyscallKind::Fork | SyscallKind::Vfork | SyscallKind::Clone | SyscallKind::Clone3) && ret > 0 {
            return self.forked(pid, kind, a, ret as u32);
        }
        if kind == SyscallKind::Mmap && ret >= 0 {
            self.mmap(pid, a, ret as u64, time_ns, duration_ns);
            return Ok(());
        }
        if kind == SyscallKind::Shmat && ret >= 0 {
            // The segment's size comes with the mapping's `map` record (shm_mmap inside the
            // call, after this record's time).
            self.shmat.insert(pid, (a[1], a[2]));
            return Ok(());
        }
        if kind == SyscallKind::Shmdt && ret == 0 {
            self.shmdt(pid, a[0]);
            return Ok(());
        }
        let Some(img) = self.procs.get_mut(&pid).and_then(|p| p.image.as_mut()) else { return Ok(()) };
        let failed = ret < 0;
        match kind {
            SyscallKind::Munmap if !failed => {
                for (s, e) in img.tr_range(a[0], a[0] + a[1]) {
                    self.m.step_current(Step::Munmap { start: s, len: e - s });
                    img.files.forget(s, e);
                }
                img.reloc_remove(a[0], a[0] + a[1]);
            }
            SyscallKind::Mremap if !failed => {
                let (old, old_len, new_len, flags, rec_new) = (a[0], a[1], a[2], a[3], ret as u64);
                let old_m = img.tr(old);
                let vma = self.m.vma_lookup(old_m);
                // mremap's get_unmapped_area: a shmem VMA's file places it (shmem_get_unmapped_area).
                let backing = match vma.and_then(|v| v.inode().map(|ino| (ino, v.linear_page_index(old_m)))) {
                    Some((ino, pgoff)) => MapBacking::Shmem { ino, pgoff },
                    None => MapBacking::PrivateAnon,
                };
                let new_m = if rec_new == old {
                    old_m
                } else if flags & MREMAP_FIXED != 0 {
                    img.tr(a[4])
                } else if img.relocating {
                    self.m.mmap_placement(new_len, MmapPlacement::Kernel, backing).unwrap_or(rec_new)
                } else {
                    rec_new
                };
                let k = &mut self.m;
                match vma {
                    // Anonymous and shmem VMAs move with their page tables (move_page_tables).
                    Some(v) if v.is_modelled() => {
                        if let Err(e) = k.step_current(Step::Mremap { start: old_m, old_len, new_len, dest: new_m }).ret() {
                            let recorded = format!("mremap({old:#x}, {old_len:#x}, {new_len:#x}, {flags:#x}) = {rec_new:#x}");
                            return Err(SimError {
                                source_name: self.source.clone(),
                                line: 0,
                                message: format!("mremap replay failed: {} (recorded {recorded}; in the model at {old_m:#x} -> {new_m:#x})", e.name()),
                                record: None,
                            });
                        }
                    }
                    other => {
                        let prot = other.map_or(0, |v| v.flags & mm::vma::vm::ACCESS);
                        k.step_current(Step::Munmap { start: old_m, len: old_len });
                        k.step_current(Step::Munmap { start: new_m, len: new_len });
                        // The kernel moves their PTEs with the VMA (move_page_tables).
                        img.files.mremap(old_m, old_len.next_multiple_of(PAGE_SIZE), new_m, new_len.next_multiple_of(PAGE_SIZE));
                        k.step_current(Step::Mmap { len: new_len, prot, placement: MmapPlacement::FixedNoReplace(new_m), backing: MapBacking::Special });
                    }
                }
                img.reloc_remove(old, old + old_len);
                img.reloc_remove(rec_new, rec_new + new_len);
                if new_m != rec_new {
                    img.reloc.insert(rec_new, (rec_new + new_len, new_m));
                }
            }
            SyscallKind::Mprotect if !failed => {
                let (start, len, prot) = (a[0], a[1], a[2]);
                let p = prot_to_vm(prot & 1 != 0, prot & 2 != 0, prot & 4 != 0);
                for (ms, me) in img.tr_range(start, start + len) {
                    // File mappings too: what a populate writes follows their protection (ld.so
                    // makes RELRO read-only after relocating it).
                    for (s, e) in mapped_pieces(&self.m, ms, me) {
                        self.m.step_current(Step::Mprotect { start: s, len: e - s, prot: p });
                    }
                }
            }
            SyscallKind::Madvise if !failed && (a[2] == MADV_POPULATE_READ || a[2] == MADV_POPULATE_WRITE) => {
                let how = if a[2] == MADV_POPULATE_WRITE { Populate::Write } else { Populate::Read };
                let end = a[0] + a[1].div_ceil(PAGE_SIZE) * PAGE_SIZE;
                Self::populate(&mut self.m, &mut self.stats, img, a[0], end, how);
            }
            // MADV_COLLAPSE is replayed even when it failed while recording: the recording ran
            // with PR_SET_THP_DISABLE, which makes it EINVAL (traces before 2.1; since 2.1 the
            // recorder answers it without performing it, `answered` record, usually 0); the
            // model decides under the settings. Other advice that failed there fails the same
            // way live.
            SyscallKind::Madvise if !failed || a[2] == MADV_COLLAPSE => {
                let adv = match a[2] {
                    MADV_DONTNEED => Madvise::Dontneed,
                    MADV_FREE => Madvise::Free,
                    MADV_HUGEPAGE => Madvise::Hugepage,
                    MADV_NOHUGEPAGE => Madvise::Nohugepage,
                    MADV_COLLAPSE => Madvise::Collapse,
                    MADV_DONTFORK => Madvise::Dontfork,
                    MADV_DOFORK => Madvise::Dofork,
                    MADV_WIPEONFORK => Madvise::Wipeonfork,
                    MADV_KEEPONFORK => Madvise::Keeponfork,
                    MADV_REMOVE => Madvise::Remove,
                    _ => return Ok(()),
                };
                for (ms, me) in img.tr_range(a[0], a[0] + a[1]) {
                    for (s, e) in model_pieces(&self.m, ms, me) {
                        self.m.step_current(Step::Madvise { start: s, len: e - s, advice: adv });
                    }
                }
            }
            SyscallKind::Mlock | SyscallKind::Mlock2 if !failed => {
                let flags = if kind == SyscallKind::Mlock2 { a[2] } else { 0 };
                let (start, end) = (a[0] & !(PAGE_SIZE - 1), (a[0] + a[1]).div_ceil(PAGE_SIZE) * PAGE_SIZE);
                for (ms, me) in img.tr_range(start, end) {
                    for (s, e) in model_pieces(&self.m, ms, me) {
                        self.m.step_current(Step::MlockFlags { start: s, len: e - s, flags });
                    }
                }
                if flags & mm::gup::MLOCK_ONFAULT == 0 {
                    Self::populate(&mut self.m, &mut self.stats, img, start, end, Populate::Mlock);
                }
            }
            SyscallKind::Munlock if !failed => {
                let (start, end) = (a[0] & !(PAGE_SIZE - 1), (a[0] + a[1]).div_ceil(PAGE_SIZE) * PAGE_SIZE);
                for (ms, me) in img.tr_range(start, end) {
                    for (s, e) in model_pieces(&self.m, ms, me) {
                        self.m.step_current(Step::Munlock { start: s, len: e - s });
                    }
                }
            }
            SyscallKind::Mlockall if !failed => {
                self.m.step_current(Step::MlockallFlags { flags: a[0] });
                if a[0] & mm::gup::MCL_CURRENT != 0 && a[0] & mm::gup::MCL_ONFAULT == 0 {
                    Self::populate(&mut self.m, &mut self.stats, img, 0, mm_types::TASK_SIZE, Populate::Mlock);
                }
            }
            SyscallKind::Munlockall if !failed => {
                self.m.step_current(Step::Munlockall);
            }
            SyscallKind::Brk => {
                let got = ret as u64;
                if !img.brk_known {
                    // The first brk (glibc's brk(0)) reveals start_brk.
                    self.m.step_current(Step::SetLayout { mmap_base: None, brk: Some((got, got)) });
                    img.brk_known = true;
                } else if a[0] != 0 {
                    let old = self.m.brk();
                    let model = self.m.step_current(Step::Brk { to: got }).brk();
                    if model != got {
                        let start = self.m.start_brk();
                        self.m.step_current(Step::SetLayout { mmap_base: None, brk: Some((start, got)) });
                    }
                    // do_brk_flags takes def_flags: under mlockall(MCL_FUTURE) the growth is
                    // populated (mm_populate in brk).
                    let def = self.m.mlock_future_flags();
                    if got > old && def & (mm::vma::vm::LOCKED | mm::vma::vm::LOCKONFAULT) == mm::vma::vm::LOCKED {
                        Self::populate(&mut self.m, &mut self.stats, img, old.next_multiple_of(PAGE_SIZE), got.next_multiple_of(PAGE_SIZE), Populate::Mlock);
                    }
                }
            }
            SyscallKind::Prctl if !failed && a[0] == PR_SET_THP_DISABLE => {
                let form = match (a[1], a[2] & 2) {
                    (0, _) => ThpDisable::Clear,
                    (_, 0) => ThpDisable::Completely,
                    _ => ThpDisable::ExceptAdvised,
                };
                self.m.step_current(Step::Prctl(form));
            }
            _ => {}
        }
        Ok(())
    }

    /// A successful mmap recorded at `rec`.
    fn mmap(&mut self, pid: u32, a: &[u64], rec: u64, time_ns: u64, duration_ns: u64) {
        let (hint, len, prot, flags, fd, off) = (a[0], a[1], a[2], a[3], a[4], a[5]);
        // The file the kernel mapped: the `map` record this call made, at `rec`, within it.
        let file = (flags & MAP_ANONYMOUS == 0).then(|| self.map_file(pid, rec, time_ns, time_ns + duration_ns)).flatten();
        let Some(img) = self.procs.get_mut(&pid).and_then(|p| p.image.as_mut()) else { return };
        match (img.file_of(fd), file) {
            (FileRef::Shmem(ino), Some((id, _))) => {
                self.shmem_ids.insert(id, ino);
            }
            (FileRef::Other, Some((id, memfd))) => match self.shmem_ids.get(&id) {
                // A descriptor of a shmem file the replay knows, which this process got in a way
                // the trace does not show (SCM_RIGHTS over a unix socket, pidfd_getfd,
                // /proc/PID/fd): from now on it is that file's, for writes and sizes too.
                Some(&ino) => img.install(fd as i64, FileRef::Shmem(ino), false, false),
                None if memfd || self.mounts.iter().any(|m| (m.maj, m.min) == (id.0, id.1)) => {
                    self.stats.shmem_unmodelled += 1;
                    self.stats.warnings.push(format!(
                        "pid {pid} mapped a shmem file (dev {}:{} ino {}) through a descriptor whose file the replay never saw mapped or opened (received over a unix socket before any process of the recording mapped it?): not modelled (shmem_unmodelled)",
                        id.0, id.1, id.2
                    ));
                }
                None => {}
            },
            _ => {}
        }
        let Some(img) = self.procs.get_mut(&pid).and_then(|p| p.image.as_mut()) else { return };
        let shared = flags & MAP_SHARED != 0;
        let backing = if flags & MAP_ANONYMOUS != 0 {
            if shared {
                MapBacking::SharedAnon
            } else {
                MapBacking::PrivateAnon
            }
        } else {
            match img.file_of(fd) {
                FileRef::Shmem(ino) if shared => MapBacking::Shmem { ino, pgoff: off / PAGE_SIZE },
                FileRef::Shmem(ino) => MapBacking::ShmemPrivate { ino, pgoff: off / PAGE_SIZE },
                // A private mapping of /dev/zero is anonymous memory (`mmap_zero`).
                FileRef::DevZero if shared => MapBacking::SharedAnon,
                FileRef::DevZero => MapBacking::PrivateAnon,
                FileRef::ThpArea => MapBacking::ThpFile { pgoff: off / PAGE_SIZE },
                FileRef::Other => MapBacking::Special,
            }
        };
        self.map_at(pid, hint, len, prot, flags, backing, rec, 0);
    }

    /// Note the file of every `map` record, by process and address, so that an mmap of a
    /// descriptor the replay does not know finds the file its record names (see `map_files`).
    pub fn prescan(&mut self, events: &[Event]) {
        for e in events {
            if let EventBody::Map(m) = &e.body {
                if m.ino != 0 {
                    let memfd = m.path.starts_with(b"/memfd:");
                    self.map_files.entry((e.pid, m.addr)).or_default().push_back((e.time_ns, (m.maj, m.min, m.ino), memfd));
                }
            }
        }
    }

    /// The file of the `map` record of process `pid` at `addr` made between `from` and `to`
    /// (the mmap call's entry and exit), and whether it is a memfd; earlier records there are
    /// dropped.
    fn map_file(&mut self, pid: u32, addr: u64, from: u64, to: u64) -> Option<(FileId, bool)> {
        let q = self.map_files.get_mut(&(pid, addr))?;
        while q.front().is_some_and(|&(t, _, _)| t < from) {
            q.pop_front();
        }
        q.front().filter(|&&(t, _, _)| t <= to).map(|&(_, id, memfd)| (id, memfd))
    }

    /// A System V segment attached by shmat (ipc/shm.c: `do_shmat` → `do_mmap` of the
    /// segment's file on shm_mnt, placed by `shm_get_unmapped_area` → `shmem_get_unmapped_area`).
    /// Its VMA has `shm_vm_ops`, not `shmem_anon_vm_ops`: the per-size shmem knobs do not apply,
    /// `shmem_enabled` does (as for a linked file on shm_mnt), and a read fault maps one page
    /// (no `map_pages`: no fault-around). Each segment is one inode, shared by every process
    /// that attaches it.
    fn shm_map(&mut self, pid: u32, m: &trace::MapInfo) {
        const SHM_RDONLY: u64 = 0o10000;
        let (addr, flg) = self.shmat.remove(&pid).unwrap_or((m.addr, 0));
        let ino = match self.sysv.get(&m.ino) {
            Some(&ino) => ino,
            None => {
                let ino = self.m.step_current(Step::ShmemCreate { sb: SHM_MNT, linked: true }).created();
                self.m.step_current(Step::Ftruncate { ino, size: m.len });
                self.stats.shmem_files += 1;
                self.sysv.insert(m.ino, ino);
                ino
            }
        };
        let prot = if flg & SHM_RDONLY != 0 { PROT_READ } else { PROT_READ | PROT_WRITE };
        let flags = MAP_SHARED | if addr != 0 { MAP_FIXED } else { 0 };
        self.map_at(pid, addr, m.len, prot, flags, MapBacking::Shmem { ino, pgoff: m.pgoff / PAGE_SIZE }, m.addr, mm::vma::vm::SYSV_SHM);
    }

    /// shmdt: the segment's VMAs from `addr` on are unmapped (ipc/shm.c: `ksys_shmdt`).
    fn shmdt(&mut self, pid: u32, addr: u64) {
        let Some(img) = self.procs.get(&pid).and_then(|p| p.image.as_ref()) else { return };
        let at = img.tr(addr);
        if let Some(v) = self.m.vma_lookup(at).filter(|v| v.start == at && v.is_modelled() && v.file != 0) {
            self.m.step_current(Step::Munmap { start: v.start, len: v.end - v.start });
        }
    }

    /// A mapping of `backing` the kernel made at `rec` (mmap, or shmat's do_mmap): placed as
    /// the model's knobs place it, with the placement check against the recording's.
    #[allow(clippy::too_many_arguments)]
    fn map_at(&mut self, pid: u32, hint: u64, len: u64, prot: u64, flags: u64, backing: MapBacking, rec: u64, vm_extra: u32) {
        let settings = self.settings;
        let rec_settings = self.rec_settings.as_ref();
        let Some(img) = self.procs.get_mut(&pid).and_then(|p| p.image.as_mut()) else { return };
        let fixed = flags & (MAP_FIXED | MAP_FIXED_NOREPLACE) != 0;
        let mut at = rec;
        if fixed {
            at = img.tr(rec);
        } else {
            let placement = if hint != 0 { MmapPlacement::Hint(img.tr(hint)) } else { MmapPlacement::Kernel };
            let here = self.m.mmap_placement(len, placement, backing);
            if img.relocating {
                at = here.unwrap_or(rec);
            } else {
                // The model under the recording's knobs must find the recorded address.
                let under_rec = match rec_settings {
                    Some(r) if r != settings => {
                        // A question, not a step: where the recording's knobs place it.
                        self.m.kernel_mut().set_settings(r);
                        let p = self.m.mmap_placement(len, placement, backing);
                        self.m.kernel_mut().set_settings(settings);
                        p
                    }
                    _ => here,
                };
                self.stats.placements_checked += 1;
                if under_rec != Ok(rec) && self.misses.len() < MAX_MISSES {
                    self.misses.push(PlacementMiss {
                        pid,
                        backing: backing_word(backing).to_string(),
                        len,
                        hint: format!("{hint:#x}"),
                        recorded: format!("{rec:#x}"),
                        model: match under_rec {
                            Ok(a) => format!("{a:#x}"),
                            Err(e) => format!("{e:?}"),
                        },
                    });
                }
                if under_rec == Ok(rec) {
                    self.stats.placements_matched += 1;
                    if let Ok(h) = here {
                        if h != rec {
                            img.relocating = true;
                            at = h;
                        }
                    }
                }
            }
        }
        if at != rec {
            self.stats.relocated += 1;
        }
        // MAP_FIXED replaces what was there; a placed mapping went into a hole, and under
        // relocation the recorded range may hold another mapping in the model.
        if fixed {
            for (s, e) in img.tr_range(rec, rec + len) {
                self.m.step_current(Step::Munmap { start: s, len: e - s });
                img.files.forget(s, e);
            }
        }
        self.m.step_current(Step::Munmap { start: at, len });
        img.files.forget(at, at + len);
        img.reloc_remove(rec, rec + len);
        if at != rec || img.relocating {
            img.reloc.insert(rec, (rec + len.div_ceil(PAGE_SIZE) * PAGE_SIZE, at));
        }
        let mut p = prot_to_vm(prot & 1 != 0, prot & 2 != 0, prot & 4 != 0) | self.m.mlock_future_flags() | vm_extra;
        if flags & MAP_LOCKED != 0 {
            p |= mm::vma::vm::LOCKED;
        }
        // Taken as overcommit mode 0 or 1 (the default): honoured.
        if flags & MAP_NORESERVE != 0 {
            p |= mm::vma::vm::NORESERVE;
        }
        if flags & MAP_STACK != 0 && backing == MapBacking::PrivateAnon {
            p |= mm::vma::vm::NOHUGEPAGE;
        }
        if matches!(backing, MapBacking::SharedAnon) {
            self.stats.shmem_files += 1;
        }
        if self.m.step_current(Step::Mmap { len, prot: p, placement: MmapPlacement::FixedNoReplace(at), backing }).ret().is_err() {
            return;
        }
        // vm_mmap_pgoff → mm_populate: MAP_POPULATE, or VM_LOCKED without VM_LOCKONFAULT
        // (MAP_LOCKED, mlockall(MCL_FUTURE)). GUP faults count in minflt (mm/gup.rs).
        let locked = p & (mm::vma::vm::LOCKED | mm::vma::vm::LOCKONFAULT) == mm::vma::vm::LOCKED;
        if flags & MAP_POPULATE != 0 || locked {
            Self::populate(&mut self.m, &mut self.stats, img, at, at + len, Populate::Mlock);
        }
    }

    /// Memory the kernel populated without a fault the recorder saw (mm/gup.rs), its faults
    /// counted in minflt: the model's VMAs by the model, the pages of file mappings and the
    /// vDSO by what the recorded faults mapped (crate::file_pages).
    fn populate(k: &mut Machine, st: &mut ReplayStats, img: &mut Image, start: u64, end: u64, how: Populate) {
        st.populate_calls += 1;
        for (ms, me) in img.tr_range(start, end) {
            match k.step_current(Step::Populate { start: ms, end: me, how }).populated() {
                Ok(p) => {
                    st.populate_faults += p.faults;
                    st.populate_file_pages += p.unmodelled_pages;
                }
                Err(_) => {
                    st.populate_failed += 1;
                    continue;
                }
            }
            for v in k.vmas_intersecting(ms, me).into_iter().filter(|v| !v.is_modelled()) {
                let Some(write) = how.writes(&v) else { continue };
                let faults = img.files.populate(&v, ms, me, write);
                st.populate_faults += faults;
                img.file_gup_faults += faults;
            }
        }
    }

    /// The mount of a tmpfs device in an image (made on first use, with the recorded `huge=`).
    fn sb_for(k: &mut Machine, mounts: &[MountEntry], img: &mut Image, maj: u32, min: u32) -> SbId {
        if let Some(&sb) = img.sbs.get(&(maj, min)) {
            return sb;
        }
        let huge = match mounts.iter().find(|m| m.maj == maj && m.min == min).map_or("never", |m| m.huge()) {
            "always" => SbHuge::Always,
            "within_size" => SbHuge::WithinSize,
            "advise" => SbHuge::Advise,
            _ => SbHuge::Never,
        };
        let sb = k.step_current(Step::ShmemMount(huge)).mounted();
        img.sbs.insert((maj, min), sb);
        sb
    }

    /// File calls: the fd table, and the shmem paths of write, ftruncate and fallocate.
    fn file_syscall(&mut self, pid: u32, kind: SyscallKind, a: &[u64], ret: i64, path: Option<PathInfo>) {
        let mounts = &self.mounts;
        let st = &mut self.stats;
        let names = &mut self.names;
        let Some(img) = self.procs.get_mut(&pid).and_then(|p| p.image.as_mut()) else { return };
        let desc = |img: &Image, fd: u64| img.fds.get(&(fd as i32)).copied();
        match kind {
            SyscallKind::MemfdCreate if ret >= 0 => {
                let file = if a[1] & MFD_HUGETLB != 0 {
                    FileRef::Other
                } else {
                    st.shmem_files += 1;
                    FileRef::Shmem(self.m.step_current(Step::ShmemCreate { sb: SHM_MNT, linked: false }).created())
                };
                img.install(ret, file, false, false);
            }
            SyscallKind::Open | SyscallKind::Openat | SyscallKind::Creat if ret >= 0 => {
                let flags = match kind {
                    SyscallKind::Open => a[1],
                    SyscallKind::Openat => a[2],
                    _ => O_CREAT_WRONLY_TRUNC,
                };
                let file = match &path {
                    Some(p) if p.path == b"/dev/zero" => FileRef::DevZero,
                    Some(p) if p.fs_magic == TMPFS_MAGIC => {
                        // The device of the file, or of the directory it was created in.
                        let key = (p.maj, p.min, p.path.clone());
                        let ino = match names.get(&key) {
                            Some(&ino) => ino,
                            None => {
                                let sb = Self::sb_for(&mut self.m, mounts, img, p.maj, p.min);
                                let ino = self.m.step_current(Step::ShmemCreate { sb, linked: true }).created();
                                st.shmem_files += 1;
                                if p.exists && p.size > 0 && flags & O_TRUNC == 0 {
                                    // Data from before the program: its folio sizes are not
                                    // known; it is taken as 4 KiB pages.
                                    st.preexisting_files += 1;
                                    self.m.step_current(Step::ShmemPreexisting { ino, size: p.size });
                                }
                                names.insert(key, ino);
                                ino
                            }
                        };
                        if flags & O_TRUNC != 0 && self.m.step_current(Step::Ftruncate { ino, size: 0 }).ret().is_err() {
                            st.shmem_unmodelled += 1;
                        }
                        if p.exists {
                            self.shmem_ids.insert((p.maj, p.min, p.ino), ino);
                        }
                        FileRef::Shmem(ino)
                    }
                    Some(p) if THP_AREA_FS_MAGIC.contains(&p.fs_magic) => FileRef::ThpArea,
                    _ => FileRef::Other,
                };
                img.install(ret, file, flags & O_APPEND != 0, flags & O_DIRECT != 0);
            }
            SyscallKind::Unlink | SyscallKind::Unlinkat if ret == 0 => {
                if kind == SyscallKind::Unlinkat && a[2] & AT_REMOVEDIR != 0 {
                    return;
                }
                if let Some(p) = path {
                    if let Some(ino) = names.remove(&(p.maj, p.min, p.path)) {
                        self.m.step_current(Step::ShmemUnlink(ino));
                    }
                }
            }
            SyscallKind::Close if ret == 0 => {
                img.fds.remove(&(a[0] as i32));
            }
            SyscallKind::Dup if ret >= 0 => {
                if let Some(d) = desc(img, a[0]) {
                    img.fds.insert(ret as i32, d);
                }
            }
            SyscallKind::Dup2 | SyscallKind::Dup3 if ret >= 0 => match desc(img, a[0]) {
                Some(d) => {
                    img.fds.insert(ret as i32, d);
                }
                None => {
                    img.fds.remove(&(ret as i32));
                }
            },
            SyscallKind::Fcntl if ret >= 0 && (a[1] == F_DUPFD || a[1] == F_DUPFD_CLOEXEC) => {
                if let Some(d) = desc(img, a[0]) {
                    img.fds.insert(ret as i32, d);
                }
            }
            SyscallKind::Lseek if ret >= 0 => {
                if let Some(d) = desc(img, a[0]) {
                    img.descs[d].pos = ret as u64;
                }
            }
            SyscallKind::Read | SyscallKind::Readv | SyscallKind::Pread64 if ret > 0 => {
                let Some(d) = desc(img, a[0]) else { return };
                if kind != SyscallKind::Pread64 {
                    img.descs[d].pos += ret as u64;
                }
                // An O_DIRECT read into one buffer (readv's iovecs are not recorded): the block
                // layer pins the `ret` bytes it filled with FOLL_WRITE, faulting in what is not
                // mapped writable (counted in minflt, as GUP faults are), and unpins them at
                // completion.
                if img.descs[d].direct && kind != SyscallKind::Readv {
                    let io = self.io.get_or_insert_with(Default::default);
                    io.direct_reads += 1;
                    io.bytes += ret as u64;
                    for (ms, me) in img.tr_range(a[1], a[1] + ret as u64) {
                        match self.m.step_current(Step::PinUserPages { start: ms, len: me - ms }).pinned() {
                            Ok(p) => {
                                io.pinned_folios += p.folios;
                                io.pinned_pte_pages += p.pte_pages;
                                io.pinned_pmd_pages += p.pmd_pages;
                                io.pin_faults += p.faults;
                            }
                            Err(_) => st.direct_reads_unmodelled += 1,
                        }
                    }
                }
            }
            SyscallKind::Write | SyscallKind::Writev | SyscallKind::Pwrite64 | SyscallKind::Pwritev | SyscallKind::Pwritev2 if ret > 0 => {
                let Some(d) = desc(img, a[0]) else { return };
                let FileRef::Shmem(ino) = img.descs[d].file else {
                    if matches!(kind, SyscallKind::Write | SyscallKind::Writev) || (kind == SyscallKind::Pwritev2 && a[3] as i64 == -1) {
                        img.descs[d].pos += ret as u64;
                    }
                    return;
                };
                let size = self.m.shmem_inode(ino).i_size;
                let append = img.descs[d].append || (kind == SyscallKind::Pwritev2 && a[5] & RWF_APPEND != 0);
                let uses_pos = matches!(kind, SyscallKind::Write | SyscallKind::Writev) || (kind == SyscallKind::Pwritev2 && a[3] as i64 == -1);
                let at = if append {
                    size
                } else if uses_pos {
                    img.descs[d].pos
                } else {
                    a[3]
                };
                st.shmem_writes += 1;
                if self.m.step_current(Step::ShmemWrite { ino, offset: at, len: ret as u64 }).ret().is_err() {
                    st.shmem_unmodelled += 1;
                }
                if uses_pos {
                    img.descs[d].pos = at + ret as u64;
                }
            }
            SyscallKind::Ftruncate if ret == 0 => {
                if let FileRef::Shmem(ino) = img.file_of(a[0]) {
                    if self.m.step_current(Step::Ftruncate { ino, size: a[1] }).ret().is_err() {
                        st.shmem_unmodelled += 1;
                    }
                }
            }
            SyscallKind::Fallocate if ret == 0 => {
                if let FileRef::Shmem(ino) = img.file_of(a[0]) {
                    let r = match a[1] {
                        0 | FALLOC_FL_KEEP_SIZE => self.m.step_current(Step::Fallocate { ino, offset: a[2], len: a[3], keep_size: a[1] != 0 }).ret(),
                        m if m == FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE => self.m.step_current(Step::PunchHole { ino, offset: a[2], len: a[3] }).ret(),
                        _ => Err(mm::Errno::ENOSYS),
                    };
                    if r.is_err() {
                        st.shmem_unmodelled += 1;
                    }
                }
            }
            _ => {}
        }
    }

    /// Finish: retire every image still alive and build the result.
    pub fn finish(mut self) -> Finished {
        // Children whose parent's clone record never came: their events as recorded.
        let pending: Vec<u32> = self.procs.iter().filter(|(_, p)| p.pending.is_some()).map(|(pid, _)| *pid).collect();
        for pid in pending {
            let (_, events) = self.procs.get_mut(&pid).and_then(|p| p.pending.take()).expect("pending");
            for ev in &events {
                let _ = self.run_event(ev);
            }
        }
        let pids: Vec<u32> = self.procs.keys().copied().collect();
        for pid in pids {
            self.exit(pid);
        }
        if self.images_without_snapshot > 0 {
            let why = if self.every_exec_snapshot {
                "although the recording snapshots every execve (a process killed while stopped there?)"
            } else {
                "the recording has only the first process's (made before thplab snapshotted every execve; record it again)"
            };
            self.stats.warnings.push(format!(
                "{} process images made by an execve have no exec snapshot, {why}: the model does not know their stack, heap, ELF and loader mappings, and checks their placements without them",
                self.images_without_snapshot
            ));
        }
        let passthrough: u64 = self.procs.values().map(|p| p.passthrough).sum();
        let minflt = self.done_minflt + passthrough;
        // One machine: its counters are every image's.
        let mut counters = self.done_counters;
        counters.add(&self.m.counters);
        let khugepaged = self.recorded_time.then(|| self.m.khugepaged_state().clone());
        let timeline = self.m.timeline().to_vec();
        let accesses = self.tlb.as_ref().map(|t| {
            let mut r = t.report_named(&self.access_names);
            r.recorded = Some(self.access_counts.clone());
            r
        });
        Finished { counters, minflt, images: self.done_images, stats: self.stats, misses: self.misses, khugepaged, io: self.io, timeline, accesses }
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
    pub explain: Option<mm::explain::ExplainLog>,
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
    }
}

#[cfg(test)]
#[path = "replay_exec_tests.rs"]
mod exec_tests;
