//! One point of a study in the model, as `thplab sim --json` runs it
//! (`experiment::simulate::sim_one`, the same entry and options), flattened into one row: the
//! point's axes, its error if it failed, and the kept sections of its result as columns
//! (`process.minflt`, `vmstat.thp_fault_alloc`, `mthp.hugepages-64kB.anon_fault_alloc`,
//! `census.sizes.2048kB.pmd_mapped`, `time.total_ns`, `accesses.total.dtlb_misses`, ...).

use std::path::Path;

use anyhow::{Context, Result};
use experiment::simulate::{SimInput, SimOptions};
use serde_json::{Map, Value};
use uapi::profile::MachineProfile;

use crate::study::{Point, Study, DEFAULT};

/// A row: column name → value (an integer, a string, a boolean, null, or a float as
/// [`float`] writes it).
pub type Row = Map<String, Value>;

/// A float in a row: `{"f": "DIGITS"}`, its shortest decimal that reads back to the same f64
/// (as `thplab sim --json` prints it). serde_json's own float parse may be one unit in the
/// last place off, and a workspace-wide `float_roundtrip` would change other commands' output;
/// the table reads the digits with Rust's exact `str::parse` ([`float_of`]).
pub fn float(x: f64) -> Value {
    serde_json::json!({ "f": Value::from(x).to_string() })
}

/// The f64 of a row's value: a [`float`] read exactly, or a JSON number.
pub fn float_of(v: &Value) -> Option<f64> {
    match v {
        Value::Object(m) => m.get("f")?.as_str()?.parse().ok(),
        v => v.as_f64(),
    }
}

/// The simulated machine's memory when a study does not say (`thplab sim --mem`'s default).
pub const DEFAULT_MEM: &str = "24G";
/// The machine of `--mem SIZE`, as `thplab sim --mem` resolves it
/// (`experiment::resolve::machine`), or what is valid.
pub fn machine(mem: &str) -> Result<sim::MachineConfig> {
    let mem = if mem == DEFAULT { DEFAULT_MEM } else { mem };
    let flags = experiment::resolve::MachineFlags { mem, mmap_base: None, brk_start: None, hz: sim::MachineConfig::default().hz, memory_max: None, swap: None };
    experiment::resolve::machine(&flags).map_err(|e| anyhow::anyhow!("{}", format!("{e:#}").replacen("--mem ", "mem ", 1)))
}

/// A machine profile file (`thplab calibrate -o FILE`).
pub fn load_profile(path: &Path) -> Result<MachineProfile> {
    let text = experiment::input::read_text_limited(path, "machine profile", uapi::profile::MAX_PROFILE_BYTES as u64)?;
    Ok(MachineProfile::parse(&path.display().to_string(), &text)?)
}

/// What the points share: the inputs, read once, and the profiles.
pub struct Loaded {
    inputs: Vec<SimInput>,
    profiles: Vec<Option<MachineProfile>>,
}

/// Read every input and profile of the study.
pub fn load(study: &Study) -> Result<Loaded> {
    let mut inputs = Vec::new();
    for (name, path) in &study.inputs {
        inputs.push(experiment::input::load_sim_input(path, false, false, &|_| {}).with_context(|| format!("study {}: {name}", study.path.display()))?.0);
    }
    let mut profiles = Vec::new();
    for p in &study.profile {
        profiles.push(match p.as_str() {
            DEFAULT | "none" => None,
            "builtin" => Some(MachineProfile::builtin()),
            f => Some(load_profile(&study.file(f))?),
        });
    }
    Ok(Loaded { inputs, profiles })
}

/// The result of point number `n` as `thplab sim --json` prints it: its profile resolved as
/// `sim` resolves it (`experiment::resolve::profile`; the study checked the cpu and paging).
pub fn simulate(study: &Study, loaded: &Loaded, p: &Point) -> Result<uapi::RunResult> {
    let file = loaded.profiles[p.profile].as_ref();
    let input = &loaded.inputs[p.input];
    let flags = experiment::resolve::ProfileFlags {
        cpu: given(&study.cpu[p.cpu]),
        paging: given(&study.paging[p.paging]),
        tlb: !matches!(input, SimInput::Recording { accesses: None, .. }),
        ..Default::default()
    };
    let profile = experiment::resolve::profile(&flags, file)?;
    let o = SimOptions { check: false, recorded_time: true, profile: &profile, salvage: None };
    let machine = machine(&study.mem[p.mem])?;
    experiment::simulate::sim_one(&o, input, &study.settings[p.settings].1, &machine, None, false)
}

/// A `--cpu`/`--paging` value as given, `None` for the study's `default`.
fn given(v: &str) -> Option<&str> {
    (v != DEFAULT).then_some(v)
}

/// Point `n`'s row: its number and axes, then its figures, or its error (a point that fails
/// fails alone).
pub fn row(study: &Study, loaded: &Loaded, n: usize) -> Row {
    let p = &study.points[n];
    let mut row = Row::new();
    row.insert("point".into(), Value::from(n as u64));
    for (k, v) in study.axes(p) {
        row.insert(k.into(), Value::from(v));
    }
    match simulate(study, loaded, p).and_then(|r| Ok(serde_json::to_value(&r)?)) {
        Ok(json) => {
            row.insert("error".into(), Value::Null);
            figures(&json, &study.keep, &mut row);
        }
        Err(e) => {
            row.insert("error".into(), Value::from(format!("{e:#}")));
        }
    }
    row
}

/// The kept sections of a result's JSON as flat columns `section.key.key`; arrays are left out.
pub fn figures(result: &Value, keep: &[String], row: &mut Row) {
    for k in keep {
        if let Some(v) = result.get(k) {
            flatten(k, v, row);
        }
    }
}

fn flatten(name: &str, v: &Value, row: &mut Row) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                flatten(&format!("{name}.{k}"), x, row);
            }
        }
        Value::Array(_) | Value::Null => {}
        Value::Number(n) if n.is_f64() => {
            row.insert(name.to_string(), float(n.as_f64().expect("a float")));
        }
        leaf => {
            row.insert(name.to_string(), leaf.clone());
        }
    }
}
