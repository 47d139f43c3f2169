//! Every point of a space predicted in the model, in parallel (rayon): a workload as `thplab
//! sim --profile` runs it (`experiment::simulate::sim_one`), a recording replayed and priced
//! as `thplab compare --record --profile` does (`experiment::program::replay_model`,
//! `price_replay`), each under the point's settings.
//!
//! Per-process choices are expressed in a workload the way its own statements would be: a
//! `prctl thp_disable [except_advised]` before its first operation (kernel/sys.c:
//! `prctl_set_thp_disable`; the mm flag is inherited by fork, kernel/fork.c: `mm_init`), and
//! `madvise REGION hugepage` after each private anonymous `mmap` (what glibc's malloc does to
//! the memory it maps under GLIBC_TUNABLES=glibc.malloc.hugetlb=1: malloc/malloc.c
//! `madvise_thp`; the brk heap is not a region of a workload). A recording holds the calls the
//! program made with THP disabled for it; the replay cannot add a prctl before its first
//! execve or the madvise calls glibc would have made, so those points are not predicted for a
//! recording, and the advice says so.

use anyhow::Result;
use experiment::simulate::{SimInput, SimOptions};
use uapi::RunResult;
use workload::{Advice, Backing, OpKind, Range, ThpDisable, Workload};

use crate::pareto::Point;
use crate::space::{Choice, Process};

/// Why a per-process choice is not predicted for a recording.
pub const NOT_FOR_RECORDING: &str = concat!(
    "the recording holds the calls the program made; the replay cannot add a prctl before its first execve, ",
    "nor the madvise(MADV_HUGEPAGE) calls glibc would make. To predict MADV_HUGEPAGE, advise on the program run under it: ",
    "`thplab advise -- env GLIBC_TUNABLES=glibc.malloc.hugetlb=1 CMD` (the replay models the madvise calls that recording holds); ",
    "the prctl choices are predicted for workloads only"
);

/// What the points are run with.
pub struct Model<'a> {
    pub input: &'a SimInput,
    pub machine: &'a sim::MachineConfig,
    /// With the `[fault]` costs (the builtin profile unless told): the time is priced.
    pub profile: &'a sim::Profile,
    /// A recording's timed runs' range (ms): the ± of the program's own time.
    pub timed_range: Option<uapi::result::MsRange>,
    /// Worker threads.
    pub jobs: usize,
}

/// Whether `c` can be predicted for this input.
pub fn expressible(input: &SimInput, c: &Choice) -> bool {
    matches!(input, SimInput::Workload(_)) || c.process == Process::None
}

/// Each choice's result (or why it failed), in the order given.
pub fn run_all(m: &Model, choices: &[Choice]) -> Result<Vec<Result<RunResult, String>>> {
    use rayon::prelude::*;
    let pool = rayon::ThreadPoolBuilder::new().num_threads(m.jobs.max(1)).build()?;
    Ok(pool.install(|| choices.par_iter().map(|c| run_one(m, c).map_err(|e| format!("{e:#}"))).collect()))
}

/// One choice in the model.
pub fn run_one(m: &Model, c: &Choice) -> Result<RunResult> {
    match m.input {
        SimInput::Workload(w) => {
            let o = SimOptions { check: false, recorded_time: false, profile: m.profile, salvage: None };
            let w = SimInput::Workload(with_process(w, c.process));
            experiment::simulate::sim_one(&o, &w, &c.settings, m.machine, None, false)
        }
        SimInput::Recording { name, header, events, accesses, .. } => {
            anyhow::ensure!(c.process == Process::None, "{NOT_FOR_RECORDING}");
            let accesses = accesses.as_ref().map(|(file, trace)| sim::RecordedAccessInput { file: file.clone(), trace: trace.clone() });
            let replay = sim::ReplayOptions { recorded_time: true, profile: sim::Profile { accesses, ..m.profile.clone() }, ..Default::default() };
            let rec = (name.as_str(), header, events.as_slice());
            let mut r = experiment::program::replay_model(rec, &c.settings, m.machine, &replay)?;
            if let Some(fault) = &m.profile.costs {
                experiment::program::price_replay(&mut r, rec, &c.settings, m.machine, &replay, fault, None, m.timed_range)?;
            }
            Ok(r)
        }
    }
}

