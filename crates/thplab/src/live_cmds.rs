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
    sample_ms: Option<u64>,
) -> Result<RunResult> {
    let sample = sample_ms.map(std::time::Duration::from_millis);
    let opts = live::ExecOptions { repeat: repeat.max(1), progress, sample, ..Default::default() };
    Ok(live::run_live(workload, settings, model_regions, &opts)?)
}

/// [`run_live`] of the workload a model run `model` ran. With `host` (the model priced a
/// profile's `[host]`), every live run waits until page reporting has taken every free block
/// (the repeats in the executor), runs pinned to the CPU whose per-CPU lists hold the fewest
/// pages as it starts, and reads the free lists it starts from (`live.free_lists`, for
/// `crate::remodel`) and its host faults (`live.host_faults`).
pub fn run_live_as_modelled(
    model: &uapi::RunResult,
    workload: &Workload,
    settings: &ThpSettings,
    repeat: u32,
    progress: bool,
    sample_ms: Option<u64>,
    host: bool,
) -> Result<RunResult> {
    let reporting = host && live::host::reporting_order().is_some();
    if reporting {
        // The wait can take seconds: always said, on stderr.
        settle_host(true);
    }
    let sample = sample_ms.map(std::time::Duration::from_millis);
    let opts = live::ExecOptions { repeat: repeat.max(1), progress, sample, settle_host: reporting, ..Default::default() };
    Ok(live::run_live(workload, settings, &model.regions, &opts)?)
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
        crate::print::set_wide(self.wide);
        cmd_observe(self.pid, self.json, self.interval, self.budget)
    }
}

/// Arguments of the hidden `thplab __hold`.
#[derive(Args, Clone, Debug)]
pub struct HoldArgs {
    /// Knobs to set, as PATH=VALUE.
    pub assignments: Vec<String>,
}

/// Refuse (bad input, exit 2) a pid that `verb` (observe, explain) cannot look at: none, a
/// zombie or a kernel thread.
pub fn require_observable(verb: &str, pid: i32) -> Result<()> {
    require_user_process(verb, pid, &format!("to {verb}"))
}

/// Refuse (bad input, exit 2) a `CMD --pid` that names no process with a user address space:
/// none, a zombie or a kernel thread; `purpose` ends the sentence ("to observe", "for
/// khugepaged to scan").
pub fn require_user_process(cmd: &str, pid: i32, purpose: &str) -> Result<()> {
    match live::observable(pid) {
        live::Observable::Yes => Ok(()),
        live::Observable::Missing => anyhow::bail!("{cmd} --pid {pid}: there is no process {pid}"),
        live::Observable::Zombie(comm) => anyhow::bail!(
            "{cmd} --pid {pid}: process {pid} ({comm}) is a zombie: it has exited and its parent has not reaped it, so it has no memory {purpose}"
        ),
        live::Observable::KernelThread(comm) => {
            anyhow::bail!("{cmd} --pid {pid}: process {pid} ({comm}) is a kernel thread: it has no user address space {purpose}")
        }
    }
}

