//! The child's system-level helpers: clocks and fault counts read without allocating, the
//! touch loop's stores (with their fence), the program break, warming up the executor's own
//! pages and code, the workload's tmpfs mounts, the pwrite buffer and its calls.

use mm_types::PAGE_SIZE;
use workload::TouchPlan;

use super::spec::ExecSpec;

pub(crate) fn minflt_now() -> u64 {
    // SAFETY: getrusage fills a zeroed struct.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru.ru_minflt as u64
    }
}

pub(super) fn mono_ns() -> u64 {
    // SAFETY: clock_gettime fills a zeroed struct.
    unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
}

/// Sleep until CLOCK_MONOTONIC reads `deadline` ns (TIMER_ABSTIME: no drift over many
/// sleeps); at once when it has passed.
pub(super) fn sleep_until(deadline: u64) {
    if mono_ns() >= deadline {
        return;
    }
    let ts = libc::timespec { tv_sec: (deadline / 1_000_000_000) as libc::time_t, tv_nsec: (deadline % 1_000_000_000) as libc::c_long };
    // SAFETY: clock_nanosleep with a valid timespec and no remainder; resumed after a signal.
    while unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) } == libc::EINTR {}
}

/// Accesses `from..to` of a touch's plan: a volatile one-byte write of 1, or a read.
#[inline]
pub(super) fn touch_pages(plan: &TouchPlan, from: u64, to: u64, write: bool) {
    if write {
        for k in from..to {
            // SAFETY: the workload touches its own mapping; a bad address kills the child with
            // SIGSEGV, which the parent reports with the line.
            unsafe { store_page_byte(plan.get(k) as *mut u8) };
        }
    } else {
        for k in from..to {
            // SAFETY: as above.
            unsafe { std::ptr::read_volatile(plan.get(k) as *const u8) };
        }
    }
}

/// One touch's write: a volatile byte store of 1, then a load fence (x86-64 `lfence`) so that
/// no later store of the loop executes before this one has completed or faulted.
///
/// Without the fence the CPU runs the loop ahead while the first write to a write-protected
/// 2 MiB mapping waits to fault, and caches the read-only translation of the next pages; when
/// that fault makes the whole PMD writable (do_huge_pmd_wp_page reusing the folio,
/// pmdp_set_access_flags), x86 flushes no TLB entry (arch/x86/mm/pgtable.c:
/// pmdp_set_access_flags relies on the fault's own invalidation of one address), and on a VM
/// whose host backs the guest with 4 KiB pages each of those stale entries covers 4 KiB: the
/// next writes take spurious faults (__handle_mm_fault finds the PMD writable and only sets it
/// young), which count in minflt like any other. Measured on this VM: fill 4 MiB under
/// `enabled=always`, fork, the child writes all and exits, the parent writes 1 MiB: 4 faults
/// (6 at times) without the fence, 1 with it, as the kernel's rule has it. The fence costs
/// tens of cycles per page, against microseconds per fault.
///
/// # Safety
/// `p` must be a writable address of this process (a bad one kills it with SIGSEGV).
#[inline(always)]
pub(crate) unsafe fn store_page_byte(p: *mut u8) {
    // SAFETY: the caller's.
    unsafe { std::ptr::write_volatile(p, 1) };
    #[cfg(target_arch = "x86_64")]
    // SAFETY: lfence has no operands and no effect but ordering.
    unsafe {
        std::arch::x86_64::_mm_lfence()
    };
}

pub(super) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

pub(super) fn sys_brk(addr: u64) -> u64 {
    // SAFETY: brk only moves the program break.
    unsafe { libc::syscall(libc::SYS_brk, addr) as u64 }
}

#[inline(never)]
pub(super) fn pretouch_stack() {
    let mut buf = [0u8; 256 * 1024];
    for i in (0..buf.len()).step_by(4096) {
        // SAFETY: in-bounds volatile write.
        unsafe { std::ptr::write_volatile(buf.as_mut_ptr().add(i), 1) };
    }
    std::hint::black_box(&mut buf);
}


/// The readable file mappings of this process (its code and libraries), from /proc/self/maps.
pub(super) fn file_mappings() -> Vec<(u64, u64)> {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return Vec::new() };
    maps.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let range = f.next()?;
            let perms = f.next()?;
            let path = f.nth(3)?;
            if !perms.starts_with('r') || !path.starts_with('/') {
                return None;
            }
            let (a, b) = range.split_once('-')?;
            Some((u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?))
        })
        .collect()
}

