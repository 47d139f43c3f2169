//! Live tests: they change the machine's THP knobs through the settings guard, so they SKIP
//! (with a printed reason) without root or without the sysfs tree, run one at a time (a
//! process-wide mutex plus the guard's flock), and compare every knob before and after.
//!
//! Expected figures are the ones confirmed on this machine (6.18.44, see
//! docs/kernel-thp.md §10). Fault counts allow ±1 (FAULT_TOLERANCE) for noise such
//! as a text or stack page of the child faulted inside the measured window.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};

use live::executor::{run_live, ExecOptions};
use live::guard::{current_settings, recover_if_needed, SettingsGuard};
use live::sysfs::{read_knob, Paths};
use live::LiveError;
use thp_abi::ThpSettings;
use uapi::RunResult;

const FAULT_TOLERANCE: u64 = 1;
const BASE: u64 = 0x7e00_0000_0000;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// `Some(reason)` when live tests cannot run here.
fn skip_reason() -> Option<String> {
    Paths::from_env().check_available().err().map(|e| e.to_string())
}

macro_rules! require_live {
    () => {
        if let Some(reason) = skip_reason() {
            eprintln!("SKIPPED: {reason}");
            return;
        }
    };
}

/// Every writable knob and its value now.
fn snapshot() -> BTreeMap<String, String> {
    let p = Paths::from_env();
    ThpSettings::default().knobs().into_iter().map(|(k, _)| (k.clone(), read_knob(&p, &k).unwrap())).collect()
}

/// Checks at the end of a test, even when it fails, that every knob is as it was.
struct KnobsUnchanged(BTreeMap<String, String>);

impl KnobsUnchanged {
    fn new() -> Self {
        KnobsUnchanged(snapshot())
    }
}

impl Drop for KnobsUnchanged {
    fn drop(&mut self) {
        let now = snapshot();
        if now != self.0 && !std::thread::panicking() {
            panic!("THP knobs changed by the test: before {:?}\nafter {:?}", self.0, now);
        }
    }
}

fn settings(assignments: &[&str]) -> ThpSettings {
    let mut s = ThpSettings::default();
    for a in assignments {
        s.apply_assignment(a).unwrap();
    }
    s
}

fn opts(repeat: u32) -> ExecOptions {
    ExecOptions {
        child_program: env!("CARGO_BIN_EXE_thplab-live-helper").into(),
        child_args: vec!["__exec".into()],
        repeat,
        progress: false,
        sample: None,
        settle_host: false,
        cpu: None,
        pressure: Default::default(),
        latency: false,
    }
}

fn live(text: &str, assignments: &[&str]) -> Result<RunResult, LiveError> {
    let w = workload::parse("<test>", text).unwrap();
    run_live(&w, &settings(assignments), &[], &opts(1))
}

/// Free memory in blocks of order 9 and above (/proc/buddyinfo, every zone).
fn free_huge_bytes() -> u64 {
    let text = std::fs::read_to_string("/proc/buddyinfo").unwrap_or_default();
    text.lines()
        .flat_map(|l| l.split_whitespace().skip(4).enumerate().filter(|(o, _)| *o >= 9).map(|(o, n)| n.parse::<u64>().unwrap_or(0) * (4096 << o)).collect::<Vec<_>>())
        .sum()
}

/// A 1 GiB shmem test needs 512 free 2 MiB blocks: shmem's huge allocation under the default
/// `defrag` (GFP_TRANSHUGE_LIGHT, no VM_HUGEPAGE) neither reclaims nor compacts, so on a machine
/// whose memory is page cache (a build just wrote its target) it falls back to 4 KiB pages (seen:
/// 95 047 faults instead of 512). Where fewer than twice `bytes` are free in such blocks, make room
/// as one would before a benchmark: drop clean page cache and compact (no knob changes).
fn make_huge_room(bytes: u64) {
    if free_huge_bytes() >= 2 * bytes {
        return;
    }
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "1");
    let _ = std::fs::write("/proc/sys/vm/compact_memory", "1");
    eprintln!("made room for {bytes} bytes of 2 MiB folios: {} bytes free in blocks of order 9 and above now", free_huge_bytes());
}

fn assert_faults(r: &RunResult, want: u64) {
    let got = r.process.minflt;
    assert!(got.abs_diff(want) <= FAULT_TOLERANCE, "minflt {got}, expected {want} ±{FAULT_TOLERANCE}");
}

fn mthp(r: &RunResult, dir: &str, stat: &str) -> i64 {
    r.mthp.get(&thp_abi::SizeDir::from(dir)).and_then(|m| m.get(stat)).copied().unwrap_or(0)
}

#[test]
fn guard_applies_and_restores_every_knob() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    let before = snapshot();
    let s = settings(&[
        "enabled=never",
        "hugepages-64kB/enabled=always",
        "hugepages-64kB/shmem_enabled=always",
        "shmem_enabled=force",
        "khugepaged/scan_sleep_millisecs=5000",
        "use_zero_page=0",
    ]);
    {
        let g = SettingsGuard::apply(&s).unwrap();
        assert_eq!(g.changed().len(), 6);
        let now = snapshot();
        for (k, v) in s.knobs() {
            assert_eq!(now[&k], v, "{k} not applied");
        }
        assert!(Paths::from_env().journal_path().exists(), "journal must exist while the guard is held");
    }
    assert_eq!(snapshot(), before);
    assert!(!Paths::from_env().journal_path().exists());
}

