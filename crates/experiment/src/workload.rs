//! One setting of `thplab compare WORKLOAD` (and of `demo`): the model, the live run at the
//! model's addresses, the model again from the state the live run started from
//! ([`crate::model::remodel`]), the live run again while its differences may not be the model's
//! ([`crate::retry_live`]), the model again from the run kept, the rows and, with `--sample`,
//! the timelines. The CLI builds a [`WorkloadExperiment`] and calls
//! [`WorkloadExperiment::compare`] once, which runs [`WorkloadExperiment::run`] per setting.

use anyhow::Result;
use thp_abi::ThpSettings;
use uapi::RunResult;

use crate::model::{remodel, run_model, Rerun, RerunReason};
use crate::timeline::TimelineComparison;
use crate::{Row, Tolerance};

/// What stays the same over the settings of one `compare`.
pub struct WorkloadExperiment<'a> {
    pub workload: &'a workload::Workload,
    pub machine: &'a sim::MachineConfig,
    /// What the model is priced and observed with (its `sample_ms` samples the live run too).
    pub profile: &'a sim::Profile,
    /// Live runs per setting (`--repeat`; the median reported).
    pub repeat: u32,
    /// `--retries`: live runs again at most, while [`crate::retry_reason`] says why.
    pub retries: u32,
    pub tolerance: &'a Tolerance,
    /// `compare --live-result`: a saved live run in place of running live (nothing retried).
    pub saved_live: Option<&'a RunResult>,
    /// Waits until page reporting has taken every free block (the CLI shows the wait).
    pub settle_host: &'a dyn Fn(),
}

/// One setting's experiment.
pub struct Outcome {
    /// The model run kept: from the state the kept live run started from.
    pub model: RunResult,
    pub live: RunResult,
    pub rows: Vec<Row>,
    /// `--sample`: the two timelines side by side.
    pub timeline: Option<TimelineComparison>,
    /// A row or the timeline differs beyond the tolerance.
    pub differs: bool,
    /// Live runs made (1: no retry).
    pub attempts: u32,
    /// Why the first live run was run again.
    pub why: Option<RerunReason>,
    /// Every re-run, model and live, in order, with its reasons.
    pub reruns: Vec<Rerun>,
}

impl WorkloadExperiment<'_> {
    /// The model, then live, then the model again from where the live run started, the live
    /// run again while its differences may not be the model's, and the model again from the
    /// run kept.
    pub fn run(&self, s: &ThpSettings) -> Result<Outcome> {
        let (w, machine, x) = (self.workload, self.machine, self.profile);
        let mut reruns = Vec::new();
        let first = run_model(w, s, machine, false, None, x, None)?;
        let live = match self.saved_live {
            Some(l) => l.clone(),
            None => self.run_live(&first, s)?,
        };
        let (model, again) = remodel(w, s, machine, x, first, &live)?;
        reruns.extend(again);
        let retries = if self.saved_live.is_some() { 0 } else { self.retries };
        let r = crate::retry_live(retries, live, |l| crate::rows(&model, l, self.tolerance), || self.run_live(&model, s))?;
        reruns.extend(r.reruns.iter().map(|&why| Rerun::live(why)));
        // The run kept started from its own free lists: the model again from those.
        let (model, rows) = if r.attempts > 1 && x.host.is_some() {
            let (m, again) = remodel(w, s, machine, x, model, &r.live)?;
            reruns.extend(again);
            let rows = crate::rows(&m, &r.live, self.tolerance);
            (m, rows)
        } else {
            (model, r.rows)
        };
        let live = r.live;
        // With --sample: the two timelines, and when each collapse happened in each.
        let timeline = match (&model.timeline, &live.timeline) {
            (Some(m), Some(l)) => Some(crate::timeline::compare(m, l, s.khugepaged.scan_sleep_millisecs as u64, live.live.as_ref().and_then(|x| x.khugepaged.runqueue_wait_ms))),
            _ => None,
        };
        let differs = rows.iter().any(|r| r.differs) || timeline.as_ref().is_some_and(|t| t.differs);
        Ok(Outcome { model, live, rows, timeline, differs, attempts: r.attempts, why: r.why, reruns })
    }

    /// The workload live at the model run's addresses ([`run_live_as_modelled`]).
    fn run_live(&self, model: &RunResult, s: &ThpSettings) -> Result<RunResult> {
        run_live_as_modelled(model, self.workload, s, self.machine, self.repeat, false, self.profile, self.settle_host)
    }
}

