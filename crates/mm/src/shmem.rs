//! shmem and tmpfs: inodes with a page cache of folios of any file order, mounts with `huge=`,
//! the order rules, the write, fallocate, hole-punch and ftruncate paths (a large folio across
//! a hole's edge split as 6.18 splits it) and `shmem_get_unmapped_area`. The
//! fault side (fault-around, `finish_fault`, `do_set_pmd`) is in `memory.rs`.
//!
//! Kernel sources (6.18): `mm/shmem.c` (`shmem_huge_global_enabled`,
//! `shmem_get_orders_within_size`, `shmem_allowable_huge_orders`, `shmem_suitable_orders`,
//! `shmem_alloc_and_add_folio`, `shmem_get_folio_gfp`, `shmem_write_begin`, `shmem_write_end`,
//! `shmem_fallocate`, `shmem_setattr`, `shmem_undo_range`, `shmem_get_unmapped_area`,
//! `shmem_zero_setup`, `shmem_mmap`), `mm/filemap.c` (`generic_perform_write` chunking),
//! `mm/truncate.c` (`truncate_inode_partial_folio`), `mm/huge_memory.c` (`__folio_split`,
//! `__split_unmapped_folio`), `mm/memfd.c`.

use std::collections::BTreeMap;

use mm_types::{Order, Orders, Pfn, PAGE_SIZE, PMD_ORDER};
use thp_abi::settings::{ShmemEnabled, ShmemSizeEnabled};
use thp_abi::{MthpStat, VmEvent};

use crate::huge_memory::{dropped, thp_vma_suitable_order, vma_thp_disabled_why, Refusal, RefusalSink, TvaType};
use crate::page_alloc::pg;
use crate::vma::{vm, Vma};
use crate::{Errno, Kernel, MmFlags};

/// How [`Kernel::shmem_unmap_file_range`] takes a file's pages out of the mappings of a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unmap {
    /// `unmap_mapping_range` (even_cows 0): the file's pages; a huge PMD the range covers whole
    /// is zapped, one it covers in part split (for a file PMD: zapped, `thp_split_pmd`).
    Range,
    /// `unmap_mapping_range` with even_cows (truncation): a private mapping's anonymous copies
    /// of the range go too.
    RangeAndCopies,
    /// `try_to_unmap` with TTU_SPLIT_HUGE_PMD, for a folio about to be split: every PMD that
    /// maps it is split.
    Folio,
}

/// A mount's `huge=` (`SHMEM_HUGE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SbHuge {
    Never,
    Always,
    WithinSize,
    Advise,
}

/// Which mount: the internal one (memfd, shared anonymous, SysV), /dev/shm, or one declared.
pub type SbId = u32;
/// The internal mount (`shm_mnt`): its `huge` is the top-level `shmem_enabled`.
pub const SHM_MNT: SbId = 0;
/// The machine's /dev/shm.
pub const DEV_SHM: SbId = 1;

pub type InodeId = u32;

/// One folio in a page cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheFolio {
    pub pfn: Pfn,
    pub order: u8,
    /// `folio_test_uptodate`: false for fallocated folios until first touched.
    pub uptodate: bool,
}

/// A shmem inode.
#[derive(Clone, Debug, Default)]
pub struct ShmemInode {
    pub sb: SbId,
    pub i_size: u64,
    /// Linked files (tmpfs, POSIX shm) follow the mount's `huge=` when mapped; unlinked ones
    /// (memfd, shared anonymous) get the anon-shmem VMA ops and the per-size knobs (`shmem_mmap`).
    pub linked: bool,
    /// Folio start index → folio.
    pub cache: BTreeMap<u64, CacheFolio>,
    /// `shmem_inode_info.fallocend`: the page after the last one `fallocate` allocated, so that
    /// a split does not drop as beyond EOF the folios FALLOC_FL_KEEP_SIZE put there.
    pub fallocend: u64,
}

impl ShmemInode {
    /// The folio covering `index` and its start index.
    pub fn lookup(&self, index: u64) -> Option<(u64, CacheFolio)> {
        let (&start, f) = self.cache.range(..=index).next_back()?;
        (index < start + (1 << f.order)).then_some((start, *f))
    }
    /// Whether any entry overlaps `[first, first + n)` (`xa_find(..., XA_PRESENT)`).
    pub fn any_in(&self, first: u64, n: u64) -> bool {
        self.lookup(first).is_some() || self.cache.range(first..first + n).next().is_some()
    }
    pub fn pages(&self) -> u64 {
        self.i_size.div_ceil(PAGE_SIZE)
    }
}

