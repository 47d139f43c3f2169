//! The reverse map for the shrinkers and compaction: which page-table entries, in which mm, map
//! a set of frames.
//!
//! Kernel sources (6.18): `mm/rmap.c` (`rmap_walk`, `rmap_walk_anon`: the anon_vma interval tree
//! gives the VMAs that may map a folio, `page_vma_mapped_walk` the entries). The model keeps no
//! anon_vma chains: it walks the page tables of every mm once per batch of folios, which finds
//! the same entries (a PMD mapping a folio, the PTEs mapping its pages). Used by
//! `deferred_split_scan` (huge_memory.rs) and `compact_zone` (compaction.rs), never on the
//! fault path.

use mm_types::{Pfn, Vaddr, PMD_SIZE, PUD_SHIFT};

use crate::MmId;
use crate::pgtable::{pte_pfn, Pmd, PTE_ZERO};
use crate::Kernel;

/// Where a frame is mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Where {
    /// A huge PMD in PMD table `table` maps the folio whose head is the frame, at `haddr`.
    Pmd { table: u32, haddr: Vaddr },
    /// Entry `index` of PTE table `table` maps the frame, at `va`.
    Pte { table: u32, index: usize, va: Vaddr },
}

/// One mapping of a frame: the mm, the frame, the entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub mm: MmId,
    pub pfn: Pfn,
    pub at: Where,
}

impl Kernel {
    /// Every mapping of a frame `wanted` accepts, in every live mm (`rmap_walk` over all of
    /// them), in mm order then address order. The shared zero page is never a frame.
    pub(crate) fn rmap_walk(&self, wanted: impl Fn(Pfn) -> bool) -> Vec<Mapping> {
        let mut out = Vec::new();
        for id in self.mm_ids() {
            let mm = self.mm_ref(id);
            if mm.exited {
                continue;
            }
            for (key, t) in mm.pt.puds() {
                for j in 0..512u64 {
                    let haddr = Vaddr((key << PUD_SHIFT) + j * PMD_SIZE);
                    match mm.pt.pmd(t, haddr) {
                        Pmd::Huge { pfn, .. } if wanted(pfn) => out.push(Mapping { mm: id, pfn, at: Where::Pmd { table: t, haddr } }),
                        Pmd::Table(idx) => mm.pt.for_each_present(idx, 0..512, |i, pte| {
                            let pfn = pte_pfn(pte);
                            if pte & PTE_ZERO == 0 && wanted(pfn) {
                                let va = Vaddr(haddr.0 + i as u64 * mm_types::PAGE_SIZE);
                                out.push(Mapping { mm: id, pfn, at: Where::Pte { table: idx, index: i, va } });
                            }
                        }),
                        _ => {}
                    }
                }
            }
        }
        out
    }
}
