//! The page-table walker and its page-walk caches (one per non-leaf level: PML4E, PDPTE and PDE
//! caches, Intel SDM vol. 3A §4.10.3; arm64 walk caches of L0–L2 descriptors play the same part).
//!
//! A native walk reads the levels below the deepest walk-cache hit down to the leaf: 4 entries for
//! a 4 KiB page with no hit, 1 with a PDE-cache hit. A nested walk (AMD NPT, Intel EPT, arm64
//! stage 2) translates each guest table's guest-physical address through the host tables before
//! reading it, and the final guest-physical address too, with the host's own walk caches keyed by
//! guest-physical address. Guest page-table pages are given synthetic guest-physical addresses,
//! one 4 KiB page per table, so that host walk caches see realistic sharing (512 PTE tables share
//! one host 2 MiB page).

use crate::assoc::Array;
use crate::{tag, tag_range, CpuPreset, PageSize, Paging, Translation, TlbStats};

/// Shift of the region one entry at `level` maps (0 = PML4E: 512 GiB .. 3 = PTE: 4 KiB).
const fn entry_shift(level: usize) -> u8 {
    (39 - 9 * level) as u8
}

#[derive(Clone, Debug)]
pub(crate) struct Walker {
    /// Walk caches for levels 0..3 (non-leaf entries only); `None` where the CPU has none.
    pwc: [Option<Array>; 3],
    host_pwc: [Option<Array>; 3],
    host_leaf: Option<usize>,
    /// A modelled host's leaf level for the data page of the walk under way (`Tlb::access_on_host`);
    /// `None`: `host_leaf`.
    data_host_leaf: Option<usize>,
}

/// Guest-physical address of the guest table at `level` that covers `va`.
fn table_gpa(level: usize, va: u64) -> u64 {
    let index = if level == 0 { 0 } else { va >> (48 - 9 * level) };
    (1 << 47) + ((level as u64) << 40) + index * 4096
}

/// Looks the non-leaf entries of `addr` up from level `leaf - 1` towards level 0, stopping at the
/// first hit, and fills every cache that missed; returns the first level the walk must read (the
/// level below the deepest hit, 0 if none). Written out per level, so that each level's shift is
/// a constant.
#[inline(always)]
fn probe_fill(pwc: &mut [Option<Array>; 3], addr: u64, leaf: usize) -> usize {
    #[inline(always)]
    fn hit(a: &mut Option<Array>, addr: u64, s: u8) -> bool {
        a.as_mut().is_some_and(|a| a.lookup_or_fill(addr >> s, tag(addr, s)))
    }
    let [l0, l1, l2] = pwc;
    if leaf > 2 && hit(l2, addr, entry_shift(2)) {
        3
    } else if leaf > 1 && hit(l1, addr, entry_shift(1)) {
        2
    } else if hit(l0, addr, entry_shift(0)) {
        1
    } else {
        0
    }
}

impl Walker {
    pub(crate) fn new(p: &CpuPreset, paging: Paging) -> Self {
        let mk = || [p.pwc[0].map(Array::new), p.pwc[1].map(Array::new), p.pwc[2].map(Array::new)];
        Walker {
            pwc: mk(),
            host_pwc: mk(),
            host_leaf: match paging {
                Paging::Native => None,
                Paging::Nested { host } => Some(host.leaf_level()),
            },
            data_host_leaf: None,
        }
    }

    /// Sets (or, with `None`, clears) the host leaf level of the data page of the next walks.
    pub(crate) fn set_data_host(&mut self, leaf: Option<usize>) {
        self.data_host_leaf = leaf;
    }

    /// Host walk of one guest-physical address; returns entries read. Out of line: the guest
    /// walk inlines a copy of itself per leaf level, and nested walks call this up to 5 times.
    #[inline(never)]
    fn host_walk(&mut self, gpa: u64, hleaf: usize, stats: &mut TlbStats) -> u32 {
        let start = probe_fill(&mut self.host_pwc, gpa, hleaf);
        for l in start..=hleaf.min(3) {
            stats.host_refs[l] += 1;
        }
        (hleaf + 1 - start) as u32
    }

    /// Walks for `t` after a TLB miss; returns the entries read and counts them per level.
    #[inline]
    pub(crate) fn walk(&mut self, t: &Translation, stats: &mut TlbStats) -> u32 {
        // `walk_to` inlined with a constant leaf level in each arm: the probe's tests of the
        // level and the per-level counts of a native walk fold to constants.
        match t.size {
            PageSize::K4 => self.walk_to(3, t, stats),
            PageSize::M2 => self.walk_to(2, t, stats),
            PageSize::G1 => self.walk_to(1, t, stats),
        }
    }

    #[inline(always)]
    fn walk_to(&mut self, leaf: usize, t: &Translation, stats: &mut TlbStats) -> u32 {
        let start = probe_fill(&mut self.pwc, t.vaddr, leaf);
        let Some(h) = self.host_leaf else {
            for r in &mut stats.guest_refs[start..=leaf] {
                *r += 1;
            }
            return (leaf + 1 - start) as u32;
        };
        let mut refs = 0;
        for l in start..=leaf {
            stats.guest_refs[l] += 1;
            refs += 1 + self.host_walk(table_gpa(l, t.vaddr), h, stats);
        }
        let gpa = (t.pfn << 12) | (t.vaddr & 0xfff);
        refs + self.host_walk(gpa, self.data_host_leaf.unwrap_or(h), stats)
    }

    /// Invalidates guest walk-cache entries overlapping `[start, end)`.
    pub(crate) fn flush_range(&mut self, start: u64, end: u64) -> u64 {
        let mut n = 0;
        for a in self.pwc.iter_mut().flatten() {
            n += a.invalidate_if(|t| {
                let (a, b) = tag_range(t);
                a < end && start < b
            });
        }
        n
    }
}
