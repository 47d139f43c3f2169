//! The hardware's TLB counters beside the model's: a live run wrapped in the counters of
//! `record::hwcounters` when the model ran accesses (its result's `live.hw_tlb`), and the
//! informational rows of `compare` that set their sums beside the model's L2 misses and walks
//! (`record::hwcounters::model_counterpart`). Where the PMU is not available the live run says
//! so once on stderr and has no counts: no rows, no zeros.

use anyhow::Result;
use record::hwcounters::{self, ModelCount};
use uapi::result::HwCount;
use uapi::RunResult;

/// `run` (a live run of the workload or program the model ran as `model`), with the hardware
/// TLB counters around it when the model ran accesses; `who` prefixes the no-PMU sentence.
pub fn live_counted(model: &RunResult, who: &str, run: impl FnOnce() -> Result<RunResult>) -> Result<RunResult> {
    if model.accesses.is_none() {
        return run();
    }
    let (r, counts) = hwcounters::around(who, run);
    let mut r = r?;
    if let Some(l) = r.live.as_mut() {
        l.hw_tlb = counts.into_iter().map(|(event, count)| HwCount { event, count }).collect();
    }
    Ok(r)
}

/// The rows (field, model, live) of the hardware counters the live run has: the model's
/// total L2 misses against the sum of the dTLB miss events, its walks against the sum of the
/// completed-walk events. Empty when the live run has none or the model ran no accesses.
pub fn rows(model: &RunResult, live: &RunResult) -> Vec<(String, i64, i64)> {
    let (Some(a), Some(l)) = (model.accesses.as_ref(), live.live.as_ref()) else { return Vec::new() };
    let mut out = Vec::new();
    for (what, m, label) in [(ModelCount::L2Misses, a.total.l2_misses, "TLB L2 misses"), (ModelCount::Walks, a.total.walks, "TLB walks")] {
        let events: Vec<&HwCount> = l.hw_tlb.iter().filter(|c| hwcounters::model_counterpart(&c.event) == Some(what)).collect();
        if events.is_empty() {
            continue;
        }
        let names: Vec<&str> = events.iter().map(|c| c.event.as_str()).collect();
        let sum: u64 = events.iter().map(|c| c.count).sum();
        out.push((format!("{label} (live: {})", names.join(" + ")), m as i64, sum as i64));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_hw(counts: &[(&str, u64)]) -> RunResult {
        let hw_tlb = counts.iter().map(|&(e, c)| HwCount { event: e.into(), count: c }).collect();
        RunResult { live: Some(uapi::LiveSection { hw_tlb, ..Default::default() }), ..Default::default() }
    }

    #[test]
    fn the_counters_sit_beside_the_models_misses_and_walks() {
        let mut model = RunResult::default();
        let live = with_hw(&[("dTLB-load-misses", 700), ("dTLB-store-misses", 300), ("iTLB-load-misses", 5), ("DTLB_LOAD_MISSES.WALK_COMPLETED", 650), ("DTLB_LOAD_MISSES.WALK_ACTIVE", 99)]);
        // No accesses in the model: nothing to set them beside.
        assert!(rows(&model, &live).is_empty());
        let mut a = uapi::result::AccessReport::default();
        (a.total.l2_misses, a.total.walks) = (900, 880);
        model.accesses = Some(a);
        assert_eq!(
            rows(&model, &live),
            vec![
                ("TLB L2 misses (live: dTLB-load-misses + dTLB-store-misses)".to_string(), 900, 1000),
                ("TLB walks (live: DTLB_LOAD_MISSES.WALK_COMPLETED)".to_string(), 880, 650),
            ]
        );
        // A machine without a PMU: no counts, no rows (no zeros).
        assert!(rows(&model, &with_hw(&[])).is_empty());
    }
}
