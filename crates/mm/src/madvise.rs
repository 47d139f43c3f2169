//! madvise, mprotect and prctl(PR_SET_THP_DISABLE).
//!
//! Kernel sources (6.18): `mm/madvise.c` (`madvise_walk_vmas`, `madvise_update_vma`,
//! `madvise_dontneed_free`), `mm/khugepaged.c: hugepage_madvise`, `mm/mprotect.c`
//! (`do_mprotect_pkey`, `mprotect_fixup`, `change_pte_range`, `can_change_pte_writable`),
//! `mm/huge_memory.c: change_huge_pmd`, `kernel/sys.c: prctl_set_thp_disable`.

use mm_types::{Order, Vaddr, PAGE_SIZE, PMD_SIZE, PUD_SHIFT};

use crate::pgtable::{Pmd, PTE_PRESENT, PTE_WRITE, PTE_ZERO};
use crate::vma::{vm, Vma};
use crate::{Errno, Kernel};

/// The advice values the model implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Madvise {
    Hugepage,
    Nohugepage,
    Dontneed,
    /// MADV_FREE (`madvise_free_single_vma`).
    Free,
    /// MADV_POPULATE_READ / MADV_POPULATE_WRITE (`madvise_populate`, mm/gup.rs).
    PopulateRead,
    PopulateWrite,
    Collapse,
    /// MADV_DONTFORK / MADV_DOFORK: VM_DONTCOPY.
    Dontfork,
    Dofork,
    /// MADV_WIPEONFORK / MADV_KEEPONFORK: VM_WIPEONFORK (private anonymous VMAs only).
    Wipeonfork,
    Keeponfork,
    /// MADV_REMOVE (`madvise_remove`): a hole punched in the shmem file a shared mapping maps.
    Remove,
}

/// `prctl(PR_SET_THP_DISABLE, ...)` forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThpDisable {
    Completely,
    ExceptAdvised,
    Clear,
}

impl Kernel {
    pub(crate) fn checked_range(start: u64, len: u64) -> Result<u64, Errno> {
        if start % PAGE_SIZE != 0 {
            return Err(Errno::EINVAL);
        }
        start.checked_add(len.div_ceil(PAGE_SIZE) * PAGE_SIZE).ok_or(Errno::EINVAL)
    }

    /// Apply `f` to the flags of every VMA piece in `[start, end)`, splitting and merging as
    /// `vma_modify_flags` does. Returns ENOMEM if part of the range is unmapped (the mapped
    /// parts are still changed, as madvise does).
    pub(crate) fn modify_flags(&mut self, start: u64, end: u64, f: impl Fn(u32) -> u32, stop_at_hole: bool) -> Result<(), Errno> {
        self.modify_vma_flags(start, end, |v| f(v.flags), stop_at_hole)
    }

    /// [`Kernel::modify_flags`] with new flags that depend on more of the VMA than its flags.
    fn modify_vma_flags(&mut self, start: u64, end: u64, f: impl Fn(&Vma) -> u32, stop_at_hole: bool) -> Result<(), Errno> {
        let mut hole = self.mm.vmas.intersecting(start, end).first().is_none_or(|v| v.start > start);
        let mut cursor = start;
        for v in self.mm.vmas.intersecting(start, end) {
            if v.start > cursor {
                hole = true;
                if stop_at_hole {
                    break;
                }
            }
            cursor = v.end;
            let (s, e) = (v.start.max(start), v.end.min(end));
            let new_flags = f(&v);
            if new_flags == v.flags {
                continue;
            }
            self.split_vmas_at(s, e);
            let mut piece = self.mm.vmas.find(s).expect("piece after split");
            piece.flags = new_flags;
            self.mm.vmas.update(piece);
            self.change_protection(&piece);
            self.mm.vmas.try_merge(piece.start);
        }
        if cursor < end {
            hole = true;
        }
        self.mm.vma_cache = None;
        if hole {
            Err(Errno::ENOMEM)
        } else {
            Ok(())
        }
    }

