//! The tier study (model-only): a workload larger than the fastest tier, its hot set moving,
//! under Linux 6.18's tiering (NUMA balancing mode 2 with promotion, demotion in kswapd) or
//! under MTM (`policy::mtm`), on a clock of its own: promotions, demotions, THPs split, time.
//!
//! The machine's memory is the tiering model's (`mm::memory_tiers`, `mm::migrate`,
//! `mm::numa_balancing`, `mm::vmscan::demote`), one folio per PMD range to begin with
//! (MADV_HUGEPAGE'd memory, placed by the default policy with direct reclaim allowed, so a THP
//! that does not fit on node 0 goes to the next node of the zonelist). Kernel paths modelled:
//! kernel/sched/fair.c `task_numa_work` (every `scan_period_min` ms, `scan_size` MB of the range
//! from where the last scan stopped; mm/mprotect.c `change_pte_range` arms lower-tier folios
//! only), mm/memory.c `do_numa_page` / mm/huge_memory.c `do_huge_pmd_numa_page` (one hint fault
//! per folio armed, `should_numa_migrate_memory`, then `migrate_misplaced_folio`), mm/migrate.c
//! `migrate_misplaced_folio_prepare` (the top node must stay above its high watermark after the
//! move, else kswapd is woken there and the promotion fails) and mm/vmscan.c `balance_pgdat`
//! (kswapd demotes until the promotion watermark, taken as twice the high watermark, is free;
//! `alloc_demote_folio` falls back to other lower-tier nodes, here the nearest with room).
//! Costs (model-only assumptions, docs/tiers.md): an access is one load at its node's latency
//! plus [`WALK_4K_NS`] for a page mapped by PTEs; a hint fault [`HINT_FAULT_NS`]; a migration
//! its copy at the slower node's bandwidth. Promotion's copy and hint faults are on the task's
//! clock; kswapd's demotions and MTM's profiling and migrations on a kernel thread's.

use mm::memory_tiers::{NodeId, NodeSpec, Tiers};
use mm::mempolicy::{alloc_node, Mempolicy};
use mm::migrate::{migrate_misplaced_folio, migrate_pages, MigrateReason, TierEvents, TierFolio};
use mm::numa_balancing::{scan_pages, should_promote, NumaBalancingSysctls, PromoteState};
use mm::vmscan::demote::{shrink_node_demote, Reclaimer, TierLru};
use mm_types::prng::Prng;
use policy::mtm::{Mtm, MtmParams};

/// A hint fault's trap and PTE fix-up, ns (model-only assumption).
pub const HINT_FAULT_NS: u64 = 2_000;
/// The extra page walk of an access to a 4 KiB-mapped page against a PMD-mapped one, ns.
pub const WALK_4K_NS: u64 = 30;

/// What the study runs.
#[derive(Clone, Debug)]
pub struct TierStudy {
    pub nodes: Vec<NodeSpec>,
    /// The workload's size in 2 MiB ranges.
    pub footprint_pmds: usize,
    /// The hot set's size in 2 MiB ranges, and the percentage of accesses it takes.
    pub hot_pmds: usize,
    pub hot_pct: u64,
    /// Accesses priced per simulated millisecond, and the run's length.
    pub accesses_per_ms: u64,
    pub duration_ms: u64,
    /// The hot set moves to the next `hot_pmds` ranges this often.
    pub shift_every_ms: u64,
    /// The largest free block on the nodes below the top tier (fragmentation: a THP cannot be
    /// moved there whole below 9).
    pub lower_max_free_order: u8,
    pub seed: u64,
}

/// The tiering that runs.
#[derive(Clone, Copy, Debug)]
pub enum Tiering {
    Linux(NumaBalancingSysctls),
    Mtm(MtmParams),
}

/// What came out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TierReport {
    pub events: TierEvents,
    pub accesses: u64,
    pub top_tier_accesses: u64,
    pub access_ns: u64,
    pub hint_fault_ns: u64,
    pub promote_copy_ns: u64,
    /// kswapd's demotions, MTM's profiling and migrations: CPU of kernel threads.
    pub background_ns: u64,
    pub mtm_profile_ns: u64,
    /// PMD ranges still mapped by one THP at the end.
    pub thps_at_end: u64,
}

