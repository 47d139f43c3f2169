//! The tolerance `thplab compare --record` gives khugepaged's work (issue #27 item 4).
//!
//! The replay of a recording runs khugepaged on the recording's timestamps: the model's daemon
//! wakes as soon as an mm of the program joins its empty list (mm/khugepaged.c:
//! `__khugepaged_enter` wakes it when `list_empty(&khugepaged_scan.mm_head)`), then every
//! `khugepaged/scan_sleep_millisecs`. The live daemon's phase is not known: when other
//! processes are on its list it is in its timed sleep (`khugepaged_wait_work`) and wakes up to
//! one scan period later. Either side may so make one wake-up more or fewer during the program,
//! and one wake-up collapses at most `pages_to_scan / HPAGE_PMD_NR` PMD ranges
//! (`khugepaged_do_scan` stops at `pages_to_scan` of progress, a collapse counting
//! `HPAGE_PMD_NR`). Each collapse fills at most `max_ptes_none` none PTEs
//! (`hpage_collapse_scan_pmd`), which the program then touches without a fault, and frees the
//! small folios of one PMD range. [`KhugepagedTolerance`] allows that much in the rows a
//! collapse moves, and says so.

use crate::{Row, RowKind};
use uapi::RunResult;

/// What the comparison of a recorded program allows khugepaged, and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct KhugepagedTolerance {
    /// PMD collapses either side may have made beyond the other's.
    pub collapses: i64,
    /// None PTEs one collapse may fill (`khugepaged/max_ptes_none`).
    pub max_ptes_none: i64,
    /// Why, in words.
    pub why: String,
}

fn knob(r: &RunResult, name: &str, default: i64) -> i64 {
    r.settings.get(name).and_then(|v| v.parse().ok()).unwrap_or(default)
}

impl KhugepagedTolerance {
    /// The tolerance for `model`, a recording's replay: none where the model's daemon never
    /// woke for the recording (it ran without the recorded clock, or no mm of the program
    /// became eligible), else one wake-up's collapses.
    pub fn of_replay(model: &RunResult) -> KhugepagedTolerance {
        let kh = model.model.as_ref().and_then(|m| m.replay.as_ref()).and_then(|r| r.khugepaged);
        let max_ptes_none = knob(model, "khugepaged/max_ptes_none", 511);
        let Some(kh) = kh else {
            return KhugepagedTolerance { collapses: 0, max_ptes_none, why: "none: the replay ran without the recorded clock, so the model's khugepaged did not run".into() };
        };
        if kh.wakeups == 0 {
            return KhugepagedTolerance { collapses: 0, max_ptes_none, why: "none: no mm of the program joined khugepaged's list in the replay (nothing of it for the daemon to collapse)".into() };
        }
        let pages = knob(model, "khugepaged/pages_to_scan", 4096);
        let sleep = knob(model, "khugepaged/scan_sleep_millisecs", 10_000);
        let collapses = (pages / 512).max(1);
        let why = format!(
            "the model's khugepaged woke {} times on the recording's timestamps, first as the \
                program's mm joined its list; the live daemon may then be in its {sleep} ms sleep \
                (scan_sleep_millisecs) and wake up to one period later, so either side may make one \
                wake-up more: at most pages_to_scan {pages} / 512 = {collapses} collapses, each \
                filling up to max_ptes_none {max_ptes_none} pages",
            kh.wakeups
        );
        KhugepagedTolerance { collapses, max_ptes_none, why }
    }

    /// How far a row may differ by `collapses` collapses, or None for a row they do not move.
    /// `field` is the row's name without a process prefix.
    fn allowance(&self, field: &str) -> Option<i64> {
        let k = self.collapses;
        let census_size = |rest: &str| -> Option<i64> {
            let (size, what) = rest.split_once(' ')?;
            let kb: i64 = size.strip_suffix("kB")?.parse().ok()?;
            let per_range = if kb >= 2048 { 1 } else { 2048 / kb };
            matches!(what, "folios" | "pmd-mapped" | "pte-mapped" | "partially-mapped").then_some(k * per_range)
        };
        if field.starts_with("minflt") {
            Some(k * self.max_ptes_none)
        } else if field == "Rss (kB)" {
            Some(k * self.max_ptes_none * 4)
        } else if field == "AnonHugePages (kB)" {
            Some(k * 2048)
        } else if field == "census zero-page PTEs" {
            Some(k * 512)
        } else if let Some(rest) = field.strip_prefix("census ") {
            census_size(rest)
        } else if field == "thp_collapse_alloc" || field == "thp_collapse_alloc_failed" {
            Some(k)
        } else {
            None
        }
    }

