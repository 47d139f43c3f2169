//! Pages of the file mappings a replay does not back (the model's `vm::SPECIAL` VMAs: the ELF,
//! its libraries, other mmapped files, the vDSO): which of them are mapped, so that population
//! without faults (mlock, mlockall(MCL_CURRENT), mmap under MCL_FUTURE or MAP_LOCKED,
//! MAP_POPULATE, MADV_POPULATE_READ/WRITE) takes the faults the kernel takes for them.
//!
//! What maps a page, from the recorded faults (6.18):
//! - A read or exec fault on a file page: `do_read_fault` → `do_fault_around` maps every page of
//!   the page cache in a window of `fault_around_bytes` (64 KiB) around it
//!   (`mm::memory::fault_around_window`, the one mm's shmem faults use; `filemap_map_pages` maps
//!   the cached pages in it). The page cache is taken to hold the whole file: programs map
//!   libraries that are cached.
//! - A write fault on a private file page: `do_cow_fault` (no fault-around) or `do_wp_page`;
//!   the page is then the task's own, writable.
//! - The vDSO is a special mapping (`special_mapping_fault`, no `map_pages`): one page a fault.
//!   [vvar] is VM_IO | VM_PFNMAP: GUP skips it (`check_vma_flags`).
//! - mremap carries a VMA's PTEs to where it goes (mm/mremap.c: `move_page_tables`).
//!
//! What GUP then faults (mm/gup.c: `__get_user_pages` → `faultin_page` for every page not mapped
//! with the access it needs; each fault counted in min_flt by `mm_account_fault`): a read, where
//! the page is not mapped (and the fault maps its window); a write (FOLL_WRITE: mlock of a
//! private writable VMA, MADV_POPULATE_WRITE), where the page is not the task's own writable page.
//!
//! fork copies the page tables of a VMA only where it has an anon_vma (`vma_needs_copy`): a
//! private file VMA the task wrote to (a COW fault prepares it, `anon_vma_prepare`), or a part
//! split from one (`__split_vma` clones it: the RELRO part ld.so makes read-only after writing
//! it). The child then has its pages mapped, write-protected, and so has the parent
//! (`copy_present_pte`): a later write (or FOLL_WRITE) faults again in both. A VMA without one
//! is not copied: the child faults its pages anew.

use std::collections::BTreeMap;

use mm::vma::{vm, Vma};
use mm_types::PAGE_SIZE;

const PRESENT: u8 = 1;
/// The task's own writable page (a private page after COW, or a shared page written).
const WRITTEN: u8 = 2;

/// What kind of mapping a special VMA is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A file in the page cache: fault-around.
    File,
    /// The vDSO: one page a fault.
    SpecialMapping,
    /// [vvar]: VM_PFNMAP, never populated.
    Pfnmap,
}

/// The mapped pages of one image's special VMAs, by model address.
#[derive(Clone, Debug, Default)]
pub(crate) struct FilePages {
    pages: BTreeMap<u64, u8>,
    /// Ranges that are not files ([vdso], [vvar]), from the exec snapshot.
    kinds: Vec<(u64, u64, Kind)>,
    /// The extent of each private file VMA when it got its anon_vma (its first COW): a VMA
    /// that overlaps one has it (a split keeps it on both sides).
    anon_vmas: Vec<(u64, u64)>,
}

impl FilePages {
    /// A range of the exec snapshot by its /proc/PID/maps name: [vdso] and [vvar] (and
    /// [vvar_vclock]) are not files. In the private writable mapping of an ELF's data
    /// (`writable_private`), execve cleared the bss's start in the segment's last file page
    /// (fs/binfmt_elf.c: elf_load → padzero, a write fault of the kernel inside the call): that
    /// page is the task's own at the first instruction.
    pub fn exec_mapping(&mut self, start: u64, end: u64, path: &[u8], writable_private: bool) {
        let kind = match path {
            b"[vdso]" => Kind::SpecialMapping,
            b"[vvar]" | b"[vvar_vclock]" => Kind::Pfnmap,
            _ => {
                if writable_private && end > start {
                    self.pages.insert(end - PAGE_SIZE, PRESENT | WRITTEN);
                    self.anon_vmas.push((start, end));
                }
                return;
            }
        };
        self.kinds.push((start, end, kind));
    }

