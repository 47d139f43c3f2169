//! Time estimate of a stream of dependent accesses from `TlbStats` and a preset's latencies.
//!
//! An access costs its data read plus its translation: an L2 hit costs `l2_hit_cycles`, a walk
//! `walk_cycles` plus each entry it read. Where a read is served from is the model's own
//! estimate (not a kernel or vendor fact): the cache hierarchy is an inclusive set of LRU caches
//! shared by the stream's kinds of lines, each kind a set of distinct 64-byte lines referenced
//! uniformly at random at its own rate per access: the data (footprint / 64 lines, once per
//! access), and the page-table lines of each guest and host level (entries of a level that map
//! 2^s bytes, 8 to a line: footprint / 2^s / 8 lines; a host level's from [`HostLines`], where
//! the guest-physical frames lie; referenced as often as the walks read that level). For a
//! cache of C lines, Che's approximation gives the characteristic time T (in accesses) with
//! Σ lines·(1 − e^(−rate·T/lines)) = C, and a line of a kind is in the cache with probability
//! 1 − e^(−rate·T/lines); a read costs the latency of the smallest cache that holds it, or
//! memory. Independent accesses would overlap (memory-level parallelism); this estimate is for
//! dependent ones (a pointer chase).

use crate::{CpuPreset, TlbStats};

pub use crate::presets::CacheSpec as CacheLevel;

/// The distinct bytes a stream touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    pub bytes: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Estimate {
    pub data_cycles: f64,
    pub translation_cycles: f64,
    pub cycles: f64,
    pub ns: f64,
}

/// Under nested paging, the distinct 64-byte lines of host page-table entries (8 entries a
/// line) that the stream's guest-physical frames use, per host level (0 = PML4 .. 3 = PTE).
/// Frames that lie together in guest-physical memory (a large folio, or base pages of a
/// freshly booted machine) share host lines; base pages of a machine whose free lists have
/// been churned for hours each use one of their own (docs/tlb-model.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostLines(pub [u64; 4]);

/// One kind of line: `lines` distinct lines, read `rate` times per access.
#[derive(Clone, Copy, Debug)]
struct Kind {
    lines: f64,
    rate: f64,
}

