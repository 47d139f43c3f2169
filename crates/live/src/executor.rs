//! The native executor: runs a workload on real memory in a child process and reports what the
//! kernel did, as a [`uapi::RunResult`] with source `live`.
//!
//! The child is `thplab __exec` (any program that calls [`exec_child_main`] with the spec read
//! from stdin), started with `personality(ADDR_NO_RANDOMIZE)` and
//! `GLIBC_TUNABLES=glibc.malloc.mmap_threshold=0` so that malloc never moves the program break
//! and the heap holds only what the workload's `brk` puts there. The parent resolves every
//! address before the child starts (regions where the model placed them, the heap relative to
//! the child's `start_brk`), so the child allocates nothing between "go" and "done".
//!
//! Shared memory: the child first mounts the workload's tmpfs mounts (`huge=` as declared) on
//! empty directories `$THPLAB_STATE_DIR/mnt/<parent pid>-<n>` in a mount namespace of its own
//! (`/` made recursively private), and binds the one `shm_open ... on=` uses over /dev/shm;
//! the mounts vanish with the child however it ends, and the parent removes the directories.
//! `shm_open NAME` without `on=` creates `/dev/shm/thplab-<child pid>-NAME` on the machine's
//! /dev/shm; the child unlinks it at the end, the parent after the child is gone, and every run
//! first removes those of dead pids. pwrite copies from a buffer mapped and filled before `go`
//! outside every region.
//!
//! Protocol (fd 3: child → parent lines, fd 4: parent → child lines):
//! `ready {json}` → `go` → `o<index>` before each op → `done {json}` → `exit`.
//! A child killed by a signal (a touch of unmapped memory) is reported with the workload line of
//! the last `o<index>` it sent.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mm_types::{PAGE_SIZE, PMD_SIZE};
use serde::{Deserialize, Serialize};
use uapi::result::{LiveKhugepaged, LiveSection, LiveWorkloadRun, Noise, NoiseEntry, RegionPlacement, Spread};
use uapi::{CallResult, Census, MthpStat, ProcessStats, RunResult, ThpSettings};
use workload::{Backing, FileKind, OpKind, Placement, Range, RegionId, ThpDisable, Touch, TouchOrder, TouchPlan, Workload, HEAP};

use crate::census::census_of_ranges;
use crate::guard::SettingsGuard;
use crate::procfs::{label_of_dir, read_smaps, CounterSnapshot};
use crate::sysfs::Paths;
use crate::{LiveError, Result};

/// fd on which the child writes its status lines.
pub const STATUS_FD: i32 = 3;
/// fd from which the child reads `go` and `exit`.
pub const CONTROL_FD: i32 = 4;

/// Highest address the harness uses when the model gave no address for a region; the same
/// top-of-mmap-area as the model's default machine.
const HARNESS_MMAP_BASE: u64 = 0x7dff_fffc_5000;

/// One range, absolute or relative to the child's `start_brk`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Piece {
    pub addr: u64,
    pub len: u64,
    /// `addr` is an offset from `start_brk`.
    #[serde(default)]
    pub heap: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ExecKind {
    Mmap {
        addr: u64,
        len: u64,
        prot: i32,
        /// MAP_SHARED (with `file`: of that file, else MAP_SHARED|MAP_ANONYMOUS).
        #[serde(default)]
        shared: bool,
        /// Index into [`ExecSpec::files`].
        #[serde(default)]
        file: Option<usize>,
        /// Byte offset into the file.
        #[serde(default)]
        pgoff: u64,
    },
    /// A declared tmpfs (mounted before `go`; the op reports how that went).
    Mount { mount: usize },
    /// memfd_create, shm_open or open(O_CREAT) of [`ExecSpec::files`]`[file]`.
    Create { file: usize },
    Ftruncate { file: usize, size: u64 },
    /// `mode`: fallocate(2)'s mode argument.
    Fallocate { file: usize, offset: u64, len: u64, mode: i32 },
    /// pwrite calls of `chunk` bytes covering `[offset, offset + len)`.
    Write { file: usize, offset: u64, len: u64, chunk: u64 },
    Munmap { pieces: Vec<Piece> },
    Mprotect { pieces: Vec<Piece>, prot: i32 },
    Madvise { pieces: Vec<Piece>, advice: i32 },
    Brk { delta: i64 },
    Prctl { arg2: u64, arg3: u64 },
    /// nanosleep for this many nanoseconds.
    Sleep { ns: u64 },
    /// `phase NAME`: no call; its result is the CLOCK_MONOTONIC time it was reached.
    Phase { name: String },
    Touch {
        base: Piece,
        offset: u64,
        len: u64,
        write: bool,
        /// 0 sequential, 1 reverse, 2 random.
        order: u8,
        seed: u64,
        stride: u64,
        count: Option<u64>,
        /// `rate=`: bytes of selected pages per second (workload::Pace::Rate).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rate: Option<u64>,
        /// `duration=`: ns over which the touch is spread (workload::Pace::Duration).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        duration_ns: Option<u64>,
    },
    /// `repeat DURATION {`: the next `body` operations again and again while CLOCK_MONOTONIC
    /// is before this operation's start + `ns` when an iteration would start; its result is
    /// the number of iterations.
    RepeatFor { ns: u64, body: usize },
    /// An `access` statement: the loads and stores of `workload::AccessPlan`.
    Access {
        base: Piece,
        offset: u64,
        len: u64,
        /// 0 seq, 1 stride (p1), 2 uniform, 3 gaussian (p1 median, p2 stddev), 4 zipf (p1 exponent in thousandths), 5 chase.
        pattern: u8,
        p1: u64,
        p2: u64,
        count: Option<u64>,
        writes_pct: u8,
        seed: u64,
        elem: u64,
    },
    /// fork(): the child becomes process `child` (an index into the workload's processes).
    Fork { child: usize },
    /// pthread_create: thread `child` (started before `go`) runs from here on.
    Thread { child: usize },
    /// clone(CLONE_VM|CLONE_VFORK): the child `child` runs its operations in main's mm, main
    /// waits until it exits.
    Vfork { child: usize },
    /// pthread_join of thread `child`.
    Join { child: usize },
    /// _exit(0) of the process running it.
    Exit,
    /// waitpid of process `child`.
    Wait { child: usize },
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExecOp {
    pub line: usize,
    /// The process that runs it (0 = main).
    #[serde(default)]
    pub proc: usize,
    /// How the result names the call, as the model does: `mmap`, `madvise(collapse)`,
    /// `mprotect(r)`, `brk`, `prctl(PR_SET_THP_DISABLE)`; empty for touches.
    #[serde(default)]
    pub call: String,
    pub kind: ExecKind,
}

/// What the parent sends the child on stdin.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExecSpec {
    pub source: String,
    pub ops: Vec<ExecOp>,
    /// Private tmpfs mounts, mounted in the child's own mount namespace before `go`.
    #[serde(default)]
    pub mounts: Vec<MountSpec>,
    /// The mount bound over /dev/shm in the child's namespace (for `shm_open NAME on=MOUNT`).
    #[serde(default)]
    pub dev_shm: Option<usize>,
    #[serde(default)]
    pub files: Vec<FileSpec>,
    /// The buffer pwrite copies from: (address, length), mapped and filled before `go`,
    /// outside every workload region.
    #[serde(default)]
    pub write_buf: Option<(u64, u64)>,
    /// Processes and threads of the workload (main, its forked children, its threads and vfork
    /// children); 1 without any.
    #[serde(default = "one")]
    pub procs: usize,
}

fn one() -> usize {
    1
}

/// A tmpfs mount of the run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MountSpec {
    /// `huge=` value.
    pub huge: String,
    /// Host directory to mount it on (made by the parent for each run; empty in the spec that
    /// [`build_spec`] returns).
    #[serde(default)]
    pub dir: String,
    pub line: usize,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FileSpecKind {
    Memfd,
    /// shm_open on /dev/shm (the machine's, or [`ExecSpec::dev_shm`] bound over it).
    Shm,
    /// open(O_CREAT|O_RDWR) on a mount.
    Open,
}

/// A file of the workload.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileSpec {
    pub name: String,
    pub kind: FileSpecKind,
    #[serde(default)]
    pub mount: Option<usize>,
}

/// Largest pwrite buffer; longer chunks are written in pieces of this size.
pub const WRITE_BUF_MAX: u64 = 64 << 20;

/// Prefix of the POSIX shm objects a run creates on the machine's /dev/shm:
/// `thplab-<child pid>-<NAME>`.
pub const SHM_PREFIX: &str = "thplab-";

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Ready {
    pid: i32,
    start_brk: u64,
    brk: u64,
}

/// What a forked process reports when it exits or when the run ends (`pdone {json}`).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct ProcDone {
    proc: usize,
    pid: i32,
    minflt: u64,
    exited: bool,
    /// (op index, result) of the operations it ran.
    results: Vec<(usize, i64)>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Done {
    minflt: u64,
    wall_ns: u64,
    /// CLOCK_MONOTONIC at the start of the operations (the results of `phase` are times on it).
    #[serde(default)]
    start_ns: u64,
    /// Per op: 0 or errno; for brk the new break; touches 0.
    results: Vec<i64>,
    brk_end: u64,
}

