//! mmap, munmap and brk for private anonymous memory, with the kernel's placement rule.
//!
//! Kernel sources (6.18): `mm/mmap.c` (`do_mmap`, `__get_unmapped_area`, `SYSCALL_DEFINE1(brk)`,
//! `check_brk_limits`), `mm/huge_memory.c` (`thp_get_unmapped_area_vmflags`,
//! `__thp_get_unmapped_area`), `mm/vma.c` (`unmapped_area_topdown`, `do_vmi_munmap`,
//! `vma_merge_new_range`, `do_brk_flags`), `arch/x86/kernel/sys_x86_64.c`
//! (`arch_get_unmapped_area_topdown`).

use mm_types::{PAGE_SIZE, PMD_SIZE, TASK_SIZE};

use crate::vma::{vm, Vma};
use crate::{Errno, Kernel};

/// `mmap_min_addr` default.
const MMAP_MIN_ADDR: u64 = 65536;

/// Where a new mapping goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmapPlacement {
    /// No hint: `__get_unmapped_area`.
    Kernel,
    /// The highest free address with `addr % align == offset`.
    Aligned { align: u64, offset: u64 },
    /// MAP_FIXED_NOREPLACE.
    FixedNoReplace(u64),
    /// A hint without MAP_FIXED: taken when the range is free, else the search runs
    /// (`arch_get_unmapped_area_topdown`); anonymous THP alignment applies only without a hint.
    Hint(u64),
}

/// What a new mapping maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapBacking {
    /// MAP_PRIVATE|MAP_ANONYMOUS.
    PrivateAnon,
    /// MAP_SHARED|MAP_ANONYMOUS: `shmem_zero_setup` makes an unlinked file on shm_mnt.
    SharedAnon,
    /// MAP_SHARED of a shmem file from page `pgoff`.
    Shmem { ino: crate::shmem::InodeId, pgoff: u64 },
    /// MAP_PRIVATE of a shmem file from page `pgoff`: placed and read as [`MapBacking::Shmem`]
    /// (page-cache folios mapped read-only, a PMD folio by a PMD), written through anonymous
    /// order-0 copies (mm/memory.c: `do_cow_fault`, `wp_page_copy`).
    ShmemPrivate { ino: crate::shmem::InodeId, pgoff: u64 },
    /// Address space the model does not back (a file's pages, the vDSO): a [`vm::SPECIAL`] VMA
    /// that only takes room, so that placement around it is the kernel's. Placed as a file
    /// without `get_unmapped_area` of its own would be (plain search).
    Special,
    /// As [`MapBacking::Special`], a file whose filesystem places mappings with
    /// `thp_get_unmapped_area` (ext4, xfs, ...), mapped from page `pgoff`: a mapping that holds
    /// a whole PMD-aligned 2 MiB of the file goes where that part is PMD-aligned in memory.
    ThpFile { pgoff: u64 },
    /// hugetlb memory (MAP_HUGETLB, a hugetlbfs or MFD_HUGETLB file): `crate::hugetlb`.
    Hugetlb(crate::hugetlb::HugetlbMap),
}

/// `PROT_*` → VM_READ/WRITE/EXEC.
pub fn prot_to_vm(read: bool, write: bool, exec: bool) -> u32 {
    (read as u32 * vm::READ) | (write as u32 * vm::WRITE) | (exec as u32 * vm::EXEC)
}

