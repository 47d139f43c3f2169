//! `thplab report`: one self-contained HTML file with inline SVG plots (no script, no external
//! resource) for the JSON of a `sim` run, a `sim --matrix` run, or a `compare` run:
//! the folio-size map over each run's VMAs, per-setting bars of faults, Rss (at exit and at the
//! peak), bloat and large folios, and the census at the peak and at exit; with a profile or live
//! runs, the elapsed time per setting and each phase's time; with `--sample`, each run's
//! timeline ([`crate::plots`]).

use std::collections::BTreeSet;
use std::fmt::Write;

use anyhow::{bail, Context, Result};
use thp_abi::FolioSize;
use uapi::RunResult;

/// One run to plot: its label and result.
pub struct Run {
    pub label: String,
    pub result: RunResult,
}

/// The runs in a results document: a `RunResult` object (`sim --json`), or an array of
/// `{label, model, live?}` (`sim --matrix --json`, `compare --json`; the live result becomes a
/// second run `LABEL (live)`) or of `{label, result}` (`demo --json`).
pub fn runs_of(name: &str, text: &str) -> Result<Vec<Run>> {
    let v: serde_json::Value = serde_json::from_str(text).with_context(|| format!("{name}: not JSON (give the output of `thplab sim --json`, `sim --matrix --json` or `compare --json`)"))?;
    let parse = |x: &serde_json::Value, what: &str| -> Result<RunResult> {
        serde_json::from_value(x.clone()).with_context(|| format!("{name}: {what} is not a {} result", uapi::result::RESULT_SCHEMA))
    };
    let mut out = Vec::new();
    match &v {
        serde_json::Value::Object(o) if o.contains_key("schema") => {
            let r = parse(&v, "the object")?;
            out.push(Run { label: r.source.clone(), result: r });
        }
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                let label = x["label"].as_str().map(String::from).unwrap_or_else(|| format!("run {}", i + 1));
                if let Some(m) = x.get("model") {
                    out.push(Run { label: label.clone(), result: parse(m, &format!("entry {i}'s model"))? });
                    if let Some(l) = x.get("live").filter(|l| l.is_object()) {
                        out.push(Run { label: format!("{label} (live)"), result: parse(l, &format!("entry {i}'s live"))? });
                    }
                } else if let Some(r) = x.get("result") {
                    out.push(Run { label, result: parse(r, &format!("entry {i}'s result"))? });
                } else {
                    bail!("{name}: entry {i} has neither \"model\" nor \"result\"");
                }
            }
        }
        _ => bail!("{name}: not a thplab result (expected an object with \"schema\" or an array of runs)"),
    }
    if out.is_empty() {
        bail!("{name}: no runs in it");
    }
    Ok(out)
}

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A colour per folio size (by order), the same in every plot.
pub(crate) fn colour(size: &FolioSize) -> &'static str {
    const C: [&str; 10] = ["#9e9e9e", "#8dd3c7", "#80b1d3", "#bebada", "#fdb462", "#b3de69", "#fccde5", "#bc80bd", "#fb8072", "#e41a1c"];
    let order = size.order().map_or(0, |o| o.0 as usize);
    C[order.min(9)]
}

/// The bytes of a folio of `size` (0 for a name no order has: it draws no bar).
fn size_bytes(size: &FolioSize) -> u64 {
    size.kb().unwrap_or(0) * 1024
}

/// A horizontal bar chart: one bar per (label, value), with the value printed.
fn bars(title: &str, unit: &str, rows: &[(String, u64)]) -> String {
    let rows: Vec<(String, f64, String)> = rows.iter().map(|(l, v)| (l.clone(), *v as f64, format!("{v} {unit}"))).collect();
    bars_of("bars", title, &rows)
}

/// A horizontal bar chart of (label, value, the value as printed), scaled to the largest value.
fn bars_of(kind: &str, title: &str, rows: &[(String, f64, String)]) -> String {
    let max = rows.iter().map(|r| r.1).fold(0.0, f64::max);
    let max = if max > 0.0 { max } else { 1.0 };
    let (lw, bw, rh) = (200.0, 480.0, 22.0);
    let h = 30.0 + rows.len() as f64 * rh;
    let mut s = format!("<figure class=\"plot\" data-plot=\"{kind}\"><figcaption>{}</figcaption>\
        <svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{h}\" role=\"img\" aria-label=\"{}\">", esc(title), lw + bw + 120.0, esc(title));
    for (i, (label, v, shown)) in rows.iter().enumerate() {
        let y = 10.0 + i as f64 * rh;
        let w = (*v / max * bw).max(if *v > 0.0 { 1.0 } else { 0.0 });
        let shown = esc(shown.trim_end());
        let _ = write!(
            s,
            "<text class=\"label\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\
                <rect class=\"bar\" data-value=\"{v}\" x=\"{lw}\" y=\"{y}\" width=\"{w:.1}\" height=\"{}\" fill=\"#4e79a7\"><title>{}: {shown}</title></rect>\
                <text class=\"value\" x=\"{}\" y=\"{}\">{shown}</text>",
            lw - 6.0,
            y + 15.0,
            esc(crate::plots::short_label(label)),
            rh - 6.0,
            esc(label),
            lw + w + 4.0,
            y + 15.0
        );
    }
    s += "</svg></figure>\n";
    s
}

