//! khugepaged's walk over one scanned PMD range: which naturally aligned (offset, order)
//! regions are tried, given one bit per occupied PTE, the orders enabled and max_ptes_none.
//!
//! Kernel sources: mm/khugepaged.c of "khugepaged: mTHP support" (Nico Pache), read from the
//! linux-mm postings (no 7.2 tree was reachable): as merged for 7.2, v19 (`[PATCH mm-unstable
//! v19 11/14] mm/khugepaged: Introduce mTHP collapse support`, 2026-06-05): `mthp_collapse`
//! (the forward walk), `max_order_from_offset`, `collapse_max_ptes_none`, and
//! `collapse_scan_pmd`'s bitmap `cc->mthp_present_ptes`, KHUGEPAGED_MIN_MTHP_ORDER = 2;
//! v18 (2026-05-22): `mthp_collapse` over a stack of (offset, order) (`collapse_mthp_stack_push`,
//! `collapse_mthp_stack_pop`) with "avoid unnecessary mTHP collapse attempts"' list of results
//! that let a lower order be tried; v11/v12 (2025): `max_ptes_none` scaled per order.

use mm_types::{Order, Orders, HPAGE_PMD_NR, PMD_ORDER};

/// KHUGEPAGED_MIN_MTHP_ORDER: anonymous memory has no order-1 folios.
pub const KHUGEPAGED_MIN_MTHP_ORDER: u8 = 2;

/// `cc->mthp_present_ptes`: one bit per occupied PTE (present, not the zero page) of a PMD range.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Occupancy([u64; 8]);

impl Occupancy {
    /// The bits of `ptes` (indices in the PTE table).
    pub fn of(ptes: impl IntoIterator<Item = u16>) -> Occupancy {
        let mut o = Occupancy::default();
        for i in ptes {
            o.set(i);
        }
        o
    }
    /// `__set_bit`.
    pub fn set(&mut self, i: u16) {
        self.0[i as usize / 64] |= 1 << (i % 64);
    }
    /// `bitmap_weight_from(bitmap, offset, offset + nr)`.
    pub fn weight(&self, offset: u16, nr: u32) -> u32 {
        (offset as u32..offset as u32 + nr).filter(|&i| self.0[i as usize / 64] & (1 << (i % 64)) != 0).count() as u32
    }
}

/// How a walk over one PMD range is called.
#[derive(Clone, Copy, Debug)]
pub struct WalkInput {
    pub occupied: Occupancy,
    /// The orders the range may collapse to ([`collapse_possible_orders`]).
    pub enabled: Orders,
    /// sysfs `khugepaged/max_ptes_none`.
    pub max_ptes_none: u32,
    /// The VMA is registered with userfaultfd: no none PTE may be filled.
    pub uffd_armed: bool,
}

/// What one `collapse_huge_page(order)` returned, as the walks tell results apart
/// (`enum scan_result`; the model maps its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptResult {
    Succeed,
    PteMappedHugepage,
    PmdMapped,
    AllocHugePageFail,
    CgroupChargeFail,
    ExceedNonePte,
    ExceedSwapPte,
    ExceedSharedPte,
    LackReferencedPage,
    /// SCAN_PAGE_LOCK, _COUNT, _NULL, _DEL_PAGE_LRU, _PTE_NON_PRESENT, _PTE_UFFD_WP,
    /// _PAGE_LAZYFREE: busy pages v18 let a lower order try.
    PageBusy,
    /// Any other result (SCAN_FAIL, SCAN_VMA_CHECK, ...).
    Fail,
}

/// How a walk ended: the PTEs collapsed, the range's scan result, and whether
/// `collapse_max_ptes_none` warned (`pr_warn_once`: a max_ptes_none other than 0 or 511).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkEnd {
    pub collapsed: u32,
    pub result: AttemptResult,
    pub warned: bool,
}

/// The warning `collapse_max_ptes_none` prints once.
pub const MAX_PTES_NONE_WARNING: &str =
    "khugepaged: mTHP collapse only supports max_ptes_none 0 or 511; other values behave as 0 for orders below PMD";

/// `collapse_possible_orders` for khugepaged on an anonymous VMA: the allowed orders from
/// KHUGEPAGED_MIN_MTHP_ORDER to PMD.
pub fn collapse_possible_orders(allowed: Orders) -> Orders {
    allowed.and(Orders::ALL_ANON)
}

/// `max_order_from_offset`: the highest naturally aligned order that fits at `offset`.
pub fn max_order_from_offset(offset: u32) -> u8 {
    if offset == 0 {
        PMD_ORDER
    } else {
        (offset.trailing_zeros() as u8).min(PMD_ORDER)
    }
}

/// `collapse_max_ptes_none` for khugepaged at `order` (7.2, and v13 onwards): PMD order keeps
/// the sysfs value; below it only 0 and 511 mean anything (511: `(1 << order) - 1`), any other
/// value warns (`*warned`) and behaves as 0. A userfaultfd-armed VMA allows none.
pub fn collapse_max_ptes_none(input: &WalkInput, order: u8, warned: &mut bool) -> u32 {
    let max = input.max_ptes_none;
    if input.uffd_armed {
        0
    } else if order == PMD_ORDER {
        max
    } else if max == 0 {
        0
    } else if max == HPAGE_PMD_NR - 1 {
        (1 << order) - 1
    } else {
        *warned = true;
        0
    }
}

pub use thp_abi::version::Scaling;

