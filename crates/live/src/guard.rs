//! The settings guard: the only way the harness writes THP knobs.
//!
//! [`SettingsGuard::apply`] takes an exclusive `flock` on `$THPLAB_STATE_DIR/lock` (default
//! `/run/thplab`), reads the current value of every knob it is going to change, writes those
//! originals to `journal.json` and fsyncs it, and only then writes the knobs (in
//! [`ThpSettings::knobs`] order, only those that differ, each read back). The originals go back
//! when the guard is dropped (also on unwind), from a panic hook (covers `panic = "abort"`), and
//! from a SIGINT/SIGTERM/SIGHUP handler that restores with raw syscalls and exits with 128+sig.
//! A run killed with SIGKILL leaves the journal behind: [`recover_if_needed`], called at the
//! start of every thplab command, restores it once no live process holds the lock.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::Once;
use std::thread::ThreadId;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use thp_abi::ThpSettings;

use crate::pressure::{self, Created, Memcg, PressurePaths, RawStep};
use crate::sysfs::{ensure_dir, read_knob, write_knobs_with_retry, Paths};
use thp_abi::Pressure;
use crate::{io_err, LiveError, Result};

/// The 2 MiB hugetlb pool size, as a path relative to the THP directory
/// (`/sys/kernel/mm/transparent_hugepage/../hugepages/hugepages-2048kB/nr_hugepages`), so that it
/// is journalled and restored as the THP knobs are (and lies beside a fake tree in tests).
pub const NR_HUGEPAGES_2M: &str = "../hugepages/hugepages-2048kB/nr_hugepages";

/// What `journal.json` holds: enough to put the machine back without the process that wrote it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Journal {
    pub pid: i32,
    /// Seconds since the epoch when the guard was applied.
    pub start_time: u64,
    /// The THP sysfs directory the paths are relative to.
    pub sysfs: String,
    /// (knob path, value before the run), in the order the knobs were written.
    pub knobs: Vec<JournalEntry>,
    /// The memcg and swap the run creates (`--memory-max`, `--swap`), in the order of
    /// creation, each listed before it is created; torn down in the reverse order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub created: Vec<Created>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JournalEntry {
    pub path: String,
    pub original: String,
    pub applied: String,
}

/// What a signal handler or the panic hook needs to restore, prepared in advance so that the
/// signal handler only does open/write/close/unlink.
struct RestorePlan {
    entries: Vec<(CString, Vec<u8>)>,
    /// The memcg and swap to tear down after the knobs.
    steps: Vec<RawStep>,
    fake_kernel: bool,
    journal: CString,
    owner: ThreadId,
    done: AtomicBool,
}

/// The active plan (at most one guard per process: the flock serialises guards).
/// Plans are leaked, never freed, so that a handler running on another thread never reads freed
/// memory.
static ACTIVE: AtomicPtr<RestorePlan> = AtomicPtr::new(std::ptr::null_mut());
static PANIC_HOOK: Once = Once::new();
const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Holds the lock and the changed knobs; restores them when dropped.
pub struct SettingsGuard {
    paths: Paths,
    lock: Option<File>,
    changed: Vec<JournalEntry>,
    /// What was planned for `--memory-max`/`--swap` (journalled; some may not exist yet).
    created: Vec<Created>,
    pressure_paths: PressurePaths,
    plan: *mut RestorePlan,
    old_actions: Vec<(libc::c_int, libc::sigaction)>,
    recovered: Option<String>,
    finished: bool,
}

// The raw pointer is only a handle to a leaked, immutable (apart from atomics) plan.
unsafe impl Send for SettingsGuard {}

impl SettingsGuard {
    /// Apply `settings` to the real tree (see the module docs).
    pub fn apply(settings: &ThpSettings) -> Result<SettingsGuard> {
        SettingsGuard::apply_at(settings, &Paths::from_env())
    }

    /// Apply `settings` to the tree and state directory in `paths`.
    pub fn apply_at(settings: &ThpSettings, paths: &Paths) -> Result<SettingsGuard> {
        SettingsGuard::apply_with_at(settings, &[], paths)
    }

    /// Apply `settings` and reserve `pages` 2 MiB pages in the hugetlb pool
    /// (`/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages`, the same pool as
    /// /proc/sys/vm/nr_hugepages on x86-64), journalled and restored like every knob. The
    /// reservation fails (and nothing stays changed) when the kernel cannot grow the pool that far.
    pub fn apply_with_hugetlb_pool(settings: &ThpSettings, pages: u64) -> Result<SettingsGuard> {
        SettingsGuard::apply_with_at(settings, &[(NR_HUGEPAGES_2M.to_string(), pages.to_string())], &Paths::from_env())
    }

