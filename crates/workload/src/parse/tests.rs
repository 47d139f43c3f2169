use super::*;
use crate::TouchPlan;

fn err(text: &str) -> String {
    parse("w.thpw", text).unwrap_err().to_string()
}

#[test]
fn the_issue_program_parses() {
    let text = "\
thplab-workload 1
# map 256 MiB + 12 KiB and write every page
mmap big 256M+12K
touch big write
# map 3 MiB, read it all, then write every other page
mmap three 3M
touch three read
touch three write stride=8K
# map 8 MiB with MADV_HUGEPAGE and write every 16th page
mmap hp 8M
madvise hp hugepage
touch hp write stride=64K
# unmap 8 KiB holes every 256 KiB
munmap big[248K+8K] every=256K
";
    let w = parse("issue.thpw", text).unwrap();
    assert_eq!(w.regions.len(), 3);
    assert_eq!(w.regions[0].len, (256 << 20) + (12 << 10));
    assert_eq!(w.ops.len(), 9);
    let OpKind::Touch(t) = &w.ops[4].kind else { panic!() };
    assert_eq!(t.stride, 8192);
    assert_eq!(TouchPlan::new(t, 0).len(), 384); // 768 pages / 2
    let OpKind::Munmap(r) = &w.ops[8].kind else { panic!() };
    // 256M+12K holds 1024 full 256K periods, the last hole ends at 256M exactly.
    assert_eq!(r.pieces(w.regions[0].len).len(), 1024);
    assert_eq!(r.pieces(w.regions[0].len)[1], (256 * 1024 + 248 * 1024, 8192));
}

#[test]
fn touch_plans_visit_the_same_pages_in_each_order() {
    let w = parse("t", "mmap a 64K\ntouch a write order=reverse\ntouch a[4K+12K] read order=random seed=3 count=2\ntouch a[100+10] read").unwrap();
    let OpKind::Touch(rev) = &w.ops[1].kind else { panic!() };
    let addrs: Vec<u64> = TouchPlan::new(rev, 0x10000).iter().collect();
    assert_eq!(addrs.len(), 16);
    assert_eq!(addrs[0], 0x10000 + 15 * 4096);
    assert_eq!(addrs[15], 0x10000);
    let OpKind::Touch(rnd) = &w.ops[2].kind else { panic!() };
    let plan = TouchPlan::new(rnd, 0);
    assert_eq!(plan.len(), 2);
    for a in plan.iter() {
        assert!((4096..16384).contains(&a) && a % 4096 == 0, "{a}");
    }
    let OpKind::Touch(byte) = &w.ops[3].kind else { panic!() };
    assert_eq!(TouchPlan::new(byte, 0).iter().collect::<Vec<_>>(), [100]);
}

/// `repeat N { }` writes its body out N times, in order, with the body's line numbers; it
/// refuses nesting, process blocks and process statements inside.
#[test]
fn repeat_writes_its_body_out_n_times() {
    let w = parse("w.thpw", "mmap a 1M\nrepeat 3 {\n  touch a write\n  madvise a dontneed\n}\nmunmap a\n").unwrap();
    let lines: Vec<usize> = w.ops.iter().map(|o| o.line).collect();
    assert_eq!(lines, [1, 3, 4, 3, 4, 3, 4, 6]);
    assert_eq!(w.touched_pages(), 3 * 256);
    assert_eq!(err("repeat 0 {\n}\n"), "w.thpw:1: invalid repeat '0': write a count from 1 to 100000 (repeat 10 {) or a duration with a unit ns, us, ms or s (repeat 3s {)");
    assert_eq!(err("repeat 100001 {\n}\n"), "w.thpw:1: invalid repeat '100001': write a count from 1 to 100000 (repeat 10 {) or a duration with a unit ns, us, ms or s (repeat 3s {)");
    assert_eq!(err("repeat 2 {\nrepeat 2 {\n}\n}\n"), "w.thpw:2: repeat blocks do not nest: close the open one with '}' first");
    assert_eq!(err("repeat 2 {\nfork c\n}\n"), "w.thpw:2: 'fork' cannot be repeated (repeat on line 1): it would make or end a process more than once");
    assert_eq!(err("fork c {\nrepeat 2 {\n}\n}\n"), "w.thpw:2: repeat runs in main only: close the process block with '}' first");
    assert_eq!(err("mmap a 4K\nrepeat 2 {\ntouch a write\n"), "w.thpw:2: this block is never closed: end it with a line holding only '}'");
    assert_eq!(err("repeat 2\n"), "w.thpw:1: expected: repeat N {");
}

