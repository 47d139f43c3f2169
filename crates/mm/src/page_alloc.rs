//! The buddy allocator and the memory map: one [`Page`] record per 4 KiB frame.
//!
//! Kernel sources (6.18): `mm/page_alloc.c` (`__rmqueue_smallest`, `expand`, `__free_one_page`,
//! `__zone_watermark_ok`, `calculate_min_free_kbytes`, `__setup_per_zone_wmarks`,
//! `__alloc_pages_slowpath`, `wake_all_kswapds`, `__alloc_pages_direct_reclaim`),
//! `mm/huge_memory.c` (`vma_thp_gfp_mask`), `mm/khugepaged.c` (`alloc_hugepage_khugepaged_gfpmask`),
//! `include/linux/mmzone.h` (`struct free_area`), `include/linux/mm_types.h` (`struct page`).
//!
//! Modelled: one zone, free lists per order 0..=MAX_PAGE_ORDER, buddy merging on free, the min
//! watermark (an allocation may not take the zone below it), and the order-0 per-cpu list of
//! one CPU (`rmqueue_pcplist`, `rmqueue_bulk`, `free_unref_folios`, `free_pcppages_bulk`):
//! order-0 pages are taken from it and refilled in batches, freed pages go to its head, and
//! pages on it do not count as free, as in NR_FREE_PAGES. Pageblocks carry a migratetype
//! (`set_pageblock_migratetype`), which compaction reads; THP and mTHP allocations take the
//! slow path (`__alloc_pages_slowpath`, `__alloc_pages_direct_compact`) with the GFP that
//! `vma_thp_gfp_mask` (mm/huge_memory.c) gives them. Not modelled: per-migratetype free lists
//! and pageblock stealing (`__rmqueue_fallback`, `steal_suitable_fallback`), the pcp lists of
//! orders 1-3 and 9, NUMA nodes, several zones. Direct reclaim is `crate::vmscan`'s `try_to_free_pages`.
//! docs/model.md lists these.

use std::collections::VecDeque;

use mm_types::{Order, Pfn, MAX_PAGE_ORDER};

/// "No page": end of a free list.
pub(crate) const NIL: u32 = u32::MAX;

/// Page flags the model keeps (a subset of `enum pageflags` plus model-only bits).
pub(crate) mod pg {
    /// Head of a free buddy block (`PageBuddy`); `order` is the block order.
    pub const BUDDY: u16 = 1 << 0;
    /// Head of an allocated folio or page (`PageHead` for large, any allocated for order 0).
    pub const HEAD: u16 = 1 << 1;
    /// Tail page of a large folio.
    pub const TAIL: u16 = 1 << 2;
    /// Anonymous folio (`folio_test_anon`).
    pub const ANON: u16 = 1 << 3;
    /// The huge zero folio.
    pub const HUGE_ZERO: u16 = 1 << 4;
    /// A page-table page.
    pub const PGTABLE: u16 = 1 << 5;
    /// `PG_partially_mapped` (on the head).
    pub const PARTIALLY_MAPPED: u16 = 1 << 6;
    /// On the deferred split queue (`!list_empty(&folio->_deferred_list)`).
    pub const DEFERRED: u16 = 1 << 7;
    /// Model only: the workload accessed this 4 KiB page while it was mapped (cleared only when
    /// the frame is allocated again: unmapping, in one mm or all, leaves it).
    pub const TOUCHED: u16 = 1 << 8;
    /// Model bookkeeping: this large anon folio is counted in `nr_anon` (it got its first rmap).
    pub const NR_ANON: u16 = 1 << 9;
    /// Held by the rest of the system (fragmentation preconditioning), never by this process.
    pub const RESERVED: u16 = 1 << 10;
    /// A shmem page-cache folio (on the head).
    pub const SHMEM: u16 = 1 << 11;
    /// `PageReported`: a free block head whose memory was reported to the host
    /// (mm/page_reporting.c); cleared when the block leaves its free list.
    pub const REPORTED: u16 = 1 << 13;
    /// Not `PageAnonExclusive`: fork shared this anon page (on the head only while the folio
    /// is PMD-mapped, as the kernel keeps it); set by `copy_present_ptes`/`copy_huge_pmd`,
    /// cleared when a write fault reuses the page. A new page is exclusive.
    pub const ANON_SHARED: u16 = 1 << 12;
    /// `PG_lru`: on an LRU list (the head; `Page::lru` says which list, `vmscan`).
    pub const LRU: u16 = 1 << 14;
    /// `PG_referenced`: reclaim saw the folio young once and kept it (`folio_check_references`).
    pub const REFERENCED: u16 = 1 << 15;
    /// Model only: a page held by the rest of the system (with `RESERVED`) that compaction may
    /// migrate, as page cache or another process's anon page would be (`fragment`'s movable
    /// share); without it a held page is unmovable. It shares its bit with `REFERENCED`: a
    /// `RESERVED` page is never on an LRU, and only compaction reads this bit, on such a page.
    pub const HELD_MOVABLE: u16 = 1 << 15;
}

/// `enum migratetype` (include/linux/mmzone.h): the migratetype of a pageblock, as
/// `get_pageblock_migratetype` reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Migratetype {
    Unmovable = 0,
    Movable = 1,
    Reclaimable = 2,
}

/// `pageblock_order` on x86-64 with THP: a pageblock is a PMD's 2 MiB.
pub const PAGEBLOCK_ORDER: u8 = 9;

/// `struct page`, 8 bytes: flags, the order of the buddy block (free) or of the folio this page
/// belongs to (allocated), and the PTE mapcount. What the kernel keeps in the first tail pages of
/// a large folio (`_entire_mapcount`, `_nr_pages_mapped`) is in [`FolioMeta`]; the links of a
/// free block's list entry (`page->buddy_list`) are in the zone's link pool, whose slot a free
/// block head keeps in `mapcount` (a free page maps nothing).
#[derive(Clone, Copy, Default, Debug)]
#[repr(C)]
pub(crate) struct Page {
    pub flags: u16,
    pub order: u8,
    /// On the head of a folio on the LRU: `vmscan::LRU_ACTIVE` and the entry generation.
    pub lru: u8,
    /// PTE mappings of this page (`_mapcount + 1`); for a free block head, its link slot.
    pub mapcount: i32,
}

