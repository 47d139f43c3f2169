//! `thplab bench io`: what O_DIRECT reads into 4 KiB, mTHP, PMD THP and hugetlbfs buffers cost
//! on the running kernel (issue #12), and the pin companion that times pinning and unpinning
//! the same buffers without I/O.
//!
//! [`run`] sets everything up (buffers under the settings guard, the hugetlb pool, the loop
//! device over a private tmpfs, the O_DIRECT file), runs every case `repeats` times
//! (interleaved: repeat 1 of every case, then repeat 2, so slow drift shows as spread rather
//! than as a difference between cases) and tears everything down on every exit path
//! (drop, and for a signal or SIGKILL: the guard's handler and journal, the autoclear loop
//! device, the unlinked files, the private mount namespace).
//!
//! [`command`] is `thplab bench io`: the options checked, the progress bar, the `[pin]` profile
//! written or checked, the tables or the JSON.
//!
//! Module map:
//! - [`buffer`]: the buffers the reads land in, one per kind, and the check of what backs each.
//! - [`command`]: `thplab bench io` on parsed arguments (the CLI keeps only the arguments).
//! - [`engine`]: how a read is issued: io_uring, Linux AIO or a plain pread.
//! - [`pin`]: the pin companion: pins and unpins the same buffers, without I/O.
//! - [`target`]: where the reads come from, each opened with O_DIRECT.

pub mod buffer;
pub mod command;
pub mod engine;
pub mod pin;
pub mod target;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use buffer::{Backing, Buffer, BufferKind, PMD};
use engine::Engine;
use target::{Target, TargetKind};

pub const SCHEMA: &str = "thplab-bench-io/1";

/// The mTHP sizes of anonymous memory this kernel offers (`hugepages-NkB/enabled` below 2 MiB).
pub fn available_mthp_kb(sysfs: &std::path::Path) -> Vec<u64> {
    let mut v: Vec<u64> = std::fs::read_dir(sysfs)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let kb: u64 = name.strip_prefix("hugepages-")?.strip_suffix("kB")?.parse().ok()?;
            (kb < 2048 && e.path().join("enabled").exists()).then_some(kb)
        })
        .collect();
    v.sort_unstable();
    v
}

/// What to run.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub targets: Vec<TargetKind>,
    pub kinds: Vec<BufferKind>,
    pub engines: Vec<Engine>,
    pub block_sizes: Vec<u64>,
    pub queue_depths: Vec<usize>,
    pub repeats: usize,
    /// Length of one timed run.
    pub time: Duration,
    /// Size of the file / tmpfs file read.
    pub target_size: u64,
    /// Directory of the `file` target.
    pub file_dir: PathBuf,
    /// Run the pin companion.
    pub pin: bool,
    /// Run the reads (false: companion only).
    pub io: bool,
    /// Range sizes the companion pins (bytes).
    pub pin_sizes: Vec<u64>,
    /// Rounds of the companion (each times every buffer and range size once) and the length of
    /// one timing.
    pub pin_rounds: usize,
    pub pin_time: Duration,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            targets: vec![TargetKind::Ram, TargetKind::File],
            kinds: Vec::new(),
            engines: vec![Engine::Aio, Engine::IoUring, Engine::Pread],
            block_sizes: vec![4 << 10, 64 << 10, 1 << 20],
            queue_depths: vec![1, 8, 32],
            repeats: 5,
            time: Duration::from_millis(120),
            target_size: 256 << 20,
            file_dir: PathBuf::from("/var/tmp"),
            pin: true,
            io: true,
            pin_sizes: vec![1 << 20, 4 << 20, 16 << 20],
            pin_rounds: 9,
            pin_time: Duration::from_millis(30),
        }
    }
}

