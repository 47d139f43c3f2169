//! Exec snapshots after a later execve: a forked child execs another program, whose address
//! space (its own ld.so below its own mmap_base, its stack, its heap) is only in its
//! `exec_maps` record. Expected values are derived by hand below from the addresses and
//! mm/mmap.c: `unmapped_area_topdown` (the highest free gap below mmap_base that fits).

use trace::{flags, Event, EventBody, Header, MapEntry, Syscall, SyscallKind};
use thp_abi::ThpSettings;
use uapi::RunResult;

use crate::MachineConfig;

const MIB: u64 = 1 << 20;
/// The first program's ld.so, ending at its mmap_base.
const LD: u64 = 0x7fff_f7fc_a000;
const BASE: u64 = 0x7fff_f7ff_f000;
/// The second program's ld.so and mmap_base (another layout, as a larger ELF or another
/// RLIMIT_STACK gives).
const LD2: u64 = 0x7fff_f7e8_0000;
const BASE2: u64 = 0x7fff_f7eb_5000;
/// Its heap, as execve left it (start_brk .. brk).
const HEAP2: (u64, u64) = (0x5555_5557_9000, 0x5555_5559_a000);
/// Its 1 MiB anonymous mmap without a hint: top-down from BASE2, the highest gap that fits is
/// right below its ld.so.
const M2: u64 = LD2 - MIB;

fn map(start: u64, end: u64, perms: u8, ino: u64, path: &[u8]) -> MapEntry {
    MapEntry { start, end, perms: perms as u32, offset: 0, maj: 8, min: 1, ino, path: path.to_vec() }
}

fn sc(kind: SyscallKind, args: &[u64], ret: i64) -> EventBody {
    EventBody::Syscall(Syscall { kind, args: args.to_vec(), ret: Some(ret), duration_ns: 100 })
}

/// How the child's snapshot is recorded.
#[derive(Clone, Copy, PartialEq)]
enum Snap {
    /// After its execve's record (the recorder's order: the execve is stamped at its entry, the
    /// snapshot inside the call).
    After,
    /// Before it (the replay must keep it for the image that execve makes).
    Before,
    /// None (a recording made before every execve had one).
    None,
}

/// `start_stack`: the child's `exec_stack` record (format 2.4), just before its snapshot.
fn recording(snap: Snap, start_stack: Option<u64>) -> (Header, Vec<Event>) {
    let ev = |t: u64, pid: u32, body: EventBody| Event { time_ns: t, tid: pid, pid, body };
    let child_maps = EventBody::ExecMaps(vec![
        map(0x5555_5555_4000, 0x5555_5555_5000, 5, 7, b"/usr/bin/second"),
        map(HEAP2.0, HEAP2.1, 3, 0, b"[heap]"),
        map(LD2, BASE2, 5, 9, b"/lib/ld2.so"),
        map(0x7fff_fffd_e000, 0x7fff_ffff_f000, 3, 0, b"[stack]"),
    ]);
    let mut v = vec![
        ev(100, 100, EventBody::ExecMaps(vec![map(LD, BASE, 5, 5, b"/lib/ld.so"), map(0x7fff_fffd_e000, 0x7fff_ffff_f000, 3, 0, b"[stack]")])),
        // fork (clone with SIGCHLD only), stamped at its entry, then the kernel's task record.
        ev(200, 100, sc(SyscallKind::Clone, &[0x11, 0, 0, 0, 0], 101)),
        ev(250, 100, EventBody::TaskNew { tid: 101, pid: 101 }),
    ];
    let stack = |t: u64| start_stack.map(|start_stack| ev(t, 101, EventBody::ExecStack { start_stack }));
    if snap == Snap::Before {
        v.extend(stack(290));
        v.push(ev(290, 101, child_maps.clone()));
    }
    v.push(ev(300, 101, sc(SyscallKind::Execve, &[0x1000, 0x2000, 0x3000], 0)));
    if snap == Snap::After {
        v.extend(stack(350));
        v.push(ev(350, 101, child_maps));
    }
    v.extend([
        ev(500, 101, sc(SyscallKind::Mmap, &[0, MIB, 3, 0x22, u64::MAX, 0], M2 as i64)),
        ev(600, 101, EventBody::Fault { addr: HEAP2.0, error_code: 6 }),
        ev(700, 101, EventBody::Fault { addr: M2, error_code: 6 }),
        ev(800, 101, sc(SyscallKind::ExitGroup, &[0], 0)),
        ev(900, 100, sc(SyscallKind::ExitGroup, &[0], 0)),
    ]);
    let every = if snap == Snap::None { 0 } else { flags::EXEC_SNAPSHOT_EVERY };
    let header = Header {
        root_pid: 100,
        page_size: 4096,
        exec_path: b"/usr/bin/first".to_vec(),
        flags: flags::THP_DISABLED | flags::NO_RANDOMIZE | flags::EXEC_SNAPSHOT | every,
        thp_settings: b"enabled:always madvise [never]\n".to_vec(),
        ..Header::default()
    };
    (header, v)
}

