//! fork, copy-on-write and exit in the model (issue #9). Each fixture runs with every invariant
//! checked after every operation, and again access by access (the two must agree). The
//! expected dumps are derived by hand from the 6.18 source (mm/memory.c: do_wp_page,
//! wp_can_reuse_anon_folio, __wp_can_reuse_large_anon_folio; mm/huge_memory.c: copy_huge_pmd,
//! do_huge_pmd_wp_page; include/linux/rmap.h, CONFIG_MM_ID), and each was also run on the live
//! kernel of this machine kind with `thplab compare`, which found every row equal (P10 of
//! docs/kernel-thp.md §10 is the first).

use expect_test::{expect, Expect};
use thp_abi::ThpSettings;
use uapi::RunResult;

use super::*;

fn run_checked(set: &str, text: &str) -> RunResult {
    let mut s = ThpSettings::default();
    for a in set.split_whitespace() {
        s.apply_assignment(a).unwrap();
    }
    let w = workload::parse("fork.thpw", text).unwrap();
    let m = MachineConfig { mem_bytes: 512 << 20, ..MachineConfig::default() };
    let mut opts = RunOptions { check_invariants: true, ..Default::default() };
    let (r, k) = run_with(&w, &s, &m, &mut opts).unwrap_or_else(|e| panic!("{e}"));
    k.check_invariants().unwrap();
    let mut one = RunOptions { check_invariants: true, per_access: true, ..Default::default() };
    let (r1, _) = run_with(&w, &s, &m, &mut one).unwrap();
    assert_eq!(serde_json::to_value(&r).unwrap(), serde_json::to_value(&r1).unwrap(), "batched and single accesses disagree");
    r
}

/// Per process, procfs style: faults, Rss, AnonHugePages, copies and reuses, the census; then
/// the counters that moved.
fn dump(r: &RunResult) -> String {
    let mut s = String::new();
    for p in &r.processes {
        s += &format!(
            "{}{}{}: minflt {} Rss {} kB AnonHugePages {} kB cow_copied {} cow_reused {}\n",
            p.name,
            if p.exited { " (exited)" } else { "" },
            p.shares_mm_with.as_ref().map_or(String::new(), |m| format!(" (in {m}'s mm)")),
            p.process.minflt,
            p.process.rss_bytes / 1024,
            p.process.anon_huge_bytes / 1024,
            p.cow_copied.unwrap_or(0),
            p.cow_reused.unwrap_or(0)
        );
        for (size, e) in &p.census.sizes {
            s += &format!("  {size}: {} (pmd {} pte {} partial {})\n", e.folios, e.pmd_mapped, e.pte_mapped, e.partially_mapped);
        }
    }
    s += &crate::tests::counter_lines(r);
    s
}

fn check(set: &str, text: &str, want: Expect) {
    want.assert_eq(&dump(&run_checked(set, text)));
}