    /// Clear `differs` on the rows whose difference is within what the collapses allow; returns
    /// the fields so excused.
    pub fn apply(&self, rows: &mut [Row]) -> Vec<String> {
        let mut excused = Vec::new();
        if self.collapses == 0 {
            return excused;
        }
        for r in rows.iter_mut().filter(|r| r.differs && r.kind != RowKind::Informational) {
            // A forked process's rows are `NAME: field`; minflt's may say `(live: …)`.
            let base = match r.field.split_once(": ") {
                Some((p, rest)) if !p.contains('(') => rest,
                _ => r.field.as_str(),
            };
            if self.allowance(base).is_some_and(|a| (r.model - r.live).abs() <= a) {
                r.differs = false;
                excused.push(r.field.clone());
            }
        }
        excused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replay(wakeups: Option<u64>, knobs: &[(&str, &str)]) -> RunResult {
        let mut r = RunResult::default();
        for (k, v) in knobs {
            r.settings.insert((*k).into(), v.to_string());
        }
        let kh = wakeups.map(|w| uapi::result::ModelKhugepaged { wakeups: w, ..Default::default() });
        r.model = Some(uapi::result::ModelSection { replay: Some(uapi::result::ReplayReport { khugepaged: kh, ..Default::default() }), ..Default::default() });
        r
    }

    fn row(field: &str, model: i64, live: i64) -> Row {
        Row { field: field.into(), model, live, kind: RowKind::Process, differs: model != live }
    }

    /// pages_to_scan 4096: 8 collapses a wake-up; max_ptes_none 256: each fills up to 256
    /// pages. A 4 kB census count may move by 8 × 512 folios, AnonHugePages by 8 × 2048 kB,
    /// minflt by 8 × 256, Rss by 8 × 256 × 4 kB; one more is a difference; a row no collapse
    /// moves (zero-page PMDs) is never excused.
    #[test]
    fn one_wakeups_collapses_are_allowed_and_no_more() {
        let m = replay(Some(3), &[("khugepaged/pages_to_scan", "4096"), ("khugepaged/max_ptes_none", "256")]);
        let t = KhugepagedTolerance::of_replay(&m);
        assert_eq!((t.collapses, t.max_ptes_none), (8, 256));
        assert!(t.why.contains("4096 / 512 = 8 collapses"), "{}", t.why);
        let mut rows = vec![
            row("census 4kB folios", 5000, 5000 - 8 * 512),
            row("census 2048kB folios", 10, 10 + 9),
            row("AnonHugePages (kB)", 0, 8 * 2048),
            row("child: minflt", 3000, 3000 - 8 * 256),
            row("minflt (live: median of 3 runs, 1..2)", 3000, 3000 - 8 * 256 - 1),
            row("Rss (kB)", 100, 100 + 8 * 256 * 4),
            row("census huge-zero PMDs", 1, 0),
        ];
        let excused = t.apply(&mut rows);
        assert_eq!(excused, ["census 4kB folios", "AnonHugePages (kB)", "child: minflt", "Rss (kB)"]);
        let still: Vec<&str> = rows.iter().filter(|r| r.differs).map(|r| r.field.as_str()).collect();
        assert_eq!(still, ["census 2048kB folios", "minflt (live: median of 3 runs, 1..2)", "census huge-zero PMDs"]);
    }

    /// No tolerance where the model's daemon did not run for the program, and the reason says
    /// which case it is.
    #[test]
    fn no_tolerance_without_the_daemon() {
        let off = KhugepagedTolerance::of_replay(&replay(None, &[]));
        assert_eq!(off.collapses, 0);
        assert!(off.why.contains("without the recorded clock"));
        let idle = KhugepagedTolerance::of_replay(&replay(Some(0), &[]));
        assert_eq!(idle.collapses, 0);
        assert!(idle.why.contains("no mm of the program"));
        let mut rows = vec![row("AnonHugePages (kB)", 0, 2048)];
        assert!(idle.apply(&mut rows).is_empty());
        assert!(rows[0].differs);
    }
}
