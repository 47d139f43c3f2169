//! `deferred_split_scan` derived by hand: the underused threshold, the zero-page remap, and a
//! partially mapped folio.

use mm_types::{Order, PMD_SIZE};
use thp_abi::{MthpStat, ThpSettings, VmEvent};

use crate::mmap::MmapPlacement;
use crate::vma::vm;
use crate::{BootParams, Kernel};

/// A machine with `enabled=always` and `max_ptes_none`, one 2 MiB-aligned 2 MiB VMA whose first
/// `written` pages were written: one PMD THP (the first write faults it in), on the deferred
/// split queue since its fault (`shrink_underused=1`).
fn thp_with_written(max_ptes_none: u32, written: u64) -> (Kernel, u64) {
    let mut s = ThpSettings::default();
    s.apply_assignment("enabled=always").unwrap();
    s.apply_assignment(&format!("khugepaged/max_ptes_none={max_ptes_none}")).unwrap();
    let mut k = Kernel::boot(&BootParams { mem_bytes: 64 << 20, min_free_kbytes: 1024, ..Default::default() }, &s);
    let a = k.do_mmap(PMD_SIZE, vm::READ | vm::WRITE, MmapPlacement::Aligned { align: PMD_SIZE, offset: 0 }).unwrap();
    for i in 0..written {
        k.access(a + i * 4096, true);
    }
    assert!(k.translation(a).unwrap().pmd);
    assert_eq!(k.deferred_split_count(), 1);
    (k, a)
}

/// max_ptes_none 511 (the default): `thp_underused` is false at once, whatever the folio
/// holds; the scan takes the folio off the queue and leaves it PMD-mapped.
#[test]
fn underused_never_with_max_ptes_none_511() {
    let (mut k, a) = thp_with_written(511, 1);
    let r = k.deferred_split_scan(128);
    assert_eq!(r, super::SplitScan { scanned: 1, removed: 1, ..Default::default() });
    assert_eq!(k.deferred_split_count(), 0);
    assert!(k.translation(a).unwrap().pmd);
    assert_eq!(k.counters.vm(VmEvent::ThpUnderusedSplitPage), 0);
    k.check_invariants().unwrap();
}

/// max_ptes_none 0: one zero-filled page is more than 0. 100 pages written, 412 zero-filled:
/// the PMD is split (thp_split_pmd), the folio split (thp_split_page, split), the 412 zero
/// pages mapped by the shared zero page and freed; the 100 written pages stay, 4 KiB each.
#[test]
fn underused_split_with_max_ptes_none_0_remaps_zero_pages() {
    let (mut k, a) = thp_with_written(0, 100);
    let free = k.memory_use().free;
    let r = k.deferred_split_scan(128);
    assert_eq!(r, super::SplitScan { scanned: 1, split: 1, underused: 1, removed: 0, zero_remapped: 412 });
    assert_eq!(k.counters.vm(VmEvent::ThpUnderusedSplitPage), 1);
    assert_eq!(k.counters.vm(VmEvent::ThpSplitPage), 1);
    assert_eq!(k.counters.vm(VmEvent::ThpSplitPmd), 1);
    assert_eq!(k.counters.mthp(Order::PMD, MthpStat::Split), 1);
    assert_eq!(k.counters.vm(VmEvent::ThpDeferredSplitPage), 0, "frozen: never partially mapped");
    assert_eq!(k.memory_use().free, free + 412);
    assert_eq!(k.stats().anon_rss_pages, 100);
    let t = k.translation(a + 99 * 4096).unwrap();
    assert!(!t.pmd && t.folio_order == 0 && t.write);
    let z = k.translation(a + 100 * 4096).unwrap();
    assert!(!z.pmd && z.folio_order == 0 && !z.write, "the shared zero page, read-only");
    assert_eq!(k.deferred_split_count(), 0);
    k.check_invariants().unwrap();
}

/// max_ptes_none 256: underused takes 257 zero pages. 255 written → 257 zero: split. 256
/// written → 256 zero, and the scan stops at the 256th written page (512 - 256): kept.
#[test]
fn underused_threshold_with_max_ptes_none_256() {
    let (mut k, _) = thp_with_written(256, 255);
    let r = k.deferred_split_scan(128);
    assert_eq!((r.split, r.underused, r.zero_remapped), (1, 1, 257));
    assert_eq!(k.stats().anon_rss_pages, 255);
    k.check_invariants().unwrap();
    let (mut k, a) = thp_with_written(256, 256);
    let r = k.deferred_split_scan(128);
    assert_eq!((r.split, r.removed), (0, 1));
    assert!(k.translation(a).unwrap().pmd);
    assert_eq!(k.stats().anon_rss_pages, 512);
    k.check_invariants().unwrap();
}

/// A THP in a VM_LOCKED VMA (mlock2 MLOCK_ONFAULT: nothing more populated) is never underused (`folio_test_mlocked`): taken off the
/// queue, kept whole.
#[test]
fn an_mlocked_thp_is_not_split_as_underused() {
    let (mut k, a) = thp_with_written(0, 1);
    k.do_mlock(a, PMD_SIZE, crate::gup::MLOCK_ONFAULT).unwrap();
    let head = mm_types::Pfn(k.translation(a).unwrap().pfn);
    assert!(k.thp_underused(head), "511 zero-filled pages: underused, but for the lock");
    let r = k.deferred_split_scan(128);
    assert_eq!((r.split, r.removed), (0, 1));
    assert!(k.translation(a).unwrap().pmd);
}

/// A partially mapped THP (its second half unmapped: thp_deferred_split_page) is split at any
/// max_ptes_none, not counted as underused; its 256 unmapped pages were freed by the split,
/// and of the mapped half the 255 pages never written become the zero page.
#[test]
fn a_partially_mapped_thp_is_split() {
    let (mut k, a) = thp_with_written(511, 1);
    k.do_munmap(a + PMD_SIZE / 2, PMD_SIZE / 2).unwrap();
    assert_eq!(k.counters.vm(VmEvent::ThpDeferredSplitPage), 1);
    let free = k.memory_use().free;
    let r = k.deferred_split_scan(128);
    assert_eq!(r, super::SplitScan { scanned: 1, split: 1, underused: 0, removed: 0, zero_remapped: 255 });
    assert_eq!(k.counters.vm(VmEvent::ThpUnderusedSplitPage), 0);
    assert_eq!(k.memory_use().free, free + 256 + 255);
    assert_eq!(k.stats().anon_rss_pages, 1);
    k.check_invariants().unwrap();
}
