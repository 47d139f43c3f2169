//! `thplab compare --record [--matrix [anon|shmem]] [--set ...] [--keep FILE] -- CMD [ARGS...]`:
//! record a real program once (THP disabled for it alone, crate `record`), then for each setting
//! predict it by replaying the recording in the model (`sim::run_recording`) and run it live
//! under that setting (`live::run_program`), and print both side by side.
//!
//! Tolerance: [`crate::Tolerance::program`] (minflt and per-size large-folio counts within 2 %
//! of live, issue #4), [`crate::Tolerance::program_under_pressure`] under `--memory-max`/`--swap`
//! (the program recorded and run live in a memcg of its own, replayed on a model machine with
//! the same limit and swap: issue #28), overridable with `--tolerance`. The CLI parses the arguments and the
//! settings and calls [`compare_record`] once; each setting is one [`crate::program::replay_model`]
//! (two where the program read a knob the setting changes and is recorded again), one
//! [`crate::program::price_replay`] with a profile, and one [`crate::program::ProgramExperiment::run`].

use std::ffi::OsString;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use report::progress;
use thp_abi::ThpSettings;
use uapi::RunResult;

use crate::host::{live_unavailable, settle_host_for, time_untraced};

/// What `thplab compare --record` was asked, its settings resolved.
#[derive(Clone, Debug, Default)]
pub struct CompareRecordArgs {
    /// The program and its arguments (not empty).
    pub command: Vec<String>,
    /// The settings, each with its label (the matrix's, or "given settings").
    pub runs: Vec<(String, ThpSettings)>,
    pub machine: sim::MachineConfig,
    /// [`crate::Tolerance::program`] with the `--tolerance` specs applied.
    pub tolerance: crate::Tolerance,
    /// Keep the recording in this file.
    pub keep: Option<PathBuf>,
    /// When only system-wide counters differ, or khugepaged collapsed during a differing run,
    /// run live again up to N times.
    pub retries: u32,
    pub json: bool,
    /// What the replays are priced and observed with: the `[fault]` costs (the model's time,
    /// the program's own plus its modelled work, is set beside the live wall time), the
    /// `[host]` and, with `accesses`, the TLB model.
    pub profile: sim::Profile,
    /// `--profile` was given: the recording is timed untraced (`record --timed 3`).
    pub timed: bool,
    /// The program's stdin/stdout/stderr to /dev/null in the live runs (the recording passes
    /// them through).
    pub quiet: bool,
    /// Live runs per setting (`--repeat`): the median by minflt is shown, minflt judged against
    /// the runs' spread.
    pub repeat: u32,
    /// `--accesses`: the program's accesses are recorded too (under QEMU or valgrind) and replayed
    /// through the TLB model of `profile.tlb`.
    pub accesses: bool,
    /// `--only-diff`: print only the rows whose model and live values differ.
    pub only_diff: bool,
}

/// A recording and what its timed runs met: [`record_program`]'s result.
pub struct Recorded {
    pub rec: record::Recording,
    /// The recording's wall time, s.
    pub secs: f64,
    /// The free lists the median timed run met.
    pub timed_free: Option<uapi::profile::FreeLists>,
    /// The range of the timed runs (ms): the ± of the program's own time.
    pub timed_range: Option<uapi::result::MsRange>,
}

/// Record `command` once; returns the recording, its wall time in seconds and, with `timed`
/// runs (then the recording holds the program's untraced wall time, `record --timed`), the
/// free lists those runs met and their range.
pub fn record_program(command: &[String], timed: u32) -> Result<Recorded> {
    record_program_under(command, timed, &thp_abi::Pressure::default())
}

