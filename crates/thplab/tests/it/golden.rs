//! Issue #26: the refactoring prints the same bytes. Every case of data/golden/cases.txt runs
//! `thplab ARGS` and compares its stdout with data/golden/NAME.json.zst, written by
//! scripts/golden-json from the commit before the refactoring (the built-in examples under
//! three settings, three recorded programs, a profile, samples and matrices).

use super::*;

fn golden_dir() -> PathBuf {
    workspace().join("crates/thplab/tests/it/data/golden")
}

/// (name, exit code, args) of every case, `$G` replaced by the golden directory relative to the
/// workspace root, where the cases run (the workload's name in the JSON is the path as given);
/// the exit code is 0 unless the args start with `exit=N`.
fn cases() -> Vec<(String, i32, Vec<String>)> {
    let text = std::fs::read_to_string(golden_dir().join("cases.txt")).expect("cases.txt");
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut words = l.split_whitespace().map(|w| w.replace("$G", "crates/thplab/tests/it/data/golden"));
            let name = words.next().expect("a name");
            let mut args: Vec<String> = words.collect();
            let code = match args.first().and_then(|a| a.strip_prefix("exit=")) {
                Some(n) => n.parse().expect("exit=N"),
                None => 0,
            };
            if code != 0 {
                args.remove(0);
            }
            (name, code, args)
        })
        .collect()
}

/// The first line where two texts differ, with both versions, for the failure message.
fn first_difference(want: &str, got: &str) -> String {
    for (i, (a, b)) in want.lines().zip(got.lines()).enumerate() {
        if a != b {
            return format!("line {}:\n  golden: {a}\n  now:    {b}", i + 1);
        }
    }
    format!("one is a prefix of the other ({} lines golden, {} now)", want.lines().count(), got.lines().count())
}

#[test]
fn json_is_byte_for_byte_the_golden() {
    let cases = cases();
    assert!(cases.len() >= 30, "cases.txt holds {} cases", cases.len());
    let out_dir = workspace().join("target/golden-now");
    let mut failures = Vec::new();
    for (name, code, args) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = thplab(&args);
        run.fails(*code);
        let file = golden_dir().join(format!("{name}.json.zst"));
        let bytes = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let want = String::from_utf8(zstd::decode_all(&bytes[..]).expect("zstd")).expect("UTF-8");
        if want != run.stdout {
            std::fs::create_dir_all(&out_dir).expect("target/golden-now");
            let now = out_dir.join(format!("{name}.json"));
            std::fs::write(&now, &run.stdout).expect("write");
            failures.push(format!("{name} (thplab {}): {}; now in {}", args.join(" "), first_difference(&want, &run.stdout), now.display()));
        }
    }
    assert!(failures.is_empty(), "{} of {} outputs differ from the golden:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

/// The comparison can fail: a golden of one setting is not the output of another.
#[test]
fn a_different_setting_is_not_the_golden() {
    let g = golden_dir();
    let bytes = std::fs::read(g.join("sim-fork-bgsave-default.json.zst")).expect("golden");
    let want = String::from_utf8(zstd::decode_all(&bytes[..]).expect("zstd")).expect("UTF-8");
    let run = thplab(&["sim", "fork-bgsave", "--json", "--set", "enabled=always"]);
    assert_ne!(run.ok().stdout, want);
    let same = thplab(&["sim", "fork-bgsave", "--json"]);
    assert_eq!(same.ok().stdout, want);
}
