//! `thplab record --timed N`: the program's wall time without the recorder, for the model's
//! prediction of its time under other settings (crates/sim: the recording's untraced time
//! less the model's time of its memory work under 4 KiB pages is the program's own).
//!
//! Each run is the recorded run without tracing: the same argument vector, environment and
//! working directory, `prctl(PR_SET_THP_DISABLE)` and `personality(ADDR_NO_RANDOMIZE)` as
//! the recorder sets them (crate docs), stdin, stdout and stderr on /dev/null (the recorded run
//! had the terminal's: a program that reads its input cannot be run twice on it). The time is
//! from the spawn (a posix_spawn, see `Conditions`) to the reaping of the program on
//! CLOCK_MONOTONIC.

use std::ffi::OsString;
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::RecordError;

/// In a child between fork and exec: the conditions the recorder runs a program under
/// (`prctl(PR_SET_THP_DISABLE)`, `personality(ADDR_NO_RANDOMIZE)`), for the runs that stand in
/// for the recorded one (these timed runs, the accesses' run under valgrind). Only
/// async-signal-safe calls.
pub(crate) fn as_recorded() {
    set_thp_disable(true);
    no_randomize();
}

/// `prctl(PR_SET_THP_DISABLE, on)` on this process's mm (async-signal-safe).
fn set_thp_disable(on: bool) {
    // SAFETY: prctl with constant arguments.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, on as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong) };
}

/// The median wall time (ns) of `runs` untraced runs of `argv` (at least one), as recorded
/// (THP disabled for it).
pub fn time_untraced(argv: &[OsString], runs: u32) -> Result<u64, RecordError> {
    time_runs(argv, runs, true, None, &[0])
}

/// [`time_untraced`], or with `live` under the live runs' conditions (THP left to the machine's
/// knobs, `personality(ADDR_NO_RANDOMIZE)` alone: the live side of a time comparison), with
/// the program pinned to `cpu` (`sched_setaffinity`, lent as the other conditions are): a model
/// that knows that CPU's per-CPU free list predicts which of its pages were backed.
pub fn time_untraced_on(argv: &[OsString], runs: u32, live: bool, cpu: Option<usize>) -> Result<u64, RecordError> {
    time_runs(argv, runs, !live, cpu, &[0])
}

/// As [`time_untraced_on`], for a program whose exit codes `ok` are all its successes (a SAT
/// solver's 10 and 20: satisfiable, unsatisfiable).
pub fn time_untraced_ok(argv: &[OsString], runs: u32, live: bool, cpu: Option<usize>, ok: &[i32]) -> Result<u64, RecordError> {
    time_runs(argv, runs, !live, cpu, ok)
}

/// `personality(ADDR_NO_RANDOMIZE)` added to this task's (async-signal-safe: also in a child
/// between fork and exec); returns the personality before (-1 where it could not be read).
fn no_randomize() -> i32 {
    // SAFETY: personality with constant arguments.
    unsafe {
        let cur = libc::personality(0xffff_ffff);
        if cur != -1 {
            libc::personality((cur as libc::c_ulong) | libc::ADDR_NO_RANDOMIZE as libc::c_ulong);
        }
        cur
    }
}

/// Puts this thread and process in the recorded program's conditions while a timed run starts,
/// restoring them on drop: a child inherits the calling task's `personality` and the mm's
/// PR_SET_THP_DISABLE (copied at fork, kept by execve). A spawn without a `pre_exec` hook
/// is a posix_spawn (clone with CLONE_VM | CLONE_VFORK), which copies nothing of this process:
/// a fork copied its page tables, a cost that grew with what it held (a recording's accesses,
/// a gigabyte for sort's: sort's untraced runs took 94-116 ms from such a process against
/// 30-45 ms from a small one).
/// The THP flag is the whole process's: timed spawns take turns (another thread spawning
/// meanwhile would inherit it too; this process spawns nothing else while it times a program).
struct Conditions {
    personality: i32,
    thp_disabled: Option<i32>,
    /// This thread's CPU affinity before a pin (a child inherits the calling thread's).
    affinity: Option<libc::cpu_set_t>,
    _turn: std::sync::MutexGuard<'static, ()>,
}

