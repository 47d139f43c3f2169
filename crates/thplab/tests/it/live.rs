//! Live tests through the command line. They need root and the THP sysfs tree; elsewhere they
//! print `skipped: REASON` and pass. They run one at a time (the [`crate::exclusive`] lock here,
//! thplab's own flock across processes), never write to sysfs themselves (thplab does, through
//! its settings guard), and check that every knob ends as it began.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::{exclusive, thplab_unlocked, workspace, THPLAB};

const SYSFS: &str = "/sys/kernel/mm/transparent_hugepage";

use crate::skip_reason;

macro_rules! require_live {
    () => {
        if let Some(reason) = skip_reason() {
            println!("skipped: {reason}");
            return;
        }
    };
}

/// Every knob file under the tree (not `stats/`, not khugepaged's counters) and its content,
/// as found: read while no settings guard (of this or another process) holds them.
fn knobs() -> BTreeMap<PathBuf, String> {
    live::guard::while_unlocked(read_knobs).expect("the settings guard's lock")
}

fn read_knobs() -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::from(SYSFS)];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read the THP tree").flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().to_string();
            if p.is_dir() {
                if name != "stats" {
                    stack.push(p);
                }
            } else if !["pages_collapsed", "full_scans"].contains(&name.as_str()) {
                if let Ok(v) = std::fs::read_to_string(&p) {
                    out.insert(p, v);
                }
            }
        }
    }
    out
}

/// Checks when dropped (even when the test fails) that every knob is as it was when made.
struct KnobsUnchanged(BTreeMap<PathBuf, String>);

impl KnobsUnchanged {
    fn new() -> Self {
        KnobsUnchanged(knobs())
    }
}

impl Drop for KnobsUnchanged {
    fn drop(&mut self) {
        let now = knobs();
        let changed: Vec<String> = self
            .0
            .iter()
            .filter(|(p, v)| now.get(*p) != Some(v))
            .map(|(p, v)| format!("{}: was {:?}, now {:?}", p.display(), v.trim(), now.get(p).map(|s| s.trim())))
            .collect();
        if !changed.is_empty() && !std::thread::panicking() {
            panic!("THP knobs changed by the test:\n{}", changed.join("\n"));
        } else if !changed.is_empty() {
            eprintln!("THP knobs changed by the test:\n{}", changed.join("\n"));
        }
    }
}

/// The selected word of a knob such as `always [madvise] never`.
fn selected(content: &str) -> String {
    match (content.find('['), content.find(']')) {
        (Some(a), Some(b)) if a < b => content[a + 1..b].to_string(),
        _ => content.trim().to_string(),
    }
}

/// Live runs of `compare --matrix` before giving up on a quiet machine.
const ATTEMPTS: usize = 3;

/// `thplab compare FILE --matrix` exits 0 and says the model matched all 11 settings.
///
/// System-wide counters (/proc/vmstat, hugepages-*/stats) also count THPs that other processes
/// fault while a setting is applied: a compiler running beside the test under enabled=always
/// moves thp_fault_alloc. thplab already reruns such a setting (--retries); this test reruns the
/// whole matrix up to [`ATTEMPTS`] times. If the machine stays busy, it settles for a JSON run in
/// which every row of the process itself (minflt, Rss, AnonHugePages, the folio census) is equal
/// and only system-wide rows differ, and says so on stdout.
fn compare_matrix(example: &str) {
    require_live!();
    let _x = exclusive();
    let _k = KnobsUnchanged::new();
    let file = workspace().join("examples").join(example);
    let file = file.to_str().unwrap();
    let mut last = None;
    for attempt in 1..=ATTEMPTS {
        let r = thplab_unlocked(&workspace(), &["compare", file, "--matrix"]);
        if r.code == 0 {
            assert_eq!(r.stdout.lines().last(), Some("11 of 11 settings: model = live"), "{}", r.stdout);
            return;
        }
        r.fails(4);
        println!("{example}: attempt {attempt} of {ATTEMPTS}: {}", r.stdout.lines().last().unwrap_or(""));
        last = Some(r);
        std::thread::sleep(std::time::Duration::from_secs(5));
    }
    let r = thplab_unlocked(&workspace(), &["compare", file, "--matrix", "--json"]);
    let v = r.json();
    let mut system_only = Vec::new();
    for setting in v.as_array().expect("one object per setting") {
        let label = setting["label"].as_str().unwrap_or("?");
        let rows = setting["rows"].as_array().expect("rows");
        let process_diffs: Vec<&serde_json::Value> =
            rows.iter().filter(|row| row["differs"] == true && row["kind"] != "system_wide").collect();
        assert!(
            process_diffs.is_empty(),
            "{example}, {label}: the model differs from the live kernel on the process itself: {process_diffs:?}\n\
             last text run:\n{}",
            last.as_ref().map(|r| r.stdout.as_str()).unwrap_or("")
        );
        if setting["differs"] == true {
            system_only.push(label.to_string());
        }
    }
    if !system_only.is_empty() {
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!(
            "note: {example}: after {ATTEMPTS} attempts, system-wide counters still moved by other processes under: {}; \
             every per-process row matched (load average {})",
            system_only.join("; "),
            load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
        );
    }
}

