//! NUMA balancing's memory-tiering mode (`numa_balancing=2`), the promotion decision
//! (model-only: the live machine has one node).
//!
//! Kernel sources (6.18): kernel/sched/fair.c (the sysctls and their defaults:
//! `sysctl_numa_balancing_hot_threshold` 1000 ms, `sysctl_numa_balancing_promote_rate_limit`
//! 65536 MB/s, `sysctl_numa_balancing_scan_size` 256 MB, scan period 1000..60000 ms;
//! `task_numa_work`: each scan marks the next `scan_size` MB of present memory PROT_NONE;
//! `numa_hint_fault_latency`: the hint fault's time minus the scan's, kept in the folio;
//! `pgdat_free_space_enough`: more than max(1 GiB, 1/16 of the node) free promotes without a
//! threshold; `numa_promotion_adjust_threshold`: every scan_period_max the threshold moves by
//! one step, 2 × hot_threshold / 16, down when the candidates passed 110 % of
//! rate_limit × scan_period_max, up below 90 %, within [step, 2 × hot_threshold];
//! `numa_promotion_rate_limit`: `pgpromote_candidate` counts the folios that passed the
//! threshold, and once the candidates since the last one-second window reach the limit the
//! rest of the window promotes nothing; `should_numa_migrate_memory`: the tiering branch for a
//! folio on a lower tier), mm/mprotect.c (`change_pte_range`: with only the tiering bit set,
//! folios on the top tier are not made PROT_NONE, and a lower tier's folio gets the scan time),
//! mm/memory.c (`do_numa_page`: `numa_hint_faults`, then `migrate_misplaced_folio`).
//! Simplified: the scan period stays at `scan_period_min` (the kernel adapts it per task from
//! the faults' locality); the access-time field does not wrap; promotion watermarks are zero.

use crate::memory_tiers::{NodeId, Tiers};

/// `NUMA_BALANCING_NORMAL`, `NUMA_BALANCING_MEMORY_TIERING`.
pub const NUMA_BALANCING_NORMAL: u8 = 1;
pub const NUMA_BALANCING_MEMORY_TIERING: u8 = 2;
/// `NUMA_MIGRATION_ADJUST_STEPS`.
pub const NUMA_MIGRATION_ADJUST_STEPS: u64 = 16;

/// /proc/sys/kernel/numa_balancing and the knobs under /sys/kernel/debug/sched/numa_balancing
/// and /proc/sys/kernel/numa_balancing_promote_rate_limit_MBps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NumaBalancingSysctls {
    pub mode: u8,
    pub hot_threshold_ms: u64,
    pub promote_rate_limit_mbps: u64,
    pub scan_size_mb: u64,
    pub scan_period_min_ms: u64,
    pub scan_period_max_ms: u64,
}

impl Default for NumaBalancingSysctls {
    fn default() -> Self {
        NumaBalancingSysctls {
            mode: 0,
            hot_threshold_ms: 1000,
            promote_rate_limit_mbps: 65536,
            scan_size_mb: 256,
            scan_period_min_ms: 1000,
            scan_period_max_ms: 60000,
        }
    }
}

impl NumaBalancingSysctls {
    /// `MB_TO_PAGES(sysctl_numa_balancing_promote_rate_limit)`.
    pub fn rate_limit_pages(&self) -> u64 {
        self.promote_rate_limit_mbps << (20 - 12)
    }
    pub fn tiering(&self) -> bool {
        self.mode & NUMA_BALANCING_MEMORY_TIERING != 0
    }
}

/// The promotion state a target node keeps (`pglist_data`'s `nbp_*` fields and the
/// `PGPROMOTE_CANDIDATE` node stat).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PromoteState {
    pub nbp_rl_start: u64,
    pub nbp_rl_nr_cand: u64,
    pub nbp_th_start: u64,
    pub nbp_th_nr_cand: u64,
    /// 0: not adjusted yet (the default threshold applies).
    pub nbp_threshold: u64,
    pub pgpromote_candidate: u64,
    /// `PGPROMOTE_CANDIDATE_NRL`: promoted without the rate limit (free space enough).
    pub pgpromote_candidate_nrl: u64,
}

/// `numa_promotion_rate_limit`: true when the window's candidates reached the limit (do not
/// promote); counts `nr` candidates either way.
pub fn numa_promotion_rate_limit(st: &mut PromoteState, now_ms: u64, rate_limit: u64, nr: u64) -> bool {
    st.pgpromote_candidate += nr;
    if now_ms - st.nbp_rl_start > 1000 {
        st.nbp_rl_start = now_ms;
        st.nbp_rl_nr_cand = st.pgpromote_candidate;
    }
    st.pgpromote_candidate - st.nbp_rl_nr_cand >= rate_limit
}

/// `numa_promotion_adjust_threshold`.
pub fn numa_promotion_adjust_threshold(st: &mut PromoteState, now_ms: u64, rate_limit: u64, sys: &NumaBalancingSysctls) {
    let (period, ref_th) = (sys.scan_period_max_ms, sys.hot_threshold_ms);
    if now_ms - st.nbp_th_start <= period {
        return;
    }
    st.nbp_th_start = now_ms;
    let ref_cand = rate_limit * period / 1000;
    let diff_cand = st.pgpromote_candidate - st.nbp_th_nr_cand;
    let unit_th = ref_th * 2 / NUMA_MIGRATION_ADJUST_STEPS;
    let mut th = if st.nbp_threshold != 0 { st.nbp_threshold } else { ref_th };
    if diff_cand > ref_cand * 11 / 10 {
        th = th.saturating_sub(unit_th).max(unit_th);
    } else if diff_cand < ref_cand * 9 / 10 {
        th = (th + unit_th).min(ref_th * 2);
    }
    st.nbp_th_nr_cand = st.pgpromote_candidate;
    st.nbp_threshold = th;
}

