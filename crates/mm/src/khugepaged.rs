//! Collapse of PTE-mapped memory into PMD-mapped THPs: MADV_COLLAPSE (synchronous, PMD order
//! only, as 6.18 does it) and the khugepaged daemon's scan of the mm (one wake-up's work;
//! when it wakes is the driver's business, on its simulated clock), on the same functions
//! (`cc.is_khugepaged`).
//!
//! Kernel sources (6.18): `mm/khugepaged.c` (`enum scan_result`, `madvise_collapse`,
//! `madvise_collapse_errno`, `hpage_collapse_scan_pmd`, `find_pmd_or_thp_or_none`,
//! `check_pmd_state`, `collapse_huge_page`, `alloc_charge_folio`,
//! `__collapse_huge_page_copy_succeeded`, `khugepaged_enter_vma`, `__khugepaged_enter`,
//! `khugepaged_do_scan`, `khugepaged_alloc_sleep`, `khugepaged_scan_mm_slot`, `khugepaged_has_work`),
//! `include/linux/huge_mm.h` (`hugepage_pmd_enabled`).
//!
//! shmem/tmpfs (mm/khugepaged.c: the file branch of `khugepaged_scan_mm_slot`,
//! `hpage_collapse_scan_file`, `collapse_file`, `retract_page_tables`,
//! `collapse_pte_mapped_thp`, `set_huge_pmd`, and `madvise_collapse` for file VMAs;
//! mm/huge_memory.c: `__thp_vma_allowable_orders` → mm/shmem.c: `shmem_allowable_huge_orders`
//! with `shmem_huge_force` for `TVA_FORCED_COLLAPSE`). What a collapse of the page cache does,
//! checked on the live 6.18 kernel (docs/kernel-notes.md, "khugepaged and MADV_COLLAPSE on
//! shmem"):
//! - eligibility is the shmem rule at the VMA's `vm_pgoff` (huge= of the mount, or for memfd and
//!   shared anonymous memory the per-size knobs), the anon `enabled` knobs play no part; the
//!   VMA's start must be PMD-aligned in file-offset terms.
//! - the scan counts the page-cache pages present in the 2 MiB file range (not PTEs, and not
//!   whether they are mapped or young): fewer than `512 - max_ptes_none` is
//!   SCAN_EXCEED_NONE_PTE; a PMD-order folio already there is SCAN_PTE_MAPPED_HUGEPAGE.
//! - `collapse_file` replaces the small folios by one PMD-order folio in the page cache
//!   (holes zero-filled), unmaps the old pages from every mm (`try_to_unmap`), and frees the
//!   emptied page tables of every VMA that maps the range PMD-aligned and has no anon_vma
//!   (`retract_page_tables`): nothing is PMD-mapped until the next fault, except that
//!   MADV_COLLAPSE maps its own range with a PMD at once (`collapse_pte_mapped_thp` with
//!   `install_pmd`).
//! - khugepaged turns SCAN_PTE_MAPPED_HUGEPAGE into `collapse_pte_mapped_thp` without a PMD;
//!   its SCAN_PMD_MAPPED (or a retracted table) is SCAN_SUCCEED, so `pages_collapsed` grows by
//!   one for every collapsed range at every later scan.
//!
//! Under `--kernel 7.2` or a collapse policy, anonymous ranges with orders below PMD enabled
//! are scanned and collapsed by [`mthp_collapse`]; with PMD the only order the scan is 6.18's
//! (7.2 adds the per-size `collapse_exceed_*_pte` stats at PMD order).

pub mod mthp_collapse;

use mm_types::{Order, Orders, Pfn, Vaddr, PMD_ORDER, PMD_SIZE};
use thp_abi::{KernelVersion, MthpStat, VmEvent};

use crate::huge_memory::TvaType;
use crate::pgtable::{Pmd, PTE_PRESENT, PTE_YOUNG, PTE_ZERO};
use crate::vma::{vm, Vma};
use crate::{Errno, Kernel, MmId};

/// `enum scan_result`: every way a collapse attempt ends. Always counted in
/// `Kernel::scan_results`.
#[doc(alias = "scan_result")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScanResult {
    Fail,
    Succeed,
    PmdNull,
    PmdNone,
    PmdMapped,
    ExceedNonePte,
    ExceedSwapPte,
    ExceedSharedPte,
    PteNonPresent,
    PteUffdWp,
    PteMappedHugepage,
    LackReferencedPage,
    PageNull,
    ScanAbort,
    PageCount,
    PageLru,
    PageLock,
    PageAnon,
    PageCompound,
    AnyProcess,
    VmaNull,
    VmaCheck,
    AddressRange,
    DelPageLru,
    AllocHugePageFail,
    CgroupChargeFail,
    Truncated,
    PageHasPrivate,
    StoreFailed,
    CopyMc,
    PageFilled,
}

impl ScanResult {
    /// The kernel's name, as tracepoints print it.
    pub fn name(self) -> String {
        let dbg = format!("{self:?}");
        let mut out = String::from("SCAN");
        for c in dbg.chars() {
            if c.is_ascii_uppercase() {
                out.push('_');
            }
            out.push(c.to_ascii_uppercase());
        }
        out
    }
}

/// `madvise_collapse_errno`.
pub fn madvise_collapse_errno(r: ScanResult) -> Errno {
    match r {
        ScanResult::AllocHugePageFail => Errno::ENOMEM,
        ScanResult::CgroupChargeFail | ScanResult::ExceedNonePte => Errno::EBUSY,
        ScanResult::PageCount
        | ScanResult::PageLock
        | ScanResult::PageLru
        | ScanResult::DelPageLru
        | ScanResult::PageFilled => Errno::EAGAIN,
        _ => Errno::EINVAL,
    }
}

