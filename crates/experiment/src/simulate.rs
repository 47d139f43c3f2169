//! `thplab sim`: a workload or a recording in the model alone, under one setting or each
//! setting of a matrix, priced with a machine profile ([`sim_one`]), and printed as the table
//! or JSON ([`print_result`], [`print_matrix`]). The CLI reads the input and the arguments; the
//! model is `sim::run` (through [`crate::model::run_model`]) and `sim::run_recording_opts`.

use std::io::Write;

use anyhow::{bail, Result};
use report::print;
use uapi::result::SalvageReport;
use thp_abi::ThpSettings;
use uapi::RunResult;

/// A recording's recorded accesses (`record --accesses`: FILE.accesses) and the file they came
/// from.
pub type Accesses = (String, std::sync::Arc<trace::accesses::AccessTrace>);

/// What `sim` runs.
pub enum SimInput {
    /// A recording, with the byte offset of each record (empty when salvaged) for errors.
    Recording { name: String, header: trace::Header, events: Vec<trace::Event>, offsets: Vec<u64>, accesses: Option<Accesses> },
    Workload(workload::Workload),
}

/// How `sim` runs its input (its flags).
pub struct SimOptions<'a> {
    /// `--check`: the model's invariants after every operation.
    pub check: bool,
    /// A recording's clock on its timestamps (not `--no-recorded-time`).
    pub recorded_time: bool,
    /// What the run is priced and observed with (`--profile`, `--cpu`, `--paging`,
    /// `--order0-scatter`, `--sample`: `crate::resolve::profile`); a recording's accesses are
    /// added to it here.
    pub profile: &'a sim::Profile,
    /// What `--salvage` lost: into each result (`model.replay.salvage`).
    pub salvage: Option<&'a SalvageReport>,
}

/// Fill in the byte offset of the record a replay error names.
pub fn locate(mut e: sim::SimError, offsets: &[u64]) -> sim::SimError {
    if let Some((n, None)) = e.record {
        e.record = Some((n, n.checked_sub(1).and_then(|i| offsets.get(i as usize)).copied()));
    }
    e
}

/// [`crate::model::run_model`] with a progress bar for long runs.
pub fn run_sim_tlb(w: &workload::Workload, s: &ThpSettings, m: &sim::MachineConfig, check: bool, progress: bool, explain: Option<(u64, u64)>, x: &sim::Profile) -> Result<RunResult> {
    let mut bar = print::Progress::new(progress && w.touched_pages() > 4_000_000, &w.source, w.touched_pages());
    let mut on_event = |sim::SimEvent::Progress { accesses_done, accesses_total }| bar.set(accesses_done, accesses_total);
    let r = crate::model::run_model(w, s, m, check, explain, x, Some(&mut on_event))?;
    bar.finish();
    Ok(r)
}

/// A replay's warnings (what it did not model, placements it could not reproduce), on stderr.
pub fn print_replay_warnings(r: &RunResult) {
    let warnings = r.model.as_ref().and_then(|m| m.replay.as_ref()).map(|rp| rp.warnings.as_slice());
    for w in warnings.unwrap_or_default() {
        eprintln!("thplab: warning: {}: {w}", r.workload);
    }
}

/// One result as JSON or as the table.
pub fn print_result(r: &RunResult, settings: &ThpSettings, json: bool) -> Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, r)?;
        writeln!(out)?;
    } else {
        print::result_table(&mut out, r, settings)?;
        if let Some(io) = &r.io {
            print::direct_io(&mut out, io)?;
        }
        if let Some(t) = &r.timeline {
            report::compare::print_timeline(&mut out, t)?;
        }
    }
    Ok(())
}

/// One simulation of `sim`: a recording or a workload under one setting.
pub fn sim_one(o: &SimOptions, input: &SimInput, settings: &ThpSettings, machine: &sim::MachineConfig, explain: Option<(u64, u64)>, progress: bool) -> Result<RunResult> {
    let (r, replay_opts) = sim_unpriced(o, input, settings, machine, explain, progress)?;
    let mut r = price(o, input, settings, machine, r, replay_opts, None)?;
    if let (Some(l), Some(replay)) = (o.salvage, r.model.as_mut().and_then(|m| m.replay.as_mut())) {
        replay.salvage = Some(l.clone());
    }
    Ok(r)
}

/// A recording's replay options under `o` (its accesses added to the profile).
fn replay_options(o: &SimOptions, accesses: &Option<Accesses>, explain: Option<(u64, u64)>) -> sim::ReplayOptions {
    let accesses = accesses.as_ref().map(|(file, trace)| sim::RecordedAccessInput { file: file.clone(), trace: trace.clone() });
    let profile = sim::Profile { accesses, ..o.profile.clone() };
    sim::ReplayOptions { check_invariants: o.check, explain, recorded_time: o.recorded_time, profile }
}

/// The model's run of `input` under `settings`, and for a recording the options it was
/// replayed with (its time is priced by replaying it again with them: [`price`]).
fn sim_unpriced(o: &SimOptions, input: &SimInput, settings: &ThpSettings, machine: &sim::MachineConfig, explain: Option<(u64, u64)>, progress: bool) -> Result<(RunResult, Option<sim::ReplayOptions>)> {
    Ok(match input {
        SimInput::Recording { name, header, events, offsets, accesses } => {
            if o.profile.sample_ms.is_some() && !o.recorded_time {
                bail!("--sample with a recording needs its recorded time: with --no-recorded-time the replay's clock does not move (leave out one of the two)");
            }
            let opts = replay_options(o, accesses, explain);
            let r = sim::run_recording_opts(name, header, events, settings, machine, &opts).map_err(|e| locate(e, offsets))?;
            print_replay_warnings(&r);
            (r, Some(opts))
        }
        SimInput::Workload(w) => (run_sim_tlb(w, settings, machine, o.check, progress, explain, o.profile)?, None),
    })
}

