//! The lackey-log parser, the run compression and the alignment, on hand-written inputs.

use super::*;
use trace::accesses::{read_accesses, AccessBlock};

fn call(kind: SyscallKind, args: &[u64], ret: i64, path: Option<&str>, index: u64) -> MemCall {
    MemCall { kind, args: args.to_vec(), ret, path: path.map(|p| p.as_bytes().to_vec()), index }
}

fn entry(start: u64, end: u64, offset: u64, ino: u64, path: &str) -> MapEntry {
    MapEntry { start, end, perms: 1, offset, maj: 254, min: 0, ino, path: path.as_bytes().to_vec() }
}

const M1: u64 = u64::MAX; // fd -1 as the tracepoint gives it

/// The native run of the hand-written log below: the executable (inode 777) and the stack in
/// its exec snapshot (record 0), then brk(0), an 8 MiB anonymous mmap, an mprotect valgrind
/// does not make, libc's mmap, the munmap and a brk that grows the heap by 0x21000.
fn native() -> Native {
    Native {
        calls: vec![
            call(SyscallKind::Brk, &[0], 0x5555_5555_9000, None, 3),
            call(SyscallKind::Mmap, &[0, 8392704, 3, 34, M1, 0], 0x7fff_f700_0000, None, 5),
            call(SyscallKind::Mprotect, &[0x7fff_f7ff_0000, 4096, 1], 0, None, 6),
            call(SyscallKind::Mmap, &[0, 8192, 1, 2050, 3, 0], 0x7fff_f7fc_0000, Some("/lib/libc.so.6"), 8),
            call(SyscallKind::Munmap, &[0x7fff_f700_0000, 8392704], 0, None, 10),
            call(SyscallKind::Brk, &[0x5555_5557_a000], 0x5555_5557_a000, None, 12),
        ],
        maps: vec![entry(0x5555_5555_4000, 0x5555_5555_5000, 0, 777, "/tmp/prog"), entry(0x7fff_fffd_e000, 0x7fff_ffff_f000, 0, 0, "[stack]")],
        start_anchor: 1,
    }
}

const VG_MAPS: &str = "\
0000108000-0000109000 r--p 00000000 fe:00 777                        /tmp/prog
0004000000-0004001000 r--p 00000000 fe:00 888                        /lib/ld-linux-x86-64.so.2
0058000000-0058001000 r--p 00000000 fe:00 999                        /usr/libexec/valgrind/lackey-amd64-linux
1ffefff000-1fff001000 rw-p 00000000 00:00 0
";

const LOG: &str = "\
==100== Lackey, an example Valgrind tool
==100== Command: /tmp/prog
I  04001000,3
 S 1fff000ff8,8
 L 00108010,8
SYSCALL[100,1](12) sys_brk ( 0x0 ) --> [pre-success] Success(0x4035000) 
I  04001003,5
 L 1fff000ff0,8
SYSCALL[100,1](9) sys_mmap ( 0x0, 8392704, 3, 34, 4294967295, 0 ) --> [pre-success] Success(0x4a2b000) 
 S 04a2b010,8
 S 04a2c010,8
 M 04a2c018,4
 L 04a2c020,8
 S 04a2d010,1
 L 06000000,8
SYSCALL[100,1](257) sys_openat ( 4294967196, 0x4034bb0(/usr/libexec/valgrind/vgpreload_core-amd64-linux.so), 524288 ) --> [async] ... 
SYSCALL[100,1](257) ... [async] --> Success(0x4) 
SYSCALL[100,1](9) sys_mmap ( 0x0, 16400, 1, 2050, 4, 0 ) --> [pre-success] Success(0x4837000) 
SYSCALL[100,1](3) sys_close ( 4 )[sync] --> Success(0x0) 
SYSCALL[100,1](257) sys_openat ( 4294967196, 0x4835540(/lib/libc.so.6), 524288 ) --> [async] ... 
SYSCALL[100,1](257) ... [async] --> Success(0x3) 
SYSCALL[100,1](9) sys_mmap ( 0x0, 8192, 1, 2050, 3, 0 ) --> [pre-success] Success(0x4846000) 
 L 04846100,8
 L 04846200,8
