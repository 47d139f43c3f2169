//! THP policies as decision points the model (`mm`) calls, so that a kernel version or a
//! proposal is one implementation of [`ThpPolicy`] beside 6.18's, never an `if` inside the
//! model's 6.18 code:
//!
//! - fault time: which of the orders the kernel allows a fault may take ([`ThpPolicy::fault_orders`]);
//! - khugepaged: which orders a PMD range of an anonymous VMA may collapse to
//!   ([`ThpPolicy::collapse_orders`]), how the range is walked once scanned
//!   ([`ThpPolicy::collapse_walk`]: which (offset, order) regions are tried, in which order), and
//!   which range is scanned next before the round-robin scan goes on ([`ThpPolicy::next_range`]:
//!   a queue of hinted ranges is its shape).
//!
//! - fault time too: whether a PTE fault that THP declined takes a 64 KiB chunk of the
//!   contiguous page hint ([`ThpPolicy::contig_hint`], [`contig_hint`]).
//!
//! Implementations: [`Linux618`] (the default; PMD collapse only), [`Linux72`] (7.2's
//! khugepaged mTHP collapse, [`mthp_collapse::mthp_collapse`]) and [`MthpCollapseV18`] (the
//! posted v18 recursion, [`mthp_collapse::mthp_collapse_v18`]), [`CollapseHints`] (Luka Bai's
//! collapse hints, [`collapse_hints`]) and [`GlobalHints`] (thplab's global hint system,
//! [`global_hints`]): the last two read a hint source's findings ([`ThpPolicy::hotness`]) and
//! may propose splits ([`ThpPolicy::split_candidates`]). [`for_settings`] picks one from
//! `--kernel` and `--policy`. Write your own: crates/policy/examples/hot_first.rs (docs/policies.md).
//!
//! Module map:
//! - [`mthp_collapse`]: the mTHP collapse walks (7.2's forward walk, v18's recursion).
//! - [`collapse_hints`]: the collapse-hint queues; [`global_hints`]: thplab's global hint system.
//! - [`contig_hint`]: the contiguous page hint's chunk table and states.
//! - [`mtm`]: MTM's tiering decisions (profiling within a budget, fast promotion, slow demotion
//!   of whole huge pages; model-only, docs/tiers.md), run by `sim::tiers`.
//! - [`fhpm`]: of another kind, FHPM's decisions for a VM host (PSR split and promotion), which
//!   `sim::host` calls; the guest under `--policy fhpm` runs its version's policy.
//!
//! Sources: mm/khugepaged.c of the series "khugepaged: mTHP support" (Nico Pache): v19 as merged
//! for 7.2 (`[PATCH mm-unstable v19 11/14]`, 2026-06-05: `mthp_collapse`,
//! `max_order_from_offset`, `collapse_max_ptes_none`, `collapse_scan_pmd`) and v18 (2026-05-22:
//! the stack of (offset, order)), read from the linux-mm postings (no 7.2 tree was reachable).

/// The collapse decisions of a policy that runs on top of a kernel version's (`self.base`):
/// which orders khugepaged may collapse to and how it walks a PMD range stay the version's.
macro_rules! forward_collapse_to_base {
    () => {
        fn khugepaged_any_order(&self) -> bool {
            self.base.khugepaged_any_order()
        }
        fn collapse_orders(&self, allowed: Orders) -> Orders {
            self.base.collapse_orders(allowed)
        }
        fn collapse_walk(&self, input: &WalkInput, attempt: &mut dyn FnMut(u16, Order) -> AttemptResult) -> WalkEnd {
            self.base.collapse_walk(input, attempt)
        }
    };
}
pub(crate) use forward_collapse_to_base;

pub mod fhpm;
pub mod collapse_hints;
pub mod global_hints;
pub mod contig_hint;
pub mod mthp_collapse;
pub mod mtm;

use mm_types::{Order, Orders};
use thp_abi::{HintParams, HintSource, KernelVersion, Policy};

pub use collapse_hints::{HintQueues, HintStats, HotRange};
pub use global_hints::GlobalHints;
pub use mthp_collapse::{AttemptResult, Occupancy, WalkEnd, WalkInput};

/// A range khugepaged scans before its round-robin scan: the PMD range at `addr` of mm `mm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub mm: u32,
    pub addr: u64,
}

/// The decision points of a THP policy. Every method but the walk has the 6.18 answer as its
/// default, so a policy overrides only what it changes.
pub trait ThpPolicy: std::fmt::Debug + Send {
    /// How results and `settings --list` name it.
    fn name(&self) -> String;

    /// Whether the model must ask [`ThpPolicy::fault_orders`] at every anonymous fault (false:
    /// the fault path does not call it, and costs what 6.18's does).
    fn has_fault_hook(&self) -> bool {
        false
    }

    /// Fault time: of `allowed` (the orders `thp_vma_allowable_orders` and
    /// `thp_vma_suitable_orders` leave at `addr`), those the fault may try, highest first.
    fn fault_orders(&self, _addr: u64, allowed: Orders) -> Orders {
        allowed
    }

