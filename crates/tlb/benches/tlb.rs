//! Speed of the TLB model: a uniform random stream of 4 KiB translations over 4 GiB through the
//! two-level TLB and walk caches of each preset (one core), and on Zen 4 over spans that fit L1
//! and L2. Target: at least 200 M accesses/s.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tlb::{presets, PageSize, Paging, Tlb, Translation};

const N: usize = 1 << 20;

fn stream() -> Vec<Translation> {
    stream_over(1 << 20)
}

/// Uniform random 4 KiB pages over `span` pages.
fn stream_over(span: u64) -> Vec<Translation> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..N)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let page = x % span;
            Translation::new(0x7f00_0000_0000 + (page << 12), page, PageSize::K4)
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let s = stream();
    let mut g = c.benchmark_group("random-4k");
    g.throughput(Throughput::Elements(N as u64));
    for p in presets::PRESETS {
        for paging in [Paging::Native, Paging::Nested { host: PageSize::K4 }] {
            let mut tlb = Tlb::new(p, paging);
            g.bench_function(format!("{}/{}", p.name, paging.name()), |b| {
                b.iter(|| {
                    for t in &s {
                        tlb.access(t);
                    }
                })
            });
        }
    }
    g.finish();
    // The same on Zen 4 over spans that fit L1 (64 pages) and L2 (2048 pages): hit-dominated.
    let mut g = c.benchmark_group("random-4k-span");
    g.throughput(Throughput::Elements(N as u64));
    for span in [64u64, 2048] {
        let s = stream_over(span);
        let mut tlb = Tlb::new(&presets::ZEN4, Paging::Native);
        g.bench_function(format!("zen4/native/{span}-pages"), |b| {
            b.iter(|| {
                for t in &s {
                    tlb.access(t);
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
