//! The contiguous page hint's chunks in the fault path: states, splits and counters derived by
//! hand (a chunk is 16 pages; the first fault maps one and keeps 15 aside).

use mm_types::PAGE_SIZE;
use policy::contig_hint::ContigCounters;
use thp_abi::version::{HintGfp, Policy};
use thp_abi::ThpSettings;

use crate::madvise::Madvise;
use crate::mmap::MmapPlacement;
use crate::vma::vm;
use crate::{BootParams, Kernel};

const C: u64 = 16 * PAGE_SIZE;

fn kernel(fill: u8) -> (Kernel, u64) {
    let mut s = ThpSettings::default();
    s.apply_assignment("enabled=never").unwrap();
    s.policy = Some(Policy::ContigHint { fill, gfp: HintGfp::NoWait });
    let mut k = Kernel::boot(&BootParams { mem_bytes: 256 << 20, ..Default::default() }, &s);
    // 2 MiB-sized: placed 2 MiB-aligned, so chunk n is at a + n * 64 KiB.
    let a = k.do_mmap(2 << 20, vm::READ | vm::WRITE, MmapPlacement::Kernel).unwrap();
    (k, a)
}

fn counters(k: &Kernel) -> ContigCounters {
    k.contig_hint_counters().unwrap().0
}

/// Frames in folios (allocated, not free, not page tables).
fn folio_pages(k: &Kernel) -> u64 {
    k.memory_use().folios
}

#[test]
fn a_chunk_fills_at_the_second_fault_and_is_one_contpte_block() {
    let (mut k, a) = kernel(2);
    k.access(a + 3 * PAGE_SIZE, true);
    // One page mapped, 16 allocated: 15 allocated but not mapped.
    assert_eq!((k.stats().anon_rss_pages, folio_pages(&k)), (1, 16));
    assert_eq!(counters(&k), ContigCounters { allocated: 1, unmapped_pages: 15, peak_unmapped_pages: 15, ..Default::default() });
    let t = k.translation(a + 3 * PAGE_SIZE).unwrap();
    assert_eq!((t.folio_order, t.contig_order, t.contpte), (0, 0, false), "one page: no block yet");
    // The second fault (page 9) maps all 16: Rss 64 KiB, nothing more allocated.
    k.access(a + 9 * PAGE_SIZE, true);
    assert_eq!((k.stats().anon_rss_pages, folio_pages(&k)), (16, 16));
    assert_eq!(counters(&k), ContigCounters { allocated: 1, completed: 1, unmapped_pages: 0, peak_unmapped_pages: 15, ..Default::default() });
    for p in [0, 9, 15] {
        let t = k.translation(a + p * PAGE_SIZE).unwrap();
        assert_eq!((t.folio_order, t.contig_order, t.contpte), (0, 4, true), "page {p}");
    }
    // Pages 0..15 are mapped now: touching page 4 is no fault (minflt stays 2).
    assert_eq!(k.stats().minflt, 2);
    k.access(a + 4 * PAGE_SIZE, true);
    assert_eq!(k.stats().minflt, 2);
    k.check_invariants().unwrap();
}

/// A run of writes page by page (`touch`'s path, `access_run`): each chunk is allocated at its
/// first page and filled at its second; 2 chunks, 2 faults each.
#[test]
fn a_sequential_run_fills_every_chunk() {
    let (mut k, a) = kernel(2);
    k.access_run(a, 32, PAGE_SIZE, true);
    assert_eq!((k.stats().minflt, k.stats().anon_rss_pages), (4, 32));
    assert_eq!(counters(&k), ContigCounters { allocated: 2, completed: 2, peak_unmapped_pages: 15, ..Default::default() });
}

#[test]
fn the_nth_fault_fills_with_fill_3() {
    let (mut k, a) = kernel(3);
    k.access(a, true);
    k.access(a + PAGE_SIZE, true);
    assert_eq!((k.stats().anon_rss_pages, counters(&k).unmapped_pages, counters(&k).completed), (2, 14, 0));
    k.access(a + 15 * PAGE_SIZE, true);
    assert_eq!((k.stats().anon_rss_pages, counters(&k).unmapped_pages, counters(&k).completed), (16, 0, 1));
    assert!(k.translation(a + 7 * PAGE_SIZE).unwrap().contpte);
}

