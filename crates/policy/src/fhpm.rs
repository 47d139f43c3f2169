//! FHPM's decisions for a VM host (Chuandong Li et al., "FHPM: Fine-grained Huge Page
//! Management For Virtualization", ISCA 2023, arXiv:2307.10618), on the accessed and dirty
//! bits the host's EPT-like table gives per 4 KiB base page of a 2 MiB range ([`Bits`]): those
//! of a companion page table during a fine window, or of the range's own PTEs. `sim::host`
//! runs the mechanisms (windows, splits, merges, the EPT fill) and calls these.
//!
//! Definitions (model-only; the paper's text beyond its abstract could not be read here, so the
//! formulas are this model's reading of its terms, docs/vm-host.md):
//! - **page skew ratio** ([`psr`]): the share of a huge page's base pages accessed in a fine
//!   window, per mille (low: the accesses are skewed onto few base pages);
//! - **hot bloat** ([`hot_bloat`]): base pages of a host huge page whose one EPT A bit says hot
//!   but which the guest did not access in the window (HugeScope, the paper's journal sequel:
//!   "accesses to a huge page are heavily skewed towards a small subset of base pages, leading
//!   the hypervisor to (mistakenly) classify the entire huge page as hot").

use thp_abi::fhpm::FhpmParams;

/// One bit per 4 KiB base page of a 2 MiB range (512 bits).
pub type Bits = [u64; 8];

/// Base pages set in `b`.
pub fn count(b: &Bits) -> u32 {
    b.iter().map(|w| w.count_ones()).sum()
}

/// The page skew ratio of a huge page whose base pages `accessed` were found accessed in a
/// companion-page window: accessed per mille of 512, rounded down.
pub fn psr(accessed: &Bits) -> u16 {
    (count(accessed) * 1000 / 512) as u16
}

/// Whether FHPM splits a huge page found hot in the coarse window, from its fine window: its
/// PSR is below `split_psr`.
pub fn split(p: &FhpmParams, accessed: &Bits) -> bool {
    psr(accessed) < p.split_psr
}

/// Whether FHPM merges (promotes) a 2 MiB range mapped by base pages: its accessed share in the
/// window is at least `promote_psr`.
pub fn promote(p: &FhpmParams, accessed: &Bits) -> bool {
    psr(accessed) >= p.promote_psr
}

/// Hot bloat of one host huge page over a window: with its EPT A bit set (`young`), every base
/// page the guest did not access (`accessed`, the model's truth); none when it is not young.
pub fn hot_bloat(young: bool, accessed: &Bits) -> u32 {
    if young {
        512 - count(accessed)
    } else {
        0
    }
}

/// The base pages a split frees with `share`: present, neither accessed in the window nor ever
/// written (zero pages the host can share), as a bit set.
pub fn cold_zero(present: &Bits, accessed: &Bits, dirty: &Bits) -> Bits {
    std::array::from_fn(|i| present[i] & !accessed[i] & !dirty[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits(pages: impl IntoIterator<Item = u32>) -> Bits {
        let mut b = [0u64; 8];
        for p in pages {
            b[(p / 64) as usize] |= 1 << (p % 64);
        }
        b
    }

    /// A huge page whose guest touched every 8th base page (64 of 512) in the companion
    /// window: PSR = 64 × 1000 / 512 = 125 per mille. Under the default split_psr (250) it
    /// is split; with split_psr=125 (strictly below) it is kept. A page with 448 of 512
    /// accessed: 875, exactly the default promote_psr, so a base-page range like it merges;
    /// 447 (873) does not.
    #[test]
    fn psr_of_a_small_huge_page_with_a_known_pattern() {
        let every_8th = bits((0..512).step_by(8));
        assert_eq!(count(&every_8th), 64);
        assert_eq!(psr(&every_8th), 125);
        let p = FhpmParams::default();
        assert!(split(&p, &every_8th));
        assert!(!split(&FhpmParams { split_psr: 125, ..p }, &every_8th));
        assert_eq!(psr(&bits(0..448)), 875);
        assert!(promote(&p, &bits(0..448)));
        assert_eq!(psr(&bits(0..447)), 873);
        assert!(!promote(&p, &bits(0..447)));
        assert_eq!(psr(&bits(0..512)), 1000);
        assert_eq!(psr(&[0; 8]), 0);
    }

    /// Hot bloat of a host huge page: its one EPT A bit is set by an access to base page 3;
    /// the guest touched base pages 3 and 100 only, so 510 of the 512 it calls hot are cold.
    /// Not young: no bloat, whatever the truth. Of the 510, those never written are zero
    /// pages a split frees: with pages 200..210 written earlier (dirty), 500.
    #[test]
    fn hot_bloat_of_a_host_huge_page() {
        let accessed = bits([3, 100]);
        assert_eq!(hot_bloat(true, &accessed), 510);
        assert_eq!(hot_bloat(false, &accessed), 0);
        let all = bits(0..512);
        let dirty = bits((200..210).chain([3]));
        assert_eq!(count(&cold_zero(&all, &accessed, &dirty)), 512 - 2 - 10);
    }
}
