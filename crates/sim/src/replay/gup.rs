//! get_user_pages users of a recording: populating calls (mm/gup.c: `populate_vma_page_range`,
//! `faultin_page_range`), pins (`pin_user_pages_fast`), and userfaultfd's ioctls
//! (fs/userfaultfd.c, mm/userfaultfd.c: `mfill_atomic`).

use super::*;

impl<'a> Replay<'a> {
    /// A userfaultfd ioctl, performed on the process's mm (the model's one userfaultfd context
    /// per mm: a userfaultfd passed to another process acts on its creator's mm in the
    /// kernel). Its result is not recorded; the model's fails where the kernel's did while the
    /// address spaces agree. UFFDIO_MOVE, UFFDIO_CONTINUE, UFFDIO_POISON and fills of shared
    /// (shmem) VMAs are counted in `populate_unmodelled` and warned about; UFFDIO_WAKE and
    /// UFFDIO_WRITEPROTECT change no folio (a write to a protected page faults, as recorded).
    pub(super) fn uffd(&mut self, pid: u32, u: &trace::UffdIoctl) {
        use linux_abi::userfaultfd as op;
        let Some(img) = self.procs.get_mut(&pid).and_then(|p| p.image.as_mut()) else { return };
        let (mm, start) = (img.mm, img.tr(u.start));
        let step = match u.op {
            op::API => Step::UffdApi { features: u.mode },
            op::REGISTER => Step::UffdRegister { start, len: u.len, mode: u.mode },
            op::UNREGISTER => Step::UffdUnregister { start, len: u.len },
            op::COPY => Step::Mfill { start, len: u.len, what: mm::userfaultfd::Mfill::Copy },
            op::ZEROPAGE => Step::Mfill { start, len: u.len, what: mm::userfaultfd::Mfill::Zeropage },
            op::WAKE | op::WRITEPROTECT => return,
            _ => {
                let name = op::name(u.op);
                return self.unmodelled(pid, name, &format!("{name} of {:#x}+{:#x}: not modelled (the pages it maps, moves or poisons are not in the model)", u.start, u.len));
            }
        };
        if let Outcome::Filled(Ok(f)) = self.m.step(mm, step) {
            if f.unmodelled {
                let name = op::name(u.op);
                self.unmodelled(pid, name, &format!("{name} of {:#x}+{:#x} into a shared (shmem) mapping: not modelled (its pages are not in the model)", u.start, u.len));
            }
        }
    }

    /// Calls by which the kernel reaches the program's pages through GUP, faulting in those not
    /// yet mapped as it needs them, without a fault the recorder sees; each fault counts in the
    /// caller's min_flt (`mm_account_fault` charges current). vmsplice takes references on the
    /// pages of the bytes it moved into the pipe, for reading (fs/splice.c: `vmsplice_to_pipe`
    /// → `iov_iter_get_pages2`, no FOLL_WRITE: an untouched anonymous page gets the zero page);
    /// io_uring pins registered buffers for write (io_uring/rsrc.c: `io_sqe_buffer_register` →
    /// `pin_user_pages_fast(FOLL_WRITE | FOLL_LONGTERM)`); process_vm_writev writes the bytes it
    /// moved into the target's pages (mm/process_vm_access.c: `pin_user_pages_remote(FOLL_WRITE)`;
    /// the model counts those faults in the target's mm). The iovecs come from the recorder's
    /// `iovecs` record; without one (no path resolution, or an io_uring registration other than
    /// IORING_REGISTER_BUFFERS) the call is counted as unmodelled and warned about.
    pub(super) fn gup_call(&mut self, pid: u32, kind: SyscallKind, a: &[u64], ret: i64, iovs: Option<Vec<(u64, u64)>>) {
        let (target, how, bytes) = match kind {
            SyscallKind::Vmsplice => (pid, Populate::Read, ret as u64),
            SyscallKind::IoUringRegister if io_uring::opcode(a[1]) == io_uring::IORING_REGISTER_BUFFERS => (pid, Populate::Write, u64::MAX),
            SyscallKind::ProcessVmWritev => (a[0] as u32, Populate::Write, ret as u64),
            _ => return self.unmodelled_populate(pid, kind, a),
        };
        let Some(iovs) = iovs else { return self.unmodelled_populate(pid, kind, a) };
        let Some(img) = self.procs.get_mut(&target).and_then(|p| p.image.as_mut()) else { return };
        self.m.switch_mm(img.mm);
        let mut left = bytes;
        for (base, len) in iovs {
            let n = len.min(left);
            if n == 0 {
                continue;
            }
            left -= n;
            let (start, end) = (base & !(PAGE_SIZE - 1), (base + n).next_multiple_of(PAGE_SIZE));
            Self::populate(&mut self.m, &mut self.stats, img, start, end, how);
            if kind == SyscallKind::IoUringRegister {
                let model = img.tr_range(start, end);
                img.pinned.extend(model);
            }
        }
        if let Some(mm) = self.procs.get(&pid).and_then(|p| p.image.as_ref()).map(|i| i.mm) {
            self.m.switch_mm(mm);
        }
    }

