//! The queues of collapse hints, by hand: levels, per-mm order, de-duplication, the per-mm
//! limit and one attempt per hint.

use super::*;

const M: u64 = 2 << 20;

fn queues(levels: u8, per_mm: u32) -> HintQueues {
    HintQueues::new(HintParams { levels, per_mm, ..HintParams::DEFAULT })
}

fn drain(q: &mut HintQueues) -> Vec<(u32, u64)> {
    std::iter::from_fn(|| q.next()).map(|r| (r.mm, r.addr / M)).collect()
}

#[test]
fn the_level_is_the_cold_fraction_in_equal_steps() {
    assert_eq!(priority(2, 512, 512), 0);
    assert_eq!(priority(2, 511, 512), 1);
    assert_eq!(priority(2, 64, 512), 1);
    // 3 levels: 212 of 512 old → ceil(424 / 512) = 1; 412 old → ceil(824 / 512) = 2.
    assert_eq!(priority(3, 300, 512), 1);
    assert_eq!(priority(3, 100, 512), 2);
    assert_eq!(priority(1, 1, 512), 0);
}

/// The series' diagram: prio 0 first; at a level, all hints of the first mm, then the next
/// mm's; a hint's address is its PMD range's.
#[test]
fn levels_first_then_the_first_mm_all_its_hints() {
    let mut q = queues(2, 512);
    assert!(q.add_collapse_hint(0, M + 4096, 0));
    assert!(q.add_collapse_hint(1, 2 * M, 0));
    assert!(q.add_collapse_hint(0, 3 * M, 0));
    assert!(q.add_collapse_hint(1, 4 * M, 1));
    assert!(q.add_collapse_hint(0, 5 * M, 1));
    assert_eq!(q.len(), 5);
    assert_eq!(drain(&mut q), [(0, 1), (0, 3), (1, 2), (1, 4), (0, 5)]);
    assert_eq!(q.stats, HintStats { added: 5, deduplicated: 0, dropped: 0, served: 5, expired: 0 });
}

/// A hint already queued is not queued again; a hotter one moves it up; once served (one
/// attempt) the same range may be hinted again.
#[test]
fn duplicates_are_merged_and_a_served_hint_is_gone() {
    let mut q = queues(2, 512);
    assert!(q.add_collapse_hint(7, 6 * M, 1));
    assert!(q.add_collapse_hint(7, 8 * M, 0));
    assert!(!q.add_collapse_hint(7, 6 * M + 8192, 1));
    assert!(!q.add_collapse_hint(7, 6 * M, 0));
    assert_eq!(q.len(), 2);
    // Moved up behind the level-0 hint of the same mm.
    assert_eq!(drain(&mut q), [(7, 8), (7, 6)]);
    assert_eq!(q.next(), None);
    assert!(q.add_collapse_hint(7, 6 * M, 1));
    assert_eq!(q.stats, HintStats { added: 3, deduplicated: 2, dropped: 0, served: 2, expired: 0 });
}

#[test]
fn the_per_mm_limit_drops_until_a_hint_is_served() {
    let mut q = queues(2, 2);
    assert!(q.add_collapse_hint(0, 0, 1));
    assert!(q.add_collapse_hint(0, M, 1));
    assert!(!q.add_collapse_hint(0, 2 * M, 0));
    // Another mm has its own limit.
    assert!(q.add_collapse_hint(1, 2 * M, 0));
    assert_eq!(q.next(), Some(Range { mm: 1, addr: 2 * M }));
    assert_eq!(q.next(), Some(Range { mm: 0, addr: 0 }));
    assert!(q.add_collapse_hint(0, 2 * M, 0));
    assert_eq!(drain(&mut q), [(0, 2), (0, 1)]);
    assert_eq!(q.stats.dropped, 1);
}

/// A source's findings: only hot PTE-mapped ranges become hints, at their level.
#[test]
fn hot_ranges_become_hints_at_their_level() {
    let mut q = queues(2, 512);
    let r = |addr, young, pmd_mapped, hot| HotRange { range: Range { mm: 0, addr }, young, total: 512, pmd_mapped, hot };
    q.add_hot(&[r(0, 64, false, true), r(M, 512, false, true), r(2 * M, 512, true, true), r(3 * M, 8, false, false)]);
    assert_eq!(drain(&mut q), [(0, 1), (0, 0)]);
    // A pass replaces the hints of the last one not yet served: 0 and 1 queued, 1 served,
    // then a pass finding 3 only: 0 expires.
    q.add_hot(&[r(0, 64, false, true), r(M, 512, false, true)]);
    assert_eq!(q.next(), Some(Range { mm: 0, addr: M }));
    q.add_hot(&[r(3 * M, 100, false, true)]);
    assert_eq!(drain(&mut q), [(0, 3)]);
    assert_eq!((q.stats.expired, q.stats.served), (1, 2 + 1 + 1));
}
