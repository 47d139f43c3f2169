//! `thplab khugepaged`: what khugepaged does on this machine, per process, from its
//! tracepoints (include/trace/events/huge_memory.h: mm_khugepaged_scan_pmd,
//! mm_collapse_huge_page, mm_collapse_huge_page_isolate, mm_collapse_huge_page_swapin,
//! mm_khugepaged_scan_file, mm_khugepaged_collapse_file), with the daemon's CPU time and the
//! counters of /sys/kernel/mm/transparent_hugepage/khugepaged and /proc/vmstat.
//!
//! The events go to a tracefs instance of our own (instances/thplab-khugepaged-PID), so the
//! global trace buffer and whatever else traces are untouched; the instance is removed on every
//! exit path ([`Tracer`]'s Drop, and SIGINT/SIGTERM stop the loop first). Where tracefs is not
//! mounted, it is mounted in a private mount namespace of this process (the machine's mount
//! table does not change).
//!
//! Which process an event belongs to: the tracepoints name the mm (`mm=%p`, hashed, stable for
//! a boot) and run in khugepaged's context. The mm of each process is learnt the same way the
//! kernel would print it: with mmap_lock_start_locking (include/trace/events/mmap_lock.h)
//! enabled for our own pid only, reading 8 bytes of /proc/PID/pagemap takes PID's mmap lock
//! (fs/proc/task_mmu.c: pagemap_read), and the event that follows a trace_marker naming PID
//! gives its mm. Processes that start later are learnt at the next refresh.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::{io_err, LiveError, Result};

/// khugepaged's pid, runqueue wait and CPU time are read from its /proc files
/// ([`crate::procfs`]), here at their old paths.
pub use crate::procfs::{cpu_ms, khugepaged_pid, runqueue_wait, wait_between};

/// The huge_memory events traced.
pub const EVENTS: [&str; 6] = [
    "mm_khugepaged_scan_pmd",
    "mm_collapse_huge_page",
    "mm_collapse_huge_page_isolate",
    "mm_collapse_huge_page_swapin",
    "mm_khugepaged_scan_file",
    "mm_khugepaged_collapse_file",
];

/// The strings the tracepoints print for `enum scan_result` (huge_memory.h: SCAN_STATUS), with
/// the kernel's enum names, in the enum's order.
pub const SCAN_STATUS: [(&str, &str); 31] = [
    ("failed", "SCAN_FAIL"),
    ("succeeded", "SCAN_SUCCEED"),
    ("pmd_null", "SCAN_PMD_NULL"),
    ("pmd_none", "SCAN_PMD_NONE"),
    ("page_pmd_mapped", "SCAN_PMD_MAPPED"),
    ("exceed_none_pte", "SCAN_EXCEED_NONE_PTE"),
    ("exceed_swap_pte", "SCAN_EXCEED_SWAP_PTE"),
    ("exceed_shared_pte", "SCAN_EXCEED_SHARED_PTE"),
    ("pte_non_present", "SCAN_PTE_NON_PRESENT"),
    ("pte_uffd_wp", "SCAN_PTE_UFFD_WP"),
    ("pte_mapped_hugepage", "SCAN_PTE_MAPPED_HUGEPAGE"),
    ("lack_referenced_page", "SCAN_LACK_REFERENCED_PAGE"),
    ("page_null", "SCAN_PAGE_NULL"),
    ("scan_aborted", "SCAN_SCAN_ABORT"),
    ("not_suitable_page_count", "SCAN_PAGE_COUNT"),
    ("page_not_in_lru", "SCAN_PAGE_LRU"),
    ("page_locked", "SCAN_PAGE_LOCK"),
    ("page_not_anon", "SCAN_PAGE_ANON"),
    ("page_compound", "SCAN_PAGE_COMPOUND"),
    ("no_process_for_page", "SCAN_ANY_PROCESS"),
    ("vma_null", "SCAN_VMA_NULL"),
    ("vma_check_failed", "SCAN_VMA_CHECK"),
    ("not_suitable_address_range", "SCAN_ADDRESS_RANGE"),
    ("could_not_delete_page_from_lru", "SCAN_DEL_PAGE_LRU"),
    ("alloc_huge_page_failed", "SCAN_ALLOC_HUGE_PAGE_FAIL"),
    ("ccgroup_charge_failed", "SCAN_CGROUP_CHARGE_FAIL"),
    ("truncated", "SCAN_TRUNCATED"),
    ("page_has_private", "SCAN_PAGE_HAS_PRIVATE"),
    ("store_failed", "SCAN_STORE_FAILED"),
    ("copy_poisoned_page", "SCAN_COPY_MC"),
    ("page_filled", "SCAN_PAGE_FILLED"),
];

