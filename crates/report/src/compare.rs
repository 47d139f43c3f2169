//! The experiment's text (`thplab compare`, `demo`, `sim --sample`): a setting's rows
//! (`== label: settings  →  N DIFFERENCES`, then field, model, live, `model − live` and the
//! row's note; a recorded program's with the error in percent of live), two timelines side by
//! side, where a recorded program's model and live part, the time table, and the count of
//! settings where model = live. It formats what `experiment` computed, read from the schema
//! (`uapi::compare`); the experiment's modules re-export these functions at their old paths.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};

use uapi::compare::{Interval, Parting, Row, RowKind, SettingTimes, Timed, TimelineComparison, Verdict, TIME_ROW};
use thp_abi::ThpSettings;
use uapi::{RunResult, Timeline, TimelineSample, VmaMap};

// Rows (`thplab compare`).

/// The note printed after a row: why it differs or why a difference is not judged.
pub fn row_mark(r: &Row) -> &'static str {
    match (r.differs, r.kind) {
        (true, _) => "  <-- differs",
        (false, RowKind::SystemWide) if r.model != r.live => "  (system-wide, within tolerance)",
        (false, RowKind::Informational) if r.field == TIME_ROW || r.field.starts_with("time of phase ") => "  (not judged; --tolerance time=P% judges it)",
        (false, RowKind::Informational) if r.model != r.live => "  (machine state, not judged)",
        _ => "",
    }
}

pub fn print_rows(out: &mut impl Write, label: &str, s: &ThpSettings, rows: &[Row]) -> io::Result<()> {
    print_rows_only(out, label, s, rows, false)
}

/// [`print_rows`]; with `only_diff`, only the rows whose model and live values differ (judged
/// or not).
pub fn print_rows_only(out: &mut impl Write, label: &str, s: &ThpSettings, rows: &[Row], only_diff: bool) -> io::Result<()> {
    let n = rows.iter().filter(|r| r.differs).count();
    writeln!(out, "== {label}: {}  →  {}", s.summary(), if n == 0 { "model = live".to_string() } else { format!("{n} DIFFERENCES") })?;
    if let Some(note) = model_only_note(s, rows) {
        writeln!(out, "{note}")?;
    }
    for l in row_lines(rows, None, only_diff) {
        writeln!(out, "{l}")?;
    }
    writeln!(out)
}

/// With `--kernel` other than 6.18 or a `--policy`: which rows the live kernel (6.18) cannot
/// check. Every row the version or policy moves is the model's alone (khugepaged's collapses
/// and what follows from them: folios, census, `pages_collapsed`); the per-size stats 6.18 does
/// not have are named. `None` for 6.18 without a policy.
pub fn model_only_note(s: &ThpSettings, rows: &[Row]) -> Option<String> {
    let mut what = Vec::new();
    if s.kernel.model_only() {
        what.push(format!("kernel {}", s.kernel));
    }
    if let Some(p) = s.policy {
        what.push(format!("policy {p}"));
    }
    if what.is_empty() {
        return None;
    }
    let absent: Vec<&str> = rows.iter().filter(|r| r.field.contains("/stats/collapse_exceed_")).map(|r| r.field.as_str()).collect();
    let mut note = format!(
        "  model-only: the model ran {}; the live kernel runs 6.18 and cannot check what that changes (khugepaged's collapses and the folios, census and counters they move)",
        what.join(" and ")
    );
    if !absent.is_empty() {
        note += &format!("; not in 6.18 at all: {}", absent.join(", "));
    }
    Some(note)
}

/// A column computed from a row, after `model − live`: its header and its cell.
pub type ExtraColumn<'a> = (&'a str, &'a dyn Fn(&Row) -> String);

