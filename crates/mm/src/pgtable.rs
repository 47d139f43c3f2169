//! Page tables: PMD tables (one per 1 GiB, reached from a PUD entry) and PTE tables (one per
//! 2 MiB), in arenas indexed by table number.
//!
//! Kernel sources (6.18): `include/linux/pgtable.h` (`pte_none`, `pmd_none`, `pmd_trans_huge`),
//! `arch/x86/include/asm/pgtable_types.h` (bits), `mm/pgtable-generic.c`
//! (`pgtable_trans_huge_deposit` / `_withdraw`), `mm/memory.c` (`__pte_alloc`, `__pmd_alloc`,
//! `free_pgd_range`).
//!
//! A PTE is 32 bits: 0 is `pte_none`; otherwise bit 0 present, bit 1 the shared zero page,
//! bit 2 young, bit 3 dirty, bit 4 writable, bits 5.. the PFN. A PMD entry is 64 bits: 0 is
//! `pmd_none`; tag 1 a PTE table (index), tag 2 a PMD-mapped folio (PFN and young/dirty/write
//! bits), tag 3 the huge zero folio. Every table also owns the frame the kernel would allocate
//! for it, and each huge PMD owns its deposited PTE table, so page-table memory is accounted.

use std::collections::BTreeMap;

use mm_types::{Pfn, Vaddr, PUD_SHIFT};

pub(crate) const PTE_PRESENT: u32 = 1 << 0;
pub(crate) const PTE_ZERO: u32 = 1 << 1;
pub(crate) const PTE_YOUNG: u32 = 1 << 2;
pub(crate) const PTE_DIRTY: u32 = 1 << 3;
pub(crate) const PTE_WRITE: u32 = 1 << 4;
const PTE_PFN_SHIFT: u32 = 5;

pub(crate) fn pte_pfn(pte: u32) -> Pfn {
    Pfn(pte >> PTE_PFN_SHIFT)
}
pub(crate) fn mk_pte(pfn: Pfn, bits: u32) -> u32 {
    debug_assert!(pfn.0 < 1 << (32 - PTE_PFN_SHIFT));
    (pfn.0 << PTE_PFN_SHIFT) | bits | PTE_PRESENT
}
/// The shared zero page: special, never writable, no struct page in the model.
pub(crate) const ZERO_PTE: u32 = PTE_PRESENT | PTE_ZERO;

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
    /// All PTE tables in one arena: table `i` is `pte_arena[i * 512..][..512]`.
    pte_arena: Vec<u32>,
    /// The frame of each PTE table; `NO_FRAME` for a free slot.
    pte_frames: Vec<u32>,
    free_pte: Vec<u32>,
    /// One-entry cache of the last PUD lookup: (1 GiB index, PMD table).
    last_pud: Option<(u64, u32)>,
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
        match self.free_pte.pop() {
            Some(i) => {
                self.pte_frames[i as usize] = frame.0;
                i
            }
            None => {
                self.pte_arena.resize(self.pte_arena.len() + 512, 0);
                self.pte_frames.push(frame.0);
                (self.pte_frames.len() - 1) as u32
            }
        }
    }

    /// Drop a PTE table; returns its frame for the allocator. Its slot is zeroed for reuse.
    pub fn free_pte_table(&mut self, idx: u32) -> Pfn {
        let frame = std::mem::replace(&mut self.pte_frames[idx as usize], NO_FRAME);
        debug_assert_ne!(frame, NO_FRAME, "free of a free PTE table");
        self.ptes_mut(idx).fill(0);
        self.free_pte.push(idx);
        Pfn(frame)
    }

    #[inline]
    pub fn ptes(&self, idx: u32) -> &[u32; 512] {
        let i = idx as usize * 512;
        self.pte_arena[i..i + 512].try_into().expect("512 entries")
    }

    #[inline]
    pub fn ptes_mut(&mut self, idx: u32) -> &mut [u32; 512] {
        let i = idx as usize * 512;
        (&mut self.pte_arena[i..i + 512]).try_into().expect("512 entries")
    }

    /// Every PUD key (1 GiB index) with its PMD table.
    pub fn puds(&self) -> Vec<(u64, u32)> {
        self.puds.iter().map(|(k, v)| (*k, *v)).collect()
    }



    pub fn deposited(&self, table: u32, slot: usize) -> u32 {
        self.pmd_tables[table as usize].as_ref().expect("live PMD table").deposit[slot]
    }


    /// Host bytes the page tables use (for the memory benchmark).
    pub fn host_bytes(&self) -> usize {
        self.pmd_tables.len() * (512 * 8 + 512 * 4 + 16) + self.pte_arena.capacity() * 4 + self.pte_frames.capacity() * 4
    }
}
