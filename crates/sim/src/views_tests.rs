//! Tests of the views (crate::views): the folio-size map, the peak, `--explain`. Expected
//! values are derived by hand in the comments.

use thp_abi::ThpSettings;
use uapi::RunResult;

use crate::{run_with, MachineConfig, RunOptions};

fn settings(assignments: &str) -> ThpSettings {
    let mut s = ThpSettings::default();
    for a in assignments.split_whitespace() {
        s.apply_assignment(a).unwrap();
    }
    s
}

fn run(set: &str, text: &str, explain: Option<(u64, u64)>) -> RunResult {
    let w = workload::parse("views.thpw", text).unwrap();
    let mut opts = RunOptions { check_invariants: true, on_event: None, explain, ..Default::default() };
    run_with(&w, &settings(set), &MachineConfig { mem_bytes: 1 << 30, ..Default::default() }, &mut opts).unwrap().0
}

#[test]
fn a_program_that_frees_before_exit_shows_its_peak() {
    // 128 MiB under PMD always is 64 PMD THPs (a multiple of 2 MiB is placed 2 MiB-aligned);
    // munmap frees them all; 64 KiB written after are 16 pages of 4 KiB (64 KiB is not a PMD).
    let r = run("enabled=always", "mmap a 128M\ntouch a write\nmunmap a\nmmap b 64K\ntouch b write\n", None);
    let p = r.peak.as_ref().expect("a model run has a peak");
    assert_eq!(p.rss_bytes, 128 << 20, "VmHWM: the 128 MiB before munmap");
    assert_eq!(p.anon_huge_bytes, 128 << 20);
    assert_eq!(p.census.sizes[&thp_abi::FolioSize::from("2048kB")].folios, 64);
    assert_eq!(p.census.sizes[&thp_abi::FolioSize::from("2048kB")].pmd_mapped, 64);
    assert_eq!(p.max_folios[&thp_abi::FolioSize::from("2048kB")], 64, "nr_anon of 2048kB reached 64");
    assert_eq!(r.process.rss_bytes, 64 << 10, "at exit: 64 KiB");
    assert_eq!(r.census.sizes.get(&thp_abi::FolioSize::from("2048kB")).map_or(0, |e| e.folios), 0);
    assert_eq!(r.census.sizes[&thp_abi::FolioSize::from("4kB")].folios, 16);
}

#[test]
fn when_rss_never_falls_the_peak_is_the_end() {
    // 4 MiB freed, then 8 MiB mapped: the peak is the 8 MiB at the end (4 PMD THPs).
    let r = run("enabled=always", "mmap a 4M\ntouch a write\nmunmap a\nmmap b 8M\ntouch b write\n", None);
    let p = r.peak.unwrap();
    assert_eq!(p.rss_bytes, 8 << 20);
    assert_eq!(p.census, r.census, "the census at the peak is the census at the end");
    assert_eq!(p.max_folios[&thp_abi::FolioSize::from("2048kB")], 4, "2 THPs freed before 4 were mapped: at most 4 at once");
}

#[test]
fn madv_dontneed_also_leaves_the_peak() {
    // 2 MiB under 64 KiB mTHP: 32 folios of 64 KiB; MADV_DONTNEED of the whole frees them.
    let r = run("enabled=never hugepages-64kB/enabled=always", "mmap a 2M\ntouch a write\nmadvise a dontneed\n", None);
    let p = r.peak.unwrap();
    assert_eq!(p.rss_bytes, 2 << 20);
    assert_eq!(p.census.sizes[&thp_abi::FolioSize::from("64kB")].folios, 32);
    assert_eq!(r.process.rss_bytes, 0);
}

#[test]
fn the_folio_map_has_one_entry_per_vma_in_observes_shape() {
    // Two private regions with different protections do not merge; a shared region is shmem.
    // `a` (4 MiB, PMD always) gets 2 PMD THPs; `b` is read-only and never touched; `s` is
    // shared anonymous memory, 16 KiB written: shmem_enabled=never gives 4 pages of 4 KiB.
    let r = run("enabled=always", "mmap a 4M\nmmap b 8K prot=r\nmmap s 16K shared\ntouch a write\ntouch s write\n", None);
    assert_eq!(r.vmas.len(), 3);
    let by_kind = |k: &str| r.vmas.iter().filter(|v| v.kind == k).cloned().collect::<Vec<_>>();
    let anon = by_kind("anon");
    assert_eq!(anon.len(), 2);
    let a = anon.iter().find(|v| v.perms == "rw-p").unwrap();
    assert_eq!(a.end_addr() - a.start_addr(), 4 << 20);
    assert_eq!(a.census.sizes[&thp_abi::FolioSize::from("2048kB")].pmd_mapped, 2);
    assert_eq!(a.rss_kb, 4096);
    assert_eq!(a.anon_huge_kb, 4096);
    let b = anon.iter().find(|v| v.perms == "r--p").unwrap();
    assert_eq!(b.rss_kb, 0);
    assert!(b.census.sizes.is_empty());
    let s = &by_kind("shmem")[0];
    assert_eq!(s.perms, "rw-s");
    assert_eq!(s.census.sizes[&thp_abi::FolioSize::from("4kB")].folios, 4);
    assert_eq!(s.rss_kb, 16);
    // The map adds up to the totals.
    assert_eq!(r.vmas.iter().map(|v| v.rss_kb).sum::<u64>(), r.process.rss_bytes / 1024);
    // The same JSON keys as an entry of `thplab observe --json`'s `vmas`.
    let v = serde_json::to_value(a).unwrap();
    for key in ["start", "end", "perms", "name", "kind", "rss_kb", "anon_huge_kb", "census"] {
        assert!(v.get(key).is_some(), "{key} missing from {v}");
    }
    let table = report::text::vma_table(&r.vmas, &r.census, r.process.rss_bytes / 1024);
    assert!(table.lines().any(|l| l.contains("rw-s") && l.contains("[shmem]")), "{table}");
}