/// [`record_program`] under `--memory-max`/`--swap`: the program (not the recorder) runs in a
/// memcg of its own with that limit and swap, set up and removed by the settings guard, so the
/// recording holds the faults it took there (swap-ins among them). The timed runs are not in it.
pub fn record_program_under(command: &[String], timed: u32, pressure: &thp_abi::Pressure) -> Result<Recorded> {
    let guard = if pressure.is_none() { None } else { Some(live::SettingsGuard::pressure_only(pressure)?) };
    let opts = record::RecordOptions { cgroup_procs: guard.as_ref().and_then(|g| g.memcg()).map(|m| m.procs()), ..Default::default() };
    let argv: Vec<OsString> = command.iter().map(OsString::from).collect();
    let t = Instant::now();
    let rec = record::record(&argv, &opts);
    if let Some(g) = guard {
        g.restore()?;
    }
    let mut rec = match rec {
        Ok(r) => r,
        Err(record::RecordError::Unavailable(why)) => return Err(live::LiveError::NotAvailable(format!("recording: {why}")).into()),
        Err(e) => return Err(e.into()),
    };
    let secs = t.elapsed().as_secs_f64();
    let (mut timed_free, mut timed_range) = (None, None);
    if timed > 0 {
        let (ns, free, range) = time_untraced(&argv, timed, false, true)?;
        rec.header.untraced_wall_ns = ns;
        (timed_free, timed_range) = (free, range);
    }
    if rec.header.lost_events > 0 {
        eprintln!(
            "thplab compare: WARNING: the kernel dropped {} events while recording {}: the recording is INCOMPLETE and the predictions will be off",
            rec.header.lost_events,
            command.join(" ")
        );
    }
    Ok(Recorded { rec, secs, timed_free, timed_range })
}

/// `--accesses`: the program run again under QEMU with thplab's plugin, else valgrind lackey
/// (`record::accesses::Engine::Auto`), its
/// accesses placed on `rec`'s records; with `--keep FILE` also written beside it, as
/// FILE.accesses (what `thplab sim FILE` reads).
fn record_accesses(a: &CompareRecordArgs, rec: &record::Recording) -> Result<trace::accesses::AccessTrace> {
    let mut trace_bytes = Vec::new();
    rec.write_to(&mut trace_bytes)?;
    // The companion names its recording by the recording's trailer CRC (its last 4 bytes).
    let crc = u32::from_le_bytes(trace_bytes[trace_bytes.len() - 4..].try_into().expect("4 bytes"));
    let argv: Vec<OsString> = a.command.iter().map(OsString::from).collect();
    let native_ns = record::accesses::native_ns(&argv, rec);
    let engine = record::accesses::Engine::Auto.resolve().map_err(anyhow::Error::msg).context("--accesses")?;
    eprintln!("thplab compare: running {} under {} for its accesses", a.command.join(" "), engine.tool());
    let mut bytes = Vec::new();
    let s = record::accesses::record_with(engine, &argv, rec, crc, native_ns, &mut bytes).context("--accesses")?;
    let t = &s.totals;
    eprintln!(
        "thplab compare: {} data accesses in {} runs, {:.3} s under {} ({:.0}x native)",
        t.raw_accesses,
        t.runs,
        t.valgrind_ns as f64 / 1e9,
        s.engine.tool(),
        t.valgrind_ns as f64 / t.native_ns.max(1) as f64,
    );
    for w in s.warnings() {
        eprintln!("thplab compare: warning: --accesses: {w}");
    }
    if let Some(path) = &a.keep {
        let c = trace::accesses::companion_path(path);
        std::fs::write(&c, &bytes).with_context(|| format!("writing {}", c.display()))?;
    }
    Ok(trace::accesses::read_accesses(&bytes[..])?)
}