/// The rows as a table indented by 2: field, model, live, `model − live` (the sign says which
/// side is larger), an `extra` column, and the row's note; each column as wide as its widest
/// cell. Rows where both sides are 0 are left out, and with `only_diff` every row whose sides
/// are equal (a line says how many).
pub fn row_lines(rows: &[Row], extra: Option<ExtraColumn>, only_diff: bool) -> Vec<String> {
    let mut head = vec!["field".to_string(), "model".into(), "live".into(), "model − live".into()];
    head.extend(extra.map(|(h, _)| h.to_string()));
    let mut cells = vec![head];
    let shown = rows.iter().filter(|r| !(r.model == 0 && r.live == 0) && (!only_diff || r.model != r.live));
    for r in shown {
        let mut c = vec![r.field.clone(), r.model.to_string(), r.live.to_string(), format!("{:+}", r.model - r.live)];
        c.extend(extra.map(|(_, f)| f(r)));
        c.push(row_mark(r).trim_start().to_string());
        cells.push(c);
    }
    let equal = rows.iter().filter(|r| !(r.model == 0 && r.live == 0) && r.model == r.live).count();
    let mut left = vec![true, false, false, false];
    left.extend(extra.map(|_| false));
    left.push(true);
    let mut lines: Vec<String> = crate::text::layout(&cells, &left).into_iter().map(|l| format!("  {l}")).collect();
    if only_diff && equal > 0 {
        lines.push(format!("  ({equal} equal row{} not shown: --only-diff)", if equal == 1 { "" } else { "s" }));
    }
    lines
}

/// The note before a setting's rows when its live run was repeated: `(4K: why; ran live 3
/// times, kept the closest)`.
pub fn rerun_note(label: &str, why: &str, attempts: u32) -> String {
    format!("({label}: {why}; ran live {attempts} times, kept the closest)")
}

/// The count of settings that compare printed, after them: `2 of 3 settings: model = live; 1 differ`.
pub fn print_settings_count(out: &mut impl Write, settings: usize, differing: usize) -> io::Result<()> {
    writeln!(out, "{} of {} settings: model = live{}", settings - differing, settings, if differing > 0 { format!("; {differing} differ") } else { String::new() })
}

// A recorded program's rows (`compare --record`).

/// The khugepaged tolerance a setting's rows were judged with, why, and the rows only it let
/// pass.
pub fn khugepaged_tolerance_line(collapses: i64, why: &str, excused: &[String]) -> String {
    let within = if excused.is_empty() { String::new() } else { format!("; within it only: {}", excused.join(", ")) };
    format!("khugepaged tolerance: {collapses} collapses ({why}){within}")
}

/// The error of the model against live, (model − live) / live in percent (`-` when both are 0),
/// the sign of the `model − live` column.
pub fn pct_error(model: i64, live: i64) -> String {
    if live == 0 {
        return if model == 0 { "-".into() } else { "inf".into() };
    }
    format!("{:+.2}%", (model - live) as f64 * 100.0 / live as f64)
}

/// As [`print_rows`], with the difference in percent of live and the live wall time,
/// where given the ranges where the two part, and the khugepaged tolerance line.
#[allow(clippy::too_many_arguments)]
pub fn print_program_rows(out: &mut impl Write, label: &str, s: &ThpSettings, rows: &[Row], live: &RunResult, parted: Option<&Parting>, only_diff: bool, khugepaged: &str) -> io::Result<()> {
    let n = rows.iter().filter(|r| r.differs).count();
    // The live time the time row compares (the untraced runs' median where there are some).
    let time = Timed::live(live).map_or("-".into(), |t| fmt_timed(&t));
    writeln!(out, "== {label}: {}  →  {}  (live {time})", s.summary(), if n == 0 { "model = live".to_string() } else { format!("{n} DIFFERENCES") })?;
    let error = |r: &Row| pct_error(r.model, r.live);
    for l in row_lines(rows, Some(("error", &error)), only_diff) {
        writeln!(out, "{l}")?;
    }
    if let Some(u) = live.live.as_ref().and_then(|l| l.program.as_ref()).map(|p| &p.unmeasured).filter(|u| !u.is_empty()) {
        writeln!(out, "  not measured (no exit stop): {}", u.join("; "))?;
    }
    for l in crate::print::wrap(&format!("  {khugepaged}"), crate::print::fit_width(), 4) {
        writeln!(out, "{l}")?;
    }
    if let Some(p) = parted {
        print_parting(out, p, 8)?;
    }
    writeln!(out)
}

