//! The simulated Linux 6.18 memory manager, one machine with many mms: buddy allocator, VMAs, page tables,
//! the anonymous fault path with every mTHP size, zero pages, PMD splitting, the deferred split
//! queue and MADV_COLLAPSE.
//!
//! Module map (each names the kernel file it mirrors; `model` mirrors none):
//! - [`page_alloc`]: `mm/page_alloc.c`, the buddy allocator and `mem_map`.
//! - [`compaction`]: `mm/compaction.c`: compact_zone's two scanners, deferral, kcompactd.
//! - [`damon`]: `mm/damon/core.c`, `mm/damon/vaddr.c`: DAMON's regions and sampling, a
//!   DAMOS_COLLAPSE-shaped scheme as a hint source (model-only).
//! - [`page_reporting`]: `mm/page_reporting.c`, free page reporting, and the host behind it.
//! - [`pgtable`]: page tables, `mm/pgtable-generic.c`.
//! - [`rmap`]: `mm/rmap.c` `rmap_walk`, by a walk of every mm's page tables (shrinkers, compaction).
//! - [`vma`]: `mm/vma.c`, VMA tree, split, merge, `unmapped_area_topdown`.
//! - [`mmap`]: `mm/mmap.c`, `mm/vma.c`: `do_mmap`, `__get_unmapped_area`, `do_vmi_munmap`, brk.
//! - [`memory`]: `mm/memory.c`: `handle_mm_fault` and the PTE-level fault path, zap.
//! - [`huge_memory`]: `mm/huge_memory.c`, `include/linux/huge_mm.h`: which orders a VMA allows,
//!   PMD faults, the huge zero folio, PMD split, deferred split.
//! - [`hugetlb`]: `mm/hugetlb.c`, `fs/hugetlbfs/inode.c`: per-size pools, reservations,
//!   hugetlb faults, COW and fork.
//! - [`madvise`]: `mm/madvise.c`, `mm/mprotect.c`, `kernel/sys.c` (prctl).
//! - [`gup`]: `mm/gup.c`, `mm/mlock.c`: populating and pinning without a user fault, mlock.
//! - [`shmem`]: `mm/shmem.c`: shmem and tmpfs inodes, mounts, the order rules, write, fallocate.
//! - [`khugepaged`]: `mm/khugepaged.c`: `madvise_collapse`, `hpage_collapse_scan_pmd`,
//!   `collapse_huge_page`, `enum scan_result`, the mm_slot list; `khugepaged::mthp_collapse`:
//!   7.2's mTHP collapse (the scan's bitmap, `collapse_huge_page` below PMD order), walked by
//!   the policy (`crates/policy`).
//! - [`fork`]: `kernel/fork.c`, `mm/mmap.c`: many mms, `dup_mmap`, `exit_mm`, `switch_mm`.
//! - [`userfaultfd`]: `fs/userfaultfd.c`, `mm/userfaultfd.c`: registration, UFFDIO_COPY/ZEROPAGE.
//! - [`contig_hint`]: model-only, the contiguous page hint's chunks in the anonymous fault path
//!   (a proposal; `crates/policy/src/contig_hint.rs`).
//! - [`tlbflush`]: the translation query and the TLB flushes (`mm/mmu_gather.c`); [`arch`]:
//!   arm64 contpte folding (`arch/arm64/mm/contpte.c`).
//! - [`vmscan`]: `mm/vmscan.c`, `mm/swap.c`: the anon LRU, reclaim, kswapd, direct reclaim.
//! - [`memcontrol`]: `mm/memcontrol.c`: the run's memcg, charge, limit reclaim, OOM.
//! - [`memory_tiers`]: `mm/memory-tiers.c`: nodes (capacity, latency, bandwidth), tiers by
//!   abstract distance, the demotion order (model-only beyond one node, as the next three).
//! - [`mempolicy`]: `mm/mempolicy.c`: memory policies and the node a folio is allocated on.
//! - [`migrate`]: `mm/migrate.c`: `migrate_pages` of large folios whole or split, its events.
//! - [`numa_balancing`]: `kernel/sched/fair.c`: NUMA balancing's tiering mode, promotion's hot
//!   threshold and rate limit; demotion in reclaim is `vmscan::demote`.
//! - [`swapfile`]: `mm/swapfile.c`: the swap device and its cluster allocator.
//! - [`swap_io`]: `mm/vmscan.c`, `mm/rmap.c`, `mm/page_io.c`, `mm/memory.c`: swap-out of a
//!   folio whole or split, swap entries, `do_swap_page`.
//! - [`debug`]: `CONFIG_DEBUG_VM`: `check_invariants`, and the census of mapped folios.
//! - [`model`]: model-only instrumentation, no kernel file: per-mm stats, fallback reasons,
//!   `--explain`, the peak.
//!
//! Architecture invariant: nothing here does I/O, reads a clock or draws randomness. Fallbacks
//! and failed allocations are outcomes, counted, never Rust errors; only syscall-level errors
//! (an errno) come back to the caller.

