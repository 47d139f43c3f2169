//! `--explain ADDR`: for the faults that touched an address range, which folio size each got
//! and why each larger size the settings enable was refused, with the same
//! [`FallbackReason`]s the `fallbacks` totals count (the reasons come from one function,
//! `Kernel::fallback_reason` in memory.rs, for both).
//!
//! Model only: the kernel records nothing of the kind. Cost: one test of an `Option` per fault
//! when nothing is explained; the decisions are kept only for faults in the range.
//!
//! Kernel sources (6.18): `mm/memory.c: alloc_anon_folio`, `mm/huge_memory.c:
//! thp_vma_allowable_orders`, `do_huge_pmd_anonymous_page` (where the decisions are made).

use mm_types::{Order, Vaddr, PAGE_SIZE};

use crate::model::fallbacks::FallbackReason;

/// What a fault mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Got {
    /// A folio of this order (PTE-mapped, or PMD-mapped for order 9).
    Folio(Order),
    /// The shared zero page (a read fault).
    ZeroPage,
    /// The huge zero folio (a read fault, PMD).
    HugeZeroPage,
}

/// One fault in the explained range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultDecision {
    pub addr: u64,
    pub write: bool,
    pub got: Got,
    /// Larger enabled orders and why not, largest first.
    pub refused: Vec<(Order, FallbackReason)>,
}

/// The faults of an explained range.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExplainLog {
    pub start: u64,
    pub end: u64,
    pub faults: Vec<FaultDecision>,
    /// Faults in the range beyond [`ExplainLog::MAX_FAULTS`] (counted, not kept).
    pub more: u64,
}

impl ExplainLog {
    pub const MAX_FAULTS: usize = 10_000;

    pub fn new(start: u64, end: u64) -> ExplainLog {
        ExplainLog { start, end: end.max(start + 1), ..Default::default() }
    }

    /// Does a fault at `va` that mapped `order` touch the range (its page, or the folio it got)?
    #[inline]
    pub fn wants(&self, va: Vaddr, order: Order) -> bool {
        let page = va.0 & !(PAGE_SIZE - 1);
        let base = va.align_down(order).0;
        let end = base + order.nr_pages() as u64 * PAGE_SIZE;
        (page < self.end && page + PAGE_SIZE > self.start) || (base < self.end && end > self.start)
    }

    pub fn push(&mut self, d: FaultDecision) {
        if self.faults.len() < Self::MAX_FAULTS {
            self.faults.push(d);
        } else {
            self.more += 1;
        }
    }
}
