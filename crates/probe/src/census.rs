//! The folio census: which folio sizes back a set of virtual ranges of a process, and how they
//! are mapped.
//!
//! Sources: `/proc/PID/pagemap` (`fs/proc/task_mmu.c: pagemap_read`; one u64 per page, bit 63
//! present, bit 62 swapped, bits 0–54 the PFN, shown to CAP_SYS_ADMIN only) and
//! `/proc/kpageflags` (`fs/proc/page.c: kpageflags_read, stable_page_flags`; one u64 per PFN).
//! A present page's folio is found from the compound flags: a large folio is naturally aligned
//! in PFN space, so its head is the first `pfn & !(2^k - 1)` with KPF_COMPOUND_HEAD, and its
//! size is the first `2^k` for which `head + 2^k` is not a tail page. Pagemap cannot tell a
//! PMD mapping from 512 PTEs; as `tools/mm/thpmaps` does, the number of PMD-mapped folios of a
//! VMA is taken from smaps (`AnonHugePages + ShmemPmdMapped + FilePmdMapped`) / 2 MiB and
//! assigned to the 2 MiB folios that are fully mapped at a 2 MiB-aligned address of that VMA.
//!
//! Reads are batched: pagemap in preads of up to 64 Ki pages (ending on 2 MiB boundaries);
//! the present pages of a batch form runs contiguous in address and PFN. For runs shorter than
//! 64 pages, kpageflags is read once per batch for exactly their PFNs (plus the one after each
//! run, where its last folio ends), with runs closer than 16 PFNs merged into one pread. Longer
//! runs are read on demand as they are walked: of a large folio, only its head, its middle and
//! the PFN after it (`whole_order`: natural alignment makes these three enough), so a 64 KiB
//! folio costs two one-PFN reads instead of sixteen PFNs and a PMD THP two instead of 512
//! (kpageflags costs about 140 ns a PFN, `fs/proc/page.c: kpage_read` snapshots each page, a
//! pread about 600 ns). A folio whose head and end are in one run is sized from its flags with
//! no further read; in private anonymous VMAs (where a folio is mapped once) it is counted on
//! the spot, without a hash table. Only folios cut by a run (partially mapped, moved by
//! mremap, crossing a batch) are probed for their head and size and accumulated by head PFN.
//! [`Reads::Every`] reads every PFN's flags instead (the census before the sparse reads, which
//! they are tested against). Measured with `cargo bench -p live --bench census`.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use mm_types::{PAGE_SIZE, PMD_SIZE};
use thp_abi::{Census, CensusEntry};

use crate::procfs::Vma;
use crate::{io_err, LiveError, Result};

pub const KPF_ANON: u64 = 1 << 12;
pub const KPF_COMPOUND_HEAD: u64 = 1 << 15;
pub const KPF_COMPOUND_TAIL: u64 = 1 << 16;
pub const KPF_HUGE: u64 = 1 << 17;
pub const KPF_KSM: u64 = 1 << 21;
pub const KPF_THP: u64 = 1 << 22;
pub const KPF_ZERO_PAGE: u64 = 1 << 24;

const PM_PRESENT: u64 = 1 << 63;
const PM_PFN_MASK: u64 = (1 << 55) - 1;

/// Pages per pagemap pread.
const PAGEMAP_BATCH: u64 = 64 * 1024;
/// PFNs read on a miss (512 bytes).
const KPF_BLOCK: u64 = 64;
/// PFNs read on a miss during a head or size walk.
const KPF_PROBE: u64 = 8;
/// Largest single read of a span (bytes).
const KPF_MAX_READ: usize = 4 << 20;
/// Largest folio we look for (1 GiB hugetlb pages).
const MAX_FOLIO_ORDER: u32 = 18;

/// A census of some ranges, per VMA and in total.
#[derive(Clone, Debug, Default)]
pub struct CensusReport {
    pub total: Census,
    /// Parallel to the VMA list given; a folio counts in the VMA of its first mapped page.
    pub per_vma: Vec<Census>,
    /// Pages looked at (present or not).
    pub pages_scanned: u64,
    pub present_pages: u64,
    pub elapsed: Duration,
    /// Time in pagemap and kpageflags reads (past 128 Ki pages, pagemap is read on another
    /// thread, overlapping the rest), and the number of kpageflags reads.
    pub pagemap_time: Duration,
    pub kpageflags_time: Duration,
    pub kpageflags_reads: u64,
    pub kpageflags_pfns: u64,
    /// Per VMA, the address ranges mapped by pages of large folios (merged), for sampling
    /// their contents ([`crate::bloat`]).
    pub large_ranges: Vec<Vec<(u64, u64)>>,
}

/// Cached reader of /proc/kpageflags.
struct KpageFlags {
    file: File,
    /// (start PFN, flags of consecutive PFNs), sorted by start, not overlapping.
    runs: Vec<(u64, Vec<u64>)>,
    /// Index of the run of the last hit.
    last: usize,
    reads: u64,
    pfns_read: u64,
    time: Duration,
}

/// A multiplicative hasher for PFN keys (the default SipHash costs more than the census loop).
#[derive(Default, Clone, Copy)]
struct PfnHasher(u64);

impl Hasher for PfnHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

type PfnBuild = BuildHasherDefault<PfnHasher>;

impl KpageFlags {
    fn open() -> Result<KpageFlags> {
        let file = File::open("/proc/kpageflags").map_err(|e| match e.kind() {
            std::io::ErrorKind::PermissionDenied => {
                LiveError::NotAvailable("/proc/kpageflags is readable by root only".into())
            }
            _ => io_err("cannot open", "/proc/kpageflags", e),
        })?;
        Ok(KpageFlags { file, runs: Vec::new(), last: 0, reads: 0, pfns_read: 0, time: Duration::ZERO })
    }

