//! `thplab sweep`: a point's row equals `thplab sim --json` of the same point, a study killed
//! with SIGKILL half-way resumes into the same Parquet file as an uninterrupted run, a failing
//! point fails alone, and a bad study names its file, line and what is valid.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{thplab, thplab_in, THPLAB};

/// A study of three listed points and the `sim` arguments of each.
const THREE: &str = r#"
[[point]]
workload = "fork-bgsave"
settings = "enabled=always"
profile = "builtin"

[[point]]
workload = "issue-program"
settings = "hugepages-64kB/enabled=always"
mem = "4G"
cpu = "zen1"

[[point]]
workload = "seed-anon-1g"
settings = "matrix:anon:PMD"
"#;

fn sim_args(n: usize) -> Vec<&'static str> {
    match n {
        0 => vec!["sim", "fork-bgsave", "--json", "-q", "--set", "enabled=always", "--profile", "builtin"],
        1 => vec!["sim", "issue-program", "--json", "-q", "--set", "hugepages-64kB/enabled=always", "--mem", "4G", "--cpu", "zen1"],
        _ => vec!["sim", "seed-anon-1g", "--json", "-q", "--matrix", "anon:PMD"],
    }
}

fn study(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

#[test]
fn point_rows_equal_sim_json() {
    let dir = tempfile::tempdir().unwrap();
    let s = study(dir.path(), "three.toml", THREE);
    let out = dir.path().join("three.parquet");
    thplab(&["sweep", &s, "-o", out.to_str().unwrap(), "--json", "--jobs", "2"]).ok();
    let table = sweep::table::read(&out).unwrap();
    assert_eq!(table.len(), 3);
    let keep: Vec<String> = sweep::study::DEFAULT_KEEP.iter().map(|s| s.to_string()).collect();
    for (n, row) in table.iter().enumerate() {
        let one = thplab(&["sweep", &s, "--point", &n.to_string()]).ok().json();
        let point_row = one["row"].as_object().unwrap();
        let mut sim = thplab(&sim_args(n)).ok().json();
        if sim.is_array() {
            sim = sim[0]["model"].take();
        }
        let mut want = sweep::Row::new();
        sweep::run::figures(&sim, &keep, &mut want);
        assert!(want.len() > 100, "point {n}: only {} figures", want.len());
        let sim_text = thplab(&sim_args(n)).ok().stdout.clone();
        for (k, v) in &want {
            let Some(f) = v.as_object().and_then(|_| sweep::run::float_of(v)) else {
                assert_eq!(row.get(k), Some(v), "point {n} column {k}: Parquet against sim --json");
                assert_eq!(point_row.get(k), Some(v), "point {n} column {k}: --point against sim --json");
                continue;
            };
            // A float: the digits sim --json printed (read here by serde_json, which may be one
            // unit in the last place off), exactly.
            let got = row.get(k).and_then(Value::as_f64).unwrap_or_else(|| panic!("point {n} column {k}: no float in {:?}", row.get(k)));
            let digits = Value::from(got).to_string();
            let leaf = k.rsplit('.').next().unwrap();
            assert!(sim_text.contains(&format!("\"{leaf}\": {digits}")), "point {n} column {k}: {digits} is not what sim --json printed");
            assert!((got - f).abs() <= f.abs() * 1e-15, "point {n} column {k}: {got} against sim's {f}");
            assert_eq!(point_row.get(k), Some(&sweep::run::float(got)), "point {n} column {k}: --point against the Parquet file");
        }
        let figures = row.keys().filter(|k| !sweep::table::LEADING.contains(&k.as_str())).count();
        assert_eq!(figures, want.len(), "point {n}: the row has figures sim --json has not");
        assert_eq!(row["point"], Value::from(n as i64));
        assert!(!row.contains_key("error"), "point {n} failed: {:?}", row.get("error"));
    }
    // By hand: 64 MiB in PMD THPs is 32 faults of 2 MiB; 1 GiB of them 512.
    assert_eq!(table[0]["vmstat.thp_fault_alloc"], 32);
    assert_eq!(table[0]["workload"], "fork-bgsave");
    assert_eq!(table[0]["profile"], "builtin");
    assert!(table[0]["time.total_ns"].as_f64().unwrap() > 0.0);
    assert!(!table[1].contains_key("time.total_ns"), "no profile, no time");
    assert_eq!((&table[1]["cpu"], &table[1]["mem"]), (&Value::from("zen1"), &Value::from("4G")));
    assert_eq!(table[2]["settings"], "matrix:anon:PMD");
    assert_eq!(table[2]["process.minflt"], 512);
    assert_eq!(table[2]["census.sizes.2048kB.pmd_mapped"], 512);
}

/// Lines in the journal past its header.
fn journal_rows(journal: &Path) -> usize {
    std::fs::read_to_string(journal).map_or(0, |t| t.matches('\n').count().saturating_sub(1))
}

#[test]
fn sigkill_half_way_resumes_to_the_same_file() {
    const TOTAL: usize = 55;
    let text = r#"
[axes]
workloads = ["seed-anon-1g", "issue-program", "seed-shm-anon-1g", "seed-tmpfs-write", "fork-bgsave"]
settings = ["matrix:anon"]
"#;
    let dir = tempfile::tempdir().unwrap();
    let s = study(dir.path(), "s.toml", text);
    let whole = dir.path().join("whole.parquet");
    let cut = dir.path().join("cut.parquet");
    let journal = sweep::journal::path_for(&cut);
    let first = thplab(&["sweep", &s, "-o", whole.to_str().unwrap(), "--json"]).ok().json();
    assert_eq!((first["points"].as_u64(), first["ran"].as_u64(), first["resumed"].as_u64()), (Some(TOTAL as u64), Some(TOTAL as u64), Some(0)));

    let guard = crate::shared();
    let mut child = Command::new(THPLAB).args(["sweep", &s, "-o", cut.to_str().unwrap(), "-q"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let start = Instant::now();
    while journal_rows(&journal) < TOTAL / 3 {
        assert!(start.elapsed() < Duration::from_secs(600), "the sweep wrote {} rows in 10 minutes", journal_rows(&journal));
        assert!(child.try_wait().unwrap().is_none(), "the sweep ended before it was killed");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let kept = journal_rows(&journal);
    assert!((TOTAL / 3..TOTAL).contains(&kept), "killed with {kept} of {TOTAL} rows in the journal");
    assert!(!cut.exists(), "no Parquet file before the sweep finishes");
    drop(guard);

    let resumed = thplab_in(dir.path(), &["sweep", "s.toml", "-o", "cut.parquet", "--json"]).ok().json();
    assert_eq!(resumed["resumed"].as_u64(), Some(kept as u64));
    assert_eq!(resumed["ran"].as_u64(), Some((TOTAL - kept) as u64));
    assert_eq!(journal_rows(&journal), TOTAL);
    let (a, b) = (sweep::table::read(&whole).unwrap(), sweep::table::read(&cut).unwrap());
    assert_eq!(a.len(), TOTAL);
    assert_eq!(a, b, "the resumed study's rows differ from the uninterrupted run's");
    assert_eq!(std::fs::read(&whole).unwrap(), std::fs::read(&cut).unwrap(), "the two Parquet files differ in bytes");

    // A third run finds every point in the journal and runs none.
    let again = thplab_in(dir.path(), &["sweep", "s.toml", "-o", "cut.parquet", "--json"]).ok().json();
    assert_eq!((again["resumed"].as_u64(), again["ran"].as_u64()), (Some(TOTAL as u64), Some(0)));
}

#[test]
fn a_failing_point_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let s = study(dir.path(), "s.toml", "[axes]\nworkloads = [\"seed-anon-1g\"]\nmem = [\"512M\", \"2G\"]\n");
    let out = dir.path().join("s.parquet");
    let sum = thplab(&["sweep", &s, "-o", out.to_str().unwrap(), "--json"]).ok().json();
    assert_eq!((sum["points"].as_u64(), sum["failed"].as_u64()), (Some(2), Some(1)));
    let rows = sweep::table::read(&out).unwrap();
    let err = rows[0]["error"].as_str().unwrap();
    assert!(err.contains("out of memory") && err.contains("512 MiB"), "{err}");
    assert!(!rows[0].contains_key("process.minflt"), "a failed point has no figures");
    // 1 GiB written page by page without THP (enabled=madvise, no madvise): 262144 faults.
    assert_eq!(rows[1]["process.minflt"], 262144);
    assert!(!rows[1].contains_key("error"));
}

#[test]
fn a_bad_study_names_its_file_line_and_what_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("[axes]\nworkloads = [\"seed-anon-1g\"]\ncpu = [\"zen4\",\n  \"zen9\"]\n", "line 4: cpu 'zen9' is no preset; valid: zen4, zen1, golden-cove, neoverse-n1, cortex-a57, cortex-a53, default"),
        ("keep = [\"process\", \"tlb\"]\n[axes]\nworkloads = [\"seed-anon-1g\"]\n", "line 1: keep = 'tlb' is no section of a result; valid: process, vmstat, mthp"),
        ("[axes]\nworkload = [\"seed-anon-1g\"]\n", "line 2, column 1"),
        ("[axes]\nworkloads = [\"seed-anon-1g\"]\nsettings = [\"enabled=sometimes\"]\n", "line 3: settings 'enabled=sometimes': invalid value 'sometimes' for 'enabled'; valid values are: always, madvise, never"),
        ("[axes]\nworkloads = [\"seed-anon-1g\"]\nsettings = [\"matrix:anon:77K\"]\n", "line 3: matrix:anon:77K: no setting '77K' in the anon matrix; valid: 4K, 16K"),
        ("[axes]\nworkloads = [\"nope.thpw\"]\n", "line 2: no workload file"),
        ("[axes]\nworkloads = [\"seed-anon-1g\"]\nmem = [\"3Q\"]\n", "line 3: mem 3Q: give a size from 70M to 4T, such as 4G"),
        ("[[point]]\nsettings = \"enabled=always\"\n", "line 1: a [[point]] needs a workload"),
        ("[axes]\n", "no point"),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let s = study(dir.path(), &format!("bad{i}.toml"), text);
        let r = thplab(&["sweep", &s]);
        r.fails(2);
        assert!(r.stderr.contains(&format!("study {s}")), "case {i}: no file name in {}", r.stderr);
        assert!(r.stderr.contains(want), "case {i}: want {want:?} in {}", r.stderr);
    }
}

/// Processes killed (SIGKILL) and reaped when dropped.
struct Procs(Vec<std::process::Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The Dask run of a study with a workload file, a recording and a settings file equals the
/// local run, on workers that do not see the study's folder: each worker runs in its own mount
/// namespace with an empty tmpfs over that folder (`unshare --mount`; where that cannot be done,
/// on the shared file system, said on stderr), so the points can only have read the copies the
/// driver sent, which the test finds under the workers' TMPDIR by their SHA-256.
#[test]
fn dask_scheduler_and_two_workers_give_the_local_file() {
    let importable = Command::new("python3").args(["-c", "import dask.distributed"]).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
    if !importable {
        eprintln!("skipped: python3 cannot import dask.distributed (pip install dask distributed)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/data/golden");
    std::fs::create_dir(dir.path().join("rec")).unwrap();
    std::fs::copy(data.join("gzip.thpt"), dir.path().join("rec/gzip.thpt")).unwrap();
    std::fs::copy(data.join("heap.thpw"), dir.path().join("heap.thpw")).unwrap();
    std::fs::write(dir.path().join("knobs.txt"), "enabled=always\nhugepages-64kB/enabled=always\n").unwrap();
    let hidden = Command::new("unshare").args(["--mount", "sh", "-c", &format!("mount -t tmpfs none {} && test ! -e {}/heap.thpw", dir.path().display(), dir.path().display())]).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
    if !hidden {
        eprintln!("note: unshare --mount is not available here; the workers share the study's folder (the copies are still what they read)");
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let addr = format!("tcp://127.0.0.1:{port}");
    let quiet = |args: &[&str]| Command::new("python3").args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let mut procs = Procs(vec![quiet(&["-m", "dask", "scheduler", "--host", "127.0.0.1", "--port", &port, "--no-dashboard"])]);
    let worker = format!("exec python3 -m dask worker {addr} --nworkers 1 --nthreads 1 --no-dashboard");
    let script = if hidden { format!("mount -t tmpfs none {} && {worker}", dir.path().display()) } else { worker };
    for _ in 0..2 {
        let mut c = if hidden { Command::new("unshare") } else { Command::new("sh") };
        if hidden {
            c.args(["--mount", "sh"]);
        }
        procs.0.push(c.args(["-c", &script]).env("TMPDIR", tmp.path()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap());
    }
    let text = "[axes]\nworkloads = [\"issue-program\", \"heap.thpw\"]\nrecordings = [\"rec/gzip.thpt\"]\nsettings = [\"matrix:anon:4K,64K,all,PMD\", \"file:knobs.txt\"]\nprofile = [\"none\", \"builtin\"]\n";
    let s = study(dir.path(), "d.toml", text);
    let (local, remote) = (dir.path().join("local.parquet"), dir.path().join("dask.parquet"));
    thplab(&["sweep", &s, "-o", local.to_str().unwrap(), "--json"]).ok();
    let sum = thplab(&["sweep", &s, "-o", remote.to_str().unwrap(), "--json", "--dask", &addr]).ok().json();
    assert_eq!((sum["points"].as_u64(), sum["ran"].as_u64(), sum["failed"].as_u64()), (Some(30), Some(30), Some(0)));
    let (a, b) = (sweep::table::read(&local).unwrap(), sweep::table::read(&remote).unwrap());
    assert_eq!(a.len(), 30);
    assert_eq!(a, b, "the Dask run's rows differ from the local run's");
    assert_eq!(std::fs::read(&local).unwrap(), std::fs::read(&remote).unwrap(), "the two Parquet files differ in bytes");
    drop(procs);
    // The workers' copies: the recording under the folder named by its own SHA-256.
    let sha = sha256(&data.join("gzip.thpt"));
    let copies: Vec<_> = walk(&tmp.path().join("thplab-shipped")).into_iter().filter(|p| p.ends_with(format!("{sha}/gzip.thpt"))).collect();
    assert!(!copies.is_empty(), "no copy of gzip.thpt under the workers' TMPDIR");
    assert_eq!(std::fs::read(&copies[0]).unwrap(), std::fs::read(data.join("gzip.thpt")).unwrap());
}

/// A shipped file whose bytes do not match the hash the driver computed is refused, naming it.
#[test]
fn a_shipped_file_of_another_hash_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = study(dir.path(), "s.toml", "[axes]\nworkloads = [\"heap.thpw\"]\n");
    std::fs::write(dir.path().join("heap.thpw"), "mmap a 4M\ntouch a write\n").unwrap();
    let code = "import json, sys, tempfile; sys.path.insert(0, sys.argv[1]); import dask_driver as d\n\
        b = d.bundle(sys.argv[2], {'heap.thpw': [sys.argv[3]]})\n\
        study, files = d.unpack(b)\n\
        print(json.load(open(files))['heap.thpw'])\n\
        b['files']['heap.thpw'][0][1] = b'mmap a 8M\\n'\n\
        b['sha'] = 'x'\n\
        d.unpack(b)\n";
    let py = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/thplab");
    let heap = dir.path().join("heap.thpw");
    let out = Command::new("python3").args(["-c", code, py.to_str().unwrap(), &s, heap.to_str().unwrap()]).env("TMPDIR", dir.path()).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success());
    let sha = sha256(&heap);
    assert!(stdout.trim().ends_with(&format!("files/{sha}/heap.thpw")), "{stdout}");
    assert!(stderr.contains("heap.thpw has SHA-256 ") && stderr.contains(&format!(", the driver sent {sha}")) && !stderr.contains(&format!("SHA-256 {sha},")), "{stderr}");
}

/// The SHA-256 of a file, by sha256sum(1) (coreutils).
fn sha256(p: &Path) -> String {
    let out = Command::new("sha256sum").arg(p).output().unwrap();
    String::from_utf8(out.stdout).unwrap().split_whitespace().next().unwrap().to_string()
}

fn walk(p: &Path) -> Vec<std::path::PathBuf> {
    let Ok(rd) = std::fs::read_dir(p) else { return Vec::new() };
    rd.flatten().flat_map(|e| if e.path().is_dir() { walk(&e.path()) } else { vec![e.path()] }).collect()
}