SYSCALL[100,1](11) sys_munmap ( 0x4a2b000, 8392704 )[sync] --> Success(0x0) 
 S 04a2b010,8
SYSCALL[100,1](12) sys_brk ( 0x4056000 ) --> [pre-success] Success(0x4056000) 
 S 04035008,8
 S 04035010,8
SYSCALL[100,1](231) exit_group( 0 ) --> [pre-success] Success(0x0) 
==100== Exit code:       0
";

#[test]
fn lackey_lines_parse() {
    assert_eq!(parse_line(b" L 1fff000758,8\n"), LogLine::Data { addr: 0x1f_ff00_0758, write: false });
    assert_eq!(parse_line(b" S 04a2c010,8"), LogLine::Data { addr: 0x4a2_c010, write: true });
    assert_eq!(parse_line(b" M 04a2c018,4"), LogLine::Data { addr: 0x4a2_c018, write: true });
    assert_eq!(parse_line(b"I  0401ab70,3"), LogLine::Instr);
    assert_eq!(parse_line(b"==25971== Lackey, an example Valgrind tool"), LogLine::Banner { pid: 25971 });
    assert_eq!(
        parse_line(b"SYSCALL[25971,1](9) sys_mmap ( 0x0, 8192, 3, 34, 4294967295, 0 ) --> [pre-success] Success(0x4835000) "),
        LogLine::Call { pid: 25971, tid: 1, nr: 9, args: [0, 8192, 3, 34, 4294967295, 0].iter().map(|&v| (v, None)).collect(), ret: Some(Ok(0x483_5000)) }
    );
    assert_eq!(
        parse_line(b"SYSCALL[25971,1](11) sys_munmap ( 0x483c000, 39199 )[sync] --> Success(0x0) "),
        LogLine::Call { pid: 25971, tid: 1, nr: 11, args: vec![(0x483_c000, None), (39199, None)], ret: Some(Ok(0)) }
    );
    assert_eq!(
        parse_line(b"SYSCALL[7,2](257) sys_openat ( 4294967196, 0x1ffefff760(/usr/lib/debug/libc.so.6), 524288 ) --> [async] ... "),
        LogLine::Call { pid: 7, tid: 2, nr: 257, args: vec![(4294967196, None), (0x1f_feff_f760, Some(b"/usr/lib/debug/libc.so.6".to_vec())), (524288, None)], ret: None }
    );
    assert_eq!(parse_line(b"SYSCALL[7,2](257) ... [async] --> Failure(0x2) "), LogLine::Resume { pid: 7, tid: 2, nr: 257, ret: Err(2) });
    assert_eq!(parse_line(b"SYSCALL[7,1](334) unimplemented (by the kernel) syscall: 334! (ni_syscall)"), LogLine::Other);
    assert_eq!(parse_line(b" --> [pre-fail] Failure(0x26)"), LogLine::Other);
}