#[test]
fn phase_names_a_part_of_the_run() {
    let w = parse("w.thpw", "phase fill\nmmap a 1M\ntouch a write\nphase read\ntouch a read\n").unwrap();
    assert!(matches!(&w.ops[0].kind, OpKind::Phase(n) if n == "fill"));
    assert!(matches!(&w.ops[3].kind, OpKind::Phase(n) if n == "read"));
    assert_eq!(err("phase\n"), "w.thpw:1: expected: phase NAME");
}

#[test]
fn errors_name_file_line_and_what_is_valid() {
    assert_eq!(
        err("mmap a 1M\n\nfrobnicate a"),
        "w.thpw:3: unknown operation 'frobnicate'; valid: mmap, munmap, mprotect, madvise, mlock, munlock, brk, prctl, touch, access, sleep, phase, repeat, \
         read_direct, tmpfs, memfd, shm_open, file, ftruncate, fallocate, write, fork, thread, vfork, in, exit, wait, fragment, drop_caches, hugetlb_pool"
    );
    assert_eq!(err("touch a write"), "w.thpw:1: unknown region 'a'; declared so far: none (declare one with mmap)");
    assert_eq!(err("mmap a 1Q"), "w.thpw:1: invalid size '1Q'; write a number with an optional unit K, M, G, T (4K, 2M, 1G, 1T)");
    assert_eq!(err("mmap a 1M\nmadvise a huge"), "w.thpw:2: unknown advice 'huge'; valid: hugepage, nohugepage, dontneed, collapse, free, populate_read, populate_write, dontfork, dofork, wipeonfork, keeponfork, remove");
    assert_eq!(err("mmap a 1M\nmmap a 2M"), "w.thpw:2: 'a' is already declared at line 1");
    assert_eq!(err("mmap a 1M\ntouch a[0..2M] write"), "w.thpw:2: range 'a[0..2M]' runs past the end of region 'a' (1048576 bytes)");
    assert_eq!(err("mmap a 1M\nmunmap a[100+4K]"), "w.thpw:2: range 'a[100+4K]' must start on a 4 KiB boundary (the kernel returns EINVAL)");
    assert_eq!(err("mmap a 1M\ntouch a write stride=100"), "w.thpw:2: stride= must be a positive multiple of 4K, not 100");
    assert_eq!(err("mmap a 1M colour=red"), "w.thpw:1: unknown option 'colour='; valid options here: prot, align, offset, at, file, pgoff");
    assert_eq!(err("mmap a 1M\ntouch a"), "w.thpw:2: expected: touch RANGE read|write [order=seq|reverse|random] [stride=SIZE] [seed=N] [count=N] [rate=SIZE/s | duration=DURATION]");
    assert_eq!(err("thplab-workload 2"), "w.thpw:1: unsupported header 'thplab-workload 2'; this thplab reads 'thplab-workload 1'");
    assert_eq!(err("mmap a 1M offset=3M"), "w.thpw:1: offset= must be a multiple of 4K smaller than align=");
    assert_eq!(err("prctl thp_off"), "w.thpw:1: valid forms: 'prctl thp_disable', 'prctl thp_disable except_advised', 'prctl thp_enable'");
    assert_eq!(err("mmap a[ 1M"), "w.thpw:1: name 'a[' may hold only letters, digits, '_' and '-'");
}

#[test]
fn placements() {
    let w = parse("p", "mmap a 1M align=64K offset=4K\nmmap b 1M at=0x7e0000000000\nmmap c 1M offset=4K\nmmap d 4M").unwrap();
    let pl: Vec<Placement> = w.ops.iter().map(|o| match o.kind { OpKind::Mmap { placement, .. } => placement, _ => unreachable!() }).collect();
    assert_eq!(pl[0], Placement::Aligned { align: 65536, offset: 4096 });
    assert_eq!(pl[1], Placement::Fixed(0x7e00_0000_0000));
    assert_eq!(pl[2], Placement::Aligned { align: 2 << 20, offset: 4096 });
    assert_eq!(pl[3], Placement::Kernel);
}

