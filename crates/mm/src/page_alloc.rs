//! The buddy allocator and the memory map: one [`Page`] record per 4 KiB frame.
//!
//! Kernel sources (6.18): `mm/page_alloc.c` (`__rmqueue_smallest`, `expand`, `__free_one_page`,
//! `__zone_watermark_ok`, `calculate_min_free_kbytes`, `__setup_per_zone_wmarks`),
//! `include/linux/mmzone.h` (`struct free_area`), `include/linux/mm_types.h` (`struct page`).
//!
//! Modelled: one zone, free lists per order 0..=MAX_PAGE_ORDER, buddy merging on free, the min
//! watermark (an allocation may not take the zone below it). Not modelled: migratetypes and
//! pageblock stealing, per-cpu page lists, NUMA nodes, several zones, reclaim and compaction
//! (an allocation that does not fit the free lists fails). docs/model.md lists these.

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
    /// Model only: the workload accessed this 4 KiB page while it was mapped.
    pub const TOUCHED: u16 = 1 << 8;
    /// Model bookkeeping: this large anon folio is counted in `nr_anon` (it got its first rmap).
    pub const NR_ANON: u16 = 1 << 9;
    /// Held by the rest of the system (fragmentation preconditioning), never by this process.
    pub const RESERVED: u16 = 1 << 10;
}

/// `struct page`, 16 bytes. For a free block head, `a`/`b` link the free list. For an
/// allocated folio head, `a` is the entire (PMD) mapcount and `b` the number of pages mapped by
/// at least one PTE (`_nr_pages_mapped` without the ENTIRELY_MAPPED bias).
#[derive(Clone, Copy, Default, Debug)]
#[repr(C)]
pub(crate) struct Page {
    pub flags: u16,
    /// Order of the buddy block (free) or of the folio this page belongs to (allocated).
    pub order: u8,
    _pad: u8,
    /// PTE mappings of this page (`_mapcount + 1`).
    pub mapcount: i32,
    pub a: u32,
    pub b: u32,
}

const _: () = assert!(std::mem::size_of::<Page>() == 16);

#[derive(Clone, Copy, Debug)]
struct FreeArea {
    head: u32,
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
    free_area: [FreeArea; MAX_PAGE_ORDER as usize + 1],
    nr_free: u64,
    managed: u64,
    pub(crate) wmark: Watermarks,
    /// Frames the model is asked to keep away from the allocator (fragmentation preconditioning).
    reserved: u64,
}

