//! `thplab`: the Linux 6.18 THP subsystem, modelled and measured.
//!
//! This binary is a thin layer: it parses arguments, reads files, calls `sim` (and `live`), and
//! prints. Every table and JSON document it prints comes from a `uapi::RunResult`.

mod compare;
mod examples;
mod live_cmds;
mod print;
mod program_cmds;
mod record_cmds;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use uapi::ThpSettings;

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
    /// List the built-in example workloads, or print one.
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
    /// Run a program with THP disabled for it alone and record its memory system calls, page
    /// faults, threads and child processes into a trace file (docs/trace-format.md).
    Record(record_cmds::RecordArgs),
    /// Read a recording: `show` prints it as text, `stats` summarises it.
    Trace(record_cmds::TraceArgs),
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
    /// Run N times; counters are reported as the median, with the spread in "live".
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct CompareArgs {
    /// A workload file or built-in example name (not with --record).
    #[arg(required_unless_present = "record")]
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
    /// With --record: the program and its arguments.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
    #[command(flatten)]
    settings: SettingsArgs,
    #[command(flatten)]
    machine: MachineArgs,
    /// Instead of the given settings, run a standard matrix. `anon` (the default): 4 KiB only,
    /// each mTHP size alone, all sizes, PMD always, and madvise mode. `shmem`: 4 KiB only,
    /// 64 KiB always, top-level always with PMD inherit, and several sizes always.
    #[arg(long, value_name = "KIND", num_args = 0..=1, default_missing_value = "anon", value_parser = ["anon", "shmem"])]
    matrix: Option<String>,
    /// Allowed differences, FIELD=N with FIELD one of minflt (default 2), census (0),
    /// system (system-wide counters, 0).
    #[arg(long, value_name = "FIELD=N")]
    tolerance: Vec<String>,
    /// Live runs per setting (median reported).
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// When only system-wide counters differ (other processes allocated under the same global
    /// knobs), or khugepaged collapsed pages during a run that differs, run that setting live
    /// again up to N times and keep the closest run.
    #[arg(long, default_value_t = 2, value_name = "N")]
    retries: u32,
    /// Print JSON: one object per setting with both results and the rows.
    #[arg(long)]
    json: bool,
}

/// Settings given on the command line; applied in order: --cmdline, --settings, --set.
#[derive(Args, Clone, Default)]
pub struct SettingsArgs {
    /// Set a knob, as a path under /sys/kernel/mm/transparent_hugepage: `enabled=always`,
    /// `hugepages-64kB/enabled=always`, `khugepaged/max_ptes_none=0`. Repeatable.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
    /// A settings file: PATH=VALUE lines, or a `grep -r . /sys/kernel/mm/transparent_hugepage` dump.
    #[arg(long = "settings", value_name = "FILE")]
    pub settings_file: Vec<PathBuf>,
    /// Kernel command-line options: `transparent_hugepage=always thp_anon=16K-64K:always`.
    #[arg(long = "cmdline", value_name = "OPTIONS")]
    pub cmdline: Option<String>,
}

impl SettingsArgs {
    /// Boot defaults, then the command line, the files and the --set flags.
    pub fn resolve(&self) -> Result<ThpSettings> {
        let mut s = ThpSettings::default();
        if let Some(c) = &self.cmdline {
            s.apply_cmdline(c)?;
        }
        for f in &self.settings_file {
            let text = read_text_limited(f, "settings file", MAX_SETTINGS_BYTES)?;
            s.apply_file(&f.display().to_string(), &text)?;
        }
        for a in &self.set {
            s.apply_assignment(a).with_context(|| format!("--set {a}"))?;
        }
        if let Some(w) = s.unknown_warning() {
            eprintln!("thplab: warning: {w}");
        }
        Ok(s)
    }
}

#[derive(Args)]
struct SettingsOnly {
    #[command(flatten)]
    settings: SettingsArgs,
    /// Print JSON (path → value).
    #[arg(long)]
    json: bool,
    /// List every settable path with the values it accepts.
    #[arg(long)]
    list: bool,
}

