//! `thplab`: the Linux 6.18 THP subsystem, modelled and measured.
//!
//! This binary is a thin layer: the argument schema (clap) and the dispatch to the crates that
//! do the work: `experiment` (sim, demo, compare: the model↔live loop, once per command), the
//! tools' `command` modules, `report` (printing). Every table and JSON document it prints comes
//! from a `uapi::RunResult`.
//!
//! Module map:
//! - [`resolve`]: the settings and machine flags (resolved by `experiment::resolve`).
//! - [`checks`]: what clap cannot check alone (`-` named twice, the smallest `--mem`).
//! - [`errors`]: errors as JSON under `--json` (schema `thplab-error/1`).
//! - [`exit`]: the exit codes README.md documents.
//! - [`live_cmds`]: the arguments of `observe`, `khugepaged`, `calibrate`, `__hold` (`agent`'s
//!   are `agent::command::Options`, `bench io`'s `bench_io::command::IoOptions`).
//! - [`record_cmds`]: the arguments of `record` and `trace show|stats`.
//! - [`bench_cmds`]: `bench io` and `bench chase` dispatched.
//! - [`chase_cmds`]: the arguments of `bench chase`.
//! - [`explain_cmds`]: the arguments of `explain`.
//! - [`exporter_cmds`]: the arguments of `exporter`.
//! - [`sweep_cmds`]: the arguments of `sweep`.
//! - `advise`'s arguments are `advise::command::Options` (docs/advise.md).
//! - [`pressure_args`]: `--memory-max` and `--swap` of `record`.

mod bench_cmds;
mod chase_cmds;
mod errors;
mod explain_cmds;
mod exporter_cmds;
mod live_cmds;
mod checks;
mod resolve;
mod record_cmds;
mod pressure_args;
mod sweep_cmds;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use report::print;
use thp_abi::ThpSettings;
use experiment::simulate::{print_result, SimInput};

use experiment::{examples, input};
pub use input::{load_workload, read_text_limited, MAX_SETTINGS_BYTES};
use experiment::resolve::{load_profile, matrix, scatter_arg, workload_and_matrix, ProfileFlags};
pub use resolve::{MachineArgs, SettingsArgs};

/// Exit codes (documented in README.md).
pub mod exit {
    pub const OK: u8 = 0;
    /// Bad input: a workload, settings file or flag that does not parse.
    pub const USAGE: u8 = 2;
    /// The workload would be killed (SIGSEGV, OOM) or broke a model invariant.
    pub const SIM_FAILED: u8 = 3;
    /// `compare`: model and live kernel differ beyond the tolerance.
    pub const DIFFERS: u8 = 4;
    /// A live command cannot run here (not root, no THP sysfs tree).
    pub const LIVE_UNAVAILABLE: u8 = 5;
}

