//! `thplab bench chase`: a dependent pointer chase on this machine, timed per access, with
//! THP knobs set (through crates/live's [`SettingsGuard`], restored on every exit path) so that
//! the chased memory is backed by 4 KiB pages, one mTHP size (16 KiB, 64 KiB, ...), or PMD THPs.
//!
//! The chase visits the cycle of `workload::AccessPlan` for `access R chase elem=64 seed=S`, the
//! very order the model's `access` statement visits, so model and machine chase the same lines.
//! The memory is mapped 2 MiB-aligned, written page by page in address order first (faults in
//! address order, as `touch R write`), then linked, then chased: a warm-up of one lap (at most
//! the timed count), then `accesses` timed loads in five slices, each timed with the thread's CPU
//! clock; the fastest slice is reported (this machine is shared and busy). The backing is read from
//! /proc/self/smaps_rollup (AnonHugePages) and the per-size `anon_fault_alloc` deltas.
//!
//! A crate of its own (a tool, not the harness): it sets knobs through crates/live's guard and
//! runs its own chase instead of a workload through the executor.
//!
//! - [`command`]: `thplab bench chase`'s entry point, and the model's prediction of the same
//!   chase ([`model_chase_ns`]).

pub mod command;

pub use command::model_chase_ns;

use thp_abi::ThpSettings;
use workload::{AccessPlan, AccessStream, Pattern, Range, RegionId};

use live::guard::SettingsGuard;
use live::sysfs::Paths;
use live::{LiveError, Result};

/// What backs the chased memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChasePage {
    /// 4 KiB pages only.
    Base,
    /// One anonymous mTHP size, in KiB (16, 32, 64, ... 1024).
    Mthp(u32),
    /// PMD THP (2 MiB).
    Pmd,
}

impl ChasePage {
    /// `4K`, `16K`, `64K`, ..., `PMD` (or `2M`).
    pub fn parse(s: &str) -> Option<ChasePage> {
        let u = s.to_ascii_uppercase();
        match u.as_str() {
            "4K" => Some(ChasePage::Base),
            "PMD" | "2M" => Some(ChasePage::Pmd),
            _ => {
                let k: u32 = u.strip_suffix('K')?.parse().ok()?;
                (k.is_power_of_two() && (8..=1024).contains(&k)).then_some(ChasePage::Mthp(k))
            }
        }
    }
    pub fn name(&self) -> String {
        match self {
            ChasePage::Base => "4K".into(),
            ChasePage::Mthp(k) => format!("{k}K"),
            ChasePage::Pmd => "PMD".into(),
        }
    }
    /// The knob assignments that give this backing on the anonymous fault path: the top-level
    /// `enabled`, and every `hugepages-<N>kB/enabled` the tree has.
    pub fn assignments(&self, sizes_kb: &[u32]) -> Vec<String> {
        let mut v = vec![format!("enabled={}", if *self == ChasePage::Pmd { "always" } else { "never" })];
        for &kb in sizes_kb {
            let on = match self {
                ChasePage::Base => false,
                ChasePage::Mthp(k) => *k == kb,
                ChasePage::Pmd => kb == 2048,
            };
            v.push(format!("hugepages-{kb}kB/enabled={}", if on { "always" } else { "never" }));
        }
        v
    }
}

/// One measured point.
#[derive(Clone, Debug, PartialEq)]
pub struct ChasePoint {
    pub page: String,
    pub bytes: u64,
    pub accesses: u64,
    pub ns_per_access: f64,
    /// AnonHugePages of the chase's buffer while the chase ran (PMD-mapped bytes).
    pub anon_huge_bytes: u64,
    /// anon_fault_alloc deltas per mTHP size during the setup, `hugepages-<N>kB` → count.
    pub mthp_faults: Vec<(String, u64)>,
    /// The buffer's 4 KiB pages, and the distinct 32 KiB-aligned blocks of guest-physical
    /// memory their frames lie in (/proc/self/pagemap): the host page-table lines a nested
    /// walk of the chase reads (8 host PTEs a line). `pages / 8` when the frames are
    /// consecutive, `pages` when each lies alone.
    pub pages: u64,
    pub host_pte_lines: u64,
}

