//! The daemons of the simulated machine on the driver's clock: khugepaged's wake-ups
//! (mm/khugepaged.c: `khugepaged`, `khugepaged_wait_work`, `__khugepaged_enter`) and free page
//! reporting's delayed work (mm/page_reporting.c: `__page_reporting_request` schedules
//! `page_reporting_process` PAGE_REPORTING_DELAY after a request). The mm core is clockless and
//! does one wake-up's work (`Kernel::khugepaged_do_scan`, `Kernel::page_reporting_process`);
//! when it happens is decided here.
//!
//! The clock moves with `sleep` statements (the other statements take no simulated time
//! unless a profile prices them). The daemon sleeps on an empty list until an mm registers
//! (`__khugepaged_enter` wakes it when the list was empty), then scans and sleeps
//! `khugepaged/scan_sleep_millisecs` between wake-ups (and `alloc_sleep_millisecs` in the
//! middle of one whose huge page allocation failed: `khugepaged_alloc_sleep`), in jiffies as the kernel sleeps
//! (`khugepaged_wait_work`: `wait_event_freezable_timeout` for `msecs_to_jiffies(ms)`, a timer
//! of the timer wheel, kernel/time/timer.c: `calc_wheel_index`, `calc_index`): the timeout is
//! rounded up to whole jiffies, and the wheel fires a timer one granule of its level after the
//! expiry's granule (a level-0 timer, under 63 jiffies, one jiffy late), so at HZ=250 a
//! 100 ms sleep lasts 26 jiffies, 104 ms, as the live daemon on this machine kind does. With
//! 0 ms the kernel rescans without pause; here it waits for the next tick. A wake-up due at
//! time t runs when the clock passes t, so statements at the same instant (the program runs
//! on while the daemon wakes) come first.

use mm::khugepaged::ScanEnd;
use mm::Kernel;

/// CONFIG_HZ of this machine kind's kernel (/proc/config.gz).
pub const DEFAULT_HZ: u32 = 250;

/// khugepaged's schedule.
#[derive(Clone, Debug)]
pub struct Khugepaged {
    /// When it wakes next; None while its list is empty (or THP is off).
    pub next_wake_ns: Option<u64>,
    /// CONFIG_HZ: the length of a jiffy.
    pub hz: u32,
}

impl Default for Khugepaged {
    fn default() -> Self {
        Khugepaged { next_wake_ns: None, hz: DEFAULT_HZ }
    }
}

/// `msecs_to_jiffies`: rounded up.
fn msecs_to_jiffies(ms: u64, hz: u64) -> u64 {
    (ms * hz).div_ceil(1000)
}

/// When a timer armed at jiffy `now` for `timeout` jiffies fires, in jiffies
/// (kernel/time/timer.c: `calc_wheel_index` picks the level whose range holds the delta,
/// `calc_index` rounds the expiry up to the next granule of that level: LVL_CLK_SHIFT 3,
/// LVL_SIZE 64).
pub fn timer_wheel_expiry(now: u64, timeout: u64) -> u64 {
    const LVL_CLK_SHIFT: u32 = 3;
    let lvl_start = |n: u32| 63u64 << ((n - 1) * LVL_CLK_SHIFT);
    let expires = now + timeout;
    let lvl = (1..=8).find(|&n| timeout < lvl_start(n)).map_or(8, |n| n - 1);
    let shift = lvl * LVL_CLK_SHIFT;
    ((expires >> shift) + 1) << shift
}

/// PAGE_REPORTING_DELAY: 2 s (`2 * HZ` jiffies, whatever HZ is).
pub const PAGE_REPORTING_DELAY_NS: u64 = 2_000_000_000;

/// Free page reporting's delayed work: idle, or due at a time.
#[derive(Clone, Debug, Default)]
pub struct PageReporting {
    next_pass_ns: Option<u64>,
}

impl PageReporting {
    /// After an operation at `now`: a request on an idle device schedules a pass one delay
    /// later (a request while one is scheduled is absorbed by it).
    pub fn after_op(&mut self, k: &Kernel, now: u64) {
        if self.next_pass_ns.is_none() && k.page_reporting_requested() {
            self.next_pass_ns = Some(now + PAGE_REPORTING_DELAY_NS);
        }
    }

    /// When the next pass is due, if one is.
    pub fn due(&self) -> Option<u64> {
        self.next_pass_ns
    }

    /// Run the pass due at `t`; one that stopped at its budget schedules the next.
    pub fn run_pass(&mut self, k: &mut Kernel, t: u64) {
        k.page_reporting_process();
        self.next_pass_ns = k.page_reporting_requested().then_some(t + PAGE_REPORTING_DELAY_NS);
    }
}

impl Khugepaged {
    /// After an operation at `now`: an mm that was just put on the empty list wakes the
    /// daemon; a machine where khugepaged has no work stops it.
    pub fn after_op(&mut self, k: &Kernel, now: u64) {
        if !k.khugepaged_has_work() {
            self.next_wake_ns = None;
        } else if self.next_wake_ns.is_none() {
            self.next_wake_ns = Some(now);
        }
    }

    /// The wake-up after one at `t` (ns) that slept `ms`: the scan takes no simulated time,
    /// so the sleep starts in the jiffy of `t`.
    fn next_wake(&self, t: u64, ms: u64) -> u64 {
        let hz = self.hz.max(1) as u64;
        let jiffy_ns = 1_000_000_000 / hz;
        let now = t / jiffy_ns;
        let timeout = msecs_to_jiffies(ms, hz).max(1);
        timer_wheel_expiry(now, timeout) * jiffy_ns
    }

