//! `thplab agent`: a collapse agent that turns the hottest eligible 2 MiB ranges of selected
//! processes into PMD THPs with process_madvise(MADV_COLLAPSE) (mm/madvise.c:
//! SYSCALL_DEFINE5(process_madvise) → madvise_collapse in mm/khugepaged.c), only within explicit
//! budgets, with a dry run and a log of every action.
//!
//! Eligibility is MADV_COLLAPSE's (mm/khugepaged.c: madvise_collapse, which asks
//! thp_vma_allowable_orders with TVA_FORCED_COLLAPSE and ignores the sysfs `enabled` mode and
//! max_ptes_*): private anonymous memory, not VM_NOHUGEPAGE (`nh`), a PMD-aligned 2 MiB range
//! inside one VMA, not already PMD-mapped. It is charged with what it adds: the range's pages
//! that are not present are filled (zeroed) by the collapse.
//!
//! Hotness: this kernel kind has no idle page tracking (/sys/kernel/mm/page_idle), no soft-dirty
//! bits, and its DAMON is taken by the machine's own kdamond (a second one cannot be started
//! while it runs), so the agent samples accessed bits itself the way /proc offers them:
//! `/proc/PID/clear_refs` with 1 clears the young bits and PG_referenced of the process's pages
//! (fs/proc/task_mmu.c: clear_refs_write), and `Referenced:` of smaps counts the pages accessed
//! since. That is per VMA; within a VMA, ranges rank by their present pages. A dry run does not
//! clear the bits (it changes nothing in the target), so its Referenced counts accesses since
//! the last clear or since the pages were mapped.
//!
//! A crate of its own (a tool, not the harness): it only reads /proc to choose ranges
//! (crates/probe) and acts through process_madvise; it neither sets knobs nor runs workloads.
//!
//! - [`command`]: `thplab agent`'s entry point (checks, the log and the summary printed).

pub mod command;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use probe::procfs::{read_smaps, Vma};
use probe::{io_err, LiveError, Result};

const PMD: u64 = 2 << 20;
const PAGES: u64 = PMD / 4096;

/// What the agent may do.
#[derive(Clone, Debug)]
pub struct Budget {
    /// Collapses per second, sustained (a token bucket holding at most one second's worth).
    pub per_sec: f64,
    /// Collapses in all (None: until `duration` ends).
    pub total: Option<u64>,
    /// CPU time the agent may use, as a fraction of one CPU over its run (process_madvise does
    /// the collapse in the agent's context, so the copy and the allocation are charged here).
    pub cpu_fraction: f64,
    /// Memory the collapses may add (pages not present in a range are filled), in bytes.
    pub memory_bytes: u64,
    /// A collapse that takes longer than this stalls the target (it holds its mmap lock in
    /// write mode while it copies): the target is then backed off.
    pub max_stall: Duration,
    /// A range needs at least this many present pages (of 512) to be a candidate.
    pub min_present: u64,
}

impl Default for Budget {
    fn default() -> Self {
        Budget { per_sec: 1.0, total: None, cpu_fraction: 0.05, memory_bytes: 64 << 20, max_stall: Duration::from_millis(50), min_present: 256 }
    }
}

/// Which processes the agent may touch: an allowlist of pids and of command names (comm, as
/// /proc/PID/comm shows it); a process must be on it.
#[derive(Clone, Debug, Default)]
pub struct Allowlist {
    pub pids: Vec<i32>,
    pub names: Vec<String>,
}

impl Allowlist {
    /// The live processes it names, without the agent itself.
    pub fn resolve(&self) -> Vec<(i32, String)> {
        let own = std::process::id() as i32;
        let mut v = Vec::new();
        for pid in probe::procfs::list_pids() {
            if pid == own {
                continue;
            }
            let comm = probe::procfs::comm(pid);
            if comm.is_empty() {
                continue;
            }
            if self.pids.contains(&pid) || self.names.iter().any(|n| *n == comm) {
                v.push((pid, comm));
            }
        }
        v
    }
}

/// A 2 MiB range the agent could collapse, and why it ranks where it does.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Candidate {
    pub pid: i32,
    pub comm: String,
    /// Hex, without 0x, as smaps prints.
    pub start: String,
    pub end: String,
    /// Pages of the range present now (of 512).
    pub present_pages: u64,
    /// `Referenced:` of the VMA over its `Rss:` (accessed since the last clear).
    pub vma_referenced_fraction: f64,
    /// present_pages × vma_referenced_fraction: the rank.
    pub score: f64,
    /// Bytes the collapse would add (pages not present are filled).
    pub adds_bytes: u64,
}

