//! A TLB and page-walk model that knows nothing of mm: the input of a lookup is a
//! [`Translation`] (virtual address, physical frame, leaf page size, contiguity), the output an
//! [`Outcome`] (L1 hit, L2 hit, or a walk of N memory references), and [`TlbStats`] count them.
//!
//! - **Structures** (`assoc`): each level (L1 DTLB, L2 DTLB/STLB) is one or more set-associative
//!   arrays, each holding some entry sizes; a translation goes to the array that holds its entry
//!   size, or is smashed to the largest size an array of that level holds below it (a 2 MiB page in
//!   Cortex-A57's L1 DTLB becomes a 1 MiB entry, a 1 GiB page in Zen's L2 a 2 MiB entry).
//! - **Entry size** of a translation: the leaf size (4 KiB PTE, 2 MiB PMD, 1 GiB PUD); 64 KiB when
//!   an arm64 PTE has the contiguous bit (CONT_PTES = 16, K618:arch/arm64/include/asm/pgtable-hwdef.h
//!   with CONFIG_ARM64_CONT_PTE_SHIFT = 4 in arch/arm64/Kconfig), 32 MiB for a contiguous PMD
//!   (CONT_PMDS = 16 × 2 MiB, CONFIG_ARM64_CONT_PMD_SHIFT = 4); in an array that coalesces, the
//!   naturally aligned group of 2^k 4 KiB PTEs that map 2^k contiguous, equally aligned frames
//!   (AMD Zen's L2 DTLB: 8 PTEs = 32 KiB; Neoverse N1's L2: 4 PTEs = 16 KiB); under nested
//!   paging, min(guest entry, host page).
//! - **Walks** (`walk`): x86-64/arm64 4-level tables (level 0 = PML4/L0 .. level 3 = PTE/L3); the
//!   page-walk caches keep non-leaf entries per level (PML4E, PDPTE, PDE caches as Intel SDM vol. 3A
//!   §4.10.3) and a walk reads only the levels below the deepest hit. A nested walk is
//!   two-dimensional: every guest table read first translates its guest-physical address through
//!   the host tables, and so does the final guest-physical address: (4+1)·(4+1)−1 = 24 references
//!   with 4-level guest and host tables and no cache hit.
//! - **Cost** (`cost`): cycles per outcome from the preset's latencies and cache hierarchy.
//!
//! Deterministic, no I/O, no allocation on the lookup path.
//!
//! Module map:
//! - [`assoc`]: set- and fully-associative tag arrays with LRU or tree pseudo-LRU.
//! - [`walk`]: the page-table walker and its page-walk caches.
//! - [`presets`]: CPU presets: TLB geometry, walk caches and latencies, with sources.
//! - [`granule`]: the base page sizes each preset implements and the entry each translation
//!   size of a granule takes, with its reach (16 KiB and 64 KiB: model-only).
//! - [`cost`]: the time of a stream of dependent accesses from `TlbStats` and latencies.

pub mod assoc;
pub mod cost;
pub mod granule;
pub mod presets;
mod walk;

pub use assoc::{Geometry, Replacement};
pub use cost::{CacheLevel, Estimate, Footprint, HostLines};
pub use presets::{CpuPreset, Isa, StructureSpec, PRESETS};

/// The leaf level of a translation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageSize {
    /// A PTE (4 KiB).
    K4,
    /// A PMD block (2 MiB).
    M2,
    /// A PUD block (1 GiB).
    G1,
}

impl PageSize {
    pub const fn shift(self) -> u8 {
        match self {
            PageSize::K4 => 12,
            PageSize::M2 => 21,
            PageSize::G1 => 30,
        }
    }
    /// The table level holding the leaf entry (0 = PML4/L0 .. 3 = PTE/L3).
    pub const fn leaf_level(self) -> usize {
        match self {
            PageSize::K4 => 3,
            PageSize::M2 => 2,
            PageSize::G1 => 1,
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "4k" | "4kib" => Some(PageSize::K4),
            "2m" | "2mib" => Some(PageSize::M2),
            "1g" | "1gib" => Some(PageSize::G1),
            _ => None,
        }
    }
}

/// One translation, as the page tables hold it when the access happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Translation {
    pub vaddr: u64,
    /// The 4 KiB frame `vaddr` maps to.
    pub pfn: u64,
    pub size: PageSize,
    /// For a PTE: log2 of the largest naturally aligned group of PTEs around `vaddr` (at most 9)
    /// that map contiguous frames aligned alike, inside one folio, with equal attributes (0: none).
    /// Hardware coalescing (AMD, N1) reads this; it needs no software bit.
    pub contig_order: u8,
    /// The arm64 contiguous bit is set on this entry (contpte for a PTE, a contiguous PMD).
    pub cont: bool,
}

