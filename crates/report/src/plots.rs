//! The time plots of `thplab report`: a run's `--sample` timeline (Rss and AnonHugePages, the
//! memory each folio size maps, khugepaged's collapses, over time) and, for priced runs
//! (`--profile`) and live runs, the elapsed time per setting and each `phase`'s share of it.
//! Inline SVG, no script. Every line carries its data in the result's own units
//! (`data-points="t_ms,value …"`), so the page can be checked against the result.

use std::collections::BTreeSet;
use std::fmt::Write;

use thp_abi::FolioSize;
use uapi::result::{PhaseTime, Timeline, TimelineSample};
use uapi::RunResult;

use crate::html::{colour, esc};

/// One line of a chart: its name, colour and (x, y) points in data units.
pub struct Series {
    pub name: String,
    pub colour: &'static str,
    pub points: Vec<(f64, f64)>,
}

/// Plot geometry: the plotting area's origin and size inside the SVG.
const LEFT: f64 = 80.0;
const TOP: f64 = 10.0;
const W: f64 = 560.0;
const H: f64 = 160.0;

/// A number for an axis label: integers as such, else 3 significant digits.
fn tick(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}").trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// A line chart of several series sharing the axes (x from 0 to the largest x, y from 0 to the
/// largest y), with the axes' ends labelled and a legend below.
pub fn line_chart(kind: &str, title: &str, x_unit: &str, y_unit: &str, series: &[Series]) -> String {
    let xmax = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).fold(0.0, f64::max);
    let ymax = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0, f64::max);
    let (xs, ys) = (if xmax > 0.0 { W / xmax } else { 0.0 }, if ymax > 0.0 { H / ymax } else { 0.0 });
    let legend_rows = series.len().div_ceil(4) as f64;
    let height = TOP + H + 40.0 + legend_rows * 16.0;
    let mut s = format!(
        "<figure class=\"plot\" data-plot=\"{kind}\"><figcaption>{}</figcaption>\
         <svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" role=\"img\" aria-label=\"{}\">\
         <line class=\"axis\" x1=\"{LEFT}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#555\"/>\
         <line class=\"axis\" x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{}\" stroke=\"#555\"/>",
        esc(title),
        LEFT + W + 20.0,
        esc(title),
        TOP + H,
        LEFT + W,
        TOP + H,
        TOP + H
    );
    let _ = write!(
        s,
        "<text class=\"tick\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{} {}</text>\
         <text class=\"tick\" x=\"{}\" y=\"{}\" text-anchor=\"end\">0</text>\
         <text class=\"tick\" x=\"{LEFT}\" y=\"{}\" text-anchor=\"middle\">0</text>\
         <text class=\"tick\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{} {}</text>",
        LEFT - 4.0,
        TOP + 10.0,
        tick(ymax),
        esc(y_unit),
        LEFT - 4.0,
        TOP + H,
        TOP + H + 14.0,
        LEFT + W,
        TOP + H + 14.0,
        tick(xmax),
        esc(x_unit)
    );
    for (i, se) in series.iter().enumerate() {
        let data: Vec<String> = se.points.iter().map(|(x, y)| format!("{x},{y}")).collect();
        let px: Vec<String> = se.points.iter().map(|(x, y)| format!("{:.1},{:.1}", LEFT + x * xs, TOP + H - y * ys)).collect();
        let _ = write!(
            s,
            "<polyline class=\"series\" data-series=\"{}\" data-points=\"{}\" points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{}><title>{}</title></polyline>",
            esc(&se.name),
            data.join(" "),
            px.join(" "),
            se.colour,
            // Lines after the first are dashed: one lying on another still shows.
            if i == 0 { "" } else { " stroke-dasharray=\"6,4\"" },
            esc(&se.name)
        );
        // A lone sample draws no line: a dot shows it.
        if se.points.len() == 1 {
            let _ = write!(s, "<circle cx=\"{}\" cy=\"{}\" r=\"3\" fill=\"{}\"/>", px[0].split(',').next().unwrap_or("0"), px[0].split(',').nth(1).unwrap_or("0"), se.colour);
        }
        let (lx, ly) = (LEFT + (i % 4) as f64 * 140.0, TOP + H + 34.0 + (i / 4) as f64 * 16.0);
        let _ = write!(s, "<rect x=\"{lx}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text class=\"legend\" x=\"{}\" y=\"{ly}\">{}</text>", ly - 9.0, se.colour, lx + 14.0, esc(&se.name));
    }
    s += "</svg></figure>\n";
    s
}

fn series(name: &str, colour: &'static str, t: &Timeline, f: impl Fn(&TimelineSample) -> f64) -> Series {
    Series { name: name.to_string(), colour, points: t.samples.iter().map(|x| (x.t_ms, f(x))).collect() }
}

