//! Typed keys for the kernel's closed sets of names, spelled as the kernel spells them: the
//! `thp_*` lines of /proc/vmstat ([`VmStatKey`]), the files of `hugepages-<N>kB/stats/`
//! ([`MthpStatKey`]), folio sizes (`64kB`, [`FolioSize`]), the per-size sysfs directories
//! (`hugepages-64kB`, [`SizeDir`]), the knob paths under /sys/kernel/mm/transparent_hugepage
//! ([`KnobPath`]), the /proc/meminfo fields a result keeps ([`MeminfoKey`]) and the model's
//! fallback reasons ([`FallbackKey`], `not_madvised`; the model's names, the kernel has none).
//!
//! Each is a [`Key`]: a member of the closed set, or another name (`known()` None) the live
//! kernel printed that the set does not hold (another build's vmstat line or knob, a /proc/meminfo field), so
//! that what a live run reads is kept as it was read. A key serialises as its kernel name, and
//! compares and hashes as that string. Names order as strings (`Borrow<str>`, `Borrow<String>`:
//! a `BTreeMap` keyed by them prints in the order a `BTreeMap<String, _>` did and
//! `.get("thp_fault_alloc")` finds it), except sizes ([`FolioSize`], [`SizeDir`]), which order by
//! the folio order they name (`4kB < 64kB < 2048kB`, names no order has last, by name), so a map
//! keyed by sizes iterates smallest first; the result schema serialises such maps with
//! [`serialize_by_name`], which keeps their JSON in the order of the names as strings.
//!
//! Kernel sources (6.18): `include/linux/vm_event_item.h`, `mm/vmstat.c: vmstat_text`,
//! `include/linux/huge_mm.h: enum mthp_stat_item`, `mm/huge_memory.c: thpsize_create`,
//! `hugepage_init_sysfs`, `mm/khugepaged.c: khugepaged_attr`, `fs/proc/meminfo.c:
//! meminfo_proc_show`.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

use mm_types::Order;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::counters::{MthpStat, VmEvent};
use crate::fallbacks::FallbackReason;

/// A closed set of kernel names: each member has one name, and a name names at most one member.
pub trait KernelName: Copy + Eq + 'static {
    /// The kernel's spelling.
    fn name(self) -> &'static str;
    /// The member the kernel spells `text`, if any.
    fn from_name(text: &str) -> Option<Self>;
    /// The folio order a size names: keys of a set that has it (sizes) order by it, those of
    /// the other sets (None, the default) by name.
    fn size_order(self) -> Option<Order> {
        None
    }
}

/// A set whose keys order by name, as strings: its keys borrow as `str` and `String`, so maps
/// keyed by them answer `.get("name")` (sizes, which order by size, do not).
pub trait NameOrdered: KernelName {}

impl NameOrdered for VmEvent {}
impl NameOrdered for MthpStat {}
impl NameOrdered for Knob {}
impl NameOrdered for Meminfo {}
impl NameOrdered for FallbackReason {}

impl KernelName for FallbackReason {
    fn name(self) -> &'static str {
        FallbackReason::name(self)
    }
    fn from_name(text: &str) -> Option<Self> {
        FallbackReason::ALL.into_iter().find(|r| r.name() == text)
    }
}

/// The /proc/meminfo fields a result keeps (kB), as `meminfo_proc_show` spells them; a live
/// run's other fields are kept as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Meminfo {
    /// `Shmem`: shmem, tmpfs and /dev/shm pages, SysV shm.
    Shmem,
    /// `ShmemHugePages`: of those, in PMD-size folios.
    ShmemHugePages,
    /// `ShmemPmdMapped`: PMD-mapped shmem folios.
    ShmemPmdMapped,
    /// `SwapTotal`: swap space (under memory pressure only).
    SwapTotal,
    /// `SwapFree`: swap space not in use (under memory pressure only).
    SwapFree,
    /// `HugePages_Total`: the default (2 MiB) hugetlb pool's pages, surplus included (a count,
    /// not kB; in results only when the run uses hugetlb, as are the four below).
    HugePagesTotal,
    /// `HugePages_Free`: of those, not in use.
    HugePagesFree,
    /// `HugePages_Rsvd`: reserved at mmap and not yet faulted in.
    HugePagesRsvd,
    /// `HugePages_Surp`: beyond `nr_hugepages`, allocated under `nr_overcommit_hugepages`.
    HugePagesSurp,
    /// `Hugetlb`: every pool's memory (kB).
    Hugetlb,
}

