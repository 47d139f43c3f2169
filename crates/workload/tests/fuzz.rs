//! No-panic fuzzing of the workload parser: any text gives a workload or an error whose message
//! starts with `SOURCE:LINE:`, with LINE a line of the text. Inputs are random strings and
//! "token soups" built from the language's own words, sizes, ranges and options, so that most
//! of them get deep into the parser.

use proptest::prelude::*;
use proptest::test_runner::Config;

const SOURCE: &str = "fuzz.thpw";

/// Parse `text`; panics (failing the property) only through the assertions here.
fn check(text: &str) -> Result<(), TestCaseError> {
    match workload::parse(SOURCE, text) {
        Ok(w) => {
            prop_assert_eq!(w.source.as_str(), SOURCE);
            for op in &w.ops {
                prop_assert!(op.line >= 1 && op.line <= text.lines().count());
            }
        }
        Err(e) => {
            let msg = e.to_string();
            let rest = msg.strip_prefix(&format!("{SOURCE}:"));
            prop_assert!(rest.is_some(), "error does not start with the source: {msg}");
            let (line, _) = rest.unwrap().split_once(": ").unwrap_or(("", ""));
            let line: usize = line.parse().map_err(|_| TestCaseError::fail(format!("no line number in: {msg}")))?;
            prop_assert!(line >= 1 && line <= text.lines().count().max(1), "line {line} out of range in: {msg}");
            prop_assert_eq!(line, e.line);
        }
    }
    Ok(())
}

fn size() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("0".to_string()),
        Just("4K".to_string()),
        Just("8K".to_string()),
        Just("64K".to_string()),
        Just("1M".to_string()),
        Just("2M".to_string()),
        Just("3M".to_string()),
        Just("1G".to_string()),
        Just("1T".to_string()),
        Just("16383T".to_string()),
        Just("16384T".to_string()),
        Just("18446744073709551615".to_string()),
        Just("18446744073709551616".to_string()),
        Just("9223372036854775808".to_string()),
        Just("9223372036854775807".to_string()),
        Just("1_000".to_string()),
        Just("_".to_string()),
        Just("".to_string()),
        Just("-4K".to_string()),
        Just("4Q".to_string()),
        (0u64..=u64::MAX).prop_map(|n| n.to_string()),
        (0u64..100_000, prop::sample::select(vec!["", "K", "M", "G", "T", "kb", "MiB", "b"]))
            .prop_map(|(n, u)| format!("{n}{u}")),
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "big", "heap", "x-1", "", "a!", "é", "f", "m"]).prop_map(str::to_string)
}

fn range() -> impl Strategy<Value = String> {
    prop_oneof![
        name(),
        (name(), size(), size()).prop_map(|(n, a, b)| format!("{n}[{a}..{b}]")),
        (name(), size(), size()).prop_map(|(n, a, b)| format!("{n}[{a}+{b}]")),
        (name(), size()).prop_map(|(n, a)| format!("{n}[{a}..]")),
        (name(), size()).prop_map(|(n, a)| format!("{n}[{a}")),
        (name(), size()).prop_map(|(n, a)| format!("{n}[{a}]")),
        name().prop_map(|n| format!("{n}[]")),
        name().prop_map(|n| format!("{n}[..]")),
        name().prop_map(|n| format!("{n}[")),
        name().prop_map(|n| format!("{n}]")),
    ]
}

fn option() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "prot", "align", "offset", "at", "every", "order", "stride", "seed", "count", "color", "", "file", "pgoff",
        "huge", "on", "chunk",
    ]);
    let value = prop_oneof![
        size(),
        prop::sample::select(vec![
            "rw", "r", "none", "rwx", "rr", "seq", "reverse", "random", "0x7e0000000000", "0x7e0000000001", "0x",
            "0xffffffffffffffffff", "0x_", "", "f", "m", "never", "always", "within_size", "advise",
        ])
        .prop_map(str::to_string),
    ];
    (key, value).prop_map(|(k, v)| format!("{k}={v}"))
}

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "mmap", "munmap", "mprotect", "madvise", "brk", "prctl", "touch", "thplab-workload", "1", "2",
            "read", "write", "hugepage", "nohugepage", "dontneed", "collapse", "thp_disable", "thp_enable",
            "except_advised", "rw", "none", "x", "#", "=", "[", "]", "..", "+", "shared", "f", "m",
        ])
        .prop_map(str::to_string),
        2 => size(),
        2 => range(),
        2 => option(),
        1 => size().prop_map(|s| format!("+{s}")),
        1 => size().prop_map(|s| format!("-{s}")),
        1 => (size(), size()).prop_map(|(a, b)| format!("{a}+{b}")),
        1 => "[ -~]{0,8}",
    ]
}

/// A statement: a verb (usually) and arguments drawn from the language's words.
fn statement() -> impl Strategy<Value = String> {
    let verb = prop::sample::select(vec![
        "mmap", "mmap", "mmap", "munmap", "mprotect", "madvise", "brk", "prctl", "touch", "touch", "touch",
        "thplab-workload", "frob", "tmpfs", "memfd", "shm_open", "file", "ftruncate", "fallocate", "write", "write",
    ]);
    (verb, prop::collection::vec(word(), 0..5)).prop_map(|(v, args)| {
        let mut s = v.to_string();
        for a in args {
            s.push(' ');
            s.push_str(&a);
        }
        s
    })
}

