//! Collapse hints: hot PMD ranges a hint source (MGLRU aging, DAMON) hands to khugepaged, which
//! serves them before its round-robin scan. MODEL-ONLY: a posted series, in no release.
//!
//! Source: "[PATCH 0/5] mm/khugepaged: add collapse hint machanism for khugepaged and use in
//! mglru" (Luka Bai, linux-mm, 2026-05-31; https://lkml.iu.edu/2605.3/12390.html and 1/5,
//! https://lkml.iu.edu/2605.3/12391.html): `khugepaged_add_collapse_hint()` queues a hint
//! `{address, vma}` on the mm's `struct khugepaged_mm_slot`, which holds one
//! `struct khugepaged_collapse_requests` per priority level (NR_KHUGEPAGED_PRIORITY_LEVEL); the
//! per-mm requests are linked into global per-priority queues; khugepaged takes, from the
//! highest-priority queue (prio 0) first, the first mm slot with hints and serves all of that
//! mm's hints at that level, then the next; each hint is deleted after one attempt, collapsed
//! or not; collapses are counted as hint or non-hint. 5/5 adds hints where MGLRU's `walk_mm()`
//! and `lru_gen_look_around()` put a PMD into the Bloom filter (mm/vmscan.c, 6.18:
//! `walk_pmd_range`, `lru_gen_look_around`, `suitable_to_scan`).
//!
//! What the posted text leaves open, chosen here and made parameters (docs/collapse-hints.md):
//! the number of levels (`levels=`, 2 as in the series' diagram); which level a hint gets
//! (the PMD's young fraction in `levels - 1` equal steps: all PTEs young is prio 0);
//! de-duplication (a hint already queued for the same mm and PMD is not queued again; a hotter
//! one moves it up to its level); a source pass replaces the hints of the previous pass not
//! yet served (`expired`: their accessed bits are gone; a range still hot is found again); the per-mm limit (`per_mm=`, over it a hint is dropped); the
//! charge against `pages_to_scan` (`charge=`, 512 as a scanned range; a vanished VMA costs 1,
//! as a skipped VMA costs the round-robin scan). The mm side (crates/mm/src/khugepaged.rs:
//! `khugepaged_scan_hints`) drops a hint whose VMA is gone or no longer eligible.

use std::collections::{HashMap, VecDeque};

use thp_abi::{HintParams, HintSource};

use crate::Range;

/// What a hint source found of one PMD range at one pass: its young and examined PTEs
/// (`young == total` for a young PMD-mapped folio; 0 of 512 for an old one), and whether it
/// is mapped by a PMD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HotRange {
    pub range: Range,
    pub young: u32,
    pub total: u32,
    pub pmd_mapped: bool,
    /// Hot by the source's own rule (MGLRU: `suitable_to_scan`, one young PTE per cache line
    /// of 8; DAMON: a region with enough accesses).
    pub hot: bool,
}

/// The level of a hint: the PMD's cold fraction in `levels - 1` equal steps, rounded up (all
/// young: 0; with 2 levels any old PTE: 1).
pub fn priority(levels: u8, young: u32, total: u32) -> u8 {
    let levels = levels.max(1) as u32;
    if total == 0 || young >= total {
        return 0;
    }
    let cold = total - young;
    ((cold * (levels - 1)).div_ceil(total)).min(levels - 1) as u8
}

/// The counts of the queues (the series' 4/5 adds counters whose names were not readable:
/// these are thplab's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HintStats {
    /// Hints queued (`khugepaged_add_collapse_hint` calls that queued one).
    pub added: u64,
    /// Hints not queued because the same mm and PMD was queued (moved up when hotter).
    pub deduplicated: u64,
    /// Hints dropped at the per-mm limit.
    pub dropped: u64,
    /// Hints handed to khugepaged (each once).
    pub served: u64,
    /// Hints a newer pass of the source replaced before khugepaged served them.
    pub expired: u64,
}

/// One priority level: the mms with hints at it, in the order they first got one, and each
/// mm's hints in the order they came.
#[derive(Clone, Debug, Default)]
struct Level {
    mms: VecDeque<u32>,
    hints: HashMap<u32, VecDeque<u64>>,
}

