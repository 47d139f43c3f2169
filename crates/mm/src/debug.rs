//! `CONFIG_DEBUG_VM` for the model: [`Kernel::check_invariants`] walks every structure and checks
//! that they agree; and the census of mapped folios, in the form `thp_abi::Census` shares with the
//! live harness.
//!
//! Kernel sources (6.18): `mm/debug.c`, `mm/debug_vm_pgtable.c` (what is checked, not how),
//! `fs/proc/task_mmu.c` (`smaps` Rss / AnonHugePages), tools/mm/thpmaps (what a census counts).

use std::collections::BTreeMap;

use mm_types::{Order, Pfn, Vaddr, PAGE_SIZE, PMD_ORDER, PMD_SIZE, PUD_SIZE};
use thp_abi::{Census, CensusEntry, MthpStat};

use crate::page_alloc::pg;
use crate::pgtable::{pte_pfn, Pmd, PTE_PRESENT, PTE_ZERO, NO_TABLE};
use crate::Kernel;

/// What one census walk found, plus bloat (model only).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CensusReport {
    pub census: Census,
    /// Bytes in the counted folios whose pages were never touched (`pg::TOUCHED` clear),
    /// mapped or not: a partially mapped folio's unmapped pages count only if never touched.
    pub bloat_bytes: u64,
    /// Resident bytes (4 KiB per anon PTE, 2 MiB per anon PMD) in the ranges.
    pub rss_bytes: u64,
    /// PMD-mapped anon bytes (AnonHugePages) in the ranges.
    pub anon_huge_bytes: u64,
    /// PMD-mapped shmem bytes (ShmemPmdMapped) in the ranges.
    pub shmem_pmd_bytes: u64,
}

#[derive(Clone, Copy)]
struct FolioRun {
    head: u32,
    order: u8,
    pmd: bool,
    mapped: u32,
}

impl Kernel {
    /// Visit every mapping in `[start, end)`: `f(va, Mapping)`.
    fn walk_mappings(&self, start: u64, end: u64, mut f: impl FnMut(u64, Mapping)) {
        let mut addr = start & !(PMD_SIZE - 1);
        while addr < end {
            let va = Vaddr(addr);
            let Some(t) = self.mm.pt.pmd_table_ro(va) else {
                addr = (addr & !(PUD_SIZE - 1)) + PUD_SIZE;
                continue;
            };
            match self.mm.pt.pmd(t, va) {
                Pmd::None => {}
                Pmd::HugeZero => f(addr, Mapping::HugeZero),
                Pmd::Huge { pfn, .. } => f(addr, Mapping::Pmd(pfn)),
                Pmd::Table(idx) => {
                    let lo = if start > addr { ((start - addr) / PAGE_SIZE) as usize } else { 0 };
                    let hi = if end < addr + PMD_SIZE { ((end - addr).div_ceil(PAGE_SIZE)) as usize } else { 512 };
                    self.mm.pt.for_each_present(idx, lo..hi, |i, e| {
                        let a = addr + i as u64 * PAGE_SIZE;
                        if e & PTE_ZERO != 0 {
                            f(a, Mapping::ZeroPte);
                        } else if e & PTE_PRESENT != 0 {
                            f(a, Mapping::Pte(pte_pfn(e)));
                        }
                    });
                }
            }
            addr += PMD_SIZE;
        }
    }

