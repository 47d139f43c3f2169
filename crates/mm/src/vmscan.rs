//! Reclaim: the classic active/inactive anon LRU, its aging by the accessed bit, and the
//! reclaim entry points (memcg limit reclaim, direct reclaim, kswapd).
//!
//! Kernel sources (6.18, `CONFIG_LRU_GEN` off as on this machine): `mm/swap.c`
//! (`folio_add_lru`, `lru_add`: a new anon folio starts on the inactive list;
//! `lru_add_split_folio`: the pieces of a split folio stay on its list), `mm/vmscan.c`
//! (`try_to_free_mem_cgroup_pages`, `try_to_free_pages`, `do_try_to_free_pages`: priority
//! DEF_PRIORITY (12) down to 0 until `nr_to_reclaim`; `shrink_lruvec`: each list scanned by
//! `size >> priority` in batches of SWAP_CLUSTER_MAX (32); `inactive_is_low`: the inactive
//! list is low when `inactive * int_sqrt(10 * GiB) < active`; `shrink_active_list`: anon
//! folios are deactivated whether referenced or not, their accessed bits cleared;
//! `shrink_inactive_list` → `shrink_folio_list` with `folio_check_references`: a folio whose
//! PTEs were young is kept once (PG_referenced set) and activated the second time or when
//! more than one mm saw it young, an unreferenced one is swapped out; `wakeup_kswapd`,
//! `balance_pgdat`, `pgdat_balanced`: kswapd reclaims from below the low watermark to the high
//! one), `mm/rmap.c` (`folio_referenced`, `folio_referenced_one`: one reference per mapping
//! mm with a young PTE or PMD; a VM_LOCKED mapping makes the folio unevictable).
//!
//! Model choices: one node, one memcg, anon folios only (no file LRU: the model's only file
//! pages are shmem, which stays resident; the kernel would swap shmem too). kswapd runs
//! synchronously at the allocation that wakes it (no clock). mlocked folios are kept on the
//! active list and skipped (the kernel moves them to the unevictable list). The rmap walk finds
//! a folio's mappings at the address where it was first mapped, in every mm (fork keeps the
//! address); a folio moved by mremap is not found there and stays resident. The LRU is kept
//! only when the machine has swap (without swap the model has nothing reclaimable).

use std::collections::VecDeque;

use mm_types::{Order, Pfn, Vaddr, PAGE_SIZE};

use crate::page_alloc::pg;
use crate::pgtable::{pte_pfn, Pmd, PTE_PRESENT, PTE_YOUNG, PTE_ZERO};
use crate::vma::vm;
use crate::{Kernel, MmId};

pub mod demote;
pub mod lru_gen;

/// `SWAP_CLUSTER_MAX`.
pub const SWAP_CLUSTER_MAX: u64 = 32;
/// `DEF_PRIORITY`.
pub const DEF_PRIORITY: u32 = 12;

/// `Page::lru` bit: on the active list (`PG_active`); the low 7 bits are the entry generation.
pub(crate) const LRU_ACTIVE: u8 = 0x80;

/// One LRU entry: a folio head, where its rmap walk looks (the virtual page where it was
/// first mapped, in every mm, as `folio->index` and the anon_vma let the kernel find it), and the
/// generation it was added with (an entry whose generation no longer matches its page's is
/// stale: the folio was freed, isolated or moved since).
#[derive(Clone, Copy, Debug)]
pub(crate) struct LruEntry {
    pub pfn: u32,
    pub vpage: u64,
    pub lru: u8,
    pub order: u8,
}

/// The anon LRU lists of the one lruvec; the back of each deque is the list head (newest).
#[derive(Default)]
pub struct Lru {
    lists: [VecDeque<LruEntry>; 2],
    /// Pages on each list (`lruvec_lru_size`): [inactive, active].
    pages: [u64; 2],
}