#[test]
fn recover_after_sigkill_of_a_guard_holder() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    let mut child = Command::new(env!("CARGO_BIN_EXE_thplab-live-helper"))
        .args(["__hold", "enabled=never", "hugepages-16kB/enabled=always"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "held 2");
    let p = Paths::from_env();
    assert_eq!(read_knob(&p, "enabled").unwrap(), "never");
    // While the holder lives, recovery leaves its knobs alone.
    assert_eq!(recover_if_needed().unwrap(), None);
    let pid = child.id();
    child.kill().unwrap(); // SIGKILL: no handler runs
    child.wait().unwrap();
    assert_eq!(read_knob(&p, "enabled").unwrap(), "never", "SIGKILL must leave the knob changed");
    let msg = recover_if_needed().unwrap().expect("a journal to recover");
    eprintln!("{msg}");
    assert!(msg.contains(&format!("(pid {pid})")), "{msg}");
    assert!(msg.contains("restored 2 THP knobs"), "{msg}");
    assert!(msg.contains("enabled=madvise") && msg.contains("hugepages-16kB/enabled=never"), "{msg}");
    assert_eq!(recover_if_needed().unwrap(), None);
}

#[test]
fn sigterm_restores_and_exits_128_plus_sig() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    let mut child = Command::new(env!("CARGO_BIN_EXE_thplab-live-helper"))
        .args(["__hold", "defrag=never"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(read_knob(&Paths::from_env(), "defrag").unwrap(), "never");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(128 + libc::SIGTERM));
    assert_eq!(read_knob(&Paths::from_env(), "defrag").unwrap(), "madvise");
    assert!(!Paths::from_env().journal_path().exists());
}

#[test]
fn mthp_64k_one_mib() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    // P1 on a small scale: 1 MiB, 64 KiB-aligned, one write per 4 KiB → 16 faults, 16 × 64 kB.
    let r = live("mmap a 1M at=0x7e0000000000\ntouch a write\n", &["enabled=never", "hugepages-64kB/enabled=always"])
        .unwrap();
    assert_faults(&r, 16);
    assert_eq!(r.census.sizes[&thp_abi::FolioSize::from("64kB")].folios, 16);
    assert_eq!(r.census.sizes[&thp_abi::FolioSize::from("64kB")].pte_mapped, 16);
    assert_eq!(r.folios.get(&thp_abi::FolioSize::from("4kB")), None);
    assert!(mthp(&r, "hugepages-64kB", "anon_fault_alloc") >= 16);
    assert_eq!(r.process.rss_bytes, 1 << 20);
    assert_eq!(r.process.anon_huge_bytes, 0);
    assert_eq!(r.regions[0].start, BASE);
    assert_eq!(r.calls[0].call, "mmap");
    assert_eq!(r.calls[0].ret, "0");
}

#[test]
fn base_pages_only() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    let r = live("mmap a 1M at=0x7e0000000000\ntouch a write\n", &[]).unwrap();
    assert_faults(&r, 256);
    assert_eq!(r.census.sizes[&thp_abi::FolioSize::from("4kB")].folios, 256);
    assert_eq!(r.census.sizes.len(), 1);
}

#[test]
fn pmd_thp_four_mib() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    let r = live("mmap a 4M at=0x7e0000000000\ntouch a write\n", &["enabled=always"]).unwrap();
    assert_faults(&r, 2);
    let e = r.census.sizes[&thp_abi::FolioSize::from("2048kB")];
    assert_eq!((e.folios, e.pmd_mapped, e.pte_mapped), (2, 2, 0));
    assert_eq!(r.process.anon_huge_bytes, 4 << 20);
    assert!(r.vmstat["thp_fault_alloc"] >= 2);
}

#[test]
fn mlock_faults_a_range_in_as_writes() {
    // mm/mlock.c do_mlock: VM_LOCKED, then __mm_populate → populate_vma_page_range with
    // FOLL_WRITE on a private writable VMA: 4 MiB at a 2 MiB-aligned address are 2 PMD faults
    // under always (GUP faults count in min_flt, mm/memory.c mm_account_fault), the touch after
    // munlock faults nothing; the model's mlock_faults_the_range_in_as_a_write has the same figures.
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    let text = "mmap a 4M at=0x7e0000000000\nmlock a\nmunlock a\ntouch a write\n";
    let r = live(text, &["enabled=always"]).unwrap();
    assert_faults(&r, 2);
    let e = r.census.sizes[&thp_abi::FolioSize::from("2048kB")];
    assert_eq!((e.folios, e.pmd_mapped, e.pte_mapped), (2, 2, 0));
    assert_eq!(r.process.anon_huge_bytes, 4 << 20);
    let calls: Vec<(&str, &str)> = r.calls.iter().map(|c| (c.call.as_str(), c.ret.as_str())).collect();
    assert_eq!(calls, [("mmap", "0"), ("mlock", "0"), ("munlock", "0")]);
    let r = live(text, &["enabled=never"]).unwrap();
    assert_faults(&r, 1024);
    assert_eq!(r.process.anon_huge_bytes, 0);
}