    /// The census of folios mapped in `ranges` (address ranges; overlaps are counted once).
    ///
    /// Pages of one folio are found in runs (a folio's pages sit at consecutive addresses), so
    /// the walk keeps one run open and only sorts the runs to merge a folio seen twice.
    pub fn census(&self, ranges: &[(u64, u64)]) -> CensusReport {
        let mut merged: Vec<(u64, u64)> = ranges.to_vec();
        merged.sort_unstable();
        let mut joined: Vec<(u64, u64)> = Vec::new();
        for (s, e) in merged {
            match joined.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => joined.push((s, e)),
            }
        }
        let mut runs: Vec<FolioRun> = Vec::new();
        let mut rep = CensusReport::default();
        // Order-0 folios are counted directly: one page, one folio, never partial.
        let mut small = CensusEntry::default();
        let mut small_untouched = 0u64;
        for (s, e) in joined {
            self.walk_mappings(s, e, |_, m| match m {
                Mapping::ZeroPte => rep.census.zero_page_ptes += 1,
                Mapping::HugeZero => rep.census.huge_zero_pmds += 1,
                Mapping::Pmd(pfn) => {
                    runs.push(FolioRun { head: pfn.0, order: PMD_ORDER, pmd: true, mapped: 512 });
                    rep.rss_bytes += PMD_SIZE;
                    if self.page(pfn).flags & pg::SHMEM == 0 {
                        rep.anon_huge_bytes += PMD_SIZE;
                    } else {
                        rep.shmem_pmd_bytes += PMD_SIZE;
                    }
                }
                Mapping::Pte(pfn) => {
                    let p = self.page(pfn);
                    rep.rss_bytes += PAGE_SIZE;
                    // An order-0 page mapped once is one folio; one mapped more than once (a file
                    // page in two VMAs) goes through the runs so that it is counted once.
                    if p.order == 0 && p.mapcount == 1 {
                        small.folios += 1;
                        small.pte_mapped += 1;
                        small_untouched += (p.flags & pg::TOUCHED == 0) as u64;
                        return;
                    }
                    let head = pfn.0 & !((1u32 << p.order) - 1);
                    match runs.last_mut() {
                        Some(r) if r.head == head && !r.pmd => r.mapped += 1,
                        _ => runs.push(FolioRun { head, order: p.order, pmd: false, mapped: 1 }),
                    }
                }
            });
        }
        // Merge runs of the same folio (rare: a folio whose pages were seen in two places).
        if !runs.windows(2).all(|w| w[0].head < w[1].head) {
            runs.sort_unstable_by_key(|r| (r.head, !r.pmd));
        }
        let mut per_order = [CensusEntry::default(); PMD_ORDER as usize + 1];
        per_order[0] = small;
        rep.bloat_bytes += small_untouched * PAGE_SIZE;
        let mut i = 0;
        while i < runs.len() {
            let mut f = runs[i];
            i += 1;
            // The same folio seen again (mapped twice, or its pages found in several runs): one
            // folio; PMD-mapped if any mapping is a PMD (those sort first).
            while i < runs.len() && runs[i].head == f.head {
                if !f.pmd {
                    f.mapped += runs[i].mapped;
                }
                i += 1;
            }
            f.mapped = f.mapped.min(1 << f.order);
            let c = &mut per_order[f.order as usize];
            c.folios += 1;
            if f.pmd {
                c.pmd_mapped += 1;
            } else {
                c.pte_mapped += 1;
                if f.mapped < 1 << f.order {
                    c.partially_mapped += 1;
                }
            }
            // Every page of the folio, mapped here or not: a page another mm touched (a fork's
            // parent or child), or one touched before it was unmapped, is not bloat.
            let head = Pfn(f.head);
            let untouched = (0..1u32 << f.order).filter(|i| self.page(head.add(*i)).flags & pg::TOUCHED == 0).count();
            rep.bloat_bytes += untouched as u64 * PAGE_SIZE;
        }
        for (order, c) in per_order.iter().enumerate() {
            if c.folios > 0 {
                rep.census.sizes.insert(thp_abi::FolioSize::of(Order(order as u8)), *c);
            }
        }
        self.hugetlb_census(ranges, &mut rep.census);
        rep
    }

    /// Every allocated folio (or page-table, reserved, huge zero page) head, by PFN.
    fn folio_heads(&self) -> impl Iterator<Item = (usize, crate::page_alloc::Page)> + '_ {
        let mm = &self.zone.mem_map;
        let mut pfn = 0usize;
        std::iter::from_fn(move || {
            while pfn < mm.len() {
                let p = mm[pfn];
                if p.flags & pg::HEAD != 0 {
                    let at = pfn;
                    pfn += 1 << p.order;
                    return Some((at, p));
                }
                pfn += 1;
            }
            None
        })
    }

    fn page(&self, pfn: Pfn) -> &crate::page_alloc::Page {
        &self.zone.mem_map[pfn.idx()]
    }

    /// Check that every structure agrees with every other. Returns the first disagreement.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.check_frames()?;
        self.check_vmas()?;
        self.check_lru_and_swap()?;
        self.check_mappings()
    }

    /// Every frame is free in exactly one buddy block, or part of exactly one allocation.
    fn check_frames(&self) -> Result<(), String> {
        let n = self.zone.nr_pages() as usize;
        let mut owner = vec![0u8; n];
        let mut free = 0u64;
        for (pfn, order) in self.zone.free_blocks() {
            let size = 1usize << order;
            if pfn as usize % size != 0 {
                return Err(format!("free block pfn {pfn:#x} order {order} is not aligned"));
            }
            for o in &mut owner[pfn as usize..pfn as usize + size] {
                if *o != 0 {
                    return Err(format!("frame in free block {pfn:#x}/{order} is owned twice"));
                }
                *o = 1;
            }
            free += size as u64;
            // A block flagged PageReported was handed to the host, which backs none of it until
            // the guest writes it, and only the reporting order and above are reported.
            if self.zone.mem_map[pfn as usize].flags & pg::REPORTED != 0 {
                let Some(h) = self.zone.host.as_ref() else { return Err(format!("free block {pfn:#x}/{order} is reported on a machine without reporting")) };
                if order < h.order.0 || h.unbacked_in(pfn, size as u32) != size as u64 {
                    return Err(format!("reported free block {pfn:#x}/{order} is below the reporting order or partly backed"));
                }
            }
        }
        if free != self.zone.nr_free_pages() {
            return Err(format!("free lists hold {free} pages, nr_free says {}", self.zone.nr_free_pages()));
        }
        for pfn in self.zone.pcp_pages() {
            let o = &mut owner[pfn as usize];
            if *o != 0 || self.zone.mem_map[pfn as usize].flags != 0 {
                return Err(format!("per-cpu list page {pfn:#x} is also free, allocated or listed twice"));
            }
            *o = 3;
        }
        for (pfn, p) in self.folio_heads() {
            let size = 1usize << p.order;
            if pfn % size != 0 || pfn + size > n {
                return Err(format!("folio at pfn {pfn:#x} of order {} is misaligned", p.order));
            }
            for (i, o) in owner[pfn..pfn + size].iter_mut().enumerate() {
                if *o != 0 {
                    return Err(format!("frame {:#x} of folio {pfn:#x} is also free or in another folio", pfn + i));
                }
                *o = 2;
                let t = self.zone.mem_map[pfn + i];
                if i > 0 && (t.flags & pg::TAIL == 0 || t.order != p.order) {
                    return Err(format!("tail {:#x} of folio {pfn:#x} is not marked as its tail", pfn + i));
                }
            }
        }
        // Frames neither free nor allocated: exactly those a seeded layout left held by the
        // rest of the system (`Zone::seed_free_areas`) and hugetlb's pools (no folio of the
        // buddy allocator's), none otherwise.
        let unowned = owner.iter().filter(|&&o| o == 0).count() as u64;
        if unowned != self.zone.seed_held() + self.hugetlb_frames() {
            let i = owner.iter().position(|&o| o == 0).unwrap_or(0);
            return Err(format!("{unowned} frames (the first {i:#x}) are neither free nor allocated, {} held by the rest of the system", self.zone.seed_held()));
        }
        Ok(())
    }

    fn check_vmas(&self) -> Result<(), String> {
        let mut prev_end = 0;
        for v in self.mm.vmas.iter() {
            if v.start % PAGE_SIZE != 0 || v.end % PAGE_SIZE != 0 || v.start >= v.end {
                return Err(format!("VMA {:#x}-{:#x} is malformed", v.start, v.end));
            }
            if v.start < prev_end {
                return Err(format!("VMA {:#x}-{:#x} overlaps its predecessor", v.start, v.end));
            }
            prev_end = v.end;
        }
        self.mm.vmas.check_gaps()
    }

    /// Page tables agree with mapcounts, RSS and the per-size gauges, in every mm; the mm ids
    /// of large folios fork shared agree with the mappings.
    fn check_mappings(&self) -> Result<(), String> {
        let n = self.zone.nr_pages() as usize;
        let mut pte_maps = vec![0i32; n];
        let mut pmd_maps: BTreeMap<u32, i32> = BTreeMap::new();
        // Mappings of tracked large folios by mm: (head, mm) -> mappings.
        let mut by_mm: BTreeMap<(u32, crate::MmId), i32> = BTreeMap::new();
        // Anon pages some private PTE or PMD maps writable: copy-on-write means nothing else
        // maps them.
        let mut writable: Vec<(u32, crate::MmId, u64)> = Vec::new();
        for id in self.mm_ids() {
            let mm = self.mm_ref(id);
            self.check_mm_mappings(mm, &mut pte_maps, &mut pmd_maps, &mut by_mm, &mut writable).map_err(|e| format!("mm {}: {e}", id.0))?;
        }
        for &(pfn, id, addr) in &writable {
            let head = self.folio_head(Pfn(pfn));
            let maps = pte_maps[pfn as usize] + pmd_maps.get(&head.0).copied().unwrap_or(0);
            if maps > 1 {
                return Err(format!("mm {}: {addr:#x} maps anon page {pfn:#x} writable, but it is mapped {maps} times (copy-on-write broken)", id.0));
            }
        }
        self.check_page_cache()?;
        for (&head, ids) in &self.folio_mm_ids {
            let (total, per) = ids.debug_counts();
            let mut want_total = -1;
            let mut mms = 0;
            for (&(h, _), &c) in by_mm.range((head.0, crate::MmId(0))..=(head.0, crate::MmId(u32::MAX))) {
                debug_assert_eq!(h, head.0);
                want_total += c;
                mms += (c > 0) as u32;
            }
            if total != want_total {
                return Err(format!("folio {:#x}: large mapcount {} (mm ids), {} mappings found", head.0, total + 1, want_total + 1));
            }
            // A slot may undercount its mm (rmap.h: mappings added while no slot was free stay
            // uncounted when one frees up), never overcount it.
            for (id, c) in per.into_iter().flatten() {
                let found = by_mm.get(&(head.0, id)).copied().unwrap_or(0);
                if c + 1 > found {
                    return Err(format!("folio {:#x}: mm {} holds {} mappings, its mm id slot says {}", head.0, id.0, found, c + 1));
                }
            }
            if mms > 1 && !ids.maybe_mapped_shared() {
                return Err(format!("folio {:#x} is mapped by {mms} mms but not marked maybe-mapped-shared", head.0));
            }
        }
        let mut nr_anon = [0i64; PMD_ORDER as usize + 1];
        let mut partially = [0i64; PMD_ORDER as usize + 1];
        for (pfn, p) in self.folio_heads() {
            let nr = 1usize << p.order;
            if p.flags & (pg::ANON | pg::SHMEM) != 0 {
                let mut mapped = 0u32;
                for i in 0..nr {
                    let want = pte_maps[pfn + i];
                    let got = self.zone.mem_map[pfn + i].mapcount;
                    if want != got {
                        return Err(format!("page {:#x}: {want} PTEs map it, mapcount says {got}", pfn + i));
                    }
                    mapped += (got > 0) as u32;
                }
                let nr_pages_mapped = self.zone.nr_pages_mapped(Pfn(pfn as u32));
                if mapped != nr_pages_mapped {
                    return Err(format!("folio {pfn:#x}: {mapped} pages mapped, nr_pages_mapped says {nr_pages_mapped}"));
                }
                let entire = pmd_maps.get(&(pfn as u32)).copied().unwrap_or(0);
                let entire_mapcount = self.zone.entire_mapcount(Pfn(pfn as u32));
                if entire != entire_mapcount as i32 {
                    return Err(format!("folio {pfn:#x}: {entire} PMDs map it, entire_mapcount says {entire_mapcount}"));
                }
                if entire == 0 && mapped == 0 && p.flags & pg::ANON != 0 {
                    return Err(format!("folio {pfn:#x} is allocated but mapped nowhere (leaked)"));
                }
                if p.flags & pg::ANON != 0 {
                    // A page mapped more than once was shared by fork: not PageAnonExclusive
                    // (on the page where PTEs map it, on the head where PMDs do).
                    for i in 0..nr {
                        let shared = self.zone.mem_map[pfn + i].flags & pg::ANON_SHARED != 0;
                        let head_shared = p.flags & pg::ANON_SHARED != 0;
                        if pte_maps[pfn + i] + entire > 1 && ((pte_maps[pfn + i] > 0 && !shared) || (entire > 0 && !head_shared)) {
                            return Err(format!("page {:#x} is mapped {} times but marked PageAnonExclusive", pfn + i, pte_maps[pfn + i] + entire));
                        }
                    }
                }
                if p.flags & pg::NR_ANON != 0 {
                    nr_anon[p.order as usize] += 1;
                }
                if p.flags & pg::PARTIALLY_MAPPED != 0 {
                    partially[p.order as usize] += 1;
                    if p.flags & pg::DEFERRED == 0 || !self.deferred.contains(&Pfn(pfn as u32)) {
                        return Err(format!("partially mapped folio {pfn:#x} is not on the deferred split queue"));
                    }
                }
            }
        }
        for o in 1..=PMD_ORDER {
            let ord = Order(o);
            if self.counters.mthp(ord, MthpStat::NrAnon) != nr_anon[o as usize] {
                return Err(format!(
                    "{} nr_anon is {}, {} such folios exist",
                    ord.sysfs_dir(),
                    self.counters.mthp(ord, MthpStat::NrAnon),
                    nr_anon[o as usize]
                ));
            }
            if self.counters.mthp(ord, MthpStat::NrAnonPartiallyMapped) != partially[o as usize] {
                return Err(format!("{} nr_anon_partially_mapped disagrees with the folios", ord.sysfs_dir()));
            }
        }
        Ok(())
    }

    /// One mm's page tables: its VMAs cover them, its RSS and page-table counters agree.
    fn check_mm_mappings(
        &self,
        mm: &crate::Mm,
        pte_maps: &mut [i32],
        pmd_maps: &mut BTreeMap<u32, i32>,
        by_mm: &mut BTreeMap<(u32, crate::MmId), i32>,
        writable: &mut Vec<(u32, crate::MmId, u64)>,
    ) -> Result<(), String> {
        let mut rss = 0u64;
        let mut shmem_rss = 0u64;
        let mut shmem_pmds = 0u64;
        let mut tables = 0u64;
        for (key, t) in mm.pt.puds() {
            tables += 1;
            let base = key << mm_types::PUD_SHIFT;
            for slot in 0..512u64 {
                let addr = base + slot * PMD_SIZE;
                let va = Vaddr(addr);
                let pmd = mm.pt.pmd(t, va);
                if !matches!(pmd, Pmd::None) {
                    if mm.vmas.intersecting(addr, addr + PMD_SIZE).is_empty() {
                        return Err(format!("page table at {addr:#x} outside every VMA"));
                    }
                }
                match pmd {
                    Pmd::None => {}
                    Pmd::Table(idx) => {
                        tables += 1;
                        for (i, e) in mm.pt.present_ptes(idx, 0..512) {
                            if e & PTE_PRESENT == 0 || e & PTE_ZERO != 0 {
                                continue;
                            }
                            let a = addr + i as u64 * PAGE_SIZE;
                            if mm.vmas.find(a).is_none() {
                                return Err(format!("PTE at {a:#x} outside every VMA"));
                            }
                            let pfn = pte_pfn(e);
                            let head = self.folio_head(pfn);
                            let hp = self.zone.mem_map[head.idx()];
                            if hp.flags & pg::SHMEM != 0 {
                                let (ino, start) = *self.shmem.owner.get(&head.0).ok_or(format!("PTE at {a:#x} maps a shmem folio that no page cache holds"))?;
                                let v = mm.vmas.find(a).expect("checked above");
                                if v.file != ino + 1 || v.linear_page_index(a) != start + (pfn.0 - head.0) as u64 {
                                    return Err(format!("PTE at {a:#x} maps the wrong file page"));
                                }
                                shmem_rss += 1;
                            } else if hp.flags & pg::ANON == 0 {
                                return Err(format!("PTE at {a:#x} maps a pfn that is neither anon nor shmem: {pfn:?}"));
                            } else {
                                // Anon folios may sit at any offset once mremap has moved them.
                                rss += 1;
                                if e & crate::pgtable::PTE_WRITE != 0 {
                                    writable.push((pfn.0, mm.id, a));
                                }
                            }
                            pte_maps[pfn.idx()] += 1;
                            if self.folio_mm_ids.contains_key(&head) {
                                *by_mm.entry((head.0, mm.id)).or_insert(0) += 1;
                            }
                        }
                    }
                    Pmd::Huge { pfn, .. } if self.page(pfn).flags & pg::SHMEM != 0 => {
                        if mm.pt.deposited(t, slot as usize) != NO_TABLE {
                            return Err(format!("file PMD at {addr:#x} has a deposited table (x86 deposits none)"));
                        }
                        if self.page(pfn).order != PMD_ORDER || !pfn.is_aligned(Order::PMD) {
                            return Err(format!("file PMD at {addr:#x} maps {pfn:?}, not a 2 MiB folio"));
                        }
                        // A PMD made by a fault or by a collapse (collapse_file put the folio in
                        // the page cache in place of the small ones) maps the file pages of its
                        // VMA, from a file-offset-aligned start.
                        let (ino, start) = *self.shmem.owner.get(&pfn.0).ok_or(format!("file PMD at {addr:#x} maps a folio that no page cache holds"))?;
                        match mm.vmas.find(addr) {
                            Some(v) if v.file == ino + 1 && v.linear_page_index(addr) == start && addr + PMD_SIZE <= v.end => {}
                            _ => return Err(format!("file PMD at {addr:#x} maps file {ino} page {start}, not what its VMA maps there")),
                        }
                        *pmd_maps.entry(pfn.0).or_insert(0) += 1;
                        shmem_rss += 512;
                        shmem_pmds += 1;
                    }
                    Pmd::Huge { .. } | Pmd::HugeZero if mm.pt.deposited(t, slot as usize) == NO_TABLE => {
                        return Err(format!("huge PMD at {addr:#x} has no deposited page table"));
                    }
                    Pmd::Huge { pfn, write, .. } => {
                        tables += 1;
                        if write {
                            writable.push((pfn.0, mm.id, addr));
                        }
                        let v = mm.vmas.find(addr);
                        if v.is_none_or(|v| v.start > addr || v.end < addr + PMD_SIZE) {
                            return Err(format!("huge PMD at {addr:#x} is not inside one VMA"));
                        }
                        if !pfn.is_aligned(Order::PMD) || self.page(pfn).order != PMD_ORDER {
                            return Err(format!("huge PMD at {addr:#x} maps {pfn:?}, not a 2 MiB folio"));
                        }
                        *pmd_maps.entry(pfn.0).or_insert(0) += 1;
                        if self.folio_mm_ids.contains_key(&pfn) {
                            *by_mm.entry((pfn.0, mm.id)).or_insert(0) += 1;
                        }
                        rss += 512;
                    }
                    Pmd::HugeZero => {
                        tables += 1;
                        if self.huge_zero.is_none() || !mm.flags.huge_zero_folio {
                            return Err("huge zero PMD without MMF_HUGE_ZERO_FOLIO".into());
                        }
                    }
                }
            }
        }
        if rss != mm.stats.anon_rss_pages {
            return Err(format!("page tables map {rss} anon pages, MM_ANONPAGES says {}", mm.stats.anon_rss_pages));
        }
        if shmem_rss != mm.stats.shmem_rss_pages || shmem_pmds != mm.stats.shmem_pmd_mapped {
            return Err(format!(
                "page tables map {shmem_rss} shmem pages in {shmem_pmds} PMDs, the counters say {} and {}",
                mm.stats.shmem_rss_pages, mm.stats.shmem_pmd_mapped
            ));
        }
        if tables != mm.stats.pgtable_pages {
            return Err(format!("{tables} page tables exist, {} page-table pages are allocated", mm.stats.pgtable_pages));
        }
        Ok(())
    }
}