pub mod arch;
pub mod compaction;
pub mod damon;
pub mod contig_hint;
pub mod debug;
pub mod fork;
pub mod gup;
pub mod huge_memory;
pub mod hugetlb;
pub mod khugepaged;
pub mod madvise;
pub mod memcontrol;
pub mod memory;
pub mod memory_tiers;
pub mod mempolicy;
pub mod migrate;
pub mod mmap;
pub mod model;
pub mod numa_balancing;
pub mod page_alloc;
pub mod page_reporting;
pub mod pgtable;
pub(crate) mod rmap;
pub mod shmem;
pub mod swap_io;
pub mod swapfile;
pub mod tlbflush;
pub mod userfaultfd;
pub mod vma;
pub mod vmscan;


use mm_types::{Order, Orders, Pfn, PAGE_SIZE};
use thp_abi::settings::{AnonEnabled, TopEnabled};
use thp_abi::{Counters, ThpSettings};

use page_alloc::Zone;
use pgtable::PageTables;
use vma::{Vma, VmaTree};
use model::stats::ModelStats;

/// An errno a syscall returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Errno {
    EINVAL,
    ENOMEM,
    EBUSY,
    EAGAIN,
    EEXIST,
    EFAULT,
    EACCES,
    ENOENT,
    /// The model does not implement this (for example shrinking a file with cached folios).
    ENOSYS,
}

impl Errno {
    pub fn name(self) -> &'static str {
        match self {
            Errno::EINVAL => "EINVAL",
            Errno::ENOMEM => "ENOMEM",
            Errno::EBUSY => "EBUSY",
            Errno::EAGAIN => "EAGAIN",
            Errno::EEXIST => "EEXIST",
            Errno::EFAULT => "EFAULT",
            Errno::EACCES => "EACCES",
            Errno::ENOENT => "ENOENT",
            Errno::ENOSYS => "ENOSYS",
        }
    }
}

/// What happened to one memory access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Mapped with the needed permission: no fault.
    Hit,
    /// A minor fault was taken and resolved.
    Fault,
    /// No VMA, or the VMA forbids the access: the process would get SIGSEGV.
    Segv,
    /// Not even an order-0 page could be allocated: VM_FAULT_OOM.
    Oom,
    /// A shared file mapping beyond the end of its file: the process would get SIGBUS.
    Sigbus,
    /// The fault went to the process's userfaultfd (a VMA registered with
    /// UFFDIO_REGISTER_MODE_MISSING, `handle_userfault`): nothing is mapped until its reader
    /// fills the page (UFFDIO_COPY, UFFDIO_ZEROPAGE); the kernel counts the fault once its
    /// retry completes, so it is in minflt.
    Userfault,
}

/// The smallest simulated memory the model boots (a few MAX_PAGE_ORDER blocks above the
/// watermarks).
pub const MIN_MEM_BYTES: u64 = 16 << 20;
/// The largest simulated memory the model boots: 4 TiB, 2^30 frames. PFNs are `u32` (so the
/// format would reach 16 TiB), but `mem_map` is one zeroed allocation of 16 bytes per frame that
/// the host backs only where frames are used, and the host refuses to reserve more address
/// space than it has memory (overcommit heuristic): 16 GiB of `mem_map` fits a 24 GiB host.
pub const MAX_MEM_BYTES: u64 = 4 << 40;

