//! `access` statements through the TLB model: each access runs on the simulated kernel
//! (`Kernel::access`: a fault the first time, young and dirty bits always), its translation is
//! read back (`Kernel::translation`) and looked up in the `tlb` crate's model of the `--cpu`
//! preset under `--paging`; every TLB flush the kernel logged since the last lookup is applied
//! first, so the model never hits on a translation the kernel changed.
//!
//! The time estimate is `tlb::cost::estimate` per region, with the footprint of the largest
//! range accessed in the region; it is for dependent accesses (a chase) and ignores overlap.

use mm::Access;
use tlb::{CpuPreset, HostLines, PageSize, Paging, Tlb, TlbStats, Translation};
use uapi::{AccessCounts, AccessReport};
use workload::{AccessPlan, AccessStream, Workload};

use crate::{Sim, SimError};

pub(crate) struct TlbRun {
    /// One TLB per CPU: a workload's threads each run on a CPU of their own, made at the
    /// task's first access statement (`tasks[i]` runs on `tlbs[i]`); main, and a recording's
    /// first process, on `tlbs[0]`.
    tlbs: Vec<Tlb>,
    tasks: Vec<usize>,
    /// The CPU of the accesses being run.
    cpu: usize,
    /// Per region: counts, writes, footprint, and under nested paging the host entry lines of
    /// the largest range accessed.
    regions: Vec<(TlbStats, u64, u64, Option<HostLines>)>,
    /// `--order0-scatter`: how scattered base pages' frames are, 0 (as the model allocates
    /// them) to 1 (each in a host PTE line of its own).
    order0_scatter: f64,
    /// With a profile: the ns of the accesses so far that the clock already holds (the
    /// estimate of the whole stream so far, rounded, as of the last [`Sim::charge_accesses`]).
    on_clock_ns: u64,
    /// `--host` / `--policy fhpm`: the modelled host of the VM the guest runs in (`crate::host`).
    pub(crate) host: Option<crate::host::Host>,
}

/// Accesses between two moves of the clock within an `access` statement (with a profile): the
/// clock, the samples and khugepaged's wake-ups advance this often inside a long statement.
const ACCESSES_PER_CHARGE: u64 = 16_384;

impl TlbRun {
    pub(crate) fn new(cpu: &'static CpuPreset, paging: Paging, regions: usize, order0_scatter: f64) -> Self {
        TlbRun { tlbs: vec![Tlb::new(cpu, paging)], tasks: vec![0], cpu: 0, regions: vec![(TlbStats::default(), 0, 0, None); regions], order0_scatter, on_clock_ns: 0, host: None }
    }

    /// The TLB of the CPU the accesses run on.
    fn tlb(&mut self) -> &mut Tlb {
        &mut self.tlbs[self.cpu]
    }

    /// Run the accesses that follow on the CPU of task `task` (a fresh TLB the first time).
    fn run_on(&mut self, task: usize) {
        self.cpu = match self.tasks.iter().position(|&t| t == task) {
            Some(i) => i,
            None => {
                let fresh = Tlb::new(self.tlbs[0].preset(), self.tlbs[0].paging());
                self.tlbs.push(fresh);
                self.tasks.push(task);
                self.tlbs.len() - 1
            }
        };
    }

    /// A flush_tlb_range reaches every CPU (the shootdown of a shared mm).
    fn flush_range(&mut self, start: u64, len: u64) {
        for t in &mut self.tlbs {
            t.flush_range(start, len);
        }
    }

    fn counts(&self, name: &str, s: &TlbStats, writes: u64, footprint: u64, host: Option<HostLines>) -> AccessCounts {
        let p = self.tlbs[0].preset();
        let e = tlb::cost::estimate(p, s, tlb::Footprint { bytes: footprint }, host);
        AccessCounts {
            region: name.to_string(),
            accesses: s.accesses,
            writes,
            l1_hits: s.l1_hits,
            l1_misses: s.l1_misses(),
            l2_hits: s.l2_hits,
            l2_misses: s.l2_misses(),
            walks: s.walks,
            walk_refs: s.walk_refs,
            guest_refs: s.guest_refs,
            host_refs: s.host_refs,
            tlb_flushed_entries: s.flushed,
            data_cycles: e.data_cycles,
            translation_cycles: e.translation_cycles,
            cycles: e.cycles,
            ns: e.ns,
            ns_per_access: if s.accesses > 0 { e.ns / s.accesses as f64 } else { 0.0 },
        }
    }