#[derive(Parser)]
#[command(name = "thplab", version, about = "A laboratory for the Linux 6.18 THP/mTHP subsystem: a faithful model, checked against the live kernel.")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a workload in the model and print the kernel's counters, the folio census and why
    /// faults fell back.
    Sim(SimArgs),
    /// Print the resolved settings, one sysfs PATH=VALUE per line (readable back with --settings).
    Settings(SettingsOnly),
    /// Run the seed experiment (1 GiB written page by page) under 4 KiB only, 64 KiB mTHP and
    /// PMD THP, side by side.
    Demo(DemoArgs),
    /// List the built-in example workloads, one line each, or print one.
    Examples {
        /// Print this example's text.
        name: Option<String>,
    },
    /// Run a workload on the live kernel under the given settings (applied to
    /// /sys/kernel/mm/transparent_hugepage and restored afterwards; needs root). Prints the same
    /// schema as `sim`, plus a "live" section.
    Live(LiveArgs),
    /// Run a workload in the model and on the live kernel and print both side by side; exits 4
    /// when a counter differs beyond the tolerance.
    Compare(CompareArgs),
    /// The folio census of a running process: which folio sizes each VMA maps, PMD- or
    /// PTE-mapped, fully or partially (a fast tools/mm/thpmaps).
    Observe(live_cmds::ObserveArgs),
    /// Why a process has the folio sizes it has: per VMA, the orders Linux 6.18 allows at fault
    /// time and at khugepaged time, the reason for each refused order (the model's own
    /// thp_vma_allowable_orders / shmem_allowable_huge_orders on the live knobs, boot
    /// parameters, prctl, VMA flags, size and alignment, tmpfs huge=), beside the census.
    Explain(explain_cmds::ExplainArgs),
    /// What khugepaged does on this machine, live, from its tracepoints: per process, the PMD
    /// and file ranges scanned, the collapses, each scan and collapse result by its
    /// `enum scan_result` name, and the CPU time the daemon spent (needs root).
    Khugepaged(live_cmds::KhugepagedArgs),
    /// A collapse agent: turns the hottest eligible 2 MiB ranges of allowed processes into PMD
    /// THPs with process_madvise(MADV_COLLAPSE), within explicit budgets (collapses per second
    /// and in all, CPU time, memory added), backing off a target when collapses fail or stall
    /// it; `--dry-run` prints what it would do and why. Logs every action (needs root).
    Agent(agent::command::Options),
    /// Measure this machine's fault costs per folio size (and touch, zero-page read and system
    /// call costs, and on a VM that reports free pages to its host, a host fault and the free
    /// lists) with microbenchmarks on the live kernel, print each with its spread, and write
    /// them as a machine profile for `sim --profile` (needs root: it sets knobs through the
    /// settings guard and restores them).
    Calibrate(live_cmds::CalibrateArgs),
    /// Serve THP metrics to Prometheus: the per-size mTHP stats (size="64kB"), the thp_*
    /// counters of /proc/vmstat, khugepaged's counters, the knobs as info metrics, and the
    /// census, Rss and bloat of the processes selected by --name, --cgroup and --pid, each
    /// scrape within --budget. Reads only: changes no knob (docs/exporter.md lists the series).
    Exporter(exporter_cmds::ExporterArgs),
    /// Run a program with THP disabled for it alone and record its memory system calls, page
    /// faults, threads and child processes into a trace file (docs/trace-format.md).
    Record(record_cmds::RecordArgs),
    /// Read a recording: `show` prints it as text, `stats` summarises it.
    Trace(record_cmds::TraceArgs),
    /// Write one self-contained HTML file (inline SVG, no script) with the plots of a result:
    /// the JSON of `sim`, `sim --matrix` or `compare`; or of a study (STUDY.parquet: time and
    /// memory against an axis, Pareto fronts).
    Report(ReportArgs),
    /// Benchmarks of the live kernel: `io` reads with O_DIRECT into 4 KiB, mTHP, PMD THP and
    /// hugetlbfs buffers and times pinning them (docs/bench-io.md); `chase`, a dependent
    /// pointer chase with 4 KiB, mTHP and PMD pages against the TLB model's prediction.
    Bench(bench_cmds::BenchArgs),
    /// Run a study in the model on every core: the cartesian product (or listed points) of
    /// workloads, recordings, settings, CPU presets and machine options, one row per point in
    /// a Parquet file; resumable after Ctrl-C or SIGKILL (docs/sweeps.md).
    Sweep(sweep_cmds::SweepArgs),
    /// What to set for one program: record it once (or take a recording or workload), predict
    /// every point of a search space of THP settings and per-process choices in the model,
    /// print the Pareto front of time against memory and the recommended choice written out
    /// (sysfs, kernel command line, tmpfiles.d, systemd unit, per program); `--verify N` runs
    /// the top N live (docs/advise.md).
    Advise(advise::command::Options),
    /// Built-in studies that record a real program, predict it and run it live (`sat`: SAT
    /// solvers under 4 KiB pages, PMD THP and glibc.malloc.hugetlb=1; docs/sat-study.md).
    Study(sat_study::command::StudyArgs),
    #[command(name = "__exec", hide = true)]
    Exec,
    #[command(name = "__hold", hide = true)]
    Hold(live_cmds::HoldArgs),
}

