//! Hand-derived hit and miss counts for small streams, per preset. Every expected value is
//! worked out in the comment above it from the geometry in `presets`.

use crate::presets::*;
use crate::*;

const BASE: u64 = 0x7f00_0000_0000; // 1 GiB aligned

fn t4k(page: u64) -> Translation {
    Translation::new(BASE + page * 4096, 0x10_0000 + page, PageSize::K4)
}

fn run(tlb: &mut Tlb, ts: impl IntoIterator<Item = Translation>) -> TlbStats {
    tlb.reset_stats();
    for t in ts {
        tlb.access(&t);
    }
    *tlb.stats()
}

#[test]
fn zen4_four_pages_twice() {
    // Pages 0..3 then again: 4 cold misses, then 4 L1 hits. The first walk reads all 4 levels and
    // fills the PML4E, PDPTE and PDE caches; the next 3 hit the PDE cache and read 1 PTE each.
    let mut tlb = Tlb::new(&ZEN4, Paging::Native);
    let s = run(&mut tlb, (0..4).chain(0..4).map(t4k));
    assert_eq!((s.accesses, s.l1_hits, s.l2_hits, s.walks), (8, 4, 0, 4));
    assert_eq!(s.walk_refs, 7);
    assert_eq!(s.guest_refs, [1, 1, 1, 4]);
}

#[test]
fn zen4_l1_lru_thrash_73_pages() {
    // 73 pages cyclically through a 72-entry fully associative LRU L1: the second pass misses
    // every time in L1 (each page was evicted 72 fills after its use) and hits the 3072-entry L2
    // (73 consecutive pages fall in 73 different sets of 256).
    let mut tlb = Tlb::new(&ZEN4, Paging::Native);
    run(&mut tlb, (0..73).map(t4k));
    let s = run(&mut tlb, (0..73).map(t4k));
    assert_eq!((s.l1_hits, s.l2_hits, s.walks), (0, 73, 0));
    // 72 pages fit: the second pass hits L1 every time.
    let mut tlb = Tlb::new(&ZEN4, Paging::Native);
    run(&mut tlb, (0..72).map(t4k));
    let s = run(&mut tlb, (0..72).map(t4k));
    assert_eq!((s.l1_hits, s.l2_hits, s.walks), (72, 0, 0));
}

#[test]
fn zen4_pte_coalescing_32k() {
    // 8 PTEs of an aligned 32 KiB group mapping 8 contiguous aligned frames: the first access
    // walks and fills L2 with one 32K entry (L1 keeps 4K entries); the other 7 miss L1 and hit it.
    let mut tlb = Tlb::new(&ZEN4, Paging::Native);
    let s = run(&mut tlb, (0..8).map(|p| Translation { contig_order: 3, ..t4k(p) }));
    assert_eq!((s.l1_hits, s.l2_hits, s.walks), (0, 7, 1));
    // A group of only 4 (contig_order 2) does not coalesce: 8 walks.
    let mut tlb = Tlb::new(&ZEN4, Paging::Native);
    let s = run(&mut tlb, (0..8).map(|p| Translation { contig_order: 2, ..t4k(p) }));
    assert_eq!((s.l1_hits, s.l2_hits, s.walks), (0, 0, 8));
}

#[test]
fn zen1_coalescing_64k_folio() {
    // A 64 KiB folio (contig_order 4) is two 32K coalesced entries: 2 walks, 14 L2 hits.
    let mut tlb = Tlb::new(&ZEN1, Paging::Native);
    let s = run(&mut tlb, (0..16).map(|p| Translation { contig_order: 4, ..t4k(p) }));
    assert_eq!((s.l1_hits, s.l2_hits, s.walks), (0, 14, 2));
}

#[test]
fn zen4_coalescing_off_under_nested_paging() {
    // The guest cannot see host-physical contiguity: 8 walks.
    let mut tlb = Tlb::new(&ZEN4, Paging::Nested { host: PageSize::M2 });
    let s = run(&mut tlb, (0..8).map(|p| Translation { contig_order: 3, ..t4k(p) }));
    assert_eq!(s.walks, 8);
}

