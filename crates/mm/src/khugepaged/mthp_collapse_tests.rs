//! 7.2's khugepaged mTHP collapse on one small page table, derived by hand: a 2 MiB-aligned
//! anonymous VMA, some 4 KiB pages written while it is not VM_HUGEPAGE (so faults map 4 KiB),
//! then `madvise(MADV_HUGEPAGE)` and one khugepaged wake-up per scan. `nr_anon` per size says
//! which folios exist after the scan.

use super::*;
use crate::mmap::MmapPlacement;
use crate::madvise::Madvise;
use crate::{BootParams, MmId};
use thp_abi::ThpSettings;

const SIZES: [(u8, &str); 5] = [(2, "16kB"), (4, "64kB"), (6, "256kB"), (8, "1024kB"), (9, "2048kB")];

fn kernel(set: &[&str]) -> Kernel {
    let mut s = ThpSettings::default();
    for a in ["enabled=madvise", "khugepaged/pages_to_scan=512"].iter().chain(set) {
        s.apply_assignment(a).unwrap();
    }
    Kernel::boot(&BootParams { mem_bytes: 256 << 20, ..Default::default() }, &s)
}

/// Map 2 MiB, write `pages` (indices), make the VMA VM_HUGEPAGE; the VMA's start.
fn populate(k: &mut Kernel, pages: impl IntoIterator<Item = u64>) -> u64 {
    let a = k.do_mmap(2 << 20, vm::READ | vm::WRITE, MmapPlacement::Aligned { align: 2 << 20, offset: 0 }).unwrap();
    for p in pages {
        k.access(a + p * PAGE_SIZE, true);
    }
    k.do_madvise(a, 2 << 20, Madvise::Hugepage).unwrap();
    a
}

/// Anon folios per size (`nr_anon`), the sizes of [`SIZES`] that have any.
fn folios(k: &Kernel) -> Vec<(&'static str, i64)> {
    SIZES.iter().map(|&(o, n)| (n, k.counters.mthp(Order(o), MthpStat::NrAnon))).filter(|&(_, v)| v != 0).collect()
}

/// One wake-up scanning one range (pages_to_scan 512); its scan result.
fn scan(k: &mut Kernel) -> ScanResult {
    let before = k.stats().scan_results.clone();
    k.khugepaged_do_scan();
    let after = &k.stats().scan_results;
    *after.keys().find(|r| after.get(r) != before.get(r)).expect("a range was scanned")
}

/// max_ptes_none 0, 16K, 64K and PMD enabled; pages 0..16 and 100..104 written. 7.2: [0, 16)
/// is a full 64 KiB block, [100, 104) a full 16 KiB one (the forward walk of
/// crates/policy: offsets 0 and 100); 20 pages stay 20 pages. 6.18: the PMD scan meets a none
/// PTE over max_ptes_none 0 and stops (thp_scan_exceed_none_pte, no per-size stat on 6.18).
#[test]
fn max_ptes_none_0_collapses_full_blocks_on_7_2_and_nothing_on_6_18() {
    let set = ["hugepages-16kB/enabled=inherit", "hugepages-64kB/enabled=inherit", "khugepaged/max_ptes_none=0"];
    let mut k = kernel(&[&set[..], &["kernel=7.2"]].concat());
    populate(&mut k, (0..16).chain(100..104));
    k.khugepaged_do_scan();
    assert_eq!(folios(&k), vec![("16kB", 1), ("64kB", 1)]);
    assert_eq!(k.stats().scan_results.get(&ScanResult::Succeed), Some(&1));
    assert_eq!((k.khugepaged.pages_collapsed, k.mm.stats.anon_rss_pages), (1, 20));
    k.check_invariants().unwrap();
    let mut k = kernel(&set);
    populate(&mut k, (0..16).chain(100..104));
    assert_eq!(scan(&mut k), ScanResult::ExceedNonePte);
    assert_eq!(folios(&k), vec![]);
    assert_eq!(k.counters.vm(VmEvent::ThpScanExceedNonePte), 1);
    assert_eq!(k.counters.mthp(Order::PMD, MthpStat::CollapseExceedNonePte), 0, "a 7.2 stat");
}