/// The daemon's state (`struct khugepaged_scan`: the list of mm_slots and where the scan is)
/// and its counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KhugepagedScan {
    /// `khugepaged_scan.mm_head`: the registered mms, in the order they were added
    /// (`__khugepaged_enter` adds at the tail).
    pub mm_slots: std::collections::VecDeque<MmId>,
    /// `khugepaged_scan.mm_slot`: the mm whose scan is under way.
    pub cur: Option<MmId>,
    /// `khugepaged_scan.address`.
    pub address: u64,
    /// `khugepaged_pages_collapsed` (sysfs `khugepaged/pages_collapsed`).
    pub pages_collapsed: u64,
    /// `khugepaged_full_scans` (sysfs `khugepaged/full_scans`).
    pub full_scans: u64,
    /// Wake-ups that scanned (calls of `khugepaged_do_scan`).
    pub wakeups: u64,
    /// PMD ranges the daemon examined (`hpage_collapse_scan_pmd` calls).
    pub pmds_scanned: u64,
    /// Times a wake-up slept `alloc_sleep_millisecs` after a failed huge page allocation
    /// (`khugepaged_alloc_sleep`).
    pub alloc_sleeps: u64,
    /// While the daemon sleeps in `khugepaged_alloc_sleep`: the wake-up's progress and its
    /// passes through the list head, to go on from.
    pub in_alloc_sleep: Option<(u64, u32)>,
    /// What the modelled kernel warned of once (`pr_warn_once`).
    pub warnings: Vec<String>,
    /// The last scan went on to a collapse walk (7.2: the mmap lock was dropped).
    pub(crate) walked: bool,
    /// The ranges a policy handed in before the round-robin scan (collapse hints).
    pub hints: HintScans,
}

/// khugepaged's work on a policy's ranges (`ThpPolicy::next_range`): the collapse-hint
/// series' hint / non-hint accounting (non-hint collapses are `pages_collapsed` less these).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HintScans {
    /// Ranges taken (each once).
    pub served: u64,
    /// Of them, collapsed (`pages_collapsed` counts them too).
    pub collapsed: u64,
    /// Of them, with their mm, VMA or eligibility gone: dropped unscanned.
    pub vanished: u64,
    /// PMD folios split because the policy proposed it (`ThpPolicy::split_candidates`).
    pub splits: u64,
    /// The hint source's passes (MGLRU agings, DAMON aggregations) and its modelled CPU time.
    pub source_passes: u64,
    pub source_cpu_ns: u64,
}

/// How one stretch of a wake-up's scan ended ([`Kernel::khugepaged_do_scan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanEnd {
    /// The wake-up is over: the daemon sleeps `scan_sleep_millisecs`.
    Done,
    /// A huge page allocation failed for the first time in this wake-up: the daemon sleeps
    /// `alloc_sleep_millisecs` and then goes on ([`Kernel::khugepaged_alloc_sleep_done`]).
    AllocSleep,
}

/// `struct collapse_control`.
#[derive(Clone, Copy, Debug)]
pub struct CollapseControl {
    pub is_khugepaged: bool,
}

impl Kernel {
    /// `madvise_collapse` on `[start, end)` inside one VMA.
    pub(crate) fn madvise_collapse(&mut self, vma: &Vma, start: u64, end: u64) -> Result<(), Errno> {
        if self.collapse_vma_allowable(vma, TvaType::ForcedCollapse).is_empty() {
            return Err(Errno::EINVAL);
        }
        let cc = CollapseControl { is_khugepaged: false };
        let hstart = start.wrapping_add(PMD_SIZE - 1) & !(PMD_SIZE - 1);
        let hend = end & !(PMD_SIZE - 1);
        let mut thps: u64 = 0;
        let mut last_fail = ScanResult::Fail;
        let mut addr = hstart;
        while addr < hend {
            let mut result = if let Some(ino) = vma.inode() {
                self.hpage_collapse_scan_file(ino, vma.linear_page_index(addr), cc)
            } else {
                self.hpage_collapse_scan_pmd(vma, addr, cc)
            };
            self.count_scan_result(result);
            if result == ScanResult::PteMappedHugepage {
                // handle_result: map the huge folio with a PMD now, then judge that result.
                result = self.collapse_pte_mapped_thp(addr, true);
                self.count_scan_result(result);
            }
            match result {
                ScanResult::Succeed | ScanResult::PmdMapped => thps += 1,
                ScanResult::PmdNull
                | ScanResult::PteNonPresent
                | ScanResult::PteUffdWp
                | ScanResult::LackReferencedPage
                | ScanResult::PageNull
                | ScanResult::PageCount
                | ScanResult::PageLock
                | ScanResult::PageCompound
                | ScanResult::PageLru
                | ScanResult::DelPageLru => last_fail = result,
                _ => {
                    last_fail = result;
                    break;
                }
            }
            addr += PMD_SIZE;
        }
        // The kernel compares in unsigned arithmetic: a range that holds no aligned block but
        // ends in the same block it starts (hend < hstart) fails, an empty one succeeds.
        if thps == (hend.wrapping_sub(hstart)) >> mm_types::PMD_SHIFT {
            Ok(())
        } else {
            Err(madvise_collapse_errno(last_fail))
        }
    }

    /// `hugepage_pmd_enabled`: whether khugepaged runs at all (the PMD size is `always` or
    /// `madvise`, or `inherit` with the top level not `never`; or shmem PMDs are enabled).
    pub fn hugepage_pmd_enabled(&self) -> bool {
        let pmd = Orders::single(Order::PMD);
        let m = &self.masks;
        !m.always.and(pmd).is_empty()
            || !m.madvise.and(pmd).is_empty()
            || (!m.inherit.and(pmd).is_empty() && m.global_enabled)
            || self.shmem_pmd_enabled()
    }