impl Zone {
    /// Boot with `nr_pages` frames, all free, in MAX_PAGE_ORDER blocks (plus smaller ones at the
    /// end). `min_free_kbytes` sets the watermarks as `__setup_per_zone_wmarks` does with
    /// watermark_scale_factor 10.
    pub fn new(nr_pages: u32, min_free_kbytes: u64) -> Zone {
        // vec![Page::default(); n] is calloc: untouched frames cost no host memory.
        let mem_map = vec![Page::default(); nr_pages as usize];
        let min = min_free_kbytes / 4;
        let scaled = (nr_pages as u64 * 10 / 10000).max(min / 4);
        let mut zone = Zone {
            mem_map,
            free_area: [FreeArea { head: NIL, nr_free: 0 }; MAX_PAGE_ORDER as usize + 1],
            nr_free: 0,
            managed: nr_pages as u64,
            wmark: Watermarks { min, low: min + scaled, high: min + 2 * scaled },
            reserved: 0,
        };
        // Free from the top down so that the list heads end up in ascending PFN order.
        let mut blocks = Vec::new();
        let mut pfn = 0u32;
        while pfn < nr_pages {
            let mut order = MAX_PAGE_ORDER;
            while pfn % (1 << order) != 0 || pfn + (1 << order) > nr_pages {
                order -= 1;
            }
            blocks.push((pfn, order));
            pfn += 1 << order;
        }
        for &(pfn, order) in blocks.iter().rev() {
            zone.add_to_free_list(Pfn(pfn), Order(order));
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

    /// Free blocks per order, as a row of /proc/buddyinfo.
    pub fn buddyinfo(&self) -> [u32; MAX_PAGE_ORDER as usize + 1] {
        let mut v = [0; MAX_PAGE_ORDER as usize + 1];
        for (o, fa) in self.free_area.iter().enumerate() {
            v[o] = fa.nr_free;
        }
        v
    }

    fn add_to_free_list(&mut self, pfn: Pfn, order: Order) {
        let fa = &mut self.free_area[order.0 as usize];
        let old = fa.head;
        fa.head = pfn.0;
        fa.nr_free += 1;
        let p = &mut self.mem_map[pfn.idx()];
        *p = Page { flags: pg::BUDDY, order: order.0, a: old, b: NIL, ..Default::default() };
        if old != NIL {
            self.mem_map[old as usize].b = pfn.0;
        }
    }

    fn del_from_free_list(&mut self, pfn: Pfn, order: Order) {
        let Page { a: next, b: prev, .. } = self.mem_map[pfn.idx()];
        if prev == NIL {
            self.free_area[order.0 as usize].head = next;
        } else {
            self.mem_map[prev as usize].a = next;
        }
        if next != NIL {
            self.mem_map[next as usize].b = prev;
        }
        self.free_area[order.0 as usize].nr_free -= 1;
        self.mem_map[pfn.idx()] = Page::default();
    }

    /// `__zone_watermark_ok` against the min watermark.
    fn watermark_ok(&self, order: Order) -> bool {
        let free_after = self.nr_free as i64 - (1i64 << order.0) + 1 - self.reserved as i64;
        if free_after <= self.wmark.min as i64 {
            return false;
        }
        (order.0..=MAX_PAGE_ORDER).any(|o| self.free_area[o as usize].nr_free > 0)
    }

    /// Allocate a block of `order`: `get_page_from_freelist` → `rmqueue` →
    /// `__rmqueue_smallest` → `expand`. The caller turns it into a folio.
    #[doc(alias = "__rmqueue_smallest")]
    pub fn alloc_pages(&mut self, order: Order) -> Option<Pfn> {
        if !self.watermark_ok(order) {
            return None;
        }
        let mut current = order.0;
        while current <= MAX_PAGE_ORDER && self.free_area[current as usize].head == NIL {
            current += 1;
        }
        if current > MAX_PAGE_ORDER {
            return None;
        }
        let pfn = Pfn(self.free_area[current as usize].head);
        self.del_from_free_list(pfn, Order(current));
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
            self.add_to_free_list(pfn.add(size), Order(high));
        }
    }

    /// Free a block: `__free_one_page`, merging with free buddies of the same order.
    #[doc(alias = "__free_one_page")]
    pub fn free_pages(&mut self, pfn: Pfn, order: Order) {
        let n = self.mem_map.len() as u32;
        for p in &mut self.mem_map[pfn.idx()..pfn.idx() + order.nr_pages() as usize] {
            *p = Page::default();
        }
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
        self.add_to_free_list(Pfn(pfn), Order(order));
    }

    /// Hold back `pages` from allocation (a model knob for low-memory experiments).
    pub fn set_reserved(&mut self, pages: u64) {
        self.reserved = pages;
    }

    /// Every free block as (pfn, order), for invariant checks.
    pub(crate) fn free_blocks(&self) -> Vec<(u32, u8)> {
        let mut v = Vec::new();
        for (o, fa) in self.free_area.iter().enumerate() {
            let mut cur = fa.head;
            let mut n = 0;
            while cur != NIL {
                v.push((cur, o as u8));
                cur = self.mem_map[cur as usize].a;
                n += 1;
                assert!(n <= fa.nr_free, "free list of order {o} is longer than nr_free");
            }
            assert_eq!(n, fa.nr_free, "free list of order {o} disagrees with nr_free");
        }
        v
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
        let a = z.alloc_pages(Order(0)).unwrap();
        // The order-1 block is the smallest that fits: split into two order-0 pages.
        assert_eq!(a, Pfn(1024));
        assert_eq!(z.buddyinfo(), [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        let b = z.alloc_pages(Order(2)).unwrap();
        assert_eq!(b, Pfn(0));
        // expand() left one block each of orders 2..=9.
        assert_eq!(z.buddyinfo(), [1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0]);
        z.free_pages(b, Order(2));
        assert_eq!(z.buddyinfo(), [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        z.free_pages(a, Order(0));
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
        // Allocation stops once free would drop to the min watermark.
        assert_eq!(got, 12);
        assert_eq!(z.nr_free_pages(), 4);
    }
}
