//! The fault path at PTE level, folio allocation and rmap accounting, and zapping.
//!
//! Kernel sources (6.18): `mm/memory.c` (`handle_mm_fault`, `__handle_mm_fault`,
//! `handle_pte_fault`, `do_anonymous_page`, `alloc_anon_folio`, `pte_range_none`, `do_wp_page`,
//! `wp_page_copy`, `wp_can_reuse_anon_folio`, `zap_pte_range`, `zap_huge_pmd`,
//! `free_pgd_range`, and for shmem `do_read_fault`, `do_shared_fault`, `do_cow_fault`,
//! `wp_huge_pmd`, `finish_fault`, `do_fault_around`, `unmap_mapping_range`), `mm/rmap.c` (`folio_add_new_anon_rmap`, `__folio_remove_rmap`),
//! `mm/page_alloc.c` (`__free_pages_prepare`), `arch/x86/mm/fault.c: access_error`.

use mm_types::{Order, Orders, Pfn, Vaddr, PAGE_SHIFT, PAGE_SIZE, PMD_ORDER, PMD_SIZE, PUD_SHIFT, PUD_SIZE};
use thp_abi::MthpStat;

use crate::huge_memory::{thp_vma_suitable_order, thp_vma_suitable_orders, HugeFault, TvaType};
use crate::page_alloc::pg;
use crate::pgtable::{mk_pte, pte_pfn, Pmd, Pte, PTE_DIRTY, PTE_PRESENT, PTE_WRITE, PTE_YOUNG, PTE_ZERO, ZERO_PTE};
use crate::vma::{vm, Vma};
use crate::model::explain::{FaultDecision, Got};
use crate::model::fallbacks::FallbackReason;
use crate::{Access, Kernel};

/// What the PTE-level path decided, for fallback attribution.
struct PteFaultInfo {
    chosen: Order,
    write: bool,
    wp_zero: bool,
    /// `wp_page_copy` of a page fork shared.
    wp_copy: bool,
    range_not_none: Orders,
    /// `anon_beside_full`: orders refused because no neighbouring block was full.
    beside_not_full: Orders,
    alloc_failed: Orders,
}

impl PteFaultInfo {
    fn new(write: bool) -> Self {
        PteFaultInfo { chosen: Order::BASE, write, wp_zero: false, wp_copy: false, range_not_none: Orders::NONE, beside_not_full: Orders::NONE, alloc_failed: Orders::NONE }
    }
}

/// `anon_beside_full` (this machine kind's kernel build, not upstream): is the naturally aligned
/// block of order `o` just below or just above the one around `va` wholly inside the VMA and the
/// same PTE table, with every PTE populated (a page or the zero page)? Measured on the live
/// kernel (docs/kernel-notes.md 15); written from the measurements, no source is public.
fn neighbour_full(vma: &Vma, va: Vaddr, o: Order, pt: &crate::pgtable::PageTables, idx: u32) -> bool {
    let size = o.nr_pages() as u64 * PAGE_SIZE;
    let start = va.align_down(o).0;
    let table = start & !((1u64 << (PAGE_SHIFT + 9)) - 1);
    let full = |s: u64| {
        s >= vma.start && s + size <= vma.end && s >= table && s + size <= table + (PAGE_SIZE << 9) && {
            let first = ((s - table) / PAGE_SIZE) as usize;
            (first..first + o.nr_pages() as usize).all(|i| pt.pte(idx, i) != 0)
        }
    };
    (start >= size && full(start - size)) || full(start + size)
}

impl Kernel {
    // ---------------------------------------------------------------- folios and rmap

    /// Set up `mem_map` for a freshly allocated block (`prep_new_page`, `prep_compound_page`).
    #[inline]
    pub(crate) fn prep_folio(&mut self, pfn: Pfn, order: Order, extra: u16) {
        if order.0 == 0 {
            let p = &mut self.zone.mem_map[pfn.idx()];
            p.flags = pg::HEAD | extra;
            p.order = 0;
            return;
        }
        let n = order.nr_pages() as usize;
        *self.zone.folio_meta_mut_unchecked(pfn) = Default::default();
        let pages = &mut self.zone.mem_map[pfn.idx()..pfn.idx() + n];
        pages[0].flags = pg::HEAD | extra;
        pages[0].order = order.0;
        for p in &mut pages[1..] {
            p.flags = pg::TAIL;
            p.order = order.0;
        }
    }

    /// Allocate an order-0 page (anon if `anon`) from the free lists and charge it to the memcg
    /// with GFP_HIGHUSER_MOVABLE ([`Self::alloc_folio_gfp`]).
    pub(crate) fn alloc_folio(&mut self, order: Order, anon: bool) -> Option<Pfn> {
        debug_assert_eq!(order.0, 0, "a large folio's allocation names its GFP: alloc_folio_gfp");
        self.alloc_folio_gfp(order, anon, crate::page_alloc::Gfp::HIGHUSER_MOVABLE)
    }

    /// Allocate a folio of `order` (anon if `anon`) from the free lists (no slow path) and
    /// charge it with `gfp` ([`Self::charge_new_folio`]). `None` when the allocation or the
    /// charge failed (`last_charge_failed` says which).
    pub(crate) fn alloc_folio_gfp(&mut self, order: Order, anon: bool, gfp: crate::page_alloc::Gfp) -> Option<Pfn> {
        self.last_charge_failed = false;
        let pfn = self.zone.alloc_pages(order)?;
        self.charge_new_folio(pfn, order, if anon { pg::ANON } else { 0 }, gfp)
    }

    /// Allocate a large anon folio of `order` with `gfp` (a THP or mTHP fault, a collapse): the
    /// slow path may compact (`crate::page_alloc::Gfp`), and the charge uses the same `gfp`
    /// (`mem_cgroup_charge(folio, mm, gfp)`).
    pub(crate) fn alloc_anon_folio_gfp(&mut self, order: Order, gfp: crate::page_alloc::Gfp) -> Option<Pfn> {
        self.last_charge_failed = false;
        let pfn = self.alloc_pages_gfp(order, gfp)?;
        self.charge_new_folio(pfn, order, pg::ANON, gfp)
    }

    /// A new folio's `prep_new_page` and `mem_cgroup_charge` with `gfp`; wakes kswapd below the
    /// low watermark when there is swap. A failed charge frees the folio and sets
    /// `last_charge_failed`.
    fn charge_new_folio(&mut self, pfn: Pfn, order: Order, flags: u16, gfp: crate::page_alloc::Gfp) -> Option<Pfn> {
        self.prep_folio(pfn, order, flags);
        if self.memcg.max.is_none() {
            self.memcg.usage += order.nr_pages() as u64;
        } else if self.try_charge_memcg(order, gfp).is_err() {
            self.zone.free_pages(pfn, order);
            self.last_charge_failed = true;
            return None;
        }
        if self.swap.is_some() {
            self.wakeup_kswapd();
        }
        Some(pfn)
    }

    /// `vma_thp_gfp_mask` of `vma` under the current `defrag`.
    pub(crate) fn vma_thp_gfp_mask(&self, vma: &Vma) -> crate::page_alloc::Gfp {
        crate::page_alloc::vma_thp_gfp_mask(self.settings.defrag, vma.flags & vm::HUGEPAGE != 0)
    }