impl Kernel {
    /// `__get_unmapped_area` for a private anonymous mapping.
    pub fn get_unmapped_area(&self, len: u64, placement: MmapPlacement) -> Result<u64, Errno> {
        let low = MMAP_MIN_ADDR.max(PAGE_SIZE);
        let high = self.mm.mmap_base;
        let topdown = |len: u64, mask: u64, offset: u64| self.mm.vmas.unmapped_area_topdown(len, low, high, mask, offset);
        let addr = match placement {
            MmapPlacement::FixedNoReplace(addr) => {
                if addr % PAGE_SIZE != 0 {
                    return Err(Errno::EINVAL);
                }
                if addr.checked_add(len).is_none_or(|e| e > TASK_SIZE) {
                    return Err(Errno::ENOMEM);
                }
                if !self.mm.vmas.intersecting(addr, addr + len).is_empty() {
                    return Err(Errno::EEXIST);
                }
                addr
            }
            // __get_unmapped_area: anonymous memory of whole PMDs without a hint goes through
            // __thp_get_unmapped_area at offset 0; on failure the search runs without padding.
            MmapPlacement::Kernel if len % PMD_SIZE == 0 => match self.thp_get_unmapped_area(len, placement, 0, |l, _| topdown(l, 0, 0).ok_or(Errno::ENOMEM)) {
                Some(addr) => addr,
                None => topdown(len, 0, 0).ok_or(Errno::ENOMEM)?,
            },
            MmapPlacement::Kernel => topdown(len, 0, 0).ok_or(Errno::ENOMEM)?,
            MmapPlacement::Hint(h) => match self.hint_free(h, len) {
                true => h,
                false => topdown(len, 0, 0).ok_or(Errno::ENOMEM)?,
            },
            MmapPlacement::Aligned { align, offset } => topdown(len, align - 1, offset).ok_or(Errno::ENOMEM)?,
        };
        Ok(addr)
    }

    /// `mmap(NULL or addr, len, prot, MAP_PRIVATE|MAP_ANONYMOUS[|MAP_FIXED_NOREPLACE])`.
    pub fn do_mmap(&mut self, len: u64, prot_flags: u32, placement: MmapPlacement) -> Result<u64, Errno> {
        self.do_mmap_backed(len, prot_flags, placement, MapBacking::PrivateAnon)
    }

    /// Set `mm->mmap_base` (a replay learns it from the address space the kernel built at exec).
    pub fn set_mmap_base(&mut self, base: u64) {
        self.mm.mmap_base = base;
    }

    /// A hint is taken when page-aligned, above mmap_min_addr and free.
    fn hint_free(&self, h: u64, len: u64) -> bool {
        h % PAGE_SIZE == 0 && h >= MMAP_MIN_ADDR.max(PAGE_SIZE) && h.checked_add(len).is_some_and(|e| e <= TASK_SIZE) && self.mm.vmas.intersecting(h, h + len).is_empty()
    }

    /// Where `mmap` would place a mapping of `len` bytes (`__get_unmapped_area`, with
    /// `shmem_get_unmapped_area` for shmem), without mapping it.
    pub fn mmap_placement(&self, len: u64, placement: MmapPlacement, backing: MapBacking) -> Result<u64, Errno> {
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let len = len.checked_add(PAGE_SIZE - 1).ok_or(Errno::ENOMEM)? & !(PAGE_SIZE - 1);
        if len > TASK_SIZE {
            return Err(Errno::ENOMEM);
        }
        let (ino, pgoff) = match backing {
            MapBacking::PrivateAnon => return self.get_unmapped_area(len, placement),
            MapBacking::Hugetlb(m) => {
                let hsize = m.size.bytes();
                let len = len.checked_next_multiple_of(hsize).ok_or(Errno::ENOMEM)?;
                let p = if placement == MmapPlacement::Kernel { MmapPlacement::Aligned { align: hsize, offset: 0 } } else { placement };
                return self.get_unmapped_area(len, p);
            }
            MapBacking::ThpFile { pgoff } => {
                let plain = |len: u64, p: MmapPlacement| self.mmap_placement(len, p, MapBacking::Special);
                return match self.thp_get_unmapped_area(len, placement, pgoff * PAGE_SIZE, plain) {
                    Some(addr) => Ok(addr),
                    None => plain(len, placement),
                };
            }
            MapBacking::Special => {
                // A file: vm_unmapped_area over the page-rounded length (do_mmap: PAGE_ALIGN)
                // with no alignment (arch_get_unmapped_area_topdown: align_mask 0 for a file), so
                // a one-page hole takes a one-page file (an alignment mask of a page would ask for
                // a gap of length + mask: the locale files glibc maps after unmapping
                // ld.so.cache went elsewhere).
                let len = len.div_ceil(PAGE_SIZE) * PAGE_SIZE;
                let p = match placement {
                    MmapPlacement::Kernel => MmapPlacement::Aligned { align: 1, offset: 0 },
                    other => other,
                };
                return self.get_unmapped_area(len, p);
            }
            MapBacking::SharedAnon => (None, 0),
            MapBacking::Shmem { ino, pgoff } | MapBacking::ShmemPrivate { ino, pgoff } => (Some(ino), pgoff),
        };
        let low = MMAP_MIN_ADDR.max(PAGE_SIZE);
        let search = |l: u64| self.mm.vmas.unmapped_area_topdown(l, low, self.mm.mmap_base, 0, 0);
        match placement {
            // shmem_get_unmapped_area: a plain search, then THP alignment by the shmem rules;
            // a hint that was free is kept as it is.
            MmapPlacement::Kernel => {
                let addr = search(len).ok_or(Errno::ENOMEM)?;
                Ok(self.shmem_align_unmapped_area(ino, addr, len, pgoff, search))
            }
            MmapPlacement::Hint(h) if !self.hint_free(h, len) => {
                let addr = search(len).ok_or(Errno::ENOMEM)?;
                Ok(self.shmem_align_unmapped_area(ino, addr, len, pgoff, search))
            }
            other => self.get_unmapped_area(len, other),
        }
    }

