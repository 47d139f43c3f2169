//! Data-driven tests of the engine and the model. Each fixture is settings plus a workload; the
//! expected output is a procfs-like dump. Where a value was read from the live kernel the test
//! says so and names the prediction in docs/kernel-thp.md §10 (P1 …); other
//! values are derived by hand from the 6.18 source, and the derivation is in the comment.
//! Every run checks every model invariant after every operation.

use expect_test::{expect, Expect};
use thp_abi::ThpSettings;
use uapi::RunResult;

use super::*;

fn settings(assignments: &str) -> ThpSettings {
    let mut s = ThpSettings::default();
    for a in assignments.split_whitespace() {
        s.apply_assignment(a).unwrap();
    }
    s
}

fn machine(mem: u64) -> MachineConfig {
    MachineConfig { mem_bytes: mem, ..MachineConfig::default() }
}

/// Run with invariant checks after every operation on a 512 MiB machine.
fn sim(set: &str, text: &str) -> RunResult {
    sim_on(set, text, 512 << 20)
}

/// Every fixture also runs with every touch walked one access at a time, and the two results
/// must be equal: `Kernel::access_run` (the batched walk of touches in address order) is
/// checked against `Kernel::access` on every workload of this file.
fn sim_on(set: &str, text: &str, mem: u64) -> RunResult {
    let w = workload::parse("test.thpw", text).unwrap();
    let mut opts = RunOptions { check_invariants: true, ..Default::default() };
    let (r, k) = run_with(&w, &settings(set), &machine(mem), &mut opts).unwrap_or_else(|e| panic!("{e}"));
    k.check_invariants().unwrap();
    let mut reference = RunOptions { check_invariants: true, per_access: true, ..Default::default() };
    let (one_by_one, _) = run_with(&w, &settings(set), &machine(mem), &mut reference).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        serde_json::to_value(&r).unwrap(),
        serde_json::to_value(&one_by_one).unwrap(),
        "the batched walk and single accesses disagree under '{set}' on:\n{text}"
    );
    r
}

/// A compact procfs-style dump of everything that moved.
/// The vmstat and per-size stats counters that moved, as /proc/vmstat and sysfs name them
/// (every fixture dump ends with them).
pub(crate) fn counter_lines(r: &RunResult) -> String {
    let mut s = String::new();
    for (k, v) in &r.vmstat {
        if *v != 0 {
            s += &format!("{k} {v}\n");
        }
    }
    for (dir, stats) in &r.mthp {
        for (k, v) in stats {
            if *v != 0 {
                s += &format!("{dir}/stats/{k} {v}\n");
            }
        }
    }
    s
}

fn dump(r: &RunResult) -> String {
    let mut s = format!(
        "minflt {}\nRss: {} kB\nAnonHugePages: {} kB\n",
        r.process.minflt,
        r.process.rss_bytes / 1024,
        r.process.anon_huge_bytes / 1024
    );
    for (size, e) in &r.census.sizes {
        s += &format!(
            "folios {size}: {} (pmd {} pte {} partial {})\n",
            e.folios, e.pmd_mapped, e.pte_mapped, e.partially_mapped
        );
    }
    if r.census.zero_page_ptes + r.census.huge_zero_pmds > 0 {
        s += &format!("zero_page_ptes {} huge_zero_pmds {}\n", r.census.zero_page_ptes, r.census.huge_zero_pmds);
    }
    s += &counter_lines(r);
    for c in &r.calls {
        if c.call != "mmap" {
            s += &format!("line {}: {} = {}\n", c.line, c.call, c.ret);
        }
    }
    s
}

fn check(set: &str, text: &str, expect: Expect) {
    expect.assert_eq(&dump(&sim(set, text)));
}

fn mthp(r: &RunResult, dir: &str, stat: &str) -> i64 {
    r.mthp[&thp_abi::SizeDir::from(dir)][stat]
}

// ------------------------------------------------------------------ the seed experiment (live)

#[test]
fn seed_anon_1g_matches_the_live_kernel() {
    // Live on this machine (6.18.44): 262144 / 16384 / 512 faults; 64K anon_fault_alloc 16384;
    // thp_fault_alloc 512 (P1, P16, and issue #2).
    let text = "mmap buf 1G\ntouch buf write\n";
    let w = workload::parse("seed", text).unwrap();
    let m = machine(2 << 30);
    let four_k = run(&w, &settings("enabled=never"), &m).unwrap();
    assert_eq!(four_k.process.minflt, 262144);
    assert_eq!(four_k.folios[&thp_abi::FolioSize::from("4kB")], 262144);
    let m64 = run(&w, &settings("enabled=never hugepages-64kB/enabled=always"), &m).unwrap();
    assert_eq!(m64.process.minflt, 16384);
    assert_eq!(mthp(&m64, "hugepages-64kB", "anon_fault_alloc"), 16384);
    assert_eq!(mthp(&m64, "hugepages-64kB", "nr_anon"), 16384);
    assert_eq!(m64.process.rss_bytes, 1 << 30);
    assert_eq!(m64.process.anon_huge_bytes, 0);
    let pmd = run(&w, &settings("enabled=always"), &m).unwrap();
    assert_eq!(pmd.process.minflt, 512);
    assert_eq!(pmd.vmstat["thp_fault_alloc"], 512);
    assert_eq!(pmd.process.anon_huge_bytes, 1 << 30);
    assert_eq!(pmd.census.sizes[&thp_abi::FolioSize::from("2048kB")].pmd_mapped, 512);
}

// ------------------------------------------------------------------ fault path (live, §10)

