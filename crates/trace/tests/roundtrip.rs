//! Round trips through the writer and reader, and the reader on truncated, corrupted and random
//! input: always an error with an offset, never a panic.

use proptest::prelude::*;
use trace::*;

fn sample_events() -> Vec<Event> {
    let sc = |kind: SyscallKind, args: Vec<u64>, ret: Option<i64>| {
        EventBody::Syscall(Syscall {
            kind,
            args,
            ret,
            duration_ns: if ret.is_some() { 1234 } else { 0 },
        })
    };
    let mut v = vec![
        Event {
            time_ns: 0,
            tid: 100,
            pid: 100,
            body: EventBody::Comm {
                comm: b"prog".to_vec(),
                exec: true,
            },
        },
        Event {
            time_ns: 5,
            tid: 100,
            pid: 100,
            body: EventBody::ExecStack {
                start_stack: 0x7fff_ffff_c9a8,
            },
        },
        Event {
            time_ns: 5,
            tid: 100,
            pid: 100,
            body: EventBody::Iovecs {
                call: SyscallKind::Vmsplice.code(),
                iovs: vec![(0x7fff_f7a0_0000, 0x1_0000), (0x7fff_f7c0_0000, 17)],
            },
        },
        Event {
            time_ns: 5,
            tid: 100,
            pid: 100,
            body: EventBody::Uffd(trace::UffdIoctl { op: linux_abi::userfaultfd::COPY, fd: 3, start: 0x7fff_f000_0000, len: 0x1_0000, mode: 0, src: 0x5555_5555_8000 }),
        },
        Event {
            time_ns: 5,
            tid: 100,
            pid: 100,
            body: EventBody::ExecMaps(vec![MapEntry {
                start: 0x400000,
                end: 0x401000,
                perms: perm::READ | perm::EXEC,
                offset: 0,
                maj: 8,
                min: 1,
                ino: 1234,
                path: b"/tmp/prog".to_vec(),
            }]),
        },
        Event {
            time_ns: 10,
            tid: 100,
            pid: 100,
            body: sc(
                SyscallKind::Mmap,
                vec![0, 1 << 20, 3, 0x22, u64::MAX, 0],
                Some(0x7fff_f7a0_0000),
            ),
        },
        Event {
            time_ns: 11,
            tid: 100,
            pid: 100,
            body: EventBody::Map(MapInfo {
                addr: 0x7fff_f7a0_0000,
                len: 1 << 20,
                pgoff: 0,
                maj: 0,
                min: 0,
                ino: 0,
                ino_generation: 0,
                prot: 3,
                flags: 0x22,
                path: b"//anon".to_vec(),
            }),
        },
        Event {
            time_ns: 20,
            tid: 100,
            pid: 100,
            body: sc(SyscallKind::Brk, vec![0], Some(0x555555559000)),
        },
        Event {
            time_ns: 21,
            tid: 100,
            pid: 100,
            body: sc(
                SyscallKind::Madvise,
                vec![0x7fff_f7a0_0000, 4096, 14],
                Some(-22),
            ),
        },
        Event {
            time_ns: 22,
            tid: 100,
            pid: 100,
            body: EventBody::Answered { call: SyscallKind::Madvise.code(), ret: -12 },
        },
        Event {
            time_ns: 22,
            tid: 100,
            pid: 100,
            body: sc(SyscallKind::Madvise, vec![0x7fff_f7a0_0000, 4 << 20, 25], Some(-12)),
        },
        Event {
            time_ns: 30,
            tid: 100,
            pid: 100,
            body: EventBody::TaskNew { tid: 101, pid: 101 },
        },
        Event {
            time_ns: 31,
            tid: 101,
            pid: 101,
            body: EventBody::Fault {
                addr: 0x7fff_ffff_e000,
                error_code: 7,
            },
        },
        Event {
            time_ns: 40,
            tid: 100,
            pid: 100,
            body: EventBody::Lost { count: 3 },
        },
        Event {
            time_ns: 50,
            tid: 101,
            pid: 101,
            body: sc(SyscallKind::ExitGroup, vec![0], None),
        },
        Event {
            time_ns: 50,
            tid: 101,
            pid: 101,
            body: EventBody::TaskExit,
        },
    ];
    v.push(Event {
        time_ns: 55,
        tid: 100,
        pid: 100,
        body: EventBody::Mounts(vec![MountEntry {
            maj: 0,
            min: 26,
            fstype: b"tmpfs".to_vec(),
            mount_point: b"/dev/shm".to_vec(),
            options: b"rw,size=8192k,huge=within_size".to_vec(),
        }]),
    });
    v.push(Event {
        time_ns: 56,
        tid: 100,
        pid: 100,
        body: EventBody::Path(PathInfo {
            call: SyscallKind::Openat.code(),
            path: b"/dev/shm/x".to_vec(),
            exists: false,
            maj: 0,
            min: 26,
            ino: 0,
            size: 0,
            fs_magic: TMPFS_MAGIC,
        }),
    });
    v.push(Event {
        time_ns: 57,
        tid: 100,
        pid: 100,
        body: sc(SyscallKind::Openat, vec![(-100i64) as u64, 0x1000, 0o1102, 0o600], Some(3)),
    });
    v.push(Event {
        time_ns: 58,
        tid: 100,
        pid: 100,
        body: sc(SyscallKind::Pwritev2, vec![3, 0x2000, 2, u64::MAX, 0, 0x10], Some(8192)),
    });
    for i in 0..300u64 {
        v.push(Event {
            time_ns: 60 + i * 700,
            tid: 100 + (i % 3 == 0) as u32 * 2,
            pid: 100,
            body: EventBody::Fault {
                addr: 0x7fff_f7a0_0000 + i * 4096,
                error_code: 6,
            },
        });
    }
    v
}

