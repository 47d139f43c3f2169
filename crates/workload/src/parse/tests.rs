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
/// refuses durations, nesting, process blocks and process statements inside.
#[test]
fn repeat_writes_its_body_out_n_times() {
    let w = parse("w.thpw", "mmap a 1M\nrepeat 3 {\n  touch a write\n  madvise a dontneed\n}\nmunmap a\n").unwrap();
    let lines: Vec<usize> = w.ops.iter().map(|o| o.line).collect();
    assert_eq!(lines, [1, 3, 4, 3, 4, 3, 4, 6]);
    assert_eq!(w.touched_pages(), 3 * 256);
    assert_eq!(err("repeat 3s {\n}\n"), "w.thpw:1: repeat takes a count (1 to 100000), not a duration ('3s'): the model and the live run would repeat a different number of times");
    assert_eq!(err("repeat 0 {\n}\n"), "w.thpw:1: invalid repeat count '0': write a whole number from 1 to 100000");
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
        "w.thpw:3: unknown operation 'frobnicate'; valid: mmap, munmap, mprotect, madvise, brk, prctl, touch, access, sleep, phase, repeat, \
         read_direct, tmpfs, memfd, shm_open, file, ftruncate, fallocate, write, fork, thread, vfork, in, exit, wait"
    );
    assert_eq!(err("touch a write"), "w.thpw:1: unknown region 'a'; declared so far: none (declare one with mmap)");
    assert_eq!(err("mmap a 1Q"), "w.thpw:1: invalid size '1Q'; write a number with an optional unit K, M, G, T (4K, 2M, 1G, 1T)");
    assert_eq!(err("mmap a 1M\nmadvise a huge"), "w.thpw:2: unknown advice 'huge'; valid: hugepage, nohugepage, dontneed, collapse, free, populate_read, populate_write, dontfork, dofork, wipeonfork, keeponfork");
    assert_eq!(err("mmap a 1M\nmmap a 2M"), "w.thpw:2: 'a' is already declared at line 1");
    assert_eq!(err("mmap a 1M\ntouch a[0..2M] write"), "w.thpw:2: range 'a[0..2M]' runs past the end of region 'a' (1048576 bytes)");
    assert_eq!(err("mmap a 1M\nmunmap a[100+4K]"), "w.thpw:2: range 'a[100+4K]' must start on a 4 KiB boundary (the kernel returns EINVAL)");
    assert_eq!(err("mmap a 1M\ntouch a write stride=100"), "w.thpw:2: stride= must be a positive multiple of 4K, not 100");
    assert_eq!(err("mmap a 1M colour=red"), "w.thpw:1: unknown option 'colour='; valid options here: prot, align, offset, at, file, pgoff");
    assert_eq!(err("mmap a 1M\ntouch a"), "w.thpw:2: expected: touch RANGE read|write [order=seq|reverse|random] [stride=SIZE] [seed=N] [count=N]");
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
    assert_eq!(err("memfd m\nmmap a 1M file=m shared"), "w.thpw:2: a file mapping is shared already: write file=FILE without 'shared'");
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
    assert_eq!(err("}\n"), "w.thpw:1: '}' closes no block (blocks open with 'fork NAME {' or 'in NAME {')");
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
