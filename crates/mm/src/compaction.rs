//! Memory compaction: the migrate scanner from the zone's start and the free scanner from its
//! end, over pageblocks, migrating movable pages into free ones so that a free block of the
//! requested order forms; deferral; kcompactd.
//!
//! Kernel sources (6.18): `mm/compaction.c` (`compact_zone`, `compact_finished`,
//! `__compact_finished`, `compaction_suit_allocation_order`, `compaction_suitable`,
//! `__compaction_suitable`, `isolate_migratepages`, `isolate_migratepages_block`,
//! `suitable_migration_source`, `isolate_freepages`, `isolate_freepages_block`,
//! `suitable_migration_target`, `compaction_alloc`, `release_free_list`, `defer_compaction`,
//! `compaction_deferred`, `compaction_defer_reset`, `compact_zone_order`,
//! `try_to_compact_pages`, `kcompactd_do_work`, `wakeup_kcompactd`), `mm/vmstat.c`
//! (`__fragmentation_index`), `mm/page_alloc.c` (`__alloc_pages_direct_compact`),
//! `include/linux/vm_event_item.h` (COMPACT*, KCOMPACTD_*, PGMIGRATE_*).
//!
//! Modelled: one zone; pageblocks with a migratetype (`Zone::pageblock_migratetype`); async
//! direct compaction skips pageblocks that are not movable and gives up on a cc->order-aligned
//! block at its first page that cannot be isolated (`skip_on_failure`); sync-light (the second
//! direct attempt, kcompactd) scans every block. Movable pages are order-0 anonymous pages
//! (their PTEs in every mm are rewritten to the new frame, found by `rmap_walk`) and pages the
//! rest of the system holds movable (`pg::HELD_MOVABLE`, from `fragment`). The scanners resume
//! where the last run stopped (`compact_cached_migrate_pfn`/`compact_cached_free_pfn`, reset when
//! they meet). Not modelled: migration of large folios, shmem and page-cache folios (they stay:
//! isolation fails), the pageblock skip bits, the free scanner's fast search and async stride,
//! the per-migratetype free lists (any free block of the order ends compaction), capture of the
//! freed block (`capture_control`), proactive compaction. Freed source pages go straight back
//! to the buddy lists (the kernel's drain at each pageblock). kcompactd runs synchronously when
//! woken, after the allocation that woke it has failed: the model has no concurrency, so the
//! next allocations see what it did.

use std::collections::{HashMap, VecDeque};

use mm_types::{Order, Pfn};

use crate::page_alloc::{pg, Migratetype, PAGEBLOCK_ORDER};
use crate::pgtable::{mk_pte, pte_pfn, PTE_DIRTY, PTE_WRITE, PTE_YOUNG};
use crate::rmap::{Mapping, Where};
use crate::Kernel;

/// `COMPACT_CLUSTER_MAX` (SWAP_CLUSTER_MAX): pages isolated per migration batch.
pub const COMPACT_CLUSTER_MAX: usize = 32;
/// `COMPACT_MAX_DEFER_SHIFT`.
const COMPACT_MAX_DEFER_SHIFT: u32 = 6;
/// `PAGE_ALLOC_COSTLY_ORDER`.
pub const PAGE_ALLOC_COSTLY_ORDER: u8 = 3;
/// `sysctl_extfrag_threshold` default.
const EXTFRAG_THRESHOLD: i32 = 500;
const PAGEBLOCK_PAGES: u32 = 1 << PAGEBLOCK_ORDER;

/// `enum compact_result`, in the kernel's order (`try_to_compact_pages` keeps the max).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CompactResult {
    NotSuitableZone,
    Skipped,
    Deferred,
    NoSuitablePage,
    Continue,
    Complete,
    PartialSkipped,
    Contended,
    Success,
}

/// `enum compact_priority`: MIN_COMPACT_PRIORITY is SyncFull, DEF_COMPACT_PRIORITY SyncLight,
/// INIT_COMPACT_PRIORITY Async.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CompactPriority {
    SyncFull,
    SyncLight,
    Async,
}

