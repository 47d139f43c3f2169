//! MGLRU's generations, aging walk, Bloom filter and eviction, derived by hand on a few PTEs.

use super::*;
use std::collections::BTreeMap;

/// Page tables as a map: PMD address → (address → (folio, young)).
#[derive(Default)]
struct Pt(BTreeMap<u64, BTreeMap<u64, (FolioId, bool)>>);

impl Pt {
    fn map(&mut self, va: u64, folio: FolioId, young: bool) {
        self.0.entry(va & !((2 << 20) - 1)).or_default().insert(va, (folio, young));
    }
    fn young(&self, va: u64) -> bool {
        self.0[&(va & !((2 << 20) - 1))][&va].1
    }
}

impl PageTables for Pt {
    fn pmds(&self) -> Vec<u64> {
        self.0.keys().copied().collect()
    }
    fn ptes(&self, pmd: u64) -> Vec<(u64, FolioId, bool)> {
        self.0.get(&pmd).map_or(Vec::new(), |t| t.iter().map(|(va, (f, y))| (*va, *f, *y)).collect())
    }
    fn clear_young(&mut self, va: u64) {
        self.0.get_mut(&(va & !((2 << 20) - 1))).and_then(|t| t.get_mut(&va)).expect("mapped").1 = false;
    }
}

const A: u64 = 0x20_0000;
const B: u64 = 0x40_0000;

/// Folios 1, 2, 3 at A, A+4K, A+8K in generation 1; folio 2's PTE young. The walk moves 2 to
/// the new generation 2 and clears its bit; 1 young PTE of 3 is suitable (1 × 8 ≥ 3), so A
/// goes into the filter of seq 3 and is the walk's aging event.
#[test]
fn aging_promotes_a_young_folio_and_reports_its_pmd() {
    let (mut g, mut pt) = (LruGen::default(), Pt::default());
    for (i, f) in [1, 2, 3].into_iter().enumerate() {
        g.add_folio(f);
        pt.map(A + i as u64 * 4096, f, f == 2);
    }
    assert_eq!((g.min_seq, g.max_seq, g.seq_of(2)), (0, 1, Some(1)));
    assert!(g.try_to_inc_max_seq(&mut pt, true));
    assert_eq!(g.max_seq, 2);
    assert_eq!((g.seq_of(1), g.seq_of(2), g.seq_of(3)), (Some(1), Some(2), Some(1)));
    assert!(!pt.young(A + 4096), "the walk clears the accessed bit");
    assert_eq!(g.take_aging_events(), vec![AgingEvent { seq: 2, young_pmds: vec![(A, 1, 3)] }]);
    assert!(g.take_aging_events().is_empty());
}

/// Folios 1..=4 added in order to generation 1, nothing young; aging makes seq 2 and
/// `inc_min_seq` retires the empty generation 0. Eviction takes the oldest generation's tail,
/// the first added first: 1, 2. Then folio 3's PTE is young: reclaim's rmap walk finds it,
/// `lru_gen_look_around` promotes it to max_seq (2), and 4 is evicted.
#[test]
fn eviction_takes_the_oldest_generation_oldest_first_and_spares_a_young_folio() {
    let (mut g, mut pt) = (LruGen::default(), Pt::default());
    for f in 1..=4u64 {
        g.add_folio(f);
        pt.map(A + f * 4096, f, false);
    }
    assert!(g.try_to_inc_max_seq(&mut pt, true));
    let young = |pt: &dyn PageTables, f: FolioId| pt.ptes(A).into_iter().find(|p| p.1 == f && p.2).map(|p| p.0);
    assert_eq!(g.evict_folios(&mut pt, 2, &young), vec![1, 2]);
    assert_eq!(g.min_seq, 1);
    pt.map(A + 3 * 4096, 3, true);
    assert_eq!(g.evict_folios(&mut pt, 2, &young), vec![4]);
    assert_eq!(g.seq_of(3), Some(2));
    assert!(!pt.young(A + 3 * 4096));
    assert_eq!(g.folios(1), Vec::<FolioId>::new());
}

