//! The parent's last job: from the runs to one [`RunResult`] with source `live`: medians over
//! the runs (and their spread), the representative run's census and regions, the calls, the
//! phases and repeats, the khugepaged counters, and how much of the system-wide counters is not
//! the workload's (noise).

use std::collections::BTreeMap;
use std::time::Duration;

use thp_abi::FolioSize;
use uapi::result::{LiveKhugepaged, LiveSection, LiveWorkloadRun, Noise, NoiseEntry, Spread};
use thp_abi::{MthpStat, ThpSettings};
use uapi::{CallResult, ProcessStats, RunResult};
use workload::{OpKind, Workload};

use super::parent::{errno_name, RunOnce, MEMINFO_FIELDS};
use super::spec::ExecSpec;
use probe::procfs::{label_of_dir, CounterSnapshot};

/// Each phase of the runs (the first run's, in order): the median over the runs of its start
/// and of its length (to the next phase or the end of the operations).
fn phase_times(runs: &[RunOnce]) -> Vec<uapi::result::PhaseTime> {
    let Some(first) = runs.first() else { return Vec::new() };
    (0..first.phases.len())
        .map(|j| {
            let of = |r: &RunOnce| -> (i64, i64) {
                let start = r.phases.get(j).map_or(0, |p| p.1);
                let end = r.phases.get(j + 1).map_or(r.wall_ns, |p| p.1);
                (start as i64, end.saturating_sub(start) as i64)
            };
            let mut starts: Vec<i64> = runs.iter().map(|r| of(r).0).collect();
            let mut lens: Vec<i64> = runs.iter().map(|r| of(r).1).collect();
            uapi::result::PhaseTime { name: first.phases[j].0.clone(), start_ns: median(&mut starts) as u64, ns: median(&mut lens) as u64 }
        })
        .collect()
}

/// The /proc/meminfo lines a run reports, in kB.
/// Lower median of `v` (an observed value).
pub(super) fn median(v: &mut [i64]) -> i64 {
    v.sort_unstable();
    if v.is_empty() {
        0
    } else {
        v[(v.len() - 1) / 2]
    }
}

fn spread_of(v: &[i64]) -> Spread {
    let mut s = v.to_vec();
    let median = median(&mut s);
    Spread { min: s.first().copied().unwrap_or(0), median, max: s.last().copied().unwrap_or(0) }
}