/// How the parent starts its child, and how often.
#[derive(Clone, Debug)]
pub struct ExecOptions {
    /// The program to run as the child; default: this executable.
    pub child_program: PathBuf,
    /// Arguments before nothing else; default `["__exec"]`.
    pub child_args: Vec<String>,
    /// Runs (≥ 1); counters are reported as the median.
    pub repeat: u32,
    /// Print one line per run on stderr (and, while sampling, one a second).
    pub progress: bool,
    /// `--sample MS`: the result's `timeline` (crate::timeline).
    pub sample: Option<Duration>,
    /// Before every run after the first, wait until page reporting has taken every free block
    /// (`crate::host::wait_until_settled`): the state a model run with a profile's `[host]`
    /// starts from (a run right after another would get the blocks it freed, still backed).
    /// Every run also goes to the CPU whose per-CPU lists are the quietest as it starts
    /// (`crate::host::cpu_for_run`: the last run left the pages it freed on the lists of the CPU
    /// it exited on, backed), starts with the THP-sized pages of that list taken and held until
    /// it ends (`crate::host::take_cpu_thps`), and reads the free lists it starts from
    /// (`crate::host::run_start`).
    pub settle_host: bool,
    /// Pin the workload (the child, and so every process and thread it starts) to this CPU
    /// (`sched_setaffinity`); with `settle_host`, only where no CPU can be chosen by its lists.
    pub cpu: Option<usize>,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            child_program: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe")),
            child_args: vec!["__exec".into()],
            repeat: 1,
            progress: false,
            sample: None,
            settle_host: false,
            cpu: None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Parent: from a workload to a spec.

/// Resolve every address of `w`: regions at the model's placement (or the harness's own, when
/// the model gave none), heap pieces relative to `start_brk`. Returns the spec, the regions
/// (heap length as of the end) and notes on placement.
pub fn build_spec(w: &Workload, model_regions: &[RegionPlacement]) -> Result<(ExecSpec, Vec<RegionPlacement>, Vec<String>)> {
    let mut addr: Vec<Option<u64>> = vec![None; w.regions.len()];
    let mut notes = Vec::new();
    let mut cursor = HARNESS_MMAP_BASE;
    let mut heap_off: i64 = 0;
    let mut heap_len: u64 = 0;
    let mut heap_max: u64 = 0;
    let mut ops = Vec::new();
    let err = |line: usize, message: String| LiveError::Workload { source_name: w.source.clone(), line, message };
    let heap_id = w.region_by_name(HEAP);

    // Files and mounts.
    let mounts: Vec<MountSpec> =
        w.mounts.iter().map(|m| MountSpec { huge: m.huge.word().to_string(), dir: String::new(), line: m.line }).collect();
    let mut files = Vec::new();
    let mut shm_mount: Option<(Option<workload::MountId>, usize)> = None;
    for f in &w.files {
        let (kind, mount) = match f.kind {
            FileKind::Memfd => (FileSpecKind::Memfd, None),
            FileKind::PosixShm { mount } => {
                match shm_mount {
                    None => shm_mount = Some((mount, f.line)),
                    Some((m, first)) if m != mount => {
                        let on = |m: Option<workload::MountId>| match m {
                            Some(m) => format!("tmpfs '{}'", w.mount(m).name),
                            None => "the machine's /dev/shm".to_string(),
                        };
                        return Err(err(
                            f.line,
                            format!(
                                "shm_open on {} after shm_open on {} (line {first}): the live executor binds one \
                                 mount over /dev/shm, so all shm_open objects of a workload must be on the same mount",
                                on(mount),
                                on(m)
                            ),
                        ));
                    }
                    _ => {}
                }
                (FileSpecKind::Shm, mount.map(|m| m.0 as usize))
            }
            FileKind::Tmpfs { mount } => (FileSpecKind::Open, Some(mount.0 as usize)),
        };
        files.push(FileSpec { name: f.name.clone(), kind, mount });
    }
    let dev_shm = shm_mount.and_then(|(m, _)| m).map(|m| m.0 as usize);
    let mut write_buf_len = 0u64;

    for op in &w.ops {
        let call = match &op.kind {
            OpKind::Mmap { .. } => "mmap".to_string(),
            OpKind::Munmap(_) => "munmap".into(),
            OpKind::Mprotect(_, p) => format!("mprotect({p})"),
            OpKind::Madvise(_, a) => format!("madvise({})", a.word()),
            OpKind::Brk { .. } => "brk".into(),
            OpKind::Prctl(_) => "prctl(PR_SET_THP_DISABLE)".into(),
            OpKind::Sleep { .. } | OpKind::Phase(_) | OpKind::RepeatFor { .. } => String::new(),
            OpKind::Touch(_) | OpKind::Access(_) => String::new(),
            OpKind::ReadDirect { .. } => "read(O_DIRECT)".into(),
            OpKind::Mount(_) => "mount(tmpfs)".into(),
            OpKind::Create(f) => match w.file(*f).kind {
                FileKind::Memfd => "memfd_create".into(),
                FileKind::PosixShm { .. } => "shm_open".into(),
                FileKind::Tmpfs { .. } => "open".into(),
            },
            OpKind::Ftruncate { .. } => "ftruncate".into(),
            OpKind::Fallocate { .. } => "fallocate".into(),
            OpKind::Write { .. } => "pwrite".into(),
            OpKind::Fork(_) => "fork".into(),
            OpKind::Thread(_) => "pthread_create".into(),
            OpKind::Vfork(_) => "vfork".into(),
            OpKind::Wait(p) if w.proc(*p).kind == workload::ProcKind::Thread => "pthread_join".into(),
            OpKind::Wait(_) => "wait4".into(),
            OpKind::Exit => String::new(),
        };
        let kind = match &op.kind {
            OpKind::Mmap { region, len, prot, placement, backing } => {
                let name = &w.region(*region).name;
                let a = match (placement, model_regions.iter().find(|r| &r.name == name)) {
                    (Placement::Fixed(a), _) => *a,
                    (_, Some(r)) => r.start,
                    (p, None) => {
                        let a = harness_place(&mut cursor, *len, *p);
                        notes.push(format!("region {name}: no model address given; the harness placed it at {a:#x}"));
                        a
                    }
                };
                addr[region.0 as usize] = Some(a);
                let (shared, file, pgoff) = match *backing {
                    Backing::PrivateAnon => (false, None, 0),
                    Backing::SharedAnon => (true, None, 0),
                    Backing::SharedFile { file, pgoff } => (true, Some(file.0 as usize), pgoff),
                    Backing::PrivateFile { file, pgoff } => (false, Some(file.0 as usize), pgoff),
                };
                ExecKind::Mmap { addr: a, len: *len, prot: prot.bits(), shared, file, pgoff }
            }
            OpKind::Mount(m) => ExecKind::Mount { mount: m.0 as usize },
            OpKind::Create(f) => ExecKind::Create { file: f.0 as usize },
            OpKind::Ftruncate { file, size } => ExecKind::Ftruncate { file: file.0 as usize, size: *size },
            OpKind::Fallocate { file, offset, len, mode } => {
                ExecKind::Fallocate { file: file.0 as usize, offset: *offset, len: *len, mode: mode.bits() }
            }
            OpKind::Write { file, offset, len, chunk } => {
                let piece = (*chunk).min(*len);
                if piece > WRITE_BUF_MAX {
                    notes.push(format!(
                        "line {}: chunk={} is larger than the executor's {} MiB write buffer: each call of the \
                         workload is made as several pwrite calls of at most {} MiB (the kernel's write path \
                         works per folio anyway)",
                        op.line,
                        chunk,
                        WRITE_BUF_MAX >> 20,
                        WRITE_BUF_MAX >> 20
                    ));
                }
                write_buf_len = write_buf_len.max(piece.min(WRITE_BUF_MAX));
                ExecKind::Write { file: file.0 as usize, offset: *offset, len: *len, chunk: *chunk }
            }
            OpKind::Munmap(r) => ExecKind::Munmap { pieces: pieces(w, r, &addr, heap_id, heap_len).map_err(|m| err(op.line, m))? },
            OpKind::Mprotect(r, p) => ExecKind::Mprotect {
                pieces: pieces(w, r, &addr, heap_id, heap_len).map_err(|m| err(op.line, m))?,
                prot: p.bits(),
            },
            // The live run faults the buffer in as the read's pin_user_pages_fast(FOLL_WRITE)
            // would (MADV_POPULATE_WRITE: the same __get_user_pages write faults); it issues
            // no I/O.
            OpKind::ReadDirect { range, .. } => ExecKind::Madvise {
                pieces: pieces(w, range, &addr, heap_id, heap_len).map_err(|m| err(op.line, m))?,
                advice: workload::Advice::PopulateWrite.madv(),
            },
            OpKind::Madvise(r, a) => ExecKind::Madvise {
                pieces: pieces(w, r, &addr, heap_id, heap_len).map_err(|m| err(op.line, m))?,
                advice: a.madv(),
            },
            OpKind::Brk { delta } => {
                let new = heap_off + delta;
                if new >= 0 {
                    heap_off = new;
                    heap_len = heap_off as u64;
                    heap_max = heap_max.max(heap_len.div_ceil(PAGE_SIZE) * PAGE_SIZE);
                }
                ExecKind::Brk { delta: *delta }
            }
            OpKind::Prctl(d) => {
                let (arg2, arg3) = match d {
                    ThpDisable::Completely => (1, 0),
                    ThpDisable::ExceptAdvised => (1, 2),
                    ThpDisable::Clear => (0, 0),
                };
                ExecKind::Prctl { arg2, arg3 }
            }
            OpKind::Sleep { ns } => ExecKind::Sleep { ns: *ns },
            // A phase boundary makes no call: nothing happens live.
            OpKind::Phase(name) => ExecKind::Phase { name: name.clone() },
            OpKind::RepeatFor { ns, body } => ExecKind::RepeatFor { ns: *ns, body: *body },
            OpKind::Access(a) => {
                let (base, len) = region_base(w, &a.range, &addr, heap_id, heap_len).map_err(|m| err(op.line, m))?;
                let (pattern, p1, p2) = match a.pattern {
                    workload::Pattern::Seq => (0, 0, 0),
                    workload::Pattern::Stride(s) => (1, s, 0),
                    workload::Pattern::Uniform => (2, 0, 0),
                    workload::Pattern::Gaussian { median, stddev } => (3, median, stddev),
                    workload::Pattern::Zipf { s_milli } => (4, s_milli as u64, 0),
                    workload::Pattern::Chase => (5, 0, 0),
                };
                ExecKind::Access { base, offset: a.range.offset, len, pattern, p1, p2, count: a.count, writes_pct: a.writes_pct, seed: a.seed, elem: a.elem }
            }
            OpKind::Touch(t) => {
                let (base, len) = region_base(w, &t.range, &addr, heap_id, heap_len).map_err(|m| err(op.line, m))?;
                let (order, seed) = match t.order {
                    TouchOrder::Sequential => (0, 0),
                    TouchOrder::Reverse => (1, 0),
                    TouchOrder::Random { seed } => (2, seed),
                };
                ExecKind::Touch {
                    base,
                    offset: t.range.offset,
                    len,
                    write: t.write,
                    order,
                    seed,
                    stride: t.stride,
                    count: t.count,
                    rate: match t.pace {
                        Some(workload::Pace::Rate { bytes_per_sec }) => Some(bytes_per_sec),
                        _ => None,
                    },
                    duration_ns: match t.pace {
                        Some(workload::Pace::Duration { ns }) => Some(ns),
                        _ => None,
                    },
                }
            }
            OpKind::Fork(p) => ExecKind::Fork { child: p.0 as usize },
            OpKind::Thread(p) => ExecKind::Thread { child: p.0 as usize },
            OpKind::Vfork(p) => ExecKind::Vfork { child: p.0 as usize },
            OpKind::Wait(p) if w.proc(*p).kind == workload::ProcKind::Thread => ExecKind::Join { child: p.0 as usize },
            OpKind::Exit => ExecKind::Exit,
            OpKind::Wait(p) => ExecKind::Wait { child: p.0 as usize },
        };
        ops.push(ExecOp { line: op.line, proc: op.proc.0 as usize, call, kind });
    }
    let mut regions = Vec::new();
    for (i, r) in w.regions.iter().enumerate() {
        if Some(RegionId(i as u32)) == heap_id {
            // Filled in by the run (start_brk is the child's); `len` here is the most the heap
            // ever maps, page-rounded, for the census.
            regions.push(RegionPlacement { name: r.name.clone(), start: 0, len: heap_max });
        } else if let Some(a) = addr[i] {
            regions.push(RegionPlacement { name: r.name.clone(), start: a, len: r.len });
        }
    }
    let write_buf = (write_buf_len > 0).then(|| {
        let len = write_buf_len.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        (scratch_address(&regions, len), len)
    });
    Ok((ExecSpec { source: w.source.clone(), ops, mounts, dev_shm, files, write_buf, procs: w.procs.len() }, regions, notes))
}

/// An address for `len` bytes of the harness's own that overlaps no region (the heap is near
/// 0x5555_5555_0000, the model's mappings below 0x7dff_fffc_5000).
fn scratch_address(regions: &[RegionPlacement], len: u64) -> u64 {
    let mut cand: u64 = 0x6000_0000_0000;
    let heap_guard = 1u64 << 40; // the heap may grow; keep far from it
    while regions.iter().any(|r| {
        let (s, e) = if r.name == HEAP { (0x5555_0000_0000, 0x5555_0000_0000 + heap_guard) } else { (r.start, r.start + r.len) };
        cand < e && s < cand + len
    }) {
        cand -= 1 << 40;
    }
    cand
}

fn harness_place(cursor: &mut u64, len: u64, p: Placement) -> u64 {
    let (align, offset) = match p {
        Placement::Aligned { align, offset } => (align, offset),
        _ if len.is_multiple_of(PMD_SIZE) => (PMD_SIZE, 0),
        _ => (PAGE_SIZE, 0),
    };
    let top = *cursor - len;
    let mut a = top / align * align + offset;
    if a > top {
        a -= align;
    }
    *cursor = a;
    a
}

/// (base of the range's region, effective length of the range).
fn region_base(
    w: &Workload,
    r: &Range,
    addr: &[Option<u64>],
    heap_id: Option<RegionId>,
    heap_len: u64,
) -> std::result::Result<(Piece, u64), String> {
    if Some(r.region) == heap_id {
        // As the model does: a range to the end (bare `heap`, `heap[8K..]`) resolves against
        // the heap's current length, break − start_brk, known statically from the brk deltas.
        return Ok((Piece { addr: 0, len: heap_len, heap: true }, r.len_in(heap_len)));
    }
    let a = addr[r.region.0 as usize]
        .ok_or_else(|| format!("region '{}' is used before its mmap", w.region(r.region).name))?;
    let len = w.region(r.region).len;
    Ok((Piece { addr: a, len, heap: false }, r.len_in(len)))
}

fn pieces(
    w: &Workload,
    r: &Range,
    addr: &[Option<u64>],
    heap_id: Option<RegionId>,
    heap_len: u64,
) -> std::result::Result<Vec<Piece>, String> {
    let (base, len) = region_base(w, r, addr, heap_id, heap_len)?;
    let mut rr = *r;
    rr.len = len;
    Ok(rr.pieces(base.len).into_iter().map(|(o, l)| Piece { addr: base.addr + o, len: l, heap: base.heap }).collect())
}

// ---------------------------------------------------------------------------------------------
// Child.

enum Prepared {
    Mmap { addr: u64, len: u64, prot: i32, flags: i32, file: Option<usize>, pgoff: u64 },
    /// Mounted before `go`: nothing to do but report it.
    Mount,
    Create { file: usize },
    Ftruncate { file: usize, size: u64 },
    Fallocate { file: usize, offset: u64, len: u64, mode: i32 },
    Write { file: usize, offset: u64, len: u64, chunk: u64 },
    Ranges { kind: u8, pieces: Vec<(u64, u64)>, arg: i32 },
    Brk { delta: i64 },
    Prctl { arg2: u64, arg3: u64 },
    Sleep { ns: u64 },
    Phase,
    Touch { plan: TouchPlan, write: bool, pacing: Option<workload::Pacing> },
    RepeatFor { ns: u64, body: usize },
    Access { addr: u64, plan: workload::AccessPlan },
    Fork { child: usize },
    Thread { child: usize },
    Vfork { child: usize },
    Join { child: usize },
    Exit,
    Wait { child: usize },
}

const K_MUNMAP: u8 = 0;
const K_MPROTECT: u8 = 1;
const K_MADVISE: u8 = 2;

fn raw_write_all(fd: i32, mut buf: &[u8]) -> bool {
    while !buf.is_empty() {
        // SAFETY: write from a valid buffer.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return false;
        }
        buf = &buf[n as usize..];
    }
    true
}

