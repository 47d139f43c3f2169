//! DAMON's virtual address monitoring as a hint source: MODEL-ONLY (this machine's kernel has
//! no DAMON context running, and DAMOS_COLLAPSE is not in 6.18).
//!
//! Kernel sources (6.18): mm/damon/core.c (`kdamond_fn`: prepare, sleep one sample interval,
//! check, merge and apply schemes at an aggregation, `kdamond_reset_aggregated`,
//! `kdamond_split_regions`; `damon_merge_regions_of`, `damon_merge_two_regions`,
//! `damon_split_regions_of`, `damon_region_sz_limit`, `damon_new_ctx`'s defaults: sample 5 ms,
//! aggregation 100 ms, 10 to 1000 regions), mm/damon/vaddr.c (`__damon_va_three_regions`,
//! `__damon_va_init_regions`, `damon_va_prepare_access_checks`, `damon_va_mkold`,
//! `damon_va_young`, `damon_va_check_accesses`). DAMOS_COLLAPSE: "[RFC PATCH v2 1/1] mm/damon:
//! support MADV_COLLAPSE via DAMOS_COLLAPSE scheme action" (Asier Gutierrez, 2026-03-16).
//!
//! What is modelled: one target per live mm; its regions start as the three regions its VMAs
//! make around the two largest gaps, cut evenly to at least `min_nr_regions`; each sample
//! picks a random address per region, clears its accessed bit (PTE or PMD) and, one sample
//! interval later, counts the region accessed if the bit is set again; at each aggregation
//! adjacent regions within `max_nr_accesses / 10` merge (size-weighted, up to total size /
//! `min_nr_regions`), ages move, the scheme is applied, the counts reset, and regions split in
//! two (three when their number did not change) at a random 10–90 %. The scheme: regions of
//! at least 2 MiB with `nr_accesses >= min_nr_accesses` and `age >= min_age` are hot; as a
//! hint source it hands their whole PMD ranges to the policy (DAMOS_COLLAPSE itself would call
//! MADV_COLLAPSE from kdamond; the collapse-hint policy queues them for khugepaged instead).
//! Left out: `ops_update_interval` (regions are taken from the VMAs once, at the first
//! sample), `nr_accesses_bp`, interval auto-tuning, quotas and watermarks, the same-folio
//! reuse of a check.

use mm_types::prng::Prng;
use mm_types::Vaddr;

use crate::pgtable::{Pmd, PTE_YOUNG};
use crate::{Kernel, MmId};

const PAGE: u64 = 4096;
const PMD_SIZE: u64 = 2 << 20;

/// `struct damon_attrs` (defaults of `damon_new_ctx`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DamonAttrs {
    pub sample_ns: u64,
    pub aggr_ns: u64,
    pub min_nr_regions: usize,
    pub max_nr_regions: usize,
}

impl Default for DamonAttrs {
    fn default() -> Self {
        DamonAttrs { sample_ns: 5_000_000, aggr_ns: 100_000_000, min_nr_regions: 10, max_nr_regions: 1000 }
    }
}

/// The access pattern of the DAMOS_COLLAPSE-shaped scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DamosCollapse {
    pub min_nr_accesses: u32,
    pub min_age: u32,
}

impl Default for DamosCollapse {
    /// Half the samples of an aggregation (10 of 20), for 2 aggregations.
    fn default() -> Self {
        DamosCollapse { min_nr_accesses: 10, min_age: 2 }
    }
}

/// `struct damon_region`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DamonRegion {
    pub start: u64,
    pub end: u64,
    pub sampling_addr: u64,
    pub nr_accesses: u32,
    pub last_nr_accesses: u32,
    pub age: u32,
}

impl DamonRegion {
    fn new(start: u64, end: u64) -> DamonRegion {
        DamonRegion { start, end, sampling_addr: start, nr_accesses: 0, last_nr_accesses: 0, age: 0 }
    }
    fn size(&self) -> u64 {
        self.end - self.start
    }
}

/// The model's CPU cost of one region's sample (walk to the PTE, test and clear its bit; an
/// estimate, not measured) and of one region at an aggregation.
pub const SAMPLE_NS_PER_REGION: u64 = 150;
pub const AGGR_NS_PER_REGION: u64 = 50;

/// A DAMON context over the machine's mms (`struct damon_ctx`, vaddr operations).
#[derive(Clone, Debug)]
pub struct Damon {
    pub attrs: DamonAttrs,
    pub scheme: DamosCollapse,
    /// (mm, regions) per target.
    pub targets: Vec<(u32, Vec<DamonRegion>)>,
    rng: Prng,
    last_nr_regions: usize,
    samples: u64,
    prepared: bool,
    /// The modelled CPU time of kdamond so far.
    pub cpu_ns: u64,
}

impl Damon {
    pub fn new(attrs: DamonAttrs, scheme: DamosCollapse, seed: u64) -> Damon {
        Damon { attrs, scheme, targets: Vec::new(), rng: Prng::new(seed), last_nr_regions: 0, samples: 0, prepared: false, cpu_ns: 0 }
    }