#[test]
fn shared_memory_statements() {
    let text = "\
tmpfs t huge=within_size
memfd m
shm_open p
shm_open q on=t
file f on=t
ftruncate m 1G
fallocate f[0+2M]
write f[0..1M] chunk=4K
mmap a 1G file=m at=0x7fff00000000
mmap b 2M file=f pgoff=1M
mmap c 1M shared
touch a write
";
    let w = parse("s.thpw", text).unwrap();
    assert_eq!(w.mounts[0].huge, TmpfsHuge::WithinSize);
    assert_eq!(w.files.len(), 4);
    assert_eq!(w.files[1].kind, FileKind::PosixShm { mount: None });
    assert_eq!(w.files[2].kind, FileKind::PosixShm { mount: Some(MountId(0)) });
    assert!(matches!(w.ops[7].kind, OpKind::Write { offset: 0, len: 0x100000, chunk: 4096, .. }));
    assert!(matches!(w.ops[9].kind, OpKind::Mmap { backing: Backing::SharedFile { pgoff: 0x100000, .. }, .. }));
    assert!(matches!(w.ops[10].kind, OpKind::Mmap { backing: Backing::SharedAnon, .. }));
    assert_eq!(err("tmpfs t huge=sometimes"), "w.thpw:1: invalid huge= 'sometimes'; valid: never, always, within_size, advise");
    assert_eq!(err("file f on=nowhere"), "w.thpw:1: unknown tmpfs mount 'nowhere'; declared so far: none (declare one with tmpfs NAME huge=...)");
    assert_eq!(err("memfd m\nwrite m[0+0]"), "w.thpw:2: range 'm[0+0]' is empty");
    assert_eq!(err("ftruncate x 1M"), "w.thpw:1: unknown file 'x'; declared so far: none (declare one with memfd, shm_open or file)");
    assert_eq!(err("memfd m\nmmap a 1M file=m shared"), "w.thpw:2: a file mapping is shared already: write file=FILE without 'shared' (or 'private' for MAP_PRIVATE)");
    assert_eq!(err("mmap a 1M private"), "w.thpw:1: 'private' goes with file=FILE (anonymous memory is private without it)");
    let w = parse("p.thpw", "memfd m\nmmap a 1M file=m private pgoff=4K").unwrap();
    assert!(matches!(w.ops[1].kind, OpKind::Mmap { backing: Backing::PrivateFile { pgoff: 4096, .. }, .. }));
    let w = parse("p.thpw", "memfd m\nfallocate m[4K+8K] punch\nfallocate m[0+4K]\nfallocate m[0+8M] keep").unwrap();
    assert!(matches!(w.ops[1].kind, OpKind::Fallocate { offset: 4096, len: 8192, mode: FallocMode::PunchHole, .. }));
    assert!(matches!(w.ops[2].kind, OpKind::Fallocate { mode: FallocMode::Allocate, .. }));
    assert!(matches!(w.ops[3].kind, OpKind::Fallocate { len: 0x800000, mode: FallocMode::KeepSize, .. }));
    assert!(err("memfd m\nfallocate m[0+4K] hole").contains("fallocate FILE[OFFSET+LENGTH] [keep | punch]"), "{}", err("memfd m\nfallocate m[0+4K] hole"));
    assert_eq!(err("memfd m\nmmap m 1M"), "w.thpw:2: 'm' is already declared at line 1");
}

#[test]
fn write_calls_cover_the_range_in_chunks() {
    let calls: Vec<(u64, u64)> = crate::write_calls(4096, 10_000, 4096).collect();
    assert_eq!(calls, [(4096, 4096), (8192, 4096), (12288, 1808)]);
    assert_eq!(crate::write_calls(0, 1 << 20, 1 << 20).collect::<Vec<_>>(), [(0, 1 << 20)]);
}