impl BenchOptions {
    /// Check the options; the message names the flag.
    pub fn validate(&self) -> Result<(), String> {
        if self.kinds.is_empty() {
            return Err("no buffer kinds to run (--kinds)".into());
        }
        for &b in &self.block_sizes {
            if !(4096..=(64 << 20)).contains(&b) || b % 4096 != 0 {
                return Err(format!("--block-sizes: {b} bytes; give multiples of 4K from 4K to 64M"));
            }
        }
        for &q in &self.queue_depths {
            if !(1..=1024).contains(&q) {
                return Err(format!("--queue-depths: {q}; give depths from 1 to 1024"));
            }
        }
        if self.pin_rounds == 0 || self.pin_rounds > 1000 {
            return Err(format!("--pin-rounds {}: give 1 to 1000", self.pin_rounds));
        }
        if self.repeats == 0 || self.repeats > 1000 {
            return Err(format!("--repeat {}: give 1 to 1000", self.repeats));
        }
        if self.time.is_zero() || self.time > Duration::from_secs(600) {
            return Err(format!("--time {:?}: give more than 0 and at most 600 s", self.time));
        }
        let max_bs = self.block_sizes.iter().copied().max().unwrap_or(0);
        if self.io && self.target_size < max_bs.max(1 << 20) {
            return Err(format!("--size {}: smaller than the largest block size", self.target_size));
        }
        if self.io && (self.engines.is_empty() || self.block_sizes.is_empty() || self.queue_depths.is_empty() || self.targets.is_empty()) {
            return Err("nothing to read: give at least one target, engine, block size and queue depth".into());
        }
        Ok(())
    }

    /// Bytes of each buffer: every slot of the deepest queue at the largest block size, and the
    /// largest pinned range, in whole 2 MiB.
    pub fn buffer_len(&self) -> u64 {
        let bs = self.block_sizes.iter().copied().max().unwrap_or(0);
        let qd = self.queue_depths.iter().copied().max().unwrap_or(1) as u64;
        let pin = if self.pin { self.pin_sizes.iter().copied().max().unwrap_or(0) } else { 0 };
        (bs * qd).max(pin).max(PMD).div_ceil(PMD) * PMD
    }
}

/// median, min and max of repeated runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(v: &[f64]) -> Spread {
        if v.is_empty() {
            return Spread::default();
        }
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let median = if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 };
        Spread { median, min: s[0], max: s[n - 1] }
    }

    /// Half the range as a percentage of the median.
    pub fn pm_pct(&self) -> f64 {
        if self.median == 0.0 {
            0.0
        } else {
            (self.max - self.min) / 2.0 / self.median * 100.0
        }
    }
}

/// One buffer kind: what backs it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BufferReport {
    pub kind: String,
    pub bytes: u64,
    /// After faulting.
    pub backing: Option<Backing>,
    /// After the last run (khugepaged, compaction or reclaim could have changed it).
    pub backing_after: Option<Backing>,
    /// Why it was not measured: could not be set up, or not backed as asked.
    pub skipped: Option<String>,
}

/// One case: target × engine × queue depth × block size × buffer kind.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CaseResult {
    pub target: String,
    pub engine: Engine,
    pub qd: usize,
    pub block: u64,
    pub kind: String,
    pub mb_per_s: Spread,
    pub iops: Spread,
    /// CPU time (user + system of the submitting thread) per byte read, ns.
    pub cpu_ns_per_byte: Spread,
    pub runs: usize,
    pub bytes: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TargetReport {
    pub name: String,
    pub what: String,
    pub bytes: u64,
}

/// The pin companion's results.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PinReport {
    pub samples: Vec<pin::PinSample>,
    pub fit: Option<pin::PinFit>,
    pub checks: Vec<pin::PinCheck>,
    pub max_abs_error_pct: Option<f64>,
}

/// Everything `thplab bench io --json` prints.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BenchReport {
    pub schema: String,
    pub kernel: String,
    pub time_per_run_s: f64,
    pub repeats: usize,
    pub buffers: Vec<BufferReport>,
    pub targets: Vec<TargetReport>,
    pub cases: Vec<CaseResult>,
    pub pin: Option<PinReport>,
    /// Things the reader should know (a target or kind that could not be set up).
    pub notes: Vec<String>,
}

/// Progress events.
pub enum Progress<'a> {
    /// A setup step.
    Step(&'a str),
    /// `done` of `total` timed runs finished; `what` names the next.
    Run { done: usize, total: usize, what: String },
}

