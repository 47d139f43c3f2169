//! Hand-derived tests of the hugetlb model (mm/hugetlb.c's accounting, step by step).

use super::{HugeSize, HugetlbMap, HugetlbMeminfo};
use crate::mmap::MmapPlacement;
use crate::vma::vm;
use crate::{Access, BootParams, Errno, Kernel};
use thp_abi::ThpSettings;

const H: u64 = 2 << 20;
const RW: u32 = vm::READ | vm::WRITE;

fn boot(pool: u64) -> Kernel {
    let mut k = Kernel::boot(&BootParams { mem_bytes: 128 << 20, ..Default::default() }, &ThpSettings::default());
    assert_eq!(k.hugetlb_set_pool(HugeSize::Pmd, pool), pool);
    k
}

fn map(shared: bool, noreserve: bool) -> HugetlbMap {
    HugetlbMap { size: HugeSize::Pmd, shared, noreserve, file: None }
}

/// (HugePages_Total, HugePages_Free, HugePages_Rsvd, HugePages_Surp)
fn counts(k: &Kernel) -> (u64, u64, u64, u64) {
    let m = k.hugetlb_meminfo();
    (m.total, m.free, m.rsvd, m.surp)
}

/// The pool's pages come from the buddy allocator when it is set and go back when it shrinks:
/// 4 pages are 4 × 512 frames; meminfo's Hugetlb is 4 × 2048 kB.
#[test]
fn the_pool_takes_its_pages_from_the_buddy_allocator() {
    let mut k = boot(0);
    let free0 = k.zone().nr_free_pages();
    assert_eq!(k.hugetlb_set_pool(HugeSize::Pmd, 4), 4);
    assert_eq!(free0 - k.zone().nr_free_pages(), 4 * 512);
    assert_eq!(k.hugetlb_meminfo(), HugetlbMeminfo { total: 4, free: 4, rsvd: 0, surp: 0, hugepagesize_kb: 2048, hugetlb_kb: 4 * 2048 });
    assert_eq!(k.hugetlb_set_pool(HugeSize::Pmd, 1), 1);
    assert_eq!(free0 - k.zone().nr_free_pages(), 512);
    k.check_invariants().unwrap();
}

/// MAP_SHARED|MAP_HUGETLB of 3 pages on a pool of 4: all 3 reserved at mmap. A write fault
/// takes a reserved page (Free 3, Rsvd 2), a read fault another (Free 2, Rsvd 1), a write to
/// the read page is a hit (a shared mapping's huge PTE is writable). munmap drops the
/// anonymous file: both pages and the last reservation go back.
#[test]
fn a_shared_mapping_reserves_at_mmap_and_consumes_at_fault() {
    let mut k = boot(4);
    let a = k.hugetlb_mmap(3 * H, RW, MmapPlacement::Kernel, map(true, false)).unwrap();
    assert_eq!(a % H, 0, "aligned to the huge page size");
    assert_eq!(counts(&k), (4, 4, 3, 0));
    assert_eq!(k.access(a + 4096, true), Access::Fault);
    assert_eq!(k.access(a + 8192, true), Access::Hit);
    assert_eq!(counts(&k), (4, 3, 2, 0));
    assert_eq!(k.access(a + H, false), Access::Fault);
    assert_eq!(k.access(a + H, true), Access::Hit);
    assert_eq!(counts(&k), (4, 2, 1, 0));
    assert_eq!(k.stats().minflt, 2);
    assert_eq!(k.hugetlb_smaps(a, a + 3 * H), (2 * H, 0));
    k.do_munmap(a, 3 * H).unwrap();
    assert_eq!(counts(&k), (4, 4, 0, 0));
}

