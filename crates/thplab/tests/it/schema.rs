//! docs/results-schema.md tells the truth (issue #14 item 3): every JSON key the program writes
//! is in its key index, and every key listed there is written by some run. The runs: a workload
//! and a recording in the model (and salvaged from a damaged copy), a live run of a workload and
//! of a program (as root; and always the captured ones in `data/live-result.json` and
//! `data/live-program-result.json`), `trace stats`, `observe` (as root) and error objects.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::{temp_file, thplab, workspace};

/// The `keys NAME` blocks of the document: schema name → key patterns (segments).
fn documented() -> BTreeMap<String, Vec<Vec<String>>> {
    let doc = std::fs::read_to_string(workspace().join("docs/results-schema.md")).expect("docs/results-schema.md");
    let mut out: BTreeMap<String, Vec<Vec<String>>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in doc.lines() {
        if let Some(name) = line.strip_prefix("```keys ") {
            current = Some(name.trim().to_string());
            out.entry(name.trim().to_string()).or_default();
        } else if line.starts_with("```") {
            current = None;
        } else if let Some(name) = &current {
            if !line.trim().is_empty() {
                out.get_mut(name).unwrap().push(line.trim().split('.').map(str::to_string).collect());
            }
        }
    }
    out
}

/// Every key path of a JSON document: object keys as segments, array elements as `[]` on the
/// array's segment.
fn paths(v: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                prefix.push(k.clone());
                out.push(prefix.clone());
                paths(x, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(a) if !prefix.is_empty() => {
            let last = prefix.last().cloned().unwrap();
            *prefix.last_mut().unwrap() = format!("{last}[]");
            if !a.is_empty() {
                out.push(prefix.clone());
            }
            for x in a {
                paths(x, prefix, out);
            }
            *prefix.last_mut().unwrap() = last;
        }
        _ => {}
    }
}

fn matches(pattern: &[String], path: &[String]) -> bool {
    pattern.len() == path.len()
        && pattern.iter().zip(path).all(|(p, k)| p == k || (p.starts_with('<') && p.ends_with('>')) || (p.starts_with('<') && p.ends_with(">[]") && k.ends_with("[]")))
}

