//! `thplab report STUDY.parquet`: a study's rows (`thplab sweep`, docs/sweeps.md) as one
//! self-contained HTML page: the time and the memory column against an axis chosen by flag,
//! one series per value of the other axes together, and per workload the Pareto front of time
//! against memory; then the table of what is plotted. Inline SVG, no script. Every plotted
//! point carries its row (`data-point="N"`) and its values (`data-x`, `data-y`), so the page can
//! be checked against the table.

use std::collections::BTreeMap;
use std::fmt::Write;

use anyhow::{bail, Result};
use serde_json::{Map, Value};

use crate::html::esc;

/// A study row: column → value (as `sweep::table::read` gives it).
pub type Row = Map<String, Value>;

/// The axes a study's rows carry (docs/sweeps.md, "The table").
pub const AXES: &[&str] = &["workload", "settings", "cpu", "paging", "mem", "profile"];

/// What to plot.
#[derive(Clone, Debug)]
pub struct StudyPlot {
    /// The axis along x.
    pub x: String,
    /// The time column (y of the first plot, x of the fronts).
    pub time: String,
    /// The memory column.
    pub memory: String,
}

/// One plotted point: its row's `point`, its x category, its value.
#[derive(Clone, Debug, PartialEq)]
pub struct Plotted {
    pub point: u64,
    pub x: String,
    pub y: f64,
}

/// The defaults: x the first axis with more than one value (else `settings`), time
/// `time.elapsed_ns` where the rows have it (else `process.minflt`), memory
/// `process.rss_bytes`.
pub fn defaults(rows: &[Row]) -> StudyPlot {
    let distinct = |a: &str| rows.iter().map(|r| text(r.get(a))).collect::<std::collections::BTreeSet<_>>().len();
    let x = AXES.iter().find(|a| distinct(a) > 1).unwrap_or(&"settings").to_string();
    let has = |c: &str| rows.iter().any(|r| r.get(c).is_some_and(Value::is_number));
    let time = if has("time.elapsed_ns") { "time.elapsed_ns" } else { "process.minflt" };
    StudyPlot { x, time: time.into(), memory: "process.rss_bytes".into() }
}

/// Check the columns exist, with what is valid.
pub fn check(rows: &[Row], p: &StudyPlot) -> Result<()> {
    if !AXES.contains(&p.x.as_str()) {
        bail!("--x {}: valid: {}", p.x, AXES.join(", "));
    }
    for c in [&p.time, &p.memory] {
        if !rows.iter().any(|r| r.get(c.as_str()).is_some_and(Value::is_number)) {
            let mut numeric: Vec<&String> = rows.iter().flat_map(|r| r.iter().filter(|(_, v)| v.is_number()).map(|(k, _)| k)).collect();
            numeric.sort();
            numeric.dedup();
            let some: Vec<&str> = numeric.iter().take(12).map(|s| s.as_str()).collect();
            bail!("no row has a number in column '{c}'; numeric columns include: {}", some.join(", "));
        }
    }
    Ok(())
}

fn text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => String::new(),
    }
}

/// The points of column `y` against axis `x`, by series (the other axes' values joined), in row
/// order; rows with an error or without the column are left out.
pub fn series(rows: &[Row], x: &str, y: &str) -> BTreeMap<String, Vec<Plotted>> {
    let mut out: BTreeMap<String, Vec<Plotted>> = BTreeMap::new();
    for r in rows {
        let (Some(v), Some(point)) = (r.get(y).and_then(Value::as_f64), r.get("point").and_then(Value::as_u64)) else { continue };
        if r.get("error").is_some_and(|e| !e.is_null()) {
            continue;
        }
        let name: Vec<String> = AXES.iter().filter(|a| **a != x).map(|a| text(r.get(*a))).filter(|s| s != "default").collect();
        out.entry(name.join(" | ")).or_default().push(Plotted { point, x: text(r.get(x)), y: v });
    }
    out
}

/// The rows on the front of time against memory (less of both is better), by workload.
pub fn fronts(rows: &[Row], time: &str, memory: &str) -> BTreeMap<String, Vec<(u64, f64, f64, bool)>> {
    let mut by: BTreeMap<String, Vec<(u64, f64, f64, bool)>> = BTreeMap::new();
    for r in rows {
        let get = |c: &str| r.get(c).and_then(Value::as_f64);
        if let (Some(t), Some(m), Some(p)) = (get(time), get(memory), r.get("point").and_then(Value::as_u64)) {
            by.entry(text(r.get("workload"))).or_default().push((p, t, m, false));
        }
    }
    for pts in by.values_mut() {
        let all = pts.clone();
        for p in pts.iter_mut() {
            p.3 = !all.iter().any(|q| q.1 <= p.1 && q.2 <= p.2 && (q.1 < p.1 || q.2 < p.2));
        }
    }
    by
}

