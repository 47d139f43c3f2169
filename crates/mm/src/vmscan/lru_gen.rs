//! MGLRU, the multi-generational LRU, as a second reclaim algorithm of the model: MODEL-ONLY
//! (this machine's kernel has `CONFIG_LRU_GEN` off and reclaims with the classic active/inactive
//! LRU of [`crate::vmscan`], so nothing here can be checked against the live kernel).
//!
//! Kernel sources (6.18): `mm/vmscan.c` (`inc_max_seq`, `inc_min_seq`, `try_to_inc_max_seq`,
//! `walk_mm`, `walk_pmd_range`, `walk_pte_range`, `suitable_to_scan`, `update_bloom_filter`,
//! `test_bloom_filter`, `reset_bloom_filter`, `get_item_key`, `evict_folios`, `isolate_folios`,
//! `sort_folio`, `lru_gen_look_around`), `include/linux/mmzone.h` (`MIN_NR_GENS` 2,
//! `MAX_NR_GENS` 4, `MIN_LRU_BATCH` = BITS_PER_LONG), `include/linux/mm_inline.h`
//! (`lru_gen_from_seq`, `lru_gen_add_folio`: a new folio joins the youngest generation),
//! `include/linux/hash.h` (`hash_64`).
//!
//! What is modelled: generations `min_seq..=max_seq` (at most four), a folio's generation
//! `seq % MAX_NR_GENS`; aging (`inc_max_seq` after a page-table walk, [`LruGen::walk_mm`],
//! that moves every folio it finds young to the youngest generation, clears the accessed bits,
//! and records in the Bloom filter of the next walk the PMDs whose PTE tables held enough young
//! PTEs: `suitable_to_scan`, at least one young PTE per cache line of 8); the next walk skips
//! the PMDs its filter does not hold (unless forced); eviction from the oldest generation
//! ([`LruGen::evict_folios`]): a folio promoted since it was isolated is moved (`sort_folio`),
//! one whose PTEs are young is promoted by `lru_gen_look_around` (which also promotes the young
//! folios within MIN_LRU_BATCH PTEs around it and adds the PMD to the filter when they are
//! many), the others are evicted oldest first. `inc_min_seq` retires an empty oldest
//! generation; at four generations `inc_max_seq` moves the oldest one's folios on first.
//! Checked against 6.18 (gfunkmonk/linux-6.18.2): `walk_pte_range` counts every PTE slot of the
//! PMD range inside the VMA in `total` (present or not), `lru_gen_look_around`'s window is
//! clipped to the VMA and slides against the nearer end, and the debugfs trigger's `run_aging`
//! forces the scan by default.
//!
//! Left out: tiers and the PID controller (`folio_lru_refs`, `get_tier_idx`: refs through file
//! descriptors, which anon memory does not have), the anon/file balance (`get_type_to_scan`:
//! the model has anon only), per-memcg and per-node lruvecs (one per mm here), the `mm_list`
//! iteration (each mm is walked in turn), `lru_gen_min_ttl`, non-leaf PMD young bits. Not wired
//! into reclaim: the classic LRU still serves `--memory-max` runs. Wired as the hint policies'
//! source (#29): [`crate::Kernel::lru_gen_aging`] walks the model's page tables (the
//! experiment's user-space aging trigger, crates/sim/src/hint_daemon.rs) and reports what it
//! found ([`AgingPass`]) to `ThpPolicy::hotness`.

use std::collections::{HashMap, VecDeque};

/// `MIN_NR_GENS`.
pub const MIN_NR_GENS: u64 = 2;
/// `MAX_NR_GENS`.
pub const MAX_NR_GENS: u64 = 4;
/// `MIN_LRU_BATCH` (BITS_PER_LONG): the PTEs `lru_gen_look_around` looks at.
pub const MIN_LRU_BATCH: u64 = 64;
/// `BLOOM_FILTER_SHIFT`: each of the two filters has 2^15 bits.
pub const BLOOM_FILTER_SHIFT: u32 = 15;
/// PTEs per PMD (x86-64).
const PTRS_PER_PTE: u64 = 512;

/// A folio, by its head page frame.
pub type FolioId = u64;