fn header_for(events: &[Event], lost: u64) -> Header {
    let mut counts: Vec<(u8, u64)> = Vec::new();
    for e in events {
        let k = e.body.kind_code();
        match counts.iter_mut().find(|(c, _)| *c == k) {
            Some((_, n)) => *n += 1,
            None => counts.push((k, 1)),
        }
    }
    Header {
        program: b"prog".to_vec(),
        exec_path: b"/tmp/prog".to_vec(),
        argv: vec![b"prog".to_vec(), b"--flag".to_vec(), vec![0xff, 0xfe]],
        cwd: b"/tmp".to_vec(),
        kernel_release: "6.18.44".into(),
        machine: "x86_64".into(),
        start_unix_ns: 1_700_000_000_000_000_000,
        start_monotonic_ns: 123_456_789,
        root_pid: 100,
        page_size: 4096,
        flags: flags::THP_DISABLED | flags::NO_RANDOMIZE,
        counts,
        lost_events: lost,
        exit_status: 3,
        duration_ns: 1_000_000,
        thp_settings: b"enabled:always [madvise] never\nshmem_enabled:always within_size advise [never] deny force\n".to_vec(),
        untraced_wall_ns: 412_000_000,
    }
}

fn encode(h: &Header, events: &[Event]) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), h).unwrap();
    for e in events {
        w.write(e).unwrap();
    }
    w.finish().unwrap()
}

/// The same in the 2.6 layout (no blocks), what thplab wrote before 3.0.
fn encode_2_6(h: &Header, events: &[Event]) -> Vec<u8> {
    let mut w = TraceWriter::new_2_6(Vec::new(), h).unwrap();
    for e in events {
        w.write(e).unwrap();
    }
    w.finish().unwrap()
}

#[test]
fn round_trip_keeps_every_field() {
    let ev = sample_events();
    let h = header_for(&ev, 3);
    let bytes = encode(&h, &ev);
    let (h2, ev2, t) = read_all(&bytes[..]).unwrap();
    assert_eq!(h2, h);
    assert_eq!(ev2, ev);
    assert_eq!(t.records, ev.len() as u64);
    assert_eq!(t.lost_events, 3);
    // Sequential faults cost a few bytes each.
    let faults_only: Vec<Event> = (0..1000u64)
        .map(|i| Event {
            time_ns: i * 1500,
            tid: 4321,
            pid: 4321,
            body: EventBody::Fault {
                addr: 0x7fff_f7a0_0000 + i * 4096,
                error_code: 6,
            },
        })
        .collect();
    let small = encode(&header_for(&faults_only, 0), &faults_only);
    let per = small.len() as f64 / faults_only.len() as f64;
    assert!(per < 6.5, "{per} bytes per sequential fault");
}

