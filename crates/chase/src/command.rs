//! `thplab bench chase` as an entry point that takes already-parsed arguments (the CLI keeps
//! only its argument struct): the live pointer chase ([`crate::run_chase`]) beside the model's
//! prediction for the same chase (`access R chase` through the TLB model of `--cpu` under
//! `--paging`: `sim::run_with`), and the ratio of time per access of each page size to 4 KiB
//! pages, live and predicted; as a table or one JSON object (schema `thplab-bench-chase/1`).

use anyhow::{bail, Result};
use thp_abi::ThpSettings;

/// The arguments of `thplab bench chase` (`thplab bench chase --help` says what each means).
#[derive(Clone, Debug)]
pub struct Options {
    pub sizes: Vec<String>,
    pub pages: Vec<String>,
    pub accesses: u64,
    pub seed: u64,
    pub repeat: u32,
    /// The model's CPU preset (a name of `tlb::presets`).
    pub cpu: String,
    /// The model's paging mode (`tlb::Paging::parse`).
    pub paging: String,
    pub order0_scatter: String,
    pub model_only: bool,
    pub json: bool,
    /// The width the text fits (`None`: no wrapping).
    pub width: Option<usize>,
}

/// Run the chase and print it. Exit code 0; bad sizes, pages or scatter are errors (exit 2).
pub fn run(o: &Options) -> Result<u8> {
    o.run()
}