/// Read one line (without allocating) into `buf`; `None` on EOF or error.
fn raw_read_line(fd: i32, buf: &mut [u8; 64]) -> Option<usize> {
    let mut n = 0;
    loop {
        let mut c = 0u8;
        // SAFETY: read one byte into a valid location.
        let r = unsafe { libc::read(fd, (&mut c as *mut u8).cast(), 1) };
        if r == 0 {
            return None;
        }
        if r < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return None;
        }
        if c == b'\n' {
            return Some(n);
        }
        if n < buf.len() {
            buf[n] = c;
            n += 1;
        }
    }
}

/// `o<index>\n` on the status fd, formatted on the stack.
#[inline(never)]
fn send_op_index(i: usize) {
    let mut buf = [0u8; 24];
    let mut digits = [0u8; 20];
    let mut n = 0;
    let mut v = i;
    loop {
        digits[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    buf[0] = b'o';
    for k in 0..n {
        buf[1 + k] = digits[n - 1 - k];
    }
    buf[1 + n] = b'\n';
    raw_write_all(STATUS_FD, &buf[..n + 2]);
}

pub(crate) fn minflt_now() -> u64 {
    // SAFETY: getrusage fills a zeroed struct.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru.ru_minflt as u64
    }
}

fn mono_ns() -> u64 {
    // SAFETY: clock_gettime fills a zeroed struct.
    unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
}

/// Sleep until CLOCK_MONOTONIC reads `deadline` ns (TIMER_ABSTIME: no drift over many
/// sleeps); at once when it has passed.
fn sleep_until(deadline: u64) {
    if mono_ns() >= deadline {
        return;
    }
    let ts = libc::timespec { tv_sec: (deadline / 1_000_000_000) as libc::time_t, tv_nsec: (deadline % 1_000_000_000) as libc::c_long };
    // SAFETY: clock_nanosleep with a valid timespec and no remainder; resumed after a signal.
    while unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) } == libc::EINTR {}
}

/// Accesses `from..to` of a touch's plan: a volatile one-byte write of 1, or a read.
#[inline]
fn touch_pages(plan: &TouchPlan, from: u64, to: u64, write: bool) {
    if write {
        for k in from..to {
            // SAFETY: the workload touches its own mapping; a bad address kills the child with
            // SIGSEGV, which the parent reports with the line.
            unsafe { store_page_byte(plan.get(k) as *mut u8) };
        }
    } else {
        for k in from..to {
            // SAFETY: as above.
            unsafe { std::ptr::read_volatile(plan.get(k) as *const u8) };
        }
    }
}

/// One touch's write: a volatile byte store of 1, then a load fence (x86-64 `lfence`) so that
/// no later store of the loop executes before this one has completed or faulted.
///
/// Without the fence the CPU runs the loop ahead while the first write to a write-protected
/// 2 MiB mapping waits to fault, and caches the read-only translation of the next pages; when
/// that fault makes the whole PMD writable (do_huge_pmd_wp_page reusing the folio,
/// pmdp_set_access_flags), x86 flushes no TLB entry (arch/x86/mm/pgtable.c:
/// pmdp_set_access_flags relies on the fault's own invalidation of one address), and on a VM
/// whose host backs the guest with 4 KiB pages each of those stale entries covers 4 KiB: the
/// next writes take spurious faults (__handle_mm_fault finds the PMD writable and only sets it
/// young), which count in minflt like any other. Measured on this VM: fill 4 MiB under
/// `enabled=always`, fork, the child writes all and exits, the parent writes 1 MiB: 4 faults
/// (6 at times) without the fence, 1 with it, as the kernel's rule has it. The fence costs
/// tens of cycles per page, against microseconds per fault.
///
/// # Safety
/// `p` must be a writable address of this process (a bad one kills it with SIGSEGV).
#[inline(always)]
pub(crate) unsafe fn store_page_byte(p: *mut u8) {
    // SAFETY: the caller's.
    unsafe { std::ptr::write_volatile(p, 1) };
    #[cfg(target_arch = "x86_64")]
    // SAFETY: lfence has no operands and no effect but ordering.
    unsafe {
        std::arch::x86_64::_mm_lfence()
    };
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn sys_brk(addr: u64) -> u64 {
    // SAFETY: brk only moves the program break.
    unsafe { libc::syscall(libc::SYS_brk, addr) as u64 }
}

#[inline(never)]
fn pretouch_stack() {
    let mut buf = [0u8; 256 * 1024];
    for i in (0..buf.len()).step_by(4096) {
        // SAFETY: in-bounds volatile write.
        unsafe { std::ptr::write_volatile(buf.as_mut_ptr().add(i), 1) };
    }
    std::hint::black_box(&mut buf);
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

fn child_run(spec_json: &str) -> std::result::Result<(), String> {
    for fd in [STATUS_FD, CONTROL_FD] {
        // SAFETY: F_GETFD on any integer is harmless.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
            return Err(format!("fd {fd} is not open: this command is started by 'thplab live', not by hand"));
        }
    }
    let spec: ExecSpec = serde_json::from_str(spec_json).map_err(|e| format!("bad spec on stdin: {e}"))?;
    // Before anything else of the workload: its tmpfs mounts, in a mount namespace of its own
    // (they vanish with the child, however it ends).
    setup_mounts(&spec)?;
    let pid = std::process::id();
    let mut file_names: Vec<std::ffi::CString> = Vec::with_capacity(spec.files.len());
    let mut machine_shm: Vec<std::ffi::CString> = Vec::new();
    for f in &spec.files {
        let name = match f.kind {
            FileSpecKind::Memfd => f.name.clone(),
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
        file_names.push(c);
    }
    // The buffer pwrite copies from: mapped and faulted now, filled with non-zero bytes.
    let (wbuf, wbuf_len) = match spec.write_buf {
        Some((a, l)) => (map_write_buffer(a, l)?, l),
        None => (std::ptr::null_mut(), 0),
    };
    let start_brk = crate::procfs::start_brk("self").map_err(|e| e.to_string())?;
    let brk0 = sys_brk(0);
    let heap = |p: &Piece| if p.heap { start_brk + p.addr } else { p.addr };

    let mut prepared = Vec::with_capacity(spec.ops.len());
    for op in &spec.ops {
        prepared.push(match &op.kind {
            ExecKind::Mmap { addr, len, prot, shared, file, pgoff } => Prepared::Mmap {
                addr: *addr,
                len: *len,
                prot: *prot,
                flags: match (*shared, file) {
                    (false, None) => libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    (false, Some(_)) => libc::MAP_PRIVATE,
                    (true, None) => libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                    (true, Some(_)) => libc::MAP_SHARED,
                } | libc::MAP_FIXED_NOREPLACE,
                file: *file,
                pgoff: *pgoff,
            },
            ExecKind::Mount { .. } => Prepared::Mount,
            ExecKind::Create { file } => Prepared::Create { file: *file },
            ExecKind::Ftruncate { file, size } => Prepared::Ftruncate { file: *file, size: *size },
            ExecKind::Fallocate { file, offset, len, mode } => Prepared::Fallocate { file: *file, offset: *offset, len: *len, mode: *mode },
            ExecKind::Write { file, offset, len, chunk } => {
                Prepared::Write { file: *file, offset: *offset, len: *len, chunk: *chunk }
            }
            ExecKind::Munmap { pieces } => {
                Prepared::Ranges { kind: K_MUNMAP, pieces: pieces.iter().map(|p| (heap(p), p.len)).collect(), arg: 0 }
            }
            ExecKind::Mprotect { pieces, prot } => Prepared::Ranges {
                kind: K_MPROTECT,
                pieces: pieces.iter().map(|p| (heap(p), p.len)).collect(),
                arg: *prot,
            },
            ExecKind::Madvise { pieces, advice } => Prepared::Ranges {
                kind: K_MADVISE,
                pieces: pieces.iter().map(|p| (heap(p), p.len)).collect(),
                arg: *advice,
            },
            ExecKind::Brk { delta } => Prepared::Brk { delta: *delta },
            ExecKind::Prctl { arg2, arg3 } => Prepared::Prctl { arg2: *arg2, arg3: *arg3 },
            ExecKind::Sleep { ns } => Prepared::Sleep { ns: *ns },
            ExecKind::Phase { .. } => Prepared::Phase,
            ExecKind::Touch { base, offset, len, write, order, seed, stride, count, rate, duration_ns } => {
                let t = Touch {
                    range: Range { region: RegionId(0), offset: *offset, len: *len, every: None },
                    write: *write,
                    order: match order {
                        1 => TouchOrder::Reverse,
                        2 => TouchOrder::Random { seed: *seed },
                        _ => TouchOrder::Sequential,
                    },
                    stride: (*stride).max(PAGE_SIZE),
                    count: *count,
                    pace: match (rate, duration_ns) {
                        (Some(r), _) => Some(workload::Pace::Rate { bytes_per_sec: *r }),
                        (None, Some(ns)) => Some(workload::Pace::Duration { ns: *ns }),
                        (None, None) => None,
                    },
                };
                let plan = TouchPlan::new(&t, heap(base));
                if !plan.is_empty() {
                    std::hint::black_box(plan.get(0));
                }
                let pacing = t.pace.map(|p| workload::Pacing::new(p, plan.len()));
                Prepared::Touch { plan, write: *write, pacing }
            }
            ExecKind::RepeatFor { ns, body } => Prepared::RepeatFor { ns: *ns, body: *body },
            ExecKind::Access { base, offset, len, pattern, p1, p2, count, writes_pct, seed, elem } => {
                let stream = workload::AccessStream {
                    range: Range { region: RegionId(0), offset: *offset, len: *len, every: None },
                    pattern: match pattern {
                        1 => workload::Pattern::Stride(*p1),
                        2 => workload::Pattern::Uniform,
                        3 => workload::Pattern::Gaussian { median: *p1, stddev: *p2 },
                        4 => workload::Pattern::Zipf { s_milli: *p1 as u32 },
                        5 => workload::Pattern::Chase,
                        _ => workload::Pattern::Seq,
                    },
                    count: *count,
                    writes_pct: *writes_pct,
                    seed: *seed,
                    elem: *elem,
                };
                // `len` is the range's length (region_base resolved it), as for touches.
                Prepared::Access { addr: heap(base) + offset, plan: workload::AccessPlan::new(&stream, *len) }
            }
            ExecKind::Fork { child } => Prepared::Fork { child: *child },
            ExecKind::Thread { child } => Prepared::Thread { child: *child },
            ExecKind::Vfork { child } => Prepared::Vfork { child: *child },
            ExecKind::Join { child } => Prepared::Join { child: *child },
            ExecKind::Exit => Prepared::Exit,
            ExecKind::Wait { child } => Prepared::Wait { child: *child },
        });
    }
    let n_ops = prepared.len();
    let multi = spec.procs > 1;
    // With processes, the executor's stack gets base pages only (MADV_NOHUGEPAGE before the
    // pre-touch): a large folio of its own that fork shares and copy-on-write frees would move
    // nr_anon and the split counters, which the comparison reads system-wide.
    if multi {
        if let Some((lo, hi)) = stack_range() {
            // SAFETY: advice on our own stack mapping.
            unsafe { libc::madvise(lo as *mut libc::c_void, (hi - lo) as usize, libc::MADV_NOHUGEPAGE) };
        }
    }
    // Warm up everything the loop calls so that its first use faults no text page.
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
    let vfork_stack = if spec.ops.iter().any(|o| matches!(o.kind, ExecKind::Vfork { .. })) { map_vfork_stack()? } else { (0, 0) };
    let exit_op: Vec<Option<usize>> = (0..spec.procs).map(|p| spec.ops.iter().position(|o| o.proc == p && o.kind == ExecKind::Exit)).collect();
    let procs = spec.procs;
    let vfork_children: Vec<usize> = spec.ops.iter().filter_map(|o| if let ExecKind::Vfork { child } = o.kind { Some(child) } else { None }).collect();
    let thread_children: Vec<usize> = spec.ops.iter().filter_map(|o| if let ExecKind::Thread { child } = o.kind { Some(child) } else { None }).collect();
    // Shared by every thread of this process (and by vfork children, which run in its mm);
    // leaked, as the process ends with _exit.
    let n_files = spec.files.len();
    let ex: &'static Exec = Box::leak(Box::new(Exec {
        spec,
        prepared,
        turns,
        fds: (0..n_files).map(|_| std::sync::atomic::AtomicI32::new(-1)).collect(),
        file_names,
        wbuf: wbuf as usize,
        wbuf_len,
        stack_top,
        file_maps,
        multi,
        exit_op,
        vfork_stack,
        forks: std::sync::atomic::AtomicU32::new(0),
    }));
    let spec = &ex.spec;
    let mut t = Task::new(0, Role::Main, n_ops, procs);
    for &c in &vfork_children {
        t.vforks[c] = Some(Task::new(c, Role::Vforked, n_ops, procs));
    }
    // Threads: real threads of this process (pthread_create: clone with CLONE_VM|CLONE_THREAD|…),
    // started now, before 'go', so that nothing is allocated during the run (their stacks are
    // MAP_STACK, hence VM_NOHUGEPAGE: include/linux/mman.h calc_vm_flag_bits). Each warms up its
    // stack and its malloc arena, says so on main's pipe, and waits for its first turn; its
    // `thread` statement only marks it started.
    for &c in &thread_children {
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

    if multi {
        // Started with PR_SET_THP_DISABLE (run_once) so that the executor's own memory is in
        // base pages: fork shares it, the copy-on-write of the executor's writes after fork
        // then frees no large folio when a child exits (nr_anon and the split counters are
        // read system-wide). The workload runs with the flag cleared, as it would.
        // SAFETY: prctl clearing the flag of this process.
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong) };
    }
    let ready = serde_json::to_string(&Ready { pid: std::process::id() as i32, start_brk, brk: brk0 })
        .map_err(|e| e.to_string())?;
    if !raw_write_all(STATUS_FD, format!("ready {ready}\n").as_bytes()) {
        return Err("cannot write to the status fd".into());
    }
    let mut line = [0u8; 64];
    match raw_read_line(CONTROL_FD, &mut line) {
        Some(n) if &line[..n] == b"go" => {}
        _ => return Err("the parent went away before 'go'".into()),
    }

    // ---- no allocation from here to 'done' ----
    let f0 = minflt_now();
    let t0 = mono_ns();
    if run_ops(ex, &mut t, 0) == Ended::Leave {
        // A forked child at the end of the run.
        // SAFETY: leave at once.
        unsafe { libc::_exit(0) }
    }
    let t1 = mono_ns();
    let f1 = minflt_now();
    // Children and threads still running report their counts (each acknowledges), before
    // main's 'done'.
    if multi {
        for p in 1..procs {
            if t.started[p] && ex.exit_op[p].is_none() {
                ex.turns.pass(p, TOKEN_END);
                ex.turns.main_wait(&mut t.watch, spec, &ex.exit_op);
            }
        }
    }
    // ---- allocation allowed again ----

    let minflt = if multi { t.my_minflt } else { f1 - f0 };
    let done = serde_json::to_string(&Done { minflt, wall_ns: t1 - t0, start_ns: t0, results: std::mem::take(&mut t.results), brk_end: sys_brk(0) })
        .map_err(|e| e.to_string())?;
    raw_write_all(STATUS_FD, format!("done {done}\n").as_bytes());
    loop {
        match raw_read_line(CONTROL_FD, &mut line) {
            Some(n) if &line[..n] == b"exit" => break,
            Some(_) => {}
            None => break,
        }
    }
    if multi {
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
    for name in &machine_shm {
        // SAFETY: unlinking our own objects; the parent removes them too if we die first.
        unsafe { libc::shm_unlink(name.as_ptr()) };
    }
    Ok(())
}

