//! Page tables: PMD tables (one per 1 GiB, reached from a PUD entry) and PTE tables (one per
//! 2 MiB), in arenas indexed by table number.
//!
//! Kernel sources (6.18): `include/linux/pgtable.h` (`pte_none`, `pmd_none`, `pmd_trans_huge`),
//! `arch/x86/include/asm/pgtable_types.h` (bits), `mm/pgtable-generic.c`
//! (`pgtable_trans_huge_deposit` / `_withdraw`), `mm/memory.c` (`__pte_alloc`, `__pmd_alloc`,
//! `free_pgd_range`).
//!
//! A PTE reads and writes as 64 bits, as on x86-64: 0 is `pte_none`; otherwise bit 0 present,
//! bit 1 the shared zero page, bit 2 young, bit 3 dirty, bit 4 writable, bits 5.. the PFN (any
//! PFN below `u32::MAX - 1`: the model addresses 16 TiB). It is stored in 36 bits (see
//! [`Chunk`]). A PMD entry is 64 bits: 0 is `pmd_none`; tag 1 a PTE table (index),
//! tag 2 a PMD-mapped folio (PFN and young/dirty/write bits), tag 3 the huge zero folio. Every
//! table also owns the frame the kernel would allocate for it, and each huge PMD owns its
//! deposited PTE table, so page-table memory is accounted in simulated frames.
//!
//! Host memory: a PTE table is a 132-byte header and 32 chunks of 16 entries (72 bytes each), a
//! chunk allocated at the first non-none entry written to it. An empty table (a deposited one)
//! costs the host its header, one with a single page in its 2 MiB about 200 bytes, not 4 KiB:
//! what the model holds is bounded by the simulated frames it maps (a sparse touch takes two,
//! the page and its PTE table), not by the address space touched. A full table costs 2.3 KiB
//! plus its header: 4.8 bytes per mapped 4 KiB page.

use std::collections::BTreeMap;

use mm_types::{Pfn, Vaddr, PUD_SHIFT};

/// A page-table entry (`pte_t`).
pub(crate) type Pte = u64;

pub(crate) const PTE_PRESENT: Pte = 1 << 0;
pub(crate) const PTE_ZERO: Pte = 1 << 1;
pub(crate) const PTE_YOUNG: Pte = 1 << 2;
pub(crate) const PTE_DIRTY: Pte = 1 << 3;
pub(crate) const PTE_WRITE: Pte = 1 << 4;
const PTE_PFN_SHIFT: u32 = 5;

pub(crate) fn pte_pfn(pte: Pte) -> Pfn {
    Pfn((pte >> PTE_PFN_SHIFT) as u32)
}
pub(crate) fn mk_pte(pfn: Pfn, bits: Pte) -> Pte {
    ((pfn.0 as Pte) << PTE_PFN_SHIFT) | bits | PTE_PRESENT
}
/// The shared zero page: special, never writable, no struct page in the model.
pub(crate) const ZERO_PTE: Pte = PTE_PRESENT | PTE_ZERO;

/// PTEs per chunk of a PTE table (a chunk is allocated at its first non-none entry). Smaller
/// chunks save host memory on sparse tables and cost a larger header on every table.
const CHUNK: usize = 16;

/// `pfn1` of the shared zero page.
const ZERO_MARK: u32 = u32::MAX;

/// 16 PTEs in 72 bytes: per entry the PFN plus one (0 is none, [`ZERO_MARK`] the zero page),
/// and a bit per entry for young, dirty and writable (a present entry is any non-zero `pfn1`).
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct Chunk {
    pfn1: [u32; CHUNK],
    young: u16,
    dirty: u16,
    write: u16,
    _pad: u16,
}

const _: () = assert!(std::mem::size_of::<Chunk>() == 72);

impl Chunk {
    #[inline(always)]
    fn get(&self, j: usize) -> Pte {
        let p = self.pfn1[j];
        if p == 0 {
            return 0;
        }
        let bits = (((self.young >> j) & 1) as Pte) << 2 | (((self.dirty >> j) & 1) as Pte) << 3 | (((self.write >> j) & 1) as Pte) << 4;
        if p == ZERO_MARK {
            ZERO_PTE | bits
        } else {
            mk_pte(Pfn(p - 1), bits)
        }
    }

