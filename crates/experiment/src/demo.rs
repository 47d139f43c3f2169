//! `thplab demo`: the README's main command, 1 GiB of anonymous memory under 4K, 64K mTHP and
//! PMD THP ([`demo_settings`]), in the model and, where possible, live ([`run`]); and the
//! uncertainty of the model's time (issue #27 items 6-7): the profile's calibrated spreads
//! and the host states the model cannot know (a VM whose free pages are reported to its host:
//! mm/page_reporting.c, `page_reporting_process`), and what `demo` says about them (its text:
//! `report::print::demo_time_note`).

use std::io::Write;

use anyhow::Result;
use report::print;
use thp_abi::ThpSettings;

/// The three settings of the README's main command.
pub fn demo_settings() -> Vec<(&'static str, ThpSettings)> {
    let mut four_k = ThpSettings::default();
    four_k.apply_assignment("enabled=never").expect("valid");
    let mut m64 = four_k.clone();
    m64.apply_assignment("hugepages-64kB/enabled=always").expect("valid");
    let mut pmd = ThpSettings::default();
    pmd.apply_assignment("enabled=always").expect("valid");
    vec![("4K", four_k), ("64K", m64), ("PMD", pmd)]
}

/// `thplab demo` on the workload `w` (seed-anon-1g): each of [`demo_settings`] in the model,
/// priced with the builtin profile, and live `repeat` times unless `unavailable` says why not;
/// printed side by side (or as one JSON array) with the time notes.
pub fn run(w: &workload::Workload, machine: &sim::MachineConfig, unavailable: Option<String>, repeat: u32, json: bool) -> Result<()> {
    let mut results = Vec::new();
    // The model's time from the profile measured on this machine kind, beside the live wall time.
    let profile = uapi::profile::MachineProfile::builtin();
    for (label, s) in demo_settings() {
        let host = crate::host::host_model(&profile, unavailable.is_none());
        let x = sim::Profile { costs: profile.fault.clone(), host, ..Default::default() };
        let (r, live) = match &unavailable {
            None => {
                let (r, l) = crate::workload::model_and_live(w, &s, machine, repeat.max(1), &x, &|| crate::host::settle_host(true))?;
                (r, Some(l))
            }
            Some(_) => (crate::simulate::run_sim_tlb(w, &s, machine, false, false, None, &x)?, None),
        };
        results.push((format!("{label} sim"), s.summary(), r));
        if let Some(l) = live {
            results.push((format!("{label} live"), s.summary(), l));
        }
    }
    if let Some(why) = &unavailable {
        eprintln!("thplab demo: model only ({why})");
    }
    let mut out = std::io::stdout().lock();
    if json {
        let v: Vec<_> = results.iter().map(|(l, _, r)| serde_json::json!({ "label": l, "result": r })).collect();
        serde_json::to_writer_pretty(&mut out, &v)?;
        writeln!(out)?;
    } else {
        print::demo_heading(&mut out, unavailable.is_none())?;
        print::side_by_side(&mut out, &results)?;
        demo_time_notes(&mut out, &results, unavailable.is_none())?;
    }
    Ok(())
}

/// What the demo's times assumed (`report::print::demo_time_note`), then each setting's model
/// against live, and each setting against 4K on each side (`experiment::noise`).
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
    report::compare::print_settings(out, &crate::noise::settings_verdicts(&sets), "live: the median wall time of the runs, ± their range")?;
    Ok(())
}