#[test]
fn writer_refuses_what_the_reader_would_refuse() {
    let ev = sample_events();
    let h = header_for(&ev, 0);
    let mut w = TraceWriter::new(Vec::new(), &h).unwrap();
    w.write(&ev[5]).unwrap();
    assert!(w.write(&ev[0]).is_err(), "time going backwards");
    let mut w = TraceWriter::new(Vec::new(), &h).unwrap();
    let bad = Event {
        time_ns: 0,
        tid: 1,
        pid: 1,
        body: EventBody::Syscall(Syscall {
            kind: SyscallKind::Munmap,
            args: vec![1],
            ret: Some(0),
            duration_ns: 0,
        }),
    };
    assert!(w.write(&bad).is_err(), "wrong argument count");
    let w = TraceWriter::new(Vec::new(), &h).unwrap();
    let e = w.finish().unwrap_err().to_string();
    assert!(e.contains("the header says"), "{e}");
}

#[test]
fn every_truncation_is_an_error_that_names_the_offset() {
    let ev = sample_events();
    let bytes = encode(&header_for(&ev, 0), &ev);
    for cut in 0..bytes.len() {
        let e = read_all(&bytes[..cut]).expect_err("a truncated trace must not read");
        assert!(e.offset() <= cut as u64, "cut {cut}: {e}");
        let msg = e.to_string();
        assert!(msg.starts_with("byte "), "{msg}");
    }
    let mut more = bytes.clone();
    more.push(0);
    let e = read_all(&more[..]).unwrap_err().to_string();
    assert!(e.contains("after the trailer"), "{e}");
}

#[test]
fn every_single_byte_flip_is_detected() {
    let ev = sample_events();
    let bytes = encode(&header_for(&ev, 0), &ev);
    for i in 0..bytes.len() {
        for x in [0x01u8, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[i] ^= x;
            assert!(
                read_all(&b[..]).is_err(),
                "flipping {x:#x} at byte {i} went unnoticed"
            );
        }
    }
}

/// A version 1.0 file (no THP settings in the header, no path or mounts records) still reads:
/// the same bytes with the version patched and the header's last field removed.
#[test]
fn version_1_files_still_read() {
    let ev: Vec<Event> = sample_events()
        .into_iter()
        .filter(|e| !matches!(e.body, EventBody::Path(_) | EventBody::Mounts(_) | EventBody::Answered { .. } | EventBody::ExecStack { .. } | EventBody::Iovecs { .. } | EventBody::Uffd(_)))
        .collect();
    let mut h = header_for(&ev, 3);
    h.thp_settings.clear();
    h.untraced_wall_ns = 0;
    let v2 = encode_2_6(&h, &ev);
    // The header ends with the settings' length, 0, and the untraced wall time, 0: drop both.
    let mut v1 = without_last_header_bytes(&v2, 2);
    v1[8] = 1;
    fix_crc(&mut v1);
    let (h1, ev1, _) = read_all(&v1[..]).unwrap();
    assert_eq!(h1, h);
    assert_eq!(ev1, ev);
    // A path record in a version 1 file is an unknown kind.
    let e = read_all(&v2_with_version(&encode_2_6(&header_for(&sample_events(), 3), &sample_events()), 1)[..]).unwrap_err().to_string();
    assert!(e.contains("unknown record kind") || e.contains("unexpected bytes"), "{e}");
}

