//! Counter names: `/proc/vmstat` THP events and per-size mTHP stats.
//!
//! Kernel sources (6.18): `include/linux/vm_event_item.h` (THP_* items), `mm/vmstat.c`
//! (`vmstat_text`), `include/linux/huge_mm.h` (`enum mthp_stat_item`), `mm/huge_memory.c`
//! (`thpsize_create`, `DEFINE_MTHP_STAT_ATTR`).

use mm_types::{Order, PMD_ORDER};

macro_rules! names_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident = $text:literal,)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($variant,)* }
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];
            pub const COUNT: usize = [$($name::$variant,)*].len();
            /// The kernel's name for this counter.
            pub fn name(self) -> &'static str {
                match self { $($name::$variant => $text,)* }
            }
            pub fn from_name(text: &str) -> Option<$name> {
                match text { $($text => Some($name::$variant),)* _ => None }
            }
        }
    };
}

names_enum! {
    /// The `thp_*` lines of /proc/vmstat, in the kernel's order.
    #[doc(alias = "vm_event_item")]
    VmEvent {
        ThpFaultAlloc = "thp_fault_alloc",
        ThpFaultFallback = "thp_fault_fallback",
        ThpFaultFallbackCharge = "thp_fault_fallback_charge",
        ThpCollapseAlloc = "thp_collapse_alloc",
        ThpCollapseAllocFailed = "thp_collapse_alloc_failed",
        ThpFileAlloc = "thp_file_alloc",
        ThpFileFallback = "thp_file_fallback",
        ThpFileFallbackCharge = "thp_file_fallback_charge",
        ThpFileMapped = "thp_file_mapped",
        ThpSplitPage = "thp_split_page",
        ThpSplitPageFailed = "thp_split_page_failed",
        ThpDeferredSplitPage = "thp_deferred_split_page",
        ThpUnderusedSplitPage = "thp_underused_split_page",
        ThpSplitPmd = "thp_split_pmd",
        ThpScanExceedNonePte = "thp_scan_exceed_none_pte",
        ThpScanExceedSwapPte = "thp_scan_exceed_swap_pte",
        ThpScanExceedSharePte = "thp_scan_exceed_share_pte",
        ThpSplitPud = "thp_split_pud",
        ThpZeroPageAlloc = "thp_zero_page_alloc",
        ThpZeroPageAllocFailed = "thp_zero_page_alloc_failed",
        ThpSwpout = "thp_swpout",
        ThpSwpoutFallback = "thp_swpout_fallback",
    }
}

names_enum! {
    /// The /proc/vmstat lines of reclaim, swap and compaction that a run under memory pressure
    /// reports beside the `thp_*` events (`include/linux/vm_event_item.h`: PSWPIN.., PGSTEAL_*,
    /// PGACTIVATE, PGDEACTIVATE, PGSCAN_*, COMPACT*, ZSWP*, OOM_KILL; `mm/vmstat.c: vmstat_text`
    /// spells them).
    #[doc(alias = "vm_event_item")]
    ReclaimEvent {
        Pswpin = "pswpin",
        Pswpout = "pswpout",
        Pgactivate = "pgactivate",
        Pgdeactivate = "pgdeactivate",
        Pgmajfault = "pgmajfault",
        Pgrefill = "pgrefill",
        PgstealKswapd = "pgsteal_kswapd",
        PgstealDirect = "pgsteal_direct",
        PgstealKhugepaged = "pgsteal_khugepaged",
        PgscanKswapd = "pgscan_kswapd",
        PgscanDirect = "pgscan_direct",
        PgscanKhugepaged = "pgscan_khugepaged",
        PgstealProactive = "pgsteal_proactive",
        PgscanProactive = "pgscan_proactive",
        PgscanDirectThrottle = "pgscan_direct_throttle",
        PgscanAnon = "pgscan_anon",
        PgscanFile = "pgscan_file",
        PgstealAnon = "pgsteal_anon",
        PgstealFile = "pgsteal_file",
        OomKill = "oom_kill",
        CompactMigrateScanned = "compact_migrate_scanned",
        CompactFreeScanned = "compact_free_scanned",
        CompactIsolated = "compact_isolated",
        CompactStall = "compact_stall",
        CompactFail = "compact_fail",
        CompactSuccess = "compact_success",
        CompactDaemonWake = "compact_daemon_wake",
        SwapRa = "swap_ra",
        SwapRaHit = "swap_ra_hit",
        Zswpin = "zswpin",
        Zswpout = "zswpout",
        Zswpwb = "zswpwb",
    }
}

