//! The exposition of a fake THP tree and /proc whose values are written here, so every line of
//! the expected text follows from the files by hand.

use std::path::Path;

use super::*;

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

const THP: &str = "sys/kernel/mm/transparent_hugepage";

/// A 6.18-like tree with three sizes (8kB has shmem knobs only, as on this machine's kernel).
fn fake_tree(dir: &Path) {
    let t = |rel: &str, text: &str| write(dir, &format!("{THP}/{rel}"), text);
    t("enabled", "always [madvise] never\n");
    t("defrag", "always defer defer+madvise [madvise] never\n");
    t("shmem_enabled", "always within_size advise [never] deny force\n");
    t("use_zero_page", "1\n");
    t("hpage_pmd_size", "2097152\n");
    t("hugepages-64kB/enabled", "always inherit madvise [never]\n");
    t("hugepages-64kB/shmem_enabled", "always inherit within_size advise [never]\n");
    t("hugepages-64kB/stats/anon_fault_alloc", "16384\n");
    t("hugepages-64kB/stats/nr_anon", "12\n");
    t("hugepages-64kB/stats/split", "3\n");
    t("hugepages-2048kB/enabled", "always [inherit] madvise never\n");
    t("hugepages-2048kB/shmem_enabled", "always [inherit] within_size advise never\n");
    t("hugepages-2048kB/stats/anon_fault_alloc", "512\n");
    t("hugepages-2048kB/stats/nr_anon", "2\n");
    t("hugepages-8kB/shmem_enabled", "always inherit within_size advise [never]\n");
    t("hugepages-8kB/stats/shmem_alloc", "7\n");
    t("khugepaged/pages_collapsed", "12\n");
    t("khugepaged/full_scans", "52\n");
    t("khugepaged/pages_to_scan", "4096\n");
    write(dir, "proc/vmstat", "nr_free_pages 100\nthp_fault_alloc 2748\nnr_anon_transparent_hugepages 2\nthp_split_page 6\nnr_hugetlb 0\npgfault 5\n");
}

fn opts(dir: &Path, selection: Selection) -> Options {
    Options { root: Root::under(dir), selection, budget: Duration::from_millis(500), debug: false }
}

