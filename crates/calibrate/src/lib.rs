//! `thplab calibrate`: measures the `[fault]` section of a machine profile on the live kernel
//! with microbenchmarks, each run `repeat` times and reported with its spread:
//!
//! - per folio size, a fresh private anonymous range written one byte per 4 KiB page under
//!   settings that give every fault that size (top-level `enabled=never` and only that size
//!   `always`; PMD: `enabled=always`), set through the settings guard; the wall time over the
//!   faults taken (getrusage minflt), less the touches of the folio's other pages, is the cost
//!   of one fault (mm/memory.c: do_anonymous_page → alloc_anon_folio, or
//!   mm/huge_memory.c: do_huge_pmd_anonymous_page), and the per-size `anon_fault_alloc` delta
//!   says how many faults really got that size;
//! - a touch of a mapped page (the range written again);
//! - a read fault that maps the shared zero page (mm/memory.c: do_anonymous_page, the
//!   `!(vmf->flags & FAULT_FLAG_WRITE)` path);
//! - mmap and munmap of one page;
//! - per folio size, what a program pays: a fresh range filled with memset, less the same
//!   memset over it once mapped, per fault (`fill_ns_per_fault`), and the munmap of a written
//!   range per folio (`free_ns_per_folio`);
//! - on a virtual machine whose balloon reports free pages (`[host]`, mm/page_reporting.c),
//!   measured first, before the other figures free memory: a range written under PMD THP
//!   (MADV_HUGEPAGE) once reporting has taken every free block (`reported_kib` still for two
//!   passes), so that it gets blocks the host dropped, and again right after it was freed (its
//!   blocks at the head of their lists, unreported, backed): the difference per 4 KiB page is
//!   what a host fault costs the guest. The free lists at the start go in the section too.
//!   Then the same for base pages (`base_fault_ns_per_page`): once reporting settled, a range
//!   written one 4 KiB fault at a time (MADV_NOHUGEPAGE) by a thread pinned to the quietest CPU,
//!   long enough to pass the small free blocks and that CPU's per-CPU list into reported blocks
//!   (/proc/kpageflags right before it, `host::run_start`), each fault timed; the mean fault on a
//!   reported frame (its frame read back from /proc/self/pagemap) less the mean of the others.
//!
//! Each figure's spread goes in the profile too (`[fault.spread_pct]`, `[host] fault_spread_pct`:
//! half the range of its runs in percent of their median), so that a time priced with it
//! carries its ± (`sim::time::profile_spread`).
//!
//! A crate of its own (a tool, not the harness): it uses crates/live's settings guard and host
//! state, and times its own faults rather than running a workload through the executor.
//!
//! - [`command`]: `thplab calibrate`'s entry point (the `[tlb]` fit, the profile, the table).
//! - [`pressure`]: `--pressure`: swap-out and swap-in per page through zram (`[fault.pressure]`).

pub mod command;
pub mod pressure;

use std::time::Instant;

use serde::Serialize;
use uapi::profile::{FaultCosts, HostCosts};
use thp_abi::ThpSettings;

use live::guard::{current_settings, SettingsGuard};
use probe::procfs::CounterSnapshot;
use live::sysfs::Paths;
use live::Result;

/// min, median and max of some runs.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(v: &[f64]) -> Spread {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        match s.len() {
            0 => Spread::default(),
            n => Spread { min: s[0], median: if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 }, max: s[n - 1] },
        }
    }

    /// Half the range (max − min) in percent of the median, the profile's `spread_pct` of a
    /// figure: min..max of n runs is a confidence interval of their median whatever the
    /// distribution (75 % with 3 runs, 94 % with 5); None for a median of 0 or less.
    pub fn range_pct(&self) -> Option<f64> {
        (self.median > 0.0).then(|| (self.max - self.min) / 2.0 / self.median * 100.0)
    }
}