/// Stack of each thread of the workload (std's threads; the op loop needs far less).
const THREAD_STACK: usize = 1 << 20;
/// Stack of the vfork children (one at a time: main is suspended while one runs).
const VFORK_STACK: u64 = 1 << 20;

/// What every task of the executor shares: the prepared operations, the turn pipes, the files'
/// descriptors (threads share the fd table).
struct Exec {
    spec: ExecSpec,
    prepared: Vec<Prepared>,
    turns: Turns,
    fds: Vec<std::sync::atomic::AtomicI32>,
    file_names: Vec<std::ffi::CString>,
    /// The pwrite buffer (address) and its length.
    wbuf: usize,
    wbuf_len: u64,
    stack_top: u64,
    file_maps: Vec<(u64, u64)>,
    multi: bool,
    /// The index of each process's `exit`.
    exit_op: Vec<Option<usize>>,
    /// (address, length) of the vfork children's stack.
    vfork_stack: (u64, u64),
    /// Forks so far: a thread that sees a new one rewrites its stack before its next operation.
    forks: std::sync::atomic::AtomicU32,
}

/// Who runs an op loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
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
enum Ended {
    /// Main ran the last operation.
    Main,
    /// A child or thread is told to leave (or its thread exited).
    Leave,
}

/// The state of one task's op loop, allocated before 'go'.
struct Task {
    me: usize,
    role: Role,
    results: Vec<i64>,
    my_minflt: u64,
    /// Main only: each child's pid, whether each task was created, main's watch, the join
    /// handles of the threads, the vfork children's tasks.
    pids: Vec<i32>,
    started: Vec<bool>,
    watch: MainWatch,
    joins: Vec<Option<std::thread::JoinHandle<()>>>,
    vforks: Vec<Option<Task>>,
    /// A thread: its stack block, and the forks it has seen.
    stack: (u64, u64),
    seen_forks: u32,
    /// Main: the `repeat DURATION` block it is in.
    repeat: Option<RepeatState>,
}

/// A `repeat DURATION` block being run: its loop node, the operation after its body, when
/// it ends (CLOCK_MONOTONIC ns) and the iterations so far.
#[derive(Clone, Copy, Debug)]
struct RepeatState {
    node: usize,
    end: usize,
    deadline: u64,
    iterations: u64,
}

impl Task {
    fn new(me: usize, role: Role, n_ops: usize, procs: usize) -> Task {
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
fn thread_main(ex: &'static Exec, mut t: Task) {
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
fn rewrite_pages(lo: u64, hi: u64) {
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
fn map_vfork_stack() -> std::result::Result<(u64, u64), String> {
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
fn task_minflt() -> u64 {
    // SAFETY: getrusage fills a zeroed struct.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
        ru.ru_minflt as u64
    }
}

/// The op loop of one task from op `start`: runs its own operations, passes the turn for the
/// others'. No allocation.
fn run_ops(ex: &'static Exec, t: &mut Task, start: usize) -> Ended {
    let spec = &ex.spec;
    let turns = &ex.turns;
    let multi = ex.multi;
    let n_ops = ex.prepared.len();
    let mut i = start;
    loop {
        if let Some(r) = t.repeat.as_mut() {
            if i == r.end {
                // The end of an iteration: another one starts while the clock is before the
                // deadline.
                r.iterations += 1;
                if mono_ns() < r.deadline {
                    i = r.node + 1;
                    continue;
                }
                t.results[r.node] = r.iterations as i64;
                t.repeat = None;
            }
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
        let op = &ex.prepared[i];
        send_op_index(i);
        let fa = if multi { task_minflt() } else { 0 };
        let mut just_forked = false;
        let mut resume_at = None;
        let rc = match op {
            Prepared::Mmap { addr, len, prot, flags, file, pgoff } => {
                let fd = file.map_or(-1, |f| ex.fds[f].load(std::sync::atomic::Ordering::SeqCst));
                // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping.
                let p = unsafe { libc::mmap(*addr as *mut libc::c_void, *len as usize, *prot, *flags, fd, *pgoff as libc::off_t) };
                if p == libc::MAP_FAILED {
                    errno() as i64
                } else if p as u64 != *addr {
                    // A kernel that ignores MAP_FIXED_NOREPLACE placed it elsewhere.
                    // SAFETY: unmapping what we just mapped.
                    unsafe { libc::munmap(p, *len as usize) };
                    libc::EEXIST as i64
                } else {
                    0
                }
            }
            Prepared::Mount => 0,
            Prepared::Create { file } => {
                let name = ex.file_names[*file].as_ptr();
                // SAFETY: NUL-terminated names prepared before 'go'.
                let fd = unsafe {
                    match spec.files[*file].kind {
                        FileSpecKind::Memfd => libc::memfd_create(name, 0),
                        FileSpecKind::Shm => libc::shm_open(name, libc::O_CREAT | libc::O_RDWR, 0o600),
                        FileSpecKind::Open => libc::open(name, libc::O_CREAT | libc::O_RDWR, 0o600),
                    }
                };
                if fd < 0 {
                    errno() as i64
                } else {
                    ex.fds[*file].store(fd, std::sync::atomic::Ordering::SeqCst);
                    0
                }
            }
            // SAFETY: syscalls on the workload's own fd.
            Prepared::Ftruncate { file, size } => match unsafe { libc::ftruncate(ex.fd(*file), *size as libc::off_t) } {
                0 => 0,
                _ => errno() as i64,
            },
            Prepared::Fallocate { file, offset, len, mode } => {
                // SAFETY: as above.
                match unsafe { libc::fallocate(ex.fd(*file), *mode, *offset as libc::off_t, *len as libc::off_t) } {
                    0 => 0,
                    _ => errno() as i64,
                }
            }
            Prepared::Write { file, offset, len, chunk } => pwrite_range(ex.fd(*file), ex.wbuf as *const u8, ex.wbuf_len, *offset, *len, *chunk),
            Prepared::Ranges { kind, pieces, arg } => {
                let mut rc = 0;
                for &(a, l) in pieces {
                    let p = a as *mut libc::c_void;
                    // SAFETY: the workload asked for exactly these calls on its own ranges.
                    let r = unsafe {
                        match *kind {
                            K_MUNMAP => libc::munmap(p, l as usize),
                            K_MPROTECT => libc::mprotect(p, l as usize, *arg),
                            _ => libc::madvise(p, l as usize, *arg),
                        }
                    };
                    if r != 0 {
                        rc = errno() as i64;
                    }
                }
                rc
            }
            Prepared::Brk { delta } => {
                // The break is the mm's: read it, as a thread or a vfork child may have moved it.
                let want = (sys_brk(0) as i64 + delta) as u64;
                sys_brk(want) as i64
            }
            Prepared::Prctl { arg2, arg3 } => {
                // SAFETY: PR_SET_THP_DISABLE with the workload's arguments.
                let r = unsafe { libc::prctl(linux_abi::prctl::PR_SET_THP_DISABLE as libc::c_int, *arg2 as libc::c_ulong, *arg3 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong) };
                if r != 0 {
                    errno() as i64
                } else {
                    0
                }
            }
            Prepared::Phase => mono_ns() as i64,
            Prepared::Sleep { ns } => {
                let mut req = libc::timespec { tv_sec: (*ns / 1_000_000_000) as libc::time_t, tv_nsec: (*ns % 1_000_000_000) as libc::c_long };
                let mut rem = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                // SAFETY: nanosleep with valid timespecs, resumed with the remainder after a signal.
                while unsafe { libc::nanosleep(&req, &mut rem) } != 0 && errno() == libc::EINTR {
                    req = rem;
                }
                0
            }
            Prepared::Touch { plan, write, pacing: None } => {
                touch_pages(plan, 0, plan.len(), *write);
                0
            }
            Prepared::Touch { plan, write, pacing: Some(p) } => {
                // Chunk after chunk; the next may not start before its time (absolute, so that
                // no sleep's lateness adds up). Behind time, the next chunk starts at once.
                let t0 = mono_ns();
                let n = plan.len();
                let mut k = 0;
                while k < n {
                    let end = (k + p.chunk_pages()).min(n);
                    touch_pages(plan, k, end, *write);
                    sleep_until(t0.saturating_add(p.offset_ns(end)));
                    k = end;
                }
                0
            }
            Prepared::RepeatFor { ns, body } => {
                // The first iteration always runs; the loop's end is checked when `i` reaches
                // the operation after the body (top of this loop).
                t.repeat = Some(RepeatState { node: i, end: i + 1 + body, deadline: mono_ns().saturating_add(*ns), iterations: 0 });
                0
            }
            Prepared::Access { addr, plan } => {
                // The plan iterates without allocating (its generator state is inline).
                for (off, write) in plan.clone() {
                    let p = (*addr + off) as *mut u8;
                    // SAFETY: as for touches: the workload accesses its own mapping.
                    unsafe {
                        if write {
                            std::ptr::write_volatile(p, 1);
                        } else {
                            std::ptr::read_volatile(p);
                        }
                    }
                }
                0
            }
            Prepared::Fork { child } => {
                // SAFETY: fork of this process; the workload's threads, if any, are blocked on
                // their turn pipes, and the child runs none of their code.
                let pid = unsafe { libc::fork() };
                if pid < 0 {
                    errno() as i64
                } else {
                    let child_side = pid == 0;
                    if child_side {
                        t.me = *child;
                        t.role = Role::Forked;
                        just_forked = true;
                        // SAFETY: the child dies with main, whatever happens to main.
                        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) };
                        t.my_minflt = 0;
                    } else {
                        t.pids[*child] = pid;
                        t.started[*child] = true;
                        ex.forks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        // SAFETY: pidfd_open of our own child.
                        t.watch.pidfds[*child] = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
                    }
                    // Both sides copy the executor's pages they write now, not during an op.
                    after_fork_warm_up(&mut t.results, &mut t.pids, if child_side { ex.stack_top } else { 0 }, &ex.file_maps);
                    0
                }
            }
            Prepared::Thread { child } => {
                // The thread exists since before 'go' (see child_run); from here on it runs.
                t.started[*child] = true;
                0
            }
            Prepared::Vfork { child } => {
                // A real clone(CLONE_VM|CLONE_VFORK|SIGCHLD), as glibc's vfork() is: a process
                // in this mm (kernel/fork.c: copy_mm, CLONE_VM) while main sleeps until it
                // releases the mm (mm_release → complete_vfork_done, at its exit). libc::vfork
                // itself cannot be used from Rust (the child would return into main's frames
                // on main's stack); the child runs on a stack of its own, mapped and written
                // before 'go', and uses main's TLS, as a vfork child does. A fork since then
                // made that stack copy-on-write: main writes it first, so the child copies
                // nothing of the executor's inside its operations.
                rewrite_pages(ex.vfork_stack.0, ex.vfork_stack.0 + ex.vfork_stack.1);
                let task: *mut Task = t.vforks[*child].as_mut().expect("a task for each vfork child");
                let mut arg = VforkArg { ex, task, start: i + 1 };
                let top = (ex.vfork_stack.0 + ex.vfork_stack.1) as *mut libc::c_void;
                // SAFETY: the child runs vfork_entry on its own stack and ends with _exit.
                let pid = unsafe { libc::clone(vfork_entry, top, libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD, (&mut arg as *mut VforkArg).cast()) };
                if pid < 0 {
                    errno() as i64
                } else {
                    t.pids[*child] = pid;
                    t.started[*child] = true;
                    // The child released the mm: it is exiting. Wait until it is a zombie (it
                    // stays to be reaped by 'wait'); one that a signal killed kills main.
                    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
                    // SAFETY: waitid of our own child, WNOWAIT only looks.
                    let rc = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT) };
                    if rc == 0 && (info.si_code == libc::CLD_KILLED || info.si_code == libc::CLD_DUMPED) {
                        // SAFETY: si_status is valid for SIGCHLD information.
                        die_of(unsafe { info.si_status() });
                    }
                    resume_at = Some(ex.exit_op[*child].map_or(n_ops, |e| e + 1));
                    0
                }
            }
            Prepared::Exit => {
                turns.report(t.me, t.my_minflt, true, &t.results, spec);
                if t.role == Role::Thread {
                    // A thread's exit takes nothing of the mm (kernel/exit.c: exit_mm → mmput
                    // drops a reference), so the next operation need not wait for it: the
                    // thread hands the turn on itself and returns.
                    let next = i + 1;
                    let owner = if next < n_ops { spec.ops[next].proc } else { 0 };
                    turns.pass(owner, next as u32);
                    return Ended::Leave;
                }
                // A forked child: main hands the turn on once this process is a zombie
                // (MainWatch); a vfork child: main resumes when it has released the mm.
                // SAFETY: leave at once, as the workload's exit does.
                unsafe { libc::_exit(0) }
            }
            Prepared::Wait { child } => turns.wait_child(t.pids[*child]),
            Prepared::Join { child } => match t.joins[*child].take() {
                Some(h) => match h.join() {
                    Ok(()) => 0,
                    Err(_) => libc::EINVAL as i64,
                },
                None => libc::ESRCH as i64,
            },
        };
        if multi && !matches!(op, Prepared::Fork { .. } | Prepared::Wait { .. } | Prepared::Vfork { .. } | Prepared::Join { .. }) {
            t.my_minflt += task_minflt() - fa;
        }
        t.results[i] = rc;
        i += 1;
        if let Some(r) = resume_at {
            i = r;
        }
        if just_forked {
            // The new process runs when the turn comes to it, as every process does.
            match turns.child_wait(t.me, t.my_minflt, &t.results, spec) {
                Some(tok) => i = (tok as usize).min(n_ops),
                None => return Ended::Leave,
            }
        }
    }
}

impl Exec {
    fn fd(&self, file: usize) -> i32 {
        self.fds[file].load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// What main watches while it waits: a pidfd per forked child (-1 once it ended or before its
/// fork; threads and vfork children have none), and room for the poll set (allocated before
/// `go`).
struct MainWatch {
    pidfds: Vec<i32>,
    pfds: Vec<libc::pollfd>,
}

/// Turn tokens: an op index, or one of these.
const TOKEN_END: u32 = u32::MAX - 1;
const TOKEN_QUIT: u32 = u32::MAX;

/// The turn pipes of a workload with processes: each process blocks on its own pipe until an
/// operation of its own is next; the process that ran the previous operation writes that
/// operation's index (a u32) into it. Main polls, so that a child killed by a signal while it
/// holds the turn ends the run (main dies of the same signal) instead of hanging it.
#[derive(Default)]
struct Turns {
    /// (read end, write end) per process.
    pipes: Vec<(i32, i32)>,
}

impl Turns {
    fn new(n: usize) -> std::result::Result<Turns, String> {
        let mut pipes = Vec::with_capacity(n);
        for _ in 0..n {
            let mut fds = [0i32; 2];
            // SAFETY: pipe2 fills two fds.
            if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
                return Err(format!("pipe2: {}", std::io::Error::last_os_error()));
            }
            pipes.push((fds[0], fds[1]));
        }
        Ok(Turns { pipes })
    }

    fn pass(&self, to: usize, token: u32) {
        raw_write_all(self.pipes[to].1, &token.to_le_bytes());
    }

    fn read_token(&self, me: usize) -> Option<u32> {
        let mut b = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            // SAFETY: read into a valid buffer.
            let r = unsafe { libc::read(self.pipes[me].0, b[got..].as_mut_ptr().cast(), 4 - got) };
            if r <= 0 {
                if r < 0 && errno() == libc::EINTR {
                    continue;
                }
                return None;
            }
            got += r as usize;
        }
        Some(u32::from_le_bytes(b))
    }