/// `w` with a per-process choice written into it (module documentation).
pub fn with_process(w: &Workload, p: Process) -> Workload {
    let mut w = w.clone();
    let line = w.ops.first().map_or(1, |o| o.line);
    match p {
        Process::None => {}
        Process::ThpDisable | Process::ThpDisableExceptAdvised => {
            let form = if p == Process::ThpDisable { ThpDisable::Completely } else { ThpDisable::ExceptAdvised };
            let op = workload::Op { line, proc: workload::ProcId::MAIN, kind: OpKind::Prctl(form) };
            insert_after(&mut w.ops, |_| false, |_| op.clone(), true);
        }
        Process::MadvHugepage => {
            let is_anon = |o: &workload::Op| matches!(o.kind, OpKind::Mmap { backing: Backing::PrivateAnon, .. });
            let madvise = |o: &workload::Op| {
                let OpKind::Mmap { region, .. } = o.kind else { unreachable!("an mmap") };
                workload::Op { line: o.line, proc: o.proc, kind: OpKind::Madvise(Range { region, offset: 0, len: workload::TO_END, every: None }, Advice::Hugepage) }
            };
            insert_after(&mut w.ops, is_anon, madvise, false);
        }
    }
    w
}

/// Insert `make(op)` after every op `after` selects (or one op at the front), keeping each
/// `repeat` block's body count (`OpKind::RepeatFor::body`: the ops after it that it runs) over
/// the ops it held.
fn insert_after(ops: &mut Vec<workload::Op>, after: impl Fn(&workload::Op) -> bool, make: impl Fn(&workload::Op) -> workload::Op, front: bool) {
    let old = std::mem::take(ops);
    let mut pos = Vec::with_capacity(old.len());
    let mut added = vec![false; old.len()];
    if front {
        ops.push(make(&old[0]));
    }
    for (i, o) in old.iter().enumerate() {
        pos.push(ops.len());
        ops.push(o.clone());
        if after(o) {
            ops.push(make(o));
            added[i] = true;
        }
    }
    for (i, o) in old.iter().enumerate() {
        if let OpKind::RepeatFor { body, .. } = o.kind {
            let last = i + body;
            let end = if body == 0 { pos[i] } else { pos[last] + added[last] as usize };
            if let OpKind::RepeatFor { body: b, .. } = &mut ops[pos[i]].kind {
                *b = end - pos[i];
            }
        }
    }
}

/// A result as a point of the front.
pub fn point(c: &Choice, r: &RunResult) -> Point {
    let t = r.time.as_ref();
    let time_ns = t.map_or(0.0, |t| t.elapsed_ns as f64);
    let u = t.and_then(|t| t.uncertainty.as_ref());
    let (down_ns, up_ns) = u.and_then(|u| u.host.as_ref()).map_or((0.0, 0.0), |h| (h.down_ns, h.up_ns));
    let shared = u.map(|u| u.profile_ns.clone()).unwrap_or_default();
    let rss = r.peak.as_ref().map_or(0, |p| p.rss_bytes).max(r.process.rss_bytes);
    let pgtable_bytes = r.model.as_ref().and_then(|m| m.run.as_ref()).map_or(0, |m| m.pgtable_pages * 4096);
    Point {
        label: c.label.clone(),
        time_ns,
        work_ns: t.map_or(0.0, |t| t.total_ns),
        down_ns,
        up_ns,
        shared,
        live_spread_ns: u.map_or(0.0, |u| u.program_ns),
        memory_bytes: rss + pgtable_bytes,
        bloat_bytes: r.process.bloat_bytes.unwrap_or(0),
        pgtable_bytes,
        weight: c.weight(),
        is_default: c.is_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Workload {
        workload::parse("w.thpw", text).unwrap()
    }

    #[test]
    fn madv_hugepage_follows_each_private_anonymous_mmap_and_repeat_bodies_grow() {
        let w = parse("mmap a 4M\nmmap s 4M shared\nrepeat 1s {\n  mmap b 2M\n  touch b write\n  munmap b\n  sleep 100ms\n}\ntouch a write\n");
        let name = |o: &workload::Op| format!("{:?}", o.kind).split([' ', '(', '{']).next().unwrap().to_string();
        let before: Vec<String> = w.ops.iter().map(name).collect();
        let m = with_process(&w, Process::MadvHugepage);
        let kinds: Vec<String> = m.ops.iter().map(name).collect();
        let mut want = before.clone();
        want.insert(1, "Madvise".into());
        want.insert(5, "Madvise".into());
        assert_eq!(kinds, want);
        let body = |w: &Workload| w.ops.iter().find_map(|o| if let OpKind::RepeatFor { body, .. } = o.kind { Some(body) } else { None });
        assert_eq!((body(&w), body(&m)), (Some(4), Some(5)));
        assert_eq!(m.ops[4].kind, w.ops[3].kind, "the mmap of b, then its madvise");
    }

    #[test]
    fn prctl_goes_first() {
        let w = parse("mmap a 4M\ntouch a write\n");
        let m = with_process(&w, Process::ThpDisableExceptAdvised);
        assert_eq!(m.ops[0].kind, OpKind::Prctl(ThpDisable::ExceptAdvised));
        assert_eq!(m.ops.len(), 3);
    }
}
