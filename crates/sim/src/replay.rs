//! Replay of a recording (`thplab record`, docs/trace-format.md) in the model under any
//! settings.
//!
//! The recording was made with THP disabled for the program (PR_SET_THP_DISABLE) and without
//! address randomisation, so it holds every first touch of every 4 KiB page and the real
//! address of every mapping. The replay runs one simulated mm per process image (a new one at
//! each successful execve): anonymous private mappings (mmap, brk, the stack and anonymous
//! areas of the exec snapshot) go through the model, which decides under the given settings
//! whether each recorded fault still faults and which folio size it gets; faults elsewhere
//! (file mappings, the vDSO, shared memory, processes forked without exec) do not depend on the
//! anonymous THP settings and count as recorded ("passthrough"). The census is of anonymous
//! memory, taken at each process's exit_group, before teardown.
//!
//! Kernel sources for the syscall semantics: `mm/mmap.c` (MAP_FIXED replaces), `mm/mremap.c`,
//! `mm/madvise.c`, `mm/mmap.c: brk`, `mm/mmap.c: expand_downwards` (stack growth),
//! `kernel/sys.c: prctl_set_thp_disable`, `arch/x86/include/asm/trap_pf.h` (error code bits).

use std::collections::BTreeMap;

use mm::debug::CensusReport;
use mm::madvise::{Madvise, ThpDisable};
use mm::mmap::{prot_to_vm, MmapPlacement};
use mm::{Access, BootParams, Kernel};
use mm_types::PAGE_SIZE;
use trace::{perm, Event, EventBody, Header, SyscallKind};
use uapi::{Counters, ThpSettings};

use crate::{MachineConfig, SimError};

const MAP_SHARED: u64 = 0x01;
const MAP_ANONYMOUS: u64 = 0x20;
const MAP_POPULATE: u64 = 0x8000;
/// MAP_STACK becomes VM_NOHUGEPAGE (`include/linux/mman.h: calc_vm_flag_bits`, 6.18).
const MAP_STACK: u64 = 0x20000;
/// How far below its start a stack may grow in one step (the default RLIMIT_STACK).
const STACK_LIMIT: u64 = 8 << 20;
/// x86 page-fault error code: the access was a write.
const PF_WRITE: u64 = 1 << 1;

/// Counts of what the replay did, for the result's `model.replay` section.
#[derive(Clone, Debug, Default)]
pub struct ReplayStats {
    pub processes: u64,
    pub images: u64,
    pub events: u64,
    pub recorded_faults: u64,
    /// Recorded faults outside anonymous private memory, counted as recorded.
    pub passthrough_faults: u64,
    /// Recorded faults in modelled memory that the model says still fault under the settings.
    pub modelled_faults: u64,
    /// Recorded faults in modelled memory that the model could not resolve (SIGSEGV/SIGBUS in
    /// the model): counted as recorded and listed here because they point at a model gap.
    pub unresolved_faults: u64,
    /// Faults taken inside execve, before the program's own count starts.
    pub exec_faults: u64,
    pub lost_events: u64,
}

struct Image {
    k: Box<Kernel>,
    stack: Option<(u64, u64)>,
    brk_known: bool,
    populate_faults: u64,
}

#[derive(Default)]
struct Proc {
    image: Option<Image>,
    passthrough: u64,
    exited: bool,
    /// Faults before this time happen inside execve (bss clearing, the loader's mappings):
    /// the program's own count starts after exec, as minflt measured from the exec does.
    exec_until_ns: u64,
}

pub struct Replay<'a> {
    settings: &'a ThpSettings,
    params: BootParams,
    procs: BTreeMap<u32, Proc>,
    /// Folded results of finished images.
    done_counters: Counters,
    done_minflt: u64,
    done_census: Vec<CensusReport>,
    done_fallbacks: Vec<[[u64; mm::vmstat::FallbackReason::ALL.len()]; 10]>,
    pub stats: ReplayStats,
    check: bool,
    source: String,
}