/// The compaction vm events (/proc/vmstat names in the comments).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactionEvents {
    /// `compact_stall`: direct compactions that ran (not skipped).
    pub compact_stall: u64,
    /// `compact_fail`
    pub compact_fail: u64,
    /// `compact_success`
    pub compact_success: u64,
    /// `compact_migrate_scanned`
    pub compact_migrate_scanned: u64,
    /// `compact_free_scanned`
    pub compact_free_scanned: u64,
    /// `compact_isolated`: pages isolated by both scanners.
    pub compact_isolated: u64,
    /// `compact_daemon_wake`
    pub compact_daemon_wake: u64,
    /// `compact_daemon_migrate_scanned`
    pub compact_daemon_migrate_scanned: u64,
    /// `compact_daemon_free_scanned`
    pub compact_daemon_free_scanned: u64,
    /// `pgmigrate_success`
    pub pgmigrate_success: u64,
    /// `pgmigrate_fail`
    pub pgmigrate_fail: u64,
    /// Model only: of `pgmigrate_success`, kcompactd's (the kernel does not split it), which
    /// `sim::driver` prices on kcompactd's thread.
    pub daemon_migrated: u64,
}

impl CompactionEvents {
    /// (vmstat name, value) in the kernel's order.
    pub fn named(&self) -> [(&'static str, u64); 11] {
        [
            ("pgmigrate_success", self.pgmigrate_success),
            ("pgmigrate_fail", self.pgmigrate_fail),
            ("compact_migrate_scanned", self.compact_migrate_scanned),
            ("compact_free_scanned", self.compact_free_scanned),
            ("compact_isolated", self.compact_isolated),
            ("compact_stall", self.compact_stall),
            ("compact_fail", self.compact_fail),
            ("compact_success", self.compact_success),
            ("compact_daemon_wake", self.compact_daemon_wake),
            ("compact_daemon_migrate_scanned", self.compact_daemon_migrate_scanned),
            ("compact_daemon_free_scanned", self.compact_daemon_free_scanned),
        ]
    }
}

/// The zone's compaction state (`zone->compact_*`) and the events.
#[derive(Clone, Debug, Default)]
pub struct ZoneCompaction {
    considered: u32,
    defer_shift: u32,
    order_failed: u8,
    /// `compact_cached_migrate_pfn[async, sync]` and `compact_cached_free_pfn`; `None` until
    /// the first run (and after the scanners meet): the zone's start and last pageblock.
    cached_migrate: [Option<u32>; 2],
    cached_free: Option<u32>,
    pub events: CompactionEvents,
}

impl ZoneCompaction {
    /// `defer_compaction`.
    fn defer_compaction(&mut self, order: u8) {
        self.considered = 0;
        self.defer_shift = (self.defer_shift + 1).min(COMPACT_MAX_DEFER_SHIFT);
        self.order_failed = self.order_failed.min(order);
    }

    /// `compaction_deferred`: skip this attempt?
    fn compaction_deferred(&mut self, order: u8) -> bool {
        let limit = 1u32 << self.defer_shift;
        if order < self.order_failed {
            return false;
        }
        self.considered += 1;
        if self.considered >= limit {
            self.considered = limit;
            return false;
        }
        true
    }

    /// `compaction_defer_reset`.
    fn defer_reset(&mut self, order: u8, alloc_success: bool) {
        if alloc_success {
            self.considered = 0;
            self.defer_shift = 0;
        }
        if order >= self.order_failed {
            self.order_failed = order + 1;
        }
    }
}

/// `struct compact_control`.
struct CompactControl {
    order: u8,
    sync: bool,
    direct: bool,
    migrate_pfn: u32,
    free_pfn: u32,
    migratepages: Vec<u32>,
    freepages: VecDeque<u32>,
    migrate_scanned: u64,
    free_scanned: u64,
}

impl CompactControl {
    /// `compact_scanners_met`.
    fn scanners_met(&self) -> bool {
        self.free_pfn >> PAGEBLOCK_ORDER <= self.migrate_pfn >> PAGEBLOCK_ORDER
    }
}

impl Kernel {
    /// The compaction events so far.
    pub fn compaction_events(&self) -> &CompactionEvents {
        &self.compaction.events
    }