/// The simulated machine.
#[derive(Args, Clone)]
pub struct MachineArgs {
    /// Physical memory of the simulated machine (4K, 2M, 24G ...).
    #[arg(long, default_value = "24G", value_name = "SIZE")]
    pub mem: String,
    /// Top of the simulated mmap area (hex), below which mappings are placed top-down.
    #[arg(long, value_name = "ADDR")]
    pub mmap_base: Option<String>,
    /// Start of the simulated heap (hex).
    #[arg(long, value_name = "ADDR")]
    pub brk_start: Option<String>,
}

impl MachineArgs {
    pub fn resolve(&self) -> Result<sim::MachineConfig> {
        let mut m = sim::MachineConfig::default();
        m.mem_bytes = mm_types::parse_size(&self.mem)
            .filter(|b| (sim::MIN_MEM_BYTES..=sim::MAX_MEM_BYTES).contains(b))
            .with_context(|| {
                format!(
                    "--mem {}: give a size from {} to {}, such as 4G",
                    self.mem,
                    sim::human_bytes(sim::MIN_MEM_BYTES).replace(" MiB", "M"),
                    sim::human_bytes(sim::MAX_MEM_BYTES).replace(" TiB", "T")
                )
            })?;
        if let Some(a) = &self.mmap_base {
            m.mmap_base = parse_hex(a).with_context(|| format!("--mmap-base {a}: give a hex address such as 0x7dfffffc5000"))?;
        }
        if let Some(a) = &self.brk_start {
            m.brk_start = parse_hex(a).with_context(|| format!("--brk-start {a}: give a hex address"))?;
        }
        Ok(m)
    }
}

fn parse_hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok().filter(|a| a % 4096 == 0)
}

#[derive(Args)]
struct SimArgs {
    /// A workload file (docs/workload-format.md), the name of a built-in example
    /// (`thplab examples` lists them), or a recording made by `thplab record`.
    workload: String,
    #[command(flatten)]
    settings: SettingsArgs,
    #[command(flatten)]
    machine: MachineArgs,
    /// Print one JSON object (schema thplab-run/1, docs/results-schema.md).
    #[arg(long)]
    json: bool,
    /// Check every model invariant after every operation (slower; for debugging the model).
    #[arg(long)]
    check: bool,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
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
}

/// Read a workload from a path or a built-in example name.
/// The largest workload file read (a workload is text; a larger input is a mistake, such as
/// /dev/zero or a recording that lost its header).
pub const MAX_WORKLOAD_BYTES: u64 = 64 << 20;
/// The largest settings file read (a `grep -r` dump of the THP tree is about 2 KiB).
pub const MAX_SETTINGS_BYTES: u64 = 1 << 20;

/// Read a text input of at most `limit` bytes, saying which file and what the limit is.
pub fn read_text_limited(path: &std::path::Path, what: &str, limit: u64) -> Result<String> {
    use std::io::Read;
    let f = std::fs::File::open(path).with_context(|| format!("cannot read {what} {}", path.display()))?;
    let mut buf = Vec::new();
    f.take(limit + 1).read_to_end(&mut buf).with_context(|| format!("cannot read {what} {}", path.display()))?;
    if buf.len() as u64 > limit {
        bail!("{what} {} is larger than {} MiB: not a {what} (is it a device or a binary file?)", path.display(), limit >> 20);
    }
    String::from_utf8(buf).map_err(|e| anyhow::anyhow!("{what} {} is not text: invalid UTF-8 at byte {}", path.display(), e.utf8_error().valid_up_to()))
}

