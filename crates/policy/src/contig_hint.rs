//! The contiguous page hint for anonymous memory (Bamvor Zhang's LSF/MM 2017 proposal,
//! Message-ID CAFy1USSdqRMJ2X5MNc3OUOEcGVy-_EMdB=qqOdA=fSASR8Oiew@mail.gmail.com): at a PTE
//! fault that THP declined (`do_anonymous_page` after `alloc_anon_folio` fell back to order 0,
//! mm/memory.c), allocate 64 KiB (`CONT_PTES` = 16 pages, arch/arm64/include/asm/pgtable-hwdef.h)
//! with GFP_NOWAIT, split it at once and map only the faulting page; when another fault lands in
//! the same 64 KiB, map the other 15 and set the contiguous bit, so that one TLB entry covers the
//! 16 pages. The chunks are tracked per mm and split wherever a THP's mapping would change:
//! mprotect, mremap, munmap, MADV_DONTNEED, reclaim (swap-out), migration and COW.
//!
//! This module is the chunk table and its state machine, without pages: the model (crates/mm,
//! `contig_hint.rs`) allocates and maps the frames it is told to. Variants the proposal leaves
//! open are parameters: which fault fills the chunk (`fill`, the second by default) and whether
//! the allocation may reclaim (`gfp`). Model-only: no kernel has it.
//!
//! A chunk's life: **allocated** (the first fault: 16 frames taken, one mapped, 15 allocated but
//! not mapped) → **filling** (faults 2 .. fill-1 map one page each) → **completed** (the fill-th
//! fault maps every page still unmapped; the block is contpte) or **split** at any time (the
//! unmapped frames go back to the allocator, the mapped pages stay as order-0 pages).

use std::collections::BTreeMap;

use thp_abi::version::HintGfp;

/// Pages in a chunk (`CONT_PTES` with 4 KiB pages).
pub const CHUNK_PAGES: u32 = 16;
/// Bytes in a chunk.
pub const CHUNK_SIZE: u64 = CHUNK_PAGES as u64 * 4096;

/// The policy's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContigHint {
    /// The fault in a chunk (1..=16, counting the one that allocated it) that maps the rest.
    pub fill: u8,
    /// How the chunk is allocated.
    pub gfp: HintGfp,
}

/// Where a chunk is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkState {
    /// Faults so far, and the bitmap of the pages mapped (bit i: the chunk's page i).
    Filling { faults: u8, mapped: u16 },
    /// Every page mapped with the contiguous bit.
    Completed,
}

/// One tracked chunk: its first frame and its state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub pfn: u32,
    pub state: ChunkState,
}

/// What a fault in a tracked chunk does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HintFault {
    /// Map this one frame (the faulting page).
    MapOne(u32),
    /// Map the faulting page's frame (`pfn`), and the chunk's pages in `rest` (bit i: page i at
    /// frame `first + i`): the chunk is complete.
    Fill { pfn: u32, first: u32, rest: u16 },
}

/// The counters the result reports (`contig_hint`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContigCounters {
    /// Chunks allocated (first faults that got 64 KiB).
    pub allocated: u64,
    /// Chunks that reached the fill-th fault and were mapped whole.
    pub completed: u64,
    /// Chunks split (filling or completed) by a change of their mapping.
    pub split: u64,
    /// First faults whose 64 KiB allocation failed (order 0 then, as without the hint).
    pub alloc_failed: u64,
    /// Pages allocated to chunks but not mapped, now.
    pub unmapped_pages: u64,
    /// The largest `unmapped_pages` seen.
    pub peak_unmapped_pages: u64,
}

/// The chunk table of every mm (`mm_struct` in the proposal), keyed by (mm, chunk address).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContigChunks {
    pub hint: ContigHint,
    chunks: BTreeMap<(u32, u64), Chunk>,
    pub counters: ContigCounters,
}

fn chunk_base(va: u64) -> u64 {
    va & !(CHUNK_SIZE - 1)
}

fn page_in_chunk(va: u64) -> u32 {
    ((va - chunk_base(va)) / 4096) as u32
}

impl ContigChunks {
    pub fn new(hint: ContigHint) -> ContigChunks {
        ContigChunks { hint, chunks: BTreeMap::new(), counters: ContigCounters::default() }
    }

