//! The dispatch of a recorded event to what it models, and the `--check` of the model's
//! invariants over what each event touched (mm/debug.c's checks, CONFIG_DEBUG_VM).

use super::*;

impl<'a> Replay<'a> {
    pub fn event(&mut self, e: &Event) -> Result<(), SimError> {
        self.stats.events += 1;
        if self.recorded_time && e.time_ns > self.m.clock_ns() {
            let ns = e.time_ns - self.m.clock_ns();
            self.m.step_current(Step::Sleep { ns });
        }
        if let Some((_, buf)) = self.procs.get_mut(&e.pid).and_then(|p| p.pending.as_mut()) {
            buf.push(e.clone());
            return Ok(());
        }
        self.run_event(e)
    }

    pub(super) fn run_event(&mut self, e: &Event) -> Result<(), SimError> {
        // The event's process is current (its image's mm), as the kernel runs it.
        if let Some(mm) = self.procs.get(&e.pid).and_then(|p| p.image.as_ref()).map(|i| i.mm) {
            self.m.switch_mm(mm);
        }
        let before = if self.check { self.touched(e) } else { Touched::Nothing };
        self.apply(e)?;
        if self.check {
            self.check_step(e, before)?;
        }
        Ok(())
    }

    /// What `e` may change in its process's model, in model addresses as they are now.
    pub(super) fn touched(&self, e: &Event) -> Touched {
        let Some(img) = self.procs.get(&e.pid).and_then(|p| p.image.as_ref()) else { return Touched::Nothing };
        let range = |start: u64, len: u64| img.tr_range(start, start.saturating_add(len)).into_iter().chain([(start, start.saturating_add(len))]);
        match &e.body {
            EventBody::Fault { addr, .. } => Touched::Ranges(range(*addr, 1).collect()),
            EventBody::Map(m) => Touched::Ranges(range(m.addr, m.len).collect()),
            EventBody::ExecMaps(_) => Touched::Everything,
            EventBody::Syscall(s) => {
                let (a, Some(ret)) = (&s.args, s.ret) else { return Touched::Nothing };
                let arg = |i: usize| a.get(i).copied().unwrap_or(0);
                match s.kind {
                    SyscallKind::Mmap if ret >= 0 => Touched::Ranges(range(ret as u64, arg(1)).collect()),
                    SyscallKind::Munmap | SyscallKind::Mprotect | SyscallKind::Madvise | SyscallKind::Mlock | SyscallKind::Mlock2 | SyscallKind::Munlock => {
                        Touched::Ranges(range(arg(0), arg(1)).collect())
                    }
                    SyscallKind::Mremap => Touched::Ranges(range(arg(0), arg(1)).chain(range(ret as u64, arg(2))).chain(range(arg(4), arg(2))).collect()),
                    SyscallKind::Brk => {
                        let (old, new) = (self.m.brk(), ret as u64);
                        Touched::Ranges(vec![(old.min(new), old.max(new).max(old.min(new) + 1))])
                    }
                    // The GUP calls populate ranges their iovecs name (process_vm_writev: in
                    // another process).
                    SyscallKind::Mlockall
                    | SyscallKind::Munlockall
                    | SyscallKind::Prctl
                    | SyscallKind::Shmat
                    | SyscallKind::Shmdt
                    | SyscallKind::ProcessMadvise
                    | SyscallKind::Vmsplice
                    | SyscallKind::IoUringRegister
                    | SyscallKind::ProcessVmWritev => Touched::Everything,
                    SyscallKind::Clone | SyscallKind::Clone3 | SyscallKind::Fork | SyscallKind::Vfork | SyscallKind::Lseek | SyscallKind::Read => Touched::Nothing,
                    // File calls (memfd_create, open, write, ftruncate, fallocate, close, unlink,
                    // dup): the shmem page caches; exit and execve are checked whole at teardown.
                    _ => Touched::PageCache,
                }
            }
            _ => Touched::Nothing,
        }
    }

    /// `--check` after one event: the invariants of what it touched (`touched`, taken before
    /// it ran, and again after, when mappings may have moved), and the whole model at events 1,
    /// 2, 4, 8, ... (so the full checks cost O(log n) walks of the machine); images are also
    /// checked whole when they are torn down and at the end.
    pub(super) fn check_step(&mut self, e: &Event, before: Touched) -> Result<(), SimError> {
        let Some(mm) = self.procs.get(&e.pid).and_then(|p| p.image.as_ref()).map(|i| i.mm) else { return Ok(()) };
        self.m.switch_mm(mm);
        let after = self.touched(e);
        let full = self.stats.events.is_power_of_two() || matches!(before, Touched::Everything) || matches!(after, Touched::Everything);
        let r = if full {
            self.m.check(None)
        } else {
            let mut ranges = Vec::new();
            for t in [&before, &after] {
                if let Touched::Ranges(r) = t {
                    ranges.extend_from_slice(r);
                }
            }
            let pc = if matches!(before, Touched::PageCache) { self.m.check_page_cache() } else { Ok(()) };
            pc.and_then(|()| self.m.check(Some(&ranges)))
        };
        r.map_err(|m| self.err(format!("model invariant broken: {m}")))
    }

