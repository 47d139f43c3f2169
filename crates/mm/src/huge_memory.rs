//! Which orders a VMA may use, PMD-level faults, the huge zero folio, PMD split and the
//! deferred split queue.
//!
//! Kernel sources (6.18): `include/linux/huge_mm.h` (`thp_vma_allowable_orders`,
//! `thp_vma_suitable_order(s)`, `vma_thp_disabled`), `mm/huge_memory.c`
//! (`__thp_vma_allowable_orders`, `do_huge_pmd_anonymous_page`, `__do_huge_pmd_anonymous_page`,
//! `vma_alloc_anon_folio_pmd`, `map_anon_folio_pmd`, `do_huge_zero_wp_pmd`,
//! `do_huge_pmd_wp_page`, `get_huge_zero_folio`, `mm_get_huge_zero_folio`,
//! `__split_huge_pmd_locked`, `__folio_split` (split_folio to order 0), `deferred_split_folio`,
//! `__folio_unqueue_deferred_split`).

use mm_types::{Order, Orders, Pfn, Vaddr, PMD_ORDER, PMD_SIZE};
use uapi::{MthpStat, VmEvent};

use crate::page_alloc::pg;
use crate::pgtable::{mk_pte, Pmd, PTE_DIRTY, PTE_WRITE, PTE_YOUNG, ZERO_PTE};
use crate::vma::{vm, Vma};
use crate::vmstat::FallbackReason;
use crate::Kernel;

/// `enum tva_type`: who asks which orders a VMA allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TvaType {
    /// TVA_PAGEFAULT
    PageFault,
    /// TVA_KHUGEPAGED
    Khugepaged,
    /// TVA_FORCED_COLLAPSE (MADV_COLLAPSE)
    ForcedCollapse,
}

/// Result of a PMD-level fault handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HugeFault {
    Done,
    /// VM_FAULT_FALLBACK, with the reason the PMD size was not used.
    Fallback(FallbackReason),
    Oom,
}

impl Kernel {
    /// `vma_thp_disabled`.
    pub(crate) fn vma_thp_disabled(&self, vma: &Vma, forced_collapse: bool) -> bool {
        if vma.flags & vm::NOHUGEPAGE != 0 || self.mm_flags.disable_thp_completely {
            return true;
        }
        if vma.flags & vm::HUGEPAGE != 0 || forced_collapse {
            return false;
        }
        self.mm_flags.disable_thp_except_advised
    }

    /// The sysfs part of `thp_vma_allowable_orders` (skipped for forced collapse).
    pub(crate) fn sysfs_orders(&self, vma: &Vma) -> Orders {
        let m = &self.masks;
        let hugepage = vma.flags & vm::HUGEPAGE != 0;
        let mut mask = m.always;
        if hugepage {
            mask = mask.or(m.madvise);
        }
        if m.global_always || (hugepage && m.global_enabled) {
            mask = mask.or(m.inherit);
        }
        mask
    }

    /// `thp_vma_allowable_orders` + `__thp_vma_allowable_orders` for anonymous VMAs.
    pub fn thp_vma_allowable_orders(&self, vma: &Vma, tva: TvaType, orders: Orders) -> Orders {
        let mut orders = orders;
        if tva != TvaType::ForcedCollapse {
            orders = orders.and(self.sysfs_orders(vma));
            if orders.is_empty() {
                return orders;
            }
        }
        orders = orders.and(Orders::ALL_ANON);
        if orders.is_empty() || self.vma_thp_disabled(vma, tva == TvaType::ForcedCollapse) {
            return Orders::NONE;
        }
        if tva != TvaType::PageFault {
            // Keep orders for which an aligned block ending at vm_end fits.
            let mut o = orders;
            let mut order = o.highest();
            while let Some(ord) = order {
                if thp_vma_suitable_order(vma, vma.end - ord.size(), ord) {
                    break;
                }
                order = o.next_below(ord);
            }
            orders = o;
            if orders.is_empty() {
                return orders;
            }
            // Collapse needs an anon_vma; the page fault prepares one.
            if vma.anon_vma == 0 {
                return Orders::NONE;
            }
        }
        orders
    }

