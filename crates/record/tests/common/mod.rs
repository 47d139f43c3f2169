//! What the record test binaries share: running the recorder helper.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output, Stdio};

pub const HELPER: &str = env!("CARGO_BIN_EXE_thplab-record-helper");

/// Record `cmd` into `out` with the helper; None (the test skips, saying why) when recording is
/// unavailable here (exit 200); a recorder failure (exit 201) fails the test.
pub fn record_with_helper<S: AsRef<OsStr>>(out: &Path, cmd: &[S]) -> Option<Output> {
    let o = Command::new(HELPER)
        .arg(out)
        .args(cmd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run the helper");
    let stderr = String::from_utf8_lossy(&o.stderr);
    if o.status.code() == Some(200) {
        eprintln!("SKIP: {}", stderr.trim());
        return None;
    }
    assert_ne!(o.status.code(), Some(201), "the recorder failed: {stderr}");
    Some(o)
}