/// A holds 8 PTEs, all young (suitable); B holds 16, one young (1 × 8 < 16: not suitable).
/// After the first (forced) walk A is in the filter of the next seq and B is not; the next,
/// (The walk from seq 1 fills the filter of seq 2; the walk from seq 2 tests it.) The next,
/// unforced walk visits A only: B's young folio stays in its generation, A's is promoted.
#[test]
fn the_bloom_filter_holds_the_pmds_with_enough_young_ptes() {
    let (mut g, mut pt) = (LruGen::default(), Pt::default());
    for i in 0..8u64 {
        g.add_folio(100 + i);
        pt.map(A + i * 4096, 100 + i, true);
    }
    for i in 0..16u64 {
        g.add_folio(200 + i);
        pt.map(B + i * 4096, 200 + i, i == 0);
    }
    assert!(g.try_to_inc_max_seq(&mut pt, true));
    assert!(g.filters.test(2, A));
    assert!(!g.filters.test(2, B));
    assert_eq!(g.take_aging_events()[0].young_pmds, vec![(A, 8, 8)]);
    pt.map(A, 100, true);
    pt.map(B, 200, true);
    assert!(g.try_to_inc_max_seq(&mut pt, false));
    assert_eq!(g.max_seq, 3);
    assert_eq!((g.seq_of(100), g.seq_of(200)), (Some(3), Some(2)));
    assert!(pt.young(B), "B was not walked");
}

/// Four generations alive and the oldest not empty: aging waits for eviction (MAX_NR_GENS).
#[test]
fn aging_stops_at_four_generations() {
    let (mut g, mut pt) = (LruGen::default(), Pt::default());
    g.add_folio(1);
    pt.map(A, 1, false);
    assert!(g.try_to_inc_max_seq(&mut pt, true));
    assert!(g.try_to_inc_max_seq(&mut pt, true));
    assert_eq!((g.min_seq, g.max_seq), (1, 3));
    g.add_folio(2);
    assert!(g.try_to_inc_max_seq(&mut pt, true));
    assert_eq!((g.min_seq, g.max_seq, g.nr_gens()), (1, 4, 4));
    assert!(!g.try_to_inc_max_seq(&mut pt, true), "folio 1 is still in generation 1");
    let never = |_: &dyn PageTables, _| None;
    assert_eq!(g.evict_folios(&mut pt, 1, &never), vec![1]);
    // Generation 1 and then 2 are empty: min_seq moves to 3, where folio 2 is.
    assert!(g.try_to_inc_max_seq(&mut pt, true));
    assert_eq!((g.min_seq, g.max_seq), (3, 5));
}

/// `lru_gen_look_around` at A + 40 pages (70 PTEs mapped from A): the window is pages 8..72 of
/// the PMD, of which 8..69 are mapped (62 PTEs). Pages 5, 10, 15, 20, 30, 40, 50, 60, 69 are
/// young: the eight inside the window are promoted to max_seq (2) and cleared, page 5 is left
/// alone; 8 young × 8 ≥ 62, so A joins the filter the next walk tests (seq 2's), which the
/// walk that made seq 2 had left empty (nothing was young then).
#[test]
fn look_around_promotes_the_young_neighbours_and_fills_the_filter() {
    let (mut g, mut pt) = (LruGen::default(), Pt::default());
    for i in 0..70u64 {
        g.add_folio(i);
        pt.map(A + i * 4096, i, false);
    }
    assert!(g.try_to_inc_max_seq(&mut pt, true));
    assert!(!g.filters.test(2, A));
    let young = [5u64, 10, 15, 20, 30, 40, 50, 60, 69];
    for i in young {
        pt.map(A + i * 4096, i, true);
    }
    let mut promoted = g.lru_gen_look_around(&mut pt, A + 40 * 4096);
    promoted.sort();
    assert_eq!(promoted, vec![10, 15, 20, 30, 40, 50, 60, 69]);
    assert!(promoted.iter().all(|f| g.seq_of(*f) == Some(2) && !pt.young(A + f * 4096)));
    assert_eq!(g.seq_of(5), Some(1));
    assert!(pt.young(A + 5 * 4096));
    assert!(g.filters.test(2, A));
}