/// The page tables a walk sees: per PMD (its address, 2 MiB aligned) the present PTEs as
/// (virtual address, folio, accessed bit). The kernel's `walk_page_range` over an mm's VMAs.
pub trait PageTables {
    /// The PMDs that map PTE tables, in address order.
    fn pmds(&self) -> Vec<u64>;
    /// The present PTEs of the PTE table under `pmd`: (address, folio, young).
    fn ptes(&self, pmd: u64) -> Vec<(u64, FolioId, bool)>;
    /// `ptep_test_and_clear_young`.
    fn clear_young(&mut self, va: u64);
    /// The part of the PMD range at `pmd` its VMA covers, [start, end): the PTE slots a walk
    /// counts (`walk_pte_range`'s `total` counts every slot, present or not).
    fn span(&self, pmd: u64) -> (u64, u64) {
        (pmd, pmd + PTRS_PER_PTE * 4096)
    }
}

/// What one aging walk found: the PMDs whose PTE tables held enough young PTEs to be walked
/// again (the ones it added to the Bloom filter), with their young PTE counts. The input of a
/// collapse hint (#29): a PMD found hot by aging is a candidate for a THP.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgingEvent {
    /// The `max_seq` the walk created.
    pub seq: u64,
    /// (PMD address, young PTEs, PTE slots examined) of each PMD added to the filter.
    pub young_pmds: Vec<(u64, u32, u32)>,
    /// The same of every PMD the walk visited (for a policy that also wants the cold ones).
    pub walked: Vec<(u64, u32, u32)>,
}

/// The two Bloom filters of `lru_gen_mm_state` (`filters[NR_BLOOM_FILTERS]`), indexed by seq.
#[derive(Clone, Debug)]
pub struct BloomFilters {
    bits: [Vec<u64>; 2],
    /// Whether each filter was ever reset (`reset_bloom_filter`): an unset filter lets every
    /// item through (`test_bloom_filter` returns true when there is no filter).
    live: [bool; 2],
}

impl Default for BloomFilters {
    fn default() -> Self {
        let n = (1usize << BLOOM_FILTER_SHIFT) / 64;
        BloomFilters { bits: [vec![0; n], vec![0; n]], live: [false; 2] }
    }
}

/// `get_item_key`: two keys of BLOOM_FILTER_SHIFT bits from `hash_64(item, 2 * SHIFT)`.
fn item_keys(item: u64) -> [usize; 2] {
    const GOLDEN_RATIO_64: u64 = 0x61C8_8646_80B5_83EB;
    let hash = item.wrapping_mul(GOLDEN_RATIO_64) >> (64 - 2 * BLOOM_FILTER_SHIFT);
    let mask = (1u64 << BLOOM_FILTER_SHIFT) - 1;
    [(hash & mask) as usize, (hash >> BLOOM_FILTER_SHIFT) as usize]
}

impl BloomFilters {
    /// `reset_bloom_filter`: clear the filter of `seq`.
    pub fn reset(&mut self, seq: u64) {
        let i = (seq % 2) as usize;
        self.bits[i].iter_mut().for_each(|w| *w = 0);
        self.live[i] = true;
    }
    /// `update_bloom_filter`: add `item` (a PMD's address) to the filter of `seq`.
    pub fn update(&mut self, seq: u64, item: u64) {
        let i = (seq % 2) as usize;
        for k in item_keys(item) {
            self.bits[i][k / 64] |= 1 << (k % 64);
        }
    }
    /// `test_bloom_filter`: whether `item` may be in the filter of `seq` (true without one).
    pub fn test(&self, seq: u64, item: u64) -> bool {
        let i = (seq % 2) as usize;
        !self.live[i] || item_keys(item).iter().all(|k| self.bits[i][k / 64] & (1 << (k % 64)) != 0)
    }
}

/// `suitable_to_scan`: at least one young PTE per cache line (64 bytes: 8 PTEs).
pub fn suitable_to_scan(total: u32, young: u32) -> bool {
    young * 8 >= total
}