/// The kernel's enum name of a printed status (`exceed_none_pte` → `SCAN_EXCEED_NONE_PTE`);
/// an unknown string (a newer kernel) is kept as printed.
pub fn scan_result_name(printed: &str) -> String {
    SCAN_STATUS.iter().find(|(p, _)| *p == printed).map(|(_, n)| n.to_string()).unwrap_or_else(|| printed.to_string())
}

/// One line of trace_pipe, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceLine {
    pub pid: i32,
    /// Seconds since boot (trace_clock local), as printed.
    pub ts: String,
    pub event: String,
    pub fields: BTreeMap<String, String>,
    /// The text of a trace_marker line.
    pub marker: Option<String>,
}

/// Parse a trace_pipe line: `COMM-PID [CPU] FLAGS TS: EVENT: k=v, k=v` (COMM may hold `-` and
/// spaces; the pid is the number before the last `-` of the task field).
pub fn parse_line(line: &str) -> Option<TraceLine> {
    let cpu_at = line.find(" [")?;
    let task = line[..cpu_at].trim();
    let pid: i32 = task.rsplit('-').next()?.parse().ok()?;
    let rest = &line[cpu_at + 2..];
    let rest = &rest[rest.find(']')? + 1..];
    // FLAGS TS: EVENT: ...
    let colon = rest.find(": ")?;
    let ts = rest[..colon].split_whitespace().last()?.to_string();
    let rest = &rest[colon + 2..];
    let (event, body) = match rest.find(": ") {
        Some(i) => (&rest[..i], &rest[i + 2..]),
        None => (rest.trim_end_matches(':'), ""),
    };
    let mut fields = BTreeMap::new();
    let mut marker = None;
    if event == "tracing_mark_write" {
        marker = Some(body.trim().to_string());
    } else {
        // `k=v, k=v` (huge_memory) or `k=v k=v` (mmap_lock).
        for part in body.split([',', ' ']) {
            if let Some((k, v)) = part.trim().split_once('=') {
                fields.insert(k.to_string(), v.to_string());
            }
        }
    }
    Some(TraceLine { pid, ts, event: event.to_string(), fields, marker })
}

/// What khugepaged did to one mm during the interval.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct MmActivity {
    /// The process, when its mm was learnt (see the module header); None: a process that
    /// exited before, or a kernel mm.
    pub pid: Option<i32>,
    pub comm: Option<String>,
    /// The hashed mm pointer, as the tracepoints print it.
    pub mm: String,
    /// PMD ranges of anonymous memory scanned (mm_khugepaged_scan_pmd).
    pub pmd_scans: u64,
    /// File or shmem ranges scanned (mm_khugepaged_scan_file).
    pub file_scans: u64,
    /// Collapses into a PMD THP that succeeded (mm_collapse_huge_page, mm_khugepaged_collapse_file).
    pub collapses: u64,
    /// Collapses attempted that failed, by `enum scan_result` name.
    pub collapse_failures: BTreeMap<String, u64>,
    /// Every scan's result, by `enum scan_result` name (SCAN_SUCCEED: a range found collapsible).
    pub scan_results: BTreeMap<String, u64>,
    /// Pages swapped in for a collapse (mm_collapse_huge_page_swapin).
    pub swapins: u64,
}