/// One line of the agent's log.
#[derive(Clone, Debug, Serialize)]
pub struct Action {
    /// Seconds since the agent started.
    pub t: f64,
    /// `collapse`, `would_collapse`, `failed`, `backoff`, `skip`.
    pub action: String,
    pub pid: i32,
    pub comm: String,
    pub start: Option<String>,
    pub score: Option<f64>,
    pub present_pages: Option<u64>,
    pub adds_bytes: Option<u64>,
    /// How long process_madvise took, in microseconds.
    pub duration_us: Option<u64>,
    /// The errno name of a failed collapse.
    pub errno: Option<String>,
    /// Why (budgets, back-off, stall).
    pub reason: String,
}

/// What the run did, against its budgets.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub seconds: f64,
    pub collapses: u64,
    pub would_collapse: u64,
    pub failures: BTreeMap<String, u64>,
    pub memory_added_bytes: u64,
    pub cpu_ms: f64,
    pub budget_per_sec: f64,
    pub budget_total: Option<u64>,
    pub budget_cpu_fraction: f64,
    pub budget_memory_bytes: u64,
    /// Largest number of collapses started in any window of one second (what `per_sec`
    /// limits: a token is spent when a collapse starts).
    pub max_collapses_in_a_second: u64,
}

/// The PMD-aligned ranges of `v` that MADV_COLLAPSE could take: private anonymous memory, not
/// VM_NOHUGEPAGE, wholly inside the VMA.
pub fn collapsible_ranges(v: &Vma) -> Vec<(u64, u64)> {
    let anon = v.name.is_empty() || v.name == "[heap]" || v.name == "[stack]";
    if !anon || v.has_flag("nh") || v.has_flag("sh") || !v.perms.starts_with("rw") {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut a = v.start.next_multiple_of(PMD);
    while a + PMD <= v.end {
        out.push((a, a + PMD));
        a += PMD;
    }
    out
}

/// Present pages of `[start, end)` of `pid` (pagemap bit 63).
fn present_pages(pagemap: &mut std::fs::File, start: u64, end: u64) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let n = ((end - start) / 4096) as usize;
    let mut buf = vec![0u8; n * 8];
    pagemap.read_exact_at(&mut buf, (start / 4096) * 8)?;
    Ok(buf.chunks_exact(8).filter(|c| u64::from_le_bytes((*c).try_into().expect("8 bytes")) >> 63 == 1).count() as u64)
}

/// Whether `[start, end)` is mapped by a PMD now (the census of that range).
fn pmd_mapped(pid: i32, start: u64, end: u64, vmas: &[Vma]) -> bool {
    match probe::census::census_of_ranges(pid, &[(start, end)], vmas) {
        Ok(r) => r.total.sizes.values().any(|e| e.pmd_mapped > 0),
        Err(_) => false,
    }
}

/// The candidates of one process, best first.
pub fn candidates(pid: i32, comm: &str, min_present: u64) -> Result<Vec<Candidate>> {
    let vmas = read_smaps(pid)?;
    let path = format!("/proc/{pid}/pagemap");
    let mut pm = std::fs::File::open(&path).map_err(|e| io_err("cannot open", &path, e))?;
    let mut out = Vec::new();
    for v in &vmas {
        let ranges = collapsible_ranges(v);
        if ranges.is_empty() || v.rss_kb == 0 {
            continue;
        }
        let frac = (v.referenced_kb as f64 / v.rss_kb as f64).min(1.0);
        for (s, e) in ranges {
            let present = present_pages(&mut pm, s, e).map_err(|e| io_err("cannot read", &path, e))?;
            if present < min_present || pmd_mapped(pid, s, e, &vmas) {
                continue;
            }
            out.push(Candidate {
                pid,
                comm: comm.to_string(),
                start: format!("{s:x}"),
                end: format!("{e:x}"),
                present_pages: present,
                vma_referenced_fraction: frac,
                score: present as f64 * frac,
                adds_bytes: (PAGES - present) * 4096,
            });
        }
    }
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.start.cmp(&b.start)));
    Ok(out)
}

/// Clear the accessed bits of `pid` (so the next Referenced counts one interval).
fn clear_refs(pid: i32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "1");
}