    /// `khugepaged_enter_vma`: put the mm on khugepaged's list when this VMA is one the daemon
    /// may collapse in (`TVA_KHUGEPAGED`: it needs an anon_vma). Returns true when it was
    /// added now (`__khugepaged_enter`; the daemon then wakes, as the list was empty).
    pub(crate) fn khugepaged_enter_vma(&mut self, vma: &Vma) -> bool {
        if self.mm.flags.vm_hugepage || !self.khugepaged_enabled() {
            return false;
        }
        if self.collapse_vma_allowable(vma, TvaType::Khugepaged).is_empty() {
            return false;
        }
        self.khugepaged_enter();
        true
    }

    /// `thp_vma_allowable_order(vma, ..., PMD_ORDER)` for khugepaged and MADV_COLLAPSE: the anon
    /// rules for private anonymous VMAs, the shmem rules (`shmem_allowable_huge_orders` at
    /// `vm_pgoff`, forced for MADV_COLLAPSE) for shmem VMAs.
    pub(crate) fn collapse_vma_allowable(&self, vma: &Vma, tva: TvaType) -> Orders {
        let pmd = Orders::single(Order::PMD);
        match vma.inode() {
            // 7.2: khugepaged collapses anonymous memory to the orders the policy takes.
            None if tva == TvaType::Khugepaged && self.policy.khugepaged_any_order() => {
                self.policy.collapse_orders(self.thp_vma_allowable_orders(vma, tva, Orders::ALL_ANON))
            }
            None => self.thp_vma_allowable_orders(vma, tva, pmd),
            Some(ino) => crate::shmem::shmem_thp_vma_allowable_orders(&self.settings, &self.mm.flags, self.inode_facts(ino), vma, tva, pmd, &mut ()),
        }
    }

    /// `__khugepaged_enter` for the current mm: MMF_VM_HUGEPAGE, and a slot at the list's tail.
    pub(crate) fn khugepaged_enter(&mut self) {
        self.mm.flags.vm_hugepage = true;
        // An mm that left the list while being scanned keeps its slot until the scan collects
        // it; entering again (after execve, which the model replays in the same mm) reuses it.
        if !self.khugepaged.mm_slots.contains(&self.mm.id) {
            self.khugepaged.mm_slots.push_back(self.mm.id);
        }
    }

    /// `__khugepaged_exit`: the mm leaves the list now, unless the scan is in it (then the scan
    /// collects its slot when it leaves it, `collect_mm_slot`).
    pub(crate) fn khugepaged_exit(&mut self) {
        if !self.mm.flags.vm_hugepage {
            return;
        }
        self.mm.flags.vm_hugepage = false;
        let id = self.mm.id;
        if self.khugepaged.cur != Some(id) {
            self.khugepaged.mm_slots.retain(|m| *m != id);
        }
    }

    /// Whether mm `id` is on khugepaged's list (MMF_VM_HUGEPAGE).
    pub fn khugepaged_registered(&self, id: MmId) -> bool {
        self.mm_ref(id).flags.vm_hugepage
    }

    /// `shmem_hpage_pmd_enabled`: the PMD size of shmem is `always`, `within_size` or
    /// `advise`, or `inherit` with a top-level `shmem_enabled` other than `never` and `deny`.
    fn shmem_pmd_enabled(&self) -> bool {
        use thp_abi::settings::{ShmemEnabled, ShmemSizeEnabled};
        let s = &self.settings;
        if s.shmem_enabled == ShmemEnabled::Deny {
            return false;
        }
        match s.shmem[PMD_ORDER as usize] {
            ShmemSizeEnabled::Always | ShmemSizeEnabled::WithinSize | ShmemSizeEnabled::Advise => true,
            ShmemSizeEnabled::Inherit => s.shmem_enabled != ShmemEnabled::Never,
            ShmemSizeEnabled::Never => false,
        }
    }

    /// `khugepaged_has_work`.
    pub fn khugepaged_has_work(&self) -> bool {
        !self.khugepaged.mm_slots.is_empty() && self.khugepaged_enabled()
    }

    /// The gate of the daemon: `hugepage_pmd_enabled` (6.18), or any anonymous size enabled
    /// too when the policy collapses below PMD order (7.2's `hugepage_enabled`).
    fn khugepaged_enabled(&self) -> bool {
        self.hugepage_pmd_enabled() || (self.policy.khugepaged_any_order() && self.anon_mthp_enabled())
    }

    /// What the modelled kernel warned of once (`pr_warn_once`), such as 7.2's max_ptes_none rule.
    pub fn kernel_warnings(&self) -> &[String] {
        &self.khugepaged.warnings
    }

    /// Install a THP policy ([`policy::ThpPolicy`]) in place of the one the settings chose.
    pub fn set_policy(&mut self, policy: Box<dyn policy::ThpPolicy>) {
        self.contig = crate::contig_hint::state_for(&*policy);
        self.policy = policy;
    }

    /// The hint source the policy reads and its period in ns (`ThpPolicy::hint_source`).
    pub fn policy_hint_source(&self) -> Option<(thp_abi::HintSource, u64)> {
        self.policy.hint_source()
    }