    /// khugepaged and its `hugepage_pmd_enabled` gate: whether the daemon runs when only
    /// sizes below PMD are enabled (6.18: no; 7.2: yes, "run khugepaged for all orders").
    fn khugepaged_any_order(&self) -> bool {
        false
    }

    /// khugepaged: of the orders the anonymous VMA allows (`TVA_KHUGEPAGED`), those a PMD range
    /// may collapse to (6.18: PMD only). With PMD the only one, the range is scanned as 6.18
    /// scans it (max_ptes_none enforced during the scan).
    fn collapse_orders(&self, allowed: Orders) -> Orders {
        allowed.and(Orders::single(Order::PMD))
    }

    /// khugepaged, after a PMD range was scanned with more than PMD order allowed: which
    /// (offset, order) regions to try, calling `attempt` (`collapse_huge_page` at that order),
    /// and what the range's scan result is.
    fn collapse_walk(&self, input: &WalkInput, attempt: &mut dyn FnMut(u16, Order) -> AttemptResult) -> WalkEnd;

    /// khugepaged: a range to scan before the round-robin scan goes on (a hint); `None` (the
    /// default): none. Each range is scanned once, charged 512 pages of `pages_to_scan`.
    fn next_range(&mut self) -> Option<Range> {
        None
    }

    /// Pages of `pages_to_scan` a range from [`ThpPolicy::next_range`] costs: 512 (as a
    /// scanned PMD range) by default; `vanished`: its VMA is gone or no longer eligible.
    fn hint_charge(&self, _vanished: bool) -> u64 {
        512
    }

    /// The hint source the policy reads, and its period (ns): the model runs it on the
    /// simulated clock and hands its findings to [`ThpPolicy::hotness`]. `None` (the
    /// default): no source runs.
    fn hint_source(&self) -> Option<(HintSource, u64)> {
        None
    }

    /// A hint source's findings of one pass, one entry per PMD range it examined.
    fn hotness(&mut self, _found: &[HotRange]) {}

    /// Split candidates: of the PMD-mapped ranges (`pmd_mapped`, as the last source pass
    /// found them), those whose folios the model should split now. None by default.
    fn split_candidates(&mut self, _pmd_mapped: &[Range]) -> Vec<Range> {
        Vec::new()
    }

    /// The collapse-hint queues' counts, for a policy that has them.
    fn hint_stats(&self) -> Option<HintStats> {
        None
    }

    /// Fault time, after THP declined a PTE fault: the contiguous page hint's parameters when
    /// the policy has it ([`contig_hint`]); `None` (the default): 6.18's order-0 page.
    fn contig_hint(&self) -> Option<contig_hint::ContigHint> {
        None
    }
}

/// The contiguous page hint on top of a kernel version's policy (`--policy contig-hint`).
#[derive(Debug)]
pub struct ContigHintPolicy {
    pub base: Box<dyn ThpPolicy>,
    pub hint: contig_hint::ContigHint,
}

impl ThpPolicy for ContigHintPolicy {
    fn name(&self) -> String {
        Policy::ContigHint { fill: self.hint.fill, gfp: self.hint.gfp }.to_string()
    }
    fn has_fault_hook(&self) -> bool {
        self.base.has_fault_hook()
    }
    fn fault_orders(&self, addr: u64, allowed: Orders) -> Orders {
        self.base.fault_orders(addr, allowed)
    }
    forward_collapse_to_base!();
    fn next_range(&mut self) -> Option<Range> {
        self.base.next_range()
    }
    fn contig_hint(&self) -> Option<contig_hint::ContigHint> {
        Some(self.hint)
    }
}

/// Linux 6.18: PMD collapse only.
#[derive(Clone, Copy, Debug, Default)]
pub struct Linux618;

impl ThpPolicy for Linux618 {
    fn name(&self) -> String {
        "6.18".into()
    }
    fn collapse_walk(&self, input: &WalkInput, attempt: &mut dyn FnMut(u16, Order) -> AttemptResult) -> WalkEnd {
        mthp_collapse::pmd_only(input, attempt)
    }
}

/// Linux 7.2: khugepaged mTHP collapse as merged (v19's forward walk).
#[derive(Clone, Copy, Debug, Default)]
pub struct Linux72;

impl ThpPolicy for Linux72 {
    fn name(&self) -> String {
        "7.2".into()
    }
    fn khugepaged_any_order(&self) -> bool {
        true
    }
    fn collapse_orders(&self, allowed: Orders) -> Orders {
        mthp_collapse::collapse_possible_orders(allowed)
    }
    fn collapse_walk(&self, input: &WalkInput, attempt: &mut dyn FnMut(u16, Order) -> AttemptResult) -> WalkEnd {
        mthp_collapse::mthp_collapse(input, attempt)
    }
}

