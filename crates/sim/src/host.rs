//! The host side of a VM (model-only, docs/vm-host.md): a host mm backing the guest's
//! physical memory with its own THP settings, khugepaged and an EPT-like table with accessed
//! and dirty bits, while the guest model runs unchanged inside. The guest's accesses touch
//! guest-physical frames (`access` statements, `crate::access`); the host faults them in under
//! its settings, and the TLB model walks the data page's host mapping at its actual size
//! (`tlb::Tlb::access_on_host`).
//!
//! What it models, from the kernel: a guest-physical page the EPT does not map takes an EPT
//! violation, a VM exit into arch/x86/kvm/mmu/mmu.c `kvm_tdp_page_fault`, which faults the host
//! page in (mm/memory.c `handle_mm_fault`: mm/huge_memory.c `do_huge_pmd_anonymous_page` for a
//! 2 MiB range the VMM madvised, its whole range unpopulated) and maps it at the host's level
//! (mmu.c `kvm_mmu_max_mapping_level`: 2 MiB only where the host maps a PMD). The host's
//! khugepaged (mm/khugepaged.c `hpage_collapse_scan_pmd`: none PTEs up to max_ptes_none and one
//! referenced, `collapse_huge_page`) zaps the EPT range through the MMU notifier
//! (mmu.c `kvm_unmap_gfn_range`), so the guest's next access exits again. The host reads and
//! clears EPT A bits as `kvm_age_gfn` does (one bit per host mapping: a 2 MiB page has one).
//!
//! FHPM (`--policy fhpm`, `policy::fhpm` decides): every window, a coarse pass reads and clears
//! the A bits of the host huge pages; those found young get a companion page table for the
//! next window (their PDE redirected to 512 4 KiB entries of the same frames: per-base-page
//! A/D bits, the TLB sees host 4 KiB pages meanwhile); at its end, a huge page whose page skew
//! ratio is under `split_psr` is split (cold never-written base pages freed with `share`), and
//! a range of base pages accessed at `promote_psr` or more is merged; with `fill` the new
//! entries are installed at once (no VM exits later). Costs are the model's estimates
//! ([`Costs`]), not measurements. Guest page-table pages are not in guest RAM here (their
//! guest-physical addresses are synthetic): their host walks keep `--paging`'s size.

use std::collections::BTreeMap;

use policy::fhpm::{self, Bits};
use thp_abi::fhpm::FhpmParams;
use tlb::PageSize;
use uapi::vm_host::VmHostReport;

/// The model's estimates of the host's work, in ns (not measured: docs/vm-host.md).
#[derive(Clone, Copy, Debug)]
pub struct Costs {
    /// One EPT violation: the VM exit, KVM's fault handling and the re-entry.
    pub exit_ns: u64,
    /// Zeroing one 4 KiB page on a host fault (2 MiB: 512 of them).
    pub zero_4k_ns: u64,
    /// Reading and clearing one EPT A bit in a coarse pass.
    pub scan_entry_ns: u64,
    /// Setting up one companion page table (512 entries) and the INVEPT of its PDE.
    pub companion_ns: u64,
    /// A split or a merge of one 2 MiB range (rewriting its entries, INVEPT); a collapse
    /// (khugepaged) also copies 2 MiB, 512 × `copy_4k_ns`.
    pub remap_ns: u64,
    pub copy_4k_ns: u64,
}

pub const COSTS: Costs = Costs { exit_ns: 1_500, zero_4k_ns: 250, scan_entry_ns: 5, companion_ns: 3_000, remap_ns: 3_000, copy_4k_ns: 200 };