impl TierReport {
    /// The task's time: its accesses, hint faults and synchronous promotions.
    pub fn task_ns(&self) -> u64 {
        self.access_ns + self.hint_fault_ns + self.promote_copy_ns
    }
}

struct World {
    tiers: Tiers,
    folios: Vec<TierFolio>,
    /// Per PMD range, its folios by page (one entry while it is a THP).
    pmd: Vec<Vec<usize>>,
    young: Vec<bool>,
    pmd_young: Vec<bool>,
    page_young: Vec<[u64; 8]>,
    armed: Vec<Option<u64>>,
    lrus: Vec<TierLru>,
    tier_of: Vec<u8>,
    rep: TierReport,
    high_wmark: u64,
}

impl World {
    fn new(study: &TierStudy) -> World {
        let mut tiers = Tiers::new(&study.nodes).expect("the study's nodes");
        let mut starts: Vec<u32> = tiers.nodes.iter().map(|n| n.tier_start()).collect();
        starts.sort();
        starts.dedup();
        let tier_of = tiers.nodes.iter().map(|n| starts.iter().position(|&s| s == n.tier_start()).unwrap() as u8).collect();
        let mut w = World {
            folios: Vec::new(), pmd: Vec::new(), young: Vec::new(), pmd_young: vec![false; study.footprint_pmds],
            page_young: vec![[0; 8]; study.footprint_pmds], armed: Vec::new(),
            lrus: vec![TierLru::default(); tiers.nodes.len()], tier_of, rep: TierReport::default(),
            high_wmark: tiers.node(0).spec.pages / 64, tiers: Tiers::single(1),
        };
        let pol = Mempolicy::default_policy();
        for p in 0..study.footprint_pmds {
            let nid = alloc_node(&tiers, &pol, 9, p as u64, 0, true).expect("the nodes hold the footprint");
            tiers.charge(nid, 9);
            w.push_folio(TierFolio { node: nid, order: 9, tag: p as u32 });
            w.pmd.push(vec![p]);
        }
        for n in 1..tiers.nodes.len() {
            if w.tier_of[n] > 0 {
                tiers.nodes[n].max_free_order = study.lower_max_free_order;
            }
        }
        w.tiers = tiers;
        w
    }

    fn push_folio(&mut self, f: TierFolio) {
        self.lrus[f.node as usize].lru_add(self.folios.len());
        self.folios.push(f);
        self.young.push(false);
        self.armed.push(None);
    }

    /// After a migration that split folios: new indices get their state, their PMD its map.
    fn adopt_new(&mut self, from: usize) {
        let n = self.folios.len();
        self.young.resize(n, false);
        self.armed.resize(n, None);
        let mut tags: Vec<u32> = self.folios[from..].iter().map(|f| f.tag).collect();
        tags.dedup();
        for tag in tags {
            let mut idx: Vec<usize> = (0..n).filter(|&i| self.folios[i].tag == tag).collect();
            idx.sort();
            self.pmd[tag as usize] = idx;
        }
    }

    fn access(&mut self, p: usize, page: usize, now: u64, t: &mut Tiering, st: &mut PromoteState) {
        let idx = if self.pmd[p].len() == 1 { self.pmd[p][0] } else { self.pmd[p][page] };
        let f = self.folios[idx];
        self.rep.accesses += 1;
        self.rep.access_ns += self.tiers.load_ns(f.node) + if f.order == 0 { WALK_4K_NS } else { 0 };
        if self.tier_of[f.node as usize] == 0 {
            self.rep.top_tier_accesses += 1;
        }
        self.young[idx] = true;
        self.pmd_young[p] = true;
        self.page_young[p][page / 64] |= 1 << (page % 64);
        if let (Tiering::Linux(sys), Some(scan)) = (t, self.armed[idx].take()) {
            self.hint_fault(idx, scan, now, sys, st);
        }
    }

