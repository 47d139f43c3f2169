//! hugetlb (issue #30 item 2): a workload with a 2 MiB pool, a private and a shared
//! MAP_HUGETLB mapping and a fork whose child copies the private pages. The model's figures
//! are derived by hand (docs/workload-format.md, hugetlb); live, every hugetlb line of
//! /proc/meminfo and minflt equal the kernel's, and the pool is back as it was after the run.

use crate::{exclusive, skip_reason, temp_file, thplab, thplab_unlocked, workspace};

/// Pool 4 (overcommit 3). mmap p (2 pages, private): Rsvd 2. mmap s (3 pages, shared): 5
/// reserved, 4 free, so one surplus page: Total 5, Free 5, Surp 1. p written: Free 3, Rsvd 3;
/// s's first page read: Free 2, Rsvd 2 (main: 3 faults). The child's writes to p copy both
/// pages (no reservation, none available: two surplus pages, Total 7) and exit frees them back
/// to the buddy allocator (surplus): Total 5. Changes over the run: Total +1, Free −2, Rsvd +2,
/// Surp +1, Hugetlb +2048 kB; the child 2 faults.
const COW: &str = "hugetlb_pool 2M 4 overcommit=3
mmap p 4M hugetlb
mmap s 6M hugetlb shared
touch p write
touch s[0+2M] read
fork c {
  touch p write
  exit
}
wait c
";

const POOL: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB";

fn check_figures(v: &serde_json::Value) {
    let m = &v["meminfo"];
    let got: Vec<i64> = ["HugePages_Total", "HugePages_Free", "HugePages_Rsvd", "HugePages_Surp", "Hugetlb"].iter().map(|k| m[k].as_i64().unwrap_or(i64::MIN)).collect();
    assert_eq!(got, [1, -2, 2, 1, 2048], "{m}");
    assert_eq!(v["process"]["minflt"], 3, "{}", v["process"]);
    let c = v["processes"].as_array().unwrap().iter().find(|p| p["name"] == "c").expect("the child");
    assert_eq!(c["process"]["minflt"], 2, "{c}");
    assert_eq!(v["census"]["sizes"]["2048kB"]["pmd_mapped"], 3, "{}", v["census"]);
}

#[test]
fn hugetlb_counts_in_the_model_are_derived_by_hand() {
    let (_d, w) = temp_file("cow.thpw", COW);
    let v = thplab(&["sim", &w, "--json"]).ok().json();
    check_figures(&v);
    // Without hugetlb, no hugetlb lines (results as before).
    let (_d2, plain) = temp_file("plain.thpw", "mmap a 4M\ntouch a write\n");
    let v = thplab(&["sim", &plain, "--json"]).ok().json();
    assert!(v["meminfo"].get("HugePages_Total").is_none(), "{}", v["meminfo"]);
}

#[test]
fn hugetlb_errors_name_the_line() {
    // The pool cannot cover the reservation: mmap fails with ENOMEM in the call's result; a
    // fault with no page is SIGBUS, the run's error naming the line.
    let (_d, w) = temp_file("short.thpw", "hugetlb_pool 2M 1\nmmap a 4M hugetlb\nmmap b 4M hugetlb noreserve\ntouch b write\n");
    let r = thplab(&["sim", &w]);
    assert!(r.stderr.contains("short.thpw:2") || r.stderr.contains("short.thpw:4"), "{}", r.stderr);
    assert!(r.stderr.contains("ENOMEM") || r.stderr.contains("SIGBUS"), "{}", r.stderr);
}

#[test]
fn hugetlb_matches_the_live_kernel_and_the_pool_is_restored() {
    if let Some(why) = skip_reason() {
        println!("skipped: {why}");
        return;
    }
    if !std::path::Path::new(POOL).exists() {
        println!("skipped: {POOL} does not exist (no hugetlb here)");
        return;
    }
    let _g = exclusive();
    let read = |knob: &str| std::fs::read_to_string(format!("{POOL}/{knob}")).unwrap_or_default();
    // The pool as no settings guard holds it (another thplab's live run may hold the lock for
    // minutes: wait for it, 60 s at a time).
    let pool = || (0..10).find_map(|_| live::guard::while_unlocked(|| (read("nr_hugepages"), read("nr_overcommit_hugepages"))).ok()).expect("the settings guard's lock within 10 min");
    let before = pool();
    let (_d, w) = temp_file("cow.thpw", COW);
    let mut r = thplab_unlocked(&workspace(), &["compare", &w, "--json"]);
    for _ in 0..9 {
        if !r.stderr.contains("another thplab live run holds") {
            break;
        }
        r = thplab_unlocked(&workspace(), &["compare", &w, "--json"]);
    }
    let after = pool();
    assert_eq!(before, after, "the pool is back as it was");
    let v = r.ok().json();
    let one = &v[0];
    check_figures(&one["live"]);
    let rows = one["rows"].as_array().expect("rows");
    for field in ["minflt", "c: minflt", "meminfo HugePages_Total", "meminfo HugePages_Free", "meminfo HugePages_Rsvd", "meminfo HugePages_Surp", "meminfo Hugetlb (kB)"] {
        let row = rows.iter().find(|r| r["field"] == field).unwrap_or_else(|| panic!("row {field} in {rows:?}"));
        assert_eq!(row["model"], row["live"], "{field}: {row}");
    }
}
