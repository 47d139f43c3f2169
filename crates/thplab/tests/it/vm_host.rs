//! The host side of a VM and FHPM (issue #33 items 4 and 5, docs/vm-host.md): the `fhpm-vm`
//! study under plain host THP and under FHPM, with values derived by hand. Model-only.

use crate::thplab;

fn vm_host(extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["sim", "fhpm-vm", "--json", "--set", "enabled=always"];
    args.extend_from_slice(extra);
    let r = thplab(&args);
    r.ok();
    r.json()
}

/// `fhpm-vm`: `hot` is 16 MiB (8 host 2 MiB ranges), `cold` 128 MiB (64 ranges) with one
/// stored base page per 2 MiB. Under plain host THP every range faults in as a host PMD: 72
/// 2 MiB faults, 72 EPT violations, 144 MiB resident; every window the 64 cold huge pages look
/// hot with 511 cold base pages each: 64 × 511 = 32 704 pages of hot bloat. Under FHPM (10 ms
/// windows) each cold huge page is found young, monitored through a companion table, and
/// split (PSR 1 per mille): its 511 never-stored base pages are freed, 64 × 511 = 32 704,
/// leaving 8 huge ranges and 64 base pages: 16 MiB + 256 KiB resident; the 64 kept entries
/// were filled ahead, and the guest's next store to each saves an exit. Without `--host`, no
/// `vm_host` and native paging, as before.
#[test]
fn fhpm_vm_study_plain_host_thp_against_fhpm() {
    let plain = vm_host(&["--host", "enabled=always", "--host", "window_ms=10"]);
    let h = &plain["vm_host"];
    assert_eq!(h["model_only"], true);
    assert_eq!((h["faults_2m"].as_u64(), h["ept_violations"].as_u64()), (Some(72), Some(72)));
    assert_eq!(h["resident_bytes"].as_u64(), Some(144 << 20));
    assert_eq!(h["hot_bloat_max"].as_u64(), Some(64 * 511));
    assert_eq!((h["splits"].as_u64(), h["freed_pages"].as_u64()), (Some(0), Some(0)));
    assert_eq!(plain["accesses"]["paging"], "nested-2m");
    let fhpm = vm_host(&["--host", "enabled=always", "--policy", "fhpm:window_ms=10"]);
    let f = &fhpm["vm_host"];
    assert_eq!(f["policy"], "fhpm:window_ms=10");
    assert_eq!((f["splits"].as_u64(), f["freed_pages"].as_u64()), (Some(64), Some(64 * 511)));
    assert_eq!(f["resident_bytes"].as_u64(), Some((16 << 20) + 64 * 4096));
    assert_eq!(f["peak_resident_bytes"].as_u64(), Some(144 << 20));
    assert_eq!(f["exits_saved"].as_u64(), Some(64));
    assert!(f["hot_bloat_ratio"].as_f64() < h["hot_bloat_ratio"].as_f64(), "{f} {h}");
    // The split cold ranges are walked on host 4 KiB pages: more TLB misses than under plain THP.
    assert!(fhpm["accesses"]["total"]["walks"].as_u64() > plain["accesses"]["total"]["walks"].as_u64());
    let none = vm_host(&[]);
    assert!(none.get("vm_host").is_none());
    assert_eq!(none["accesses"]["paging"], "native");
}
