//! Many mms on one machine: the current mm, fork, exit, and the state fork leaves on anonymous
//! folios (shared, write-protected, no longer `PageAnonExclusive`) that copy-on-write faults read.
//!
//! Kernel sources (6.18): `kernel/fork.c` (`copy_mm`, `dup_mm`, `mm_init`: the flags a child
//! inherits, `def_flags & VM_INIT_DEF_MASK`), `include/linux/mm_types.h`
//! (`mmf_init_legacy_flags`, MMF_INIT_LEGACY_MASK), `mm/mmap.c: dup_mmap` (VM_DONTCOPY,
//! VM_WIPEONFORK, VM_LOCKED_MASK cleared), `mm/memory.c` (`copy_page_range`, `vma_needs_copy`,
//! `copy_pte_range`, `copy_present_ptes`, `__copy_present_ptes`, `do_wp_page`,
//! `wp_can_reuse_anon_folio`, `__wp_can_reuse_large_anon_folio`), `mm/huge_memory.c`
//! (`copy_huge_pmd`, `do_huge_pmd_wp_page`), `include/linux/rmap.h` (`folio_try_dup_anon_rmap_*`
//! and, with CONFIG_MM_ID, `folio_add_return_large_mapcount`, `folio_sub_return_large_mapcount`,
//! `folio_maybe_mapped_shared`), `include/linux/khugepaged.h` (`khugepaged_fork`,
//! `khugepaged_exit`), `kernel/exit.c: exit_mm` → `mmput` → `exit_mmap`.

use mm_types::{Pfn, Vaddr, PAGE_SIZE, PMD_ORDER, PMD_SIZE};

use crate::page_alloc::pg;
use crate::pgtable::{Pmd, PTE_DIRTY, PTE_PRESENT, PTE_WRITE, PTE_YOUNG, PTE_ZERO};
use crate::vma::{vm, Vma};
use crate::model::stats::ModelStats;
use crate::{Errno, Kernel, Mm, MmId};

/// `folio->_mm_ids`, `_mm_id_mapcount[2]` and `_large_mapcount` of a large anon folio
/// (CONFIG_MM_ID, which THP selects): the two mms that may map it and their mapcounts, and the
/// "maybe mapped shared" bit. Mapcounts start at -1, as the kernel keeps them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FolioMmIds {
    ids: [Option<MmId>; 2],
    mapcount: [i32; 2],
    large_mapcount: i32,
    shared: bool,
}

impl FolioMmIds {
    /// A folio whose `mapcount` mappings all belong to `owner` (`folio_set_large_mapcount`).
    fn exclusive(owner: MmId, mapcount: i32) -> FolioMmIds {
        FolioMmIds { ids: [Some(owner), None], mapcount: [mapcount - 1, -1], large_mapcount: mapcount - 1, shared: false }
    }

    /// `folio_add_return_large_mapcount`.
    fn add(&mut self, mm: MmId, diff: i32) {
        self.large_mapcount += diff;
        let new = self.large_mapcount;
        if self.ids[0] == Some(mm) {
            self.mapcount[0] += diff;
        } else if self.ids[1] == Some(mm) {
            self.mapcount[1] += diff;
        } else if self.ids[0].is_none() {
            self.ids[0] = Some(mm);
            self.mapcount[0] = diff - 1;
            if new != diff - 1 {
                self.shared = true;
            }
        } else if self.ids[1].is_none() {
            self.ids[1] = Some(mm);
            self.mapcount[1] = diff - 1;
            self.shared = true;
        }
        // A third mm finds no free slot: the folio stays "mapped shared" (set when the second
        // mm took slot 1).
    }

    /// `folio_sub_return_large_mapcount`.
    fn sub(&mut self, mm: MmId, diff: i32) {
        self.large_mapcount -= diff;
        let new = self.large_mapcount;
        for s in 0..2 {
            if self.ids[s] == Some(mm) {
                self.mapcount[s] -= diff;
                if self.mapcount[s] >= 0 {
                    return;
                }
                self.mapcount[s] = -1;
                self.ids[s] = None;
                break;
            }
        }
        if self.mapcount[0] == new || self.mapcount[1] == new {
            self.shared = false;
        }
    }