    fn read_run(&mut self, start_pfn: u64, n: u64) -> Result<()> {
        let t = Instant::now();
        let mut buf = vec![0u8; (n * 8) as usize];
        let mut done = 0usize;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], start_pfn * 8 + done as u64) {
                Ok(0) => break, // past the last PFN: flags stay 0
                Ok(k) => done += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err("cannot read", "/proc/kpageflags", e)),
            }
        }
        self.reads += 1;
        self.pfns_read += n;
        self.time += t.elapsed();
        let v: Vec<u64> =
            buf.chunks_exact(8).map(|c| u64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect();
        // Runs never overlap: prefetch reads disjoint blocks into an empty cache, and a miss
        // reads only the gap between its neighbours (see `get_with`).
        let pos = self.runs.partition_point(|(s, _)| *s < start_pfn);
        let start = start_pfn;
        if !v.is_empty() {
            self.runs.insert(pos, (start, v));
            self.last = pos;
        }
        Ok(())
    }

    /// Read the flags of `out.len()` PFNs from `start_pfn` into `out` (not cached; past the
    /// last PFN, flags stay 0).
    fn read_into(&mut self, start_pfn: u64, out: &mut [u64]) -> Result<()> {
        self.reads += read_flags(&self.file, start_pfn, out)?;
        self.pfns_read += out.len() as u64;
        Ok(())
    }

    fn get(&mut self, pfn: u64) -> Result<u64> {
        self.get_with(pfn, KPF_BLOCK)
    }

    /// Like `get`, but a miss reads only `block` PFNs around `pfn` (the head/size walks probe
    /// a few far-apart PFNs of a large folio and need nothing in between).
    fn get_with(&mut self, pfn: u64, block: u64) -> Result<u64> {
        if let Some(f) = self.lookup(pfn) {
            return Ok(f);
        }
        let pos = self.runs.partition_point(|(s, _)| *s <= pfn);
        let mut lo = pfn / block * block;
        let mut hi = lo + block;
        if let Some((s, v)) = pos.checked_sub(1).and_then(|i| self.runs.get(i)) {
            lo = lo.max(s + v.len() as u64);
        }
        if let Some((s, _)) = self.runs.get(pos) {
            hi = hi.min(*s);
        }
        self.read_run(lo, hi - lo)?;
        self.lookup(pfn).ok_or_else(|| LiveError::Parse {
            path: "/proc/kpageflags".into(),
            message: format!("PFN {pfn:#x} missing after read"),
        })
    }

    fn lookup(&mut self, pfn: u64) -> Option<u64> {
        if let Some((s, v)) = self.runs.get(self.last) {
            if pfn >= *s && pfn < s + v.len() as u64 {
                return Some(v[(pfn - s) as usize]);
            }
        }
        let pos = self.runs.partition_point(|(s, _)| *s <= pfn);
        let (s, v) = self.runs.get(pos.checked_sub(1)?)?;
        let f = v.get((pfn - s) as usize).copied()?;
        self.last = pos - 1;
        Some(f)
    }

    fn clear(&mut self) {
        self.runs.clear();
        self.last = 0;
    }

    /// The head PFN of the compound page `pfn` belongs to (`pfn` itself for a head or a page
    /// that is not compound, or when the flags changed under us).
    fn head_of(&mut self, pfn: u64, flags: u64) -> Result<u64> {
        if flags & KPF_COMPOUND_TAIL == 0 {
            return Ok(pfn);
        }
        for k in 1..=MAX_FOLIO_ORDER {
            let cand = pfn & !((1u64 << k) - 1);
            if cand == pfn {
                continue;
            }
            let f = self.get_with(cand, KPF_PROBE)?;
            if f & KPF_COMPOUND_HEAD != 0 {
                return Ok(cand);
            }
            if f & KPF_COMPOUND_TAIL == 0 {
                break;
            }
        }
        Ok(pfn)
    }

    /// Pages in the folio whose head is `head`.
    fn nr_pages(&mut self, head: u64, head_flags: u64) -> Result<u64> {
        if head_flags & KPF_COMPOUND_HEAD == 0 {
            return Ok(1);
        }
        let mut k = 0;
        while k < MAX_FOLIO_ORDER && self.get_with(head + (1u64 << k), KPF_PROBE)? & KPF_COMPOUND_TAIL != 0 {
            k += 1;
        }
        Ok(1u64 << k)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct FolioAcc {
    nr: u64,
    /// Virtual address at which the folio would sit if mapped in one piece, from its first
    /// mapped page.
    base: u64,
    mapped: u64,
    matching: u64,
    vma: usize,
    hugetlb: bool,
}

/// Read `len` pagemap entries from `start` (a virtual address) into `out`.
pub fn read_pagemap(file: &File, path: &str, start: u64, len: u64, out: &mut Vec<u64>) -> Result<()> {
    out.clear();
    out.resize(len as usize, 0);
    // SAFETY: u64 has no invalid bit patterns; the byte view covers exactly `out`.
    let buf = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), out.len() * 8) };
    let mut done = 0usize;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], (start / PAGE_SIZE) * 8 + done as u64) {
            Ok(0) => break,
            Ok(k) => done += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err("cannot read", path, e)),
        }
    }
    out.truncate(done / 8);
    Ok(())
}

/// How [`census_of_ranges_with`] reads kpageflags; both give the same census.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reads {
    /// Long runs on demand, a folio's head, middle and end only (the default).
    Sparse,
    /// The flags of every present PFN (the reference the sparse reads are tested against).
    Every,
    /// Like `Sparse`, but every run on demand, however short (for tests).
    OnDemand,
}