/// 511 with the PMD size off (`never`) and 64K on: 6.18's khugepaged does not run (no mm is
/// registered); 7.2's does, and one written page makes its 64 KiB block collapse (threshold
/// 16 - 15 = 1): 16 pages, 15 of them new zero-filled ones. With the PMD size on, one page is
/// enough for the PMD (threshold 512 - 511).
#[test]
fn max_ptes_none_511_takes_the_highest_enabled_order_pmd_or_not() {
    let set = ["hugepages-2048kB/enabled=never", "hugepages-64kB/enabled=madvise"];
    let mut k = kernel(&set);
    populate(&mut k, [3]);
    assert!(!k.khugepaged_registered(MmId(0)) && !k.khugepaged_has_work());
    let mut k = kernel(&[&set[..], &["kernel=7.2"]].concat());
    populate(&mut k, [3]);
    assert!(k.khugepaged_has_work());
    assert_eq!(scan(&mut k), ScanResult::Succeed);
    assert_eq!(folios(&k), vec![("64kB", 1)]);
    assert_eq!(k.mm.stats.anon_rss_pages, 16);
    let mut k = kernel(&["hugepages-64kB/enabled=madvise", "kernel=7.2"]);
    populate(&mut k, [3]);
    k.khugepaged_do_scan();
    assert_eq!(folios(&k), vec![("2048kB", 1)]);
    k.check_invariants().unwrap();
}

/// 256 is neither 0 nor 511: 7.2 warns once (the result's `kernel_warnings`) and treats it as
/// 0 below PMD; the PMD keeps 256 (20 occupied < 512 - 256). So as the first test: 64K + 16K.
#[test]
fn max_ptes_none_256_warns_and_behaves_as_0_below_pmd() {
    let mut k = kernel(&["hugepages-16kB/enabled=inherit", "hugepages-64kB/enabled=inherit", "khugepaged/max_ptes_none=256", "kernel=7.2"]);
    populate(&mut k, (0..16).chain(100..104));
    k.khugepaged_do_scan();
    assert_eq!(folios(&k), vec![("16kB", 1), ("64kB", 1)]);
    assert_eq!(k.kernel_warnings(), [policy::mthp_collapse::MAX_PTES_NONE_WARNING.to_string()]);
}

/// A PTE of a shared folio (after fork every page is shared) in the first region: below PMD
/// order the region is refused (SCAN_EXCEED_SHARED_PTE, `collapse_exceed_shared_pte` of 64K)
/// and the forward walk ends there, so [100, 104) is not tried either.
#[test]
fn a_shared_pte_refuses_the_region_and_ends_the_walk() {
    let mut k = kernel(&["hugepages-16kB/enabled=inherit", "hugepages-64kB/enabled=inherit", "khugepaged/max_ptes_none=0", "kernel=7.2"]);
    populate(&mut k, (0..16).chain(100..104));
    k.fork().unwrap();
    assert_eq!(scan(&mut k), ScanResult::ExceedSharedPte);
    assert_eq!(k.counters.mthp(Order(4), MthpStat::CollapseExceedSharedPte), 1);
    assert_eq!(k.counters.mthp(Order(2), MthpStat::CollapseExceedSharedPte), 0);
    assert_eq!(folios(&k), vec![]);
}