/// One figure of the calibration.
#[derive(Clone, Debug, Serialize)]
pub struct Figure {
    /// `fault 64kB`, `touch`, `zero page read`, `syscall`.
    pub what: String,
    /// ns per event.
    pub ns: Spread,
    /// Events per run (faults, touches, calls).
    pub events: u64,
    /// Faults that got the size asked for, of all faults (fault figures only).
    pub at_size: Option<f64>,
}

/// What `calibrate` measured, and the profile section made of the medians.
#[derive(Clone, Debug, Serialize)]
pub struct Calibration {
    pub figures: Vec<Figure>,
    pub fault: FaultCosts,
    /// On a machine that reports free pages to its host.
    pub host: Option<HostCosts>,
}

/// A fresh private anonymous range of `len` bytes aligned to 2 MiB; unmapped on drop.
struct Range {
    base: *mut libc::c_void,
    total: usize,
    start: usize,
    len: usize,
}

impl Range {
    fn new(len: usize) -> Range {
        let total = len + (2 << 20);
        // SAFETY: an anonymous mapping of our own; nothing else refers to it.
        let base = unsafe { libc::mmap(std::ptr::null_mut(), total, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0) };
        assert_ne!(base, libc::MAP_FAILED, "mmap of {len} bytes: {}", std::io::Error::last_os_error());
        let start = (base as usize).next_multiple_of(2 << 20);
        Range { base, total, start, len }
    }

    /// MADV_HUGEPAGE on the range.
    fn hugepage(self) -> Range {
        // SAFETY: advice on our own mapping.
        unsafe { libc::madvise(self.start as *mut libc::c_void, self.len, libc::MADV_HUGEPAGE) };
        self
    }

    /// Write one byte per 4 KiB page; (seconds, faults).
    fn write_pages(&self) -> (f64, u64) {
        let f0 = live::minflt_now();
        let t = Instant::now();
        for off in (0..self.len).step_by(4096) {
            // SAFETY: inside the mapping; the executor's touch store, so that a touch is
            // priced as the executor runs it.
            unsafe { live::store_page_byte((self.start + off) as *mut u8) };
        }
        (t.elapsed().as_secs_f64(), live::minflt_now() - f0)
    }

    /// Write every byte (memset); (seconds, faults).
    fn fill(&self) -> (f64, u64) {
        let f0 = live::minflt_now();
        let t = Instant::now();
        // SAFETY: the whole range is inside the mapping; black_box keeps the writes.
        unsafe { std::ptr::write_bytes(std::hint::black_box(self.start as *mut u8), 0x5a, self.len) };
        (t.elapsed().as_secs_f64(), live::minflt_now() - f0)
    }

    /// Read one byte per 4 KiB page; (seconds, faults).
    fn read_pages(&self) -> (f64, u64) {
        let f0 = live::minflt_now();
        let t = Instant::now();
        let mut x = 0u8;
        for off in (0..self.len).step_by(4096) {
            // SAFETY: inside the mapping.
            x = x.wrapping_add(unsafe { std::ptr::read_volatile((self.start + off) as *const u8) });
        }
        std::hint::black_box(x);
        (t.elapsed().as_secs_f64(), live::minflt_now() - f0)
    }
}

impl Drop for Range {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new().
        unsafe { libc::munmap(self.base, self.total) };
    }
}

/// The folio sizes calibrated.
pub const SIZES: [&str; 9] = ["4kB", "16kB", "32kB", "64kB", "128kB", "256kB", "512kB", "1024kB", "2048kB"];

/// Settings under which an anonymous write fault gets `size`: the machine's own knobs with
/// top-level `never` and every size `never` but this one.
pub fn settings_for(base: &ThpSettings, size: &str) -> ThpSettings {
    let mut s = base.clone();
    s.apply_assignment("enabled=never").expect("valid");
    for l in SIZES.iter().skip(1) {
        s.apply_assignment(&format!("hugepages-{l}/enabled=never")).expect("valid");
    }
    if size == "2048kB" {
        s.apply_assignment("enabled=always").expect("valid");
        s.apply_assignment("hugepages-2048kB/enabled=inherit").expect("valid");
    } else if size != "4kB" {
        s.apply_assignment(&format!("hugepages-{size}/enabled=always")).expect("valid");
    }
    s
}

