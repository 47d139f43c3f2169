//! hugetlb: per-size pools of huge pages, reservations at mmap, faults, fork and COW.
//!
//! Kernel sources (6.18): `mm/hugetlb.c` (`set_max_huge_pages`, `alloc_pool_huge_folio`,
//! `hugetlb_reserve_pages`, `hugetlb_unreserve_pages`, `hugetlb_acct_memory`,
//! `gather_surplus_pages`, `return_unused_surplus_pages`, `alloc_hugetlb_folio`,
//! `dequeue_hugetlb_folio_vma`, `alloc_surplus_hugetlb_folio`, `free_huge_folio`,
//! `__vma_reservation_common`, `hugetlb_fault`, `hugetlb_no_page`, `hugetlb_wp`,
//! `unmap_ref_private`, `copy_hugetlb_page_range`, `hugetlb_dup_vma_private`,
//! `hugetlb_vm_op_close`, `hugetlb_report_meminfo`), `fs/hugetlbfs/inode.c`
//! (`hugetlb_file_setup`, `hugetlbfs_file_mmap`, `remove_inode_hugepages`, `hugetlbfs_evict_inode`),
//! `mm/mmap.c` (`ksys_mmap_pgoff`: MAP_HUGETLB's length rounded to the huge page size).
//!
//! Two hstates, as on x86-64: 2 MiB (order 9, the default, the one /proc/meminfo's
//! `HugePages_*` lines show) and 1 GiB (order 18, gigantic: no surplus pages). A pool's pages
//! are taken from the buddy allocator when the pool is set (`nr_hugepages`), surplus pages
//! when a reservation or a fault needs them and `nr_overcommit_hugepages` allows. A gigantic
//! page is taken as 256 blocks of MAX_PAGE_ORDER (the kernel's `alloc_contig_pages` finds one
//! contiguous range; the model keeps the frame count, not the contiguity).
//!
//! A hugetlb mapping is a VMA with [`vm::HUGETLB`] (and [`vm::SPECIAL`], so that the rest of
//! the model leaves it alone); its hugetlb state (file, reservation map, huge PTEs) lives here,
//! keyed by mm and address. Every hugetlb mapping maps a file: MAP_HUGETLB an unlinked one on
//! the internal mount (`hugetlb_file_setup`), a memfd with MFD_HUGETLB one of size 0 grown by
//! ftruncate, a hugetlbfs file a linked one. Model limits: a hugetlb VMA is unmapped whole
//! (a partial munmap is EINVAL here; the kernel splits at a huge page boundary), MAP_PRIVATE of
//! a hugetlbfs file with pages in its cache, mprotect, madvise and mlock of hugetlb VMAs, and
//! pinned pages at fork are not modelled.

use std::collections::{BTreeMap, BTreeSet};

use mm_types::{Order, Pfn, MAX_PAGE_ORDER, PAGE_SIZE};

use crate::mmap::MmapPlacement;
use crate::vma::{vm, Vma};
use crate::{Access, Errno, Kernel, MmId};

/// A hugetlb page size the model has (x86-64's two hstates).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HugeSize {
    /// 2 MiB, the default hstate (`default_hstate`).
    Pmd,
    /// 1 GiB, gigantic (`hstate_is_gigantic`).
    Pud,
}

impl HugeSize {
    pub const ALL: [HugeSize; 2] = [HugeSize::Pmd, HugeSize::Pud];
    pub fn order(self) -> u8 {
        match self {
            HugeSize::Pmd => 9,
            HugeSize::Pud => 18,
        }
    }
    pub fn bytes(self) -> u64 {
        PAGE_SIZE << self.order()
    }
    fn idx(self) -> usize {
        self as usize
    }
    /// The sysfs directory's size (`hugepages-2048kB`).
    pub fn kb(self) -> u64 {
        self.bytes() >> 10
    }
}

/// `struct hstate`'s counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hstate {
    pub nr_huge_pages: u64,
    pub free_huge_pages: u64,
    pub resv_huge_pages: u64,
    pub surplus_huge_pages: u64,
    pub nr_overcommit_huge_pages: u64,
    /// `hugepage_freelists`: the free pages' first frames.
    free_list: Vec<Pfn>,
}

impl Hstate {
    /// `persistent_huge_pages`: what `nr_hugepages` reads.
    pub fn persistent(&self) -> u64 {
        self.nr_huge_pages - self.surplus_huge_pages
    }
    /// `available_huge_pages`: free and not reserved.
    fn available(&self) -> u64 {
        self.free_huge_pages - self.resv_huge_pages
    }
}

/// A hugetlb folio in use (mapped, or in a file's page cache).
#[derive(Clone, Debug)]
struct HFolio {
    pfn: Pfn,
    size: HugeSize,
    mapcount: u32,
    /// `folio_test_anon`: a private mapping's page; otherwise it is in a file's page cache.
    anon: bool,
}

