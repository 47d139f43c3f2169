//! `explain` on processes with known layouts (started here, under knobs set through the
//! settings guard): the reason named for each refused order, THPeligible agreement, and the
//! census beside it equal to `observe`'s. Skips without root or without the THP sysfs tree.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use live::guard::SettingsGuard;
use live::sysfs::Paths;

const TARGET: &str = env!("CARGO_BIN_EXE_thplab-explain-target");

/// The tests set knobs: one at a time (each reads the knobs it starts from).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn skip_reason() -> Option<String> {
    Paths::from_env().check_available().err().map(|e| e.to_string())
}

/// A running target and the range it mapped.
struct Target {
    child: Child,
    start: u64,
    end: u64,
}

impl Target {
    fn start(mode: &str) -> Target {
        Target::start_with(&[mode])
    }
    fn start_with(args: &[&str]) -> Target {
        let mode = args[0];
        let mut child = Command::new(TARGET).args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("spawn target");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.first(), Some(&"ready"), "target {mode} said '{line}'");
        Target { start: u64::from_str_radix(f[1], 16).unwrap(), end: u64::from_str_radix(f[2], 16).unwrap(), child }
    }
    fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
        let _ = std::fs::remove_dir(format!("/tmp/thplab-explain-{}", self.child.id()));
    }
}

/// Explain the target's region: (size → (fault, khugepaged)) and the VMA's census, checked
/// against `observe` and THPeligible.
fn explain(t: &Target) -> (std::collections::BTreeMap<String, (String, String)>, thp_abi::Census) {
    let r = explain::explain_pid(t.pid(), Some(t.start)).unwrap();
    assert_eq!(r.vmas.len(), 1);
    let v = &r.vmas[0];
    assert_eq!(u64::from_str_radix(&v.start, 16).unwrap(), t.start);
    assert_eq!(u64::from_str_radix(&v.end, 16).unwrap(), t.end);
    assert_eq!(v.thp_eligible_kernel, v.thp_eligible_model, "THPeligible kernel vs model: {v:?}");
    let obs = probe::observe::observe(t.pid()).unwrap();
    let ov = obs.vmas.iter().find(|o| o.start == v.start).expect("observe has the VMA");
    assert_eq!(ov.census, v.census, "explain's census differs from observe's");
    (v.orders.iter().map(|l| (l.size.clone(), (l.fault.clone(), l.khugepaged.clone()))).collect(), v.census.clone())
}

fn pair(a: &str, b: &str) -> (String, String) {
    (a.to_string(), b.to_string())
}

fn folios(c: &thp_abi::Census, size: &str) -> u64 {
    c.sizes.get(&thp_abi::FolioSize::from(size)).map(|e| e.folios).unwrap_or(0)
}

