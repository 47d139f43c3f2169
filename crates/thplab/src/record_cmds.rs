//! `thplab record` and `thplab trace show|stats`: their arguments and a call each; the commands
//! are `record::command` (the recorder is the `record` crate, the format the `trace` crate,
//! docs/trace-format.md).
//!
//! Exit codes of `thplab record`: the program's own status (its exit code, or 128 + the signal
//! that killed it); 5 when recording is not available here (no perf_event_open, no tracepoints);
//! 126 when the program cannot be executed, 127 when it is not found (as a shell).

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};

/// Arguments of `thplab record`.
#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Write the recording to FILE (the trace format of docs/trace-format.md).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Ring buffer per CPU in KiB, from 64 to 4194304 (4 GiB), rounded down to a power of two
    /// pages. Larger buffers make lost events less likely for programs that fault very fast;
    /// the buffers are locked memory, one per online CPU.
    #[arg(long, value_name = "KIB", default_value_t = 32 * 1024, value_parser = buffer_kib)]
    pub buffer_kib: usize,
    /// Do not record the faults the kernel takes on the program's memory (in read(), execve,
    /// ...); only faults taken in user mode.
    #[arg(long)]
    pub no_kernel_faults: bool,
    /// Do not trace the program (ptrace) to read its address space inside every execve of every process it starts.
    #[arg(long)]
    pub no_exec_snapshot: bool,
    /// Do not stop open/openat/creat/unlink/unlinkat at their entry to resolve the file they name
    /// (a seccomp user-notification filter; without it, writes to tmpfs files and /dev/shm
    /// cannot be predicted).
    #[arg(long)]
    pub no_paths: bool,
    /// Do not print the summary on stderr (lost events are always reported).
    #[arg(short, long)]
    pub quiet: bool,
    /// After recording, run the program N more times without the recorder (THP disabled, no
    /// randomisation, stdin/stdout/stderr on /dev/null) and keep the median wall time in the
    /// recording: `thplab sim --profile` then predicts the program's wall time under any
    /// setting (its own time plus the modelled work). For programs that can run twice. On a VM
    /// that reports free pages, each run waits until reporting has taken every free block.
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub timed: u32,
    /// After recording, run the program once more under an instrumentation engine (stdin,
    /// stdout and stderr on /dev/null) and write its data accesses, mapped onto the recorded
    /// run's addresses and compressed into runs per 4 KiB page, to FILE.accesses
    /// (docs/trace-format.md, "Accesses"): `thplab sim FILE --cpu PRESET` then drives the TLB
    /// model with them. ENGINE: qemu (QEMU user-mode, qemu-x86_64, with thplab's TCG plugin:
    /// 10-100 times slower than native), lackey (valgrind's lackey tool: 50-4000 times
    /// slower), auto (the default: qemu when qemu-x86_64 is installed, else lackey). The
    /// program runs twice more (once untraced, unless --timed, for the time the instrumented
    /// run is compared with): for programs that can run again.
    #[arg(long, value_name = "ENGINE", num_args = 0..=1, require_equals = true, default_missing_value = "auto", value_parser = |s: &str| s.parse::<record::accesses::Engine>())]
    pub accesses: Option<record::accesses::Engine>,
    /// The program and its arguments, after `--`. It runs with THP disabled for it alone
    /// (PR_SET_THP_DISABLE) and without address-space randomisation (ADDR_NO_RANDOMIZE).
    #[arg(value_name = "CMD", required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<OsString>,
    /// `--memory-max`, `--swap`: record the program in a memory cgroup with that limit and that
    /// swap. thplab joins the memcg before the recorder forks the program (so the recorder's own
    /// allocations after that count too) and leaves it before the guard removes it.
    #[command(flatten)]
    pub pressure: crate::pressure_args::PressureArgs,
}

/// `--buffer-kib`: 64 KiB (16 pages, the recorder's floor) to 4 GiB per CPU.
fn buffer_kib(s: &str) -> Result<usize, String> {
    let v: usize = s.parse().map_err(|_| format!("'{s}' is not a number of KiB; give 64 to 4194304 (the default is 32768)"))?;
    if !(64..=4 << 20).contains(&v) {
        return Err(format!("{v} KiB is outside 64 to 4194304 (64 KiB to 4 GiB per CPU; the default is 32768)"));
    }
    Ok(v)
}