/// A hugetlbfs inode: its size, reservation map (`inode_resv_map`: the indices reserved or
/// allocated through shared mappings) and page cache.
#[derive(Clone, Debug)]
struct HInode {
    size: HugeSize,
    i_size: u64,
    resv: BTreeSet<u64>,
    cache: BTreeMap<u64, u32>,
    /// Open descriptors and VMAs holding the file.
    refs: u32,
    /// Linked in a hugetlbfs directory (it stays when the last reference goes).
    linked: bool,
}

/// A hugetlb VMA's state (`vm_private_data`, the flags HPAGE_RESV_OWNER/HPAGE_RESV_UNMAPPED).
#[derive(Clone, Debug)]
struct HVma {
    end: u64,
    ino: u32,
    /// The huge page index in the file of `vm_start`.
    pgoff: u64,
    shared: bool,
    /// A private mapping's reservation map, for the mm that made it (HPAGE_RESV_OWNER): the
    /// indices whose reservation was consumed. `None`: no reservation (MAP_NORESERVE, a child).
    owner: Option<BTreeSet<u64>>,
    /// HPAGE_RESV_UNMAPPED: the owner took pages back from this child at a failed COW.
    resv_unmapped: bool,
}

/// A huge PTE (or PMD/PUD entry).
#[derive(Clone, Copy, Debug)]
struct HPte {
    folio: u32,
    write: bool,
}

/// The machine's hugetlb state.
#[derive(Clone, Debug, Default)]
pub struct Hugetlb {
    hstates: [Hstate; 2],
    folios: Vec<Option<HFolio>>,
    inodes: Vec<Option<HInode>>,
    vmas: BTreeMap<(u32, u64), HVma>,
    ptes: BTreeMap<(u32, u64), HPte>,
    /// A gigantic page's blocks after its first, by its first.
    gigantic_tails: BTreeMap<Pfn, Vec<Pfn>>,
    /// A pool was set or a hugetlb mapping made: the result reports the meminfo lines.
    pub used: bool,
}

/// The hugetlb lines of /proc/meminfo (`hugetlb_report_meminfo`), in kB where they are sizes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HugetlbMeminfo {
    pub total: u64,
    pub free: u64,
    pub rsvd: u64,
    pub surp: u64,
    /// `Hugepagesize` (kB).
    pub hugepagesize_kb: u64,
    /// `Hugetlb` (kB): every hstate's pages.
    pub hugetlb_kb: u64,
}

/// A mapping's hugetlb side, for [`Kernel::hugetlb_mmap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HugetlbMap {
    pub size: HugeSize,
    pub shared: bool,
    /// MAP_NORESERVE: no reservation.
    pub noreserve: bool,
    /// A file from [`Kernel::hugetlb_file_setup`] (memfd, hugetlbfs) and the byte offset; `None`:
    /// MAP_HUGETLB's anonymous file.
    pub file: Option<(u32, u64)>,
}

impl Kernel {
    /// The hugetlb lines of /proc/meminfo.
    pub fn hugetlb_meminfo(&self) -> HugetlbMeminfo {
        let h = &self.hugetlb.hstates[0];
        let hugetlb_kb = HugeSize::ALL.iter().map(|s| self.hugetlb.hstates[s.idx()].nr_huge_pages * s.kb()).sum();
        HugetlbMeminfo {
            total: h.nr_huge_pages,
            free: h.free_huge_pages,
            rsvd: h.resv_huge_pages,
            surp: h.surplus_huge_pages,
            hugepagesize_kb: HugeSize::Pmd.kb(),
            hugetlb_kb,
        }
    }

    /// One hstate's counters.
    pub fn hstate(&self, size: HugeSize) -> &Hstate {
        &self.hugetlb.hstates[size.idx()]
    }

    /// The frames hugetlb's pools hold (every hstate's pages).
    pub fn hugetlb_frames(&self) -> u64 {
        HugeSize::ALL.iter().map(|s| self.hugetlb.hstates[s.idx()].nr_huge_pages << s.order()).sum()
    }

    /// Whether hugetlb was used (a pool set, a mapping or file made).
    pub fn hugetlb_used(&self) -> bool {
        self.hugetlb.used
    }

