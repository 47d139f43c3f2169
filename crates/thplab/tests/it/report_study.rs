//! `thplab report STUDY.parquet`: the points plotted are the table's, on a tiny study.

use crate::thplab_in;

/// The value of attribute `name` in an SVG element's text.
fn attr<'a>(el: &'a str, name: &str) -> &'a str {
    let at = el.find(&format!(" {name}=\"")).unwrap_or_else(|| panic!("no {name} in {el}")) + name.len() + 3;
    &el[at..at + el[at..].find('"').unwrap()]
}

/// The (point, x, y) of every circle in the figure `data-plot="KIND"` (the first of that kind).
fn plotted(html: &str, kind: &str) -> Vec<(u64, String, f64)> {
    let start = html.find(&format!("data-plot=\"{kind}\"")).unwrap_or_else(|| panic!("no {kind} plot"));
    let fig = &html[start..start + html[start..].find("</figure>").unwrap()];
    fig.split("<circle").skip(1).map(|c| (attr(c, "data-point").parse().unwrap(), attr(c, "data-x").to_string(), attr(c, "data-y").parse().unwrap())).collect()
}

#[test]
fn report_of_a_study_plots_the_tables_points() {
    let dir = tempfile::tempdir().unwrap();
    let study = "[axes]\nworkloads = [\"fork-bgsave\", \"issue-program\"]\nsettings = [\"default\", \"enabled=always\", \"hugepages-64kB/enabled=always\"]\nprofile = [\"builtin\"]\n";
    std::fs::write(dir.path().join("s.toml"), study).unwrap();
    thplab_in(dir.path(), &["sweep", "s.toml", "-o", "s.parquet", "-q", "--jobs", "2"]).ok();
    let r = thplab_in(dir.path(), &["report", "s.parquet", "-o", "s.html", "--x", "settings"]);
    assert_eq!(r.ok().stderr, "thplab report: wrote s.html (6 points of s.parquet; time.elapsed_ns against settings)\n");
    let html = std::fs::read_to_string(dir.path().join("s.html")).unwrap();
    let rows = sweep::table::read(&dir.path().join("s.parquet")).unwrap();
    assert_eq!(rows.len(), 6);
    let num = |r: &sweep::Row, c: &str| r[c].as_f64().unwrap();
    let mut want: Vec<(u64, String, f64)> = rows.iter().map(|r| (r["point"].as_u64().unwrap(), r["settings"].as_str().unwrap().to_string(), num(r, "time.elapsed_ns"))).collect();
    let mut got = plotted(&html, "study-time.elapsed_ns");
    want.sort_by(|a, b| a.0.cmp(&b.0));
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got, want);
    let rss: Vec<f64> = {
        let mut g = plotted(&html, "study-process.rss_bytes");
        g.sort_by(|a, b| a.0.cmp(&b.0));
        g.into_iter().map(|p| p.2).collect()
    };
    assert_eq!(rss, rows.iter().map(|r| num(r, "process.rss_bytes")).collect::<Vec<_>>());
    // One front per workload, its points the table's (time, Rss), the front's in red.
    for w in ["fork-bgsave", "issue-program"] {
        let start = html.find(&format!("data-plot=\"study-front\" data-workload=\"{w}\"")).unwrap();
        let fig = &html[start..start + html[start..].find("</figure>").unwrap()];
        let pts: Vec<(u64, f64, f64)> = fig.split("<circle").skip(1).map(|c| (attr(c, "data-point").parse().unwrap(), attr(c, "data-x").parse().unwrap(), attr(c, "data-y").parse().unwrap())).collect();
        let mine: Vec<(u64, f64, f64)> = rows.iter().filter(|r| r["workload"] == w).map(|r| (r["point"].as_u64().unwrap(), num(r, "time.elapsed_ns"), num(r, "process.rss_bytes"))).collect();
        assert_eq!(pts, mine);
        assert!(fig.contains("class=\"front\""), "{w}: no point on the front");
    }
    let bad = thplab_in(dir.path(), &["report", "s.parquet", "-o", "t.html", "--x", "cpus"]);
    assert_eq!(bad.fails(2).stderr, "thplab: report s.parquet: --x cpus: valid: workload, settings, cpu, paging, mem, profile\n");
}