/// Realistic programs: declare regions first, then act on them with sizes that often overflow.
fn program() -> impl Strategy<Value = String> {
    let decl = || {
        (prop::sample::select(vec!["a", "b", "big"]), size(), prop::collection::vec(option(), 0..2))
            .prop_map(|(n, s, o)| format!("mmap {n} {s} {}", o.join(" ")))
    };
    let line = prop_oneof![
        3 => statement(),
        2 => decl(),
        1 => Just(String::new()),
        1 => Just("# a comment".to_string()),
    ];
    let files = prop::sample::select(vec![
        "", "tmpfs m huge=always\nfile f on=m", "memfd f", "shm_open f", "tmpfs m\nshm_open f on=m\nftruncate f 4M",
    ]);
    (files, prop::collection::vec(decl(), 0..3), prop::collection::vec(line, 0..8)).prop_map(|(f, d, l)| {
        let mut v = vec!["thplab-workload 1".to_string(), f.to_string()];
        v.extend(d);
        v.extend(l);
        v.join("\n")
    })
}

proptest! {
    #![proptest_config(Config { cases: 2000, failure_persistence: None, ..Config::default() })]

    #[test]
    fn random_text_never_panics(text in "\\PC{0,200}") {
        check(&text)?;
    }

    #[test]
    fn random_ascii_lines_never_panic(text in "([ -~]{0,40}\n){0,6}") {
        check(&text)?;
    }

    #[test]
    fn token_soup_never_panics(lines in prop::collection::vec(statement(), 1..8)) {
        check(&lines.join("\n"))?;
    }

    #[test]
    fn programs_never_panic(text in program()) {
        check(&text)?;
    }
}

/// Inputs that once panicked (or are close to the edges): each must give Ok or a located error.
#[test]
fn edge_cases_give_located_errors() {
    let cases = [
        "mmap a 18446744073709551615",
        "mmap a 16383T+16383T+16383T+16383T+16383T",
        "mmap a 16777215T+1T",
        "mmap a 1M\ntouch a[18446744073709551615+1] write",
        "mmap a 1M\ntouch a[1+18446744073709551615] write",
        "mmap a 1M\nmunmap a[0+4K] every=18446744073709551615",
        "brk -9223372036854775808",
        "brk +9223372036854775808",
        "brk -18446744073709551615",
        "brk +16383T",
        "mmap a 1M align=9223372036854775808 offset=4K",
        "mmap a 1M at=0xfffffffffffff000",
        "touch heap[0..] write",
        "brk +4K\ntouch heap[18446744073709551615+1] write",
        "mmap é 4K",
        "mmap a 4K\ntouch a[é..] write",
        "mmap a 4K\ntouch a[4K..0] read",
    ];
    for text in cases {
        if let Err(e) = check(text) {
            panic!("{text:?}: {e}");
        }
    }
}

/// Regression: sizes near u64::MAX used to overflow in the parser (`mmap a 18446744073709551615`
/// panicked rounding up to 4 KiB; `brk -9223372036854775808` panicked; `brk +9223372036854775808`
/// silently became a negative delta) or later in the model (`every=` or heap offsets near
/// u64::MAX overflowed computing addresses). Sizes above 64 PiB (2^56, the largest user address
/// space) are now refused where they are parsed.
#[test]
fn oversized_sizes_are_refused_with_the_line() {
    for (text, line) in [
        ("mmap a 18446744073709551615", 1),
        ("mmap a 65537T", 1),
        ("mmap a 65536T+4K", 1),
        ("mmap a 1T\nmmap b 16383T+16383T+16383T+16383T+16383T", 2),
        ("brk -9223372036854775808", 1),
        ("brk +9223372036854775808", 1),
        ("mmap a 1M\nmunmap a[0+4K] every=18446744073709547520", 2),
        ("brk +4K\ntouch heap[18446744073709547520+8K] write", 2),
        ("brk +4K\nmunmap heap[18446744073709547520..]", 2),
        ("mmap a 1M\ntouch a write stride=18446744073709547520", 2),
        ("mmap a 1M align=9223372036854775808", 1),
    ] {
        let e = workload::parse("f", text).expect_err(text);
        assert_eq!(e.line, line, "{text}: {e}");
        assert!(e.to_string().starts_with(&format!("f:{line}: size '")), "{text}: {e}");
        assert!(e.to_string().contains("is larger than any address space (at most 65536T)"), "{text}: {e}");
    }
    // 64 PiB itself still parses (the model then fails the mmap with ENOMEM, as the kernel does).
    let w = workload::parse("f", "mmap a 65536T\nbrk -65536T").unwrap();
    assert_eq!(w.regions[0].len, 1 << 56);
    assert_eq!(w.ops[1].kind, workload::OpKind::Brk { delta: -(1 << 56) });
}
