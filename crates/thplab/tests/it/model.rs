//! The model-only commands: `sim`, `settings`, `demo --model-only`, `examples`, `--help`, and
//! what happens when the reader of stdout goes away.

use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::{examples_list, shared, temp_file, thplab, thplab_in, workspace, THPLAB};

/// The `thp_*` events of /proc/vmstat in 6.18, as the kernel names them.
const VMSTAT: [&str; 22] = [
    "thp_collapse_alloc",
    "thp_collapse_alloc_failed",
    "thp_deferred_split_page",
    "thp_fault_alloc",
    "thp_fault_fallback",
    "thp_fault_fallback_charge",
    "thp_file_alloc",
    "thp_file_fallback",
    "thp_file_fallback_charge",
    "thp_file_mapped",
    "thp_scan_exceed_none_pte",
    "thp_scan_exceed_share_pte",
    "thp_scan_exceed_swap_pte",
    "thp_split_page",
    "thp_split_page_failed",
    "thp_split_pmd",
    "thp_split_pud",
    "thp_swpout",
    "thp_swpout_fallback",
    "thp_underused_split_page",
    "thp_zero_page_alloc",
    "thp_zero_page_alloc_failed",
];

const GIB: u64 = 1 << 30;

fn sim_json(set: &str) -> Value {
    thplab(&["sim", "seed-anon-1g", "--set", set, "--json", "-q"]).ok().json()
}

fn keys(v: &Value) -> Vec<String> {
    v.as_object().unwrap_or_else(|| panic!("not an object: {v}")).keys().cloned().collect()
}

#[test]
fn sim_json_4k_only() {
    let v = sim_json("enabled=never");
    assert_eq!(v["schema"], "thplab-run/2");
    assert_eq!(v["source"], "sim");
    assert_eq!(v["workload"], "<builtin seed-anon-1g>");
    assert_eq!(keys(&v["vmstat"]), VMSTAT.map(String::from).to_vec());
    assert!(v["vmstat"].as_object().unwrap().values().all(|n| n == 0), "{}", v["vmstat"]);
    assert_eq!(
        keys(&v["mthp"]),
        ["1024", "128", "16", "2048", "256", "32", "512", "64", "8"].map(|k| format!("hugepages-{k}kB")).to_vec()
    );
    let m64 = keys(&v["mthp"]["hugepages-64kB"]);
    for k in ["anon_fault_alloc", "anon_fault_fallback", "anon_fault_fallback_charge", "nr_anon", "shmem_alloc", "split"] {
        assert!(m64.contains(&k.to_string()), "hugepages-64kB lacks {k}: {m64:?}");
    }
    // Order 1 has no anonymous THP in 6.18: hugepages-8kB has shmem stats only.
    let m8 = keys(&v["mthp"]["hugepages-8kB"]);
    assert!(m8.contains(&"shmem_alloc".to_string()), "{m8:?}");
    assert!(m8.iter().all(|k| !k.contains("anon")), "hugepages-8kB has anon stats: {m8:?}");
    assert_eq!(
        v["process"],
        json!({ "minflt": 262144, "rss_bytes": GIB, "anon_huge_bytes": 0, "bloat_bytes": 0 })
    );
    assert_eq!(v["folios"], json!({ "4kB": 262144 }));
    // The settings are the resolved tree, as `thplab settings --json` prints it.
    let settings = thplab(&["settings", "--set", "enabled=never", "--json"]).ok().json();
    assert_eq!(v["settings"], settings);
    assert_eq!(v["settings"]["enabled"], "never");
    assert_eq!(v["settings"]["hugepages-2048kB/enabled"], "inherit");
}