/// P10, read from the live kernel: four THPs, a fork, the child writes one byte in two of them:
/// two faults in the child, each splitting the shared PMD (thp_split_pmd) and copying one page;
/// no THP is allocated for the copy; the child keeps two PMD-mapped THPs (AnonHugePages
/// 4096 kB), the parent four.
#[test]
fn writes_to_shared_thps_split_the_pmd_and_copy_one_page() {
    check(
        "enabled=always",
        "mmap buf 8M align=2M\ntouch buf write\nfork child {\n  touch buf[0+4K] write\n  touch buf[2M+4K] write\n}\n",
        expect![[r#"
            main: minflt 4 Rss 8192 kB AnonHugePages 8192 kB cow_copied 0 cow_reused 0
              2048kB: 4 (pmd 4 pte 0 partial 0)
            child: minflt 2 Rss 8192 kB AnonHugePages 4096 kB cow_copied 2 cow_reused 0
              4kB: 2 (pmd 0 pte 2 partial 0)
              2048kB: 4 (pmd 2 pte 2 partial 2)
            thp_fault_alloc 4
            thp_split_pmd 2
            hugepages-2048kB/stats/anon_fault_alloc 4
            hugepages-2048kB/stats/nr_anon 4
        "#]],
    );
}

/// 64 KiB mTHP: the child copies all 16 pages of the first folio (16 faults); the folio is
/// then mapped by main alone, so the mm ids clear "maybe mapped shared" and main's 16 writes
/// reuse its pages one PTE at a time (16 faults, no copy).
#[test]
fn an_mthp_the_other_side_no_longer_maps_is_reused_page_by_page() {
    check(
        "hugepages-64kB/enabled=always",
        "mmap buf 1M align=2M\ntouch buf write\nfork child {\n  touch buf[0+64K] write\n}\ntouch buf[0+64K] write\n",
        expect![[r#"
            main: minflt 32 Rss 1024 kB AnonHugePages 0 kB cow_copied 0 cow_reused 16
              64kB: 16 (pmd 0 pte 16 partial 0)
            child: minflt 16 Rss 1024 kB AnonHugePages 0 kB cow_copied 16 cow_reused 0
              4kB: 16 (pmd 0 pte 16 partial 0)
              64kB: 15 (pmd 0 pte 15 partial 0)
            hugepages-64kB/stats/anon_fault_alloc 16
            hugepages-64kB/stats/nr_anon 16
        "#]],
    );
}

/// After the child exits, main's write to its THP finds refcount 1 in do_huge_pmd_wp_page and
/// reuses the whole PMD: one fault, no split.
#[test]
fn a_thp_is_reused_whole_once_the_child_has_exited() {
    check(
        "enabled=always",
        "mmap buf 2M align=2M\ntouch buf write\nfork c {\n  touch buf read\n  exit\n}\nwait c\ntouch buf write\n",
        expect![[r#"
            main: minflt 2 Rss 2048 kB AnonHugePages 2048 kB cow_copied 0 cow_reused 1
              2048kB: 1 (pmd 1 pte 0 partial 0)
            c (exited): minflt 0 Rss 0 kB AnonHugePages 0 kB cow_copied 0 cow_reused 0
            thp_fault_alloc 1
            hugepages-2048kB/stats/anon_fault_alloc 1
            hugepages-2048kB/stats/nr_anon 1
        "#]],
    );
}

/// __wp_can_reuse_large_anon_folio refuses a large folio with one page mapped ("free up a
/// large folio"): main copies 15 pages while the child lives, the child's exit leaves one page
/// of the folio mapped (partially mapped: split_deferred), and main's write to that last page
/// copies it too, which frees the folio (nr_anon back to 0). Live: 17 faults, 16 4 KiB folios.
#[test]
fn a_large_folio_with_one_page_left_is_copied_not_reused() {
    check(
        "hugepages-64kB/enabled=always",
        "mmap buf 64K align=64K\ntouch buf write\nfork c\ntouch buf[0+60K] write\nin c {\n  exit\n}\nwait c\ntouch buf[60K+4K] write\n",
        expect![[r#"
            main: minflt 17 Rss 64 kB AnonHugePages 0 kB cow_copied 16 cow_reused 0
              4kB: 16 (pmd 0 pte 16 partial 0)
            c (exited): minflt 0 Rss 0 kB AnonHugePages 0 kB cow_copied 0 cow_reused 0
            hugepages-64kB/stats/anon_fault_alloc 1
            hugepages-64kB/stats/split_deferred 1
        "#]],
    );
}

/// MADV_DONTFORK leaves a range out of the child (a touch there would be SIGSEGV);
/// MADV_WIPEONFORK gives it empty: the child's reads map the zero page, its writes fault new
/// pages. Neither range is copied, so main's writes there hit; `keep` is shared and main's 16
/// writes copy (the child still maps every page).
#[test]
fn dontfork_and_wipeonfork_ranges() {
    check(
        "enabled=never",
        "mmap keep 64K\nmmap gone 64K\nmmap wiped 64K\ntouch keep write\ntouch gone write\ntouch wiped write\n\
         madvise gone dontfork\nmadvise wiped wipeonfork\n\
         fork c {\n  touch wiped[0+32K] read\n  touch wiped[32K+32K] write\n}\n\
         touch wiped write\ntouch gone write\ntouch keep write\n",
        expect![[r#"
            main: minflt 64 Rss 192 kB AnonHugePages 0 kB cow_copied 16 cow_reused 0
              4kB: 48 (pmd 0 pte 48 partial 0)
            c: minflt 16 Rss 96 kB AnonHugePages 0 kB cow_copied 0 cow_reused 0
              4kB: 24 (pmd 0 pte 24 partial 0)
        "#]],
    );
    let w = workload::parse("f.thpw", "mmap gone 64K\ntouch gone write\nmadvise gone dontfork\nfork c {\n  touch gone read\n}\n").unwrap();
    let e = run(&w, &ThpSettings::default(), &MachineConfig::default()).unwrap_err();
    assert!(e.to_string().contains("would get SIGSEGV"), "{e}");
}

/// Threads (issue: one machine, many processes, item 2): a thread runs in main's mm, so its
/// writes are faults as if main made them, none copy-on-write (nothing is write-protected:
/// kernel/fork.c copy_mm with CLONE_VM shares the mm, dup_mmap never runs). Main faults 128
/// pages, t the other 128 (its writes to main's half hit), u's reads all hit; u's exit tears
/// nothing down (kernel/exit.c: exit_mm → mmput drops a reference), so main's last writes hit.
/// Each task counts its own faults (mm/memory.c: mm_account_fault, current->min_flt); the
/// census is the one shared mm's, for main and for t (u exited: none).
#[test]
fn threads_fault_in_main_mm_and_their_exit_tears_nothing_down() {
    check(
        "enabled=never",
        "mmap buf 1M\ntouch buf[0+512K] write\nthread t {\n  touch buf[512K+512K] write\n  touch buf[0+512K] write\n}\n\
         thread u {\n  touch buf read\n  exit\n}\nwait u\ntouch buf write\n",
        expect![[r#"
            main: minflt 128 Rss 1024 kB AnonHugePages 0 kB cow_copied 0 cow_reused 0
              4kB: 256 (pmd 0 pte 256 partial 0)
            t (in main's mm): minflt 128 Rss 1024 kB AnonHugePages 0 kB cow_copied 0 cow_reused 0
              4kB: 256 (pmd 0 pte 256 partial 0)
            u (exited) (in main's mm): minflt 0 Rss 0 kB AnonHugePages 0 kB cow_copied 0 cow_reused 0
        "#]],
    );
}

/// A vfork child writes main's memory directly: the THP main faulted is written without a
/// fault (mapped writable in the one mm, no copy), the untouched second 2 MiB is an ordinary
/// THP fault (do_huge_pmd_anonymous_page) that puts the THP into main's mm. After the child's
/// exit main's writes all hit: main has both THPs PMD-mapped, one fault each.
#[test]
fn a_vfork_child_writes_main_pages_without_copy_on_write() {
    check(
        "enabled=always",
        "mmap buf 4M align=2M\ntouch buf[0+2M] write\nvfork v {\n  touch buf write\n  exit\n}\nwait v\ntouch buf write\n",
        expect![[r#"
            main: minflt 1 Rss 4096 kB AnonHugePages 4096 kB cow_copied 0 cow_reused 0
              2048kB: 2 (pmd 2 pte 0 partial 0)
            v (exited) (in main's mm): minflt 1 Rss 0 kB AnonHugePages 0 kB cow_copied 0 cow_reused 0
            thp_fault_alloc 2
            hugepages-2048kB/stats/anon_fault_alloc 2
            hugepages-2048kB/stats/nr_anon 2
        "#]],
    );
}

/// A thread after a fork writes pages that main's mm shares with the forked child: each of
/// its 16 writes copies (do_wp_page → wp_page_copy), and the copies are the thread's faults,
/// not main's; main's mm then maps the 16 copies, the child the 16 originals.
#[test]
fn a_thread_writing_pages_shared_by_fork_copies_them_as_its_own_faults() {
    check(
        "enabled=never",
        "mmap buf 64K\ntouch buf write\nfork c\nthread t {\n  touch buf write\n}\n",
        expect![[r#"
            main: minflt 16 Rss 64 kB AnonHugePages 0 kB cow_copied 0 cow_reused 0
              4kB: 16 (pmd 0 pte 16 partial 0)
            c: minflt 0 Rss 64 kB AnonHugePages 0 kB cow_copied 0 cow_reused 0
              4kB: 16 (pmd 0 pte 16 partial 0)
            t (in main's mm): minflt 16 Rss 64 kB AnonHugePages 0 kB cow_copied 16 cow_reused 0
              4kB: 16 (pmd 0 pte 16 partial 0)
        "#]],
    );
}

/// Main's bloat (`process.bloat_bytes`) and its census of large folios (size → (folios,
/// partially mapped)), so that a bloat of 0 is checked on folios that are really there.
fn main_bloat(set: &str, text: &str) -> (u64, Vec<(String, u64, u64)>) {
    let r = run_checked(set, text);
    let main = &r.processes[0];
    assert_eq!(main.name, "main");
    assert_eq!(main.process.bloat_bytes, r.process.bloat_bytes);
    let large = main.census.sizes.iter().filter(|(k, _)| k.as_str() != "4kB").map(|(k, e)| (k.to_string(), e.folios, e.partially_mapped)).collect();
    (main.process.bloat_bytes.unwrap_or(0), large)
}

/// Issue #27 item 1: bloat counts pages never touched, whoever maps them. Main writes all
/// 64 MiB; a child that shares every folio and exits must not make them "untouched" (its
/// zap of a shared PMD used to clear pg::TOUCHED of all 512 pages: 65 536 kB of bloat under
/// `always`). Derived: every page written → bloat 0, with 32 PMD-mapped THPs under `always`,
/// 1024 64 KiB folios under 64K mTHP, 16 384 4 KiB pages under `never`.
#[test]
fn bloat_after_a_fork_of_written_memory_is_zero() {
    let text = "mmap data 64M align=2M\ntouch data write\nfork c {\n  exit\n}\nwait c\n";
    assert_eq!(main_bloat("enabled=always", text), (0, vec![("2048kB".into(), 32, 0)]));
    assert_eq!(main_bloat("hugepages-64kB/enabled=always", text), (0, vec![("64kB".into(), 1024, 0)]));
    assert_eq!(main_bloat("enabled=never", text), (0, vec![]));
}

/// The BGSAVE shape (examples/fork-bgsave.thpw, small): the saver reads everything, main
/// writes one page per 16 KiB of the first MiB while the saver lives (one PMD split, 64
/// copies), the saver writes the last MiB (its own copies) and exits. Main maps 448 pages of
/// the first THP (partially mapped: the 64 it replaced were mapped by the saver alone), 64
/// copies, and the second THP by its PMD. Every one of those pages was written by main's
/// fill, mapped or not → bloat 0 (the saver's exit used to clear pg::TOUCHED of the pages it
/// mapped, and the census counted a partially mapped folio's unmapped pages as bloat).
#[test]
fn bloat_after_a_bgsave_fork_is_zero() {
    let text = "mmap data 4M align=2M\ntouch data write\nfork s {\n  touch data read\n}\ntouch data[0+1M] write stride=16K\n\
                in s {\n  touch data[3M+1M] write\n  exit\n}\nwait s\n";
    assert_eq!(main_bloat("enabled=always", text), (0, vec![("2048kB".into(), 2, 1)]));
}

/// Bloat that is really there survives a fork: main writes one page per 64 KiB of the first
/// MiB, so under `always` one THP holds 16 touched pages (496 untouched: 1984 kB), under 64K
/// mTHP 16 folios hold one touched page each (240 untouched: 960 kB). The child writes a page
/// main never touched (a copy of its own: the shared page stays untouched) and exits; main's
/// bloat is unchanged.
#[test]
fn bloat_of_untouched_pages_survives_a_fork() {
    let text = "mmap data 4M align=2M\ntouch data[0+1M] write stride=64K\nfork c {\n  touch data[1M+4K] write\n  exit\n}\nwait c\n";
    assert_eq!(main_bloat("enabled=always", text), (496 * 4096, vec![("2048kB".into(), 1, 0)]));
    assert_eq!(main_bloat("hugepages-64kB/enabled=always", text), (240 * 4096, vec![("64kB".into(), 16, 0)]));
    assert_eq!(main_bloat("enabled=never", text), (0, vec![]));
}