/// `r`'s time and pinning under the profile; a recording's priced against its 4 KiB baseline
/// (`base`, or replayed here when `None`).
fn price(o: &SimOptions, input: &SimInput, settings: &ThpSettings, machine: &sim::MachineConfig, mut r: RunResult, replay_opts: Option<sim::ReplayOptions>, base: Option<&RunResult>) -> Result<RunResult> {
    let profile = o.profile;
    // A workload's steps are priced as they run (sim::driver); a recording's time is still
    // estimated from its totals.
    if let (Some(fault), Some(opts), SimInput::Recording { name, header, events, offsets, .. }) = (&profile.costs, &replay_opts, input) {
        let own;
        let base = match base {
            Some(b) => b,
            None => {
                own = sim::time::baseline(name, header, events, machine, opts, None).map_err(|e| locate(e, offsets))?;
                &own
            }
        };
        let mut t = sim::time::recording_on(&r, base, header, events, fault, opts);
        crate::program::add_program_and_host_spread(&mut t, None, (name, header, events), machine, opts, settings)?;
        r.time = Some(t);
    }
    if let (Some(pin), Some(io)) = (&profile.pin, r.io.as_mut()) {
        let ns = pin.pin_ns(io.pinned_folios, io.pinned_pte_pages, io.pinned_pmd_pages);
        io.pin_ns = Some(ns);
        // The reads' pinning is part of the run's time (their faults already are).
        if let Some(t) = r.time.as_mut() {
            t.pin_ns = ns;
            t.total_ns += ns;
            t.elapsed_ns += ns.round() as u64;
        }
    }
    Ok(r)
}

/// `sim --matrix SPEC`: the settings of `runs` in parallel across the machine's cores (rayon;
/// `progress`: how many are done, on a terminal), the results returned in `runs`' order with
/// their labels and settings; a priced recording's 4 KiB baseline replayed once for them all. Each setting's model is independent of the others' (its own
/// `sim::Machine`; the recording and its accesses are shared read-only), so the results are
/// those of running them one after another.
pub fn sim_matrix(o: &SimOptions, input: &SimInput, spec: &str, runs: &[(String, ThpSettings)], machine: &sim::MachineConfig, explain: Option<(u64, u64)>, progress: bool) -> Result<Vec<(String, ThpSettings, RunResult)>> {
    use rayon::prelude::*;
    use std::io::IsTerminal;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let show = progress && std::io::stderr().is_terminal();
    let done = AtomicUsize::new(0);
    // A priced recording's 4 KiB baseline is the same under every setting: replayed once, as
    // one more job beside the settings' replays (the first, so that it starts at once).
    let base_needed = matches!(input, SimInput::Recording { .. }) && o.profile.costs.is_some() && runs.len() > 1;
    let jobs: Vec<Option<&(String, ThpSettings)>> = base_needed.then_some(None).into_iter().chain(runs.iter().map(Some)).collect();
    let mut replays = jobs
        .par_iter()
        .with_max_len(1)
        .map(|job| match job {
            None => match input {
                SimInput::Recording { name, header, events, offsets, accesses } => {
                    let opts = replay_options(o, accesses, explain);
                    Ok((sim::time::baseline(name, header, events, machine, &opts, None).map_err(|e| locate(e, offsets))?, None))
                }
                SimInput::Workload(_) => unreachable!("only a recording has a baseline"),
            },
            Some((label, s)) => {
                let out = sim_unpriced(o, input, s, machine, explain, false)?;
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if show {
                    eprint!("\rthplab sim --matrix {spec}: {n} of {} replayed (last: {label})\x1b[K", runs.len());
                }
                Ok(out)
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let base = base_needed.then(|| replays.remove(0).0);
    let results = runs
        .par_iter()
        .zip(replays)
        .map(|((label, s), (r, opts))| {
            let mut r = price(o, input, s, machine, r, opts, base.as_ref())?;
            if let (Some(l), Some(replay)) = (o.salvage, r.model.as_mut().and_then(|m| m.replay.as_mut())) {
                replay.salvage = Some(l.clone());
            }
            Ok((label.clone(), s.clone(), r))
        })
        .collect::<Result<Vec<_>>>()?;
    if show {
        eprint!("\r\x1b[K");
    }
    Ok(results)
}

/// `sim --matrix`'s results: one JSON array, or the settings side by side under `heading`.
pub fn print_matrix(results: Vec<(String, ThpSettings, RunResult)>, heading: &str, json: bool) -> Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        let v: Vec<_> = results.iter().map(|(l, s, r)| serde_json::json!({ "label": l, "settings": s.knob_map(), "model": r })).collect();
        serde_json::to_writer_pretty(&mut out, &v)?;
        writeln!(out)?;
    } else {
        writeln!(out, "{heading}\n")?;
        let cols: Vec<(String, String, RunResult)> = results.into_iter().map(|(l, s, r)| (l, s.summary(), r)).collect();
        print::side_by_side(&mut out, &cols)?;
    }
    Ok(())
}
