//! Swap-out of an isolated folio (whole when the swap allocator gives it a run of slots, split
//! otherwise), swap entries in the page tables, swap-in at fault (`do_swap_page`, with the mTHP
//! swap-in of a synchronous device), and swap entries at zap and fork.
//!
//! Kernel sources (6.18): `mm/vmscan.c: shrink_folio_list` (a partially mapped large folio is
//! split first; `folio_alloc_swap` failing for a large folio splits it and counts
//! `thp_swpout_fallback` (PMD) and per-size `swpout_fallback`, then each page is tried alone),
//! `mm/rmap.c: try_to_unmap_one` (TTU_SPLIT_HUGE_PMD: a PMD mapping is split, counted in
//! `thp_split_pmd`; each PTE becomes a swap entry, MM_ANONPAGES → MM_SWAPENTS),
//! `mm/page_io.c` (`swap_writeout`: a zero-filled folio goes to the zeromap, unwritten and
//! uncounted; `count_swpout_vm_event`: `pswpout` per page, `thp_swpout` for PMD size,
//! per-size `swpout`; `swap_read_folio`: `pswpin` per page, per-size `swpin`),
//! `mm/memory.c` (`do_swap_page`: VM_FAULT_MAJOR and `pgmajfault` once per fault; a
//! SWP_SYNCHRONOUS_IO device with swap count 1 skips the swap cache and `alloc_swap_folio`
//! picks the highest allowed order below PMD whose aligned range holds contiguous swap entries
//! with the same zeromap state and whose offset is aligned like the address
//! (`thp_swap_suitable_orders`, `can_swapin_thp`), counting `swpin_fallback` /
//! `swpin_fallback_charge` per order that fails; `zap_pte_range` and `copy_nonpresent_pte`:
//! `free_swap_and_cache_nr`, `swap_duplicate`).
//!
//! Model choices: the model has no swap cache; an entry fork shared (count above 1) is read
//! into a private order-0 copy by each mm that faults on it (the kernel shares one folio
//! through the swap cache: `pswpin` counts it once). Swap entries are kept beside the PTE
//! chunks (`PageTables::swap`, by virtual page): the PTE reads none there, and the fault path,
//! zap, fork, mTHP order choice and khugepaged look them up.

use mm_types::{Order, Orders, Pfn, Vaddr, PAGE_SIZE, PMD_ORDER, PMD_SIZE};
use thp_abi::{MthpStat, VmEvent};

use crate::huge_memory::{thp_vma_suitable_orders, TvaType};
use crate::page_alloc::pg;
use crate::pgtable::{mk_pte, pte_pfn, Pmd, PTE_DIRTY, PTE_PRESENT, PTE_WRITE, PTE_YOUNG, PTE_ZERO};
use crate::vma::{vm, Vma};
use crate::vmscan::{LruEntry, Refs};
use crate::{Access, Kernel, MmId};

impl Kernel {
    /// `shrink_folio_list` after the references: swap the folio out. Returns the pages
    /// reclaimed.
    pub(crate) fn swap_out_folio(&mut self, e: LruEntry, refs: Refs) -> u64 {
        let head = Pfn(e.pfn);
        let order = e.order;
        let nr = 1u64 << order;
        if refs.mapped_pages != self.folio_total_mapcount(head) {
            self.reclaim_stats.rmap_miss += 1;
            self.reclaim_stats.pgactivate += nr;
            self.lru_putback_active(e);
            return 0;
        }
        if order > 0 && self.zone.mem_map[head.idx()].flags & pg::PARTIALLY_MAPPED != 0 {
            return self.split_and_swap_out(e, &refs, false);
        }
        let zero = (0..nr as u32).all(|i| self.zone.mem_map[head.add(i).idx()].flags & pg::TOUCHED == 0);
        let slot = self.swap.as_mut().expect("reclaim runs with swap").alloc(order, zero);
        let Some(slot) = slot else {
            if order == 0 {
                self.reclaim_stats.pgactivate += 1;
                self.lru_putback_active(e);
                return 0;
            }
            return self.split_and_swap_out(e, &refs, true);
        };
        if !zero {
            self.reclaim_stats.pswpout += nr;
            if order > 0 {
                self.counters.count_mthp(Order(order), MthpStat::Swpout);
            }
            if order == PMD_ORDER {
                self.counters.count(VmEvent::ThpSwpout);
            }
        }
        self.reclaim_stats.pgsteal += nr;
        self.try_to_unmap_to_swap(head, order, e.vpage, slot, &refs.mms);
        nr
    }