impl Kernel {
    /// The invariants of [`Kernel::check_invariants`] restricted to what one step touched: the
    /// VMAs that meet `ranges` (and their predecessors), every PMD slot that covers them with
    /// its PTEs, and every folio mapped there, plus counters that are cheap to check globally.
    /// Its cost follows the size of `ranges`, not the machine's: callers run it after every
    /// step and [`Kernel::check_invariants`] now and then and at the end (`sim --check`).
    ///
    /// Locally, a page's mapcount can only be checked against the PTEs found (a page may be
    /// mapped elsewhere too), so it must be at least that; while the machine has one mm, an
    /// anon page is mapped at most once, by a PTE or by its folio's PMD, and exactly once where
    /// a PTE here maps it.
    pub fn check_invariants_in(&self, ranges: &[(u64, u64)]) -> Result<(), String> {
        self.check_counters()?;
        let mut pte_seen: BTreeMap<u32, i32> = BTreeMap::new();
        let mut pmd_seen: BTreeMap<u32, i32> = BTreeMap::new();
        let mut heads: BTreeMap<u32, ()> = BTreeMap::new();
        // Each PMD slot once, however many ranges cover it.
        let mut slots_done: std::collections::BTreeSet<u64> = std::collections::BTreeSet::new();
        for &(s, e) in ranges {
            let s = s.min(mm_types::TASK_SIZE) & !(PMD_SIZE - 1);
            let e = e.clamp(s, mm_types::TASK_SIZE + PAGE_SIZE).next_multiple_of(PMD_SIZE);
            if s >= e {
                continue;
            }
            let vmas = self.mm.vmas.intersecting(s, e);
            let mut prev_end = vmas.first().and_then(|f| self.mm.vmas.prev(f.start)).map_or(0, |v| v.end);
            for v in vmas {
                if v.start % PAGE_SIZE != 0 || v.end % PAGE_SIZE != 0 || v.start >= v.end {
                    return Err(format!("VMA {:#x}-{:#x} is malformed", v.start, v.end));
                }
                if v.start < prev_end {
                    return Err(format!("VMA {:#x}-{:#x} overlaps its predecessor", v.start, v.end));
                }
                prev_end = v.end;
            }
            // Only the 1 GiB blocks that have a PMD table.
            for (key, t) in self.mm.pt.puds_in(s / PUD_SIZE, (e - 1) / PUD_SIZE) {
                let gib = key * PUD_SIZE;
                let mut addr = s.max(gib);
                while addr < e.min(gib + PUD_SIZE) {
                    let slot = ((addr % PUD_SIZE) / PMD_SIZE) as usize;
                    if slots_done.insert(addr) {
                        self.check_pmd_slot(t, slot, addr, &mut pte_seen, &mut pmd_seen, &mut heads)?;
                    }
                    addr += PMD_SIZE;
                }
            }
        }
        for &head in heads.keys() {
            self.check_folio_locally(head, &pte_seen, pmd_seen.get(&head).copied().unwrap_or(0))?;
        }
        Ok(())
    }