/// process_madvise(pidfd, [start, start+2M), MADV_COLLAPSE): Ok or the errno.
pub fn collapse(pid: i32, start: u64) -> std::result::Result<(), i32> {
    // SAFETY: pidfd_open and process_madvise take plain integers and a valid iovec; the fd is
    // closed before return.
    unsafe {
        let fd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as i32;
        if fd < 0 {
            return Err(*libc::__errno_location());
        }
        let iov = libc::iovec { iov_base: start as *mut libc::c_void, iov_len: PMD as usize };
        let r = libc::syscall(libc::SYS_process_madvise, fd, &iov as *const libc::iovec, 1usize, linux_abi::mman::MADV_COLLAPSE, 0u32);
        let e = *libc::__errno_location();
        libc::close(fd);
        if r < 0 {
            Err(e)
        } else {
            Ok(())
        }
    }
}

fn errno_name(e: i32) -> String {
    match e {
        libc::EAGAIN => "EAGAIN",
        libc::EBUSY => "EBUSY",
        libc::ENOMEM => "ENOMEM",
        libc::EINVAL => "EINVAL",
        libc::EPERM => "EPERM",
        libc::ESRCH => "ESRCH",
        libc::ENOSYS => "ENOSYS",
        libc::EFAULT => "EFAULT",
        _ => return format!("errno {e}"),
    }
    .to_string()
}

/// This process's CPU time (user + system), in milliseconds.
pub fn own_cpu_ms() -> f64 {
    // SAFETY: getrusage writes into the struct we give it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The agent's loop: every `interval`, rank the candidates of every allowed process and
/// collapse the best while the budgets allow; `log` gets every action as it happens. Stops after
/// `duration`, when the total budget is spent, or when `stop()` says so; a dry run makes one
/// pass.
pub fn run(
    allow: &Allowlist,
    budget: &Budget,
    dry_run: bool,
    interval: Duration,
    duration: Duration,
    stop: impl Fn() -> bool,
    log: impl FnMut(&Action),
) -> Result<Summary> {
    if allow.pids.is_empty() && allow.names.is_empty() {
        return Err(LiveError::NotAvailable("the agent touches only processes on its allowlist: give --pid or --name".into()));
    }
    let mut a = Agent::new(budget, dry_run, log);
    let t0 = a.t0;
    while t0.elapsed() < duration && !stop() {
        let cycle_start = Instant::now();
        let all = a.rank(allow);
        if a.collapse_best(&all) {
            break;
        }
        if dry_run {
            // One pass: what it would do now, with nothing changed in the targets.
            break;
        }
        let spent = cycle_start.elapsed();
        let left = duration.saturating_sub(t0.elapsed());
        std::thread::sleep(interval.saturating_sub(spent).min(left));
    }
    Ok(a.finish())
}

/// One action of the log, at the time since `t0`.
fn action(t0: Instant, action: &str, c: Option<&Candidate>, pid: i32, comm: &str, reason: String) -> Action {
    Action {
        t: t0.elapsed().as_secs_f64(),
        action: action.into(),
        pid,
        comm: comm.into(),
        start: c.map(|c| c.start.clone()),
        score: c.map(|c| c.score),
        present_pages: c.map(|c| c.present_pages),
        adds_bytes: c.map(|c| c.adds_bytes),
        duration_us: None,
        errno: None,
        reason,
    }
}

/// The agent's state across cycles: budgets spent, back-offs, collapse times.
struct Agent<'b, L: FnMut(&Action)> {
    budget: &'b Budget,
    dry_run: bool,
    log: L,
    t0: Instant,
    cpu0: f64,
    s: Summary,
    /// Token bucket: at most one second's worth (and at least one token) saved up.
    cap: f64,
    tokens: f64,
    last_refill: Instant,
    backoff: BTreeMap<i32, (Instant, Duration)>,
    times: Vec<Instant>,
    /// When every collapse began (failed ones too): no more than the rate in any second.
    starts: Vec<Instant>,
}

impl<'b, L: FnMut(&Action)> Agent<'b, L> {
    fn new(budget: &'b Budget, dry_run: bool, log: L) -> Self {
        let t0 = Instant::now();
        let cpu0 = own_cpu_ms();
        let s = Summary {
            budget_per_sec: budget.per_sec,
            budget_total: budget.total,
            budget_cpu_fraction: budget.cpu_fraction,
            budget_memory_bytes: budget.memory_bytes,
            ..Default::default()
        };
        let cap = budget.per_sec.max(1.0);
        let tokens = budget.per_sec.min(cap);
        let last_refill = Instant::now();
        Agent { budget, dry_run, log, t0, cpu0, s, cap, tokens, last_refill, backoff: BTreeMap::new(), times: Vec::new(), starts: Vec::new() }
    }

