//! Demotion in reclaim: a node's cold folios moved to the next lower tier instead of swapped
//! (model-only: the live machine has one node and no lower tier).
//!
//! Kernel sources (6.18, mm/vmscan.c): `can_demote` (`demotion_enabled`, i.e.
//! /sys/kernel/mm/numa/demotion_enabled, and a `next_demotion_node`), `shrink_folio_list`
//! (before a folio is reclaimed it goes on the demote list: folios are taken from the inactive
//! list's tail; one whose PTEs were young is kept once with PG_referenced and activated when
//! young again, as `folio_check_references`; large folios go whole as THP migration is
//! supported), `demote_folio_list` (`migrate_pages` to the target node with MR_DEMOTION,
//! MIGRATE_ASYNC and no reclaim of its own: a THP that does not fit is split), and the events
//! `pgdemote_kswapd` / `pgdemote_direct` (`PGDEMOTE_KSWAPD + reclaimer_offset()`), the pages
//! demoted. `inactive_is_low` with an inactive ratio of 1 (a node under 1 GiB) deactivates the
//! active list's tail first. The per-node LRU here is the tiering model's own (folio indices),
//! not the machine's `vmscan` LRU; folios that fail to demote stay on the inactive list.

use std::collections::VecDeque;

use crate::memory_tiers::{NodeId, Tiers};
use crate::migrate::{migrate_pages, MigrateReason, TierEvents, TierFolio};

/// `can_demote`: the node reclaim on `nid` demotes to, if demotion is enabled and there is one.
pub fn can_demote(tiers: &Tiers, nid: NodeId, demotion_enabled: bool) -> Option<NodeId> {
    if !demotion_enabled {
        return None;
    }
    tiers.next_demotion_node(nid)
}

/// One node's anon LRU (indices into the caller's folio table), head at the front.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TierLru {
    pub inactive: VecDeque<usize>,
    pub active: VecDeque<usize>,
    /// PG_referenced of the folios on this list, by index.
    pub referenced: std::collections::BTreeSet<usize>,
}

impl TierLru {
    /// `lru_add`: a new (or newly migrated) folio starts at the inactive head.
    pub fn lru_add(&mut self, idx: usize) {
        self.inactive.push_front(idx);
    }
    pub fn remove(&mut self, idx: usize) {
        self.inactive.retain(|&i| i != idx);
        self.active.retain(|&i| i != idx);
        self.referenced.remove(&idx);
    }
    fn deactivate_while_low(&mut self) {
        while self.inactive.len() < self.active.len() {
            let idx = self.active.pop_back().expect("active is longer");
            self.inactive.push_front(idx);
        }
    }
}

/// Who reclaims: kswapd (`pgdemote_kswapd`) or the allocating task (`pgdemote_direct`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reclaimer {
    Kswapd,
    Direct,
}

/// Reclaim on `nid` by demotion: the inactive list scanned from its tail once, young folios
/// rotated (`young(idx)` reads and clears their accessed bits), the others demoted to
/// `can_demote`'s node until `nr_to_reclaim` pages were chosen. Returns the pages demoted.
#[allow(clippy::too_many_arguments)]
pub fn shrink_node_demote(
    tiers: &mut Tiers, lrus: &mut [TierLru], folios: &mut Vec<TierFolio>, nid: NodeId, target: NodeId,
    nr_to_reclaim: u64, young: &mut dyn FnMut(usize) -> bool, who: Reclaimer, ev: &mut TierEvents,
) -> u64 {
    let lru = &mut lrus[nid as usize];
    lru.deactivate_while_low();
    let (mut chosen, mut pages, mut kept) = (Vec::new(), 0u64, Vec::new());
    while pages < nr_to_reclaim {
        let Some(idx) = lru.inactive.pop_back() else { break };
        if young(idx) {
            if lru.referenced.remove(&idx) {
                lru.active.push_front(idx);
            } else {
                lru.referenced.insert(idx);
                kept.push(idx);
            }
            continue;
        }
        pages += 1u64 << folios[idx].order;
        chosen.push(idx);
    }
    for idx in kept.into_iter().rev() {
        lru.inactive.push_front(idx);
    }
    demote_folio_list(tiers, lrus, folios, &chosen, nid, target, who, ev)
}