fn replay(snap: Snap) -> RunResult {
    replay_with_stack(snap, None)
}

fn replay_with_stack(snap: Snap, start_stack: Option<u64>) -> RunResult {
    let (h, ev) = recording(snap, start_stack);
    let mut s = ThpSettings::default();
    s.apply_assignment("enabled=never").unwrap();
    crate::run_recording("hand-made", &h, &ev, &s, &MachineConfig::default(), true).unwrap()
}

fn stat(r: &RunResult) -> &uapi::ReplayReport {
    r.model.as_ref().and_then(|m| m.replay.as_ref()).expect("a replay has model.replay")
}

/// The child's image (the third: the root's, the forked copy, the execve's).
fn child_image(r: &RunResult) -> &uapi::result::ReplayProcess {
    let procs = &stat(r).per_process;
    procs.iter().find(|p| p.pid == 101 && p.image == 2).unwrap_or_else(|| panic!("{procs:?}"))
}

/// With the child's snapshot, in either order: its mmap is placed where the kernel put it
/// (below its own ld.so, not below the first program's or the boot mmap_base), its heap is
/// modelled (the write to it and to the mapping are its 2 faults), and the output says the
/// image had a snapshot.
#[test]
fn a_later_execve_gets_its_address_space_from_its_snapshot() {
    for snap in [Snap::After, Snap::Before] {
        let r = replay(snap);
        assert_eq!(stat(&r).placements_checked, 1);
        assert_eq!(stat(&r).placements_matched, 1, "{:?}", stat(&r).warnings);
        assert_eq!(stat(&r).exec_snapshots, 2);
        assert_eq!(stat(&r).images, 3);
        let c = child_image(&r);
        assert!(c.exec_snapshot);
        assert_eq!(c.exe, "/usr/bin/second");
        // The write to the heap and to the mapping, and the stack's top page that its execve
        // filled (GUP: in the child's min_flt).
        assert_eq!(c.modelled_faults, 3, "{c:?}");
        assert_eq!(stat(&r).passthrough_faults, 0);
        assert!(stat(&r).warnings.is_empty(), "{:?}", stat(&r).warnings);
    }
}

/// With an `exec_stack` record: every page from start_stack (argc) to the stack's top was
/// written by the execve, so the child's image takes 3 faults there (0x7fff_ffff_c000,
/// d000 and e000 below the top at f000) instead of the one top page, and its Rss holds them.
/// A start_stack outside the stack (a damaged record) falls back to the top page.
#[test]
fn an_exec_stack_record_gives_the_pages_execve_wrote() {
    for snap in [Snap::After, Snap::Before] {
        let c = child_image(&replay_with_stack(snap, Some(0x7fff_ffff_c9a8))).clone();
        assert_eq!(c.modelled_faults, 2 + 3, "{c:?}");
        let without = child_image(&replay(snap)).clone();
        assert_eq!(c.rss_bytes, without.rss_bytes + 2 * 4096);
        let outside = child_image(&replay_with_stack(snap, Some(0x1000))).clone();
        assert_eq!(outside.modelled_faults, 3, "{outside:?}");
    }
}