    pub(super) fn apply(&mut self, e: &Event) -> Result<(), SimError> {
        match &e.body {
            EventBody::TaskNew { tid, pid } if tid == pid && !self.procs.contains_key(pid) => {
                // A new process (the record is the parent's): a fork gets a copy of the
                // parent's mm, a CLONE_VM child (vfork, posix_spawn) shares it until its
                // execve and its faults count as recorded; the parent's clone record says
                // which, so the child's events wait for it.
                let parent_modelled = self.procs.get(&e.pid).is_some_and(|p| p.image.is_some());
                self.stats.processes += 1;
                match self.clone_records.remove(pid) {
                    // The clone record came first (it is stamped at the call's entry).
                    Some((parent, shares_mm)) => {
                        self.procs.insert(*pid, Proc::default());
                        if parent_modelled && !shares_mm {
                            self.fork_image(parent, *pid)?;
                        }
                    }
                    None => {
                        let pending = parent_modelled.then(|| (e.pid, Vec::new()));
                        self.procs.insert(*pid, Proc { pending, ..Default::default() });
                    }
                }
            }
            EventBody::Fault { addr, error_code } => match self.procs.get_mut(&e.pid) {
                Some(p) if e.time_ns < p.exec_until_ns => {
                    // Inside execve, before its snapshot (bss clearing, the loader's pages):
                    // the task's own faults (mm/memory.c: mm_account_fault). Only the program's
                    // first execve is before its count starts (the recording and the live
                    // baseline start there); the others' count as recorded.
                    self.stats.exec_faults += 1;
                    if !p.image.as_ref().is_some_and(|i| i.ordinal == 0) {
                        p.passthrough += 1;
                        self.stats.recorded_faults += 1;
                        self.stats.passthrough_faults += 1;
                    }
                }
                _ => self.fault(e.pid, *addr, *error_code),
            },
            EventBody::ExecMaps(entries) => {
                let Some(p) = self.procs.get_mut(&e.pid) else { return Ok(()) };
                if p.image.as_ref().is_some_and(|i| i.from_exec && !i.exec_snapshot) {
                    self.exec_snapshot(e.pid, e.time_ns, entries);
                } else {
                    // Its execve's record is still to come (the process runs a forked copy, a
                    // CLONE_VM child's shared mm, or an image that had its snapshot): the image
                    // that execve makes takes it.
                    p.early_snapshot = Some((e.time_ns, entries.clone()));
                }
            }
            EventBody::Syscall(s) => {
                let path = if s.kind.takes_path() { self.paths.remove(&e.tid) } else { None };
                let iovs = self.iovecs.remove(&e.tid).filter(|(call, _)| *call == s.kind.code()).map(|(_, v)| v);
                let Some(ret) = s.ret else { return Ok(()) };
                self.syscall(e.pid, s.kind, &s.args, ret, e.time_ns, s.duration_ns)?;
                self.file_syscall(e.pid, s.kind, &s.args, ret, path);
                if ret >= 0 {
                    self.gup_call(e.pid, s.kind, &s.args, ret, iovs);
                }
            }
            EventBody::Iovecs { call, iovs } => {
                self.iovecs.insert(e.tid, (*call, iovs.clone()));
            }
            EventBody::Uffd(u) => self.uffd(e.pid, u),
            EventBody::Map(m) if m.path.starts_with(b"/SYSV") && m.flags & MAP_SHARED as u32 != 0 => self.shm_map(e.pid, m),
            EventBody::Path(p) => {
                if let Some(knob) = thp_knob_of_path(&p.path) {
                    self.knob_read(e.pid, knob);
                }
                self.paths.insert(e.tid, p.clone());
            }
            EventBody::Mounts(m) => self.mounts = m.clone(),
            EventBody::ExecStack { start_stack } => self.procs.entry(e.pid).or_default().start_stack = Some(*start_stack),
            EventBody::TaskExit if e.tid == e.pid => self.exit(e.pid),
            _ => {}
        }
        Ok(())
    }

    /// The program opened a knob of the THP tree: it may choose what it does by it (HotSpot
    /// with -XX:+UseTransparentHugePages reads `enabled` and, unless it is `never`, aligns and
    /// commits its heap and code cache in 2 MiB steps). Counted once per knob; a warning when
    /// the replay's value is not the one the program read.
    pub(super) fn knob_read(&mut self, pid: u32, knob: &str) {
        if self.stats.knobs_read.iter().any(|k| k == knob) {
            return;
        }
        self.stats.knobs_read.push(knob.to_string());
        let Some(rec) = &self.rec_settings else { return };
        let (was, now) = (rec.knob_map().get(knob).cloned(), self.settings.knob_map().get(knob).cloned());
        if was != now {
            let (was, now) = (was.unwrap_or_else(|| "absent".into()), now.unwrap_or_else(|| "absent".into()));
            self.stats.knobs_read_differing.push(format!("{knob}: {was} → {now}"));
            self.stats.warnings.push(format!(
                "pid {pid} read the THP knob `{knob}` while recorded ({was} then, {now} in this replay): what the program did may depend on it (a JVM with -XX:+UseTransparentHugePages does); `thplab compare --record` records it again under such a setting"
            ));
        }
    }

    /// Note the file of every `map` record, by process and address, so that an mmap of a
    /// descriptor the replay does not know finds the file its record names (see `map_files`).
    pub fn prescan(&mut self, events: &[Event]) {
        for e in events {
            if let EventBody::Map(m) = &e.body {
                if m.ino != 0 {
                    let memfd = m.path.starts_with(b"/memfd:");
                    self.map_files.entry((e.pid, m.addr)).or_default().push_back((e.time_ns, (m.maj, m.min, m.ino), memfd));
                }
            }
        }
    }
}
