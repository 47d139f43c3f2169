//! The uncertainty of the model's time (issue #27 items 6-7): the profile's calibrated spreads
//! and the host states the model cannot know (a VM whose free pages are reported to its host:
//! mm/page_reporting.c, `page_reporting_process`), and what `demo` says about them.

use std::io::Write;

use anyhow::Result;

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
