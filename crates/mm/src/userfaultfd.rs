//! userfaultfd: registering ranges and filling their pages from userspace.
//!
//! Kernel sources (6.18): `fs/userfaultfd.c` (`userfaultfd_api`, `userfaultfd_register`,
//! `userfaultfd_unregister`, `validate_range`, `dup_userfaultfd`), `mm/userfaultfd.c`
//! (`mfill_atomic`, `mfill_atomic_pte`, `mfill_atomic_pte_copy`, `mfill_atomic_pte_zeropage`,
//! `mfill_atomic_install_pte`, `uffd_mfill_lock`, `validate_dst_vma`),
//! `include/linux/userfaultfd_k.h` (`userfaultfd_armed`, `userfaultfd_missing`,
//! `vma_can_userfault`).
//!
//! A registered VMA carries VM_UFFD_MISSING, VM_UFFD_WP or VM_UFFD_MINOR. What that changes
//! elsewhere: `alloc_anon_folio` takes order 0 on any registered VMA (memory.rs); a fault on a
//! none PTE or PMD of a MISSING VMA goes to the userfaultfd's reader (`Access::Userfault`) after
//! the PMD path allocated and freed its folio, uncounted (huge_memory.rs); khugepaged and
//! MADV_COLLAPSE allow no none or zero PTE in a registered VMA (khugepaged.rs); a fork's child
//! keeps the registration only with UFFD_FEATURE_EVENT_FORK (fork.rs). The reader's answers
//! fill pages one 4 KiB page at a time: [`Kernel::mfill_atomic`].
//!
//! Not modelled: UFFDIO_MOVE, UFFDIO_CONTINUE and UFFDIO_POISON, and filling a shared (shmem)
//! VMA (`shmem_mfill_atomic_pte`); the replay counts them and warns. The model has one
//! userfaultfd context per mm.

use mm_types::{Vaddr, PAGE_SIZE};

use crate::page_alloc::pg;
use crate::pgtable::{mk_pte, Pmd, PTE_DIRTY, PTE_WRITE, PTE_YOUNG, ZERO_PTE};
use crate::vma::vm;
use crate::{Errno, Kernel};

/// What an answer puts in the empty pages of a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mfill {
    /// UFFDIO_COPY: a new order-0 anon page each (`mfill_atomic_pte_copy`).
    Copy,
    /// UFFDIO_ZEROPAGE: the zero page each (`mfill_atomic_pte_zeropage`).
    Zeropage,
}

/// What [`Kernel::mfill_atomic`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mfilled {
    /// Pages filled, from the start of the range.
    pub pages: u64,
    /// Why it stopped before the end: EEXIST at a page already mapped (or under a huge PMD),
    /// ENOMEM when no page could be allocated.
    pub stopped: Option<Errno>,
    /// The VMA is shared (shmem, `shmem_mfill_atomic_pte`): nothing was done.
    pub unmodelled: bool,
}

impl Kernel {
    /// UFFDIO_API: the features the context asked for; the model keeps EVENT_FORK.
    pub fn userfaultfd_api(&mut self, features: u64) {
        self.mm.flags.uffd_event_fork = features & linux_abi::userfaultfd::UFFD_FEATURE_EVENT_FORK != 0;
    }

    /// UFFDIO_REGISTER of `[start, start + len)` with `mode` (UFFDIO_REGISTER_MODE_* bits):
    /// EINVAL for an empty or unknown mode, a range that is not page aligned or holds no VMA,
    /// MINOR on anonymous memory, or a VMA the model does not back (a file other than shmem:
    /// `vma_can_userfault`); else every VMA piece in the range takes the mode's flags in place
    /// of its old ones (`userfaultfd_register_range`: split at the ends, merged with equal
    /// neighbours). Holes between VMAs are allowed, as the kernel's loop over them allows them.
    pub fn userfaultfd_register(&mut self, start: u64, len: u64, mode: u64) -> Result<(), Errno> {
        use linux_abi::userfaultfd::{UFFDIO_REGISTER_MODE_MINOR as MINOR, UFFDIO_REGISTER_MODE_MISSING as MISSING, UFFDIO_REGISTER_MODE_WP as WP};
        if mode == 0 || mode & !(MISSING | WP | MINOR) != 0 {
            return Err(Errno::EINVAL);
        }
        let end = validate_range(start, len)?;
        let flags = [(MISSING, vm::UFFD_MISSING), (WP, vm::UFFD_WP), (MINOR, vm::UFFD_MINOR)].iter().filter(|(m, _)| mode & m != 0).fold(0, |f, (_, v)| f | v);
        let vmas = self.mm.vmas.intersecting(start, end);
        if vmas.is_empty() {
            return Err(Errno::EINVAL);
        }
        for v in &vmas {
            let shmem = v.file != 0 || v.flags & vm::ANON_SHMEM != 0;
            if v.flags & vm::SPECIAL != 0 || (flags & vm::UFFD_MINOR != 0 && !shmem) {
                return Err(Errno::EINVAL);
            }
        }
        // Holes are not an error here (the modify returns ENOMEM for them, as madvise would).
        let _ = self.modify_flags(start, end, |f| (f & !vm::UFFD_ARMED) | flags, false);
        Ok(())
    }

