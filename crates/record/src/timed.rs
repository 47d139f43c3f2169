//! `thplab record --timed N`: the program's wall time without the recorder, for the model's
//! prediction of its time under other settings (crates/sim: the recording's untraced time
//! less the model's time of its memory work under 4 KiB pages is the program's own).
//!
//! Each run is the recorded run without tracing: the same argument vector, environment and
//! working directory, `prctl(PR_SET_THP_DISABLE)` and `personality(ADDR_NO_RANDOMIZE)` as
//! the recorder sets them (crate docs), stdin, stdout and stderr on /dev/null (the recorded run
//! had the terminal's: a program that reads its input cannot be run twice on it). The time is
//! from fork to the reaping of the program on CLOCK_MONOTONIC.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::RecordError;

/// In a child between fork and exec: the conditions the recorder runs a program under
/// (`prctl(PR_SET_THP_DISABLE)`, `personality(ADDR_NO_RANDOMIZE)`), for the runs that stand in
/// for the recorded one (these timed runs, the accesses' run under valgrind). Only
/// async-signal-safe calls.
pub(crate) fn as_recorded() {
    // SAFETY: prctl with constant arguments.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong) };
    no_randomize();
}

/// The median wall time (ns) of `runs` untraced runs of `argv` (at least one), as recorded
/// (THP disabled for it).
pub fn time_untraced(argv: &[OsString], runs: u32) -> Result<u64, RecordError> {
    time_runs(argv, runs, as_recorded)
}

/// As [`time_untraced`], with THP left to the machine's knobs (the live runs' conditions:
/// `personality(ADDR_NO_RANDOMIZE)` alone), for the live side of a time comparison.
pub fn time_untraced_live(argv: &[OsString], runs: u32) -> Result<u64, RecordError> {
    time_runs(argv, runs, no_randomize)
}

/// In a child between fork and exec: `personality(ADDR_NO_RANDOMIZE)`.
fn no_randomize() {
    // SAFETY: personality with constant arguments.
    unsafe {
        let cur = libc::personality(0xffff_ffff);
        if cur != -1 {
            libc::personality((cur as libc::c_ulong) | libc::ADDR_NO_RANDOMIZE as libc::c_ulong);
        }
    }
}

fn time_runs(argv: &[OsString], runs: u32, setup: fn()) -> Result<u64, RecordError> {
    let (program, args) = argv.split_first().ok_or_else(|| RecordError::Other("no program to time".into()))?;
    let mut times = Vec::new();
    for _ in 0..runs.max(1) {
        let mut cmd = Command::new(program);
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                setup();
                Ok(())
            });
        }
        let t = Instant::now();
        let status = cmd
            .status()
            .map_err(|e| RecordError::Other(format!("cannot run {} for --timed: {e}", program.to_string_lossy())))?;
        times.push(t.elapsed().as_nanos() as u64);
        if !status.success() {
            return Err(RecordError::Other(format!(
                "the untraced run of {} for --timed ended with {status}: its time is not the recorded program's",
                program.to_string_lossy()
            )));
        }
    }
    times.sort_unstable();
    Ok(times[(times.len() - 1) / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sleep 0.05` three times: the median is at least 50 ms and well under a second; a
    /// failing program is refused.
    #[test]
    fn the_median_of_untraced_runs() {
        let ns = time_untraced(&["sleep".into(), "0.05".into()], 3).unwrap();
        assert!((50_000_000..1_000_000_000).contains(&ns), "{ns}");
        let e = time_untraced(&["false".into()], 1).unwrap_err().to_string();
        assert!(e.contains("ended with"), "{e}");
    }
}
