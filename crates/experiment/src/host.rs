//! The host around a model↔live run: the live run itself ([`run_live`]), the profile's
//! `[host]` for the model ([`host_model`]), waiting until free page reporting has taken every
//! free block before a live run ([`settle_host`], [`settle_host_for`]: `mm/page_reporting.c`
//! `page_reporting_process`), and untraced timed runs of a program ([`time_untraced`]), each
//! pinned to the quietest CPU with its per-CPU list's THP-sized pages held (`live::host`).

use anyhow::Result;
use report::progress;
use uapi::result::RegionPlacement;
use thp_abi::ThpSettings;
use uapi::RunResult;
use workload::Workload;

/// Why live runs cannot happen here, if they cannot.
pub fn live_unavailable() -> Option<String> {
    match live::sysfs::Paths::from_env().check_available() {
        Ok(()) => None,
        Err(e) => Some(e.to_string()),
    }
}

/// Run `workload` on the live kernel under `settings` (applied through the settings guard and
/// restored afterwards), `repeat` times. `model_regions` are the addresses the model chose
/// (`RunResult.regions` of `sim::run`); regions missing there are placed by the harness and
/// the result's `live.placement` says so. `progress` prints one line per run on stderr;
/// `profile.sample_ms` samples the run (the result's `timeline`). Under `pressure`
/// (`--memory-max`, `--swap`; none by default), in a memcg with its limit and swap.
pub fn run_live(
    workload: &Workload,
    settings: &ThpSettings,
    model_regions: &[RegionPlacement],
    repeat: u32,
    progress: bool,
    profile: &sim::Profile,
    pressure: &thp_abi::Pressure,
) -> Result<RunResult> {
    let opts = live::ExecOptions { pressure: *pressure, ..exec_options(repeat, progress, profile, false) };
    Ok(live::run_live(workload, settings, model_regions, &opts)?)
}

/// How the live child is run (`repeat` times at least once, `settle_host`: each run from a
/// settled host), sampled as the profile samples the model (`sample_ms`), its faults timed
/// where the model's are (`latency`).
pub fn exec_options(repeat: u32, progress: bool, profile: &sim::Profile, settle_host: bool) -> live::ExecOptions {
    let sample = profile.sample_ms.map(std::time::Duration::from_millis);
    live::ExecOptions { repeat: repeat.max(1), progress, sample, settle_host, latency: profile.latency, ..Default::default() }
}

/// The profile's `[host]` for a model run. With `live` (a live run on this machine follows):
/// only when this machine reports free pages too, and without free lists: the live run reads
/// the ones it starts from (`live.free_lists`: once page reporting has taken every free block,
/// pinned to the CPU whose per-CPU lists hold the fewest pages, with that list's THP-sized pages
/// taken; `live::host::run_start`), and `experiment::model::remodel` runs the model again from
/// them. Read here instead, before the model and so seconds before the live run, they missed
/// what the other CPU's per-CPU list freed meanwhile (`decay_pcp_high` gives up to 2 016 pages a
/// second back to the buddy lists, backed and unreported): 1 GiB runs of 64 KiB mTHP met 30-60 %
/// fewer host faults than the model gave them and ran up to 2.5x faster than it said. Without
/// `live`, the profile's own free lists.
pub fn host_model(profile: &uapi::profile::MachineProfile, live: bool) -> Option<(uapi::profile::HostCosts, Option<uapi::profile::FreeLists>)> {
    let host = profile.host.as_ref()?;
    if live {
        live::host::reporting_order()?;
    }
    Some((host.clone(), None))
}

/// The free lists a live run pinned to the quietest CPU meets (`free.cpu`, where free pages
/// are reported: `live::host::cpu_for_run`), read once the THP-sized pages on that CPU's
/// per-CPU list are taken: held, so that the run does not get them (`live::host::take_cpu_thps`),
/// and returned for the caller to hold over the run.
fn free_areas_for_run() -> (Option<uapi::profile::FreeLists>, Option<live::host::HeldThps>) {
    let Some(cpu) = live::host::cpu_for_run() else { return (live::host::free_areas().ok(), None) };
    let held = live::host::take_cpu_thps(cpu);
    (live::host::free_areas_on(cpu).ok(), held)
}

/// Before a live run whose model run paid host faults (`time.host_faults`: it takes free blocks
/// that page reporting hands to the host), wait until reporting has taken every free block, so
/// that the live run starts as the model's machine does, from an idle machine's state. Says so
/// on stderr when `progress`.
pub fn settle_host_for(model: &uapi::RunResult, progress: bool) {
    if model.time.as_ref().is_none_or(|t| t.host_faults == 0) {
        return;
    }
    settle_host(progress);
}

/// The median wall time (ns) of `runs` untraced runs of `argv`, as `record --timed` times a
/// program: as recorded (THP disabled for it) or, with `live`, under the machine's knobs. On a
/// VM that reports free pages each run starts once reporting has taken every free block (the
/// model's machine's state, its `[host]`): a run right after another would reuse the blocks the
/// last one freed, which the host still backs, and run faster than the model's start allows.
/// Each run is pinned to the CPU whose per-CPU lists hold the fewest free pages then
/// (`live::host::cpu_for_run`: a run on the CPU the last one exited on took up to 900 MiB
/// of backed pages from its list), with the THP-sized pages of that list held while it runs
/// (`live::host::take_cpu_thps`: the THPs the last process there freed). Also the free lists
/// the median run met (None where unreadable): which frames are backed depends on them, so the
/// model prices these runs with them.
/// With more than one run, also their range (`uapi::result::MsRange`, ms).
pub fn time_untraced(argv: &[std::ffi::OsString], runs: u32, live: bool, progress: bool) -> Result<(u64, Option<uapi::profile::FreeLists>, Option<uapi::result::MsRange>)> {
    let mut times = Vec::new();
    for run in 0..runs.max(1) {
        progress::detail(&format!("untraced run {} of {}", run + 1, runs.max(1)));
        settle_host(progress);
        let (free, thps) = free_areas_for_run();
        let ns = record::time_untraced_on(argv, 1, live, free.as_ref().and_then(|f| f.cpu))?;
        drop(thps);
        times.push((ns, free));
    }
    let range = uapi::result::MsRange::of(&times.iter().map(|t| t.0 as f64 / 1e6).collect::<Vec<_>>());
    times.sort_unstable_by_key(|t| t.0);
    let mid = (times.len() - 1) / 2;
    let (ns, free) = times.swap_remove(mid);
    Ok((ns, free, range))
}

/// Wait until page reporting has taken every free block (at once where there is no reporting).
/// Under a step progress (`report::progress`) the wait is shown there, and nothing else is said.
pub fn settle_host(progress: bool) {
    use std::io::IsTerminal;
    if progress::tell_wait(Some(0)) {
        live::host::wait_until_settled(&mut |s| {
            progress::tell_wait(Some(s));
        });
        progress::tell_wait(None);
        return;
    }
    let tty = progress && std::io::stderr().is_terminal();
    if progress && !tty {
        eprintln!("thplab: waiting for page reporting to take every free block, so that the live run starts where the model does");
    }
    let mut shown = None;
    let mut tell = |s: u64| {
        if tty && shown != Some(s) {
            shown = Some(s);
            eprint!("\rthplab: waiting for page reporting to take every free block, so that the live run starts where the model does ({s} s)\x1b[K");
        }
    };
    if live::host::wait_until_settled(&mut tell).is_some() && tty {
        eprint!("\r\x1b[K");
    }
}