const _: () = assert!(std::mem::size_of::<Page>() == 8);

/// The folio fields of a large folio's tail pages (`folio->_entire_mapcount`,
/// `folio->_nr_pages_mapped` without the ENTIRELY_MAPPED bias), one record per two frames:
/// a large folio has at least two pages, so `head / 2` is its own. An order-0 folio has none:
/// its entire mapcount is 0 and the pages it has mapped are `mapcount > 0`.
#[derive(Clone, Copy, Default, Debug)]
#[repr(C)]
pub(crate) struct FolioMeta {
    /// PMDs mapping the folio (only a PMD-order folio has any).
    pub entire: u16,
    /// Pages of the folio mapped by at least one PTE (at most 512).
    pub mapped: u16,
}

/// A table straight from zeroed memory: the host gives zero pages lazily, so booting a 24 GiB
/// machine costs nothing until frames are used (`vec![Page::default(); n]` would write every
/// record). Only for [`Page`] and [`FolioMeta`].
fn zeroed_table<T: ZeroIsDefault>(n: usize) -> Vec<T> {
    if n == 0 {
        return Vec::new();
    }
    let layout = std::alloc::Layout::array::<T>(n).expect("mem_map size fits in memory");
    // SAFETY: `T` is `Page` or `FolioMeta` (the sealed trait below), both `repr(C)` and made
    // of integers only, so all-zero bytes are a valid `T` (equal to `T::default()`). The
    // pointer comes from the global allocator with the layout of `[T; n]`, which is what
    // `Vec::from_raw_parts` requires for capacity n.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout) as *mut T;
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Vec::from_raw_parts(ptr, n, n)
    }
}

trait ZeroIsDefault {}
impl ZeroIsDefault for Page {}
impl ZeroIsDefault for FolioMeta {}

#[derive(Clone, Copy, Debug)]
struct FreeArea {
    head: u32,
    /// The last block of the list (`list_last_entry`), where reported blocks go back.
    tail: u32,
    nr_free: u32,
}

/// Watermarks in pages (`zone->_watermark`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watermarks {
    pub min: u64,
    pub low: u64,
    pub high: u64,
}

/// One zone of physical memory and its buddy free lists.
pub struct Zone {
    pub(crate) mem_map: Vec<Page>,
    /// One [`FolioMeta`] per two frames.
    pub(crate) folio_meta: Vec<FolioMeta>,
    /// Free-list links (next, prev) of free block heads, by slot; `free_slots` are unused slots.
    links: Vec<[u32; 2]>,
    free_slots: Vec<u32>,
    free_area: [FreeArea; MAX_PAGE_ORDER as usize + 1],
    nr_free: u64,
    managed: u64,
    pub(crate) wmark: Watermarks,
    /// Frames the model is asked to keep away from the allocator.
    reserved: u64,
    /// Never-used MAX_PAGE_ORDER blocks `[wild_next, wild_end)`: free, but not yet on a list.
    /// They are carved off in PFN order when the MAX_PAGE_ORDER list runs dry, which hands out
    /// blocks in the same order as listing them all at boot, without touching their records.
    wild_next: u32,
    wild_end: u32,
    /// The order-0 per-cpu list: taken from the front, refilled at the back, freed to the front.
    pcp: VecDeque<u32>,
    pcp_batch: u32,
    pcp_high: u32,
    /// Free page reporting and the host's backing of the frames, when the machine has a
    /// reporting device (`crate::page_reporting`).
    pub(crate) host: Option<Box<crate::page_reporting::Host>>,
    /// Frames `seed_free_areas` left held by the rest of the system.
    seed_held: u64,
    /// Pageblocks that are not MIGRATE_MOVABLE (`set_pageblock_migratetype`), by pageblock
    /// index; every other pageblock is movable, as `memmap_init_zone` leaves them all at boot.
    /// The free lists are not split by migratetype (see the module header).
    pub(crate) pageblock_not_movable: std::collections::HashMap<u32, Migratetype>,
}

impl Zone {
    /// Boot with `nr_pages` frames, all free, in MAX_PAGE_ORDER blocks (plus smaller ones at the
    /// end). `min_free_kbytes` sets the watermarks as `__setup_per_zone_wmarks` does with
    /// watermark_scale_factor 10.
    pub fn new(nr_pages: u32, min_free_kbytes: u64) -> Zone {
        let mem_map = zeroed_table(nr_pages as usize);
        let folio_meta = zeroed_table(nr_pages as usize / 2 + 1);
        let min = min_free_kbytes / 4;
        let scaled = (nr_pages as u64 * 10 / 10000).max(min / 4);
        let mut zone = Zone {
            mem_map,
            folio_meta,
            links: Vec::new(),
            free_slots: Vec::new(),
            free_area: [FreeArea { head: NIL, tail: NIL, nr_free: 0 }; MAX_PAGE_ORDER as usize + 1],
            nr_free: 0,
            managed: nr_pages as u64,
            wmark: Watermarks { min, low: min + scaled, high: min + 2 * scaled },
            reserved: 0,
            wild_next: 0,
            wild_end: nr_pages & !((1 << MAX_PAGE_ORDER) - 1),
            pcp: VecDeque::new(),
            pcp_batch: 0,
            pcp_high: 0,
            host: None,
            seed_held: 0,
            pageblock_not_movable: Default::default(),
        };
        // zone_batchsize and zone_highsize (percpu_pagelist_high_fraction 0, 2 CPUs).
        let batch = (nr_pages >> 10).clamp(1, 256);
        let x = batch + batch / 2;
        zone.pcp_batch = ((1u32 << (31 - x.leading_zeros())) - 1).max(1);
        zone.pcp_high = ((zone.wmark.low / 4) as u32).max(zone.pcp_batch * 4);
        zone.nr_free = zone.wild_end as u64;
        // The tail that is not a whole MAX_PAGE_ORDER block goes on the lists now, from the top
        // down so that the list heads end up in ascending PFN order.
        let mut blocks = Vec::new();
        let mut pfn = zone.wild_end;
        while pfn < nr_pages {
            let mut order = MAX_PAGE_ORDER;
            while pfn % (1 << order) != 0 || pfn + (1 << order) > nr_pages {
                order -= 1;
            }
            blocks.push((pfn, order));
            pfn += 1 << order;
        }
        for &(pfn, order) in blocks.iter().rev() {
            zone.add_to_free_list(Pfn(pfn), Order(order), false);
            zone.nr_free += 1 << order;
        }
        zone
    }

