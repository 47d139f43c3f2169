//! The comparison of a model result with a live one, as `thplab compare` prints it and
//! `compare --json` writes it: the rows in the kernel's names ([`Row`], judged by their
//! [`RowKind`]), the times with their noise ([`Timed`], [`Verdict`], [`SettingTimes`]), two
//! `--sample` timelines side by side ([`TimelineComparison`]) and where a recorded program's
//! model and live part ([`Parting`]). The experiment crate computes them, the report crate
//! renders them; both read them here, so that the report needs no model.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::{RunResult, TimelineSample, VmaMap};

// Rows.

/// Whether a row can fail the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RowKind {
    /// Exact for the process: minflt, Rss, census.
    Process,
    /// System-wide: other processes may move it.
    SystemWide,
    /// Shown, never a failure: depends on machine state before the run (the huge zero folio
    /// may already exist), or the model alone knows it.
    Informational,
}

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub field: String,
    pub model: i64,
    pub live: i64,
    pub kind: RowKind,
    pub differs: bool,
}

/// The row of the model's priced time against the live wall time.
pub const TIME_ROW: &str = "time (us)";

/// The row of the frames written that the host had dropped (page reporting), model against live.
pub const HOST_FAULTS_ROW: &str = "host faults (frames reported free)";

// Times and their noise.

/// A time (ns) and how far it may be off: down to `ns − down`, up to `ns + up`, and by the
/// errors it shares with other times of the same source (`shared`: name → signed ns).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timed {
    pub ns: f64,
    pub down: f64,
    pub up: f64,
    pub shared: BTreeMap<String, f64>,
    /// Whether its spread is known (a live time of one run: no).
    pub known: bool,
}

impl Timed {
    /// The model's time of `r`, with its uncertainty (none: a profile without spreads and
    /// without `[host]`; then `known` is false).
    pub fn model(r: &RunResult) -> Option<Timed> {
        let t = r.time.as_ref()?;
        let ns = t.elapsed_ns as f64;
        let Some(u) = &t.uncertainty else { return Some(Timed { ns, ..Default::default() }) };
        let mut shared = u.profile_ns.clone();
        if u.program_ns > 0.0 {
            shared.insert("program".into(), u.program_ns);
        }
        let (down, up) = u.host.as_ref().map_or((0.0, 0.0), |h| (h.down_ns, h.up_ns));
        Some(Timed { ns, down, up, shared, known: true })
    }

    /// The live time of `r` compared with the model's (`LiveSection::time_ms`), ± the range of
    /// its runs.
    pub fn live(r: &RunResult) -> Option<Timed> {
        let l = r.live.as_ref()?;
        let ns = l.time_ms() * 1e6;
        Some(match l.time_range_ms {
            Some(range) => {
                let pm = (range.max - range.min) * 1e6;
                Timed { ns, down: pm, up: pm, shared: BTreeMap::new(), known: true }
            }
            None => Timed { ns, ..Default::default() },
        })
    }

    /// The same time compared with one of another source: its shared errors are its own.
    pub fn alone(&self) -> Timed {
        let s: f64 = self.shared.values().map(|v| v.abs()).sum();
        Timed { ns: self.ns, down: self.down + s, up: self.up + s, shared: BTreeMap::new(), known: self.known }
    }

    /// Lowest and highest ns.
    pub fn bounds(&self) -> (f64, f64) {
        let s: f64 = self.shared.values().map(|v| v.abs()).sum();
        ((self.ns - self.down - s).max(0.0), self.ns + self.up + s)
    }
}

/// The difference `b − a` in percent of `a`, with its interval, and whether it is measurable
/// (None: a spread is unknown).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Verdict {
    pub diff_pct: f64,
    pub low_pct: f64,
    pub high_pct: f64,
    pub measurable: Option<bool>,
}
/// A time in `compare --json`'s `time_verdict`: ns and its interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Interval {
    pub ns: f64,
    pub low_ns: f64,
    pub high_ns: f64,
}

impl From<&Timed> for Interval {
    fn from(t: &Timed) -> Interval {
        let (low_ns, high_ns) = if t.known { t.bounds() } else { (t.ns, t.ns) };
        Interval { ns: t.ns, low_ns, high_ns }
    }
}

/// One setting's times and verdicts (`compare --json`: `time_verdict`).
#[derive(Clone, Debug, Serialize)]
pub struct SettingTimes {
    pub label: String,
    pub model: Option<Interval>,
    pub live: Option<Interval>,
    /// The model against the live time (its shared errors its own).
    pub model_vs_live: Option<Verdict>,
    /// The first setting's label, and this setting against it on each side (absent for the
    /// first setting itself).
    pub against: Option<String>,
    pub model_vs_first: Option<Verdict>,
    pub live_vs_first: Option<Verdict>,
    /// The host state the model assumed and how far another moves it (model only, with a
    /// `[host]`).
    #[serde(skip)]
    pub host: Option<crate::result::HostStateRange>,
}

// Timelines side by side.

/// The n-th collapse (`khugepaged/pages_collapsed` reaching n), as the samples saw it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CollapseTiming {
    pub n: i64,
    /// The first sample that saw it (ms), if one did.
    pub model_ms: Option<f64>,
    pub live_ms: Option<f64>,
    /// Both saw it, at most `allowed_ms` apart.
    pub on_time: bool,
}

/// One row: sample n of each side, and the fields in which they differ.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TimelineRow {
    /// n × interval.
    pub t_ms: u64,
    pub model: Option<TimelineSample>,
    pub live: Option<TimelineSample>,
    /// Rss, AnonHugePages, ShmemPmdMapped, the folio census, pages_collapsed (full scans are
    /// not compared: the live daemon scans other processes' mms too).
    pub parts: Vec<&'static str>,
}

/// The comparison of two timelines.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TimelineComparison {
    pub interval_ms: u64,
    /// One `scan_sleep_millisecs` plus one interval.
    pub allowed_ms: u64,
    pub rows: Vec<TimelineRow>,
    /// The first sample where the two part.
    pub first_parting_ms: Option<u64>,
    pub collapses: Vec<CollapseTiming>,
    /// A collapse late or missing on one side.
    pub differs: bool,
    /// How long the live khugepaged waited on a runqueue during the run (`live.khugepaged.runqueue_wait_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_daemon_wait_ms: Option<u64>,
}
// Where a recorded program's model and live part.

/// One process's address range where model and live differ: the VMAs of each side that overlap
/// it (a cluster of VMAs connected by overlap), when the two lists differ in their bounds or
/// in the folios that map them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PartedRange {
    pub comm: String,
    /// The process in the recording (the model's pid) and in the live run.
    pub model_pid: u32,
    pub live_pid: i32,
    /// The range the cluster covers, hex without `0x` as /proc/PID/maps.
    pub start: String,
    pub end: String,
    pub model: Vec<VmaMap>,
    pub live: Vec<VmaMap>,
}

/// The per-VMA comparison of a recorded program's run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Parting {
    pub ranges: Vec<PartedRange>,
    /// Processes of one side with no process of its name on the other (`pid name`).
    pub unpaired_model: Vec<String>,
    pub unpaired_live: Vec<String>,
}