/// The `answered` record (2.1) round-trips with the system call record it precedes, and its text
/// says the recorder answered; a 2.0 file (no such record) still reads; the writer refuses an
/// answered record for a kind that is not a system call.
#[test]
fn answered_records_round_trip_and_2_0_files_still_read() {
    let ev = vec![
        Event { time_ns: 5, tid: 7, pid: 7, body: EventBody::Answered { call: SyscallKind::Madvise.code(), ret: 0 } },
        Event {
            time_ns: 5,
            tid: 7,
            pid: 7,
            body: EventBody::Syscall(Syscall { kind: SyscallKind::Madvise, args: vec![0x7fff_f740_0000, 4 << 20, 25], ret: Some(0), duration_ns: 0 }),
        },
        Event { time_ns: 9, tid: 7, pid: 7, body: EventBody::Answered { call: SyscallKind::Prctl.code(), ret: 0 } },
        Event {
            time_ns: 9,
            tid: 7,
            pid: 7,
            body: EventBody::Syscall(Syscall { kind: SyscallKind::Prctl, args: vec![42, 0, 0, 0, 0], ret: Some(0), duration_ns: 0 }),
        },
    ];
    let mut h = header_for(&ev, 0);
    h.flags |= flags::ANSWERS;
    let bytes = encode(&h, &ev);
    // Written as 3.0, which has every record kind of 2.6 (answered since 2.1).
    assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 3);
    assert_eq!(u16::from_le_bytes([bytes[10], bytes[11]]), 0);
    assert_eq!((VERSION_MAJOR, VERSION_MINOR), (3, 0));
    let (h2, ev2, _) = read_all(&bytes[..]).unwrap();
    assert_eq!(h2, h);
    assert_eq!(ev2, ev);
    let line = text::event_line(&ev2[0]);
    assert!(line.contains("answered by the recorder") && line.contains("madvise returns 0"), "{line}");
    // The same file labelled 2.0 (the layout of 2.0 is 2.1's without answered records).
    let plain: Vec<Event> = ev.iter().filter(|e| !matches!(e.body, EventBody::Answered { .. })).cloned().collect();
    let mut h20 = header_for(&plain, 0);
    h20.untraced_wall_ns = 0;
    let mut b20 = without_last_header_bytes(&encode_2_6(&h20, &plain), 1);
    b20[10] = 0;
    b20[11] = 0;
    fix_crc(&mut b20);
    let (_, ev20, _) = read_all(&b20[..]).unwrap();
    assert_eq!(ev20, plain);
    let mut w = TraceWriter::new(Vec::new(), &header_for(&[], 0)).unwrap();
    let bad = Event { time_ns: 0, tid: 1, pid: 1, body: EventBody::Answered { call: kind::FAULT, ret: 0 } };
    assert!(w.write(&bad).is_err());
}

/// `b` with the last `n` bytes of its header removed (its length, a varint at offset 12,
/// shrunk); the checksum is left to [`fix_crc`].
fn without_last_header_bytes(b: &[u8], n: usize) -> Vec<u8> {
    let (mut hlen, mut at, mut shift) = (0usize, 12, 0);
    loop {
        hlen |= ((b[at] & 0x7f) as usize) << shift;
        shift += 7;
        at += 1;
        if b[at - 1] & 0x80 == 0 {
            break;
        }
    }
    let mut out = b[..12].to_vec();
    let mut v = hlen - n;
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
    out.extend_from_slice(&b[at..at + hlen - n]);
    out.extend_from_slice(&b[at + hlen..]);
    out
}

/// The checksum covers the bytes before it: recompute it after a patch.
fn fix_crc(b: &mut [u8]) {
    let n = b.len();
    let crc = crc32fast_like(&b[..n - 4]);
    b[n - 4..].copy_from_slice(&crc.to_le_bytes());
}

/// A 2.2 file (its header ends with the THP settings) reads with no untraced wall time; a 2.3
/// file keeps it.
#[test]
fn untraced_wall_time_round_trips_and_2_2_files_read_without_it() {
    let ev = sample_events();
    let h = header_for(&ev, 0);
    assert_eq!(read_all(&encode(&h, &ev)[..]).unwrap().0.untraced_wall_ns, 412_000_000);
    let mut h22 = h.clone();
    h22.untraced_wall_ns = 0;
    let mut b22 = without_last_header_bytes(&encode_2_6(&h22, &ev), 1);
    b22[10] = 2;
    fix_crc(&mut b22);
    let (h2, ev2, _) = read_all(&b22[..]).unwrap();
    assert_eq!((h2.untraced_wall_ns, ev2), (0, ev));
}

fn v2_with_version(b: &[u8], major: u8) -> Vec<u8> {
    let mut v = b.to_vec();
    v[8] = major;
    v
}

/// CRC-32 (IEEE), bitwise: the trailer's checksum.
fn crc32fast_like(b: &[u8]) -> u32 {
    let mut c = !0u32;
    for &x in b {
        c ^= x as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0xEDB8_8320 } else { c >> 1 };
        }
    }
    !c
}

