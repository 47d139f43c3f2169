//! Collapse of PTE-mapped memory into PMD-mapped THPs. In this version: MADV_COLLAPSE
//! (synchronous, PMD order only, as 6.18 does it). The khugepaged thread comes later on the same
//! functions (`cc.is_khugepaged`).
//!
//! Kernel sources (6.18): `mm/khugepaged.c` (`enum scan_result`, `madvise_collapse`,
//! `madvise_collapse_errno`, `hpage_collapse_scan_pmd`, `find_pmd_or_thp_or_none`,
//! `check_pmd_state`, `collapse_huge_page`, `alloc_charge_folio`,
//! `__collapse_huge_page_copy_succeeded`).

use mm_types::{Order, Orders, Vaddr, PMD_ORDER, PMD_SIZE};
use uapi::VmEvent;

use crate::huge_memory::TvaType;
use crate::pgtable::{Pmd, PTE_PRESENT, PTE_YOUNG, PTE_ZERO};
use crate::vma::{vm, Vma};
use crate::{Errno, Kernel};

/// `enum scan_result`: every way a collapse attempt ends. Always counted in
/// `Kernel::scan_results`.
#[doc(alias = "scan_result")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScanResult {
    Fail,
    Succeed,
    PmdNull,
    PmdNone,
    PmdMapped,
    ExceedNonePte,
    ExceedSwapPte,
    ExceedSharedPte,
    PteNonPresent,
    PteUffdWp,
    PteMappedHugepage,
    LackReferencedPage,
    PageNull,
    ScanAbort,
    PageCount,
    PageLru,
    PageLock,
    PageAnon,
    PageCompound,
    AnyProcess,
    VmaNull,
    VmaCheck,
    AddressRange,
    DelPageLru,
    AllocHugePageFail,
    CgroupChargeFail,
    Truncated,
    PageHasPrivate,
    StoreFailed,
    CopyMc,
    PageFilled,
}

impl ScanResult {
    /// The kernel's name, as tracepoints print it.
    pub fn name(self) -> String {
        let dbg = format!("{self:?}");
        let mut out = String::from("SCAN");
        for c in dbg.chars() {
            if c.is_ascii_uppercase() {
                out.push('_');
            }
            out.push(c.to_ascii_uppercase());
        }
        out
    }
}

/// `madvise_collapse_errno`.
pub fn madvise_collapse_errno(r: ScanResult) -> Errno {
    match r {
        ScanResult::AllocHugePageFail => Errno::ENOMEM,
        ScanResult::CgroupChargeFail | ScanResult::ExceedNonePte => Errno::EBUSY,
        ScanResult::PageCount
        | ScanResult::PageLock
        | ScanResult::PageLru
        | ScanResult::DelPageLru
        | ScanResult::PageFilled => Errno::EAGAIN,
        _ => Errno::EINVAL,
    }
}

/// `struct collapse_control`.
#[derive(Clone, Copy, Debug)]
pub struct CollapseControl {
    pub is_khugepaged: bool,
}

impl Kernel {
    /// `madvise_collapse` on `[start, end)` inside one VMA.
    pub(crate) fn madvise_collapse(&mut self, vma: &Vma, start: u64, end: u64) -> Result<(), Errno> {
        if vma.file != 0 {
            // hpage_collapse_scan_file / collapse_file are not modelled yet.
            return Err(Errno::ENOSYS);
        }
        if self.thp_vma_allowable_orders(vma, TvaType::ForcedCollapse, Orders::single(Order::PMD)).is_empty() {
            return Err(Errno::EINVAL);
        }
        let cc = CollapseControl { is_khugepaged: false };
        let hstart = start.wrapping_add(PMD_SIZE - 1) & !(PMD_SIZE - 1);
        let hend = end & !(PMD_SIZE - 1);
        let mut thps: u64 = 0;
        let mut last_fail = ScanResult::Fail;
        let mut addr = hstart;
        while addr < hend {
            let result = self.hpage_collapse_scan_pmd(vma, addr, cc);
            self.count_scan_result(result);
            match result {
                ScanResult::Succeed | ScanResult::PmdMapped => thps += 1,
                ScanResult::PmdNull
                | ScanResult::PteNonPresent
                | ScanResult::PteUffdWp
                | ScanResult::LackReferencedPage
                | ScanResult::PageNull
                | ScanResult::PageCount
                | ScanResult::PageLock
                | ScanResult::PageCompound
                | ScanResult::PageLru
                | ScanResult::DelPageLru => last_fail = result,
                _ => {
                    last_fail = result;
                    break;
                }
            }
            addr += PMD_SIZE;
        }
        // The kernel compares in unsigned arithmetic: a range that holds no aligned block but
        // ends in the same block it starts (hend < hstart) fails, an empty one succeeds.
        if thps == (hend.wrapping_sub(hstart)) >> mm_types::PMD_SHIFT {
            Ok(())
        } else {
            Err(madvise_collapse_errno(last_fail))
        }
    }

