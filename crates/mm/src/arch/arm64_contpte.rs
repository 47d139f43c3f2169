//! arm64 contiguous PTEs (contpte) as Linux 6.18 sets them for user mappings.
//!
//! Kernel sources (6.18): `arch/arm64/mm/contpte.c` (`contpte_set_ptes`, `contpte_try_fold` /
//! `__contpte_try_fold`, `contpte_convert`, `__contpte_try_unfold`),
//! `arch/arm64/include/asm/pgtable.h` (`contpte_try_fold`), `arch/arm64/include/asm/pgtable-hwdef.h`
//! (`CONT_PTES` = 1 << CONFIG_ARM64_CONT_PTE_SHIFT = 16 with 4 KiB pages, arch/arm64/Kconfig).
//!
//! The rule: a block of `CONT_PTES` entries whose virtual start and physical start are both
//! aligned to 64 KiB is written with the contiguous bit when `set_ptes` maps the whole block at
//! once (fold at creation), or folded when a single-entry write completes it at its last entry;
//! the fold requires the 16 entries to be valid, not special, inside one folio, mapping
//! consecutive PFNs with the same attributes once young and dirty are ignored. Any single-entry
//! change inside a folded block unfolds it first, and `contpte_convert` flushes the whole block.
//!
//! The model keeps no contiguous bit: it answers whether a block is folded from the entries,
//! which is the state 6.18 reaches when PTEs are written in address order — every path of the
//! model maps a folio or a split PMD with one batch (`set_ptes` with nr > 1), and a block whose
//! entries are not all consistent is unfolded. (A block made consistent by single writes that do
//! not end at its last entry stays unfolded in the kernel and counts as folded here.)
//! The model's PTE chunks hold 16 entries, so a contpte block is exactly one chunk.
//!
//! Other granules (`mm_types::PageGeometry::cont_ptes`: 128 PTEs = 2 MiB with 16 KiB pages, 32
//! PTEs = 2 MiB with 64 KiB, arch/arm64/Kconfig ARM64_CONT_PTE_SHIFT): the fold rule is the same
//! over a block of that many entries; [`contpte_block_folds`] takes the block's length as
//! CONT_PTES, and [`contpte_folded_blocks`] counts the folded blocks of a table. The 4 KiB fault
//! path passes 16 entries, as before (model-only for 16 KiB and 64 KiB: this machine is x86).

use mm_types::Pfn;

use crate::pgtable::{pte_pfn, Pte, PTE_PRESENT, PTE_WRITE, PTE_ZERO};

/// `CONT_PTES` with 4 KiB pages.
pub const CONT_PTES: usize = 16;

/// Whether the entries `ptes` of an aligned block (CONT_PTES of them: 16 with 4 KiB pages, the
/// granule's `cont_ptes` otherwise) would be folded by `__contpte_try_fold`: all valid and not
/// special (the zero page), PFNs consecutive from a CONT_PTES-aligned PFN, the same write
/// permission, and one folio (`folio_of(pfn)` gives the folio's head and order) covering the
/// block.
pub fn contpte_block_folds(ptes: &[Pte], folio_of: impl Fn(Pfn) -> (Pfn, u32)) -> bool {
    let cont_ptes = ptes.len();
    debug_assert!(cont_ptes.is_power_of_two() && cont_ptes >= CONT_PTES, "a contpte block of {cont_ptes} entries");
    let first = ptes[0];
    if first & PTE_PRESENT == 0 || first & PTE_ZERO != 0 {
        return false;
    }
    let pfn = pte_pfn(first);
    if pfn.0 as usize % cont_ptes != 0 {
        return false;
    }
    let (head, order) = folio_of(pfn);
    if head.0 > pfn.0 || head.0 as u64 + (1u64 << order) < pfn.0 as u64 + cont_ptes as u64 {
        return false;
    }
    ptes.iter().enumerate().all(|(i, &e)| {
        e & PTE_PRESENT != 0 && e & PTE_ZERO == 0 && pte_pfn(e).0 == pfn.0 + i as u32 && (e & PTE_WRITE) == (first & PTE_WRITE)
    })
}

