//! Free page reporting, and the host's backing of the guest's frames behind it.
//!
//! Kernel sources (6.18): `mm/page_reporting.c` (`__page_reporting_notify`,
//! `page_reporting_process`, `page_reporting_process_zone`, `page_reporting_cycle`,
//! `page_reporting_drain`), `mm/page_alloc.c` (`__free_one_page` calls
//! `page_reporting_notify_free`; `del_page_from_free_list` clears `PageReported`),
//! `drivers/virtio/virtio_balloon.c` (`virtballoon_free_page_report`: the device tells the
//! host, which drops its backing of the frames).
//!
//! A virtual machine whose balloon device reports free pages (VIRTIO_BALLOON_F_REPORTING, as on
//! this machine kind) hands free blocks of `page_reporting_order` (9 here) and above back to
//! the host some seconds after they were freed; the host unmaps them, and the guest's next write
//! to each 4 KiB of them is a fault in the host (measured here: about 8 µs per 4 KiB, beside
//! 1.5 µs for a whole guest 4 KiB fault). Which frames a fault gets therefore sets its time:
//! a 2 MiB THP takes a whole free block of order 9 or above, which on an idle machine has been
//! reported, while base pages and small mTHP come first from the smaller free blocks, which are
//! never reported (docs/kernel-notes.md item 20).
//!
//! What is modelled, as the kernel does it: a free block of the reporting order or above that
//! is freed asks for a pass (`page_reporting_notify_free`); the pass runs one delay later
//! (PAGE_REPORTING_DELAY, 2 s: the driver's clock, `sim::daemons`); for each order from the
//! reporting order up, it takes the unreported blocks from the head of the free list, at most
//! `budget + 1` batches of PAGE_REPORTING_CAPACITY (32) where `budget = ⌈nr_free / (32 × 16)⌉`,
//! a batch carrying over between orders; blocks beyond the budget ask for another pass. A
//! reported block goes back to the tail of its list flagged `PageReported`; the flag is lost when
//! the block leaves the list (allocated or merged), but the host's backing is not restored until
//! the guest writes the frames. Not modelled: migratetypes (one list per order), the report's
//! own duration, and the leftover batch carried into the next order being reported with that
//! order's budget.
//!
//! The host's side is one bit per frame: set when the frame's block was reported (or was never
//! used since boot), cleared when the allocator hands the frame out (every allocation the
//! model makes is written at once: zeroed folios, page tables, copies), which counts a host
//! fault.

use mm_types::{Order, Pfn, MAX_PAGE_ORDER};

use crate::page_alloc::Zone;

/// Blocks per report (`PAGE_REPORTING_CAPACITY`).
pub const PAGE_REPORTING_CAPACITY: u64 = 32;

/// What reporting and the host did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostStats {
    /// Frames the guest wrote while the host had no memory behind them: host faults.
    pub faults: u64,
    /// Of `faults`, those of base pages (order-0 allocations: 4 KiB faults, page tables), which
    /// the host serves one guest fault at a time (a profile's `base_fault_ns_per_page`).
    pub base_faults: u64,
    /// Reporting passes run, and the blocks and 4 KiB pages they reported.
    pub passes: u64,
    pub reported_blocks: u64,
    pub reported_pages: u64,
}

/// The reporting device's state and the host's backing of every frame.
#[derive(Clone, Debug)]
pub struct Host {
    /// One bit per frame: the host has no memory behind it.
    unbacked: Vec<u64>,
    /// `page_reporting_order`.
    pub(crate) order: Order,
    /// A pass was asked for (PAGE_REPORTING_REQUESTED) since the last one started.
    requested: bool,
    pub(crate) stats: HostStats,
}

impl Host {
    /// A host that backs every frame.
    pub(crate) fn new(nr_pages: u32, order: Order) -> Host {
        Host { unbacked: vec![0; (nr_pages as usize).div_ceil(64)], order, requested: false, stats: HostStats::default() }
    }

    /// The host drops its backing of `[pfn, pfn + n)`.
    pub(crate) fn unback(&mut self, pfn: u32, n: u32) {
        self.for_words(pfn, n, |w, mask| *w |= mask);
    }