const COLOURS: &[&str] = &["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
const LEFT: f64 = 90.0;
const W: f64 = 560.0;
const H: f64 = 200.0;
const TOP: f64 = 10.0;

/// Column `y` against the categories of `x`, a colour per series.
fn dot_chart(title: &str, x: &str, y: &str, s: &BTreeMap<String, Vec<Plotted>>) -> String {
    let mut cats: Vec<&str> = Vec::new();
    for p in s.values().flatten() {
        if !cats.contains(&p.x.as_str()) {
            cats.push(&p.x);
        }
    }
    let ymax = s.values().flatten().map(|p| p.y).fold(0.0, f64::max);
    let ys = if ymax > 0.0 { H / ymax } else { 0.0 };
    let step = W / cats.len().max(1) as f64;
    let mut out = format!(
        "<figure class=\"plot\" data-plot=\"study-{}\"><figcaption>{}</figcaption><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" role=\"img\">\
         <line x1=\"{LEFT}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#555\"/><line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{}\" stroke=\"#555\"/>\
         <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">0</text>",
        esc(y),
        esc(title),
        LEFT + W + 20.0,
        TOP + H + 60.0 + 16.0 * s.len() as f64,
        TOP + H,
        LEFT + W,
        TOP + H,
        TOP + H,
        LEFT - 4.0,
        TOP + 10.0,
        ymax,
        LEFT - 4.0,
        TOP + H
    );
    for (i, c) in cats.iter().enumerate() {
        let _ = write!(out, "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>", LEFT + step * (i as f64 + 0.5), TOP + H + 14.0, esc(c));
    }
    for (k, (name, pts)) in s.iter().enumerate() {
        let colour = COLOURS[k % COLOURS.len()];
        for p in pts {
            let i = cats.iter().position(|c| *c == p.x).expect("a category");
            let _ = write!(
                out,
                "<circle class=\"dot\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"{colour}\" data-point=\"{}\" data-x=\"{}\" data-y=\"{}\"><title>point {}: {} = {}</title></circle>",
                LEFT + step * (i as f64 + 0.5),
                TOP + H - p.y * ys,
                p.point,
                esc(&p.x),
                p.y,
                p.point,
                esc(y),
                p.y
            );
        }
        let _ = write!(out, "<text x=\"{LEFT}\" y=\"{}\" fill=\"{colour}\">● {}</text>", TOP + H + 36.0 + 16.0 * k as f64, esc(if name.is_empty() { "all" } else { name }));
    }
    let _ = write!(out, "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text></svg></figure>\n", LEFT + W, TOP + H + 28.0, esc(x));
    out
}

/// One workload's points, time against memory, the front joined by a line.
fn front_chart(workload: &str, time: &str, memory: &str, pts: &[(u64, f64, f64, bool)]) -> String {
    let (tmax, mmax) = pts.iter().fold((0.0f64, 0.0f64), |a, p| (a.0.max(p.1), a.1.max(p.2)));
    let (xs, ys) = (if tmax > 0.0 { W / tmax } else { 0.0 }, if mmax > 0.0 { H / mmax } else { 0.0 });
    let at = |t: f64, m: f64| (LEFT + t * xs, TOP + H - m * ys);
    let mut out = format!(
        "<figure class=\"plot\" data-plot=\"study-front\" data-workload=\"{}\"><figcaption>{}: {} against {}, the Pareto front in red</figcaption>\
         <svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" role=\"img\"><line x1=\"{LEFT}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#555\"/>\
         <line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{}\" stroke=\"#555\"/><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{} {}</text>\
         <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{} {}</text>",
        esc(workload),
        esc(workload),
        esc(memory),
        esc(time),
        LEFT + W + 20.0,
        TOP + H + 30.0,
        TOP + H,
        LEFT + W,
        TOP + H,
        TOP + H,
        LEFT - 4.0,
        TOP + 10.0,
        mmax,
        esc(memory),
        LEFT + W,
        TOP + H + 14.0,
        tmax,
        esc(time)
    );
    let mut front: Vec<&(u64, f64, f64, bool)> = pts.iter().filter(|p| p.3).collect();
    front.sort_by(|a, b| a.1.total_cmp(&b.1));
    let line: Vec<String> = front.iter().map(|p| at(p.1, p.2)).map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    let _ = write!(out, "<polyline class=\"front\" fill=\"none\" stroke=\"#d62728\" points=\"{}\"/>", line.join(" "));
    for p in pts {
        let (x, y) = at(p.1, p.2);
        let _ = write!(
            out,
            "<circle class=\"{}\" cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"4\" fill=\"{}\" data-point=\"{}\" data-x=\"{}\" data-y=\"{}\"><title>point {}</title></circle>",
            if p.3 { "front" } else { "dot" },
            if p.3 { "#d62728" } else { "#1f77b4" },
            p.0,
            p.1,
            p.2,
            p.0
        );
    }
    out + "</svg></figure>\n"
}

/// The page.
pub fn html(title: &str, rows: &[Row], p: &StudyPlot) -> String {
    let mut s = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title><style>body{{font-family:sans-serif;margin:2em;max-width:1000px}}\
         svg text{{font-size:12px;font-family:monospace}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 8px}}</style></head><body>\n\
         <h1>{t}</h1>\n<p>thplab report: a study of {} points; model of Linux 6.18.</p>\n",
        rows.len(),
        t = esc(title)
    );
    s += &dot_chart(&format!("{} against {}", p.time, p.x), &p.x, &p.time, &series(rows, &p.x, &p.time));
    s += &dot_chart(&format!("{} against {}", p.memory, p.x), &p.x, &p.memory, &series(rows, &p.x, &p.memory));
    s += "<h2>Pareto fronts, per workload</h2>\n";
    let fronts = fronts(rows, &p.time, &p.memory);
    for (w, pts) in &fronts {
        s += &front_chart(w, &p.time, &p.memory, pts);
    }
    let _ = write!(s, "<h2>The table</h2>\n<table><tr><th>point</th>{}<th>{}</th><th>{}</th><th>front</th><th>error</th></tr>\n", AXES.iter().map(|a| format!("<th>{a}</th>")).collect::<String>(), esc(&p.time), esc(&p.memory));
    let on_front: std::collections::BTreeSet<u64> = fronts.values().flatten().filter(|q| q.3).map(|q| q.0).collect();
    for r in rows {
        let point = r.get("point").and_then(Value::as_u64).unwrap_or(0);
        let cells: String = AXES.iter().map(|a| format!("<td>{}</td>", esc(&text(r.get(*a))))).collect();
        let _ = writeln!(
            s,
            "<tr data-point=\"{point}\"><td>{point}</td>{cells}<td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&text(r.get(p.time.as_str()))),
            esc(&text(r.get(p.memory.as_str()))),
            if on_front.contains(&point) { "yes" } else { "" },
            esc(&text(r.get("error").filter(|e| !e.is_null())))
        );
    }
    s + "</table>\n</body></html>\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rows() -> Vec<Row> {
        let r = |p: u64, w: &str, s: &str, t: f64, m: u64| {
            let v = json!({"point": p, "workload": w, "settings": s, "cpu": "default", "paging": "default", "mem": "default", "profile": "builtin"});
            let mut row = v.as_object().unwrap().clone();
            row.extend([("error".to_string(), Value::Null), ("time.elapsed_ns".to_string(), json!(t)), ("process.rss_bytes".to_string(), json!(m))]);
            row
        };
        vec![r(0, "a", "default", 100.0, 10), r(1, "a", "enabled=always", 60.0, 12), r(2, "a", "x", 120.0, 11), r(3, "b", "default", 5.0, 1)]
    }

    #[test]
    fn the_front_is_per_workload_and_the_defaults_pick_the_varying_axis() {
        let rows = rows();
        let d = defaults(&rows);
        assert_eq!((d.x.as_str(), d.time.as_str(), d.memory.as_str()), ("workload", "time.elapsed_ns", "process.rss_bytes"));
        let f = fronts(&rows, "time.elapsed_ns", "process.rss_bytes");
        let on: Vec<u64> = f["a"].iter().filter(|p| p.3).map(|p| p.0).collect();
        assert_eq!(on, [0, 1]);
        assert_eq!(f["b"], [(3, 5.0, 1.0, true)]);
        let s = series(&rows, "settings", "time.elapsed_ns");
        assert_eq!(s["a | builtin"].len(), 3);
        assert!(check(&rows, &StudyPlot { x: "cpus".into(), ..d.clone() }).unwrap_err().to_string().starts_with("--x cpus: valid: workload, settings"));
        assert!(check(&rows, &StudyPlot { time: "time.nope".into(), ..d }).unwrap_err().to_string().contains("numeric columns include: point, process.rss_bytes, time.elapsed_ns"));
    }
}