    fn lru_putback_active(&mut self, e: LruEntry) {
        self.lru_putback(e, true);
    }

    /// PTE and PMD mappings of the folio (`folio_mapcount`).
    fn folio_total_mapcount(&self, head: Pfn) -> u64 {
        let order = self.order_of_head(head);
        let nr = order.nr_pages();
        let ptes: u64 = (0..nr).map(|i| self.zone.mem_map[head.add(i).idx()].mapcount.max(0) as u64).sum();
        let entire = if order.0 > 0 { self.zone.entire_mapcount(head) as u64 * nr as u64 } else { 0 };
        ptes + entire
    }

    /// Split the folio (its PMD mappings first) and swap out each mapped piece as a page;
    /// `fallback`: the split is swap's fallback (counted), not a partially mapped folio's.
    fn split_and_swap_out(&mut self, e: LruEntry, refs: &Refs, fallback: bool) -> u64 {
        let head = Pfn(e.pfn);
        let order = e.order;
        let cur = self.mm.id;
        for &id in &refs.mms {
            self.switch_mm(id);
            let va = Vaddr(e.vpage * PAGE_SIZE);
            if let Some(t) = self.mm.pt.pmd_table(va) {
                if matches!(self.mm.pt.pmd(t, va), Pmd::Huge { pfn, .. } if pfn == head) {
                    self.split_huge_pmd(t, va);
                }
            }
        }
        self.switch_mm(cur);
        if fallback {
            if order == PMD_ORDER {
                self.counters.count(VmEvent::ThpSwpoutFallback);
            }
            self.counters.count_mthp(Order(order), MthpStat::SwpoutFallback);
        }
        self.split_folio(head, true);
        let mut reclaimed = 0;
        for j in 0..1u32 << order {
            let p = self.zone.mem_map[head.add(j).idx()];
            if p.flags & pg::HEAD == 0 || p.flags & pg::BUDDY != 0 || p.mapcount <= 0 {
                continue;
            }
            let piece = LruEntry { pfn: e.pfn + j, vpage: e.vpage + j as u64, order: 0, ..e };
            let refs = self.folio_referenced(&piece);
            reclaimed += self.swap_out_folio(piece, refs);
        }
        reclaimed
    }

    /// `try_to_unmap` with TTU_SPLIT_HUGE_PMD: every mapping becomes swap entries
    /// `slot..slot + 2^order`; the folio is freed with its last mapping.
    fn try_to_unmap_to_swap(&mut self, head: Pfn, order: u8, vpage: u64, slot: u32, mms: &[MmId]) {
        let nr = 1u32 << order;
        let cur = self.mm.id;
        let va = Vaddr(vpage * PAGE_SIZE);
        for (k, &id) in mms.iter().enumerate() {
            self.switch_mm(id);
            let Some(t) = self.mm.pt.pmd_table(va) else { continue };
            if matches!(self.mm.pt.pmd(t, va), Pmd::Huge { pfn, .. } if pfn == head) {
                self.split_huge_pmd(t, va);
            }
            let Pmd::Table(idx) = self.mm.pt.pmd(t, va) else { continue };
            let first = va.pte_index();
            let mut unmapped = 0;
            for i in 0..nr as usize {
                let pte = self.mm.pt.pte(idx, first + i);
                if pte & PTE_PRESENT == 0 || pte & PTE_ZERO != 0 || pte_pfn(pte) != head.add(i as u32) {
                    continue;
                }
                self.mm.pt.set_pte(idx, first + i, 0);
                let s = slot + i as u32;
                if k > 0 {
                    self.swap.as_mut().expect("swap").duplicate(s);
                }
                self.mm.pt.swap.insert(vpage + i as u64, s);
                unmapped += 1;
            }
            self.mm.stats.anon_rss_pages -= unmapped;
            self.mm.stats.swapents += unmapped;
            self.flush_tlb_range(va.0, va.0 + nr as u64 * PAGE_SIZE);
            if unmapped > 0 {
                self.folio_remove_rmap_ptes(head, head, nr);
            }
        }
        self.switch_mm(cur);
    }

