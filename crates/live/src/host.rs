//! The host behind a virtual machine, as the guest sees it: whether a balloon device reports
//! free pages (mm/page_reporting.c registers it and sets `page_reporting_order`, which stays
//! -1 without one), and the free lists that decide which frames the next allocations take: a
//! program's pages are movable allocations (GFP_HIGHUSER_MOVABLE), and `__rmqueue_smallest`
//! (mm/page_alloc.c) searches only the free lists of the request's migratetype, smallest order
//! first, so the Movable lists of /proc/pagetypeinfo decide, not every list of /proc/buddyinfo.
//! The model's `mm::page_reporting` and the profile's `[host]` use them.

use std::io;

const PARAMS: &str = "/sys/module/page_reporting/parameters";

/// `page_reporting_order` when a reporting device is registered (a value of 0..=10), else None.
pub fn reporting_order() -> Option<u8> {
    let text = std::fs::read_to_string(format!("{PARAMS}/page_reporting_order")).ok()?;
    text.trim().parse::<u8>().ok().filter(|&o| o <= mm_types::MAX_PAGE_ORDER)
}

/// KiB reported to the host since boot, on kernels that count it (this machine kind's build has
/// a `reported_kib` parameter; upstream 6.18 has none).
pub fn reported_kib() -> Option<u64> {
    std::fs::read_to_string(format!("{PARAMS}/reported_kib")).ok()?.trim().parse().ok()
}

/// Wait until page reporting has nothing left to report: `reported_kib` has not grown for
/// longer than two passes (PAGE_REPORTING_DELAY is 2 s), for at most 60 s; `progress` hears the
/// seconds waited. Then every free block of the reporting order and above is reported, the
/// state of a machine that idled, which is where the model's machine starts. None (and no wait)
/// where the kernel does not count reported memory.
pub fn wait_until_settled(progress: &mut impl FnMut(u64)) -> Option<std::time::Duration> {
    use std::time::{Duration, Instant};
    let start = Instant::now();
    let mut last = reported_kib()?;
    let mut since = Instant::now();
    while since.elapsed() < Duration::from_millis(4500) && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(250));
        progress(start.elapsed().as_secs());
        let now = reported_kib().unwrap_or(last);
        if now != last {
            last = now;
            since = Instant::now();
        }
    }
    Some(start.elapsed())
}

/// The free blocks a program's pages come from, per order (0..=10), every zone together: the
/// Movable rows of /proc/pagetypeinfo (readable by root), else every row of /proc/buddyinfo.
/// The other migratetypes' blocks (unmovable, reclaimable) are used by a movable allocation only
/// once its own lists are empty of every order (`__rmqueue` falls back then): on this machine
/// kind after a test suite, 46 696 of the 191 877 free frames in blocks below the reporting
/// order were theirs, and a 1 GiB run of 4 KiB faults took 116 404 reported frames where the
/// buddyinfo rows predicted about 36 000.
pub fn free_lists() -> io::Result<Vec<u64>> {
    match std::fs::read_to_string("/proc/pagetypeinfo") {
        Ok(text) => parse_pagetypeinfo(&text, "Movable").map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("/proc/pagetypeinfo: {e}"))),
        Err(_) => {
            let text = std::fs::read_to_string("/proc/buddyinfo")?;
            parse_buddyinfo(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("/proc/buddyinfo: {e}")))
        }
    }
}

/// [`free_lists`] and, where free pages are reported, the reported blocks per order
/// ([`reported_blocks`]), unpinned.
pub fn free_areas() -> io::Result<uapi::profile::FreeLists> {
    let free = free_lists()?;
    let reported = reporting_order().and_then(|o| reported_blocks(o).ok());
    Ok(uapi::profile::FreeLists { free, reported, cpu: None, pcp: 0 })
}

/// The CPU a run whose host is predicted is pinned to: on a machine that reports free pages,
/// the allowed CPU whose per-CPU lists hold the fewest free pages now (/proc/zoneinfo, every
/// zone); None elsewhere (nothing to predict about the host) or without /proc/zoneinfo.
pub fn cpu_for_run() -> Option<usize> {
    reporting_order()?;
    quietest_cpu_now().map(|(cpu, _)| cpu)
}