#[test]
fn census_of_a_known_layout() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    let text = "\
mmap p 4M at=0x7e0000000000
touch p write
mmap q 1M at=0x7e0000600000
touch q write
munmap q[4K+4K]
mmap z 2M at=0x7e0000a00000
touch z read
mmap r 1M at=0x7e0000e00000
touch r read
mmap s 64K at=0x7e0001000000
touch s write
mprotect s[0+4K] r
brk +64K
touch heap write
";
    let r = live(text, &["enabled=always", "hugepages-64kB/enabled=always"]).unwrap();
    let c = &r.census;
    let pmd = c.sizes[&thp_abi::FolioSize::from("2048kB")];
    assert_eq!((pmd.folios, pmd.pmd_mapped, pmd.pte_mapped, pmd.partially_mapped), (2, 2, 0, 0), "{c:?}");
    let m = c.sizes[&thp_abi::FolioSize::from("64kB")];
    // q: 16 folios, the first lost a page to munmap; s: one folio split across two VMAs by
    // mprotect but fully mapped in place; and the heap's one 64 kB folio when the break
    // starts 64K-aligned (where it starts depends on the size of the executable).
    let heap_aligned = r.regions.iter().find(|g| g.name == "heap").is_some_and(|h| h.start % (64 << 10) == 0) as u64;
    assert_eq!((m.folios, m.pte_mapped, m.partially_mapped), (17 + heap_aligned, 17 + heap_aligned, 1), "{c:?}");
    assert_eq!(c.huge_zero_pmds, 1, "{c:?}");
    assert_eq!(c.zero_page_ptes, 256, "{c:?}");
    // The heap: brk +64K, not 64K-aligned in general, so some 4 kB pages and maybe 64 kB folios.
    let heap = r.regions.iter().find(|g| g.name == "heap").unwrap();
    assert_eq!(heap.len, 64 << 10);
    let heap_4k = c.sizes.get(&thp_abi::FolioSize::from("4kB")).map(|e| e.folios).unwrap_or(0);
    if heap.start % (64 << 10) == 0 {
        assert_eq!(heap_4k, 0, "{c:?}");
    } else {
        assert_eq!(heap_4k, 16, "a heap not 64K-aligned gets base pages: {c:?}");
    }
    assert_eq!(r.process.anon_huge_bytes, 4 << 20);
    for c in &r.calls {
        if c.call == "brk" {
            assert_eq!(c.ret, format!("{:#x}", heap.start + (64 << 10)));
        } else {
            assert_eq!(c.ret, "0", "{c:?}");
        }
    }
    assert_eq!(r.calls.len(), 8);
}

#[test]
fn touch_of_unmapped_memory_names_the_line() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    let e = live("mmap a 1M at=0x7e0000000000\nmunmap a[0+64K]\n\ntouch a write\n", &["enabled=never"]).unwrap_err();
    let msg = e.to_string();
    assert!(msg.starts_with("<test>:4: ") && msg.contains("SIGSEGV"), "{msg}");
}

#[test]
fn failing_calls_are_reported_with_errno() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    // MADV_COLLAPSE on a range never faulted: no page table → EINVAL (P8); prctl → 0.
    let r = live("mmap a 2M at=0x7e0000000000\nprctl thp_disable except_advised\nmadvise a collapse\n", &[]).unwrap();
    assert_eq!(r.calls[1].call, "prctl(PR_SET_THP_DISABLE)");
    assert_eq!(r.calls[1].ret, "0", "{:?}", r.calls);
    assert_eq!(r.calls[2].call, "madvise(collapse)");
    assert_eq!(r.calls[2].ret, "EINVAL", "{:?}", r.calls);
}

#[test]
fn repeat_reports_median_and_spread() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    let w = workload::parse("<test>", "mmap a 1M at=0x7e0000000000\ntouch a write\n").unwrap();
    let r = run_live(&w, &settings(&["enabled=never", "hugepages-64kB/enabled=always"]), &[], &opts(3)).unwrap();
    assert_faults(&r, 16);
    let live = r.live.as_ref().and_then(|l| l.workload.as_ref()).unwrap();
    assert_eq!(live.runs, 3);
    let sp = live.spread["minflt"];
    assert!(sp.min <= sp.median && sp.median <= sp.max, "{sp:?}");
    assert!(!live.noise.note.is_empty());
}

#[test]
fn current_settings_match_a_fresh_read() {
    require_live!();
    let _s = serial();
    let s = current_settings(&Paths::from_env()).unwrap();
    assert_eq!(s.knob_map().into_iter().map(|(k, v)| (k.into(), v)).collect::<BTreeMap<String, String>>(), snapshot());
}

/// Census speed on 10 GiB (not part of the normal suite: it faults 10 GiB).
/// `cargo test -p live --test it -- --ignored census_speed --nocapture`
#[test]
#[ignore]
fn census_speed_10g() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    for (label, text, set) in [
        ("10G PMD THPs", "mmap a 10G at=0x7c0000000000\ntouch a write\n", &["enabled=always"][..]),
        ("10G mapped, 2.5G of 4K pages (stride 16K)", "mmap a 10G at=0x7c0000000000\ntouch a write stride=16K\n", &["enabled=never"][..]),
        ("10G mapped, 1G of 64K folios", "mmap a 10G at=0x7c0000000000\ntouch a[0+1G] write\n", &["enabled=never", "hugepages-64kB/enabled=always"][..]),
    ] {
        let r = live(text, set).unwrap();
        let l = r.live.as_ref().and_then(|l| l.workload.as_ref()).unwrap();
        eprintln!(
            "{label}: census {:.1} ms (pagemap {:.1} ms, kpageflags {:.1} ms in {} reads of {} PFNs), faults {}, folios {:?}",
            l.census_ms,
            l.census_pagemap_ms,
            l.census_kpageflags_ms,
            l.census_kpageflags_reads,
            l.census_kpageflags_pfns,
            r.process.minflt,
            r.folios
        );
    }
}