    #[inline(always)]
    fn set(&mut self, j: usize, pte: Pte) {
        let m = 1u16 << j;
        self.pfn1[j] = if pte == 0 {
            0
        } else if pte & PTE_ZERO != 0 {
            ZERO_MARK
        } else {
            debug_assert!(pte_pfn(pte).0 < u32::MAX - 1, "PFN {:#x} does not fit a PTE", pte_pfn(pte).0);
            pte_pfn(pte).0 + 1
        };
        let bit = |flag: Pte| if pte & flag != 0 { m } else { 0 };
        self.young = (self.young & !m) | bit(PTE_YOUNG);
        self.dirty = (self.dirty & !m) | bit(PTE_DIRTY);
        self.write = (self.write & !m) | bit(PTE_WRITE);
    }
}
const CHUNKS: usize = 512 / CHUNK;
const NO_CHUNK: u32 = u32::MAX;

/// A PTE table: the frame the kernel allocated for it and its chunks.
#[derive(Clone, Copy)]
struct PteTable {
    /// `NO_FRAME` for a free slot.
    frame: u32,
    chunks: [u32; CHUNKS],
}

/// A decoded PMD entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pmd {
    None,
    Table(u32),
    Huge { pfn: Pfn, young: bool, dirty: bool, write: bool },
    HugeZero,
}

impl Pmd {
    fn encode(self) -> u64 {
        match self {
            Pmd::None => 0,
            Pmd::Table(i) => 1 | ((i as u64) << 2),
            Pmd::Huge { pfn, young, dirty, write } => {
                2 | ((young as u64) << 2) | ((dirty as u64) << 3) | ((write as u64) << 4) | ((pfn.0 as u64) << 8)
            }
            Pmd::HugeZero => 3,
        }
    }
    fn decode(v: u64) -> Pmd {
        match v & 3 {
            0 => Pmd::None,
            1 => Pmd::Table((v >> 2) as u32),
            2 => Pmd::Huge { pfn: Pfn((v >> 8) as u32), young: v & 4 != 0, dirty: v & 8 != 0, write: v & 16 != 0 },
            _ => Pmd::HugeZero,
        }
    }
}

pub(crate) struct PmdTable {
    entries: Box<[u64; 512]>,
    /// For huge entries: the deposited PTE table (`pgtable_trans_huge_deposit`).
    deposit: Box<[u32; 512]>,
    pub frame: Pfn,
}


/// All page tables of one mm.
#[derive(Default)]
pub(crate) struct PageTables {
    /// PUD entries: 1 GiB index → PMD table.
    puds: BTreeMap<u64, u32>,
    pmd_tables: Vec<Option<PmdTable>>,
    free_pmd: Vec<u32>,
    /// PTE tables by index.
    pte_tables: Vec<PteTable>,
    free_pte: Vec<u32>,
    /// Chunks of PTEs by number.
    chunk_arena: Vec<Chunk>,
    free_chunks: Vec<u32>,
    /// One-entry cache of the last PUD lookup: (1 GiB index, PMD table).
    last_pud: Option<(u64, u32)>,
    /// Swap entries (`is_swap_pte`) by virtual page: the swap slot. The PTE there reads none;
    /// `swap_io` and the walkers that must tell a swap entry from none look here.
    pub swap: BTreeMap<u64, u32>,
}

pub(crate) const NO_TABLE: u32 = u32::MAX;
const NO_FRAME: u32 = u32::MAX;

impl PageTables {
    /// The PMD table covering `addr`, if its PUD entry is present.
    #[inline]
    pub fn pmd_table(&mut self, addr: Vaddr) -> Option<u32> {
        let key = addr.0 >> PUD_SHIFT;
        if let Some((k, t)) = self.last_pud {
            if k == key {
                return Some(t);
            }
        }
        let t = *self.puds.get(&key)?;
        self.last_pud = Some((key, t));
        Some(t)
    }

    pub fn pmd_table_ro(&self, addr: Vaddr) -> Option<u32> {
        self.puds.get(&(addr.0 >> PUD_SHIFT)).copied()
    }

