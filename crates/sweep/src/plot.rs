//! `thplab report STUDY.parquet` (or its journal, `STUDY.parquet.journal`): the study's rows
//! read ([`crate::table::read`], or the journal's lines) and plotted by `report::study`.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

/// Whether `path` names a study's table or journal rather than a result.
pub fn is_study(path: &str) -> bool {
    path.ends_with(".parquet") || path.ends_with(".journal")
}

/// The rows of a study's Parquet file or journal, in point order.
pub fn rows(path: &Path) -> Result<Vec<report::study::Row>> {
    if path.extension().is_some_and(|e| e == "parquet") {
        return crate::table::read(path);
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read the journal {}", path.display()))?;
    let mut rows = Vec::new();
    for (n, line) in text.lines().enumerate().skip(1) {
        let Ok(v) = serde_json::from_str::<Value>(line) else { continue }; // a last line cut by a kill
        let Some(Value::Object(row)) = v.get("row") else { anyhow::bail!("{} line {}: no \"row\" object (not a study's journal)", path.display(), n + 1) };
        // Floats are kept as their exact digits ({"f": "DIGITS"}).
        rows.push(row.iter().map(|(k, x)| (k.clone(), crate::run::float_of(x).filter(|_| x.is_object()).map_or_else(|| x.clone(), Value::from))).collect());
    }
    rows.sort_by_key(|r: &report::study::Row| r.get("point").and_then(Value::as_u64));
    Ok(rows)
}

/// Write the study's page to `out`; `x`, `time`, `memory` override the defaults.
pub fn write(study: &str, out: &Path, x: Option<&str>, time: Option<&str>, memory: Option<&str>) -> Result<()> {
    let rows = rows(Path::new(study))?;
    let mut p = report::study::defaults(&rows);
    if let Some(x) = x {
        p.x = x.into();
    }
    if let Some(t) = time {
        p.time = t.into();
    }
    if let Some(m) = memory {
        p.memory = m.into();
    }
    report::study::check(&rows, &p).with_context(|| format!("report {study}"))?;
    std::fs::write(out, report::study::html(study, &rows, &p)).with_context(|| format!("cannot write the report {}", out.display()))?;
    eprintln!("thplab report: wrote {} ({} points of {}; {} against {})", out.display(), rows.len(), study, p.time, p.x);
    Ok(())
}