    /// The estimate of every access so far, in ns: the sum of [`TlbRun::report_named`]'s
    /// regions, in the same order (so equal to its `total.ns` at the end).
    pub(crate) fn estimate_ns(&self) -> f64 {
        let p = self.tlbs[0].preset();
        self.regions.iter().filter(|r| r.0.accesses > 0).map(|(s, _, fp, host)| tlb::cost::estimate(p, s, tlb::Footprint { bytes: *fp }, *host).ns).sum()
    }

    /// The ns the clock holds of the accesses (see `on_clock_ns`).
    pub(crate) fn on_clock_ns(&self) -> u64 {
        self.on_clock_ns
    }

    pub(crate) fn report(&self, w: &Workload) -> AccessReport {
        let names: Vec<String> = w.regions.iter().map(|r| r.name.clone()).collect();
        self.report_named(&names)
    }

    /// The report, region `i` named `names[i]`.
    pub(crate) fn report_named(&self, names: &[String]) -> AccessReport {
        let p = self.tlbs[0].preset();
        let mut regions = Vec::new();
        let mut total = AccessCounts { region: "total".into(), ..Default::default() };
        let mut all = TlbStats::default();
        for (i, (s, writes, fp, host)) in self.regions.iter().enumerate() {
            if s.accesses == 0 {
                continue;
            }
            let c = self.counts(&names[i], s, *writes, *fp, *host);
            all.add(s);
            total.writes += c.writes;
            total.data_cycles += c.data_cycles;
            total.translation_cycles += c.translation_cycles;
            total.cycles += c.cycles;
            total.ns += c.ns;
            regions.push(c);
        }
        let flushed = self.tlbs.iter().map(|t| t.stats().flushed).sum();
        let t = self.counts("total", &all, total.writes, 0, None);
        total = AccessCounts {
            data_cycles: total.data_cycles,
            translation_cycles: total.translation_cycles,
            cycles: total.cycles,
            ns: total.ns,
            ns_per_access: if all.accesses > 0 { total.ns / all.accesses as f64 } else { 0.0 },
            tlb_flushed_entries: flushed,
            ..t
        };
        AccessReport {
            cpu: p.name.into(),
            paging: self.tlbs[0].paging().name().into(),
            ghz: p.ghz,
            cpus: self.tlbs.iter().filter(|t| t.stats().accesses > 0).count() as u64,
            regions,
            total,
            recorded: None,
        }
    }
}

/// The host page-table entry lines (8 entries of 8 bytes a line) that the frames mapped in
/// `[base, base + len)` use, per host level: a level-l entry maps 2^(39 - 9l) bytes of
/// guest-physical memory, so a line covers frames `pfn >> (30 - 9l)`. Base pages (order-0
/// folios) use the lines of their frames as the model allocated them, moved towards one line
/// each by `scatter` (the model hands out consecutive frames, as a freshly booted machine
/// does; a machine whose free lists have churned for hours hands out scattered ones, and so
/// its base pages' host entries miss the caches: docs/tlb-model.md).
pub(crate) fn host_lines(k: &mm::Kernel, base: u64, len: u64, scatter: f64) -> HostLines {
    let mut sets: [std::collections::HashSet<u64>; 4] = Default::default();
    let mut base_pages = std::collections::HashSet::new();
    let mut n0 = 0u64;
    let mut addr = base & !0xfff;
    while addr < base + len {
        if let Some(t) = k.translation(addr) {
            let pfn = t.pfn as u64;
            for (l, set) in sets.iter_mut().enumerate().take(3) {
                set.insert(pfn >> (30 - 9 * l));
            }
            if t.folio_order == 0 && !t.pmd {
                n0 += 1;
                base_pages.insert(pfn >> 3);
            } else {
                sets[3].insert(pfn >> 3);
            }
        }
        addr += 4096;
    }
    let mut lines: [u64; 4] = std::array::from_fn(|l| sets[l].len() as u64);
    let d0 = base_pages.len() as u64;
    lines[3] += d0 + (scatter * n0.saturating_sub(d0) as f64).round() as u64;
    HostLines(lines)
}

impl TlbRun {
    /// Add what the TLB did since `before` to region `ri`, with `writes` stores and the
    /// region's footprint so far.
    fn add_since(&mut self, ri: usize, before: TlbStats, writes: u64, footprint: u64) {
        let after = *self.tlb().stats();
        let delta = TlbStats {
            accesses: after.accesses - before.accesses,
            l1_hits: after.l1_hits - before.l1_hits,
            l2_hits: after.l2_hits - before.l2_hits,
            walks: after.walks - before.walks,
            walk_refs: after.walk_refs - before.walk_refs,
            guest_refs: std::array::from_fn(|i| after.guest_refs[i] - before.guest_refs[i]),
            host_refs: std::array::from_fn(|i| after.host_refs[i] - before.host_refs[i]),
            flushed: after.flushed - before.flushed,
        };
        let r = &mut self.regions[ri];
        r.0.add(&delta);
        r.1 += writes;
        r.2 = r.2.max(footprint);
    }

