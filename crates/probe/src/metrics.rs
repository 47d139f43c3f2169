//! What `thplab exporter` serves, gathered read-only: the system-wide THP counters and
//! settings, and the census, RSS and bloat of selected processes within a time budget. The
//! encoding into the Prometheus text format is `crates/exporter`; this module only reads.
//!
//! Sources (all read, none written):
//! - `hugepages-<N>kB/stats/*` (`mm/huge_memory.c: DEFINE_MTHP_STAT_ATTR`): every file that
//!   exists, one number each; `nr_anon` and `nr_anon_partially_mapped` are levels, the rest
//!   event counts.
//! - `/proc/vmstat` (`mm/vmstat.c: vmstat_text`): every `thp_*` line (all are vm events) and
//!   the THP levels [`VMSTAT_GAUGES`] (printed in units of PMD-sized THPs,
//!   `vmstat_item_print_in_thp`).
//! - `khugepaged/*` (`mm/khugepaged.c`): every numeric file; `pages_collapsed` and
//!   `full_scans` count, the rest are settings.
//! - the knobs: every top-level file of the THP tree and every file of `hugepages-<N>kB/`, as
//!   the selected word (`always [madvise] never` reads as `madvise`).
//! - per process: `/proc/PID/smaps` (Rss, AnonHugePages), the census ([`crate::census`]) per
//!   VMA kind and folio size, and the bloat ([`crate::bloat`]) sampled within what is left of
//!   the budget.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use thp_abi::CensusEntry;

use crate::bloat::{sample_bloat, BloatReport};
use crate::census::census_of_ranges;
use crate::procfs::read_smaps;
use crate::sysfs::selected_value;
use crate::LiveError;

/// The THP levels of `/proc/vmstat` served as gauges (when the kernel prints them).
pub const VMSTAT_GAUGES: [&str; 5] =
    ["nr_anon_transparent_hugepages", "nr_shmem_hugepages", "nr_shmem_pmdmapped", "nr_file_hugepages", "nr_file_pmdmapped"];

/// The khugepaged files that count events (the others are settings).
pub const KHUGEPAGED_COUNTERS: [&str; 2] = ["pages_collapsed", "full_scans"];

/// Where the trees are: the live ones, or a copy for tests.
#[derive(Clone, Debug)]
pub struct Root {
    /// The THP sysfs directory (`/sys/kernel/mm/transparent_hugepage`).
    pub thp: PathBuf,
    /// procfs (`/proc`): `vmstat`, and `PID/{comm,cgroup,stat,statm}` for the selection.
    pub proc: PathBuf,
}

impl Root {
    pub fn live() -> Root {
        Root { thp: PathBuf::from(thp_abi::settings::SYSFS_THP), proc: PathBuf::from("/proc") }
    }

    /// A copy of both trees under `dir`: `dir/sys/kernel/mm/transparent_hugepage`, `dir/proc`.
    pub fn under(dir: &Path) -> Root {
        Root { thp: dir.join(thp_abi::settings::SYSFS_THP.trim_start_matches('/')), proc: dir.join("proc") }
    }

    /// Whether this is the machine's own procfs (the census reads `/proc` itself).
    fn is_live_proc(&self) -> bool {
        self.proc == Path::new("/proc")
    }
}

/// Why part of a scrape is missing; the exporter counts them in `thplab_scrape_errors_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ErrorKind {
    /// Not allowed (another user's process without root; the census needs root).
    Permission,
    /// A selected process exited before it was read, or a `--pid` names no process.
    ProcessExited,
    /// A file of the THP tree or /proc/vmstat could not be read.
    Sysfs,
    /// A file had content that does not parse.
    Parse,
    /// Any other read error.
    Io,
}