#[derive(Default)]
pub struct Shmem {
    pub sb_huge: Vec<SbHuge>,
    pub inodes: Vec<ShmemInode>,
    /// Folio head → (inode, start index): the page cache's reverse map, for checks.
    pub owner: BTreeMap<u32, (InodeId, u64)>,
}

/// How `shmem_get_folio_gfp` was called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sgp {
    /// A fault: the folio is cleared and uptodate.
    Cache,
    /// write(): uptodate once written.
    Write,
    /// fallocate(): allocated but not uptodate.
    Falloc,
}

impl Kernel {
    /// The top-level `shmem_enabled` as `shmem_huge`.
    fn shmem_huge(&self) -> ShmemEnabled {
        self.settings.shmem_enabled
    }

    /// `huge=` of a mount, with shm_mnt following the top-level knob (`shmem_enabled_store`
    /// leaves it alone for deny and force, which the model takes as never).
    pub(crate) fn sb_huge(&self, sb: SbId) -> SbHuge {
        if sb == SHM_MNT {
            return shm_mnt_huge(&self.settings);
        }
        self.shmem.sb_huge[sb as usize]
    }

    /// Mount a tmpfs with `huge=`.
    pub fn shmem_mount(&mut self, huge: SbHuge) -> SbId {
        self.shmem.sb_huge.push(huge);
        (self.shmem.sb_huge.len() - 1) as SbId
    }

    /// A new shmem file on `sb` (`shmem_get_inode`); `linked` for files with a name.
    pub fn shmem_create(&mut self, sb: SbId, linked: bool) -> InodeId {
        self.shmem.inodes.push(ShmemInode { sb, linked, ..Default::default() });
        (self.shmem.inodes.len() - 1) as InodeId
    }

    pub fn shmem_inode(&self, ino: InodeId) -> &ShmemInode {
        &self.shmem.inodes[ino as usize]
    }

    fn orders_of(&self, which: ShmemSizeEnabled) -> Orders {
        self.settings.shmem_orders(which)
    }

    /// What the order rules need to know about an inode.
    pub(crate) fn inode_facts(&self, ino: InodeId) -> ShmemInodeFacts {
        let inode = &self.shmem.inodes[ino as usize];
        ShmemInodeFacts { sb_huge: self.sb_huge(inode.sb), i_size: inode.i_size }
    }

    /// `shmem_allowable_huge_orders` (with `shmem_huge_force` false: the fault and write paths).
    pub(crate) fn shmem_allowable_huge_orders(&self, ino: InodeId, vma: Option<&Vma>, index: u64, write_end: u64) -> Orders {
        shmem_allowable_huge_orders_why(&self.settings, &self.mm.flags, self.inode_facts(ino), vma, index, write_end, false, &mut ())
    }

    /// `shmem_suitable_orders`: VMA geometry (file alignment included), then the highest order
    /// whose aligned index range has no page-cache entry.
    fn shmem_suitable_orders(&self, ino: InodeId, vma: Option<(&Vma, u64)>, index: u64, orders: Orders) -> Orders {
        let mut o = orders;
        if let Some((v, addr)) = vma {
            o = file_vma_suitable_orders(v, addr, o);
        }
        let inode = &self.shmem.inodes[ino as usize];
        let mut order = o.highest();
        while let Some(ord) = order {
            let n = ord.nr_pages() as u64;
            if !inode.any_in(index / n * n, n) {
                break;
            }
            order = o.next_below(ord);
        }
        o
    }

