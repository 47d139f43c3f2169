//! Memory pressure for a live run (`--memory-max`, `--swap`): a memory cgroup of the run's own
//! with a limit, and a swap device, created by the settings guard ([`crate::guard`]) after it
//! journalled them and torn down by it on every exit path, like the knobs.
//!
//! Kernel side (6.18):
//! - cgroup v1 (`memory` controller on a `cgroup` mount): `mm/memcontrol-v1.c`
//!   (`mem_cgroup_write` for `memory.limit_in_bytes`; `memory.memsw.limit_in_bytes` is left at
//!   its default, unlimited, so that swap is not limited), `memory.failcnt`, `memory.memsw.failcnt`,
//!   `memory.max_usage_in_bytes`.
//! - cgroup v2 (a `cgroup2` mount whose `cgroup.controllers` lists `memory`): `mm/memcontrol.c`
//!   (`memory_max_write`, `swap_max_write`, `memory_events_show`).
//! - Joining: `kernel/cgroup/cgroup.c: cgroup_procs_write_start` (pid 0 is the writer itself, in
//!   v1's `cgroup.procs` and v2's alike); a directory with tasks cannot be removed
//!   (`cgroup_destroy_locked` returns -EBUSY), so teardown kills what is left in the run's own
//!   cgroup and waits.
//! - zram: `drivers/block/zram/zram_drv.c` (`disksize_store`, `reset_store`: -EBUSY while the
//!   device is open, so swapoff first). A device is free when `disksize` is 0 and /proc/swaps
//!   does not list it; otherwise the run refuses.
//! - swap: `mm/swapfile.c` (`SYSCALL_DEFINE2(swapon)`, `read_swap_header`: version 1, `last_page`,
//!   the `SWAPSPACE2` magic at the end of the first page, as `include/linux/swap.h: union
//!   swap_header` lays it out), `SYSCALL_DEFINE1(swapoff)`. The header is written here, so
//!   mkswap is not needed. The device is swapped on with `SWAP_FLAG_PREFER` at the highest
//!   priority, so the run's pages go to it before any device the machine had.
//!
//! What was created is journalled as a [`Created`] entry before it is created, so a run killed
//! with SIGKILL leaves enough for the next thplab command to undo it; teardown touches only
//! what a journal lists.

use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use thp_abi::{Pressure, SwapKind};

use crate::{io_err, LiveError, Result};

/// The cgroup interface a memcg is driven through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupVersion {
    V1,
    V2,
}

/// One thing a run created, as its journal records it (before it is created).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Created {
    /// A memory cgroup directory `thplab-<pid>`: its tasks killed, then rmdir.
    Memcg { version: CgroupVersion, dir: String },
    /// A zram device made swap: swapoff, then `reset`.
    ZramSwap { device: String, sysfs: String },
    /// A swap file: swapoff, then unlink.
    SwapFile { path: String },
}

/// Where the cgroup hierarchies, zram and swap live (fake trees in tests).
#[derive(Clone, Debug)]
pub struct PressurePaths {
    /// `/proc/self/mountinfo`: which cgroup hierarchy has the memory controller.
    pub mountinfo: PathBuf,
    /// `/proc/swaps`.
    pub proc_swaps: PathBuf,
    /// `/sys/block/zram0`.
    pub zram_sysfs: PathBuf,
    /// `/dev/zram0`.
    pub zram_dev: PathBuf,
    /// Where a swap file goes: `$THPLAB_SWAP_DIR`, default `/var/tmp` (swapon needs a
    /// filesystem with `swap_activate`, so not tmpfs).
    pub swap_dir: PathBuf,
    /// Tests on a fake tree: mkdir also creates the control files the kernel would, rmdir
    /// removes them, and no swapon/swapoff is made.
    pub fake_kernel: bool,
}

