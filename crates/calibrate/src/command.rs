//! `thplab calibrate` as an entry point that takes already-parsed arguments (the CLI keeps only
//! its argument struct): measures ([`crate::calibrate`]), adds the `[tlb]` section from two
//! live chases (crates/chase) and the model's chase under each host page size, writes the
//! profile and prints the figures, as a table or one JSON object (schema `thplab-calibrate/1`).

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

/// Measure with `mib` MiB per run, `repeat` runs each; `chase_mib` MiB for the `[tlb]` chase (0
/// leaves it out); write the profile to `output`. Exit codes: 0 after measuring; 5 where live
/// runs are not available.
/// With `pressure`, also the swap figures of `[fault.pressure]` (crate::pressure).
pub fn run(mib: u64, repeat: u32, chase_mib: u64, output: Option<&Path>, json: bool, pressure: bool) -> Result<i32> {
    use std::io::IsTerminal;
    let quiet = json;
    let tty = std::io::stderr().is_terminal();
    let mut progress = StepProgress::default();
    let mut c = crate::calibrate(mib, repeat, |step| {
        if !quiet {
            progress.show(tty, step);
        }
    })?;
    if pressure {
        let base = live::guard::current_settings(&live::sysfs::Paths::from_env())?;
        let fault_ns = c.fault.fault_ns("4kB").unwrap_or(0.0);
        let (figures, costs) = crate::pressure::measure_swap(&base, repeat, fault_ns, &mut |step: &str| {
            if !quiet {
                progress.show(tty, step);
            }
        })?;
        for f in &figures {
            if let Some(p) = f.ns.range_pct() {
                c.fault.spread_pct.insert(f.what.clone(), p);
            }
        }
        c.fault.pressure = costs;
        c.fault.source.push_str("; pressure: swap-out and swap-in per page through zram in a memcg of 64 MiB, 128 MiB written then read, under 4 KiB pages, median of the runs");
        c.figures.extend(figures);
    }
    let tlb = match chase_mib {
        0 => None,
        mib => Some(calibrate_tlb(mib, |step| {
            if !quiet {
                progress.show(tty, step);
            }
        })?),
    };
    if !quiet && tty {
        eprint!("\r\x1b[K");
    }
    let profile = uapi::profile::MachineProfile {
        machine: uapi::profile::MachineInfo { name: hostname(), kernel: live::kernel_release() },
        fault: Some(c.fault.clone()),
        host: c.host.clone(),
        tlb: tlb.clone(),
        ..Default::default()
    };
    if let Some(path) = output {
        std::fs::write(path, profile.to_toml()).with_context(|| format!("cannot write the profile {}", path.display()))?;
    }
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &serde_json::json!({ "schema": "thplab-calibrate/1", "figures": c.figures, "profile": profile }))?;
        writeln!(out)?;
    } else {
        for l in figure_table(&c.figures) {
            writeln!(out, "{l}")?;
        }
        if let Some(t) = &tlb {
            writeln!(
                out,
                "\nchase of {} MiB: {:.1} ns per load with 4 KiB pages, {:.1} with PMD THP (ratio {:.2}); base pages' scatter {:.2}",
                t.chase_bytes >> 20,
                t.chase_4k_ns,
                t.chase_pmd_ns,
                t.chase_pmd_ns / t.chase_4k_ns,
                t.order0_scatter
            )?;
            writeln!(out, "[tlb] cpu = {}, paging = {} ({})", t.cpu, t.paging, t.source)?;
        }
        if let Some(path) = output {
            writeln!(out, "\nwrote {} (use it with `thplab sim WORKLOAD --profile {}`)", path.display(), path.display())?;
        }
    }
    Ok(0)
}

/// `thplab calibrate`'s progress: on a terminal one line rewritten in place; elsewhere (a log
/// file, CI) a line per step, the seconds a step has been waiting (` (N s)`) left out, so that
/// a step that waits is one line, not one per second.
#[derive(Default)]
struct StepProgress {
    last: String,
}

impl StepProgress {
    fn show(&mut self, tty: bool, step: &str) {
        if tty {
            eprint!("\rthplab calibrate: {step}\x1b[K");
            return;
        }
        let step = match step.rsplit_once(" (") {
            Some((head, tail)) if tail.ends_with(" s)") && tail[..tail.len() - 3].bytes().all(|b| b.is_ascii_digit()) => head,
            _ => step,
        };
        if step != self.last {
            eprintln!("thplab calibrate: {step}");
            self.last = step.to_string();
        }
    }
}

