//! Page migration between nodes, large folios whole or split (model-only beyond one node).
//!
//! Kernel sources (6.18, mm/migrate.c): `migrate_pages` (a batch, then the folios split on the
//! way migrated once more, MIGRATE_ASYNC, their failures not counted again; the vm events
//! `pgmigrate_success`, `pgmigrate_fail`, `thp_migration_success`, `thp_migration_fail`,
//! `thp_migration_split` from `struct migrate_pages_stats`), `migrate_pages_batch` (a folio whose
//! destination cannot be allocated, -ENOMEM, counts a failure; a large one is split and its
//! pieces go on the split list, except for `MR_NUMA_MISPLACED`, "large folio NUMA faulting
//! doesn't split to retry"; a small one ends the batch: the rest stay where they are),
//! `migrate_misplaced_folio` (`numa_pages_migrated`, and `pgpromote_success` when the folio goes
//! from a lower tier to the top one), `do_pages_move` (move_pages: a node outside 0..MAX_NUMNODES
//! or without memory is ENODEV). Allocation failure is the only failure modelled (no pins,
//! no -EAGAIN retries).

use crate::memory_tiers::{NodeId, Tiers, MAX_NUMNODES};

/// `enum migrate_reason`, the ones tiering uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrateReason {
    /// move_pages, migrate_pages, mbind(MPOL_MF_MOVE).
    Syscall,
    /// NUMA balancing's hint fault (promotion): large folios are never split.
    NumaMisplaced,
    /// Reclaim's demotion.
    Demotion,
}

/// A folio as tiering sees it: where it is and its order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TierFolio {
    pub node: NodeId,
    pub order: u8,
    /// The caller's label (a split folio's pieces keep it): which range the folio backs.
    pub tag: u32,
}

/// `struct migrate_pages_stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MigrateStats {
    pub nr_succeeded: u64,
    pub nr_failed_pages: u64,
    pub nr_thp_succeeded: u64,
    pub nr_thp_failed: u64,
    pub nr_thp_split: u64,
    pub nr_split: u64,
}

/// The tiering vm events (/proc/vmstat names), model-only counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TierEvents {
    pub pgmigrate_success: u64,
    pub pgmigrate_fail: u64,
    pub thp_migration_success: u64,
    pub thp_migration_fail: u64,
    pub thp_migration_split: u64,
    pub numa_pte_updates: u64,
    pub numa_hint_faults: u64,
    pub numa_pages_migrated: u64,
    pub pgpromote_success: u64,
    pub pgpromote_candidate: u64,
    pub pgdemote_kswapd: u64,
    pub pgdemote_direct: u64,
}

impl TierEvents {
    /// `migrate_pages`'s count_vm_events at its end.
    pub fn add_migration(&mut self, s: &MigrateStats) {
        self.pgmigrate_success += s.nr_succeeded;
        self.pgmigrate_fail += s.nr_failed_pages;
        self.thp_migration_success += s.nr_thp_succeeded;
        self.thp_migration_fail += s.nr_thp_failed;
        self.thp_migration_split += s.nr_thp_split;
    }
    /// The events by their /proc/vmstat names, in that file's order.
    pub fn named(&self) -> [(&'static str, u64); 12] {
        [
            ("pgpromote_success", self.pgpromote_success),
            ("pgpromote_candidate", self.pgpromote_candidate),
            ("pgdemote_kswapd", self.pgdemote_kswapd),
            ("pgdemote_direct", self.pgdemote_direct),
            ("numa_pte_updates", self.numa_pte_updates),
            ("numa_hint_faults", self.numa_hint_faults),
            ("numa_pages_migrated", self.numa_pages_migrated),
            ("pgmigrate_success", self.pgmigrate_success),
            ("pgmigrate_fail", self.pgmigrate_fail),
            ("thp_migration_success", self.thp_migration_success),
            ("thp_migration_fail", self.thp_migration_fail),
            ("thp_migration_split", self.thp_migration_split),
        ]
    }
}

/// What `migrate_pages` did: the folios as they are after it (split ones as their order-0
/// pieces, on whichever node each ended) and the stats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Migrated {
    pub folios: Vec<TierFolio>,
    pub stats: MigrateStats,
}