    /// The large mapcount and the slots' (mm, mapcount), as the kernel keeps them (-1 based),
    /// for `check_invariants`.
    pub(crate) fn debug_counts(&self) -> (i32, [Option<(MmId, i32)>; 2]) {
        (self.large_mapcount, [0, 1].map(|s| self.ids[s].map(|id| (id, self.mapcount[s]))))
    }

    /// `folio_maybe_mapped_shared` for a large folio.
    pub fn maybe_mapped_shared(&self) -> bool {
        self.shared
    }
}

/// What one `fork` copied (`copy_page_range` over every VMA), for the result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForkWork {
    /// Present PTEs copied into the child (zero-page PTEs included).
    pub ptes: u64,
    /// Huge PMDs copied (THPs and the huge zero folio).
    pub pmds: u64,
    /// Parent PTEs and PMDs write-protected.
    pub wrprotected: u64,
    /// Page-table pages the child allocated.
    pub pgtables: u64,
}

impl Kernel {
    /// The current mm (`current->mm`).
    pub fn current_mm(&self) -> MmId {
        self.mm.id
    }

    /// Make `id` the current mm (a context switch): system calls and accesses act on it.
    /// Panics on an id the machine never created.
    pub fn switch_mm(&mut self, id: MmId) {
        if id == self.mm.id {
            return;
        }
        let next = self.parked[id.0 as usize].take().expect("switch_mm to an mm this machine created");
        let prev = std::mem::replace(&mut self.mm, next);
        let slot = prev.id.0 as usize;
        self.parked[slot] = Some(prev);
    }

    /// Every mm the machine created, exited ones included, in creation order.
    pub fn mm_ids(&self) -> impl Iterator<Item = MmId> {
        (0..self.parked.len() as u32).map(MmId)
    }

    /// Whether `exit_mmap` ran for `id`.
    pub fn mm_exited(&self, id: MmId) -> bool {
        self.mm_ref(id).exited
    }

    pub(crate) fn mm_ref(&self, id: MmId) -> &Mm {
        if id == self.mm.id {
            &self.mm
        } else {
            self.parked[id.0 as usize].as_ref().expect("an mm this machine created")
        }
    }

    /// The current mm's counters (`current->min_flt`, MM_ANONPAGES, …).
    pub fn stats(&self) -> &ModelStats {
        &self.mm.stats
    }

    pub fn stats_mut(&mut self) -> &mut ModelStats {
        &mut self.mm.stats
    }

    /// The counters of mm `id`.
    pub fn mm_stats(&self, id: MmId) -> &ModelStats {
        &self.mm_ref(id).stats
    }

    /// `fork()` of the current mm (`copy_mm` → `dup_mm` → `dup_mmap`): a new mm with the
    /// parent's VMAs (without VM_DONTCOPY ones; VM_WIPEONFORK ones empty; VM_LOCKED cleared)
    /// and, for VMAs with an anon_vma, its page tables: anon folios shared, both sides
    /// write-protected. The current mm stays the parent. Err(ENOMEM) when a page table of the
    /// child cannot be allocated (the half-built child is torn down, as `dup_mmap` unwinds).
    pub fn fork(&mut self) -> Result<(MmId, ForkWork), Errno> {
        let id = MmId(self.parked.len() as u32);
        let mut child = Mm::new(id, self.mm.mmap_base, self.mm.start_brk);
        child.brk = self.mm.brk;
        // mm_init: the THP-disable flags are inherited (MMF_INIT_LEGACY_MASK), def_flags only
        // VM_NOHUGEPAGE (VM_INIT_DEF_MASK), MMF_HUGE_ZERO_FOLIO not (copy_huge_pmd sets it).
        child.flags.disable_thp_completely = self.mm.flags.disable_thp_completely;
        child.flags.disable_thp_except_advised = self.mm.flags.disable_thp_except_advised;
        child.flags.def_flags = self.mm.flags.def_flags & vm::NOHUGEPAGE;
        child.flags.uffd_event_fork = self.mm.flags.uffd_event_fork;
        self.parked.push(None);
        let mut work = ForkWork::default();
        let vmas: Vec<Vma> = self.mm.vmas.iter().cloned().collect();
        let mut failed = false;
        for v in vmas {
            if v.flags & vm::DONTCOPY != 0 {
                continue;
            }
            let mut tmp = v;
            tmp.flags &= !(vm::LOCKED | vm::LOCKONFAULT);
            // dup_userfaultfd: without UFFD_FEATURE_EVENT_FORK the child's VMA is unregistered.
            if !self.mm.flags.uffd_event_fork {
                tmp.flags &= !vm::UFFD_ARMED;
            }
            if v.flags & vm::WIPEONFORK != 0 {
                tmp.anon_vma = 0;
            }
            child.vmas.insert(tmp);
            if v.flags & vm::HUGETLB != 0 {
                self.hugetlb_dup_vma(id, &v);
            }
            // vma_needs_copy: only VMAs with an anon_vma have page tables worth copying; shared
            // (shmem) mappings refault from the page cache.
            if v.flags & vm::WIPEONFORK == 0 && v.anon_vma != 0 && (v.file == 0 || v.flags & vm::SHARED == 0) && !failed && self.copy_page_range(&mut child, &v, &mut work).is_err() {
                failed = true;
            }
        }
        self.parked[id.0 as usize] = Some(child);
        if !failed && self.mm.flags.vm_hugepage {
            // khugepaged_fork: the child of a registered mm is registered.
            let parent = self.mm.id;
            self.switch_mm(id);
            self.khugepaged_enter();
            self.switch_mm(parent);
        }
        if failed {
            let parent = self.mm.id;
            self.switch_mm(id);
            self.exit_mmap();
            self.switch_mm(parent);
            return Err(Errno::ENOMEM);
        }
        Ok((id, work))
    }

