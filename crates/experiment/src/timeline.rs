//! Two timelines side by side (`compare --sample MS`, issue #10 item 4): the model's samples
//! on its clock beside the live run's on the wall clock, sample n beside sample n, each row
//! marked where the two part, and the time of every khugepaged collapse in each.
//!
//! The live daemon's phase is not the model's: when the run's mm joins a list that other
//! processes are already on, the live daemon wakes up to one `scan_sleep_millisecs` later
//! than the model's (mm/khugepaged.c: `__khugepaged_enter` wakes it only when the list was
//! empty), and a sample sees a collapse up to one interval after it happened. A collapse is
//! on time when the model and live times of the n-th collapse are at most one scan period
//! plus one interval apart; one the other side never made is a difference (the final
//! counters judge that too).


use uapi::{Timeline, TimelineSample};

pub use report::compare::{print_comparison, print_timeline};
pub use uapi::compare::{CollapseTiming, TimelineComparison, TimelineRow};

/// The fields of two samples that differ.
fn parts(m: &TimelineSample, l: &TimelineSample) -> Vec<&'static str> {
    let mut v = Vec::new();
    for (name, a, b) in [
        ("Rss", m.rss_kb, l.rss_kb),
        ("AnonHugePages", m.anon_huge_pages_kb, l.anon_huge_pages_kb),
        ("ShmemPmdMapped", m.shmem_pmd_mapped_kb, l.shmem_pmd_mapped_kb),
    ] {
        if a != b {
            v.push(name);
        }
    }
    if m.folios != l.folios {
        v.push("folios");
    }
    if m.pages_collapsed != l.pages_collapsed {
        v.push("pages_collapsed");
    }
    v
}

/// When the samples first saw `pages_collapsed` reach each value up to the largest.
fn collapse_times(samples: &[TimelineSample]) -> Vec<(i64, f64)> {
    let mut out = Vec::new();
    let mut seen = 0;
    for s in samples {
        while seen < s.pages_collapsed {
            seen += 1;
            out.push((seen, s.t_ms));
        }
    }
    out
}

