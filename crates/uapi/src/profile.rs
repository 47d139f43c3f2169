//! The machine profile: what this machine's kernel and hardware charge for the work the model
//! counts, as a small TOML file.
//!
//! The model core stays clockless: `mm` reports the work an operation did (orders allocated,
//! pages zeroed or copied, pages pinned, accesses), and a consumer turns that work into time with
//! a profile. Each capability owns one section, so the file grows by sections without breaking
//! older profiles (every section is optional and every field in a section has a documented unit):
//!
//! | section | filled by | what |
//! |---|---|---|
//! | `[machine]` | everyone | where and when the profile was measured |
//! | `[pin]` | `thplab bench io` (issue #12) | pin_user_pages/unpin cost per folio and per page |
//! | `[tlb]` | `thplab calibrate` (issue #11) | TLB preset, nested paging and its host page size, base pages' scatter |
//! | `[fault]` | `thplab calibrate` (issue #10) | per-order fault, zeroing and copy costs |
//! | `[fault.pressure]` | `thplab calibrate --pressure` (issue #28) | reclaim, swap-out/in and compaction per page or pageblock |
//! | `[host]` | `thplab calibrate` (issue #10) | a VM's free page reporting and the host fault it costs |
//!
//! A section a profile lacks means "not measured": consumers say so instead of inventing a cost.

use serde::{Deserialize, Serialize};

/// The text of [`MachineProfile::builtin`].
pub const BUILTIN: &str = include_str!("../profiles/builtin.toml");

/// Largest profile file accepted (a profile is a few hundred bytes).
pub const MAX_PROFILE_BYTES: usize = 1 << 20;

/// Where the profile was measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineInfo {
    /// Free text: host name or machine kind.
    #[serde(default)]
    pub name: String,
    /// `uname -r` of the kernel it was measured on.
    #[serde(default)]
    pub kernel: String,
}

/// A machine profile (see the module documentation for its sections).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineProfile {
    #[serde(default)]
    pub machine: MachineInfo,
    /// `[pin]`: what pinning user pages for direct I/O costs (absent: not measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin: Option<PinCosts>,
    /// `[fault]`: what a page fault costs per folio size (absent: not measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<FaultCosts>,
    /// `[host]`: the host behind a virtual machine that reports free pages (absent: a machine
    /// without a reporting device, or not measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostCosts>,
    /// `[tlb]`: the TLB preset and paging mode of this machine (absent: not measured; the
    /// access model then takes `--cpu`, `--paging` and `--order0-scatter` or their defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tlb: Option<TlbSetup>,
}

/// `[tlb]`: how the access model (crates/tlb) is set up for this machine, as `thplab calibrate`
/// found it: the CPU preset nearest this CPU (/proc/cpuinfo), whether the machine is a guest
/// (the `hypervisor` CPU flag) and, for a guest, the host page size whose model chase ratio is
/// nearest the ratio measured live between PMD THP and 4 KiB pages (the host backs guest memory
/// with pages the guest cannot see: docs/tlb-model.md), and how scattered the frames of base
/// pages were (`--order0-scatter`, from /proc/self/pagemap of the 4 KiB chase buffer).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlbSetup {
    /// A `--cpu` preset: zen4, zen1, golden-cove, neoverse-n1, cortex-a57, cortex-a53.
    pub cpu: String,
    /// `native`, `nested-4k`, `nested-2m` or `nested-1g`.
    pub paging: String,
    /// From 0 (base pages' frames consecutive) to 1 (each alone in its host page-table line).
    #[serde(default)]
    pub order0_scatter: f64,
    /// The chase measured: its size in bytes, and ns per dependent load with 4 KiB pages and
    /// with PMD THP (0: not measured).
    #[serde(default)]
    pub chase_bytes: u64,
    #[serde(default)]
    pub chase_4k_ns: f64,
    #[serde(default)]
    pub chase_pmd_ns: f64,
    /// How it was found.
    #[serde(default)]
    pub source: String,
}