// Timelines (`--sample`).

/// The folio census of a sample, largest size first: `2048kB×2 4kB×1024`.
fn sample_folios(s: &TimelineSample) -> String {
    let text: Vec<String> = s.folios.iter().rev().map(|(k, n)| format!("{k}×{n}")).collect();
    if text.is_empty() {
        "-".into()
    } else {
        text.join(" ")
    }
}

const HEADER: [&str; 6] = ["Rss kB", "AnonHugePages", "ShmemPmdMapped", "collapsed", "full_scans", "folios"];

fn cells(s: &TimelineSample) -> [String; 6] {
    [
        s.rss_kb.to_string(),
        s.anon_huge_pages_kb.to_string(),
        s.shmem_pmd_mapped_kb.to_string(),
        s.pages_collapsed.to_string(),
        s.full_scans.to_string(),
        sample_folios(s),
    ]
}

/// One timeline as a table (`sim --sample`, `live --sample`).
pub fn print_timeline(out: &mut impl Write, t: &Timeline) -> io::Result<()> {
    writeln!(out, "timeline: a sample every {} ms (AnonHugePages and ShmemPmdMapped in kB;", t.interval_ms)?;
    writeln!(out, "  collapsed, full_scans: khugepaged/pages_collapsed and full_scans since the start)")?;
    writeln!(out, "  {:>9} {:>10} {:>13} {:>14} {:>9} {:>10}  {}", "t (ms)", HEADER[0], HEADER[1], HEADER[2], HEADER[3], HEADER[4], HEADER[5])?;
    for s in &t.samples {
        let c = cells(s);
        writeln!(out, "  {:>9.0} {:>10} {:>13} {:>14} {:>9} {:>10}  {}", s.t_ms, c[0], c[1], c[2], c[3], c[4], c[5])?;
    }
    if t.samples.is_empty() {
        writeln!(out, "  (the run ended before the first sample)")?;
    }
    Ok(())
}

/// The comparison as text: each field `model | live`, `*` where they part, then the collapses.
/// Each field's `|` lines up down the table (the model's values right-aligned before it, the
/// live ones left-aligned after it); ShmemPmdMapped is left out when it is 0 on both sides
/// throughout.
pub fn print_comparison(out: &mut impl Write, c: &TimelineComparison) -> io::Result<()> {
    let dash = || ["-".to_string(), "-".into(), "-".into(), "-".into(), "-".into(), "-".into()];
    let pairs: Vec<([String; 6], [String; 6])> = c.rows.iter().map(|r| (r.model.as_ref().map_or_else(dash, cells), r.live.as_ref().map_or_else(dash, cells))).collect();
    let shmem = pairs.iter().any(|(m, l)| m[2] != "0" && m[2] != "-" || l[2] != "0" && l[2] != "-");
    let fields: Vec<usize> = (0..6).filter(|&i| i != 2 || shmem).collect();
    let width = |i: usize, side: usize| pairs.iter().map(|p| if side == 0 { &p.0[i] } else { &p.1[i] }).map(|x| x.chars().count()).max().unwrap_or(1);
    writeln!(out, "  timeline: a sample every {} ms, model | live; * where they part{}", c.interval_ms, if shmem { "" } else { " (ShmemPmdMapped 0 throughout)" })?;
    // Every cell of a field is as wide as the next (model right-aligned, live left-aligned), so
    // the layout moves them together and their `|` line up.
    let mut head = vec!["t (ms)".to_string()];
    head.extend(fields.iter().map(|&i| HEADER[i].to_string()));
    let mut table = vec![head];
    for (r, (m, l)) in c.rows.iter().zip(&pairs) {
        let mut row = vec![r.t_ms.to_string()];
        row.extend(fields.iter().map(|&i| format!("{:>wm$} | {:<wl$}", m[i], l[i], wm = width(i, 0), wl = width(i, 1))));
        table.push(row);
    }
    let left: Vec<bool> = (0..table[0].len()).map(|k| k + 1 == table[0].len()).collect();
    for (k, line) in crate::text::layout(&table, &left).into_iter().enumerate() {
        let mark = if k > 0 && !c.rows[k - 1].parts.is_empty() { '*' } else { ' ' };
        writeln!(out, "{mark} {line}")?;
    }
    let fields: BTreeSet<&str> = c.rows.iter().flat_map(|r| r.parts.iter().copied()).collect();
    match c.first_parting_ms {
        Some(t) => writeln!(out, "  they part first at {t} ms (over the run: {})", fields.into_iter().collect::<Vec<_>>().join(", "))?,
        None => writeln!(out, "  model = live at every sample")?,
    }
    let ms = |x: Option<f64>| x.map_or("never".to_string(), |t| format!("{t:.0} ms"));
    for k in &c.collapses {
        let verdict = if k.on_time { "on time".to_string() } else { format!("DIFFERS (allowed: {} ms)", c.allowed_ms) };
        writeln!(out, "  collapse {}: model by {}, live by {}: {verdict}", k.n, ms(k.model_ms), ms(k.live_ms))?;
    }
    // Longer than one scan period (`allowed_ms` is one scan period plus one interval).
    if let Some(w) = c.live_daemon_wait_ms.filter(|&w| w > c.allowed_ms - c.interval_ms) {
        writeln!(out, "  the live khugepaged waited {w} ms on a runqueue during the run (it runs at nice 19, and other work kept the CPUs busy): its collapses came late by up to that")?;
    }
    Ok(())
}

