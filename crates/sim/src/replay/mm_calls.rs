//! The memory system calls of a recording: munmap (mm/vma.c: `do_vmi_munmap`), mremap
//! (mm/mremap.c: `do_mremap`), mprotect (mm/mprotect.c: `do_mprotect_pkey`), madvise
//! (mm/madvise.c: `do_madvise`), mlock/mlock2/munlock/mlockall (mm/mlock.c), brk (mm/mmap.c:
//! `brk`) and prctl(PR_SET_THP_DISABLE) (kernel/sys.c: `prctl_set_thp_disable`), with recorded
//! addresses translated to the model's.

use super::*;

impl<'a> Replay<'a> {
    /// A recorded system call other than a file call.
    pub(super) fn syscall(&mut self, pid: u32, kind: SyscallKind, a: &[u64], ret: i64, time_ns: u64, duration_ns: u64) -> Result<(), SimError> {
        if matches!(kind, SyscallKind::Execve | SyscallKind::Execveat) {
            if ret == 0 {
                self.execve(pid, time_ns + duration_ns);
            }
            return Ok(());
        }
        if kind == SyscallKind::ExitGroup {
            self.exit(pid);
            return Ok(());
        }
        if matches!(kind, SyscallKind::Fork | SyscallKind::Vfork | SyscallKind::Clone | SyscallKind::Clone3) && ret > 0 {
            return self.forked(pid, kind, a, ret as u32);
        }
        if kind == SyscallKind::Mmap && ret >= 0 {
            self.mmap(pid, a, ret as u64, time_ns, duration_ns);
            return Ok(());
        }
        if kind == SyscallKind::Shmat && ret >= 0 {
            // The segment's size comes with the mapping's `map` record (shm_mmap inside the
            // call, after this record's time).
            self.shmat.insert(pid, (a[1], a[2]));
            return Ok(());
        }
        if kind == SyscallKind::Shmdt && ret == 0 {
            self.shmdt(pid, a[0]);
            return Ok(());
        }
        match kind {
            SyscallKind::Mremap if ret >= 0 => self.mremap(pid, a, ret)?,
            SyscallKind::Munmap | SyscallKind::Mprotect | SyscallKind::Madvise => self.map_call(pid, kind, a, ret),
            SyscallKind::Mlock | SyscallKind::Mlock2 | SyscallKind::Munlock | SyscallKind::Mlockall | SyscallKind::Munlockall => self.lock_call(pid, kind, a, ret),
            SyscallKind::Brk | SyscallKind::Prctl => self.brk_prctl(pid, kind, a, ret),
            _ => {}
        }
        Ok(())
    }

    /// munmap, mprotect and madvise over the model's pieces of the recorded range.
    fn map_call(&mut self, pid: u32, kind: SyscallKind, a: &[u64], ret: i64) {
        let Some(img) = self.procs.get_mut(&pid).and_then(|p| p.image.as_mut()) else { return };
        let failed = ret < 0;
        match kind {
            SyscallKind::Munmap if !failed => {
                for (s, e) in img.tr_range(a[0], a[0] + a[1]) {
                    self.m.step_current(Step::Munmap { start: s, len: e - s });
                    img.files.forget(s, e);
                }
                img.reloc_remove(a[0], a[0] + a[1]);
            }
            SyscallKind::Mprotect if !failed => {
                let (start, len, prot) = (a[0], a[1], a[2]);
                let p = prot_to_vm(prot & 1 != 0, prot & 2 != 0, prot & 4 != 0);
                for (ms, me) in img.tr_range(start, start + len) {
                    // File mappings too: what a populate writes follows their protection (ld.so
                    // makes RELRO read-only after relocating it).
                    for (s, e) in mapped_pieces(&self.m, ms, me) {
                        self.m.step_current(Step::Mprotect { start: s, len: e - s, prot: p });
                    }
                }
            }
            SyscallKind::Madvise if !failed && (a[2] == MADV_POPULATE_READ || a[2] == MADV_POPULATE_WRITE) => {
                let how = if a[2] == MADV_POPULATE_WRITE { Populate::Write } else { Populate::Read };
                let end = a[0] + a[1].div_ceil(PAGE_SIZE) * PAGE_SIZE;
                Self::populate(&mut self.m, &mut self.stats, img, a[0], end, how);
            }
            // MADV_COLLAPSE is replayed even when it failed while recording: the recording ran
            // with PR_SET_THP_DISABLE, which makes it EINVAL (traces before 2.1; since 2.1 the
            // recorder answers it without performing it, `answered` record, usually 0); the
            // model decides under the settings. Other advice that failed there fails the same
            // way live.
            SyscallKind::Madvise if !failed || a[2] == MADV_COLLAPSE => {
                let adv = match a[2] {
                    MADV_DONTNEED => Madvise::Dontneed,
                    MADV_FREE => Madvise::Free,
                    MADV_HUGEPAGE => Madvise::Hugepage,
                    MADV_NOHUGEPAGE => Madvise::Nohugepage,
                    MADV_COLLAPSE => Madvise::Collapse,
                    MADV_DONTFORK => Madvise::Dontfork,
                    MADV_DOFORK => Madvise::Dofork,
                    MADV_WIPEONFORK => Madvise::Wipeonfork,
                    MADV_KEEPONFORK => Madvise::Keeponfork,
                    MADV_REMOVE => Madvise::Remove,
                    _ => return,
                };
                for (ms, me) in img.tr_range(a[0], a[0] + a[1]) {
                    for (s, e) in model_pieces(&self.m, ms, me) {
                        self.m.step_current(Step::Madvise { start: s, len: e - s, advice: adv });
                    }
                }
            }
            _ => {}
        }
    }

