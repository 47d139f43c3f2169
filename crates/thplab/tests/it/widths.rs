//! Issue #27 item 10: every text table of the README's examples fits 100 columns by default.
//! Each command the README shows runs here as it can without changing a knob: model-only ones
//! as written (placeholders filled in), live ones through their model-only equivalent (`sim`
//! for `live` and `compare`, `demo --model-only`, `bench chase --model-only`), and `observe` and
//! `explain --pid` (which only read) on a process of this test where the machine allows it.
//! A command of the README no case covers fails the test, so that a new one is not forgotten.
//! `trace show` runs but is not held to the width: it is a log of one event per line.

use crate::{temp_file, thplab, workspace};

/// Every line `args` prints on stdout within 100 columns (characters: `×`, `µ` and `−` are one
/// each). Messages on stderr (a replay's warnings quote addresses and paths whole) are not
/// tables and are left as they are.
#[track_caller]
fn fits(args: &[&str]) -> usize {
    let r = thplab(args);
    assert!(r.code == 0 || r.code == 4, "thplab {args:?} exited {}: {}", r.code, r.stderr);
    for l in r.stdout.lines() {
        assert!(l.chars().count() <= 100, "thplab {}: a line of {} columns:\n{l}\n\nall of it:\n{}", args.join(" "), l.chars().count(), r.stdout);
    }
    r.stdout.lines().count()
}

/// A workload with `access` statements (the TLB model), phases and a fork.
const ACCESSES: &str = "phase fill\nmmap a 16M align=2M\ntouch a write\naccess a uniform count=10000 seed=1\nfork child {\n  touch a[0+4M] write\n  exit\n}\nwait child\nphase idle\nsleep 200ms\n";

/// The README's commands (and the subcommands they name) that this test runs.
const COVERED: &[&str] = &[
    "sim", "demo", "settings", "examples", "report", "trace show", "trace stats", "bench chase", "observe", "explain", "live", "compare",
    "sweep", "advise",
];

/// The README's commands not run here, and why: each needs root and runs for long or changes
/// what it measures; their tables are checked by unit tests (calibrate's figures, compare's
/// rows and timelines, bench chase's rows).
/// `study` records a solver under QEMU and runs it live; its JSON is checked by sat.rs.
const NOT_RUN: &[&str] = &["record", "khugepaged", "agent", "calibrate", "exporter", "bench io", "study"];

