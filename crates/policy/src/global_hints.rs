//! The global hint system: thplab's own design (docs/global-hints.md), the direction the
//! collapse-hint series' review pointed to ("thp=auto": hotness gathered outside khugepaged
//! serving every THP decision). MODEL-ONLY: no kernel has it.
//!
//! One hotness source (MGLRU aging or DAMON, as for collapse hints) feeds three decisions:
//! - fault time ([`ThpPolicy::fault_orders`]): the PMD order only where the PMD range was hot
//!   at the source's last pass; elsewhere the orders below PMD the settings allow (none: 4 KiB);
//! - khugepaged: hot PTE-mapped ranges are queued as collapse hints ([`HintQueues`]);
//! - splits ([`ThpPolicy::split_candidates`]): while more PMD folios are mapped than the budget
//!   (`budget=` MiB) holds, the coldest (old at the most consecutive passes, at least one) are
//!   split, oldest first, ties by address.
//!
//! Kernel functions it stands beside (6.18): mm/memory.c `alloc_anon_folio` (where the fault
//! order is chosen), mm/khugepaged.c `khugepaged_do_scan`, mm/huge_memory.c
//! `split_huge_pmd_address` and `split_folio` (what a split does).

use std::collections::{HashMap, HashSet};

use mm_types::{Order, Orders};
use thp_abi::{HintParams, HintSource, Policy};

use crate::collapse_hints::{HintQueues, HintStats, HotRange};
use crate::{AttemptResult, Range, ThpPolicy, WalkEnd, WalkInput};

const PMD_SIZE: u64 = 2 << 20;

#[derive(Debug)]
pub struct GlobalHints {
    pub queues: HintQueues,
    pub base: Box<dyn ThpPolicy>,
    /// PMD ranges (by address) hot at the last pass.
    hot: HashSet<u64>,
    /// PMD-mapped ranges and the passes in a row that found them old.
    cold_passes: HashMap<(u32, u64), u32>,
}

impl GlobalHints {
    pub fn new(params: HintParams, base: Box<dyn ThpPolicy>) -> GlobalHints {
        GlobalHints { queues: HintQueues::new(params), base, hot: HashSet::new(), cold_passes: HashMap::new() }
    }

    /// Whether the PMD range of `addr` was hot at the last pass.
    pub fn is_hot(&self, addr: u64) -> bool {
        self.hot.contains(&(addr & !(PMD_SIZE - 1)))
    }
}

impl ThpPolicy for GlobalHints {
    fn name(&self) -> String {
        Policy::GlobalHints(self.queues.params).to_string()
    }
    fn has_fault_hook(&self) -> bool {
        true
    }
    fn fault_orders(&self, addr: u64, allowed: Orders) -> Orders {
        if self.is_hot(addr) {
            allowed
        } else {
            allowed.without(Order::PMD)
        }
    }
    crate::forward_collapse_to_base!();
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
        self.hot = found.iter().filter(|h| h.hot).map(|h| h.range.addr & !(PMD_SIZE - 1)).collect();
        let mut next = HashMap::new();
        for h in found.iter().filter(|h| h.pmd_mapped) {
            let key = (h.range.mm, h.range.addr & !(PMD_SIZE - 1));
            let n = if h.young == 0 { self.cold_passes.get(&key).copied().unwrap_or(0) + 1 } else { 0 };
            next.insert(key, n);
        }
        self.cold_passes = next;
    }
    fn split_candidates(&mut self, pmd_mapped: &[Range]) -> Vec<Range> {
        let budget = self.queues.params.budget_mb as u64 * (1 << 20) / PMD_SIZE;
        if budget == 0 || pmd_mapped.len() as u64 <= budget {
            return Vec::new();
        }
        let excess = pmd_mapped.len() - budget as usize;
        let mut cold: Vec<(u32, Range)> = pmd_mapped
            .iter()
            .filter_map(|r| self.cold_passes.get(&(r.mm, r.addr)).filter(|n| **n > 0).map(|n| (*n, *r)))
            .collect();
        cold.sort_by_key(|(n, r)| (std::cmp::Reverse(*n), r.mm, r.addr));
        cold.into_iter().take(excess).map(|(_, r)| r).collect()
    }
    fn hint_stats(&self) -> Option<HintStats> {
        Some(self.queues.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Linux618;

    const M: u64 = PMD_SIZE;

    fn r(addr: u64, young: u32, pmd_mapped: bool) -> HotRange {
        HotRange { range: Range { mm: 0, addr }, young, total: 512, pmd_mapped, hot: young * 8 >= 512 }
    }

    fn policy(budget_mb: u32) -> GlobalHints {
        GlobalHints::new(HintParams { budget_mb, ..HintParams::DEFAULT }, Box::new(Linux618))
    }

    /// PMD order at fault only where the last pass found the range hot (64 of 512 young is
    /// hot: one per cache line of 8; 63 is not).
    #[test]
    fn the_fault_order_follows_hotness() {
        let mut g = policy(0);
        let allowed = Orders::single(Order::PMD).with(Order(4));
        assert_eq!(g.fault_orders(5 * M, allowed), Orders::single(Order(4)));
        g.hotness(&[r(5 * M, 64, false), r(6 * M, 63, false)]);
        assert_eq!(g.fault_orders(5 * M + 4096, allowed), allowed);
        assert_eq!(g.fault_orders(6 * M, allowed), Orders::single(Order(4)));
        // The hot range is also a collapse hint; the cold one is not.
        assert_eq!(g.next_range(), Some(Range { mm: 0, addr: 5 * M }));
        assert_eq!(g.next_range(), None);
    }

    /// Budget 4 MiB = 2 PMD folios; 5 mapped: the 3 coldest go, the longest-old first. After
    /// two passes: A old twice, B and C old once (C young at the first), D and E young.
    #[test]
    fn splits_take_the_coldest_above_the_budget() {
        let mut g = policy(4);
        let [a, b, c, d, e] = [0, 1, 2, 3, 4].map(|i| Range { mm: 0, addr: i * M });
        g.hotness(&[r(a.addr, 0, true), r(b.addr, 0, true), r(c.addr, 512, true), r(d.addr, 512, true), r(e.addr, 512, true)]);
        g.hotness(&[r(a.addr, 0, true), r(b.addr, 0, true), r(c.addr, 0, true), r(d.addr, 8, true), r(e.addr, 512, true)]);
        assert_eq!(g.split_candidates(&[a, b, c, d, e]), [a, b, c]);
        // Within the budget: nothing; no budget: nothing.
        assert_eq!(g.split_candidates(&[a, b]), []);
        assert_eq!(policy(0).split_candidates(&[a, b, c]), []);
    }
}
