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
    /// The VMA of each PMD: from its first mapped page to its last.
    fn span(&self, pmd: u64) -> (u64, u64) {
        let t = &self.0[&pmd];
        (*t.keys().next().unwrap(), t.keys().last().unwrap() + 4096)
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
    assert_eq!(g.take_aging_events(), vec![AgingEvent { seq: 2, young_pmds: vec![(A, 1, 3)], walked: vec![(A, 1, 3)] }]);
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

/// Four generations alive and the oldest not empty: 6.18's `inc_max_seq` calls `inc_min_seq`,
/// which moves the oldest generation's folios to the next one and retires it, then ages (it
/// does not wait for eviction). Folio 1 in seq 1 with seqs 1..=4 alive: the fourth aging moves
/// it to seq 2 (min_seq 2) and makes seq 5; folio 2, added at seq 3, stays there.
#[test]
fn aging_at_four_generations_moves_the_oldest_on() {
    let (mut g, mut pt) = (LruGen::default(), Pt::default());
    g.add_folio(1);
    pt.map(A, 1, false);
    assert!(g.try_to_inc_max_seq(&mut pt, true));
    assert!(g.try_to_inc_max_seq(&mut pt, true));
    assert_eq!((g.min_seq, g.max_seq), (1, 3));
    g.add_folio(2);
    assert!(g.try_to_inc_max_seq(&mut pt, true));
    assert_eq!((g.min_seq, g.max_seq, g.nr_gens()), (1, 4, 4));
    assert!(g.try_to_inc_max_seq(&mut pt, true));
    assert_eq!((g.min_seq, g.max_seq, g.nr_gens()), (2, 5, 4));
    assert_eq!((g.seq_of(1), g.seq_of(2)), (Some(2), Some(3)));
    let never = |_: &dyn PageTables, _| None;
    assert_eq!(g.evict_folios(&mut pt, 1, &never), vec![1]);
    // Generation 2 is empty now: min_seq moves to 3, where folio 2 is.
    assert!(g.try_to_inc_max_seq(&mut pt, true));
    assert_eq!((g.min_seq, g.max_seq), (3, 6));
}

/// `lru_gen_look_around` at A + 40 pages (70 PTEs mapped from A, the VMA): 40 is 30 pages from
/// the VMA's end, under half a batch, so the window is the last 64 pages, 6..70. Pages 5, 10,
/// 15, 20, 30, 40, 50, 60, 69 are young: the eight inside the window are promoted to max_seq
/// (2) and cleared, page 5 is left alone; 8 young × 8 ≥ 64 slots, so A joins the filter the
/// next walk tests (seq 2's), which the walk that made seq 2 had left empty (nothing was young
/// then).
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

/// The window against the span's ends, by hand: a 3-page VMA is the window; in a full PMD,
/// 10 pages from its start the window is its first 64 pages, 5 from its end the last 64, in the
/// middle 32 either side.
#[test]
fn the_look_around_window_follows_the_kernel() {
    let p = 4096;
    assert_eq!(look_around_window((A, A + 3 * p), A + p), (A, A + 3 * p));
    assert_eq!(look_around_window((A, A + 512 * p), A + 10 * p), (A, A + 64 * p));
    assert_eq!(look_around_window((A, A + 512 * p), A + 507 * p), (A + 448 * p, A + 512 * p));
    assert_eq!(look_around_window((A, A + 512 * p), A + 100 * p), (A + 68 * p, A + 132 * p));
}

/// A walk counts every slot of the span, present or not: 64 young of a PMD range with only
/// those 64 mapped in a full 512-page VMA is 64 × 8 = 512 ≥ 512, suitable; 63 is not.
#[test]
fn the_walk_counts_slots_not_present_ptes() {
    struct Full(Pt);
    impl PageTables for Full {
        fn pmds(&self) -> Vec<u64> {
            self.0.pmds()
        }
        fn ptes(&self, pmd: u64) -> Vec<(u64, FolioId, bool)> {
            self.0.ptes(pmd)
        }
        fn clear_young(&mut self, va: u64) {
            self.0.clear_young(va)
        }
    }
    let (mut g, mut pt) = (LruGen::default(), Full(Pt::default()));
    for i in 0..64u64 {
        pt.0.map(A + i * 4096, i, true);
        pt.0.map(B + i * 4096, 100 + i, i < 63);
    }
    assert!(g.try_to_inc_max_seq(&mut pt, true));
    let e = g.take_aging_events().remove(0);
    assert_eq!(e.young_pmds, vec![(A, 64, 512)]);
    assert_eq!(e.walked, vec![(A, 64, 512), (B, 63, 512)]);
}

/// The aging trigger over the model's page tables feeding collapse hints, and khugepaged
/// serving them (`policy=collapse-hints`, pages_to_scan 1024: two ranges a wake-up). Three
/// PMD ranges A, B, C written as 4 KiB pages: the forced walk finds 512 of 512 young in each
/// (hot, prio 0) and clears the bits. B and C are written again, C is unmapped. Wake-up 1:
/// hint A is scanned (512) and fails with no young PTE (SCAN_LACK_REFERENCED_PAGE: aging
/// cleared them), hint B collapses (512): the budget is spent, C waits. Wake-up 2: hint C's
/// VMA is gone (charged 1), then the round-robin scan.
#[test]
fn aging_hints_are_served_once_before_the_scan() {
    use crate::madvise::Madvise;
    use crate::mmap::MmapPlacement;
    use crate::vma::vm;
    let mut s = thp_abi::ThpSettings::default();
    for a in ["enabled=madvise", "khugepaged/pages_to_scan=1024", "policy=collapse-hints"] {
        s.apply_assignment(a).unwrap();
    }
    let mut k = crate::Kernel::boot(&crate::BootParams { mem_bytes: 256 << 20, ..Default::default() }, &s);
    let m = 2u64 << 20;
    let a = k.do_mmap(3 * m, vm::READ | vm::WRITE, MmapPlacement::Aligned { align: m, offset: 0 }).unwrap();
    for p in 0..1536 {
        k.access(a + p * 4096, true);
    }
    k.do_madvise(a, 3 * m, Madvise::Hugepage).unwrap();
    let mut gens = Vec::new();
    let pass = k.lru_gen_aging(&mut gens, true);
    assert_eq!(pass.ranges, [(0, a, 512, 512, false, true), (0, a + m, 512, 512, false, true), (0, a + 2 * m, 512, 512, false, true)]);
    assert_eq!(pass.cpu_ns, 3 * (WALK_NS_PER_PMD + 512 * WALK_NS_PER_PTE));
    assert_eq!(gens[0].max_seq, 2);
    for p in 512..1536 {
        k.access(a + p * 4096, true);
    }
    k.do_munmap(a + 2 * m, m).unwrap();
    assert_eq!(k.policy_hotness(&pass.hot_ranges()), 0);
    k.khugepaged_do_scan();
    let h = k.khugepaged_state().hints;
    assert_eq!((h.served, h.collapsed, h.vanished), (2, 1, 0));
    assert_eq!((k.khugepaged_state().pages_collapsed, k.khugepaged_state().pmds_scanned), (1, 2));
    k.khugepaged_do_scan();
    let h = k.khugepaged_state().hints;
    assert_eq!((h.served, h.collapsed, h.vanished), (3, 1, 1));
    let q = k.policy.hint_stats().unwrap();
    assert_eq!((q.added, q.served), (3, 3));
    k.check_invariants().unwrap();
}

/// A split the policy proposes is `split_huge_page`'s: the folio's PMD is split in every mm that
/// maps it. Two PMD THPs A and B written, then forked (the child maps both by PMD too); global
/// hints (installed after the faults) with a budget of one PMD folio (2 MiB) and a pass that finds A cold and B young: A is
/// split, in the parent and in the child (no huge PMD is left pointing into the split folio),
/// B stays whole in both.
#[test]
fn a_proposed_split_unmaps_the_folio_in_every_mm() {
    use crate::mmap::MmapPlacement;
    use crate::pgtable::Pmd;
    use crate::vma::vm;
    use mm_types::Vaddr;
    let mut s = thp_abi::ThpSettings::default();
    s.apply_assignment("enabled=always").unwrap();
    let mut k = crate::Kernel::boot(&crate::BootParams { mem_bytes: 256 << 20, ..Default::default() }, &s);
    let m = 2u64 << 20;
    let a = k.do_mmap(2 * m, vm::READ | vm::WRITE, MmapPlacement::Aligned { align: m, offset: 0 }).unwrap();
    k.access(a, true);
    k.access(a + m, true);
    let parent = k.current_mm();
    k.check_invariants().unwrap();
    let (child, _) = k.fork().unwrap();
    k.check_invariants().unwrap();
    k.switch_mm(parent);
    let huge = |k: &mut crate::Kernel, mm, va: u64| {
        k.switch_mm(mm);
        let t = k.mm.pt.pmd_table_ro(Vaddr(va)).unwrap();
        matches!(k.mm.pt.pmd(t, Vaddr(va)), Pmd::Huge { .. })
    };
    assert!(huge(&mut k, parent, a) && huge(&mut k, child, a) && huge(&mut k, child, a + m));
    // Global hints give PMD faults only where a pass found the range hot: installed after the
    // faults, as a policy the run switches to.
    let p = thp_abi::Policy::parse("global-hints:budget=2").unwrap();
    k.set_policy(policy::for_settings(thp_abi::KernelVersion::V6_18, Some(p)));
    k.switch_mm(parent);
    k.check_invariants().unwrap();
    let r = |addr, young| policy::HotRange { range: policy::Range { mm: parent.0 as u32, addr }, young, total: 512, pmd_mapped: true, hot: young >= 64 };
    assert_eq!(k.policy_hotness(&[r(a, 0), r(a + m, 512)]), 1);
    assert_eq!((huge(&mut k, parent, a), huge(&mut k, child, a)), (false, false));
    assert_eq!((huge(&mut k, parent, a + m), huge(&mut k, child, a + m)), (true, true));
    k.switch_mm(parent);
    k.check_invariants().unwrap();
}