/// Reclaim's and swap's vm events (/proc/vmstat names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReclaimStats {
    pub pswpin: u64,
    pub pswpout: u64,
    pub pgmajfault: u64,
    /// `pgscan_*`: pages isolated from the inactive list.
    pub pgscan: u64,
    /// `pgsteal_*`: pages reclaimed.
    pub pgsteal: u64,
    pub pgactivate: u64,
    pub pgdeactivate: u64,
    /// `pgrotated`-like: inactive folios kept for another trip (PG_referenced set).
    pub pgkept: u64,
    /// kswapd wake-ups (`wakeup_kswapd` that ran `balance_pgdat`).
    pub kswapd_wakeups: u64,
    /// `allocstall`: direct reclaim entered (`try_to_free_pages`).
    pub allocstall: u64,
    /// Folios whose rmap walk found fewer mappings than their mapcount (moved by mremap): kept.
    pub rmap_miss: u64,
    /// Of `pgscan`, `pgsteal` and `pswpout`: kswapd's (`balance_pgdat`; the rest is direct or
    /// memcg limit reclaim), which `sim::driver` prices on kswapd's thread, not the task's.
    pub kswapd_scan: u64,
    pub kswapd_steal: u64,
    pub kswapd_swpout: u64,
}

const INACTIVE: usize = 0;
const ACTIVE: usize = 1;

impl Kernel {
    /// Reclaim and swap counters.
    pub fn reclaim_stats(&self) -> &ReclaimStats {
        &self.reclaim_stats
    }

    /// The /proc/vmstat line `e` as the model counts it; `None` for the lines it does not keep
    /// (file LRU, kswapd/direct split, compaction's (`Counters`), zswap). Every one of
    /// `thp_abi::pressure::RESULT_RECLAIM` is kept (a test checks it).
    pub fn reclaim_event(&self, e: thp_abi::ReclaimEvent) -> Option<u64> {
        use thp_abi::ReclaimEvent as E;
        let s = &self.reclaim_stats;
        Some(match e {
            E::Pswpin => s.pswpin,
            E::Pswpout => s.pswpout,
            E::Pgmajfault => s.pgmajfault,
            E::PgscanAnon => s.pgscan,
            E::PgstealAnon => s.pgsteal,
            E::Pgactivate => s.pgactivate,
            E::Pgdeactivate => s.pgdeactivate,
            E::OomKill => self.memcg.oom_kill,
            _ => return None,
        })
    }

    /// Pages on the inactive and the active anon list.
    pub fn lru_sizes(&self) -> [u64; 2] {
        self.lru.pages
    }

    /// `folio_add_lru_vma`: a new anon folio mapped at `va` of the current mm goes to the head
    /// of the inactive list.
    pub(crate) fn lru_add(&mut self, folio: Pfn, va: Vaddr) {
        if self.swap.is_none() {
            return;
        }
        let order = self.order_of_head(folio);
        let vpage = va.align_down(order).0 / PAGE_SIZE;
        self.lru_putback(LruEntry { pfn: folio.0, vpage, lru: 0, order: order.0 }, false);
    }

    pub(crate) fn lru_putback(&mut self, mut e: LruEntry, active: bool) {
        let p = &mut self.zone.mem_map[e.pfn as usize];
        let gen = (p.lru.wrapping_add(1)) & !LRU_ACTIVE;
        p.lru = gen | if active { LRU_ACTIVE } else { 0 };
        p.flags |= pg::LRU;
        e.lru = p.lru;
        e.order = p.order;
        let l = active as usize;
        self.lru.pages[l] += 1 << e.order;
        self.lru.lists[l].push_back(e);
    }

    /// The folio leaves the LRU (`folio_isolate_lru`, or freed: `__folio_clear_lru_flags`).
    pub(crate) fn lru_del(&mut self, folio: Pfn) {
        let p = &mut self.zone.mem_map[folio.idx()];
        if p.flags & pg::LRU == 0 {
            return;
        }
        p.flags &= !(pg::LRU | pg::REFERENCED);
        let l = (p.lru & LRU_ACTIVE != 0) as usize;
        self.lru.pages[l] -= 1 << p.order;
    }

