//! The views of issue #14 item 4 from the command line: `sim --matrix`, the folio-size map, the
//! peak, `--explain`, a replay's per-process lines and warnings, live knobs and settings JSON as
//! `--settings`, `--salvage`, and `thplab report` with its timeline and time plots (rendered in
//! headless Chromium when present).

use crate::{temp_file, thplab};

/// 128 MiB written then unmapped (64 PMD THPs under PMD always), then 64 KiB written.
const FREES_BEFORE_EXIT: &str = "mmap a 128M\ntouch a write\nmunmap a\nmmap b 64K\ntouch b write\n";

#[test]
fn sim_matrix_runs_the_compare_matrix_in_the_model_alone() {
    let (_d, w) = temp_file("w.thpw", FREES_BEFORE_EXIT);
    let v = thplab(&["sim", &w, "--matrix", "--json", "-q"]).ok().json();
    let runs = v.as_array().unwrap();
    let labels: Vec<&str> = runs.iter().map(|r| r["label"].as_str().unwrap()).collect();
    assert_eq!(
        labels,
        ["4K only", "16K alone", "32K alone", "64K alone", "128K alone", "256K alone", "512K alone", "1024K alone", "all sizes", "PMD always", "madvise mode"]
    );
    // Hand-derived minflt: 128 MiB is 32768 pages, 64 KiB is 16. 4 KiB only: 32784. 64 KiB alone:
    // 2048 folios for the 128 MiB (2 MiB-aligned), and b (4 KiB-aligned only below the default
    // mmap_base, 0x...c5000): 16 pages of 4 KiB: 2064. PMD always (index 9): 64 + 16 = 80.
    let minflt = |i: usize| runs[i]["model"]["process"]["minflt"].as_u64().unwrap();
    assert_eq!((minflt(0), minflt(3), minflt(9)), (32784, 2064, 80));
    assert_eq!(runs[9]["settings"]["enabled"], "always");
    assert_eq!(runs[9]["model"]["peak"]["rss_bytes"], 128 << 20);
    let text = thplab(&["sim", &w, "--matrix", "shmem", "-q"]).ok().stdout.clone();
    assert!(text.contains("the shmem matrix of `compare --matrix`, model of Linux 6.18 only"), "{text}");
    for l in ["4K only", "64K always", "top always, PMD inherit", "16K+64K+256K always"] {
        assert!(text.lines().next().is_some() && text.contains(l), "{l} missing:\n{text}");
    }
    let r = thplab(&["sim", &w, "--matrix", "--settings", "/dev/null"]);
    r.fails(2);
    assert!(r.stderr.contains("--matrix runs its own settings"), "{}", r.stderr);
}

#[test]
fn sim_shows_the_peak_and_the_end_side_by_side() {
    let (_d, w) = temp_file("w.thpw", FREES_BEFORE_EXIT);
    let r = thplab(&["sim", &w, "--set", "enabled=always"]);
    r.ok();
    let out = &r.stdout;
    assert!(out.contains("  VmHWM              131072 kB   (peak Rss; AnonHugePages then 131072 kB)"), "{out}");
    assert!(out.contains("  size           peak    at exit  pmd-mapped  pte-mapped  partially-mapped"), "{out}");
    assert!(out.contains("  2048kB           64          0           0           0                 0"), "{out}");
    assert!(out.contains("  4kB               0         16           0          16                 0"), "{out}");
    let v = thplab(&["sim", &w, "--set", "enabled=always", "--json"]).ok().json();
    assert_eq!(v["peak"]["census"]["sizes"]["2048kB"]["pmd_mapped"], 64);
    assert_eq!(v["peak"]["max_folios"]["2048kB"], 64);
}