#[test]
fn mmap_collision_is_an_error_naming_the_line() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    let e = live("mmap a 1M at=0x7e0000000000\nmmap b 1M at=0x7e0000000000\n", &[]).unwrap_err().to_string();
    assert!(e.starts_with("<test>:2: ") && e.contains("EEXIST"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Shared memory: memfd, POSIX shm, tmpfs mounts (issue #5). Expected figures: the seed examples'
// own comments and kernel-thp.md §10 P13, P14, P17, read on this machine.

fn example(name: &str) -> workload::Workload {
    let path = format!("{}/../../examples/{name}.thpw", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    workload::parse(&path, &text).unwrap()
}

fn vmstat(r: &RunResult, name: &str) -> i64 {
    r.vmstat.get(name).copied().unwrap_or(0)
}

/// The POSIX shm objects runs left on the machine's /dev/shm for processes that are gone.
fn dead_shm_objects() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    n.strip_prefix("thplab-")
                        .and_then(|r| r.split_once('-'))
                        .and_then(|(p, _)| p.parse::<i32>().ok())
                        .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Mount points of this test process's runs that still exist.
fn our_mount_dirs() -> Vec<String> {
    let prefix = format!("{}-", std::process::id());
    std::fs::read_dir(Paths::from_env().state_dir.join("mnt"))
        .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with(&prefix)).collect())
        .unwrap_or_default()
}

#[test]
fn shm_seed_memfd_1g_base_pages_and_64k() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    let w = example("seed-shm-anon-1g");
    let r = run_live(&w, &settings(&[]), &[], &opts(1)).unwrap();
    assert_faults(&r, 262_144);
    assert_eq!(r.folios.get(&thp_abi::FolioSize::from("4kB")).copied(), Some(262_144), "{:?}", r.folios);
    assert_eq!(r.meminfo.get("ShmemHugePages").copied(), Some(0), "{:?}", r.meminfo);
    let r = run_live(&w, &settings(&["hugepages-64kB/shmem_enabled=always"]), &[], &opts(1)).unwrap();
    assert_faults(&r, 16_384);
    assert_eq!(mthp(&r, "hugepages-64kB", "shmem_alloc"), 16_384);
    assert_eq!(r.folios.get(&thp_abi::FolioSize::from("64kB")).copied(), Some(16_384), "{:?}", r.folios);
    let calls: Vec<&str> = r.calls.iter().map(|c| c.call.as_str()).collect();
    assert_eq!(calls, ["memfd_create", "ftruncate", "mmap"]);
    assert!(r.calls.iter().all(|c| c.ret == "0"), "{:?}", r.calls);
}

#[test]
fn shm_seed_memfd_1g_at_the_kernels_unaligned_address_gets_no_64k() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    let w = example("seed-shm-anon-1g-nohint");
    // Where the model (as the kernel's top-down search) puts it: 4 KiB-aligned only.
    let at = [uapi::result::RegionPlacement { name: "buf".into(), start: 0x7dff_bffc_5000, len: 1 << 30 }];
    let r = run_live(&w, &settings(&["hugepages-64kB/shmem_enabled=always"]), &at, &opts(1)).unwrap();
    assert_eq!(r.regions[0].start, 0x7dff_bffc_5000);
    assert_faults(&r, 262_144);
    assert_eq!(mthp(&r, "hugepages-64kB", "shmem_alloc"), 0);
}

#[test]
fn shm_seed_posix_1g_on_huge_always_tmpfs() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    make_huge_room(1 << 30);
    let r = run_live(&example("seed-shm-posix-1g"), &settings(&[]), &[], &opts(1)).unwrap();
    assert_faults(&r, 512);
    assert_eq!(vmstat(&r, "thp_file_alloc"), 512);
    assert_eq!(vmstat(&r, "thp_file_mapped"), 512);
    assert_eq!(mthp(&r, "hugepages-2048kB", "shmem_alloc"), 512);
    let c = r.census.sizes[&thp_abi::FolioSize::from("2048kB")];
    assert_eq!((c.folios, c.pmd_mapped), (512, 512), "{:?}", r.census);
    assert_eq!(r.meminfo.get("ShmemPmdMapped").copied(), Some(1 << 20), "{:?}", r.meminfo);
    assert_eq!(r.process.rss_bytes, 1 << 30);
    let calls: Vec<&str> = r.calls.iter().map(|c| c.call.as_str()).collect();
    assert_eq!(calls, ["mount(tmpfs)", "shm_open", "ftruncate", "mmap"]);
    assert!(our_mount_dirs().is_empty(), "{:?}", our_mount_dirs());
}

#[test]
fn shm_seed_tmpfs_write_1g() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    make_huge_room(1 << 30);
    let r = run_live(&example("seed-tmpfs-write"), &settings(&[]), &[], &opts(1)).unwrap();
    assert_faults(&r, 0);
    assert_eq!(mthp(&r, "hugepages-2048kB", "shmem_alloc"), 512);
    assert_eq!(vmstat(&r, "thp_file_alloc"), 512);
    assert_eq!(r.meminfo.get("ShmemHugePages").copied(), Some(1 << 20), "{:?}", r.meminfo);
    assert_eq!(r.calls.last().map(|c| (c.call.as_str(), c.ret.as_str())), Some(("pwrite", "0")));
}