impl Meminfo {
    pub const ALL: [Meminfo; 10] = [
        Meminfo::Shmem,
        Meminfo::ShmemHugePages,
        Meminfo::ShmemPmdMapped,
        Meminfo::SwapTotal,
        Meminfo::SwapFree,
        Meminfo::HugePagesTotal,
        Meminfo::HugePagesFree,
        Meminfo::HugePagesRsvd,
        Meminfo::HugePagesSurp,
        Meminfo::Hugetlb,
    ];
    /// The hugetlb lines (`hugetlb_report_meminfo`; `Hugepagesize` is a constant, not kept).
    pub const HUGETLB: [Meminfo; 5] = [Meminfo::HugePagesTotal, Meminfo::HugePagesFree, Meminfo::HugePagesRsvd, Meminfo::HugePagesSurp, Meminfo::Hugetlb];
}

impl KernelName for Meminfo {
    fn name(self) -> &'static str {
        match self {
            Meminfo::Shmem => "Shmem",
            Meminfo::ShmemHugePages => "ShmemHugePages",
            Meminfo::ShmemPmdMapped => "ShmemPmdMapped",
            Meminfo::SwapTotal => "SwapTotal",
            Meminfo::SwapFree => "SwapFree",
            Meminfo::HugePagesTotal => "HugePages_Total",
            Meminfo::HugePagesFree => "HugePages_Free",
            Meminfo::HugePagesRsvd => "HugePages_Rsvd",
            Meminfo::HugePagesSurp => "HugePages_Surp",
            Meminfo::Hugetlb => "Hugetlb",
        }
    }
    fn from_name(text: &str) -> Option<Self> {
        Meminfo::ALL.into_iter().find(|m| m.name() == text)
    }
}

impl KernelName for VmEvent {
    fn name(self) -> &'static str {
        VmEvent::name(self)
    }
    fn from_name(text: &str) -> Option<Self> {
        VmEvent::from_name(text)
    }
}

impl KernelName for MthpStat {
    fn name(self) -> &'static str {
        MthpStat::name(self)
    }
    fn from_name(text: &str) -> Option<Self> {
        MthpStat::from_name(text)
    }
}

/// Folio sizes by order, 4 KiB pages: `4kB` (order 0) to `1048576kB` (order 18, a 1 GiB page).
const SIZE_LABELS: [&str; 19] = [
    "4kB", "8kB", "16kB", "32kB", "64kB", "128kB", "256kB", "512kB", "1024kB", "2048kB", "4096kB",
    "8192kB", "16384kB", "32768kB", "65536kB", "131072kB", "262144kB", "524288kB", "1048576kB",
];
/// The per-size sysfs directories by order (6.18 has `hugepages-8kB` ..= `hugepages-2048kB` on
/// x86-64; the others name sizes other builds and architectures have).
const SIZE_DIRS: [&str; 19] = [
    "hugepages-4kB", "hugepages-8kB", "hugepages-16kB", "hugepages-32kB", "hugepages-64kB",
    "hugepages-128kB", "hugepages-256kB", "hugepages-512kB", "hugepages-1024kB",
    "hugepages-2048kB", "hugepages-4096kB", "hugepages-8192kB", "hugepages-16384kB",
    "hugepages-32768kB", "hugepages-65536kB", "hugepages-131072kB", "hugepages-262144kB",
    "hugepages-524288kB", "hugepages-1048576kB",
];

/// A folio size as the census and `folios` name it: `64kB` is `SizeLabel(Order(4))`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeLabel(pub Order);

impl KernelName for SizeLabel {
    fn name(self) -> &'static str {
        SIZE_LABELS[self.0 .0 as usize]
    }
    fn from_name(text: &str) -> Option<Self> {
        SIZE_LABELS.iter().position(|l| *l == text).map(|o| SizeLabel(Order(o as u8)))
    }
    fn size_order(self) -> Option<Order> {
        Some(self.0)
    }
}