#[test]
fn a57_contpte_is_one_64k_entry() {
    // 16 PTEs with the contiguous bit: one 64K entry in the L1 DTLB (which holds 64K natively):
    // 1 walk, 15 L1 hits. Without the bit: 16 walks.
    let mut tlb = Tlb::new(&CORTEX_A57, Paging::Native);
    let s = run(&mut tlb, (0..16).map(|p| Translation { cont: true, contig_order: 4, ..t4k(p) }));
    assert_eq!((s.l1_hits, s.l2_hits, s.walks), (15, 0, 1));
    let mut tlb = Tlb::new(&CORTEX_A57, Paging::Native);
    let s = run(&mut tlb, (0..16).map(t4k));
    assert_eq!((s.l1_hits, s.l2_hits, s.walks), (0, 0, 16));
}

#[test]
fn a57_pmd_is_1m_pieces_in_l1() {
    // A 2 MiB block is a 1 MiB entry in the A57 L1 DTLB and a 2 MiB one in L2: touching offsets
    // 0, 1M, 0, 1M of one PMD: walk, L2 hit, L1 hit, L1 hit.
    let mut tlb = Tlb::new(&CORTEX_A57, Paging::Native);
    let pmd = |off: u64| Translation::new(BASE + off, 0x20_0000 + (off >> 12), PageSize::M2);
    let s = run(&mut tlb, [0, 1 << 20, 0, 1 << 20].map(pmd));
    assert_eq!((s.l1_hits, s.l2_hits, s.walks), (2, 1, 1));
}

#[test]
fn n1_coalesces_four_ptes_without_cont_bit() {
    // N1's L2 holds four contiguous 4K pages in one entry: 16 pages with contig_order 4 and no
    // contiguous bit: walks at pages 0, 4, 8, 12 and 12 L2 hits. With the bit: one 64K entry,
    // held by L1 too: 1 walk, 15 L1 hits.
    let mut tlb = Tlb::new(&NEOVERSE_N1, Paging::Native);
    let s = run(&mut tlb, (0..16).map(|p| Translation { contig_order: 4, ..t4k(p) }));
    assert_eq!((s.l1_hits, s.l2_hits, s.walks), (0, 12, 4));
    let mut tlb = Tlb::new(&NEOVERSE_N1, Paging::Native);
    let s = run(&mut tlb, (0..16).map(|p| Translation { cont: true, contig_order: 4, ..t4k(p) }));
    assert_eq!((s.l1_hits, s.l2_hits, s.walks), (15, 0, 1));
}

#[test]
fn contpte_bit_means_nothing_on_x86() {
    let mut tlb = Tlb::new(&GOLDEN_COVE, Paging::Native);
    let s = run(&mut tlb, (0..16).map(|p| Translation { cont: true, contig_order: 4, ..t4k(p) }));
    assert_eq!(s.walks, 16);
}

#[test]
fn a53_micro_tlb_thrash_11_pages() {
    // 11 pages cyclically through a 10-entry LRU micro-TLB: the second pass misses it every time
    // and hits the 512-entry 4-way main TLB (11 consecutive pages: 11 different sets of 128).
    let mut tlb = Tlb::new(&CORTEX_A53, Paging::Native);
    run(&mut tlb, (0..11).map(t4k));
    let s = run(&mut tlb, (0..11).map(t4k));
    assert_eq!((s.l1_hits, s.l2_hits, s.walks), (0, 11, 0));
}

#[test]
fn golden_cove_2m_l1_sets() {
    // 33 consecutive 2M pages twice through the 32-entry 4-way (8-set) L1 2M array: set 0 gets
    // pages 0, 8, 16, 24, 32 (5 pages, 4 ways, LRU in a cycle: all miss), the other sets 4 each.
    // Second pass: 28 L1 hits, 5 STLB hits. First pass walks: 3 reads cold (PML4E, PDPTE, PDE
    // leaf), then the PDPTE cache holds the 1 GiB region: 1 read each: 3 + 32 = 35.
    let mut tlb = Tlb::new(&GOLDEN_COVE, Paging::Native);
    let pmd = |i: u64| Translation::new(BASE + (i << 21), 0x40_0000 + (i << 9), PageSize::M2);
    let s = run(&mut tlb, (0..33).map(pmd));
    assert_eq!((s.walks, s.walk_refs), (33, 35));
    let s = run(&mut tlb, (0..33).map(pmd));
    assert_eq!((s.l1_hits, s.l2_hits, s.walks), (28, 5, 0));
}

