//! Small readers for `/proc` and the per-size stats files.
//!
//! - `/proc/vmstat` (`mm/vmstat.c: vmstat_text`): `name value` lines; we keep the `thp_*` events.
//! - `hugepages-<N>kB/stats/<stat>` (`mm/huge_memory.c: DEFINE_MTHP_STAT_ATTR`): one number.
//! - `/proc/PID/smaps` (`fs/proc/task_mmu.c: show_smap`): a maps line per VMA followed by
//!   `Key:  N kB` lines.
//! - `/proc/PID/stat` (`fs/proc/array.c: do_task_stat`): field 47 is `start_brk`; fields 14 and
//!   15 are utime and stime.
//! - `/proc/PID/schedstat` (`fs/proc/base.c: proc_pid_schedstat`): the khugepaged kthread's
//!   runqueue wait, which every [`CounterSnapshot`] carries. These readers live here, not in
//!   [`crate::khugepaged`] (the tracer), so that the tracer depends on this module and not the
//!   other way round.

use std::collections::BTreeMap;
use std::path::Path;

use mm_types::Order;
use thp_abi::counters::sysfs_orders;
use thp_abi::{MthpStat, VmEvent};

use crate::{io_err, LiveError, Result};

/// A snapshot of the system-wide THP counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CounterSnapshot {
    /// vmstat name → value, for every [`VmEvent`] the kernel prints.
    pub vmstat: BTreeMap<String, i64>,
    /// `hugepages-<N>kB` → stat → value, for every stats file that exists.
    pub mthp: BTreeMap<String, BTreeMap<String, i64>>,
    /// `khugepaged/pages_collapsed` and `khugepaged/full_scans`: the daemon's own work
    /// (mm/khugepaged.c: khugepaged_scan_mm_slot counts only its successes, not MADV_COLLAPSE).
    /// The live daemon's wake-ups are not the model's, so a live run during which it collapsed
    /// is marked.
    pub khugepaged: BTreeMap<String, i64>,
    /// khugepaged's pid and its runqueue wait in ns ([`runqueue_wait`]); in a
    /// [`CounterSnapshot::delta`], the wait between the two snapshots, `None` where the thread
    /// changed between them or could not be read.
    pub khugepaged_wait: Option<(i32, u64)>,
}

/// The khugepaged counters [`CounterSnapshot`] reads.
pub const KHUGEPAGED_COUNTERS: [&str; 2] = ["pages_collapsed", "full_scans"];

impl CounterSnapshot {
    pub fn read(sysfs: &Path) -> Result<CounterSnapshot> {
        let mut snap = CounterSnapshot::default();
        let text = std::fs::read_to_string("/proc/vmstat").map_err(|e| io_err("cannot read", "/proc/vmstat", e))?;
        for line in text.lines() {
            let mut it = line.split_whitespace();
            if let (Some(name), Some(v)) = (it.next(), it.next()) {
                if VmEvent::from_name(name).is_some() {
                    if let Ok(v) = v.parse() {
                        snap.vmstat.insert(name.to_string(), v);
                    }
                }
            }
        }
        for order in sysfs_orders() {
            let dir = sysfs.join(order.sysfs_dir()).join("stats");
            let mut m = BTreeMap::new();
            for stat in MthpStat::ALL {
                if !stat.exists_for(order) {
                    continue;
                }
                let p = dir.join(stat.name());
                match std::fs::read_to_string(&p) {
                    Ok(t) => {
                        let v = t.trim().parse().map_err(|_| LiveError::Parse {
                            path: p.display().to_string(),
                            message: format!("expected a number, found '{}'", t.trim()),
                        })?;
                        m.insert(stat.name().to_string(), v);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_err("cannot read", &p, e)),
                }
            }
            if !m.is_empty() {
                snap.mthp.insert(order.sysfs_dir(), m);
            }
        }
        for name in KHUGEPAGED_COUNTERS {
            let p = sysfs.join("khugepaged").join(name);
            if let Ok(t) = std::fs::read_to_string(&p) {
                if let Ok(v) = t.trim().parse() {
                    snap.khugepaged.insert(name.to_string(), v);
                }
            }
        }
        snap.khugepaged_wait = runqueue_wait();
        Ok(snap)
    }