    /// The candidates of every allowed process not backed off, best first; a real run clears
    /// each process's referenced bits (clear_refs) for the next cycle.
    fn rank(&mut self, allow: &Allowlist) -> Vec<Candidate> {
        let mut all = Vec::new();
        for (pid, comm) in allow.resolve() {
            if let Some((until, _)) = self.backoff.get(&pid) {
                if Instant::now() < *until {
                    continue;
                }
            }
            match candidates(pid, &comm, self.budget.min_present) {
                Ok(c) => all.extend(c),
                Err(e) => (self.log)(&action(self.t0, "skip", None, pid, &comm, format!("cannot read it: {e}"))),
            }
            if !self.dry_run {
                clear_refs(pid);
            }
        }
        all.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.pid.cmp(&b.pid)).then(a.start.cmp(&b.start)));
        all
    }

    /// Collapse (or, in a dry run, list) the candidates in order while the budgets allow;
    /// true when the total budget is spent.
    fn collapse_best(&mut self, all: &[Candidate]) -> bool {
        let budget = self.budget;
        for c in all {
            if budget.total.is_some_and(|t| self.s.collapses + self.s.would_collapse >= t) {
                return true;
            }
            if self.backoff.get(&c.pid).is_some_and(|(until, _)| Instant::now() < *until) {
                continue;
            }
            // The rate and CPU budgets pace a real run; a dry run lists every range it would
            // take, in order, within the other budgets (it spends neither: nothing is copied).
            if !self.dry_run && !self.paced(c) {
                break;
            }
            if self.s.memory_added_bytes + c.adds_bytes > budget.memory_bytes {
                let why = format!("memory budget: would add {} bytes, {} of {} used", c.adds_bytes, self.s.memory_added_bytes, budget.memory_bytes);
                (self.log)(&action(self.t0, "skip", Some(c), c.pid, &c.comm, why));
                continue;
            }
            self.tokens -= 1.0;
            let why = format!("score {:.0}: {} of 512 pages present, VMA referenced {:.0} %", c.score, c.present_pages, c.vma_referenced_fraction * 100.0);
            if self.dry_run {
                self.s.would_collapse += 1;
                self.s.memory_added_bytes += c.adds_bytes;
                (self.log)(&action(self.t0, "would_collapse", Some(c), c.pid, &c.comm, why));
                continue;
            }
            self.collapse_one(c, why);
        }
        false
    }

    /// Whether the rate (token bucket and starts in the last second) and CPU budgets allow a
    /// collapse now; a CPU budget overrun is logged.
    fn paced(&mut self, c: &Candidate) -> bool {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.last_refill).as_secs_f64() * self.budget.per_sec).min(self.cap);
        self.last_refill = now;
        // A full bucket refilling at the rate would allow a burst of `cap` followed by
        // more within the same second: count the starts of the last second as well.
        let in_last_second = self.starts.iter().filter(|s| now.duration_since(**s) < Duration::from_secs(1)).count();
        if self.tokens < 1.0 || (in_last_second + 1) as f64 > self.cap {
            return false;
        }
        let cpu_used = own_cpu_ms() - self.cpu0;
        let cpu_allowed = self.budget.cpu_fraction * self.t0.elapsed().as_secs_f64() * 1000.0 + 10.0;
        if cpu_used > cpu_allowed {
            (self.log)(&action(self.t0, "skip", Some(c), c.pid, &c.comm, format!("CPU budget: {cpu_used:.1} ms used of {cpu_allowed:.1} ms allowed so far")));
            return false;
        }
        true
    }

    /// MADV_COLLAPSE (process_madvise) of one candidate, logged; a stall over the limit or a
    /// failure backs the process off.
    fn collapse_one(&mut self, c: &Candidate, why: String) {
        let start = u64::from_str_radix(&c.start, 16).expect("hex");
        let t = Instant::now();
        self.starts.push(t);
        let r = collapse(c.pid, start);
        let took = t.elapsed();
        let mut a = action(self.t0, "collapse", Some(c), c.pid, &c.comm, why);
        a.duration_us = Some(took.as_micros() as u64);
        match r {
            Ok(()) => {
                self.s.collapses += 1;
                self.s.memory_added_bytes += c.adds_bytes;
                // The rate budget governs when collapses start (a token is spent then).
                self.times.push(t);
                (self.log)(&a);
                if took > self.budget.max_stall {
                    let d = next_backoff(&mut self.backoff, c.pid);
                    let why = format!("the collapse took {} µs, over the stall limit of {} µs: leaving it alone for {} s", took.as_micros(), self.budget.max_stall.as_micros(), d.as_secs());
                    (self.log)(&action(self.t0, "backoff", Some(c), c.pid, &c.comm, why));
                }
            }
            Err(e) => {
                let name = errno_name(e);
                *self.s.failures.entry(name.clone()).or_default() += 1;
                a.action = "failed".into();
                a.errno = Some(name.clone());
                (self.log)(&a);
                let d = next_backoff(&mut self.backoff, c.pid);
                (self.log)(&action(self.t0, "backoff", Some(c), c.pid, &c.comm, format!("MADV_COLLAPSE failed with {name}: leaving it alone for {} s", d.as_secs())));
            }
        }
    }

    /// The summary: time, CPU, and the most collapses begun in any one second.
    fn finish(self) -> Summary {
        let mut s = self.s;
        let times = self.times;
        s.seconds = self.t0.elapsed().as_secs_f64();
        s.cpu_ms = own_cpu_ms() - self.cpu0;
        s.max_collapses_in_a_second = times.iter().map(|a| times.iter().filter(|b| **b >= *a && b.duration_since(*a) < Duration::from_secs(1)).count() as u64).max().unwrap_or(0);
        s
    }
}

