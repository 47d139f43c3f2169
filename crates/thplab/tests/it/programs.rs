//! Real programs, recorded once and predicted by the replay (issue #4 item 4): python3 building
//! a large dict, sqlite3 inserting rows into a file database, redis-server under
//! redis-benchmark. Each is recorded with `record::record` (THP disabled for it alone), replayed
//! with `sim::run_recording` and run live with `live::run_program` under 4K only, 64K always and
//! PMD always; minflt and the per-size large-folio counts must agree within 2 % (the issue's
//! criteria). Every program is also run live twice per setting and the two runs' minflt
//! difference printed: the noise floor of the comparison. Measured on this machine
//! (6.18.44): python3 0 faults (of ~90 000 under 4K only), sqlite3 0 (of ~4 550), redis-server
//! 5-7 faults under 4K only (of ~3 090) and tens under 64K always (the timing of the 50
//! benchmark clients and of jemalloc's purging).
//!
//! They need root, the THP sysfs tree, perf_event_open and the programs; otherwise they print
//! `skipped: REASON` and pass. They hold [`crate::exclusive`] (live runs change global knobs) and
//! check that every knob ends as it began. The tables are printed with `--nocapture`.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use thp_abi::FolioSize;
use thp_abi::ThpSettings;
use uapi::RunResult;

use crate::exclusive;

const SYSFS: &str = "/sys/kernel/mm/transparent_hugepage";

use crate::skip_reason;

/// The file `name` names in PATH, if any.
fn which(name: &str) -> Option<String> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file()).map(|p| p.display().to_string())
}

/// The knobs (not stats, not khugepaged's counters) as `grep -r . TREE` prints them.
/// tests/it/progs/NAME.c compiled into `dir`; None (the test skips, and says so) without a C
/// compiler.
pub(crate) fn compile_prog(dir: &Path, name: &str) -> Option<std::path::PathBuf> {
    let exe = dir.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/it/progs/{name}.c"));
    match Command::new("cc").args(["-O1", "-o"]).arg(&exe).arg(&src).status() {
        Ok(s) if s.success() => Some(exe),
        other => {
            println!("skipped: no C compiler ({other:?})");
            None
        }
    }
}

/// `argv` recorded with the default options; None (the test skips, and says so) where recording
/// is not available.
fn record_or_skip(argv: &[OsString]) -> Option<record::Recording> {
    record_with_or_skip(argv, &record::RecordOptions::default())
}

/// [`record_or_skip`] with `opts`.
fn record_with_or_skip(argv: &[OsString], opts: &record::RecordOptions) -> Option<record::Recording> {
    match record::record(argv, opts) {
        Ok(r) => Some(r),
        Err(record::RecordError::Unavailable(why)) => {
            println!("skipped: recording is not available here: {why}");
            None
        }
        Err(e) => panic!("recording failed: {e}"),
    }
}

/// The knobs as found: read while no settings guard (of this or another process) holds them.
fn knobs() -> Vec<String> {
    let out = live::guard::while_unlocked(|| Command::new("grep").args(["-r", ".", SYSFS]).output().expect("grep")).expect("the settings guard's lock");
    let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.contains("/stats/") && !l.contains("pages_collapsed") && !l.contains("full_scans"))
        .map(String::from)
        .collect();
    v.sort();
    v
}

/// The settings compared: 4K only, 64K always, PMD always.
fn settings() -> Vec<(&'static str, ThpSettings)> {
    let with = |a: &[&str]| {
        let mut s = ThpSettings::default();
        for x in a {
            s.apply_assignment(x).expect("valid");
        }
        s
    };
    vec![
        ("4K only", with(&["enabled=never"])),
        ("64K always", with(&["enabled=never", "hugepages-64kB/enabled=always"])),
        ("PMD always", with(&["enabled=always"])),
    ]
}

fn pct(model: u64, live: u64) -> f64 {
    if live == 0 {
        if model == 0 { 0.0 } else { f64::INFINITY }
    } else {
        (model as f64 - live as f64) * 100.0 / live as f64
    }
}

/// Large-folio sizes present in either result.
fn large_sizes(a: &RunResult, b: &RunResult) -> Vec<FolioSize> {
    let v: BTreeSet<&FolioSize> = a.census.sizes.keys().chain(b.census.sizes.keys()).filter(|s| *s != "4kB").collect();
    v.into_iter().cloned().collect()
}

/// Record `argv` once, then model and live per setting; assert the issue's 2 % criteria.
/// `before_each` runs before the recording and every live run (fresh files); `driver`, when
/// given, is started around every run (a client that makes the program exit).
/// `known_gaps`: (setting, why) whose differences are printed as a known model gap and not
/// asserted.
fn check_program(
    name: &str,
    argv: &[String],
    before_each: &dyn Fn(),
    driver: Option<&(dyn Fn(Arc<AtomicBool>) + Sync)>,
    known_gaps: &[(&str, &str)],
    extra_knobs: &[&str],
) {
    check_program_with(name, argv, before_each, driver, known_gaps, extra_knobs, &|_, _, _| {});
}