    /// `__pmd_alloc`: install a PMD table whose page is `frame`.
    pub fn install_pmd_table(&mut self, addr: Vaddr, frame: Pfn) -> u32 {
        let t = PmdTable { entries: Box::new([0; 512]), deposit: Box::new([NO_TABLE; 512]), frame };
        let idx = match self.free_pmd.pop() {
            Some(i) => {
                self.pmd_tables[i as usize] = Some(t);
                i
            }
            None => {
                self.pmd_tables.push(Some(t));
                (self.pmd_tables.len() - 1) as u32
            }
        };
        self.puds.insert(addr.0 >> PUD_SHIFT, idx);
        self.last_pud = None;
        idx
    }

    /// Remove the PMD table of the 1 GiB block at `key`; returns its frame.
    pub fn remove_pmd_table(&mut self, key: u64) -> Pfn {
        let idx = self.puds.remove(&key).expect("PUD entry present");
        let t = self.pmd_tables[idx as usize].take().expect("live PMD table");
        self.free_pmd.push(idx);
        self.last_pud = None;
        t.frame
    }

    #[inline]
    pub fn pmd(&self, table: u32, addr: Vaddr) -> Pmd {
        let t = self.pmd_tables[table as usize].as_ref().expect("live PMD table");
        Pmd::decode(t.entries[addr.pmd_index()])
    }

    pub fn set_pmd(&mut self, table: u32, addr: Vaddr, pmd: Pmd) {
        let t = self.pmd_tables[table as usize].as_mut().expect("live PMD table");
        t.entries[addr.pmd_index()] = pmd.encode();
    }

    pub fn deposit(&mut self, table: u32, addr: Vaddr, pte_table: u32) {
        let t = self.pmd_tables[table as usize].as_mut().expect("live PMD table");
        debug_assert_eq!(t.deposit[addr.pmd_index()], NO_TABLE);
        t.deposit[addr.pmd_index()] = pte_table;
    }

    pub fn withdraw(&mut self, table: u32, addr: Vaddr) -> u32 {
        let t = self.pmd_tables[table as usize].as_mut().expect("live PMD table");
        std::mem::replace(&mut t.deposit[addr.pmd_index()], NO_TABLE)
    }

    /// A new, empty PTE table whose page is `frame` (not yet linked anywhere).
    pub fn new_pte_table(&mut self, frame: Pfn) -> u32 {
        let t = PteTable { frame: frame.0, chunks: [NO_CHUNK; CHUNKS] };
        match self.free_pte.pop() {
            Some(i) => {
                self.pte_tables[i as usize] = t;
                i
            }
            None => {
                self.pte_tables.push(t);
                (self.pte_tables.len() - 1) as u32
            }
        }
    }

    /// Drop a PTE table; returns its frame for the allocator. Its chunks go back to the arena,
    /// zeroed for reuse.
    pub fn free_pte_table(&mut self, idx: u32) -> Pfn {
        let t = std::mem::replace(&mut self.pte_tables[idx as usize], PteTable { frame: NO_FRAME, chunks: [NO_CHUNK; CHUNKS] });
        debug_assert_ne!(t.frame, NO_FRAME, "free of a free PTE table");
        for c in t.chunks {
            if c != NO_CHUNK {
                self.chunk_arena[c as usize] = Chunk::default();
                self.free_chunks.push(c);
            }
        }
        self.free_pte.push(idx);
        Pfn(t.frame)
    }

    /// Entry `i` of PTE table `idx` (`ptep_get`).
    #[inline]
    pub fn pte(&self, idx: u32, i: usize) -> Pte {
        let c = self.pte_tables[idx as usize].chunks[i / CHUNK];
        if c == NO_CHUNK {
            0
        } else {
            self.chunk_arena[c as usize].get(i % CHUNK)
        }
    }

    /// `set_pte`: a none entry written into a chunk that does not exist stays implicit.
    #[inline(always)]
    pub fn set_pte(&mut self, idx: u32, i: usize, pte: Pte) {
        let mut c = self.pte_tables[idx as usize].chunks[i / CHUNK];
        if c == NO_CHUNK {
            if pte == 0 {
                return;
            }
            c = self.alloc_chunk();
            self.pte_tables[idx as usize].chunks[i / CHUNK] = c;
        }
        self.chunk_arena[c as usize].set(i % CHUNK, pte);
    }

