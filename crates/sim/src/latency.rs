//! Memory pressure priced on the clock, and each fault's latency (issue #28, items 1-2).
//!
//! With a profile's `[fault.pressure]` ([`PressureCosts`]), the driver prices the reclaim,
//! swap and compaction work a step did, read from the kernel's counters before and after it
//! ([`PressureWork`]): direct reclaim (mm/vmscan.c `try_to_free_pages`, and memcg limit
//! reclaim from mm/memcontrol.c `try_charge_memcg` → `try_to_free_mem_cgroup_pages`) per page
//! scanned and reclaimed and per page swapped out (mm/page_io.c `swap_writeout`); swap-in per
//! page (mm/memory.c `do_swap_page`); direct compaction (mm/compaction.c
//! `try_to_compact_pages` → `compact_zone`) per pageblock scanned and per page migrated
//! (mm/migrate.c `migrate_pages`). That is the faulting task's time. kswapd's work
//! (mm/vmscan.c `balance_pgdat`) and kcompactd's (mm/compaction.c `kcompactd_do_work`) run on
//! their own threads: priced as CPU time in [`PressureTime`], not on the task's clock.
//!
//! With `--latency`, each access that faults is its own priced piece (`Machine::
//! access_run_on_clock` with one fault a piece), and its time, the stalls included, goes into
//! a [`Histogram`] by what it mapped ([`LatencyRecorder`]): the folio's size, the zero page, or
//! a swap-in of a folio of some size.

use mm::Kernel;
use mm_types::{Order, PMD_ORDER};
use thp_abi::counters::sysfs_orders;
use thp_abi::MthpStat;
use uapi::latency::{FaultLatency, Histogram};
use uapi::profile::PressureCosts;
use uapi::result::PressureTime;

/// Folio orders 0 (4 KiB) to PMD_ORDER.
const ORDERS: usize = PMD_ORDER as usize + 1;

/// Pages in a pageblock (pageblock_order = PMD order on x86-64).
const PAGEBLOCK_PAGES: f64 = 512.0;

/// The kernel's reclaim, swap and compaction counters, read around a step.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PressureWork {
    pgscan: u64,
    pgsteal: u64,
    pswpout: u64,
    pswpin: u64,
    kswapd_scan: u64,
    kswapd_steal: u64,
    kswapd_swpout: u64,
    /// Pages both compaction scanners walked, and of them kcompactd's.
    scanned: u64,
    daemon_scanned: u64,
    migrated: u64,
    daemon_migrated: u64,
    /// Major faults (`pgmajfault`), and the per-size `swpin` of the large orders.
    pub majflt: u64,
    pub swpin: [u64; ORDERS],
}

impl PressureWork {
    pub(crate) fn read(k: &Kernel) -> PressureWork {
        let r = k.reclaim_stats();
        let c = k.compaction_events();
        let mut swpin = [0; ORDERS];
        if k.reclaim_stats().pswpin > 0 {
            for o in sysfs_orders() {
                swpin[o.0 as usize] = k.counters.mthp(o, MthpStat::Swpin) as u64;
            }
        }
        PressureWork {
            pgscan: r.pgscan,
            pgsteal: r.pgsteal,
            pswpout: r.pswpout,
            pswpin: r.pswpin,
            kswapd_scan: r.kswapd_scan,
            kswapd_steal: r.kswapd_steal,
            kswapd_swpout: r.kswapd_swpout,
            scanned: c.compact_migrate_scanned + c.compact_free_scanned,
            daemon_scanned: c.compact_daemon_migrate_scanned + c.compact_daemon_free_scanned,
            migrated: c.pgmigrate_success,
            daemon_migrated: c.daemon_migrated,
            majflt: r.pgmajfault,
            swpin,
        }
    }
}