    /// Apply `settings` plus `extra` (knob path relative to the THP directory, value), such as
    /// [`NR_HUGEPAGES_2M`]; `extra` is written after the THP knobs and restored with them.
    pub fn apply_with_at(settings: &ThpSettings, extra: &[(String, String)], paths: &Paths) -> Result<SettingsGuard> {
        SettingsGuard::apply_built_at(paths, extra, |_| Ok(settings.clone()), &Pressure::default(), &PressurePaths::from_env())
    }

    /// [`SettingsGuard::apply_with_pressure`] plus `extra` knobs (such as a workload's hugetlb
    /// pools, `executor::hugetlb::pool_knobs`), written after the THP knobs and restored with them.
    pub fn apply_with_pressure_and(settings: &ThpSettings, pressure: &Pressure, extra: &[(String, String)]) -> Result<SettingsGuard> {
        SettingsGuard::apply_built_at(&Paths::from_env(), extra, |_| Ok(settings.clone()), pressure, &PressurePaths::from_env())
    }

    /// Apply `settings` and, for `--memory-max`/`--swap`, create the run's memcg and swap
    /// device (crate::pressure), journalled and torn down like the knobs. With no pressure,
    /// exactly [`SettingsGuard::apply`].
    pub fn apply_with_pressure(settings: &ThpSettings, pressure: &Pressure) -> Result<SettingsGuard> {
        SettingsGuard::apply_built_at(&Paths::from_env(), &[], |_| Ok(settings.clone()), pressure, &PressurePaths::from_env())
    }

    /// Only `--memory-max`/`--swap`: the memcg and swap, no knob changed (the settings are the
    /// knobs as found once the lock is taken), for `thplab record`.
    pub fn pressure_only(pressure: &Pressure) -> Result<SettingsGuard> {
        SettingsGuard::apply_built_at(&Paths::from_env(), &[], current_settings, pressure, &PressurePaths::from_env())
    }

    /// [`SettingsGuard::apply_with_pressure`] on the given trees (tests: fake ones).
    pub fn apply_with_pressure_at(settings: &ThpSettings, pressure: &Pressure, paths: &Paths, pp: &PressurePaths) -> Result<SettingsGuard> {
        SettingsGuard::apply_built_at(paths, &[], |_| Ok(settings.clone()), pressure, pp)
    }

    /// Take the lock, then apply what `build` returns: `build` runs under the lock, after a
    /// crashed run's journal was restored, so it may start from the knobs as they are then.
    fn apply_built_at(
        paths: &Paths,
        extra: &[(String, String)],
        build: impl FnOnce(&Paths) -> Result<ThpSettings>,
        pressure: &Pressure,
        pp: &PressurePaths,
    ) -> Result<SettingsGuard> {
        paths.check_available()?;
        let lock = take_lock(paths, true)?.ok_or_else(|| LiveError::Child("lock not taken".into()))?;
        // A crashed run whose lock is gone left its journal: put those values back first, or we
        // would record its values as the originals.
        let recovered = recover_locked(paths, pp)?;
        write_pid(&lock, paths)?;
        let settings = &build(paths)?;

        let mut changed = Vec::new();
        for (rel, value) in settings.knobs() {
            if !paths.knob(&rel).exists() {
                return Err(LiveError::Knob {
                    path: rel,
                    message: format!("does not exist under {} on this kernel", paths.sysfs.display()),
                });
            }
            let cur = read_knob(paths, &rel)?;
            if cur != value {
                changed.push(JournalEntry { path: rel, original: cur, applied: value });
            }
        }
        // Knobs of this kernel build that upstream 6.18 lacks: set to upstream behaviour unless
        // the settings name them.
        for (rel, value) in settings.upstream_build_knobs() {
            if !paths.knob(&rel).exists() {
                continue;
            }
            let cur = read_knob(paths, &rel)?;
            if cur != value {
                changed.push(JournalEntry { path: rel, original: cur, applied: value });
            }
        }
        for (rel, value) in extra {
            if !paths.knob(rel).exists() {
                return Err(LiveError::Knob {
                    path: rel.clone(),
                    message: format!("does not exist beside {} on this kernel", paths.sysfs.display()),
                });
            }
            let cur = read_knob(paths, rel)?;
            if &cur != value {
                changed.push(JournalEntry { path: rel.clone(), original: cur, applied: value.clone() });
            }
        }
        // Checked before anything is changed: a zram device in use or no memory cgroup refuses.
        let created = pressure::plan(pressure, pp)?;
        let mut guard = SettingsGuard {
            paths: paths.clone(),
            lock: Some(lock),
            changed,
            created,
            pressure_paths: pp.clone(),
            plan: std::ptr::null_mut(),
            old_actions: Vec::new(),
            recovered,
            finished: false,
        };
        if guard.changed.is_empty() && guard.created.is_empty() {
            return Ok(guard);
        }
        let journal = Journal {
            pid: std::process::id() as i32,
            start_time: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
            sysfs: paths.sysfs.display().to_string(),
            knobs: guard.changed.clone(),
            created: guard.created.clone(),
        };
        write_journal(paths, &journal)?;
        guard.arm()?;
        let writes: Vec<(String, String)> =
            guard.changed.iter().map(|e| (e.path.clone(), e.applied.clone())).collect();
        let failed = write_knobs_with_retry(paths, &writes);
        if let Some((_, first)) = failed.into_iter().next() {
            // Drop restores what was written.
            return Err(first);
        }
        for c in guard.created.clone() {
            // Drop tears down what was created (and tolerates what was not).
            pressure::create(&c, pressure, pp)?;
        }
        Ok(guard)
    }

