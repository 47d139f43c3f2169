//! The parent's first job: from a workload to the spec the child runs. Every address is resolved
//! here, before the child starts: a region where the model placed it (or the harness's own
//! placement when the model gave none), the heap relative to the child's `start_brk`. The
//! operations themselves are the workload's own ([`workload::OpKind`]); the spec adds to each
//! the base of the region it acts on ([`ExecOp::at`]).

use mm_types::{PAGE_SIZE, PMD_SIZE};
use serde::{Deserialize, Serialize};
use uapi::result::RegionPlacement;
use workload::{FileKind, OpKind, Placement, Range, RegionId, Workload, HEAP};

use crate::{LiveError, Result};

/// Highest address the harness uses when the model gave no address for a region; the same
/// top-of-mmap-area as the model's default machine.
pub(crate) const HARNESS_MMAP_BASE: u64 = 0x7dff_fffc_5000;

/// Largest pwrite buffer; longer chunks are written in pieces of this size.
pub const WRITE_BUF_MAX: u64 = 64 << 20;

/// Prefix of the POSIX shm objects a run creates on the machine's /dev/shm:
/// `thplab-<child pid>-<NAME>`.
pub const SHM_PREFIX: &str = "thplab-";

/// One range, absolute or relative to the child's `start_brk`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Piece {
    pub addr: u64,
    pub len: u64,
    /// `addr` is an offset from `start_brk`.
    #[serde(default)]
    pub heap: bool,
}

/// One statement of the workload as the child runs it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExecOp {
    pub line: usize,
    /// The process that runs it (0 = main).
    #[serde(default)]
    pub proc: usize,
    /// How the result names the call ([`Workload::call_name`]); empty for statements that make
    /// none.
    #[serde(default)]
    pub call: String,
    /// The statement, as the workload crate parsed it.
    pub op: OpKind,
    /// Where it acts, resolved by the parent: an `mmap`'s address and length, or the region of
    /// its range (the heap's at its length at this point of the workload, from `start_brk`).
    #[serde(default)]
    pub at: Option<Piece>,
}

/// What the parent sends the child on stdin (crate::executor::wire).
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
    /// `--latency`: time each page of every `touch` and keep the faults' times
    /// (crate::executor::sys::TouchLatency).
    #[serde(default)]
    pub latency: bool,
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
    /// memfd_create with MFD_HUGETLB and the page size's log2 (21: 2 MiB, 30: 1 GiB).
    HugetlbMemfd(u32),
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

/// The addresses known while the statements are walked in program order.
struct Layout {
    addr: Vec<Option<u64>>,
    cursor: u64,
    heap_id: Option<RegionId>,
    /// The break's distance from `start_brk` as the brk deltas so far put it, its length, and
    /// the most the heap ever maps (page-rounded).
    heap_off: i64,
    heap_len: u64,
    heap_max: u64,
}

/// Resolve every address of `w`: regions at the model's placement (or the harness's own, when
/// the model gave none), heap pieces relative to `start_brk`. Returns the spec, the regions
/// (heap length as of the end) and notes on placement.
pub fn build_spec(w: &Workload, model_regions: &[RegionPlacement]) -> Result<(ExecSpec, Vec<RegionPlacement>, Vec<String>)> {
    let mut notes = Vec::new();
    let mut lay = Layout {
        addr: vec![None; w.regions.len()],
        cursor: HARNESS_MMAP_BASE,
        heap_id: w.region_by_name(HEAP),
        heap_off: 0,
        heap_len: 0,
        heap_max: 0,
    };
    let err = |line: usize, message: String| LiveError::Workload { source_name: w.source.clone(), line, message };
    let mounts: Vec<MountSpec> =
        w.mounts.iter().map(|m| MountSpec { huge: m.huge.word().to_string(), dir: String::new(), line: m.line }).collect();
    let (files, dev_shm) = file_specs(w)?;
    let mut write_buf_len = 0u64;
    let mut ops = Vec::new();
    for op in &w.ops {
        let at = match &op.kind {
            OpKind::Mmap { region, len, placement, .. } => {
                let a = mmap_address(w, &mut lay, *region, *len, *placement, model_regions, &mut notes);
                Some(Piece { addr: a, len: *len, heap: false })
            }
            k => k.range().map(|r| region_base(w, r, &lay)).transpose().map_err(|m| err(op.line, m))?,
        };
        match op.kind {
            OpKind::Fragment { .. } => {
                return Err(err(
                    op.line,
                    "fragment is model-only: the live executor cannot make this machine's free memory look like a \
                     long-running machine's (it would have to hold every other free page, movable or not, in other \
                     processes and kernel caches); run the workload with `thplab sim`, or fragment the live machine \
                     beforehand and drop the statement"
                        .into(),
                ))
            }
            OpKind::Write { len, chunk, .. } => write_buf_len = write_buf_len.max(write_buffer_need(op.line, len, chunk, &mut notes)),
            OpKind::Brk { delta } => lay.brk(delta),
            _ => {}
        }
        ops.push(ExecOp { line: op.line, proc: op.proc.0 as usize, call: w.call_name(&op.kind), op: op.kind.clone(), at });
    }
    let regions = placements(w, &lay);
    let write_buf = (write_buf_len > 0).then(|| {
        let len = write_buf_len.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        (scratch_address(&regions, len), len)
    });
    Ok((ExecSpec { source: w.source.clone(), ops, mounts, dev_shm, files, write_buf, procs: w.procs.len(), latency: false }, regions, notes))
}

