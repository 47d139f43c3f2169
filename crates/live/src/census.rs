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
//! Reads are batched: pagemap in 512 KiB preads (64 Ki pages), kpageflags for the PFNs of a
//! batch in merged runs of 64-PFN blocks.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use mm_types::{PAGE_SIZE, PMD_SIZE};
use uapi::{Census, CensusEntry};

use crate::procfs::Vma;
use crate::{io_err, LiveError, Result};

pub const KPF_ANON: u64 = 1 << 12;
pub const KPF_COMPOUND_HEAD: u64 = 1 << 15;
pub const KPF_COMPOUND_TAIL: u64 = 1 << 16;
pub const KPF_HUGE: u64 = 1 << 17;
pub const KPF_THP: u64 = 1 << 22;
pub const KPF_ZERO_PAGE: u64 = 1 << 24;

const PM_PRESENT: u64 = 1 << 63;
const PM_PFN_MASK: u64 = (1 << 55) - 1;

/// Pages per pagemap pread.
const PAGEMAP_BATCH: u64 = 64 * 1024;
/// PFNs read on a miss (512 bytes).
const KPF_BLOCK: u64 = 64;
/// Granularity of the prefetch: reading a PFN costs the kernel ~80 ns, a pread ~1–2 µs, so
/// small blocks merged across small gaps read the least.
const KPF_PREFETCH_BLOCK: u64 = 16;
/// PFNs read on a miss during a head or size walk.
const KPF_PROBE: u64 = 8;
/// Merge two needed prefetch blocks into one read when at most this many blocks lie between.
const KPF_MERGE_GAP: u64 = 1;
/// Largest single kpageflags read, in prefetch blocks (1 MiB).
const KPF_MAX_RUN: u64 = 8192;
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
    /// Time in pagemap and kpageflags reads, and the number of kpageflags reads.
    pub pagemap_time: Duration,
    pub kpageflags_time: Duration,
    pub kpageflags_reads: u64,
    pub kpageflags_pfns: u64,
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

    /// Read the blocks holding `pfns` (sorted or not), merging close ones.
    fn prefetch(&mut self, pfns: &[u64]) -> Result<()> {
        let mut blocks: Vec<u64> = pfns.iter().map(|p| p / KPF_PREFETCH_BLOCK).collect();
        blocks.sort_unstable();
        blocks.dedup();
        let mut i = 0;
        while i < blocks.len() {
            let first = blocks[i];
            let mut last = first;
            i += 1;
            while i < blocks.len() && blocks[i] - last <= KPF_MERGE_GAP + 1 && blocks[i] - first < KPF_MAX_RUN {
                last = blocks[i];
                i += 1;
            }
            self.read_run(first * KPF_PREFETCH_BLOCK, (last - first + 1) * KPF_PREFETCH_BLOCK)?;
        }
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
fn read_pagemap(file: &File, path: &str, start: u64, len: u64, out: &mut Vec<u64>) -> Result<()> {
    out.clear();
    let mut buf = vec![0u8; (len * 8) as usize];
    let mut done = 0usize;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], (start / PAGE_SIZE) * 8 + done as u64) {
            Ok(0) => break,
            Ok(k) => done += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err("cannot read", path, e)),
        }
    }
    out.extend(buf[..done].chunks_exact(8).map(|c| u64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])));
    Ok(())
}

