//! `thplab record` and `thplab trace show|stats`: entry points that take parsed arguments. The
//! recorder is the `record` crate, the format the `trace` crate (docs/trace-format.md).
//!
//! Exit codes of `thplab record`: the program's own status (its exit code, or 128 + the signal
//! that killed it); 5 when recording is not available here (no perf_event_open, no tracepoints);
//! 126 when the program cannot be executed, 127 when it is not found (as a shell).

use std::ffi::OsString;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

/// Arguments of `thplab record`.
#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Write the recording to FILE (the trace format of docs/trace-format.md).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Ring buffer per CPU in KiB, from 64 to 4194304 (4 GiB), rounded down to a power of two
    /// pages. Larger buffers make lost events less likely for programs that fault very fast;
    /// the buffers are locked memory, one per online CPU.
    #[arg(long, value_name = "KIB", default_value_t = 32 * 1024, value_parser = buffer_kib)]
    pub buffer_kib: usize,
    /// Do not record the faults the kernel takes on the program's memory (in read(), execve,
    /// ...); only faults taken in user mode.
    #[arg(long)]
    pub no_kernel_faults: bool,
    /// Do not trace the program (ptrace) to read its address space inside every execve of every process it starts.
    #[arg(long)]
    pub no_exec_snapshot: bool,
    /// Do not stop open/openat/creat/unlink/unlinkat at their entry to resolve the file they name
    /// (a seccomp user-notification filter; without it, writes to tmpfs files and /dev/shm
    /// cannot be predicted).
    #[arg(long)]
    pub no_paths: bool,
    /// Do not print the summary on stderr (lost events are always reported).
    #[arg(short, long)]
    pub quiet: bool,
    /// After recording, run the program N more times without the recorder (THP disabled, no
    /// randomisation, stdin/stdout/stderr on /dev/null) and keep the median wall time in the
    /// recording: `thplab sim --profile` then predicts the program's wall time under any
    /// setting (its own time plus the modelled work). For programs that can run twice. On a VM
    /// that reports free pages, each run waits until reporting has taken every free block.
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub timed: u32,
    /// After recording, run the program once more under valgrind's lackey tool (stdin, stdout
    /// and stderr on /dev/null) and write its data accesses, mapped onto the recorded run's
    /// addresses and compressed into runs per 4 KiB page, to FILE.accesses (docs/trace-format.md,
    /// "Accesses"): `thplab sim FILE --cpu PRESET` then drives the TLB model with them. Needs
    /// valgrind; the program runs 50-3000 times slower under it. The program runs twice more
    /// (once untraced, unless --timed, for the time the valgrind run is compared with): for
    /// programs that can run again.
    #[arg(long)]
    pub accesses: bool,
    /// The program and its arguments, after `--`. It runs with THP disabled for it alone
    /// (PR_SET_THP_DISABLE) and without address-space randomisation (ADDR_NO_RANDOMIZE).
    #[arg(value_name = "CMD", required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<OsString>,
}

/// `Some("uid N without CAP_SYS_ADMIN")` when this process is neither root nor holds
/// CAP_SYS_ADMIN (bit 21 of CapEff in /proc/self/status).
fn unprivileged() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |k: &str| status.lines().find_map(|l| l.strip_prefix(k)).map(str::trim);
    let uid = field("Uid:")?.split_whitespace().nth(1)?.to_string();
    let cap = u64::from_str_radix(field("CapEff:")?, 16).ok()?;
    (uid != "0" && cap & (1 << 21) == 0).then(|| format!("you are uid {uid} without CAP_SYS_ADMIN"))
}

/// `--buffer-kib`: 64 KiB (16 pages, the recorder's floor) to 4 GiB per CPU.
fn buffer_kib(s: &str) -> Result<usize, String> {
    let v: usize = s.parse().map_err(|_| format!("'{s}' is not a number of KiB; give 64 to 4194304 (the default is 32768)"))?;
    if !(64..=4 << 20).contains(&v) {
        return Err(format!("{v} KiB is outside 64 to 4194304 (64 KiB to 4 GiB per CPU; the default is 32768)"));
    }
    Ok(v)
}

/// Arguments of `thplab trace`.
#[derive(Args, Debug)]
pub struct TraceArgs {
    #[command(subcommand)]
    pub cmd: TraceCmd,
}

/// The `thplab trace` subcommands.
#[derive(Subcommand, Debug)]
pub enum TraceCmd {
    /// Print a recording as text, one line per event.
    Show(TraceShowArgs),
    /// Summarise a recording: records per kind, faults, processes and threads, lost events.
    Stats(TraceStatsArgs),
}

/// Arguments of `thplab trace show`.
#[derive(Args, Debug)]
pub struct TraceShowArgs {
    /// A file written by `thplab record` (`-`: standard input).
    pub file: PathBuf,
    /// Print at most N events.
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
    /// Only events of this process.
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// Leave out page faults (system calls, tasks and mappings only).
    #[arg(long)]
    pub no_faults: bool,
}

/// Arguments of `thplab trace stats`.
#[derive(Args, Debug)]
pub struct TraceStatsArgs {
    /// A file written by `thplab record` (`-`: standard input).
    pub file: PathBuf,
    /// Print one JSON object (schema `thplab-trace-stats/1`, docs/results-schema.md).
    #[arg(long)]
    pub json: bool,
}