/// `lru_gen_look_around`'s window: the span of the PMD range in its VMA, cut to
/// MIN_LRU_BATCH pages centred on `va`, or flush with the nearer end when `va` is within half
/// a batch of it.
pub fn look_around_window((start, end): (u64, u64), va: u64) -> (u64, u64) {
    let batch = MIN_LRU_BATCH * 4096;
    if end - start <= batch {
        (start, end)
    } else if va - start < batch / 2 {
        (start, start + batch)
    } else if end - va < batch / 2 {
        (end - batch, end)
    } else {
        (va - batch / 2, va + batch / 2)
    }
}

/// One lruvec's generations (`struct lru_gen_folio`): anon only, no tiers.
#[derive(Clone, Debug)]
pub struct LruGen {
    pub min_seq: u64,
    pub max_seq: u64,
    /// Per generation (`lru_gen_from_seq`), its folios, the head the youngest (`lru_gen_add_folio`
    /// adds at the head; eviction takes the tail).
    gens: [VecDeque<FolioId>; MAX_NR_GENS as usize],
    /// Each folio's seq (`folio->flags`' gen bits, as a seq).
    seq_of: HashMap<FolioId, u64>,
    pub filters: BloomFilters,
    /// The aging walks' findings, oldest first ([`LruGen::take_aging_events`]).
    events: Vec<AgingEvent>,
    /// PMDs `lru_gen_look_around` found suitable (its `area_access_info` in the collapse-hint
    /// series' 5/5): (PMD, young, slots).
    pub look_around_hot: Vec<(u64, u32, u32)>,
}

impl Default for LruGen {
    /// An empty lruvec with MIN_NR_GENS generations, seqs 0 and 1 (`lru_gen_init_lruvec`
    /// starts at other seqs; only their differences matter).
    fn default() -> Self {
        LruGen { min_seq: 0, max_seq: MIN_NR_GENS - 1, gens: Default::default(), seq_of: HashMap::new(), filters: BloomFilters::default(), events: Vec::new(), look_around_hot: Vec::new() }
    }
}

impl LruGen {
    fn gen(seq: u64) -> usize {
        (seq % MAX_NR_GENS) as usize
    }

    /// Generations alive (`max_seq - min_seq + 1`).
    pub fn nr_gens(&self) -> u64 {
        self.max_seq - self.min_seq + 1
    }

    /// The seq of `folio`'s generation, if it is on the LRU.
    pub fn seq_of(&self, folio: FolioId) -> Option<u64> {
        self.seq_of.get(&folio).copied()
    }

    /// The folios of generation `seq`, youngest first.
    pub fn folios(&self, seq: u64) -> Vec<FolioId> {
        let mut seen = std::collections::HashSet::new();
        self.gens[Self::gen(seq)].iter().copied().filter(|f| self.seq_of.get(f) == Some(&seq) && seen.insert(*f)).collect()
    }

    /// `lru_gen_add_folio` of a new folio: the youngest generation.
    pub fn add_folio(&mut self, folio: FolioId) {
        self.move_to(folio, self.max_seq);
    }

    /// Take `folio` off the LRU (freed, unmapped). Its entry in its generation's list goes
    /// stale (readers check `seq_of`), so that a move costs O(1), as a list_move does.
    pub fn del_folio(&mut self, folio: FolioId) {
        self.seq_of.remove(&folio);
    }

    /// `folio_update_gen`/`folio_inc_gen` to `seq`: moved to that generation's head.
    fn move_to(&mut self, folio: FolioId, seq: u64) {
        if self.seq_of.insert(folio, seq) != Some(seq) {
            self.gens[Self::gen(seq)].push_front(folio);
        }
    }

    /// `inc_min_seq`: retire the oldest generations that are empty, keeping MIN_NR_GENS.
    pub fn inc_min_seq(&mut self) {
        while self.nr_gens() > MIN_NR_GENS && self.folios(self.min_seq).is_empty() {
            self.gens[Self::gen(self.min_seq)].clear();
            self.min_seq += 1;
        }
    }

    /// `inc_min_seq` at MAX_NR_GENS: the oldest generation's folios, oldest first, go to the
    /// tail of the next generation, and `min_seq` moves on.
    fn inc_min_seq_forced(&mut self) {
        let (old, next) = (self.min_seq, self.min_seq + 1);
        while let Some(folio) = self.gens[Self::gen(old)].pop_back() {
            if self.seq_of.get(&folio) == Some(&old) {
                self.gens[Self::gen(next)].push_back(folio);
                self.seq_of.insert(folio, next);
            }
        }
        self.min_seq = next;
    }