    /// Take the tail folio of list `l`, skipping stale entries; a folio split since it was
    /// added comes back as its pieces (they kept its list, `lru_add_split_folio`).
    fn lru_isolate_tail(&mut self, l: usize) -> Option<LruEntry> {
        loop {
            let e = self.lru.lists[l].pop_front()?;
            let p = self.zone.mem_map[e.pfn as usize];
            if p.flags & (pg::LRU | pg::HEAD) != (pg::LRU | pg::HEAD) || p.flags & pg::BUDDY != 0 || p.lru != e.lru {
                continue;
            }
            if p.order < e.order {
                // Split since: queue the pieces at the tail, in address order.
                let mut j = (1u32 << e.order) - 1;
                loop {
                    let pfn = e.pfn + j;
                    let q = self.zone.mem_map[pfn as usize];
                    let head = pfn & !((1u32 << q.order) - 1);
                    if head == pfn && q.flags & pg::LRU != 0 && q.lru == e.lru {
                        self.lru.lists[l].push_front(LruEntry { pfn, vpage: e.vpage + j as u64, order: q.order, ..e });
                    }
                    if j == 0 {
                        break;
                    }
                    j -= 1;
                }
                continue;
            }
            self.lru_del(Pfn(e.pfn));
            return Some(e);
        }
    }

    /// Drop stale entries once they outnumber the pages on the lists.
    fn lru_compact(&mut self) {
        for l in [INACTIVE, ACTIVE] {
            if self.lru.lists[l].len() as u64 > 2 * self.lru.pages[l] + 4096 {
                let mm = &self.zone.mem_map;
                self.lru.lists[l].retain(|e| {
                    let p = mm[e.pfn as usize];
                    p.flags & pg::LRU != 0 && p.lru == e.lru
                });
            }
        }
    }

    /// `inactive_is_low(lruvec, LRU_INACTIVE_ANON)`.
    fn inactive_is_low(&self) -> bool {
        let [inactive, active] = self.lru.pages;
        let gb = (inactive + active) >> (30 - mm_types::PAGE_SHIFT);
        let ratio = if gb > 0 { (10 * gb).isqrt() } else { 1 };
        inactive * ratio < active
    }

    /// `can_reclaim_anon_pages`: swap with a free slot.
    fn can_reclaim_anon(&self) -> bool {
        self.swap.as_ref().is_some_and(|d| d.inuse < d.pages())
    }

    /// `do_try_to_free_pages`: priority from DEF_PRIORITY down until `nr_to_reclaim` pages
    /// are reclaimed. Returns the pages reclaimed.
    fn do_try_to_free_pages(&mut self, nr_to_reclaim: u64) -> u64 {
        let mut reclaimed = 0;
        for priority in (0..=DEF_PRIORITY).rev() {
            if !self.can_reclaim_anon() {
                break;
            }
            reclaimed += self.shrink_lruvec(nr_to_reclaim - reclaimed, priority);
            if reclaimed >= nr_to_reclaim {
                break;
            }
        }
        self.lru_compact();
        reclaimed
    }

    /// `shrink_lruvec` for the anon lists at `priority`.
    fn shrink_lruvec(&mut self, nr_to_reclaim: u64, priority: u32) -> u64 {
        let mut nr = [self.lru.pages[INACTIVE] >> priority, self.lru.pages[ACTIVE] >> priority];
        if priority == 0 {
            nr = self.lru.pages;
        }
        let mut reclaimed = 0;
        while nr[INACTIVE] > 0 || nr[ACTIVE] > 0 {
            for l in [INACTIVE, ACTIVE] {
                let n = nr[l].min(SWAP_CLUSTER_MAX);
                if n == 0 {
                    continue;
                }
                nr[l] -= n;
                if l == ACTIVE {
                    if self.inactive_is_low() {
                        self.shrink_active_list(n);
                    }
                } else {
                    reclaimed += self.shrink_inactive_list(n);
                }
            }
            if reclaimed >= nr_to_reclaim {
                break;
            }
        }
        if self.inactive_is_low() {
            self.shrink_active_list(SWAP_CLUSTER_MAX);
        }
        reclaimed
    }

    /// `shrink_active_list`: `nr` pages from the active tail go to the inactive head, their
    /// accessed bits cleared (anon folios are deactivated even when referenced); mlocked ones
    /// stay.
    fn shrink_active_list(&mut self, nr: u64) {
        let mut taken = 0;
        while taken < nr {
            let Some(e) = self.lru_isolate_tail(ACTIVE) else { break };
            taken += 1 << e.order;
            let refs = self.folio_referenced(&e);
            if refs.locked {
                self.lru_putback(e, true);
                continue;
            }
            self.reclaim_stats.pgdeactivate += 1 << e.order;
            self.lru_putback(e, false);
        }
    }