    pub fn nr_free_pages(&self) -> u64 {
        self.nr_free
    }

    pub fn managed_pages(&self) -> u64 {
        self.managed
    }

    pub fn nr_pages(&self) -> u32 {
        self.mem_map.len() as u32
    }

    /// Frames whose `mem_map` record was ever written: every frame below the never-used
    /// MAX_PAGE_ORDER blocks, and the tail put on the lists at boot.
    pub fn mem_map_frames_written(&self) -> u64 {
        self.wild_next as u64 + (self.nr_pages() - self.wild_end) as u64
    }

    /// Host bytes beside `mem_map`: the free-list link pool, and the folio fields of the
    /// frames written so far (an upper bound: only large folios write theirs).
    pub fn host_bytes_beside_mem_map(&self) -> usize {
        self.links.len() * std::mem::size_of::<[u32; 2]>()
            + (self.mem_map_frames_written() as usize / 2) * std::mem::size_of::<FolioMeta>()
    }

    /// Free blocks per order, as a row of /proc/buddyinfo.
    pub fn buddyinfo(&self) -> [u32; MAX_PAGE_ORDER as usize + 1] {
        let mut v = [0; MAX_PAGE_ORDER as usize + 1];
        for (o, fa) in self.free_area.iter().enumerate() {
            v[o] = fa.nr_free;
        }
        v[MAX_PAGE_ORDER as usize] += self.wild_blocks();
        v
    }

    fn wild_blocks(&self) -> u32 {
        (self.wild_end - self.wild_next) >> MAX_PAGE_ORDER
    }

    #[inline]
    fn link_slot(&self, pfn: u32) -> usize {
        self.mem_map[pfn as usize].mapcount as usize
    }

    /// A link slot holding `[next, prev]`.
    fn new_link(&mut self, next: u32, prev: u32) -> i32 {
        match self.free_slots.pop() {
            Some(s) => {
                self.links[s as usize] = [next, prev];
                s as i32
            }
            None => {
                self.links.push([next, prev]);
                (self.links.len() - 1) as i32
            }
        }
    }

    /// `__add_to_free_list`: the block goes to the head of its list, or with `tail` to the end,
    /// where `__rmqueue_smallest` takes it last.
    #[inline]
    fn add_to_free_list(&mut self, pfn: Pfn, order: Order, tail: bool) {
        let fa = &mut self.free_area[order.0 as usize];
        let (next, prev) = if tail { (NIL, fa.tail) } else { (fa.head, NIL) };
        if next == NIL {
            fa.tail = pfn.0;
        }
        if prev == NIL {
            fa.head = pfn.0;
        }
        fa.nr_free += 1;
        let slot = self.new_link(next, prev);
        self.mem_map[pfn.idx()] = Page { flags: pg::BUDDY, order: order.0, mapcount: slot, ..Default::default() };
        if next != NIL {
            let s = self.link_slot(next);
            self.links[s][1] = pfn.0;
        }
        if prev != NIL {
            let s = self.link_slot(prev);
            self.links[s][0] = pfn.0;
        }
    }

    #[inline]
    fn del_from_free_list(&mut self, pfn: Pfn, order: Order) {
        let slot = self.link_slot(pfn.0);
        let [next, prev] = self.links[slot];
        if prev == NIL {
            self.free_area[order.0 as usize].head = next;
        } else {
            let s = self.link_slot(prev);
            self.links[s][0] = next;
        }
        if next != NIL {
            let s = self.link_slot(next);
            self.links[s][1] = prev;
        } else {
            self.free_area[order.0 as usize].tail = prev;
        }
        self.free_slots.push(slot as u32);
        self.free_area[order.0 as usize].nr_free -= 1;
        self.mem_map[pfn.idx()] = Page::default();
    }

    /// `folio_entire_mapcount`.
    #[inline]
    pub(crate) fn entire_mapcount(&self, head: Pfn) -> u32 {
        if self.mem_map[head.idx()].order == 0 {
            0
        } else {
            self.folio_meta[head.idx() >> 1].entire as u32
        }
    }

    /// `folio->_nr_pages_mapped`: pages of the folio mapped by at least one PTE.
    #[inline]
    pub(crate) fn nr_pages_mapped(&self, head: Pfn) -> u32 {
        let p = &self.mem_map[head.idx()];
        if p.order == 0 {
            (p.mapcount > 0) as u32
        } else {
            self.folio_meta[head.idx() >> 1].mapped as u32
        }
    }

    /// The folio fields of the block at `head` before it becomes a large folio (`prep_folio`).
    #[inline]
    pub(crate) fn folio_meta_mut_unchecked(&mut self, head: Pfn) -> &mut FolioMeta {
        &mut self.folio_meta[head.idx() >> 1]
    }

    /// The folio fields of a large folio (never of an order-0 one, which has none).
    #[inline]
    pub(crate) fn folio_meta_mut(&mut self, head: Pfn) -> &mut FolioMeta {
        debug_assert!(self.mem_map[head.idx()].order > 0, "order-0 folio {head:?} has no folio fields");
        &mut self.folio_meta[head.idx() >> 1]
    }

    /// `__zone_watermark_ok` against the min watermark.
    fn watermark_ok(&self, order: Order) -> bool {
        let free_after = self.nr_free as i64 - (1i64 << order.0) + 1 - self.reserved as i64;
        if free_after <= self.wmark.min as i64 {
            return false;
        }
        self.wild_blocks() > 0 || (order.0..=MAX_PAGE_ORDER).any(|o| self.free_area[o as usize].nr_free > 0)
    }