#[test]
fn shm_touch_beyond_the_file_is_sigbus_with_the_line() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    let e = live("memfd m\nftruncate m 4K\nmmap b 64K file=m at=0x7e0000000000\n\ntouch b write\n", &[]).unwrap_err().to_string();
    assert!(e.starts_with("<test>:5: ") && e.contains("SIGBUS"), "{e}");
}

#[test]
fn shm_open_on_two_mounts_is_refused_naming_the_line() {
    require_live!();
    let e = live("tmpfs t huge=always\nshm_open a on=t\nshm_open b\n", &[]).unwrap_err().to_string();
    assert!(e.starts_with("<test>:3: ") && e.contains("/dev/shm"), "{e}");
}

#[test]
fn shm_mounts_and_objects_are_gone_after_a_run() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    let r = live(
        "tmpfs t huge=within_size\nfile f on=t\nwrite f[0+64K]\nshm_open s\nftruncate s 1M\nmmap b 1M file=s at=0x7e0000000000\ntouch b write\n",
        &[],
    )
    .unwrap();
    assert_faults(&r, 256);
    assert_eq!(mthp(&r, "hugepages-64kB", "shmem_alloc"), 1, "within_size: a 64 KiB write to an empty file (P14)");
    assert!(dead_shm_objects().is_empty(), "{:?}", dead_shm_objects());
    assert!(our_mount_dirs().is_empty(), "{:?}", our_mount_dirs());
}

/// The executor child of this process, once it runs (comm is truncated to 15 bytes).
fn our_child() -> Option<i32> {
    let me = std::process::id() as u64;
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        if probe::procfs::stat_field(&stat, 4) == Some(me) && stat.contains("(thplab-live-hel") {
            return Some(pid);
        }
    }
    None
}

#[test]
fn shm_mounts_and_objects_are_gone_after_sigkill_of_the_child() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    let text = "tmpfs t huge=never\nfile f on=t\nshm_open s\nftruncate s 2G\nmmap b 2G file=s at=0x7c0000000000\ntouch b write\n";
    let runner = std::thread::spawn(move || live(text, &[]));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mnt = Paths::from_env().state_dir.join("mnt");
    let mut killed = None;
    while killed.is_none() && std::time::Instant::now() < deadline && !runner.is_finished() {
        if let Some(pid) = our_child() {
            let mounts = std::fs::read_to_string(format!("/proc/{pid}/mounts")).unwrap_or_default();
            let mounted = mounts.lines().any(|l| l.starts_with("tmpfs ") && l.contains(mnt.to_str().unwrap()));
            let obj = std::path::Path::new(&format!("/dev/shm/thplab-{pid}-s")).exists();
            if mounted && obj {
                // Mid-run: the tmpfs is mounted in the child's namespace, the object exists.
                // SAFETY: kill of our own child.
                assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
                killed = Some(pid);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let res = runner.join().unwrap();
    let pid = killed.expect("never saw the child mid-run with its mount and shm object");
    let e = res.unwrap_err().to_string();
    assert!(e.contains("SIGKILL"), "{e}");
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "child {pid} not reaped");
    assert!(!std::path::Path::new(&format!("/dev/shm/thplab-{pid}-s")).exists(), "shm object left behind");
    assert!(our_mount_dirs().is_empty(), "{:?}", our_mount_dirs());
    // No namespace anywhere still holds the mount.
    let me = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(!me.contains(mnt.to_str().unwrap()), "{me}");
}

/// `thplab khugepaged`'s tracer on a target whose ranges khugepaged must treat in two known
/// ways (the helper's `__khugepaged_target`): A, 512 base pages written, collapses
/// (SCAN_SUCCEED); B, 256 written and 256 pte_none with max_ptes_none=0, fails with
/// SCAN_EXCEED_NONE_PTE (mm/khugepaged.c: hpage_collapse_scan_pmd). The tracer must learn
/// the target's mm and attribute both to its pid.
#[test]
fn khugepaged_trace_attributes_collapses_and_failures_to_the_target() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    let tracefs = match probe::khugepaged::tracefs_dir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("SKIPPED: {e}");
            return;
        }
    };
    let mut tracer = match probe::khugepaged::Tracer::start(&tracefs) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("SKIPPED: {e}");
            return;
        }
    };
    let s = settings(&[
        "enabled=madvise",
        "khugepaged/max_ptes_none=0",
        "khugepaged/scan_sleep_millisecs=50",
        "khugepaged/alloc_sleep_millisecs=50",
        "khugepaged/pages_to_scan=4096",
    ]);
    let guard = SettingsGuard::apply(&s).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_thplab-live-helper"))
        .arg("__khugepaged_target")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("ready "), "target said {line:?}");
    let a = u64::from_str_radix(line.split_whitespace().nth(1).unwrap().trim_start_matches("0x"), 16).unwrap();
    // Until A is PMD-mapped (khugepaged collapsed it), then one more second for B's scans.
    let t0 = std::time::Instant::now();
    let mut collapsed = false;
    while t0.elapsed() < std::time::Duration::from_secs(20) {
        tracer.learn_mms(Some(&[pid]));
        tracer.drain();
        let vmas = probe::procfs::read_smaps(pid).unwrap();
        if vmas.iter().any(|v| v.start <= a && a < v.end && v.pmd_mapped_kb() >= 2048) {
            collapsed = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    tracer.run_until(std::time::Instant::now() + std::time::Duration::from_secs(1), Some(&[pid]));
    let r = tracer.acc.report(t0.elapsed(), |p| Some(probe::procfs::comm(p)));
    drop(child.stdin.take());
    child.wait().unwrap();
    guard.restore().unwrap();
    drop(tracer);
    assert!(collapsed, "khugepaged did not collapse the target's range A within 20 s");
    let t = r.processes.iter().find(|p| p.pid == Some(pid)).unwrap_or_else(|| panic!("no activity attributed to the target {pid}: {r:#?}"));
    assert_eq!(t.collapses, 1, "A collapses once, B never: {t:#?}");
    assert!(t.scan_results.get("SCAN_SUCCEED").copied().unwrap_or(0) >= 1, "{t:#?}");
    assert!(t.scan_results.get("SCAN_EXCEED_NONE_PTE").copied().unwrap_or(0) >= 1, "B has 256 pte_none over max_ptes_none=0: {t:#?}");
    assert!(t.pmd_scans >= 2, "{t:#?}");
    assert_eq!(t.comm.as_deref(), Some("thplab-live-hel"), "comm is cut at 15 bytes");
    assert!(r.isolate_results.get("SCAN_SUCCEED").copied().unwrap_or(0) >= 1, "{r:#?}");
    let names: Vec<&str> = std::fs::read_dir(tracefs.join("instances")).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with("thplab-khugepaged")).map(|n| Box::leak(n.into_boxed_str()) as &str).collect();
    assert!(names.is_empty(), "the tracefs instance was not removed: {names:?}");
}