/// The allowed CPU whose per-CPU lists hold the fewest free pages now, with that count
/// (/proc/zoneinfo, every zone); None without /proc/zoneinfo.
pub fn quietest_cpu_now() -> Option<(usize, u64)> {
    std::fs::read_to_string("/proc/zoneinfo").ok().and_then(|t| quietest_cpu(&parse_pcp_counts(&t)))
}

/// [`free_areas`] for a run pinned to `cpu`, with that CPU's per-CPU list count as it is now.
pub fn free_areas_on(cpu: usize) -> io::Result<uapi::profile::FreeLists> {
    let mut f = free_areas()?;
    (f.cpu, f.pcp) = (Some(cpu), pcp_count(cpu));
    Ok(f)
}

/// The free pages on `cpu`'s per-CPU lists now, every zone (/proc/zoneinfo; 0 where unreadable).
fn pcp_count(cpu: usize) -> u64 {
    std::fs::read_to_string("/proc/zoneinfo").map(|t| parse_pcp_counts(&t)).unwrap_or_default().get(cpu).copied().unwrap_or(0)
}

/// Pin the calling thread (and what it starts later) to `cpu` (`sched_setaffinity`).
/// Async-signal-safe: also for a child between fork and exec.
pub fn pin_this_thread(cpu: usize) -> io::Result<()> {
    // SAFETY: sched_setaffinity of this thread with a plain cpu_set_t naming one CPU.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// THP-sized pages taken off a CPU's per-CPU list by [`take_cpu_thps`], held until dropped.
pub struct HeldThps {
    addr: usize,
    len: usize,
    /// Huge pages taken; the last one came from a reported block unless `taken` reached the
    /// cap or a collapse failed.
    pub taken: u32,
}

impl Drop for HeldThps {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping take_cpu_thps made and nothing else uses.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

/// At most this many huge pages are taken (256 MiB).
const TAKE_CAP: usize = 128;
/// A collapse slower than this wrote a huge page the host did not back (about 4.4 ms here,
/// against 0.2-0.4 ms for a backed one).
const TAKE_SLOW: std::time::Duration = std::time::Duration::from_micros(1500);

/// Take the THP-sized pages that CPU `cpu`'s per-CPU list holds, backed, and hold them while a
/// run pinned to `cpu` runs, so that its huge pages come from the free lists the model is given
/// (read after this): `pcp_allowed_order` lets order 9 onto the per-CPU lists and
/// `free_frozen_page_commit` keeps a THP freed there while the list is below `high`, where
/// reporting never sees it, and /proc shows its pages but not their order (docs/kernel-notes.md
/// item 20: after reporting settled, 0 to 13 of a run's first THP faults were backed, those the
/// last process on its CPU freed). A thread pinned to `cpu` writes a byte into one 2 MiB range
/// after another and collapses each with MADV_COLLAPSE (mm/khugepaged.c: `madvise_collapse`
/// allocates the huge page on the calling CPU, whatever the THP knobs say), and stops after the
/// first collapse slower than [`TAKE_SLOW`] (its page came from a reported block: the list
/// holds no backed one now), at one that fails, or at [`TAKE_CAP`]. Past the list it takes the
/// backed blocks at the head of the buddy lists too, which the model would have given the run
/// as well. None where the mapping or the thread could not be made.
pub fn take_cpu_thps(cpu: usize) -> Option<HeldThps> {
    const HUGE: usize = 2 << 20;
    let len = (TAKE_CAP + 1) * HUGE;
    // SAFETY: a fresh private anonymous mapping, unmapped by HeldThps::drop.
    let addr = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0) };
    if addr == libc::MAP_FAILED {
        return None;
    }
    let mut held = HeldThps { addr: addr as usize, len, taken: 0 };
    let base = (held.addr + HUGE - 1) & !(HUGE - 1);
    let taken = std::thread::spawn(move || {
        let pinned = pin_this_thread(cpu).is_ok();
        let mut taken = 0;
        for i in 0..TAKE_CAP {
            let p = base + i * HUGE;
            // SAFETY: p lies in the mapping (TAKE_CAP huge pages after the aligned base); the
            // write faults in one page for MADV_COLLAPSE to start from.
            let (ret, took) = unsafe {
                std::ptr::write_volatile(p as *mut u8, 1);
                let t = std::time::Instant::now();
                (libc::madvise(p as *mut libc::c_void, HUGE, linux_abi::mman::MADV_COLLAPSE as libc::c_int), t.elapsed())
            };
            if !pinned || ret != 0 {
                break;
            }
            taken += 1;
            if took > TAKE_SLOW {
                break;
            }
        }
        taken
    })
    .join()
    .ok()?;
    held.taken = taken;
    Some(held)
}