    fn kind(&self, addr: u64) -> Kind {
        self.kinds
            .iter()
            .find(|&&(s, e, _)| (s..e).contains(&addr))
            .map_or(Kind::File, |k| k.2)
    }

    /// A recorded fault at `addr` in `vma` (a special VMA).
    pub fn fault(&mut self, vma: &Vma, addr: u64, write: bool) {
        let page = addr & !(PAGE_SIZE - 1);
        match self.kind(page) {
            Kind::Pfnmap => {}
            _ if write => {
                *self.pages.entry(page).or_default() |= PRESENT | WRITTEN;
                if vma.flags & vm::SHARED == 0 && !self.has_anon_vma(vma) {
                    self.anon_vmas.push((vma.start, vma.end));
                }
            }
            Kind::SpecialMapping => *self.pages.entry(page).or_default() |= PRESENT,
            Kind::File => {
                let (from, to) = mm::memory::fault_around_window(vma, page);
                for p in (from..to).step_by(PAGE_SIZE as usize) {
                    *self.pages.entry(p).or_default() |= PRESENT;
                }
            }
        }
    }

    /// `[start, end)` was unmapped or replaced.
    pub fn forget(&mut self, start: u64, end: u64) {
        let gone: Vec<u64> = self.pages.range(start..end).map(|(&p, _)| p).collect();
        for p in gone {
            self.pages.remove(&p);
        }
        self.kinds.retain(|&(s, e, _)| e <= start || s >= end);
        self.anon_vmas.retain(|&(s, e)| s < start || e > end);
    }

    /// mremap of a special VMA from `[old, old + old_len)` to `[new, new + new_len)` (lengths
    /// in whole pages; `new == old` in place): `move_page_tables` carries the PTEs of the first
    /// `min(old_len, new_len)` bytes with the VMA, its anon_vma and kind too; the rest of the old
    /// range is unmapped, the grown part is not mapped yet, and whatever the destination held
    /// was unmapped first (MREMAP_FIXED).
    pub fn mremap(&mut self, old: u64, old_len: u64, new: u64, new_len: u64) {
        let keep = old_len.min(new_len);
        let to = |a: u64| a - old + new;
        let pages: Vec<(u64, u8)> = self
            .pages
            .range(old..old + keep)
            .map(|(&p, &f)| (to(p), f))
            .collect();
        let kinds: Vec<(u64, u64, Kind)> = self
            .kinds
            .iter()
            .filter(|&&(s, e, _)| s < old + keep && e > old)
            .map(|&(s, e, k)| (to(s.max(old)), to(e.min(old + keep)), k))
            .collect();
        let had_anon_vma = self
            .anon_vmas
            .iter()
            .any(|&(s, e)| s < old + old_len && e > old);
        self.forget(old, old + old_len);
        self.forget(new, new + new_len);
        self.pages.extend(pages);
        self.kinds.extend(kinds);
        if had_anon_vma {
            self.anon_vmas.push((new, new + new_len));
        }
    }

    fn has_anon_vma(&self, vma: &Vma) -> bool {
        self.anon_vmas
            .iter()
            .any(|&(s, e)| s < vma.end && e > vma.start)
    }