    /// `after - self`, per counter.
    pub fn delta(&self, after: &CounterSnapshot) -> CounterSnapshot {
        let vmstat = after.vmstat.iter().map(|(k, v)| (k.clone(), v - self.vmstat.get(k).copied().unwrap_or(*v))).collect();
        let mthp = after
            .mthp
            .iter()
            .map(|(dir, m)| {
                let before = self.mthp.get(dir);
                let d = m
                    .iter()
                    .map(|(k, v)| (k.clone(), v - before.and_then(|b| b.get(k)).copied().unwrap_or(*v)))
                    .collect();
                (dir.clone(), d)
            })
            .collect();
        let khugepaged = after.khugepaged.iter().map(|(k, v)| (k.clone(), v - self.khugepaged.get(k).copied().unwrap_or(*v))).collect();
        let waited = wait_between(self.khugepaged_wait, after.khugepaged_wait);
        let khugepaged_wait = after.khugepaged_wait.zip(waited).map(|((pid, _), ns)| (pid, ns));
        CounterSnapshot { vmstat, mthp, khugepaged, khugepaged_wait }
    }
}

/// The `hugepages-<N>kB` directory of an order, for lookups by folio label.
pub fn label_of_dir(dir: &str) -> Option<String> {
    let kb: u64 = dir.strip_prefix("hugepages-")?.strip_suffix("kB")?.parse().ok()?;
    Order::from_size_kb(kb).map(|o| o.label())
}

/// One VMA from `/proc/PID/smaps`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Vma {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    /// Path, `[heap]`, `[stack]`, ... or empty for anonymous memory.
    pub name: String,
    pub rss_kb: u64,
    /// `Referenced:` (KiB): pages accessed since they were mapped or since clear_refs.
    pub referenced_kb: u64,
    pub anon_huge_kb: u64,
    pub shmem_pmd_kb: u64,
    pub file_pmd_kb: u64,
    /// `THPeligible` (1 if the VMA may get THPs).
    pub thp_eligible: Option<bool>,
    /// File offset of `start`, in pages (`vm_pgoff`).
    pub pgoff: u64,
    /// `Anonymous:` and `Swap:` (KiB): non-zero means the VMA has an anon_vma.
    pub anonymous_kb: u64,
    pub swap_kb: u64,
    /// `VmFlags:` two-letter mnemonics (`hg` VM_HUGEPAGE, `nh` VM_NOHUGEPAGE, `sh` VM_SHARED,
    /// `io`, `de`, `pf`, `mm`, `ht`, ...), as `fs/proc/task_mmu.c: show_smap_vma_flags` prints.
    pub vm_flags: Vec<String>,
}

impl Vma {
    /// Whether `VmFlags` has this mnemonic.
    pub fn has_flag(&self, f: &str) -> bool {
        self.vm_flags.iter().any(|x| x == f)
    }

    /// KiB mapped by PMDs (anon, shmem or file).
    pub fn pmd_mapped_kb(&self) -> u64 {
        self.anon_huge_kb + self.shmem_pmd_kb + self.file_pmd_kb
    }
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s, 16).ok()
}