    /// Counters whose consistency costs nothing to check.
    fn check_counters(&self) -> Result<(), String> {
        if self.zone.nr_free_pages() > self.zone.nr_pages() as u64 {
            return Err(format!("nr_free is {}, the zone has {} pages", self.zone.nr_free_pages(), self.zone.nr_pages()));
        }
        if self.mm.stats.anon_rss_pages > self.zone.nr_pages() as u64 {
            return Err(format!("MM_ANONPAGES is {}, the zone has {} pages", self.mm.stats.anon_rss_pages, self.zone.nr_pages()));
        }
        let mut partially_total = 0;
        for o in 1..=PMD_ORDER {
            let ord = Order(o);
            let nr = self.counters.mthp(ord, MthpStat::NrAnon);
            let partially = self.counters.mthp(ord, MthpStat::NrAnonPartiallyMapped);
            if nr < 0 || partially < 0 || partially > nr {
                return Err(format!("{} nr_anon {nr}, nr_anon_partially_mapped {partially}", ord.sysfs_dir()));
            }
            partially_total += partially;
        }
        if (self.deferred.len() as i64) < partially_total {
            return Err(format!(
                "{partially_total} partially mapped folios, {} on the deferred split queue",
                self.deferred.len()
            ));
        }
        Ok(())
    }

