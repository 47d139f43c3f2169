//! The memory cgroup of the machine's mms: every folio is charged to it, and a charge above
//! its limit reclaims, falls back (a large folio) or OOM-kills (an order-0 page).
//!
//! Kernel sources (6.18): `mm/memcontrol.c` (`mem_cgroup_charge` → `charge_memcg` →
//! `try_charge_memcg`: `MAX_RECLAIM_RETRIES` (16, mm/internal.h) rounds of
//! `try_to_free_mem_cgroup_pages`, a retry while an order-0..3 charge reclaims anything, no
//! reclaim at all for a GFP that may not block, one round for `__GFP_NORETRY`, then
//! `mem_cgroup_oom`, which skips costly orders (`order > PAGE_ALLOC_COSTLY_ORDER`)),
//! the charge's GFP is the allocation's (one `crate::page_alloc::Gfp`, from
//! `mm/huge_memory.c: vma_thp_gfp_mask` for a THP or mTHP fault, passed explicitly), `mm/memory.c: alloc_anon_folio` and
//! `huge_memory.c: vma_alloc_anon_folio_pmd` (a failed charge counts `anon_fault_fallback_charge`
//! and, for PMD size, `thp_fault_fallback_charge`).
//!
//! The model has one memcg, every mm's (the run's cgroup); page tables and kernel memory are
//! not charged (the kernel charges page tables too, `__GFP_ACCOUNT`: a small difference the
//! model leaves out). The per-CPU charge stock (`MEMCG_CHARGE_BATCH`) is left out: charges are
//! exact.

use mm_types::Order;

use crate::page_alloc::Gfp;
use crate::Kernel;

/// `MAX_RECLAIM_RETRIES`.
pub const MAX_RECLAIM_RETRIES: u32 = 16;
/// `PAGE_ALLOC_COSTLY_ORDER`.
pub const PAGE_ALLOC_COSTLY_ORDER: u8 = 3;

/// What a charge's GFP allows (`gfpflags_allow_blocking`, `__GFP_NORETRY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChargeGfp {
    /// No `__GFP_DIRECT_RECLAIM`: fail at once above the limit (`GFP_TRANSHUGE_LIGHT`).
    NoReclaim,
    /// Reclaim once and fail (`__GFP_NORETRY`: `defrag=always` on a VMA without MADV_HUGEPAGE).
    NoRetry,
    /// Reclaim with the retries, then OOM for an order up to PAGE_ALLOC_COSTLY_ORDER
    /// (`GFP_HIGHUSER_MOVABLE`, and `GFP_TRANSHUGE` on an madvised VMA).
    Full,
}

impl ChargeGfp {
    /// What `try_charge_memcg` does with an allocation's `gfp`: no reclaim without
    /// `__GFP_DIRECT_RECLAIM` (`gfpflags_allow_blocking`), one round with `__GFP_NORETRY`.
    pub fn of(gfp: Gfp) -> ChargeGfp {
        match gfp {
            Gfp { direct_reclaim: false, .. } => ChargeGfp::NoReclaim,
            Gfp { noretry: true, .. } => ChargeGfp::NoRetry,
            _ => ChargeGfp::Full,
        }
    }
}

/// The run's memcg (`struct mem_cgroup`'s `memory` page counter and the events the model keeps).
#[derive(Clone, Debug, Default)]
pub struct MemCgroup {
    /// `memory.max` in pages; `None`: no limit (the root).
    pub max: Option<u64>,
    /// `memory.current` in pages: folios charged and not yet freed.
    pub usage: u64,
    /// The largest usage (`memory.peak`).
    pub peak: u64,
    /// `memory.events` max: a charge hit the limit.
    pub events_max: u64,
    /// `memory.events` oom_kill: a charge the kernel would answer with an OOM kill.
    pub oom_kill: u64,
    /// Charges that failed (fallback or OOM).
    pub charge_failed: u64,
}

impl MemCgroup {
    /// `mem_cgroup_margin`.
    pub fn margin(&self) -> u64 {
        match self.max {
            Some(m) => m.saturating_sub(self.usage),
            None => u64::MAX,
        }
    }
}

/// Why a charge failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChargeFail {
    /// ENOMEM back to the caller: a large folio falls back.
    NoMem,
    /// `mem_cgroup_oom` would kill: the fault returns VM_FAULT_OOM.
    Oom,
}

impl Kernel {
    /// The run's memcg.
    pub fn memcg(&self) -> &MemCgroup {
        &self.memcg
    }