/// The model's ns per access of the live chase of `bytes` backed by `page`
/// (`sizes`: the mTHP sizes the knobs are set for), `accesses` timed loads after a warm-up lap,
/// through `cpu`'s TLBs under `paging` with base pages' frames as scattered as `scatter`.
pub fn model_chase_ns(bytes: u64, page: crate::ChasePage, sizes: &[u32], tlb: (&'static tlb::CpuPreset, tlb::Paging), scatter: f64, accesses: u64, seed: u64) -> Result<f64> {
    Ok(model_chase(bytes, page, sizes, tlb, scatter, accesses, seed)?.ns_per_access)
}

/// [`model_chase_ns`]'s whole count of the TLB model (misses, walks, ns), warm-up lap included.
pub fn model_chase(bytes: u64, page: crate::ChasePage, sizes: &[u32], tlb: (&'static tlb::CpuPreset, tlb::Paging), scatter: f64, accesses: u64, seed: u64) -> Result<uapi::result::AccessCounts> {
    let mut s = ThpSettings::default();
    for a in page.assignments(sizes) {
        s.apply_assignment(&a)?;
    }
    let lap = bytes / 64;
    let count = accesses + accesses.min(lap);
    let text = format!("mmap r {bytes}\ntouch r write\naccess r chase count={count} elem=64 seed={seed}\n");
    let w = workload::parse("<bench chase>", &text)?;
    let mut machine = sim::MachineConfig::default();
    machine.mem_bytes = machine.mem_bytes.max((bytes * 2).next_power_of_two());
    let mut opts = sim::RunOptions { profile: sim::Profile { tlb: Some(tlb), order0_scatter: scatter, ..Default::default() }, ..Default::default() };
    let (r, _) = sim::run_with(&w, &s, &machine, &mut opts)?;
    Ok(r.accesses.map(|a| a.total).unwrap_or_default())
}

struct Row {
    bytes: u64,
    page: String,
    live: Option<crate::ChasePoint>,
    /// The ns per access of every live run of the point, in the order they ran.
    live_runs_ns: Vec<f64>,
    model_ns: f64,
    /// The scatter of base pages' frames the model used.
    scatter: f64,
    /// Where the PMU has TLB events: each event's count per timed access over the live runs
    /// (their setup and warm-up included), and the model's L2 misses and walks per timed access.
    hw: Vec<(String, f64)>,
    model_hw: Option<(f64, f64)>,
}

impl Options {
    fn model(&self, bytes: u64, page: crate::ChasePage, sizes: &[u32], scatter: f64) -> Result<uapi::result::AccessCounts> {
        let cpu = tlb::presets::by_name(&self.cpu).expect("clap checked --cpu");
        let paging = tlb::Paging::parse(&self.paging).expect("clap checked --paging");
        model_chase(bytes, page, sizes, (cpu, paging), scatter, self.accesses, self.seed)
    }

    fn run(&self) -> Result<u8> {
        let mut sizes_b = Vec::new();
        for s in &self.sizes {
            match mm_types::parse_size(s) {
                Some(b) if (16 << 20..=16 << 30).contains(&b) && b % (2 << 20) == 0 => sizes_b.push(b),
                _ => bail!("--sizes: '{s}' is not a size from 16M to 16G in whole 2 MiB"),
            }
        }
        let mut pages = Vec::new();
        for p in &self.pages {
            pages.push(crate::ChasePage::parse(p).ok_or_else(|| anyhow::anyhow!("--pages: '{p}' is not 4K, an mTHP size (16K, 32K, 64K, ... 1024K) or PMD"))?);
        }
        let paths = live::sysfs::Paths::from_env();
        let live_ok = !self.model_only && paths.check_available().is_ok();
        if !self.model_only && !live_ok {
            let why = paths.check_available().err().map(|e| e.to_string()).unwrap_or_default();
            eprintln!("thplab bench chase: {why}; printing the model only (--model-only)");
        }
        let tree = if live_ok { crate::tree_sizes(&paths) } else { vec![16, 32, 64, 128, 256, 512, 1024, 2048] };
        let given_scatter = match self.order0_scatter.as_str() {
            "measured" => None,
            v => Some(v.parse::<f64>().ok().filter(|x| (0.0..=1.0).contains(x)).ok_or_else(|| anyhow::anyhow!("--order0-scatter: '{v}' is not a number from 0 to 1 or 'measured'"))?),
        };
        // The hardware's TLB counters around each live run, where the PMU has them.
        let hw = if live_ok { record::hwcounters::open_self().map_err(|why| eprintln!("thplab bench chase: {why}")).ok() } else { None };
        let mut rows = Vec::new();
        for &bytes in &sizes_b {
            // Live first: the 4K buffer's frames tell the model how scattered base pages are.
            let mut runs: Vec<Vec<crate::ChasePoint>> = vec![Vec::new(); pages.len()];
            let mut hw_sums: Vec<Vec<(String, u64)>> = vec![Vec::new(); pages.len()];
            for round in 0..if live_ok { self.repeat } else { 0 } {
                for (i, &page) in pages.iter().enumerate() {
                    if self.repeat > 1 && !self.json {
                        eprintln!("  {} {:>4}: live run {} of {}", mm_types::format_size(bytes), page.name(), round + 1, self.repeat);
                    }
                    let before = hw.as_ref().map(|c| c.read());
                    runs[i].push(crate::run_chase(bytes, page, self.accesses, self.seed)?);
                    if let (Some(c), Some(before)) = (&hw, before) {
                        let delta: Vec<(String, u64)> = c.read().into_iter().zip(before).map(|((n, v), (_, b))| (n, v.saturating_sub(b))).collect();
                        add_counts(&mut hw_sums[i], &delta);
                        let counts: Vec<String> = delta.iter().map(|(n, v)| format!("{n} {:.3}/access", *v as f64 / self.accesses as f64)).collect();
                        eprintln!("  {} {:>4}: hardware (the run, its buffer's setup included): {}", mm_types::format_size(bytes), page.name(), counts.join(", "));
                    }
                }
            }
            let lives: Vec<Option<crate::ChasePoint>> = runs.iter().map(|r| median_run(r).cloned()).collect();
            let measured = pages.iter().zip(&lives).find(|(p, _)| matches!(p, crate::ChasePage::Base)).and_then(|(_, l)| l.as_ref()).filter(|l| l.host_pte_lines > 0).map(|l| l.scatter());
            let scatter = given_scatter.or(measured).unwrap_or(1.0);
            for (((&page, live), runs), sums) in pages.iter().zip(lives).zip(&runs).zip(&hw_sums) {
                let counts = self.model(bytes, page, &tree, scatter)?;
                let model_ns = counts.ns_per_access;
                let per = (runs.len().max(1) as u64 * self.accesses) as f64;
                let hw: Vec<(String, f64)> = sums.iter().map(|(n, v)| (n.clone(), *v as f64 / per)).collect();
                let model_hw = (!hw.is_empty()).then(|| (counts.l2_misses as f64 / self.accesses as f64, counts.walks as f64 / self.accesses as f64));
                if !self.json {
                    eprintln!(
                        "  {} {:>4}: model {:.1} ns{}",
                        mm_types::format_size(bytes),
                        page.name(),
                        model_ns,
                        live.as_ref().map(|l| format!(", live {:.1} ns", l.ns_per_access)).unwrap_or_default()
                    );
                }
                rows.push(Row { bytes, page: page.name(), live, live_runs_ns: runs.iter().map(|r| r.ns_per_access).collect(), model_ns, scatter, hw, model_hw });
            }
        }
        self.print(&rows)?;
        Ok(0)
    }

    fn print(&self, rows: &[Row]) -> Result<()> {
        let base = |bytes: u64| rows.iter().find(|r| r.bytes == bytes);
        let mut out = Vec::new();
        for r in rows {
            let b = base(r.bytes).unwrap();
            let model_ratio = r.model_ns / b.model_ns;
            let live_ratio = match (&r.live, &b.live) {
                (Some(l), Some(lb)) => Some(l.ns_per_access / lb.ns_per_access),
                _ => None,
            };
            out.push((r, model_ratio, live_ratio));
        }
        if self.json {
            let v: Vec<serde_json::Value> = out
                .iter()
                .map(|(r, mr, lr)| {
                    let mut j = serde_json::json!({
                        "bytes": r.bytes,
                        "page": r.page,
                        "model_ns_per_access": r.model_ns,
                        "live_ns_per_access": r.live.as_ref().map(|l| l.ns_per_access),
                        "live_runs_ns_per_access": r.live_runs_ns,
                        "live_anon_huge_bytes": r.live.as_ref().map(|l| l.anon_huge_bytes),
                        "live_mthp_faults": r.live.as_ref().map(|l| l.mthp_faults.iter().cloned().collect::<std::collections::BTreeMap<_, _>>()),
                        "model_ratio": mr,
                        "live_ratio": lr,
                        "model_order0_scatter": r.scatter,
                        "live_pages": r.live.as_ref().map(|l| l.pages),
                        "live_host_pte_lines": r.live.as_ref().map(|l| l.host_pte_lines),
                    });
                    // Only where the PMU has TLB events: the counters per access beside the model's.
                    if let Some((l2, walks)) = r.model_hw {
                        j["live_hw_per_access"] = r.hw.iter().map(|(n, v)| (n.clone(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>().into();
                        j["model_l2_misses_per_access"] = l2.into();
                        j["model_walks_per_access"] = walks.into();
                    }
                    j
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "schema": "thplab-bench-chase/1", "cpu": self.cpu, "paging": self.paging, "accesses": self.accesses, "points": v }))?);
            return Ok(());
        }
        let runs = if self.repeat > 1 { format!(", live: the median of {} runs (their range in brackets)", self.repeat) } else { String::new() };
        let head = format!("pointer chase, {} timed loads per point{runs}; model --cpu {} --paging {}; ratio = time per access / that of {}", self.accesses, self.cpu, self.paging, rows.first().map(|r| r.page.as_str()).unwrap_or("4K"));
        println!("{}", report::text::wrap(&head, self.width, 2).join("\n"));
        let scatters: Vec<String> = rows.iter().filter(|r| r.page == rows[0].page).map(|r| format!("{} {:.2}", mm_types::format_size(r.bytes), r.scatter)).collect();
        // `measured` needs a live run with nested paging (host PTE lines): without one the model
        // assumes 1, the most scattered.
        let measured = rows.iter().any(|r| r.live.as_ref().is_some_and(|l| l.host_pte_lines > 0));
        let how = match self.order0_scatter.as_str() {
            "measured" if measured => "measured".to_string(),
            "measured" => "not measured: no live run under nested paging; 1 assumed".to_string(),
            v => format!("given: {v}"),
        };
        println!("{}", report::text::wrap(&format!("model --order0-scatter ({how}): {}", scatters.join(", ")), self.width, 2).join("\n"));
        let head = format!("{:>6} {:>5} {:>10} {:>10} {:>11} {:>11} {:>9}", "size", "page", "live ns", "model ns", "live ratio", "model ratio", "error");
        match (rows.iter().any(|r| r.live.is_some()), self.width) {
            (false, _) => println!("{head}"),
            (true, Some(_)) => println!("{head}\n{:14}backing (live); host PTE lines of the frames (below a row when it is too long)", ""),
            (true, None) => println!("{head}  backing (live); host PTE lines of the frames"),
        }
        for (r, mr, lr) in out {
            let (ln, lr_s, err, backing) = match (&r.live, lr) {
                (Some(l), Some(lr)) => {
                    let faults: Vec<String> = l.mthp_faults.iter().map(|(k, n)| format!("{k} {n}")).collect();
                    let lines = format!("{} lines for {} pages (scatter {:.2})", l.host_pte_lines, l.pages, l.scatter());
                    let runs = &r.live_runs_ns;
                    let range = if runs.len() > 1 {
                        let (least, most) = (runs.iter().copied().fold(f64::INFINITY, f64::min), runs.iter().copied().fold(f64::NEG_INFINITY, f64::max));
                        format!("[{least:.1}-{most:.1}] ")
                    } else {
                        String::new()
                    };
                    (format!("{:.1}", l.ns_per_access), format!("{lr:.3}"), format!("{:+.1}%", (mr / lr - 1.0) * 100.0), format!("{range}AnonHugePages {} MiB; {}; {lines}", l.anon_huge_bytes >> 20, faults.join(", ")))
                }
                _ => ("-".into(), "-".into(), "-".into(), String::new()),
            };
            let line = format!("{:>6} {:>5} {:>10} {:>10.1} {:>11} {:>11.3} {:>9}", mm_types::format_size(r.bytes), r.page, ln, r.model_ns, lr_s, mr, err);
            // The backing on a line of its own when the row would pass 100 columns.
            match self.width {
                Some(w) if line.chars().count() + 2 + backing.chars().count() > w => {
                    println!("{line}");
                    for l in report::text::wrap(&backing, Some(w.saturating_sub(14)), 0) {
                        println!("{:14}{l}", "");
                    }
                }
                _ => println!("{}", format!("{line}  {backing}").trim_end()),
            }
        }
        self.print_hw(rows);
        Ok(())
    }

    /// Where the PMU has TLB events: each point's counters per timed access beside the model's.
    fn print_hw(&self, rows: &[Row]) {
        if rows.iter().all(|r| r.model_hw.is_none()) {
            return;
        }
        println!("hardware TLB counters per timed access (the live runs, their setup and warm-up lap included) beside the model's L2 misses and walks:");
        for r in rows {
            let Some((l2, walks)) = r.model_hw else { continue };
            let hw: Vec<String> = r.hw.iter().map(|(n, v)| format!("{n} {v:.3}")).collect();
            println!("{:>6} {:>5}  {}; model: L2 misses {l2:.3}, walks {walks:.3}", mm_types::format_size(r.bytes), r.page, hw.join(", "));
        }
    }
}

/// `delta`'s counts added to `sums`, event by event (the events open in the same order each run).
fn add_counts(sums: &mut Vec<(String, u64)>, delta: &[(String, u64)]) {
    if sums.is_empty() {
        sums.extend(delta.iter().map(|(n, _)| (n.clone(), 0)));
    }
    for ((_, s), (_, d)) in sums.iter_mut().zip(delta) {
        *s += d;
    }
}

/// The run with the median time per access (of an even number, the faster of the middle two),
/// `None` for no run.
fn median_run(runs: &[crate::ChasePoint]) -> Option<&crate::ChasePoint> {
    let mut by_time: Vec<&crate::ChasePoint> = runs.iter().collect();
    by_time.sort_by(|a, b| a.ns_per_access.total_cmp(&b.ns_per_access));
    by_time.get(runs.len().saturating_sub(1) / 2).copied()
}

#[cfg(test)]
mod tests {
    use super::median_run;
    use crate::ChasePoint;

    fn point(ns: f64, lines: u64) -> ChasePoint {
        ChasePoint { page: "4K".into(), bytes: 16 << 20, accesses: 1000, ns_per_access: ns, anon_huge_bytes: 0, mthp_faults: Vec::new(), pages: 4096, host_pte_lines: lines }
    }

    #[test]
    fn the_median_run_is_kept_whole() {
        assert_eq!(median_run(&[]), None);
        // By hand: 280, 347, 298 → 298 (the third run, with its own frames' lines).
        let runs = [point(280.2, 600), point(347.6, 700), point(297.8, 800)];
        assert_eq!(median_run(&runs), Some(&runs[2]));
        // Of two, the faster.
        assert_eq!(median_run(&runs[..2]), Some(&runs[0]));
        assert_eq!(median_run(&runs[1..2]), Some(&runs[1]));
    }
}
