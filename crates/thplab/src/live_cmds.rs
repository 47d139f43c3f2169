//! The live-kernel commands: the arguments of `thplab observe`, `khugepaged`, `agent`,
//! `calibrate` and `__hold`, each with a call to the crate that does the work (`probe::command`,
//! `agent::command`, `calibrate::command`, `live::command`). The live runs the model↔live loop
//! steers and the host settling around them are `experiment::host`.
//!
//! Every thplab command should start with [`recover_before_command`]: a live run killed with
//! SIGKILL (or a power cut) leaves THP knobs changed and a journal in `$THPLAB_STATE_DIR`
//! (default `/run/thplab`); this puts them back and says so on stderr.

use anyhow::Result;
use clap::Args;

/// Restore knobs left changed by a live run that did not finish (`live::command`).
pub fn recover_before_command() {
    live::command::recover_before_command()
}

/// `thplab __exec`: the child side of a live run (`live::command::exec_child`).
pub fn cmd_exec_child() -> ! {
    live::command::exec_child()
}

/// `thplab __hold PATH=VALUE...` (`live::command::hold`).
pub fn cmd_hold(assignments: &[String]) -> ! {
    live::command::hold(assignments)
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
    /// Print the table at its full width (a column per folio size, whole names); by default it
    /// fits 100 columns.
    #[arg(long)]
    pub wide: bool,
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
        probe::command::observe(self.pid, self.json, self.wide, self.interval, self.budget)
    }
}

/// Arguments of the hidden `thplab __hold`.
#[derive(Args, Clone, Debug)]
pub struct HoldArgs {
    /// Knobs to set, as PATH=VALUE.
    pub assignments: Vec<String>,
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
    /// Only these processes (repeatable; each a user process, not a kernel thread or a
    /// zombie); by default every process khugepaged scans.
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
        probe::command::khugepaged(self.interval, self.follow, &self.pid, self.json)
    }
}

/// Arguments of `thplab agent`.
#[derive(Args, Clone, Debug)]
pub struct AgentArgs {
    /// A process the agent may touch (repeatable). The allowlist is --pid and --name together;
    /// nothing else is touched.
    #[arg(long)]
    pub pid: Vec<i32>,
    /// A command name (as /proc/PID/comm shows it, at most 15 bytes) whose processes the agent
    /// may touch (repeatable).
    #[arg(long)]
    pub name: Vec<String>,
    /// Print every range it would collapse, best first, and why (one pass, within --max-collapses
    /// and --memory; --rate and --cpu pace a real run only), and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Collapses per second at most (sustained; at most one second's worth saved up).
    #[arg(long, value_name = "N", default_value_t = 1.0)]
    pub rate: f64,
    /// Collapses in all, then stop.
    #[arg(long, value_name = "N")]
    pub max_collapses: Option<u64>,
    /// CPU time the agent may use, in percent of one CPU over its run (the collapses' copy and
    /// allocation run in the agent's context and count here).
    #[arg(long, value_name = "PERCENT", default_value_t = 5.0)]
    pub cpu: f64,
    /// Memory the collapses may add in all (pages of a range that were not present are filled):
    /// a size such as 64M.
    #[arg(long, value_name = "SIZE", default_value = "64M", value_parser = size)]
    pub memory: u64,
    /// A collapse that takes longer than this stalls its target (the mmap lock is held while
    /// it copies): the target is left alone for a while (1 s, doubling up to 64 s), as after a
    /// failed collapse.
    #[arg(long, value_name = "MS", default_value_t = 50)]
    pub max_stall_ms: u64,
    /// A 2 MiB range needs at least this many present pages (of 512) to be collapsed.
    #[arg(long, value_name = "PAGES", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=512))]
    pub min_present: u64,
    /// Milliseconds between passes over the targets.
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = interval_ms)]
    pub interval: u64,
    /// Stop after this many seconds (default: until Ctrl-C or until --max-collapses).
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
    pub duration: Option<f64>,
    /// Print every action and the summary as JSON lines (schema `thplab-agent/1`).
    #[arg(long)]
    pub json: bool,
}

/// A size such as 64M, 1G or 0.
fn size(s: &str) -> Result<u64, String> {
    mm_types::parse_size(s).ok_or_else(|| format!("'{s}' is not a size; give bytes with an optional K, M, G or T suffix, such as 64M"))
}

impl AgentArgs {
    /// Exit codes: 0 after the run; 2 with no allowlist; 5 without root.
    pub fn run(&self) -> Result<i32> {
        agent::command::run(&agent::command::Options {
            pids: self.pid.clone(),
            names: self.name.clone(),
            dry_run: self.dry_run,
            rate: self.rate,
            max_collapses: self.max_collapses,
            cpu_percent: self.cpu,
            memory_bytes: self.memory,
            max_stall_ms: self.max_stall_ms,
            min_present: self.min_present,
            interval_ms: self.interval,
            duration_s: self.duration,
            json: self.json,
        })
    }
}

/// Arguments of `thplab calibrate`.
#[derive(Args, Clone, Debug)]
pub struct CalibrateArgs {
    /// MiB written per run of each microbenchmark.
    #[arg(long, value_name = "MIB", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(16..=65536))]
    pub mib: u64,
    /// Runs of each microbenchmark (the spread is printed; the profile takes the median).
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    /// Also time a dependent pointer chase over MIB MiB with 4 KiB pages and with PMD THP
    /// (`bench chase`) for the `[tlb]` section: the CPU preset (from /proc/cpuinfo), native or
    /// nested paging (the hypervisor flag) and, in a guest, the host page size whose model chase
    /// ratio is nearest the live one; 0 leaves the section out.
    #[arg(long, value_name = "MIB", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(0..=16384))]
    pub chase_mib: u64,
    /// Write the machine profile (TOML: `[machine]`, `[fault]`, `[tlb]` and, on a VM that
    /// reports free pages to its host, `[host]`) to FILE, for `sim --profile`.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
    /// Print JSON (the figures and the profile section) instead of the table.
    #[arg(long)]
    pub json: bool,
}

impl CalibrateArgs {
    /// Exit codes: 0 after measuring; 5 where live runs are not available.
    pub fn run(&self) -> Result<i32> {
        calibrate::command::run(self.mib, self.repeat, self.chase_mib, self.output.as_deref(), self.json)
    }
}

