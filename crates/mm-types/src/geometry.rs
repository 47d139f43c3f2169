//! Page geometry: what follows from the base page size (the arm64 translation granule).
//!
//! Kernel sources (Linux 6.18): `arch/arm64/Kconfig` (ARM64_{4K,16K,64K}_PAGES, PGTABLE_LEVELS,
//! ARM64_CONT_PTE_SHIFT, ARM64_CONT_PMD_SHIFT, ARCH_FORCE_MAX_ORDER),
//! `arch/arm64/include/asm/pgtable-hwdef.h` (PTDESC_TABLE_SHIFT, ARM64_HW_PGTABLE_LEVELS,
//! ARM64_HW_PGTABLE_LEVEL_SHIFT, PMD_SHIFT, PUD_SHIFT, CONT_PTES, CONT_PMDS),
//! `include/linux/huge_mm.h` (THP_ORDERS_ALL_ANON, THP_ORDERS_ALL_FILE_DEFAULT),
//! `include/linux/pagemap.h` (MAX_PAGECACHE_ORDER = min(MAX_XAS_ORDER, HPAGE_PMD_ORDER)),
//! `include/linux/xarray.h` (XA_CHUNK_SHIFT), `mm/huge_memory.c` `hugepage_init_sysfs` (one
//! `hugepages-<size>kB` directory per order of THP_ORDERS_ALL_ANON | THP_ORDERS_ALL_FILE_DEFAULT),
//! `include/linux/mmzone.h` (MAX_PAGE_ORDER = CONFIG_ARCH_FORCE_MAX_ORDER).
//!
//! A descriptor is 8 bytes (PTDESC_ORDER 3), so a table of one page holds `PAGE_SIZE / 8`
//! entries at every level: 512, 2048, 8192. The model takes VA_BITS = 48, the user address space
//! 6.18 gives a process without an mmap hint on every granule: 4 levels with 4 KiB and 16 KiB
//! pages, 3 with 64 KiB. 4 KiB is x86-64's geometry too ([`PageGeometry::X86_4K`] equals the
//! crate's constants); 16 KiB and 64 KiB are arm64 only: model-only on this x86 machine.

use std::fmt;

use crate::{Order, Orders};

/// A base page size the model knows: `--page-size 4K|16K|64K`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Granule {
    #[default]
    K4,
    K16,
    K64,
}

impl Granule {
    pub const ALL: [Granule; 3] = [Granule::K4, Granule::K16, Granule::K64];

    /// `PAGE_SHIFT`.
    pub const fn shift(self) -> u32 {
        match self {
            Granule::K4 => 12,
            Granule::K16 => 14,
            Granule::K64 => 16,
        }
    }
    /// The name `--page-size` takes and prints: `4K`, `16K`, `64K`.
    pub const fn name(self) -> &'static str {
        match self {
            Granule::K4 => "4K",
            Granule::K16 => "16K",
            Granule::K64 => "64K",
        }
    }
    /// `4K`, `16k`, `16KiB`, `65536`: one of the three sizes, else `None`.
    pub fn parse(text: &str) -> Option<Granule> {
        let bytes = crate::parse_size(text)?;
        Granule::ALL.into_iter().find(|g| 1u64 << g.shift() == bytes)
    }
    pub const fn geometry(self) -> PageGeometry {
        PageGeometry::new(self)
    }
}

