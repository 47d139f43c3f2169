//! The run's time from a machine profile (`[fault]` of uapi::profile, measured by
//! `thplab calibrate`): the model core is clockless and counts work (faults by folio size,
//! zero-page mappings, pages touched, calls); this turns the counts into time.
//!
//! Faults by size come from the per-size event counters the model keeps as the kernel does
//! (`hugepages-<size>/stats/anon_fault_alloc` and `shmem_alloc`: mm/memory.c:
//! alloc_anon_folio, mm/huge_memory.c: __do_huge_pmd_anonymous_page, mm/shmem.c:
//! shmem_alloc_and_add_folio); read faults that map the zero page or the huge zero folio are
//! the census's zero-page PTEs and huge zero PMDs; every other fault in minflt allocated a
//! 4 KiB page.

use std::collections::BTreeMap;

use uapi::profile::FaultCosts;
use uapi::{RunResult, TimeEstimate};

/// The estimate for `r`, a recorded program's replay that touched `touched_pages` pages and
/// made `calls` calls. Each fault is priced as a program pays it over its life
/// (`FaultCosts::program_fault_ns`: with the fill it does and the free at its end where the
/// profile measured them); with fill costs, the writes to a folio's other pages are the
/// program's own work, in its time under every setting, so touches without a fault cost nothing
/// more.
pub fn estimate(r: &RunResult, touched_pages: u64, calls: u64, c: &FaultCosts) -> TimeEstimate {
    let mut t = TimeEstimate::default();
    let mut large = 0u64;
    for (dir, stats) in &r.mthp {
        let Some(size) = dir.strip_prefix("hugepages-") else { continue };
        let n = (stats.get("anon_fault_alloc").copied().unwrap_or(0) + stats.get("shmem_alloc").copied().unwrap_or(0)).max(0) as u64;
        if n > 0 {
            *t.faults.entry(size.to_string()).or_default() += n;
            large += n;
        }
    }
    t.zero_page_faults = r.census.zero_page_ptes + r.census.huge_zero_pmds;
    let small = r.process.minflt.saturating_sub(large + t.zero_page_faults);
    if small > 0 {
        *t.faults.entry("4kB".to_string()).or_default() += small;
    }
    let four_k = c.program_fault_ns("4kB").unwrap_or(0.0);
    let mut faults = 0u64;
    for (size, n) in &t.faults {
        let ns = match c.program_fault_ns(size) {
            Some(ns) => ns,
            None => {
                t.unmeasured_sizes.push(size.clone());
                four_k
            }
        };
        t.faults_ns.insert(size.clone(), *n as f64 * ns);
        faults += n;
    }
    t.zero_page_ns = t.zero_page_faults as f64 * c.zero_page_read_ns;
    t.touches_without_fault = touched_pages.saturating_sub(faults + t.zero_page_faults);
    let touch_ns = if c.fill_ns_per_fault.is_empty() { c.touch_ns_per_page } else { 0.0 };
    t.touch_ns = t.touches_without_fault as f64 * touch_ns;
    t.calls = calls;
    t.calls_ns = calls as f64 * c.syscall_ns;
    t.total_ns = t.faults_ns.values().sum::<f64>() + t.zero_page_ns + t.touch_ns + t.calls_ns;
    t
}

/// The ± of each profile figure `t` priced (`uapi::TimeUncertainty::profile_ns`): the ns of
/// its events × the figure's calibrated spread (`FaultCosts::spread_pct`, `HostCosts::
/// fault_spread_pct`; a figure without one adds nothing). A workload's faults are priced at
/// `fault SIZE` (and its MADV_COLLAPSE collapses as `fault 2048kB`), its frees at `free SIZE`;
/// a recording's faults (`recording`) at what a program pays, `filled SIZE` (else `fault
/// SIZE`) and `free SIZE`. Touches, zero-page reads and calls at their own figures, host
/// faults at `host fault`; accesses and pinning carry no calibrated spread.
pub fn profile_spread(t: &TimeEstimate, c: &FaultCosts, host: Option<&uapi::profile::HostCosts>, recording: bool) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let mut add = |what: String, ns: f64| {
        let v = ns * c.spread(&what);
        if v != 0.0 {
            *out.entry(what).or_insert(0.0) += v;
        }
    };
    for (size, &n) in &t.faults {
        let n = n as f64;
        if recording {
            let fill = c.fill_ns_per_fault.get(size).map(|&f| ("filled", f)).or(c.fault_ns(size).map(|f| ("fault", f)));
            if let Some((what, ns)) = fill {
                add(format!("{what} {size}"), n * ns);
            }
            add(format!("free {size}"), n * c.free_ns_per_folio.get(size).copied().unwrap_or(0.0));
        } else {
            add(format!("fault {size}"), t.faults_ns.get(size).copied().unwrap_or(0.0));
        }
    }
    for (size, &n) in &t.frees {
        add(format!("free {size}"), n as f64 * c.free_ns_per_folio.get(size).copied().unwrap_or(0.0));
    }
    add("fault 2048kB".into(), t.collapse_ns);
    add("zero page read".into(), t.zero_page_ns);
    add("touch".into(), t.touch_ns);
    add("syscall".into(), t.calls_ns);
    if let Some(p) = host.and_then(|h| h.fault_spread_pct).filter(|_| t.host_ns > 0.0) {
        out.insert("host fault".into(), t.host_ns * p / 100.0);
    }
    out
}