    /// `alloc_fresh_hugetlb_folio`: a huge page's frames from the buddy allocator.
    fn alloc_fresh_hugetlb_folio(&mut self, size: HugeSize) -> Option<Pfn> {
        if size.order() <= MAX_PAGE_ORDER {
            return self.zone.alloc_pages(Order(size.order()));
        }
        let blocks = 1u64 << (size.order() - MAX_PAGE_ORDER);
        let mut got = Vec::new();
        for _ in 0..blocks {
            match self.zone.alloc_pages(Order(MAX_PAGE_ORDER)) {
                Some(p) => got.push(p),
                None => {
                    for p in got {
                        self.zone.free_pages(p, Order(MAX_PAGE_ORDER));
                    }
                    return None;
                }
            }
        }
        // The gigantic page is named by its first block; the rest are freed with it.
        self.hugetlb_gigantic_blocks(size, &got);
        got.first().copied()
    }

    /// The blocks of a gigantic page after its first, kept with the page.
    fn hugetlb_gigantic_blocks(&mut self, _size: HugeSize, blocks: &[Pfn]) {
        self.hugetlb.gigantic_tails.insert(blocks[0], blocks[1..].to_vec());
    }

    /// `update_and_free_hugetlb_folio`: the frames back to the buddy allocator.
    fn free_fresh_hugetlb_folio(&mut self, size: HugeSize, pfn: Pfn) {
        if size.order() <= MAX_PAGE_ORDER {
            self.zone.free_pages(pfn, Order(size.order()));
            return;
        }
        let tails = self.hugetlb.gigantic_tails.remove(&pfn).unwrap_or_default();
        for p in std::iter::once(pfn).chain(tails) {
            self.zone.free_pages(p, Order(MAX_PAGE_ORDER));
        }
    }

    /// `set_max_huge_pages` (a write of `nr_hugepages`): the pool grows from the buddy
    /// allocator (surplus pages become persistent first) until `count` or an allocation fails;
    /// it shrinks by its free, unreserved pages, and pages in use beyond `count` become
    /// surplus. Returns the persistent pages after.
    pub fn hugetlb_set_pool(&mut self, size: HugeSize, count: u64) -> u64 {
        self.hugetlb.used = true;
        let i = size.idx();
        // adjust_pool_surplus: a surplus page becomes persistent.
        while self.hugetlb.hstates[i].surplus_huge_pages > 0 && count > self.hugetlb.hstates[i].persistent() {
            self.hugetlb.hstates[i].surplus_huge_pages -= 1;
        }
        while count > self.hugetlb.hstates[i].persistent() {
            let Some(pfn) = self.alloc_fresh_hugetlb_folio(size) else { break };
            let h = &mut self.hugetlb.hstates[i];
            h.nr_huge_pages += 1;
            h.free_huge_pages += 1;
            h.free_list.push(pfn);
        }
        // Shrink: never below the pages in use and reserved (min_count).
        let h = &self.hugetlb.hstates[i];
        let min_count = h.resv_huge_pages + h.nr_huge_pages - h.free_huge_pages;
        let count = count.max(min_count);
        while self.hugetlb.hstates[i].persistent() > count {
            let h = &mut self.hugetlb.hstates[i];
            if h.available() == 0 {
                break;
            }
            let pfn = h.free_list.pop().expect("free_huge_pages counts the free list");
            h.free_huge_pages -= 1;
            h.nr_huge_pages -= 1;
            self.free_fresh_hugetlb_folio(size, pfn);
        }
        // Pages in use beyond the target are surplus now (adjust_pool_surplus).
        while self.hugetlb.hstates[i].persistent() > count {
            self.hugetlb.hstates[i].surplus_huge_pages += 1;
        }
        self.hugetlb.hstates[i].persistent()
    }

    /// A write of `nr_overcommit_hugepages` (gigantic pages have no surplus: ignored for them).
    pub fn hugetlb_set_overcommit(&mut self, size: HugeSize, n: u64) {
        self.hugetlb.used = true;
        if size == HugeSize::Pmd {
            self.hugetlb.hstates[size.idx()].nr_overcommit_huge_pages = n;
        }
    }

    /// `alloc_surplus_hugetlb_folio`: a page beyond the pool while `surplus_huge_pages` is below
    /// `nr_overcommit_huge_pages` (never for gigantic pages). It is counted in the pool, not free.
    fn alloc_surplus_hugetlb_folio(&mut self, size: HugeSize) -> Option<Pfn> {
        let h = &self.hugetlb.hstates[size.idx()];
        if size == HugeSize::Pud || h.surplus_huge_pages >= h.nr_overcommit_huge_pages {
            return None;
        }
        let pfn = self.alloc_fresh_hugetlb_folio(size)?;
        let h = &mut self.hugetlb.hstates[size.idx()];
        h.nr_huge_pages += 1;
        h.surplus_huge_pages += 1;
        Some(pfn)
    }

