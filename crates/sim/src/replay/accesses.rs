//! Recorded page faults and accesses: a fault enters the model's `handle_mm_fault` (mm/memory.c)
//! with the error code's write bit (arch/x86/include/asm/trap_pf.h), the stack grows on a fault
//! below it (mm/mmap.c: `expand_downwards`), and `record --accesses` runs go to the TLB model.

use super::*;

impl<'a> Replay<'a> {
    /// Drive the TLB model of `cpu` under `paging` with recorded accesses ([`Replay::accesses`])
    /// from now on; `names` are their regions.
    pub fn enable_accesses(&mut self, cpu: &'static tlb::CpuPreset, paging: tlb::Paging, names: Vec<String>) {
        self.m.kernel_mut().set_tlb_observer(true);
        // Host entry lines are not computed for recorded regions (their pages are not one
        // range): the footprint's density stands for them (`tlb::cost::estimate`).
        self.tlb = Some(crate::access::TlbRun::new(cpu, paging, names.len(), 0.0));
        self.access_span = vec![(u64::MAX, 0); names.len()];
        self.access_names = names;
    }

    /// Recorded accesses of process `pid` (`record --accesses`: runs of accesses to one page,
    /// in the recorded run's addresses), at this point of the recording (the end of the
    /// interval they were recorded in, after its faults): each run goes through the model as
    /// accesses (`Step::AccessRun`: young and dirty bits, never a fault: the recording's fault
    /// records are the program's faults), then through the TLB model once per access, the
    /// kernel's logged flushes applied first. Pages of placeholder VMAs (file mappings, the
    /// vDSO) are looked up as 4 KiB pages of their own; runs where the model has no mapping,
    /// or has not mapped the page (the run under valgrind touches a few pages the native run
    /// did not), are counted, not replayed.
    pub fn accesses(&mut self, pid: u32, runs: impl Iterator<Item = trace::accesses::AccessRun>) {
        let Some(mut tlb) = self.tlb.take() else { return };
        let Some(mm) = self.procs.get(&pid).and_then(|p| p.image.as_ref()).map(|i| i.mm) else {
            self.access_counts.not_replayed += runs.map(|r| r.count).sum::<u64>();
            self.tlb = Some(tlb);
            return;
        };
        self.m.switch_mm(mm);
        for r in runs {
            let img = self.procs.get(&pid).and_then(|p| p.image.as_ref()).expect("checked above");
            let addr = img.tr(r.page * PAGE_SIZE);
            crate::access::apply_flushes(&mut self.m, &mut tlb);
            let mut vma = self.m.vma_lookup(addr);
            if vma.is_none() && self.expand_stack(pid, addr) {
                vma = self.m.vma_lookup(addr);
            }
            let tr = match vma {
                Some(v) if v.is_modelled() => {
                    // Never a fault: a page not mapped is not replayed, and a store to a page
                    // mapped read-only (COW, the zero page) counts as a load.
                    let Some(mapped) = self.m.translation(addr) else {
                        self.access_counts.not_present += r.count;
                        continue;
                    };
                    let write = r.write && mapped.write;
                    let (_, last) = self.m.step_current(Step::AccessRun { first: addr, n: r.count, stride: 0, write }).run();
                    crate::access::apply_flushes(&mut self.m, &mut tlb);
                    // A hit only set young and dirty bits: the translation is the one it found.
                    let now = if last == Access::Hit { Some(mapped) } else { self.m.translation(addr) };
                    match (last, now) {
                        (Access::Hit | Access::Fault, Some(t)) => {
                            self.access_counts.modelled += r.count;
                            crate::access::tlb_translation(addr, &t)
                        }
                        _ => {
                            self.access_counts.not_replayed += r.count;
                            continue;
                        }
                    }
                }
                Some(_) => {
                    self.access_counts.placeholder += r.count;
                    crate::access::placeholder_translation(addr)
                }
                None => {
                    self.access_counts.not_replayed += r.count;
                    continue;
                }
            };
            let ri = r.region as usize;
            let span = &mut self.access_span[ri];
            *span = (span.0.min(r.page), span.1.max(r.page));
            let footprint = (span.1 - span.0 + 1) * PAGE_SIZE;
            tlb.lookup(ri, &tr, r.count, if r.write { r.count } else { 0 }, footprint);
        }
        self.tlb = Some(tlb);
    }

    /// expand_downwards: an access just below `pid`'s stack grows it; whether it did.
    pub(super) fn expand_stack(&mut self, pid: u32, addr: u64) -> bool {
        let Some(img) = self.procs.get_mut(&pid).and_then(|p| p.image.as_mut()) else { return false };
        let Some((start, end)) = img.stack else { return false };
        if addr < start && addr + STACK_LIMIT >= start {
            let new_start = addr / PAGE_SIZE * PAGE_SIZE;
            let prot = prot_to_vm(true, true, false);
            if self.m.step_current(Step::Mmap { len: start - new_start, prot, placement: MmapPlacement::FixedNoReplace(new_start), backing: MapBacking::PrivateAnon }).ret().is_ok() {
                img.stack = Some((new_start, end));
                return true;
            }
        }
        false
    }

    pub(super) fn fault(&mut self, pid: u32, addr: u64, error_code: u64) {
        self.stats.recorded_faults += 1;
        let proc = self.procs.entry(pid).or_default();
        let Some(img) = proc.image.as_mut() else {
            proc.passthrough += 1;
            self.stats.passthrough_faults += 1;
            return;
        };
        let write = error_code & PF_WRITE != 0;
        let addr = img.tr(addr);
        let vma = self.m.vma_lookup(addr);
        let in_model = vma.is_some_and(|v| v.is_modelled());
        if let Some(v) = vma.filter(|v| !v.is_modelled()) {
            img.files.fault(&v, addr, write);
        }
        if !in_model {
            // expand_downwards: a fault just below the stack grows it.
            if self.expand_stack(pid, addr) {
                return self.model_access(pid, addr, write);
            }
            let proc = self.procs.get_mut(&pid).expect("process exists");
            proc.passthrough += 1;
            self.stats.passthrough_faults += 1;
            return;
        }
        self.model_access(pid, addr, write);
    }

    pub(super) fn model_access(&mut self, pid: u32, addr: u64, write: bool) {
        let proc = self.procs.get_mut(&pid).expect("process exists");
        debug_assert_eq!(proc.image.as_ref().map(|i| i.mm), Some(self.m.current_mm()));
        match self.m.step_current(Step::Access { addr, write }).access() {
            // A userfaultfd's page: its reader's UFFDIO_COPY or UFFDIO_ZEROPAGE follows.
            Access::Hit | Access::Fault | Access::Userfault => {}
            Access::Segv | Access::Sigbus | Access::Oom => {
                proc.passthrough += 1;
                self.stats.passthrough_faults += 1;
                self.stats.unresolved_faults += 1;
            }
        }
    }
}