pub fn load_workload(arg: &str) -> Result<workload::Workload> {
    let path = std::path::Path::new(arg);
    let (name, text) = if path.exists() {
        let text = read_text_limited(path, "workload", MAX_WORKLOAD_BYTES)?;
        if text.trim().is_empty() {
            bail!("{arg} is empty: not a workload (no statements), and if it was meant to be a recording, it is an empty or truncated recording (was the recorder killed?)");
        }
        (arg.to_string(), text)
    } else if let Some(text) = examples::get(arg) {
        (format!("<builtin {arg}>"), text.to_string())
    } else {
        bail!("no workload file '{arg}' and no built-in example of that name; built-in examples: {}", examples::names().join(", "));
    };
    Ok(workload::parse(&name, &text)?)
}

fn main() -> ExitCode {
    // What thplab inherited (signals, mask, limits, descriptors), before anything changes it:
    // the programs it records or runs live start with this, not with thplab's own state.
    exec_state::ExecState::capture();
    let cli = Cli::parse();
    match &cli.cmd {
        Cmd::Exec => live_cmds::cmd_exec_child(),
        Cmd::Hold(a) => live_cmds::cmd_hold(&a.assignments),
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
        Cmd::Record(a) => record_cmds::cmd_record(a),
        Cmd::Trace(a) => record_cmds::cmd_trace(a),
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
            ExitCode::from(code)
        }
    }
}

fn run_sim(w: &workload::Workload, s: &ThpSettings, m: &sim::MachineConfig, check: bool, progress: bool) -> Result<uapi::RunResult> {
    let mut bar = print::Progress::new(progress && w.touched_pages() > 4_000_000, &w.source);
    let mut on_event = |e: sim::SimEvent| bar.event(e);
    let mut opts = sim::RunOptions { check_invariants: check, on_event: Some(&mut on_event) };
    let (r, _) = sim::run_with(w, s, m, &mut opts)?;
    drop(opts);
    bar.finish();
    Ok(r)
}

/// One result as JSON or as the table.
/// A replay's warnings (what it did not model, placements it could not reproduce), on stderr.
pub fn print_replay_warnings(r: &uapi::RunResult) {
    let warnings = r.model.as_ref().and_then(|m| m["replay"]["warnings"].as_array());
    for w in warnings.into_iter().flatten() {
        if let Some(w) = w.as_str() {
            eprintln!("thplab: warning: {}: {w}", r.workload);
        }
    }
}

fn print_result(r: &uapi::RunResult, settings: &ThpSettings, json: bool) -> Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, r)?;
        writeln!(out)?;
    } else {
        print::result_table(&mut out, r, settings)?;
    }
    Ok(())
}

/// A recording (`thplab record`), if `path` is one: read whole.
pub fn load_recording(path: &str) -> Result<Option<(trace::Header, Vec<trace::Event>)>> {
    let p = std::path::Path::new(path);
    if !p.is_file() {
        return Ok(None);
    }
    let mut magic = [0u8; 8];
    let mut f = std::fs::File::open(p).with_context(|| format!("cannot open {path}"))?;
    use std::io::Read;
    if f.read(&mut magic).unwrap_or(0) < magic.len() || magic != *trace::MAGIC {
        return Ok(None);
    }
    let file = std::fs::File::open(p).with_context(|| format!("cannot open {path}"))?;
    let (header, events, _) = trace::read_all(std::io::BufReader::new(file)).with_context(|| path.to_string())?;
    Ok(Some((header, events)))
}

fn cmd_sim(a: SimArgs) -> Result<u8> {
    let settings = a.settings.resolve()?;
    let machine = a.machine.resolve()?;
    let r = if let Some((header, events)) = load_recording(&a.workload)? {
        if header.lost_events > 0 {
            eprintln!("thplab sim: WARNING: {} lost {} events while recording; predictions may be off", a.workload, header.lost_events);
        }
        let r = sim::run_recording(&a.workload, &header, &events, &settings, &machine, a.check)?;
        print_replay_warnings(&r);
        r
    } else {
        let w = load_workload(&a.workload)?;
        run_sim(&w, &settings, &machine, a.check, !a.quiet && !a.json)?
    };
    print_result(&r, &settings, a.json)?;
    Ok(exit::OK)
}