#[test]
fn sim_json_64k_mthp() {
    let v = sim_json("hugepages-64kB/enabled=always");
    assert_eq!(v["process"]["minflt"], 16384);
    assert_eq!(v["process"]["rss_bytes"], GIB);
    assert_eq!(v["mthp"]["hugepages-64kB"]["anon_fault_alloc"], 16384);
    assert_eq!(v["mthp"]["hugepages-64kB"]["nr_anon"], 16384);
    assert_eq!(v["folios"], json!({ "64kB": 16384 }));
    // enabled stays at the boot default (madvise): no PMD THP without MADV_HUGEPAGE.
    assert_eq!(v["vmstat"]["thp_fault_alloc"], 0);
    assert_eq!(v["settings"]["enabled"], "madvise");
    assert_eq!(v["settings"]["hugepages-64kB/enabled"], "always");
}

#[test]
fn sim_json_pmd_always() {
    let v = sim_json("enabled=always");
    assert_eq!(v["process"]["minflt"], 512);
    assert_eq!(v["process"]["anon_huge_bytes"], GIB);
    assert_eq!(v["vmstat"]["thp_fault_alloc"], 512);
    assert_eq!(v["mthp"]["hugepages-2048kB"]["anon_fault_alloc"], 512);
    assert_eq!(v["folios"], json!({ "2048kB": 512 }));
}

#[test]
fn sim_reads_a_workload_file_and_prints_a_table() {
    let r = thplab(&["sim", "examples/seed-anon-1g.thpw", "--set", "enabled=always", "-q"]);
    r.ok();
    assert!(r.stdout.starts_with("examples/seed-anon-1g.thpw (model of Linux 6.18)\nsettings: enabled=always\n"), "{}", r.stdout);
    assert!(r.stdout.contains("\n  minflt                   512\n"), "{}", r.stdout);
    assert!(r.stdout.contains("\n  thp_fault_alloc 512\n"), "{}", r.stdout);
    assert_eq!(r.stderr, "");
}

/// `thplab settings` prints PATH=VALUE lines in the tree's write order.
fn default_settings_text() -> String {
    let mut s = String::new();
    for kb in [8, 16, 32, 64, 128, 256, 512, 1024, 2048] {
        if kb != 8 {
            let v = if kb == 2048 { "inherit" } else { "never" };
            s += &format!("hugepages-{kb}kB/enabled={v}\n");
        }
        let v = if kb == 2048 { "inherit" } else { "never" };
        s += &format!("hugepages-{kb}kB/shmem_enabled={v}\n");
    }
    s + "enabled=madvise\n\
         defrag=madvise\n\
         shmem_enabled=never\n\
         use_zero_page=1\n\
         shrink_underused=1\n\
         khugepaged/defrag=1\n\
         khugepaged/max_ptes_none=511\n\
         khugepaged/max_ptes_swap=64\n\
         khugepaged/max_ptes_shared=256\n\
         khugepaged/pages_to_scan=4096\n\
         khugepaged/scan_sleep_millisecs=10000\n\
         khugepaged/alloc_sleep_millisecs=60000\n"
}

#[test]
fn settings_prints_the_boot_defaults() {
    let r = thplab(&["settings"]);
    r.ok();
    assert_eq!(r.stdout, default_settings_text());
}

#[test]
fn settings_output_reads_back() {
    let args = [
        "settings",
        "--set",
        "enabled=always",
        "--set",
        "hugepages-64kB/enabled=madvise",
        "--set",
        "khugepaged/max_ptes_none=0",
        "--set",
        "defrag=defer+madvise",
    ];
    let first = thplab(&args);
    first.ok();
    assert!(first.stdout.contains("\nhugepages-64kB/enabled=madvise\n"), "{}", first.stdout);
    assert!(first.stdout.contains("\nenabled=always\ndefrag=defer+madvise\n"), "{}", first.stdout);
    assert!(first.stdout.contains("\nkhugepaged/max_ptes_none=0\n"), "{}", first.stdout);
    let (_dir, file) = temp_file("s.settings", &first.stdout);
    let again = thplab(&["settings", "--settings", &file]);
    again.ok();
    assert_eq!(again.stdout, first.stdout);
}