#[test]
fn sim_prints_the_folio_map_as_observe_does() {
    let (_d, w) = temp_file("w.thpw", "mmap a 4M\nmmap s 16K shared\ntouch a write\ntouch s write\n");
    let r = thplab(&["sim", &w, "--set", "enabled=always"]);
    r.ok();
    let out = &r.stdout;
    let map = out.split("folio-size map").nth(1).unwrap_or_else(|| panic!("no map:\n{out}"));
    let head = map.lines().nth(1).unwrap();
    assert!(head.starts_with("address range") && head.contains("4kB") && head.contains("2048kB") && head.ends_with("name"), "{head}");
    assert!(map.lines().any(|l| l.contains("rw-p") && l.contains("4096 kB") && l.ends_with("[anon]")), "{map}");
    assert!(map.lines().any(|l| l.contains("rw-s") && l.contains("16 kB") && l.ends_with("[shmem]")), "{map}");
    let v = thplab(&["sim", &w, "--set", "enabled=always", "--json"]).ok().json();
    let vmas = v["vmas"].as_array().unwrap();
    assert_eq!(vmas.len(), 2);
    let a = vmas.iter().find(|x| x["kind"] == "anon").unwrap();
    assert_eq!(a["census"]["sizes"]["2048kB"]["pmd_mapped"], 2);
    assert_eq!(a["anon_huge_kb"], 4096);
    let start = u64::from_str_radix(a["start"].as_str().unwrap(), 16).unwrap();
    let end = u64::from_str_radix(a["end"].as_str().unwrap(), 16).unwrap();
    assert_eq!(end - start, 4 << 20);
}

#[test]
fn explain_from_the_command_line() {
    let (_d, w) = temp_file("w.thpw", "mmap a 64K align=64K\ntouch a[0+4K] read\ntouch a write\n");
    let set = ["--set", "enabled=never", "--set", "hugepages-64kB/enabled=always"];
    let v = thplab(&[&["sim", w.as_str(), "--json"][..], &set[..]].concat()).ok().json();
    let start = v["regions"][0]["start"].as_u64().unwrap();
    let range = format!("{:#x}-{:#x}", start, start + 0x10000);
    let r = thplab(&[&["sim", w.as_str(), "--explain", &range][..], &set[..]].concat());
    r.ok();
    let out = &r.stdout;
    assert!(out.contains(&format!("explain {range}: 17 faults touched it")), "{out}");
    assert!(out.contains(&format!("  {:#x} read  got zero page      refused: hugepages-64kB read_fault", start)), "{out}");
    assert!(out.contains(&format!("  {:#x} write got 4kB            refused: hugepages-64kB zero_page_cow", start)), "{out}");
    assert!(out.contains("    hugepages-64kB    pte_range_populated 15  read_fault 1  zero_page_cow 1"), "{out}");
    let v = thplab(&[&["sim", w.as_str(), "--json", "--explain", &range][..], &set[..]].concat()).ok().json();
    assert_eq!(v["explain"]["totals"], v["fallbacks"]);
    let r = thplab(&["sim", &w, "--explain", "0xnothex"]);
    r.fails(2);
    assert!(r.stderr.contains("is not a hex address"), "{}", r.stderr);
}


#[test]
fn settings_json_reads_back_as_settings() {
    let first = thplab(&["settings", "--set", "enabled=always", "--set", "hugepages-64kB/enabled=always", "--set", "khugepaged/max_ptes_none=0", "--json"]);
    first.ok();
    let (_d, f) = temp_file("s.json", &first.stdout);
    let again = thplab(&["settings", "--settings", &f, "--json"]);
    again.ok();
    assert_eq!(again.stdout, first.stdout);
    assert_eq!(again.json()["khugepaged/max_ptes_none"], "0");
    let (_d2, bad) = temp_file("bad.json", "{\"enabled\": [1]}");
    let r = thplab(&["settings", "--settings", &bad]);
    r.fails(2);
    assert!(r.stderr.contains("\"enabled\" has [1]"), "{}", r.stderr);
    let (_d3, bad) = temp_file("bad.json", "{\"enabled\": \"sometimes\"}");
    let r = thplab(&["settings", "--settings", &bad]);
    r.fails(2);
    assert!(r.stderr.contains("bad.json") && r.stderr.contains("sometimes"), "{}", r.stderr);
}

