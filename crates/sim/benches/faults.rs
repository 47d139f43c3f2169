//! Benchmarks of the model: simulated faults per second on the seed experiment, and model
//! memory per simulated 4 KiB frame. `cargo bench -p sim`; the figures go in closing notes.
//!
//! Each iteration boots the machine and runs the whole workload, as `thplab sim` does.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use thp_abi::ThpSettings;

fn settings(a: &[&str]) -> ThpSettings {
    let mut s = ThpSettings::default();
    for x in a {
        s.apply_assignment(x).unwrap();
    }
    s
}

fn bench(c: &mut Criterion) {
    let w = workload::parse("seed-anon-1g", "mmap buf 1G\ntouch buf write\n").unwrap();
    let machine = sim::MachineConfig::default();
    let cases = [
        ("seed-anon-1g 4K only", settings(&["enabled=never"]), 262_144u64),
        ("seed-anon-1g 64K mTHP", settings(&["enabled=never", "hugepages-64kB/enabled=always"]), 16_384),
        ("seed-anon-1g PMD", settings(&["enabled=always"]), 512),
    ];
    let mut g = c.benchmark_group("faults");
    g.sample_size(20);
    for (name, s, faults) in &cases {
        g.throughput(Throughput::Elements(*faults));
        g.bench_function(*name, |b| b.iter(|| sim::run(&w, s, &machine).unwrap()));
    }
    // Issue #10: the same with the clock on (every step priced with the built-in profile):
    // within 10 % of the unpriced figures above. (`--sample` adds a census per sample.)
    let profile = uapi::profile::MachineProfile::builtin();
    let costs = profile.fault.expect("the built-in profile has [fault]");
    for (name, s, faults) in &cases {
        g.throughput(Throughput::Elements(*faults));
        g.bench_function(format!("{name}, priced"), |b| {
            b.iter(|| {
                let mut opts = sim::RunOptions { profile: sim::Profile { costs: Some(costs.clone()), ..Default::default() }, ..Default::default() };
                sim::run_with(&w, s, &machine, &mut opts).unwrap()
            })
        });
    }
    // And with the profile's [host] too (free page reporting: the free lists laid out as the
    // profile's, a host-backing bit per frame checked at every allocation).
    let host = profile.host.expect("the built-in profile has [host]");
    for (name, s, faults) in &cases {
        g.throughput(Throughput::Elements(*faults));
        g.bench_function(format!("{name}, priced with [host]"), |b| {
            b.iter(|| {
                let mut opts = sim::RunOptions { profile: sim::Profile { costs: Some(costs.clone()), host: Some((host.clone(), None)), ..Default::default() }, ..Default::default() };
                sim::run_with(&w, s, &machine, &mut opts).unwrap()
            })
        });
    }
    g.finish();

    // Issue #8 items 6 and 9: cost linear in the work.
    let mut g = c.benchmark_group("scale");
    g.sample_size(10);
    // 100k mappings that do not merge (alternating protections), each touched once.
    let mut text = String::new();
    for i in 0..100_000 {
        if i % 2 == 0 {
            text += &format!("mmap m{i} 4K\ntouch m{i} write\n");
        } else {
            text += &format!("mmap m{i} 8K prot=r\ntouch m{i} read\n");
        }
    }
    let maps = workload::parse("100k-mappings", &text).unwrap();
    let never = settings(&["enabled=never"]);
    g.throughput(Throughput::Elements(100_000));
    g.bench_function("100k mappings", |b| b.iter(|| sim::run(&maps, &never, &machine).unwrap()));
    // One byte per 2 MiB over 64 TiB: runs until the 24 GiB machine is full of pages and PTE
    // tables (an out-of-memory error, as the CLI reports it).
    let sparse = workload::parse("sparse-64t", "mmap big 64T\ntouch big write stride=2M\n").unwrap();
    g.bench_function("sparse 64 TiB touch until the 24 GiB machine is full", |b| {
        b.iter(|| sim::run(&sparse, &never, &machine).unwrap_err())
    });
    // 16 GiB written page by page under 4 KiB pages.
    let w16 = workload::parse("anon-16g", "mmap buf 16G\ntouch buf write\n").unwrap();
    g.throughput(Throughput::Elements(16 << 18));
    g.bench_function("16 GiB written page by page, 4K only", |b| b.iter(|| sim::run(&w16, &never, &machine).unwrap()));
    // A recording of N anonymous 4 KiB mappings (alternating protections, so none merge),
    // one fault in each, then N munmaps: the replay's cost per call must not grow with N.
    for n in [10_000u64, 40_000] {
        let (header, events) = recording_of_mappings(n, machine.mmap_base);
        let r = sim::run_recording("bench", &header, &events, &never, &machine, false).unwrap();
        let replay = r.model.as_ref().and_then(|m| m.replay.as_ref()).unwrap();
        assert_eq!((replay.placements_matched, replay.modelled_faults), (n, n), "{replay:?}");
        g.throughput(Throughput::Elements(n));
        g.bench_function(format!("replay of {n} mappings"), |b| {
            b.iter(|| sim::run_recording("bench", &header, &events, &never, &machine, false).unwrap())
        });
    }
    g.finish();
    let mut opts = sim::RunOptions::default();
    let (_, k) = sim::run_with(&w16, &never, &machine, &mut opts).unwrap();
    let mapped = (16u64 << 30) / 4096;
    println!(
        "16 GiB written: model memory backed by the host {:.1} MiB = {:.2} bytes per mapped 4 KiB frame (struct page 8 B + PTE 4.5 B + tables); {:.2} bytes per frame of the 24 GiB machine",
        k.host_bytes_resident() as f64 / (1 << 20) as f64,
        k.host_bytes_resident() as f64 / mapped as f64,
        k.host_bytes_resident() as f64 / k.zone().nr_pages() as f64
    );
    let mut opts = sim::RunOptions::default();
    let e = sim::run_with(&sparse, &never, &machine, &mut opts).err().map(|e| e.to_string()).unwrap_or_default();
    println!("sparse 64 TiB touch: {e}");

    // Memory: the model's own accounting of host bytes (mem_map + page tables + VMAs) after the
    // 4K-only run, per simulated frame of the 24 GiB machine and per mapped frame.
    let mut opts = sim::RunOptions::default();
    let (_, k) = sim::run_with(&w, &cases[0].1, &machine, &mut opts).unwrap();
    let frames = k.zone().nr_pages() as f64;
    let bytes = k.host_bytes() as f64;
    println!(
        "model memory: {:.1} MiB for {} simulated frames ({} GiB) = {:.2} bytes per frame (mem_map, folio fields and page tables written so far)",
        bytes / (1 << 20) as f64,
        frames,
        machine.mem_bytes >> 30,
        bytes / frames,
    );
}