    /// The chunk of `mm` holding `va`, if tracked.
    pub fn get(&self, mm: u32, va: u64) -> Option<Chunk> {
        self.chunks.get(&(mm, chunk_base(va))).copied()
    }

    /// The first frame of the completed chunk holding `va` (its 16 pages fold to one contpte
    /// block), if any.
    pub fn completed_at(&self, mm: u32, va: u64) -> Option<u32> {
        self.get(mm, va).filter(|c| c.state == ChunkState::Completed).map(|c| c.pfn)
    }

    /// A fault at `va` whose PTE is none: what to map from its chunk, or `None` when no chunk is
    /// filling there (the caller may then allocate one with [`ContigChunks::insert`]).
    pub fn fault(&mut self, mm: u32, va: u64) -> Option<HintFault> {
        let fill = self.hint.fill;
        let c = self.chunks.get_mut(&(mm, chunk_base(va)))?;
        let ChunkState::Filling { faults, mapped } = c.state else { return None };
        let i = page_in_chunk(va);
        if mapped & (1 << i) != 0 {
            return None;
        }
        let pfn = c.pfn + i;
        let faults = faults + 1;
        if faults >= fill {
            let rest = !mapped & !(1u16 << i);
            c.state = ChunkState::Completed;
            self.counters.completed += 1;
            self.counters.unmapped_pages -= rest.count_ones() as u64 + 1;
            return Some(HintFault::Fill { pfn, first: c.pfn, rest });
        }
        c.state = ChunkState::Filling { faults, mapped: mapped | (1 << i) };
        self.counters.unmapped_pages -= 1;
        Some(HintFault::MapOne(pfn))
    }

    /// A chunk allocated at `pfn` for the fault at `va`: its page for `va` is mapped now. With
    /// `fill` = 1 it is complete at once: the result is the pages to map besides the fault's.
    pub fn insert(&mut self, mm: u32, va: u64, pfn: u32) -> HintFault {
        let i = page_in_chunk(va);
        self.counters.allocated += 1;
        if self.hint.fill <= 1 {
            self.chunks.insert((mm, chunk_base(va)), Chunk { pfn, state: ChunkState::Completed });
            self.counters.completed += 1;
            return HintFault::Fill { pfn: pfn + i, first: pfn, rest: !(1u16 << i) };
        }
        self.chunks.insert((mm, chunk_base(va)), Chunk { pfn, state: ChunkState::Filling { faults: 1, mapped: 1 << i } });
        self.counters.unmapped_pages += CHUNK_PAGES as u64 - 1;
        self.counters.peak_unmapped_pages = self.counters.peak_unmapped_pages.max(self.counters.unmapped_pages);
        HintFault::MapOne(pfn + i)
    }

    /// Split every chunk of `mm` that `[start, end)` touches: the frames allocated but not
    /// mapped, to be freed, as (first frame of the chunk, bitmap of its unmapped pages).
    /// `count`: whether these are splits (false: the mm exits, its chunks are just dropped).
    pub fn split_range(&mut self, mm: u32, start: u64, end: u64, count: bool) -> Vec<(u32, u16)> {
        let keys: Vec<(u32, u64)> = self.chunks.range((mm, chunk_base(start))..(mm, end)).map(|(k, _)| *k).collect();
        let mut free = Vec::new();
        for k in keys {
            let c = self.chunks.remove(&k).expect("listed");
            if count {
                self.counters.split += 1;
            }
            if let ChunkState::Filling { mapped, .. } = c.state {
                self.counters.unmapped_pages -= (!mapped).count_ones() as u64;
                free.push((c.pfn, !mapped));
            }
        }
        free
    }