#[test]
fn access_statements() {
    use crate::{OpKind, Pattern};
    let w = parse("a.thpw", "mmap r 64M\naccess r chase count=1000 elem=4K seed=3\naccess r[1M+2M] gaussian median=1M stddev=64K writes=50\naccess r zipf s=0.9\n").unwrap();
    let OpKind::Access(a) = &w.ops[1].kind else { panic!() };
    assert_eq!((a.pattern, a.count, a.elem, a.seed, a.writes_pct), (Pattern::Chase, Some(1000), 4096, 3, 0));
    let OpKind::Access(a) = &w.ops[2].kind else { panic!() };
    assert_eq!((a.pattern, a.range.offset, a.writes_pct, a.elem), (Pattern::Gaussian { median: 1 << 20, stddev: 64 << 10 }, 1 << 20, 50, 64));
    let OpKind::Access(a) = &w.ops[3].kind else { panic!() };
    assert_eq!(a.pattern, Pattern::Zipf { s_milli: 900 });
    let err = |t: &str| parse("a.thpw", &format!("mmap r 64M\n{t}\n")).unwrap_err().to_string();
    assert_eq!(err("access r gaussian median=1M"), "a.thpw:2: access ... gaussian needs median=SIZE and stddev=SIZE (a positive byte offset and spread inside the range)");
    assert_eq!(err("access r walk"), "a.thpw:2: unknown access pattern 'walk'; valid: seq, stride, uniform, gaussian, zipf, chase");
    assert_eq!(err("access r seq s=2"), "a.thpw:2: s= only goes with the zipf pattern");
    assert_eq!(err("access r seq writes=120"), "a.thpw:2: writes= is a percentage (0..100), not 120");
    assert_eq!(err("access r seq elem=48"), "a.thpw:2: elem= must be a power of two from 8 to 4K, not 48");
}

#[test]
fn processes_fork_in_exit_wait() {
    let w = parse("p.thpw", "mmap a 1M\nfork c {\n  touch a write\n}\ntouch a read\nin c {\n  exit\n}\nwait c\n").unwrap();
    assert_eq!(w.procs.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["main", "c"]);
    let kinds: Vec<(u32, &OpKind)> = w.ops.iter().map(|o| (o.proc.0, &o.kind)).collect();
    assert!(matches!(kinds[1], (0, OpKind::Fork(ProcId(1)))));
    assert!(matches!(kinds[2], (1, OpKind::Touch(_))));
    assert!(matches!(kinds[3], (0, OpKind::Touch(_))));
    assert!(matches!(kinds[4], (1, OpKind::Exit)));
    assert!(matches!(kinds[5], (0, OpKind::Wait(ProcId(1)))));
    assert!(w.forks());
    assert_eq!(Advice::parse("wipeonfork").map(|a| a.madv()), Some(18));
    assert_eq!(Advice::parse("dontfork").map(|a| a.madv()), Some(10));

    assert_eq!(err("fork c {\nmmap a 1M\n"), "w.thpw:1: this block is never closed: end it with a line holding only '}'");
    // Issue #27 item 12: every kind of block is named (it used to name fork and in only).
    assert_eq!(
        err("}\n"),
        "w.thpw:1: '}' closes no block (blocks open with 'fork NAME {', 'thread NAME {', 'vfork NAME {', 'in NAME {', 'repeat N {', 'repeat DURATION {')"
    );
    assert_eq!(err("fork c\nwait c\n"), "w.thpw:2: 'wait c' would block forever: 'c' has not exited; end its block with 'exit' first");
    assert_eq!(err("fork c {\nexit\n}\nin c {\nmmap a 1M\n}\n"), "w.thpw:4: process 'c' has exited; nothing runs in it after that");
    assert_eq!(err("fork c {\nfork d\n}\n"), "w.thpw:2: fork runs in main only (a child that forks is not supported yet)");
    assert_eq!(err("in c {\n}\n"), "w.thpw:1: no process 'c': fork it first ('fork c')");
    assert_eq!(err("exit\n"), "w.thpw:1: main exits at the end of the workload; 'exit' belongs in a child's block");
    assert_eq!(err("fork c\nfork c\n"), "w.thpw:2: process 'c' is already forked on line 1");
    assert_eq!(err("fork main\n"), "w.thpw:1: invalid process name 'main': letters, digits, '_' and '-', and not 'main'");
    assert_eq!(err("fork c\nin c {\nwait c\n}\n"), "w.thpw:3: 'wait c' would block forever: 'c' has not exited; end its block with 'exit' first");
}