    /// mm/huge_memory.c `__thp_get_unmapped_area` for a file at byte offset `off`: when the
    /// mapping holds a PMD-aligned 2 MiB of the file, search `len` + 2 MiB and place it so that
    /// file offset and address agree modulo 2 MiB (top-down: a result already agreeing moves up
    /// by 2 MiB); a hint free for the padded length is kept. None: the caller places it plainly.
    fn thp_get_unmapped_area(&self, len: u64, placement: MmapPlacement, off: u64, search: impl Fn(u64, MmapPlacement) -> Result<u64, Errno>) -> Option<u64> {
        if !matches!(placement, MmapPlacement::Kernel | MmapPlacement::Hint(_)) {
            return None;
        }
        let (off_end, off_align) = (off + len, off.next_multiple_of(PMD_SIZE));
        if off_end <= off_align || off_end - off_align < PMD_SIZE {
            return None;
        }
        let ret = search(len + PMD_SIZE, placement).ok()?;
        if placement == MmapPlacement::Hint(ret) {
            return Some(ret);
        }
        let off_sub = off.wrapping_sub(ret) & (PMD_SIZE - 1);
        Some(if off_sub == 0 { ret + PMD_SIZE } else { ret + off_sub })
    }

    /// `mmap` of any backing the model knows.
    pub fn do_mmap_backed(&mut self, len: u64, prot_flags: u32, placement: MmapPlacement, backing: MapBacking) -> Result<u64, Errno> {
        if let MapBacking::Hugetlb(m) = backing {
            return self.hugetlb_mmap(len, prot_flags, placement, m);
        }
        let addr = self.mmap_placement(len, placement, backing)?;
        let len = len.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let (ino, pgoff) = match backing {
            MapBacking::PrivateAnon => {
                // __mmap_region: accountable_mapping (private, writable, not VM_NORESERVE).
                let account = if prot_flags & (vm::NORESERVE | vm::SHARED | vm::WRITE) == vm::WRITE { vm::ACCOUNT } else { 0 };
                self.insert_anon_vma(addr, addr + len, prot_flags | account);
                // __mmap_region: khugepaged_enter_vma on the VMA it made or merged into (a
                // new VMA has no anon_vma yet, so only a merge can register the mm here).
                if let Some(v) = self.mm.vmas.find(addr) {
                    self.khugepaged_enter_vma(&v);
                }
                return Ok(addr);
            }
            MapBacking::Special | MapBacking::ThpFile { .. } => {
                self.mm.vmas.insert(Vma { start: addr, end: addr + len, flags: prot_flags | vm::SPECIAL, anon_vma: 0, file: 0, pgoff: 0 });
                self.mm.vma_cache = None;
                return Ok(addr);
            }
            MapBacking::SharedAnon => (None, 0),
            MapBacking::Shmem { ino, pgoff } | MapBacking::ShmemPrivate { ino, pgoff } => (Some(ino), pgoff),
            MapBacking::Hugetlb(_) => unreachable!("hugetlb_mmap above"),
        };
        let ino = match ino {
            Some(i) => i,
            None => {
                let i = self.shmem_create(crate::shmem::SHM_MNT, false);
                self.shmem.inodes[i as usize].i_size = len;
                i
            }
        };
        // A private mapping of the file has the same vm_ops (shmem_mmap) and is accounted when
        // writable (accountable_mapping).
        let mut flags = match backing {
            MapBacking::ShmemPrivate { .. } if prot_flags & (vm::NORESERVE | vm::WRITE) == vm::WRITE => prot_flags | vm::ACCOUNT,
            MapBacking::ShmemPrivate { .. } => prot_flags,
            _ => prot_flags | vm::SHARED,
        };
        if !self.shmem_inode(ino).linked {
            flags |= vm::ANON_SHMEM;
        }
        self.mm.vmas.insert(Vma { start: addr, end: addr + len, flags, anon_vma: 0, file: ino + 1, pgoff });
        self.mm.vmas.try_merge(addr);
        self.mm.vma_cache = None;
        // __mmap_region: khugepaged_enter_vma on the new (or merged) VMA; a shmem VMA needs no
        // anon_vma, so the shmem rules alone decide (huge=always/within_size, or the per-size
        // knobs of anonymous shmem).
        if let Some(v) = self.mm.vmas.find(addr) {
            self.khugepaged_enter_vma(&v);
        }
        Ok(addr)
    }