    /// `shmem_get_folio_gfp`: the folio at `index`, allocated (largest allowed order first) if
    /// absent. Returns the folio's start index and head, or None when even order 0 fails.
    pub(crate) fn shmem_get_folio(&mut self, ino: InodeId, index: u64, write_end: u64, sgp: Sgp, vma: Option<(&Vma, u64)>) -> Option<(u64, Pfn)> {
        if let Some((start, f)) = self.shmem.inodes[ino as usize].lookup(index) {
            if sgp == Sgp::Cache && !f.uptodate {
                // A fallocated folio is cleared and marked uptodate at its first fault.
                self.shmem.inodes[ino as usize].cache.get_mut(&start).expect("entry").uptodate = true;
            }
            return Some((start, f.pfn));
        }
        let orders = self.shmem_allowable_huge_orders(ino, vma.map(|(v, _)| v), index, write_end);
        let mut got = None;
        if !orders.is_empty() {
            let mut suitable = self.shmem_suitable_orders(ino, vma, index, orders);
            let mut order = suitable.highest();
            // shmem_get_folio_gfp: `huge_gfp = vma_thp_gfp_mask(vma)` (no VMA: not madvised).
            let madvised = vma.is_some_and(|(v, _)| v.flags & crate::vma::vm::HUGEPAGE != 0);
            let gfp = crate::page_alloc::vma_thp_gfp_mask(self.settings.defrag, madvised);
            while let Some(o) = order {
                if let Some(pfn) = self.alloc_folio_gfp(o, false, gfp) {
                    got = Some((o, pfn));
                    break;
                }
                if o == Order::PMD {
                    self.counters.count(VmEvent::ThpFileFallback);
                }
                self.counters.count_mthp(o, MthpStat::ShmemFallback);
                order = suitable.next_below(o);
            }
            if let Some((o, _)) = got {
                if o == Order::PMD {
                    self.counters.count(VmEvent::ThpFileAlloc);
                }
                self.counters.count_mthp(o, MthpStat::ShmemAlloc);
            }
        }
        let (order, pfn) = match got {
            Some(g) => g,
            None => (Order::BASE, self.alloc_folio(Order::BASE, false)?),
        };
        let n = order.nr_pages() as u64;
        let start = index / n * n;
        self.zone.mem_map[pfn.idx()].flags |= pg::SHMEM;
        self.shmem.inodes[ino as usize].cache.insert(start, CacheFolio { pfn, order: order.0, uptodate: sgp == Sgp::Cache });
        self.shmem.owner.insert(pfn.0, (ino, start));
        Some((start, pfn))
    }

    /// A file that held `size` bytes before the run (a replay finds it on a tmpfs): uptodate
    /// 4 KiB folios, allocated without counting (they are not the program's allocations).
    pub fn shmem_populate_order0(&mut self, ino: InodeId, size: u64) -> Result<(), Errno> {
        for index in 0..size.div_ceil(PAGE_SIZE) {
            if self.shmem.inodes[ino as usize].lookup(index).is_some() {
                continue;
            }
            let pfn = self.alloc_folio(Order::BASE, false).ok_or(Errno::ENOMEM)?;
            self.zone.mem_map[pfn.idx()].flags |= pg::SHMEM;
            self.shmem.inodes[ino as usize].cache.insert(index, CacheFolio { pfn, order: 0, uptodate: true });
            self.shmem.owner.insert(pfn.0, (ino, index));
        }
        let inode = &mut self.shmem.inodes[ino as usize];
        inode.i_size = inode.i_size.max(size);
        Ok(())
    }

    /// `ftruncate` (`shmem_setattr`): a file grows by its size alone; one that shrinks gets the
    /// new size first, then loses what lies beyond it as a hole does, from every mapping
    /// including a private mapping's anonymous copies (`unmap_mapping_range` with even_cows,
    /// then `shmem_truncate_range(size, -1)`): the folio across the new end is split there,
    /// the folios beyond it are freed.
    pub fn shmem_ftruncate(&mut self, ino: InodeId, size: u64) -> Result<(), Errno> {
        let old = self.shmem.inodes[ino as usize].i_size;
        self.shmem.inodes[ino as usize].i_size = size;
        if size < old {
            let first = size.div_ceil(PAGE_SIZE);
            if old > first * PAGE_SIZE {
                self.shmem_unmap_file_range(ino, first, u64::MAX - first, Unmap::RangeAndCopies);
            }
            self.shmem_undo_range(ino, size, u64::MAX);
        }
        Ok(())
    }

    /// One `pwrite` of `[offset, offset + len)`, split by `generic_perform_write` into
    /// per-folio pieces of at most 2 MiB (`mapping_max_folio_size`).
    pub fn shmem_write(&mut self, ino: InodeId, offset: u64, len: u64) -> Result<(), Errno> {
        let end = offset + len;
        let mut pos = offset;
        while pos < end {
            let max = Order::PMD.size();
            let bytes = (max - pos % max).min(end - pos);
            let index = pos / PAGE_SIZE;
            let (start, _) = self.shmem_get_folio(ino, index, pos + bytes, Sgp::Write, None).ok_or(Errno::ENOMEM)?;
            let inode = &mut self.shmem.inodes[ino as usize];
            let f = inode.cache.get_mut(&start).expect("entry");
            let folio_end = (start + (1u64 << f.order)) * PAGE_SIZE;
            let copied = bytes.min(folio_end - pos);
            // shmem_write_end: grow i_size, and a folio not yet uptodate is zeroed around the
            // copy and marked uptodate.
            f.uptodate = true;
            inode.i_size = inode.i_size.max(pos + copied);
            pos += copied;
        }
        Ok(())
    }