/// Census of the parts of `ranges` (start, end) that lie in `vmas` (from smaps of `pid`).
pub fn census_of_ranges(pid: i32, ranges: &[(u64, u64)], vmas: &[Vma]) -> Result<CensusReport> {
    census_of_ranges_with(pid, ranges, vmas, Reads::Sparse)
}

/// [`census_of_ranges`] with a choice of kpageflags reads.
pub fn census_of_ranges_with(pid: i32, ranges: &[(u64, u64)], vmas: &[Vma], reads: Reads) -> Result<CensusReport> {
    let t0 = Instant::now();
    let (pagemap, path) = open_pagemap(pid)?;
    let mut kpf = KpageFlags::open()?;
    let segs = segments(ranges, vmas);
    let nv = vmas.len();
    // Private anonymous VMAs: a folio there is mapped once in this mm (no KSM for large folios;
    // KSM pages are checked by flag), so a folio seen whole in one run is counted on the spot.
    let private_anon: Vec<bool> =
        vmas.iter().map(|v| (v.name.is_empty() || v.name.starts_with('[')) && !v.perms.contains('s')).collect();
    let mut st = Tally::new(nv);
    let mut report = CensusReport::default();
    walk_pagemap(&pagemap, &path, &segs, &mut kpf, &mut st, &private_anon, reads, &mut report)?;
    let Tally { zero_ptes, huge_zero, small, whole, whole_pmd_candidates, accs, large_ranges, .. } = st;
    report.large_ranges = large_ranges;
    let (pmd_mapped, whole_pmd) = pmd_mappings(vmas, &accs, &whole_pmd_candidates);

    let mut per_vma = vec![Census::default(); nv];
    for vi in 0..nv {
        let c = &mut per_vma[vi];
        c.zero_page_ptes = zero_ptes[vi];
        c.huge_zero_pmds = huge_zero[vi].len() as u64;
        if small[vi] > 0 {
            let e = c.sizes.entry(label(1).into()).or_default();
            e.folios += small[vi];
            e.pte_mapped += small[vi];
        }
        for (order, &k) in whole[vi].iter().enumerate() {
            if k == 0 {
                continue;
            }
            let nr = 1u64 << order;
            let e = c.sizes.entry(label(nr).into()).or_default();
            e.folios += k;
            let pmd = if nr * PAGE_SIZE == PMD_SIZE { whole_pmd[vi] } else { 0 };
            e.pmd_mapped += pmd;
            e.pte_mapped += k - pmd;
        }
    }
    for (i, a) in accs.iter().enumerate() {
        let e: &mut CensusEntry = per_vma[a.vma].sizes.entry(label(a.nr).into()).or_default();
        e.folios += 1;
        if pmd_mapped[i] || (a.hugetlb && a.nr * PAGE_SIZE >= PMD_SIZE && a.matching == a.nr) {
            e.pmd_mapped += 1;
        } else {
            e.pte_mapped += 1;
            if a.matching < a.nr {
                e.partially_mapped += 1;
            }
        }
    }
    let mut total = Census::default();
    for c in &per_vma {
        total.add(c);
    }
    report.total = total;
    report.per_vma = per_vma;
    report.elapsed = t0.elapsed();
    report.kpageflags_time += kpf.time;
    report.kpageflags_reads = kpf.reads;
    report.kpageflags_pfns = kpf.pfns_read;
    Ok(report)
}

/// Open /proc/PID/pagemap; ESRCH or ENOENT says the process has gone.
fn open_pagemap(pid: i32) -> Result<(File, String)> {
    let path = format!("/proc/{pid}/pagemap");
    let pagemap = File::open(&path).map_err(|e| match e.kind() {
        // ESRCH: the process has exited (a zombie has no mm) or is exiting.
        std::io::ErrorKind::NotFound => LiveError::NoSuchProcess { pid },
        _ if e.raw_os_error() == Some(libc::ESRCH) => LiveError::NoSuchProcess { pid },
        std::io::ErrorKind::PermissionDenied => LiveError::NotAvailable(format!("{path} needs root")),
        _ => io_err("cannot open", &path, e),
    })?;
    Ok((pagemap, path))
}

/// Segments: each range clipped to each VMA (but [vsyscall]), page-aligned, in address order.
fn segments(ranges: &[(u64, u64)], vmas: &[Vma]) -> Vec<(u64, u64, usize)> {
    let mut segs: Vec<(u64, u64, usize)> = Vec::new();
    for (vi, v) in vmas.iter().enumerate() {
        if v.name == "[vsyscall]" {
            continue;
        }
        for &(a, b) in ranges {
            let s = a.max(v.start);
            let e = b.min(v.end);
            if s < e {
                segs.push((s / PAGE_SIZE * PAGE_SIZE, e.div_ceil(PAGE_SIZE) * PAGE_SIZE, vi));
            }
        }
    }
    segs.sort_unstable();
    segs
}

