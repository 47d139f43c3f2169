//! Collapse of PTE-mapped memory into PMD-mapped THPs: MADV_COLLAPSE (synchronous, PMD order
//! only, as 6.18 does it) and the khugepaged daemon's scan of the mm (one wake-up's work;
//! when it wakes is the driver's business, on its simulated clock), on the same functions
//! (`cc.is_khugepaged`).
//!
//! Kernel sources (6.18): `mm/khugepaged.c` (`enum scan_result`, `madvise_collapse`,
//! `madvise_collapse_errno`, `hpage_collapse_scan_pmd`, `find_pmd_or_thp_or_none`,
//! `check_pmd_state`, `collapse_huge_page`, `alloc_charge_folio`,
//! `__collapse_huge_page_copy_succeeded`, `khugepaged_enter_vma`, `__khugepaged_enter`,
//! `khugepaged_do_scan`, `khugepaged_scan_mm_slot`, `khugepaged_has_work`),
//! `include/linux/huge_mm.h` (`hugepage_pmd_enabled`).

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

/// The daemon's view of this mm (`struct khugepaged_scan` and the mm's `mm_slot`; the model
/// has one mm, so the list holds it or nothing).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KhugepagedScan {
    /// MMF_VM_HUGEPAGE: the mm is on khugepaged's list (`__khugepaged_enter`).
    pub registered: bool,
    /// `khugepaged_scan.mm_slot != NULL`: a scan of the mm is under way.
    pub in_mm: bool,
    /// `khugepaged_scan.address`.
    pub address: u64,
    /// `khugepaged_pages_collapsed` (sysfs `khugepaged/pages_collapsed`).
    pub pages_collapsed: u64,
    /// `khugepaged_full_scans` (sysfs `khugepaged/full_scans`).
    pub full_scans: u64,
    /// Wake-ups that scanned (calls of `khugepaged_do_scan`).
    pub wakeups: u64,
    /// PMD ranges the daemon examined (`hpage_collapse_scan_pmd` calls).
    pub pmds_scanned: u64,
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

    /// `hugepage_pmd_enabled`: whether khugepaged runs at all (the PMD size is `always` or
    /// `madvise`, or `inherit` with the top level not `never`; or shmem PMDs are enabled).
    pub fn hugepage_pmd_enabled(&self) -> bool {
        let pmd = Orders::single(Order::PMD);
        let m = &self.masks;
        !m.always.and(pmd).is_empty()
            || !m.madvise.and(pmd).is_empty()
            || (!m.inherit.and(pmd).is_empty() && m.global_enabled)
            || self.shmem_pmd_enabled()
    }

    /// `khugepaged_enter_vma`: put the mm on khugepaged's list when this VMA is one the daemon
    /// may collapse in (`TVA_KHUGEPAGED`: it needs an anon_vma). Returns true when it was
    /// added now (`__khugepaged_enter`; the daemon then wakes, as the list was empty).
    pub(crate) fn khugepaged_enter_vma(&mut self, vma: &Vma) -> bool {
        if self.khugepaged.registered || !self.hugepage_pmd_enabled() {
            return false;
        }
        if self.thp_vma_allowable_orders(vma, TvaType::Khugepaged, Orders::single(Order::PMD)).is_empty() {
            return false;
        }
        self.khugepaged.registered = true;
        true
    }

    /// `shmem_hpage_pmd_enabled`: the PMD size of shmem is `always`, `within_size` or
    /// `advise`, or `inherit` with a top-level `shmem_enabled` other than `never` and `deny`.
    fn shmem_pmd_enabled(&self) -> bool {
        use uapi::settings::{ShmemEnabled, ShmemSizeEnabled};
        let s = &self.settings;
        if s.shmem_enabled == ShmemEnabled::Deny {
            return false;
        }
        match s.shmem[PMD_ORDER as usize] {
            ShmemSizeEnabled::Always | ShmemSizeEnabled::WithinSize | ShmemSizeEnabled::Advise => true,
            ShmemSizeEnabled::Inherit => s.shmem_enabled != ShmemEnabled::Never,
            ShmemSizeEnabled::Never => false,
        }
    }

    /// `khugepaged_has_work`.
    pub fn khugepaged_has_work(&self) -> bool {
        self.khugepaged.registered && self.hugepage_pmd_enabled()
    }

    /// What the daemon has done to this mm.
    pub fn khugepaged_state(&self) -> &KhugepagedScan {
        &self.khugepaged
    }

    /// `khugepaged_do_scan`: one wake-up of the daemon, scanning up to `pages_to_scan`
    /// (progress counts 512 per PMD range examined, 1 per VMA skipped and 1 per call), passing
    /// the head of its (one-mm) list at most twice. Returns the collapses it made.
    pub fn khugepaged_do_scan(&mut self) -> u64 {
        let pages = self.settings.khugepaged.pages_to_scan as u64;
        let before = self.khugepaged.pages_collapsed;
        self.khugepaged.wakeups += 1;
        let mut progress = 0u64;
        let mut pass_through_head = 0;
        let mut alloc_wait = true;
        loop {
            if !self.khugepaged.in_mm {
                pass_through_head += 1;
            }
            let mut result = ScanResult::Succeed;
            if self.khugepaged_has_work() && pass_through_head < 2 {
                progress += self.khugepaged_scan_mm_slot(pages - progress.min(pages), &mut result);
            } else {
                progress = pages;
            }
            if progress >= pages {
                break;
            }
            if result == ScanResult::AllocHugePageFail {
                // khugepaged_alloc_sleep once, then give up this wake-up.
                if !alloc_wait {
                    break;
                }
                alloc_wait = false;
            }
        }
        self.khugepaged.pages_collapsed - before
    }

    /// `khugepaged_scan_mm_slot` for the one mm.
    fn khugepaged_scan_mm_slot(&mut self, pages: u64, result: &mut ScanResult) -> u64 {
        *result = ScanResult::Fail;
        if !self.khugepaged.in_mm {
            self.khugepaged.in_mm = true;
            self.khugepaged.address = 0;
        }
        let mut progress = 1u64;
        let cc = CollapseControl { is_khugepaged: true };
        let mut done_with_mm = true;
        // for_each_vma from the scan address (the first VMA that ends above it).
        let vmas: Vec<Vma> = self.vmas.iter().filter(|v| v.end > self.khugepaged.address).cloned().collect();
        'vmas: for vma in vmas {
            // The VMA may have changed under a collapse: look it up again.
            let Some(vma) = self.vmas.find(vma.start).filter(|v| v.start == vma.start) else { continue };
            if vma.file != 0 || self.thp_vma_allowable_orders(&vma, TvaType::Khugepaged, Orders::single(Order::PMD)).is_empty() {
                progress += 1;
                continue;
            }
            let hstart = vma.start.next_multiple_of(PMD_SIZE);
            let hend = vma.end & !(PMD_SIZE - 1);
            if self.khugepaged.address > hend {
                progress += 1;
                continue;
            }
            if self.khugepaged.address < hstart {
                self.khugepaged.address = hstart;
            }
            while self.khugepaged.address < hend {
                let addr = self.khugepaged.address;
                let r = self.hpage_collapse_scan_pmd(&vma, addr, cc);
                // The scan drops the mmap lock when it goes on to collapse_huge_page, which
                // ends in success or in a failed allocation.
                let lock_dropped = matches!(r, ScanResult::Succeed | ScanResult::AllocHugePageFail);
                *result = r;
                self.count_scan_result(r);
                self.khugepaged.pmds_scanned += 1;
                if r == ScanResult::Succeed {
                    self.khugepaged.pages_collapsed += 1;
                }
                self.khugepaged.address += PMD_SIZE;
                progress += 512;
                if lock_dropped {
                    // breakouterloop_mmap_lock with the VMA still set: not the end of the mm.
                    done_with_mm = false;
                    break 'vmas;
                }
                if progress >= pages {
                    done_with_mm = false;
                    break 'vmas;
                }
            }
        }
        if done_with_mm {
            // Every VMA scanned: the next call starts over from the list head.
            self.khugepaged.in_mm = false;
            self.khugepaged.full_scans += 1;
        }
        progress
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