/// Time per setting (a priced model run's simulated clock, a live run's wall time) and each
/// phase's share; a paragraph saying how to get them when no run has a time.
fn time_section(runs: &[Run]) -> String {
    let timed: Vec<(String, f64)> = runs.iter().filter_map(|r| crate::plots::elapsed_ns(&r.result).map(|ns| (r.label.clone(), ns))).collect();
    if timed.is_empty() {
        return "<h2>Time</h2>\n<p>No time in these runs: `sim --profile PROFILE|builtin` prices the model's work, and live runs have their wall time.</p>\n".into();
    }
    let mut s = String::from("<h2>Time</h2>\n");
    let rows: Vec<(String, f64, String)> = timed.iter().map(|(l, ns)| (l.clone(), ns / 1e6, crate::plots::ms_label(*ns))).collect();
    s += &bars_of("time", "Elapsed time (model: the simulated clock of a priced run, sleeps included; live: wall time), ms", &rows);
    let phased: Vec<(String, &[uapi::result::PhaseTime])> = runs.iter().map(|r| (r.label.clone(), crate::plots::phases(&r.result))).filter(|(_, p)| !p.is_empty()).collect();
    if !phased.is_empty() {
        s += &crate::plots::phase_bars(&phased);
    }
    s
}

/// Each sampled run's timeline; a paragraph saying how to get one when no run has one.
fn timeline_section(runs: &[Run]) -> String {
    let sampled: Vec<&Run> = runs.iter().filter(|r| r.result.timeline.is_some()).collect();
    if sampled.is_empty() {
        return "<h2>Timelines</h2>\n<p>No timeline in these runs: `sim`, `live` and `compare` with `--sample MS` record one.</p>\n".into();
    }
    let mut s = String::from("<h2>Timelines</h2>\n");
    for r in sampled {
        if let Some(t) = &r.result.timeline {
            s += &crate::plots::timeline(&r.label, t);
        }
    }
    s
}

/// The folio-size map of one run: a row per VMA (up to 60), its width split by the bytes mapped
/// in each folio size; unmapped space grey-white.
fn folio_map(r: &RunResult) -> String {
    let vmas: Vec<&uapi::VmaMap> = r.vmas.iter().filter(|v| v.kind != "placeholder" || v.rss_kb > 0).take(60).collect();
    if vmas.is_empty() {
        return "<p>No folio-size map in this result (a live result, or no VMA).</p>\n".into();
    }
    let (lw, bw, rh) = (330.0, 520.0, 20.0);
    let h = 30.0 + vmas.len() as f64 * rh;
    let mut s = format!("<figure class=\"plot\" data-plot=\"folio-map\">\
        <figcaption>Folio-size map: each VMA's length split by the memory each folio size maps</figcaption>\
        <svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{h}\" role=\"img\" aria-label=\"folio-size map\">", lw + bw + 20.0);
    for (i, v) in vmas.iter().enumerate() {
        let y = 10.0 + i as f64 * rh;
        let len = v.end_addr().saturating_sub(v.start_addr()).max(1);
        let pid = v.pid.map(|p| format!("pid {p} ")).unwrap_or_default();
        let kind = if v.kind.is_empty() { String::new() } else { format!(" {}", v.kind) };
        let _ = write!(s, "<text class=\"label\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}{}-{} {}{}</text>", lw - 6.0, y + 14.0, esc(&pid), esc(&v.start), esc(&v.end), esc(&mm_types::format_size(len)), esc(&kind));
        let _ = write!(s, "<rect class=\"vma\" x=\"{lw}\" y=\"{y}\" width=\"{bw}\" height=\"{}\" fill=\"#f4f4f4\" stroke=\"#ccc\"/>", rh - 5.0);
        let mut x = lw;
        for (size, e) in &v.census.sizes {
            let bytes = e.folios * size_bytes(size);
            let w = (bytes as f64 / len as f64 * bw).min(lw + bw - x);
            if w <= 0.0 {
                continue;
            }
            let _ = write!(s, "<rect class=\"seg\" data-size=\"{}\" x=\"{x:.1}\" y=\"{y}\" width=\"{w:.1}\" height=\"{}\" fill=\"{}\">\
                <title>{} folios of {}</title></rect>", esc(size), rh - 5.0, colour(size), e.folios, esc(size));
            x += w;
        }
    }
    s += "</svg></figure>\n";
    s
}

