//! VMAs: the tree of mappings of one mm, splitting and merging.
//!
//! Kernel sources (6.18): `include/linux/mm_types.h` (`struct vm_area_struct`), `mm/vma.c`
//! (`__split_vma`, `vma_merge_new_range`, `vma_merge_existing_range`, `is_mergeable_anon_vma`,
//! `can_vma_merge_before/after`), `mm/rmap.c` (`__anon_vma_prepare`, `find_mergeable_anon_vma`),
//! `mm/vma.c: unmapped_area_topdown`.
//!
//! VMAs live in a `BTreeMap` keyed by `vm_start`. Merging follows the kernel: two neighbours
//! merge when they touch, their `vm_flags` are equal and their anon_vmas are compatible (one of
//! them has none, or both have the same).
//!
//! The free gaps are kept beside them in a [`GapTree`], a search tree keyed by the start of the
//! VMA above each gap that knows the largest gap of every subtree, as the maple tree does
//! (`ma_gaps`, `mas_rev_awalk`): `unmapped_area_topdown` is O(log n) in the number of VMAs
//! instead of a walk over every VMA below the search limit.

use std::collections::BTreeMap;

use mm_types::PAGE_SIZE;

mod gap_tree;
use gap_tree::GapTree;

/// `vm_flags` bits the model uses (values are the model's, names the kernel's).
pub mod vm {
    pub const READ: u32 = 1 << 0;
    pub const WRITE: u32 = 1 << 1;
    pub const EXEC: u32 = 1 << 2;
    /// VM_HUGEPAGE (MADV_HUGEPAGE)
    pub const HUGEPAGE: u32 = 1 << 3;
    /// VM_NOHUGEPAGE (MADV_NOHUGEPAGE)
    pub const NOHUGEPAGE: u32 = 1 << 4;
    /// The flags that `anon_vma_compatible` ignores (VM_ACCESS_FLAGS).
    pub const ACCESS: u32 = READ | WRITE | EXEC;
    /// VM_SHARED
    pub const SHARED: u32 = 1 << 5;
    /// Model: `vma_is_anon_shmem` (shmem_anon_vm_ops: shared anonymous, or a shmem file that was
    /// unlinked when mapped).
    pub const ANON_SHMEM: u32 = 1 << 6;
    /// Model: address space the model does not back (file pages, the vDSO; VM_PFNMAP-like):
    /// it takes room so that placement is the kernel's, and an access to it is not modelled.
    pub const SPECIAL: u32 = 1 << 7;
    /// VM_LOCKED (mlock, mlockall, MAP_LOCKED): populated when set; a flag like any other for
    /// splitting and merging.
    pub const LOCKED: u32 = 1 << 8;
    /// VM_LOCKONFAULT (MLOCK_ONFAULT, MCL_ONFAULT): locked, but not populated.
    pub const LOCKONFAULT: u32 = 1 << 9;
    /// VM_NO_KHUGEPAGED (any of VM_IO, VM_DONTEXPAND, VM_PFNMAP, VM_MIXEDMAP, VM_HUGETLB): the
    /// model creates no such VMA; `thplab explain` sets it from a live VMA's flags.
    pub const NO_KHUGEPAGED: u32 = 1 << 10;
    /// VM_DONTCOPY (MADV_DONTFORK): fork leaves the VMA out of the child.
    pub const DONTCOPY: u32 = 1 << 11;
    /// VM_WIPEONFORK (MADV_WIPEONFORK): the child gets the VMA empty.
    pub const WIPEONFORK: u32 = 1 << 12;
    /// VM_ACCOUNT: the VMA's memory is charged to the commit limit (a private writable
    /// mapping without MAP_NORESERVE, the heap, the stack; mprotect_fixup when one becomes
    /// writable). Only its effect on merging is modelled: VMAs that differ in it stay apart.
    pub const ACCOUNT: u32 = 1 << 13;
    /// VM_NORESERVE (MAP_NORESERVE under overcommit modes 0 and 1): never charged.
    pub const NORESERVE: u32 = 1 << 14;
    /// Model: a System V shm segment's VMA, whose vm_ops are ipc/shm.c's `shm_vm_ops`: no
    /// `map_pages`, so a read fault maps its own page only (no fault-around).
    pub const SYSV_SHM: u32 = 1 << 15;
    /// VM_UFFD_MISSING (UFFDIO_REGISTER_MODE_MISSING): a fault on a none PTE (or PMD) is handed
    /// to the userfaultfd's reader, who fills the page (UFFDIO_COPY, UFFDIO_ZEROPAGE).
    pub const UFFD_MISSING: u32 = 1 << 16;
    /// VM_UFFD_WP (UFFDIO_REGISTER_MODE_WP).
    pub const UFFD_WP: u32 = 1 << 17;
    /// VM_UFFD_MINOR (UFFDIO_REGISTER_MODE_MINOR; shmem).
    pub const UFFD_MINOR: u32 = 1 << 18;
    /// `__VM_UFFD_FLAGS`: any of them is `userfaultfd_armed`. The registration's context is
    /// one per VMA in the kernel (`vm_userfaultfd_ctx`, which merging compares); the model has
    /// one context per mm, so the flags stand for it.
    pub const UFFD_ARMED: u32 = UFFD_MISSING | UFFD_WP | UFFD_MINOR;
    /// VM_HUGETLB: a hugetlb mapping (`crate::hugetlb`); set with [`SPECIAL`], so that the
    /// rest of the model leaves it alone, and the access path hands it to `hugetlb_fault`.
    pub const HUGETLB: u32 = 1 << 19;
}

