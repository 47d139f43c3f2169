//! `thplab calibrate --pressure`: the swap figures of `[fault.pressure]` (issue #28 item 4),
//! measured through the live executor in a memcg of its own with a zram swap device, both
//! created and torn down by the settings guard (crates/live/src/pressure.rs), under 4 KiB
//! pages (`enabled=never`, every mTHP size `never`).
//!
//! - Swap-out: a range twice the memcg's limit written one byte per page (run A). Past the
//!   limit every fault reclaims: memcg limit reclaim (mm/memcontrol.c `try_charge_memcg` →
//!   mm/vmscan.c `try_to_free_mem_cgroup_pages` → `shrink_folio_list` → mm/page_io.c
//!   `swap_writeout`, zram compressing the page). The wall time less the run's faults at the
//!   4 KiB fault cost, per page swapped out (`pswpout`), is `swapout_ns_per_page`: reclaim's
//!   scan and unmap of the page are in it (every page reclaimed here is swapped out), so
//!   `reclaim_scan_ns_per_page` and `reclaim_ns_per_page` stay 0.
//! - Swap-in: the same, then the range read back (run B): each page not resident is a major
//!   fault (mm/memory.c `do_swap_page`, zram decompressing it) while reclaim swaps the rest
//!   out. B's wall time less A's, less B's extra swap-outs at the swap-out figure, per page
//!   swapped in (`pswpin`), is `swapin_ns_per_page`.
//!
//! Compaction per pageblock needs a fragmented live machine (issue #28 item 5), not measured
//! here yet.

use live::{ExecOptions, Result};
use thp_abi::pressure::{Pressure, SwapKind, SwapSpec};
use thp_abi::ThpSettings;
use uapi::profile::PressureCosts;
use uapi::RunResult;

use crate::{settings_for, Figure, Spread};

/// The memcg limit of the swap runs; the range written is twice it.
const LIMIT_MIB: u64 = 64;

/// One run of `text` under the limit with zram swap: (wall ns, minflt, pswpout, pswpin).
fn swap_run(text: &str, settings: &ThpSettings) -> Result<(f64, u64, u64, u64)> {
    let w = workload::parse("calibrate --pressure", text).map_err(|e| live::LiveError::Child(e.to_string()))?;
    let pressure = Pressure { memory_max: Some(LIMIT_MIB << 20), swap: Some(SwapSpec { kind: SwapKind::Zram, bytes: 4 * LIMIT_MIB << 20 }) };
    let opts = ExecOptions { pressure, ..Default::default() };
    let r: RunResult = live::run_live(&w, settings, &[], &opts)?;
    let wall = r.live.as_ref().map_or(0.0, |l| l.wall_ms * 1e6);
    let vm = |k: &str| r.vmstat.get(k).copied().unwrap_or(0).max(0) as u64;
    Ok((wall, r.process.minflt, vm("pswpout"), vm("pswpin")))
}

/// The swap figures, `repeat` runs of each, with the 4 KiB fault cost `fault_ns` measured
/// before; the figures and the section's swap fields.
pub fn measure_swap(base: &ThpSettings, repeat: u32, fault_ns: f64, progress: &mut impl FnMut(&str)) -> Result<(Vec<Figure>, PressureCosts)> {
    let settings = settings_for(base, "4kB");
    let len = 2 * LIMIT_MIB;
    let (mut out_ns, mut in_ns, mut outs, mut ins) = (Vec::new(), Vec::new(), 0, 0);
    for i in 0..repeat {
        progress(&format!("swap-out and swap-in through zram ({}/{repeat})", i + 1));
        let (wa, fa, oa, _) = swap_run(&format!("mmap buf {len}M\ntouch buf write\n"), &settings)?;
        let (wb, _, ob, ib) = swap_run(&format!("mmap buf {len}M\ntouch buf write\ntouch buf read\n"), &settings)?;
        if oa == 0 || ib == 0 {
            continue;
        }
        let out = ((wa - fa as f64 * fault_ns) / oa as f64).max(0.0);
        out_ns.push(out);
        in_ns.push(((wb - wa - ob.saturating_sub(oa) as f64 * out) / ib as f64).max(0.0));
        (outs, ins) = (oa, ib);
    }
    let (o, s) = (Spread::of(&out_ns), Spread::of(&in_ns));
    let costs = PressureCosts { swapout_ns_per_page: o.median, swapin_ns_per_page: s.median, ..Default::default() };
    let figures = vec![
        Figure { what: "swap-out (zram)".into(), ns: o, events: outs, at_size: None },
        Figure { what: "swap-in (zram)".into(), ns: s, events: ins, at_size: None },
    ];
    Ok((figures, costs))
}