    /// Main waits for its turn. It also watches every child through a pidfd: a child that ran
    /// `exit` hands the turn on only once it is a zombie (its mm torn down, as the model has it
    /// at that point), so main passes it on for it; a child that a signal killed kills main the
    /// same way.
    fn main_wait(&self, w: &mut MainWatch, spec: &ExecSpec, exit_op: &[Option<usize>]) -> u32 {
        loop {
            w.pfds.clear();
            w.pfds.push(libc::pollfd { fd: self.pipes[0].0, events: libc::POLLIN, revents: 0 });
            for &fd in w.pidfds.iter().filter(|fd| **fd >= 0) {
                w.pfds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
            }
            // SAFETY: poll of valid pollfds, without a timeout (a child's end wakes it).
            let r = unsafe { libc::poll(w.pfds.as_mut_ptr(), w.pfds.len() as libc::nfds_t, -1) };
            if r <= 0 {
                continue;
            }
            if w.pfds[0].revents & libc::POLLIN != 0 {
                return self.read_token(0).unwrap_or(TOKEN_QUIT);
            }
            for k in 1..w.pfds.len() {
                if w.pfds[k].revents == 0 {
                    continue;
                }
                let fd = w.pfds[k].fd;
                let p = w.pidfds.iter().position(|f| *f == fd).expect("a watched pidfd");
                // SAFETY: waitid with WNOWAIT only looks (P_PIDFD = 3).
                let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
                let rc = unsafe { libc::waitid(3 as libc::idtype_t, fd as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT) };
                // SAFETY: si_status is valid for SIGCHLD information.
                let status = unsafe { info.si_status() };
                if rc == 0 && (info.si_code == libc::CLD_KILLED || info.si_code == libc::CLD_DUMPED) {
                    die_of(status);
                }
                // SAFETY: our own pidfd.
                unsafe { libc::close(fd) };
                w.pidfds[p] = -1;
                if let Some(e) = exit_op[p] {
                    let next = e + 1;
                    let owner = if next < spec.ops.len() { spec.ops[next].proc } else { 0 };
                    if owner == 0 {
                        return next as u32;
                    }
                    self.pass(owner, next as u32);
                }
            }
        }
    }

    /// A child or thread waits for its turn: the op index, or None when it is to leave (a
    /// process then `_exit`s, a thread returns); at the end of the run it reports first and
    /// waits to be told to go.
    fn child_wait(&self, me: usize, minflt: u64, results: &[i64], spec: &ExecSpec) -> Option<u32> {
        match self.read_token(me) {
            Some(TOKEN_END) => {
                self.child_wait_end(me, minflt, results, spec);
                None
            }
            Some(TOKEN_QUIT) | None => None,
            Some(i) => Some(i),
        }
    }

    /// The run has ended with this child alive: report, acknowledge to main, wait for QUIT
    /// (the parent takes this process's census meanwhile).
    fn child_wait_end(&self, me: usize, minflt: u64, results: &[i64], spec: &ExecSpec) {
        self.report(me, minflt, false, results, spec);
        self.pass(0, TOKEN_END);
        while !matches!(self.read_token(me), Some(TOKEN_QUIT) | None) {}
    }

    /// `pdone {json}` on the status fd: this process's faults and the results of its ops.
    fn report(&self, me: usize, minflt: u64, exited: bool, results: &[i64], spec: &ExecSpec) {
        let mine: Vec<(usize, i64)> = spec.ops.iter().enumerate().filter(|(_, o)| o.proc == me).map(|(i, _)| (i, results[i])).collect();
        let d = ProcDone { proc: me, pid: std::process::id() as i32, minflt, exited, results: mine };
        if let Ok(j) = serde_json::to_string(&d) {
            raw_write_all(STATUS_FD, format!("pdone {j}\n").as_bytes());
        }
    }

    /// waitpid: 0 when the child exited with status 0, its status otherwise; a child killed by
    /// a signal kills main the same way.
    fn wait_child(&self, pid: i32) -> i64 {
        let mut st = 0;
        // SAFETY: waitpid of our own child.
        let r = unsafe { libc::waitpid(pid, &mut st, 0) };
        if r < 0 {
            return errno() as i64;
        }
        if libc::WIFSIGNALED(st) {
            die_of(libc::WTERMSIG(st));
        }
        libc::WEXITSTATUS(st) as i64
    }
}

/// The readable file mappings of this process (its code and libraries), from /proc/self/maps.
fn file_mappings() -> Vec<(u64, u64)> {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return Vec::new() };
    maps.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let range = f.next()?;
            let perms = f.next()?;
            let path = f.nth(3)?;
            if !perms.starts_with('r') || !path.starts_with('/') {
                return None;
            }
            let (a, b) = range.split_once('-')?;
            Some((u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?))
        })
        .collect()
}

/// The `[stack]` mapping in /proc/self/maps.
fn stack_range() -> Option<(u64, u64)> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with("[stack]"))?;
    let (a, b) = line.split_whitespace().next()?.split_once('-')?;
    Some((u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?))
}

/// End main with signal `sig` (what killed a child), so that the parent names it.
fn die_of(sig: i32) -> ! {
    // SAFETY: default disposition, then the signal to ourselves; _exit if it is ignored anyway.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
        libc::_exit(128 + sig)
    }
}

/// Right after fork, in both processes: write the executor's own pages that the loop writes
/// (stack, results, pids, errno) so that their copy-on-write faults happen here, not inside an
/// operation; the child also maps its code and rewrites the frames above (up to `stack_top`;
/// 0 in main, whose frames stay mapped, so that main copies no whole folio the child keeps).
#[inline(never)]
fn after_fork_warm_up(results: &mut [i64], pids: &mut [i32], stack_top: u64, file_maps: &[(u64, u64)]) {
    for &(a, b) in file_maps {
        // SAFETY: read-populating our own file mappings changes no content.
        unsafe { libc::madvise(a as *mut libc::c_void, (b - a) as usize, libc::MADV_POPULATE_READ) };
    }
    pretouch_stack();
    // The frames above this one (the op loop's locals): each page rewritten with its own bytes.
    let here = 0u8;
    let mut a = (&here as *const u8 as u64) & !(PAGE_SIZE - 1);
    while a < stack_top {
        // SAFETY: [a, stack_top) is this thread's mapped stack (from /proc/self/maps); the byte
        // is written back unchanged, and nothing else runs in this process meanwhile.
        unsafe {
            let p = a as *mut u8;
            std::ptr::write_volatile(p, std::ptr::read_volatile(p));
        }
        a += PAGE_SIZE;
    }
    for r in results.iter_mut() {
        // SAFETY: volatile read-modify-write of our own element.
        unsafe { std::ptr::write_volatile(r, std::ptr::read_volatile(r)) };
    }
    for p in pids.iter_mut() {
        // SAFETY: as above.
        unsafe { std::ptr::write_volatile(p, std::ptr::read_volatile(p)) };
    }
    // SAFETY: a call that fails at once, setting errno (TLS).
    unsafe { libc::close(-1) };
    minflt_now();
    mono_ns();
}