names_enum! {
    /// The files under `hugepages-<N>kB/stats/`.
    #[doc(alias = "mthp_stat_item")]
    MthpStat {
        AnonFaultAlloc = "anon_fault_alloc",
        AnonFaultFallback = "anon_fault_fallback",
        AnonFaultFallbackCharge = "anon_fault_fallback_charge",
        Zswpout = "zswpout",
        Swpin = "swpin",
        SwpinFallback = "swpin_fallback",
        SwpinFallbackCharge = "swpin_fallback_charge",
        Swpout = "swpout",
        SwpoutFallback = "swpout_fallback",
        ShmemAlloc = "shmem_alloc",
        ShmemFallback = "shmem_fallback",
        ShmemFallbackCharge = "shmem_fallback_charge",
        Split = "split",
        SplitFailed = "split_failed",
        SplitDeferred = "split_deferred",
        NrAnon = "nr_anon",
        NrAnonPartiallyMapped = "nr_anon_partially_mapped",
        CollapseExceedSwapPte = "collapse_exceed_swap_pte",
        CollapseExceedNonePte = "collapse_exceed_none_pte",
        CollapseExceedSharedPte = "collapse_exceed_shared_pte",
    }
}

impl MthpStat {
    /// Stats that only anonymous sizes (orders 2..=9) have; `hugepages-8kB` lacks them.
    pub fn anon_only(self) -> bool {
        matches!(
            self,
            MthpStat::AnonFaultAlloc
                | MthpStat::AnonFaultFallback
                | MthpStat::AnonFaultFallbackCharge
                | MthpStat::SplitDeferred
                | MthpStat::NrAnon
                | MthpStat::NrAnonPartiallyMapped
                | MthpStat::CollapseExceedSwapPte
                | MthpStat::CollapseExceedNonePte
                | MthpStat::CollapseExceedSharedPte
        )
    }
    /// The per-size collapse stats 7.2 added (mm/huge_memory.c `anon_stats_attrs`, from the
    /// mTHP collapse series): absent on 6.18.
    pub fn since_7_2(self) -> bool {
        matches!(self, MthpStat::CollapseExceedSwapPte | MthpStat::CollapseExceedNonePte | MthpStat::CollapseExceedSharedPte)
    }
    /// Gauges report a level, not an event count; as a delta they can go negative.
    pub fn is_gauge(self) -> bool {
        matches!(self, MthpStat::NrAnon | MthpStat::NrAnonPartiallyMapped)
    }
    /// Whether `hugepages-<order>/stats/<self>` exists on x86-64 6.18.
    pub fn exists_for(self, order: Order) -> bool {
        self.exists_in(order, crate::version::KernelVersion::V6_18)
    }
    /// Whether `hugepages-<order>/stats/<self>` exists on x86-64 in `kernel`.
    pub fn exists_in(self, order: Order, kernel: crate::version::KernelVersion) -> bool {
        if self.since_7_2() && kernel < crate::version::KernelVersion::V7_2 {
            false
        } else if self.anon_only() {
            (2..=PMD_ORDER).contains(&order.0)
        } else {
            (1..=PMD_ORDER).contains(&order.0)
        }
    }
}

/// Orders that have a `hugepages-<N>kB` directory: 1 (file only) ..= 9.
pub fn sysfs_orders() -> impl Iterator<Item = Order> {
    (1..=PMD_ORDER).map(Order)
}

