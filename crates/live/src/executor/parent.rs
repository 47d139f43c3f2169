//! The parent: one run of the child (mount points, spawn, the protocol's messages, the
//! counters, smaps and census read around it) and the whole live run (the settings guard held
//! over `repeat` runs, the host settled between them).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mm_types::PAGE_SIZE;
use uapi::result::RegionPlacement;
use thp_abi::{Census, ThpSettings};
use uapi::RunResult;
use workload::{OpKind, Workload, HEAP};

use super::assemble::assemble;
use super::protocol::{Done, ProcDone, Ready};
use super::spec::{build_spec, ExecSpec, SHM_PREFIX};
use super::{wire, CONTROL_FD, STATUS_FD};
use probe::census::census_of_ranges;
use crate::guard::SettingsGuard;
use crate::pressure::{self, Memcg};
use probe::procfs::{read_smaps, CounterSnapshot, Vma};
use crate::sysfs::Paths;
use crate::{LiveError, Result};

/// How the parent starts its child, and how often.
#[derive(Clone, Debug)]
pub struct ExecOptions {
    /// The program to run as the child; default: this executable.
    pub child_program: PathBuf,
    /// Arguments before nothing else; default `["__exec"]`.
    pub child_args: Vec<String>,
    /// Runs (≥ 1); counters are reported as the median.
    pub repeat: u32,
    /// Print one line per run on stderr (and, while sampling, one a second).
    pub progress: bool,
    /// `--sample MS`: the result's `timeline` (crate::timeline).
    pub sample: Option<Duration>,
    /// Before every run after the first, wait until page reporting has taken every free block
    /// (`crate::host::wait_until_settled`): the state a model run with a profile's `[host]`
    /// starts from (a run right after another would get the blocks it freed, still backed).
    /// Every run also goes to the CPU whose per-CPU lists are the quietest as it starts
    /// (`crate::host::cpu_for_run`: the last run left the pages it freed on the lists of the CPU
    /// it exited on, backed), starts with the THP-sized pages of that list taken and held until
    /// it ends (`crate::host::take_cpu_thps`), and reads the free lists it starts from
    /// (`crate::host::run_start`).
    pub settle_host: bool,
    /// Pin the workload (the child, and so every process and thread it starts) to this CPU
    /// (`sched_setaffinity`); with `settle_host`, only where no CPU can be chosen by its lists.
    pub cpu: Option<usize>,
    /// `--memory-max`, `--swap`: the child runs in a memcg of its own with that limit and that
    /// swap, created and torn down by the settings guard (crate::pressure).
    pub pressure: thp_abi::Pressure,
    /// `--latency`: time each fault of the workload's touches (crate::executor::sys::TouchLatency).
    pub latency: bool,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            child_program: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe")),
            child_args: vec!["__exec".into()],
            repeat: 1,
            progress: false,
            sample: None,
            settle_host: false,
            cpu: None,
            pressure: thp_abi::Pressure::default(),
            latency: false,
        }
    }
}


/// What one run measured.
/// One process of a run of a workload that forks.
#[derive(Clone, Debug, Default)]
pub struct ProcOnce {
    pub minflt: u64,
    pub exited: bool,
    pub rss_bytes: u64,
    pub anon_huge_bytes: u64,
    pub census: Census,
}