/// `unshare(CLONE_NEWNS)`, `/` recursively private, each tmpfs mounted on its directory, and
/// the one of `dev_shm` bound over /dev/shm. Nothing when the workload declares no mount.
fn setup_mounts(spec: &ExecSpec) -> std::result::Result<(), String> {
    if spec.mounts.is_empty() {
        return Ok(());
    }
    let os = |what: String| format!("{what}: {}", std::io::Error::last_os_error());
    // SAFETY: plain syscalls with NUL-terminated arguments.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(os("unshare(CLONE_NEWNS) for the workload's tmpfs mounts".into()));
        }
        if libc::mount(std::ptr::null(), c"/".as_ptr(), std::ptr::null(), libc::MS_REC | libc::MS_PRIVATE, std::ptr::null()) != 0 {
            return Err(os("mount --make-rprivate /".into()));
        }
    }
    for m in &spec.mounts {
        let dir = std::ffi::CString::new(m.dir.clone()).map_err(|_| "mount directory contains NUL".to_string())?;
        let data = std::ffi::CString::new(format!("huge={}", m.huge)).expect("no NUL");
        // SAFETY: as above.
        if unsafe { libc::mount(c"tmpfs".as_ptr(), dir.as_ptr(), c"tmpfs".as_ptr(), 0, data.as_ptr().cast()) } != 0 {
            return Err(os(format!("line {}: mount -t tmpfs -o huge={} tmpfs {}", m.line, m.huge, m.dir)));
        }
    }
    if let Some(i) = spec.dev_shm {
        let m = &spec.mounts[i];
        let dir = std::ffi::CString::new(m.dir.clone()).expect("checked above");
        // SAFETY: as above.
        if unsafe { libc::mount(dir.as_ptr(), c"/dev/shm".as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null()) } != 0 {
            return Err(os(format!("line {}: mount --bind {} /dev/shm (for shm_open on this tmpfs)", m.line, m.dir)));
        }
    }
    Ok(())
}

/// Map the pwrite buffer at `addr` (MAP_FIXED_NOREPLACE, anywhere if that is taken) and fill
/// it with non-zero bytes, so that pwrite copies from memory that is present.
fn map_write_buffer(addr: u64, len: u64) -> std::result::Result<*mut u8, String> {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    // SAFETY: a fresh private mapping of our own.
    unsafe {
        let mut p = libc::mmap(addr as *mut libc::c_void, len as usize, libc::PROT_READ | libc::PROT_WRITE, flags | libc::MAP_FIXED_NOREPLACE, -1, 0);
        if p == libc::MAP_FAILED {
            p = libc::mmap(std::ptr::null_mut(), len as usize, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0);
        }
        if p == libc::MAP_FAILED {
            return Err(format!("cannot map the {len}-byte write buffer: {}", std::io::Error::last_os_error()));
        }
        std::ptr::write_bytes(p.cast::<u8>(), 0xa5, len as usize);
        Ok(p.cast())
    }
}

/// `pwrite` calls of `chunk` bytes covering `[offset, offset + len)`, each made as pieces of at
/// most `buf_len` bytes (short writes are continued). 0 or the first errno.
fn pwrite_range(fd: i32, buf: *const u8, buf_len: u64, offset: u64, len: u64, chunk: u64) -> i64 {
    for (call, call_len) in workload::write_calls(offset, len, chunk) {
        let call_end = call + call_len;
        let mut pos = call;
        while pos < call_end {
            let n = (call_end - pos).min(buf_len);
            // SAFETY: `buf` holds `buf_len` readable bytes.
            let r = unsafe { libc::pwrite(fd, buf.cast(), n as usize, pos as libc::off_t) };
            if r < 0 {
                let e = errno();
                if e == libc::EINTR {
                    continue;
                }
                return e as i64;
            }
            if r == 0 {
                return libc::EIO as i64;
            }
            pos += r as u64;
        }
    }
    0
}

// ---------------------------------------------------------------------------------------------
// Parent: one run.

/// What one run measured.
/// One process of a run of a workload that forks.
#[derive(Clone, Debug, Default)]
pub struct ProcOnce {
    pub minflt: u64,
    pub exited: bool,
    pub rss_bytes: u64,
    pub anon_huge_bytes: u64,
    pub census: Census,
}

#[derive(Clone, Debug)]
pub struct RunOnce {
    /// Per process (main first) when the workload forks; empty otherwise.
    pub procs: Vec<ProcOnce>,
    pub minflt: u64,
    pub wall_ns: u64,
    /// Each `phase` reached, in the order of the operations: (name, ns from the start).
    pub phases: Vec<(String, u64)>,
    pub rss_bytes: u64,
    pub anon_huge_bytes: u64,
    pub counters: CounterSnapshot,
    pub census: Census,
    pub census_ms: f64,
    /// Of which: pagemap reads, kpageflags reads (ms), and the number of kpageflags reads.
    pub census_detail: (f64, f64, u64, u64),
    pub results: Vec<i64>,
    pub start_brk: u64,
    pub regions: Vec<RegionPlacement>,
    /// /proc/meminfo deltas (kB): Shmem, ShmemHugePages, ShmemPmdMapped.
    pub meminfo: BTreeMap<String, i64>,
    /// `--sample`: the samples taken during the run.
    pub timeline: Vec<uapi::TimelineSample>,
    /// With `ExecOptions::settle_host` on a VM that reports free pages: the frames mapped at
    /// the end that lay in reported blocks when the run started (`LiveWorkloadRun::host_faults`).
    pub host_faults: Option<u64>,
    /// With `ExecOptions::settle_host`: the free lists the run started from.
    pub free_lists: Option<uapi::profile::FreeLists>,
}

/// Each phase of the runs (the first run's, in order): the median over the runs of its start
/// and of its length (to the next phase or the end of the operations).
fn phase_times(runs: &[RunOnce]) -> Vec<uapi::result::PhaseTime> {
    let Some(first) = runs.first() else { return Vec::new() };
    (0..first.phases.len())
        .map(|j| {
            let of = |r: &RunOnce| -> (i64, i64) {
                let start = r.phases.get(j).map_or(0, |p| p.1);
                let end = r.phases.get(j + 1).map_or(r.wall_ns, |p| p.1);
                (start as i64, end.saturating_sub(start) as i64)
            };
            let mut starts: Vec<i64> = runs.iter().map(|r| of(r).0).collect();
            let mut lens: Vec<i64> = runs.iter().map(|r| of(r).1).collect();
            uapi::result::PhaseTime { name: first.phases[j].0.clone(), start_ns: median(&mut starts) as u64, ns: median(&mut lens) as u64 }
        })
        .collect()
}

/// The /proc/meminfo lines a run reports, in kB.
pub const MEMINFO_FIELDS: &[&str] = &["Shmem", "ShmemHugePages", "ShmemPmdMapped"];

/// [`MEMINFO_FIELDS`] from /proc/meminfo.
pub fn read_meminfo() -> Result<BTreeMap<String, i64>> {
    let text = std::fs::read_to_string("/proc/meminfo").map_err(|e| crate::io_err("cannot read", "/proc/meminfo", e))?;
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else { continue };
        if MEMINFO_FIELDS.contains(&k) {
            if let Some(n) = v.split_whitespace().next().and_then(|n| n.parse().ok()) {
                out.insert(k.to_string(), n);
            }
        }
    }
    Ok(out)
}

/// What a run leaves on the host, removed when dropped whatever happened: the mount
/// directories (the mounts themselves live only in the child's namespace and vanish with it)
/// and the child's POSIX shm objects on the machine's /dev/shm.
struct RunLeftovers {
    dirs: Vec<PathBuf>,
    child: Option<i32>,
}

impl Drop for RunLeftovers {
    fn drop(&mut self) {
        if let Some(pid) = self.child {
            remove_shm_objects(|p| p == pid);
        }
        for d in &self.dirs {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// The machine's /dev/shm.
pub const DEV_SHM_DIR: &str = "/dev/shm";

/// `thplab-<pid>-...` → pid.
fn leftover_pid(name: &str) -> Option<i32> {
    name.strip_prefix(SHM_PREFIX)?.split_once('-')?.0.parse().ok()
}

fn remove_shm_objects(which: impl Fn(i32) -> bool) {
    let Ok(rd) = std::fs::read_dir(DEV_SHM_DIR) else { return };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if leftover_pid(&name).is_some_and(&which) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

fn pid_alive(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Remove what runs of processes that no longer exist left behind: `/dev/shm/thplab-<pid>-*`
/// and `<state dir>/mnt/<pid>-*` (a SIGKILLed parent cannot clean up after itself).
pub fn remove_stale_leftovers(paths: &Paths) {
    remove_shm_objects(|pid| !pid_alive(pid));
    if let Ok(rd) = std::fs::read_dir(paths.state_dir.join("mnt")) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.split_once('-').and_then(|(p, _)| p.parse::<i32>().ok()) {
                if !pid_alive(pid) {
                    let _ = std::fs::remove_dir(e.path());
                }
            }
        }
    }
}

static MOUNT_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills two fds.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(LiveError::Child(format!("pipe2: {}", std::io::Error::last_os_error())));
    }
    // SAFETY: fresh fds we own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Signal name for messages.
pub fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGSEGV => "SIGSEGV".into(),
        libc::SIGBUS => "SIGBUS".into(),
        libc::SIGKILL => "SIGKILL".into(),
        libc::SIGABRT => "SIGABRT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGINT => "SIGINT".into(),
        _ => format!("signal {sig}"),
    }
}

/// errno name for the `calls` list.
pub fn errno_name(e: i32) -> String {
    let name = match e {
        0 => "0",
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ENOSYS => "ENOSYS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EHWPOISON => "EHWPOISON",
        _ => return format!("E{e}"),
    };
    name.to_string()
}