/// `struct vm_area_struct` (private anonymous only, for now).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[doc(alias = "vm_area_struct")]
pub struct Vma {
    pub start: u64,
    pub end: u64,
    pub flags: u32,
    /// `vma->anon_vma`: assigned at the first fault (`__anon_vma_prepare`); 0 = none.
    pub anon_vma: u32,
    /// The shmem inode mapped, plus one; 0 for anonymous private memory.
    pub file: u32,
    /// `vm_pgoff`: file page of `start` (file VMAs only).
    pub pgoff: u64,
}

impl Vma {
    pub fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }
    pub fn len(&self) -> u64 {
        self.end - self.start
    }
    /// Memory the model backs: anonymous or shmem, not [`vm::SPECIAL`].
    pub fn is_modelled(&self) -> bool {
        self.flags & vm::SPECIAL == 0
    }
    /// The shmem inode, for file VMAs.
    pub fn inode(&self) -> Option<u32> {
        self.file.checked_sub(1)
    }
    /// File page index of `addr` (`linear_page_index`).
    pub fn linear_page_index(&self, addr: u64) -> u64 {
        (addr - self.start) / PAGE_SIZE + self.pgoff
    }
}

/// `is_mergeable_vma` + pgoff continuity: `b` directly follows `a`. A [`vm::SPECIAL`] VMA (a
/// file the model does not back, the vDSO) carries no file identity, so it never merges: the
/// kernel merges file VMAs only of one file at contiguous offsets.
fn can_merge(a: &Vma, b: &Vma) -> bool {
    a.end == b.start
        && a.flags & vm::SPECIAL == 0
        && a.flags == b.flags
        && a.file == b.file
        && anon_vma_mergeable(a.anon_vma, b.anon_vma)
        && (a.file == 0 || a.pgoff + (a.end - a.start) / PAGE_SIZE == b.pgoff)
}

/// `is_mergeable_anon_vma` for a process without fork (anon_vma chains are singular).
pub fn anon_vma_mergeable(a: u32, b: u32) -> bool {
    a == 0 || b == 0 || a == b
}

#[derive(Default)]
pub struct VmaTree {
    map: BTreeMap<u64, Vma>,
    /// The gap below every VMA: key `vm_start`, gap start the previous VMA's `vm_end` (0 for the
    /// lowest). The gap above the highest VMA is not stored; the search looks at it directly.
    gaps: GapTree,
}

