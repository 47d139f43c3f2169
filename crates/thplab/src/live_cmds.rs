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
    #[arg(long, value_name = "MS", value_parser = probe::command::interval_ms)]
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
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0, value_parser = probe::command::seconds)]
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

impl KhugepagedArgs {
    /// Exit codes: 0 after a report; 5 when tracing cannot run here (not root, no tracefs or no
    /// huge_memory tracepoints).
    pub fn run(&self) -> Result<i32> {
        probe::command::khugepaged(self.interval, self.follow, &self.pid, self.json)
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
    /// Also measure `[fault.pressure]`'s swap-out and swap-in per page through zram, in a
    /// memcg of its own (needs a memory cgroup and a free /dev/zram0).
    #[arg(long)]
    pub pressure: bool,
}

impl CalibrateArgs {
    /// Exit codes: 0 after measuring; 5 where live runs are not available.
    pub fn run(&self) -> Result<i32> {
        calibrate::command::run(self.mib, self.repeat, self.chase_mib, self.output.as_deref(), self.json, self.pressure)
    }
}

