//! `thplab compare --record [--matrix [anon|shmem]] [--set ...] [--keep FILE] -- CMD [ARGS...]`:
//! record a real program once (THP disabled for it alone, crate `record`), then for each setting
//! predict it by replaying the recording in the model (`sim::run_recording`) and run it live
//! under that setting (`live::run_program`), and print both side by side.
//!
//! Tolerance: [`compare::Tolerance::program`] (minflt and per-size large-folio counts within 2 %
//! of live, issue #4), overridable with `--tolerance`. Exit 4 when a setting differs beyond it.

use std::ffi::OsString;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use uapi::{RunResult, ThpSettings};

use compare::{Row, RowKind};
use crate::exit;

/// Parsed arguments of `thplab compare --record`.
#[derive(Clone, Debug, Default)]
pub struct CompareRecordArgs {
    /// The program and its arguments.
    pub command: Vec<String>,
    /// `Some("anon")` / `Some("shmem")`: the matrix; `None`: `settings` alone.
    pub matrix: Option<String>,
    /// The given settings (used without `matrix`).
    pub settings: ThpSettings,
    /// Whether settings were given on the command line (refused with `matrix`).
    pub settings_given: bool,
    pub machine: sim::MachineConfig,
    /// `--tolerance` specs, applied on top of [`compare::Tolerance::program`].
    pub tolerance: Vec<String>,
    /// Keep the recording in this file.
    pub keep: Option<PathBuf>,
    /// When only system-wide counters differ, or khugepaged collapsed during a differing run,
    /// run live again up to N times.
    pub retries: u32,
    pub json: bool,
    /// `--profile`: the recording is timed untraced (`record --timed 3`) and the model's time,
    /// the program's own plus its modelled work, is set beside the live wall time.
    pub profile: Option<uapi::profile::MachineProfile>,
    /// The program's stdin/stdout/stderr to /dev/null in the live runs (the recording passes
    /// them through).
    pub quiet: bool,
    /// Live runs per setting (`--repeat`): the median by minflt is shown, minflt judged against
    /// the runs' spread.
    pub repeat: u32,
    /// `--accesses`: the program's accesses are recorded too (under valgrind) and replayed
    /// through this CPU's TLBs under this paging.
    pub accesses: Option<(&'static tlb::CpuPreset, tlb::Paging)>,
}

/// Record `command` once; returns the recording, its wall time in seconds and, with `timed`
/// runs (then the recording holds the program's untraced wall time, `record --timed`), the
/// free lists those runs met.
pub fn record_program(command: &[String], timed: u32) -> Result<(record::Recording, f64, Option<uapi::profile::FreeLists>)> {
    let argv: Vec<OsString> = command.iter().map(OsString::from).collect();
    let t = Instant::now();
    let mut rec = match record::record(&argv, &record::RecordOptions::default()) {
        Ok(r) => r,
        Err(record::RecordError::Unavailable(why)) => return Err(live::LiveError::NotAvailable(format!("recording: {why}")).into()),
        Err(e) => return Err(e.into()),
    };
    let secs = t.elapsed().as_secs_f64();
    let mut timed_free = None;
    if timed > 0 {
        let (ns, free) = crate::live_cmds::time_untraced(&argv, timed, false, true)?;
        rec.header.untraced_wall_ns = ns;
        timed_free = free;
    }
    if rec.header.lost_events > 0 {
        eprintln!(
            "thplab compare: WARNING: the kernel dropped {} events while recording {}: the recording is INCOMPLETE and the predictions will be off",
            rec.header.lost_events,
            command.join(" ")
        );
    }
    Ok((rec, secs, timed_free))
}

/// `--accesses`: the program run again under valgrind lackey (`record::accesses`), its
/// accesses placed on `rec`'s records; with `--keep FILE` also written beside it, as
/// FILE.accesses (what `thplab sim FILE` reads).
fn record_accesses(a: &CompareRecordArgs, rec: &record::Recording) -> Result<trace::accesses::AccessTrace> {
    let mut trace_bytes = Vec::new();
    rec.write_to(&mut trace_bytes)?;
    // The companion names its recording by the recording's trailer CRC (its last 4 bytes).
    let crc = u32::from_le_bytes(trace_bytes[trace_bytes.len() - 4..].try_into().expect("4 bytes"));
    let argv: Vec<OsString> = a.command.iter().map(OsString::from).collect();
    let native_ns = record::accesses::native_ns(&argv, rec);
    eprintln!("thplab compare: running {} under valgrind lackey for its accesses", a.command.join(" "));
    let mut bytes = Vec::new();
    let s = record::accesses::record_accesses(&argv, rec, crc, native_ns, &mut bytes).context("--accesses")?;
    let t = &s.totals;
    eprintln!(
        "thplab compare: {} data accesses in {} runs, {:.3} s under valgrind ({:.0}x native)",
        t.raw_accesses,
        t.runs,
        t.valgrind_ns as f64 / 1e9,
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

/// Each setting's time (model's elapsed, live wall time, in ms) as a ratio to the first
/// setting's, model beside live: what a setting gains or loses, whatever the absolute error.
fn print_time_ratios(out: &mut impl Write, times: &[(String, f64, f64)]) -> io::Result<()> {
    let Some((first, m0, l0)) = times.first() else { return Ok(()) };
    if times.len() < 2 || *m0 <= 0.0 || *l0 <= 0.0 {
        return Ok(());
    }
    writeln!(out, "time relative to {first} (model: the profile's; live: the median of 3 untraced runs)")?;
    writeln!(out, "  {:<28} {:>11} {:>11} {:>11} {:>11} {:>8}", "setting", "model ms", "live ms", "model ratio", "live ratio", "error")?;
    for (label, m, l) in times {
        let (mr, lr) = (m / m0, l / l0);
        writeln!(out, "  {label:<28} {m:>11.1} {l:>11.1} {mr:>11.3} {lr:>11.3} {:>+7.1}%", (mr / lr - 1.0) * 100.0)?;
    }
    writeln!(out)
}

/// `thplab compare --record ... -- CMD [ARGS...]`.
pub fn cmd_compare_record(a: CompareRecordArgs) -> Result<u8> {
    if a.command.is_empty() {
        bail!("compare --record: give the program after --: thplab compare --record -- CMD [ARGS...]");
    }
    let mut tol = compare::Tolerance::program();
    for t in &a.tolerance {
        tol.apply(t)?;
    }
    let runs: Vec<(String, ThpSettings)> = match a.matrix.as_deref() {
        Some(kind) => {
            if a.settings_given {
                bail!("--matrix runs its own settings; leave out --set, --settings and --cmdline");
            }
            if kind == "shmem" {
                compare::shmem_matrix()
            } else {
                compare::matrix()
            }
        }
        None => vec![("given settings".to_string(), a.settings.clone())],
    };
    if let Some(why) = crate::live_unavailable() {
        return Err(live::LiveError::NotAvailable(why).into());
    }
    if a.accesses.is_some() && record::accesses::valgrind_path().is_none() {
        bail!("--accesses runs the program under valgrind (lackey), which is not installed here (no valgrind in PATH): install it (apt-get install valgrind) or leave out --accesses");
    }
    let (rec, rec_secs, timed_free) = record_program(&a.command, if a.profile.is_some() { 3 } else { 0 })?;
    if let Some(path) = &a.keep {
        let f = std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        rec.write_to(BufWriter::new(f)).with_context(|| format!("writing {}", path.display()))?;
    }
    // With a profile, the live time is taken as the recording's was (`record --timed`:
    // untraced runs, no ptrace stops or census, each starting where the model's machine does),
    // under each setting, and the model meets the free lists those runs met. All first, while
    // this process is small: the model's replays (of a recording's accesses above all: a
    // gigabyte for sort's 128 M) move the free lists the runs would meet.
    let mut untraced = Vec::new();
    for (_, s) in &runs {
        untraced.push(match a.profile {
            Some(_) => {
                let _guard = live::SettingsGuard::apply(s)?;
                let argv: Vec<OsString> = a.command.iter().map(OsString::from).collect();
                Some(crate::live_cmds::time_untraced(&argv, 3, true, !a.json)?)
            }
            None => None,
        });
    }
    let accesses = match a.accesses {
        Some((cpu, paging)) => Some(sim::RecordedAccessInput { file: "(recorded with --accesses)".into(), trace: std::sync::Arc::new(record_accesses(&a, &rec)?), cpu, paging }),
        None => None,
    };
    let source = a.command.join(" ");
    let opts = live::ProgramOptions { quiet: a.quiet };
    let mut out = io::stdout().lock();
    let mut json = Vec::new();
    let mut differing = 0;
    let mut times = Vec::new();
    if !a.json {
        let faults = rec.header.counts.iter().find(|(k, _)| *k == trace::kind::FAULT).map_or(0, |c| c.1);
        writeln!(
            out,
            "recorded {source}: {} events ({faults} faults), {} lost, {:.3} s (exit status {})\n",
            rec.events.len(),
            rec.header.lost_events,
            rec_secs,
            rec.header.exit_status
        )?;
    }
    // A program that reads THP knobs (a JVM with -XX:+UseTransparentHugePages reads `enabled`)
    // may do otherwise under another value: where the replay finds that a setting changes a
    // knob the program read, the program is recorded again under that setting's knobs (through
    // the settings guard; THP stays disabled for the recorded program itself), once per set of
    // values of the knobs it read.
    let mut again: Vec<(Vec<Option<String>>, record::Recording, Option<uapi::profile::FreeLists>)> = Vec::new();
    for ((label, s), untraced) in runs.iter().zip(untraced) {
        let untraced_ms = untraced.as_ref().map(|(ns, _)| *ns as f64 / 1e6);
        // With a profile's [host], where this machine reports free pages too, the model's free
        // memory is what this setting's untraced runs met (read by them once reporting settled).
        let host = a.profile.as_ref().filter(|p| p.fault.is_some() && live::host::reporting_order().is_some()).and_then(|p| p.host.clone());
        let host = host.map(|h| (h, untraced.as_ref().and_then(|(_, f)| f.clone())));
        let mut replay = sim::ReplayOptions { host: host.clone(), accesses: accesses.clone(), ..Default::default() };
        let mut model = sim::run_recording_opts(&source, &rec.header, &rec.events, s, &a.machine, &replay)?;
        let (knobs_read, knobs_changed) = model.model.as_ref().and_then(|m| m.replay.as_ref()).map(|r| (r.knobs_read.clone(), r.knobs_read_differing.clone())).unwrap_or_default();
        let rerecorded = !knobs_changed.is_empty();
        let (mut rec, mut timed_free) = (&rec, &timed_free);
        if rerecorded {
            let knobs = s.knob_map();
            let values: Vec<Option<String>> = knobs_read.iter().map(|k| knobs.get(k).cloned()).collect();
            if !again.iter().any(|(v, _, _)| *v == values) {
                if !a.json {
                    writeln!(out, "({label}: the program read {}; recording it again under this setting)", knobs_changed.join(", "))?;
                }
                let _guard = live::SettingsGuard::apply(s)?;
                let (r, _, free) = record_program(&a.command, if a.profile.is_some() { 3 } else { 0 })?;
                again.push((values.clone(), r, free));
            }
            let found = again.iter().find(|(v, _, _)| *v == values).expect("recorded for these values");
            (rec, timed_free) = (&found.1, &found.2);
            // The accesses were placed on the first recording's records.
            if replay.accesses.take().is_some() && !a.json {
                writeln!(out, "({label}: the accesses recorded with the first recording are not replayed with this one)")?;
            }
            model = sim::run_recording_opts(&source, &rec.header, &rec.events, s, &a.machine, &replay)?;
        }
        if let Some(fault) = a.profile.as_ref().and_then(|p| p.fault.as_ref()) {
            model.time = Some(sim::time::recording(&model, &source, &rec.header, &rec.events, &a.machine, fault, &replay, timed_free.as_ref())?);
        }
        let run_live = || {
            crate::live_cmds::settle_host_for(&model, !a.json);
            live::run_program(&a.command, s, &opts).map(|mut l| {
                if let Some(live) = l.live.as_mut() {
                    live.untraced_ms = untraced_ms;
                }
                l
            })
        };
        // --repeat N: N live runs; the median by minflt is shown, and the model's minflt is
        // judged against the runs' own spread (within the tolerance of its lowest or highest).
        let mut lives = Vec::new();
        for _ in 0..a.repeat.max(1) {
            lives.push(run_live()?);
        }
        lives.sort_by_key(|l| l.process.minflt);
        let spread = (lives.len() > 1).then(|| MinfltSpread { runs: lives.len(), min: lives[0].process.minflt, max: lives[lives.len() - 1].process.minflt });
        let live = lives.swap_remove((lives.len() - 1) / 2);
        // The live daemon's phase is not the model's: one wake-up's collapses are allowed, and
        // said (compare::khugepaged).
        let kh_tol = compare::khugepaged::KhugepagedTolerance::of_replay(&model);
        let rows_of = |l: &RunResult| {
            let mut rows = program_rows(&model, l, &tol, spread);
            kh_tol.apply(&mut rows);
            rows
        };
        let compare::Retried { live, rows: _, attempts, why } = compare::retry_live(a.retries, live, rows_of, run_live)?;
        // Judged again to name the rows the tolerance excused (the same rows as retry_live's).
        let mut rows = program_rows(&model, &live, &tol, spread);
        let excused = kh_tol.apply(&mut rows);
        let differs = rows.iter().any(|r| r.differs);
        differing += differs as usize;
        if let (Some(t), Some(l)) = (&model.time, &live.live) {
            times.push((label.clone(), t.elapsed_ns as f64 / 1e6, l.untraced_ms.unwrap_or(l.wall_ms)));
        }
        let parted = compare::vmas::parting(&model, &live);
        if a.json {
            let kh = serde_json::json!({ "collapses": kh_tol.collapses, "max_ptes_none": kh_tol.max_ptes_none, "why": kh_tol.why, "excused": excused });
            json.push(serde_json::json!({ "label": label, "settings": s.knob_map(), "differs": differs, "rows": rows, "parted": parted, "rerecorded": rerecorded, "live_minflt_spread": spread, "khugepaged_tolerance": kh, "model": model, "live": live }));
        } else {
            if attempts > 1 {
                writeln!(out, "({label}: {}; ran live {attempts} times, kept the closest)", why.unwrap_or_default())?;
            }
            let kh_line = khugepaged_tolerance_line(&kh_tol, &excused);
            print_program_rows(&mut out, label, s, &rows, &live, differs.then_some(&parted), &kh_line)?;
        }
    }
    if a.json {
        serde_json::to_writer_pretty(&mut out, &json)?;
        writeln!(out)?;
    } else {
        print_time_ratios(&mut out, &times)?;
        writeln!(
            out,
            "{} of {} settings: model = live{}",
            runs.len() - differing,
            runs.len(),
            if differing > 0 { format!("; {differing} differ") } else { String::new() }
        )?;
    }
    Ok(if differing > 0 { exit::DIFFERS } else { exit::OK })
}

/// [`compare::rows`] for a program: the per-size `nr_anon` and `nr_anon_partially_mapped` stats
/// are levels, which the model reports at the processes' exit and the live run reads after
/// they are gone (their folios freed): shown, not judged. Live major faults (a file page read
/// from disk) are shown beside minflt: they are not in live minflt, while the recording counted
/// them as faults, so a cold page cache puts live minflt below the model's.
pub fn program_rows(model: &RunResult, live: &RunResult, tol: &compare::Tolerance, spread: Option<MinfltSpread>) -> Vec<Row> {
    let mut rows = compare::rows(model, live, tol);
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
    if majflt > 0 {
        let at = rows.iter().position(|r| r.field.starts_with("minflt")).map_or(0, |i| i + 1);
        rows.insert(at, Row { field: "majflt (live: not in minflt)".into(), model: 0, live: majflt as i64, kind: RowKind::Informational, differs: false });
    }
    rows
}

/// The khugepaged tolerance a setting's rows were judged with, why, and the rows only it let
/// pass.
pub fn khugepaged_tolerance_line(t: &compare::khugepaged::KhugepagedTolerance, excused: &[String]) -> String {
    let within = if excused.is_empty() { String::new() } else { format!("; within it only: {}", excused.join(", ")) };
    format!("khugepaged tolerance: {} collapses ({}){within}", t.collapses, t.why)
}

/// The live runs' minflt with `--repeat`: how many, the lowest and the highest.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct MinfltSpread {
    pub runs: usize,
    pub min: u64,
    pub max: u64,
}

/// The error of the model against live, in percent of live (`-` when both are 0).
pub fn pct_error(model: i64, live: i64) -> String {
    if live == 0 {
        return if model == 0 { "-".into() } else { "inf".into() };
    }
    format!("{:+.2}%", (model - live) as f64 * 100.0 / live as f64)
}

/// As [`compare::print_rows`], with the difference in percent of live and the live wall time,
/// where given the ranges where the two part, and the khugepaged tolerance line.
pub fn print_program_rows(out: &mut impl Write, label: &str, s: &ThpSettings, rows: &[Row], live: &RunResult, parted: Option<&compare::vmas::Parting>, khugepaged: &str) -> io::Result<()> {
    let n = rows.iter().filter(|r| r.differs).count();
    let wall = live.live.as_ref().map_or(0.0, |l| l.wall_ms);
    writeln!(
        out,
        "== {label}: {}  →  {}  (live {:.0} ms)",
        s.summary(),
        if n == 0 { "model = live".to_string() } else { format!("{n} DIFFERENCES") },
        wall
    )?;
    writeln!(out, "  {:<46} {:>12} {:>12} {:>9} {:>9}", "field", "model", "live", "diff", "error")?;
    for r in rows {
        if r.model == 0 && r.live == 0 {
            continue;
        }
        let mark = compare::row_mark(r);
        writeln!(out, "  {:<46} {:>12} {:>12} {:>+9} {:>9}{mark}", r.field, r.model, r.live, r.live - r.model, pct_error(r.model, r.live))?;
    }
    if let Some(u) = live.live.as_ref().and_then(|l| l.program.as_ref()).map(|p| &p.unmeasured).filter(|u| !u.is_empty()) {
        writeln!(out, "  not measured (no exit stop): {}", u.join("; "))?;
    }
    writeln!(out, "  {khugepaged}")?;
    if let Some(p) = parted {
        compare::vmas::print_parting(out, p, 8)?;
    }
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_errors() {
        assert_eq!(pct_error(102, 100), "+2.00%");
        assert_eq!(pct_error(0, 0), "-");
        assert_eq!(pct_error(1, 0), "inf");
    }
}
