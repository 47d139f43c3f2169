//! Census speed benchmark (issue #13): a process with GIB GiB (default 10) of anonymous memory
//! in 64 KiB folios (top-level `enabled=never`, `hugepages-64kB/enabled=always`, set through the
//! settings guard for the faulting only), then the census of that range, five times with the
//! default (sparse) kpageflags reads and five times reading every PFN's flags; prints the
//! median, min and max and where the time went, and checks that both censuses are equal.
//!
//! `cargo bench -p live --bench census` (root; `THPLAB_BENCH_GIB=N` to change the size,
//! `THPLAB_BENCH_SIZE=2048kB` for PMD THPs instead).

use std::time::Instant;

use probe::census::{census_of_ranges_with, Reads};
use live::guard::{current_settings, SettingsGuard};
use probe::procfs::read_smaps;
use live::sysfs::Paths;

fn main() {
    if let Err(e) = Paths::from_env().check_available() {
        eprintln!("census bench skipped: {e}");
        return;
    }
    let gib: u64 = std::env::var("THPLAB_BENCH_GIB").ok().and_then(|s| s.parse().ok()).unwrap_or(10);
    let size = std::env::var("THPLAB_BENCH_SIZE").unwrap_or_else(|_| "64kB".into());
    let len = (gib << 30) as usize;
    let mut s = current_settings(&Paths::from_env()).unwrap();
    if size == "2048kB" {
        s.apply_assignment("enabled=always").unwrap();
    } else {
        s.apply_assignment("enabled=never").unwrap();
        s.apply_assignment(&format!("hugepages-{size}/enabled=always")).unwrap();
    }
    let guard = SettingsGuard::apply(&s).unwrap();
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), len + (2 << 20), libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0)
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap {gib} GiB");
    let start = (p as usize).div_ceil(2 << 20) * (2 << 20);
    let t = Instant::now();
    for off in (0..len).step_by(4096) {
        unsafe { std::ptr::write_volatile((start + off) as *mut u8, 1) };
    }
    let fault_s = t.elapsed().as_secs_f64();
    guard.restore().unwrap();
    let pid = std::process::id() as i32;
    let vmas = read_smaps(pid).unwrap();
    // The default (sparse) reads, then every PFN read (the census before issue #13 item 6),
    // interleaved; both must give the same census.
    let mut reference = None;
    for (name, reads) in [("sparse", Reads::Sparse), ("every PFN", Reads::Every)] {
        let mut runs = Vec::new();
        let mut last = None;
        for _ in 0..5 {
            let r = census_of_ranges_with(pid, &[(start as u64, (start + len) as u64)], &vmas, reads).unwrap();
            runs.push(r.elapsed.as_secs_f64() * 1e3);
            last = Some(r);
        }
        let r = last.unwrap();
        let mut sorted = runs.clone();
        sorted.sort_by(f64::total_cmp);
        println!(
            "census ({name} reads) of {gib} GiB in {size} folios (faulted in {fault_s:.1} s): median {:.1} ms, min {:.1}, max {:.1} over 5 runs {:?}",
            sorted[2], sorted[0], sorted[4], runs.iter().map(|x| (x * 10.0).round() / 10.0).collect::<Vec<_>>()
        );
        println!(
            "  last run: pagemap {:.1} ms, kpageflags {:.1} ms in {} reads of {} PFNs; folios {:?}",
            r.pagemap_time.as_secs_f64() * 1e3,
            r.kpageflags_time.as_secs_f64() * 1e3,
            r.kpageflags_reads,
            r.kpageflags_pfns,
            r.total.folio_counts()
        );
        match &reference {
            None => reference = Some(r),
            Some(a) => {
                assert_eq!(a.total, r.total, "the census differs with the reads");
                assert_eq!(a.per_vma, r.per_vma);
                assert_eq!(a.large_ranges, r.large_ranges);
            }
        }
    }
    unsafe { libc::munmap(p, len + (2 << 20)) };
}