    /// Insert a fresh VMA and merge it with its neighbours (`vma_merge_new_range`).
    fn insert_anon_vma(&mut self, start: u64, end: u64, flags: u32) {
        self.mm.vmas.insert(Vma { start, end, flags, anon_vma: 0, file: 0, pgoff: 0 });
        self.mm.vmas.try_merge(start);
        self.mm.vma_cache = None;
    }

    /// `munmap(addr, len)`.
    pub fn do_munmap(&mut self, addr: u64, len: u64) -> Result<(), Errno> {
        if addr % PAGE_SIZE != 0 || len == 0 {
            return Err(Errno::EINVAL);
        }
        let end = addr.checked_add(len.div_ceil(PAGE_SIZE) * PAGE_SIZE).ok_or(Errno::EINVAL)?;
        if end > TASK_SIZE || self.hugetlb_cuts(addr, end) {
            return Err(Errno::EINVAL);
        }
        self.unmap_range(addr, end);
        Ok(())
    }

    /// `exit_mmap` (mm/mmap.c), as at exit and at execve of the old mm: every VMA zapped in
    /// address order, one at a time, then the page tables freed. What the zaps count (the
    /// deferred split of folios that straddle two VMAs, `nr_anon` going back down) is counted.
    pub fn exit_mmap(&mut self) {
        // Model-only: the contiguous page hint's chunks are dropped, not split.
        self.contig_split_range(0, TASK_SIZE, false);
        self.unmap_range(0, TASK_SIZE);
        self.khugepaged_exit();
    }

    /// `do_vmi_align_munmap`: split at the ends, zap, remove the VMAs, free page tables.
    pub(crate) fn unmap_range(&mut self, start: u64, end: u64) {
        if self.mm.vmas.intersecting(start, end).is_empty() {
            return;
        }
        self.note_rss_peak();
        self.split_vmas_at(start, end);
        // unmap_vmas zaps VMA by VMA (unmap_single_vma): a large folio that straddles two of the
        // VMAs is partially mapped between the two zaps and goes on the deferred split queue
        // (live: split_deferred counts every such folio, at munmap and at exit).
        let vmas = self.mm.vmas.intersecting(start, end);
        for v in &vmas {
            if v.flags & vm::HUGETLB != 0 {
                self.hugetlb_unmap_vma(v);
                continue;
            }
            self.zap_range(v.start, v.end);
        }
        for v in vmas {
            self.mm.vmas.remove(v.start);
        }
        self.mm.vma_cache = None;
        self.free_pgtables(start, end);
    }

    /// Split VMAs so that `start` and `end` are boundaries, splitting huge PMDs that would
    /// straddle them first (`__split_vma` → `vma_adjust_trans_huge`).
    pub(crate) fn split_vmas_at(&mut self, start: u64, end: u64) {
        for b in [start, end] {
            if let Some(v) = self.mm.vmas.find(b) {
                if v.start != b {
                    self.vma_adjust_trans_huge(b);
                    self.mm.vmas.split_at(b);
                }
            }
        }
        self.mm.vma_cache = None;
    }