    /// A hint source's pass: its findings go to the policy (collapse hints are queued:
    /// `khugepaged_add_collapse_hint`), and the PMD folios the policy then proposes to split
    /// are split (`split_huge_page` of a PMD-mapped anonymous THP: `unmap_folio` splits its PMD
    /// in every mm that maps it, a fork's child too, then `split_folio`, frozen). Returns the
    /// splits.
    pub fn policy_hotness(&mut self, found: &[policy::HotRange]) -> u64 {
        self.policy.hotness(found);
        let mapped: Vec<policy::Range> = found.iter().filter(|h| h.pmd_mapped).map(|h| h.range).collect();
        let prev = self.mm.id;
        let mut folios = Vec::new();
        for r in self.policy.split_candidates(&mapped) {
            if r.mm as usize >= self.parked.len() || self.mm_exited(MmId(r.mm)) {
                continue;
            }
            self.switch_mm(MmId(r.mm));
            let va = Vaddr(r.addr & !(PMD_SIZE - 1));
            let Some(t) = self.mm.pt.pmd_table_ro(va) else { continue };
            let Pmd::Huge { pfn, .. } = self.mm.pt.pmd(t, va) else { continue };
            if self.mm.vmas.find(va.0).is_none_or(|v| v.inode().is_some()) || folios.contains(&pfn) {
                continue;
            }
            folios.push(pfn);
        }
        self.switch_mm(prev);
        let chosen: std::collections::HashSet<Pfn> = folios.iter().copied().collect();
        let maps = self.rmap_walk(|p| chosen.contains(&self.folio_head(p)));
        self.unmap_folio(&maps, &chosen);
        for &pfn in &folios {
            self.split_folio(pfn, true);
        }
        let n = folios.len() as u64;
        self.khugepaged.hints.splits += n;
        n
    }

    /// The policy's hint queues' counts (`ThpPolicy::hint_stats`), if it has queues.
    pub fn policy_hint_stats(&self) -> Option<policy::HintStats> {
        self.policy.hint_stats()
    }

    /// Account a hint source's pass and its modelled CPU time.
    pub fn note_hint_source(&mut self, passes: u64, cpu_ns: u64) {
        self.khugepaged.hints.source_passes += passes;
        self.khugepaged.hints.source_cpu_ns += cpu_ns;
    }

    /// What the daemon has done.
    pub fn khugepaged_state(&self) -> &KhugepagedScan {
        &self.khugepaged
    }

    /// `khugepaged_do_scan`: one wake-up of the daemon, scanning up to `pages_to_scan`
    /// (progress counts 512 per PMD range examined, 1 per VMA skipped and 1 per call), passing
    /// the head of its list at most twice. The first failed huge page allocation of the
    /// wake-up puts the daemon to sleep (`khugepaged_alloc_sleep`, [`ScanEnd::AllocSleep`]:
    /// the driver's clock decides when it goes on); the second ends the wake-up.
    pub fn khugepaged_do_scan(&mut self) -> ScanEnd {
        self.khugepaged.wakeups += 1;
        self.khugepaged.in_alloc_sleep = None;
        let pages = self.settings.khugepaged.pages_to_scan as u64;
        let progress = self.khugepaged_scan_hints(pages);
        if progress >= pages {
            return ScanEnd::Done;
        }
        self.khugepaged_scan_loop(progress, 0, true)
    }

    /// The policy's ranges before the round-robin scan (`ThpPolicy::next_range`; 6.18 has
    /// none): each PMD range that is still an anonymous one khugepaged may collapse in is
    /// scanned once, charged `ThpPolicy::hint_charge` pages of `pages_to_scan` (512 unless
    /// the policy says otherwise; its `vanished` charge when the VMA is gone or ineligible).
    fn khugepaged_scan_hints(&mut self, pages: u64) -> u64 {
        let mut progress = 0;
        while progress < pages {
            let Some(r) = self.policy.next_range() else { break };
            self.khugepaged.hints.served += 1;
            if r.mm as usize >= self.parked.len() {
                progress += self.policy.hint_charge(true).max(1);
                self.khugepaged.hints.vanished += 1;
                continue;
            }
            let prev = self.mm.id;
            self.switch_mm(MmId(r.mm));
            let addr = r.addr & !(PMD_SIZE - 1);
            let vma = self.mm.vmas.find(addr).filter(|v| !self.mm.exited && v.inode().is_none() && v.start <= addr && addr + PMD_SIZE <= v.end);
            if let Some(vma) = vma.filter(|v| !self.collapse_vma_allowable(v, TvaType::Khugepaged).is_empty()) {
                progress += self.policy.hint_charge(false).max(1);
                let r = self.hpage_collapse_scan_pmd(&vma, addr, CollapseControl { is_khugepaged: true });
                self.count_scan_result(r);
                self.khugepaged.pmds_scanned += 1;
                self.khugepaged.walked = false;
                if r == ScanResult::Succeed {
                    self.khugepaged.pages_collapsed += 1;
                    self.khugepaged.hints.collapsed += 1;
                }
            } else {
                progress += self.policy.hint_charge(true).max(1);
                self.khugepaged.hints.vanished += 1;
            }
            self.switch_mm(prev);
        }
        progress
    }

    /// The end of `khugepaged_alloc_sleep`: the wake-up goes on where it stopped, and a
    /// second failed allocation ends it. (Without a wake-up in progress: a new one.)
    pub fn khugepaged_alloc_sleep_done(&mut self) -> ScanEnd {
        match self.khugepaged.in_alloc_sleep.take() {
            Some((progress, pass_through_head)) => self.khugepaged_scan_loop(progress, pass_through_head, false),
            None => self.khugepaged_do_scan(),
        }
    }