/// Start the agent's target; its pid and the addresses of A, B, C, D.
fn agent_target() -> (std::process::Child, i32, [u64; 4]) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_thplab-live-helper"))
        .arg("__agent_target")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let f: Vec<u64> = line.split_whitespace().skip(1).map(|x| u64::from_str_radix(x.trim_start_matches("0x"), 16).unwrap()).collect();
    assert_eq!(f.len(), 4, "target said {line:?}");
    let pid = child.id() as i32;
    (child, pid, [f[0], f[1], f[2], f[3]])
}

/// One agent run against a fresh `agent_target` under `enabled=never`, the target allowed by
/// pid, or by its comm with `by_name`.
struct AgentRun {
    /// The target's A, B, C and D.
    ranges: [u64; 4],
    summary: agent::Summary,
    log: Vec<agent::Action>,
    /// KiB of A, B and C mapped by PMDs when the run ended.
    pmd_after: [u64; 3],
}

fn run_agent_on_target(by_name: bool, budget: &agent::Budget, dry_run: bool, interval_ms: u64, duration_ms: u64) -> AgentRun {
    let guard = SettingsGuard::apply(&settings(&["enabled=never"])).unwrap();
    let (mut child, pid, ranges) = agent_target();
    let allow = if by_name {
        agent::Allowlist { pids: vec![], names: vec![probe::procfs::comm(pid)] }
    } else {
        agent::Allowlist { pids: vec![pid], names: vec![] }
    };
    let mut log = Vec::new();
    let interval = std::time::Duration::from_millis(interval_ms);
    let summary = agent::run(&allow, budget, dry_run, interval, std::time::Duration::from_millis(duration_ms), || false, |x| log.push(x.clone())).unwrap();
    let pmd_after = [ranges[0], ranges[1], ranges[2]].map(|x| pmd_kb_at(pid, x));
    drop(child.stdin.take());
    child.wait().unwrap();
    guard.restore().unwrap();
    AgentRun { ranges, summary, log, pmd_after }
}

/// The start of each range the agent's log shows with `action`, in log order.
fn starts(log: &[agent::Action], action: &str) -> Vec<u64> {
    log.iter().filter(|x| x.action == action).map(|x| u64::from_str_radix(x.start.as_deref().unwrap(), 16).unwrap()).collect()
}

/// KiB of a VMA holding `addr` mapped by PMDs.
fn pmd_kb_at(pid: i32, addr: u64) -> u64 {
    probe::procfs::read_smaps(pid).unwrap().iter().find(|v| v.start <= addr && addr < v.end).map(|v| v.anon_huge_kb).unwrap_or(0)
}

/// `thplab agent --dry-run` on a target with known ranges (the helper's `__agent_target`):
/// A and B (512 pages present) and C (256) are listed, D (64, below min_present 256) is not;
/// C would add 1 MiB (256 pages filled); nothing changes in the target.
#[test]
fn agent_dry_run_lists_the_ranges_it_would_collapse() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    let budget = agent::Budget { per_sec: 100.0, ..Default::default() };
    let AgentRun { ranges: [a, b, c, d], summary: s, log, pmd_after } = run_agent_on_target(false, &budget, true, 100, 5000);
    let listed: Vec<(u64, u64)> = log.iter().filter(|x| x.action == "would_collapse").map(|x| (u64::from_str_radix(x.start.as_deref().unwrap(), 16).unwrap(), x.adds_bytes.unwrap())).collect();
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(sorted, vec![(a, 0), (b, 0), (c, 1 << 20)], "log: {log:#?}");
    assert!(!listed.iter().any(|(x, _)| *x == d));
    assert_eq!((s.would_collapse, s.collapses, s.memory_added_bytes), (3, 0, 1 << 20));
    assert!(s.seconds < 2.0, "a dry run is one pass: {s:?}");
    assert_eq!(pmd_after, [0, 0, 0], "a dry run changes nothing");
}

