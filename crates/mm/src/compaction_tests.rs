//! A compaction pass over a few pageblocks, derived by hand.

use mm_types::{Order, Pfn};
use thp_abi::ThpSettings;

use super::{CompactPriority, CompactResult, CompactionEvents};
use crate::page_alloc::{pg, Migratetype};
use crate::{BootParams, Kernel};

/// 16 MiB (8 pageblocks of 512 pages), min_free_kbytes 0 (watermarks min 0, low 4, high 8).
/// Blocks 4-7 and block 1 are held unmovable (block 1 marked MIGRATE_UNMOVABLE, holding its
/// even pages; 4-7 whole). Block 0 and block 2 hold their even pages movable (page cache, say),
/// their odd pages free. Block 3 holds only its first page (movable), the other 511 are free:
/// one free block each of orders 0..=8 (1537, 1538, 1540, ..., 1792). 1279 pages free, no free
/// block of order 9.
fn fragmented(unmovable_at_0: bool) -> Kernel {
    let mut k = Kernel::boot(&BootParams { mem_bytes: 16 << 20, min_free_kbytes: 0, ..Default::default() }, &ThpSettings::default());
    for b in 0..8u32 {
        assert_eq!(k.zone.alloc_pages(Order(9)), Some(Pfn(b * 512)));
    }
    let movable = pg::RESERVED | pg::HELD_MOVABLE;
    for pfn in 0..4096u32 {
        let (b, i) = (pfn / 512, pfn % 512);
        let flags = match b {
            0 | 2 if i % 2 == 0 => Some(movable),
            1 if i % 2 == 0 => Some(pg::RESERVED),
            3 if i == 0 => Some(movable),
            4..=7 => Some(pg::RESERVED),
            _ => None,
        };
        let flags = if unmovable_at_0 && pfn == 0 { Some(pg::RESERVED) } else { flags };
        match flags {
            Some(f) => {
                k.prep_folio(Pfn(pfn), Order::BASE, f);
                k.held_pages += 1;
            }
            None => k.zone.free_to_buddy(pfn),
        }
    }
    for b in [1u32, 4, 5, 6, 7] {
        k.zone.set_pageblock_migratetype(b * 512, Migratetype::Unmovable);
    }
    assert_eq!(k.zone.nr_free_pages(), 1279);
    assert_eq!(k.zone.buddyinfo(), [256 + 256 + 256 + 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0]);
    k
}

/// Sync-light direct compaction for order 9. fragmentation_index(9) = 1000 - (1000 +
/// 1279 * 1000 / 512) / 777 = 996 > 500, and 1279 free pages clear min + compact_gap + low - min
/// = 1028: compaction runs. The migrate scanner takes block 0's movable pages 32 at a time
/// (0, 2, .., 62; then 64..126; ...), the free scanner (from block 7, skipping the unmovable
/// blocks 7-4) isolates block 3's free blocks from its start as needed: orders 0-5 (63 pages,
/// 7 pfns scanned, 1536 held among them), then the order-6 block at 1600, the order-7 at
/// 1664, the order-8 at 1792: 511 pages, 10 scanned. The 256 pages land on 1537..=1792 in
/// order, block 0 merges into one free order-9 block, and at the next pageblock boundary
/// (migrate_pfn 512, after 512 pages scanned) compaction succeeds; the 255 isolated pages left
/// (1793..=2047) go back to the free lists.
#[test]
fn sync_compaction_frees_block_0() {
    let mut k = fragmented(false);
    assert_eq!(k.fragmentation_index(9), 996);
    let (page, result) = k.__alloc_pages_direct_compact(Order(9), CompactPriority::SyncLight);
    assert_eq!(result, CompactResult::Success);
    assert_eq!(page, Some(Pfn(0)));
    let e = *k.compaction_events();
    assert_eq!(
        e,
        CompactionEvents {
            compact_stall: 1,
            compact_success: 1,
            compact_migrate_scanned: 512,
            compact_free_scanned: 10,
            compact_isolated: 256 + 511,
            pgmigrate_success: 256,
            ..Default::default()
        }
    );
    // pfn 2i moved to 1537 + i.
    for i in 0..256u32 {
        assert_eq!(k.zone.mem_map[(1537 + i) as usize].flags, pg::HEAD | pg::RESERVED | pg::HELD_MOVABLE, "page {}", 2 * i);
    }
    assert_eq!(k.zone.buddyinfo(), [256 + 256 + 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0]);
    assert_eq!(k.zone.nr_free_pages(), 1279 - 512 - 256 + 256);
    // Where the scanners stopped, the next run resumes.
    assert_eq!((k.compaction.cached_migrate[1], k.compaction.cached_free), (Some(512), Some(1024)));
}

/// The same with block 0's first page unmovable, async: `skip_on_failure` gives up on block 0
/// at its first page (1 scanned), block 1 is not a movable block (not scanned), block 2's 256
/// movable pages go to block 3 as above (1024..=1534 scanned, 511 pages: the last page, 1535,
/// is never looked at). The free scanner, having emptied block 3 during the last batch, stops
/// below it (free_pfn 1024), in block 2 with the migrate scanner: the scanners met, Complete;
/// the allocation then takes block 2.
#[test]
fn async_compaction_skips_a_block_with_an_unmovable_page() {
    let mut k = fragmented(true);
    let (page, result) = k.__alloc_pages_direct_compact(Order(9), CompactPriority::Async);
    assert_eq!((page, result), (Some(Pfn(1024)), CompactResult::Complete));
    let e = *k.compaction_events();
    assert_eq!((e.compact_migrate_scanned, e.compact_free_scanned, e.pgmigrate_success), (1 + 511, 10, 256));
    assert_eq!((e.compact_stall, e.compact_success, e.compact_fail), (1, 1, 0));
    // Block 0's movable pages did not move; the scanners met, so the next run starts over.
    assert_eq!(k.zone.mem_map[2].flags, pg::HEAD | pg::RESERVED | pg::HELD_MOVABLE);
    assert_eq!((k.compaction.cached_migrate, k.compaction.cached_free), ([None, None], None));
}

