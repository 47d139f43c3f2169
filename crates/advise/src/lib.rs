//! `thplab advise`: what to set for one program (docs/advise.md). The program is recorded once
//! (`experiment::program_lab::record_program`, THP disabled for it, then timed untraced), or a
//! recording or workload is taken as it is; every point of a search space ([`space`]) is
//! predicted in the model in parallel ([`predict`]); the Pareto front of predicted time against
//! memory and the recommendation follow a stated rule ([`pareto`]); the choice is written out
//! ([`writers`]); `--verify N` runs the top N live ([`verify`]).
//!
//! The model is the kernel's (crates/mm, crates/sim): this crate searches and judges. Module map:
//! - [`space`]: the search space, built in or from `--space FILE.toml`.
//! - [`predict`]: each point in the model; per-process choices written into a workload.
//! - [`pareto`]: the front and the recommendation rule, with its noise band.
//! - [`writers`]: sysfs commands, kernel command line, tmpfiles.d, systemd unit, per-program forms.
//! - [`verify`]: the top N live, the median of 5 each, through the settings guard.
//! - [`render`]: the advice as text.
//! - [`command`]: the clap options of `thplab advise` and the command.

pub mod command;
pub mod pareto;
pub mod predict;
pub mod render;
pub mod space;
pub mod verify;
pub mod writers;

use std::time::Instant;

use anyhow::Result;
use experiment::simulate::SimInput;
use serde::Serialize;
use uapi::RunResult;

use pareto::{Point, Recommendation};
use space::{Choice, Space};

/// The model's time error band unless `--band` says otherwise, percent of the modelled work.
pub const DEFAULT_BAND_PCT: f64 = 15.0;
/// The least gain named a winner unless `--min-gain` says otherwise, percent of the defaults' time.
pub const DEFAULT_MIN_GAIN_PCT: f64 = 1.0;

/// One predicted point.
#[derive(Clone, Debug, Serialize)]
pub struct Scored {
    pub choice: Choice,
    /// `product` or `refine`.
    pub stage: &'static str,
    /// None when the model run failed (`error`).
    pub point: Option<Point>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The changed knobs, `PATH=VALUE`.
    pub changes: Vec<String>,
    #[serde(skip)]
    pub result: Option<RunResult>,
}

/// The advice (`thplab advise --json`, schema `thplab-advise/1`).
#[derive(Debug, Serialize)]
pub struct Advice {
    pub schema: &'static str,
    /// The program, recording or workload.
    pub source: String,
    /// The noise band, percent of the modelled work.
    pub band_pct: f64,
    /// The least gain named a winner, percent of the defaults' time.
    pub min_gain_pct: f64,
    pub points: Vec<Scored>,
    /// Indices into `points` on the front, fastest first.
    pub front: Vec<usize>,
    /// Indices into `points`, as `front` (None: no defaults point succeeded).
    pub recommendation: Option<Recommendation>,
    /// The recommended choice written out (a winner only).
    pub written: Option<writers::Written>,
    /// Per-process choices of the space the model cannot express for this input
    /// ([`predict::NOT_FOR_RECORDING`] says why).
    pub not_expressible: Vec<String>,
    /// Wall time of the predictions, s, and threads.
    pub model_seconds: f64,
    pub jobs: usize,
    /// `--verify N`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verification: Option<verify::Verification>,
}

/// What to advise on and how.
pub struct Request<'a> {
    pub source: String,
    pub model: predict::Model<'a>,
    pub space: &'a Space,
    /// A fraction: 0.15 for 15 %.
    pub band: f64,
    /// A fraction of the defaults' time: 0.01 for 1 %.
    pub min_gain: f64,
    /// The program's command line, for the per-program forms (a workload: its name).
    pub command: String,
}