/// `thplab agent` for real: at most 1 collapse per second, 2 in all... and no memory may be
/// added beyond 512 KiB. Cycle 1 collapses A (score 512, first of the A/B tie); a second later
/// B (hot: its VMA's Referenced is full after clear_refs, A's is PMD-mapped now); C (would add
/// 1 MiB) is refused by the memory budget; the census shows A and B as PMD THPs and C not.
#[test]
fn agent_collapses_within_its_budgets() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    let budget = agent::Budget { per_sec: 1.0, total: Some(3), memory_bytes: 512 << 10, cpu_fraction: 0.5, ..Default::default() };
    let AgentRun { ranges: [a, b, c, _d], summary: s, log, pmd_after } = run_agent_on_target(true, &budget, false, 200, 3500);
    assert_eq!(starts(&log, "collapse"), vec![a, b], "log: {log:#?}");
    assert_eq!(s.collapses, 2);
    assert!(s.max_collapses_in_a_second <= 1, "{s:?}");
    assert_eq!(s.memory_added_bytes, 0);
    assert!(log.iter().any(|x| x.action == "skip" && x.start.as_deref() == Some(&format!("{c:x}")) && x.reason.contains("memory budget")), "log: {log:#?}");
    assert_eq!(pmd_after, [2048, 2048, 0], "the census after the run");
    assert!(s.cpu_ms <= 0.5 * s.seconds * 1000.0 + 10.0 + 20.0, "{s:?}");
}

/// `thplab agent --dry-run` with the default budgets (1 collapse per second, 5 % of a CPU) lists
/// every range it would collapse, A, B and C, not only the one a real run would take in its first
/// second: the rate and CPU budgets pace a real run, and a one-pass dry run spends neither.
#[test]
fn agent_dry_run_lists_every_range_whatever_the_rate() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    let AgentRun { ranges: [a, b, c, _d], summary: s, log, .. } = run_agent_on_target(false, &agent::Budget::default(), true, 100, 5000);
    let mut listed = starts(&log, "would_collapse");
    listed.sort();
    assert_eq!(listed, vec![a, b, c], "log: {log:#?}");
    assert_eq!((s.would_collapse, s.collapses), (3, 0));
}

/// `--rate 2`: never more than 2 collapses begin within any second. A and B go at once (the
/// bucket holds one second's worth); C, the third, has to wait until a second after the first,
/// although the bucket refilling at 2/s would hold a token again after 0.5 s.
#[test]
fn agent_never_starts_more_collapses_in_a_second_than_its_rate() {
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    let budget = agent::Budget { per_sec: 2.0, total: Some(3), cpu_fraction: 0.5, ..Default::default() };
    let AgentRun { summary: s, log, pmd_after, .. } = run_agent_on_target(false, &budget, false, 200, 3500);
    assert_eq!(s.collapses, 3, "log: {log:#?}");
    assert!(s.max_collapses_in_a_second <= 2, "{s:?}, log: {log:#?}");
    assert_eq!(pmd_after, [2048, 2048, 2048], "the census after the run");
}

// ---------------------------------------------------------------------------------------------
// Census reads (issue #13 item 6): the sparse kpageflags reads give the census that reading
// every PFN's flags gives.

/// `len` bytes of private anonymous memory, 2 MiB-aligned, faulted (written, or read when
/// `read`) while `knobs` are held, then MADV_NOHUGEPAGE unless `keep_eligible` (so that
/// khugepaged leaves it alone after the guard restores the knobs).
fn fault_region(len: usize, knobs: &[&str], read: bool, shared: bool, keep_eligible: bool) -> (usize, usize) {
    let flags = if shared { libc::MAP_SHARED } else { libc::MAP_PRIVATE } | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len + (4 << 20), libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
    assert_ne!(p, libc::MAP_FAILED);
    let start = (p as usize).div_ceil(2 << 20) * (2 << 20);
    // Leave a page unmapped on either side, so that neighbouring regions never merge.
    unsafe {
        libc::munmap(p, start - p as usize);
        libc::munmap((start + len) as *mut libc::c_void, p as usize + len + (4 << 20) - start - len);
    }
    let guard = SettingsGuard::apply(&settings(knobs)).unwrap();
    for off in (0..len).step_by(4096) {
        let a = (start + off) as *mut u8;
        unsafe {
            if read {
                std::ptr::read_volatile(a);
            } else {
                std::ptr::write_volatile(a, 1);
            }
        }
    }
    guard.restore().unwrap();
    if !keep_eligible {
        assert_eq!(unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_NOHUGEPAGE) }, 0);
    }
    (start, start + len)
}

/// Drop the 4 KiB page at `at` (MADV_DONTNEED).
fn drop_page(at: usize) {
    assert_eq!(unsafe { libc::madvise(at as *mut libc::c_void, 4096, libc::MADV_DONTNEED) }, 0);
}