#[derive(Clone, Debug)]
pub struct RunOnce {
    /// Per process (main first) when the workload forks; empty otherwise.
    pub procs: Vec<ProcOnce>,
    pub minflt: u64,
    pub wall_ns: u64,
    /// Each `phase` reached, in the order of the operations: (name, ns from the start).
    pub phases: Vec<(String, u64)>,
    pub rss_bytes: u64,
    pub anon_huge_bytes: u64,
    pub counters: CounterSnapshot,
    pub census: Census,
    /// `--latency`: the touches' faults, (histogram bucket, count).
    pub latency: Vec<(usize, u64)>,
    pub census_ms: f64,
    /// Of which: pagemap reads, kpageflags reads (ms), and the number of kpageflags reads.
    pub census_detail: (f64, f64, u64, u64),
    pub results: Vec<i64>,
    pub start_brk: u64,
    pub regions: Vec<RegionPlacement>,
    /// /proc/meminfo deltas (kB): Shmem, ShmemHugePages, ShmemPmdMapped.
    pub meminfo: BTreeMap<String, i64>,
    /// `--sample`: the samples taken during the run.
    pub timeline: Vec<uapi::TimelineSample>,
    /// With `ExecOptions::settle_host` on a VM that reports free pages: the frames mapped at
    /// the end that lay in reported blocks when the run started (`LiveWorkloadRun::host_faults`).
    pub host_faults: Option<u64>,
    /// With `ExecOptions::settle_host`: the free lists the run started from.
    pub free_lists: Option<uapi::profile::FreeLists>,
    /// With `ExecOptions::pressure`: the memcg, swap and reclaim counters of this run.
    pub pressure: Option<uapi::result::LivePressure>,
}

pub const MEMINFO_FIELDS: &[&str] = &["Shmem", "ShmemHugePages", "ShmemPmdMapped"];

/// [`MEMINFO_FIELDS`] and the hugetlb lines (`hugetlb::HUGETLB_MEMINFO_FIELDS`) from /proc/meminfo.
pub fn read_meminfo() -> Result<BTreeMap<String, i64>> {
    let text = std::fs::read_to_string("/proc/meminfo").map_err(|e| crate::io_err("cannot read", "/proc/meminfo", e))?;
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else { continue };
        if MEMINFO_FIELDS.contains(&k) || super::hugetlb::HUGETLB_MEMINFO_FIELDS.contains(&k) {
            if let Some(n) = v.split_whitespace().next().and_then(|n| n.parse().ok()) {
                out.insert(k.to_string(), n);
            }
        }
    }
    Ok(out)
}

/// What a run leaves on the host, removed when dropped whatever happened: the mount
/// directories (the mounts themselves live only in the child's namespace and vanish with it)
/// and the child's POSIX shm objects on the machine's /dev/shm.
struct RunLeftovers {
    dirs: Vec<PathBuf>,
    child: Option<i32>,
}

impl Drop for RunLeftovers {
    fn drop(&mut self) {
        if let Some(pid) = self.child {
            remove_shm_objects(|p| p == pid);
        }
        for d in &self.dirs {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// The machine's /dev/shm.
pub const DEV_SHM_DIR: &str = "/dev/shm";

/// `thplab-<pid>-...` → pid.
pub(super) fn leftover_pid(name: &str) -> Option<i32> {
    name.strip_prefix(SHM_PREFIX)?.split_once('-')?.0.parse().ok()
}

fn remove_shm_objects(which: impl Fn(i32) -> bool) {
    let Ok(rd) = std::fs::read_dir(DEV_SHM_DIR) else { return };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if leftover_pid(&name).is_some_and(&which) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

fn pid_alive(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Remove what runs of processes that no longer exist left behind: `/dev/shm/thplab-<pid>-*`
/// and `<state dir>/mnt/<pid>-*` (a SIGKILLed parent cannot clean up after itself).
pub fn remove_stale_leftovers(paths: &Paths) {
    remove_shm_objects(|pid| !pid_alive(pid));
    if let Ok(rd) = std::fs::read_dir(paths.state_dir.join("mnt")) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.split_once('-').and_then(|(p, _)| p.parse::<i32>().ok()) {
                if !pid_alive(pid) {
                    let _ = std::fs::remove_dir(e.path());
                }
            }
        }
    }
}

static MOUNT_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills two fds.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(LiveError::Child(format!("pipe2: {}", std::io::Error::last_os_error())));
    }
    // SAFETY: fresh fds we own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Signal name for messages.
pub fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGSEGV => "SIGSEGV".into(),
        libc::SIGBUS => "SIGBUS".into(),
        libc::SIGKILL => "SIGKILL".into(),
        libc::SIGABRT => "SIGABRT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGINT => "SIGINT".into(),
        _ => format!("signal {sig}"),
    }
}

