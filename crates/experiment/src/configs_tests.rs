//! `sim --configs`: the file's parsing and errors, hugetlb backing and the figures of each row,
//! derived by hand for a 1 MiB region written every 16 KiB.

use super::*;

const FILE: &str = r#"cpu = "cortex-a57"
[[config]]
name = "4K"

[[config]]
name = "hint"
policy = "contig-hint:fill=3"

[[config]]
name = "2M-hugetlb"
hugetlb = "2M"
settings = ["enabled=always"]
"#;

#[test]
fn the_file_parses_and_errors_name_file_line_and_what_is_valid() {
    let base = ThpSettings::default();
    let f = parse("c.toml", FILE, &base).unwrap();
    assert_eq!(f.cpu.as_deref(), Some("cortex-a57"));
    assert_eq!(f.configs.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["4K", "hint", "2M-hugetlb"]);
    assert_eq!(f.configs[0].settings, base);
    assert_eq!(f.configs[1].settings.policy, Some(thp_abi::Policy::ContigHint { fill: 3, gfp: thp_abi::version::HintGfp::NoWait }));
    assert_eq!(f.configs[2].hugetlb, Some(HugePage::Size2M));
    let e = format!("{:#}", parse("c.toml", "[[config]]\nname = \"a\"\n\n[[config]]\nname = \"b\"\nhugetlb = \"64K\"\n", &base).unwrap_err());
    assert!(e.contains("configs c.toml:4: config 'b': hugetlb = \"64K\": valid are 2M, 1G, none"), "{e}");
    let e = format!("{:#}", parse("c.toml", "[[config]]\nname = \"a\"\nsettings = [\"enabled=sometimes\"]\n", &base).unwrap_err());
    assert!(e.contains("configs c.toml:1: config 'a': setting 'enabled=sometimes'") && e.contains("always"), "{e}");
    let e = format!("{:#}", parse("c.toml", "[[config]]\nname = \"a\"\npolicy = \"nope\"\n", &base).unwrap_err());
    assert!(e.contains("config 'a'") && e.contains("contig-hint"), "{e}");
    let e = format!("{:#}", parse("c.toml", "[[config]]\nname = \"a\"\npage_size = \"64K\"\n", &base).unwrap_err());
    assert!(e.contains("page_size = \"64K\": only 4K"), "{e}");
    let e = format!("{:#}", parse("c.toml", "[[config]]\nnam = \"a\"\n", &base).unwrap_err());
    assert!(e.contains("configs c.toml") && e.contains("line 2"), "{e}");
}

/// Three mappings of 1 MiB, 3 MiB and 2 MiB become hugetlb: a pool of 1 + 2 + 1 = 4 pages.
#[test]
fn hugetlb_backing_sizes_the_pool() {
    let w = workload::parse("t", "thplab-workload 1\nmmap a 1M\nmmap b 3M\nmmap c 2M\ntouch a write\n").unwrap();
    let (h, bytes) = with_hugetlb(&w, HugePage::Size2M);
    assert_eq!(bytes, 4 << 21);
    assert_eq!(h.hugetlb_pools.len(), 1);
    assert_eq!((h.hugetlb_pools[0].page, h.hugetlb_pools[0].pages), (HugePage::Size2M, 4));
    let hugetlb = h.ops.iter().filter(|o| matches!(o.kind, OpKind::Mmap { backing: Backing::Hugetlb { .. }, .. })).count();
    assert_eq!(hugetlb, 3);
}

/// 1 MiB written with a write every 16 KiB (64 faults) on the Cortex-A57 (L2 TLB 1024 entries):
/// with 4 KiB pages Rss 256 kB in 64 entries; with the hint (fill=2) every chunk takes 4
/// writes, completes at its second and maps 16 pages: Rss 1 MiB, 16 entries, 48 pages
/// a chunk never touched (bloat 768 kB); 2 MiB hugetlb: 2 MiB resident in one entry.
#[test]
fn the_rows_are_derived_from_the_results() {
    let w = workload::parse("t", "thplab-workload 1\nmmap a 1M align=2M\ntouch a write stride=16K\naccess a stride stride=16K count=1000\n").unwrap();
    let cf = parse("c.toml", FILE.replace("fill=3", "fill=2").as_str(), &ThpSettings::default()).unwrap();
    let flags = crate::resolve::ProfileFlags { cpu: Some("cortex-a57"), tlb: true, ..Default::default() };
    let profile = crate::resolve::profile(&flags, None).unwrap();
    let o = crate::simulate::SimOptions { check: true, recorded_time: true, profile: &profile, salvage: None };
    let machine = sim::MachineConfig { mem_bytes: 256 << 20, ..Default::default() };
    let l2 = l2_entries("cortex-a57");
    assert_eq!(l2, 1024);
    let mut rows = Vec::new();
    for c in &cf.configs {
        let (input, pool) = match c.hugetlb {
            Some(p) => with_hugetlb(&w, p),
            None => (w.clone(), 0),
        };
        let r = crate::simulate::sim_one(&o, &crate::simulate::SimInput::Workload(input), &c.settings, &machine, None, false).unwrap();
        rows.push(row(&c.name, &r, l2, pool));
    }
    let fig = |r: &ReachRow| (r.resident_bytes >> 10, r.bloat_bytes >> 10, r.tlb_entries, r.l2_reach_bytes >> 10, r.accesses);
    assert_eq!(fig(&rows[0]), (256, 0, 64, 256, 1000));
    assert_eq!(fig(&rows[1]), (1024, 768, 16, 1024, 1000));
    // The pool's one 2 MiB page is resident, mapped by one entry. The TLB model does not walk
    // hugetlb mappings (its accesses are not counted: the table prints "-").
    let h = &rows[2];
    assert_eq!((h.resident_bytes >> 10, h.tlb_entries, h.l2_reach_bytes >> 10), (2048, 1, 2048));
    // 64 pages in 1024 L2 entries: the first pass misses (64 walks), the rest hit; the hint's
    // 16 blocks miss once each.
    assert_eq!((rows[0].l2_misses, rows[1].l2_misses), (64, 16), "{rows:?}");
    let mut out = Vec::new();
    print_table(&mut out, "t", &rows).unwrap();
    let text = String::from_utf8(out).unwrap();
    let line = format!("{:<34} {:>12} {:>12} {:>12}\n", "bloat (allocated, never touched)", "0 kB", "768 kB", "0 kB");
    assert!(text.contains(&format!("{:<34} {:>12} {:>12} {:>12}\n", "L2 TLB misses (walks)", "64", "16", "-")), "{text}");
    assert!(text.contains(&line), "{text}");
}