    /// A call of [`Replay::gup_call`]'s that the replay could not model: counted, and a warning
    /// for the first of each kind.
    pub(super) fn unmodelled_populate(&mut self, pid: u32, kind: SyscallKind, a: &[u64]) {
        use io_uring::{IORING_REGISTER_BUFFERS, IORING_REGISTER_BUFFERS2, IORING_REGISTER_BUFFERS_UPDATE};
        let what = match kind {
            SyscallKind::Vmsplice => "vmsplice: the kernel took references on the pages of its iovecs (faulting in those not present)",
            SyscallKind::IoUringRegister if matches!(io_uring::opcode(a[1]), IORING_REGISTER_BUFFERS | IORING_REGISTER_BUFFERS2 | IORING_REGISTER_BUFFERS_UPDATE) => {
                "io_uring_register of buffers: the kernel pinned them for write (FOLL_WRITE | FOLL_LONGTERM), populating their pages"
            }
            SyscallKind::ProcessVmWritev if self.procs.contains_key(&(a[0] as u32)) => {
                "process_vm_writev into a recorded process: the kernel wrote its pages through GUP, populating those not present"
            }
            _ => return,
        };
        if kind == SyscallKind::IoUringRegister {
            if let Some(img) = self.procs.get_mut(&pid).and_then(|p| p.image.as_mut()) {
                img.pinned_unknown = true;
            }
        }
        self.unmodelled(pid, kind.name(), &format!("{what}; not modelled (the model lacks the faults it took in place of the program)"));
    }

    /// Something the kernel did to the program's pages that the replay does not model: counted
    /// in `populate_unmodelled` under `key`, and a warning the first time.
    pub(super) fn unmodelled(&mut self, pid: u32, key: &str, what: &str) {
        let n = self.stats.populate_unmodelled.entry(key.to_string()).or_insert(0);
        *n += 1;
        if *n == 1 {
            self.stats.warnings.push(format!("pid {pid}: {what}"));
        }
    }

    /// Memory the kernel populated without a fault the recorder saw (mm/gup.rs), its faults
    /// counted in minflt: the model's VMAs by the model, the pages of file mappings and the
    /// vDSO by what the recorded faults mapped (crate::file_pages).
    pub(super) fn populate(k: &mut Machine, st: &mut ReplayStats, img: &mut Image, start: u64, end: u64, how: Populate) {
        st.populate_calls += 1;
        for (ms, me) in img.tr_range(start, end) {
            match k.step_current(Step::Populate { start: ms, end: me, how }).populated() {
                Ok(p) => {
                    st.populate_faults += p.faults;
                    st.populate_file_pages += p.unmodelled_pages;
                }
                Err(_) => {
                    st.populate_failed += 1;
                    continue;
                }
            }
            for v in k.vmas_intersecting(ms, me).into_iter().filter(|v| !v.is_modelled()) {
                let Some(write) = how.writes(&v) else { continue };
                let faults = img.files.populate(&v, ms, me, write);
                st.populate_faults += faults;
                img.file_gup_faults += faults;
            }
        }
    }
}