    /// `folio_add_new_anon_rmap`: a large anon folio counts in `nr_anon` from its first map.
    pub(crate) fn folio_add_new_anon_rmap(&mut self, folio: Pfn) {
        let order = self.order_of_head(folio);
        if order.0 > 0 {
            self.counters.mod_mthp(order, MthpStat::NrAnon, 1);
            self.note_nr_anon(order);
            self.zone.mem_map[folio.idx()].flags |= pg::NR_ANON;
        }
    }

    /// Free a folio whose last mapping went away (`folio_put` → `__free_pages_prepare`).
    pub(crate) fn free_folio(&mut self, folio: Pfn) {
        let order = self.order_of_head(folio);
        let flags = self.zone.mem_map[folio.idx()].flags;
        if order.0 > 0 {
            self.unqueue_deferred_split(folio);
            self.folio_mm_ids.remove(&folio);
            // A folio that never got its first rmap was never counted in nr_anon.
            if flags & pg::NR_ANON != 0 {
                self.counters.mod_mthp(order, MthpStat::NrAnon, -1);
            }
        }
        if flags & pg::LRU != 0 {
            self.lru_del(folio);
        }
        self.mem_cgroup_uncharge(order);
        self.folios_freed[order.0 as usize] += 1;
        self.zone.free_pages(folio, order);
    }

    /// Add PTE mappings of `nr` pages starting at `page` (`folio_add_anon_rmap_ptes`).
    pub(crate) fn rmap_add_ptes(&mut self, head: Pfn, page: Pfn, nr: u32) {
        let mut newly = 0;
        for p in &mut self.zone.mem_map[page.idx()..page.idx() + nr as usize] {
            p.mapcount += 1;
            if p.mapcount == 1 {
                newly += 1;
            }
        }
        if self.zone.mem_map[head.idx()].order > 0 {
            self.zone.folio_meta_mut(head).mapped += newly;
            self.large_mapcount_add(head, nr as i32);
        }
    }

    /// `__folio_remove_rmap` at PTE level for `nr` pages of one folio, unmapped in one batch.
    /// Frees the folio when nothing maps it any more; queues a partially mapped one.
    pub(crate) fn folio_remove_rmap_ptes(&mut self, head: Pfn, page: Pfn, nr: u32) {
        let mut last = 0;
        for p in &mut self.zone.mem_map[page.idx()..page.idx() + nr as usize] {
            p.mapcount -= 1;
            // pg::TOUCHED stays: it tells what the page holds, not who maps it (another mm
            // after fork, the page cache, or a split or collapse that reads it after the
            // unmap); prep_folio clears it when the frame is handed out again.
            if p.mapcount == 0 {
                last += 1;
            }
        }
        let h = self.zone.mem_map[head.idx()];
        let large = h.order > 0;
        if large {
            self.zone.folio_meta_mut(head).mapped -= last;
            self.large_mapcount_sub(head, nr as i32);
        }
        let (entire, mapped, flags) = (self.zone.entire_mapcount(head), self.zone.nr_pages_mapped(head), h.flags);
        if flags & pg::SHMEM != 0 {
            // Page-cache folios stay in the cache; only anon folios are queued for deferred split.
            return;
        }
        if entire == 0 && mapped == 0 {
            self.free_folio(head);
            return;
        }
        let partially_mapped = large && last > 0 && entire == 0 && mapped > 0;
        if partially_mapped && flags & pg::ANON != 0 && flags & pg::PARTIALLY_MAPPED == 0 {
            self.deferred_split_folio(head, true);
        }
    }

    /// Head of the folio containing `pfn`.
    #[inline]
    pub(crate) fn folio_head(&self, pfn: Pfn) -> Pfn {
        let order = self.zone.mem_map[pfn.idx()].order;
        Pfn(pfn.0 & !((1u32 << order) - 1))
    }

    #[inline]
    pub(crate) fn touch_page(&mut self, pfn: Pfn) {
        self.zone.mem_map[pfn.idx()].flags |= pg::TOUCHED;
    }

    /// A page-table page (`pte_alloc_one`, `pmd_alloc_one`).
    pub(crate) fn alloc_pgtable(&mut self) -> Option<u32> {
        let frame = self.alloc_pgtable_frame()?;
        Some(self.mm.pt.new_pte_table(frame))
    }

    pub(crate) fn alloc_pgtable_frame(&mut self) -> Option<Pfn> {
        let frame = self.zone.alloc_pages(Order::BASE)?;
        self.prep_folio(frame, Order::BASE, pg::PGTABLE);
        self.mm.stats.pgtable_pages += 1;
        Some(frame)
    }

    pub(crate) fn free_pgtable(&mut self, table: u32) {
        let frame = self.mm.pt.free_pte_table(table);
        self.free_pgtable_frame(frame);
    }

    fn free_pgtable_frame(&mut self, frame: Pfn) {
        self.mm.stats.pgtable_pages -= 1;
        self.zone.free_pages(frame, Order::BASE);
    }

    // ---------------------------------------------------------------- the access path

    /// One user access at `addr`: a hit, or `handle_mm_fault`.
    #[inline]
    pub fn access(&mut self, addr: u64, write: bool) -> Access {
        let vma = match self.mm.vma_cache {
            Some(v) if v.contains(addr) => v,
            _ => match self.mm.vmas.find(addr) {
                Some(v) => {
                    self.mm.vma_cache = Some(v);
                    v
                }
                None => return Access::Segv,
            },
        };
        if vma.flags & vm::HUGETLB != 0 {
            return self.hugetlb_fault(vma, addr, write);
        }
        // access_error(): writes need VM_WRITE, reads any of read/write/exec.
        if (write && vma.flags & vm::WRITE == 0) || vma.flags & vm::ACCESS == 0 || vma.flags & vm::SPECIAL != 0 {
            return Access::Segv;
        }
        let va = Vaddr(addr);
        let table = self.mm.pt.pmd_table(va);
        // What the walk saw, handed to the fault so that it does not walk again.
        let (mut seen_pmd, mut seen_pte) = (Pmd::None, 0);
        if let Some(t) = table {
            seen_pmd = self.mm.pt.pmd(t, va);
            match seen_pmd {
                Pmd::Table(idx) => {
                    let e = self.mm.pt.pte(idx, va.pte_index());
                    seen_pte = e;
                    if e & PTE_PRESENT != 0 && (!write || e & PTE_WRITE != 0) {
                        self.mm.pt.set_pte(idx, va.pte_index(), e | PTE_YOUNG | if write { PTE_DIRTY } else { 0 });
                        if e & PTE_ZERO == 0 {
                            self.touch_page(pte_pfn(e));
                        }
                        self.mm.stats.hits += 1;
                        return Access::Hit;
                    }
                }
                Pmd::Huge { pfn, write: w, young, dirty } if !write || w => {
                    // The walker sets the accessed (and on a write the dirty) bit of the PMD.
                    if !young || (write && !dirty) {
                        self.mm.pt.set_pmd(t, va, Pmd::Huge { pfn, write: w, young: true, dirty: dirty || write });
                    }
                    self.touch_page(pfn.add(va.pte_index() as u32));
                    self.mm.stats.hits += 1;
                    return Access::Hit;
                }
                Pmd::HugeZero if !write => {
                    self.mm.stats.hits += 1;
                    return Access::Hit;
                }
                _ => {}
            }
        }
        self.mm.stats.minflt += 1;
        if self.swap.is_none() {
            return self.handle_mm_fault(vma, va, write, table, seen_pmd, seen_pte);
        }
        // Reclaim that the fault's allocation runs leaves the faulting PMD range alone (the
        // kernel holds the folios the fault works on).
        let start = va.align_down(Order::PMD).0;
        self.reclaim_guard = Some((self.mm.id.0, start, start + PMD_SIZE));
        let r = self.handle_mm_fault(vma, va, write, table, seen_pmd, seen_pte);
        self.reclaim_guard = None;
        r
    }