#[test]
fn threads_and_vfork_children_share_main_mm() {
    let w = parse(
        "t.thpw",
        "mmap a 1M\nthread t {\n  touch a[0+512K] write\n}\nthread u\nvfork v {\n  touch a[512K+4K] write\n  exit\n}\nwait v\nin t {\n  exit\n}\nwait t\nin u {\n  touch a read\n}\n",
    )
    .unwrap();
    let procs: Vec<(&str, ProcKind, bool)> = w.procs.iter().map(|p| (p.name.as_str(), p.kind, p.shares_mm())).collect();
    assert_eq!(procs, [("main", ProcKind::Main, false), ("t", ProcKind::Thread, true), ("u", ProcKind::Thread, true), ("v", ProcKind::Vfork, true)]);
    let kinds: Vec<(u32, &OpKind)> = w.ops.iter().map(|o| (o.proc.0, &o.kind)).collect();
    assert!(matches!(kinds[1], (0, OpKind::Thread(ProcId(1)))));
    assert!(matches!(kinds[2], (1, OpKind::Touch(_))));
    assert!(matches!(kinds[3], (0, OpKind::Thread(ProcId(2)))));
    assert!(matches!(kinds[4], (0, OpKind::Vfork(ProcId(3)))));
    assert!(matches!(kinds[5], (3, OpKind::Touch(_))));
    assert!(matches!(kinds[6], (3, OpKind::Exit)));
    assert!(matches!(kinds[7], (0, OpKind::Wait(ProcId(3)))));
    assert!(matches!(kinds[8], (1, OpKind::Exit)));
    assert!(matches!(kinds[9], (0, OpKind::Wait(ProcId(1)))));
    assert!(matches!(kinds[10], (2, OpKind::Touch(_))));
    assert_eq!(kinds.len(), 11);
    assert!(w.forks() && w.shares_mm());
    assert!(!parse("f.thpw", "fork c\n").unwrap().shares_mm());

    // vfork suspends main: the child's statements come at once, in a block that ends with exit.
    assert_eq!(
        err("vfork v\n"),
        "w.thpw:1: expected: vfork NAME { (main is suspended until 'v' exits, so its statements follow at once in a block that ends with 'exit')"
    );
    assert_eq!(
        err("mmap a 1M\nvfork v {\n  touch a write\n}\ntouch a read\n"),
        "w.thpw:4: main is suspended in vfork until 'v' exits (vfork on line 2), so nothing else can run: end the block of 'v' with 'exit' before '}'"
    );
    assert_eq!(err("vfork v {\nexit\n}\nin v {\n}\n"), "w.thpw:4: process 'v' has exited; nothing runs in it after that");
    assert_eq!(err("thread t x\n"), "w.thpw:1: expected: thread NAME [{]");
    assert_eq!(err("vfork v x {\n"), "w.thpw:1: expected: vfork NAME {");
    assert_eq!(err("thread t {\nthread u\n}\n"), "w.thpw:2: thread runs in main only (a child or thread that creates tasks is not supported yet)");
    assert_eq!(err("thread t {\nvfork u {\n"), "w.thpw:2: vfork runs in main only (a child or thread that creates tasks is not supported yet)");
    assert_eq!(err("fork c\nthread c\n"), "w.thpw:2: process 'c' is already forked on line 1");
    assert_eq!(err("thread t\nvfork t {\n"), "w.thpw:2: process 't' is already created ('thread') on line 1");
    assert_eq!(err("thread main\n"), "w.thpw:1: invalid process name 'main': letters, digits, '_' and '-', and not 'main'");
    assert_eq!(err("thread t\nwait t\n"), "w.thpw:2: 'wait t' would block forever: 't' has not exited; end its block with 'exit' first");
    assert_eq!(err("thread t {\nexit\n}\nin t {\nwait t\n}\n"), "w.thpw:4: process 't' has exited; nothing runs in it after that");
    assert_eq!(err("thread t {\nexit\ntouch a read\n}\n"), "w.thpw:3: unknown region 'a'; declared so far: none (declare one with mmap)");
    assert_eq!(err("mmap a 1M\nthread t {\nexit\ntouch a read\n}\n"), "w.thpw:4: process 't' has exited (its 'exit' is above); nothing runs in it after that");
}

