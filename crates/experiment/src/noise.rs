//! Whether a difference between two times is outside their noise (issue #27 item 6).
//!
//! A time is an interval, [`Timed`]: the model's `elapsed_ns` with its uncertainty
//! (`uapi::TimeUncertainty`: the profile's calibrated spreads, the program's own time's spread,
//! the host state it could not know), a live time with the range of its runs. The difference
//! `b − a` is measurable only when its interval leaves out 0:
//!
//! - errors the two share (the same profile cost, the same program's own time) move both
//!   alike: the difference carries `|a_k − b_k|` of each (`shared`), nothing of what is equal;
//! - the rest is independent: the difference's interval runs from `b − a − (a.up + b.down)` to
//!   `b − a + (a.down + b.up)`.
//!
//! A live time's ± is the full range (max − min) of its runs around their median, not half of
//! it: with three runs per setting, two settings of the same true time are called different by
//! half-ranges about one time in eight (normal noise), by full ranges about one in seventy.
//! A live time of one run has no spread: its differences are not judged.

use uapi::RunResult;

pub use report::compare::{fmt_timed, print_settings, signed_secs, VerdictText};
pub use uapi::compare::{Interval, SettingTimes, Timed, Verdict};

/// `b` against `a` (see the module documentation).
pub fn verdict(a: &Timed, b: &Timed) -> Verdict {
    let keys: std::collections::BTreeSet<&String> = a.shared.keys().chain(b.shared.keys()).collect();
    let shared: f64 = keys.into_iter().map(|k| (a.shared.get(k).copied().unwrap_or(0.0) - b.shared.get(k).copied().unwrap_or(0.0)).abs()).sum();
    let d = b.ns - a.ns;
    let (lo, hi) = (d - a.up - b.down - shared, d + a.down + b.up + shared);
    let pct = |x: f64| if a.ns > 0.0 { x / a.ns * 100.0 } else { 0.0 };
    let measurable = (a.known && b.known).then_some(lo > 0.0 || hi < 0.0);
    Verdict { diff_pct: pct(d), low_pct: pct(lo), high_pct: pct(hi), measurable }
}