/// Measure with ranges of `mib` MiB, each figure `repeat` times; `progress` hears of each step.
pub fn calibrate(mib: u64, repeat: u32, mut progress: impl FnMut(&str)) -> Result<Calibration> {
    let paths = Paths::from_env();
    paths.check_available()?;
    let base = current_settings(&paths)?;
    let len = (mib << 20) as usize;
    let repeat = repeat.max(1);
    let mut figures = Vec::new();
    // First, on a VM that reports free pages, the host: before the other figures free memory.
    let (host_figure, host) = host_figures(&base, len, repeat, &mut progress)?;
    let b = measure_base_costs(&base, len, repeat, &mut progress)?;
    let touch_s = Spread::of(&b.touch);
    figures.push(Figure { what: "touch".into(), ns: touch_s.clone(), events: len as u64 / 4096, at_size: None });
    figures.push(Figure { what: "zero page read".into(), ns: Spread::of(&b.zero), events: b.zero_faults, at_size: None });
    figures.push(Figure { what: "syscall".into(), ns: Spread::of(&b.sys), events: 2 * SYSCALLS as u64, at_size: None });
    let mut fault = FaultCosts {
        zero_page_read_ns: Spread::of(&b.zero).median,
        touch_ns_per_page: touch_s.median,
        syscall_ns: Spread::of(&b.sys).median,
        source: format!("thplab calibrate: {mib} MiB written one byte per 4 KiB page, median of {repeat}"),
        ..Default::default()
    };
    for size in SIZES {
        progress(&format!("fault {size}"));
        let m = measure_fault_size(&paths, &base, size, len, repeat, host.is_some(), touch_s.median)?;
        let spread = Spread::of(&m.ns);
        let at_size = Spread::of(&m.at).median;
        let faults = m.faults;
        figures.push(Figure { what: format!("fault {size}"), ns: spread.clone(), events: faults, at_size: Some(at_size) });
        fault.ns_per_fault.insert(size.to_string(), spread.median);
        let (fill, free) = (Spread::of(&m.fill), Spread::of(&m.free));
        fault.fill_ns_per_fault.insert(size.to_string(), fill.median);
        fault.free_ns_per_folio.insert(size.to_string(), free.median);
        figures.push(Figure { what: format!("filled {size}"), ns: fill, events: faults, at_size: None });
        figures.push(Figure { what: format!("free {size}"), ns: free, events: faults, at_size: None });
    }
    fault.spread_pct = figures.iter().filter_map(|f| f.ns.range_pct().map(|p| (f.what.clone(), p))).collect();
    let mut host = host;
    if let (Some(h), Some(f)) = (host.as_mut(), host_figure.iter().find(|f| f.what == "host fault")) {
        h.fault_spread_pct = f.ns.range_pct();
    }
    figures.extend(host_figure);
    Ok(Calibration { figures, fault, host })
}

/// On a VM that reports free pages (free page reporting), the host's figures and section;
/// nothing elsewhere.
fn host_figures(base: &ThpSettings, len: usize, repeat: u32, progress: &mut impl FnMut(&str)) -> Result<(Vec<Figure>, Option<HostCosts>)> {
    let Some(order) = live::host::reporting_order() else { return Ok((Vec::new(), None)) };
    let (figure, mut host) = measure_host(base, order, len.min(256 << 20), repeat.min(3), progress)?;
    let mut figures = vec![figure];
    if let Some(base_figure) = measure_base_host(repeat.min(2), progress) {
        host.base_fault_ns_per_page = Some(base_figure.ns.median);
        host.source.push_str(&format!(
            "; base_fault_ns_per_page: a range past the small free blocks and the per-CPU list written one 4 KiB fault at a time once \
             reporting settled, the mean fault on a frame of a reported block less the mean of the others, median of {}",
            repeat.min(2)
        ));
        figures.push(base_figure);
    }
    Ok((figures, Some(host)))
}

/// mmap + munmap pairs timed per round of the syscall figure.
const SYSCALLS: u32 = 20_000;