#[test]
fn compare_matrix_seed_anon_1g() {
    compare_matrix("seed-anon-1g.thpw");
}

#[test]
fn compare_matrix_issue_program() {
    compare_matrix("issue-program.thpw");
}

/// Kills a `__hold` that is still alive and runs the recovery, so that a failing test does not
/// leave knobs changed.
struct Holder(Option<Child>);

impl Drop for Holder {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
            let _ = Command::new(THPLAB).arg("settings").stdout(Stdio::null()).status();
        }
    }
}

/// A live run killed with SIGKILL leaves its knobs changed; the next thplab command puts them
/// back and says so.
#[test]
fn sigkilled_run_is_recovered_by_the_next_command() {
    require_live!();
    let _x = exclusive();
    let _k = KnobsUnchanged::new();
    let enabled = Path::new(SYSFS).join("enabled");
    // Other thplab processes on the machine (another checkout's live tests) may hold the knobs
    // for a while: then __hold waits for the lock, or finds `enabled` already at the target and
    // prints `held 0`. Try again a few times before failing with what __hold said.
    let mut attempts = Vec::new();
    let (pid, mut holder, before, target) = loop {
        let before = selected(&std::fs::read_to_string(&enabled).unwrap());
        let target = if before == "never" { "madvise" } else { "never" };
        let mut child = Command::new(THPLAB)
            .args(["__hold", &format!("enabled={target}")])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn thplab __hold");
        let stdout = child.stdout.take().unwrap();
        let pid = child.id();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("read from __hold");
        if line == "held 1\n" {
            break (pid, Holder(Some(child)), before, target);
        }
        let _ = child.kill();
        let _ = child.wait();
        let mut err = String::new();
        let _ = std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err);
        // Put back whatever this attempt changed before the next one.
        let _ = Command::new(THPLAB).arg("settings").stdout(Stdio::null()).stderr(Stdio::null()).status();
        attempts.push(format!("stdout {line:?}, stderr {err:?}"));
        assert!(attempts.len() < 3, "thplab __hold enabled={target} did not print 'held 1':\n{}", attempts.join("\n"));
        std::thread::sleep(std::time::Duration::from_secs(5));
    };
    assert_eq!(selected(&std::fs::read_to_string(&enabled).unwrap()), target, "__hold did not apply the knob");

    // SIGKILL: no destructor runs, the journal stays behind.
    let mut child = holder.0.take().unwrap();
    child.kill().expect("kill -9 __hold");
    child.wait().unwrap();
    assert_eq!(selected(&std::fs::read_to_string(&enabled).unwrap()), target, "knob restored without a recovery?");

    let r = thplab_unlocked(&workspace(), &["settings"]);
    r.ok();
    assert_eq!(
        r.stderr,
        format!("thplab: restored 1 THP knob left changed by a live run (pid {pid}) that did not finish: enabled={before}\n")
    );
    assert_eq!(selected(&std::fs::read_to_string(&enabled).unwrap()), before);
    // Nothing is left to recover.
    let r = thplab_unlocked(&workspace(), &["settings"]);
    r.ok();
    assert_eq!(r.stderr, "");
}

/// Loop devices bound to a file now (their `loop/backing_file`).
fn bound_loops() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/sys/block")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("loop/backing_file")).ok().map(|f| format!("{}: {}", e.file_name().to_string_lossy(), f.trim())))
        .collect();
    v.sort();
    v
}

