//! The replay's shmem side on a hand-made recording: fd tables (dup, close), memfd and /dev/shm
//! files (path and mounts records), relocation of a mapping whose shmem placement depends on the
//! knobs. Every expected value is derived in the comments from mm/shmem.c
//! (`shmem_get_unmapped_area`) and the addresses below.

use trace::{flags, Event, EventBody, Header, MapEntry, MountEntry, PathInfo, Syscall, SyscallKind, TMPFS_MAGIC};
use uapi::ThpSettings;

const MIB: u64 = 1 << 20;
/// ld.so ends at mmap_base (the kernel placed it first, top-down).
const BASE: u64 = 0x7fff_f7ff_f000;
const LD: u64 = 0x7fff_f7fc_a000;
/// The memfd: 4 MiB right below ld.so, as the kernel places it when nothing aligns it.
const X: u64 = LD - 4 * MIB;
/// The /dev/shm file on a huge=always mount: aligned whatever the knobs (worked out in the test).
const Y: u64 = 0x7fff_f780_0000;

fn sc(kind: SyscallKind, args: &[u64], ret: i64) -> EventBody {
    EventBody::Syscall(Syscall { kind, args: args.to_vec(), ret: Some(ret), duration_ns: 10 })
}

fn recording() -> (Header, Vec<Event>) {
    let map = |start, end, perms, ino, path: &[u8]| MapEntry { start, end, perms, offset: 0, maj: 0, min: 0, ino, path: path.to_vec() };
    let bodies = vec![
        EventBody::Mounts(vec![MountEntry { maj: 0, min: 27, fstype: b"tmpfs".to_vec(), mount_point: b"/dev/shm".to_vec(), options: b"rw,huge=always".to_vec() }]),
        EventBody::ExecMaps(vec![map(LD, BASE, 1, 5, b"/lib/ld.so"), map(0x7fff_fffd_e000, 0x7fff_ffff_f000, 3, 0, b"[stack]")]),
        sc(SyscallKind::MemfdCreate, &[0x1000, 0], 3),
        sc(SyscallKind::Dup, &[3], 4),
        sc(SyscallKind::Close, &[3], 0),
        sc(SyscallKind::Ftruncate, &[4, 4 * MIB], 0),
        sc(SyscallKind::Mmap, &[0, 4 * MIB, 3, 1, 4, 0], X as i64),
        EventBody::Fault { addr: X, error_code: 6 },
        EventBody::Fault { addr: X + 2 * MIB, error_code: 6 },
        EventBody::Path(PathInfo { call: SyscallKind::Openat.code(), path: b"/dev/shm/x".to_vec(), exists: false, maj: 0, min: 27, ino: 0, size: 0, fs_magic: TMPFS_MAGIC }),
        sc(SyscallKind::Openat, &[(-100i64) as u64, 0x2000, 0o102, 0o600], 5),
        sc(SyscallKind::Ftruncate, &[5, 2 * MIB], 0),
        sc(SyscallKind::Mmap, &[0, 2 * MIB, 3, 1, 5, 0], Y as i64),
        EventBody::Fault { addr: Y + 4096, error_code: 6 },
        sc(SyscallKind::ExitGroup, &[0], 0),
    ];
    let events: Vec<Event> = bodies.into_iter().enumerate().map(|(i, body)| Event { time_ns: i as u64 * 100, tid: 100, pid: 100, body }).collect();
    let header = Header {
        root_pid: 100,
        page_size: 4096,
        flags: flags::THP_DISABLED | flags::NO_RANDOMIZE | flags::EXEC_SNAPSHOT | flags::PATHS,
        // The recording machine's knobs: the boot defaults (shmem_enabled=never).
        thp_settings: b"shmem_enabled:always within_size advise [never] deny force\n".to_vec(),
        ..Header::default()
    };
    (header, events)
}

fn replay(assignments: &[&str]) -> uapi::RunResult {
    let mut s = ThpSettings::default();
    for a in assignments {
        s.apply_assignment(a).unwrap();
    }
    let (h, ev) = recording();
    sim::run_recording("hand-made", &h, &ev, &s, &sim::MachineConfig::default(), true).unwrap()
}

fn replay_stat(r: &uapi::RunResult, name: &str) -> u64 {
    r.model.as_ref().unwrap()["replay"][name].as_u64().unwrap()
}

/// Boot defaults: the memfd (on shm_mnt, huge=never) stays where it was recorded and gets two
/// 4 KiB pages; the /dev/shm file (mount huge=always) was aligned by the kernel already
/// (inflated search below X: 0x7ffff7bca000 - (4 MiB - 4 KiB) = 0x7ffff77cb000, rounded up
/// to the next 2 MiB: 0x7ffff7800000 = Y) and its write fault gets a PMD THP.
#[test]
fn under_the_recording_knobs_nothing_moves() {
    let r = replay(&[]);
    assert_eq!(replay_stat(&r, "placements_checked"), 2);
    assert_eq!(replay_stat(&r, "placements_matched"), 2);
    assert_eq!(replay_stat(&r, "relocated"), 0);
    assert_eq!(replay_stat(&r, "shmem_files"), 2, "the memfd through its dup, and /dev/shm/x");
    assert_eq!(r.process.minflt, 3);
    // The memfd's two pages, and the top stack page execve filled (taken as present).
    assert_eq!(r.folios.get("4kB"), Some(&3));
    assert_eq!(r.folios.get("2048kB"), Some(&1));
    assert_eq!(r.vmstat.get("thp_file_alloc"), Some(&1));
    assert_eq!(r.vmstat.get("thp_file_mapped"), Some(&1));
}

/// shmem_enabled=always makes shm_mnt huge=always, so shmem_get_unmapped_area aligns the memfd:
/// inflated search 0x7ffff7fca000 - (6 MiB - 4 KiB) = 0x7ffff79cb000, up to 2 MiB:
/// 0x7ffff7a00000. The recorded faults at X and X + 2 MiB land on file pages 0 and 512 at
/// aligned addresses: two PMD THPs. The /dev/shm file is then placed by the model below the
/// moved memfd, at 0x7ffff7800000 again (aligned already): a third.
#[test]
fn under_shmem_enabled_always_the_memfd_moves_and_gets_pmds() {
    let r = replay(&["shmem_enabled=always"]);
    // Once a mapping moved, the next ones are placed by the model without a check.
    assert_eq!(replay_stat(&r, "placements_checked"), 1);
    assert_eq!(replay_stat(&r, "placements_matched"), 1);
    assert_eq!(replay_stat(&r, "relocated"), 1);
    assert_eq!(r.process.minflt, 3);
    assert_eq!(r.folios.get("4kB"), Some(&1), "the stack's top page only");
    assert_eq!(r.folios.get("2048kB"), Some(&3));
    assert_eq!(r.census.sizes["2048kB"].pmd_mapped, 3);
    assert_eq!(r.vmstat.get("thp_file_alloc"), Some(&3));
    assert_eq!(r.mthp["hugepages-2048kB"]["shmem_alloc"], 3);
}
