//! `thplab advise (-- CMD ARGS | RECORDING | WORKLOAD) [--space FILE.toml] [--verify N]
//! [--memory-max SIZE --swap ...] [--json]`: the clap options and the command (docs/advise.md).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use experiment::simulate::SimInput;
use thp_abi::{Pressure, SwapSpec};

use crate::space::{self, Space};

/// Arguments of `thplab advise`.
#[derive(Args, Debug, Clone)]
pub struct Options {
    /// A recording (`thplab record`) or a workload (file or built-in example) to advise on,
    /// taken as it is; or leave it out and give the program after `--`: it is recorded once
    /// (THP disabled for it, then 3 untraced runs for its own time; needs root).
    #[arg(value_name = "RECORDING|WORKLOAD", required_unless_present = "command")]
    pub input: Option<String>,
    /// The search space (TOML, docs/advise.md); default: the built-in one (44 points of sizes ×
    /// mode × per-process choice, then defrag, shmem_enabled, khugepaged and max_ptes_none on
    /// the 3 fastest).
    #[arg(long, value_name = "FILE.toml")]
    pub space: Option<PathBuf>,
    /// Run the top N points live beside their prediction (the recommended one, or the defaults
    /// where there is no winner, first), the median of 5 runs each, through the settings guard
    /// (needs root), and say whether the recommended one is within 5 % of the best live time.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub verify: Option<u32>,
    /// Live runs per verified point (their median is its live time, their range its spread).
    #[arg(long, value_name = "N", default_value_t = crate::verify::RUNS, value_parser = clap::value_parser!(u32).range(1..=100), requires = "verify")]
    pub runs: u32,
    /// With a program: untraced runs after the recording, whose median is the program's own
    /// time (`record --timed N`); 0: the time predicted is the modelled kernel work alone.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub timed: u32,
    /// The machine profile the time is priced with: a file from `thplab calibrate` or `builtin`.
    #[arg(long, value_name = "FILE|builtin", default_value = "builtin")]
    pub profile: String,
    /// The model's noise band, percent of the modelled kernel work: a difference in time
    /// smaller than this (plus each prediction's own ±) is no difference.
    #[arg(long, value_name = "PCT", default_value_t = crate::DEFAULT_BAND_PCT, value_parser = band)]
    pub band: f64,
    /// The least gain named a winner, percent of the defaults' predicted time: a change of
    /// system knobs for less is not advised.
    #[arg(long, value_name = "PCT", default_value_t = crate::DEFAULT_MIN_GAIN_PCT, value_parser = band)]
    pub min_gain: f64,
    /// Points predicted at once. Default: every core.
    #[arg(long, short, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub jobs: Option<u32>,
    /// A workload: predict (and verify) it in a memory cgroup with this limit, at least 4M in
    /// whole pages, such as 256M (a recorded program is not yet predicted under a limit).
    #[arg(long, value_name = "SIZE", value_parser = Pressure::parse_memory_max)]
    pub memory_max: Option<u64>,
    /// With --memory-max: the swap, `zram:SIZE`, `file:SIZE` or `none` (the machine's).
    #[arg(long, value_name = "zram:SIZE|file:SIZE|none", value_parser = swap)]
    pub swap: Option<String>,
    /// With a program: keep its recording in FILE (advise on it again without recording).
    #[arg(long, value_name = "FILE")]
    pub keep: Option<PathBuf>,
    /// Print one JSON object (schema thplab-advise/1).
    #[arg(long)]
    pub json: bool,
    /// The program and its arguments, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// A recording's command line.
fn argv(h: &trace::Header) -> String {
    h.argv.iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect::<Vec<_>>().join(" ")
}

fn band(s: &str) -> Result<f64, String> {
    match s.trim_end_matches('%').parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
        _ => Err(format!("'{s}': give a percentage from 0 to 100 (the default is {})", crate::DEFAULT_BAND_PCT)),
    }
}

fn swap(s: &str) -> Result<String, String> {
    SwapSpec::parse(s).map(|_| s.to_string())
}

/// The space of `--space`, or the built-in one.
pub fn load_space(path: Option<&std::path::Path>) -> Result<Space> {
    let Some(p) = path else { return Ok(space::default_space()) };
    let text = std::fs::read_to_string(p).with_context(|| format!("cannot read the space {}", p.display()))?;
    space::parse(&p.display().to_string(), &text)
}