/// The `[stack]` mapping in /proc/self/maps.
pub(super) fn stack_range() -> Option<(u64, u64)> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with("[stack]"))?;
    let (a, b) = line.split_whitespace().next()?.split_once('-')?;
    Some((u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?))
}

/// End main with signal `sig` (what killed a child), so that the parent names it.
pub(super) fn die_of(sig: i32) -> ! {
    // SAFETY: default disposition, then the signal to ourselves; _exit if it is ignored anyway.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
        libc::_exit(128 + sig)
    }
}

/// Right after fork, in both processes: write the executor's own pages that the loop writes
/// (stack, results, pids, errno) so that their copy-on-write faults happen here, not inside an
/// operation; the child also maps its code and rewrites the frames above (up to `stack_top`;
/// 0 in main, whose frames stay mapped, so that main copies no whole folio the child keeps).
#[inline(never)]
pub(super) fn after_fork_warm_up(results: &mut [i64], pids: &mut [i32], stack_top: u64, file_maps: &[(u64, u64)]) {
    for &(a, b) in file_maps {
        // SAFETY: read-populating our own file mappings changes no content.
        unsafe { libc::madvise(a as *mut libc::c_void, (b - a) as usize, libc::MADV_POPULATE_READ) };
    }
    pretouch_stack();
    // The frames above this one (the op loop's locals): each page rewritten with its own bytes.
    let here = 0u8;
    let mut a = (&here as *const u8 as u64) & !(PAGE_SIZE - 1);
    while a < stack_top {
        // SAFETY: [a, stack_top) is this thread's mapped stack (from /proc/self/maps); the byte
        // is written back unchanged, and nothing else runs in this process meanwhile.
        unsafe {
            let p = a as *mut u8;
            std::ptr::write_volatile(p, std::ptr::read_volatile(p));
        }
        a += PAGE_SIZE;
    }
    for r in results.iter_mut() {
        // SAFETY: volatile read-modify-write of our own element.
        unsafe { std::ptr::write_volatile(r, std::ptr::read_volatile(r)) };
    }
    for p in pids.iter_mut() {
        // SAFETY: as above.
        unsafe { std::ptr::write_volatile(p, std::ptr::read_volatile(p)) };
    }
    // SAFETY: a call that fails at once, setting errno (TLS).
    unsafe { libc::close(-1) };
    minflt_now();
    mono_ns();
}

/// `unshare(CLONE_NEWNS)`, `/` recursively private, each tmpfs mounted on its directory, and
/// the one of `dev_shm` bound over /dev/shm. Nothing when the workload declares no mount.
pub(super) fn setup_mounts(spec: &ExecSpec) -> std::result::Result<(), String> {
    if spec.mounts.is_empty() {
        return Ok(());
    }
    let os = |what: String| format!("{what}: {}", std::io::Error::last_os_error());
    // SAFETY: plain syscalls with NUL-terminated arguments.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(os("unshare(CLONE_NEWNS) for the workload's tmpfs mounts".into()));
        }
        if libc::mount(std::ptr::null(), c"/".as_ptr(), std::ptr::null(), libc::MS_REC | libc::MS_PRIVATE, std::ptr::null()) != 0 {
            return Err(os("mount --make-rprivate /".into()));
        }
    }
    for m in &spec.mounts {
        let dir = std::ffi::CString::new(m.dir.clone()).map_err(|_| "mount directory contains NUL".to_string())?;
        let data = std::ffi::CString::new(format!("huge={}", m.huge)).expect("no NUL");
        // SAFETY: as above.
        if unsafe { libc::mount(c"tmpfs".as_ptr(), dir.as_ptr(), c"tmpfs".as_ptr(), 0, data.as_ptr().cast()) } != 0 {
            return Err(os(format!("line {}: mount -t tmpfs -o huge={} tmpfs {}", m.line, m.huge, m.dir)));
        }
    }
    if let Some(i) = spec.dev_shm {
        let m = &spec.mounts[i];
        let dir = std::ffi::CString::new(m.dir.clone()).expect("checked above");
        // SAFETY: as above.
        if unsafe { libc::mount(dir.as_ptr(), c"/dev/shm".as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null()) } != 0 {
            return Err(os(format!("line {}: mount --bind {} /dev/shm (for shm_open on this tmpfs)", m.line, m.dir)));
        }
    }
    Ok(())
}

