//! The study's pipeline: the instance written, the solver recorded once with its accesses
//! (`record --accesses=qemu --timed N`, the recorder of crates/record), its replay predicted
//! under each configuration and paging mode (`thplab sim RECORDING --cpu C --paging P
//! --profile builtin`: experiment::simulate::sim_one), and each configuration run live N times
//! through the settings guard (record::time_untraced_ok with THP allowed).
//!
//! The three configurations of the document's experiment: 4 KiB pages (`enabled=never`), PMD
//! THP for all anonymous memory (`enabled=always`), and THP for malloc's memory alone
//! (`enabled=madvise` with `GLIBC_TUNABLES=glibc.malloc.hugetlb=1`: glibc's malloc/malloc.c
//! `madvise_thp` calls madvise(MADV_HUGEPAGE) on the heap it extends with sbrk and on the
//! chunks it maps; the kernel's mm/khugepaged.c `hugepage_madvise` sets VM_HUGEPAGE, which
//! mm/huge_memory.c `__thp_vma_allowable_orders` honours under `madvise`). The replay cannot
//! add calls the program did not make, so the solver is recorded once with the tunable set:
//! the recording holds glibc's madvise calls, which change nothing under `never` (no THP at
//! all) and `always` (every VMA already eligible), and the same recording predicts all three.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use experiment::resolve::{self, ProfileFlags};
use experiment::simulate::{SimInput, SimOptions};

/// The tunable of the third configuration.
pub const TUNABLE: (&str, &str) = ("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1");

/// A configuration: its label, its `--set` and whether the tunable is in the environment.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub label: &'static str,
    pub set: &'static str,
    pub tunable: bool,
}

pub const CONFIGS: [Config; 3] = [
    Config { label: "4 KiB", set: "enabled=never", tunable: false },
    Config { label: "PMD (enabled=always)", set: "enabled=always", tunable: false },
    Config { label: "glibc.malloc.hugetlb=1", set: "enabled=madvise", tunable: true },
];

/// The recording made of the solver.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub trace: PathBuf,
    /// The recorder's exit: the solver's status.
    pub status: u8,
    /// Wall time of the whole `record --accesses=qemu --timed N`.
    pub wall_s: f64,
    /// The median untraced run's wall time (the recording's `untraced_wall_ns`).
    pub native_s: f64,
}

/// Runs `f` with the tunable in this process's environment (inherited by what it spawns),
/// restoring the environment after. The study spawns one program at a time.
pub fn with_tunable<T>(on: bool, f: impl FnOnce() -> T) -> T {
    let before = std::env::var_os(TUNABLE.0);
    if on {
        std::env::set_var(TUNABLE.0, TUNABLE.1);
    } else {
        std::env::remove_var(TUNABLE.0);
    }
    let out = f();
    match before {
        Some(v) => std::env::set_var(TUNABLE.0, v),
        None => std::env::remove_var(TUNABLE.0),
    }
    out
}

/// `record --accesses=qemu --timed N -o TRACE -- ARGV` with the tunable set.
pub fn record(argv: &[OsString], trace: &Path, timed: u32) -> Result<Recorded> {
    let cmd = record::command::RecordCommand {
        output: trace.to_path_buf(),
        buffer_kib: 32 * 1024,
        no_kernel_faults: false,
        no_exec_snapshot: false,
        no_paths: false,
        quiet: false,
        timed,
        accesses: true,
        engine: record::accesses::Engine::Qemu,
        command: argv.to_vec(),
    };
    let time_untraced = |argv: &[OsString], runs: u32, _progress: bool| Ok(timed_runs(argv, runs, false)?.0);
    // glibc takes the tunable only where the PMD mode is `madvise` when the program starts
    // (malloc/malloc.c `do_set_hugetlb` reads .../transparent_hugepage/enabled): where the
    // knob is something else now, the guard sets it for the recording and restores it.
    let guard = match live_mode().as_deref() {
        Some("madvise") | None => None,
        Some(_) => Some(live::SettingsGuard::apply(&resolve::settings(None, &[], &["enabled=madvise".to_string()])?)?),
    };
    let t0 = Instant::now();
    let out = with_tunable(true, || record::command::record(&cmd, &time_untraced));
    let wall_s = t0.elapsed().as_secs_f64();
    if let Some(g) = guard {
        g.restore()?;
    }
    let out = out?;
    let status = match out {
        record::command::Outcome::Exited(c) => c,
        record::command::Outcome::Unavailable => bail!("recording is not available here (see above); the study needs root and perf events on tracepoints"),
    };
    let (header, _) = experiment::input::load_recording(&trace.to_string_lossy())?.with_context(|| format!("{} is not a recording", trace.display()))?;
    Ok(Recorded { trace: trace.to_path_buf(), status, wall_s, native_s: header.untraced_wall_ns as f64 / 1e9 })
}