/// A per-size sysfs directory: `hugepages-64kB` is `SizeDirName(Order(4))`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeDirName(pub Order);

impl KernelName for SizeDirName {
    fn name(self) -> &'static str {
        SIZE_DIRS[self.0 .0 as usize]
    }
    fn from_name(text: &str) -> Option<Self> {
        SIZE_DIRS.iter().position(|l| *l == text).map(|o| SizeDirName(Order(o as u8)))
    }
    fn size_order(self) -> Option<Order> {
        Some(self.0)
    }
}

/// Every knob path of upstream 6.18 that [`crate::ThpSettings`] models, plus `anon_beside_full`
/// (this machine kind's build), relative to the THP sysfs directory: the paths of
/// `ThpSettings::knobs` (a test checks they agree).
const KNOB_PATHS: &[&str] = &[
    "hugepages-8kB/shmem_enabled",
    "hugepages-16kB/enabled",
    "hugepages-16kB/shmem_enabled",
    "hugepages-32kB/enabled",
    "hugepages-32kB/shmem_enabled",
    "hugepages-64kB/enabled",
    "hugepages-64kB/shmem_enabled",
    "hugepages-128kB/enabled",
    "hugepages-128kB/shmem_enabled",
    "hugepages-256kB/enabled",
    "hugepages-256kB/shmem_enabled",
    "hugepages-512kB/enabled",
    "hugepages-512kB/shmem_enabled",
    "hugepages-1024kB/enabled",
    "hugepages-1024kB/shmem_enabled",
    "hugepages-2048kB/enabled",
    "hugepages-2048kB/shmem_enabled",
    "enabled",
    "defrag",
    "shmem_enabled",
    "use_zero_page",
    "shrink_underused",
    "khugepaged/defrag",
    "khugepaged/max_ptes_none",
    "khugepaged/max_ptes_swap",
    "khugepaged/max_ptes_shared",
    "khugepaged/pages_to_scan",
    "khugepaged/scan_sleep_millisecs",
    "khugepaged/alloc_sleep_millisecs",
    "anon_beside_full",
];

/// A knob path the model knows: an index into the table of known paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Knob(u8);

impl KernelName for Knob {
    fn name(self) -> &'static str {
        KNOB_PATHS[self.0 as usize]
    }
    fn from_name(text: &str) -> Option<Self> {
        KNOB_PATHS.iter().position(|p| *p == text).map(|i| Knob(i as u8))
    }
}

/// A name of the closed set `T`, or another name as it was read (`known` None). The name is
/// kept as text too, so that the key also borrows as `&String` (maps keyed by it answer
/// `.get(&name)` as they did when keyed by `String`).
#[derive(Clone)]
pub struct Key<T: KernelName> {
    name: String,
    known: Option<T>,
}

/// A `thp_*` line of /proc/vmstat (or another name a live snapshot holds).
pub type VmStatKey = Key<VmEvent>;
/// A file of `hugepages-<N>kB/stats/`.
pub type MthpStatKey = Key<MthpStat>;
/// A folio size, `4kB`, `64kB`, `2048kB`.
pub type FolioSize = Key<SizeLabel>;
/// A per-size directory, `hugepages-64kB`.
pub type SizeDir = Key<SizeDirName>;
/// A /proc/meminfo field, `ShmemHugePages`.
pub type MeminfoKey = Key<Meminfo>;
/// A fallback reason of the model, `not_madvised`.
pub type FallbackKey = Key<FallbackReason>;
/// A knob path, `enabled`, `hugepages-64kB/enabled`, `khugepaged/max_ptes_none`; unknown for
/// the knobs of other builds that settings carry (`ThpSettings::unknown`).
pub type KnobPath = Key<Knob>;

impl<T: KernelName> Key<T> {
    /// The kernel's spelling (or the name as read).
    pub fn as_str(&self) -> &str {
        &self.name
    }
    /// The member of the set, or None for another name.
    pub fn known(&self) -> Option<T> {
        self.known
    }
}