/// The input: recorded now, or loaded; with the program's command line where there is one and
/// the range of its timed runs.
fn input(o: &Options) -> Result<(SimInput, String, Option<Vec<String>>, Option<uapi::result::MsRange>)> {
    if o.input.is_some() && !o.command.is_empty() {
        bail!("give a recording or workload, or a program after --, not both");
    }
    if let Some(arg) = &o.input {
        let i = crate::load_input(arg)?;
        let source = match &i {
            SimInput::Recording { name, header, .. } => format!("{name} (a recording of {})", argv(header)),
            SimInput::Workload(w) => w.source.clone(),
        };
        return Ok((i, source, None, None));
    }
    if let Some(why) = experiment::host::live_unavailable() {
        return Err(live::LiveError::NotAvailable(format!("recording the program: {why}")).into());
    }
    if !o.json {
        eprintln!("thplab advise: recording {} once, then {} untraced runs for its own time", o.command.join(" "), o.timed);
    }
    let r = experiment::program_lab::record_program(&o.command, o.timed)?;
    if let Some(path) = &o.keep {
        let f = std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        r.rec.write_to(std::io::BufWriter::new(f)).with_context(|| format!("writing {}", path.display()))?;
    }
    let name = o.command.join(" ");
    let input = SimInput::Recording { name: name.clone(), header: r.rec.header, events: r.rec.events, offsets: Vec::new(), accesses: None };
    Ok((input, format!("{name} (recorded in {:.1} s)", r.secs), Some(o.command.clone()), r.timed_range))
}

/// `thplab advise`.
pub fn run(o: &Options) -> Result<u8> {
    let space = load_space(o.space.as_deref())?;
    let pressure = Pressure { memory_max: o.memory_max, swap: o.swap.as_deref().map(SwapSpec::parse).transpose().map_err(anyhow::Error::msg)?.flatten() };
    let file = experiment::resolve::load_profile(&o.profile)?;
    if file.fault.is_none() {
        bail!("--profile {}: it has no [fault] costs, so no time can be predicted (give builtin or a profile from thplab calibrate)", o.profile);
    }
    let (input, source, program, timed_range) = input(o)?;
    if !pressure.is_none() && !matches!(input, SimInput::Workload(_)) {
        bail!("--memory-max/--swap: a recorded program is not yet predicted under a limit; give a workload, or leave them out");
    }
    let tlb = !matches!(input, SimInput::Recording { accesses: None, .. });
    let flags = experiment::resolve::ProfileFlags { tlb, ..Default::default() };
    let profile = experiment::resolve::profile(&flags, Some(&file))?;
    let machine = sim::MachineConfig { pressure, ..Default::default() };
    let jobs = o.jobs.map_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()), |j| j as usize);
    let command = program.as_ref().map(|c| c.join(" ")).unwrap_or_else(|| match &input {
        SimInput::Recording { header, .. } => argv(header),
        SimInput::Workload(_) => "PROGRAM".into(),
    });
    let model = crate::predict::Model { input: &input, machine: &machine, profile: &profile, timed_range, jobs };
    let req = crate::Request { source, model, space: &space, band: o.band / 100.0, min_gain: o.min_gain / 100.0, command };
    let mut advice = crate::advise(&req)?;
    if let (Some(n), Some(rec)) = (o.verify, advice.recommendation.clone()) {
        advice.verification = Some(verify(o, &advice, &rec, n as usize, &input, program.as_deref(), pressure)?);
    }
    let mut out = std::io::stdout().lock();
    if o.json {
        serde_json::to_writer_pretty(&mut out, &advice)?;
        use std::io::Write;
        writeln!(out)?;
    } else {
        // Folded to 100 columns at spaces, continuation lines indented past the line's own.
        let mut text = Vec::new();
        crate::render::text(&mut text, &advice)?;
        use std::io::Write;
        for line in String::from_utf8_lossy(&text).lines() {
            let indent = line.len() - line.trim_start().len() + 2;
            for l in report::text::wrap(line, Some(100), indent) {
                writeln!(out, "{l}")?;
            }
        }
    }
    Ok(0)
}

fn verify(o: &Options, a: &crate::Advice, rec: &crate::pareto::Recommendation, n: usize, input: &SimInput, program: Option<&[String]>, pressure: Pressure) -> Result<crate::verify::Verification> {
    if let Some(why) = experiment::host::live_unavailable() {
        return Err(live::LiveError::NotAvailable(format!("--verify: {why}")).into());
    }
    let live = match (input, program) {
        (SimInput::Workload(w), _) => crate::verify::Live::Workload { workload: w, pressure },
        (_, Some(cmd)) => crate::verify::Live::Program(cmd),
        (SimInput::Recording { .. }, None) => bail!("--verify with a recording: give the program after -- instead (advise records it and runs it live), or a workload"),
    };
    let picked = crate::verify::pick(&a.points, rec, n);
    crate::verify::run(&a.points, &picked, &live, o.runs, !o.json)
}