#[derive(Args)]
struct LiveArgs {
    /// A workload file or built-in example name.
    workload: String,
    #[command(flatten)]
    settings: SettingsArgs,
    #[command(flatten)]
    machine: MachineArgs,
    /// Run N times (at least 1); counters are reported as the median, with the spread in "live".
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Sample the run every MS ms while it runs (the result's `timeline`: Rss, AnonHugePages
    /// and ShmemPmdMapped of its regions, their folio census, khugepaged's counters), and
    /// print progress once a second.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    sample: Option<u64>,
    /// Time each fault of the workload's touch statements (the result's
    /// `live.fault_latency`: count, p50, p99, max).
    #[arg(long)]
    latency: bool,
}

#[derive(Args)]
struct CompareArgs {
    /// A workload file or built-in example name (not with --record).
    #[arg(required_unless_present_any = ["record", "matrix"])]
    workload: Option<String>,
    /// Record the program given after `--` once (THP disabled for it alone), then predict it
    /// from the recording and run it live under each setting.
    #[arg(long, conflicts_with = "workload")]
    record: bool,
    /// With --record: keep the recording in FILE.
    #[arg(long, value_name = "FILE", requires = "record")]
    keep: Option<PathBuf>,
    /// With --record: the program's stdin/stdout/stderr go to /dev/null in the live runs.
    #[arg(long, requires = "record")]
    program_quiet: bool,
    /// With --record: also record the program's memory accesses (a second run under QEMU with
    /// thplab's plugin, else valgrind lackey, as `record --accesses`) and drive the TLB model of --cpu and --paging with them
    /// in every setting; with --profile their time is part of the model's, and the time ratios
    /// between settings are set beside the live ones.
    #[arg(long, requires = "record")]
    accesses: bool,
    /// The CPU whose TLBs a workload's `access` statements, and with --accesses the program's
    /// accesses, go through: zen4, zen1, golden-cove, neoverse-n1, cortex-a57, cortex-a53.
    /// Default: the `--profile`'s `[tlb]` (`thplab calibrate`), else zen4.
    #[arg(long, value_name = "PRESET", value_parser = tlb::presets::names())]
    cpu: Option<String>,
    /// Native paging, or a virtual machine whose host backs guest memory with 4 KiB, 2 MiB or
    /// 1 GiB pages (`thplab calibrate` finds which). Default: the `--profile`'s `[tlb]`, else
    /// native.
    #[arg(long, value_name = "MODE", value_parser = ["native", "nested-4k", "nested-2m", "nested-1g"])]
    paging: Option<String>,
    /// With --record: the program and its arguments.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
    #[command(flatten)]
    settings: SettingsArgs,
    #[command(flatten)]
    machine: MachineArgs,
    /// Instead of the given settings, run a standard matrix. `anon` (the default): 4 KiB only,
    /// each mTHP size alone, all sizes, PMD always, and madvise mode. `shmem`: 4 KiB only,
    /// 64 KiB always, top-level always with PMD inherit, and several sizes always. A subset:
    /// KIND:NAME,... with each setting's short name (anon: 4K, 16K, 32K, 64K, 128K, 256K, 512K,
    /// 1024K, all, PMD, madvise; shmem: 4K, 64K, top, 16K+64K+256K), such as `anon:4K,64K,PMD`.
    #[arg(long, value_name = "KIND[:NAME,...]", num_args = 0..=1, default_missing_value = "anon")]
    matrix: Option<String>,
    #[arg(long, value_name = "FIELD=N|FIELD=P%", help = experiment::Tolerance::help())]
    tolerance: Vec<String>,
    /// Live runs per setting (median reported; with --record, minflt is judged against the
    /// runs' own spread). Default 1; a workload with --profile: 3, whose range is the live
    /// time's ± and says whether a difference in time is outside the noise (with --record the
    /// time comes from 3 untraced runs whatever this says)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    repeat: Option<u32>,
    /// When only system-wide counters differ (other processes allocated under the same global
    /// knobs), or khugepaged collapsed pages during a run that differs, run that setting live
    /// again up to N times and keep the closest run.
    #[arg(long, default_value_t = 2, value_name = "N")]
    retries: u32,
    /// A machine profile (as `thplab calibrate -o FILE` writes it) or `builtin`: the model
    /// prices every step with its `[fault]` costs (khugepaged then wakes on that clock) and a
    /// `time (us)` row sets the model's time beside the live run's wall time (not judged unless
    /// `--tolerance time=P%`).
    #[arg(long, value_name = "FILE|builtin")]
    profile: Option<String>,
    /// Print JSON: one object per setting with both results and the rows.
    #[arg(long)]
    json: bool,
    /// Sample model and live run every MS ms and print the two timelines side by side,
    /// marking where they part and when each khugepaged collapse happened in each (a
    /// difference of more than one `scan_sleep_millisecs` plus one interval counts as a
    /// difference).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=3_600_000), conflicts_with = "record")]
    sample: Option<u64>,
    /// Fault latency, model and live side by side (p50, p99, max): the live run times each
    /// fault of its touches; the model prices each fault with --profile.
    #[arg(long, conflicts_with = "record")]
    latency: bool,
    /// Print only the rows whose model and live values differ (judged or not); a line says how
    /// many equal rows were left out. The exit code and --json are unchanged.
    #[arg(long)]
    only_diff: bool,
    /// Print text tables at their full width (a column per setting, per folio size, whole
    /// names); by default they fit 100 columns: settings in blocks, sizes summarised.
    #[arg(long)]
    wide: bool,
    /// Compare against a saved live result (the output of `thplab live --json` for the same
    /// workload and settings) instead of running the workload live: needs no root, runs
    /// nothing live, retries nothing (--retries and --repeat do not apply).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["record", "matrix", "sample"])]
    live_result: Option<PathBuf>,
}

#[derive(Args)]
struct SettingsOnly {
    #[command(flatten)]
    settings: SettingsArgs,
    /// Print JSON (path → value).
    #[arg(long)]
    json: bool,
    /// List every settable path with the values it accepts (with --json: an array of
    /// {"path", "values"}).
    #[arg(long)]
    list: bool,
}

#[derive(Args)]
struct SimArgs {
    /// A workload file (docs/workload-format.md), the name of a built-in example
    /// (`thplab examples` lists them), or a recording made by `thplab record`; `-` reads
    /// either from standard input.
    #[arg(required_unless_present = "matrix")]
    workload: Option<String>,
    #[command(flatten)]
    settings: SettingsArgs,
    #[command(flatten)]
    machine: MachineArgs,
    /// Print one JSON object (schema thplab-run/2, docs/results-schema.md).
    #[arg(long)]
    json: bool,
    /// A recording (not a workload): run the simulated clock on the recording's timestamps, so that khugepaged
    /// wakes and collapses as it would have during the recorded run (`model.replay.khugepaged`
    /// says what it did). This is the default; the flag is kept so that older command lines
    /// still run.
    #[arg(long, conflicts_with = "no_recorded_time")]
    recorded_time: bool,
    /// A recording: keep the simulated clock at 0, so that khugepaged never wakes during the
    /// replay (the live daemon's phase relative to a program is not known unless the
    /// program's mm is the first on its list: `thplab compare --record` states the tolerance
    /// it allows for it). No `--sample` then.
    #[arg(long)]
    no_recorded_time: bool,
    /// Check the model's invariants after every operation (for debugging the model). For a
    /// recording: what each event touched after every event, the whole model at events
    /// 1, 2, 4, 8, ..., at each exec and exit, and at the end.
    #[arg(long)]
    check: bool,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
    /// Instead of the given settings, run the standard matrix that `compare --matrix` runs
    /// (`anon`, the default, or `shmem`; a subset: KIND:NAME,..., such as `anon:4K,64K,PMD`,
    /// names as `compare --help` lists them) in the model alone (no root, no live kernel) and
    /// print the settings side by side; --set applies on top of each. With --sample, each
    /// setting's timeline is in --json and plotted by --html (not in the text table).
    #[arg(long, value_name = "KIND[:NAME,...]", num_args = 0..=1, default_missing_value = "anon", conflicts_with = "explain")]
    matrix: Option<String>,
    /// Memory against reach: run under each `[[config]]` of FILE (TOML: name, settings, policy,
    /// kernel, hugetlb = 2M|1G, page_size; a top-level cpu) and print resident memory, bloat,
    /// page tables, TLB reach, TLB misses by level and the access time side by side
    /// (docs/contig-hint.md). --set applies under each
    #[arg(long, value_name = "FILE", conflicts_with_all = ["matrix", "explain", "html", "sample"])]
    configs: Option<PathBuf>,
    /// For the address ADDR (its 4 KiB page) or the range START-END (hex), list every
    /// anonymous fault that touched it, the folio size it got, and why each larger enabled size
    /// was refused (the reasons the `fallbacks` totals count).
    #[arg(long, value_name = "ADDR|START-END")]
    explain: Option<String>,
    /// Also write the plots of this run as one self-contained HTML file (see `thplab report`).
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// The CPU whose TLBs `access` statements, and a recording's accesses (`record --accesses`:
    /// FILE.accesses), go through (docs/tlb-model.md): zen4, zen1, golden-cove, neoverse-n1,
    /// cortex-a57, cortex-a53. Default: the `--profile`'s `[tlb]` (`thplab calibrate`), else zen4.
    #[arg(long, value_name = "PRESET", value_parser = tlb::presets::names())]
    cpu: Option<String>,
    /// Native paging, or a virtual machine whose host backs guest memory with 4 KiB, 2 MiB or
    /// 1 GiB pages (two-dimensional walks; TLB entries of min(guest, host) size). Default: the
    /// `--profile`'s `[tlb]`, else native.
    #[arg(long, value_name = "MODE", value_parser = ["native", "nested-4k", "nested-2m", "nested-1g"])]
    paging: Option<String>,
    /// Nested paging: how scattered the guest-physical frames of base pages are for the host
    /// walks' caching, from 0 (as the model allocates them: consecutive, as on a freshly
    /// booted machine) to 1 (each in a host page-table line of its own, as on a machine whose
    /// free lists have churned); `thplab bench chase` measures it (docs/tlb-model.md). Default:
    /// the `--profile`'s `[tlb]`, else 0.
    #[arg(long, value_name = "S", value_parser = scatter_arg)]
    order0_scatter: Option<f64>,
    /// Model-only: a modelled VM host under the guest, with these host THP settings (repeatable:
    /// enabled=, khugepaged/{scan_sleep_millisecs,pages_to_scan,max_ptes_none}=, window_ms=);
    /// `--policy fhpm` makes FHPM its policy (docs/vm-host.md).
    #[arg(long, value_name = "KNOB=VALUE")]
    host: Vec<String>,
    /// For a damaged or cut recording: replay the records before the damage and say where the
    /// recording was cut, what was kept and what was lost, instead of refusing the file. A 3.x
    /// recording is cut at the start of its first damaged block (each block is checked by its
    /// CRC-32C); a 2.x one where the reader found the damage.
    #[arg(long)]
    salvage: bool,
    /// A machine profile (TOML, as `thplab calibrate -o FILE` and `thplab bench io
    /// --write-profile FILE` write it), or `builtin` (the one measured on this machine kind):
    /// with its `[fault]` section the result gets the run's time (`time`: faults by size,
    /// touches, calls); with its `[pin]` section, the pinning cost of the workload's
    /// `read_direct` reads (`io.pin_ns`).
    #[arg(long, value_name = "FILE|builtin")]
    profile: Option<String>,
    /// A workload: sample the run every MS ms of simulated time (the result's `timeline`: Rss,
    /// AnonHugePages, ShmemPmdMapped, the folio census, khugepaged's counters), as `thplab live
    /// --sample` samples the live run.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    sample: Option<u64>,
    /// With --profile: each fault's priced time, stalls in reclaim, swap-in and compaction
    /// included, as a distribution (`time.latency`: count, p50, p99, max per folio size).
    #[arg(long, requires = "profile")]
    latency: bool,
    /// Print text tables at their full width (a column per setting, per folio size, whole
    /// names); by default they fit 100 columns: settings in blocks, sizes summarised.
    #[arg(long)]
    wide: bool,
}

impl SimArgs {
    /// The workload argument (`cmd_sim` has resolved it).
    fn wl(&self) -> &str {
        self.workload.as_deref().unwrap_or("-")
    }
}

#[derive(Args)]
struct ReportArgs {
    /// The result: the output of `thplab sim --json`, `sim --matrix --json` or `compare --json`
    /// (`-` for standard input); or a study's STUDY.parquet or journal (`thplab sweep`).
    result: String,
    /// Where to write the HTML.
    #[arg(long, short, value_name = "FILE")]
    output: PathBuf,
    /// A study: the axis along x (workload, settings, cpu, paging, mem, profile; default: the first that varies).
    #[arg(long, value_name = "AXIS")]
    x: Option<String>,
    /// A study: the time column (default time.elapsed_ns, else process.minflt).
    #[arg(long, value_name = "COLUMN")]
    time: Option<String>,
    /// A study: the memory column (default process.rss_bytes).
    #[arg(long, value_name = "COLUMN")]
    memory: Option<String>,
}

#[derive(Args)]
struct DemoArgs {
    #[command(flatten)]
    machine: MachineArgs,
    /// Do not run on the live kernel even where that is possible.
    #[arg(long)]
    model_only: bool,
    /// Print the three results as one JSON array.
    #[arg(long)]
    json: bool,
    /// Print text tables at their full width (a column per setting, per folio size, whole
    /// names); by default they fit 100 columns: settings in blocks, sizes summarised.
    #[arg(long)]
    wide: bool,
    /// Live runs per setting: the live time is their median, ± their range (one run: no ±)
    #[arg(long, default_value_t = 3, value_name = "N")]
    repeat: u32,
}

fn main() -> ExitCode {
    // What thplab inherited (signals, mask, limits, descriptors), before anything changes it:
    // the programs it records or runs live start with this, not with thplab's own state.
    exec_state::ExecState::capture();
    let json = errors::json_requested(std::env::args_os());
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if json && e.use_stderr() => {
            eprint!("{e}");
            errors::print_json(&anyhow::anyhow!(checks::clap_message(&e.to_string())), exit::USAGE);
            return ExitCode::from(exit::USAGE);
        }
        Err(e) => e.exit(),
    };
    match &cli.cmd {
        Cmd::Exec => live_cmds::cmd_exec_child(),
        Cmd::Hold(a) => live_cmds::cmd_hold(&a.assignments),
        // The exporter writes nothing, not even the knobs a crashed live run left changed
        // (the next other thplab command restores them).
        Cmd::Exporter(_) => {}
        _ => live_cmds::recover_before_command(),
    }
    let result = match cli.cmd {
        Cmd::Sim(a) => cmd_sim(a),
        Cmd::Settings(a) => cmd_settings(a),
        Cmd::Demo(a) => cmd_demo(a),
        Cmd::Examples { name } => cmd_examples(name),
        Cmd::Live(a) => cmd_live(a),
        Cmd::Compare(a) => cmd_compare(a),
        Cmd::Observe(a) => a.run().map(|c| c as u8),
        Cmd::Khugepaged(a) => a.run().map(|c| c as u8),
        Cmd::Agent(a) => agent::command::run(&a).map(|c| c as u8),
        Cmd::Calibrate(a) => a.run().map(|c| c as u8),
        Cmd::Explain(a) => a.run(),
        Cmd::Exporter(a) => a.run(),
        Cmd::Record(a) => record_cmds::cmd_record(a),
        Cmd::Trace(a) => record_cmds::cmd_trace(a),
        Cmd::Report(a) => cmd_report(a),
        Cmd::Bench(a) => bench_cmds::cmd_bench(a),
        Cmd::Sweep(a) => a.run(),
        Cmd::Advise(a) => advise::command::run(&a),
        Cmd::Study(a) => sat_study::command::run(&a),
        Cmd::Exec | Cmd::Hold(_) => unreachable!("handled above"),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            // A closed pipe (thplab ... | head) is not an error. serde_json wraps the io::Error
            // without exposing it as a source, so ask it for the kind (thplab sim --json | head).
            let broken_pipe = |c: &(dyn std::error::Error + 'static)| {
                c.downcast_ref::<std::io::Error>().map(|io| io.kind())
                    .or_else(|| c.downcast_ref::<serde_json::Error>().and_then(|j| j.io_error_kind()))
                    == Some(std::io::ErrorKind::BrokenPipe)
            };
            if e.chain().any(broken_pipe) {
                return ExitCode::from(exit::OK);
            }
            eprintln!("thplab: {e:#}");
            let code = if e.chain().any(|c| c.downcast_ref::<sim::SimError>().is_some()) {
                exit::SIM_FAILED
            } else if e.chain().any(|c| matches!(c.downcast_ref::<live::LiveError>(), Some(live::LiveError::NotAvailable(_)))) {
                exit::LIVE_UNAVAILABLE
            } else {
                exit::USAGE
            };
            if json {
                errors::print_json(&e, code);
            }
            ExitCode::from(code)
        }
    }
}

