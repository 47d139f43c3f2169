//! The walks on small occupancy patterns, each expected list derived by hand from the rules in
//! the module header (offsets are PTE indices in the PMD range).

use super::*;

fn orders(list: &[u8]) -> Orders {
    list.iter().fold(Orders::NONE, |o, &x| o.with(Order(x)))
}

fn input(ptes: impl IntoIterator<Item = u16>, enabled: &[u8], max_ptes_none: u32) -> WalkInput {
    WalkInput { occupied: Occupancy::of(ptes), enabled: orders(enabled), max_ptes_none, uffd_armed: false }
}

/// Run a walk, every attempt answered by `answer`; the attempts as (offset, order).
fn walk(w: fn(&WalkInput, &mut dyn FnMut(u16, Order) -> AttemptResult) -> WalkEnd, i: &WalkInput, answer: impl Fn(u16, u8) -> AttemptResult) -> (Vec<(u16, u8)>, WalkEnd) {
    let mut tried = Vec::new();
    let end = w(i, &mut |off, o| {
        tried.push((off, o.0));
        answer(off, o.0)
    });
    (tried, end)
}

const ALL: &[u8] = &[2, 3, 4, 5, 6, 7, 8, 9];
const NO_PMD: &[u8] = &[2, 3, 4, 5, 6, 7, 8];
fn ok(_: u16, _: u8) -> AttemptResult {
    AttemptResult::Succeed
}
fn v18(i: &WalkInput, a: &mut dyn FnMut(u16, Order) -> AttemptResult) -> WalkEnd {
    mthp_collapse_v18(i, Scaling::ZeroOr511, a)
}

/// PTEs 0..16 and 100..104 occupied. max_ptes_none 0: every PTE of a region must be occupied,
/// so [0, 16) collapses at order 4 (64K) and [100, 104) at order 2 (16K); nothing else holds a
/// full aligned region. 511 with PMD enabled: one occupied PTE is enough for the PMD.
#[test]
fn zero_collapses_full_regions_and_511_the_whole_pmd() {
    let ptes = || (0..16).chain(100..104);
    let (tried, end) = walk(mthp_collapse, &input(ptes(), ALL, 0), ok);
    assert_eq!(tried, vec![(0, 4), (100, 2)]);
    assert_eq!(end, WalkEnd { collapsed: 20, result: AttemptResult::Succeed, warned: false });
    let (tried, end) = walk(mthp_collapse, &input(ptes(), ALL, 511), ok);
    assert_eq!(tried, vec![(0, 9)]);
    assert_eq!(end.collapsed, 512);
}

/// PMD order not enabled, 511: the walk starts at order 8 (it need not be enabled at 9), [0,
/// 256) holds PTE 0 and collapses; [256, 512) holds none (threshold 1 at every order) and is
/// walked down to order 2 without an attempt.
#[test]
fn without_pmd_511_takes_the_highest_enabled_order() {
    let (tried, end) = walk(mthp_collapse, &input([0], NO_PMD, 511), ok);
    assert_eq!(tried, vec![(0, 8)]);
    assert_eq!(end.collapsed, 256);
    // Only 64K enabled: each aligned 16-PTE block with an occupied PTE, [0, 16) and [32, 48).
    let (tried, _) = walk(mthp_collapse, &input([3, 40], &[4], 511), ok);
    assert_eq!(tried, vec![(0, 4), (32, 4)]);
}

/// 256 is neither 0 nor 511: the PMD order keeps it (threshold 512 - 256 = 256 occupied), the
/// orders below behave as 0 and warn once. 300 occupied PTEs: the PMD qualifies and no lower
/// order is looked at, so no warning.
#[test]
fn other_values_warn_and_behave_as_zero_below_pmd() {
    let (tried, end) = walk(mthp_collapse, &input(0..16, ALL, 256), ok);
    assert_eq!(tried, vec![(0, 4)]);
    assert!(end.warned);
    let (tried, end) = walk(mthp_collapse, &input(0..300, ALL, 256), ok);
    assert_eq!(tried, vec![(0, 9)]);
    assert!(!end.warned);
    // Without the PMD order, 256 behaves as 0: [0, 12) holds no full 64K block, two 32K ones
    // ([0, 8)) and one 16K one ([8, 12)).
    let (tried, end) = walk(mthp_collapse, &input(0..12, NO_PMD, 256), ok);
    assert_eq!(tried, vec![(0, 3), (8, 2)]);
    assert!(end.warned);
}

/// A failed allocation drops one order at the same offset; the range still succeeds.
#[test]
fn a_failed_allocation_tries_the_next_order_down() {
    let answer = |off, o| if (off, o) == (0, 4) { AttemptResult::AllocHugePageFail } else { AttemptResult::Succeed };
    let (tried, end) = walk(mthp_collapse, &input(0..16, &[2, 3, 4], 0), answer);
    assert_eq!(tried, vec![(0, 4), (0, 3), (8, 3)]);
    assert_eq!(end.result, AttemptResult::Succeed);
    let (_, end) = walk(mthp_collapse, &input(0..16, &[4], 0), |_, _| AttemptResult::AllocHugePageFail);
    assert_eq!(end, WalkEnd { collapsed: 0, result: AttemptResult::AllocHugePageFail, warned: false });
}