/// errno name for the `calls` list.
pub fn errno_name(e: i32) -> String {
    let name = match e {
        0 => "0",
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ENOSYS => "ENOSYS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EHWPOISON => "EHWPOISON",
        _ => return format!("E{e}"),
    };
    name.to_string()
}

/// The spec of one run: a fresh empty directory for each tmpfs mount (removed with
/// `leftovers`).
fn with_mount_dirs(spec: &ExecSpec, paths: &Paths, leftovers: &mut RunLeftovers) -> Result<ExecSpec> {
    let mut spec = spec.clone();
    if !spec.mounts.is_empty() {
        let base = paths.state_dir.join("mnt");
        crate::sysfs::ensure_dir(&base)?;
        for m in spec.mounts.iter_mut() {
            let n = MOUNT_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let d = base.join(format!("{}-{n}", std::process::id()));
            std::fs::create_dir(&d).map_err(|e| crate::io_err("cannot create the mount point", &d, e))?;
            leftovers.dirs.push(d.clone());
            m.dir = d.to_str().ok_or_else(|| LiveError::Child(format!("mount point {} is not UTF-8", d.display())))?.to_string();
        }
    }
    Ok(spec)
}

/// The child, started: its status lines, its control fd, its stderr (read by a thread).
struct Started {
    child: Child,
    status: BufReader<File>,
    control: File,
    stderr: Option<std::thread::JoinHandle<String>>,
}

/// Start the child with the spec on its stdin, the status and control pipes on fds 3 and 4.
fn spawn_child(spec: &ExecSpec, opts: &ExecOptions, memcg: Option<&Memcg>, leftovers: &mut RunLeftovers) -> Result<Started> {
    let spec_json = wire::encode(spec).map_err(LiveError::Child)?;
    let (status_r, status_w) = pipe()?;
    let (control_r, control_w) = pipe()?;
    let (sw, cr) = (status_w.as_raw_fd(), control_r.as_raw_fd());
    let mut cmd = Command::new(&opts.child_program);
    cmd.args(&opts.child_args)
        .env("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=0")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let (procs, cpu) = (spec.procs, opts.cpu);
    let join = memcg.map(|m| std::ffi::CString::new(m.procs().as_os_str().as_encoded_bytes()).unwrap_or_default());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(p) = &join {
                join_memcg(p)?;
            }
            child_pre_exec(procs, cpu, sw, cr)
        })
    };
    let mut child = cmd.spawn().map_err(|e| {
        LiveError::Child(format!("cannot start {} {}: {e}", opts.child_program.display(), opts.child_args.join(" ")))
    })?;
    leftovers.child = Some(child.id() as i32);
    drop(status_w);
    drop(control_r);
    let mut stderr_pipe = child.stderr.take();
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(p) = stderr_pipe.as_mut() {
            let _ = p.read_to_string(&mut s);
        }
        s
    });
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(spec_json.as_bytes());
    }
    Ok(Started { child, status: BufReader::new(File::from(status_r)), control: File::from(control_w), stderr: Some(stderr) })
}

/// Between fork and exec: write `0` (this task) into the run's memcg's `cgroup.procs`
/// (`kernel/cgroup/cgroup.c: cgroup_procs_write_start`), so that everything the child maps is
/// charged there. Also used by program runs (crate::program).
pub(crate) fn join_memcg(procs: &std::ffi::CStr) -> std::io::Result<()> {
    // SAFETY: open/write/close on a valid path and buffer.
    unsafe {
        let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
            let e = std::io::Error::last_os_error();
            if fd >= 0 {
                libc::close(fd);
            }
            return Err(e);
        }
        libc::close(fd);
    }
    Ok(())
}