/// Why the benchmark cannot run here.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    NotAvailable(String),
    #[error("{0}")]
    Failed(String),
}

/// `uname -r` and `uname -n`.
fn uname() -> (String, String) {
    // SAFETY: uname fills the struct.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return ("unknown".into(), String::new());
        }
        let s = |p: *const libc::c_char| std::ffi::CStr::from_ptr(p).to_string_lossy().to_string();
        (s(u.release.as_ptr()), s(u.nodename.as_ptr()))
    }
}

pub fn kernel_release() -> String {
    uname().0
}

pub fn host_name() -> String {
    uname().1
}

/// Whether this machine can run the benchmark at all (root, a THP sysfs tree).
pub fn check_available() -> Result<live::sysfs::Paths, BenchError> {
    let paths = live::sysfs::Paths::from_env();
    paths.check_available().map_err(|e| match e {
        // The caller wraps it in LiveError::NotAvailable again, which says "not available".
        live::LiveError::NotAvailable(m) => BenchError::NotAvailable(m),
        other => BenchError::NotAvailable(other.to_string()),
    })?;
    Ok(paths)
}

/// Map and fault one buffer of `kind`, with the knobs it needs set (and put back) through the
/// settings guard. Hugetlb is not handled here (its pool guard outlives the buffer).
fn map_thp_kind(paths: &live::sysfs::Paths, kind: BufferKind, len: u64) -> Result<Buffer, String> {
    let Some(knob) = kind.knob() else {
        return Buffer::map(kind, len);
    };
    let mut s = live::guard::current_settings(paths).map_err(|e| e.to_string())?;
    for kb in available_mthp_kb(&paths.sysfs).into_iter().chain([2048]) {
        let k = format!("hugepages-{kb}kB/enabled");
        let v = if k == knob { "madvise" } else { "never" };
        s.set(&k, v).map_err(|e| e.to_string())?;
    }
    let guard = live::SettingsGuard::apply(&s).map_err(|e| e.to_string())?;
    let buf = Buffer::map(kind, len);
    guard.restore().map_err(|e| e.to_string())?;
    buf
}

/// Reserve the hugetlb pages a hugetlb buffer needs (nr_hugepages raised through the settings
/// guard, which is returned to be held until the buffer is unmapped), then map and fault it.
fn map_hugetlb_kind(paths: &live::sysfs::Paths, len: u64) -> (Option<live::SettingsGuard>, Result<Buffer, String>) {
    let cur: u64 = live::sysfs::read_knob(paths, live::guard::NR_HUGEPAGES_2M)
        .map_err(|e| e.to_string())
        .and_then(|v| v.parse().map_err(|_| format!("nr_hugepages reads '{v}'")))
        .unwrap_or(0);
    let want = cur + len / PMD;
    match live::guard::current_settings(paths)
        .map_err(|e| e.to_string())
        .and_then(|s| live::SettingsGuard::apply_with_hugetlb_pool(&s, want).map_err(|e| e.to_string()))
    {
        Ok(g) => (Some(g), Buffer::map(BufferKind::Hugetlb, len)),
        Err(e) => (None, Err(format!("could not reserve {} 2 MiB pages in the hugetlb pool: {e}", len / PMD))),
    }
}

/// A buffer's report: skipped (with why) unless mapped and backed as asked, in which case it
/// joins `buffers`.
fn buffer_report(kind: BufferKind, len: u64, mapped: Result<Buffer, String>, buffers: &mut Vec<Buffer>) -> BufferReport {
    let mut rep = BufferReport { kind: kind.label(), bytes: len, backing: None, backing_after: None, skipped: None };
    match mapped {
        Err(e) => rep.skipped = Some(e),
        Ok(buf) => match buf.verify() {
            Err(e) => rep.skipped = Some(format!("cannot check the backing: {e}")),
            Ok(b) => {
                if !b.as_asked {
                    rep.skipped = Some(format!("not backed as asked: {}", buffer::describe(&b)));
                } else {
                    buffers.push(buf);
                }
                rep.backing = Some(b);
            }
        },
    }
    rep
}

