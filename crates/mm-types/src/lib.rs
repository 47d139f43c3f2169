//! Quantities of the memory-management model, each its own type.
//!
//! Kernel sources: `arch/x86/include/asm/page_types.h` (PAGE_SHIFT; other base page sizes in
//! [`geometry`], from `arch/arm64/include/asm/pgtable-hwdef.h`), `include/linux/pgtable.h`
//! (PMD_SHIFT), `include/linux/huge_mm.h` (`highest_order`, `next_order`, THP_ORDERS_ALL_ANON),
//! `include/linux/mmzone.h` (MAX_PAGE_ORDER), Linux 6.18.
//!
//! Index, count and size are distinct types so that an off-by-a-shift cannot compile.
//! This crate does no I/O and has no dependencies.

pub mod geometry;
pub mod prng;

pub use geometry::{Granule, PageGeometry};

use std::fmt;

/// log2 of the base page size (4 KiB), x86-64 and arm64-4K.
pub const PAGE_SHIFT: u32 = 12;
pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;
/// PMD order with 4 KiB pages: a PMD maps 512 PTEs (2 MiB).
pub const PMD_ORDER: u8 = 9;
pub const PMD_SHIFT: u32 = PAGE_SHIFT + PMD_ORDER as u32;
pub const PMD_SIZE: u64 = 1 << PMD_SHIFT;
pub const HPAGE_PMD_NR: u32 = 1 << PMD_ORDER;
/// A PMD table covers 1 GiB (one PUD entry).
pub const PUD_SHIFT: u32 = PMD_SHIFT + 9;
pub const PUD_SIZE: u64 = 1 << PUD_SHIFT;
/// Largest buddy order (`MAX_PAGE_ORDER`, 4 MiB blocks).
pub const MAX_PAGE_ORDER: u8 = 10;
/// x86-64 4-level user address space end (`TASK_SIZE_MAX`).
pub const TASK_SIZE: u64 = (1 << 47) - PAGE_SIZE;

const _: () = assert!(PMD_ORDER == 9 && PMD_SIZE == 2 * 1024 * 1024);

/// Page frame number: index of a 4 KiB frame in simulated physical memory.
#[doc(alias = "pfn")]
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Pfn(pub u32);

impl Pfn {
    pub fn idx(self) -> usize {
        self.0 as usize
    }
    pub fn add(self, n: u32) -> Pfn {
        Pfn(self.0 + n)
    }
    pub fn is_aligned(self, order: Order) -> bool {
        self.0 & (order.nr_pages() - 1) == 0
    }
}

impl fmt::Debug for Pfn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pfn:{:#x}", self.0)
    }
}

/// A user virtual address.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Vaddr(pub u64);

impl Vaddr {
    pub fn align_down(self, order: Order) -> Vaddr {
        Vaddr(self.0 & !(order.size() - 1))
    }
    pub fn align_up(self, order: Order) -> Vaddr {
        let mask = order.size() - 1;
        Vaddr((self.0 + mask) & !mask)
    }
    pub fn is_aligned(self, order: Order) -> bool {
        self.0 & (order.size() - 1) == 0
    }
    /// Virtual page number.
    pub fn vpn(self) -> u64 {
        self.0 >> PAGE_SHIFT
    }
    /// Index of this address's PTE inside its page table (0..512).
    pub fn pte_index(self) -> usize {
        ((self.0 >> PAGE_SHIFT) & 511) as usize
    }
    /// Index of this address's PMD entry inside its PMD table (0..512).
    pub fn pmd_index(self) -> usize {
        ((self.0 >> PMD_SHIFT) & 511) as usize
    }
    pub fn add(self, bytes: u64) -> Vaddr {
        Vaddr(self.0 + bytes)
    }
}

impl fmt::Debug for Vaddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl fmt::Display for Vaddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// A folio or buddy-block order: `2^order` base pages.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Order(pub u8);

impl Order {
    pub const BASE: Order = Order(0);
    pub const PMD: Order = Order(PMD_ORDER);

    pub fn nr_pages(self) -> u32 {
        1 << self.0
    }
    pub fn size(self) -> u64 {
        PAGE_SIZE << self.0
    }
    pub fn size_kb(self) -> u64 {
        self.size() / 1024
    }
    /// The sysfs directory name of this size: `hugepages-64kB`.
    pub fn sysfs_dir(self) -> String {
        format!("hugepages-{}kB", self.size_kb())
    }
    /// A folio size label as the census prints it: `64kB`.
    pub fn label(self) -> String {
        format!("{}kB", self.size_kb())
    }
    /// The order whose size is `kb` KiB, if it is a power-of-two number of pages.
    pub fn from_size_kb(kb: u64) -> Option<Order> {
        if kb < 4 || !kb.is_power_of_two() {
            return None;
        }
        let order = (kb / 4).trailing_zeros();
        (order <= 30).then_some(Order(order as u8))
    }
}

