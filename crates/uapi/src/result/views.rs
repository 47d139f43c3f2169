//! Census views: the folio-size map per VMA (`VmaMap`, the shape `thplab observe` prints)
//! and the run at its largest Rss (`Peak`).

use super::*;

/// One VMA and the folios that back it: an entry of `thplab observe`'s `vmas` and of the
/// model's `vmas` (one consumer reads both).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmaMap {
    /// Start and end, hex without `0x`, as /proc/PID/maps.
    pub start: String,
    pub end: String,
    /// `rw-p`, as /proc/PID/maps.
    pub perms: String,
    /// The mapping's name (`[heap]`, a path, `/memfd:x (deleted)`); empty for anonymous memory.
    pub name: String,
    /// `anon`, `shmem`, `file`, or `placeholder` (a replayed mapping the model does not back).
    #[serde(default)]
    pub kind: String,
    /// The process, for the VMAs of a replayed recording (several processes).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pid: Option<u32>,
    pub rss_kb: u64,
    pub anon_huge_kb: u64,
    pub census: Census,
}

impl VmaMap {
    /// The start address as a number.
    pub fn start_addr(&self) -> u64 {
        u64::from_str_radix(&self.start, 16).unwrap_or(0)
    }
    pub fn end_addr(&self) -> u64 {
        u64::from_str_radix(&self.end, 16).unwrap_or(0)
    }
}

/// `kind` of a VMA from its /proc/PID/maps name: shared memory (memfd, /dev/shm, SysV,
/// /dev/zero shared mappings), anonymous memory (no name, `[heap]`, `[stack]`, `[anon:...]`),
/// or a file.
pub fn vma_kind_of_name(name: &str) -> &'static str {
    if name.starts_with("/memfd:") || name.starts_with("/dev/shm/") || name.starts_with("/SYSV") || name.starts_with("/dev/zero") {
        "shmem"
    } else if name.is_empty() || name == "[heap]" || name.starts_with("[stack") || name.starts_with("[anon") {
        "anon"
    } else {
        "file"
    }
}


/// The run at its largest Rss.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peak {
    /// The largest Rss (anonymous and shmem pages mapped) the run reached.
    pub rss_bytes: u64,
    /// AnonHugePages when the census below was taken.
    pub anon_huge_bytes: u64,
    /// The census at the peak (taken before the first operation that unmapped or freed memory
    /// after Rss last grew by a sixteenth or more; at the end when Rss never fell).
    pub census: Census,
    /// The largest number of folios of each size mapped at any moment (`nr_anon` per size,
    /// exact, anonymous only), by size label.
    #[serde(serialize_with = "thp_abi::keys::serialize_by_name")]
    pub max_folios: BTreeMap<FolioSize, u64>,
}