#[test]
fn settings_from_a_sysfs_tree_directory_read_without_changing_it() {
    // A copy of the tree as the kernel shows it: bracketed selections, a stats directory, a
    // read-only hpage_pmd_size.
    let d = tempfile::tempdir().unwrap();
    let t = d.path();
    let w = |rel: &str, text: &str| {
        let p = t.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    w("enabled", "always madvise [never]\n");
    w("defrag", "always defer defer+madvise [madvise] never\n");
    w("hpage_pmd_size", "2097152\n");
    w("hugepages-64kB/enabled", "[always] inherit madvise never\n");
    w("hugepages-64kB/stats/anon_fault_alloc", "12\n");
    w("khugepaged/max_ptes_none", "17\n");
    let before: Vec<(String, String)> = ["enabled", "hugepages-64kB/enabled", "khugepaged/max_ptes_none"].iter().map(|r| (r.to_string(), std::fs::read_to_string(t.join(r)).unwrap())).collect();
    let v = thplab(&["settings", "--settings", t.to_str().unwrap(), "--json"]).ok().json();
    assert_eq!(v["enabled"], "never");
    assert_eq!(v["hugepages-64kB/enabled"], "always");
    assert_eq!(v["khugepaged/max_ptes_none"], "17");
    for (rel, text) in before {
        assert_eq!(std::fs::read_to_string(t.join(&rel)).unwrap(), text, "{rel} changed");
    }
    let r = thplab(&["settings", "--settings", d.path().join("hugepages-64kB").to_str().unwrap()]);
    r.fails(2);
    assert!(r.stderr.contains("not a THP sysfs tree"), "{}", r.stderr);
}

#[test]
fn settings_live_reads_this_machines_knobs() {
    const SYSFS: &str = "/sys/kernel/mm/transparent_hugepage";
    if !std::path::Path::new(SYSFS).join("enabled").exists() {
        eprintln!("skipped: {SYSFS} does not exist");
        return;
    }
    let v = thplab(&["settings", "--settings", "live", "--json"]).ok().json();
    // Each knob as the kernel shows it now (the bracketed word, or the number).
    for rel in ["enabled", "defrag", "hugepages-64kB/enabled", "hugepages-2048kB/enabled", "khugepaged/max_ptes_none"] {
        let Ok(text) = std::fs::read_to_string(std::path::Path::new(SYSFS).join(rel)) else { continue };
        let t = text.trim();
        let selected = match (t.find('['), t.find(']')) {
            (Some(a), Some(b)) => &t[a + 1..b],
            _ => t,
        };
        assert_eq!(v[rel], selected, "{rel}: {t}");
    }
}

pub(crate) mod recording {
    //! A hand-made recording: the root process maps 4 MiB of anonymous memory where the model,
    //! under the recording's knobs, would not (a placement miss), writes 16 pages of it, and
    //! forks a child that execs, maps 64 KiB and writes it; both exit.

    use trace::{flags, Event, EventBody, Header, MapEntry, Syscall, SyscallKind};

    const LD: u64 = 0x7fff_f7fc_a000;
    const BASE: u64 = 0x7fff_f7ff_f000;
    /// 4 MiB right below ld.so: 4 KiB-aligned only. A 4 MiB anonymous mapping is placed 2 MiB
    /// aligned by thp_get_unmapped_area, so the model would put it at Z rounded down to 2 MiB,
    /// 0x7fff_f7a0_0000.
    pub const Z: u64 = LD - (4 << 20);

    fn sc(kind: SyscallKind, args: &[u64], ret: i64) -> EventBody {
        EventBody::Syscall(Syscall { kind, args: args.to_vec(), ret: Some(ret), duration_ns: 10 })
    }

    pub fn events() -> (Header, Vec<Event>) {
        let map = |start, end, perms, ino, path: &[u8]| MapEntry { start, end, perms, offset: 0, maj: 0, min: 0, ino, path: path.to_vec() };
        let mut b: Vec<(u32, EventBody)> = vec![
            (100, EventBody::ExecMaps(vec![map(LD, BASE, 1, 5, b"/lib/ld.so"), map(0x7fff_fffd_e000, 0x7fff_ffff_f000, 3, 0, b"[stack]")])),
            (100, sc(SyscallKind::Mmap, &[0, 4 << 20, 3, 0x22, u64::MAX, 0], Z as i64)),
        ];
        for i in 0..16 {
            b.push((100, EventBody::Fault { addr: Z + i * 4096, error_code: 6 }));
        }
        b.push((101, EventBody::TaskNew { tid: 101, pid: 101 }));
        b.push((101, sc(SyscallKind::Execve, &[0, 0, 0], 0)));
        b.push((101, sc(SyscallKind::Mmap, &[0, 64 << 10, 3, 0x22, u64::MAX, 0], 0x7fff_f7f0_0000)));
        for i in 0..16 {
            b.push((101, EventBody::Fault { addr: 0x7fff_f7f0_0000 + i * 4096, error_code: 6 }));
        }
        b.push((101, sc(SyscallKind::ExitGroup, &[0], 0)));
        b.push((100, sc(SyscallKind::Munmap, &[Z, 4 << 20], 0)));
        b.push((100, sc(SyscallKind::ExitGroup, &[0], 0)));
        let events: Vec<Event> = b.into_iter().enumerate().map(|(i, (pid, body))| Event { time_ns: i as u64 * 100, tid: pid, pid, body }).collect();
        let mut counts = std::collections::BTreeMap::new();
        for e in &events {
            *counts.entry(e.body.kind_code()).or_insert(0u64) += 1;
        }
        let header = Header {
            root_pid: 100,
            page_size: 4096,
            flags: flags::THP_DISABLED | flags::NO_RANDOMIZE | flags::EXEC_SNAPSHOT,
            thp_settings: b"enabled:always [madvise] never\n".to_vec(),
            exec_path: b"/usr/bin/hand-made".to_vec(),
            counts: counts.into_iter().collect(),
            ..Header::default()
        };
        (header, events)
    }

    /// The recording as a file's bytes, in blocks of about 64 bytes (the recorder's are 4 KiB:
    /// this small recording would be one block), so that damage can fall after whole blocks.
    pub fn bytes() -> Vec<u8> {
        let (h, ev) = events();
        let mut w = trace::TraceWriter::new(Vec::new(), &h).unwrap().with_block_bytes(64);
        for e in &ev {
            w.write(e).unwrap();
        }
        w.finish().unwrap()
    }
}

fn write_bytes(name: &str, bytes: &[u8]) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    std::fs::write(&p, bytes).unwrap();
    (dir, p.display().to_string())
}

