//! Where each mapping goes: MAP_FIXED replaces (mm/mmap.c: `do_mmap`); a mapping without it is
//! placed by the model under the recording's knobs (`__get_unmapped_area`,
//! `thp_get_unmapped_area`, mm/shmem.c: `shmem_get_unmapped_area`), which must give the recorded
//! address, and under the replay's, which may move it (relocation); SysV shm attach and detach.

use super::*;

impl<'a> Replay<'a> {
    /// A successful mmap recorded at `rec`.
    pub(super) fn mmap(&mut self, pid: u32, a: &[u64], rec: u64, time_ns: u64, duration_ns: u64) {
        let (hint, len, prot, flags, fd, off) = (a[0], a[1], a[2], a[3], a[4], a[5]);
        // The file the kernel mapped: the `map` record this call made, at `rec`, within it.
        let file = (flags & MAP_ANONYMOUS == 0).then(|| self.map_file(pid, rec, time_ns, time_ns + duration_ns)).flatten();
        let Some(img) = self.procs.get_mut(&pid).and_then(|p| p.image.as_mut()) else { return };
        match (img.file_of(fd), file) {
            (FileRef::Shmem(ino), Some((id, _))) => {
                self.shmem_ids.insert(id, ino);
            }
            (FileRef::Other, Some((id, memfd))) => match self.shmem_ids.get(&id) {
                // A descriptor of a shmem file the replay knows, which this process got in a way
                // the trace does not show (SCM_RIGHTS over a unix socket, pidfd_getfd,
                // /proc/PID/fd): from now on it is that file's, for writes and sizes too.
                Some(&ino) => img.install(fd as i64, FileRef::Shmem(ino), false, false),
                None if memfd || self.mounts.iter().any(|m| (m.maj, m.min) == (id.0, id.1)) => {
                    self.stats.shmem_unmodelled += 1;
                    self.stats.warnings.push(format!(
                        "pid {pid} mapped a shmem file (dev {}:{} ino {}) through a descriptor whose file the replay never saw mapped or opened (received over a unix socket before any process of the recording mapped it?): not modelled (shmem_unmodelled)",
                        id.0, id.1, id.2
                    ));
                }
                None => {}
            },
            _ => {}
        }
        let Some(img) = self.procs.get_mut(&pid).and_then(|p| p.image.as_mut()) else { return };
        let shared = flags & MAP_SHARED != 0;
        let backing = if let Some(h) = crate::hugetlb::recorded_map(flags).filter(|_| flags & MAP_ANONYMOUS != 0) {
            // MAP_HUGETLB: from the machine's pool (`MachineConfig::hugetlb_pools`).
            MapBacking::Hugetlb(h)
        } else if flags & MAP_ANONYMOUS != 0 {
            if shared {
                MapBacking::SharedAnon
            } else {
                MapBacking::PrivateAnon
            }
        } else {
            match img.file_of(fd) {
                FileRef::Shmem(ino) if shared => MapBacking::Shmem { ino, pgoff: off / PAGE_SIZE },
                FileRef::Shmem(ino) => MapBacking::ShmemPrivate { ino, pgoff: off / PAGE_SIZE },
                // A private mapping of /dev/zero is anonymous memory (`mmap_zero`).
                FileRef::DevZero if shared => MapBacking::SharedAnon,
                FileRef::DevZero => MapBacking::PrivateAnon,
                FileRef::ThpArea => MapBacking::ThpFile { pgoff: off / PAGE_SIZE },
                FileRef::Other => MapBacking::Special,
            }
        };
        self.map_at(pid, hint, len, prot, flags, backing, rec, 0);
    }

    /// The file of the `map` record of process `pid` at `addr` made between `from` and `to`
    /// (the mmap call's entry and exit), and whether it is a memfd; earlier records there are
    /// dropped.
    pub(super) fn map_file(&mut self, pid: u32, addr: u64, from: u64, to: u64) -> Option<(FileId, bool)> {
        let q = self.map_files.get_mut(&(pid, addr))?;
        while q.front().is_some_and(|&(t, _, _)| t < from) {
            q.pop_front();
        }
        q.front().filter(|&&(t, _, _)| t <= to).map(|&(_, id, memfd)| (id, memfd))
    }

    /// A System V segment attached by shmat (ipc/shm.c: `do_shmat` → `do_mmap` of the
    /// segment's file on shm_mnt, placed by `shm_get_unmapped_area` → `shmem_get_unmapped_area`).
    /// Its VMA has `shm_vm_ops`, not `shmem_anon_vm_ops`: the per-size shmem knobs do not apply,
    /// `shmem_enabled` does (as for a linked file on shm_mnt), and a read fault maps one page
    /// (no `map_pages`: no fault-around). Each segment is one inode, shared by every process
    /// that attaches it.
    pub(super) fn shm_map(&mut self, pid: u32, m: &trace::MapInfo) {
        const SHM_RDONLY: u64 = 0o10000;
        let (addr, flg) = self.shmat.remove(&pid).unwrap_or((m.addr, 0));
        let ino = match self.sysv.get(&m.ino) {
            Some(&ino) => ino,
            None => {
                let ino = self.m.step_current(Step::ShmemCreate { sb: SHM_MNT, linked: true }).created();
                self.m.step_current(Step::Ftruncate { ino, size: m.len });
                self.stats.shmem_files += 1;
                self.sysv.insert(m.ino, ino);
                ino
            }
        };
        let prot = if flg & SHM_RDONLY != 0 { PROT_READ } else { PROT_READ | PROT_WRITE };
        let flags = MAP_SHARED | if addr != 0 { MAP_FIXED } else { 0 };
        self.map_at(pid, addr, m.len, prot, flags, MapBacking::Shmem { ino, pgoff: m.pgoff / PAGE_SIZE }, m.addr, mm::vma::vm::SYSV_SHM);
    }