const EXPECTED_SYSTEM: &str = "\
# HELP thplab_mthp_anon_fault_alloc hugepages-<size>/stats/anon_fault_alloc: anonymous folios of this size allocated at page fault
# TYPE thplab_mthp_anon_fault_alloc counter
thplab_mthp_anon_fault_alloc_total{size=\"64kB\"} 16384
thplab_mthp_anon_fault_alloc_total{size=\"2048kB\"} 512
# HELP thplab_mthp_nr_anon hugepages-<size>/stats/nr_anon: anonymous folios of this size now
# TYPE thplab_mthp_nr_anon gauge
thplab_mthp_nr_anon{size=\"64kB\"} 12
thplab_mthp_nr_anon{size=\"2048kB\"} 2
# HELP thplab_mthp_shmem_alloc hugepages-<size>/stats/shmem_alloc: shmem folios of this size allocated
# TYPE thplab_mthp_shmem_alloc counter
thplab_mthp_shmem_alloc_total{size=\"8kB\"} 7
# HELP thplab_mthp_split hugepages-<size>/stats/split: folios of this size split into smaller ones
# TYPE thplab_mthp_split counter
thplab_mthp_split_total{size=\"64kB\"} 3
# HELP thplab_vmstat_thp_fault_alloc /proc/vmstat thp_fault_alloc
# TYPE thplab_vmstat_thp_fault_alloc counter
thplab_vmstat_thp_fault_alloc_total 2748
# HELP thplab_vmstat_thp_split_page /proc/vmstat thp_split_page
# TYPE thplab_vmstat_thp_split_page counter
thplab_vmstat_thp_split_page_total 6
# HELP thplab_vmstat_nr_anon_transparent_hugepages /proc/vmstat nr_anon_transparent_hugepages (in PMD-sized THPs)
# TYPE thplab_vmstat_nr_anon_transparent_hugepages gauge
thplab_vmstat_nr_anon_transparent_hugepages 2
# HELP thplab_khugepaged_full_scans khugepaged/full_scans
# TYPE thplab_khugepaged_full_scans counter
thplab_khugepaged_full_scans_total 52
# HELP thplab_khugepaged_pages_collapsed khugepaged/pages_collapsed
# TYPE thplab_khugepaged_pages_collapsed counter
thplab_khugepaged_pages_collapsed_total 12
# HELP thplab_khugepaged_pages_to_scan khugepaged/pages_to_scan
# TYPE thplab_khugepaged_pages_to_scan gauge
thplab_khugepaged_pages_to_scan 4096
# HELP thplab_settings the top-level knobs of /sys/kernel/mm/transparent_hugepage (selected values)
# TYPE thplab_settings info
thplab_settings_info{defrag=\"madvise\",enabled=\"madvise\",hpage_pmd_size=\"2097152\",shmem_enabled=\"never\",use_zero_page=\"1\"} 1
# HELP thplab_size_settings the knobs of each hugepages-<size> directory (selected values)
# TYPE thplab_size_settings info
thplab_size_settings_info{size=\"8kB\",shmem_enabled=\"never\"} 1
thplab_size_settings_info{size=\"64kB\",enabled=\"never\",shmem_enabled=\"never\"} 1
thplab_size_settings_info{size=\"2048kB\",enabled=\"inherit\",shmem_enabled=\"inherit\"} 1
";

/// The per-process families, with `rows` in each of the first ones (pid, comm).
fn expected_process(rss: &str, anon_huge: &str) -> String {
    format!(
        "\
# HELP thplab_process_folios folios mapped by the process, by VMA kind (anon, shmem, file) and folio size (census of pagemap and kpageflags)
# TYPE thplab_process_folios gauge
# HELP thplab_process_pmd_mapped_folios of those, folios mapped by a PMD
# TYPE thplab_process_pmd_mapped_folios gauge
# HELP thplab_process_partially_mapped_folios of those, PTE-mapped folios of which some pages are not mapped in the process
# TYPE thplab_process_partially_mapped_folios gauge
# HELP thplab_process_rss_bytes Rss of the process (sum of /proc/PID/smaps)
# TYPE thplab_process_rss_bytes gauge
{rss}# HELP thplab_process_anon_huge_bytes AnonHugePages of the process (sum of /proc/PID/smaps)
# TYPE thplab_process_anon_huge_bytes gauge
{anon_huge}# HELP thplab_process_zero_page_ptes PTEs mapping the shared zero page
# TYPE thplab_process_zero_page_ptes gauge
# HELP thplab_process_huge_zero_pmds PMDs mapping the huge zero folio
# TYPE thplab_process_huge_zero_pmds gauge
# HELP thplab_process_census_seconds time to read smaps and take the census of the process
# TYPE thplab_process_census_seconds gauge
# HELP thplab_process_large_folio_bytes memory mapped by pages of large folios (what the bloat is sampled from)
# TYPE thplab_process_large_folio_bytes gauge
# HELP thplab_process_bloat_bytes estimated zero-filled memory in large folios (bloat)
# TYPE thplab_process_bloat_bytes gauge
# HELP thplab_process_bloat_error_bytes 95 % error of the bloat estimate (0 when every page was read)
# TYPE thplab_process_bloat_error_bytes gauge
# HELP thplab_process_rss_4k_bytes estimated Rss with 4 KiB pages only (Rss minus the bloat)
# TYPE thplab_process_rss_4k_bytes gauge
# HELP thplab_process_page_table_bytes page-table memory of the process (VmPTE)
# TYPE thplab_process_page_table_bytes gauge
# HELP thplab_process_bloat_sampled 1 when the bloat is an estimate from a sample (the time ran out before every page was read), 0 when exact
# TYPE thplab_process_bloat_sampled gauge
"
    )
}

fn expected_scrape(selected: usize, read: usize, errors: [u64; 5]) -> String {
    let [permission, exited, sysfs, parse, io] = errors;
    format!(
        "\
# HELP thplab_scrape_processes_selected processes selected by --name, --cgroup and --pid
# TYPE thplab_scrape_processes_selected gauge
thplab_scrape_processes_selected {selected}
# HELP thplab_scrape_processes_read selected processes read in this scrape
# TYPE thplab_scrape_processes_read gauge
thplab_scrape_processes_read {read}
# HELP thplab_scrape_processes_skipped selected processes skipped because the budget ran out
# TYPE thplab_scrape_processes_skipped gauge
thplab_scrape_processes_skipped 0
# HELP thplab_scrape_truncated 1 when the budget ran out before every selected process was read
# TYPE thplab_scrape_truncated gauge
thplab_scrape_truncated 0
# HELP thplab_scrape_errors parts of scrapes left out since the exporter started, by kind (permission, process_exited, sysfs, parse, io)
# TYPE thplab_scrape_errors counter
thplab_scrape_errors_total{{kind=\"permission\"}} {permission}
thplab_scrape_errors_total{{kind=\"process_exited\"}} {exited}
thplab_scrape_errors_total{{kind=\"sysfs\"}} {sysfs}
thplab_scrape_errors_total{{kind=\"parse\"}} {parse}
thplab_scrape_errors_total{{kind=\"io\"}} {io}
# HELP thplab_scrape_budget_seconds the time budget of a scrape (--budget)
# TYPE thplab_scrape_budget_seconds gauge
thplab_scrape_budget_seconds 0.5
# HELP thplab_scrape_duration_seconds time this scrape took to read everything, before encoding
# TYPE thplab_scrape_duration_seconds gauge
"
    )
}

/// The duration line varies: check its shape and value, and return the text without it.
fn without_duration(text: &str, budget_s: f64) -> String {
    let prefix = "thplab_scrape_duration_seconds ";
    let line = text.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no duration in\n{text}"));
    let d: f64 = line[prefix.len()..].parse().unwrap();
    assert!(d > 0.0 && d < budget_s, "{line}");
    text.replace(&format!("{line}\n"), "")
}

#[test]
fn exposition_of_a_fake_tree_without_processes() {
    let dir = tempfile::tempdir().unwrap();
    fake_tree(dir.path());
    let ex = Exporter::new(opts(dir.path(), Selection::default()));
    let (text, summary) = ex.scrape();
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    let want = format!("{EXPECTED_SYSTEM}{}{}# EOF\n", expected_process("", ""), expected_scrape(0, 0, [0; 5]));
    let got = without_duration(&text, 0.5);
    assert_eq!(got, want, "\n--- got\n{got}\n--- want\n{want}");
}

#[test]
fn encode_prints_the_duration_it_is_given() {
    let meta = ScrapeMeta { duration: Duration::from_millis(250), budget: Duration::from_millis(500), errors_total: BTreeMap::new() };
    let text = encode(&SystemSnapshot::default(), &ProcessScrape::default(), &meta);
    assert!(text.ends_with("thplab_scrape_duration_seconds 0.25\n# EOF\n"), "{text}");
}

/// A fake /proc/PID: stat with `state` and `flags` (field 9), comm, cgroup, statm, smaps.
fn fake_process(dir: &Path, pid: i32, comm: &str, state: &str, flags: u64, cgroup: &str, smaps: &str) {
    write(dir, &format!("proc/{pid}/stat"), &format!("{pid} ({comm}) {state} 1 {pid} {pid} 0 -1 {flags} 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0\n"));
    write(dir, &format!("proc/{pid}/comm"), &format!("{comm}\n"));
    write(dir, &format!("proc/{pid}/cgroup"), cgroup);
    write(dir, &format!("proc/{pid}/statm"), "100 10 0 0 0 0 0\n");
    write(dir, &format!("proc/{pid}/smaps"), smaps);
}

const SMAPS: &str = "\
7e0000000000-7e0000400000 rw-p 00000000 00:00 0 \nRss:                4096 kB\nAnonHugePages:      2048 kB\n\
7f0000000000-7f0000001000 r--p 00000000 08:01 1234   /usr/lib/x.so\nRss:                   4 kB\nAnonHugePages:         0 kB\n";

#[test]
fn processes_are_selected_by_name_cgroup_and_pid() {
    let dir = tempfile::tempdir().unwrap();
    fake_tree(dir.path());
    let d = dir.path();
    fake_process(d, 100, "redis-server", "S", 0x40_0100, "0::/system.slice/redis.service\n", SMAPS);
    fake_process(d, 200, "kworker/0:1", "I", 0x0420_8060, "0::/\n", "");
    fake_process(d, 300, "sleep", "S", 0x40_0000, "0::/user.slice/user-0.slice/session-1.scope\n", SMAPS);
    fake_process(d, 400, "defunct", "Z", 0x40_0000, "0::/user.slice\n", "");
    fake_process(d, 500, "redis-cli", "S", 0x40_0000, "0::/other\n", "");
    // 400 is a zombie, 999 does not exist: both are counted as process_exited.
    let sel = selection(&["^redis-s".into()], &["/sys/fs/cgroup/user.slice/".into()], &[400, 999]).unwrap();
    let mut errors = Vec::new();
    let got = select(&Root::under(d), &sel, &mut errors);
    assert_eq!(got.iter().map(|s| (s.pid, s.comm.as_str())).collect::<Vec<_>>(), vec![(100, "redis-server"), (300, "sleep")]);
    assert_eq!(errors.iter().map(|e| e.kind).collect::<Vec<_>>(), vec![ErrorKind::ProcessExited, ErrorKind::ProcessExited], "{errors:?}");

    // The scrape: Rss 4100 kB = 4198400 bytes, AnonHugePages 2048 kB = 2097152 bytes, for
    // both; no census on a copy of /proc (no pagemap). The error counter adds up over scrapes.
    let ex = Exporter::new(opts(d, sel));
    let rss = "thplab_process_rss_bytes{pid=\"100\",comm=\"redis-server\"} 4198400\nthplab_process_rss_bytes{pid=\"300\",comm=\"sleep\"} 4198400\n";
    let huge = "thplab_process_anon_huge_bytes{pid=\"100\",comm=\"redis-server\"} 2097152\nthplab_process_anon_huge_bytes{pid=\"300\",comm=\"sleep\"} 2097152\n";
    for scrape in 1..=2u64 {
        let (text, summary) = ex.scrape();
        assert_eq!((summary.selected, summary.read, summary.truncated), (2, 2, false));
        let want = format!("{EXPECTED_SYSTEM}{}{}# EOF\n", expected_process(rss, huge), expected_scrape(2, 2, [0, 2 * scrape, 0, 0, 0]));
        let got = without_duration(&text, 0.5);
        assert_eq!(got, want, "scrape {scrape}\n--- got\n{got}\n--- want\n{want}");
    }
}

#[test]
fn a_budget_too_small_for_a_census_truncates_the_scrape() {
    let dir = tempfile::tempdir().unwrap();
    fake_tree(dir.path());
    fake_process(dir.path(), 100, "big", "S", 0, "0::/\n", SMAPS);
    // statm says 2^20 pages resident (4 GiB): the first census is estimated at
    // 2 ms + 4 · 0.2 s, more than a 100 ms budget leaves.
    write(dir.path(), "proc/100/statm", "1048576 1048576 0 0 0 0 0\n");
    let mut o = opts(dir.path(), Selection { pids: vec![100], ..Default::default() });
    o.budget = Duration::from_millis(100);
    let (text, summary) = Exporter::new(o).scrape();
    assert_eq!((summary.selected, summary.read, summary.skipped, summary.truncated), (1, 0, 1, true));
    assert!(text.contains("\nthplab_scrape_truncated 1\n") && text.contains("\nthplab_scrape_processes_skipped 1\n"), "{text}");
    assert!(!text.contains("thplab_process_rss_bytes{"), "{text}");
}

#[test]
fn unreadable_and_malformed_files_are_counted_and_left_out() {
    let dir = tempfile::tempdir().unwrap();
    fake_tree(dir.path());
    write(dir.path(), &format!("{THP}/hugepages-64kB/stats/split"), "lots\n");
    std::fs::remove_file(dir.path().join("proc/vmstat")).unwrap();
    let (text, summary) = Exporter::new(opts(dir.path(), Selection::default())).scrape();
    let kinds: Vec<ErrorKind> = summary.errors.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, vec![ErrorKind::Parse, ErrorKind::Sysfs], "{:?}", summary.errors);
    assert!(summary.errors[0].message.contains("hugepages-64kB/stats/split: expected a number, found 'lots'"), "{:?}", summary.errors);
    assert!(!text.contains("thplab_mthp_split_total") && !text.contains("thplab_vmstat_"), "{text}");
    assert!(text.contains("thplab_scrape_errors_total{kind=\"sysfs\"} 1\n") && text.contains("thplab_scrape_errors_total{kind=\"parse\"} 1\n"), "{text}");
}

#[test]
fn a_bad_selection_is_a_clear_error() {
    let e = selection(&["redis(".into()], &[], &[]).unwrap_err();
    assert!(e.starts_with("--name 'redis(': not a valid regular expression"), "{e}");
    assert_eq!(selection(&[], &["".into()], &[]).unwrap_err(), "--cgroup '': an empty path (use / for every process)");
    assert_eq!(selection(&[], &[], &[0]).unwrap_err(), "--pid 0: a process id is a positive number");
}

#[test]
fn label_names_are_sanitized() {
    assert_eq!(label_name("hugepages-64kB"), "hugepages_64kB");
    assert_eq!(label_name("2x"), "_2x");
    assert_eq!(label_name("enabled"), "enabled");
}