    /// `change_protection` for a VMA whose VM_WRITE may have changed: PTEs of anon pages follow
    /// VM_WRITE (`can_change_pte_writable`: exclusive anon pages get write back at once); the
    /// zero page stays read-only. Whole huge PMDs change in place (`change_huge_pmd`).
    fn change_protection(&mut self, vma: &Vma) {
        let write = vma.flags & vm::WRITE != 0;
        // can_change_shared_pte_writable: a shared PTE regains write only if already dirty.
        let shared = vma.flags & vm::SHARED != 0;
        let mut addr = vma.start;
        while addr < vma.end {
            let va = Vaddr(addr);
            let next = (va.align_down(Order::PMD).0 + PMD_SIZE).min(vma.end);
            let Some(t) = self.mm.pt.pmd_table(va) else {
                addr = ((addr >> PUD_SHIFT) + 1) << PUD_SHIFT;
                continue;
            };
            match self.mm.pt.pmd(t, va) {
                Pmd::Huge { pfn, young, dirty, .. } => {
                    // An anon THP fork shared (not PageAnonExclusive) stays write-protected.
                    let cow = !shared && self.zone.mem_map[pfn.idx()].flags & (crate::page_alloc::pg::ANON_SHARED | crate::page_alloc::pg::SHMEM) != 0;
                    let w = write && (!shared || dirty) && !cow;
                    self.mm.pt.set_pmd(t, va, Pmd::Huge { pfn, young, dirty, write: w })
                }
                Pmd::Table(idx) => {
                    let first = va.pte_index();
                    let last = first + ((next - addr) / PAGE_SIZE) as usize;
                    for i in first..last {
                        let e = self.mm.pt.pte(idx, i);
                        if e & PTE_PRESENT != 0 && e & PTE_ZERO == 0 {
                            // A file page in a private mapping stays read-only: a write copies it.
                            let page = crate::pgtable::pte_pfn(e);
                            let file = self.zone.mem_map[self.folio_head(page).idx()].flags & crate::page_alloc::pg::SHMEM != 0;
                            let cow = !shared && (file || self.zone.mem_map[page.idx()].flags & crate::page_alloc::pg::ANON_SHARED != 0);
                            let w = write && (!shared || e & crate::pgtable::PTE_DIRTY != 0) && !cow;
                            self.mm.pt.set_pte(idx, i, if w { e | PTE_WRITE } else { e & !PTE_WRITE });
                        }
                    }
                }
                Pmd::None | Pmd::HugeZero => {}
            }
            addr = next;
        }
    }

    /// `mprotect(start, len, prot)`.
    pub fn do_mprotect(&mut self, start: u64, len: u64, prot_flags: u32) -> Result<(), Errno> {
        let end = Self::checked_range(start, len)?;
        if end == start {
            return Ok(());
        }
        if self.mm.vmas.find(start).is_none() {
            return Err(Errno::ENOMEM);
        }
        // mprotect_fixup: a private VM_LOCKED VMA that becomes writable is populated for
        // writing at once (populate_vma_page_range: "trigger COW to avoid major fault on later
        // write access"), as glibc's mmap(PROT_NONE) then mprotect(PROT_READ | PROT_WRITE) of a
        // heap under mlockall(MCL_FUTURE) does.
        let newly_writable: Vec<(u64, u64)> = if prot_flags & vm::WRITE != 0 {
            self.mm.vmas.intersecting(start, end).iter().filter(|v| v.flags & (vm::WRITE | vm::SHARED | vm::LOCKED) == vm::LOCKED).map(|v| (v.start.max(start), v.end.min(end))).collect()
        } else {
            Vec::new()
        };
        // Commit accounting (mprotect_fixup): a private VMA made writable is charged (VM_ACCOUNT)
        // unless it already is, is shared or is VM_NORESERVE; an anonymous one made read-only
        // before any fault (no anon_vma) is uncharged. The flag keeps VMAs apart like any other.
        let r = self.modify_vma_flags(
            start,
            end,
            |v| {
                let mut f = (v.flags & !vm::ACCESS) | prot_flags;
                if prot_flags & vm::WRITE != 0 {
                    if v.flags & (vm::ACCOUNT | vm::WRITE | vm::SHARED | vm::NORESERVE) == 0 {
                        f |= vm::ACCOUNT;
                    }
                } else if v.flags & vm::ACCOUNT != 0 && v.file == 0 && v.flags & vm::SPECIAL == 0 && v.anon_vma == 0 {
                    f &= !vm::ACCOUNT;
                }
                f
            },
            true,
        );
        // change_protection → flush_tlb_range.
        self.flush_tlb_range(start, end);
        if r.is_ok() {
            for (s, e) in newly_writable {
                let _ = self.populate_range(s, e, crate::gup::Populate::Mlock);
            }
        }
        r
    }

