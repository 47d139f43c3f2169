//! Real programs of shared memory, khugepaged during a recording, O_DIRECT pins and large
//! execve environments (the second half of [`super`], split for its length): each recorded once,
//! replayed in the model and run live, as there.

use super::*;

/// A System V segment (progs/sysv_shm.c): written 6 of 8 MiB, attached read-only by a forked
/// child that reads all of it, attached at exit. The replay models it from the segment's
/// `map` record (ipc/shm.c: shm_mmap; shmem_enabled decides, no fault-around): under 4 KiB
/// pages the child takes one fault a page (2048), where before the replay took none of the
/// segment's faults as its own; under `shmem_enabled=always` the segment is placed 2 MiB-aligned
/// and gets PMD folios (87 faults in all against 3664).
#[test]
fn sysv_shm_program_model_matches_live_across_the_shmem_matrix() {
    check_c_program("sysv_shm", shmem_matrix(), |_| {}, |label, model, live, failures| {
        if replay_of(model).shmem_files != 1 {
            failures.push(format!("{label}: shmem_files {}, one segment", replay_of(model).shmem_files));
        }
        minflt_within_two(label, model, live, failures);
    });
}

/// Issue #8 (every shmem path): MAP_PRIVATE of a memfd (progs/private_shmem.c): reads map the
/// file's folios read-only, writes copy pages into order-0 anonymous memory (do_cow_fault,
/// wp_page_copy; a PMD-mapped file folio is zapped by the split first), a fork shares the copies
/// and not the file PMDs. Before, the replay counted the mapping as unmodelled and took its
/// faults as 4 KiB pages: 1230 faults against the kernel's 720 under `shmem_enabled=always`.
/// Now minflt, the census and `shmem_alloc` per size agree in every setting of the matrix
/// (under `shmem_enabled=always`: 720 faults, three 2 MiB folios allocated, one split).
#[test]
fn private_shmem_program_model_matches_live_across_the_shmem_matrix() {
    check_c_program("private_shmem", shmem_matrix(), |_| {}, one_memfd_split_as_live);
}

/// Issue #8 (every shmem path, partial madvise of large folios): holes punched in a shared
/// memfd mapped 2 MiB-aligned (progs/punch_hole.c), by MADV_REMOVE and by
/// fallocate(PUNCH_HOLE), their edges inside large folios: the model splits them as
/// `truncate_inode_partial_folio` does (non-uniform `folio_split`: the page at the edge alone,
/// the rest in halves; the folio unmapped everywhere first), frees the folios inside and zaps
/// their mappings. Both calls were ignored before (the holes stayed mapped in the model).
/// Equal to the kernel in minflt, the census (pieces of 8 KiB to 1 MiB) and the per-size
/// `split` counts in every setting: under `shmem_enabled=always` 456 faults, 3 PMD folios split
/// (`thp_split_page`, `thp_split_pmd` 3), one 512 KiB and one 8 KiB piece split again.
#[test]
fn punch_hole_program_model_matches_live_across_the_shmem_matrix() {
    check_c_program("punch_hole", shmem_matrix(), |_| {}, one_memfd_split_as_live);
}

/// Issue #8 (every shmem path): a memfd shrunk over cached pages (progs/truncate_shrink.c),
/// mapped shared and private: `shmem_setattr` unmaps what lies beyond the new end from every
/// mapping, the private copies too, and `shmem_truncate_range` splits the folio across it
/// (pieces beyond EOF dropped) and frees the rest. The replay counted it unmodelled before and
/// kept the pages. Equal to the kernel in every setting of the shmem matrix: under
/// `shmem_enabled=always` 68 faults, one PMD folio split (`thp_split_page`, `thp_split_pmd`).
#[test]
fn truncate_shrink_program_model_matches_live_across_the_shmem_matrix() {
    check_c_program("truncate_shrink", shmem_matrix(), |_| {}, one_memfd_split_as_live);
}

/// Issue #8 (every shmem path): mremap of shmem mappings (progs/mremap_shmem.c): a shared
/// memfd mapping grown in place and moved whole to a 2 MiB-aligned address (its PMDs move as
/// entries: the reads after are hits), a private one moved and grown. The replay turned a
/// remapped shmem VMA into a placeholder before (two calls in `shmem_unmodelled`, the VMAs out of
/// the census). Equal in every setting of the shmem matrix (560 faults under
/// `shmem_enabled=always`, 1582 under 4 KiB pages).
#[test]
fn mremap_shmem_program_model_matches_live_across_the_shmem_matrix() {
    check_c_program("mremap_shmem", shmem_matrix(), |_| {}, one_memfd_split_as_live);
}

