//! `thplab sweep STUDY.toml`: a study's points (the cartesian product of its axes, or listed
//! points) run in the model on every core, one row per point, into one Parquet file; finished
//! points go to an append-only journal first, so that a killed sweep resumes where it was
//! (docs/sweeps.md).
//!
//! The model is the kernel's: this crate only schedules it. Module map:
//! - [`study`]: the TOML, checked with file and line.
//! - [`run`]: one point as `thplab sim --json` runs it (`experiment::simulate::sim_one`), and its row.
//! - [`journal`]: the append-only journal of finished rows (resume).
//! - [`table`]: the Parquet file.
//! - [`dask`]: the points as Dask tasks (`--dask`, python/thplab/dask_driver.py).
//! - [`plot`]: `thplab report STUDY.parquet`: the rows read back and plotted (`report::study`).

pub mod dask;
pub mod journal;
pub mod plot;
pub mod run;
pub mod study;
pub mod table;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use serde::Serialize;

pub use run::Row;
pub use study::Study;

/// How a sweep runs.
pub struct Options {
    /// The Parquet file; its journal is beside it ([`journal::path_for`]).
    pub output: PathBuf,
    /// Worker threads (at least 1).
    pub jobs: usize,
    /// A progress bar on stderr (drawn only on a terminal).
    pub progress: bool,
    /// Run the points on this Dask scheduler (`tcp://HOST:PORT`) instead of here.
    pub dask: Option<String>,
}

/// What a sweep did (`thplab sweep --json`).
#[derive(Debug, Serialize)]
pub struct Summary {
    pub schema: &'static str,
    pub study: String,
    pub output: String,
    pub journal: String,
    /// Points in the study.
    pub points: usize,
    /// Points found finished in the journal (not run again).
    pub resumed: usize,
    /// Points run now.
    pub ran: usize,
    /// Points whose row has an error (of all points).
    pub failed: usize,
    pub jobs: usize,
    /// Wall time of the points run now, and their rate.
    pub seconds: f64,
    pub points_per_second: f64,
}

/// Runs points elsewhere (the Python package's Dask client): given the points a journal lacks,
/// it tells the sink each point's row as it arrives.
pub type Remote<'a> = &'a mut dyn FnMut(&[usize], &mut dyn FnMut(usize, Row) -> Result<()>) -> Result<()>;

/// Run the points of `study` that its journal lacks, then write the Parquet file of all of them.
pub fn sweep(study: &Study, o: &Options) -> Result<Summary> {
    sweep_with(study, o, None)
}

/// [`sweep`], with the points run by `remote` when given (instead of here or on `o.dask`): the
/// rows go to the same journal and Parquet file.
pub fn sweep_with(study: &Study, o: &Options, remote: Option<Remote>) -> Result<Summary> {
    let loaded = run::load(study)?;
    let jpath = journal::path_for(&o.output);
    let (mut journal, mut done) = journal::Journal::open(&jpath, &study.keep)?;
    let keys: Vec<String> = study.points.iter().map(|p| study.key(p)).collect();
    let missing: Vec<usize> = (0..keys.len()).filter(|&n| !done.contains_key(&keys[n])).collect();
    let resumed = keys.len() - missing.len();
    let bar = progress_bar(o.progress, keys.len(), resumed);
    let start = Instant::now();
    let mut sink = |n: usize, row: Row| -> Result<()> {
        journal.append(&keys[n], &row)?;
        done.insert(keys[n].clone(), row);
        bar.inc(1);
        Ok(())
    };
    match (&o.dask, remote) {
        (_, Some(remote)) => remote(&missing, &mut sink)?,
        (Some(addr), None) => {
            let exe = std::env::current_exe().context("cannot find the thplab binary for the Dask workers")?;
            let path = study.path.canonicalize().with_context(|| format!("cannot find {}", study.path.display()))?;
            dask::run(addr, &exe, &path, &missing, &mut sink)?;
        }
        (None, None) => run_here(study, &loaded, &missing, o.jobs, &mut sink)?,
    }
    bar.finish_and_clear();
    let seconds = start.elapsed().as_secs_f64();
    let mut rows = Vec::with_capacity(keys.len());
    for (n, k) in keys.iter().enumerate() {
        let mut row = done.remove(k).with_context(|| format!("point {n} ({k}) did not finish"))?;
        row.insert("point".into(), serde_json::Value::from(n as u64));
        rows.push(row);
    }
    let failed = rows.iter().filter(|r| r.get("error").is_some_and(|e| !e.is_null())).count();
    table::write(&o.output, &rows)?;
    Ok(Summary {
        schema: "thplab-sweep/1",
        study: study.path.display().to_string(),
        output: o.output.display().to_string(),
        journal: jpath.display().to_string(),
        points: keys.len(),
        resumed,
        ran: missing.len(),
        failed,
        jobs: o.jobs.max(1),
        seconds,
        points_per_second: if seconds > 0.0 { missing.len() as f64 / seconds } else { 0.0 },
    })
}

/// Run `missing` on `jobs` threads here; `sink` is told each row as its point finishes.
fn run_here(study: &Study, loaded: &run::Loaded, missing: &[usize], jobs: usize, sink: &mut dyn FnMut(usize, Row) -> Result<()>) -> Result<()> {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(jobs.max(1)).build().context("cannot start the worker threads")?;
    let (tx, rx) = std::sync::mpsc::channel::<(usize, Row)>();
    std::thread::scope(|s| -> Result<()> {
        s.spawn(|| {
            use rayon::prelude::*;
            pool.install(|| missing.par_iter().for_each_with(tx, |tx, &n| drop(tx.send((n, run::row(study, loaded, n))))));
        });
        for (n, row) in rx {
            sink(n, row)?;
        }
        Ok(())
    })
}

fn progress_bar(show: bool, total: usize, done: usize) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let b = indicatif::ProgressBar::new(total as u64).with_position(done as u64);
    b.set_style(
        indicatif::ProgressStyle::with_template("thplab sweep [{bar:30}] {pos}/{len} points, {per_sec}, {eta} left")
            .expect("valid template")
            .progress_chars("=> "),
    );
    b.reset_eta();
    b
}
