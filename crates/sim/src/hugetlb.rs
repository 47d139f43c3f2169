//! A workload's hugetlb: its pools set at boot, its MAP_HUGETLB mappings and MFD_HUGETLB
//! memfds (mm's `crate::hugetlb` model, mm/hugetlb.c), and the hugetlb lines of /proc/meminfo
//! in its result, as the live run reads them: each the change from the run's start (after the
//! pool was set) to its end.

use mm::hugetlb::{HugeSize, HugetlbMap, HugetlbMeminfo};
use mm::Kernel;
use thp_abi::Meminfo;
use workload::HugePage;

/// The model's hstate of a workload page size.
pub fn huge_size(p: HugePage) -> HugeSize {
    match p {
        HugePage::Size2M => HugeSize::Pmd,
        HugePage::Size1G => HugeSize::Pud,
    }
}

/// MAP_HUGETLB's backing for `mmap ... hugetlb`.
pub fn anon_map(page: HugePage, shared: bool, noreserve: bool) -> HugetlbMap {
    HugetlbMap { size: huge_size(page), shared, noreserve, file: None }
}

/// The workload's `hugetlb_pool` statements on a freshly booted machine (`nr_hugepages` and
/// `nr_overcommit_hugepages` written before the run). Err(line, message) when the machine's
/// memory cannot hold a pool (the live run fails the same way at the guard).
pub fn set_pools(k: &mut Kernel, pools: &[workload::HugetlbPool]) -> Result<(), (usize, String)> {
    for p in pools {
        let size = huge_size(p.page);
        let got = k.hugetlb_set_pool(size, p.pages);
        if got < p.pages {
            return Err((p.line, format!("the model's memory holds only {got} of the {} {} pages of the pool (give a larger --mem)", p.pages, p.page.word())));
        }
        if let Some(n) = p.overcommit {
            k.hugetlb_set_overcommit(size, n);
        }
    }
    Ok(())
}

/// The meminfo keys a hugetlb run reports, with the value of each in `m`.
pub fn meminfo_values(m: &HugetlbMeminfo) -> [(Meminfo, i64); 5] {
    [
        (Meminfo::HugePagesTotal, m.total as i64),
        (Meminfo::HugePagesFree, m.free as i64),
        (Meminfo::HugePagesRsvd, m.rsvd as i64),
        (Meminfo::HugePagesSurp, m.surp as i64),
        (Meminfo::Hugetlb, m.hugetlb_kb as i64),
    ]
}

/// The result's hugetlb meminfo lines: the change from `start` to the end.
pub fn meminfo_into(r: &mut uapi::RunResult, k: &Kernel, start: &HugetlbMeminfo) {
    for ((key, end), (_, begin)) in meminfo_values(&k.hugetlb_meminfo()).into_iter().zip(meminfo_values(start)) {
        r.meminfo.insert(key.into(), end - begin);
    }
}

/// A recorded mmap's hugetlb backing (MAP_HUGETLB, the page size from the bits at
/// MAP_HUGE_SHIFT: 0 or 21 is 2 MiB, 30 is 1 GiB), or None for any other mapping or size.
pub fn recorded_map(flags: u64) -> Option<HugetlbMap> {
    use linux_abi::mman::{MAP_HUGETLB, MAP_HUGE_SHIFT, MAP_NORESERVE, MAP_SHARED};
    if flags & MAP_HUGETLB == 0 {
        return None;
    }
    let page = match (flags >> MAP_HUGE_SHIFT) & 0x3f {
        0 | 21 => HugePage::Size2M,
        30 => HugePage::Size1G,
        _ => return None,
    };
    Some(anon_map(page, flags & MAP_SHARED != 0, flags & MAP_NORESERVE != 0))
}

/// Whether `addr` is in a hugetlb mapping of the current mm (a SIGBUS there is the pool's).
pub fn in_hugetlb(k: &Kernel, addr: u64) -> bool {
    k.vmas().any(|v| v.contains(addr) && v.flags & mm::vma::vm::HUGETLB != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A recorded mmap's flags as a program passes them (python's mmap.MAP_HUGETLB is 0x40000).
    #[test]
    fn recorded_map_hugetlb_flags() {
        let private_2m = 0x02 | 0x20 | 0x40000;
        assert_eq!(recorded_map(private_2m), Some(anon_map(HugePage::Size2M, false, false)));
        assert_eq!(recorded_map(private_2m | (21 << 26)), Some(anon_map(HugePage::Size2M, false, false)));
        assert_eq!(recorded_map(0x01 | 0x20 | 0x40000 | 0x4000 | (30 << 26)), Some(anon_map(HugePage::Size1G, true, true)));
        assert_eq!(recorded_map(private_2m | (16 << 26)), None, "64 KiB: no such hstate on x86-64");
        assert_eq!(recorded_map(0x02 | 0x20), None);
    }
}