/// The posted v18 of the mTHP collapse series: the stack recursion over (offset, order);
/// `scaled`: v11/v12's per-order max_ptes_none.
#[derive(Clone, Copy, Debug, Default)]
pub struct MthpCollapseV18 {
    pub scaled: mthp_collapse::Scaling,
}

impl ThpPolicy for MthpCollapseV18 {
    fn name(&self) -> String {
        Policy::MthpCollapseV18 { scaled: self.scaled }.to_string()
    }
    fn khugepaged_any_order(&self) -> bool {
        true
    }
    fn collapse_orders(&self, allowed: Orders) -> Orders {
        mthp_collapse::collapse_possible_orders(allowed)
    }
    fn collapse_walk(&self, input: &WalkInput, attempt: &mut dyn FnMut(u16, Order) -> AttemptResult) -> WalkEnd {
        mthp_collapse::mthp_collapse_v18(input, self.scaled, attempt)
    }
}

/// Collapse hints (Luka Bai's series) on top of the kernel version's collapse walk.
#[derive(Debug)]
pub struct CollapseHints {
    pub queues: HintQueues,
    /// The version's policy (its collapse orders and walk).
    pub base: Box<dyn ThpPolicy>,
}

impl CollapseHints {
    pub fn new(params: HintParams, base: Box<dyn ThpPolicy>) -> CollapseHints {
        CollapseHints { queues: HintQueues::new(params), base }
    }
}

impl ThpPolicy for CollapseHints {
    fn name(&self) -> String {
        Policy::CollapseHints(self.queues.params).to_string()
    }
    forward_collapse_to_base!();
    fn next_range(&mut self) -> Option<Range> {
        self.queues.next()
    }
    fn hint_charge(&self, vanished: bool) -> u64 {
        self.queues.charge(vanished)
    }
    fn hint_source(&self) -> Option<(HintSource, u64)> {
        Some(self.queues.source())
    }
    fn hotness(&mut self, found: &[HotRange]) {
        self.queues.add_hot(found);
    }
    fn hint_stats(&self) -> Option<HintStats> {
        Some(self.queues.stats)
    }
}

/// The policy `--kernel` and `--policy` give: a policy runs on top of the kernel version (the
/// v18 series replaces the version's collapse walk).
pub fn for_settings(kernel: KernelVersion, policy: Option<Policy>) -> Box<dyn ThpPolicy> {
    let version = |k| for_settings(k, None);
    match (policy, kernel) {
        (Some(Policy::MthpCollapseV18 { scaled }), _) => Box::new(MthpCollapseV18 { scaled }),
        // FHPM manages the VM host's memory (`fhpm`, sim::host): the guest runs its version's.
        (Some(Policy::Fhpm(_)), k) => for_settings(k, None),
        (Some(Policy::CollapseHints(p)), k) => Box::new(CollapseHints::new(p, version(k))),
        (Some(Policy::GlobalHints(p)), k) => Box::new(GlobalHints::new(p, version(k))),
        (Some(Policy::ContigHint { fill, gfp }), k) => {
            Box::new(ContigHintPolicy { base: for_settings(k, None), hint: contig_hint::ContigHint { fill, gfp } })
        }
        (None, KernelVersion::V7_2) => Box::new(Linux72),
        (None, KernelVersion::V6_18) => Box::new(Linux618),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_pick_the_implementation() {
        assert_eq!(for_settings(KernelVersion::V6_18, None).name(), "6.18");
        assert_eq!(for_settings(KernelVersion::V7_2, None).name(), "7.2");
        let v18 = for_settings(KernelVersion::V6_18, Some(Policy::MthpCollapseV18 { scaled: mthp_collapse::Scaling::Capped }));
        assert_eq!(v18.name(), "mthp-collapse-v18:scaled=1");
        // 6.18 collapses to PMD only; 7.2 and v18 to every anon order from 2 up, PMD or not.
        let allowed = Orders::single(Order(4)).with(Order(2)).with(Order::PMD);
        assert_eq!(Linux618.collapse_orders(allowed), Orders::single(Order::PMD));
        assert_eq!(Linux72.collapse_orders(allowed), allowed);
        assert_eq!(Linux72.collapse_orders(Orders::single(Order(4))), Orders::single(Order(4)));
        assert!(!Linux618.khugepaged_any_order() && Linux72.khugepaged_any_order());
        // The hint runs on the version's collapse: 7.2's below PMD, 6.18's PMD only.
        let hint = Policy::ContigHint { fill: 3, gfp: thp_abi::version::HintGfp::Reclaim };
        let p = for_settings(KernelVersion::V7_2, Some(hint));
        assert_eq!((p.name().as_str(), p.khugepaged_any_order()), ("contig-hint:fill=3,gfp=reclaim", true));
        assert_eq!(p.contig_hint(), Some(contig_hint::ContigHint { fill: 3, gfp: thp_abi::version::HintGfp::Reclaim }));
        assert_eq!(for_settings(KernelVersion::V6_18, Some(hint)).collapse_orders(allowed), Orders::single(Order::PMD));
        assert_eq!(Linux618.contig_hint(), None);
    }
}
