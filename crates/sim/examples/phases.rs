//! Time boot, faults and census separately (a diagnostic, not a benchmark).
use std::time::Instant;
fn main() {
    let mut s = thp_abi::ThpSettings::default();
    s.apply_assignment("enabled=never").unwrap();
    for mem in [2u64 << 30, 24 << 30, 2 << 30] {
        let p = mm::BootParams { mem_bytes: mem, min_free_kbytes: 67584, mmap_base: 0x7dff_fffc_5000, brk_start: 0x5555_5557_9000, ..mm::BootParams::default() };
        for _ in 0..3 {
            let t0 = Instant::now();
            let mut k = mm::Kernel::boot(&p, &s);
            let t1 = Instant::now();
            let a = k.do_mmap(1 << 30, mm::mmap::prot_to_vm(true, true, false), mm::mmap::MmapPlacement::Kernel).unwrap();
            for i in 0..262144u64 {
                k.access(a + i * 4096, true);
            }
            let t2 = Instant::now();
            let c = k.census(&[(a, a + (1 << 30))]);
            let t3 = Instant::now();
            drop(k);
            let t4 = Instant::now();
            println!("mem {} GiB: boot {:?} faults {:?} ({:.1} M/s) census {:?} drop {:?} [{}]", mem >> 30, t1 - t0, t2 - t1, 262144.0 / (t2 - t1).as_secs_f64() / 1e6, t3 - t2, t4 - t3, c.rss_bytes >> 20);
        }
    }
}