    /// `n` accesses at `addr`, `addr + stride`, … (a touch in address order): exactly what `n`
    /// calls of [`Kernel::access`] do, in state, counters and outcome, faster. The accesses that
    /// fall in one PTE table share its walk, and two cases are taken inline: a hit on a present
    /// PTE that allows the access, and a write fault on a none PTE of a writable anonymous VMA
    /// when no THP size is enabled anywhere (`do_anonymous_page` then always maps one order-0
    /// page, and `attribute_fallbacks` has nothing to record). Everything else goes through
    /// [`Kernel::access`]. Returns the accesses done and the outcome of the last; a run stops at
    /// the first access that is neither a hit nor a fault.
    pub fn access_run(&mut self, addr: u64, n: u64, stride: u64, write: bool) -> (u64, Access) {
        self.access_run_faults(addr, n, stride, write, u64::MAX)
    }

    /// [`Kernel::access_run`] that also stops right after the access that made its
    /// `max_faults`-th fault (counting every access whose outcome is a fault; at least one
    /// access runs): a caller that prices each fault runs a long touch in pieces whose work
    /// it can bound (`sim::driver`, the simulated clock).
    pub fn access_run_faults(&mut self, addr: u64, n: u64, stride: u64, write: bool, max_faults: u64) -> (u64, Access) {
        let mut done = 0;
        let mut last = Access::Hit;
        let mut faults = 0u64;
        // The inline order-0 faults bypass alloc_anon_base: not with the contiguous page hint.
        let order0_only = self.masks.possible().is_empty() && self.contig.is_none();
        while done < n {
            let a = addr + done * stride;
            last = self.access(a, write);
            done += 1;
            if !matches!(last, Access::Hit | Access::Fault) {
                return (done, last);
            }
            if matches!(last, Access::Fault) {
                faults += 1;
                if faults >= max_faults {
                    return (done, last);
                }
            }
            // access() left the VMA in the cache and, for anything mapped, a PTE table or a
            // huge PMD at `a`. Continue inline while the next accesses stay in this VMA and
            // this PTE table.
            let Some(vma) = self.mm.vma_cache else { continue };
            let va = Vaddr(a);
            let Some(t) = self.mm.pt.pmd_table(va) else { continue };
            let Pmd::Table(idx) = self.mm.pt.pmd(t, va) else { continue };
            let stop = (va.align_down(Order::PMD).0 + PMD_SIZE).min(vma.end);
            let inline_faults = order0_only
                && write
                && vma.file == 0
                && vma.anon_vma != 0
                && vma.flags & vm::WRITE != 0
                && vma.flags & (vm::SPECIAL | vm::UFFD_MISSING) == 0
                && self.memcg.max.is_none()
                && self.swap.is_none();
            let bits = PTE_WRITE | PTE_DIRTY | PTE_YOUNG;
            while done < n {
                let a = addr + done * stride;
                if a >= stop {
                    break;
                }
                let i = Vaddr(a).pte_index();
                let e = self.mm.pt.pte(idx, i);
                if e & PTE_PRESENT != 0 && (!write || e & PTE_WRITE != 0) {
                    self.mm.pt.set_pte(idx, i, e | PTE_YOUNG | if write { PTE_DIRTY } else { 0 });
                    if e & PTE_ZERO == 0 {
                        self.touch_page(pte_pfn(e));
                    }
                    self.mm.stats.hits += 1;
                    last = Access::Hit;
                } else if e == 0 && inline_faults {
                    // do_anonymous_page of one page, as in handle_pte_fault_at.
                    let Some(page) = self.zone.alloc_pages(Order::BASE) else { break };
                    self.prep_folio(page, Order::BASE, pg::ANON);
                    self.mm.stats.minflt += 1;
                    self.mm.pt.set_pte(idx, i, mk_pte(page, bits));
                    self.mm.stats.anon_rss_pages += 1;
                    let p = &mut self.zone.mem_map[page.idx()];
                    p.mapcount = 1;
                    p.flags |= pg::TOUCHED;
                    last = Access::Fault;
                    faults += 1;
                    if faults >= max_faults {
                        return (done + 1, last);
                    }
                } else {
                    break;
                }
                done += 1;
            }
        }
        (done, last)
    }

    /// `__handle_mm_fault` for an anonymous private VMA; `table` is the PMD table the access
    /// walk found, if any, and `seen_pmd`/`seen_pte` the entries it read there (`Pmd::None`
    /// and 0 where it found no table).
    fn handle_mm_fault(&mut self, mut vma: Vma, va: Vaddr, write: bool, table: Option<u32>, seen_pmd: Pmd, seen_pte: Pte) -> Access {
        let t = match table {
            Some(t) => t,
            None => {
                let Some(frame) = self.alloc_pgtable_frame() else { return Access::Oom };
                self.mm.pt.install_pmd_table(va, frame)
            }
        };
        if let Some(ino) = vma.inode() {
            return self.do_shmem_fault(&vma, va, write, t, ino);
        }
        let mut pmd_reason = None;
        // With no size enabled anywhere, no VMA can get a THP at fault: skip the order checks.
        let thp_possible = !self.masks.possible().is_empty();
        match seen_pmd {
            Pmd::None if !thp_possible || self.pmd_range_has_swap(va) => {}
            Pmd::None => {
                let mut pmd = self.thp_vma_allowable_orders(&vma, TvaType::PageFault, Orders::single(Order::PMD));
                if self.policy.has_fault_hook() {
                    // A policy's fault-time decision (crates/policy); 6.18's has none.
                    pmd = self.policy.fault_orders(va.0, pmd);
                }
                if pmd.is_empty() {
                    pmd_reason = Some(None);
                } else {
                    match self.do_huge_pmd_anonymous_page(&mut vma, va, write, t) {
                        HugeFault::Done => {
                            if self.mm.stats.explain.is_some() {
                                self.explain_pmd_fault(va, write, t);
                            }
                            return Access::Fault;
                        }
                        HugeFault::Oom => return Access::Oom,
                        HugeFault::Userfault => return Access::Userfault,
                        HugeFault::Fallback(r) => pmd_reason = Some(Some(r)),
                    }
                }
            }
            Pmd::Huge { .. } | Pmd::HugeZero => {
                // Only a write to a write-protected huge PMD faults here.
                match self.do_huge_pmd_wp_page(&vma, va, t) {
                    HugeFault::Done => return Access::Fault,
                    HugeFault::Oom => return Access::Oom,
                    HugeFault::Userfault => return Access::Userfault,
                    HugeFault::Fallback(r) => pmd_reason = Some(Some(r)),
                }
            }
            // The walk's PTE is still current: nothing ran between it and here.
            Pmd::Table(idx) => return self.handle_pte_fault_at(vma, va, write, idx, seen_pte, None),
        }
        self.handle_pte_fault(vma, va, write, t, pmd_reason)
    }