impl FolioSize {
    /// The folio size of `order`.
    pub fn of(order: Order) -> FolioSize {
        Key::from(SizeLabel(order))
    }
    /// The order of a size the table holds.
    pub fn order(&self) -> Option<Order> {
        self.known().map(|s| s.0)
    }
    /// The size in kB (`64` for `64kB`), of a size the table holds.
    pub fn kb(&self) -> Option<u64> {
        self.order().map(|o| 4u64 << o.0)
    }
}

impl SizeDir {
    /// The sysfs directory of `order`.
    pub fn of(order: Order) -> SizeDir {
        Key::from(SizeDirName(order))
    }
    /// The order of a directory the table holds.
    pub fn order(&self) -> Option<Order> {
        self.known().map(|s| s.0)
    }
}

impl<T: KernelName> From<T> for Key<T> {
    fn from(t: T) -> Self {
        Key { name: t.name().to_string(), known: Some(t) }
    }
}

impl<T: KernelName> From<&str> for Key<T> {
    fn from(s: &str) -> Self {
        Key { name: s.to_string(), known: T::from_name(s) }
    }
}

impl<T: KernelName> From<String> for Key<T> {
    fn from(s: String) -> Self {
        let known = T::from_name(&s);
        Key { name: s, known }
    }
}

impl<T: KernelName> From<&String> for Key<T> {
    fn from(s: &String) -> Self {
        Key::from(s.as_str())
    }
}

impl<T: KernelName> From<Key<T>> for String {
    fn from(k: Key<T>) -> String {
        k.name
    }
}

impl<T: KernelName> Deref for Key<T> {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl<T: NameOrdered> Borrow<str> for Key<T> {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl<T: NameOrdered> Borrow<String> for Key<T> {
    fn borrow(&self) -> &String {
        &self.name
    }
}

impl<T: KernelName> AsRef<str> for Key<T> {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl<T: KernelName> PartialEq for Key<T> {
    fn eq(&self, o: &Self) -> bool {
        self.as_str() == o.as_str()
    }
}

impl<T: KernelName> Eq for Key<T> {}

impl<T: KernelName> PartialEq<str> for Key<T> {
    fn eq(&self, o: &str) -> bool {
        self.as_str() == o
    }
}

impl<T: KernelName> PartialEq<&str> for Key<T> {
    fn eq(&self, o: &&str) -> bool {
        self.as_str() == *o
    }
}

impl<T: KernelName> PartialEq<String> for Key<T> {
    fn eq(&self, o: &String) -> bool {
        self.as_str() == o.as_str()
    }
}

/// Sizes by the order they name (names no order has after them, by name); the other sets by
/// their names as strings, so that maps keep the order of string keys.
impl<T: KernelName> Ord for Key<T> {
    fn cmp(&self, o: &Self) -> Ordering {
        let rank = |k: &Self| k.known.and_then(T::size_order).map_or(u16::MAX, |o| u16::from(o.0));
        rank(self).cmp(&rank(o)).then_with(|| self.as_str().cmp(o.as_str()))
    }
}

impl<T: KernelName> PartialOrd for Key<T> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl<T: KernelName> Hash for Key<T> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.as_str().hash(h)
    }
}

/// As the string: width, fill and alignment apply (`{:>8}` pads as it pads a `&str`).
impl<T: KernelName> fmt::Display for Key<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl<T: KernelName> fmt::Debug for Key<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl<T: KernelName> Serialize for Key<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de, T: KernelName> Deserialize<'de> for Key<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Key::from)
    }
}

/// Serialises a map in the order of its keys' names as strings (`1024kB` before `128kB`), the
/// order the result JSON has always had, whatever order the keys sort in (sizes sort by size):
/// `#[serde(serialize_with = "thp_abi::keys::serialize_by_name")]` on a size-keyed map.
pub fn serialize_by_name<K, V, S>(m: &BTreeMap<K, V>, s: S) -> Result<S::Ok, S::Error>
where
    K: Deref<Target = str> + Serialize,
    V: Serialize,
    S: Serializer,
{
    let mut entries: Vec<(&K, &V)> = m.iter().collect();
    entries.sort_by(|a, b| (**a.0).cmp(&**b.0));
    s.collect_map(entries)
}

#[cfg(test)]
mod tests;