    /// `gather_surplus_pages`: `delta` more reserved pages, with surplus pages allocated and
    /// put on the free list when the free ones do not cover them. Err(ENOMEM) when they cannot.
    fn gather_surplus_pages(&mut self, size: HugeSize, delta: u64) -> Result<(), Errno> {
        let i = size.idx();
        let h = &self.hugetlb.hstates[i];
        let needed = (h.resv_huge_pages + delta).saturating_sub(h.free_huge_pages);
        let mut got = Vec::new();
        for _ in 0..needed {
            match self.alloc_surplus_hugetlb_folio(size) {
                Some(p) => got.push(p),
                None => break,
            }
        }
        if (got.len() as u64) < needed {
            // free_huge_folio of each: a surplus page goes back to the buddy allocator.
            for p in got {
                let h = &mut self.hugetlb.hstates[i];
                h.nr_huge_pages -= 1;
                h.surplus_huge_pages -= 1;
                self.free_fresh_hugetlb_folio(size, p);
            }
            return Err(Errno::ENOMEM);
        }
        let h = &mut self.hugetlb.hstates[i];
        h.free_huge_pages += got.len() as u64;
        h.free_list.extend(got);
        h.resv_huge_pages += delta;
        Ok(())
    }

    /// `return_unused_surplus_pages`: `unused` reservations go, and as many free surplus pages
    /// go back to the buddy allocator.
    fn return_unused_surplus_pages(&mut self, size: HugeSize, unused: u64) {
        let i = size.idx();
        self.hugetlb.hstates[i].resv_huge_pages -= unused;
        let mut nr = unused.min(self.hugetlb.hstates[i].surplus_huge_pages);
        while nr > 0 {
            let h = &mut self.hugetlb.hstates[i];
            let Some(pfn) = h.free_list.pop() else { break };
            h.free_huge_pages -= 1;
            h.nr_huge_pages -= 1;
            h.surplus_huge_pages -= 1;
            self.free_fresh_hugetlb_folio(size, pfn);
            nr -= 1;
        }
    }

    /// `hugetlb_acct_memory`: reserve `delta` pages (gathering surplus ones) or release them.
    fn hugetlb_acct_memory(&mut self, size: HugeSize, delta: i64) -> Result<(), Errno> {
        match delta {
            0 => Ok(()),
            d if d > 0 => self.gather_surplus_pages(size, d as u64),
            d => {
                self.return_unused_surplus_pages(size, d.unsigned_abs());
                Ok(())
            }
        }
    }

    /// `hugetlb_file_setup` / `hugetlbfs_create` (memfd_create with MFD_HUGETLB, open of a
    /// new hugetlbfs file): an inode of `i_size` bytes with no reservation, one reference (the
    /// descriptor). Returns its number.
    pub fn hugetlb_file_setup(&mut self, size: HugeSize, i_size: u64, linked: bool) -> u32 {
        self.hugetlb.used = true;
        let ino = HInode { size, i_size, resv: BTreeSet::new(), cache: BTreeMap::new(), refs: 1, linked };
        self.hugetlb.inodes.push(Some(ino));
        (self.hugetlb.inodes.len() - 1) as u32
    }

    /// ftruncate of a hugetlbfs file (`hugetlbfs_setattr`): growing sets the size; shrinking
    /// removes the pages past it (`hugetlb_vmtruncate` → `remove_inode_hugepages`) when no
    /// mapping maps them (the model does not unmap them: EBUSY then). Err(EINVAL) when the
    /// size is not a multiple of the huge page size.
    pub fn hugetlb_truncate(&mut self, ino: u32, i_size: u64) -> Result<(), Errno> {
        let inode = self.hugetlb_inode(ino);
        if i_size % inode.size.bytes() != 0 {
            return Err(Errno::EINVAL);
        }
        let from = i_size / inode.size.bytes();
        if inode.cache.range(from..).any(|(_, f)| self.hugetlb_folio(*f).mapcount > 0) {
            return Err(Errno::EBUSY);
        }
        self.remove_inode_hugepages(ino, from);
        self.hugetlb_inode_mut(ino).i_size = i_size;
        Ok(())
    }

    /// close(2) of a hugetlbfs file's descriptor.
    pub fn hugetlb_file_put(&mut self, ino: u32) {
        let inode = self.hugetlb_inode_mut(ino);
        inode.refs -= 1;
        if inode.refs == 0 && !inode.linked {
            // hugetlbfs_evict_inode: every page and reservation goes.
            self.remove_inode_hugepages(ino, 0);
            self.hugetlb.inodes[ino as usize] = None;
        }
    }

    /// `remove_inode_hugepages(inode, from, LLONG_MAX)`: the cached pages from index `from` are
    /// freed and `hugetlb_unreserve_pages` releases the reservations there that no page used.
    fn remove_inode_hugepages(&mut self, ino: u32, from: u64) {
        let inode = self.hugetlb_inode_mut(ino);
        let size = inode.size;
        let gone: Vec<u32> = inode.cache.split_off(&from).into_values().collect();
        let chg = inode.resv.split_off(&from).len() as u64;
        let freed = gone.len() as u64;
        for f in gone {
            self.free_huge_folio(f);
        }
        self.hugetlb_acct_memory(size, -((chg - freed) as i64)).expect("releasing cannot fail");
    }

