//! The extension module `thplab._native` of the Python package (python/thplab, docs/python.md):
//! thin calls into the library crates the CLI calls, never the thplab binary. Each result
//! crosses as the JSON text `thplab sim --json` prints (`uapi::RunResult`), which the package
//! reads into a dict, so it indexes exactly as that JSON does.
//!
//! - `sim` ([`py_sim`]) runs a workload (built-in, file, or text from the package's builder) or a recording in
//!   the model, as `thplab sim` resolves it (`experiment::resolve`: settings as
//!   mm/huge_memory.c `setup_transparent_hugepage`, `setup_thp_anon` and the sysfs stores apply
//!   them; the machine; the profile), run by `experiment::simulate::sim_one`.
//! - `live` ([`py_live`]) runs as `thplab live` does: the model places the regions, `live::run_live` runs the
//!   workload through the settings guard (crates/live/src/guard.rs), the child being this
//!   package in a fresh python3 ([`py_exec_child`]) instead of `thplab __exec`.
//! - `sweep`, `sweep_remote`, `sweep_point` run `sweep::sweep_with` here, or with the points
//!   run by a Python callable (a Dask client, python/thplab/dask_driver.py).
//! - `parse_workload`, `examples`, `example_text` give the workload language and the built-in
//!   examples.

use std::path::PathBuf;

use anyhow::{Context, Result};
use experiment::resolve::{self, MachineFlags, ProfileFlags};
use experiment::simulate::{SimInput, SimOptions};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyIterator;

pyo3::create_exception!(thplab, ThplabError, PyValueError, "An error of thplab: the message names the file, the line and what is valid.");

/// A Rust error as a Python [`ThplabError`], with its whole chain.
fn py_err(e: anyhow::Error) -> PyErr {
    ThplabError::new_err(format!("{e:#}"))
}

/// How the settings, machine and profile of a run are given (the flags of `thplab sim`).
struct RunFlags {
    sets: Vec<String>,
    settings: Vec<String>,
    cmdline: Option<String>,
    profile: Option<String>,
    mem: String,
    memory_max: Option<String>,
    swap: Option<String>,
    cpu: Option<String>,
    paging: Option<String>,
    order0_scatter: Option<f64>,
    sample: Option<u64>,
}

impl RunFlags {
    fn settings(&self) -> Result<thp_abi::ThpSettings> {
        let files: Vec<PathBuf> = self.settings.iter().map(PathBuf::from).collect();
        resolve::settings(self.cmdline.as_deref(), &files, &self.sets)
    }

    fn machine(&self) -> Result<sim::MachineConfig> {
        resolve::machine(&MachineFlags { mem: &self.mem, mmap_base: None, brk_start: None, hz: 250, memory_max: self.memory_max.as_deref(), swap: self.swap.as_deref() })
    }

    fn profile(&self, input: &SimInput) -> Result<sim::Profile> {
        if let Some(s) = self.order0_scatter.filter(|s| !(0.0..=1.0).contains(s)) {
            anyhow::bail!("order0_scatter {s}: give a number from 0 to 1");
        }
        let file = self.profile.as_deref().map(resolve::load_profile).transpose()?;
        let tlb = !matches!(input, SimInput::Recording { accesses: None, .. });
        let flags = ProfileFlags { cpu: self.cpu.as_deref(), paging: self.paging.as_deref(), order0_scatter: self.order0_scatter, sample_ms: self.sample, tlb, latency: false };
        resolve::profile(&flags, file.as_ref())
    }
}

/// The input: `text` parsed as a workload named `name` (the builder's), else `name` as
/// `thplab sim` reads its argument (a built-in example, a workload file or a recording).
fn load_input(name: &str, text: Option<&str>) -> Result<SimInput> {
    match text {
        Some(t) => Ok(SimInput::Workload(workload::parse(name, t)?)),
        None => Ok(experiment::input::load_sim_input(name, false, false, &|_| {})?.0),
    }
}

fn sim_json(name: &str, text: Option<&str>, f: &RunFlags, recorded_time: bool, check: bool) -> Result<String> {
    let input = load_input(name, text)?;
    let (settings, machine, profile) = (f.settings()?, f.machine()?, f.profile(&input)?);
    let o = SimOptions { check, recorded_time, profile: &profile, salvage: None };
    let r = experiment::simulate::sim_one(&o, &input, &settings, &machine, None, false)?;
    Ok(serde_json::to_string(&r)?)
}