    fn hint_fault(&mut self, idx: usize, scan: u64, now: u64, sys: &NumaBalancingSysctls, st: &mut PromoteState) {
        self.rep.events.numa_hint_faults += 1;
        self.rep.hint_fault_ns += HINT_FAULT_NS;
        let mut f = self.folios[idx];
        let nr = 1u64 << f.order;
        if !should_promote(&self.tiers, st, sys, 0, scan, now, nr) {
            return;
        }
        if self.tiers.node(0).free_pages() < nr + self.high_wmark {
            self.kswapd(0);
            return;
        }
        let src = f.node;
        if migrate_misplaced_folio(&mut self.tiers, &mut f, 0, &mut self.rep.events) {
            self.rep.promote_copy_ns += self.tiers.copy_ns(src, 0, nr);
            self.lrus[src as usize].remove(idx);
            self.lrus[0].lru_add(idx);
        }
        self.folios[idx] = f;
    }

    /// kswapd on `nid`: demote until twice the high watermark is free.
    fn kswapd(&mut self, nid: NodeId) {
        let want = (2 * self.high_wmark).saturating_sub(self.tiers.node(nid).free_pages()) + 512;
        let lower = (0..self.tiers.nodes.len() as NodeId).filter(|&n| self.tier_of[n as usize] > self.tier_of[nid as usize]);
        let mut lower: Vec<NodeId> = lower.collect();
        lower.sort_by_key(|&n| (self.tier_of[n as usize], n));
        let Some(&target) = lower.iter().find(|&&n| self.tiers.node(n).free_pages() >= want) else { return };
        let before = self.folios.len();
        let young = &mut self.young;
        let mut read = |i: usize| std::mem::take(&mut young[i]);
        let n = shrink_node_demote(&mut self.tiers, &mut self.lrus, &mut self.folios, nid, target, want, &mut read,
            Reclaimer::Kswapd, &mut self.rep.events);
        self.rep.background_ns += self.tiers.copy_ns(nid, target, n);
        self.adopt_new(before.min(self.folios.len()));
    }

    /// `task_numa_work`: arm up to `scan_size` of the range from `offset` (lower tiers only).
    fn scan(&mut self, now: u64, sys: &NumaBalancingSysctls, offset: &mut usize) {
        let mut budget = scan_pages(sys);
        let total = self.pmd.len();
        for _ in 0..total {
            if budget < 512 {
                break;
            }
            let p = *offset;
            *offset = (*offset + 1) % total;
            budget -= 512;
            for k in 0..self.pmd[p].len() {
                let idx = self.pmd[p][k];
                if !self.tiers.node_is_toptier(self.folios[idx].node) {
                    self.armed[idx] = Some(now);
                    self.rep.events.numa_pte_updates += 1u64 << self.folios[idx].order;
                }
            }
        }
    }

    fn mtm_step(&mut self, mtm: &mut Mtm) {
        for (r, region) in mtm.regions.iter_mut().enumerate() {
            region.tier = self.tier_of[self.folios[self.pmd[r][0]].node as usize];
        }
        let (pmd_young, page_young) = (&mut self.pmd_young, &mut self.page_young);
        let mut l1 = |r: usize| std::mem::take(&mut pmd_young[r]);
        let mut l2 = |r: usize, k: u64, n: u64| {
            let page = (k * 512 / n) as usize;
            let bit = 1u64 << (page % 64);
            let was = page_young[r][page / 64] & bit != 0;
            page_young[r][page / 64] &= !bit;
            was
        };
        let cost = mtm.profile(&mut l1, &mut l2);
        self.page_young.iter_mut().for_each(|b| *b = [0; 8]);
        self.rep.mtm_profile_ns += cost;
        self.rep.background_ns += cost;
        let ntiers = *self.tier_of.iter().max().unwrap() as usize + 1;
        let mut free = vec![0usize; ntiers];
        for n in &self.tiers.nodes {
            let reserve = if self.tier_of[n.id as usize] == 0 { self.high_wmark } else { 0 };
            free[self.tier_of[n.id as usize] as usize] += (n.free_pages().saturating_sub(reserve) / 512) as usize;
        }
        for m in mtm.plan(&free) {
            if self.move_region(m.region, m.to) {
                mtm.moved(m);
            }
        }
    }