/// `pgdat_free_space_enough` (promotion watermark taken as zero).
pub fn pgdat_free_space_enough(tiers: &Tiers, nid: NodeId) -> bool {
    let n = tiers.node(nid);
    let enough = (1u64 << (30 - 12)).max(n.spec.pages >> 4);
    n.free_pages() > enough
}

/// `should_numa_migrate_memory` for a folio of `nr` pages on a lower tier (memory-tiering
/// mode): whether its hint fault at `now_ms`, `scan_ms` after the scan that armed it, promotes
/// it to `dst`.
pub fn should_promote(tiers: &Tiers, st: &mut PromoteState, sys: &NumaBalancingSysctls, dst: NodeId, scan_ms: u64, now_ms: u64, nr: u64) -> bool {
    if pgdat_free_space_enough(tiers, dst) {
        st.nbp_threshold = 0;
        st.pgpromote_candidate_nrl += nr;
        return true;
    }
    let rate_limit = sys.rate_limit_pages();
    numa_promotion_adjust_threshold(st, now_ms, rate_limit, sys);
    let th = if st.nbp_threshold != 0 { st.nbp_threshold } else { sys.hot_threshold_ms };
    // numa_hint_fault_latency.
    let latency = now_ms - scan_ms;
    if latency >= th {
        return false;
    }
    !numa_promotion_rate_limit(st, now_ms, rate_limit, nr)
}

/// `task_numa_work`'s budget: the base pages one scan may mark.
pub fn scan_pages(sys: &NumaBalancingSysctls) -> u64 {
    sys.scan_size_mb << (20 - 12)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory_tiers::{NodeKind, NodeSpec};

    fn full_dram() -> Tiers {
        let mut t = Tiers::new(&[
            NodeSpec::preset(NodeKind::LocalDram, 1 << 20),
            NodeSpec::preset(NodeKind::CxlDram, 1 << 20),
        ]).unwrap();
        t.nodes[0].used_pages = (1 << 20) - 1000;
        t
    }

    #[test]
    fn promotion_stops_at_the_rate_limit_until_the_next_window() {
        // 1 MB/s = 256 pages per second. The kernel counts a folio's pages as candidates
        // before it looks at the window, and a new window starts from the count with them: the
        // first folio of a window always passes.
        let t = full_dram();
        let sys = NumaBalancingSysctls { mode: 2, promote_rate_limit_mbps: 1, ..Default::default() };
        let mut st = PromoteState::default();
        // t=2000: 2000 - 0 > 1000, a new window from 100 candidates: promoted.
        assert!(should_promote(&t, &mut st, &sys, 0, 1900, 2000, 100));
        assert!(should_promote(&t, &mut st, &sys, 0, 1900, 2100, 255)); // 355 - 100 = 255 < 256
        assert!(!should_promote(&t, &mut st, &sys, 0, 1900, 2200, 1)); // 356 - 100 = 256: limited
        assert!(!should_promote(&t, &mut st, &sys, 0, 2000, 2900, 1)); // same window: 257
        // t=3001: 3001 - 2000 > 1000, a new window from 358: promoted.
        assert!(should_promote(&t, &mut st, &sys, 0, 2900, 3001, 1));
        assert_eq!(st.pgpromote_candidate, 358);
        // Cold (latency 1000 ms >= threshold 1000): refused before the candidate count.
        assert!(!should_promote(&t, &mut st, &sys, 0, 2001, 3001, 1));
        assert_eq!(st.pgpromote_candidate, 358);
    }

    #[test]
    fn the_hot_threshold_steps_down_when_candidates_overrun_the_limit() {
        // rate limit 1 MB/s = 256 pages/s; period 60 s: ref_cand = 15360. Step = 2000/16 = 125.
        let sys = NumaBalancingSysctls { mode: 2, promote_rate_limit_mbps: 1, ..Default::default() };
        let mut st = PromoteState { pgpromote_candidate: 20_000, ..Default::default() };
        numa_promotion_adjust_threshold(&mut st, 60_001, 256, &sys);
        assert_eq!(st.nbp_threshold, 875); // 20000 > 16896: 1000 - 125
        st.pgpromote_candidate += 100; // far below 13824 in the next period: up by 125
        numa_promotion_adjust_threshold(&mut st, 120_002, 256, &sys);
        assert_eq!(st.nbp_threshold, 1000);
        numa_promotion_adjust_threshold(&mut st, 120_003, 256, &sys); // within the period: kept
        assert_eq!(st.nbp_threshold, 1000);
    }

    #[test]
    fn a_mostly_free_fast_node_promotes_without_threshold() {
        let mut t = full_dram();
        t.nodes[0].used_pages = 0;
        let sys = NumaBalancingSysctls { mode: 2, ..Default::default() };
        let mut st = PromoteState { nbp_threshold: 500, ..Default::default() };
        assert!(should_promote(&t, &mut st, &sys, 0, 0, 50_000, 512));
        assert_eq!((st.nbp_threshold, st.pgpromote_candidate_nrl, st.pgpromote_candidate), (0, 512, 0));
        assert_eq!(scan_pages(&sys), 65536);
    }
}