    /// `handle_pte_fault` → `do_anonymous_page` / `do_wp_page`.
    fn handle_pte_fault(&mut self, vma: Vma, va: Vaddr, write: bool, t: u32, pmd_reason: Option<Option<FallbackReason>>) -> Access {
        let idx = match self.mm.pt.pmd(t, va) {
            Pmd::Table(i) => i,
            Pmd::None => {
                let Some(i) = self.alloc_pgtable() else { return Access::Oom };
                self.mm.pt.set_pmd(t, va, Pmd::Table(i));
                i
            }
            _ => unreachable!("huge PMD after fallback"),
        };
        let e = self.mm.pt.pte(idx, va.pte_index());
        self.handle_pte_fault_at(vma, va, write, idx, e, pmd_reason)
    }

    /// `handle_pte_fault` once the PTE table `idx` and the entry `e` are known.
    #[inline]
    fn handle_pte_fault_at(&mut self, mut vma: Vma, va: Vaddr, write: bool, idx: u32, e: Pte, pmd_reason: Option<Option<FallbackReason>>) -> Access {
        let mut info = PteFaultInfo::new(write);
        let result = if e == 0 && !self.mm.pt.swap.is_empty() && self.mm.pt.swap.contains_key(&(va.0 / PAGE_SIZE)) {
            return self.do_swap_page(&vma, va);
        } else if e == 0 {
            self.do_anonymous_page(&mut vma, va, write, idx, &mut info)
        } else if write && e & PTE_WRITE == 0 {
            if e & PTE_ZERO != 0 {
                info.wp_zero = true;
                self.wp_page_copy(&mut vma, va, idx, None)
            } else {
                self.do_wp_page(&mut vma, va, idx, e, &mut info)
            }
        } else {
            // Spurious: already mapped as needed.
            Access::Fault
        };
        if result == Access::Fault {
            self.attribute_fallbacks(&vma, va, &info, pmd_reason);
        }
        result
    }

    /// `do_anonymous_page`.
    fn do_anonymous_page(&mut self, vma: &mut Vma, va: Vaddr, write: bool, idx: u32, info: &mut PteFaultInfo) -> Access {
        if vma.flags & vm::UFFD_MISSING != 0 {
            return self.do_anonymous_userfault(vma, write);
        }
        if !write {
            self.mm.pt.set_pte(idx, va.pte_index(), ZERO_PTE | PTE_YOUNG);
            self.mm.stats.zero_page_faults += 1;
            return Access::Fault;
        }
        if vma.anon_vma == 0 {
            self.anon_vma_prepare(vma);
        }
        let folio = if self.masks.possible().is_empty() {
            self.alloc_anon_base(vma, va, idx)
        } else {
            self.alloc_anon_folio(vma, va, idx, info)
        };
        let Some(folio) = folio else { return Access::Oom };
        let order = self.order_of_head(folio);
        if order.0 == 0 {
            // One page: the same steps as below, without the loops.
            let bits = if vma.flags & vm::WRITE != 0 { PTE_WRITE | PTE_DIRTY } else { 0 };
            self.mm.pt.set_pte(idx, va.pte_index(), mk_pte(folio, bits | PTE_YOUNG));
            self.mm.stats.anon_rss_pages += 1;
            let p = &mut self.zone.mem_map[folio.idx()];
            p.mapcount = 1;
            p.flags |= pg::TOUCHED;
            self.lru_add(folio, va);
            return Access::Fault;
        }
        let nr = order.nr_pages();
        let base = va.align_down(order);
        let bits = if vma.flags & vm::WRITE != 0 { PTE_WRITE | PTE_DIRTY } else { 0 };
        let first = base.pte_index();
        for i in 0..nr as usize {
            self.mm.pt.set_pte(idx, first + i, mk_pte(folio.add(i as u32), bits));
        }
        self.mm.pt.pte_mkbits(idx, va.pte_index(), PTE_YOUNG);
        self.mm.stats.anon_rss_pages += nr as u64;
        if order.0 > 0 {
            self.counters.count_mthp(order, MthpStat::AnonFaultAlloc);
        }
        self.folio_add_new_anon_rmap(folio);
        self.rmap_add_ptes(folio, folio, nr);
        self.touch_page(folio.add((va.pte_index() - first) as u32));
        self.lru_add(folio, base);
        info.chosen = order;
        Access::Fault
    }

    /// `do_anonymous_page` on a VMA registered with UFFDIO_REGISTER_MODE_MISSING: a read goes
    /// to `handle_userfault` before the zero page is mapped; a write prepares the anon_vma,
    /// allocates its order-0 page, finds the VMA registered under the PTE lock and frees the
    /// page again (the pcp list takes it back to where it came from), then hands the fault over.
    #[cold]
    fn do_anonymous_userfault(&mut self, vma: &mut Vma, write: bool) -> Access {
        if write {
            if vma.anon_vma == 0 {
                self.anon_vma_prepare(vma);
            }
            let Some(page) = self.alloc_folio(Order::BASE, true) else { return Access::Oom };
            self.free_folio(page);
        }
        Access::Userfault
    }

    /// `alloc_anon_folio`: the highest allowed, suitable order whose aligned PTE range is all
    /// none; on allocation failure the next order down; finally order 0.
    fn alloc_anon_folio(&mut self, vma: &Vma, va: Vaddr, idx: u32, info: &mut PteFaultInfo) -> Option<Pfn> {
        // Per-page fault fidelity for a userfaultfd: order 0, before any size is looked at.
        if vma.flags & vm::UFFD_ARMED != 0 {
            return self.alloc_folio(Order::BASE, true);
        }
        let mut orders = self.thp_vma_allowable_orders(vma, TvaType::PageFault, Orders::below(Order::PMD));
        orders = thp_vma_suitable_orders(vma, va.0, orders);
        if self.policy.has_fault_hook() {
            // A policy's fault-time decision (crates/policy); 6.18's has none.
            orders = self.policy.fault_orders(va.0, orders);
        }
        if !orders.is_empty() {
            let beside_full = self.settings.anon_beside_full == Some(true);
            let mut order = orders.highest();
            while let Some(o) = order {
                let first = va.align_down(o).pte_index();
                let range_start = va.align_down(o).0;
                if self.mm.pt.ptes_none(idx, first..first + o.nr_pages() as usize) && !self.swap_in_range(range_start, range_start + o.nr_pages() as u64 * PAGE_SIZE) {
                    if !beside_full || neighbour_full(vma, va, o, &self.mm.pt, idx) {
                        break;
                    }
                    info.beside_not_full = info.beside_not_full.with(o);
                } else {
                    info.range_not_none = info.range_not_none.with(o);
                }
                order = orders.next_below(o);
            }
            let gfp = self.vma_thp_gfp_mask(vma);
            while let Some(o) = order {
                if let Some(f) = self.alloc_anon_folio_gfp(o, gfp) {
                    return Some(f);
                }
                if self.last_charge_failed {
                    self.counters.count_mthp(o, MthpStat::AnonFaultFallbackCharge);
                }
                self.counters.count_mthp(o, MthpStat::AnonFaultFallback);
                info.alloc_failed = info.alloc_failed.with(o);
                order = orders.next_below(o);
            }
        }
        self.alloc_anon_base(vma, va, idx)
    }