/// Predict the space, find the front and the recommendation, write the choice out.
pub fn advise(r: &Request) -> Result<Advice> {
    let start = Instant::now();
    let input = r.model.input;
    let mut not_expressible = Vec::new();
    let mut product: Vec<Choice> = Vec::new();
    for c in &r.space.product {
        if predict::expressible(input, c) {
            product.push(c.clone());
        } else if !not_expressible.iter().any(|n: &String| n == c.process.label()) {
            not_expressible.push(c.process.label().to_string());
        }
    }
    if !product.iter().any(Choice::is_default) {
        product.push(Choice { label: "defaults (6.18 boot)".into(), settings: Default::default(), process: space::Process::None });
    }
    let mut points = score(&r.model, product, "product")?;
    let refined = refinements(r.space, &points);
    points.extend(score(&r.model, refined, "refine")?);
    let model_seconds = start.elapsed().as_secs_f64();
    let ok: Vec<usize> = (0..points.len()).filter(|&i| points[i].point.is_some()).collect();
    let pts: Vec<Point> = ok.iter().map(|&i| points[i].point.clone().expect("ok")).collect();
    let front = pareto::front(&pts).into_iter().map(|i| ok[i]).collect();
    let recommendation = pareto::recommend(&pts, r.band, r.min_gain).map(|rec| remap(rec, &ok));
    let written = match &recommendation {
        Some(Recommendation::Winner { index, .. }) => Some(writers::write(&points[*index].choice, &r.command)),
        _ => None,
    };
    Ok(Advice {
        schema: "thplab-advise/1",
        source: r.source.clone(),
        band_pct: r.band * 100.0,
        min_gain_pct: r.min_gain * 100.0,
        points,
        front,
        recommendation,
        written,
        not_expressible,
        model_seconds,
        jobs: r.model.jobs,
        verification: None,
    })
}

fn score(m: &predict::Model, choices: Vec<Choice>, stage: &'static str) -> Result<Vec<Scored>> {
    let results = predict::run_all(m, &choices)?;
    Ok(choices
        .into_iter()
        .zip(results)
        .map(|(choice, r)| {
            let changes = choice.changes().into_iter().map(|(p, v)| format!("{p}={v}")).collect();
            match r {
                Ok(res) if res.time.is_some() => Scored { point: Some(predict::point(&choice, &res)), choice, stage, error: None, changes, result: Some(res) },
                Ok(_) => Scored { choice, stage, point: None, error: Some("no time: the profile has no [fault] costs".into()), changes, result: None },
                Err(e) => Scored { choice, stage, point: None, error: Some(e), changes, result: None },
            }
        })
        .collect())
}

/// Each refinement on the `top` fastest points of the product (a point already in the space is
/// not run twice).
fn refinements(space: &Space, points: &[Scored]) -> Vec<Choice> {
    let mut order: Vec<&Scored> = points.iter().filter(|s| s.point.is_some()).collect();
    order.sort_by(|a, b| {
        let (p, q) = (a.point.as_ref().expect("ok"), b.point.as_ref().expect("ok"));
        p.time_ns.total_cmp(&q.time_ns).then(p.memory_bytes.cmp(&q.memory_bytes))
    });
    let mut out: Vec<Choice> = Vec::new();
    for base in order.into_iter().take(space.top) {
        for r in &space.refine {
            if let Some(c) = space::refined(&base.choice, r) {
                let known = |x: &Choice| x.settings == c.settings && x.process == c.process;
                if !points.iter().any(|s| known(&s.choice)) && !out.iter().any(known) {
                    out.push(c);
                }
            }
        }
    }
    out
}

/// A recommendation over the successful points, its indices mapped back to all points.
fn remap(r: Recommendation, ok: &[usize]) -> Recommendation {
    match r {
        Recommendation::Winner { index, fastest, baseline, gain_pct, noise_pct } => Recommendation::Winner { index: ok[index], fastest: ok[fastest], baseline: ok[baseline], gain_pct, noise_pct },
        Recommendation::NoWinner { baseline, fastest, gain_pct, noise_pct, spread_pct, least_memory } => Recommendation::NoWinner { baseline: ok[baseline], fastest: ok[fastest], gain_pct, noise_pct, spread_pct, least_memory: least_memory.map(|i| ok[i]) },
    }
}

/// The input as a simulation input, from a file or example name (`thplab sim`'s loader).
pub fn load_input(arg: &str) -> Result<SimInput> {
    Ok(experiment::input::load_sim_input(arg, false, false, &|_| {})?.0)
}