impl ErrorKind {
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Permission => "permission",
            ErrorKind::ProcessExited => "process_exited",
            ErrorKind::Sysfs => "sysfs",
            ErrorKind::Parse => "parse",
            ErrorKind::Io => "io",
        }
    }

    pub const ALL: [ErrorKind; 5] = [ErrorKind::Permission, ErrorKind::ProcessExited, ErrorKind::Sysfs, ErrorKind::Parse, ErrorKind::Io];

    fn of(e: &LiveError) -> ErrorKind {
        match e {
            LiveError::NoSuchProcess { .. } => ErrorKind::ProcessExited,
            LiveError::NotAvailable(_) => ErrorKind::Permission,
            LiveError::Io { error, .. } if error.kind() == std::io::ErrorKind::PermissionDenied => ErrorKind::Permission,
            LiveError::Io { error, .. } if error.raw_os_error() == Some(libc::ESRCH) => ErrorKind::ProcessExited,
            LiveError::Parse { .. } => ErrorKind::Parse,
            _ => ErrorKind::Io,
        }
    }
}

/// One error of a scrape, with its message (for the debug log).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScrapeError {
    pub kind: ErrorKind,
    pub message: String,
}

/// One `hugepages-<N>kB` directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SizeDir {
    pub kb: u64,
    /// `64kB`.
    pub label: String,
    /// The knobs of the directory (`enabled`, `shmem_enabled`), selected values.
    pub knobs: Vec<(String, String)>,
    /// Every file of `stats/`, by name.
    pub stats: Vec<(String, u64)>,
}

/// The system-wide part of a scrape.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SystemSnapshot {
    /// By size, smallest first.
    pub sizes: Vec<SizeDir>,
    /// `thp_*` of /proc/vmstat, in the kernel's order.
    pub vmstat_events: Vec<(String, u64)>,
    /// [`VMSTAT_GAUGES`] that the kernel prints.
    pub vmstat_gauges: Vec<(String, i64)>,
    /// Every numeric file of `khugepaged/`, by name.
    pub khugepaged: Vec<(String, i64)>,
    /// Every top-level file of the THP tree (`enabled`, `defrag`, `shmem_enabled`,
    /// `use_zero_page`, `hpage_pmd_size`, ...), selected values, by name.
    pub settings: Vec<(String, String)>,
    pub errors: Vec<ScrapeError>,
}

/// Whether a stat of `hugepages-<N>kB/stats` is a level (a gauge) rather than an event count.
pub fn mthp_stat_is_gauge(name: &str) -> bool {
    name.starts_with("nr_")
}

fn read_small(p: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut s = String::new();
    // A sysfs attribute is one short line; read at most a page.
    std::fs::File::open(p)?.take(4096).read_to_string(&mut s)?;
    Ok(s)
}

/// (name, is_dir) of a directory's entries, sorted by name.
fn list(dir: &Path) -> std::io::Result<Vec<(String, bool)>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        v.push((e.file_name().to_string_lossy().into_owned(), e.file_type().map(|t| t.is_dir()).unwrap_or(false)));
    }
    v.sort();
    Ok(v)
}

/// Whether `root.thp` is a THP sysfs tree (a clear error otherwise).
pub fn check_tree(root: &Root) -> crate::Result<()> {
    if !root.thp.join("enabled").is_file() {
        return Err(LiveError::NotAvailable(format!(
            "{} has no 'enabled' file (kernel without CONFIG_TRANSPARENT_HUGEPAGE, or sysfs not mounted)",
            root.thp.display()
        )));
    }
    Ok(())
}