impl Translation {
    /// A plain translation with no contiguity.
    pub fn new(vaddr: u64, pfn: u64, size: PageSize) -> Self {
        Translation { vaddr, pfn, size, contig_order: 0, cont: false }
    }
}

/// How the guest's translations are backed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Paging {
    Native,
    /// A virtual machine whose host maps guest memory with pages of this size.
    Nested { host: PageSize },
}

impl Paging {
    /// `native`, `nested-4k`, `nested-2m`, `nested-1g`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "native" => Some(Paging::Native),
            _ => s.strip_prefix("nested-").and_then(PageSize::parse).map(|host| Paging::Nested { host }),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Paging::Native => "native",
            Paging::Nested { host: PageSize::K4 } => "nested-4k",
            Paging::Nested { host: PageSize::M2 } => "nested-2m",
            Paging::Nested { host: PageSize::G1 } => "nested-1g",
        }
    }
}

/// What one lookup did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    L1Hit,
    L2Hit,
    /// Both levels missed; the walk read this many page-table entries from memory.
    Walk { refs: u32 },
}

/// Counters of a `Tlb`; they add up: `accesses == l1_hits + l2_hits + walks`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TlbStats {
    pub accesses: u64,
    pub l1_hits: u64,
    pub l2_hits: u64,
    pub walks: u64,
    /// Page-table entries read by all walks (guest and host).
    pub walk_refs: u64,
    /// Of `walk_refs`, entries read per level of the (guest) tables, 0 = PML4 .. 3 = PTE.
    pub guest_refs: [u64; 4],
    /// Of `walk_refs`, host-table entries read by nested walks, per host level.
    pub host_refs: [u64; 4],
    /// Entries invalidated by flushes.
    pub flushed: u64,
}

impl TlbStats {
    pub fn l1_misses(&self) -> u64 {
        self.accesses - self.l1_hits
    }
    pub fn l2_misses(&self) -> u64 {
        self.walks
    }
    pub fn add(&mut self, o: &TlbStats) {
        self.accesses += o.accesses;
        self.l1_hits += o.l1_hits;
        self.l2_hits += o.l2_hits;
        self.walks += o.walks;
        self.walk_refs += o.walk_refs;
        for i in 0..4 {
            self.guest_refs[i] += o.guest_refs[i];
            self.host_refs[i] += o.host_refs[i];
        }
        self.flushed += o.flushed;
    }
}

/// Entry shifts a structure may hold: 4K, 16K, 32K, 64K, 1M, 2M, 16M, 32M, 512M, 1G.
pub const SHIFTS: [u8; 10] = [12, 14, 15, 16, 20, 21, 24, 25, 29, 30];

/// Tag of an entry: the virtual page number at its size, with the size in the low bits and the
/// top bit set so that no tag is zero.
#[inline]
pub(crate) fn tag(vaddr: u64, shift: u8) -> u64 {
    (1 << 63) | ((vaddr >> shift) << 6) | shift as u64
}

/// The range of virtual addresses a tag covers.
pub(crate) fn tag_range(t: u64) -> (u64, u64) {
    let shift = (t & 63) as u8;
    let vpn = (t & !(1 << 63)) >> 6;
    (vpn << shift, (vpn << shift) + (1u64 << shift))
}

/// One level of TLB (L1 or L2): its arrays and, per natural entry shift, where that entry goes.
#[derive(Clone, Debug)]
struct Level {
    arrays: Vec<assoc::Array>,
    /// Per natural entry shift (an element of `SHIFTS`, so below 32): (array, stored shift), or
    /// `None` if no array can hold it.
    route: [Option<(u8, u8)>; 32],
    /// Coalescing of 4 KiB PTEs: the shift of a coalesced entry (15 for AMD's 8 × 4 KiB).
    coalesce: Option<u8>,
}

