//! The study's Parquet file, written from the journal's rows in point order (the parquet
//! crate's low-level writer, no Arrow), and read back.
//!
//! Columns: `point` (INT64), the axes `workload`, `settings`, `cpu`, `paging`, `mem`,
//! `profile` and `error` (UTF8 strings), then the figures in name order, each typed by its
//! values across the rows: INT64 when every value is an integer, DOUBLE when any is a float,
//! BOOLEAN, else UTF8 (a float comes as `run::float`'s exact digits). Every column is OPTIONAL: a figure a point's result does not have (a
//! folio size its census lacks, a failed point's figures) is null. The file holds no time
//! stamp, so the same rows give the same bytes.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use parquet::basic::{LogicalType, Repetition, Type as Physical};
use parquet::column::writer::ColumnWriter;
use parquet::data_type::ByteArray;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::Type;
use serde_json::Value;

use crate::run::Row;

/// The columns that come first, in this order.
pub const LEADING: &[&str] = &["point", "workload", "settings", "cpu", "paging", "mem", "profile", "error"];
/// Rows per row group.
const ROW_GROUP: usize = 65_536;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Int,
    Float,
    Bool,
    Str,
}

/// The columns of `rows` in file order, each with its type.
fn columns(rows: &[Row]) -> Vec<(String, Kind)> {
    let mut kinds: BTreeMap<&str, Option<Kind>> = BTreeMap::new();
    for row in rows {
        for (k, v) in row {
            let seen = kinds.entry(k).or_insert(None);
            let this = match v {
                Value::Null => continue,
                Value::Bool(_) => Kind::Bool,
                Value::Number(n) if n.is_i64() || n.is_u64() => Kind::Int,
                Value::Number(_) => Kind::Float,
                Value::Object(_) if crate::run::float_of(v).is_some() => Kind::Float,
                _ => Kind::Str,
            };
            *seen = Some(match (*seen, this) {
                (None, k) => k,
                (Some(a), b) if a == b => a,
                (Some(Kind::Int), Kind::Float) | (Some(Kind::Float), Kind::Int) => Kind::Float,
                _ => Kind::Str,
            });
        }
    }
    let kind = |k: &str| kinds.get(k).copied().flatten().unwrap_or(if k == "point" { Kind::Int } else { Kind::Str });
    let mut out: Vec<(String, Kind)> = LEADING.iter().map(|k| (k.to_string(), kind(k))).collect();
    out.extend(kinds.keys().filter(|k| !LEADING.contains(k)).map(|k| (k.to_string(), kind(k))));
    out
}

fn field(name: &str, kind: Kind) -> Result<Arc<Type>> {
    let (physical, logical) = match kind {
        Kind::Int => (Physical::INT64, None),
        Kind::Float => (Physical::DOUBLE, None),
        Kind::Bool => (Physical::BOOLEAN, None),
        Kind::Str => (Physical::BYTE_ARRAY, Some(LogicalType::String)),
    };
    Ok(Arc::new(Type::primitive_type_builder(name, physical).with_repetition(Repetition::OPTIONAL).with_logical_type(logical).build()?))
}