/// Read the system-wide counters and settings. Files that cannot be read are left out and
/// named in `errors`.
pub fn read_system(root: &Root) -> SystemSnapshot {
    let mut s = SystemSnapshot::default();
    let errors = &mut s.errors;
    let entries = match list(&root.thp) {
        Ok(v) => v,
        Err(e) => {
            push_err(errors, ErrorKind::Sysfs, format!("cannot list {}: {e}", root.thp.display()));
            Vec::new()
        }
    };
    let mut sizes = Vec::new();
    let mut settings = Vec::new();
    let mut khugepaged = Vec::new();
    for (name, is_dir) in &entries {
        let p = root.thp.join(name);
        if !is_dir {
            match read_small(&p) {
                Ok(t) => settings.push((name.clone(), selected_value(&t))),
                // Write-only files (none in 6.18) are not settings.
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {}
                Err(e) => push_err(errors, ErrorKind::Sysfs, format!("cannot read {}: {e}", p.display())),
            }
        } else if name == "khugepaged" {
            read_khugepaged_dir(&p, &mut khugepaged, errors);
        } else if let Some(kb) = name.strip_prefix("hugepages-").and_then(|r| r.strip_suffix("kB")).and_then(|n| n.parse::<u64>().ok()) {
            sizes.push(read_size_dir(&p, kb, errors));
        }
    }
    sizes.sort_by_key(|d| d.kb);
    s.sizes = sizes;
    s.settings = settings;
    s.khugepaged = khugepaged;
    read_vmstat(root, &mut s);
    s
}

fn push_err(errors: &mut Vec<ScrapeError>, kind: ErrorKind, message: String) {
    errors.push(ScrapeError { kind, message });
}

/// The numbers in transparent_hugepage/khugepaged/ (its files, not its directories).
fn read_khugepaged_dir(p: &std::path::Path, khugepaged: &mut Vec<(String, i64)>, errors: &mut Vec<ScrapeError>) {
    match list(p) {
        Ok(files) => {
            for (f, d) in files {
                if d {
                    continue;
                }
                let fp = p.join(&f);
                match read_small(&fp) {
                    Ok(t) => match t.trim().parse::<i64>() {
                        Ok(v) => khugepaged.push((f, v)),
                        Err(_) => push_err(errors, ErrorKind::Parse, format!("{}: expected a number, found '{}'", fp.display(), t.trim())),
                    },
                    Err(e) => push_err(errors, ErrorKind::Sysfs, format!("cannot read {}: {e}", fp.display())),
                }
            }
        }
        Err(e) => push_err(errors, ErrorKind::Sysfs, format!("cannot list {}: {e}", p.display())),
    }
}

/// One transparent_hugepage/hugepages-<size>kB/ directory: its knobs, then its stats/.
fn read_size_dir(p: &std::path::Path, kb: u64, errors: &mut Vec<ScrapeError>) -> SizeDir {
    let mut d = SizeDir { kb, label: format!("{kb}kB"), ..Default::default() };
    match list(p) {
        Ok(files) => {
            for (f, is_d) in files {
                if is_d {
                    continue;
                }
                match read_small(&p.join(&f)) {
                    Ok(t) => d.knobs.push((f, selected_value(&t))),
                    Err(e) => push_err(errors, ErrorKind::Sysfs, format!("cannot read {}: {e}", p.join(&f).display())),
                }
            }
        }
        Err(e) => push_err(errors, ErrorKind::Sysfs, format!("cannot list {}: {e}", p.display())),
    }
    let sp = p.join("stats");
    match list(&sp) {
        Ok(files) => {
            for (f, is_d) in files {
                if is_d {
                    continue;
                }
                let fp = sp.join(&f);
                match read_small(&fp) {
                    Ok(t) => match t.trim().parse::<u64>() {
                        Ok(v) => d.stats.push((f, v)),
                        Err(_) => push_err(errors, ErrorKind::Parse, format!("{}: expected a number, found '{}'", fp.display(), t.trim())),
                    },
                    Err(e) => push_err(errors, ErrorKind::Sysfs, format!("cannot read {}: {e}", fp.display())),
                }
            }
        }
        // Kernels before 6.10 have no stats directory: nothing to serve for the size.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => push_err(errors, ErrorKind::Sysfs, format!("cannot list {}: {e}", sp.display())),
    }
    d
}