impl PressurePaths {
    pub fn from_env() -> PressurePaths {
        PressurePaths {
            mountinfo: "/proc/self/mountinfo".into(),
            proc_swaps: "/proc/swaps".into(),
            zram_sysfs: "/sys/block/zram0".into(),
            zram_dev: "/dev/zram0".into(),
            swap_dir: std::env::var_os("THPLAB_SWAP_DIR").filter(|s| !s.is_empty()).map(PathBuf::from).unwrap_or_else(|| "/var/tmp".into()),
            fake_kernel: false,
        }
    }
}

/// The memory cgroup hierarchy found in a mountinfo text: v1 where a `cgroup` mount carries the
/// `memory` option, else v2 where a `cgroup2` mount's `cgroup.controllers` lists `memory`.
pub fn find_memory_hierarchy(mountinfo: &str) -> Option<(CgroupVersion, PathBuf)> {
    let mut v2 = Vec::new();
    for line in mountinfo.lines() {
        let Some((pre, post)) = line.split_once(" - ") else { continue };
        let Some(mount_point) = pre.split_whitespace().nth(4) else { continue };
        let mut post = post.split_whitespace();
        let (fstype, super_opts) = (post.next().unwrap_or(""), post.nth(1).unwrap_or(""));
        let mp = PathBuf::from(mount_point.replace("\\040", " "));
        if fstype == "cgroup" && super_opts.split(',').any(|o| o == "memory") {
            return Some((CgroupVersion::V1, mp));
        }
        if fstype == "cgroup2" {
            v2.push(mp);
        }
    }
    v2.into_iter()
        .find(|mp| std::fs::read_to_string(mp.join("cgroup.controllers")).is_ok_and(|c| c.split_whitespace().any(|w| w == "memory")))
        .map(|mp| (CgroupVersion::V2, mp))
}

/// This process's cgroup in the memory hierarchy, from /proc/self/cgroup: v1 the line whose
/// controllers include `memory`, v2 the `0::` line.
pub fn own_cgroup(text: &str, version: CgroupVersion) -> Option<String> {
    text.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (id, ctrl, path) = (f.next()?, f.next()?, f.next()?);
        let hit = match version {
            CgroupVersion::V1 => ctrl.split(',').any(|c| c == "memory"),
            CgroupVersion::V2 => id == "0" && ctrl.is_empty(),
        };
        hit.then(|| path.to_string())
    })
}

/// The run's memcg, for joining it and reading its counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Memcg {
    pub version: CgroupVersion,
    pub dir: PathBuf,
}

impl Memcg {
    /// `cgroup.procs` (both versions): a task writes `0` into it to join.
    pub fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Move this process (thplab itself, for `thplab record`: the recorder forks the program,
    /// which inherits the memcg) into the memcg; returns the `cgroup.procs` of the cgroup it
    /// was in (/proc/self/cgroup), to go back to with [`Memcg::leave_to`] before teardown
    /// (a directory with a task in it cannot be removed).
    pub fn join_self(&self) -> Result<PathBuf> {
        let root = self.dir.parent().map(Path::to_path_buf).unwrap_or_default();
        let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| io_err("cannot read", "/proc/self/cgroup", e))?;
        let rel = own_cgroup(&own, self.version).unwrap_or_else(|| "/".into());
        let back = root.join(rel.trim_start_matches('/')).join("cgroup.procs");
        write_file(&self.procs(), "0")?;
        Ok(back)
    }

    /// Move this process back to `procs` (what [`Memcg::join_self`] returned).
    pub fn leave_to(&self, procs: &Path) -> Result<()> {
        write_file(procs, "0")
    }

