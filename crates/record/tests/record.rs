//! The recorder on a C program of known behaviour (tests/prog.c): the recording must hold its
//! system calls with the right arguments and results, exactly the faults it takes in its own
//! regions, its child process and its thread, no lost events, and its exit status. Skips (with
//! the reason printed) where there is no C compiler, no perf_event_open or no tracepoints.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use trace::{Event, EventBody, SyscallKind};

mod common;
const PAGE: u64 = 4096;
const MIB: u64 = 1 << 20;

fn compile(dir: &Path) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/prog.c");
    let exe = dir.join("prog");
    match Command::new("cc")
        .args(["-O1", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
    {
        Ok(s) if s.success() => Some(exe),
        Ok(s) => panic!("cc failed on {}: {s}", src.display()),
        Err(e) => {
            eprintln!("SKIP: no C compiler (cc: {e})");
            None
        }
    }
}

/// Run the helper; None (skip) when recording is unavailable here.
fn record(dir: &Path, cmd: &[&std::ffi::OsStr]) -> Option<(std::process::Output, PathBuf)> {
    let out = dir.join("trace.thpt");
    common::record_with_helper(&out, cmd).map(|o| (o, out))
}

fn values(path: &Path) -> HashMap<String, u64> {
    let text = std::fs::read_to_string(path).expect("the program's report");
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            let v = v
                .strip_prefix("0x")
                .map(|h| u64::from_str_radix(h, 16))
                .unwrap_or_else(|| v.parse::<u64>());
            Some((k.to_string(), v.ok()?))
        })
        .collect()
}

fn syscalls(ev: &[Event], kind: SyscallKind) -> Vec<(&Event, &trace::Syscall)> {
    ev.iter()
        .filter_map(|e| match &e.body {
            EventBody::Syscall(s) if s.kind == kind => Some((e, s)),
            _ => None,
        })
        .collect()
}

fn faults_in(ev: &[Event], lo: u64, len: u64, pred: impl Fn(&Event, u64) -> bool) -> Vec<u64> {
    ev.iter()
        .filter_map(|e| match e.body {
            EventBody::Fault { addr, error_code }
                if addr >= lo && addr < lo + len && pred(e, error_code) =>
            {
                Some(addr)
            }
            _ => None,
        })
        .collect()
}