/// `[host]`: a virtual machine whose balloon device reports free pages to the host
/// (VIRTIO_BALLOON_F_REPORTING; mm/page_reporting.c), and what it costs the guest afterwards.
/// The host drops its memory behind every reported block, so the guest's next write to each of
/// its 4 KiB frames is a fault in the host; the model charges `fault_ns_per_page` for every
/// such frame a large folio's fault writes and `base_fault_ns_per_page` for one a base page's
/// fault writes (the mm crate's `page_reporting` module says which ones).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostCosts {
    /// `page_reporting_order` (/sys/module/page_reporting/parameters): free blocks of this
    /// order and above are reported.
    pub page_reporting_order: u8,
    /// ns per 4 KiB frame written after the host dropped it, by a large folio's fault (mTHP,
    /// PMD THP: measured under PMD THP).
    pub fault_ns_per_page: f64,
    /// ns per 4 KiB frame written after the host dropped it by a base page's fault (an order-0
    /// allocation), which the host meets one guest fault at a time. Measured here by hand at
    /// 10.7-10.9 µs against 8.2-9.4 under 64 KiB and PMD faults, and by `thplab calibrate` at
    /// 8.7 µs against 8.9 (a busy machine): not settled, so the built-in profile has none.
    /// Absent: `fault_ns_per_page`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_fault_ns_per_page: Option<f64>,
    /// The spread of `fault_ns_per_page`: half the range (max − min) of its runs in percent of
    /// their median, as `FaultCosts::spread_pct` (absent: not measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault_spread_pct: Option<f64>,
    /// Free blocks per order (0..=10) when the profile was measured: the Movable rows of
    /// /proc/pagetypeinfo (those a program's pages come from), zones summed: the model lays its free memory out alike when it has no fresher snapshot.
    #[serde(default)]
    pub free_areas: Vec<u64>,
    /// How it was measured.
    #[serde(default)]
    pub source: String,
}

// The free lists a live run starts from (/proc/pagetypeinfo, per-CPU lists): thp_abi.
pub use thp_abi::FreeLists;

/// `[pin]`: the cost of pinning and unpinning user pages (`pin_user_pages_fast`, then
/// `unpin_user_folio`, mm/gup.c), fitted by the pin companion of `thplab bench io`
/// (docs/bench-io.md). GUP-fast takes a page mapped by a PTE one at a time
/// (`gup_fast_pte_range`: a PTE read and a folio reference per page) and a PMD-mapped folio
/// whole (`gup_fast_pmd_leaf`: one reference for all its pages, which are only recorded), so
/// the two kinds of page have their own cost. The model charges a direct read
/// `folios × per_folio_ns + pte_pages × per_page_ns + pmd_pages × per_pmd_page_ns`;
/// `per_call_ns` and `companion_scan_ns` are the companion's own costs (its system call, and
/// io_uring's `headpage_already_acct` comparing each folio head with the ones before it), kept
/// so that the profile can be checked against the companion.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinCosts {
    /// ns per companion call (io_uring register + unregister), whatever its size.
    #[serde(default)]
    pub per_call_ns: f64,
    /// ns per folio pinned and unpinned.
    pub per_folio_ns: f64,
    /// ns per 4 KiB page mapped by a PTE (4 KiB pages and mTHP).
    pub per_page_ns: f64,
    /// ns per 4 KiB page of a PMD-mapped THP.
    #[serde(default)]
    pub per_pmd_page_ns: f64,
    /// ns per 4 KiB page of a hugetlb 2 MiB folio (kept apart from THP pages in case the hugetlb
    /// vmemmap optimisation makes them differ; the model has no hugetlb, so only the companion
    /// check uses it).
    #[serde(default)]
    pub per_hugetlb_page_ns: f64,
    /// ns per folio-head comparison in io_uring's buffer accounting (companion only).
    #[serde(default)]
    pub companion_scan_ns: f64,
    /// How it was measured.
    #[serde(default)]
    pub source: String,
}

impl PinCosts {
    /// ns to pin and unpin `folios` folios holding `pte_pages` PTE-mapped and `pmd_pages`
    /// PMD-mapped pages, as the model charges a direct read.
    pub fn pin_ns(&self, folios: u64, pte_pages: u64, pmd_pages: u64) -> f64 {
        folios as f64 * self.per_folio_ns + pte_pages as f64 * self.per_page_ns + pmd_pages as f64 * self.per_pmd_page_ns
    }

    /// ns of one companion call over such a range (plus `hugetlb_pages`), with `compares`
    /// head comparisons.
    pub fn companion_ns(&self, folios: u64, pte_pages: u64, pmd_pages: u64, hugetlb_pages: u64, compares: u64) -> f64 {
        self.per_call_ns
            + self.pin_ns(folios, pte_pages, pmd_pages)
            + hugetlb_pages as f64 * self.per_hugetlb_page_ns
            + compares as f64 * self.companion_scan_ns
    }
}