    /// One PMD slot as [`Kernel::check_invariants`] checks it; PTE and PMD mappings are counted
    /// into `pte_seen` (by page) and `pmd_seen` (by folio), the folios into `heads`.
    fn check_pmd_slot(
        &self,
        t: u32,
        slot: usize,
        addr: u64,
        pte_seen: &mut BTreeMap<u32, i32>,
        pmd_seen: &mut BTreeMap<u32, i32>,
        heads: &mut BTreeMap<u32, ()>,
    ) -> Result<(), String> {
        let va = Vaddr(addr);
        let pmd = self.mm.pt.pmd(t, va);
        if !matches!(pmd, Pmd::None) && self.mm.vmas.intersecting(addr, addr + PMD_SIZE).is_empty() {
            return Err(format!("page table at {addr:#x} outside every VMA"));
        }
        match pmd {
            Pmd::None => {}
            Pmd::Table(idx) => {
                for (i, e) in self.mm.pt.present_ptes(idx, 0..512) {
                    if e & PTE_PRESENT == 0 || e & PTE_ZERO != 0 {
                        continue;
                    }
                    let a = addr + i as u64 * PAGE_SIZE;
                    let Some(v) = self.mm.vmas.find(a) else {
                        return Err(format!("PTE at {a:#x} outside every VMA"));
                    };
                    let pfn = pte_pfn(e);
                    if pfn.idx() >= self.zone.mem_map.len() {
                        return Err(format!("PTE at {a:#x} maps {pfn:?}, beyond the machine's memory"));
                    }
                    let head = self.folio_head(pfn);
                    let hp = self.zone.mem_map[head.idx()];
                    if hp.flags & pg::SHMEM != 0 {
                        let (ino, start) = *self
                            .shmem
                            .owner
                            .get(&head.0)
                            .ok_or(format!("PTE at {a:#x} maps a shmem folio that no page cache holds"))?;
                        if v.file != ino + 1 || v.linear_page_index(a) != start + (pfn.0 - head.0) as u64 {
                            return Err(format!("PTE at {a:#x} maps the wrong file page"));
                        }
                    } else if hp.flags & pg::ANON == 0 {
                        return Err(format!("PTE at {a:#x} maps a pfn that is neither anon nor shmem: {pfn:?}"));
                    }
                    *pte_seen.entry(pfn.0).or_insert(0) += 1;
                    heads.insert(head.0, ());
                }
            }
            Pmd::Huge { .. } | Pmd::HugeZero if self.mm.pt.deposited(t, slot) == NO_TABLE && !self.is_shmem_pmd(pmd) => {
                return Err(format!("huge PMD at {addr:#x} has no deposited page table"));
            }
            Pmd::Huge { pfn, .. } => {
                if pfn.idx() >= self.zone.mem_map.len() || !pfn.is_aligned(Order::PMD) || self.page(pfn).order != PMD_ORDER {
                    return Err(format!("huge PMD at {addr:#x} maps {pfn:?}, not a 2 MiB folio"));
                }
                if self.page(pfn).flags & pg::SHMEM != 0 {
                    if self.mm.pt.deposited(t, slot) != NO_TABLE {
                        return Err(format!("file PMD at {addr:#x} has a deposited table (x86 deposits none)"));
                    }
                } else {
                    let v = self.mm.vmas.find(addr);
                    if v.is_none_or(|v| v.start > addr || v.end < addr + PMD_SIZE) {
                        return Err(format!("huge PMD at {addr:#x} is not inside one VMA"));
                    }
                }
                *pmd_seen.entry(pfn.0).or_insert(0) += 1;
                heads.insert(pfn.0, ());
            }
            Pmd::HugeZero => {
                if self.huge_zero.is_none() || !self.mm.flags.huge_zero_folio {
                    return Err("huge zero PMD without MMF_HUGE_ZERO_FOLIO".into());
                }
            }
        }
        Ok(())
    }