#[test]
fn error_messages_say_what_was_expected() {
    let e = read_all(&b"NOTATRACE......."[..]).unwrap_err().to_string();
    assert!(e.contains("not a thplab trace"), "{e}");
    // 3.0 added blocks (this thplab writes it); a 4.x file is a newer thplab's.
    let e = read_all(&b"THPTRACE\x04\x00\x00\x00"[..])
        .unwrap_err()
        .to_string();
    assert!(e.contains("version 4.0; this thplab reads versions 1.x, 2.x and 3.x"), "{e}");
    let e = read_all(&b"THPTRACE\x01\x00"[..]).unwrap_err().to_string();
    assert_eq!(
        e,
        "byte 10: the file ends too early: expected the format version"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = read_all(&bytes[..]);
        let mut with_magic = b"THPTRACE\x01\x00\x00\x00".to_vec();
        with_magic.extend_from_slice(&bytes);
        let _ = read_all(&with_magic[..]);
        let mut v3 = b"THPTRACE\x03\x00\x00\x00".to_vec();
        v3.extend_from_slice(&bytes);
        let _ = read_salvage(&v3[..]);
    }

    #[test]
    fn random_edits_of_a_real_trace_never_panic(edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8), cut in any::<prop::sample::Index>()) {
        let ev = sample_events();
        let mut b = encode(&header_for(&ev, 0), &ev);
        for (i, v) in edits {
            let i = i.index(b.len());
            b[i] = v;
        }
        let n = cut.index(b.len() + 1);
        let _ = read_all(&b[..n]);
    }

    #[test]
    fn random_fault_streams_round_trip(faults in proptest::collection::vec((0u32..4, any::<u64>(), 0u64..32, 0u64..10_000), 0..200)) {
        let mut t = 0;
        let ev: Vec<Event> = faults.into_iter().map(|(tid, addr, ec, dt)| {
            t += dt;
            Event { time_ns: t, tid: 10 + tid, pid: 10, body: EventBody::Fault { addr, error_code: ec } }
        }).collect();
        let h = header_for(&ev, 0);
        let (_, back, _) = read_all(&encode(&h, &ev)[..]).unwrap();
        prop_assert_eq!(back, ev);
    }
}

/// The `exec_stack` record (2.4) round-trips (in `sample_events`, before its exec_maps) and its
/// text gives the address; its kind is named in the header's counts.
#[test]
fn exec_stack_records_round_trip() {
    let ev = sample_events();
    let bytes = encode(&header_for(&ev, 0), &ev);
    let (h, back, _) = read_all(&bytes[..]).unwrap();
    assert_eq!(back, ev);
    assert!(h.counts.contains(&(kind::EXEC_STACK, 1)), "{:?}", h.counts);
    let e = back
        .iter()
        .find(|e| matches!(e.body, EventBody::ExecStack { .. }))
        .unwrap();
    let line = text::event_line(e);
    assert!(line.contains("starts at 0x7fffffffc9a8"), "{line}");
    assert_eq!(trace::kind_name(kind::EXEC_STACK), Some("exec_stack"));
}

/// The `iovecs` record (2.5) round-trips (in `sample_events`), its text lists the ranges, and
/// its kind is named in the header's counts.
#[test]
fn iovecs_records_round_trip() {
    let ev = sample_events();
    let bytes = encode(&header_for(&ev, 0), &ev);
    let (h, back, _) = read_all(&bytes[..]).unwrap();
    assert_eq!(back, ev);
    assert!(h.counts.contains(&(kind::IOVECS, 1)), "{:?}", h.counts);
    let e = back.iter().find(|e| matches!(e.body, EventBody::Iovecs { .. })).unwrap();
    let line = text::event_line(e);
    assert!(line.contains("iovecs of the next vmsplice: 0x7ffff7a00000+0x10000 0x7ffff7c00000+0x11"), "{line}");
    assert_eq!(trace::kind_name(kind::IOVECS), Some("iovecs"));
}

/// The `uffd` record (2.6) round-trips (in `sample_events`), its text names the request, and
/// an operation that is no UFFDIO request is refused on both sides.
#[test]
fn uffd_records_round_trip() {
    let ev = sample_events();
    let bytes = encode(&header_for(&ev, 0), &ev);
    let (h, back, _) = read_all(&bytes[..]).unwrap();
    assert_eq!(back, ev);
    assert!(h.counts.contains(&(kind::UFFD, 1)), "{:?}", h.counts);
    let e = back.iter().find(|e| matches!(e.body, EventBody::Uffd(_))).unwrap();
    let line = text::event_line(e);
    assert!(line.contains("UFFDIO_COPY on fd 3: dst 0x7ffff0000000 len 0x10000 src 0x555555558000"), "{line}");
    assert_eq!(trace::kind_name(kind::UFFD), Some("uffd"));
    let mut bad = sample_events();
    for e in &mut bad {
        if let EventBody::Uffd(u) = &mut e.body {
            u.op = 0x20;
        }
    }
    let mut w = TraceWriter::new(Vec::new(), &header_for(&bad, 0)).unwrap();
    let err = bad.iter().try_for_each(|e| w.write(e)).unwrap_err();
    assert!(err.to_string().contains("not a UFFDIO request"), "{err}");
}