/// The samples of the figures measured under 4 KiB pages.
struct BaseSamples {
    touch: Vec<f64>,
    zero: Vec<f64>,
    zero_faults: u64,
    sys: Vec<f64>,
}

/// Under 4 KiB pages: touches of mapped pages (the base of every fault figure), zero-page
/// read faults, and system calls (mmap/munmap of one page).
fn measure_base_costs(base: &ThpSettings, len: usize, repeat: u32, progress: &mut impl FnMut(&str)) -> Result<BaseSamples> {
    progress("touch");
    let g = SettingsGuard::apply(&settings_for(base, "4kB"))?;
    let mut touch = Vec::new();
    for _ in 0..repeat {
        let r = Range::new(len);
        r.write_pages();
        let (s, f) = r.write_pages();
        touch.push(s * 1e9 / (len as f64 / 4096.0));
        debug_assert_eq!(f, 0);
    }
    progress("zero page read");
    let mut zero = Vec::new();
    let mut zero_faults = 0;
    for _ in 0..repeat {
        let r = Range::new(len);
        let (s, f) = r.read_pages();
        zero.push(s * 1e9 / f.max(1) as f64);
        zero_faults = f;
    }
    progress("syscall");
    let mut sys = Vec::new();
    for _ in 0..repeat {
        let t = Instant::now();
        for _ in 0..SYSCALLS {
            // SAFETY: map and unmap one page of our own.
            unsafe {
                let p = libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
                libc::munmap(p, 4096);
            }
        }
        sys.push(t.elapsed().as_secs_f64() * 1e9 / (2 * SYSCALLS) as f64);
    }
    g.restore()?;
    Ok(BaseSamples { touch, zero, zero_faults, sys })
}

/// The samples of one folio size's figures.
struct SizeSamples {
    ns: Vec<f64>,
    at: Vec<f64>,
    faults: u64,
    fill: Vec<f64>,
    free: Vec<f64>,
}

/// Under settings that give `size`: the write fault (less the touches), the share of faults
/// that got `size` (anon_fault_alloc), the unmap per folio and a program's fill per fault.
fn measure_fault_size(paths: &Paths, base: &ThpSettings, size: &str, len: usize, repeat: u32, host: bool, touch_ns: f64) -> Result<SizeSamples> {
    let g = SettingsGuard::apply(&settings_for(base, size))?;
    let mut ns = Vec::new();
    let mut at = Vec::new();
    let mut faults = 0;
    // On a VM that reports free pages, a fill may take blocks the host dropped (the model
    // charges those as host faults): a first fill, not counted, leaves the blocks the
    // measured fills take backed (each takes the blocks the one before freed); a reporting
    // pass may still take some between two fills, which the median leaves out.
    if host {
        Range::new(len).write_pages();
    }
    let (mut fill, mut free) = (Vec::new(), Vec::new());
    for _ in 0..repeat {
        let r = Range::new(len);
        let before = CounterSnapshot::read(&paths.sysfs)?;
        let (s, f) = r.write_pages();
        let after = CounterSnapshot::read(&paths.sysfs)?;
        let d = before.delta(&after);
        let got = if size == "4kB" { f as i64 } else { d.mthp.get(&format!("hugepages-{size}")).and_then(|m| m.get("anon_fault_alloc")).copied().unwrap_or(0) };
        at.push((got as f64 / f.max(1) as f64).min(1.0));
        // The other pages of each folio were touched without a fault.
        let touches = (len as u64 / 4096).saturating_sub(f);
        ns.push(((s * 1e9) - touches as f64 * touch_ns) / f.max(1) as f64);
        faults = f;
        // Its unmap: the zap and free of each folio.
        let t = Instant::now();
        drop(r);
        free.push(t.elapsed().as_secs_f64() * 1e9 / f.max(1) as f64);
        // A program's fill: memset over a fresh range, less the same over it mapped.
        let r = Range::new(len);
        let (first, f) = r.fill();
        let (again, _) = r.fill();
        fill.push((first - again) * 1e9 / f.max(1) as f64);
    }
    g.restore()?;
    Ok(SizeSamples { ns, at, faults, fill, free })
}

