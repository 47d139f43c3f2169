//! Write your own THP policy: "hot first". A researcher's proposal in three decisions:
//!
//! 1. khugepaged serves a queue of hinted PMD ranges (say, found hot by an access sampler)
//!    before its round-robin scan, each hint once (`next_range`);
//! 2. it collapses to PMD only, as 6.18 does (`collapse_orders` and `collapse_walk` keep 6.18's);
//! 3. a fault takes at most 64 KiB, so that memory grows in small folios until it proves hot
//!    (`fault_orders`).
//!
//! Install it in the model with `mm::Kernel::set_policy(Box::new(HotFirst::new(hints)))`; the
//! test `the_example_policy_runs_in_the_model` (crates/mm/src/khugepaged/mthp_collapse_tests.rs)
//! does, and docs/policies.md lists every decision point. `cargo run -p policy --example
//! hot_first` prints its decisions on a small case.

use std::collections::VecDeque;

use mm_types::{Order, Orders};
use policy::{mthp_collapse, AttemptResult, Range, ThpPolicy, WalkEnd, WalkInput};

/// The policy: hinted ranges first, faults capped at 64 KiB.
#[derive(Debug, Default)]
pub struct HotFirst {
    hints: VecDeque<Range>,
}

impl HotFirst {
    pub fn new(hints: impl IntoIterator<Item = Range>) -> HotFirst {
        HotFirst { hints: hints.into_iter().collect() }
    }
}

/// The largest fault size: order 4, 64 KiB.
const FAULT_CAP: Order = Order(4);

impl ThpPolicy for HotFirst {
    fn name(&self) -> String {
        "hot-first".into()
    }

    fn has_fault_hook(&self) -> bool {
        true
    }

    /// Keep the allowed orders up to 64 KiB.
    fn fault_orders(&self, _addr: u64, allowed: Orders) -> Orders {
        allowed.and(Orders::below(Order(FAULT_CAP.0 + 1)))
    }

    /// 6.18's walk: the PMD range whole.
    fn collapse_walk(&self, input: &WalkInput, attempt: &mut dyn FnMut(u16, Order) -> AttemptResult) -> WalkEnd {
        mthp_collapse::pmd_only(input, attempt)
    }

    /// The next hint, removed from the queue (one attempt per hint).
    fn next_range(&mut self) -> Option<Range> {
        self.hints.pop_front()
    }
}

fn main() {
    let mut p = HotFirst::new([Range { mm: 0, addr: 0x4000_0000 }]);
    let allowed = Orders::single(Order(2)).with(Order(4)).with(Order(6));
    println!("{}: a fault allowed {allowed:?} tries {:?}", p.name(), p.fault_orders(0, allowed));
    println!("next range: {:?}, then {:?}", p.next_range(), p.next_range());
}