#[test]
fn bench_io_measures_every_kind_it_set_up_and_leaves_the_machine_as_it_was() {
    require_live!();
    let _g = exclusive();
    let _k = KnobsUnchanged::new();
    let pool = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";
    let pool_before = std::fs::read_to_string(pool).unwrap_or_default();
    let loops_before = bound_loops();
    let dir = tempfile::tempdir().unwrap();
    let save = dir.path().join("bench.json");
    let profile = dir.path().join("profile.toml");
    let run = thplab_unlocked(
        &workspace(),
        &[
            "bench", "io", "-q", "--kinds", "4K,mTHP-16K,mTHP-64K,THP-2M,hugetlb-2M", "--engines", "aio,io_uring,pread",
            "--block-sizes", "64K,1M", "--queue-depths", "4", "--repeat", "2", "--time", "0.05", "--size", "16M",
            "--dir", dir.path().to_str().unwrap(), "--save", save.to_str().unwrap(), "--write-profile", profile.to_str().unwrap(),
        ],
    );
    run.ok();
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&save).unwrap()).unwrap();
    assert_eq!(r["schema"], "thplab-bench-io/1");
    // Every kind was backed as asked (a kind that is not is reported, never measured).
    let measured: Vec<&str> = r["buffers"].as_array().unwrap().iter().filter(|b| b["skipped"].is_null()).map(|b| b["kind"].as_str().unwrap()).collect();
    for b in r["buffers"].as_array().unwrap() {
        if b["skipped"].is_null() {
            let want = match b["kind"].as_str().unwrap() {
                "4K" => "4kB",
                "mTHP-16K" => "16kB",
                "mTHP-64K" => "64kB",
                _ => "2048kB",
            };
            let folios = b["backing"]["folios"].as_object().unwrap();
            assert_eq!(folios.len(), 1, "{b}");
            assert_eq!(folios[want].as_u64().unwrap() * want.trim_end_matches("kB").parse::<u64>().unwrap() * 1024, b["bytes"].as_u64().unwrap(), "{b}");
        } else {
            println!("note: {} not measured: {}", b["kind"], b["skipped"]);
        }
    }
    assert!(measured.contains(&"4K") && measured.contains(&"THP-2M"), "{measured:?}");
    // The ram and file targets each ran every engine (pread at depth 1), block size and kind.
    let targets: Vec<&str> = r["targets"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(targets, ["ram", "file"], "{}", r["notes"]);
    assert_eq!(r["cases"].as_array().unwrap().len(), 2 * 3 * 2 * measured.len());
    for c in r["cases"].as_array().unwrap() {
        assert!(c["mb_per_s"]["min"].as_f64().unwrap() > 0.0 && c["cpu_ns_per_byte"]["median"].as_f64().unwrap() > 0.0, "{c}");
        assert!(c["mb_per_s"]["min"].as_f64() <= c["mb_per_s"]["median"].as_f64() && c["mb_per_s"]["median"].as_f64() <= c["mb_per_s"]["max"].as_f64());
    }
    // The table has a row per block size and a column per kind.
    assert!(run.stdout.contains("ram (/dev/loop") && run.stdout.contains("aio qd 4: MB/s"), "{}", run.stdout);
    for k in &measured {
        assert!(run.stdout.lines().any(|l| l.trim_start().starts_with("block") && l.contains(k)), "{k}: {}", run.stdout);
    }
    // The pin companion's fit explains its own samples: without io_uring's head-compare term
    // (0 + 1 + ... + folios − 1 per call) the mTHP-16K samples are off by more than 80 %.
    let pin = &r["pin"];
    assert!(pin["max_abs_error_pct"].as_f64().unwrap() < 50.0, "{pin}");
    let prof = std::fs::read_to_string(&profile).unwrap();
    assert!(prof.contains("[pin]") && prof.contains("per_folio_ns") && prof.contains("per_pmd_page_ns"), "{prof}");
    // Checking the profile against a new companion run prints one line per sample and a verdict.
    let check = thplab_unlocked(
        &workspace(),
        &["bench", "io", "-q", "--pin-only", "--kinds", "4K,mTHP-16K,THP-2M", "--repeat", "2", "--time", "0.05", "--check-profile", profile.to_str().unwrap()],
    );
    assert!([0, 4].contains(&check.code), "{check:?}");
    assert!(check.stdout.contains("profile check:") && check.stdout.contains("largest error"), "{}", check.stdout);
    assert_eq!(check.stdout.lines().filter(|l| l.contains("(best repeat)")).count(), 9, "{}", check.stdout);
    // Everything set up was taken down.
    assert_eq!(std::fs::read_to_string(pool).unwrap_or_default(), pool_before);
    assert_eq!(bound_loops(), loops_before);
    assert!(std::fs::read_dir(dir.path()).unwrap().flatten().all(|e| !e.file_name().to_string_lossy().starts_with("thplab-bench-io")));
}

