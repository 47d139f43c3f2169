//! One setting of `thplab compare --record`: the recorded program replayed in the model
//! (`sim::run_recording_opts`) and priced with a profile, run live (`live::run_program`)
//! `--repeat` times (the median by minflt kept, minflt judged against the runs' spread), run live
//! again while its differences may not be the model's ([`crate::retry_live`]), and judged row by
//! row with [`crate::Tolerance::program`] and the daemon's allowance ([`crate::khugepaged`]).
//! The CLI records the program (and again under a setting whose knobs it read, a model re-run
//! this module's [`ProgramOutcome::json`] names) and calls [`ProgramExperiment::run`] once per
//! setting.

use anyhow::Result;
use thp_abi::ThpSettings;
use uapi::RunResult;

use crate::khugepaged::KhugepagedTolerance;
use crate::model::{Rerun, RerunReason};
use crate::vmas::Parting;
use crate::{Row, RowKind, Tolerance};

/// A recording as the model replays it: its source (the command line), header and events.
pub type Recorded<'a> = (&'a str, &'a trace::Header, &'a [trace::Event]);

/// The model's side of a recorded program under one setting: its replay.
pub fn replay_model(rec: Recorded, s: &ThpSettings, machine: &sim::MachineConfig, replay: &sim::ReplayOptions) -> Result<RunResult> {
    let (source, header, events) = rec;
    Ok(sim::run_recording_opts(source, header, events, s, machine, replay)?)
}

/// With the profile's `[fault]` costs, the time of the replay `model` of `rec` (the program's
/// own time from the recording's timed runs, `timed_free` the free lists they met,
/// `timed_range` their range), and its ± ([`add_program_and_host_spread`]).
#[allow(clippy::too_many_arguments)]
pub fn price_replay(
    model: &mut RunResult,
    rec: Recorded,
    s: &ThpSettings,
    machine: &sim::MachineConfig,
    replay: &sim::ReplayOptions,
    fault: &uapi::profile::FaultCosts,
    timed_free: Option<&uapi::profile::FreeLists>,
    timed_range: Option<uapi::result::MsRange>,
) -> Result<()> {
    let (source, header, events) = rec;
    let mut t = sim::time::recording(model, source, header, events, machine, fault, replay, timed_free)?;
    add_program_and_host_spread(&mut t, timed_range, rec, machine, replay, s)?;
    model.time = Some(t);
    Ok(())
}

/// What stays the same over the settings of one `compare --record`.
pub struct ProgramExperiment<'a> {
    /// The program and its arguments.
    pub command: &'a [String],
    pub tolerance: &'a Tolerance,
    /// Live runs per setting (`--repeat`).
    pub repeat: u32,
    /// `--retries`.
    pub retries: u32,
    pub options: live::ProgramOptions,
    /// `--memory-max`/`--swap`: each live run in a memcg of its own with that limit and swap.
    pub pressure: thp_abi::Pressure,
    /// Called before each live run, its number from 1 (beyond `repeat`: a retry), with the
    /// model run it is compared with (to show progress and settle the host's free pages).
    pub before_live: &'a dyn Fn(&RunResult, u32),
}

/// One setting's live side and judgement.
pub struct ProgramOutcome {
    pub live: RunResult,
    pub rows: Vec<Row>,
    pub differs: bool,
    /// Where model and live part, per process.
    pub parted: Parting,
    /// `--repeat` > 1: the live runs' minflt.
    pub spread: Option<MinfltSpread>,
    pub khugepaged: KhugepagedTolerance,
    /// The rows only the khugepaged tolerance let pass.
    pub excused: Vec<String>,
    /// Live runs made beyond `repeat` plus one (1: no retry).
    pub attempts: u32,
    pub why: Option<RerunReason>,
    /// Every re-run, model and live, in order.
    pub reruns: Vec<Rerun>,
}