    /// `__anon_vma_prepare`: give the VMA an anon_vma, reusing a mergeable neighbour's
    /// (`find_mergeable_anon_vma`).
    pub(crate) fn anon_vma_prepare(&mut self, vma: &mut Vma) {
        if vma.anon_vma != 0 {
            return;
        }
        let compatible = |n: &Vma| {
            n.anon_vma != 0 && (n.flags & !vm::ACCESS) == (vma.flags & !vm::ACCESS)
        };
        let mut id = 0;
        if let Some(p) = self.vmas.prev(vma.start) {
            if p.end == vma.start && compatible(&p) {
                id = p.anon_vma;
            }
        }
        if id == 0 {
            if let Some(n) = self.vmas.next(vma.end) {
                if n.start == vma.end && compatible(&n) {
                    id = n.anon_vma;
                }
            }
        }
        if id == 0 {
            id = self.next_anon_vma;
            self.next_anon_vma += 1;
        }
        vma.anon_vma = id;
        self.vmas.update(*vma);
        self.vma_cache = None;
    }

    /// `do_huge_pmd_anonymous_page`: called with an empty PMD when PMD order is allowed.
    pub(crate) fn do_huge_pmd_anonymous_page(&mut self, vma: &mut Vma, addr: Vaddr, write: bool, pmd_table: u32) -> HugeFault {
        let haddr = addr.align_down(Order::PMD);
        if !thp_vma_suitable_order(vma, haddr.0, Order::PMD) {
            return HugeFault::Fallback(FallbackReason::VmaRange);
        }
        self.anon_vma_prepare(vma);
        if !write && self.settings.use_zero_page {
            let Some(pgtable) = self.alloc_pgtable() else { return HugeFault::Oom };
            if self.mm_get_huge_zero_folio().is_none() {
                self.free_pgtable(pgtable);
                self.counters.count(VmEvent::ThpFaultFallback);
                return HugeFault::Fallback(FallbackReason::AllocFailed);
            }
            self.pt.set_pmd(pmd_table, haddr, Pmd::HugeZero);
            self.pt.deposit(pmd_table, haddr, pgtable);
            return HugeFault::Done;
        }
        let Some(folio) = self.vma_alloc_anon_folio_pmd() else {
            return HugeFault::Fallback(FallbackReason::AllocFailed);
        };
        let Some(pgtable) = self.alloc_pgtable() else {
            self.free_folio(folio);
            return HugeFault::Oom;
        };
        self.pt.deposit(pmd_table, haddr, pgtable);
        self.map_anon_folio_pmd(folio, vma, pmd_table, haddr);
        self.deferred_split_folio(folio, false);
        self.touch_page(folio.add(addr.pte_index() as u32));
        HugeFault::Done
    }

    /// `vma_alloc_anon_folio_pmd`: allocate the 2 MiB folio; on failure count the fallback.
    fn vma_alloc_anon_folio_pmd(&mut self) -> Option<Pfn> {
        match self.alloc_folio(Order::PMD, true) {
            Some(f) => Some(f),
            None => {
                self.counters.count(VmEvent::ThpFaultFallback);
                self.counters.count_mthp(Order::PMD, MthpStat::AnonFaultFallback);
                None
            }
        }
    }

    /// `map_anon_folio_pmd`: map a fresh anon THP with a PMD and count the fault allocation.
    fn map_anon_folio_pmd(&mut self, folio: Pfn, vma: &Vma, pmd_table: u32, haddr: Vaddr) {
        self.folio_add_new_anon_rmap(folio);
        self.zone.mem_map[folio.idx()].a += 1; // entire mapcount
        let write = vma.flags & vm::WRITE != 0;
        self.pt.set_pmd(pmd_table, haddr, Pmd::Huge { pfn: folio, young: true, dirty: true, write });
        self.stats.anon_rss_pages += 1 << PMD_ORDER;
        self.counters.count(VmEvent::ThpFaultAlloc);
        self.counters.count_mthp(Order::PMD, MthpStat::AnonFaultAlloc);
    }

    /// `do_huge_pmd_wp_page` for the huge zero folio (`do_huge_zero_wp_pmd`): a write to the
    /// huge zero PMD gets a fresh THP, or splits the PMD and falls back to the PTE path.
    pub(crate) fn do_huge_pmd_wp_page(&mut self, vma: &Vma, addr: Vaddr, pmd_table: u32) -> HugeFault {
        let haddr = addr.align_down(Order::PMD);
        match self.pt.pmd(pmd_table, haddr) {
            Pmd::HugeZero => {
                if let Some(folio) = self.vma_alloc_anon_folio_pmd() {
                    self.map_anon_folio_pmd(folio, vma, pmd_table, haddr);
                    self.touch_page(folio.add(addr.pte_index() as u32));
                    return HugeFault::Done;
                }
                self.split_huge_pmd(pmd_table, haddr);
                HugeFault::Fallback(FallbackReason::AllocFailed)
            }
            Pmd::Huge { pfn, young, dirty, .. } => {
                // An exclusive anon THP in a writable VMA (after mprotect): reuse it in place.
                self.pt.set_pmd(pmd_table, haddr, Pmd::Huge { pfn, young, dirty, write: true });
                HugeFault::Done
            }
            _ => HugeFault::Done,
        }
    }