fn cmd_sim(mut a: SimArgs) -> Result<u8> {
    let (workload, matrix) = workload_and_matrix(a.workload.take(), a.matrix.take())?;
    let Some(workload) = workload else { bail!("give the workload: thplab sim WORKLOAD --matrix {}", matrix.unwrap_or_default()) };
    (a.workload, a.matrix) = (Some(workload), matrix);
    checks::stdin_once(&[a.wl(), a.profile.as_deref().unwrap_or("")], &a.settings)?;
    print::set_wide(a.wide);
    let machine = a.machine.resolve()?;
    let explain = a.explain.as_deref().map(sim::views::parse_explain_range).transpose().map_err(anyhow::Error::msg)?;
    let (input, salvage) = input::load_sim_input(a.wl(), a.salvage, a.recorded_time, &|h| a.machine.warn_for_recording(h))?;
    cmd_sim_on(&a, machine, explain, salvage, input)
}

/// `sim` on a loaded input: one setting, or each setting of `--matrix`.
fn cmd_sim_on(a: &SimArgs, machine: sim::MachineConfig, explain: Option<(u64, u64)>, salvage: Option<uapi::result::SalvageReport>, input: SimInput) -> Result<u8> {
    // Read once for every setting of a matrix; the TLB model is set up for a workload and for a
    // recording's accesses.
    let file = a.profile.as_deref().map(load_profile).transpose()?;
    let tlb = !matches!(input, SimInput::Recording { accesses: None, .. });
    let flags = ProfileFlags { cpu: a.cpu.as_deref(), paging: a.paging.as_deref(), order0_scatter: a.order0_scatter, sample_ms: a.sample, latency: a.latency, tlb };
    if let Some(path) = &a.configs {
        let base = a.settings.resolve()?;
        let args = experiment::configs::RunArgs { path, input: &input, base: &base, flags: &flags, profile_file: file.as_ref(), machine: &machine, check: a.check, json: a.json };
        experiment::configs::run(&args)?;
        return Ok(exit::OK);
    }
    let mut profile = experiment::resolve::profile(&flags, file.as_ref())?;
    profile.vm_host = (!a.host.is_empty()).then(|| sim::host::HostConfig::parse(&a.host, None)).transpose().map_err(anyhow::Error::msg)?;
    let o = experiment::simulate::SimOptions { check: a.check, recorded_time: a.recorded_time || !a.no_recorded_time, profile: &profile, salvage: salvage.as_ref() };
    if let Some(spec) = &a.matrix {
        let (title, runs) = a.settings.matrix_runs(spec)?;
        let results = experiment::simulate::sim_matrix(&o, &input, spec, &runs, &machine, explain, !a.quiet && !a.json)?;
        if let Some(path) = &a.html {
            let runs: Vec<report::Run> = results.iter().map(|(l, _, r)| report::Run { label: l.clone(), result: r.clone() }).collect();
            write_report(path, &format!("{}: {title}", a.wl()), &runs)?;
        }
        experiment::simulate::print_matrix(results, &format!("{}: {title} of `compare --matrix`, model of Linux 6.18 only", a.wl()), a.json)?;
        return Ok(exit::OK);
    }
    let settings = a.settings.resolve()?;
    let r = experiment::simulate::sim_one(&o, &input, &settings, &machine, explain, !a.quiet && !a.json)?;
    if let Some(path) = &a.html {
        write_report(path, a.wl(), &[report::Run { label: settings.summary(), result: r.clone() }])?;
    }
    print_result(&r, &settings, a.json)?;
    Ok(exit::OK)
}