fn run_once(
    w: &Workload,
    spec: &ExecSpec,
    regions: &[RegionPlacement],
    opts: &ExecOptions,
    paths: &Paths,
    reported: Option<&crate::host::ReportedFrames>,
) -> Result<RunOnce> {
    // Mount points for the child's tmpfs mounts: empty directories on the host.
    let mut leftovers = RunLeftovers { dirs: Vec::new(), child: None };
    let mut spec = spec.clone();
    if !spec.mounts.is_empty() {
        let base = paths.state_dir.join("mnt");
        crate::sysfs::ensure_dir(&base)?;
        for m in spec.mounts.iter_mut() {
            let n = MOUNT_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let d = base.join(format!("{}-{n}", std::process::id()));
            std::fs::create_dir(&d).map_err(|e| crate::io_err("cannot create the mount point", &d, e))?;
            leftovers.dirs.push(d.clone());
            m.dir = d.to_str().ok_or_else(|| LiveError::Child(format!("mount point {} is not UTF-8", d.display())))?.to_string();
        }
    }
    let spec = &spec;
    let spec_json = serde_json::to_string(spec).map_err(|e| LiveError::Child(format!("spec: {e}")))?;
    let (status_r, status_w) = pipe()?;
    let (control_r, control_w) = pipe()?;
    let (sw, cr) = (status_w.as_raw_fd(), control_r.as_raw_fd());
    let mut cmd = Command::new(&opts.child_program);
    cmd.args(&opts.child_args)
        .env("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=0")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        let procs = spec.procs;
        let cpu = opts.cpu;
        cmd.pre_exec(move || {
            if let Some(c) = cpu {
                crate::host::pin_this_thread(c)?;
            }
            if procs > 1 {
                // The executor's own memory in base pages (cleared before `go`, see child_run).
                libc::prctl(libc::PR_SET_THP_DISABLE, 1 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong);
            }
            let cur = libc::personality(0xffff_ffff);
            if cur != -1 {
                libc::personality((cur as libc::c_ulong) | libc::ADDR_NO_RANDOMIZE as libc::c_ulong);
            }
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
            let no_core = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            // Move both ends out of the way first, so that dup2 onto 3/4 cannot clobber them.
            let a = libc::fcntl(sw, libc::F_DUPFD, 10);
            let b = libc::fcntl(cr, libc::F_DUPFD, 10);
            if a < 0 || b < 0 || libc::dup2(a, STATUS_FD) < 0 || libc::dup2(b, CONTROL_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::close(a);
            libc::close(b);
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| {
        LiveError::Child(format!("cannot start {} {}: {e}", opts.child_program.display(), opts.child_args.join(" ")))
    })?;
    leftovers.child = Some(child.id() as i32);
    drop(status_w);
    drop(control_r);
    let mut stderr_pipe = child.stderr.take();
    let stderr_thread = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(p) = stderr_pipe.as_mut() {
            let _ = p.read_to_string(&mut s);
        }
        s
    });
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(spec_json.as_bytes());
    }
    let mut status = BufReader::new(File::from(status_r));
    let mut control = File::from(control_w);
    let mut last_op: Option<usize> = None;

    let fail = |child: &mut std::process::Child, last_op: Option<usize>, stage: &str| -> LiveError {
        let _ = child.kill();
        let st = child.wait().ok();
        let sig = st.and_then(|s| s.signal());
        let code = st.and_then(|s| s.code());
        let how = match (sig, code) {
            (Some(s), _) => format!("was killed by {}", signal_name(s)),
            (None, Some(c)) => format!("exited with status {c}"),
            _ => "ended".into(),
        };
        match last_op {
            Some(i) if i < spec.ops.len() => {
                let hint = if sig == Some(libc::SIGSEGV) {
                    " (a touch of memory that is not mapped, or not accessible with its protection)"
                } else if sig == Some(libc::SIGBUS) {
                    " (a touch beyond the end of the mapped file: ftruncate it first)"
                } else {
                    ""
                };
                LiveError::Workload {
                    source_name: w.source.clone(),
                    line: spec.ops[i].line,
                    message: format!("the live run {how} while executing this operation{hint}"),
                }
            }
            _ => LiveError::Child(format!("the child {how} {stage}")),
        }
    };

    let mut line = String::new();
    let ready: Ready = match status.read_line(&mut line) {
        Ok(n) if n > 0 && line.starts_with("ready ") => serde_json::from_str(line[6..].trim())
            .map_err(|e| LiveError::Child(format!("bad ready message '{}': {e}", line.trim())))?,
        _ => {
            let e = fail(&mut child, None, "before it was ready");
            let err = stderr_thread.join().unwrap_or_default();
            return Err(match e {
                LiveError::Child(m) if !err.trim().is_empty() => LiveError::Child(format!("{m}: {}", err.trim())),
                e => e,
            });
        }
    };
    let before = CounterSnapshot::read(&paths.sysfs)?;
    let meminfo_before = read_meminfo()?;
    control.write_all(b"go\n").map_err(|e| LiveError::Child(format!("cannot send 'go': {e}")))?;
    let sampler = opts.sample.map(|every| {
        let ranges = regions.iter().filter(|r| r.name != HEAP).map(|r| (r.start, r.start + r.len)).collect();
        crate::timeline::Sampler::start(ready.pid, ranges, paths.sysfs.clone(), Instant::now(), every, opts.progress)
    });
    // Without samples, a long run still says where it is, once a second.
    let at_line = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let progress = (opts.progress && sampler.is_none()).then(|| crate::timeline::Progress::start(w.source.clone(), at_line.clone()));
    let mut procs_done: Vec<ProcDone> = Vec::new();
    let done: Done = loop {
        line.clear();
        match status.read_line(&mut line) {
            Ok(n) if n > 0 => {
                let l = line.trim_end();
                if let Some(i) = l.strip_prefix('o') {
                    last_op = i.parse().ok();
                    if let Some(op) = last_op.and_then(|i| spec.ops.get(i)) {
                        at_line.store(op.line, std::sync::atomic::Ordering::Relaxed);
                    }
                } else if let Some(j) = l.strip_prefix("pdone ") {
                    procs_done.push(serde_json::from_str(j).map_err(|e| LiveError::Child(format!("bad pdone message: {e}")))?);
                } else if let Some(j) = l.strip_prefix("done ") {
                    break serde_json::from_str(j).map_err(|e| LiveError::Child(format!("bad done message: {e}")))?;
                } else {
                    return Err(LiveError::Child(format!("unexpected message '{l}'")));
                }
            }
            _ => return Err(fail(&mut child, last_op, "during the run")),
        }
    };
    let timeline = sampler.map(|s| s.finish()).unwrap_or_default();
    drop(progress);
    let after = CounterSnapshot::read(&paths.sysfs)?;
    let meminfo_after = read_meminfo()?;
    let meminfo: BTreeMap<String, i64> =
        meminfo_after.iter().map(|(k, v)| (k.clone(), v - meminfo_before.get(k).copied().unwrap_or(*v))).collect();
    let pid = ready.pid;

    let mut regions: Vec<RegionPlacement> = regions.to_vec();
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for r in regions.iter_mut() {
        if r.name == HEAP {
            r.start = ready.start_brk;
            let mapped = r.len.max(done.brk_end.saturating_sub(ready.start_brk).div_ceil(PAGE_SIZE) * PAGE_SIZE);
            ranges.push((r.start, r.start + mapped));
            // Reported as the model reports it: break − start_brk at the end.
            r.len = done.brk_end.saturating_sub(ready.start_brk);
        } else {
            ranges.push((r.start, r.start + r.len));
        }
    }
    ranges.retain(|&(a, b)| b > a);
    // Regions of different processes may share addresses (each mapped its own at the same
    // place): the census walks each address once.
    ranges.sort_unstable();
    ranges.dedup_by(|next, prev| {
        if next.0 <= prev.1 {
            prev.1 = prev.1.max(next.1);
            true
        } else {
            false
        }
    });
    let vmas = read_smaps(pid)?;
    let mut rss_kb = 0;
    let mut ahp_kb = 0;
    for v in &vmas {
        if ranges.iter().any(|&(a, b)| v.start < b && a < v.end) {
            rss_kb += v.rss_kb;
            ahp_kb += v.anon_huge_kb;
        }
    }
    let census = census_of_ranges(pid, &ranges, &vmas)?;
    let mut host_faults = reported.map(|r| r.count_mapped(pid, &ranges)).transpose()?;
    // The other processes: Rss and census of those still alive (they wait for QUIT).
    let mut procs = Vec::new();
    let mut results = done.results;
    if spec.procs > 1 {
        procs.push(ProcOnce { minflt: done.minflt, exited: false, rss_bytes: rss_kb * 1024, anon_huge_bytes: ahp_kb * 1024, census: census.total.clone() });
        for p in 1..spec.procs {
            let Some(d) = procs_done.iter().find(|d| d.proc == p) else {
                procs.push(ProcOnce::default());
                continue;
            };
            for &(i, rc) in &d.results {
                if let Some(r) = results.get_mut(i) {
                    *r = rc;
                }
            }
            let mut one = ProcOnce { minflt: d.minflt, exited: d.exited, ..Default::default() };
            if !d.exited {
                let vmas = read_smaps(d.pid)?;
                for v in vmas.iter().filter(|v| ranges.iter().any(|&(a, b)| v.start < b && a < v.end)) {
                    one.rss_bytes += v.rss_kb * 1024;
                    one.anon_huge_bytes += v.anon_huge_kb * 1024;
                }
                one.census = census_of_ranges(d.pid, &ranges, &vmas)?.total;
                if let (Some(n), Some(r)) = (host_faults.as_mut(), reported) {
                    *n += r.count_mapped(d.pid, &ranges)?;
                }
            }
            procs.push(one);
        }
    }
    let _ = control.write_all(b"exit\n");
    drop(control);
    let st = child.wait().map_err(|e| LiveError::Child(format!("wait: {e}")))?;
    let err = stderr_thread.join().unwrap_or_default();
    if !st.success() {
        return Err(LiveError::Child(format!("the child ended with {st} after the run: {}", err.trim())));
    }
    for (op, &rc) in spec.ops.iter().zip(&results) {
        if let ExecKind::Mmap { addr, len, .. } = op.kind {
            if rc != 0 {
                return Err(LiveError::Workload {
                    source_name: w.source.clone(),
                    line: op.line,
                    message: format!(
                        "mmap of {len} bytes at {addr:#x} failed with {} in the live executor (the address is taken \
                         or out of range there); the counters of this run are not comparable",
                        errno_name(rc as i32)
                    ),
                });
            }
        }
    }
    // A phase inside a `repeat` block: the time of its last round.
    let phases = spec
        .ops
        .iter()
        .zip(&results)
        .filter_map(|(op, &t)| match &op.kind {
            ExecKind::Phase { name } if t > 0 => Some((name.clone(), (t as u64).saturating_sub(done.start_ns))),
            _ => None,
        })
        .collect();
    Ok(RunOnce {
        minflt: done.minflt,
        wall_ns: done.wall_ns,
        phases,
        rss_bytes: rss_kb * 1024,
        anon_huge_bytes: ahp_kb * 1024,
        counters: before.delta(&after),
        census: census.total,
        census_ms: census.elapsed.as_secs_f64() * 1e3,
        census_detail: (
            census.pagemap_time.as_secs_f64() * 1e3,
            census.kpageflags_time.as_secs_f64() * 1e3,
            census.kpageflags_reads,
            census.kpageflags_pfns,
        ),
        results,
        procs,
        meminfo,
        start_brk: ready.start_brk,
        regions,
        timeline,
        host_faults,
        free_lists: None,
    })
}

// ---------------------------------------------------------------------------------------------
// Parent: the whole live run.

/// Lower median of `v` (an observed value).
fn median(v: &mut [i64]) -> i64 {
    v.sort_unstable();
    if v.is_empty() {
        0
    } else {
        v[(v.len() - 1) / 2]
    }
}

fn spread_of(v: &[i64]) -> Spread {
    let mut s = v.to_vec();
    let median = median(&mut s);
    Spread { min: s.first().copied().unwrap_or(0), median, max: s.last().copied().unwrap_or(0) }
}

/// Run `w` under `settings` on the live kernel, `opts.repeat` times, holding the settings guard
/// for all runs. `model_regions` gives the addresses (from the model's `RunResult.regions`).
pub fn run_live(
    w: &Workload,
    settings: &ThpSettings,
    model_regions: &[RegionPlacement],
    opts: &ExecOptions,
) -> Result<RunResult> {
    let paths = Paths::from_env();
    paths.check_available()?;
    let (spec, regions, notes) = build_spec(w, model_regions)?;
    let repeat = opts.repeat.max(1);
    let guard = SettingsGuard::apply(settings)?;
    remove_stale_leftovers(&paths);
    if let Some(m) = guard.recovered() {
        eprintln!("{m}");
    }
    let mut runs = Vec::new();
    let mut run_opts = opts.clone();
    for i in 0..repeat {
        if i > 0 && opts.settle_host {
            crate::host::wait_until_settled(&mut |_| {});
        }
        if opts.settle_host {
            run_opts.cpu = crate::host::cpu_for_run().or(opts.cpu);
        }
        // The THP-sized pages on the CPU's per-CPU list, backed and invisible to the model,
        // are held while the run runs (crate::host::take_cpu_thps).
        let thps = if opts.settle_host { run_opts.cpu.and_then(crate::host::take_cpu_thps) } else { None };
        // The free lists the run starts from and the frames the host has dropped then: the
        // model can run again from them (`live.free_lists`), and the run's frames among them
        // are its host faults (`live.host_faults`, beside the model's `time.host_faults`).
        let start = if opts.settle_host { run_opts.cpu.and_then(crate::host::run_start) } else { None };
        let t = Instant::now();
        let mut r = run_once(w, &spec, &regions, &run_opts, &paths, start.as_ref().map(|s| &s.1))?;
        r.free_lists = start.map(|s| s.0);
        drop(thps);
        if opts.progress {
            eprintln!(
                "live run {}/{}: {} faults, {:.1} ms ops, {:.1} ms total",
                i + 1,
                repeat,
                r.minflt,
                r.wall_ns as f64 / 1e6,
                t.elapsed().as_secs_f64() * 1e3
            );
        }
        runs.push(r);
    }
    guard.restore()?;
    Ok(assemble(w, settings, &spec, runs, notes, opts.sample))
}