    /// `fallocate(fd, 0, offset, len)`.
    pub fn shmem_fallocate(&mut self, ino: InodeId, offset: u64, len: u64) -> Result<(), Errno> {
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let end = (offset + len).div_ceil(PAGE_SIZE);
        let inode = &mut self.shmem.inodes[ino as usize];
        inode.fallocend = inode.fallocend.max(end);
        let mut index = offset / PAGE_SIZE;
        while index < end {
            let (start, _) = self.shmem_get_folio(ino, index, offset + len, Sgp::Falloc, None).ok_or(Errno::ENOMEM)?;
            let order = self.shmem.inodes[ino as usize].cache[&start].order;
            index = start + (1u64 << order);
        }
        let inode = &mut self.shmem.inodes[ino as usize];
        inode.i_size = inode.i_size.max(offset + len);
        Ok(())
    }

    /// `fallocate(fd, FALLOC_FL_KEEP_SIZE, offset, len)`: the folios, not the size.
    pub fn shmem_fallocate_keep_size(&mut self, ino: InodeId, offset: u64, len: u64) -> Result<(), Errno> {
        let size = self.shmem.inodes[ino as usize].i_size;
        let r = self.shmem_fallocate(ino, offset, len);
        self.shmem.inodes[ino as usize].i_size = size;
        r
    }

    /// `fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, len)`, which
    /// MADV_REMOVE also is (`madvise_remove` → `vfs_fallocate`). `shmem_fallocate` unmaps the
    /// hole's whole pages from every mapping (`unmap_mapping_range`), then `shmem_undo_range`
    /// gives the folio holding the hole's first byte and the one holding its last to
    /// `truncate_inode_partial_folio`, which splits a large folio that reaches outside the hole
    /// at the hole's edges (`try_folio_split_or_unmap`), and removes every folio inside the hole.
    /// Partial pages at the edges are zeroed in place: nothing the model tracks.
    pub fn shmem_punch_hole(&mut self, ino: InodeId, offset: u64, len: u64) -> Result<(), Errno> {
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let (first, end) = (offset.div_ceil(PAGE_SIZE), (offset + len) / PAGE_SIZE);
        if end > first {
            self.shmem_unmap_file_range(ino, first, end - first, Unmap::Range);
        }
        self.shmem_undo_range(ino, offset, offset + len - 1);
        Ok(())
    }

    /// `shmem_undo_range` of the bytes `[lstart, lend]` (`lend` u64::MAX: to the end of the
    /// file), the mappings already gone: the folio holding the first byte and the one holding
    /// the last go to `truncate_inode_partial_folio`, then every folio wholly inside is freed.
    fn shmem_undo_range(&mut self, ino: InodeId, lstart: u64, lend: u64) {
        let first = lstart.div_ceil(PAGE_SIZE);
        let end = if lend == u64::MAX { u64::MAX } else { (lend + 1) / PAGE_SIZE };
        let inode = &mut self.shmem.inodes[ino as usize];
        if inode.fallocend > first && inode.fallocend <= end {
            inode.fallocend = first;
        }
        let at_start = self.shmem.inodes[ino as usize].lookup(lstart / PAGE_SIZE);
        let same_folio = match at_start {
            Some((start, f)) => lend / PAGE_SIZE < start + (1 << f.order),
            None => lstart / PAGE_SIZE == lend / PAGE_SIZE,
        };
        if let Some((start, f)) = at_start {
            self.truncate_inode_partial_folio(ino, start, f, lstart, lend);
        }
        if !same_folio {
            if let Some((start, f)) = self.shmem.inodes[ino as usize].lookup(lend / PAGE_SIZE) {
                self.truncate_inode_partial_folio(ino, start, f, lstart, lend);
            }
        }
        // The whole folios inside (truncate_inode_folio): unmapped already, freed.
        let inside: Vec<(u64, CacheFolio)> = self.shmem.inodes[ino as usize]
            .cache
            .range(first..end.max(first))
            .filter(|(k, f)| *k + (1u64 << f.order) <= end)
            .map(|(k, f)| (*k, *f))
            .collect();
        for (k, f) in inside {
            self.shmem.inodes[ino as usize].cache.remove(&k);
            self.shmem.owner.remove(&f.pfn.0);
            self.free_folio(f.pfn);
        }
    }