/// `[fault]`: wall time per page fault of each folio size, as `thplab calibrate` measures it
/// (a fresh private anonymous range written one byte per 4 KiB page, under settings that give
/// every fault that size: mm/memory.c: do_anonymous_page, alloc_anon_folio; mm/huge_memory.c:
/// do_huge_pmd_anonymous_page). A fault's time includes its exception, the allocation, the
/// zeroing of the folio and the page-table work, so the model charges
/// `Σ faults(size) × ns_per_fault[size] + touched pages × touch_ns_per_page + calls ×
/// syscall_ns`, where the pages of a large folio after its first are touched without a fault.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultCosts {
    /// Size label (`4kB`, `16kB`, ..., `2048kB`) → ns per fault that allocated a folio of
    /// that size (write faults).
    pub ns_per_fault: std::collections::BTreeMap<String, f64>,
    /// ns per read fault that maps the shared zero page.
    #[serde(default)]
    pub zero_page_read_ns: f64,
    /// ns per touch of a page already mapped (one byte written per 4 KiB page).
    #[serde(default)]
    pub touch_ns_per_page: f64,
    /// ns per memory-management system call (mmap and munmap of one page, averaged).
    #[serde(default)]
    pub syscall_ns: f64,
    /// Size label → ns per fault of that size when the program fills the folio it got (a
    /// memset over a fresh range, less the same memset over the range once mapped): what a fault
    /// costs a real program, which writes whole pages, beyond the writes themselves (for
    /// 4 KiB pages about 0.4 µs more than a one-byte touch after the fault here: the page
    /// zeroed by the fault is written again at once). A recording's time uses it where measured.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub fill_ns_per_fault: std::collections::BTreeMap<String, f64>,
    /// Size label → ns per folio of that size unmapped and freed (munmap of a filled range: the
    /// zap, the rmap and the free). A recorded program frees what it faulted by its exit, inside
    /// its wall time.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub free_ns_per_folio: std::collections::BTreeMap<String, f64>,
    /// Figure (as `thplab calibrate` names them: `fault 4kB`, `filled 64kB`, `free 2048kB`,
    /// `touch`, `zero page read`, `syscall`) → its spread: half the range (max − min) of its
    /// runs in percent of their median (min..max of 5 runs holds their median with 94 %
    /// confidence, whatever the distribution). A time priced with this profile is ± its events
    /// × that much of the cost (`sim::time`; absent: not measured, no ± from it).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub spread_pct: std::collections::BTreeMap<String, f64>,
    /// How it was measured.
    #[serde(default)]
    pub source: String,
    /// `[fault.pressure]`: what reclaim, swap and compaction cost (absent or 0: not priced,
    /// every result as without it).
    #[serde(default, skip_serializing_if = "PressureCosts::is_zero")]
    pub pressure: PressureCosts,
}

/// `[fault.pressure]`: what memory pressure costs, as `thplab calibrate --pressure` measures it.
/// Direct work (mm/vmscan.c `try_to_free_pages`, `try_to_free_mem_cgroup_pages` from
/// mm/memcontrol.c `try_charge_memcg`; mm/compaction.c `try_to_compact_pages`; mm/memory.c
/// `do_swap_page`) is on the faulting task's time; kswapd's (`balance_pgdat`) and kcompactd's
/// (`kcompactd_do_work`) runs on their own threads: counted as CPU, not on the task's clock.
/// Every field is ns; 0 prices nothing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PressureCosts {
    /// Per page isolated from the inactive list (`pgscan_*`).
    #[serde(default)]
    pub reclaim_scan_ns_per_page: f64,
    /// Per page reclaimed (`pgsteal_*`: unmapped, freed), besides its swap-out.
    #[serde(default)]
    pub reclaim_ns_per_page: f64,
    /// Per page written to swap (`pswpout`: zram compresses it).
    #[serde(default)]
    pub swapout_ns_per_page: f64,
    /// Per page read from swap (`pswpin`: zram decompresses it), the whole major fault.
    #[serde(default)]
    pub swapin_ns_per_page: f64,
    /// Per pageblock (512 pages) the two compaction scanners walked
    /// (`compact_migrate_scanned` + `compact_free_scanned`, / 512).
    #[serde(default)]
    pub compact_ns_per_block: f64,
    /// Per page compaction migrated (`pgmigrate_success`: isolate, copy, remap).
    #[serde(default)]
    pub compact_migrate_ns_per_page: f64,
}

impl PressureCosts {
    /// Whether nothing is priced (the section is then not written).
    pub fn is_zero(&self) -> bool {
        *self == PressureCosts::default()
    }
}

impl FaultCosts {
    /// The spread of figure `what` (a key of `spread_pct`) as a fraction of its cost (0 when
    /// not measured).
    pub fn spread(&self, what: &str) -> f64 {
        self.spread_pct.get(what).copied().unwrap_or(0.0) / 100.0
    }

    /// ns of one fault of `size` (a label such as `64kB`); None when it was not measured.
    pub fn fault_ns(&self, size: &str) -> Option<f64> {
        self.ns_per_fault.get(size).copied()
    }

    /// What a fault of `size` costs a program over its life: the fault when it fills the folio
    /// (`fill_ns_per_fault`, else `ns_per_fault`) and the folio's unmap and free
    /// (`free_ns_per_folio`, else nothing); None when the fault was not measured.
    pub fn program_fault_ns(&self, size: &str) -> Option<f64> {
        let fault = self.fill_ns_per_fault.get(size).or(self.ns_per_fault.get(size))?;
        Some(fault + self.free_ns_per_folio.get(size).copied().unwrap_or(0.0))
    }
}

