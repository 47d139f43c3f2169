//! Workloads that fork (issue #9): a BGSAVE-like snapshot (the `fork-bgsave` example), a
//! pre-forking server with a shared anonymous arena and a memfd, a shell pipeline, and
//! MADV_DONTFORK / MADV_WIPEONFORK ranges. The model runs each under both standard matrices with
//! every invariant checked after every operation; live (root, THP sysfs tree), `compare
//! --matrix` (the anon matrix, and the shmem one for the workload with shared memory) must find
//! every row equal, per process (minflt, Rss, AnonHugePages, census) and for
//! the system-wide counters (a run that others disturbed is rerun by compare itself).

use crate::{exclusive, skip_reason, thplab, thplab_unlocked, workspace};

fn workloads() -> Vec<String> {
    let dir = workspace().join("crates/thplab/tests/it/data/fork");
    let mut v: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path().to_str().unwrap().to_string())
        .filter(|p| p.ends_with(".thpw"))
        .collect();
    v.sort();
    v.push("fork-bgsave".into());
    v
}

#[test]
fn fork_workloads_run_in_the_model_with_every_invariant_checked() {
    for w in workloads() {
        for kind in ["anon", "shmem"] {
            let r = thplab(&["sim", &w, "--matrix", kind, "--check", "--json", "-q", "--mem", "2G"]);
            r.ok();
            let all = r.json();
            for one in all.as_array().expect("one result per setting") {
                let procs = one["model"]["processes"].as_array().unwrap_or_else(|| panic!("{w} {}: no processes", one["label"]));
                assert!(procs.len() >= 2, "{w}: {} processes", procs.len());
                assert_eq!(procs[0]["name"], "main");
            }
        }
    }
}

#[test]
fn fork_bgsave_copies_what_the_parent_writes_while_the_saver_lives() {
    // PMD always: 32 THPs faulted (32 faults). The parent writes 16 MiB at a 16 KiB stride while
    // the saver maps everything: 1024 writes, each splits its THP's PMD on the first write
    // (8 thp_split_pmd) and copies one 4 KiB page (wp_page_copy). The saver writes 4 MiB: two
    // more splits and 1024 copies. After the saver exits, the parent's 1024 writes to the next
    // 16 MiB reuse its THPs (do_huge_pmd_wp_page: refcount 1): 8 faults, no copy.
    let r = thplab(&["sim", "fork-bgsave", "--set", "enabled=always", "--json"]);
    r.ok();
    let j = r.json();
    let p = &j["processes"];
    assert_eq!(p[0]["name"], "main");
    assert_eq!(p[0]["process"]["minflt"], 32 + 1024 + 8);
    assert_eq!(p[0]["cow_copied"], 1024);
    assert_eq!(p[0]["cow_reused"], 8);
    assert_eq!(p[1]["name"], "saver");
    assert_eq!(p[1]["exited"], true);
    assert_eq!(p[1]["process"]["minflt"], 1024);
    assert_eq!(p[1]["cow_copied"], 1024);
    assert_eq!(j["vmstat"]["thp_split_pmd"], 10);
    assert_eq!(j["vmstat"]["thp_fault_alloc"], 32);
    // The parent: 24 THPs still PMD-mapped, 8 PTE-mapped with 1024 copies beside them; those
    // 8 lost the saver's PMD at its exit while partly mapped here: deferred split.
    assert_eq!(j["census"]["sizes"]["2048kB"]["pmd_mapped"], 24);
    assert_eq!(j["census"]["sizes"]["2048kB"]["partially_mapped"], 8);
    assert_eq!(j["census"]["sizes"]["4kB"]["folios"], 1024);
    assert_eq!(j["vmstat"]["thp_deferred_split_page"], 8);
}

#[test]
fn fork_workloads_match_the_live_kernel_in_every_setting() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let _g = exclusive();
    let mut failures = Vec::new();
    for w in workloads() {
        // The shmem matrix changes nothing for workloads without shared memory.
        let kinds: &[&str] = if w.contains("shared") { &["anon", "shmem"] } else { &["anon"] };
        for &kind in kinds {
            let r = thplab_unlocked(&workspace(), &["compare", &w, "--matrix", kind, "--json"]);
            let all = r.json();
            for one in all.as_array().expect("one object per setting") {
                let differing: Vec<String> = one["rows"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|row| row["differs"] == true)
                    .map(|row| format!("{} model {} live {}", row["field"], row["model"], row["live"]))
                    .collect();
                println!("{w} [{kind}] {}: {} differing rows", one["label"], differing.len());
                if !differing.is_empty() {
                    failures.push(format!("{w} [{kind}] {}: {}", one["label"], differing.join("; ")));
                }
            }
        }
    }
    assert!(failures.is_empty(), "model and live kernel differ:\n{}", failures.join("\n"));
}