// Where a recorded program's model and live part.

/// `4kB 294, 512kB 3, zero 1`: a VMA's folios by size, smallest first.
fn vma_folios(v: &VmaMap) -> String {
    let mut parts: Vec<String> = v.census.sizes.iter().map(|(k, e)| format!("{k} {}", e.folios)).collect();
    if v.census.zero_page_ptes > 0 {
        parts.push(format!("zero page {}", v.census.zero_page_ptes));
    }
    if v.census.huge_zero_pmds > 0 {
        parts.push(format!("huge zero {}", v.census.huge_zero_pmds));
    }
    if parts.is_empty() {
        "nothing mapped".into()
    } else {
        parts.join(", ")
    }
}

/// The text form: each parted range, the model's VMAs then live's, at most `limit` ranges.
pub fn print_parting(out: &mut impl Write, p: &Parting, limit: usize) -> io::Result<()> {
    if p.ranges.is_empty() && p.unpaired_model.is_empty() && p.unpaired_live.is_empty() {
        return Ok(());
    }
    writeln!(out, "  where they part (per process at its exit, the VMAs of each range whose bounds or folios differ):")?;
    for r in p.ranges.iter().take(limit) {
        writeln!(out, "    {} (recorded pid {}, live {}) {}-{}", r.comm, r.model_pid, r.live_pid, r.start, r.end)?;
        for (side, vs) in [("model", &r.model), ("live", &r.live)] {
            if vs.is_empty() {
                writeln!(out, "      {side:<6} no VMA")?;
            }
            for (i, v) in vs.iter().enumerate() {
                let range = format!("{}-{}", v.start, v.end);
                writeln!(out, "      {:<6} {range:<29} {} {:<12} {}", if i == 0 { side } else { "" }, v.perms, v.name, vma_folios(v))?;
            }
        }
    }
    if p.ranges.len() > limit {
        writeln!(out, "    ... {} more ranges (--json lists every one)", p.ranges.len() - limit)?;
    }
    if !p.unpaired_model.is_empty() || !p.unpaired_live.is_empty() {
        writeln!(out, "    processes with no counterpart of the same name: model [{}], live [{}]", p.unpaired_model.join(", "), p.unpaired_live.join(", "))?;
    }
    Ok(())
}

// Times and their noise.

/// A time verdict in words (`compare`'s time table).
pub trait VerdictText {
    fn text(&self) -> String;
    fn spread_text(&self) -> String;
    fn against_live_text(&self) -> String;
}