    /// `wp_page_copy`: a fresh order-0 page replaces the PTE. `old` is the anon page it copies
    /// (head, page), which loses this mapping; `None` for the zero page or a file page (whose
    /// mapping the caller removes), whose copy adds to MM_ANONPAGES.
    pub(crate) fn wp_page_copy(&mut self, vma: &mut Vma, va: Vaddr, idx: u32, old: Option<(Pfn, Pfn)>) -> Access {
        self.anon_vma_prepare(vma);
        let Some(page) = self.alloc_folio(Order::BASE, true) else { return Access::Oom };
        self.mm.pt.set_pte(idx, va.pte_index(), mk_pte(page, PTE_WRITE | PTE_DIRTY | PTE_YOUNG));
        // ptep_clear_flush of the old entry.
        self.flush_tlb_range(va.0 & !(PAGE_SIZE - 1), (va.0 & !(PAGE_SIZE - 1)) + PAGE_SIZE);
        self.rmap_add_ptes(page, page, 1);
        self.touch_page(page);
        self.lru_add(page, va);
        match old {
            Some((head, old_page)) => {
                self.folio_remove_rmap_ptes(head, old_page, 1);
                self.mm.stats.cow_copied += 1;
            }
            None => self.mm.stats.anon_rss_pages += 1,
        }
        Access::Fault
    }

    /// `do_wp_page` on a present anon page: reuse it when it is `PageAnonExclusive` or
    /// `wp_can_reuse_anon_folio` says this mm holds every mapping of its folio; copy one page
    /// otherwise.
    fn do_wp_page(&mut self, vma: &mut Vma, va: Vaddr, idx: u32, e: Pte, info: &mut PteFaultInfo) -> Access {
        let page = pte_pfn(e);
        let head = self.folio_head(page);
        if self.zone.mem_map[page.idx()].flags & pg::ANON_SHARED == 0 || self.wp_can_reuse_anon_folio(head) {
            // wp_page_reuse (SetPageAnonExclusive when it was not).
            self.zone.mem_map[page.idx()].flags &= !pg::ANON_SHARED;
            self.mm.pt.set_pte(idx, va.pte_index(), e | PTE_WRITE | PTE_DIRTY | PTE_YOUNG);
            self.touch_page(page);
            self.mm.stats.cow_reused += 1;
            return Access::Fault;
        }
        info.wp_copy = true;
        self.wp_page_copy(vma, va, idx, Some((head, page)))
    }

    /// Record, for every size the settings enable above the one this fault got, why not.
    fn attribute_fallbacks(&mut self, vma: &Vma, va: Vaddr, info: &PteFaultInfo, pmd_reason: Option<Option<FallbackReason>>) {
        if self.mm.stats.explain.as_ref().is_some_and(|x| x.wants(va, info.chosen)) {
            self.explain_pte_fault(vma, va, info, pmd_reason);
        }
        let possible = self.masks.possible();
        if possible.0 >> (info.chosen.0 + 1) == 0 {
            return;
        }
        let sysfs = self.sysfs_orders(vma);
        for o in possible.iter_desc().filter(|o| *o > info.chosen) {
            if let Some(reason) = self.fallback_reason(vma, va, info, pmd_reason, sysfs, o) {
                self.mm.stats.fallback(o.0, reason);
            }
        }
    }

    /// Why a fault that got `info.chosen` did not get the larger order `o`, checked in the order
    /// the kernel checks (the first that applies); None when a larger sibling order was used.
    fn fallback_reason(&self, vma: &Vma, va: Vaddr, info: &PteFaultInfo, pmd_reason: Option<Option<FallbackReason>>, sysfs: Orders, o: Order) -> Option<FallbackReason> {
        // alloc_anon_folio looks at a userfaultfd's registration before any size; a copy on
        // write (of the zero page, of a page fork shared) never reaches it.
        Some(if o != Order::PMD && vma.flags & vm::UFFD_ARMED != 0 && info.write && !info.wp_zero && !info.wp_copy {
            FallbackReason::UserfaultfdArmed
        } else if self.mm.flags.disable_thp_completely || (self.mm.flags.disable_thp_except_advised && vma.flags & vm::HUGEPAGE == 0) {
            FallbackReason::PrctlDisabled
        } else if vma.flags & vm::NOHUGEPAGE != 0 {
            FallbackReason::VmaNohugepage
        } else if !sysfs.contains(o) {
            FallbackReason::NotMadvised
        } else if !thp_vma_suitable_order(vma, va.0, o) {
            FallbackReason::VmaRange
        } else if o == Order::PMD {
            match pmd_reason {
                Some(Some(r)) => r,
                _ => FallbackReason::PteTableExists,
            }
        } else if !info.write {
            FallbackReason::ReadFault
        } else if info.wp_zero {
            FallbackReason::ZeroPageCow
        } else if info.wp_copy {
            FallbackReason::ForkCow
        } else if info.range_not_none.contains(o) {
            FallbackReason::PteRangePopulated
        } else if info.beside_not_full.contains(o) {
            FallbackReason::BesideNotFull
        } else if info.alloc_failed.contains(o) {
            FallbackReason::AllocFailed
        } else {
            return None;
        })
    }

    /// `--explain`: keep this PTE-level fault's decision (crate::model::explain).
    #[cold]
    fn explain_pte_fault(&mut self, vma: &Vma, va: Vaddr, info: &PteFaultInfo, pmd_reason: Option<Option<FallbackReason>>) {
        let sysfs = self.sysfs_orders(vma);
        let refused = self
            .masks
            .possible()
            .iter_desc()
            .filter(|o| *o > info.chosen)
            .filter_map(|o| self.fallback_reason(vma, va, info, pmd_reason, sysfs, o).map(|r| (o, r)))
            .collect();
        let got = if !info.write { Got::ZeroPage } else { Got::Folio(info.chosen) };
        if let Some(x) = self.mm.stats.explain.as_mut() {
            x.push(FaultDecision { addr: va.0, write: info.write, got, refused });
        }
    }

    /// `--explain`: a fault that the PMD path served (a PMD THP or the huge zero folio).
    #[cold]
    fn explain_pmd_fault(&mut self, va: Vaddr, write: bool, t: u32) {
        let got = if matches!(self.mm.pt.pmd(t, va), Pmd::HugeZero) { Got::HugeZeroPage } else { Got::Folio(Order::PMD) };
        if let Some(x) = self.mm.stats.explain.as_mut().filter(|x| x.wants(va, Order::PMD)) {
            x.push(FaultDecision { addr: va.0, write, got, refused: Vec::new() });
        }
    }

    // ---------------------------------------------------------------- zapping

    /// The 2 MiB steps of `[start, end)` that have a PMD table, as `walk_pmd_range` visits them:
    /// (PMD table, start of the step, end of the step).
    pub(crate) fn pmd_steps(&mut self, start: u64, end: u64) -> Vec<(u32, Vaddr, u64)> {
        let mut out = Vec::new();
        let mut addr = start;
        while addr < end {
            let va = Vaddr(addr);
            let Some(t) = self.mm.pt.pmd_table(va) else {
                // The next 1 GiB block that has a PMD table (empty upper levels are skipped).
                match self.mm.pt.puds_in((addr >> PUD_SHIFT) + 1, (end - 1) >> PUD_SHIFT).first() {
                    Some(&(key, _)) => addr = key << PUD_SHIFT,
                    None => break,
                }
                continue;
            };
            let pmd_end = (va.align_down(Order::PMD).0 + PMD_SIZE).min(end);
            out.push((t, va, pmd_end));
            addr = pmd_end;
        }
        out
    }