/// Parse the text of `/proc/PID/smaps` (or `/proc/PID/maps`: then the sizes stay 0).
pub fn parse_smaps(path: &str, text: &str) -> Result<Vec<Vma>> {
    let mut out: Vec<Vma> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let bad = || LiveError::Parse { path: path.to_string(), message: format!("line {}: unexpected '{line}'", i + 1) };
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-') {
            if let (Some(start), Some(end)) = (hex(a), hex(b)) {
                let mut f = line.splitn(6, char::is_whitespace).filter(|s| !s.is_empty());
                let _range = f.next();
                let perms = f.next().ok_or_else(bad)?.to_string();
                // offset, dev, inode, then the name (which may contain spaces).
                let fields: Vec<&str> = line.split_whitespace().collect();
                let name = if fields.len() > 5 {
                    // Re-find the name start after the inode field to keep inner spaces.
                    let mut rest = line;
                    for _ in 0..5 {
                        rest = rest.trim_start();
                        rest = rest.find(char::is_whitespace).map(|i| &rest[i..]).unwrap_or("");
                    }
                    rest.trim().to_string()
                } else {
                    String::new()
                };
                let pgoff = fields.get(2).and_then(|o| hex(o)).unwrap_or(0) / mm_types::PAGE_SIZE;
                out.push(Vma { start, end, perms, name, pgoff, ..Default::default() });
                continue;
            }
        }
        let Some((key, rest)) = line.split_once(':') else { continue };
        let Some(vma) = out.last_mut() else { return Err(bad()) };
        let num = || rest.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
        match key {
            "Rss" => vma.rss_kb = num(),
            "Referenced" => vma.referenced_kb = num(),
            "AnonHugePages" => vma.anon_huge_kb = num(),
            "ShmemPmdMapped" => vma.shmem_pmd_kb = num(),
            "FilePmdMapped" => vma.file_pmd_kb = num(),
            "THPeligible" => vma.thp_eligible = Some(num() == 1),
            "Anonymous" => vma.anonymous_kb = num(),
            "Swap" => vma.swap_kb = num(),
            "VmFlags" => vma.vm_flags = rest.split_whitespace().map(str::to_string).collect(),
            _ => {}
        }
    }
    Ok(out)
}

/// Why `path` (a /proc/PID file that needs PTRACE_MODE_READ: smaps, pagemap) cannot be read:
/// as another user, it is another user's process; as root, the kernel's ptrace access check
/// (`__ptrace_may_access` in kernel/ptrace.c: `cap_ptrace_access_check`, then the security
/// modules) still refused it.
pub fn permission_denied(path: &str) -> String {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        format!(
            "{path}: permission denied although thplab runs as root: the kernel's ptrace access check refused it (the process holds capabilities this one lacks, or is in a user namespace or under a security module that forbids it)"
        )
    } else {
        format!("{path} of another user's process is readable by root only")
    }
}

/// `/proc/PID/smaps`; a missing process is [`LiveError::NoSuchProcess`].
pub fn read_smaps(pid: i32) -> Result<Vec<Vma>> {
    let p = format!("/proc/{pid}/smaps");
    let text = std::fs::read_to_string(&p).map_err(|e| match e.kind() {
        // ESRCH: the process exited while its smaps was being read.
        std::io::ErrorKind::NotFound => LiveError::NoSuchProcess { pid },
        _ if e.raw_os_error() == Some(libc::ESRCH) => LiveError::NoSuchProcess { pid },
        std::io::ErrorKind::PermissionDenied => LiveError::NotAvailable(permission_denied(&p)),
        _ => io_err("cannot read", &p, e),
    })?;
    parse_smaps(&p, &text)
}

/// Field `n` (1-based, as proc(5) counts) of `/proc/PID/stat` text.
pub use linux_abi::stat::field as stat_field;

/// `start_brk` of a process (field 47 of /proc/PID/stat).
pub fn start_brk(pid: &str) -> Result<u64> {
    let p = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&p).map_err(|e| io_err("cannot read", &p, e))?;
    stat_field(&text, 47).ok_or_else(|| LiveError::Parse { path: p, message: "no field 47 (start_brk)".into() })
}