pub(super) fn assemble(w: &Workload, settings: &ThpSettings, spec: &ExecSpec, runs: Vec<RunOnce>, notes: Vec<String>, sample: Option<Duration>) -> RunResult {
    let mut res = RunResult::new("live", &w.source);
    res.settings = settings.knob_map();
    let n = runs.len();
    // The representative run: the one with the median fault count.
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| runs[i].minflt);
    let rep = &runs[order[(n - 1) / 2]];

    let mut spread = BTreeMap::new();
    let mut col = |name: String, vals: Vec<i64>| -> i64 {
        let mut v = vals.clone();
        let m = median(&mut v);
        if n > 1 && vals.iter().any(|&x| x != 0) {
            spread.insert(name, spread_of(&vals));
        }
        m
    };
    let minflt = col("minflt".into(), runs.iter().map(|r| r.minflt as i64).collect());
    let rss = col("rss_bytes".into(), runs.iter().map(|r| r.rss_bytes as i64).collect());
    let ahp = col("anon_huge_bytes".into(), runs.iter().map(|r| r.anon_huge_bytes as i64).collect());
    let host_faults = runs.iter().map(|r| r.host_faults.map(|n| n as i64)).collect::<Option<Vec<i64>>>().map(|v| col("host_faults".into(), v) as u64);
    for name in rep.counters.vmstat.keys() {
        let v = col(format!("vmstat.{name}"), runs.iter().map(|r| r.counters.vmstat.get(name).copied().unwrap_or(0)).collect());
        res.vmstat.insert(name.into(), v);
    }
    for (dir, m) in &rep.counters.mthp {
        let mut out = BTreeMap::new();
        for stat in m.keys() {
            let v = col(
                format!("{dir}.{stat}"),
                runs.iter().map(|r| r.counters.mthp.get(dir).and_then(|m| m.get(stat)).copied().unwrap_or(0)).collect(),
            );
            out.insert(stat.into(), v);
        }
        res.mthp.insert(dir.into(), out);
    }
    let hugetlb: &[&str] = if w.uses_hugetlb() { super::hugetlb::HUGETLB_MEMINFO_FIELDS } else { &[] };
    for name in MEMINFO_FIELDS.iter().chain(hugetlb) {
        let v = col(format!("meminfo.{name}"), runs.iter().map(|r| r.meminfo.get(*name).copied().unwrap_or(0)).collect());
        res.meminfo.insert((*name).into(), v);
    }
    let mut walls: Vec<i64> = runs.iter().map(|r| (r.wall_ns / 1000) as i64).collect();
    let wall_us = median(&mut walls);
    // The free lists of the run whose wall time is the median: the one the time row compares.
    let free_lists = runs.iter().find(|r| (r.wall_ns / 1000) as i64 == wall_us).and_then(|r| r.free_lists.clone());
    res.process = ProcessStats { minflt: minflt as u64, rss_bytes: rss as u64, anon_huge_bytes: ahp as u64, bloat_bytes: None, majflt: None };
    res.census = rep.census.clone();
    res.folios = rep.census.folio_counts();
    res.processes = processes(w, &runs, rep, &mut col);
    res.regions = rep.regions.clone();
    res.repeats = repeats(spec, &runs, &mut col);

    res.calls = calls(spec, &rep.results);
    let census_varied = runs.iter().any(|r| r.census != rep.census);
    res.timeline = sample.map(|every| uapi::Timeline { interval_ms: every.as_millis() as u64, samples: rep.timeline.clone() });
    res.live = Some(LiveSection {
        kernel_release: crate::kernel_release(),
        wall_ms: wall_us as f64 / 1000.0,
        untraced_ms: None,
        hw_tlb: Vec::new(),
        time_range_ms: uapi::result::MsRange::of(&runs.iter().map(|r| r.wall_ns as f64 / 1e6).collect::<Vec<_>>()),
        khugepaged: khugepaged_sum(runs.iter().map(|r| &r.counters)),
        workload: Some(LiveWorkloadRun {
            runs: n as u64,
            start_brk: format!("{:#x}", rep.start_brk),
            census_ms: rep.census_ms,
            census_pagemap_ms: rep.census_detail.0,
            census_kpageflags_ms: rep.census_detail.1,
            census_kpageflags_reads: rep.census_detail.2,
            census_kpageflags_pfns: rep.census_detail.3,
            spread,
            census_varied_between_runs: census_varied,
            placement: notes,
            noise: noise(rep),
            phases: phase_times(&runs),
            host_faults,
            free_lists,
            fault_latency: fault_latency(&runs),
        }),
        program: None,
        pressure: rep.pressure.clone(),
    });
    pressure_into(&mut res, rep.pressure.as_ref());
    res
}

/// Under pressure, the reclaim and swap lines and the major faults
/// (`crate::pressure::result_lines`); nothing without.
fn pressure_into(res: &mut RunResult, p: Option<&uapi::result::LivePressure>) {
    if let Some(p) = p {
        crate::pressure::result_lines(res, p);
    }
}

/// A workload that forks: each process's row, its minflt the median over the runs (`col`), the
/// rest the representative run's.
fn processes(w: &Workload, runs: &[RunOnce], rep: &RunOnce, col: &mut impl FnMut(String, Vec<i64>) -> i64) -> Vec<uapi::result::ProcResult> {
    let mut out = Vec::new();
    for (p, decl) in w.procs.iter().enumerate().filter(|_| w.forks()) {
        let get = |r: &RunOnce| r.procs.get(p).cloned().unwrap_or_default();
        let minflt = col(format!("processes.{}.minflt", decl.name), runs.iter().map(|r| get(r).minflt as i64).collect());
        let one = get(rep);
        out.push(uapi::result::ProcResult {
            name: decl.name.clone(),
            exited: one.exited,
            process: ProcessStats { minflt: minflt as u64, rss_bytes: one.rss_bytes, anon_huge_bytes: one.anon_huge_bytes, bloat_bytes: None, majflt: None },
            census: one.census,
            cow_copied: None,
            cow_reused: None,
            shares_mm_with: decl.shares_mm().then(|| w.proc(decl.parent.expect("a thread or vfork child has a parent")).name.clone()),
        });
    }
    out
}