#[test]
fn every_readme_command_fits_100_columns() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    // `thplab SUB` and `thplab trace SUB` / `thplab bench SUB` as the README writes them.
    for (i, _) in readme.match_indices("thplab ") {
        let words: Vec<&str> = readme[i + 7..].split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).take(2).collect();
        let sub = match words[0] {
            "trace" | "bench" => format!("{} {}", words[0], words.get(1).unwrap_or(&"")),
            w => w.to_string(),
        };
        let known = COVERED.contains(&sub.as_str()) || NOT_RUN.contains(&sub.as_str());
        // Prose ("thplab is a laboratory", "thplab while the run runs") names no command.
        let prose = ["is", "while", "report:", "", "command"].contains(&words[0]) || !readme[..i].ends_with('`') && !readme[..i].ends_with("$ ") && !readme[..i].ends_with('\n');
        assert!(known || prose, "README.md names `thplab {sub}`, which this test neither runs nor lists in NOT_RUN");
    }
    let (d, w) = temp_file("a.thpw", ACCESSES);
    let issue = "examples/issue-program.thpw";
    // The README's examples block, its `sim` rows and the model-only equivalents of live ones.
    let runs: Vec<Vec<&str>> = vec![
        vec!["demo", "--model-only"],
        vec!["sim", issue, "--set", "enabled=always", "--set", "hugepages-64kB/enabled=always"],
        vec!["sim", issue, "--matrix"],
        vec!["sim", issue, "--matrix", "shmem"],
        vec!["sim", issue, "--set", "enabled=always", "--explain", "0x7dfff0000000"],
        vec!["sim", "seed-anon-1g", "--cmdline", "thp_anon=16K-64K:always"],
        vec!["sim", "fork-bgsave", "--matrix"],
        vec!["sim", "fork-bgsave", "--set", "enabled=always"],
        vec!["sim", &w, "--cpu", "zen4", "--paging", "nested-4k"],
        vec!["sim", &w, "--profile", "builtin", "--sample", "50", "--set", "enabled=always"],
        vec!["sim", &w, "--matrix", "--profile", "builtin"],
        vec!["settings", "--set", "enabled=always"],
        vec!["settings", "--list"],
        vec!["examples"],
        vec!["examples", "fork-bgsave"],
        vec!["examples", "issue-program"],
        vec!["bench", "chase", "--model-only", "--sizes", "16M"],
        vec!["advise", "fork-bgsave"],
    ];
    for args in &runs {
        assert!(fits(args) > 0, "thplab {args:?} printed nothing");
    }
    // --wide lifts the limit: the matrix in one table of 11 settings.
    let wide = thplab(&["sim", issue, "--matrix", "--wide"]);
    wide.ok();
    assert!(wide.stdout.lines().any(|l| l.chars().count() > 100 && l.contains("4K only") && l.contains("madvise mode")), "{}", wide.stdout);
    // By default the same matrix comes in 3 blocks of at most 4 settings, each with every row.
    let narrow = thplab(&["sim", issue, "--matrix"]).stdout.clone();
    assert_eq!(narrow.lines().filter(|l| l.starts_with("minflt ")).count(), 3, "{narrow}");
    assert!(narrow.lines().any(|l| l.trim_start().starts_with("4K only") && l.trim_end().ends_with("64K alone")), "{narrow}");
    // A recording: trace show, trace stats, and its replay's per-process table.
    let trace = d.path().join("hand.trace");
    std::fs::write(&trace, crate::views::recording::bytes()).unwrap();
    let trace = trace.to_str().unwrap();
    for args in [vec!["trace", "stats", trace], vec!["sim", trace], vec!["sim", trace, "--set", "enabled=always"]] {
        fits(&args);
    }
    // `trace show` is a log, one event per line for grep, not a table: its lines are as long as
    // their events.
    thplab(&["trace", "show", trace]).ok();
    // `report` writes a file and one line.
    let json = d.path().join("m.json");
    std::fs::write(&json, thplab(&["sim", &w, "--matrix", "--json", "-q"]).stdout.as_bytes()).unwrap();
    fits(&["report", json.to_str().unwrap(), "-o", d.path().join("r.html").to_str().unwrap()]);
    // `sweep` writes a file and two lines.
    let study = d.path().join("s.toml");
    std::fs::write(&study, "[axes]\nworkloads = [\"fork-bgsave\"]\nsettings = [\"default\", \"enabled=always\"]\n").unwrap();
    assert_eq!(fits(&["sweep", study.to_str().unwrap(), "-q"]), 2);
    // observe and explain read a process (this test's child) without changing anything.
    let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let pid = child.id().to_string();
    for args in [vec!["observe", "--pid", pid.as_str()], vec!["explain", "--pid", pid.as_str()]] {
        let r = thplab(&args);
        if r.code == 5 {
            eprintln!("skipped thplab {}: {}", args.join(" "), r.stderr.trim());
            continue;
        }
        fits(&args);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A forking workload's text output has a row per process with its copy-on-write faults, as
/// its JSON: fork-bgsave under PMD always (docs: the saver reads all 64 MiB, the parent writes
/// 16 MiB at a 16 KiB stride while the saver lives: 1024 COW copies, each one 4 KiB page).
#[test]
fn a_forking_workload_prints_each_process_and_its_cow_faults() {
    let r = thplab(&["sim", "fork-bgsave", "--set", "enabled=always"]);
    r.ok();
    let v = thplab(&["sim", "fork-bgsave", "--set", "enabled=always", "--json"]).json();
    let p = |i: usize, k: &str| v["processes"][i][k].as_u64().unwrap();
    assert_eq!((p(0, "cow_copied"), p(1, "cow_copied")), (1024, 1024));
    let out = &r.stdout;
    let head = out.lines().position(|l| l.trim_start().starts_with("process ") && l.contains("COW copied")).unwrap_or_else(|| panic!("no process table:\n{out}"));
    let lines: Vec<&str> = out.lines().skip(head).take(3).collect();
    assert_eq!(lines[0], "  process         minflt       Rss  AnonHugePages  COW copied  COW reused  folios", "{out}");
    assert_eq!(lines[1], "  main              1064  65536 kB       49152 kB        1024           8  4kB×1024 2048kB×32", "{out}");
    assert_eq!(lines[2], "  saver (exited)    1024         -              -        1024           0  -", "{out}");
    // In the matrix: the same counts, per setting.
    let m = thplab(&["sim", "fork-bgsave", "--matrix"]);
    assert!(m.stdout.lines().any(|l| l.starts_with("saver: COW copied (wp_page_copy)")), "{}", m.stdout);
    let pmd_block = m.stdout.split("\n\n").find(|b| b.contains("PMD always")).unwrap();
    let row = pmd_block.lines().find(|l| l.starts_with("main: COW copied")).unwrap();
    // The block's settings are all sizes, PMD always, madvise mode: PMD always is the second.
    let cells: Vec<&str> = row.split_whitespace().rev().take(3).collect();
    assert_eq!(cells[1], "1024", "{pmd_block}");
}
