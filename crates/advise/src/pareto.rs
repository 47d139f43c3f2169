//! The Pareto front of predicted time against memory, and the recommendation rule
//! (docs/advise.md, "The rule"). Pure functions on [`Point`]s, so that the rule is tested on
//! hand-made points.
//!
//! The noise of a difference between two predicted times: `band` (a fraction, 0.15 by default:
//! the model's time error stated in docs/tlb-model.md and README.md) of the larger of the two
//! points' modelled work (the kernel work the model prices: faults, zeroing, frees, calls, host
//! faults, TLB misses where accesses were recorded; a timed recording's own time is measured,
//! the same under every setting, and carries no model error), plus what the two points'
//! uncertainties (`uapi::TimeUncertainty`) move their difference by: each calibrated profile
//! cost's error by `|a_k − b_k|` (the same cost is off alike in both, as
//! `experiment::noise::verdict` counts it), and the host state the model cannot know (a VM whose
//! free pages are reported) by the larger of `|a.up − b.up|` and `|a.down − b.down|`: both
//! settings would meet the same host state, at either end of its range.

/// One predicted point.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Point {
    pub label: String,
    /// Predicted run time, ns (`time.elapsed_ns`).
    pub time_ns: f64,
    /// Of which the model's priced kernel work, ns (`time.total_ns`).
    pub work_ns: f64,
    /// How far the host state the model cannot know moves the time down and up, ns.
    pub down_ns: f64,
    pub up_ns: f64,
    /// Each calibrated profile cost's ± ns (`TimeUncertainty::profile_ns`).
    pub shared: std::collections::BTreeMap<String, f64>,
    /// The program's own time's run-to-run spread (a timed recording's runs' range), ns: the
    /// same under every setting, so no error of the difference, but a gain below it cannot be
    /// seen live.
    pub live_spread_ns: f64,
    /// Rss (the peak where the model has one) plus page tables, bytes.
    pub memory_bytes: u64,
    /// Of Rss, bytes in folios the program never touched.
    pub bloat_bytes: u64,
    pub pgtable_bytes: u64,
    /// Knobs changed from the defaults (the process choice counts one): the tie-breaker.
    pub weight: usize,
    /// The 6.18 boot defaults with no per-process choice: the baseline.
    pub is_default: bool,
}

/// The noise of `a.time − b.time` (module documentation).
pub fn noise(a: &Point, b: &Point, band: f64) -> f64 {
    let keys: std::collections::BTreeSet<&String> = a.shared.keys().chain(b.shared.keys()).collect();
    let shared: f64 = keys.into_iter().map(|k| (a.shared.get(k).copied().unwrap_or(0.0) - b.shared.get(k).copied().unwrap_or(0.0)).abs()).sum();
    let host = (a.up_ns - b.up_ns).abs().max((a.down_ns - b.down_ns).abs());
    band * a.work_ns.max(b.work_ns) + shared + host
}

/// `a` is faster than `b` by more than the noise.
pub fn measurably_faster(a: &Point, b: &Point, band: f64) -> bool {
    b.time_ns - a.time_ns > noise(a, b, band)
}

/// `a` is faster than the defaults `base` by more than the noise, more than the program's own
/// run-to-run spread (`live_spread_ns`: a gain no live run can see is no gain) and more than
/// `min_gain` (a fraction) of the defaults' time.
pub fn worth_it(a: &Point, base: &Point, band: f64, min_gain: f64) -> bool {
    let d = base.time_ns - a.time_ns;
    measurably_faster(a, base, band) && d > a.live_spread_ns.max(base.live_spread_ns) && d > min_gain * base.time_ns
}

/// The indices of the points no other point beats on both time and memory (at least as good on
/// both, better on one), in order of time, then memory, then index. Equal points are all on it.
pub fn front(points: &[Point]) -> Vec<usize> {
    let dominated = |i: usize| {
        let p = &points[i];
        points.iter().any(|q| q.time_ns <= p.time_ns && q.memory_bytes <= p.memory_bytes && (q.time_ns < p.time_ns || q.memory_bytes < p.memory_bytes))
    };
    let mut f: Vec<usize> = (0..points.len()).filter(|&i| !dominated(i)).collect();
    f.sort_by(|&a, &b| points[a].time_ns.total_cmp(&points[b].time_ns).then(points[a].memory_bytes.cmp(&points[b].memory_bytes)).then(a.cmp(&b)));
    f
}