    /// The run's memcg, with `--memory-max` or `--swap`: its tasks join it before they run.
    pub fn memcg(&self) -> Option<Memcg> {
        self.created.iter().find_map(|c| match c {
            Created::Memcg { version, dir } => Some(Memcg { version: *version, dir: dir.into() }),
            _ => None,
        })
    }

    /// The knobs this guard changed: (path, original, applied).
    pub fn changed(&self) -> &[JournalEntry] {
        &self.changed
    }

    /// The message of a recovery done while taking the lock (a crashed earlier run), if any.
    pub fn recovered(&self) -> Option<&str> {
        self.recovered.as_deref()
    }

    /// Restore now and report failures (dropping the guard does the same but can only print).
    pub fn restore(mut self) -> Result<()> {
        self.finish()
    }

    /// Publish the restore plan, install the signal handlers and the panic hook.
    fn arm(&mut self) -> Result<()> {
        let mut entries = Vec::new();
        for e in &self.changed {
            let p = self.paths.knob(&e.path);
            let c = CString::new(p.as_os_str().as_bytes())
                .map_err(|_| LiveError::Knob { path: e.path.clone(), message: "path contains NUL".into() })?;
            entries.push((c, e.original.as_bytes().to_vec()));
        }
        let journal = CString::new(self.paths.journal_path().as_os_str().as_bytes())
            .map_err(|_| LiveError::NotAvailable("state directory path contains NUL".into()))?;
        let plan = Box::into_raw(Box::new(RestorePlan {
            entries,
            steps: pressure::raw_steps(&self.created),
            fake_kernel: self.pressure_paths.fake_kernel,
            journal,
            owner: std::thread::current().id(),
            done: AtomicBool::new(false),
        }));
        self.plan = plan;
        ACTIVE.store(plan, Ordering::SeqCst);
        install_panic_hook();
        for sig in SIGNALS {
            // SAFETY: a zeroed sigaction is valid; the handler only uses async-signal-safe calls.
            unsafe {
                let mut new: libc::sigaction = std::mem::zeroed();
                new.sa_sigaction = signal_handler as *const () as usize;
                libc::sigemptyset(&mut new.sa_mask);
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &new, &mut old) == 0 {
                    self.old_actions.push((sig, old));
                }
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        self.finished = true;
        let mut result = Ok(());
        if !self.plan.is_null() {
            let _ = ACTIVE.compare_exchange(self.plan, std::ptr::null_mut(), Ordering::SeqCst, Ordering::SeqCst);
            // SAFETY: plans are leaked, never freed.
            let plan = unsafe { &*self.plan };
            let already = plan.done.swap(true, Ordering::SeqCst);
            result = restore_entries(&self.paths, &self.changed, already);
            if let Err(e) = teardown_created(&self.created, &self.pressure_paths) {
                result = result.and(Err(e));
            }
            for (sig, old) in self.old_actions.drain(..) {
                // SAFETY: restoring the action we saved.
                unsafe { libc::sigaction(sig, &old, std::ptr::null_mut()) };
            }
            if result.is_ok() {
                remove_journal(&self.paths)?;
            }
        }
        // Closing the file releases the flock.
        self.lock.take();
        result
    }
}

impl Drop for SettingsGuard {
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            eprintln!(
                "thplab: could not restore every THP knob: {e}; the journal {} stays and the next thplab command retries",
                self.paths.journal_path().display()
            );
        }
    }
}