    /// Chunks tracked now (filling, completed).
    pub fn tracked(&self) -> (u64, u64) {
        let completed = self.chunks.values().filter(|c| c.state == ChunkState::Completed).count() as u64;
        (self.chunks.len() as u64 - completed, completed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: u64 = 0x7f00_0001_0000;

    fn table(fill: u8) -> ContigChunks {
        ContigChunks::new(ContigHint { fill, gfp: HintGfp::NoWait })
    }

    /// The proposal's default: the first fault maps one page and keeps 15 aside, the second
    /// maps the other 14 besides its own, and the chunk is one contpte block.
    #[test]
    fn second_fault_fills_the_chunk() {
        let mut t = table(2);
        assert_eq!(t.fault(1, A + 0x3000), None, "no chunk yet");
        assert_eq!(t.insert(1, A + 0x3000, 0x800), HintFault::MapOne(0x803));
        assert_eq!(t.counters.unmapped_pages, 15);
        assert_eq!(t.get(1, A + 0xf000), Some(Chunk { pfn: 0x800, state: ChunkState::Filling { faults: 1, mapped: 1 << 3 } }));
        assert_eq!(t.completed_at(1, A), None);
        // Page 9: frame 0x809; the rest is every page but 3 (mapped) and 9 (this fault).
        assert_eq!(t.fault(1, A + 0x9123), Some(HintFault::Fill { pfn: 0x809, first: 0x800, rest: !((1 << 3) | (1 << 9)) }));
        assert_eq!(t.counters, ContigCounters { allocated: 1, completed: 1, split: 0, alloc_failed: 0, unmapped_pages: 0, peak_unmapped_pages: 15 });
        assert_eq!(t.completed_at(1, A + 0x4000), Some(0x800));
        assert_eq!(t.fault(1, A + 0x5000), None, "a completed chunk takes no more faults");
        assert_eq!(t.get(2, A), None, "another mm has no chunk there");
    }

    /// fill=4: faults 2 and 3 map one page each (unmapped 15 → 14 → 13), the fourth maps the
    /// remaining 12 besides its own.
    #[test]
    fn nth_fault_fills_the_chunk() {
        let mut t = table(4);
        t.insert(1, A, 0x100);
        assert_eq!(t.fault(1, A + 0x1000), Some(HintFault::MapOne(0x101)));
        assert_eq!(t.fault(1, A + 0x2000), Some(HintFault::MapOne(0x102)));
        assert_eq!(t.counters.unmapped_pages, 13);
        let Some(HintFault::Fill { rest, .. }) = t.fault(1, A + 0xf000) else { panic!() };
        assert_eq!(rest.count_ones(), 12);
        assert_eq!(rest, 0x7ff8);
        assert_eq!(t.tracked(), (0, 1));
        // fill=1: the first fault maps the whole chunk, nothing is kept aside.
        let mut t = table(1);
        assert_eq!(t.insert(1, A + 0x2000, 0x200), HintFault::Fill { pfn: 0x202, first: 0x200, rest: !(1 << 2) });
        assert_eq!((t.counters.completed, t.counters.peak_unmapped_pages), (1, 0));
    }

    /// A split gives back the pages never mapped (15 for a chunk with one fault) and keeps
    /// the mapped ones; a completed chunk gives nothing back; an exit is not a split.
    #[test]
    fn splits_free_the_unmapped_pages() {
        let mut t = table(2);
        t.insert(1, A, 0x100);
        t.insert(1, A + CHUNK_SIZE, 0x200);
        t.fault(1, A + CHUNK_SIZE + 0x1000);
        t.insert(1, A + 2 * CHUNK_SIZE + 0x5000, 0x300);
        assert_eq!(t.counters.unmapped_pages, 30);
        // One page of the second chunk (an mprotect of 4 KiB): that chunk only.
        assert_eq!(t.split_range(1, A + CHUNK_SIZE + 0x4000, A + CHUNK_SIZE + 0x5000, true), vec![]);
        assert_eq!((t.counters.split, t.tracked()), (1, (2, 0)));
        // [A, A + 3 chunks): the first (page 0 mapped) and third (page 5 mapped).
        assert_eq!(t.split_range(1, A, A + 3 * CHUNK_SIZE, true), vec![(0x100, !1u16), (0x300, !(1u16 << 5))]);
        assert_eq!((t.counters.split, t.counters.unmapped_pages, t.tracked()), (3, 0, (0, 0)));
        t.insert(2, A, 0x400);
        assert_eq!(t.split_range(1, 0, u64::MAX, true), vec![], "mm 1 has none left");
        assert_eq!(t.split_range(2, 0, u64::MAX, false), vec![(0x400, !1u16)]);
        assert_eq!(t.counters.split, 3, "an exit drops chunks without counting splits");
    }
}