/// Free lists in which every free frame lies in a reported block (the small blocks used up,
/// every block of the reporting order and above reported: a long idle machine, or one whose
/// other processes took the small blocks), for a machine of `mem_bytes`: the far end of the
/// host states a model run may meet, where every frame its allocations take is a host fault.
pub fn all_reported(mem_bytes: u64) -> uapi::profile::FreeLists {
    let mut free = vec![0u64; mm_types::MAX_PAGE_ORDER as usize + 1];
    free[mm_types::MAX_PAGE_ORDER as usize] = mem_bytes >> (12 + mm_types::MAX_PAGE_ORDER as u32);
    uapi::profile::FreeLists { free, reported: None, cpu: None, pcp: 0 }
}

/// Sets `t.uncertainty` from its parts: the profile's (`profile_spread`) and the program's
/// own ± (`program_ns`); then its interval. The host state is [`set_host_range`]'s.
pub fn set_uncertainty(t: &mut TimeEstimate, profile_ns: BTreeMap<String, f64>, program_ns: f64) {
    let host = t.uncertainty.take().and_then(|u| u.host);
    t.uncertainty = Some(uapi::result::TimeUncertainty { low_ns: 0.0, high_ns: 0.0, profile_ns, program_ns, host });
    t.set_bounds();
}

/// Sets the host state `t` assumed (`assumed`, in words) and how far another moves it: down to
/// no host fault (every frame backed), up to `high_faults` costing `high_ns`, the same run's
/// host faults from [`all_reported`] free lists; then the interval.
pub fn set_host_range(t: &mut TimeEstimate, assumed: String, high_faults: u64, high_ns: f64) {
    let range = uapi::result::HostStateRange {
        assumed,
        low_faults: 0,
        high_faults: high_faults.max(t.host_faults),
        down_ns: t.host_ns,
        up_ns: (high_ns - t.host_ns).max(0.0),
    };
    t.uncertainty.get_or_insert_with(Default::default).host = Some(range);
    t.set_bounds();
}

/// What of an access the TLB model prices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessPrice {
    /// The data read and the translation (a workload's `access` statements: dependent loads).
    Whole,
    /// The translation alone (a recording's accesses: where its data reads are served from
    /// is the program's own, in its untraced time under every setting, and the model's
    /// uniform-random estimate of it knows nothing of a real program's locality).
    Translation,
}

/// Adds the TLB model's estimate of `r`'s accesses (`r.accesses`, when it ran any) to `t`'s
/// total. For a recording timed untraced, the baseline carries the same accesses under 4 KiB
/// pages, so the program's own time keeps its real access time and the estimate under a
/// setting moves by the model's difference between the two.
pub fn add_accesses(t: &mut TimeEstimate, r: &RunResult, price: AccessPrice) {
    if let Some(a) = &r.accesses {
        let ns = match price {
            AccessPrice::Whole => a.total.ns,
            AccessPrice::Translation => a.total.translation_cycles / a.ghz,
        };
        t.accesses = a.total.accesses;
        t.accesses_ns = ns;
        t.total_ns += ns;
    }
}

/// A recording timed untraced (`record --timed`): the program's own time is its untraced wall
/// time `untraced_ns` less `baseline`, the model's time of its work as it ran (THP disabled:
/// 4 KiB pages); under any setting it runs that long plus the work of `t`. Sets
/// `t.program_ns` (with `t.measured_ns` and `t.baseline_ns`, what it comes from) and `t.elapsed_ns`. A program whose own time comes out negative (the
/// profile prices its faults above what they cost it) counts 0.
pub fn add_program_time(t: &mut TimeEstimate, baseline: &TimeEstimate, untraced_ns: u64) {
    let own = (untraced_ns as f64 - baseline.total_ns).max(0.0);
    t.program_ns = Some(own);
    t.measured_ns = Some(untraced_ns);
    t.baseline_ns = Some(baseline.total_ns);
    t.elapsed_ns = (own + t.total_ns).round() as u64;
}