fn write_report(path: &std::path::Path, title: &str, runs: &[report::Run]) -> Result<()> {
    std::fs::write(path, report::html(title, runs)).with_context(|| format!("cannot write the report {}", path.display()))
}

/// The largest result read by `report` (a matrix of replays with every VMA is a few MiB).
const MAX_RESULT_BYTES: u64 = 256 << 20;

fn cmd_report(a: ReportArgs) -> Result<u8> {
    if sweep::plot::is_study(&a.result) {
        sweep::plot::write(&a.result, &a.output, a.x.as_deref(), a.time.as_deref(), a.memory.as_deref())?;
        return Ok(exit::OK);
    }
    let text = if a.result == "-" {
        use std::io::Read;
        let mut buf = String::new();
        std::io::stdin().take(MAX_RESULT_BYTES).read_to_string(&mut buf).context("cannot read the result from standard input")?;
        buf
    } else {
        read_text_limited(std::path::Path::new(&a.result), "result", MAX_RESULT_BYTES)?
    };
    let runs = report::runs_of(&a.result, &text)?;
    write_report(&a.output, &runs[0].result.workload.clone(), &runs)?;
    eprintln!("thplab report: wrote {} ({} run{})", a.output.display(), runs.len(), if runs.len() == 1 { "" } else { "s" });
    Ok(exit::OK)
}

