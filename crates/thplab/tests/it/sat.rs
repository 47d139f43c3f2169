//! `thplab study sat` (issue #32 item 5) end to end in the model on a tiny instance: a planted
//! random 3-SAT instance of 40 variables (170 clauses) generated, minisat recorded with its
//! accesses under QEMU with GLIBC_TUNABLES=glibc.malloc.hugetlb=1, its replay predicted under
//! the three configurations and three paging modes (`--no-live`). Checked by hand: the
//! instance is satisfiable by construction, so minisat exits 10 and its witness satisfies
//! every clause; the recording holds the heap (brk) and glibc's madvise(MADV_HUGEPAGE) on it.
//! Needs root, qemu-user and minisat; otherwise prints `skipped: REASON` and passes.

use crate::{exclusive, skip_reason, thplab_unlocked};

/// madvise's MADV_HUGEPAGE (include/uapi/asm-generic/mman-common.h).
const MADV_HUGEPAGE: u64 = 14;

#[test]
fn sat_study_records_and_predicts_a_tiny_instance() {
    if let Some(why) = skip_reason() {
        println!("skipped: {why}");
        return;
    }
    if let Err(why) = record::accesses::qemu::available() {
        println!("skipped: {why}");
        return;
    }
    if let Err(why) = sat_study::solver::Solver::Minisat.path() {
        println!("skipped: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let r = {
        let _g = exclusive();
        thplab_unlocked(dir.path(), &["study", "sat", "--vars", "40", "--planted", "--seed", "3", "--timed", "1", "--no-live", "--json", "--dir", d])
    };
    println!("{}", r.stderr);
    r.ok();
    // The recorded run's own output comes first (minisat's `SATISFIABLE`), then the JSON.
    let at = r.stdout.find("{\n").unwrap_or_else(|| panic!("no JSON: {}", r.stdout));
    let v: serde_json::Value = serde_json::from_str(&r.stdout[at..]).unwrap();
    // round(40 x 4.26) = 170 clauses; planted: satisfiable, the witness checked.
    assert_eq!((v["vars"].as_u64(), v["clauses"].as_u64()), (Some(40), Some(170)));
    assert_eq!(v["answer"], "SAT");
    assert_eq!(v["witness_ok"], true);
    let inst = sat_study::gen::generate(40, sat_study::gen::THRESHOLD, 3, true);
    let witness = std::fs::read_to_string(dir.path().join("witness.txt")).unwrap();
    assert!(inst.satisfied_by(&sat_study::solver::parse_model(&witness, 40).unwrap()), "{witness}");
    assert!(v["native_s"].as_f64().unwrap() > 0.0 && v["overhead"].as_f64().unwrap() > 1.0, "{v}");
    let pagings: Vec<&str> = v["predicted"].as_array().unwrap().iter().map(|p| p[0].as_str().unwrap()).collect();
    assert_eq!(pagings, ["profile", "native", "nested-2m"]);
    for p in v["predicted"].as_array().unwrap() {
        assert!(p[1].as_array().unwrap().iter().all(|t| t.as_f64().unwrap() > 0.0), "{p}");
    }
    // The recording: the heap grown with brk, and glibc's madvise(MADV_HUGEPAGE) under the tunable.
    let (_, events, _) = trace::read_all(std::io::BufReader::new(std::fs::File::open(dir.path().join("minisat.trace")).unwrap())).unwrap();
    let calls: Vec<&trace::Syscall> = events.iter().filter_map(|e| if let trace::EventBody::Syscall(s) = &e.body { Some(s) } else { None }).collect();
    assert!(calls.iter().filter(|s| s.kind == trace::SyscallKind::Brk).count() >= 2, "brk: the heap's start and its growth");
    assert!(calls.iter().any(|s| s.kind == trace::SyscallKind::Madvise && s.args[2] == MADV_HUGEPAGE), "glibc.malloc.hugetlb=1: madvise(MADV_HUGEPAGE)");
    assert!(trace::accesses::companion_path(&dir.path().join("minisat.trace")).is_file());
}