/// A run's timeline: three charts (Rss and AnonHugePages; kB mapped by each folio size;
/// khugepaged's pages collapsed and full scans since the start).
pub fn timeline(label: &str, t: &Timeline) -> String {
    if t.samples.is_empty() {
        return format!("<p>{}: a timeline of no sample (the run ended before {} ms).</p>\n", esc(label), t.interval_ms);
    }
    let mut s = format!("<div class=\"timeline\" data-run=\"{}\" data-interval-ms=\"{}\">\n", esc(label), t.interval_ms);
    let mem = [
        series("Rss", "#4e79a7", t, |x| x.rss_kb as f64),
        series("AnonHugePages", "#e15759", t, |x| x.anon_huge_pages_kb as f64),
        series("ShmemPmdMapped", "#59a14f", t, |x| x.shmem_pmd_mapped_kb as f64),
    ];
    let mem: Vec<Series> = mem.into_iter().filter(|x| x.name != "ShmemPmdMapped" || x.points.iter().any(|p| p.1 > 0.0)).collect();
    s += &line_chart("timeline-memory", &format!("{label}: Rss and AnonHugePages over time"), "ms", "kB", &mem);
    let sizes: BTreeSet<&FolioSize> = t.samples.iter().flat_map(|x| x.folios.keys()).collect();
    let folios: Vec<Series> = sizes
        .iter()
        .map(|size| {
            let kb = size.kb().unwrap_or(0) as f64;
            series(size, colour(size), t, |x| x.folios.get(*size).copied().unwrap_or(0) as f64 * kb)
        })
        .collect();
    s += &line_chart("timeline-folios", &format!("{label}: memory mapped by each folio size (kB: folios × size)"), "ms", "kB", &folios);
    let khp = [series("pages_collapsed", "#f28e2b", t, |x| x.pages_collapsed as f64), series("full_scans", "#76b7b2", t, |x| x.full_scans as f64)];
    s += &line_chart("timeline-khugepaged", &format!("{label}: khugepaged since the start (khugepaged/pages_collapsed, full_scans)"), "ms", "", &khp);
    s += "</div>\n";
    s
}

/// The run's elapsed time in ns and where it comes from: the model's simulated clock
/// (`time.elapsed_ns`, with a profile) or a live run's wall time.
pub fn elapsed_ns(r: &RunResult) -> Option<f64> {
    match (&r.time, &r.live) {
        (Some(t), _) => Some(t.elapsed_ns as f64),
        (None, Some(l)) => Some(l.wall_ms * 1e6),
        _ => None,
    }
}

/// The run's phases: the model's (`time.phases`) or a live run's (`live.workload.phases`).
pub fn phases(r: &RunResult) -> &[PhaseTime] {
    if let Some(t) = &r.time {
        return &t.phases;
    }
    r.live.as_ref().and_then(|l| l.workload.as_ref()).map_or(&[], |w| &w.phases)
}

/// A setting's label as a bar's label: a matrix label with `--set` on top
/// (`4K only + khugepaged/...`) is cut to its setting's name; the whole label is in the bar's
/// tooltip.
pub fn short_label(label: &str) -> &str {
    match label.split_once(" + ") {
        Some((head, _)) if label.len() > 28 => head,
        _ => label,
    }
}

/// ns as ms, or as s from 10 s, three significant digits at least.
pub fn ms_label(ns: f64) -> String {
    if ns >= 1e10 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.1} ms", ns / 1e6)
    } else {
        format!("{:.3} ms", ns / 1e6)
    }
}

const PHASE_COLOURS: [&str; 8] = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7"];