    /// `try_to_inc_max_seq` → `walk_mm` over `pt` → `inc_max_seq`: one aging pass. With four
    /// generations alive, `inc_max_seq` first calls `inc_min_seq` (6.18's, for an evictable
    /// type: anon with swappiness above 0), which moves the oldest generation's folios to the
    /// next one's tail (`folio_inc_gen`, "prevent cold/hot inversion") and retires it. Returns
    /// true (the kernel's false is a race with another aging, which the model has not).
    /// `force_scan` walks every PMD (`lru_gen_age_node` with a forced scan, or when the
    /// filter of this seq was never built).
    pub fn try_to_inc_max_seq(&mut self, pt: &mut dyn PageTables, force_scan: bool) -> bool {
        self.inc_min_seq();
        if self.nr_gens() == MAX_NR_GENS {
            self.inc_min_seq_forced();
        }
        // The walk from max_seq tests max_seq's filter and fills the next one (reset first).
        let new_seq = self.max_seq + 1;
        self.filters.reset(new_seq);
        let event = self.walk_mm(pt, new_seq, force_scan);
        self.max_seq = new_seq;
        self.events.push(event);
        true
    }

    /// `walk_mm` → `walk_pmd_range` → `walk_pte_range`: each PMD this walk's filter holds (every
    /// PMD when forced), its young PTEs' folios moved to `new_seq` and their accessed bits
    /// cleared; a PMD `suitable_to_scan` goes into the next walk's filter.
    fn walk_mm(&mut self, pt: &mut dyn PageTables, new_seq: u64, force_scan: bool) -> AgingEvent {
        let mut event = AgingEvent { seq: new_seq, ..Default::default() };
        for pmd in pt.pmds() {
            if !force_scan && !self.filters.test(self.max_seq, pmd) {
                continue;
            }
            let ptes = pt.ptes(pmd);
            let (start, end) = pt.span(pmd);
            let total = ((end - start) / 4096) as u32;
            let mut young = 0u32;
            for &(va, folio, y) in &ptes {
                if y {
                    young += 1;
                    pt.clear_young(va);
                    if self.seq_of.contains_key(&folio) {
                        self.move_to(folio, new_seq);
                    }
                }
            }
            event.walked.push((pmd, young, total));
            if young > 0 && suitable_to_scan(total, young) {
                self.filters.update(new_seq, pmd);
                event.young_pmds.push((pmd, young, total));
            }
        }
        event
    }

    /// `lru_gen_look_around`: reclaim's rmap walk found `va` young (the kernel has cleared that
    /// PTE's bit and counts it young). The window is the PMD range clipped to the VMA
    /// ([`PageTables::span`]), cut to MIN_LRU_BATCH PTEs around `va` (or against the nearer
    /// end); its young PTEs' folios go to `max_seq` and their bits are cleared, and the PMD
    /// joins the filter the next walk tests (max_seq's) when `suitable_to_scan(slots, young)`.
    /// Returns the folios promoted.
    pub fn lru_gen_look_around(&mut self, pt: &mut dyn PageTables, va: u64) -> Vec<FolioId> {
        let pmd = va & !(PTRS_PER_PTE * 4096 - 1);
        let (lo, hi) = look_around_window(pt.span(pmd), va);
        let window: Vec<_> = pt.ptes(pmd).into_iter().filter(|(a, _, _)| (lo..hi).contains(a)).collect();
        let mut promoted = Vec::new();
        let mut young = 0u32;
        for &(a, folio, y) in &window {
            if !y && a != va {
                continue;
            }
            young += 1;
            pt.clear_young(a);
            if self.seq_of.contains_key(&folio) && !promoted.contains(&folio) {
                self.move_to(folio, self.max_seq);
                promoted.push(folio);
            }
        }
        if suitable_to_scan(((hi - lo) / 4096) as u32, young) {
            self.filters.update(self.max_seq, pmd);
            self.look_around_hot.push((pmd, young, ((hi - lo) / 4096) as u32));
        }
        promoted
    }

