//! `--dask tcp://HOST:PORT`: the points a journal lacks run as Dask tasks, through the driver
//! python/thplab/dask_driver.py (built into the binary, written to a temporary file and run with
//! python3). Each task runs `thplab sweep STUDY --point N` on a worker; the driver prints
//! `N<TAB>{"key":...,"row":...}` as each finishes, and the rows go to the same journal (and so
//! the same Parquet file) as a local run's.
//!
//! The workers need not share this file system: the study and every file it reads
//! ([`crate::Study::files`], a recording's companion access trace beside it) go to the driver
//! as a manifest ([`manifest`]); the driver uploads their bytes once to every worker
//! (`Client.scatter(..., broadcast=True)`) with their SHA-256, each task writes them under the
//! worker's temporary folder (once per content), checks the hash of what it wrote, and runs
//! `thplab sweep COPY --point N --files MAP.json` on the copies ([`shipped`]).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::run::Row;

/// The driver's text.
const DRIVER: &str = include_str!("../../../python/thplab/dask_driver.py");

/// Run `points` of the study at `study` on the Dask scheduler `addr`, with the thplab binary
/// `thplab` on the workers; `sink` is told each point's row as it arrives.
pub fn run(addr: &str, thplab: &Path, study: &Path, points: &[usize], mut sink: impl FnMut(usize, Row) -> Result<()>) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("thplab-dask-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let driver = dir.join("thplab_dask.py");
    std::fs::write(&driver, DRIVER).with_context(|| format!("cannot write {}", driver.display()))?;
    let files = dir.join("files.json");
    std::fs::write(&files, manifest(study)?.to_string()).with_context(|| format!("cannot write {}", files.display()))?;
    let mut child = Command::new("python3")
        .arg(&driver)
        .args([addr.as_ref(), thplab.as_os_str(), study.as_os_str(), files.as_os_str()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("--dask: cannot run python3 (the driver needs python3 with dask.distributed)")?;
    let list: String = points.iter().map(|n| format!("{n}\n")).collect();
    let mut stdin = child.stdin.take().expect("piped");
    std::thread::scope(|s| -> Result<()> {
        s.spawn(move || drop(stdin.write_all(list.as_bytes())));
        for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
            let line = line.context("--dask: cannot read the driver's output")?;
            let (n, row) = parse(&line).with_context(|| format!("--dask: the driver printed '{line}'"))?;
            sink(n, row)?;
        }
        Ok(())
    })?;
    let status = child.wait()?;
    let _ = std::fs::remove_dir_all(&dir);
    if !status.success() {
        bail!("--dask {addr}: the driver ({}) failed ({status}); its error is above", "python/thplab/dask_driver.py");
    }
    Ok(())
}

/// The files the workers are sent, as the driver reads them: `{"NAME": ["PATH", ...]}` for
/// each file the study at `study` names NAME, the file first, then a recording's companion
/// access trace (`trace::accesses::companion_path`) where there is one.
pub fn manifest(study: &Path) -> Result<Value> {
    let s = crate::study::load(study)?;
    let mut m = serde_json::Map::new();
    for (name, path) in &s.files {
        let path = path.canonicalize().with_context(|| format!("cannot find {}", path.display()))?;
        let mut paths = vec![Value::from(path.display().to_string())];
        let companion = trace::accesses::companion_path(&path);
        if companion.is_file() {
            paths.push(Value::from(companion.display().to_string()));
        }
        m.insert(name.clone(), Value::Array(paths));
    }
    Ok(Value::Object(m))
}

/// A worker's map of the study's file names to its copies (`--files FILES.json`: `{"NAME":
/// "PATH"}`).
pub fn shipped(path: &Path) -> Result<std::collections::BTreeMap<String, std::path::PathBuf>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: give a JSON object {{\"NAME\": \"PATH\"}}", path.display()))
}

/// One line of the driver: `N<TAB>{"key":...,"row":...}` (the Python package's Dask runner
/// gives the same lines).
pub fn parse(line: &str) -> Result<(usize, Row)> {
    let (n, json) = line.split_once('\t').context("no tab")?;
    let v: Value = serde_json::from_str(json)?;
    let row = v.get("row").and_then(Value::as_object).context("no row")?;
    Ok((n.parse()?, row.clone()))
}