/// A profile that could not be read: the message names the line and what is valid.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ProfileError(String);

impl MachineProfile {
    /// Parses a profile from TOML text; `source` names the file in errors.
    pub fn parse(source: &str, text: &str) -> Result<Self, ProfileError> {
        if text.len() > MAX_PROFILE_BYTES {
            return Err(ProfileError(format!(
                "{source}: {} bytes is too large for a machine profile (at most {MAX_PROFILE_BYTES})",
                text.len()
            )));
        }
        toml::from_str(text).map_err(|e| ProfileError(format!("{source}: {e}")))
    }

    /// The profile measured on this project's machine kind (a 2-vCPU VM running Linux 6.18,
    /// whose host backs guest memory with 4 KiB pages), by `thplab calibrate`.
    pub fn builtin() -> Self {
        Self::parse("builtin profile", BUILTIN).expect("the built-in profile parses")
    }

    /// The profile as TOML text, as `thplab calibrate` writes it.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a profile always serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_names_the_bad_line() {
        let p = MachineProfile {
            machine: MachineInfo { name: "vm".into(), kernel: "6.18.44".into() },
            pin: None,
            tlb: Some(TlbSetup { cpu: "zen4".into(), paging: "nested-4k".into(), order0_scatter: 0.25, chase_bytes: 1 << 30, chase_4k_ns: 340.0, chase_pmd_ns: 230.0, source: "test".into() }),
            host: Some(HostCosts { page_reporting_order: 9, fault_ns_per_page: 8000.0, base_fault_ns_per_page: Some(9500.0), fault_spread_pct: Some(12.5), free_areas: vec![5, 4, 3, 2, 1, 0, 0, 0, 0, 7, 9], source: "test".into() }),
            fault: Some(FaultCosts {
                ns_per_fault: [("4kB".to_string(), 900.0), ("2048kB".to_string(), 90_000.0)].into(),
                zero_page_read_ns: 600.0,
                touch_ns_per_page: 20.0,
                syscall_ns: 1500.0,
                fill_ns_per_fault: [("4kB".to_string(), 1300.0)].into(),
                free_ns_per_folio: [("4kB".to_string(), 200.0), ("2048kB".to_string(), 9000.0)].into(),
                spread_pct: [("fault 4kB".to_string(), 10.0)].into(),
                source: "test".into(),
                pressure: PressureCosts { swapout_ns_per_page: 3000.0, compact_ns_per_block: 20_000.0, ..Default::default() },
            }),
        };
        assert_eq!(MachineProfile::parse("p.toml", &p.to_toml()).unwrap(), p);
        // A program's fault: the fill figure where measured, else the fault's, plus the free.
        let f = p.fault.as_ref().unwrap();
        assert_eq!((f.program_fault_ns("4kB"), f.program_fault_ns("2048kB"), f.program_fault_ns("64kB")), (Some(1500.0), Some(99_000.0), None));
        let err = MachineProfile::parse("p.toml", "[machine]\nnme = \"x\"\n").unwrap_err().to_string();
        assert!(err.starts_with("p.toml: ") && err.contains("line 2") && err.contains("nme"), "{err}");
    }

    #[test]
    fn pin_section_round_trips_and_charges_folios_and_pages() {
        let text = "[machine]\nname = \"vm\"\n\n[pin]\nper_call_ns = 900.0\nper_folio_ns = 40.0\nper_page_ns = 2.5\nper_pmd_page_ns = 0.5\ncompanion_scan_ns = 4.0\n";
        let p = MachineProfile::parse("p.toml", text).unwrap();
        let pin = p.pin.clone().unwrap();
        // A 1 MiB read into 64 KiB folios: 16 folios, 256 PTE-mapped pages: 16·40 + 256·2.5 = 1280 ns.
        assert_eq!(pin.pin_ns(16, 256, 0), 1280.0);
        // Into a PMD THP: 1 folio, 256 PMD-mapped pages: 40 + 128 = 168 ns.
        assert_eq!(pin.pin_ns(1, 0, 256), 168.0);
        // The companion adds its call and 0+1+...+15 = 120 compares: 900 + 1280 + 480.
        assert_eq!(pin.companion_ns(16, 256, 0, 0, 120), 2660.0);
        assert_eq!(MachineProfile::parse("p.toml", &p.to_toml()).unwrap(), p);
        // A profile without [pin] stays without it.
        assert!(MachineProfile::parse("p.toml", "[machine]\n").unwrap().pin.is_none());
        let err = MachineProfile::parse("p.toml", "[pin]\nper_folio_ns = 1.0\n").unwrap_err().to_string();
        assert!(err.contains("per_page_ns"), "{err}");
    }
}