/// The buffers: THP kinds each under its own guard (released once faulted), hugetlb last with
/// a pool guard held until the buffer is unmapped.
fn map_buffers(
    opts: &BenchOptions,
    paths: &live::sysfs::Paths,
    len: u64,
    progress: &mut dyn FnMut(Progress),
    notes: &mut Vec<String>,
) -> (Vec<Buffer>, Vec<BufferReport>, Option<live::SettingsGuard>) {
    let mut kinds = opts.kinds.clone();
    kinds.sort();
    kinds.dedup();
    let mut buffers: Vec<Buffer> = Vec::new();
    let mut reports: Vec<BufferReport> = Vec::new();
    let mut pool_guard = None;
    for &kind in &kinds {
        progress(Progress::Step(&format!("mapping and faulting a {} MiB {} buffer", len >> 20, kind.label())));
        let mapped = if kind == BufferKind::Hugetlb {
            let (g, mapped) = map_hugetlb_kind(paths, len);
            if g.is_some() {
                pool_guard = g;
            }
            mapped
        } else {
            map_thp_kind(paths, kind, len)
        };
        let rep = buffer_report(kind, len, mapped, &mut buffers);
        if let Some(s) = &rep.skipped {
            notes.push(format!("{}: {s}", kind.label()));
        }
        reports.push(rep);
    }
    (buffers, reports, pool_guard)
}

/// The pin companion: pin_user_pages timings over the mapped buffers, a fit and its checks.
fn pin_companion(opts: &BenchOptions, buffers: &[Buffer], progress: &mut dyn FnMut(Progress)) -> Result<Option<PinReport>, BenchError> {
    if !opts.pin || buffers.is_empty() {
        return Ok(None);
    }
    let bufs: Vec<&Buffer> = buffers.iter().collect();
    let mut on = |done, total, what| progress(Progress::Run { done, total, what });
    let samples = pin::measure(&bufs, &opts.pin_sizes, opts.pin_rounds, opts.pin_time, &mut on).map_err(BenchError::Failed)?;
    let fit = pin::fit(&samples);
    let checks = fit.map(|f| pin::check(&f, &samples)).unwrap_or_default();
    let max = checks.iter().map(|c| c.error_pct.abs()).fold(None, |m: Option<f64>, e| Some(m.map_or(e, |m| m.max(e))));
    Ok(Some(PinReport { samples, fit, checks, max_abs_error_pct: max }))
}

/// Set up each wanted target; one that cannot be set up is skipped with a note.
fn open_targets(opts: &BenchOptions, wanted: &[TargetKind], progress: &mut dyn FnMut(Progress), notes: &mut Vec<String>) -> Vec<Target> {
    let mut targets: Vec<Target> = Vec::new();
    for t in wanted {
        progress(Progress::Step(&format!("setting up the {} target ({} MiB)", t.name(), opts.target_size >> 20)));
        let r = match t {
            TargetKind::File => target::open_file(&opts.file_dir, opts.target_size),
            TargetKind::Ram => target::open_ram(opts.target_size),
            TargetKind::Device(p) => target::open_device(std::path::Path::new(p)),
        };
        match r {
            Ok(t) => targets.push(t),
            Err(e) => notes.push(format!("{} target skipped: {e}", t.name())),
        }
    }
    targets
}

/// One case: target, engine, queue depth, block size and buffer (indices), and its samples.
struct Case {
    t: usize,
    engine: Engine,
    qd: usize,
    bs: u64,
    b: usize,
    samples: Vec<engine::RunStats>,
}

/// Every case: each target, engine, queue depth (1 for pread), block size that fits the
/// target, and buffer.
fn plan_cases(opts: &BenchOptions, targets: &[Target], buffers: &[Buffer]) -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    for t in 0..targets.len() {
        for &engine in &opts.engines {
            let qds: Vec<usize> = if engine == Engine::Pread { vec![1] } else { opts.queue_depths.clone() };
            for qd in qds {
                for &bs in &opts.block_sizes {
                    if bs > targets[t].size {
                        continue;
                    }
                    for b in 0..buffers.len() {
                        cases.push(Case { t, engine, qd, bs, b, samples: Vec::new() });
                    }
                }
            }
        }
    }
    cases
}