    /// `truncate_inode_partial_folio` of folio `f` at file index `start` for the hole of bytes
    /// `[lstart, lend]`: a folio wholly inside is left to the caller (which truncates it), a
    /// small one is only zeroed; a large one is split (`try_folio_split_or_unmap`) so that the
    /// page holding the first byte it loses stands alone, then the piece holding the first page
    /// after the hole, if large and still in the folio, so that that page stands alone too.
    fn truncate_inode_partial_folio(&mut self, ino: InodeId, start: u64, f: CacheFolio, lstart: u64, lend: u64) {
        let (pos, size) = (start * PAGE_SIZE, PAGE_SIZE << f.order);
        let offset = lstart.saturating_sub(pos);
        let length = if lend == u64::MAX || pos + size <= lend + 1 { size - offset } else { lend + 1 - pos - offset };
        if length == size || f.order == 0 {
            return;
        }
        self.shmem_folio_split(ino, start, start + offset / PAGE_SIZE);
        if offset + length == size {
            return;
        }
        let at2 = start + (offset + length) / PAGE_SIZE;
        if let Some((s2, _)) = self.shmem.inodes[ino as usize].lookup(at2).filter(|(_, f2)| f2.order > 0) {
            self.shmem_folio_split(ino, s2, at2);
        }
    }

    /// `folio_split` of the shmem folio at file index `start` (mm/huge_memory.c:
    /// `__folio_split`, non-uniform): `unmap_folio` first (every mapping in every mm, PMDs
    /// split), then `__split_unmapped_folio` halves the folio again and again, keeping each
    /// time the half that does not hold page `at` as a folio of its own, down to `at` alone;
    /// `remap_page` maps nothing again for a file folio, so every piece is unmapped. Counts
    /// one `split` of the folio's size (and `thp_split_page` for a PMD-sized one).
    fn shmem_folio_split(&mut self, ino: InodeId, start: u64, at: u64) {
        let f = self.shmem.inodes[ino as usize].cache[&start];
        let order = Order(f.order);
        self.shmem_unmap_file_range(ino, start, order.nr_pages() as u64, Unmap::Folio);
        debug_assert!((0..order.nr_pages()).all(|i| self.zone.mem_map[f.pfn.add(i).idx()].mapcount == 0), "unmap_folio left a mapping");
        self.unqueue_deferred_split(f.pfn);
        self.folio_mm_ids.remove(&f.pfn);
        let touched: Vec<bool> = (0..order.nr_pages()).map(|i| self.zone.mem_map[f.pfn.add(i).idx()].flags & pg::TOUCHED != 0).collect();
        let mut pieces = Vec::with_capacity(order.0 as usize + 1);
        let (mut lo, rel) = (0u64, at - start);
        for k in (0..order.0).rev() {
            let half = 1u64 << k;
            let other = if rel < lo + half { lo + half } else { lo };
            pieces.push((other, k));
            if rel >= lo + half {
                lo += half;
            }
        }
        pieces.push((rel, 0));
        let inode = &mut self.shmem.inodes[ino as usize];
        inode.cache.remove(&start);
        // Pieces at or beyond EOF are dropped, EOF being the later of i_size and what fallocate
        // allocated (`shmem_fallocend`).
        let eof = inode.i_size.div_ceil(PAGE_SIZE).max(inode.fallocend);
        self.shmem.owner.remove(&f.pfn.0);
        for (off, k) in pieces {
            let pfn = f.pfn.add(off as u32);
            self.prep_folio(pfn, Order(k), pg::SHMEM);
            if start + off >= eof {
                self.free_folio(pfn);
                continue;
            }
            for i in 0..1u32 << k {
                if touched[off as usize + i as usize] {
                    self.zone.mem_map[pfn.add(i).idx()].flags |= pg::TOUCHED;
                }
            }
            self.shmem.inodes[ino as usize].cache.insert(start + off, CacheFolio { pfn, order: k, uptodate: f.uptodate });
            self.shmem.owner.insert(pfn.0, (ino, start + off));
        }
        self.counters.count_mthp(order, MthpStat::Split);
        if order == Order::PMD {
            self.counters.count(VmEvent::ThpSplitPage);
        }
    }

    /// The last name of a file went away (`shmem_unlink` → i_nlink 0): mappings made from now
    /// on get the anonymous-shmem VMA ops (`shmem_mmap`).
    pub fn shmem_unlink(&mut self, ino: InodeId) {
        self.shmem.inodes[ino as usize].linked = false;
    }