/// What the rule found.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Recommendation {
    /// `index` is measurably faster than the defaults and, of the points that are, the one
    /// within the noise of the fastest with the least memory (ties: fewer changes, then order).
    Winner { index: usize, fastest: usize, baseline: usize, gain_pct: f64, noise_pct: f64 },
    /// No point is faster than the defaults by more than the noise: no winner is named.
    /// `least_memory`: the point within the noise of the defaults' time with the least memory,
    /// when it is less than the defaults'. `spread_pct`: the program's own run-to-run spread
    /// (the larger of the fastest's and the defaults'), percent of the defaults' time, so that
    /// the advice says which of noise, spread and floor the gain did not clear.
    NoWinner { baseline: usize, fastest: usize, gain_pct: f64, noise_pct: f64, spread_pct: f64, least_memory: Option<usize> },
}

/// The recommendation rule over `points` (one of them the defaults: `is_default`), with the
/// noise band `band` and the least gain worth a change `min_gain` (fractions).
pub fn recommend(points: &[Point], band: f64, min_gain: f64) -> Option<Recommendation> {
    let baseline = points.iter().position(|p| p.is_default)?;
    let base = &points[baseline];
    let order = |&a: &usize, &b: &usize| {
        let (p, q) = (&points[a], &points[b]);
        p.memory_bytes.cmp(&q.memory_bytes).then(p.weight.cmp(&q.weight)).then(a.cmp(&b))
    };
    let fastest = (0..points.len())
        .min_by(|&a, &b| points[a].time_ns.total_cmp(&points[b].time_ns).then_with(|| order(&a, &b)))
        .expect("the baseline is a point");
    let pct = |x: f64| if base.time_ns > 0.0 { x / base.time_ns * 100.0 } else { 0.0 };
    let fast = &points[fastest];
    if !worth_it(fast, base, band, min_gain) {
        let least = (0..points.len())
            .filter(|&i| points[i].time_ns - base.time_ns <= noise(&points[i], base, band))
            .min_by(order)
            .filter(|&i| points[i].memory_bytes < base.memory_bytes);
        let spread_pct = pct(fast.live_spread_ns.max(base.live_spread_ns));
        return Some(Recommendation::NoWinner { baseline, fastest, gain_pct: pct(base.time_ns - fast.time_ns), noise_pct: pct(noise(fast, base, band)), spread_pct, least_memory: least });
    }
    let index = (0..points.len())
        .filter(|&i| worth_it(&points[i], base, band, min_gain) && points[i].time_ns - fast.time_ns <= noise(&points[i], fast, band))
        .min_by(order)
        .expect("the fastest qualifies");
    let p = &points[index];
    Some(Recommendation::Winner { index, fastest, baseline, gain_pct: pct(base.time_ns - p.time_ns), noise_pct: pct(noise(p, base, band)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A point of `ms` ms of which `work` ms modelled, `mib` MiB, `weight` changes.
    fn pt(label: &str, ms: f64, work: f64, mib: u64, weight: usize) -> Point {
        Point { label: label.into(), time_ns: ms * 1e6, work_ns: work * 1e6, down_ns: 0.0, up_ns: 0.0, shared: Default::default(), live_spread_ns: 0.0, memory_bytes: mib << 20, bloat_bytes: 0, pgtable_bytes: 0, weight, is_default: weight == 0 }
    }

    #[test]
    fn the_front_keeps_what_nothing_beats_on_both_axes() {
        let p = [pt("default", 100.0, 50.0, 100, 0), pt("a", 80.0, 30.0, 120, 1), pt("b", 90.0, 40.0, 90, 1), pt("c", 95.0, 45.0, 130, 1), pt("d", 70.0, 20.0, 200, 2)];
        // c: beaten by a (faster, less memory) and by b; default: beaten by b.
        assert_eq!(front(&p), [4, 1, 2]);
    }

    #[test]
    fn equal_points_are_all_on_the_front() {
        let p = [pt("default", 100.0, 50.0, 100, 0), pt("x", 100.0, 50.0, 100, 1)];
        assert_eq!(front(&p), [0, 1]);
    }

    /// Defaults 100 ms (50 modelled), band 15 %: the noise against the defaults is
    /// 0.15 × 50 = 7.5 ms. a: 80 ms, 20 ms faster: the fastest. b: 86 ms, measurably faster
    /// than the defaults (14 > 7.5 ms) but 6 ms from a, beyond 0.15 × 36 = 5.4 ms: out.
    /// e: 84 ms, 4 ms from a (≤ 0.15 × 34 = 5.1 ms), with less memory than a: chosen, 16 %
    /// faster than the defaults, noise 7.5 %.
    #[test]
    fn the_winner_is_the_least_memory_within_the_noise_of_the_fastest() {
        let p = [pt("default", 100.0, 50.0, 100, 0), pt("a", 80.0, 30.0, 150, 1), pt("b", 86.0, 36.0, 90, 1), pt("e", 84.0, 34.0, 110, 1)];
        let r = recommend(&p, 0.15, 0.0).unwrap();
        let Recommendation::Winner { index, fastest, baseline, gain_pct, noise_pct } = r else { panic!("{r:?}") };
        assert_eq!((index, fastest, baseline), (3, 1, 0));
        assert!((gain_pct - 16.0).abs() < 1e-9 && (noise_pct - 7.5).abs() < 1e-9, "{gain_pct} {noise_pct}");
    }

    /// Every point within 15 % of the modelled work of the defaults: no winner, and the one that
    /// saves memory inside the noise is named as such.
    #[test]
    fn nothing_outside_the_noise_names_no_winner() {
        let p = [pt("default", 1000.0, 40.0, 100, 0), pt("a", 995.0, 35.0, 140, 1), pt("b", 1003.0, 43.0, 80, 1), pt("c", 1200.0, 240.0, 60, 1)];
        // a: 5 ms faster, noise 0.15 × 40 = 6 ms. b: 3 ms slower, noise 6.45 ms. c: slower by 200 ms.
        let r = recommend(&p, 0.15, 0.0).unwrap();
        assert_eq!(r, Recommendation::NoWinner { baseline: 0, fastest: 1, gain_pct: 0.5, noise_pct: 0.6, spread_pct: 0.0, least_memory: Some(2) });
        // 15 ms faster is outside the 6 ms band ...
        let mut q = p.clone();
        q[1].time_ns = 985e6;
        assert!(matches!(recommend(&q, 0.15, 0.0), Some(Recommendation::Winner { index: 1, .. })));
        // ... but not when a profile cost's error moves it 10 ms more than the defaults'
        // (6 + |12 − 2| = 16 ms) ...
        q[1].shared.insert("fault 4kB".into(), 12e6);
        q[0].shared.insert("fault 4kB".into(), 2e6);
        assert!(matches!(recommend(&q, 0.15, 0.0), Some(Recommendation::NoWinner { fastest: 1, .. })));
        // ... nor when the host state moves the two 10 ms apart at one end of its range; a host
        // state that moves both alike is no noise.
        q[1].shared.clear();
        q[0].shared.clear();
        (q[1].up_ns, q[0].up_ns) = (50e6, 40e6);
        assert!(matches!(recommend(&q, 0.15, 0.0), Some(Recommendation::NoWinner { fastest: 1, .. })));
        (q[1].up_ns, q[0].up_ns, q[1].down_ns, q[0].down_ns) = (50e6, 50e6, 30e6, 30e6);
        assert!(matches!(recommend(&q, 0.15, 0.0), Some(Recommendation::Winner { index: 1, .. })));
        // A gain of 15 ms (1.5 %) is no winner where the program's own runs spread by 20 ms,
        // or where at least 2 % is asked.
        q[0].live_spread_ns = 20e6;
        q[1].live_spread_ns = 20e6;
        assert!(matches!(recommend(&q, 0.15, 0.0), Some(Recommendation::NoWinner { fastest: 1, .. })));
        q[0].live_spread_ns = 0.0;
        q[1].live_spread_ns = 0.0;
        assert!(matches!(recommend(&q, 0.15, 0.02), Some(Recommendation::NoWinner { fastest: 1, .. })));
        assert!(matches!(recommend(&q, 0.15, 0.01), Some(Recommendation::Winner { index: 1, .. })));
    }

    /// Two winners of the same time and memory: the one with fewer changes; the same changes:
    /// the first.
    #[test]
    fn ties_go_to_fewer_changes_then_to_the_first() {
        let p = [pt("default", 100.0, 60.0, 100, 0), pt("two", 70.0, 30.0, 100, 2), pt("one", 70.0, 30.0, 100, 1), pt("one too", 70.0, 30.0, 100, 1)];
        assert!(matches!(recommend(&p, 0.15, 0.0), Some(Recommendation::Winner { index: 2, fastest: 2, .. })));
    }

    #[test]
    fn no_defaults_no_recommendation() {
        assert_eq!(recommend(&[pt("a", 1.0, 1.0, 1, 1)], 0.15, 0.0), None);
    }
}
