//! Memory populated without a user page fault: mm/gup.c and mm/mlock.c.
//!
//! `populate_vma_page_range` (MAP_POPULATE, MAP_LOCKED, mlock, mlockall, and mmap or brk under
//! `mlockall(MCL_FUTURE)`: `__mm_populate`; the new part of a locked mapping mremap grows,
//! mm/mremap.c: `do_mremap`; a private locked VMA mprotect makes writable, mm/mprotect.c:
//! `mprotect_fixup`) and `faultin_page_range` (MADV_POPULATE_READ and
//! MADV_POPULATE_WRITE: `madvise_populate`) walk the range with `__get_user_pages`, whose
//! `faultin_page` calls `handle_mm_fault` for every page that is not mapped with the needed
//! permission. So a populate takes the same decisions as a fault (the same folio orders, the
//! huge zero folio for a read), and `mm_account_fault` counts each one in the task's `min_flt`
//! (regs is NULL, so only the perf event is skipped: a recorder that follows the page-fault
//! tracepoint never sees them). Measured here (docs/kernel-notes.md 17): MAP_POPULATE of 8 MiB
//! under 4 KiB pages is 2048 minflt inside mmap; MADV_POPULATE_WRITE of a MADV_HUGEPAGE'd
//! 8 MiB is 4 minflt and 4 PMD THPs.
//!
//! `populate_vma_page_range` writes (FOLL_WRITE) only where `(vm_flags & (VM_WRITE |
//! VM_SHARED)) == VM_WRITE`, to break COW; other VMAs are read (FOLL_FORCE). VMAs with no access
//! rights are skipped, and VM_LOCKONFAULT is never populated (`__mm_populate`).
//!
//! Direct I/O pins its buffer (`Kernel::pin_user_pages_fast`, as `iov_iter_extract_pages` calls
//! it for an O_DIRECT read): `pin_user_pages_fast` → `gup_fast_fallback` first walks the page
//! tables without locks (`gup_fast_pgd_range` … `gup_fast_pmd_leaf` takes a PMD-mapped folio
//! whole with one `try_grab_folio_fast` of all its pages, `gup_fast_pte_range` takes one page a
//! PTE); what it cannot take (not present, or not writable for FOLL_WRITE) goes to
//! `__gup_longterm_locked` → `__get_user_pages`, whose `faultin_page` takes a write fault as a
//! populate does. The bio then holds one entry per folio run, and completion unpins folio by
//! folio (`unpin_user_folio`). The model reports the folios and the pages, PTE- and
//! PMD-mapped, that each call pinned, for the `[pin]` costs of a machine profile.
//!
//! Modelled: the anonymous and shmem VMAs of the model, page by page. Not modelled: pages of
//! VMAs the model does not back (`vm::SPECIAL`: file pages, the vDSO): they are counted in
//! [`Populated::unmodelled_pages`] so that a caller can say so.

use mm_types::PAGE_SIZE;

use crate::vma::vm;
use crate::{Access, Errno, Kernel};

/// How a range is faulted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Populate {
    /// `populate_vma_page_range`: write where private and writable, read elsewhere.
    Mlock,
    /// MADV_POPULATE_READ.
    Read,
    /// MADV_POPULATE_WRITE.
    Write,
}

impl Populate {
    /// Whether GUP writes `vma` (FOLL_WRITE) when it populates it this way; None when it
    /// leaves the VMA alone (`populate_vma_page_range` skips VMAs with no access rights and
    /// VM_LOCKONFAULT, and writes only where `(vm_flags & (VM_WRITE | VM_SHARED)) == VM_WRITE`).
    pub fn writes(self, vma: &crate::vma::Vma) -> Option<bool> {
        match self {
            Populate::Write => Some(true),
            Populate::Read => Some(false),
            Populate::Mlock if vma.flags & vm::ACCESS == 0 || vma.flags & vm::LOCKONFAULT != 0 => None,
            Populate::Mlock => Some(vma.flags & (vm::WRITE | vm::SHARED) == vm::WRITE),
        }
    }
}