#[test]
fn nested_walk_lengths_cold() {
    // Cold 2D walk, 4-level guest and host: (4+1)(4+1)-1 = 24 (every guest table's gPA lies in
    // its own 1 TiB region, so no host walk-cache entry is shared). Guest 2M: (3+1)(4+1)-1 = 19.
    // Host 2M (3-level host walks): 4·4+3 = 19; host 1G: 4·3+2 = 14.
    let cases = [
        (PageSize::K4, PageSize::K4, 24),
        (PageSize::M2, PageSize::K4, 19),
        (PageSize::K4, PageSize::M2, 19),
        (PageSize::K4, PageSize::G1, 14),
    ];
    for (guest, host, refs) in cases {
        let mut tlb = Tlb::new(&ZEN4, Paging::Nested { host });
        let o = tlb.access(&Translation::new(BASE, 0x10_0000, guest));
        assert_eq!(o, Outcome::Walk { refs }, "guest {guest:?} host {host:?}");
    }
}

#[test]
fn nested_4k_host_splinters_guest_pmd() {
    // Guest PMD on 4K host pages: entries are 4K (min(2M, 4K)). Second page of the same guest PMD:
    // L1 and L2 miss; guest PDPTE cache hit → read the guest PDE (1) + host walk of its table's
    // gPA with the host PDE cache warm (1); the data gPA's host PDE is cached too (1): 3.
    let mut tlb = Tlb::new(&ZEN4, Paging::Nested { host: PageSize::K4 });
    let pmd = |off: u64| Translation::new(BASE + off, 0x40_0000 + (off >> 12), PageSize::M2);
    assert_eq!(tlb.access(&pmd(0)), Outcome::Walk { refs: 19 });
    assert_eq!(tlb.access(&pmd(4096)), Outcome::Walk { refs: 3 });
    assert_eq!(tlb.access(&pmd(0)), Outcome::L1Hit);
    // On 2M host pages the same guest PMD is one 2M entry: offset 8K hits L1.
    let mut tlb = Tlb::new(&ZEN4, Paging::Nested { host: PageSize::M2 });
    tlb.access(&pmd(0));
    assert_eq!(tlb.access(&pmd(8192)), Outcome::L1Hit);
}

#[test]
fn flush_range_forgets_entries_and_walk_caches() {
    // Page 0 and 1 cached; flushing page 1 removes its L1/L2 entries and the PWC entries covering
    // it (all three levels overlap the range): page 0 still hits L1, page 1 walks 4 levels again.
    let mut tlb = Tlb::new(&ZEN4, Paging::Native);
    run(&mut tlb, (0..2).map(t4k));
    tlb.flush_range(BASE + 4096, 4096);
    assert_eq!(tlb.access(&t4k(0)), Outcome::L1Hit);
    assert_eq!(tlb.access(&t4k(1)), Outcome::Walk { refs: 4 });
    // L1 + L2 entries of page 1, plus PML4E, PDPTE and PDE cache entries.
    assert_eq!(tlb.stats().flushed, 5);
}

#[test]
fn paging_names_round_trip() {
    for p in ["native", "nested-4k", "nested-2m", "nested-1g"] {
        assert_eq!(Paging::parse(p).unwrap().name(), p);
    }
    assert_eq!(Paging::parse("nested-3m"), None);
    assert_eq!(presets::names(), ["zen4", "zen1", "golden-cove", "neoverse-n1", "cortex-a57", "cortex-a53"]);
}

/// /proc/cpuinfo of this machine kind (an AMD EPYC Genoa guest), of a Zen 2 host, of an Intel
/// Sapphire Rapids guest and of a Graviton 2 (Neoverse N1): the preset each gets.
#[test]
fn the_preset_of_a_cpuinfo() {
    let genoa = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\nflags\t\t: fpu vme hypervisor lahf_lm\n";
    let (p, why) = crate::presets::for_cpuinfo(genoa);
    assert_eq!(p.name, "zen4", "{why}");
    assert!(why.contains("model 0x11") && why.contains("Zen 4"), "{why}");
    assert!(crate::presets::is_guest(genoa));
    let zen2 = "vendor_id\t: AuthenticAMD\ncpu family\t: 23\nmodel\t\t: 49\nflags\t\t: fpu vme\n";
    assert_eq!(crate::presets::for_cpuinfo(zen2).0.name, "zen1");
    assert!(!crate::presets::is_guest(zen2));
    let spr = "vendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\nflags\t\t: hypervisor\n";
    assert_eq!(crate::presets::for_cpuinfo(spr).0.name, "golden-cove");
    let skylake = "vendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\n";
    let (p, why) = crate::presets::for_cpuinfo(skylake);
    assert_eq!(p.name, "golden-cove");
    assert!(why.contains("nearest"), "{why}");
    let n1 = "processor\t: 0\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\n";
    assert_eq!(crate::presets::for_cpuinfo(n1).0.name, "neoverse-n1");
    let a53 = "CPU implementer\t: 0x41\nCPU part\t: 0xd03\n";
    assert_eq!(crate::presets::for_cpuinfo(a53).0.name, "cortex-a53");
}

