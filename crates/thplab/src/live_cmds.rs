//! The live-kernel commands, as entry points that take already-parsed arguments: `thplab live`
//! (through [`run_live`]), `thplab observe`, and the hidden `__exec` / `__hold` subcommands.
//! All the work is in the `live` crate; this file only adapts it to the CLI.
//!
//! Every thplab command should start with [`recover_before_command`]: a live run killed with
//! SIGKILL (or a power cut) leaves THP knobs changed and a journal in `$THPLAB_STATE_DIR`
//! (default `/run/thplab`); this puts them back and says so on stderr.

use std::io::{Read, Write};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use uapi::result::RegionPlacement;
use uapi::{RunResult, ThpSettings};
use workload::Workload;

/// Restore knobs left changed by a live run that did not finish; print what was done on
/// stderr. Quiet when there is nothing to do or the live harness is not available here (not
/// root, no sysfs tree); a failure is printed as a warning and does not stop the command.
pub fn recover_before_command() {
    match live::recover_if_needed() {
        Ok(Some(msg)) => eprintln!("{msg}"),
        Ok(None) | Err(live::LiveError::NotAvailable(_)) => {}
        Err(e) => eprintln!("thplab: warning: {e}"),
    }
}

/// Run `workload` on the live kernel under `settings` (applied through the settings guard and
/// restored afterwards), `repeat` times. `model_regions` are the addresses the model chose
/// (`RunResult.regions` of `sim::run`); regions missing there are placed by the harness and
/// the result's `live.placement` says so. `progress` prints one line per run on stderr.
pub fn run_live(
    workload: &Workload,
    settings: &ThpSettings,
    model_regions: &[RegionPlacement],
    repeat: u32,
    progress: bool,
) -> Result<RunResult> {
    let opts = live::ExecOptions { repeat: repeat.max(1), progress, ..Default::default() };
    Ok(live::run_live(workload, settings, model_regions, &opts)?)
}

/// `thplab __exec`: the child side of a live run. Reads its spec (JSON) from stdin.
pub fn cmd_exec_child() -> ! {
    let mut spec = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut spec) {
        eprintln!("thplab __exec: cannot read the spec from stdin: {e}");
        std::process::exit(2);
    }
    live::exec_child_main(&spec)
}

/// `thplab __hold PATH=VALUE...`: apply the settings through the guard, print `held N` and
/// sleep until killed (for tests of the recovery path).
pub fn cmd_hold(assignments: &[String]) -> ! {
    live::guard::hold_main(assignments)
}

/// Arguments of `thplab observe`.
#[derive(Args, Clone, Debug)]
pub struct ObserveArgs {
    /// The process to look at (a user process: not a kernel thread, not a zombie).
    #[arg(long)]
    pub pid: i32,
    /// Print JSON (one line per sample, schema `thplab-observe/1`, docs/results-schema.md)
    /// instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Print again every MS milliseconds (at least 1) until Ctrl-C or until the process exits.
    #[arg(long, value_name = "MS", value_parser = interval_ms)]
    pub interval: Option<u64>,
    /// Also measure bloat: sample the pages of large folios (through /proc/PID/mem) for
    /// zero-filled ones within MS milliseconds, and report the zero-filled memory (with its
    /// 95 % error), the RSS with 4 KiB pages, page-table memory (VmPTE) and partially mapped
    /// folios, per VMA and in total.
    #[arg(long, value_name = "MS")]
    pub budget: Option<u64>,
}

/// `--interval`: a positive number of milliseconds.
fn interval_ms(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("0 ms would sample without pause; give at least 1 (ms), such as 1000".into()),
        Ok(v) => Ok(v),
        Err(_) => Err(format!("'{s}' is not a number of milliseconds; give at least 1, such as 1000")),
    }
}

impl ObserveArgs {
    pub fn run(&self) -> Result<i32> {
        cmd_observe(self.pid, self.json, self.interval, self.budget)
    }
}

/// Arguments of the hidden `thplab __hold`.
#[derive(Args, Clone, Debug)]
pub struct HoldArgs {
    /// Knobs to set, as PATH=VALUE.
    pub assignments: Vec<String>,
}