impl ChasePoint {
    /// How scattered the frames are: 0 when consecutive (pages / 8 lines), 1 when each is
    /// alone in its line (the model's `--order0-scatter`).
    pub fn scatter(&self) -> f64 {
        let least = self.pages.div_ceil(8) as f64;
        if self.pages as f64 <= least {
            return 0.0;
        }
        ((self.host_pte_lines as f64 - least) / (self.pages as f64 - least)).clamp(0.0, 1.0)
    }
}

/// Distinct `pfn >> 3` of the frames mapping `[base, base + len)` (present pages only), and
/// the pages present, from /proc/self/pagemap (PFNs need CAP_SYS_ADMIN; 0 lines without).
fn frame_lines(base: usize, len: usize) -> (u64, u64) {
    use std::os::unix::fs::FileExt;
    let Ok(f) = std::fs::File::open("/proc/self/pagemap") else { return (0, 0) };
    let pages = len / 4096;
    let mut lines = std::collections::HashSet::new();
    let mut present = 0u64;
    let mut buf = vec![0u8; 8 * 4096];
    let mut i = 0;
    while i < pages {
        let n = (pages - i).min(4096);
        let bytes = &mut buf[..8 * n];
        if f.read_exact_at(bytes, ((base / 4096 + i) * 8) as u64).is_err() {
            break;
        }
        for e in bytes.chunks_exact(8) {
            let v = u64::from_le_bytes(e.try_into().expect("8 bytes"));
            if v >> 63 == 1 {
                present += 1;
                let pfn = v & ((1 << 55) - 1);
                if pfn != 0 {
                    lines.insert(pfn >> 3);
                }
            }
        }
        i += n;
    }
    (present, lines.len() as u64)
}