/// `sample_events` then 6000 faults of three threads and a munmap now and then: about 20
/// blocks of 4 KiB.
fn many_events() -> Vec<Event> {
    let mut ev = sample_events();
    let mut t = ev.last().unwrap().time_ns;
    for i in 0..6000u64 {
        t += 700 + i % 13;
        let tid = 100 + (i % 3) as u32;
        let body = if i % 500 == 499 {
            EventBody::Syscall(Syscall { kind: SyscallKind::Munmap, args: vec![0x7f00_0000_0000 + i * 4096, 4096], ret: Some(0), duration_ns: 300 })
        } else {
            EventBody::Fault { addr: 0x7f00_0000_0000 + (i * 7919 % 100_000) * 4096, error_code: 6 }
        };
        ev.push(Event { time_ns: t, tid, pid: 100, body });
    }
    ev
}

fn varint_at(b: &[u8], at: &mut usize) -> u64 {
    let (mut v, mut shift) = (0u64, 0);
    loop {
        let x = b[*at];
        *at += 1;
        v |= ((x & 0x7f) as u64) << shift;
        shift += 7;
        if x & 0x80 == 0 {
            return v;
        }
    }
}

/// A 3.0 file's blocks walked by hand as docs/trace-format.md lays them out, not by the
/// reader: `(start, end, records)` of each, and where the trailer starts.
fn blocks_of(b: &[u8]) -> (Vec<(usize, usize, u64)>, usize) {
    assert_eq!((&b[..8], &b[8..12]), (&b"THPTRACE"[..], &[3u8, 0, 0, 0][..]));
    let mut at = 12;
    let hlen = varint_at(b, &mut at) as usize;
    at += hlen + 4;
    let mut blocks = Vec::new();
    loop {
        let start = at;
        let len = varint_at(b, &mut at) as usize;
        if len == 0 {
            return (blocks, start);
        }
        let n = varint_at(b, &mut at);
        at += len + 4;
        blocks.push((start, at, n));
    }
}

/// Damage in a block (its length, its middle, its checksum) stops the reader there: salvage
/// keeps exactly the records of the blocks before it, each whole, and none of the damaged
/// block's; damage in the trailer keeps every record; damage in the header keeps nothing.
#[test]
fn salvage_stops_at_the_first_damaged_block_and_keeps_the_blocks_before_it() {
    let ev = many_events();
    let bytes = encode(&header_for(&ev, 0), &ev);
    let (blocks, trailer) = blocks_of(&bytes);
    assert!(blocks.len() >= 10, "{} blocks", blocks.len());
    assert_eq!(blocks.iter().map(|b| b.2).sum::<u64>(), ev.len() as u64);
    assert!(blocks[..blocks.len() - 1].iter().all(|&(s, e, _)| e - s >= 4096 && e - s < 4096 + 64), "{blocks:?}");
    let kept_before = |i: usize| blocks[..i].iter().map(|b| b.2).sum::<u64>() as usize;
    let last = blocks.len() - 1;
    for i in [0, 1, blocks.len() / 2, last] {
        let (start, end, _) = blocks[i];
        for at in [start, (start + end) / 2, end - 1] {
            for x in [0x01u8, 0x80] {
                let mut b = bytes.clone();
                b[at] ^= x;
                let s = read_salvage(&b[..]).unwrap();
                let what = format!("block {} (bytes {start}..{end}), byte {at} ^ {x:#x}: {:?}", i + 1, s.damage);
                assert!(s.damage.is_some(), "{what}");
                assert_eq!(s.events.len(), kept_before(i), "{what}");
                assert_eq!(s.events[..], ev[..kept_before(i)], "{what}");
                assert_eq!((s.cut_at, s.block, s.blocks_kept, s.major), (start as u64, Some(i as u64 + 1), i as u64, 3), "{what}");
                assert_eq!(s.records_read + (ev.len() - kept_before(i)) as u64, s.records_expected.unwrap());
                let msg = read_all(&b[..]).unwrap_err().to_string();
                assert!(msg.contains(&format!("block {}", i + 1)), "{what}: {msg}");
            }
        }
    }
    // The message of a flipped byte inside a block's records.
    let mut b = bytes.clone();
    b[(blocks[1].0 + blocks[1].1) / 2] ^= 0x10;
    let msg = read_all(&b[..]).unwrap_err().to_string();
    let (s1, e1) = (blocks[1].0, blocks[1].1);
    assert!(msg.starts_with(&format!("byte {s1}: block 2 (bytes {s1} to {e1}) is damaged: its CRC-32C says")) && msg.ends_with("none of its records are read"), "{msg}");
    // The trailer: every record is kept.
    for at in [trailer + 1, bytes.len() - 1] {
        let mut b = bytes.clone();
        b[at] ^= 0x01;
        let s = read_salvage(&b[..]).unwrap();
        assert!(s.damage.is_some());
        assert_eq!((s.events.len(), s.cut_at, s.block, s.blocks_kept), (ev.len(), trailer as u64, None, blocks.len() as u64));
    }
    // The header: nothing can be salvaged.
    let mut b = bytes.clone();
    b[20] ^= 0x01;
    let e = read_salvage(&b[..]).unwrap_err().to_string();
    assert!(e.contains("the header is damaged: its CRC-32C says"), "{e}");
    // A whole file: no damage, every block.
    let s = read_salvage(&bytes[..]).unwrap();
    assert_eq!((s.damage.is_none(), s.events.len(), s.blocks_kept, s.block), (true, ev.len(), blocks.len() as u64, None));
}