#[test]
fn records_the_test_program_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = compile(dir.path()) else {
        return;
    };
    let report = dir.path().join("report.txt");
    let Some((o, trace_path)) = record(dir.path(), &[exe.as_os_str(), report.as_os_str()]) else {
        return;
    };
    let stderr = String::from_utf8_lossy(&o.stderr);
    // Exit status and stdout pass through.
    assert_eq!(o.status.code(), Some(3), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "prog: stdout passes through\n"
    );

    let v = values(&report);
    assert_eq!(
        v["thp_enabled"], 0,
        "PR_SET_THP_DISABLE is set in the program (/proc/self/status THP_enabled)"
    );
    assert_eq!(
        v["thp_disable"], 0,
        "PR_GET_THP_DISABLE is answered as without the recorder's flag"
    );
    assert_eq!(
        v["no_randomize"], 1,
        "ADDR_NO_RANDOMIZE is set in the program"
    );
    let (a, b, t, child) = (v["a"], v["b"], v["t"], v["child"] as u32);

    let bytes = std::fs::read(&trace_path).unwrap();
    let (h, ev, trailer) = trace::read_all(&bytes[..]).expect("the trace reads back");
    eprintln!(
        "{stderr}trace: {} bytes, {} events, {:.2} bytes/event",
        bytes.len(),
        ev.len(),
        bytes.len() as f64 / ev.len() as f64
    );
    assert_eq!(h.lost_events, 0, "lost events");
    assert_eq!(trailer.lost_events, 0);
    assert!(!ev.iter().any(|e| matches!(e.body, EventBody::Lost { .. })));
    assert_eq!(h.exit_status, 3);
    assert_eq!(h.argv.len(), 2);
    assert_eq!(
        h.flags & (trace::flags::THP_DISABLED | trace::flags::NO_RANDOMIZE),
        trace::flags::THP_DISABLED | trace::flags::NO_RANDOMIZE
    );
    let root = h.root_pid;

    // The program's own system calls, with their arguments and results.
    let mmaps = syscalls(&ev, SyscallKind::Mmap);
    let find_mmap = |len: u64, prot: u64| {
        let m: Vec<_> = mmaps
            .iter()
            .filter(|(e, s)| e.tid == root && s.args[..4] == [0, len, prot, 0x22])
            .collect();
        assert_eq!(
            m.len(),
            1,
            "one mmap(NULL, {len}, {prot}, private|anon): {m:?}"
        );
        m[0].1.ret
    };
    assert_eq!(find_mmap(MIB, 3), Some(a as i64));
    assert_eq!(find_mmap(3 * MIB, 1), Some(b as i64));
    assert_eq!(find_mmap(16 * PAGE, 3), Some(t as i64));
    let mu = syscalls(&ev, SyscallKind::Munmap);
    assert!(
        mu.iter()
            .any(|(e, s)| e.tid == root && s.args == [b + MIB, MIB] && s.ret == Some(0)),
        "munmap(b + 1 MiB, 1 MiB) = 0"
    );
    let ma = syscalls(&ev, SyscallKind::Madvise);
    assert!(
        ma.iter()
            .any(|(e, s)| e.tid == root && s.args == [a, MIB, 14] && s.ret == Some(0)),
        "madvise(a, 1 MiB, MADV_HUGEPAGE) = 0"
    );
    // PR_GET_THP_DISABLE is answered by the recorder (0, as without its flag), and says so.
    let pr = syscalls(&ev, SyscallKind::Prctl);
    assert!(
        pr.iter().any(|(_, s)| s.args[0] == 42 && s.ret == Some(0)),
        "prctl(PR_GET_THP_DISABLE) = 0"
    );
    assert!(
        ev.windows(2).any(|w| matches!(w[0].body, EventBody::Answered { call: 22, ret: 0 })
            && matches!(&w[1].body, EventBody::Syscall(s) if s.kind == SyscallKind::Prctl && s.args[0] == 42)),
        "an answered record before prctl(PR_GET_THP_DISABLE)"
    );
    // fork() is clone(SIGCHLD | ...) returning the child's pid.
    let cl = syscalls(&ev, SyscallKind::Clone);
    assert!(
        cl.iter()
            .any(|(e, s)| e.tid == root && s.args[0] & 0xff == 17 && s.ret == Some(child as i64)),
        "clone = child pid: {cl:?}"
    );
    let eg = syscalls(&ev, SyscallKind::ExitGroup);
    assert!(
        eg.iter()
            .any(|(e, s)| e.pid == child && s.args == [7] && s.ret.is_none()),
        "the child's exit_group(7)"
    );
    assert!(
        eg.iter()
            .any(|(e, s)| e.pid == root && s.args == [3] && s.ret.is_none()),
        "the program's exit_group(3)"
    );

    // The child process and the thread.
    assert!(
        ev.iter().any(|e| e.tid == root
            && e.body
                == EventBody::TaskNew {
                    tid: child,
                    pid: child
                }),
        "task_new for the child"
    );
    let thread = ev
        .iter()
        .find_map(|e| match e.body {
            EventBody::TaskNew { tid, pid } if pid == root && tid != root => Some(tid),
            _ => None,
        })
        .expect("task_new for the thread");
    let c3 = syscalls(&ev, SyscallKind::Clone3);
    assert!(
        c3.iter()
            .any(|(e, s)| e.tid == root && s.ret == Some(thread as i64)),
        "clone3 = thread id (glibc >= 2.34): {c3:?}"
    );
    assert!(ev
        .iter()
        .any(|e| e.tid == thread && e.body == EventBody::TaskExit));
    assert!(ev
        .iter()
        .any(|e| e.tid == child && e.body == EventBody::TaskExit));

    // Faults per region: exact, since only the program's own loops touch these regions.
    let in_a_root = faults_in(&ev, a, MIB, |e, ec| e.pid == root && ec & 2 != 0);
    assert_eq!(in_a_root.len(), 256, "write faults of the program in a");
    let expected_a: Vec<u64> = (0..256).map(|i| a + i * PAGE).collect();
    assert_eq!(
        in_a_root, expected_a,
        "one write fault per page of a, in order"
    );
    assert_eq!(
        faults_in(&ev, a, MIB, |e, _| e.pid == root).len(),
        256,
        "no other faults of the program in a"
    );
    let in_b = faults_in(&ev, b, 3 * MIB, |e, ec| e.pid == root && ec & 2 == 0);
    assert_eq!(in_b.len(), 768, "read faults in b");
    // t is mapped after the munmap and may be placed in the hole it left in b (it is, here).
    let t_in_b = if (b..b + 3 * MIB).contains(&t) { 8 } else { 0 };
    assert_eq!(
        faults_in(&ev, b, 3 * MIB, |_, _| true).len(),
        768 + t_in_b,
        "no other faults in b"
    );
    let child_a = faults_in(&ev, a, MIB, |e, ec| {
        e.pid == child && e.tid == child && ec & 3 == 3
    });
    assert_eq!(
        child_a,
        (0..5).map(|i| a + i * PAGE).collect::<Vec<_>>(),
        "the child's copy-on-write faults in a"
    );
    assert_eq!(faults_in(&ev, a, MIB, |e, _| e.pid == child).len(), 5);
    let in_t = faults_in(&ev, t, 16 * PAGE, |e, ec| e.tid == thread && ec & 2 != 0);
    assert_eq!(in_t.len(), 8, "the thread's write faults in t");
    let t_mapped = mmaps
        .iter()
        .find(|(_, s)| s.ret == Some(t as i64))
        .map(|(e, _)| e.time_ns)
        .unwrap();
    assert_eq!(
        faults_in(&ev, t, 16 * PAGE, |e, _| e.time_ns > t_mapped).len(),
        8,
        "no other faults in t once mapped"
    );

    // The kernel's mapping records name the anonymous regions (the VMA after merging with its
    // neighbours: a merges with the anonymous mapping above it); the exec snapshot is there.
    assert!(ev.iter().any(|e| matches!(&e.body, EventBody::Map(m) if m.addr <= a && m.addr + m.len >= a + MIB && m.path == b"//anon")));
    assert!(ev.iter().any(|e| matches!(&e.body, EventBody::ExecMaps(v) if v.iter().any(|m| m.path.ends_with(b"/prog")))));

    // Times never go backwards (the reader checks the file; check the merge too).
    assert!(ev.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    let faults = ev
        .iter()
        .filter(|e| matches!(e.body, EventBody::Fault { .. }))
        .count();
    eprintln!(
        "faults: {faults} in all, {} in the program's regions",
        256 + 768 + 5 + 8
    );
}

