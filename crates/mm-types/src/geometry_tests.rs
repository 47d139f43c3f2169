//! Each granule's geometry against values derived by hand from the 6.18 arm64 source
//! (pgtable-hwdef.h formulas, Kconfig defaults), and the sysfs size list against this x86
//! machine's /sys/kernel/mm/transparent_hugepage (4 KiB).

use super::*;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

#[test]
fn parse_takes_the_three_sizes_only() {
    assert_eq!(Granule::parse("4K"), Some(Granule::K4));
    assert_eq!(Granule::parse("16k"), Some(Granule::K16));
    assert_eq!(Granule::parse("64KiB"), Some(Granule::K64));
    assert_eq!(Granule::parse("65536"), Some(Granule::K64));
    assert_eq!(Granule::parse("8K"), None);
    assert_eq!(Granule::parse("2M"), None);
    assert_eq!(Granule::parse("x"), None);
    assert_eq!(Granule::default(), Granule::K4);
}

#[test]
fn four_kib_is_x86s_geometry() {
    let g = PageGeometry::X86_4K;
    assert_eq!((g.page_size(), g.ptrs_per_table(), g.levels), (4 * KIB, 512, 4));
    assert_eq!((g.pmd_order(), g.pmd_size(), 1u64 << g.pud_shift()), (Order(9), 2 * MIB, GIB));
    assert_eq!((g.cont_ptes(), g.cont_pte_size(), g.cont_pmds(), g.cont_pmd_size()), (16, 64 * KIB, 16, 32 * MIB));
    assert_eq!((g.max_page_order, g.max_block_size()), (10, 4 * MIB));
    assert_eq!(g.thp_orders_all_anon().iter_desc().map(|o| o.0).collect::<Vec<_>>(), [9, 8, 7, 6, 5, 4, 3, 2]);
    // ls /sys/kernel/mm/transparent_hugepage on this 6.18 x86 machine: hugepages-8kB ..= 2048kB.
    let dirs: Vec<String> = [8, 16, 32, 64, 128, 256, 512, 1024, 2048].iter().map(|k| format!("hugepages-{k}kB")).collect();
    assert_eq!(g.sysfs_dirs(), dirs);
}

#[test]
fn sixteen_kib_pages() {
    let g = Granule::K16.geometry();
    // 2048 descriptors of 8 bytes per 16 KiB table; levels = ceil((48 - 14) / 11) = 4.
    assert_eq!((g.page_size(), g.ptrs_per_table(), g.levels), (16 * KIB, 2048, 4));
    // PMD_SHIFT = 11 * 2 + 3 = 25: 32 MiB, order 11; PUD_SHIFT = 36: 64 GiB.
    assert_eq!((g.pmd_order(), g.pmd_size(), 1u64 << g.pud_shift()), (Order(11), 32 * MIB, 64 * GIB));
    // CONT_PTE_SHIFT 7: 128 PTEs, 2 MiB; CONT_PMD_SHIFT 5: 32 PMDs, 1 GiB.
    assert_eq!((g.cont_ptes(), g.cont_pte_size(), g.cont_pmds(), g.cont_pmd_size()), (128, 2 * MIB, 32, GIB));
    assert_eq!((g.max_page_order, g.max_block_size()), (11, 32 * MIB));
    // Anon orders 2..=11, file 1..=min(11, 11): every order 1..=11 has a directory.
    assert_eq!(g.thp_orders_all_anon().iter_desc().count(), 10);
    let dirs: Vec<String> = [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768].iter().map(|k| format!("hugepages-{k}kB")).collect();
    assert_eq!(g.sysfs_dirs(), dirs);
}

#[test]
fn sixty_four_kib_pages() {
    let g = Granule::K64.geometry();
    // 8192 descriptors per 64 KiB table; levels = ceil((48 - 16) / 13) = 3.
    assert_eq!((g.page_size(), g.ptrs_per_table(), g.levels), (64 * KIB, 8192, 3));
    // PMD_SHIFT = 13 * 2 + 3 = 29: 512 MiB, order 13.
    assert_eq!((g.pmd_order(), g.pmd_size()), (Order(13), 512 * MIB));
    // CONT_PTE_SHIFT 5: 32 PTEs, 2 MiB; CONT_PMD_SHIFT 5: 32 PMDs, 16 GiB.
    assert_eq!((g.cont_ptes(), g.cont_pte_size(), g.cont_pmds(), g.cont_pmd_size()), (32, 2 * MIB, 32, 16 * GIB));
    assert_eq!((g.max_page_order, g.max_block_size()), (13, 512 * MIB));
    // The page cache stops at MAX_XAS_ORDER 11 (128 MiB folios), anon goes to 13 (512 MiB):
    // order 1 (128 KiB) is a file-only directory, 12 and 13 anon-only.
    assert_eq!(g.max_pagecache_order(), Order(11));
    assert!(!g.thp_orders_all_anon().contains(Order(1)) && g.thp_orders_all_file().contains(Order(1)));
    assert!(g.thp_orders_all_anon().contains(Order(13)) && !g.thp_orders_all_file().contains(Order(12)));
    let dirs: Vec<String> =
        [128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288].iter().map(|k| format!("hugepages-{k}kB")).collect();
    assert_eq!(g.sysfs_dirs(), dirs);
}

#[test]
fn pages_and_tables_of_one_gib() {
    // 1 GiB at a 1 GiB boundary, every page mapped with base pages: 2^30 / page size pages; PTE
    // tables one per PMD entry's span, PMD tables one per PUD entry's span, and so on up.
    let at = GIB;
    let pages = |g: PageGeometry| GIB >> g.page_shift;
    assert_eq!(pages(PageGeometry::X86_4K), 262_144);
    assert_eq!(pages(Granule::K16.geometry()), 65_536);
    assert_eq!(pages(Granule::K64.geometry()), 16_384);
    assert_eq!(PageGeometry::X86_4K.tables_to_map(at, GIB), [512, 1, 1]);
    assert_eq!(Granule::K16.geometry().tables_to_map(at, GIB), [32, 1, 1]);
    assert_eq!(Granule::K64.geometry().tables_to_map(at, GIB), [2, 1]);
    // One 64 KiB page straddles nothing; 2 MiB that straddles a 512 MiB boundary takes 2 PTE tables.
    assert_eq!(Granule::K64.geometry().tables_to_map(512 * MIB - MIB, 2 * MIB), [2, 1]);
    assert_eq!(PageGeometry::X86_4K.tables_to_map(at, 0), [0, 0, 0]);
}

#[test]
fn summary_line() {
    assert_eq!(
        Granule::K64.geometry().summary(),
        "3 levels of 8192-entry tables, PMD 512M (order 13), contpte 2M (32 PTEs), MAX_PAGE_ORDER 13, hugepages-128kB .. hugepages-524288kB"
    );
}