fn cmd_settings(a: SettingsOnly) -> Result<u8> {
    let mut out = std::io::stdout().lock();
    if a.list {
        report::settings::print_list(&mut out, a.json)?;
    } else {
        report::settings::print(&mut out, &a.settings.resolve()?, a.json)?;
    }
    Ok(exit::OK)
}

fn cmd_demo(a: DemoArgs) -> Result<u8> {
    print::set_wide(a.wide);
    let machine = a.machine.resolve()?;
    let w = load_workload("seed-anon-1g")?;
    let unavailable = if a.model_only { Some("--model-only".to_string()) } else { experiment::host::live_unavailable() };
    experiment::demo::run(&w, &machine, unavailable, a.repeat, a.json)?;
    Ok(exit::OK)
}

fn cmd_examples(name: Option<String>) -> Result<u8> {
    examples::print(&mut std::io::stdout().lock(), name.as_deref())?;
    Ok(exit::OK)
}

fn cmd_live(a: LiveArgs) -> Result<u8> {
    checks::stdin_once(&[&a.workload], &a.settings)?;
    let settings = a.settings.resolve()?;
    if settings.kernel.model_only() || settings.policy.is_some() {
        bail!("live runs this machine's kernel (6.18): --kernel and --policy are model-only (sim, or compare to see what 6.18 cannot check)");
    }
    let machine = a.machine.resolve()?;
    let w = load_workload(&a.workload)?;
    // The model decides where regions go; the live executor maps them at the same addresses.
    let model = experiment::simulate::run_sim_tlb(&w, &settings, &machine, false, false, None, &sim::Profile::default())?;
    let sampled = sim::Profile { sample_ms: a.sample, latency: a.latency, ..Default::default() };
    let r = experiment::host::run_live(&w, &settings, &model.regions, a.repeat, !a.json, &sampled, &machine.pressure)?;
    print_result(&r, &settings, a.json)?;
    Ok(exit::OK)
}