/// Issue #8 (shmem shared between processes): a memfd and a POSIX shm object shared with a
/// program started by fork + execve (progs/shm_exec.c), which maps the memfd through the
/// descriptor it inherited and opens the shm object by name. The replay gave an execve'd image an
/// empty descriptor table and names of its own, so both were new, empty files there: 0 of 4
/// settings equal before (Rss 4 MiB low in each, 1198 faults against 669 under
/// `shmem_enabled=always`); now the descriptors survive execve and names are one namespace.
#[test]
fn shmem_shared_across_execve_model_matches_live_across_the_shmem_matrix() {
    check_c_program("shm_exec", shmem_matrix(), |_| {}, |label, model, live, failures| {
        let replay = replay_of(model);
        if (replay.shmem_files, replay.shmem_unmodelled) != (2, 0) {
            failures.push(format!("{label}: shmem_files {} shmem_unmodelled {}, a memfd and a shm object, all modelled", replay.shmem_files, replay.shmem_unmodelled));
        }
        minflt_within_two(label, model, live, failures);
    });
}

/// Issue #8 (shmem shared between processes): a memfd created after a fork and passed to the
/// child over a unix socket (SCM_RIGHTS, progs/scm_rights.c), which maps it shared and private.
/// The trace does not show the descriptor arriving; the replay knows the file by the `map`
/// record of the child's mmap (device and inode, the parent's memfd). Before, the child's
/// mappings were placeholders: 0 of 4 settings equal (Rss 5 MiB low, 1022 faults too many
/// under `shmem_enabled=always`).
#[test]
fn a_memfd_passed_over_a_unix_socket_model_matches_live_across_the_shmem_matrix() {
    check_c_program("scm_rights", shmem_matrix(), |_| {}, one_memfd_split_as_live);
}

/// For a program of one memfd: all of it modelled, and per size `shmem_alloc` and `split`,
/// `thp_split_page` and `thp_split_pmd` equal to the kernel's; minflt within two.
fn one_memfd_split_as_live(label: &str, model: &RunResult, live: &RunResult, failures: &mut Vec<String>) {
    let replay = replay_of(model);
    if (replay.shmem_files, replay.shmem_unmodelled) != (1, 0) {
        failures.push(format!("{label}: shmem_files {} shmem_unmodelled {}, one memfd, all modelled", replay.shmem_files, replay.shmem_unmodelled));
    }
    for (dir, stats) in &live.mthp {
        for stat in ["shmem_alloc", "split"] {
            let (ms, ls) = (model.mthp.get(dir).and_then(|x| x.get(stat)).copied().unwrap_or(0), stats.get(stat).copied().unwrap_or(0));
            if ms != ls {
                failures.push(format!("{label}: {dir}/stats/{stat} model {ms} live {ls}"));
            }
        }
    }
    for key in ["thp_split_page", "thp_split_pmd"] {
        let (m, l) = (model.vmstat.get(key).copied().unwrap_or(0), live.vmstat.get(key).copied().unwrap_or(0));
        if m != l {
            failures.push(format!("{label}: {key} model {m} live {l}"));
        }
    }
    minflt_within_two(label, model, live, failures);
}