/// A shared (or swap) PTE in a region below PMD order: `collapse_huge_page` refuses it
/// (SCAN_EXCEED_SHARED_PTE). As merged (v19) that ends the walk, so [100, 104) is not tried;
/// v18 tries the halves: [0, 8) refused again, [0, 4) refused, then [4, 8), [8, 16) and
/// [100, 104) collapse.
#[test]
fn a_shared_pte_ends_the_forward_walk_and_v18_descends_around_it() {
    let shared_at_1 = |off: u16, o: u8| if off <= 1 && 1 < off + (1 << o) { AttemptResult::ExceedSharedPte } else { AttemptResult::Succeed };
    let ptes = || (0..16).chain(100..104);
    let (tried, end) = walk(mthp_collapse, &input(ptes(), ALL, 0), shared_at_1);
    assert_eq!(tried, vec![(0, 4)]);
    assert_eq!(end, WalkEnd { collapsed: 0, result: AttemptResult::ExceedSharedPte, warned: false });
    let (tried, end) = walk(v18, &input(ptes(), ALL, 0), shared_at_1);
    assert_eq!(tried, vec![(0, 4), (0, 3), (0, 2), (4, 2), (8, 3), (100, 2)]);
    assert_eq!(end.collapsed, 4 + 8 + 4);
}

/// Both walks find the same regions when every attempt succeeds (v18 = v19 on the example of
/// the first test); a disabled order in the middle (64K off) gives 32K blocks in both.
#[test]
fn v18_and_v19_agree_when_attempts_succeed() {
    let ptes = || (0..16).chain(100..104);
    assert_eq!(walk(v18, &input(ptes(), ALL, 0), ok).0, vec![(0, 4), (100, 2)]);
    let no_64k = &[2, 3, 5, 6, 7, 8, 9];
    assert_eq!(walk(mthp_collapse, &input(0..16, no_64k, 0), ok).0, vec![(0, 3), (8, 3)]);
    assert_eq!(walk(v18, &input(0..16, no_64k, 0), ok).0, vec![(0, 3), (8, 3)]);
}

/// v11/v12's scaling (`scaled=1`): 511 is capped at 255, so order 4 allows 255 >> 5 = 7 none
/// PTEs (9 occupied of 16 needed), order 3 allows 3 (5 of 8), order 2 allows 1 (3 of 4).
/// The earlier uncapped rule at 384: order 4 allows 12 (4 of 16 occupied suffice).
#[test]
fn scaled_max_ptes_none_thresholds() {
    let capped = |i: &WalkInput, a: &mut dyn FnMut(u16, Order) -> AttemptResult| mthp_collapse_v18(i, Scaling::Capped, a);
    let uncapped = |i: &WalkInput, a: &mut dyn FnMut(u16, Order) -> AttemptResult| mthp_collapse_v18(i, Scaling::Uncapped, a);
    assert_eq!(walk(capped, &input(0..9, NO_PMD, 511), ok).0, vec![(0, 4)]);
    assert_eq!(walk(capped, &input(0..8, NO_PMD, 511), ok).0, vec![(0, 3)]);
    assert_eq!(walk(capped, &input(0..3, NO_PMD, 511), ok).0, vec![(0, 2)]);
    assert_eq!(walk(uncapped, &input(0..4, NO_PMD, 384), ok).0, vec![(0, 4)]);
}

/// Creep: with the uncapped rule at 384, each collapse fills enough of the next larger region
/// to qualify it at the next scan: 4 PTEs → order 4 (16), 16 → order 6 (64 PTEs: order 6 needs
/// 64 - 48 = 16), 64 → order 8 (needs 256 - 192 = 64), 256 → the PMD (needs 512 - 384 = 128).
/// 7.2's rule at the same 384 (warn, 0) collapses nothing from 4 PTEs that are already a 16K
/// block's worth, and does not grow.
#[test]
fn creep_over_successive_scans_and_its_cure() {
    let uncapped = |i: &WalkInput, a: &mut dyn FnMut(u16, Order) -> AttemptResult| mthp_collapse_v18(i, Scaling::Uncapped, a);
    let mut occupied = 4u16;
    let mut steps = Vec::new();
    for _scan in 0..5 {
        let (tried, _) = walk(uncapped, &input(0..occupied, ALL, 384), ok);
        let Some(&(0, o)) = tried.first() else { break };
        steps.push(o);
        occupied = 1 << o;
        if o == 9 {
            break;
        }
    }
    assert_eq!(steps, vec![4, 6, 8, 9]);
    let (tried, end) = walk(mthp_collapse, &input(0..4, ALL, 384), ok);
    assert_eq!(tried, vec![(0, 2)], "a full 16K block collapses, nothing grows");
    assert!(end.warned);
    let (tried, _) = walk(mthp_collapse, &input(0..4, ALL, 0), ok);
    assert_eq!(tried, vec![(0, 2)]);
}

#[test]
fn alignment_caps_the_order_and_the_bitmap_counts_ranges() {
    assert_eq!(max_order_from_offset(0), 9);
    assert_eq!(max_order_from_offset(4), 2);
    assert_eq!(max_order_from_offset(96), 5);
    assert_eq!(max_order_from_offset(256), 8);
    let o = Occupancy::of([0, 63, 64, 511]);
    assert_eq!((o.weight(0, 64), o.weight(0, 512), o.weight(64, 448), o.weight(1, 62)), (2, 4, 2, 0));
    // A userfaultfd-armed VMA allows no none PTE even under 511.
    let mut i = input(0..15, NO_PMD, 511);
    i.uffd_armed = true;
    assert_eq!(walk(mthp_collapse, &i, ok).0, vec![(0, 3), (8, 2)]);
}