/// The thp_* events and the gauges of /proc/vmstat.
fn read_vmstat(root: &Root, s: &mut SystemSnapshot) {
    let vp = root.proc.join("vmstat");
    match std::fs::read_to_string(&vp) {
        Ok(text) => {
            for line in text.lines() {
                let mut it = line.split_whitespace();
                let (Some(name), Some(v)) = (it.next(), it.next()) else { continue };
                if name.starts_with("thp_") {
                    match v.parse::<u64>() {
                        Ok(v) => s.vmstat_events.push((name.to_string(), v)),
                        Err(_) => s.errors.push(ScrapeError { kind: ErrorKind::Parse, message: format!("{}: {name} is '{v}'", vp.display()) }),
                    }
                } else if VMSTAT_GAUGES.contains(&name) {
                    match v.parse::<i64>() {
                        Ok(v) => s.vmstat_gauges.push((name.to_string(), v)),
                        Err(_) => s.errors.push(ScrapeError { kind: ErrorKind::Parse, message: format!("{}: {name} is '{v}'", vp.display()) }),
                    }
                }
            }
        }
        Err(e) => s.errors.push(ScrapeError { kind: ErrorKind::Sysfs, message: format!("cannot read {}: {e}", vp.display()) }),
    }
}

/// Which processes to look at: any that matches one of the rules.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Matched against the command name (`/proc/PID/comm`, at most 15 bytes).
    pub names: Vec<regex::Regex>,
    /// cgroup v2 paths (`/system.slice/foo.service`, or under `/sys/fs/cgroup/`): a process
    /// whose `0::` line in `/proc/PID/cgroup` is this path or below it.
    pub cgroups: Vec<String>,
    pub pids: Vec<i32>,
}

impl Selection {
    pub fn is_empty(&self) -> bool {
        self.names.is_empty() && self.cgroups.is_empty() && self.pids.is_empty()
    }
}

/// A cgroup path as `/proc/PID/cgroup` shows it: `/sys/fs/cgroup` left out, one leading `/`,
/// no trailing `/`.
pub fn normalize_cgroup(path: &str) -> String {
    let p = path.trim();
    let p = p.strip_prefix("/sys/fs/cgroup").unwrap_or(p);
    let p = p.trim_end_matches('/');
    if p.starts_with('/') {
        p.to_string()
    } else {
        format!("/{p}")
    }
}

fn cgroup_matches(cgroup_file: &str, wanted: &[String]) -> bool {
    // cgroup v2: `0::/path`; v1 lines `N:controllers:/path` are looked at too.
    cgroup_file.lines().filter_map(|l| l.splitn(3, ':').nth(2)).any(|path| {
        wanted.iter().any(|w| w == "/" || path == w || path.strip_prefix(w.as_str()).is_some_and(|r| r.starts_with('/')))
    })
}

/// A process chosen by a [`Selection`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selected {
    pub pid: i32,
    pub comm: String,
}

/// The processes of `root.proc` that `sel` selects, by pid; kernel threads and zombies are
/// left out. A `--pid` that names no process (or a kernel thread) is an error of kind
/// [`ErrorKind::ProcessExited`].
pub fn select(root: &Root, sel: &Selection, errors: &mut Vec<ScrapeError>) -> Vec<Selected> {
    let mut out = Vec::new();
    if sel.is_empty() {
        return out;
    }
    let user_process = |pid: i32| -> Option<String> {
        let text = std::fs::read_to_string(root.proc.join(format!("{pid}/stat"))).ok()?;
        let state = text.rfind(')').and_then(|b| text[b + 1..].split_whitespace().next()).unwrap_or("");
        // PF_KTHREAD (include/linux/sched.h): no user address space.
        if state == "Z" || state == "X" || crate::procfs::stat_field(&text, 9).is_some_and(|f| f & 0x0020_0000 != 0) {
            return None;
        }
        Some(std::fs::read_to_string(root.proc.join(format!("{pid}/comm"))).map(|s| s.trim_end_matches('\n').to_string()).unwrap_or_default())
    };
    let mut pids: Vec<i32> = Vec::new();
    if !sel.names.is_empty() || !sel.cgroups.is_empty() {
        match std::fs::read_dir(&root.proc) {
            Ok(rd) => pids.extend(rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())),
            Err(e) => errors.push(ScrapeError { kind: ErrorKind::Io, message: format!("cannot list {}: {e}", root.proc.display()) }),
        }
    }
    pids.extend(&sel.pids);
    pids.sort_unstable();
    pids.dedup();
    for pid in pids {
        let Some(comm) = user_process(pid) else {
            if sel.pids.contains(&pid) {
                errors.push(ScrapeError { kind: ErrorKind::ProcessExited, message: format!("--pid {pid}: no such user process") });
            }
            continue;
        };
        let chosen = sel.pids.contains(&pid)
            || sel.names.iter().any(|r| r.is_match(&comm))
            || (!sel.cgroups.is_empty()
                && std::fs::read_to_string(root.proc.join(format!("{pid}/cgroup"))).is_ok_and(|t| cgroup_matches(&t, &sel.cgroups)));
        if chosen {
            out.push(Selected { pid, comm });
        }
    }
    out
}