/// mprotect of one page of a completed chunk and of a filling one: both split; the filling
/// one's 15 pages go back to the allocator, the completed one keeps its 16 mapped pages,
/// no longer one block.
#[test]
fn mprotect_splits_and_frees_what_was_never_mapped() {
    let (mut k, a) = kernel(2);
    k.access(a, true);
    k.access(a + PAGE_SIZE, true);
    k.access(a + C + 2 * PAGE_SIZE, true);
    assert_eq!((folio_pages(&k), counters(&k).unmapped_pages), (32, 15));
    k.do_mprotect(a + 5 * PAGE_SIZE, PAGE_SIZE, vm::READ).unwrap();
    k.do_mprotect(a + C + 8 * PAGE_SIZE, PAGE_SIZE, vm::READ).unwrap();
    assert_eq!(counters(&k), ContigCounters { allocated: 2, completed: 1, split: 2, unmapped_pages: 0, peak_unmapped_pages: 15, ..Default::default() });
    assert_eq!((folio_pages(&k), k.stats().anon_rss_pages), (17, 17));
    assert!(!k.translation(a).unwrap().contpte);
    assert_eq!(k.contig_hint_counters().unwrap().1, (0, 0), "nothing tracked");
    // A write to the split filling chunk's range is an ordinary order-0 fault (no new chunk:
    // the 64 KiB range is not all none).
    k.access(a + C + 3 * PAGE_SIZE, true);
    assert_eq!((counters(&k).allocated, folio_pages(&k)), (2, 18));
    k.check_invariants().unwrap();
}

/// munmap, MADV_DONTNEED and mremap each split the chunk they touch; COW after fork too, and
/// fork itself does not.
#[test]
fn munmap_dontneed_mremap_and_cow_split() {
    let (mut k, a) = kernel(2);
    for n in 0..4 {
        k.access(a + n * C, true);
    }
    assert_eq!(counters(&k).unmapped_pages, 60);
    k.do_munmap(a + 4 * PAGE_SIZE, PAGE_SIZE).unwrap();
    k.do_madvise(a + C, PAGE_SIZE, Madvise::Dontneed).unwrap();
    assert_eq!((counters(&k).split, counters(&k).unmapped_pages), (2, 30));
    // mremap of chunk 2 to the other end of the region (MREMAP_FIXED).
    let to = a + (1 << 20);
    k.do_munmap(to, C).unwrap();
    k.do_mremap(a + 2 * C, C, C, to).unwrap();
    assert_eq!((counters(&k).split, counters(&k).unmapped_pages), (3, 15));
    // Chunk 3: completed, then fork and a write of the parent's: COW copies one page (split).
    k.access(a + 3 * C + PAGE_SIZE, true);
    assert_eq!(counters(&k).completed, 1);
    let parent = k.current_mm();
    k.fork().unwrap();
    assert_eq!(counters(&k).split, 3, "fork keeps the block");
    assert!(k.translation(a + 3 * C).unwrap().contpte);
    k.switch_mm(parent);
    k.access(a + 3 * C + 2 * PAGE_SIZE, true);
    assert_eq!(counters(&k).split, 4);
    assert!(!k.translation(a + 3 * C).unwrap().contpte);
    k.check_invariants().unwrap();
}

/// GFP_NOWAIT finds no free 64 KiB block on fragmented memory: order 0, counted; no reclaim.
/// At exit the chunks are dropped and their pages freed, not counted as splits.
#[test]
fn nowait_fails_on_fragmented_memory_and_exit_drops_chunks() {
    let (mut k, a) = kernel(2);
    k.access(a, true);
    assert_eq!(folio_pages(&k), 16);
    k.exit_mm();
    assert_eq!(folio_pages(&k), 0, "the 16 pages of the chunk (one mapped) are free again");
    assert_eq!(counters(&k).split, 0);
    let (mut k, a) = kernel(2);
    k.fragment_free_memory(100);
    k.access(a, true);
    assert_eq!(counters(&k), ContigCounters { alloc_failed: 1, ..Default::default() });
    assert_eq!(k.stats().anon_rss_pages, 1);
}