    /// The memcg's own counters now: v2 `memory.events` (`low`, `high`, `max`, `oom`,
    /// `oom_kill`, ...) and `memory.peak`; v1 `memory.failcnt`, `memory.memsw.failcnt` and
    /// `memory.max_usage_in_bytes` (as `max_usage_in_bytes`). Files that do not exist are left out.
    pub fn counters(&self) -> std::collections::BTreeMap<String, i64> {
        let mut out = std::collections::BTreeMap::new();
        let one = |name: &str| std::fs::read_to_string(self.dir.join(name)).ok().and_then(|t| t.trim().parse::<i64>().ok());
        match self.version {
            CgroupVersion::V2 => {
                if let Ok(t) = std::fs::read_to_string(self.dir.join("memory.events")) {
                    for l in t.lines() {
                        if let Some((k, v)) = l.split_once(' ').and_then(|(k, v)| Some((k, v.trim().parse::<i64>().ok()?))) {
                            out.insert(k.to_string(), v);
                        }
                    }
                }
                if let Some(v) = one("memory.peak") {
                    out.insert("peak".into(), v);
                }
            }
            CgroupVersion::V1 => {
                for (file, key) in [("memory.failcnt", "failcnt"), ("memory.memsw.failcnt", "memsw.failcnt"), ("memory.max_usage_in_bytes", "max_usage_in_bytes")] {
                    if let Some(v) = one(file) {
                        out.insert(key.into(), v);
                    }
                }
            }
        }
        out
    }
}

/// The [`thp_abi::ReclaimEvent`] lines of /proc/vmstat now.
pub fn read_reclaim_vmstat() -> Result<std::collections::BTreeMap<String, i64>> {
    let text = std::fs::read_to_string("/proc/vmstat").map_err(|e| io_err("cannot read", "/proc/vmstat", e))?;
    Ok(parse_reclaim_vmstat(&text))
}

fn parse_reclaim_vmstat(text: &str) -> std::collections::BTreeMap<String, i64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            thp_abi::ReclaimEvent::from_name(k)?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// `majflt` of /proc/PID/stat plus `cmajflt` (its reaped children's), fields 12 and 13.
pub fn majflt_of(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command (which may hold spaces) start with the state, field 3.
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(12 - 3)?.parse::<u64>().ok()? + f.get(13 - 3)?.parse::<u64>().ok()?)
}

/// The result's `live.pressure` of one run: the reclaim deltas, the major faults and the
/// memcg's counters now.
pub fn live_pressure(
    pressure: &Pressure,
    memcg: &Memcg,
    before: &std::collections::BTreeMap<String, i64>,
    after: &std::collections::BTreeMap<String, i64>,
    majflt: u64,
) -> uapi::result::LivePressure {
    uapi::result::LivePressure {
        memory_max: pressure.memory_max,
        swap: thp_abi::SwapSpec::spelling(pressure.swap.as_ref()),
        cgroup: match memcg.version {
            CgroupVersion::V1 => "v1".into(),
            CgroupVersion::V2 => "v2".into(),
        },
        vmstat: after.iter().map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(*v))).collect(),
        majflt,
        memcg: memcg.counters(),
    }
}

/// Under pressure, the reclaim and swap lines the model's result carries in `vmstat`
/// (`thp_abi::pressure::RESULT_RECLAIM`, from `p.vmstat`) and the major faults, so that
/// `compare` judges them (a workload's result and a program's alike).
pub fn result_lines(res: &mut uapi::RunResult, p: &uapi::result::LivePressure) {
    for e in thp_abi::pressure::RESULT_RECLAIM {
        res.vmstat.insert(e.name().into(), p.vmstat.get(e.name()).copied().unwrap_or(0));
    }
    res.process.majflt = Some(p.majflt);
}