#[test]
fn census_sparse_reads_equal_every_pfn_read() {
    use probe::census::{census_of_ranges_with, Reads};
    require_live!();
    let _s = serial();
    let _k = KnobsUnchanged::new();
    const M: usize = 1 << 20;
    let never = "enabled=never";
    let mut regions = vec![
        // 4 KiB pages, and 4 KiB zero pages.
        fault_region(8 * M, &[never], false, false, false),
        fault_region(M, &[never], true, false, false),
        // 16 KiB and 64 KiB mTHPs.
        fault_region(16 * M, &[never, "hugepages-16kB/enabled=always"], false, false, false),
        fault_region(64 * M, &[never, "hugepages-64kB/enabled=always"], false, false, false),
        // PMD THPs, the huge zero folio.
        fault_region(32 * M, &["enabled=always"], false, false, true),
        fault_region(8 * M, &["enabled=always", "use_zero_page=1"], true, false, true),
        // 2 MiB then 64 KiB folios in one VMA (mixed orders in one run when PFNs follow).
        fault_region(3 * M + (64 << 10), &[never, "hugepages-64kB/enabled=always", "hugepages-2048kB/enabled=always"], false, false, false),
        // Shared anonymous memory (shmem: not counted on the spot).
        fault_region(2 * M, &[never], false, true, false),
    ];
    // Partially mapped folios: a page dropped from every 256th KiB of the 64 KiB region and
    // from one PMD THP (its PMD is split, the folio stays PTE-mapped).
    let (m64, m64_end) = regions[3];
    for at in (m64..m64_end).step_by(256 << 10) {
        drop_page(at + (16 << 10));
    }
    drop_page(regions[4].0 + 5 * M + 4096);
    // Moved folios: 1 MiB of 64 KiB folios remapped one page off their alignment.
    let dst = unsafe { libc::mmap(std::ptr::null_mut(), 4 * M, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) } as usize;
    let to = dst.div_ceil(2 * M) * 2 * M + 4096;
    let moved = unsafe { libc::mremap((m64 + 8 * M) as *mut libc::c_void, M, M, libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED, to as *mut libc::c_void) };
    assert_eq!(moved as usize, to);
    regions.push((dst, dst + 4 * M));

    let pid = std::process::id() as i32;
    let ranges: Vec<(u64, u64)> = regions.iter().map(|&(a, b)| (a as u64, b as u64)).collect();
    let mut found = None;
    for _ in 0..3 {
        // Every, sparse, on demand, every: retried when something (khugepaged, a split)
        // changed meanwhile.
        let vmas = probe::procfs::read_smaps(pid).unwrap();
        let e1 = census_of_ranges_with(pid, &ranges, &vmas, Reads::Every).unwrap();
        let s = census_of_ranges_with(pid, &ranges, &vmas, Reads::Sparse).unwrap();
        let d = census_of_ranges_with(pid, &ranges, &vmas, Reads::OnDemand).unwrap();
        let e2 = census_of_ranges_with(pid, &ranges, &vmas, Reads::Every).unwrap();
        if (&e1.total, &e1.per_vma, &e1.large_ranges) == (&e2.total, &e2.per_vma, &e2.large_ranges) {
            found = Some((e1, s, d));
            break;
        }
    }
    let (e, s, d) = found.expect("the census kept changing");
    for (name, x) in [("sparse", &s), ("on demand", &d)] {
        assert_eq!(x.total, e.total, "{name}");
        assert_eq!(x.per_vma, e.per_vma, "{name}");
        assert_eq!(x.large_ranges, e.large_ranges, "{name}");
        assert_eq!((x.pages_scanned, x.present_pages), (e.pages_scanned, e.present_pages), "{name}");
    }
    eprintln!("kpageflags PFNs read: every {}, sparse {}, on demand {}", e.kpageflags_pfns, s.kpageflags_pfns, d.kpageflags_pfns);
    assert!(s.kpageflags_pfns < e.kpageflags_pfns && d.kpageflags_pfns < s.kpageflags_pfns, "PFNs read");
    // With 1 GiB never touched among the ranges, pagemap is read on a second thread: the
    // same census.
    let big = unsafe { libc::mmap(std::ptr::null_mut(), 1 << 30, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0) } as usize;
    assert_ne!(big as *mut libc::c_void, libc::MAP_FAILED);
    let mut with_big = ranges.clone();
    with_big.push((big as u64, big as u64 + (1 << 30)));
    let vmas = probe::procfs::read_smaps(pid).unwrap();
    let t = census_of_ranges_with(pid, &with_big, &vmas, Reads::Sparse).unwrap();
    let u = census_of_ranges_with(pid, &ranges, &vmas, Reads::Sparse).unwrap();
    assert!(t.pages_scanned > 2 * 65536, "{}", t.pages_scanned);
    assert_eq!((&t.total, &t.per_vma, &t.large_ranges), (&u.total, &u.per_vma, &u.large_ranges), "threaded");
    assert_eq!(t.total, e.total, "threaded");
    unsafe { libc::munmap(big as *mut libc::c_void, 1 << 30) };
    // The mix is there.
    let c = &s.total;
    for size in ["4kB", "16kB", "64kB", "2048kB"] {
        assert!(c.sizes.get(&thp_abi::FolioSize::from(size)).is_some_and(|e| e.folios > 0), "no {size} folios: {c:?}");
    }
    assert!(c.sizes[&thp_abi::FolioSize::from("2048kB")].pmd_mapped >= 14, "{c:?}");
    assert!(c.sizes[&thp_abi::FolioSize::from("2048kB")].partially_mapped >= 1, "{c:?}");
    assert!(c.sizes[&thp_abi::FolioSize::from("64kB")].partially_mapped >= 200, "{c:?}");
    assert!(c.zero_page_ptes >= 256 && c.huge_zero_pmds >= 1, "{c:?}");
    for (a, b) in regions {
        unsafe { libc::munmap(a as *mut libc::c_void, b - a) };
    }
}