/// MAP_PRIVATE|MAP_HUGETLB of 3 pages: the owner's map reserves 3. A read fault allocates
/// (Free 3, Rsvd 2) and maps read-only; the write after it is a second fault that reuses the
/// exclusive page (no allocation). munmap frees the 2 pages and releases the 1 unconsumed
/// reservation (hugetlb_vm_op_close).
#[test]
fn a_private_mapping_reserves_the_whole_range() {
    let mut k = boot(4);
    let a = k.hugetlb_mmap(3 * H, RW, MmapPlacement::Kernel, map(false, false)).unwrap();
    assert_eq!(counts(&k), (4, 4, 3, 0));
    assert_eq!(k.access(a, false), Access::Fault);
    assert_eq!(counts(&k), (4, 3, 2, 0));
    assert_eq!(k.access(a, true), Access::Fault, "hugetlb_wp reuses the page: a fault");
    assert_eq!(counts(&k), (4, 3, 2, 0));
    assert_eq!(k.access(a + H, true), Access::Fault);
    assert_eq!(counts(&k), (4, 2, 1, 0));
    assert_eq!(k.stats().minflt, 3);
    k.do_munmap(a, 3 * H).unwrap();
    assert_eq!(counts(&k), (4, 4, 0, 0));
}

/// MAP_NORESERVE on a pool of 2: nothing reserved; 2 faults take the pool, the third finds
/// no page: SIGBUS (not counted in minflt). A partial munmap is refused (model limit).
#[test]
fn noreserve_faults_until_the_pool_is_empty_then_sigbus() {
    let mut k = boot(2);
    let a = k.hugetlb_mmap(3 * H, RW, MmapPlacement::Kernel, map(false, true)).unwrap();
    assert_eq!(counts(&k), (2, 2, 0, 0));
    assert_eq!(k.access(a, true), Access::Fault);
    assert_eq!(k.access(a + H, true), Access::Fault);
    assert_eq!(k.access(a + 2 * H, true), Access::Sigbus);
    assert_eq!(counts(&k), (2, 0, 0, 0));
    assert_eq!(k.stats().minflt, 2);
    assert_eq!(k.do_munmap(a, H), Err(Errno::EINVAL));
    k.do_munmap(a, 3 * H).unwrap();
    assert_eq!(counts(&k), (2, 2, 0, 0));
}

/// ENOMEM at mmap when the pool is short: a private mapping of 3 pages on a pool of 2 is
/// refused and leaves no VMA and no reservation; one of 2 pages fits.
#[test]
fn mmap_fails_with_enomem_when_the_reservation_cannot_be_made() {
    let mut k = boot(2);
    assert_eq!(k.hugetlb_mmap(3 * H, RW, MmapPlacement::Kernel, map(false, false)), Err(Errno::ENOMEM));
    assert_eq!(k.hugetlb_mmap(3 * H, RW, MmapPlacement::Kernel, map(true, false)), Err(Errno::ENOMEM));
    assert_eq!(counts(&k), (2, 2, 0, 0));
    assert_eq!(k.vmas().count(), 0);
    let a = k.hugetlb_mmap(2 * H, RW, MmapPlacement::Kernel, map(false, false)).unwrap();
    assert_eq!(counts(&k), (2, 2, 2, 0));
    assert_eq!(k.access(a, true), Access::Fault);
}

/// Surplus pages with nr_overcommit_hugepages: a pool of 1 with overcommit 2 reserves 3
/// shared pages by allocating 2 surplus ones (Total 3, Free 3, Rsvd 3, Surp 2). After the 3
/// faults and munmap, each freed page goes back to the buddy allocator while there is
/// surplus: Total 1, Free 1. With overcommit 1 the same mmap is ENOMEM and the one surplus
/// page gathered is given back.
#[test]
fn surplus_pages_come_and_go_with_overcommit() {
    let mut k = boot(1);
    let free0 = k.zone().nr_free_pages();
    k.hugetlb_set_overcommit(HugeSize::Pmd, 1);
    assert_eq!(k.hugetlb_mmap(3 * H, RW, MmapPlacement::Kernel, map(true, false)), Err(Errno::ENOMEM));
    assert_eq!(counts(&k), (1, 1, 0, 0));
    assert_eq!(k.zone().nr_free_pages(), free0);
    k.hugetlb_set_overcommit(HugeSize::Pmd, 2);
    let a = k.hugetlb_mmap(3 * H, RW, MmapPlacement::Kernel, map(true, false)).unwrap();
    assert_eq!(counts(&k), (3, 3, 3, 2));
    assert_eq!(free0 - k.zone().nr_free_pages(), 2 * 512);
    for i in 0..3 {
        assert_eq!(k.access(a + i * H, true), Access::Fault);
    }
    assert_eq!(counts(&k), (3, 0, 0, 2));
    k.do_munmap(a, 3 * H).unwrap();
    assert_eq!(counts(&k), (1, 1, 0, 0));
    assert_eq!(k.zone().nr_free_pages(), free0);
    k.check_invariants().unwrap();
}