/// Where the simulated machine's memory is (for an out-of-memory report), in 4 KiB frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryUse {
    /// Frames the zone manages (`--mem`).
    pub managed: u64,
    /// Free frames: the buddy lists and the per-cpu list.
    pub free: u64,
    /// The min watermark: an allocation may not take the free frames below it.
    pub min_watermark: u64,
    /// Page-table pages (PTE and PMD tables, deposited tables included).
    pub pgtables: u64,
    /// Frames held by the rest of the system (fragmentation preconditioning).
    pub held: u64,
    /// Everything else in use: folios (anonymous, shmem page cache, the huge zero folio).
    pub folios: u64,
}

/// Boot parameters of the simulated machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootParams {
    pub mem_bytes: u64,
    /// `/proc/sys/vm/min_free_kbytes` (67584 on this machine, raised by khugepaged).
    pub min_free_kbytes: u64,
    pub mmap_base: u64,
    pub brk_start: u64,
    /// `huge=` of the machine's /dev/shm (never unless mounted otherwise).
    pub dev_shm_huge: shmem::SbHuge,
    /// The memcg limit and the swap device the machine's mms run with (`--memory-max`,
    /// `--swap`; [`memcontrol`], [`swapfile`]). Default none: no limit, no swap.
    pub pressure: thp_abi::Pressure,
}

impl Default for BootParams {
    /// This machine kind: 24 GiB, min_free_kbytes 67584, the default mmap_base and heap start,
    /// /dev/shm with huge=never.
    fn default() -> Self {
        BootParams {
            mem_bytes: 24 << 30,
            min_free_kbytes: 67584,
            mmap_base: 0x7dff_fffc_5000,
            brk_start: 0x5555_5557_9000,
            dev_shm_huge: shmem::SbHuge::Never,
            pressure: thp_abi::Pressure::default(),
        }
    }
}

/// `mm->flags` bits the model uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MmFlags {
    /// MMF_DISABLE_THP_COMPLETELY
    pub disable_thp_completely: bool,
    /// MMF_DISABLE_THP_EXCEPT_ADVISED
    pub disable_thp_except_advised: bool,
    /// MMF_HUGE_ZERO_FOLIO: this mm holds a reference on the huge zero folio.
    pub huge_zero_folio: bool,
    /// MMF_VM_HUGEPAGE: the mm is on khugepaged's list.
    pub vm_hugepage: bool,
    /// `mm->def_flags`: VM_LOCKED (and VM_LOCKONFAULT) after `mlockall(MCL_FUTURE)`.
    pub def_flags: u32,
    /// The mm's userfaultfd asked for UFFD_FEATURE_EVENT_FORK (UFFDIO_API): a fork's child
    /// keeps the registrations (`dup_userfaultfd`); without it they are cleared.
    pub uffd_event_fork: bool,
}

/// The sysfs masks in the form the fault path reads them (`huge_anon_orders_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThpMasks {
    pub always: Orders,
    pub madvise: Orders,
    pub inherit: Orders,
    pub global_always: bool,
    pub global_enabled: bool,
}

impl ThpMasks {
    pub fn from(s: &ThpSettings) -> ThpMasks {
        ThpMasks {
            always: s.anon_orders(AnonEnabled::Always),
            madvise: s.anon_orders(AnonEnabled::Madvise),
            inherit: s.anon_orders(AnonEnabled::Inherit),
            global_always: s.enabled == TopEnabled::Always,
            global_enabled: s.enabled != TopEnabled::Never,
        }
    }
    /// Orders that some VMA could get under these settings.
    pub fn possible(&self) -> Orders {
        let inherit = if self.global_enabled { self.inherit } else { Orders::NONE };
        self.always.or(self.madvise).or(inherit)
    }
}