fn cmd_settings(a: SettingsOnly) -> Result<u8> {
    let mut out = std::io::stdout().lock();
    if a.list {
        for p in ThpSettings::valid_paths() {
            writeln!(out, "{p}: {}", ThpSettings::valid_values(&p).unwrap_or_default())?;
        }
        return Ok(exit::OK);
    }
    let s = a.settings.resolve()?;
    if a.json {
        serde_json::to_writer_pretty(&mut out, &s.knob_map())?;
        writeln!(out)?;
    } else {
        write!(out, "{s}")?;
    }
    Ok(exit::OK)
}

/// The three settings of the README's main command.
pub fn demo_settings() -> Vec<(&'static str, ThpSettings)> {
    let mut four_k = ThpSettings::default();
    four_k.apply_assignment("enabled=never").expect("valid");
    let mut m64 = four_k.clone();
    m64.apply_assignment("hugepages-64kB/enabled=always").expect("valid");
    let mut pmd = ThpSettings::default();
    pmd.apply_assignment("enabled=always").expect("valid");
    vec![("4K", four_k), ("64K", m64), ("PMD", pmd)]
}

/// Why live runs cannot happen here, if they cannot.
pub fn live_unavailable() -> Option<String> {
    match live::sysfs::Paths::from_env().check_available() {
        Ok(()) => None,
        Err(e) => Some(e.to_string()),
    }
}

fn cmd_demo(a: DemoArgs) -> Result<u8> {
    let machine = a.machine.resolve()?;
    let w = load_workload("seed-anon-1g")?;
    let unavailable = if a.model_only { Some("--model-only".to_string()) } else { live_unavailable() };
    let mut results = Vec::new();
    for (label, s) in demo_settings() {
        let r = run_sim(&w, &s, &machine, false, false)?;
        let live = match &unavailable {
            None => Some(live_cmds::run_live(&w, &s, &r.regions, 1, false)?),
            Some(_) => None,
        };
        results.push((format!("{label} sim"), s.summary(), r));
        if let Some(l) = live {
            results.push((format!("{label} live"), s.summary(), l));
        }
    }
    if let Some(why) = &unavailable {
        eprintln!("thplab demo: model only ({why})");
    }
    let mut out = std::io::stdout().lock();
    if a.json {
        let v: Vec<_> = results.iter().map(|(l, _, r)| serde_json::json!({ "label": l, "result": r })).collect();
        serde_json::to_writer_pretty(&mut out, &v)?;
        writeln!(out)?;
    } else {
        writeln!(out, "seed-anon-1g: 1 GiB of private anonymous memory written page by page, model of Linux 6.18{}\n", if unavailable.is_none() { " and this machine's live kernel" } else { "" })?;
        print::side_by_side(&mut out, &results)?;
    }
    Ok(exit::OK)
}

fn cmd_examples(name: Option<String>) -> Result<u8> {
    let mut out = std::io::stdout().lock();
    match name {
        None => {
            for n in examples::names() {
                writeln!(out, "{n}")?;
            }
        }
        Some(n) => match examples::get(&n) {
            Some(t) => write!(out, "{t}")?,
            None => bail!("no built-in example '{n}'; built-in examples: {}", examples::names().join(", ")),
        },
    }
    Ok(exit::OK)
}

fn cmd_live(a: LiveArgs) -> Result<u8> {
    let settings = a.settings.resolve()?;
    let machine = a.machine.resolve()?;
    let w = load_workload(&a.workload)?;
    // The model decides where regions go; the live executor maps them at the same addresses.
    let model = run_sim(&w, &settings, &machine, false, false)?;
    let r = live_cmds::run_live(&w, &settings, &model.regions, a.repeat, !a.json)?;
    print_result(&r, &settings, a.json)?;
    Ok(exit::OK)
}