    /// Unmap `[start, end)` (inside one VMA or several): `unmap_page_range`. Huge PMDs fully
    /// inside are zapped whole (`zap_huge_pmd`); partly covered ones are split first.
    pub(crate) fn zap_range(&mut self, start: u64, end: u64) {
        self.zap_range_of(start, end, false, false);
    }

    /// [`Kernel::zap_range`]; with `only_file`, anonymous folios (a private mapping's copies)
    /// stay; with `split_pmds`, a huge PMD the range covers whole is split too.
    fn zap_range_of(&mut self, start: u64, end: u64, only_file: bool, split_pmds: bool) {
        if !only_file {
            self.zap_swap_range(start, end);
        }
        for (t, va, pmd_end) in self.pmd_steps(start, end) {
            let addr = va.0;
            match self.mm.pt.pmd(t, va) {
                Pmd::None => {}
                Pmd::Huge { .. } | Pmd::HugeZero => {
                    if !split_pmds && addr % PMD_SIZE == 0 && pmd_end - addr == PMD_SIZE {
                        self.zap_huge_pmd(t, va);
                    } else {
                        // A file PMD is zapped by the split: no table is left to zap.
                        self.split_huge_pmd(t, va.align_down(Order::PMD));
                        self.zap_pte_range(t, va, pmd_end, only_file);
                    }
                }
                Pmd::Table(_) => self.zap_pte_range(t, va, pmd_end, only_file),
            }
        }
        // tlb_finish_mmu: the gathered range is flushed.
        self.flush_tlb_range(start, end);
    }

    fn zap_huge_pmd(&mut self, t: u32, haddr: Vaddr) {
        let pmd = self.mm.pt.pmd(t, haddr);
        self.mm.pt.set_pmd(t, haddr, Pmd::None);
        let deposit = self.mm.pt.withdraw(t, haddr);
        if deposit != crate::pgtable::NO_TABLE {
            self.free_pgtable(deposit);
        }
        if let Pmd::Huge { pfn, .. } = pmd {
            if self.zone.mem_map[pfn.idx()].flags & pg::SHMEM != 0 {
                self.zone.folio_meta_mut(pfn).entire -= 1;
                self.mm.stats.shmem_rss_pages -= 1 << PMD_ORDER;
                self.mm.stats.shmem_pmd_mapped -= 1;
                return;
            }
            self.mm.stats.anon_rss_pages -= 1 << PMD_ORDER;
            self.zone.folio_meta_mut(pfn).entire -= 1;
            self.large_mapcount_sub(pfn, 1);
            // pg::TOUCHED stays (see folio_remove_rmap_ptes): a fork child's exit does not
            // make the parent's pages of this folio untouched.
            let (entire, mapped) = (self.zone.entire_mapcount(pfn), self.zone.nr_pages_mapped(pfn));
            if entire == 0 && mapped == 0 {
                self.free_folio(pfn);
            } else if entire == 0 && mapped < 512 && self.zone.mem_map[pfn.idx()].flags & pg::PARTIALLY_MAPPED == 0 {
                // __folio_remove_rmap at PMD level: the last PMD went and PTEs (of another mm,
                // after fork) map only part of the folio.
                self.deferred_split_folio(pfn, true);
            }
        }
    }

    /// `unmap_mapping_range` of shmem pages mapped in `[start, end)` of the current mm (inside
    /// one VMA): only the file's pages go (`even_cows` 0: a private mapping keeps its anonymous
    /// copies). A huge PMD is zapped whole when the range covers it and `split_pmds` is false;
    /// otherwise it is split first (`__split_huge_pmd`: a file PMD is zapped, `thp_split_pmd`
    /// counted), as `try_to_unmap` with TTU_SPLIT_HUGE_PMD does for a folio about to be split.
    pub(crate) fn zap_file_range(&mut self, start: u64, end: u64, split_pmds: bool) {
        self.zap_range_of(start, end, true, split_pmds);
    }

    /// `zap_pte_range` over `[va, end)` inside one PTE table, batching consecutive PTEs of the
    /// same folio as `zap_present_ptes` does; with `only_file`, anonymous folios (a private
    /// mapping's copies) stay.
    fn zap_pte_range(&mut self, t: u32, va: Vaddr, end: u64, only_file: bool) {
        let Pmd::Table(idx) = self.mm.pt.pmd(t, va) else { return };
        let first = va.pte_index();
        let last = first + ((end - va.0) / mm_types::PAGE_SIZE) as usize;
        let mut i = first;
        while i < last {
            let e = self.mm.pt.pte(idx, i);
            if e == 0 {
                i += 1;
                continue;
            }
            if e & PTE_ZERO != 0 {
                self.mm.pt.set_pte(idx, i, 0);
                i += 1;
                continue;
            }
            let pfn = pte_pfn(e);
            let head = self.folio_head(pfn);
            let order = self.order_of_head(head);
            let folio_end = head.0 + order.nr_pages();
            // Batch: following PTEs that map the following pages of the same folio.
            let mut n = 1;
            while i + n < last {
                let f = self.mm.pt.pte(idx, i + n);
                if f & PTE_PRESENT == 0 || f & PTE_ZERO != 0 || pte_pfn(f).0 != pfn.0 + n as u32 || pfn.0 + (n as u32) >= folio_end {
                    break;
                }
                n += 1;
            }
            if only_file && self.zone.mem_map[head.idx()].flags & pg::SHMEM == 0 {
                i += n;
                continue;
            }
            self.mm.pt.clear_ptes(idx, i..i + n);
            if self.zone.mem_map[head.idx()].flags & pg::SHMEM != 0 {
                self.mm.stats.shmem_rss_pages -= n as u64;
            } else {
                self.mm.stats.anon_rss_pages -= n as u64;
            }
            self.folio_remove_rmap_ptes(head, pfn, n as u32);
            i += n;
        }
    }

    /// `free_pgd_range` after munmap: free PTE tables whose 2 MiB no VMA covers any more, and
    /// PMD tables whose 1 GiB no VMA covers.
    pub(crate) fn free_pgtables(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        // free_pgd_range: only the PMD tables that exist are visited (empty upper levels are
        // skipped), so unmapping a span of terabytes costs what its tables cost.
        for (key, t) in self.mm.pt.puds_in(start >> PUD_SHIFT, (end - 1) >> PUD_SHIFT) {
            let gib = key << PUD_SHIFT;
            let mut block = start.max(gib) & !(PMD_SIZE - 1);
            while block < end.min(gib + PUD_SIZE) {
                let va = Vaddr(block);
                if let Pmd::Table(idx) = self.mm.pt.pmd(t, va) {
                    if self.mm.vmas.intersecting(block, block + PMD_SIZE).is_empty() {
                        debug_assert!(self.mm.pt.ptes_none(idx, 0..512));
                        self.mm.pt.set_pmd(t, va, Pmd::None);
                        self.free_pgtable(idx);
                    }
                }
                block += PMD_SIZE;
            }
            let empty = (0..512u64).all(|i| self.mm.pt.pmd(t, Vaddr(gib + i * PMD_SIZE)) == Pmd::None);
            if empty && self.mm.vmas.intersecting(gib, gib + PUD_SIZE).is_empty() {
                let frame = self.mm.pt.remove_pmd_table(key);
                self.free_pgtable_frame(frame);
            }
        }
    }
}

