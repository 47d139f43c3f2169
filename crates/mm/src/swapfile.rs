//! The swap device: slots, their counts and the cluster allocator that decides whether a large
//! folio can be swapped out whole.
//!
//! Kernel sources (6.18): `mm/swapfile.c` (`folio_alloc_swap`, `cluster_alloc_swap_entry`,
//! `alloc_swap_scan_cluster`, `swap_duplicate`, `swap_free_nr`, `__swap_count`),
//! `mm/swap.h` (`SWAPFILE_CLUSTER` = HPAGE_PMD_NR = 512), `mm/page_io.c` (`swap_writeout`,
//! the zeromap: a zero-filled folio is recorded, not written).
//!
//! The allocator, as 6.18 does it for one CPU: a cluster of 512 slots serves one order at a
//! time; an allocation of order `o` takes the next aligned free run in the cluster in use for
//! `o` (`si->global_cluster->next[o]` / the per-CPU cluster), else in a non-full cluster of
//! order `o`, else a free cluster; order 0 finally takes any free slot of any cluster. A large
//! order never takes slots from a cluster of another order, so a fragmented device makes large
//! folios fall back (split, `swpout_fallback`). A swap file (not a block device, no
//! `SWP_BLKDEV`) allocates no large order at all: every large folio is split before it goes
//! out. A zram device is a block device with `SWP_SYNCHRONOUS_IO`.

use thp_abi::{SwapKind, SwapSpec};

/// Slots per cluster (`SWAPFILE_CLUSTER`).
pub const CLUSTER: u32 = 512;
/// A slot's count bits (`swap_map`, SWAP_MAP_MAX is 0x3e; the model never reaches it).
const COUNT_MASK: u8 = 0x7f;
/// The slot's page was zero-filled when written (`si->zeromap`).
const ZERO: u8 = 0x80;

#[derive(Clone, Copy, Debug, Default)]
struct Cluster {
    /// Slots in use.
    used: u32,
    /// The order this cluster serves while not empty (`ci->order`).
    order: u8,
    /// On the non-full list of its order.
    listed: bool,
    /// Where the next scan for a free run starts (slot within the cluster): the allocator
    /// hands out slots in order (`alloc_swap_scan_cluster` from `next[order]`).
    hint: u32,
}

/// One swap device (`struct swap_info_struct`).
pub struct SwapDevice {
    pub kind: SwapKind,
    /// Per slot: the swap count (0 free) and the zeromap bit.
    map: Vec<u8>,
    clusters: Vec<Cluster>,
    /// Empty clusters (`si->free_clusters`), taken from the end.
    free_clusters: Vec<u32>,
    /// Partly used clusters per order (`si->nonfull_clusters[order]`).
    nonfull: [Vec<u32>; 10],
    /// The cluster in use per order (`next[order]`).
    next: [Option<u32>; 10],
    /// Slots in use (`si->inuse_pages`).
    pub inuse: u64,
}

impl SwapDevice {
    /// `swapon` of a device of `spec.bytes` (the header page is slot 0 and never allocated).
    pub fn new(spec: &SwapSpec) -> SwapDevice {
        let slots = (spec.bytes / mm_types::PAGE_SIZE) as u32;
        let nr_clusters = slots / CLUSTER;
        let mut map = vec![0u8; (nr_clusters * CLUSTER) as usize];
        let mut clusters = vec![Cluster::default(); nr_clusters as usize];
        // The header page: slot 0 is in use for ever, so cluster 0 serves order 0.
        if !map.is_empty() {
            map[0] = 1;
            clusters[0].used = 1;
        }
        let free_clusters = (1..nr_clusters).rev().collect();
        let mut nonfull: [Vec<u32>; 10] = Default::default();
        if nr_clusters > 0 {
            nonfull[0].push(0);
            clusters[0].listed = true;
        }
        SwapDevice { kind: spec.kind, map, clusters, free_clusters, nonfull, next: [None; 10], inuse: 0 }
    }

    /// Slots the device has for pages (`si->pages`).
    pub fn pages(&self) -> u64 {
        self.map.len().saturating_sub(1) as u64
    }

    /// `SWP_SYNCHRONOUS_IO`: zram.
    pub fn synchronous(&self) -> bool {
        self.kind == SwapKind::Zram
    }

    /// `folio_alloc_swap` of a folio of `order` (`cluster_alloc_swap_entry`): the first slot of
    /// `2^order` contiguous, aligned slots, each with count 1, or `None`.
    pub fn alloc(&mut self, order: u8, zero: bool) -> Option<u32> {
        if order > 0 && self.kind == SwapKind::File {
            return None;
        }
        let o = order as usize;
        if let Some(c) = self.next[o] {
            if let Some(s) = self.alloc_in(c, order, zero) {
                return Some(s);
            }
            self.next[o] = None;
        }
        while let Some(&c) = self.nonfull[o].last() {
            if let Some(s) = self.alloc_in(c, order, zero) {
                self.next[o] = Some(c);
                return Some(s);
            }
            self.nonfull[o].pop();
            self.clusters[c as usize].listed = false;
        }
        if let Some(c) = self.free_clusters.pop() {
            self.clusters[c as usize].order = order;
            let s = self.alloc_in(c, order, zero).expect("a free cluster has room");
            self.next[o] = Some(c);
            return Some(s);
        }
        if order > 0 {
            return None;
        }
        // Order 0 takes any free slot left in a cluster of another order.
        (0..self.clusters.len() as u32).find_map(|c| self.alloc_in_any(c, zero))
    }