/// What khugepaged did during one interval.
#[derive(Clone, Debug, Default, Serialize)]
pub struct KhugepagedReport {
    pub interval_s: f64,
    /// The daemon's pid (the kthread named khugepaged), if found.
    pub khugepaged_pid: Option<i32>,
    /// CPU time the daemon used (utime + stime of its /proc/PID/stat), in milliseconds.
    pub cpu_ms: Option<f64>,
    /// Time the daemon waited on a runqueue, in milliseconds ([`runqueue_wait`]): at nice 19 it
    /// yields to everything else, and a busy machine delays its wake-ups by that much.
    pub runqueue_wait_ms: Option<f64>,
    /// Deltas of khugepaged/pages_collapsed and full_scans, and of /proc/vmstat's
    /// thp_collapse_alloc, thp_collapse_alloc_failed.
    pub counters: BTreeMap<String, i64>,
    /// Events read, by name.
    pub events: BTreeMap<String, u64>,
    /// Isolation results (mm_collapse_huge_page_isolate names no mm), by `enum scan_result` name.
    pub isolate_results: BTreeMap<String, u64>,
    /// Events the trace buffer dropped (trace_pipe's `LOST n EVENTS`).
    pub lost_events: u64,
    /// One entry per mm khugepaged touched, busiest first.
    pub processes: Vec<MmActivity>,
}

impl KhugepagedReport {
    /// Sum over processes of `f`.
    pub fn total(&self, f: impl Fn(&MmActivity) -> u64) -> u64 {
        self.processes.iter().map(f).sum()
    }
}

/// Folds parsed lines into a report: mm → activity, and the markers that learn mms.
#[derive(Default)]
pub struct Accumulator {
    by_mm: HashMap<String, MmActivity>,
    /// mm → pid learnt from our own mmap_lock events after a marker.
    pub mm_pid: HashMap<String, i32>,
    /// The pid whose pagemap we read, between `thplab-mm pid=N` and `thplab-mm end` markers.
    probing: Option<i32>,
    /// The thread that probes (trace events name threads).
    pub own_pid: i32,
    events: BTreeMap<String, u64>,
    isolate: BTreeMap<String, u64>,
    lost: u64,
}

impl Accumulator {
    pub fn new(own_pid: i32) -> Self {
        Accumulator { own_pid, ..Default::default() }
    }

    /// One line of trace_pipe.
    pub fn line(&mut self, text: &str) {
        if let Some(n) = text.split("[LOST ").nth(1).and_then(|s| s.split_whitespace().next()).and_then(|n| n.parse::<u64>().ok()) {
            self.lost += n;
            return;
        }
        let Some(l) = parse_line(text) else { return };
        if let Some(m) = &l.marker {
            if l.pid == self.own_pid {
                self.probing = m.strip_prefix("thplab-mm pid=").and_then(|p| p.trim().parse().ok());
            }
            return;
        }
        if l.event == "mmap_lock_start_locking" {
            if let (true, Some(pid), Some(mm)) = (l.pid == self.own_pid, self.probing, l.fields.get("mm")) {
                self.mm_pid.entry(mm.clone()).or_insert(pid);
            }
            return;
        }
        *self.events.entry(l.event.clone()).or_default() += 1;
        let status = |k: &str| l.fields.get(k).map(|s| scan_result_name(s));
        if l.event == "mm_collapse_huge_page_isolate" {
            if let Some(s) = status("status") {
                *self.isolate.entry(s).or_default() += 1;
            }
            return;
        }
        let Some(mm) = l.fields.get("mm") else { return };
        let a = self.by_mm.entry(mm.clone()).or_insert_with(|| MmActivity { mm: mm.clone(), ..Default::default() });
        match l.event.as_str() {
            "mm_khugepaged_scan_pmd" => {
                a.pmd_scans += 1;
                if let Some(s) = status("status") {
                    *a.scan_results.entry(s).or_default() += 1;
                }
            }
            "mm_khugepaged_scan_file" => {
                a.file_scans += 1;
                if let Some(s) = status("result") {
                    *a.scan_results.entry(s).or_default() += 1;
                }
            }
            "mm_collapse_huge_page" | "mm_khugepaged_collapse_file" => {
                let s = status(if l.event == "mm_collapse_huge_page" { "status" } else { "result" }).unwrap_or_default();
                if s == "SCAN_SUCCEED" {
                    a.collapses += 1;
                } else {
                    *a.collapse_failures.entry(s).or_default() += 1;
                }
            }
            "mm_collapse_huge_page_swapin" => {
                a.swapins += l.fields.get("swapped_in").and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            }
            _ => {}
        }
    }