/// What a populate did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Populated {
    /// Faults taken (each counted in minflt, as the kernel does).
    pub faults: u64,
    /// Pages of VMAs the model does not back, which the kernel populated too.
    pub unmodelled_pages: u64,
}

/// What one `pin_user_pages_fast` call pinned (and unpinned at completion).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pinned {
    /// Folio runs pinned: consecutive pages of one folio count once (a bio_vec each).
    pub folios: u64,
    /// Pages reached through a PTE (`gup_fast_pte_range`).
    pub pte_pages: u64,
    /// Pages of PMD-mapped folios (`gup_fast_pmd_leaf`).
    pub pmd_pages: u64,
    /// Write faults taken to map the buffer (`faultin_page`; counted in minflt).
    pub faults: u64,
    /// Pages of VMAs the model does not back (pinned by the kernel, not counted above).
    pub unmodelled_pages: u64,
}

impl Pinned {
    pub fn add(&mut self, o: &Pinned) {
        self.folios += o.folios;
        self.pte_pages += o.pte_pages;
        self.pmd_pages += o.pmd_pages;
        self.faults += o.faults;
        self.unmodelled_pages += o.unmodelled_pages;
    }
}

/// mlock2's MLOCK_ONFAULT and mlockall's flags.
pub use linux_abi::mman::{MCL_CURRENT, MCL_FUTURE, MCL_ONFAULT, MLOCK_ONFAULT};

impl Kernel {
    /// Fault in `[start, end)` as GUP does. MADV_POPULATE_* fail with EFAULT where the VMA does
    /// not allow the access and ENOMEM where nothing is mapped (`madvise_populate`); the mlock
    /// walk skips what it cannot populate.
    pub fn populate_range(&mut self, start: u64, end: u64, how: Populate) -> Result<Populated, Errno> {
        let mut done = Populated::default();
        let mut cursor = start;
        for v in self.mm.vmas.intersecting(start, end) {
            if v.start > cursor && how != Populate::Mlock {
                return Err(Errno::ENOMEM);
            }
            let (s, e) = (v.start.max(start), v.end.min(end));
            cursor = e;
            if v.flags & vm::SPECIAL != 0 {
                done.unmodelled_pages += (e - s) / PAGE_SIZE;
                continue;
            }
            let Some(write) = how.writes(&v) else { continue };
            if how != Populate::Mlock && (v.flags & vm::ACCESS == 0 || (write && v.flags & vm::WRITE == 0)) {
                return Err(Errno::EFAULT);
            }
            let mut addr = s;
            while addr < e {
                match self.access(addr, write) {
                    // A userfaultfd's page: GUP waits for its reader, whose UFFDIO_COPY or
                    // UFFDIO_ZEROPAGE comes later in a recording.
                    Access::Fault | Access::Userfault => done.faults += 1,
                    Access::Hit => {}
                    Access::Oom => return Err(Errno::ENOMEM),
                    // Beyond the end of a shared file (SIGBUS for a fault): GUP stops there.
                    Access::Sigbus => return Err(Errno::EFAULT),
                    Access::Segv => return Err(Errno::EFAULT),
                }
                addr += PAGE_SIZE;
            }
        }
        if cursor < end && how != Populate::Mlock {
            return Err(Errno::ENOMEM);
        }
        Ok(done)
    }

    /// `apply_vma_lock_flags` (mm/mlock.c): VM_LOCKED, with MLOCK_ONFAULT also
    /// VM_LOCKONFAULT, on every VMA of `[start, start + len)`; ENOMEM at a hole.
    pub fn apply_vma_lock_flags(&mut self, start: u64, len: u64, flags: u64) -> Result<(), Errno> {
        let end = Self::checked_range(start, len)?;
        let lock = vm::LOCKED | if flags & MLOCK_ONFAULT != 0 { vm::LOCKONFAULT } else { 0 };
        self.modify_flags(start, end, |f| (f & !vm::LOCKONFAULT) | lock, true)
    }