    /// Allocate a block of `order`: `get_page_from_freelist` → `rmqueue` →
    /// `__rmqueue_smallest` → `expand`. The caller turns it into a folio.
    #[doc(alias = "__rmqueue_smallest")]
    #[inline]
    pub fn alloc_pages(&mut self, order: Order) -> Option<Pfn> {
        if order.0 == 0 {
            return self.rmqueue_pcplist();
        }
        self.rmqueue_buddy(order)
    }

    /// Order 0: `zone_watermark_fast`, then the per-cpu list, refilled by `rmqueue_bulk`.
    #[inline]
    fn rmqueue_pcplist(&mut self) -> Option<Pfn> {
        if self.nr_free <= self.wmark.min + self.reserved {
            return None;
        }
        if self.pcp.is_empty() {
            self.rmqueue_bulk(self.pcp_batch);
        }
        let pfn = self.pcp.pop_front()?;
        if let Some(h) = self.host.as_mut() {
            h.back(pfn, 1);
        }
        Some(Pfn(pfn))
    }

    /// `rmqueue_bulk`: `n` order-0 pages onto the per-cpu list, as `n` calls of
    /// `__rmqueue_smallest(0)` would take them. The watermark was checked once for the request,
    /// as in `get_page_from_freelist`.
    ///
    /// Done a block at a time: when the smallest free block has order `o`, the lists below `o`
    /// are empty, so successive order-0 takes return its pages in ascending order, and after
    /// `m` of them the free blocks left are the aligned decomposition of the rest of the block,
    /// at most one per order below `o`: what `expand` would have left, list for list.
    fn rmqueue_bulk(&mut self, n: u32) {
        let mut got = 0;
        while got < n {
            let mut o = 0u8;
            while o <= MAX_PAGE_ORDER && self.free_area[o as usize].head == NIL {
                o += 1;
            }
            let block = if o <= MAX_PAGE_ORDER {
                let b = self.free_area[o as usize].head;
                self.del_from_free_list(Pfn(b), Order(o));
                b
            } else if self.wild_blocks() > 0 {
                o = MAX_PAGE_ORDER;
                let b = self.wild_next;
                self.wild_next += 1 << MAX_PAGE_ORDER;
                b
            } else {
                return;
            };
            let size = 1u32 << o;
            let m = (n - got).min(size);
            self.pcp.extend(block..block + m);
            self.nr_free -= m as u64;
            got += m;
            // Free the rest [block + m, block + size) as maximal aligned blocks.
            let end = block + size;
            let mut cur = block + m;
            while cur < end {
                let mut j = cur.trailing_zeros().min(o as u32);
                while cur + (1 << j) > end {
                    j -= 1;
                }
                self.add_to_free_list(Pfn(cur), Order(j as u8), false);
                cur += 1 << j;
            }
        }
    }

    /// `rmqueue_buddy`: an order the per-cpu lists do not hold (the model keeps order 0 there
    /// only), taken from the buddy lists under the zone's watermark.
    fn rmqueue_buddy(&mut self, order: Order) -> Option<Pfn> {
        if !self.watermark_ok(order) {
            return None;
        }
        let pfn = self.__rmqueue_smallest(order)?;
        if let Some(h) = self.host.as_mut() {
            h.back(pfn.0, order.nr_pages());
        }
        Some(pfn)
    }

    /// `__rmqueue_smallest`: the smallest free block that fits, split down by `expand`.
    #[inline]
    fn __rmqueue_smallest(&mut self, order: Order) -> Option<Pfn> {
        let mut current = order.0;
        while current <= MAX_PAGE_ORDER && self.free_area[current as usize].head == NIL {
            current += 1;
        }
        let pfn = if current <= MAX_PAGE_ORDER {
            let pfn = Pfn(self.free_area[current as usize].head);
            self.del_from_free_list(pfn, Order(current));
            pfn
        } else if self.wild_blocks() > 0 {
            current = MAX_PAGE_ORDER;
            let pfn = Pfn(self.wild_next);
            self.wild_next += 1 << MAX_PAGE_ORDER;
            pfn
        } else {
            return None;
        };
        self.expand(pfn, order, Order(current));
        self.nr_free -= order.nr_pages() as u64;
        Some(pfn)
    }

    /// Split a block of `high` order down to `low`, freeing the upper halves.
    fn expand(&mut self, pfn: Pfn, low: Order, high: Order) {
        let mut size = 1u32 << high.0;
        let mut high = high.0;
        while high > low.0 {
            high -= 1;
            size >>= 1;
            self.add_to_free_list(pfn.add(size), Order(high), false);
        }
    }

    /// Free a block: `__free_one_page`, merging with free buddies of the same order.
    #[doc(alias = "__free_one_page")]
    pub fn free_pages(&mut self, pfn: Pfn, order: Order) {
        for p in &mut self.mem_map[pfn.idx()..pfn.idx() + order.nr_pages() as usize] {
            *p = Page::default();
        }
        if order.0 == 0 {
            // free_unref_folios: to the head of the per-cpu list; past `high`, a batch from
            // its tail goes back to the buddy lists (free_pcppages_bulk).
            self.pcp.push_front(pfn.0);
            if self.pcp.len() as u32 > self.pcp_high {
                for _ in 0..self.pcp_batch {
                    let Some(p) = self.pcp.pop_back() else { break };
                    self.__free_one_page(Pfn(p), Order::BASE);
                }
            }
            return;
        }
        self.__free_one_page(pfn, order);
    }