    fn hugetlb_inode(&self, ino: u32) -> &HInode {
        self.hugetlb.inodes[ino as usize].as_ref().expect("a live hugetlbfs inode")
    }
    fn hugetlb_inode_mut(&mut self, ino: u32) -> &mut HInode {
        self.hugetlb.inodes[ino as usize].as_mut().expect("a live hugetlbfs inode")
    }
    fn hugetlb_folio(&self, f: u32) -> &HFolio {
        self.hugetlb.folios[f as usize].as_ref().expect("a hugetlb folio in use")
    }
    fn hugetlb_folio_mut(&mut self, f: u32) -> &mut HFolio {
        self.hugetlb.folios[f as usize].as_mut().expect("a hugetlb folio in use")
    }

    /// `free_huge_folio`: back on the free list, or, while the pool has surplus pages, back to
    /// the buddy allocator (one surplus page less).
    fn free_huge_folio(&mut self, f: u32) {
        let folio = self.hugetlb.folios[f as usize].take().expect("a hugetlb folio in use");
        let h = &mut self.hugetlb.hstates[folio.size.idx()];
        if h.surplus_huge_pages > 0 {
            h.surplus_huge_pages -= 1;
            h.nr_huge_pages -= 1;
            self.free_fresh_hugetlb_folio(folio.size, folio.pfn);
        } else {
            h.free_huge_pages += 1;
            h.free_list.push(folio.pfn);
        }
    }

    /// `hugetlb_reserve_pages` for a new mapping of file pages `[from, to)`: nothing with
    /// MAP_NORESERVE; a shared mapping reserves what the inode's map lacks, a private one the
    /// whole range in a map of its own (HPAGE_RESV_OWNER). Err(ENOMEM) when the pool (with
    /// surplus pages) cannot hold it.
    fn hugetlb_reserve_pages(&mut self, ino: u32, from: u64, to: u64, map: &HugetlbMap) -> Result<Option<BTreeSet<u64>>, Errno> {
        if map.noreserve {
            return Ok(None);
        }
        let size = map.size;
        if map.shared {
            let chg = (from..to).filter(|i| !self.hugetlb_inode(ino).resv.contains(i)).count() as i64;
            self.hugetlb_acct_memory(size, chg)?;
            self.hugetlb_inode_mut(ino).resv.extend(from..to);
            Ok(None)
        } else {
            self.hugetlb_acct_memory(size, (to - from) as i64)?;
            Ok(Some(BTreeSet::new()))
        }
    }

    /// mmap of hugetlb memory (MAP_HUGETLB, or a hugetlbfs/MFD_HUGETLB file): the length rounded
    /// up to the huge page size, the address aligned to it (`hugetlb_get_unmapped_area`), the
    /// reservation made (`hugetlbfs_file_mmap`). EINVAL for a file offset that is not huge-page
    /// aligned, ENOMEM when the reservation cannot be made.
    pub fn hugetlb_mmap(&mut self, len: u64, prot_flags: u32, placement: MmapPlacement, map: HugetlbMap) -> Result<u64, Errno> {
        self.hugetlb.used = true;
        let hsize = map.size.bytes();
        let len = len.checked_next_multiple_of(hsize).ok_or(Errno::ENOMEM)?;
        let placement = match placement {
            MmapPlacement::Kernel => MmapPlacement::Aligned { align: hsize, offset: 0 },
            MmapPlacement::FixedNoReplace(a) | MmapPlacement::Hint(a) if a % hsize != 0 => return Err(Errno::EINVAL),
            p => p,
        };
        let (off, file) = match map.file {
            Some((ino, off)) => {
                if off % hsize != 0 || self.hugetlb_inode(ino).size != map.size {
                    return Err(Errno::EINVAL);
                }
                (off, Some(ino))
            }
            None => (0, None),
        };
        let addr = self.get_unmapped_area(len, placement)?;
        // MAP_HUGETLB: hugetlb_file_setup with VM_NORESERVE (the mapping reserves).
        let ino = match file {
            Some(ino) => ino,
            None => self.hugetlb_file_setup(map.size, len, false),
        };
        let (from, to) = (off / hsize, (off + len) / hsize);
        let owner = match self.hugetlb_reserve_pages(ino, from, to, &map) {
            Ok(o) => o,
            Err(e) => {
                if file.is_none() {
                    self.hugetlb_file_put(ino);
                }
                return Err(e);
            }
        };
        if file.is_some() {
            self.hugetlb_inode_mut(ino).refs += 1;
        }
        let shared = if map.shared { vm::SHARED } else { 0 };
        let noreserve = if map.noreserve { vm::NORESERVE } else { 0 };
        let flags = prot_flags | vm::HUGETLB | vm::SPECIAL | shared | noreserve;
        self.mm.vmas.insert(Vma { start: addr, end: addr + len, flags, anon_vma: 0, file: 0, pgoff: 0 });
        self.mm.vma_cache = None;
        let hv = HVma { end: addr + len, ino, pgoff: from, shared: map.shared, owner, resv_unmapped: false };
        self.hugetlb.vmas.insert((self.mm.id.0, addr), hv);
        Ok(addr)
    }