    /// `__fragmentation_index` for `order`: -1000 when a free block of the order exists, 0 with
    /// no free memory, else 1000 minus the free pages per requested block per free block.
    pub fn fragmentation_index(&self, order: u8) -> i32 {
        let info = self.zone.buddyinfo();
        let blocks: u64 = info.iter().map(|&n| n as u64).sum();
        let pages: u64 = info.iter().enumerate().map(|(o, &n)| (n as u64) << o).sum();
        if blocks == 0 {
            return 0;
        }
        if info[order as usize..].iter().any(|&n| n > 0) {
            return -1000;
        }
        1000 - ((1000 + pages * 1000 / (1u64 << order)) / blocks) as i32
    }

    /// `compaction_suit_allocation_order` with the min watermark: Success when the allocation
    /// would succeed now, Skipped when compaction cannot help (too little free memory for
    /// `compact_gap`, or for costly orders a fragmentation index at or below 500: the failure
    /// is for lack of memory, not fragmentation), else Continue.
    fn compaction_suit_allocation_order(&self, order: u8) -> CompactResult {
        let wmark = self.zone.wmark;
        if self.zone.zone_watermark_ok(order, wmark.min) {
            return CompactResult::Success;
        }
        // __compaction_suitable: order-0 watermark plus compact_gap (2 << order), plus low - min
        // for costly orders.
        let mut mark = wmark.min + (2u64 << order);
        if order > PAGE_ALLOC_COSTLY_ORDER {
            mark += wmark.low - wmark.min;
        }
        if !self.zone.zone_watermark_ok(0, mark) {
            return CompactResult::Skipped;
        }
        if order > PAGE_ALLOC_COSTLY_ORDER {
            let fragindex = self.fragmentation_index(order);
            if (0..=EXTFRAG_THRESHOLD).contains(&fragindex) {
                return CompactResult::Skipped;
            }
        }
        CompactResult::Continue
    }

    /// `try_to_compact_pages` for the one zone, at `prio`, then `__alloc_pages_direct_compact`'s
    /// accounting: a run that was not skipped is a stall, and a success or a failure by whether
    /// the allocation then succeeds. Returns the page and the result.
    pub(crate) fn __alloc_pages_direct_compact(&mut self, order: Order, prio: CompactPriority) -> (Option<Pfn>, CompactResult) {
        if order.0 == 0 {
            return (None, CompactResult::Skipped);
        }
        let result = if prio > CompactPriority::SyncFull && self.compaction.compaction_deferred(order.0) {
            CompactResult::Deferred
        } else {
            let status = self.compact_zone(order.0, prio != CompactPriority::Async, true);
            if status == CompactResult::Success {
                self.compaction.defer_reset(order.0, false);
            } else if prio != CompactPriority::Async && matches!(status, CompactResult::Complete | CompactResult::PartialSkipped) {
                self.compaction.defer_compaction(order.0);
            }
            status.max(CompactResult::Skipped)
        };
        if result == CompactResult::Skipped {
            return (None, result);
        }
        self.compaction.events.compact_stall += 1;
        let page = self.zone.alloc_pages(order);
        if page.is_some() {
            self.compaction.defer_reset(order.0, true);
            self.compaction.events.compact_success += 1;
        } else {
            self.compaction.events.compact_fail += 1;
        }
        (page, result)
    }

    /// `wakeup_kcompactd` and, synchronously, `kcompactd_do_work` for `order` (sync-light, the
    /// min watermark): woken only when compaction would run (`kcompactd_node_suitable`).
    pub(crate) fn wakeup_kcompactd(&mut self, order: Order) {
        if self.compaction_suit_allocation_order(order.0) != CompactResult::Continue {
            return;
        }
        self.compaction.events.compact_daemon_wake += 1;
        if self.compaction.compaction_deferred(order.0) {
            return;
        }
        let before = self.compaction.events;
        let status = self.compact_zone(order.0, true, false);
        if status == CompactResult::Success {
            self.compaction.defer_reset(order.0, false);
        } else if matches!(status, CompactResult::Complete | CompactResult::PartialSkipped) {
            self.compaction.defer_compaction(order.0);
        }
        let e = &mut self.compaction.events;
        e.compact_daemon_migrate_scanned += e.compact_migrate_scanned - before.compact_migrate_scanned;
        e.compact_daemon_free_scanned += e.compact_free_scanned - before.compact_free_scanned;
        e.daemon_migrated += e.pgmigrate_success - before.pgmigrate_success;
    }

