//! The tier study (docs/tiers.md), model-only: `cargo run --release -p sim --example tier_study
//! [SECONDS] [lower_max_free_order]`: Linux 6.18's tiering (numa_balancing=2, demotion) against
//! MTM on DRAM + CXL + a slow tier, side by side.

use mm::numa_balancing::NumaBalancingSysctls;
use policy::mtm::MtmParams;
use sim::tiers::{run_tier_study, tier_study_default, Tiering};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let secs: u64 = args.get(1).map_or(20, |s| s.parse().expect("SECONDS: a whole number of simulated seconds"));
    let mut study = tier_study_default(secs * 1000);
    if let Some(o) = args.get(2) {
        study.lower_max_free_order = o.parse().expect("lower_max_free_order: 0..10");
    }
    let linux = Tiering::Linux(NumaBalancingSysctls { mode: 2, ..Default::default() });
    let runs = [("linux-6.18 tiering", run_tier_study(&study, linux)), ("mtm", run_tier_study(&study, Tiering::Mtm(MtmParams::default())))];
    println!("{:<28} {:>18} {:>18}", "", runs[0].0, runs[1].0);
    let row = |name: &str, f: &dyn Fn(&sim::tiers::TierReport) -> u64| {
        println!("{:<28} {:>18} {:>18}", name, f(&runs[0].1), f(&runs[1].1));
    };
    for (k, (name, _)) in runs[0].1.events.named().iter().enumerate() {
        row(name, &|r| r.events.named()[k].1);
    }
    row("accesses", &|r| r.accesses);
    row("top-tier accesses", &|r| r.top_tier_accesses);
    row("THPs at end", &|r| r.thps_at_end);
    row("task time (us)", &|r| r.task_ns() / 1000);
    row("  accesses (us)", &|r| r.access_ns / 1000);
    row("  hint faults (us)", &|r| r.hint_fault_ns / 1000);
    row("  promotion copies (us)", &|r| r.promote_copy_ns / 1000);
    row("kernel threads (us)", &|r| r.background_ns / 1000);
    row("  MTM profiling (us)", &|r| r.mtm_profile_ns / 1000);
}
