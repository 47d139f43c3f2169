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

/// Under nested paging, the distinct 64-byte lines of host page-table entries (8 entries a
/// line) that the stream's guest-physical frames use, per host level (0 = PML4 .. 3 = PTE).
/// A host entry line comes back after as many accesses as there are such lines, so it is
/// served from the cache that holds that many lines × 128 bytes (as `table_reuse_bytes`).
/// Frames that lie together in guest-physical memory (a large folio, or base pages of a
/// freshly booted machine) share host lines; base pages of a machine whose free lists have
/// been churned for hours each use one of their own (docs/tlb-model.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostLines(pub [u64; 4]);

/// The estimate for `stats` over a stream whose footprint is `f`; `host`: where its host
/// entries lie (without it, as densely as the guest's: the footprint's).
pub fn estimate(p: &CpuPreset, stats: &TlbStats, f: Footprint, host: Option<HostLines>) -> Estimate {
    let data = stats.accesses as f64 * latency_cycles(p, f.bytes);
    let mut tr = stats.l2_hits as f64 * p.l2_hit_cycles + stats.walks as f64 * p.walk_cycles;
    for l in 0..4 {
        let guest = latency_cycles(p, table_reuse_bytes(f.bytes, l));
        let host_lat = host.map_or(guest, |h| latency_cycles(p, h.0[l].max(1) * 128));
        tr += stats.guest_refs[l] as f64 * guest + stats.host_refs[l] as f64 * host_lat;
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
        let e = estimate(&ZEN4, &s, Footprint { bytes: 16 << 10 }, None);
        assert_eq!(e.data_cycles, 40.0);
        assert_eq!(e.translation_cycles, 14.0 + 5.0 + 4.0);
        assert_eq!(e.cycles, 63.0);
    }

    /// A nested walk's host PTE read: 65536 host lines (256 MiB of scattered base pages) are
    /// 8 MiB of reuse, memory (286 cycles); 8192 (the same frames in 64 KiB folios) 1 MiB, the
    /// L2 (14). The guest's reads keep the footprint's reuse.
    #[test]
    fn host_lines_set_where_host_entries_come_from() {
        let s = TlbStats { accesses: 1, walks: 1, guest_refs: [0, 0, 0, 1], host_refs: [0, 0, 0, 1], ..Default::default() };
        let f = Footprint { bytes: 256 << 20 };
        let scattered = estimate(&ZEN4, &s, f, Some(HostLines([1, 1, 16, 65536])));
        let folios = estimate(&ZEN4, &s, f, Some(HostLines([1, 1, 16, 8192])));
        assert_eq!(scattered.translation_cycles - folios.translation_cycles, 286.0 - 14.0);
        assert_eq!(estimate(&ZEN4, &s, f, None).translation_cycles, folios.translation_cycles);
    }
}