    /// `move_memory_regions`: a region's folios to the first node of tier `to` with room.
    fn move_region(&mut self, r: usize, to: u8) -> bool {
        let pages: u64 = self.pmd[r].iter().map(|&i| 1u64 << self.folios[i].order).sum();
        let Some(dst) = (0..self.tiers.nodes.len()).find(|&n| self.tier_of[n] == to && self.tiers.node(n as NodeId).free_pages() >= pages) else {
            return false;
        };
        let before = self.folios.len();
        let from: Vec<TierFolio> = self.pmd[r].iter().map(|&i| self.folios[i]).collect();
        let src = from[0].node;
        let m = migrate_pages(&mut self.tiers, &from, dst as NodeId, MigrateReason::Syscall);
        self.rep.events.add_migration(&m.stats);
        if self.tier_of[src as usize] > to && to == 0 {
            self.rep.events.pgpromote_success += m.stats.nr_succeeded;
        }
        self.rep.background_ns += self.tiers.copy_ns(src, dst as NodeId, m.stats.nr_succeeded);
        let old = self.pmd[r].clone();
        for (k, f) in m.folios.into_iter().enumerate() {
            if k < old.len() { self.folios[old[k]] = f } else { self.folios.push(f) }
        }
        self.adopt_new(before.min(self.folios.len()));
        self.folios[self.pmd[r][0]].node == dst as NodeId
    }
}

/// Run the study under `tiering`.
pub fn run_tier_study(study: &TierStudy, tiering: Tiering) -> TierReport {
    let mut w = World::new(study);
    let mut t = tiering;
    let mut mtm = match t {
        Tiering::Mtm(p) => Some(Mtm::new(p, &vec![0; study.footprint_pmds])),
        Tiering::Linux(_) => None,
    };
    let (mut st, mut offset, mut rng) = (PromoteState::default(), 0usize, Prng::new(study.seed));
    for now in 0..study.duration_ms {
        let base = (now / study.shift_every_ms) as usize * study.hot_pmds;
        for _ in 0..study.accesses_per_ms {
            let p = if rng.below(100) < study.hot_pct {
                (base + rng.below(study.hot_pmds as u64) as usize) % study.footprint_pmds
            } else {
                rng.below(study.footprint_pmds as u64) as usize
            };
            w.access(p, rng.below(512) as usize, now, &mut t, &mut st);
        }
        match (&t, mtm.as_mut()) {
            (Tiering::Linux(sys), _) if sys.tiering() && now % sys.scan_period_min_ms == 0 => w.scan(now, &sys.clone(), &mut offset),
            (Tiering::Mtm(p), Some(m)) if now % p.interval_ms == p.interval_ms - 1 => w.mtm_step(m),
            _ => {}
        }
    }
    w.rep.events.pgpromote_candidate = st.pgpromote_candidate;
    w.rep.thps_at_end = w.pmd.iter().filter(|v| v.len() == 1).count() as u64;
    w.rep
}