/// Every pid under /proc (processes, not threads), ascending.
pub fn list_pids() -> Vec<i32> {
    let mut v: Vec<i32> = std::fs::read_dir("/proc")
        .map(|d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// The command name of a process.
pub fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// The khugepaged kthread's pid.
pub fn khugepaged_pid() -> Option<i32> {
    list_pids().into_iter().find(|p| comm(*p) == "khugepaged")
}

/// The khugepaged kthread's pid and the time it has waited on a runqueue, in ns (the second
/// field of /proc/PID/schedstat: `run_delay`, kernel/sched/stats.h). khugepaged runs at nice 19
/// (`set_user_nice(current, MAX_NICE)` in mm/khugepaged.c: khugepaged), so on CPUs kept busy by
/// other work it wakes late; the kernel starts a new thread when THP is turned on again after
/// `never`, hence the pid beside the figure.
///
/// Every live counter snapshot reads it (a `--sample` timeline every interval), so the pid found
/// last is tried first: one read of its comm instead of one per process on the machine.
pub fn runqueue_wait() -> Option<(i32, u64)> {
    static LAST: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
    let last = LAST.load(std::sync::atomic::Ordering::Relaxed);
    let pid = if last > 0 && comm(last) == "khugepaged" { last } else { khugepaged_pid()? };
    LAST.store(pid, std::sync::atomic::Ordering::Relaxed);
    let text = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    Some((pid, parse_schedstat_wait(&text)?))
}

/// The runqueue wait (ns) between two [`runqueue_wait`] readings; `None` where either is missing
/// or the thread changed between them (THP turned off and on again).
pub fn wait_between(before: Option<(i32, u64)>, after: Option<(i32, u64)>) -> Option<u64> {
    match (before, after) {
        (Some((p, a)), Some((q, b))) if p == q => Some(b.saturating_sub(a)),
        _ => None,
    }
}

/// `run_delay` (ns) of a /proc/PID/schedstat text: `cpu_time run_delay timeslices`.
fn parse_schedstat_wait(text: &str) -> Option<u64> {
    text.split_whitespace().nth(1)?.parse().ok()
}

/// utime + stime of a task in milliseconds (/proc/PID/stat fields 14 and 15).
pub fn cpu_ms(pid: i32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = stat_field(&stat, 14)? + stat_field(&stat, 15)?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some(ticks as f64 * 1000.0 / hz)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_smaps_and_stat() {
        let text = "7e0000000000-7e0000400000 rw-p 00000000 00:00 0 \n\
Size:               4096 kB\nRss:                4096 kB\nAnonHugePages:      4096 kB\nShmemPmdMapped:        0 kB\nFilePmdMapped:        0 kB\nTHPeligible:    1\nVmFlags: rd wr mr mw me ac sd hg \n\
7f0000000000-7f0000001000 r--p 00000000 08:01 1234   /usr/lib/with space.so\nRss:                   4 kB\n";
        let v = parse_smaps("x", text).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].start, 0x7e00_0000_0000);
        assert_eq!(v[0].anon_huge_kb, 4096);
        assert_eq!(v[0].thp_eligible, Some(true));
        assert!(v[0].has_flag("hg") && !v[0].has_flag("nh"), "{:?}", v[0].vm_flags);
        assert_eq!(v[1].pgoff, 0);
        assert_eq!(v[0].name, "");
        assert_eq!(v[1].name, "/usr/lib/with space.so");
        assert_eq!(v[1].rss_kb, 4);
        let stat = "123 (a b) c) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45";
        assert_eq!(stat_field(stat, 3), None); // 'S' is not a number
        assert_eq!(stat_field(stat, 4), Some(1));
        assert_eq!(stat_field(stat, 47), Some(44));
        assert_eq!(label_of_dir("hugepages-64kB").as_deref(), Some("64kB"));
    }

    #[test]
    fn schedstat_run_delay() {
        // This machine's khugepaged, read by hand: 133 ms on a CPU, 697 ms waiting, 409 slices.
        assert_eq!(parse_schedstat_wait("133028055 696768260 409\n"), Some(696_768_260));
        assert_eq!(parse_schedstat_wait("133028055\n"), None);
        assert_eq!(parse_schedstat_wait(""), None);
        // Between two readings of one thread, the difference; of two threads, nothing.
        assert_eq!(wait_between(Some((7, 100)), Some((7, 350))), Some(250));
        assert_eq!(wait_between(Some((7, 100)), Some((9, 350))), None);
        assert_eq!(wait_between(None, Some((7, 350))), None);
    }
}