    fn is_shmem_pmd(&self, pmd: Pmd) -> bool {
        matches!(pmd, Pmd::Huge { pfn, .. } if pfn.idx() < self.zone.mem_map.len() && self.page(pfn).flags & pg::SHMEM != 0)
    }

    /// One folio that a checked range maps: its head and tails, mapcounts against the mappings
    /// found (`pte_seen` by page, `pmds` of the folio), nr_pages_mapped, the deferred queue.
    fn check_folio_locally(&self, head: u32, pte_seen: &BTreeMap<u32, i32>, pmds: i32) -> Result<(), String> {
        let p = self.zone.mem_map[head as usize];
        let nr = 1usize << p.order;
        if p.flags & pg::HEAD == 0 || head as usize % nr != 0 || head as usize + nr > self.zone.mem_map.len() {
            return Err(format!("folio {head:#x} is mapped but is not an aligned folio head (order {})", p.order));
        }
        if p.flags & (pg::ANON | pg::SHMEM) == 0 {
            return Err(format!("folio {head:#x} is mapped but is neither anon nor shmem"));
        }
        // While one mm has ever existed, an anon page is mapped at most once.
        let anon = p.flags & pg::ANON != 0 && self.parked.len() == 1;
        let entire = self.zone.entire_mapcount(Pfn(head)) as i32;
        if entire < pmds || (anon && entire > 1) {
            return Err(format!("folio {head:#x}: {pmds} PMDs here map it, entire_mapcount says {entire}"));
        }
        let mut mapped = 0u32;
        for i in 0..nr {
            let pfn = head as usize + i;
            let t = self.zone.mem_map[pfn];
            if i > 0 && (t.flags & pg::TAIL == 0 || t.order != p.order) {
                return Err(format!("tail {pfn:#x} of folio {head:#x} is not marked as its tail"));
            }
            let seen = pte_seen.get(&(pfn as u32)).copied().unwrap_or(0);
            let got = t.mapcount;
            if got < seen || got < 0 || (anon && (got + entire > 1 || (seen > 0 && got != seen))) {
                return Err(format!("page {pfn:#x}: {seen} PTEs here map it, mapcount says {got}"));
            }
            mapped += (got > 0) as u32;
        }
        let nr_mapped = self.zone.nr_pages_mapped(Pfn(head));
        if mapped != nr_mapped {
            return Err(format!("folio {head:#x}: {mapped} pages mapped, nr_pages_mapped says {nr_mapped}"));
        }
        if p.flags & pg::PARTIALLY_MAPPED != 0 && (p.flags & pg::DEFERRED == 0 || !self.deferred.contains(&Pfn(head))) {
            return Err(format!("partially mapped folio {head:#x} is not on the deferred split queue"));
        }
        Ok(())
    }
}