impl<'a> Replay<'a> {
    pub fn new(header: &Header, settings: &'a ThpSettings, machine: &MachineConfig, check: bool, source: &str) -> Replay<'a> {
        let params = BootParams {
            mem_bytes: machine.mem_bytes,
            min_free_kbytes: machine.min_free_kbytes,
            mmap_base: machine.mmap_base,
            brk_start: machine.brk_start,
            ..BootParams::default()
        };
        let mut r = Replay {
            settings,
            params,
            procs: BTreeMap::new(),
            done_counters: Counters::default(),
            done_minflt: 0,
            done_census: Vec::new(),
            done_fallbacks: Vec::new(),
            stats: ReplayStats { lost_events: header.lost_events, ..Default::default() },
            check,
            source: source.to_string(),
        };
        // The recording starts at the root's execve: it runs a fresh image.
        let root = r.new_image();
        // The root's exec ends where its address-space snapshot is taken (or, without a
        // snapshot, at its first record).
        let until = if header.flags & trace::flags::EXEC_SNAPSHOT != 0 { u64::MAX } else { 0 };
        r.procs.insert(header.root_pid, Proc { image: Some(root), exec_until_ns: until, ..Default::default() });
        r.stats.processes = 1;
        r
    }

    fn new_image(&mut self) -> Image {
        self.stats.images += 1;
        Image { k: Box::new(Kernel::boot(&self.params, self.settings)), stack: None, brk_known: false, populate_faults: 0 }
    }

    fn err(&self, message: String) -> SimError {
        SimError { source_name: self.source.clone(), line: 0, message }
    }

    /// Fold a finished image (exit or exec) into the totals, with its census.
    fn retire(&mut self, img: Image) {
        let k = &img.k;
        let ranges: Vec<(u64, u64)> = k.vmas().filter(|v| v.file == 0).map(|v| (v.start, v.end)).collect();
        self.done_census.push(k.census(&ranges));
        self.done_counters.add(&k.counters);
        self.done_minflt += k.stats.minflt - img.populate_faults;
        self.stats.modelled_faults += k.stats.minflt - img.populate_faults;
        self.done_fallbacks.push(k.stats.fallbacks);
    }

    pub fn event(&mut self, e: &Event) -> Result<(), SimError> {
        self.stats.events += 1;
        match &e.body {
            EventBody::TaskNew { tid, pid } if tid == pid && !self.procs.contains_key(pid) => {
                // A process forked without exec shares its parent's pages copy-on-write: the
                // model does not copy address spaces, so its faults count as recorded.
                self.procs.insert(*pid, Proc::default());
                self.stats.processes += 1;
            }
            EventBody::Fault { addr, error_code } => {
                if self.procs.get(&e.pid).is_some_and(|p| e.time_ns < p.exec_until_ns) {
                    self.stats.exec_faults += 1;
                } else {
                    self.fault(e.pid, *addr, *error_code);
                }
            }
            EventBody::ExecMaps(entries) => {
                let Some(p) = self.procs.get_mut(&e.pid) else { return Ok(()) };
                p.exec_until_ns = e.time_ns;
                let Some(img) = p.image.as_mut() else { return Ok(()) };
                for m in entries {
                    let anon = m.ino == 0 && (m.path.is_empty() || m.path == b"[heap]" || m.path == b"[stack]");
                    if !anon || m.perms & perm::SHARED != 0 {
                        continue;
                    }
                    let prot = prot_to_vm(m.perms & perm::READ != 0, m.perms & perm::WRITE != 0, m.perms & perm::EXEC != 0);
                    let _ = img.k.do_mmap(m.end - m.start, prot, MmapPlacement::FixedNoReplace(m.start));
                    if m.path == b"[stack]" {
                        img.stack = Some((m.start, m.end));
                        // execve copies argv, envp and auxv to the top of the new stack through
                        // get_user_pages (no fault is recorded); the model takes that as one page.
                        let before = img.k.stats.minflt;
                        img.k.access(m.end - PAGE_SIZE, true);
                        img.populate_faults += img.k.stats.minflt - before;
                    }
                    if m.path == b"[heap]" {
                        img.k.set_brk(m.start, m.end);
                        img.brk_known = true;
                    }
                }
            }
            EventBody::Syscall(s) => {
                let Some(ret) = s.ret else { return Ok(()) };
                self.syscall(e.pid, s.kind, &s.args, ret, e.time_ns, s.duration_ns)?;
            }
            EventBody::TaskExit if e.tid == e.pid => self.exit(e.pid),
            _ => {}
        }
        if self.check {
            if let Some(img) = self.procs.get(&e.pid).and_then(|p| p.image.as_ref()) {
                img.k.check_invariants().map_err(|m| self.err(format!("model invariant broken at event {}: {m}", self.stats.events)))?;
            }
        }
        Ok(())
    }

    fn exit(&mut self, pid: u32) {
        let Some(p) = self.procs.get_mut(&pid) else { return };
        if p.exited {
            return;
        }
        p.exited = true;
        if let Some(img) = p.image.take() {
            self.retire(img);
        }
    }

    fn fault(&mut self, pid: u32, addr: u64, error_code: u64) {
        self.stats.recorded_faults += 1;
        let proc = self.procs.entry(pid).or_default();
        let Some(img) = proc.image.as_mut() else {
            proc.passthrough += 1;
            self.stats.passthrough_faults += 1;
            return;
        };
        let write = error_code & PF_WRITE != 0;
        let in_model = img.k.vmas().any(|v| v.file == 0 && v.start <= addr && addr < v.end);
        if !in_model {
            // expand_downwards: a fault just below the stack grows it.
            if let Some((start, end)) = img.stack {
                if addr < start && addr + STACK_LIMIT >= start {
                    let new_start = addr / PAGE_SIZE * PAGE_SIZE;
                    let prot = prot_to_vm(true, true, false);
                    if img.k.do_mmap(start - new_start, prot, MmapPlacement::FixedNoReplace(new_start)).is_ok() {
                        img.stack = Some((new_start, end));
                        return self.model_access(pid, addr, write);
                    }
                }
            }
            proc.passthrough += 1;
            self.stats.passthrough_faults += 1;
            return;
        }
        self.model_access(pid, addr, write);
    }

    fn model_access(&mut self, pid: u32, addr: u64, write: bool) {
        let proc = self.procs.get_mut(&pid).expect("process exists");
        let img = proc.image.as_mut().expect("image exists");
        match img.k.access(addr, write) {
            Access::Hit | Access::Fault => {}
            Access::Segv | Access::Sigbus | Access::Oom => {
                proc.passthrough += 1;
                self.stats.passthrough_faults += 1;
                self.stats.unresolved_faults += 1;
            }
        }
    }

    fn syscall(&mut self, pid: u32, kind: SyscallKind, a: &[u64], ret: i64, time_ns: u64, duration_ns: u64) -> Result<(), SimError> {
        if matches!(kind, SyscallKind::Execve | SyscallKind::Execveat) {
            if ret == 0 {
                self.procs.entry(pid).or_default().exec_until_ns = time_ns + duration_ns;
                let old = self.procs.entry(pid).or_default().image.take();
                if let Some(img) = old {
                    self.retire(img);
                }
                let img = self.new_image();
                self.procs.get_mut(&pid).expect("inserted").image = Some(img);
            }
            return Ok(());
        }
        if kind == SyscallKind::ExitGroup {
            self.exit(pid);
            return Ok(());
        }
        let Some(img) = self.procs.get_mut(&pid).and_then(|p| p.image.as_mut()) else { return Ok(()) };
        let k = &mut img.k;
        let failed = ret < 0;
        match kind {
            SyscallKind::Mmap if !failed => {
                let (addr, len, prot, flags) = (ret as u64, a[1], a[2], a[3]);
                // The range now holds this mapping, whatever the model had there.
                let _ = k.do_munmap(addr, len);
                if flags & MAP_ANONYMOUS != 0 && flags & MAP_SHARED == 0 {
                    let mut p = prot_to_vm(prot & 1 != 0, prot & 2 != 0, prot & 4 != 0);
                    if flags & MAP_STACK != 0 {
                        p |= mm::vma::vm::NOHUGEPAGE;
                    }
                    let _ = k.do_mmap(len, p, MmapPlacement::FixedNoReplace(addr));
                    if flags & MAP_POPULATE != 0 && prot & 2 != 0 {
                        // Populated by the kernel (GUP), not by faults the program takes.
                        let before = k.stats.minflt;
                        let mut x = addr;
                        while x < addr + len {
                            k.access(x, true);
                            x += PAGE_SIZE;
                        }
                        img.populate_faults += k.stats.minflt - before;
                    }
                }
            }
            SyscallKind::Munmap if !failed => {
                let _ = k.do_munmap(a[0], a[1]);
            }
            SyscallKind::Mremap if !failed => {
                let (old, old_len, new_len, new) = (a[0], a[1], a[2], ret as u64);
                let in_model = k.vmas().any(|v| v.file == 0 && v.start <= old && old < v.end);
                if in_model {
                    k.do_mremap(old, old_len, new_len, new).map_err(|e| {
                        SimError { source_name: String::new(), line: 0, message: format!("mremap replay failed: {}", e.name()) }
                    })?;
                } else {
                    let _ = k.do_munmap(new, new_len);
                }
            }
            SyscallKind::Mprotect if !failed => {
                let (start, len, prot) = (a[0], a[1], a[2]);
                let p = prot_to_vm(prot & 1 != 0, prot & 2 != 0, prot & 4 != 0);
                for (s, e) in model_pieces(k, start, start + len) {
                    let _ = k.do_mprotect(s, e - s, p);
                }
            }
            // MADV_COLLAPSE is replayed even when it failed while recording: the recording ran
            // with PR_SET_THP_DISABLE, which makes it EINVAL; the model decides under the
            // settings. Other advice that failed there fails the same way live.
            SyscallKind::Madvise if !failed || a[2] == 25 => {
                let adv = match a[2] {
                    4 => Madvise::Dontneed,
                    14 => Madvise::Hugepage,
                    15 => Madvise::Nohugepage,
                    25 => Madvise::Collapse,
                    _ => return Ok(()),
                };
                for (s, e) in model_pieces(k, a[0], a[0] + a[1]) {
                    let _ = k.do_madvise(s, e - s, adv);
                }
            }
            SyscallKind::Brk => {
                let got = ret as u64;
                if !img.brk_known {
                    // The first brk (glibc's brk(0)) reveals start_brk.
                    k.set_brk(got, got);
                    img.brk_known = true;
                } else if a[0] != 0 {
                    let model = k.sys_brk(got);
                    if model != got {
                        k.set_brk(k.start_brk(), got);
                    }
                }
            }
            SyscallKind::Prctl if !failed && a[0] == 41 => {
                let form = match (a[1], a[2] & 2) {
                    (0, _) => ThpDisable::Clear,
                    (_, 0) => ThpDisable::Completely,
                    _ => ThpDisable::ExceptAdvised,
                };
                k.prctl_set_thp_disable(form);
            }
            _ => {}
        }
        Ok(())
    }

    /// Finish: retire every image still alive and build the result.
    pub fn finish(mut self) -> (Counters, u64, Vec<CensusReport>, Vec<[[u64; 9]; 10]>, ReplayStats) {
        let pids: Vec<u32> = self.procs.keys().copied().collect();
        for pid in pids {
            self.exit(pid);
        }
        let passthrough: u64 = self.procs.values().map(|p| p.passthrough).sum();
        let minflt = self.done_minflt + passthrough;
        (self.done_counters, minflt, self.done_census, self.done_fallbacks, self.stats)
    }
}

/// The parts of `[start, end)` that lie in anonymous private VMAs of the model.
fn model_pieces(k: &Kernel, start: u64, end: u64) -> Vec<(u64, u64)> {
    k.vmas().filter(|v| v.file == 0 && v.end > start && v.start < end).map(|v| (v.start.max(start), v.end.min(end))).collect()
}