/// Che's characteristic time of an LRU cache of `cap` lines under `kinds` (infinite when they
/// all fit).
fn characteristic_time(kinds: &[Kind], cap: f64) -> f64 {
    let live: Vec<Kind> = kinds.iter().copied().filter(|k| k.rate > 0.0).collect();
    if live.iter().map(|k| k.lines).sum::<f64>() <= cap {
        return f64::INFINITY;
    }
    let held = |t: f64| live.iter().map(|k| k.lines * (1.0 - (-k.rate * t / k.lines).exp())).sum::<f64>();
    let (mut lo, mut hi) = (0.0, 1.0);
    while held(hi) < cap {
        hi *= 2.0;
    }
    for _ in 0..64 {
        let mid = 0.5 * (lo + hi);
        if held(mid) < cap {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// Mean cycles of one read of a line of kind `k`; `times`: each cache's characteristic time
/// under all the kinds, in the order of `p.caches`.
fn read_cycles(p: &CpuPreset, times: &[f64], k: Kind) -> f64 {
    let (mut held_before, mut cycles) = (0.0, 0.0);
    for (c, &t) in p.caches.iter().zip(times) {
        let held = if t.is_infinite() { 1.0 } else { (1.0 - (-k.rate * t / k.lines).exp()).max(held_before) };
        cycles += (held - held_before) * c.cycles;
        held_before = held;
    }
    cycles + (1.0 - held_before) * p.dram_ns * p.ghz
}

/// Distinct lines of the table entries at `level` (0 = PML4 .. 3 = PTE) for footprint `f`.
fn table_lines(f: u64, level: usize) -> u64 {
    let entry_shift = 39 - 9 * level as u32;
    ((f >> entry_shift) / 8).max(1)
}

/// The estimate for `stats` over a stream whose footprint is `f`; `host`: where its host
/// entries lie (without it, as densely as the guest's: the footprint's).
pub fn estimate(p: &CpuPreset, stats: &TlbStats, f: Footprint, host: Option<HostLines>) -> Estimate {
    let n = stats.accesses.max(1) as f64;
    let mut kinds = vec![Kind { lines: (f.bytes / 64).max(1) as f64, rate: 1.0 }];
    for l in 0..4 {
        kinds.push(Kind { lines: table_lines(f.bytes, l) as f64, rate: stats.guest_refs[l] as f64 / n });
    }
    for l in 0..4 {
        let lines = host.map_or(table_lines(f.bytes, l), |h| h.0[l].max(1));
        kinds.push(Kind { lines: lines as f64, rate: stats.host_refs[l] as f64 / n });
    }
    let times: Vec<f64> = p.caches.iter().map(|c| characteristic_time(&kinds, c.bytes as f64 / 64.0)).collect();
    let data = stats.accesses as f64 * read_cycles(p, &times, kinds[0]);
    let mut tr = stats.l2_hits as f64 * p.l2_hit_cycles + stats.walks as f64 * p.walk_cycles;
    for l in 0..4 {
        if stats.guest_refs[l] > 0 {
            tr += stats.guest_refs[l] as f64 * read_cycles(p, &times, kinds[1 + l]);
        }
        if stats.host_refs[l] > 0 {
            tr += stats.host_refs[l] as f64 * read_cycles(p, &times, kinds[5 + l]);
        }
    }
    let cycles = data + tr;
    Estimate { data_cycles: data, translation_cycles: tr, cycles, ns: cycles / p.ghz }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets::ZEN4;

    /// Everything fits the 32 KiB L1D (256 data lines and one line per table level): every
    /// read costs 4 cycles. Data 10 × 4; L2 hits 2 × 7; the walk 5 + one PTE read (4).
    #[test]
    fn estimate_adds_up() {
        let s = TlbStats { accesses: 10, l1_hits: 7, l2_hits: 2, walks: 1, walk_refs: 1, guest_refs: [0, 0, 0, 1], ..Default::default() };
        let e = estimate(&ZEN4, &s, Footprint { bytes: 16 << 10 }, None);
        assert_eq!(e.data_cycles, 40.0);
        assert_eq!(e.translation_cycles, 14.0 + 5.0 + 4.0);
        assert_eq!(e.cycles, 63.0);
    }

    /// Che by hand: data alone over twice the L1D (1024 lines in 512): 1024·(1 − e^(−T/1024)) =
    /// 512 gives e^(−T/1024) = 1/2, so half the reads hit the L1D (4 cycles) and the rest the
    /// L2, which holds all (14): 9 cycles a read. Over 2 GiB (2^25 lines) the 4 MiB L3 share
    /// (65536 lines) holds a line with probability about 65536/2^25 (0.2 %): a read costs about
    /// the 286 cycles of memory (110 ns × 2.6 GHz).
    #[test]
    fn reads_are_served_as_ches_approximation_says() {
        let one = TlbStats { accesses: 1, l1_hits: 1, ..Default::default() };
        let e = estimate(&ZEN4, &one, Footprint { bytes: 64 << 10 }, None);
        assert!((e.data_cycles - 9.0).abs() < 1e-6, "{}", e.data_cycles);
        let e = estimate(&ZEN4, &one, Footprint { bytes: 2 << 30 }, None);
        assert!(e.data_cycles > 280.0 && e.data_cycles < 286.0, "{}", e.data_cycles);
    }

    /// A nested walk's host PTE read over 256 MiB: the frames of 64 KiB folios use 8192 host
    /// lines (as many as the guest's PTE lines: the same as no `HostLines`), scattered base
    /// pages 65536, which the caches hold far less often, so each read costs more.
    #[test]
    fn scattered_frames_make_host_reads_dearer() {
        let s = TlbStats { accesses: 100, walks: 100, guest_refs: [0, 0, 0, 100], host_refs: [0, 0, 0, 100], ..Default::default() };
        let f = Footprint { bytes: 256 << 20 };
        let scattered = estimate(&ZEN4, &s, f, Some(HostLines([1, 1, 16, 65536])));
        let folios = estimate(&ZEN4, &s, f, Some(HostLines([1, 1, 1, 8192])));
        assert_eq!(estimate(&ZEN4, &s, f, None).translation_cycles, folios.translation_cycles);
        assert!(scattered.translation_cycles > folios.translation_cycles + 100.0 * 50.0, "{scattered:?} {folios:?}");
    }
}