#[test]
fn settings_json_is_the_same_map() {
    let text = thplab(&["settings", "--set", "hugepages-16kB/enabled=always"]).ok().stdout.clone();
    let lines: BTreeMap<String, Value> = text
        .lines()
        .map(|l| {
            let (p, v) = l.split_once('=').expect("PATH=VALUE");
            (p.to_string(), Value::String(v.to_string()))
        })
        .collect();
    let v = thplab(&["settings", "--set", "hugepages-16kB/enabled=always", "--json"]).ok().json();
    assert_eq!(v, serde_json::to_value(&lines).unwrap());
    assert_eq!(v["hugepages-16kB/enabled"], "always");
}

#[test]
fn settings_list_names_paths_and_values() {
    let r = thplab(&["settings", "--list"]);
    r.ok();
    let lines: Vec<&str> = r.stdout.lines().collect();
    for want in [
        "enabled: always, madvise, never",
        "defrag: always, defer, defer+madvise, madvise, never",
        "shmem_enabled: always, within_size, advise, never, deny, force",
        "hugepages-64kB/enabled: always, inherit, madvise, never",
        "hugepages-8kB/shmem_enabled: always, inherit, within_size, advise, never",
        "use_zero_page: 0, 1",
        "khugepaged/max_ptes_none: an integer from 0 to 511",
        "khugepaged/pages_to_scan: an integer from 1 to 4294967295",
    ] {
        assert!(lines.contains(&want), "missing '{want}' in:\n{}", r.stdout);
    }
    assert!(!r.stdout.contains("hugepages-8kB/enabled"), "{}", r.stdout);
    // One line per knob that `thplab settings` prints, and the knob of this machine kind's
    // build that upstream settings leave out (docs/kernel-notes.md 15), and the model's
    // `kernel` and `policy` lines (docs/policies.md).
    assert!(lines.contains(&"anon_beside_full: 0, 1"), "{}", r.stdout);
    assert!(lines.iter().any(|l| l.starts_with("kernel: 6.18 (the default")) && lines.iter().any(|l| l.starts_with("policy: none, mthp-collapse-v18")), "{}", r.stdout);
    // (`kernel` and `policy` fold to 100 columns: their continuation lines are indented.)
    assert_eq!(lines.iter().filter(|l| !l.starts_with(' ')).count(), default_settings_text().lines().count() + 3);
}

#[test]
fn settings_from_the_kernel_command_line() {
    let r = thplab(&["settings", "--cmdline", "thp_anon=16K-64K:always"]);
    r.ok();
    let enabled: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with("hugepages-") && l.contains("/enabled=")).collect();
    // thp_anon= starts from empty masks: hugepages-2048kB is no longer inherit.
    assert_eq!(
        enabled,
        [
            "hugepages-16kB/enabled=always",
            "hugepages-32kB/enabled=always",
            "hugepages-64kB/enabled=always",
            "hugepages-128kB/enabled=never",
            "hugepages-256kB/enabled=never",
            "hugepages-512kB/enabled=never",
            "hugepages-1024kB/enabled=never",
            "hugepages-2048kB/enabled=never",
        ]
    );
    assert!(r.stdout.contains("\nenabled=madvise\n"), "{}", r.stdout);
    // --set applies after --cmdline.
    let r = thplab(&["settings", "--cmdline", "transparent_hugepage=always thp_anon=2M:inherit", "--set", "enabled=never"]);
    r.ok();
    assert!(r.stdout.contains("\nhugepages-2048kB/enabled=inherit\n"), "{}", r.stdout);
    assert!(r.stdout.contains("\nenabled=never\n"), "{}", r.stdout);
}

