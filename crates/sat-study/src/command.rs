//! `thplab study sat`: the clap options, the run, and the table set beside the document's.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use crate::gen;
use crate::solver::{self, Answer, Solver};
use crate::study::{self, Live};

/// Arguments of `thplab study`.
#[derive(Args, Debug)]
pub struct StudyArgs {
    #[command(subcommand)]
    pub study: Study,
}

/// The built-in studies.
#[derive(Subcommand, Debug)]
pub enum Study {
    /// The SAT-solver experiment (issue #32): a solver on a generated random 3-SAT instance,
    /// recorded once with its accesses (QEMU), predicted under 4 KiB pages, PMD THP and
    /// glibc.malloc.hugetlb=1 on this machine's profile and on `native` and `nested-2m`
    /// paging, run live (median of --runs), the PMD-over-4 KiB time ratios side by side with
    /// the document's table (docs/sat-study.md). Needs root, qemu-user and the solver.
    Sat(Options),
}

/// Arguments of `thplab study sat`.
#[derive(Args, Debug, Clone)]
pub struct Options {
    /// The solver: minisat, picosat or cadical (Debian packages of those names).
    #[arg(long, value_name = "NAME", default_value = "minisat")]
    pub solver: Solver,
    /// Variables of the instance (the default, seed 1: minisat took 35 s of wall time on it at a
    /// load average of 19 here; 200 variables 0.34 s of CPU; each 25 more take several times
    /// longer near the threshold).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_VARS, value_parser = clap::value_parser!(u32).range(3..=10_000_000))]
    pub vars: u32,
    /// Clauses per variable (4.26: random 3-SAT's phase transition, the hardest instances).
    #[arg(long, value_name = "R", default_value_t = gen::THRESHOLD, value_parser = ratio)]
    pub ratio: f64,
    /// The generator's seed: the same seed, variables and ratio give the same instance.
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,
    /// Plant a satisfying assignment (the instance is then satisfiable, its witness checked).
    #[arg(long)]
    pub planted: bool,
    /// Where the instance, the recording and the solver's witness are written.
    #[arg(long, value_name = "DIR", default_value = "sat-study")]
    pub dir: PathBuf,
    /// Live runs per configuration (their median is its live time).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub runs: u32,
    /// Untraced runs after the recording, whose median is the program's own time.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub timed: u32,
    /// The TLB model's CPU preset (`thplab sim --cpu`; this machine kind is zen4).
    #[arg(long, value_name = "PRESET", default_value = "zen4")]
    pub cpu: String,
    /// Record and predict only: no live runs.
    #[arg(long)]
    pub no_live: bool,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// The default instance size (measured under minisat: docs/sat-study.md).
pub const DEFAULT_VARS: u32 = 250;

fn ratio(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("'{s}' is not a number; give clauses per variable from 0.5 to 20, such as 4.26"))?;
    if !(0.5..=20.0).contains(&v) {
        return Err(format!("{v} is outside 0.5 to 20 clauses per variable (4.26 is the threshold)"));
    }
    Ok(v)
}

/// `thplab study ...`.
pub fn run(a: &StudyArgs) -> Result<u8> {
    match &a.study {
        Study::Sat(o) => run_sat(o),
    }
}

/// What the study found (`--json`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Outcome {
    pub solver: &'static str,
    pub vars: u32,
    pub clauses: usize,
    pub ratio: f64,
    pub seed: u64,
    pub planted: bool,
    pub answer: String,
    /// The witness satisfies the instance (None: no witness, an UNSAT answer).
    pub witness_ok: Option<bool>,
    pub recording_wall_s: f64,
    pub native_s: f64,
    /// The recording's wall time over the native run's.
    pub overhead: f64,
    /// Per paging mode ("profile" for the built-in profile's own), the predicted wall time
    /// (s) of each configuration of [`CONFIGS`].
    pub predicted: Vec<(String, [f64; 3])>,
    /// Live: the median and range (s) of each configuration.
    pub live: Option<[(f64, f64, f64); 3]>,
}

/// `thplab study sat`.
pub fn run_sat(o: &Options) -> Result<u8> {
    let exe = o.solver.path().map_err(anyhow::Error::msg)?;
    std::fs::create_dir_all(&o.dir).with_context(|| format!("cannot create --dir {}", o.dir.display()))?;
    let dir = o.dir.canonicalize().with_context(|| format!("--dir {}", o.dir.display()))?;
    let inst = gen::generate(o.vars, o.ratio, o.seed, o.planted);
    let how = format!("thplab study sat: random 3-SAT, {} variables, ratio {}, seed {}{}", o.vars, o.ratio, o.seed, if o.planted { ", planted" } else { "" });
    let cnf = dir.join("instance.cnf");
    std::fs::write(&cnf, inst.dimacs(&how)).with_context(|| format!("cannot write {}", cnf.display()))?;
    let model = dir.join("witness.txt");
    let argv = o.solver.argv(&exe, &cnf, Some(&model));
    let rec = study::record(&argv, &dir.join(format!("{}.trace", o.solver.name())), o.timed)?;
    let answer = Answer::of_status(rec.status);
    let witness_ok = match answer {
        Answer::Sat => Some(std::fs::read_to_string(&model).ok().and_then(|t| solver::parse_model(&t, inst.vars)).is_some_and(|a| inst.satisfied_by(&a))),
        _ => None,
    };
    let mut predicted = Vec::new();
    for paging in [None, Some("native"), Some("nested-2m")] {
        eprintln!("thplab study sat: predicting on {} paging", paging.unwrap_or("the profile's"));
        predicted.push((paging.unwrap_or("profile").to_string(), study::predict(&rec.trace, &o.cpu, paging)?));
    }
    let live = if o.no_live { None } else { Some(study::live(&argv, o.runs)?.map(|l: Live| (l.median_s, l.min_s, l.max_s))) };
    let out = Outcome {
        solver: o.solver.name(),
        vars: inst.vars,
        clauses: inst.clauses.len(),
        ratio: o.ratio,
        seed: o.seed,
        planted: o.planted,
        answer: answer.word(),
        witness_ok,
        recording_wall_s: rec.wall_s,
        native_s: rec.native_s,
        overhead: rec.wall_s / rec.native_s.max(1e-9),
        predicted: predicted.into_iter().map(|(p, ns)| (p, ns.map(|n| n / 1e9))).collect(),
        live,
    };
    if o.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", crate::table::render(&out));
    }
    Ok(0)
}
