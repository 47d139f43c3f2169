//! Deterministic simulation testing of the model, in the spirit of TigerBeetle's VOPR and the
//! kernel's `*torture` tests.
//!
//! A seed draws everything: the settings (a swarm: each run enables a different subset of
//! sizes and modes), the machine (memory size, fragmentation preconditioning that makes large
//! allocations fail, a free page reporting device whose passes run between operations), and a sequence of operations (mmap with every placement, munmap, mprotect,
//! madvise, brk, prctl, settings changes, reads and writes in runs, fork, exit and switches
//! between the mms, khugepaged wake-ups). After every operation the
//! whole model is checked ([`mm::Kernel::check_invariants`]) together with properties that need
//! no knowledge of the kernel: an access that succeeded succeeds again without a fault, event
//! counters never go down, RSS equals what the census finds, a successful MADV_COLLAPSE
//! leaves every aligned 2 MiB block of its range PMD-mapped, and a child's write after fork
//! never changes what the parent maps. A failure reports the seed and the
//! step; `cargo run -p torture --release -- --seed N --verbose` replays it.

pub mod workload_gen;

use mm::gup::Populate;
use mm::madvise::{Madvise, ThpDisable};
use mm::mmap::{prot_to_vm, MapBacking, MmapPlacement};
use mm::shmem::{SbHuge, SHM_MNT};
use mm::{Access, BootParams, Kernel, MmId};
use sim::driver::{Machine, Outcome, Step};
use mm_types::prng::Prng;
use mm_types::{PAGE_SIZE, PMD_SIZE};
use thp_abi::settings::{AnonEnabled, ShmemEnabled, ShmemSizeEnabled, TopEnabled};
use thp_abi::{MthpStat, ThpSettings, VmEvent};

/// One run's configuration, printed before the run (everything derived from the seed).
#[derive(Clone, Debug)]
pub struct Swarm {
    pub seed: u64,
    pub mem_bytes: u64,
    pub fragmented: bool,
    pub settings: ThpSettings,
    pub steps: u32,
    /// A free page reporting device (`mm::page_reporting`), its passes run between operations.
    pub page_reporting: bool,
}

/// A failed run: where and why.
#[derive(Debug)]
pub struct Failure {
    pub seed: u64,
    pub step: u32,
    pub op: String,
    pub message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "torture seed {} failed at step {} ({}): {}\nreplay: cargo run -p torture --release -- --seed {} --verbose",
            self.seed, self.step, self.op, self.message, self.seed
        )
    }
}

pub fn random_settings(rng: &mut Prng) -> ThpSettings {
    let mut s = ThpSettings::default();
    s.enabled = *rng.pick(&[TopEnabled::Always, TopEnabled::Madvise, TopEnabled::Never]);
    for order in 2..=9usize {
        // Swarm: most sizes off in most runs, so that each run stresses a different mix.
        s.anon[order] = if rng.chance(1, 3) {
            *rng.pick(&[AnonEnabled::Always, AnonEnabled::Inherit, AnonEnabled::Madvise])
        } else {
            AnonEnabled::Never
        };
    }
    for order in 1..=9usize {
        s.shmem[order] = if rng.chance(1, 3) {
            *rng.pick(&[ShmemSizeEnabled::Always, ShmemSizeEnabled::Inherit, ShmemSizeEnabled::WithinSize, ShmemSizeEnabled::Advise])
        } else {
            ShmemSizeEnabled::Never
        };
    }
    s.shmem_enabled = *rng.pick(&[ShmemEnabled::Always, ShmemEnabled::WithinSize, ShmemEnabled::Advise, ShmemEnabled::Never, ShmemEnabled::Never, ShmemEnabled::Deny]);
    s.use_zero_page = rng.chance(3, 4);
    s.shrink_underused = rng.chance(1, 2);
    s.khugepaged.max_ptes_none = *rng.pick(&[0, 64, 256, 511]);
    s.khugepaged.pages_to_scan = *rng.pick(&[8, 512, 1024, 4096]);
    s
}