/// The time row, by hand from the built-in profile (crates/uapi/profiles/builtin.toml): 4K,
/// 262144 faults × 1568.21 ns + one call (mmap) 1605.8 ns = 411.1 ms; 64K, 16384 × 7169.80 ns +
/// 245760 pages touched without a fault × 15.03 ns + the call = 121.2 ms; PMD, 512 ×
/// 169894.96 ns + 261632 × 15.03 ns + the call = 90.9 ms, plus the profile's `[host]`: the
/// machine starts idle, its free blocks of order 9 and above reported to the host, and the 512
/// THPs take 512 of them (the profile's free lists have 529 of order 9 and 3055 of order 10):
/// 262144 host faults × 9037.71 ns = 2369.2 ms, 2.460 s in all. Base pages and 64 KiB folios
/// come from the smaller free blocks, which are never reported.
///
/// The ± (issue #27 item 6), from the profile's `[fault.spread_pct]`: 4K, 411.1 ms of 4 KiB
/// faults × 3.9 % = 16.0 ms (+ 2.4 % of the call) = ±4 %; 64K, 117.5 ms × 3.3 % = 3.88 ms +
/// 3.7 ms of touches × 4.9 % = 0.18 ms: 4.06 ms, ±3 %; PMD, 87.0 ms × 185.8 % = 161.6 ms + 3.9 ms
/// × 4.9 % = 0.19 ms + 2369.2 ms of host faults × 15.3 % (`fault_spread_pct`) = 362.5 ms:
/// 524.3 ms, ±21 % (+0.529 s with the host state's +4.6 ms).
/// The host states: every frame backed (no host fault: PMD 2.460 − 2.369 = 0.09 s) to every
/// frame dropped (262658 host faults, the 1 GiB and the page tables: 4K 0.411 + 2.374 s; the
/// model prices a base page's host fault at `fault_ns_per_page` too, the profile having no
/// `base_fault_ns_per_page`).
#[test]
fn demo_model_only() {
    let r = thplab(&["demo", "--model-only"]);
    r.ok();
    assert_eq!(r.stderr, "thplab demo: model only (--model-only)\n");
    let expected = "\
seed-anon-1g: 1 GiB of private anonymous memory written page by page, model of Linux 6.18

                                                    4K sim         64K sim         PMD sim
minflt                                              262144           16384             512
Rss                                             1048576 kB      1048576 kB      1048576 kB
AnonHugePages                                         0 kB            0 kB      1048576 kB
VmHWM (peak Rss)                                1048576 kB      1048576 kB      1048576 kB
bloat (allocated, never touched)                      0 kB            0 kB            0 kB
time (profile; live: wall time)                   411.1 ms        121.2 ms         2.460 s
time ± (model: profile; live: runs)                    ±4%             ±3%            ±21%
time over the host states (model)             0.41..2.78 s    0.12..2.49 s    0.09..2.46 s
host faults (frames reported free)                       0               0          262144
thp_fault_alloc                                          0               0             512
hugepages-64kB/stats/anon_fault_alloc                    0           16384               0
hugepages-2048kB/stats/anon_fault_alloc                  0               0             512
folios 4kB                                          262144               0               0
folios 64kB                                              0           16384               0
folios 2048kB                                            0               0             512

4K: enabled=never
64K: hugepages-64kB/enabled=always enabled=never
PMD: enabled=always

time ±: the model's from the built-in profile's calibrated spreads; live: the range of the runs.
Host state the model assumed: the profile's free lists (3077 MiB free in blocks below order 9, every
larger block reported: an idle machine as calibrated).
It cannot know which free frames the host backs during a run (what ran before, what other processes
and the other CPU's per-CPU list free meanwhile): `time over the host states` is its time from every
frame backed to every frame dropped.

time (model: the profile's, ± its spreads and the host state; live: the median wall time of the
  runs, ± their range)
  host state the model assumed: the profile's free lists (3077 MiB free in blocks below order 9,
    every larger block reported: an idle machine as calibrated)
  4K: model 0.411 s +2.390/-0.016 s, live -
    host states it cannot know: 0 to 262658 host faults move it ±0.0 ms .. +2.374 s
  64K: model 0.121 s +2.378/-0.004 s, live -
    host states it cannot know: 0 to 262658 host faults move it ±0.0 ms .. +2.374 s
    against 4K: model -70.5 % ± 582.3 %: no measurable effect; live -
  PMD: model 2.460 s +0.529/-2.460 s, live -
    host states it cannot know: 0 to 262658 host faults move it -2.369 s .. +4.6 ms
    against 4K: model +498.4 % (-786.8 % .. +631.0 %): no measurable effect; live -

