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
    let mut s = uapi::ThpSettings::default();
    s.apply_assignment("enabled=never").unwrap();
    let model = sim::run_recording("collapse_check", &h, &ev, &s, &sim::MachineConfig::default(), false).unwrap();
    assert_eq!(model.vmstat.get("thp_collapse_alloc").copied().unwrap_or(0), 2, "{:?}", model.vmstat);
}