#[test]
fn a_replay_prints_each_process_and_warns_of_placements_it_could_not_reproduce() {
    let (_d, f) = write_bytes("hand.trace", &recording::bytes());
    let r = thplab(&["sim", &f]);
    r.ok();
    let out = &r.stdout;
    // Two images: the root's (16 faults of 4 KiB, all unmapped before exit; the replay maps the
    // top page of the recorded stack at exec, so 4 kB at exit and a 64 + 4 kB peak) and the
    // child's after its execve (16 pages, 64 KiB at exit).
    let procs = out.split("per process").nth(1).unwrap_or_else(|| panic!("no per-process section:\n{out}"));
    let lines: Vec<&str> = procs.lines().skip(2).take_while(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 2, "{procs}");
    let cols = |l: &str| l.split_whitespace().map(String::from).collect::<Vec<_>>();
    let child = cols(lines.iter().find(|l| l.trim_start().starts_with("101")).unwrap());
    // The child's image was made by an execve the hand-made recording has no snapshot of; the
    // root's has one.
    assert_eq!(child[..8], ["101", "1", "no", "16", "64", "kB", "64", "kB"], "{procs}");
    let root = cols(lines.iter().find(|l| l.trim_start().starts_with("100")).unwrap());
    assert_eq!(root[..8], ["100", "0", "yes", "16", "4", "kB", "68", "kB"], "{procs}");
    assert!(lines.iter().any(|l| l.ends_with("/usr/bin/hand-made")), "{procs}");
    // The placement miss is warned in text (stderr), with both addresses.
    // The child's image has no address-space snapshot, so the model places its mapping below
    // the default mmap_base (0x7dfffffc5000 - 64 KiB): a second miss.
    assert!(r.stderr.contains("2 of 2 mappings without MAP_FIXED could not be placed where the kernel put them"), "{}", r.stderr);
    assert!(r.stderr.contains(&format!("pid 100: private anonymous mapping of 4194304 bytes (hint 0x0): the kernel put it at {:#x}, the model would at 0x7ffff7a00000", recording::Z)), "{}", r.stderr);
    assert!(r.stderr.contains("pid 101: private anonymous mapping of 65536 bytes (hint 0x0): the kernel put it at 0x7ffff7f00000, the model would at 0x7dfffffb5000"), "{}", r.stderr);
    // The two misses, their summary, and that the child's execve has no snapshot.
    assert!(r.stderr.contains("1 process images made by an execve have no exec snapshot"), "{}", r.stderr);
    assert!(out.contains("WARNING: 0 of 2 placements matched the kernel's, 0 relocated; 4 replay warnings (printed on stderr"), "{out}");
    let v = thplab(&["sim", &f, "--json"]).ok().result();
    let rp = v.model.as_ref().and_then(|m| m.replay.as_ref()).expect("model.replay");
    assert_eq!(rp.per_process.len(), 2);
    assert_eq!(rp.placements_matched, 0);
    assert!(v.vmas.iter().any(|x| x.pid == Some(101) && x.rss_kb == 64), "{:?}", v.vmas);
}