/// The log above, parsed, aligned, compressed and read back: the runs derived by hand.
#[test]
fn a_lackey_log_becomes_runs_in_native_addresses() {
    let h = AccessHeader { trace_crc: 7, trace_records: 20, page_size: 4096, flags: trace::accesses::ACCESS_ZSTD };
    let w = AccessWriter::new(Vec::new(), &h).unwrap();
    let mut c = Collector::new(Aligner::new(native()), w, Box::new(|pid| (pid == 100).then(|| VG_MAPS.to_string())));
    for l in LOG.split_inclusive('\n') {
        c.line(l.as_bytes()).unwrap();
    }
    assert_eq!(c.startup_missing, None);
    let (totals, out, bytes) = c.finish().unwrap();
    assert_eq!(
        (totals.raw_accesses, totals.writes, totals.runs, totals.unmapped_accesses, totals.unmapped_writes, totals.instructions),
        (14, 8, 8, 2, 1, 2)
    );
    // brk, mmap, vgpreload's mmap (valgrind's own: unmatched), libc's mmap, munmap, brk.
    assert_eq!((totals.valgrind_syscalls, totals.matched_syscalls), (6, 5));
    assert_eq!(bytes, out.len() as u64);
    let a = read_accesses(&out[..]).unwrap();
    assert_eq!(a.regions, ["/tmp/prog", "stack", "heap", "anon 0x7ffff7000000", "/lib/libc.so.6"]);
    let run = |page: u64, count: u64, write: bool, region: u32| AccessRun { page, count, write, region };
    assert_eq!(
        a.blocks,
        vec![
            // Before the first call: after the exec snapshot (record 0). The stack by its top
            // (0x1fff001000 ↔ 0x7ffffffff000), the executable by inode and offset.
            AccessBlock::new(1, &[run(0x7_ffff_fffe, 1, true, 1), run(0x5_5555_5554, 1, false, 0)]),
            // After brk(0) (record 3).
            AccessBlock::new(4, &[run(0x7_ffff_fffe, 1, false, 1)]),
            // After the mmap (record 5): three pages, the second three accesses (S, M, L); the
            // access to 0x6000000 maps nowhere.
            AccessBlock::new(6, &[run(0x7_ffff_7000, 1, true, 3), run(0x7_ffff_7001, 3, true, 3), run(0x7_ffff_7002, 1, true, 3)]),
            // After libc's mmap (record 8; vgpreload's is valgrind's own).
            AccessBlock::new(9, &[run(0x7_ffff_7fc0, 2, false, 4)]),
            // After the munmap (record 10) the store to the unmapped range maps nowhere; after
            // the brk (record 12) the heap from its start (0x4035000 ↔ 0x555555559000).
            AccessBlock::new(13, &[run(0x5_5555_5559, 2, true, 2)]),
        ]
    );
}

/// ld.so's way of mapping a library: a reservation of the whole file, then MAP_FIXED segments
/// inside it and an anonymous MAP_FIXED bss. The fixed mappings match only where their address,
/// translated, is the native one; a native call the valgrind run lacks is skipped, a valgrind
/// call the native run lacks is left unmatched, and a call beyond the window is not matched.
#[test]
fn valgrind_calls_align_with_native_ones() {
    let lib = Some("/lib/x86_64-linux-gnu/libc.so.6");
    let nb = 0x7fff_f7d8_0000u64;
    let vb = 0x484_6000u64;
    let mut calls = vec![
        call(SyscallKind::Mmap, &[0, 1974096, 1, 2050, 3, 0], nb as i64, lib, 10),
        call(SyscallKind::Mmap, &[0, 4096, 3, 34, M1, 0], 0x7fff_f7ff_0000, None, 11),
        call(SyscallKind::Mmap, &[nb + 0x26000, 1400832, 5, 2066, 3, 155648], (nb + 0x26000) as i64, lib, 12),
        call(SyscallKind::Mmap, &[nb + 0x1d5000, 53072, 3, 50, M1, 0], (nb + 0x1d5000) as i64, None, 13),
        call(SyscallKind::Mprotect, &[nb + 0x1cf000, 16384, 1], 0, None, 14),
    ];
    // Far away: 300 native calls later, a munmap of 4096.
    for i in 0..300 {
        calls.push(call(SyscallKind::Madvise, &[0x1000 * i, 4096, 4], 0, None, 20 + i));
    }
    calls.push(call(SyscallKind::Munmap, &[0x7fff_f7ff_0000, 4096], 0, None, 400));
    let mut a = Aligner::new(Native { calls, maps: Vec::new(), start_anchor: 1 });
    let v = |kind, args: &[u64], ret: i64, path: Option<&str>| call(kind, args, ret, path, 0);
    assert!(a.syscall(&v(SyscallKind::Mmap, &[0, 1974096, 1, 2050, 4, 0], vb as i64, lib)));
    assert_eq!(a.anchor, 11);
    // A fixed mapping at a valgrind address that translates to another native address: no match.
    assert!(!a.syscall(&v(SyscallKind::Mmap, &[vb + 0x1000, 1400832, 5, 2066, 4, 155648], (vb + 0x1000) as i64, lib)));
    assert!(a.syscall(&v(SyscallKind::Mmap, &[vb + 0x26000, 1400832, 5, 2066, 4, 155648], (vb + 0x26000) as i64, lib)));
    // The anonymous 4096 mmap (native record 11) was skipped.
    assert_eq!(a.anchor, 13);
    assert!(a.syscall(&v(SyscallKind::Mmap, &[vb + 0x1d5000, 53072, 3, 50, M1, 0], (vb + 0x1d5000) as i64, None)));
    assert!(a.syscall(&v(SyscallKind::Mprotect, &[vb + 0x1cf000, 16384, 1], 0, None)));
    assert_eq!(a.anchor, 15);
    // Translations: the library's text, its bss, and nothing outside.
    let region = |r: u32| a.names[r as usize].clone();
    let (n, r) = a.translate(vb + 0x26000 + 0x123).unwrap();
    assert_eq!((n, region(r).as_str()), (nb + 0x26123, "/lib/x86_64-linux-gnu/libc.so.6"));
    let (n, r) = a.translate(vb + 0x1d5008).unwrap();
    assert_eq!((n, region(r)), (nb + 0x1d5008, format!("anon {:#x}", nb + 0x1d5000)));
    assert_eq!(a.translate(vb + 1974096 + 0x5000), None);
    // Beyond the window: unmatched, and the anchor stays.
    assert!(!a.syscall(&v(SyscallKind::Munmap, &[0x4a00000, 4096], 0, None)));
    assert_eq!(a.anchor, 15);
    assert_eq!((a.seen, a.matched), (6, 4));
}

