//! Quick speed check (not the bench).
fn cpu_ns() -> f64 { std::fs::read_to_string("/proc/self/schedstat").unwrap().split_whitespace().next().unwrap().parse::<f64>().unwrap() }
use tlb::{presets, PageSize, Paging, Tlb, Translation};
fn main() {
  for span in [64u64, 2048, 1 << 20] {
    let n = 4_000_000usize;
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let s: Vec<Translation> = (0..n).map(|_| { x ^= x << 13; x ^= x >> 7; x ^= x << 17; let page = x % span;
        Translation::new(0x7f00_0000_0000 + (page << 12), page, PageSize::K4) }).collect();
    for p in presets::PRESETS {
        let mut tlb = Tlb::new(p, Paging::Native);
        let t0 = std::time::Instant::now(); let c0 = cpu_ns();
        for t in &s { tlb.access(t); }
        let dt = t0.elapsed().as_secs_f64(); let dc = (cpu_ns() - c0) / 1e9;
        println!("span {span} pages {} wall {:.1} M/s cpu {:.1} M/s walks {}", p.name, n as f64 / dt / 1e6, n as f64 / dc / 1e6, tlb.stats().walks);
    }
  }
}