    /// Samples per aggregation (`aggr_samples`).
    pub fn aggr_samples(&self) -> u64 {
        (self.attrs.aggr_ns / self.attrs.sample_ns.max(1)).max(1)
    }

    fn nr_regions(&self) -> usize {
        self.targets.iter().map(|t| t.1.len()).sum()
    }

    /// `damon_merge_regions_of` with `thres` and `sz_limit` (ages move first).
    pub fn merge_regions(regions: &mut Vec<DamonRegion>, thres: u32, sz_limit: u64) {
        let mut out: Vec<DamonRegion> = Vec::with_capacity(regions.len());
        for mut r in regions.drain(..) {
            if r.nr_accesses.abs_diff(r.last_nr_accesses) > thres || (r.nr_accesses == 0) != (r.last_nr_accesses == 0) {
                r.age = 0;
            } else {
                r.age += 1;
            }
            match out.last_mut() {
                Some(l) if l.end == r.start && l.nr_accesses.abs_diff(r.nr_accesses) <= thres && l.size() + r.size() <= sz_limit => {
                    let (sl, sr) = (l.size(), r.size());
                    l.nr_accesses = ((l.nr_accesses as u64 * sl + r.nr_accesses as u64 * sr) / (sl + sr)) as u32;
                    l.age = ((l.age as u64 * sl + r.age as u64 * sr) / (sl + sr)) as u32;
                    l.end = r.end;
                }
                _ => out.push(r),
            }
        }
        *regions = out;
    }

    /// `damon_split_regions_of`: each region cut `nr_subs - 1` times at a random 10–90 % of
    /// what is left of it (page-aligned; not below two pages).
    fn split_regions(regions: &mut Vec<DamonRegion>, nr_subs: usize, rng: &mut Prng) {
        let mut out = Vec::with_capacity(regions.len() * nr_subs);
        for r in regions.drain(..) {
            let mut left = r;
            let mut tail = Vec::new();
            for _ in 0..nr_subs - 1 {
                if left.size() <= 2 * PAGE {
                    break;
                }
                let sub = (rng.range_inclusive(1, 9) * left.size() / 10) & !(PAGE - 1);
                if sub == 0 || sub >= left.size() {
                    continue;
                }
                tail.push(DamonRegion { start: left.start + sub, ..left });
                left.end = left.start + sub;
            }
            out.push(left);
            out.extend(tail.into_iter().rev());
        }
        *regions = out;
    }
}

/// `__damon_va_three_regions` and `__damon_va_init_regions`: the VMAs' span cut at the two
/// largest gaps between them, each part cut evenly so that the whole is at least
/// `min_nr_regions` regions (page-aligned).
pub fn init_regions(vmas: &[(u64, u64)], min_nr_regions: usize) -> Vec<DamonRegion> {
    let Some(first) = vmas.first() else { return Vec::new() };
    let mut gaps: Vec<(u64, u64, u64)> = vmas.windows(2).filter(|w| w[1].0 > w[0].1).map(|w| (w[1].0 - w[0].1, w[0].1, w[1].0)).collect();
    gaps.sort_by_key(|g| (std::cmp::Reverse(g.0), g.1));
    gaps.truncate(2);
    gaps.sort_by_key(|g| g.1);
    let mut parts = Vec::new();
    let mut start = first.0;
    for &(_, gs, ge) in &gaps {
        parts.push((start, gs));
        start = ge;
    }
    parts.push((start, vmas.last().unwrap().1));
    let total: u64 = parts.iter().map(|p| p.1 - p.0).sum();
    let sz = ((total / min_nr_regions.max(1) as u64) & !(PAGE - 1)).max(PAGE);
    let mut regions = Vec::new();
    for (s, e) in parts {
        let mut a = s;
        while a < e {
            let b = if e - a < 2 * sz { e } else { a + sz };
            regions.push(DamonRegion::new(a, b));
            a = b;
        }
    }
    regions
}

impl Kernel {
    /// `damon_va_mkold` (`clear`) or `damon_va_young` of `addr` in the current mm: the PTE's or
    /// the PMD's accessed bit.
    fn damon_va_young(&mut self, addr: u64, clear: bool) -> bool {
        let va = Vaddr(addr);
        let Some(t) = self.mm.pt.pmd_table_ro(va) else { return false };
        match self.mm.pt.pmd(t, va) {
            Pmd::Table(idx) => {
                let e = self.mm.pt.pte(idx, va.pte_index());
                if clear && e & PTE_YOUNG != 0 {
                    self.mm.pt.set_pte(idx, va.pte_index(), e & !PTE_YOUNG);
                }
                e & PTE_YOUNG != 0
            }
            Pmd::Huge { pfn, young, dirty, write } => {
                if clear && young {
                    self.mm.pt.set_pmd(t, va.align_down(mm_types::Order::PMD), Pmd::Huge { pfn, young: false, dirty, write });
                }
                young
            }
            _ => false,
        }
    }

    /// Whether the PMD range at `addr` of the current mm is mapped by a PMD.
    pub(crate) fn pmd_mapped_at(&self, addr: u64) -> bool {
        let va = Vaddr(addr);
        self.mm.pt.pmd_table_ro(va).is_some_and(|t| matches!(self.mm.pt.pmd(t, va), Pmd::Huge { .. }))
    }