    /// UFFDIO_UNREGISTER of `[start, start + len)`: the VMA pieces in it lose their
    /// registration (split at the ends, merged with equal neighbours).
    pub fn userfaultfd_unregister(&mut self, start: u64, len: u64) -> Result<(), Errno> {
        let end = validate_range(start, len)?;
        if self.mm.vmas.intersecting(start, end).is_empty() {
            return Err(Errno::EINVAL);
        }
        let _ = self.modify_flags(start, end, |f| f & !vm::UFFD_ARMED, false);
        Ok(())
    }

    /// `mfill_atomic` for UFFDIO_COPY and UFFDIO_ZEROPAGE on `[start, start + len)`: the range
    /// must lie in one registered VMA (ENOENT otherwise; EINVAL when not page aligned). Page
    /// after page, a PTE table is allocated under an empty PMD; a huge PMD or a present PTE
    /// stops it with EEXIST (the pages before stay filled, as the kernel returns the bytes
    /// copied). COPY maps a new order-0 anon page (MM_ANONPAGES, dirty, writable as the VMA
    /// is), ZEROPAGE the zero page. Neither is a fault: minflt and the fault counters stay.
    pub fn mfill_atomic(&mut self, start: u64, len: u64, what: Mfill) -> Result<Mfilled, Errno> {
        let end = validate_range(start, len)?;
        let Some(mut vma) = self.mm.vmas.find(start) else { return Err(Errno::ENOENT) };
        if end > vma.end || vma.flags & vm::UFFD_ARMED == 0 || vma.flags & vm::SPECIAL != 0 {
            return Err(Errno::ENOENT);
        }
        if vma.flags & vm::SHARED != 0 {
            return Ok(Mfilled { unmodelled: true, ..Default::default() });
        }
        self.anon_vma_prepare(&mut vma);
        let mut done = Mfilled::default();
        let bits = PTE_DIRTY | PTE_YOUNG | if vma.flags & vm::WRITE != 0 { PTE_WRITE } else { 0 };
        let mut addr = start;
        while addr < end {
            let va = Vaddr(addr);
            let t = match self.mm.pt.pmd_table(va) {
                Some(t) => t,
                None => {
                    let Some(frame) = self.alloc_pgtable_frame() else { return Ok(Mfilled { stopped: Some(Errno::ENOMEM), ..done }) };
                    self.mm.pt.install_pmd_table(va, frame)
                }
            };
            let idx = match self.mm.pt.pmd(t, va) {
                Pmd::Table(i) => i,
                Pmd::None => {
                    let Some(i) = self.alloc_pgtable() else { return Ok(Mfilled { stopped: Some(Errno::ENOMEM), ..done }) };
                    self.mm.pt.set_pmd(t, va, Pmd::Table(i));
                    i
                }
                Pmd::Huge { .. } | Pmd::HugeZero => return Ok(Mfilled { stopped: Some(Errno::EEXIST), ..done }),
            };
            let i = va.pte_index();
            if self.mm.pt.pte(idx, i) != 0 {
                return Ok(Mfilled { stopped: Some(Errno::EEXIST), ..done });
            }
            match what {
                Mfill::Zeropage => self.mm.pt.set_pte(idx, i, ZERO_PTE | PTE_YOUNG),
                Mfill::Copy => {
                    let Some(page) = self.alloc_folio(mm_types::Order::BASE, true) else { return Ok(Mfilled { stopped: Some(Errno::ENOMEM), ..done }) };
                    self.mm.pt.set_pte(idx, i, mk_pte(page, bits));
                    self.mm.stats.anon_rss_pages += 1;
                    let p = &mut self.zone.mem_map[page.idx()];
                    p.mapcount = 1;
                    p.flags |= pg::TOUCHED;
                }
            }
            done.pages += 1;
            addr += PAGE_SIZE;
        }
        self.mm.vma_cache = None;
        Ok(done)
    }
}

