//! Workloads that fork (issue #9): a BGSAVE-like snapshot (the `fork-bgsave` example), a
//! pre-forking server with a shared anonymous arena and a memfd, a shell pipeline,
//! MADV_DONTFORK / MADV_WIPEONFORK ranges, and threads and a vfork child in main's mm. The model runs each under both standard matrices with
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
fn threads_and_a_vfork_child_fault_in_main_mm_without_copy_on_write() {
    let w = workspace().join("crates/thplab/tests/it/data/fork/threads-vfork.thpw");
    let w = w.to_str().unwrap();
    // (setting, minflt of main, w1, w2, v, reader). PMD always: main's write faults one THP;
    // w1's 4 MiB are that THP (no fault: the mm is main's, nothing write-protected) and one
    // more; w2's 512 writes at an 8 KiB stride fault two THPs; v's 256 writes to the 1 MiB
    // scratch region (too small for a PMD) fault 256 pages and its writes to w2's half hit;
    // the reader and main's last writes hit. 4 KiB pages: main 512, w1 the other 512 of its
    // 4 MiB, w2 512, v 256 + the 512 pages of w2's half that w2's stride skipped.
    for (set, main, w1, w2, v, reader) in [("enabled=always", 1, 1, 2, 256, 0), ("enabled=never", 512, 512, 512, 768, 0)] {
        let r = thplab(&["sim", w, "--set", set, "--json", "--check"]);
        r.ok();
        let j = r.json();
        let p = j["processes"].as_array().unwrap();
        let names: Vec<&str> = p.iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["main", "w1", "w2", "v", "reader"]);
        let minflt: Vec<u64> = p.iter().map(|p| p["process"]["minflt"].as_u64().unwrap()).collect();
        assert_eq!(minflt, [main, w1, w2, v, reader], "{set}");
        assert_eq!(j["process"]["minflt"], main, "{set}: the top level is main's own faults");
        for q in &p[1..] {
            assert_eq!(q["shares_mm_with"], "main");
            assert_eq!(q["cow_copied"], 0);
        }
        assert!(p[0].get("shares_mm_with").is_none());
        let exited: Vec<bool> = p.iter().map(|p| p["exited"].as_bool().unwrap()).collect();
        assert_eq!(exited, [false, true, false, true, false]);
        // One mm: 8 MiB + 1 MiB resident, the same census for main and the live threads.
        assert_eq!(j["process"]["rss_bytes"], 9 << 20, "{set}");
        assert_eq!(p[2]["census"], j["census"]);
        assert_eq!(p[4]["process"]["rss_bytes"], 9 << 20);
        let thps = if set == "enabled=always" { 4 } else { 0 };
        assert_eq!(j["census"]["sizes"]["2048kB"]["pmd_mapped"].as_u64().unwrap_or(0), thps, "{set}");
        assert_eq!(j["census"]["sizes"]["4kB"]["folios"], 2304 - 512 * thps, "{set}");
    }
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