    /// GUP over `[start, end)` of `vma` (a special VMA), writing or reading: the faults taken.
    pub fn populate(&mut self, vma: &Vma, start: u64, end: u64, write: bool) -> u64 {
        let mut faults = 0;
        let (start, end) = (start.max(vma.start), end.min(vma.end));
        let mut page = start & !(PAGE_SIZE - 1);
        while page < end {
            let state = self.pages.get(&page).copied().unwrap_or(0);
            let kind = self.kind(page);
            if kind == Kind::Pfnmap {
                return faults;
            }
            let needs = if write { WRITTEN } else { PRESENT };
            if state & needs == 0 {
                faults += 1;
                self.fault(vma, page, write);
            }
            page += PAGE_SIZE;
        }
        faults
    }

    /// fork: the child's pages (those of special VMAs with an anon_vma, now write-protected in
    /// both), and the parent's write-protected too. `vmas`: the parent's special VMAs.
    pub fn fork(&mut self, vmas: &[Vma]) -> FilePages {
        let mut child = FilePages {
            pages: BTreeMap::new(),
            kinds: self.kinds.clone(),
            anon_vmas: self.anon_vmas.clone(),
        };
        for v in vmas {
            if !self.has_anon_vma(v) || self.kind(v.start) == Kind::Pfnmap {
                continue;
            }
            for (&p, s) in self.pages.range_mut(v.start..v.end) {
                *s &= !WRITTEN;
                child.pages.insert(p, PRESENT);
            }
        }
        child
    }
}


#[cfg(test)]
mod tests {
    use super::*;
    use mm::memory::fault_around_window;
    use mm_types::PMD_SIZE;

    fn vma(start: u64, end: u64, flags: u32) -> Vma {
        Vma {
            start,
            end,
            flags: flags | vm::SPECIAL,
            anon_vma: 0,
            file: 0,
            pgoff: 0,
        }
    }

    /// Derived from mm/memory.c: do_fault_around. A read at page 5 of a VMA starting at a
    /// 64 KiB boundary maps pages 0-15; a VMA starting at page 3 of a block maps from page 3 to
    /// page 19 (16 pages from its start, past the block); the window stops at the VMA's end and
    /// at the page table's.
    #[test]
    fn fault_around_windows() {
        let b = 0x7f00_0000_0000u64;
        assert_eq!(
            fault_around_window(&vma(b, b + (1 << 20), vm::READ), b + 5 * PAGE_SIZE),
            (b, b + 16 * PAGE_SIZE)
        );
        let v = vma(b + 3 * PAGE_SIZE, b + (1 << 20), vm::READ);
        assert_eq!(
            fault_around_window(&v, b + 5 * PAGE_SIZE),
            (b + 3 * PAGE_SIZE, b + 19 * PAGE_SIZE)
        );
        let v = vma(b, b + 7 * PAGE_SIZE, vm::READ);
        assert_eq!(
            fault_around_window(&v, b + 5 * PAGE_SIZE),
            (b, b + 7 * PAGE_SIZE)
        );
        let v = vma(
            b + PMD_SIZE - 4 * PAGE_SIZE,
            b + PMD_SIZE + (1 << 20),
            vm::READ,
        );
        assert_eq!(
            fault_around_window(&v, b + PMD_SIZE - 2 * PAGE_SIZE),
            (b + PMD_SIZE - 4 * PAGE_SIZE, b + PMD_SIZE)
        );
    }