fn assemble(w: &Workload, settings: &ThpSettings, spec: &ExecSpec, runs: Vec<RunOnce>, notes: Vec<String>, sample: Option<Duration>) -> RunResult {
    let mut res = RunResult::new("live", &w.source);
    res.settings = settings.knob_map();
    let n = runs.len();
    // The representative run: the one with the median fault count.
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| runs[i].minflt);
    let rep = &runs[order[(n - 1) / 2]];

    let mut spread = BTreeMap::new();
    let mut col = |name: String, vals: Vec<i64>| -> i64 {
        let mut v = vals.clone();
        let m = median(&mut v);
        if n > 1 && vals.iter().any(|&x| x != 0) {
            spread.insert(name, spread_of(&vals));
        }
        m
    };
    let minflt = col("minflt".into(), runs.iter().map(|r| r.minflt as i64).collect());
    let rss = col("rss_bytes".into(), runs.iter().map(|r| r.rss_bytes as i64).collect());
    let ahp = col("anon_huge_bytes".into(), runs.iter().map(|r| r.anon_huge_bytes as i64).collect());
    let host_faults = runs.iter().map(|r| r.host_faults.map(|n| n as i64)).collect::<Option<Vec<i64>>>().map(|v| col("host_faults".into(), v) as u64);
    for name in rep.counters.vmstat.keys() {
        let v = col(format!("vmstat.{name}"), runs.iter().map(|r| r.counters.vmstat.get(name).copied().unwrap_or(0)).collect());
        res.vmstat.insert(name.into(), v);
    }
    for (dir, m) in &rep.counters.mthp {
        let mut out = BTreeMap::new();
        for stat in m.keys() {
            let v = col(
                format!("{dir}.{stat}"),
                runs.iter().map(|r| r.counters.mthp.get(dir).and_then(|m| m.get(stat)).copied().unwrap_or(0)).collect(),
            );
            out.insert(stat.into(), v);
        }
        res.mthp.insert(dir.into(), out);
    }
    for name in MEMINFO_FIELDS {
        let v = col(format!("meminfo.{name}"), runs.iter().map(|r| r.meminfo.get(*name).copied().unwrap_or(0)).collect());
        res.meminfo.insert(name.to_string(), v);
    }
    let mut walls: Vec<i64> = runs.iter().map(|r| (r.wall_ns / 1000) as i64).collect();
    let wall_us = median(&mut walls);
    // The free lists of the run whose wall time is the median: the one the time row compares.
    let free_lists = runs.iter().find(|r| (r.wall_ns / 1000) as i64 == wall_us).and_then(|r| r.free_lists.clone());
    res.process = ProcessStats { minflt: minflt as u64, rss_bytes: rss as u64, anon_huge_bytes: ahp as u64, bloat_bytes: None };
    res.census = rep.census.clone();
    res.folios = rep.census.folio_counts();
    for (p, decl) in w.procs.iter().enumerate().filter(|_| w.forks()) {
        let get = |r: &RunOnce| r.procs.get(p).cloned().unwrap_or_default();
        let minflt = col(format!("processes.{}.minflt", decl.name), runs.iter().map(|r| get(r).minflt as i64).collect());
        let one = get(rep);
        res.processes.push(uapi::result::ProcResult {
            name: decl.name.clone(),
            exited: one.exited,
            process: ProcessStats { minflt: minflt as u64, rss_bytes: one.rss_bytes, anon_huge_bytes: one.anon_huge_bytes, bloat_bytes: None },
            census: one.census,
            cow_copied: None,
            cow_reused: None,
            shares_mm_with: decl.shares_mm().then(|| w.proc(decl.parent.expect("a thread or vfork child has a parent")).name.clone()),
        });
    }
    res.regions = rep.regions.clone();
    // Each `repeat DURATION` block: its iterations (the loop node's result), the median over
    // the runs.
    for (i, op) in spec.ops.iter().enumerate() {
        if let ExecKind::RepeatFor { ns, .. } = op.kind {
            let v = col(format!("repeats.{}.iterations", op.line), runs.iter().map(|r| r.results.get(i).copied().unwrap_or(0)).collect());
            res.repeats.push(uapi::result::RepeatRun { line: op.line, duration_ns: ns, iterations: v.max(0) as u64 });
        }
    }

    res.calls = spec
        .ops
        .iter()
        .zip(&rep.results)
        // Statements that make no call (touches, accesses, sleep, exit, phase) have no row, as in
        // the model's `calls`.
        .filter(|(op, _)| !op.call.is_empty() && !matches!(op.kind, ExecKind::Touch { .. } | ExecKind::Access { .. }))
        .map(|(op, &rc)| CallResult {
            line: op.line,
            call: op.call.clone(),
            ret: match op.kind {
                ExecKind::Brk { .. } => format!("{rc:#x}"),
                _ => errno_name(rc as i32),
            },
        })
        .collect();
    let census_varied = runs.iter().any(|r| r.census != rep.census);
    res.timeline = sample.map(|every| uapi::Timeline { interval_ms: every.as_millis() as u64, samples: rep.timeline.clone() });
    res.live = Some(LiveSection {
        kernel_release: crate::kernel_release(),
        wall_ms: wall_us as f64 / 1000.0,
        untraced_ms: None,
        time_range_ms: uapi::result::MsRange::of(&runs.iter().map(|r| r.wall_ns as f64 / 1e6).collect::<Vec<_>>()),
        khugepaged: khugepaged_sum(runs.iter().map(|r| &r.counters)),
        workload: Some(LiveWorkloadRun {
            runs: n as u64,
            start_brk: format!("{:#x}", rep.start_brk),
            census_ms: rep.census_ms,
            census_pagemap_ms: rep.census_detail.0,
            census_kpageflags_ms: rep.census_detail.1,
            census_kpageflags_reads: rep.census_detail.2,
            census_kpageflags_pfns: rep.census_detail.3,
            spread,
            census_varied_between_runs: census_varied,
            placement: notes,
            noise: noise(rep),
            phases: phase_times(&runs),
            host_faults,
            free_lists,
        }),
        program: None,
    });
    res
}

/// The khugepaged counters' deltas, summed over runs.
pub(crate) fn khugepaged_sum<'a>(runs: impl Iterator<Item = &'a CounterSnapshot>) -> LiveKhugepaged {
    let mut sum = LiveKhugepaged { runqueue_wait_ms: Some(0), ..Default::default() };
    for c in runs {
        let get = |name: &str| c.khugepaged.get(name).copied().unwrap_or(0);
        sum.pages_collapsed += get("pages_collapsed");
        sum.full_scans += get("full_scans");
        sum.runqueue_wait_ms = sum.runqueue_wait_ms.zip(c.khugepaged_wait).map(|(ms, (_, ns))| ms + ns / 1_000_000);
    }
    sum
}

/// How much of the system-wide counters is not this process: per size, the `anon_fault_alloc`
/// delta against the folios of that size the census found.
fn noise(r: &RunOnce) -> Noise {
    let mut per_size = BTreeMap::new();
    let mut total_excess = 0i64;
    for (dir, m) in &r.counters.mthp {
        let Some(&alloc) = m.get(MthpStat::AnonFaultAlloc.name()) else { continue };
        let label = label_of_dir(dir).unwrap_or_default();
        let census = r.census.sizes.get(&label).map(|e| e.folios).unwrap_or(0) as i64;
        if alloc == 0 && census == 0 {
            continue;
        }
        let excess = alloc - census;
        total_excess += excess.max(0);
        per_size.insert(label, NoiseEntry { anon_fault_alloc: alloc, census_folios: census, excess });
    }
    let note = if total_excess == 0 {
        "system-wide counters match this process's census (no other activity seen)".to_string()
    } else {
        format!(
            "system-wide anon_fault_alloc exceeds this process's census by {total_excess} folio(s): other processes \
             faulted large folios during the run, or the workload freed or split some (munmap, dontneed)"
        )
    };
    Noise { note, anon_fault_alloc_vs_census: per_size, excess_total: total_excess }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_resolves_fixed_heap_and_every() {
        let w = workload::parse(
            "t",
            "mmap a 1M at=0x7e0000000000\nmunmap a[0+4K] every=64K\nbrk +10K\ntouch heap write\nmadvise heap[0+4K] dontneed\ntouch a[4K..8K] read\nmmap b 4M\n",
        )
        .unwrap();
        let (spec, regions, notes) = build_spec(&w, &[]).unwrap();
        assert_eq!(spec.ops[0].kind, ExecKind::Mmap { addr: 0x7e00_0000_0000, len: 1 << 20, prot: 3, shared: false, file: None, pgoff: 0 });
        match &spec.ops[1].kind {
            ExecKind::Munmap { pieces } => {
                assert_eq!(pieces.len(), 16);
                assert_eq!(pieces[1], Piece { addr: 0x7e00_0001_0000, len: 4096, heap: false });
            }
            k => panic!("{k:?}"),
        }
        match &spec.ops[3].kind {
            ExecKind::Touch { base, len, .. } => {
                assert!(base.heap);
                assert_eq!(*len, 10 * 1024, "bare heap runs to the current break, as the model reads it");
            }
            k => panic!("{k:?}"),
        }
        // b had no model address: 2 MiB-aligned below the harness mmap base.
        let b = regions.iter().find(|r| r.name == "b").unwrap();
        assert_eq!(b.start % PMD_SIZE, 0);
        assert!(b.start + b.len <= HARNESS_MMAP_BASE);
        assert_eq!(notes.len(), 1);
        let h = regions.iter().find(|r| r.name == "heap").unwrap();
        assert_eq!(h.len, 12 * 1024);
        // Model addresses win for non-fixed regions.
        let (spec, _, notes) =
            build_spec(&w, &[RegionPlacement { name: "b".into(), start: 0x7d00_0000_0000, len: 4 << 20 }]).unwrap();
        assert!(notes.is_empty());
        assert_eq!(spec.ops.last().unwrap().kind, ExecKind::Mmap { addr: 0x7d00_0000_0000, len: 4 << 20, prot: 3, shared: false, file: None, pgoff: 0 });
    }

    #[test]
    fn spec_of_shared_memory() {
        let w = workload::parse(
            "t",
            "tmpfs t huge=within_size\nshm_open s on=t\nfile f on=t\nmemfd m\nftruncate m 4M\nwrite f[0+256M] chunk=128M\n\
             fallocate s[0+2M]\nmmap a 4M file=m pgoff=2M at=0x7e0000000000\nmmap b 1M shared\n",
        )
        .unwrap();
        let (spec, regions, notes) = build_spec(&w, &[]).unwrap();
        let calls: Vec<&str> = spec.ops.iter().map(|o| o.call.as_str()).collect();
        assert_eq!(calls, ["mount(tmpfs)", "shm_open", "open", "memfd_create", "ftruncate", "pwrite", "fallocate", "mmap", "mmap"]);
        assert_eq!(spec.mounts, [MountSpec { huge: "within_size".into(), dir: String::new(), line: 1 }]);
        assert_eq!(spec.dev_shm, Some(0));
        assert_eq!(spec.files[1], FileSpec { name: "f".into(), kind: FileSpecKind::Open, mount: Some(0) });
        assert_eq!(
            spec.ops[7].kind,
            ExecKind::Mmap { addr: 0x7e00_0000_0000, len: 4 << 20, prot: 3, shared: true, file: Some(2), pgoff: 2 << 20 }
        );
        assert!(matches!(spec.ops[8].kind, ExecKind::Mmap { shared: true, file: None, .. }));
        // The write buffer: capped, outside every region, and the cap is noted.
        let (a, l) = spec.write_buf.unwrap();
        assert_eq!(l, WRITE_BUF_MAX);
        assert!(regions.iter().all(|r| a + l <= r.start || r.start + r.len <= a));
        assert!(notes.iter().any(|n| n.contains("line 6") && n.contains("64 MiB")), "{notes:?}");
        // shm_open on two mounts: refused, naming the second line.
        let w = workload::parse("t", "tmpfs t huge=always\nshm_open a on=t\nshm_open b\n").unwrap();
        let e = build_spec(&w, &[]).unwrap_err().to_string();
        assert!(e.starts_with("t:3: ") && e.contains("line 2"), "{e}");
        assert_eq!(leftover_pid("thplab-123-obj-x"), Some(123));
        assert_eq!(leftover_pid("other-123-x"), None);
    }

    #[test]
    fn harness_placement_honours_align_offset() {
        let mut c = HARNESS_MMAP_BASE;
        let a = harness_place(&mut c, 1 << 20, Placement::Aligned { align: 64 << 10, offset: 4096 });
        assert_eq!(a % (64 << 10), 4096);
        assert!(a + (1 << 20) <= HARNESS_MMAP_BASE);
        let b = harness_place(&mut c, 8192, Placement::Kernel);
        assert!(b + 8192 <= a);
    }

    #[test]
    fn median_and_errno_names() {
        assert_eq!(median(&mut [5, 1, 3]), 3);
        assert_eq!(median(&mut [4, 1, 3, 2]), 2);
        assert_eq!(errno_name(libc::EINVAL), "EINVAL");
        assert_eq!(errno_name(0), "0");
    }
}