/// Double the back-off of `pid` (1 s first, at most 64 s) and return it.
fn next_backoff(b: &mut BTreeMap<i32, (Instant, Duration)>, pid: i32) -> Duration {
    let d = b.get(&pid).map(|(_, d)| (*d * 2).min(Duration::from_secs(64))).unwrap_or(Duration::from_secs(1));
    b.insert(pid, (Instant::now() + d, d));
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vma(start: u64, end: u64, name: &str, flags: &[&str]) -> Vma {
        Vma { start, end, perms: "rw-p".into(), name: name.into(), vm_flags: flags.iter().map(|s| s.to_string()).collect(), ..Default::default() }
    }

    #[test]
    fn collapsible_ranges_are_the_aligned_pmds_inside_private_anonymous_vmas() {
        // 0x7f0000100000..0x7f0000700000: aligned PMDs at 0x7f0000200000 and 0x7f0000400000
        // (0x7f0000600000 + 2M passes the end).
        let v = vma(0x7f00_0010_0000, 0x7f00_0070_0000, "", &["rd", "wr"]);
        assert_eq!(collapsible_ranges(&v), vec![(0x7f00_0020_0000, 0x7f00_0040_0000), (0x7f00_0040_0000, 0x7f00_0060_0000)]);
        assert!(collapsible_ranges(&vma(0x7f00_0000_0000, 0x7f00_0040_0000, "", &["nh"])).is_empty(), "VM_NOHUGEPAGE");
        assert!(collapsible_ranges(&vma(0x7f00_0000_0000, 0x7f00_0040_0000, "", &["sh"])).is_empty(), "shared");
        assert!(collapsible_ranges(&vma(0x7f00_0000_0000, 0x7f00_0040_0000, "/usr/lib/libc.so.6", &[])).is_empty(), "file");
        assert_eq!(collapsible_ranges(&vma(0x5500_0000_0000, 0x5500_0040_0000, "[heap]", &[])).len(), 2);
        assert!(collapsible_ranges(&vma(0x7f00_0000_1000, 0x7f00_0020_1000, "", &[])).is_empty(), "2 MiB long but unaligned");
    }

    #[test]
    fn backoff_doubles_up_to_64_seconds() {
        let mut b = BTreeMap::new();
        let got: Vec<u64> = (0..9).map(|_| next_backoff(&mut b, 7).as_secs()).collect();
        assert_eq!(got, vec![1, 2, 4, 8, 16, 32, 64, 64, 64]);
    }

    #[test]
    fn an_empty_allowlist_is_refused() {
        let e = run(&Allowlist::default(), &Budget::default(), true, Duration::from_millis(1), Duration::from_millis(1), || false, |_| {}).unwrap_err();
        assert!(e.to_string().contains("give --pid or --name"), "{e}");
    }
}
