//! Writing single knobs of `/sys/kernel/mm/transparent_hugepage` (for the settings guard) and
//! creating the harness's state directory. Reading them, and where the knobs and the state are
//! ([`Paths`]), is read-only probing: crates/probe `sysfs`, re-exported here at its old path.
//!
//! Stores match with `sysfs_streq` (`mm/huge_memory.c: enabled_store`), so the value is written
//! without a newline, then read back (`enabled_show` brackets the selected word).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

pub use probe::sysfs::*;

use crate::{io_err, LiveError, Result};

/// Write `value` to knob `rel` and read it back.
pub fn write_knob(paths: &Paths, rel: &str, value: &str) -> Result<()> {
    let p = paths.knob(rel);
    let mut f = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&p)
        .map_err(|e| io_err("cannot open THP knob for writing", &p, e))?;
    f.write_all(value.as_bytes()).map_err(|e| LiveError::Knob {
        path: rel.to_string(),
        message: format!("the kernel refused '{value}': {e}"),
    })?;
    drop(f);
    let back = read_knob(paths, rel)?;
    if back != value {
        return Err(LiveError::Knob {
            path: rel.to_string(),
            message: format!("wrote '{value}' but it reads back as '{back}'"),
        });
    }
    Ok(())
}

/// Write several knobs in order; a write that fails is retried once after all the others
/// (top-level `shmem_enabled=force` and the per-size `shmem_enabled` knobs constrain each
/// other, so one order cannot suit every transition). Returns the knobs that still failed.
pub fn write_knobs_with_retry(paths: &Paths, knobs: &[(String, String)]) -> Vec<(String, LiveError)> {
    let mut failed = Vec::new();
    for (rel, value) in knobs {
        if let Err(e) = write_knob(paths, rel, value) {
            failed.push((rel.clone(), value.clone(), e));
        }
    }
    let mut still = Vec::new();
    for (rel, value, _first) in failed {
        if let Err(e) = write_knob(paths, &rel, &value) {
            still.push((rel, e));
        }
    }
    still
}

pub(crate) fn ensure_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| io_err("cannot create the thplab state directory", dir, e))
}