    /// `try_charge_memcg` of `2^order` pages with `gfp`.
    pub(crate) fn try_charge_memcg(&mut self, order: Order, gfp: Gfp) -> Result<(), ChargeFail> {
        let gfp = ChargeGfp::of(gfp);
        let nr = order.nr_pages() as u64;
        if self.memcg.margin() >= nr {
            self.charge(nr);
            return Ok(());
        }
        self.memcg.events_max += 1;
        if gfp == ChargeGfp::NoReclaim {
            return self.charge_failed(ChargeFail::NoMem);
        }
        let mut retries = MAX_RECLAIM_RETRIES;
        loop {
            let reclaimed = self.try_to_free_mem_cgroup_pages(nr);
            if self.memcg.margin() >= nr {
                self.charge(nr);
                return Ok(());
            }
            if gfp == ChargeGfp::NoRetry {
                return self.charge_failed(ChargeFail::NoMem);
            }
            if reclaimed > 0 && order.0 <= PAGE_ALLOC_COSTLY_ORDER {
                continue;
            }
            if retries == 0 {
                break;
            }
            retries -= 1;
        }
        // mem_cgroup_oom: OOM_SKIPPED for a costly order, else the OOM killer. The model stops
        // there: the killer's victim is the run itself (its only mms).
        if order.0 > PAGE_ALLOC_COSTLY_ORDER {
            return self.charge_failed(ChargeFail::NoMem);
        }
        self.memcg.oom_kill += 1;
        self.charge_failed(ChargeFail::Oom)
    }

    fn charge(&mut self, nr: u64) {
        self.memcg.usage += nr;
        self.memcg.peak = self.memcg.peak.max(self.memcg.usage);
    }

    fn charge_failed(&mut self, why: ChargeFail) -> Result<(), ChargeFail> {
        self.memcg.charge_failed += 1;
        Err(why)
    }

    /// `mem_cgroup_uncharge` of a freed folio of `order`.
    pub(crate) fn mem_cgroup_uncharge(&mut self, order: Order) {
        self.memcg.usage -= order.nr_pages() as u64;
    }

    /// The machine runs with a memcg limit or swap (`--memory-max`, `--swap`).
    pub fn under_pressure(&self) -> bool {
        self.memcg.max.is_some() || self.swap.is_some()
    }

    /// The swap device's pages and the pages in use, if there is one.
    pub fn swap_pages(&self) -> Option<(u64, u64)> {
        self.swap.as_ref().map(|d| (d.pages(), d.inuse))
    }

    /// A memcg OOM kill ended the run: what the kernel's report would say, or `None`.
    pub fn memcg_oom_report(&self) -> Option<String> {
        if self.memcg.oom_kill == 0 {
            return None;
        }
        let mib = |p: u64| p * mm_types::PAGE_SIZE >> 20;
        let swap = match &self.swap {
            Some(d) => format!("swap {} of {} MiB in use", mib(d.inuse), mib(d.pages())),
            None => "no swap".into(),
        };
        Some(format!(
            "memcg OOM: the kernel would OOM-kill the process (memory.max {} MiB, usage {} MiB, {swap}, reclaim freed nothing more in {} retries); raise --memory-max or --swap",
            mib(self.memcg.max.unwrap_or(0)),
            mib(self.memcg.usage),
            MAX_RECLAIM_RETRIES
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page_alloc::vma_thp_gfp_mask;
    use thp_abi::settings::Defrag;

    #[test]
    fn thp_gfp_follows_defrag_and_madvise() {
        let charge = |d, madvised| ChargeGfp::of(vma_thp_gfp_mask(d, madvised));
        assert_eq!(charge(Defrag::Madvise, false), ChargeGfp::NoReclaim);
        assert_eq!(charge(Defrag::Always, false), ChargeGfp::NoRetry);
        assert_eq!(charge(Defrag::Never, false), ChargeGfp::NoReclaim);
        assert_eq!(charge(Defrag::DeferMadvise, false), ChargeGfp::NoReclaim);
        assert_eq!(charge(Defrag::Madvise, true), ChargeGfp::Full);
        assert_eq!(charge(Defrag::Defer, true), ChargeGfp::NoReclaim);
        assert_eq!(charge(Defrag::Always, true), ChargeGfp::Full);
        assert_eq!(charge(Defrag::DeferMadvise, true), ChargeGfp::Full);
        assert_eq!(ChargeGfp::of(Gfp::HIGHUSER_MOVABLE), ChargeGfp::Full);
        assert_eq!(ChargeGfp::of(Gfp::TRANSHUGE_LIGHT), ChargeGfp::NoReclaim);
    }
}
