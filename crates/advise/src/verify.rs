//! `--verify N`: the top N points run live beside their prediction, each the median of 5 runs,
//! under its settings applied through the settings guard (`live::SettingsGuard`, restored after
//! each), as `thplab compare` runs them: a program untraced (`experiment::host::time_untraced`,
//! `record --timed`'s timing: fork to reaping, each run from a settled host), a workload through
//! the live executor (`experiment::host::run_live`, its per-process choice in its statements).
//!
//! The rule (issue #31): the recommended point's live time is within 5 % of the best live time
//! among those run, or within the live spread (max − min of its 5 runs) of that best point where
//! the spread is larger. Where the advice named no winner, the defaults are judged the same
//! way: within, the live kernel agrees that no setting is measurably faster.

use anyhow::Result;
use serde::Serialize;

use crate::pareto::Recommendation;
use crate::Scored;

/// Live runs per verified point unless `--runs` says otherwise.
pub const RUNS: u32 = 5;
/// The verdict's margin, percent of the best live time.
pub const MARGIN_PCT: f64 = 5.0;

/// One point run live.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verified {
    /// Index into the advice's points.
    pub index: usize,
    pub label: String,
    pub predicted_ms: f64,
    /// The median of the runs, and their lowest and highest.
    pub live_ms: f64,
    pub live_min_ms: f64,
    pub live_max_ms: f64,
}

/// The verification's rows and verdict.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verification {
    pub runs_each: u32,
    pub rows: Vec<Verified>,
    /// Row of the best live median.
    pub best: usize,
    /// Row judged: the recommended point, or the defaults where no winner was named.
    pub judged: usize,
    /// The judged row is within 5 % of the best live time, or within the best's spread.
    pub within: bool,
    /// The verdict in words.
    pub why: String,
}