/// The queues of `struct khugepaged_mm_slot`'s requests and the global priority lists.
#[derive(Clone, Debug)]
pub struct HintQueues {
    pub params: HintParams,
    levels: Vec<Level>,
    /// (mm, PMD address) → level, for de-duplication.
    queued: HashMap<(u32, u64), u8>,
    per_mm: HashMap<u32, u32>,
    pub stats: HintStats,
}

impl HintQueues {
    pub fn new(params: HintParams) -> HintQueues {
        let levels = (0..params.levels.max(1)).map(|_| Level::default()).collect();
        HintQueues { params, levels, queued: HashMap::new(), per_mm: HashMap::new(), stats: HintStats::default() }
    }

    /// Pages of `pages_to_scan` a served hint costs: `charge=` (512 by default, as a scanned PMD
    /// range), 1 when its VMA is gone (as a skipped VMA).
    pub fn charge(&self, vanished: bool) -> u64 {
        if vanished {
            1
        } else {
            self.params.charge as u64
        }
    }

    /// The hint source these queues are fed by, and its period in ns.
    pub fn source(&self) -> (HintSource, u64) {
        (self.params.source, self.params.period_ms as u64 * 1_000_000)
    }

    /// Hints queued now.
    pub fn len(&self) -> usize {
        self.queued.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// `khugepaged_add_collapse_hint`: queue the PMD range of `addr` in mm `mm` at `prio`.
    /// Returns whether a hint was queued (false: a duplicate, or over the per-mm limit).
    pub fn add_collapse_hint(&mut self, mm: u32, addr: u64, prio: u8) -> bool {
        let addr = addr & !((2 << 20) - 1);
        let prio = prio.min(self.levels.len() as u8 - 1);
        if let Some(&at) = self.queued.get(&(mm, addr)) {
            self.stats.deduplicated += 1;
            if prio < at {
                self.remove(mm, addr, at);
                self.push(mm, addr, prio);
            }
            return false;
        }
        let n = self.per_mm.entry(mm).or_default();
        if *n >= self.params.per_mm {
            self.stats.dropped += 1;
            return false;
        }
        *n += 1;
        self.push(mm, addr, prio);
        self.stats.added += 1;
        true
    }

    fn push(&mut self, mm: u32, addr: u64, prio: u8) {
        let level = &mut self.levels[prio as usize];
        let q = level.hints.entry(mm).or_default();
        if q.is_empty() {
            level.mms.push_back(mm);
        }
        q.push_back(addr);
        self.queued.insert((mm, addr), prio);
    }

    fn remove(&mut self, mm: u32, addr: u64, prio: u8) {
        let level = &mut self.levels[prio as usize];
        if let Some(q) = level.hints.get_mut(&mm) {
            q.retain(|a| *a != addr);
            if q.is_empty() {
                level.hints.remove(&mm);
                level.mms.retain(|m| *m != mm);
            }
        }
        self.queued.remove(&(mm, addr));
    }

    /// The next hint khugepaged serves: the highest level with hints, its first mm, that mm's
    /// oldest hint; deleted from the queues as it is handed out (one attempt per hint).
    pub fn next(&mut self) -> Option<Range> {
        let p = self.levels.iter().position(|l| !l.mms.is_empty())?;
        let mm = *self.levels[p].mms.front()?;
        let addr = *self.levels[p].hints.get(&mm)?.front()?;
        self.remove(mm, addr, p as u8);
        if let Some(n) = self.per_mm.get_mut(&mm) {
            *n -= 1;
        }
        self.stats.served += 1;
        Some(Range { mm, addr })
    }

    /// A source's findings: each PTE-mapped range it found hot becomes a hint at the
    /// level of its young fraction. (A PMD-mapped range is already huge: no hint.) A pass
    /// supersedes the hints of the pass before that khugepaged has not served (`expired`):
    /// the accessed bits they were read from are gone, and a range still hot is found again.
    pub fn add_hot(&mut self, found: &[HotRange]) {
        self.stats.expired += self.queued.len() as u64;
        self.levels.iter_mut().for_each(|l| *l = Level::default());
        self.queued.clear();
        self.per_mm.clear();
        for h in found.iter().filter(|h| h.hot && !h.pmd_mapped) {
            let prio = priority(self.params.levels, h.young, h.total);
            self.add_collapse_hint(h.range.mm, h.range.addr, prio);
        }
    }
}

#[cfg(test)]
#[path = "collapse_hints_tests.rs"]
mod tests;