/// Compare `model` with `live`; `scan_sleep_ms` is `khugepaged/scan_sleep_millisecs` of the run,
/// `live_daemon_wait_ms` how long the live daemon waited on a runqueue meanwhile.
pub fn compare(model: &Timeline, live: &Timeline, scan_sleep_ms: u64, live_daemon_wait_ms: Option<u64>) -> TimelineComparison {
    let interval_ms = model.interval_ms;
    let allowed_ms = scan_sleep_ms + interval_ms;
    let n = model.samples.len().max(live.samples.len());
    let rows: Vec<TimelineRow> = (0..n)
        .map(|i| {
            let (m, l) = (model.samples.get(i).cloned(), live.samples.get(i).cloned());
            let parts = match (&m, &l) {
                (Some(m), Some(l)) => parts(m, l),
                _ => Vec::new(),
            };
            TimelineRow { t_ms: (i as u64 + 1) * interval_ms, model: m, live: l, parts }
        })
        .collect();
    let first_parting_ms = rows.iter().find(|r| !r.parts.is_empty()).map(|r| r.t_ms);
    let (mt, lt) = (collapse_times(&model.samples), collapse_times(&live.samples));
    let most = mt.len().max(lt.len());
    let collapses: Vec<CollapseTiming> = (0..most)
        .map(|i| {
            let (model_ms, live_ms) = (mt.get(i).map(|x| x.1), lt.get(i).map(|x| x.1));
            let on_time = matches!((model_ms, live_ms), (Some(a), Some(b)) if (a - b).abs() <= allowed_ms as f64);
            CollapseTiming { n: i as i64 + 1, model_ms, live_ms, on_time }
        })
        .collect();
    let differs = collapses.iter().any(|c| !c.on_time);
    TimelineComparison { interval_ms, allowed_ms, rows, first_parting_ms, collapses, differs, live_daemon_wait_ms }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t_ms: f64, collapsed: i64, ahp: u64) -> TimelineSample {
        TimelineSample { t_ms, pages_collapsed: collapsed, anon_huge_pages_kb: ahp, rss_kb: 8192, ..Default::default() }
    }

    /// Model collapses at its first two samples (100, 200 ms); live sees the first at 300 ms
    /// (200 ms late: allowed 100 + 100) and the second at 400 ms (200 ms late); a third collapse
    /// only live is a difference. The rows part from 100 ms on.
    #[test]
    fn collapses_are_on_time_within_one_scan_period_and_one_interval() {
        let model = Timeline { interval_ms: 100, samples: vec![s(100.0, 1, 2048), s(200.0, 2, 4096), s(300.0, 2, 4096), s(400.0, 2, 4096)] };
        let live = Timeline { interval_ms: 100, samples: vec![s(101.0, 0, 0), s(203.0, 0, 0), s(304.0, 1, 2048), s(407.0, 2, 4096)] };
        let c = compare(&model, &live, 100, None);
        assert_eq!(c.allowed_ms, 200);
        assert_eq!(c.first_parting_ms, Some(100));
        assert_eq!(c.rows[0].parts, ["AnonHugePages", "pages_collapsed"]);
        assert!(c.rows[3].parts.is_empty());
        let times: Vec<(i64, Option<f64>, Option<f64>, bool)> = c.collapses.iter().map(|k| (k.n, k.model_ms, k.live_ms, k.on_time)).collect();
        assert_eq!(times, [(1, Some(100.0), Some(304.0), false), (2, Some(200.0), Some(407.0), false)]);
        assert!(c.differs);
        // With a 300 ms scan sleep (allowed 400 ms) both are on time.
        let c = compare(&model, &live, 300, None);
        assert!(!c.differs && c.collapses.iter().all(|k| k.on_time));
        let mut more = live.clone();
        more.samples.push(s(500.0, 3, 6144));
        let c = compare(&model, &more, 300, None);
        assert_eq!(c.collapses[2], CollapseTiming { n: 3, model_ms: None, live_ms: Some(500.0), on_time: false });
        assert!(c.differs);
        assert!(c.rows[4].model.is_none() && c.rows[4].parts.is_empty());
    }

    /// Values of different lengths: each field's `|` stays in one column.
    #[test]
    fn the_bars_line_up() {
        let model = Timeline { interval_ms: 100, samples: vec![s(100.0, 1, 2048), s(200.0, 12, 24576), s(300.0, 12, 24576)] };
        let live = Timeline { interval_ms: 100, samples: vec![s(100.0, 0, 0), s(200.0, 3, 6144), s(300.0, 12, 24576)] };
        let mut out = Vec::new();
        print_comparison(&mut out, &compare(&model, &live, 100, None)).unwrap();
        let text = String::from_utf8(out).unwrap();
        let rows: Vec<&str> = text.lines().skip(2).take(3).collect();
        let bars = |l: &str| l.char_indices().filter(|(_, c)| *c == '|').map(|(i, _)| i).collect::<Vec<_>>();
        assert_eq!(bars(rows[0]).len(), 5, "{text}");
        assert!(rows.iter().all(|r| bars(r) == bars(rows[0])), "{text}");
        assert_eq!(text.lines().nth(1).unwrap(), "  t (ms)       Rss kB  AnonHugePages  collapsed  full_scans  folios", "{text}");
        assert_eq!(rows[0], "*    100  8192 | 8192   2048 | 0         1 | 0        0 | 0  - | -", "{text}");
        assert_eq!(rows[1], "*    200  8192 | 8192  24576 | 6144     12 | 3        0 | 0  - | -", "{text}");
    }

    /// The text shows both sides of each field and marks the parting rows.
    #[test]
    fn the_comparison_prints_both_sides() {
        let model = Timeline { interval_ms: 100, samples: vec![s(100.0, 1, 2048)] };
        let live = Timeline { interval_ms: 100, samples: vec![s(100.0, 0, 0)] };
        let mut out = Vec::new();
        print_comparison(&mut out, &compare(&model, &live, 100, None)).unwrap();
        let text = String::from_utf8(out).unwrap();
        let row = text.lines().nth(2).unwrap();
        assert!(row.starts_with('*') && row.contains("2048 | 0") && row.contains("8192 | 8192"), "{text}");
        assert!(!text.contains("ShmemPmdMapped  ") && text.contains("(ShmemPmdMapped 0 throughout)"), "{text}");
        assert!(text.contains("they part first at 100 ms (over the run: AnonHugePages, pages_collapsed)"), "{text}");
        assert!(text.contains("collapse 1: model by 100 ms, live by never: DIFFERS (allowed: 200 ms)"), "{text}");
        assert!(!text.contains("runqueue"), "{text}");
        // A live daemon that waited longer than one scan period (100 ms) is named; one that
        // waited less is not.
        for (wait, named) in [(700, true), (100, false)] {
            let mut out = Vec::new();
            print_comparison(&mut out, &compare(&model, &live, 100, Some(wait))).unwrap();
            let text = String::from_utf8(out).unwrap();
            assert_eq!(text.contains(&format!("the live khugepaged waited {wait} ms on a runqueue")), named, "{text}");
        }
    }
}