    /// Set `bits` (young, dirty) in present entry `i` (`pte_mkyoung`, `pte_mkdirty`).
    #[inline]
    pub fn pte_mkbits(&mut self, idx: u32, i: usize, bits: Pte) {
        let e = self.pte(idx, i);
        debug_assert!(e & PTE_PRESENT != 0);
        self.set_pte(idx, i, e | bits);
    }

    #[cold]
    fn alloc_chunk(&mut self) -> u32 {
        match self.free_chunks.pop() {
            Some(c) => c,
            None => {
                self.chunk_arena.push(Chunk::default());
                (self.chunk_arena.len() - 1) as u32
            }
        }
    }

    /// The entries of PTE table `idx` in `range` that are not none, as (index, entry), skipping
    /// chunks never written.
    pub fn present_ptes(&self, idx: u32, range: std::ops::Range<usize>) -> impl Iterator<Item = (usize, Pte)> + '_ {
        let chunks = self.pte_tables[idx as usize].chunks;
        let arena = &self.chunk_arena;
        (range.start / CHUNK..range.end.div_ceil(CHUNK)).filter(move |&k| chunks[k] != NO_CHUNK).flat_map(move |k| {
            let chunk = &arena[chunks[k] as usize];
            let lo = (k * CHUNK).max(range.start);
            let hi = ((k + 1) * CHUNK).min(range.end);
            (lo..hi).filter_map(move |i| {
                let e = chunk.get(i % CHUNK);
                (e != 0).then_some((i, e))
            })
        })
    }

    /// `f(index, entry)` for the entries of PTE table `idx` in `range` that are not none, in
    /// order, skipping chunks never written (the census walk: a plain loop, no iterator chain).
    #[inline]
    pub fn for_each_present(&self, idx: u32, range: std::ops::Range<usize>, mut f: impl FnMut(usize, Pte)) {
        let chunks = &self.pte_tables[idx as usize].chunks;
        for k in range.start / CHUNK..range.end.div_ceil(CHUNK) {
            let c = chunks[k];
            if c == NO_CHUNK {
                continue;
            }
            let chunk = &self.chunk_arena[c as usize];
            let lo = (k * CHUNK).max(range.start);
            let hi = ((k + 1) * CHUNK).min(range.end);
            for i in lo..hi {
                if chunk.pfn1[i % CHUNK] != 0 {
                    f(i, chunk.get(i % CHUNK));
                }
            }
        }
    }

    /// Every entry of PTE table `idx`, a chunk at a time.
    pub fn all_ptes(&self, idx: u32) -> impl Iterator<Item = Pte> + '_ {
        const NONE: Chunk = Chunk { pfn1: [0; CHUNK], young: 0, dirty: 0, write: 0, _pad: 0 };
        let chunks = self.pte_tables[idx as usize].chunks;
        chunks.into_iter().flat_map(move |c| {
            let chunk = if c == NO_CHUNK { &NONE } else { &self.chunk_arena[c as usize] };
            (0..CHUNK).map(move |j| chunk.get(j))
        })
    }

    /// `pte_range_none`: entries `range` are all none.
    pub fn ptes_none(&self, idx: u32, range: std::ops::Range<usize>) -> bool {
        let t = &self.pte_tables[idx as usize];
        let mut i = range.start;
        while i < range.end {
            let stop = ((i / CHUNK + 1) * CHUNK).min(range.end);
            let c = t.chunks[i / CHUNK];
            if c != NO_CHUNK && self.chunk_arena[c as usize].pfn1[i % CHUNK..(stop - 1) % CHUNK + 1].iter().any(|&p| p != 0) {
                return false;
            }
            i = stop;
        }
        true
    }

    /// `pte_clear` of entries `range`.
    pub fn clear_ptes(&mut self, idx: u32, range: std::ops::Range<usize>) {
        for i in range {
            self.set_pte(idx, i, 0);
        }
    }

    /// Every PUD key (1 GiB index) with its PMD table.
    pub fn puds(&self) -> Vec<(u64, u32)> {
        self.puds.iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// The PUD keys (1 GiB indexes) from `first` to `last` that have a PMD table, with it: the
    /// page-table walks skip empty upper levels (`pud_none_or_clear_bad`), so their cost follows
    /// the tables that exist, not the span of addresses.
    pub fn puds_in(&self, first: u64, last: u64) -> Vec<(u64, u32)> {
        if first > last {
            return Vec::new();
        }
        self.puds.range(first..=last).map(|(k, v)| (*k, *v)).collect()
    }



    pub fn deposited(&self, table: u32, slot: usize) -> u32 {
        self.pmd_tables[table as usize].as_ref().expect("live PMD table").deposit[slot]
    }


    /// Host bytes the page tables use (for the memory benchmark): the PMD tables, the PTE
    /// table headers and the chunks ever allocated (the arena's length, not its capacity: the
    /// host backs reserved capacity only when it is written).
    pub fn host_bytes(&self) -> usize {
        self.pmd_tables.len() * (512 * 8 + 512 * 4 + 16)
            + self.pte_tables.len() * std::mem::size_of::<PteTable>()
            + self.chunk_arena.len() * std::mem::size_of::<Chunk>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptes_hold_every_pfn_and_chunks_appear_on_first_write() {
        // A 4 TiB machine has PFNs up to 2^30 - 1; the PTE format holds any u32 PFN.
        for pfn in [0, (1 << 26) - 1, 1 << 27, (1 << 30) - 1, u32::MAX - 2] {
            let e = mk_pte(Pfn(pfn), PTE_WRITE | PTE_DIRTY);
            assert_eq!(pte_pfn(e), Pfn(pfn));
            assert_eq!(e & (PTE_PRESENT | PTE_ZERO | PTE_YOUNG | PTE_DIRTY | PTE_WRITE), PTE_PRESENT | PTE_DIRTY | PTE_WRITE);
        }
        let mut pt = PageTables::default();
        let t = pt.new_pte_table(Pfn(7));
        pt.set_pte(t, 3, 0);
        assert_eq!(pt.chunk_arena.len(), 0, "a none entry allocates nothing");
        pt.set_pte(t, 300, mk_pte(Pfn(1 << 29), 0));
        assert_eq!(pt.chunk_arena.len(), 1);
        assert_eq!(pte_pfn(pt.pte(t, 300)), Pfn(1 << 29));
        assert!(pt.ptes_none(t, 0..300) && pt.ptes_none(t, 301..512) && !pt.ptes_none(t, 290..310));
        assert_eq!(pt.all_ptes(t).filter(|&e| e != 0).count(), 1);
        assert_eq!(pt.present_ptes(t, 0..512).collect::<Vec<_>>(), vec![(300, pt.pte(t, 300))]);
        let mut seen = Vec::new();
        pt.for_each_present(t, 290..512, |i, e| seen.push((i, e)));
        assert_eq!(seen, vec![(300, pt.pte(t, 300))]);
        pt.for_each_present(t, 301..512, |i, _| panic!("entry {i} is none"));
        assert_eq!(pt.present_ptes(t, 290..300).count() + pt.present_ptes(t, 301..310).count(), 0);
        assert_eq!(pt.free_pte_table(t), Pfn(7));
        let u = pt.new_pte_table(Pfn(8));
        assert!(pt.ptes_none(u, 0..512), "a reused chunk comes back zeroed");
        pt.set_pte(u, 0, ZERO_PTE);
        assert_eq!(pt.chunk_arena.len(), 1, "the freed chunk is reused");
        assert_eq!(pt.pte(u, 0), ZERO_PTE);
        // Every flag combination survives the 36-bit storage, entry by entry.
        for (i, pte) in [mk_pte(Pfn(0), 0), mk_pte(Pfn(5), PTE_YOUNG), mk_pte(Pfn((1 << 30) - 1), PTE_DIRTY | PTE_WRITE), ZERO_PTE | PTE_YOUNG]
            .into_iter()
            .enumerate()
        {
            pt.set_pte(u, 17 + i, pte);
            assert_eq!(pt.pte(u, 17 + i), pte, "entry {i}");
        }
        pt.set_pte(u, 18, 0);
        assert_eq!((pt.pte(u, 18), pt.pte(u, 19)), (0, mk_pte(Pfn((1 << 30) - 1), PTE_DIRTY | PTE_WRITE)), "clearing one entry keeps its neighbours");
    }
}
