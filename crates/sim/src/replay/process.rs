//! Processes of a recording: execve (a new mm, fs/exec.c: `exec_mmap`, its layout from the exec
//! snapshot), fork without CLONE_VM (kernel/fork.c: `copy_mm`, `dup_mmap`), CLONE_VM children,
//! and exit_group (kernel/exit.c: `exit_mm`, `mmput`).

use super::*;

impl<'a> Replay<'a> {
    /// A successful execve (fs/exec.c: `exec_mmap`): the old image retired, a new mm, the open
    /// files kept; its layout comes with the exec snapshot (early or still to come).
    pub(super) fn execve(&mut self, pid: u32, until_ns: u64) {
        self.procs.entry(pid).or_default().exec_until_ns = until_ns;
        let mut old = self.procs.entry(pid).or_default().image.take();
        // The open files survive execve (the model keeps no FD_CLOEXEC: a descriptor the
        // kernel closed is only ever reused by a new open, which replaces it).
        let files = old.as_mut().map(|o| (std::mem::take(&mut o.fds), std::mem::take(&mut o.descs), std::mem::take(&mut o.sbs)));
        if let Some(img) = old {
            self.retire(img, true);
        }
        let mut img = self.new_image(pid, String::new());
        if let Some(files) = files {
            (img.fds, img.descs, img.sbs) = files;
        }
        let p = self.procs.get_mut(&pid).expect("inserted");
        p.image = Some(img);
        if let Some((t, maps)) = p.early_snapshot.take() {
            self.exec_snapshot(pid, t, &maps);
        }
    }

    /// The address space execve built for `pid`'s current image (an `exec_maps` record): the
    /// stack, the heap, mmap_base, and placeholders for the ELF, its interpreter and the vDSO.
    pub(super) fn exec_snapshot(&mut self, pid: u32, time_ns: u64, entries: &[trace::MapEntry]) {
        let Some(p) = self.procs.get_mut(&pid) else { return };
        // The execve ends at its sys_exit when that was recorded (it is stamped after the
        // snapshot); the first process's execve has no record, so its snapshot ends it.
        p.exec_until_ns = if p.exec_until_ns == u64::MAX { time_ns } else { p.exec_until_ns.max(time_ns) };
        let start_stack = p.start_stack.take();
        let Some(img) = p.image.as_mut() else { return };
        img.exec_snapshot = true;
        self.stats.exec_snapshots += 1;
        if img.exe.is_empty() {
            // fs/binfmt_elf.c: load_elf_binary maps the executable below its interpreter (and
            // below mmap_base): the lowest file mapping is the executable.
            if let Some(m) = entries.iter().filter(|m| m.ino != 0 && m.path.starts_with(b"/")).min_by_key(|m| m.start) {
                img.exe = String::from_utf8_lossy(&m.path).into_owned();
            }
        }
        // mmap_base: execve placed the interpreter (or, without one, the vDSO) first,
        // top-down from it, so the highest mapping below the stack ends there.
        let base = entries.iter().filter(|m| m.path != b"[stack]" && m.end <= mm_types::TASK_SIZE).map(|m| m.end).max();
        if let Some(b) = base {
            self.m.step_current(Step::SetLayout { mmap_base: Some(b), brk: None });
        }
        for m in entries {
            let anon = m.ino == 0 && (m.path.is_empty() || m.path == b"[heap]" || m.path == b"[stack]");
            let prot = prot_to_vm(m.perms & perm::READ != 0, m.perms & perm::WRITE != 0, m.perms & perm::EXEC != 0);
            if !anon || m.perms & perm::SHARED != 0 {
                // The ELF, its interpreter, the vDSO: room the model keeps free.
                img.files.exec_mapping(m.start, m.end, &m.path, m.perms & (perm::WRITE | perm::SHARED) == perm::WRITE);
                self.m.step_current(Step::Mmap { len: m.end - m.start, prot, placement: MmapPlacement::FixedNoReplace(m.start), backing: MapBacking::Special });
                continue;
            }
            self.m.step_current(Step::Mmap { len: m.end - m.start, prot, placement: MmapPlacement::FixedNoReplace(m.start), backing: MapBacking::PrivateAnon });
            if m.path == b"[stack]" {
                img.stack = Some((m.start, m.end));
                // execve writes the top of the new stack before the program runs: the
                // argument and environment strings through get_user_pages (fs/exec.c:
                // copy_strings, get_arg_page), then the platform strings, auxv and the argv
                // and envp arrays down to argc (fs/binfmt_elf.c: create_elf_tables,
                // copy_to_user): every page from `start_stack` to the top, none recorded as a
                // user fault. Without an `exec_stack` record (format before 2.4): the top page.
                // These faults count in the task's min_flt (mm/memory.c: mm_account_fault, with
                // regs NULL for GUP): the image's, except in the program's first execve, before
                // its count starts.
                // Written from the top down (copy_strings copies the last string first).
                let lowest = start_stack.filter(|s| (m.start..m.end).contains(s)).map_or(m.end - PAGE_SIZE, |s| s & !(PAGE_SIZE - 1));
                let before = self.m.stats().minflt;
                for i in (0..(m.end - lowest) / PAGE_SIZE).rev() {
                    self.m.step_current(Step::Access { addr: lowest + i * PAGE_SIZE, write: true });
                }
                if img.ordinal == 0 {
                    img.populate_faults += self.m.stats().minflt - before;
                }
            }
            if m.path == b"[heap]" {
                self.m.step_current(Step::SetLayout { mmap_base: None, brk: Some((m.start, m.end)) });
                img.brk_known = true;
            }
        }
    }