    /// `n` lookups of one translation in a row (a recorded run of accesses to one page),
    /// counted in region `ri`.
    pub(crate) fn lookup(&mut self, ri: usize, tr: &Translation, n: u64, writes: u64, footprint: u64) {
        let before = *self.tlb().stats();
        self.tlb().access_n(tr, n);
        self.add_since(ri, before, writes, footprint);
    }
}

/// Apply to the TLB model every flush the kernel logged since the last call.
pub(crate) fn apply_flushes(m: &mut crate::driver::Machine, run: &mut TlbRun) {
    if m.tlb_flush_pending() {
        for (s, e) in m.kernel_mut().take_tlb_flushes() {
            run.flush_range(s, e - s);
        }
    }
}

/// A page the model does not back (a file mapping, the vDSO: a placeholder VMA) as a 4 KiB
/// translation of its own: a frame number outside the model's memory, no contiguity.
pub(crate) fn placeholder_translation(addr: u64) -> Translation {
    Translation { vaddr: addr, pfn: (1 << 40) | addr >> 12, size: PageSize::K4, contig_order: 0, cont: false }
}

/// The model's translation as the TLB model's input.
pub(crate) fn tlb_translation(addr: u64, t: &mm::tlbflush::Translation) -> Translation {
    Translation {
        vaddr: addr,
        pfn: t.pfn as u64,
        size: if t.pmd { PageSize::M2 } else { PageSize::K4 },
        contig_order: t.contig_order,
        cont: t.contpte,
    }
}