/// Run every case `opts.repeats` times, repeats interleaved.
fn run_cases(
    opts: &BenchOptions,
    cases: &mut [Case],
    targets: &[Target],
    buffers: &[Buffer],
    progress: &mut dyn FnMut(Progress),
) -> Result<(), BenchError> {
    let total = cases.len() * opts.repeats;
    let mut done = 0;
    for _ in 0..opts.repeats {
        for c in cases.iter_mut() {
            let what = format!(
                "{} {} qd{} {}K {}",
                targets[c.t].kind.name(),
                c.engine.name(),
                c.qd,
                c.bs >> 10,
                buffers[c.b].kind.label()
            );
            progress(Progress::Run { done, total, what: what.clone() });
            let st = engine::run(c.engine, &targets[c.t].source(), &buffers[c.b], c.bs, c.qd, opts.time)
                .map_err(|e| BenchError::Failed(format!("{what}: {e}")))?;
            c.samples.push(st);
            done += 1;
        }
    }
    progress(Progress::Run { done, total, what: "checking the buffers again".into() });
    Ok(())
}

/// The backing of each buffer after the runs; a change makes its figures suspect.
fn check_backing_after(buffers: &[Buffer], reports: &mut [BufferReport], notes: &mut Vec<String>) {
    for buf in buffers {
        if let Some(r) = reports.iter_mut().find(|r| r.kind == buf.kind.label()) {
            match buf.verify() {
                Ok(b) => {
                    if !b.as_asked {
                        notes.push(format!(
                            "{}: the backing changed during the runs ({}); its figures are suspect",
                            r.kind,
                            buffer::describe(&b)
                        ));
                    }
                    r.backing_after = Some(b);
                }
                Err(e) => notes.push(format!("{}: cannot check the backing after the runs: {e}", r.kind)),
            }
        }
    }
}

/// Each case's spreads of MB/s, IOPS and CPU ns per byte over its runs.
fn case_results(cases: &[Case], targets: &[Target], buffers: &[Buffer]) -> Vec<CaseResult> {
    cases
        .iter()
        .map(|c| {
            let mb: Vec<f64> = c.samples.iter().map(|s| s.bytes as f64 / s.wall.as_secs_f64() / 1e6).collect();
            let iops: Vec<f64> = c.samples.iter().map(|s| s.ops as f64 / s.wall.as_secs_f64()).collect();
            let cpu: Vec<f64> = c.samples.iter().map(|s| s.cpu.as_nanos() as f64 / s.bytes as f64).collect();
            CaseResult {
                target: targets[c.t].kind.name(),
                engine: c.engine,
                qd: c.qd,
                block: c.bs,
                kind: buffers[c.b].kind.label(),
                mb_per_s: Spread::of(&mb),
                iops: Spread::of(&iops),
                cpu_ns_per_byte: Spread::of(&cpu),
                runs: c.samples.len(),
                bytes: c.samples.iter().map(|s| s.bytes).sum(),
            }
        })
        .collect()
}