impl Outcome {
    /// The setting's object of `compare --json` (`reruns` only where something ran again).
    pub fn json(&self, label: &str, s: &ThpSettings) -> serde_json::Value {
        let mut j = serde_json::json!({ "label": label, "settings": s.knob_map(), "differs": self.differs, "rows": self.rows, "timeline": self.timeline, "model": self.model, "live": self.live });
        if !self.reruns.is_empty() {
            j["reruns"] = serde_json::to_value(&self.reruns).expect("serializes");
        }
        j
    }
}

/// The model, then live, then the model again from where the live run started (`demo`).
pub fn model_and_live(
    w: &workload::Workload,
    s: &ThpSettings,
    machine: &sim::MachineConfig,
    repeat: u32,
    x: &sim::Profile,
    settle_host: &dyn Fn(),
) -> Result<(RunResult, RunResult)> {
    let model = run_model(w, s, machine, false, None, x, None)?;
    let live = run_live_as_modelled(&model, w, s, machine, repeat, false, x, settle_host)?;
    Ok((remodel(w, s, machine, x, model, &live)?.0, live))
}

/// The workload of the model run `model` live (`live::run_live`), its regions at the model's
/// addresses, sampled every `profile.sample_ms`. With the profile's `[host]` (the model priced
/// it), every live run waits until
/// page reporting has taken every free block (`settle_host`, and the repeats in the executor),
/// runs pinned to the CPU whose per-CPU lists hold the fewest pages as it starts, and reads the
/// free lists it starts from (`live.free_lists`, for [`remodel`]) and its host faults
/// (`live.host_faults`). Under the machine's memory pressure (`--memory-max`, `--swap`), in a
/// memcg with that limit and that swap, as the model ran.
#[allow(clippy::too_many_arguments)]
pub fn run_live_as_modelled(
    model: &RunResult,
    workload: &workload::Workload,
    settings: &ThpSettings,
    machine: &sim::MachineConfig,
    repeat: u32,
    progress: bool,
    profile: &sim::Profile,
    settle_host: &dyn Fn(),
) -> Result<RunResult> {
    let reporting = profile.host.is_some() && live::host::reporting_order().is_some();
    if reporting {
        settle_host();
    }
    let opts = live::ExecOptions { pressure: machine.pressure, ..crate::host::exec_options(repeat, progress, profile, reporting) };
    crate::hwtlb::live_counted(model, "thplab", || Ok(live::run_live(workload, settings, &model.regions, &opts)?))
}

impl WorkloadExperiment<'_> {
    /// `thplab compare WORKLOAD [--matrix]`: [`WorkloadExperiment::run`] under each of `runs`
    /// (with their labels), printed as each setting's rows (or one JSON array with `json`), then
    /// each setting against the others and the count of settings where model = live. True when
    /// a setting differs beyond the tolerance (exit 4).
    pub fn compare(&self, runs: &[(String, ThpSettings)], json: bool, only_diff: bool) -> Result<bool> {
        use report::progress;
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let mut objects = Vec::new();
        let mut differing = 0;
        // Progress on stderr, per setting (a bar on a terminal; lines otherwise, for a matrix,
        // unless --json).
        let steps = progress::Steps::start("thplab compare", &[("setting", runs.len())], runs.len() > 1 && !json);
        let mut results = Vec::new();
        for (label, s) in runs {
            steps.step("setting", format!("{label}: model, then live"));
            let o = self.run(s)?;
            if o.attempts > 1 && !json {
                progress::suspend(|| writeln!(out, "{}", report::compare::rerun_note(label, o.why.map_or("", |r| r.text()), o.attempts)))?;
            }
            differing += o.differs as usize;
            if json {
                objects.push(o.json(label, s));
            } else {
                progress::suspend(|| -> Result<()> {
                    report::compare::print_rows_only(&mut out, label, s, &o.rows, only_diff)?;
                    if let Some(t) = &o.timeline {
                        report::compare::print_comparison(&mut out, t)?;
                        writeln!(out)?;
                    }
                    Ok(out.flush()?)
                })?;
            }
            results.push((label.clone(), o.model, o.live));
        }
        steps.finish();
        let verdicts = crate::noise::settings_verdicts(&results);
        let repeat = self.repeat;
        if json {
            crate::program::add_verdicts_json(&mut objects, &verdicts);
            serde_json::to_writer_pretty(&mut out, &objects)?;
            writeln!(out)?;
        } else {
            report::compare::print_settings(&mut out, &verdicts, &format!("live: the median wall time of {repeat} run{}, ± their range", if repeat == 1 { "" } else { "s" }))?;
            report::compare::print_settings_count(&mut out, runs.len(), differing)?;
        }
        Ok(differing > 0)
    }
}