/// `thplab observe --pid PID [--json] [--interval MS]`: the folio census of every VMA of a
/// process. Exit codes (README.md): 0 when it was observed (also when it exits between two
/// samples: "process N exited"); 2 when the pid names no process with a user address space (no
/// such process, a zombie, a kernel thread); 5 when this user may not read its pagemap.
pub fn cmd_observe(pid: i32, json: bool, interval_ms: Option<u64>, budget_ms: Option<u64>) -> Result<i32> {
    require_observable("observe", pid)?;
    let mut first = true;
    loop {
        match live::observe::observe_with(pid, budget_ms.map(Duration::from_millis)) {
            Ok(report) => {
                let text = if json {
                    format!("{}\n", serde_json::to_string(&report).context("cannot print JSON")?)
                } else if crate::print::fit_width().is_none() {
                    format!("{}{report:#}", if first { "" } else { "\n" })
                } else {
                    format!("{}{report}", if first { "" } else { "\n" })
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
        for pid in &self.pid {
            require_user_process("khugepaged", *pid, "for khugepaged to scan")?;
        }
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
        if self.pid.is_empty() && self.name.is_empty() {
            anyhow::bail!("the agent touches only the processes you allow: give --pid PID or --name COMM (repeatable)");
        }
        if !(self.rate > 0.0 && self.rate.is_finite()) {
            anyhow::bail!("--rate {}: give a positive number of collapses per second, such as 1 or 0.2", self.rate);
        }
        if !live::sysfs::is_root() {
            return Err(live::LiveError::NotAvailable("thplab agent reads other processes' pagemaps and calls process_madvise(MADV_COLLAPSE) on them: it needs root".into()).into());
        }
        for pid in &self.pid {
            require_user_process("agent", *pid, "to collapse")?;
        }
        let allow = agent::Allowlist { pids: self.pid.clone(), names: self.name.clone() };
        if allow.resolve().is_empty() {
            eprintln!("thplab agent: warning: no process on the allowlist is running now (names are matched against /proc/PID/comm, at most 15 bytes){}", if self.dry_run { "" } else { "; waiting for one" });
        }
        live::khugepaged::stop_on_signals();
        let budget = agent::Budget {
            per_sec: self.rate,
            total: self.max_collapses,
            cpu_fraction: self.cpu / 100.0,
            memory_bytes: self.memory,
            max_stall: Duration::from_millis(self.max_stall_ms),
            min_present: self.min_present,
        };
        let json = self.json;
        let duration = self.duration.map(Duration::from_secs_f64).unwrap_or(Duration::from_secs(u64::MAX / 4));
        let log = |a: &agent::Action| {
            let line = if json {
                let mut v = serde_json::to_value(a).expect("serializable");
                v.as_object_mut().expect("object").insert("schema".into(), "thplab-agent/1".into());
                v.to_string()
            } else {
                let what = match (&a.start, a.present_pages) {
                    (Some(s), Some(p)) => format!(" {s} ({p} pages present, adds {} kB)", a.adds_bytes.unwrap_or(0) >> 10),
                    _ => String::new(),
                };
                let took = a.duration_us.map(|d| format!(" in {d} µs")).unwrap_or_default();
                let err = a.errno.as_ref().map(|e| format!(": {e}")).unwrap_or_default();
                format!("{:8.3} {:<14} {} {}{what}{took}{err}: {}", a.t, a.action, a.pid, a.comm, a.reason)
            };
            println!("{line}");
        };
        let s = agent::run(&allow, &budget, self.dry_run, Duration::from_millis(self.interval), duration, live::khugepaged::stop_requested, log)?;
        if json {
            let mut v = serde_json::to_value(&s)?;
            v.as_object_mut().expect("object").insert("schema".into(), "thplab-agent/1".into());
            v.as_object_mut().expect("object").insert("summary".into(), true.into());
            println!("{v}");
        } else {
            let fails: Vec<String> = s.failures.iter().map(|(k, v)| format!("{k} {v}")).collect();
            println!(
                "{} over {:.1} s: {} collapsed{}, {} failed{}; memory added {} kB of {} kB; CPU {:.1} ms ({:.2} % of one CPU, budget {} %); at most {} in any second (budget {}/s)",
                if self.dry_run { "dry run" } else { "agent" },
                s.seconds,
                if self.dry_run { s.would_collapse } else { s.collapses },
                if self.dry_run { " (would be)" } else { "" },
                s.failures.values().sum::<u64>(),
                if fails.is_empty() { String::new() } else { format!(" ({})", fails.join(", ")) },
                s.memory_added_bytes >> 10,
                s.budget_memory_bytes >> 10,
                s.cpu_ms,
                if s.seconds >= 0.1 { s.cpu_ms / (s.seconds * 10.0) } else { 0.0 },
                self.cpu,
                s.max_collapses_in_a_second,
                self.rate,
            );
        }
        Ok(0)
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

/// `thplab calibrate`'s progress: on a terminal one line rewritten in place; elsewhere (a log
/// file, CI) a line per step, the seconds a step has been waiting (` (N s)`) left out, so that
/// a step that waits is one line, not one per second.
#[derive(Default)]
struct StepProgress {
    last: String,
}

impl StepProgress {
    fn show(&mut self, tty: bool, step: &str) {
        if tty {
            eprint!("\rthplab calibrate: {step}\x1b[K");
            return;
        }
        let step = match step.rsplit_once(" (") {
            Some((head, tail)) if tail.ends_with(" s)") && tail[..tail.len() - 3].bytes().all(|b| b.is_ascii_digit()) => head,
            _ => step,
        };
        if step != self.last {
            eprintln!("thplab calibrate: {step}");
            self.last = step.to_string();
        }
    }
}

impl CalibrateArgs {
    /// Exit codes: 0 after measuring; 5 where live runs are not available.
    pub fn run(&self) -> Result<i32> {
        use std::io::IsTerminal;
        let quiet = self.json;
        let tty = std::io::stderr().is_terminal();
        let mut progress = StepProgress::default();
        let c = calibrate::calibrate(self.mib, self.repeat, |step| {
            if !quiet {
                progress.show(tty, step);
            }
        })?;
        let tlb = match self.chase_mib {
            0 => None,
            mib => Some(calibrate_tlb(mib, |step| {
                if !quiet {
                    progress.show(tty, step);
                }
            })?),
        };
        if !quiet && tty {
            eprint!("\r\x1b[K");
        }
        let profile = uapi::profile::MachineProfile {
            machine: uapi::profile::MachineInfo { name: hostname(), kernel: live::kernel_release() },
            fault: Some(c.fault.clone()),
            host: c.host.clone(),
            tlb: tlb.clone(),
            ..Default::default()
        };
        if let Some(path) = &self.output {
            std::fs::write(path, profile.to_toml()).with_context(|| format!("cannot write the profile {}", path.display()))?;
        }
        let mut out = std::io::stdout().lock();
        if self.json {
            serde_json::to_writer_pretty(&mut out, &serde_json::json!({ "schema": "thplab-calibrate/1", "figures": c.figures, "profile": profile }))?;
            writeln!(out)?;
        } else {
            for l in figure_table(&c.figures) {
                writeln!(out, "{l}")?;
            }
            if let Some(t) = &tlb {
                writeln!(
                    out,
                    "\nchase of {} MiB: {:.1} ns per load with 4 KiB pages, {:.1} with PMD THP (ratio {:.2}); base pages' scatter {:.2}",
                    t.chase_bytes >> 20,
                    t.chase_4k_ns,
                    t.chase_pmd_ns,
                    t.chase_pmd_ns / t.chase_4k_ns,
                    t.order0_scatter
                )?;
                writeln!(out, "[tlb] cpu = {}, paging = {} ({})", t.cpu, t.paging, t.source)?;
            }
            if let Some(path) = &self.output {
                writeln!(out, "\nwrote {} (use it with `thplab sim WORKLOAD --profile {}`)", path.display(), path.display())?;
            }
        }
        Ok(0)
    }
}

/// `calibrate`'s figures as a table, each column as wide as its widest cell (the first as wide
/// as the longest name, `host fault (base pages)`).
pub fn figure_table(figures: &[calibrate::Figure]) -> Vec<String> {
    let mut cells = vec![["ns per", "median", "min", "max", "events", "at size"].map(String::from).to_vec()];
    for f in figures {
        let at = f.at_size.map(|a| format!("{:.0} %", a * 100.0)).unwrap_or_default();
        cells.push(vec![f.what.clone(), format!("{:.1}", f.ns.median), format!("{:.1}", f.ns.min), format!("{:.1}", f.ns.max), f.events.to_string(), at]);
    }
    uapi::result::layout(&cells, &[true, false, false, false, false, false])
}

/// `[tlb]`: the preset for this CPU (/proc/cpuinfo) and, on a guest (the hypervisor flag), the
/// host page size whose model time per load of a chase of `mib` MiB with PMD THP is nearest
/// the live one (the host's page size is not visible to the guest; it decides whether a guest
/// huge page saves host walks: docs/tlb-model.md). The PMD chase decides because its guest
/// side is fixed (2 MiB pages, consecutive frames), where a 4 KiB chase depends on how the
/// guest's free lists scattered its frames; host pages whose model times are within 2 % of
/// each other (2 MiB and 1 GiB over 1 GiB: both cover it) go to the smaller.
fn calibrate_tlb(mib: u64, mut progress: impl FnMut(&str)) -> Result<uapi::profile::TlbSetup> {
    use chase::ChasePage;
    const LOADS: u64 = 2_000_000;
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let (preset, cpu_why) = tlb::presets::for_cpuinfo(&cpuinfo);
    let bytes = mib << 20;
    progress(&format!("tlb: chase of {mib} MiB, 4 KiB pages"));
    let k4 = chase::run_chase(bytes, ChasePage::Base, LOADS, 1)?;
    progress(&format!("tlb: chase of {mib} MiB, PMD THP"));
    let pmd = chase::run_chase(bytes, ChasePage::Pmd, LOADS, 1)?;
    let scatter = if k4.host_pte_lines > 0 { k4.scatter() } else { 1.0 };
    let live_ratio = pmd.ns_per_access / k4.ns_per_access;
    let (paging, how) = if !tlb::presets::is_guest(&cpuinfo) {
        (tlb::Paging::Native, "no hypervisor flag: native paging".to_string())
    } else {
        let sizes = chase::tree_sizes(&live::sysfs::Paths::from_env());
        let mut fits: Vec<(tlb::Paging, f64, f64)> = Vec::new();
        for host in [tlb::PageSize::K4, tlb::PageSize::M2, tlb::PageSize::G1] {
            let paging = tlb::Paging::Nested { host };
            progress(&format!("tlb: model chase under {}", paging.name()));
            let m4 = crate::chase_cmds::model_chase_ns(bytes, ChasePage::Base, &sizes, (preset, paging), scatter, LOADS, 1)?;
            let mp = crate::chase_cmds::model_chase_ns(bytes, ChasePage::Pmd, &sizes, (preset, paging), scatter, LOADS, 1)?;
            fits.push((paging, mp, mp / m4));
        }
        let off = |mp: f64| (mp / pmd.ns_per_access).ln().abs();
        let best = fits.iter().copied().fold(fits[0], |b, f| if off(f.1) < off(b.1) && (f.1 / b.1 - 1.0).abs() > 0.02 { f } else { b });
        let listed: Vec<String> = fits.iter().map(|(p, mp, r)| format!("{} {mp:.0} ns (ratio {r:.2})", p.name())).collect();
        (
            best.0,
            format!(
                "a guest (hypervisor flag): PMD chase live {:.0} ns (ratio to 4 KiB {live_ratio:.2}), model {}: nearest {}",
                pmd.ns_per_access,
                listed.join(", "),
                best.0.name()
            ),
        )
    };
    Ok(uapi::profile::TlbSetup {
        cpu: preset.name.to_string(),
        paging: paging.name().to_string(),
        order0_scatter: (scatter * 1000.0).round() / 1000.0,
        chase_bytes: bytes,
        chase_4k_ns: k4.ns_per_access,
        chase_pmd_ns: pmd.ns_per_access,
        source: format!("thplab calibrate: {cpu_why}; {how}; {mib} MiB chase, {LOADS} loads"),
    })
}

/// This machine's host name (for the profile's `[machine]`).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// The profile's `[host]` for a model run. With `live` (a live run on this machine follows):
/// only when this machine reports free pages too, and without free lists: the live run reads
/// the ones it starts from (`live.free_lists`: once page reporting has taken every free block,
/// pinned to the CPU whose per-CPU lists hold the fewest pages, with that list's THP-sized pages
/// taken; `live::host::run_start`), and `crate::remodel` runs the model again from
/// them. Read here instead, before the model and so seconds before the live run, they missed
/// what the other CPU's per-CPU list freed meanwhile (`decay_pcp_high` gives up to 2 016 pages a
/// second back to the buddy lists, backed and unreported): 1 GiB runs of 64 KiB mTHP met 30-60 %
/// fewer host faults than the model gave them and ran up to 2.5x faster than it said. Without
/// `live`, the profile's own free lists.
pub fn host_model(profile: &uapi::profile::MachineProfile, live: bool) -> Option<(&uapi::profile::HostCosts, Option<uapi::profile::FreeLists>)> {
    let host = profile.host.as_ref()?;
    if live {
        live::host::reporting_order()?;
    }
    Some((host, None))
}

/// The free lists a live run pinned to the quietest CPU meets (`free.cpu`, where free pages
/// are reported: `live::host::cpu_for_run`), read once the THP-sized pages on that CPU's
/// per-CPU list are taken: held, so that the run does not get them (`live::host::take_cpu_thps`),
/// and returned for the caller to hold over the run.
fn free_areas_for_run() -> (Option<uapi::profile::FreeLists>, Option<live::host::HeldThps>) {
    let Some(cpu) = live::host::cpu_for_run() else { return (live::host::free_areas().ok(), None) };
    let held = live::host::take_cpu_thps(cpu);
    (live::host::free_areas_on(cpu).ok(), held)
}

/// Before a live run whose model run paid host faults (`time.host_faults`: it takes free blocks
/// that page reporting hands to the host), wait until reporting has taken every free block, so
/// that the live run starts as the model's machine does, from an idle machine's state. Says so
/// on stderr when `progress`.
pub fn settle_host_for(model: &uapi::RunResult, progress: bool) {
    if model.time.as_ref().is_none_or(|t| t.host_faults == 0) {
        return;
    }
    settle_host(progress);
}

/// The median wall time (ns) of `runs` untraced runs of `argv`, as `record --timed` times a
/// program: as recorded (THP disabled for it) or, with `live`, under the machine's knobs. On a
/// VM that reports free pages each run starts once reporting has taken every free block (the
/// model's machine's state, its `[host]`): a run right after another would reuse the blocks the
/// last one freed, which the host still backs, and run faster than the model's start allows.
/// Each run is pinned to the CPU whose per-CPU lists hold the fewest free pages then
/// (`live::host::cpu_for_run`: a run on the CPU the last one exited on took up to 900 MiB
/// of backed pages from its list), with the THP-sized pages of that list held while it runs
/// (`live::host::take_cpu_thps`: the THPs the last process there freed). Also the free lists
/// the median run met (None where unreadable): which frames are backed depends on them, so the
/// model prices these runs with them.
/// With more than one run, also their range (`uapi::result::MsRange`, ms).
pub fn time_untraced(argv: &[std::ffi::OsString], runs: u32, live: bool, progress: bool) -> Result<(u64, Option<uapi::profile::FreeLists>, Option<uapi::result::MsRange>)> {
    let mut times = Vec::new();
    for run in 0..runs.max(1) {
        crate::progress::detail(&format!("untraced run {} of {}", run + 1, runs.max(1)));
        settle_host(progress);
        let (free, thps) = free_areas_for_run();
        let ns = record::time_untraced_on(argv, 1, live, free.as_ref().and_then(|f| f.cpu))?;
        drop(thps);
        times.push((ns, free));
    }
    let range = uapi::result::MsRange::of(&times.iter().map(|t| t.0 as f64 / 1e6).collect::<Vec<_>>());
    times.sort_unstable_by_key(|t| t.0);
    let mid = (times.len() - 1) / 2;
    let (ns, free) = times.swap_remove(mid);
    Ok((ns, free, range))
}

/// Wait until page reporting has taken every free block (at once where there is no reporting).
/// Under a step progress (`crate::progress`) the wait is shown there, and nothing else is said.
fn settle_host(progress: bool) {
    use std::io::IsTerminal;
    if crate::progress::tell_wait(Some(0)) {
        live::host::wait_until_settled(&mut |s| {
            crate::progress::tell_wait(Some(s));
        });
        crate::progress::tell_wait(None);
        return;
    }
    let tty = progress && std::io::stderr().is_terminal();
    if progress && !tty {
        eprintln!("thplab: waiting for page reporting to take every free block, so that the live run starts where the model does");
    }
    let mut shown = None;
    let mut tell = |s: u64| {
        if tty && shown != Some(s) {
            shown = Some(s);
            eprint!("\rthplab: waiting for page reporting to take every free block, so that the live run starts where the model does ({s} s)\x1b[K");
        }
    };
    if live::host::wait_until_settled(&mut tell).is_some() && tty {
        eprint!("\r\x1b[K");
    }
}

#[cfg(test)]
mod figure_tests {
    use calibrate::{Figure, Spread};

    #[test]
    fn the_figures_line_up_past_a_long_name() {
        let spread = |median: f64| Spread { median, min: median - 1.0, max: median + 1.0 };
        let figures = [
            Figure { what: "fault 4kB".into(), ns: spread(1568.2), events: 262144, at_size: Some(0.5) },
            Figure { what: "host fault (base pages)".into(), ns: spread(9037.7), events: 512, at_size: None },
        ];
        assert_eq!(
            super::figure_table(&figures),
            [
                "ns per                   median     min     max  events  at size",
                "fault 4kB                1568.2  1567.2  1569.2  262144     50 %",
                "host fault (base pages)  9037.7  9036.7  9038.7     512",
            ]
        );
    }
}
