//! Reclaim and swap derived by hand on small machines.

use super::*;
use crate::mmap::MmapPlacement;
use crate::{Access, BootParams};
use thp_abi::{MthpStat, Pressure, SwapSpec, ThpSettings};

const K64: Order = Order(4);

fn kernel(mem_mib: u64, min_free_kbytes: u64, pressure: Pressure, set: &[&str]) -> Kernel {
    let mut s = ThpSettings::default();
    for a in set {
        s.apply_assignment(a).unwrap();
    }
    Kernel::boot(&BootParams { mem_bytes: mem_mib << 20, min_free_kbytes, pressure, ..Default::default() }, &s)
}

fn pressure(max: &str, swap: &str) -> Pressure {
    Pressure { memory_max: Some(Pressure::parse_memory_max(max).unwrap()), swap: SwapSpec::parse(swap).unwrap() }
}

/// 64 KiB mTHPs (enabled=never, hugepages-64kB=always, defrag=madvise) under memory.max 4M
/// (1024 pages) with `swap`, 2 MiB-aligned: writing 1024 pages fills 64 folios and the limit;
/// page 1025 is written into a 65th block.
fn fill_past_the_limit(swap: &str) -> (Kernel, u64) {
    let mut k = kernel(256, 1024, pressure("4M", swap), &["enabled=never", "hugepages-64kB/enabled=always"]);
    let a = k.do_mmap(8 << 20, vm::READ | vm::WRITE, MmapPlacement::Aligned { align: 2 << 20, offset: 0 }).unwrap();
    for p in 0..1024 {
        // The first page of each 64 KiB block faults, the other 15 hit.
        let want = if p % 16 == 0 { Access::Fault } else { Access::Hit };
        assert_eq!(k.access(a + p * PAGE_SIZE, true), want);
    }
    assert_eq!(k.memcg().usage, 1024);
    assert_eq!(k.counters.mthp(K64, MthpStat::AnonFaultAlloc), 64);
    assert_eq!(k.reclaim_stats().pswpout, 0);
    assert_eq!(k.lru_sizes(), [1024, 0]);
    assert_eq!(k.access(a + 1024 * PAGE_SIZE, true), Access::Fault);
    k.check_invariants().unwrap();
    (k, a)
}

/// Page 1025: the 64 KiB charge (GFP_TRANSHUGE_LIGHT: may not reclaim) fails and falls back
/// (`anon_fault_fallback_charge`); the order-0 charge reclaims SWAP_CLUSTER_MAX (32) pages.
/// `isolate_lru_folios` takes whole folios until it has its `1024 >> priority` pages, so
/// priorities 10..6 take one folio each, 5..2 take 2+4+8+16: 35 folios, all young, kept once
/// (PG_referenced set, accessed bits cleared). Priority 1 scans 512 pages in 16 batches of 32:
/// folios 36..64 are kept; the 15th batch is folio 64 (kept) and folio 1, now old: swapped
/// out whole (16 pages); the 16th, folios 2 and 3: 48 pages ≥ 32, reclaim stops. Three
/// `swpout` of 64 KiB, 48 pages of `pswpout`, slots 512..559 (cluster 1: cluster 0 has the
/// header and serves order 0). Usage 1024 − 48 + 1.
#[test]
fn a_64k_folio_swaps_out_whole_to_zram_and_comes_back_whole() {
    let (mut k, a) = fill_past_the_limit("zram:8M");
    assert_eq!(k.counters.mthp(K64, MthpStat::AnonFaultFallbackCharge), 1);
    assert_eq!(k.counters.mthp(K64, MthpStat::AnonFaultFallback), 1);
    assert_eq!(k.counters.mthp(K64, MthpStat::Swpout), 3);
    assert_eq!(k.counters.mthp(K64, MthpStat::SwpoutFallback), 0);
    let r = *k.reclaim_stats();
    assert_eq!((r.pswpout, r.pgsteal, r.pgkept, r.pgscan), (48, 48, 64 * 16, 67 * 16));
    assert_eq!(k.memcg().usage, 977);
    assert_eq!(k.stats().swapents, 48);
    assert_eq!(k.memcg().oom_kill, 0);
    // Reading folio 1 back: a synchronous device, swap count 1, 16 contiguous entries at an
    // offset aligned like the address: one 64 KiB swap-in, one major fault.
    assert_eq!(k.access(a, false), Access::Fault);
    assert_eq!(k.counters.mthp(K64, MthpStat::Swpin), 1);
    let r = *k.reclaim_stats();
    assert_eq!((r.pswpin, r.pgmajfault, k.stats().majflt), (16, 1, 1));
    assert_eq!(k.stats().swapents, 32);
    assert_eq!(k.memcg().usage, 977 + 16);
    assert_eq!(k.translation(a + 15 * PAGE_SIZE).unwrap().folio_order, 4);
    k.check_invariants().unwrap();
}