impl Kernel {
    // ---------------------------------------------------------------- shmem faults

    /// A fault in a shmem mapping: `do_fault` → `do_read_fault` (fault-around first) or
    /// `do_shared_fault` → `shmem_fault` → `finish_fault`; a write to a clean shared PTE is
    /// `wp_page_shared`. In a private mapping a write to a none PTE is `do_cow_fault`, to a
    /// file page `wp_page_copy`, to an anonymous copy `do_wp_page`, and to a PMD-mapped file
    /// folio `wp_huge_pmd`: the PMD is split (a file PMD is zapped) and the fault goes on at
    /// PTE level as `do_cow_fault`.
    fn do_shmem_fault(&mut self, vma: &Vma, va: Vaddr, write: bool, t: u32, ino: u32) -> Access {
        let private = vma.flags & vm::SHARED == 0;
        match self.mm.pt.pmd(t, va) {
            Pmd::Huge { .. } if private => {
                if !write {
                    return Access::Fault;
                }
                self.split_huge_pmd(t, va.align_down(Order::PMD));
            }
            Pmd::Huge { pfn, young, .. } => {
                // Write to a PMD made read-only by mprotect: make it writable again.
                self.mm.pt.set_pmd(t, va.align_down(Order::PMD), Pmd::Huge { pfn, young, dirty: true, write: true });
                return Access::Fault;
            }
            Pmd::Table(idx) => {
                let e = self.mm.pt.pte(idx, va.pte_index());
                if e & PTE_PRESENT != 0 {
                    if write && private {
                        return self.wp_private_page(vma, va, idx, e);
                    }
                    if write {
                        self.mm.pt.set_pte(idx, va.pte_index(), e | PTE_WRITE | PTE_DIRTY | PTE_YOUNG);
                    }
                    return Access::Fault;
                }
            }
            Pmd::None | Pmd::HugeZero => {}
        }
        let index = vma.linear_page_index(va.0);
        if index >= self.shmem_inode(ino).pages() {
            return Access::Sigbus;
        }
        if write && private {
            return self.do_cow_fault(vma, va, t, ino, index);
        }
        // do_read_fault: should_fault_around needs vm_ops->map_pages (shm_vm_ops has none).
        if !write && vma.flags & vm::SYSV_SHM == 0 {
            match self.do_fault_around(vma, va, t, ino, index) {
                Some(Access::Fault) => return Access::Fault,
                Some(other) => return other,
                None => {}
            }
        }
        let Some((start, head)) = self.shmem_get_folio(ino, index, 0, crate::shmem::Sgp::Cache, Some((vma, va.0))) else {
            return Access::Oom;
        };
        self.finish_fault(vma, va, t, start, head, index, write)
    }

    /// `do_cow_fault`: the file's folio at `index` is found or allocated (`__do_fault` →
    /// `shmem_fault`, which may allocate a large folio; it stays in the page cache, unmapped),
    /// and the faulting page is copied to an order-0 anonymous page (`folio_prealloc`, taken
    /// first) that `finish_fault` maps writable.
    fn do_cow_fault(&mut self, vma: &Vma, va: Vaddr, t: u32, ino: u32, index: u64) -> Access {
        let mut vma = *vma;
        self.anon_vma_prepare(&mut vma);
        let Some(page) = self.alloc_folio(Order::BASE, true) else { return Access::Oom };
        if self.shmem_get_folio(ino, index, 0, crate::shmem::Sgp::Cache, Some((&vma, va.0))).is_none() {
            self.free_folio(page);
            return Access::Oom;
        }
        let idx = match self.pte_table_for(t, va) {
            Ok(i) => i,
            Err(outcome) => {
                self.free_folio(page);
                return outcome;
            }
        };
        self.mm.pt.set_pte(idx, va.pte_index(), mk_pte(page, PTE_WRITE | PTE_DIRTY | PTE_YOUNG));
        self.rmap_add_ptes(page, page, 1);
        self.touch_page(page);
        self.mm.stats.anon_rss_pages += 1;
        Access::Fault
    }

    /// `do_wp_page` in a private file mapping: an anonymous copy is reused or copied as in an
    /// anonymous VMA; a file page is never reused, it is copied (`wp_page_copy`) and loses this
    /// mapping.
    fn wp_private_page(&mut self, vma: &Vma, va: Vaddr, idx: u32, e: Pte) -> Access {
        let mut vma = *vma;
        let page = pte_pfn(e);
        let head = self.folio_head(page);
        if self.zone.mem_map[head.idx()].flags & pg::SHMEM == 0 {
            let mut info = PteFaultInfo::new(true);
            return self.do_wp_page(&mut vma, va, idx, e, &mut info);
        }
        let r = self.wp_page_copy(&mut vma, va, idx, None);
        if r == Access::Fault {
            self.folio_remove_rmap_ptes(head, page, 1);
            self.mm.stats.shmem_rss_pages -= 1;
        }
        r
    }

    /// Bits of a PTE mapping a shmem page: in a shared mapping writable whenever the VMA is
    /// (no write-notify for shmem), dirty on a write fault; in a private one read-only (the
    /// VMA's `vm_page_prot` has no write: a write copies).
    fn shared_pte_bits(vma: &Vma, write: bool) -> Pte {
        let w = if vma.flags & (vm::WRITE | vm::SHARED) == vm::WRITE | vm::SHARED { PTE_WRITE } else { 0 };
        w | if write { PTE_DIRTY } else { 0 }
    }

    /// `do_set_pmd`: map a PMD-order shmem folio with a PMD.
    pub(crate) fn do_set_pmd(&mut self, vma: &Vma, va: Vaddr, t: u32, head: Pfn, write: bool) -> bool {
        let haddr = va.align_down(Order::PMD);
        if self.vma_thp_disabled(vma, false)
            || !crate::shmem::file_vma_suitable_order(vma, haddr.0, Order::PMD)
            || self.order_of_head(head) != Order::PMD
            || self.mm.pt.pmd(t, va) != Pmd::None
        {
            return false;
        }
        let w = vma.flags & (vm::WRITE | vm::SHARED) == vm::WRITE | vm::SHARED;
        self.mm.pt.set_pmd(t, haddr, Pmd::Huge { pfn: head, young: true, dirty: write, write: w });
        self.zone.folio_meta_mut(head).entire += 1;
        self.mm.stats.shmem_rss_pages += 1 << PMD_ORDER;
        self.mm.stats.shmem_pmd_mapped += 1;
        self.counters.count(thp_abi::VmEvent::ThpFileMapped);
        true
    }

    /// The PTE table under `t` for `va`, allocated if the PMD is empty. Err is the fault's
    /// outcome when there is no table to map into: OOM, or a huge PMD already there.
    fn pte_table_for(&mut self, t: u32, va: Vaddr) -> Result<u32, Access> {
        match self.mm.pt.pmd(t, va) {
            Pmd::Table(i) => Ok(i),
            Pmd::None => {
                let i = self.alloc_pgtable().ok_or(Access::Oom)?;
                self.mm.pt.set_pmd(t, va, Pmd::Table(i));
                Ok(i)
            }
            _ => Err(Access::Fault),
        }
    }