impl VerdictText for Verdict {
    /// `+3.0 % ± 9.0 %: no measurable effect`, or with an uneven interval
    /// `+27.0 % (-5.0 % .. +60.0 %): no measurable effect`; `faster`/`slower` where measurable.
    fn text(&self) -> String {
        let spread = self.spread_text();
        let word = match self.measurable {
            None => "spread unknown (one live run, or a profile without spreads)",
            Some(false) => "no measurable effect",
            Some(true) if self.diff_pct > 0.0 => "measurably slower",
            Some(true) => "measurably faster",
        };
        format!("{spread}: {word}")
    }

    /// `+3.0 % ± 9.0 %`, or `+27.0 % (-5.0 % .. +60.0 %)` with an uneven interval.
    fn spread_text(&self) -> String {
        let (down, up) = (self.diff_pct - self.low_pct, self.high_pct - self.diff_pct);
        if (up - down).abs() <= 0.05 * up.max(down) + 0.05 {
            format!("{:+.1} % ± {:.1} %", self.diff_pct, up.max(down))
        } else {
            format!("{:+.1} % ({:+.1} % .. {:+.1} %)", self.diff_pct, self.low_pct, self.high_pct)
        }
    }

    /// A model time against a live one: `model -17.0 % ± 25.0 % of live: within the noise`.
    fn against_live_text(&self) -> String {
        let word = match self.measurable {
            None => "spread unknown",
            Some(false) => "within the noise",
            Some(true) => "outside the noise",
        };
        format!("model {} of live: {word}", self.spread_text())
    }
}

/// ns as `1.807 s ± 0.120 s` (or `408.2 ms ± 30.1 ms`), `+up/-down` when uneven; no ± for an
/// unknown spread (`(± unknown)`).
pub fn fmt_timed(t: &Timed) -> String {
    let (lo, hi) = t.bounds();
    let (down, up) = (t.ns - lo, hi - t.ns);
    let (div, unit, prec) = if t.ns.max(hi) >= 1e9 { (1e9, "s", 3) } else { (1e6, "ms", 1) };
    let v = |x: f64| format!("{:.prec$}", x / div);
    if !t.known {
        return format!("{} {unit} (± unknown)", v(t.ns));
    }
    if (up - down).abs() <= 0.05 * up.max(down) + div * 1e-4 {
        format!("{} {unit} ± {} {unit}", v(t.ns), v(up.max(down)))
    } else {
        format!("{} {unit} +{}/-{} {unit}", v(t.ns), v(up), v(down))
    }
}

/// Every setting's time, model and live with their ±, and each later setting against the first
/// on each side: whether the difference is outside the noise. `live_note` says what the live
/// time is. Nothing without times.
pub fn print_settings(out: &mut impl Write, verdicts: &[SettingTimes], live_note: &str) -> io::Result<()> {
    if verdicts.iter().all(|v| v.model.is_none()) {
        return Ok(());
    }
    let fmt = |i: &Option<Interval>| i.map_or("-".to_string(), |i| {
        let t = Timed { ns: i.ns, down: i.ns - i.low_ns, up: i.high_ns - i.ns, shared: BTreeMap::new(), known: i.high_ns > i.low_ns };
        fmt_timed(&t)
    });
    line(out, &format!("time (model: the profile's, ± its spreads and the host state; {live_note})"))?;
    let assumed: Vec<&str> = verdicts.iter().filter_map(|v| v.host.as_ref().map(|h| h.assumed.as_str())).collect();
    let same = assumed.windows(2).all(|w| w[0] == w[1]);
    if let (true, Some(a)) = (same, assumed.first()) {
        line(out, &format!("  host state the model assumed: {a}"))?;
    }
    for v in verdicts {
        let vs_live = v.model_vs_live.map_or(String::new(), |x| format!(": {}", x.against_live_text()));
        line(out, &format!("  {}: model {}, live {}{vs_live}", v.label, fmt(&v.model), fmt(&v.live)))?;
        if let Some(h) = &v.host {
            if !same {
                line(out, &format!("    host state the model assumed: {}", h.assumed))?;
            }
            line(out, &format!("    host states it cannot know: {} to {} host faults move it {} .. {}", h.low_faults, h.high_faults, signed_secs(-h.down_ns), signed_secs(h.up_ns)))?;
        }
        if let Some(first) = &v.against {
            let text = |x: &Option<Verdict>| x.map_or("-".to_string(), |x| x.text());
            line(out, &format!("    against {first}: model {}; live {}", text(&v.model_vs_first), text(&v.live_vs_first)))?;
        }
    }
    writeln!(out)
}

