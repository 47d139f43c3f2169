//! The contiguous page hint in the fault path (model-only: Bamvor Zhang's LSF/MM 2017 proposal,
//! the chunk table and its states in `crates/policy/src/contig_hint.rs`).
//!
//! Where it hooks into 6.18's code: `do_anonymous_page` (mm/memory.c), when THP declined and
//! an order-0 page is due (`alloc_anon_folio`'s last resort), asks [`Kernel::alloc_anon_base`];
//! a chunk is allocated like `alloc_pages(GFP_NOWAIT, 4)` then `split_page` (mm/page_alloc.c),
//! its 15 other pages kept aside, unmapped, charged, off the LRU (compaction cannot move them,
//! as `isolate_migratepages_block` skips a page off the LRU). A chunk splits wherever the model
//! calls `flush_tlb_range` over it (tlbflush.rs): zap (munmap, MADV_DONTNEED), mprotect
//! (`change_protection`), mremap (`move_ptes`), COW (`wp_page_copy`), swap-out (reclaim),
//! migration (compaction), MADV_FREE and collapse; not at fork, whose write-protection keeps a
//! contiguous block whole (arch/arm64/mm/contpte.c: `contpte_wrprotect_ptes`). At exit
//! (`exit_mmap`) chunks are dropped, not split. A completed chunk's 16 PTEs are one contpte
//! block for the TLB model (`Kernel::translation`), although its pages are 16 order-0 folios.
//!
//! A read fault still maps the zero page (the hint is for write faults); a chunk whose last
//! pages a read mapped to the zero page cannot be completed and is split at its fill-th fault.

use mm_types::{Order, Pfn, Vaddr, PAGE_SIZE};
use policy::contig_hint::{ChunkState, ContigChunks, ContigCounters, HintFault, CHUNK_PAGES, CHUNK_SIZE};
use thp_abi::version::HintGfp;

use crate::page_alloc::{pg, Gfp};
use crate::pgtable::{mk_pte, PTE_DIRTY, PTE_WRITE};
use crate::vma::{vm, Vma};
use crate::Kernel;

/// The chunk table the policy asks for, if any.
pub(crate) fn state_for(policy: &dyn policy::ThpPolicy) -> Option<Box<ContigChunks>> {
    policy.contig_hint().map(|h| Box::new(ContigChunks::new(h)))
}

impl Kernel {
    /// The order-0 page of an anonymous write fault that THP declined: from a chunk of the
    /// contiguous page hint when the policy has it, else `alloc_folio` as 6.18.
    #[inline]
    pub(crate) fn alloc_anon_base(&mut self, vma: &Vma, va: Vaddr, idx: u32) -> Option<Pfn> {
        if self.contig.is_some() {
            if let Some(p) = self.contig_fault(vma, va, idx) {
                return Some(p);
            }
        }
        self.alloc_folio(Order::BASE, true)
    }

    /// A fault in a filling chunk maps from it; outside any chunk, a new chunk is tried.
    fn contig_fault(&mut self, vma: &Vma, va: Vaddr, idx: u32) -> Option<Pfn> {
        let mm = self.mm.id.0;
        let c = self.contig.as_ref()?;
        let base = va.0 & !(CHUNK_SIZE - 1);
        let first = Vaddr(base).pte_index();
        match c.get(mm, va.0).map(|c| c.state) {
            Some(ChunkState::Filling { faults, mapped }) => {
                let completes = faults + 1 >= c.hint.fill;
                let clear = (0..CHUNK_PAGES as usize).all(|i| mapped & (1 << i) != 0 || self.mm.pt.ptes_none(idx, first + i..first + i + 1));
                if completes && !clear {
                    // A page of the chunk got the zero page: no contiguous block is possible.
                    self.contig_split_range(base, base + CHUNK_SIZE, true);
                    return None;
                }
                let f = self.contig.as_mut()?.fault(mm, va.0)?;
                Some(self.contig_map(vma, base, idx, f))
            }
            Some(ChunkState::Completed) => None,
            None => self.contig_alloc(vma, va, idx),
        }
    }