#[test]
fn salvage_replays_a_damaged_recording_up_to_the_damage() {
    let whole = recording::bytes();
    // Cut the file in the middle of the child's faults: the trailer and the records after the
    // cut are lost.
    let cut = whole.len() - 40;
    let (_d, f) = write_bytes("cut.trace", &whole[..cut]);
    let r = thplab(&["sim", &f]);
    r.fails(2);
    assert!(r.stderr.contains("byte ") && r.stderr.contains("the file ends too early"), "{}", r.stderr);
    let r = thplab(&["sim", &f, "--salvage"]);
    r.ok();
    assert!(r.stderr.contains(&format!("{f} is damaged at byte")), "{}", r.stderr);
    assert!(r.stderr.contains("--salvage replayed the"), "{}", r.stderr);
    assert!(r.stdout.contains("SALVAGED: the recording is damaged at byte"), "{}", r.stdout);
    let v = thplab(&["sim", &f, "--salvage", "--json"]).ok().result();
    let s = v.model.as_ref().and_then(|m| m.replay.as_ref()).and_then(|rp| rp.salvage.clone()).expect("model.replay.salvage");
    let offset = s.offset;
    assert!(offset <= cut as u64, "{s:?}");
    assert_eq!(s.bytes_lost, cut as u64 - offset);
    assert_eq!(s.file_bytes, cut as u64);
    let read = s.records_read;
    let (_, ev) = recording::events();
    assert_eq!(read + s.records_lost.expect("the header counts the records"), ev.len() as u64, "{s:?}");
    assert!(read > 0 && read < ev.len() as u64, "{s:?}");
    // A whole recording salvages to itself: no salvage report.
    let (_d2, g) = write_bytes("whole.trace", &whole);
    let whole_run = thplab(&["sim", &g, "--salvage", "--json"]);
    let rp = whole_run.ok().result().model.and_then(|m| m.replay).expect("model.replay");
    assert_eq!(rp.salvage, None);
    // Not even as null: the key is left out.
    assert!(!whole_run.stdout.contains("\"salvage\""), "{}", whole_run.stdout);
    // A damaged header cannot be salvaged.
    let (_d3, h) = write_bytes("head.trace", &whole[..12]);
    let r = thplab(&["sim", &h, "--salvage"]);
    r.fails(2);
    assert!(r.stderr.contains("the header is damaged, nothing can be salvaged"), "{}", r.stderr);
}

/// Headless Chromium from the distribution, if installed.
fn chromium() -> Option<String> {
    ["chromium", "chromium-browser"].iter().find_map(|c| {
        std::process::Command::new(c).arg("--version").output().ok().filter(|o| o.status.success()).map(|_| c.to_string())
    })
}

fn chromium_run(bin: &str, extra: &[&str], page: &std::path::Path) -> std::process::Output {
    let profile = tempfile::tempdir().unwrap();
    let url = format!("file://{}", page.display());
    std::process::Command::new(bin)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .output()
        .expect("run chromium")
}

