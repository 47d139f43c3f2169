//! `thplab record` and `thplab trace show|stats` as entry points that take already-parsed
//! arguments (the CLI keeps only its argument structs and opens the inputs): records a program
//! into a file ([`crate::record`], and with `--accesses` its data accesses under QEMU or valgrind), says
//! what was recorded and what was lost; prints or summarises a recording.
//!
//! Exit codes of `thplab record`: the program's own status (its exit code, or 128 + the signal
//! that killed it); 5 when recording is not available here (no perf_event_open, no tracepoints:
//! [`Outcome::Unavailable`]); 126 when the program cannot be executed, 127 when it is not found
//! (as a shell).

use std::ffi::OsString;
use std::io::{BufWriter, Read, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use trace::{TraceError, TraceReader};

/// The arguments of `thplab record` (`thplab record --help` says what each means).
#[derive(Clone, Debug)]
pub struct RecordCommand {
    pub output: PathBuf,
    pub buffer_kib: usize,
    pub no_kernel_faults: bool,
    pub no_exec_snapshot: bool,
    pub no_paths: bool,
    pub quiet: bool,
    pub timed: u32,
    pub accesses: bool,
    /// `--accesses=ENGINE`: what records the accesses (auto: qemu when it can run, else lackey).
    pub engine: crate::accesses::Engine,
    pub command: Vec<OsString>,
}

/// How `thplab record` ended when it did not fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The program's status, or 126/127 when it could not be executed or found.
    Exited(u8),
    /// Recording is not available here (the reason is on stderr).
    Unavailable,
}

/// How the CLI words a damaged or cut recording (`thplab`'s `input::damaged`).
pub type Damaged<R> = fn(&str, TraceError, &TraceReader<R>) -> anyhow::Error;

/// `Some("uid N without CAP_SYS_ADMIN")` when this process is neither root nor holds
/// CAP_SYS_ADMIN (bit 21 of CapEff in /proc/self/status).
fn unprivileged() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |k: &str| status.lines().find_map(|l| l.strip_prefix(k)).map(str::trim);
    let uid = field("Uid:")?.split_whitespace().nth(1)?.to_string();
    let cap = u64::from_str_radix(field("CapEff:")?, 16).ok()?;
    (uid != "0" && cap & (1 << 21) == 0).then(|| format!("you are uid {uid} without CAP_SYS_ADMIN"))
}

/// `thplab record -o FILE -- CMD [ARGS...]`; `time_untraced(argv, runs, progress)` times the
/// untraced runs of `--timed` (the CLI's, which settles the host first).
pub fn record(args: &RecordCommand, time_untraced: &dyn Fn(&[OsString], u32, bool) -> Result<u64>) -> Result<Outcome> {
    if args.output.as_os_str() == "-" {
        bail!("-o -: the recorded program writes to standard output too; give a file (a recording can then be read back from standard input: thplab sim - < FILE)");
    }
    let engine = match args.accesses {
        true => args.engine.resolve().map_err(|why| anyhow::anyhow!("{why}; or record without --accesses"))?,
        false => args.engine,
    };
    // Fail on an unwritable output before running anything.
    let file = std::fs::File::create(&args.output).with_context(|| format!("cannot create {}", args.output.display()))?;
    let companion = trace::accesses::companion_path(&args.output);
    let access_file = if args.accesses {
        Some(std::fs::File::create(&companion).with_context(|| format!("cannot create {}", companion.display()))?)
    } else {
        // A companion of an earlier recording to the same name would not match this one.
        let _ = std::fs::remove_file(&companion);
        None
    };
    let opts = crate::RecordOptions {
        buffer_kib: args.buffer_kib,
        kernel_faults: !args.no_kernel_faults,
        exec_snapshot: !args.no_exec_snapshot,
        thp_disable: true,
        paths: !args.no_paths,
        cgroup_procs: None,
    };
    let rec = match crate::record(&args.command, &opts) {
        Ok(r) => r,
        Err(e) => return recording_failed(e, args, &companion),
    };
    let mut rec = rec;
    if args.timed > 0 {
        if !args.quiet {
            eprintln!("thplab record: timing {} untraced run(s) of the program", args.timed);
        }
        rec.header.untraced_wall_ns = time_untraced(&args.command, args.timed, !args.quiet)?;
    }
    rec.write_to(BufWriter::new(file)).with_context(|| format!("writing {}", args.output.display()))?;
    let accesses = match access_file {
        Some(f) => Some(record_accesses_companion(f, args, engine, &rec, &companion)?),
        None => None,
    };
    warn_incomplete(args, &rec);
    if !args.quiet {
        print_summary(args, &rec);
    }
    if let Some(s) = &accesses {
        print_accesses(args, s, &companion);
    }
    Ok(Outcome::Exited(rec.header.exit_status.min(255) as u8))
}