/// Map the pwrite buffer at `addr` (MAP_FIXED_NOREPLACE, anywhere if that is taken) and fill
/// it with non-zero bytes, so that pwrite copies from memory that is present.
pub(super) fn map_write_buffer(addr: u64, len: u64) -> std::result::Result<*mut u8, String> {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    // SAFETY: a fresh private mapping of our own.
    unsafe {
        let mut p = libc::mmap(addr as *mut libc::c_void, len as usize, libc::PROT_READ | libc::PROT_WRITE, flags | libc::MAP_FIXED_NOREPLACE, -1, 0);
        if p == libc::MAP_FAILED {
            p = libc::mmap(std::ptr::null_mut(), len as usize, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0);
        }
        if p == libc::MAP_FAILED {
            return Err(format!("cannot map the {len}-byte write buffer: {}", std::io::Error::last_os_error()));
        }
        std::ptr::write_bytes(p.cast::<u8>(), 0xa5, len as usize);
        Ok(p.cast())
    }
}

/// `pwrite` calls of `chunk` bytes covering `[offset, offset + len)`, each made as pieces of at
/// most `buf_len` bytes (short writes are continued). 0 or the first errno.
pub(super) fn pwrite_range(fd: i32, buf: *const u8, buf_len: u64, offset: u64, len: u64, chunk: u64) -> i64 {
    for (call, call_len) in workload::write_calls(offset, len, chunk) {
        let call_end = call + call_len;
        let mut pos = call;
        while pos < call_end {
            let n = (call_end - pos).min(buf_len);
            // SAFETY: `buf` holds `buf_len` readable bytes.
            let r = unsafe { libc::pwrite(fd, buf.cast(), n as usize, pos as libc::off_t) };
            if r < 0 {
                let e = errno();
                if e == libc::EINTR {
                    continue;
                }
                return e as i64;
            }
            if r == 0 {
                return libc::EIO as i64;
            }
            pos += r as u64;
        }
    }
    0
}


/// `--latency`: each touched page timed in the main process, the faults' times kept.
///
/// The first write (or read) of a page is where it faults: `clock_gettime(CLOCK_MONOTONIC)`
/// (vDSO, ~20 ns) before and after each page's store and its fence, every page of the
/// statement into a scratch histogram; the statement's faults are its slowest pages, as many
/// as its `minflt + majflt` grew (getrusage before and after: the kernel's own count, so the
/// count is exact and only which touches were faults is inferred; a hit delayed by an
/// interrupt beyond the fastest fault would swap places with that fault). Both histograms are
/// allocated before `go` (no allocation on the touch path). Unpaced touches only.
pub(super) struct TouchLatency {
    scratch: uapi::latency::Histogram,
    faults: uapi::latency::Histogram,
}

static TOUCH_LATENCY: std::sync::Mutex<Option<TouchLatency>> = std::sync::Mutex::new(None);

/// Whether [`TouchLatency::enable`] ran: read (never written) on the touch path, so that a
/// run without `--latency` does not take the mutex, whose store into a page shared since
/// fork would cost a forked child a copy-on-write fault of its own.
static TOUCH_LATENCY_ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn faults_now() -> u64 {
    // SAFETY: getrusage fills a zeroed struct.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        (ru.ru_minflt + ru.ru_majflt) as u64
    }
}

impl TouchLatency {
    /// Before `go`, in the main process.
    pub(super) fn enable() {
        *TOUCH_LATENCY.lock().unwrap_or_else(|e| e.into_inner()) = Some(TouchLatency { scratch: Default::default(), faults: Default::default() });
        TOUCH_LATENCY_ON.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Touch `plan` timing each page, if enabled and `unpaced`; false (nothing done) otherwise.
    pub(super) fn timed(plan: &TouchPlan, write: bool, unpaced: bool) -> bool {
        if !unpaced || !TOUCH_LATENCY_ON.load(std::sync::atomic::Ordering::Relaxed) {
            return false;
        }
        let mut g = TOUCH_LATENCY.lock().unwrap_or_else(|e| e.into_inner());
        let Some(l) = g.as_mut().filter(|_| unpaced) else { return false };
        l.scratch.clear();
        let f0 = faults_now();
        for k in 0..plan.len() {
            let t0 = mono_ns();
            touch_pages(plan, k, k + 1, write);
            l.scratch.record(mono_ns() - t0);
        }
        let n = faults_now() - f0;
        l.scratch.highest_into(n, &mut l.faults);
        true
    }

    /// After the run: the faults' histogram as (bucket, count) (empty when not enabled).
    pub(super) fn buckets() -> Vec<(usize, u64)> {
        if !TOUCH_LATENCY_ON.load(std::sync::atomic::Ordering::Relaxed) {
            return Vec::new();
        }
        let g = TOUCH_LATENCY.lock().unwrap_or_else(|e| e.into_inner());
        g.as_ref().map(|l| l.faults.nonzero().collect()).unwrap_or_default()
    }
}
