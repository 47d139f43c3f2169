//! The append-only journal of a study's finished points (JSON lines beside the output:
//! `OUT.parquet.journal`), so that a sweep killed at any moment (Ctrl-C, SIGKILL) loses no
//! finished point: each row is one `write(2)` of one line, made as the point finishes, and a
//! re-run of the same study with the same output runs only the points the journal lacks.
//!
//! The first line names what the rows hold (`{"thplab_sweep_journal":1,"keep":[...]}`): a
//! journal written for other kept sections is refused rather than mixed. Each further line is
//! `{"key":"workload=...|settings=...|...","row":{...}}`; rows are matched to points by their
//! key, so a study that gains values on an axis keeps its finished points. A last line cut
//! short by the kill is dropped (and cut off the file) on resume.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::run::Row;

/// The journal of output `out`.
pub fn path_for(out: &Path) -> PathBuf {
    let mut p = out.as_os_str().to_owned();
    p.push(".journal");
    PathBuf::from(p)
}

pub struct Journal {
    file: File,
}

fn header(keep: &[String]) -> Value {
    json!({ "thplab_sweep_journal": 1, "keep": keep })
}

impl Journal {
    /// Open (or create) the journal at `path` for a study keeping `keep`; returns it and the
    /// rows already in it by key.
    pub fn open(path: &Path, keep: &[String]) -> Result<(Journal, HashMap<String, Row>)> {
        let name = path.display();
        let mut file = OpenOptions::new().read(true).append(true).create(true).open(path).with_context(|| format!("cannot open the journal {name}"))?;
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read the journal {name}"))?;
        let mut rows = HashMap::new();
        if text.is_empty() {
            let line = format!("{}\n", header(keep));
            file.write_all(line.as_bytes()).with_context(|| format!("cannot write the journal {name}"))?;
            return Ok((Journal { file }, rows));
        }
        let mut good = 0;
        for (i, line) in text.split_inclusive('\n').enumerate() {
            let complete = line.ends_with('\n');
            let parsed = serde_json::from_str::<Value>(line.trim_end());
            let Ok(v) = parsed.as_ref().map_err(|_| ()).and_then(|v| if complete { Ok(v) } else { Err(()) }) else {
                if good + line.len() == text.len() {
                    break; // the last line, cut short by a kill
                }
                bail!("journal {name} line {}: not a journal line ({}); delete the journal to start the study again", i + 1, parsed.err().map_or("no newline".into(), |e| e.to_string()));
            };
            if i == 0 {
                if *v != header(keep) {
                    bail!("journal {name} was written for another study's columns ({}); this study keeps {:?}: delete it or give another -o", line.trim_end(), keep);
                }
            } else {
                let (Some(key), Some(row)) = (v.get("key").and_then(Value::as_str), v.get("row").and_then(Value::as_object)) else {
                    bail!("journal {name} line {}: no key and row; delete the journal to start the study again", i + 1);
                };
                rows.insert(key.to_string(), row.clone());
            }
            good += line.len();
        }
        if good < text.len() {
            file.set_len(good as u64).with_context(|| format!("cannot cut the journal {name}"))?;
            file.seek(SeekFrom::End(0))?;
        }
        if good == 0 {
            // Killed while writing the header.
            file.write_all(format!("{}\n", header(keep)).as_bytes()).with_context(|| format!("cannot write the journal {name}"))?;
        }
        Ok((Journal { file }, rows))
    }

    /// Append one finished point: one line in one write.
    pub fn append(&mut self, key: &str, row: &Row) -> Result<()> {
        let line = format!("{}\n", json!({ "key": key, "row": row }));
        self.file.write_all(line.as_bytes()).context("cannot write the journal")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(n: u64) -> Row {
        let mut r = Row::new();
        r.insert("point".into(), Value::from(n));
        r.insert("process.minflt".into(), Value::from(512 * n));
        r
    }

    #[test]
    fn a_line_cut_by_a_kill_is_dropped_and_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("o.parquet.journal");
        let keep = vec!["process".to_string()];
        {
            let (mut j, rows) = Journal::open(&p, &keep).unwrap();
            assert!(rows.is_empty());
            j.append("a", &row(1)).unwrap();
            j.append("b", &row(2)).unwrap();
        }
        let whole = std::fs::read_to_string(&p).unwrap();
        // The kill came in the middle of the third line.
        std::fs::write(&p, format!("{whole}{{\"key\":\"c\",\"row\":{{\"po")).unwrap();
        let (mut j, rows) = Journal::open(&p, &keep).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows["b"], row(2));
        assert_eq!(std::fs::read_to_string(&p).unwrap(), whole, "the cut line is cut off the file");
        j.append("c", &row(3)).unwrap();
        drop(j);
        let (_, rows) = Journal::open(&p, &keep).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows["c"]["process.minflt"], 1536);
    }

    #[test]
    fn another_studys_journal_or_a_damaged_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("o.parquet.journal");
        Journal::open(&p, &["process".to_string()]).unwrap().0.append("a", &row(1)).unwrap();
        let e = Journal::open(&p, &["time".to_string()]).err().unwrap().to_string();
        assert!(e.contains("written for another study's columns") && e.contains("[\"time\"]"), "{e}");
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(&p, format!("{text}garbage\n{{\"key\":\"b\",\"row\":{{}}}}\n")).unwrap();
        let e = Journal::open(&p, &["process".to_string()]).err().unwrap().to_string();
        assert!(e.contains("line 3: not a journal line"), "{e}");
    }

    #[test]
    fn path_is_beside_the_output() {
        assert_eq!(path_for(Path::new("/x/s.parquet")), PathBuf::from("/x/s.parquet.journal"));
    }
}
