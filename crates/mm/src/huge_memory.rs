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
//!
//! The order policy is also a pure function ([`anon_thp_vma_allowable_orders`], with
//! [`Refusal`] naming why each order is dropped) so that `thplab explain` can run the model's
//! own decision on the inputs it reads from a live process.

mod shrinker;
pub use shrinker::SplitScan;

use mm_types::{Order, Orders, Pfn, Vaddr, PMD_ORDER, PMD_SIZE};
use thp_abi::{MthpStat, VmEvent};

use crate::page_alloc::pg;
use crate::pgtable::{mk_pte, Pmd, PTE_DIRTY, PTE_WRITE, PTE_YOUNG, ZERO_PTE};
use crate::vma::{vm, Vma};
use crate::model::fallbacks::FallbackReason;
use crate::{Kernel, MmFlags, ThpMasks};

/// `enum tva_type`: who asks which orders a VMA allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TvaType {
    /// TVA_PAGEFAULT
    PageFault,
    /// TVA_KHUGEPAGED
    Khugepaged,
    /// TVA_FORCED_COLLAPSE (MADV_COLLAPSE)
    ForcedCollapse,
    /// TVA_SMAPS (the `THPeligible` line of /proc/PID/smaps): like khugepaged, but a VMA
    /// without an anon_vma yet is eligible.
    Smaps,
}

/// Result of a PMD-level fault handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HugeFault {
    Done,
    /// VM_FAULT_FALLBACK, with the reason the PMD size was not used.
    Fallback(FallbackReason),
    Oom,
    /// Handed to the userfaultfd (VM_UFFD_MISSING): nothing mapped.
    Userfault,
}

impl Kernel {
    /// The sysfs part of `thp_vma_allowable_orders` (skipped for forced collapse).
    pub(crate) fn sysfs_orders(&self, vma: &Vma) -> Orders {
        sysfs_anon_orders(&self.masks, vma.flags)
    }

    /// `vma_thp_disabled`: THP is off for the VMA (VM_NOHUGEPAGE, or the prctl).
    pub(crate) fn vma_thp_disabled(&self, vma: &Vma, forced_collapse: bool) -> bool {
        vma_thp_disabled_why(&self.mm.flags, vma.flags, forced_collapse).is_some()
    }