/// The census at the peak and at exit, as a legend-coloured table.
fn census_table(r: &RunResult) -> String {
    let sizes: BTreeSet<&FolioSize> = r.census.sizes.keys().chain(r.peak.iter().flat_map(|p| p.census.sizes.keys())).collect();
    let mut s = String::from("<table class=\"census\"><tr><th>size</th><th>folios at the peak</th><th>folios at exit</th><th>PMD-mapped at exit</th></tr>");
    for size in sizes {
        let at_exit = r.census.sizes.get(size).copied().unwrap_or_default();
        let peak = r.peak.as_ref().and_then(|p| p.census.sizes.get(size)).map_or("-".to_string(), |e| e.folios.to_string());
        let _ = write!(s, "<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td><td>{peak}</td><td>{}</td><td>{}</td>\
            </tr>", colour(size), esc(size), at_exit.folios, at_exit.pmd_mapped);
    }
    s += "</table>\n";
    s
}

fn large_folios(r: &RunResult) -> u64 {
    r.census.sizes.iter().filter(|(k, _)| k.order().is_none_or(|o| o.0 > 0)).map(|(_, e)| e.folios).sum()
}

/// The whole page.
pub fn html(title: &str, runs: &[Run]) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
            <style>body{{font-family:sans-serif;margin:2em;max-width:1000px}}svg text{{font-size:12px;font-family:monospace}}figure{{margin:1em 0}}\
            figcaption{{font-weight:bold;margin-bottom:.3em}}table{{border-collapse:collapse}}\
            td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}.swatch{{display:inline-block;width:10px;height:10px;margin-right:4px}}\
            </style></head><body>\n<h1>{}</h1>\n<p>thplab report: {} run{} of {}; model of Linux 6.18{}.</p>\n",
        esc(title),
        esc(title),
        runs.len(),
        if runs.len() == 1 { "" } else { "s" },
        esc(&runs[0].result.workload),
        if runs.iter().any(|r| r.result.source == "live") { " and the live kernel" } else { "" }
    );
    s += "<h2>Per setting</h2>\n";
    let row = |f: &dyn Fn(&RunResult) -> u64| runs.iter().map(|r| (r.label.clone(), f(&r.result))).collect::<Vec<_>>();
    s += &bars("Faults (minflt)", "", &row(&|r| r.process.minflt));
    s += &bars("Rss at exit", "kB", &row(&|r| r.process.rss_bytes / 1024));
    if runs.iter().any(|r| r.result.peak.is_some()) {
        s += &bars("Peak Rss (VmHWM)", "kB", &row(&|r| r.peak.as_ref().map_or(0, |p| p.rss_bytes / 1024)));
    }
    s += &bars("Bloat (allocated, never touched)", "kB", &row(&|r| r.process.bloat_bytes.unwrap_or(0) / 1024));
    s += &bars("Large folios mapped at exit (above 4 kB)", "", &row(&large_folios));
    s += &time_section(runs);
    s += &timeline_section(runs);
    for r in runs {
        let _ = write!(s, "<h2>{}</h2>\n<p>settings: {}</p>\n", esc(&r.label), esc(&r.result.settings.iter().filter(|(k, v)| thp_abi::ThpSettings::default().knob_map().get(*k) != Some(v)).map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")));
        s += &census_table(&r.result);
        s += &folio_map(&r.result);
    }
    s += "</body></html>\n";
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_scale_to_the_largest_value() {
        let svg = bars("t", "kB", &[("a".into(), 50), ("b".into(), 100)]);
        assert_eq!(svg.matches("<rect class=\"bar\"").count(), 2);
        assert!(svg.contains("width=\"240.0\"") && svg.contains("width=\"480.0\""), "{svg}");
        assert!(esc("<a&b>") == "&lt;a&amp;b&gt;");
    }

    #[test]
    fn colours_follow_the_order() {
        let c = |s: &str| colour(&FolioSize::from(s));
        assert_eq!(c("4kB"), "#9e9e9e");
        assert_eq!(c("64kB"), c("64kB"));
        assert_ne!(c("64kB"), c("2048kB"));
        assert_eq!(c("2048kB"), "#e41a1c");
    }
}