/// `rate=SIZE/s` and `duration=DURATION` pace a touch: accepted forms, and the schedule they
/// give (hand-derived: 8M/s is 2048 pages/s, about 2.05 pages per ms, so chunks of 2 pages;
/// 2048 pages take exactly 1 s).
#[test]
fn touches_take_a_rate_or_a_duration() {
    let w = parse(
        "w.thpw",
        "mmap a 8M\ntouch a write rate=8M/s\ntouch a read rate=100M/s stride=8K\ntouch a write rate=4096/s\ntouch a write duration=3s order=random seed=2 count=10\ntouch a write rate=1G/s\n",
    )
    .unwrap();
    let touch = |i: usize| match &w.ops[i].kind {
        OpKind::Touch(t) => *t,
        other => panic!("{other:?}"),
    };
    assert_eq!(touch(1).pace, Some(Pace::Rate { bytes_per_sec: 8 << 20 }));
    assert_eq!(touch(2).pace, Some(Pace::Rate { bytes_per_sec: 100 << 20 }));
    assert_eq!(touch(2).stride, 8192);
    assert_eq!(touch(3).pace, Some(Pace::Rate { bytes_per_sec: 4096 }));
    assert_eq!(touch(4).pace, Some(Pace::Duration { ns: 3_000_000_000 }));
    assert_eq!(touch(4).count, Some(10));
    assert_eq!(touch(5).pace, Some(Pace::Rate { bytes_per_sec: 1 << 30 }));

    // 8M/s over 8 MiB: 2048 pages, 2 a chunk (8388608 / 4096000 = 2.05), 1024 chunks; the
    // chunk starting at page i may start at i / 2048 s; the whole touch ends at 1 s.
    let p = Pacing::new(touch(1).pace.unwrap(), 2048);
    assert_eq!((p.chunk_pages(), p.chunks()), (2, 1024));
    assert_eq!(p.offset_ns(2), 976_562);
    assert_eq!(p.offset_ns(1024), 500_000_000);
    assert_eq!(p.offset_ns(2048), 1_000_000_000);
    // 100M/s, every other page: 1024 pages of 4 KiB selected = 4 MiB at 100 MiB/s = 40 ms;
    // 25.6 pages a ms → 26 a chunk.
    let p = Pacing::new(touch(2).pace.unwrap(), 1024);
    assert_eq!((p.chunk_pages(), p.offset_ns(1024)), (26, 40_000_000));
    // 4096/s: one page a second, one page a chunk (at least one).
    let p = Pacing::new(touch(3).pace.unwrap(), 2048);
    assert_eq!((p.chunk_pages(), p.offset_ns(1), p.offset_ns(2048)), (1, 1_000_000_000, 2048_000_000_000));
    // duration=3s over the 10 pages that count= keeps: 10 pages in 3 s, one a chunk, 300 ms apart.
    let p = Pacing::new(touch(4).pace.unwrap(), TouchPlan::new(&touch(4), 0).len());
    assert_eq!((p.chunk_pages(), p.chunks(), p.offset_ns(1), p.offset_ns(10)), (1, 10, 300_000_000, 3_000_000_000));
    // 1G/s: 262.144 pages a ms → 262 a chunk.
    assert_eq!(Pacing::new(touch(5).pace.unwrap(), 2048).chunk_pages(), 262);
    // duration= over 2048 pages in 100 ms: 20.48 pages a ms → 20 a chunk; page 1024 at 50 ms.
    let p = Pacing::new(Pace::Duration { ns: 100_000_000 }, 2048);
    assert_eq!((p.chunk_pages(), p.offset_ns(1024), p.offset_ns(2048)), (20, 50_000_000, 100_000_000));
}