/// A recording that failed: the output (and companion) removed; unavailable recording and a
/// program that cannot be executed are outcomes, anything else an error.
fn recording_failed(e: crate::RecordError, args: &RecordCommand, companion: &std::path::Path) -> Result<Outcome> {
    let _ = std::fs::remove_file(&args.output);
    if args.accesses {
        let _ = std::fs::remove_file(companion);
    }
    match e {
        crate::RecordError::Unavailable(why) => {
            match unprivileged() {
                Some(who) => eprintln!(
                    "thplab record: recording needs root or CAP_SYS_ADMIN ({who}): it reads the tracepoints' formats from tracefs \
                     (mounting it in a private namespace where it is not mounted) and opens perf events on them; \
                     run it as root (sudo thplab record ...). What failed: {why}"
                ),
                None => eprintln!("thplab record: recording is not available here: {why}"),
            }
            Ok(Outcome::Unavailable)
        }
        crate::RecordError::Exec { program, reason, not_found } => {
            eprintln!("thplab record: {program}: {reason}");
            Ok(Outcome::Exited(if not_found { 127 } else { 126 }))
        }
        other => Err(other.into()),
    }
}

/// `--accesses`: run the program under valgrind lackey and write its accesses to the
/// companion file (removed if that fails).
fn record_accesses_companion(
    f: std::fs::File,
    args: &RecordCommand,
    engine: crate::accesses::Engine,
    rec: &crate::Recording,
    companion: &std::path::Path,
) -> Result<crate::accesses::AccessSummary> {
    if !args.quiet {
        let how = match engine {
            crate::accesses::Engine::Qemu => "QEMU user-mode with thplab's TCG plugin",
            _ => "valgrind lackey",
        };
        eprintln!("thplab record: running the program under {how} for its accesses");
    }
    let crc = trace_crc(&args.output)?;
    let native_ns = crate::accesses::native_ns(&args.command, rec);
    let out = BufWriter::new(f);
    match crate::accesses::record_with(engine, &args.command, rec, crc, native_ns, out) {
        Ok(s) => Ok(s),
        Err(e) => {
            let _ = std::fs::remove_file(companion);
            Err(anyhow::Error::from(e).context(format!("--accesses: {} not written", companion.display())))
        }
    }
}

/// The warnings about what the recording lacks: lost events, unresolved paths, unanswered
/// calls, missing tracepoints.
fn warn_incomplete(args: &RecordCommand, rec: &crate::Recording) {
    let h = &rec.header;
    if h.lost_events > 0 {
        eprintln!(
            "thplab record: WARNING: the kernel dropped {} events: {} is INCOMPLETE and predictions from it will be wrong. \
             Record again with a larger --buffer-kib (now {} KiB per CPU).",
            h.lost_events,
            args.output.display(),
            rec.buffer_bytes_per_cpu / 1024
        );
    }
    if let Some(why) = &rec.paths_unavailable {
        eprintln!("thplab record: warning: the files of open/openat/unlink were not resolved ({why}); writes to tmpfs files are not predicted");
    }
    if let Some(why) = &rec.answers_unavailable {
        eprintln!("thplab record: warning: madvise(MADV_COLLAPSE) and prctl(PR_GET_THP_DISABLE) were not answered as without PR_SET_THP_DISABLE ({why}): the program saw them fail or report THP disabled");
    }
    if !rec.missing_tracepoints.is_empty() {
        eprintln!("thplab record: warning: not recorded (no such tracepoint on this kernel): {}", rec.missing_tracepoints.join(", "));
    }
}

/// What was recorded: events by kind, time, losses, bytes written, exit status.
fn print_summary(args: &RecordCommand, rec: &crate::Recording) {
    let h = &rec.header;
    let size = std::fs::metadata(&args.output).map(|m| m.len()).unwrap_or(0);
    let faults = h.counts.iter().find(|(k, _)| *k == trace::kind::FAULT).map_or(0, |c| c.1);
    let syscalls: u64 = h.counts.iter().filter(|(k, _)| trace::SyscallKind::from_code(*k).is_some()).map(|c| c.1).sum();
    let tasks = h.counts.iter().find(|(k, _)| *k == trace::kind::TASK_NEW).map_or(0, |c| c.1);
    eprintln!(
        "thplab record: {} events ({faults} faults, {syscalls} system calls, {tasks} new tasks) in {:.3} s, {} lost; {size} bytes written to {}; exit status {}",
        rec.events.len(),
        h.duration_ns as f64 / 1e9,
        h.lost_events,
        args.output.display(),
        h.exit_status
    );
    if h.untraced_wall_ns > 0 {
        eprintln!("thplab record: untraced: {:.3} s (median of {})", h.untraced_wall_ns as f64 / 1e9, args.timed);
    }
}