/// The `[host]` section: the free lists as they are at the start, and what a frame the host
/// dropped costs when written: `runs` pairs of PMD fills of `len` bytes, one once reporting has
/// taken every free block of its order and above (so the fill can only get reported blocks),
/// one right after it freed them (the blocks at the head of their lists, unreported, backed).
fn measure_host(base: &ThpSettings, order: u8, len: usize, runs: u32, progress: &mut impl FnMut(&str)) -> Result<(Figure, HostCosts)> {
    let free_areas = live::host::free_lists().map_err(|error| live::LiveError::Io { what: "cannot read", path: "/proc/pagetypeinfo".into(), error })?;
    // PMD THP for the ranges alone (MADV_HUGEPAGE under `madvise`): under `always`, other
    // processes would take and free blocks of the reporting order meanwhile, and the cold fill
    // would get some of those, backed.
    let mut s = settings_for(base, "2048kB");
    s.apply_assignment("enabled=madvise").expect("valid");
    let g = SettingsGuard::apply(&s)?;
    let pages = (len / 4096) as f64;
    let mut ns = Vec::new();
    for run in 0..runs {
        let settled = live::host::wait_until_settled(&mut |waited| progress(&format!("host fault {}/{runs}: waiting for page reporting to take every free block ({waited} s)", run + 1)));
        if settled.is_none() {
            // No count of reported memory: wait for the passes `len` bytes of freed blocks need
            // (at most 64 blocks of `order` per pass while fewer than 512 are free: the budget
            // of mm/page_reporting.c), and one more.
            let passes = ((len >> (12 + order as usize)) as u64).div_ceil(64) + 1;
            std::thread::sleep(std::time::Duration::from_secs(2 * passes + 1));
        }
        progress(&format!("host fault {}/{runs}: fills", run + 1));
        let (cold, _) = Range::new(len).hugepage().write_pages();
        let (warm, _) = Range::new(len).hugepage().write_pages();
        ns.push(((cold - warm) * 1e9 / pages).max(0.0));
    }
    g.restore()?;
    let spread = Spread::of(&ns);
    let host = HostCosts {
        page_reporting_order: order,
        fault_ns_per_page: spread.median,
        base_fault_ns_per_page: None,
        fault_spread_pct: None,
        free_areas,
        source: format!(
            "thplab calibrate: {} MiB written under PMD THP once page reporting had taken every free block, less the same right after it was freed, per 4 KiB page, median of {runs}",
            len >> 20
        ),
    };
    Ok((Figure { what: "host fault".into(), ns: spread, events: pages as u64, at_size: None }, host))
}

/// Faults on reported frames fewer than this make no figure.
const BASE_HOST_MIN_SAMPLES: u64 = 2048;

/// What a frame the host dropped costs when a base page's fault writes it (the `[host]`
/// section's `base_fault_ns_per_page`): `runs` times, once reporting settled, a thread pinned
/// to the CPU whose per-CPU lists hold the fewest pages writes a range one 4 KiB fault at a time
/// (MADV_NOHUGEPAGE: whatever the knobs, every fault a base page), long enough to pass the
/// small Movable free blocks and that list into reported blocks (64 MiB past them, at most
/// half of MemAvailable), timing each fault; the frames of reported blocks come from
/// /proc/kpageflags right before (`host::run_start`), each fault's frame from /proc/self/pagemap
/// after. The figure is the mean fault on a reported frame less the mean of the others
/// (faults over 1 ms, a preemption, left out). None when a run cannot be made or meets fewer
/// than [`BASE_HOST_MIN_SAMPLES`] reported frames.
fn measure_base_host(runs: u32, progress: &mut impl FnMut(&str)) -> Option<Figure> {
    let mut ns = Vec::new();
    let mut events = 0;
    for run in 0..runs {
        live::host::wait_until_settled(&mut |waited| progress(&format!("host fault of base pages {}/{runs}: waiting for page reporting to take every free block ({waited} s)", run + 1)));
        let cpu = live::host::cpu_for_run()?;
        progress(&format!("host fault of base pages {}/{runs}: fills", run + 1));
        let (per_page, n) = std::thread::spawn(move || base_host_run(cpu)).join().ok()??;
        ns.push(per_page);
        events = n;
    }
    (!ns.is_empty()).then(|| Figure { what: "host fault (base pages)".into(), ns: Spread::of(&ns), events, at_size: None })
}