/// Free pages on each CPU's per-CPU lists, every zone together, from a /proc/zoneinfo text
/// (`    cpu: N` then `              count: X` in each zone's pagesets), by CPU number.
pub fn parse_pcp_counts(text: &str) -> Vec<u64> {
    let mut counts: Vec<u64> = Vec::new();
    let mut cpu = None;
    for line in text.lines() {
        let l = line.trim();
        if let Some(n) = l.strip_prefix("cpu:") {
            cpu = n.trim().parse::<usize>().ok();
        } else if let (Some(c), Some(n)) = (cpu, l.strip_prefix("count:")) {
            if let Ok(n) = n.trim().parse::<u64>() {
                if counts.len() <= c {
                    counts.resize(c + 1, 0);
                }
                counts[c] += n;
            }
            cpu = None;
        } else if l.starts_with("Node") {
            cpu = None;
        }
    }
    counts
}

/// The CPU this process may run on whose lists hold the fewest pages, and that count.
fn quietest_cpu(counts: &[u64]) -> Option<(usize, u64)> {
    // SAFETY: sched_getaffinity fills a plain cpu_set_t.
    let allowed = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        (libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0).then_some(set)
    };
    counts
        .iter()
        .enumerate()
        // SAFETY: CPU_ISSET reads the set.
        .filter(|(c, _)| allowed.as_ref().is_none_or(|s| unsafe { libc::CPU_ISSET(*c, s) }))
        .min_by_key(|(_, n)| **n)
        .map(|(c, n)| (c, *n))
}

/// KPF_BUDDY and KPF_UPTODATE (include/uapi/linux/kernel-page-flags.h).
const KPF_UPTODATE: u64 = 1 << 3;
const KPF_BUDDY: u64 = 1 << 10;

/// The free blocks page reporting has reported, per order (0..=10), from /proc/kpageflags
/// (root only): KPF_BUDDY is set on every frame of a free block (`snapshot_page` finds its
/// head) and KPF_UPTODATE on the head of a reported one (PG_reported is PG_uptodate on a buddy
/// page, include/linux/page-flags.h). Every block is counted, whatever its migratetype; blocks
/// of the reporting order and above are nearly all movable. A reported block's order is the
/// largest from MAX_PAGE_ORDER down to `order` whose aligned span from its head is all free:
/// two free buddies of one order would have merged. Why it is read rather than assumed: a
/// reporting pass stops at its budget and the next runs only when another block is freed, so a
/// machine whose reporting went quiet can hold hundreds of MiB of unreported large blocks
/// (after a 1 GiB run of 4 KiB pages here, 306 MiB were reported before reporting went quiet;
/// the next such run met 2 804 host faults where "every large block reported" says 54 000).
pub fn reported_blocks(order: u8) -> io::Result<Vec<u64>> {
    let mut counts = vec![0u64; mm_types::MAX_PAGE_ORDER as usize + 1];
    scan_reported(order, |_, o| counts[o as usize] += 1)?;
    Ok(counts)
}