    /// `compact_zone` for `order` (sync: MIGRATE_SYNC_LIGHT, else MIGRATE_ASYNC; `direct`: a
    /// direct compaction, whose async mode skips unmovable pageblocks and failed blocks).
    pub(crate) fn compact_zone(&mut self, order: u8, sync: bool, direct: bool) -> CompactResult {
        let r = self.compaction_suit_allocation_order(order);
        if r != CompactResult::Continue {
            return r;
        }
        let last_block = (self.zone.nr_pages() - 1) & !(PAGEBLOCK_PAGES - 1);
        let mut cc = CompactControl {
            order,
            sync,
            direct,
            migrate_pfn: self.compaction.cached_migrate[sync as usize].unwrap_or(0),
            free_pfn: self.compaction.cached_free.unwrap_or(last_block),
            migratepages: Vec::new(),
            freepages: VecDeque::new(),
            migrate_scanned: 0,
            free_scanned: 0,
        };
        let mut rmap: Option<HashMap<u32, Vec<Mapping>>> = None;
        let ret = loop {
            let r = self.compact_finished(&cc);
            if r != CompactResult::Continue {
                break r;
            }
            self.isolate_migratepages(&mut cc);
            if cc.migratepages.is_empty() {
                continue;
            }
            if !self.migrate_pages(&mut cc, &mut rmap) && !cc.scanners_met() {
                break CompactResult::Contended;
            }
        };
        for p in cc.freepages.drain(..) {
            self.zone.free_to_buddy(p);
        }
        if cc.scanners_met() {
            self.compaction.cached_migrate = [None; 2];
            self.compaction.cached_free = None;
        } else {
            self.compaction.cached_migrate[sync as usize] = Some(cc.migrate_pfn);
            self.compaction.cached_free = Some(cc.free_pfn);
        }
        let e = &mut self.compaction.events;
        e.compact_migrate_scanned += cc.migrate_scanned;
        e.compact_free_scanned += cc.free_scanned;
        ret
    }

    /// `compact_finished`: Complete when the scanners met, Success at a pageblock boundary
    /// once a free block of the order exists, else Continue.
    fn compact_finished(&self, cc: &CompactControl) -> CompactResult {
        if cc.scanners_met() {
            return CompactResult::Complete;
        }
        if cc.migrate_pfn % PAGEBLOCK_PAGES != 0 {
            return CompactResult::Continue;
        }
        let info = self.zone.buddyinfo();
        if info[cc.order as usize..].iter().any(|&n| n > 0) {
            return CompactResult::Success;
        }
        CompactResult::Continue
    }

    /// `isolate_migratepages`: from `cc.migrate_pfn`, the next pageblock below the free
    /// scanner that is a suitable source is scanned by `isolate_migratepages_block` (one block
    /// per call, at most COMPACT_CLUSTER_MAX pages isolated).
    fn isolate_migratepages(&mut self, cc: &mut CompactControl) {
        let mut low = cc.migrate_pfn;
        let mut block_end = (low & !(PAGEBLOCK_PAGES - 1)) + PAGEBLOCK_PAGES;
        while block_end <= cc.free_pfn {
            // suitable_migration_source: async direct compaction takes movable blocks only.
            let movable = self.zone.pageblock_migratetype(low) == Migratetype::Movable;
            if cc.sync || !cc.direct || movable {
                cc.migrate_pfn = self.isolate_migratepages_block(cc, low, block_end);
                return;
            }
            low = block_end;
            block_end += PAGEBLOCK_PAGES;
        }
        cc.migrate_pfn = low;
    }