    fn khugepaged_scan_loop(&mut self, mut progress: u64, mut pass_through_head: u32, alloc_wait: bool) -> ScanEnd {
        let pages = self.settings.khugepaged.pages_to_scan as u64;
        loop {
            if self.khugepaged.cur.is_none() {
                pass_through_head += 1;
            }
            let mut result = ScanResult::Succeed;
            if self.khugepaged_has_work() && pass_through_head < 2 {
                progress += self.khugepaged_scan_mm_slot(pages - progress.min(pages), &mut result);
            } else {
                progress = pages;
            }
            if progress >= pages {
                break;
            }
            if result == ScanResult::AllocHugePageFail {
                if !alloc_wait {
                    break;
                }
                self.khugepaged.alloc_sleeps += 1;
                self.khugepaged.in_alloc_sleep = Some((progress, pass_through_head));
                return ScanEnd::AllocSleep;
            }
        }
        ScanEnd::Done
    }

    /// `khugepaged_scan_mm_slot`: scan the mm the scan is in (or the list's first), from
    /// `khugepaged_scan.address`, within `pages`; when the mm is done (or exited), move to the
    /// next slot, counting a full scan after the last.
    fn khugepaged_scan_mm_slot(&mut self, pages: u64, result: &mut ScanResult) -> u64 {
        *result = ScanResult::Fail;
        let id = match self.khugepaged.cur {
            Some(id) => id,
            None => {
                let first = *self.khugepaged.mm_slots.front().expect("khugepaged_has_work");
                self.khugepaged.cur = Some(first);
                self.khugepaged.address = 0;
                first
            }
        };
        let prev = self.mm.id;
        self.switch_mm(id);
        let progress = if self.mm.exited || !self.mm.flags.vm_hugepage {
            // hpage_collapse_test_exit: an exited mm is collected.
            self.khugepaged_next_slot(id);
            1
        } else {
            self.khugepaged_scan_mm(pages, result)
        };
        self.switch_mm(prev);
        progress
    }

    /// Leave mm `id`'s slot: the next one, or none (a full scan) after the last;
    /// `collect_mm_slot` frees the slot of an mm that left the list.
    fn khugepaged_next_slot(&mut self, id: MmId) {
        let slots = &mut self.khugepaged.mm_slots;
        let pos = slots.iter().position(|m| *m == id).expect("the scanned mm has a slot");
        self.khugepaged.cur = slots.get(pos + 1).copied();
        self.khugepaged.address = 0;
        if self.khugepaged.cur.is_none() {
            self.khugepaged.full_scans += 1;
        }
        if !self.mm.flags.vm_hugepage || self.mm.exited {
            slots.remove(pos);
        }
    }

