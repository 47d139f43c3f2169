//! Base page sizes (translation granules) per CPU preset, and the TLB entry each translation
//! size of a granule takes in each level, with its reach (entries × entry size).
//!
//! Granules a core implements: ID_AA64MMFR0_EL1 TGran4 / TGran16 / TGran64 as the TRMs give
//! them: Cortex-A53 (DDI 0500D table 4-51: TGran16 0x0, "16KB granule is not supported"), Cortex-A76
//! for Neoverse N1 (100798 B2.58: TGran16 0x1, supported; 4 KiB and 64 KiB supported on both).
//! Cortex-A57: 4 KiB and 64 KiB, 16 KiB ASSUMED unsupported as on the A53 (same ARMv8.0
//! generation; the A57 TRM's register value was not retrieved). x86-64: 4 KiB base pages only.
//! What a granule's translations are (base page, contpte block, PMD block, contpmd block) is
//! mm's business (`mm_types::PageGeometry`); this module takes their shifts and knows nothing
//! of mm. A translation larger than every size an array holds is cached in pieces of the
//! largest size it holds below it (as `Tlb` smashes them). PTE coalescing (N1's 16 KiB L2
//! entries of four 4 KiB PTEs) is left out of the table: it is known for 4 KiB pages only.

use crate::presets::{CpuPreset, Isa, StructureSpec};

/// The base page shifts `p` implements: 12 (4 KiB), 14 (16 KiB), 16 (64 KiB).
pub fn granules(p: &CpuPreset) -> &'static [u8] {
    match (p.isa, p.name) {
        (Isa::X86_64, _) => &[12],
        (Isa::Arm64, "neoverse-n1") => &[12, 14, 16],
        (Isa::Arm64, _) => &[12, 16],
    }
}

/// The entry shift array `s` caches a translation of `2^shift` bytes in: the largest size it
/// holds not above `shift`; `None` when it holds nothing that small.
pub fn entry_shift(s: &StructureSpec, shift: u8) -> Option<u8> {
    s.sizes.iter().copied().filter(|&e| e <= shift).max()
}

/// One translation size against one preset: the entry it takes and the reach of a level full
/// of such entries (the array of that level holding the largest entry for it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryRow {
    /// The translation's shift (16 for a 64 KiB base page, 21 for a 2 MiB contpte block ...).
    pub translation: u8,
    /// Entry shift and reach in bytes, L1 then L2.
    pub l1: Option<(u8, u64)>,
    pub l2: Option<(u8, u64)>,
}

fn level(structures: &[StructureSpec], shift: u8) -> Option<(u8, u64)> {
    structures.iter().filter_map(|s| entry_shift(s, shift).map(|e| (e, s.geometry.entries as u64 * (1u64 << e)))).max()
}

/// The rows of `translations` (shifts, such as a granule's base, contpte, PMD and contpmd
/// sizes) for preset `p`.
pub fn entries(p: &CpuPreset, translations: &[u8]) -> Vec<EntryRow> {
    translations.iter().map(|&t| EntryRow { translation: t, l1: level(p.l1, t), l2: level(p.l2, t) }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets::{CORTEX_A53, CORTEX_A57, NEOVERSE_N1, ZEN4};

    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    #[test]
    fn granules_by_core() {
        assert_eq!(granules(&ZEN4), [12]);
        assert_eq!(granules(&NEOVERSE_N1), [12, 14, 16]);
        assert_eq!(granules(&CORTEX_A57), [12, 16]);
        assert_eq!(granules(&CORTEX_A53), [12, 16]);
    }

    #[test]
    fn cortex_a57_with_64k_pages() {
        // 64 KiB base page, 2 MiB contpte block, 512 MiB PMD, 16 GiB contpmd. L1: 32 entries of
        // 4K/64K/1M; L2: 1024 of 4K/64K/1M/2M/16M/1G.
        let rows = entries(&CORTEX_A57, &[16, 21, 29, 34]);
        assert_eq!(rows[0].l1, Some((16, 32 * 64 * KIB)));
        assert_eq!(rows[0].l2, Some((16, 1024 * 64 * KIB)));
        // The contpte block: 1 MiB pieces in L1 (32 MiB reach), one 2 MiB entry in L2 (2 GiB).
        assert_eq!((rows[1].l1, rows[1].l2), (Some((20, 32 * MIB)), Some((21, 2 * GIB))));
        // A 512 MiB PMD: 1 MiB pieces in L1, 16 MiB pieces in L2 (16 GiB reach).
        assert_eq!((rows[2].l1, rows[2].l2), (Some((20, 32 * MIB)), Some((24, 16 * GIB))));
        // A 16 GiB contpmd: 1 GiB entries in L2.
        assert_eq!(rows[3].l2, Some((30, 1024 * GIB)));
    }

    #[test]
    fn neoverse_n1_with_16k_pages() {
        // 16 KiB base page, 2 MiB contpte, 32 MiB PMD, 1 GiB contpmd. L1: 48 entries of
        // 4K/16K/64K/2M/512M; L2: 1280 of 4K/16K/64K/2M/32M/512M/1G.
        let rows = entries(&NEOVERSE_N1, &[14, 21, 25, 30]);
        assert_eq!((rows[0].l1, rows[0].l2), (Some((14, 768 * KIB)), Some((14, 20 * MIB))));
        assert_eq!((rows[1].l1, rows[1].l2), (Some((21, 96 * MIB)), Some((21, 2560 * MIB))));
        // 32 MiB PMD: 2 MiB pieces in L1 (which has no 32M entries), whole in L2 (40 GiB).
        assert_eq!((rows[2].l1, rows[2].l2), (Some((21, 96 * MIB)), Some((25, 40 * GIB))));
        assert_eq!((rows[3].l1, rows[3].l2), (Some((29, 24 * GIB)), Some((30, 1280 * GIB))));
    }
}