pub fn swarm(seed: u64, steps: u32) -> Swarm {
    let mut rng = Prng::new(seed);
    let mem_bytes = *rng.pick(&[24u64 << 20, 64 << 20, 256 << 20]);
    let fragmented = rng.chance(1, 5);
    let settings = random_settings(&mut rng);
    // Drawn last, so that the draws before it give every seed the machine they always gave.
    let page_reporting = rng.chance(1, 3);
    Swarm { seed, mem_bytes, fragmented, settings, steps, page_reporting }
}

struct Region {
    start: u64,
    len: u64,
}

/// Run one seed. `log` receives one line per operation when given.
pub fn run_seed(seed: u64, steps: u32, mut log: Option<&mut dyn FnMut(&str)>) -> Result<Swarm, Failure> {
    let cfg = swarm(seed, steps);
    let mut rng = Prng::new(seed ^ 0x5eed_5eed);
    let params = BootParams { mem_bytes: cfg.mem_bytes, min_free_kbytes: 256, mmap_base: 0x7dff_fffc_5000, brk_start: 0x5555_5557_9000, ..mm::BootParams::default() };
    let mut k = Kernel::boot(&params, &cfg.settings);
    if cfg.fragmented {
        k.fragment_memory();
    }
    if cfg.page_reporting {
        k.enable_page_reporting(mm_types::Order(9), None);
    }
    let mut cur = k.current_mm();
    let mut m = Machine::new(k);
    if let Some(l) = log.as_mut() {
        l(&format!("seed {seed}: mem {} MiB, fragmented {}, page reporting {}, settings: {}", cfg.mem_bytes >> 20, cfg.fragmented, cfg.page_reporting, cfg.settings.summary()));
    }
    let mut regions: Vec<Region> = Vec::new();
    let mut prev = m.counters.clone();
    for step in 0..steps {
        let (op, check) = random_op(&mut rng, &mut m, &mut cur, &mut regions);
        // A page reporting pass between operations now and then, as its delayed work runs.
        if cfg.page_reporting && step % 5 == 4 && m.page_reporting_requested() {
            m.kernel_mut().page_reporting_process();
        }
        m.switch_mm(cur);
        if let Some(l) = log.as_mut() {
            l(&format!("step {step}: {op}"));
        }
        let fail = |message: String| Failure { seed, step, op: op.clone(), message };
        if let Err(m) = check {
            return Err(fail(m));
        }
        m.check(None).map_err(fail)?;
        // The incremental check of `sim --check` over the whole address space must agree with
        // the full one: no state the full check accepts may fail it.
        m.check(Some(&[(0, mm_types::TASK_SIZE)])).map_err(|m| fail(format!("incremental check: {m}")))?;
        for e in VmEvent::ALL {
            if m.counters.vm(*e) < prev.vm(*e) {
                return Err(fail(format!("{} went down", e.name())));
            }
        }
        for order in 1..=9u8 {
            for s in MthpStat::ALL.iter().filter(|s| !s.is_gauge()) {
                let o = mm_types::Order(order);
                if m.counters.mthp(o, *s) < prev.mthp(o, *s) {
                    return Err(fail(format!("{}/{} went down", o.sysfs_dir(), s.name())));
                }
            }
        }
        let all: Vec<(u64, u64)> = m.vmas().map(|v| (v.start, v.end)).collect();
        let census = m.census(&all);
        let rss = (m.stats().anon_rss_pages + m.stats().shmem_rss_pages) * PAGE_SIZE;
        if census.rss_bytes != rss {
            return Err(fail(format!("census finds {} bytes, MM_ANONPAGES + MM_SHMEMPAGES say {rss}", census.rss_bytes)));
        }
        prev = m.counters.clone();
    }
    // Every process exits: exit_mmap zaps every VMA; no anonymous folio may survive them.
    let fail = |message: String| Failure { seed, step: steps, op: "exit_mmap".into(), message };
    for id in m.mm_ids().collect::<Vec<_>>() {
        if m.mm_exited(id) {
            continue;
        }
        m.step(id, Step::Exit);
        m.check(None).map_err(fail)?;
        if m.stats().anon_rss_pages != 0 || m.vmas().count() != 0 {
            return Err(fail(format!("after exit_mmap of mm {}: {} anon pages mapped, {} VMAs", id.0, m.stats().anon_rss_pages, m.vmas().count())));
        }
    }
    for order in 2..=9u8 {
        let n = m.counters.mthp(mm_types::Order(order), MthpStat::NrAnon);
        if n != 0 {
            return Err(fail(format!("after exit_mmap: hugepages order {order} nr_anon is {n}")));
        }
    }
    Ok(cfg)
}