#[test]
fn pacing_refusals_name_the_line_and_what_is_valid() {
    let touch = "touch RANGE read|write [order=seq|reverse|random] [stride=SIZE] [seed=N] [count=N] [rate=SIZE/s | duration=DURATION]";
    assert_eq!(
        err("mmap a 1M\ntouch a write rate=0/s"),
        "w.thpw:2: rate=0/s would never finish the touch: give a positive rate (write rate=SIZE/s, a size with an optional unit K, M, G, T per second (100M/s, 512K/s, 1048576/s)), or leave rate= out to touch at full speed"
    );
    assert_eq!(
        err("mmap a 1M\ntouch a write rate=100M"),
        "w.thpw:2: invalid rate '100M': write rate=SIZE/s, a size with an optional unit K, M, G, T per second (100M/s, 512K/s, 1048576/s)"
    );
    assert_eq!(
        err("mmap a 1M\ntouch a write rate=fast/s"),
        "w.thpw:2: invalid rate 'fast/s': write rate=SIZE/s, a size with an optional unit K, M, G, T per second (100M/s, 512K/s, 1048576/s)"
    );
    assert_eq!(
        err("mmap a 1M\ntouch a write duration=0s"),
        "w.thpw:2: duration=0 leaves no time to spread the touch over: give a positive duration (100ms, 3s), or leave duration= out to touch at full speed"
    );
    assert_eq!(
        err("mmap a 1M\ntouch a write duration=3"),
        "w.thpw:2: duration=: invalid duration '3'; give a number and a unit: ns, us, ms or s (such as 100ms or 1.5s), at most 1 day"
    );
    assert_eq!(
        err("mmap a 1M\ntouch a write rate=1M/s duration=1s"),
        "w.thpw:2: give rate= or duration=, not both: rate=SIZE/s paces the touch at that speed, duration=DURATION spreads it over that time"
    );
    assert_eq!(
        err("mmap a 1M\nmadvise a dontneed rate=1M/s"),
        format!("w.thpw:2: rate= paces a touch only ({touch}); 'madvise' takes no rate= (to wait, write 'sleep DURATION'; to repeat for a time, 'repeat DURATION {{')")
    );
    assert_eq!(
        err("sleep 1s duration=2s"),
        format!("w.thpw:1: duration= paces a touch only ({touch}); 'sleep' takes no duration= (to wait, write 'sleep DURATION'; to repeat for a time, 'repeat DURATION {{')")
    );
    assert_eq!(
        err("mmap a 1M\naccess a seq rate=1M/s"),
        format!("w.thpw:2: rate= paces a touch only ({touch}); 'access' takes no rate= (to wait, write 'sleep DURATION'; to repeat for a time, 'repeat DURATION {{')")
    );
}

/// `repeat DURATION { }` is one loop node followed by its body (not written out); its body
/// must move the model's clock (a sleep or a paced touch) and may not move the break.
#[test]
fn repeat_for_a_duration_is_one_loop_node() {
    let w = parse("w.thpw", "mmap a 1M\nrepeat 1s {\n  touch a[0+4K] write\n  sleep 100ms\n}\nrepeat 1.5s {\n  touch a write duration=10ms\n}\nmunmap a\n").unwrap();
    let lines: Vec<usize> = w.ops.iter().map(|o| o.line).collect();
    assert_eq!(lines, [1, 2, 3, 4, 6, 7, 9]);
    assert_eq!(w.ops[1].kind, OpKind::RepeatFor { ns: 1_000_000_000, body: 2 });
    assert_eq!(w.ops[4].kind, OpKind::RepeatFor { ns: 1_500_000_000, body: 1 });
    assert!(matches!(w.ops[5].kind, OpKind::Touch(Touch { pace: Some(Pace::Duration { ns: 10_000_000 }), .. })));
    // Counted loops are still written out beside it.
    let w = parse("w.thpw", "mmap a 1M\nrepeat 2 {\ntouch a write\n}\nrepeat 10ms {\nsleep 1ms\n}\n").unwrap();
    assert_eq!(w.ops.len(), 5);
    assert_eq!(w.ops[3].kind, OpKind::RepeatFor { ns: 10_000_000, body: 1 });
    let no_time = "w.thpw:2: this repeat DURATION block has no sleep and no paced touch: it takes no time in the model (without a profile only 'sleep' and \
                   touches with rate= or duration= move the simulated clock) and would never end there; add 'sleep DURATION' or a paced touch to the block, \
                   or repeat a count (repeat N {)";
    assert_eq!(err("mmap a 1M\nrepeat 3s {\n  touch a write\n  madvise a dontneed\n}\n"), no_time);
    assert_eq!(err("mmap a 1M\nrepeat 3s {\n  touch a write\n  sleep 0ms\n}\n"), no_time);
    assert_eq!(err("mmap a 1M\nrepeat 3s {\n}\n"), no_time);
    assert_eq!(err("repeat 0s {\n}\n"), "w.thpw:1: repeat 0s would run its block no time at all: give a positive duration (repeat 3s {) or a count (repeat 3 {)");
    assert_eq!(err("repeat 3x {\n}\n"), "w.thpw:1: invalid repeat '3x': write a count from 1 to 100000 (repeat 10 {) or a duration with a unit ns, us, ms or s (repeat 3s {)");
    assert_eq!(
        err("repeat 3s {\nbrk +4K\n}\n"),
        "w.thpw:2: 'brk' cannot be repeated for a time (repeat on line 1): the heap's length would depend on how many times the block ran; repeat a count (repeat N {) instead"
    );
    assert_eq!(err("repeat 3s {\nrepeat 2 {\n}\n}\n"), "w.thpw:2: repeat blocks do not nest: close the open one with '}' first");
    assert_eq!(err("repeat 3s {\nfork c\n}\n"), "w.thpw:2: 'fork' cannot be repeated (repeat on line 1): it would make or end a process more than once");
    assert_eq!(err("repeat 3s {\nsleep 1ms\n"), "w.thpw:1: this block is never closed: end it with a line holding only '}'");
    // brk in a counted repeat is still fine (the parser writes it out).
    parse("w.thpw", "repeat 2 {\nbrk +4K\n}\n").unwrap();
}

