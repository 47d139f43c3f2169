//! Deterministic simulation testing of the model, in the spirit of TigerBeetle's VOPR and the
//! kernel's `*torture` tests.
//!
//! A seed draws everything: the settings (a swarm: each run enables a different subset of
//! sizes and modes), the machine (memory size, fragmentation preconditioning that makes large
//! allocations fail), and a sequence of operations (mmap with every placement, munmap, mprotect,
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
use mm::{Access, BootParams, Kernel};
use mm_types::prng::Prng;
use mm_types::{PAGE_SIZE, PMD_SIZE};
use uapi::settings::{AnonEnabled, ShmemEnabled, ShmemSizeEnabled, TopEnabled};
use uapi::{MthpStat, ThpSettings, VmEvent};

/// One run's configuration, printed before the run (everything derived from the seed).
#[derive(Clone, Debug)]
pub struct Swarm {
    pub seed: u64,
    pub mem_bytes: u64,
    pub fragmented: bool,
    pub settings: ThpSettings,
    pub steps: u32,
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
    Swarm { seed, mem_bytes, fragmented, settings: random_settings(&mut rng), steps }
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
    if let Some(l) = log.as_mut() {
        l(&format!("seed {seed}: mem {} MiB, fragmented {}, settings: {}", cfg.mem_bytes >> 20, cfg.fragmented, cfg.settings.summary()));
    }
    let mut regions: Vec<Region> = Vec::new();
    let mut prev = k.counters.clone();
    for step in 0..steps {
        let (op, check) = random_op(&mut rng, &mut k, &mut regions);
        if let Some(l) = log.as_mut() {
            l(&format!("step {step}: {op}"));
        }
        let fail = |message: String| Failure { seed, step, op: op.clone(), message };
        if let Err(m) = check {
            return Err(fail(m));
        }
        k.check_invariants().map_err(fail)?;
        // The incremental check of `sim --check` over the whole address space must agree with
        // the full one: no state the full check accepts may fail it.
        k.check_invariants_in(&[(0, mm_types::TASK_SIZE)]).map_err(|m| fail(format!("incremental check: {m}")))?;
        for e in VmEvent::ALL {
            if k.counters.vm(*e) < prev.vm(*e) {
                return Err(fail(format!("{} went down", e.name())));
            }
        }
        for order in 1..=9u8 {
            for s in MthpStat::ALL.iter().filter(|s| !s.is_gauge()) {
                let o = mm_types::Order(order);
                if k.counters.mthp(o, *s) < prev.mthp(o, *s) {
                    return Err(fail(format!("{}/{} went down", o.sysfs_dir(), s.name())));
                }
            }
        }
        let all: Vec<(u64, u64)> = k.vmas().map(|v| (v.start, v.end)).collect();
        let census = k.census(&all);
        let rss = (k.stats().anon_rss_pages + k.stats().shmem_rss_pages) * PAGE_SIZE;
        if census.rss_bytes != rss {
            return Err(fail(format!("census finds {} bytes, MM_ANONPAGES + MM_SHMEMPAGES say {rss}", census.rss_bytes)));
        }
        prev = k.counters.clone();
    }
    // Every process exits: exit_mmap zaps every VMA; no anonymous folio may survive them.
    let fail = |message: String| Failure { seed, step: steps, op: "exit_mmap".into(), message };
    for id in k.mm_ids().collect::<Vec<_>>() {
        if k.mm_exited(id) {
            continue;
        }
        k.switch_mm(id);
        k.exit_mm();
        k.check_invariants().map_err(fail)?;
        if k.stats().anon_rss_pages != 0 || k.vmas().count() != 0 {
            return Err(fail(format!("after exit_mmap of mm {}: {} anon pages mapped, {} VMAs", id.0, k.stats().anon_rss_pages, k.vmas().count())));
        }
    }
    for order in 2..=9u8 {
        let n = k.counters.mthp(mm_types::Order(order), MthpStat::NrAnon);
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
fn process_op(rng: &mut Prng, k: &mut Kernel, regions: &[Region]) -> Option<(String, Result<(), String>)> {
    let live: Vec<mm::MmId> = k.mm_ids().filter(|id| !k.mm_exited(*id)).collect();
    if live.len() < 4 && rng.chance(1, 30) {
        let parent = k.current_mm();
        // A page the child will write: the parent's mapping of it must not change.
        let probe = (!regions.is_empty())
            .then(|| {
                let r = &regions[rng.below(regions.len() as u64) as usize];
                r.start + rng.below(r.len / PAGE_SIZE) * PAGE_SIZE
            })
            // Private anonymous memory only: a shared mapping's write is meant to be seen.
            .filter(|a| k.vma_lookup(*a).is_some_and(|v| v.file == 0 && v.flags & mm::vma::vm::SHARED == 0));
        let before = probe.and_then(|a| k.translation(a));
        let (child, work) = match k.fork() {
            Ok(c) => c,
            Err(e) => return Some((format!("fork = {}", e.name()), Ok(()))),
        };
        let mut op = format!("fork mm {} -> mm {}: {work:?}", parent.0, child.0);
        if let Some(a) = probe {
            k.switch_mm(child);
            let r = k.access(a, true);
            let in_child = k.translation(a);
            k.switch_mm(parent);
            let after = k.translation(a);
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
            k.switch_mm(child);
            op += "; child runs";
        }
        return Some((op, Ok(())));
    }
    if live.len() > 1 && rng.chance(1, 25) {
        let to = live[rng.below(live.len() as u64) as usize];
        k.switch_mm(to);
        return Some((format!("switch to mm {}", to.0), Ok(())));
    }
    if live.len() > 1 && rng.chance(1, 60) {
        let me = k.current_mm();
        k.exit_mm();
        let left = k.stats().anon_rss_pages + k.stats().shmem_rss_pages;
        let next = *live.iter().find(|id| **id != me).expect("another live mm");
        k.switch_mm(next);
        let op = format!("exit mm {}, switch to mm {}", me.0, next.0);
        if left != 0 {
            return Some((op, Err(format!("{left} pages still mapped after exit_mmap"))));
        }
        return Some((op, Ok(())));
    }
    None
}

fn random_op(rng: &mut Prng, k: &mut Kernel, regions: &mut Vec<Region>) -> (String, Result<(), String>) {
    if let Some(r) = process_op(rng, k, regions) {
        return r;
    }
    if rng.chance(1, 20) {
        // A khugepaged wake-up between operations (mm/khugepaged.c: khugepaged_do_scan); the
        // invariants are checked after it as after every step.
        let before = k.khugepaged_state().pages_collapsed;
        let n = k.khugepaged_do_scan();
        let after = k.khugepaged_state().pages_collapsed;
        let op = format!("khugepaged wake-up: {n} collapsed (has work: {})", k.khugepaged_has_work());
        if after != before + n || (n > 0 && !k.mm_ids().any(|id| k.khugepaged_registered(id))) {
            return (op, Err(format!("pages_collapsed went {before} -> {after} for {n} collapses")));
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
            let sb = if rng.chance(1, 2) { SHM_MNT } else { k.shmem_mount(*rng.pick(&[SbHuge::Never, SbHuge::Always, SbHuge::WithinSize, SbHuge::Advise])) };
            let ino = k.shmem_create(sb, sb != SHM_MNT);
            let _ = k.shmem_ftruncate(ino, len);
            match rng.below(3) {
                0 => {
                    let n = rng.range_inclusive(1, len / PAGE_SIZE) * PAGE_SIZE;
                    let chunk = *rng.pick(&[4096, 65536, 1 << 20]);
                    let _ = workload::write_calls(0, n, chunk).try_for_each(|(o, l)| k.shmem_write(ino, o, l));
                }
                1 => {
                    let _ = k.shmem_fallocate(ino, 0, rng.range_inclusive(1, len / PAGE_SIZE) * PAGE_SIZE);
                }
                _ => {}
            }
            MapBacking::Shmem { ino, pgoff: 0 }
        };
        let op = format!("mmap shared {len:#x} {placement:?} {backing:?}");
        return match k.do_mmap_backed(len, prot_to_vm(true, true, false), placement, backing) {
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
        return match k.do_mmap(len, prot_to_vm(true, true, false), placement) {
            Ok(start) => {
                regions.push(Region { start, len });
                (op, Ok(()))
            }
            Err(e) => (format!("{op} = {}", e.name()), Ok(())),
        };
    }
    let r = &regions[rng.below(regions.len() as u64) as usize];
    let (s, len) = subrange(rng, r);
    match rng.below(23) {
        20 => {
            // Populate without faults (mm/gup.rs): afterwards every page GUP wrote is mapped
            // writable, so a write there does not fault.
            let how = *rng.pick(&[Populate::Read, Populate::Write, Populate::Mlock]);
            let r = k.populate_range(s, s + len, how);
            let op = format!("populate {s:#x}+{len:#x} {how:?} = {r:?}");
            if how == Populate::Write && r.is_ok() {
                let mut addr = s;
                while addr < s + len {
                    if k.access(addr, true) != Access::Hit {
                        return (op, Err(format!("MADV_POPULATE_WRITE succeeded but a write at {addr:#x} faults: {}", k.dump_addr(addr))));
                    }
                    addr += PAGE_SIZE;
                }
            }
            (op, Ok(()))
        }
        21 => {
            let r = match rng.below(4) {
                0 => format!("mlock {s:#x}+{len:#x} = {:?}", k.do_mlock(s, len, 0)),
                1 => format!("mlock2 onfault {s:#x}+{len:#x} = {:?}", k.do_mlock(s, len, mm::gup::MLOCK_ONFAULT)),
                2 => format!("munlock {s:#x}+{len:#x} = {:?}", k.do_munlock(s, len)),
                _ => {
                    let flags = *rng.pick(&[mm::gup::MCL_CURRENT, mm::gup::MCL_FUTURE, mm::gup::MCL_CURRENT | mm::gup::MCL_ONFAULT]);
                    format!("mlockall {flags:#x} = {:?}", k.do_mlockall(flags))
                }
            };
            (r, Ok(()))
        }
        22 => {
            // munmap across several whole VMAs (unmap_vmas zaps them one by one).
            let first = k.vmas().find(|v| v.end > s).map(|v| v.start);
            let Some(first) = first else { return ("munmap span: nothing".into(), Ok(())) };
            let end = k.vmas().filter(|v| v.start >= first).take(3).last().map_or(first, |v| v.end);
            (format!("munmap span {first:#x}..{end:#x} = {:?}", k.do_munmap(first, end - first)), Ok(()))
        }
        0..=8 => {
            let write = rng.chance(2, 3);
            let stride = *rng.pick(&[1u64, 1, 1, 2, 16]) * PAGE_SIZE;
            if rng.chance(1, 3) {
                // The batched walk of a touch in address order; afterwards every access of it
                // hits (its fault-by-fault equivalence is checked on every fixture of sim's tests).
                let n = len.div_ceil(stride);
                let (done, last) = k.access_run(s, n, stride, write);
                let op = format!("{} run {s:#x}+{len:#x} stride {stride:#x}: {done} done, {last:?}", if write { "write" } else { "read" });
                if matches!(last, Access::Hit | Access::Fault) {
                    if done != n {
                        return (op, Err(format!("the run stopped after {done} of {n} accesses without an error")));
                    }
                    for i in 0..n {
                        let addr = s + i * stride;
                        if k.access(addr, write) != Access::Hit {
                            return (op, Err(format!("a batched access faulted again: {}", k.dump_addr(addr))));
                        }
                    }
                }
                return (op, Ok(()));
            }
            let mut addr = s;
            let mut faults = 0;
            while addr < s + len {
                match k.access(addr, write) {
                    Access::Hit => {}
                    Access::Fault => {
                        faults += 1;
                        // A resolved access does not fault again.
                        if k.access(addr, write) != Access::Hit {
                            let what = if write { "write" } else { "read" };
                            return (format!("{what} {addr:#x}"), Err(format!("a resolved access faulted again: {}", k.dump_addr(addr))));
                        }
                    }
                    Access::Segv | Access::Oom | Access::Sigbus => {}
                }
                addr += stride;
            }
            (format!("{} {s:#x}+{len:#x} stride {stride:#x}: {faults} faults", if write { "write" } else { "read" }), Ok(()))
        }
        9 | 10 => (format!("munmap {s:#x}+{len:#x} = {:?}", k.do_munmap(s, len)), Ok(())),
        11 => {
            let prot = *rng.pick(&[(true, true), (true, false), (false, false)]);
            (format!("mprotect {s:#x}+{len:#x} {prot:?} = {:?}", k.do_mprotect(s, len, prot_to_vm(prot.0, prot.1, false))), Ok(()))
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
            ]);
            (format!("madvise {s:#x}+{len:#x} {adv:?} = {:?}", k.do_madvise(s, len, adv)), Ok(()))
        }
        14 | 15 => {
            let r = k.do_madvise(s, len, Madvise::Collapse);
            let op = format!("madvise {s:#x}+{len:#x} Collapse = {r:?}");
            // Property: success means every aligned block of the range that lies inside one
            // VMA is PMD-mapped now (madvise_collapse works per VMA on the clipped range, so a
            // block that straddles two VMAs is never attempted, and that is not a failure).
            if r.is_ok() {
                let mut b = s.div_ceil(PMD_SIZE) * PMD_SIZE;
                while b + PMD_SIZE <= s + len {
                    let inside_one = k.vmas().any(|v| v.start <= b && b + PMD_SIZE <= v.end);
                    if !inside_one {
                        b += PMD_SIZE;
                        continue;
                    }
                    let c = k.census(&[(b, b + PMD_SIZE)]);
                    let pmd = c.census.sizes.get("2048kB").map_or(0, |e| e.pmd_mapped);
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
            let Some(v) = k.vmas().find(|v| v.start <= s && s < v.end && v.file == 0).copied() else {
                return ("mremap: no anon VMA".into(), Ok(()));
            };
            let old_len = v.end - v.start;
            let new_len = (rng.range_inclusive(1, 2 * old_len / PAGE_SIZE)) * PAGE_SIZE;
            let dest = match rng.below(3) {
                0 => Some(v.start),
                1 => k.get_unmapped_area(new_len, MmapPlacement::Aligned { align: PMD_SIZE, offset: 0 }).ok(),
                _ => k.get_unmapped_area(new_len, MmapPlacement::Kernel).ok(),
            };
            let Some(dest) = dest else { return ("mremap: no room".into(), Ok(())) };
            let r = k.do_mremap(v.start, old_len, new_len, dest);
            if r.is_ok() && dest != v.start {
                regions.push(Region { start: dest, len: new_len });
            }
            (format!("mremap {:#x}+{old_len:#x} -> {dest:#x}+{new_len:#x} = {r:?}", v.start), Ok(()))
        }
        16 => {
            let form = *rng.pick(&[ThpDisable::Completely, ThpDisable::ExceptAdvised, ThpDisable::Clear, ThpDisable::Clear]);
            k.prctl_set_thp_disable(form);
            (format!("prctl {form:?}"), Ok(()))
        }
        17 => {
            let s = random_settings(rng);
            k.set_settings(&s);
            (format!("settings {}", s.summary()), Ok(()))
        }
        _ => {
            let delta = rng.range_inclusive(1, 1024) * PAGE_SIZE;
            let new = if rng.chance(1, 3) { k.brk_value().saturating_sub(delta) } else { k.brk_value() + delta };
            let got = k.sys_brk(new);
            if got > k.start_brk() && !regions.iter().any(|r| r.start == k.start_brk()) {
                regions.push(Region { start: k.start_brk(), len: 4 << 20 });
            }
            (format!("brk {new:#x} = {got:#x}"), Ok(()))
        }
    }
}