/// `access_n` is `n` calls of `access`: on every preset and paging, a stream of runs of 1 to 5
/// accesses to pages drawn over 8 MiB of 4 KiB pages, 2 MiB pages and contiguous 64 KiB blocks
/// (with flushes between some runs) gives the same counters after each run, and the same
/// outcomes to a probe stream afterwards (so the same state).
#[test]
fn access_n_is_n_accesses() {
    for p in PRESETS {
        for paging in [Paging::Native, Paging::Nested { host: PageSize::K4 }, Paging::Nested { host: PageSize::M2 }] {
            let (mut a, mut b) = (Tlb::new(p, paging), Tlb::new(p, paging));
            let mut x: u64 = 0x2545_F491_4F6C_DD1D;
            let mut next = || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let pick = |r: u64| {
                let page = r % 2048;
                match (r >> 20) % 3 {
                    0 => t4k(page),
                    1 => Translation::new(BASE + (page & !511) * 4096, 0x20_0000 + (page & !511), PageSize::M2),
                    _ => Translation { vaddr: BASE + page * 4096, pfn: 0x30_0000 + page, size: PageSize::K4, contig_order: 4, cont: p.name.starts_with("cortex") || p.name.starts_with("neoverse") },
                }
            };
            for i in 0..20_000 {
                let r = next();
                let t = pick(r);
                let n = 1 + (r >> 40) % 5;
                a.access_n(&t, n);
                for _ in 0..n {
                    b.access(&t);
                }
                if i % 997 == 0 {
                    a.flush_range(t.vaddr, 4096);
                    b.flush_range(t.vaddr, 4096);
                }
                assert_eq!(a.stats(), b.stats(), "{} {:?}, run {i}", p.name, paging);
            }
            for _ in 0..5_000 {
                let t = pick(next());
                assert_eq!(a.access(&t), b.access(&t), "{} {:?}", p.name, paging);
            }
        }
    }
}

#[test]
fn host_size_hook_walks_the_data_page_at_its_own_host_size() {
    // A modelled host (Tlb::access_on_host): the guest's tables keep the paging's host size,
    // the data page's host walk ends at the size the host actually maps it with. Cold walks:
    // guest 4K, tables on host 4K, data on a host 2M page: 4 guest levels × (1 + 4 host) + 3
    // (host PML4E, PDPTE, PDE of the data) = 23. Tables on host 2M, data on a host 4K page:
    // 4 × (1 + 3) + 4 = 20. The same size as the paging's is `access` itself: 19 (host 2M).
    let t = Translation::new(BASE, 0x10_0000, PageSize::K4);
    let mut tlb = Tlb::new(&ZEN4, Paging::Nested { host: PageSize::K4 });
    assert_eq!(tlb.access_on_host(&t, PageSize::M2), Outcome::Walk { refs: 23 });
    let mut tlb = Tlb::new(&ZEN4, Paging::Nested { host: PageSize::M2 });
    assert_eq!(tlb.access_on_host(&t, PageSize::K4), Outcome::Walk { refs: 20 });
    let mut tlb = Tlb::new(&ZEN4, Paging::Nested { host: PageSize::M2 });
    assert_eq!(tlb.access_on_host(&t, PageSize::M2), Outcome::Walk { refs: 19 });
    // The TLB entry is min(guest, host): a guest 2M page on a host 4K page is a 4K entry, so a
    // second 4K page of it misses the TLB; on a host 2M page it hits L1.
    let pmd = |off: u64| Translation::new(BASE + off, 0x40_0000 + (off >> 12), PageSize::M2);
    let mut tlb = Tlb::new(&ZEN4, Paging::Nested { host: PageSize::M2 });
    tlb.access_on_host(&pmd(0), PageSize::K4);
    assert!(matches!(tlb.access_on_host(&pmd(4096), PageSize::K4), Outcome::Walk { .. }));
    tlb.access_on_host(&pmd(0), PageSize::M2);
    assert_eq!(tlb.access_on_host(&pmd(8192), PageSize::M2), Outcome::L1Hit);
}