impl Level {
    fn new(specs: &[StructureSpec], coalesce: Option<u8>) -> Self {
        let mut route = [None; 32];
        for &natural in SHIFTS.iter() {
            // The array holding this size; else the one holding the largest smaller size.
            let mut best: Option<(u8, u8)> = None;
            for (a, spec) in specs.iter().enumerate() {
                for &s in spec.sizes {
                    if s <= natural && best.is_none_or(|(_, b)| s > b) {
                        best = Some((a as u8, s));
                    }
                }
            }
            route[natural as usize] = best;
        }
        Level { arrays: specs.iter().map(|s| assoc::Array::new(s.geometry)).collect(), route, coalesce }
    }
    /// The (array, stored shift) for an entry of natural shift `natural` and contiguity `contig_order`.
    #[inline]
    fn place(&self, natural: u8, contig_order: u8) -> Option<(usize, u8)> {
        let mut n = natural;
        if let Some(c) = self.coalesce {
            if natural == 12 && contig_order >= c - 12 {
                n = c;
            }
        }
        debug_assert!(SHIFTS.contains(&n));
        self.route[n as usize & 31].map(|(a, s)| (a as usize, s))
    }
}

/// A data TLB of one CPU preset, with its walker.
#[derive(Clone, Debug)]
pub struct Tlb {
    preset: &'static CpuPreset,
    paging: Paging,
    l1: Level,
    l2: Level,
    walker: walk::Walker,
    stats: TlbStats,
    /// Where a translation goes, precomputed per (leaf size, cont bit, contig_order up to 15):
    /// see `Tlb::routes`.
    routes: Box<[Route; 3 * 2 * 16]>,
    /// Under nested paging with a modelled host ([`Tlb::access_on_host`]): the routes per host
    /// page size of the data page (4K, 2M, 1G), made at the first such access.
    host_routes: Option<Box<[[Route; 3 * 2 * 16]; 3]>>,
}

/// The arrays of L1 and L2 (index, or `NONE`) a translation goes to and the shifts of its entries there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Route {
    l1: u8,
    s1: u8,
    l2: u8,
    s2: u8,
}

impl Route {
    const NONE: u8 = u8::MAX;
}