    /// Map `n` pages of a shmem folio, starting with page `first` of the folio at `addr`.
    fn map_shmem_pages(&mut self, idx: u32, addr: u64, head: Pfn, first: u32, n: u32, bits: Pte) {
        let pte0 = Vaddr(addr).pte_index();
        for i in 0..n {
            self.mm.pt.set_pte(idx, pte0 + i as usize, mk_pte(head.add(first + i), bits));
        }
        self.rmap_add_ptes(head, head.add(first), n);
        self.mm.stats.shmem_rss_pages += n as u64;
    }

    /// `finish_fault` for a shmem folio starting at file index `start`.
    #[allow(clippy::too_many_arguments)]
    fn finish_fault(&mut self, vma: &Vma, va: Vaddr, t: u32, start: u64, head: Pfn, index: u64, write: bool) -> Access {
        if self.mm.pt.pmd(t, va) == Pmd::None && self.order_of_head(head) == Order::PMD && self.do_set_pmd(vma, va, t, head, write) {
            self.touch_page(head.add((index - start) as u32));
            return Access::Fault;
        }
        let idx = match self.pte_table_for(t, va) {
            Ok(i) => i,
            Err(outcome) => return outcome,
        };
        let nr = self.order_of_head(head).nr_pages() as u64;
        let page = index - start;
        let vma_off = index - vma.pgoff;
        let pte_off = va.pte_index() as u64;
        let vma_pages = vma.len() / mm_types::PAGE_SIZE;
        let whole = nr > 1 && !(vma_off < page || vma_off + (nr - page) > vma_pages || pte_off < page || pte_off + (nr - page) > 512);
        let bits = Self::shared_pte_bits(vma, write);
        if whole {
            let addr = va.0 - page * mm_types::PAGE_SIZE;
            let first = Vaddr(addr).pte_index();
            if self.mm.pt.ptes_none(idx, first..first + nr as usize) {
                self.map_shmem_pages(idx, addr, head, 0, nr as u32, bits);
                self.mm.pt.pte_mkbits(idx, va.pte_index(), PTE_YOUNG);
                self.touch_page(head.add(page as u32));
                return Access::Fault;
            }
        }
        // One page (needs_fallback, or the folio does not fit).
        if self.mm.pt.pte(idx, va.pte_index()) == 0 {
            self.map_shmem_pages(idx, va.0, head, page as u32, 1, bits | PTE_YOUNG);
        }
        self.touch_page(head.add(page as u32));
        Access::Fault
    }

    /// `do_fault_around` → `filemap_map_pages`: map the uptodate page-cache folios around a read
    /// fault (a 64 KiB window; whole shmem folios when they fit the VMA and one page table).
    /// Returns Some(Fault) when the faulting page got mapped.
    fn do_fault_around(&mut self, vma: &Vma, va: Vaddr, t: u32, ino: u32, pgoff: u64) -> Option<Access> {
        let pte_off = va.pte_index() as u64;
        let (win_start, win_end) = fault_around_window(vma, va.0);
        let pmd_base = va.0 & !(mm_types::PMD_SIZE - 1);
        let from = (win_start - pmd_base) / mm_types::PAGE_SIZE;
        let to = (win_end - pmd_base) / mm_types::PAGE_SIZE - 1;
        let start_pgoff = pgoff + from - pte_off;
        let mut end_pgoff = pgoff + to - pte_off;
        let inode = self.shmem_inode(ino);
        let file_end = inode.pages().checked_sub(1)?;
        let folios: Vec<(u64, crate::shmem::CacheFolio)> = {
            let mut v: Vec<_> = inode.lookup(start_pgoff).into_iter().collect();
            if end_pgoff > start_pgoff {
                v.extend(inode.cache.range(start_pgoff + 1..=end_pgoff).map(|(k, f)| (*k, *f)));
            }
            v.dedup_by_key(|(k, _)| *k);
            v.into_iter().filter(|(k, f)| f.uptodate && (*k).max(start_pgoff) < inode.pages()).collect()
        };
        let (first_start, first) = *folios.first()?;
        end_pgoff = end_pgoff.min(file_end);
        // filemap_map_pmd
        match self.mm.pt.pmd(t, va) {
            Pmd::Huge { .. } => return Some(Access::Fault),
            Pmd::None if first.order == PMD_ORDER => {
                let _ = first_start;
                if self.do_set_pmd(vma, va, t, first.pfn, false) {
                    return Some(Access::Fault);
                }
            }
            _ => {}
        }
        let idx = match self.pte_table_for(t, va) {
            Ok(i) => i,
            Err(outcome) => return Some(outcome),
        };
        let mut hit = false;
        let bits = Self::shared_pte_bits(vma, false);
        for (start, f) in folios {
            if start > end_pgoff {
                break;
            }
            let nr = 1u64 << f.order;
            // Whole folio if it lies in the VMA and in one page table.
            let folio_addr = vma.start as i128 + (start as i128 - vma.pgoff as i128) * mm_types::PAGE_SIZE as i128;
            let in_vma = start >= vma.pgoff
                && folio_addr >= vma.start as i128
                && folio_addr + (nr * mm_types::PAGE_SIZE) as i128 <= vma.end as i128;
            let one_table = in_vma && (folio_addr as u64) >> mm_types::PMD_SHIFT == ((folio_addr as u64) + nr * mm_types::PAGE_SIZE - 1) >> mm_types::PMD_SHIFT;
            let (lo, hi) = if f.order > 0 && one_table { (start, start + nr - 1) } else { (start.max(start_pgoff), (start + nr - 1).min(end_pgoff)) };
            for i in lo..=hi {
                let addr = vma.start + (i - vma.pgoff) * mm_types::PAGE_SIZE;
                // Stay inside this page table.
                if addr >> mm_types::PMD_SHIFT != va.0 >> mm_types::PMD_SHIFT {
                    continue;
                }
                let slot = Vaddr(addr).pte_index();
                if self.mm.pt.pte(idx, slot) != 0 {
                    continue;
                }
                self.map_shmem_pages(idx, addr, f.pfn, (i - start) as u32, 1, bits);
                if addr == va.0 {
                    hit = true;
                }
            }
        }
        if hit {
            self.mm.pt.pte_mkbits(idx, va.pte_index(), PTE_YOUNG);
            let e = self.mm.pt.pte(idx, va.pte_index());
            self.touch_page(pte_pfn(e));
            Some(Access::Fault)
        } else {
            None
        }
    }
}

/// The addresses `do_fault_around` maps around a read fault at `addr` in `vma`: `[start, end)`.
/// mm/memory.c: the window of `fault_around_bytes` (64 KiB, 16 pages) starts at the address
/// aligned down to 16 pages, or at the VMA's or the page table's start if later, and ends 16
/// pages after its start, at the page table's end or at the VMA's end, whichever comes first.
pub fn fault_around_window(vma: &Vma, addr: u64) -> (u64, u64) {
    const WINDOW: u64 = 16 * mm_types::PAGE_SIZE;
    let pmd_start = addr & !(mm_types::PMD_SIZE - 1);
    let from = (addr & !(WINDOW - 1)).max(vma.start).max(pmd_start);
    (from, (from + WINDOW).min(pmd_start + mm_types::PMD_SIZE).min(vma.end))
}