/// `--host SETTING` assignments: the host's THP settings for the VM's memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostConfig {
    /// `enabled=always|madvise|never`: whether a host fault of an unpopulated 2 MiB range maps
    /// a PMD (madvise counts as always: the VMM madvises guest RAM MADV_HUGEPAGE, as QEMU does).
    pub thp: bool,
    /// `khugepaged/scan_sleep_millisecs`, `khugepaged/pages_to_scan`, `khugepaged/max_ptes_none`
    /// (defaults 10000, 4096, 511: mm/khugepaged.c `khugepaged_init`).
    pub scan_sleep_ms: u64,
    pub pages_to_scan: u32,
    pub max_ptes_none: u32,
    /// The measuring window (hot bloat) without FHPM, in ms (`window_ms=`, default 100).
    pub window_ms: u32,
    pub fhpm: Option<FhpmParams>,
    /// The assignments as given, for the result.
    pub given: Vec<String>,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig { thp: true, scan_sleep_ms: 10_000, pages_to_scan: 4096, max_ptes_none: 511, window_ms: 100, fhpm: None, given: Vec::new() }
    }
}

/// What `--host` accepts, for errors and help.
pub const HOST_SETTINGS: &str = "enabled=always|madvise|never, khugepaged/scan_sleep_millisecs=MS, \
     khugepaged/pages_to_scan=N, khugepaged/max_ptes_none=0..511, window_ms=MS";

impl HostConfig {
    /// The config of `--host` assignments (`KNOB=VALUE`), with FHPM's parameters if the
    /// guest's `--policy` is fhpm; errors name the assignment and what is valid.
    pub fn parse(assignments: &[String], fhpm: Option<FhpmParams>) -> Result<HostConfig, String> {
        let mut c = HostConfig { fhpm, given: assignments.to_vec(), ..Default::default() };
        for a in assignments {
            let (k, v) = a.split_once('=').ok_or_else(|| format!("--host '{a}' is not KNOB=VALUE; valid: {HOST_SETTINGS}"))?;
            let num = |hi: u64| v.trim().parse::<u64>().ok().filter(|n| (1..=hi).contains(n) || (hi == 511 && *n == 0));
            let bad = || format!("--host '{a}': invalid value '{v}'; valid: {HOST_SETTINGS}");
            match k.trim() {
                "enabled" => {
                    c.thp = match v.trim() {
                        "always" | "madvise" => true,
                        "never" => false,
                        _ => return Err(bad()),
                    }
                }
                "khugepaged/scan_sleep_millisecs" => c.scan_sleep_ms = num(u32::MAX as u64).ok_or_else(bad)?,
                "khugepaged/pages_to_scan" => c.pages_to_scan = num(u32::MAX as u64).ok_or_else(bad)? as u32,
                "khugepaged/max_ptes_none" => c.max_ptes_none = num(511).ok_or_else(bad)? as u32,
                "window_ms" => c.window_ms = num(60_000).ok_or_else(bad)? as u32,
                k => return Err(format!("--host: unknown setting '{k}'; valid: {HOST_SETTINGS}")),
            }
        }
        Ok(c)
    }
}

/// One 2 MiB range of guest-physical memory as the host holds it.
#[derive(Clone, Debug, Default)]
struct Range {
    /// Mapped by a host PMD (else by base pages, `backed`).
    huge: bool,
    /// Base pages the host backs (all 512 when `huge`).
    backed: Bits,
    /// EPT entries present: the 2 MiB entry (`huge`), or per base page.
    ept_huge: bool,
    ept: Bits,
    /// Entries a proactive fill installed that the guest has not used yet.
    prefilled: Bits,
    /// EPT A bits: of the 2 MiB entry, or per base page (also the companion table's).
    young_huge: bool,
    young: Bits,
    /// Base pages the guest ever wrote (D bits, kept since the range was backed).
    dirty: Bits,
    /// The model's truth: base pages accessed in the current window.
    touched: Bits,
    /// A companion page table is in place for this window (the TLB sees host 4 KiB pages).
    companion: bool,
    /// FHPM split it: khugepaged leaves it to FHPM's promotion.
    fhpm_owned: bool,
}