/// With too little free memory compaction is skipped (no stall counted); a failed sync run
/// defers the next attempts: after one deferral (shift 1) the next call is deferred (a stall
/// and a failure, no scan), the one after runs again.
#[test]
fn skipped_and_deferred_compaction() {
    let mut k = fragmented(true);
    // Make block 2 unmovable too: nothing can free a pageblock.
    for pfn in (1024..1536).step_by(2) {
        k.zone.mem_map[pfn].flags &= !pg::HELD_MOVABLE;
    }
    k.zone.set_pageblock_migratetype(1024, Migratetype::Unmovable);
    let (page, r) = k.__alloc_pages_direct_compact(Order(9), CompactPriority::SyncLight);
    assert_eq!((page, r), (None, CompactResult::Complete));
    assert_eq!(k.compaction_events().compact_fail, 1);
    let (_, r) = k.__alloc_pages_direct_compact(Order(9), CompactPriority::SyncLight);
    assert_eq!(r, CompactResult::Deferred);
    let scanned = k.compaction_events().compact_migrate_scanned;
    let (_, r) = k.__alloc_pages_direct_compact(Order(9), CompactPriority::SyncLight);
    assert_eq!(r, CompactResult::Complete);
    assert!(k.compaction_events().compact_migrate_scanned > scanned);
    assert_eq!((k.compaction_events().compact_stall, k.compaction_events().compact_fail), (3, 3));
    // A fresh machine holding back all but 1000 free pages: below min + compact_gap +
    // (low - min) = 1028, so compaction is skipped and no stall is counted.
    let mut k = fragmented(false);
    k.zone.set_reserved(279);
    let (_, r) = k.__alloc_pages_direct_compact(Order(9), CompactPriority::Async);
    assert_eq!(r, CompactResult::Skipped);
    assert_eq!(*k.compaction_events(), CompactionEvents::default());
}

/// Each defrag mode on a fragmented 64 MiB machine (`fragment_free_memory(0)`: every other
/// page held movable, 8192 free pages in order-0 blocks only): one write fault in a 2 MiB
/// aligned VMA, madvised (VM_HUGEPAGE) or not, under enabled=always. `vma_thp_gfp_mask` gives
/// __GFP_DIRECT_RECLAIM to always (both), defer+madvise and madvise (madvised only): the fault
/// stalls in direct compaction (async, costly order 9), which empties pageblock 0, and gets
/// its THP. defer, and defer+madvise unmadvised, give __GFP_KSWAPD_RECLAIM only: kcompactd is
/// woken (run at once) and the fault falls back. never, and madvise unmadvised: neither.
#[test]
fn defrag_modes_stall_or_fall_back_on_a_fragmented_zone() {
    use thp_abi::VmEvent;
    // (defrag, madvised) → (thp_fault_alloc, compact_stall, compact_daemon_wake)
    let cases = [
        ("always", true, (1, 1, 0)),
        ("always", false, (1, 1, 0)),
        ("defer", true, (0, 0, 1)),
        ("defer", false, (0, 0, 1)),
        ("defer+madvise", true, (1, 1, 0)),
        ("defer+madvise", false, (0, 0, 1)),
        ("madvise", true, (1, 1, 0)),
        ("madvise", false, (0, 0, 0)),
        ("never", true, (0, 0, 0)),
        ("never", false, (0, 0, 0)),
    ];
    for (defrag, madvised, want) in cases {
        let mut s = ThpSettings::default();
        s.apply_assignment("enabled=always").unwrap();
        s.apply_assignment(&format!("defrag={defrag}")).unwrap();
        let mut k = Kernel::boot(&BootParams { mem_bytes: 64 << 20, min_free_kbytes: 1024, ..Default::default() }, &s);
        assert_eq!(k.fragment_free_memory(0), 8192);
        let len = mm_types::PMD_SIZE;
        let a = k.do_mmap(len, crate::vma::vm::READ | crate::vma::vm::WRITE, crate::mmap::MmapPlacement::Aligned { align: len, offset: 0 }).unwrap();
        if madvised {
            k.do_madvise(a, len, crate::madvise::Madvise::Hugepage).unwrap();
        }
        k.access(a, true);
        let e = *k.compaction_events();
        let got = (k.counters.vm(VmEvent::ThpFaultAlloc), e.compact_stall, e.compact_daemon_wake);
        assert_eq!(got, (want.0, want.1, want.2), "defrag={defrag} madvised={madvised}");
        assert_eq!(k.counters.vm(VmEvent::ThpFaultFallback), 1 - want.0, "defrag={defrag} madvised={madvised}");
        if want.1 == 1 {
            assert_eq!((e.compact_success, e.pgmigrate_success), (1, 256));
            assert_eq!(k.translation(a).unwrap().pfn, 0, "the THP is pageblock 0, emptied");
        }
        if want.2 == 1 {
            // kcompactd emptied a block for the next fault.
            assert!(k.zone.buddyinfo()[9] >= 1);
        }
        k.check_invariants().unwrap();
    }
}