/// Calls `f(head, order)` for every reported free block of `order` and above in /proc/kpageflags
/// (root only), as [`reported_blocks`] counts them.
fn scan_reported(order: u8, mut f: impl FnMut(u64, u8)) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open("/proc/kpageflags")?;
    // Chunks of MAX_PAGE_ORDER-aligned frames: no block straddles two.
    const CHUNK: usize = 1 << 16;
    let mut buf = vec![0u8; CHUNK * 8];
    let mut flags: Vec<u64> = Vec::with_capacity(CHUNK);
    let mut pfn = 0u64;
    loop {
        let n = match file.read_at(&mut buf, pfn * 8) {
            Ok(0) => break,
            Ok(n) => n / 8,
            // Past the last frame some kernels answer EINVAL instead of 0 bytes.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && pfn > 0 => break,
            Err(e) => return Err(e),
        };
        flags.clear();
        flags.extend(buf[..n * 8].chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))));
        reported_heads(&flags, pfn, order, &mut f);
        pfn += n as u64;
        if n < CHUNK {
            break;
        }
    }
    Ok(())
}

/// The free lists a run pinned to `cpu` starts from (as [`free_areas_on`]) and the frames the
/// host has dropped then, from one scan of /proc/kpageflags: read right before a live run
/// starts (after [`take_cpu_thps`]), so that the model can be run again from that state
/// (`live.free_lists`) and the run's frames counted against it (`live.host_faults`). None where
/// no device reports free pages.
pub fn run_start(cpu: usize) -> Option<(uapi::profile::FreeLists, ReportedFrames)> {
    let order = reporting_order()?;
    let free = free_lists().ok()?;
    let reported = ReportedFrames::read(order).ok()?;
    let lists = uapi::profile::FreeLists { free, reported: Some(reported.blocks.clone()), cpu: Some(cpu), pcp: pcp_count(cpu) };
    Some((lists, reported))
}

/// The frames of every block page reporting had reported when [`ReportedFrames::read`] ran: the
/// frames whose next write is a fault in the host. Its count over a run's frames
/// ([`ReportedFrames::count_mapped`]) is the live side's `host_faults`, beside the model's.
#[derive(Default)]
pub struct ReportedFrames {
    /// One bit per frame.
    bits: Vec<u64>,
    /// Reported blocks per order, as [`reported_blocks`] counts them.
    pub blocks: Vec<u64>,
}

impl ReportedFrames {
    /// Reads /proc/kpageflags (root only): blocks of `order` (`page_reporting_order`) and above.
    pub fn read(order: u8) -> io::Result<Self> {
        let mut r = ReportedFrames::default();
        scan_reported(order, |head, o| r.insert(head, o))?;
        Ok(r)
    }
    fn insert(&mut self, start: u64, order: u8) {
        if self.blocks.len() <= order as usize {
            self.blocks.resize(mm_types::MAX_PAGE_ORDER as usize + 1, 0);
        }
        self.blocks[order as usize] += 1;
        let len = 1u64 << order;
        let end = start + len;
        let words = end.div_ceil(64) as usize;
        if self.bits.len() < words {
            self.bits.resize(words, 0);
        }
        for pfn in start..end {
            self.bits[(pfn / 64) as usize] |= 1 << (pfn % 64);
        }
    }
    pub fn contains(&self, pfn: u64) -> bool {
        self.bits.get((pfn / 64) as usize).is_some_and(|w| w & (1 << (pfn % 64)) != 0)
    }
    /// Frames mapped in `ranges` of process `pid` (/proc/PID/pagemap, root only: PFNs are hidden
    /// without CAP_SYS_ADMIN) that lay in a reported block.
    pub fn count_mapped(&self, pid: i32, ranges: &[(u64, u64)]) -> crate::Result<u64> {
        let mut n = 0;
        for &(start, end) in ranges {
            pagemap_chunks(&format!("/proc/{pid}/pagemap"), start, end.div_ceil(4096).saturating_sub(start / 4096), |entries| {
                n += entries.iter().filter(|&&e| e & PAGEMAP_PRESENT != 0 && self.contains(e & PAGEMAP_PFN)).count() as u64;
            })?;
        }
        Ok(n)
    }
}

const PAGEMAP_PRESENT: u64 = 1 << 63;
const PAGEMAP_PFN: u64 = (1 << 55) - 1;

