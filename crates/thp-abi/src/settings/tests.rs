use super::*;
use expect_test::expect;

#[test]
fn defaults_print_as_a_settings_file() {
    // Values read from this machine's /sys/kernel/mm/transparent_hugepage at first boot (6.18.44).
    let text = ThpSettings::default().to_string();
    expect![[r#"
        hugepages-8kB/shmem_enabled=never
        hugepages-16kB/enabled=never
        hugepages-16kB/shmem_enabled=never
        hugepages-32kB/enabled=never
        hugepages-32kB/shmem_enabled=never
        hugepages-64kB/enabled=never
        hugepages-64kB/shmem_enabled=never
        hugepages-128kB/enabled=never
        hugepages-128kB/shmem_enabled=never
        hugepages-256kB/enabled=never
        hugepages-256kB/shmem_enabled=never
        hugepages-512kB/enabled=never
        hugepages-512kB/shmem_enabled=never
        hugepages-1024kB/enabled=never
        hugepages-1024kB/shmem_enabled=never
        hugepages-2048kB/enabled=inherit
        hugepages-2048kB/shmem_enabled=inherit
        enabled=madvise
        defrag=madvise
        shmem_enabled=never
        use_zero_page=1
        shrink_underused=1
        khugepaged/defrag=1
        khugepaged/max_ptes_none=511
        khugepaged/max_ptes_swap=64
        khugepaged/max_ptes_shared=256
        khugepaged/pages_to_scan=4096
        khugepaged/scan_sleep_millisecs=10000
        khugepaged/alloc_sleep_millisecs=60000
    "#]]
    .assert_eq(&text);
    // The printed form reads back to the same settings.
    let mut s = ThpSettings::default();
    s.enabled = TopEnabled::Never;
    s.apply_file("defaults", &text).unwrap();
    assert_eq!(s, ThpSettings::default());
}

#[test]
fn set_accepts_kernel_paths_and_refuses_what_the_kernel_refuses() {
    let mut s = ThpSettings::default();
    s.set("hugepages-64kB/enabled", "always").unwrap();
    s.set("/sys/kernel/mm/transparent_hugepage/enabled", "never\n").unwrap();
    s.set("hugepages-16kB", "madvise").unwrap();
    assert_eq!(s.anon[4], AnonEnabled::Always);
    assert_eq!(s.anon[2], AnonEnabled::Madvise);
    assert_eq!(s.enabled, TopEnabled::Never);

    // 6.18 has no hugepages-8kB/enabled: order 1 is not an anonymous THP order.
    let e = s.set("hugepages-8kB/enabled", "always").unwrap_err();
    assert!(matches!(e, SettingsError::UnknownPath { .. }));
    assert!(e.to_string().contains("hugepages-64kB/enabled"), "{e}");
    let e = s.set("hugepages-64kB/enabled", "sometimes").unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid value 'sometimes' for 'hugepages-64kB/enabled'; valid values are: always, inherit, madvise, never"
    );
    let e = s.set("khugepaged/max_ptes_none", "512").unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid value '512' for 'khugepaged/max_ptes_none'; valid values are: an integer from 0 to 511"
    );
    assert!(matches!(s.set("khugepaged/pages_to_scan", "0"), Err(SettingsError::InvalidValue { .. })));
    assert!(matches!(s.set("hpage_pmd_size", "4096"), Err(SettingsError::ReadOnly { .. })));
    assert!(matches!(s.set("hugepages-48kB/enabled", "always"), Err(SettingsError::UnknownPath { .. })));
    // shmem_enabled=force needs the per-size inherit set to be exactly PMD (shmem_parse_huge).
    s.set("hugepages-64kB/shmem_enabled", "inherit").unwrap();
    assert!(s.set("shmem_enabled", "force").is_err());
    s.set("hugepages-64kB/shmem_enabled", "never").unwrap();
    s.set("shmem_enabled", "force").unwrap();
}

#[test]
fn sysfs_dump_is_a_settings_file() {
    // Lines as `grep -r . /sys/kernel/mm/transparent_hugepage` prints them on this machine.
    let dump = "\
/sys/kernel/mm/transparent_hugepage/hugepages-64kB/enabled:always inherit madvise [never]
/sys/kernel/mm/transparent_hugepage/hugepages-64kB/stats/anon_fault_alloc:16384
/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled:[always] inherit madvise never
/sys/kernel/mm/transparent_hugepage/enabled:always madvise [never]
/sys/kernel/mm/transparent_hugepage/hpage_pmd_size:2097152
/sys/kernel/mm/transparent_hugepage/khugepaged/max_ptes_none:0
/sys/kernel/mm/transparent_hugepage/khugepaged/full_scans:12
";
    let mut s = ThpSettings::default();
    s.apply_file("dump.txt", dump).unwrap();
    assert_eq!(s.anon[9], AnonEnabled::Always);
    assert_eq!(s.enabled, TopEnabled::Never);
    assert_eq!(s.khugepaged.max_ptes_none, 0);
}