    /// Is any page of `[start, end)` of the current mm a swap entry?
    pub(crate) fn swap_in_range(&self, start: u64, end: u64) -> bool {
        !self.mm.pt.swap.is_empty() && self.mm.pt.swap.range(start / PAGE_SIZE..end.div_ceil(PAGE_SIZE)).next().is_some()
    }

    /// `do_swap_page` for the swap entry at `va`.
    pub(crate) fn do_swap_page(&mut self, vma: &Vma, va: Vaddr) -> Access {
        let vpage = va.0 / PAGE_SIZE;
        let slot = self.mm.pt.swap[&vpage];
        // VM_FAULT_MAJOR: mm_account_fault counts maj_flt instead of min_flt.
        self.mm.stats.minflt -= 1;
        self.mm.stats.majflt += 1;
        self.reclaim_stats.pgmajfault += 1;
        let dev = self.swap.as_ref().expect("a swap entry needs a device");
        let sync = dev.synchronous() && dev.count(slot) == 1;
        let folio = if sync { self.alloc_swap_folio(vma, va, slot) } else { self.alloc_folio(Order::BASE, true) };
        let Some(folio) = folio else { return Access::Oom };
        self.map_swapped_in(vma, va, folio)
    }

    /// `alloc_swap_folio` (SWP_SYNCHRONOUS_IO, swap count 1): the highest usable order's folio,
    /// counting `swpin_fallback` (and `swpin_fallback_charge`) for each that fails; order 0 last.
    fn alloc_swap_folio(&mut self, vma: &Vma, va: Vaddr, slot: u32) -> Option<Pfn> {
        let mut orders = Orders::NONE;
        if vma.flags & vm::UFFD_ARMED == 0 {
            orders = self.swapin_orders(vma, va, slot);
        }
        let mut order = orders.highest();
        while let Some(o) = order {
            if let Some(f) = self.alloc_folio_gfp(o, true, self.vma_thp_gfp_mask(vma)) {
                return Some(f);
            }
            if self.last_charge_failed {
                self.counters.count_mthp(o, MthpStat::SwpinFallbackCharge);
            }
            self.counters.count_mthp(o, MthpStat::SwpinFallback);
            order = orders.next_below(o);
        }
        self.alloc_folio(Order::BASE, true)
    }

    /// `alloc_swap_folio`'s choice: orders below PMD that the VMA allows and that fit, aligned
    /// like the swap offset, highest first down to the first whose range `can_swapin_thp`.
    fn swapin_orders(&self, vma: &Vma, va: Vaddr, slot: u32) -> Orders {
        let mut orders = self.thp_vma_allowable_orders(vma, TvaType::PageFault, Orders::below(Order::PMD));
        orders = thp_vma_suitable_orders(vma, va.0, orders);
        let vpage = va.0 / PAGE_SIZE;
        let dev = self.swap.as_ref().expect("swap");
        let mut o = orders.highest();
        while let Some(ord) = o {
            let nr = ord.nr_pages() as u64;
            let aligned = vpage % nr == slot as u64 % nr;
            let base = vpage - vpage % nr;
            let first = slot as u64 - (vpage - base);
            let zero = dev.is_zero(slot);
            let contiguous = aligned
                && (0..nr).all(|i| self.mm.pt.swap.get(&(base + i)).is_some_and(|s| *s as u64 == first + i && dev.is_zero(*s) == zero));
            if contiguous {
                return orders.and(Orders::below(Order(ord.0 + 1)));
            }
            o = orders.next_below(ord);
        }
        Orders::NONE
    }