/// [`check_program`], and `check_model` (setting, the model's result, failures) per setting.
fn check_program_with(
    name: &str,
    argv: &[String],
    before_each: &dyn Fn(),
    driver: Option<&(dyn Fn(Arc<AtomicBool>) + Sync)>,
    known_gaps: &[(&str, &str)],
    extra_knobs: &[&str],
    check_model: &dyn Fn(&str, &RunResult, &mut Vec<String>),
) {
    let _x = exclusive();
    let knobs_before = knobs();
    let run_driven = |f: &mut dyn FnMut()| match driver {
        None => f(),
        Some(d) => {
            let stop = Arc::new(AtomicBool::new(false));
            std::thread::scope(|sc| {
                let s2 = stop.clone();
                sc.spawn(move || d(s2));
                f();
                stop.store(true, Ordering::SeqCst);
            });
        }
    };

    before_each();
    let os: Vec<OsString> = argv.iter().map(OsString::from).collect();
    let mut rec = None;
    let t = Instant::now();
    run_driven(&mut || rec = Some(record::record(&os, &record::RecordOptions::default())));
    let rec_secs = t.elapsed().as_secs_f64();
    let rec = match rec.expect("ran") {
        Ok(r) => r,
        Err(record::RecordError::Unavailable(why)) => {
            println!("skipped: recording is not available here: {why}");
            return;
        }
        Err(e) => panic!("{name}: recording failed: {e}"),
    };
    assert_eq!(rec.header.lost_events, 0, "{name}: the recording lost events");
    assert_eq!(rec.header.exit_status, 0, "{name}: the program failed while recorded");
    let opts = live::ProgramOptions { quiet: true };
    let live_run = |s: &ThpSettings| -> RunResult {
        before_each();
        let mut r = None;
        run_driven(&mut || r = Some(live::run_program(argv, s, &opts)));
        let r = r.expect("ran").unwrap_or_else(|e| panic!("{name}: live run failed: {e}"));
        let st = r.live.as_ref().and_then(|l| l.program.as_ref()).and_then(|p| p.exit_status);
        assert_eq!(st, Some(0), "{name}: the program failed live: {:?}", r.live);
        r
    };

    let mut failures = Vec::new();
    let mut gaps = Vec::new();
    println!("{name}: recorded in {rec_secs:.3} s ({} events, {} lost)", rec.events.len(), rec.header.lost_events);
    for (label, mut s) in settings() {
        for k in extra_knobs {
            s.apply_assignment(k).expect("valid knob");
        }
        let failures = match known_gaps.iter().find(|g| g.0 == label) {
            Some(_) => &mut gaps,
            None => &mut failures,
        };
        // Without the recorded clock (issue #27 item 4 made it the default): these checks judge
        // faults and folios against live runs whose daemon, asleep for its 10 s period with other
        // mms on its list, seldom reaches a short program, while the model's wakes as the
        // program's mm joins its empty list (sqlite3 under PMD always: 4 collapses, 2 THPs at
        // exit, live 0). `compare --record` allows for that with a stated tolerance
        // (experiment::khugepaged); khugepaged_collapses_during_a_recorded_program_as_live checks
        // the default path's collapses.
        let no_clock = sim::ReplayOptions { recorded_time: false, ..Default::default() };
        let model = sim::run_recording_opts(name, &rec.header, &rec.events, &s, &sim::MachineConfig::default(), &no_clock)
            .unwrap_or_else(|e| panic!("{name}: replay failed: {e}"));
        check_model(label, &model, failures);
        // Two live runs: the model is judged against the closer one, and may differ by 2 % or
        // by as much as the two live runs differ from each other, whichever is more (a model
        // cannot be closer to the kernel than the kernel is to itself; redis under 64K varies
        // by about 2 % between runs).
        let first = live_run(&s);
        let second = live_run(&s);
        let wall = first.live.as_ref().map_or(0.0, |l| l.wall_ms);
        let m = model.process.minflt;
        let (l1, l2) = (first.process.minflt, second.process.minflt);
        let live = if pct(m, l1).abs() <= pct(m, l2).abs() { &first } else { &second };
        let l = live.process.minflt;
        let allowed = 2.0f64.max(pct(l1, l2).abs());
        // The folio criterion below allows one large folio either way (its resolution); the
        // faults of such a folio are allowed with it: a 64 KiB folio the recording's placement
        // gave the model and the live run's did not is 16 faults instead of 1 (redis under 64K
        // in one CI run: 127 folios against 126, minflt −2.02 %).
        let one_folio: u64 = large_sizes(&model, live)
            .iter()
            .filter(|size| {
                let count = |r: &RunResult| r.census.sizes.get(*size).map_or(0, |e| e.folios);
                count(&model).abs_diff(count(live)) == 1
            })
            .map(|size| size.kb().expect("a size of the table") / 4 - 1)
            .max()
            .unwrap_or(0);
        let within = |m: u64, l: u64| pct(m, l).abs() <= allowed || (m.abs_diff(l) as f64) <= allowed / 100.0 * l as f64 + one_folio as f64;
        println!(
            "{name} {label}: live {wall:.0} ms; minflt model {m} live {l1} and {l2} ({:+.2}% from the closer; allowed {allowed:.2}% + {one_folio} faults of one folio)",
            pct(m, l)
        );
        if !within(m, l) {
            failures.push(format!("{label}: minflt model {m} live {l1}/{l2} ({:+.2}%)", pct(m, l)));
        }
        for size in large_sizes(&model, live) {
            let mf = model.census.sizes.get(&size).map_or(0, |e| e.folios);
            // khugepaged (not modelled until issue #10) wakes every 10 s and may collapse ranges
            // of a run this long into PMD THPs the program never faulted: those are taken out
            // of the live PMD count, each run by its own `khugepaged/pages_collapsed` delta.
            let daemon = |r: &RunResult| if size == "2048kB" { experiment::khugepaged_collapsed_during(r).max(0) as u64 } else { 0 };
            let f1 = first.census.sizes.get(&size).map_or(0, |e| e.folios).saturating_sub(daemon(&first));
            let f2 = second.census.sizes.get(&size).map_or(0, |e| e.folios).saturating_sub(daemon(&second));
            let lf = if pct(mf, f1).abs() <= pct(mf, f2).abs() { f1 } else { f2 };
            let allowed = 2.0f64.max(pct(f1, f2).abs());
            println!("{name} {label}: {size} folios model {mf} live {f1} and {f2} ({:+.2}%; allowed {allowed:.2}%)", pct(mf, lf));
            // 2 % of a small count is less than one folio (redis maps 4 PMD THPs): one folio
            // either way is within the criterion's resolution.
            if pct(mf, lf).abs() > allowed && mf.abs_diff(lf) > 1 {
                failures.push(format!("{label}: {size} folios model {mf} live {f1}/{f2} ({:+.2}%)", pct(mf, lf)));
            }
        }
        let m4 = model.census.sizes.get(&thp_abi::FolioSize::from("4kB")).map_or(0, |e| e.folios);
        let l4 = live.census.sizes.get(&thp_abi::FolioSize::from("4kB")).map_or(0, |e| e.folios);
        println!("{name} {label}: 4kB folios model {m4} live {l4} (not judged)");
        let split = |r: &RunResult| r.mthp.get(&thp_abi::SizeDir::from("hugepages-2048kB")).and_then(|x| x.get("split")).copied().unwrap_or(0);
        println!(
            "{name} {label}: PMD splits model {} live {}/{}; khugepaged collapsed {} / {} pages during the live runs",
            split(&model),
            split(&first),
            split(&second),
            experiment::khugepaged_collapsed_during(&first),
            experiment::khugepaged_collapsed_during(&second)
        );
    }
    for (label, why) in known_gaps {
        println!("{name} {label}: KNOWN MODEL GAP, not asserted: {why}");
    }
    if !gaps.is_empty() {
        println!("{name}: differences under the known gaps:\n  {}", gaps.join("\n  "));
    }
    assert_eq!(knobs(), knobs_before, "{name}: THP knobs changed");
    assert!(failures.is_empty(), "{name}: model and live differ beyond 2 %:\n{}", failures.join("\n"));
}