/// Issue #5: a C program on every shmem path (memfd mapped with a NULL hint, shared anonymous
/// memory, write() then mmap, POSIX shm unlinked before mmap, pwrite + fallocate + ftruncate,
/// dup + lseek + writev, a linked /dev/shm file) recorded once and predicted under the shmem
/// matrix: minflt, every folio size of the census and per-size `shmem_alloc` equal to the live
/// kernel's. Under the shmem knobs its NULL-hint mappings sit elsewhere than recorded
/// (shmem_get_unmapped_area aligns them), so the replay must relocate them.
#[test]
fn shmem_program_model_matches_live_across_the_shmem_matrix() {
    let check_recording = |rec: &record::Recording| {
        assert_eq!(rec.paths_unavailable, None, "paths must be resolved on this machine");
        // From the program: the two /dev/shm names are each opened and unlinked once.
        // (ld.so's own opens, the library search included, are path records too.)
        let paths = rec.events.iter().filter(|e| matches!(&e.body, trace::EventBody::Path(p) if p.path.starts_with(b"/dev/shm/"))).count();
        assert_eq!(paths, 4, "shm_open, shm_unlink, open and unlink of the /dev/shm file");
    };
    let mut relocated = 0;
    let mut settings = 0;
    check_c_program("shm_prog", shmem_matrix(), check_recording, |label, model, live, failures| {
        settings += 1;
        let replay = replay_of(model);
        assert_eq!(replay.shmem_files, 6, "{label}: memfd a, b, c, shared anonymous, POSIX shm, /dev/shm file");
        // 8 write-family calls reach shmem files: 4 write + pwrite + writev + 2 write.
        assert_eq!(replay.shmem_writes, 8, "{label}");
        assert_eq!(replay.shmem_unmodelled, 0, "{label}");
        assert_eq!(replay.placements_checked, replay.placements_matched, "{label}: the model must place every mapping where the kernel did");
        relocated += replay.relocated;
        for (dir, stats) in &model.mthp {
            let (ms, ls) = (stats.get("shmem_alloc").copied().unwrap_or(0), live.mthp.get(dir).and_then(|x| x.get("shmem_alloc")).copied().unwrap_or(0));
            if ms != ls {
                failures.push(format!("{label}: {dir}/stats/shmem_alloc model {ms} live {ls}"));
            }
        }
    });
    // Skipped (nothing ran) or every setting ran: then some mappings must have moved.
    assert!(settings == 0 || relocated > 0, "under the shmem knobs some mappings must move");
}

