//! The uncertainty of the model's time (issue #27 items 6-7): the profile's calibrated spreads
//! and the host states the model cannot know (a VM whose free pages are reported to its host:
//! mm/page_reporting.c, `page_reporting_process`), and what `demo` says about them.

use std::io::Write;

use anyhow::Result;
use uapi::ThpSettings;

use crate::SimExtras;

/// With a profile, `r.time`'s uncertainty (`uapi::TimeUncertainty`): the profile's calibrated
/// spreads of what it priced and, with a `[host]`, the host state: the run again from free lists
/// in which every free frame is reported (`sim::time::all_reported`), the far end from no host
/// fault at all.
pub fn time_uncertainty(w: &workload::Workload, s: &ThpSettings, m: &sim::MachineConfig, x: &SimExtras, r: &mut uapi::RunResult) -> Result<()> {
    let (Some(t), Some(costs)) = (r.time.as_mut(), x.costs) else { return Ok(()) };
    if costs.spread_pct.is_empty() && x.host.is_none() {
        return Ok(());
    }
    sim::time::set_uncertainty(t, sim::time::profile_spread(t, costs, x.host.map(|h| h.0), false), 0.0);
    let Some((h, free)) = x.host else { return Ok(()) };
    let far = sim::time::all_reported(m.mem_bytes);
    let mut opts = sim::RunOptions { tlb: x.tlb, costs: x.costs.cloned(), host: Some((h.clone(), Some(far))), order0_scatter: x.order0_scatter, ..Default::default() };
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

/// What the demo's times assumed: the profile's spreads and, for the model, the host state it
/// could not know; each setting's model against live, and each setting against 4K on each side.
pub fn demo_time_notes(out: &mut impl Write, results: &[(String, String, uapi::RunResult)], live: bool) -> Result<()> {
    let mut note = String::from("time ±: the model's from the built-in profile's calibrated spreads; live: the range of the runs.");
    if let Some(h) = results.iter().find_map(|(_, _, r)| r.time.as_ref()?.uncertainty.as_ref()?.host.clone()) {
        let assumed = if live { "the free lists each live run started from".to_string() } else { h.assumed.clone() };
        note += &format!("\nHost state the model assumed: {assumed}.\nIt cannot know which free \
            frames the host backs during a run (what ran before, what other processes and the other \
            CPU's per-CPU list free meanwhile): `time over the host states` is its time from every \
            frame backed to every frame dropped.");
    }
    writeln!(out)?;
    for para in note.split('\n') {
        for l in crate::print::wrap(para, crate::print::fit_width(), 0) {
            writeln!(out, "{l}")?;
        }
    }
    let sets: Vec<(String, uapi::RunResult, uapi::RunResult)> = results
        .iter()
        .filter_map(|(l, _, m)| {
            let label = l.strip_suffix(" sim")?;
            let v = results.iter().find(|(x, _, _)| x.strip_suffix(" live") == Some(label)).map_or_else(uapi::RunResult::default, |x| x.2.clone());
            Some((label.to_string(), m.clone(), v))
        })
        .collect();
    writeln!(out)?;
    experiment::noise::print_settings(out, &experiment::noise::settings_verdicts(&sets), "live: the median wall time of the runs, ± their range")?;
    Ok(())
}
