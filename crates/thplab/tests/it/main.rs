//! Integration tests of the `thplab` command line: the binary is run as a user would run it and
//! its stdout, stderr and exit code are checked, as exact text where practical.
//!
//! - `model`: `sim --json` figures (the live kernel's numbers on the reference machine),
//!   `settings`, `demo --model-only`, `examples`, `--help`, broken pipes.
//! - `errors`: bad input names the file, the line and what is valid, exits 2 (3 when the
//!   workload would be killed), and never panics.
//! - `programs`: python3, sqlite3 and redis-server recorded, replayed in the model and run live
//!   (through the libraries), minflt and large-folio counts within 2 %; live, as below.
//! - `fidelity`: a recorded program behaves as it does unrecorded (issue #8): the calls whose
//!   result PR_SET_THP_DISABLE changes are answered as without it, and the trace says so.
//! - `sweeps`: `sweep` rows equal `sim --json`, a SIGKILLed study resumes into the same
//!   Parquet file, and on a Dask scheduler with two workers (skipped without dask.distributed).
//! - `advise`: `advise` on a workload in the model (front, rule, written choice) and on xz,
//!   recorded, predicted and verified live.
//! - `report_study`: `report STUDY.parquet` plots the table's points.
//! - `live`: `compare --matrix` and the SIGKILL recovery of `__hold`; they run only as root with
//!   the THP sysfs tree present (otherwise they print `skipped: REASON` and pass), one at a time,
//!   and check that every knob ends as it was. No test writes to sysfs itself.
//!
//! Every run asserts that stderr has no "panicked". Live tests take [`LIVE`] for writing for
//! their whole length and every other run takes it for reading, so no other thplab run can
//! restore (and so hide) the knobs a killed `__hold` leaves behind.

mod accesses;
mod advise;
mod bench;
mod errors;
mod exporter;
mod fidelity;
mod fork;
mod golden;
mod hugetlb;
mod inputs;
mod khugepaged;
mod latency;
mod live;
mod model;
mod pacing;
mod pressure;
mod programs;
mod report_study;
mod sat;
mod schema;
mod sweeps;
mod views;
mod vm_host;
mod widths;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

pub const THPLAB: &str = env!("CARGO_BIN_EXE_thplab");

/// Write-locked by live tests; read-locked around every other thplab run.
static LIVE: RwLock<()> = RwLock::new(());

pub fn shared() -> RwLockReadGuard<'static, ()> {
    LIVE.read().unwrap_or_else(|p| p.into_inner())
}

pub fn exclusive() -> RwLockWriteGuard<'static, ()> {
    LIVE.write().unwrap_or_else(|p| p.into_inner())
}

/// What a thplab run printed and how it exited.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    #[track_caller]
    pub fn ok(&self) -> &Run {
        assert_eq!(self.code, 0, "expected exit 0; stderr:\n{}\nstdout:\n{}", self.stderr, self.stdout);
        self
    }

    #[track_caller]
    pub fn fails(&self, code: i32) -> &Run {
        assert_eq!(self.code, code, "expected exit {code}; stderr:\n{}\nstdout:\n{}", self.stderr, self.stdout);
        self
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }

    /// stdout read as one run result (`sim --json`, `live --json`), typed.
    pub fn result(&self) -> uapi::RunResult {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not a run result ({e}):\n{}", self.stdout))
    }
}

fn finish(args: &[&str], out: Output) -> Run {
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(out.stderr).expect("stderr is UTF-8"),
    };
    assert!(!run.stderr.contains("panicked"), "thplab {args:?} panicked:\n{}", run.stderr);
    assert!(run.code >= 0, "thplab {args:?} was killed by a signal; stderr:\n{}", run.stderr);
    run
}

/// `thplab ARGS` in `dir`, without holding [`LIVE`] (the caller holds it).
pub fn thplab_unlocked(dir: &Path, args: &[&str]) -> Run {
    let out = Command::new(THPLAB)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {THPLAB}: {e}"));
    finish(args, out)
}

/// `thplab ARGS` in the workspace root.
pub fn thplab(args: &[&str]) -> Run {
    let _g = shared();
    thplab_unlocked(&workspace(), args)
}

/// The arguments of `thplab CMD WORKLOAD --json ARGS...` (`sim`, `live`).
pub fn json_args<'a>(cmd: &'a str, workload: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![cmd, workload, "--json"];
    v.extend_from_slice(args);
    v
}

/// `thplab ARGS` in `dir`.
pub fn thplab_in(dir: &Path, args: &[&str]) -> Run {
    let _g = shared();
    thplab_unlocked(dir, args)
}

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root")
}

/// A file with this text in a fresh temporary directory (kept while the returned dir lives).
pub fn temp_file(name: &str, text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join(name);
    std::fs::write(&p, text).expect("write temp file");
    (dir, p.display().to_string())
}

/// The built-in examples as `thplab examples` lists them, comma-separated (as error messages
/// list them). The list grows with the project; seed-anon-1g comes first.
pub fn examples_list() -> String {
    let r = thplab(&["examples"]);
    r.ok();
    // The workloads; the studies listed after them (`study: ...`) are not workloads.
    r.stdout.lines().filter(|l| !l.contains("  study: ")).map(|l| l.split_whitespace().next().unwrap_or("")).collect::<Vec<_>>().join(", ")
}

/// Why live tests cannot run here, if they cannot (no THP sysfs tree, or not root).
pub(crate) fn skip_reason() -> Option<String> {
    const SYSFS: &str = "/sys/kernel/mm/transparent_hugepage";
    if !std::path::Path::new(SYSFS).join("enabled").exists() {
        return Some(format!("{SYSFS} does not exist"));
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|u| u.split_whitespace().nth(1));
    if euid != Some("0") {
        return Some("not root (live runs write THP knobs)".into());
    }
    None
}

/// Runs `run` (a live run in which khugepaged must work), again while khugepaged waited on a
/// runqueue for more than `limit_ms` during it (`wait_ms` reads `live.khugepaged.runqueue_wait_ms`
/// from its result), four runs at most; returns the last.
///
/// khugepaged runs at nice 19: while other work keeps both CPUs busy (this suite's own model
/// runs and replays), it can wait for seconds and collapse late or not at all. Measured here: a
/// 1 s run beside two busy loops, 2.0 s of runqueue wait and collapses at 700 and 1000 ms (the
/// model's at 50 ms); without them 0-45 ms and every collapse on time. Such a run says nothing
/// of the model.
pub fn run_with_daemon_on_cpu<T>(label: &str, limit_ms: u64, mut run: impl FnMut() -> T, wait_ms: impl Fn(&T) -> Option<u64>) -> T {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let out = run();
        let waited = wait_ms(&out).unwrap_or(0);
        if waited <= limit_ms || attempt == 4 {
            println!("{label}: khugepaged waited {waited} ms on a runqueue during the run (run {attempt})");
            return out;
        }
        println!("{label}: khugepaged waited {waited} ms on a runqueue during the run (busy machine); once more");
        std::thread::sleep(std::time::Duration::from_secs(2));
    }
}

/// `settings --list`'s text with each folded entry joined again: a line that starts with a
/// space continues the one before it (`report::text::wrap` folds at single spaces).
pub fn unfold(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for l in text.lines() {
        match out.last_mut() {
            Some(prev) if l.starts_with(' ') => {
                prev.push(' ');
                prev.push_str(l.trim_start());
            }
            _ => out.push(l.to_string()),
        }
    }
    out
}
