//! The advice as text: the front, the defaults, the recommendation and why, the choice written
//! out, what the model could not express, and the verification. `--json` prints [`crate::Advice`].

use std::io::{self, Write};

use crate::pareto::Recommendation;
use crate::{Advice, Scored};

const MIB: f64 = (1u64 << 20) as f64;

fn row(out: &mut impl Write, s: &Scored, base_ns: f64) -> io::Result<()> {
    let p = s.point.as_ref().expect("a predicted point");
    let vs = if base_ns > 0.0 { format!("{:+.1} %", (p.time_ns - base_ns) / base_ns * 100.0) } else { "-".into() };
    writeln!(
        out,
        "  {:>11.1}  {:>9}  {:>11.1}  {:>10.1}  {:>10}  {}",
        p.time_ns / 1e6,
        vs,
        p.memory_bytes as f64 / MIB,
        p.bloat_bytes as f64 / MIB,
        p.pgtable_bytes >> 10,
        s.choice.label
    )
}

/// `idx` grouped by identical predictions (time, memory, bloat, page tables), in order: the
/// first of each group with the others.
fn groups(a: &Advice, idx: &[usize]) -> Vec<(usize, Vec<usize>)> {
    let key = |i: usize| a.points[i].point.as_ref().map(|p| (p.time_ns.to_bits(), p.memory_bytes, p.bloat_bytes, p.pgtable_bytes));
    let mut out: Vec<(usize, Vec<usize>)> = Vec::new();
    for &i in idx {
        match out.iter_mut().find(|(j, _)| key(*j) == key(i)) {
            Some(g) => g.1.push(i),
            None => out.push((i, Vec::new())),
        }
    }
    // The simplest of a group stands for it (the defaults where they are in it).
    for (first, rest) in out.iter_mut() {
        if let Some(k) = (0..rest.len()).min_by_key(|&k| a.points[rest[k]].choice.weight()).filter(|&k| a.points[rest[k]].choice.weight() < a.points[*first].choice.weight()) {
            std::mem::swap(first, &mut rest[k]);
        }
    }
    out
}

/// The advice as text.
pub fn text(out: &mut impl Write, a: &Advice) -> io::Result<()> {
    let ok = a.points.iter().filter(|p| p.point.is_some()).count();
    writeln!(out, "thplab advise: {}", a.source)?;
    writeln!(out, "{} points predicted in the model of Linux 6.18 in {:.1} s on {} threads ({} failed)", a.points.len(), a.model_seconds, a.jobs, a.points.len() - ok)?;
    writeln!(
        out,
        "noise band: {:.0} % of the modelled kernel work, plus what the profile's calibrated spreads and the host state move a difference by; \
         a winner must also beat the program's own run-to-run spread and {:.0} % (docs/advise.md)\n",
        a.band_pct, a.min_gain_pct
    )?;
    let base = match &a.recommendation {
        Some(Recommendation::Winner { baseline, .. } | Recommendation::NoWinner { baseline, .. }) => Some(*baseline),
        None => None,
    };
    let base_ns = base.and_then(|b| a.points[b].point.as_ref()).map_or(0.0, |p| p.time_ns);
    writeln!(out, "Pareto front, predicted time against memory (Rss, its peak where the model has one, plus page tables):")?;
    writeln!(out, "  {:>11}  {:>9}  {:>11}  {:>10}  {:>10}  setting", "time (ms)", "vs dflt", "memory MiB", "bloat MiB", "ptbl KiB")?;
    for (i, same) in groups(a, &a.front) {
        row(out, &a.points[i], base_ns)?;
        if !same.is_empty() {
            let names: Vec<&str> = same.iter().take(6).map(|&j| a.points[j].choice.label.as_str()).collect();
            writeln!(out, "  {:>11}  the same prediction: {}{}", "", names.join("; "), if same.len() > 6 { format!("; and {} more", same.len() - 6) } else { String::new() })?;
        }
    }
    if let Some(b) = base.filter(|b| !a.front.contains(b)) {
        writeln!(out, "  the defaults, not on the front:")?;
        row(out, &a.points[b], base_ns)?;
    }
    writeln!(out)?;
    recommendation(out, a)?;
    if !a.not_expressible.is_empty() {
        writeln!(out, "\nnot predicted for a recording: {}: {}", a.not_expressible.join(", "), crate::predict::NOT_FOR_RECORDING)?;
    }
    for s in a.points.iter().filter(|s| s.error.is_some() && s.choice.process == crate::space::Process::None) {
        writeln!(out, "failed in the model: {}: {}", s.choice.label, s.error.as_deref().unwrap_or(""))?;
    }
    if let Some(v) = &a.verification {
        verification(out, v)?;
    }
    Ok(())
}