/// Each setting's phases as one stacked bar (a segment per phase, its share of the run's
/// elapsed time), the bars on one scale.
pub fn phase_bars(runs: &[(String, &[PhaseTime])]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for (_, ps) in runs {
        for p in ps.iter() {
            if !names.contains(&p.name.as_str()) {
                names.push(&p.name);
            }
        }
    }
    let max = runs.iter().map(|(_, ps)| ps.iter().map(|p| p.ns).sum::<u64>()).max().unwrap_or(0).max(1) as f64;
    let (lw, bw, rh) = (200.0, 480.0, 22.0);
    let h = 40.0 + runs.len() as f64 * rh + names.len().div_ceil(4) as f64 * 16.0;
    let mut s = format!(
        "<figure class=\"plot\" data-plot=\"phases\"><figcaption>Time of each phase</figcaption>\
         <svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{h}\" role=\"img\" aria-label=\"time of each phase\">",
        lw + bw + 120.0
    );
    for (i, (label, ps)) in runs.iter().enumerate() {
        let y = 10.0 + i as f64 * rh;
        let _ = write!(s, "<text class=\"label\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>", lw - 6.0, y + 15.0, esc(short_label(label)));
        let mut x = lw;
        for p in ps.iter() {
            let w = p.ns as f64 / max * bw;
            let c = PHASE_COLOURS[names.iter().position(|n| *n == p.name).unwrap_or(0) % PHASE_COLOURS.len()];
            let _ = write!(
                s,
                "<rect class=\"phase\" data-run=\"{}\" data-phase=\"{}\" data-ns=\"{}\" x=\"{x:.1}\" y=\"{y}\" width=\"{w:.1}\" height=\"{}\" fill=\"{c}\"><title>{}: phase {} {}</title></rect>",
                esc(label),
                esc(&p.name),
                p.ns,
                rh - 6.0,
                esc(label),
                esc(&p.name),
                ms_label(p.ns as f64)
            );
            x += w;
        }
        let total: u64 = ps.iter().map(|p| p.ns).sum();
        let _ = write!(s, "<text class=\"value\" x=\"{}\" y=\"{}\">{}</text>", x + 4.0, y + 15.0, ms_label(total as f64));
    }
    let ly = 30.0 + runs.len() as f64 * rh;
    for (i, n) in names.iter().enumerate() {
        let (lx, y) = (lw + (i % 4) as f64 * 120.0, ly + (i / 4) as f64 * 16.0);
        let _ = write!(s, "<rect x=\"{lx}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text class=\"legend\" x=\"{}\" y=\"{y}\">{}</text>", y - 9.0, PHASE_COLOURS[i % PHASE_COLOURS.len()], lx + 14.0, esc(n));
    }
    s += "</svg></figure>\n";
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_ms: f64, rss_kb: u64, huge: u64, collapsed: i64) -> TimelineSample {
        TimelineSample { t_ms, rss_kb, anon_huge_pages_kb: huge, pages_collapsed: collapsed, folios: [("4kB".into(), rss_kb / 4)].into(), ..Default::default() }
    }

    #[test]
    fn a_line_maps_its_data_onto_the_plot_area() {
        // x 0..200 ms onto 80..640 px, y 0..100 kB onto 170..10 px.
        let svg = line_chart("t", "t", "ms", "kB", &[Series { name: "Rss".into(), colour: "#000", points: vec![(100.0, 50.0), (200.0, 100.0)] }]);
        assert!(svg.contains("data-points=\"100,50 200,100\""), "{svg}");
        assert!(svg.contains("points=\"360.0,90.0 640.0,10.0\""), "{svg}");
        assert!(svg.contains(">100 kB</text>") && svg.contains(">200 ms</text>"), "{svg}");
    }

    #[test]
    fn a_timeline_has_three_charts_with_the_samples() {
        let t = Timeline { interval_ms: 100, samples: vec![sample(100.0, 4096, 0, 0), sample(200.5, 8192, 2048, 512)] };
        let html = timeline("PMD always", &t);
        assert_eq!(html.matches("data-plot=\"timeline-").count(), 3);
        assert!(html.contains("data-series=\"Rss\" data-points=\"100,4096 200.5,8192\""), "{html}");
        assert!(html.contains("data-series=\"AnonHugePages\" data-points=\"100,0 200.5,2048\""), "{html}");
        // 1024 and 2048 folios of 4 kB.
        assert!(html.contains("data-series=\"4kB\" data-points=\"100,4096 200.5,8192\""), "{html}");
        assert!(html.contains("data-series=\"pages_collapsed\" data-points=\"100,0 200.5,512\""), "{html}");
        assert!(!html.contains("ShmemPmdMapped"), "an all-zero ShmemPmdMapped is left out");
        assert!(timeline("x", &Timeline { interval_ms: 50, samples: vec![] }).contains("no sample"));
    }

    #[test]
    fn phases_stack_on_one_scale() {
        let p = |name: &str, start_ns, ns| PhaseTime { name: name.into(), start_ns, ns };
        let a = [p("fill", 0, 300), p("idle", 300, 100)];
        let b = [p("fill", 0, 100), p("idle", 100, 100)];
        let svg = phase_bars(&[("a".into(), &a[..]), ("b".into(), &b[..])]);
        // 400 ns is the widest bar (480 px): fill 360, idle 120; b: 120 and 120.
        assert!(svg.contains("data-run=\"a\" data-phase=\"fill\" data-ns=\"300\" x=\"200.0\" y=\"10\" width=\"360.0\""), "{svg}");
        assert!(svg.contains("data-run=\"a\" data-phase=\"idle\" data-ns=\"100\" x=\"560.0\" y=\"10\" width=\"120.0\""), "{svg}");
        assert!(svg.contains("data-run=\"b\" data-phase=\"idle\" data-ns=\"100\" x=\"320.0\" y=\"32\" width=\"120.0\""), "{svg}");
        assert_eq!(svg.matches("fill=\"#f28e2b\"").count(), 3, "idle has one colour in both bars and the legend");
    }
}