/// Model, then live, then the model again if the heap matters and the live process's heap
/// starts elsewhere than the model assumed.
pub fn model_and_live(w: &workload::Workload, s: &ThpSettings, machine: &sim::MachineConfig, repeat: u32, progress: bool) -> Result<(uapi::RunResult, uapi::RunResult)> {
    let model = run_sim(w, s, machine, false, false)?;
    let live = live_cmds::run_live(w, s, &model.regions, repeat, progress)?;
    let live_brk = live.live.as_ref().and_then(|l| l.get("start_brk")).and_then(|v| v.as_str()).and_then(parse_hex);
    if let (Some(brk), true) = (live_brk, w.region_by_name(workload::HEAP).is_some()) {
        if brk != machine.brk_start {
            let m = sim::MachineConfig { brk_start: brk, ..machine.clone() };
            return Ok((run_sim(w, s, &m, false, false)?, live));
        }
    }
    Ok((model, live))
}

fn cmd_compare(a: CompareArgs) -> Result<u8> {
    let machine = a.machine.resolve()?;
    if a.record {
        let settings_given = !a.settings.set.is_empty() || !a.settings.settings_file.is_empty() || a.settings.cmdline.is_some();
        return program_cmds::cmd_compare_record(program_cmds::CompareRecordArgs {
            command: a.command,
            matrix: a.matrix,
            settings: a.settings.resolve()?,
            settings_given,
            machine,
            tolerance: a.tolerance,
            keep: a.keep,
            retries: a.retries,
            json: a.json,
            quiet: a.program_quiet,
        });
    }
    if !a.command.is_empty() {
        bail!("a command after -- needs --record: thplab compare --record -- CMD [ARGS...]");
    }
    let w = load_workload(a.workload.as_deref().expect("required unless --record"))?;
    let mut tol = compare::Tolerance::default();
    for t in &a.tolerance {
        tol.apply(t)?;
    }
    let runs: Vec<(String, ThpSettings)> = if let Some(kind) = &a.matrix {
        if !a.settings.settings_file.is_empty() || a.settings.cmdline.is_some() {
            bail!("--matrix runs its own settings; leave out --settings and --cmdline (--set applies on top of each)");
        }
        let mut m = if kind == "shmem" { compare::shmem_matrix() } else { compare::matrix() };
        // --set applies on top of every setting of the matrix (anon_beside_full=1, a khugepaged knob).
        for (label, s) in &mut m {
            for x in &a.settings.set {
                s.apply_assignment(x).with_context(|| format!("--set {x}"))?;
            }
            if !a.settings.set.is_empty() {
                *label = format!("{label} + {}", a.settings.set.join(" "));
            }
        }
        m
    } else {
        vec![("given settings".to_string(), a.settings.resolve()?)]
    };
    if let Some(why) = live_unavailable() {
        return Err(live::LiveError::NotAvailable(why).into());
    }
    let mut out = std::io::stdout().lock();
    let mut json = Vec::new();
    let mut differing = 0;
    for (label, s) in &runs {
        let (model, live) = model_and_live(&w, s, &machine, a.repeat, false)?;
        let compare::Retried { live, rows, attempts, why } =
            compare::retry_live(a.retries, live, |l| compare::rows(&model, l, &tol), || live_cmds::run_live(&w, s, &model.regions, a.repeat, false))?;
        if attempts > 1 && !a.json {
            writeln!(out, "({label}: {}; ran live {attempts} times, kept the closest)", why.unwrap_or_default())?;
        }
        let differs = rows.iter().any(|r| r.differs);
        differing += differs as usize;
        if a.json {
            json.push(serde_json::json!({ "label": label, "settings": s.knob_map(), "differs": differs, "rows": rows, "model": model, "live": live }));
        } else {
            compare::print_rows(&mut out, label, s, &rows)?;
        }
    }
    if a.json {
        serde_json::to_writer_pretty(&mut out, &json)?;
        writeln!(out)?;
    } else {
        writeln!(out, "{} of {} settings: model = live{}", runs.len() - differing, runs.len(), if differing > 0 { format!("; {differing} differ") } else { String::new() })?;
    }
    Ok(if differing > 0 { exit::DIFFERS } else { exit::OK })
}