/// The folded contpte blocks of a page table's entries `ptes` (a whole table, or a
/// `cont_ptes`-aligned part of one), block by block as [`contpte_block_folds`] decides.
pub fn contpte_folded_blocks(ptes: &[Pte], cont_ptes: usize, folio_of: impl Fn(Pfn) -> (Pfn, u32)) -> usize {
    debug_assert_eq!(ptes.len() % cont_ptes, 0);
    ptes.chunks_exact(cont_ptes).filter(|b| contpte_block_folds(b, &folio_of)).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pgtable::{mk_pte, PTE_DIRTY, PTE_YOUNG};

    fn block(pfn0: u32, f: impl Fn(usize) -> Pte) -> Vec<Pte> {
        (0..16).map(|i| mk_pte(Pfn(pfn0 + i as u32), f(i))).collect()
    }

    #[test]
    fn folds_aligned_consistent_block_of_one_folio() {
        // A 64 KiB folio at PFN 0x100 (order 4), mapped in full: folds, whatever young/dirty say.
        let b = block(0x100, |i| PTE_WRITE | if i % 2 == 0 { PTE_YOUNG } else { PTE_DIRTY });
        assert!(contpte_block_folds(&b, |_| (Pfn(0x100), 4)));
        // Same entries, but the frames are 16 order-0 folios: no fold (one folio must cover it).
        assert!(!contpte_block_folds(&b, |p| (p, 0)));
        // A 32 KiB folio cannot cover 64 KiB.
        assert!(!contpte_block_folds(&b, |p| (Pfn(p.0 & !7), 3)));
    }

    #[test]
    fn refuses_misaligned_or_mixed_blocks() {
        // PFNs start at 0x108: physically misaligned.
        assert!(!contpte_block_folds(&block(0x108, |_| PTE_WRITE), |_| (Pfn(0x100), 5)));
        // One entry read-only (an mprotect of one page): attributes differ, unfolded.
        assert!(!contpte_block_folds(&block(0x100, |i| if i == 7 { 0 } else { PTE_WRITE }), |_| (Pfn(0x100), 4)));
        // One entry none (MADV_DONTNEED of one page).
        let mut b = block(0x100, |_| PTE_WRITE);
        b[15] = 0;
        assert!(!contpte_block_folds(&b, |_| (Pfn(0x100), 4)));
    }

    /// A PTE table of `geo` mapped entry by entry with consecutive frames from `pfn0`, in
    /// folios of `order` (naturally aligned), all writable.
    fn table(geo: mm_types::PageGeometry, pfn0: u32) -> Vec<Pte> {
        (0..geo.ptrs_per_table() as u32).map(|i| mk_pte(Pfn(pfn0 + i), PTE_WRITE)).collect()
    }

    fn folded(geo: mm_types::PageGeometry, order: u32) -> usize {
        let t = table(geo, 1 << 16);
        contpte_folded_blocks(&t, geo.cont_ptes() as usize, |p| (Pfn(p.0 & !((1 << order) - 1)), order))
    }

    #[test]
    fn folded_blocks_per_granule() {
        use mm_types::{Granule, PageGeometry};
        // 4 KiB: a table is 512 entries (2 MiB); 64 KiB folios (order 4) fill 32 blocks of 16;
        // 32 KiB folios (order 3) cover half a block: none folds.
        assert_eq!(folded(PageGeometry::X86_4K, 4), 32);
        assert_eq!(folded(PageGeometry::X86_4K, 3), 0);
        // 16 KiB: 2048 entries (32 MiB); a block is 128 PTEs = 2 MiB: 2 MiB folios (order 7)
        // fold 2048 / 128 = 16 blocks, 1 MiB folios (order 6) none; one 32 MiB folio (order
        // 11, mapped by PTEs as after a PMD split) folds all 16.
        let k16 = Granule::K16.geometry();
        assert_eq!((folded(k16, 7), folded(k16, 6), folded(k16, 11)), (16, 0, 16));
        // 64 KiB: 8192 entries (512 MiB); a block is 32 PTEs = 2 MiB: order-5 folios fold
        // 8192 / 32 = 256 blocks, order-4 (1 MiB) none.
        let k64 = Granule::K64.geometry();
        assert_eq!((folded(k64, 5), folded(k64, 4)), (256, 0));
        // 64 KiB with one PTE made read-only (an mprotect of one page) in the third block:
        // that block unfolds, 255 stay.
        let mut t = table(k64, 1 << 16);
        t[2 * 32 + 7] &= !PTE_WRITE;
        assert_eq!(contpte_folded_blocks(&t, 32, |p| (Pfn(p.0 & !31), 5)), 255);
    }
}