    /// `mm_alloc` for execve: a new, empty mm with the boot layout (`mmap_base`, heap start),
    /// not current. The old mm of an execve goes with [`Kernel::exit_mm`].
    pub fn mm_alloc(&mut self) -> MmId {
        let id = MmId(self.parked.len() as u32);
        self.parked.push(Some(Mm::new(id, self.boot_layout.0, self.boot_layout.1)));
        id
    }

    /// A page-table page for `child` (`pte_alloc_one` / `__pmd_alloc` in the new mm).
    fn child_pgtable_frame(&mut self, child: &mut Mm, work: &mut ForkWork) -> Result<Pfn, Errno> {
        let frame = self.zone.alloc_pages(mm_types::Order::BASE).ok_or(Errno::ENOMEM)?;
        self.prep_folio(frame, mm_types::Order::BASE, pg::PGTABLE);
        child.stats.pgtable_pages += 1;
        work.pgtables += 1;
        Ok(frame)
    }

    /// `copy_page_range` for one private VMA with an anon_vma (anonymous, or a private shmem
    /// mapping, whose file pages are mapped again and whose file PMDs are not copied):
    /// `copy_huge_pmd` for huge PMDs, `copy_pte_range` → `copy_present_ptes` for PTE tables.
    fn copy_page_range(&mut self, child: &mut Mm, vma: &Vma, work: &mut ForkWork) -> Result<(), Errno> {
        self.copy_swap_entries(child, vma);
        let parent = self.mm.id;
        let cow = vma.flags & vm::SHARED == 0;
        let wrprotected = work.wrprotected;
        let mut block = vma.start & !(PMD_SIZE - 1);
        while block < vma.end {
            let va = Vaddr(block);
            let lo = block.max(vma.start);
            let hi = (block + PMD_SIZE).min(vma.end);
            block += PMD_SIZE;
            let Some(t) = self.mm.pt.pmd_table(va) else { continue };
            let pmd = self.mm.pt.pmd(t, va);
            // copy_huge_pmd: a file PMD (of a private shmem mapping) is left to be refilled by a
            // fault.
            if pmd == Pmd::None || matches!(pmd, Pmd::Huge { pfn, .. } if self.zone.mem_map[pfn.idx()].flags & pg::SHMEM != 0) {
                continue;
            }
            let ct = match child.pt.pmd_table(va) {
                Some(ct) => ct,
                None => {
                    let frame = self.child_pgtable_frame(child, work)?;
                    child.pt.install_pmd_table(va, frame)
                }
            };
            match pmd {
                Pmd::None => {}
                Pmd::HugeZero => {
                    // copy_huge_pmd: the deposit table, a reference on the huge zero folio.
                    let frame = self.child_pgtable_frame(child, work)?;
                    let dep = child.pt.new_pte_table(frame);
                    child.pt.deposit(ct, va, dep);
                    child.flags.huge_zero_folio = true;
                    child.pt.set_pmd(ct, va, Pmd::HugeZero);
                    work.pmds += 1;
                }
                Pmd::Huge { pfn, dirty, write, .. } => {
                    let frame = self.child_pgtable_frame(child, work)?;
                    let dep = child.pt.new_pte_table(frame);
                    child.pt.deposit(ct, va, dep);
                    // folio_try_dup_anon_rmap_pmd: the model holds no long-term pins at fork.
                    self.folio_dup_anon_rmap(pfn, parent, child.id, 1);
                    self.zone.folio_meta_mut(pfn).entire += 1;
                    self.zone.mem_map[pfn.idx()].flags |= pg::ANON_SHARED;
                    child.stats.anon_rss_pages += 1 << PMD_ORDER;
                    if write {
                        self.mm.pt.set_pmd(t, va, Pmd::Huge { pfn, write: false, young: true, dirty });
                        work.wrprotected += 1;
                    }
                    // pmd_wrprotect, pmd_mkold.
                    child.pt.set_pmd(ct, va, Pmd::Huge { pfn, write: false, young: false, dirty });
                    work.pmds += 1;
                }
                Pmd::Table(idx) => {
                    let cidx = match child.pt.pmd(ct, va) {
                        Pmd::Table(i) => i,
                        _ => {
                            let frame = self.child_pgtable_frame(child, work)?;
                            let i = child.pt.new_pte_table(frame);
                            child.pt.set_pmd(ct, va, Pmd::Table(i));
                            i
                        }
                    };
                    let first = Vaddr(lo).pte_index();
                    let last = first + ((hi - lo) / PAGE_SIZE) as usize;
                    let present: Vec<(usize, u64)> = self.mm.pt.present_ptes(idx, first..last).collect();
                    let mut k = 0;
                    while k < present.len() {
                        let (i, e) = present[k];
                        if e & PTE_ZERO != 0 {
                            child.pt.set_pte(cidx, i, e & !PTE_YOUNG);
                            work.ptes += 1;
                            k += 1;
                            continue;
                        }
                        let page = crate::pgtable::pte_pfn(e);
                        let head = self.folio_head(page);
                        // A batch: consecutive PTEs mapping consecutive pages of one folio
                        // (folio_pte_batch; the dup is the same page by page).
                        let mut n = 1;
                        while k + n < present.len() {
                            let (j, f) = present[k + n];
                            if j != i + n || f & PTE_ZERO != 0 || crate::pgtable::pte_pfn(f).0 != page.0 + n as u32 || self.folio_head(crate::pgtable::pte_pfn(f)) != head {
                                break;
                            }
                            n += 1;
                        }
                        if self.zone.mem_map[head.idx()].flags & pg::SHMEM != 0 {
                            // A file page of a private shmem mapping: mapped read-only on both
                            // sides (folio_dup_file_rmap_ptes).
                            self.rmap_add_ptes(head, page, n as u32);
                            for &(j, f) in &present[k..k + n] {
                                child.pt.set_pte(cidx, j, f & !PTE_YOUNG);
                            }
                            child.stats.shmem_rss_pages += n as u64;
                            work.ptes += n as u64;
                            k += n;
                            continue;
                        }
                        self.folio_dup_anon_rmap(head, parent, child.id, n as i32);
                        for m in 0..n {
                            let (j, f) = present[k + m];
                            let p = &mut self.zone.mem_map[page.idx() + m];
                            p.mapcount += 1;
                            p.flags |= pg::ANON_SHARED;
                            let mut ce = f;
                            if cow && f & PTE_WRITE != 0 {
                                self.mm.pt.set_pte(idx, j, f & !PTE_WRITE);
                                work.wrprotected += 1;
                                ce &= !PTE_WRITE;
                            }
                            child.pt.set_pte(cidx, j, ce & !PTE_YOUNG);
                        }
                        child.stats.anon_rss_pages += n as u64;
                        work.ptes += n as u64;
                        k += n;
                    }
                    debug_assert!(present.iter().all(|(_, e)| e & PTE_PRESENT != 0));
                }
            }
        }
        if work.wrprotected > wrprotected {
            // The parent's write-protected entries are flushed (flush_tlb_mm at the end of
            // dup_mmap; the model flushes the VMA).
            self.log_tlb_flush(vma.start, vma.end);
        }
        Ok(())
    }