    /// Run every wake-up due before `until`.
    pub fn run_until(&mut self, k: &mut Kernel, until: u64) {
        while let Some(t) = self.next_wake_ns {
            if t >= until {
                break;
            }
            let end = if k.khugepaged_state().in_alloc_sleep.is_some() { k.khugepaged_alloc_sleep_done() } else { k.khugepaged_do_scan() };
            let sleep = match end {
                ScanEnd::Done => k.settings().khugepaged.scan_sleep_millisecs,
                // schedule_timeout(msecs_to_jiffies(alloc_sleep_millisecs)), then the same
                // wake-up goes on.
                ScanEnd::AllocSleep => k.settings().khugepaged.alloc_sleep_millisecs,
            };
            let next = self.next_wake(t, sleep as u64);
            self.next_wake_ns = (k.khugepaged_has_work() || end == ScanEnd::AllocSleep).then_some(next);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{run, MachineConfig};
    use thp_abi::ThpSettings;

    fn settings(extra: &[&str]) -> ThpSettings {
        let mut s = ThpSettings::default();
        for a in extra {
            s.apply_assignment(a).unwrap();
        }
        s
    }

    fn model(r: &uapi::RunResult) -> &uapi::result::ModelRun {
        r.model.as_ref().and_then(|m| m.run.as_ref()).expect("a workload run has model state")
    }

    fn khugepaged(r: &uapi::RunResult) -> uapi::result::ModelKhugepaged {
        model(r).khugepaged
    }

    /// Four PMD ranges faulted as base pages at 512, 256, 64 and 0 pages, then made eligible
    /// with MADV_HUGEPAGE and left to the daemon for 1 s with max_ptes_none=256: the first two
    /// collapse (256 none PTEs is not more than 256), the third fails with
    /// SCAN_EXCEED_NONE_PTE, the fourth has an empty PMD entry (SCAN_PMD_NONE: the PMD table
    /// exists, the other three ranges use it); every wake-up after the first finds the first
    /// two PMD-mapped.
    #[test]
    fn the_daemon_collapses_what_max_ptes_none_allows() {
        let w = workload::parse(
            "t",
            "mmap a 8M align=2M\ntouch a[0+2M] write\ntouch a[2M+1M] write\ntouch a[4M+256K] write\nmadvise a hugepage\nsleep 1s\n",
        )
        .unwrap();
        let s = settings(&["khugepaged/max_ptes_none=256", "khugepaged/scan_sleep_millisecs=100", "khugepaged/pages_to_scan=4096"]);
        let r = run(&w, &s, &MachineConfig::default()).unwrap();
        let kh = khugepaged(&r);
        assert_eq!(kh.pages_collapsed, 2);
        assert_eq!(r.vmstat["thp_collapse_alloc"], 2);
        assert_eq!(r.folios[&thp_abi::FolioSize::from("2048kB")], 2);
        // Wake-ups at 0, 100, ..., 900 ms: 10 before the clock reaches 1 s.
        assert_eq!(kh.wakeups, 10);
        // Each wake-up scans the whole 8 MiB VMA (4 PMDs: 1 + 4·512 < 4096) and so ends a
        // full scan; the first wake-up drops the lock after each collapse and goes on.
        assert_eq!(kh.full_scans, 10);
        let scans = &model(&r).scan_results;
        assert_eq!(scans["SCAN_SUCCEED"], 2);
        assert_eq!(scans["SCAN_EXCEED_NONE_PTE"], 10);
        assert_eq!(scans["SCAN_PMD_NONE"], 10);
        assert_eq!(scans["SCAN_PMD_MAPPED"], 18);
    }

    /// Without MADV_HUGEPAGE under `madvise`, or with THP `never`, the mm is never registered
    /// and the daemon never wakes; a run without `sleep` gives it no time.
    #[test]
    fn no_registration_no_wakeups() {
        let text = "mmap a 4M align=2M\ntouch a write\nsleep 1s\n";
        let w = workload::parse("t", text).unwrap();
        let r = run(&w, &settings(&["enabled=never"]), &MachineConfig::default()).unwrap();
        assert_eq!(khugepaged(&r).wakeups, 0);
        let w = workload::parse("t", "mmap a 4M align=2M\ntouch a write\nmadvise a hugepage\n").unwrap();
        let r = run(&w, &settings(&[]), &MachineConfig::default()).unwrap();
        assert_eq!((khugepaged(&r).registered, khugepaged(&r).wakeups), (true, 0));
    }

    /// With a profile, every step moves the clock by its work (sim::driver), so the daemon
    /// wakes in the middle of the program. Two half-filled 2 MiB ranges become eligible at
    /// 512 ms (512 faults of 1 ms each); the registration schedules a wake-up then, and a touch
    /// of 200 more pages (200 ms) passes it and the next one at 616 ms (jiffy 128 at HZ=250,
    /// plus 25 jiffies, plus the timer wheel's one: 154 × 4 ms): one range collapsed each
    /// (pages_to_scan 512: one range, plus the skipped VMA of c); the third, at 720 ms, comes
    /// after the end (713 ms). Unpriced, the clock
    /// stays at 0 until the final `sleep 1ms`, in which the one wake-up scheduled at the
    /// registration runs.
    /// A step pays for the folios it frees at the profile's `free_ns_per_folio`. Derived by hand:
    /// 1 MiB under 64 KiB mTHP is 16 faults of 64 KiB; the first munmap frees the 8 folios of
    /// its half; MADV_DONTNEED over 4 KiB of the next folio zaps a page and frees nothing (the
    /// folio is split later, deferred); the last munmap frees the other 8. Four calls.
    #[test]
    fn a_step_pays_for_the_folios_it_frees() {
        let text = "mmap a 1M align=1M\ntouch a write\nmunmap a[0+512K]\nmadvise a[512K+4K] dontneed\nmunmap a[512K+512K]\n";
        let w = workload::parse("t", text).unwrap();
        let s = settings(&["hugepages-64kB/enabled=always"]);
        let costs = uapi::profile::FaultCosts {
            ns_per_fault: [("64kB".to_string(), 1000.0)].into(),
            free_ns_per_folio: [("64kB".to_string(), 100.0), ("4kB".to_string(), 7.0)].into(),
            syscall_ns: 10.0,
            ..Default::default()
        };
        let mut opts = crate::RunOptions { check_invariants: true, profile: crate::Profile { costs: Some(costs), ..Default::default() }, ..Default::default() };
        let (r, _) = crate::run_with(&w, &s, &MachineConfig::default(), &mut opts).unwrap();
        let t = r.time.unwrap();
        assert_eq!(t.faults["64kB"], 16);
        assert_eq!(t.frees, [("64kB".to_string(), 16)].into());
        assert_eq!(t.free_ns, 1600.0);
        assert_eq!(t.calls, 4);
        assert_eq!(t.total_ns, 16.0 * 1000.0 + 1600.0 + 4.0 * 10.0);
    }

    #[test]
    fn a_priced_clock_wakes_the_daemon_during_the_program() {
        let text = "phase fill\nmmap a 2M align=2M\nmmap b 2M align=2M\nmmap c 4M\nmadvise a nohugepage\nmadvise b nohugepage\n\
                    touch a[0+1M] write\ntouch b[0+1M] write\nmadvise a hugepage\nmadvise b hugepage\nphase more\ntouch c[0+800K] write\nsleep 1ms\n";
        let w = workload::parse("t", text).unwrap();
        let s = settings(&["enabled=madvise", "khugepaged/scan_sleep_millisecs=100", "khugepaged/pages_to_scan=512"]);
        let r = run(&w, &s, &MachineConfig::default()).unwrap();
        assert_eq!((khugepaged(&r).wakeups, khugepaged(&r).pages_collapsed), (1, 1));
        let costs = uapi::profile::FaultCosts { ns_per_fault: [("4kB".to_string(), 1e6)].into(), ..Default::default() };
        let mut opts = crate::RunOptions { check_invariants: true, profile: crate::Profile { costs: Some(costs), ..Default::default() }, ..Default::default() };
        let (r, _) = crate::run_with(&w, &s, &MachineConfig::default(), &mut opts).unwrap();
        let kh = khugepaged(&r);
        assert_eq!((kh.wakeups, kh.pages_collapsed), (2, 2));
        assert_eq!(r.folios[&thp_abi::FolioSize::from("2048kB")], 2);
        let t = r.time.unwrap();
        assert_eq!(t.faults["4kB"], 712);
        assert_eq!(t.total_ns, 712e6);
        // The clock: the work and the sleep; each phase from its statement to the next.
        assert_eq!(t.elapsed_ns, 713_000_000);
        let phases: Vec<(&str, u64, u64)> = t.phases.iter().map(|p| (p.name.as_str(), p.start_ns, p.ns)).collect();
        assert_eq!(phases, [("fill", 0, 512_000_000), ("more", 512_000_000, 201_000_000)]);
    }

    /// Free page reporting on the clock (mm/page_reporting.c). A 256 MiB machine laid out as
    /// 2000 free base pages, 40 free order-9 blocks (beside held buddies) and 20 order-10 ones,
    /// idle: the large ones reported. 16 MiB under PMD THP takes 8 order-9 blocks from the head
    /// of their list: 8 × 512 host faults. Unmapped, they go back to the head unreported, and a
    /// second 16 MiB right after takes the same 8: none. Unmapped again and left 3 s: the pass
    /// 2 s after the free reports them (40 blocks: budget 1, up to 64), and a third 16 MiB pays
    /// 4096 host faults again. The page tables come from the base pages, backed.
    #[test]
    fn reported_blocks_cost_host_faults_until_written_and_freed_ones_until_reported() {
        let text = "mmap a 16M align=2M\ntouch a write\nmunmap a\nmmap b 16M align=2M\ntouch b write\nmunmap b\nsleep 3s\nmmap c 16M align=2M\ntouch c write\n";
        let w = workload::parse("t", text).unwrap();
        let s = settings(&["enabled=always"]);
        let costs = uapi::profile::FaultCosts { ns_per_fault: [("4kB".to_string(), 1000.0), ("2048kB".to_string(), 100_000.0)].into(), ..Default::default() };
        let host = uapi::profile::HostCosts { page_reporting_order: 9, fault_ns_per_page: 10_000.0, base_fault_ns_per_page: None, fault_spread_pct: None, free_areas: vec![2000, 0, 0, 0, 0, 0, 0, 0, 0, 40, 20], source: String::new() };
        let m = MachineConfig { mem_bytes: 256 << 20, ..MachineConfig::default() };
        let mut opts = crate::RunOptions { check_invariants: true, profile: crate::Profile { costs: Some(costs), host: Some((host, None)), ..Default::default() }, ..Default::default() };
        let (r, k) = crate::run_with(&w, &s, &m, &mut opts).unwrap();
        let t = r.time.unwrap();
        assert_eq!(t.faults["2048kB"], 24);
        assert_eq!(t.host_faults, 2 * 8 * 512);
        assert_eq!(t.host_ns, 8192.0 * 10_000.0);
        let h = k.host_stats().unwrap();
        assert_eq!((h.passes, h.reported_blocks), (1, 8));
        // Without the sleep, the third range reuses the blocks too: one cold fill only.
        let (r, _) = crate::run_with(&workload::parse("t", &text.replace("sleep 3s", "sleep 1s")).unwrap(), &s, &m, &mut opts).unwrap();
        assert_eq!(r.time.unwrap().host_faults, 8 * 512);
    }

    /// Base pages' host faults are priced at `base_fault_ns_per_page`. The free lists hold 2000
    /// order-0 blocks (backed: never reported) and reported order-9 and order-10 blocks: 12 MiB of
    /// 4 KiB faults (3072 pages) and 7 page tables (6 PTE tables, a PMD table) take 3079 base
    /// pages, the 2000 backed ones first (by way of the per-CPU list), then 1079 frames of
    /// reported blocks, each a host fault of a base page at 12 000 ns. Under PMD THP the same 12 MiB
    /// takes 6 reported order-9 blocks: 3072 host faults at 10 000 ns, none of base pages.
    #[test]
    fn base_pages_host_faults_are_priced_at_their_own_cost() {
        let w = workload::parse("t", "mmap a 12M align=2M\ntouch a write\n").unwrap();
        let costs = uapi::profile::FaultCosts { ns_per_fault: [("4kB".to_string(), 1000.0), ("2048kB".to_string(), 100_000.0)].into(), ..Default::default() };
        let host = uapi::profile::HostCosts { page_reporting_order: 9, fault_ns_per_page: 10_000.0, base_fault_ns_per_page: Some(12_000.0), fault_spread_pct: None, free_areas: vec![2000, 0, 0, 0, 0, 0, 0, 0, 0, 40, 20], source: String::new() };
        let m = MachineConfig { mem_bytes: 256 << 20, ..MachineConfig::default() };
        let mut opts = crate::RunOptions { check_invariants: true, profile: crate::Profile { costs: Some(costs), host: Some((host, None)), ..Default::default() }, ..Default::default() };
        let (r, k) = crate::run_with(&w, &settings(&["enabled=never"]), &m, &mut opts).unwrap();
        let t = r.time.unwrap();
        let h = k.host_stats().unwrap();
        assert_eq!((t.host_faults, h.base_faults, h.faults), (1079, 1079, 1079));
        assert_eq!(t.host_ns, t.host_faults as f64 * 12_000.0);
        let (r, k) = crate::run_with(&w, &settings(&["enabled=always"]), &m, &mut opts).unwrap();
        let t = r.time.unwrap();
        assert_eq!((t.host_faults, k.host_stats().unwrap().base_faults), (3072, 0));
        assert_eq!(t.host_ns, 3072.0 * 10_000.0);
    }

    /// A paced fill lets the daemon wake during it, as it does during a slow fill on the
    /// machine. Four 2 MiB ranges each get one base page while MADV_NOHUGEPAGE (4 faults, 4
    /// PTE tables), then MADV_HUGEPAGE registers the mm at clock 0 (a wake-up due at 0), then
    /// `rate=8M/s` writes the 2048 pages in 1024 chunks of 2, chunk k followed by a sleep to
    /// (k + 1) × 2/2048 s, so the touch ends at exactly 1 s (workload::Pacing). By hand, with
    /// max_ptes_none=511 (a range with one page present collapses) and pages_to_scan=512 (a
    /// wake-up stops once 1 + 512 ≥ 512: one range each):
    /// - chunk 0 (pages 0, 1: page 0 is there, page 1 faults) then its sleep runs the wake-up
    ///   due at 0: range 0 collapses (2 pages present); every later page of it is a hit;
    /// - 104 ms (100 ms in jiffies at HZ=250, one more for the timer wheel; the fill is at page
    ///   212 of range 0): range 1 collapses (its one page);
    /// - 208 ms: range 2; 312 ms: range 3, before the fill reaches them (at 250, 500, 750 ms);
    /// - 416 ms: the VMA's end (a full scan), then a second pass from the list head: range 0 is
    ///   PMD-mapped (SCAN_PMD_MAPPED); 520, 624, 728 ms: ranges 1, 2, 3 PMD-mapped; 832 ms:
    ///   the end again (the second full scan) and range 0; 936 ms: range 1;
    /// - the wake-up due at 1040 ms is after the clock's 1 s: not run.
    /// So 10 wake-ups, 4 collapses, 6 SCAN_PMD_MAPPED, 2 full scans, and 5 faults (4 + page 1).
    /// The same fill unpaced takes no simulated time: the daemon never wakes, all 2044 missing
    /// pages fault as base pages.
    #[test]
    fn a_paced_fill_meets_the_daemon_during_the_touch() {
        let s = settings(&["enabled=madvise", "khugepaged/max_ptes_none=511", "khugepaged/scan_sleep_millisecs=100", "khugepaged/pages_to_scan=512"]);
        let text = "mmap a 8M align=2M\nmadvise a nohugepage\ntouch a write stride=2M\nmadvise a hugepage\ntouch a write rate=8M/s\n";
        let w = workload::parse("t", text).unwrap();
        let mut opts = crate::RunOptions { check_invariants: true, ..Default::default() };
        let (r, _) = crate::run_with(&w, &s, &MachineConfig::default(), &mut opts).unwrap();
        let kh = khugepaged(&r);
        assert_eq!((kh.wakeups, kh.pages_collapsed, kh.full_scans, kh.pmds_scanned), (10, 4, 2, 10));
        let scans = &model(&r).scan_results;
        assert_eq!((scans["SCAN_SUCCEED"], scans["SCAN_PMD_MAPPED"]), (4, 6));
        assert_eq!(r.vmstat["thp_collapse_alloc"], 4);
        assert_eq!(r.vmstat["thp_fault_alloc"], 0);
        assert_eq!(r.folios, [("2048kB".into(), 4)].into());
        assert_eq!(r.process.minflt, 5);
        // The touch took 1 s of simulated time: the clock ends there.
        let costs = uapi::profile::FaultCosts::default();
        let mut opts = crate::RunOptions { profile: crate::Profile { costs: Some(costs), ..Default::default() }, ..Default::default() };
        let (r, _) = crate::run_with(&w, &s, &MachineConfig::default(), &mut opts).unwrap();
        assert_eq!(r.time.unwrap().elapsed_ns, 1_000_000_000);
        // Unpaced: no time passes, no wake-up runs.
        let w = workload::parse("t", &text.replace(" rate=8M/s", "")).unwrap();
        let r = run(&w, &s, &MachineConfig::default()).unwrap();
        assert_eq!((khugepaged(&r).wakeups, khugepaged(&r).pages_collapsed, r.process.minflt), (0, 0, 2048));
    }

    /// With a profile the clock moves with each chunk's work; the sleep after a chunk only
    /// makes up the rest of its time, and a rate the machine cannot keep up with runs flat out.
    /// 4 KiB faults cost 1 ms here. `rate=1M/s` over 100 pages: 256 pages a second, chunks of
    /// one page (1 MiB/s × 1 ms = 0.256 pages, at least 1), page k may start at k × 3.90625 ms:
    /// each chunk's fault (1 ms) and a sleep of 2.90625 ms, 390.625 ms in all. `rate=100M/s`:
    /// 26-page chunks due every 1.015625 ms, but each takes 26 ms of faults: never a sleep,
    /// 100 ms in all (the faults alone).
    #[test]
    fn a_priced_paced_touch_sleeps_only_what_its_work_left() {
        let costs = uapi::profile::FaultCosts { ns_per_fault: [("4kB".to_string(), 1e6)].into(), ..Default::default() };
        for (rate, elapsed) in [("1M/s", 390_625_000), ("100M/s", 100_000_000)] {
            let w = workload::parse("t", &format!("mmap a 400K\ntouch a write rate={rate}\n")).unwrap();
            let mut opts = crate::RunOptions { profile: crate::Profile { costs: Some(costs.clone()), ..Default::default() }, ..Default::default() };
            let (r, _) = crate::run_with(&w, &settings(&[]), &MachineConfig::default(), &mut opts).unwrap();
            let t = r.time.unwrap();
            assert_eq!((r.process.minflt, t.total_ns), (100, 100e6), "rate={rate}");
            assert_eq!(t.elapsed_ns, elapsed, "rate={rate}");
        }
    }

    /// `repeat 1s { … sleep 100ms }`: iterations start at 0, 100, …, 900 ms (each while the
    /// clock is before 1 s), so 10, and the clock ends at 1 s. The body's calls are reported
    /// once, as the last iteration made them (as the live executor keeps them).
    #[test]
    fn repeat_for_a_second_runs_ten_iterations_of_100ms() {
        let text = "mmap a 8M align=2M\nrepeat 1s {\n  touch a[0+4K] write\n  madvise a[0+4K] dontneed\n  sleep 100ms\n}\nmunmap a\n";
        let w = workload::parse("t", text).unwrap();
        let mut opts = crate::RunOptions { check_invariants: true, profile: crate::Profile { costs: Some(Default::default()), ..Default::default() }, ..Default::default() };
        let (r, _) = crate::run_with(&w, &settings(&[]), &MachineConfig::default(), &mut opts).unwrap();
        assert_eq!(r.repeats, [uapi::result::RepeatRun { line: 2, duration_ns: 1_000_000_000, iterations: 10 }]);
        // Each iteration's write faults again after the dontneed.
        assert_eq!(r.process.minflt, 10);
        assert_eq!(r.time.unwrap().elapsed_ns, 1_000_000_000);
        let calls: Vec<(usize, &str)> = r.calls.iter().map(|c| (c.line, c.call.as_str())).collect();
        assert_eq!(calls, [(1, "mmap"), (4, "madvise(dontneed)"), (7, "munmap")]);
        // 250 ms iterations in 1 s: at 0, 250, 500, 750 ms; 1 ms ones in 10.5 ms: 11.
        for (text, n) in [("repeat 1s {\nsleep 250ms\n}\n", 4), ("repeat 10.5ms {\nsleep 1ms\n}\n", 11)] {
            let r = run(&workload::parse("t", text).unwrap(), &settings(&[]), &MachineConfig::default()).unwrap();
            assert_eq!(r.repeats[0].iterations, n, "{text}");
        }
        // A body whose paced touch selects no page takes no time: refused when it runs.
        let w = workload::parse("t", "mmap a 1M\nrepeat 1s {\ntouch a write count=0 rate=1M/s\n}\n").unwrap();
        let e = run(&w, &settings(&[]), &MachineConfig::default()).unwrap_err().to_string();
        assert!(e.starts_with("t:2: an iteration of this repeat DURATION block took no simulated time"), "{e}");
    }

    /// pages_to_scan smaller than the VMA: a wake-up stops after 1 + 512·n ≥ pages_to_scan
    /// and the next one goes on from the saved address.
    #[test]
    fn pages_to_scan_spreads_a_pass_over_wakeups() {
        let w = workload::parse("t", "mmap a 8M align=2M\ntouch a write\nmadvise a hugepage\nsleep 350ms\n").unwrap();
        let mut s = settings(&["enabled=never", "khugepaged/scan_sleep_millisecs=100", "khugepaged/pages_to_scan=1024"]);
        // Faults under never, then madvise mode for the daemon.
        let r0 = run(&w, &s, &MachineConfig::default()).unwrap();
        assert_eq!(khugepaged(&r0).wakeups, 0, "never: no daemon");
        s.apply_assignment("enabled=madvise").unwrap();
        let w = workload::parse("t", "mmap a 8M align=2M\nmadvise a nohugepage\ntouch a write\nmadvise a hugepage\nsleep 350ms\n").unwrap();
        let r = run(&w, &s, &MachineConfig::default()).unwrap();
        let kh = khugepaged(&r);
        // Wake-ups at 0, 100, 200, 300 ms. The first collapses at 0 and drops the lock
        // (progress 513 < 1024: the loop calls again), collapses at 2M (1026 ≥ 1024: stop).
        // The second: 4M and 6M. The third: the VMA ends (a full scan), then the list head is
        // passed a second time: no more work this wake-up. The fourth: a new pass, 4 PMD-mapped.
        assert_eq!(kh.pages_collapsed, 4);
        assert_eq!(kh.wakeups, 4);
        assert_eq!(r.folios[&thp_abi::FolioSize::from("2048kB")], 4);
    }

    /// `--sample 100`: the daemon of `pages_to_scan_spreads_a_pass_over_wakeups` seen every
    /// 100 ms. A sample at n × 100 ms comes after the wake-ups due before it: at 100 ms the
    /// first (two collapses), at 200 ms the second (two more), at 300 ms the third (the pass
    /// ends: one full scan). The 350 ms run has no sample at 400 ms.
    #[test]
    fn the_timeline_samples_the_daemon_between_wakeups() {
        let w = workload::parse("t", "mmap a 8M align=2M\nmadvise a nohugepage\ntouch a write\nmadvise a hugepage\nsleep 350ms\n").unwrap();
        let s = settings(&["enabled=madvise", "khugepaged/scan_sleep_millisecs=100", "khugepaged/pages_to_scan=1024"]);
        let mut opts = crate::RunOptions { check_invariants: true, profile: crate::Profile { sample_ms: Some(100), ..Default::default() }, ..Default::default() };
        let (r, _) = crate::run_with(&w, &s, &MachineConfig::default(), &mut opts).unwrap();
        let t = r.timeline.expect("--sample gives a timeline");
        assert_eq!(t.interval_ms, 100);
        let rows: Vec<(f64, i64, u64, Option<u64>, Option<u64>, i64, u64)> = t
            .samples
            .iter()
            .map(|x| (x.t_ms, x.pages_collapsed, x.anon_huge_pages_kb, x.folios.get(&thp_abi::FolioSize::from("2048kB")).copied(), x.folios.get(&thp_abi::FolioSize::from("4kB")).copied(), x.full_scans, x.rss_kb))
            .collect();
        assert_eq!(
            rows,
            [
                (100.0, 2, 4096, Some(2), Some(1024), 0, 8192),
                (200.0, 4, 8192, Some(4), None, 0, 8192),
                (300.0, 4, 8192, Some(4), None, 1, 8192),
            ]
        );
        assert!(t.samples.iter().all(|x| x.thp_collapse_alloc == x.pages_collapsed && x.shmem_pmd_mapped_kb == 0));
    }

    /// kernel/time/timer.c by hand: a level-0 timeout (under 63 jiffies) fires one jiffy after
    /// its expiry; level 1 (63 to 503 jiffies) at the next multiple of 8 above it; level 2 (504
    /// to 4031) at the next multiple of 64.
    #[test]
    fn the_timer_wheel_rounds_up_one_granule() {
        use super::timer_wheel_expiry;
        assert_eq!(timer_wheel_expiry(128, 25), 154);
        assert_eq!(timer_wheel_expiry(0, 62), 63);
        assert_eq!(timer_wheel_expiry(0, 250), 256);
        assert_eq!(timer_wheel_expiry(5, 250), 256);
        assert_eq!(timer_wheel_expiry(6, 250), 264);
        assert_eq!(timer_wheel_expiry(0, 2500), 2560);
        // msecs_to_jiffies rounds up: 1 ms is one jiffy at HZ=250, 10 ms three.
        assert_eq!((super::msecs_to_jiffies(1, 250), super::msecs_to_jiffies(10, 250), super::msecs_to_jiffies(100, 250)), (1, 3, 25));
    }

    /// The shmem workload of the live test (crates/thplab/tests/it/khugepaged.rs): a tmpfs file
    /// (huge=within_size) written in 4 KiB pieces (4 KiB folios: within_size lets no larger one
    /// fit) to 512, 256 and 64 pages of its first three 2 MiB ranges, grown to 8 MiB, mapped
    /// (the mmap registers the mm: within_size at vm_pgoff 0 fits in i_size), partly faulted as
    /// 4 KiB pages, left to the daemon, then its first 4 MiB read again.
    pub(crate) const SHMEM_WORKLOAD: &str = "tmpfs t huge=within_size\nfile f on=t\nwrite f[0+2M] chunk=4K\nwrite f[2M+1M] chunk=4K\n\
        write f[4M+256K] chunk=4K\nftruncate f 8M\nmmap a 8M file=f align=2M\ntouch a[0+2M] read\ntouch a[2M+1M] write\nsleep 1s\ntouch a[0+4M] read\n";

    fn run_checked(text: &str, s: &ThpSettings) -> (uapi::RunResult, mm::Kernel) {
        let w = workload::parse("t", text).unwrap();
        let mut opts = crate::RunOptions { check_invariants: true, ..Default::default() };
        let (r, k) = crate::run_with(&w, s, &MachineConfig::default(), &mut opts).unwrap();
        k.check_invariants().unwrap();
        (r, k)
    }

    /// khugepaged on shmem (SHMEM_WORKLOAD) at max_ptes_none 256: the scan counts page-cache
    /// pages, so the 2 MiB range (512) and the 1 MiB one (256 present, 256 holes) collapse in
    /// the first wake-up, the 256 KiB one (64) and the empty one fail with
    /// SCAN_EXCEED_NONE_PTE at every wake-up. Live (6.18.44, this machine): thp_collapse_alloc
    /// 2, thp_scan_exceed_none_pte 2 per scan, pages_collapsed 2 per scan (the collapsed
    /// ranges are SCAN_PTE_MAPPED_HUGEPAGE at every later scan and collapse_pte_mapped_thp
    /// finds no PTE table: SCAN_SUCCEED, counted again), minflt 290 (32 fault-around reads +
    /// 256 write faults before, 2 PMD faults after: the collapse unmapped the PTEs and retracted
    /// the tables, nothing was PMD-mapped until the read), thp_file_mapped 2, ShmemHugePages
    /// 4096 kB, ShmemPmdMapped 4096 kB, Shmem 4352 kB (the holes of the 1 MiB range filled),
    /// no thp_file_alloc and no shmem_alloc. Then the last two ranges: 64 + 0 pages of 512.
    #[test]
    fn khugepaged_collapses_shmem_page_cache_ranges() {
        let s = settings(&["khugepaged/max_ptes_none=256", "khugepaged/scan_sleep_millisecs=100", "khugepaged/pages_to_scan=4096"]);
        let (r, _) = run_checked(SHMEM_WORKLOAD, &s);
        let kh = khugepaged(&r);
        assert_eq!(kh.wakeups, 10);
        assert_eq!(kh.pages_collapsed, 20, "2 per wake-up");
        assert_eq!(r.vmstat["thp_collapse_alloc"], 2);
        assert_eq!(r.vmstat["thp_scan_exceed_none_pte"], 20);
        assert_eq!(r.vmstat["thp_file_mapped"], 2);
        assert_eq!(r.vmstat["thp_file_alloc"], 0);
        assert_eq!(r.mthp[&thp_abi::SizeDir::from("hugepages-2048kB")]["shmem_alloc"], 0);
        assert_eq!(r.process.minflt, 290);
        assert_eq!(r.census.sizes[&thp_abi::FolioSize::from("2048kB")].pmd_mapped, 2);
        assert_eq!(r.folios.len(), 1, "nothing else mapped: {:?}", r.folios);
        assert_eq!((r.meminfo["Shmem"], r.meminfo["ShmemHugePages"], r.meminfo["ShmemPmdMapped"]), (4352, 4096, 4096));
        let scans = &model(&r).scan_results;
        // Per range: 2 SCAN_SUCCEED (collapse_file), then 9 wake-ups of SCAN_PTE_MAPPED_HUGEPAGE
        // each followed by collapse_pte_mapped_thp's SCAN_SUCCEED.
        assert_eq!((scans["SCAN_SUCCEED"], scans["SCAN_PTE_MAPPED_HUGEPAGE"], scans["SCAN_EXCEED_NONE_PTE"]), (20, 18, 20));
    }

    /// max_ptes_none 0 and 511 (by hand from the rule above): 0 collapses only the full range,
    /// 511 every range with at least one page (three); the empty range never (0 < 1).
    #[test]
    fn max_ptes_none_limits_holes_in_the_page_cache() {
        for (none, collapsed) in [(0u64, 1i64), (511, 3)] {
            let s = settings(&[&format!("khugepaged/max_ptes_none={none}"), "khugepaged/scan_sleep_millisecs=100"]);
            let (r, _) = run_checked(SHMEM_WORKLOAD, &s);
            assert_eq!(r.vmstat["thp_collapse_alloc"], collapsed, "max_ptes_none={none}");
            assert_eq!(khugepaged(&r).pages_collapsed, collapsed as u64 * 10, "max_ptes_none={none}");
            // The final read maps the collapsed ranges among the first two with a PMD.
            assert_eq!(r.census.sizes[&thp_abi::FolioSize::from("2048kB")].pmd_mapped, collapsed.min(2) as u64, "max_ptes_none={none}");
        }
    }

    /// MADV_HUGEPAGE on a huge=advise tmpfs mapping does not register the mm (the shmem rule
    /// reads the VMA's flags before VM_HUGEPAGE is set): live, no collapse. Once an anonymous
    /// THP registers the mm, the daemon collapses the advised shmem range too (live:
    /// thp_collapse_alloc 1, ShmemHugePages 2048 kB).
    #[test]
    fn madv_hugepage_on_advise_tmpfs_does_not_register_the_mm() {
        let base = "tmpfs t huge=advise\nfile f on=t\nwrite f[0+2M] chunk=4K\nmmap a 4M file=f align=2M\nmadvise a hugepage\n";
        let s = settings(&["enabled=madvise", "khugepaged/scan_sleep_millisecs=100"]);
        let (r, _) = run_checked(&format!("{base}sleep 500ms\n"), &s);
        assert_eq!((khugepaged(&r).registered, r.vmstat["thp_collapse_alloc"]), (false, 0));
        let (r, _) = run_checked(&format!("{base}mmap b 2M align=2M\nmadvise b hugepage\ntouch b[0+4K] write\nsleep 500ms\n"), &s);
        assert_eq!(r.vmstat["thp_collapse_alloc"], 1);
        assert_eq!(r.meminfo["ShmemHugePages"], 2048);
    }

    /// MADV_COLLAPSE of a tmpfs file on a huge=never mount with every knob never (forced
    /// collapse: PMD whatever huge= says). Live: the first call 0 with three collapses, PMD-mapped
    /// at once (thp_file_mapped 3, the later read takes no fault: minflt 288), the empty last
    /// range SCAN_TRUNCATED after allocating (thp_collapse_alloc 4) and EINVAL; khugepaged's
    /// pages_collapsed unchanged. A memfd with hugepages-2048kB/shmem_enabled=never: EINVAL
    /// (the forced rule of anonymous shmem still needs the per-size inherit).
    #[test]
    fn madv_collapse_of_shmem_maps_a_pmd_at_once() {
        let text = "tmpfs t huge=never\nfile f on=t\nwrite f[0+2M] chunk=4K\nwrite f[2M+1M] chunk=4K\nwrite f[4M+256K] chunk=4K\n\
                    ftruncate f 8M\nmmap a 8M file=f align=2M\ntouch a[0+2M] read\ntouch a[2M+1M] write\n\
                    madvise a[0+6M] collapse\nmadvise a[6M+2M] collapse\ntouch a[0+6M] read\n";
        let (r, _) = run_checked(text, &settings(&["enabled=never"]));
        let rets: Vec<&str> = r.calls.iter().filter(|c| c.call == "madvise(collapse)").map(|c| c.ret.as_str()).collect();
        assert_eq!(rets, ["0", "EINVAL"]);
        assert_eq!((r.vmstat["thp_collapse_alloc"], r.vmstat["thp_file_mapped"], r.process.minflt), (4, 3, 288));
        assert_eq!(r.census.sizes[&thp_abi::FolioSize::from("2048kB")].pmd_mapped, 3);
        assert_eq!((r.meminfo["Shmem"], r.meminfo["ShmemHugePages"], r.meminfo["ShmemPmdMapped"]), (6144, 6144, 6144));
        assert_eq!(khugepaged(&r).pages_collapsed, 0);
        assert_eq!(model(&r).scan_results["SCAN_TRUNCATED"], 1);
        let memfd = "memfd f\nftruncate f 4M\nmmap a 4M file=f align=2M\ntouch a[0+2M] write\nmadvise a collapse\n";
        let (r, _) = run_checked(memfd, &settings(&["enabled=never", "hugepages-2048kB/shmem_enabled=never"]));
        assert_eq!(r.calls.last().unwrap().ret, "EINVAL");
        // Live, with the per-size knob at inherit (and top-level never): 0, two PMDs, 513 faults.
        let (r, _) = run_checked("memfd f\nftruncate f 4M\nmmap a 4M file=f align=2M\ntouch a[0+2M] write\ntouch a[2M+4K] write\nmadvise a collapse\n", &settings(&["enabled=never"]));
        assert_eq!((r.calls.last().unwrap().ret.as_str(), r.census.sizes[&thp_abi::FolioSize::from("2048kB")].pmd_mapped, r.process.minflt), ("0", 2, 513));
    }

    /// Another mm's PTEs of the collapsed range go too and its table is retracted: a forked
    /// child (a shared file mapping is not copied at fork) that read the range (32 fault-around
    /// faults) takes one PMD fault after the parent's MADV_COLLAPSE. Live: child minflt 33,
    /// thp_file_mapped 2, one 2 MiB folio PMD-mapped in the parent.
    #[test]
    fn collapse_unmaps_the_file_from_every_mm() {
        let text = "tmpfs t huge=within_size\nfile f on=t\nwrite f[0+2M] chunk=4K\nftruncate f 4M\nmmap a 4M file=f align=2M\n\
                    touch a[0+2M] read\nfork c {\n  touch a[0+2M] read\n}\nmadvise a[0+2M] collapse\nin c {\n  touch a[0+2M] read\n  exit\n}\nwait c\n";
        let (r, _) = run_checked(text, &settings(&["enabled=never"]));
        let c = r.processes.iter().find(|p| p.name == "c").unwrap();
        assert_eq!((r.processes[0].process.minflt, c.process.minflt), (32, 33));
        assert_eq!((r.vmstat["thp_collapse_alloc"], r.vmstat["thp_file_mapped"]), (1, 2));
        assert_eq!(r.census.sizes[&thp_abi::FolioSize::from("2048kB")].pmd_mapped, 1);
    }

    /// khugepaged_alloc_sleep on the clock: a 64 MiB machine (min_free_kbytes 1024) whose
    /// memory is nearly all in base pages, so that no 2 MiB block is free and every collapse's
    /// allocation fails (thp_collapse_alloc_failed). scan_sleep_millisecs=100 (26 jiffies at
    /// HZ=250: 104 ms) and alloc_sleep_millisecs=200 (51 jiffies: 204 ms). By hand: the wake-up
    /// at 0 fails on range 0 and sleeps 204 ms; at 204 it goes on at range 1, fails again and
    /// ends; the next wake-up is 104 ms later, at 308 (range 2, sleep), 512 (range 3, end), 616
    /// (range 4), 820 (range 5), 924 (range 6, sleep until 1128: after the run's 1 s). So 4
    /// wake-ups, 4 alloc sleeps, 7 failed allocations on 7 ranges, no collapse.
    #[test]
    fn a_failed_collapse_allocation_puts_the_daemon_to_sleep() {
        let s = settings(&["enabled=madvise", "khugepaged/max_ptes_none=511", "khugepaged/scan_sleep_millisecs=100", "khugepaged/alloc_sleep_millisecs=200", "khugepaged/pages_to_scan=4096"]);
        let text = "mmap a 16M align=2M\nmadvise a nohugepage\ntouch a write\nmmap b 46M\nmadvise b nohugepage\ntouch b write\nmadvise a hugepage\nsleep 1s\n";
        let w = workload::parse("t", text).unwrap();
        let m = MachineConfig { mem_bytes: 64 << 20, min_free_kbytes: 1024, ..MachineConfig::default() };
        let mut opts = crate::RunOptions { check_invariants: true, ..Default::default() };
        let (r, _) = crate::run_with(&w, &s, &m, &mut opts).unwrap();
        let kh = khugepaged(&r);
        assert_eq!((kh.wakeups, kh.alloc_sleeps, kh.pmds_scanned, kh.pages_collapsed), (4, 4, 7, 0));
        assert_eq!(r.vmstat["thp_collapse_alloc_failed"], 7);
        assert_eq!(model(&r).scan_results["SCAN_ALLOC_HUGE_PAGE_FAIL"], 7);
        // With the default 60 s alloc sleep, the wake-up at 0 fails once and sleeps past the end.
        let s60 = settings(&["enabled=madvise", "khugepaged/max_ptes_none=511", "khugepaged/scan_sleep_millisecs=100", "khugepaged/pages_to_scan=4096"]);
        let (r, _) = crate::run_with(&w, &s60, &m, &mut crate::RunOptions::default()).unwrap();
        assert_eq!((khugepaged(&r).wakeups, khugepaged(&r).alloc_sleeps, r.vmstat["thp_collapse_alloc_failed"]), (1, 1, 1));
    }
}