impl Sim<'_> {
    fn apply_flushes(&mut self) {
        if let Some(run) = self.tlb.as_mut() {
            apply_flushes(&mut self.m, run);
        }
    }

    /// Run `a`, an `access` statement of task `task` (main or a thread: each on its own CPU).
    pub(crate) fn access_stream(&mut self, line: usize, a: &AccessStream, task: usize) -> Result<(), SimError> {
        let (start, len) = self.region(line, a.range.region)?;
        let rlen = a.range.len_in(len);
        if a.range.offset + rlen > len || rlen == 0 {
            let name = &self.w.region(a.range.region).name;
            return Err(self.err(line, format!("access range runs past the end of region '{name}' ({len} bytes now) or is empty")));
        }
        let base = start + a.range.offset;
        let ri = a.range.region.0 as usize;
        let run = self.tlb.as_mut().expect("TLB model set up for access statements");
        run.run_on(task);
        let mut before = *run.tlb().stats();
        let (mut writes, mut n) = (0, 0u64);
        for (off, write) in AccessPlan::new(a, rlen) {
            if n > 0 && n % ACCESSES_PER_CHARGE == 0 && self.m.priced() {
                let run = self.tlb.as_mut().unwrap();
                run.add_since(ri, before, writes, rlen);
                (before, writes) = (*run.tlb().stats(), 0);
                self.charge_accesses();
            }
            n += 1;
            let addr = base + off;
            self.apply_flushes();
            let outcome = self.step(crate::driver::Step::TlbAccess { addr, write }).access();
            if !matches!(outcome, Access::Hit | Access::Fault) {
                return Err(self.access_error(line, addr, write, outcome));
            }
            self.apply_flushes();
            writes += write as u64;
            if let Some(t) = self.m.translation(addr) {
                let tr = tlb_translation(addr, &t);
                let run = self.tlb.as_mut().unwrap();
                match run.host.as_mut().map(|h| h.touch(tr.pfn, write)) {
                    Some(size) => {
                        run.tlb().access_on_host(&tr, size);
                        if n % ACCESSES_PER_CHARGE == 0 {
                            self.tick_host();
                        }
                    }
                    None => {
                        run.tlb().access(&tr);
                    }
                }
            }
        }
        let run = self.tlb.as_mut().unwrap();
        if rlen >= run.regions[ri].2 && matches!(run.tlbs[0].paging(), Paging::Nested { .. }) {
            run.regions[ri].3 = Some(host_lines(&self.m, base, rlen, run.order0_scatter));
        }
        run.add_since(ri, before, writes, rlen);
        self.charge_accesses();
        self.tick_host();
        Ok(())
    }

    /// The modelled host's daemons up to now, and its time on the clock where the run is
    /// priced. Its clock is the run's; unpriced, the run's plus the accesses' estimate and the
    /// host's own time (so that windows pass as the guest runs).
    fn tick_host(&mut self) {
        let priced = self.m.priced();
        let clock = self.m.clock_ns();
        let Some(run) = self.tlb.as_mut() else { return };
        let est = if priced { 0 } else { run.estimate_ns() as u64 };
        let Some(h) = run.host.as_mut() else { return };
        let now = if priced { clock } else { clock + est + h.own_ns() };
        h.tick(now);
        let unpaid = h.take_unpaid_ns();
        if priced && unpaid > 0 {
            self.m.spend(unpaid);
        }
    }

    /// With a profile, move the clock by the accesses' time since the last call: the estimate
    /// of the whole stream so far less what the clock already holds, so that the phases, the
    /// samples and khugepaged see the accesses' time where they ran and the moves add up to the
    /// run's estimate (`time.accesses_ns`, rounded). An estimate that went down (more accesses
    /// can make the older ones cheaper) moves nothing until it is passed again.
    pub(crate) fn charge_accesses(&mut self) {
        if !self.m.priced() {
            return;
        }
        let run = self.tlb.as_mut().expect("TLB model set up for access statements");
        let target = run.estimate_ns().round() as u64;
        if target > run.on_clock_ns {
            let ns = target - run.on_clock_ns;
            run.on_clock_ns = target;
            self.m.spend(ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{run_with, MachineConfig, RunOptions};

    /// `w` under `enabled=never`, priced at 1000 ns per 4 KiB fault, 20 ns per touched page and
    /// 2000 ns per call, invariants checked after every step.
    fn run_priced_4k(w: &workload::Workload) -> uapi::RunResult {
        let costs = uapi::profile::FaultCosts {
            ns_per_fault: [("4kB".to_string(), 1000.0)].into(),
            touch_ns_per_page: 20.0,
            syscall_ns: 2000.0,
            source: "test".into(),
            ..Default::default()
        };
        let mut s = thp_abi::ThpSettings::default();
        s.apply_assignment("enabled=never").unwrap();
        run_with(w, &s, &MachineConfig::default(), &mut RunOptions { check_invariants: true, profile: crate::Profile { costs: Some(costs), ..Default::default() }, ..Default::default() }).unwrap().0
    }

    /// 1 MiB written as 256 base pages on a fresh simulated machine: consecutive frames, 8 to a
    /// host PTE line, starting off a line boundary here, 33 lines; each alone (scatter 1): 256;
    /// half-way: 33 + 223 / 2 (rounded: 112). The upper
    /// levels follow the frames (all in one 16 MiB / 8 GiB / 4 TiB block here, as the
    /// machine is small). As 64 KiB folios the frames are consecutive whatever the scatter.
    #[test]
    fn host_lines_of_base_pages_follow_the_scatter() {
        let w = workload::parse("t", "mmap a 1M align=1M\ntouch a write\n").unwrap();
        let m = MachineConfig { mem_bytes: 64 << 20, min_free_kbytes: 1024, ..MachineConfig::default() };
        let (r, k) = run_with(&w, &thp_abi::ThpSettings::default(), &m, &mut RunOptions::default()).unwrap();
        let a = r.regions[0].start;
        assert_eq!(super::host_lines(&k, a, 1 << 20, 0.0).0, [1, 1, 1, 33]);
        assert_eq!(super::host_lines(&k, a, 1 << 20, 1.0).0, [1, 1, 1, 256]);
        assert_eq!(super::host_lines(&k, a, 1 << 20, 0.5).0, [1, 1, 1, 145]);
        let mut s = thp_abi::ThpSettings::default();
        s.apply_assignment("hugepages-64kB/enabled=always").unwrap();
        let (r, k) = run_with(&w, &s, &m, &mut RunOptions::default()).unwrap();
        assert_eq!(super::host_lines(&k, r.regions[0].start, 1 << 20, 1.0).0, [1, 1, 1, 32]);
    }

    /// Each thread's accesses go through its own CPU's TLB (Zen 4: a 72-entry L1); thread b
    /// makes none and has no CPU in the count. Thread a
    /// reads 32 base pages twice: 32 walks, then 32 L1 hits. Main then reads the same 32 pages
    /// once: its TLB never saw them, 32 walks more (one shared TLB would give 32 hits). Then
    /// main unmaps the first page and a reads the 32 again: the flush reached a's TLB, so that
    /// page is a fault (mapped again) and a walk, the other 31 L1 hits.
    #[test]
    fn threads_access_through_tlbs_of_their_own_and_flushes_reach_them_all() {
        let text = "mmap r 2M align=2M\ntouch r write\nthread b {\n  touch r[0+4K] read\n  exit\n}\nwait b\nthread a {\n  access r[0+128K] seq elem=4K count=64\n}\n\
                    access r[0+128K] seq elem=4K count=32\nmadvise r[0+4K] dontneed\nin a {\n  access r[0+128K] seq elem=4K count=32\n  exit\n}\nwait a\n";
        let w = workload::parse("t", text).unwrap();
        let mut s = thp_abi::ThpSettings::default();
        s.apply_assignment("enabled=never").unwrap();
        let (r, _) = run_with(&w, &s, &MachineConfig::default(), &mut RunOptions { check_invariants: true, ..Default::default() }).unwrap();
        let a = r.accesses.unwrap();
        assert_eq!(a.cpus, 2);
        assert_eq!((a.total.accesses, a.total.walks, a.total.l1_hits), (128, 32 + 32 + 1, 32 + 31));
        assert!(a.total.tlb_flushed_entries >= 2, "the flush reached both TLBs: {}", a.total.tlb_flushed_entries);
    }

    /// With a profile, an `access` statement's time is the TLB model's estimate of it, part of
    /// the run's (issue #11 item 4), and its hits pay no `touch_ns_per_page` (that is for
    /// `touch`, whose page writes the TLB model does not price). 1 MiB written page by page:
    /// 256 faults of 1000 ns and one mmap of 2000 ns; then 256 reads of it, all hits.
    #[test]
    fn an_access_statements_time_is_the_tlb_models_and_part_of_the_runs() {
        let w = workload::parse("t", "mmap a 1M align=1M\ntouch a write\naccess a seq elem=4K count=256\n").unwrap();
        let r = run_priced_4k(&w);
        let (t, a) = (r.time.unwrap(), r.accesses.unwrap());
        assert_eq!((t.faults["4kB"], t.touches_without_fault, t.calls), (256, 0, 1));
        assert_eq!((t.accesses, a.total.accesses, a.total.walks), (256, 256, 256));
        assert!(a.total.ns > 0.0);
        assert_eq!(t.accesses_ns, a.total.ns);
        assert_eq!(t.total_ns, 256.0 * 1000.0 + 2000.0 + a.total.ns);
        assert_eq!(t.elapsed_ns, t.total_ns.round() as u64);
    }

    /// Issue #27 item 2: with a profile the clock holds each `access` statement's time where it
    /// ran, so the phases include it and end at `elapsed`. 16 KiB (4 pages) fit Zen 4's 32 KiB
    /// L1D: every read costs 4 cycles (tlb::cost, Che's approximation gives an infinite
    /// characteristic time when everything fits). Phase `fill`: mmap (2000 ns) and 4 faults
    /// (1000 ns each) = 6000 ns. Phase `warm`: 256 reads at 64-byte steps, 1024 data cycles
    /// plus its translations (the 4 pages' walks and L2 hits: the whole run's translation
    /// cycles, since `hot` adds none). Phase `hot`: the same 256 reads, every one an L1 TLB hit
    /// (4 entries of 72): 1024 cycles; on the clock, the whole estimate rounded less warm's.
    #[test]
    fn phases_hold_the_time_of_their_access_statements_and_sum_to_elapsed() {
        let text = "phase fill\nmmap a 16K align=16K\ntouch a write\nphase warm\naccess a seq elem=64 count=256\n\
                    phase hot\naccess a seq elem=64 count=256\n";
        let w = workload::parse("t", text).unwrap();
        let r = run_priced_4k(&w);
        let (t, a) = (r.time.unwrap(), r.accesses.unwrap());
        assert_eq!((a.total.accesses, a.total.data_cycles), (512, 512.0 * 4.0));
        let ghz = tlb::presets::ZEN4.ghz;
        let tr = a.total.translation_cycles;
        assert!(tr > 0.0 && a.total.walks >= 1);
        let warm = ((1024.0 + tr) / ghz).round() as u64;
        let all = ((2048.0 + tr) / ghz).round() as u64;
        let phases: Vec<(&str, u64, u64)> = t.phases.iter().map(|p| (p.name.as_str(), p.start_ns, p.ns)).collect();
        assert_eq!(phases, vec![("fill", 0, 6000), ("warm", 6000, warm), ("hot", 6000 + warm, all - warm)]);
        assert_eq!(t.phases.iter().map(|p| p.ns).sum::<u64>(), t.elapsed_ns);
        assert_eq!(t.elapsed_ns, 6000 + all);
        assert_eq!(t.elapsed_ns, t.total_ns.round() as u64);
    }
}
