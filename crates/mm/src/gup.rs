//! Memory populated without a user page fault: mm/gup.c and mm/mlock.c.
//!
//! `populate_vma_page_range` (MAP_POPULATE, MAP_LOCKED, mlock, mlockall, and mmap or brk under
//! `mlockall(MCL_FUTURE)`: `__mm_populate`) and `faultin_page_range` (MADV_POPULATE_READ and
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

/// What a populate did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Populated {
    /// Faults taken (each counted in minflt, as the kernel does).
    pub faults: u64,
    /// Pages of VMAs the model does not back, which the kernel populated too.
    pub unmodelled_pages: u64,
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
        for v in self.vmas.intersecting(start, end) {
            if v.start > cursor && how != Populate::Mlock {
                return Err(Errno::ENOMEM);
            }
            let (s, e) = (v.start.max(start), v.end.min(end));
            cursor = e;
            if v.flags & vm::SPECIAL != 0 {
                done.unmodelled_pages += (e - s) / PAGE_SIZE;
                continue;
            }
            let write = match how {
                Populate::Write => true,
                Populate::Read => false,
                Populate::Mlock => {
                    if v.flags & vm::ACCESS == 0 || v.flags & vm::LOCKONFAULT != 0 {
                        continue;
                    }
                    v.flags & (vm::WRITE | vm::SHARED) == vm::WRITE
                }
            };
            if how != Populate::Mlock && (v.flags & vm::ACCESS == 0 || (write && v.flags & vm::WRITE == 0)) {
                return Err(Errno::EFAULT);
            }
            let mut addr = s;
            while addr < e {
                match self.access(addr, write) {
                    Access::Fault => done.faults += 1,
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
        self.mm_flags.def_flags = if flags & MCL_FUTURE != 0 { lock } else { 0 };
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
        self.mm_flags.def_flags = 0;
        let _ = self.modify_flags(0, mm_types::TASK_SIZE, |f| f & !(vm::LOCKED | vm::LOCKONFAULT), false);
    }

    /// `mm->def_flags` from `mlockall(MCL_FUTURE)`: new mappings and brk growth get them, and
    /// are populated unless VM_LOCKONFAULT.
    pub fn mlock_future_flags(&self) -> u32 {
        self.mm_flags.def_flags
    }
}