fn scaled_max_ptes_none(input: &WalkInput, order: u8, scaling: Scaling, warned: &mut bool) -> u32 {
    let shift = PMD_ORDER - order;
    match scaling {
        _ if order == PMD_ORDER || input.uffd_armed => collapse_max_ptes_none(input, order, warned),
        Scaling::ZeroOr511 => collapse_max_ptes_none(input, order, warned),
        Scaling::Capped => input.max_ptes_none.min(HPAGE_PMD_NR / 2 - 1) >> shift,
        Scaling::Uncapped => input.max_ptes_none >> shift,
    }
}

/// 6.18: the PMD range is collapsed whole or not at all (its scan already enforced
/// max_ptes_none).
pub fn pmd_only(input: &WalkInput, attempt: &mut dyn FnMut(u16, Order) -> AttemptResult) -> WalkEnd {
    let _ = input;
    let result = attempt(0, Order::PMD);
    WalkEnd { collapsed: if result == AttemptResult::Succeed { HPAGE_PMD_NR } else { 0 }, result, warned: false }
}

/// The end of a walk: SCAN_SUCCEED if anything collapsed, else a failed allocation, else the
/// last result.
fn walk_end(collapsed: u32, alloc_failed: bool, last: AttemptResult, warned: bool) -> WalkEnd {
    let result = if collapsed > 0 {
        AttemptResult::Succeed
    } else if alloc_failed {
        AttemptResult::AllocHugePageFail
    } else {
        last
    };
    WalkEnd { collapsed, result, warned }
}

/// `mthp_collapse` as merged for 7.2 (v19): walk forward from offset 0 at PMD order; at each
/// offset try the highest enabled order its alignment allows whose region holds at least
/// `(1 << order) - max_ptes_none` occupied PTEs; a failed allocation (or too few occupied PTEs,
/// or a disabled order) drops one order at the same offset; a success (or a region already
/// PTE-mapped huge) moves past the region; any other failure ends the walk.
pub fn mthp_collapse(input: &WalkInput, attempt: &mut dyn FnMut(u16, Order) -> AttemptResult) -> WalkEnd {
    let (mut collapsed, mut alloc_failed, mut last, mut warned) = (0, false, AttemptResult::Fail, false);
    let (mut offset, mut order) = (0u32, PMD_ORDER);
    while offset < HPAGE_PMD_NR {
        let nr = 1u32 << order;
        let mut lower = true;
        if input.enabled.contains(Order(order)) {
            let max_none = collapse_max_ptes_none(input, order, &mut warned);
            if input.occupied.weight(offset as u16, nr) >= nr - max_none.min(nr) {
                match attempt(offset as u16, Order(order)) {
                    AttemptResult::Succeed => {
                        collapsed += nr;
                        lower = false;
                    }
                    AttemptResult::PteMappedHugepage => lower = false,
                    AttemptResult::AllocHugePageFail => {
                        alloc_failed = true;
                        last = AttemptResult::AllocHugePageFail;
                    }
                    r => return walk_end(collapsed, alloc_failed, r, warned),
                }
            }
        }
        // next_order: a smaller enabled order at the same offset, else the next offset.
        if lower && order > KHUGEPAGED_MIN_MTHP_ORDER && !input.enabled.and(Orders::below(Order(order))).is_empty() {
            order -= 1;
            continue;
        }
        offset += nr;
        order = max_order_from_offset(offset);
    }
    walk_end(collapsed, alloc_failed, last, warned)
}

/// Whether v18 tries the halves of a region after this result ("avoid unnecessary mTHP
/// collapse attempts"); a success or an already PTE-mapped huge region ends the descent.
fn v18_lower_may_work(r: AttemptResult) -> bool {
    use AttemptResult::*;
    matches!(r, LackReferencedPage | ExceedNonePte | ExceedSwapPte | ExceedSharedPte | PageBusy | AllocHugePageFail)
}

/// `mthp_collapse` as posted in v18: a stack of (offset, order) from (0, PMD); a region that is
/// not enabled, holds too few occupied PTEs or fails with a result a lower order may overcome
/// is replaced by its two halves one order down (left first), down to order 2; any other
/// failure ends the walk. `scaling` picks the max_ptes_none rule below PMD.
pub fn mthp_collapse_v18(input: &WalkInput, scaling: Scaling, attempt: &mut dyn FnMut(u16, Order) -> AttemptResult) -> WalkEnd {
    let (mut collapsed, mut alloc_failed, mut last, mut warned) = (0, false, AttemptResult::Fail, false);
    let mut stack: Vec<(u32, u8)> = vec![(0, PMD_ORDER)];
    while let Some((offset, order)) = stack.pop() {
        let nr = 1u32 << order;
        if input.enabled.contains(Order(order)) {
            let max_none = scaled_max_ptes_none(input, order, scaling, &mut warned);
            if input.occupied.weight(offset as u16, nr) >= nr - max_none.min(nr) {
                match attempt(offset as u16, Order(order)) {
                    AttemptResult::Succeed => {
                        collapsed += nr;
                        continue;
                    }
                    AttemptResult::PteMappedHugepage => continue,
                    r if v18_lower_may_work(r) => {
                        alloc_failed |= r == AttemptResult::AllocHugePageFail;
                        last = r;
                    }
                    r => return walk_end(collapsed, alloc_failed, r, warned),
                }
            }
        }
        if order > KHUGEPAGED_MIN_MTHP_ORDER && !input.enabled.and(Orders::below(Order(order))).is_empty() {
            stack.push((offset + nr / 2, order - 1));
            stack.push((offset, order - 1));
        }
    }
    walk_end(collapsed, alloc_failed, last, warned)
}

#[cfg(test)]
#[path = "mthp_collapse_tests.rs"]
mod tests;