/// fork of a private hugetlb page on a pool of 3: the child has no reservation
/// (hugetlb_dup_vma_private) and shares the page write-protected. The child's write copies
/// into an available page (Free 2 → 1), one fault; the parent's write then finds the page
/// mapped once and reuses it, one fault, no page.
#[test]
fn fork_shares_a_private_page_and_cow_copies_it() {
    let mut k = boot(3);
    let a = k.hugetlb_mmap(H, RW, MmapPlacement::Kernel, map(false, false)).unwrap();
    assert_eq!(k.access(a, true), Access::Fault);
    assert_eq!(counts(&k), (3, 2, 0, 0));
    let parent = k.current_mm();
    let (child, _) = k.fork().unwrap();
    assert_eq!(k.hugetlb_smaps(a, a + H), (0, H), "mapped twice: Shared_Hugetlb");
    // The census sees one 2 MiB folio mapped by a PMD entry, in no Rss (as live reads them).
    let c = k.census(&[(a, a + H)]);
    let e = c.census.sizes.get(&thp_abi::FolioSize::of(mm_types::Order::PMD)).copied().unwrap_or_default();
    assert_eq!((e.folios, e.pmd_mapped, e.pte_mapped, c.rss_bytes), (1, 1, 0, 0));
    k.switch_mm(child);
    assert_eq!(k.access(a, false), Access::Hit);
    assert_eq!(k.access(a, true), Access::Fault);
    assert_eq!(counts(&k), (3, 1, 0, 0));
    assert_eq!(k.stats().minflt, 1);
    k.switch_mm(parent);
    assert_eq!(k.access(a, true), Access::Fault);
    assert_eq!(counts(&k), (3, 1, 0, 0));
    assert_eq!(k.stats().minflt, 2);
    k.switch_mm(child);
    k.exit_mm();
    k.switch_mm(parent);
    assert_eq!(counts(&k), (3, 2, 0, 0));
}

/// The same with a pool of 1: the parent's write after fork must copy outside its
/// reservation and finds no page, so the page is taken from the child (unmap_ref_private) and
/// reused: one fault, Free stays 0. The child's next access is SIGBUS (HPAGE_RESV_UNMAPPED).
/// A child that writes first with no page free gets SIGBUS itself.
#[test]
fn a_failed_cow_by_the_owner_unmaps_the_child() {
    let mut k = boot(1);
    let a = k.hugetlb_mmap(H, RW, MmapPlacement::Kernel, map(false, false)).unwrap();
    assert_eq!(k.access(a, true), Access::Fault);
    let parent = k.current_mm();
    let (child, _) = k.fork().unwrap();
    assert_eq!(k.access(a, true), Access::Fault);
    assert_eq!(counts(&k), (1, 0, 0, 0));
    assert_eq!(k.stats().minflt, 2);
    k.switch_mm(child);
    assert_eq!(k.access(a, false), Access::Sigbus);
    k.switch_mm(parent);
    let (child2, _) = k.fork().unwrap();
    k.switch_mm(child2);
    assert_eq!(k.access(a, true), Access::Sigbus, "the child's copy finds no page");
    assert_eq!(k.stats().minflt, 0);
}