/// `thplab record -o FILE -- CMD [ARGS...]`.
pub fn cmd_record(args: RecordArgs) -> Result<u8> {
    if crate::input::is_stdin(&args.output) {
        bail!("-o -: the recorded program writes to standard output too; give a file (a recording can then be read back from standard input: thplab sim - < FILE)");
    }
    if args.accesses && record::accesses::valgrind_path().is_none() {
        bail!("--accesses runs the program under valgrind (lackey), which is not installed here (no valgrind in PATH): install it (apt-get install valgrind) or record without --accesses");
    }
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
    let opts = record::RecordOptions {
        buffer_kib: args.buffer_kib,
        kernel_faults: !args.no_kernel_faults,
        exec_snapshot: !args.no_exec_snapshot,
        thp_disable: true,
        paths: !args.no_paths,
    };
    let rec = match record::record(&args.command, &opts) {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_file(&args.output);
            if args.accesses {
                let _ = std::fs::remove_file(&companion);
            }
            return match e {
                record::RecordError::Unavailable(why) => {
                    match unprivileged() {
                        Some(who) => eprintln!(
                            "thplab record: recording needs root or CAP_SYS_ADMIN ({who}): it reads the tracepoints' formats from tracefs \
                             (mounting it in a private namespace where it is not mounted) and opens perf events on them; \
                             run it as root (sudo thplab record ...). What failed: {why}"
                        ),
                        None => eprintln!("thplab record: recording is not available here: {why}"),
                    }
                    Ok(crate::exit::LIVE_UNAVAILABLE)
                }
                record::RecordError::Exec { program, reason, not_found } => {
                    eprintln!("thplab record: {program}: {reason}");
                    Ok(if not_found { 127 } else { 126 })
                }
                other => Err(other.into()),
            };
        }
    };
    let mut rec = rec;
    if args.timed > 0 {
        if !args.quiet {
            eprintln!("thplab record: timing {} untraced run(s) of the program", args.timed);
        }
        rec.header.untraced_wall_ns = crate::live_cmds::time_untraced(&args.command, args.timed, false, !args.quiet)?.0;
    }
    rec.write_to(BufWriter::new(file)).with_context(|| format!("writing {}", args.output.display()))?;
    let accesses = match access_file {
        Some(f) => {
            if !args.quiet {
                eprintln!("thplab record: running the program under valgrind lackey for its accesses");
            }
            let crc = trace_crc(&args.output)?;
            let native_ns = record::accesses::native_ns(&args.command, &rec);
            match record::accesses::record_accesses(&args.command, &rec, crc, native_ns, BufWriter::new(f)) {
                Ok(s) => Some(s),
                Err(e) => {
                    let _ = std::fs::remove_file(&companion);
                    return Err(anyhow::Error::from(e).context(format!("--accesses: {} not written", companion.display())));
                }
            }
        }
        None => None,
    };
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
    if !args.quiet {
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
    if let Some(s) = &accesses {
        let t = &s.totals;
        if !args.quiet {
            eprintln!(
                "thplab record: accesses: {} s under valgrind vs {} s native ({:.0}x); {} data accesses ({} writes) in {} runs ({:.1} accesses/run), {} bytes written to {}; {} of {} valgrind memory calls matched",
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
            );
        }
        for w in s.warnings() {
            eprintln!("thplab record: warning: --accesses: {w}");
        }
    }
    Ok(h.exit_status.min(255) as u8)
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

/// `thplab trace show|stats`.
pub fn cmd_trace(args: TraceArgs) -> Result<u8> {
    match args.cmd {
        TraceCmd::Show(a) => cmd_trace_show(a),
        TraceCmd::Stats(a) => cmd_trace_stats(a),
    }
}

/// `thplab trace show FILE`.
pub fn cmd_trace_show(args: TraceShowArgs) -> Result<u8> {
    let name = crate::input::display(&args.file);
    let mut r = crate::input::open_trace(&args.file)?;
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
                return Err(crate::input::damaged(&name, e, &r));
            }
        };
        pids.insert(e.pid);
        if args.limit.is_some_and(|l| shown >= l) {
            break;
        }
        if args.pid.is_some_and(|p| p != e.pid) || (args.no_faults && matches!(e.body, trace::EventBody::Fault { .. })) {
            continue;
        }
        writeln!(out, "{}", trace::text::event_line(&e))?;
        shown += 1;
    }
    out.flush()?;
    if h.lost_events > 0 {
        eprintln!("thplab trace: warning: {} events were lost while recording {name}", h.lost_events);
    }
    if let Some(p) = args.pid {
        if !pids.contains(&p) && args.limit.is_none_or(|l| shown < l) {
            let list: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
            bail!("--pid {p}: no process {p} in {name}; its processes are {}", list.join(", "));
        }
    }
    Ok(crate::exit::OK)
}

/// `thplab trace stats FILE`.
pub fn cmd_trace_stats(args: TraceStatsArgs) -> Result<u8> {
    let name = crate::input::display(&args.file);
    let mut r = crate::input::open_trace(&args.file)?;
    let mut b = trace::stats::StatsBuilder::new(r.header());
    while let Some(e) = r.next_event().map_err(|e| crate::input::damaged(&name, e, &r))? {
        b.add(&e);
    }
    let s = b.finish();
    let out = std::io::stdout();
    let mut out = out.lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &s)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", s.to_text())?;
    }
    if s.lost_events > 0 {
        eprintln!("thplab trace: warning: {} events were lost while recording {name}", s.lost_events);
    }
    Ok(crate::exit::OK)
}