impl Tlb {
    pub fn new(preset: &'static CpuPreset, paging: Paging) -> Self {
        let mut tlb = Tlb {
            preset,
            paging,
            l1: Level::new(preset.l1, preset.l1_coalesce),
            l2: Level::new(preset.l2, preset.l2_coalesce),
            walker: walk::Walker::new(preset, paging),
            stats: TlbStats::default(),
            routes: Box::new([Route { l1: Route::NONE, s1: 0, l2: Route::NONE, s2: 0 }; 3 * 2 * 16]),
            host_routes: None,
        };
        let mut routes = [Route { l1: Route::NONE, s1: 0, l2: Route::NONE, s2: 0 }; 3 * 2 * 16];
        for (si, size) in [PageSize::K4, PageSize::M2, PageSize::G1].into_iter().enumerate() {
            for cont in [false, true] {
                for contig_order in 0..16u8 {
                    let t = Translation { vaddr: 0, pfn: 0, size, contig_order, cont };
                    routes[Self::route_index(&t)] = tlb.route(&t);
                    debug_assert_eq!(Self::route_index(&t), si * 32 + cont as usize * 16 + contig_order as usize);
                }
            }
        }
        tlb.routes = Box::new(routes);
        tlb
    }
    /// The index in `routes` of `t`'s route. A contig_order above 15 routes as 15: the
    /// coalescing thresholds (`Level::place`) are at most 9.
    #[inline(always)]
    fn route_index(t: &Translation) -> usize {
        let size = match t.size {
            PageSize::K4 => 0,
            PageSize::M2 => 1,
            PageSize::G1 => 2,
        };
        size * 32 + (t.cont as usize) * 16 + t.contig_order.min(15) as usize
    }
    /// The route of `t`, from the levels' placement rules.
    fn route(&self, t: &Translation) -> Route {
        let natural = self.natural_shift(t);
        // Coalescing needs host-physical contiguity, which a nested guest cannot see: off there.
        let contig = if matches!(self.paging, Paging::Nested { .. }) { 0 } else { t.contig_order };
        let (l1, s1) = self.l1.place(natural, contig).map_or((Route::NONE, 0), |(a, s)| (a as u8, s));
        let (l2, s2) = self.l2.place(natural, contig).map_or((Route::NONE, 0), |(a, s)| (a as u8, s));
        Route { l1, s1, l2, s2 }
    }
    pub fn preset(&self) -> &'static CpuPreset {
        self.preset
    }
    pub fn paging(&self) -> Paging {
        self.paging
    }
    pub fn stats(&self) -> &TlbStats {
        &self.stats
    }
    pub fn reset_stats(&mut self) {
        self.stats = TlbStats::default();
    }

    /// The entry shift of `t` before any array's limits: leaf size, contiguous bit, nested min.
    #[inline]
    fn natural_shift(&self, t: &Translation) -> u8 {
        let mut s = t.size.shift();
        if t.cont && self.preset.isa == Isa::Arm64 {
            s = match t.size {
                PageSize::K4 => 16,
                PageSize::M2 => 25,
                PageSize::G1 => 30,
            };
        }
        if let Paging::Nested { host } = self.paging {
            s = s.min(host.shift());
        }
        s
    }

    /// Translates one access.
    #[inline(always)]
    pub fn access(&mut self, t: &Translation) -> Outcome {
        let r = self.routes[Self::route_index(t)];
        self.access_routed(t, r)
    }

    #[inline(always)]
    fn access_routed(&mut self, t: &Translation, r: Route) -> Outcome {
        self.stats.accesses += 1;
        // L1, L2 and the walk caches are distinct arrays: looking one up and filling it on a
        // miss at once (`lookup_or_fill`) leaves each in the state of a lookup, then a fill after
        // the walk.
        if r.l1 != Route::NONE && self.l1.arrays[r.l1 as usize].lookup_or_fill(t.vaddr >> r.s1, tag(t.vaddr, r.s1)) {
            self.stats.l1_hits += 1;
            return Outcome::L1Hit;
        }
        if r.l2 != Route::NONE && self.l2.arrays[r.l2 as usize].lookup_or_fill(t.vaddr >> r.s2, tag(t.vaddr, r.s2)) {
            self.stats.l2_hits += 1;
            return Outcome::L2Hit;
        }
        self.l2_miss(t)
    }

    /// `n` accesses of one translation in a row (a recorded run of accesses to one page): what
    /// `n` calls of [`Tlb::access`] do, with the accesses after the first L1 hit counted at once:
    /// a hit on the entry the last access used changes no state (it is already the most recently
    /// used of its set, under LRU and tree PLRU alike).
    pub fn access_n(&mut self, t: &Translation, n: u64) {
        let mut left = n;
        while left > 0 {
            left -= 1;
            if self.access(t) == Outcome::L1Hit {
                self.stats.accesses += left;
                self.stats.l1_hits += left;
                return;
            }
        }
    }

    /// The walk after an L2 miss, out of line: `access` itself is then small enough to inline
    /// into the caller's loop, where the registers it uses are saved once rather than on every
    /// access.
    #[inline(never)]
    fn l2_miss(&mut self, t: &Translation) -> Outcome {
        let refs = self.walker.walk(t, &mut self.stats);
        self.stats.walks += 1;
        self.stats.walk_refs += refs as u64;
        Outcome::Walk { refs }
    }

    /// One access under nested paging whose data page the host maps with a page of `host`
    /// (a modelled host, `sim::host`): its TLB entry is min(guest, host) and the walk's last
    /// host walk (of the data's guest-physical address) ends at `host`'s leaf; the host walks
    /// of the guest's own tables keep the paging's host size. Native paging ignores `host`.
    pub fn access_on_host(&mut self, t: &Translation, host: PageSize) -> Outcome {
        let Paging::Nested { host: tables } = self.paging else { return self.access(t) };
        if host == tables {
            return self.access(t);
        }
        let preset = self.preset;
        let routes = self.host_routes.get_or_insert_with(|| {
            let mk = |h| *Tlb::new(preset, Paging::Nested { host: h }).routes;
            Box::new([mk(PageSize::K4), mk(PageSize::M2), mk(PageSize::G1)])
        });
        let hi = match host {
            PageSize::K4 => 0,
            PageSize::M2 => 1,
            PageSize::G1 => 2,
        };
        let r = routes[hi][Self::route_index(t)];
        self.walker.set_data_host(Some(host.leaf_level()));
        let o = self.access_routed(t, r);
        self.walker.set_data_host(None);
        o
    }

    /// Invalidates every TLB and walk-cache entry that overlaps `[start, start+len)` (a
    /// flush_tlb_range after the page tables changed).
    pub fn flush_range(&mut self, start: u64, len: u64) {
        let end = start.saturating_add(len);
        let overlaps = |t: u64| {
            let (a, b) = tag_range(t);
            a < end && start < b
        };
        let mut n = 0;
        for lvl in [&mut self.l1, &mut self.l2] {
            for a in lvl.arrays.iter_mut() {
                n += a.invalidate_if(overlaps);
            }
        }
        n += self.walker.flush_range(start, end);
        self.stats.flushed += n;
    }

    /// Invalidates everything (flush_tlb_mm).
    pub fn flush_all(&mut self) {
        self.flush_range(0, u64::MAX);
    }
}

#[cfg(test)]
mod tests;
