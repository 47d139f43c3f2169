//! `thplab sweep STUDY.toml`: the arguments; the command is `sweep::sweep` (docs/sweeps.md).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;

/// Arguments of `thplab sweep`.
#[derive(Args, Clone, Debug)]
pub struct SweepArgs {
    /// The study (TOML: its axes and what to keep; docs/sweeps.md).
    pub study: PathBuf,
    /// The Parquet file to write, one row per point. Default: the study's path with the
    /// extension .parquet. Its journal (FILE.journal) holds the finished points: a re-run of
    /// the same study with the same output runs only the points it lacks.
    #[arg(long, short, value_name = "FILE.parquet")]
    pub output: Option<PathBuf>,
    /// Points run at once. Default: every core of this machine.
    #[arg(long, short, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub jobs: Option<u32>,
    /// Print a JSON summary (schema thplab-sweep/1: points, resumed, ran, failed, seconds,
    /// points per second) instead of the sentence.
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
    /// Run only point N (numbered from 0 in the study's order) and print its row as one JSON
    /// line; writes no file (for running points elsewhere, such as on Dask workers).
    #[arg(long, value_name = "N", conflicts_with = "dask")]
    pub point: Option<usize>,
    /// With --point: read the files the study names from other paths, a JSON object
    /// {"NAME": "PATH"} (a Dask worker's copies of the driver's files); a name it lacks is
    /// relative to the study's folder.
    #[arg(long, value_name = "FILES.json", requires = "point")]
    pub files: Option<PathBuf>,
    /// Run the points as tasks on this Dask scheduler (tcp://HOST:PORT) instead of here,
    /// through python3 and python/thplab/dask_driver.py (built in): each worker runs `thplab sweep
    /// STUDY --point N` with this binary (at the same path, or `thplab` on its PATH) on copies
    /// of the study and its files sent with the tasks (checked by SHA-256), so the workers need
    /// not share this file system. The rows go to the same journal and Parquet file.
    #[arg(long, value_name = "tcp://HOST:PORT")]
    pub dask: Option<String>,
}

impl SweepArgs {
    pub fn run(&self) -> Result<u8> {
        let study = match &self.files {
            Some(f) => sweep::study::load_shipped(&self.study, &sweep::dask::shipped(f)?)?,
            None => sweep::study::load(&self.study)?,
        };
        if let Some(n) = self.point {
            if n >= study.points.len() {
                bail!("--point {n}: the study {} has points 0 to {}", self.study.display(), study.points.len() - 1);
            }
            let loaded = sweep::run::load(&study)?;
            let row = sweep::run::row(&study, &loaded, n);
            let mut out = std::io::stdout().lock();
            writeln!(out, "{}", serde_json::json!({ "key": study.key(&study.points[n]), "row": row }))?;
            return Ok(crate::exit::OK);
        }
        let jobs = self.jobs.map_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()), |j| j as usize);
        let output = self.output.clone().unwrap_or_else(|| self.study.with_extension("parquet"));
        let s = sweep::sweep(&study, &sweep::Options { output, jobs, progress: !self.quiet && !self.json, dask: self.dask.clone() })?;
        if self.json {
            serde_json::to_writer_pretty(std::io::stdout().lock(), &s)?;
            println!();
        } else {
            println!("thplab sweep: {} points: {} from the journal, {} run, {} failed", s.points, s.resumed, s.ran, s.failed);
            println!("{:.1} s on {} threads, {:.1} points/s; wrote {}", s.seconds, s.jobs, s.points_per_second, s.output);
        }
        Ok(crate::exit::OK)
    }
}