/// What a pressure set-up will create, decided (and checked) before anything is: the memcg's
/// directory and the swap. Refuses a zram device in use, and a machine without a memory cgroup.
pub fn plan(pressure: &Pressure, pp: &PressurePaths) -> Result<Vec<Created>> {
    let mut out = Vec::new();
    match pressure.swap {
        None => {}
        Some(s) if s.kind == SwapKind::Zram => {
            check_zram_free(pp)?;
            out.push(Created::ZramSwap { device: path_string(&pp.zram_dev)?, sysfs: path_string(&pp.zram_sysfs)? });
        }
        Some(_) => {
            let path = pp.swap_dir.join(format!("thplab-swap-{}", std::process::id()));
            if path.exists() {
                return Err(LiveError::NotAvailable(format!("{} exists already; remove it or set THPLAB_SWAP_DIR", path.display())));
            }
            out.push(Created::SwapFile { path: path_string(&path)? });
        }
    }
    if pressure.memory_max.is_some() || pressure.swap.is_some() {
        let info = std::fs::read_to_string(&pp.mountinfo).map_err(|e| io_err("cannot read", &pp.mountinfo, e))?;
        let (version, root) = find_memory_hierarchy(&info).ok_or_else(|| {
            LiveError::NotAvailable(format!(
                "--memory-max needs a memory cgroup: no cgroup v1 mount with the memory controller and no cgroup2 mount whose cgroup.controllers lists memory in {}",
                pp.mountinfo.display()
            ))
        })?;
        if version == CgroupVersion::V2 && !read_trim(&root.join("cgroup.subtree_control")).split_whitespace().any(|w| w == "memory") {
            return Err(LiveError::NotAvailable(format!(
                "the memory controller is not enabled in {}/cgroup.subtree_control, so a child cgroup has no memory.max (enable it with: echo +memory > {}/cgroup.subtree_control)",
                root.display(),
                root.display()
            )));
        }
        let dir = root.join(format!("thplab-{}", std::process::id()));
        out.push(Created::Memcg { version, dir: path_string(&dir)? });
    }
    Ok(out)
}

fn path_string(p: &Path) -> Result<String> {
    p.to_str().map(str::to_string).ok_or_else(|| LiveError::NotAvailable(format!("{} is not UTF-8", p.display())))
}

fn read_trim(p: &Path) -> String {
    std::fs::read_to_string(p).map(|t| t.trim().to_string()).unwrap_or_default()
}

/// zram0 is free when it exists, its `disksize` is 0 and /proc/swaps does not list it.
fn check_zram_free(pp: &PressurePaths) -> Result<()> {
    let ds = pp.zram_sysfs.join("disksize");
    let size = std::fs::read_to_string(&ds).map_err(|e| {
        LiveError::NotAvailable(format!("--swap zram needs {}: {e} (load the zram module: modprobe zram)", ds.display()))
    })?;
    let swaps = std::fs::read_to_string(&pp.proc_swaps).map_err(|e| io_err("cannot read", &pp.proc_swaps, e))?;
    let dev = pp.zram_dev.display().to_string();
    if size.trim() != "0" || swaps.lines().skip(1).any(|l| l.split_whitespace().next() == Some(dev.as_str())) {
        return Err(LiveError::NotAvailable(format!(
            "{dev} is in use (disksize {}, {}): thplab uses only a zram device nobody uses and never touches one it did not set up; \
             free it (swapoff {dev}; echo 1 > {}/reset) or use --swap file:SIZE",
            size.trim(),
            if swaps.contains(&dev) { "listed in /proc/swaps" } else { "not in /proc/swaps" },
            pp.zram_sysfs.display()
        )));
    }
    Ok(())
}

/// Create one planned thing: the memcg with its limit, or the swap device swapped on.
pub fn create(c: &Created, pressure: &Pressure, pp: &PressurePaths) -> Result<()> {
    match c {
        Created::Memcg { version, dir } => create_memcg(*version, Path::new(dir), pressure.memory_max, pp),
        Created::ZramSwap { device, sysfs } => {
            let bytes = pressure.swap.map(|s| s.bytes).unwrap_or(0);
            write_file(&Path::new(sysfs).join("disksize"), &bytes.to_string())?;
            write_swap_header(Path::new(device), bytes, false)?;
            swapon(Path::new(device), pp)
        }
        Created::SwapFile { path } => {
            let bytes = pressure.swap.map(|s| s.bytes).unwrap_or(0);
            write_swap_header(Path::new(path), bytes, true)?;
            swapon(Path::new(path), pp)
        }
    }
}

/// The kernel's control files of a new memcg (for the fake tree).
const FAKE_FILES: [&str; 4] = ["cgroup.procs", "memory.limit_in_bytes", "memory.max", "memory.swap.max"];