    /// The guest writes `[pfn, pfn + n)`: every frame the host had dropped is a host fault.
    #[inline]
    pub(crate) fn back(&mut self, pfn: u32, n: u32) {
        let mut faults = 0;
        self.for_words(pfn, n, |w, mask| {
            faults += (*w & mask).count_ones() as u64;
            *w &= !mask;
        });
        self.stats.faults += faults;
        if n == 1 {
            self.stats.base_faults += faults;
        }
    }

    /// `page_reporting_notify_free`: a block of `order` was freed.
    #[inline]
    pub(crate) fn notify_free(&mut self, order: Order) {
        if order >= self.order {
            self.requested = true;
        }
    }

    #[inline]
    fn for_words(&mut self, pfn: u32, n: u32, mut f: impl FnMut(&mut u64, u64)) {
        let (mut p, end) = (pfn as usize, pfn as usize + n as usize);
        while p < end {
            let bit = p % 64;
            let take = (64 - bit).min(end - p);
            let mask = if take == 64 { !0 } else { ((1u64 << take) - 1) << bit };
            f(&mut self.unbacked[p / 64], mask);
            p += take;
        }
    }

    /// Frames the host does not back, in `[pfn, pfn + n)` (tests).
    pub fn unbacked_in(&self, pfn: u32, n: u32) -> u64 {
        (pfn..pfn + n).filter(|&p| self.unbacked[p as usize / 64] >> (p % 64) & 1 == 1).count() as u64
    }
}

/// What one pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReportPass {
    pub blocks: u64,
    pub pages: u64,
}

impl Zone {
    /// `page_reporting_process` for this zone (`page_reporting_process_zone` and
    /// `page_reporting_cycle` per order): report unreported free blocks of the reporting order
    /// and above, within each order's budget. A pass that stops at a budget asks for another.
    pub(crate) fn page_reporting_process(&mut self) -> ReportPass {
        let Some(order) = self.host.as_mut().map(|h| {
            h.requested = false;
            h.stats.passes += 1;
            h.order
        }) else {
            return ReportPass::default();
        };
        let mut pass = ReportPass::default();
        // The zone must stay above its low watermark with a whole batch of the reporting
        // order taken out.
        if !self.above_low_watermark_by(PAGE_REPORTING_CAPACITY << order.0) {
            return pass;
        }
        let mut again = false;
        // Blocks already in the scatterlist from lower orders.
        let mut carry = 0u64;
        for o in order.0..=MAX_PAGE_ORDER {
            let budget = (self.nr_free_blocks(Order(o)) as u64).div_ceil(PAGE_REPORTING_CAPACITY * 16);
            let limit = ((budget + 1) * PAGE_REPORTING_CAPACITY).saturating_sub(carry);
            let mut take: Vec<u32> = self.free_list(Order(o)).filter(|&(_, reported)| !reported).map(|(p, _)| p).take(limit as usize + 1).collect();
            if take.len() as u64 > limit {
                take.truncate(limit as usize);
                again = true;
                carry = 0;
            } else {
                carry = (carry + take.len() as u64) % PAGE_REPORTING_CAPACITY;
            }
            let host = self.host.as_mut().expect("checked above");
            for &p in &take {
                host.unback(p, 1 << o);
            }
            host.stats.reported_blocks += take.len() as u64;
            host.stats.reported_pages += (take.len() as u64) << o;
            pass.blocks += take.len() as u64;
            pass.pages += (take.len() as u64) << o;
            for p in take {
                self.put_back_reported(Pfn(p), Order(o));
            }
        }
        if again {
            self.host.as_mut().expect("checked above").requested = true;
        }
        pass
    }

    /// A pass was asked for since the last one started (`PAGE_REPORTING_REQUESTED`).
    pub(crate) fn page_reporting_requested(&self) -> bool {
        self.host.as_ref().is_some_and(|h| h.requested)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BootParams, Kernel};
    use thp_abi::ThpSettings;

    const PMD: Order = Order(9);