/// Put the originals back (retrying failed writes once after the others) and check them.
/// `already_written` is set when a panic hook already wrote them: then only check.
fn restore_entries(paths: &Paths, entries: &[JournalEntry], already_written: bool) -> Result<()> {
    let mut todo = Vec::new();
    for e in entries {
        match read_knob(paths, &e.path) {
            Ok(cur) if cur == e.original => {}
            _ => todo.push((e.path.clone(), e.original.clone())),
        }
    }
    if already_written && todo.is_empty() {
        return Ok(());
    }
    let failed = write_knobs_with_retry(paths, &todo);
    match failed.into_iter().next() {
        None => Ok(()),
        Some((_, e)) => Err(e),
    }
}

fn install_panic_hook() {
    PANIC_HOOK.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let p = ACTIVE.load(Ordering::SeqCst);
            if !p.is_null() {
                // SAFETY: plans are leaked, never freed.
                let plan = unsafe { &*p };
                if plan.owner == std::thread::current().id() && !plan.done.swap(true, Ordering::SeqCst) {
                    raw_restore(plan);
                }
            }
            prev(info);
        }));
    });
}

/// Restore with raw syscalls only (usable in a signal handler). Returns true if every write
/// succeeded, in which case the journal is removed.
fn raw_restore(plan: &RestorePlan) -> bool {
    let mut failed = [false; 256];
    let mut any_failed = false;
    for (i, (path, value)) in plan.entries.iter().enumerate() {
        if !raw_write(path, value) {
            if i < failed.len() {
                failed[i] = true;
            }
            any_failed = true;
        }
    }
    let mut ok = true;
    if any_failed {
        for (i, (path, value)) in plan.entries.iter().enumerate() {
            if (i >= failed.len() || failed[i]) && !raw_write(path, value) {
                ok = false;
            }
        }
    }
    ok &= pressure::raw_teardown(&plan.steps, plan.fake_kernel);
    if ok {
        // SAFETY: a valid NUL-terminated path.
        unsafe { libc::unlink(plan.journal.as_ptr()) };
    }
    ok
}

/// Tear down what a run created, in the reverse order (each step tolerates what is already
/// gone); an error lists what could not be undone.
fn teardown_created(created: &[Created], pp: &PressurePaths) -> Result<()> {
    let failed: Vec<String> = created.iter().rev().filter_map(|c| pressure::teardown(c, pp).err()).collect();
    if failed.is_empty() {
        return Ok(());
    }
    Err(LiveError::NotAvailable(format!("could not undo what the run created: {}", failed.join("; "))))
}

fn raw_write(path: &CString, value: &[u8]) -> bool {
    // SAFETY: plain syscalls on a valid path and buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_TRUNC | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let n = libc::write(fd, value.as_ptr().cast(), value.len());
        libc::close(fd);
        n == value.len() as isize
    }
}

extern "C" fn signal_handler(sig: libc::c_int) {
    let p = ACTIVE.swap(std::ptr::null_mut(), Ordering::SeqCst);
    if !p.is_null() {
        // SAFETY: plans are leaked, never freed.
        let plan = unsafe { &*p };
        if !plan.done.swap(true, Ordering::SeqCst) {
            raw_restore(plan);
        }
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(128 + sig) };
    }
    // No guard active any more (a race with drop): behave as the default action would.
    // SAFETY: async-signal-safe calls.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Open the lock file and take the flock. `wait`: poll up to `paths.lock_wait`; otherwise try