    /// mms seen in khugepaged events whose process is not known yet.
    pub fn unknown_mms(&self) -> usize {
        self.by_mm.keys().filter(|m| !self.mm_pid.contains_key(*m)).count()
    }

    /// The report, with pids and comms filled in; `comm` names a pid.
    pub fn report(&self, interval: Duration, comm: impl Fn(i32) -> Option<String>) -> KhugepagedReport {
        let mut processes: Vec<MmActivity> = self
            .by_mm
            .values()
            .map(|a| {
                let mut a = a.clone();
                a.pid = self.mm_pid.get(&a.mm).copied();
                a.comm = a.pid.and_then(&comm);
                a
            })
            .collect();
        processes.sort_by(|a, b| (b.pmd_scans + b.file_scans, b.collapses).cmp(&(a.pmd_scans + a.file_scans, a.collapses)).then(a.mm.cmp(&b.mm)));
        KhugepagedReport {
            interval_s: interval.as_secs_f64(),
            events: self.events.clone(),
            isolate_results: self.isolate.clone(),
            lost_events: self.lost,
            processes,
            ..Default::default()
        }
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// SIGINT and SIGTERM end the tracing loop (the instance is then removed) instead of killing
/// the process with the instance in place.
pub fn stop_on_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(sig, on_stop as *const () as libc::sighandler_t);
        }
    }
}

/// Whether a signal asked the loop to stop.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Where tracefs is mounted, mounting it in a private mount namespace when it is not.
pub fn tracefs_dir() -> Result<PathBuf> {
    if let Some(d) = mounted_tracefs() {
        return Ok(d);
    }
    // SAFETY: unshare and mount take valid pointers and change only this process's namespace.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(LiveError::NotAvailable(format!(
                "tracefs is not mounted and a private mount namespace could not be made to mount it: {}",
                std::io::Error::last_os_error()
            )));
        }
        let root = c"/";
        if libc::mount(std::ptr::null(), root.as_ptr(), std::ptr::null(), libc::MS_REC | libc::MS_PRIVATE, std::ptr::null()) != 0 {
            return Err(LiveError::NotAvailable(format!("cannot make the mount namespace private: {}", std::io::Error::last_os_error())));
        }
        let target = c"/sys/kernel/tracing";
        let fs = c"tracefs";
        if libc::mount(fs.as_ptr(), target.as_ptr(), fs.as_ptr(), 0, std::ptr::null()) != 0 {
            return Err(LiveError::NotAvailable(format!("cannot mount tracefs on /sys/kernel/tracing: {}", std::io::Error::last_os_error())));
        }
    }
    Ok(PathBuf::from("/sys/kernel/tracing"))
}

fn mounted_tracefs() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        if right.split_whitespace().next() != Some("tracefs") {
            return None;
        }
        left.split_whitespace().nth(4).map(PathBuf::from)
    })
}

/// A tracefs instance with the khugepaged events (and our own mmap_lock events) enabled;
/// disabled and removed on drop.
pub struct Tracer {
    dir: PathBuf,
    pipe: Option<std::fs::File>,
    buf: Vec<u8>,
    pub acc: Accumulator,
}