/// The verdicts of each setting of a compare (`(label, model, live)`), every later setting
/// against the first on each side.
pub fn settings_verdicts(results: &[(String, RunResult, RunResult)]) -> Vec<SettingTimes> {
    let first = results.first().map(|(l, m, v)| (l.clone(), Timed::model(m), Timed::live(v)));
    results
        .iter()
        .enumerate()
        .map(|(i, (label, m, l))| {
            let (tm, tl) = (Timed::model(m), Timed::live(l));
            let vs = |a: &Option<Timed>, b: &Option<Timed>| a.as_ref().zip(b.as_ref()).map(|(a, b)| verdict(a, b));
            let (against, model_vs_first, live_vs_first) = match (&first, i) {
                (Some((fl, fm, fv)), 1..) => (Some(fl.clone()), vs(fm, &tm), vs(fv, &tl)),
                _ => (None, None, None),
            };
            SettingTimes {
                label: label.clone(),
                model: tm.as_ref().map(Interval::from),
                live: tl.as_ref().map(Interval::from),
                model_vs_live: vs(&tl, &tm.as_ref().map(Timed::alone)),
                against,
                model_vs_first,
                live_vs_first,
                host: m.time.as_ref().and_then(|t| t.uncertainty.as_ref()).and_then(|u| u.host.clone()),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn timed(ns: f64, pm: f64) -> Timed {
        Timed { ns, down: pm, up: pm, shared: BTreeMap::new(), known: true }
    }

    /// Live runs: 400 ms ± 50 (its runs' range) against 412 ms ± 60: +3.0 %, the difference's
    /// interval 12 ∓ 110 ms = −24.5 % .. +30.5 %: no measurable effect. 400 ± 10 against
    /// 520 ± 20: +30 %, 120 ∓ 30 = +22.5 % .. +37.5 %: measurably slower.
    #[test]
    fn a_difference_inside_the_combined_spread_is_no_effect() {
        let v = verdict(&timed(400e6, 50e6), &timed(412e6, 60e6));
        assert_eq!(v.measurable, Some(false));
        assert!((v.diff_pct - 3.0).abs() < 1e-9 && (v.low_pct + 24.5).abs() < 1e-9 && (v.high_pct - 30.5).abs() < 1e-9, "{v:?}");
        assert_eq!(v.text(), "+3.0 % ± 27.5 %: no measurable effect");
        let v = verdict(&timed(400e6, 10e6), &timed(520e6, 20e6));
        assert_eq!(v.measurable, Some(true));
        assert!((v.low_pct - 22.5).abs() < 1e-9 && (v.high_pct - 37.5).abs() < 1e-9, "{v:?}");
        assert_eq!(v.text(), "+30.0 % ± 7.5 %: measurably slower");
        // Faster: 400 ± 10 against 300 ± 10: −25 % (−30 % .. −20 %).
        assert_eq!(verdict(&timed(400e6, 10e6), &timed(300e6, 10e6)).text(), "-25.0 % ± 5.0 %: measurably faster");
        // The edge: a difference exactly the combined spread is not outside it.
        assert_eq!(verdict(&timed(400e6, 10e6), &timed(420e6, 10e6)).measurable, Some(false));
    }

    /// Errors the two times share cancel where equal: the same profile cost over the same
    /// events (10 ms each) adds nothing; over different events (10 against 40 ms) it adds
    /// their difference, 30 ms. The host states are independent: 500 −0/+200 ms against
    /// 450 −0/+200: the difference −50 ms runs from −250 to +150 ms, −10 % ± 40 %.
    #[test]
    fn shared_errors_cancel_and_host_states_add() {
        let with = |ns: f64, fault: f64, up: f64| Timed { ns, down: 0.0, up, shared: [("fault 4kB".to_string(), fault)].into(), known: true };
        let v = verdict(&with(400e6, 10e6, 0.0), &with(401e6, 10e6, 0.0));
        assert_eq!((v.low_pct, v.high_pct, v.measurable), (0.25, 0.25, Some(true)));
        let v = verdict(&with(400e6, 10e6, 0.0), &with(420e6, 40e6, 0.0));
        assert!((v.low_pct + 2.5).abs() < 1e-9 && (v.high_pct - 12.5).abs() < 1e-9 && v.measurable == Some(false), "{v:?}");
        let v = verdict(&with(500e6, 0.0, 200e6), &with(450e6, 0.0, 200e6));
        assert!((v.low_pct + 50.0).abs() < 1e-9 && (v.high_pct - 30.0).abs() < 1e-9 && v.measurable == Some(false), "{v:?}");
        assert_eq!(v.text(), "-10.0 % ± 40.0 %: no measurable effect");
        // Uneven: 450 −0/+100 against it: −50 ms, from −250 to +50 ms.
        let v = verdict(&with(500e6, 0.0, 200e6), &with(450e6, 0.0, 100e6));
        assert_eq!(v.text(), "-10.0 % (-50.0 % .. +10.0 %): no measurable effect");
        // Against a live time, the model's shared errors are its own: 400 ± 10 ms.
        assert_eq!(with(400e6, 10e6, 0.0).alone().bounds(), (390e6, 410e6));
    }

    /// The table compare prints: each setting with its ±, against live, and against the first
    /// setting; the host state once where every setting assumed the same.
    #[test]
    fn the_settings_table_says_what_is_noise() {
        let result = |model_ms: f64, host_ms: f64, live: Option<(f64, f64, f64)>| {
            let mut m = RunResult::new("sim", "w");
            let mut t = uapi::TimeEstimate { elapsed_ns: (model_ms * 1e6) as u64, host_ns: host_ms * 1e6, ..Default::default() };
            t.uncertainty = Some(uapi::result::TimeUncertainty {
                profile_ns: [("fault 4kB".to_string(), 10e6)].into(),
                host: Some(uapi::result::HostStateRange { assumed: "idle".into(), low_faults: 0, high_faults: 9, down_ns: host_ms * 1e6, up_ns: 100e6 }),
                ..Default::default()
            });
            t.set_bounds();
            m.time = Some(t);
            let mut l = RunResult::new("live", "w");
            if let Some((ms, min, max)) = live {
                l.live = Some(uapi::LiveSection { wall_ms: ms, time_range_ms: Some(uapi::result::MsRange { min, max }), ..Default::default() });
            }
            m.source = "sim".into();
            (m, l)
        };
        let (m1, l1) = result(400.0, 0.0, Some((410.0, 400.0, 420.0)));
        let (m2, l2) = result(420.0, 20.0, Some((600.0, 590.0, 610.0)));
        let v = settings_verdicts(&[("4K".into(), m1, l1), ("PMD".into(), m2, l2)]);
        // Model 4K: 400 ms, ± 10 (profile), host −0/+100: 390..510 ms. Live 410 ± 20: the model
        // −10 ms, from −10 − 20 − 10 = −40 to −10 + 20 + 110 = +120 ms (−9.8 % .. +29.3 % of 410).
        assert_eq!(v[0].model, Some(Interval { ns: 400e6, low_ns: 390e6, high_ns: 510e6 }));
        // PMD against 4K, model: +20 ms; shared fault 4kB cancels; 4K's +100 and PMD's −20:
        // −100 .. +120 ms: no effect. Live: +190 ms ± (20 + 20): measurably slower.
        let (mv, lv) = (v[1].model_vs_first.unwrap(), v[1].live_vs_first.unwrap());
        assert_eq!((mv.low_pct, mv.high_pct, mv.measurable), (-25.0, 30.0, Some(false)));
        assert_eq!((lv.diff_pct.round(), lv.measurable), (46.0, Some(true)));
        let mut out = Vec::new();
        print_settings(&mut out, &v, "live: 3 runs").unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "time (model: the profile's, ± its spreads and the host state; live: 3 runs)\n  host state the model assumed: idle\n  \
             4K: model 400.0 ms +110.0/-10.0 ms, live 410.0 ms ± 20.0 ms: model -2.4 % (-9.8 % .. +29.3 %) of\n    \
             live: within the noise\n    \
             host states it cannot know: 0 to 9 host faults move it ±0.0 ms .. +100.0 ms\n  \
             PMD: model 420.0 ms +110.0/-30.0 ms, live 600.0 ms ± 20.0 ms: model -30.0 % (-38.3 % .. -8.3 %) of\n    \
             live: outside the noise\n    \
             host states it cannot know: 0 to 9 host faults move it -20.0 ms .. +100.0 ms\n    \
             against 4K: model +5.0 % (-25.0 % .. +30.0 %): no measurable effect; live +46.3 % ± 9.8 %:\n      \
             measurably slower\n\n"
        );
    }

    /// One live run: no spread, no verdict.
    #[test]
    fn one_run_is_not_judged() {
        let one = Timed { ns: 400e6, ..Default::default() };
        assert_eq!(verdict(&one, &timed(600e6, 1e6)).measurable, None);
        assert_eq!(fmt_timed(&one), "400.0 ms (± unknown)");
        assert_eq!(fmt_timed(&timed(1.5e9, 0.25e9)), "1.500 s ± 0.250 s");
        let uneven = Timed { ns: 411e6, down: 0.0, up: 2_360e6, shared: BTreeMap::new(), known: true };
        assert_eq!(fmt_timed(&uneven), "0.411 s +2.360/-0.000 s");
    }
}
