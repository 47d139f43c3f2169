//! What the model counts per mm besides the kernel's vm events (those are `thp_abi::Counters`,
//! `Kernel::counters`, bumped where the kernel calls `count_vm_event`, mm/vmstat.c): the
//! per-mm counts the kernel keeps too (MM_ANONPAGES, `min_flt`) and the model's own records
//! beside them (fallback reasons, collapse outcomes, the peak, the `--explain` log).
//!
//! Kernel sources (6.18): `include/linux/mm.h` (`add_mm_counter`, MM_ANONPAGES,
//! MM_SHMEMPAGES), `mm/memory.c: mm_account_fault` (min_flt).

use mm_types::PMD_ORDER;

use crate::khugepaged::ScanResult;
use crate::model::explain::ExplainLog;
use crate::model::fallbacks::FallbackReason;
use crate::model::peak::PeakState;

/// Per-process and model-only statistics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelStats {
    /// `current->min_flt`.
    pub minflt: u64,
    /// Major faults (`maj_flt`): swap-ins (`do_swap_page`'s VM_FAULT_MAJOR).
    pub majflt: u64,
    /// MM_SWAPENTS: swap entries in this mm's page tables.
    pub swapents: u64,
    /// MM_ANONPAGES, in pages.
    pub anon_rss_pages: u64,
    /// MM_SHMEMPAGES, in pages.
    pub shmem_rss_pages: u64,
    /// PMD mappings of shmem folios (NR_SHMEM_PMDMAPPED, in PMDs).
    pub shmem_pmd_mapped: u64,
    /// `[order][reason]`: faults that did not get `order` for `reason`.
    pub fallbacks: [[u64; FallbackReason::ALL.len()]; PMD_ORDER as usize + 1],
    /// Accesses that hit an existing mapping (no fault).
    pub hits: u64,
    /// Read faults that mapped the shared zero page or the huge zero folio (`do_anonymous_page`
    /// and `do_huge_pmd_anonymous_page` without FAULT_FLAG_WRITE).
    pub zero_page_faults: u64,
    /// Page-table pages allocated (`PageTables` in meminfo, as a count).
    pub pgtable_pages: u64,
    /// Write faults on anon pages shared by fork that copied the page (`wp_page_copy`).
    pub cow_copied: u64,
    /// Write faults on write-protected anon pages that reused the page (`wp_page_reuse`, and
    /// `do_huge_pmd_wp_page` reusing a whole PMD).
    pub cow_reused: u64,
    /// How every collapse attempt ended (`enum scan_result`).
    pub scan_results: std::collections::BTreeMap<ScanResult, u64>,
    /// The largest Rss and the census near it (`crate::model::peak`).
    pub peak: PeakState,
    /// `--explain`: the decisions of the faults in a range, when one is explained.
    pub explain: Option<Box<ExplainLog>>,
}

impl ModelStats {
    pub fn fallback(&mut self, order: u8, reason: FallbackReason) {
        self.fallbacks[order as usize][reason as usize] += 1;
    }
}