impl Layout {
    /// `brk DELTA` as the model reads it statically: a move below `start_brk` fails.
    fn brk(&mut self, delta: i64) {
        let new = self.heap_off + delta;
        if new >= 0 {
            self.heap_off = new;
            self.heap_len = self.heap_off as u64;
            self.heap_max = self.heap_max.max(self.heap_len.div_ceil(PAGE_SIZE) * PAGE_SIZE);
        }
    }
}

/// The files of the workload, and the mount bound over /dev/shm (all `shm_open` objects must be
/// on one mount: the executor binds one).
fn file_specs(w: &Workload) -> Result<(Vec<FileSpec>, Option<usize>)> {
    let mut files = Vec::new();
    let mut shm_mount: Option<(Option<workload::MountId>, usize)> = None;
    for f in &w.files {
        let (kind, mount) = match f.kind {
            FileKind::Memfd => (FileSpecKind::Memfd, None),
            FileKind::HugetlbMemfd { page } => (FileSpecKind::HugetlbMemfd(page.shift()), None),
            FileKind::PosixShm { mount } => {
                match shm_mount {
                    None => shm_mount = Some((mount, f.line)),
                    Some((m, first)) if m != mount => {
                        let on = |m: Option<workload::MountId>| match m {
                            Some(m) => format!("tmpfs '{}'", w.mount(m).name),
                            None => "the machine's /dev/shm".to_string(),
                        };
                        return Err(LiveError::Workload {
                            source_name: w.source.clone(),
                            line: f.line,
                            message: format!(
                                "shm_open on {} after shm_open on {} (line {first}): the live executor binds one \
                                 mount over /dev/shm, so all shm_open objects of a workload must be on the same mount",
                                on(mount),
                                on(m)
                            ),
                        });
                    }
                    _ => {}
                }
                (FileSpecKind::Shm, mount.map(|m| m.0 as usize))
            }
            FileKind::Tmpfs { mount } => (FileSpecKind::Open, Some(mount.0 as usize)),
        };
        files.push(FileSpec { name: f.name.clone(), kind, mount });
    }
    Ok((files, shm_mount.and_then(|(m, _)| m).map(|m| m.0 as usize)))
}

/// Where `mmap` of `region` goes: MAP_FIXED's address, else the model's, else the harness's own
/// (noted).
fn mmap_address(
    w: &Workload,
    lay: &mut Layout,
    region: RegionId,
    len: u64,
    placement: Placement,
    model_regions: &[RegionPlacement],
    notes: &mut Vec<String>,
) -> u64 {
    let name = &w.region(region).name;
    let a = match (placement, model_regions.iter().find(|r| &r.name == name)) {
        (Placement::Fixed(a), _) => a,
        (_, Some(r)) => r.start,
        (p, None) => {
            let a = harness_place(&mut lay.cursor, len, p);
            notes.push(format!("region {name}: no model address given; the harness placed it at {a:#x}"));
            a
        }
    };
    lay.addr[region.0 as usize] = Some(a);
    a
}

/// The part of the pwrite buffer a `write ... chunk=` needs, noting a chunk above the cap.
fn write_buffer_need(line: usize, len: u64, chunk: u64, notes: &mut Vec<String>) -> u64 {
    let piece = chunk.min(len);
    if piece > WRITE_BUF_MAX {
        notes.push(format!(
            "line {line}: chunk={chunk} is larger than the executor's {} MiB write buffer: each call of the \
             workload is made as several pwrite calls of at most {} MiB (the kernel's write path \
             works per folio anyway)",
            WRITE_BUF_MAX >> 20,
            WRITE_BUF_MAX >> 20
        ));
    }
    piece.min(WRITE_BUF_MAX)
}

/// The regions of the run (heap length: the most it ever maps, for the census).
fn placements(w: &Workload, lay: &Layout) -> Vec<RegionPlacement> {
    let mut regions = Vec::new();
    for (i, r) in w.regions.iter().enumerate() {
        if Some(RegionId(i as u32)) == lay.heap_id {
            // Filled in by the run (start_brk is the child's); `len` here is the most the heap
            // ever maps, page-rounded, for the census.
            regions.push(RegionPlacement { name: r.name.clone(), start: 0, len: lay.heap_max });
        } else if let Some(a) = lay.addr[i] {
            regions.push(RegionPlacement { name: r.name.clone(), start: a, len: r.len });
        }
    }
    regions
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

pub(crate) fn harness_place(cursor: &mut u64, len: u64, p: Placement) -> u64 {
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

/// The base of the range's region: its address and length (the heap: offset 0 from
/// `start_brk`, its current length).
fn region_base(w: &Workload, r: &Range, lay: &Layout) -> std::result::Result<Piece, String> {
    if Some(r.region) == lay.heap_id {
        // As the model does: a range to the end (bare `heap`, `heap[8K..]`) resolves against
        // the heap's current length, break − start_brk, known statically from the brk deltas.
        return Ok(Piece { addr: 0, len: lay.heap_len, heap: true });
    }
    let a = lay.addr[r.region.0 as usize].ok_or_else(|| format!("region '{}' is used before its mmap", w.region(r.region).name))?;
    Ok(Piece { addr: a, len: w.region(r.region).len, heap: false })
}

/// The (address, length) calls a range makes in its region `base` (`every=` expanded; heap
/// addresses from `start_brk`).
pub(crate) fn range_calls(r: &Range, base: &Piece, start_brk: u64) -> Vec<(u64, u64)> {
    let addr = if base.heap { start_brk + base.addr } else { base.addr };
    let rr = Range { len: r.len_in(base.len), ..*r };
    rr.pieces(base.len).into_iter().map(|(o, l)| (addr + o, l)).collect()
}