impl ProgramExperiment<'_> {
    /// Run `s` live against the `model` replay (`rerecorded`: the model was replayed again from a
    /// recording made under `s`); `untraced` is the live time set beside the model's (the median
    /// of the untraced runs under this setting, ms, and their range).
    pub fn run(&self, s: &ThpSettings, model: &RunResult, rerecorded: bool, untraced: (Option<f64>, Option<uapi::result::MsRange>)) -> Result<ProgramOutcome> {
        let n = std::cell::Cell::new(0);
        let run_live = || -> Result<RunResult> {
            n.set(n.get() + 1);
            (self.before_live)(model, n.get());
            let mut l = crate::hwtlb::live_counted(model, "thplab", || Ok(live::run_program_under(self.command, s, &self.options, &self.pressure)?))?;
            if let Some(live) = l.live.as_mut() {
                (live.untraced_ms, live.time_range_ms) = untraced;
            }
            Ok(l)
        };
        // --repeat N: N live runs; the median by minflt is shown, and the model's minflt is
        // judged against the runs' own spread (within the tolerance of its lowest or highest).
        let mut lives = Vec::new();
        for _ in 0..self.repeat.max(1) {
            lives.push(run_live()?);
        }
        lives.sort_by_key(|l| l.process.minflt);
        let spread = (lives.len() > 1).then(|| MinfltSpread { runs: lives.len(), min: lives[0].process.minflt, max: lives[lives.len() - 1].process.minflt });
        let live = lives.swap_remove((lives.len() - 1) / 2);
        // The live daemon's phase is not the model's: one wake-up's collapses are allowed, and
        // said (crate::khugepaged).
        let kh = KhugepagedTolerance::of_replay(model);
        let rows_of = |l: &RunResult| {
            let mut rows = program_rows(model, l, self.tolerance, spread);
            kh.apply(&mut rows);
            rows
        };
        let r = crate::retry_live(self.retries, live, rows_of, run_live)?;
        // Judged again to name the rows the tolerance excused (the same rows as retry_live's).
        let mut rows = program_rows(model, &r.live, self.tolerance, spread);
        let excused = kh.apply(&mut rows);
        let differs = rows.iter().any(|r| r.differs);
        let parted = crate::vmas::parting(model, &r.live);
        let mut reruns: Vec<Rerun> = rerecorded.then(|| Rerun { run: "model", reasons: vec![RerunReason::ModelProgramRecordedAgain] }).into_iter().collect();
        reruns.extend(r.reruns.iter().map(|&why| Rerun::live(why)));
        Ok(ProgramOutcome { live: r.live, rows, differs, parted, spread, khugepaged: kh, excused, attempts: r.attempts, why: r.why, reruns })
    }
}

impl ProgramOutcome {
    /// The setting's object of `compare --record --json` (`reruns` only where something ran
    /// again).
    pub fn json(&self, label: &str, s: &ThpSettings, model: &RunResult, rerecorded: bool) -> serde_json::Value {
        let t = &self.khugepaged;
        let kh = serde_json::json!({ "collapses": t.collapses, "max_ptes_none": t.max_ptes_none, "why": t.why, "excused": self.excused });
        let mut j = serde_json::json!({
            "label": label, "settings": s.knob_map(), "differs": self.differs, "rows": self.rows, "parted": self.parted, "rerecorded": rerecorded,
            "live_minflt_spread": self.spread, "khugepaged_tolerance": kh, "model": model, "live": self.live,
        });
        if !self.reruns.is_empty() {
            j["reruns"] = serde_json::to_value(&self.reruns).expect("serializes");
        }
        j
    }
}

/// [`crate::rows`] for a program: the per-size `nr_anon` and `nr_anon_partially_mapped` stats
/// are levels, which the model reports at the processes' exit and the live run reads after
/// they are gone (their folios freed): shown, not judged. Live major faults (a file page read
/// from disk) are shown beside minflt: they are not in live minflt, while the recording counted
/// them as faults, so a cold page cache puts live minflt below the model's.
pub fn program_rows(model: &RunResult, live: &RunResult, tol: &Tolerance, spread: Option<MinfltSpread>) -> Vec<Row> {
    let mut rows = crate::rows(model, live, tol);
    if let (Some(sp), Some(r)) = (spread, rows.iter_mut().find(|r| r.field == "minflt")) {
        let near = |v: u64| {
            let d = (r.model - v as i64).abs();
            d <= tol.minflt || (d as f64) <= tol.minflt_pct / 100.0 * v as f64
        };
        if (sp.min as i64..=sp.max as i64).contains(&r.model) || near(sp.min) || near(sp.max) {
            r.differs = false;
        }
        r.field = format!("minflt (live: median of {} runs, {}..{})", sp.runs, sp.min, sp.max);
    }
    for r in rows.iter_mut() {
        if r.field.ends_with("/stats/nr_anon") || r.field.ends_with("/stats/nr_anon_partially_mapped") {
            r.kind = RowKind::Informational;
            r.differs = false;
        }
    }
    let majflt: u64 = live.live.as_ref().and_then(|l| l.program.as_ref()).map_or(0, |p| p.processes.iter().map(|p| p.majflt).sum());
    if let Some(m) = model.process.majflt {
        pressure_rows(&mut rows, m, majflt, tol);
    } else if majflt > 0 {
        let at = rows.iter().position(|r| r.field.starts_with("minflt")).map_or(0, |i| i + 1);
        rows.insert(at, Row { field: "majflt (live: not in minflt)".into(), model: 0, live: majflt as i64, kind: RowKind::Informational, differs: false });
    }
    rows
}