/// One line of prose fitted to [`crate::text::TEXT_WIDTH`] columns, continuation lines indented
/// two past its own indent.
fn line(out: &mut impl Write, text: &str) -> io::Result<()> {
    let indent = text.len() - text.trim_start_matches(' ').len() + 2;
    for l in crate::text::wrap(text, Some(crate::text::TEXT_WIDTH), indent) {
        writeln!(out, "{l}")?;
    }
    Ok(())
}

/// ns as a signed `-1.234 s` / `+12.3 ms`.
pub fn signed_secs(ns: f64) -> String {
    // Under 0.05 ms: no direction worth a sign.
    let sign = if ns.abs() < 5e4 { "±" } else if ns < 0.0 { "-" } else { "+" };
    let a = ns.abs();
    if a >= 1e9 {
        format!("{sign}{:.3} s", a / 1e9)
    } else {
        format!("{sign}{:.1} ms", a / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 6.18 without a policy: no note; 7.2: the note names the version and the rows 6.18 lacks.
    #[test]
    fn a_version_or_policy_marks_the_rows_model_only() {
        let row = |field: &str| Row { field: field.into(), model: 1, live: 0, kind: RowKind::SystemWide, differs: true };
        let rows = [row("hugepages-64kB/stats/collapse_exceed_none_pte"), row("minflt")];
        let mut s = ThpSettings::default();
        assert_eq!(model_only_note(&s, &rows), None);
        s.set("kernel", "7.2").unwrap();
        let n = model_only_note(&s, &rows).unwrap();
        assert!(n.starts_with("  model-only: the model ran kernel 7.2; the live kernel runs 6.18"), "{n}");
        assert!(n.ends_with("; not in 6.18 at all: hugepages-64kB/stats/collapse_exceed_none_pte"), "{n}");
        s.set("kernel", "6.18").unwrap();
        s.set("policy", "mthp-collapse-v18").unwrap();
        assert!(model_only_note(&s, &rows[1..]).unwrap().contains("ran policy mthp-collapse-v18; the live"));
    }

    #[test]
    fn percent_errors() {
        assert_eq!(pct_error(102, 100), "+2.00%");
        assert_eq!(pct_error(0, 0), "-");
        assert_eq!(pct_error(1, 0), "inf");
    }

    #[test]
    fn the_row_table_aligns_and_signs_model_minus_live() {
        let r = |field: &str, model: i64, live: i64, differs: bool| Row { field: field.into(), model, live, kind: RowKind::Process, differs };
        let rows = [r("minflt", 262144, 262146, false), r("folios 2048kB", 512, 511, true), r("folios 4kB", 7, 7, false), r("zero", 0, 0, false)];
        let lines = row_lines(&rows, None, false);
        assert_eq!(
            lines,
            [
                "  field           model    live  model − live",
                "  minflt         262144  262146            -2",
                "  folios 2048kB     512     511            +1  <-- differs",
                "  folios 4kB          7       7            +0",
            ]
        );
        let pct = |r: &Row| format!("{}%", r.model - r.live);
        let lines = row_lines(&rows, Some(("error", &pct)), true);
        assert_eq!(lines[0], "  field           model    live  model − live  error");
        assert_eq!(lines[2], "  folios 2048kB     512     511            +1     1%  <-- differs");
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[3], "  (1 equal row not shown: --only-diff)");
    }
}
