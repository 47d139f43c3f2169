//! `read_direct`: what an O_DIRECT read's `pin_user_pages_fast` pins and faults, derived by hand
//! from mm/gup.c (a PMD-mapped folio is taken whole by `gup_fast_pmd_leaf`, PTE-mapped pages one
//! by one by `gup_fast_pte_range`, unmapped pages write-faulted by `faultin_page`).

use thp_abi::ThpSettings;
use uapi::RunResult;

fn run(set: &str, text: &str) -> RunResult {
    let mut s = ThpSettings::default();
    for a in set.split_whitespace() {
        s.apply_assignment(a).unwrap();
    }
    let w = workload::parse("t.thpw", text).unwrap();
    let m = sim::MachineConfig { mem_bytes: 512 << 20, ..Default::default() };
    let mut opts = sim::RunOptions { check_invariants: true, ..Default::default() };
    let (r, k) = sim::run_with(&w, &s, &m, &mut opts).unwrap_or_else(|e| panic!("{e}"));
    k.check_invariants().unwrap();
    r
}

/// (reads, folios, PTE pages, PMD pages, faults) and minflt.
fn io(r: &RunResult) -> (u64, u64, u64, u64, u64, u64) {
    let io = r.io.as_ref().expect("an io section");
    (io.direct_reads, io.pinned_folios, io.pinned_pte_pages, io.pinned_pmd_pages, io.pin_faults, r.process.minflt)
}

#[test]
fn pmd_buffer_read_in_1m_blocks_pins_one_folio_per_read() {
    // 4 MiB, 2 MiB aligned, PMD THP always: 4 reads of 1 MiB, each inside one 2 MiB folio
    // (1 folio, 256 PMD-mapped pages); the first read of each 2 MiB takes the one PMD fault.
    let r = run("enabled=always", "mmap buf 4M align=2M\nread_direct buf block=1M\n");
    assert_eq!(io(&r), (4, 4, 0, 1024, 2, 2));
    assert_eq!(r.io.as_ref().unwrap().bytes, 4 << 20);
    assert_eq!(r.census.sizes[&thp_abi::FolioSize::from("2048kB")].pmd_mapped, 2);
    assert_eq!(r.calls.last().unwrap().ret, "0");
    assert!(r.io.as_ref().unwrap().pin_ns.is_none());
}

#[test]
fn mthp_64k_buffer_read_at_1m_pins_16_folios_per_read() {
    // 64 KiB mTHP only: 2 MiB in two 1 MiB reads, 16 folios of 16 PTE-mapped pages each; one
    // write fault per 64 KiB folio: 32.
    let r = run("enabled=never hugepages-64kB/enabled=always", "mmap buf 2M align=2M\nread_direct buf block=1M\n");
    assert_eq!(io(&r), (2, 32, 512, 0, 32, 32));
    assert_eq!(r.census.sizes[&thp_abi::FolioSize::from("64kB")].folios, 32);
}

#[test]
fn base_pages_pin_one_folio_per_page() {
    let r = run("enabled=never", "mmap buf 1M\nread_direct buf block=64K\n");
    assert_eq!(io(&r), (16, 256, 256, 0, 256, 256));
}

#[test]
fn a_block_that_cuts_folios_pins_each_part() {
    // 192 KiB of 64 KiB folios read 96 KiB at a time: [0, 96K) is folio 0 and half of folio 1,
    // [96K, 192K) the other half of folio 1 and folio 2: 2 + 2 = 4 folio runs, 3 faults.
    let r = run("enabled=never hugepages-64kB/enabled=always", "mmap buf 192K align=64K\nread_direct buf block=96K\n");
    assert_eq!(io(&r), (2, 4, 48, 0, 3, 3));
}

#[test]
fn a_buffer_already_written_takes_no_fault() {
    // The touch faults 2 PMDs; the read pins them without faulting.
    let r = run("enabled=always", "mmap buf 4M align=2M\ntouch buf write\nread_direct buf[1M+2M] block=512K\n");
    assert_eq!(io(&r), (4, 4, 0, 512, 0, 2));
}

#[test]
fn a_zero_page_is_written_over_before_it_is_pinned() {
    // A read touch maps the huge zero folio; FOLL_WRITE cannot pin it: each PMD takes a write
    // fault (do_huge_pmd_wp_page on the huge zero PMD allocates a THP), then pins it.
    let r = run("enabled=always", "mmap buf 2M align=2M\ntouch buf read\nread_direct buf block=1M\n");
    let (reads, folios, pte, pmd, faults, _) = io(&r);
    assert_eq!((reads, folios, pte, pmd, faults), (2, 2, 0, 512, 1));
}

#[test]
fn a_read_only_buffer_is_efault() {
    let r = run("enabled=never", "mmap buf 64K prot=r\nread_direct buf block=64K\n");
    assert_eq!(r.calls.last().unwrap().ret, "EFAULT");
    assert_eq!(io(&r).0, 0);
}

#[test]
fn errors_name_the_line_and_the_form() {
    let e = workload::parse("t.thpw", "mmap buf 1M\nread_direct buf\n").unwrap_err().to_string();
    assert!(e.starts_with("t.thpw:2: ") && e.contains("block=SIZE"), "{e}");
    let e = workload::parse("t.thpw", "mmap buf 1M\nread_direct buf block=1000\n").unwrap_err().to_string();
    assert!(e.contains("multiple of 4K"), "{e}");
    let e = workload::parse("t.thpw", "read_direct nope block=4K\n").unwrap_err().to_string();
    assert!(e.starts_with("t.thpw:1: "), "{e}");
}