    /// `shmem_get_unmapped_area` for a mapping of `ino` (None: MAP_SHARED|MAP_ANONYMOUS),
    /// given the address `mm_get_unmapped_area` chose and a search function for padded lengths.
    pub(crate) fn shmem_align_unmapped_area(&self, ino: Option<InodeId>, addr: u64, len: u64, pgoff: u64, search: impl Fn(u64) -> Option<u64>) -> u64 {
        let top = self.shmem_huge();
        if top == ShmemEnabled::Deny {
            return addr;
        }
        let mut hpage_size = Order::PMD.size();
        if top != ShmemEnabled::Force {
            let mut order = 0u8;
            let sb = match ino {
                Some(i) => self.shmem.inodes[i as usize].sb,
                None => {
                    let mut o = self.orders_of(ShmemSizeEnabled::Always);
                    o = o.or(self.orders_of(ShmemSizeEnabled::WithinSize)).or(self.orders_of(ShmemSizeEnabled::Advise));
                    if self.sb_huge(SHM_MNT) != SbHuge::Never {
                        o = o.or(self.orders_of(ShmemSizeEnabled::Inherit));
                    }
                    if let Some(h) = o.highest() {
                        order = h.0;
                        hpage_size = h.size();
                    }
                    SHM_MNT
                }
            };
            if self.sb_huge(sb) == SbHuge::Never && order == 0 {
                return addr;
            }
        }
        if len < hpage_size {
            return addr;
        }
        let offset = (pgoff * PAGE_SIZE) & (hpage_size - 1);
        if offset != 0 && offset + len < 2 * hpage_size {
            return addr;
        }
        if addr & (hpage_size - 1) == offset {
            return addr;
        }
        let Some(inflated) = search(len + hpage_size - PAGE_SIZE) else { return addr };
        let inflated_offset = inflated & (hpage_size - 1);
        let mut a = inflated.wrapping_add(offset).wrapping_sub(inflated_offset);
        if inflated_offset > offset {
            a += hpage_size;
        }
        a
    }

    /// meminfo `Shmem`, `ShmemHugePages`, `ShmemPmdMapped` in bytes.
    pub fn shmem_meminfo(&self) -> (u64, u64, u64) {
        let mut shmem = 0;
        let mut huge = 0;
        for inode in &self.shmem.inodes {
            for f in inode.cache.values() {
                shmem += PAGE_SIZE << f.order;
                if f.order == PMD_ORDER {
                    huge += PAGE_SIZE << f.order;
                }
            }
        }
        (shmem, huge, self.mm.stats.shmem_pmd_mapped * Order::PMD.size())
    }
}

/// `thp_vma_suitable_orders` for file VMAs: the aligned block lies in the VMA and the VMA's
/// start is aligned to the order in file offset terms (`(vm_start >> PAGE_SHIFT) - vm_pgoff`).
pub fn file_vma_suitable_orders(vma: &Vma, addr: u64, orders: Orders) -> Orders {
    let mut o = orders;
    let mut order = o.highest();
    while let Some(ord) = order {
        if file_vma_suitable_order(vma, addr, ord) {
            break;
        }
        order = o.next_below(ord);
    }
    o
}

pub fn file_vma_suitable_order(vma: &Vma, addr: u64, order: Order) -> bool {
    let n = order.nr_pages() as u64;
    (vma.start / PAGE_SIZE).wrapping_sub(vma.pgoff) % n == 0 && thp_vma_suitable_order(vma, addr, order)
}

/// The inputs of the shmem order rules that come from the inode and its mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmemInodeFacts {
    /// The mount's `huge=` (for shm_mnt: [`shm_mnt_huge`]).
    pub sb_huge: SbHuge,
    pub i_size: u64,
}

/// `huge=` of the internal mount (memfd, shared anonymous, SysV): the top-level `shmem_enabled`
/// (`shmem_enabled_store` leaves it alone for deny and force, which count as never here).
pub fn shm_mnt_huge(settings: &thp_abi::ThpSettings) -> SbHuge {
    match settings.shmem_enabled {
        ShmemEnabled::Always => SbHuge::Always,
        ShmemEnabled::WithinSize => SbHuge::WithinSize,
        ShmemEnabled::Advise => SbHuge::Advise,
        _ => SbHuge::Never,
    }
}