    fn alloc_in(&mut self, c: u32, order: u8, zero: bool) -> Option<u32> {
        let cl = self.clusters[c as usize];
        if cl.used == 0 && cl.order != order {
            self.clusters[c as usize].order = order;
        } else if cl.order != order || cl.used + (1 << order) > CLUSTER {
            return None;
        }
        let base = c * CLUSTER;
        let nr = 1u32 << order;
        let units = CLUSTER / nr;
        let from = cl.hint / nr;
        let start = (from..units)
            .chain(0..from)
            .map(|k| base + k * nr)
            .find(|s| self.map[*s as usize..(*s + nr) as usize].iter().all(|m| *m & COUNT_MASK == 0))?;
        self.take(c, start, nr, zero);
        self.clusters[c as usize].hint = (start + nr - base) % CLUSTER;
        Some(start)
    }

    fn alloc_in_any(&mut self, c: u32, zero: bool) -> Option<u32> {
        if self.clusters[c as usize].used >= CLUSTER {
            return None;
        }
        let base = c * CLUSTER;
        let s = (base..base + CLUSTER).find(|s| self.map[*s as usize] & COUNT_MASK == 0)?;
        self.take(c, s, 1, zero);
        Some(s)
    }

    fn take(&mut self, c: u32, start: u32, nr: u32, zero: bool) {
        for m in &mut self.map[start as usize..(start + nr) as usize] {
            *m = 1 | if zero { ZERO } else { 0 };
        }
        self.clusters[c as usize].used += nr;
        self.inuse += nr as u64;
    }

    /// `__swap_count`: the references to slot `s` (page-table entries of every mm).
    pub fn count(&self, s: u32) -> u8 {
        self.map[s as usize] & COUNT_MASK
    }

    /// The slot's page was zero-filled when it went out (`swap_zeromap_batch`).
    pub fn is_zero(&self, s: u32) -> bool {
        self.map[s as usize] & ZERO != 0
    }

    /// `swap_duplicate`: fork copied a swap entry.
    pub fn duplicate(&mut self, s: u32) {
        debug_assert!(self.count(s) > 0 && self.count(s) < COUNT_MASK);
        self.map[s as usize] += 1;
    }

    /// `swap_free_nr` of one entry: drop a reference; the slot is free at zero.
    pub fn free(&mut self, s: u32) {
        let m = &mut self.map[s as usize];
        debug_assert!(*m & COUNT_MASK > 0, "swap slot {s} freed twice");
        *m -= 1;
        if *m & COUNT_MASK != 0 {
            return;
        }
        *m = 0;
        self.inuse -= 1;
        let c = s / CLUSTER;
        let cl = &mut self.clusters[c as usize];
        cl.used -= 1;
        if cl.used == 0 {
            if cl.listed {
                let o = cl.order as usize;
                self.nonfull[o].retain(|x| *x != c);
                cl.listed = false;
            }
            if self.next[cl.order as usize] == Some(c) {
                self.next[cl.order as usize] = None;
            }
            self.clusters[c as usize].hint = 0;
            self.free_clusters.push(c);
        } else if !cl.listed && self.next[cl.order as usize] != Some(c) {
            cl.listed = true;
            self.nonfull[cl.order as usize].push(c);
        }
    }

    /// Slots in use, counted from the map (for the invariant check).
    pub fn count_inuse(&self) -> u64 {
        self.map.iter().skip(1).filter(|m| **m & COUNT_MASK != 0).count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zram(mib: u64) -> SwapDevice {
        SwapDevice::new(&SwapSpec { kind: SwapKind::Zram, bytes: mib << 20 })
    }

    #[test]
    fn a_64k_folio_takes_an_aligned_run_of_a_free_cluster() {
        // 4 MiB: 1024 slots, 2 clusters; cluster 0 holds the header (slot 0) and serves order 0.
        let mut d = zram(4);
        assert_eq!(d.pages(), 1023);
        // An order-4 folio gets cluster 1 (the free one), slots 512..528.
        assert_eq!(d.alloc(4, false), Some(512));
        assert_eq!(d.alloc(4, false), Some(528));
        // Order 0 fills cluster 0 from slot 1.
        assert_eq!(d.alloc(0, false), Some(1));
        assert_eq!(d.inuse, 33);
        // 30 more order-4 folios fill cluster 1 (32 in all); the 33rd has no cluster: fallback.
        for k in 2..32 {
            assert_eq!(d.alloc(4, false), Some(512 + 16 * k));
        }
        assert_eq!(d.alloc(4, false), None);
        // Freeing one whole 64 KiB run gives the order its slots back.
        for s in 528..544 {
            d.free(s);
        }
        assert_eq!(d.alloc(4, false), Some(528));
        assert_eq!(d.count_inuse(), d.inuse);
    }

    #[test]
    fn a_pmd_folio_needs_a_whole_free_cluster_and_a_file_takes_no_large_order() {
        let mut d = zram(4);
        assert_eq!(d.alloc(9, false), Some(512));
        // Cluster 0 has the header: no second PMD-sized run.
        assert_eq!(d.alloc(9, false), None);
        let mut f = SwapDevice::new(&SwapSpec { kind: SwapKind::File, bytes: 4 << 20 });
        assert_eq!(f.alloc(4, false), None);
        assert_eq!(f.alloc(0, true), Some(1));
        assert!(f.is_zero(1));
        f.duplicate(1);
        assert_eq!(f.count(1), 2);
        f.free(1);
        f.free(1);
        assert_eq!(f.inuse, 0);
    }
}
