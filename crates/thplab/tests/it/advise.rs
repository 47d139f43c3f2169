//! `thplab advise`: on a workload in the model alone (a small space: the front, the rule, the
//! written choice), and on a program the other tests do not hold (xz on a generated file),
//! recorded, predicted and verified live (as root; skipped otherwise).

use std::collections::BTreeMap;

use crate::{exclusive, skip_reason, temp_file, thplab, thplab_unlocked};

/// fork-bgsave under four settings: 64K always avoids most of the defaults' 4 KiB faults (the
/// parent writes 64 MiB page by page under madvise mode without madvise), so it is named, with
/// its sysfs lines and the thp_anon= that gives it at boot.
#[test]
fn advise_names_the_fastest_small_setting_for_fork_bgsave_and_writes_it_out() {
    let space = "[product]\nsizes = [\"never\", \"64K\", \"PMD\"]\nmode = [\"always\", \"madvise\"]\n";
    let (_d, path) = temp_file("space.toml", space);
    let r = thplab(&["advise", "fork-bgsave", "--space", &path, "--json"]);
    let j = r.ok().json();
    assert_eq!(j["schema"], "thplab-advise/1");
    let labels: Vec<&str> = j["points"].as_array().unwrap().iter().map(|p| p["choice"]["label"].as_str().unwrap()).collect();
    assert_eq!(labels, ["never", "64K always", "64K madvise", "PMD always", "PMD madvise"]);
    let time = |i: usize| j["points"][i]["point"]["time_ns"].as_f64().unwrap();
    // The defaults (PMD madvise) and never fault the same 4 KiB pages: the same time.
    assert_eq!(time(0), time(4));
    assert!(time(1) < time(4) * 0.9, "{} against {}", time(1), time(4));
    assert_eq!(j["recommendation"]["verdict"], "winner");
    assert_eq!(j["recommendation"]["index"], 1);
    assert_eq!(j["recommendation"]["baseline"], 4);
    assert_eq!(j["written"]["sysfs"], "echo always > /sys/kernel/mm/transparent_hugepage/hugepages-64kB/enabled\necho never > /sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled\n");
    assert_eq!(j["written"]["cmdline"], "thp_anon=64K:always");
    // Every front point is one no other point beats on both time and memory.
    let front: Vec<usize> = j["front"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
    assert!(front.contains(&1), "{front:?}");
    let mem = |i: usize| j["points"][i]["point"]["memory_bytes"].as_u64().unwrap();
    for &f in &front {
        assert!(!(0..labels.len()).any(|o| time(o) <= time(f) && mem(o) <= mem(f) && (time(o) < time(f) || mem(o) < mem(f))), "{} is dominated", labels[f]);
    }
    let text = thplab(&["advise", "fork-bgsave", "--space", &path]);
    assert!(text.ok().stdout.contains("\nRecommended: 64K always\n"), "{}", text.stdout);
}

#[test]
fn advise_space_errors_name_the_file_and_line() {
    let (_d, path) = temp_file("space.toml", "[product]\nsizes = [\"PMD\"]\nprocess = [\"none\", \"nohuge\"]\n");
    let r = thplab(&["advise", "fork-bgsave", "--space", &path]);
    assert_eq!(r.fails(2).stderr, format!("thplab: space {path} line 3: process 'nohuge': valid: none, thp_disable, thp_disable_except_advised, madv_hugepage\n"));
}

/// The THP knobs as found (read while no settings guard holds them).
fn knobs() -> BTreeMap<String, String> {
    live::guard::while_unlocked(|| {
        let mut out = BTreeMap::new();
        let root = std::path::Path::new("/sys/kernel/mm/transparent_hugepage");
        for p in ["enabled", "defrag", "shmem_enabled", "khugepaged/pages_to_scan", "khugepaged/max_ptes_none"] {
            out.insert(p.to_string(), std::fs::read_to_string(root.join(p)).unwrap_or_default());
        }
        for e in std::fs::read_dir(root).unwrap().flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if n.starts_with("hugepages-") {
                out.insert(n.clone(), std::fs::read_to_string(e.path().join("enabled")).unwrap_or_default());
            }
        }
        out
    })
    .expect("the settings guard's lock")
}