/// The modelled host of one VM.
#[derive(Debug)]
pub struct Host {
    cfg: HostConfig,
    ranges: BTreeMap<u64, Range>,
    next_scan_ns: u64,
    next_window_ns: u64,
    scan_cursor: u64,
    r: VmHostReport,
    /// Host ns not yet charged to the run's clock.
    unpaid_ns: u64,
    /// Base pages backed now.
    resident: u64,
}

const ALL: Bits = [u64::MAX; 8];

fn test(b: &Bits, i: usize) -> bool {
    b[i / 64] >> (i % 64) & 1 == 1
}

fn set(b: &mut Bits, i: usize) {
    b[i / 64] |= 1 << (i % 64);
}

fn clear(b: &mut Bits, i: usize) {
    b[i / 64] &= !(1 << (i % 64));
}

impl Host {
    pub fn new(cfg: HostConfig) -> Host {
        let window = cfg.fhpm.map_or(cfg.window_ms, |p| p.window_ms) as u64 * 1_000_000;
        let r = VmHostReport {
            model_only: true,
            settings: cfg.given.clone(),
            policy: cfg.fhpm.map(|p| thp_abi::Policy::Fhpm(p).to_string()),
            ..Default::default()
        };
        Host { next_scan_ns: cfg.scan_sleep_ms * 1_000_000, next_window_ns: window, cfg, ranges: BTreeMap::new(), scan_cursor: 0, r, unpaid_ns: 0, resident: 0 }
    }

    fn window_ns(&self) -> u64 {
        self.cfg.fhpm.map_or(self.cfg.window_ms, |p| p.window_ms) as u64 * 1_000_000
    }

    /// The guest accessed guest-physical frame `gfn` (a store with `write`): EPT violation and
    /// host fault where the EPT does not map it, A (and D) bits; returns the host page size
    /// the TLB walks it at.
    pub fn touch(&mut self, gfn: u64, write: bool) -> PageSize {
        let i = (gfn & 511) as usize;
        let r = self.ranges.entry(gfn >> 9).or_default();
        let mapped = if r.huge && !r.companion { r.ept_huge } else { test(&r.ept, i) };
        if !mapped {
            self.r.ept_violations += 1;
            self.r.exit_ns += COSTS.exit_ns;
            self.unpaid_ns += COSTS.exit_ns;
            if r.huge {
                r.ept_huge = true;
                r.ept = ALL;
            } else if test(&r.backed, i) {
                set(&mut r.ept, i);
            } else if self.cfg.thp && r.backed == [0; 8] && !r.fhpm_owned {
                *r = Range { huge: true, backed: ALL, ept_huge: true, ept: ALL, ..std::mem::take(r) };
                self.r.faults_2m += 1;
                self.r.exit_ns += 512 * COSTS.zero_4k_ns;
                self.unpaid_ns += 512 * COSTS.zero_4k_ns;
                self.resident += 512;
            } else {
                set(&mut r.backed, i);
                set(&mut r.ept, i);
                self.r.faults_4k += 1;
                self.r.exit_ns += COSTS.zero_4k_ns;
                self.unpaid_ns += COSTS.zero_4k_ns;
                self.resident += 1;
            }
            self.r.peak_resident_bytes = self.r.peak_resident_bytes.max(self.resident * 4096);
        } else if test(&r.prefilled, i) || (r.huge && r.prefilled != [0; 8]) {
            // The first use of an entry the proactive fill installed: the exit it saved.
            self.r.exits_saved += 1;
            if r.huge {
                r.prefilled = [0; 8];
            } else {
                clear(&mut r.prefilled, i);
            }
        }
        if r.huge && !r.companion {
            r.young_huge = true;
        } else {
            set(&mut r.young, i);
        }
        set(&mut r.touched, i);
        if write {
            set(&mut r.dirty, i);
        }
        if r.huge && !r.companion {
            PageSize::M2
        } else {
            PageSize::K4
        }
    }

    fn resident_bytes(&self) -> u64 {
        self.resident * 4096
    }