    /// mremap (mm/mremap.c: `do_mremap`): anonymous and shmem VMAs move with their page tables;
    /// other mappings are unmapped at both ends and mapped again as placeholders.
    fn mremap(&mut self, pid: u32, a: &[u64], ret: i64) -> Result<(), SimError> {
        let Some(img) = self.procs.get_mut(&pid).and_then(|p| p.image.as_mut()) else { return Ok(()) };
        let (old, old_len, new_len, flags, rec_new) = (a[0], a[1], a[2], a[3], ret as u64);
        let old_m = img.tr(old);
        let vma = self.m.vma_lookup(old_m);
        // mremap's get_unmapped_area: a shmem VMA's file places it (shmem_get_unmapped_area).
        let backing = match vma.and_then(|v| v.inode().map(|ino| (ino, v.linear_page_index(old_m)))) {
            Some((ino, pgoff)) => MapBacking::Shmem { ino, pgoff },
            None => MapBacking::PrivateAnon,
        };
        let new_m = if rec_new == old {
            old_m
        } else if flags & MREMAP_FIXED != 0 {
            img.tr(a[4])
        } else if img.relocating {
            self.m.mmap_placement(new_len, MmapPlacement::Kernel, backing).unwrap_or(rec_new)
        } else {
            rec_new
        };
        let k = &mut self.m;
        match vma {
            // Anonymous and shmem VMAs move with their page tables (move_page_tables).
            Some(v) if v.is_modelled() => {
                if let Err(e) = k.step_current(Step::Mremap { start: old_m, old_len, new_len, dest: new_m }).ret() {
                    let recorded = format!("mremap({old:#x}, {old_len:#x}, {new_len:#x}, {flags:#x}) = {rec_new:#x}");
                    return Err(SimError {
                        source_name: self.source.clone(),
                        line: 0,
                        message: format!("mremap replay failed: {} (recorded {recorded}; in the model at {old_m:#x} -> {new_m:#x})", e.name()),
                        record: None,
                    });
                }
            }
            other => {
                let prot = other.map_or(0, |v| v.flags & mm::vma::vm::ACCESS);
                k.step_current(Step::Munmap { start: old_m, len: old_len });
                k.step_current(Step::Munmap { start: new_m, len: new_len });
                // The kernel moves their PTEs with the VMA (move_page_tables).
                img.files.mremap(old_m, old_len.next_multiple_of(PAGE_SIZE), new_m, new_len.next_multiple_of(PAGE_SIZE));
                k.step_current(Step::Mmap { len: new_len, prot, placement: MmapPlacement::FixedNoReplace(new_m), backing: MapBacking::Special });
            }
        }
        img.reloc_remove(old, old + old_len);
        img.reloc_remove(rec_new, rec_new + new_len);
        if new_m != rec_new {
            img.reloc.insert(rec_new, (rec_new + new_len, new_m));
        }
        Ok(())
    }

