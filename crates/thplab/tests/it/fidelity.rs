//! A recorded program behaves as it does unrecorded (issue #8, "Recording changes what a
//! program does"): progs/collapse_check.c checks the results of madvise(MADV_COLLAPSE) and
//! prctl(PR_GET_THP_DISABLE), which PR_SET_THP_DISABLE (the recorder's) would turn into EINVAL
//! and 1. Under `thplab record` they must return what they return without it, the trace must
//! say the recorder answered them, and the replay must perform the collapse.
//!
//! Recording needs perf_event_open and tracepoints (root here); without them `thplab record`
//! exits 5 and the test prints `skipped: REASON` and passes. Nothing writes to sysfs.

use std::path::Path;
use std::process::Command;

use trace::{EventBody, SyscallKind};

use crate::thplab_in;

#[test]
fn madv_collapse_and_pr_get_thp_disable_answer_as_without_the_recorder() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("collapse_check");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/progs/collapse_check.c");
    match Command::new("cc").args(["-O1", "-o"]).arg(&exe).arg(&src).status() {
        Ok(s) if s.success() => {}
        other => {
            println!("skipped: no C compiler ({other:?})");
            return;
        }
    }
    let exe_s = exe.to_string_lossy().into_owned();
    let r = thplab_in(dir.path(), &["record", "-q", "-o", "trace.thpt", "--", &exe_s]);
    if r.code == 5 {
        println!("skipped: {}", r.stderr.trim());
        return;
    }
    r.ok();
    // (a) The program took its success path: no perror, no failure marker.
    assert!(r.stdout.lines().any(|l| l == "collapse 0"), "MADV_COLLAPSE failed under recording:\n{}\n{}", r.stdout, r.stderr);
    assert!(!r.stderr.contains("madvise(MADV_COLLAPSE)"), "the program's error path ran:\n{}", r.stderr);
    // (c) PR_GET_THP_DISABLE said THP is not disabled.
    assert!(r.stdout.lines().any(|l| l == "thp_disable 0"), "PR_GET_THP_DISABLE under recording:\n{}", r.stdout);

    // (b) The trace has the answered record right before each call's record, with result 0.
    let bytes = std::fs::read(dir.path().join("trace.thpt")).unwrap();
    let (h, ev, _) = trace::read_all(&bytes[..]).unwrap();
    assert_ne!(h.flags & trace::flags::ANSWERS, 0, "header flag ANSWERS");
    let answered_before = |pred: &dyn Fn(&trace::Syscall) -> bool| -> usize {
        ev.windows(2)
            .filter(|w| match (&w[0].body, &w[1].body) {
                (EventBody::Answered { call, ret: 0 }, EventBody::Syscall(s)) => {
                    *call == s.kind.code() && s.ret == Some(0) && w[0].tid == w[1].tid && pred(s)
                }
                _ => false,
            })
            .count()
    };
    assert_eq!(answered_before(&|s| s.kind == SyscallKind::Madvise && s.args[1] == 4 << 20 && s.args[2] == 25), 1);
    assert_eq!(answered_before(&|s| s.kind == SyscallKind::Prctl && s.args[0] == 42), 1);
    // One record per call: the answered call's own sys_exit did not make a second one.
    let collapses = ev.iter().filter(|e| matches!(&e.body, EventBody::Syscall(s) if s.kind == SyscallKind::Madvise && s.args[2] == 25)).count();
    assert_eq!(collapses, 1);
    let show = thplab_in(dir.path(), &["trace", "show", "--no-faults", "trace.thpt"]);
    show.ok();
    assert!(show.stdout.contains("answered by the recorder: the next madvise returns 0"), "{}", show.stdout);

    // The replay performs the collapse: under the boot defaults the 4 MiB range ends in two PMD
    // folios (the touches alone would have made them only under enabled=always).
    let mut s = thp_abi::ThpSettings::default();
    s.apply_assignment("enabled=never").unwrap();
    let model = sim::run_recording("collapse_check", &h, &ev, &s, &sim::MachineConfig::default(), false).unwrap();
    assert_eq!(model.vmstat.get("thp_collapse_alloc").copied().unwrap_or(0), 2, "{:?}", model.vmstat);
}

/// A program starts with the same signals, descriptors and limits recorded and live
/// (`compare --record` does both): SIGPIPE not ignored, nothing blocked, the same descriptors.
/// Live runs write knobs (through the settings guard): root only, under [`crate::exclusive`],
/// and every knob must end as it began.
#[test]
fn recorded_and_live_runs_start_the_program_alike() {
    let _x = crate::exclusive();
    if let Some(why) = crate::skip_reason() {
        println!("skipped: {why}");
        return;
    }
    let knobs = || -> Vec<(String, String)> {
        let mut v: Vec<_> = std::fs::read_dir("/sys/kernel/mm/transparent_hugepage")
            .unwrap()
            .flatten()
            .filter_map(|e| Some((e.file_name().to_string_lossy().into_owned(), std::fs::read_to_string(e.path()).ok()?)))
            .collect();
        v.sort();
        v
    };
    let before = knobs();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("state.txt");
    let script = format!(
        r#"f={}; grep -E "^(SigIgn|SigBlk):" /proc/self/status >> "$f"; ls /proc/self/fd >> "$f"; ulimit -n >> "$f"; echo --- >> "$f""#,
        out.display()
    );
    let r = crate::thplab_unlocked(dir.path(), &["compare", "--record", "--retries", "0", "--", "sh", "-c", &script]);
    assert_eq!(knobs(), before, "THP knobs changed");
    if r.code == 5 {
        println!("skipped: {}", r.stderr.trim());
        return;
    }
    assert!(r.code == 0 || r.code == 4, "compare --record failed ({}):\n{}", r.code, r.stderr);
    let text = std::fs::read_to_string(&out).unwrap();
    let runs: Vec<&str> = text.split("---\n").filter(|b| !b.is_empty()).collect();
    println!("{} runs:\n{text}", runs.len());
    assert!(runs.len() >= 2, "expected the recorded run and a live run:\n{text}");
    for b in &runs[1..] {
        assert_eq!(*b, runs[0], "a live run (right) starts differently from the recorded one (left)");
    }
    let ign = runs[0].lines().find_map(|l| l.strip_prefix("SigIgn:")).map(|v| u64::from_str_radix(v.trim(), 16).unwrap()).unwrap();
    assert_eq!(ign & 0x1000, 0, "SIGPIPE ignored:\n{}", runs[0]);
    assert!(runs[0].contains("SigBlk:\t0000000000000000"), "{}", runs[0]);
}