    /// `evict_folios` → `isolate_folios` from the oldest generation, `sort_folio` and
    /// `shrink_folio_list`: up to `nr_to_scan` folios from the tail of `min_seq`'s generation;
    /// a folio `young(folio)` reports a young PTE for (reclaim's `folio_referenced`, which
    /// calls `lru_gen_look_around` at `va`) is promoted with its neighbours, the others are
    /// evicted. Returns the folios evicted, in eviction order (the caller swaps them out).
    pub fn evict_folios(&mut self, pt: &mut dyn PageTables, nr_to_scan: usize, young: &dyn Fn(&dyn PageTables, FolioId) -> Option<u64>) -> Vec<FolioId> {
        self.inc_min_seq();
        let seq = self.min_seq;
        let mut evicted = Vec::new();
        let mut scanned = 0;
        while scanned < nr_to_scan {
            let Some(folio) = self.gens[Self::gen(seq)].pop_back() else { break };
            match self.seq_of.get(&folio) {
                // sort_folio: promoted since (or another seq's leftover, or a stale entry of a
                // folio moved or deleted): not this generation's, and not counted.
                Some(s) if *s != seq => continue,
                None => continue,
                Some(_) => {}
            }
            // Off the list while it is looked at: a promotion puts it at its new generation's
            // head, an eviction takes it off the LRU.
            scanned += 1;
            if let Some(va) = young(pt, folio) {
                self.lru_gen_look_around(pt, va);
                // Referenced: promoted even where the window missed it (folio_referenced).
                if self.seq_of(folio) == Some(seq) {
                    self.move_to(folio, self.max_seq);
                }
                continue;
            }
            self.del_folio(folio);
            evicted.push(folio);
        }
        evicted
    }

    /// The aging walks' findings since the last call, oldest first (for the collapse-hint
    /// policy, #29).
    pub fn take_aging_events(&mut self) -> Vec<AgingEvent> {
        std::mem::take(&mut self.events)
    }
}

/// The model's CPU cost of an aging walk (an estimate, not measured: reading a PTE and its
/// accessed bit, and taking a PTE table's lock and filter test): ns per PTE slot examined and
/// per PMD visited.
pub const WALK_NS_PER_PTE: u64 = 2;
pub const WALK_NS_PER_PMD: u64 = 50;

/// The current mm's PTE tables under its anonymous VMAs, as `walk_mm` sees them: (PMD
/// address, PTE table, the VMA's span in the range).
struct MmTables<'a> {
    k: &'a mut crate::Kernel,
    tables: Vec<(u64, u32, (u64, u64))>,
}

impl MmTables<'_> {
    fn table(&self, pmd: u64) -> Option<&(u64, u32, (u64, u64))> {
        self.tables.iter().find(|t| t.0 == pmd)
    }
}

impl PageTables for MmTables<'_> {
    fn pmds(&self) -> Vec<u64> {
        self.tables.iter().map(|t| t.0).collect()
    }
    /// `get_pte_pfn` skips the zero page: only present pages of folios.
    fn ptes(&self, pmd: u64) -> Vec<(u64, FolioId, bool)> {
        use crate::pgtable::{pte_pfn, PTE_YOUNG, PTE_ZERO};
        let Some(&(_, idx, (s, e))) = self.table(pmd) else { return Vec::new() };
        let range = ((s - pmd) / 4096) as usize..((e - pmd) / 4096) as usize;
        let pt = &self.k.mm.pt;
        pt.present_ptes(idx, range)
            .filter(|(_, e)| e & PTE_ZERO == 0)
            .map(|(i, e)| (pmd + i as u64 * 4096, self.k.folio_head(pte_pfn(e)).0 as FolioId, e & PTE_YOUNG != 0))
            .collect()
    }
    fn clear_young(&mut self, va: u64) {
        let pmd = va & !(PTRS_PER_PTE * 4096 - 1);
        if let Some(&(_, idx, _)) = self.table(pmd) {
            let i = ((va - pmd) / 4096) as usize;
            let e = self.k.mm.pt.pte(idx, i);
            self.k.mm.pt.set_pte(idx, i, e & !crate::pgtable::PTE_YOUNG);
        }
    }
    fn span(&self, pmd: u64) -> (u64, u64) {
        self.table(pmd).map_or((pmd, pmd + PTRS_PER_PTE * 4096), |t| t.2)
    }
}