/// The real interpreter behind a pyenv shim (a shim is a bash script that execs it).
fn python() -> Option<String> {
    let out = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).stderr(Stdio::null()).output().ok()?;
    let p = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && Path::new(&p).is_file()).then_some(p)
}

#[test]
fn python_dict_model_matches_live() {
    if let Some(r) = skip_reason() {
        println!("skipped: {r}");
        return;
    }
    let Some(py) = python() else {
        println!("skipped: no python3");
        return;
    };
    let argv = vec![py, "-c".into(), "d = {i: str(i) for i in range(2_000_000)}".into()];
    check_program("python3-dict", &argv, &|| {}, None, &[], &[]);
}

const SQLITE_DB: &str = "/tmp/thplab-test-sqlite.db";

#[test]
fn sqlite_insert_model_matches_live() {
    if let Some(r) = skip_reason() {
        println!("skipped: {r}");
        return;
    }
    let Some(sqlite) = which("sqlite3") else {
        println!("skipped: no sqlite3 (.ci/run installs it)");
        return;
    };
    let sql = "PRAGMA cache_size=-200000; CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v INTEGER); BEGIN; \
               WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<200000) \
               INSERT INTO t SELECT x, printf('row-%08d', x), x*7 FROM c; CREATE INDEX t_name ON t(name); COMMIT;";
    let argv = vec![sqlite, SQLITE_DB.into(), sql.into()];
    let fresh = || {
        for ext in ["", "-journal", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{SQLITE_DB}{ext}"));
        }
    };
    check_program("sqlite3-insert", &argv, &fresh, None, &[], &[]);
    fresh();
}

const REDIS_SOCK: &str = "/tmp/thplab-test-redis.sock";

/// While `stop` is not set: wait for the server's socket, run the benchmark against it, shut
/// the server down (so it exits normally) and wait for the socket to go.
fn redis_driver(stop: Arc<AtomicBool>, bench: &str, cli: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
        if UnixStream::connect(REDIS_SOCK).is_err() {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        let _ = Command::new(bench)
            .args(["-s", REDIS_SOCK, "-c", "1", "-n", "100000", "-r", "100000", "-q", "-t", "set,get"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = Command::new(cli).args(["-s", REDIS_SOCK, "shutdown", "nosave"]).stdout(Stdio::null()).stderr(Stdio::null()).status();
        while Path::new(REDIS_SOCK).exists() && !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(10));
        }
        return;
    }
}

/// redis-server with `--disable-thp no`: by default redis reads
/// /sys/kernel/mm/transparent_hugepage/enabled at start and, when it says `always`, disables
/// THP for itself with prctl(PR_SET_THP_DISABLE); the recording, made under the machine's
/// setting, cannot show what it would do under another (the live run under `enabled=always`
/// has THP_enabled 0 in /proc/PID/status). With the option it behaves alike under every setting.
/// `-r 100000` makes the SETs write distinct keys, so the server's memory grows. jemalloc runs
/// with `MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1`: its default purges dirty pages on a
/// 10 s clock, so how many it gives back (MADV_DONTNEED) and faults in again depended on timing,
/// and a recording made a few dozen faults fewer or more than a live run (one CI run: model 1231
/// under 64K always, live 1257 and 1260, -2.07 %). Without decay three runs differ by 1-6 faults.
#[test]
fn redis_benchmark_model_matches_live() {
    if let Some(r) = skip_reason() {
        println!("skipped: {r}");
        return;
    }
    let (Some(server), Some(bench), Some(cli)) = (which("redis-server"), which("redis-benchmark"), which("redis-cli")) else {
        println!("skipped: no redis-server/redis-benchmark/redis-cli (.ci/run installs them)");
        return;
    };
    let argv: Vec<String> = [
        "/usr/bin/env",
        "MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1",
        server.as_str(),
        "--port",
        "0",
        "--unixsocket",
        REDIS_SOCK,
        "--save",
        "",
        "--appendonly",
        "no",
        "--logfile",
        "/dev/null",
        "--disable-thp",
        "no",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let fresh = || {
        let _ = std::fs::remove_file(REDIS_SOCK);
    };
    let drive = |stop: Arc<AtomicBool>| redis_driver(stop, &bench, &cli);
    // Regression: redis's four thread stacks are mmapped with MAP_STACK, which the kernel turns
    // into VM_NOHUGEPAGE (include/linux/mman.h: calc_vm_flag_bits); the replay once gave them a
    // PMD THP and 64 KiB folios.
    check_program("redis-server", &argv, &fresh, Some(&drive), &[], &[]);
}

/// SETs, a BGSAVE (the server forks a child that writes the snapshot to `dir`) waited for
/// while nothing writes, then SETs and GETs again (the parent's own pages once more), and
/// shutdown.
fn redis_bgsave_driver(stop: Arc<AtomicBool>, bench: &str, cli: &str, dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
        if UnixStream::connect(REDIS_SOCK).is_err() {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        let quiet = |c: &mut Command| {
            let _ = c.stdout(Stdio::null()).stderr(Stdio::null()).status();
        };
        quiet(Command::new(bench).args(["-s", REDIS_SOCK, "-c", "1", "-n", "20000", "-r", "20000", "-q", "-t", "set"]));
        quiet(Command::new(cli).args(["-s", REDIS_SOCK, "bgsave"]));
        // Wait for the snapshot file without talking to the server: every request it serves
        // while the child lives writes pages the child shares, and how many depends on timing.
        while !dir.join("dump.rdb").exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(200));
        // Then until the server has seen the child exit.
        while Instant::now() < deadline {
            let out = Command::new(cli).args(["-s", REDIS_SOCK, "info", "persistence"]).output();
            let done = out.is_ok_and(|o| {
                let t = String::from_utf8_lossy(&o.stdout).to_string();
                t.contains("rdb_bgsave_in_progress:0") && t.contains("rdb_last_bgsave_status:ok")
            });
            if done {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        quiet(Command::new(bench).args(["-s", REDIS_SOCK, "-c", "1", "-n", "20000", "-r", "40000", "-q", "-t", "set,get"]));
        quiet(Command::new(cli).args(["-s", REDIS_SOCK, "shutdown", "nosave"]));
        while Path::new(REDIS_SOCK).exists() && !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(10));
        }
        return;
    }
}