    /// The parent's record of the clone/fork that made `child`: copy its mm if the child got
    /// its own (`copy_mm` without CLONE_VM), then run the child's events held so far.
    pub(super) fn forked(&mut self, parent: u32, kind: SyscallKind, a: &[u64], child: u32) -> Result<(), SimError> {
        // clone3's flags are in memory the recorder does not read: glibc makes processes with
        // clone3 only in posix_spawn (CLONE_VM|CLONE_VFORK), and forks with clone.
        let shares_mm = match kind {
            SyscallKind::Fork => false,
            SyscallKind::Clone => a.first().is_some_and(|f| f & (CLONE_VM | CLONE_VFORK) != 0),
            _ => true,
        };
        let Some((p, events)) = self.procs.get_mut(&child).and_then(|c| c.pending.take()) else {
            // The child's creation record has not come yet: it decides then.
            if !self.procs.contains_key(&child) {
                self.clone_records.insert(child, (parent, shares_mm));
            }
            return Ok(());
        };
        debug_assert_eq!(p, parent);
        if !shares_mm {
            self.fork_image(parent, child)?;
        }
        for ev in &events {
            self.run_event(ev)?;
        }
        // Back to the parent, whose record this is.
        if let Some(mm) = self.procs.get(&parent).and_then(|p| p.image.as_ref()).map(|i| i.mm) {
            self.m.switch_mm(mm);
        }
        Ok(())
    }

    /// `fork` of `parent`'s mm for `child` (a process without CLONE_VM): the child's image is a
    /// copy of the parent's, fd table and placement state included.
    pub(super) fn fork_image(&mut self, parent: u32, child: u32) -> Result<(), SimError> {
        let Some(pmm) = self.procs.get(&parent).and_then(|p| p.image.as_ref()).map(|i| i.mm) else { return Ok(()) };
        self.m.switch_mm(pmm);
        let (mm, _) = self.m.step(pmm, Step::Fork).forked().map_err(|e| self.err(format!("fork of process {parent}: {} in the model", e.name())))?;
        self.stats.images += 1;
        self.stats.forked_images += 1;
        // The parent's special VMAs (the fork copied them as they were; the parent's mm is
        // still the current one).
        let special: Vec<mm::vma::Vma> = self.m.vmas().filter(|v| !v.is_modelled()).copied().collect();
        let pimg = self.procs.get_mut(&parent).and_then(|p| p.image.as_mut()).expect("checked above");
        let files = pimg.files.fork(&special);
        let (pinned, pinned_unknown) = (pimg.pinned.clone(), pimg.pinned_unknown);
        let img = Image {
            mm,
            pid: child,
            ordinal: self.stats.images - 1,
            exe: pimg.exe.clone(),
            stack: pimg.stack,
            brk_known: pimg.brk_known,
            from_exec: false,
            exec_snapshot: pimg.exec_snapshot,
            populate_faults: 0,
            files,
            file_gup_faults: 0,
            fds: pimg.fds.clone(),
            descs: pimg.descs.clone(),
            sbs: pimg.sbs.clone(),
            reloc: pimg.reloc.clone(),
            relocating: pimg.relocating,
            pinned: Vec::new(),
            pinned_unknown: false,
        };
        // copy_present_ptes: the parent's long-term pinned folios are copied for the child
        // (copy_present_page, one 4 KiB page per PTE) instead of shared.
        if !pinned.is_empty() {
            if let Outcome::CopiedPinned { pmd_mapped, .. } = self.m.step(pmm, Step::CopyPinned { child: mm, ranges: pinned }) {
                if pmd_mapped > 0 {
                    self.unmodelled(parent, "fork_of_pinned_pmds", "fork of PMD-mapped io_uring-pinned pages: the kernel splits the PMD and copies them for the child; the model shares them");
                }
            }
        }
        if pinned_unknown {
            self.unmodelled(parent, "fork_of_pinned_pages", "fork of io_uring-pinned pages whose ranges the recording does not give: the kernel copied them for the child, 4 KiB each, instead of sharing them");
        }
        self.m.switch_mm(mm);
        crate::views::start_explaining(self.m.kernel_mut(), self.explain);
        self.procs.get_mut(&child).expect("child registered").image = Some(img);
        Ok(())
    }

    pub(super) fn exit(&mut self, pid: u32) {
        let Some(p) = self.procs.get_mut(&pid) else { return };
        if p.exited {
            return;
        }
        p.exited = true;
        if let Some(img) = p.image.take() {
            self.retire(img, false);
        }
    }
}
