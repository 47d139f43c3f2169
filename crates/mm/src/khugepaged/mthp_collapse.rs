//! khugepaged's mTHP collapse (Linux 7.2, model-only): the kernel side of it. The PMD scan
//! records one bit per occupied PTE and lifts the max_ptes_none bail-out while an order below
//! PMD is enabled; the policy's walk (`crates/policy`: 7.2's forward walk `mthp_collapse`, or
//! v18's recursion) then picks the regions and calls `collapse_huge_page` at each region's order.
//!
//! Kernel sources: mm/khugepaged.c of "khugepaged: mTHP support" (Nico Pache) as merged for 7.2,
//! read from the v19 posting (`[PATCH mm-unstable v19 11/14]`, 2026-06-05; no 7.2 tree was
//! reachable): `collapse_scan_pmd` (the bitmap `cc->mthp_present_ptes`, max_ptes_none lifted to
//! KHUGEPAGED_MAX_PTES_LIMIT unless the enabled set is PMD alone), `collapse_huge_page` with an
//! order, `__collapse_huge_page_swapin` and `__collapse_huge_page_isolate` (below PMD order a
//! swap or shared PTE refuses the region: SCAN_EXCEED_SWAP_PTE, SCAN_EXCEED_SHARED_PTE, counted
//! per size as `collapse_exceed_swap_pte`, `collapse_exceed_shared_pte`), `collapse_possible_orders`
//! (anonymous only, orders >= 2; file, shmem and MADV_COLLAPSE stay PMD-only); mm/huge_memory.c:
//! `anon_stats_attrs` (the three `collapse_exceed_*_pte` files); "run khugepaged for all orders"
//! (`hugepage_enabled`: the daemon runs with only mTHP sizes enabled).
//!
//! Model choices (docs/policies.md): the model does not swap in for a collapse, so a PMD region
//! holding a swap PTE is refused (SCAN_EXCEED_SWAP_PTE) where 7.2 swaps it in; a region already
//! mapped by one folio of at least its order is SCAN_PTE_MAPPED_HUGEPAGE (skipped); a
//! collapse below PMD order counts no vm event (`thp_collapse_alloc` stays PMD's);
//! `pages_collapsed` grows by one per PMD range in which anything collapsed.

use mm_types::{Order, Orders, Pfn, Vaddr, PAGE_SIZE, PMD_ORDER};
use policy::{AttemptResult, Occupancy, WalkInput};
use thp_abi::{MthpStat, VmEvent};

use super::{CollapseControl, ScanResult};
use crate::pgtable::{mk_pte, pte_pfn, Pte, PTE_DIRTY, PTE_PRESENT, PTE_WRITE, PTE_YOUNG, PTE_ZERO};
use crate::vma::{vm, Vma};
use crate::Kernel;

/// What the scan of one PMD range found, beside the occupied bitmap.
#[derive(Default)]
struct PmdScan {
    occupied: Occupancy,
    swap: Occupancy,
    shared: Occupancy,
}

impl Kernel {
    /// Whether some anonymous size below PMD is enabled (`always`, `madvise`, or `inherit` with
    /// the top level not `never`).
    pub(crate) fn anon_mthp_enabled(&self) -> bool {
        !self.masks.possible().and(Orders::ALL_ANON).and(Orders::below(Order::PMD)).is_empty()
    }