/// `shmem_get_orders_within_size`: the orders, from the highest down, whose aligned block
/// around `index` ends within `max(i_size, write_end)`.
pub fn shmem_orders_within_size(i_size: u64, orders: Orders, index: u64, write_end: u64) -> Orders {
    let size_pages = write_end.max(i_size).div_ceil(PAGE_SIZE);
    let mut o = orders;
    let mut order = o.highest();
    while let Some(ord) = order {
        let aligned = (index + 1).div_ceil(ord.nr_pages() as u64) * ord.nr_pages() as u64;
        if size_pages >= aligned {
            return o;
        }
        order = o.next_below(ord);
    }
    Orders::NONE
}

/// `shmem_huge_global_enabled` as a pure function; `sink` learns why each file order is not in
/// the result. `force` is `shmem_huge_force` (MADV_COLLAPSE and `collapse_pte_mapped_thp`,
/// `TVA_FORCED_COLLAPSE`): PMD size whatever the mount's `huge=`, unless the top level is deny.
pub fn shmem_huge_global_enabled<S: RefusalSink>(
    settings: &thp_abi::ThpSettings,
    f: ShmemInodeFacts,
    index: u64,
    write_end: u64,
    vma: Option<&Vma>,
    force: bool,
    sink: &mut S,
) -> Orders {
    let pmd = Orders::single(Order::PMD);
    let all = Orders::ALL_FILE;
    let out = |sink: &mut S, allowed: Orders, why: Refusal| {
        sink.refuse(dropped(all, allowed), why);
        allowed
    };
    match settings.shmem_enabled {
        ShmemEnabled::Deny => return out(sink, Orders::NONE, Refusal::ShmemDeny),
        ShmemEnabled::Force => return out(sink, pmd, Refusal::ShmemForceOtherSize),
        _ if force => return out(sink, pmd, Refusal::ShmemForceOtherSize),
        _ => {}
    }
    let cand = if vma.is_some() { pmd } else { all };
    if f.sb_huge != SbHuge::Never {
        // With a VMA, every huge= other than never considers PMD size only.
        sink.refuse(dropped(all, cand), Refusal::ShmemMappedPmdOnly);
    }
    match f.sb_huge {
        SbHuge::Always => out(sink, cand, Refusal::ShmemMappedPmdOnly),
        h @ (SbHuge::WithinSize | SbHuge::Advise) => {
            if h == SbHuge::WithinSize {
                let w = shmem_orders_within_size(f.i_size, cand, index, write_end);
                if !w.is_empty() {
                    sink.refuse(dropped(cand, w), Refusal::ShmemBeyondEof);
                    return out(sink, w, Refusal::ShmemMappedPmdOnly);
                }
                sink.refuse(cand, Refusal::ShmemBeyondEof);
            }
            if vma.is_some_and(|v| v.flags & vm::HUGEPAGE != 0) {
                out(sink, pmd, Refusal::ShmemMappedPmdOnly)
            } else {
                out(sink, Orders::NONE, Refusal::ShmemAdviseNotAdvised)
            }
        }
        SbHuge::Never => out(sink, Orders::NONE, Refusal::ShmemMountNever),
    }
}

