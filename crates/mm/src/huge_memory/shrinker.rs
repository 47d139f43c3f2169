//! The THP shrinker: `deferred_split_scan` over the deferred split queue, splitting partially
//! mapped folios and, with `shrink_underused`, fully mapped THPs whose zero-filled pages exceed
//! `khugepaged/max_ptes_none` (`thp_underused`), the zero-filled pages remapped to the shared
//! zero page.
//!
//! Kernel sources (6.18): `mm/huge_memory.c` (`deferred_split_count`, `deferred_split_scan`,
//! `thp_underused`, `__folio_split`: `unmap_folio` splits every PMD mapping frozen, and
//! `remap_page` with `RMP_USE_SHARED_ZEROPAGE` for an anon folio), `mm/migrate.c`
//! (`try_to_map_unused_to_zeropage`: a zero-filled page of a split anon folio, not mlocked and
//! not in a VM_LOCKED VMA, is mapped by the shared zero page instead, and freed).
//!
//! Model: a page is zero-filled when the workload never accessed it (`pg::TOUCHED` clear). The
//! kernel compares the contents (`pages_identical` with ZERO_PAGE), so a page that was only read
//! is zero-filled there and not here: the model errs towards keeping pages. A split never fails
//! (no pin outlives a step in the model, nor does a folio sit in the swap cache), so
//! `thp_split_page_failed` stays 0. `folio_test_mlocked` is read as "mapped in a VM_LOCKED
//! VMA". Who runs the shrinker (kswapd, direct reclaim, or `drop_caches`'s `drop_slab`) is the
//! caller's: [`Kernel::deferred_split_scan`] is one call of the shrinker's `scan_objects`.

use std::collections::HashSet;

use mm_types::{Pfn, PAGE_SIZE};
use thp_abi::VmEvent;

use crate::page_alloc::pg;
use crate::pgtable::{PTE_YOUNG, ZERO_PTE};
use crate::rmap::{Mapping, Where};
use crate::vma::vm;
use crate::Kernel;

/// What one `deferred_split_scan` call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SplitScan {
    /// Folios taken off the queue to look at (at most `nr_to_scan`).
    pub scanned: u64,
    /// Folios split (the shrinker's return value).
    pub split: u64,
    /// Of those, split because `thp_underused` (`thp_underused_split_page`).
    pub underused: u64,
    /// Folios neither partially mapped nor underused, taken off the queue (`removed`).
    pub removed: u64,
    /// Zero-filled pages the splits mapped to the shared zero page and freed.
    pub zero_remapped: u64,
}

impl Kernel {
    /// `deferred_split_count`: folios on the deferred split queue.
    pub fn deferred_split_count(&self) -> u64 {
        self.deferred_split_queue().len() as u64
    }

    /// `thp_underused`: more zero-filled pages than `max_ptes_none`; never with 511 (the
    /// default), and the scan stops once `512 - max_ptes_none` pages hold data.
    pub(crate) fn thp_underused(&self, folio: Pfn) -> bool {
        let max_ptes_none = self.settings.khugepaged.max_ptes_none;
        if max_ptes_none == 511 {
            return false;
        }
        let (mut zero, mut filled) = (0u32, 0u32);
        for i in 0..self.order_of_head(folio).nr_pages() {
            if self.zone.mem_map[folio.add(i).idx()].flags & pg::TOUCHED == 0 {
                zero += 1;
                if zero > max_ptes_none {
                    return true;
                }
            } else {
                filled += 1;
                if filled >= 512 - max_ptes_none {
                    return false;
                }
            }
        }
        false
    }

    /// `unmap_folio` before a split: every PMD mapping of the `chosen` folios, in whichever mm
    /// (`maps`: an rmap walk that found them), is split, frozen (no deferred split accounting).
    pub(crate) fn unmap_folio(&mut self, maps: &[Mapping], chosen: &HashSet<Pfn>) {
        let current = self.current_mm();
        for m in maps.iter().filter(|m| chosen.contains(&m.pfn)) {
            if let Where::Pmd { table, haddr } = m.at {
                self.switch_mm(m.mm);
                self.split_huge_pmd(table, haddr);
            }
        }
        self.switch_mm(current);
    }