    /// mlock, mlock2, munlock, mlockall, munlockall (mm/mlock.c): the flags, then the populate
    /// as the recording's own faults show it.
    fn lock_call(&mut self, pid: u32, kind: SyscallKind, a: &[u64], ret: i64) {
        let Some(img) = self.procs.get_mut(&pid).and_then(|p| p.image.as_mut()) else { return };
        let failed = ret < 0;
        match kind {
            SyscallKind::Mlock | SyscallKind::Mlock2 if !failed => {
                let flags = if kind == SyscallKind::Mlock2 { a[2] } else { 0 };
                let (start, end) = (a[0] & !(PAGE_SIZE - 1), (a[0] + a[1]).div_ceil(PAGE_SIZE) * PAGE_SIZE);
                for (ms, me) in img.tr_range(start, end) {
                    for (s, e) in model_pieces(&self.m, ms, me) {
                        self.m.step_current(Step::MlockFlags { start: s, len: e - s, flags });
                    }
                }
                if flags & mm::gup::MLOCK_ONFAULT == 0 {
                    Self::populate(&mut self.m, &mut self.stats, img, start, end, Populate::Mlock);
                }
            }
            SyscallKind::Munlock if !failed => {
                let (start, end) = (a[0] & !(PAGE_SIZE - 1), (a[0] + a[1]).div_ceil(PAGE_SIZE) * PAGE_SIZE);
                for (ms, me) in img.tr_range(start, end) {
                    for (s, e) in model_pieces(&self.m, ms, me) {
                        self.m.step_current(Step::Munlock { start: s, len: e - s });
                    }
                }
            }
            SyscallKind::Mlockall if !failed => {
                self.m.step_current(Step::MlockallFlags { flags: a[0] });
                if a[0] & mm::gup::MCL_CURRENT != 0 && a[0] & mm::gup::MCL_ONFAULT == 0 {
                    Self::populate(&mut self.m, &mut self.stats, img, 0, mm_types::TASK_SIZE, Populate::Mlock);
                }
            }
            SyscallKind::Munlockall if !failed => {
                self.m.step_current(Step::Munlockall);
            }
            _ => {}
        }
    }

    /// brk (mm/mmap.c: `brk`; the first reveals start_brk) and prctl(PR_SET_THP_DISABLE).
    fn brk_prctl(&mut self, pid: u32, kind: SyscallKind, a: &[u64], ret: i64) {
        let Some(img) = self.procs.get_mut(&pid).and_then(|p| p.image.as_mut()) else { return };
        let failed = ret < 0;
        match kind {
            SyscallKind::Brk => {
                let got = ret as u64;
                if !img.brk_known {
                    // The first brk (glibc's brk(0)) reveals start_brk.
                    self.m.step_current(Step::SetLayout { mmap_base: None, brk: Some((got, got)) });
                    img.brk_known = true;
                } else if a[0] != 0 {
                    let old = self.m.brk();
                    let model = self.m.step_current(Step::Brk { to: got }).brk();
                    if model != got {
                        let start = self.m.start_brk();
                        self.m.step_current(Step::SetLayout { mmap_base: None, brk: Some((start, got)) });
                    }
                    // do_brk_flags takes def_flags: under mlockall(MCL_FUTURE) the growth is
                    // populated (mm_populate in brk).
                    let def = self.m.mlock_future_flags();
                    if got > old && def & (mm::vma::vm::LOCKED | mm::vma::vm::LOCKONFAULT) == mm::vma::vm::LOCKED {
                        Self::populate(&mut self.m, &mut self.stats, img, old.next_multiple_of(PAGE_SIZE), got.next_multiple_of(PAGE_SIZE), Populate::Mlock);
                    }
                }
            }
            SyscallKind::Prctl if !failed && a[0] == PR_SET_THP_DISABLE => {
                let form = match (a[1], a[2] & 2) {
                    (0, _) => ThpDisable::Clear,
                    (_, 0) => ThpDisable::Completely,
                    _ => ThpDisable::ExceptAdvised,
                };
                self.m.step_current(Step::Prctl(form));
            }
            _ => {}
        }
    }
}
