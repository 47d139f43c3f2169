//! The model's side of the experiment: a workload run in the model (`sim::run_with`) with what
//! the CLI resolved besides settings and machine (a `sim::Profile`), the uncertainty of its time,
//! and the model run again from the state a live run started from ([`remodel`]): the live
//! process's heap start (mm/util.c `arch_randomize_brk`, which the model cannot draw) and the
//! free lists it met (mm/page_reporting.c `page_reporting_process` decides which free frames
//! the host backs).

use anyhow::Result;
use serde::Serialize;
use thp_abi::ThpSettings;
use uapi::RunResult;

/// Run `w` in the model: with `check` the model's invariants after every step, with `explain`
/// every fault on that range, `on_event` told of the run's progress; with a profile, the time's
/// uncertainty ([`time_uncertainty`]).
pub fn run_model(
    w: &workload::Workload,
    s: &ThpSettings,
    m: &sim::MachineConfig,
    check: bool,
    explain: Option<(u64, u64)>,
    p: &sim::Profile,
    on_event: Option<&mut dyn FnMut(sim::SimEvent)>,
) -> Result<RunResult> {
    let mut opts = sim::RunOptions { check_invariants: check, on_event, explain, profile: p.clone(), ..Default::default() };
    let (mut r, _) = sim::run_with(w, s, m, &mut opts)?;
    drop(opts);
    time_uncertainty(w, s, m, p, &mut r)?;
    Ok(r)
}

/// With a profile, `r.time`'s uncertainty (`uapi::TimeUncertainty`): the profile's calibrated
/// spreads of what it priced and, with a `[host]`, the host state: the run again from free lists
/// in which every free frame is reported (`sim::time::all_reported`), the far end from no host
/// fault at all.
pub fn time_uncertainty(w: &workload::Workload, s: &ThpSettings, m: &sim::MachineConfig, p: &sim::Profile, r: &mut RunResult) -> Result<()> {
    let (Some(t), Some(costs)) = (r.time.as_mut(), p.costs.as_ref()) else { return Ok(()) };
    if costs.spread_pct.is_empty() && p.host.is_none() {
        return Ok(());
    }
    sim::time::set_uncertainty(t, sim::time::profile_spread(t, costs, p.host.as_ref().map(|h| &h.0), false), 0.0);
    let Some((h, free)) = &p.host else { return Ok(()) };
    // The far end: every free frame reported; priced only (no timeline).
    let far = sim::Profile { sample_ms: None, ..p.with_free_lists(Some(sim::time::all_reported(m.mem_bytes))) };
    let mut opts = sim::RunOptions { profile: far, ..Default::default() };
    let (hi, _) = sim::run_with(w, s, m, &mut opts)?;
    let (faults, ns) = hi.time.as_ref().map_or((0, 0.0), |t| (t.host_faults, t.host_ns));
    let assumed = match free {
        Some(_) => "the free lists the live run started from (after page reporting settled)".to_string(),
        None => format!(
            "the profile's free lists ({} MiB free in blocks below order {}, every larger block reported: an idle machine as calibrated)",
            h.free_areas.iter().enumerate().take(h.page_reporting_order as usize).map(|(o, &n)| n << o).sum::<u64>() >> 8,
            h.page_reporting_order
        ),
    };
    sim::time::set_host_range(t, assumed, faults, ns);
    Ok(())
}

/// Why a run of a setting was made again: the model from the state a live run started from,
/// or the live run while its differences may not be the model's. The compare JSON's `reruns`
/// (docs/results-schema.md) lists one entry per re-run, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RerunReason {
    /// The model again: the workload has a heap and the live process's `start_brk` was not the
    /// model's (`--brk-start`; the kernel randomises it).
    ModelLiveHeapStart,
    /// The model again from the free lists the live run started from (`live.free_lists`; the
    /// model priced a profile's `[host]`).
    ModelLiveFreeLists,
    /// The model again: a recorded program read THP knobs whose values this setting changes,
    /// so it was recorded again under this setting.
    ModelProgramRecordedAgain,
    /// Live again: only system-wide counters differed (other processes allocate under the same
    /// global knobs).
    LiveSystemWideCounters,
    /// Live again: rows differed and khugepaged collapsed pages during the live run.
    LiveKhugepagedCollapsed,
    /// Live again: rows differed and khugepaged waited on a runqueue for longer than one scan
    /// period during the live run.
    LiveKhugepagedWaited,
}

impl RerunReason {
    /// The sentence the text output prints for a live re-run.
    pub fn text(self) -> &'static str {
        match self {
            RerunReason::ModelLiveHeapStart => "the live process's heap started elsewhere than the model's",
            RerunReason::ModelLiveFreeLists => "the model again from the free lists the live run started from",
            RerunReason::ModelProgramRecordedAgain => "the program read knobs this setting changes; recorded again",
            RerunReason::LiveSystemWideCounters => "system-wide counters moved by other processes",
            RerunReason::LiveKhugepagedCollapsed => "khugepaged collapsed pages during the live run (its wake-ups are not the model's)",
            RerunReason::LiveKhugepagedWaited => {
                "khugepaged waited on a runqueue for longer than one scan period during the live run (it runs at nice 19 and other work kept the CPUs busy)"
            }
        }
    }
}

/// A model re-run: why (one or two reasons: heap start, free lists).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Rerun {
    /// `model` or `live`.
    pub run: &'static str,
    pub reasons: Vec<RerunReason>,
}

impl Rerun {
    pub fn live(r: RerunReason) -> Rerun {
        Rerun { run: "live", reasons: vec![r] }
    }
}

/// The model run `model` again where the live run `live` showed it started elsewhere: from the
/// free lists the live run started from (`live.free_lists`, when the model priced a profile's
/// `[host]`), and with the live process's heap start when the heap matters. The model as it
/// was, and no re-run, where neither applies.
pub fn remodel(w: &workload::Workload, s: &ThpSettings, machine: &sim::MachineConfig, p: &sim::Profile, model: RunResult, live: &RunResult) -> Result<(RunResult, Option<Rerun>)> {
    let run = live.live.as_ref().and_then(|l| l.workload.as_ref());
    let brk = run.and_then(|l| parse_hex(&l.start_brk)).filter(|&b| b != machine.brk_start && w.region_by_name(workload::HEAP).is_some());
    let free = run.and_then(|l| l.free_lists.as_ref());
    let host = free.filter(|_| p.host.is_some()).map(|f| p.with_free_lists(Some(f.clone())));
    if brk.is_none() && host.is_none() {
        return Ok((model, None));
    }
    let mut reasons = Vec::new();
    reasons.extend(brk.map(|_| RerunReason::ModelLiveHeapStart));
    reasons.extend(host.as_ref().map(|_| RerunReason::ModelLiveFreeLists));
    let m = sim::MachineConfig { brk_start: brk.unwrap_or(machine.brk_start), ..machine.clone() };
    let r = run_model(w, s, &m, false, None, host.as_ref().unwrap_or(p), None)?;
    Ok((r, Some(Rerun { run: "model", reasons })))
}

fn parse_hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok().filter(|a| a % 4096 == 0)
}