/// Run the benchmark.
pub fn run(opts: &BenchOptions, progress: &mut dyn FnMut(Progress)) -> Result<BenchReport, BenchError> {
    opts.validate().map_err(BenchError::Failed)?;
    let paths = check_available()?;
    let mut notes = Vec::new();
    // First, while this process has one thread: the private mount namespace for the tmpfs.
    let mut targets_wanted = if opts.io { opts.targets.clone() } else { Vec::new() };
    if targets_wanted.contains(&TargetKind::Ram) {
        if let Err(e) = target::enter_private_mount_ns() {
            notes.push(format!("ram target skipped: {e}"));
            targets_wanted.retain(|t| *t != TargetKind::Ram);
        }
    }
    let len = opts.buffer_len();
    let (buffers, mut reports, pool_guard) = map_buffers(opts, &paths, len, progress, &mut notes);
    let pin_report = pin_companion(opts, &buffers, progress)?;
    let targets = open_targets(opts, &targets_wanted, progress, &mut notes);
    let mut cases = plan_cases(opts, &targets, &buffers);
    run_cases(opts, &mut cases, &targets, &buffers, progress)?;
    check_backing_after(&buffers, &mut reports, &mut notes);
    let results = case_results(&cases, &targets, &buffers);
    let target_reports =
        targets.iter().map(|t| TargetReport { name: t.kind.name(), what: t.what.clone(), bytes: t.size }).collect();
    // Teardown order: targets (loop device, tmpfs), buffers, then the pool guard.
    drop(targets);
    drop(buffers);
    if let Some(g) = pool_guard {
        g.restore().map_err(|e| BenchError::Failed(format!("could not restore the hugetlb pool: {e}")))?;
    }
    Ok(BenchReport {
        schema: SCHEMA.into(),
        kernel: kernel_release(),
        time_per_run_s: opts.time.as_secs_f64(),
        repeats: opts.repeats,
        buffers: reports,
        targets: target_reports,
        cases: results,
        pin: pin_report,
        notes,
    })
}

fn human_block(b: u64) -> String {
    if b >= 1 << 20 && b % (1 << 20) == 0 {
        format!("{}M", b >> 20)
    } else {
        format!("{}K", b >> 10)
    }
}