    /// `deferred_split_scan` with `sc->nr_to_scan = nr_to_scan`: the first `nr_to_scan` folios
    /// of the queue, oldest first. A partially mapped folio is split; one fully mapped is split
    /// when underused (not when mlocked), and otherwise taken off the queue.
    pub fn deferred_split_scan(&mut self, nr_to_scan: u64) -> SplitScan {
        let batch: Vec<Pfn> = self.deferred_split_queue().into_iter().take(nr_to_scan as usize).collect();
        let mut r = SplitScan { scanned: batch.len() as u64, ..Default::default() };
        let heads: HashSet<Pfn> = batch.iter().copied().collect();
        let maps = self.rmap_walk(|p| heads.contains(&self.folio_head(p)));
        let mut to_split = Vec::new();
        for folio in batch {
            let partially = self.zone.mem_map[folio.idx()].flags & pg::PARTIALLY_MAPPED != 0;
            let underused = !partially && !self.mapped_locked(&maps, folio) && self.thp_underused(folio);
            if partially || underused {
                to_split.push((folio, underused));
            } else {
                self.unqueue_deferred_split(folio);
                r.removed += 1;
            }
        }
        let chosen: HashSet<Pfn> = to_split.iter().map(|(f, _)| *f).collect();
        self.unmap_folio(&maps, &chosen);
        let mut pages = HashSet::new();
        for &(folio, underused) in &to_split {
            pages.extend((0..self.order_of_head(folio).nr_pages()).map(|i| folio.add(i)));
            self.split_folio(folio, true);
            r.split += 1;
            if underused {
                r.underused += 1;
                self.counters.count(VmEvent::ThpUnderusedSplitPage);
            }
        }
        r.zero_remapped = self.remap_zero_filled(&pages);
        r
    }

    /// Whether a mapping of the folio at `head` in `maps` is in a VM_LOCKED VMA.
    fn mapped_locked(&self, maps: &[Mapping], head: Pfn) -> bool {
        maps.iter().filter(|m| self.folio_head(m.pfn) == head || m.pfn == head).any(|m| {
            let va = match m.at {
                Where::Pmd { haddr, .. } => haddr,
                Where::Pte { va, .. } => va,
            };
            self.mm_ref(m.mm).vmas.find(va.0).is_some_and(|v| v.flags & vm::LOCKED != 0)
        })
    }

    /// `remap_page` with `RMP_USE_SHARED_ZEROPAGE` after the split: each PTE mapping a
    /// zero-filled page of `pages` (now order-0 anon folios) outside VM_LOCKED VMAs maps the
    /// shared zero page instead (`try_to_map_unused_to_zeropage`, MM_ANONPAGES drops); a page
    /// nothing maps any more is freed. Returns the PTEs remapped.
    fn remap_zero_filled(&mut self, pages: &HashSet<Pfn>) -> u64 {
        let maps = self.rmap_walk(|p| pages.contains(&p));
        let current = self.current_mm();
        let mut n = 0;
        for m in maps {
            let Where::Pte { table, index, va } = m.at else { continue };
            let page = self.zone.mem_map[m.pfn.idx()];
            if page.flags & pg::TOUCHED != 0 || page.flags & pg::ANON == 0 || page.order != 0 {
                continue;
            }
            self.switch_mm(m.mm);
            if self.mm.vmas.find(va.0).is_none_or(|v| v.flags & vm::LOCKED != 0) {
                continue;
            }
            self.flush_tlb_range(va.0, va.0 + PAGE_SIZE);
            self.mm.pt.set_pte(table, index, ZERO_PTE | PTE_YOUNG);
            self.mm.stats.anon_rss_pages -= 1;
            n += 1;
            let p = &mut self.zone.mem_map[m.pfn.idx()];
            p.mapcount -= 1;
            if p.mapcount == 0 {
                self.free_folio(m.pfn);
            }
        }
        self.switch_mm(current);
        n
    }
}

#[cfg(test)]
#[path = "shrinker_tests.rs"]
mod tests;