    /// The VMA walk of `khugepaged_scan_mm_slot` in the current mm.
    fn khugepaged_scan_mm(&mut self, pages: u64, result: &mut ScanResult) -> u64 {
        let mut progress = 1u64;
        let cc = CollapseControl { is_khugepaged: true };
        let mut done_with_mm = true;
        // for_each_vma from the scan address (the first VMA that ends above it).
        let vmas: Vec<Vma> = self.mm.vmas.iter().filter(|v| v.end > self.khugepaged.address).cloned().collect();
        'vmas: for vma in vmas {
            // The VMA may have changed under a collapse: look it up again.
            let Some(vma) = self.mm.vmas.find(vma.start).filter(|v| v.start == vma.start) else { continue };
            if self.collapse_vma_allowable(&vma, TvaType::Khugepaged).is_empty() {
                progress += 1;
                continue;
            }
            let hstart = vma.start.next_multiple_of(PMD_SIZE);
            let hend = vma.end & !(PMD_SIZE - 1);
            if self.khugepaged.address > hend {
                progress += 1;
                continue;
            }
            if self.khugepaged.address < hstart {
                self.khugepaged.address = hstart;
            }
            while self.khugepaged.address < hend {
                let addr = self.khugepaged.address;
                let (r, lock_dropped) = if let Some(ino) = vma.inode() {
                    // The file branch drops the mmap lock for every range.
                    let r = self.hpage_collapse_scan_file(ino, vma.linear_page_index(addr), cc);
                    self.count_scan_result(r);
                    let r = if r == ScanResult::PteMappedHugepage {
                        // collapse_pte_mapped_thp without a PMD: the next fault maps one.
                        let r2 = self.collapse_pte_mapped_thp(addr, false);
                        self.count_scan_result(r2);
                        if r2 == ScanResult::PmdMapped {
                            ScanResult::Succeed
                        } else {
                            r2
                        }
                    } else {
                        r
                    };
                    (r, true)
                } else {
                    let r = self.hpage_collapse_scan_pmd(&vma, addr, cc);
                    self.count_scan_result(r);
                    // The scan drops the mmap lock when it goes on to collapse_huge_page, which
                    // ends in success or in a failed allocation, or to a collapse walk (7.2).
                    let walked = std::mem::take(&mut self.khugepaged.walked);
                    (r, walked || matches!(r, ScanResult::Succeed | ScanResult::AllocHugePageFail))
                };
                *result = r;
                self.khugepaged.pmds_scanned += 1;
                if r == ScanResult::Succeed {
                    self.khugepaged.pages_collapsed += 1;
                }
                self.khugepaged.address += PMD_SIZE;
                progress += 512;
                if lock_dropped {
                    // breakouterloop_mmap_lock with the VMA still set: not the end of the mm.
                    done_with_mm = false;
                    break 'vmas;
                }
                if progress >= pages {
                    done_with_mm = false;
                    break 'vmas;
                }
            }
        }
        if done_with_mm {
            // Every VMA scanned: on to the next mm.
            self.khugepaged_next_slot(self.mm.id);
        }
        progress
    }

    /// 7.2's per-size `collapse_exceed_*_pte` at PMD order, beside the vm event of a PMD scan.
    fn count_collapse_exceed(&mut self, stat: MthpStat) {
        if self.settings.kernel >= KernelVersion::V7_2 {
            self.counters.count_mthp(Order::PMD, stat);
        }
    }

    fn count_scan_result(&mut self, r: ScanResult) {
        *self.mm.stats.scan_results.entry(r).or_insert(0) += 1;
    }

    /// `hpage_collapse_scan_pmd` for the 2 MiB block at `addr`, then `collapse_huge_page`.
    fn hpage_collapse_scan_pmd(&mut self, vma: &Vma, addr: u64, cc: CollapseControl) -> ScanResult {
        let va = Vaddr(addr);
        // find_pmd_or_thp_or_none
        let Some(t) = self.mm.pt.pmd_table(va) else { return ScanResult::PmdNull };
        let idx = match self.mm.pt.pmd(t, va) {
            Pmd::None => return ScanResult::PmdNone,
            Pmd::Huge { .. } | Pmd::HugeZero => return ScanResult::PmdMapped,
            Pmd::Table(i) => i,
        };
        if cc.is_khugepaged && self.policy.khugepaged_any_order() && vma.inode().is_none() {
            let enabled = self.collapse_vma_allowable(vma, TvaType::Khugepaged);
            if enabled != Orders::single(Order::PMD) {
                return self.collapse_scan_pmd_mthp(vma, addr, idx, t, enabled);
            }
        }
        let ks = self.settings.khugepaged;
        let mut none_or_zero = 0;
        let mut referenced = 0;
        let mut shared = 0;
        for i in 0..512 {
            let e = self.mm.pt.pte(idx, i);
            if e == 0 && !self.mm.pt.swap.is_empty() && self.mm.pt.swap.contains_key(&(addr / mm_types::PAGE_SIZE + i as u64)) {
                // A swap entry: the model does not swap in for a collapse
                // (`__collapse_huge_page_swapin`); the range is refused.
                let swapped = self.mm.pt.swap.range(addr / mm_types::PAGE_SIZE..addr / mm_types::PAGE_SIZE + 512).count() as u32;
                if cc.is_khugepaged && swapped > ks.max_ptes_swap {
                    self.counters.count(VmEvent::ThpScanExceedSwapPte);
                    self.count_collapse_exceed(MthpStat::CollapseExceedSwapPte);
                }
                return ScanResult::ExceedSwapPte;
            }
            if e == 0 || e & PTE_ZERO != 0 {
                none_or_zero += 1;
                // A userfaultfd-registered VMA allows no none or zero PTE, even to MADV_COLLAPSE.
                if vma.flags & vm::UFFD_ARMED != 0 || (cc.is_khugepaged && none_or_zero > ks.max_ptes_none) {
                    self.counters.count(VmEvent::ThpScanExceedNonePte);
                    self.count_collapse_exceed(MthpStat::CollapseExceedNonePte);
                    return ScanResult::ExceedNonePte;
                }
                continue;
            }
            // Every present page of the model is an unpinned anon page on the LRU; fork may have
            // shared it.
            let head = self.folio_head(crate::pgtable::pte_pfn(e));
            if self.folio_maybe_mapped_shared(head) {
                shared += 1;
                if cc.is_khugepaged && shared > ks.max_ptes_shared {
                    self.counters.count(VmEvent::ThpScanExceedSharePte);
                    self.count_collapse_exceed(MthpStat::CollapseExceedSharedPte);
                    return ScanResult::ExceedSharedPte;
                }
            }
            if cc.is_khugepaged && e & PTE_YOUNG != 0 {
                referenced += 1;
            }
        }
        if cc.is_khugepaged && referenced == 0 {
            return ScanResult::LackReferencedPage;
        }
        self.collapse_huge_page(vma, va, idx, t, cc)
    }

    /// `collapse_huge_page`: allocate a 2 MiB folio, copy the present pages into it (none and
    /// zero-page PTEs become zero-filled pages), release the old folios and map the new one with
    /// a PMD; the old PTE table is deposited.
    pub(super) fn collapse_huge_page(&mut self, vma: &Vma, haddr: Vaddr, idx: u32, t: u32, cc: CollapseControl) -> ScanResult {
        // alloc_charge_folio: khugepaged's GFP by khugepaged/defrag, MADV_COLLAPSE's
        // GFP_TRANSHUGE (it may compact), the charge with the same GFP; a failed charge counts nothing
        // (SCAN_CGROUP_CHARGE_FAIL). Reclaim while allocating leaves the range being collapsed
        // alone (the kernel revalidates it).
        let gfp = if cc.is_khugepaged { crate::page_alloc::khugepaged_gfp_mask(self.settings.khugepaged.defrag) } else { crate::page_alloc::Gfp::TRANSHUGE };
        self.reclaim_guard = Some((self.mm.id.0, haddr.0, haddr.0 + mm_types::PMD_SIZE));
        let folio = self.alloc_anon_folio_gfp(Order::PMD, gfp);
        self.reclaim_guard = None;
        let Some(folio) = folio else {
            if self.last_charge_failed {
                return ScanResult::CgroupChargeFail;
            }
            self.counters.count(VmEvent::ThpCollapseAllocFailed);
            return ScanResult::AllocHugePageFail;
        };
        self.counters.count(VmEvent::ThpCollapseAlloc);
        let ptes: Vec<crate::pgtable::Pte> = self.mm.pt.all_ptes(idx).collect();
        let mut young = false;
        for (i, &e) in ptes.iter().enumerate() {
            if e & PTE_PRESENT != 0 && e & PTE_ZERO == 0 {
                let src = crate::pgtable::pte_pfn(e);
                let touched = self.zone.mem_map[src.idx()].flags & crate::page_alloc::pg::TOUCHED;
                self.zone.mem_map[folio.add(i as u32).idx()].flags |= touched;
                young |= e & PTE_YOUNG != 0;
            }
        }
        // __collapse_huge_page_copy_succeeded: clear the PTEs, dropping the old folios in
        // per-folio batches.
        self.zap_range(haddr.0, haddr.0 + PMD_SIZE);
        debug_assert!(self.mm.pt.ptes_none(idx, 0..512));
        self.mm.pt.set_pmd(t, haddr, Pmd::None);
        self.mm.pt.deposit(t, haddr, idx);
        self.folio_add_new_anon_rmap(folio);
        self.zone.folio_meta_mut(folio).entire = 1;
        let write = vma.flags & vm::WRITE != 0;
        self.mm.pt.set_pmd(t, haddr, Pmd::Huge { pfn: folio, young, dirty: true, write });
        self.mm.stats.anon_rss_pages += 1 << PMD_ORDER;
        self.deferred_split_folio(folio, false);
        ScanResult::Succeed
    }
    // ---------------------------------------------------------------- shmem / tmpfs

    /// `hpage_collapse_scan_file` for the 2 MiB-aligned file range at index `start`: count the
    /// pages present in the page cache (holes are what `max_ptes_none` limits, for khugepaged
    /// only; the model has no swap entries, so `max_ptes_swap` never refuses, and no page
    /// off the LRU or with extra references), then `collapse_file`. A PMD-order folio already
    /// at `start` is SCAN_PTE_MAPPED_HUGEPAGE (the caller goes on to `collapse_pte_mapped_thp`).
    fn hpage_collapse_scan_file(&mut self, ino: crate::shmem::InodeId, start: u64, cc: CollapseControl) -> ScanResult {
        let nr = 1u64 << PMD_ORDER;
        let inode = &self.shmem.inodes[ino as usize];
        let mut present = 0u64;
        for (&index, f) in inode.cache.range(start..start + nr) {
            if f.order == PMD_ORDER && index == start {
                return ScanResult::PteMappedHugepage;
            }
            present += 1 << f.order;
        }
        if cc.is_khugepaged && present < nr - self.settings.khugepaged.max_ptes_none as u64 {
            self.counters.count(VmEvent::ThpScanExceedNonePte);
            return ScanResult::ExceedNonePte;
        }
        self.collapse_file(ino, start, cc)
    }

    /// `collapse_file` (shmem): allocate a PMD-order folio (`alloc_charge_folio`: counts
    /// thp_collapse_alloc or thp_collapse_alloc_failed; not thp_file_alloc nor shmem_alloc),
    /// unmap the old folios from every mm (`try_to_unmap`), copy them in (holes zero-filled, so
    /// the file gains their pages: meminfo Shmem grows), put the new folio in the page cache in
    /// their place, free them, and `retract_page_tables`. khugepaged's success is SCAN_SUCCEED;
    /// MADV_COLLAPSE's is SCAN_PTE_MAPPED_HUGEPAGE (it maps the folio itself).
    fn collapse_file(&mut self, ino: crate::shmem::InodeId, start: u64, cc: CollapseControl) -> ScanResult {
        let nr = 1u64 << PMD_ORDER;
        let gfp = if cc.is_khugepaged { crate::page_alloc::khugepaged_gfp_mask(self.settings.khugepaged.defrag) } else { crate::page_alloc::Gfp::TRANSHUGE };
        let Some(new) = self.alloc_folio_gfp(Order::PMD, false, gfp) else {
            self.counters.count(VmEvent::ThpCollapseAllocFailed);
            return ScanResult::AllocHugePageFail;
        };
        self.counters.count(VmEvent::ThpCollapseAlloc);
        let old: Vec<(u64, crate::shmem::CacheFolio)> =
            self.shmem.inodes[ino as usize].cache.range(start..start + nr).map(|(k, f)| (*k, *f)).collect();
        if old.is_empty() {
            // The range is empty (truncated or hole-punched, or MADV_COLLAPSE of a hole).
            self.free_folio(new);
            return ScanResult::Truncated;
        }
        if old.iter().any(|(k, f)| f.order == PMD_ORDER && *k == start) {
            self.free_folio(new);
            return ScanResult::PteMappedHugepage;
        }
        // try_to_unmap of every old folio: its PTEs in every mm that maps the range.
        self.shmem_unmap_file_range(ino, start, nr, crate::shmem::Unmap::Range);
        for (index, f) in &old {
            for i in 0..(1u32 << f.order) {
                let touched = self.zone.mem_map[f.pfn.add(i).idx()].flags & crate::page_alloc::pg::TOUCHED;
                self.zone.mem_map[new.add((index - start) as u32 + i).idx()].flags |= touched;
            }
            let inode = &mut self.shmem.inodes[ino as usize];
            inode.cache.remove(index);
            self.shmem.owner.remove(&f.pfn.0);
            self.free_folio(f.pfn);
        }
        self.zone.mem_map[new.idx()].flags |= crate::page_alloc::pg::SHMEM;
        self.shmem.inodes[ino as usize].cache.insert(start, crate::shmem::CacheFolio { pfn: new, order: PMD_ORDER, uptodate: true });
        self.shmem.owner.insert(new.0, (ino, start));
        self.retract_page_tables(ino, start);
        if cc.is_khugepaged {
            ScanResult::Succeed
        } else {
            ScanResult::PteMappedHugepage
        }
    }

    /// Every (mm, VMA) that maps file `ino` (`mapping->i_mmap`), in mm order: the mm, the VMA.
    fn shmem_mappers(&self, ino: crate::shmem::InodeId) -> Vec<(MmId, Vma)> {
        let mut out = Vec::new();
        for id in self.mm_ids() {
            let mm = self.mm_ref(id);
            if mm.exited {
                continue;
            }
            out.extend(mm.vmas.iter().filter(|v| v.inode() == Some(ino)).map(|v| (id, *v)));
        }
        out
    }

    /// The page-cache pages `[first, first + n)` of `ino` taken out of every mm, `how` says how
    /// (`unmap_mapping_range` or `try_to_unmap`).
    pub(crate) fn shmem_unmap_file_range(&mut self, ino: crate::shmem::InodeId, first: u64, n: u64, how: crate::shmem::Unmap) {
        let prev = self.mm.id;
        for (id, vma) in self.shmem_mappers(ino) {
            let vma_pages = vma.len() / mm_types::PAGE_SIZE;
            let lo = first.max(vma.pgoff);
            let hi = first.saturating_add(n).min(vma.pgoff + vma_pages);
            if lo >= hi {
                continue;
            }
            self.switch_mm(id);
            let a = vma.start + (lo - vma.pgoff) * mm_types::PAGE_SIZE;
            let b = vma.start + (hi - vma.pgoff) * mm_types::PAGE_SIZE;
            self.note_rss_peak();
            match how {
                crate::shmem::Unmap::Range => self.zap_file_range(a, b, false),
                crate::shmem::Unmap::Folio => self.zap_file_range(a, b, true),
                crate::shmem::Unmap::RangeAndCopies => self.zap_range(a, b),
            }
        }
        self.switch_mm(prev);
    }

    /// `retract_page_tables`: in every mm, a VMA of `ino` without an anon_vma that maps file
    /// index `pgoff` at a PMD-aligned address with the whole 2 MiB inside it loses the (now
    /// empty) PTE table there; the next fault maps the huge folio with a PMD.
    fn retract_page_tables(&mut self, ino: crate::shmem::InodeId, pgoff: u64) {
        let prev = self.mm.id;
        for (id, vma) in self.shmem_mappers(ino) {
            let vma_pages = vma.len() / mm_types::PAGE_SIZE;
            if pgoff < vma.pgoff || pgoff >= vma.pgoff + vma_pages || vma.anon_vma != 0 {
                continue;
            }
            let addr = vma.start + (pgoff - vma.pgoff) * mm_types::PAGE_SIZE;
            if addr % PMD_SIZE != 0 || vma.end < addr + PMD_SIZE {
                continue;
            }
            self.switch_mm(id);
            let va = Vaddr(addr);
            if let Some(t) = self.mm.pt.pmd_table(va) {
                if let Pmd::Table(idx) = self.mm.pt.pmd(t, va) {
                    debug_assert!(self.mm.pt.ptes_none(idx, 0..512), "retract_page_tables: the table was unmapped");
                    self.mm.pt.set_pmd(t, va, Pmd::None);
                    self.free_pgtable(idx);
                    self.flush_tlb_range(addr, addr + PMD_SIZE);
                }
            }
        }
        self.switch_mm(prev);
    }

    /// `collapse_pte_mapped_thp` in the current mm at the 2 MiB block of `addr`: when the page
    /// cache holds a PMD-order folio there, clear the PTEs that map its pages (any other PTE
    /// aborts), free the PTE table and, with `install_pmd` (MADV_COLLAPSE), map the folio with
    /// a PMD (`set_huge_pmd` → `do_set_pmd`: thp_file_mapped).
    fn collapse_pte_mapped_thp(&mut self, addr: u64, install_pmd: bool) -> ScanResult {
        let haddr = addr & !(PMD_SIZE - 1);
        let Some(vma) = self.mm.vmas.find(haddr).filter(|v| v.file != 0 && v.start <= haddr && haddr + PMD_SIZE <= v.end) else {
            return ScanResult::VmaCheck;
        };
        let va = Vaddr(haddr);
        let t = self.mm.pt.pmd_table(va);
        let pmd = t.map(|t| self.mm.pt.pmd(t, va));
        if matches!(pmd, Some(Pmd::Huge { .. } | Pmd::HugeZero)) {
            return ScanResult::PmdMapped;
        }
        // A huge folio in the page cache is PMD-mapped at fault whatever the knobs: force.
        if self.collapse_vma_allowable(&vma, TvaType::ForcedCollapse).is_empty() {
            return ScanResult::VmaCheck;
        }
        let ino = vma.inode().expect("a file VMA");
        let Some((_, folio)) = self.shmem.inodes[ino as usize].lookup(vma.linear_page_index(haddr)) else {
            return ScanResult::PageNull;
        };
        if folio.order != PMD_ORDER {
            return ScanResult::PageCompound;
        }
        if let Some(Pmd::Table(idx)) = pmd {
            // Step 1: every mapped PTE maps the right page of the folio.
            for i in 0..512usize {
                let e = self.mm.pt.pte(idx, i);
                if e == 0 {
                    continue;
                }
                if e & PTE_PRESENT == 0 || crate::pgtable::pte_pfn(e) != folio.pfn.add(i as u32) {
                    return ScanResult::Fail;
                }
            }
            // Steps 2-4: clear them (rmap, MM_SHMEMPAGES) and free the table.
            self.zap_range(haddr, haddr + PMD_SIZE);
            let t = t.expect("a PMD table holds the PTE table");
            self.mm.pt.set_pmd(t, va, Pmd::None);
            self.free_pgtable(idx);
        }
        if !install_pmd {
            return ScanResult::Succeed;
        }
        // set_huge_pmd: pmd_alloc, then do_set_pmd.
        let t = match self.mm.pt.pmd_table(va) {
            Some(t) => t,
            None => {
                let Some(frame) = self.alloc_pgtable_frame() else { return ScanResult::Fail };
                self.mm.pt.install_pmd_table(va, frame)
            }
        };
        if self.do_set_pmd(&vma, va, t, folio.pfn, false) {
            ScanResult::Succeed
        } else {
            ScanResult::Fail
        }
    }
}