/// A file cut short keeps the blocks before the cut, whole; none of the cut block's records
/// (they cannot be checked).
#[test]
fn salvage_of_a_cut_file_keeps_the_whole_blocks_before_the_cut() {
    let ev = many_events();
    let bytes = encode(&header_for(&ev, 0), &ev);
    let (blocks, trailer) = blocks_of(&bytes);
    for (i, &(start, end, _)) in blocks.iter().enumerate() {
        for cut in [start + 1, (start + end) / 2, end - 1] {
            let s = read_salvage(&bytes[..cut]).unwrap();
            let kept: u64 = blocks[..i].iter().map(|b| b.2).sum();
            assert_eq!(s.events[..], ev[..kept as usize], "cut at {cut}");
            assert_eq!((s.cut_at, s.block), (start as u64, Some(i as u64 + 1)), "cut at {cut}");
            assert!(matches!(s.damage, Some(TraceError::Truncated { .. })), "cut at {cut}: {:?}", s.damage);
        }
    }
    let s = read_salvage(&bytes[..trailer + 2]).unwrap();
    assert_eq!((s.events.len(), s.block, s.cut_at), (ev.len(), None, trailer as u64));
}

/// Each record's byte offset (for replay errors) is where its tag is, also inside blocks.
#[test]
fn record_offsets_point_at_each_records_tag() {
    let ev = many_events();
    let bytes = encode(&header_for(&ev, 0), &ev);
    let mut rd = TraceReader::new(&bytes[..]).unwrap();
    let mut n = 0;
    let mut last = 0;
    while let Some(e) = rd.next_event().unwrap() {
        let at = rd.record_offset() as usize;
        assert!(at > last || n == 0, "offsets grow");
        assert_eq!(bytes[at] & 0x3f, e.body.kind_code(), "record {n} at byte {at}");
        last = at;
        n += 1;
    }
    assert_eq!((n, rd.blocks_read()), (ev.len(), blocks_of(&bytes).0.len() as u64));
}

/// A 2.6 file still reads and salvages record by record (no blocks, nothing checked before the
/// damage: `major` says so).
#[test]
fn files_of_2_6_read_and_salvage_as_before() {
    let ev = many_events();
    let b26 = encode_2_6(&header_for(&ev, 0), &ev);
    assert_eq!(&b26[8..12], &[2, 0, 6, 0]);
    let (_, back, _) = read_all(&b26[..]).unwrap();
    assert_eq!(back, ev);
    let s = read_salvage(&b26[..b26.len() / 2]).unwrap();
    assert_eq!((s.major, s.block, s.blocks_kept), (2, None, 0));
    assert!(s.events.len() > ev.len() / 3 && s.events[..] == ev[..s.events.len()]);
    assert_eq!(s.cut_at, (b26.len() / 2) as u64);
    // 3.0 costs a few bytes a block: under 0.3 % here.
    let b30 = encode(&header_for(&ev, 0), &ev);
    assert!((b30.len() - b26.len()) * 1000 < b26.len() * 3, "{} vs {}", b30.len(), b26.len());
}
