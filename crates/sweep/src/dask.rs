//! `--dask tcp://HOST:PORT`: the points a journal lacks run as Dask tasks, through the driver
//! python/thplab/dask_driver.py (built into the binary, written to a temporary file and run with
//! python3). Each task runs `thplab sweep STUDY --point N` on a worker; the driver prints
//! `N<TAB>{"key":...,"row":...}` as each finishes, and the rows go to the same journal (and so
//! the same Parquet file) as a local run's.

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
    let mut child = Command::new("python3")
        .arg(&driver)
        .args([addr.as_ref(), thplab.as_os_str(), study.as_os_str()])
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

/// One line of the driver: `N<TAB>{"key":...,"row":...}` (the Python package's Dask runner
/// gives the same lines).
pub fn parse(line: &str) -> Result<(usize, Row)> {
    let (n, json) = line.split_once('\t').context("no tab")?;
    let v: Value = serde_json::from_str(json)?;
    let row = v.get("row").and_then(Value::as_object).context("no row")?;
    Ok((n.parse()?, row.clone()))
}