/// Issue #9: redis-server under redis-benchmark with a BGSAVE in the middle, recorded once and
/// replayed as one machine (the BGSAVE child forked from the server's mm), predicted under
/// 4 KiB only, 64 KiB and PMD THP as the other programs are (minflt within 2 %, census of
/// server and child summed).
#[test]
fn redis_bgsave_model_matches_live() {
    if let Some(r) = skip_reason() {
        println!("skipped: {r}");
        return;
    }
    let (Some(server), Some(bench), Some(cli)) = (which("redis-server"), which("redis-benchmark"), which("redis-cli")) else {
        println!("skipped: no redis-server/redis-benchmark/redis-cli (.ci/run installs them)");
        return;
    };
    // The snapshot goes to a tmpfs: its fsync on a disk made a run take seconds more.
    let dir = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir()).unwrap();
    let d = dir.path().to_str().unwrap().to_string();
    let argv: Vec<String> = [
        server.as_str(),
        "--port",
        "0",
        "--unixsocket",
        REDIS_SOCK,
        "--save",
        "",
        "--appendonly",
        "no",
        "--logfile",
        "/dev/null",
        "--disable-thp",
        "no",
        "--dir",
        d.as_str(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let fresh = || {
        let _ = std::fs::remove_file(REDIS_SOCK);
        let _ = std::fs::remove_file(dir.path().join("dump.rdb"));
    };
    let drive = |stop: Arc<AtomicBool>| redis_bgsave_driver(stop, &bench, &cli, dir.path());
    // A loaded machine stretches the live runs past khugepaged's 10 s sleep, and the daemon
    // (not replayed, issue #10) then collapses the ranges the fork split back into THPs: it
    // sleeps 10 minutes here, in the live runs and in the model alike.
    check_program("redis-server (BGSAVE)", &argv, &fresh, Some(&drive), &[], &["khugepaged/scan_sleep_millisecs=600000"]);
}

/// A shell script that starts 40 children, each of which execs a program (progs/exec_child.c)
/// that maps anonymous memory: every execve of every process has its exec snapshot, so the
/// replay knows each image's own stack, heap, ELF and loader mappings and places every mapping
/// where the kernel did (before, only the shell's image had one, and a script of 500 children
/// matched 4 of 2021 placements). minflt and the large folios under 4K, 64K and PMD as the
/// other programs.
#[test]
fn shell_script_starting_children_model_matches_live() {
    if let Some(r) = skip_reason() {
        println!("skipped: {r}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = compile_prog(dir.path(), "exec_child") else { return };
    const CHILDREN: u64 = 40;
    // The list written out: `$(seq N)` would record seq too, whose locale files the model
    // places one page off (a model gap of its own, seen with `seq` recorded alone).
    let list: Vec<String> = (1..=CHILDREN).map(|i| i.to_string()).collect();
    let script = format!("for i in {}; do {}; done", list.join(" "), exe.display());
    let argv = vec!["sh".to_string(), "-c".into(), script];
    check_program_with("sh + 40 children", &argv, &|| {}, None, &[], &[], &|label, model, failures| {
        let replay = replay_of(model);
        println!(
            "sh + 40 children {label}: placements {} of {} matched; {} exec snapshots, {} images",
            replay.placements_matched, replay.placements_checked, replay.exec_snapshots, replay.images
        );
        let checked = replay.placements_checked;
        // Each child maps its 4 MiB and glibc's 300000 bytes itself, besides what ld.so maps.
        if checked < 2 * CHILDREN || replay.placements_matched != checked {
            failures.push(format!("{label}: placements {} of {checked} matched: {:?}", replay.placements_matched, replay.warnings));
        }
        // The shell and the 40 children: every image made by an execve had its snapshot.
        let procs = &replay.per_process;
        let children = procs.iter().filter(|p| p.exe.ends_with("/exec_child")).count() as u64;
        if children != CHILDREN {
            failures.push(format!("{label}: {children} images of exec_child, expected {CHILDREN}"));
        }
        let without: Vec<u32> = procs.iter().filter(|p| !p.exec_snapshot).map(|p| p.pid).collect();
        if !without.is_empty() {
            failures.push(format!("{label}: images without an exec snapshot (pids): {without:?}"));
        }
        if replay.exec_snapshots != procs.len() as u64 - replay.forked_images {
            failures.push(format!("{label}: exec_snapshots {} for {} images ({} forked)", replay.exec_snapshots, procs.len(), replay.forked_images));
        }
    });
}

/// The matrices of `thplab compare --matrix` and `--matrix shmem`.
use thp_abi::matrix::{anon as anon_matrix, shmem as shmem_matrix};

/// The replay part of a model result of a recording.
fn replay_of(model: &RunResult) -> &uapi::ReplayReport {
    model.model.as_ref().and_then(|m| m.replay.as_ref()).expect("a replay has model.replay")
}

/// tests/it/progs/NAME.c compiled, recorded once under 4 KiB and predicted under every setting
/// of `matrix`: minflt within a handful of faults (startup noise: two live runs of a small C
/// program differ by 0-2) and every folio-size count of the census equal. `check_recording`
/// looks at the recording; `extra` adds checks per setting (label, model, live, failures).
/// Skips, saying why, without live access, a C compiler or recording.
fn check_c_program(
    name: &str,
    matrix: Vec<(String, ThpSettings)>,
    check_recording: impl FnOnce(&record::Recording),
    mut extra: impl FnMut(&str, &RunResult, &RunResult, &mut Vec<String>),
) {
    let _x = exclusive();
    if let Some(why) = skip_reason() {
        println!("skipped: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = compile_prog(dir.path(), name) else { return };
    let knobs_before = knobs();
    let argv = vec![exe.to_string_lossy().into_owned()];
    let os: Vec<OsString> = argv.iter().map(OsString::from).collect();
    let Some(rec) = record_or_skip(&os) else { return };
    assert_eq!(rec.header.lost_events, 0);
    check_recording(&rec);
    let mut failures = Vec::new();
    for (label, s) in matrix {
        let before = failures.len();
        // Without the recorded clock, as check_program's replays (see there).
        let no_clock = sim::ReplayOptions { recorded_time: false, ..Default::default() };
        let model = sim::run_recording_opts(name, &rec.header, &rec.events, &s, &sim::MachineConfig::default(), &no_clock).unwrap();
        // khugepaged (the daemon, not modelled) wakes every scan_sleep_millisecs and may collapse
        // a range of the program while it runs (seen once in CI: the all-sizes run had one more
        // PMD THP); such a run is run again, as `thplab compare --retries` does.
        // The per-size event counters are system-wide: another process faulting or splitting
        // under the same knobs moves them too, so a run that differs there is run again (as
        // `thplab compare --retries` does) and the closest run kept.
        // MADV_COLLAPSE fails now and then after allocating its huge page (EAGAIN: in
        // collapse_huge_page, __collapse_huge_page_isolate found a page's count, lock or LRU
        // state briefly off; seen once in CI: one of collapse_check's two ranges collapsed, with
        // thp_collapse_alloc 2 as in the model): a run whose census differs while a collapse
        // allocated is run again too.
        let mut live = live::run_program(&argv, &s, &live::ProgramOptions { quiet: true }).unwrap();
        for _ in 0..3 {
            let collapsed = model.folios != live.folios && experiment::khugepaged_collapsed_during(&live) > 0;
            let collapse_ran = model.folios != live.folios && live.vmstat.get("thp_collapse_alloc").is_some_and(|&n| n > 0);
            if !collapsed && !collapse_ran && event_diffs(&model, &live).is_empty() {
                break;
            }
            let why: Vec<String> = event_diffs(&model, &live).into_iter().map(|d| d.text).collect();
            let why = if collapsed {
                "khugepaged collapsed during the live run".to_string()
            } else if collapse_ran && why.is_empty() {
                "a collapse allocated during the live run and the census differs".to_string()
            } else {
                why.join(", ")
            };
            println!("{label}: {why}; running it again");
            let again = live::run_program(&argv, &s, &live::ProgramOptions { quiet: true }).unwrap();
            let misses = |l: &RunResult| (event_diffs(&model, l).len(), (model.folios != l.folios) as usize);
            if misses(&again) <= misses(&live) {
                live = again;
            }
        }
        for d in event_diffs(&model, &live) {
            // The per-size stats count every process under the same global knobs: after the
            // reruns, live a little above the model is other processes; live below the model,
            // or far above it, is a model error.
            if d.noise {
                println!("{label}: {} (system-wide: other processes allocated during every run)", d.text);
            } else {
                failures.push(format!("{label}: {}", d.text));
            }
        }
        let (m, l) = (model.process.minflt as i64, live.process.minflt as i64);
        println!("{label}: minflt model {m} live {l}; folios model {:?} live {:?}", model.folios, live.folios);
        if (m - l).abs() > 5 {
            failures.push(format!("{label}: minflt model {m} live {l}"));
        }
        if model.folios != live.folios {
            failures.push(format!("{label}: folios model {:?} live {:?}", model.folios, live.folios));
        }
        extra(&label, &model, &live, &mut failures);
        if failures.len() > before {
            let mut text = Vec::new();
            experiment::vmas::print_parting(&mut text, &experiment::vmas::parting(&model, &live), 20).unwrap();
            println!("{label}:\n{}", String::from_utf8_lossy(&text));
        }
    }
    assert_eq!(knobs(), knobs_before, "THP knobs changed");
    assert!(failures.is_empty(), "model and live differ:\n{}", failures.join("\n"));
}

/// A counter that differs between model and live; `noise` when other processes can explain it
/// (a count a little above the model's).
struct EventDiff {
    text: String,
    noise: bool,
}

/// The event counters issue #8 judges exactly: per size `anon_fault_alloc`, `split` and
/// `split_deferred`, and `thp_split_pmd`, `thp_split_page`, `thp_deferred_split_page`.
fn event_diffs(model: &RunResult, live: &RunResult) -> Vec<EventDiff> {
    let mut out = Vec::new();
    for dir in model.mthp.keys().chain(live.mthp.keys()).collect::<std::collections::BTreeSet<_>>() {
        for stat in ["anon_fault_alloc", "split", "split_deferred"] {
            let m = model.mthp.get(dir).and_then(|x| x.get(stat)).copied().unwrap_or(0);
            let l = live.mthp.get(dir).and_then(|x| x.get(stat)).copied().unwrap_or(0);
            if m != l {
                // Other processes (the test harness's own threads, folios they got under an
                // earlier setting) move these system-wide counters upward only, and by little
                // on a quiet machine: up to 2 events, or 2 % of the allocations.
                let slack = if stat == "anon_fault_alloc" { (m / 50).max(2) } else { 2 };
                out.push(EventDiff { text: format!("{dir}/stats/{stat} model {m} live {l}"), noise: l > m && l - m <= slack });
            }
        }
    }
    for ev in ["thp_split_pmd", "thp_split_page", "thp_deferred_split_page"] {
        let (m, l) = (model.vmstat.get(ev).copied().unwrap_or(0), live.vmstat.get(ev).copied().unwrap_or(0));
        if m != l {
            out.push(EventDiff { text: format!("{ev} model {m} live {l}"), noise: false });
        }
    }
    out
}

/// Issue #8 item 2: every way a large folio becomes partially mapped or split (mprotect through
/// folios, partial munmap, MADV_DONTNEED and MADV_FREE over part of folios, mremap of part of a
/// VMA, teardown at exit), under every setting of the anon matrix.
#[test]
fn split_paths_program_model_matches_live_across_the_matrix() {
    check_c_program("split_paths", anon_matrix(), |_| {}, |_, _, _, _| {});
}

/// Issue #8 item 4: memory populated without user faults (MAP_POPULATE, MADV_POPULATE_*,
/// mlock, mlock2 on fault, MAP_LOCKED, mlockall(MCL_FUTURE | MCL_ONFAULT)), under every setting
/// of the anon matrix; the replay must have modelled each populating call.
#[test]
fn populate_paths_program_model_matches_live_across_the_matrix() {
    check_c_program("populate_paths", anon_matrix(), |_| {}, |label, model, _, failures| {
        let replay = replay_of(model);
        // MAP_POPULATE, POPULATE_WRITE, POPULATE_READ, mlock, MAP_LOCKED.
        if replay.populate_calls != 5 {
            failures.push(format!("{label}: populate_calls {}", replay.populate_calls));
        }
        if replay.populate_file_pages != 0 {
            failures.push(format!("{label}: populate_file_pages {}", replay.populate_file_pages));
        }
    });
}

/// Issue #8 item 4, file mappings (progs/populate_files.c): MADV_POPULATE_READ of a file
/// mapping, mlockall(MCL_CURRENT) over the ELF, libc, ld.so, the vDSO and a private writable file
/// mapping, and mlockall in a forked child. The model does not back file pages; the replay
/// follows which of them are mapped from the recorded faults (fault-around, COW, exec's bss
/// clearing, fork's copy where a VMA has an anon_vma) and takes GUP's faults for the others.
/// Before, those faults were missing (215 of 989 under 4K only); now minflt
/// must agree within 2 faults (two live runs differ by 0-1), under every setting of the matrix.
#[test]
fn populate_files_program_model_matches_live_across_the_matrix() {
    check_c_program(
        "populate_files",
        anon_matrix(),
        |_| {},
        |label, model, live, failures| {
            let replay = replay_of(model);
            // MADV_POPULATE_READ, mlockall twice.
            if replay.populate_calls != 3 || replay.populate_file_pages == 0 {
                failures.push(format!("{label}: populate_calls {} file pages {}", replay.populate_calls, replay.populate_file_pages));
            }
            minflt_within_two(label, model, live, failures);
        },
    );
}

/// A heap grown by brk right above an ELF's bss (progs/heap_bss.c): the kernel never merges the
/// heap into the bss (mm/mmap.c brk expands only `vma_prev_limit(start_brk)`), so no large folio
/// spans start_brk. The model merged them and was wrong in 6 of 11 settings; gcc, whose cc1 and
/// ld grow their heaps so, in 7.
#[test]
fn heap_above_bss_program_model_matches_live_across_the_matrix() {
    check_c_program("heap_bss", anon_matrix(), |_| {}, minflt_within_two);
}

/// A program that exits and leaves a child running, which then writes 4 MiB
/// (progs/outlives.c): the recording follows the child to its exit, as the live run waits for
/// it (python's multiprocessing resource tracker was cut short: 1181 faults of 16155 missing).
#[test]
fn a_child_that_outlives_the_program_is_recorded_to_its_end() {
    check_c_program(
        "outlives",
        anon_matrix(),
        |rec| {
            let faults = rec.events.iter().filter(|e| matches!(e.body, trace::EventBody::Fault { .. })).count();
            // The child's 1024 pages and the two processes' start-up.
            assert!(faults > 1024, "{faults} faults recorded");
            assert_eq!(rec.header.exit_status, 0);
        },
        minflt_within_two,
    );
}

/// Threads held at their exit stops when the program exits (progs/threads_exit.c): the live
/// run measures the process through a thread that still has its mm (it failed on every run:
/// "process N does not exist"), and the model agrees with it. Each thread's 1 MiB malloc is an
/// mmap of its own arena (64 MiB reserved), so the threads' runs differ by a few faults only.
#[test]
fn threads_held_at_exit_when_the_program_exits_are_measured() {
    let matrix = settings().into_iter().map(|(label, s)| (label.to_string(), s)).collect();
    check_c_program("threads_exit", matrix, |_| {}, |label, _, live, failures| {
        let program = live.live.as_ref().and_then(|l| l.program.as_ref()).expect("a program run");
        if !program.unmeasured.is_empty() || program.processes.iter().any(|p| p.census.is_none()) {
            failures.push(format!("{label}: not measured: {:?}", program.unmeasured));
        }
    });
}

/// VMAs that differ only in commit accounting stay apart (progs/account_merge.c: a JVM's
/// MAP_NORESERVE reservations committed by MAP_FIXED and by mprotect): VM_ACCOUNT and
/// VM_NORESERVE as mmap and mprotect_fixup set them. The model merged the VMAs of the first
/// pair and gave a 64 KiB folio across their boundary that the kernel does not.
#[test]
fn vmas_apart_by_commit_accounting_model_matches_live_across_the_matrix() {
    check_c_program("account_merge", anon_matrix(), |_| {}, minflt_within_two);
}

/// A program that chooses by a THP knob it reads (progs/reads_knob.c, as a JVM with
/// -XX:+UseTransparentHugePages): `compare --record --matrix` records it again under each
/// setting whose `enabled` differs from the recorded one, and then agrees with the kernel in
/// every setting (with one recording, the settings with `enabled=never` replayed 6 MiB where
/// the kernel wrote 3: 768 faults too many).
#[test]
fn a_program_that_reads_a_knob_is_recorded_under_each_value() {
    let _x = exclusive();
    if let Some(why) = skip_reason() {
        println!("skipped: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = compile_prog(dir.path(), "reads_knob") else { return };
    let knobs_before = knobs();
    let r = crate::thplab_unlocked(dir.path(), &["compare", "--record", "--matrix", "anon", "--program-quiet", "--", exe.to_str().unwrap()]);
    assert_eq!(knobs(), knobs_before, "THP knobs changed");
    println!("{}", r.stdout);
    r.ok();
    assert!(r.stdout.lines().any(|l| l.contains(": the program read enabled: ") && l.ends_with("; recording it again under this setting)")), "{}", r.stdout);
    assert!(r.stdout.contains("11 of 11 settings: model = live"), "{}", r.stdout);
}

/// userfaultfd (progs/uffd_prog.c): ranges registered with MODE_MISSING whose pages the program
/// fills itself (UFFDIO_COPY of 16 KiB per write fault from a handler thread, UFFDIO_ZEROPAGE
/// per read fault, and copies made ahead of any fault), one unregistered half-way, and one
/// registered with MODE_WP. The recorder reads each ioctl's struct (`uffd` records); the replay
/// registers, hands the faults over and fills the pages. Before, the replay saw only the faults
/// and gave the registered ranges mTHP and PMD THPs the kernel never gives them. By hand, under
/// "64K alone": the MODE_WP range's 1024 write faults are refused 64 KiB folios as
/// `userfaultfd_armed`, and the 16 pages the reads left are zero-page PTEs.
#[test]
fn userfaultfd_ranges_are_registered_and_filled_as_the_program_filled_them() {
    use linux_abi::userfaultfd as op;
    let check_recording = |rec: &record::Recording| {
        assert_eq!(rec.header.exit_status, 0, "the program failed while recorded (no userfaultfd here?)");
        let ops: Vec<u8> = rec.events.iter().filter_map(|e| if let trace::EventBody::Uffd(u) = &e.body { Some(u.op) } else { None }).collect();
        let n = |o: u8| ops.iter().filter(|&&x| x == o).count();
        // API, three registrations, one unregistration; a COPY per write fault of the first
        // range (192) and per fault of the second's first MiB and beyond its copy (64 + 43),
        // one ahead; a ZEROPAGE per read fault (16) and one ahead. A fault's message can come
        // twice (seen once: 301 copies), the second COPY failing with EEXIST, as the model's.
        assert_eq!((n(op::API), n(op::REGISTER), n(op::UNREGISTER)), (1, 3, 1), "{ops:?}");
        assert!(n(op::COPY) >= 192 + 64 + 43 + 1 && n(op::ZEROPAGE) >= 16 + 1, "{ops:?}");
    };
    check_c_program("uffd_prog", anon_matrix(), check_recording, |label, model, _, failures| {
        let replay = replay_of(model);
        if !replay.populate_unmodelled.is_empty() {
            failures.push(format!("{label}: unmodelled {:?}", replay.populate_unmodelled));
        }
        if model.census.zero_page_ptes != 16 {
            failures.push(format!("{label}: {} zero-page PTEs, 16 (the reads of the first range)", model.census.zero_page_ptes));
        }
        let armed = model.fallbacks.get(&thp_abi::SizeDir::from("hugepages-64kB")).and_then(|r| r.get("userfaultfd_armed")).copied().unwrap_or(0);
        if label == "64K alone" && armed != 1024 {
            failures.push(format!("{label}: {armed} faults refused 64 KiB as userfaultfd_armed, 1024 (the MODE_WP range)"));
        }
    });
}

/// Calls by which the kernel populates the program's pages through GUP without a user fault
/// (progs/gup_calls.c, 64 KiB each, never touched): vmsplice reads them (16 zero-page PTEs),
/// io_uring buffer registration pins them for write, process_vm_writev writes a forked child's.
/// The recorder reads their iovecs (`iovecs` records) and the replay populates them as GUP
/// does; the fork copies the io_uring-pinned pages for the child (copy_present_page), 4 KiB
/// each. Equal to the kernel in every setting of the anon matrix, where before 48 faults were
/// missing, and the child's census differed under 16K, 32K, 64K and all sizes.
#[test]
fn gup_calls_are_populated_from_their_recorded_iovecs() {
    let check_recording = |rec: &record::Recording| {
        assert_eq!(rec.header.exit_status, 0, "the program failed while recorded");
        assert_eq!(rec.paths_unavailable, None, "calls must be stopped on this machine");
        // io_uring may be disabled (kernel.io_uring_disabled=2): then the program skips it.
        let ring = rec.events.iter().any(|e| matches!(&e.body, trace::EventBody::Syscall(c) if c.kind == trace::SyscallKind::IoUringRegister && c.ret.is_some_and(|r| r >= 0)));
        let iovecs: Vec<u8> = rec.events.iter().filter_map(|e| if let trace::EventBody::Iovecs { call, .. } = &e.body { Some(*call) } else { None }).collect();
        let mut want: Vec<u8> = vec![trace::SyscallKind::Vmsplice.code(), trace::SyscallKind::ProcessVmWritev.code()];
        if ring {
            want.insert(1, trace::SyscallKind::IoUringRegister.code());
        }
        assert_eq!(iovecs, want, "one iovecs record per call");
    };
    check_c_program("gup_calls", anon_matrix(), check_recording, |label, model, _, failures| {
        let replay = replay_of(model);
        if !replay.populate_unmodelled.is_empty() {
            failures.push(format!("{label}: unmodelled {:?}", replay.populate_unmodelled));
        }
        if model.census.zero_page_ptes != 32 {
            failures.push(format!("{label}: {} zero-page PTEs, 16 in each process", model.census.zero_page_ptes));
        }
    });
}

/// `compare --record --repeat 3`: three live runs per setting, the median by minflt shown and
/// its spread in the JSON (`live_minflt_spread`), the model judged against it.
#[test]
fn repeated_live_runs_of_a_program_give_their_spread() {
    let _x = exclusive();
    if let Some(why) = skip_reason() {
        println!("skipped: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = compile_prog(dir.path(), "heap_bss") else { return };
    let r = crate::thplab_unlocked(dir.path(), &["compare", "--record", "--repeat", "3", "--json", "--program-quiet", "--set", "enabled=never", "--", exe.to_str().unwrap()]);
    r.ok();
    let v = r.json();
    let sp = &v[0]["live_minflt_spread"];
    assert_eq!(sp["runs"], 3, "{sp}");
    let (min, max) = (sp["min"].as_u64().unwrap(), sp["max"].as_u64().unwrap());
    let median = v[0]["live"]["process"]["minflt"].as_u64().unwrap();
    assert!(min <= median && median <= max, "{min} {median} {max}");
    let row = v[0]["rows"].as_array().unwrap().iter().find(|r| r["field"].as_str().unwrap().starts_with("minflt")).unwrap().clone();
    assert_eq!(row["field"], format!("minflt (live: median of 3 runs, {min}..{max})"));
    assert_eq!(row["differs"], false, "{row}");
}

/// For programs whose live runs differ by 0-1 faults: minflt within 2 of the live run (tighter
/// than `check_c_program`'s 5).
fn minflt_within_two(label: &str, model: &RunResult, live: &RunResult, failures: &mut Vec<String>) {
    let (m, l) = (model.process.minflt, live.process.minflt);
    if m.abs_diff(l) > 2 {
        failures.push(format!("{label}: minflt model {m} live {l}, more than 2 apart"));
    }
}

/// Issue #8 item 4, memory that becomes locked and populated after mlockall(MCL_FUTURE)
/// (progs/locked_growth.c): a PROT_NONE reservation made writable (mprotect_fixup populates it:
/// 256 faults), a locked mapping grown by mremap, moved (240) and in place (256): the 752
/// faults the model missed before under 4K only (of 821).
#[test]
fn locked_growth_program_model_matches_live_across_the_matrix() {
    check_c_program("locked_growth", anon_matrix(), |_| {}, minflt_within_two);
}

/// Issue #8 item 5: the recorder resolves a path by reading it from the program's memory (the
/// seccomp listener), which maps the page it lies in; the kernel's own read of the path
/// (getname) then took no fault, where without the recorder it takes one: bash was predicted 2
/// faults low per process (`bash -c :` 132 against 134 live; through the pyenv shim, 49 of
/// python3's 9441). progs/path_page.c opens a path alone in an untouched page: recorded with and
/// without path resolution, the recording must hold the same faults, one of them the kernel's
/// read of that page.
#[test]
fn resolving_a_path_keeps_the_kernels_fault_on_it() {
    // Alone: a live test running beside it (memory pressure, page cache) can add a fault to one
    // recording (seen once in CI: 51 against 52).
    let _x = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = compile_prog(dir.path(), "path_page") else {
        return;
    };
    let argv = [OsString::from(&exe)];
    let Some(with) = record_with_or_skip(&argv, &record::RecordOptions::default()) else {
        return;
    };
    if let Some(why) = &with.paths_unavailable {
        println!("skipped: paths are not resolved here: {why}");
        return;
    }
    let without = record_with_or_skip(&argv, &record::RecordOptions { paths: false, ..Default::default() }).expect("recorded once already");
    let faults = |r: &record::Recording| -> (usize, Vec<u64>) {
        let open = r
            .events
            .iter()
            .find_map(|e| match &e.body {
                // The program's open(path, O_RDONLY): flags 0 (the loader opens with O_CLOEXEC,
                // and tries directories of LD_LIBRARY_PATH that do not exist).
                trace::EventBody::Syscall(s) if s.kind == trace::SyscallKind::Openat && s.args[2] == 0 && s.ret == Some(-2) => Some(s.args[1]),
                _ => None,
            })
            .expect("the program's openat of the missing path");
        let all: Vec<&trace::Event> = r.events.iter().filter(|e| matches!(e.body, trace::EventBody::Fault { .. })).collect();
        let on_page = all
            .iter()
            .filter_map(|e| match e.body {
                trace::EventBody::Fault { addr, error_code } if addr / 4096 == open / 4096 => Some(error_code),
                _ => None,
            })
            .collect();
        (all.len(), on_page)
    };
    let (mut n_with, page_with) = faults(&with);
    let (mut n_without, page_without) = faults(&without);
    // Noise only adds faults: while the counts differ, record both again and keep the fewest.
    for _ in 0..2 {
        if n_with == n_without {
            break;
        }
        let again = |paths: bool| record_with_or_skip(&argv, &record::RecordOptions { paths, ..Default::default() }).expect("recorded once already");
        n_with = n_with.min(faults(&again(true)).0);
        n_without = n_without.min(faults(&again(false)).0);
    }
    println!("faults with path resolution {n_with} (on the path's page {page_with:?}), without {n_without} ({page_without:?})");
    // One read in kernel mode of a page not present: error code 0 (no present, write or user bit).
    assert_eq!(page_without, [0], "without the listener");
    assert_eq!(page_with, [0], "with the listener");
    assert_eq!(n_with, n_without);
}

/// Issue #9: a program that forks a saver (progs/fork_cow.c), recorded once and replayed as
/// one machine (the child's mm copied from the parent's at the fork record), predicted under
/// every setting of the anon matrix: minflt of both processes and the census of both at exit.
#[test]
fn forking_program_model_matches_live_across_the_matrix() {
    check_c_program("fork_cow", anon_matrix(), |_| {}, |label, model, _, failures| {
        let replay = replay_of(model);
        if replay.forked_images != 1 {
            failures.push(format!("{label}: forked_images {}", replay.forked_images));
        }
    });
}

/// A single-threaded C program of the kind issue #4 names, predicted under every setting of
/// the anon matrix.
#[test]
fn c_program_model_matches_live_across_the_matrix() {
    check_c_program("odd_maps", anon_matrix(), |_| {}, |_, _, _, _| {});
}

/// Issue #8: a program that checks the result of MADV_COLLAPSE (progs/collapse_check.c) takes
/// its success path while recorded (the recorder answers the call, the replay performs it), so
/// the model, which replays the recording, matches the live runs across the anon matrix; before,
/// the recording held perror's faults that no live run has.
#[test]
fn collapse_checking_program_model_matches_live_across_the_matrix() {
    let check_recording = |rec: &record::Recording| {
        assert_eq!(rec.answers_unavailable, None, "the recorder must answer MADV_COLLAPSE on this machine");
        let answered = rec.events.iter().filter(|e| matches!(e.body, trace::EventBody::Answered { call: 20, ret: 0 })).count();
        assert_eq!(answered, 1, "madvise(MADV_COLLAPSE) answered 0");
    };
    check_c_program("collapse_check", anon_matrix(), check_recording, |_, _, _, _| {});
}


mod shmem;