/// What `--accesses` recorded, and its warnings.
fn print_accesses(args: &RecordCommand, s: &crate::accesses::AccessSummary, companion: &std::path::Path) {
    let t = &s.totals;
    if !args.quiet {
        eprintln!(
            "thplab record: accesses: {} s under {tool} vs {} s native ({:.0}x); {} data accesses ({} writes) in {} runs ({:.1} accesses/run), {} bytes written to {}; {} of {} {tool} memory calls matched",
            format_args!("{:.3}", t.valgrind_ns as f64 / 1e9),
            format_args!("{:.3}", t.native_ns as f64 / 1e9),
            t.valgrind_ns as f64 / t.native_ns.max(1) as f64,
            t.raw_accesses,
            t.writes,
            t.runs,
            (t.raw_accesses - t.unmapped_accesses) as f64 / t.runs.max(1) as f64,
            s.bytes,
            companion.display(),
            t.matched_syscalls,
            t.valgrind_syscalls,
            tool = s.engine.tool(),
        );
    }
    for w in s.warnings() {
        eprintln!("thplab record: warning: --accesses: {w}");
    }
}

/// The CRC-32 in the trailer of the recording at `path` (its last four bytes), which its
/// companion file names.
pub fn trace_crc(path: &std::path::Path) -> Result<u32> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    f.seek(SeekFrom::End(-4)).with_context(|| format!("{} is too short for a recording", path.display()))?;
    let mut b = [0u8; 4];
    f.read_exact(&mut b).with_context(|| format!("reading {}", path.display()))?;
    Ok(u32::from_le_bytes(b))
}

/// `thplab trace show FILE`: the recording `r` (named `name` in messages) as text, one line
/// per event, at most `limit`, of process `pid` only, without faults with `no_faults`.
pub fn trace_show<R: Read>(mut r: TraceReader<R>, name: &str, limit: Option<u64>, pid: Option<u32>, no_faults: bool, damaged: Damaged<R>) -> Result<()> {
    let out = std::io::stdout();
    let mut out = BufWriter::new(out.lock());
    let h = r.header().clone();
    writeln!(out, "# {name}: thplab trace {}.{}, kernel {} {}", r.major_version(), r.minor_version(), h.kernel_release, h.machine)?;
    writeln!(out, "# command: {} (pid {}, exit status {}, {:.6} s)", trace::text::command_line(&h.argv), h.root_pid, h.exit_status, h.duration_ns as f64 / 1e9)?;
    if h.lost_events > 0 {
        writeln!(out, "# LOST EVENTS: {} (this recording is incomplete)", h.lost_events)?;
    }
    let mut shown = 0u64;
    let mut pids = std::collections::BTreeSet::new();
    loop {
        let e = match r.next_event() {
            Ok(Some(e)) => e,
            Ok(None) => break,
            Err(e) => {
                out.flush()?;
                let old = if r.major_version() < 3 { " (a 2.x recording has no block checksums: they were not checked, and any of them may be misread)" } else { "" };
                eprintln!("thplab trace: {name}: the {shown} lines above are the records before the damage{old}");
                return Err(damaged(name, e, &r));
            }
        };
        pids.insert(e.pid);
        if limit.is_some_and(|l| shown >= l) {
            break;
        }
        if pid.is_some_and(|p| p != e.pid) || (no_faults && matches!(e.body, trace::EventBody::Fault { .. })) {
            continue;
        }
        writeln!(out, "{}", trace::text::event_line(&e))?;
        shown += 1;
    }
    out.flush()?;
    if h.lost_events > 0 {
        eprintln!("thplab trace: warning: {} events were lost while recording {name}", h.lost_events);
    }
    if let Some(p) = pid {
        if !pids.contains(&p) && limit.is_none_or(|l| shown < l) {
            let list: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
            bail!("--pid {p}: no process {p} in {name}; its processes are {}", list.join(", "));
        }
    }
    Ok(())
}

/// `thplab trace stats FILE`: the summary of the recording `r` (named `name`), as text or one
/// JSON object (schema `thplab-trace-stats/1`).
pub fn trace_stats<R: Read>(mut r: TraceReader<R>, name: &str, json: bool, damaged: Damaged<R>) -> Result<()> {
    let mut b = trace::stats::StatsBuilder::new(r.header());
    while let Some(e) = r.next_event().map_err(|e| damaged(name, e, &r))? {
        b.add(&e);
    }
    let s = b.finish();
    let out = std::io::stdout();
    let mut out = out.lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &s)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", s.to_text())?;
    }
    if s.lost_events > 0 {
        eprintln!("thplab trace: warning: {} events were lost while recording {name}", s.lost_events);
    }
    Ok(())
}