";
    assert_eq!(r.stdout, expected);
}

#[test]
fn demo_model_only_json() {
    let v = thplab(&["demo", "--model-only", "--json"]).ok().json();
    let rows: Vec<(String, u64)> = v
        .as_array()
        .expect("array")
        .iter()
        .map(|e| (e["label"].as_str().unwrap().to_string(), e["result"]["process"]["minflt"].as_u64().unwrap()))
        .collect();
    assert_eq!(rows, [("4K sim".to_string(), 262144), ("64K sim".to_string(), 16384), ("PMD sim".to_string(), 512)]);
}

#[test]
fn examples_lists_and_prints() {
    let r = thplab(&["examples"]);
    r.ok();
    let names: Vec<&str> = r.stdout.lines().map(|l| l.split_whitespace().next().unwrap()).collect();
    assert_eq!(names[..2], ["seed-anon-1g", "issue-program"], "{}", r.stdout);
    // The workloads, then the built-in studies (issue #32 item 5: `sat-study`, a line of its own).
    assert_eq!(names.last(), Some(&"sat-study"), "{}", r.stdout);
    assert_eq!(examples_list(), names[..names.len() - 1].join(", "));
    let r2 = thplab(&["examples", "sat-study"]);
    r2.ok();
    assert!(r2.stdout.contains("thplab study sat --solver minisat"), "{}", r2.stdout);
    // One line each: the name, then what it does (issue #14).
    let first = r.stdout.lines().next().unwrap();
    assert!(first.starts_with("seed-anon-1g ") && first.contains("1 GiB of private anonymous memory written page by page"), "{first}");
    for line in r.stdout.lines() {
        let desc = line.split_once("  ").map(|(_, d)| d.trim()).unwrap_or("");
        assert!(desc.len() > 20, "no description: {line}");
    }
    let r = thplab(&["examples", "seed-anon-1g"]);
    r.ok();
    assert_eq!(r.stdout, include_str!("../../../../examples/seed-anon-1g.thpw"));
    let r = thplab(&["examples", "issue-program.thpw"]);
    r.ok();
    assert_eq!(r.stdout, include_str!("../../../../examples/issue-program.thpw"));
    let r = thplab(&["examples", "nope"]);
    r.fails(2);
    assert_eq!(r.stderr, format!("thplab: no built-in example 'nope'; built-in examples: {}\n", examples_list()));
    assert_eq!(r.stdout, "");
}

#[test]
fn help_for_every_command() {
    let r = thplab(&["--help"]);
    r.ok();
    assert!(r.stdout.starts_with("A laboratory for the Linux 6.18 THP/mTHP subsystem"), "{}", r.stdout);
    assert!(r.stdout.contains("Usage: thplab <COMMAND>"), "{}", r.stdout);
    assert!(!r.stdout.contains("__hold") && !r.stdout.contains("__exec"), "hidden commands listed:\n{}", r.stdout);
    let purposes = [
        ("sim", "Run a workload in the model and print the kernel's counters"),
        ("settings", "Print the resolved settings, one sysfs PATH=VALUE per line"),
        ("demo", "Run the seed experiment (1 GiB written page by page)"),
        ("examples", "List the built-in example workloads, one line each, or print one"),
        ("live", "Run a workload on the live kernel under the given settings"),
        ("compare", "Run a workload in the model and on the live kernel and print both side by side"),
        ("observe", "The folio census of a running process"),
        ("explain", "Why a process has the folio sizes it has"),
        ("exporter", "Serve THP metrics to Prometheus"),
    ];
    for (cmd, purpose) in purposes {
        // Listed in the top-level help ...
        assert!(r.stdout.contains(&format!("\n  {cmd} ")), "thplab --help does not list {cmd}:\n{}", r.stdout);
        // ... and explained by its own.
        let h = thplab(&[cmd, "--help"]);
        h.ok();
        let one_line = h.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(one_line.starts_with(purpose), "thplab {cmd} --help does not start with '{purpose}':\n{}", h.stdout);
        assert!(h.stdout.contains(&format!("Usage: thplab {cmd}")), "{}", h.stdout);
        assert_eq!(h.stderr, "");
    }
}