fn size(rng: &mut Prng) -> u64 {
    match rng.below(4) {
        0 => rng.range_inclusive(1, 64) * PAGE_SIZE,
        1 => rng.range_inclusive(1, 6) * PMD_SIZE,
        2 => rng.range_inclusive(1, 4096) * PAGE_SIZE,
        _ => rng.range_inclusive(1, 4) * PMD_SIZE + rng.range_inclusive(1, 511) * PAGE_SIZE,
    }
}

/// Pick a page-aligned sub-range of a region.
fn subrange(rng: &mut Prng, r: &Region) -> (u64, u64) {
    let pages = r.len / PAGE_SIZE;
    let first = rng.below(pages);
    let n = match rng.below(3) {
        0 => 1,
        1 => rng.range_inclusive(1, (pages - first).min(32)),
        _ => rng.range_inclusive(1, pages - first),
    };
    (r.start + first * PAGE_SIZE, n * PAGE_SIZE)
}

/// fork, exit and switches between mms (kernel/fork.c, mm/memory.c: copy_page_range; at most
/// four live mms).
fn process_op(rng: &mut Prng, m: &mut Machine, cur: &mut MmId, regions: &[Region]) -> Option<(String, Result<(), String>)> {
    let live: Vec<MmId> = m.mm_ids().filter(|id| !m.mm_exited(*id)).collect();
    if live.len() < 4 && rng.chance(1, 30) {
        let parent = *cur;
        // A page the child will write: the parent's mapping of it must not change.
        let probe = (!regions.is_empty())
            .then(|| {
                let r = &regions[rng.below(regions.len() as u64) as usize];
                r.start + rng.below(r.len / PAGE_SIZE) * PAGE_SIZE
            })
            // Private anonymous memory only: a shared mapping's write is meant to be seen.
            .filter(|a| m.vma_lookup(*a).is_some_and(|v| v.file == 0 && v.flags & mm::vma::vm::SHARED == 0));
        let before = probe.and_then(|a| m.translation(a));
        let (child, work) = match m.step(parent, Step::Fork).forked() {
            Ok(c) => c,
            Err(e) => return Some((format!("fork = {}", e.name()), Ok(()))),
        };
        let mut op = format!("fork mm {} -> mm {}: {work:?}", parent.0, child.0);
        if let Some(a) = probe {
            let r = m.step(child, Step::Access { addr: a, write: true }).access();
            let in_child = m.translation(a);
            m.switch_mm(parent);
            let after = m.translation(a);
            op += &format!("; child writes {a:#x}: {r:?}");
            if before.map(|t| t.pfn) != after.map(|t| t.pfn) {
                return Some((op, Err(format!("the child's write changed the parent's mapping: {before:?} -> {after:?}"))));
            }
            if let (Some(b), Some(c), Access::Fault | Access::Hit) = (before, in_child, r) {
                if b.pfn == c.pfn {
                    return Some((op, Err(format!("after fork the child writes the parent's page {:#x}", b.pfn))));
                }
            }
        }
        if rng.chance(1, 2) {
            *cur = child;
            op += "; child runs";
        }
        return Some((op, Ok(())));
    }
    if live.len() > 1 && rng.chance(1, 25) {
        let to = live[rng.below(live.len() as u64) as usize];
        *cur = to;
        return Some((format!("switch to mm {}", to.0), Ok(())));
    }
    if live.len() > 1 && rng.chance(1, 60) {
        let me = *cur;
        m.step(me, Step::Exit);
        let left = m.stats().anon_rss_pages + m.stats().shmem_rss_pages;
        let next = *live.iter().find(|id| **id != me).expect("another live mm");
        *cur = next;
        let op = format!("exit mm {}, switch to mm {}", me.0, next.0);
        if left != 0 {
            return Some((op, Err(format!("{left} pages still mapped after exit_mmap"))));
        }
        return Some((op, Ok(())));
    }
    None
}