    /// mlock of a 40-page read-only file VMA whose page 20 was read before: the read mapped
    /// pages 16-31, so GUP faults at pages 0 (mapping 0-15) and 32 (32-39): 2 faults. A private
    /// writable VMA of 3 pages, page 1 written before: GUP writes pages 0 and 2, 2 faults; a
    /// second mlock takes none. The vDSO: one fault a page not mapped; [vvar]: none.
    #[test]
    fn gup_faults_where_the_page_is_not_mapped_as_needed() {
        let b = 0x7f00_0000_0000u64;
        let mut f = FilePages::default();
        let text = vma(b, b + 40 * PAGE_SIZE, vm::READ | vm::EXEC);
        f.fault(&text, b + 20 * PAGE_SIZE + 8, false);
        assert_eq!(f.populate(&text, text.start, text.end, false), 2);
        assert_eq!(f.populate(&text, text.start, text.end, false), 0);
        let data = vma(
            b + (1 << 20),
            b + (1 << 20) + 3 * PAGE_SIZE,
            vm::READ | vm::WRITE,
        );
        f.fault(&data, data.start + PAGE_SIZE, true);
        assert_eq!(mm::gup::Populate::Mlock.writes(&data), Some(true));
        assert_eq!(f.populate(&data, data.start, data.end, true), 2);
        assert_eq!(f.populate(&data, data.start, data.end, true), 0);
        // fork write-protects the written VMA in both; the text VMA (never written) is not copied.
        let mut child = f.fork(&[text, data]);
        assert_eq!(f.populate(&data, data.start, data.end, true), 3);
        assert_eq!(child.populate(&data, data.start, data.end, true), 3);
        assert_eq!(child.populate(&text, text.start, text.end, false), 3);
        let vdso_at = b + (2 << 20);
        let mut g = FilePages::default();
        g.exec_mapping(vdso_at, vdso_at + 2 * PAGE_SIZE, b"[vdso]", false);
        g.exec_mapping(
            vdso_at + 2 * PAGE_SIZE,
            vdso_at + 6 * PAGE_SIZE,
            b"[vvar]",
            false,
        );
        let vdso = vma(vdso_at, vdso_at + 2 * PAGE_SIZE, vm::READ | vm::EXEC);
        g.fault(&vdso, vdso_at, false);
        assert_eq!(g.populate(&vdso, vdso.start, vdso.end, false), 1);
        let vvar = vma(vdso_at + 2 * PAGE_SIZE, vdso_at + 6 * PAGE_SIZE, vm::READ);
        assert_eq!(g.populate(&vvar, vvar.start, vvar.end, false), 0);
        // The ELF's data at exec: its last page was written by execve (padzero).
        let elf_data = vma(
            b + (3 << 20),
            b + (3 << 20) + 2 * PAGE_SIZE,
            vm::READ | vm::WRITE,
        );
        g.exec_mapping(elf_data.start, elf_data.end, b"/usr/bin/prog", true);
        assert_eq!(g.populate(&elf_data, elf_data.start, elf_data.end, true), 1);
        // Unmapped: its pages are forgotten (the parent's text: 3 faults again).
        f.forget(text.start, text.end);
        assert_eq!(f.populate(&text, text.start, text.end, false), 3);
    }

    /// mremap carries a file VMA's mapped pages to where it moves: a 16-page read-only VMA read
    /// at page 0 (pages 0-15 mapped) moved and grown to 24 pages: GUP faults once, at page 16 of
    /// the new place (mapping 16-23), not at 0 as for a VMA that forgot its pages. Shrunk in
    /// place to 8 pages and grown back to 16: pages 8-15 were unmapped, one fault.
    #[test]
    fn mremap_moves_the_mapped_pages_with_the_vma() {
        let b = 0x7f00_0000_0000u64;
        let mut f = FilePages::default();
        let v = vma(b, b + 16 * PAGE_SIZE, vm::READ);
        f.fault(&v, b, false);
        let n = b + (4 << 20);
        f.mremap(v.start, 16 * PAGE_SIZE, n, 24 * PAGE_SIZE);
        let moved = vma(n, n + 24 * PAGE_SIZE, vm::READ);
        assert_eq!(f.populate(&v, v.start, v.end, false), 1, "the old place's pages went with the VMA");
        assert_eq!(f.populate(&moved, moved.start, moved.end, false), 1);
        f.mremap(n, 24 * PAGE_SIZE, n, 8 * PAGE_SIZE);
        f.mremap(n, 8 * PAGE_SIZE, n, 16 * PAGE_SIZE);
        let regrown = vma(n, n + 16 * PAGE_SIZE, vm::READ);
        assert_eq!(f.populate(&regrown, regrown.start, regrown.end, false), 1);
    }
}