    /// A new chunk for the fault at `va`: the whole 64 KiB inside the VMA with every PTE none.
    fn contig_alloc(&mut self, vma: &Vma, va: Vaddr, idx: u32) -> Option<Pfn> {
        let base = va.0 & !(CHUNK_SIZE - 1);
        let first = Vaddr(base).pte_index();
        if base < vma.start || base + CHUNK_SIZE > vma.end || vma.flags & vm::UFFD_ARMED != 0 {
            return None;
        }
        if !self.mm.pt.ptes_none(idx, first..first + CHUNK_PAGES as usize) || self.swap_in_range(base, base + CHUNK_SIZE) {
            return None;
        }
        let hint = self.contig.as_ref()?.hint;
        let gfp = match hint.gfp {
            // GFP_NOWAIT: __GFP_KSWAPD_RECLAIM only.
            HintGfp::NoWait => Gfp { kswapd_reclaim: true, ..Gfp::TRANSHUGE_LIGHT },
            HintGfp::Reclaim => Gfp::HIGHUSER_MOVABLE,
        };
        let Some(pfn) = self.alloc_pages_gfp(Order(4), gfp) else {
            self.contig.as_mut()?.counters.alloc_failed += 1;
            return None;
        };
        // split_page: 16 order-0 pages, kept aside (off the LRU) until mapped.
        for i in 0..CHUNK_PAGES {
            self.prep_folio(pfn.add(i), Order::BASE, pg::RESERVED);
        }
        let mut charged = 0;
        while charged < CHUNK_PAGES {
            if self.memcg.max.is_none() {
                self.memcg.usage += 1;
            } else if self.try_charge_memcg(Order::BASE, gfp).is_err() {
                break;
            }
            charged += 1;
        }
        if charged < CHUNK_PAGES {
            for i in 0..CHUNK_PAGES {
                if i < charged {
                    self.mem_cgroup_uncharge(Order::BASE);
                }
                self.zone.free_pages(pfn.add(i), Order::BASE);
            }
            self.contig.as_mut()?.counters.alloc_failed += 1;
            return None;
        }
        if self.swap.is_some() {
            self.wakeup_kswapd();
        }
        let f = self.contig.as_mut()?.insert(self.mm.id.0, va.0, pfn.0);
        Some(self.contig_map(vma, base, idx, f))
    }

    /// Map what a chunk's fault maps besides the faulting page, which the caller maps (as an
    /// order-0 anon page, `do_anonymous_page`'s own path): its frame is returned.
    fn contig_map(&mut self, vma: &Vma, base: u64, idx: u32, f: HintFault) -> Pfn {
        let (pfn, first, rest) = match f {
            HintFault::MapOne(p) => (p, 0, 0),
            HintFault::Fill { pfn, first, rest } => (pfn, first, rest),
        };
        let bits = if vma.flags & vm::WRITE != 0 { PTE_WRITE | PTE_DIRTY } else { 0 };
        let pte0 = Vaddr(base).pte_index();
        for i in (0..CHUNK_PAGES).filter(|i| rest & (1 << i) != 0) {
            let page = Pfn(first + i);
            self.prep_folio(page, Order::BASE, pg::ANON);
            self.mm.pt.set_pte(idx, pte0 + i as usize, mk_pte(page, bits));
            self.zone.mem_map[page.idx()].mapcount = 1;
            self.mm.stats.anon_rss_pages += 1;
            self.lru_add(page, Vaddr(base + i as u64 * PAGE_SIZE));
        }
        self.prep_folio(Pfn(pfn), Order::BASE, pg::ANON);
        Pfn(pfn)
    }

    /// Split the current mm's chunks in `[start, end)` (`count`: as splits; false: dropped at
    /// exit) and free their pages allocated but never mapped.
    pub(crate) fn contig_split_range(&mut self, start: u64, end: u64, count: bool) {
        let mm = self.mm.id.0;
        let Some(c) = self.contig.as_mut() else { return };
        if start >= end {
            return;
        }
        for (first, unmapped) in c.split_range(mm, start, end, count) {
            for i in (0..CHUNK_PAGES).filter(|i| unmapped & (1 << i) != 0) {
                self.mem_cgroup_uncharge(Order::BASE);
                self.zone.free_pages(Pfn(first + i), Order::BASE);
            }
        }
    }

    /// The contiguous page hint's counters and the chunks tracked now (filling, completed),
    /// when the policy has it.
    pub fn contig_hint_counters(&self) -> Option<(ContigCounters, (u64, u64))> {
        self.contig.as_ref().map(|c| (c.counters, c.tracked()))
    }
}

#[cfg(test)]
#[path = "contig_hint_tests.rs"]
mod tests;