    /// `shrink_inactive_list`: isolate `nr` pages from the inactive tail and run
    /// `shrink_folio_list` on them.
    fn shrink_inactive_list(&mut self, nr: u64) -> u64 {
        let mut taken = 0;
        let mut reclaimed = 0;
        while taken < nr {
            let Some(e) = self.lru_isolate_tail(INACTIVE) else { break };
            taken += 1 << e.order;
            self.reclaim_stats.pgscan += 1 << e.order;
            reclaimed += self.shrink_folio(e);
        }
        reclaimed
    }

    /// `shrink_folio_list` for one isolated anon folio: `folio_check_references`, then swap
    /// it out (whole or split, `swap_io`). Returns the pages reclaimed.
    fn shrink_folio(&mut self, e: LruEntry) -> u64 {
        let refs = self.folio_referenced(&e);
        if refs.locked {
            self.lru_putback(e, true);
            return 0;
        }
        let referenced_folio = {
            let p = &mut self.zone.mem_map[e.pfn as usize];
            let r = p.flags & pg::REFERENCED != 0;
            p.flags &= !pg::REFERENCED;
            r
        };
        if refs.young_mms > 0 {
            if referenced_folio || refs.young_mms > 1 {
                self.reclaim_stats.pgactivate += 1 << e.order;
                self.lru_putback(e, true);
            } else {
                self.reclaim_stats.pgkept += 1 << e.order;
                self.lru_putback(e, false);
                self.zone.mem_map[e.pfn as usize].flags |= pg::REFERENCED;
            }
            return 0;
        }
        self.swap_out_folio(e, refs)
    }

    /// `folio_referenced`: clear the accessed bits of every mapping of the folio; how many mms
    /// had one set, and whether a mapping is VM_LOCKED.
    pub(crate) fn folio_referenced(&mut self, e: &LruEntry) -> Refs {
        let mut refs = Refs::default();
        let nr = 1u32 << e.order;
        let addr = e.vpage * PAGE_SIZE;
        for id in 0..self.parked.len() as u32 {
            let mm = if id == self.mm.id.0 { &mut self.mm } else { self.parked[id as usize].as_mut().expect("parked mm") };
            if mm.exited {
                continue;
            }
            let va = Vaddr(addr);
            let Some(t) = mm.pt.pmd_table_ro(va) else { continue };
            let mut young = false;
            let mut mapped = false;
            match mm.pt.pmd(t, va) {
                Pmd::Huge { pfn, young: y, dirty, write } if pfn.0 == e.pfn => {
                    mapped = true;
                    refs.mapped_pages += 512;
                    young = y;
                    mm.pt.set_pmd(t, va, Pmd::Huge { pfn, young: false, dirty, write });
                }
                Pmd::Table(idx) => {
                    let first = va.pte_index();
                    for i in 0..nr as usize {
                        if first + i >= 512 {
                            break;
                        }
                        let pte = mm.pt.pte(idx, first + i);
                        if pte & PTE_PRESENT != 0 && pte & PTE_ZERO == 0 && pte_pfn(pte).0 == e.pfn + i as u32 {
                            mapped = true;
                            refs.mapped_pages += 1;
                            if pte & PTE_YOUNG != 0 {
                                young = true;
                                mm.pt.set_pte(idx, first + i, pte & !PTE_YOUNG);
                            }
                        }
                    }
                }
                _ => {}
            }
            if mapped {
                let guarded = self.reclaim_guard.is_some_and(|(g, s, end)| g == id && addr < end && addr + ((nr as u64) << 12) > s);
                if guarded || mm.vmas.find(addr).is_some_and(|v| v.flags & vm::LOCKED != 0) {
                    refs.locked = true;
                }
                refs.mms.push(MmId(id));
                refs.young_mms += young as u32;
            }
        }
        refs
    }

    /// `try_to_free_mem_cgroup_pages`: reclaim at least `nr_pages` (and SWAP_CLUSTER_MAX) from
    /// the run's memcg. Returns the pages reclaimed.
    pub(crate) fn try_to_free_mem_cgroup_pages(&mut self, nr_pages: u64) -> u64 {
        self.do_try_to_free_pages(nr_pages.max(SWAP_CLUSTER_MAX))
    }

