//! A process with a known layout for the exporter's Prometheus test:
//! `thplab-exporter-target NOHUGE_MIB HUGE_MIB` maps NOHUGE_MIB MiB of private anonymous memory
//! with MADV_NOHUGEPAGE and writes one byte (1) to each 4 KiB page (so NOHUGE_MIB·256 order-0
//! folios), maps HUGE_MIB MiB at a 2 MiB-aligned address with MADV_HUGEPAGE and writes one byte
//! (1) to the first page of each 2 MiB (a THP there is 2044 KiB of zeros), prints
//! `ready NOHUGE_ADDR HUGE_ADDR` and waits until its standard input closes.

use std::io::{Read, Write};

fn map(len: usize, advice: i32) -> *mut u8 {
    // SAFETY: an anonymous private mapping; the result is checked.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
    assert!(p != libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
    // SAFETY: the range was just mapped.
    let r = unsafe { libc::madvise(p, len, advice) };
    assert_eq!(r, 0, "madvise: {}", std::io::Error::last_os_error());
    p.cast()
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("sizes in MiB")).collect();
    let [nohuge_mib, huge_mib] = args[..] else { panic!("usage: thplab-exporter-target NOHUGE_MIB HUGE_MIB") };
    const MIB: usize = 1 << 20;
    let a = map(nohuge_mib * MIB, libc::MADV_NOHUGEPAGE);
    for off in (0..nohuge_mib * MIB).step_by(4096) {
        // SAFETY: inside the mapping.
        unsafe { a.add(off).write_volatile(1) };
    }
    // 2 MiB more than needed, then the aligned part is advised and touched.
    let raw = map(huge_mib * MIB + 2 * MIB, libc::MADV_NORMAL) as usize;
    let b = (raw + 2 * MIB - 1) & !(2 * MIB - 1);
    if huge_mib > 0 {
        // SAFETY: [b, b + huge_mib MiB) lies inside the mapping.
        let r = unsafe { libc::madvise(b as *mut libc::c_void, huge_mib * MIB, libc::MADV_HUGEPAGE) };
        assert_eq!(r, 0, "madvise: {}", std::io::Error::last_os_error());
    }
    for off in (0..huge_mib * MIB).step_by(2 * MIB) {
        // SAFETY: inside the mapping.
        unsafe { (b as *mut u8).add(off).write_volatile(1) };
    }
    println!("ready {:x} {:x}", a as usize, b);
    std::io::stdout().flush().unwrap();
    let mut buf = [0u8; 64];
    while std::io::stdin().read(&mut buf).map(|n| n > 0).unwrap_or(false) {}
}