    /// `collapse_scan_pmd` of the PMD range at `addr` (PTE table `idx` under PMD table `t`) with
    /// `enabled` holding orders below PMD: the bitmap, then the policy's walk.
    pub(crate) fn collapse_scan_pmd_mthp(&mut self, vma: &Vma, addr: u64, idx: u32, t: u32, enabled: Orders) -> ScanResult {
        let scan = match self.collapse_scan_ptes(addr, idx) {
            Ok(scan) => scan,
            Err(r) => return r,
        };
        let input = WalkInput {
            occupied: scan.occupied,
            enabled,
            max_ptes_none: self.settings.khugepaged.max_ptes_none,
            uffd_armed: vma.flags & vm::UFFD_ARMED != 0,
        };
        self.khugepaged.walked = true;
        let policy = std::mem::replace(&mut self.policy, Box::new(policy::Linux618));
        let mut last = ScanResult::Fail;
        let end = policy.collapse_walk(&input, &mut |offset, order| {
            last = self.collapse_huge_page_order(vma, addr, (idx, t), (offset, order), &scan);
            attempt_result(last)
        });
        self.policy = policy;
        if end.warned && !self.khugepaged.warnings.iter().any(|w| w == policy::mthp_collapse::MAX_PTES_NONE_WARNING) {
            self.khugepaged.warnings.push(policy::mthp_collapse::MAX_PTES_NONE_WARNING.to_string());
        }
        match end.result {
            AttemptResult::Succeed => ScanResult::Succeed,
            AttemptResult::AllocHugePageFail => ScanResult::AllocHugePageFail,
            // No region qualified: SCAN_FAIL, the walk's first `last_result`.
            _ => last,
        }
    }

    /// The PTE loop of `collapse_scan_pmd` with max_ptes_none lifted: every PTE looked at, the
    /// swap and shared limits of a PMD collapse enforced (with their vm events and 7.2's
    /// per-size stats at PMD order), and at least one young PTE required.
    fn collapse_scan_ptes(&mut self, addr: u64, idx: u32) -> Result<PmdScan, ScanResult> {
        let ks = self.settings.khugepaged;
        let first = addr / PAGE_SIZE;
        let mut scan = PmdScan::default();
        let (mut swapped, mut shared, mut referenced) = (0, 0, 0);
        for i in 0..512u16 {
            let e = self.mm.pt.pte(idx, i as usize);
            if e == 0 && !self.mm.pt.swap.is_empty() && self.mm.pt.swap.contains_key(&(first + i as u64)) {
                swapped += 1;
                if swapped > ks.max_ptes_swap {
                    self.counters.count(VmEvent::ThpScanExceedSwapPte);
                    self.count_collapse_exceed(MthpStat::CollapseExceedSwapPte);
                    return Err(ScanResult::ExceedSwapPte);
                }
                scan.swap.set(i);
                continue;
            }
            if e == 0 || e & PTE_ZERO != 0 {
                continue;
            }
            scan.occupied.set(i);
            if self.folio_maybe_mapped_shared(self.folio_head(pte_pfn(e))) {
                shared += 1;
                scan.shared.set(i);
                if shared > ks.max_ptes_shared {
                    self.counters.count(VmEvent::ThpScanExceedSharePte);
                    self.count_collapse_exceed(MthpStat::CollapseExceedSharedPte);
                    return Err(ScanResult::ExceedSharedPte);
                }
            }
            referenced += (e & PTE_YOUNG != 0) as u32;
        }
        if referenced == 0 {
            return Err(ScanResult::LackReferencedPage);
        }
        Ok(scan)
    }

    /// `collapse_huge_page` of the region (`offset`, `order`) of the PMD range at `haddr`: at
    /// PMD order 6.18's (a swap PTE refuses it: the model does not swap in); below it a swap or
    /// shared PTE refuses the region, else a folio of `order` replaces the region's pages and is
    /// mapped with PTEs.
    fn collapse_huge_page_order(&mut self, vma: &Vma, haddr: u64, (idx, t): (u32, u32), (offset, order): (u16, Order), scan: &PmdScan) -> ScanResult {
        let nr = order.nr_pages();
        if order.0 == PMD_ORDER {
            if scan.swap.weight(0, nr) > 0 {
                return ScanResult::ExceedSwapPte;
            }
            return self.collapse_huge_page(vma, Vaddr(haddr), idx, t, CollapseControl { is_khugepaged: true });
        }
        if scan.swap.weight(offset, nr) > 0 {
            self.counters.count_mthp(order, MthpStat::CollapseExceedSwapPte);
            return ScanResult::ExceedSwapPte;
        }
        if scan.shared.weight(offset, nr) > 0 {
            self.counters.count_mthp(order, MthpStat::CollapseExceedSharedPte);
            return ScanResult::ExceedSharedPte;
        }
        let first = offset as usize;
        let ptes: Vec<Pte> = (first..first + nr as usize).map(|i| self.mm.pt.pte(idx, i)).collect();
        if self.region_is_one_folio(&ptes, order) {
            return ScanResult::PteMappedHugepage;
        }
        let start = haddr + offset as u64 * PAGE_SIZE;
        let end = start + order.size();
        let gfp = crate::page_alloc::khugepaged_gfp_mask(self.settings.khugepaged.defrag);
        self.reclaim_guard = Some((self.mm.id.0, start, end));
        let folio = self.alloc_anon_folio_gfp(order, gfp);
        self.reclaim_guard = None;
        let Some(folio) = folio else {
            return if self.last_charge_failed { ScanResult::CgroupChargeFail } else { ScanResult::AllocHugePageFail };
        };
        self.map_collapsed_folio(vma, idx, (start, end), folio, &ptes);
        ScanResult::Succeed
    }