#[test]
fn file_errors_name_file_and_line() {
    let mut s = ThpSettings::default();
    let e = s.apply_file("my.thp", "# comment\nenabled=always\n\nhugepages-64kB/enabled=yes\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "my.thp:4: invalid value 'yes' for 'hugepages-64kB/enabled'; valid values are: always, inherit, madvise, never"
    );
    let e = s.apply_file("my.thp", "enabled always\n").unwrap_err();
    assert!(e.to_string().starts_with("my.thp:1: 'enabled always' is not of the form PATH=VALUE"), "{e}");
}

#[test]
fn cmdline_options_follow_setup_thp_anon() {
    let mut s = ThpSettings::default();
    s.apply_cmdline("BOOT_IMAGE=/vmlinuz ro transparent_hugepage=always thp_anon=16K-64K:always;128K,512K:inherit;2M:never")
        .unwrap();
    assert_eq!(s.enabled, TopEnabled::Always);
    assert_eq!(s.anon_orders(AnonEnabled::Always).iter_desc().map(|o| o.0).collect::<Vec<_>>(), [4, 3, 2]);
    assert_eq!(s.anon_orders(AnonEnabled::Inherit).iter_desc().map(|o| o.0).collect::<Vec<_>>(), [7, 5]);
    // thp_anon= given: PMD is no longer inherit by default.
    assert_eq!(s.anon[9], AnonEnabled::Never);
    let e = s.apply_cmdline("thp_anon=8K:always").unwrap_err();
    assert!(e.to_string().contains("valid sizes are 16K, 32K, 64K, 128K, 256K, 512K, 1M, 2M"), "{e}");
    assert!(s.apply_cmdline("thp_anon=64K:sometimes").is_err());
    assert!(s.apply_cmdline("transparent_hugepage=on").is_err());
    s.apply_cmdline("thp_shmem=8K:always").unwrap();
    assert_eq!(s.shmem[1], ShmemSizeEnabled::Always);
}

#[test]
fn a_dump_with_knobs_of_another_build_is_carried_not_refused() {
    // This machine kind's kernel (6.18.44-fc) has anon_beside_full, which the model knows, and
    // a future build may have others: they are carried and named, never fatal.
    let dump = "./enabled:always [madvise] never\n./anon_beside_full:1\n./some_future_knob:[on] off\n./khugepaged/new_limit:7\n";
    let mut s = ThpSettings::default();
    s.apply_file("dump", dump).unwrap();
    assert_eq!(s.anon_beside_full, Some(true));
    assert_eq!(s.unknown.get("some_future_knob").map(String::as_str), Some("on"));
    assert_eq!(s.unknown.get("khugepaged/new_limit").map(String::as_str), Some("7"));
    let w = s.unknown_warning().unwrap();
    assert!(w.contains("some_future_knob=on") && w.contains("khugepaged/new_limit=7"), "{w}");
    // Printed as a settings file that reads back to the same settings.
    let mut back = ThpSettings::default();
    back.apply_file("printed", &s.to_string()).unwrap();
    assert_eq!(back, s);
    // A known knob with a bad value is still an error, with its line.
    let e = ThpSettings::default().apply_file("dump", "./enabled:always\n./anon_beside_full:2\n").unwrap_err();
    assert_eq!(e.to_string(), "dump:2: invalid value '2' for 'anon_beside_full'; valid values are: 0, 1");
    // --set keeps refusing unknown paths: a typo is not a knob.
    assert!(matches!(ThpSettings::default().apply_assignment("enabeld=always"), Err(SettingsError::UnknownPath { .. })));
}

#[test]
fn anon_beside_full_is_a_build_knob() {
    let s = ThpSettings::default();
    assert_eq!(s.anon_beside_full, None);
    assert!(!s.knob_map().contains_key("anon_beside_full"), "upstream settings do not name it");
    assert_eq!(s.upstream_build_knobs(), vec![("anon_beside_full".to_string(), "0".to_string())]);
    let mut t = ThpSettings::default();
    t.set("anon_beside_full", "1").unwrap();
    assert_eq!(t.knob_map()["anon_beside_full"], "1");
    assert!(t.upstream_build_knobs().is_empty());
    assert!(ThpSettings::valid_paths().contains(&"anon_beside_full".to_string()));
}

#[test]
fn a_dump_line_with_two_choices_is_refused() {
    let e = ThpSettings::default().apply_file("f", "enabled:[always] [madvise] never\n").unwrap_err();
    assert!(e.to_string().starts_with("f:1: invalid value '[always] [madvise] never' for 'enabled'"), "{e}");
}

