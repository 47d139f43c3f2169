//! The hint sources of the hint policies (`--policy collapse-hints|global-hints`) on the
//! driver's clock: MGLRU aging triggered from user space every `period` ms (the collapse-hint
//! series' experiment wrote debugfs `lru_gen` every 2 s: `run_aging` → `try_to_inc_max_seq`,
//! mm/vmscan.c), or kdamond's sample interval (5 ms; mm/damon/core.c: `kdamond_fn`) with its
//! scheme's findings handed over at the first aggregation after each period. The mm core does
//! one pass's work (`Kernel::lru_gen_aging`, `Kernel::damon_sample`, `Kernel::policy_hotness`);
//! when it happens is decided here. The sources run on other CPUs: their modelled CPU time is
//! counted (`khugepaged.hints.source_cpu_ns`), not added to the program's clock. With no
//! hint policy nothing is scheduled.

use mm::damon::{Damon, DamonAttrs, DamosCollapse};
use mm::vmscan::lru_gen::LruGen;
use mm::Kernel;
use thp_abi::HintSource;

/// The source's schedule and state.
#[derive(Clone, Debug, Default)]
pub struct HintDaemon {
    next_ns: Option<u64>,
    /// When the next findings go to the policy (DAMON; MGLRU hands over at every aging).
    next_hand_ns: u64,
    gens: Vec<LruGen>,
    damon: Option<Damon>,
}

impl HintDaemon {
    /// After an operation at `now`: a policy with a source starts it (the first pass one
    /// period, or for DAMON one sample interval, later).
    pub fn after_op(&mut self, k: &Kernel, now: u64) {
        if self.next_ns.is_some() {
            return;
        }
        match k.policy_hint_source() {
            Some((HintSource::Mglru, period)) => self.next_ns = Some(now + period.max(1)),
            Some((HintSource::Damon, period)) => {
                let d = Damon::new(DamonAttrs::default(), DamosCollapse::default(), 0);
                self.next_ns = Some(now + d.attrs.sample_ns);
                self.next_hand_ns = now + period.max(1);
                self.damon = Some(d);
            }
            None => {}
        }
    }

    /// When the next pass is due, if one is.
    pub fn due(&self) -> Option<u64> {
        self.next_ns
    }

    /// Run the pass due at `t` and schedule the next.
    pub fn run_pass(&mut self, k: &mut Kernel, t: u64) {
        let Some((source, period)) = k.policy_hint_source() else {
            self.next_ns = None;
            return;
        };
        match (source, self.damon.as_mut()) {
            (HintSource::Damon, Some(d)) => {
                let before = d.cpu_ns;
                let found = k.damon_sample(d);
                let cpu = d.cpu_ns - before;
                let sample = d.attrs.sample_ns;
                k.note_hint_source(0, cpu);
                if let Some(found) = found.filter(|_| t >= self.next_hand_ns) {
                    k.note_hint_source(1, 0);
                    k.policy_hotness(&found);
                    self.next_hand_ns = t + period.max(1);
                }
                self.next_ns = Some(t + sample);
            }
            _ => {
                let pass = k.lru_gen_aging(&mut self.gens, true);
                k.note_hint_source(1, pass.cpu_ns);
                k.policy_hotness(&pass.hot_ranges());
                self.next_ns = Some(t + period.max(1));
            }
        }
    }
}

/// The result's `model.khugepaged.hints`: present with a hint policy only.
pub fn model_hints(k: &Kernel) -> Option<uapi::result::ModelHints> {
    k.policy_hint_source()?;
    let kh = k.khugepaged_state();
    let h = kh.hints;
    let q = k.policy_hint_stats().unwrap_or_default();
    Some(uapi::result::ModelHints {
        source_passes: h.source_passes,
        source_cpu_ns: h.source_cpu_ns,
        queued: q.added,
        deduplicated: q.deduplicated,
        dropped: q.dropped,
        expired: q.expired,
        served: h.served,
        hint_collapses: h.collapsed,
        vanished: h.vanished,
        non_hint_collapses: kh.pages_collapsed - h.collapsed,
        splits: h.splits,
    })
}