    /// `thp_vma_allowable_orders` + `__thp_vma_allowable_orders` for anonymous VMAs.
    pub fn thp_vma_allowable_orders(&self, vma: &Vma, tva: TvaType, orders: Orders) -> Orders {
        anon_thp_vma_allowable_orders(&self.masks, &self.mm.flags, vma, tva, orders, &mut ())
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
        if let Some(p) = self.mm.vmas.prev(vma.start) {
            if p.end == vma.start && compatible(&p) {
                id = p.anon_vma;
            }
        }
        if id == 0 {
            if let Some(n) = self.mm.vmas.next(vma.end) {
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
        self.mm.vmas.update(*vma);
        self.mm.vma_cache = None;
    }

    /// `do_huge_pmd_anonymous_page`: called with an empty PMD when PMD order is allowed.
    pub(crate) fn do_huge_pmd_anonymous_page(&mut self, vma: &mut Vma, addr: Vaddr, write: bool, pmd_table: u32) -> HugeFault {
        let haddr = addr.align_down(Order::PMD);
        if !thp_vma_suitable_order(vma, haddr.0, Order::PMD) {
            return HugeFault::Fallback(FallbackReason::VmaRange);
        }
        self.anon_vma_prepare(vma);
        self.khugepaged_enter_vma(vma);
        if !write && self.settings.use_zero_page {
            let Some(pgtable) = self.alloc_pgtable() else { return HugeFault::Oom };
            if self.mm_get_huge_zero_folio().is_none() {
                self.free_pgtable(pgtable);
                self.counters.count(VmEvent::ThpFaultFallback);
                return HugeFault::Fallback(FallbackReason::AllocFailed);
            }
            if vma.flags & vm::UFFD_MISSING != 0 {
                self.free_pgtable(pgtable);
                return HugeFault::Userfault;
            }
            self.mm.pt.set_pmd(pmd_table, haddr, Pmd::HugeZero);
            self.mm.pt.deposit(pmd_table, haddr, pgtable);
            self.mm.stats.zero_page_faults += 1;
            return HugeFault::Done;
        }
        let Some(folio) = self.vma_alloc_anon_folio_pmd(vma) else {
            return HugeFault::Fallback(FallbackReason::AllocFailed);
        };
        let Some(pgtable) = self.alloc_pgtable() else {
            self.free_folio(folio);
            return HugeFault::Oom;
        };
        // __do_huge_pmd_anonymous_page: the folio was allocated before the PMD lock shows the
        // VMA registered with a userfaultfd; it goes back uncounted (thp_fault_alloc counts a
        // mapped folio, `map_anon_folio_pmd`), and the fault goes to the userfaultfd's reader.
        if vma.flags & vm::UFFD_MISSING != 0 {
            self.free_pgtable(pgtable);
            self.free_folio(folio);
            return HugeFault::Userfault;
        }
        self.mm.pt.deposit(pmd_table, haddr, pgtable);
        self.map_anon_folio_pmd(folio, vma, pmd_table, haddr);
        self.deferred_split_folio(folio, false);
        self.touch_page(folio.add(addr.pte_index() as u32));
        HugeFault::Done
    }

    /// `vma_alloc_anon_folio_pmd`: allocate (with the VMA's `vma_thp_gfp_mask`: the slow path
    /// may compact) and charge the 2 MiB folio; on failure count the fallback, and on a failed
    /// charge `thp_fault_fallback_charge` and `anon_fault_fallback_charge` too.
    fn vma_alloc_anon_folio_pmd(&mut self, vma: &Vma) -> Option<Pfn> {
        let gfp = self.vma_thp_gfp_mask(vma);
        match self.alloc_anon_folio_gfp(Order::PMD, gfp) {
            Some(f) => Some(f),
            None => {
                if self.last_charge_failed {
                    self.counters.count(VmEvent::ThpFaultFallbackCharge);
                    self.counters.count_mthp(Order::PMD, MthpStat::AnonFaultFallbackCharge);
                }
                self.counters.count(VmEvent::ThpFaultFallback);
                self.counters.count_mthp(Order::PMD, MthpStat::AnonFaultFallback);
                None
            }
        }
    }

    /// `map_anon_folio_pmd`: map a fresh anon THP with a PMD and count the fault allocation.
    fn map_anon_folio_pmd(&mut self, folio: Pfn, vma: &Vma, pmd_table: u32, haddr: Vaddr) {
        self.folio_add_new_anon_rmap(folio);
        self.zone.folio_meta_mut(folio).entire += 1;
        let write = vma.flags & vm::WRITE != 0;
        self.mm.pt.set_pmd(pmd_table, haddr, Pmd::Huge { pfn: folio, young: true, dirty: true, write });
        self.mm.stats.anon_rss_pages += 1 << PMD_ORDER;
        self.counters.count(VmEvent::ThpFaultAlloc);
        self.counters.count_mthp(Order::PMD, MthpStat::AnonFaultAlloc);
        self.lru_add(folio, haddr);
    }

    /// `do_huge_pmd_wp_page` for the huge zero folio (`do_huge_zero_wp_pmd`): a write to the
    /// huge zero PMD gets a fresh THP, or splits the PMD and falls back to the PTE path.
    pub(crate) fn do_huge_pmd_wp_page(&mut self, vma: &Vma, addr: Vaddr, pmd_table: u32) -> HugeFault {
        let haddr = addr.align_down(Order::PMD);
        match self.mm.pt.pmd(pmd_table, haddr) {
            Pmd::HugeZero => {
                if let Some(folio) = self.vma_alloc_anon_folio_pmd(vma) {
                    self.map_anon_folio_pmd(folio, vma, pmd_table, haddr);
                    self.touch_page(folio.add(addr.pte_index() as u32));
                    return HugeFault::Done;
                }
                self.split_huge_pmd(pmd_table, haddr);
                HugeFault::Fallback(FallbackReason::AllocFailed)
            }
            Pmd::Huge { pfn, .. } => {
                // PageAnonExclusive (or the only reference: refcount 1) reuses the THP in place;
                // a THP fork shared is split and the PTE path copies one page.
                let exclusive = self.zone.mem_map[pfn.idx()].flags & pg::ANON_SHARED == 0;
                if exclusive || self.folio_large_mapcount(pfn) == 1 {
                    self.zone.mem_map[pfn.idx()].flags &= !pg::ANON_SHARED;
                    self.mm.pt.set_pmd(pmd_table, haddr, Pmd::Huge { pfn, young: true, dirty: true, write: true });
                    self.mm.stats.cow_reused += 1;
                    return HugeFault::Done;
                }
                self.split_huge_pmd(pmd_table, haddr);
                HugeFault::Fallback(FallbackReason::ForkCow)
            }
            _ => HugeFault::Done,
        }
    }

    /// `mm_get_huge_zero_folio` → `get_huge_zero_folio`.
    fn mm_get_huge_zero_folio(&mut self) -> Option<Pfn> {
        if self.mm.flags.huge_zero_folio {
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
        self.mm.flags.huge_zero_folio = true;
        self.huge_zero
    }

    /// `__split_huge_pmd_locked`: replace a huge PMD by a PTE table mapping the same pages
    /// (anon), or by 512 zero-page PTEs (huge zero). Counts `thp_split_pmd`.
    pub(crate) fn split_huge_pmd(&mut self, pmd_table: u32, haddr: Vaddr) {
        let pmd = self.mm.pt.pmd(pmd_table, haddr);
        if let Pmd::Huge { pfn, .. } = pmd {
            if self.zone.mem_map[pfn.idx()].flags & pg::SHMEM != 0 {
                // A file PMD is zapped, not converted: the next fault maps PTEs.
                self.mm.pt.set_pmd(pmd_table, haddr, Pmd::None);
                self.zone.folio_meta_mut(pfn).entire -= 1;
                self.mm.stats.shmem_rss_pages -= 1 << PMD_ORDER;
                self.mm.stats.shmem_pmd_mapped -= 1;
                self.counters.count(VmEvent::ThpSplitPmd);
                return;
            }
        }
        // pmdp_invalidate: the huge translation is flushed before the PTEs replace it.
        self.flush_tlb_range(haddr.0, haddr.0 + PMD_SIZE);
        let deposit = self.mm.pt.withdraw(pmd_table, haddr);
        debug_assert_ne!(deposit, crate::pgtable::NO_TABLE);
        match pmd {
            Pmd::HugeZero => {
                for i in 0..512 {
                    self.mm.pt.set_pte(deposit, i, ZERO_PTE);
                }
            }
            Pmd::Huge { pfn, young, dirty, write } => {
                let bits = (young as u64 * PTE_YOUNG) | (dirty as u64 * PTE_DIRTY) | (write as u64 * PTE_WRITE);
                for i in 0..512 {
                    self.mm.pt.set_pte(deposit, i, mk_pte(pfn.add(i as u32), bits));
                }
                // Add the PTE mappings before dropping the PMD one: never partially mapped.
                let mut newly = 0;
                for i in 0..512u32 {
                    let p = &mut self.zone.mem_map[pfn.add(i).idx()];
                    p.mapcount += 1;
                    newly += (p.mapcount == 1) as u16;
                }
                // The head's PageAnonExclusive goes to every page (__split_huge_pmd_locked).
                let shared = self.zone.mem_map[pfn.idx()].flags & pg::ANON_SHARED;
                for i in 1..512u32 {
                    let p = &mut self.zone.mem_map[pfn.add(i).idx()];
                    p.flags = (p.flags & !pg::ANON_SHARED) | shared;
                }
                let meta = self.zone.folio_meta_mut(pfn);
                meta.mapped += newly;
                meta.entire -= 1;
                self.large_mapcount_add(pfn, 512);
                self.large_mapcount_sub(pfn, 1);
            }
            Pmd::None | Pmd::Table(_) => unreachable!("split_huge_pmd on a non-huge PMD"),
        }
        self.mm.pt.set_pmd(pmd_table, haddr, Pmd::Table(deposit));
        self.counters.count(VmEvent::ThpSplitPmd);
    }

    /// Split the huge PMD covering `addr`, if there is one (`split_huge_pmd_address`).
    pub(crate) fn split_huge_pmd_address(&mut self, addr: u64) {
        let va = Vaddr(addr);
        let Some(t) = self.mm.pt.pmd_table(va) else { return };
        if matches!(self.mm.pt.pmd(t, va), Pmd::Huge { .. } | Pmd::HugeZero) {
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
        if !frozen && flags & pg::PARTIALLY_MAPPED == 0 && self.zone.nr_pages_mapped(head) > 0 {
            self.deferred_split_folio(head, true);
        }
        self.unqueue_deferred_split(head);
        // The pieces are small folios: their sharing is per page from now on.
        self.folio_mm_ids.remove(&head);
        if flags & pg::NR_ANON != 0 {
            self.counters.mod_mthp(order, MthpStat::NrAnon, -1);
        }
        self.counters.count_mthp(order, MthpStat::Split);
        if order == Order::PMD {
            self.counters.count(VmEvent::ThpSplitPage);
        }
        // The pieces stay on the folio's LRU list (`lru_add_split_folio`).
        let keep = flags & (pg::ANON | pg::LRU | pg::REFERENCED);
        let lru = self.zone.mem_map[head.idx()].lru;
        let mut unmapped = Vec::new();
        for i in 0..order.nr_pages() {
            let pfn = head.add(i);
            let p = &mut self.zone.mem_map[pfn.idx()];
            // Each page keeps its own PageAnonExclusive (cleared: ANON_SHARED), a page flag the
            // split leaves as it is (`__split_folio_to_order`).
            p.flags = pg::HEAD | keep | (p.flags & (pg::TOUCHED | pg::ANON_SHARED));
            p.order = 0;
            p.lru = lru;
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

/// Why an order is not allowed for a VMA: every branch of `thp_vma_allowable_orders`,
/// `__thp_vma_allowable_orders`, `vma_thp_disabled`, `shmem_huge_global_enabled` and
/// `shmem_allowable_huge_orders` that drops an order, named after the knob or flag that decides
/// it. A closed set: `thplab explain` prints one per refused order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Refusal {
    /// Not a THP order for this kind of memory (anon: 2..=9, file/shmem: 1..=9).
    NotThpOrder,
    /// `hugepages-<N>kB/enabled=never`.
    SizeNever,
    /// `hugepages-<N>kB/enabled=madvise` and the VMA has no VM_HUGEPAGE.
    SizeMadviseNotAdvised,
    /// `hugepages-<N>kB/enabled=inherit` and top-level `enabled=never`.
    InheritTopNever,
    /// `hugepages-<N>kB/enabled=inherit`, top-level `enabled=madvise`, no VM_HUGEPAGE.
    InheritTopMadviseNotAdvised,
    /// VM_NOHUGEPAGE (MADV_NOHUGEPAGE) on the VMA.
    VmNoHugepage,
    /// MMF_DISABLE_THP_COMPLETELY: `prctl(PR_SET_THP_DISABLE, 1)`.
    PrctlDisabled,
    /// MMF_DISABLE_THP_EXCEPT_ADVISED (`prctl(PR_SET_THP_DISABLE, 1, PR_THP_DISABLE_EXCEPT_ADVISED)`)
    /// and the VMA has no VM_HUGEPAGE.
    PrctlExceptAdvised,
    /// VM_NO_KHUGEPAGED (VM_IO, VM_DONTEXPAND, VM_PFNMAP, VM_MIXEDMAP, VM_HUGETLB): never
    /// collapsed.
    NoKhugepagedVma,
    /// No naturally aligned block of this size lies inside the VMA (`thp_vma_suitable_order`).
    NoAlignedBlock,
    /// A file VMA whose start is not aligned to this size in file-offset terms
    /// (`(vm_start >> PAGE_SHIFT) - vm_pgoff`).
    FileOffsetMisaligned,
    /// Anonymous VMA never faulted: no anon_vma, so khugepaged and MADV_COLLAPSE skip it.
    NoAnonVma,
    /// Top-level `shmem_enabled=deny`.
    ShmemDeny,
    /// Top-level `shmem_enabled=force`: PMD size only (or, for anon shmem, the per-size
    /// `inherit` sizes only).
    ShmemForceOtherSize,
    /// The mount's `huge=never` (for memfd and shared anonymous memory: top-level `shmem_enabled`).
    ShmemMountNever,
    /// `huge=always` or `within_size` with a VMA: a mapping fault allocates PMD size only.
    ShmemMappedPmdOnly,
    /// `huge=within_size` (or per-size `within_size`): the aligned block would end beyond i_size.
    ShmemBeyondEof,
    /// `huge=advise` (or per-size `advise`) and the VMA has no VM_HUGEPAGE.
    ShmemAdviseNotAdvised,
    /// Anon shmem (memfd, MAP_SHARED|MAP_ANONYMOUS): `hugepages-<N>kB/shmem_enabled=never`.
    ShmemSizeNever,
    /// Anon shmem: `hugepages-<N>kB/shmem_enabled=inherit` and the top-level `shmem_enabled`
    /// allows nothing for this inode.
    ShmemInheritTopOff,
    /// khugepaged asks for PMD order only (`khugepaged_scan_mm_slot`): it never collapses to
    /// a smaller size in 6.18.
    KhugepagedPmdOnly,
    /// A file that is neither anonymous nor shmem (page cache of a regular file, DAX,
    /// hugetlbfs, a device): its folio sizes come from readahead or the driver, not these knobs.
    NotAnonOrShmem,
}

impl Refusal {
    pub const ALL: [Refusal; 22] = [
        Refusal::NotThpOrder,
        Refusal::SizeNever,
        Refusal::SizeMadviseNotAdvised,
        Refusal::InheritTopNever,
        Refusal::InheritTopMadviseNotAdvised,
        Refusal::VmNoHugepage,
        Refusal::PrctlDisabled,
        Refusal::PrctlExceptAdvised,
        Refusal::NoKhugepagedVma,
        Refusal::NoAlignedBlock,
        Refusal::FileOffsetMisaligned,
        Refusal::NoAnonVma,
        Refusal::ShmemDeny,
        Refusal::ShmemForceOtherSize,
        Refusal::ShmemMountNever,
        Refusal::ShmemMappedPmdOnly,
        Refusal::ShmemBeyondEof,
        Refusal::ShmemAdviseNotAdvised,
        Refusal::ShmemSizeNever,
        Refusal::ShmemInheritTopOff,
        Refusal::KhugepagedPmdOnly,
        Refusal::NotAnonOrShmem,
    ];

    /// snake_case name, as JSON and tables print it (`size_never`, `vm_no_hugepage`).
    pub fn name(self) -> String {
        let dbg = format!("{self:?}");
        let mut out = String::new();
        for (i, c) in dbg.chars().enumerate() {
            if c.is_ascii_uppercase() && i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        }
        out
    }

    /// One line for a kernel developer: the knob or flag, and the kernel function that decides.
    pub fn describe(self) -> &'static str {
        match self {
            Refusal::NotThpOrder => "not a THP order for this memory (THP_ORDERS_ALL_ANON / _FILE_DEFAULT)",
            Refusal::SizeNever => "hugepages-<size>/enabled=never (thp_vma_allowable_orders)",
            Refusal::SizeMadviseNotAdvised => "hugepages-<size>/enabled=madvise and no VM_HUGEPAGE (thp_vma_allowable_orders)",
            Refusal::InheritTopNever => "hugepages-<size>/enabled=inherit, top-level enabled=never (thp_vma_allowable_orders)",
            Refusal::InheritTopMadviseNotAdvised => {
                "hugepages-<size>/enabled=inherit, top-level enabled=madvise and no VM_HUGEPAGE (thp_vma_allowable_orders)"
            }
            Refusal::VmNoHugepage => "VM_NOHUGEPAGE (MADV_NOHUGEPAGE) (vma_thp_disabled)",
            Refusal::PrctlDisabled => "PR_SET_THP_DISABLE: MMF_DISABLE_THP_COMPLETELY (vma_thp_disabled)",
            Refusal::PrctlExceptAdvised => {
                "PR_SET_THP_DISABLE with PR_THP_DISABLE_EXCEPT_ADVISED and no VM_HUGEPAGE (vma_thp_disabled)"
            }
            Refusal::NoKhugepagedVma => "VM_NO_KHUGEPAGED: VM_IO|VM_DONTEXPAND|VM_PFNMAP|VM_MIXEDMAP|VM_HUGETLB (__thp_vma_allowable_orders)",
            Refusal::NoAlignedBlock => "no naturally aligned block of this size inside the VMA (thp_vma_suitable_order)",
            Refusal::FileOffsetMisaligned => "vm_start and vm_pgoff disagree modulo this size (thp_vma_suitable_order)",
            Refusal::NoAnonVma => "never faulted: no anon_vma (__thp_vma_allowable_orders)",
            Refusal::ShmemDeny => "top-level shmem_enabled=deny (shmem_huge_global_enabled)",
            Refusal::ShmemForceOtherSize => "top-level shmem_enabled=force allows PMD / inherit sizes only (shmem_allowable_huge_orders)",
            Refusal::ShmemMountNever => "mount huge=never (shm_mnt: top-level shmem_enabled) (shmem_huge_global_enabled)",
            Refusal::ShmemMappedPmdOnly => "huge=always/within_size: a mapping fault allocates PMD size only (shmem_huge_global_enabled)",
            Refusal::ShmemBeyondEof => "within_size: the aligned block ends beyond i_size (shmem_get_orders_within_size)",
            Refusal::ShmemAdviseNotAdvised => "advise and no VM_HUGEPAGE (shmem_huge_global_enabled / shmem_allowable_huge_orders)",
            Refusal::ShmemSizeNever => "hugepages-<size>/shmem_enabled=never (shmem_allowable_huge_orders)",
            Refusal::ShmemInheritTopOff => {
                "hugepages-<size>/shmem_enabled=inherit and top-level shmem_enabled allows nothing here (shmem_allowable_huge_orders)"
            }
            Refusal::KhugepagedPmdOnly => "khugepaged collapses PMD size only in 6.18 (khugepaged_scan_mm_slot)",
            Refusal::NotAnonOrShmem => "neither anonymous nor shmem: sizes come from readahead or the driver, not THP knobs",
        }
    }
}

/// Where the reasons for dropped orders go. `()` drops them (the model's fast path: the
/// reasons are not computed at all); [`Refusals`] keeps the first reason per order.
pub trait RefusalSink {
    const RECORDS: bool;
    fn refuse(&mut self, orders: Orders, why: Refusal);
}

impl RefusalSink for () {
    const RECORDS: bool = false;
    #[inline(always)]
    fn refuse(&mut self, _: Orders, _: Refusal) {}
}

/// The first reason each order was dropped for, indexed by order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refusals(pub [Option<Refusal>; PMD_ORDER as usize + 1]);

impl RefusalSink for Refusals {
    const RECORDS: bool = true;
    fn refuse(&mut self, orders: Orders, why: Refusal) {
        for o in orders.iter_desc() {
            if let Some(slot) = self.0.get_mut(o.0 as usize) {
                slot.get_or_insert(why);
            }
        }
    }
}

impl Refusals {
    pub fn get(&self, order: Order) -> Option<Refusal> {
        self.0.get(order.0 as usize).copied().flatten()
    }
}

/// Orders in `before` that `after` lost.
#[inline(always)]
pub(crate) fn dropped(before: Orders, after: Orders) -> Orders {
    Orders(before.0 & !after.0)
}

/// The sysfs anon mask for a VMA with `vm_flags` (the first half of `thp_vma_allowable_orders`).
pub fn sysfs_anon_orders(m: &ThpMasks, vm_flags: u32) -> Orders {
    let hugepage = vm_flags & vm::HUGEPAGE != 0;
    let mut mask = m.always;
    if hugepage {
        mask = mask.or(m.madvise);
    }
    if m.global_always || (hugepage && m.global_enabled) {
        mask = mask.or(m.inherit);
    }
    mask
}

/// Why `vma_thp_disabled` holds for a VMA: `Some(reason)` when THP is off for it, as a pure
/// function of the mm's prctl flags and the VMA's flags ([`Kernel::vma_thp_disabled`] is this
/// as the kernel's bool).
pub fn vma_thp_disabled_why(mm: &MmFlags, vm_flags: u32, forced_collapse: bool) -> Option<Refusal> {
    if vm_flags & vm::NOHUGEPAGE != 0 {
        return Some(Refusal::VmNoHugepage);
    }
    if mm.disable_thp_completely {
        return Some(Refusal::PrctlDisabled);
    }
    if vm_flags & vm::HUGEPAGE != 0 || forced_collapse {
        return None;
    }
    mm.disable_thp_except_advised.then_some(Refusal::PrctlExceptAdvised)
}

/// The reason the sysfs mask drops `order` for a VMA (`hugepages-<N>kB/enabled` and top-level).
fn sysfs_refusal(m: &ThpMasks, order: Order) -> Refusal {
    if m.madvise.contains(order) {
        Refusal::SizeMadviseNotAdvised
    } else if m.inherit.contains(order) {
        if m.global_enabled {
            Refusal::InheritTopMadviseNotAdvised
        } else {
            Refusal::InheritTopNever
        }
    } else {
        Refusal::SizeNever
    }
}

/// `thp_vma_allowable_orders` + `__thp_vma_allowable_orders` for an anonymous private VMA, as a
/// pure function of the sysfs masks, the mm's prctl flags and the VMA; `sink` learns why each
/// dropped order was dropped. [`Kernel::thp_vma_allowable_orders`] is this with `()`.
pub fn anon_thp_vma_allowable_orders<S: RefusalSink>(
    m: &ThpMasks,
    mm: &MmFlags,
    vma: &Vma,
    tva: TvaType,
    orders: Orders,
    sink: &mut S,
) -> Orders {
    let mut orders = orders;
    if tva != TvaType::ForcedCollapse {
        let kept = orders.and(sysfs_anon_orders(m, vma.flags));
        if S::RECORDS {
            for o in dropped(orders, kept).iter_desc() {
                sink.refuse(Orders::single(o), sysfs_refusal(m, o));
            }
        }
        orders = kept;
        if orders.is_empty() {
            return orders;
        }
    }
    let kept = orders.and(Orders::ALL_ANON);
    sink.refuse(dropped(orders, kept), Refusal::NotThpOrder);
    orders = kept;
    if orders.is_empty() {
        return Orders::NONE;
    }
    if let Some(why) = vma_thp_disabled_why(mm, vma.flags, tva == TvaType::ForcedCollapse) {
        sink.refuse(orders, why);
        return Orders::NONE;
    }
    if matches!(tva, TvaType::Khugepaged | TvaType::ForcedCollapse) && vma.flags & vm::NO_KHUGEPAGED != 0 {
        sink.refuse(orders, Refusal::NoKhugepagedVma);
        return Orders::NONE;
    }
    if tva != TvaType::PageFault {
        // Keep orders for which an aligned block ending at vm_end fits.
        let before = orders;
        let mut o = orders;
        let mut order = o.highest();
        while let Some(ord) = order {
            if thp_vma_suitable_order(vma, vma.end - ord.size(), ord) {
                break;
            }
            order = o.next_below(ord);
        }
        orders = o;
        sink.refuse(dropped(before, orders), Refusal::NoAlignedBlock);
        if orders.is_empty() {
            return orders;
        }
        // Collapse needs an anon_vma; the page fault prepares one, smaps does not ask.
        if vma.anon_vma == 0 && tva != TvaType::Smaps {
            sink.refuse(orders, Refusal::NoAnonVma);
            return Orders::NONE;
        }
    }
    orders
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