    /// Adds `pages` (negative: frees) to the resident count and the peak.
    fn resize(&mut self, pages: i64) {
        self.resident = self.resident.saturating_add_signed(pages);
        self.r.peak_resident_bytes = self.r.peak_resident_bytes.max(self.resident * 4096);
    }

    /// The host's time so far (exits and faults, monitoring, management).
    pub fn own_ns(&self) -> u64 {
        self.r.exit_ns + self.r.monitor_ns + self.r.manage_ns
    }

    /// Host time not yet on the run's clock (taken: the caller spends it).
    pub fn take_unpaid_ns(&mut self) -> u64 {
        std::mem::take(&mut self.unpaid_ns)
    }

    /// Runs the host's daemons due by `now_ns` of the run's clock: khugepaged's wake-ups and
    /// the monitoring windows' ends.
    pub fn tick(&mut self, now_ns: u64) {
        while self.cfg.thp && now_ns >= self.next_scan_ns {
            self.khugepaged_scan();
            self.next_scan_ns += self.cfg.scan_sleep_ms * 1_000_000;
        }
        while now_ns >= self.next_window_ns {
            self.end_window();
            self.next_window_ns += self.window_ns();
        }
    }

    /// One khugepaged wake-up over the VM's memory: `pages_to_scan` / 512 ranges from the
    /// cursor on; a range of base pages with at most max_ptes_none unbacked and one young is
    /// collapsed, its EPT range zapped.
    fn khugepaged_scan(&mut self) {
        let budget = (self.cfg.pages_to_scan / 512).max(1) as usize;
        let keys: Vec<u64> = self.ranges.range(self.scan_cursor..).chain(self.ranges.range(..self.scan_cursor)).map(|(k, _)| *k).take(budget).collect();
        for k in keys {
            self.scan_cursor = k + 1;
            let r = self.ranges.get_mut(&k).unwrap();
            self.r.khugepaged_scanned += 1;
            let none = 512 - fhpm::count(&r.backed);
            if r.huge || r.fhpm_owned || none > self.cfg.max_ptes_none || r.young == [0; 8] {
                continue;
            }
            *r = Range { huge: true, backed: ALL, ept_huge: false, ept: [0; 8], prefilled: [0; 8], ..std::mem::take(r) };
            self.r.khugepaged_collapsed += 1;
            self.r.manage_ns += COSTS.remap_ns + 512 * COSTS.copy_4k_ns;
            self.resize(none as i64);
        }
    }

    /// The end of a window: hot bloat measured (from the model's truth: a huge page the guest
    /// touched at all in the window has its A bit set), then FHPM's fine windows judged and
    /// its coarse pass run (it reads and clears the A bits; without FHPM nothing clears them).
    fn end_window(&mut self) {
        self.r.windows += 1;
        let mut bloat = 0;
        for r in self.ranges.values() {
            let looks_hot = r.touched != [0; 8];
            if r.huge && !r.companion {
                bloat += fhpm::hot_bloat(looks_hot, &r.touched) as u64;
                self.r.hot_pages += if looks_hot { 512 } else { 0 };
            } else {
                self.r.hot_pages += fhpm::count(&r.touched) as u64;
            }
        }
        self.r.hot_bloat_pages += bloat;
        self.r.hot_bloat_max = self.r.hot_bloat_max.max(bloat);
        if let Some(p) = self.cfg.fhpm {
            self.fhpm_window(&p);
            for r in self.ranges.values_mut() {
                r.young_huge = false;
                r.young = [0; 8];
            }
        }
        for r in self.ranges.values_mut() {
            r.touched = [0; 8];
        }
    }