/// Move one folio if `dst` has room; false: -ENOMEM.
fn move_folio(tiers: &mut Tiers, f: &mut TierFolio, dst: NodeId) -> bool {
    if !tiers.can_alloc(dst, f.order) {
        return false;
    }
    tiers.charge(dst, f.order);
    tiers.uncharge(f.node, f.order);
    f.node = dst;
    true
}

/// `migrate_pages` of `from` to `dst` for `reason` (MIGRATE_ASYNC, allocation from `dst` only).
pub fn migrate_pages(tiers: &mut Tiers, from: &[TierFolio], dst: NodeId, reason: MigrateReason) -> Migrated {
    let mut s = MigrateStats::default();
    let mut out: Vec<TierFolio> = Vec::with_capacity(from.len());
    let mut split: Vec<TierFolio> = Vec::new();
    let mut stopped = false;
    for &f in from {
        let mut f = f;
        if stopped || f.node == dst {
            out.push(f);
            continue;
        }
        let (nr, is_thp) = (1u64 << f.order, f.order >= 9);
        if move_folio(tiers, &mut f, dst) {
            s.nr_succeeded += nr;
            s.nr_thp_succeeded += is_thp as u64;
            out.push(f);
            continue;
        }
        s.nr_thp_failed += is_thp as u64;
        if f.order > 0 && reason != MigrateReason::NumaMisplaced {
            s.nr_thp_split += is_thp as u64;
            s.nr_split += 1;
            split.extend((0..nr).map(|_| TierFolio { order: 0, ..f }));
            continue;
        }
        // -ENOMEM on a folio not split: the batch ends, the pieces split so far stay.
        s.nr_failed_pages += nr;
        out.push(f);
        stopped = true;
    }
    if stopped {
        out.append(&mut split);
        return Migrated { folios: out, stats: s };
    }
    // The split pieces, once, their failure not counted again but for the page that ends it.
    let mut ended = false;
    for mut f in split {
        if !ended && move_folio(tiers, &mut f, dst) {
            s.nr_succeeded += 1;
        } else if !ended {
            s.nr_failed_pages += 1;
            ended = true;
        }
        out.push(f);
    }
    Migrated { folios: out, stats: s }
}

/// `migrate_misplaced_folio`: NUMA balancing moves one folio to `dst`; true if it moved.
pub fn migrate_misplaced_folio(tiers: &mut Tiers, f: &mut TierFolio, dst: NodeId, ev: &mut TierEvents) -> bool {
    let src = f.node;
    let m = migrate_pages(tiers, &[*f], dst, MigrateReason::NumaMisplaced);
    ev.add_migration(&m.stats);
    *f = m.folios[0];
    let n = m.stats.nr_succeeded;
    ev.numa_pages_migrated += n;
    if n > 0 && !tiers.node_is_toptier(src) && tiers.node_is_toptier(dst) {
        ev.pgpromote_success += n;
    }
    n > 0
}