    /// shmdt: the segment's VMAs from `addr` on are unmapped (ipc/shm.c: `ksys_shmdt`).
    pub(super) fn shmdt(&mut self, pid: u32, addr: u64) {
        let Some(img) = self.procs.get(&pid).and_then(|p| p.image.as_ref()) else { return };
        let at = img.tr(addr);
        if let Some(v) = self.m.vma_lookup(at).filter(|v| v.start == at && v.is_modelled() && v.file != 0) {
            self.m.step_current(Step::Munmap { start: v.start, len: v.end - v.start });
        }
    }

    /// A mapping of `backing` the kernel made at `rec` (mmap, or shmat's do_mmap): placed as
    /// the model's knobs place it, with the placement check against the recording's.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn map_at(&mut self, pid: u32, hint: u64, len: u64, prot: u64, flags: u64, backing: MapBacking, rec: u64, vm_extra: u32) {
        let settings = self.settings;
        let rec_settings = self.rec_settings.as_ref();
        let Some(img) = self.procs.get_mut(&pid).and_then(|p| p.image.as_mut()) else { return };
        let fixed = flags & (MAP_FIXED | MAP_FIXED_NOREPLACE) != 0;
        let mut at = rec;
        if fixed {
            at = img.tr(rec);
        } else {
            let placement = if hint != 0 { MmapPlacement::Hint(img.tr(hint)) } else { MmapPlacement::Kernel };
            let here = self.m.mmap_placement(len, placement, backing);
            if img.relocating {
                at = here.unwrap_or(rec);
            } else {
                // The model under the recording's knobs must find the recorded address.
                let under_rec = match rec_settings {
                    Some(r) if r != settings => {
                        // A question, not a step: where the recording's knobs place it.
                        self.m.kernel_mut().set_settings(r);
                        let p = self.m.mmap_placement(len, placement, backing);
                        self.m.kernel_mut().set_settings(settings);
                        p
                    }
                    _ => here,
                };
                self.stats.placements_checked += 1;
                if under_rec != Ok(rec) && self.misses.len() < MAX_MISSES {
                    self.misses.push(PlacementMiss {
                        pid,
                        backing: backing_word(backing).to_string(),
                        len,
                        hint: format!("{hint:#x}"),
                        recorded: format!("{rec:#x}"),
                        model: match under_rec {
                            Ok(a) => format!("{a:#x}"),
                            Err(e) => format!("{e:?}"),
                        },
                    });
                }
                if under_rec == Ok(rec) {
                    self.stats.placements_matched += 1;
                    if let Ok(h) = here {
                        if h != rec {
                            img.relocating = true;
                            at = h;
                        }
                    }
                }
            }
        }
        if at != rec {
            self.stats.relocated += 1;
        }
        // MAP_FIXED replaces what was there; a placed mapping went into a hole, and under
        // relocation the recorded range may hold another mapping in the model.
        if fixed {
            for (s, e) in img.tr_range(rec, rec + len) {
                self.m.step_current(Step::Munmap { start: s, len: e - s });
                img.files.forget(s, e);
            }
        }
        self.m.step_current(Step::Munmap { start: at, len });
        img.files.forget(at, at + len);
        img.reloc_remove(rec, rec + len);
        if at != rec || img.relocating {
            img.reloc.insert(rec, (rec + len.div_ceil(PAGE_SIZE) * PAGE_SIZE, at));
        }
        let mut p = prot_to_vm(prot & 1 != 0, prot & 2 != 0, prot & 4 != 0) | self.m.mlock_future_flags() | vm_extra;
        if flags & MAP_LOCKED != 0 {
            p |= mm::vma::vm::LOCKED;
        }
        // Taken as overcommit mode 0 or 1 (the default): honoured.
        if flags & MAP_NORESERVE != 0 {
            p |= mm::vma::vm::NORESERVE;
        }
        if flags & MAP_STACK != 0 && backing == MapBacking::PrivateAnon {
            p |= mm::vma::vm::NOHUGEPAGE;
        }
        if matches!(backing, MapBacking::SharedAnon) {
            self.stats.shmem_files += 1;
        }
        if self.m.step_current(Step::Mmap { len, prot: p, placement: MmapPlacement::FixedNoReplace(at), backing }).ret().is_err() {
            return;
        }
        // vm_mmap_pgoff → mm_populate: MAP_POPULATE, or VM_LOCKED without VM_LOCKONFAULT
        // (MAP_LOCKED, mlockall(MCL_FUTURE)). GUP faults count in minflt (mm/gup.rs).
        let locked = p & (mm::vma::vm::LOCKED | mm::vma::vm::LOCKONFAULT) == mm::vma::vm::LOCKED;
        if flags & MAP_POPULATE != 0 || locked {
            Self::populate(&mut self.m, &mut self.stats, img, at, at + len, Populate::Mlock);
        }
    }
}
