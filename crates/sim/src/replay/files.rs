//! Files of a recording: memfd_create, opens of tmpfs files and /dev/zero, the per-process fd
//! table (dup, dup2, dup3, fcntl F_DUPFD, close; positions through read, write, lseek and
//! O_APPEND), and the shmem paths of write, pwrite, ftruncate, fallocate and unlink
//! (mm/shmem.c: `shmem_write_begin`, `shmem_setattr`, `shmem_fallocate`, `shmem_unlink`);
//! O_DIRECT reads pin their buffer (mm/gup.c: `pin_user_pages_fast`).

use super::*;

impl<'a> Replay<'a> {
    /// The mount of a tmpfs device in an image (made on first use, with the recorded `huge=`).
    pub(super) fn sb_for(k: &mut Machine, mounts: &[MountEntry], img: &mut Image, maj: u32, min: u32) -> SbId {
        if let Some(&sb) = img.sbs.get(&(maj, min)) {
            return sb;
        }
        let huge = match mounts.iter().find(|m| m.maj == maj && m.min == min).map_or("never", |m| m.huge()) {
            "always" => SbHuge::Always,
            "within_size" => SbHuge::WithinSize,
            "advise" => SbHuge::Advise,
            _ => SbHuge::Never,
        };
        let sb = k.step_current(Step::ShmemMount(huge)).mounted();
        img.sbs.insert((maj, min), sb);
        sb
    }

    /// File calls: the fd table, and the shmem paths of write, ftruncate and fallocate.
    pub(super) fn file_syscall(&mut self, pid: u32, kind: SyscallKind, a: &[u64], ret: i64, path: Option<PathInfo>) {
        match kind {
            SyscallKind::MemfdCreate | SyscallKind::Open | SyscallKind::Openat | SyscallKind::Creat | SyscallKind::Unlink | SyscallKind::Unlinkat => {
                self.name_call(pid, kind, a, ret, path)
            }
            SyscallKind::Close | SyscallKind::Dup | SyscallKind::Dup2 | SyscallKind::Dup3 | SyscallKind::Fcntl | SyscallKind::Lseek => self.fd_call(pid, kind, a, ret),
            _ => self.io_call(pid, kind, a, ret),
        }
    }

    /// Files by name: memfd_create, open/openat/creat (tmpfs files become shmem inodes, found
    /// again by device and path), unlink.
    fn name_call(&mut self, pid: u32, kind: SyscallKind, a: &[u64], ret: i64, path: Option<PathInfo>) {
        let mounts = &self.mounts;
        let st = &mut self.stats;
        let names = &mut self.names;
        let Some(img) = self.procs.get_mut(&pid).and_then(|p| p.image.as_mut()) else { return };
        match kind {
            SyscallKind::MemfdCreate if ret >= 0 => {
                let file = if a[1] & MFD_HUGETLB != 0 {
                    FileRef::Other
                } else {
                    st.shmem_files += 1;
                    FileRef::Shmem(self.m.step_current(Step::ShmemCreate { sb: SHM_MNT, linked: false }).created())
                };
                img.install(ret, file, false, false);
            }
            SyscallKind::Open | SyscallKind::Openat | SyscallKind::Creat if ret >= 0 => {
                let flags = match kind {
                    SyscallKind::Open => a[1],
                    SyscallKind::Openat => a[2],
                    _ => O_CREAT_WRONLY_TRUNC,
                };
                let file = match &path {
                    Some(p) if p.path == b"/dev/zero" => FileRef::DevZero,
                    Some(p) if p.fs_magic == TMPFS_MAGIC => {
                        // The device of the file, or of the directory it was created in.
                        let key = (p.maj, p.min, p.path.clone());
                        let ino = match names.get(&key) {
                            Some(&ino) => ino,
                            None => {
                                let sb = Self::sb_for(&mut self.m, mounts, img, p.maj, p.min);
                                let ino = self.m.step_current(Step::ShmemCreate { sb, linked: true }).created();
                                st.shmem_files += 1;
                                if p.exists && p.size > 0 && flags & O_TRUNC == 0 {
                                    // Data from before the program: its folio sizes are not
                                    // known; it is taken as 4 KiB pages.
                                    st.preexisting_files += 1;
                                    self.m.step_current(Step::ShmemPreexisting { ino, size: p.size });
                                }
                                names.insert(key, ino);
                                ino
                            }
                        };
                        if flags & O_TRUNC != 0 && self.m.step_current(Step::Ftruncate { ino, size: 0 }).ret().is_err() {
                            st.shmem_unmodelled += 1;
                        }
                        if p.exists {
                            self.shmem_ids.insert((p.maj, p.min, p.ino), ino);
                        }
                        FileRef::Shmem(ino)
                    }
                    Some(p) if THP_AREA_FS_MAGIC.contains(&p.fs_magic) => FileRef::ThpArea,
                    _ => FileRef::Other,
                };
                img.install(ret, file, flags & O_APPEND != 0, flags & O_DIRECT != 0);
            }
            SyscallKind::Unlink | SyscallKind::Unlinkat if ret == 0 => {
                if kind == SyscallKind::Unlinkat && a[2] & AT_REMOVEDIR != 0 {
                    return;
                }
                if let Some(p) = path {
                    if let Some(ino) = names.remove(&(p.maj, p.min, p.path)) {
                        self.m.step_current(Step::ShmemUnlink(ino));
                    }
                }
            }
            _ => {}
        }
    }