/// `calibrate`'s figures as a table, each column as wide as its widest cell (the first as wide
/// as the longest name, `host fault (base pages)`).
pub fn figure_table(figures: &[crate::Figure]) -> Vec<String> {
    let mut cells = vec![["ns per", "median", "min", "max", "events", "at size"].map(String::from).to_vec()];
    for f in figures {
        let at = f.at_size.map(|a| format!("{:.0} %", a * 100.0)).unwrap_or_default();
        cells.push(vec![f.what.clone(), format!("{:.1}", f.ns.median), format!("{:.1}", f.ns.min), format!("{:.1}", f.ns.max), f.events.to_string(), at]);
    }
    report::text::layout(&cells, &[true, false, false, false, false, false])
}

/// `[tlb]`: the preset for this CPU (/proc/cpuinfo) and, on a guest (the hypervisor flag), the
/// host page size whose model time per load of a chase of `mib` MiB with PMD THP is nearest
/// the live one (the host's page size is not visible to the guest; it decides whether a guest
/// huge page saves host walks: docs/tlb-model.md). The PMD chase decides because its guest
/// side is fixed (2 MiB pages, consecutive frames), where a 4 KiB chase depends on how the
/// guest's free lists scattered its frames; host pages whose model times are within 2 % of
/// each other (2 MiB and 1 GiB over 1 GiB: both cover it) go to the smaller.
pub fn calibrate_tlb(mib: u64, mut progress: impl FnMut(&str)) -> Result<uapi::profile::TlbSetup> {
    use chase::ChasePage;
    const LOADS: u64 = 2_000_000;
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let (preset, cpu_why) = tlb::presets::for_cpuinfo(&cpuinfo);
    let bytes = mib << 20;
    progress(&format!("tlb: chase of {mib} MiB, 4 KiB pages"));
    let k4 = chase::run_chase(bytes, ChasePage::Base, LOADS, 1)?;
    progress(&format!("tlb: chase of {mib} MiB, PMD THP"));
    let pmd = chase::run_chase(bytes, ChasePage::Pmd, LOADS, 1)?;
    let scatter = if k4.host_pte_lines > 0 { k4.scatter() } else { 1.0 };
    let live_ratio = pmd.ns_per_access / k4.ns_per_access;
    let (paging, how) = if !tlb::presets::is_guest(&cpuinfo) {
        (tlb::Paging::Native, "no hypervisor flag: native paging".to_string())
    } else {
        let sizes = chase::tree_sizes(&live::sysfs::Paths::from_env());
        let mut fits: Vec<(tlb::Paging, f64, f64)> = Vec::new();
        for host in [tlb::PageSize::K4, tlb::PageSize::M2, tlb::PageSize::G1] {
            let paging = tlb::Paging::Nested { host };
            progress(&format!("tlb: model chase under {}", paging.name()));
            let m4 = chase::model_chase_ns(bytes, ChasePage::Base, &sizes, (preset, paging), scatter, LOADS, 1)?;
            let mp = chase::model_chase_ns(bytes, ChasePage::Pmd, &sizes, (preset, paging), scatter, LOADS, 1)?;
            fits.push((paging, mp, mp / m4));
        }
        let off = |mp: f64| (mp / pmd.ns_per_access).ln().abs();
        let best = fits.iter().copied().fold(fits[0], |b, f| if off(f.1) < off(b.1) && (f.1 / b.1 - 1.0).abs() > 0.02 { f } else { b });
        let listed: Vec<String> = fits.iter().map(|(p, mp, r)| format!("{} {mp:.0} ns (ratio {r:.2})", p.name())).collect();
        (
            best.0,
            format!(
                "a guest (hypervisor flag): PMD chase live {:.0} ns (ratio to 4 KiB {live_ratio:.2}), model {}: nearest {}",
                pmd.ns_per_access,
                listed.join(", "),
                best.0.name()
            ),
        )
    };
    Ok(uapi::profile::TlbSetup {
        cpu: preset.name.to_string(),
        paging: paging.name().to_string(),
        order0_scatter: (scatter * 1000.0).round() / 1000.0,
        chase_bytes: bytes,
        chase_4k_ns: k4.ns_per_access,
        chase_pmd_ns: pmd.ns_per_access,
        source: format!("thplab calibrate: {cpu_why}; {how}; {mib} MiB chase, {LOADS} loads"),
    })
}

/// This machine's host name (for the profile's `[machine]`).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}

#[cfg(test)]
mod figure_tests {
    use crate::{Figure, Spread};

    #[test]
    fn the_figures_line_up_past_a_long_name() {
        let spread = |median: f64| Spread { median, min: median - 1.0, max: median + 1.0 };
        let figures = [
            Figure { what: "fault 4kB".into(), ns: spread(1568.2), events: 262144, at_size: Some(0.5) },
            Figure { what: "host fault (base pages)".into(), ns: spread(9037.7), events: 512, at_size: None },
        ];
        assert_eq!(
            super::figure_table(&figures),
            [
                "ns per                   median     min     max  events  at size",
                "fault 4kB                1568.2  1567.2  1569.2  262144     50 %",
                "host fault (base pages)  9037.7  9036.7  9038.7     512",
            ]
        );
    }
}