/// The study `tier-study` runs: DRAM 64 MiB, CXL 128 MiB, a slow tier of 1 GiB; 384 MiB of
/// MADV_HUGEPAGE memory whose 16 MiB hot set takes 90 % of the accesses and moves every 2 s.
pub fn tier_study_default(duration_ms: u64) -> TierStudy {
    use mm::memory_tiers::NodeKind;
    TierStudy {
        nodes: vec![
            NodeSpec::preset(NodeKind::LocalDram, 64 << 8),
            NodeSpec::preset(NodeKind::CxlDram, 128 << 8),
            NodeSpec::preset(NodeKind::Slow, 1024 << 8),
        ],
        footprint_pmds: 192,
        hot_pmds: 8,
        hot_pct: 90,
        accesses_per_ms: 200,
        duration_ms,
        shift_every_ms: 2000,
        lower_max_free_order: 10,
        seed: 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mm::memory_tiers::NodeKind;

    /// Two ranges: 0 on DRAM (600 pages: a THP fits once), 1 on CXL. All accesses go to one
    /// range, 0 in second 0, 1 in second 1, 0 in second 2.
    fn two_ranges(per_ms: u64) -> TierStudy {
        TierStudy {
            nodes: vec![NodeSpec::preset(NodeKind::LocalDram, 600), NodeSpec::preset(NodeKind::CxlDram, 4096)],
            footprint_pmds: 2,
            hot_pmds: 1,
            hot_pct: 100,
            accesses_per_ms: per_ms,
            duration_ms: 3000,
            shift_every_ms: 1000,
            lower_max_free_order: 10,
            seed: 7,
        }
    }

    #[test]
    fn linux_tiering_on_two_ranges_as_derived_by_hand() {
        let r = run_tier_study(&two_ranges(100), Tiering::Linux(NumaBalancingSysctls { mode: 2, ..Default::default() }));
        // Scans at 0, 1000, 2000 arm range 1 (CXL): 3 × 512 PTE updates. Its first access at
        // 1000 faults 1000 ms after the scan (not below the 1000 ms threshold: refused); the
        // scan at the end of ms 1000 re-arms it, the access at 1001 faults 1 ms after: a
        // candidate (512), but DRAM has 88 pages free (< 512 + high watermark 9): kswapd is woken
        // and finds range 0's THP young (spared once), so nothing is demoted nor promoted.
        assert_eq!(r.events.numa_pte_updates, 1536);
        assert_eq!(r.events.numa_hint_faults, 2);
        assert_eq!(r.events.pgpromote_candidate, 512);
        assert_eq!((r.events.pgpromote_success, r.events.pgdemote_kswapd), (0, 0));
        // 100 accesses a ms: seconds 0 and 2 at 90 ns, second 1 at 250 ns.
        assert_eq!(r.access_ns, 100 * 1000 * (90 + 250 + 90));
        assert_eq!(r.hint_fault_ns, 2 * HINT_FAULT_NS);
    }

    #[test]
    fn mtm_on_two_ranges_as_derived_by_hand() {
        let r = run_tier_study(&two_ranges(100), Tiering::Mtm(MtmParams::default()));
        // 10,000 accesses per 100 ms interval touch all 512 pages: an accessed range samples
        // 1000. Range 0's hotness climbs to 999 by ms 999 and halves to 499 at 1099, range 1's
        // is 500 then: it is swapped in (range 0 demoted to CXL, range 1 promoted), whole. At
        // 2099 the same the other way (499 < 500): 4 THP migrations, 2 promotions of 512.
        assert_eq!(r.events.thp_migration_success, 4);
        assert_eq!((r.events.pgpromote_success, r.events.thp_migration_split), (1024, 0));
        assert_eq!(r.events.numa_hint_faults, 0);
        // DRAM for 2800 ms (all but 1000..1099 and 2000..2099), CXL for 200 ms.
        assert_eq!(r.access_ns, 100 * (2800 * 90 + 200 * 250));
        // 30 intervals, each: 2 PMD reads of 100 ns and 512 PTE samples of 250 ns.
        assert_eq!(r.mtm_profile_ns, 30 * (2 * 100 + 512 * 250));
        assert_eq!(r.thps_at_end, 2);
    }

    #[test]
    fn the_default_study_conserves_pages_and_mtm_keeps_more_accesses_on_top() {
        let study = tier_study_default(1000);
        let linux = run_tier_study(&study, Tiering::Linux(NumaBalancingSysctls { mode: 2, ..Default::default() }));
        let mtm = run_tier_study(&study, Tiering::Mtm(MtmParams::default()));
        let e = linux.events;
        // Every promotion is to the top tier; every migration a promotion or a demotion.
        assert_eq!(e.pgpromote_success, e.numa_pages_migrated);
        assert_eq!(e.pgmigrate_success, e.pgpromote_success + e.pgdemote_kswapd);
        assert_eq!((linux.accesses, mtm.accesses), (200_000, 200_000));
        assert!(mtm.top_tier_accesses > linux.top_tier_accesses, "{mtm:?} {linux:?}");
    }
}