/// The `hugepages-<N>kB` sizes of the live tree that have an anonymous `enabled` knob, in KiB
/// (6.18 lists hugepages-8kB for shmem only on some configurations).
pub fn tree_sizes(paths: &Paths) -> Vec<u32> {
    let mut v: Vec<u32> = std::fs::read_dir(&paths.sysfs)
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().join("enabled").exists())
                .filter_map(|e| e.file_name().to_str()?.strip_prefix("hugepages-")?.strip_suffix("kB")?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn anon_fault_allocs(paths: &Paths, sizes: &[u32]) -> Vec<(String, u64)> {
    sizes
        .iter()
        .map(|kb| {
            let p = paths.sysfs.join(format!("hugepages-{kb}kB/stats/anon_fault_alloc"));
            let n = std::fs::read_to_string(&p).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
            (format!("hugepages-{kb}kB"), n)
        })
        .collect()
}

/// AnonHugePages of the VMA holding `addr` (the chase's buffer; the process's other memory, its
/// heap among it, keeps THPs an earlier PMD point gave it), in bytes; 0 where smaps is unreadable.
fn anon_huge_bytes(addr: u64) -> u64 {
    probe::procfs::read_smaps(std::process::id() as i32).ok().and_then(|v| v.into_iter().find(|m| m.start <= addr && addr < m.end)).map_or(0, |m| m.anon_huge_kb * 1024)
}

/// The stream the chase follows (also what the model is given).
pub fn chase_stream(bytes: u64, accesses: u64, seed: u64) -> AccessStream {
    AccessStream {
        range: Range { region: RegionId(0), offset: 0, len: bytes, every: None },
        pattern: Pattern::Chase,
        count: Some(accesses),
        writes_pct: 0,
        seed,
        elem: 64,
    }
}

/// Runs one chase of `bytes` with `page` backing; needs root and the THP sysfs tree.
pub fn run_chase(bytes: u64, page: ChasePage, accesses: u64, seed: u64) -> Result<ChasePoint> {
    let paths = Paths::from_env();
    paths.check_available()?;
    let sizes = tree_sizes(&paths);
    if let ChasePage::Mthp(k) = page {
        if !sizes.contains(&k) {
            return Err(LiveError::NotAvailable(format!("this kernel has no hugepages-{k}kB (sizes: {sizes:?} kB)")));
        }
    }
    let mut settings: ThpSettings = live::guard::current_settings(&paths)?;
    for a in page.assignments(&sizes) {
        settings.apply_assignment(&a).map_err(|e| LiveError::Knob { path: a.clone(), message: e.to_string() })?;
    }
    let guard = SettingsGuard::apply(&settings)?;
    if let Some(m) = guard.recovered() {
        eprintln!("{m}");
    }
    let before = anon_fault_allocs(&paths, &sizes);
    let result = chase_in_mapping(bytes, accesses, seed);
    let after = anon_fault_allocs(&paths, &sizes);
    guard.restore()?;
    let (ns, huge, (pages, host_pte_lines)) = result?;
    let mthp_faults = before.into_iter().zip(after).map(|((k, b), (_, a))| (k, a.saturating_sub(b))).filter(|(_, d)| *d > 0).collect();
    Ok(ChasePoint { page: page.name(), bytes, accesses, ns_per_access: ns, anon_huge_bytes: huge, mthp_faults, pages, host_pte_lines })
}

const ALIGN: usize = 2 << 20;

/// CLOCK_THREAD_CPUTIME_ID in ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Maps, links, chases and unmaps; returns ns per access, AnonHugePages and the frames'
/// (pages, host PTE lines).
fn chase_in_mapping(bytes: u64, accesses: u64, seed: u64) -> Result<(f64, u64, (u64, u64))> {
    let len = bytes as usize;
    // SAFETY: an anonymous private mapping; every access below stays inside [base, base+len),
    // and it is unmapped before returning.
    let raw = unsafe {
        libc::mmap(std::ptr::null_mut(), len + ALIGN, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    };
    if raw == libc::MAP_FAILED {
        return Err(LiveError::Child(format!("mmap of {bytes} bytes for the chase failed: {}", std::io::Error::last_os_error())));
    }
    let base = (raw as usize).next_multiple_of(ALIGN);
    // SAFETY: as above; writes of usize at 64-byte aligned offsets inside the mapping.
    let out = unsafe {
        let p = base as *mut u8;
        for off in (0..len).step_by(4096) {
            std::ptr::write_volatile(p.add(off) as *mut usize, 0);
        }
        let lap = bytes / 64;
        let mut plan = AccessPlan::new(&chase_stream(bytes, lap, seed), bytes);
        let first = plan.next().map(|x| x.0 as usize).unwrap_or(0);
        let mut prev = first;
        for (off, _) in plan {
            *(p.add(prev) as *mut usize) = base + off as usize;
            prev = off as usize;
        }
        *(p.add(prev) as *mut usize) = base + first;
        let mut cur = base + first;
        for _ in 0..accesses.min(lap) {
            cur = std::ptr::read_volatile(cur as *const usize);
        }
        let huge = anon_huge_bytes(base as u64);
        let frames = frame_lines(base, len);
        // Five slices, each timed by this thread's CPU clock (time while descheduled on a busy
        // machine is not counted); the fastest slice is the figure.
        let slice = (accesses / 5).max(1);
        let mut best = f64::INFINITY;
        let mut done = 0;
        while done < accesses {
            let n = slice.min(accesses - done);
            let t0 = thread_cpu_ns();
            for _ in 0..n {
                cur = std::ptr::read_volatile(cur as *const usize);
            }
            let dt = thread_cpu_ns() - t0;
            best = best.min(dt as f64 / n as f64);
            done += n;
        }
        std::hint::black_box(cur);
        (best, huge, frames)
    };
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(raw, len + ALIGN) };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_names_and_knobs() {
        assert_eq!(ChasePage::parse("64k"), Some(ChasePage::Mthp(64)));
        assert_eq!(ChasePage::parse("pmd"), Some(ChasePage::Pmd));
        assert_eq!(ChasePage::parse("48K"), None);
        assert_eq!(
            ChasePage::Mthp(16).assignments(&[16, 64, 2048]),
            ["enabled=never", "hugepages-16kB/enabled=always", "hugepages-64kB/enabled=never", "hugepages-2048kB/enabled=never"]
        );
        assert_eq!(ChasePage::Pmd.assignments(&[2048])[1], "hugepages-2048kB/enabled=always");
    }
}