/// Between fork and exec of the child: its CPU, the executor's own memory in base pages (with
/// processes), no address randomisation, death with the parent, no core, the pipes on 3 and 4.
fn child_pre_exec(procs: usize, cpu: Option<usize>, sw: i32, cr: i32) -> std::io::Result<()> {
    if let Some(c) = cpu {
        crate::host::pin_this_thread(c)?;
    }
    // SAFETY: async-signal-safe calls on this process only.
    unsafe {
        if procs > 1 {
            // The executor's own memory in base pages (cleared before `go`, see child_run).
            libc::prctl(libc::PR_SET_THP_DISABLE, 1 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong);
        }
        let cur = libc::personality(0xffff_ffff);
        if cur != -1 {
            libc::personality((cur as libc::c_ulong) | libc::ADDR_NO_RANDOMIZE as libc::c_ulong);
        }
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
        let no_core = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        libc::setrlimit(libc::RLIMIT_CORE, &no_core);
        // Move both ends out of the way first, so that dup2 onto 3/4 cannot clobber them.
        let a = libc::fcntl(sw, libc::F_DUPFD, 10);
        let b = libc::fcntl(cr, libc::F_DUPFD, 10);
        if a < 0 || b < 0 || libc::dup2(a, STATUS_FD) < 0 || libc::dup2(b, CONTROL_FD) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        libc::close(a);
        libc::close(b);
    }
    Ok(())
}

/// The child failed: killed, and the error names the workload line of the last operation it
/// began (with a hint for SIGSEGV and SIGBUS), or the stage it was at.
fn child_failure(w: &Workload, spec: &ExecSpec, child: &mut Child, last_op: Option<usize>, stage: &str) -> LiveError {
    let _ = child.kill();
    let st = child.wait().ok();
    let sig = st.and_then(|s| s.signal());
    let code = st.and_then(|s| s.code());
    let how = match (sig, code) {
        (Some(s), _) => format!("was killed by {}", signal_name(s)),
        (None, Some(c)) => format!("exited with status {c}"),
        _ => "ended".into(),
    };
    match last_op {
        Some(i) if i < spec.ops.len() => {
            let hint = if sig == Some(libc::SIGSEGV) {
                " (a touch of memory that is not mapped, or not accessible with its protection)"
            } else if sig == Some(libc::SIGBUS) {
                " (a touch beyond the end of the mapped file: ftruncate it first)"
            } else {
                ""
            };
            LiveError::Workload {
                source_name: w.source.clone(),
                line: spec.ops[i].line,
                message: format!("the live run {how} while executing this operation{hint}"),
            }
        }
        _ => LiveError::Child(format!("the child {how} {stage}")),
    }
}

/// The child's `ready` line; a child that ends before it is reported with its stderr.
fn read_ready(w: &Workload, spec: &ExecSpec, s: &mut Started) -> Result<Ready> {
    let mut line = String::new();
    match s.status.read_line(&mut line) {
        Ok(n) if n > 0 && line.starts_with("ready ") => {
            serde_json::from_str(line[6..].trim()).map_err(|e| LiveError::Child(format!("bad ready message '{}': {e}", line.trim())))
        }
        _ => {
            let e = child_failure(w, spec, &mut s.child, None, "before it was ready");
            let err = s.stderr.take().map(|h| h.join().unwrap_or_default()).unwrap_or_default();
            Err(match e {
                LiveError::Child(m) if !err.trim().is_empty() => LiveError::Child(format!("{m}: {}", err.trim())),
                e => e,
            })
        }
    }
}

/// The status lines until `done`: the operation being run (for messages and progress), the
/// other processes' reports.
fn read_until_done(w: &Workload, spec: &ExecSpec, s: &mut Started, at_line: &std::sync::atomic::AtomicUsize) -> Result<(Done, Vec<ProcDone>)> {
    let mut procs_done: Vec<ProcDone> = Vec::new();
    let mut last_op: Option<usize> = None;
    let mut line = String::new();
    loop {
        line.clear();
        match s.status.read_line(&mut line) {
            Ok(n) if n > 0 => {
                let l = line.trim_end();
                if let Some(i) = l.strip_prefix('o') {
                    last_op = i.parse().ok();
                    if let Some(op) = last_op.and_then(|i| spec.ops.get(i)) {
                        at_line.store(op.line, std::sync::atomic::Ordering::Relaxed);
                    }
                } else if let Some(j) = l.strip_prefix("pdone ") {
                    procs_done.push(serde_json::from_str(j).map_err(|e| LiveError::Child(format!("bad pdone message: {e}")))?);
                } else if let Some(j) = l.strip_prefix("done ") {
                    let done = serde_json::from_str(j).map_err(|e| LiveError::Child(format!("bad done message: {e}")))?;
                    return Ok((done, procs_done));
                } else {
                    return Err(LiveError::Child(format!("unexpected message '{l}'")));
                }
            }
            _ => return Err(child_failure(w, spec, &mut s.child, last_op, "during the run")),
        }
    }
}