#[test]
fn explain_gives_each_fault_the_reasons_the_totals_count() {
    // 64 KiB mTHP on a 64 KiB-aligned 64 KiB region. A read of the first page maps the zero
    // page (64 KiB refused: read_fault). Writing the region then faults 16 times: the first
    // write copies the zero page (zero_page_cow); each later one finds a populated PTE in the
    // aligned block (pte_range_populated): 16 pages of 4 KiB.
    let text = "mmap a 64K align=64K\ntouch a[0+4K] read\ntouch a write\n";
    let set = "enabled=never hugepages-64kB/enabled=always";
    let whole = run(set, text, None);
    let start = whole.regions[0].start;
    assert_eq!(start % 0x10000, 0);
    let r = run(set, text, Some((start, start + 0x10000)));
    let x = r.explain.as_ref().unwrap();
    assert_eq!(x.faults.len(), 17, "1 read + 16 writes");
    let why = |i: usize| (x.faults[i].access.as_str(), x.faults[i].got.as_str(), x.faults[i].refused[0].1.as_str());
    assert_eq!(why(0), ("read", "zero page", "read_fault"));
    assert_eq!(why(1), ("write", "4kB", "zero_page_cow"));
    assert_eq!(x.faults[1].addr, format!("{start:#x}"));
    for i in 2..17 {
        assert_eq!(why(i), ("write", "4kB", "pte_range_populated"), "fault {i}");
    }
    // The range holds every fault of the run: its totals are the run's fallbacks.
    assert_eq!(x.totals, r.fallbacks);
    let t = &r.fallbacks[&thp_abi::SizeDir::from("hugepages-64kB")];
    assert_eq!((t["read_fault"], t["zero_page_cow"], t["pte_range_populated"]), (1, 1, 15));
    // One page explains only the faults that touched it; the run's totals do not change.
    let one = run(set, text, Some((start + 0x3000, start + 0x4000)));
    assert_eq!(one.explain.as_ref().unwrap().faults.len(), 1);
    assert_eq!(one.explain.as_ref().unwrap().faults[0].addr, format!("{:#x}", start + 0x3000));
    assert_eq!(one.fallbacks, whole.fallbacks);
    assert_eq!(one.vmstat, whole.vmstat);
    // A 64 KiB region 4 KiB off alignment holds no aligned 64 KiB block: vma_range, checked
    // before read_fault.
    let off = run(set, "mmap a 64K align=64K offset=4K\ntouch a[0+4K] read\n", Some((0, u64::MAX)));
    assert_eq!(off.explain.unwrap().faults[0].refused, vec![("hugepages-64kB".to_string(), "vma_range".to_string())]);
}

#[test]
fn explain_shows_a_larger_folio_that_covers_the_address() {
    // 64 KiB aligned under 64 KiB mTHP: the first write at the region's start gets a 64 KiB
    // folio, which covers the explained page 0x8000 in: the one fault that touched it.
    let set = "enabled=never hugepages-64kB/enabled=always";
    let text = "mmap a 64K align=64K\ntouch a write\n";
    let start = run(set, text, None).regions[0].start;
    let r = run(set, text, Some((start + 0x8000, start + 0x9000)));
    let x = r.explain.unwrap();
    assert_eq!(x.faults.len(), 1);
    assert_eq!(x.faults[0].got, "64kB");
    assert_eq!(x.faults[0].addr, format!("{start:#x}"));
    assert!(x.faults[0].refused.is_empty());
}

#[test]
fn explain_ranges_parse_and_bad_ones_say_what_is_valid() {
    use crate::views::parse_explain_range;
    assert_eq!(parse_explain_range("0x7f0000001234"), Ok((0x7f0000001000, 0x7f0000002000)));
    assert_eq!(parse_explain_range("1000-3000"), Ok((0x1000, 0x3000)));
    assert!(parse_explain_range("0x3000-0x1000").unwrap_err().contains("not above"));
    assert!(parse_explain_range("zz").unwrap_err().contains("not a hex address"));
}

/// The heap is named as /proc/PID/maps names it (`vma_is_initial_heap`): the brk growth's VMA is
/// `[heap]`; a mapping beside it is not.
#[test]
fn the_heap_is_named_as_maps_names_it() {
    let r = run("enabled=never", "brk +1M\ntouch heap write\nmmap a 64K\ntouch a write\n", None);
    let names: Vec<(&str, &str)> = r.vmas.iter().map(|v| (v.name.as_str(), v.kind.as_str())).collect();
    assert_eq!(names.iter().filter(|n| n.0 == "[heap]").count(), 1, "{names:?}");
    let heap = r.vmas.iter().find(|v| v.name == "[heap]").unwrap();
    assert_eq!(heap.end_addr() - heap.start_addr(), 1 << 20);
    assert_eq!(heap.census.sizes[&thp_abi::FolioSize::from("4kB")].folios, 256);
}
