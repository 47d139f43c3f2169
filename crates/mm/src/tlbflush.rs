//! The TLB seam: a translation query for an address, and the TLB flushes the kernel would issue.
//!
//! Kernel sources (6.18): `include/asm-generic/tlb.h` and `mm/mmu_gather.c` (the mmu_gather
//! batch: `tlb_gather_mmu`, `tlb_flush_pte_range`, `tlb_finish_mmu`), `mm/pgtable-generic.c`
//! (`ptep_clear_flush`, `pmdp_invalidate`, `pmdp_collapse_flush`), `mm/mprotect.c`
//! (`change_protection` → `flush_tlb_range`), `mm/mremap.c` (`move_page_tables` →
//! `flush_tlb_range`), `mm/madvise.c` (`madvise_free_pte_range` clears young/dirty through the
//! gather).
//!
//! `flush_tlb_range` is called wherever the model changes or removes a present translation: zap
//! (munmap, MADV_DONTNEED, exit, the PTEs khugepaged copies from), PMD split, collapse, mprotect,
//! MADV_FREE, mremap, write-protect copy. When an observer is on ([`Kernel::set_tlb_observer`]) the
//! ranges are logged, merged into the previous one when they start inside or at its end, and handed out by
//! [`Kernel::take_tlb_flushes`]; a TLB model applies them before its next lookup. Off, the seam
//! costs one branch.

use mm_types::{Order, Pfn, Vaddr, PAGE_SIZE};

use crate::arch::arm64_contpte::{contpte_block_folds, CONT_PTES};
use crate::pgtable::{pte_pfn, Pmd, PTE_PRESENT, PTE_WRITE, PTE_ZERO};
use crate::Kernel;

/// How an address is mapped, as the page tables hold it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Translation {
    /// The 4 KiB frame the address maps to.
    pub pfn: u32,
    /// Mapped by a huge PMD (2 MiB); otherwise by a PTE.
    pub pmd: bool,
    /// Order of the folio the frame belongs to (0 for the shared zero page).
    pub folio_order: u8,
    /// For a PTE: log2 of the largest naturally aligned group of PTEs around the address, up to
    /// 16 entries (4), mapping consecutive frames aligned alike, inside one folio, with the same
    /// write permission. 0 for a PMD.
    pub contig_order: u8,
    /// arm64: the PTE lies in a folded contpte block (`contpte_block_folds`).
    pub contpte: bool,
    pub write: bool,
}

impl Kernel {
    /// Turns the TLB-flush log on (an empty log) or off (dropped).
    pub fn set_tlb_observer(&mut self, on: bool) {
        self.tlb_flushes = if on { Some(Vec::new()) } else { None };
    }

    /// The flushed ranges `[start, end)` logged since the last call, in order.
    pub fn take_tlb_flushes(&mut self) -> Vec<(u64, u64)> {
        match self.tlb_flushes.as_mut() {
            Some(v) => std::mem::take(v),
            None => Vec::new(),
        }
    }

    /// Whether flushes are waiting for [`Kernel::take_tlb_flushes`].
    #[inline]
    pub fn tlb_flush_pending(&self) -> bool {
        self.tlb_flushes.as_ref().is_some_and(|v| !v.is_empty())
    }

    /// `flush_tlb_range`: the translations of `[start, end)` may have changed (a contiguous
    /// page hint chunk there is split: `contig_hint`).
    #[inline]
    pub(crate) fn flush_tlb_range(&mut self, start: u64, end: u64) {
        if self.contig.is_some() {
            self.contig_split_range(start, end, true);
        }
        self.log_tlb_flush(start, end);
    }

    /// The flush of `[start, end)` for the TLB observer only (fork's write-protection, which
    /// keeps contiguous blocks whole).
    #[inline]
    pub(crate) fn log_tlb_flush(&mut self, start: u64, end: u64) {
        if let Some(log) = self.tlb_flushes.as_mut() {
            if start >= end {
                return;
            }
            if let Some(last) = log.last_mut() {
                if last.0 <= start && start <= last.1 {
                    last.1 = last.1.max(end);
                    return;
                }
            }
            log.push((start, end));
        }
    }

    fn folio_of(&self, pfn: Pfn) -> (Pfn, u32) {
        let head = self.folio_head(pfn);
        (head, self.order_of_head(head).0 as u32)
    }

    /// The unit of contiguity of the frame `pfn` mapped at `va`: its folio, or the completed
    /// contiguous page hint chunk there (16 order-0 pages that one contpte block maps).
    fn contig_unit(&self, va: u64, pfn: Pfn) -> (Pfn, u32) {
        if let Some(first) = self.contig.as_ref().and_then(|c| c.completed_at(self.mm.id.0, va)) {
            if (first..first + CONT_PTES as u32).contains(&pfn.0) {
                return (Pfn(first), 4);
            }
        }
        self.folio_of(pfn)
    }

