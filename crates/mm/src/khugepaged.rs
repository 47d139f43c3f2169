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
use crate::{Errno, Kernel, MmId};

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

/// The daemon's state (`struct khugepaged_scan`: the list of mm_slots and where the scan is)
/// and its counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KhugepagedScan {
    /// `khugepaged_scan.mm_head`: the registered mms, in the order they were added
    /// (`__khugepaged_enter` adds at the tail).
    pub mm_slots: std::collections::VecDeque<MmId>,
    /// `khugepaged_scan.mm_slot`: the mm whose scan is under way.
    pub cur: Option<MmId>,
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
        if self.mm.flags.vm_hugepage || !self.hugepage_pmd_enabled() {
            return false;
        }
        if self.thp_vma_allowable_orders(vma, TvaType::Khugepaged, Orders::single(Order::PMD)).is_empty() {
            return false;
        }
        self.khugepaged_enter();
        true
    }

    /// `__khugepaged_enter` for the current mm: MMF_VM_HUGEPAGE, and a slot at the list's tail.
    pub(crate) fn khugepaged_enter(&mut self) {
        self.mm.flags.vm_hugepage = true;
        // An mm that left the list while being scanned keeps its slot until the scan collects
        // it; entering again (after execve, which the model replays in the same mm) reuses it.
        if !self.khugepaged.mm_slots.contains(&self.mm.id) {
            self.khugepaged.mm_slots.push_back(self.mm.id);
        }
    }

    /// `__khugepaged_exit`: the mm leaves the list now, unless the scan is in it (then the scan
    /// collects its slot when it leaves it, `collect_mm_slot`).
    pub(crate) fn khugepaged_exit(&mut self) {
        if !self.mm.flags.vm_hugepage {
            return;
        }
        self.mm.flags.vm_hugepage = false;
        let id = self.mm.id;
        if self.khugepaged.cur != Some(id) {
            self.khugepaged.mm_slots.retain(|m| *m != id);
        }
    }

    /// Whether mm `id` is on khugepaged's list (MMF_VM_HUGEPAGE).
    pub fn khugepaged_registered(&self, id: MmId) -> bool {
        self.mm_ref(id).flags.vm_hugepage
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
        !self.khugepaged.mm_slots.is_empty() && self.hugepage_pmd_enabled()
    }

    /// What the daemon has done.
    pub fn khugepaged_state(&self) -> &KhugepagedScan {
        &self.khugepaged
    }

    /// `khugepaged_do_scan`: one wake-up of the daemon, scanning up to `pages_to_scan`
    /// (progress counts 512 per PMD range examined, 1 per VMA skipped and 1 per call), passing
    /// the head of its list at most twice. Returns the collapses it made.
    pub fn khugepaged_do_scan(&mut self) -> u64 {
        let pages = self.settings.khugepaged.pages_to_scan as u64;
        let before = self.khugepaged.pages_collapsed;
        self.khugepaged.wakeups += 1;
        let mut progress = 0u64;
        let mut pass_through_head = 0;
        let mut alloc_wait = true;
        loop {
            if self.khugepaged.cur.is_none() {
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

    /// `khugepaged_scan_mm_slot`: scan the mm the scan is in (or the list's first), from
    /// `khugepaged_scan.address`, within `pages`; when the mm is done (or exited), move to the
    /// next slot, counting a full scan after the last.
    fn khugepaged_scan_mm_slot(&mut self, pages: u64, result: &mut ScanResult) -> u64 {
        *result = ScanResult::Fail;
        let id = match self.khugepaged.cur {
            Some(id) => id,
            None => {
                let first = *self.khugepaged.mm_slots.front().expect("khugepaged_has_work");
                self.khugepaged.cur = Some(first);
                self.khugepaged.address = 0;
                first
            }
        };
        let prev = self.mm.id;
        self.switch_mm(id);
        let progress = if self.mm.exited || !self.mm.flags.vm_hugepage {
            // hpage_collapse_test_exit: an exited mm is collected.
            self.khugepaged_next_slot(id);
            1
        } else {
            self.khugepaged_scan_mm(pages, result)
        };
        self.switch_mm(prev);
        progress
    }

    /// Leave mm `id`'s slot: the next one, or none (a full scan) after the last;
    /// `collect_mm_slot` frees the slot of an mm that left the list.
    fn khugepaged_next_slot(&mut self, id: MmId) {
        let slots = &mut self.khugepaged.mm_slots;
        let pos = slots.iter().position(|m| *m == id).expect("the scanned mm has a slot");
        self.khugepaged.cur = slots.get(pos + 1).copied();
        self.khugepaged.address = 0;
        if self.khugepaged.cur.is_none() {
            self.khugepaged.full_scans += 1;
        }
        if !self.mm.flags.vm_hugepage || self.mm.exited {
            slots.remove(pos);
        }
    }

    /// The VMA walk of `khugepaged_scan_mm_slot` in the current mm.
    fn khugepaged_scan_mm(&mut self, pages: u64, result: &mut ScanResult) -> u64 {
        let mut progress = 1u64;
        let cc = CollapseControl { is_khugepaged: true };
        let mut done_with_mm = true;
        // for_each_vma from the scan address (the first VMA that ends above it).
        let vmas: Vec<Vma> = self.mm.vmas.iter().filter(|v| v.end > self.khugepaged.address).cloned().collect();
        'vmas: for vma in vmas {
            // The VMA may have changed under a collapse: look it up again.
            let Some(vma) = self.mm.vmas.find(vma.start).filter(|v| v.start == vma.start) else { continue };
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
            // Every VMA scanned: on to the next mm.
            self.khugepaged_next_slot(self.mm.id);
        }
        progress
    }

    fn count_scan_result(&mut self, r: ScanResult) {
        *self.mm.stats.scan_results.entry(r).or_insert(0) += 1;
    }

    /// `hpage_collapse_scan_pmd` for the 2 MiB block at `addr`, then `collapse_huge_page`.
    fn hpage_collapse_scan_pmd(&mut self, vma: &Vma, addr: u64, cc: CollapseControl) -> ScanResult {
        let va = Vaddr(addr);
        // find_pmd_or_thp_or_none
        let Some(t) = self.mm.pt.pmd_table(va) else { return ScanResult::PmdNull };
        let idx = match self.mm.pt.pmd(t, va) {
            Pmd::None => return ScanResult::PmdNone,
            Pmd::Huge { .. } | Pmd::HugeZero => return ScanResult::PmdMapped,
            Pmd::Table(i) => i,
        };
        let ks = self.settings.khugepaged;
        let mut none_or_zero = 0;
        let mut referenced = 0;
        let mut shared = 0;
        for i in 0..512 {
            let e = self.mm.pt.pte(idx, i);
            if e == 0 || e & PTE_ZERO != 0 {
                none_or_zero += 1;
                if cc.is_khugepaged && none_or_zero > ks.max_ptes_none {
                    self.counters.count(VmEvent::ThpScanExceedNonePte);
                    return ScanResult::ExceedNonePte;
                }
                continue;
            }
            // Every present page of the model is an unpinned anon page on the LRU; fork may have
            // shared it.
            let head = self.folio_head(crate::pgtable::pte_pfn(e));
            if self.folio_maybe_mapped_shared(head) {
                shared += 1;
                if cc.is_khugepaged && shared > ks.max_ptes_shared {
                    self.counters.count(VmEvent::ThpScanExceedSharePte);
                    return ScanResult::ExceedSharedPte;
                }
            }
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
        let ptes: Vec<crate::pgtable::Pte> = self.mm.pt.all_ptes(idx).collect();
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
        debug_assert!(self.mm.pt.ptes_none(idx, 0..512));
        self.mm.pt.set_pmd(t, haddr, Pmd::None);
        self.mm.pt.deposit(t, haddr, idx);
        self.folio_add_new_anon_rmap(folio);
        self.zone.folio_meta_mut(folio).entire = 1;
        let write = vma.flags & vm::WRITE != 0;
        self.mm.pt.set_pmd(t, haddr, Pmd::Huge { pfn: folio, young, dirty: true, write });
        self.mm.stats.anon_rss_pages += 1 << PMD_ORDER;
        self.deferred_split_folio(folio, false);
        ScanResult::Succeed
    }
}