/// A recording's time under the profile's `[fault]` costs: `r`, its replay under some
/// settings with `opts` (its `[host]`, its recorded accesses), priced from its totals, and with
/// `record --timed` the program's own time too ([`add_program_time`]), both against its run
/// as recorded (THP disabled, 4 KiB pages: replayed under `enabled=never` with the same
/// options, whose faults are the pages the program touches, and with `timed_free`, the free
/// lists the untraced runs met, where known: which of its frames the host had dropped depends
/// on them).
#[allow(clippy::too_many_arguments)]
pub fn recording(
    r: &RunResult,
    name: &str,
    header: &trace::Header,
    events: &[trace::Event],
    machine: &crate::MachineConfig,
    fault: &FaultCosts,
    opts: &crate::ReplayOptions,
    timed_free: Option<&uapi::profile::FreeLists>,
) -> Result<TimeEstimate, crate::SimError> {
    let base = baseline(name, header, events, machine, opts, timed_free)?;
    Ok(recording_on(r, &base, header, events, fault, opts))
}

/// The recording replayed under 4 KiB pages (`enabled=never`, `shmem_enabled=never`) with the
/// profile's host and accesses, the baseline [`recording_on`] prices a setting against; the
/// same for every setting, so a matrix replays it once.
pub fn baseline(
    name: &str,
    header: &trace::Header,
    events: &[trace::Event],
    machine: &crate::MachineConfig,
    opts: &crate::ReplayOptions,
    timed_free: Option<&uapi::profile::FreeLists>,
) -> Result<RunResult, crate::SimError> {
    let mut four_k = thp_abi::ThpSettings::default();
    for a in ["enabled=never", "shmem_enabled=never"] {
        four_k.apply_assignment(a).expect("valid knobs");
    }
    let host = opts.profile.host.clone().map(|(h, free)| (h, timed_free.cloned().or(free)));
    let profile = crate::Profile { host, accesses: opts.profile.accesses.clone(), tlb: opts.profile.tlb, ..Default::default() };
    let base_opts = crate::ReplayOptions { profile, ..Default::default() };
    crate::run_recording_opts(name, header, events, &four_k, machine, &base_opts)
}

/// [`recording`] with its 4 KiB baseline ([`baseline`]) already replayed.
pub fn recording_on(r: &RunResult, base: &RunResult, header: &trace::Header, events: &[trace::Event], fault: &FaultCosts, opts: &crate::ReplayOptions) -> TimeEstimate {
    let calls = events.iter().filter(|e| matches!(e.body, trace::EventBody::Syscall(_))).count() as u64;
    let touched = base.process.minflt.max(r.process.minflt);
    let priced = |run: &RunResult| {
        let mut t = estimate(run, touched, calls, fault);
        if let Some((h, _)) = &opts.profile.host {
            add_host_faults(&mut t, run, h);
        }
        add_accesses(&mut t, run, AccessPrice::Translation);
        t
    };
    let mut t = priced(r);
    t.elapsed_ns = t.total_ns.round() as u64;
    let host = opts.profile.host.as_ref().map(|(h, _)| h);
    let mut spread = profile_spread(&t, fault, host, true);
    if header.untraced_wall_ns > 0 {
        let b = priced(base);
        add_program_time(&mut t, &b, header.untraced_wall_ns);
        // The program's own time is measured against the baseline's priced work: an error in
        // a cost moves both, and only their difference is the estimate's.
        for (what, ns) in profile_spread(&b, fault, host, true) {
            *spread.entry(what).or_insert(0.0) -= ns;
        }
        spread.retain(|_, v| v.abs() > 1e-6);
    }
    if !fault.spread_pct.is_empty() || host.is_some() {
        set_uncertainty(&mut t, spread, 0.0);
    }
    t
}

/// A replay's host faults and their ns under `host` (as [`recording`] prices them).
pub fn replay_host(r: &RunResult, host: &uapi::profile::HostCosts) -> (u64, f64) {
    let mut t = TimeEstimate::default();
    add_host_faults(&mut t, r, host);
    (t.host_faults, t.host_ns)
}

