//! A process with a known memory layout, for the live tests of `thplab explain`, `observe` and
//! the agent: `thplab-explain-target MODE [SIZE_MIB] [STRIDE_KIB]` maps SIZE_MIB (default 8)
//! at a 2 MiB-aligned address, writes one byte every STRIDE_KIB (default 4) and prints
//! `ready START END` on stdout, then waits until stdin closes.
//!
//! MODE: `anon` (private anonymous), `hugepage` (MADV_HUGEPAGE first), `nohugepage`
//! (MADV_NOHUGEPAGE first), `prctl` (PR_SET_THP_DISABLE first), `except-advised`
//! (PR_SET_THP_DISABLE with PR_THP_DISABLE_EXCEPT_ADVISED first), `memfd` (memfd_create, MAP_SHARED),
//! `tmpfs=HUGE` (a file on a fresh tmpfs mounted with huge=HUGE in a private mount namespace),
//! `untouched` (anonymous, never written: no anon_vma).

use std::io::{Read, Write};

const MIB: usize = 1 << 20;

fn die(what: &str) -> ! {
    eprintln!("thplab-explain-target: {what}: {}", std::io::Error::last_os_error());
    std::process::exit(1);
}

/// A 2 MiB-aligned address with `len` free bytes (reserve, then unmap).
fn aligned_hint(len: usize) -> usize {
    unsafe {
        let p = libc::mmap(std::ptr::null_mut(), len + 2 * MIB, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
        if p == libc::MAP_FAILED {
            die("mmap reserve");
        }
        libc::munmap(p, len + 2 * MIB);
        (p as usize).div_ceil(2 * MIB) * 2 * MIB
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map(String::as_str).unwrap_or("anon").to_string();
    let mib: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(8);
    let stride_kib: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(4);
    let len = mib * MIB;
    let hint = aligned_hint(len);
    let fixed = libc::MAP_FIXED_NOREPLACE;
    let (addr, fd) = unsafe {
        match mode.as_str() {
            "prctl" => {
                if libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0 {
                    die("prctl");
                }
            }
            "except-advised" => {
                // PR_THP_DISABLE_EXCEPT_ADVISED = 1 << 1 (include/uapi/linux/prctl.h, 6.18).
                if libc::prctl(libc::PR_SET_THP_DISABLE, 1, 1 << 1, 0, 0) != 0 {
                    die("prctl except advised");
                }
            }
            _ => {}
        }
        let fd = if mode == "memfd" {
            let fd = libc::memfd_create(c"thplab-explain".as_ptr(), 0);
            if fd < 0 {
                die("memfd_create");
            }
            fd
        } else if let Some(huge) = mode.strip_prefix("tmpfs=") {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                die("unshare(CLONE_NEWNS)");
            }
            if libc::mount(std::ptr::null(), c"/".as_ptr(), std::ptr::null(), libc::MS_REC | libc::MS_PRIVATE, std::ptr::null()) != 0 {
                die("mount --make-rprivate /");
            }
            let dir = format!("/tmp/thplab-explain-{}", std::process::id());
            std::fs::create_dir_all(&dir).unwrap_or_else(|_| die("mkdir"));
            let cdir = std::ffi::CString::new(dir.clone()).unwrap();
            let opts = std::ffi::CString::new(format!("huge={huge},size={}k", 2 * len / 1024)).unwrap();
            if libc::mount(c"tmpfs".as_ptr(), cdir.as_ptr(), c"tmpfs".as_ptr(), 0, opts.as_ptr().cast()) != 0 {
                die("mount tmpfs");
            }
            let path = std::ffi::CString::new(format!("{dir}/file")).unwrap();
            let fd = libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CREAT, 0o600);
            if fd < 0 {
                die("open");
            }
            fd
        } else {
            -1
        };
        if fd >= 0 && libc::ftruncate(fd, len as libc::off_t) != 0 {
            die("ftruncate");
        }
        let (flags, f) = if fd >= 0 { (libc::MAP_SHARED, fd) } else { (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1) };
        let p = libc::mmap(hint as *mut libc::c_void, len, libc::PROT_READ | libc::PROT_WRITE, flags | fixed, f, 0);
        if p == libc::MAP_FAILED {
            die("mmap");
        }
        let advice = match mode.as_str() {
            "hugepage" | "except-advised" => Some(libc::MADV_HUGEPAGE),
            "nohugepage" => Some(libc::MADV_NOHUGEPAGE),
            _ => None,
        };
        if let Some(a) = advice {
            if libc::madvise(p, len, a) != 0 {
                die("madvise");
            }
        }
        (p as usize, fd)
    };
    if mode != "untouched" {
        let stride = stride_kib.max(4) * 1024;
        let mut off = 0;
        while off < len {
            unsafe { std::ptr::write_volatile((addr + off) as *mut u8, 1) };
            off += stride;
        }
    }
    let _ = fd;
    println!("ready {:x} {:x}", addr, addr + len);
    let _ = std::io::stdout().flush();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}