    /// Map the freshly read folio over its swap entries, free them, count the read.
    fn map_swapped_in(&mut self, vma: &Vma, va: Vaddr, folio: Pfn) -> Access {
        let order = self.order_of_head(folio);
        let nr = order.nr_pages();
        let base = va.align_down(order);
        let Some(t) = self.mm.pt.pmd_table(va) else { unreachable!("a swap entry has its PTE table") };
        let Pmd::Table(idx) = self.mm.pt.pmd(t, va) else { unreachable!("a swap entry has its PTE table") };
        let write = if vma.flags & vm::WRITE != 0 { PTE_WRITE | PTE_DIRTY } else { 0 };
        let mut all_zero = true;
        for i in 0..nr {
            let vp = base.0 / PAGE_SIZE + i as u64;
            let s = self.mm.pt.swap.remove(&vp).expect("contiguous swap entries");
            let dev = self.swap.as_mut().expect("swap");
            let zero = dev.is_zero(s);
            dev.free(s);
            all_zero &= zero;
            if !zero {
                self.touch_page(folio.add(i));
            }
            self.mm.pt.set_pte(idx, base.pte_index() + i as usize, mk_pte(folio.add(i), write | PTE_YOUNG));
        }
        self.mm.stats.swapents -= nr as u64;
        self.mm.stats.anon_rss_pages += nr as u64;
        if !all_zero {
            self.reclaim_stats.pswpin += nr as u64;
            self.counters.count_mthp(order, MthpStat::Swpin);
        }
        self.folio_add_new_anon_rmap(folio);
        self.rmap_add_ptes(folio, folio, nr);
        self.lru_add(folio, base);
        Access::Fault
    }

    /// `zap_pte_range` of swap entries: free the slots of `[start, end)` in the current mm.
    pub(crate) fn zap_swap_range(&mut self, start: u64, end: u64) {
        if self.mm.pt.swap.is_empty() {
            return;
        }
        let keys: Vec<u64> = self.mm.pt.swap.range(start / PAGE_SIZE..end.div_ceil(PAGE_SIZE)).map(|(k, _)| *k).collect();
        for k in keys {
            let s = self.mm.pt.swap.remove(&k).expect("key just read");
            self.swap.as_mut().expect("swap").free(s);
            self.mm.stats.swapents -= 1;
        }
    }

    /// `copy_nonpresent_pte` of the swap entries of a private VMA at fork: the child gets the
    /// same entries and each slot one more reference (`swap_duplicate`).
    pub(crate) fn copy_swap_entries(&mut self, child: &mut crate::Mm, vma: &Vma) {
        if self.mm.pt.swap.is_empty() || vma.flags & vm::SHARED != 0 {
            return;
        }
        let dev = self.swap.as_mut().expect("swap");
        for (k, s) in self.mm.pt.swap.range(vma.start / PAGE_SIZE..vma.end / PAGE_SIZE) {
            dev.duplicate(*s);
            child.pt.swap.insert(*k, *s);
            child.stats.swapents += 1;
        }
    }

    /// Is a PMD-sized range free of swap entries (a THP fault may fill it)?
    pub(crate) fn pmd_range_has_swap(&self, va: Vaddr) -> bool {
        let start = va.align_down(Order::PMD).0;
        self.swap_in_range(start, start + PMD_SIZE)
    }
}