/// The regions at the end (the heap at the child's `start_brk`, its length break − start_brk
/// as the model reports it) and the address ranges the census walks, merged.
fn end_regions(regions: &[RegionPlacement], ready: &Ready, done: &Done) -> (Vec<RegionPlacement>, Vec<(u64, u64)>) {
    let mut regions: Vec<RegionPlacement> = regions.to_vec();
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for r in regions.iter_mut() {
        if r.name == HEAP {
            r.start = ready.start_brk;
            let mapped = r.len.max(done.brk_end.saturating_sub(ready.start_brk).div_ceil(PAGE_SIZE) * PAGE_SIZE);
            ranges.push((r.start, r.start + mapped));
            // Reported as the model reports it: break − start_brk at the end.
            r.len = done.brk_end.saturating_sub(ready.start_brk);
        } else {
            ranges.push((r.start, r.start + r.len));
        }
    }
    ranges.retain(|&(a, b)| b > a);
    // Regions of different processes may share addresses (each mapped its own at the same
    // place): the census walks each address once.
    ranges.sort_unstable();
    ranges.dedup_by(|next, prev| {
        if next.0 <= prev.1 {
            prev.1 = prev.1.max(next.1);
            true
        } else {
            false
        }
    });
    (regions, ranges)
}

/// Rss and AnonHugePages (kB) of the VMAs that overlap `ranges`.
fn rss_in(vmas: &[Vma], ranges: &[(u64, u64)]) -> (u64, u64) {
    let (mut rss_kb, mut ahp_kb) = (0, 0);
    for v in vmas.iter().filter(|v| ranges.iter().any(|&(a, b)| v.start < b && a < v.end)) {
        rss_kb += v.rss_kb;
        ahp_kb += v.anon_huge_kb;
    }
    (rss_kb, ahp_kb)
}

/// The other processes of the run (main is `procs[0]`, filled by the caller): their faults and
/// results, and the Rss, census and host faults of those still alive (they wait for QUIT).
fn other_procs(
    spec: &ExecSpec,
    procs_done: &[ProcDone],
    ranges: &[(u64, u64)],
    results: &mut [i64],
    procs: &mut Vec<ProcOnce>,
    host_faults: &mut Option<u64>,
    reported: Option<&crate::host::ReportedFrames>,
) -> Result<()> {
    for p in 1..spec.procs {
        let Some(d) = procs_done.iter().find(|d| d.proc == p) else {
            procs.push(ProcOnce::default());
            continue;
        };
        for &(i, rc) in &d.results {
            if let Some(r) = results.get_mut(i) {
                *r = rc;
            }
        }
        let mut one = ProcOnce { minflt: d.minflt, exited: d.exited, ..Default::default() };
        if !d.exited {
            let vmas = read_smaps(d.pid)?;
            let (rss_kb, ahp_kb) = rss_in(&vmas, ranges);
            (one.rss_bytes, one.anon_huge_bytes) = (rss_kb * 1024, ahp_kb * 1024);
            one.census = census_of_ranges(d.pid, ranges, &vmas)?.total;
            if let (Some(n), Some(r)) = (host_faults.as_mut(), reported) {
                *n += r.count_mapped(d.pid, ranges)?;
            }
        }
        procs.push(one);
    }
    Ok(())
}