    /// The hugetlb state of the current mm's VMA at `start`.
    fn hvma(&self, start: u64) -> &HVma {
        self.hugetlb.vmas.get(&(self.mm.id.0, start)).expect("a hugetlb VMA has its state")
    }

    /// Whether `[start, end)` cuts a hugetlb VMA of the current mm (the model unmaps them whole).
    pub(crate) fn hugetlb_cuts(&self, start: u64, end: u64) -> bool {
        self.mm.vmas.intersecting(start, end).iter().any(|v| v.flags & vm::HUGETLB != 0 && (v.start < start || v.end > end))
    }

    /// Unmapping a hugetlb VMA of the current mm (`__unmap_hugepage_range` and
    /// `hugetlb_vm_op_close`): every huge PTE goes (an anonymous page mapped nowhere else is
    /// freed), a private owner's unconsumed reservations are released, the file's reference is
    /// dropped.
    pub(crate) fn hugetlb_unmap_vma(&mut self, v: &Vma) {
        let mm = self.mm.id.0;
        let hv = self.hugetlb.vmas.remove(&(mm, v.start)).expect("a hugetlb VMA has its state");
        let size = self.hugetlb_inode(hv.ino).size;
        let keys: Vec<(u32, u64)> = self.hugetlb.ptes.range((mm, v.start)..(mm, v.end)).map(|(k, _)| *k).collect();
        for k in keys {
            let pte = self.hugetlb.ptes.remove(&k).expect("listed");
            self.hugetlb_remove_rmap(pte.folio);
        }
        if let Some(consumed) = &hv.owner {
            let reserve = (v.end - v.start) / size.bytes() - consumed.len() as u64;
            self.hugetlb_acct_memory(size, -(reserve as i64)).expect("releasing cannot fail");
        }
        self.hugetlb_file_put(hv.ino);
    }

    /// `hugetlb_remove_rmap` and the put: an anonymous page mapped nowhere is freed.
    fn hugetlb_remove_rmap(&mut self, f: u32) {
        let folio = self.hugetlb_folio_mut(f);
        folio.mapcount -= 1;
        if folio.mapcount == 0 && folio.anon {
            self.free_huge_folio(f);
        }
    }

    /// `hugetlb_fault` of the current mm at `addr` in hugetlb VMA `vma`: a hit when the huge PTE
    /// allows the access; otherwise one minor fault (none when it fails), `hugetlb_no_page` for an empty entry and
    /// `hugetlb_wp` for a write to a read-only one. SIGBUS when no page can be had (the pool
    /// is empty: `alloc_hugetlb_folio` fails with ENOSPC), past the file's end, or in a child
    /// whose pages the owner took back.
    pub(crate) fn hugetlb_fault(&mut self, vma: Vma, addr: u64, write: bool) -> Access {
        if (write && vma.flags & vm::WRITE == 0) || vma.flags & vm::ACCESS == 0 {
            return Access::Segv;
        }
        let hv = self.hvma(vma.start).clone();
        let size = self.hugetlb_inode(hv.ino).size;
        let haddr = addr & !(size.bytes() - 1);
        let key = (self.mm.id.0, haddr);
        let pte = self.hugetlb.ptes.get(&key).copied();
        if let Some(p) = pte {
            if !write || p.write {
                self.mm.stats.hits += 1;
                return Access::Hit;
            }
        }
        let r = match pte {
            None => self.hugetlb_no_page(&vma, &hv, haddr, write),
            Some(p) => self.hugetlb_wp(&vma, &hv, haddr, p),
        };
        // mm_account_fault: a fault that ends in VM_FAULT_ERROR (SIGBUS) is not in min_flt.
        if r == Access::Fault {
            self.mm.stats.minflt += 1;
        }
        r
    }

