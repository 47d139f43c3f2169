//! No-panic fuzzing of the settings parsers: `ThpSettings::apply_file` gives Ok or an error
//! whose message starts with `FILE:LINE:`; `apply_cmdline` and `apply_assignment` give Ok or an
//! error. Inputs are random strings and "token soups" built from the tree's own paths and values
//! and the kernel command-line options, so that most of them get deep into the parsers. A
//! setting that is accepted must also survive a round trip through its `PATH=VALUE` text.

use proptest::prelude::*;
use proptest::test_runner::Config;
use thp_abi::settings::SettingsError;
use thp_abi::ThpSettings;

const FILE: &str = "fuzz.settings";

fn check_file(text: &str) -> Result<(), TestCaseError> {
    let mut s = ThpSettings::default();
    match s.apply_file(FILE, text) {
        Ok(()) => check_round_trip(&s)?,
        Err(e) => {
            let msg = e.to_string();
            let rest = msg.strip_prefix(&format!("{FILE}:"));
            prop_assert!(rest.is_some(), "error does not start with the file: {msg}");
            let (line, _) = rest.unwrap().split_once(": ").unwrap_or(("", ""));
            let line: usize = line.parse().map_err(|_| TestCaseError::fail(format!("no line number in: {msg}")))?;
            prop_assert!(line >= 1 && line <= text.lines().count(), "line {line} out of range in: {msg}");
            let at_line = matches!(e, SettingsError::AtLine { .. });
            prop_assert!(at_line, "not an AtLine error: {:?}", e);
        }
    }
    Ok(())
}

fn check_cmdline(text: &str) -> Result<(), TestCaseError> {
    let mut s = ThpSettings::default();
    match s.apply_cmdline(text) {
        Ok(()) => check_round_trip(&s)?,
        Err(e) => prop_assert!(!e.to_string().is_empty()),
    }
    Ok(())
}

fn check_assignment(text: &str) -> Result<(), TestCaseError> {
    let mut s = ThpSettings::default();
    match s.apply_assignment(text) {
        Ok(()) => check_round_trip(&s)?,
        Err(e) => prop_assert!(!e.to_string().is_empty()),
    }
    Ok(())
}

/// Whatever was accepted prints as a settings file that reads back to the same settings.
fn check_round_trip(s: &ThpSettings) -> Result<(), TestCaseError> {
    let mut back = ThpSettings::default();
    let text = s.to_string();
    prop_assert_eq!(back.apply_file("round-trip", &text), Ok(()), "{}", text);
    prop_assert_eq!(&back, s);
    Ok(())
}

fn path() -> impl Strategy<Value = String> {
    let mut known = ThpSettings::valid_paths();
    known.extend(
        [
            "hpage_pmd_size",
            "khugepaged/pages_collapsed",
            "khugepaged/full_scans",
            "hugepages-8kB/enabled",
            "hugepages-4kB/enabled",
            "hugepages-3kB/enabled",
            "hugepages-4096kB/enabled",
            "hugepages-18446744073709551615kB/enabled",
            "hugepages-64kB",
            "hugepages-",
            "hugepages-kB/",
            "hugepages-64kB/stats/anon_fault_alloc",
            "/sys/kernel/mm/transparent_hugepage/enabled",
            "./enabled",
            "//enabled",
            "khugepaged/",
            "",
        ]
        .map(str::to_string),
    );
    prop::sample::select(known)
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "always", "madvise", "never", "inherit", "defer", "defer+madvise", "within_size", "advise", "deny",
            "force", "0", "1", "2", "511", "512", "-1", "4294967295", "4294967296", "", " ", "[never]",
            "always [madvise] never", "always inherit madvise [never]", "] [", "[]",
        ])
        .prop_map(str::to_string),
        any::<u64>().prop_map(|n| n.to_string()),
    ]
}

fn settings_line() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (path(), value()).prop_map(|(p, v)| format!("{p}={v}")),
        2 => (path(), value()).prop_map(|(p, v)| format!("/sys/kernel/mm/transparent_hugepage/{p}:{v}")),
        1 => (path(), value()).prop_map(|(p, v)| format!("{p}:{v}")),
        1 => (path(), value(), value()).prop_map(|(p, a, b)| format!("{p}={a}:{b}")),
        1 => (path(), value()).prop_map(|(p, v)| format!("{p} {v}")),
        1 => Just("# comment".to_string()),
        1 => Just(String::new()),
        1 => "[ -~]{0,30}",
    ]
}