    fn count_scan_result(&mut self, r: ScanResult) {
        *self.stats.scan_results.entry(r).or_insert(0) += 1;
    }

    /// `hpage_collapse_scan_pmd` for the 2 MiB block at `addr`, then `collapse_huge_page`.
    fn hpage_collapse_scan_pmd(&mut self, vma: &Vma, addr: u64, cc: CollapseControl) -> ScanResult {
        let va = Vaddr(addr);
        // find_pmd_or_thp_or_none
        let Some(t) = self.pt.pmd_table(va) else { return ScanResult::PmdNull };
        let idx = match self.pt.pmd(t, va) {
            Pmd::None => return ScanResult::PmdNone,
            Pmd::Huge { .. } | Pmd::HugeZero => return ScanResult::PmdMapped,
            Pmd::Table(i) => i,
        };
        let ks = self.settings.khugepaged;
        let mut none_or_zero = 0;
        let mut referenced = 0;
        for e in self.pt.all_ptes(idx) {
            if e == 0 || e & PTE_ZERO != 0 {
                none_or_zero += 1;
                if cc.is_khugepaged && none_or_zero > ks.max_ptes_none {
                    self.counters.count(VmEvent::ThpScanExceedNonePte);
                    return ScanResult::ExceedNonePte;
                }
                continue;
            }
            // Every present page of the model is an exclusive, unpinned anon page on the LRU.
            if cc.is_khugepaged && e & PTE_YOUNG != 0 {
                referenced += 1;
            }
        }
        if cc.is_khugepaged && referenced == 0 {
            return ScanResult::LackReferencedPage;
        }
        self.collapse_huge_page(vma, va, idx, t)
    }

    /// `collapse_huge_page`: allocate a 2 MiB folio, copy the present pages into it (none and
    /// zero-page PTEs become zero-filled pages), release the old folios and map the new one with
    /// a PMD; the old PTE table is deposited.
    fn collapse_huge_page(&mut self, vma: &Vma, haddr: Vaddr, idx: u32, t: u32) -> ScanResult {
        // alloc_charge_folio: the model's memcg never refuses a charge.
        let Some(folio) = self.alloc_folio(Order::PMD, true) else {
            self.counters.count(VmEvent::ThpCollapseAllocFailed);
            return ScanResult::AllocHugePageFail;
        };
        self.counters.count(VmEvent::ThpCollapseAlloc);
        let ptes: Vec<crate::pgtable::Pte> = self.pt.all_ptes(idx).collect();
        let mut young = false;
        for (i, &e) in ptes.iter().enumerate() {
            if e & PTE_PRESENT != 0 && e & PTE_ZERO == 0 {
                let src = crate::pgtable::pte_pfn(e);
                let touched = self.zone.mem_map[src.idx()].flags & crate::page_alloc::pg::TOUCHED;
                self.zone.mem_map[folio.add(i as u32).idx()].flags |= touched;
                young |= e & PTE_YOUNG != 0;
            }
        }
        // __collapse_huge_page_copy_succeeded: clear the PTEs, dropping the old folios in
        // per-folio batches.
        self.zap_range(haddr.0, haddr.0 + PMD_SIZE);
        debug_assert!(self.pt.ptes_none(idx, 0..512));
        self.pt.set_pmd(t, haddr, Pmd::None);
        self.pt.deposit(t, haddr, idx);
        self.folio_add_new_anon_rmap(folio);
        self.zone.folio_meta_mut(folio).entire = 1;
        let write = vma.flags & vm::WRITE != 0;
        self.pt.set_pmd(t, haddr, Pmd::Huge { pfn: folio, young, dirty: true, write });
        self.stats.anon_rss_pages += 1 << PMD_ORDER;
        self.deferred_split_folio(folio, false);
        ScanResult::Succeed
    }
}