    /// Set the heap's start and the break (a replayed process's `start_brk`, learnt from its
    /// first `brk(0)`), dropping any heap the model had.
    pub fn set_brk(&mut self, start_brk: u64, brk: u64) {
        let start = start_brk / PAGE_SIZE * PAGE_SIZE;
        self.mm.start_brk = start;
        self.mm.brk = brk.max(start);
    }

    /// `mremap(old, old_len, new_len, flags, new)` that the kernel answered with `result`:
    /// shrink, grow in place, or move the page tables (`move_page_tables`: whole huge PMDs when
    /// both ends are PMD-aligned, otherwise the PMD is split and PTEs move one by one).
    pub fn do_mremap(&mut self, old: u64, old_len: u64, new_len: u64, result: u64) -> Result<(), Errno> {
        let old_len = old_len.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let new_len = new_len.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let v = self.mm.vmas.find(old).ok_or(Errno::EINVAL)?;
        // A VM_LOCKED mapping that grows has its new part populated (mm/mremap.c: do_mremap →
        // mm_populate of the delta, `populate_expand`), through GUP as mlock does.
        let populate = new_len > old_len && v.flags & (vm::LOCKED | vm::LOCKONFAULT) == vm::LOCKED;
        if new_len < old_len {
            self.unmap_range(old + new_len, old + old_len);
        }
        if result == old {
            if new_len > old_len {
                self.split_vmas_at(old, old + old_len);
                let tail = Vma { start: old + old_len, end: old + new_len, ..v };
                let tail = Vma { pgoff: if v.file != 0 { v.pgoff + (tail.start - v.start) / PAGE_SIZE } else { 0 }, ..tail };
                if !self.mm.vmas.intersecting(tail.start, tail.end).is_empty() {
                    return Err(Errno::ENOMEM);
                }
                self.mm.vmas.insert(tail);
                self.mm.vmas.try_merge(tail.start);
                self.mm.vma_cache = None;
            }
            if populate {
                let _ = self.populate_range(old + old_len, old + new_len, crate::gup::Populate::Mlock);
            }
            return Ok(());
        }
        let moved = old_len.min(new_len);
        self.unmap_range(result, result + new_len);
        self.split_vmas_at(old, old + moved);
        let src = self.mm.vmas.find(old).ok_or(Errno::EINVAL)?;
        let pgoff = if src.file != 0 { src.pgoff } else { 0 };
        self.mm.vmas.insert(Vma { start: result, end: result + new_len, pgoff, ..src });
        self.mm.vma_cache = None;
        self.move_page_tables(old, result, moved)?;
        // The old range now maps nothing: drop its VMAs and page tables.
        self.unmap_range(old, old + moved);
        self.mm.vmas.try_merge(result);
        if populate {
            let _ = self.populate_range(result + old_len, result + new_len, crate::gup::Populate::Mlock);
        }
        Ok(())
    }