/// Census, RSS and bloat of one process.
#[derive(Clone, Debug, Default)]
pub struct ProcessMetrics {
    pub pid: i32,
    pub comm: String,
    /// From smaps: the sums over its VMAs.
    pub rss_kb: u64,
    pub anon_huge_kb: u64,
    /// (VMA kind `anon`/`shmem`/`file`, folio size label) → census; `None` when the census
    /// could not be taken (an error says why).
    pub census: Option<BTreeMap<(String, String), CensusEntry>>,
    pub zero_page_ptes: u64,
    pub huge_zero_pmds: u64,
    /// smaps and census time.
    pub census_time: Duration,
    /// `None` when no time was left for it or it failed.
    pub bloat: Option<BloatReport>,
}

/// The per-process part of a scrape.
#[derive(Clone, Debug, Default)]
pub struct ProcessScrape {
    pub selected: usize,
    pub processes: Vec<ProcessMetrics>,
    /// The budget ran out before every selected process was read.
    pub truncated: bool,
    /// Selected processes not read because of the budget.
    pub skipped: usize,
    pub errors: Vec<ScrapeError>,
}

/// `PROC/PID/smaps`, with the errors of [`crate::procfs::read_smaps`].
fn smaps_at(root: &Root, pid: i32) -> crate::Result<Vec<crate::procfs::Vma>> {
    if root.is_live_proc() {
        return read_smaps(pid);
    }
    let p = root.proc.join(format!("{pid}/smaps"));
    let text = std::fs::read_to_string(&p).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => LiveError::NoSuchProcess { pid },
        _ => crate::io_err("cannot read", &p, e),
    })?;
    crate::procfs::parse_smaps(&p.display().to_string(), &text)
}

/// Census cost assumed for a process seen for the first time, per GiB of RSS (about 0.1 s is
/// measured for 10 GiB of 64 KiB folios; twice that to be safe), plus a fixed part.
const CENSUS_SECONDS_PER_GIB: f64 = 0.2;
const CENSUS_FIXED: Duration = Duration::from_millis(2);
/// Time [`sample_bloat`] spends per page of large folios before sampling (listing and
/// shuffling them): 94 ns measured for 10 GiB (2.6 M pages) on this machine under load.
const BLOAT_SETUP_NS_PER_PAGE: u64 = 100;

fn rss_bytes(root: &Root, pid: i32) -> u64 {
    // statm field 2: resident pages (fs/proc/array.c: proc_pid_statm).
    std::fs::read_to_string(root.proc.join(format!("{pid}/statm")))
        .ok()
        .and_then(|t| t.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0)
        * mm_types::PAGE_SIZE
}