    /// `madvise(start, len, advice)`.
    pub fn do_madvise(&mut self, start: u64, len: u64, advice: Madvise) -> Result<(), Errno> {
        let end = Self::checked_range(start, len)?;
        if end == start {
            return Ok(());
        }
        match advice {
            Madvise::Hugepage => {
                // hugepage_madvise runs khugepaged_enter_vma before the VMA changes: for a shmem
                // VMA, shmem_allowable_huge_orders reads vma->vm_flags, still without
                // VM_HUGEPAGE, so huge=advise (or a per-size `advise`) does not register the mm
                // here (checked live: docs/kernel-notes.md).
                let shmem_eligible = self
                    .mm
                    .vmas
                    .intersecting(start, end)
                    .iter()
                    .any(|v| v.file != 0 && !self.collapse_vma_allowable(v, crate::huge_memory::TvaType::Khugepaged).is_empty());
                let r = self.modify_flags(start, end, |f| (f & !vm::NOHUGEPAGE) | vm::HUGEPAGE, false);
                // hugepage_madvise: khugepaged_enter_vma for each VMA of the range.
                for v in self.mm.vmas.intersecting(start, end) {
                    if v.file == 0 {
                        self.khugepaged_enter_vma(&v);
                    }
                }
                if shmem_eligible && !self.mm.flags.vm_hugepage && self.hugepage_pmd_enabled() {
                    self.khugepaged_enter();
                }
                r
            }
            Madvise::Nohugepage => self.modify_flags(start, end, |f| (f & !vm::HUGEPAGE) | vm::NOHUGEPAGE, false),
            Madvise::Dontfork => self.modify_flags(start, end, |f| f | vm::DONTCOPY, false),
            Madvise::Dofork => self.modify_flags(start, end, |f| f & !vm::DONTCOPY, false),
            Madvise::Wipeonfork => {
                if self.mm.vmas.intersecting(start, end).iter().any(|v| v.file != 0 || v.flags & (vm::SHARED | vm::SPECIAL) != 0) {
                    return Err(Errno::EINVAL);
                }
                self.modify_flags(start, end, |f| f | vm::WIPEONFORK, false)
            }
            Madvise::Keeponfork => self.modify_flags(start, end, |f| f & !vm::WIPEONFORK, false),
            Madvise::Remove => {
                // madvise_remove, VMA by VMA: a locked VMA is EINVAL, one that is not a shared
                // (writable) file mapping EACCES; the file's range is punched.
                for v in self.mm.vmas.intersecting(start, end) {
                    let Some(ino) = v.inode().filter(|_| v.is_modelled()) else { return Err(Errno::EINVAL) };
                    if v.flags & vm::LOCKED != 0 {
                        return Err(Errno::EINVAL);
                    }
                    if v.flags & vm::SHARED == 0 {
                        return Err(Errno::EACCES);
                    }
                    let (s, e) = (start.max(v.start), end.min(v.end));
                    self.shmem_punch_hole(ino, v.linear_page_index(s) * PAGE_SIZE, e - s)?;
                }
                Ok(())
            }
            Madvise::Dontneed => {
                let vmas = self.mm.vmas.intersecting(start, end);
                if !vmas.is_empty() {
                    self.note_rss_peak();
                }
                for v in &vmas {
                    self.zap_range(v.start.max(start), v.end.min(end));
                }
                Self::covered(&vmas, start, end)
            }
            Madvise::PopulateRead => self.populate_range(start, end, crate::gup::Populate::Read).map(|_| ()),
            Madvise::PopulateWrite => self.populate_range(start, end, crate::gup::Populate::Write).map(|_| ()),
            Madvise::Free => {
                let vmas = self.mm.vmas.intersecting(start, end);
                for v in &vmas {
                    // MADV_FREE applies to private anonymous VMAs only (EINVAL otherwise).
                    if v.flags & (vm::SHARED | vm::SPECIAL) != 0 || v.file != 0 {
                        return Err(Errno::EINVAL);
                    }
                }
                for v in &vmas {
                    self.madvise_free_range(v.start.max(start), v.end.min(end));
                }
                Self::covered(&vmas, start, end)
            }
            Madvise::Collapse => {
                let vmas = self.mm.vmas.intersecting(start, end);
                for v in &vmas {
                    // The VMA may have changed (anon_vma) since the list was taken.
                    let cur = self.mm.vmas.find(v.start).unwrap_or(*v);
                    self.madvise_collapse(&cur, v.start.max(start), v.end.min(end))?;
                }
                Self::covered(&vmas, start, end)
            }
        }
    }

