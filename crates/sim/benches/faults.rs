//! Benchmarks of the model: simulated faults per second on the seed experiment, and model
//! memory per simulated 4 KiB frame. `cargo bench -p sim`; the figures go in closing notes.
//!
//! Each iteration boots the machine and runs the whole workload, as `thplab sim` does.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use uapi::ThpSettings;

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
    g.finish();

    // Memory: the model's own accounting of host bytes (mem_map + page tables + VMAs) after the
    // 4K-only run, per simulated frame of the 24 GiB machine and per mapped frame.
    let mut opts = sim::RunOptions::default();
    let (_, k) = sim::run_with(&w, &cases[0].1, &machine, &mut opts).unwrap();
    let frames = k.zone().nr_pages() as f64;
    let bytes = k.host_bytes() as f64;
    println!(
        "model memory: {:.1} MiB for {} simulated frames ({} GiB) = {:.2} bytes per frame (mem_map {} B/frame + page tables)",
        bytes / (1 << 20) as f64,
        frames,
        machine.mem_bytes >> 30,
        bytes / frames,
        16
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
