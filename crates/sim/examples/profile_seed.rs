//! Run the 4K-only seed experiment in a loop, for `perf record` (not a benchmark: see benches/).
fn main() {
    let w = workload::parse("seed", "mmap buf 1G\ntouch buf write\n").unwrap();
    let mut s = thp_abi::ThpSettings::default();
    s.apply_assignment("enabled=never").unwrap();
    let m = sim::MachineConfig::default();
    let n: u32 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(20);
    for _ in 0..n {
        let r = sim::run(&w, &s, &m).unwrap();
        assert_eq!(r.process.minflt, 262144);
    }
}