fn create_memcg(version: CgroupVersion, dir: &Path, limit: Option<u64>, pp: &PressurePaths) -> Result<()> {
    std::fs::create_dir(dir).map_err(|e| io_err("cannot create the run's memory cgroup", dir, e))?;
    if pp.fake_kernel {
        for f in FAKE_FILES {
            let _ = std::fs::write(dir.join(f), "");
        }
    }
    let limit = limit.map(|b| b.to_string());
    match version {
        CgroupVersion::V1 => {
            if let Some(l) = &limit {
                write_file(&dir.join("memory.limit_in_bytes"), l)?;
            }
        }
        CgroupVersion::V2 => {
            write_file(&dir.join("memory.max"), limit.as_deref().unwrap_or("max"))?;
            write_file(&dir.join("memory.swap.max"), "max")?;
        }
    }
    Ok(())
}

fn write_file(p: &Path, value: &str) -> Result<()> {
    let mut f = std::fs::OpenOptions::new().write(true).truncate(true).open(p).map_err(|e| io_err("cannot open for writing", p, e))?;
    f.write_all(value.as_bytes())
        .map_err(|e| LiveError::Knob { path: p.display().to_string(), message: format!("the kernel refused '{value}': {e}") })
}

/// The swap header of `include/linux/swap.h: union swap_header` (version 1, `last_page`,
/// no bad pages, the `SWAPSPACE2` magic in the last 10 bytes of the first page), written at the
/// start of `path`; a file (`create`) is first made `bytes` long with fallocate and mode 0600.
pub fn write_swap_header(path: &Path, bytes: u64, create: bool) -> Result<()> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true);
    if create {
        o.create_new(true).mode(0o600);
    }
    let f = o.open(path).map_err(|e| io_err("cannot open the swap device", path, e))?;
    if create {
        // SAFETY: fallocate on a valid fd.
        if unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, bytes as libc::off_t) } != 0 {
            return Err(io_err("cannot fallocate the swap file", path, std::io::Error::last_os_error()));
        }
    }
    let page = mm_types::PAGE_SIZE as usize;
    let mut h = vec![0u8; page];
    h[1024..1028].copy_from_slice(&1u32.to_ne_bytes());
    let last_page = (bytes / page as u64).saturating_sub(1) as u32;
    h[1028..1032].copy_from_slice(&last_page.to_ne_bytes());
    h[page - 10..].copy_from_slice(b"SWAPSPACE2");
    use std::os::unix::fs::FileExt;
    f.write_all_at(&h, 0).map_err(|e| io_err("cannot write the swap header to", path, e))?;
    f.sync_all().map_err(|e| io_err("cannot sync", path, e))
}

fn cstring(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| LiveError::NotAvailable(format!("{} contains NUL", p.display())))
}