/// A swap entry at page 5 (as reclaim leaves it), max_ptes_none 511, PMD off, 64K on: the
/// 64 KiB region holding it qualifies (one occupied PTE) and is refused
/// (`collapse_exceed_swap_pte` of 64K); the walk ends. With max_ptes_swap 0 the PMD scan
/// itself stops (thp_scan_exceed_swap_pte, and 7.2's `collapse_exceed_swap_pte` of 2048kB).
/// (At max_ptes_none 0 the region would not qualify: a swap PTE sets no bit.)
#[test]
fn a_swap_pte_refuses_the_region() {
    for (max_swap, pmd_stat, mthp_stat) in [(64, 0, 1), (0, 1, 0)] {
        let mut k = kernel(&["hugepages-64kB/enabled=madvise", "hugepages-2048kB/enabled=never", "kernel=7.2", &format!("khugepaged/max_ptes_swap={max_swap}")]);
        let a = populate(&mut k, (0..5).chain(6..16));
        k.mm.pt.swap.insert(a / PAGE_SIZE + 5, 1);
        assert_eq!(scan(&mut k), ScanResult::ExceedSwapPte);
        assert_eq!(k.counters.mthp(Order(4), MthpStat::CollapseExceedSwapPte), mthp_stat);
        assert_eq!(k.counters.mthp(Order::PMD, MthpStat::CollapseExceedSwapPte), pmd_stat);
        assert_eq!(folios(&k), vec![]);
    }
}

/// Creep, scan by scan: 4 pages written, max_ptes_none 384, 64K/256K/1M/PMD enabled. With
/// v18's policy and the earlier uncapped scaling, each collapse fills enough of the next
/// size's block: 64K (needs 4 of 16), 256K (16 of 64), 1M (64 of 256), PMD (128 of 512).
/// 7.2 at 384 warns, behaves as 0 below PMD: 4 pages fill no 64 KiB block, nothing collapses.
#[test]
fn creep_over_successive_scans_and_7_2_without_it() {
    let set = ["hugepages-64kB/enabled=inherit", "hugepages-256kB/enabled=inherit", "hugepages-1024kB/enabled=inherit", "khugepaged/max_ptes_none=384"];
    let mut k = kernel(&[&set[..], &["policy=mthp-collapse-v18:scaled=uncapped"]].concat());
    populate(&mut k, 0..4);
    let mut steps = Vec::new();
    for _ in 0..4 {
        k.khugepaged_do_scan();
        steps.push(folios(&k));
    }
    assert_eq!(steps, vec![vec![("64kB", 1)], vec![("256kB", 1)], vec![("1024kB", 1)], vec![("2048kB", 1)]]);
    k.check_invariants().unwrap();
    let mut k = kernel(&[&set[..], &["kernel=7.2"]].concat());
    populate(&mut k, 0..4);
    for _ in 0..4 {
        k.khugepaged_do_scan();
    }
    assert_eq!(folios(&k), vec![]);
    assert_eq!(k.kernel_warnings().len(), 1);
}

#[allow(dead_code)]
#[path = "../../../policy/examples/hot_first.rs"]
mod hot_first;

/// The "write your own policy" example in the model: faults take at most 64 KiB though 256K
/// is enabled, and its hint (the second PMD range) is collapsed at the first wake-up
/// (pages_to_scan 512: one range), before the round-robin scan's first range.
#[test]
fn the_example_policy_runs_in_the_model() {
    let mut k = kernel(&["hugepages-64kB/enabled=inherit", "hugepages-256kB/enabled=inherit"]);
    let a = k.do_mmap(4 << 20, vm::READ | vm::WRITE, MmapPlacement::Aligned { align: 2 << 20, offset: 0 }).unwrap();
    k.set_policy(Box::new(hot_first::HotFirst::new([policy::Range { mm: 0, addr: a + (2 << 20) }])));
    k.do_madvise(a, 4 << 20, Madvise::Hugepage).unwrap();
    for p in 0..1024 {
        k.access(a + p * PAGE_SIZE, true);
    }
    assert_eq!(folios(&k), vec![("64kB", 64)], "faults capped at 64K: 4 MiB in 64 KiB folios");
    k.khugepaged_do_scan();
    assert_eq!(folios(&k), vec![("64kB", 32), ("2048kB", 1)]);
    let t = k.mm.pt.pmd_table(Vaddr(a + (2 << 20))).unwrap();
    assert!(matches!(k.mm.pt.pmd(t, Vaddr(a + (2 << 20))), crate::pgtable::Pmd::Huge { .. }), "the hinted range");
    assert!(!matches!(k.mm.pt.pmd(t, Vaddr(a)), crate::pgtable::Pmd::Huge { .. }), "the first range waits");
    k.check_invariants().unwrap();
}