#[test]
fn report_writes_one_html_file_with_its_plots_and_chromium_shows_them() {
    let (d, w) = temp_file("w.thpw", FREES_BEFORE_EXIT);
    let json = thplab(&["sim", &w, "--matrix", "--json", "-q"]);
    json.ok();
    let res = d.path().join("matrix.json");
    std::fs::write(&res, &json.stdout).unwrap();
    let page = d.path().join("report.html");
    let r = thplab(&["report", res.to_str().unwrap(), "-o", page.to_str().unwrap()]);
    r.ok();
    assert!(r.stderr.contains("wrote") && r.stderr.contains("(11 runs)"), "{}", r.stderr);
    let html = std::fs::read_to_string(&page).unwrap();
    // Self-contained: no script, nothing fetched.
    assert!(!html.contains("<script") && !html.contains("src=") && !html.contains("href="), "not self-contained");
    // 5 bar charts (faults, Rss, peak Rss, bloat, large folios) of 11 bars each; one folio map
    // per setting, each with the one VMA left at exit.
    assert_eq!(html.matches("data-plot=\"bars\"").count(), 5);
    assert_eq!(html.matches("<rect class=\"bar\"").count(), 55);
    assert_eq!(html.matches("data-plot=\"folio-map\"").count(), 11);
    // `sim --html` writes the same kind of page for one run.
    let one = d.path().join("one.html");
    thplab(&["sim", &w, "--set", "enabled=always", "-q", "--html", one.to_str().unwrap()]).ok();
    assert_eq!(std::fs::read_to_string(&one).unwrap().matches("<rect class=\"bar\"").count(), 5);
    // Bad input: not JSON, not a result.
    let (_d2, bad) = temp_file("bad.json", "[1, 2]");
    let r = thplab(&["report", &bad, "-o", page.to_str().unwrap()]);
    r.fails(2);
    assert!(r.stderr.contains("entry 0 has neither"), "{}", r.stderr);

    let Some(bin) = chromium() else {
        eprintln!("skipped the rendering: chromium is not installed (.ci/run installs it as root)");
        return;
    };
    let out = chromium_run(&bin, &["--dump-dom"], &page);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    // The browser parsed the SVG: the rendered DOM holds every plot, bar and label.
    assert_eq!(dom.matches("<svg").count(), 16, "5 bar charts + 11 folio maps");
    assert_eq!(dom.matches("class=\"bar\"").count(), 55);
    assert!(dom.contains(">PMD always</text>") && dom.contains(">4K only</text>"), "labels missing");
    // A screenshot is not blank: it has coloured (bar) pixels.
    let shot = tempfile::tempdir().unwrap();
    let png = shot.path().join("shot.png");
    let out = chromium_run(&bin, &[&format!("--screenshot={}", png.display()), "--window-size=1000,1400"], &page);
    assert!(out.status.success() && png.exists(), "no screenshot: {}", String::from_utf8_lossy(&out.stderr));
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG"), "not a PNG");
    // A blank white 1000x1400 PNG compresses to a few kB; bars, text and colours do not.
    assert!(bytes.len() > 20_000, "screenshot of {} bytes looks blank", bytes.len());
}

/// Issue #27 item 12b: a timed recording's elapsed time in its parts. Replayed under the
/// setting it was recorded with (THP off), the model's work is the baseline itself, so the
/// program's own time is the measured 2 ms less the priced work and elapsed is the 2 ms measured.
#[test]
fn a_timed_recordings_elapsed_says_how_much_was_measured_and_how_much_priced() {
    let (h, ev) = recording::events();
    let h = trace::Header { untraced_wall_ns: 2_000_000, ..h };
    let mut w = trace::TraceWriter::new(Vec::new(), &h).unwrap();
    for e in &ev {
        w.write(e).unwrap();
    }
    let (_d, f) = write_bytes("timed.trace", &w.finish().unwrap());
    let args = ["sim", &f, "--set", "enabled=never", "--set", "shmem_enabled=never", "--profile", "builtin", "-q"];
    let v = thplab(&[&args[..], &["--json"]].concat()).ok().result();
    let t = v.time.expect("time");
    let (own, base) = (t.program_ns.expect("program_ns"), t.baseline_ns.expect("baseline_ns"));
    assert_eq!(t.measured_ns, Some(2_000_000));
    assert!(base > 0.0 && (base - t.total_ns).abs() < 1e-6 * base, "baseline {base} vs total {}", t.total_ns);
    assert!((own - (2e6 - base)).abs() < 1e-6, "{own} {base}");
    assert_eq!(t.elapsed_ns, 2_000_000);
    let text = thplab(&args).ok().stdout.clone();
    // The line is wrapped to 100 columns (continuations indented 33): read it back whole.
    let mut lines = text.lines().skip_while(|l| !l.trim_start().starts_with("elapsed"));
    let mut line = lines.next().expect("an elapsed line").to_string();
    for l in lines.take_while(|l| l.starts_with(&" ".repeat(33))) {
        assert!(l.chars().count() <= 100, "{l}");
        line = format!("{line} {}", l.trim_start());
    }
    let ms = |ns: f64| format!("{:.1} ms", ns / 1e6);
    let us = |ns: f64| if ns >= 1e6 { ms(ns) } else { format!("{:.1} µs", ns / 1e3) };
    assert_eq!(
        line,
        format!(
            "  elapsed               2.0 ms   (of which {} the program's own time, measured: its untraced wall time 2.0 ms (record --timed) less the model's {} for its work at 4 KiB pages; {} the model's work, priced by the profile: the time above)",
            us(own),
            us(base),
            us(t.total_ns)
        )
    );
}