    /// After [`Kernel::fork`], with the parent current: the anonymous folios that may be
    /// DMA-pinned (pinned for the long term: io_uring-registered buffers, `[start, end)` each)
    /// are copied for the child instead of shared (mm/memory.c: `copy_present_ptes` →
    /// `folio_try_dup_anon_rmap_ptes` fails for a maybe-pinned folio → `copy_present_page`, one
    /// 4 KiB page per PTE, every page of such a folio): the child's PTE maps a new page, the
    /// parent's stays writable and its page exclusive. PTE-mapped folios only; returns the pages
    /// copied and the PMD-mapped ones left shared (the kernel splits those first).
    pub fn copy_pinned_for_child(&mut self, child: MmId, ranges: &[(u64, u64)]) -> (u64, u64) {
        let parent = self.mm.id;
        let (mut copied, mut pmd_mapped) = (0, 0);
        // Every present anonymous page of the parent in the ranges, widened to whole folios.
        let mut pages: Vec<u64> = Vec::new();
        for &(start, end) in ranges {
            let mut va = start & !(PAGE_SIZE - 1);
            while va < end {
                let v = Vaddr(va);
                va += PAGE_SIZE;
                let Some(vma) = self.mm.vmas.find(v.0).filter(|m| m.is_modelled() && m.file == 0 && m.flags & vm::SHARED == 0) else { continue };
                let Some(t) = self.mm.pt.pmd_table(v) else { continue };
                match self.mm.pt.pmd(t, v) {
                    Pmd::Table(idx) => {
                        let e = self.mm.pt.pte(idx, v.pte_index());
                        if e & PTE_PRESENT == 0 || e & PTE_ZERO != 0 {
                            continue;
                        }
                        let page = crate::pgtable::pte_pfn(e);
                        let head = self.folio_head(page);
                        let first = v.0 - (page.0 - head.0) as u64 * PAGE_SIZE;
                        let nr = 1u64 << self.zone.mem_map[head.idx()].order;
                        for k in 0..nr {
                            let a = first + k * PAGE_SIZE;
                            if (vma.start..vma.end).contains(&a) {
                                pages.push(a);
                            }
                        }
                    }
                    Pmd::Huge { .. } => pmd_mapped += 1,
                    _ => {}
                }
            }
        }
        pages.sort_unstable();
        pages.dedup();
        for a in pages {
            let v = Vaddr(a);
            let Some(Pmd::Table(pidx)) = self.mm.pt.pmd_table(v).map(|t| self.mm.pt.pmd(t, v)) else { continue };
            let pe = self.mm.pt.pte(pidx, v.pte_index());
            if pe & PTE_PRESENT == 0 || pe & PTE_ZERO != 0 {
                continue;
            }
            let page = crate::pgtable::pte_pfn(pe);
            self.switch_mm(child);
            let mut done = false;
            if let (Some(mut cvma), Some(Pmd::Table(cidx))) = (self.mm.vmas.find(a), self.mm.pt.pmd_table(v).map(|t| self.mm.pt.pmd(t, v))) {
                let ce = self.mm.pt.pte(cidx, v.pte_index());
                if ce & PTE_PRESENT != 0 && crate::pgtable::pte_pfn(ce) == page {
                    let head = self.folio_head(page);
                    if self.wp_page_copy(&mut cvma, v, cidx, Some((head, page))) == crate::Access::Fault {
                        // A copy at fork, not a copy-on-write fault.
                        self.mm.stats.cow_copied -= 1;
                        done = true;
                    }
                }
            }
            self.switch_mm(parent);
            if done {
                copied += 1;
                self.zone.mem_map[page.idx()].flags &= !pg::ANON_SHARED;
                if self.mm.vmas.find(a).is_some_and(|m| m.flags & vm::WRITE != 0) && pe & PTE_DIRTY != 0 {
                    self.mm.pt.set_pte(pidx, v.pte_index(), pe | PTE_WRITE);
                }
            }
        }
        (copied, pmd_mapped)
    }

