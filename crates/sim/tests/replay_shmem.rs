//! The replay's shmem side on a hand-made recording: fd tables (dup, close), memfd and /dev/shm
//! files (path and mounts records), relocation of a mapping whose shmem placement depends on the
//! knobs. Every expected value is derived in the comments from mm/shmem.c
//! (`shmem_get_unmapped_area`) and the addresses below.

use trace::{flags, Event, EventBody, Header, MapEntry, MountEntry, PathInfo, Syscall, SyscallKind, TMPFS_MAGIC};
use thp_abi::ThpSettings;

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
    recording_with_knobs(b"shmem_enabled:always within_size advise [never] deny force\n")
}

fn recording_with_knobs(thp_settings: &[u8]) -> (Header, Vec<Event>) {
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
        // The recording machine's knobs (the boot defaults: shmem_enabled=never).
        thp_settings: thp_settings.to_vec(),
        ..Header::default()
    };
    (header, events)
}

fn replay(assignments: &[&str]) -> uapi::RunResult {
    replay_of(recording(), assignments)
}

fn replay_of((h, ev): (Header, Vec<Event>), assignments: &[&str]) -> uapi::RunResult {
    let mut s = ThpSettings::default();
    for a in assignments {
        s.apply_assignment(a).unwrap();
    }
    sim::run_recording("hand-made", &h, &ev, &s, &sim::MachineConfig::default(), true).unwrap()
}

fn replay_report(r: &uapi::RunResult) -> &uapi::ReplayReport {
    r.model.as_ref().and_then(|m| m.replay.as_ref()).expect("a replay has model.replay")
}

/// Boot defaults: the memfd (on shm_mnt, huge=never) stays where it was recorded and gets two
/// 4 KiB pages; the /dev/shm file (mount huge=always) was aligned by the kernel already
/// (inflated search below X: 0x7ffff7bca000 - (4 MiB - 4 KiB) = 0x7ffff77cb000, rounded up
/// to the next 2 MiB: 0x7ffff7800000 = Y) and its write fault gets a PMD THP.
#[test]
fn under_the_recording_knobs_nothing_moves() {
    let r = replay(&[]);
    assert_eq!(replay_report(&r).placements_checked, 2);
    assert_eq!(replay_report(&r).placements_matched, 2);
    assert_eq!(replay_report(&r).relocated, 0);
    assert_eq!(replay_report(&r).shmem_files, 2, "the memfd through its dup, and /dev/shm/x");
    assert_eq!(r.process.minflt, 3);
    // The memfd's two pages, and the top stack page execve filled (taken as present).
    assert_eq!(r.folios.get(&thp_abi::FolioSize::from("4kB")), Some(&3));
    assert_eq!(r.folios.get(&thp_abi::FolioSize::from("2048kB")), Some(&1));
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
    assert_eq!(replay_report(&r).placements_checked, 1);
    assert_eq!(replay_report(&r).placements_matched, 1);
    assert_eq!(replay_report(&r).relocated, 1);
    assert_eq!(r.process.minflt, 3);
    assert_eq!(r.folios.get(&thp_abi::FolioSize::from("4kB")), Some(&1), "the stack's top page only");
    assert_eq!(r.folios.get(&thp_abi::FolioSize::from("2048kB")), Some(&3));
    assert_eq!(r.census.sizes[&thp_abi::FolioSize::from("2048kB")].pmd_mapped, 3);
    assert_eq!(r.vmstat.get("thp_file_alloc"), Some(&3));
    assert_eq!(r.mthp[&thp_abi::SizeDir::from("hugepages-2048kB")]["shmem_alloc"], 3);
}

/// The dump a fresh machine of this kind writes into a recording (`grep -r .` of the THP tree,
/// `./` prefixes, read-only files, this build's `anon_beside_full`, and a knob no build has
/// yet): the replay must still check placements under the recording's knobs. Before, the
/// unknown knob made the whole dump unreadable, the replay checked placements under its own
/// knobs, matched none of the moved ones and relocated nothing (issue #8, the CI failure).
const FRESH_MACHINE_DUMP: &[u8] = b"./hugepages-64kB/enabled:always inherit madvise [never]\n\
./hugepages-64kB/shmem_enabled:always inherit within_size advise [never]\n\
./hugepages-2048kB/shmem_enabled:always inherit within_size advise [never]\n\
./enabled:always [madvise] never\n./defrag:always defer defer+madvise [madvise] never\n\
./shmem_enabled:always within_size advise [never] deny force\n./use_zero_page:1\n\
./hpage_pmd_size:2097152\n./anon_beside_full:0\n./a_knob_of_a_future_build:3\n\
./khugepaged/pages_collapsed:12\n./khugepaged/max_ptes_none:511\n";

#[test]
fn a_dump_with_knobs_the_model_does_not_know_still_gives_the_recording_knobs() {
    let r = replay_of(recording_with_knobs(FRESH_MACHINE_DUMP), &["shmem_enabled=always"]);
    // As under_shmem_enabled_always_the_memfd_moves_and_gets_pmds.
    assert_eq!(replay_report(&r).placements_checked, 1);
    assert_eq!(replay_report(&r).placements_matched, 1);
    assert_eq!(replay_report(&r).relocated, 1);
    assert_eq!(r.folios.get(&thp_abi::FolioSize::from("2048kB")), Some(&3));
    let m = replay_report(&r);
    assert_eq!(m.recorded_settings_unknown["a_knob_of_a_future_build"], "3");
    let warnings = &m.warnings;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("a_knob_of_a_future_build=3"), "{warnings:?}");
}

/// A dump the replay cannot read (a bad value for a known knob) is said, and so is every
/// placement the model then cannot reproduce: which mapping, where the kernel put it, where the
/// model would.
#[test]
fn an_unreadable_dump_and_the_placements_it_costs_are_said() {
    // The recording says shmem_enabled=always, which the trace's own placements contradict.
    let r = replay_of(recording_with_knobs(b"./shmem_enabled:[always] within_size\n./enabled:bogus\n"), &["shmem_enabled=always"]);
    let m = replay_report(&r);
    let warnings = &m.warnings;
    assert!(warnings[0].starts_with("the recording's THP knobs:2: invalid value 'bogus' for 'enabled'"), "{warnings:?}");
    // Under the replay's shmem_enabled=always the model puts the memfd at 0x7ffff7a00000 (see
    // above), not at X where the kernel put it.
    assert_eq!(replay_report(&r).placements_checked, 2);
    assert_eq!(replay_report(&r).placements_matched, 1);
    let miss = &m.placement_misses[0];
    assert_eq!(miss.backing, "shmem");
    assert_eq!(miss.recorded, format!("{X:#x}"));
    assert_eq!(miss.model, "0x7ffff7a00000");
    assert!(warnings.iter().any(|w| w.contains(&format!("the kernel put it at {X:#x}, the model would at 0x7ffff7a00000"))), "{warnings:?}");
}