/// Read pagemap over the segments in batches and tally each batch's runs from their
/// kpageflags; large scans read pagemap on a second thread.
#[allow(clippy::too_many_arguments)]
fn walk_pagemap(
    pagemap: &File,
    path: &str,
    segs: &[(u64, u64, usize)],
    kpf: &mut KpageFlags,
    st: &mut Tally,
    private_anon: &[bool],
    reads: Reads,
    report: &mut CensusReport,
) -> Result<()> {
    let mut flags_buf: Vec<u64> = Vec::new();
    let mut spans: Vec<Span> = Vec::new();
    let mut short: Vec<Run> = Vec::new();
    let mut window: Vec<u64> = Vec::new();
    let lazy_min = match reads {
        Reads::Sparse => LAZY_MIN_RUN,
        Reads::Every => u64::MAX,
        Reads::OnDemand => 0,
    };

    // The kpageflags side of one pagemap batch.
    let mut take = |b: Batch, report: &mut CensusReport| -> Result<()> {
        report.pagemap_time += b.pagemap_time;
        report.pages_scanned += b.n;
        if b.present == 0 {
            return Ok(());
        }
        if b.runs.iter().all(|r| r.pfn == 0) {
            return Err(LiveError::NotAvailable(format!("{path} shows no PFNs (they are hidden without CAP_SYS_ADMIN)")));
        }
        report.present_pages += b.present;
        // Short runs: the flags of every PFN and of the one after the run (where its last
        // folio ends), read in advance in spans merged across runs. Long runs: read on demand
        // while walking them (see `RunFlags`).
        short.clear();
        short.extend(b.runs.iter().filter(|r| r.len < lazy_min).copied());
        let tk = Instant::now();
        read_spans(kpf, &short, &mut spans, &mut flags_buf)?;
        report.kpageflags_time += tk.elapsed();
        kpf.clear();
        for r in &b.runs {
            let mut fl = if r.len < lazy_min {
                let sp = &spans[span_of(&spans, r.pfn)];
                let off = (sp.off + (r.pfn - sp.pfn)) as usize;
                RunFlags::read(r, &flags_buf[off..off + r.len as usize + 1])
            } else {
                RunFlags::on_demand(r, std::mem::take(&mut window))
            };
            tally_run(st, kpf, r, &mut fl, b.va, b.vi, private_anon[b.vi])?;
            window = fl.into_window();
        }
        Ok(())
    };
    let pages: u64 = segs.iter().map(|(s, e, _)| (e - s) / PAGE_SIZE).sum();
    if pages <= 2 * PAGEMAP_BATCH {
        pagemap_batches(pagemap, path, segs, |b| take(b, report))?;
    } else {
        // Two threads (issue #13 item 6): pagemap read and cut into runs ahead, on the other
        // CPU, while this one reads kpageflags; the batches come in address order.
        std::thread::scope(|sc| -> Result<()> {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Batch>>(2);
            sc.spawn(|| {
                let tx = tx;
                let r = pagemap_batches(pagemap, path, segs, |b| tx.send(Ok(b)).map_err(|_| LiveError::NotAvailable("census ended".into())));
                if let Err(e) = r {
                    let _ = tx.send(Err(e));
                }
            });
            for b in rx {
                take(b?, report)?;
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// PMD mappings per VMA, from smaps: the first N candidates (2 MiB folios fully mapped at a
/// 2 MiB-aligned address of the VMA) are PMD-mapped, N = PMD-mapped KiB / 2 MiB. Which of
/// `accs` are PMD-mapped, and how many of each VMA's folios seen whole.
fn pmd_mappings(vmas: &[Vma], accs: &[FolioAcc], whole_pmd_candidates: &[u64]) -> (Vec<bool>, Vec<u64>) {
    let nv = vmas.len();
    let mut candidates: Vec<Vec<usize>> = vec![Vec::new(); nv];
    for (i, a) in accs.iter().enumerate() {
        if a.nr * PAGE_SIZE == PMD_SIZE && a.matching == a.nr && a.base % PMD_SIZE == 0 && !a.hugetlb {
            let v = &vmas[a.vma];
            if a.base >= v.start && a.base + PMD_SIZE <= v.end {
                candidates[a.vma].push(i);
            }
        }
    }
    let mut pmd_mapped = vec![false; accs.len()];
    let mut whole_pmd = vec![0u64; nv];
    for (vi, c) in candidates.iter().enumerate() {
        let n = vmas[vi].pmd_mapped_kb() * 1024 / PMD_SIZE;
        whole_pmd[vi] = n.min(whole_pmd_candidates[vi]);
        for &i in c.iter().take((n - whole_pmd[vi]) as usize) {
            pmd_mapped[i] = true;
        }
    }
    (pmd_mapped, whole_pmd)
}

/// One pagemap batch: `n` pages from `va` in VMA `vi`, its runs and number of present pages.
struct Batch {
    va: u64,
    n: u64,
    vi: usize,
    runs: Vec<Run>,
    present: u64,
    pagemap_time: Duration,
}

/// Read pagemap over `segs` in batches, cut each into runs and hand it to `f`, in address order.
fn pagemap_batches(pagemap: &File, path: &str, segs: &[(u64, u64, usize)], mut f: impl FnMut(Batch) -> Result<()>) -> Result<()> {
    let mut entries: Vec<u64> = Vec::with_capacity(PAGEMAP_BATCH as usize);
    for &(s, e, vi) in segs {
        let mut va = s;
        while va < e {
            // Chunks end on 2 MiB boundaries so that PMD-sized folios are rarely cut.
            let mut n = ((e - va) / PAGE_SIZE).min(PAGEMAP_BATCH);
            let end = va + n * PAGE_SIZE;
            if end < e && end % PMD_SIZE != 0 && end - end % PMD_SIZE > va {
                n = (end - end % PMD_SIZE - va) / PAGE_SIZE;
            }
            let tp = Instant::now();
            read_pagemap(pagemap, path, va, n, &mut entries)?;
            let pagemap_time = tp.elapsed();
            // Runs of pages contiguous in both address and PFN.
            let mut runs: Vec<Run> = Vec::new();
            let mut present = 0u64;
            for (i, &ent) in entries.iter().enumerate() {
                if ent & PM_PRESENT == 0 {
                    continue;
                }
                present += 1;
                let pfn = ent & PM_PFN_MASK;
                match runs.last_mut() {
                    Some(r) if r.idx + r.len == i as u64 && r.pfn + r.len == pfn => r.len += 1,
                    _ => runs.push(Run { idx: i as u64, pfn, len: 1 }),
                }
            }
            f(Batch { va, n, vi, runs, present, pagemap_time })?;
            va += n * PAGE_SIZE;
        }
    }
    Ok(())
}

/// Pages contiguous in address (pagemap index `idx`) and in PFN.
#[derive(Clone, Copy, Debug)]
struct Run {
    idx: u64,
    pfn: u64,
    len: u64,
}

/// PFNs `[pfn, pfn + len)` whose flags sit at `off` in the flags buffer.
#[derive(Clone, Copy, Debug)]
struct Span {
    pfn: u64,
    len: u64,
    off: u64,
}

/// Merge two wanted PFN intervals when at most this many PFNs lie between them (one pread
/// costs about as much as reading this many PFNs).
const SPAN_MERGE_GAP: u64 = 16;

/// Read the flags of `[r.pfn, r.pfn + r.len]` for every run, in merged spans.
fn read_spans(kpf: &mut KpageFlags, runs: &[Run], spans: &mut Vec<Span>, buf: &mut Vec<u64>) -> Result<()> {
    let mut want: Vec<(u64, u64)> = runs.iter().map(|r| (r.pfn, r.pfn + r.len + 1)).collect();
    want.sort_unstable();
    spans.clear();
    for (a, b) in want {
        match spans.last_mut() {
            Some(sp) if a <= sp.pfn + sp.len + SPAN_MERGE_GAP => sp.len = sp.len.max(b - sp.pfn),
            _ => spans.push(Span { pfn: a, len: b - a, off: 0 }),
        }
    }
    let total: u64 = spans.iter().map(|s| s.len).sum();
    buf.clear();
    buf.resize(total as usize, 0);
    let mut off = 0u64;
    for sp in spans.iter_mut() {
        sp.off = off;
        off += sp.len;
    }
    // Sequential: reading with several threads was slower here (2 vCPUs, both busy).
    for sp in spans.iter() {
        kpf.read_into(sp.pfn, &mut buf[sp.off as usize..(sp.off + sp.len) as usize])?;
    }
    Ok(())
}

/// pread the flags of `out.len()` PFNs from `start_pfn` (0 past the last PFN); returns the
/// number of reads.
fn read_flags(file: &File, start_pfn: u64, out: &mut [u64]) -> Result<u64> {
    // SAFETY: u64 has no invalid bit patterns; the byte view covers exactly `out`.
    let bytes = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(out)) };
    let mut done = 0usize;
    let mut reads = 0;
    while done < bytes.len() {
        let end = bytes.len().min(done + KPF_MAX_READ);
        reads += 1;
        match file.read_at(&mut bytes[done..end], start_pfn * 8 + done as u64) {
            Ok(0) => {
                bytes[done..].fill(0);
                break;
            }
            Ok(k) => done += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err("cannot read", "/proc/kpageflags", e)),
        }
    }
    Ok(reads)
}

/// The span holding `pfn` (spans are sorted and cover every run).
fn span_of(spans: &[Span], pfn: u64) -> usize {
    spans.partition_point(|s| s.pfn <= pfn) - 1
}

/// Per-VMA counts while walking.
struct Tally {
    zero_ptes: Vec<u64>,
    huge_zero: Vec<HashSet<u64>>,
    small_seen: HashSet<u64, PfnBuild>,
    small: Vec<u64>,
    /// Folios seen whole in one run of a private anonymous VMA, by order.
    whole: Vec<[u64; MAX_FOLIO_ORDER as usize + 1]>,
    /// Of those, 2 MiB folios at a 2 MiB-aligned address inside the VMA.
    whole_pmd_candidates: Vec<u64>,
    large_ranges: Vec<Vec<(u64, u64)>>,
    /// Every other folio, by head PFN.
    accs: Vec<FolioAcc>,
    by_head: HashMap<u64, usize, PfnBuild>,
    /// Order of the last folio seen whole: the guess for the next one (see `whole_order`).
    last_order: u32,
}

/// Runs at least this long are read on demand (`RunFlags::on_demand`); shorter ones in
/// advance, their reads merged across runs.
const LAZY_MIN_RUN: u64 = 64;
/// From this order up, a folio costs two one-PFN reads on demand (its head, with the end of
/// the folio before it, and its middle) rather than one read from its head to its middle.
const SINGLE_READ_ORDER: u32 = 4;

/// The flags of a run's PFNs `[pfn, pfn + len]` (the last one is the PFN after the run, where
/// its last folio ends): all read in advance, or read on demand, `want` PFNs at a time.
struct RunFlags<'a> {
    pfn: u64,
    len: u64,
    pre: Option<&'a [u64]>,
    /// On demand: the flags of `[win_pfn, win_pfn + win.len())`, from the last read.
    win_pfn: u64,
    win: Vec<u64>,
}

impl<'a> RunFlags<'a> {
    fn read(r: &Run, fl: &'a [u64]) -> RunFlags<'a> {
        RunFlags { pfn: r.pfn, len: r.len, pre: Some(fl), win_pfn: 0, win: Vec::new() }
    }

    fn on_demand(r: &Run, mut buf: Vec<u64>) -> RunFlags<'a> {
        buf.clear();
        RunFlags { pfn: r.pfn, len: r.len, pre: None, win_pfn: 0, win: buf }
    }

    fn into_window(self) -> Vec<u64> {
        self.win
    }

    /// The flags of PFN `pfn + i` (`i <= len`); on a miss, reads up to `want` PFNs from there.
    fn get(&mut self, kpf: &mut KpageFlags, i: u64, want: u64) -> Result<u64> {
        if let Some(fl) = self.pre {
            return Ok(fl[i as usize]);
        }
        let pfn = self.pfn + i;
        if pfn >= self.win_pfn && pfn - self.win_pfn < self.win.len() as u64 {
            return Ok(self.win[(pfn - self.win_pfn) as usize]);
        }
        let n = want.clamp(1, self.len + 1 - i);
        self.win.clear();
        self.win.resize(n as usize, 0);
        let t = Instant::now();
        kpf.read_into(pfn, &mut self.win)?;
        kpf.time += t.elapsed();
        self.win_pfn = pfn;
        Ok(self.win[0])
    }
}

/// PFNs to read on a miss at the head of a folio (or small page) when the folio before was of
/// order `k`: one for large folios (their middle and end are read alone), else up to and
/// including the middle of a folio of order `k`, or a block for small pages.
fn want_at_head(k: u32) -> u64 {
    match k {
        0 => KPF_BLOCK,
        k if k >= SINGLE_READ_ORDER => 1,
        k => (1 << (k - 1)) + 1,
    }
}

/// The order of the folio whose head is PFN `i` of the run, when it lies whole in the run
/// (its end, `i + 2^order`, at most the run's end); `None` when it extends past the run or
/// its flags do not add up (they changed under us).
///
/// Exactness without reading every tail: a folio of order `k` is naturally aligned in PFN
/// space (`mm/page_alloc.c: __alloc_pages` hands out aligned blocks; `folio_order`), so when
/// `head` is a KPF_COMPOUND_HEAD aligned to `2^k`, `head + 2^(k-1)` a KPF_COMPOUND_TAIL and
/// `head + 2^k` not a tail, the folio at `head` has order exactly `k`: a folio holding
/// `head + 2^(k-1)` as a tail is aligned, so it either starts after `head` and is smaller than
/// `2^(k-1)` (then that PFN, a multiple of its size, would be its head) or holds the whole
/// aligned block of `2^k` from `head`, and so is head's own folio; and a folio of order above
/// `k` from `head` would have `head + 2^k` as a tail (`fs/proc/page.c: stable_page_flags` sets
/// KPF_COMPOUND_TAIL for every page of a large folio but its first). The guess is the order of
/// the last folio seen whole (`Tally::last_order`); when it fails, the order is found by
/// doubling (`head + 1, + 2, + 4 ...`, as `KpageFlags::nr_pages`). With the run's flags read in
/// advance, the tails are counted one by one instead.
fn whole_order(kpf: &mut KpageFlags, fl: &mut RunFlags, i: u64, guess: u32) -> Result<Option<u32>> {
    if let Some(pre) = fl.pre {
        // Every flag at hand: count the tails that follow (the census before the sparse
        // reads, which they are tested against).
        let (i, len) = (i as usize, fl.len as usize);
        let mut k = 1usize;
        while i + k <= len && pre[i + k] & KPF_COMPOUND_TAIL != 0 {
            k += 1;
        }
        return Ok((i + k <= len && k.is_power_of_two()).then_some(k.trailing_zeros()));
    }
    let head = fl.pfn + i;
    let room = fl.len - i;
    let want = want_at_head(guess);
    if guess >= 1 && head % (1 << guess) == 0 && 1 << guess <= room {
        let mid = fl.get(kpf, i + (1 << (guess - 1)), 1)?;
        if mid & KPF_COMPOUND_TAIL != 0 {
            let end = fl.get(kpf, i + (1 << guess), want)?;
            if end & KPF_COMPOUND_TAIL == 0 {
                return Ok(Some(guess));
            }
        }
    }
    let mut k = 0u32;
    while k <= MAX_FOLIO_ORDER && 1 << k <= room {
        let probe = if 1 << k == room { want } else { 1 };
        if fl.get(kpf, i + (1 << k), probe)? & KPF_COMPOUND_TAIL == 0 {
            break;
        }
        k += 1;
    }
    if k == 0 || k > MAX_FOLIO_ORDER || 1 << k > room || head % (1 << k) != 0 {
        return Ok(None);
    }
    Ok(Some(k))
}

impl Tally {
    fn new(nv: usize) -> Tally {
        Tally {
            zero_ptes: vec![0u64; nv],
            huge_zero: vec![HashSet::new(); nv],
            small_seen: HashSet::default(),
            small: vec![0u64; nv],
            whole: vec![[0u64; MAX_FOLIO_ORDER as usize + 1]; nv],
            whole_pmd_candidates: vec![0u64; nv],
            large_ranges: vec![Vec::new(); nv],
            accs: Vec::new(),
            by_head: HashMap::default(),
            last_order: 0,
        }
    }
}

/// Account the pages of one run; `fl` gives the flags of its PFNs and of the PFN after it.
fn tally_run(st: &mut Tally, kpf: &mut KpageFlags, r: &Run, fl: &mut RunFlags, chunk_va: u64, vi: usize, private_anon: bool) -> Result<()> {
    let len = r.len as usize;
    let mut i = 0usize;
    while i < len {
        let pfn = r.pfn + i as u64;
        let page_va = chunk_va + (r.idx + i as u64) * PAGE_SIZE;
        let flags = fl.get(kpf, i as u64, want_at_head(st.last_order))?;
        let compound = flags & (KPF_COMPOUND_HEAD | KPF_COMPOUND_TAIL) != 0;
        if flags & KPF_ZERO_PAGE != 0 {
            // The huge zero folio's pages come one by one: read them in blocks.
            st.last_order = 0;
            if compound {
                st.huge_zero[vi].insert(page_va / PMD_SIZE);
            } else {
                st.zero_ptes[vi] += 1;
            }
            i += 1;
            continue;
        }
        if !compound {
            st.last_order = 0;
            if (private_anon && flags & KPF_KSM == 0) || st.small_seen.insert(pfn) {
                st.small[vi] += 1;
            }
            i += 1;
            continue;
        }
        if flags & KPF_COMPOUND_HEAD != 0 && flags & KPF_HUGE == 0 {
            if let Some(order) = whole_order(kpf, fl, i as u64, st.last_order)? {
                // Seen whole (the page after it is not a tail) and mapped in one piece.
                st.last_order = order;
                let nr = 1u64 << order;
                push_range(&mut st.large_ranges[vi], page_va, page_va + nr * PAGE_SIZE);
                if private_anon && !st.by_head.contains_key(&pfn) {
                    st.whole[vi][order as usize] += 1;
                    if nr * PAGE_SIZE == PMD_SIZE && page_va % PMD_SIZE == 0 {
                        st.whole_pmd_candidates[vi] += 1;
                    }
                } else {
                    let idx = acc_index(st, kpf, pfn, flags, vi)?;
                    let a = &mut st.accs[idx];
                    for j in 0..nr {
                        account(a, page_va + j * PAGE_SIZE, j, vi);
                    }
                }
                i += nr as usize;
                continue;
            }
        }
        // A folio that extends past this run, starts before it, or is hugetlb: find its head
        // and size by probing, and account the pages of this run that belong to it.
        let head = kpf.head_of(pfn, flags)?;
        let head_flags = if head == pfn { flags } else { kpf.get(head)? };
        let idx = acc_index(st, kpf, head, head_flags, vi)?;
        let nr = st.accs[idx].nr;
        if pfn < head || pfn - head >= nr {
            // Flags changed under us (the folio was split or freed): count the page alone.
            if st.small_seen.insert(pfn) {
                st.small[vi] += 1;
            }
            i += 1;
            continue;
        }
        let upto = ((head + nr - pfn) as usize).min(len - i);
        if nr > 1 {
            push_range(&mut st.large_ranges[vi], page_va, page_va + upto as u64 * PAGE_SIZE);
        }
        let a = &mut st.accs[idx];
        for j in 0..upto {
            account(a, page_va + j as u64 * PAGE_SIZE, pfn - head + j as u64, vi);
        }
        i += upto;
    }
    Ok(())
}

/// Append `[a, b)`, merged with the last range when they touch.
fn push_range(v: &mut Vec<(u64, u64)>, a: u64, b: u64) {
    match v.last_mut() {
        Some(last) if last.1 == a => last.1 = b,
        _ => v.push((a, b)),
    }
}

/// The accumulator of the folio whose head is `head`, created on first sight.
fn acc_index(st: &mut Tally, kpf: &mut KpageFlags, head: u64, head_flags: u64, vi: usize) -> Result<usize> {
    if let Some(&i) = st.by_head.get(&head) {
        return Ok(i);
    }
    let nr = kpf.nr_pages(head, head_flags)?;
    st.accs.push(FolioAcc { nr, base: 0, mapped: 0, matching: 0, vma: vi, hugetlb: head_flags & KPF_HUGE != 0 });
    st.by_head.insert(head, st.accs.len() - 1);
    Ok(st.accs.len() - 1)
}

fn account(a: &mut FolioAcc, va: u64, index_in_folio: u64, vma: usize) {
    let want = va.wrapping_sub(index_in_folio * PAGE_SIZE);
    if a.mapped == 0 {
        a.base = want;
        a.vma = vma;
    }
    a.mapped += 1;
    if want == a.base {
        a.matching += 1;
    }
}

/// `4kB`, `64kB`, `2048kB` for a folio of `nr` pages.
pub fn label(nr: u64) -> String {
    format!("{}kB", nr * PAGE_SIZE / 1024)
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kpageflags_cache_returns_every_pfn_whatever_the_read_order() {
        // A fake kpageflags whose entry i holds i.
        let path = std::env::temp_dir().join(format!("thplab-kpf-{}", std::process::id()));
        let data: Vec<u8> = (0u64..5000).flat_map(|i| i.to_ne_bytes()).collect();
        std::fs::write(&path, data).unwrap();
        let mut k = KpageFlags { file: File::open(&path).unwrap(), runs: Vec::new(), last: 0, reads: 0, pfns_read: 0, time: Duration::ZERO };
        let mut out = vec![0u64; 40];
        k.read_into(4980, &mut out).unwrap();
        assert_eq!(out[..20], (4980..5000).collect::<Vec<u64>>()[..]);
        assert!(out[20..].iter().all(|&f| f == 0), "past the end: 0");
        for pfn in [100, 120, 64, 127, 128, 129, 130, 150, 3, 4095, 4998, 2001, 1999, 17, 16, 200] {
            assert_eq!(k.get(pfn).unwrap(), pfn, "pfn {pfn}");
            assert_eq!(k.get_with(pfn + 1, KPF_PROBE).unwrap(), pfn + 1);
        }
        // Past the end: flags 0.
        assert_eq!(k.get(6000).unwrap(), 0);
        for w in k.runs.windows(2) {
            assert!(w[0].0 + w[0].1.len() as u64 <= w[1].0, "runs overlap");
        }
        let _ = std::fs::remove_file(&path);
    }

    /// A PFN space of folios of mixed orders (4 KiB pages, KSM and zero pages, mTHPs, PMD
    /// THPs, the huge zero folio, hugetlb), as `stable_page_flags` shows them.
    fn synthetic_flags(seed: u64, n: u64) -> Vec<u64> {
        let mut x = seed | 1;
        let mut rnd = move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let mut fl = vec![0u64; n as usize + 1024];
        let mut p = 0u64;
        while p < n {
            let pick = rnd(16);
            let (order, extra) = match pick {
                0..=3 => (0, if rnd(8) == 0 { KPF_KSM } else { 0 }),
                4 => (0, KPF_ZERO_PAGE),
                5 => (1, KPF_THP),
                6 => (2, KPF_THP),
                7 => (3, KPF_THP),
                8..=10 => (4, KPF_THP),
                11 => (6, KPF_THP),
                12 | 13 => (9, KPF_THP),
                14 => (9, KPF_THP | KPF_ZERO_PAGE),
                _ => (9, KPF_HUGE),
            };
            let order = if p % (1 << order) == 0 { order } else { 0 };
            let extra = if order == 0 && extra & KPF_THP != 0 { 0 } else { extra };
            let nr = 1u64 << order;
            for j in 0..nr {
                let compound = match (order, j) {
                    (0, _) => 0,
                    (_, 0) => KPF_COMPOUND_HEAD,
                    _ => KPF_COMPOUND_TAIL,
                };
                fl[(p + j) as usize] = compound | extra | KPF_ANON;
            }
            p += nr;
        }
        fl
    }

    /// Everything a census is computed from, after the runs.
    fn tally_state(st: &Tally) -> String {
        let mut heads: Vec<_> = st.by_head.iter().map(|(h, &i)| (*h, st.accs[i].clone())).collect();
        heads.sort_by_key(|(h, _)| *h);
        let mut small: Vec<_> = st.small_seen.iter().copied().collect();
        small.sort_unstable();
        let hz: Vec<Vec<u64>> = st.huge_zero.iter().map(|h| {
            let mut v: Vec<u64> = h.iter().copied().collect();
            v.sort_unstable();
            v
        }).collect();
        format!(
            "zero {:?} hz {hz:?} small {:?} {small:?} whole {:?} pmdc {:?} ranges {:?} accs {heads:?}",
            st.zero_ptes, st.small, st.whole, st.whole_pmd_candidates, st.large_ranges
        )
    }

    #[test]
    fn sparse_reads_classify_like_reading_every_pfn() {
        let path = std::env::temp_dir().join(format!("thplab-kpf-sparse-{}", std::process::id()));
        for seed in 1..40u64 {
            let n = 1 << 15;
            let fl = synthetic_flags(seed * 0x9e37_79b9_7f4a_7c15, n);
            std::fs::write(&path, fl.iter().flat_map(|f| f.to_ne_bytes()).collect::<Vec<u8>>()).unwrap();
            // Runs: pieces of the PFN space, some skipped, some read twice (shared), mapped at
            // addresses in two VMAs with holes, some shifted by a page (mremap).
            let mut x = seed;
            let mut rnd = move |m: u64| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (x >> 33) % m
            };
            let mut runs = Vec::new();
            let mut pfn = 0u64;
            let mut idx = 0u64;
            while pfn < n {
                let len = [1, 3, 17, 64, 100, 700, 3000][rnd(7) as usize].min(n - pfn);
                let start = if rnd(10) == 0 && pfn > 600 { pfn - rnd(600) } else { pfn };
                runs.push(Run { idx, pfn: start, len });
                idx += len + [0, 0, 1, 5][rnd(4) as usize];
                pfn += len + [0, 0, 0, 1, 9][rnd(5) as usize];
            }
            let mut states = Vec::new();
            for lazy in [false, true] {
                let mut kpf = KpageFlags { file: File::open(&path).unwrap(), runs: Vec::new(), last: 0, reads: 0, pfns_read: 0, time: Duration::ZERO };
                let mut st = Tally::new(2);
                let mut window = Vec::new();
                for (k, r) in runs.iter().enumerate() {
                    let vi = (k * 2 / runs.len()).min(1);
                    let private = vi == 0;
                    let chunk_va = 0x7000_0000_0000 + (vi as u64) * 0x1000_0000;
                    let mut f = if lazy {
                        RunFlags::on_demand(r, std::mem::take(&mut window))
                    } else {
                        RunFlags::read(r, &fl[r.pfn as usize..(r.pfn + r.len + 1) as usize])
                    };
                    tally_run(&mut st, &mut kpf, r, &mut f, chunk_va, vi, private).unwrap();
                    window = f.into_window();
                    kpf.clear();
                }
                states.push((tally_state(&st), kpf.pfns_read));
            }
            assert_eq!(states[0].0, states[1].0, "seed {seed}");
        }
        // Only 64 KiB folios, in one run: about two PFNs read per folio.
        let n = 1u64 << 14;
        let fl: Vec<u64> = (0..=n).map(|p| if p == n { 0 } else if p % 16 == 0 { KPF_COMPOUND_HEAD | KPF_THP } else { KPF_COMPOUND_TAIL | KPF_THP }).collect();
        std::fs::write(&path, fl.iter().flat_map(|f| f.to_ne_bytes()).collect::<Vec<u8>>()).unwrap();
        let mut kpf = KpageFlags { file: File::open(&path).unwrap(), runs: Vec::new(), last: 0, reads: 0, pfns_read: 0, time: Duration::ZERO };
        let mut st = Tally::new(1);
        let r = Run { idx: 0, pfn: 0, len: n };
        tally_run(&mut st, &mut kpf, &r, &mut RunFlags::on_demand(&r, Vec::new()), 0x7000_0000_0000, 0, true).unwrap();
        assert_eq!(st.whole[0][4], n / 16);
        assert!(kpf.pfns_read <= n / 8 + 64 && kpf.reads <= n / 8 + 1, "{} PFNs in {} reads", kpf.pfns_read, kpf.reads);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn labels_and_accounting() {
        assert_eq!(label(1), "4kB");
        assert_eq!(label(16), "64kB");
        assert_eq!(label(512), "2048kB");
        let mut a = FolioAcc { nr: 16, base: 0, mapped: 0, matching: 0, vma: 0, hugetlb: false };
        account(&mut a, 0x10000 + 3 * 4096, 3, 0);
        assert_eq!(a.base, 0x10000);
        account(&mut a, 0x10000 + 4 * 4096, 4, 0);
        account(&mut a, 0x90000, 5, 0); // moved (mremap): not at the matching position
        assert_eq!((a.mapped, a.matching), (3, 2));
    }
}