static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Conditions {
    fn set(thp_disable: bool, cpu: Option<usize>) -> Conditions {
        let turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        let personality = no_randomize();
        // SAFETY: prctl with constant arguments.
        let thp_disabled = thp_disable.then(|| unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) });
        if thp_disable {
            set_thp_disable(true);
        }
        // SAFETY: sched_{get,set}affinity of this thread with plain cpu_set_t values.
        let affinity = cpu.and_then(|c| unsafe {
            let mut was: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut was) != 0 {
                return None;
            }
            let mut only: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(c, &mut only);
            (libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &only) == 0).then_some(was)
        });
        Conditions { personality, thp_disabled, affinity, _turn: turn }
    }
}

impl Drop for Conditions {
    fn drop(&mut self) {
        if self.personality != -1 {
            // SAFETY: personality with the value read in `set`.
            unsafe { libc::personality(self.personality as libc::c_ulong) };
        }
        if let Some(was) = self.thp_disabled {
            set_thp_disable(was > 0);
        }
        if let Some(was) = &self.affinity {
            // SAFETY: the affinity read in `set`.
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), was) };
        }
    }
}

fn time_runs(argv: &[OsString], runs: u32, thp_disable: bool, cpu: Option<usize>, ok: &[i32]) -> Result<u64, RecordError> {
    let (program, args) = argv.split_first().ok_or_else(|| RecordError::Other("no program to time".into()))?;
    let mut times = Vec::new();
    for _ in 0..runs.max(1) {
        let mut cmd = Command::new(program);
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        let t = Instant::now();
        let child = {
            let _c = Conditions::set(thp_disable, cpu);
            cmd.spawn()
        };
        let status = child
            .and_then(|mut c| c.wait())
            .map_err(|e| RecordError::Other(format!("cannot run {} for --timed: {e}", program.to_string_lossy())))?;
        times.push(t.elapsed().as_nanos() as u64);
        if !status.code().is_some_and(|c| ok.contains(&c)) {
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

    /// A pinned timed run runs on that CPU alone (/proc/self/status `Cpus_allowed_list`), and
    /// this thread keeps its own affinity.
    #[test]
    fn a_pinned_timed_run_runs_on_its_cpu_and_this_thread_keeps_its_affinity() {
        let allowed = || std::fs::read_to_string("/proc/thread-self/status").unwrap().lines().find(|l| l.starts_with("Cpus_allowed_list")).map(str::to_string);
        let before = allowed();
        // The last CPU this thread may run on.
        let cpu: usize = before.as_deref().and_then(|l| l.rsplit([',', '-', '\t', ' ']).next()).and_then(|c| c.trim().parse().ok()).unwrap();
        let check: Vec<OsString> = vec!["sh".into(), "-c".into(), format!("grep -q 'Cpus_allowed_list:[[:space:]]*{cpu}$' /proc/self/status").into()];
        assert!(time_untraced_on(&check, 1, true, Some(cpu)).is_ok(), "the run is pinned to CPU {cpu}");
        assert_eq!(allowed(), before);
    }

    /// A timed run as recorded has THP disabled (/proc/self/status `THP_enabled: 0`), a live
    /// one not, and this process keeps its own setting either way (the conditions are set only
    /// around the spawn, which the child inherits).
    #[test]
    fn a_timed_run_inherits_the_conditions_and_this_process_keeps_its_own() {
        // Read between timed spawns (another test's may be under way on another thread).
        let own = || {
            let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
            std::fs::read_to_string("/proc/self/status").unwrap().lines().find(|l| l.starts_with("THP_enabled")).map(str::to_string)
        };
        let before = own();
        let check = |v: u8| -> Vec<OsString> { vec!["sh".into(), "-c".into(), format!("grep -q 'THP_enabled:.{v}' /proc/self/status").into()] };
        if before.is_none() {
            return; // a kernel without THP_enabled in /proc/PID/status
        }
        assert!(time_untraced(&check(0), 1).is_ok(), "THP disabled in a run as recorded");
        assert!(time_untraced_on(&check(1), 1, true, None).is_ok(), "THP left to the knobs in a live run");
        assert_eq!(own(), before);
    }
}
