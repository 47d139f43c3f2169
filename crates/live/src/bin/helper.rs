//! Test helper for the live crate's integration tests: the child side of the executor
//! (`__exec`, spec JSON on stdin) and a settings-guard holder (`__hold PATH=VALUE...`), the same
//! bodies that `thplab __exec` and `thplab __hold` run, and a target for khugepaged
//! (`__khugepaged_target`).

use std::io::Read;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("__exec") => {
            let mut spec = String::new();
            if let Err(e) = std::io::stdin().read_to_string(&mut spec) {
                eprintln!("thplab-live-helper __exec: cannot read the spec from stdin: {e}");
                std::process::exit(2);
            }
            live::exec_child_main(&spec)
        }
        Some("__hold") => live::guard::hold_main(&args[1..]),
        Some("__khugepaged_target") => khugepaged_target(),
        Some("__agent_target") => agent_target(),
        _ => {
            eprintln!("usage: thplab-live-helper __exec < spec.json | __hold PATH=VALUE... | __khugepaged_target | __agent_target");
            std::process::exit(2);
        }
    }
}

/// Two PMD-aligned 2 MiB ranges of anonymous memory written with base pages and then marked
/// MADV_HUGEPAGE (which registers the mm with khugepaged: mm/khugepaged.c: khugepaged_enter_vma):
/// A written in full (collapsible), B in its first half (256 pte_none: SCAN_EXCEED_NONE_PTE
/// when khugepaged/max_ptes_none is below 256). Prints `ready A B` and waits for stdin to close.
fn khugepaged_target() {
    const PMD: usize = 2 << 20;
    // SAFETY: an anonymous private mapping; the ranges written lie inside it.
    unsafe {
        let len = 3 * PMD;
        let p = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
        if p == libc::MAP_FAILED {
            eprintln!("mmap: {}", std::io::Error::last_os_error());
            std::process::exit(1);
        }
        let a = (p as usize).next_multiple_of(PMD);
        let b = a + PMD;
        // No THP at fault time: these ranges get base pages whatever the knobs say.
        libc::madvise(a as *mut libc::c_void, 2 * PMD, libc::MADV_NOHUGEPAGE);
        std::ptr::write_bytes(a as *mut u8, 1, PMD);
        std::ptr::write_bytes(b as *mut u8, 1, PMD / 2);
        if libc::madvise(a as *mut libc::c_void, 2 * PMD, libc::MADV_HUGEPAGE) != 0 {
            eprintln!("madvise: {}", std::io::Error::last_os_error());
            std::process::exit(1);
        }
        println!("ready {a:#x} {b:#x}");
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}

/// Four PMD-aligned 2 MiB ranges for `thplab agent`'s test, written with base pages (the test
/// runs under enabled=never): A in full, in a VMA of its own; B in full, in a VMA of its own,
/// and rewritten every 2 ms (hot); C with its first 256 pages and D with its first 64, together
/// in a third VMA. Prints `ready A B C D` and waits for stdin to close.
fn agent_target() {
    const PMD: usize = 2 << 20;
    // SAFETY: an anonymous private mapping; the ranges written and unmapped lie inside it.
    let (a, b, c, d) = unsafe {
        let len = 13 * PMD;
        let p = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
        if p == libc::MAP_FAILED {
            eprintln!("mmap: {}", std::io::Error::last_os_error());
            std::process::exit(1);
        }
        let base = (p as usize).next_multiple_of(PMD);
        // Holes keep A, B and C+D in VMAs of their own.
        libc::munmap((base + PMD) as *mut libc::c_void, PMD);
        libc::munmap((base + 3 * PMD) as *mut libc::c_void, PMD);
        let (a, b, c, d) = (base, base + 2 * PMD, base + 4 * PMD, base + 5 * PMD);
        std::ptr::write_bytes(a as *mut u8, 1, PMD);
        std::ptr::write_bytes(b as *mut u8, 1, PMD);
        std::ptr::write_bytes(c as *mut u8, 1, PMD / 2);
        std::ptr::write_bytes(d as *mut u8, 1, PMD / 8);
        (a, b, c, d)
    };
    println!("ready {a:#x} {b:#x} {c:#x} {d:#x}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::thread::spawn(move || loop {
        // SAFETY: B stays mapped until the process exits.
        unsafe {
            for i in (0..PMD).step_by(4096) {
                std::ptr::write_volatile((b + i) as *mut u8, 2);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    });
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}