#[test]
fn version() {
    let r = thplab(&["--version"]);
    r.ok();
    assert!(r.stdout.starts_with("thplab "), "{}", r.stdout);
}

/// `thplab sim ... | head -1`: the first line arrives and thplab exits 0 without a word.
#[test]
fn broken_pipe_with_head() {
    let _g = shared();
    let cmd = format!("'{THPLAB}' sim seed-anon-1g --set enabled=never | head -1; exit ${{PIPESTATUS[0]}}");
    let out = Command::new("bash").arg("-c").arg(&cmd).current_dir(workspace()).output().expect("bash");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "<builtin seed-anon-1g> (model of Linux 6.18)\n");
    assert!(!stderr.contains("Broken pipe") && !stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

/// The reader is gone before thplab writes anything: every write fails with EPIPE, and every
/// output path (table, JSON, settings, list) must treat that as the end, not as an error.
#[test]
fn broken_pipe_before_the_first_write() {
    let _g = shared();
    for args in [
        &["sim", "seed-anon-1g", "--set", "enabled=never"][..],
        &["sim", "seed-anon-1g", "--json"],
        &["settings"],
        &["settings", "--json"],
        &["settings", "--list"],
        &["examples"],
        &["examples", "seed-anon-1g"],
        &["demo", "--model-only"],
        &["demo", "--model-only", "--json"],
    ] {
        let mut child = Command::new(THPLAB)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn thplab");
        drop(child.stdout.take());
        let mut stderr = String::new();
        child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
        let status = child.wait().unwrap();
        let stderr: String = stderr.lines().filter(|l| *l != "thplab demo: model only (--model-only)").collect();
        assert_eq!(stderr, "", "thplab {args:?} with stdout closed");
        assert_eq!(status.code(), Some(0), "thplab {args:?} with stdout closed");
    }
}

#[test]
fn quiet_sim_in_another_directory() {
    // A built-in example runs from anywhere.
    let dir = tempfile::tempdir().unwrap();
    let r = thplab_in(dir.path(), &["sim", "issue-program", "--json", "-q"]);
    r.ok();
    assert_eq!(r.json()["workload"], "<builtin issue-program>");
}

/// `sim --profile`: the run's time from a profile's `[fault]` costs, derived by hand. 1 MiB
/// under 64 KiB mTHP: 16 faults of 64kB at 10 µs, 240 pages touched without a fault at 20 ns,
/// 2 calls (mmap, munmap) at 1 µs: 160 µs + 4.8 µs + 2 µs = 166.8 µs.
#[test]
fn sim_profile_gives_the_time_of_the_run() {
    let (_d, w) = temp_file("t.thpw", "mmap a 1M align=2M\ntouch a write\nmunmap a\n");
    let (_p, prof) = temp_file(
        "p.toml",
        "[machine]\nname = \"test\"\n\n[fault]\nzero_page_read_ns = 500.0\ntouch_ns_per_page = 20.0\nsyscall_ns = 1000.0\n\n[fault.ns_per_fault]\n4kB = 2000.0\n64kB = 10000.0\n",
    );
    let r = thplab(&["sim", &w, "--set", "enabled=never", "--set", "hugepages-64kB/enabled=always", "--profile", &prof, "--json"]);
    r.ok();
    let t = &r.json()["time"];
    assert_eq!(t["faults"]["64kB"], 16);
    assert_eq!(t["touches_without_fault"], 240);
    assert_eq!(t["calls"], 2);
    assert!((t["total_ns"].as_f64().unwrap() - 166_800.0).abs() < 1e-6, "{t}");
    // 4 KiB pages: 256 faults at 2 µs.
    let r = thplab(&["sim", &w, "--set", "enabled=never", "--profile", &prof, "--json"]);
    assert!((r.json()["time"]["total_ns"].as_f64().unwrap() - (256.0 * 2000.0 + 2000.0)).abs() < 1e-6);
    // PMD: no cost in this profile, so it is charged as a 4kB fault and named.
    let (_d2, w2) = temp_file("t2.thpw", "mmap a 2M align=2M\ntouch a write\n");
    let r = thplab(&["sim", &w2, "--set", "enabled=always", "--profile", &prof]);
    r.ok();
    assert!(r.stdout.contains("time: the profile has no cost for 2048kB; charged as 4kB faults"), "{}", r.stdout);
    // The built-in profile has every size; a profile without [fault] is said to give no time.
    let r = thplab(&["sim", "seed-anon-1g", "--profile", "builtin", "--json"]);
    assert!(r.json()["time"]["unmeasured_sizes"].as_array().unwrap().is_empty());
    let (_p2, bare) = temp_file("bare.toml", "[machine]\nname = \"x\"\n");
    let r = thplab(&["sim", &w, "--profile", &bare]);
    r.ok();
    assert!(r.stderr.contains("no [fault] section"), "{}", r.stderr);
    let (_p3, bad) = temp_file("bad.toml", "[fault]\nns_per_falt = 1\n");
    let r = thplab(&["sim", &w, "--profile", &bad]);
    r.fails(2);
    assert!(r.stderr.contains("bad.toml") && r.stderr.contains("line 2"), "{}", r.stderr);
}

/// A profile's `[tlb]` (`thplab calibrate`) sets up the access model unless the command line
/// says otherwise: the built-in profile's is this machine kind (zen4, a guest on 4 KiB host
/// pages); a preset it names that does not exist is refused with the profile's value and the
/// valid ones.
#[test]
fn a_profiles_tlb_section_sets_up_the_access_model() {
    let (_d, w) = temp_file("t.thpw", "mmap a 1M align=2M\ntouch a write\naccess a seq elem=4K count=256\n");
    let run = |extra: &[&str]| {
        let mut args = vec!["sim", w.as_str(), "--set", "enabled=never", "--json"];
        args.extend_from_slice(extra);
        let r = thplab(&args);
        r.ok();
        let a = &r.json()["accesses"];
        (a["cpu"].as_str().unwrap().to_string(), a["paging"].as_str().unwrap().to_string())
    };
    assert_eq!(run(&[]), ("zen4".to_string(), "native".to_string()));
    assert_eq!(run(&["--profile", "builtin"]), ("zen4".to_string(), "nested-4k".to_string()));
    assert_eq!(run(&["--profile", "builtin", "--paging", "native", "--cpu", "golden-cove"]), ("golden-cove".to_string(), "native".to_string()));
    let (_p, other) = temp_file("arm.toml", "[tlb]\ncpu = \"neoverse-n1\"\npaging = \"nested-2m\"\n");
    assert_eq!(run(&["--profile", &other]), ("neoverse-n1".to_string(), "nested-2m".to_string()));
    let (_q, bad) = temp_file("bad.toml", "[tlb]\ncpu = \"pentium\"\npaging = \"native\"\n");
    let r = thplab(&["sim", &w, "--profile", &bad]);
    r.fails(2);
    assert!(r.stderr.contains("'pentium' is not a preset") && r.stderr.contains("neoverse-n1"), "{}", r.stderr);
}