/// `thplab compare --record ... -- CMD [ARGS...]`: prints on stdout; true when a setting
/// differs beyond the tolerance (exit 4).
pub fn compare_record(a: CompareRecordArgs) -> Result<bool> {
    let (runs, tol) = (&a.runs, &a.tolerance);
    if let Some(why) = live_unavailable() {
        return Err(live::LiveError::NotAvailable(why).into());
    }
    if a.accesses {
        if let Err(why) = record::accesses::Engine::Auto.resolve() {
            bail!("{why}; or leave out --accesses");
        }
    }
    // Progress on stderr: the setting, the step, what is left (a bar on a terminal, a line
    // per step otherwise unless --json).
    let timed = if a.timed { runs.len() } else { 0 };
    let plan = [("record", 1), ("timed", timed), ("accesses", a.accesses as usize), ("replay", runs.len()), ("live", runs.len() * a.repeat.max(1) as usize)];
    let steps = progress::Steps::start("thplab compare", &plan, !a.json);
    steps.step("record", format!("recording {}{}", a.command.join(" "), if a.timed { " (then 3 untraced runs)" } else { "" }));
    let Recorded { rec, secs: rec_secs, timed_free, timed_range } = record_program_under(&a.command, if a.timed { 3 } else { 0 }, &a.machine.pressure)?;
    if let Some(path) = &a.keep {
        let f = std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        rec.write_to(BufWriter::new(f)).with_context(|| format!("writing {}", path.display()))?;
    }
    // With a profile, the live time is taken as the recording's was (`record --timed`:
    // untraced runs, no ptrace stops or census, each starting where the model's machine does),
    // under each setting, and the model meets the free lists those runs met. All first, while
    // this process is small: the model's replays (of a recording's accesses above all: a
    // gigabyte for sort's 128 M) move the free lists the runs would meet.
    let untraced = untraced_runs(&a, &steps)?;
    let accesses = if a.accesses {
        steps.step("accesses", "the program's accesses under valgrind lackey");
        Some(sim::RecordedAccessInput { file: "(recorded with --accesses)".into(), trace: std::sync::Arc::new(record_accesses(&a, &rec)?) })
    } else {
        None
    };
    let source = a.command.join(" ");
    let opts = live::ProgramOptions { quiet: a.quiet };
    let mut out = io::stdout().lock();
    let mut json = Vec::new();
    let mut differing = 0;
    if !a.json {
        let faults = rec.header.counts.iter().find(|(k, _)| *k == trace::kind::FAULT).map_or(0, |c| c.1);
        progress::suspend(|| {
            writeln!(
                out,
                "recorded {source}: {} events ({faults} faults), {} lost, {:.3} s (exit status {})\n",
                rec.events.len(),
                rec.header.lost_events,
                rec_secs,
                rec.header.exit_status
            )
        })?;
    }
    // A program that reads THP knobs (a JVM with -XX:+UseTransparentHugePages reads `enabled`)
    // may do otherwise under another value: where the replay finds that a setting changes a
    // knob the program read, the program is recorded again under that setting's knobs (through
    // the settings guard; THP stays disabled for the recorded program itself), once per set of
    // values of the knobs it read.
    let mut again: Vec<(Vec<Option<String>>, Recorded)> = Vec::new();
    let mut results = Vec::new();
    for ((label, s), untraced) in runs.iter().zip(untraced) {
        let untraced_ms = untraced.as_ref().map(|(ns, _, _)| *ns as f64 / 1e6);
        let untraced_range = untraced.as_ref().and_then(|(_, _, r)| *r);
        // With a profile's [host], where this machine reports free pages too, the model's free
        // memory is what this setting's untraced runs met (read by them once reporting settled).
        let host = a.profile.host.clone().filter(|_| a.profile.costs.is_some() && live::host::reporting_order().is_some());
        let host = host.map(|(h, _)| (h, untraced.as_ref().and_then(|(_, f, _)| f.clone())));
        let first = (&rec, &timed_free, timed_range);
        let (model, rerecorded) = model_of_setting(&a, (label, s), first, host, accesses.clone(), &steps, &mut again, &mut out)?;
        let before_live = |model: &RunResult, n: u32| {
            steps.step("live", format!("{label}: live run {n}{}", if n > a.repeat.max(1) { " (a retry)" } else { "" }));
            settle_host_for(model, !a.json);
        };
        let lab = crate::program::ProgramExperiment { command: &a.command, tolerance: tol, repeat: a.repeat, retries: a.retries, options: opts.clone(), pressure: a.machine.pressure, before_live: &before_live };
        let o = lab.run(s, &model, rerecorded, (untraced_ms, untraced_range))?;
        differing += o.differs as usize;
        if a.json {
            json.push(o.json(label, s, &model, rerecorded));
        } else {
            progress::suspend(|| -> io::Result<()> {
                if o.attempts > 1 {
                    writeln!(out, "{}", report::compare::rerun_note(label, o.why.map_or("", |r| r.text()), o.attempts))?;
                }
                let kh_line = report::compare::khugepaged_tolerance_line(o.khugepaged.collapses, &o.khugepaged.why, &o.excused);
                report::compare::print_program_rows(&mut out, label, s, &o.rows, &o.live, o.differs.then_some(&o.parted), a.only_diff, &kh_line)?;
                out.flush()
            })?;
        }
        results.push((label.clone(), model, o.live));
    }
    steps.finish();
    print_summary(&mut out, json, &results, runs.len(), differing, a.json)?;
    Ok(differing > 0)
}

