//! A summary of a trace (`thplab trace stats`): records per kind, faults by kind, per process
//! and thread, fault address ranges, duration, lost events.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write;

use serde::Serialize;

use crate::event::{EventBody, Header};
use crate::Event;

/// The summary; serialised as the `--json` output (schema `thplab-trace-stats/1`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct TraceStats {
    pub schema: &'static str,
    pub program: String,
    pub argv: Vec<String>,
    pub kernel_release: String,
    pub duration_ns: u64,
    pub exit_status: u32,
    pub records: u64,
    pub lost_events: u64,
    /// Record kind name → records.
    pub kinds: BTreeMap<String, u64>,
    pub faults: FaultStats,
    /// System calls that returned an error, by name.
    pub syscall_errors: BTreeMap<String, u64>,
    /// System calls still in progress when the recording ended (exit_group, a killed thread).
    pub syscalls_unfinished: u64,
    pub processes: Vec<ProcessStats>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct FaultStats {
    pub total: u64,
    pub read: u64,
    pub write: u64,
    /// Protection faults on present pages (copy-on-write, write to a read-only PTE).
    pub present: u64,
    /// Faults the kernel took on user addresses (copy_to_user and friends).
    pub kernel: u64,
    pub exec: u64,
    /// Distinct (process, page) pairs faulted.
    pub distinct_pages: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ProcessStats {
    pub pid: u32,
    pub comm: String,
    pub faults: u64,
    pub distinct_pages: u64,
    /// Lowest and highest faulting address.
    pub fault_lowest: Option<u64>,
    pub fault_highest: Option<u64>,
    pub syscalls: u64,
    /// Bytes mapped by successful mmap calls.
    pub mmap_bytes: u64,
    pub threads: Vec<ThreadStats>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ThreadStats {
    pub tid: u32,
    pub faults: u64,
    pub syscalls: u64,
    pub first_ns: u64,
    pub last_ns: u64,
}

/// A process being summed up: its stats, its threads, the pages it faulted.
type ProcAcc = (ProcessStats, BTreeMap<u32, ThreadStats>, HashSet<u64>);

/// Accumulates [`TraceStats`] one event at a time (no need to hold the trace in memory).
#[derive(Default)]
pub struct StatsBuilder {
    s: TraceStats,
    pages: HashSet<(u32, u64)>,
    procs: BTreeMap<u32, ProcAcc>,
}

impl StatsBuilder {
    pub fn new(h: &Header) -> Self {
        let s = TraceStats {
            schema: "thplab-trace-stats/1",
            program: String::from_utf8_lossy(&h.program).into_owned(),
            argv: h
                .argv
                .iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect(),
            kernel_release: h.kernel_release.clone(),
            duration_ns: h.duration_ns,
            exit_status: h.exit_status,
            lost_events: h.lost_events,
            ..Default::default()
        };
        StatsBuilder {
            s,
            ..Default::default()
        }
    }

    pub fn add(&mut self, e: &Event) {
        let s = &mut self.s;
        s.records += 1;
        *s.kinds
            .entry(
                crate::kind_name(e.body.kind_code())
                    .unwrap_or("?")
                    .to_string(),
            )
            .or_default() += 1;
        let (p, threads, pages) = self.procs.entry(e.pid).or_insert_with(|| {
            (
                ProcessStats {
                    pid: e.pid,
                    ..Default::default()
                },
                BTreeMap::new(),
                HashSet::new(),
            )
        });
        let t = threads.entry(e.tid).or_insert_with(|| ThreadStats {
            tid: e.tid,
            first_ns: e.time_ns,
            ..Default::default()
        });
        t.last_ns = e.time_ns;
        match &e.body {
            EventBody::Fault { addr, error_code } => {
                let f = &mut s.faults;
                f.total += 1;
                if error_code & 2 != 0 {
                    f.write += 1;
                } else {
                    f.read += 1;
                }
                f.present += error_code & 1;
                f.exec += (error_code >> 4) & 1;
                f.kernel += (error_code & 4 == 0) as u64;
                p.faults += 1;
                t.faults += 1;
                p.fault_lowest = Some(p.fault_lowest.map_or(*addr, |v| v.min(*addr)));
                p.fault_highest = Some(p.fault_highest.map_or(*addr, |v| v.max(*addr)));
                pages.insert(addr >> 12);
                self.pages.insert((e.pid, addr >> 12));
            }
            EventBody::Syscall(sc) => {
                p.syscalls += 1;
                t.syscalls += 1;
                match sc.ret {
                    None => s.syscalls_unfinished += 1,
                    Some(r) if (-4095..0).contains(&r) => {
                        *s.syscall_errors
                            .entry(sc.kind.name().to_string())
                            .or_default() += 1
                    }
                    Some(_) if sc.kind == crate::SyscallKind::Mmap => p.mmap_bytes += sc.args[1],
                    Some(_) => {}
                }
            }
            EventBody::Comm { comm, .. } if e.pid == e.tid || p.comm.is_empty() => {
                p.comm = String::from_utf8_lossy(comm).into_owned()
            }
            _ => {}
        }
    }

    pub fn finish(mut self) -> TraceStats {
        self.s.faults.distinct_pages = self.pages.len() as u64;
        for (_, (mut p, threads, pages)) in self.procs {
            p.distinct_pages = pages.len() as u64;
            p.threads = threads.into_values().collect();
            self.s.processes.push(p);
        }
        self.s
    }
}

fn secs(ns: u64) -> String {
    format!("{}.{:06}", ns / 1_000_000_000, (ns % 1_000_000_000) / 1000)
}

impl TraceStats {
    /// The summary as text, one fact per line.
    pub fn to_text(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "program      {}", crate::text::command_line(&self.argv));
        let _ = writeln!(o, "kernel       {}", self.kernel_release);
        let _ = writeln!(o, "duration     {} s", secs(self.duration_ns));
        let _ = writeln!(o, "exit status  {}", self.exit_status);
        let _ = writeln!(o, "records      {}", self.records);
        if self.lost_events > 0 {
            let _ = writeln!(
                o,
                "LOST EVENTS  {} (the recording is incomplete)",
                self.lost_events
            );
        } else {
            let _ = writeln!(o, "lost events  0");
        }
        let f = &self.faults;
        let _ = writeln!(
            o,
            "faults       {} (read {}, write {}; present {}, kernel-mode {}, exec {}); {} distinct pages",
            f.total, f.read, f.write, f.present, f.kernel, f.exec, f.distinct_pages
        );
        let _ = writeln!(o, "\nrecords by kind:");
        for (k, n) in &self.kinds {
            let _ = writeln!(o, "  {k:<16} {n:>12}");
        }
        if !self.syscall_errors.is_empty() {
            let _ = writeln!(o, "\nsystem calls that failed:");
            for (k, n) in &self.syscall_errors {
                let _ = writeln!(o, "  {k:<16} {n:>12}");
            }
        }
        if self.syscalls_unfinished > 0 {
            let _ = writeln!(
                o,
                "\nsystem calls unfinished at the end: {}",
                self.syscalls_unfinished
            );
        }
        let _ = writeln!(o, "\nprocesses:");
        for p in &self.processes {
            let range = match (p.fault_lowest, p.fault_highest) {
                (Some(l), Some(h)) => format!("{l:#x}..{h:#x}"),
                _ => "-".into(),
            };
            let _ = writeln!(
                o,
                "  pid {} {:?}: {} faults on {} pages in {range}\n    {} syscalls, {} bytes mmapped, {} threads",
                p.pid,
                p.comm,
                p.faults,
                p.distinct_pages,
                p.syscalls,
                p.mmap_bytes,
                p.threads.len()
            );
            for t in &p.threads {
                let _ = writeln!(
                    o,
                    "    tid {}: {} faults, {} syscalls, {}..{} s",
                    t.tid,
                    t.faults,
                    t.syscalls,
                    secs(t.first_ns),
                    secs(t.last_ns)
                );
            }
        }
        o
    }
}