/// A shared mapping's child refaults from the page cache (vma_needs_copy: no anon_vma): one
/// fault, no new page.
#[test]
fn a_shared_mapping_is_refaulted_by_the_child() {
    let mut k = boot(2);
    let a = k.hugetlb_mmap(H, RW, MmapPlacement::Kernel, map(true, false)).unwrap();
    assert_eq!(k.access(a, true), Access::Fault);
    let (child, _) = k.fork().unwrap();
    k.switch_mm(child);
    assert_eq!(k.access(a, true), Access::Fault);
    assert_eq!(k.access(a, true), Access::Hit);
    assert_eq!(counts(&k), (2, 1, 0, 0));
    assert_eq!(k.hugetlb_smaps(a, a + H), (0, H));
}

/// A memfd with MFD_HUGETLB: size 0 until ftruncate; a shared mapping of it reserves what the
/// inode's map lacks, so a second mapping of the same pages reserves nothing; the pages stay
/// in the file after munmap (Free 1) until the descriptor is closed.
#[test]
fn a_hugetlb_file_keeps_its_pages_until_closed() {
    let mut k = boot(2);
    let ino = k.hugetlb_file_setup(HugeSize::Pmd, 0, false);
    assert_eq!(k.hugetlb_truncate(ino, 4096), Err(Errno::EINVAL));
    k.hugetlb_truncate(ino, H).unwrap();
    let m = HugetlbMap { file: Some((ino, 0)), ..map(true, false) };
    let a = k.hugetlb_mmap(H, RW, MmapPlacement::Kernel, m).unwrap();
    let b = k.hugetlb_mmap(H, RW, MmapPlacement::Kernel, m).unwrap();
    assert_eq!(counts(&k), (2, 2, 1, 0));
    assert_eq!(k.access(a, true), Access::Fault);
    assert_eq!(k.access(b, false), Access::Fault);
    assert_eq!(counts(&k), (2, 1, 0, 0));
    assert_eq!(k.access(a + H, true), Access::Segv, "past the VMA");
    k.do_munmap(a, H).unwrap();
    k.do_munmap(b, H).unwrap();
    assert_eq!(counts(&k), (2, 1, 0, 0));
    k.hugetlb_file_put(ino);
    assert_eq!(counts(&k), (2, 2, 0, 0));
}

/// A 1 GiB pool (gigantic pages from 256 MAX_PAGE_ORDER blocks): Hugetlb counts it, the 2 MiB
/// HugePages_* lines do not; MAP_HUGETLB of 1 GiB pages reserves and faults one.
#[test]
fn a_gigantic_pool_is_in_hugetlb_but_not_in_the_default_lines() {
    let mut k = Kernel::boot(&BootParams { mem_bytes: 1536 << 20, ..Default::default() }, &ThpSettings::default());
    let free0 = k.zone().nr_free_pages();
    assert_eq!(k.hugetlb_set_pool(HugeSize::Pud, 1), 1);
    assert_eq!(free0 - k.zone().nr_free_pages(), 1 << 18);
    assert_eq!(k.hugetlb_meminfo().hugetlb_kb, 1 << 20);
    assert_eq!(counts(&k), (0, 0, 0, 0));
    let m = HugetlbMap { size: HugeSize::Pud, ..map(false, false) };
    let a = k.hugetlb_mmap(4096, RW, MmapPlacement::Kernel, m).unwrap();
    assert_eq!(a % (1 << 30), 0);
    assert_eq!(k.hstate(HugeSize::Pud).resv_huge_pages, 1);
    assert_eq!(k.access(a + (5 << 20), true), Access::Fault);
    assert_eq!(k.hstate(HugeSize::Pud).free_huge_pages, 0);
    k.do_munmap(a, 1 << 30).unwrap();
    assert_eq!(k.hugetlb_set_pool(HugeSize::Pud, 0), 0);
    assert_eq!(k.zone().nr_free_pages(), free0);
}
