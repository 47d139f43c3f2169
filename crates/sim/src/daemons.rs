//! The daemons of the simulated machine on the driver's clock: khugepaged's wake-ups
//! (mm/khugepaged.c: `khugepaged`, `khugepaged_wait_work`, `__khugepaged_enter`). The mm core
//! is clockless and does one wake-up's work (`Kernel::khugepaged_do_scan`); when it wakes is
//! decided here.
//!
//! The clock moves with `sleep` statements (the other statements take no simulated time
//! unless a profile prices them). The daemon sleeps on an empty list until an mm registers
//! (`__khugepaged_enter` wakes it when the list was empty), then scans and sleeps
//! `khugepaged/scan_sleep_millisecs` between wake-ups, in jiffies as the kernel sleeps
//! (`khugepaged_wait_work`: `wait_event_freezable_timeout` for `msecs_to_jiffies(ms)`, a timer
//! of the timer wheel, kernel/time/timer.c: `calc_wheel_index`, `calc_index`): the timeout is
//! rounded up to whole jiffies, and the wheel fires a timer one granule of its level after the
//! expiry's granule (a level-0 timer, under 63 jiffies, one jiffy late), so at HZ=250 a
//! 100 ms sleep lasts 26 jiffies, 104 ms, as the live daemon on this machine kind does. With
//! 0 ms the kernel rescans without pause; here it waits for the next tick. A wake-up due at
//! time t runs when the clock passes t, so statements at the same instant (the program runs
//! on while the daemon wakes) come first.

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
            k.khugepaged_do_scan();
            let next = self.next_wake(t, k.settings().khugepaged.scan_sleep_millisecs as u64);
            self.next_wake_ns = k.khugepaged_has_work().then_some(next);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{run, MachineConfig};
    use uapi::ThpSettings;

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
        assert_eq!(r.folios["2048kB"], 2);
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
    #[test]
    fn a_priced_clock_wakes_the_daemon_during_the_program() {
        let text = "phase fill\nmmap a 2M align=2M\nmmap b 2M align=2M\nmmap c 4M\nmadvise a nohugepage\nmadvise b nohugepage\n\
                    touch a[0+1M] write\ntouch b[0+1M] write\nmadvise a hugepage\nmadvise b hugepage\nphase more\ntouch c[0+800K] write\nsleep 1ms\n";
        let w = workload::parse("t", text).unwrap();
        let s = settings(&["enabled=madvise", "khugepaged/scan_sleep_millisecs=100", "khugepaged/pages_to_scan=512"]);
        let r = run(&w, &s, &MachineConfig::default()).unwrap();
        assert_eq!((khugepaged(&r).wakeups, khugepaged(&r).pages_collapsed), (1, 1));
        let costs = uapi::profile::FaultCosts { ns_per_fault: [("4kB".to_string(), 1e6)].into(), ..Default::default() };
        let mut opts = crate::RunOptions { check_invariants: true, costs: Some(costs), ..Default::default() };
        let (r, _) = crate::run_with(&w, &s, &MachineConfig::default(), &mut opts).unwrap();
        let kh = khugepaged(&r);
        assert_eq!((kh.wakeups, kh.pages_collapsed), (2, 2));
        assert_eq!(r.folios["2048kB"], 2);
        let t = r.time.unwrap();
        assert_eq!(t.faults["4kB"], 712);
        assert_eq!(t.total_ns, 712e6);
        // The clock: the work and the sleep; each phase from its statement to the next.
        assert_eq!(t.elapsed_ns, 713_000_000);
        let phases: Vec<(&str, u64, u64)> = t.phases.iter().map(|p| (p.name.as_str(), p.start_ns, p.ns)).collect();
        assert_eq!(phases, [("fill", 0, 512_000_000), ("more", 512_000_000, 201_000_000)]);
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
        assert_eq!(r.folios["2048kB"], 4);
    }

    /// `--sample 100`: the daemon of `pages_to_scan_spreads_a_pass_over_wakeups` seen every
    /// 100 ms. A sample at n × 100 ms comes after the wake-ups due before it: at 100 ms the
    /// first (two collapses), at 200 ms the second (two more), at 300 ms the third (the pass
    /// ends: one full scan). The 350 ms run has no sample at 400 ms.
    #[test]
    fn the_timeline_samples_the_daemon_between_wakeups() {
        let w = workload::parse("t", "mmap a 8M align=2M\nmadvise a nohugepage\ntouch a write\nmadvise a hugepage\nsleep 350ms\n").unwrap();
        let s = settings(&["enabled=madvise", "khugepaged/scan_sleep_millisecs=100", "khugepaged/pages_to_scan=1024"]);
        let mut opts = crate::RunOptions { check_invariants: true, sample_ms: Some(100), ..Default::default() };
        let (r, _) = crate::run_with(&w, &s, &MachineConfig::default(), &mut opts).unwrap();
        let t = r.timeline.expect("--sample gives a timeline");
        assert_eq!(t.interval_ms, 100);
        let rows: Vec<(f64, i64, u64, Option<u64>, Option<u64>, i64, u64)> = t
            .samples
            .iter()
            .map(|x| (x.t_ms, x.pages_collapsed, x.anon_huge_pages_kb, x.folios.get("2048kB").copied(), x.folios.get("4kB").copied(), x.full_scans, x.rss_kb))
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
}