/// A failed mmap makes the run's counters incomparable: an error naming its line.
fn check_mmaps(w: &Workload, spec: &ExecSpec, results: &[i64]) -> Result<()> {
    for (op, &rc) in spec.ops.iter().zip(results) {
        if let (OpKind::Mmap { len, .. }, Some(at)) = (&op.op, op.at) {
            if rc != 0 {
                return Err(LiveError::Workload {
                    source_name: w.source.clone(),
                    line: op.line,
                    message: format!(
                        "mmap of {len} bytes at {:#x} failed with {} in the live executor (the address is taken \
                         or out of range there); the counters of this run are not comparable",
                        at.addr,
                        errno_name(rc as i32)
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Each phase reached: (name, ns from the start). A phase inside a `repeat` block: the time of
/// its last round.
fn phases_reached(spec: &ExecSpec, results: &[i64], start_ns: u64) -> Vec<(String, u64)> {
    spec.ops
        .iter()
        .zip(results)
        .filter_map(|(op, &t)| match &op.op {
            OpKind::Phase(name) if t > 0 => Some((name.clone(), (t as u64).saturating_sub(start_ns))),
            _ => None,
        })
        .collect()
}

fn run_once(
    w: &Workload,
    spec: &ExecSpec,
    regions: &[RegionPlacement],
    opts: &ExecOptions,
    paths: &Paths,
    reported: Option<&crate::host::ReportedFrames>,
    memcg: Option<&Memcg>,
) -> Result<RunOnce> {
    // Mount points for the child's tmpfs mounts: empty directories on the host.
    let mut leftovers = RunLeftovers { dirs: Vec::new(), child: None };
    let spec = &with_mount_dirs(spec, paths, &mut leftovers)?;
    let mut s = spawn_child(spec, opts, memcg, &mut leftovers)?;
    let ready = read_ready(w, spec, &mut s)?;
    let before = CounterSnapshot::read(&paths.sysfs)?;
    let reclaim_before = memcg.map(|_| pressure::read_reclaim_vmstat()).transpose()?;
    let majflt_before = memcg.and_then(|_| pressure::majflt_of(ready.pid)).unwrap_or(0);
    let meminfo_before = read_meminfo()?;
    s.control.write_all(b"go\n").map_err(|e| LiveError::Child(format!("cannot send 'go': {e}")))?;
    let sampler = opts.sample.map(|every| {
        let ranges = regions.iter().filter(|r| r.name != HEAP).map(|r| (r.start, r.start + r.len)).collect();
        crate::timeline::Sampler::start(ready.pid, ranges, paths.sysfs.clone(), Instant::now(), every, opts.progress)
    });
    // Without samples, a long run still says where it is, once a second.
    let at_line = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let progress = (opts.progress && sampler.is_none()).then(|| crate::timeline::Progress::start(w.source.clone(), at_line.clone()));
    let (done, procs_done) = read_until_done(w, spec, &mut s, &at_line)?;
    let timeline = sampler.map(|s| s.finish()).unwrap_or_default();
    drop(progress);
    let after = CounterSnapshot::read(&paths.sysfs)?;
    let pressure = match (memcg, reclaim_before) {
        (Some(m), Some(b)) => {
            let majflt = pressure::majflt_of(ready.pid).unwrap_or(0).saturating_sub(majflt_before);
            Some(pressure::live_pressure(&opts.pressure, m, &b, &pressure::read_reclaim_vmstat()?, majflt))
        }
        _ => None,
    };
    let meminfo_after = read_meminfo()?;
    let meminfo: BTreeMap<String, i64> =
        meminfo_after.iter().map(|(k, v)| (k.clone(), v - meminfo_before.get(k).copied().unwrap_or(*v))).collect();
    let pid = ready.pid;
    let (regions, ranges) = end_regions(regions, &ready, &done);
    let vmas = read_smaps(pid)?;
    let (rss_kb, ahp_kb) = rss_in(&vmas, &ranges);
    let census = census_of_ranges(pid, &ranges, &vmas)?;
    let mut host_faults = reported.map(|r| r.count_mapped(pid, &ranges)).transpose()?;
    // The other processes: Rss and census of those still alive (they wait for QUIT).
    let mut procs = Vec::new();
    let mut results = done.results;
    if spec.procs > 1 {
        procs.push(ProcOnce { minflt: done.minflt, exited: false, rss_bytes: rss_kb * 1024, anon_huge_bytes: ahp_kb * 1024, census: census.total.clone() });
        other_procs(spec, &procs_done, &ranges, &mut results, &mut procs, &mut host_faults, reported)?;
    }
    let _ = s.control.write_all(b"exit\n");
    drop(s.control);
    let st = s.child.wait().map_err(|e| LiveError::Child(format!("wait: {e}")))?;
    let err = s.stderr.take().map(|h| h.join().unwrap_or_default()).unwrap_or_default();
    if !st.success() {
        return Err(LiveError::Child(format!("the child ended with {st} after the run: {}", err.trim())));
    }
    check_mmaps(w, spec, &results)?;
    Ok(RunOnce {
        minflt: done.minflt,
        wall_ns: done.wall_ns,
        phases: phases_reached(spec, &results, done.start_ns),
        rss_bytes: rss_kb * 1024,
        anon_huge_bytes: ahp_kb * 1024,
        counters: before.delta(&after),
        census: census.total,
        latency: done.latency,
        census_ms: census.elapsed.as_secs_f64() * 1e3,
        census_detail: (
            census.pagemap_time.as_secs_f64() * 1e3,
            census.kpageflags_time.as_secs_f64() * 1e3,
            census.kpageflags_reads,
            census.kpageflags_pfns,
        ),
        results,
        procs,
        meminfo,
        start_brk: ready.start_brk,
        regions,
        timeline,
        host_faults,
        free_lists: None,
        pressure,
    })
}

pub fn run_live(
    w: &Workload,
    settings: &ThpSettings,
    model_regions: &[RegionPlacement],
    opts: &ExecOptions,
) -> Result<RunResult> {
    let paths = Paths::from_env();
    paths.check_available()?;
    let (mut spec, regions, notes) = build_spec(w, model_regions)?;
    spec.latency = opts.latency;
    let repeat = opts.repeat.max(1);
    // The workload's hugetlb pools: set with the knobs, restored with them on every exit path.
    let guard = SettingsGuard::apply_with_pressure_and(settings, &opts.pressure, &super::hugetlb::pool_knobs(w))?;
    let memcg = guard.memcg();
    remove_stale_leftovers(&paths);
    if let Some(m) = guard.recovered() {
        eprintln!("{m}");
    }
    let mut runs = Vec::new();
    let mut run_opts = opts.clone();
    for i in 0..repeat {
        if i > 0 && opts.settle_host {
            crate::host::wait_until_settled(&mut |_| {});
        }
        if opts.settle_host {
            run_opts.cpu = crate::host::cpu_for_run().or(opts.cpu);
        }
        // The THP-sized pages on the CPU's per-CPU list, backed and invisible to the model,
        // are held while the run runs (crate::host::take_cpu_thps).
        let thps = if opts.settle_host { run_opts.cpu.and_then(crate::host::take_cpu_thps) } else { None };
        // The free lists the run starts from and the frames the host has dropped then: the
        // model can run again from them (`live.free_lists`), and the run's frames among them
        // are its host faults (`live.host_faults`, beside the model's `time.host_faults`).
        let start = if opts.settle_host { run_opts.cpu.and_then(crate::host::run_start) } else { None };
        let t = Instant::now();
        let mut r = run_once(w, &spec, &regions, &run_opts, &paths, start.as_ref().map(|s| &s.1), memcg.as_ref())?;
        r.free_lists = start.map(|s| s.0);
        drop(thps);
        if opts.progress {
            eprintln!(
                "live run {}/{}: {} faults, {:.1} ms ops, {:.1} ms total",
                i + 1,
                repeat,
                r.minflt,
                r.wall_ns as f64 / 1e6,
                t.elapsed().as_secs_f64() * 1e3
            );
        }
        runs.push(r);
    }
    guard.restore()?;
    Ok(assemble(w, settings, &spec, runs, notes, opts.sample))
}

