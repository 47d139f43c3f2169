//! DAMON's regions by hand: the initial three-region split, a merge, the random split's
//! bounds, and a hot 2 MiB range found by sampling in the model.

use super::*;
use crate::madvise::Madvise;
use crate::mmap::MmapPlacement;
use crate::vma::vm;
use crate::BootParams;
use thp_abi::ThpSettings;

const M: u64 = 1 << 20;

/// VMAs [0, 4M), [8M, 12M), [100M, 104M): the two largest gaps are both gaps, so three parts
/// of 4 MiB; 12 MiB / 6 regions = 2 MiB each: two regions per part.
#[test]
fn the_initial_regions_are_three_parts_cut_evenly() {
    let r = init_regions(&[(0, 4 * M), (8 * M, 12 * M), (100 * M, 104 * M)], 6);
    let bounds: Vec<(u64, u64)> = r.iter().map(|r| (r.start / M, r.end / M)).collect();
    assert_eq!(bounds, [(0, 2), (2, 4), (8, 10), (10, 12), (100, 102), (102, 104)]);
    // Four VMAs, three gaps (1, 2 and 8 MiB): the 1 MiB gap is inside a part.
    let r = init_regions(&[(0, M), (2 * M, 3 * M), (5 * M, 6 * M), (14 * M, 15 * M)], 1);
    let bounds: Vec<(u64, u64)> = r.iter().map(|r| (r.start / M, r.end / M)).collect();
    assert_eq!(bounds, [(0, 3), (5, 6), (14, 15)]);
}

/// thres 2: the first region (10 accesses, 10 last: age 3 → 4) and the second (12, last 0:
/// one zero, age 0) merge: (10·4K + 12·8K) / 12K = 11 accesses, age (4·4K + 0) / 12K = 1; the
/// third (20, 9 more than 11) stays apart and ages; the fourth is not adjacent.
#[test]
fn a_merge_weighs_by_size_and_ages_first() {
    let k = 4096;
    let r = |s, e, nr, last, age| DamonRegion { start: s * k, end: e * k, sampling_addr: s * k, nr_accesses: nr, last_nr_accesses: last, age };
    let mut v = vec![r(0, 1, 10, 10, 3), r(1, 3, 12, 0, 5), r(3, 4, 20, 20, 0), r(5, 6, 20, 20, 0)];
    Damon::merge_regions(&mut v, 2, 1 << 30);
    let got: Vec<_> = v.iter().map(|r| (r.start / k, r.end / k, r.nr_accesses, r.age)).collect();
    assert_eq!(got, [(0, 3, 11, 1), (3, 4, 20, 1), (5, 6, 20, 1)]);
    // A size limit of 8 KiB keeps the first two apart.
    let mut v = vec![r(0, 1, 10, 10, 3), r(1, 3, 12, 0, 5)];
    Damon::merge_regions(&mut v, 2, 8192);
    assert_eq!(v.len(), 2);
}

/// Every cut is page-aligned at 10–90 % of what it cuts, the pieces tile the region, and a
/// region of two pages is not cut.
#[test]
fn splits_cut_between_ten_and_ninety_percent() {
    let mut rng = Prng::new(7);
    for subs in [2, 3] {
        let mut v = vec![DamonRegion::new(0, 100 * PAGE), DamonRegion::new(200 * PAGE, 202 * PAGE)];
        Damon::split_regions(&mut v, subs, &mut rng);
        assert_eq!(v.last().unwrap(), &DamonRegion::new(200 * PAGE, 202 * PAGE));
        let pieces = &v[..v.len() - 1];
        assert_eq!(pieces.len(), subs, "{v:?}");
        assert_eq!((pieces[0].start, pieces[subs - 1].end), (0, 100 * PAGE));
        assert!(pieces.windows(2).all(|w| w[0].end == w[1].start && w[0].end % PAGE == 0), "{v:?}");
        // The first cut is within 10–90 % of 100 pages.
        assert!((10..=90).contains(&(pieces[1].start / PAGE)) || subs == 3, "{v:?}");
    }
}

/// 8 MiB written once, then its first 2 MiB written again before every sample; 4 regions of
/// 2 MiB. Aggregation 1 (20 samples): region 0 has 20 accesses, age 0 (its last was 0): not
/// hot (min_age 2). Splits cut it; at aggregation 2 its pieces (20 again, last 20) are age 1
/// and merge back (within 20 / 10 = 2, 2 MiB in all); at aggregation 3 they are age 2: the
/// first PMD range is hot, with all 20 samples as 512 young. The rest had no access.
#[test]
fn sampling_finds_the_hot_pmd_range() {
    let mut s = ThpSettings::default();
    s.apply_assignment("enabled=never").unwrap();
    let mut k = Kernel::boot(&BootParams { mem_bytes: 256 << 20, ..Default::default() }, &s);
    let a = k.do_mmap(8 * M, vm::READ | vm::WRITE, MmapPlacement::Aligned { align: 2 * M, offset: 0 }).unwrap();
    k.do_madvise(a, 8 * M, Madvise::Nohugepage).unwrap();
    for p in 0..2048 {
        k.access(a + p * PAGE, true);
    }
    let mut d = Damon::new(DamonAttrs { min_nr_regions: 4, ..Default::default() }, DamosCollapse::default(), 1);
    let mut found = Vec::new();
    for _ in 0..=60 {
        for p in 0..512 {
            k.access(a + p * PAGE, false);
        }
        if let Some(f) = k.damon_sample(&mut d) {
            found.push(f);
        }
    }
    assert_eq!(d.targets[0].0, 0);
    assert_eq!(found.len(), 3);
    assert!(found[0].is_empty() && found[1].is_empty(), "{found:?}");
    let hot = policy::HotRange { range: policy::Range { mm: 0, addr: a }, young: 512, total: 512, pmd_mapped: false, hot: true };
    assert_eq!(found[2], [hot]);
    assert!(d.cpu_ns > 0);
}