/// Calls `f` with the entries of the pagemap file `path` for `pages` 4 KiB pages from `start`,
/// a chunk at a time (`census::read_pagemap`).
fn pagemap_chunks(path: &str, start: u64, pages: u64, mut f: impl FnMut(&[u64])) -> crate::Result<()> {
    const CHUNK: u64 = 1 << 14;
    let file = std::fs::File::open(path).map_err(|e| crate::io_err("cannot open", path, e))?;
    let mut buf = Vec::new();
    let mut done = 0;
    while done < pages {
        let n = (pages - done).min(CHUNK);
        probe::census::read_pagemap(&file, path, start + done * 4096, n, &mut buf)?;
        if buf.is_empty() {
            break;
        }
        f(&buf);
        done += buf.len() as u64;
    }
    Ok(())
}

/// The frame of each of `pages` 4 KiB pages from `addr` in this process (0: not present).
pub fn pagemap_pfns(addr: u64, pages: u64) -> crate::Result<Vec<u64>> {
    let mut v = Vec::with_capacity(pages as usize);
    pagemap_chunks("/proc/self/pagemap", addr, pages, |entries| v.extend(entries.iter().map(|&e| if e & PAGEMAP_PRESENT != 0 { e & PAGEMAP_PFN } else { 0 })))?;
    Ok(v)
}

/// Sums the free-list rows of one migratetype in a /proc/pagetypeinfo text
/// (`Node    0, zone   Normal, type      Movable   1006    973 ...`), every zone together.
pub fn parse_pagetypeinfo(text: &str, migratetype: &str) -> Result<Vec<u64>, String> {
    let rows: String = text
        .lines()
        .filter_map(|l| {
            let (zone, rest) = l.split_once(", type")?;
            let mut words = rest.split_whitespace();
            (words.next() == Some(migratetype)).then(|| format!("{zone} {}\n", words.collect::<Vec<_>>().join(" ")))
        })
        .collect();
    if rows.is_empty() {
        return Err(format!("no free-list row of type {migratetype}"));
    }
    parse_buddyinfo(&rows)
}

/// Calls `f(head, order)` for each reported block whose head lies in `flags`, the
/// /proc/kpageflags entries of the frames from `base` (a multiple of the largest block).
fn reported_heads(flags: &[u64], base: u64, order: u8, f: &mut impl FnMut(u64, u8)) {
    let max = mm_types::MAX_PAGE_ORDER as usize;
    for (i, &fl) in flags.iter().enumerate() {
        if fl & (KPF_BUDDY | KPF_UPTODATE) != KPF_BUDDY | KPF_UPTODATE {
            continue;
        }
        let p = base + i as u64;
        let free = |o: usize| flags.get(i..i + (1 << o)).is_some_and(|s| s.iter().all(|&x| x & KPF_BUDDY != 0));
        if let Some(o) = (order as usize..=max).rev().find(|&o| p % (1 << o) == 0 && free(o)) {
            f(p, o as u8);
        }
    }
}

