//! khugepaged in the replay of a recording by default (issue #27 item 4): the clock follows
//! the recording's timestamps unless `ReplayOptions::recorded_time` is turned off. The
//! recording is made by hand as tests/it/progs/khugepaged_wait.c runs: a 10 MiB anonymous
//! mmap, MADV_NOHUGEPAGE on the four 2 MiB-aligned ranges inside it, 256 pages written in each
//! (half of each range), MADV_HUGEPAGE, then 1.5 s without a record (its nanosleep) and
//! exit_group. Expected values by hand from mm/khugepaged.c (hpage_collapse_scan_pmd: a range
//! with 256 none PTEs collapses when 256 <= max_ptes_none; khugepaged_do_scan: a wake-up stops
//! at pages_to_scan of progress, a collapse counting HPAGE_PMD_NR = 512).

use trace::{flags, Event, EventBody, Header, MapEntry, Syscall, SyscallKind};
use thp_abi::ThpSettings;
use uapi::RunResult;

use crate::{MachineConfig, ReplayOptions};

const MIB: u64 = 1 << 20;
/// The program's ld.so, ending at its mmap_base.
const LD: u64 = 0x7fff_f7fc_a000;
const BASE: u64 = 0x7fff_f7ff_f000;
/// The 10 MiB mmap without a hint: top-down from mmap_base, right below ld.so.
const RAW: u64 = LD - 10 * MIB;
/// Its first 2 MiB boundary.
const P: u64 = (RAW + 2 * MIB - 1) & !(2 * MIB - 1);

fn sc(kind: SyscallKind, args: &[u64], ret: i64) -> EventBody {
    EventBody::Syscall(Syscall { kind, args: args.to_vec(), ret: Some(ret), duration_ns: 100 })
}

fn recording() -> (Header, Vec<Event>) {
    let mut t = 100;
    let mut ev = |body: EventBody| {
        t += 1000;
        Event { time_ns: t, tid: 100, pid: 100, body }
    };
    let map = |start, end, perms: u32, ino, path: &[u8]| MapEntry { start, end, perms, offset: 0, maj: 8, min: 1, ino, path: path.to_vec() };
    let mut v = vec![
        ev(EventBody::ExecMaps(vec![map(LD, BASE, 5, 5, b"/lib/ld.so"), map(0x7fff_fffd_e000, 0x7fff_ffff_f000, 3, 0, b"[stack]")])),
        ev(sc(SyscallKind::Mmap, &[0, 10 * MIB, 3, 0x22, u64::MAX, 0], RAW as i64)),
        ev(sc(SyscallKind::Madvise, &[P, 8 * MIB, 15], 0)),
    ];
    for r in 0..4 {
        for i in 0..256 {
            v.push(ev(EventBody::Fault { addr: P + r * 2 * MIB + i * 4096, error_code: 6 }));
        }
    }
    v.push(ev(sc(SyscallKind::Madvise, &[P, 8 * MIB, 14], 0)));
    let mut exit = ev(sc(SyscallKind::ExitGroup, &[0], 0));
    exit.time_ns += 1_500_000_000;
    v.push(exit);
    let header = Header {
        root_pid: 100,
        page_size: 4096,
        exec_path: b"/usr/bin/khugepaged_wait".to_vec(),
        flags: flags::THP_DISABLED | flags::NO_RANDOMIZE | flags::EXEC_SNAPSHOT | flags::EXEC_SNAPSHOT_EVERY,
        thp_settings: b"enabled:always [madvise] never\n".to_vec(),
        ..Header::default()
    };
    (header, v)
}

fn replay(knobs: &[&str], opts: &ReplayOptions) -> RunResult {
    let mut s = ThpSettings::default();
    for k in ["enabled=madvise", "khugepaged/scan_sleep_millisecs=100"].iter().chain(knobs) {
        s.apply_assignment(k).unwrap();
    }
    let (h, ev) = recording();
    crate::run_recording_opts("hand-made", &h, &ev, &s, &MachineConfig::default(), &ReplayOptions { check_invariants: true, ..opts.clone() }).unwrap()
}

fn collapsed(r: &RunResult) -> Option<u64> {
    r.model.as_ref()?.replay.as_ref()?.khugepaged.map(|k| k.pages_collapsed)
}

/// By default: max_ptes_none 511 and 256 collapse all four ranges (256 none PTEs each), 255
/// none (256 > 255); pages_to_scan 1024 collapses two a wake-up, all four by the second
/// wake-up 100 ms later, well inside the 1.5 s. Without the recorded clock the daemon never
/// wakes (no `khugepaged` section, no collapse), as `sim --no-recorded-time`.
#[test]
fn khugepaged_collapses_in_a_recorded_sleeping_program_by_default() {
    let default = ReplayOptions::default();
    assert!(default.recorded_time);
    for (knobs, want) in [
        (&["khugepaged/max_ptes_none=511"][..], 4),
        (&["khugepaged/max_ptes_none=256"][..], 4),
        (&["khugepaged/max_ptes_none=255"][..], 0),
        (&["khugepaged/pages_to_scan=1024"][..], 4),
    ] {
        let r = replay(knobs, &default);
        assert_eq!(collapsed(&r), Some(want), "{knobs:?}");
        let kh = r.model.as_ref().unwrap().replay.as_ref().unwrap().khugepaged.unwrap();
        // Woken as the mm joined the list, then every 100 ms (and a jiffy) of the 1.5 s.
        assert!(kh.wakeups >= 14 && kh.wakeups <= 16, "{knobs:?}: {} wake-ups", kh.wakeups);
    }
    let off = replay(&["khugepaged/max_ptes_none=511"], &ReplayOptions { recorded_time: false, ..Default::default() });
    assert_eq!(collapsed(&off), None);
    assert_eq!(off.vmstat.get("thp_collapse_alloc").copied().unwrap_or(0), 0);
}