    /// `hugetlb_no_page`: the file's page (shared), or a new page from the pool.
    fn hugetlb_no_page(&mut self, vma: &Vma, hv: &HVma, haddr: u64, write: bool) -> Access {
        if hv.resv_unmapped {
            return Access::Sigbus;
        }
        let size = self.hugetlb_inode(hv.ino).size;
        let idx = hv.pgoff + (haddr - vma.start) / size.bytes();
        let f = match self.hugetlb_inode(hv.ino).cache.get(&idx).copied() {
            Some(f) => f,
            None => {
                if idx >= self.hugetlb_inode(hv.ino).i_size / size.bytes() {
                    return Access::Sigbus;
                }
                let Some(f) = self.alloc_hugetlb_folio(vma.start, hv, idx, false) else { return Access::Sigbus };
                if hv.shared {
                    // hugetlb_add_to_page_cache.
                    self.hugetlb_inode_mut(hv.ino).cache.insert(idx, f);
                } else {
                    self.hugetlb_folio_mut(f).anon = true;
                }
                f
            }
        };
        self.hugetlb_folio_mut(f).mapcount += 1;
        // make_huge_pte: writable in a shared writable mapping; a private one's write goes
        // through hugetlb_wp, which reuses the new, exclusive page.
        let writable = hv.shared && vma.flags & vm::WRITE != 0;
        let reuse = write && !hv.shared && self.hugetlb_folio(f).anon && self.hugetlb_folio(f).mapcount == 1;
        self.hugetlb.ptes.insert((self.mm.id.0, haddr), HPte { folio: f, write: writable || reuse });
        Access::Fault
    }

    /// `alloc_hugetlb_folio`: consume the mapping's reservation for `idx` if it has one, else
    /// take an available page (free and not reserved), else a surplus page. None: ENOSPC.
    fn alloc_hugetlb_folio(&mut self, vm_start: u64, hv: &HVma, idx: u64, cow_from_owner: bool) -> Option<u32> {
        let size = self.hugetlb_inode(hv.ino).size;
        // vma_needs_reservation (__vma_reservation_common): shared, a reservation is an index in
        // the inode's map; private, the owner's map holds the consumed indices; a child has none.
        let map_chg = cow_from_owner
            || match (&hv.owner, hv.shared) {
                (_, true) => !self.hugetlb_inode(hv.ino).resv.contains(&idx),
                (Some(consumed), false) => consumed.contains(&idx),
                (None, false) => true,
            };
        let gbl_chg = map_chg;
        let h = &mut self.hugetlb.hstates[size.idx()];
        let dequeued = if gbl_chg && h.available() == 0 { None } else { h.free_list.pop() };
        let pfn = match dequeued {
            Some(p) => {
                h.free_huge_pages -= 1;
                p
            }
            None => self.alloc_surplus_hugetlb_folio(size)?,
        };
        if !gbl_chg {
            self.hugetlb.hstates[size.idx()].resv_huge_pages -= 1;
        }
        if !cow_from_owner {
            // vma_commit_reservation.
            if hv.shared {
                self.hugetlb_inode_mut(hv.ino).resv.insert(idx);
            } else if let Some(consumed) = self.hugetlb.vmas.get_mut(&(self.mm.id.0, vm_start)).and_then(|v| v.owner.as_mut()) {
                consumed.insert(idx);
            }
        }
        let folio = HFolio { pfn, size, mapcount: 0, anon: false };
        let slot = self.hugetlb.folios.iter().position(|f| f.is_none());
        Some(match slot {
            Some(s) => {
                self.hugetlb.folios[s] = Some(folio);
                s as u32
            }
            None => {
                self.hugetlb.folios.push(Some(folio));
                (self.hugetlb.folios.len() - 1) as u32
            }
        })
    }

    /// `hugetlb_wp`: a write to a read-only huge PTE. Shared: made writable. Private: the page
    /// is reused when this mapping is its only one; otherwise copied into a new page (the owner
    /// of the reservation copies outside it; when that fails the page is taken back from the
    /// children, `unmap_ref_private`, and reused). SIGBUS when a child's copy finds no page.
    fn hugetlb_wp(&mut self, vma: &Vma, hv: &HVma, haddr: u64, pte: HPte) -> Access {
        let key = (self.mm.id.0, haddr);
        if hv.shared {
            self.hugetlb.ptes.insert(key, HPte { write: true, ..pte });
            return Access::Fault;
        }
        let old = self.hugetlb_folio(pte.folio).clone();
        if old.mapcount == 1 && old.anon {
            self.hugetlb.ptes.insert(key, HPte { write: true, ..pte });
            return Access::Fault;
        }
        let cow_from_owner = hv.owner.is_some() && old.anon;
        let idx = hv.pgoff + (haddr - vma.start) / old.size.bytes();
        match self.alloc_hugetlb_folio(vma.start, hv, idx, cow_from_owner) {
            Some(new) => {
                let folio = self.hugetlb_folio_mut(new);
                folio.anon = true;
                folio.mapcount = 1;
                self.hugetlb.ptes.insert(key, HPte { folio: new, write: true });
                self.hugetlb_remove_rmap(pte.folio);
                Access::Fault
            }
            None if cow_from_owner => {
                self.unmap_ref_private(hv.ino, pte.folio);
                self.hugetlb.ptes.insert(key, HPte { write: true, ..pte });
                Access::Fault
            }
            None => Access::Sigbus,
        }
    }

