//! The daemons of the simulated machine on the driver's clock: khugepaged's wake-ups
//! (mm/khugepaged.c: `khugepaged`, `khugepaged_wait_work`, `__khugepaged_enter`). The mm core
//! is clockless and does one wake-up's work (`Kernel::khugepaged_do_scan`); when it wakes is
//! decided here.
//!
//! The clock moves with `sleep` statements (the other statements take no simulated time
//! unless a profile prices them). The daemon sleeps on an empty list until an mm registers
//! (`__khugepaged_enter` wakes it when the list was empty), then scans and sleeps
//! `khugepaged/scan_sleep_millisecs` (at least 1 ms here: with 0 the kernel rescans without
//! pause) between wake-ups. A wake-up due at time t runs when the clock passes t, so
//! statements at the same instant (the program runs on while the daemon wakes) come first.

use mm::Kernel;

/// khugepaged's schedule.
#[derive(Clone, Debug, Default)]
pub struct Khugepaged {
    /// When it wakes next; None while its list is empty (or THP is off).
    pub next_wake_ns: Option<u64>,
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

    /// Run every wake-up due before `until`.
    pub fn run_until(&mut self, k: &mut Kernel, until: u64) {
        while let Some(t) = self.next_wake_ns {
            if t >= until {
                break;
            }
            k.khugepaged_do_scan();
            let period = (k.settings().khugepaged.scan_sleep_millisecs as u64).max(1) * 1_000_000;
            self.next_wake_ns = k.khugepaged_has_work().then_some(t + period);
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
    /// of 200 more pages (200 ms) passes it and the next one at 612 ms: one range collapsed
    /// each (pages_to_scan 512: one range, plus the skipped VMA of c). Unpriced, the clock
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
        // The third wake-up, due at 712 ms, runs in the final sleep and finds both collapsed.
        assert_eq!((kh.wakeups, kh.pages_collapsed), (3, 2));
        assert_eq!(r.folios["2048kB"], 2);
        let t = r.time.unwrap();
        assert_eq!(t.faults["4kB"], 712);
        assert_eq!(t.total_ns, 712e6);
        // The clock: the work and the sleep; each phase from its statement to the next.
        assert_eq!(t.elapsed_ns, 713_000_000);
        let phases: Vec<(&str, u64, u64)> = t.phases.iter().map(|p| (p.name.as_str(), p.start_ns, p.ns)).collect();
        assert_eq!(phases, [("fill", 0, 512_000_000), ("more", 512_000_000, 201_000_000)]);
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
    /// - 100 ms (the fill is at page 204 of range 0): range 1 collapses (its one page);
    /// - 200 ms: range 2; 300 ms: range 3, before the fill reaches them (at 250, 500, 750 ms);
    /// - 400 ms: the VMA's end (a full scan), then a second pass from the list head: range 0 is
    ///   PMD-mapped (SCAN_PMD_MAPPED); 500, 600, 700 ms: ranges 1, 2, 3 PMD-mapped; 800 ms:
    ///   the end again (the second full scan) and range 0; 900 ms: range 1;
    /// - the wake-up due at 1000 ms is not before the clock's 1 s: not run.
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
        assert_eq!(r.folios, [("2048kB".to_string(), 4)].into());
        assert_eq!(r.process.minflt, 5);
        // The touch took 1 s of simulated time: the clock ends there.
        let costs = uapi::profile::FaultCosts::default();
        let mut opts = crate::RunOptions { costs: Some(costs), ..Default::default() };
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
            let mut opts = crate::RunOptions { costs: Some(costs.clone()), ..Default::default() };
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
        let mut opts = crate::RunOptions { check_invariants: true, costs: Some(Default::default()), ..Default::default() };
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
        assert_eq!(r.folios["2048kB"], 4);
    }
}