    /// `try_to_free_pages`: direct reclaim from the allocation slow path
    /// (`__alloc_pages_direct_reclaim`) for an allocation of `order`; reclaims
    /// SWAP_CLUSTER_MAX pages. Returns the pages reclaimed (0 without swap: the model's anon
    /// memory is all it could reclaim).
    pub fn try_to_free_pages(&mut self, order: Order) -> u64 {
        let _ = order;
        self.reclaim_stats.allocstall += 1;
        self.do_try_to_free_pages(SWAP_CLUSTER_MAX)
    }

    /// `wakeup_kswapd` after an allocation: below the low watermark kswapd runs
    /// `balance_pgdat` until the high watermark (`pgdat_balanced`) or until nothing more can be
    /// reclaimed; the model runs it synchronously, at the allocation that woke it.
    pub(crate) fn wakeup_kswapd(&mut self) {
        if self.swap.is_none() || !self.zone.below_low_watermark() || !self.can_reclaim_anon() {
            return;
        }
        self.reclaim_stats.kswapd_wakeups += 1;
        let before = self.reclaim_stats;
        self.balance_pgdat();
        let r = &mut self.reclaim_stats;
        r.kswapd_scan += r.pgscan - before.pgscan;
        r.kswapd_steal += r.pgsteal - before.pgsteal;
        r.kswapd_swpout += r.pswpout - before.pswpout;
    }

    /// `balance_pgdat`: reclaim in SWAP_CLUSTER_MAX steps until `pgdat_balanced` (free above
    /// the high watermark) or a step reclaims nothing.
    fn balance_pgdat(&mut self) {
        while !self.zone.above_high_watermark() {
            if self.do_try_to_free_pages(SWAP_CLUSTER_MAX) == 0 {
                break;
            }
        }
    }
}

/// What `folio_referenced` found.
#[derive(Default)]
pub(crate) struct Refs {
    /// Mappings (mms) with a young PTE or PMD (`referenced_ptes`).
    pub young_mms: u32,
    /// A mapping is VM_LOCKED.
    pub locked: bool,
    /// The mms that map the folio.
    pub mms: Vec<MmId>,
    /// Pages mapped in them (a PMD counts its 512).
    pub mapped_pages: u64,
}


/// Invariants of the LRU and of swap (`debug::check_invariants` calls this with swap on): the
/// pages on each list are the pages of the folios flagged on it, and every slot's count is the
/// number of swap entries naming it in all mms.
impl Kernel {
    pub(crate) fn check_lru_and_swap(&self) -> Result<(), String> {
        let Some(dev) = &self.swap else { return Ok(()) };
        let mut pages = [0u64; 2];
        for pfn in 0..self.zone.nr_pages() as usize {
            let p = self.zone.mem_map[pfn];
            if p.flags & pg::LRU != 0 && p.flags & pg::HEAD != 0 && p.flags & pg::BUDDY == 0 {
                pages[(p.lru & LRU_ACTIVE != 0) as usize] += 1 << p.order;
            }
        }
        if pages != self.lru.pages {
            return Err(format!("LRU: folios flagged hold {pages:?} pages (inactive, active), the lists count {:?}", self.lru.pages));
        }
        let mut refs = std::collections::HashMap::<u32, u32>::new();
        for id in 0..self.parked.len() as u32 {
            let mm = self.mm_ref(MmId(id));
            if mm.stats.swapents != mm.pt.swap.len() as u64 {
                return Err(format!("mm {id}: MM_SWAPENTS {} but {} swap entries", mm.stats.swapents, mm.pt.swap.len()));
            }
            for s in mm.pt.swap.values() {
                *refs.entry(*s).or_default() += 1;
            }
        }
        for (s, n) in &refs {
            if dev.count(*s) as u32 != *n {
                return Err(format!("swap slot {s}: count {} but {n} entries name it", dev.count(*s)));
            }
        }
        if dev.count_inuse() != refs.len() as u64 || dev.inuse != refs.len() as u64 {
            return Err(format!("swap: {} slots in use ({} counted) but {} named by entries", dev.inuse, dev.count_inuse(), refs.len()));
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "vmscan_tests.rs"]
mod tests;