    /// Can compaction isolate the page at `pfn` (an order-0 folio on the LRU, or a movable
    /// held page)?
    fn page_movable(&self, pfn: u32) -> bool {
        let p = self.zone.mem_map[pfn as usize];
        if p.order != 0 || p.flags & pg::HEAD == 0 {
            return false;
        }
        if p.flags & pg::RESERVED != 0 {
            return p.flags & pg::HELD_MOVABLE != 0;
        }
        p.flags & pg::ANON != 0 && p.flags & (pg::SHMEM | pg::PGTABLE | pg::HUGE_ZERO) == 0 && p.mapcount > 0
    }

    /// `isolate_migratepages_block` over `[low, end)`: free blocks and large folios are
    /// stepped over whole (and counted scanned); movable pages are isolated. Async direct
    /// compaction gives up on the cc->order-aligned block of a page it cannot isolate, putting
    /// back what it isolated there. Returns where the scan stopped.
    fn isolate_migratepages_block(&mut self, cc: &mut CompactControl, low: u32, end: u32) -> u32 {
        let end = end.min(self.zone.nr_pages());
        let skip_on_failure = cc.direct && !cc.sync;
        let block = |p: u32| (p | ((1u32 << cc.order) - 1)) + 1;
        let mut next_skip = block(low);
        let mut pfn = low;
        let wild = self.zone.wild_range();
        while pfn < end {
            if skip_on_failure && pfn >= next_skip {
                if !cc.migratepages.is_empty() {
                    break;
                }
                next_skip = block(pfn);
            }
            cc.migrate_scanned += 1;
            if let Some((head, o)) = self.zone.buddy_block_containing(pfn) {
                // A free page: its block is stepped over (in the kernel a page compaction freed
                // is a free page of its own until the per-cpu list drains: one page scanned).
                let n = if wild.contains(&pfn) { (wild.end - pfn).min(end - pfn) } else if head == pfn { 1 << o } else { 1 };
                cc.migrate_scanned += n as u64 - 1;
                pfn += n;
                continue;
            }
            let p = self.zone.mem_map[pfn as usize];
            if p.order > 0 {
                let head_end = (pfn & !((1u32 << p.order) - 1)) + (1 << p.order);
                cc.migrate_scanned += (head_end - pfn) as u64 - 1;
                pfn = head_end - 1;
            } else if self.page_movable(pfn) {
                cc.migratepages.push(pfn);
                pfn += 1;
                if cc.migratepages.len() == COMPACT_CLUSTER_MAX {
                    break;
                }
                continue;
            }
            // isolate_fail
            if skip_on_failure {
                cc.migratepages.clear();
                if pfn < next_skip {
                    pfn = next_skip - 1;
                    next_skip += 1 << cc.order;
                }
            }
            pfn += 1;
        }
        self.compaction.events.compact_isolated += cc.migratepages.len() as u64;
        pfn.min(end)
    }

    /// `isolate_freepages`: from `cc.free_pfn` down to the block after the migrate scanner,
    /// in suitable target blocks (movable, and not one free block of the order already),
    /// free blocks are isolated until there are as many free pages as pages to migrate.
    fn isolate_freepages(&mut self, cc: &mut CompactControl) {
        let low = (cc.migrate_pfn & !(PAGEBLOCK_PAGES - 1)) + PAGEBLOCK_PAGES;
        let mut start = cc.free_pfn as i64;
        let mut block_start = (cc.free_pfn & !(PAGEBLOCK_PAGES - 1)) as i64;
        while block_start >= low as i64 {
            let bs = block_start as u32;
            let target_order = if cc.order > 0 { cc.order } else { PAGEBLOCK_ORDER };
            let suitable = self.zone.buddy_order_at(bs).is_none_or(|o| o < target_order)
                && self.zone.pageblock_migratetype(bs) == Migratetype::Movable;
            if suitable {
                let stop = self.isolate_freepages_block(cc, start as u32, bs + PAGEBLOCK_PAGES);
                if cc.freepages.len() >= cc.migratepages.len() {
                    start = if stop >= bs + PAGEBLOCK_PAGES { block_start - PAGEBLOCK_PAGES as i64 } else { stop as i64 };
                    cc.free_pfn = start.max(0) as u32;
                    return;
                }
            }
            block_start -= PAGEBLOCK_PAGES as i64;
            start = block_start;
        }
        cc.free_pfn = block_start.max(0) as u32;
    }