    /// The fd table: close, dup, dup2, dup3, fcntl(F_DUPFD), lseek.
    fn fd_call(&mut self, pid: u32, kind: SyscallKind, a: &[u64], ret: i64) {
        let Some(img) = self.procs.get_mut(&pid).and_then(|p| p.image.as_mut()) else { return };
        let desc = |img: &Image, fd: u64| img.fds.get(&(fd as i32)).copied();
        match kind {
            SyscallKind::Close if ret == 0 => {
                img.fds.remove(&(a[0] as i32));
            }
            SyscallKind::Dup if ret >= 0 => {
                if let Some(d) = desc(img, a[0]) {
                    img.fds.insert(ret as i32, d);
                }
            }
            SyscallKind::Dup2 | SyscallKind::Dup3 if ret >= 0 => match desc(img, a[0]) {
                Some(d) => {
                    img.fds.insert(ret as i32, d);
                }
                None => {
                    img.fds.remove(&(ret as i32));
                }
            },
            SyscallKind::Fcntl if ret >= 0 && (a[1] == F_DUPFD || a[1] == F_DUPFD_CLOEXEC) => {
                if let Some(d) = desc(img, a[0]) {
                    img.fds.insert(ret as i32, d);
                }
            }
            SyscallKind::Lseek if ret >= 0 => {
                if let Some(d) = desc(img, a[0]) {
                    img.descs[d].pos = ret as u64;
                }
            }
            _ => {}
        }
    }

    /// Data: read (O_DIRECT pins its buffer), write and pwrite to shmem files, ftruncate,
    /// fallocate.
    fn io_call(&mut self, pid: u32, kind: SyscallKind, a: &[u64], ret: i64) {
        let st = &mut self.stats;
        let Some(img) = self.procs.get_mut(&pid).and_then(|p| p.image.as_mut()) else { return };
        let desc = |img: &Image, fd: u64| img.fds.get(&(fd as i32)).copied();
        match kind {
            SyscallKind::Read | SyscallKind::Readv | SyscallKind::Pread64 if ret > 0 => {
                let Some(d) = desc(img, a[0]) else { return };
                if kind != SyscallKind::Pread64 {
                    img.descs[d].pos += ret as u64;
                }
                // An O_DIRECT read into one buffer (readv's iovecs are not recorded): the block
                // layer pins the `ret` bytes it filled with FOLL_WRITE, faulting in what is not
                // mapped writable (counted in minflt, as GUP faults are), and unpins them at
                // completion.
                if img.descs[d].direct && kind != SyscallKind::Readv {
                    let io = self.io.get_or_insert_with(Default::default);
                    io.direct_reads += 1;
                    io.bytes += ret as u64;
                    for (ms, me) in img.tr_range(a[1], a[1] + ret as u64) {
                        match self.m.step_current(Step::PinUserPages { start: ms, len: me - ms }).pinned() {
                            Ok(p) => {
                                io.pinned_folios += p.folios;
                                io.pinned_pte_pages += p.pte_pages;
                                io.pinned_pmd_pages += p.pmd_pages;
                                io.pin_faults += p.faults;
                            }
                            Err(_) => st.direct_reads_unmodelled += 1,
                        }
                    }
                }
            }
            SyscallKind::Write | SyscallKind::Writev | SyscallKind::Pwrite64 | SyscallKind::Pwritev | SyscallKind::Pwritev2 if ret > 0 => {
                let Some(d) = desc(img, a[0]) else { return };
                let FileRef::Shmem(ino) = img.descs[d].file else {
                    if matches!(kind, SyscallKind::Write | SyscallKind::Writev) || (kind == SyscallKind::Pwritev2 && a[3] as i64 == -1) {
                        img.descs[d].pos += ret as u64;
                    }
                    return;
                };
                let size = self.m.shmem_inode(ino).i_size;
                let append = img.descs[d].append || (kind == SyscallKind::Pwritev2 && a[5] & RWF_APPEND != 0);
                let uses_pos = matches!(kind, SyscallKind::Write | SyscallKind::Writev) || (kind == SyscallKind::Pwritev2 && a[3] as i64 == -1);
                let at = if append {
                    size
                } else if uses_pos {
                    img.descs[d].pos
                } else {
                    a[3]
                };
                st.shmem_writes += 1;
                if self.m.step_current(Step::ShmemWrite { ino, offset: at, len: ret as u64 }).ret().is_err() {
                    st.shmem_unmodelled += 1;
                }
                if uses_pos {
                    img.descs[d].pos = at + ret as u64;
                }
            }
            SyscallKind::Ftruncate if ret == 0 => {
                if let FileRef::Shmem(ino) = img.file_of(a[0]) {
                    if self.m.step_current(Step::Ftruncate { ino, size: a[1] }).ret().is_err() {
                        st.shmem_unmodelled += 1;
                    }
                }
            }
            SyscallKind::Fallocate if ret == 0 => {
                if let FileRef::Shmem(ino) = img.file_of(a[0]) {
                    let r = match a[1] {
                        0 | FALLOC_FL_KEEP_SIZE => self.m.step_current(Step::Fallocate { ino, offset: a[2], len: a[3], keep_size: a[1] != 0 }).ret(),
                        m if m == FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE => self.m.step_current(Step::PunchHole { ino, offset: a[2], len: a[3] }).ret(),
                        _ => Err(mm::Errno::ENOSYS),
                    };
                    if r.is_err() {
                        st.shmem_unmodelled += 1;
                    }
                }
            }
            _ => {}
        }
    }
}
