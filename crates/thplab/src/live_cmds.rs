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
    /// The process to look at.
    #[arg(long)]
    pub pid: i32,
    /// Print JSON (one document per sample) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Print again every MS milliseconds until Ctrl-C or until the process exits.
    #[arg(long, value_name = "MS")]
    pub interval: Option<u64>,
}

impl ObserveArgs {
    pub fn run(&self) -> Result<i32> {
        cmd_observe(self.pid, self.json, self.interval)
    }
}

/// Arguments of the hidden `thplab __hold`.
#[derive(Args, Clone, Debug)]
pub struct HoldArgs {
    /// Knobs to set, as PATH=VALUE.
    pub assignments: Vec<String>,
}

/// `thplab observe --pid PID [--json] [--interval MS]`: the folio census of every VMA of a
/// process. Returns the exit code: 0, or 1 when the process does not exist at the start.
pub fn cmd_observe(pid: i32, json: bool, interval_ms: Option<u64>) -> Result<i32> {
    let mut first = true;
    loop {
        match live::observe(pid) {
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
                eprintln!("thplab observe: there is no process {pid}");
                return Ok(1);
            }
            Err(e) => return Err(e).with_context(|| format!("observing process {pid}")),
        }
        first = false;
        let Some(ms) = interval_ms else { return Ok(0) };
        std::thread::sleep(Duration::from_millis(ms.max(1)));
    }
}