/// How to run a point live.
pub enum Live<'a> {
    /// A program: its command line.
    Program(&'a [String]),
    /// A workload, under a memcg limit and swap where given.
    Workload { workload: &'a workload::Workload, pressure: thp_abi::Pressure },
}

/// The points to verify: the judged one first, then the fastest predicted, `n` in all.
pub fn pick(points: &[Scored], rec: &Recommendation, n: usize) -> Vec<usize> {
    let judged = match rec {
        Recommendation::Winner { index, .. } => *index,
        Recommendation::NoWinner { baseline, .. } => *baseline,
    };
    let mut by_time: Vec<usize> = (0..points.len()).filter(|&i| points[i].point.is_some() && i != judged).collect();
    by_time.sort_by(|&a, &b| points[a].point.as_ref().expect("ok").time_ns.total_cmp(&points[b].point.as_ref().expect("ok").time_ns));
    std::iter::once(judged).chain(by_time).take(n.max(1)).collect()
}

/// Run `picked` live and judge (row 0 is the judged one).
pub fn run(points: &[Scored], picked: &[usize], live: &Live, runs: u32, progress: bool) -> Result<Verification> {
    let mut rows = Vec::new();
    for (k, &i) in picked.iter().enumerate() {
        let s = &points[i];
        if progress {
            eprintln!("thplab advise: verifying {} of {}: {} ({runs} live runs)", k + 1, picked.len(), s.choice.label);
        }
        let (live_ms, live_min_ms, live_max_ms) = run_point(s, live, runs, progress)?;
        let predicted_ms = s.point.as_ref().map_or(0.0, |p| p.time_ns / 1e6);
        rows.push(Verified { index: i, label: s.choice.label.clone(), predicted_ms, live_ms, live_min_ms, live_max_ms });
    }
    let mut v = judge(rows, 0);
    v.runs_each = runs;
    Ok(v)
}

/// One point's live median, lowest and highest (ms).
fn run_point(s: &Scored, live: &Live, runs: u32, progress: bool) -> Result<(f64, f64, f64)> {
    let settings = &s.choice.settings;
    match live {
        Live::Program(cmd) => {
            let guard = live::SettingsGuard::apply(settings)?;
            let argv: Vec<std::ffi::OsString> = cmd.iter().map(Into::into).collect();
            let (ns, _, range) = experiment::host::time_untraced(&argv, runs, true, progress)?;
            guard.restore()?;
            let ms = ns as f64 / 1e6;
            Ok((ms, range.map_or(ms, |r| r.min), range.map_or(ms, |r| r.max)))
        }
        Live::Workload { workload, pressure } => {
            let w = crate::predict::with_process(workload, s.choice.process);
            let regions = s.result.as_ref().map(|r| r.regions.clone()).unwrap_or_default();
            let r = experiment::host::run_live(&w, settings, &regions, runs, progress, &sim::Profile::default(), pressure)?;
            let l = r.live.as_ref().ok_or_else(|| anyhow::anyhow!("the live run of {} has no live section", s.choice.label))?;
            let ms = l.time_ms();
            Ok((ms, l.time_range_ms.map_or(ms, |r| r.min), l.time_range_ms.map_or(ms, |r| r.max)))
        }
    }
}

/// The verdict on `rows` for row `judged` (module documentation).
pub fn judge(rows: Vec<Verified>, judged: usize) -> Verification {
    let best = (0..rows.len()).min_by(|&a, &b| rows[a].live_ms.total_cmp(&rows[b].live_ms)).expect("at least one row");
    let (b, j) = (&rows[best], &rows[judged]);
    let over = j.live_ms - b.live_ms;
    let spread = b.live_max_ms - b.live_min_ms;
    let pct = if b.live_ms > 0.0 { over / b.live_ms * 100.0 } else { 0.0 };
    let within = pct <= MARGIN_PCT || over <= spread;
    let why = if best == judged {
        format!("{} has the best live time of the {} run ({:.1} ms)", j.label, rows.len(), j.live_ms)
    } else if within {
        let inside = if pct > MARGIN_PCT { format!("within the best's live spread ({spread:.1} ms)") } else { format!("within {MARGIN_PCT} %") };
        format!("{} is {pct:.1} % slower live than the best, {} ({:.1} ms): {inside}", j.label, b.label, b.live_ms)
    } else {
        format!("{} is {pct:.1} % slower live than the best, {} ({:.1} ms), beyond {MARGIN_PCT} % and the best's spread ({spread:.1} ms)", j.label, b.label, b.live_ms)
    };
    Verification { runs_each: RUNS, rows, best, judged, within, why }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(label: &str, ms: f64, min: f64, max: f64) -> Verified {
        Verified { index: 0, label: label.into(), predicted_ms: 0.0, live_ms: ms, live_min_ms: min, live_max_ms: max }
    }

    #[test]
    fn within_five_percent_or_the_best_spread() {
        // 104 against 100: 4 % → within.
        assert!(judge(vec![row("rec", 104.0, 103.0, 105.0), row("best", 100.0, 99.0, 101.0)], 0).within);
        // 110 against 100 with a spread of 4: beyond.
        let v = judge(vec![row("rec", 110.0, 109.0, 111.0), row("best", 100.0, 98.0, 102.0)], 0);
        assert!(!v.within);
        assert_eq!(v.why, "rec is 10.0 % slower live than the best, best (100.0 ms), beyond 5 % and the best's spread (4.0 ms)");
        // 110 against 100 whose runs spread 90..112: within its spread.
        let v = judge(vec![row("rec", 110.0, 109.0, 111.0), row("best", 100.0, 90.0, 112.0)], 0);
        assert!(v.within && v.why.ends_with("within the best's live spread (22.0 ms)"), "{}", v.why);
        let v = judge(vec![row("rec", 90.0, 89.0, 91.0), row("other", 100.0, 99.0, 101.0)], 0);
        assert_eq!((v.best, v.within), (0, true));
    }
}