    /// `isolate_freepages_block` over `[start, end)`: each free block met is isolated whole and
    /// split to order-0 pages; stops once there are enough. Returns where it stopped.
    fn isolate_freepages_block(&mut self, cc: &mut CompactControl, start: u32, end: u32) -> u32 {
        let end = end.min(self.zone.nr_pages());
        let mut pfn = start;
        let wild = self.zone.wild_range();
        while pfn < end {
            cc.free_scanned += 1;
            if wild.contains(&pfn) {
                // A never-used block is bigger than any order compaction asks for.
                pfn += 1;
                continue;
            }
            if let Some(o) = self.zone.buddy_order_at(pfn) {
                self.zone.isolate_free_block(pfn, o);
                cc.freepages.extend(pfn..pfn + (1 << o));
                self.compaction.events.compact_isolated += 1 << o;
                pfn += 1 << o;
                if cc.freepages.len() >= cc.migratepages.len() {
                    break;
                }
                continue;
            }
            let p = self.zone.mem_map[pfn as usize];
            if p.order > 0 {
                let head_end = (pfn & !((1u32 << p.order) - 1)) + (1 << p.order);
                if head_end <= end {
                    cc.free_scanned += (head_end - pfn) as u64 - 1;
                    pfn = head_end;
                    continue;
                }
            }
            pfn += 1;
        }
        pfn
    }

    /// `migrate_pages` of the isolated pages, each to a page from `compaction_alloc` (which
    /// runs the free scanner when it has none): the record moves, every PTE mapping the old
    /// frame maps the new one, the old frame is freed. Returns false when the free scanner
    /// ran out (-ENOMEM): the pages not migrated stay where they are.
    fn migrate_pages(&mut self, cc: &mut CompactControl, rmap: &mut Option<HashMap<u32, Vec<Mapping>>>) -> bool {
        let pages = std::mem::take(&mut cc.migratepages);
        for (i, &src) in pages.iter().enumerate() {
            if cc.freepages.is_empty() {
                cc.migratepages = pages[i..].to_vec();
                self.isolate_freepages(cc);
                cc.migratepages.clear();
            }
            let Some(dst) = cc.freepages.pop_front() else {
                return false;
            };
            self.migrate_page(src, dst, rmap);
        }
        true
    }

    /// Move the page at `src` to the free frame `dst`.
    fn migrate_page(&mut self, src: u32, dst: u32, rmap: &mut Option<HashMap<u32, Vec<Mapping>>>) {
        let page = self.zone.mem_map[src as usize];
        if page.flags & pg::RESERVED == 0 {
            let map = rmap.get_or_insert_with(|| self.anon_rmap());
            let maps = map.remove(&src).unwrap_or_default();
            let current = self.current_mm();
            for m in &maps {
                let Where::Pte { table, index, va } = m.at else { continue };
                self.switch_mm(m.mm);
                let old = self.mm.pt.pte(table, index);
                debug_assert_eq!(pte_pfn(old).0, src);
                self.flush_tlb_range(va.0, va.0 + mm_types::PAGE_SIZE);
                self.mm.pt.set_pte(table, index, mk_pte(Pfn(dst), old & (PTE_YOUNG | PTE_DIRTY | PTE_WRITE)));
            }
            self.switch_mm(current);
            map.insert(dst, maps.into_iter().map(|m| Mapping { pfn: Pfn(dst), ..m }).collect());
        }
        self.zone.mem_map[dst as usize] = page;
        self.zone.free_to_buddy(src);
        self.compaction.events.pgmigrate_success += 1;
    }

    /// The PTE mappings of every order-0 anon page, by frame (built once per compaction run).
    fn anon_rmap(&self) -> HashMap<u32, Vec<Mapping>> {
        let mut map: HashMap<u32, Vec<Mapping>> = HashMap::new();
        let mm = &self.zone.mem_map;
        for m in self.rmap_walk(|p| mm[p.idx()].order == 0 && mm[p.idx()].flags & pg::ANON != 0) {
            map.entry(m.pfn.0).or_default().push(m);
        }
        map
    }
}

#[cfg(test)]
#[path = "compaction_tests.rs"]
mod tests;