/// Read the processes of `selected` in order until `deadline`. Before each, the census time
/// is estimated (the last one measured for that pid in `estimates`, else from its RSS); when
/// it would not end before the deadline, this and the remaining processes are skipped and the
/// scrape is marked truncated. The bloat of each process is sampled within half of its share
/// of the time left. `estimates` is updated with what was measured.
pub fn read_processes(root: &Root, selected: &[Selected], deadline: Instant, estimates: &mut HashMap<i32, Duration>) -> ProcessScrape {
    let mut out = ProcessScrape { selected: selected.len(), ..Default::default() };
    for (i, p) in selected.iter().enumerate() {
        let now = Instant::now();
        let left = deadline.saturating_duration_since(now);
        let est = estimates.get(&p.pid).copied().unwrap_or_else(|| {
            CENSUS_FIXED + Duration::from_secs_f64(rss_bytes(root, p.pid) as f64 / (1u64 << 30) as f64 * CENSUS_SECONDS_PER_GIB)
        });
        if est >= left {
            out.truncated = true;
            out.skipped = selected.len() - i;
            break;
        }
        let mut m = ProcessMetrics { pid: p.pid, comm: p.comm.clone(), ..Default::default() };
        let fail = |e: LiveError, out: &mut ProcessScrape| {
            out.errors.push(ScrapeError { kind: ErrorKind::of(&e), message: format!("pid {} ({}): {e}", p.pid, p.comm) })
        };
        let vmas = match smaps_at(root, p.pid) {
            Ok(v) => v,
            Err(e) => {
                fail(e, &mut out);
                continue;
            }
        };
        m.rss_kb = vmas.iter().map(|v| v.rss_kb).sum();
        m.anon_huge_kb = vmas.iter().map(|v| v.anon_huge_kb).sum();
        if !root.is_live_proc() {
            // A copy of /proc (tests) has no pagemap: Rss and AnonHugePages only.
            out.processes.push(m);
            continue;
        }
        match census_of_ranges(p.pid, &[(0, u64::MAX)], &vmas) {
            Ok(rep) => {
                m.census_time = now.elapsed();
                estimates.insert(p.pid, m.census_time);
                let mut by: BTreeMap<(String, String), CensusEntry> = BTreeMap::new();
                for (v, c) in vmas.iter().zip(&rep.per_vma) {
                    let kind = uapi::result::vma_kind_of_name(&v.name);
                    for (size, e) in &c.sizes {
                        by.entry((kind.to_string(), size.to_string())).or_default().add(e);
                    }
                }
                m.zero_page_ptes = rep.total.zero_page_ptes;
                m.huge_zero_pmds = rep.total.huge_zero_pmds;
                m.census = Some(by);
                let share = deadline.saturating_duration_since(Instant::now()) / (selected.len() - i) as u32 / 2;
                // sample_bloat lists and shuffles every page of the large folios before it
                // looks at the clock: leave it out when that alone would not fit.
                let large_pages: u64 = rep.large_ranges.iter().flatten().map(|(a, b)| (b - a) / mm_types::PAGE_SIZE).sum();
                let setup = Duration::from_nanos(large_pages.saturating_mul(BLOAT_SETUP_NS_PER_PAGE));
                if share >= Duration::from_millis(1) && setup < share / 2 {
                    let rss: Vec<u64> = vmas.iter().map(|v| v.rss_kb).collect();
                    let partial = rep.total.sizes.values().map(|e| e.partially_mapped).sum();
                    match sample_bloat(p.pid, &rep.large_ranges, &rss, partial, share) {
                        Ok(b) => m.bloat = Some(b),
                        Err(e) => fail(e, &mut out),
                    }
                }
            }
            Err(e) => {
                m.census_time = now.elapsed();
                fail(e, &mut out);
            }
        }
        out.processes.push(m);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_paths_match_themselves_and_below() {
        let f = "0::/system.slice/redis.service\n";
        assert!(cgroup_matches(f, &[normalize_cgroup("/system.slice/redis.service")]));
        assert!(cgroup_matches(f, &[normalize_cgroup("/sys/fs/cgroup/system.slice/")]));
        assert!(cgroup_matches(f, &[normalize_cgroup("system.slice")]));
        assert!(!cgroup_matches(f, &[normalize_cgroup("/system.slice/redis")]), "a prefix of a name is not a parent");
        assert!(!cgroup_matches(f, &[normalize_cgroup("/user.slice")]));
        assert!(cgroup_matches(f, &[normalize_cgroup("/")]));
        assert_eq!(normalize_cgroup("/sys/fs/cgroup"), "/");
    }
}