/// Check `docs` (the documents written, by schema) against the key index, both ways.
fn check(docs: &[(&str, Value)]) {
    let index = documented();
    let mut used: BTreeMap<(String, usize), bool> = BTreeMap::new();
    let mut missing = Vec::new();
    for (schema, doc) in docs {
        let patterns = index.get(*schema).unwrap_or_else(|| panic!("docs/results-schema.md has no `keys {schema}` block"));
        let mut ps = Vec::new();
        paths(doc, &mut Vec::new(), &mut ps);
        for p in ps {
            match patterns.iter().position(|pat| matches(pat, &p)) {
                Some(i) => {
                    used.insert((schema.to_string(), i), true);
                }
                None => missing.push(format!("{schema}: {}", p.join("."))),
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(missing.is_empty(), "keys written but not in docs/results-schema.md:\n{}", missing.join("\n"));
    let mut unwritten = Vec::new();
    for (schema, patterns) in &index {
        for (i, p) in patterns.iter().enumerate() {
            if !used.contains_key(&(schema.clone(), i)) {
                unwritten.push(format!("{schema}: {}", p.join(".")));
            }
        }
    }
    assert!(unwritten.is_empty(), "keys in docs/results-schema.md that no run wrote:\n{}", unwritten.join("\n"));
}

/// A recording with a placement the model does not reproduce, a failed munmap and a fault, in
/// blocks of about 16 bytes (so that a cut keeps whole blocks before it).
fn recording() -> Vec<u8> {
    recording_as(true)
}

/// [`recording`] in the 3.0 layout, or in 2.6's (no blocks).
fn recording_as(v3: bool) -> Vec<u8> {
    use trace::{Event, EventBody, Header, Syscall, SyscallKind, TraceWriter};
    let x: u64 = 0x7fff_f000_0000;
    let sc = |kind, args: &[u64], ret: i64| EventBody::Syscall(Syscall { kind, args: args.to_vec(), ret: Some(ret), duration_ns: 10 });
    let bodies = vec![
        sc(SyscallKind::Mmap, &[0, 8192, 3, 0x22, u64::MAX, 0], x as i64),
        EventBody::Fault { addr: x, error_code: 6 },
        sc(SyscallKind::Munmap, &[x + 1, 4096], -22),
        sc(SyscallKind::ExitGroup, &[0], 0),
    ];
    let events: Vec<Event> = bodies.into_iter().enumerate().map(|(i, body)| Event { time_ns: i as u64, tid: 100, pid: 100, body }).collect();
    let mut counts: Vec<(u8, u64)> = Vec::new();
    for e in &events {
        match counts.iter_mut().find(|(c, _)| *c == e.body.kind_code()) {
            Some((_, n)) => *n += 1,
            None => counts.push((e.body.kind_code(), 1)),
        }
    }
    // Timed untraced (record --timed): `time.program_ns` with --profile.
    let h = Header { root_pid: 100, page_size: 4096, counts, argv: vec![b"prog".to_vec()], untraced_wall_ns: 2_000_000, ..Header::default() };
    let mut w = if v3 { TraceWriter::new(Vec::new(), &h).unwrap().with_block_bytes(16) } else { TraceWriter::new_2_6(Vec::new(), &h).unwrap() };
    for e in &events {
        w.write(e).unwrap();
    }
    w.finish().unwrap()
}

/// A companion file of `trace` (record --accesses): three stores to its mapping after the mmap,
/// and one run where nothing is mapped.
fn accesses(trace: &[u8]) -> Vec<u8> {
    use trace::accesses::{AccessHeader, AccessRun, AccessTotals, AccessWriter, ACCESS_ZSTD};
    let crc = u32::from_le_bytes(trace[trace.len() - 4..].try_into().unwrap());
    let h = AccessHeader { trace_crc: crc, trace_records: 4, page_size: 4096, flags: ACCESS_ZSTD };
    let mut w = AccessWriter::new(Vec::new(), &h).unwrap();
    let r = w.region("anon 0x7ffff0000000").unwrap();
    w.block(1, &[AccessRun { page: 0x7_ffff_0000, count: 3, write: true, region: r }, AccessRun { page: 0x10, count: 1, write: false, region: r }]).unwrap();
    let t = AccessTotals { raw_accesses: 5, writes: 3, unmapped_accesses: 1, valgrind_ns: 1_000_000, native_ns: 10_000, valgrind_syscalls: 3, matched_syscalls: 2, ..Default::default() };
    w.finish(&t).unwrap().0
}

#[test]
fn every_json_key_is_documented_and_every_documented_key_is_written() {
    let (_d, w) = temp_file(
        "keys.thpw",
        "phase setup\nmmap a 4M\nmadvise a hugepage\ntouch a write\nmadvise a collapse\nphase b\nmmap b 1M\ntouch b write\naccess b uniform count=1000 writes=10\nmemfd m\nftruncate m 1M\nmmap c 1M file=m\ntouch c write\nmunmap a[0+4K]\nmmap d 2M\nread_direct d block=1M\nrepeat 1ms {\ntouch d[0+8K] write duration=1ms\n}\nmunmap b\n",
    );
    let builtin = uapi::profile::BUILTIN;
    let (_p, profile) = temp_file("p.toml", &format!("{builtin}\n[pin]\nper_folio_ns = 10.0\nper_page_ns = 1.0\nper_pmd_page_ns = 0.5\n"));
    // Under a modelled VM host with FHPM (docs/vm-host.md): `vm_host`.
    let sim = thplab(&["sim", &w, "--json", "--set", "hugepages-64kB/enabled=always", "--profile", &profile, "--sample", "1", "--host", "enabled=always", "--policy", "fhpm"]);
    sim.ok();
    // A workload that forks: the processes array.
    let forked = thplab(&["sim", "fork-bgsave", "--json", "--set", "enabled=always"]);
    forked.ok();
    // A fragmented machine that compacts: `model.compaction`.
    let fragmented = workspace().join("examples/fragmented-defrag.thpw");
    // Priced with `[fault.pressure]`, each fault timed: `time.pressure`, `time.latency`.
    let (_p2, pressured) = temp_file("pressure.toml", &format!("{builtin}\n[fault.pressure]\ncompact_migrate_ns_per_page = 1000.0\n"));
    let compacted = thplab(&["sim", fragmented.to_str().unwrap(), "--json", "--mem", "1G", "--set", "defrag=always", "--profile", &pressured, "--latency"]);
    compacted.ok();
    // Threads and a vfork child: shares_mm_with; under the contiguous page hint: model.contig_hint.
    let threads = thplab(&["sim", workspace().join("crates/thplab/tests/it/data/fork/threads-vfork.thpw").to_str().unwrap(), "--json", "--policy", "contig-hint"]);
    threads.ok();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.trace");
    std::fs::write(&rec, recording()).unwrap();
    // Its accesses (record --accesses): `accesses.recorded`.
    std::fs::write(trace::accesses::companion_path(&rec), accesses(&recording())).unwrap();
    let rec = rec.to_str().unwrap();
    let replay = thplab(&["sim", rec, "--json", "--recorded-time", "--profile", "builtin"]);
    replay.ok();
    // The same recording without its last record and trailer: `model.replay.salvage`.
    let whole = recording();
    let cut = dir.path().join("cut.trace");
    std::fs::write(&cut, &whole[..whole.len() - 40]).unwrap();
    let salvaged = thplab(&["sim", cut.to_str().unwrap(), "--salvage", "--json"]);
    salvaged.ok();
    // The same in the 2.6 layout (no block checksums): `model.replay.salvage.unchecked`.
    let old = recording_as(false);
    let cut_old = dir.path().join("cut-2.6.trace");
    std::fs::write(&cut_old, &old[..old.len() - 20]).unwrap();
    let salvaged_old = thplab(&["sim", cut_old.to_str().unwrap(), "--salvage", "--json"]);
    salvaged_old.ok();
    let stats = thplab(&["trace", "stats", rec, "--json"]);
    stats.ok();
    let read_json = |name: &str| -> Value { serde_json::from_str(&std::fs::read_to_string(workspace().join("crates/thplab/tests/it/data").join(name)).unwrap()).unwrap() };
    let captured = read_json("live-result.json");
    let captured_program = read_json("live-program-result.json");
    // A workload run priced with a profile's `[host]` on a VM that reports free pages
    // (`compare --profile builtin --json`, its `live`): `live.host_faults`, `live.free_lists`.
    let captured_host = read_json("live-host-result.json");
    // `thplab live W --memory-max 32M --swap zram:128M --json` on this machine (cgroup v1):
    // `live.pressure`.
    let captured_pressure = read_json("live-pressure-result.json");
    // `thplab live W --latency --json` on this machine: `live.fault_latency`.
    let captured_latency = read_json("live-latency-result.json");
    // `live.hw_tlb` needs a PMU, which this machine has not: the typed section, serialised.
    let hw = uapi::RunResult {
        schema: "thplab-run/2".into(),
        live: Some(uapi::LiveSection { hw_tlb: vec![uapi::result::HwCount { event: "dTLB-load-misses".into(), count: 1 }], ..Default::default() }),
        ..Default::default()
    };
    let hw_tlb = serde_json::to_value(&hw).unwrap();
    let err_line = thplab(&["sim", &w, "--json", "--set", "enabled=sometimes"]);
    let (_d2, bad) = temp_file("bad.thpw", "mmap a 1M\nfrobnicate\n");
    let err_file = thplab(&["sim", &bad, "--json"]);
    err_file.fails(2);
    // A replay error: the record and its byte.
    let x: u64 = 0x7fff_f000_0000;
    let bad_rec = {
        use trace::{Event, EventBody, Header, Syscall, SyscallKind, TraceWriter};
        let sc = |kind, args: &[u64], ret: i64| EventBody::Syscall(Syscall { kind, args: args.to_vec(), ret: Some(ret), duration_ns: 10 });
        let bodies = vec![
            sc(SyscallKind::Mmap, &[0, 8192, 3, 0x22, u64::MAX, 0], x as i64),
            sc(SyscallKind::Mmap, &[x + 8192, 8192, 3, 0x32, u64::MAX, 0], (x + 8192) as i64),
            sc(SyscallKind::Mremap, &[x, 8192, 16384, 0, 0], x as i64),
        ];
        let events: Vec<Event> = bodies.into_iter().map(|body| Event { time_ns: 0, tid: 100, pid: 100, body }).collect();
        let h = Header { root_pid: 100, page_size: 4096, counts: vec![(SyscallKind::Mmap.code(), 2), (SyscallKind::Mremap.code(), 1)], ..Header::default() };
        let mut wr = TraceWriter::new(Vec::new(), &h).unwrap();
        for e in &events {
            wr.write(e).unwrap();
        }
        wr.finish().unwrap()
    };
    let bad_rec_path = dir.path().join("bad.trace");
    std::fs::write(&bad_rec_path, bad_rec).unwrap();
    let err_rec = thplab(&["sim", bad_rec_path.to_str().unwrap(), "--json"]);
    err_rec.fails(3);
    let mut docs: Vec<(&str, Value)> = vec![
        ("thplab-run/2", sim.json()),
        ("thplab-run/2", forked.json()),
        ("thplab-run/2", compacted.json()),
        ("thplab-run/2", threads.json()),
        ("thplab-run/2", replay.json()),
        ("thplab-run/2", salvaged.json()),
        ("thplab-run/2", salvaged_old.json()),
        ("thplab-run/2", captured),
        ("thplab-run/2", captured_program),
        ("thplab-run/2", captured_host),
        ("thplab-run/2", captured_pressure),
        ("thplab-run/2", captured_latency),
        ("thplab-run/2", hw_tlb),
        ("thplab-trace-stats/1", stats.json()),
        ("thplab-error/1", err_line.json()),
        ("thplab-error/1", err_file.json()),
        ("thplab-error/1", err_rec.json()),
    ];
    if crate::skip_reason().is_none() {
        let _g = crate::exclusive();
        let live = crate::thplab_unlocked(&workspace(), &["live", &w, "--json", "--repeat", "2"]);
        live.ok();
        docs.push(("thplab-run/2", live.json()));
        let program = crate::thplab_unlocked(&workspace(), &["compare", "--record", "--json", "--program-quiet", "--", "/bin/true"]);
        program.ok();
        docs.push(("thplab-run/2", program.json()[0]["live"].clone()));
        let obs = crate::thplab_unlocked(&workspace(), &["observe", "--pid", &std::process::id().to_string(), "--json"]);
        obs.ok();
        docs.push(("thplab-observe/1", obs.json()));
    } else {
        // Without root, the captured sample of this machine kind.
        let obs: Value = serde_json::from_str(&std::fs::read_to_string(workspace().join("crates/thplab/tests/it/data/observe-result.json")).unwrap()).unwrap();
        docs.push(("thplab-observe/1", obs));
    }
    for (schema, d) in &docs {
        if let Some(s) = d.get("schema") {
            assert_eq!(s, schema, "{d}");
        }
    }
    check(&docs);
}