/// once and return `Ok(None)` if someone holds it.
fn take_lock(paths: &Paths, wait: bool) -> Result<Option<File>> {
    ensure_dir(&paths.state_dir)?;
    let lp = paths.lock_path();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lp)
        .map_err(|e| io_err("cannot open the thplab lock file", &lp, e))?;
    let start = Instant::now();
    loop {
        // SAFETY: flock on a valid fd.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(Some(file));
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EWOULDBLOCK) && err.raw_os_error() != Some(libc::EINTR) {
            return Err(io_err("cannot lock", &lp, err));
        }
        if !wait {
            return Ok(None);
        }
        if start.elapsed() >= paths.lock_wait {
            return Err(LiveError::Locked {
                path: lp.display().to_string(),
                holder: lock_holder(paths),
                waited_s: start.elapsed().as_secs(),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Run `f` while no settings guard holds the knobs (the lock taken, waiting as `apply` waits,
/// and released after): for a reader that must see the knobs as found, not as another
/// process's guard set them for its run (the tests' "knobs unchanged" checks).
pub fn while_unlocked<T>(f: impl FnOnce() -> T) -> Result<T> {
    let lock = take_lock(&Paths::from_env(), true)?;
    let out = f();
    drop(lock);
    Ok(out)
}

/// The PID written into the lock file by its current holder, if it is still alive.
pub fn lock_holder(paths: &Paths) -> Option<i32> {
    let text = std::fs::read_to_string(paths.lock_path()).ok()?;
    let pid: i32 = text.trim().parse().ok()?;
    Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
}

fn write_pid(mut lock: &File, paths: &Paths) -> Result<()> {
    let lp = paths.lock_path();
    let w = |e| io_err("cannot write the pid into", &lp, e);
    lock.set_len(0).map_err(w)?;
    lock.rewind().map_err(w)?;
    lock.write_all(format!("{}\n", std::process::id()).as_bytes()).map_err(w)?;
    Ok(())
}

fn write_journal(paths: &Paths, journal: &Journal) -> Result<()> {
    let jp = paths.journal_path();
    let tmp = paths.state_dir.join("journal.json.tmp");
    let text = serde_json::to_string_pretty(journal)
        .map_err(|e| LiveError::Parse { path: jp.display().to_string(), message: e.to_string() })?;
    let mut f = File::create(&tmp).map_err(|e| io_err("cannot create the journal", &tmp, e))?;
    f.write_all(text.as_bytes()).map_err(|e| io_err("cannot write the journal", &tmp, e))?;
    f.sync_all().map_err(|e| io_err("cannot fsync the journal", &tmp, e))?;
    drop(f);
    std::fs::rename(&tmp, &jp).map_err(|e| io_err("cannot rename the journal into place", &jp, e))?;
    sync_dir(&paths.state_dir)
}

fn remove_journal(paths: &Paths) -> Result<()> {
    let jp = paths.journal_path();
    match std::fs::remove_file(&jp) {
        Ok(()) => sync_dir(&paths.state_dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("cannot remove the journal", &jp, e)),
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    let d = File::open(dir).map_err(|e| io_err("cannot open", dir, e))?;
    d.sync_all().map_err(|e| io_err("cannot fsync", dir, e))
}

/// Read a journal file.
pub fn read_journal(paths: &Paths) -> Result<Option<Journal>> {
    let jp = paths.journal_path();
    let mut text = String::new();
    match File::open(&jp) {
        Ok(mut f) => f.read_to_string(&mut text).map_err(|e| io_err("cannot read the journal", &jp, e))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("cannot open the journal", &jp, e)),
    };
    serde_json::from_str(&text).map(Some).map_err(|e| LiveError::Parse {
        path: jp.display().to_string(),
        message: format!("not a thplab journal ({e}); inspect it and restore the knobs it lists by hand, then delete it"),
    })
}

/// Called at the start of every thplab command: if a live run left its journal and no live
/// process holds the lock, put every knob it lists back and say so. `Ok(None)` when there was
/// nothing to do (or a live run is in progress and will restore its own knobs).
pub fn recover_if_needed() -> Result<Option<String>> {
    recover_at(&Paths::from_env())
}

/// [`recover_if_needed`] on the given tree and state directory.
pub fn recover_at(paths: &Paths) -> Result<Option<String>> {
    recover_at_with(paths, &PressurePaths::from_env())
}

/// [`recover_at`] with the given cgroup, zram and swap paths (tests: fake ones).
pub fn recover_at_with(paths: &Paths, pp: &PressurePaths) -> Result<Option<String>> {
    match std::fs::metadata(paths.journal_path()) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        _ => {}
    }
    paths.check_available()?;
    let Some(lock) = take_lock(paths, false)? else {
        return Ok(None);
    };
    let msg = recover_locked(paths, pp);
    drop(lock);
    msg
}

/// With the lock held: restore a journal left behind, if any.
fn recover_locked(paths: &Paths, pp: &PressurePaths) -> Result<Option<String>> {
    let Some(journal) = read_journal(paths)? else {
        return Ok(None);
    };
    let mut restored = Vec::new();
    let mut writes = Vec::new();
    for e in &journal.knobs {
        let cur = read_knob(paths, &e.path).ok();
        if cur.as_deref() != Some(e.original.as_str()) {
            writes.push((e.path.clone(), e.original.clone()));
            restored.push(format!("{}={}", e.path, e.original));
        }
    }
    let failed = write_knobs_with_retry(paths, &writes);
    if !failed.is_empty() {
        let list: Vec<String> = failed.iter().map(|(p, e)| format!("{p}: {e}")).collect();
        return Err(LiveError::Knob {
            path: paths.journal_path().display().to_string(),
            message: format!(
                "a live run (pid {}) did not finish and these knobs could not be restored: {}",
                journal.pid,
                list.join("; ")
            ),
        });
    }
    if let Err(e) = teardown_created(&journal.created, pp) {
        return Err(LiveError::NotAvailable(format!(
            "a live run (pid {}) did not finish and {e}; its journal {} stays and the next thplab command retries",
            journal.pid,
            paths.journal_path().display()
        )));
    }
    remove_journal(paths)?;
    let mut msg = if restored.is_empty() {
        format!(
            "thplab: a live run (pid {}) did not finish; the {} THP knobs it changed were already back at their original values",
            journal.pid,
            journal.knobs.len()
        )
    } else {
        format!(
            "thplab: restored {} THP knob{} left changed by a live run (pid {}) that did not finish: {}",
            restored.len(),
            if restored.len() == 1 { "" } else { "s" },
            journal.pid,
            restored.join(", ")
        )
    };
    if !journal.created.is_empty() {
        let what: Vec<String> = journal.created.iter().map(describe_created).collect();
        msg.push_str(&format!("; removed what it created: {}", what.join(", ")));
    }
    Ok(Some(msg))
}

fn describe_created(c: &Created) -> String {
    match c {
        Created::Memcg { dir, .. } => format!("memory cgroup {dir}"),
        Created::ZramSwap { device, .. } => format!("swap on {device} (swapoff, reset)"),
        Created::SwapFile { path } => format!("swap file {path}"),
    }
}

/// Body of the hidden `thplab __hold ASSIGNMENT...` command (and of the test helper): apply the
/// settings, print `held` on stdout, then sleep until killed. Tests SIGKILL it to leave a journal.
/// `memory-max=SIZE` and `swap=SPEC` among the assignments give the hold a memcg (which it
/// joins) and swap, and it prints `held N created M`.
pub fn hold_main(assignments: &[String]) -> ! {
    let paths = Paths::from_env();
    // Bad input fails at once (exit 2), without waiting for the lock.
    let (pressure, knobs) = match split_pressure(assignments) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("thplab __hold: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = with_assignments(&paths, &knobs) {
        eprintln!("thplab __hold: {e}");
        std::process::exit(2);
    }
    let held = SettingsGuard::apply_built_at(&paths, &[], |p| with_assignments(p, &knobs), &pressure, &PressurePaths::from_env());
    let guard = match held {
        Ok(g) => g,
        Err(e) => {
            eprintln!("thplab __hold: {e}");
            std::process::exit(if matches!(e, LiveError::Parse { .. }) { 2 } else { 1 });
        }
    };
    if let Some(m) = guard.memcg() {
        if let Err(e) = std::fs::write(m.procs(), "0") {
            eprintln!("thplab __hold: cannot join {}: {e}", m.procs().display());
            std::process::exit(1);
        }
    }
    if guard.created.is_empty() {
        println!("held {}", guard.changed().len());
    } else {
        println!("held {} created {}", guard.changed().len(), guard.created.len());
    }
    let _ = std::io::stdout().flush();
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// `memory-max=SIZE` and `swap=SPEC` out of `__hold`'s assignments; the rest are knobs.
fn split_pressure(assignments: &[String]) -> Result<(Pressure, Vec<String>)> {
    let mut p = Pressure::default();
    let mut knobs = Vec::new();
    let bad = |a: &String, m: String| LiveError::Parse { path: a.clone(), message: m };
    for a in assignments {
        if let Some(v) = a.strip_prefix("memory-max=") {
            p.memory_max = Some(Pressure::parse_memory_max(v).map_err(|m| bad(a, m))?);
        } else if let Some(v) = a.strip_prefix("swap=") {
            p.swap = thp_abi::SwapSpec::parse(v).map_err(|m| bad(a, m))?;
        } else {
            knobs.push(a.clone());
        }
    }
    Ok((p, knobs))
}

/// The knobs of the tree in `paths` as they are now, with `assignments` applied.
fn with_assignments(paths: &Paths, assignments: &[String]) -> Result<ThpSettings> {
    let mut settings = current_settings(paths)?;
    for a in assignments {
        settings.apply_assignment(a).map_err(|e| LiveError::Parse { path: a.clone(), message: e.to_string() })?;
    }
    Ok(settings)
}

/// `thplab __hold`'s guard: `assignments` on top of the knobs as they are once it has the lock
/// (read before, they could be another guard's, which it would then hold as its own).
pub fn hold_settings(assignments: &[String], paths: &Paths) -> Result<SettingsGuard> {
    SettingsGuard::apply_built_at(paths, &[], |p| with_assignments(p, assignments), &Pressure::default(), &PressurePaths::from_env())
}

/// The settings the tree in `paths` holds now: a read-only probe (crates/probe `sysfs`), here
/// at its old path.
pub use probe::sysfs::current_settings;

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_tree(dir: &Path) -> Paths {
        let sysfs = dir.join("thp");
        for (rel, v) in ThpSettings::default().knobs() {
            let p = sysfs.join(&rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, format!("{v}\n")).unwrap();
        }
        Paths { sysfs, state_dir: dir.join("state"), lock_wait: Duration::from_secs(5), require_root: false }
    }

    fn tmpdir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("thplab-live-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// `__hold` waiting for the lock while another guard holds enabled=always: once it has the
    /// lock it holds its own assignment on top of the knobs as they are then (the other guard
    /// has restored enabled=madvise), not on top of the other guard's values read before.
    #[test]
    fn hold_applies_its_assignments_to_the_knobs_found_under_the_lock() {
        let d = tmpdir("hold-race");
        let paths = fake_tree(&d);
        let mut s = ThpSettings::default();
        s.set("enabled", "always").unwrap();
        let other = SettingsGuard::apply_at(&s, &paths).unwrap();
        assert_eq!(read_knob(&paths, "enabled").unwrap(), "always");
        let p2 = paths.clone();
        let waiter = std::thread::spawn(move || {
            let g = hold_settings(&["hugepages-64kB/enabled=always".to_string()], &p2).unwrap();
            let got = (read_knob(&p2, "enabled").unwrap(), read_knob(&p2, "hugepages-64kB/enabled").unwrap(), g.changed().len());
            drop(g);
            got
        });
        // Long enough for the waiter to read the knobs and block on the lock.
        std::thread::sleep(Duration::from_millis(300));
        drop(other);
        let (enabled, k64, changed) = waiter.join().unwrap();
        assert_eq!((enabled.as_str(), k64.as_str(), changed), ("madvise", "always", 1));
        assert_eq!(read_knob(&paths, "enabled").unwrap(), "madvise");
        assert_eq!(read_knob(&paths, "hugepages-64kB/enabled").unwrap(), "never");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn fake_tree_apply_journal_restore() {
        let d = tmpdir("guard");
        let paths = fake_tree(&d);
        let mut s = ThpSettings::default();
        s.set("enabled", "never").unwrap();
        s.set("hugepages-64kB/enabled", "always").unwrap();
        let g = SettingsGuard::apply_at(&s, &paths).unwrap();
        assert_eq!(g.changed().len(), 2);
        assert_eq!(read_knob(&paths, "enabled").unwrap(), "never");
        let j = read_journal(&paths).unwrap().unwrap();
        assert_eq!(j.knobs.len(), 2);
        assert_eq!(j.knobs[0].path, "hugepages-64kB/enabled");
        assert_eq!(j.knobs[0].original, "never");
        drop(g);
        assert_eq!(read_knob(&paths, "enabled").unwrap(), "madvise");
        assert_eq!(read_knob(&paths, "hugepages-64kB/enabled").unwrap(), "never");
        assert!(read_journal(&paths).unwrap().is_none());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn fake_tree_hugetlb_pool_is_journalled_and_restored() {
        let d = tmpdir("pool");
        let paths = fake_tree(&d);
        let pool = paths.knob(NR_HUGEPAGES_2M);
        std::fs::create_dir_all(pool.parent().unwrap()).unwrap();
        std::fs::write(&pool, "3\n").unwrap();
        let mut s = ThpSettings::default();
        s.set("hugepages-64kB/enabled", "madvise").unwrap();
        let g = SettingsGuard::apply_with_at(&s, &[(NR_HUGEPAGES_2M.into(), "19".into())], &paths).unwrap();
        assert_eq!(read_knob(&paths, NR_HUGEPAGES_2M).unwrap(), "19");
        let j = read_journal(&paths).unwrap().unwrap();
        assert_eq!(j.knobs.last().unwrap().path, NR_HUGEPAGES_2M);
        assert_eq!(j.knobs.last().unwrap().original, "3");
        drop(g);
        assert_eq!(read_knob(&paths, NR_HUGEPAGES_2M).unwrap(), "3");
        assert_eq!(read_knob(&paths, "hugepages-64kB/enabled").unwrap(), "never");
        // A pool that does not exist is an error naming it, and changes nothing.
        std::fs::remove_file(&pool).unwrap();
        let e = SettingsGuard::apply_with_at(&s, &[(NR_HUGEPAGES_2M.into(), "1".into())], &paths).err().unwrap().to_string();
        assert!(e.contains("nr_hugepages"), "{e}");
        assert_eq!(read_knob(&paths, "hugepages-64kB/enabled").unwrap(), "never");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn fake_tree_recover_from_left_journal() {
        let d = tmpdir("recover");
        let paths = fake_tree(&d);
        ensure_dir(&paths.state_dir).unwrap();
        write_journal(
            &paths,
            &Journal {
                pid: 999_999,
                start_time: 0,
                sysfs: paths.sysfs.display().to_string(),
                knobs: vec![JournalEntry { path: "enabled".into(), original: "madvise".into(), applied: "never".into() }],
                created: vec![],
            },
        )
        .unwrap();
        std::fs::write(paths.knob("enabled"), "never").unwrap();
        let msg = recover_at(&paths).unwrap().unwrap();
        assert!(msg.contains("restored 1 THP knob left changed by a live run (pid 999999)"), "{msg}");
        assert!(msg.contains("enabled=madvise"), "{msg}");
        assert_eq!(read_knob(&paths, "enabled").unwrap(), "madvise");
        assert!(recover_at(&paths).unwrap().is_none());
        let _ = std::fs::remove_dir_all(&d);
    }

    /// `--memory-max 32M --swap zram:64M` on a fake cgroup2 machine: the journal lists the
    /// zram swap and the memcg before they exist; dropping the guard removes the memcg, resets
    /// zram and the journal; a journal left by a killed run is undone by the recovery.
    #[test]
    fn fake_tree_pressure_is_journalled_created_and_torn_down() {
        let d = tmpdir("pressure");
        let paths = fake_tree(&d);
        let pp = crate::pressure::tests::fake_v2(&d);
        let pressure = Pressure { memory_max: Some(32 << 20), swap: thp_abi::SwapSpec::parse("zram:64M").unwrap() };
        let g = SettingsGuard::apply_with_pressure_at(&ThpSettings::default(), &pressure, &paths, &pp).unwrap();
        let m = g.memcg().unwrap();
        assert_eq!(m.dir, d.join("cg").join(format!("thplab-{}", std::process::id())));
        assert_eq!(std::fs::read_to_string(m.dir.join("memory.max")).unwrap(), "33554432");
        assert_eq!(std::fs::read_to_string(pp.zram_sysfs.join("disksize")).unwrap(), "67108864");
        let j = read_journal(&paths).unwrap().unwrap();
        assert!(j.knobs.is_empty());
        assert_eq!(j.created.len(), 2);
        assert!(matches!(j.created[0], Created::ZramSwap { .. }));
        drop(g);
        assert!(!m.dir.exists());
        assert_eq!(std::fs::read_to_string(pp.zram_sysfs.join("disksize")).unwrap(), "0\n");
        assert_eq!(std::fs::read_to_string(pp.zram_sysfs.join("reset")).unwrap(), "1");
        assert!(read_journal(&paths).unwrap().is_none());

        // A run killed after it created both: the journal stays; the recovery undoes them.
        std::fs::create_dir(&m.dir).unwrap();
        std::fs::write(pp.zram_sysfs.join("disksize"), "67108864\n").unwrap();
        ensure_dir(&paths.state_dir).unwrap();
        write_journal(&paths, &Journal { pid: 999_998, start_time: 0, sysfs: paths.sysfs.display().to_string(), knobs: vec![], created: j.created.clone() }).unwrap();
        let msg = recover_at_with(&paths, &pp).unwrap().unwrap();
        assert!(msg.contains("(pid 999998)") && msg.contains("removed what it created") && msg.contains("memory cgroup"), "{msg}");
        assert!(!m.dir.exists());
        assert_eq!(std::fs::read_to_string(pp.zram_sysfs.join("disksize")).unwrap(), "0\n");
        assert!(read_journal(&paths).unwrap().is_none());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn bad_journal_is_an_error_naming_the_file() {
        let d = tmpdir("badjournal");
        let paths = fake_tree(&d);
        ensure_dir(&paths.state_dir).unwrap();
        std::fs::write(paths.journal_path(), "{").unwrap();
        let e = recover_at(&paths).unwrap_err().to_string();
        assert!(e.contains("journal.json") && e.contains("not a thplab journal"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