    fn move_page_tables(&mut self, old: u64, new: u64, len: u64) -> Result<(), Errno> {
        // move_ptes → flush_tlb_range of the old range.
        self.flush_tlb_range(old, old + len);
        // Swap entries move with their PTEs.
        if self.swap_in_range(old, old + len) {
            let (o, n) = (old / PAGE_SIZE, new / PAGE_SIZE);
            let moved: Vec<(u64, u32)> = self.mm.pt.swap.range(o..o + len / PAGE_SIZE).map(|(k, s)| (*k, *s)).collect();
            for (k, _) in &moved {
                self.mm.pt.swap.remove(k);
            }
            for (k, s) in moved {
                self.mm.pt.swap.insert(k - o + n, s);
            }
        }
        use crate::pgtable::Pmd;
        use mm_types::{Order, Vaddr};
        let mut off = 0;
        while off < len {
            let (o, n) = (old + off, new + off);
            let extent = (PMD_SIZE - o % PMD_SIZE).min(PMD_SIZE - n % PMD_SIZE).min(len - off);
            let Some(ot) = self.mm.pt.pmd_table(Vaddr(o)) else {
                off += extent;
                continue;
            };
            let nt = match self.mm.pt.pmd_table(Vaddr(n)) {
                Some(t) => t,
                None => {
                    let frame = self.alloc_pgtable_frame().ok_or(Errno::ENOMEM)?;
                    self.mm.pt.install_pmd_table(Vaddr(n), frame)
                }
            };
            match self.mm.pt.pmd(ot, Vaddr(o)) {
                Pmd::None => {}
                p @ (Pmd::Huge { .. } | Pmd::HugeZero) if extent == PMD_SIZE => {
                    // move_huge_pmd: the entry and its deposited table move whole.
                    let dep = self.mm.pt.withdraw(ot, Vaddr(o));
                    self.mm.pt.set_pmd(ot, Vaddr(o), Pmd::None);
                    self.mm.pt.set_pmd(nt, Vaddr(n), p);
                    if dep != crate::pgtable::NO_TABLE {
                        self.mm.pt.deposit(nt, Vaddr(n), dep);
                    }
                }
                p => {
                    if matches!(p, Pmd::Huge { .. } | Pmd::HugeZero) {
                        self.split_huge_pmd(ot, Vaddr(o).align_down(Order::PMD));
                    }
                    if let Pmd::Table(oi) = self.mm.pt.pmd(ot, Vaddr(o)) {
                        let ni = match self.mm.pt.pmd(nt, Vaddr(n)) {
                            Pmd::Table(i) => i,
                            _ => {
                                let i = self.alloc_pgtable().ok_or(Errno::ENOMEM)?;
                                self.mm.pt.set_pmd(nt, Vaddr(n), Pmd::Table(i));
                                i
                            }
                        };
                        for k in 0..extent / PAGE_SIZE {
                            let (os, ns) = (Vaddr(o + k * PAGE_SIZE).pte_index(), Vaddr(n + k * PAGE_SIZE).pte_index());
                            let e = self.mm.pt.pte(oi, os);
                            self.mm.pt.set_pte(oi, os, 0);
                            self.mm.pt.set_pte(ni, ns, e);
                        }
                    }
                }
            }
            off += extent;
        }
        Ok(())
    }