/// A solver's exit codes: satisfiable, unsatisfiable.
const SOLVED: [i32; 2] = [10, 20];

/// `runs` untraced runs (THP disabled for the program unless `live`), each after the host has
/// settled (experiment::host::settle_host): the median and the range (ns).
fn timed_runs(argv: &[OsString], runs: u32, live: bool) -> Result<(u64, u64, u64)> {
    let mut t = Vec::new();
    for _ in 0..runs.max(1) {
        experiment::host::settle_host(false);
        t.push(record::time_untraced_ok(argv, 1, live, None, &SOLVED)?);
    }
    t.sort_unstable();
    Ok((t[(t.len() - 1) / 2], t[0], t[t.len() - 1]))
}

/// The PMD mode the live kernel has now (the bracketed word of .../transparent_hugepage/enabled).
fn live_mode() -> Option<String> {
    let t = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    Some(t.split_once('[')?.1.split_once(']')?.0.to_string())
}

/// The predicted wall time (ns) of each configuration, replaying `trace` with the built-in
/// profile, CPU preset `cpu` and paging `paging` (None: the profile's).
pub fn predict(trace: &Path, cpu: &str, paging: Option<&str>) -> Result<[f64; 3]> {
    let (input, _) = experiment::input::load_sim_input(&trace.to_string_lossy(), false, true, &|_| {})?;
    if !matches!(input, SimInput::Recording { accesses: Some(_), .. }) {
        bail!("{} has no accesses (FILE.accesses beside it): record with --accesses", trace.display());
    }
    let file = resolve::load_profile("builtin")?;
    let flags = ProfileFlags { cpu: Some(cpu), paging, tlb: true, ..Default::default() };
    let profile = resolve::profile(&flags, Some(&file))?;
    let o = SimOptions { check: false, recorded_time: true, profile: &profile, salvage: None };
    let machine = sim::MachineConfig::default();
    let mut out = [0.0; 3];
    for (i, c) in CONFIGS.iter().enumerate() {
        let s = resolve::settings(None, &[], &[c.set.to_string()])?;
        let r = experiment::simulate::sim_one(&o, &input, &s, &machine, None, false)?;
        out[i] = r.time.as_ref().context("the replay was not priced")?.elapsed_ns as f64;
    }
    Ok(out)
}

/// One configuration's live runs: their median and range (s).
#[derive(Clone, Copy, Debug)]
pub struct Live {
    pub median_s: f64,
    pub min_s: f64,
    pub max_s: f64,
}

/// Each configuration run live `runs` times under its settings (the guard applies and
/// restores them) and, for the third, with the tunable.
pub fn live(argv: &[OsString], runs: u32) -> Result<[Live; 3]> {
    let mut out = [Live { median_s: 0.0, min_s: 0.0, max_s: 0.0 }; 3];
    for (i, c) in CONFIGS.iter().enumerate() {
        let s = resolve::settings(None, &[], &[c.set.to_string()])?;
        let guard = live::SettingsGuard::apply(&s)?;
        if let Some(m) = guard.recovered() {
            eprintln!("{m}");
        }
        eprintln!("thplab study sat: {} live, {runs} runs", c.label);
        let t = with_tunable(c.tunable, || timed_runs(argv, runs, true));
        guard.restore()?;
        let (mid, lo, hi) = t?;
        out[i] = Live { median_s: mid as f64 / 1e9, min_s: lo as f64 / 1e9, max_s: hi as f64 / 1e9 };
    }
    Ok(out)
}