    /// FHPM at a window's end: fine windows judged (split or kept), base-page ranges promoted,
    /// and the coarse pass: young huge pages get a companion table for the next window.
    fn fhpm_window(&mut self, p: &FhpmParams) {
        let n = self.ranges.len() as u64;
        self.r.monitor_ns += n * COSTS.scan_entry_ns;
        let mut spent = n * COSTS.scan_entry_ns;
        let freed_before = self.r.freed_pages;
        let mut grown = 0i64;
        for r in self.ranges.values_mut() {
            if r.companion {
                r.companion = false;
                self.r.monitor_ns += 512 * COSTS.scan_entry_ns;
                spent += 512 * COSTS.scan_entry_ns;
                if fhpm::split(p, &r.young) {
                    spent += split(r, p, &mut self.r);
                }
            } else if !r.huge && r.backed != [0; 8] && fhpm::promote(p, &r.young) {
                grown += 512 - fhpm::count(&r.backed) as i64;
                spent += promote(r, p, &mut self.r);
            } else if r.huge && r.young_huge {
                r.companion = true;
                r.ept = ALL;
                self.r.companion_tables += 1;
                self.r.monitor_ns += COSTS.companion_ns;
                spent += COSTS.companion_ns;
            }
        }
        self.unpaid_ns += spent;
        self.resize(grown - (self.r.freed_pages - freed_before) as i64);
    }

    /// The result's `vm_host` at the end of the run.
    pub fn report(&self) -> VmHostReport {
        let mut r = self.r.clone();
        r.resident_bytes = self.resident_bytes();
        r.peak_resident_bytes = r.peak_resident_bytes.max(r.resident_bytes);
        r.huge_bytes = self.ranges.values().filter(|x| x.huge).count() as u64 * (2 << 20);
        r.hot_bloat_ratio = if r.hot_pages > 0 { r.hot_bloat_pages as f64 / r.hot_pages as f64 } else { 0.0 };
        r
    }
}

/// FHPM splits `r` in place: base pages from the same frames; with `share` the cold ones never
/// written are freed; with `fill` every remaining entry is installed now, else each faults in.
fn split(r: &mut Range, p: &FhpmParams, out: &mut VmHostReport) -> u64 {
    let freed = if p.share { fhpm::cold_zero(&r.backed, &r.young, &r.dirty) } else { [0; 8] };
    out.freed_pages += fhpm::count(&freed) as u64;
    r.backed = std::array::from_fn(|i| r.backed[i] & !freed[i]);
    r.huge = false;
    r.ept_huge = false;
    r.fhpm_owned = true;
    (r.ept, r.prefilled) = if p.fill { (r.backed, r.backed) } else { ([0; 8], [0; 8]) };
    out.splits += 1;
    out.manage_ns += COSTS.remap_ns;
    COSTS.remap_ns
}

/// FHPM merges `r` into a host huge page (freed base pages backed again, zeroed); with `fill`
/// its 2 MiB entry is installed now, else the guest's next access exits.
fn promote(r: &mut Range, p: &FhpmParams, out: &mut VmHostReport) -> u64 {
    let missing = 512 - fhpm::count(&r.backed) as u64;
    *r = Range { huge: true, backed: ALL, ept_huge: p.fill, ept: if p.fill { ALL } else { [0; 8] }, prefilled: if p.fill { ALL } else { [0; 8] }, ..std::mem::take(r) };
    out.promotions += 1;
    let ns = COSTS.remap_ns + missing * COSTS.zero_4k_ns;
    out.manage_ns += ns;
    ns
}

/// The host of a run: `--host`'s config with FHPM's parameters if the guest settings' policy is
/// fhpm; `--policy fhpm` alone implies a host of `enabled=always`; neither: no host.
pub fn for_run(given: Option<&HostConfig>, settings: &thp_abi::ThpSettings) -> Option<HostConfig> {
    let fhpm = match settings.policy {
        Some(thp_abi::Policy::Fhpm(p)) => Some(p),
        _ => None,
    };
    match (given, fhpm) {
        (Some(c), f) => Some(HostConfig { fhpm: f, ..c.clone() }),
        (None, Some(f)) => Some(HostConfig { fhpm: Some(f), given: vec!["enabled=always".into()], ..Default::default() }),
        (None, None) => None,
    }
}

