//! Why a fault did not get a folio of some size the settings enable: the model's record, which
//! the kernel does not keep (it counts only `thp_fault_fallback` and the per-size
//! `anon_fault_fallback`). Each reason names the check of the fault path that refused. Here
//! beside the kernel's names because the result keys its `fallbacks` by them
//! ([`crate::keys::FallbackKey`]); the model (`mm::model::fallbacks`) counts them.
//!
//! Kernel sources (6.18): `mm/memory.c: alloc_anon_folio`, `do_anonymous_page`, `wp_page_copy`,
//! `mm/huge_memory.c: __thp_vma_allowable_orders`, `do_huge_pmd_anonymous_page` (the checks
//! whose order the reasons follow).

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