/// With a profile, each setting's untraced runs (`record --timed`: no ptrace stops or census),
/// all before the first replay, while this process is small.
fn untraced_runs(a: &CompareRecordArgs, steps: &progress::Steps) -> Result<Vec<Option<(u64, Option<uapi::profile::FreeLists>, Option<uapi::result::MsRange>)>>> {
    let mut untraced = Vec::new();
    for (label, s) in a.runs.iter() {
        untraced.push(if a.timed {
            steps.step("timed", format!("{label}: 3 untraced runs under the setting"));
            let _guard = live::SettingsGuard::apply(s)?;
            let argv: Vec<OsString> = a.command.iter().map(OsString::from).collect();
            Some(time_untraced(&argv, 3, true, !a.json)?)
        } else {
            None
        });
    }
    Ok(untraced)
}

/// The model of one setting: the recording replayed, recorded again first where the program
/// read a knob this setting changes (once per set of values, kept in `again`), priced with a
/// profile. Returns the model and whether it was recorded again.
#[allow(clippy::too_many_arguments)]
fn model_of_setting(
    a: &CompareRecordArgs,
    (label, s): (&String, &ThpSettings),
    first: (&record::Recording, &Option<uapi::profile::FreeLists>, Option<uapi::result::MsRange>),
    host: Option<(uapi::profile::HostCosts, Option<uapi::profile::FreeLists>)>,
    accesses: Option<sim::RecordedAccessInput>,
    steps: &progress::Steps,
    again: &mut Vec<(Vec<Option<String>>, Recorded)>,
    out: &mut impl Write,
) -> Result<(RunResult, bool)> {
    let source = &a.command.join(" ");
    steps.step("replay", format!("{label}: the model replays the recording"));
    let mut replay = sim::ReplayOptions { profile: sim::Profile { host, accesses, tlb: a.profile.tlb, ..Default::default() }, ..Default::default() };
    let (mut rec, mut timed_free, mut timed_range) = first;
    let mut model = crate::program::replay_model((source, &rec.header, &rec.events), s, &a.machine, &replay)?;
    let (knobs_read, knobs_changed) = model.model.as_ref().and_then(|m| m.replay.as_ref()).map(|r| (r.knobs_read.clone(), r.knobs_read_differing.clone())).unwrap_or_default();
    let rerecorded = !knobs_changed.is_empty();
    if rerecorded {
        let knobs = s.knob_map();
        let values: Vec<Option<String>> = knobs_read.iter().map(|k| knobs.get(k).cloned()).collect();
        if !again.iter().any(|(v, _)| *v == values) {
            if !a.json {
                progress::suspend(|| writeln!(out, "({label}: the program read {}; recording it again under this setting)", knobs_changed.join(", ")))?;
            }
            steps.step("record", format!("{label}: recording again under this setting"));
            let _guard = live::SettingsGuard::apply(s)?;
            again.push((values.clone(), record_program_under(&a.command, if a.timed { 3 } else { 0 }, &a.machine.pressure)?));
        }
        let found = &again.iter().find(|(v, _)| *v == values).expect("recorded for these values").1;
        (rec, timed_free, timed_range) = (&found.rec, &found.timed_free, found.timed_range);
        // The accesses were placed on the first recording's records.
        if replay.profile.accesses.take().is_some() && !a.json {
            progress::suspend(|| writeln!(out, "({label}: the accesses recorded with the first recording are not replayed with this one)"))?;
        }
        model = crate::program::replay_model((source, &rec.header, &rec.events), s, &a.machine, &replay)?;
    }
    if let Some(fault) = a.profile.costs.as_ref() {
        crate::program::price_replay(&mut model, (source, &rec.header, &rec.events), s, &a.machine, &replay, fault, timed_free.as_ref(), timed_range)?;
    }
    Ok((model, rerecorded))
}

/// After the settings: the time verdicts and, in text, how many settings matched.
fn print_summary(out: &mut impl Write, mut json: Vec<serde_json::Value>, results: &[(String, RunResult, RunResult)], n: usize, differing: usize, as_json: bool) -> Result<()> {
    let verdicts = crate::noise::settings_verdicts(&results);
    if as_json {
        crate::program::add_verdicts_json(&mut json, &verdicts);
        serde_json::to_writer_pretty(&mut *out, &json)?;
        writeln!(out)?;
    } else {
        report::compare::print_settings(&mut *out, &verdicts, "live: the median of 3 untraced runs, ± their range")?;
        report::compare::print_settings_count(&mut *out, n, differing)?;
    }
    Ok(())
}