fn recommendation(out: &mut impl Write, a: &Advice) -> io::Result<()> {
    let label = |i: usize| a.points[i].choice.label.as_str();
    match &a.recommendation {
        None => writeln!(out, "No recommendation: the defaults could not be predicted (see the failures below).")?,
        Some(Recommendation::NoWinner { fastest, gain_pct, noise_pct, spread_pct, least_memory, .. }) => {
            writeln!(out, "No setting is outside the noise: the fastest, {}, is {}.", label(*fastest), short_of(*gain_pct, *noise_pct, *spread_pct, a.min_gain_pct))?;
            writeln!(out, "Keep the defaults (enabled=madvise, PMD inherit, mTHP never); THP settings do not measurably change this program's time in the model.")?;
            if let Some(m) = least_memory {
                let (p, b) = (a.points[*m].point.as_ref().expect("ok"), a.points.iter().find(|s| s.choice.is_default()).and_then(|s| s.point.as_ref()));
                let saved = b.map_or(0.0, |b| (b.memory_bytes as f64 - p.memory_bytes as f64) / MIB);
                writeln!(out, "If memory matters: {} uses {saved:.1} MiB less at no measurable cost in time.", label(*m))?;
            }
        }
        Some(Recommendation::Winner { index, fastest, gain_pct, noise_pct, .. }) => {
            writeln!(out, "Recommended: {}", label(*index))?;
            write!(out, "why: {gain_pct:.1} % faster than the defaults in the model, outside the noise ({noise_pct:.1} %)")?;
            if index == fastest {
                writeln!(out, "; the fastest point, and the least memory of those within the noise of it.")?;
            } else {
                writeln!(out, "; within the noise of the fastest ({}) with less memory.", label(*fastest))?;
            }
            if let Some(w) = &a.written {
                written(out, w)?;
            }
        }
    }
    Ok(())
}

/// Which of the model's noise, the program's run-to-run spread and the floor a gain of
/// `gain` % did not clear (pareto::worth_it's three tests, in its order), in words.
pub fn short_of(gain: f64, noise: f64, spread: f64, floor: f64) -> String {
    let g = |x: f64| if x.abs() < 0.05 && x != 0.0 { format!("{x:.2}") } else { format!("{x:.1}") };
    let head = format!("{} % faster than the defaults in the model", g(gain));
    if gain <= noise {
        format!("{head}, not more than the model's noise ({} %)", g(noise))
    } else if gain <= spread {
        format!("{head}: more than the model's noise ({} %), but within the program's own run-to-run spread ({} % of its time)", g(noise), g(spread))
    } else {
        format!("{head}: more than the model's noise ({} %) and the program's run-to-run spread ({} %), but under the {floor:.0} % floor", g(noise), g(spread))
    }
}

fn written(out: &mut impl Write, w: &crate::writers::Written) -> io::Result<()> {
    let indent = |t: &str| t.lines().map(|l| format!("  {l}\n")).collect::<String>();
    writeln!(out, "\nsysfs, now (as root; until reboot):\n{}", indent(&w.sysfs))?;
    if !w.cmdline.is_empty() {
        writeln!(out, "kernel command line (at boot; quote it in GRUB_CMDLINE_LINUX, ';' separates thp_anon= groups):\n  {}", w.cmdline)?;
    }
    if !w.sysfs_only.is_empty() {
        writeln!(out, "  no 6.18 boot parameter for: {} (sysfs, tmpfiles.d or the unit)", w.sysfs_only.join(" "))?;
    }
    writeln!(out, "\ntmpfiles.d:\n{}", indent(&w.tmpfiles))?;
    writeln!(out, "systemd unit:\n{}", indent(&w.unit))?;
    writeln!(out, "per program:\n{}", indent(&w.per_program))
}

fn verification(out: &mut impl Write, v: &crate::verify::Verification) -> io::Result<()> {
    writeln!(out, "\nverified live (median of {} runs each, through the settings guard):", v.runs_each)?;
    writeln!(out, "  {:>13}  {:>10}  {:>19}  setting", "predicted ms", "live ms", "live range ms")?;
    for (k, r) in v.rows.iter().enumerate() {
        let mark = if k == v.judged { "  <- judged" } else if k == v.best { "  <- best live" } else { "" };
        writeln!(out, "  {:>13.1}  {:>10.1}  {:>8.1} .. {:>8.1}  {}{mark}", r.predicted_ms, r.live_ms, r.live_min_ms, r.live_max_ms, r.label)?;
    }
    writeln!(out, "{}: {}", if v.within { "verified" } else { "NOT verified" }, v.why)
}

#[cfg(test)]
mod tests {
    use super::short_of;

    /// The three tests of pareto::worth_it, each the one a gain fails (sqlite's advice: 0.09 %
    /// against a noise of 0.04 % and a spread of 0.5 %; xz's: past both, under the floor).
    #[test]
    fn the_noise_statement_names_what_the_gain_did_not_clear() {
        assert_eq!(short_of(4.1, 19.6, 0.0, 1.0), "4.1 % faster than the defaults in the model, not more than the model's noise (19.6 %)");
        assert_eq!(
            short_of(0.09, 0.04, 0.5, 1.0),
            "0.1 % faster than the defaults in the model: more than the model's noise (0.04 %), but within the program's own run-to-run spread (0.5 % of its time)"
        );
        assert_eq!(
            short_of(0.11, 0.04, 0.02, 1.0),
            "0.1 % faster than the defaults in the model: more than the model's noise (0.04 %) and the program's run-to-run spread (0.02 %), but under the 1 % floor"
        );
    }
}