    /// madvise's answer for a range partly unmapped: the mapped parts were advised, ENOMEM.
    fn covered(vmas: &[Vma], start: u64, end: u64) -> Result<(), Errno> {
        if Self::covers(vmas, start, end) {
            Ok(())
        } else {
            Err(Errno::ENOMEM)
        }
    }

    fn covers(vmas: &[Vma], start: u64, end: u64) -> bool {
        let mut cursor = start;
        for v in vmas {
            if v.start > cursor {
                return false;
            }
            cursor = v.end;
        }
        cursor >= end
    }

    /// `prctl(PR_SET_THP_DISABLE, ...)`.
    pub fn prctl_set_thp_disable(&mut self, form: ThpDisable) {
        let f = &mut self.mm.flags;
        match form {
            ThpDisable::Completely => {
                f.disable_thp_completely = true;
                f.disable_thp_except_advised = false;
            }
            ThpDisable::ExceptAdvised => {
                f.disable_thp_completely = false;
                f.disable_thp_except_advised = true;
            }
            ThpDisable::Clear => {
                f.disable_thp_completely = false;
                f.disable_thp_except_advised = false;
            }
        }
    }

    /// `prctl(PR_GET_THP_DISABLE)`: 1 completely, 3 except advised, else 0.
    pub fn prctl_get_thp_disable(&self) -> u32 {
        if self.mm.flags.disable_thp_completely {
            1
        } else if self.mm.flags.disable_thp_except_advised {
            3
        } else {
            0
        }
    }
}

impl Kernel {
    /// `madvise_free_single_vma` over `[start, end)` of one private anonymous VMA. Pages stay
    /// mapped (lazyfree: reclaim would drop them, and the model has no reclaim); what shows is
    /// the splitting. `madvise_free_huge_pmd`: a PMD-mapped THP the range covers only in part is
    /// split with `split_folio` (its PMD split frozen: thp_split_pmd, split, thp_split_page, and
    /// no deferred split); the huge zero PMD is left alone. `madvise_free_pte_range`: a large
    /// folio whose PTE batch within the range is shorter than the folio is split to order 0
    /// (unless maybe mapped shared), and its PTE-by-PTE unmap (`try_to_migrate`) leaves it
    /// partially mapped for a moment, so split_deferred counts it first. [confirmed on this
    /// kernel for every mTHP size and PMD: crates/sim/src/tests.rs `madvise_free_*`]
    pub(crate) fn madvise_free_range(&mut self, start: u64, end: u64) {
        // madvise_free_pte_range clears young and dirty through the mmu_gather.
        self.flush_tlb_range(start, end);
        for (t, va, pmd_end) in self.pmd_steps(start, end) {
            let addr = va.0;
            match self.mm.pt.pmd(t, va) {
                // madvise_free_huge_pmd: a THP that fork shared is left alone.
                Pmd::Huge { pfn, .. } if !(addr % PMD_SIZE == 0 && pmd_end - addr == PMD_SIZE) && !self.folio_maybe_mapped_shared(pfn) => {
                    self.split_huge_pmd(t, va.align_down(Order::PMD));
                    self.split_folio(pfn, true);
                }
                Pmd::Table(idx) => {
                    let mut i = va.pte_index();
                    let last = i + ((pmd_end - addr) / PAGE_SIZE) as usize;
                    while i < last {
                        let e = self.mm.pt.pte(idx, i);
                        if e & PTE_PRESENT == 0 || e & PTE_ZERO != 0 {
                            i += 1;
                            continue;
                        }
                        let pfn = crate::pgtable::pte_pfn(e);
                        let head = self.folio_head(pfn);
                        let order = self.order_of_head(head);
                        if order.0 == 0 || self.zone.mem_map[head.idx()].flags & crate::page_alloc::pg::SHMEM != 0 {
                            i += 1;
                            continue;
                        }
                        // madvise_folio_pte_batch: PTEs mapping the following pages of this folio.
                        let mut n = 1;
                        while i + n < last {
                            let f = self.mm.pt.pte(idx, i + n);
                            if f & PTE_PRESENT == 0 || f & PTE_ZERO != 0 || crate::pgtable::pte_pfn(f).0 != pfn.0 + n as u32 || pfn.0 + n as u32 >= head.0 + order.nr_pages() {
                                break;
                            }
                            n += 1;
                        }
                        // Partly covered: split, unless fork shared it (folio_maybe_mapped_shared).
                        if (n as u32) < order.nr_pages() && !self.folio_maybe_mapped_shared(head) {
                            self.split_folio(head, false);
                        }
                        i += n;
                    }
                }
                _ => {}
            }
        }
    }
}