    /// `mm_get_huge_zero_folio` → `get_huge_zero_folio`.
    fn mm_get_huge_zero_folio(&mut self) -> Option<Pfn> {
        if self.mm_flags.huge_zero_folio {
            return self.huge_zero;
        }
        if self.huge_zero.is_none() {
            match self.zone.alloc_pages(Order::PMD) {
                Some(pfn) => {
                    self.prep_folio(pfn, Order::PMD, pg::HUGE_ZERO);
                    self.huge_zero = Some(pfn);
                    self.counters.count(VmEvent::ThpZeroPageAlloc);
                }
                None => {
                    self.counters.count(VmEvent::ThpZeroPageAllocFailed);
                    return None;
                }
            }
        }
        self.mm_flags.huge_zero_folio = true;
        self.huge_zero
    }

    /// `__split_huge_pmd_locked`: replace a huge PMD by a PTE table mapping the same pages
    /// (anon), or by 512 zero-page PTEs (huge zero). Counts `thp_split_pmd`.
    pub(crate) fn split_huge_pmd(&mut self, pmd_table: u32, haddr: Vaddr) {
        let pmd = self.pt.pmd(pmd_table, haddr);
        if let Pmd::Huge { pfn, .. } = pmd {
            if self.zone.mem_map[pfn.idx()].flags & pg::SHMEM != 0 {
                // A file PMD is zapped, not converted: the next fault maps PTEs.
                self.pt.set_pmd(pmd_table, haddr, Pmd::None);
                self.zone.mem_map[pfn.idx()].a -= 1;
                self.stats.shmem_rss_pages -= 1 << PMD_ORDER;
                self.stats.shmem_pmd_mapped -= 1;
                self.counters.count(VmEvent::ThpSplitPmd);
                return;
            }
        }
        let deposit = self.pt.withdraw(pmd_table, haddr);
        debug_assert_ne!(deposit, crate::pgtable::NO_TABLE);
        match pmd {
            Pmd::HugeZero => {
                for i in 0..512 {
                    self.pt.set_pte(deposit, i, ZERO_PTE);
                }
            }
            Pmd::Huge { pfn, young, dirty, write } => {
                let bits = (young as u64 * PTE_YOUNG) | (dirty as u64 * PTE_DIRTY) | (write as u64 * PTE_WRITE);
                for i in 0..512 {
                    self.pt.set_pte(deposit, i, mk_pte(pfn.add(i as u32), bits));
                }
                // Add the PTE mappings before dropping the PMD one: never partially mapped.
                for i in 0..512u32 {
                    self.zone.mem_map[pfn.add(i).idx()].mapcount += 1;
                }
                let head = &mut self.zone.mem_map[pfn.idx()];
                head.b = 512;
                head.a -= 1;
            }
            Pmd::None | Pmd::Table(_) => unreachable!("split_huge_pmd on a non-huge PMD"),
        }
        self.pt.set_pmd(pmd_table, haddr, Pmd::Table(deposit));
        self.counters.count(VmEvent::ThpSplitPmd);
    }

    /// Split the huge PMD covering `addr`, if there is one (`split_huge_pmd_address`).
    pub(crate) fn split_huge_pmd_address(&mut self, addr: u64) {
        let va = Vaddr(addr);
        let Some(t) = self.pt.pmd_table(va) else { return };
        if matches!(self.pt.pmd(t, va), Pmd::Huge { .. } | Pmd::HugeZero) {
            self.split_huge_pmd(t, va.align_down(Order::PMD));
        }
    }

    /// `vma_adjust_trans_huge`: a VMA boundary is about to be created at `addr`; a huge PMD
    /// that would straddle it is split.
    pub(crate) fn vma_adjust_trans_huge(&mut self, addr: u64) {
        if addr % PMD_SIZE != 0 {
            self.split_huge_pmd_address(addr);
        }
    }