    /// Where `addr` is mapped writable: (folio head, through a PMD). None when a write would
    /// fault (nothing mapped, the zero page, a read-only or COW mapping).
    fn writable_folio(&self, addr: u64) -> Option<(mm_types::Pfn, bool)> {
        use crate::pgtable::{pte_pfn, Pmd, PTE_PRESENT, PTE_WRITE, PTE_ZERO};
        let va = mm_types::Vaddr(addr);
        let table = self.mm.pt.pmd_table_ro(va)?;
        match self.mm.pt.pmd(table, va) {
            Pmd::Huge { pfn, write: true, .. } => Some((pfn, true)),
            Pmd::Table(idx) => {
                let e = self.mm.pt.pte(idx, va.pte_index());
                (e & PTE_PRESENT != 0 && e & PTE_WRITE != 0 && e & PTE_ZERO == 0)
                    .then(|| (self.folio_head(pte_pfn(e)), false))
            }
            _ => None,
        }
    }

    /// `pin_user_pages_fast(start, len / PAGE_SIZE, FOLL_WRITE, pages)` and the unpin at
    /// completion, for the buffer of an O_DIRECT read (see the module docs). EFAULT where the
    /// range is unmapped or not writable (read(2) returns it), ENOMEM when a fault cannot
    /// allocate.
    pub fn pin_user_pages_fast(&mut self, start: u64, len: u64) -> Result<Pinned, Errno> {
        let end = Self::checked_range(start, len)?;
        let mut done = Pinned::default();
        let mut last_head = None;
        let mut addr = start;
        while addr < end {
            let Some(v) = self.mm.vmas.find(addr) else { return Err(Errno::EFAULT) };
            if v.flags & vm::SPECIAL != 0 {
                done.unmodelled_pages += 1;
                last_head = None;
                addr += PAGE_SIZE;
                continue;
            }
            if v.flags & vm::WRITE == 0 {
                return Err(Errno::EFAULT);
            }
            let got = match self.writable_folio(addr) {
                Some(f) => f,
                None => {
                    match self.access(addr, true) {
                        Access::Fault => done.faults += 1,
                        Access::Hit => {}
                        Access::Oom => return Err(Errno::ENOMEM),
                        // The model cannot wait for a userfaultfd's reader: nothing to pin.
                        Access::Sigbus | Access::Segv | Access::Userfault => return Err(Errno::EFAULT),
                    }
                    self.writable_folio(addr).ok_or(Errno::EFAULT)?
                }
            };
            let (head, pmd) = got;
            if last_head != Some(head) {
                done.folios += 1;
                last_head = Some(head);
            }
            if pmd {
                done.pmd_pages += 1;
            } else {
                done.pte_pages += 1;
            }
            addr += PAGE_SIZE;
        }
        Ok(done)
    }

    /// `mlock` / `mlock2` (`do_mlock`): lock, then `__mm_populate` unless on fault.
    pub fn do_mlock(&mut self, start: u64, len: u64, flags: u64) -> Result<Populated, Errno> {
        self.apply_vma_lock_flags(start, len, flags)?;
        if flags & MLOCK_ONFAULT != 0 {
            return Ok(Populated::default());
        }
        let end = Self::checked_range(start, len)?;
        self.populate_range(start, end, Populate::Mlock)
    }

    /// `munlock`: the flags go; pages stay.
    pub fn do_munlock(&mut self, start: u64, len: u64) -> Result<(), Errno> {
        let end = Self::checked_range(start, len)?;
        self.modify_flags(start, end, |f| f & !(vm::LOCKED | vm::LOCKONFAULT), true)
    }