/// `thplab sim INPUT --json` as text: INPUT a built-in example, a workload file or a recording,
/// or `text` (a workload, named `input` in errors).
#[pyfunction]
#[pyo3(name = "sim")]
#[pyo3(signature = (input, text=None, sets=vec![], settings=vec![], cmdline=None, profile=None, mem="24G".to_string(), memory_max=None, swap=None, cpu=None, paging=None, order0_scatter=None, sample=None, recorded_time=true, check=false))]
#[allow(clippy::too_many_arguments)]
fn py_sim(
    py: Python<'_>,
    input: String,
    text: Option<String>,
    sets: Vec<String>,
    settings: Vec<String>,
    cmdline: Option<String>,
    profile: Option<String>,
    mem: String,
    memory_max: Option<String>,
    swap: Option<String>,
    cpu: Option<String>,
    paging: Option<String>,
    order0_scatter: Option<f64>,
    sample: Option<u64>,
    recorded_time: bool,
    check: bool,
) -> PyResult<String> {
    let f = RunFlags { sets, settings, cmdline, profile, mem, memory_max, swap, cpu, paging, order0_scatter, sample };
    py.detach(|| sim_json(&input, text.as_deref(), &f, recorded_time, check)).map_err(py_err)
}

fn live_json(name: &str, text: Option<&str>, f: &RunFlags, repeat: u32, child: (PathBuf, Vec<String>)) -> Result<String> {
    live::command::recover_before_command();
    let SimInput::Workload(w) = load_input(name, text)? else {
        anyhow::bail!("{name} is a recording; live runs workloads (a recorded program runs live with `thplab compare --record`)");
    };
    let (settings, machine) = (f.settings()?, f.machine()?);
    // The model decides where regions go; the live executor maps them at the same addresses.
    let model = experiment::simulate::run_sim_tlb(&w, &settings, &machine, false, false, None, &sim::Profile::default())?;
    let sampled = sim::Profile { sample_ms: f.sample, ..Default::default() };
    let base = experiment::host::exec_options(repeat, false, &sampled, false);
    let opts = live::ExecOptions { child_program: child.0, child_args: child.1, pressure: machine.pressure, ..base };
    let r = live::run_live(&w, &settings, &model.regions, &opts).context("live run")?;
    Ok(serde_json::to_string(&r)?)
}

/// `thplab live INPUT --json` as text (root, on a kernel with the THP sysfs tree): the knobs are
/// set through the settings guard and restored. The child runs `child_program child_args...`
/// (python3 -c "...exec_child()"), which reads its spec on standard input.
#[pyfunction]
#[pyo3(name = "live")]
#[pyo3(signature = (input, child_program, child_args, text=None, sets=vec![], settings=vec![], cmdline=None, mem="24G".to_string(), memory_max=None, swap=None, sample=None, repeat=1))]
#[allow(clippy::too_many_arguments)]
fn py_live(
    py: Python<'_>,
    input: String,
    child_program: String,
    child_args: Vec<String>,
    text: Option<String>,
    sets: Vec<String>,
    settings: Vec<String>,
    cmdline: Option<String>,
    mem: String,
    memory_max: Option<String>,
    swap: Option<String>,
    sample: Option<u64>,
    repeat: u32,
) -> PyResult<String> {
    let f = RunFlags { sets, settings, cmdline, profile: None, mem, memory_max, swap, cpu: None, paging: None, order0_scatter: None, sample };
    py.detach(|| live_json(&input, text.as_deref(), &f, repeat, (PathBuf::from(child_program), child_args))).map_err(py_err)
}

/// Why live runs cannot happen here, or None.
#[pyfunction]
#[pyo3(name = "live_unavailable")]
fn py_live_unavailable() -> Option<String> {
    experiment::host::live_unavailable()
}

/// The child side of a live run (`thplab __exec`): reads the spec on standard input, runs it
/// and exits the process.
#[pyfunction]
#[pyo3(name = "exec_child")]
fn py_exec_child() {
    live::command::exec_child()
}

/// Parse `text` as a workload named `name`: its statements' count, or the parser's error
/// (`workload NAME line N: ...`, what is valid).
#[pyfunction]
#[pyo3(name = "parse_workload")]
fn py_parse_workload(name: &str, text: &str) -> PyResult<usize> {
    let w = workload::parse(name, text).map_err(|e| py_err(e.into()))?;
    Ok(w.ops.len())
}

/// The built-in examples: (name, one-line description).
#[pyfunction]
#[pyo3(name = "examples")]
fn py_examples() -> Vec<(&'static str, &'static str)> {
    experiment::examples::described()
}