/// 16 MiB filled at 16 MiB/s (a base page per 2 MiB first, under MADV_NOHUGEPAGE, so khugepaged
/// has PTE tables to collapse), half of it dropped, then 300 ms of sleep; three phases.
const TIMED: &str = "phase fill\nmmap a 16M align=2M\nmadvise a nohugepage\ntouch a write stride=2M\nmadvise a hugepage\n\
    touch a write rate=16M/s\nphase free\nmadvise a[0+8M] dontneed\nphase idle\nsleep 300ms\n";

/// The `data-points` of the series NAME in a page fragment, as (x, y) pairs.
fn series_points(html: &str, name: &str) -> Vec<(f64, f64)> {
    let at = html.find(&format!("data-series=\"{name}\" data-points=\"")).unwrap_or_else(|| panic!("no series {name}"));
    let rest = &html[at..];
    let start = rest.find("data-points=\"").unwrap() + "data-points=\"".len();
    let end = start + rest[start..].find('"').unwrap();
    rest[start..end].split(' ').map(|p| p.split_once(',').map(|(x, y)| (x.parse().unwrap(), y.parse().unwrap())).unwrap()).collect()
}

/// `data-NAME="…"` of each element whose opening tag holds `marker`.
fn attrs_of(html: &str, marker: &str, name: &str) -> Vec<String> {
    html.match_indices(marker)
        .map(|(i, _)| {
            let tag = &html[i..i + html[i..].find('>').unwrap()];
            let k = tag.find(&format!("{name}=\"")).unwrap_or_else(|| panic!("no {name} in {tag}")) + name.len() + 2;
            tag[k..k + tag[k..].find('"').unwrap()].to_string()
        })
        .collect()
}