#[test]
fn a_missing_program_is_an_error_and_nothing_runs() {
    let e = record::record(
        &["/nonexistent/thplab-test-prog".into()],
        &record::RecordOptions::default(),
    );
    match e {
        Err(record::RecordError::Unavailable(why)) => eprintln!("SKIP: {why}"),
        Err(record::RecordError::Exec { not_found, .. }) => assert!(not_found),
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("recording a missing program succeeded"),
    }
    match record::resolve_program("thplab-no-such-command".as_ref()) {
        Err(record::RecordError::Exec {
            not_found: true, ..
        }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_killed_program_exits_128_plus_signal() {
    let dir = tempfile::tempdir().unwrap();
    let Some((o, path)) = record(
        dir.path(),
        &["sh".as_ref(), "-c".as_ref(), "kill -9 $$".as_ref()],
    ) else {
        return;
    };
    assert_eq!(o.status.code(), Some(137));
    let (h, _, _) = trace::read_all(&std::fs::read(path).unwrap()[..]).unwrap();
    assert_eq!(h.exit_status, 137);
}

#[test]
fn lost_events_are_counted_in_the_header_the_records_and_the_trailer() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("touch.c");
    std::fs::write(
        &src,
        "#include <sched.h>\n#include <sys/mman.h>\nint main(void) { unsigned long n = 1UL << 30; char *p = mmap(0, n, 3, 0x22, -1, 0);\n\
         struct sched_param sp = { .sched_priority = 1 }; sched_setscheduler(0, SCHED_FIFO, &sp);\n\
         for (unsigned long i = 0; i < n; i += 4096) p[i] = 1; return 0; }\n",
    )
    .unwrap();
    let exe = dir.path().join("touch");
    match Command::new("cc").arg("-O2").arg("-o").arg(&exe).arg(&src).status() {
        Ok(s) if s.success() => {}
        _ => {
            eprintln!("SKIP: no C compiler");
            return;
        }
    }
    // A 64 KiB buffer per CPU holds about 900 fault samples; 262144 faults overflow it unless
    // the drain keeps up. It cannot here: this thread (the recorder) is pinned to one CPU, the
    // program inherits that and runs at SCHED_FIFO, so the drain waits for the program's end
    // (or for RT throttling's 5 %). Without the real-time class (a cgroup that refuses it) the
    // drain races the program, so a few attempts remain.
    let cpu = unsafe { libc::sched_getcpu() }.max(0) as usize;
    let mut old_mask: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: valid cpu_set_t buffers of the size given; pid 0 is this thread.
    unsafe {
        libc::sched_getaffinity(0, size, &mut old_mask);
        libc::CPU_SET(cpu, &mut one);
        libc::sched_setaffinity(0, size, &one);
    }
    struct Restore(libc::cpu_set_t);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: restores this thread's own mask, read above.
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.0) };
        }
    }
    let _restore = Restore(old_mask);
    let opts = record::RecordOptions { buffer_kib: 64, ..Default::default() };
    for attempt in 1..=5 {
        let rec = match record::record(&[exe.clone().into_os_string()], &opts) {
            Err(record::RecordError::Unavailable(why)) => {
                eprintln!("SKIP: {why}");
                return;
            }
            r => r.unwrap(),
        };
        let mut bytes = Vec::new();
        rec.write_to(&mut bytes).unwrap();
        let (h, ev, t) = trace::read_all(&bytes[..]).unwrap();
        let in_records: u64 = ev.iter().map(|e| if let EventBody::Lost { count } = e.body { count } else { 0 }).sum();
        let faults = ev.iter().filter(|e| matches!(e.body, EventBody::Fault { .. })).count() as u64;
        eprintln!("attempt {attempt}: lost {} of about {} events with a 64 KiB buffer", h.lost_events, faults + h.lost_events);
        assert_eq!(in_records, h.lost_events);
        assert_eq!(t.lost_events, h.lost_events);
        // Every fault of the loop is either in the recording or counted as lost, also those
        // after the buffer's last record (which the kernel reports only in the event's count).
        assert!(faults + h.lost_events >= 1 << 18, "{faults} faults recorded and {} lost of at least 262144", h.lost_events);
        if h.lost_events > 0 {
            return;
        }
    }
    panic!("a 64 KiB buffer never overflowed in 5 recordings of 262144 faults");
}
