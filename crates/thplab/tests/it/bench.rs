//! `sim --profile` (the `[pin]` costs of `read_direct`) and `bench io` without a live kernel.
//! The live `bench io` test is in `live.rs`.

use crate::{temp_file, thplab};

#[test]
fn sim_profile_adds_the_pin_cost_of_direct_reads() {
    // 2 MiB of 64 KiB mTHP read in 1 MiB blocks: 32 folios and 512 PTE-mapped pages;
    // 4 MiB of PMD THP read in 1 MiB blocks: 4 folios and 1024 PMD-mapped pages.
    // With 10 ns a folio, 1 ns a PTE page and 0.5 ns a PMD page: 36·10 + 512 + 512 = 1384 ns.
    let (_d, w) = temp_file(
        "io.thpw",
        "mmap m 2M align=2M\nread_direct m block=1M\nmmap p 4M align=2M\nmadvise p hugepage\nread_direct p block=1M\n",
    );
    let (_p, profile) = temp_file("p.toml", "[pin]\nper_call_ns = 5000.0\nper_folio_ns = 10.0\nper_page_ns = 1.0\nper_pmd_page_ns = 0.5\n");
    let r = thplab(&["sim", &w, "--json", "--set", "enabled=madvise", "--set", "hugepages-64kB/enabled=always", "--profile", &profile]);
    r.ok();
    let io = &r.json()["io"];
    assert_eq!(io["direct_reads"], 6);
    assert_eq!(io["pinned_folios"], 36);
    assert_eq!(io["pinned_pte_pages"], 512);
    assert_eq!(io["pinned_pmd_pages"], 1024);
    assert_eq!(io["pin_ns"], 1384.0);
    let text = thplab(&["sim", &w, "--set", "enabled=madvise", "--set", "hugepages-64kB/enabled=always", "--profile", &profile]);
    text.ok();
    assert!(text.stdout.contains("direct I/O: 6 reads, 6291456 bytes; pinned 36 folios, 512 PTE-mapped and 1024 PMD-mapped pages; 34 faults while pinning; pin + unpin 1.4 us"), "{}", text.stdout);
    // Without --profile: the counts, no cost.
    let plain = thplab(&["sim", &w, "--json", "--set", "enabled=madvise", "--set", "hugepages-64kB/enabled=always"]);
    assert!(plain.json()["io"].get("pin_ns").is_none());
}

#[test]
fn sim_profile_errors_and_a_profile_without_pin() {
    let (_d, w) = temp_file("io.thpw", "mmap m 1M\nread_direct m block=64K\n");
    let (_p, bad) = temp_file("bad.toml", "[pin]\nper_folio_ns = 1.0\nper_pages_ns = 2.0\n");
    let r = thplab(&["sim", &w, "--profile", &bad]);
    r.fails(2);
    assert!(r.stderr.contains("bad.toml") && r.stderr.contains("line 3") && r.stderr.contains("per_pages_ns"), "{}", r.stderr);
    let (_q, nopin) = temp_file("m.toml", "[machine]\nname = \"x\"\n");
    let r = thplab(&["sim", &w, "--json", "--profile", &nopin]);
    r.ok();
    assert!(r.stderr.contains("no [pin] section"), "{}", r.stderr);
    assert!(r.json()["io"].get("pin_ns").is_none());
}

#[test]
fn bench_io_flags_are_checked_before_anything_runs() {
    for (args, want) in [
        (&["--block-sizes", "1000"][..], "--block-sizes: 1000"),
        (&["--kinds", "48K"][..], "48K"),
        (&["--engines", "spdk"][..], "engine 'spdk'"),
        (&["--time", "0"][..], "--time 0"),
        (&["--queue-depths", "0"][..], "--queue-depths: 0"),
        (&["--no-pin", "--write-profile", "x.toml"][..], "need the pin companion"),
    ] {
        let mut a = vec!["bench", "io"];
        a.extend_from_slice(args);
        let r = thplab(&a);
        r.fails(2);
        assert!(r.stderr.contains(want), "{args:?}: {}", r.stderr);
    }
    let help = thplab(&["bench", "io", "--help"]);
    help.ok();
    for flag in ["--target", "--device", "--kinds", "--engines", "--block-sizes", "--queue-depths", "--repeat", "--pin-only", "--write-profile", "--check-profile", "--json"] {
        assert!(help.stdout.contains(flag), "{flag}");
    }
}

/// `bench chase --model-only`: the model's points, no live figure. A 16 MiB chase over PMD THP
/// needs 8 TLB entries where 4 KiB pages need 4096 (more than zen4's 3072-entry L2 holds), so
/// its time per access must be below that of 4 KiB pages.
#[test]
fn bench_chase_model_only_gives_the_models_points() {
    let r = thplab(&["bench", "chase", "--model-only", "--sizes", "16M", "--pages", "4K,PMD", "--accesses", "200000", "--json"]);
    let v = r.ok().json();
    assert_eq!(v["schema"], "thplab-bench-chase/1");
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    assert_eq!(points[0]["page"], "4K");
    assert_eq!(points[0]["model_ratio"], 1.0);
    let pmd = points[1]["model_ratio"].as_f64().unwrap();
    assert!(pmd > 0.0 && pmd < 1.0, "PMD over 4 KiB {pmd}");
    for p in points {
        assert!(p["live_ns_per_access"].is_null() && p["live_runs_ns_per_access"].as_array().unwrap().is_empty(), "{p}");
    }
    let bad = thplab(&["bench", "chase", "--model-only", "--repeat", "0"]);
    bad.fails(2);
    assert!(bad.stderr.contains("--repeat"), "{}", bad.stderr);
}