/// On a VM whose balloon reports free pages (issue #10): the live run reads the free lists it
/// starts from and counts its frames that lay in reported blocks (`live.host_faults`), and the
/// model, run again from those lists, gives the run as many host faults. Read before the model
/// instead, seconds earlier, the lists missed what the other CPU's per-CPU list gave back to the
/// buddy lists meanwhile (`decay_pcp_high`): 1 GiB runs of 64 KiB mTHP met 30-60 % fewer host
/// faults than the model gave them. Now they differ by what happens during the run itself
/// (decay again, at most 2 016 pages a second per CPU): 0.2-4.2 % of the frames written in
/// five runs here, with and without a large per-CPU list on the other CPU; 8 % is allowed.
#[test]
fn host_faults_are_predicted_from_the_free_lists_the_run_started_from() {
    require_live!();
    let order = std::fs::read_to_string("/sys/module/page_reporting/parameters/page_reporting_order").ok().and_then(|s| s.trim().parse::<i32>().ok());
    if !order.is_some_and(|o| o >= 0) {
        println!("skipped: no device reports free pages here (page_reporting_order unset)");
        return;
    }
    let _x = exclusive();
    let _k = KnobsUnchanged::new();
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().join("fill.thpw");
    std::fs::write(&w, "mmap buf 512M\ntouch buf write\n").unwrap();
    let r = thplab_unlocked(&workspace(), &["compare", w.to_str().unwrap(), "--set", "hugepages-64kB/enabled=always", "--profile", "builtin", "--json"]);
    let v = r.ok().json();
    let (model, live) = (&v[0]["model"], &v[0]["live"]["live"]);
    let m = model["time"]["host_faults"].as_u64().expect("the model's host faults");
    let l = live["host_faults"].as_u64().expect("live.host_faults on a VM that reports free pages");
    let lists = &live["free_lists"];
    assert_eq!(lists["free"].as_array().map(|a| a.len()), Some(11), "{lists}");
    assert!(lists["cpu"].is_u64() && lists["pcp"].is_u64() && lists["reported"].is_array(), "{lists}");
    let frames = 512 * 256;
    assert!(m <= frames && l <= frames, "model {m}, live {l} host faults of {frames} frames");
    assert!(m.abs_diff(l) * 25 <= frames * 2, "model {m}, live {l} host faults of {frames} frames written (more than 8 % apart)");
    // The model ran again from those free lists, and the result says so first.
    assert_eq!(v[0]["reruns"][0], serde_json::json!({ "run": "model", "reasons": ["model_live_free_lists"] }), "{}", v[0]["reruns"]);
    // The row compare prints.
    let row = v[0]["rows"].as_array().unwrap().iter().find(|r| r["field"] == "host faults (frames reported free)").expect("the host faults row");
    assert_eq!((row["model"].as_u64(), row["live"].as_u64()), (Some(m), Some(l)));
    println!("host faults: model {m}, live {l} of {frames} frames");
}