/// An mm's id (`mm->mm_id`): its index among the machine's mms, in creation order. The first
/// mm, booted with the machine, is `MmId(0)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MmId(pub u32);

/// One address space (`struct mm_struct`, include/linux/mm_types.h): VMAs, page tables, the
/// program break, `mm->flags` and the per-mm counters. Everything else is the machine's.
pub struct Mm {
    pub(crate) id: MmId,
    pub(crate) vmas: VmaTree,
    pub(crate) pt: PageTables,
    pub(crate) flags: MmFlags,
    pub(crate) mmap_base: u64,
    pub(crate) start_brk: u64,
    pub(crate) brk: u64,
    /// One-entry VMA cache for the access path; cleared on any VMA change.
    pub(crate) vma_cache: Option<Vma>,
    /// `exit_mmap` ran: no VMAs, no page tables; the counters stay for the result.
    pub(crate) exited: bool,
    /// MM_ANONPAGES and the rest of the per-mm and per-task counts.
    pub(crate) stats: ModelStats,
}

impl Mm {
    fn new(id: MmId, mmap_base: u64, start_brk: u64) -> Mm {
        Mm {
            id,
            vmas: VmaTree::default(),
            pt: PageTables::default(),
            flags: MmFlags::default(),
            mmap_base,
            start_brk,
            brk: start_brk,
            vma_cache: None,
            exited: false,
            stats: ModelStats::default(),
        }
    }
}

/// The simulated machine: zones, settings, the huge zero folio, the deferred split queue, shmem
/// inodes and mounts, the vm events, and its mms. System calls and faults act on the current
/// mm (`current->mm`), chosen with [`Kernel::switch_mm`]; the machine boots with one, `MmId(0)`.
pub struct Kernel {
    pub(crate) settings: ThpSettings,
    pub(crate) masks: ThpMasks,
    pub(crate) zone: Zone,
    /// The current mm.
    pub(crate) mm: Mm,
    /// Every other mm, by id (the current one's slot is `None`).
    pub(crate) parked: Vec<Option<Mm>>,
    /// `mmap_base` and the heap start a new mm gets (`mm_alloc`), from the boot parameters.
    pub(crate) boot_layout: (u64, u64),
    /// The huge zero folio, once allocated (`huge_zero_folio`).
    pub(crate) huge_zero: Option<mm_types::Pfn>,
    /// Deferred split queue (`ds_queue->split_queue`), in queueing order; entries whose head
    /// lost its DEFERRED flag are stale and skipped.
    pub(crate) deferred: Vec<mm_types::Pfn>,
    pub(crate) deferred_stale: usize,
    pub(crate) next_anon_vma: u32,
    pub(crate) shmem: shmem::Shmem,
    /// Large anon folios mapped by more than one mm since a fork: their `_mm_ids` (rmap.h,
    /// CONFIG_MM_ID). A large folio absent here is mapped by one mm only.
    pub(crate) folio_mm_ids: std::collections::HashMap<mm_types::Pfn, fork::FolioMmIds>,
    /// Frames held by the rest of the system ([`Kernel::fragment_memory`]).
    pub(crate) held_pages: u64,
    /// The zone's compaction state and the compaction vm events.
    pub(crate) compaction: compaction::ZoneCompaction,
    /// khugepaged's scan (`khugepaged_scan`, its counters).
    pub(crate) khugepaged: khugepaged::KhugepagedScan,
    /// Flushed ranges for a TLB observer (`tlbflush`); `None` when nobody listens.
    pub(crate) tlb_flushes: Option<Vec<(u64, u64)>>,
    pub counters: Counters,
    /// Folios freed, by order (`free_folio`): work a driver prices, no kernel counter.
    pub(crate) folios_freed: [u64; mm_types::PMD_ORDER as usize + 1],
    /// The run's memcg (`memcontrol`): usage always, a limit with `--memory-max`.
    pub(crate) memcg: memcontrol::MemCgroup,
    /// The swap device (`--swap`), if any.
    pub(crate) swap: Option<swapfile::SwapDevice>,
    /// The anon LRU (`vmscan`), kept when there is swap.
    pub(crate) lru: vmscan::Lru,
    pub(crate) reclaim_stats: vmscan::ReclaimStats,
    /// The last `alloc_folio` that failed failed on the memcg charge.
    pub(crate) last_charge_failed: bool,
    /// A range reclaim leaves alone while a fault or collapse works on it: (mm, start, end).
    pub(crate) reclaim_guard: Option<(u32, u64, u64)>,
    /// hugetlb's pools, files, mappings and pages (`hugetlb`).
    pub(crate) hugetlb: hugetlb::Hugetlb,
    /// The THP policy's decision points (`crates/policy`): 6.18's unless `--kernel` or
    /// `--policy` say otherwise, or [`Kernel::set_policy`] installs one.
    pub(crate) policy: Box<dyn policy::ThpPolicy>,
    /// The contiguous page hint's chunks (`contig_hint`), when the policy has it.
    pub(crate) contig: Option<Box<policy::contig_hint::ContigChunks>>,
}