    /// `split_folio` of an anonymous folio mapped by PTEs only (split_huge_page_to_list_to_order
    /// to order 0; mm/huge_memory.c: `__folio_split`). `unmap_folio` replaces the PTEs one by
    /// one, so a folio not yet partially mapped is briefly partially mapped and queued for a
    /// deferred split (counted), unless its mapping was a PMD split `frozen` on the way. Counts
    /// `split` (and `thp_split_page` for PMD size); `nr_anon` loses the folio; every page becomes
    /// an order-0 folio with its own mapcount, and pages nothing maps are freed.
    pub(crate) fn split_folio(&mut self, head: Pfn, frozen: bool) {
        let order = self.order_of_head(head);
        if order.0 == 0 {
            return;
        }
        let flags = self.zone.mem_map[head.idx()].flags;
        if !frozen && flags & pg::PARTIALLY_MAPPED == 0 && self.zone.mem_map[head.idx()].b > 0 {
            self.deferred_split_folio(head, true);
        }
        self.unqueue_deferred_split(head);
        if flags & pg::NR_ANON != 0 {
            self.counters.mod_mthp(order, MthpStat::NrAnon, -1);
        }
        self.counters.count_mthp(order, MthpStat::Split);
        if order == Order::PMD {
            self.counters.count(VmEvent::ThpSplitPage);
        }
        let keep = flags & pg::ANON;
        let mut unmapped = Vec::new();
        for i in 0..order.nr_pages() {
            let pfn = head.add(i);
            let p = &mut self.zone.mem_map[pfn.idx()];
            p.flags = pg::HEAD | keep | (p.flags & pg::TOUCHED);
            p.order = 0;
            p.a = 0;
            p.b = (p.mapcount > 0) as u32;
            if p.mapcount == 0 {
                unmapped.push(pfn);
            }
        }
        for pfn in unmapped {
            self.free_folio(pfn);
        }
    }

    /// `deferred_split_folio`.
    pub(crate) fn deferred_split_folio(&mut self, folio: Pfn, partially_mapped: bool) {
        let order = self.order_of_head(folio);
        if order.0 <= 1 || (!partially_mapped && !self.settings.shrink_underused) {
            return;
        }
        let head = &mut self.zone.mem_map[folio.idx()];
        if partially_mapped && head.flags & pg::PARTIALLY_MAPPED == 0 {
            head.flags |= pg::PARTIALLY_MAPPED;
            if order == Order::PMD {
                self.counters.count(VmEvent::ThpDeferredSplitPage);
            }
            self.counters.count_mthp(order, MthpStat::SplitDeferred);
            self.counters.mod_mthp(order, MthpStat::NrAnonPartiallyMapped, 1);
        }
        let head = &mut self.zone.mem_map[folio.idx()];
        if head.flags & pg::DEFERRED == 0 {
            head.flags |= pg::DEFERRED;
            self.deferred.push(folio);
        }
    }

    /// `__folio_unqueue_deferred_split`, when a folio is freed.
    pub(crate) fn unqueue_deferred_split(&mut self, folio: Pfn) {
        let order = self.order_of_head(folio);
        let head = &mut self.zone.mem_map[folio.idx()];
        if head.flags & pg::DEFERRED == 0 {
            return;
        }
        head.flags &= !pg::DEFERRED;
        if head.flags & pg::PARTIALLY_MAPPED != 0 {
            head.flags &= !pg::PARTIALLY_MAPPED;
            self.counters.mod_mthp(order, MthpStat::NrAnonPartiallyMapped, -1);
        }
        // Stale queue entries are dropped lazily, once they are half the queue.
        self.deferred_stale += 1;
        if self.deferred_stale * 2 > self.deferred.len() {
            let mm = &self.zone.mem_map;
            self.deferred.retain(|f| mm[f.idx()].flags & pg::DEFERRED != 0);
            self.deferred_stale = 0;
        }
    }

    /// Folios on the deferred split queue (queue order).
    pub fn deferred_split_queue(&self) -> Vec<Pfn> {
        let mm = &self.zone.mem_map;
        let mut seen = std::collections::HashSet::new();
        self.deferred.iter().copied().filter(|f| mm[f.idx()].flags & pg::DEFERRED != 0 && seen.insert(*f)).collect()
    }
}

/// `thp_vma_suitable_order` for anonymous VMAs: the aligned block around `addr` lies in the VMA.
pub fn thp_vma_suitable_order(vma: &Vma, addr: u64, order: Order) -> bool {
    let haddr = addr & !(order.size() - 1);
    haddr >= vma.start && haddr + order.size() <= vma.end
}

/// `thp_vma_suitable_orders`: drop orders from the top until one fits (all lower ones fit too).
pub fn thp_vma_suitable_orders(vma: &Vma, addr: u64, orders: Orders) -> Orders {
    let mut o = orders;
    let mut order = o.highest();
    while let Some(ord) = order {
        if thp_vma_suitable_order(vma, addr, ord) {
            break;
        }
        order = o.next_below(ord);
    }
    o
}