/// `bench chase --repeat 3`: every live point runs three times, in rounds over the page sizes,
/// and its figure is the median run; the PMD buffer is backed by PMD THPs in every run (the
/// knobs set through the guard, and left as they were).
#[test]
fn bench_chase_repeat_takes_the_median_of_its_live_runs() {
    require_live!();
    let _x = exclusive();
    let _k = KnobsUnchanged::new();
    let r = thplab_unlocked(&workspace(), &["bench", "chase", "--sizes", "16M", "--pages", "4K,PMD", "--accesses", "200000", "--repeat", "3", "--json"]);
    let v = r.ok().json();
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    for p in points {
        let mut runs: Vec<f64> = p["live_runs_ns_per_access"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert_eq!(runs.len(), 3, "{p}");
        runs.sort_by(f64::total_cmp);
        assert_eq!(p["live_ns_per_access"].as_f64(), Some(runs[1]), "{p}");
    }
    assert_eq!(points[1]["page"], "PMD");
    assert_eq!(points[1]["live_anon_huge_bytes"], 16 << 20);
    let ratio = points[1]["live_ratio"].as_f64().unwrap();
    assert!((ratio - points[1]["live_ns_per_access"].as_f64().unwrap() / points[0]["live_ns_per_access"].as_f64().unwrap()).abs() < 1e-9);
}

/// `compare --record --matrix KIND:NAMES` says where it is on stderr (issue #27 item 9: a
/// 6 min run printed 38 identical "waiting for page reporting" lines and nothing else): one
/// line per step where stderr is no terminal, with the setting, the step, the steps done of
/// all, the time so far and, once a step is done, what is left. stdout keeps the table, and
/// with --json holds JSON alone, the progress lines left out.
#[test]
fn compare_record_says_each_step_on_stderr() {
    let _x = exclusive();
    require_live!();
    let before = knobs();
    let args = ["compare", "--record", "--matrix", "anon:4K,PMD", "--retries", "0", "--program-quiet", "--", "/bin/true"];
    let r = thplab_unlocked(&workspace(), &args);
    assert!(r.code == 0 || r.code == 4, "{}", r.stderr);
    let steps: Vec<&str> = r.stderr.lines().filter(|l| l.starts_with("thplab compare: [")).collect();
    let expected = [
        "[1/5] recording /bin/true (",
        "[2/5] 4K only: the model replays the recording (",
        "[3/5] 4K only: live run 1 (",
        "[4/5] PMD always: the model replays the recording (",
        "[5/5] PMD always: live run 1 (",
    ];
    assert_eq!(steps.len(), expected.len(), "{}", r.stderr);
    for (i, (line, e)) in steps.iter().zip(expected).enumerate() {
        assert!(line.starts_with(&format!("thplab compare: {e}")), "{line}");
        // The first step knows no pace yet; every later one says what is left.
        let tail = if i == 0 { " so far)" } else { " left)" };
        assert!(line.ends_with(tail), "{line}");
    }
    assert!(!r.stderr.contains("waiting for page reporting"), "{}", r.stderr);
    assert!(r.stdout.contains("== 4K only: ") && r.stdout.contains("== PMD always: "), "{}", r.stdout);
    assert!(r.stdout.lines().last().is_some_and(|l| l.starts_with("2 of 2 settings: model = live") || l.contains("of 2 settings: model = live; ")), "{}", r.stdout);
    let mut json_args = args.to_vec();
    json_args.insert(1, "--json");
    let j = thplab_unlocked(&workspace(), &json_args);
    assert!(j.code == 0 || j.code == 4, "{}", j.stderr);
    assert_eq!(j.json().as_array().map(Vec::len), Some(2));
    assert!(!j.stderr.contains("thplab compare: ["), "{}", j.stderr);
    // A workload's matrix: one step per setting, model then live.
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().join("w.thpw");
    std::fs::write(&w, "mmap a 8M\ntouch a write\n").unwrap();
    let r = thplab_unlocked(&workspace(), &["compare", w.to_str().unwrap(), "--matrix", "anon:4K,PMD"]);
    assert!(r.code == 0 || r.code == 4, "{}", r.stderr);
    let steps: Vec<&str> = r.stderr.lines().filter(|l| l.starts_with("thplab compare: [")).collect();
    assert_eq!(steps.len(), 2, "{}", r.stderr);
    assert!(steps[0].starts_with("thplab compare: [1/2] 4K only: model, then live (") && steps[0].ends_with(" so far)"), "{}", steps[0]);
    assert!(steps[1].starts_with("thplab compare: [2/2] PMD always: model, then live (") && steps[1].ends_with(" left)"), "{}", steps[1]);
    assert_eq!(knobs(), before);
}

/// Two settings with identical counters make no measurable difference in time (issue #27
/// item 6). An anonymous workload under two settings of the shmem matrix, which change shmem knobs
/// alone, so the run faults the same 4 KiB pages under each (the counters equal, checked).
/// The model's verdict against the first setting is "no measurable effect" by construction:
/// its times differ only in the host faults of the free lists each live run started from, and
/// both intervals reach down to no host fault. The live verdict of each later setting against
/// the first is judged on 3 runs ± their range; with normal noise two settings of equal time are
/// called different about one time in seventy, so the live verdict is asserted for the second
/// setting only; and since a busy machine (a build beside the test) makes that rarer verdict
/// commoner, a "measurable" live verdict is measured once more: the assertion is that two
/// comparisons in a row do not both call equal times different (one time in ~5,000 when quiet).
#[test]
fn settings_with_identical_counters_make_no_measurable_difference_in_time() {
    require_live!();
    let _x = exclusive();
    let _k = KnobsUnchanged::new();
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().join("fill.thpw");
    std::fs::write(&w, "mmap buf 32M\ntouch buf write\n").unwrap();
    let compare = || thplab_unlocked(&workspace(), &["compare", w.to_str().unwrap(), "--matrix", "shmem:4K,64K", "--profile", "builtin", "--json"]).json();
    let mut v = compare();
    if v[1]["time_verdict"]["live_vs_first"]["measurable"] == true {
        eprintln!("live 64K always against 4K only was called measurable ({}); measuring again", v[1]["time_verdict"]);
        v = compare();
    }
    let sets = v.as_array().expect("one object per setting");
    // Two settings of the shmem matrix (each live one runs 3 times from a settled host, the
    // bulk of this test's time): the verdict asserted is the second's against the first.
    assert_eq!(sets.len(), 2);
    let minflt = |s: &serde_json::Value| s["model"]["process"]["minflt"].as_u64().unwrap();
    for s in sets {
        assert_eq!(minflt(s), minflt(&sets[0]), "the same faults under every setting");
        assert_eq!(s["live"]["live"]["runs"].as_u64(), Some(3), "3 live runs with a profile: {}", s["live"]["live"]);
        let range = &s["live"]["live"]["time_range_ms"];
        assert!(range["min"].as_f64().unwrap() <= range["max"].as_f64().unwrap(), "{range}");
        let t = &s["time_verdict"];
        assert!(t["model"]["low_ns"].as_f64().unwrap() <= t["model"]["ns"].as_f64().unwrap() && t["model"]["ns"].as_f64().unwrap() <= t["model"]["high_ns"].as_f64().unwrap(), "{t}");
    }
    for s in &sets[1..] {
        let t = &s["time_verdict"];
        assert_eq!(t["against"], "4K only");
        assert_eq!(t["model_vs_first"]["measurable"], false, "{}: {t}", s["label"]);
    }
    let second = &sets[1]["time_verdict"];
    assert_eq!(second["live_vs_first"]["measurable"], false, "live 64K always against 4K only: {second}");
    println!("64K always against 4K only: {}", second);
}

/// The hardware TLB counters (issue #32 item 3): `compare` of a workload with `access`
/// statements and `bench chase` live read them where the PMU has them, and where it does not
/// (this project's VMs: no virtual PMU) each says so once, in the one sentence, and prints no
/// counter (no zeros, no rows).
#[test]
fn hardware_tlb_counters_or_the_no_pmu_sentence() {
    require_live!();
    let _x = exclusive();
    let _k = KnobsUnchanged::new();
    const NO_PMU: &str = "this machine's PMU is not available: no hardware TLB counters";
    let pmu = ["cpu", "cpu_core", "cpu_atom"].iter().any(|d| Path::new("/sys/bus/event_source/devices").join(d).exists());
    let (dir, w) = crate::temp_file("tlb.thpw", "mmap r 4M\ntouch r write\naccess r chase count=20000 elem=64 seed=1\n");
    let r = thplab_unlocked(dir.path(), &["compare", &w, "--set", "enabled=never", "--json"]);
    assert!(r.code == 0 || r.code == 4, "compare: exit {}; stderr:\n{}", r.code, r.stderr);
    let v = r.json();
    let setting = &v.as_array().expect("one object per setting")[0];
    let hw_rows: Vec<&serde_json::Value> = setting["rows"].as_array().unwrap().iter().filter(|row| row["field"].as_str().unwrap().starts_with("TLB ")).collect();
    if pmu {
        assert_eq!(r.stderr.matches(NO_PMU).count(), 0, "{}", r.stderr);
        assert!(!setting["live"]["live"]["hw_tlb"].as_array().expect("live.hw_tlb").is_empty());
        // 4 KiB pages, a 4 MiB chase: at least the first touch of each of its 1024 pages walks.
        assert!(hw_rows.iter().any(|row| row["live"].as_i64().unwrap() >= 1024), "{hw_rows:?}");
    } else {
        assert_eq!(r.stderr.matches(NO_PMU).count(), 1, "compare says it once:\n{}", r.stderr);
        assert!(setting["live"]["live"].get("hw_tlb").is_none(), "no counts where there is no PMU");
        assert!(hw_rows.is_empty(), "no rows where there is no PMU: {hw_rows:?}");
    }
    let b = thplab_unlocked(&workspace(), &["bench", "chase", "--sizes", "16M", "--pages", "4K", "--accesses", "100000"]);
    b.ok();
    let hw_block = b.stdout.contains("hardware TLB counters per timed access");
    if pmu {
        assert!(hw_block && !b.stderr.contains(NO_PMU), "{}\n{}", b.stdout, b.stderr);
    } else {
        assert_eq!(b.stderr.matches(NO_PMU).count(), 1, "bench chase says it once:\n{}", b.stderr);
        assert!(!hw_block, "no counters printed: {}", b.stdout);
    }
}