impl Kernel {
    pub fn boot(params: &BootParams, settings: &ThpSettings) -> Kernel {
        assert!(
            (MIN_MEM_BYTES..=MAX_MEM_BYTES).contains(&params.mem_bytes),
            "simulated memory of {} bytes is outside {MIN_MEM_BYTES}..={MAX_MEM_BYTES}",
            params.mem_bytes
        );
        let nr_pages = (params.mem_bytes / PAGE_SIZE) as u32;
        let start_brk = params.brk_start.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        Kernel {
            settings: settings.clone(),
            masks: ThpMasks::from(settings),
            zone: Zone::new(nr_pages, params.min_free_kbytes),
            mm: Mm::new(MmId(0), params.mmap_base, start_brk),
            parked: vec![None],
            boot_layout: (params.mmap_base, start_brk),
            huge_zero: None,
            deferred: Vec::new(),
            deferred_stale: 0,
            next_anon_vma: 1,
            folio_mm_ids: Default::default(),
            shmem: shmem::Shmem { sb_huge: vec![shmem::SbHuge::Never, params.dev_shm_huge], ..Default::default() },
            held_pages: 0,
            compaction: Default::default(),
            khugepaged: Default::default(),
            tlb_flushes: None,
            counters: Counters::default(),
            folios_freed: [0; mm_types::PMD_ORDER as usize + 1],
            memcg: memcontrol::MemCgroup { max: params.pressure.memory_max.map(|b| b / PAGE_SIZE), ..Default::default() },
            swap: params.pressure.swap.as_ref().map(swapfile::SwapDevice::new),
            lru: Default::default(),
            reclaim_stats: Default::default(),
            last_charge_failed: false,
            reclaim_guard: None,
            hugetlb: hugetlb::Hugetlb::default(),
            policy: policy::for_settings(settings.kernel, settings.policy),
            contig: contig_hint::state_for(&*policy::for_settings(settings.kernel, settings.policy)),
        }
    }

    pub fn settings(&self) -> &ThpSettings {
        &self.settings
    }

    /// Change settings at run time, as a write to sysfs would.
    pub fn set_settings(&mut self, settings: &ThpSettings) {
        if (settings.kernel, settings.policy) != (self.settings.kernel, self.settings.policy) {
            self.policy = policy::for_settings(settings.kernel, settings.policy);
            self.contig = contig_hint::state_for(&*self.policy);
        }
        self.settings = settings.clone();
        self.masks = ThpMasks::from(settings);
    }

    pub fn zone(&self) -> &Zone {
        &self.zone
    }

    /// Where the machine's frames are (`/proc/meminfo` in brief).
    pub fn memory_use(&self) -> MemoryUse {
        let managed = self.zone.managed_pages();
        let free = self.zone.nr_free_pages() + self.zone.pcp_pages().count() as u64;
        let pgtables = self.mm.stats.pgtable_pages;
        let held = self.held_pages;
        MemoryUse {
            managed,
            free,
            min_watermark: self.zone.wmark.min,
            pgtables,
            held,
            folios: managed.saturating_sub(free + pgtables + held),
        }
    }