impl VmaTree {
    pub fn find(&self, addr: u64) -> Option<Vma> {
        let (_, v) = self.map.range(..=addr).next_back()?;
        v.contains(addr).then_some(*v)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Vma> {
        self.map.values()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// VMAs that intersect `[start, end)`, in address order.
    pub fn intersecting(&self, start: u64, end: u64) -> Vec<Vma> {
        let mut v: Vec<Vma> = Vec::new();
        if let Some((_, first)) = self.map.range(..start).next_back() {
            if first.end > start {
                v.push(*first);
            }
        }
        v.extend(self.map.range(start..end).map(|(_, x)| *x));
        v
    }

    pub fn prev(&self, addr: u64) -> Option<Vma> {
        self.map.range(..addr).next_back().map(|(_, v)| *v)
    }

    pub fn next(&self, addr: u64) -> Option<Vma> {
        self.map.range(addr..).next().map(|(_, v)| *v)
    }

    pub fn insert(&mut self, v: Vma) {
        debug_assert!(v.start < v.end && v.start % PAGE_SIZE == 0 && v.end % PAGE_SIZE == 0);
        let old = self.map.insert(v.start, v);
        debug_assert!(old.is_none());
        self.refresh_gap(v.start);
        self.refresh_gap_after(v.start);
    }

    pub fn remove(&mut self, start: u64) -> Vma {
        let v = self.map.remove(&start).expect("VMA present");
        self.gaps.remove(start);
        self.refresh_gap_after(start);
        v
    }

    /// Replace the VMA that starts at `v.start` (its end may move).
    pub fn update(&mut self, v: Vma) {
        let old = self.map.get_mut(&v.start).expect("VMA present");
        let moved = old.end != v.end;
        *old = v;
        if moved {
            self.refresh_gap_after(v.start);
        }
    }

    /// `__split_vma`: split the VMA containing `addr` at `addr` (a no-op at a boundary).
    pub fn split_at(&mut self, addr: u64) {
        let Some(v) = self.find(addr) else { return };
        if v.start == addr {
            return;
        }
        self.map.insert(v.start, Vma { end: addr, ..v });
        let pgoff = if v.file != 0 { v.pgoff + (addr - v.start) / PAGE_SIZE } else { 0 };
        self.map.insert(addr, Vma { start: addr, pgoff, ..v });
        // The gaps below `v` and above it are unchanged; the new one between the halves is empty.
        self.gaps.insert(addr, addr);
    }

    /// Merge the VMA starting at `start` with its neighbours where the kernel would.
    pub fn try_merge(&mut self, start: u64) {
        let Some(v) = self.try_merge_prev(start) else { return };
        if let Some(n) = self.next(v.end) {
            if can_merge(&v, &n) {
                self.remove(n.start);
                self.update(Vma { end: n.end, anon_vma: n.anon_vma.max(v.anon_vma), ..v });
            }
        }
    }

    /// Merge the VMA at `start` into its predecessor only (`vmg.just_expand`, as do_brk_flags
    /// expands the heap); the VMA that holds `start` afterwards.
    pub fn try_merge_prev(&mut self, start: u64) -> Option<Vma> {
        let v = self.map.get(&start).copied()?;
        let Some(p) = self.prev(v.start).filter(|p| can_merge(p, &v)) else { return Some(v) };
        self.remove(v.start);
        let v = Vma { start: p.start, anon_vma: p.anon_vma.max(v.anon_vma), pgoff: p.pgoff, ..v };
        self.update(v);
        Some(v)
    }

    /// Set the gap below the VMA at `start` from its predecessor.
    fn refresh_gap(&mut self, start: u64) {
        let gap_start = self.prev(start).map_or(0, |p| p.end);
        self.gaps.insert(start, gap_start);
    }

    /// Set the gap below the first VMA above `start`, if any (its predecessor changed).
    fn refresh_gap_after(&mut self, start: u64) {
        if let Some((&n, _)) = self.map.range(start + 1..).next() {
            self.refresh_gap(n);
        }
    }

    /// CONFIG_DEBUG_VM_MAPLE_TREE: the gap tree agrees with the VMAs.
    pub fn check_gaps(&self) -> Result<(), String> {
        let mut want = Vec::with_capacity(self.map.len());
        let mut prev_end = 0;
        for v in self.map.values() {
            want.push((v.start, prev_end));
            prev_end = v.end;
        }
        let got = self.gaps.entries();
        if got != want {
            return Err(format!("gap tree {:?} disagrees with the VMAs {:?}", &got[..got.len().min(8)], &want[..want.len().min(8)]));
        }
        self.gaps.check()
    }

    /// `unmapped_area_topdown`: the highest `addr` below `high_limit` (and at or above
    /// `low_limit`) with `[addr, addr + len)` free and `(addr - align_offset) & align_mask == 0`.
    ///
    /// The answer is the top of the highest gap, clipped to `[low_limit, high_limit)`, that
    /// holds `len + align_mask` bytes (`vma_iter_area_highest`). Three kinds of gap: the one that
    /// reaches `high_limit` (clipped at the top, looked at directly), those wholly inside the
    /// limits (the gap tree finds the highest that is large enough in O(log n)), and the one
    /// that reaches `low_limit` (clipped at the bottom: if the tree's answer starts below
    /// `low_limit`, it is that gap or lies wholly below, and its clipped size decides).
    pub fn unmapped_area_topdown(
        &self,
        len: u64,
        low_limit: u64,
        high_limit: u64,
        align_mask: u64,
        align_offset: u64,
    ) -> Option<u64> {
        let length = len.checked_add(align_mask)?;
        if length == 0 {
            return self.unmapped_area_topdown_walk(len, low_limit, high_limit, align_mask, align_offset);
        }
        let place = |gap_end: u64| {
            let mut addr = gap_end - len;
            addr -= addr.wrapping_sub(align_offset) & align_mask;
            addr
        };
        let fits = |gap_start: u64, gap_end: u64| {
            let gap_start = gap_start.max(low_limit);
            gap_end >= gap_start && gap_end - gap_start >= length
        };
        // The highest VMA that starts below high_limit: the gap above it reaches high_limit
        // unless the VMA itself does.
        let below = self.map.range(..high_limit).next_back().map(|(_, v)| *v);
        match below {
            None => return fits(0, high_limit).then(|| place(high_limit)),
            Some(p) if p.end < high_limit && fits(p.end, high_limit) => return Some(place(high_limit)),
            Some(_) => {}
        }
        let (gap_start, gap_end) = self.gaps.highest_fitting(high_limit, length)?;
        fits(gap_start, gap_end).then(|| place(gap_end))
    }

    /// The walk `unmapped_area_topdown` did before the gap tree: over every VMA from the top
    /// down. Kept for a zero length (where an empty gap fits) and as the reference in tests.
    fn unmapped_area_topdown_walk(
        &self,
        len: u64,
        low_limit: u64,
        high_limit: u64,
        align_mask: u64,
        align_offset: u64,
    ) -> Option<u64> {
        let length = len.checked_add(align_mask)?;
        // Walk gaps from the top down: the gap above each VMA, starting with the one that
        // ends at high_limit.
        let mut gap_end = high_limit;
        let mut iter = self.map.range(..high_limit).rev().peekable();
        // A VMA straddling high_limit clips the first gap.
        loop {
            let (gap_start, next_end) = match iter.next() {
                Some((_, v)) => {
                    if v.end >= gap_end {
                        gap_end = gap_end.min(v.start);
                        continue;
                    }
                    (v.end.max(low_limit), v.start)
                }
                None => (low_limit, 0),
            };
            if gap_end >= gap_start && gap_end - gap_start >= length {
                let mut addr = gap_end - len;
                addr -= addr.wrapping_sub(align_offset) & align_mask;
                return Some(addr);
            }
            if next_end <= low_limit {
                return None;
            }
            gap_end = next_end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RW: u32 = vm::READ | vm::WRITE;

    #[test]
    fn split_and_merge() {
        let mut t = VmaTree::default();
        t.insert(Vma { start: 0x10000, end: 0x20000, flags: RW, anon_vma: 0, file: 0, pgoff: 0 });
        t.split_at(0x14000);
        t.split_at(0x18000);
        assert_eq!(t.len(), 3);
        let mut mid = t.find(0x15000).unwrap();
        mid.flags |= vm::HUGEPAGE;
        t.update(mid);
        t.try_merge(mid.start);
        assert_eq!(t.len(), 3);
        mid.flags &= !vm::HUGEPAGE;
        t.update(mid);
        t.try_merge(mid.start);
        assert_eq!(t.len(), 1);
        assert_eq!(t.find(0x1f000).unwrap().start, 0x10000);
    }

    #[test]
    fn different_anon_vmas_do_not_merge() {
        let mut t = VmaTree::default();
        t.insert(Vma { start: 0x10000, end: 0x20000, flags: RW, anon_vma: 1, file: 0, pgoff: 0 });
        t.insert(Vma { start: 0x20000, end: 0x30000, flags: RW, anon_vma: 2, file: 0, pgoff: 0 });
        t.try_merge(0x20000);
        assert_eq!(t.len(), 2);
    }

    /// The gap tree gives the same answers as the walk over every VMA, on layouts built by
    /// inserts, removals, splits, merges and end moves (a fixed-seed generator, no randomness).
    #[test]
    fn gap_tree_search_equals_the_walk() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut t = VmaTree::default();
        let mut found = [0u32; 2];
        for step in 0..4000 {
            let page = 0x1000;
            match next(6) {
                0 | 1 => {
                    let start = (16 + next(4000)) * page;
                    let end = start + (1 + next(40)) * page;
                    if t.intersecting(start, end).is_empty() {
                        let flags = if next(2) == 0 { RW } else { vm::READ };
                        t.insert(Vma { start, end, flags, anon_vma: 0, file: 0, pgoff: 0 });
                        t.try_merge(start);
                    }
                }
                2 => {
                    if let Some(v) = t.find((16 + next(4000)) * page) {
                        t.remove(v.start);
                    }
                }
                3 => t.split_at((16 + next(4000)) * page),
                4 => {
                    if let Some(v) = t.find((16 + next(4000)) * page) {
                        let limit = t.next(v.end).map_or(u64::MAX, |n| n.start);
                        let end = (v.start + (1 + next(60)) * page).min(limit);
                        t.update(Vma { end, ..v });
                    }
                }
                _ => {
                    if let Some(v) = t.find((16 + next(4000)) * page) {
                        t.try_merge(v.start);
                    }
                }
            }
            t.check_gaps().unwrap_or_else(|e| panic!("step {step}: {e}"));
            for _ in 0..8 {
                let len = (next(3) * next(64) + 1) * page;
                let low = (1 + next(2000)) * page;
                let high = low + next(5000) * page;
                let mask = [0, 0xffff, 0x1f_ffff][next(3) as usize];
                let offset = if mask == 0 { 0 } else { next(mask + 1) & !(page - 1) };
                let got = t.unmapped_area_topdown(len, low, high, mask, offset);
                found[got.is_some() as usize] += 1;
                assert_eq!(
                    got,
                    t.unmapped_area_topdown_walk(len, low, high, mask, offset),
                    "step {step}: len {len:#x} low {low:#x} high {high:#x} mask {mask:#x} offset {offset:#x}"
                );
            }
        }
        // Both outcomes are exercised often.
        assert!(found[0] > 2000 && found[1] > 2000, "{found:?}");
    }

    #[test]
    fn topdown_places_at_the_top_of_the_highest_gap() {
        let mut t = VmaTree::default();
        let top = 0x7000_0000;
        assert_eq!(t.unmapped_area_topdown(0x1000, 0x10000, top, 0, 0), Some(top - 0x1000));
        t.insert(Vma { start: top - 0x3000, end: top, flags: RW, anon_vma: 0, file: 0, pgoff: 0 });
        t.insert(Vma { start: top - 0x9000, end: top - 0x5000, flags: RW, anon_vma: 0, file: 0, pgoff: 0 });
        // The 0x2000 hole between them fits 0x2000 but not 0x3000.
        assert_eq!(t.unmapped_area_topdown(0x2000, 0x10000, top, 0, 0), Some(top - 0x5000));
        assert_eq!(t.unmapped_area_topdown(0x3000, 0x10000, top, 0, 0), Some(top - 0xc000));
        // Aligned to 64 KiB with offset 4 KiB.
        let a = t.unmapped_area_topdown(0x1000, 0x10000, top, 0xffff, 0x1000).unwrap();
        assert_eq!(a % 0x10000, 0x1000);
        assert!(a + 0x1000 <= top - 0x9000);
        assert_eq!(a, top - 0xf000);
    }
}