/// ld.so's allocation for the static TLS is 8 KiB under valgrind and 12 KiB natively: matched
/// loosely (same prot and flags, within a few calls), mapping the 8 KiB both have from the start.
#[test]
fn an_anonymous_mmap_of_another_length_matches_loosely() {
    let calls = vec![
        call(SyscallKind::Mmap, &[0, 12288, 3, 34, M1, 0], 0x7fff_f7d0_9000, None, 7),
        call(SyscallKind::Munmap, &[0x7fff_f7fb_6000, 39199], 0, None, 9),
    ];
    let mut a = Aligner::new(Native { calls, maps: Vec::new(), start_anchor: 1 });
    // A file mmap valgrind makes alone: no loose match for it.
    assert!(!a.syscall(&call(SyscallKind::Mmap, &[0, 16400, 1, 2050, 4, 0], 0x483_7000, Some("/usr/libexec/valgrind/vgpreload_core-amd64-linux.so"), 0)));
    assert!(a.syscall(&call(SyscallKind::Mmap, &[0, 8192, 3, 34, M1, 0], 0x4af_0000, None, 0)));
    assert_eq!(a.anchor, 8);
    assert_eq!(a.translate(0x4af_1008).map(|x| x.0), Some(0x7fff_f7d0_a008));
    assert_eq!(a.translate(0x4af_2000), None);
}

/// A wrapper (a shell script, a pyenv shim) that execs the real program: the first process's
/// images after its first are named, another process's exec and a thread's rename are not.
#[test]
fn images_after_the_first_are_named() {
    let ev = |pid: u32, comm: &str, exec: bool| trace::Event { time_ns: 0, tid: pid, pid, body: EventBody::Comm { comm: comm.as_bytes().to_vec(), exec } };
    let events = [ev(10, "python3", true), ev(11, "child", true), ev(10, "worker", false), ev(10, "python3.10", true)];
    assert_eq!(super::later_images(10, &events), vec!["python3.10".to_string()]);
    assert!(super::later_images(10, &events[..3]).is_empty());
}