    /// `__free_one_page`: merge with free buddies of the same order while there are, put the
    /// result on its free list and tell page reporting (`page_reporting_notify_free`).
    fn __free_one_page(&mut self, pfn: Pfn, order: Order) {
        let n = self.mem_map.len() as u32;
        self.nr_free += order.nr_pages() as u64;
        let mut pfn = pfn.0;
        let mut order = order.0;
        while order < MAX_PAGE_ORDER {
            let buddy = pfn ^ (1 << order);
            if buddy >= n {
                break;
            }
            let b = self.mem_map[buddy as usize];
            if b.flags & pg::BUDDY == 0 || b.order != order {
                break;
            }
            self.del_from_free_list(Pfn(buddy), Order(order));
            pfn &= buddy;
            order += 1;
        }
        self.add_to_free_list(Pfn(pfn), Order(order), false);
        if let Some(h) = self.host.as_mut() {
            h.notify_free(Order(order));
        }
    }

    // ---------------------------------------------------------------- for page_reporting

    /// Free blocks of `order` from the head of the list, with whether each is reported.
    pub(crate) fn free_list(&self, order: Order) -> impl Iterator<Item = (u32, bool)> + '_ {
        let mut cur = self.free_area[order.0 as usize].head;
        std::iter::from_fn(move || {
            (cur != NIL).then(|| {
                let p = cur;
                cur = self.links[self.link_slot(p)][0];
                (p, self.mem_map[p as usize].flags & pg::REPORTED != 0)
            })
        })
    }

    /// Free blocks of `order` (`area->nr_free`), never-used MAX_PAGE_ORDER blocks included.
    pub(crate) fn nr_free_blocks(&self, order: Order) -> u32 {
        self.free_area[order.0 as usize].nr_free + if order.0 == MAX_PAGE_ORDER { self.wild_blocks() } else { 0 }
    }

    /// `page_reporting_drain` of one block that was isolated and reported: back on its list at
    /// the tail (`__putback_isolated_page`), flagged `PageReported`.
    pub(crate) fn put_back_reported(&mut self, pfn: Pfn, order: Order) {
        self.del_from_free_list(pfn, order);
        self.add_to_free_list(pfn, order, true);
        self.mem_map[pfn.idx()].flags |= pg::REPORTED;
    }

    /// Free pages above the low watermark by at least `pages` (`zone_watermark_ok` for order 0).
    /// Free pages below the low watermark: the allocator wakes kswapd (`wakeup_kswapd`).
    pub(crate) fn below_low_watermark(&self) -> bool {
        self.nr_free < self.wmark.low
    }

    /// `pgdat_balanced`: free pages above the high watermark.
    pub(crate) fn above_high_watermark(&self) -> bool {
        self.nr_free > self.wmark.high
    }

    pub(crate) fn above_low_watermark_by(&self, pages: u64) -> bool {
        self.nr_free > self.wmark.low + pages
    }

    /// Turn the free blocks of `order` or above into what reporting leaves: flagged reported
    /// (never-used MAX_PAGE_ORDER blocks are reported as they are). Without `counts`, every one
    /// (a long idle); with them, `counts[o]` blocks of each order, the last an allocation would
    /// take (the list's tail, then the never-used blocks carved last). Returns the frames.
    pub(crate) fn mark_free_reported(&mut self, order: Order, counts: Option<&[u64]>) -> Vec<(u32, u8)> {
        let mut v = Vec::new();
        for o in order.0..=MAX_PAGE_ORDER {
            let mut blocks: Vec<u32> = self.free_list(Order(o)).map(|(p, _)| p).collect();
            if o == MAX_PAGE_ORDER {
                blocks.extend((self.wild_next..self.wild_end).step_by(1 << MAX_PAGE_ORDER));
            }
            let take = counts.map_or(blocks.len(), |c| (c.get(o as usize).copied().unwrap_or(0) as usize).min(blocks.len()));
            for &p in &blocks[blocks.len() - take..] {
                if p < self.wild_next || p >= self.wild_end {
                    self.mem_map[p as usize].flags |= pg::REPORTED;
                }
                v.push((p, o));
            }
        }
        v
    }

    /// Lay the free memory out as another machine's free lists were (a row of /proc/buddyinfo:
    /// `free[o]` blocks of order `o`), before any allocation: each block below MAX_PAGE_ORDER
    /// sits beside a buddy that the rest of the system holds, so it stays that order; the
    /// MAX_PAGE_ORDER blocks are never-used blocks at the top; the frames between are held too. When the blocks and their buddies do not fit, every
    /// count is scaled down alike. Held frames keep zeroed records (the host backs none of
    /// `mem_map` for them): they are the frames neither free nor in a folio, `seed_held` of them.
    /// Returns how many.
    pub(crate) fn seed_free_areas(&mut self, free: &[u64]) -> u64 {
        assert!(self.wild_next == 0 && self.pcp.is_empty(), "free areas are seeded at boot, before any allocation");
        let n = self.nr_pages();
        // Take everything off the lists: the boot tail blocks, and the never-used blocks.
        for o in 0..=MAX_PAGE_ORDER {
            while self.free_area[o as usize].head != NIL {
                let p = self.free_area[o as usize].head;
                self.del_from_free_list(Pfn(p), Order(o));
            }
        }
        self.wild_next = self.wild_end;
        self.nr_free = 0;
        let span = |o: usize| if o as u8 == MAX_PAGE_ORDER { 1u64 << o } else { 2u64 << o };
        let needed: u64 = free.iter().enumerate().take(MAX_PAGE_ORDER as usize + 1).map(|(o, &c)| c * span(o)).sum();
        let scale = if needed > n as u64 { n as f64 / needed as f64 } else { 1.0 };
        let count = |o: usize| (free.get(o).copied().unwrap_or(0) as f64 * scale) as u64;
        let mut held = 0u64;
        let mut cur = 0u32;
        // The MAX_PAGE_ORDER blocks stay never-used blocks at the top (`wild_next..wild_end`,
        // carved when the list runs dry): their records are written only then.
        let top = self.wild_end;
        // Below them, largest first, so that every block is aligned to its order and its buddy's.
        for o in (0..MAX_PAGE_ORDER as usize).rev() {
            for _ in 0..count(o) {
                if cur as u64 + span(o) + count(MAX_PAGE_ORDER as usize) * span(MAX_PAGE_ORDER as usize) > top as u64 {
                    break;
                }
                self.add_to_free_list(Pfn(cur), Order(o as u8), false);
                self.nr_free += 1 << o;
                held += 1 << o;
                cur += span(o) as u32;
            }
        }
        let wild = (count(MAX_PAGE_ORDER as usize) << MAX_PAGE_ORDER).min((top - cur) as u64) as u32 & !((1 << MAX_PAGE_ORDER) - 1);
        self.wild_next = top - wild;
        self.nr_free += wild as u64;
        held += (self.wild_next - cur) as u64 + (n - top) as u64;
        self.seed_held = held;
        held
    }

    /// Put `n` free pages on the per-CPU list, taken from the frames `seed_free_areas` left held
    /// below the never-used blocks (as many as there are): the pages a CPU's list holds after
    /// a large free, which an allocation there takes first. Returns how many.
    pub(crate) fn seed_pcp(&mut self, n: u64) -> u64 {
        assert!(self.pcp.is_empty(), "the per-CPU list is seeded once, before any allocation");
        // Held frames lie between the laid-out blocks (each followed by its held buddy) and the
        // never-used blocks; the pages come from the top of that gap, away from those buddies.
        let laid_end = (0..MAX_PAGE_ORDER).flat_map(|o| self.free_list(Order(o)).map(move |(p, _)| p + (2 << o))).max().unwrap_or(0);
        let n = n.min(self.wild_next.saturating_sub(laid_end) as u64) as u32;
        // As rmqueue_bulk's pages, not in the zone's free count.
        self.pcp.extend(self.wild_next - n..self.wild_next);
        self.seed_held -= n as u64;
        n as u64
    }

    /// Frames held by the rest of the system since `seed_free_areas`, unmarked.
    pub(crate) fn seed_held(&self) -> u64 {
        self.seed_held
    }

    // ---------------------------------------------------------------- for compaction

    /// `__zone_watermark_ok(z, order, mark, ..)` with NR_FREE_PAGES: free pages after taking
    /// `1 << order` stay above `mark`, and for order > 0 a free block of `order` or above exists.
    pub(crate) fn zone_watermark_ok(&self, order: u8, mark: u64) -> bool {
        let free_after = self.nr_free as i64 - (1i64 << order) + 1 - self.reserved as i64;
        if free_after <= mark as i64 {
            return false;
        }
        order == 0 || self.wild_blocks() > 0 || (order..=MAX_PAGE_ORDER).any(|o| self.free_area[o as usize].nr_free > 0)
    }

    /// `get_pageblock_migratetype` of the pageblock holding `pfn`.
    pub(crate) fn pageblock_migratetype(&self, pfn: u32) -> Migratetype {
        self.pageblock_not_movable.get(&(pfn >> PAGEBLOCK_ORDER)).copied().unwrap_or(Migratetype::Movable)
    }

    /// `set_pageblock_migratetype` of the pageblock holding `pfn`.
    pub(crate) fn set_pageblock_migratetype(&mut self, pfn: u32, mt: Migratetype) {
        if mt == Migratetype::Movable {
            self.pageblock_not_movable.remove(&(pfn >> PAGEBLOCK_ORDER));
        } else {
            self.pageblock_not_movable.insert(pfn >> PAGEBLOCK_ORDER, mt);
        }
    }

    /// The order of the free buddy block whose head is `pfn` (`PageBuddy`, `buddy_order`),
    /// never-used MAX_PAGE_ORDER blocks included.
    pub(crate) fn buddy_order_at(&self, pfn: u32) -> Option<u8> {
        if pfn >= self.wild_next && pfn < self.wild_end {
            return (pfn % (1 << MAX_PAGE_ORDER) == 0).then_some(MAX_PAGE_ORDER);
        }
        let p = &self.mem_map[pfn as usize];
        (p.flags & pg::BUDDY != 0).then_some(p.order)
    }

    /// The free buddy block that `pfn` lies in, as (head, order), if it is free: what the
    /// kernel sees there while the pages compaction freed still sit on the per-cpu list
    /// (`PageBuddy` of the page itself), the model's frees having merged at once.
    pub(crate) fn buddy_block_containing(&self, pfn: u32) -> Option<(u32, u8)> {
        (0..=MAX_PAGE_ORDER).find_map(|o| {
            let head = pfn & !((1u32 << o) - 1);
            self.buddy_order_at(head).filter(|&k| k >= o && pfn < head + (1 << k)).map(|k| (head, k))
        })
    }

    /// Every free page, the per-cpu list's included, taken off the free lists whatever the
    /// watermark (for `fragment`), in PFN order.
    pub(crate) fn take_all_free(&mut self) -> Vec<u32> {
        let mut v: Vec<u32> = self.pcp.drain(..).collect();
        while let Some(p) = self.__rmqueue_smallest(Order::BASE) {
            v.push(p.0);
        }
        if let Some(h) = self.host.as_mut() {
            for &p in &v {
                h.back(p, 1);
            }
        }
        v.sort_unstable();
        v
    }

    /// Never-used blocks `[wild_next, wild_end)`: free, with no records written.
    pub(crate) fn wild_range(&self) -> std::ops::Range<u32> {
        self.wild_next..self.wild_end
    }

    /// `__isolate_free_page` + `split_page`: take the free block at `pfn` (on a list) off the
    /// free lists, as `1 << order` order-0 pages; they are no longer free.
    pub(crate) fn isolate_free_block(&mut self, pfn: u32, order: u8) {
        self.del_from_free_list(Pfn(pfn), Order(order));
        self.nr_free -= 1 << order;
        if let Some(h) = self.host.as_mut() {
            h.back(pfn, 1 << order);
        }
    }

    /// Give an isolated or migrated-from page straight back to the buddy lists
    /// (`release_free_list`; a page freed by migration once compaction drains the per-cpu list).
    pub(crate) fn free_to_buddy(&mut self, pfn: u32) {
        self.mem_map[pfn as usize] = Page::default();
        self.__free_one_page(Pfn(pfn), Order::BASE);
    }

    /// Hold back `pages` from allocation (a model knob for low-memory experiments).
    pub fn set_reserved(&mut self, pages: u64) {
        self.reserved = pages;
    }

    #[cfg(test)]
    fn shallow(&self) -> Zone {
        Zone {
            mem_map: Vec::new(),
            folio_meta: Vec::new(),
            links: Vec::new(),
            free_slots: Vec::new(),
            free_area: self.free_area,
            nr_free: self.nr_free,
            managed: self.managed,
            wmark: self.wmark,
            reserved: self.reserved,
            wild_next: self.wild_next,
            wild_end: self.wild_end,
            pcp: VecDeque::new(),
            pcp_batch: self.pcp_batch,
            pcp_high: self.pcp_high,
            host: None,
            seed_held: self.seed_held,
            pageblock_not_movable: self.pageblock_not_movable.clone(),
        }
    }

    /// Pages on the per-cpu list (free, but neither on a buddy list nor counted in nr_free).
    pub(crate) fn pcp_pages(&self) -> impl Iterator<Item = u32> + '_ {
        self.pcp.iter().copied()
    }

    /// Every free block as (pfn, order), for invariant checks.
    pub(crate) fn free_blocks(&self) -> Vec<(u32, u8)> {
        let mut v: Vec<(u32, u8)> =
            (self.wild_next..self.wild_end).step_by(1 << MAX_PAGE_ORDER).map(|p| (p, MAX_PAGE_ORDER)).collect();
        for (o, fa) in self.free_area.iter().enumerate() {
            let mut cur = fa.head;
            let mut last = NIL;
            let mut n = 0;
            while cur != NIL {
                v.push((cur, o as u8));
                last = cur;
                cur = self.links[self.link_slot(cur)][0];
                n += 1;
                assert!(n <= fa.nr_free, "free list of order {o} is longer than nr_free");
            }
            assert_eq!(n, fa.nr_free, "free list of order {o} disagrees with nr_free");
            assert_eq!(last, fa.tail, "free list of order {o} ends elsewhere than its tail");
        }
        v
    }
}