    /// One sample interval of kdamond: check the accesses prepared at the last sample, then (at
    /// an aggregation) merge, apply the scheme, reset and split; then prepare the next sample.
    /// Returns the scheme's findings at an aggregation (`None` between them).
    pub fn damon_sample(&mut self, d: &mut Damon) -> Option<Vec<policy::HotRange>> {
        if d.targets.is_empty() {
            self.damon_init_targets(d);
        }
        let prev = self.mm.id;
        if d.prepared {
            for (mm, regions) in d.targets.iter_mut() {
                self.switch_mm(MmId(*mm));
                for r in regions.iter_mut() {
                    r.nr_accesses += self.damon_va_young(r.sampling_addr, false) as u32;
                }
            }
            d.samples += 1;
        }
        let found = (d.prepared && d.samples % d.aggr_samples() == 0).then(|| self.damon_aggregate(d));
        for (mm, regions) in d.targets.iter_mut() {
            self.switch_mm(MmId(*mm));
            for r in regions.iter_mut() {
                r.sampling_addr = d.rng.range_inclusive(r.start / PAGE, r.end / PAGE - 1) * PAGE;
                self.damon_va_young(r.sampling_addr, true);
            }
        }
        self.switch_mm(prev);
        d.prepared = true;
        d.cpu_ns += SAMPLE_NS_PER_REGION * d.nr_regions() as u64;
        found
    }

    fn damon_init_targets(&mut self, d: &mut Damon) {
        for id in self.mm_ids().collect::<Vec<_>>() {
            if self.mm_exited(id) {
                continue;
            }
            let vmas: Vec<(u64, u64)> = self.mm_ref(id).vmas.iter().map(|v| (v.start, v.end)).collect();
            d.targets.push((id.0, init_regions(&vmas, d.attrs.min_nr_regions)));
        }
    }

    /// The aggregation: `kdamond_merge_regions`, the scheme, `kdamond_reset_aggregated`,
    /// `kdamond_split_regions`.
    fn damon_aggregate(&mut self, d: &mut Damon) -> Vec<policy::HotRange> {
        let max_nr = d.targets.iter().flat_map(|t| t.1.iter()).map(|r| r.nr_accesses).max().unwrap_or(0);
        let total: u64 = d.targets.iter().flat_map(|t| t.1.iter()).map(|r| r.size()).sum();
        let sz_limit = (total / d.attrs.min_nr_regions.max(1) as u64).max(PAGE);
        let mut thres = max_nr / 10;
        loop {
            for t in d.targets.iter_mut() {
                Damon::merge_regions(&mut t.1, thres, sz_limit);
            }
            if d.nr_regions() <= d.attrs.max_nr_regions || thres >= max_nr {
                break;
            }
            thres = (thres * 2).max(1);
        }
        let found = self.damos_collapse_ranges(d);
        for r in d.targets.iter_mut().flat_map(|t| t.1.iter_mut()) {
            r.last_nr_accesses = r.nr_accesses;
            r.nr_accesses = 0;
        }
        let n = d.nr_regions();
        if n <= d.attrs.max_nr_regions / 2 {
            let subs = if d.last_nr_regions == n && n < d.attrs.max_nr_regions / 3 { 3 } else { 2 };
            for t in d.targets.iter_mut() {
                Damon::split_regions(&mut t.1, subs, &mut d.rng);
            }
            d.last_nr_regions = n;
        }
        d.cpu_ns += AGGR_NS_PER_REGION * n as u64;
        found
    }

    /// The scheme's regions as PMD ranges: every whole PMD range of a region of 2 MiB or more,
    /// hot when the region has `min_nr_accesses` and `min_age`, with its accesses scaled to
    /// 512 as its young count; PMD-mapped ranges of regions with no access are reported cold
    /// (for a policy that splits).
    fn damos_collapse_ranges(&mut self, d: &Damon) -> Vec<policy::HotRange> {
        let samples = d.aggr_samples() as u32;
        let prev = self.mm.id;
        let mut out = Vec::new();
        for (mm, regions) in &d.targets {
            self.switch_mm(MmId(*mm));
            for r in regions.iter().filter(|r| r.size() >= PMD_SIZE) {
                let hot = r.nr_accesses >= d.scheme.min_nr_accesses && r.age >= d.scheme.min_age;
                let young = (r.nr_accesses.min(samples) * 512) / samples.max(1);
                let mut a = r.start.div_ceil(PMD_SIZE) * PMD_SIZE;
                while a + PMD_SIZE <= r.end {
                    let pmd_mapped = self.pmd_mapped_at(a);
                    if hot || (pmd_mapped && r.nr_accesses == 0) {
                        out.push(policy::HotRange { range: policy::Range { mm: *mm, addr: a }, young, total: 512, pmd_mapped, hot });
                    }
                    a += PMD_SIZE;
                }
            }
        }
        self.switch_mm(prev);
        out
    }
}

#[cfg(test)]
#[path = "damon_tests.rs"]
mod tests;