/// Without it (a recording made before): the model places the mapping top-down from the boot
/// mmap_base (MachineConfig::default), not at M2; the heap write is passed through; a warning
/// says why.
#[test]
fn a_later_execve_without_a_snapshot_is_counted_and_warned_about() {
    let r = replay(Snap::None);
    assert_eq!(stat(&r).placements_checked, 1);
    assert_eq!(stat(&r).placements_matched, 0);
    assert_eq!(stat(&r).exec_snapshots, 1);
    let c = child_image(&r);
    assert!(!c.exec_snapshot);
    assert_eq!(c.modelled_faults, 1, "{c:?}");
    assert_eq!(stat(&r).passthrough_faults, 1);
    let w = stat(&r).warnings.join("\n");
    assert!(w.contains("1 process images made by an execve have no exec snapshot, the recording has only the first process's"), "{w}");
}

/// What a live run measures of a process that execs (live::program): minflt from its creation
/// (`kernel/fork.c: copy_mm` zeroes min_flt; only the program's own count starts inside its
/// first execve, where the recording starts) to its exit, so faults inside a later execve are
/// counted (`mm/memory.c: mm_account_fault`, GUP faults too: a 64 KiB environment adds 16 to
/// an exec'ing child's minflt on this machine), and Rss and the census at its exit, where an
/// image that execve replaced is gone. Here the root writes a stack page before it forks; the
/// forked copy (2 pages: that one and the top page its execve filled) is replaced by the
/// child's execve, whose image ends with 3 (its top stack page, the heap page, the mapping's).
#[test]
fn an_image_replaced_by_execve_is_not_in_the_census_and_faults_inside_a_later_execve_count() {
    let (h, mut ev) = recording(Snap::After, None);
    let e = |t: u64, pid: u32, addr: u64, error_code: u64| Event { time_ns: t, tid: pid, pid, body: EventBody::Fault { addr, error_code } };
    // Inside the root's execve (before its snapshot at 100): not the program's.
    ev.insert(0, e(50, 100, 0x7fff_ffff_d000, 2));
    // The root's write to its stack, then (after the fork at 200) one inside the child's
    // execve (300..400, a file page of the new ELF: not modelled, counted as recorded).
    let at = ev.iter().position(|x| x.time_ns >= 200).unwrap();
    ev.insert(at, e(150, 100, 0x7fff_ffff_0000, 6));
    let at = ev.iter().position(|x| x.time_ns > 300).unwrap();
    ev.insert(at, e(320, 101, 0x5555_5555_4100, 2));
    let mut s = ThpSettings::default();
    s.apply_assignment("enabled=never").unwrap();
    let r = crate::run_recording("hand-made", &h, &ev, &s, &MachineConfig::default(), true).unwrap();
    let procs = &stat(&r).per_process;
    let forked = procs.iter().find(|p| p.pid == 101 && p.image == 1).unwrap_or_else(|| panic!("{procs:?}"));
    assert!(forked.replaced, "{procs:?}");
    assert_eq!(forked.rss_bytes, 2 * 4096, "{procs:?}");
    assert!(procs.iter().filter(|p| p.image != 1).all(|p| !p.replaced), "{procs:?}");
    // The root's image: its stack page and its top page; the child's last image: 3 pages.
    assert_eq!(r.process.rss_bytes, (2 + 3) * 4096);
    assert_eq!(r.census.sizes[&thp_abi::FolioSize::from("4kB")].folios, 5);
    assert_eq!(r.vmas.iter().map(|v| v.rss_kb).sum::<u64>(), 5 * 4);
    // The root's stack write; the child's 3 modelled faults and the one inside its execve.
    assert_eq!(stat(&r).exec_faults, 2);
    assert_eq!(stat(&r).passthrough_faults, 1);
    assert_eq!(r.process.minflt, 1 + 3 + 1);
}
