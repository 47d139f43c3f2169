//! `--sample MS`: the live run's state every MS ms, read while it runs (issue #10 item 4).
//!
//! A thread of the parent wakes at n × MS after `go` (absolute deadlines on CLOCK_MONOTONIC,
//! so a slow sample delays the next one but the schedule does not drift) and reads, of the
//! workload's processes (the executor and every process descended from it, found by their
//! parent in /proc/PID/stat), what the model's timeline holds (`sim::driver::Machine::sample`):
//! the Rss, AnonHugePages and ShmemPmdMapped of the VMAs over the workload's regions
//! (/proc/PID/smaps, fs/proc/task_mmu.c), their folio census ([`probe::census`]), and
//! khugepaged's counters and `thp_collapse_alloc` since the run started (system-wide: another
//! process's collapses count too). With progress on, it prints one line a second.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use uapi::TimelineSample;

use probe::census::census_of_ranges;
use probe::procfs::{list_pids, read_smaps, stat_field, CounterSnapshot};

/// The sampling thread of one live run.
/// Stops when finished or dropped (a run that fails midway).
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Vec<TimelineSample>>>,
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// khugepaged's counters and `thp_collapse_alloc`, system-wide, as the run's before/after
/// snapshot reads them ([`CounterSnapshot`]); zeros where they cannot be read.
fn collapse_counters(sysfs: &Path) -> [i64; 3] {
    let s = CounterSnapshot::read(sysfs).unwrap_or_default();
    let kh = |k: &str| s.khugepaged.get(k).copied().unwrap_or(0);
    [kh("pages_collapsed"), kh("full_scans"), s.vmstat.get("thp_collapse_alloc").copied().unwrap_or(0)]
}

/// `root` and every process whose chain of parents leads to it.
fn descendants(root: i32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = list_pids()
        .into_iter()
        .filter_map(|p| {
            let text = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            Some((p, stat_field(&text, 4)? as i32))
        })
        .collect();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(parents.iter().filter(|&&(p, pp)| pp == parent && p != root).map(|&(p, _)| p));
        i += 1;
    }
    found
}

/// One sample of the processes of `root` over `ranges` (the heap: the `[heap]` VMA).
pub fn sample(root: i32, ranges: &[(u64, u64)], sysfs: &Path, base: [i64; 3], t_ms: f64) -> TimelineSample {
    let mut t = TimelineSample { t_ms, ..Default::default() };
    for pid in descendants(root) {
        // A process that exits meanwhile has nothing left to count.
        let Ok(vmas) = read_smaps(pid) else { continue };
        let mut mine: Vec<(u64, u64)> = ranges.to_vec();
        mine.extend(vmas.iter().filter(|v| v.name == "[heap]").map(|v| (v.start, v.end)));
        let over = |v: &probe::procfs::Vma| mine.iter().any(|&(a, b)| v.start < b && a < v.end);
        for v in vmas.iter().filter(|v| over(v)) {
            t.rss_kb += v.rss_kb;
            t.anon_huge_pages_kb += v.anon_huge_kb;
            t.shmem_pmd_mapped_kb += v.shmem_pmd_kb;
        }
        if let Ok(c) = census_of_ranges(pid, &mine, &vmas) {
            for (size, n) in c.total.folio_counts() {
                *t.folios.entry(size).or_insert(0) += n;
            }
        }
    }
    let now = collapse_counters(sysfs);
    t.pages_collapsed = now[0] - base[0];
    t.full_scans = now[1] - base[1];
    t.thp_collapse_alloc = now[2] - base[2];
    t
}

impl Sampler {
    /// Start sampling the run of `root` that began at `start` (`go`), every `interval`.
    pub fn start(root: i32, ranges: Vec<(u64, u64)>, sysfs: PathBuf, start: Instant, interval: Duration, progress: bool) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let base = collapse_counters(&sysfs);
        let handle = std::thread::spawn(move || {
            let mut samples = Vec::new();
            let interval = interval.max(Duration::from_millis(1));
            let mut last_progress = start;
            for n in 1u32.. {
                let due = start + interval * n;
                // Sleep in short steps so that the end of the run stops the thread promptly.
                while Instant::now() < due {
                    if flag.load(Ordering::Relaxed) {
                        return samples;
                    }
                    std::thread::sleep((due - Instant::now()).min(Duration::from_millis(5)));
                }
                if flag.load(Ordering::Relaxed) {
                    return samples;
                }
                let s = sample(root, &ranges, &sysfs, base, start.elapsed().as_secs_f64() * 1e3);
                if progress && last_progress.elapsed() >= Duration::from_secs(1) {
                    last_progress = Instant::now();
                    eprintln!(
                        "live: {:.1} s, Rss {} kB, AnonHugePages {} kB, ShmemPmdMapped {} kB, pages_collapsed {}, full_scans {}",
                        s.t_ms / 1e3,
                        s.rss_kb,
                        s.anon_huge_pages_kb,
                        s.shmem_pmd_mapped_kb,
                        s.pages_collapsed,
                        s.full_scans
                    );
                }
                samples.push(s);
            }
            samples
        });
        Sampler { stop, handle: Some(handle) }
    }

    /// Stop at the end of the run and return the samples taken.
    pub fn finish(mut self) -> Vec<TimelineSample> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().map(|h| h.join().unwrap_or_default()).unwrap_or_default()
    }
}

/// Progress of a long live run without `--sample`: one line a second on stderr, from the
/// second second on, naming the workload line being run (`line` holds it; 0: not yet known).
/// Stops when dropped.
pub struct Progress {
    stop: Arc<AtomicBool>,
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Progress {
    pub fn start(source: String, line: Arc<std::sync::atomic::AtomicUsize>) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            for n in 2u32.. {
                let due = start + Duration::from_secs(n as u64);
                while Instant::now() < due {
                    if flag.load(Ordering::Relaxed) {
                        return;
                    }
                    std::thread::sleep((due - Instant::now()).min(Duration::from_millis(20)));
                }
                match line.load(Ordering::Relaxed) {
                    0 => eprintln!("live: {n} s"),
                    l => eprintln!("live: {n} s, at {source}:{l}"),
                }
            }
        });
        Progress { stop }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test's process is its own root; a child it forks is found through its parent.
    #[test]
    fn descendants_follow_the_parent_chain() {
        let me = std::process::id() as i32;
        let mut child = std::process::Command::new("sleep").arg("5").spawn().expect("sleep(1) runs");
        let found = descendants(me);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(found[0], me);
        assert!(found.contains(&(child.id() as i32)), "{found:?} lacks the child {}", child.id());
        assert!(!found.contains(&1), "init is nobody's descendant here");
    }
}