/// `demote_folio_list`: `chosen` (indices on `nid`) migrated to `target`; a split THP's pieces
/// are appended to `folios` as new indices. Folios demoted go to the target's inactive head.
#[allow(clippy::too_many_arguments)]
pub fn demote_folio_list(
    tiers: &mut Tiers, lrus: &mut [TierLru], folios: &mut Vec<TierFolio>, chosen: &[usize], nid: NodeId,
    target: NodeId, who: Reclaimer, ev: &mut TierEvents,
) -> u64 {
    let mut demoted = 0;
    for &idx in chosen {
        let m = migrate_pages(tiers, &[folios[idx]], target, MigrateReason::Demotion);
        ev.add_migration(&m.stats);
        demoted += m.stats.nr_succeeded;
        lrus[nid as usize].remove(idx);
        for (k, f) in m.folios.iter().enumerate() {
            let at = if k == 0 { idx } else { folios.len() };
            if k == 0 { folios[idx] = *f } else { folios.push(*f) }
            lrus[f.node as usize].lru_add(at);
        }
    }
    match who {
        Reclaimer::Kswapd => ev.pgdemote_kswapd += demoted,
        Reclaimer::Direct => ev.pgdemote_direct += demoted,
    }
    demoted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory_tiers::{NodeKind, NodeSpec};

    #[test]
    fn reclaim_demotes_the_inactive_tail_first_and_spares_young_folios_once() {
        let mut t = Tiers::new(&[
            NodeSpec::preset(NodeKind::LocalDram, 4096),
            NodeSpec::preset(NodeKind::CxlDram, 4096),
        ]).unwrap();
        assert_eq!(can_demote(&t, 0, false), None);
        let target = can_demote(&t, 0, true).expect("CXL below DRAM");
        // Folios 0..4 faulted in order: the inactive list is 4 3 2 1 0 (head first); folio 1 is
        // a THP. Folio 0 is young.
        let mut folios: Vec<TierFolio> = [0u8, 9, 0, 0, 0].iter().map(|&o| TierFolio { node: 0, order: o, tag: 0 }).collect();
        for f in &folios {
            t.charge(0, f.order);
        }
        let mut lrus = vec![TierLru::default(), TierLru::default()];
        (0..5).for_each(|i| lrus[0].lru_add(i));
        let mut ev = TierEvents::default();
        let mut young = |i: usize| i == 0;
        // 514 pages wanted: 0 is young (kept, PG_referenced), 1 (512) and 2 (1) are demoted,
        // 513 < 514 so 3 too: 514 pages.
        let n = shrink_node_demote(&mut t, &mut lrus, &mut folios, 0, target, 514, &mut young, Reclaimer::Kswapd, &mut ev);
        assert_eq!(n, 514);
        assert_eq!(ev.pgdemote_kswapd, 514);
        assert_eq!((ev.thp_migration_success, ev.pgmigrate_success), (1, 514));
        assert_eq!(lrus[0].inactive, [0, 4]);
        assert!(lrus[0].referenced.contains(&0));
        assert_eq!(lrus[1].inactive, [3, 2, 1]);
        // Again, 2 pages wanted: 4 is demoted (direct reclaim), 0 young a second time is
        // activated, and the list is done with 1 page.
        let n = shrink_node_demote(&mut t, &mut lrus, &mut folios, 0, target, 2, &mut young, Reclaimer::Direct, &mut ev);
        assert_eq!((n, ev.pgdemote_direct), (1, 1));
        assert_eq!((lrus[0].inactive.len(), lrus[0].active.iter().copied().collect::<Vec<_>>()), (0, vec![0]));
        assert_eq!((t.node(0).used_pages, t.node(1).used_pages), (1, 515));
    }
}