/// The result's reclaim lines (`thp_abi::pressure::RESULT_RECLAIM`) read the model's counters:
/// after the 64 KiB swap-out above, pswpout 48, pgsteal_anon 48, pgscan_anon 67 folios of 16;
/// the file LRU's lines are not the model's.
#[test]
fn every_result_reclaim_line_is_a_model_counter() {
    use thp_abi::ReclaimEvent as E;
    let (k, _) = fill_past_the_limit("zram:8M");
    for e in thp_abi::pressure::RESULT_RECLAIM {
        assert!(k.reclaim_event(e).is_some(), "{} has no model counter", e.name());
    }
    assert_eq!(k.reclaim_event(E::Pswpout), Some(48));
    assert_eq!(k.reclaim_event(E::PgstealAnon), Some(48));
    assert_eq!(k.reclaim_event(E::PgscanAnon), Some(67 * 16));
    assert_eq!(k.reclaim_event(E::OomKill), Some(0));
    assert_eq!(k.reclaim_event(E::PgscanFile), None);
}

/// The same on a swap file: no SWP_BLKDEV, so no large order is allocated; folios 1, 2 and 3
/// are split (`swpout_fallback`, `split`) and go out as 48 pages.
#[test]
fn a_64k_folio_that_gets_no_contiguous_swap_is_split() {
    let (mut k, a) = fill_past_the_limit("file:8M");
    assert_eq!(k.counters.mthp(K64, MthpStat::Swpout), 0);
    assert_eq!(k.counters.mthp(K64, MthpStat::SwpoutFallback), 3);
    assert_eq!(k.counters.mthp(K64, MthpStat::Split), 3);
    assert_eq!(k.reclaim_stats().pswpout, 48);
    assert_eq!(k.stats().swapents, 48);
    assert_eq!(k.memcg().usage, 977);
    // A file is not synchronous: the swap-in is one page.
    assert_eq!(k.access(a, false), Access::Fault);
    assert_eq!(k.counters.mthp(K64, MthpStat::Swpin), 0);
    assert_eq!(k.reclaim_stats().pswpin, 1);
    assert_eq!(k.translation(a).unwrap().folio_order, 0);
    // munmap frees the rest of the slots.
    k.do_munmap(a, 8 << 20).unwrap();
    assert_eq!(k.stats().swapents, 0);
    k.check_invariants().unwrap();
}

/// Without swap nothing is reclaimable: the order-0 charge above memory.max ends in the memcg
/// OOM killer after MAX_RECLAIM_RETRIES.
#[test]
fn an_order0_charge_with_nothing_to_reclaim_is_an_oom_kill() {
    let mut k = kernel(256, 1024, pressure("4M", "none"), &["enabled=never"]);
    let a = k.do_mmap(8 << 20, vm::READ | vm::WRITE, MmapPlacement::Kernel).unwrap();
    for p in 0..1024 {
        assert_eq!(k.access(a + p * PAGE_SIZE, true), Access::Fault);
    }
    assert_eq!(k.access(a + 1024 * PAGE_SIZE, true), Access::Oom);
    assert_eq!(k.memcg().oom_kill, 1);
    assert!(k.memcg_oom_report().unwrap().contains("OOM-kill"));
    k.check_invariants().unwrap();
}

/// kswapd on a 32 MiB machine with min_free_kbytes 1024: min 256 pages, low 256 + max(8192 ×
/// 10 / 10000, 256 / 4) = 320, high 384 (`__setup_per_zone_wmarks`). Writing 8064 pages
/// (31.5 MiB, more than the 7872 above the low watermark) with zram swap and no limit: whenever
/// an allocation leaves fewer than 320 pages free kswapd runs to above 384, so after every
/// access at least 320 are free, and nothing fails.
#[test]
fn kswapd_keeps_free_memory_above_the_low_watermark() {
    let mut k = kernel(32, 1024, Pressure { memory_max: None, swap: SwapSpec::parse("zram:32M").unwrap() }, &["enabled=never"]);
    let w = k.zone().wmark;
    assert_eq!((w.min, w.low, w.high), (256, 320, 384));
    let a = k.do_mmap(8064 * PAGE_SIZE, vm::READ | vm::WRITE, MmapPlacement::Kernel).unwrap();
    for p in 0..8064 {
        assert_eq!(k.access(a + p * PAGE_SIZE, true), Access::Fault);
        assert!(k.zone().nr_free_pages() >= 320, "page {p}: {} free", k.zone().nr_free_pages());
    }
    let r = *k.reclaim_stats();
    assert!(r.kswapd_wakeups > 0 && r.pswpout > 0);
    assert_eq!(r.pswpout, k.stats().swapents);
    k.check_invariants().unwrap();
}

/// Fork after swap-out: the child gets the parent's 48 swap entries and each slot a second
/// reference (`swap_duplicate`); the child's exit drops them again, the parent's munmap frees
/// the slots.
#[test]
fn fork_shares_swap_entries_and_exit_drops_them() {
    let (mut k, a) = fill_past_the_limit("zram:8M");
    let parent = k.current_mm();
    let (child, _) = k.fork().unwrap();
    k.check_invariants().unwrap();
    assert_eq!(k.mm_stats(child).swapents, 48);
    assert_eq!(k.swap_pages().unwrap().1, 48, "shared slots are still 48 slots");
    k.switch_mm(child);
    k.exit_mm();
    k.switch_mm(parent);
    k.check_invariants().unwrap();
    assert_eq!(k.stats().swapents, 48);
    k.do_munmap(a, 8 << 20).unwrap();
    assert_eq!(k.swap_pages().unwrap().1, 0);
    k.check_invariants().unwrap();
}