fn cmd_compare(mut a: CompareArgs) -> Result<u8> {
    if a.record {
        // No workload to take back from --matrix: its value must be a matrix.
        if let Some(m) = &a.matrix {
            matrix(m)?;
        }
    } else {
        let (workload, matrix) = workload_and_matrix(a.workload.take(), a.matrix.take())?;
        (a.workload, a.matrix) = (workload, matrix);
    }
    if a.workload.is_none() && !a.record {
        bail!("give the workload: thplab compare WORKLOAD --matrix {} (or --record -- CMD)", a.matrix.as_deref().unwrap_or("anon"));
    }
    checks::stdin_once(&[a.workload.as_deref().unwrap_or(""), a.profile.as_deref().unwrap_or("")], &a.settings)?;
    print::set_wide(a.wide);
    let machine = a.machine.resolve()?;
    if a.record {
        return cmd_compare_record(a, machine);
    }
    if !a.command.is_empty() {
        bail!("a command after -- needs --record: thplab compare --record -- CMD [ARGS...]");
    }
    let w = load_workload(a.workload.as_deref().expect("required unless --record"))?;
    let mut tol = experiment::Tolerance::default();
    for t in &a.tolerance {
        tol.apply(t)?;
    }
    let file = a.profile.as_deref().map(load_profile).transpose()?;
    // A time verdict needs the live time's spread: 3 runs with a profile unless told.
    let repeat = a.repeat.unwrap_or(if file.as_ref().is_some_and(|p| p.fault.is_some()) { 3 } else { 1 });
    let runs: Vec<(String, ThpSettings)> = if let Some(spec) = &a.matrix {
        a.settings.matrix_runs(spec)?.1
    } else {
        vec![("given settings".to_string(), a.settings.resolve()?)]
    };
    let saved = a.live_result.as_deref().map(|p| input::load_live_result(p, &runs[0].1)).transpose()?;
    if let (None, Some(why)) = (&saved, experiment::host::live_unavailable()) {
        return Err(live::LiveError::NotAvailable(why).into());
    }
    let flags = ProfileFlags { cpu: a.cpu.as_deref(), paging: a.paging.as_deref(), sample_ms: a.sample, latency: a.latency, tlb: true, ..Default::default() };
    let mut profile = experiment::resolve::profile(&flags, file.as_ref())?;
    // The host's costs; the free lists come from the live run (`experiment::model::remodel`).
    profile.host = file.as_ref().and_then(|p| experiment::host::host_model(p, true));
    let lab = experiment::workload::WorkloadExperiment {
        workload: &w,
        machine: &machine,
        profile: &profile,
        repeat,
        retries: a.retries,
        tolerance: &tol,
        saved_live: saved.as_ref(),
        settle_host: &|| experiment::host::settle_host(true),
    };
    Ok(if lab.compare(&runs, a.json, a.only_diff)? { exit::DIFFERS } else { exit::OK })
}