impl Kernel {
    /// Every shmem folio is in exactly one page cache, at an index aligned to its order, and
    /// the cache entries of an inode do not overlap.
    pub fn check_page_cache(&self) -> Result<(), String> {
        let mut seen = 0;
        for (ino, inode) in self.shmem.inodes.iter().enumerate() {
            let mut prev_end = 0u64;
            for (&start, f) in &inode.cache {
                let n = 1u64 << f.order;
                if start % n != 0 || start < prev_end {
                    return Err(format!("inode {ino}: folio at index {start} of order {} is misaligned or overlaps", f.order));
                }
                prev_end = start + n;
                let p = self.page(f.pfn);
                if p.flags & pg::SHMEM == 0 || p.flags & pg::HEAD == 0 || p.order != f.order {
                    return Err(format!("inode {ino}: cache entry {start} is not a shmem folio head of order {}", f.order));
                }
                if self.shmem.owner.get(&f.pfn.0) != Some(&(ino as u32, start)) {
                    return Err(format!("inode {ino}: folio {:?} at {start} is not in the reverse map", f.pfn));
                }
                seen += 1;
            }
        }
        if seen != self.shmem.owner.len() {
            return Err(format!("{} shmem folios in the reverse map, {seen} in page caches", self.shmem.owner.len()));
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Mapping {
    Pte(Pfn),
    ZeroPte,
    Pmd(Pfn),
    HugeZero,
}

impl Kernel {
    /// Break one page's mapcount on purpose: the torture canary checks that
    /// `check_invariants` notices.
    #[doc(hidden)]
    pub fn corrupt_mapcount_for_canary(&mut self, addr: u64) {
        let va = Vaddr(addr);
        let t = self.mm.pt.pmd_table_ro(va).expect("mapped");
        if let Pmd::Table(idx) = self.mm.pt.pmd(t, va) {
            let pfn = pte_pfn(self.mm.pt.pte(idx, va.pte_index()));
            self.zone.mem_map[pfn.idx()].mapcount += 1;
        }
    }
}

impl Kernel {
    /// `dump_vma` + `dump_page` for one address: its VMA and what maps it, for failure reports.
    pub fn dump_addr(&self, addr: u64) -> String {
        let va = Vaddr(addr);
        let vma = match self.mm.vmas.find(addr) {
            Some(v) => format!("vma {:#x}-{:#x} flags {:#x} file {} pgoff {}", v.start, v.end, v.flags, v.file, v.pgoff),
            None => "no vma".into(),
        };
        let entry = match self.mm.pt.pmd_table_ro(va) {
            None => "no PMD table".into(),
            Some(t) => match self.mm.pt.pmd(t, va) {
                Pmd::Table(idx) => format!("pte {:#x}", self.mm.pt.pte(idx, va.pte_index())),
                other => format!("pmd {other:?}"),
            },
        };
        format!("{addr:#x}: {vma}; {entry}")
    }
}