/// The counters the model keeps: vmstat events plus one stats row per order.
/// Values are signed because gauges (`nr_anon`) are reported as deltas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counters {
    pub vmstat: [i64; VmEvent::COUNT],
    pub mthp: [[i64; MthpStat::COUNT]; PMD_ORDER as usize + 1],
}

impl Default for Counters {
    fn default() -> Self {
        Counters { vmstat: [0; VmEvent::COUNT], mthp: [[0; MthpStat::COUNT]; PMD_ORDER as usize + 1] }
    }
}

impl Counters {
    #[doc(alias = "count_vm_event")]
    pub fn count(&mut self, event: VmEvent) {
        self.vmstat[event as usize] += 1;
    }
    #[doc(alias = "count_mthp_stat")]
    pub fn count_mthp(&mut self, order: Order, stat: MthpStat) {
        self.mod_mthp(order, stat, 1);
    }
    /// `mod_mthp_stat`: ignores order 0 and orders above PMD, as the kernel does.
    #[doc(alias = "mod_mthp_stat")]
    pub fn mod_mthp(&mut self, order: Order, stat: MthpStat, delta: i64) {
        if order.0 == 0 || order.0 > PMD_ORDER {
            return;
        }
        self.mthp[order.0 as usize][stat as usize] += delta;
    }
    /// Add another set of counters (several simulated processes make one machine's counters).
    pub fn add(&mut self, other: &Counters) {
        for (a, b) in self.vmstat.iter_mut().zip(other.vmstat.iter()) {
            *a += b;
        }
        for (row, orow) in self.mthp.iter_mut().zip(other.mthp.iter()) {
            for (a, b) in row.iter_mut().zip(orow.iter()) {
                *a += b;
            }
        }
    }

    pub fn vm(&self, event: VmEvent) -> i64 {
        self.vmstat[event as usize]
    }
    pub fn mthp(&self, order: Order, stat: MthpStat) -> i64 {
        self.mthp[order.0 as usize][stat as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_match_the_kernel_order() {
        assert_eq!(VmEvent::COUNT, 22);
        // 17 stats of 6.18, and the three collapse_exceed_*_pte of 7.2.
        assert_eq!(MthpStat::COUNT, 20);
        assert!(!MthpStat::CollapseExceedNonePte.exists_for(Order(4)));
        assert!(MthpStat::CollapseExceedNonePte.exists_in(Order(4), crate::version::KernelVersion::V7_2));
        for e in VmEvent::ALL {
            assert_eq!(VmEvent::from_name(e.name()), Some(*e));
        }
        assert_eq!(VmEvent::ALL[0].name(), "thp_fault_alloc");
        assert_eq!(MthpStat::from_name("split_deferred"), Some(MthpStat::SplitDeferred));
        // hugepages-8kB has no anon stats on x86-64 (checked with ls on 6.18.44).
        assert!(!MthpStat::AnonFaultAlloc.exists_for(Order(1)));
        assert!(MthpStat::ShmemAlloc.exists_for(Order(1)));
        assert!(MthpStat::NrAnon.exists_for(Order(4)));
    }

    #[test]
    fn reclaim_events_spell_the_kernel_names() {
        // The names /proc/vmstat printed on this machine's 6.18 (grep of /proc/vmstat).
        assert_eq!(ReclaimEvent::from_name("pswpout"), Some(ReclaimEvent::Pswpout));
        assert_eq!(ReclaimEvent::CompactStall.name(), "compact_stall");
        assert_eq!(ReclaimEvent::from_name("thp_swpout"), None, "thp_* lines are VmEvent's");
        assert_eq!(ReclaimEvent::COUNT, 32);
    }

    #[test]
    fn mod_mthp_ignores_order_zero() {
        let mut c = Counters::default();
        c.count_mthp(Order(0), MthpStat::AnonFaultAlloc);
        c.count_mthp(Order(4), MthpStat::AnonFaultAlloc);
        assert_eq!(c.mthp(Order(0), MthpStat::AnonFaultAlloc), 0);
        assert_eq!(c.mthp(Order(4), MthpStat::AnonFaultAlloc), 1);
    }
}