    /// `folio_try_dup_anon_rmap_ptes`/`_pmd` for the mm ids of a large folio: the child's
    /// `diff` mappings join the parent's.
    fn folio_dup_anon_rmap(&mut self, head: Pfn, parent: MmId, child: MmId, diff: i32) {
        if self.zone.mem_map[head.idx()].order == 0 {
            return;
        }
        let mapcount = self.folio_large_mapcount(head) as i32;
        self.folio_mm_ids.entry(head).or_insert_with(|| FolioMmIds::exclusive(parent, mapcount)).add(child, diff);
    }

    /// `folio_large_mapcount`: every PTE mapping of a page of the folio plus every PMD mapping.
    pub(crate) fn folio_large_mapcount(&self, head: Pfn) -> u32 {
        let order = self.order_of_head(head);
        let pages = &self.zone.mem_map[head.idx()..head.idx() + order.nr_pages() as usize];
        self.zone.entire_mapcount(head) + pages.iter().map(|p| p.mapcount as u32).sum::<u32>()
    }

    /// The current mm mapped `diff` more pages (or PMDs) of the large folio `head`.
    #[inline]
    pub(crate) fn large_mapcount_add(&mut self, head: Pfn, diff: i32) {
        if !self.folio_mm_ids.is_empty() {
            let mm = self.mm.id;
            if let Some(ids) = self.folio_mm_ids.get_mut(&head) {
                ids.add(mm, diff);
            }
        }
    }