    pub fn vmas(&self) -> impl Iterator<Item = &Vma> {
        self.mm.vmas.iter()
    }

    /// The VMAs that intersect `[start, end)`, in address order (`for_each_vma_range`), in
    /// O(log n + found).
    pub fn vmas_intersecting(&self, start: u64, end: u64) -> Vec<Vma> {
        self.mm.vmas.intersecting(start, end)
    }

    /// The VMA containing `addr` (`vma_lookup`).
    pub fn vma_lookup(&self, addr: u64) -> Option<Vma> {
        self.mm.vmas.find(addr)
    }

    pub fn mm_flags(&self) -> MmFlags {
        self.mm.flags
    }

    pub fn brk_value(&self) -> u64 {
        self.mm.brk
    }

    pub fn start_brk(&self) -> u64 {
        self.mm.start_brk
    }

    /// `mm->brk`: the current program break.
    pub fn brk(&self) -> u64 {
        self.mm.brk
    }

    /// Model memory in host bytes: mem_map, page tables, VMAs (for the benchmark).
    pub fn host_bytes(&self) -> usize {
        self.zone.nr_pages() as usize * std::mem::size_of::<page_alloc::Page>()
            + self.mm.pt.host_bytes()
            + self.mm.vmas.len() * 64
            + self.deferred.capacity() * 4
    }

    /// Model memory the host has backed: as [`Kernel::host_bytes`], but only the `mem_map`
    /// records ever written (the zeroed allocation stays unbacked for frames never handed out).
    pub fn host_bytes_resident(&self) -> usize {
        self.zone.mem_map_frames_written() as usize * std::mem::size_of::<page_alloc::Page>()
            + self.zone.host_bytes_beside_mem_map()
            + self.mm.pt.host_bytes()
            + self.mm.vmas.len() * 64
            + self.deferred.capacity() * 4
    }

    pub(crate) fn order_of_head(&self, head: mm_types::Pfn) -> Order {
        Order(self.zone.mem_map[head.idx()].order)
    }
}

impl Kernel {
    /// Fragmentation preconditioning: take every free page, give back every other one, and
    /// keep the rest as memory held by the rest of the system. Afterwards only order-0 blocks
    /// are free, so every large allocation fails. Returns the number of pages held.
    pub fn fragment_memory(&mut self) -> u64 {
        let mut pages = Vec::new();
        while let Some(p) = self.zone.alloc_pages(Order::BASE) {
            pages.push(p);
        }
        for p in pages.iter().step_by(2) {
            self.zone.free_pages(*p, Order::BASE);
        }
        let mut held = 0;
        for p in pages.iter().skip(1).step_by(2) {
            self.prep_folio(*p, Order::BASE, page_alloc::pg::RESERVED);
            held += 1;
        }
        self.held_pages += held;
        held
    }

    /// The workload's `fragment unmovable=PCT`: every free page (the per-cpu list's too,
    /// whatever the watermark) is taken, and of them in PFN order every other one given back
    /// and the rest held by the rest of the system, so that the free memory halves and no free
    /// block is bigger than one page. In `unmovable_pct` percent of the pageblocks (spread
    /// evenly) the held pages are unmovable (slab, page tables elsewhere) and the pageblock
    /// becomes MIGRATE_UNMOVABLE; in the others they are movable (page cache, other processes'
    /// anon), which compaction migrates. Returns the number of pages held.
    pub fn fragment_free_memory(&mut self, unmovable_pct: u32) -> u64 {
        let pct = unmovable_pct.min(100) as u64;
        let pages = self.zone.take_all_free();
        let mut held = 0;
        for (i, &p) in pages.iter().enumerate() {
            if i % 2 == 0 {
                self.zone.free_to_buddy(p);
                continue;
            }
            let block = (p >> page_alloc::PAGEBLOCK_ORDER) as u64;
            let unmovable = (block + 1) * pct / 100 > block * pct / 100;
            let flags = page_alloc::pg::RESERVED | if unmovable { 0 } else { page_alloc::pg::HELD_MOVABLE };
            self.prep_folio(Pfn(p), Order::BASE, flags);
            if unmovable {
                self.zone.set_pageblock_migratetype(p, page_alloc::Migratetype::Unmovable);
            }
            held += 1;
        }
        self.held_pages += held;
        held
    }