fn random_op(rng: &mut Prng, m: &mut Machine, cur: &mut MmId, regions: &mut Vec<Region>) -> (String, Result<(), String>) {
    if let Some(r) = process_op(rng, m, cur, regions) {
        return r;
    }
    let mm = *cur;
    if rng.chance(1, 20) {
        // Time passes: khugepaged wakes on the machine's clock (sim::daemons: the first
        // wake-up when an mm joins its empty list, then every scan_sleep_millisecs) and does
        // its work (mm/khugepaged.c: khugepaged_do_scan); the invariants are checked after, as
        // after every step.
        let ms = *rng.pick(&[1u64, 100, 10_000, 60_000]);
        let before = m.khugepaged_state().clone();
        m.step(mm, Step::Sleep { ns: ms * 1_000_000 });
        let after = m.khugepaged_state();
        let n = after.pages_collapsed - before.pages_collapsed;
        let op = format!("sleep {ms} ms: khugepaged collapsed {n}, {} full scans (has work: {})", after.full_scans - before.full_scans, m.khugepaged_has_work());
        if n > 0 && !m.mm_ids().any(|id| m.khugepaged_registered(id)) {
            return (op, Err(format!("khugepaged collapsed {n} with no mm on its list")));
        }
        return (op, Ok(()));
    }
    if rng.chance(1, 25) {
        // A shmem file, written or fallocated, then mapped shared (or a shared anon mapping).
        let len = size(rng);
        let placement = if rng.chance(1, 2) { MmapPlacement::Kernel } else { MmapPlacement::Aligned { align: PMD_SIZE, offset: rng.below(512) * PAGE_SIZE } };
        let backing = if rng.chance(1, 3) {
            MapBacking::SharedAnon
        } else {
            let sb = if rng.chance(1, 2) { SHM_MNT } else { m.step(mm, Step::ShmemMount(*rng.pick(&[SbHuge::Never, SbHuge::Always, SbHuge::WithinSize, SbHuge::Advise]))).mounted() };
            let ino = m.step(mm, Step::ShmemCreate { sb, linked: sb != SHM_MNT }).created();
            m.step(mm, Step::Ftruncate { ino, size: len });
            match rng.below(3) {
                0 => {
                    let n = rng.range_inclusive(1, len / PAGE_SIZE) * PAGE_SIZE;
                    let chunk = *rng.pick(&[4096, 65536, 1 << 20]);
                    let _ = workload::write_calls(0, n, chunk).try_for_each(|(offset, len)| m.step(mm, Step::ShmemWrite { ino, offset, len }).ret());
                }
                1 => {
                    m.step(mm, Step::Fallocate { ino, offset: 0, len: rng.range_inclusive(1, len / PAGE_SIZE) * PAGE_SIZE, keep_size: false });
                }
                _ => {}
            }
            // A third of the file mappings private: read-only file folios, anonymous copies.
            if rng.chance(1, 3) {
                MapBacking::ShmemPrivate { ino, pgoff: 0 }
            } else {
                MapBacking::Shmem { ino, pgoff: 0 }
            }
        };
        let op = format!("mmap shared {len:#x} {placement:?} {backing:?}");
        return match m.step(mm, Step::Mmap { len, prot: prot_to_vm(true, true, false), placement, backing }).mapped() {
            Ok(start) => {
                regions.push(Region { start, len });
                (op, Ok(()))
            }
            Err(e) => (format!("{op} = {}", e.name()), Ok(())),
        };
    }
    if regions.is_empty() || rng.chance(1, 10) {
        let len = size(rng);
        let placement = match rng.below(4) {
            0 => MmapPlacement::Aligned { align: 1 << rng.range_inclusive(16, 21), offset: 0 },
            1 => MmapPlacement::Aligned { align: PMD_SIZE, offset: rng.below(512) * PAGE_SIZE },
            _ => MmapPlacement::Kernel,
        };
        let op = format!("mmap {len:#x} {placement:?}");
        return match m.step(mm, Step::Mmap { len, prot: prot_to_vm(true, true, false), placement, backing: MapBacking::PrivateAnon }).mapped() {
            Ok(start) => {
                regions.push(Region { start, len });
                (op, Ok(()))
            }
            Err(e) => (format!("{op} = {}", e.name()), Ok(())),
        };
    }
    let r = &regions[rng.below(regions.len() as u64) as usize];
    let (s, len) = subrange(rng, r);
    match rng.below(24) {
        20 => {
            // Populate without faults (mm/gup.rs): afterwards every page GUP wrote is mapped
            // writable, so a write there does not fault.
            let how = *rng.pick(&[Populate::Read, Populate::Write, Populate::Mlock]);
            let r = m.step(mm, Step::Populate { start: s, end: s + len, how }).populated();
            let op = format!("populate {s:#x}+{len:#x} {how:?} = {r:?}");
            if how == Populate::Write && r.is_ok() {
                let mut addr = s;
                while addr < s + len {
                    // A page of a userfaultfd MODE_MISSING range waits for its reader's answer.
                    if !matches!(m.step(mm, Step::Access { addr, write: true }).access(), Access::Hit | Access::Userfault) {
                        return (op, Err(format!("MADV_POPULATE_WRITE succeeded but a write at {addr:#x} faults: {}", m.dump_addr(addr))));
                    }
                    addr += PAGE_SIZE;
                }
            }
            (op, Ok(()))
        }
        21 => {
            let r = match rng.below(4) {
                0 => format!("mlock {s:#x}+{len:#x} = {:?}", m.step(mm, Step::Mlock { start: s, len, flags: 0 }).populated()),
                1 => format!("mlock2 onfault {s:#x}+{len:#x} = {:?}", m.step(mm, Step::Mlock { start: s, len, flags: mm::gup::MLOCK_ONFAULT }).populated()),
                2 => format!("munlock {s:#x}+{len:#x} = {:?}", m.step(mm, Step::Munlock { start: s, len }).ret()),
                _ => {
                    let flags = *rng.pick(&[mm::gup::MCL_CURRENT, mm::gup::MCL_FUTURE, mm::gup::MCL_CURRENT | mm::gup::MCL_ONFAULT]);
                    format!("mlockall {flags:#x} = {:?}", m.step(mm, Step::Mlockall { flags }).populated())
                }
            };
            (r, Ok(()))
        }
        23 => {
            // userfaultfd (mm/userfaultfd.rs): a registration, its removal, or an answer; the
            // pages an answer filled are mapped afterwards, so an access there does not fault.
            use mm::userfaultfd::Mfill;
            use linux_abi::userfaultfd::{UFFDIO_REGISTER_MODE_MISSING as MISSING, UFFDIO_REGISTER_MODE_WP as WP};
            match rng.below(4) {
                0 => {
                    let mode = *rng.pick(&[MISSING, WP, MISSING | WP]);
                    (format!("UFFDIO_REGISTER {s:#x}+{len:#x} mode {mode} = {:?}", m.step(mm, Step::UffdRegister { start: s, len, mode }).ret()), Ok(()))
                }
                1 => (format!("UFFDIO_UNREGISTER {s:#x}+{len:#x} = {:?}", m.step(mm, Step::UffdUnregister { start: s, len }).ret()), Ok(())),
                k => {
                    let what = if k == 2 { Mfill::Copy } else { Mfill::Zeropage };
                    let Outcome::Filled(r) = m.step(mm, Step::Mfill { start: s, len, what }) else { unreachable!("an mfill step fills") };
                    let op = format!("{what:?} {s:#x}+{len:#x} = {r:?}");
                    for i in 0..r.map_or(0, |f| f.pages) {
                        let addr = s + i * PAGE_SIZE;
                        if m.step(mm, Step::Access { addr, write: false }).access() != Access::Hit {
                            return (op, Err(format!("a page the answer filled faults on a read: {}", m.dump_addr(addr))));
                        }
                    }
                    (op, Ok(()))
                }
            }
        }
        22 => {
            // munmap across several whole VMAs (unmap_vmas zaps them one by one).
            let first = m.vmas().find(|v| v.end > s).map(|v| v.start);
            let Some(first) = first else { return ("munmap span: nothing".into(), Ok(())) };
            let end = m.vmas().filter(|v| v.start >= first).take(3).last().map_or(first, |v| v.end);
            (format!("munmap span {first:#x}..{end:#x} = {:?}", m.step(mm, Step::Munmap { start: first, len: end - first }).ret()), Ok(()))
        }
        0..=8 => {
            let write = rng.chance(2, 3);
            let stride = *rng.pick(&[1u64, 1, 1, 2, 16]) * PAGE_SIZE;
            if rng.chance(1, 3) {
                // The batched walk of a touch in address order; afterwards every access of it
                // hits (its fault-by-fault equivalence is checked on every fixture of sim's tests).
                let n = len.div_ceil(stride);
                let (done, last) = m.step(mm, Step::AccessRun { first: s, n, stride, write }).run();
                let op = format!("{} run {s:#x}+{len:#x} stride {stride:#x}: {done} done, {last:?}", if write { "write" } else { "read" });
                if matches!(last, Access::Hit | Access::Fault) {
                    if done != n {
                        return (op, Err(format!("the run stopped after {done} of {n} accesses without an error")));
                    }
                    for i in 0..n {
                        let addr = s + i * stride;
                        if m.step(mm, Step::Access { addr, write }).access() != Access::Hit {
                            return (op, Err(format!("a batched access faulted again: {}", m.dump_addr(addr))));
                        }
                    }
                }
                return (op, Ok(()));
            }
            let mut addr = s;
            let mut faults = 0;
            while addr < s + len {
                match m.step(mm, Step::Access { addr, write }).access() {
                    Access::Hit => {}
                    Access::Fault => {
                        faults += 1;
                        // A resolved access does not fault again.
                        if m.step(mm, Step::Access { addr, write }).access() != Access::Hit {
                            let what = if write { "write" } else { "read" };
                            return (format!("{what} {addr:#x}"), Err(format!("a resolved access faulted again: {}", m.dump_addr(addr))));
                        }
                    }
                    // Handed to a userfaultfd: nothing mapped, so it is handed over again.
                    Access::Userfault => {
                        if m.step(mm, Step::Access { addr, write }).access() != Access::Userfault {
                            return (format!("access {addr:#x}"), Err(format!("a fault handed to the userfaultfd mapped something: {}", m.dump_addr(addr))));
                        }
                    }
                    Access::Segv | Access::Oom | Access::Sigbus => {}
                }
                addr += stride;
            }
            (format!("{} {s:#x}+{len:#x} stride {stride:#x}: {faults} faults", if write { "write" } else { "read" }), Ok(()))
        }
        9 | 10 => (format!("munmap {s:#x}+{len:#x} = {:?}", m.step(mm, Step::Munmap { start: s, len }).ret()), Ok(())),
        11 => {
            let prot = *rng.pick(&[(true, true), (true, false), (false, false)]);
            (format!("mprotect {s:#x}+{len:#x} {prot:?} = {:?}", m.step(mm, Step::Mprotect { start: s, len, prot: prot_to_vm(prot.0, prot.1, false) }).ret()), Ok(()))
        }
        12 | 13 => {
            let adv = *rng.pick(&[
                Madvise::Hugepage,
                Madvise::Nohugepage,
                Madvise::Dontneed,
                Madvise::Free,
                Madvise::PopulateWrite,
                Madvise::Dontfork,
                Madvise::Wipeonfork,
                Madvise::Keeponfork,
                Madvise::Remove,
            ]);
            // Half the holes are a shrink of the file below the range instead, and back.
            let ino = m.vmas().find(|v| v.contains(s)).and_then(|v| v.inode().map(|i| (i, v.linear_page_index(s))));
            if let (Madvise::Remove, Some((ino, index)), true) = (adv, ino, rng.chance(1, 2)) {
                let size = m.kernel_mut().shmem_inode(ino).i_size;
                let to = (index * PAGE_SIZE + rng.below(PAGE_SIZE)).min(size);
                let r = (m.step(mm, Step::Ftruncate { ino, size: to }).ret(), m.step(mm, Step::Ftruncate { ino, size }).ret());
                return (format!("ftruncate inode {ino} to {to:#x} and back to {size:#x} = {r:?}"), Ok(()));
            }
            (format!("madvise {s:#x}+{len:#x} {adv:?} = {:?}", m.step(mm, Step::Madvise { start: s, len, advice: adv }).ret()), Ok(()))
        }
        14 | 15 => {
            let r = m.step(mm, Step::Madvise { start: s, len, advice: Madvise::Collapse }).ret();
            let op = format!("madvise {s:#x}+{len:#x} Collapse = {r:?}");
            // Property: success means every aligned block of the range that lies inside one
            // VMA is PMD-mapped now (madvise_collapse works per VMA on the clipped range, so a
            // block that straddles two VMAs is never attempted, and that is not a failure).
            if r.is_ok() {
                let mut b = s.div_ceil(PMD_SIZE) * PMD_SIZE;
                while b + PMD_SIZE <= s + len {
                    let inside_one = m.vmas().any(|v| v.start <= b && b + PMD_SIZE <= v.end);
                    if !inside_one {
                        b += PMD_SIZE;
                        continue;
                    }
                    let c = m.census(&[(b, b + PMD_SIZE)]);
                    let pmd = c.census.sizes.get(&thp_abi::FolioSize::from("2048kB")).map_or(0, |e| e.pmd_mapped);
                    if pmd != 1 && c.census.huge_zero_pmds != 1 {
                        return (op, Err(format!("MADV_COLLAPSE succeeded but {b:#x} is not PMD-mapped")));
                    }
                    b += PMD_SIZE;
                }
            }
            (op, Ok(()))
        }
        16 if rng.chance(1, 2) => {
            // mremap of a whole VMA: shrink, grow in place, or move (aligned or not).
            let Some(v) = m.vmas().find(|v| v.start <= s && s < v.end && v.file == 0).copied() else {
                return ("mremap: no anon VMA".into(), Ok(()));
            };
            let old_len = v.end - v.start;
            let new_len = (rng.range_inclusive(1, 2 * old_len / PAGE_SIZE)) * PAGE_SIZE;
            let dest = match rng.below(3) {
                0 => Some(v.start),
                1 => m.get_unmapped_area(new_len, MmapPlacement::Aligned { align: PMD_SIZE, offset: 0 }).ok(),
                _ => m.get_unmapped_area(new_len, MmapPlacement::Kernel).ok(),
            };
            let Some(dest) = dest else { return ("mremap: no room".into(), Ok(())) };
            let r = m.step(mm, Step::Mremap { start: v.start, old_len, new_len, dest }).ret();
            if r.is_ok() && dest != v.start {
                regions.push(Region { start: dest, len: new_len });
            }
            (format!("mremap {:#x}+{old_len:#x} -> {dest:#x}+{new_len:#x} = {r:?}", v.start), Ok(()))
        }
        16 => {
            let form = *rng.pick(&[ThpDisable::Completely, ThpDisable::ExceptAdvised, ThpDisable::Clear, ThpDisable::Clear]);
            m.step(mm, Step::Prctl(form));
            (format!("prctl {form:?}"), Ok(()))
        }
        17 => {
            let s = random_settings(rng);
            let summary = s.summary();
            m.step(mm, Step::Settings(Box::new(s)));
            (format!("settings {summary}"), Ok(()))
        }
        _ => {
            let delta = rng.range_inclusive(1, 1024) * PAGE_SIZE;
            let new = if rng.chance(1, 3) { m.brk_value().saturating_sub(delta) } else { m.brk_value() + delta };
            let got = m.step(mm, Step::Brk { to: new }).brk();
            if got > m.start_brk() && !regions.iter().any(|r| r.start == m.start_brk()) {
                regions.push(Region { start: m.start_brk(), len: 4 << 20 });
            }
            (format!("brk {new:#x} = {got:#x}"), Ok(()))
        }
    }
}
