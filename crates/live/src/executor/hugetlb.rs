//! The live side of a workload's hugetlb: its pools as knobs for the settings guard
//! (/sys/kernel/mm/hugepages/hugepages-<kB>kB/nr_hugepages and nr_overcommit_hugepages, beside
//! the THP directory, journalled and restored like every knob), mmap's MAP_HUGETLB flags,
//! memfd_create's MFD_HUGETLB flags, and the hugetlb lines of /proc/meminfo the run reads.
//! Kernel: include/uapi/asm-generic/hugetlb_encode.h (HUGETLB_FLAG_ENCODE_SHIFT 26: the log2 of
//! the page size in bits 26..31 of mmap's and memfd_create's flags), mm/hugetlb.c
//! (`hugetlb_report_meminfo`).

use workload::{HugePage, Workload};

/// `MAP_HUGE_SHIFT` and `MFD_HUGE_SHIFT` (HUGETLB_FLAG_ENCODE_SHIFT).
const HUGE_SHIFT: u32 = 26;

/// The /proc/meminfo lines a hugetlb run reads (as `thp_abi::Meminfo::HUGETLB` names them).
pub const HUGETLB_MEMINFO_FIELDS: &[&str] = &["HugePages_Total", "HugePages_Free", "HugePages_Rsvd", "HugePages_Surp", "Hugetlb"];

/// A pool's knob, relative to the THP directory.
pub fn pool_knob(page: HugePage, knob: &str) -> String {
    format!("../hugepages/hugepages-{}kB/{knob}", page.kb())
}

/// The knobs the guard sets for the workload's `hugetlb_pool` statements: each pool's
/// `nr_overcommit_hugepages` (when given) and `nr_hugepages`. A pool the kernel cannot grow
/// that far makes the guard fail (the value reads back smaller) and restores the rest.
pub fn pool_knobs(w: &Workload) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in &w.hugetlb_pools {
        if let Some(n) = p.overcommit {
            out.push((pool_knob(p.page, "nr_overcommit_hugepages"), n.to_string()));
        }
        out.push((pool_knob(p.page, "nr_hugepages"), p.pages.to_string()));
    }
    out
}

/// mmap(2)'s flags for `mmap ... hugetlb[=SIZE] [shared] [noreserve]`.
pub(crate) fn mmap_flags(page: HugePage, shared: bool, noreserve: bool) -> i32 {
    let share = if shared { libc::MAP_SHARED } else { libc::MAP_PRIVATE };
    let noreserve = if noreserve { libc::MAP_NORESERVE } else { 0 };
    share | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB | noreserve | ((page.shift() as i32) << HUGE_SHIFT)
}

/// memfd_create(2)'s flags for `memfd NAME hugetlb[=SIZE]`.
pub(crate) fn memfd_flags(shift: u32) -> libc::c_uint {
    libc::MFD_HUGETLB | (shift << HUGE_SHIFT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_encode_the_page_size_as_the_kernel_reads_it() {
        // MAP_HUGE_2MB = 21 << 26, MAP_HUGE_1GB = 30 << 26 (linux/mman.h).
        assert_eq!(mmap_flags(HugePage::Size2M, false, false), libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB | (21 << 26));
        assert_eq!(mmap_flags(HugePage::Size1G, true, true) & (0x3f << 26), 30 << 26);
        assert_eq!(memfd_flags(21), libc::MFD_HUGETLB | libc::MFD_HUGE_2MB);
        assert_eq!(memfd_flags(30), libc::MFD_HUGETLB | libc::MFD_HUGE_1GB);
        let w = workload::parse("t", "hugetlb_pool 2M 3 overcommit=1\n").unwrap();
        assert_eq!(
            pool_knobs(&w),
            [
                ("../hugepages/hugepages-2048kB/nr_overcommit_hugepages".to_string(), "1".to_string()),
                ("../hugepages/hugepages-2048kB/nr_hugepages".to_string(), "3".to_string())
            ]
        );
    }
}