/// The GFP bits that decide a THP or mTHP allocation's slow path (`gfp_t`, include/linux/gfp_types.h).
/// Every such allocation is GFP_TRANSHUGE_LIGHT (movable, no reclaim) plus these.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gfp {
    /// `__GFP_DIRECT_RECLAIM`: may stall in direct reclaim and direct compaction.
    pub direct_reclaim: bool,
    /// `__GFP_KSWAPD_RECLAIM`: wakes kswapd (and through it kcompactd).
    pub kswapd_reclaim: bool,
    /// `__GFP_NORETRY`: gives up after one round.
    pub noretry: bool,
}

impl Gfp {
    /// GFP_TRANSHUGE_LIGHT: neither reclaim nor compaction; fails at once.
    pub const TRANSHUGE_LIGHT: Gfp = Gfp { direct_reclaim: false, kswapd_reclaim: false, noretry: false };
    /// GFP_TRANSHUGE: GFP_TRANSHUGE_LIGHT | __GFP_DIRECT_RECLAIM.
    pub const TRANSHUGE: Gfp = Gfp { direct_reclaim: true, kswapd_reclaim: false, noretry: false };
    /// GFP_HIGHUSER_MOVABLE (an order-0 user page): __GFP_RECLAIM, may retry and OOM.
    pub const HIGHUSER_MOVABLE: Gfp = Gfp { direct_reclaim: true, kswapd_reclaim: true, noretry: false };
}