    fn lists(free: &[u64], reported: Option<&[u64]>, pcp: u64) -> thp_abi::FreeLists {
        thp_abi::FreeLists { free: free.to_vec(), reported: reported.map(<[u64]>::to_vec), cpu: None, pcp }
    }

    fn kernel(mem_mib: u64) -> Kernel {
        Kernel::boot(&BootParams { mem_bytes: mem_mib << 20, min_free_kbytes: 1024, ..Default::default() }, &ThpSettings::default())
    }

    #[test]
    fn seeded_free_lists_are_the_snapshot() {
        // 256 MiB = 65536 frames: 3 order-10 blocks, 5 of order 9 (each beside a held buddy),
        // 7 of order 4 and 11 of order 0: 3·1024 + 5·1024 + 7·32 + 11·2 frames laid out, the rest held.
        let mut k = kernel(256);
        k.enable_page_reporting(PMD, Some(&lists(&[11, 0, 0, 0, 7, 0, 0, 0, 0, 5, 3], None, 0)));
        assert_eq!(k.zone().buddyinfo(), [11, 0, 0, 0, 7, 0, 0, 0, 0, 5, 3]);
        let free = 11 + 7 * 16 + 5 * 512 + 3 * 1024;
        assert_eq!(k.zone().nr_free_pages(), free);
        assert_eq!(k.memory_use().held, 65536 - free);
        k.check_invariants().unwrap();
    }

    #[test]
    fn a_frame_lost_beside_the_held_ones_is_still_caught() {
        // Held frames keep zeroed records; the check counts them: one frame more that is
        // neither free nor in a folio (taken from the allocator and never made a folio) fails.
        let mut k = kernel(256);
        k.enable_page_reporting(PMD, Some(&lists(&[11, 0, 0, 0, 7, 0, 0, 0, 0, 5, 3], None, 0)));
        k.check_invariants().unwrap();
        k.zone.alloc_pages(Order::BASE).unwrap();
        let err = k.check_invariants().unwrap_err();
        assert!(err.contains("neither free nor allocated"), "{err}");
    }