    /// `brk(new)`: returns the new break, or the old one when the request is refused.
    pub fn sys_brk(&mut self, new_brk: u64) -> u64 {
        if new_brk < self.mm.start_brk {
            return self.mm.brk;
        }
        let newbrk = new_brk.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let oldbrk = self.mm.brk.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        if oldbrk == newbrk {
            self.mm.brk = new_brk;
            return self.mm.brk;
        }
        if new_brk <= self.mm.brk {
            self.unmap_range(newbrk, oldbrk);
            self.mm.brk = new_brk;
            return self.mm.brk;
        }
        // check_brk_limits and the guard page before the next mapping.
        if newbrk > TASK_SIZE {
            return self.mm.brk;
        }
        if let Some(next) = self.mm.vmas.next(oldbrk) {
            if newbrk + PAGE_SIZE > next.start {
                return self.mm.brk;
            }
        }
        if self.mm.vmas.find(oldbrk).is_some() {
            return self.mm.brk;
        }
        // do_brk_flags: the data segment is read/write like an anonymous mapping. The VMA it
        // expands is vma_prev_limit(start_brk): the heap's own VMA, never the ELF's bss below
        // start_brk, so the first brk after exec makes a VMA of its own (smaps: an unnamed bss VMA,
        // then [heap]) and a folio never spans the two.
        self.mm.vmas.insert(Vma { start: oldbrk, end: newbrk, flags: vm::READ | vm::WRITE | vm::ACCOUNT, anon_vma: 0, file: 0, pgoff: 0 });
        if self.mm.vmas.prev(oldbrk).is_some_and(|p| p.end == oldbrk && p.start >= self.mm.start_brk) {
            self.mm.vmas.try_merge_prev(oldbrk);
        }
        self.mm.vma_cache = None;
        self.mm.brk = new_brk;
        self.mm.brk
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BootParams;
    use thp_abi::ThpSettings;

    /// mm/mmap.c brk: the VMA do_brk_flags may expand is `vma_prev_limit(start_brk)`. An ELF's
    /// bss ends at start_brk (vm_brk_flags at exec), so the first brk makes the heap a VMA of its
    /// own, which later brks expand: live smaps of gcc's cc1 shows `23cd000-256d000` (bss) and
    /// `256d000-282d000 [heap]`; a 512 KiB folio that spanned the two in the model went to 4 KiB
    /// pages live (cc1: 76 faults).
    #[test]
    fn the_heap_is_not_merged_into_the_bss_below_it() {
        let mut k = Kernel::boot(&BootParams { mem_bytes: 64 << 20, ..Default::default() }, &ThpSettings::default());
        let sb = 0x23cd000 + 0x1a0000;
        let bss = sb - 3 * PAGE_SIZE;
        k.do_mmap_backed(3 * PAGE_SIZE, vm::READ | vm::WRITE, MmapPlacement::FixedNoReplace(bss), MapBacking::PrivateAnon).unwrap();
        k.set_brk(sb, sb);
        assert_eq!(k.sys_brk(sb + 0x21000), sb + 0x21000);
        assert_eq!(k.sys_brk(sb + 0x2c0000), sb + 0x2c0000);
        let ranges: Vec<(u64, u64)> = k.vmas().map(|v| (v.start, v.end)).collect();
        assert_eq!(ranges, [(bss, sb), (sb, sb + 0x2c0000)]);
        // Shrunk to nothing and grown again: a new heap VMA, still apart from the bss.
        assert_eq!(k.sys_brk(sb), sb);
        assert_eq!(k.sys_brk(sb + PAGE_SIZE), sb + PAGE_SIZE);
        let ranges: Vec<(u64, u64)> = k.vmas().map(|v| (v.start, v.end)).collect();
        assert_eq!(ranges, [(bss, sb), (sb, sb + PAGE_SIZE)]);
    }

    /// Commit accounting keeps VMAs apart (mm/vma.c: accountable_mapping, mm/mprotect.c:
    /// mprotect_fixup), as smaps shows them (`ac`, `nr`): a writable part of a MAP_NORESERVE
    /// reservation is not charged and does not merge with a charged neighbour; PROT_NONE made
    /// writable is charged and merges; made read-only before its first fault it is uncharged
    /// again, after a fault (an anon_vma) it stays charged.
    #[test]
    fn vmas_that_differ_in_commit_accounting_stay_apart() {
        let mut k = Kernel::boot(&BootParams { mem_bytes: 256 << 20, ..Default::default() }, &ThpSettings::default());
        let (rw, k96) = (vm::READ | vm::WRITE, 96 << 10);
        let r = k.do_mmap_backed(8 << 20, vm::NORESERVE, MmapPlacement::Kernel, MapBacking::PrivateAnon).unwrap();
        let a = r + (2 << 20);
        k.do_mprotect(a + k96, 1 << 20, rw).unwrap();
        k.do_munmap(a, k96).unwrap();
        k.do_mmap_backed(k96, rw, MmapPlacement::FixedNoReplace(a), MapBacking::PrivateAnon).unwrap();
        let b = r + (4 << 20);
        k.do_munmap(b, k96 + (1 << 20)).unwrap();
        k.do_mmap_backed(k96, rw, MmapPlacement::FixedNoReplace(b), MapBacking::PrivateAnon).unwrap();
        k.do_mmap_backed(1 << 20, 0, MmapPlacement::FixedNoReplace(b + k96), MapBacking::PrivateAnon).unwrap();
        k.do_mprotect(b + k96, 1 << 20, rw).unwrap();
        let flags = |k: &Kernel, at: u64| k.vmas().find(|v| v.start <= at && at < v.end).map(|v| (v.start, v.end, v.flags)).unwrap();
        assert_eq!(flags(&k, a), (a, a + k96, rw | vm::ACCOUNT));
        assert_eq!(flags(&k, a + k96), (a + k96, a + k96 + (1 << 20), rw | vm::NORESERVE));
        assert_eq!(flags(&k, b), (b, b + k96 + (1 << 20), rw | vm::ACCOUNT));
        // Read-only before any fault: uncharged, so it parts from its charged neighbour.
        k.do_mprotect(b + k96, 1 << 20, vm::READ).unwrap();
        assert_eq!(flags(&k, b + k96).2, vm::READ);
        k.access(b, true);
        k.do_mprotect(b, k96, vm::READ).unwrap();
        assert_eq!(flags(&k, b).2, vm::READ | vm::ACCOUNT);
    }

    /// ld.so maps a library whole before placing its segments; on ext4 that first mapping goes
    /// through thp_get_unmapped_area. Read from a recording of java (libjvm.so's neighbour, a
    /// 2201728-byte library, under a hole ending at 0x7ffff6a00000): the kernel put it at
    /// 0x7ffff6600000, where a plain search (overlayfs, or a file under 2 MiB) puts it at
    /// 0x7ffff67e6000. A mapping whose file offset is not PMD-aligned is placed congruent to it.
    #[test]
    fn files_of_ext4_and_xfs_are_placed_by_thp_get_unmapped_area() {
        let mut k = Kernel::boot(&BootParams { mem_bytes: 64 << 20, ..Default::default() }, &ThpSettings::default());
        k.set_mmap_base(0x7fff_f6a0_0000);
        let r = vm::READ;
        assert_eq!(k.mmap_placement(2201728, MmapPlacement::Kernel, MapBacking::Special), Ok(0x7fff_f67e_6000));
        assert_eq!(k.mmap_placement(2201728, MmapPlacement::Kernel, MapBacking::ThpFile { pgoff: 0 }), Ok(0x7fff_f660_0000));
        // Under 2 MiB of the file from a PMD boundary: placed plainly.
        assert_eq!(k.mmap_placement(PMD_SIZE, MmapPlacement::Kernel, MapBacking::ThpFile { pgoff: 1 }), Ok(0x7fff_f6a0_0000 - PMD_SIZE));
        // 4 MiB from page 1: address ≡ offset (mod 2 MiB). The padded search (6 MiB) ends at the
        // top: ret = 0x7ffff6400000, plus off_sub = (4 KiB - ret) mod 2 MiB = 4 KiB.
        let at = k.do_mmap_backed(4 << 20, r, MmapPlacement::Kernel, MapBacking::ThpFile { pgoff: 1 }).unwrap();
        assert_eq!(at, 0x7fff_f640_1000);
        // A hint free for the padded length is kept; MAP_FIXED is never moved.
        assert_eq!(k.mmap_placement(4 << 20, MmapPlacement::Hint(0x5000_0000), MapBacking::ThpFile { pgoff: 0 }), Ok(0x5000_0000));
        assert_eq!(k.mmap_placement(4 << 20, MmapPlacement::FixedNoReplace(0x5000_1000), MapBacking::ThpFile { pgoff: 0 }), Ok(0x5000_1000));
    }

    /// glibc maps /etc/ld.so.cache (39199 bytes, 10 pages) top-down, unmaps it, then maps the
    /// locale files into the hole: 258 bytes at its top page, 27028 (7 pages) below, 23 and 47
    /// bytes in its last two pages (read from a recording of bash on this machine). A file takes
    /// an exact-fit one-page hole; the last one went below the next mapping down while the search
    /// asked for a page more than the length.
    #[test]
    fn a_file_mapping_fills_an_exact_fit_hole() {
        let mut k = Kernel::boot(&BootParams { mem_bytes: 64 << 20, ..Default::default() }, &ThpSettings::default());
        let r = vm::READ;
        let top = k.do_mmap_backed(8192, r | vm::WRITE, MmapPlacement::Kernel, MapBacking::PrivateAnon).unwrap();
        let cache = k.do_mmap_backed(39199, r, MmapPlacement::Kernel, MapBacking::Special).unwrap();
        assert_eq!(cache, top - 10 * PAGE_SIZE);
        k.do_mmap_backed(1 << 20, r, MmapPlacement::Kernel, MapBacking::Special).unwrap();
        k.do_munmap(cache, 39199).unwrap();
        let got: Vec<u64> = [258u64, 27028, 23, 47].iter().map(|&len| k.do_mmap_backed(len, r, MmapPlacement::Kernel, MapBacking::Special).unwrap()).collect();
        assert_eq!(got, [top - PAGE_SIZE, top - 8 * PAGE_SIZE, top - 9 * PAGE_SIZE, top - 10 * PAGE_SIZE]);
    }
}