/// `vma_thp_gfp_mask` (mm/huge_memory.c): the GFP of a THP or mTHP fault allocation by the
/// `defrag` mode and whether the VMA is madvised (VM_HUGEPAGE).
pub fn vma_thp_gfp_mask(defrag: thp_abi::settings::Defrag, madvised: bool) -> Gfp {
    use thp_abi::settings::Defrag;
    match defrag {
        // Always do synchronous compaction (and give up early unless madvised).
        Defrag::Always => Gfp { noretry: !madvised, ..Gfp::TRANSHUGE },
        // Kick kcompactd and fail quickly.
        Defrag::Defer => Gfp { kswapd_reclaim: true, ..Gfp::TRANSHUGE_LIGHT },
        // Synchronous compaction if madvised, otherwise kick kcompactd.
        Defrag::DeferMadvise => Gfp { direct_reclaim: madvised, kswapd_reclaim: !madvised, noretry: false },
        // Only do synchronous compaction if madvised.
        Defrag::Madvise => Gfp { direct_reclaim: madvised, ..Gfp::TRANSHUGE_LIGHT },
        Defrag::Never => Gfp::TRANSHUGE_LIGHT,
    }
}

/// `alloc_hugepage_khugepaged_gfpmask`: khugepaged's collapse allocations by `khugepaged/defrag`.
pub fn khugepaged_gfp_mask(khugepaged_defrag: bool) -> Gfp {
    if khugepaged_defrag { Gfp::TRANSHUGE } else { Gfp::TRANSHUGE_LIGHT }
}

impl crate::Kernel {
    /// `__alloc_pages` of a large anon folio's block with `gfp`: the free lists, then
    /// [`Self::__alloc_pages_slowpath`].
    pub(crate) fn alloc_pages_gfp(&mut self, order: Order, gfp: Gfp) -> Option<Pfn> {
        self.zone.alloc_pages(order).or_else(|| self.__alloc_pages_slowpath(order, gfp))
    }

