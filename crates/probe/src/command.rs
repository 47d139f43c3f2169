//! The read-only commands, `thplab observe` and `thplab khugepaged`, as entry points that take
//! already-parsed arguments and print to stdout (the CLI keeps only their argument structs),
//! and the check every `--pid` of a command passes first: the process must have a user address
//! space (`/proc/PID/stat`, `fs/proc/array.c: do_task_stat`: not a zombie, not `PF_KTHREAD`).
//!
//! Errors are `anyhow` chains whose text the CLI prints as it is; a [`NotAUserProcess`] is bad
//! input (exit 2), a [`crate::LiveError::NotAvailable`] means no root or no tracefs (exit 5).

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::observe::{observable, observe_with, Observable};
use crate::LiveError;

/// A `CMD --pid` that names no process with a user address space; the message says which and
/// why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotAUserProcess(pub String);

/// Refuse (bad input, exit 2) a pid that `verb` (observe, explain) cannot look at: none, a
/// zombie or a kernel thread.
pub fn require_observable(verb: &str, pid: i32) -> Result<(), NotAUserProcess> {
    require_user_process(verb, pid, &format!("to {verb}"))
}

/// Refuse (bad input, exit 2) a `CMD --pid` that names no process with a user address space:
/// none, a zombie or a kernel thread; `purpose` ends the sentence ("to observe", "for
/// khugepaged to scan").
pub fn require_user_process(cmd: &str, pid: i32, purpose: &str) -> Result<(), NotAUserProcess> {
    let why = match observable(pid) {
        Observable::Yes => return Ok(()),
        Observable::Missing => format!("{cmd} --pid {pid}: there is no process {pid}"),
        Observable::Zombie(comm) => format!(
            "{cmd} --pid {pid}: process {pid} ({comm}) is a zombie: it has exited and its parent has not reaped it, so it has no memory {purpose}"
        ),
        Observable::KernelThread(comm) => {
            format!("{cmd} --pid {pid}: process {pid} ({comm}) is a kernel thread: it has no user address space {purpose}")
        }
    };
    Err(NotAUserProcess(why))
}

/// `text` on stdout, flushed; `Ok(false)` when the reader has gone (`thplab observe ... |
/// head`: then so are we).
fn print(text: &str) -> Result<bool> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e).context("cannot write to stdout"),
    }
}

/// `thplab observe --pid PID [--json] [--interval MS]`: the folio census of every VMA of a
/// process; `wide` prints the table at its full width (`{:#}`). Exit codes (README.md): 0 when
/// it was observed (also when it exits between two samples: "process N exited"); 2 when the pid
/// names no process with a user address space (no such process, a zombie, a kernel thread); 5
/// when this user may not read its pagemap.
pub fn observe(pid: i32, json: bool, wide: bool, interval_ms: Option<u64>, budget_ms: Option<u64>) -> Result<i32> {
    require_observable("observe", pid)?;
    let mut first = true;
    loop {
        match observe_with(pid, budget_ms.map(Duration::from_millis)) {
            Ok(report) => {
                let text = if json {
                    format!("{}\n", serde_json::to_string(&report).context("cannot print JSON")?)
                } else if wide {
                    format!("{}{report:#}", if first { "" } else { "\n" })
                } else {
                    format!("{}{report}", if first { "" } else { "\n" })
                };
                if !print(&text)? {
                    return Ok(0);
                }
            }
            Err(LiveError::NoSuchProcess { pid }) if !first => {
                eprintln!("thplab observe: process {pid} exited");
                return Ok(0);
            }
            Err(LiveError::NoSuchProcess { pid }) => {
                anyhow::bail!("observe --pid {pid}: process {pid} exited before it could be observed");
            }
            Err(e) => return Err(e).with_context(|| format!("observing process {pid}")),
        }
        first = false;
        let Some(ms) = interval_ms else { return Ok(0) };
        std::thread::sleep(Duration::from_millis(ms.max(1)));
        // A process that became a zombie between samples has no mm left: it exited.
        if matches!(observable(pid), Observable::Missing | Observable::Zombie(_)) {
            eprintln!("thplab observe: process {pid} exited");
            return Ok(0);
        }
    }
}

/// `thplab khugepaged [--interval S] [--follow] [--pid PID]... [--json]`: what khugepaged did,
/// per process, from its tracepoints ([`crate::khugepaged`]). Exit codes: 0 after a report; 5
/// when tracing cannot run here (not root, no tracefs or no huge_memory tracepoints).
pub fn khugepaged(interval_s: f64, follow: bool, pids: &[i32], json: bool) -> Result<i32> {
    use crate::khugepaged::{stop_on_signals, stop_requested, trace_interval, tracefs_dir, Tracer};
    for pid in pids {
        require_user_process("khugepaged", *pid, "for khugepaged to scan")?;
    }
    if !crate::sysfs::is_root() {
        return Err(LiveError::NotAvailable("thplab khugepaged reads tracepoints and needs root".into()).into());
    }
    let tracefs = tracefs_dir()?;
    let mut tracer = Tracer::start(&tracefs)?;
    stop_on_signals();
    let pids = (!pids.is_empty()).then_some(pids);
    if !json {
        eprintln!("thplab khugepaged: tracing khugepaged for {} s{} (Ctrl-C ends it early)", interval_s, if follow { " per report" } else { "" });
    }
    loop {
        let mut r = trace_interval(&mut tracer, Duration::from_secs_f64(interval_s), pids);
        let text = if json {
            let mut v = serde_json::to_value(&r)?;
            v.as_object_mut().expect("an object").insert("schema".into(), "thplab-khugepaged/1".into());
            format!("{}\n", serde_json::to_string(&v)?)
        } else {
            r.processes.truncate(50);
            format!("{r}\n")
        };
        if !print(&text)? || !follow || stop_requested() {
            return Ok(0);
        }
    }
}

// The value checks of the live commands' flags (clap value parsers of `thplab observe`,
// `khugepaged` and `agent`), each error saying what is valid.

/// `--interval MS`: a positive number of milliseconds.
pub fn interval_ms(s: &str) -> std::result::Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("0 ms would sample without pause; give at least 1 (ms), such as 1000".into()),
        Ok(v) => Ok(v),
        Err(_) => Err(format!("'{s}' is not a number of milliseconds; give at least 1, such as 1000")),
    }
}

/// A positive number of seconds, at most a day.
pub fn seconds(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() && v <= 86400.0 => Ok(v),
        _ => Err(format!("'{s}' is not a number of seconds between 0 and 86400 (exclusive of 0), such as 10 or 0.5")),
    }
}

/// A size such as 64M, 1G or 0.
pub fn size_arg(s: &str) -> std::result::Result<u64, String> {
    mm_types::parse_size(s).ok_or_else(|| format!("'{s}' is not a size; give bytes with an optional K, M, G or T suffix, such as 64M"))
}