/// Why `shmem_allowable_huge_orders` allows what it allows: the kernel's function as a pure
/// function of the knobs, the mm's prctl flags, the inode and the VMA (None for
/// write()/fallocate()); `sink` learns why each file order is not in the result.
/// `Kernel::shmem_allowable_huge_orders` is this with `()` and `force` false.
///
/// `force` is the kernel's `shmem_huge_force` argument (true for
/// `TVA_FORCED_COLLAPSE`: the mount's `huge=` counts as PMD, and for anonymous shmem the
/// per-size `inherit` set applies, so MADV_COLLAPSE of a memfd needs
/// `hugepages-2048kB/shmem_enabled` to be inherit, always, within_size (fitting) or advise
/// (with VM_HUGEPAGE)).
#[allow(clippy::too_many_arguments)]
pub fn shmem_allowable_huge_orders_why<S: RefusalSink>(
    settings: &thp_abi::ThpSettings,
    mm: &MmFlags,
    f: ShmemInodeFacts,
    vma: Option<&Vma>,
    index: u64,
    write_end: u64,
    force: bool,
    sink: &mut S,
) -> Orders {
    if let Some(why) = vma.and_then(|v| vma_thp_disabled_why(mm, v.flags, force)) {
        sink.refuse(Orders::ALL_FILE, why);
        return Orders::NONE;
    }
    let Some(v) = vma.filter(|v| v.flags & vm::ANON_SHMEM != 0) else {
        return shmem_huge_global_enabled(settings, f, index, write_end, vma, force, sink);
    };
    let global = shmem_huge_global_enabled(settings, f, index, write_end, vma, force, &mut ());
    let sized = |w: ShmemSizeEnabled| settings.shmem_orders(w);
    match settings.shmem_enabled {
        ShmemEnabled::Deny => {
            sink.refuse(Orders::ALL_FILE, Refusal::ShmemDeny);
            return Orders::NONE;
        }
        ShmemEnabled::Force => {
            let o = sized(ShmemSizeEnabled::Inherit);
            sink.refuse(dropped(Orders::ALL_FILE, o), Refusal::ShmemForceOtherSize);
            return o;
        }
        _ => {}
    }
    let within = sized(ShmemSizeEnabled::WithinSize);
    let within_ok = shmem_orders_within_size(f.i_size, within, index, 0);
    let mut mask = sized(ShmemSizeEnabled::Always).or(within_ok);
    if v.flags & vm::HUGEPAGE != 0 {
        mask = mask.or(sized(ShmemSizeEnabled::Advise));
    }
    if !global.is_empty() {
        mask = mask.or(sized(ShmemSizeEnabled::Inherit));
    }
    let mask = mask.and(Orders::ALL_FILE);
    if S::RECORDS {
        for o in dropped(Orders::ALL_FILE, mask).iter_desc() {
            let why = match settings.shmem[o.0 as usize] {
                ShmemSizeEnabled::Never | ShmemSizeEnabled::Always => Refusal::ShmemSizeNever,
                ShmemSizeEnabled::WithinSize => Refusal::ShmemBeyondEof,
                ShmemSizeEnabled::Advise => Refusal::ShmemAdviseNotAdvised,
                ShmemSizeEnabled::Inherit => Refusal::ShmemInheritTopOff,
            };
            sink.refuse(Orders::single(o), why);
        }
    }
    mask
}

/// The shmem branch of `__thp_vma_allowable_orders` (khugepaged, MADV_COLLAPSE, smaps):
/// `vma_thp_disabled`, VM_NO_KHUGEPAGED, the orders whose aligned block ending at vm_end fits
/// (file offset alignment included), then `shmem_allowable_huge_orders` at `vm_pgoff`.
pub fn shmem_thp_vma_allowable_orders<S: RefusalSink>(
    settings: &thp_abi::ThpSettings,
    mm: &MmFlags,
    f: ShmemInodeFacts,
    vma: &Vma,
    tva: TvaType,
    orders: Orders,
    sink: &mut S,
) -> Orders {
    let orders = orders.and(Orders::ALL_FILE);
    if let Some(why) = vma_thp_disabled_why(mm, vma.flags, tva == TvaType::ForcedCollapse) {
        sink.refuse(orders, why);
        return Orders::NONE;
    }
    if tva != TvaType::Smaps && vma.flags & vm::NO_KHUGEPAGED != 0 {
        sink.refuse(orders, Refusal::NoKhugepagedVma);
        return Orders::NONE;
    }
    let before = orders;
    let mut o = orders;
    let mut order = o.highest();
    while let Some(ord) = order {
        if file_vma_suitable_order(vma, vma.end.wrapping_sub(ord.size()), ord) {
            break;
        }
        order = o.next_below(ord);
    }
    if S::RECORDS {
        refuse_unsuitable_file_orders(vma, dropped(before, o), sink);
    }
    if o.is_empty() {
        return o;
    }
    o.and(shmem_allowable_huge_orders_why(settings, mm, f, Some(vma), vma.pgoff, 0, tva == TvaType::ForcedCollapse, sink))
}

/// Why `file_vma_suitable_order` dropped each of `dropped`: the VMA's file offset is not
/// aligned to the order, or no aligned block of it fits in the VMA.
fn refuse_unsuitable_file_orders<S: RefusalSink>(vma: &Vma, dropped: Orders, sink: &mut S) {
    for ord in dropped.iter_desc() {
        let n = ord.nr_pages() as u64;
        let why = if (vma.start / PAGE_SIZE).wrapping_sub(vma.pgoff) % n != 0 {
            Refusal::FileOffsetMisaligned
        } else {
            Refusal::NoAlignedBlock
        };
        sink.refuse(Orders::single(ord), why);
    }
}

/// `file_vma_suitable_orders` with the reason for each order it drops at `addr`.
pub fn file_vma_suitable_orders_why<S: RefusalSink>(vma: &Vma, addr: u64, orders: Orders, sink: &mut S) -> Orders {
    let o = file_vma_suitable_orders(vma, addr, orders);
    if S::RECORDS {
        refuse_unsuitable_file_orders(vma, dropped(orders, o), sink);
    }
    o
}