/// Census of the parts of `ranges` (start, end) that lie in `vmas` (from smaps of `pid`).
pub fn census_of_ranges(pid: i32, ranges: &[(u64, u64)], vmas: &[Vma]) -> Result<CensusReport> {
    let t0 = Instant::now();
    let path = format!("/proc/{pid}/pagemap");
    let pagemap = File::open(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => LiveError::NoSuchProcess { pid },
        std::io::ErrorKind::PermissionDenied => LiveError::NotAvailable(format!("{path} needs root")),
        _ => io_err("cannot open", &path, e),
    })?;
    let mut kpf = KpageFlags::open()?;

    // Segments: each range clipped to each VMA, in address order.
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

    let nv = vmas.len();
    let mut zero_ptes = vec![0u64; nv];
    let mut huge_zero: Vec<HashSet<u64>> = vec![HashSet::new(); nv];
    let mut small_seen: HashSet<u64, PfnBuild> = HashSet::default();
    let mut small = vec![0u64; nv];
    let mut accs: Vec<FolioAcc> = Vec::new();
    let mut by_head: HashMap<u64, usize, PfnBuild> = HashMap::default();
    let mut entries = Vec::with_capacity(PAGEMAP_BATCH as usize);
    let mut pfns = Vec::with_capacity(PAGEMAP_BATCH as usize);
    let mut report = CensusReport::default();
    // The folio of the previous page: (head, nr, index).
    let mut cur: Option<(u64, u64, usize)>;

    for &(s, e, vi) in &segs {
        let mut va = s;
        while va < e {
            let n = ((e - va) / PAGE_SIZE).min(PAGEMAP_BATCH);
            let tp = Instant::now();
            read_pagemap(&pagemap, &path, va, n, &mut entries)?;
            report.pagemap_time += tp.elapsed();
            report.pages_scanned += n;
            // Prefetch the flags of the first page of every physically contiguous run: the
            // rest of a large folio is covered by its head, and the pages after a run start
            // mostly share its block (a miss reads the next block).
            pfns.clear();
            let mut present = 0u64;
            let mut prev: Option<u64> = None;
            for &ent in &entries {
                if ent & PM_PRESENT != 0 {
                    let pfn = ent & PM_PFN_MASK;
                    present += 1;
                    if prev != Some(pfn.wrapping_sub(1)) {
                        pfns.push(pfn);
                    }
                    prev = Some(pfn);
                } else {
                    prev = None;
                }
            }
            if present == 0 {
                va += n * PAGE_SIZE;
                continue;
            }
            if pfns.iter().all(|&p| p == 0) {
                return Err(LiveError::NotAvailable(format!(
                    "{path} shows no PFNs (they are hidden without CAP_SYS_ADMIN)"
                )));
            }
            report.present_pages += present;
            kpf.clear();
            cur = None;
            kpf.prefetch(&pfns)?;
            for (i, &ent) in entries.iter().enumerate() {
                if ent & PM_PRESENT == 0 {
                    continue;
                }
                let page_va = va + i as u64 * PAGE_SIZE;
                let pfn = ent & PM_PFN_MASK;
                if let Some((head, nr, idx)) = cur {
                    if pfn >= head && pfn < head + nr {
                        account(&mut accs[idx], page_va, pfn - head, vi);
                        continue;
                    }
                }
                let flags = kpf.get(pfn)?;
                let compound = flags & (KPF_COMPOUND_HEAD | KPF_COMPOUND_TAIL) != 0;
                if flags & KPF_ZERO_PAGE != 0 {
                    if compound {
                        huge_zero[vi].insert(page_va / PMD_SIZE);
                    } else {
                        zero_ptes[vi] += 1;
                    }
                    cur = None;
                    continue;
                }
                if !compound {
                    if small_seen.insert(pfn) {
                        small[vi] += 1;
                    }
                    cur = None;
                    continue;
                }
                let head = kpf.head_of(pfn, flags)?;
                let idx = match by_head.get(&head) {
                    Some(&idx) => idx,
                    None => {
                        let hf = if head == pfn { flags } else { kpf.get(head)? };
                        let nr = kpf.nr_pages(head, hf)?;
                        accs.push(FolioAcc {
                            nr,
                            base: 0,
                            mapped: 0,
                            matching: 0,
                            vma: vi,
                            hugetlb: hf & KPF_HUGE != 0,
                        });
                        by_head.insert(head, accs.len() - 1);
                        accs.len() - 1
                    }
                };
                let nr = accs[idx].nr;
                if pfn - head >= nr {
                    // Flags changed under us (the folio was split or freed): count the page alone.
                    if small_seen.insert(pfn) {
                        small[vi] += 1;
                    }
                    cur = None;
                    continue;
                }
                account(&mut accs[idx], page_va, pfn - head, vi);
                cur = Some((head, nr, idx));
            }
            va += n * PAGE_SIZE;
        }
    }

    // PMD mappings per VMA, from smaps.
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
    for (vi, c) in candidates.iter().enumerate() {
        let n = (vmas[vi].pmd_mapped_kb() * 1024 / PMD_SIZE) as usize;
        for &i in c.iter().take(n) {
            pmd_mapped[i] = true;
        }
    }

    let mut per_vma = vec![Census::default(); nv];
    for vi in 0..nv {
        let c = &mut per_vma[vi];
        c.zero_page_ptes = zero_ptes[vi];
        c.huge_zero_pmds = huge_zero[vi].len() as u64;
        if small[vi] > 0 {
            let e = c.sizes.entry(label(1)).or_default();
            e.folios += small[vi];
            e.pte_mapped += small[vi];
        }
    }
    for (i, a) in accs.iter().enumerate() {
        let e: &mut CensusEntry = per_vma[a.vma].sizes.entry(label(a.nr)).or_default();
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
        add_census(&mut total, c);
    }
    report.total = total;
    report.per_vma = per_vma;
    report.elapsed = t0.elapsed();
    report.kpageflags_time = kpf.time;
    report.kpageflags_reads = kpf.reads;
    report.kpageflags_pfns = kpf.pfns_read;
    Ok(report)
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

/// Add `b` into `a`.
pub fn add_census(a: &mut Census, b: &Census) {
    a.zero_page_ptes += b.zero_page_ptes;
    a.huge_zero_pmds += b.huge_zero_pmds;
    for (k, e) in &b.sizes {
        let t = a.sizes.entry(k.clone()).or_default();
        t.folios += e.folios;
        t.pmd_mapped += e.pmd_mapped;
        t.pte_mapped += e.pte_mapped;
        t.partially_mapped += e.partially_mapped;
    }
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
        k.prefetch(&[100, 101, 130, 2000, 17]).unwrap();
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