/// Price the work between `b` and `a` with `c`, adding each part to `t`; returns the direct
/// part (the faulting task's ns). kswapd's and kcompactd's go to `t` only.
pub(crate) fn price(c: &PressureCosts, b: &PressureWork, a: &PressureWork, t: &mut PressureTime) -> f64 {
    let d = |x: u64, y: u64| x.saturating_sub(y) as f64;
    let kscan = d(a.kswapd_scan, b.kswapd_scan);
    let ksteal = d(a.kswapd_steal, b.kswapd_steal);
    let kswpout = d(a.kswapd_swpout, b.kswapd_swpout);
    let reclaim = |scan: f64, steal: f64, swpout: f64| scan * c.reclaim_scan_ns_per_page + steal * c.reclaim_ns_per_page + swpout * c.swapout_ns_per_page;
    let direct_reclaim = reclaim(d(a.pgscan, b.pgscan) - kscan, d(a.pgsteal, b.pgsteal) - ksteal, d(a.pswpout, b.pswpout) - kswpout);
    let kswapd = reclaim(kscan, ksteal, kswpout);
    let swapin = d(a.pswpin, b.pswpin) * c.swapin_ns_per_page;
    let compact = |scanned: f64, migrated: f64| scanned / PAGEBLOCK_PAGES * c.compact_ns_per_block + migrated * c.compact_migrate_ns_per_page;
    let dscan = d(a.daemon_scanned, b.daemon_scanned);
    let dmig = d(a.daemon_migrated, b.daemon_migrated);
    let direct_compaction = compact(d(a.scanned, b.scanned) - dscan, d(a.migrated, b.migrated) - dmig);
    let kcompactd = compact(dscan, dmig);
    t.direct_reclaim_ns += direct_reclaim;
    t.swapin_ns += swapin;
    t.direct_compaction_ns += direct_compaction;
    t.kswapd_ns += kswapd;
    t.kcompactd_ns += kcompactd;
    direct_reclaim + swapin + direct_compaction
}

/// What one fault mapped, for the histogram it goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FaultKind {
    /// A folio of this order allocated (order 0: a 4 KiB page, a copy-on-write copy too).
    Folio(Order),
    /// The zero page (a read fault).
    Zero,
    /// A major fault that read a folio of this order from swap.
    Swapin(Order),
}

/// Each fault's priced ns, by what it mapped and all together.
#[derive(Default)]
pub(crate) struct LatencyRecorder {
    all: Histogram,
    folio: [Option<Box<Histogram>>; ORDERS],
    swapin: [Option<Box<Histogram>>; ORDERS],
    zero: Option<Box<Histogram>>,
}

impl LatencyRecorder {
    pub(crate) fn record(&mut self, kind: FaultKind, ns: f64) {
        let ns = ns.round().max(0.0) as u64;
        self.all.record(ns);
        let h = match kind {
            FaultKind::Folio(o) => &mut self.folio[o.0 as usize],
            FaultKind::Swapin(o) => &mut self.swapin[o.0 as usize],
            FaultKind::Zero => &mut self.zero,
        };
        h.get_or_insert_with(Default::default).record(ns);
    }