/// `validate_range`: a page-aligned start and a page-aligned, non-zero length that does not
/// wrap. Returns the end.
fn validate_range(start: u64, len: u64) -> Result<u64, Errno> {
    if start % PAGE_SIZE != 0 || len % PAGE_SIZE != 0 || len == 0 {
        return Err(Errno::EINVAL);
    }
    start.checked_add(len).ok_or(Errno::EINVAL)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mmap::MmapPlacement;
    use crate::{Access, BootParams};
    use linux_abi::userfaultfd::{UFFDIO_REGISTER_MODE_MISSING as MISSING, UFFDIO_REGISTER_MODE_WP as WP};
    use mm_types::{Order, PMD_SIZE};
    use thp_abi::{MthpStat, ThpSettings, VmEvent};

    fn kernel(knobs: &[&str]) -> Kernel {
        let mut s = ThpSettings::default();
        for k in knobs {
            s.apply_assignment(k).unwrap();
        }
        Kernel::boot(&BootParams { mem_bytes: 256 << 20, ..Default::default() }, &s)
    }

    /// 4 MiB, 2 MiB aligned.
    fn range(k: &mut Kernel) -> u64 {
        k.do_mmap(4 << 20, vm::READ | vm::WRITE, MmapPlacement::Aligned { align: PMD_SIZE, offset: 0 }).unwrap()
    }

    /// Under `enabled=always`, a write to an empty 2 MiB of a MODE_MISSING range allocates the PMD
    /// folio, frees it and hands the fault over: nothing mapped, minflt 1, and no
    /// thp_fault_alloc (counted when a PMD folio is mapped; live: tests/it/progs/uffd_prog.c).
    /// The answer (UFFDIO_COPY of 16 KiB) maps four 4 KiB pages under a new PTE table; a write
    /// to the next page faults to the reader again, now on the PTE path (no second PMD
    /// allocation); a COPY over a filled page stops with EEXIST after the pages before it.
    #[test]
    fn a_missing_range_hands_faults_over_and_copies_fill_4k_pages() {
        let mut k = kernel(&["enabled=always"]);
        let a = range(&mut k);
        k.userfaultfd_register(a, 4 << 20, MISSING).unwrap();
        assert_eq!(k.access(a, true), Access::Userfault);
        assert_eq!((k.stats().minflt, k.counters.vm(VmEvent::ThpFaultAlloc), k.counters.mthp(Order::PMD, MthpStat::AnonFaultAlloc)), (1, 0, 0));
        assert_eq!(k.stats().anon_rss_pages, 0);
        assert_eq!(k.mfill_atomic(a, 16 << 10, Mfill::Copy), Ok(Mfilled { pages: 4, stopped: None, unmodelled: false }));
        assert_eq!(k.stats().anon_rss_pages, 4);
        for i in 0..4 {
            assert_eq!(k.access(a + i * PAGE_SIZE, true), Access::Hit);
        }
        assert_eq!(k.access(a + (16 << 10), true), Access::Userfault);
        assert_eq!((k.stats().minflt, k.counters.vm(VmEvent::ThpFaultAlloc)), (2, 0));
        assert_eq!(k.mfill_atomic(a + (12 << 10), 16 << 10, Mfill::Copy), Ok(Mfilled { pages: 0, stopped: Some(Errno::EEXIST), unmodelled: false }));
        assert_eq!(k.mfill_atomic(a + (16 << 10), 16 << 10, Mfill::Zeropage).map(|f| f.pages), Ok(4));
        // A read of a zero-filled page hits; the 4 KiB folios are order 0 (no mTHP here).
        assert_eq!(k.access(a + (16 << 10), false), Access::Hit);
        let c = k.census(&[(a, a + (4 << 20))]).census;
        assert_eq!((c.folio_counts().get(&thp_abi::FolioSize::from("4kB")).copied(), c.zero_page_ptes), (Some(4), 4));
    }

    /// A read fault on an empty 2 MiB of a MODE_MISSING range takes the huge zero folio's path
    /// (allocating it: thp_zero_page_alloc 1) and hands the fault over without mapping it.
    #[test]
    fn a_read_of_a_missing_range_maps_no_huge_zero_page() {
        let mut k = kernel(&["enabled=always"]);
        let a = range(&mut k);
        k.userfaultfd_register(a, 4 << 20, MISSING).unwrap();
        assert_eq!(k.access(a, false), Access::Userfault);
        assert_eq!(k.counters.vm(VmEvent::ThpZeroPageAlloc), 1);
        assert_eq!(k.access(a, false), Access::Userfault);
    }

    /// mTHP is refused on any registered VMA (`userfaultfd_armed`), MODE_WP alone included, and
    /// counted as `userfaultfd_armed`; PMD THP is not, under MODE_WP: the fault maps it.
    #[test]
    fn a_registered_range_takes_no_mthp_but_wp_alone_allows_pmd() {
        let mut k = kernel(&["enabled=never", "hugepages-64kB/enabled=always"]);
        let a = range(&mut k);
        k.userfaultfd_register(a, 4 << 20, WP).unwrap();
        assert_eq!(k.access(a, true), Access::Fault);
        assert_eq!(k.counters.mthp(Order(4), MthpStat::AnonFaultAlloc), 0);
        assert_eq!(k.stats().fallbacks[4][crate::model::fallbacks::FallbackReason::UserfaultfdArmed as usize], 1);
        k.userfaultfd_unregister(a, 4 << 20).unwrap();
        assert_eq!(k.access(a + (64 << 10), true), Access::Fault);
        assert_eq!(k.counters.mthp(Order(4), MthpStat::AnonFaultAlloc), 1);

        let mut k = kernel(&["enabled=always"]);
        let a = range(&mut k);
        k.userfaultfd_register(a, 4 << 20, WP).unwrap();
        assert_eq!(k.access(a, true), Access::Fault);
        assert_eq!(k.counters.vm(VmEvent::ThpFaultAlloc), 1);
    }

    /// Registration splits the VMA at the range's ends and unregistration merges it back; bad
    /// ranges and modes are refused as userfaultfd_register refuses them.
    #[test]
    fn registration_splits_and_merges_and_refuses_what_the_kernel_refuses() {
        let mut k = kernel(&["enabled=never"]);
        let a = range(&mut k);
        assert_eq!(k.userfaultfd_register(a + (1 << 20), 1 << 20, MISSING), Ok(()));
        assert_eq!(k.mm.vmas.len(), 3);
        assert_eq!(k.mm.vmas.find(a + (1 << 20)).unwrap().flags & vm::UFFD_ARMED, vm::UFFD_MISSING);
        assert_eq!(k.userfaultfd_unregister(a + (1 << 20), 1 << 20), Ok(()));
        assert_eq!(k.mm.vmas.len(), 1);
        assert_eq!(k.userfaultfd_register(a + 1, 4096, MISSING), Err(Errno::EINVAL));
        assert_eq!(k.userfaultfd_register(a, 4096, 0), Err(Errno::EINVAL));
        assert_eq!(k.userfaultfd_register(a, 4096, 4), Err(Errno::EINVAL), "MODE_MINOR on anonymous memory");
        // A fill outside a registered VMA, or across its end, is ENOENT.
        assert_eq!(k.mfill_atomic(a, 4096, Mfill::Copy), Err(Errno::ENOENT));
        k.userfaultfd_register(a, 1 << 20, MISSING).unwrap();
        assert_eq!(k.mfill_atomic(a + (1 << 20) - 4096, 8192, Mfill::Copy), Err(Errno::ENOENT));
    }

    /// A fork's child keeps the registration only with UFFD_FEATURE_EVENT_FORK.
    #[test]
    fn a_fork_keeps_the_registration_only_with_event_fork() {
        for (features, armed) in [(0, 0), (linux_abi::userfaultfd::UFFD_FEATURE_EVENT_FORK, vm::UFFD_MISSING)] {
            let mut k = kernel(&["enabled=never"]);
            k.userfaultfd_api(features);
            let a = range(&mut k);
            k.userfaultfd_register(a, 4 << 20, MISSING).unwrap();
            let (child, _) = k.fork().unwrap();
            k.switch_mm(child);
            assert_eq!(k.mm.vmas.find(a).unwrap().flags & vm::UFFD_ARMED, armed, "features {features:#x}");
        }
    }
}