/// The tables: per target, engine and queue depth, rows = block size, columns = buffer kind;
/// MB/s (median ± half the range, %), then CPU ns per KiB read with the difference to 4K.
pub fn render_tables(r: &BenchReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let kinds: Vec<String> = r.buffers.iter().filter(|b| b.skipped.is_none()).map(|b| b.kind.clone()).collect();
    let mut groups: Vec<(String, Engine, usize)> = Vec::new();
    for c in &r.cases {
        let g = (c.target.clone(), c.engine, c.qd);
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    let width = 16;
    for (t, e, qd) in &groups {
        let what = r.targets.iter().find(|x| &x.name == t).map(|x| x.what.as_str()).unwrap_or("");
        let _ = writeln!(out, "\n{t} ({what}), {} qd {qd}: MB/s, median ± half range over {} runs", e.name(), r.repeats);
        let _ = write!(out, "{:>6}", "block");
        for k in &kinds {
            let _ = write!(out, "{k:>width$}");
        }
        out.push('\n');
        let mut blocks: Vec<u64> = r.cases.iter().filter(|c| &c.target == t && c.engine == *e && c.qd == *qd).map(|c| c.block).collect();
        blocks.sort_unstable();
        blocks.dedup();
        let find = |b: u64, k: &str| r.cases.iter().find(|c| &c.target == t && c.engine == *e && c.qd == *qd && c.block == b && c.kind == k);
        for &b in &blocks {
            let _ = write!(out, "{:>6}", human_block(b));
            for k in &kinds {
                let cell = find(b, k).map(|c| format!("{:.0} ±{:.0}%", c.mb_per_s.median, c.mb_per_s.pm_pct())).unwrap_or_else(|| "-".into());
                let _ = write!(out, "{cell:>width$}");
            }
            out.push('\n');
        }
        let _ = writeln!(out, "  CPU ns per KiB read (submitting thread), and vs 4K");
        for &b in &blocks {
            let _ = write!(out, "{:>6}", human_block(b));
            let base = find(b, "4K").map(|c| c.cpu_ns_per_byte.median);
            for k in &kinds {
                let cell = find(b, k)
                    .map(|c| {
                        let v = c.cpu_ns_per_byte.median * 1024.0;
                        match base {
                            Some(b0) if k != "4K" && b0 > 0.0 => format!("{v:.1} {:+.0}%", (c.cpu_ns_per_byte.median / b0 - 1.0) * 100.0),
                            _ => format!("{v:.1} ±{:.0}%", c.cpu_ns_per_byte.pm_pct()),
                        }
                    })
                    .unwrap_or_else(|| "-".into());
                let _ = write!(out, "{cell:>width$}");
            }
            out.push('\n');
        }
    }
    if let Some(p) = &r.pin {
        let _ = writeln!(out, "\npin companion (io_uring register+unregister of the buffer, no I/O): ns per call pair; fit and error on the best repeat");
        let _ = writeln!(out, "{:>12} {:>7} {:>7} {:>7} {:>24} {:>10} {:>10} {:>7}", "kind", "range", "pages", "folios", "median (min-max)", "best", "predicted", "error");
        for (s, c) in p.samples.iter().zip(p.checks.iter().map(Some).chain(std::iter::repeat(None))) {
            let (pred, err) = c.map(|c| (format!("{:.0}", c.predicted_ns), format!("{:+.1}%", c.error_pct))).unwrap_or(("-".into(), "-".into()));
            let _ = writeln!(
                out,
                "{:>12} {:>7} {:>7} {:>7} {:>24} {:>10.0} {:>10} {:>7}",
                s.kind,
                human_block(s.bytes),
                s.pages,
                s.folios,
                format!("{:.0} ({:.0}-{:.0})", s.ns_median, s.ns_min, s.ns_max),
                s.ns_min,
                pred,
                err
            );
        }
        if let Some(f) = &p.fit {
            let _ = writeln!(
                out,
                "fit: {:.0} ns per call + {:.1} ns per folio + {:.2} ns per PTE-mapped page + {:.2} ns per PMD-mapped THP page + {:.2} ns per hugetlb page + {:.2} ns per io_uring head compare; largest error {:.1}%",
                f.per_call_ns,
                f.per_folio_ns,
                f.per_page_ns,
                f.per_pmd_page_ns,
                f.per_hugetlb_page_ns,
                f.scan_ns,
                p.max_abs_error_pct.unwrap_or(0.0)
            );
        } else {
            let _ = writeln!(out, "fit: not determined (measure 4K, an mTHP size, THP-2M and hugetlb-2M)");
        }
    }
    for b in &r.buffers {
        let back = b.backing.as_ref().map(buffer::describe).unwrap_or_else(|| "-".into());
        let _ = writeln!(out, "buffer {:>11}: {back}{}", b.kind, b.skipped.as_ref().map(|s| format!("  [skipped: {s}]")).unwrap_or_default());
    }
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

/// The `[pin]` section of a machine profile from a fit.
pub fn pin_costs(fit: &pin::PinFit, samples: usize) -> uapi::profile::PinCosts {
    uapi::profile::PinCosts {
        per_call_ns: fit.per_call_ns,
        per_folio_ns: fit.per_folio_ns,
        per_page_ns: fit.per_page_ns,
        per_pmd_page_ns: fit.per_pmd_page_ns,
        per_hugetlb_page_ns: fit.per_hugetlb_page_ns,
        companion_scan_ns: fit.scan_ns,
        source: format!("thplab bench io pin companion (io_uring register+unregister_buffers), {samples} samples"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_median_and_half_range() {
        let s = Spread::of(&[30.0, 10.0, 20.0]);
        assert_eq!((s.median, s.min, s.max), (20.0, 10.0, 30.0));
        assert_eq!(s.pm_pct(), 50.0);
        assert_eq!(Spread::of(&[1.0, 3.0]).median, 2.0);
    }

    #[test]
    fn buffer_len_covers_slots_and_pins() {
        let mut o = BenchOptions::default();
        o.kinds = vec![BufferKind::Base];
        // 1 MiB × qd 32 = 32 MiB.
        assert_eq!(o.buffer_len(), 32 << 20);
        o.queue_depths = vec![1];
        o.block_sizes = vec![4096];
        assert_eq!(o.buffer_len(), 16 << 20);
        o.pin = false;
        assert_eq!(o.buffer_len(), 2 << 20);
    }

    #[test]
    fn bad_options_name_the_flag() {
        let mut o = BenchOptions::default();
        assert!(o.validate().unwrap_err().contains("--kinds"));
        o.kinds = vec![BufferKind::Pmd];
        o.block_sizes = vec![1000];
        assert!(o.validate().unwrap_err().contains("--block-sizes: 1000"));
        o.block_sizes = vec![4096];
        o.queue_depths = vec![0];
        assert!(o.validate().unwrap_err().contains("--queue-depths"));
    }
}