    /// `unmap_ref_private`: every other mm's mapping of `folio` through a mapping of the same
    /// file that does not own the reservation loses it and is marked HPAGE_RESV_UNMAPPED (its
    /// next fault there is SIGBUS).
    fn unmap_ref_private(&mut self, ino: u32, folio: u32) {
        let me = self.mm.id.0;
        let victims: Vec<(u32, u64)> = self.hugetlb.ptes.iter().filter(|(k, p)| k.0 != me && p.folio == folio).map(|(k, _)| *k).collect();
        for (mm, addr) in victims {
            let vma_key = self.hugetlb.vmas.range(..=(mm, addr)).next_back().map(|(k, _)| *k);
            let Some(vk) = vma_key else { continue };
            let hv = self.hugetlb.vmas.get_mut(&vk).expect("listed");
            if vk.0 != mm || hv.ino != ino || hv.owner.is_some() || addr >= hv.end {
                continue;
            }
            hv.resv_unmapped = true;
            self.hugetlb.ptes.remove(&(mm, addr));
            self.hugetlb_folio_mut(folio).mapcount -= 1;
        }
    }

    /// fork's part for hugetlb VMA `v` of the current mm (`dup_mmap`): the child's VMA maps the
    /// same file (`hugetlb_vm_op_open`) without the parent's private reservation
    /// (`hugetlb_dup_vma_private`); `copy_hugetlb_page_range` runs for a private mapping that
    /// has pages (`vma_needs_copy`: an anon_vma), sharing them write-protected on both sides.
    /// A shared mapping's child refaults from the page cache.
    pub(crate) fn hugetlb_dup_vma(&mut self, child: MmId, v: &Vma) {
        let parent = self.mm.id.0;
        let hv = self.hvma(v.start).clone();
        self.hugetlb_inode_mut(hv.ino).refs += 1;
        let child_hv = HVma { owner: None, resv_unmapped: false, ..hv.clone() };
        self.hugetlb.vmas.insert((child.0, v.start), child_hv);
        if hv.shared || v.flags & vm::WIPEONFORK != 0 {
            return;
        }
        let ptes: Vec<(u64, HPte)> = self.hugetlb.ptes.range((parent, v.start)..(parent, v.end)).map(|(k, p)| (k.1, *p)).collect();
        for (addr, p) in ptes {
            self.hugetlb.ptes.insert((parent, addr), HPte { write: false, ..p });
            self.hugetlb.ptes.insert((child.0, addr), HPte { write: false, ..p });
            self.hugetlb_folio_mut(p.folio).mapcount += 1;
        }
    }

    /// The hugetlb folios the current mm maps in `ranges`, into `census`: each one folio of its
    /// size, mapped by a PMD (or PUD) entry, as /proc/kpageflags shows them (KPF_HUGE) to the
    /// live census. Not in Rss (smaps counts them in `*_Hugetlb`).
    pub(crate) fn hugetlb_census(&self, ranges: &[(u64, u64)], census: &mut thp_abi::Census) {
        let mm = self.mm.id.0;
        let mut seen = BTreeSet::new();
        for &(s, e) in ranges {
            for p in self.hugetlb.ptes.range((mm, s)..(mm, e)).map(|(_, p)| p) {
                if seen.insert(p.folio) {
                    let size = thp_abi::FolioSize::of(Order(self.hugetlb_folio(p.folio).size.order()));
                    let c = census.sizes.entry(size).or_default();
                    c.folios += 1;
                    c.pmd_mapped += 1;
                }
            }
        }
    }

    /// `Private_Hugetlb` and `Shared_Hugetlb` of the current mm's VMA at `start` (bytes):
    /// each mapped page counted as shared when more than one mapping maps it
    /// (`smaps_hugetlb_range`: `folio_mapcount > 1` is shared; a private page mapped only here
    /// is private).
    pub fn hugetlb_smaps(&self, start: u64, end: u64) -> (u64, u64) {
        let mm = self.mm.id.0;
        let (mut private, mut shared) = (0, 0);
        for p in self.hugetlb.ptes.range((mm, start)..(mm, end)).map(|(_, p)| p) {
            let f = self.hugetlb_folio(p.folio);
            if f.mapcount > 1 {
                shared += f.size.bytes();
            } else {
                private += f.size.bytes();
            }
        }
        (private, shared)
    }
}

#[cfg(test)]
#[path = "hugetlb_tests.rs"]
mod tests;