/// Under memory pressure: the major faults judged as minflt is (every process's, model and
/// live), after minflt; reclaim's own choices (`pgscan_anon`, `pgsteal_anon`, `pgactivate`,
/// `pgdeactivate`: the live kernel scans its file LRU too, and other processes' pages) shown,
/// not judged. The swap counters (`pswpout`, `thp_swpout`, per-size `swpout`, ...) stay judged.
fn pressure_rows(rows: &mut Vec<Row>, model: u64, live: u64, tol: &Tolerance) {
    use thp_abi::ReclaimEvent as E;
    let d = (model as i64 - live as i64).abs();
    let differs = d > tol.minflt && (d as f64) > tol.minflt_pct / 100.0 * live as f64;
    let at = rows.iter().position(|r| r.field.starts_with("minflt")).map_or(0, |i| i + 1);
    rows.insert(at, Row { field: "majflt".into(), model: model as i64, live: live as i64, kind: RowKind::Process, differs });
    let shown = [E::PgscanAnon, E::PgstealAnon, E::Pgactivate, E::Pgdeactivate].map(|e| e.name());
    for r in rows.iter_mut().filter(|r| shown.contains(&r.field.as_str())) {
        r.kind = RowKind::Informational;
        r.differs = false;
    }
}

/// The live runs' minflt with `--repeat`: how many, the lowest and the highest.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct MinfltSpread {
    pub runs: usize,
    pub min: u64,
    pub max: u64,
}

/// Adds each setting's verdicts to its object of `compare --json` (`time_verdict`, where the
/// model has a time).
pub fn add_verdicts_json(json: &mut [serde_json::Value], verdicts: &[crate::noise::SettingTimes]) {
    for (j, v) in json.iter_mut().zip(verdicts) {
        if v.model.is_some() {
            j["time_verdict"] = serde_json::to_value(v).expect("serializes");
        }
    }
}

/// The ± of a recording's time beyond the profile's: the program's own time, the range of the
/// recording's timed runs (`timed_range`); and with a `[host]`, the host state: the setting's
/// replay again from free lists in which every free frame is reported (`sim::time::all_reported`).
pub fn add_program_and_host_spread(
    t: &mut uapi::TimeEstimate,
    timed_range: Option<uapi::result::MsRange>,
    (source, header, events): Recorded,
    machine: &sim::MachineConfig,
    replay: &sim::ReplayOptions,
    s: &ThpSettings,
) -> Result<()> {
    if t.uncertainty.is_some() || timed_range.is_some() {
        let profile = t.uncertainty.as_ref().map(|u| u.profile_ns.clone()).unwrap_or_default();
        sim::time::set_uncertainty(t, profile, timed_range.map_or(0.0, |r| (r.max - r.min) * 1e6));
    }
    if let Some((h, _)) = &replay.profile.host {
        let far = sim::Profile { host: Some((h.clone(), Some(sim::time::all_reported(machine.mem_bytes)))), ..Default::default() };
        let far = sim::ReplayOptions { profile: far, ..Default::default() };
        let r = sim::run_recording_opts(source, header, events, s, machine, &far)?;
        let (faults, ns) = sim::time::replay_host(&r, h);
        let assumed = match timed_range {
            Some(_) => "the free lists the median untraced run under this setting started from (after page reporting settled)",
            None => "the profile's free lists (every block of the reporting order and above reported: an idle machine as calibrated)",
        };
        sim::time::set_host_range(t, assumed.to_string(), faults, ns);
    }
    Ok(())
}
