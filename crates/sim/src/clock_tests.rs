//! The simulated clock inside a long touch (issue #27 item 3): a priced `Step::AccessRun` runs
//! in pieces bounded by the next event due (`driver::Machine::access_run_on_clock`), so a
//! `--sample` timeline and khugepaged's wake-ups see the touch part-done. The bounds are
//! derived from the built-in profile's `[fault]` costs (crates/uapi/profiles/builtin.toml).

use thp_abi::ThpSettings;
use uapi::RunResult;

use crate::{run_with, MachineConfig, RunOptions};

fn priced(set: &[&str], text: &str, sample_ms: Option<u64>) -> RunResult {
    let mut s = ThpSettings::default();
    for a in set {
        s.apply_assignment(a).unwrap();
    }
    let w = workload::parse("clock.thpw", text).unwrap();
    let costs = uapi::profile::MachineProfile::builtin().fault.unwrap();
    let mut opts = RunOptions { profile: crate::Profile { costs: Some(costs), sample_ms, ..Default::default() }, ..Default::default() };
    let m = MachineConfig { mem_bytes: 2 << 30, ..MachineConfig::default() };
    run_with(&w, &s, &m, &mut opts).unwrap_or_else(|e| panic!("{e}")).0
}

/// Rss in a 1 ms timeline grows by at most what 1 ms of faults can map, plus the one fault
/// that crosses the sample: under `always` a PMD fault costs 169 894.96 ns, so 1 ms holds
/// floor(10^6 / 169 894.96) = 5 of them, and one more crosses: 6 × 2048 kB. Under `never` a
/// 4 KiB fault costs 1568.21 ns: 637 in 1 ms, and one more: 638 × 4 kB. (It was 256 MiB at
/// the first sample and then steps of 256 MiB: 65 536 pages a step.) The touch ends with all
/// of the region mapped, and takes about 128 faults' time under `always`, 65 536 under
/// `never`: at least 21 and 102 samples.
#[test]
fn rss_in_a_1ms_timeline_grows_by_at_most_what_1ms_of_faults_map() {
    let text = "mmap buf 256M\ntouch buf write\n";
    for (set, per_ms_kb, min_samples) in [("enabled=always", 6 * 2048, 21), ("enabled=never", 638 * 4, 102)] {
        let r = priced(&[set], text, Some(1));
        let samples = &r.timeline.as_ref().unwrap().samples;
        assert!(samples.len() >= min_samples, "{set}: {} samples", samples.len());
        let mut prev = 0;
        for s in samples {
            assert!(s.rss_kb - prev <= per_ms_kb, "{set}: Rss {} kB at {} ms after {prev} kB", s.rss_kb, s.t_ms);
            prev = s.rss_kb;
        }
        assert_eq!(r.process.rss_bytes, 256 << 20, "{set}");
    }
}

/// khugepaged wakes inside a long touch. `r` (4 MiB, two PMD ranges) is filled with 4 KiB
/// pages and then made eligible (`madvise hugepage`, enabled=madvise): the daemon wakes at
/// once and, with pages_to_scan 512, collapses one range; its next wake-up comes 10 ms
/// (scan_sleep_millisecs) plus at most two 4 ms jiffies (HZ 250) later, and collapses the
/// other. By then the 512 MiB touch that follows (131 072 faults of 1568.21 ns: 205 ms) is
/// under a tenth done: the second collapse is in a sample at most 10 + 8 + 1 ms after the
/// touch began, while Rss is below 4 MiB + 51.2 MiB. (The touch's first 65 536 pages used
/// to be one step of 103 ms, the wake-up waiting for its end.)
#[test]
fn khugepaged_wakes_inside_a_long_touch() {
    let set = ["enabled=madvise", "khugepaged/scan_sleep_millisecs=10", "khugepaged/pages_to_scan=512"];
    let text = "mmap r 4M align=2M\ntouch r write\nmadvise r hugepage\nmmap big 512M\nphase fill\ntouch big write\n";
    let r = priced(&set, text, Some(1));
    let kh = r.model.as_ref().and_then(|m| m.run.as_ref()).unwrap().khugepaged;
    assert_eq!(kh.pages_collapsed, 2);
    let fill = r.time.as_ref().unwrap().phases.iter().find(|p| p.name == "fill").unwrap().clone();
    assert!(fill.ns > 200_000_000, "the touch takes {} ns", fill.ns);
    let samples = &r.timeline.as_ref().unwrap().samples;
    let first = samples.iter().find(|s| s.t_ms * 1e6 >= fill.start_ns as f64).unwrap();
    assert_eq!(first.pages_collapsed, 1, "one range at the first wake-up");
    let second = samples.iter().find(|s| s.pages_collapsed == 2).unwrap();
    let after_ms = second.t_ms - fill.start_ns as f64 / 1e6;
    assert!(after_ms <= 19.0, "second collapse seen {after_ms} ms into the touch");
    assert!(second.rss_kb < 4096 + 52_429, "Rss {} kB: the touch was over a tenth done", second.rss_kb);
}