    /// `drop_slab` (`echo 2 > /proc/sys/vm/drop_caches`): every shrinker runs until a pass
    /// frees little; the model's only shrinker with objects is the THP deferred split queue's
    /// (`do_shrink_slab` at priority 0: twice the queue's length scanned, 128 a batch). Returns
    /// the folios split.
    pub fn drop_slab(&mut self) -> u64 {
        let mut total = 0;
        let mut shift = 0;
        loop {
            let freed = self.do_shrink_slab_deferred_split();
            total += freed;
            if (freed >> shift) <= 1 {
                return total;
            }
            shift += 1;
        }
    }

    /// `do_shrink_slab` of the deferred split shrinker at priority 0 (`DEFAULT_SEEKS` 2).
    fn do_shrink_slab_deferred_split(&mut self) -> u64 {
        const SHRINK_BATCH: u64 = 128;
        let freeable = self.deferred_split_count();
        if freeable == 0 {
            return 0;
        }
        let mut total_scan = (freeable * 4 / 2).min(2 * freeable);
        let mut freed = 0;
        while total_scan >= SHRINK_BATCH || total_scan >= freeable {
            let nr = SHRINK_BATCH.min(total_scan);
            let r = self.deferred_split_scan(nr);
            // SHRINK_STOP: nothing split and the queue is empty.
            if r.split == 0 && self.deferred_split_count() == 0 {
                break;
            }
            freed += r.split;
            total_scan -= nr;
        }
        freed
    }

    /// Give the machine a free page reporting device of `order` (`page_reporting_order`) and a
    /// host behind it. With `free` (a live snapshot, `thp_abi::FreeLists`), the free
    /// memory is first laid out in blocks of its orders, the rest held by the rest of the system
    /// (`Zone::seed_free_areas`), and its per-CPU list gets `free.pcp` free, backed pages;
    /// without, the machine is as it boots, all free in MAX_PAGE_ORDER blocks. Then the blocks
    /// of `order` or above are reported and unbacked: `free.reported[o]` of each order, those
    /// nearest the tail of their list (where reporting puts them back; allocations take from the
    /// head), or without counts every one, as after a long idle; the rest are backed. Call
    /// before the first step.
    pub fn enable_page_reporting(&mut self, order: Order, free: Option<&thp_abi::FreeLists>) {
        if let Some(f) = free {
            self.held_pages += self.zone.seed_free_areas(&f.free);
            self.held_pages -= self.zone.seed_pcp(f.pcp);
        }
        let mut host = page_reporting::Host::new(self.zone.nr_pages(), order);
        for (pfn, o) in self.zone.mark_free_reported(order, free.and_then(|f| f.reported.as_deref())) {
            host.unback(pfn, 1 << o);
        }
        self.zone.host = Some(Box::new(host));
    }

    /// Run one reporting pass (`page_reporting_process`); the daemon calls it one
    /// PAGE_REPORTING_DELAY after a request.
    pub fn page_reporting_process(&mut self) -> page_reporting::ReportPass {
        self.zone.page_reporting_process()
    }

    /// A reporting pass was asked for since the last one began.
    pub fn page_reporting_requested(&self) -> bool {
        self.zone.page_reporting_requested()
    }

    /// What reporting and the host did, if the machine has a reporting device.
    pub fn host_stats(&self) -> Option<page_reporting::HostStats> {
        self.zone.host.as_ref().map(|h| h.stats)
    }

    /// Folios freed so far, by order (index 0: 4 KiB): for a driver that prices the work.
    pub fn folios_freed(&self) -> &[u64; mm_types::PMD_ORDER as usize + 1] {
        &self.folios_freed
    }
}