    /// `__alloc_pages_slowpath` for a movable order > 0 allocation, in 6.18's order: wake
    /// kswapd (`wake_all_kswapds`: the model's kswapd, when the order-0 watermarks are fine,
    /// leaves a high order to kcompactd, as `wakeup_kswapd` does once the node is balanced);
    /// without __GFP_DIRECT_RECLAIM fail. For a costly order (above 3), async direct
    /// compaction first; with __GFP_NORETRY a skipped or deferred compaction ends it there.
    /// Then direct reclaim, then direct compaction (sync-light, or async again after a
    /// __GFP_NORETRY first try), and no retry: __GFP_NORETRY stops, and so does a costly order
    /// without __GFP_RETRY_MAYFAIL. A non-costly order would retry while reclaim makes
    /// progress (`should_reclaim_retry`, `should_compact_retry`) and may reach the OOM killer:
    /// not modelled, it fails after one round.
    pub(crate) fn __alloc_pages_slowpath(&mut self, order: Order, gfp: Gfp) -> Option<Pfn> {
        let costly = order.0 > crate::compaction::PAGE_ALLOC_COSTLY_ORDER;
        if gfp.kswapd_reclaim {
            self.wake_all_kswapds(order, gfp);
        }
        if !gfp.direct_reclaim {
            return None;
        }
        use crate::compaction::{CompactPriority, CompactResult};
        let mut prio = CompactPriority::SyncLight;
        if costly {
            let (page, result) = self.__alloc_pages_direct_compact(order, CompactPriority::Async);
            if page.is_some() {
                return page;
            }
            if gfp.noretry {
                if matches!(result, CompactResult::Skipped | CompactResult::Deferred) {
                    return None;
                }
                prio = CompactPriority::Async;
            }
        }
        if gfp.kswapd_reclaim {
            self.wake_all_kswapds(order, gfp);
        }
        // __alloc_pages_direct_reclaim (`crate::vmscan`): the model's reclaimable memory is
        // anon memory with swap to go to; without swap there is nothing to reclaim and the
        // model does not enter it (the kernel would, and count allocstall, to reclaim nothing
        // but page cache the model does not have).
        if self.swap.is_some() && self.try_to_free_pages(order) > 0 {
            if let Some(p) = self.zone.alloc_pages(order) {
                return Some(p);
            }
        }
        self.__alloc_pages_direct_compact(order, prio).0
    }

    /// `wake_all_kswapds` → `wakeup_kswapd` for one zone: with the order-0 high watermark met
    /// (nothing to reclaim) and no __GFP_DIRECT_RECLAIM, kcompactd is woken for the order.
    /// Below it, kswapd would reclaim and wake kcompactd when it goes to sleep: the model's
    /// kswapd is not here yet, so kcompactd is woken then too.
    fn wake_all_kswapds(&mut self, order: Order, gfp: Gfp) {
        if order.0 == 0 || gfp.direct_reclaim && self.zone.zone_watermark_ok(0, self.zone.wmark.high) {
            return;
        }
        self.wakeup_kcompactd(order);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buddy_splits_and_merges() {
        // 4 MiB + 8 KiB: one order-10 block and one order-1 block.
        let mut z = Zone::new(1026, 0);
        assert_eq!(z.buddyinfo(), [0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        let a = z.rmqueue_buddy(Order(0)).unwrap();
        // The order-1 block is the smallest that fits: split into two order-0 pages.
        assert_eq!(a, Pfn(1024));
        assert_eq!(z.buddyinfo(), [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        let b = z.alloc_pages(Order(2)).unwrap();
        assert_eq!(b, Pfn(0));
        // expand() left one block each of orders 2..=9.
        assert_eq!(z.buddyinfo(), [1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0]);
        z.free_pages(b, Order(2));
        assert_eq!(z.buddyinfo(), [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        z.__free_one_page(a, Order(0));
        assert_eq!(z.buddyinfo(), [0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(z.nr_free_pages(), 1026);
        assert_eq!(z.free_blocks().len(), 2);
    }

    #[test]
    fn min_watermark_refuses_the_last_pages() {
        // min_free_kbytes 16 → min watermark 4 pages.
        let mut z = Zone::new(16, 16);
        let mut got = 0;
        while z.alloc_pages(Order(0)).is_some() {
            got += 1;
        }
        // Allocation stops once free would drop to the min watermark; the per-cpu list
        // refill stops there too.
        assert_eq!(got, 12);
        assert_eq!(z.nr_free_pages(), 4);
    }

    #[test]
    fn bulk_refill_equals_repeated_rmqueue_smallest() {
        // From a scattered state, rmqueue_bulk(n) must leave the same free lists (same blocks
        // in the same list order) and hand out the same pages as n single takes.
        for n in [1u32, 3, 15, 64, 255, 700, 2000] {
            let mut a = Zone::new(4096 + 7, 0);
            let mut taken = Vec::new();
            for order in [0u8, 3, 0, 1, 5, 0, 2, 9, 0, 4] {
                taken.push((a.rmqueue_buddy(Order(order)).unwrap(), order));
            }
            for (i, (p, o)) in taken.iter().enumerate() {
                if i % 3 != 1 {
                    a.__free_one_page(*p, Order(*o));
                }
            }
            let mut b = Zone {
            mem_map: a.mem_map.clone(),
            links: a.links.clone(),
            free_slots: a.free_slots.clone(),
            free_area: a.free_area,
            pcp: VecDeque::new(),
            ..a.shallow()
        };
            a.rmqueue_bulk(n);
            for _ in 0..n {
                match b.__rmqueue_smallest(Order(0)) {
                    Some(p) => b.pcp.push_back(p.0),
                    None => break,
                }
            }
            assert_eq!(a.pcp, b.pcp, "n={n}");
            assert_eq!(a.free_blocks(), b.free_blocks(), "n={n}");
            assert_eq!(a.nr_free, b.nr_free, "n={n}");
        }
    }

    #[test]
    fn per_cpu_list_refills_in_batches_and_takes_frees_first() {
        let mut z = Zone::new(1 << 14, 0);
        let batch = z.pcp_batch;
        // zone_batchsize for 16384 pages: min(16, 256) → rounddown_pow_of_two(24) - 1 = 15.
        assert_eq!(batch, 15);
        let a = z.alloc_pages(Order(0)).unwrap();
        assert_eq!(a, Pfn(0));
        assert_eq!(z.pcp.len() as u32, batch - 1);
        assert_eq!(z.nr_free_pages(), (1 << 14) - batch as u64);
        let b = z.alloc_pages(Order(0)).unwrap();
        assert_eq!(b, Pfn(1));
        z.free_pages(a, Order(0));
        // A freed page is the next one handed out (hot first).
        assert_eq!(z.alloc_pages(Order(0)), Some(a));
    }
}