/// `thplab compare --record -- CMD`: the settings and tolerance resolved, then one call to
/// `experiment::program_lab::compare_record`.
fn cmd_compare_record(a: CompareArgs, machine: sim::MachineConfig) -> Result<u8> {
    let settings_given = !a.settings.set.is_empty() || !a.settings.settings_file.is_empty() || a.settings.cmdline.is_some();
    let file = a.profile.as_deref().map(load_profile).transpose()?;
    // The TLB model only for the program's accesses.
    let flags = ProfileFlags { cpu: a.cpu.as_deref(), paging: a.paging.as_deref(), tlb: a.accesses, ..Default::default() };
    let profile = experiment::resolve::profile(&flags, file.as_ref())?;
    let settings = a.settings.resolve()?;
    if a.command.is_empty() {
        bail!("compare --record: give the program after --: thplab compare --record -- CMD [ARGS...]");
    }
    let mut tolerance = if machine.pressure.is_none() { experiment::Tolerance::program() } else { experiment::Tolerance::program_under_pressure() };
    for t in &a.tolerance {
        tolerance.apply(t)?;
    }
    let runs = match a.matrix.as_deref() {
        Some(_) if settings_given => bail!("--matrix runs its own settings; leave out --set, --settings and --cmdline"),
        Some(spec) => matrix(spec)?.1,
        None => vec![("given settings".to_string(), settings)],
    };
    let o = experiment::program_lab::CompareRecordArgs {
        command: a.command,
        runs,
        machine,
        tolerance,
        keep: a.keep,
        retries: a.retries,
        json: a.json,
        quiet: a.program_quiet,
        profile,
        timed: file.is_some(),
        repeat: a.repeat.unwrap_or(1),
        accesses: a.accesses,
        only_diff: a.only_diff,
    };
    Ok(if experiment::program_lab::compare_record(o)? { exit::DIFFERS } else { exit::OK })
}