impl fmt::Display for Granule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The user address space the model gives every granule (ARM64_VA_BITS_48; x86-64 4-level 47
/// bits plus the kernel half: the same page-table shape).
pub const VA_BITS: u32 = 48;
/// `MAX_XAS_ORDER` = XA_CHUNK_SHIFT * 2 - 1 with XA_CHUNK_SHIFT 6 (no CONFIG_BASE_SMALL).
const MAX_XAS_ORDER: u8 = 11;

/// Every size and order that follows from one base page size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PageGeometry {
    pub granule: Granule,
    /// `PAGE_SHIFT`.
    pub page_shift: u32,
    /// `PTDESC_TABLE_SHIFT`: log2 of the entries of a table at any level.
    pub table_shift: u32,
    /// `CONFIG_PGTABLE_LEVELS` with VA_BITS 48.
    pub levels: u32,
    /// `CONFIG_ARM64_CONT_PTE_SHIFT`: log2 of `CONT_PTES`.
    pub cont_pte_order: u32,
    /// `CONFIG_ARM64_CONT_PMD_SHIFT`: log2 of `CONT_PMDS`.
    pub cont_pmd_order: u32,
    /// `MAX_PAGE_ORDER` (`CONFIG_ARCH_FORCE_MAX_ORDER`).
    pub max_page_order: u8,
}

impl PageGeometry {
    /// x86-64 and arm64 with 4 KiB pages: the model's only geometry before `--page-size`.
    pub const X86_4K: PageGeometry = PageGeometry::new(Granule::K4);

    pub const fn new(granule: Granule) -> PageGeometry {
        let page_shift = granule.shift();
        let table_shift = page_shift - 3;
        // ARM64_HW_PGTABLE_LEVELS(va_bits) = DIV_ROUND_UP(va_bits - PAGE_SHIFT, PTDESC_TABLE_SHIFT)
        let levels = (VA_BITS - page_shift).div_ceil(table_shift);
        let (cont_pte_order, cont_pmd_order, max_page_order) = match granule {
            Granule::K4 => (4, 4, 10),
            Granule::K16 => (7, 5, 11),
            Granule::K64 => (5, 5, 13),
        };
        PageGeometry { granule, page_shift, table_shift, levels, cont_pte_order, cont_pmd_order, max_page_order }
    }

