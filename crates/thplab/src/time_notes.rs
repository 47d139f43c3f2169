//! The uncertainty of the model's time (issue #27 items 6-7): the profile's calibrated spreads
//! and the host states the model cannot know (a VM whose free pages are reported to its host:
//! mm/page_reporting.c, `page_reporting_process`), and what `demo` says about them (its text:
//! `report::print::demo_time_note`).

use std::io::Write;

use anyhow::Result;

/// What the demo's times assumed (`report::print::demo_time_note`), then each setting's model
/// against live, and each setting against 4K on each side (`compare::noise`).
pub fn demo_time_notes(out: &mut impl Write, results: &[(String, String, uapi::RunResult)], live: bool) -> Result<()> {
    report::print::demo_time_note(out, results, live)?;
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