    /// The present translation of `addr`, or `None` if it is not mapped (a read-only query: the
    /// access that precedes it sets young and dirty).
    pub fn translation(&self, addr: u64) -> Option<Translation> {
        let va = Vaddr(addr);
        let t = self.mm.pt.pmd_table_ro(va)?;
        match self.mm.pt.pmd(t, va) {
            Pmd::Huge { pfn, write, .. } => Some(Translation {
                pfn: pfn.0 + va.pte_index() as u32,
                pmd: true,
                folio_order: Order::PMD.0,
                contig_order: 0,
                contpte: false,
                write,
            }),
            Pmd::HugeZero => None,
            Pmd::Table(idx) => {
                let i = va.pte_index();
                let e = self.mm.pt.pte(idx, i);
                if e & PTE_PRESENT == 0 {
                    return None;
                }
                if e & PTE_ZERO != 0 {
                    return Some(Translation { pfn: u32::MAX, pmd: false, folio_order: 0, contig_order: 0, contpte: false, write: false });
                }
                let pfn = pte_pfn(e);
                let folio = self.folio_of(pfn);
                let (head, order) = if self.contig.is_some() { self.contig_unit(addr, pfn) } else { folio };
                let folio_order = folio.1 as u8;
                // Grow the aligned group 2, 4, 8, 16 entries while it stays consistent.
                let mut k = 0u8;
                while k < 4 && (k as u32) < order {
                    let n = 2usize << k;
                    let first = i & !(n - 1);
                    let pfn0 = pfn.0 as i64 - (i - first) as i64;
                    if pfn0 < head.0 as i64 || pfn0 as u64 % n as u64 != 0 || pfn0 as u64 + n as u64 > head.0 as u64 + (1u64 << order) {
                        break;
                    }
                    let ok = (first..first + n).all(|j| {
                        let f = self.mm.pt.pte(idx, j);
                        f & PTE_PRESENT != 0 && f & PTE_ZERO == 0 && pte_pfn(f).0 as i64 == pfn0 + (j - first) as i64 && (f & PTE_WRITE) == (e & PTE_WRITE)
                    });
                    if !ok {
                        break;
                    }
                    k += 1;
                }
                let contpte = k as usize >= 4 && {
                    let first = i & !(CONT_PTES - 1);
                    let block: Vec<_> = (first..first + CONT_PTES).map(|j| self.mm.pt.pte(idx, j)).collect();
                    contpte_block_folds(&block, |p| self.contig_unit(addr, p))
                };
                Some(Translation { pfn: pfn.0, pmd: false, folio_order, contig_order: k, contpte, write: e & PTE_WRITE != 0 })
            }
            Pmd::None => None,
        }
    }
}

const _: () = assert!(PAGE_SIZE == 4096);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::madvise::Madvise;
    use crate::mmap::MmapPlacement;
    use crate::vma::vm;
    use crate::BootParams;
    use thp_abi::ThpSettings;

    fn kernel(assign: &[&str]) -> Kernel {
        let mut s = ThpSettings::default();
        for a in assign {
            s.apply_assignment(a).unwrap();
        }
        let mut k = Kernel::boot(&BootParams { mem_bytes: 256 << 20, ..Default::default() }, &s);
        k.set_tlb_observer(true);
        k
    }

    #[test]
    fn order0_pages_have_no_contiguity() {
        let mut k = kernel(&["enabled=never"]);
        let a = k.do_mmap(1 << 20, vm::READ | vm::WRITE, MmapPlacement::Kernel).unwrap();
        for p in 0..16 {
            k.access(a + p * 4096, true);
        }
        let t = k.translation(a + 5 * 4096).unwrap();
        assert_eq!((t.pmd, t.folio_order, t.contig_order, t.contpte), (false, 0, 0, false));
        assert_eq!(k.translation(a + 20 * 4096), None);
    }

    #[test]
    fn a_64k_folio_is_one_contpte_block_until_mprotect_splits_its_attributes() {
        // 64 KiB mTHP always: the first write maps an aligned 64 KiB folio with one set_ptes: all
        // 16 PTEs consistent, 64 KiB-aligned in VA (the region is 2 MiB-aligned) and PFN (a folio
        // is naturally aligned): contig_order 4, folded.
        let mut k = kernel(&["enabled=never", "hugepages-64kB/enabled=always"]);
        let a = k.do_mmap(2 << 20, vm::READ | vm::WRITE, MmapPlacement::Kernel).unwrap();
        k.access(a, true);
        let t = k.translation(a + 0x3000).unwrap();
        assert_eq!((t.folio_order, t.contig_order, t.contpte), (4, 4, true));
        assert!(k.take_tlb_flushes().is_empty(), "a fault into none PTEs flushes nothing");
        // mprotect of one page read-only: that page's attributes differ, the block unfolds and the
        // group around page 3 shrinks to the aligned 4 pages 0..3 (page 2 is in it, page 7 alone).
        k.do_mprotect(a + 0x7000, 0x1000, vm::READ).unwrap();
        assert_eq!(k.take_tlb_flushes(), vec![(a + 0x7000, a + 0x8000)]);
        let t = k.translation(a + 0x3000).unwrap();
        assert_eq!((t.contig_order, t.contpte), (2, false));
        let t = k.translation(a + 0x7000).unwrap();
        assert_eq!((t.contig_order, t.write), (0, false));
    }

    #[test]
    fn pmd_translation_and_flushes_of_split_and_zap() {
        let mut k = kernel(&["enabled=always"]);
        let a = k.do_mmap(4 << 20, vm::READ | vm::WRITE, MmapPlacement::Kernel).unwrap();
        k.access(a + 0x1234, false);
        k.access(a + 0x1234, true);
        let t = k.translation(a + 0x5000).unwrap();
        assert!(t.pmd && t.folio_order == 9);
        // MADV_DONTNEED of 8 KiB inside the PMD: split (flush the 2 MiB), then zap (8 KiB, inside it).
        k.do_madvise(a + 0x10000, 0x2000, Madvise::Dontneed).unwrap();
        assert_eq!(k.take_tlb_flushes(), vec![(a, a + (2 << 20))]);
        let t = k.translation(a + 0x5000).unwrap();
        assert_eq!((t.pmd, t.folio_order, t.contig_order), (false, 9, 4));
        assert_eq!(k.translation(a + 0x10000), None);
        // munmap of everything: one range.
        k.do_munmap(a, 4 << 20).unwrap();
        assert_eq!(k.take_tlb_flushes(), vec![(a, a + (4 << 20))]);
    }
}