/// xz -1 on 400 KB of generated text: recorded (one untraced run for its own time), the
/// space predicted, the judged point and the fastest other verified live (one run each, to
/// stay under 30 s: each live run first waits about 5 s for page reporting to settle; the
/// default is 5 runs): the verdict follows the rule from the rows, and the knobs end as they
/// were.
#[test]
fn advise_records_xz_predicts_and_verifies_live() {
    let _x = exclusive();
    if let Some(r) = skip_reason() {
        eprintln!("skipped: {r}");
        return;
    }
    let Some(xz) = ["/usr/bin/xz", "/bin/xz"].into_iter().find(|p| std::path::Path::new(p).exists()) else {
        eprintln!("skipped: no xz");
        return;
    };
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let text: String = (0..400_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (b'a' + (x % 26) as u8) as char
        })
        .collect();
    let (dir, input) = temp_file("in.txt", &text);
    let before = knobs();
    let start = std::time::Instant::now();
    let r = thplab_unlocked(dir.path(), &["advise", "--json", "--timed", "1", "--verify", "2", "--runs", "1", "--", xz, "-1", "-T1", "-k", "-f", &input]);
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(knobs(), before, "the knobs changed");
    let j = r.ok().json();
    eprintln!("advise on xz: {secs:.1} s in all, {:.1} s in the model", j["model_seconds"]);
    assert!(j["model_seconds"].as_f64().unwrap() < 60.0);
    // A recording: the per-process choices are said to be out of reach, not predicted.
    assert_eq!(j["not_expressible"].as_array().unwrap().len(), 3);
    assert!(j["points"].as_array().unwrap().iter().all(|p| p["choice"]["process"] == "none"));
    let rec = &j["recommendation"];
    let judged = if rec["verdict"] == "winner" { &rec["index"] } else { &rec["baseline"] };
    let v = &j["verification"];
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(&rows[0]["index"], judged);
    assert_eq!(v["judged"], 0);
    let ms = |i: usize, k: &str| rows[i][k].as_f64().unwrap();
    for i in 0..2 {
        assert!(ms(i, "live_min_ms") <= ms(i, "live_ms") && ms(i, "live_ms") <= ms(i, "live_max_ms"), "{:?}", rows[i]);
    }
    let best = v["best"].as_u64().unwrap() as usize;
    assert!(ms(best, "live_ms") <= ms(1 - best, "live_ms"));
    let over = ms(0, "live_ms") - ms(best, "live_ms");
    let within = over <= 0.05 * ms(best, "live_ms") || over <= ms(best, "live_max_ms") - ms(best, "live_min_ms");
    assert_eq!(v["within"], within, "{v}");
    eprintln!("verified: {} ({})", v["within"], v["why"]);
}

/// A tiny program's recording (gzip of a small file, the golden one), in the model alone: no
/// setting clears the noise, so no winner is named, the sentence says which test the fastest's
/// gain failed with the figures of the JSON, and nothing is written out. Then fork-bgsave
/// against 64K at always and madvise: 64K always is named (as in the test above) and written
/// out in every form with the same two knobs.
#[test]
fn advise_on_a_tiny_program_says_no_winner_and_writes_a_winner_out() {
    let rec = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/data/golden/gzip.thpt");
    let space = "[product]\nsizes = [\"64K\", \"PMD\", \"all\"]\nmode = [\"always\", \"madvise\"]\n";
    let (_d, path) = temp_file("space.toml", space);
    let j = thplab(&["advise", rec, "--space", &path, "--json"]).ok().json();
    let r = &j["recommendation"];
    assert_eq!(r["verdict"], "no_winner", "{r}");
    assert!(j["written"].is_null());
    let (gain, noise, spread) = (r["gain_pct"].as_f64().unwrap(), r["noise_pct"].as_f64().unwrap(), r["spread_pct"].as_f64().unwrap());
    let fastest = j["points"][r["fastest"].as_u64().unwrap() as usize]["choice"]["label"].as_str().unwrap().to_string();
    let text = thplab(&["advise", rec, "--space", &path]).ok().stdout.clone();
    let want = format!("No setting is outside the noise: the fastest, {fastest}, is {}.", advise::render::short_of(gain, noise, spread, 1.0));
    assert!(text.replace("\n  ", " ").contains(&want), "{want}\n{text}");
    assert!(!text.contains("Recommended:"), "{text}");
    assert!(gain <= noise || gain <= spread || gain <= 1.0, "a gain past every test is a winner: {r}");

    let (_p, space) = temp_file("64k.toml", "[product]\nsizes = [\"64K\"]\nmode = [\"always\", \"madvise\"]\n");
    let j = thplab(&["advise", "fork-bgsave", "--space", &space, "--json"]).ok().json();
    let r = &j["recommendation"];
    assert_eq!(r["verdict"], "winner", "{r}");
    let p = &j["points"][r["index"].as_u64().unwrap() as usize];
    assert_eq!(p["choice"]["label"], "64K always");
    assert_eq!(p["changes"], serde_json::json!(["hugepages-64kB/enabled=always", "hugepages-2048kB/enabled=never"]));
    let w = &j["written"];
    let (k64, k2m) = ("/sys/kernel/mm/transparent_hugepage/hugepages-64kB/enabled", "/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled");
    assert_eq!(w["sysfs"], format!("echo always > {k64}\necho never > {k2m}\n"));
    assert_eq!(w["cmdline"], "thp_anon=64K:always");
    assert_eq!(w["sysfs_only"], serde_json::json!([]));
    assert!(w["tmpfiles"].as_str().unwrap().ends_with(&format!("\nw {k64} - - - - always\nw {k2m} - - - - never\n")), "{}", w["tmpfiles"]);
    let unit = w["unit"].as_str().unwrap();
    assert!(unit.contains(&format!("\nExecStart=/bin/sh -c 'echo always > {k64}'\nExecStart=/bin/sh -c 'echo never > {k2m}'\n")) && unit.matches("ExecStart=").count() == 2, "{unit}");
}