    /// The current mm unmapped `diff` pages (or PMDs) of the large folio `head`.
    #[inline]
    pub(crate) fn large_mapcount_sub(&mut self, head: Pfn, diff: i32) {
        if !self.folio_mm_ids.is_empty() {
            let mm = self.mm.id;
            if let Some(ids) = self.folio_mm_ids.get_mut(&head) {
                ids.sub(mm, diff);
            }
        }
    }

    /// `folio_maybe_mapped_shared`: a small folio mapped more than once, a large one whose mm
    /// ids say two mms map it.
    pub(crate) fn folio_maybe_mapped_shared(&self, head: Pfn) -> bool {
        if self.zone.mem_map[head.idx()].order == 0 {
            return self.zone.mem_map[head.idx()].mapcount > 1;
        }
        self.folio_mm_ids.get(&head).is_some_and(|ids| ids.shared)
    }

    /// `wp_can_reuse_anon_folio` for the folio of `page` (the model's folios hold one reference
    /// per mapping and nothing else: no swap cache, no pins, the LRU caches drained).
    pub(crate) fn wp_can_reuse_anon_folio(&self, head: Pfn) -> bool {
        if self.zone.mem_map[head.idx()].order == 0 {
            return self.zone.mem_map[head.idx()].mapcount == 1;
        }
        // __wp_can_reuse_large_anon_folio: a large folio with one page mapped is left to be
        // freed; otherwise reuse when all its mappings are this mm's.
        self.folio_large_mapcount(head) > 1 && !self.folio_maybe_mapped_shared(head)
    }

    /// `exit_mm` of the current mm: `exit_mmap` (every VMA zapped, page tables freed, the mm off
    /// khugepaged's list, the huge zero folio reference dropped). Its counters stay readable.
    pub fn exit_mm(&mut self) {
        self.exit_mmap();
        self.mm.flags.huge_zero_folio = false;
        self.mm.exited = true;
    }
}

#[cfg(test)]
mod tests {
    use crate::mmap::{MapBacking, MmapPlacement};
    use crate::vma::vm;
    use crate::{BootParams, Kernel};
    use thp_abi::ThpSettings;