/// A built-in example's text.
#[pyfunction]
#[pyo3(name = "example_text")]
fn py_example_text(name: &str) -> PyResult<&'static str> {
    experiment::examples::get(name)
        .ok_or_else(|| ThplabError::new_err(format!("no built-in example '{name}'; built-in examples: {}", experiment::examples::names().join(", "))))
}

fn sweep_options(out: &str, jobs: Option<usize>, progress: bool) -> sweep::Options {
    let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    sweep::Options { output: PathBuf::from(out), jobs, progress, dask: None }
}

/// `thplab sweep STUDY -o OUT --json` here, on `jobs` threads: the summary as JSON text.
#[pyfunction]
#[pyo3(name = "sweep")]
#[pyo3(signature = (study, out, jobs=None, progress=false))]
fn py_sweep(py: Python<'_>, study: String, out: String, jobs: Option<usize>, progress: bool) -> PyResult<String> {
    py.detach(|| -> Result<String> {
        let s = sweep::study::load(std::path::Path::new(&study))?;
        Ok(serde_json::to_string(&sweep::sweep(&s, &sweep_options(&out, jobs, progress))?)?)
    })
    .map_err(py_err)
}

/// A sweep whose points `runner(points)` runs elsewhere (python/thplab/dask_driver.py on a Dask
/// client): it returns an iterable of (point, journal line) as the points finish; the rows go
/// to the same journal and Parquet file as a local run's. The summary as JSON text.
#[pyfunction]
#[pyo3(name = "sweep_remote")]
fn py_sweep_remote(study: String, out: String, runner: Bound<'_, PyAny>) -> PyResult<String> {
    let s = sweep::study::load(std::path::Path::new(&study)).map_err(py_err)?;
    let o = sweep_options(&out, Some(1), false);
    let mut py_error: Option<PyErr> = None;
    let mut remote = |points: &[usize], sink: &mut dyn FnMut(usize, sweep::Row) -> Result<()>| -> Result<()> {
        let mut keep = |e: PyErr| {
            let msg = e.to_string();
            py_error = Some(e);
            anyhow::anyhow!("the Dask runner failed: {msg}")
        };
        let it = runner.call1((points.to_vec(),)).map_err(&mut keep)?;
        for item in PyIterator::from_object(&it).map_err(&mut keep)? {
            let (n, line) = item.and_then(|i| i.extract::<(usize, String)>()).map_err(&mut keep)?;
            let (_, row) = sweep::dask::parse(&format!("{n}\t{line}")).with_context(|| format!("point {n}: the runner gave '{line}'"))?;
            sink(n, row)?;
        }
        Ok(())
    };
    match sweep::sweep_with(&s, &o, Some(&mut remote)) {
        Ok(summary) => Ok(serde_json::to_string(&summary).map_err(|e| py_err(e.into()))?),
        Err(e) => Err(py_error.take().unwrap_or_else(|| py_err(e))),
    }
}

/// Point `n` of a study as `thplab sweep STUDY --point N` prints it: one journal line.
#[pyfunction]
#[pyo3(name = "sweep_point")]
fn py_sweep_point(py: Python<'_>, study: String, n: usize) -> PyResult<String> {
    py.detach(|| -> Result<String> {
        let s = sweep::study::load(std::path::Path::new(&study))?;
        anyhow::ensure!(n < s.points.len(), "point {n}: the study {study} has points 0 to {}", s.points.len().saturating_sub(1));
        let loaded = sweep::run::load(&s)?;
        let row = sweep::run::row(&s, &loaded, n);
        Ok(serde_json::json!({ "key": s.key(&s.points[n]), "row": row }).to_string())
    })
    .map_err(py_err)
}

#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ThplabError", m.py().get_type::<ThplabError>())?;
    m.add_function(wrap_pyfunction!(py_sim, m)?)?;
    m.add_function(wrap_pyfunction!(py_live, m)?)?;
    m.add_function(wrap_pyfunction!(py_live_unavailable, m)?)?;
    m.add_function(wrap_pyfunction!(py_exec_child, m)?)?;
    m.add_function(wrap_pyfunction!(py_parse_workload, m)?)?;
    m.add_function(wrap_pyfunction!(py_examples, m)?)?;
    m.add_function(wrap_pyfunction!(py_example_text, m)?)?;
    m.add_function(wrap_pyfunction!(py_sweep, m)?)?;
    m.add_function(wrap_pyfunction!(py_sweep_remote, m)?)?;
    m.add_function(wrap_pyfunction!(py_sweep_point, m)?)?;
    Ok(())
}