/// move_pages(2)'s check of a target node: ENODEV outside 0..MAX_NUMNODES or without memory.
pub fn move_pages_target(tiers: &Tiers, node: i32) -> Result<NodeId, &'static str> {
    if node < 0 || node as usize >= MAX_NUMNODES || !tiers.online().contains(node as NodeId) {
        return Err("ENODEV");
    }
    Ok(node as NodeId)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory_tiers::{NodeKind, NodeSpec};

    fn dram_cxl(cxl_pages: u64) -> Tiers {
        let mut t = Tiers::new(&[
            NodeSpec::preset(NodeKind::LocalDram, 4096),
            NodeSpec::preset(NodeKind::CxlDram, cxl_pages),
        ]).unwrap();
        t.charge(0, 9);
        t.charge(0, 0);
        t
    }

    #[test]
    fn a_thp_migrates_whole_where_its_order_fits() {
        let mut t = dram_cxl(2048);
        let from = [TierFolio { node: 0, order: 9, tag: 0 }, TierFolio { node: 0, order: 0, tag: 0 }];
        let m = migrate_pages(&mut t, &from, 1, MigrateReason::Syscall);
        assert_eq!(m.folios, [TierFolio { node: 1, order: 9, tag: 0 }, TierFolio { node: 1, order: 0, tag: 0 }]);
        let want = MigrateStats { nr_succeeded: 513, nr_thp_succeeded: 1, ..Default::default() };
        assert_eq!(m.stats, want);
        assert_eq!((t.node(0).used_pages, t.node(1).used_pages), (0, 513));
    }

    #[test]
    fn a_thp_is_split_where_no_order_9_block_is_free() {
        // CXL has 2048 free pages but its largest free block is order 4: the THP fails
        // (thp_migration_fail 1), is split (thp_migration_split 1) and its 512 pages move
        // one by one (pgmigrate_success 512 + the small folio's 1).
        let mut t = dram_cxl(2048);
        t.nodes[1].max_free_order = 4;
        let from = [TierFolio { node: 0, order: 9, tag: 0 }, TierFolio { node: 0, order: 0, tag: 0 }];
        let m = migrate_pages(&mut t, &from, 1, MigrateReason::Syscall);
        assert_eq!(m.folios.len(), 513);
        assert!(m.folios.iter().all(|f| *f == TierFolio { node: 1, order: 0, tag: 0 }));
        let want = MigrateStats { nr_succeeded: 513, nr_thp_failed: 1, nr_thp_split: 1, nr_split: 1, ..Default::default() };
        assert_eq!(m.stats, want);
        let mut ev = TierEvents::default();
        ev.add_migration(&m.stats);
        assert_eq!((ev.pgmigrate_success, ev.thp_migration_fail, ev.thp_migration_split), (513, 1, 1));
    }

    #[test]
    fn split_pieces_stop_at_the_first_that_finds_no_room() {
        // 300 free pages on CXL: the order-0 folio first (1), then 299 of the 512 pieces; the
        // 300th piece fails (pgmigrate_fail 1) and 212 stay on node 0 uncounted.
        let mut t = dram_cxl(300);
        let from = [TierFolio { node: 0, order: 0, tag: 0 }, TierFolio { node: 0, order: 9, tag: 0 }];
        let m = migrate_pages(&mut t, &from, 1, MigrateReason::Demotion);
        assert_eq!(m.stats.nr_succeeded, 300);
        assert_eq!((m.stats.nr_failed_pages, m.stats.nr_thp_split), (1, 1));
        assert_eq!(m.folios.iter().filter(|f| f.node == 0).count(), 213);
        assert_eq!(t.node(1).used_pages, 300);
    }

    #[test]
    fn numa_balancing_never_splits_and_counts_a_promotion() {
        let mut t = Tiers::new(&[
            NodeSpec::preset(NodeKind::LocalDram, 600),
            NodeSpec::preset(NodeKind::CxlDram, 4096),
        ]).unwrap();
        t.charge(1, 9);
        t.charge(0, 0);
        let mut ev = TierEvents::default();
        let mut thp = TierFolio { node: 1, order: 9, tag: 0 };
        t.nodes[0].max_free_order = 8;
        assert!(!migrate_misplaced_folio(&mut t, &mut thp, 0, &mut ev));
        assert_eq!(thp, TierFolio { node: 1, order: 9, tag: 0 });
        assert_eq!((ev.thp_migration_fail, ev.thp_migration_split, ev.pgmigrate_fail), (1, 0, 512));
        t.nodes[0].max_free_order = 10;
        assert!(migrate_misplaced_folio(&mut t, &mut thp, 0, &mut ev));
        assert_eq!((ev.numa_pages_migrated, ev.pgpromote_success, ev.thp_migration_success), (512, 512, 1));
        assert_eq!(move_pages_target(&t, 2), Err("ENODEV"));
        assert_eq!(move_pages_target(&t, -1), Err("ENODEV"));
        assert_eq!(move_pages_target(&t, 1), Ok(1));
    }
}