    /// The result's `time.latency` (None without a fault).
    pub(crate) fn report(&self) -> Option<FaultLatency> {
        let all = self.all.summary()?;
        let mut sizes = std::collections::BTreeMap::new();
        for o in 0..ORDERS {
            let label = Order(o as u8).label();
            if let Some(s) = self.folio[o].as_ref().and_then(|h| h.summary()) {
                sizes.insert(label.clone(), s);
            }
            if let Some(s) = self.swapin[o].as_ref().and_then(|h| h.summary()) {
                sizes.insert(format!("swapin {label}"), s);
            }
        }
        if let Some(s) = self.zero.as_ref().and_then(|h| h.summary()) {
            sizes.insert("zero".into(), s);
        }
        let source = "model: each fault's time priced with the profile (the fault by its folio size, its direct reclaim, swap-in and compaction by [fault.pressure]); percentiles are bucket highs (within 1/64)".into();
        Some(FaultLatency { all, sizes, source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costs() -> PressureCosts {
        PressureCosts {
            reclaim_scan_ns_per_page: 50.0,
            reclaim_ns_per_page: 200.0,
            swapout_ns_per_page: 3000.0,
            swapin_ns_per_page: 2500.0,
            compact_ns_per_block: 40_000.0,
            compact_migrate_ns_per_page: 1000.0,
        }
    }

    /// A direct compaction over 3 pageblocks (the migrate scanner walks 2 × 512 pages, the
    /// free scanner 512) migrating 256 pages: 3 × 40 µs + 256 × 1 µs = 376 µs, all on the task.
    #[test]
    fn one_direct_compaction_over_three_pageblocks() {
        let b = PressureWork::default();
        let a = PressureWork { scanned: 3 * 512, migrated: 256, ..Default::default() };
        let mut t = PressureTime::default();
        assert_eq!(price(&costs(), &b, &a, &mut t), 376_000.0);
        assert_eq!((t.direct_compaction_ns, t.kcompactd_ns), (376_000.0, 0.0));
        // The same run by kcompactd: its thread's CPU, nothing on the task.
        let k = PressureWork { daemon_scanned: a.scanned, daemon_migrated: a.migrated, ..a };
        let mut t = PressureTime::default();
        assert_eq!(price(&costs(), &b, &k, &mut t), 0.0);
        assert_eq!(t.kcompactd_ns, 376_000.0);
    }

    /// Memcg limit reclaim that swaps out one 64 KiB folio whole: 16 pages scanned, 16
    /// reclaimed, 16 written: 16 × (50 + 200 + 3000) = 52 µs on the task; the same by kswapd
    /// is kswapd's; reading it back (16 pages swapped in) costs 16 × 2.5 µs = 40 µs.
    #[test]
    fn swap_out_of_a_64k_folio_and_back() {
        let b = PressureWork::default();
        let a = PressureWork { pgscan: 16, pgsteal: 16, pswpout: 16, ..Default::default() };
        let mut t = PressureTime::default();
        assert_eq!(price(&costs(), &b, &a, &mut t), 52_000.0);
        assert_eq!(t.direct_reclaim_ns, 52_000.0);
        let k = PressureWork { kswapd_scan: 16, kswapd_steal: 16, kswapd_swpout: 16, ..a };
        let mut t = PressureTime::default();
        assert_eq!(price(&costs(), &b, &k, &mut t), 0.0);
        assert_eq!(t.kswapd_ns, 52_000.0);
        let back = PressureWork { pswpin: 16, ..Default::default() };
        let mut t = PressureTime::default();
        assert_eq!(price(&costs(), &b, &back, &mut t), 40_000.0);
        assert_eq!(t.swapin_ns, 40_000.0);
        // Without [fault.pressure] nothing is priced.
        assert_eq!(price(&PressureCosts::default(), &b, &a, &mut PressureTime::default()), 0.0);
    }

    #[test]
    fn the_recorder_keys_faults_by_what_they_mapped() {
        let mut r = LatencyRecorder::default();
        r.record(FaultKind::Folio(Order(0)), 1500.0);
        r.record(FaultKind::Folio(Order(0)), 1500.0);
        r.record(FaultKind::Folio(Order(9)), 170_000.0);
        r.record(FaultKind::Zero, 40.0);
        r.record(FaultKind::Swapin(Order(4)), 40_000.0);
        let l = r.report().unwrap();
        assert_eq!(l.all.count, 5);
        assert_eq!(l.sizes.keys().map(String::as_str).collect::<Vec<_>>(), ["2048kB", "4kB", "swapin 64kB", "zero"]);
        assert_eq!((l.sizes["4kB"].count, l.sizes["zero"].p50_ns, l.all.max_ns), (2, 40, 170_000));
        assert!(LatencyRecorder::default().report().is_none());
    }
}