/// swapon(2) at the highest priority (`SWAP_FLAG_PREFER | 32767`).
fn swapon(path: &Path, pp: &PressurePaths) -> Result<()> {
    if pp.fake_kernel {
        return Ok(());
    }
    let c = cstring(path)?;
    const SWAP_FLAG_PREFER: libc::c_int = 0x8000;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::swapon(c.as_ptr(), SWAP_FLAG_PREFER | 32767) } != 0 {
        return Err(io_err("swapon failed for", path, std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Undo one created thing; what is already gone is fine. Returns what could not be undone.
pub fn teardown(c: &Created, pp: &PressurePaths) -> std::result::Result<(), String> {
    match c {
        Created::Memcg { dir, .. } => remove_memcg(Path::new(dir), pp),
        Created::ZramSwap { device, sysfs } => {
            swapoff_if_listed(Path::new(device), pp)?;
            let ds = read_trim(&Path::new(sysfs).join("disksize"));
            if ds.is_empty() || ds == "0" {
                return Ok(());
            }
            write_file(&Path::new(sysfs).join("reset"), "1").map_err(|e| e.to_string())?;
            if pp.fake_kernel {
                let _ = std::fs::write(Path::new(sysfs).join("disksize"), "0\n");
            }
            Ok(())
        }
        Created::SwapFile { path } => {
            swapoff_if_listed(Path::new(path), pp)?;
            match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!("cannot remove the swap file {path}: {e}")),
                _ => Ok(()),
            }
        }
    }
}

fn swapoff_if_listed(dev: &Path, pp: &PressurePaths) -> std::result::Result<(), String> {
    let swaps = std::fs::read_to_string(&pp.proc_swaps).unwrap_or_default();
    let d = dev.display().to_string();
    if pp.fake_kernel || !swaps.lines().skip(1).any(|l| l.split_whitespace().next() == Some(d.as_str())) {
        return Ok(());
    }
    let c = cstring(dev).map_err(|e| e.to_string())?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::swapoff(c.as_ptr()) } != 0 {
        return Err(format!("swapoff {d}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Kill the tasks left in the run's own memcg (only the run's: the executor's child and what it
/// started), wait for them to leave, and remove the directory.
fn remove_memcg(dir: &Path, pp: &PressurePaths) -> std::result::Result<(), String> {
    if !dir.exists() {
        return Ok(());
    }
    if pp.fake_kernel {
        for f in FAKE_FILES {
            let _ = std::fs::remove_file(dir.join(f));
        }
    }
    let t0 = Instant::now();
    loop {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            if pid > 1 && pid != std::process::id() as i32 {
                // SAFETY: kill of a task in the run's own cgroup.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if t0.elapsed() > Duration::from_secs(10) => {
                return Err(format!("cannot remove the memory cgroup {}: {e} (tasks: {})", dir.display(), procs.split_whitespace().collect::<Vec<_>>().join(" ")))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// The teardown a signal handler can do with raw syscalls only, prepared in advance.
pub(crate) enum RawStep {
    Memcg { procs: CString, dir: CString },
    Swap { dev: CString, reset: Option<CString>, unlink: bool },
}

/// The raw steps of `created`, in teardown order (the reverse of creation).
pub(crate) fn raw_steps(created: &[Created]) -> Vec<RawStep> {
    let c = |s: &str| CString::new(s).unwrap_or_default();
    created
        .iter()
        .rev()
        .map(|x| match x {
            Created::Memcg { dir, .. } => RawStep::Memcg { procs: c(&format!("{dir}/cgroup.procs")), dir: c(dir) },
            Created::ZramSwap { device, sysfs } => RawStep::Swap { dev: c(device), reset: Some(c(&format!("{sysfs}/reset"))), unlink: false },
            Created::SwapFile { path } => RawStep::Swap { dev: c(path), reset: None, unlink: true },
        })
        .collect()
}

/// Run the raw steps (in a signal handler: open, read, kill, rmdir, nanosleep, swapoff, write,
/// unlink). Returns true when everything was undone.
pub(crate) fn raw_teardown(steps: &[RawStep], fake: bool) -> bool {
    let mut ok = true;
    for s in steps {
        ok &= match s {
            RawStep::Memcg { procs, dir } => raw_remove_memcg(procs, dir),
            // SAFETY: syscalls on valid NUL-terminated paths.
            RawStep::Swap { dev, reset, unlink } => unsafe {
                let off = fake || libc::swapoff(dev.as_ptr()) == 0 || *libc::__errno_location() == libc::EINVAL;
                let reset_ok = reset.as_ref().is_none_or(|r| fake || raw_write_str(r, b"1"));
                let unlink_ok = !*unlink || libc::unlink(dev.as_ptr()) == 0 || *libc::__errno_location() == libc::ENOENT;
                off && reset_ok && unlink_ok
            },
        };
    }
    ok
}

fn raw_write_str(path: &CString, v: &[u8]) -> bool {
    // SAFETY: plain syscalls on a valid path and buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let n = libc::write(fd, v.as_ptr().cast(), v.len());
        libc::close(fd);
        n == v.len() as isize
    }
}

/// Kill the tasks listed in `procs` (parsed by hand: no allocation) and rmdir, retrying for up
/// to 5 s while they exit.
fn raw_remove_memcg(procs: &CString, dir: &CString) -> bool {
    for _ in 0..250 {
        // SAFETY: plain syscalls on valid paths and a stack buffer.
        unsafe {
            let fd = libc::open(procs.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd >= 0 {
                let mut buf = [0u8; 4096];
                let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
                libc::close(fd);
                let mut pid: i32 = 0;
                for &b in buf.iter().take(n.max(0) as usize) {
                    if b.is_ascii_digit() {
                        pid = pid.saturating_mul(10).saturating_add((b - b'0') as i32);
                    } else {
                        if pid > 1 && pid != libc::getpid() {
                            libc::kill(pid, libc::SIGKILL);
                        }
                        pid = 0;
                    }
                }
            }
            if libc::rmdir(dir.as_ptr()) == 0 || *libc::__errno_location() == libc::ENOENT {
                return true;
            }
            let ts = libc::timespec { tv_sec: 0, tv_nsec: 20_000_000 };
            libc::nanosleep(&ts, std::ptr::null_mut());
        }
    }
    false
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use thp_abi::SwapSpec;

    const MOUNTINFO_V1: &str = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
        35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
        41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("thplab-pressure-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A fake machine: a cgroup2 root at `d/cg` with memory enabled, zram0 free, no swap.
    pub(crate) fn fake_v2(d: &Path) -> PressurePaths {
        let cg = d.join("cg");
        std::fs::create_dir_all(&cg).unwrap();
        std::fs::write(cg.join("cgroup.controllers"), "cpuset cpu io memory pids\n").unwrap();
        std::fs::write(cg.join("cgroup.subtree_control"), "cpu memory\n").unwrap();
        std::fs::write(d.join("mountinfo"), format!("30 1 0:26 / {} rw - cgroup2 cgroup2 rw,nsdelegate\n", cg.display())).unwrap();
        std::fs::write(d.join("swaps"), "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n").unwrap();
        let z = d.join("zram0");
        std::fs::create_dir_all(&z).unwrap();
        std::fs::write(z.join("disksize"), "0\n").unwrap();
        std::fs::write(z.join("reset"), "").unwrap();
        std::fs::write(d.join("dev-zram0"), "").unwrap();
        PressurePaths {
            mountinfo: d.join("mountinfo"),
            proc_swaps: d.join("swaps"),
            zram_sysfs: z,
            zram_dev: d.join("dev-zram0"),
            swap_dir: d.to_path_buf(),
            fake_kernel: true,
        }
    }

    #[test]
    fn mountinfo_picks_v1_memory_before_a_cgroup2_mount() {
        let (v, p) = find_memory_hierarchy(MOUNTINFO_V1).unwrap();
        assert_eq!((v, p), (CgroupVersion::V1, PathBuf::from("/sys/fs/cgroup/memory")));
        // A cgroup2 mount whose controllers do not list memory is not a memory hierarchy.
        assert_eq!(find_memory_hierarchy("41 31 0:38 / /nonexistent-thplab rw - cgroup2 cgroup2 rw\n"), None);
    }

    #[test]
    fn v2_plan_creates_memcg_with_max_and_swap_max_and_teardown_removes_it() {
        let d = tmpdir("v2");
        let pp = fake_v2(&d);
        let pressure = Pressure { memory_max: Some(32 << 20), swap: SwapSpec::parse("zram:64M").unwrap() };
        let plan = plan(&pressure, &pp).unwrap();
        let dir = d.join("cg").join(format!("thplab-{}", std::process::id()));
        assert_eq!(plan.len(), 2);
        assert!(matches!(&plan[0], Created::ZramSwap { .. }));
        assert_eq!(plan[1], Created::Memcg { version: CgroupVersion::V2, dir: dir.display().to_string() });
        create(&plan[1], &pressure, &pp).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("memory.max")).unwrap(), "33554432");
        assert_eq!(std::fs::read_to_string(dir.join("memory.swap.max")).unwrap(), "max");
        teardown(&plan[1], &pp).unwrap();
        assert!(!dir.exists());
        // The journal's spelling of a created thing.
        assert_eq!(serde_json::to_string(&plan[1]).unwrap(), format!("{{\"kind\":\"memcg\",\"version\":\"v2\",\"dir\":\"{}\"}}", dir.display()));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn zram_in_use_is_refused_and_untouched() {
        let d = tmpdir("zram-busy");
        let pp = fake_v2(&d);
        std::fs::write(pp.zram_sysfs.join("disksize"), "1073741824\n").unwrap();
        let pressure = Pressure { memory_max: None, swap: SwapSpec::parse("zram:64M").unwrap() };
        let e = plan(&pressure, &pp).unwrap_err().to_string();
        assert!(e.contains("is in use (disksize 1073741824") && e.contains("--swap file:SIZE"), "{e}");
        assert_eq!(std::fs::read_to_string(pp.zram_sysfs.join("disksize")).unwrap(), "1073741824\n");
        // Listed in /proc/swaps with disksize 0 (a race, or a stale sysfs view): refused too.
        std::fs::write(pp.zram_sysfs.join("disksize"), "0\n").unwrap();
        std::fs::write(&pp.proc_swaps, format!("Filename Type Size Used Priority\n{} partition 65532 0 -2\n", pp.zram_dev.display())).unwrap();
        assert!(plan(&pressure, &pp).unwrap_err().to_string().contains("listed in /proc/swaps"));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn v2_without_memory_in_subtree_control_says_how_to_enable_it() {
        let d = tmpdir("v2-nomem");
        let pp = fake_v2(&d);
        std::fs::write(d.join("cg").join("cgroup.subtree_control"), "cpu\n").unwrap();
        let pressure = Pressure { memory_max: Some(64 << 20), swap: None };
        let e = plan(&pressure, &pp).unwrap_err().to_string();
        assert!(e.contains("cgroup.subtree_control") && e.contains("+memory"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn reclaim_lines_of_vmstat_and_majflt_of_stat() {
        let m = parse_reclaim_vmstat("nr_free_pages 5\npswpin 12\npswpout 40\nthp_swpout 3\ncompact_stall 2\n");
        assert_eq!(m.into_iter().collect::<Vec<_>>(), [("compact_stall".to_string(), 2), ("pswpin".into(), 12), ("pswpout".into(), 40)]);
        assert!(majflt_of(std::process::id() as i32).is_some());
    }

    #[test]
    fn own_cgroup_reads_the_memory_line_of_v1_or_the_v2_line() {
        let t = "12:pids:/user.slice\n6:memory:/user.slice/user-0.slice\n0::/user.slice/session-1.scope\n";
        assert_eq!(own_cgroup(t, CgroupVersion::V1).as_deref(), Some("/user.slice/user-0.slice"));
        assert_eq!(own_cgroup(t, CgroupVersion::V2).as_deref(), Some("/user.slice/session-1.scope"));
        assert_eq!(own_cgroup("0::/\n", CgroupVersion::V1), None);
    }

    #[test]
    fn swap_header_is_version_1_with_last_page_and_magic() {
        let d = tmpdir("hdr");
        let p = d.join("swapfile");
        write_swap_header(&p, 1 << 20, true).unwrap();
        let b = std::fs::read(&p).unwrap();
        assert_eq!(b.len(), 1 << 20);
        assert_eq!(u32::from_ne_bytes(b[1024..1028].try_into().unwrap()), 1);
        // 256 pages: the last is 255.
        assert_eq!(u32::from_ne_bytes(b[1028..1032].try_into().unwrap()), 255);
        assert_eq!(&b[4086..4096], b"SWAPSPACE2");
        let _ = std::fs::remove_dir_all(&d);
    }
}