/// `thplab observe --pid PID [--json] [--interval MS]`: the folio census of every VMA of a
/// process. Exit codes (README.md): 0 when it was observed (also when it exits between two
/// samples: "process N exited"); 2 when the pid names no process with a user address space (no
/// such process, a zombie, a kernel thread); 5 when this user may not read its pagemap.
pub fn cmd_observe(pid: i32, json: bool, interval_ms: Option<u64>, budget_ms: Option<u64>) -> Result<i32> {
    match live::observable(pid) {
        live::Observable::Yes => {}
        live::Observable::Missing => anyhow::bail!("observe --pid {pid}: there is no process {pid}"),
        live::Observable::Zombie(comm) => anyhow::bail!(
            "observe --pid {pid}: process {pid} ({comm}) is a zombie: it has exited and its parent has not reaped it, so it has no memory to observe"
        ),
        live::Observable::KernelThread(comm) => {
            anyhow::bail!("observe --pid {pid}: process {pid} ({comm}) is a kernel thread: it has no user address space to observe")
        }
    }
    let mut first = true;
    loop {
        match live::observe::observe_with(pid, budget_ms.map(Duration::from_millis)) {
            Ok(report) => {
                let text = if json {
                    format!("{}\n", serde_json::to_string(&report).context("cannot print JSON")?)
                } else if first {
                    report.to_string()
                } else {
                    format!("\n{report}")
                };
                let mut out = std::io::stdout().lock();
                match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
                    Ok(()) => {}
                    // `thplab observe ... | head`: the reader is gone, so are we.
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(0),
                    Err(e) => return Err(e).context("cannot write to stdout"),
                }
            }
            Err(live::LiveError::NoSuchProcess { pid }) if !first => {
                eprintln!("thplab observe: process {pid} exited");
                return Ok(0);
            }
            Err(live::LiveError::NoSuchProcess { pid }) => {
                anyhow::bail!("observe --pid {pid}: process {pid} exited before it could be observed");
            }
            Err(e) => return Err(e).with_context(|| format!("observing process {pid}")),
        }
        first = false;
        let Some(ms) = interval_ms else { return Ok(0) };
        std::thread::sleep(Duration::from_millis(ms.max(1)));
        // A process that became a zombie between samples has no mm left: it exited.
        if matches!(live::observable(pid), live::Observable::Missing | live::Observable::Zombie(_)) {
            eprintln!("thplab observe: process {pid} exited");
            return Ok(0);
        }
    }
}

/// Arguments of `thplab khugepaged`.
#[derive(Args, Clone, Debug)]
pub struct KhugepagedArgs {
    /// Trace for this many seconds (a decimal number), then print what khugepaged did.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0, value_parser = seconds)]
    pub interval: f64,
    /// Print a report every interval until Ctrl-C (each report covers its own interval).
    #[arg(long)]
    pub follow: bool,
    /// Only these processes (repeatable); by default every process khugepaged scans.
    #[arg(long)]
    pub pid: Vec<i32>,
    /// Print JSON (one object per interval, schema `thplab-khugepaged/1`, docs/results-schema.md).
    #[arg(long)]
    pub json: bool,
}

/// `--interval`: a positive number of seconds.
fn seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() && v <= 86400.0 => Ok(v),
        _ => Err(format!("'{s}' is not a number of seconds between 0 and 86400 (exclusive of 0), such as 10 or 0.5")),
    }
}

impl KhugepagedArgs {
    /// Exit codes: 0 after a report; 5 when tracing cannot run here (not root, no tracefs or no
    /// huge_memory tracepoints).
    pub fn run(&self) -> Result<i32> {
        if !live::sysfs::is_root() {
            return Err(live::LiveError::NotAvailable("thplab khugepaged reads tracepoints and needs root".into()).into());
        }
        let tracefs = live::khugepaged::tracefs_dir()?;
        let mut tracer = live::khugepaged::Tracer::start(&tracefs)?;
        live::khugepaged::stop_on_signals();
        let pids = (!self.pid.is_empty()).then_some(self.pid.as_slice());
        if !self.json {
            eprintln!("thplab khugepaged: tracing khugepaged for {} s{} (Ctrl-C ends it early)", self.interval, if self.follow { " per report" } else { "" });
        }
        loop {
            let mut r = live::khugepaged::trace_interval(&mut tracer, Duration::from_secs_f64(self.interval), pids);
            let text = if self.json {
                let mut v = serde_json::to_value(&r)?;
                v.as_object_mut().expect("an object").insert("schema".into(), "thplab-khugepaged/1".into());
                format!("{}\n", serde_json::to_string(&v)?)
            } else {
                r.processes.truncate(50);
                format!("{r}\n")
            };
            let mut out = std::io::stdout().lock();
            match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(0),
                Err(e) => return Err(e).context("cannot write to stdout"),
            }
            if !self.follow || live::khugepaged::stop_requested() {
                return Ok(0);
            }
        }
    }
}