/// Issue #8: the shmem program on a machine whose mount table differs from a minimal one, made
/// by the test itself in a private mount namespace (`unshare --mount`): two more tmpfs stacked on
/// /dev/shm (one with `huge=always`, so placement and folio sizes depend on which is on top)
/// and a read-only tmpfs elsewhere; the program itself runs from a tmpfs (as from a temporary
/// directory where /tmp is one: its own image is then a private mapping of a tmpfs file, which
/// the census must leave out on both sides). `thplab compare --record --matrix shmem` must agree in
/// every setting as on any machine: minflt within 5, the census exactly, and every placement
/// under the recording's knobs reproduced. The kernel's own dump of the THP tree, as written
/// into the recording, may hold knobs this model does not know; they must not matter.
#[test]
fn shmem_program_matches_live_under_stacked_dev_shm_mounts() {
    let _x = exclusive();
    if let Some(why) = skip_reason() {
        println!("skipped: {why}");
        return;
    }
    if which("unshare").is_none() {
        println!("skipped: no unshare(1) (util-linux)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = compile_prog(dir.path(), "shm_prog") else { return };
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let knobs_before = knobs();
    let script = format!(
        "set -e; mount --make-rprivate /; mount -t tmpfs -o size=1g tmpfs /dev/shm; \
         mount -t tmpfs -o size=1g,huge=always tmpfs /dev/shm; mount -t tmpfs -o ro,size=4k tmpfs {ro}; \
         mount -t tmpfs -o size=64m tmpfs {bin}; cp {exe} {bin}/; \
         grep -c ' /dev/shm ' /proc/self/mountinfo >&2; \
         exec {thplab} compare --record --matrix shmem --json --program-quiet -- {bin}/shm_prog",
        ro = ro.display(),
        bin = bin.display(),
        thplab = crate::THPLAB,
        exe = exe.display()
    );
    let out = Command::new("unshare").args(["--mount", "sh", "-c", &script]).stdin(Stdio::null()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    let stacked: usize = stderr.lines().next().and_then(|l| l.trim().parse().ok()).unwrap_or(0);
    assert!(stacked >= 3, "the namespace must show /dev/shm stacked at least three times:\n{stderr}");
    // The recording passes the program's own output through before the JSON.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json = stdout.find("\n[").map_or(&stdout[..], |i| &stdout[i + 1..]);
    let runs: Vec<serde_json::Value> = serde_json::from_str(json).unwrap_or_else(|e| panic!("not JSON ({e}); stderr:\n{stderr}"));
    let result = |v: &serde_json::Value| -> uapi::RunResult { serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("not a run result ({e}): {v}")) };
    assert_eq!(runs.len(), 4, "the four settings of --matrix shmem");
    let mut failures = Vec::new();
    for run in &runs {
        let label = run["label"].as_str().unwrap();
        let (model, live) = (result(&run["model"]), result(&run["live"]));
        let replay = replay_of(&model);
        assert_eq!(replay.placements_checked, replay.placements_matched, "{label}: {replay:?}");
        // The top /dev/shm (huge=always) holds the program's POSIX shm and file: the replay
        // must take that mount's huge=, not the one below.
        assert_eq!(replay.shmem_files, 6, "{label}");
        let (m, l) = (model.process.minflt as i64, live.process.minflt as i64);
        println!("{label}: minflt model {m} live {l}; folios model {:?} live {:?}", model.folios, live.folios);
        if (m - l).abs() > 5 {
            failures.push(format!("{label}: minflt model {m} live {l}"));
        }
        if model.folios != live.folios {
            failures.push(format!("{label}: folios model {:?} live {:?}", model.folios, live.folios));
        }
    }
    assert_eq!(knobs(), knobs_before, "THP knobs changed");
    assert!(failures.is_empty(), "model and live differ:\n{}", failures.join("\n"));
}

/// Issue #10: khugepaged in the replay of a recording, on the recording's own timestamps
/// (`sim --recorded-time`). progs/khugepaged_wait.c half fills four 2 MiB ranges with 4 KiB
/// pages, makes them eligible and sleeps 1.5 s; with `scan_sleep_millisecs=100` the live
/// daemon collapses all four during the sleep (wherever its wake-ups fall, 1.5 s holds more
/// than ten of them), and so does the model whose clock follows the recording. Issue #27
/// item 4: that is the default now, so `sim::run_recording` (the path `thplab sim` and
/// `compare --record` take) collapses all four too; only with the recorded clock turned off
/// (`--no-recorded-time`) does the model never run the daemon: 0 collapses, 1024 base pages.
/// Under 4K only (THP `never`) the daemon does nothing, live and model alike.
#[test]
fn khugepaged_collapses_during_a_recorded_program_as_live() {
    let _x = exclusive();
    if let Some(why) = skip_reason() {
        println!("skipped: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = compile_prog(dir.path(), "khugepaged_wait") else { return };
    let knobs_before = knobs();
    let argv = vec![exe.to_string_lossy().into_owned()];
    let os: Vec<OsString> = argv.iter().map(OsString::from).collect();
    let Some(rec) = record_or_skip(&os) else { return };
    let daemon = ["khugepaged/scan_sleep_millisecs=100", "khugepaged/pages_to_scan=4096", "khugepaged/max_ptes_none=511"];
    let mut failures = Vec::new();
    for (label, base, expect) in [("madvise mode", "enabled=madvise", 4u64), ("PMD always", "enabled=always", 4), ("4K only", "enabled=never", 0)] {
        let mut s = ThpSettings::default();
        for k in std::iter::once(&base).chain(&daemon) {
            s.apply_assignment(k).unwrap();
        }
        let opts = sim::ReplayOptions { recorded_time: true, ..Default::default() };
        let model = sim::run_recording_opts("khugepaged_wait", &rec.header, &rec.events, &s, &sim::MachineConfig::default(), &opts).unwrap();
        let plain = sim::run_recording("khugepaged_wait", &rec.header, &rec.events, &s, &sim::MachineConfig::default(), false).unwrap();
        let off = sim::ReplayOptions { recorded_time: false, ..Default::default() };
        let clockless = sim::run_recording_opts("khugepaged_wait", &rec.header, &rec.events, &s, &sim::MachineConfig::default(), &off).unwrap();
        // The collapses happen during the program's 1.5 s sleep: a daemon kept off the CPU for
        // half of it may not reach them all.
        let live = crate::run_with_daemon_on_cpu(label, 750, || live::run_program(&argv, &s, &live::ProgramOptions { quiet: true }).unwrap(), |r| r.live.as_ref().and_then(|l| l.khugepaged.runqueue_wait_ms));
        let thp = |r: &RunResult| r.census.sizes.get(&thp_abi::FolioSize::from("2048kB")).map_or(0, |e| e.pmd_mapped);
        let kh = model.model.as_ref().and_then(|m| m.replay.as_ref()).and_then(|r| r.khugepaged).expect("the daemon ran on the recorded clock");
        println!(
            "{label}: PMD THPs model {} (by default {}, without the recorded clock {}) live {}; model khugepaged {} wake-ups, {} collapsed; live collapsed {}",
            thp(&model),
            thp(&plain),
            thp(&clockless),
            thp(&live),
            kh.wakeups,
            kh.pages_collapsed,
            experiment::khugepaged_collapsed_during(&live)
        );
        if thp(&model) != expect || thp(&live) != expect || kh.pages_collapsed != expect {
            failures.push(format!("{label}: PMD THPs model {} live {} (expected {expect}), model collapsed {}", thp(&model), thp(&live), kh.pages_collapsed));
        }
        let plain_kh = plain.model.as_ref().and_then(|m| m.replay.as_ref()).and_then(|r| r.khugepaged).map_or(0, |k| k.pages_collapsed);
        if thp(&plain) != expect || plain_kh != expect {
            failures.push(format!("{label}: by default the model has {} PMD THPs, {plain_kh} collapsed (expected {expect})", thp(&plain)));
        }
        if thp(&clockless) != 0 {
            failures.push(format!("{label}: without the recorded clock the model collapsed {}", thp(&clockless)));
        }
        let (m, l) = (model.process.minflt as i64, live.process.minflt as i64);
        if (m - l).abs() > 5 {
            failures.push(format!("{label}: minflt model {m} live {l}"));
        }
    }
    assert_eq!(knobs(), knobs_before, "THP knobs changed");
    assert!(failures.is_empty(), "model and live differ:\n{}", failures.join("\n"));
}

/// Issue #27 item 4: `compare --record` of progs/khugepaged_wait.c replays with the daemon on
/// the recorded clock by default (the model collapses the four ranges, as live), and states the
/// tolerance it gave khugepaged and why: one wake-up's collapses, pages_to_scan 4096 / 512 = 8,
/// as the live daemon's phase is not the model's. Under `never` the program's mm never joins
/// the list: no tolerance, and the reason says so.
#[test]
fn compare_of_a_recording_states_its_khugepaged_tolerance() {
    let _x = exclusive();
    if let Some(why) = skip_reason() {
        println!("skipped: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = compile_prog(dir.path(), "khugepaged_wait") else { return };
    let knobs_before = knobs();
    let daemon = ["--set", "khugepaged/scan_sleep_millisecs=100", "--set", "khugepaged/pages_to_scan=4096", "--set", "khugepaged/max_ptes_none=511"];
    for (enabled, collapses, pmd) in [("enabled=madvise", 8, 4), ("enabled=never", 0, 0)] {
        let mut args = vec!["compare", "--record", "--json", "--program-quiet", "--set", enabled];
        args.extend(daemon);
        args.extend(["--", exe.to_str().unwrap()]);
        let r = crate::thplab_unlocked(dir.path(), &args);
        // Exit 0 (model = live) or 4 (a row differs): either way one entry per setting.
        assert!(r.code == 0 || r.code == 4, "exit {}; stderr:\n{}\nstdout:\n{}", r.code, r.stderr, r.stdout);
        let v = r.json();
        let t = &v[0]["khugepaged_tolerance"];
        println!("{enabled}: {t}");
        assert_eq!(t["collapses"], collapses, "{t}");
        let why = t["why"].as_str().unwrap();
        if collapses > 0 {
            assert!(why.contains("pages_to_scan 4096 / 512 = 8 collapses") && why.contains("100 ms sleep"), "{why}");
        } else {
            assert!(why.starts_with("none: no mm of the program joined"), "{why}");
        }
        let row = v[0]["rows"].as_array().unwrap().iter().find(|r| r["field"] == "census 2048kB pmd-mapped").cloned();
        assert_eq!(row.map_or(0, |r| r["model"].as_i64().unwrap()), pmd, "{enabled}: the model's PMD THPs by default");
    }
    let mut args = vec!["compare", "--record", "--program-quiet", "--set", "enabled=madvise"];
    args.extend(daemon);
    args.extend(["--", exe.to_str().unwrap()]);
    let r = crate::thplab_unlocked(dir.path(), &args);
    println!("{}", r.stdout);
    assert!(r.stdout.lines().any(|l| l.trim_start().starts_with("khugepaged tolerance: 8 collapses (")), "{}", r.stdout);
    assert_eq!(knobs(), knobs_before, "THP knobs changed");
}

/// Issue #12: O_DIRECT reads in a recording are replayed as pins. progs/direct_read.c reads
/// 4 MiB with O_DIRECT (read, then pread) into a 2 MiB-aligned buffer it never touches; the
/// kernel pins each read's part of the buffer with FOLL_WRITE and faults it in through GUP (no
/// page-fault exception, so nothing of it is recorded). The replay pins what each recorded read
/// filled: 8 reads, 4 MiB, and the faults the size gives, by hand: 1024 under 4K (one per page),
/// 64 under 64K (a 64 KiB folio per fault), 2 under PMD (a THP per aligned 2 MiB); minflt and
/// the large folios as the live runs.
#[test]
fn direct_reads_in_a_recording_are_replayed_as_pins() {
    let _x = exclusive();
    if let Some(why) = skip_reason() {
        println!("skipped: {why}");
        return;
    }
    // A file on a disk file system (a tmpfs takes O_DIRECT as buffered I/O): /var/tmp.
    let dir = tempfile::tempdir_in("/var/tmp").or_else(|_| tempfile::tempdir()).unwrap();
    let Some(exe) = compile_prog(dir.path(), "direct_read") else { return };
    let data = dir.path().join("data");
    std::fs::write(&data, vec![7u8; 4 << 20]).unwrap();
    let status = Command::new(&exe).arg(&data).status().unwrap();
    if status.code() == Some(77) {
        println!("skipped: {} does not take O_DIRECT", dir.path().display());
        return;
    }
    assert!(status.success(), "direct_read failed: {status}");
    let knobs_before = knobs();
    let argv = vec![exe.to_string_lossy().into_owned(), data.to_string_lossy().into_owned()];
    let os: Vec<OsString> = argv.iter().map(OsString::from).collect();
    let Some(rec) = record_or_skip(&os) else { return };
    let mut failures = Vec::new();
    for (label, knobs, pin_faults) in [
        ("4K only", vec!["enabled=never"], 1024u64),
        ("64K alone", vec!["enabled=never", "hugepages-64kB/enabled=always"], 64),
        ("PMD always", vec!["enabled=always"], 2),
    ] {
        let mut s = ThpSettings::default();
        for k in knobs {
            s.apply_assignment(k).unwrap();
        }
        let model = sim::run_recording("direct_read", &rec.header, &rec.events, &s, &sim::MachineConfig::default(), false).unwrap();
        let live = live::run_program(&argv, &s, &live::ProgramOptions { quiet: true }).unwrap();
        let io = model.io.clone().unwrap_or_default();
        let large = |r: &RunResult| r.census.sizes.iter().filter(|(k, _)| k.as_str() != "4kB").map(|(k, e)| (k.clone(), e.folios)).collect::<Vec<_>>();
        println!("{label}: minflt model {} live {}; io {io:?}; large folios model {:?} live {:?}", model.process.minflt, live.process.minflt, large(&model), large(&live));
        if (io.direct_reads, io.bytes, io.pin_faults) != (8, 4 << 20, pin_faults) {
            failures.push(format!("{label}: io {io:?}, expected 8 reads of 4 MiB in all and {pin_faults} pin faults"));
        }
        let (m, l) = (model.process.minflt as i64, live.process.minflt as i64);
        if (m - l).abs() > 5 {
            failures.push(format!("{label}: minflt model {m} live {l}"));
        }
        if large(&model) != large(&live) {
            failures.push(format!("{label}: large folios model {:?} live {:?}", large(&model), large(&live)));
        }
    }
    assert_eq!(knobs(), knobs_before, "THP knobs changed");
    assert!(failures.is_empty(), "model and live differ:\n{}", failures.join("\n"));
}

/// A shell with a 20 000-byte environment variable runs `true` 20 times: each execve writes the
/// strings, auxv and pointer arrays over 6 stack pages (the environment, PATH and the rest) and
/// the recording's `exec_stack` records say where the stack starts; before them the replay took
/// one page per execve, 5 faults and 20 KiB of Rss too few for each of the 21 images (derived:
/// about 105 of the 1242 faults live, -8 %; with the records, 1241 against 1242 on this machine).
/// minflt must agree within 2 % (or the live runs' spread), as in the other programs.
#[test]
fn execs_with_a_large_environment_model_matches_live() {
    if let Some(r) = skip_reason() {
        println!("skipped: {r}");
        return;
    }
    let (Some(env), Some(sh), Some(t)) = (which("env"), which("sh"), which("true")) else {
        println!("skipped: no env, sh or true");
        return;
    };
    let big = format!("THPLAB_BIG={}", "x".repeat(20_000));
    let script = format!("for i in {}; do {t}; done", (1..=20).map(|i| i.to_string()).collect::<Vec<_>>().join(" "));
    let argv = vec![env, big, sh, "-c".to_string(), script];
    check_program("env + sh + 20 execs", &argv, &|| {}, None, &[], &[]);
}

/// A shell script run as a pyenv shim runs python3 (bash → env → bash → the program): a
/// process that execs again and again, and fork children that exec (command substitutions,
/// one of them exec'ing twice) or never do (subshells). Live, each process is measured at its
/// exit (Rss and the census of the image it ends with; minflt from the program's first exec, a
/// descendant's from its creation); the replay must count the same: before, it added the
/// census of every image an execve had replaced (`python3 -c ...` through the shim: Rss model
/// 16112 kB, live 9528 kB) and left out a child's faults before its exec and inside a later
/// execve (+618 minflt), and the live run dropped a fork child whose first stop came before
/// its parent's fork event from the census. minflt, Rss and the 4 kB census must agree within
/// 2 % (or the two live runs' spread).
#[test]
fn shell_that_execs_again_model_matches_live() {
    if let Some(r) = skip_reason() {
        println!("skipped: {r}");
        return;
    }
    let (Some(bash), Some(env)) = (which("bash"), which("env")) else {
        println!("skipped: no bash or env");
        return;
    };
    let inner = format!("v=$({env} {env} true); exec {env} true");
    let script = format!("for i in 1 2 3 4 5 6; do v=$({env} true); (:); done; exec {env} {bash} -c '{inner}'");
    let argv = vec![bash.clone(), "-c".into(), script];
    let _x = exclusive();
    let knobs_before = knobs();
    let os: Vec<OsString> = argv.iter().map(OsString::from).collect();
    let Some(rec) = record_or_skip(&os) else { return };
    assert_eq!(rec.header.lost_events, 0, "the recording lost events");
    assert_eq!(rec.header.exit_status, 0, "the script failed while recorded");
    let opts = live::ProgramOptions { quiet: true };
    let mut failures = Vec::new();
    for (label, s) in settings() {
        let model = sim::run_recording("shell", &rec.header, &rec.events, &s, &sim::MachineConfig::default(), false).expect("replay");
        let replaced = replay_of(&model).per_process.iter().filter(|p| p.replaced).count();
        let runs: Vec<RunResult> = (0..2).map(|_| live::run_program(&argv, &s, &opts).expect("live run")).collect();
        let fields: [(&str, &dyn Fn(&RunResult) -> u64); 3] = [
            ("minflt", &|r| r.process.minflt),
            ("Rss kB", &|r| r.process.rss_bytes / 1024),
            ("4kB folios", &|r| r.census.sizes.get(&thp_abi::FolioSize::from("4kB")).map_or(0, |e| e.folios)),
        ];
        for (name, f) in fields {
            let (m, l1, l2) = (f(&model), f(&runs[0]), f(&runs[1]));
            let l = if pct(m, l1).abs() <= pct(m, l2).abs() { l1 } else { l2 };
            let allowed = 2.0f64.max(pct(l1, l2).abs());
            println!("shell {label}: {name} model {m} live {l1} and {l2} ({:+.2}%; allowed {allowed:.2}%); {replaced} images replaced by execve", pct(m, l));
            if pct(m, l).abs() > allowed {
                failures.push(format!("{label}: {name} model {m} live {l1}/{l2} ({:+.2}%)", pct(m, l)));
            }
        }
        for r in &runs {
            let procs = &r.live.as_ref().and_then(|l| l.program.as_ref()).expect("a program run").processes;
            let out: Vec<i32> = procs.iter().filter(|p| !p.in_census).map(|p| p.pid).collect();
            if !out.is_empty() {
                failures.push(format!("{label}: live processes left out of the census (every one here execs or was forked): {out:?}"));
            }
        }
    }
    assert_eq!(knobs(), knobs_before, "THP knobs changed");
    assert!(failures.is_empty(), "model and live differ beyond 2 %:\n{}", failures.join("\n"));
}