#[test]
fn report_plots_the_timeline_and_the_time_of_a_sampled_priced_matrix() {
    let (d, w) = temp_file("t.thpw", TIMED);
    let set = ["--set", "khugepaged/scan_sleep_millisecs=100", "--set", "khugepaged/max_ptes_none=511"];
    let json = thplab(&[&["sim", w.as_str(), "--matrix", "--sample", "100", "--profile", "builtin", "--json", "-q"][..], &set[..]].concat());
    json.ok();
    let v = json.json();
    let runs = v.as_array().unwrap();
    let res = d.path().join("m.json");
    std::fs::write(&res, &json.stdout).unwrap();
    let page = d.path().join("m.html");
    thplab(&["report", res.to_str().unwrap(), "-o", page.to_str().unwrap()]).ok();
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains("<script") && !html.contains("href="), "not self-contained");
    assert!(!html.contains("No timeline") && !html.contains("No time in"), "the sampled, priced runs' plots are missing");
    // One elapsed-time chart: a bar per setting, its value the simulated clock at the end, in
    // ms. Each run sleeps 300 ms after a fill paced to 1 s: at least 1300 ms each.
    let values: Vec<f64> = attrs_of(&html, "<rect class=\"bar\" data-value=", "data-value").iter().map(|x| x.parse().unwrap()).collect();
    let time_chart = &html[html.find("data-plot=\"time\"").expect("no time chart")..];
    let time_values: Vec<f64> = attrs_of(&time_chart[..time_chart.find("</figure>").unwrap()], "<rect class=\"bar\"", "data-value").iter().map(|x| x.parse().unwrap()).collect();
    assert_eq!(time_values.len(), 11);
    assert_eq!(values.len(), 6 * 11, "5 charts of the census and Rss, and the time");
    for (r, ms) in runs.iter().zip(&time_values) {
        assert_eq!(*ms, r["model"]["time"]["elapsed_ns"].as_f64().unwrap() / 1e6);
        assert!(*ms >= 1300.0, "{ms}");
    }
    // The phases: three per setting (fill, free, idle), each its result's ns; idle is 300 ms.
    let phases = attrs_of(&html, "<rect class=\"phase\"", "data-ns");
    let names = attrs_of(&html, "<rect class=\"phase\"", "data-phase");
    assert_eq!(phases.len(), 33);
    for (i, r) in runs.iter().enumerate() {
        let ps = r["model"]["time"]["phases"].as_array().unwrap();
        for (j, p) in ps.iter().enumerate() {
            assert_eq!(names[i * 3 + j], p["name"].as_str().unwrap());
            assert_eq!(phases[i * 3 + j], p["ns"].to_string());
        }
        assert_eq!(ps[2]["ns"], 300_000_000u64);
    }
    // Each run's timeline: three charts whose lines are the result's samples.
    assert_eq!(html.matches("<div class=\"timeline\"").count(), 11);
    assert_eq!(html.matches("data-plot=\"timeline-").count(), 33);
    for (i, r) in runs.iter().enumerate() {
        let part = html.split("<div class=\"timeline\"").nth(i + 1).unwrap();
        let part = &part[..part.find("</div>").unwrap()];
        assert!(part.starts_with(&format!(" data-run=\"{}\"", r["label"].as_str().unwrap())), "run {i} out of order");
        let samples = r["model"]["timeline"]["samples"].as_array().unwrap();
        assert!(samples.len() >= 13, "a sample every 100 ms of a 1.3 s run");
        let col = |f: &dyn Fn(&serde_json::Value) -> f64| samples.iter().map(|s| (s["t_ms"].as_f64().unwrap(), f(s))).collect::<Vec<_>>();
        assert_eq!(series_points(part, "Rss"), col(&|s| s["rss_kb"].as_f64().unwrap()));
        assert_eq!(series_points(part, "AnonHugePages"), col(&|s| s["anon_huge_pages_kb"].as_f64().unwrap()));
        assert_eq!(series_points(part, "pages_collapsed"), col(&|s| s["pages_collapsed"].as_f64().unwrap()));
        for size in ["4kB", "2048kB"] {
            let kb: f64 = size.trim_end_matches("kB").parse().unwrap();
            if samples.iter().any(|s| s["folios"].get(size).is_some()) {
                assert_eq!(series_points(part, size), col(&|s| s["folios"][size].as_f64().unwrap_or(0.0) * kb));
            }
        }
        // By hand: 16 MiB filled, then 8 MiB dropped: the last sample has 8192 kB, the largest
        // 16384 kB.
        let rss = series_points(part, "Rss");
        assert_eq!(rss.last().unwrap().1, 8192.0);
        assert_eq!(rss.iter().map(|p| p.1).fold(0.0, f64::max), 16384.0);
    }
    // 4K only (enabled=never): khugepaged collapses nothing; PMD always: AnonHugePages follows Rss.
    let part = |i: usize| html.split("<div class=\"timeline\"").nth(i + 1).unwrap().to_string();
    assert!(series_points(&part(0), "AnonHugePages").iter().all(|p| p.1 == 0.0));
    assert!(series_points(&part(9), "AnonHugePages").last().unwrap().1 == 8192.0);

    let Some(bin) = chromium() else {
        eprintln!("skipped the rendering: chromium is not installed (.ci/run installs it as root)");
        return;
    };
    let out = chromium_run(&bin, &["--dump-dom"], &page);
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    let dom = String::from_utf8_lossy(&out.stdout);
    // 5 + 1 bar charts, the phases, 33 timeline charts and 11 folio maps, every line parsed.
    assert_eq!(dom.matches("<svg").count(), 6 + 1 + 33 + 11);
    assert_eq!(dom.matches("<polyline class=\"series\"").count(), html.matches("<polyline class=\"series\"").count());
    assert_eq!(dom.matches("class=\"phase\"").count(), 33);
    let shot = tempfile::tempdir().unwrap();
    let png = shot.path().join("shot.png");
    let out = chromium_run(&bin, &[&format!("--screenshot={}", png.display()), "--window-size=1000,1400"], &page);
    assert!(out.status.success() && png.exists(), "no screenshot: {}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read(&png).unwrap().len() > 20_000, "the screenshot looks blank");
}
