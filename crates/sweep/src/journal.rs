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