#[test]
fn a_misspelt_knob_in_a_settings_file_is_an_error_naming_the_known_one() {
    // Issue #27 item 11: the same typo as `--set enable=always`, which is an error, only warned.
    let err = |text: &str| ThpSettings::default().apply_file("my.settings", text).unwrap_err().to_string();
    let tail = "(a knob of another kernel build is carried from a dump of its tree, `grep -r . /sys/kernel/mm/transparent_hugepage`, not from a PATH=VALUE line that misspells a knob of 6.18)";
    assert_eq!(err("# mine\nenable=always\n"), format!("my.settings:2: unknown setting 'enable'; did you mean 'enabled'? {tail}"));
    assert_eq!(err("hugepages-64KB/enabled=always\n"), format!("my.settings:1: unknown setting 'hugepages-64KB/enabled'; did you mean 'hugepages-64kB/enabled'? {tail}"));
    assert_eq!(err("enabled=always\nkhugepaged/max_ptes_nnoe=0\n"), format!("my.settings:2: unknown setting 'khugepaged/max_ptes_nnoe'; did you mean 'khugepaged/max_ptes_none'? {tail}"));
    assert_eq!(err("Shmem_Enabled=always\n"), format!("my.settings:1: unknown setting 'Shmem_Enabled'; did you mean 'shmem_enabled'? {tail}"));
    // Knobs of other builds stay accepted and carried: far from every known path, another
    // architecture's size, and anything in a `grep -r` dump of a live tree.
    let mut s = ThpSettings::default();
    s.apply_file("my.settings", "some_future_knob=on\nhugepages-4096kB/enabled=always\nhugepages-8kB/enabled=never\n").unwrap();
    assert_eq!(s.unknown.len(), 3, "{:?}", s.unknown);
    let mut s = ThpSettings::default();
    s.apply_file("dump", "./enable:[always] never\n/sys/kernel/mm/transparent_hugepage/hugepages-64KB/enabled:always\n").unwrap();
    assert_eq!(s.unknown.get("enable").map(String::as_str), Some("always"));
    assert_eq!(s.unknown.get("hugepages-64KB/enabled").map(String::as_str), Some("always"));
    // A tree read as PATH=VALUE lines carries them too, and so does a printed file read back.
    let mut t = ThpSettings::default();
    t.apply_tree("tree", "enable=always\n").unwrap();
    assert_eq!(t.unknown.get("enable").map(String::as_str), Some("always"));
    let mut back = ThpSettings::default();
    back.apply_file("printed", &t.to_string()).unwrap();
    assert_eq!(back, t);
}

#[test]
fn a_byte_order_mark_at_the_start_is_skipped() {
    let mut s = ThpSettings::default();
    s.apply_file("bom.settings", "\u{feff}enabled=always\n").unwrap();
    assert_eq!(s.enabled, TopEnabled::Always);
    assert!(s.unknown.is_empty());
}

/// `kernel =` and `policy =` lines: read, printed back only when not 6.18's, never knobs; a bad
/// one names the file, the line and what is valid.
#[test]
fn kernel_and_policy_lines_are_settings_not_knobs() {
    let mut s = ThpSettings::default();
    s.apply_file("v.conf", "kernel = 7.2\npolicy = mthp-collapse-v18:scaled=1\nenabled=always\n").unwrap();
    assert_eq!(s.kernel, crate::KernelVersion::V7_2);
    assert_eq!(s.policy.map(|p| p.to_string()).as_deref(), Some("mthp-collapse-v18:scaled=1"));
    assert!(!s.knobs().iter().any(|(p, _)| p == "kernel" || p == "policy"), "never written to sysfs");
    let text = s.to_string();
    assert!(text.contains("kernel=7.2\npolicy=mthp-collapse-v18:scaled=1\n"), "{text}");
    let mut back = ThpSettings::default();
    back.apply_file("back", &text).unwrap();
    assert_eq!(back, s);
    assert!(!ThpSettings::default().to_string().contains("kernel="), "6.18 prints nothing");
    let e = ThpSettings::default().apply_file("v.conf", "enabled=always\nkernel=7.1\n").unwrap_err().to_string();
    assert!(e.starts_with("v.conf:2:") && e.contains("'7.1'") && e.contains("6.18") && e.contains("7.2"), "{e}");
    let e = ThpSettings::default().apply_file("p.conf", "policy=hints\n").unwrap_err().to_string();
    assert!(e.starts_with("p.conf:1:") && e.contains("unknown policy 'hints'") && e.contains("mthp-collapse-v18"), "{e}");
    s.set("policy", "none").unwrap();
    assert_eq!(s.policy, None);
}