/// Each `repeat DURATION` block: its iterations (the loop node's result), the median over
/// the runs (`col`).
fn repeats(spec: &ExecSpec, runs: &[RunOnce], col: &mut impl FnMut(String, Vec<i64>) -> i64) -> Vec<uapi::result::RepeatRun> {
    let mut out = Vec::new();
    for (i, op) in spec.ops.iter().enumerate() {
        if let OpKind::RepeatFor { ns, .. } = op.op {
            let v = col(format!("repeats.{}.iterations", op.line), runs.iter().map(|r| r.results.get(i).copied().unwrap_or(0)).collect());
            out.push(uapi::result::RepeatRun { line: op.line, duration_ns: ns, iterations: v.max(0) as u64 });
        }
    }
    out
}

/// The calls of the representative run, as the model lists them: statements that make no call
/// (touches, accesses, sleep, exit, phase) have no row.
fn calls(spec: &ExecSpec, results: &[i64]) -> Vec<CallResult> {
    spec
        .ops
        .iter()
        .zip(results)
        // Statements that make no call (touches, accesses, sleep, exit, phase) have no row, as in
        // the model's `calls`.
        .filter(|(op, _)| !op.call.is_empty() && !matches!(op.op, OpKind::Touch(_) | OpKind::Access(_)))
        .map(|(op, &rc)| CallResult {
            line: op.line,
            call: op.call.clone(),
            ret: if op.op.returns_value() { format!("{rc:#x}") } else { errno_name(rc as i32) },
        })
        .collect()
}

/// The khugepaged counters' deltas, summed over runs.
pub(crate) fn khugepaged_sum<'a>(runs: impl Iterator<Item = &'a CounterSnapshot>) -> LiveKhugepaged {
    let mut sum = LiveKhugepaged { runqueue_wait_ms: Some(0), ..Default::default() };
    for c in runs {
        let get = |name: &str| c.khugepaged.get(name).copied().unwrap_or(0);
        sum.pages_collapsed += get("pages_collapsed");
        sum.full_scans += get("full_scans");
        sum.runqueue_wait_ms = sum.runqueue_wait_ms.zip(c.khugepaged_wait).map(|(ms, (_, ns))| ms + ns / 1_000_000);
    }
    sum
}

/// How much of the system-wide counters is not this process: per size, the `anon_fault_alloc`
/// delta against the folios of that size the census found.
fn noise(r: &RunOnce) -> Noise {
    let mut per_size = BTreeMap::new();
    let mut total_excess = 0i64;
    for (dir, m) in &r.counters.mthp {
        let Some(&alloc) = m.get(MthpStat::AnonFaultAlloc.name()) else { continue };
        let label = label_of_dir(dir).unwrap_or_default();
        let census = r.census.sizes.get(&FolioSize::from(label.as_str())).map(|e| e.folios).unwrap_or(0) as i64;
        if alloc == 0 && census == 0 {
            continue;
        }
        let excess = alloc - census;
        total_excess += excess.max(0);
        per_size.insert(label, NoiseEntry { anon_fault_alloc: alloc, census_folios: census, excess });
    }
    let note = if total_excess == 0 {
        "system-wide counters match this process's census (no other activity seen)".to_string()
    } else {
        format!(
            "system-wide anon_fault_alloc exceeds this process's census by {total_excess} folio(s): other processes \
             faulted large folios during the run, or the workload freed or split some (munmap, dontneed)"
        )
    };
    Noise { note, anon_fault_alloc_vs_census: per_size, excess_total: total_excess }
}


/// `--latency`: the faults of every run's touches in one distribution (None without).
fn fault_latency(runs: &[RunOnce]) -> Option<uapi::latency::FaultLatency> {
    let mut h = uapi::latency::Histogram::default();
    runs.iter().flat_map(|r| &r.latency).for_each(|&(i, n)| h.add_bucket(i, n));
    let source = format!(
        "live: each page of the main process's unpaced touch statements timed with clock_gettime around its first access, the slowest as many as minflt + majflt grew taken as the faults, {} run(s) together; percentiles and max are bucket highs (within 1/64)",
        runs.len()
    );
    h.summary().map(|all| uapi::latency::FaultLatency { all, sizes: Default::default(), source })
}