    #[test]
    fn a_snapshot_too_large_is_scaled_down() {
        // 64 MiB = 16384 frames; 40 order-9 blocks need 40·1024 frames with their buddies:
        // scaled by 16384/40960 to 16 blocks.
        let mut k = kernel(64);
        k.enable_page_reporting(PMD, Some(&lists(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 40, 0], None, 0)));
        assert_eq!(k.zone().buddyinfo()[9], 16);
        k.check_invariants().unwrap();
    }

    #[test]
    fn a_thp_from_a_reported_block_is_512_host_faults_base_pages_from_small_blocks_none() {
        let mut k = kernel(256);
        // 2000 order-0 blocks (backed) and 20 order-9 blocks (reported after the idle).
        k.enable_page_reporting(PMD, Some(&lists(&[2000, 0, 0, 0, 0, 0, 0, 0, 0, 20, 0], None, 0)));
        for _ in 0..1000 {
            k.zone.alloc_pages(Order::BASE).unwrap();
        }
        assert_eq!(k.host_stats().unwrap().faults, 0);
        let thp = k.zone.alloc_pages(PMD).unwrap();
        assert_eq!(k.host_stats().unwrap().faults, 512);
        assert_eq!(k.zone.host.as_ref().unwrap().unbacked_in(thp.0, 512), 0);
    }

    /// A live snapshot that says how many blocks are reported (/proc/kpageflags): of 5 order-9
    /// blocks 2, of 3 order-10 blocks 1, those an allocation takes last. The first 3 THPs come
    /// from unreported order-9 blocks (backed), the next 2 from the reported ones (512 host
    /// faults each); then the order-10 blocks are split, the 2 unreported first (4 THPs, no host
    /// fault), and the reported one is what is left, all of it unbacked.
    #[test]
    fn only_the_blocks_a_snapshot_counts_as_reported_are_unbacked_and_they_are_taken_last() {
        let mut k = kernel(256);
        k.enable_page_reporting(PMD, Some(&lists(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 3], Some(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 1]), 0)));
        let host = |k: &Kernel| k.zone.host.as_ref().unwrap().unbacked_in(0, k.zone.nr_pages());
        assert_eq!(host(&k), 2 * 512 + 1024);
        let mut faults = Vec::new();
        for _ in 0..9 {
            k.zone.alloc_pages(PMD).unwrap();
            faults.push(k.host_stats().unwrap().faults);
        }
        assert_eq!(faults, [0, 0, 0, 512, 1024, 1024, 1024, 1024, 1024]);
        assert_eq!(host(&k), 1024);
    }

    /// 1000 pages on the per-CPU list (what a large free leaves there) come first, backed; the
    /// next base page refills the list from a reported order-9 block (a batch, host faults).
    #[test]
    fn pages_on_the_per_cpu_list_are_taken_first_and_backed() {
        let mut k = kernel(256);
        k.enable_page_reporting(PMD, Some(&lists(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 20, 0], None, 1000)));
        k.check_invariants().unwrap();
        assert_eq!((k.zone().nr_free_pages(), k.zone().pcp_pages().count()), (20 * 512, 1000));
        for _ in 0..1000 {
            k.zone.alloc_pages(Order::BASE).unwrap();
        }
        assert_eq!(k.host_stats().unwrap().faults, 0);
        k.zone.alloc_pages(Order::BASE).unwrap();
        assert!(k.host_stats().unwrap().faults > 0);
    }

    #[test]
    fn a_freed_block_is_reported_at_the_next_pass_within_the_budget_and_taken_last() {
        let mut k = kernel(1024);
        k.enable_page_reporting(PMD, None);
        // The boot blocks are reported: the first 70 THPs split 35 never-used order-10 blocks.
        let thps: Vec<Pfn> = (0..70).map(|_| k.zone.alloc_pages(PMD).unwrap()).collect();
        assert_eq!(k.host_stats().unwrap().faults, 70 * 512);
        assert!(!k.page_reporting_requested());
        // Free every other one: 35 order-9 blocks whose buddies are in use, unreported, at the head.
        for p in thps.iter().step_by(2) {
            k.zone.free_pages(*p, PMD);
        }
        assert!(k.page_reporting_requested());
        // A THP taken now reuses the last freed block: backed, no host fault.
        let again = k.zone.alloc_pages(PMD).unwrap();
        assert_eq!(again, thps[68]);
        assert_eq!(k.host_stats().unwrap().faults, 70 * 512);
        k.zone.free_pages(again, PMD);
        // Order 9 holds 35 blocks: budget ⌈35/512⌉ = 1, so up to 2 batches of 32: 35 reported.
        let pass = k.page_reporting_process();
        assert_eq!(pass, ReportPass { blocks: 35, pages: 35 * 512 });
        assert!(!k.page_reporting_requested());
        // Now a THP from order 9 comes from a reported block: 512 host faults.
        let p = k.zone.alloc_pages(PMD).unwrap();
        assert_eq!(p.0 % 1024, 0);
        assert_eq!(k.host_stats().unwrap().faults, 71 * 512);
    }

    #[test]
    fn a_pass_stops_at_its_budget_and_asks_for_another() {
        // 100 unreported order-9 blocks (buddies held) and 4 order-10 ones above the watermark:
        // budget ⌈100/512⌉ = 1 → 2 batches, 64 blocks this pass, 36 the next.
        let mut k = kernel(1024);
        k.enable_page_reporting(PMD, Some(&lists(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 100, 4], None, 0)));
        let taken: Vec<Pfn> = (0..100).map(|_| k.zone.alloc_pages(PMD).unwrap()).collect();
        for p in &taken {
            k.zone.free_pages(*p, PMD);
        }
        assert_eq!(k.page_reporting_process().blocks, 64);
        assert!(k.page_reporting_requested());
        assert_eq!(k.page_reporting_process().blocks, 36);
        assert!(!k.page_reporting_requested());
        assert_eq!(k.page_reporting_process().blocks, 0);
        assert_eq!(k.host_stats().unwrap().reported_blocks, 100);
        k.check_invariants().unwrap();
    }
}
