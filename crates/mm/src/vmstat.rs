//! What the model counts besides the kernel's own counters (those live in `uapi::Counters`,
//! bumped where the kernel bumps them): per-process fault and RSS counts, and why a fault did
//! not get a given folio size.
//!
//! Kernel sources (6.18): `mm/vmstat.c` (`count_vm_event`), `include/linux/mm.h`
//! (`add_mm_counter`, MM_ANONPAGES), `mm/memory.c: mm_account_fault` (min_flt).

use mm_types::PMD_ORDER;

/// Why a fault did not get a folio of some enabled size. Model only: the kernel keeps no such
/// record. Checked in the order the kernel checks, the first that applies is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FallbackReason {
    /// prctl(PR_SET_THP_DISABLE) on this process (MMF_DISABLE_THP_*).
    PrctlDisabled,
    /// MADV_NOHUGEPAGE on the VMA.
    VmaNohugepage,
    /// The size is `madvise` (or `inherit` with top-level `madvise`) and the VMA lacks
    /// MADV_HUGEPAGE.
    NotMadvised,
    /// The naturally aligned block around the address is not inside the VMA.
    VmaRange,
    /// PMD only: a page table already exists for this 2 MiB, so the PMD path is not tried.
    PteTableExists,
    /// mTHP: a read fault maps the shared zero page; sizes are only chosen on write faults.
    ReadFault,
    /// mTHP: some PTE in the aligned block is already populated (a page, the zero page).
    PteRangePopulated,
    /// A write to a zero-page PTE copies one 4 KiB page (`wp_page_copy`).
    ZeroPageCow,
    /// A write to an anon page that fork shared (and the other side still maps) copies one
    /// 4 KiB page (`wp_page_copy`); a shared huge PMD is split first.
    ForkCow,
    /// The buddy allocator had no free block of this order above the watermark.
    AllocFailed,
    /// mTHP with `anon_beside_full=1` (a knob of this machine kind's kernel build, not of
    /// upstream 6.18): no neighbouring block of the same order is fully populated.
    BesideNotFull,
    /// mTHP: the VMA is registered with a userfaultfd (`userfaultfd_armed`): `alloc_anon_folio`
    /// keeps per-page fault fidelity and takes order 0 before it looks at any size.
    UserfaultfdArmed,
}

impl FallbackReason {
    pub const ALL: [FallbackReason; 12] = [
        FallbackReason::PrctlDisabled,
        FallbackReason::VmaNohugepage,
        FallbackReason::NotMadvised,
        FallbackReason::VmaRange,
        FallbackReason::PteTableExists,
        FallbackReason::ReadFault,
        FallbackReason::PteRangePopulated,
        FallbackReason::ZeroPageCow,
        FallbackReason::ForkCow,
        FallbackReason::AllocFailed,
        FallbackReason::BesideNotFull,
        FallbackReason::UserfaultfdArmed,
    ];
    pub fn name(self) -> &'static str {
        match self {
            FallbackReason::PrctlDisabled => "prctl_thp_disabled",
            FallbackReason::VmaNohugepage => "vma_nohugepage",
            FallbackReason::NotMadvised => "not_madvised",
            FallbackReason::VmaRange => "vma_range",
            FallbackReason::PteTableExists => "pte_table_exists",
            FallbackReason::ReadFault => "read_fault",
            FallbackReason::PteRangePopulated => "pte_range_populated",
            FallbackReason::ZeroPageCow => "zero_page_cow",
            FallbackReason::ForkCow => "fork_cow",
            FallbackReason::AllocFailed => "alloc_failed",
            FallbackReason::BesideNotFull => "beside_not_full",
            FallbackReason::UserfaultfdArmed => "userfaultfd_armed",
        }
    }
    /// One line for `thplab explain` and the docs.
    pub fn describe(self) -> &'static str {
        match self {
            FallbackReason::PrctlDisabled => "prctl(PR_SET_THP_DISABLE) disables THP for this process",
            FallbackReason::VmaNohugepage => "the VMA has MADV_NOHUGEPAGE",
            FallbackReason::NotMadvised => "the size needs MADV_HUGEPAGE and the VMA lacks it",
            FallbackReason::VmaRange => "the naturally aligned block is not inside the VMA",
            FallbackReason::PteTableExists => "a PTE table already covers the 2 MiB, so no PMD fault",
            FallbackReason::ReadFault => "read faults map the shared zero page, never an mTHP",
            FallbackReason::PteRangePopulated => "a PTE in the aligned block is already populated",
            FallbackReason::ZeroPageCow => "writes to the zero page copy one 4 KiB page",
            FallbackReason::ForkCow => "writes to a page shared with another process since fork copy one 4 KiB page",
            FallbackReason::AllocFailed => "no free block of that order above the min watermark",
            FallbackReason::BesideNotFull => "anon_beside_full=1 and no neighbouring block of that size is fully populated",
            FallbackReason::UserfaultfdArmed => "the VMA is registered with a userfaultfd, which keeps faults to 4 KiB pages",
        }
    }
}

/// Per-process and model-only statistics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelStats {
    /// `current->min_flt`.
    pub minflt: u64,
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
    pub scan_results: std::collections::BTreeMap<crate::khugepaged::ScanResult, u64>,
    /// The largest Rss and the census near it (`crate::peak`).
    pub peak: crate::peak::PeakState,
    /// `--explain`: the decisions of the faults in a range, when one is explained.
    pub explain: Option<Box<crate::explain::ExplainLog>>,
}

impl ModelStats {
    pub fn fallback(&mut self, order: u8, reason: FallbackReason) {
        self.fallbacks[order as usize][reason as usize] += 1;
    }
}