#[test]
fn p2_alignment_limits_mthp() {
    // Live P2: 1 MiB VMA starting 4 KiB after a 64 KiB boundary → 31 faults, 15 × 64K folios:
    // 15 leading 4K pages, 15 folios, 1 trailing 4K page.
    check(
        "enabled=never hugepages-64kB/enabled=always",
        "mmap a 1M align=64K offset=4K\ntouch a write",
        expect![[r#"
            minflt 31
            Rss: 1024 kB
            AnonHugePages: 0 kB
            folios 4kB: 16 (pmd 0 pte 16 partial 0)
            folios 64kB: 15 (pmd 0 pte 15 partial 0)
            hugepages-64kB/stats/anon_fault_alloc 15
            hugepages-64kB/stats/nr_anon 15
        "#]],
    );
}

#[test]
fn p3_pmd_faults_and_the_huge_zero_page() {
    // Live P3: enabled=always, 64 MiB 2M-aligned: write → 32 faults, thp_fault_alloc 32.
    let r = sim("enabled=always", "mmap a 64M\ntouch a write");
    assert_eq!((r.process.minflt, r.vmstat["thp_fault_alloc"], r.process.anon_huge_bytes), (32, 32, 64 << 20));
    // Read first → 32 faults and thp_zero_page_alloc 1, no allocation; the writes then fault
    // once per PMD and allocate (live: 33 write faults, one of them the test program's own).
    check(
        "enabled=always",
        "mmap a 64M\ntouch a read",
        expect![[r#"
            minflt 32
            Rss: 0 kB
            AnonHugePages: 0 kB
            zero_page_ptes 0 huge_zero_pmds 32
            thp_zero_page_alloc 1
        "#]],
    );
    let r = sim("enabled=always", "mmap a 64M\ntouch a read\ntouch a write");
    assert_eq!((r.process.minflt, r.vmstat["thp_fault_alloc"], r.vmstat["thp_zero_page_alloc"]), (64, 32, 1));
    // use_zero_page=0: the read faults allocate 32 THPs and the writes do not fault.
    let r = sim("enabled=always use_zero_page=0", "mmap a 64M\ntouch a read\ntouch a write");
    assert_eq!((r.process.minflt, r.vmstat["thp_fault_alloc"], r.vmstat["thp_zero_page_alloc"]), (32, 32, 0));
}

#[test]
fn p4_pmd_first_then_mthp_by_vma_size() {
    // Live P4: enabled=always + 64K always: 3 MiB (2M-aligned) → 17 faults = 1 PMD + 16 × 64K.
    check(
        "enabled=always hugepages-64kB/enabled=always",
        "mmap a 3M align=2M\ntouch a write",
        expect![[r#"
            minflt 17
            Rss: 3072 kB
            AnonHugePages: 2048 kB
            folios 64kB: 16 (pmd 0 pte 16 partial 0)
            folios 2048kB: 1 (pmd 1 pte 0 partial 0)
            thp_fault_alloc 1
            hugepages-64kB/stats/anon_fault_alloc 16
            hugepages-64kB/stats/nr_anon 16
            hugepages-2048kB/stats/anon_fault_alloc 1
            hugepages-2048kB/stats/nr_anon 1
        "#]],
    );
    // 1 MiB VMA → 16 faults, 16 × 64K, no PMD.
    let r = sim("enabled=always hugepages-64kB/enabled=always", "mmap a 1M align=1M\ntouch a write");
    assert_eq!((r.process.minflt, r.folios[&thp_abi::FolioSize::from("64kB")]), (16, 16));
    assert_eq!(r.fallbacks[&thp_abi::SizeDir::from("hugepages-2048kB")]["vma_range"], 16);
}

#[test]
fn p5_read_then_write_defeats_mthp() {
    // Live P5: 64K always, 1 MiB: read pass 256 faults, write pass 256 (+1 noise live), no mTHP.
    let r = sim("enabled=never hugepages-64kB/enabled=always", "mmap a 1M align=64K\ntouch a read\ntouch a write");
    assert_eq!(r.process.minflt, 512);
    assert_eq!(mthp(&r, "hugepages-64kB", "anon_fault_alloc"), 0);
    assert_eq!(r.folios[&thp_abi::FolioSize::from("4kB")], 256);
    assert_eq!(r.fallbacks[&thp_abi::SizeDir::from("hugepages-64kB")]["read_fault"], 256);
    assert_eq!(r.fallbacks[&thp_abi::SizeDir::from("hugepages-64kB")]["zero_page_cow"], 256);
}

#[test]
fn p6_inherit_and_madvise() {
    // Live P6.
    let one = "mmap a 1M align=64K\ntouch a write";
    let hp = "mmap a 1M align=64K\nmadvise a hugepage\ntouch a write";
    let nohp = "mmap a 1M align=64K\nmadvise a nohugepage\ntouch a write";
    let faults = |set: &str, text: &str| sim(set, text).process.minflt;
    assert_eq!(faults("enabled=madvise hugepages-64kB/enabled=inherit", one), 256);
    assert_eq!(faults("enabled=madvise hugepages-64kB/enabled=inherit", hp), 16);
    assert_eq!(faults("enabled=never hugepages-64kB/enabled=madvise", hp), 16);
    assert_eq!(faults("enabled=never hugepages-64kB/enabled=madvise", one), 256);
    assert_eq!(faults("enabled=never hugepages-64kB/enabled=always", nohp), 256);
    let r = sim("enabled=madvise hugepages-64kB/enabled=inherit", one);
    assert_eq!(r.fallbacks[&thp_abi::SizeDir::from("hugepages-64kB")]["not_madvised"], 256);
}

#[test]
fn p7_prctl_thp_disable() {
    // Live P7: enabled=always; 4 × 2 MiB plain, 4 × 2 MiB after MADV_HUGEPAGE, then
    // MADV_COLLAPSE on a populated 2 MiB range.
    let text = "mmap plain 8M\nmmap hp 8M\nmmap c 2M\n{prctl}\ntouch plain write\nmadvise hp hugepage\ntouch hp write\ntouch c write\nmadvise c collapse";
    let completely = sim("enabled=always", &text.replace("{prctl}", "prctl thp_disable"));
    assert_eq!(completely.process.minflt, 2048 + 2048 + 512);
    assert_eq!(completely.calls.last().unwrap().ret, "EINVAL");
    let advised = sim("enabled=always", &text.replace("{prctl}", "prctl thp_disable except_advised"));
    assert_eq!(advised.process.minflt, 2048 + 4 + 512);
    assert_eq!(advised.vmstat["thp_fault_alloc"], 4);
    assert_eq!(advised.calls.last().unwrap().ret, "0");
    assert_eq!(advised.process.anon_huge_bytes, (8 + 2) << 20);
    assert_eq!(advised.fallbacks[&thp_abi::SizeDir::from("hugepages-2048kB")]["prctl_thp_disabled"], 2048 + 512);
}

#[test]
fn mlock_faults_the_range_in_as_a_write() {
    // mm/mlock.c do_mlock: VM_LOCKED, then __mm_populate → populate_vma_page_range with
    // FOLL_WRITE (a private writable VMA): each 2 MiB-aligned half of the 4 MiB region (the
    // kernel's placement aligns multiples of 2 MiB) is one PMD fault under always, a write
    // fault per 4 KiB page under never; GUP faults count in min_flt (mm/memory.c
    // mm_account_fault, regs == NULL). The touch after munlock finds every page present.
    let text = "mmap a 4M\nmlock a\nmunlock a\ntouch a write\n";
    let always = sim("enabled=always", text);
    assert_eq!(always.process.minflt, 2);
    assert_eq!(always.vmstat["thp_fault_alloc"], 2);
    assert_eq!(always.process.anon_huge_bytes, 4 << 20);
    let calls: Vec<(&str, &str)> = always.calls.iter().map(|c| (c.call.as_str(), c.ret.as_str())).collect();
    assert_eq!(calls, [("mmap", "0"), ("mlock", "0"), ("munlock", "0")]);
    let never = sim("enabled=never", text);
    assert_eq!(never.process.minflt, 1024);
    assert_eq!(never.process.anon_huge_bytes, 0);
    // The range must be mapped: mlock of a hole is ENOMEM (apply_vma_lock_flags).
    let hole = sim("enabled=never", "mmap a 8M\nmunmap a[0+4M]\nmlock a\n");
    assert_eq!(hole.calls.last().map(|c| c.ret.as_str()), Some("ENOMEM"));
}

#[test]
fn p8_madv_collapse_ignores_sysfs() {
    // Live P8, all sizes never (top never): 512 pages present → rc 0, thp_collapse_alloc 1,
    // 2048K nr_anon 1, AnonHugePages 2048 kB.
    check(
        "enabled=never",
        "mmap a 2M\ntouch a write\nmadvise a collapse",
        expect![[r#"
            minflt 512
            Rss: 2048 kB
            AnonHugePages: 2048 kB
            folios 2048kB: 1 (pmd 1 pte 0 partial 0)
            thp_collapse_alloc 1
            hugepages-2048kB/stats/nr_anon 1
            line 3: madvise(collapse) = 0
        "#]],
    );
    // One page present → rc 0, Rss 4 → 2048 kB.
    let r = sim("enabled=never", "mmap a 2M\ntouch a[0+4K] write\nmadvise a collapse");
    assert_eq!((r.calls.last().unwrap().ret.as_str(), r.process.rss_bytes), ("0", 2 << 20));
    // No page table at all → EINVAL (SCAN_PMD_NONE aborts); MADV_NOHUGEPAGE → EINVAL.
    let last = |r: &RunResult| r.calls.last().unwrap().ret.clone();
    let r = sim("enabled=never", "mmap a 4M\ntouch a[2M+4K] write\nmadvise a collapse");
    assert_eq!(last(&r), "EINVAL");
    let r = sim("enabled=never", "mmap a 2M\ntouch a write\nmadvise a nohugepage\nmadvise a collapse");
    assert_eq!(last(&r), "EINVAL");
    // Never faulted (no anon_vma) → EINVAL (derived: __thp_vma_allowable_orders).
    let r = sim("enabled=never", "mmap a 2M\nmadvise a collapse");
    assert_eq!(last(&r), "EINVAL");
}

#[test]
fn madv_collapse_of_mthps_frees_them() {
    // Derived (and like live P15 for khugepaged): 2 MiB of 64K mTHPs collapse into one THP;
    // 64K nr_anon goes 32 → 0, 2048K nr_anon 0 → 1; the batches free whole folios, so nothing
    // is counted as split_deferred.
    check(
        "enabled=never hugepages-64kB/enabled=always",
        "mmap a 2M\ntouch a write\nmadvise a collapse",
        expect![[r#"
            minflt 32
            Rss: 2048 kB
            AnonHugePages: 2048 kB
            folios 2048kB: 1 (pmd 1 pte 0 partial 0)
            thp_collapse_alloc 1
            hugepages-64kB/stats/anon_fault_alloc 32
            hugepages-2048kB/stats/nr_anon 1
            line 3: madvise(collapse) = 0
        "#]],
    );
}

#[test]
fn a_paced_fill_is_collapsed_behind_and_faulted_ahead() {
    // Derived: duration=500ms over 1024 pages is 2048 pages/s, chunks of 2 (2.048 a ms), page
    // i due at i × 0.48828125 ms, the touch ends at 500 ms. Range 0 has page 0 (faulted under
    // MADV_NOHUGEPAGE: a PTE table); MADV_HUGEPAGE registers the mm, a wake-up due at 0.
    // Chunk 0 (page 0 a hit, page 1 a 4 KiB fault), then its sleep runs that wake-up: range 0
    // has 2 pages, not more than 511 none → collapsed; range 1's PMD entry is empty
    // (SCAN_PMD_NONE). Every later page of range 0 is a hit; the fill reaches range 1 at
    // 250 ms and takes a PMD fault there (the VMA is VM_HUGEPAGE, the PMD none). Faults: 3.
    check(
        "enabled=madvise khugepaged/max_ptes_none=511 khugepaged/scan_sleep_millisecs=100",
        "mmap a 4M align=2M\nmadvise a nohugepage\ntouch a[0+4K] write\nmadvise a hugepage\ntouch a write duration=500ms",
        expect![[r#"
            minflt 3
            Rss: 4096 kB
            AnonHugePages: 4096 kB
            folios 2048kB: 2 (pmd 2 pte 0 partial 0)
            thp_collapse_alloc 1
            thp_fault_alloc 1
            hugepages-2048kB/stats/anon_fault_alloc 1
            hugepages-2048kB/stats/nr_anon 2
            line 2: madvise(nohugepage) = 0
            line 4: madvise(hugepage) = 0
        "#]],
    );
}

#[test]
fn p11_partial_unmap_and_protect() {
    // Live P11 with PMD THPs.
    let r = sim("enabled=always", "mmap a 8M\ntouch a write\nmunmap a[4K+4K]");
    assert_eq!((r.vmstat["thp_split_pmd"], r.vmstat["thp_deferred_split_page"]), (1, 1));
    assert_eq!(mthp(&r, "hugepages-2048kB", "split_deferred"), 1);
    let r = sim("enabled=always", "mmap a 8M\ntouch a write\nmunmap a[2M+2M]");
    assert_eq!((mthp(&r, "hugepages-2048kB", "nr_anon"), r.vmstat["thp_split_pmd"]), (3, 0));
    check(
        "enabled=always",
        "mmap a 8M\ntouch a write\nmunmap a[4K+4K]\nmadvise a[2M+8K] dontneed\nmprotect a[4M+4K] r",
        expect![[r#"
            minflt 4
            Rss: 8180 kB
            AnonHugePages: 2048 kB
            folios 2048kB: 4 (pmd 1 pte 3 partial 2)
            thp_deferred_split_page 2
            thp_fault_alloc 4
            thp_split_pmd 3
            hugepages-2048kB/stats/anon_fault_alloc 4
            hugepages-2048kB/stats/nr_anon 4
            hugepages-2048kB/stats/nr_anon_partially_mapped 2
            hugepages-2048kB/stats/split_deferred 2
            line 3: munmap = 0
            line 4: madvise(dontneed) = 0
            line 5: mprotect(r) = 0
        "#]],
    );
    // 64K mTHP: munmap 4K inside → 64K split_deferred 1, no vmstat change; mprotect → nothing.
    let r = sim("enabled=never hugepages-64kB/enabled=always", "mmap a 1M align=64K\ntouch a write\nmunmap a[4K+4K]\nmprotect a[64K+4K] r");
    assert_eq!(mthp(&r, "hugepages-64kB", "split_deferred"), 1);
    assert_eq!(mthp(&r, "hugepages-64kB", "nr_anon_partially_mapped"), 1);
    assert!(r.vmstat.values().all(|v| *v == 0), "{:?}", r.vmstat);
}

#[test]
fn placement_follows_get_unmapped_area() {
    // Derived from __thp_get_unmapped_area and unmapped_area_topdown: a multiple of 2 MiB is
    // placed 2 MiB-aligned at the top of the free space; other lengths hug the previous mapping.
    // mmap_base is not 2 MiB-aligned, so a 12 KiB mapping still fits above the aligned 4 MiB.
    let r = sim("", "mmap a 4M\nmmap b 12K\nmmap c 2M");
    let base = MachineConfig::default().mmap_base;
    let a = r.regions[0].start;
    assert_eq!(a, (base - (4 << 20)) & !((2 << 20) - 1));
    assert_eq!(r.regions[1].start, base - (12 << 10));
    assert_eq!(r.regions[2].start, a - (2 << 20));
}

#[test]
fn adjacent_mappings_merge_into_one_vma() {
    // Derived (vma_merge_new_range): b is placed right below a with the same flags, so the two
    // form one VMA and a 2 MiB block spanning both can take a PMD fault.
    let r = sim("enabled=always", "mmap a 1M at=0x7d0000100000\nmmap b 1M at=0x7d0000000000\ntouch a write\ntouch b write");
    assert_eq!(r.regions[1].start + (1 << 20), r.regions[0].start);
    assert_eq!(r.process.minflt, 1);
    assert_eq!(r.model.as_ref().and_then(|m| m.run.as_ref()).unwrap().vmas, 1);
}

#[test]
fn brk_grows_the_heap() {
    // Derived: the heap VMA grows from start_brk; 4 MiB of heap at an unaligned start holds one
    // full aligned 2 MiB block for a PMD fault.
    let r = sim("enabled=always", "brk +4M\ntouch heap write");
    let heap = &r.regions[0];
    assert_eq!((heap.name.as_str(), heap.len), ("heap", 4 << 20));
    let aligned_blocks = ((heap.start + heap.len) / (2 << 20)).saturating_sub(heap.start.div_ceil(2 << 20));
    assert_eq!(aligned_blocks, 1);
    assert_eq!(r.vmstat["thp_fault_alloc"], 1);
    assert_eq!(r.process.minflt, 1 + (4 << 20) / 4096 - 512);
}

#[test]
fn bloat_counts_untouched_pages_of_mapped_folios() {
    // Derived: one write per 64 KiB into 64K folios leaves 15 of 16 pages untouched.
    let r = sim("enabled=never hugepages-64kB/enabled=always", "mmap a 1M align=64K\ntouch a write stride=64K");
    assert_eq!(r.process.bloat_bytes, Some(16 * 15 * 4096));
}

#[test]
fn a_touch_of_unmapped_memory_is_an_error_naming_the_line() {
    let w = workload::parse("t.thpw", "mmap a 1M\nmunmap a[0+4K]\ntouch a write").unwrap();
    let e = run(&w, &ThpSettings::default(), &machine(64 << 20)).unwrap_err();
    assert!(e.to_string().starts_with("t.thpw:3: write at 0x"), "{e}");
    assert!(e.to_string().contains("SIGSEGV"), "{e}");
    let w = workload::parse("t.thpw", "mmap a 1M prot=r\ntouch a write").unwrap();
    assert!(run(&w, &ThpSettings::default(), &machine(64 << 20)).is_err());
}

#[test]
fn out_of_memory_is_an_error_not_a_panic() {
    let w = workload::parse("t.thpw", "mmap a 64M\ntouch a write").unwrap();
    let e = run(&w, &ThpSettings::default(), &machine(32 << 20)).unwrap_err();
    assert!(e.to_string().contains("out of memory"), "{e}");
}

#[test]
fn mthp_falls_back_size_by_size_when_memory_is_fragmented() {
    // Derived: with only order-0 blocks free above the watermark, every mTHP order fails and is
    // counted as anon_fault_fallback once per fault per order, highest first.
    let text = "mmap a 64K align=64K\ntouch a[0+4K] write";
    let w = workload::parse("t", text).unwrap();
    let s = settings("enabled=never hugepages-64kB/enabled=always hugepages-16kB/enabled=always");
    let params = mm::BootParams { mem_bytes: 64 << 20, min_free_kbytes: 0, mmap_base: 0x7dff_fffc_5000, brk_start: 0x5555_5557_9000, ..mm::BootParams::default() };
    let mut k = mm::Kernel::boot(&params, &s);
    k.fragment_memory();
    let addr = k.do_mmap(64 << 10, mm::mmap::prot_to_vm(true, true, false), mm::mmap::MmapPlacement::Aligned { align: 65536, offset: 0 }).unwrap();
    assert_eq!(k.access(addr, true), mm::Access::Fault);
    assert_eq!(k.counters.mthp(mm_types::Order(4), thp_abi::MthpStat::AnonFaultFallback), 1);
    assert_eq!(k.counters.mthp(mm_types::Order(2), thp_abi::MthpStat::AnonFaultFallback), 1);
    assert_eq!(k.stats().fallbacks[4][thp_abi::FallbackReason::AllocFailed as usize], 1);
    k.check_invariants().unwrap();
    let _ = w;
}

#[test]
fn output_is_deterministic() {
    let text = "mmap a 64M\ntouch a write order=random seed=9 count=5000\nmunmap a[1M+12K] every=3M";
    let s = "enabled=always hugepages-64kB/enabled=always hugepages-16kB/enabled=always";
    let a = serde_json::to_string(&sim(s, text)).unwrap();
    let b = serde_json::to_string(&sim(s, text)).unwrap();
    assert_eq!(a, b);
}

// ------------------------------------------------------------------ shmem, memfd, tmpfs (live P13, P14)

#[test]
fn p13_memfd_and_shared_anon_follow_the_per_size_knobs() {
    let s64 = "hugepages-64kB/shmem_enabled=always";
    // memfd 1 MiB mapped 2 MiB-aligned and written → 16 faults, 64K shmem_alloc 16.
    let r = sim(s64, "memfd m\nftruncate m 1M\nmmap a 1M file=m align=2M\ntouch a write");
    assert_eq!((r.process.minflt, mthp(&r, "hugepages-64kB", "shmem_alloc"), r.folios[&thp_abi::FolioSize::from("64kB")]), (16, 16, 16));
    // The same with MAP_SHARED|MAP_ANONYMOUS.
    let r = sim(s64, "mmap a 1M shared align=2M\ntouch a write");
    assert_eq!((r.process.minflt, mthp(&r, "hugepages-64kB", "shmem_alloc")), (16, 16));
    // At an address that is not 64K-aligned: 256 faults, no large folio.
    let r = sim(s64, "memfd m\nftruncate m 1M\nmmap a 1M file=m align=2M offset=4K\ntouch a write");
    assert_eq!((r.process.minflt, mthp(&r, "hugepages-64kB", "shmem_alloc")), (256, 0));
    // pwrite() of 1 MiB has no VMA: per-size knobs do not apply, top-level never → 4 KiB pages.
    let r = sim(s64, "memfd m\nwrite m[0+1M]");
    assert_eq!(mthp(&r, "hugepages-64kB", "shmem_alloc"), 0);
    assert_eq!(r.meminfo["Shmem"], 1024);
}

#[test]
fn p13_top_level_always() {
    // pwrite of 1 MiB, 64 KiB, or 1 MiB in 4 KiB writes → one 2 MiB folio each.
    for text in ["memfd m\nwrite m[0+1M]", "memfd m\nwrite m[0+64K]", "memfd m\nwrite m[0+1M] chunk=4K"] {
        let r = sim("shmem_enabled=always", text);
        assert_eq!((mthp(&r, "hugepages-2048kB", "shmem_alloc"), r.vmstat["thp_file_alloc"]), (1, 1), "{text}");
    }
    // 4 MiB memfd mapping → 2 faults, 2 PMD-mapped folios, ShmemPmdMapped 4096 kB.
    check(
        "shmem_enabled=always",
        "memfd m\nftruncate m 4M\nmmap a 4M file=m\ntouch a write",
        expect![[r#"
            minflt 2
            Rss: 4096 kB
            AnonHugePages: 0 kB
            folios 2048kB: 2 (pmd 2 pte 0 partial 0)
            thp_file_alloc 2
            thp_file_mapped 2
            hugepages-2048kB/stats/shmem_alloc 2
            line 1: memfd_create = 0
            line 2: ftruncate = 0
        "#]],
    );
    let r = sim("shmem_enabled=always", "memfd m\nftruncate m 4M\nmmap a 4M file=m\ntouch a write");
    assert_eq!(r.meminfo["ShmemPmdMapped"], 4096);
    // 3 MiB with 64K also always → 17 faults: 1 PMD + 16 × 64K.
    let r = sim("shmem_enabled=always hugepages-64kB/shmem_enabled=always", "memfd m\nftruncate m 3M\nmmap a 3M file=m\ntouch a write");
    assert_eq!((r.process.minflt, r.folios[&thp_abi::FolioSize::from("2048kB")], r.folios[&thp_abi::FolioSize::from("64kB")]), (17, 1, 16));
}

#[test]
fn p13_advise_inherit_and_order_one() {
    let set = "shmem_enabled=advise hugepages-64kB/shmem_enabled=inherit";
    let plain = sim(set, "memfd m\nftruncate m 1M\nmmap a 1M file=m align=2M\ntouch a write");
    assert_eq!(plain.process.minflt, 256);
    let advised = sim(set, "memfd m\nftruncate m 1M\nmmap a 1M file=m align=2M\nmadvise a hugepage\ntouch a write");
    assert_eq!((advised.process.minflt, advised.folios[&thp_abi::FolioSize::from("64kB")]), (16, 16));
    // Order 1 exists for shmem: 64 KiB of shared anon with 8K always → 8 faults.
    let r = sim("hugepages-8kB/shmem_enabled=always", "mmap a 64K shared align=64K\ntouch a write");
    assert_eq!((r.process.minflt, mthp(&r, "hugepages-8kB", "shmem_alloc")), (8, 8));
}

#[test]
fn p14_tmpfs_mount_huge_options() {
    let faults = |huge: &str, body: &str| sim("", &format!("tmpfs t huge={huge}\nfile f on=t\n{body}"));
    // huge=always: a 4 KiB write to an empty file gets a 2 MiB folio.
    let r = faults("always", "write f[0+4K]");
    assert_eq!(mthp(&r, "hugepages-2048kB", "shmem_alloc"), 1);
    // huge=always: a 1 MiB mapping faults PMD only, so 256 faults and no large folio.
    let r = faults("always", "ftruncate f 1M\nmmap a 1M file=f\ntouch a write");
    assert_eq!((r.process.minflt, r.folios.get(&thp_abi::FolioSize::from("2048kB"))), (256, None));
    // 4 MiB → 2 faults, 2 PMD.
    let r = faults("always", "ftruncate f 4M\nmmap a 4M file=f\ntouch a write");
    assert_eq!((r.process.minflt, r.census.sizes[&thp_abi::FolioSize::from("2048kB")].pmd_mapped), (2, 2));
    // within_size: a 4 KiB write → nothing large; 64 KiB → one 64K folio; 1 MiB by 4 KiB
    // writes → nothing large; a 4 MiB file mapped → 2 PMD.
    assert!(faults("within_size", "write f[0+4K]").folios.is_empty());
    let r = faults("within_size", "write f[0+64K]");
    assert_eq!(mthp(&r, "hugepages-64kB", "shmem_alloc"), 1);
    let r = faults("within_size", "write f[0+1M] chunk=4K");
    assert!(r.mthp.values().all(|s| s["shmem_alloc"] == 0));
    let r = faults("within_size", "ftruncate f 4M\nmmap a 4M file=f\ntouch a write");
    assert_eq!(r.census.sizes[&thp_abi::FolioSize::from("2048kB")].pmd_mapped, 2);
    // advise: 1024 faults, 2 PMD with MADV_HUGEPAGE; never: 1024 faults either way.
    assert_eq!(faults("advise", "ftruncate f 4M\nmmap a 4M file=f\ntouch a write").process.minflt, 1024);
    assert_eq!(faults("advise", "ftruncate f 4M\nmmap a 4M file=f\nmadvise a hugepage\ntouch a write").process.minflt, 2);
    assert_eq!(faults("never", "ftruncate f 4M\nmmap a 4M file=f\nmadvise a hugepage\ntouch a write").process.minflt, 1024);
}

#[test]
fn shmem_read_faults_map_around_present_pages() {
    // Derived (do_fault_around, filemap_map_pages): after pwrite of 1 MiB of 4 KiB pages, read
    // faults map the uptodate pages of a 64 KiB window: 16 faults; a large folio is mapped whole.
    let r = sim("", "memfd m\nwrite m[0+1M]\nmmap a 1M file=m align=2M\ntouch a read");
    assert_eq!(r.process.minflt, 16);
    let r = sim("shmem_enabled=always", "memfd m\nwrite m[0+1M]\nftruncate m 2M\nmmap a 2M file=m\ntouch a read");
    assert_eq!((r.process.minflt, r.census.sizes[&thp_abi::FolioSize::from("2048kB")].pmd_mapped), (1, 1));
}

#[test]
fn a_private_shmem_mapping_copies_what_it_writes() {
    // Derived (mm/memory.c: do_read_fault, do_cow_fault, wp_huge_pmd; mm/huge_memory.c:
    // __split_huge_pmd_locked), shmem_enabled=always, a memfd mapped MAP_PRIVATE at 2 MiB:
    // - reading the first 2 MiB: shmem_fault allocates a PMD folio, do_set_pmd maps it read-only
    //   (1 fault; thp_file_alloc, thp_file_mapped, shmem_alloc);
    // - writing the next 2 MiB: each fault copies a page of the file (whose first fault
    //   allocates the second PMD folio, left unmapped in the page cache) into an order-0
    //   anonymous page (512 faults);
    // - writing every 4th page of the first MiB: the first write splits the PMD (a file PMD is
    //   zapped: thp_split_pmd) and copies; each of the 64 writes is a do_cow_fault;
    // - one read after that maps around it: the whole folio fits the VMA and one page table, so
    //   its 448 pages that no copy replaced are mapped by that one fault.
    // 578 faults; Rss 576 anonymous pages + 448 file pages = 4096 kB, no AnonHugePages.
    check(
        "shmem_enabled=always",
        "memfd m\nftruncate m 4M\nmmap a 4M file=m private align=2M\ntouch a[0+2M] read\ntouch a[2M+2M] write\n\
         touch a[0+1M] write stride=16K\ntouch a[1M+4K] read",
        expect![[r#"
            minflt 578
            Rss: 4096 kB
            AnonHugePages: 0 kB
            folios 4kB: 576 (pmd 0 pte 576 partial 0)
            folios 2048kB: 1 (pmd 0 pte 1 partial 1)
            thp_file_alloc 2
            thp_file_mapped 1
            thp_split_pmd 1
            hugepages-2048kB/stats/shmem_alloc 2
            line 1: memfd_create = 0
            line 2: ftruncate = 0
        "#]],
    );
}

#[test]
fn a_hole_punched_in_large_shmem_folios_splits_them_at_its_edges() {
    // Derived (mm/shmem.c: shmem_fallocate, shmem_undo_range; mm/truncate.c:
    // truncate_inode_partial_folio; mm/huge_memory.c: __split_unmapped_folio, non-uniform),
    // shmem_enabled=always, a memfd of 4 MiB mapped at 2 MiB and written: 2 faults, two PMD
    // folios. A hole of 64 KiB at 1 MiB + 4 KiB (pages 257-272) lies inside the first folio:
    // its PMD is zapped (unmap_mapping_range of a part: split, thp_split_pmd), the folio is split
    // at the hole's first page (pieces of 256, 128, 64, 32, 16, 8, 4, 2 and 1 pages, and page 257
    // alone: one 2048kB split, thp_split_page), then the piece holding page 273, the first after
    // the hole (pages 272-287: into 8, 4, 2, 1 and 273 alone: one 64kB split). Freed: 257-272.
    // Nothing of the first folio stays mapped (a split file folio is unmapped whole). Reading the
    // first 2 MiB: page 0 maps the 1 MiB piece whole (fault-around maps a whole folio that fits
    // the VMA and one page table), page 256 its own page, the hole's 16 pages fault one by one
    // (each allocated as an order-0 folio: no allowed order fits), the last of them (272) mapping
    // the pieces 273-287 around it, and the pieces at 288, 320 and 384 one fault each: 21. In all
    // 23 faults; everything mapped again (Rss 4 MiB); live: the same (docs/kernel-notes.md 29).
    check(
        "shmem_enabled=always",
        "memfd m\nftruncate m 4M\nmmap a 4M file=m align=2M\ntouch a write\nfallocate m[1028K+64K] punch\ntouch a[0+2M] read",
        expect![[r#"
            minflt 23
            Rss: 4096 kB
            AnonHugePages: 0 kB
            folios 4kB: 18 (pmd 0 pte 18 partial 0)
            folios 8kB: 1 (pmd 0 pte 1 partial 0)
            folios 16kB: 1 (pmd 0 pte 1 partial 0)
            folios 32kB: 1 (pmd 0 pte 1 partial 0)
            folios 128kB: 1 (pmd 0 pte 1 partial 0)
            folios 256kB: 1 (pmd 0 pte 1 partial 0)
            folios 512kB: 1 (pmd 0 pte 1 partial 0)
            folios 1024kB: 1 (pmd 0 pte 1 partial 0)
            folios 2048kB: 1 (pmd 1 pte 0 partial 0)
            thp_file_alloc 2
            thp_file_mapped 2
            thp_split_page 1
            thp_split_pmd 1
            hugepages-64kB/stats/split 1
            hugepages-2048kB/stats/shmem_alloc 2
            hugepages-2048kB/stats/split 1
            line 1: memfd_create = 0
            line 2: ftruncate = 0
            line 5: fallocate = 0
        "#]],
    );
}

#[test]
fn a_hole_of_one_byte_splits_a_pmd_folio_and_frees_nothing() {
    // Derived (mm/shmem.c: shmem_fallocate, shmem_undo_range; mm/truncate.c:
    // truncate_inode_partial_folio): byte 3000001 lies in page 732 (3000001 / 4096), of the
    // second PMD folio (pages 512-1023); the hole holds no whole page, so nothing is unmapped
    // first and nothing freed, but the folio is split at page 732 (its PMD split on the way:
    // thp_split_pmd, thp_split_page, one 2048kB split) and its pieces stay unmapped: Rss 2 MiB,
    // the first folio alone in the census. Live: the same (`thplab compare`, this workload).
    check(
        "shmem_enabled=always",
        "memfd m\nftruncate m 4M\nmmap a 4M file=m align=2M\ntouch a write\nfallocate m[3000001+1] punch",
        expect![[r#"
            minflt 2
            Rss: 2048 kB
            AnonHugePages: 0 kB
            folios 2048kB: 1 (pmd 1 pte 0 partial 0)
            thp_file_alloc 2
            thp_file_mapped 2
            thp_split_page 1
            thp_split_pmd 1
            hugepages-2048kB/stats/shmem_alloc 2
            hugepages-2048kB/stats/split 1
            line 1: memfd_create = 0
            line 2: ftruncate = 0
            line 5: fallocate = 0
        "#]],
    );
}

#[test]
fn a_split_keeps_what_fallocate_put_beyond_eof() {
    // Derived (mm/shmem.c: shmem_fallocate sets fallocend; mm/huge_memory.c: __folio_split drops
    // only pieces at or beyond shmem_fallocend(i_size)): a memfd of 1 MiB with 4 MiB allocated
    // by FALLOC_FL_KEEP_SIZE (two PMD folios), a hole of one page at 516 KiB: the first folio is
    // split around page 129 and only that page freed; its pieces beyond the 1 MiB EOF stay, as
    // the second folio does: Shmem 4 MiB - 4 KiB, ShmemHugePages 2 MiB. (Without fallocend the
    // pieces from 1 MiB to 2 MiB were dropped.) Live: Shmem 4096 kB against 4092 (the meminfo
    // line is system-wide), ShmemHugePages equal, minflt and splits equal.
    let r = sim("shmem_enabled=always", "memfd m\nftruncate m 1M\nfallocate m[0+4M] keep\nmmap a 1M file=m align=2M\ntouch a write\nfallocate m[516K+4K] punch");
    assert_eq!((r.meminfo["Shmem"], r.meminfo["ShmemHugePages"]), (4092, 2048), "{:?}", r.meminfo);
    assert_eq!(mthp(&r, "hugepages-2048kB", "split"), 1);
}

#[test]
fn a_shmem_file_shrunk_over_its_folios_loses_what_lies_beyond() {
    // Derived (mm/shmem.c: shmem_setattr, shmem_undo_range; mm/truncate.c:
    // truncate_inode_partial_folio), shmem_enabled=always, a memfd of 4 MiB mapped shared (a)
    // and private (b) at 2 MiB: writing a takes 2 faults (two PMD folios), 16 writes at 2 MiB of
    // b copy 16 pages (16 faults; the file's second folio is the one found). Shrunk to
    // 3 MiB + 4 KiB (769 pages): a's PMD over the new end is split (zapped: thp_split_pmd); the
    // second folio is split at page 769 (pieces of 256, 128, ..., 2 pages, page 768 and page
    // 769: one 2048kB split, thp_split_page) and every piece from 769 on is dropped with it
    // (beyond EOF), so the 1 MiB piece and page 768 stay, unmapped. b's copies lie below the new
    // end: they stay, and reading them after the file grows again is a hit. 18 faults; at exit
    // the first folio PMD-mapped in a and b's 16 copies: Rss 2112 kB. Live: the same, and under
    // hugepages-64kB/shmem_enabled=always (80 faults) and 4 KiB pages (1040).
    check(
        "shmem_enabled=always",
        "memfd m\nftruncate m 4M\nmmap a 4M file=m align=2M\nmmap b 4M file=m private align=2M\ntouch a write\n\
         touch b[2M+64K] write\nftruncate m 3076K\nftruncate m 4M\ntouch b[2M+64K] read",
        expect![[r#"
            minflt 18
            Rss: 2112 kB
            AnonHugePages: 0 kB
            folios 4kB: 16 (pmd 0 pte 16 partial 0)
            folios 2048kB: 1 (pmd 1 pte 0 partial 0)
            thp_file_alloc 2
            thp_file_mapped 2
            thp_split_page 1
            thp_split_pmd 1
            hugepages-2048kB/stats/shmem_alloc 2
            hugepages-2048kB/stats/split 1
            line 1: memfd_create = 0
            line 2: ftruncate = 0
            line 7: ftruncate = 0
            line 8: ftruncate = 0
        "#]],
    );
}

#[test]
fn shmem_errors_name_the_line() {
    let w = workload::parse("t.thpw", "memfd m\nmmap a 1M file=m\ntouch a write").unwrap();
    let e = run(&w, &ThpSettings::default(), &machine(512 << 20)).unwrap_err();
    assert!(e.to_string().starts_with("t.thpw:3: access at 0x") && e.to_string().contains("SIGBUS"), "{e}");
}

#[test]
fn madv_collapse_of_a_memfd_needs_an_aligned_vma() {
    // MADV_COLLAPSE of shmem is modelled (crates/sim/src/daemons.rs has the live-checked
    // cases). Derived (__thp_vma_allowable_orders: thp_vma_suitable_order): with the default
    // knobs a memfd mapping is not placed 2 MiB-aligned, and its collapse is EINVAL; mapped
    // aligned, it collapses into one PMD-mapped 2 MiB folio (live: docs/kernel-notes.md 18).
    for (align, ret, folios) in [("", "EINVAL", "4kB"), (" align=2M", "0", "2048kB")] {
        let text = format!("memfd m\nftruncate m 2M\nmmap a 2M file=m{align}\ntouch a write\nmadvise a collapse");
        let w = workload::parse("t.thpw", &text).unwrap();
        let r = run(&w, &ThpSettings::default(), &machine(512 << 20)).unwrap();
        assert_eq!(r.calls.last().unwrap().ret, ret, "{text}");
        assert!(r.folios.contains_key(&thp_abi::FolioSize::from(folios)), "{text}: {:?}", r.folios);
    }
}

#[test]
fn a_folio_mapped_twice_is_one_folio_in_the_census() {
    // Regression (found by comparing with the live census, /tmp/shmem-diff-1 and -2): a memfd
    // page or THP mapped by two VMAs is one folio, as tools/mm/thpmaps and the live census count.
    let r = sim("", "memfd m\nftruncate m 4K\nmmap a 4K file=m\nmmap b 4K file=m\ntouch a write\ntouch b read");
    assert_eq!((r.process.minflt, r.folios[&thp_abi::FolioSize::from("4kB")]), (2, 1));
    let r = sim("shmem_enabled=always", "memfd m\nftruncate m 2M\nmmap a 2M file=m\nmmap b 2M file=m\ntouch a write\ntouch b read");
    assert_eq!((r.folios[&thp_abi::FolioSize::from("2048kB")], r.census.sizes[&thp_abi::FolioSize::from("2048kB")].pmd_mapped, r.vmstat["thp_file_mapped"]), (1, 1, 2));
}

#[test]
fn p12_mremap_moves_whole_pmds_only_when_aligned() {
    // Live P12: moving a PMD THP to a 2 MiB-aligned destination keeps it PMD-mapped; to the
    // destination + 4 KiB splits the PMD (thp_split_pmd 1, AnonHugePages 0, Rss 2048 kB).
    for (dest, split) in [(0x7e00_0000_0000u64, 0), (0x7e00_0000_1000, 1)] {
        let params = mm::BootParams { mem_bytes: 512 << 20, ..mm::BootParams::default() };
        let mut k = mm::Kernel::boot(&params, &settings("enabled=always"));
        let rw = mm::mmap::prot_to_vm(true, true, false);
        let a = k.do_mmap(2 << 20, rw, mm::mmap::MmapPlacement::Kernel).unwrap();
        assert_eq!(k.access(a, true), mm::Access::Fault);
        k.do_mremap(a, 2 << 20, 2 << 20, dest).unwrap();
        k.check_invariants().unwrap();
        assert_eq!(k.counters.vm(thp_abi::VmEvent::ThpSplitPmd), split);
        let c = k.census(&[(dest, dest + (2 << 20))]);
        assert_eq!((c.anon_huge_bytes, c.rss_bytes), (if split == 0 { 2 << 20 } else { 0 }, 2 << 20));
        // Nothing is left at the old address, and the moved memory is still there.
        assert_eq!(k.access(a, false), mm::Access::Segv);
        assert_eq!(k.access(dest, true), mm::Access::Hit);
    }
}

// ------------------------------------------------------------------ anon_beside_full
// A knob of this machine kind's kernel build (6.18.44-fc), not of upstream 6.18. Every value
// below was read from the live kernel with `thplab live` under `hugepages-64kB/enabled=always
// enabled=never anon_beside_full=1` (docs/kernel-notes.md 15), and the same workloads with
// anon_beside_full=0 give 64 KiB folios for every first write, as upstream.

const BESIDE_64K: &str = "hugepages-64kB/enabled=always enabled=never anon_beside_full=1";

#[test]
fn beside_full_a_lone_write_gets_4k() {
    // live: 1 fault, one 4 KiB folio (with the knob at 0: one 64 KiB folio).
    check(BESIDE_64K, "mmap r 2M\ntouch r[64K+4K] write\n", expect![[r#"
        minflt 1
        Rss: 4 kB
        AnonHugePages: 0 kB
        folios 4kB: 1 (pmd 0 pte 1 partial 0)
    "#]]);
    check("hugepages-64kB/enabled=always enabled=never anon_beside_full=0", "mmap r 2M\ntouch r[64K+4K] write\n", expect![[r#"
        minflt 1
        Rss: 64 kB
        AnonHugePages: 0 kB
        folios 64kB: 1 (pmd 0 pte 1 partial 0)
        hugepages-64kB/stats/anon_fault_alloc 1
        hugepages-64kB/stats/nr_anon 1
    "#]]);
}

#[test]
fn beside_full_sequential_writes_grow_after_the_first_block() {
    // live: 47 faults; the first 64 KiB block takes 16 faults of 4 KiB, every later block sits
    // beside a full one and gets 64 KiB (31 folios). Reverse order gives the same (live: 47).
    for order in ["seq", "reverse"] {
        check(BESIDE_64K, &format!("mmap r 2M\ntouch r write order={order}\n"), expect![[r#"
            minflt 47
            Rss: 2048 kB
            AnonHugePages: 0 kB
            folios 4kB: 16 (pmd 0 pte 16 partial 0)
            folios 64kB: 31 (pmd 0 pte 31 partial 0)
            hugepages-64kB/stats/anon_fault_alloc 31
            hugepages-64kB/stats/nr_anon 31
        "#]]);
    }
    // live, every mTHP size always: 11 faults: 4 × 4 KiB, then 16K, 32K, … 1024K, each beside
    // the full block below it.
    let all = "hugepages-16kB/enabled=always hugepages-32kB/enabled=always hugepages-64kB/enabled=always \
               hugepages-128kB/enabled=always hugepages-256kB/enabled=always hugepages-512kB/enabled=always \
               hugepages-1024kB/enabled=always enabled=never anon_beside_full=1";
    let r = sim(all, "mmap r 2M\ntouch r write\n");
    assert_eq!(r.process.minflt, 11);
    let want: BTreeMap<thp_abi::FolioSize, u64> =
        [("4kB", 4), ("16kB", 1), ("32kB", 1), ("64kB", 1), ("128kB", 1), ("256kB", 1), ("512kB", 1), ("1024kB", 1)]
            .into_iter()
            .map(|(k, v)| (k.into(), v))
            .collect();
    assert_eq!(r.folios, want);
}

#[test]
fn beside_full_what_counts_as_full() {
    // (workload, live minflt, live 4kB folios, live 64kB folios)
    let cases = [
        // Zero-page PTEs count: 16 read faults then a write beside them gets 64 KiB.
        ("mmap r 2M\ntouch r[0+64K] read\ntouch r[64K+4K] write\n", 17, 0, 1),
        // 15 of 16 pages is not full.
        ("mmap r 2M\ntouch r[0+60K] write\ntouch r[64K+4K] write\n", 16, 16, 0),
        // Either side: the block above (for r[0]) or below (for r[128K]).
        ("mmap r 2M\ntouch r[64K+64K] write\ntouch r[0+4K] write\ntouch r[128K+4K] write\n", 18, 16, 2),
        // A full block in another VMA (split by mprotect) does not count.
        ("mmap r 2M\ntouch r[0+64K] write\nmprotect r[0+64K] r\ntouch r[64K+4K] write\n", 17, 17, 0),
        // Neither does one emptied by MADV_DONTNEED or with one page unmapped.
        ("mmap r 2M\ntouch r[0+64K] write\nmadvise r[0+64K] dontneed\ntouch r[64K+4K] write\n", 17, 1, 0),
        ("mmap r 2M\ntouch r[0+64K] write\nmunmap r[0+4K]\ntouch r[64K+4K] write\n", 17, 16, 0),
        // Nor one in the neighbouring PTE table (across a 2 MiB boundary), either way.
        ("mmap r 4M\ntouch r[1984K+64K] write\ntouch r[2M+4K] write\n", 17, 17, 0),
        ("mmap r 4M\ntouch r[2M+64K] write\ntouch r[1984K+4K] write\n", 17, 17, 0),
        // Stride 64K: no block is ever full.
        ("mmap r 2M\ntouch r write stride=64K\n", 32, 32, 0),
    ];
    for (text, minflt, f4, f64) in cases {
        let r = sim(BESIDE_64K, text);
        assert_eq!(r.process.minflt, minflt, "{text}");
        assert_eq!(r.folios.get(&thp_abi::FolioSize::from("4kB")).copied().unwrap_or(0), f4, "{text}");
        assert_eq!(r.folios.get(&thp_abi::FolioSize::from("64kB")).copied().unwrap_or(0), f64, "{text}");
    }
}

#[test]
fn beside_full_counts_its_fallback_reason() {
    let r = sim(BESIDE_64K, "mmap r 2M\ntouch r[64K+4K] write\n");
    assert_eq!(r.fallbacks[&thp_abi::SizeDir::from("hugepages-64kB")]["beside_not_full"], 1);
}

// ------------------------------------------------------------------ zapping VMA by VMA
/// munmap over several VMAs zaps them one at a time (unmap_vmas → unmap_single_vma), so a
/// folio that mprotect left straddling two VMAs is partially mapped between the two zaps and is
/// deferred-split; exit_mmap does the same at exit. Live (this machine, `thplab compare
/// --matrix`): split_deferred 3 for 16K, 32K and 64K (the folios at 1M, 2M+0 and 2M+64K each
/// straddle a boundary: 1M+4K/1M+8K, 2M+8K, 2M+72K), 2 for 128K…1024K (one folio holds both
/// 2M boundaries), and 2 with thp_deferred_split_page 2 under PMD always (the PMDs at 0 and 2M
/// are split by the mprotects, thp_split_pmd 2).
#[test]
fn munmap_of_several_vmas_defers_the_split_of_folios_that_straddle_them() {
    let text = "mmap a 8M\ntouch a write\nmprotect a[1M+4K] r\nmprotect a[2052K+64K] r\nmunmap a\n";
    for (set, dir, want) in [
        ("hugepages-16kB/enabled=always enabled=never", "hugepages-16kB", 3),
        ("hugepages-64kB/enabled=always enabled=never", "hugepages-64kB", 3),
        ("hugepages-128kB/enabled=always enabled=never", "hugepages-128kB", 2),
        ("hugepages-1024kB/enabled=always enabled=never", "hugepages-1024kB", 2),
        ("enabled=always", "hugepages-2048kB", 2),
    ] {
        let r = sim(set, text);
        assert_eq!(r.mthp[&thp_abi::SizeDir::from(dir)]["split_deferred"], want, "{set}");
        assert_eq!(r.mthp[&thp_abi::SizeDir::from(dir)]["nr_anon"], 0, "{set}: every folio freed");
        if dir == "hugepages-2048kB" {
            assert_eq!(r.vmstat["thp_deferred_split_page"], 2);
            assert_eq!(r.vmstat["thp_split_pmd"], 2);
        }
    }
}

// ------------------------------------------------------------------ MADV_FREE
/// MADV_FREE over part of large folios splits them (`madvise_free_pte_range` → split_folio;
/// `madvise_free_huge_pmd` → split_folio of the PMD-mapped THP). Every value read from the live
/// kernel with `thplab compare --matrix` (this machine, 6.18.44), all 11 settings equal.
/// The ranges: one page at 1M (one folio cut), 2M+4K..2M+68K (two folios cut for sizes up to
/// 64K, one for 128K and up), 4M..6M (whole folios: lazyfree, no split), 6M+4K.. (one cut).
#[test]
fn madvise_free_splits_the_folios_it_covers_in_part() {
    let text = "mmap a 8M\ntouch a write\nmadvise a[1M+4K] free\nmadvise a[2052K+64K] free\nmadvise a[4M+2M] free\nmadvise a[6148K..] free\n";
    // (settings, size dir, live folios of that size, live 4kB folios, split, split_deferred)
    for (set, dir, size, large, small, split, deferred) in [
        ("hugepages-16kB/enabled=always enabled=never", "hugepages-16kB", "16kB", 508, 16, 4, 4),
        ("hugepages-64kB/enabled=always enabled=never", "hugepages-64kB", "64kB", 124, 64, 4, 4),
        ("hugepages-128kB/enabled=always enabled=never", "hugepages-128kB", "128kB", 61, 96, 3, 3),
        ("hugepages-1024kB/enabled=always enabled=never", "hugepages-1024kB", "1024kB", 5, 768, 3, 3),
        // PMD-mapped: the PMD is split frozen on the way (thp_split_pmd), never partially mapped.
        ("enabled=always", "hugepages-2048kB", "2048kB", 1, 1536, 3, 0),
    ] {
        let r = sim(set, text);
        assert_eq!(r.folios.get(&thp_abi::FolioSize::from(size)).copied(), Some(large), "{set}");
        assert_eq!(r.folios.get(&thp_abi::FolioSize::from("4kB")).copied(), Some(small), "{set}");
        assert_eq!(r.mthp[&thp_abi::SizeDir::from(dir)]["split"], split, "{set}");
        assert_eq!(r.mthp[&thp_abi::SizeDir::from(dir)].get("split_deferred").copied().unwrap_or(0), deferred, "{set}");
        assert_eq!(r.process.rss_bytes, 8 << 20, "{set}: lazyfree pages stay mapped without reclaim");
        if size == "2048kB" {
            assert_eq!((r.vmstat["thp_split_pmd"], r.vmstat["thp_split_page"]), (3, 3));
            assert_eq!(r.vmstat.get("thp_deferred_split_page").copied().unwrap_or(0), 0);
        }
    }
}

/// A folio already partially mapped (munmap of one page) is deferred-split once, by the munmap;
/// its later split by MADV_FREE does not count again. Live: 64K 2 splits and 2 deferred (the
/// folio at 1M: munmap then free; the folio at 6M: free), 1024K 3 and 3, PMD 3 splits and 1
/// deferred (the munmap's). One page is unmapped: 2047 pages stay.
#[test]
fn madvise_free_of_a_partially_mapped_folio_defers_it_once() {
    let text = "mmap a 8M\ntouch a write\nmunmap a[1M+4K]\nmadvise a[1032K+4K] free\nmadvise a[2M+64K] free\nmadvise a[4M+2M] free\nmadvise a[6M+8K] free\n";
    for (set, dir, size, large, small, split, deferred) in [
        ("hugepages-64kB/enabled=always enabled=never", "hugepages-64kB", "64kB", 126, 31, 2, 2),
        ("hugepages-1024kB/enabled=always enabled=never", "hugepages-1024kB", "1024kB", 5, 767, 3, 3),
        ("enabled=always", "hugepages-2048kB", "2048kB", 1, 1535, 3, 1),
    ] {
        let r = sim(set, text);
        assert_eq!(r.folios.get(&thp_abi::FolioSize::from(size)).copied(), Some(large), "{set}");
        assert_eq!(r.folios.get(&thp_abi::FolioSize::from("4kB")).copied(), Some(small), "{set}");
        assert_eq!(r.mthp[&thp_abi::SizeDir::from(dir)]["split"], split, "{set}");
        assert_eq!(r.mthp[&thp_abi::SizeDir::from(dir)]["split_deferred"], deferred, "{set}");
        assert_eq!(r.mthp[&thp_abi::SizeDir::from(dir)]["nr_anon_partially_mapped"], 0, "{set}: the split folios left the queue");
    }
}

/// Issue #8 item 8: `--mem` above 256 GiB is honoured. The zone used to stop at 2^26 frames
/// (a PTE held a 27-bit PFN), so a 512 GiB machine had 256 GiB. Derived: 300 GiB touched at
/// one page per 2 MiB under 4 KiB pages is 153600 faults, each taking the page and its PTE
/// table, plus one PMD table per GiB: 307500 frames, far below the 512 GiB machine's.
#[test]
fn mem_above_256g_is_honoured() {
    let w = workload::parse("t.thpw", "mmap big 300G\ntouch big write stride=2M").unwrap();
    let mut opts = RunOptions::default();
    let (r, k) = run_with(&w, &settings("enabled=never"), &machine(512 << 30), &mut opts).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(k.zone().managed_pages(), 512 << 18);
    assert_eq!(r.process.minflt, 153_600);
    let u = k.memory_use();
    assert_eq!((u.folios, u.pgtables), (153_600, 153_600 + 301));
    k.check_invariants().unwrap();
    let w = workload::parse("t.thpw", "mmap a 4K").unwrap();
    let (_, k) = run_with(&w, &settings("enabled=never"), &machine(MAX_MEM_BYTES), &mut opts).unwrap();
    assert_eq!(k.zone().managed_pages(), 1 << 30, "4 TiB is 2^30 frames");
}

/// The out-of-memory error says what the machine has and where it went. Derived: a 32 MiB
/// machine (8192 frames) with min_free_kbytes 67584 has a min watermark of 16896 frames, more
/// than it has: the first allocation fails with every frame free. With min_free_kbytes 1024
/// (256 frames) a 64 MiB machine fills up to its last MiB: 62.9 MiB of pages and 33 PTE tables
/// (132 KiB) for the 2 MiB blocks written, then the fault fails.
#[test]
fn out_of_memory_says_what_the_machine_has_and_where_it_went() {
    let w = workload::parse("t.thpw", "mmap a 64M\ntouch a write").unwrap();
    let e = run(&w, &settings("enabled=never"), &machine(32 << 20)).unwrap_err().to_string();
    expect![[r#"
        t.thpw:2: out of memory at 0x7dfffbe00000: the simulated machine has 32 MiB (--mem): 0 B in folios, 0 B in page tables, 32 MiB free, and no allocation may take the free memory below the min watermark of 66 MiB; raise --mem (at most 4 TiB)"#]]
    .assert_eq(&e);
    let m = MachineConfig { min_free_kbytes: 1024, ..machine(64 << 20) };
    let e = run(&w, &settings("enabled=never"), &m).unwrap_err().to_string();
    expect![[r#"
        t.thpw:2: out of memory at 0x7dffffcdd000: the simulated machine has 64 MiB (--mem): 62.9 MiB in folios, 132 KiB in page tables, 1.0 MiB free, and no allocation may take the free memory below the min watermark of 1 MiB; raise --mem (at most 4 TiB)"#]]
    .assert_eq(&e);
}

/// Issue #8 item 6: N separate mappings cost O(N log N). Ten thousand 4 KiB mappings that do
/// not merge (alternating protections) are placed top-down one below the other, as the walk
/// over every VMA placed them.
#[test]
fn many_mappings_are_placed_as_before() {
    let mut text = String::new();
    for i in 0..10_000 {
        text += &format!("mmap m{i} 4K prot={}\n", if i % 2 == 0 { "rw" } else { "r" });
    }
    text += "munmap m5000\nmmap again 4K prot=rw\n";
    let w = workload::parse("t.thpw", &text).unwrap();
    let mut opts = RunOptions::default();
    let (_, k) = run_with(&w, &settings("enabled=never"), &MachineConfig::default(), &mut opts).unwrap();
    let base = MachineConfig::default().mmap_base;
    let vmas: Vec<_> = k.vmas().collect();
    assert_eq!(vmas.len(), 10_000);
    assert_eq!(vmas.last().unwrap().start, base - 4096);
    assert_eq!(vmas[0].start, base - 10_000 * 4096);
    // The hole that munmap left is the highest gap that fits: the new mapping fills it.
    assert_eq!(k.vma_lookup(base - 5001 * 4096).unwrap().start, base - 5001 * 4096);
    k.check_invariants().unwrap();
}

/// `repeat 3 { touch; madvise dontneed }` over 1 MiB: each round faults the range in again
/// (DONTNEED zapped it), by hand 3 × 256 faults under 4K and 3 × 16 under 64K, and nothing is
/// mapped at the end.
#[test]
fn a_repeated_touch_and_dontneed_faults_every_round() {
    let text = "mmap a 1M align=64K\nrepeat 3 {\n  touch a write\n  madvise a dontneed\n}\n";
    let r = sim("enabled=never", text);
    assert_eq!((r.process.minflt, r.process.rss_bytes), (768, 0));
    let r = sim("enabled=never hugepages-64kB/enabled=always", text);
    assert_eq!((r.process.minflt, r.mthp[&thp_abi::SizeDir::from("hugepages-64kB")]["anon_fault_alloc"]), (48, 48));
    assert_eq!(r.calls.iter().filter(|c| c.call == "madvise(dontneed)").count(), 3);
}

/// Recorded accesses go at the end of their interval: blocks anchored after records 3 (two
/// blocks, one interval split by size) and 7 are replayed before record 6 (the record of the
/// call that anchors the next block, 7 - 1) and before the first process's exit_group (record
/// 9; a child's at 8 does not count); a recording without an exit ends its last interval at
/// its end.
#[test]
fn recorded_accesses_go_at_the_end_of_their_interval() {
    use trace::accesses::AccessBlock;
    let block = |anchor| AccessBlock::new(anchor, &[]);
    let ev = |pid: u32, body| trace::Event { time_ns: 0, tid: pid, pid, body };
    let call = |kind| trace::EventBody::Syscall(trace::Syscall { kind, args: vec![0; kind.args().len()], ret: None, duration_ns: 0 });
    let mut events: Vec<trace::Event> = (0..8).map(|_| ev(1, trace::EventBody::Fault { addr: 0x1000, error_code: 6 })).collect();
    events.push(ev(2, call(trace::SyscallKind::ExitGroup)));
    events.push(ev(1, call(trace::SyscallKind::ExitGroup)));
    let blocks = [block(3), block(3), block(7)];
    assert_eq!(access_places(&blocks, &events, 1), vec![6, 6, 9]);
    assert_eq!(access_places(&blocks, &events[..9], 1), vec![6, 6, 9]);
}

/// The pressure example scaled down (docs/pressure.md): 64 MiB written then read under a
/// 32 MiB memcg with zram, 4 KiB pages. Every swap-in is one page and one major fault; every
/// page was written, so none goes to the zeromap (pgsteal = pswpout); what stays resident at
/// the end is the limit less at most one reclaim's overshoot (reclaim stops after the 32-page
/// batch that reaches 32: below 64); the write pass takes 16384 minor faults and leaves about
/// half swapped out, so the read pass swaps in about every page once (the second chance makes
/// the resident set at the turn not exactly the last 8192 pages written: 15882 here, 97 %; at
/// 1 GiB it is exactly every page). The batched walk and single accesses agree, and a run
/// without pressure has none of these lines.
#[test]
fn a_memcg_half_the_workload_swaps_every_page_in_once() {
    let text = "thplab-workload 1\nmmap buf 64M\ntouch buf write\ntouch buf read\n";
    let w = workload::parse("test.thpw", text).unwrap();
    let mut m = machine(512 << 20);
    m.pressure = thp_abi::Pressure { memory_max: Some(32 << 20), swap: thp_abi::SwapSpec::parse("zram:128M").unwrap() };
    let run = |per_access| {
        let mut opts = RunOptions { check_invariants: true, per_access, ..Default::default() };
        run_with(&w, &settings("enabled=never"), &m, &mut opts).unwrap_or_else(|e| panic!("{e}")).0
    };
    let r = run(false);
    assert_eq!(serde_json::to_value(&r).unwrap(), serde_json::to_value(run(true)).unwrap());
    let v = |name: &str| r.vmstat.get(name).copied();
    let (out, inn) = (v("pswpout").unwrap(), v("pswpin").unwrap());
    assert_eq!(v("pgmajfault"), Some(inn));
    assert_eq!(v("pgsteal_anon"), Some(out));
    assert!(v("pgscan_anon").unwrap() >= out);
    assert_eq!(v("oom_kill"), Some(0));
    let resident = 16384 + inn - out;
    assert!((8192 - 63..=8192).contains(&resident), "resident {resident}");
    assert!((16384 * 95 / 100..=16384).contains(&inn), "swapped in {inn}");
    assert_eq!((r.process.minflt, r.process.majflt), (16384, Some(inn as u64)));
    assert_eq!(r.meminfo.get("SwapTotal"), Some(&(128 * 1024 - 4)));
    let plain = run_with(&w, &settings("enabled=never"), &machine(512 << 20), &mut RunOptions::default()).unwrap().0;
    assert!(plain.vmstat.get("pswpout").is_none() && plain.process.majflt.is_none());
}

/// Without swap, a memcg limit below the workload is an OOM kill, said as the kernel would.
#[test]
fn a_memcg_without_swap_ends_in_an_oom_kill() {
    let w = workload::parse("test.thpw", "thplab-workload 1\nmmap buf 64M\ntouch buf write\n").unwrap();
    let mut m = machine(512 << 20);
    m.pressure.memory_max = Some(32 << 20);
    let Err(e) = run_with(&w, &settings("enabled=never"), &m, &mut RunOptions::default()) else { panic!("a run above memory.max without swap must fail") };
    assert_eq!(e.line, 3);
    assert!(e.message.contains("memcg OOM: the kernel would OOM-kill the process (memory.max 32 MiB"), "{}", e.message);
}

// ------------------------------------------------------------------ compaction and defrag (issue #28)

/// examples/fragmented-defrag.thpw on 1 GiB (the figures docs/model.md explains): after
/// `fragment unmovable=25%`, 64 MiB madvised and written. defrag=always: each of the 32 THP
/// faults stalls in async direct compaction, which empties one movable pageblock (256 held
/// pages migrated, 512 pages scanned by each scanner) and gets its THP. never: 32 fallbacks,
/// 16384 faults of 4 KiB. defer: every other fault falls back and wakes kcompactd, whose
/// emptied pageblock the next fault takes.
#[test]
fn fragmented_machine_defrag_always_compacts_never_falls_back() {
    let text = include_str!("../../../examples/fragmented-defrag.thpw");
    let comp = |r: &RunResult, e: &str| r.model.as_ref().and_then(|m| m.run.as_ref()).and_then(|m| m.compaction.get(e).copied()).unwrap_or(0);
    let vm = |r: &RunResult, e: &str| r.vmstat.iter().find(|(k, _)| k.to_string() == e).map(|(_, v)| *v).unwrap();
    let r = sim_on("defrag=always", text, 1 << 30);
    assert_eq!((vm(&r, "thp_fault_alloc"), vm(&r, "thp_fault_fallback"), r.process.minflt), (32, 0, 32));
    assert_eq!((comp(&r, "compact_stall"), comp(&r, "compact_success"), comp(&r, "compact_fail")), (32, 32, 0));
    assert_eq!((comp(&r, "pgmigrate_success"), comp(&r, "compact_migrate_scanned"), comp(&r, "compact_isolated")), (8192, 16384, 16384));
    let r = sim_on("defrag=never", text, 1 << 30);
    assert_eq!((vm(&r, "thp_fault_alloc"), vm(&r, "thp_fault_fallback"), r.process.minflt), (0, 32, 16384));
    assert!(r.model.as_ref().unwrap().run.as_ref().unwrap().compaction.is_empty());
    let r = sim_on("defrag=defer", text, 1 << 30);
    assert_eq!((vm(&r, "thp_fault_alloc"), vm(&r, "thp_fault_fallback")), (16, 16));
    assert_eq!((comp(&r, "compact_stall"), comp(&r, "compact_daemon_wake"), comp(&r, "pgmigrate_success")), (0, 16, 4096));
}

/// `drop_caches 2` runs the deferred split shrinker: one PMD THP with 1 page written, under
/// max_ptes_none 0, is underused (511 zero-filled pages > 0): split, its 511 zero pages mapped
/// by the shared zero page and freed; under 511 (the default) it stays whole.
#[test]
fn drop_caches_splits_an_underused_thp() {
    let text = "mmap a 2M align=2M\ntouch a[0+4K] write\ndrop_caches 2\n";
    let vm = |r: &RunResult, e: &str| r.vmstat.iter().find(|(k, _)| k.to_string() == e).map(|(_, v)| *v).unwrap();
    let r = sim("enabled=always khugepaged/max_ptes_none=0", text);
    assert_eq!((vm(&r, "thp_underused_split_page"), vm(&r, "thp_split_page"), vm(&r, "thp_split_pmd")), (1, 1, 1));
    assert_eq!((r.process.rss_bytes, r.process.anon_huge_bytes), (4096, 0));
    assert_eq!(r.calls.last().map(|c| (c.call.as_str(), c.ret.as_str())), Some(("write(drop_caches, 2)", "0")));
    let r = sim("enabled=always", text);
    assert_eq!((vm(&r, "thp_underused_split_page"), vm(&r, "thp_split_page")), (0, 0));
    assert_eq!(r.process.anon_huge_bytes, 2 << 20);
}