    /// `apply_mlockall_flags`: MCL_FUTURE sets `def_flags` for later mappings
    /// ([`Kernel::mlock_future_flags`]); MCL_CURRENT locks every VMA.
    pub fn apply_mlockall_flags(&mut self, flags: u64) {
        let lock = vm::LOCKED | if flags & MCL_ONFAULT != 0 { vm::LOCKONFAULT } else { 0 };
        self.mm.flags.def_flags = if flags & MCL_FUTURE != 0 { lock } else { 0 };
        if flags & MCL_CURRENT != 0 {
            let _ = self.modify_flags(0, mm_types::TASK_SIZE, |f| (f & !vm::LOCKONFAULT) | lock, false);
        }
    }

    /// `mlockall`: then `mm_populate(0, TASK_SIZE)` for MCL_CURRENT without MCL_ONFAULT.
    pub fn do_mlockall(&mut self, flags: u64) -> Result<Populated, Errno> {
        self.apply_mlockall_flags(flags);
        if flags & MCL_CURRENT == 0 || flags & MCL_ONFAULT != 0 {
            return Ok(Populated::default());
        }
        self.populate_range(0, mm_types::TASK_SIZE, Populate::Mlock)
    }

    /// `munlockall`.
    pub fn do_munlockall(&mut self) {
        self.mm.flags.def_flags = 0;
        let _ = self.modify_flags(0, mm_types::TASK_SIZE, |f| f & !(vm::LOCKED | vm::LOCKONFAULT), false);
    }

    /// `mm->def_flags` from `mlockall(MCL_FUTURE)`: new mappings and brk growth get them, and
    /// are populated unless VM_LOCKONFAULT.
    pub fn mlock_future_flags(&self) -> u32 {
        self.mm.flags.def_flags
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mmap::MmapPlacement;
    use crate::BootParams;
    use thp_abi::ThpSettings;

    fn kernel() -> Kernel {
        let mut s = ThpSettings::default();
        s.apply_assignment("enabled=never").unwrap();
        Kernel::boot(
            &BootParams {
                mem_bytes: 256 << 20,
                ..Default::default()
            },
            &s,
        )
    }

    /// Under mlockall(MCL_FUTURE), memory that becomes locked and accessible without a fault is
    /// populated as the kernel does (read live: tests/it/progs/locked_growth.c): a PROT_NONE
    /// reservation made writable (mprotect_fixup: 1 MiB, 256 faults), a mapping populated at
    /// mmap (64 KiB, 16) then grown by mremap, moved (the new 960 KiB, 240) and in place (256).
    /// Without MCL_FUTURE the same calls take no fault.
    #[test]
    fn locked_memory_that_grows_or_becomes_writable_is_populated() {
        for (flags, faults) in [(MCL_FUTURE, [256, 16, 240, 256]), (0, [0, 0, 0, 0])] {
            let mut k = kernel();
            k.apply_mlockall_flags(flags);
            let lock = k.mlock_future_flags();
            let minflt = |k: &Kernel| k.stats().minflt;
            let res = k.do_mmap(4 << 20, lock, MmapPlacement::Kernel).unwrap();
            let a = minflt(&k);
            k.do_mprotect(res, 1 << 20, vm::READ | vm::WRITE).unwrap();
            let b = minflt(&k);
            let m = k
                .do_mmap(64 << 10, vm::READ | vm::WRITE | lock, MmapPlacement::Kernel)
                .unwrap();
            if lock & vm::LOCKED != 0 {
                k.populate_range(m, m + (64 << 10), Populate::Mlock)
                    .unwrap();
            }
            let c = minflt(&k);
            let dest = k.get_unmapped_area(1 << 20, MmapPlacement::Kernel).unwrap();
            k.do_mremap(m, 64 << 10, 1 << 20, dest).unwrap();
            let d = minflt(&k);
            k.do_munmap(res + (1 << 20), 3 << 20).unwrap();
            k.do_mremap(res, 1 << 20, 2 << 20, res).unwrap();
            let e = minflt(&k);
            assert_eq!(
                [b - a, c - b, d - c, e - d],
                faults,
                "mlockall flags {flags}"
            );
        }
    }
}