    pub const fn page_size(&self) -> u64 {
        1 << self.page_shift
    }
    /// `PTRS_PER_PTE` (= PTRS_PER_PMD = PTRS_PER_PUD).
    pub const fn ptrs_per_table(&self) -> u64 {
        1 << self.table_shift
    }
    /// `ARM64_HW_PGTABLE_LEVEL_SHIFT(n)`: the bytes an entry of level n maps (3 is the PTE).
    pub const fn level_shift(&self, n: u32) -> u32 {
        self.table_shift * (4 - n) + 3
    }
    /// `PMD_SHIFT` (level 2).
    pub const fn pmd_shift(&self) -> u32 {
        self.level_shift(2)
    }
    /// `PUD_SHIFT` (level 1; folded into the PGD with 3 levels).
    pub const fn pud_shift(&self) -> u32 {
        self.level_shift(1)
    }
    pub const fn pmd_size(&self) -> u64 {
        1 << self.pmd_shift()
    }
    /// `HPAGE_PMD_ORDER` = PMD_SHIFT - PAGE_SHIFT.
    pub const fn pmd_order(&self) -> Order {
        Order((self.pmd_shift() - self.page_shift) as u8)
    }
    /// `CONT_PTES`: PTEs one contiguous entry covers.
    pub const fn cont_ptes(&self) -> u64 {
        1 << self.cont_pte_order
    }
    /// `CONT_PTE_SIZE`: 64 KiB, 2 MiB, 2 MiB.
    pub const fn cont_pte_size(&self) -> u64 {
        self.cont_ptes() << self.page_shift
    }
    /// `CONT_PMDS`.
    pub const fn cont_pmds(&self) -> u64 {
        1 << self.cont_pmd_order
    }
    /// `CONT_PMD_SIZE`: 32 MiB, 1 GiB, 16 GiB.
    pub const fn cont_pmd_size(&self) -> u64 {
        self.cont_pmds() << self.pmd_shift()
    }
    /// Bytes of `2^order` base pages.
    pub const fn order_size(&self, order: Order) -> u64 {
        self.page_size() << order.0
    }
    /// The largest buddy block: `2^MAX_PAGE_ORDER` pages (4 MiB, 32 MiB, 512 MiB).
    pub const fn max_block_size(&self) -> u64 {
        self.order_size(Order(self.max_page_order))
    }
    /// THP_ORDERS_ALL_ANON: orders 2..=PMD_ORDER.
    pub const fn thp_orders_all_anon(&self) -> Orders {
        Orders(((1 << (self.pmd_order().0 + 1)) - 1) & !0b11)
    }
    /// `MAX_PAGECACHE_ORDER` = min(MAX_XAS_ORDER, HPAGE_PMD_ORDER): 9, 11, 11 (pagemap.h:
    /// "no 512MB THP on ARM64 with 64KB base page size" in the page cache).
    pub const fn max_pagecache_order(&self) -> Order {
        let p = self.pmd_order().0;
        Order(if p < MAX_XAS_ORDER { p } else { MAX_XAS_ORDER })
    }
    /// THP_ORDERS_ALL_FILE_DEFAULT: orders 1..=MAX_PAGECACHE_ORDER.
    pub const fn thp_orders_all_file(&self) -> Orders {
        Orders(((1 << (self.max_pagecache_order().0 + 1)) - 1) & !0b1)
    }
    /// The orders that have a `hugepages-<size>kB` directory (`hugepage_init_sysfs`).
    pub const fn sysfs_orders(&self) -> Orders {
        Orders(self.thp_orders_all_anon().0 | self.thp_orders_all_file().0)
    }
    /// The directory names, smallest first: `hugepages-8kB` ..= `hugepages-2048kB` with 4 KiB.
    pub fn sysfs_dirs(&self) -> Vec<String> {
        let mut v: Vec<String> = self.sysfs_orders().iter_desc().map(|o| format!("hugepages-{}kB", self.order_size(o) >> 10)).collect();
        v.reverse();
        v
    }
    /// One line for help and errors: levels, entries per table, PMD, contpte, MAX_PAGE_ORDER
    /// and the sysfs size directories.
    pub fn summary(&self) -> String {
        let dirs = self.sysfs_dirs();
        format!(
            "{} levels of {}-entry tables, PMD {} (order {}), contpte {} ({} PTEs), MAX_PAGE_ORDER {}, {} .. {}",
            self.levels,
            self.ptrs_per_table(),
            crate::format_size(self.pmd_size()),
            self.pmd_order().0,
            crate::format_size(self.cont_pte_size()),
            self.cont_ptes(),
            self.max_page_order,
            dirs[0],
            dirs[dirs.len() - 1]
        )
    }
    /// Page-table pages below the PGD (which every mm has) that map every page of
    /// `[start, start + len)` with base pages, by level from the PTE tables up: a table of the
    /// level under level n covers one level-n entry's span (PTE tables one PMD entry's).
    pub fn tables_to_map(&self, start: u64, len: u64) -> Vec<u64> {
        let below_pgd = self.levels - 1;
        if len == 0 {
            return vec![0; below_pgd as usize];
        }
        let last = start + len - 1;
        (0..below_pgd).map(|i| {
            let span = self.level_shift(2 - i);
            (last >> span) - (start >> span) + 1
        }).collect()
    }
}

impl Default for PageGeometry {
    fn default() -> Self {
        PageGeometry::X86_4K
    }
}

// The crate's x86-64 constants are the 4 KiB geometry.
const _: () = {
    let g = PageGeometry::X86_4K;
    assert!(g.page_shift == crate::PAGE_SHIFT && g.pmd_shift() == crate::PMD_SHIFT && g.pud_shift() == crate::PUD_SHIFT);
    assert!(g.pmd_order().0 == crate::PMD_ORDER && g.max_page_order == crate::MAX_PAGE_ORDER && g.levels == 4);
    assert!(g.thp_orders_all_anon().0 == Orders::ALL_ANON.0 && g.thp_orders_all_file().0 == Orders::ALL_FILE.0);
};

#[cfg(test)]
#[path = "geometry_tests.rs"]
mod tests;