#[test]
fn explain_names_the_reasons_on_live_processes() {
    if let Some(r) = skip_reason() {
        eprintln!("SKIPPED: {r}");
        return;
    }
    let _s = serial();
    // From the kernel's defaults, not from the knobs as they are now: another process's guard
    // may hold other sizes enabled until this one takes the lock.
    let mut s = thp_abi::ThpSettings::default();
    for a in [
        "enabled=madvise",
        "hugepages-2048kB/enabled=inherit",
        "hugepages-64kB/enabled=always",
        "hugepages-32kB/enabled=never",
        "shmem_enabled=never",
        "hugepages-2048kB/shmem_enabled=inherit",
        "hugepages-64kB/shmem_enabled=always",
    ] {
        s.apply_assignment(a).unwrap();
    }
    let guard = SettingsGuard::apply(&s).unwrap();

    // A plain anonymous heap under madvise: PMD needs MADV_HUGEPAGE, 64K is `always`.
    let t = Target::start("anon");
    let (o, c) = explain(&t);
    assert_eq!(o["2048kB"], pair("inherit_top_madvise_not_advised", "inherit_top_madvise_not_advised"));
    assert_eq!(o["64kB"], pair("allowed", "khugepaged_pmd_only"));
    assert_eq!(o["32kB"], pair("size_never", "khugepaged_pmd_only"));
    assert_eq!(folios(&c, "64kB"), 128, "8 MiB in 64 KiB folios: {c:?}");
    drop(t);

    // MADV_HUGEPAGE: PMD at fault and for khugepaged; 4 PMD-mapped THPs.
    let t = Target::start("hugepage");
    let (o, c) = explain(&t);
    assert_eq!(o["2048kB"], pair("allowed", "allowed"));
    assert_eq!((folios(&c, "2048kB"), c.sizes[&thp_abi::FolioSize::from("2048kB")].pmd_mapped), (4, 4), "{c:?}");
    drop(t);

    // A MADV_NOHUGEPAGE arena: 64K passes the sysfs mask and is refused for VM_NOHUGEPAGE.
    let t = Target::start("nohugepage");
    let (o, c) = explain(&t);
    assert_eq!(o["64kB"], pair("vm_no_hugepage", "khugepaged_pmd_only"));
    assert_eq!(o["2048kB"].0, "inherit_top_madvise_not_advised");
    assert_eq!(folios(&c, "4kB"), 2048, "{c:?}");
    drop(t);

    // PR_SET_THP_DISABLE: THP_enabled 0.
    let t = Target::start("prctl");
    let (o, c) = explain(&t);
    assert_eq!(o["64kB"], pair("prctl_disabled", "khugepaged_pmd_only"));
    assert_eq!(folios(&c, "4kB"), 2048, "{c:?}");
    assert_eq!(explain::explain_pid(t.pid(), None).unwrap().prctl, "disable_thp_completely");
    drop(t);

    // PR_THP_DISABLE_EXCEPT_ADVISED with MADV_HUGEPAGE on the region: allowed, and inferred
    // from the other VMAs' THPeligible only when one of them depends on it (here none does
    // under enabled=madvise), so nothing is asserted about the inference.
    let t = Target::start("except-advised");
    let (o, _) = explain(&t);
    assert_eq!(o["2048kB"], pair("allowed", "allowed"));
    drop(t);

    // A memfd: per-size shmem knobs; top-level shmem_enabled=never turns `inherit` off.
    let t = Target::start("memfd");
    let (o, c) = explain(&t);
    assert_eq!(o["64kB"].0, "allowed");
    assert_eq!(o["2048kB"], pair("shmem_inherit_top_off", "shmem_inherit_top_off"));
    assert_eq!(o["8kB"].0, "shmem_size_never");
    assert_eq!(folios(&c, "64kB"), 128, "{c:?}");
    drop(t);

    // Files on tmpfs mounts with huge=: the mount decides, PMD only for mappings.
    let t = Target::start("tmpfs=within_size");
    let (o, c) = explain(&t);
    assert_eq!(o["2048kB"], pair("allowed", "allowed"));
    assert_eq!(o["64kB"].0, "shmem_mapped_pmd_only");
    assert_eq!(folios(&c, "2048kB"), 4, "{c:?}");
    drop(t);
    let t = Target::start("tmpfs=never");
    let (o, c) = explain(&t);
    assert_eq!(o["2048kB"], pair("shmem_mount_never", "shmem_mount_never"));
    assert_eq!(folios(&c, "4kB"), 2048, "{c:?}");
    drop(t);

    guard.restore().unwrap();
}

/// One byte written per 2 MiB under PMD `always`: each THP holds 511 zero-filled pages, so the
/// bloat is 2044 KiB per touched byte and the RSS with 4 KiB pages is one page per byte.
#[test]
fn observe_shows_the_bloat_of_one_byte_per_2m() {
    if let Some(r) = skip_reason() {
        eprintln!("SKIPPED: {r}");
        return;
    }
    let _s = serial();
    let mut s = thp_abi::ThpSettings::default();
    s.apply_assignment("enabled=always").unwrap();
    s.apply_assignment("hugepages-2048kB/enabled=inherit").unwrap();
    let guard = SettingsGuard::apply(&s).unwrap();
    let t = Target::start_with(&["anon", "64", "2048"]);
    guard.restore().unwrap();
    let find = |r: &probe::observe::ObserveReport| r.vmas.iter().find(|v| u64::from_str_radix(&v.start, 16).unwrap() == t.start).cloned().unwrap();
    // A budget large enough to read every page: exact.
    let r = probe::observe::observe_with(t.pid(), Some(std::time::Duration::from_secs(30))).unwrap();
    let v = find(&r);
    let thps = v.census.sizes.get(&thp_abi::FolioSize::from("2048kB")).map(|e| e.folios).unwrap_or(0);
    assert!(thps >= 28, "expected ~32 THPs (allocation may fail for a few): {:?}", v.census);
    let b = v.bloat.clone().unwrap();
    assert_eq!(b.large_kb, thps * 2048);
    assert_eq!(b.sampled_pages, thps * 512, "every page read");
    assert_eq!(b.zero_kb, thps * 2044, "511 zero pages per THP: {b:?}");
    assert_eq!(b.zero_kb_error, 0);
    // Rss with 4 KiB pages: one page per touched byte (the THPs' touched pages plus the
    // 4 KiB pages of any 2 MiB block that fell back).
    assert_eq!(b.rss_4k_kb, 32 * 4, "{b:?} rss {}", v.rss_kb);
    assert!(!r.bloat.as_ref().unwrap().sampled);
    // A tiny budget: sampled, and the estimate within its error (widened for p near 1).
    let r = probe::observe::observe_with(t.pid(), Some(std::time::Duration::from_millis(1))).unwrap();
    let b = find(&r).bloat.unwrap();
    assert!(b.sampled_pages < thps * 512);
    let truth = (thps * 2044) as i64;
    assert!((b.zero_kb as i64 - truth).abs() as u64 <= 3 * b.zero_kb_error + b.large_kb / 50, "{b:?} vs {truth}");
    drop(t);
}