/// Write `rows` (in the order given) to `path`, through a temporary file renamed into place.
pub fn write(path: &Path, rows: &[Row]) -> Result<()> {
    let cols = columns(rows);
    let fields = cols.iter().map(|(n, k)| field(n, *k)).collect::<Result<Vec<_>>>()?;
    let schema = Arc::new(Type::group_type_builder("thplab_sweep").with_fields(fields).build()?);
    let props = Arc::new(WriterProperties::builder().set_created_by(format!("thplab sweep {}", env!("CARGO_PKG_VERSION"))).build());
    let tmp = path.with_extension("parquet.tmp");
    let file = File::create(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
    let mut w = SerializedFileWriter::new(file, schema, props)?;
    for group in rows.chunks(ROW_GROUP) {
        let mut rg = w.next_row_group()?;
        let mut i = 0;
        while let Some(mut col) = rg.next_column()? {
            write_column(col.untyped(), &cols[i].0, group)?;
            col.close()?;
            i += 1;
        }
        rg.close()?;
    }
    w.close()?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

fn write_column(w: &mut ColumnWriter, name: &str, rows: &[Row]) -> Result<()> {
    let values: Vec<Option<&Value>> = rows.iter().map(|r| r.get(name).filter(|v| !v.is_null())).collect();
    let def: Vec<i16> = values.iter().map(|v| v.is_some() as i16).collect();
    let present = values.iter().flatten();
    match w {
        ColumnWriter::Int64ColumnWriter(t) => t.write_batch(&present.map(|v| v.as_i64().unwrap_or(i64::MAX)).collect::<Vec<_>>(), Some(&def), None)?,
        ColumnWriter::DoubleColumnWriter(t) => t.write_batch(&present.map(|v| crate::run::float_of(v).unwrap_or(f64::NAN)).collect::<Vec<_>>(), Some(&def), None)?,
        ColumnWriter::BoolColumnWriter(t) => t.write_batch(&present.map(|v| v.as_bool().unwrap_or(false)).collect::<Vec<_>>(), Some(&def), None)?,
        ColumnWriter::ByteArrayColumnWriter(t) => {
            let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
            t.write_batch(&present.map(|v| ByteArray::from(text(v).into_bytes())).collect::<Vec<_>>(), Some(&def), None)?
        }
        _ => bail!("column {name}: no such column type in a study's table"),
    };
    Ok(())
}

/// The rows of a study's Parquet file, each as column → value (nulls left out), in file order.
pub fn read(path: &Path) -> Result<Vec<Row>> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;
    let file = File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let reader = SerializedFileReader::new(file).with_context(|| format!("{} is not a Parquet file", path.display()))?;
    let mut out = Vec::new();
    for row in reader.get_row_iter(None)? {
        let row = row?;
        let mut r = Row::new();
        for (name, f) in row.get_column_iter() {
            let v = match f {
                Field::Null => continue,
                Field::Long(x) => Value::from(*x),
                Field::Double(x) => Value::from(*x),
                Field::Bool(x) => Value::from(*x),
                Field::Str(x) => Value::from(x.as_str()),
                other => bail!("{}: column {name} has {other}, which no study writes", path.display()),
            };
            r.insert(name.clone(), v);
        }
        out.push(r);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(v: Value) -> Row {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn rows_read_back_typed_with_nulls_and_same_bytes() {
        let rows = vec![
            row(json!({"point": 0, "workload": "a", "settings": "enabled=always", "cpu": "default", "paging": "default", "mem": "4G", "profile": "none", "error": null,
                       "process.minflt": 512, "time.total_ns": 1.5, "census.sizes.64kB.folios": 3, "model.khugepaged.registered": true})),
            row(json!({"point": 1, "workload": "b", "settings": "default", "cpu": "zen1", "paging": "native", "mem": "2G", "profile": "builtin", "error": "out of memory"})),
            row(json!({"point": 2, "workload": "c", "settings": "default", "cpu": "zen1", "paging": "native", "mem": "2G", "profile": "builtin", "error": null,
                       "process.minflt": 7, "time.total_ns": 2})),
            // serde_json may read these digits one unit in the last place off; the table must not.
            row(json!({"point": 3, "workload": "c", "settings": "default", "cpu": "zen1", "paging": "native", "mem": "2G", "profile": "builtin", "error": null,
                       "time.total_ns": crate::run::float(57459.191249999996)})),
        ];
        let dir = tempfile::tempdir().unwrap();
        let (p, q) = (dir.path().join("t.parquet"), dir.path().join("u.parquet"));
        write(&p, &rows).unwrap();
        write(&q, &rows).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), std::fs::read(&q).unwrap());
        let back = read(&p).unwrap();
        assert_eq!(back.len(), 4);
        assert_eq!(back[3]["time.total_ns"].as_f64().unwrap().to_bits(), "57459.191249999996".parse::<f64>().unwrap().to_bits());
        let strip = |r: &Row| -> Row { r.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), v.clone())).collect() };
        assert_eq!(back[0], strip(&rows[0]));
        assert_eq!(back[1], strip(&rows[1]));
        // An integer in a column of floats reads back as a float.
        assert_eq!(back[2]["time.total_ns"], json!(2.0));
        let cols = columns(&rows);
        assert_eq!(cols.iter().map(|(n, _)| n.as_str()).take(9).collect::<Vec<_>>(), [LEADING, &["census.sizes.64kB.folios"]].concat());
        let kind = |n: &str| cols.iter().find(|(c, _)| c == n).unwrap().1;
        assert_eq!((kind("point"), kind("process.minflt"), kind("time.total_ns"), kind("model.khugepaged.registered"), kind("error")), (Kind::Int, Kind::Int, Kind::Float, Kind::Bool, Kind::Str));
    }
}