impl Tracer {
    /// Make the instance under `tracefs` and start tracing.
    pub fn start(tracefs: &Path) -> Result<Tracer> {
        let own = std::process::id() as i32;
        let dir = tracefs.join("instances").join(format!("thplab-khugepaged-{own}"));
        if !tracefs.join("events/huge_memory/mm_khugepaged_scan_pmd").is_dir() {
            return Err(LiveError::NotAvailable(format!("{} has no huge_memory tracepoints (CONFIG_TRANSPARENT_HUGEPAGE tracing)", tracefs.display())));
        }
        std::fs::create_dir(&dir).map_err(|e| io_err("cannot create a tracefs instance", &dir, e))?;
        let mut t = Tracer { dir, pipe: None, buf: Vec::new(), acc: Accumulator::new(own) };
        t.write("buffer_size_kb", "2048")?;
        let lock = "events/mmap_lock/mmap_lock_start_locking";
        if t.dir.join(lock).is_dir() {
            t.write(&format!("{lock}/filter"), &format!("common_pid == {own}"))?;
            t.write(&format!("{lock}/enable"), "1")?;
        }
        for e in EVENTS {
            let p = format!("events/huge_memory/{e}/enable");
            if t.dir.join(&p).exists() {
                t.write(&p, "1")?;
            }
        }
        let pipe_path = t.dir.join("trace_pipe");
        let pipe = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&pipe_path)
            .map_err(|e| io_err("cannot open trace_pipe", &pipe_path, e))?;
        t.pipe = Some(pipe);
        Ok(t)
    }

    fn write(&self, rel: &str, value: &str) -> Result<()> {
        let p = self.dir.join(rel);
        std::fs::write(&p, value).map_err(|e| io_err("cannot write tracefs file", &p, e))
    }

    /// Learn the mm of every process (or of `pids`): a marker naming the pid, then 8 bytes of
    /// its pagemap (our mmap_lock_start_locking event then names its mm).
    pub fn learn_mms(&mut self, pids: Option<&[i32]>) {
        let all: Vec<i32> = match pids {
            Some(p) => p.to_vec(),
            None => crate::procfs::list_pids(),
        };
        // The events name the thread (common_pid is the tid): filter on the calling thread.
        self.drain();
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        if self.acc.own_pid != tid {
            let lock = "events/mmap_lock/mmap_lock_start_locking";
            if self.write(&format!("{lock}/filter"), &format!("common_pid == {tid}")).is_err() {
                return;
            }
            self.acc.own_pid = tid;
        }
        let own = std::process::id() as i32;
        for pid in all {
            if pid == own || self.acc.mm_pid.values().any(|&p| p == pid) {
                continue;
            }
            let Ok(mut f) = std::fs::File::open(format!("/proc/{pid}/pagemap")) else { continue };
            if self.write("trace_marker", &format!("thplab-mm pid={pid}")).is_err() {
                return;
            }
            let mut b = [0u8; 8];
            let _ = f.read(&mut b);
            let _ = self.write("trace_marker", "thplab-mm end");
        }
    }

    /// Read what trace_pipe holds now (without blocking) into the accumulator.
    pub fn drain(&mut self) {
        let Some(pipe) = self.pipe.as_mut() else { return };
        let mut chunk = [0u8; 65536];
        loop {
            match pipe.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(_) => break,
            }
        }
        while let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=nl).collect();
            self.acc.line(String::from_utf8_lossy(&line).trim_end());
        }
    }

    /// Trace until `deadline` (or a signal), reading every `tick`; mms are learnt at the
    /// start and whenever an unknown mm appears.
    pub fn run_until(&mut self, deadline: Instant, pids: Option<&[i32]>) {
        self.learn_mms(pids);
        let tick = Duration::from_millis(100);
        loop {
            self.drain();
            if self.acc.unknown_mms() > 0 && pids.is_none() {
                self.learn_mms(None);
                self.drain();
            }
            let now = Instant::now();
            if now >= deadline || stop_requested() {
                break;
            }
            std::thread::sleep(tick.min(deadline - now));
        }
        self.drain();
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        for e in EVENTS {
            let _ = self.write(&format!("events/huge_memory/{e}/enable"), "0");
        }
        let _ = self.write("events/mmap_lock/mmap_lock_start_locking/enable", "0");
        self.pipe = None;
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The counters whose deltas the report gives: khugepaged/pages_collapsed and full_scans, and
/// /proc/vmstat's thp_collapse_alloc and thp_collapse_alloc_failed.
pub fn counters(paths: &crate::sysfs::Paths) -> BTreeMap<String, i64> {
    let mut m = BTreeMap::new();
    if let Ok(snap) = crate::procfs::CounterSnapshot::read(&paths.sysfs) {
        for (k, v) in snap.khugepaged {
            m.insert(format!("khugepaged/{k}"), v);
        }
        for k in ["thp_collapse_alloc", "thp_collapse_alloc_failed"] {
            if let Some(v) = snap.vmstat.get(k) {
                m.insert(k.to_string(), *v);
            }
        }
    }
    m
}

/// Trace khugepaged for `interval` (or until a signal) and report per process; `pids` limits
/// the processes whose mm is learnt (others appear as unknown mms).
pub fn trace_interval(tracer: &mut Tracer, interval: Duration, pids: Option<&[i32]>) -> KhugepagedReport {
    let paths = crate::sysfs::Paths::from_env();
    let kpid = khugepaged_pid();
    let cpu0 = kpid.and_then(cpu_ms);
    let wait0 = runqueue_wait();
    let c0 = counters(&paths);
    let t0 = Instant::now();
    let own = tracer.acc.own_pid;
    tracer.acc = Accumulator { mm_pid: std::mem::take(&mut tracer.acc.mm_pid), ..Accumulator::new(own) };
    tracer.run_until(t0 + interval, pids);
    let mut r = tracer.acc.report(t0.elapsed(), |p| Some(crate::procfs::comm(p)).filter(|c| !c.is_empty()));
    r.khugepaged_pid = kpid;
    r.cpu_ms = match (cpu0, kpid.and_then(cpu_ms)) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    r.runqueue_wait_ms = wait_between(wait0, runqueue_wait()).map(|ns| ns as f64 / 1e6);
    let c1 = counters(&paths);
    r.counters = c1.iter().map(|(k, v)| (k.clone(), v - c0.get(k).copied().unwrap_or(*v))).collect();
    if let Some(pids) = pids {
        r.processes.retain(|a| a.pid.is_some_and(|p| pids.contains(&p)));
    }
    r
}

impl std::fmt::Display for KhugepagedReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut cpu = self.cpu_ms.map(|c| format!("{c:.0} ms CPU")).unwrap_or_else(|| "CPU time unknown".into());
        if let Some(w) = self.runqueue_wait_ms {
            cpu += &format!(", {w:.0} ms waiting for one");
        }
        writeln!(
            f,
            "khugepaged{} over {:.1} s: {cpu}; {} PMD and {} file ranges scanned, {} collapsed",
            self.khugepaged_pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
            self.interval_s,
            self.total(|a| a.pmd_scans),
            self.total(|a| a.file_scans),
            self.total(|a| a.collapses),
        )?;
        let c: Vec<String> = self.counters.iter().map(|(k, v)| format!("{k} +{v}")).collect();
        writeln!(f, "counters: {}", c.join(", "))?;
        if self.lost_events > 0 {
            writeln!(f, "WARNING: the trace buffer dropped {} events; counts are low", self.lost_events)?;
        }
        if self.processes.is_empty() {
            writeln!(f, "no process was scanned (khugepaged sleeps khugepaged/scan_sleep_millisecs between passes)")?;
            return Ok(());
        }
        writeln!(f, "{:>8} {:<16} {:>9} {:>10} {:>9}  results", "pid", "comm", "pmd_scans", "file_scans", "collapses")?;
        for a in &self.processes {
            let mut results: Vec<String> = a.scan_results.iter().map(|(k, v)| format!("{k} {v}")).collect();
            results.extend(a.collapse_failures.iter().map(|(k, v)| format!("collapse {k} {v}")));
            writeln!(
                f,
                "{:>8} {:<16} {:>9} {:>10} {:>9}  {}",
                a.pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into()),
                a.comm.clone().unwrap_or_else(|| format!("mm {}", a.mm)),
                a.pmd_scans,
                a.file_scans,
                a.collapses,
                results.join(", ")
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_as_the_kernel_prints_them() {
        let l = parse_line("      khugepaged-52      [001] .....   812.123456: mm_khugepaged_scan_pmd: mm=00000000afdd96d4, scan_pfn=0x1234, referenced=3, none_or_zero=0, status=exceed_none_pte, unmapped=0").unwrap();
        assert_eq!(l.pid, 52);
        assert_eq!(l.ts, "812.123456");
        assert_eq!(l.event, "mm_khugepaged_scan_pmd");
        assert_eq!(l.fields["mm"], "00000000afdd96d4");
        assert_eq!(l.fields["status"], "exceed_none_pte");
        assert_eq!(l.fields["scan_pfn"], "0x1234");
        let m = parse_line("           <...>-14083   [000] ...1.   706.277644: tracing_mark_write: thplab-mm pid=14082").unwrap();
        assert_eq!((m.pid, m.marker.as_deref()), (14083, Some("thplab-mm pid=14082")));
        // A comm with a dash and a space.
        let k = parse_line("  kworker/u8:2-ev w-99 [000] ..... 1.0: mmap_lock_start_locking: mm=0000000082de39c1 memcg_id=3005 write=true").unwrap();
        assert_eq!((k.pid, k.fields["write"].as_str()), (99, "true"));
        assert!(parse_line("# tracer: nop").is_none());
    }

    #[test]
    fn events_fold_per_process_with_mms_learnt_from_markers() {
        let mut a = Accumulator::new(500);
        for l in [
            "thplab-500 [000] ...1. 1.0: tracing_mark_write: thplab-mm pid=77",
            "thplab-500 [000] ..... 1.1: mmap_lock_start_locking: mm=aa memcg_id=1 write=false",
            "thplab-500 [000] ...1. 1.2: tracing_mark_write: thplab-mm end",
            // Our own lock outside a probe is not attributed.
            "thplab-500 [000] ..... 1.3: mmap_lock_start_locking: mm=cc memcg_id=1 write=false",
            "khugepaged-52 [001] ..... 2.0: mm_khugepaged_scan_pmd: mm=aa, scan_pfn=0x10, referenced=512, none_or_zero=0, status=succeeded, unmapped=0",
            "khugepaged-52 [001] ..... 2.1: mm_collapse_huge_page_isolate: scan_pfn=0x10, none_or_zero=0, referenced=512, status=succeeded",
            "khugepaged-52 [001] ..... 2.2: mm_collapse_huge_page: mm=aa, isolated=1, status=succeeded",
            "khugepaged-52 [001] ..... 2.3: mm_khugepaged_scan_pmd: mm=aa, scan_pfn=0xffffffffffffffff, referenced=0, none_or_zero=1, status=exceed_none_pte, unmapped=0",
            "khugepaged-52 [001] ..... 2.4: mm_khugepaged_scan_pmd: mm=bb, scan_pfn=0x20, referenced=0, none_or_zero=0, status=lack_referenced_page, unmapped=0",
            "khugepaged-52 [001] ..... 2.5: mm_collapse_huge_page: mm=bb, isolated=0, status=alloc_huge_page_failed",
            "CPU:1 [LOST 7 EVENTS]",
        ] {
            a.line(l);
        }
        assert_eq!(a.unknown_mms(), 1, "bb was never probed");
        let r = a.report(Duration::from_secs(1), |p| (p == 77).then(|| "target".to_string()));
        assert_eq!(r.lost_events, 7);
        assert_eq!(r.isolate_results["SCAN_SUCCEED"], 1);
        assert_eq!(r.events["mm_khugepaged_scan_pmd"], 3);
        let aa = r.processes.iter().find(|p| p.mm == "aa").unwrap();
        assert_eq!((aa.pid, aa.comm.as_deref(), aa.pmd_scans, aa.collapses), (Some(77), Some("target"), 2, 1));
        assert_eq!(aa.scan_results["SCAN_SUCCEED"], 1);
        assert_eq!(aa.scan_results["SCAN_EXCEED_NONE_PTE"], 1);
        let bb = r.processes.iter().find(|p| p.mm == "bb").unwrap();
        assert_eq!(bb.pid, None);
        assert_eq!(bb.collapse_failures["SCAN_ALLOC_HUGE_PAGE_FAIL"], 1);
        assert_eq!(bb.scan_results["SCAN_LACK_REFERENCED_PAGE"], 1);
        assert_eq!(r.processes[0].mm, "aa", "busiest first");
        assert!(!r.processes.iter().any(|p| p.mm == "cc"));
    }

    #[test]
    fn every_printed_status_maps_to_a_distinct_kernel_name() {
        let names: std::collections::BTreeSet<_> = SCAN_STATUS.iter().map(|(_, n)| n).collect();
        assert_eq!(names.len(), SCAN_STATUS.len());
        assert_eq!(scan_result_name("page_pmd_mapped"), "SCAN_PMD_MAPPED");
        assert_eq!(scan_result_name("something_new"), "something_new");
    }
}