/// The TLB model's paging under a host: `--paging` if nested (the size the guest's own page
/// tables are walked at), else nested at the host's THP size.
pub fn paging_for(c: &HostConfig, paging: tlb::Paging) -> tlb::Paging {
    match paging {
        tlb::Paging::Native => tlb::Paging::Nested { host: if c.thp { PageSize::M2 } else { PageSize::K4 } },
        p => p,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fhpm_host() -> Host {
        Host::new(HostConfig::parse(&[], Some(FhpmParams { window_ms: 10, ..Default::default() })).unwrap())
    }

    /// One 2 MiB range under host THP: the first access faults a PMD in (one exit); the guest
    /// touches base pages 0 and 100 (100 written) in window 1: its hot bloat is 510 of 512. The
    /// coarse pass gives it a companion table; in window 2 the guest touches pages 0..15 (16
    /// of 512: PSR 31 per mille, under 250): split, the cold never-written pages freed (512 −
    /// 16 accessed − page 100 written = 495), the 17 left filled ahead (16 touched again
    /// later: 16 exits saved). Times: windows end at 10 and 20 ms.
    #[test]
    fn fhpm_splits_a_skewed_huge_page_and_frees_its_cold_zero_pages() {
        let mut h = fhpm_host();
        assert_eq!(h.touch(0, false), PageSize::M2);
        assert_eq!(h.touch(100, true), PageSize::M2);
        h.tick(10_000_000);
        let r = h.report();
        assert_eq!((r.ept_violations, r.faults_2m, r.hot_bloat_pages, r.hot_pages, r.companion_tables), (1, 1, 510, 512, 1));
        for g in 0..16 {
            assert_eq!(h.touch(g, false), PageSize::K4, "companion window: host 4K entries");
        }
        h.tick(20_000_000);
        let r = h.report();
        assert_eq!((r.splits, r.freed_pages, r.resident_bytes), (1, 495, 17 * 4096));
        assert_eq!(r.hot_bloat_pages, 510, "no bloat counted for a companion window");
        for g in 0..16 {
            assert_eq!(h.touch(g, false), PageSize::K4);
        }
        let r = h.report();
        assert_eq!((r.ept_violations, r.exits_saved), (1, 16));
    }

    /// Plain host THP, khugepaged: under enabled=never the guest's 3 pages of a range fault in
    /// as 3 base pages (3 exits); with THP on and max_ptes_none=511 a wake-up collapses them
    /// (one young) and zaps the EPT: the next access exits once more and sees a 2 MiB page.
    #[test]
    fn host_khugepaged_collapses_and_the_guest_exits_again() {
        let mut h = Host::new(HostConfig::parse(&["enabled=never".into()], None).unwrap());
        for g in [1, 2, 3] {
            assert_eq!(h.touch(g, true), PageSize::K4);
        }
        assert_eq!((h.r.ept_violations, h.r.faults_4k), (3, 3));
        h.cfg.thp = true;
        h.tick(10_000_000_000);
        assert_eq!(h.r.khugepaged_collapsed, 1);
        assert_eq!(h.touch(2, false), PageSize::M2);
        assert_eq!(h.r.ept_violations, 4);
        assert_eq!(h.report().resident_bytes, 2 << 20);
    }

    #[test]
    fn host_settings_parse_and_say_what_is_valid() {
        let c = HostConfig::parse(&["enabled=never".into(), "khugepaged/max_ptes_none=0".into()], None).unwrap();
        assert!(!c.thp);
        assert_eq!(c.max_ptes_none, 0);
        let e = HostConfig::parse(&["enabled=sometimes".into()], None).unwrap_err();
        assert!(e.contains("'sometimes'") && e.contains("enabled=always|madvise|never"), "{e}");
        let e = HostConfig::parse(&["defrag=always".into()], None).unwrap_err();
        assert!(e.contains("unknown setting 'defrag'"), "{e}");
    }
}