/// One run of [`measure_base_host`] on `cpu`: (ns per reported frame, reported frames met).
fn base_host_run(cpu: usize) -> Option<(f64, u64)> {
    live::host::pin_this_thread(cpu).ok()?;
    let (lists, reported) = live::host::run_start(cpu)?;
    let order = lists.free.len().min(live::host::reporting_order()? as usize);
    let backed: u64 = lists.free[..order].iter().enumerate().map(|(o, &n)| n << o).sum::<u64>() + lists.pcp;
    let available = std::fs::read_to_string("/proc/meminfo").ok()?.lines().find_map(|l| l.strip_prefix("MemAvailable:").and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()))?;
    let pages = (backed + 16384).min(available / 4 / 2);
    let len = pages as usize * 4096;
    // SAFETY: a fresh private anonymous mapping of our own, unmapped below.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0) };
    if p == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: advice on our own mapping.
    unsafe { libc::madvise(p, len, libc::MADV_NOHUGEPAGE) };
    let mut t = vec![0u32; pages as usize];
    for (i, slot) in t.iter_mut().enumerate() {
        let t0 = Instant::now();
        // SAFETY: page i of the mapping.
        unsafe { std::ptr::write_volatile((p as *mut u8).add(i * 4096), 1) };
        *slot = t0.elapsed().as_nanos().min(u32::MAX as u128) as u32;
    }
    let pfns = live::host::pagemap_pfns(p as u64, pages);
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(p, len) };
    let pfns = pfns.ok()?;
    let (mut rep, mut other) = ((0f64, 0u64), (0f64, 0u64));
    for (&ns, &pfn) in t.iter().zip(&pfns) {
        if ns > 1_000_000 || pfn == 0 {
            continue;
        }
        let side = if reported.contains(pfn) { &mut rep } else { &mut other };
        side.0 += ns as f64;
        side.1 += 1;
    }
    if rep.1 < BASE_HOST_MIN_SAMPLES || other.1 == 0 {
        return None;
    }
    Some(((rep.0 / rep.1 as f64 - other.0 / other.1 as f64).max(0.0), rep.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_and_settings() {
        assert_eq!(Spread::of(&[3.0, 1.0, 2.0]), Spread { min: 1.0, median: 2.0, max: 3.0 });
        assert_eq!(Spread::of(&[4.0, 1.0, 2.0, 3.0]).median, 2.5);
        // The profile's spread of a figure: (3 − 1) / 2 = 1, 50 % of the median 2; none for a 0 median.
        assert_eq!(Spread::of(&[3.0, 1.0, 2.0]).range_pct(), Some(50.0));
        assert_eq!(Spread::of(&[1500.0, 1600.0, 1560.0, 1480.0, 1540.0]).range_pct(), Some(60.0 / 1540.0 * 100.0));
        assert_eq!(Spread::of(&[0.0, 0.0]).range_pct(), None);
        let base = ThpSettings::default();
        let k = |s: &ThpSettings, p: &str| s.knob_map()[p].clone();
        let s = settings_for(&base, "64kB");
        assert_eq!((k(&s, "enabled"), k(&s, "hugepages-64kB/enabled"), k(&s, "hugepages-16kB/enabled")), ("never".into(), "always".into(), "never".into()));
        let s = settings_for(&base, "2048kB");
        assert_eq!((k(&s, "enabled"), k(&s, "hugepages-2048kB/enabled"), k(&s, "hugepages-1024kB/enabled")), ("always".into(), "inherit".into(), "never".into()));
        let s = settings_for(&base, "4kB");
        assert_eq!(k(&s, "enabled"), "never");
    }
}