/// Arguments of `thplab trace`.
#[derive(Args, Debug)]
pub struct TraceArgs {
    #[command(subcommand)]
    pub cmd: TraceCmd,
}

/// The `thplab trace` subcommands.
#[derive(Subcommand, Debug)]
pub enum TraceCmd {
    /// Print a recording as text, one line per event.
    Show(TraceShowArgs),
    /// Summarise a recording: records per kind, faults, processes and threads, lost events.
    Stats(TraceStatsArgs),
}

/// Arguments of `thplab trace show`.
#[derive(Args, Debug)]
pub struct TraceShowArgs {
    /// A file written by `thplab record` (`-`: standard input).
    pub file: PathBuf,
    /// Print at most N events.
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
    /// Only events of this process.
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// Leave out page faults (system calls, tasks and mappings only).
    #[arg(long)]
    pub no_faults: bool,
}

/// Arguments of `thplab trace stats`.
#[derive(Args, Debug)]
pub struct TraceStatsArgs {
    /// A file written by `thplab record` (`-`: standard input).
    pub file: PathBuf,
    /// Print one JSON object (schema `thplab-trace-stats/1`, docs/results-schema.md).
    #[arg(long)]
    pub json: bool,
}

/// `thplab record -o FILE -- CMD [ARGS...]`, under `--memory-max`/`--swap` when given.
pub fn cmd_record(args: RecordArgs) -> Result<u8> {
    let pressure = args.pressure.resolve()?;
    if pressure.is_none() {
        return record_plain(args);
    }
    let guard = live::SettingsGuard::pressure_only(&pressure)?;
    if let Some(m) = guard.recovered() {
        eprintln!("{m}");
    }
    let memcg = guard.memcg().expect("a pressure guard has a memcg");
    let back = memcg.join_self()?;
    let out = record_plain(args);
    memcg.leave_to(&back)?;
    guard.restore()?;
    out
}

fn record_plain(args: RecordArgs) -> Result<u8> {
    let o = record::command::RecordCommand {
        output: args.output,
        buffer_kib: args.buffer_kib,
        no_kernel_faults: args.no_kernel_faults,
        no_exec_snapshot: args.no_exec_snapshot,
        no_paths: args.no_paths,
        quiet: args.quiet,
        timed: args.timed,
        accesses: args.accesses.is_some(),
        engine: args.accesses.unwrap_or(record::accesses::Engine::Auto),
        command: args.command,
    };
    let time_untraced = |argv: &[OsString], runs: u32, progress: bool| Ok(experiment::host::time_untraced(argv, runs, false, progress)?.0);
    Ok(match record::command::record(&o, &time_untraced)? {
        record::command::Outcome::Exited(code) => code,
        record::command::Outcome::Unavailable => crate::exit::LIVE_UNAVAILABLE,
    })
}

/// `thplab trace show|stats`.
pub fn cmd_trace(args: TraceArgs) -> Result<u8> {
    match args.cmd {
        TraceCmd::Show(a) => cmd_trace_show(a),
        TraceCmd::Stats(a) => cmd_trace_stats(a),
    }
}

/// `thplab trace show FILE`.
pub fn cmd_trace_show(args: TraceShowArgs) -> Result<u8> {
    let name = crate::input::display(&args.file);
    let r = crate::input::open_trace(&args.file)?;
    record::command::trace_show(r, &name, args.limit, args.pid, args.no_faults, crate::input::damaged)?;
    Ok(crate::exit::OK)
}

/// `thplab trace stats FILE`.
pub fn cmd_trace_stats(args: TraceStatsArgs) -> Result<u8> {
    let name = crate::input::display(&args.file);
    let r = crate::input::open_trace(&args.file)?;
    record::command::trace_stats(r, &name, args.json, crate::input::damaged)?;
    Ok(crate::exit::OK)
}