/// Each block the "closes no block" error names opens with that statement and closes with `}`.
#[test]
fn every_block_kind_named_in_the_error_opens_a_block() {
    let opened = |opener: &str| -> String {
        let w = |n: &str| opener.replace("NAME", "c").replace("DURATION", "1s").replace(" N ", &format!(" {n} "));
        match opener {
            "in NAME {" => format!("fork c\n{}\nmmap a 1M\n}}\n", w("2")),
            "vfork NAME {" => format!("{}\nexit\n}}\n", w("2")),
            "repeat DURATION {" => format!("{}\nsleep 1ms\n}}\n", w("2")),
            _ => format!("{}\nmmap a 4K\n}}\n", w("2")),
        }
    };
    for b in BLOCKS {
        let text = opened(b);
        parse("w.thpw", &text).unwrap_or_else(|e| panic!("{b}: {e}\n{text}"));
    }
}

#[test]
fn a_byte_order_mark_at_the_start_is_skipped() {
    let w = parse("bom.thpw", "\u{feff}mmap buf 1M\ntouch buf write\n").unwrap();
    assert_eq!(w.regions[0].name, "buf");
    // Elsewhere it is no operation.
    assert_eq!(err("mmap a 1M\n\u{feff}touch a write\n"), format!("w.thpw:2: unknown operation '\u{feff}touch'; valid: {}", super::VERBS));
}

#[test]
fn fragment_and_drop_caches() {
    let w = parse("w.thpw", "fragment\nfragment unmovable=25%\nfragment unmovable=100\ndrop_caches 2\n").unwrap();
    assert_eq!(w.ops[0].kind, OpKind::Fragment { unmovable_pct: 0 });
    assert_eq!(w.ops[1].kind, OpKind::Fragment { unmovable_pct: 25 });
    assert_eq!(w.ops[2].kind, OpKind::Fragment { unmovable_pct: 100 });
    assert_eq!(w.ops[3].kind, OpKind::DropSlab);
    assert_eq!(err("fragment unmovable=101%"), "w.thpw:1: unmovable=101%: give a percentage of pageblocks from 0 to 100, such as unmovable=25%");
    assert_eq!(err("fragment movable=5"), "w.thpw:1: unknown option 'movable='; valid options here: unmovable");
    assert_eq!(
        err("drop_caches 3"),
        "w.thpw:1: drop_caches 3: only 2 (slab objects: the shrinkers, the THP deferred split queue's among them) is supported; 1 and 3 drop the page cache, which the model does not reclaim"
    );
    assert_eq!(err("drop_caches"), "w.thpw:1: expected: drop_caches 2");
}