/// A replay's host faults (`ReplayReport::host_faults`) priced with the profile's `[host]`:
/// those of base pages at `base_fault_ns_per_page`, the others at `fault_ns_per_page`.
fn add_host_faults(t: &mut TimeEstimate, r: &RunResult, host: &uapi::profile::HostCosts) {
    let (n, base) = r.model.as_ref().and_then(|m| m.replay.as_ref()).map_or((0, 0), |rp| (rp.host_faults, rp.host_base_faults));
    t.host_faults = n;
    t.host_ns = (n - base) as f64 * host.fault_ns_per_page + base as f64 * host.base_fault_ns_per_page.unwrap_or(host.fault_ns_per_page);
    t.total_ns += t.host_ns;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costs() -> FaultCosts {
        FaultCosts {
            ns_per_fault: [("4kB".to_string(), 1000.0), ("64kB".to_string(), 5000.0), ("2048kB".to_string(), 100_000.0)].into(),
            zero_page_read_ns: 400.0,
            touch_ns_per_page: 10.0,
            syscall_ns: 2000.0,
            source: "test".into(),
            ..Default::default()
        }
    }

    #[test]
    fn one_gib_written_page_by_page_under_each_size() {
        // 4K: 262144 faults of 1000 ns; 2 calls (mmap, munmap) of 2000 ns.
        let mut r = RunResult::new("sim", "w");
        r.process.minflt = 262_144;
        let t = estimate(&r, 262_144, 2, &costs());
        assert_eq!(t.faults["4kB"], 262_144);
        assert_eq!(t.total_ns, 262_144.0 * 1000.0 + 4000.0);
        // 64K: 16384 faults of 5000 ns, and 15 of every 16 pages touched without a fault.
        let mut r = RunResult::new("sim", "w");
        r.process.minflt = 16_384;
        r.mthp.insert("hugepages-64kB".into(), [("anon_fault_alloc".into(), 16_384)].into());
        let t = estimate(&r, 262_144, 0, &costs());
        assert_eq!((t.faults.get("4kB"), t.faults["64kB"], t.touches_without_fault), (None, 16_384, 245_760));
        assert_eq!(t.total_ns, 16_384.0 * 5000.0 + 245_760.0 * 10.0);
        // PMD, and a size the profile lacks (charged as 4kB and named).
        let mut r = RunResult::new("sim", "w");
        r.process.minflt = 513;
        r.mthp.insert("hugepages-2048kB".into(), [("anon_fault_alloc".into(), 512)].into());
        r.mthp.insert("hugepages-32kB".into(), [("anon_fault_alloc".into(), 1)].into());
        let t = estimate(&r, 262_152, 0, &costs());
        assert_eq!(t.unmeasured_sizes, vec!["32kB".to_string()]);
        assert_eq!(t.faults_ns["32kB"], 1000.0);
        assert_eq!(t.touches_without_fault, 262_152 - 513);
        assert_eq!(t.total_ns, 512.0 * 100_000.0 + 1000.0 + 261_639.0 * 10.0);
    }

    #[test]
    fn zero_page_reads_are_their_own_cost() {
        let mut r = RunResult::new("sim", "w");
        r.process.minflt = 300;
        r.census.zero_page_ptes = 256;
        let t = estimate(&r, 300, 0, &costs());
        assert_eq!((t.zero_page_faults, t.faults["4kB"]), (256, 44));
        assert_eq!(t.total_ns, 256.0 * 400.0 + 44.0 * 1000.0);
    }

    /// With fill and free costs, a fault costs what it costs a program: 64 KiB faults filled
    /// at 6000 ns and freed at 600 ns: 16384 × 6600 ns; the other 245760 pages are the
    /// program's own writes (no touch cost); a size without a fill figure falls back to its
    /// fault cost (4kB, 1000 ns, freed at 200 ns: 10 × 1200 ns).
    #[test]
    fn a_program_pays_the_fill_and_the_free_of_each_fault() {
        let mut c = costs();
        c.fill_ns_per_fault.insert("64kB".into(), 6000.0);
        c.free_ns_per_folio.insert("64kB".into(), 600.0);
        c.free_ns_per_folio.insert("4kB".into(), 200.0);
        let mut r = RunResult::new("sim", "w");
        r.process.minflt = 16_394;
        r.mthp.insert("hugepages-64kB".into(), [("anon_fault_alloc".into(), 16_384)].into());
        let t = estimate(&r, 262_154, 0, &c);
        assert_eq!((t.faults["64kB"], t.faults["4kB"], t.touches_without_fault, t.touch_ns), (16_384, 10, 245_760, 0.0));
        assert_eq!(t.total_ns, 16_384.0 * 6600.0 + 10.0 * 1200.0);
    }

    /// The ± of an estimate, by hand: 1 GiB under 4 KiB pages, 262144 faults of 1000 ns (262.144
    /// ms) at a spread of 10 % and 2 calls of 2000 ns at 5 %: ± 26.2144 ms + 200 ns. As a
    /// recording (each fault pays its fill, 1500 ns at 4 %, and its free, 200 ns at 50 %):
    /// 262144 × (60 + 100) ns = 41.94304 ms. With 1000 host faults of 8000 ns at 25 %: 2 ms
    /// more. The host state: down by its 8 ms of host faults, up to 262144 host faults
    /// (2097.152 ms): +2089.152 ms.
    #[test]
    fn the_uncertainty_of_an_estimate_by_hand() {
        let mut c = costs();
        c.spread_pct = [("fault 4kB".to_string(), 10.0), ("syscall".to_string(), 5.0), ("filled 4kB".to_string(), 4.0), ("free 4kB".to_string(), 50.0)].into();
        let mut r = RunResult::new("sim", "w");
        r.process.minflt = 262_144;
        let mut t = estimate(&r, 262_144, 2, &c);
        let p = profile_spread(&t, &c, None, false);
        assert_eq!(p, [("fault 4kB".to_string(), 26_214_400.0), ("syscall".to_string(), 200.0)].into());
        c.fill_ns_per_fault.insert("4kB".into(), 1500.0);
        c.free_ns_per_folio.insert("4kB".into(), 200.0);
        let p = profile_spread(&t, &c, None, true);
        assert_eq!((p["filled 4kB"], p["free 4kB"], p.get("fault 4kB")), (262_144.0 * 60.0, 262_144.0 * 100.0, None));
        let host = uapi::profile::HostCosts { page_reporting_order: 9, fault_ns_per_page: 8000.0, fault_spread_pct: Some(25.0), ..Default::default() };
        (t.host_faults, t.host_ns) = (1000, 8e6);
        t.elapsed_ns = 300_000_000;
        let p = profile_spread(&t, &c, Some(&host), true);
        assert_eq!(p["host fault"], 2e6);
        set_uncertainty(&mut t, p, 0.0);
        let sym = 262_144.0 * 160.0 + 200.0 + 2e6;
        assert_eq!(t.sym_ns(), sym);
        set_host_range(&mut t, "idle".into(), 262_144, 2_097_152_000.0);
        let u = t.uncertainty.as_ref().unwrap();
        let h = u.host.as_ref().unwrap();
        assert_eq!((h.low_faults, h.high_faults, h.down_ns, h.up_ns), (0, 262_144, 8e6, 2_089_152_000.0));
        assert_eq!((u.low_ns, u.high_ns), (300e6 - 8e6 - sym, 300e6 + 2_089_152_000.0 + sym));
        // The far end of the host states: every free frame in a reported MAX_PAGE_ORDER block.
        let far = all_reported(24 << 30);
        assert_eq!((far.free[10], far.free[..10].iter().sum::<u64>(), far.reported.clone()), (6144, 0, None));
    }

    /// A program that ran 0.40 s untraced with 60000 faults of 4 KiB (1000 ns each: 60 ms):
    /// its own time is 340 ms; with 100 PMD faults of 100 µs (10 ms) it runs 350 ms.
    #[test]
    fn a_timed_recording_runs_its_own_time_plus_the_work() {
        let mut base = RunResult::new("sim", "w");
        base.process.minflt = 60_000;
        let baseline = estimate(&base, 60_000, 0, &costs());
        let mut pmd = RunResult::new("sim", "w");
        pmd.process.minflt = 100;
        pmd.mthp.insert("hugepages-2048kB".into(), [("anon_fault_alloc".into(), 100)].into());
        let mut t = estimate(&pmd, 100, 0, &costs());
        add_program_time(&mut t, &baseline, 400_000_000);
        assert_eq!(t.program_ns, Some(340e6));
        assert_eq!(t.elapsed_ns, 350_000_000);
        // What the program's own time comes from: 400 ms measured less the 60 ms baseline.
        assert_eq!((t.measured_ns, t.baseline_ns), (Some(400_000_000), Some(60e6)));
        let mut short = estimate(&pmd, 100, 0, &costs());
        add_program_time(&mut short, &baseline, 50_000_000);
        assert_eq!((short.program_ns, short.elapsed_ns), (Some(0.0), 10_000_000));
        assert_eq!((short.measured_ns, short.baseline_ns), (Some(50_000_000), Some(60e6)));
    }
}