    /// A 64 KiB mTHP folio pinned for the long term (an io_uring buffer of its first 8 KiB) and
    /// an unpinned one beside it, then fork: every page of the pinned folio is copied for the
    /// child (16 new 4 KiB pages: copy_present_page works on the whole maybe-pinned folio), the
    /// parent keeps its folio writable; the other folio is shared, write-protected in both.
    #[test]
    fn a_fork_copies_pinned_folios_for_the_child() {
        let mut s = ThpSettings::default();
        for a in ["enabled=never", "hugepages-64kB/enabled=always"] {
            s.apply_assignment(a).unwrap();
        }
        let mut k = Kernel::boot(&BootParams { mem_bytes: 256 << 20, ..Default::default() }, &s);
        let a = k.do_mmap(2 << 20, vm::READ | vm::WRITE, MmapPlacement::Kernel).unwrap();
        k.access(a, true);
        k.access(a + 0x10000, true);
        let parent = k.current_mm();
        let (child, _) = k.fork().unwrap();
        assert_eq!(k.copy_pinned_for_child(child, &[(a, a + 0x2000)]), (16, 0));
        let (p0, p1) = (k.translation(a + 0x3000).unwrap(), k.translation(a + 0x13000).unwrap());
        assert!(p0.write && p0.folio_order == 4, "the parent's pinned folio: still its own, writable");
        assert!(!p1.write, "the unpinned folio is shared copy-on-write");
        k.switch_mm(child);
        let (c0, c1) = (k.translation(a + 0x3000).unwrap(), k.translation(a + 0x13000).unwrap());
        assert_eq!(c0.folio_order, 0, "the child has a 4 KiB copy");
        assert_ne!(c0.pfn, p0.pfn);
        assert_eq!(c1.pfn, p1.pfn, "the unpinned folio is the parent's");
        k.switch_mm(parent);
        k.check_invariants().unwrap();
    }

    /// A private shmem mapping at fork (shmem_enabled=always, a memfd mapped MAP_PRIVATE at
    /// 2 MiB): its file PMDs are not copied (copy_huge_pmd leaves a file PMD to the next
    /// fault), its anonymous copies are shared write-protected, as in an anonymous VMA.
    /// Parent: 0-2 MiB read (a PMD), 2-4 MiB written (512 copies), 4 MiB read then one page
    /// written (that PMD split: zapped, one copy). Child: no mapping at 0 until its read maps
    /// the cached PMD folio by a PMD; a write at 2 MiB copies the shared page.
    #[test]
    fn a_fork_of_a_private_shmem_mapping_shares_copies_not_file_pmds() {
        let mut s = ThpSettings::default();
        s.apply_assignment("shmem_enabled=always").unwrap();
        let mut k = Kernel::boot(&BootParams { mem_bytes: 256 << 20, ..Default::default() }, &s);
        let ino = k.shmem_create(crate::shmem::SHM_MNT, false);
        k.shmem_ftruncate(ino, 8 << 20).unwrap();
        let placement = MmapPlacement::Aligned { align: 2 << 20, offset: 0 };
        let a = k.do_mmap_backed(8 << 20, vm::READ | vm::WRITE, placement, MapBacking::ShmemPrivate { ino, pgoff: 0 }).unwrap();
        let mb = 1u64 << 20;
        k.access(a, false);
        for off in (2 * mb..4 * mb).step_by(4096) {
            k.access(a + off, true);
        }
        k.access(a + 4 * mb, false);
        assert!(k.translation(a + 4 * mb).unwrap().pmd);
        k.access(a + 4 * mb, true);
        k.check_invariants().unwrap();
        let (p0, p2) = (k.translation(a).unwrap(), k.translation(a + 2 * mb).unwrap());
        assert!(p0.pmd && !p0.write, "a private file PMD is read-only");
        assert!(p2.write && p2.folio_order == 0, "a written page is an order-0 anonymous copy");
        let p4 = k.translation(a + 4 * mb).unwrap();
        assert!(p4.write && p4.folio_order == 0 && k.translation(a + 4 * mb + 4096).is_none(), "the write zapped the PMD and copied one page");
        let parent = k.current_mm();
        let (child, _) = k.fork().unwrap();
        assert!(!k.translation(a + 2 * mb).unwrap().write, "fork write-protects the parent's copies");
        k.switch_mm(child);
        assert!(k.translation(a).is_none(), "the file PMD is not copied");
        let c2 = k.translation(a + 2 * mb).unwrap();
        assert!(c2.pfn == p2.pfn && !c2.write, "the copies are shared, write-protected");
        assert_eq!(k.translation(a + 4 * mb).unwrap().pfn, p4.pfn);
        k.access(a, false);
        assert_eq!(k.translation(a).unwrap().pfn, p0.pfn, "a read maps the cached PMD folio again");
        assert!(k.translation(a).unwrap().pmd);
        k.access(a + 2 * mb, true);
        let c2 = k.translation(a + 2 * mb).unwrap();
        assert!(c2.pfn != p2.pfn && c2.write, "a write in the child copies");
        k.check_invariants().unwrap();
        k.switch_mm(parent);
        k.check_invariants().unwrap();
    }
}