impl fmt::Debug for Order {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "order-{}", self.0)
    }
}

/// A set of orders as a bitmask, as `unsigned long orders` in `huge_mm.h`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Orders(pub u32);

impl Orders {
    pub const NONE: Orders = Orders(0);
    /// THP_ORDERS_ALL_ANON: orders 2..=PMD_ORDER (order 1 has no room for `_deferred_list`).
    pub const ALL_ANON: Orders = Orders(((1 << (PMD_ORDER + 1)) - 1) & !0b11);
    /// THP_ORDERS_ALL_FILE_DEFAULT on x86-64: orders 1..=MAX_PAGECACHE_ORDER (= PMD_ORDER).
    pub const ALL_FILE: Orders = Orders(((1 << (PMD_ORDER + 1)) - 1) & !0b1);

    pub fn single(order: Order) -> Orders {
        Orders(1 << order.0)
    }
    /// Orders strictly below `order`: `BIT(order) - 1`.
    pub fn below(order: Order) -> Orders {
        Orders((1 << order.0) - 1)
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    pub fn contains(self, order: Order) -> bool {
        self.0 & (1 << order.0) != 0
    }
    pub fn with(self, order: Order) -> Orders {
        Orders(self.0 | (1 << order.0))
    }
    pub fn without(self, order: Order) -> Orders {
        Orders(self.0 & !(1 << order.0))
    }
    pub fn and(self, other: Orders) -> Orders {
        Orders(self.0 & other.0)
    }
    pub fn or(self, other: Orders) -> Orders {
        Orders(self.0 | other.0)
    }
    /// `highest_order()`.
    pub fn highest(self) -> Option<Order> {
        (self.0 != 0).then(|| Order(31 - self.0.leading_zeros() as u8))
    }
    /// `next_order()`: drop `prev` and return the next highest.
    pub fn next_below(&mut self, prev: Order) -> Option<Order> {
        self.0 &= !(1 << prev.0);
        self.highest()
    }
    /// Iterate highest order first.
    pub fn iter_desc(self) -> impl Iterator<Item = Order> {
        (0..32u8).rev().filter(move |o| self.0 & (1 << o) != 0).map(Order)
    }
}

impl fmt::Debug for Orders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v: Vec<u8> = self.iter_desc().map(|o| o.0).collect();
        write!(f, "Orders{v:?}")
    }
}

/// Parse a size such as `4K`, `2M`, `1G`, `12KiB`, `4096` (bytes).
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit() && c != '_').unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num = num.replace('_', "");
    if num.is_empty() {
        return None;
    }
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// Format a byte count the way the workload language writes sizes (largest exact unit).
pub fn format_size(bytes: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if bytes >= (1 << shift) && bytes % (1 << shift) == 0 {
            return format!("{}{}", bytes >> shift, unit);
        }
    }
    format!("{bytes}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_walk_highest_first() {
        let mut o = Orders::single(Order(9)).with(Order(4)).with(Order(2));
        assert_eq!(o.highest(), Some(Order(9)));
        assert_eq!(o.next_below(Order(9)), Some(Order(4)));
        assert_eq!(o.next_below(Order(4)), Some(Order(2)));
        assert_eq!(o.next_below(Order(2)), None);
        assert_eq!(Orders::ALL_ANON.iter_desc().map(|o| o.0).collect::<Vec<_>>(), [9, 8, 7, 6, 5, 4, 3, 2]);
        assert!(!Orders::ALL_ANON.contains(Order(1)));
        assert!(Orders::ALL_FILE.contains(Order(1)));
        assert_eq!(Orders::below(Order::PMD).highest(), Some(Order(8)));
    }

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(parse_size("4K"), Some(4096));
        assert_eq!(parse_size("256M"), Some(256 << 20));
        assert_eq!(parse_size("1GiB"), Some(1 << 30));
        assert_eq!(parse_size("12kb"), Some(12 << 10));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("4Q"), None);
        assert_eq!(format_size(3 << 20), "3M");
        assert_eq!(format_size((256 << 20) + (12 << 10)), "262156K");
        assert_eq!(Order::from_size_kb(64), Some(Order(4)));
        assert_eq!(Order::from_size_kb(2048), Some(Order(9)));
        assert_eq!(Order::from_size_kb(48), None);
        assert_eq!(Order(4).sysfs_dir(), "hugepages-64kB");
    }

    #[test]
    fn vaddr_alignment() {
        let a = Vaddr(0x20_1000);
        assert_eq!(a.align_down(Order::PMD), Vaddr(0x20_0000));
        assert_eq!(a.align_up(Order::PMD), Vaddr(0x40_0000));
        assert_eq!(a.pte_index(), 1);
        assert_eq!(Vaddr(0x4000_0000 + 0x20_0000).pmd_index(), 1);
    }
}