/// What one aging pass over every mm found, for the hint policies.
#[derive(Clone, Debug, Default)]
pub struct AgingPass {
    /// (mm, PMD address, young, slots, PMD-mapped, suitable) of every range visited.
    pub ranges: Vec<(u32, u64, u32, u32, bool, bool)>,
    /// The walk's modelled CPU time.
    pub cpu_ns: u64,
}

impl AgingPass {
    /// The pass as a hint policy reads it (`ThpPolicy::hotness`).
    pub fn hot_ranges(&self) -> Vec<policy::HotRange> {
        self.ranges
            .iter()
            .map(|r| policy::HotRange { range: policy::Range { mm: r.0, addr: r.1 }, young: r.2, total: r.3, pmd_mapped: r.4, hot: r.5 })
            .collect()
    }
}

impl crate::Kernel {
    /// The user-space aging trigger of the collapse-hint experiment (a write of `+ memcg node
    /// seq` to debugfs `lru_gen`: `run_aging` with `force_scan`, the default of that interface,
    /// so every PMD is walked): `try_to_inc_max_seq` on each live mm's generations in `gens`
    /// (one lruvec per mm here; the kernel has one per memcg and node and walks the memcg's
    /// mm_list). A PMD-mapped folio's young PMD is cleared and counted as 512 young
    /// (`walk_pmd_range_locked`). Folios join the generations at their first walk (the model's
    /// fault path does not call `lru_gen_add_folio`).
    pub fn lru_gen_aging(&mut self, gens: &mut Vec<LruGen>, force_scan: bool) -> AgingPass {
        let mut pass = AgingPass::default();
        let prev = self.mm.id;
        for id in self.mm_ids().collect::<Vec<_>>() {
            if self.mm_exited(id) {
                continue;
            }
            self.switch_mm(id);
            if gens.len() <= id.0 as usize {
                gens.resize_with(id.0 as usize + 1, LruGen::default);
            }
            self.lru_gen_walk_current(&mut gens[id.0 as usize], force_scan, &mut pass);
        }
        self.switch_mm(prev);
        pass
    }

    fn lru_gen_walk_current(&mut self, gen: &mut LruGen, force_scan: bool, pass: &mut AgingPass) {
        use crate::pgtable::Pmd;
        let mm = self.mm.id.0;
        let pmd_size = PTRS_PER_PTE * 4096;
        let mut tables = Vec::new();
        let vmas: Vec<_> = self.mm.vmas.iter().filter(|v| v.inode().is_none()).map(|v| (v.start, v.end)).collect();
        for (start, end) in vmas {
            let mut pmd = start & !(pmd_size - 1);
            while pmd < end {
                let va = mm_types::Vaddr(pmd);
                if let Some(t) = self.mm.pt.pmd_table_ro(va) {
                    match self.mm.pt.pmd(t, va) {
                        Pmd::Table(idx) => tables.push((pmd, idx, (start.max(pmd), end.min(pmd + pmd_size)))),
                        Pmd::Huge { pfn, young, dirty, write } => {
                            if young {
                                self.mm.pt.set_pmd(t, va, Pmd::Huge { pfn, young: false, dirty, write });
                            }
                            let y = if young { 512 } else { 0 };
                            pass.ranges.push((mm, pmd, y, 512, true, young));
                            pass.cpu_ns += WALK_NS_PER_PMD;
                        }
                        _ => {}
                    }
                }
                pmd += pmd_size;
            }
        }
        let mut pt = MmTables { k: self, tables };
        for pmd in pt.pmds() {
            for (_, folio, _) in pt.ptes(pmd) {
                if gen.seq_of(folio).is_none() {
                    gen.add_folio(folio);
                }
            }
        }
        gen.try_to_inc_max_seq(&mut pt, force_scan);
        for e in gen.take_aging_events() {
            for (pmd, young, total) in e.walked {
                pass.ranges.push((mm, pmd, young, total, false, young > 0 && suitable_to_scan(total, young)));
                pass.cpu_ns += WALK_NS_PER_PMD + WALK_NS_PER_PTE * total as u64;
            }
        }
    }
}

#[cfg(test)]
#[path = "lru_gen_tests.rs"]
mod tests;