fn size_token() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "4K", "8K", "16K", "32K", "64K", "128K", "256K", "512K", "1M", "2M", "4M", "1G", "3K", "0", "", "K",
        "18446744073709551615K", "16T", "18446744073709551615", "2048K", "2m", "64KB",
    ])
    .prop_map(str::to_string)
}

fn size_policy_list() -> impl Strategy<Value = String> {
    let range = prop_oneof![
        size_token(),
        (size_token(), size_token()).prop_map(|(a, b)| format!("{a}-{b}")),
        (size_token(), size_token(), size_token()).prop_map(|(a, b, c)| format!("{a}-{b},{c}")),
    ];
    let policy = prop::sample::select(vec![
        "always", "inherit", "madvise", "never", "within_size", "advise", "", "sometimes",
    ]);
    let item = prop_oneof![
        4 => (range, policy).prop_map(|(r, p)| format!("{r}:{p}")),
        1 => size_token(),
        1 => Just(":".to_string()),
    ];
    prop::collection::vec(item, 0..4).prop_map(|v| v.join(";"))
}

fn cmdline_word() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "transparent_hugepage",
        "transparent_hugepage_shmem",
        "thp_anon",
        "thp_shmem",
        "quiet",
        "root",
    ]);
    prop_oneof![
        4 => (key.clone(), size_policy_list()).prop_map(|(k, v)| format!("{k}={v}")),
        2 => (key, value()).prop_map(|(k, v)| format!("{k}={v}")),
        1 => Just("quiet".to_string()),
        1 => "[!-~]{0,12}",
    ]
}

proptest! {
    #![proptest_config(Config { cases: 2000, failure_persistence: None, ..Config::default() })]

    #[test]
    fn random_file_text_never_panics(text in "\\PC{0,200}") {
        check_file(&text)?;
    }

    #[test]
    fn random_ascii_files_never_panic(text in "([ -~]{0,40}\n){0,6}") {
        check_file(&text)?;
    }

    #[test]
    fn settings_file_soup_never_panics(lines in prop::collection::vec(settings_line(), 1..8)) {
        check_file(&lines.join("\n"))?;
    }

    #[test]
    fn random_cmdline_never_panics(text in "\\PC{0,100}") {
        check_cmdline(&text)?;
    }

    #[test]
    fn cmdline_soup_never_panics(words in prop::collection::vec(cmdline_word(), 0..5)) {
        check_cmdline(&words.join(" "))?;
    }

    #[test]
    fn random_assignment_never_panics(text in "\\PC{0,60}") {
        check_assignment(&text)?;
    }

    #[test]
    fn assignment_soup_never_panics(line in settings_line()) {
        check_assignment(&line)?;
    }
}

/// Edge cases near the parsers' splits: each gives Ok or an error, never a panic.
#[test]
fn edge_cases_do_not_panic() {
    for text in [
        "=", ":", "=:", ":=", "[", "]", "][", "a:]x[", "hugepages-:x", "hugepages-kB/enabled=always",
        "hugepages-00064kB/enabled=always", "hugepages-+64kB/enabled=always", "hugepages-é kB/enabled=x",
        "é=é", "enabled=\u{0}",
    ] {
        let mut s = ThpSettings::default();
        let _ = s.apply_assignment(text);
        let _ = s.apply_file("f", text);
    }
    for text in [
        "thp_anon=", "thp_anon=:", "thp_anon=;", "thp_anon=-:always", "thp_anon=64K-:always", "thp_anon=,:always",
        "thp_anon=2M-16K:always", "thp_shmem=4K:always", "thp_anon=é:always", "transparent_hugepage=",
        "=always", "thp_anon=18446744073709551615K:always", "thp_anon=9007199254740992K:always",
    ] {
        let mut s = ThpSettings::default();
        let _ = s.apply_cmdline(text);
    }
}

/// Found by `cmdline_soup_never_panics`: force with PMD's inherit cleared is a state the kernel
/// reaches (at boot, or by writing force and then `hugepages-2048kB/shmem_enabled=never`); its
/// settings text writes force first, so it reads back.
#[test]
fn force_with_pmd_inherit_cleared_reads_back() {
    let mut s = ThpSettings::default();
    s.apply_cmdline("thp_shmem=2048K:never transparent_hugepage_shmem=force").unwrap();
    let text = s.to_string();
    assert!(text.starts_with("shmem_enabled=force\n"), "{text}");
    let mut back = ThpSettings::default();
    assert_eq!(back.apply_file("round-trip", &text), Ok(()), "{text}");
    assert_eq!(back, s);
}