/// mmap, a fault and munmap for each of `n` mappings, placed where the kernel places them.
fn recording_of_mappings(n: u64, mmap_base: u64) -> (trace::Header, Vec<trace::Event>) {
    use trace::{Event, EventBody, Syscall, SyscallKind};
    let header = trace::Header { root_pid: 1, page_size: 4096, ..Default::default() };
    let mut events = Vec::new();
    let mut ev = |body: EventBody| {
        events.push(Event { time_ns: events.len() as u64 + 1, tid: 1, pid: 1, body });
    };
    let sys = |kind: SyscallKind, args: Vec<u64>, ret: i64| EventBody::Syscall(Syscall { kind, args, ret: Some(ret), duration_ns: 0 });
    let addr = |i: u64| mmap_base - (i + 1) * 4096;
    for i in 0..n {
        let prot = if i % 2 == 0 { 3 } else { 1 };
        ev(sys(SyscallKind::Mmap, vec![0, 4096, prot, 0x22, u64::MAX, 0], addr(i) as i64));
        ev(EventBody::Fault { addr: addr(i), error_code: if i % 2 == 0 { 6 } else { 4 } });
    }
    for i in 0..n {
        ev(sys(SyscallKind::Munmap, vec![addr(i), 4096], 0));
    }
    (header, events)
}

criterion_group!(benches, bench);
criterion_main!(benches);