    /// The region's PTEs all map consecutive pages of one folio of at least `order`.
    fn region_is_one_folio(&self, ptes: &[Pte], order: Order) -> bool {
        let Some(&e0) = ptes.first().filter(|e| **e & PTE_PRESENT != 0 && **e & PTE_ZERO == 0) else { return false };
        let p0 = pte_pfn(e0);
        self.zone.mem_map[self.folio_head(p0).idx()].order >= order.0
            && ptes.iter().enumerate().all(|(i, &e)| e & PTE_PRESENT != 0 && e & PTE_ZERO == 0 && pte_pfn(e) == p0.add(i as u32))
    }

    /// Copy (the pages' contents, as `TOUCHED`), unmap the old pages, and map `folio` over
    /// `[start, end)` with PTEs, young where the old PTE was.
    fn map_collapsed_folio(&mut self, vma: &Vma, idx: u32, (start, end): (u64, u64), folio: Pfn, ptes: &[Pte]) {
        for (i, &e) in ptes.iter().enumerate() {
            if e & PTE_PRESENT != 0 && e & PTE_ZERO == 0 {
                let touched = self.zone.mem_map[pte_pfn(e).idx()].flags & crate::page_alloc::pg::TOUCHED;
                self.zone.mem_map[folio.add(i as u32).idx()].flags |= touched;
            }
        }
        self.zap_range(start, end);
        let bits = if vma.flags & vm::WRITE != 0 { PTE_WRITE | PTE_DIRTY } else { 0 };
        let first = Vaddr(start).pte_index();
        for (i, &e) in ptes.iter().enumerate() {
            self.mm.pt.set_pte(idx, first + i, mk_pte(folio.add(i as u32), bits | (e & PTE_YOUNG)));
        }
        let nr = ptes.len() as u32;
        self.mm.stats.anon_rss_pages += nr as u64;
        self.folio_add_new_anon_rmap(folio);
        self.rmap_add_ptes(folio, folio, nr);
        self.lru_add(folio, Vaddr(start));
    }
}

/// The model's scan result as the walks tell them apart.
fn attempt_result(r: ScanResult) -> AttemptResult {
    match r {
        ScanResult::Succeed => AttemptResult::Succeed,
        ScanResult::PteMappedHugepage => AttemptResult::PteMappedHugepage,
        ScanResult::PmdMapped => AttemptResult::PmdMapped,
        ScanResult::AllocHugePageFail => AttemptResult::AllocHugePageFail,
        ScanResult::CgroupChargeFail => AttemptResult::CgroupChargeFail,
        ScanResult::ExceedNonePte => AttemptResult::ExceedNonePte,
        ScanResult::ExceedSwapPte => AttemptResult::ExceedSwapPte,
        ScanResult::ExceedSharedPte => AttemptResult::ExceedSharedPte,
        ScanResult::LackReferencedPage => AttemptResult::LackReferencedPage,
        ScanResult::PageLock | ScanResult::PageCount | ScanResult::PageNull | ScanResult::DelPageLru | ScanResult::PteNonPresent | ScanResult::PteUffdWp => {
            AttemptResult::PageBusy
        }
        _ => AttemptResult::Fail,
    }
}

#[cfg(test)]
#[path = "mthp_collapse_tests.rs"]
mod tests;
