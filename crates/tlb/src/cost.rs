//! Time estimate of a stream of dependent accesses from `TlbStats` and a preset's latencies.
//!
//! An access costs its data read plus its translation: an L2 hit costs `l2_hit_cycles`, a walk
//! `walk_cycles` plus each entry it read. Where a read is served from follows a reuse-distance
//! heuristic (the model's own, not a kernel or vendor fact): with a random stream over F bytes,
//! the data line is served by the smallest cache of at least F bytes (else memory), and a
//! page-table line at a level whose entries map 2^s bytes (8 entries per 64-byte line) comes back
//! after F / (8·2^s) accesses, each bringing about two lines (data and one table line), so it is
//! served by the smallest cache of at least F / (8·2^s) · 128 bytes. Independent accesses would
//! overlap (memory-level parallelism); this estimate is for dependent ones (a pointer chase).

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

/// Cycles of one read of a line whose reuse distance is `bytes`.
pub fn latency_cycles(p: &CpuPreset, bytes: u64) -> f64 {
    for c in p.caches {
        if bytes <= c.bytes {
            return c.cycles;
        }
    }
    p.dram_ns * p.ghz
}

/// Reuse distance of a table line at `level` (0 = PML4 .. 3 = PTE) for footprint `f`.
fn table_reuse_bytes(f: u64, level: usize) -> u64 {
    let entry_shift = 39 - 9 * level as u32;
    let lines = (f >> entry_shift) / 8;
    lines.max(1) * 128
}

/// The estimate for `stats` over a stream whose footprint is `f`.
pub fn estimate(p: &CpuPreset, stats: &TlbStats, f: Footprint) -> Estimate {
    let data = stats.accesses as f64 * latency_cycles(p, f.bytes);
    let mut tr = stats.l2_hits as f64 * p.l2_hit_cycles + stats.walks as f64 * p.walk_cycles;
    for l in 0..4 {
        let lat = latency_cycles(p, table_reuse_bytes(f.bytes, l));
        tr += (stats.guest_refs[l] + stats.host_refs[l]) as f64 * lat;
    }
    let cycles = data + tr;
    Estimate { data_cycles: data, translation_cycles: tr, cycles, ns: cycles / p.ghz }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets::ZEN4;

    #[test]
    fn latencies_by_footprint() {
        // 16 KiB fits L1D (4 cycles); 2 GiB goes to memory: 110 ns × 2.6 GHz = 286 cycles.
        assert_eq!(latency_cycles(&ZEN4, 16 << 10), 4.0);
        assert_eq!(latency_cycles(&ZEN4, 2 << 30), 286.0);
        // PTE lines of a 2 GiB stream: 2^31 / 2^12 / 8 = 65536 lines × 128 = 8 MiB: more than
        // the 4 MiB L3 share, so memory (286); those of 256 MiB: 1 MiB, the L2 (14).
        assert_eq!(table_reuse_bytes(2 << 30, 3), 8 << 20);
        assert_eq!(latency_cycles(&ZEN4, 8 << 20), 286.0);
        assert_eq!(latency_cycles(&ZEN4, table_reuse_bytes(256 << 20, 3)), 14.0);
    }

    #[test]
    fn estimate_adds_up() {
        let s = TlbStats { accesses: 10, l1_hits: 7, l2_hits: 2, walks: 1, walk_refs: 1, guest_refs: [0, 0, 0, 1], ..Default::default() };
        // Footprint 16 KiB: data 10 × 4; L2 hits 2 × 7; walk 5 + one PTE read in L1D (4).
        let e = estimate(&ZEN4, &s, Footprint { bytes: 16 << 10 });
        assert_eq!(e.data_cycles, 40.0);
        assert_eq!(e.translation_cycles, 14.0 + 5.0 + 4.0);
        assert_eq!(e.cycles, 63.0);
    }
}