/// Sums the rows of a /proc/buddyinfo text (`Node 0, zone Normal 52888 41105 ...`).
pub fn parse_buddyinfo(text: &str) -> Result<Vec<u64>, String> {
    let mut total = vec![0u64; mm_types::MAX_PAGE_ORDER as usize + 1];
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let counts = line.split_once("zone").map(|(_, rest)| rest.split_whitespace().skip(1));
        let Some(counts) = counts else { return Err(format!("line {}: no 'zone' in {line:?}", i + 1)) };
        for (o, c) in counts.enumerate() {
            let n: u64 = c.parse().map_err(|_| format!("line {}: {c:?} is not a count", i + 1))?;
            if o >= total.len() {
                return Err(format!("line {}: more than {} orders", i + 1, total.len()));
            }
            total[o] += n;
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AnonHugePages of the VMA holding `addr` in this process's smaps, in KiB.
    fn anon_huge_kib(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ').filter(|(r, _)| r.contains('-') && !r.contains(':')) {
                let (start, end) = range.split_once('-').unwrap();
                let (start, end) = (u64::from_str_radix(start, 16).unwrap(), u64::from_str_radix(end, 16).unwrap());
                inside = (start..end).contains(&(addr as u64));
            } else if inside && line.starts_with("AnonHugePages:") {
                return line.split_whitespace().nth(1).unwrap().parse().unwrap();
            }
        }
        0
    }

    /// take_cpu_thps collapses one 2 MiB range after another on the CPU and holds them: the
    /// mapping has `taken` PMD-mapped huge pages (1 to TAKE_CAP: the first collapse always
    /// counts, fast or slow) until the holder is dropped, which unmaps them. MADV_COLLAPSE needs
    /// root and THP support, whatever the knobs say.
    #[test]
    fn taken_huge_pages_are_held_until_dropped() {
        if !crate::sysfs::is_root() || !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
            eprintln!("SKIPPED: MADV_COLLAPSE needs root and the THP sysfs tree");
            return;
        }
        let cpu = quietest_cpu_now().map_or(0, |(c, _)| c);
        let held = take_cpu_thps(cpu).expect("a mapping and a thread");
        assert!((1..=TAKE_CAP as u32).contains(&held.taken), "took {}", held.taken);
        // Its VMA (a neighbour of the same flags may have merged into it) holds them.
        assert!(anon_huge_kib(held.addr) >= held.taken as u64 * 2048, "took {}", held.taken);
        let addr = held.addr;
        drop(held);
        assert_eq!(anon_huge_kib(addr), 0, "unmapped");
    }

    #[test]
    fn buddyinfo_rows_are_summed_per_order() {
        let text = "Node 0, zone      DMA      0      0      0      0      0      0      0      0      1      1      3 \n\
                    Node 0, zone    DMA32     88     62     75     51     52     43     40     33     17     21    730 \n\
                    Node 0, zone   Normal  52888  41105  31687  18383   8340   3902   1978   1215    786    485   2412 \n";
        assert_eq!(parse_buddyinfo(text).unwrap(), vec![52976, 41167, 31762, 18434, 8392, 3945, 2018, 1248, 804, 507, 3145]);
        assert!(parse_buddyinfo("Node 0, zone Normal 1 x\n").unwrap_err().contains("line 1"));
    }

    /// Frames 0..4096: a reported order-10 block at 0; a reported order-9 block at 1024 whose
    /// buddy is allocated; an unreported order-9 block at 2048 (its head without KPF_UPTODATE);
    /// a reported order-9 block at 2560, aligned to 512 only; at 3072 a reported order-9 block
    /// followed by a free order-8 block (not its buddy's equal: it stays order 9); a stray
    /// KPF_UPTODATE on an allocated frame is no block.
    #[test]
    fn reported_blocks_are_counted_by_the_order_their_free_span_allows() {
        let mut f = vec![KPF_BUDDY; 4096];
        for (head, reported) in [(0, true), (1024, true), (2048, false), (2560, true), (3072, true)] {
            if reported {
                f[head] |= KPF_UPTODATE;
            }
        }
        f[1536..2048].fill(0);
        f[3840..4096].fill(0);
        f[3900] = KPF_UPTODATE;
        let mut heads = Vec::new();
        reported_heads(&f, 0, 9, &mut |head, o| heads.push((head, o)));
        assert_eq!(heads, vec![(0, 10), (1024, 9), (2560, 9), (3072, 9)]);
        // Their frames, as the live side's host-fault count sees them.
        let mut r = ReportedFrames::default();
        for (head, o) in heads {
            r.insert(head, o);
        }
        assert_eq!(r.bits.iter().map(|w| w.count_ones()).sum::<u32>(), 1024 + 3 * 512);
        assert_eq!(r.blocks, vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 1]);
        for (pfn, reported) in [(0, true), (1023, true), (1024, true), (1535, true), (1536, false), (2048, false), (2559, false), (2560, true), (3071, true), (3583, true), (3584, false), (3900, false), (1 << 40, false)] {
            assert_eq!(r.contains(pfn), reported, "frame {pfn}");
        }
    }

    /// `count_mapped` reads this process's pagemap: of two pages written, the one whose frame
    /// is in the set counts, the other and an unmapped page do not (root only: PFNs read as 0
    /// without CAP_SYS_ADMIN).
    #[test]
    fn mapped_frames_in_reported_blocks_are_counted() {
        const PAGE: usize = 4096;
        // SAFETY: a private anonymous mapping of three pages, unmapped below.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), 3 * PAGE, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        assert_ne!(p, libc::MAP_FAILED);
        let base = p as u64;
        // SAFETY: the first two pages of the mapping.
        unsafe {
            std::ptr::write_volatile(p as *mut u8, 1);
            std::ptr::write_volatile((p as *mut u8).add(PAGE), 1);
        }
        let pfn_of = |addr: u64| -> u64 {
            use std::os::unix::fs::FileExt;
            let mut e = [0u8; 8];
            std::fs::File::open("/proc/self/pagemap").unwrap().read_exact_at(&mut e, addr / 4096 * 8).unwrap();
            u64::from_le_bytes(e) & ((1 << 55) - 1)
        };
        let (a, b) = (pfn_of(base), pfn_of(base + PAGE as u64));
        if a == 0 {
            eprintln!("skipped: /proc/self/pagemap shows no PFNs (not root)");
        } else {
            let mut r = ReportedFrames::default();
            r.insert(a, 0);
            let pid = std::process::id() as i32;
            assert_eq!(r.count_mapped(pid, &[(base, base + 3 * PAGE as u64)]).unwrap(), 1);
            r.insert(b, 0);
            assert_eq!(r.count_mapped(pid, &[(base, base + 3 * PAGE as u64)]).unwrap(), 2);
            assert_eq!(r.count_mapped(pid, &[(base + PAGE as u64, base + 3 * PAGE as u64)]).unwrap(), 1);
        }
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(p, 3 * PAGE) };
    }

    /// This machine's /proc/zoneinfo pagesets after a 1 GiB run exited on CPU 1 (trimmed).
    #[test]
    fn pcp_counts_are_summed_per_cpu_over_the_zones() {
        let text = "Node 0, zone    DMA32\n  pages free     772915\n  pagesets\n    cpu: 0\n              count:    0\n              high:     740\n    cpu: 1\n              count:    12\n              high:     740\n\
                    Node 0, zone   Normal\n  pages free     4329330\n  pagesets\n    cpu: 0\n              count:    8638\n              high:     79177\n\
                    \x20             batch:    63\n    cpu: 1\n              count:    226417\n              high:     227226\n  node_unreclaimable:  0\n";
        assert_eq!(parse_pcp_counts(text), vec![8638, 226429]);
    }

    #[test]
    fn pagetypeinfo_sums_one_migratetype_over_the_zones() {
        // This machine's rows (trimmed to two zones and three types).
        let text = "Page block order: 9\nPages per block:  512\n\n\
                    Free pages count per migrate type at order       0      1      2      3      4      5      6      7      8      9     10 \n\
                    Node    0, zone    DMA32, type    Unmovable      0      0      0      0      0      0      0      0      0      0      0 \n\
                    Node    0, zone    DMA32, type      Movable      1      1      4      2      5      4      3      3      4      2    752 \n\
                    Node    0, zone   Normal, type    Unmovable    224    800    728    526    315    167     92     38     20      0      0 \n\
                    Node    0, zone   Normal, type      Movable   1006    973    757    820   1274    850    478    339    222    139    518 \n\
                    Node    0, zone   Normal, type  Reclaimable   1241    517    259    148     50      9      3      1      2      0      0 \n\n\
                    Number of blocks type     Unmovable      Movable  Reclaimable   HighAtomic      Isolate \n\
                    Node 0, zone    DMA32            0         1528            0            0            0 \n";
        assert_eq!(parse_pagetypeinfo(text, "Movable").unwrap(), vec![1007, 974, 761, 822, 1279, 854, 481, 342, 226, 141, 1270]);
        assert_eq!(parse_pagetypeinfo(text, "Reclaimable").unwrap(), vec![1241, 517, 259, 148, 50, 9, 3, 1, 2, 0, 0]);
        assert!(parse_pagetypeinfo(text, "Isolate").unwrap_err().contains("Isolate"));
    }
}
