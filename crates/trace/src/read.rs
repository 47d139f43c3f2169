//! [`TraceReader`]: bytes in, events out. Every malformed input is a [`TraceError`] naming the
//! byte offset and what was expected; nothing panics and no length read from the file makes it
//! allocate more than the file holds. 3.x files are read a block at a time, each checked by its
//! CRC-32C before its records are decoded; 1.x and 2.x files (no blocks) record by record.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read};

use crate::codec::{
    crc32c, Src, LAST_V2_MINOR, MAGIC, MAX_BLOCK, MAX_HEADER, TAG_KIND, TAG_SWITCH, TAG_UNFINISHED, VERSION_MAJOR,
    VERSION_MINOR,
};
use crate::event::{kind, EventBody, Header, MapEntry, MapInfo, MountEntry, PathInfo, Syscall, SyscallKind, Trailer};
use crate::{Event, TraceError};

/// Reads a trace: [`TraceReader::new`] reads and checks the header; [`TraceReader::next_event`]
/// (or the iterator) gives the events; after the last one the trailer, the header's counts and the
/// checksum have been checked and [`TraceReader::trailer`] is set. A 3.x file's records come a
/// block at a time: a block is read whole and its CRC-32C checked before any of its records is
/// decoded, so a damaged block gives an error and none of its records.
pub struct TraceReader<R: Read> {
    src: Src<BufReader<R>>,
    header: Header,
    minor: u16,
    major: u16,
    dec: Decoder,
    trailer: Option<Trailer>,
    failed: bool,
    /// 3.x: the records of the block read last not yet returned, with their byte offsets.
    pending: VecDeque<(u64, Event)>,
    /// 3.x: blocks read and checked.
    blocks: u64,
    /// Where the block (3.x), the record (1.x, 2.x) or the trailer being read starts.
    unit_at: u64,
    in_trailer: bool,
    /// The byte offset of the record returned last.
    record_at: u64,
    block_buf: Vec<u8>,
}

/// What decoding a record needs from the records before it (carried across 3.x blocks).
struct Decoder {
    major: u16,
    current: Option<(u32, u32)>,
    time: u64,
    prev_fault: HashMap<u32, u64>,
    counts: [u64; 64],
    records: u64,
}

/// A minor version newer than this reader's (its header may have fields this reader skips).
fn newer_minor(major: u16, minor: u16) -> bool {
    if major >= 3 {
        minor > VERSION_MINOR
    } else {
        minor > LAST_V2_MINOR
    }
}

fn corrupt(offset: u64, message: impl Into<String>) -> TraceError {
    TraceError::Corrupt {
        offset,
        message: message.into(),
    }
}

/// Read a whole trace into memory.
pub fn read_all(r: impl Read) -> Result<(Header, Vec<Event>, Trailer), TraceError> {
    let mut rd = TraceReader::new(r)?;
    let mut v = Vec::new();
    while let Some(e) = rd.next_event()? {
        v.push(e);
    }
    let t = rd.trailer().expect("set after the last event");
    Ok((rd.header, v, t))
}

/// What [`read_salvage`] could read of a damaged trace.
#[derive(Debug)]
pub struct Salvaged {
    pub header: Header,
    /// Every event before the damage (all of them when there is none). In a 3.x file, the
    /// records of the blocks before the damaged one, each block checked whole.
    pub events: Vec<Event>,
    /// The damage: the first error after the header, with its byte offset; None for a whole trace.
    pub damage: Option<TraceError>,
    /// Records the header counts (its counts, written when the recording finished); None when
    /// it counts none (a recorder that was killed).
    pub records_expected: Option<u64>,
    /// Records read whole before the damage (`events.len()`).
    pub records_read: u64,
    /// Where the kept part ends, the first byte not kept: in a 3.x file the start of the
    /// damaged block (or of the trailer when the blocks are whole), else the error's offset.
    pub cut_at: u64,
    /// 3.x: the damaged block's number (from 1); None when only the trailer is damaged.
    pub block: Option<u64>,
    /// 3.x: blocks read and checked before the damage.
    pub blocks_kept: u64,
    /// The file's major version: below 3 the kept records were not checked (no block checksums).
    pub major: u16,
}

/// Read a trace up to the first damage after the header: the events before it and the error
/// (`thplab sim --salvage`). A damaged header is still an error: nothing after it can be read.
pub fn read_salvage(r: impl Read) -> Result<Salvaged, TraceError> {
    let mut rd = TraceReader::new(r)?;
    let mut events = Vec::new();
    let damage = loop {
        match rd.next_event() {
            Ok(Some(e)) => events.push(e),
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    let total: u64 = rd.header.counts.iter().map(|(_, n)| n).sum();
    let blocked = rd.major >= 3;
    let cut_at = match &damage {
        Some(_) if blocked => rd.unit_at,
        Some(e) => e.offset(),
        None => rd.src.offset,
    };
    let block = (blocked && damage.is_some() && !rd.in_trailer).then_some(rd.blocks + 1);
    Ok(Salvaged {
        records_expected: (total > 0).then_some(total),
        records_read: events.len() as u64,
        cut_at,
        block,
        blocks_kept: rd.blocks,
        major: rd.major,
        header: rd.header,
        events,
        damage,
    })
}

impl<R: Read> TraceReader<R> {
    pub fn new(r: R) -> Result<Self, TraceError> {
        let mut src = Src::new(BufReader::with_capacity(1 << 16, r));
        src.crc_on = true;
        src.tap = Some(Vec::new());
        let mut magic = [0u8; 8];
        src.exact(&mut magic, "the magic bytes THPTRACE")?;
        if &magic != MAGIC {
            return Err(corrupt(
                0,
                format!(
                    "not a thplab trace: the file starts with {:?}, expected \"THPTRACE\"",
                    String::from_utf8_lossy(&magic)
                ),
            ));
        }
        let mut v = [0u8; 4];
        src.exact(&mut v, "the format version")?;
        let major = u16::from_le_bytes([v[0], v[1]]);
        let minor = u16::from_le_bytes([v[2], v[3]]);
        if !(1..=VERSION_MAJOR).contains(&major) {
            return Err(corrupt(
                8,
                format!(
                    "format version {major}.{minor}; this thplab reads versions 1.x, 2.x and {VERSION_MAJOR}.x (a newer thplab wrote it: read it with that one)"
                ),
            ));
        }
        let len_at = src.offset;
        let len = src.varint("the header length")?;
        if len > MAX_HEADER {
            return Err(corrupt(
                len_at,
                format!("header length {len} exceeds the limit {MAX_HEADER}"),
            ));
        }
        let start = src.offset;
        let header = read_header(&mut src, major, minor)?;
        let used = src.offset - start;
        if used > len {
            return Err(corrupt(
                start,
                format!("the header's fields take {used} bytes, its length says {len}"),
            ));
        }
        if used < len {
            if !newer_minor(major, minor) {
                return Err(corrupt(
                    src.offset,
                    format!(
                        "{} unexpected bytes at the end of the header (version {major}.{minor})",
                        len - used
                    ),
                ));
            }
            for _ in used..len {
                src.u8("the rest of a newer header")?;
            }
        }
        let head = src.tap.take().unwrap_or_default();
        if major >= 3 {
            check_header_crc(&mut src, &head)?;
        }
        let unit_at = src.offset;
        Ok(TraceReader {
            src,
            header,
            minor,
            major,
            dec: Decoder { major, current: None, time: 0, prev_fault: HashMap::new(), counts: [0; 64], records: 0 },
            trailer: None,
            failed: false,
            pending: VecDeque::new(),
            blocks: 0,
            unit_at,
            in_trailer: false,
            record_at: unit_at,
            block_buf: Vec::new(),
        })
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The byte offset of the next byte to read (of the error, after a failed read).
    pub fn offset(&self) -> u64 {
        self.src.offset
    }

    /// The byte offset of the record [`TraceReader::next_event`] returned last.
    pub fn record_offset(&self) -> u64 {
        self.record_at
    }

    /// 3.x: blocks read and checked so far.
    pub fn blocks_read(&self) -> u64 {
        self.blocks
    }

    /// The file's major format version.
    pub fn major_version(&self) -> u16 {
        self.major
    }

    /// The file's minor format version.
    pub fn minor_version(&self) -> u16 {
        self.minor
    }

    /// Set once [`TraceReader::next_event`] has returned `Ok(None)`.
    pub fn trailer(&self) -> Option<Trailer> {
        self.trailer
    }

    /// The next event, `Ok(None)` after the trailer (checked), or the first error.
    pub fn next_event(&mut self) -> Result<Option<Event>, TraceError> {
        if self.trailer.is_some() || self.failed {
            return Ok(None);
        }
        let r = self.next_inner();
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    fn next_inner(&mut self) -> Result<Option<Event>, TraceError> {
        if self.major >= 3 {
            loop {
                if let Some((at, e)) = self.pending.pop_front() {
                    self.record_at = at;
                    return Ok(Some(e));
                }
                if !self.read_block()? {
                    return self.finish().map(|()| None);
                }
            }
        }
        let s = &mut self.src;
        let at = s.offset;
        self.unit_at = at;
        let tag = s.u8("a record tag or the trailer (kind 0)")?;
        if tag & TAG_KIND == kind::END {
            if tag != kind::END {
                return Err(corrupt(
                    at,
                    format!("trailer tag {tag:#04x} has flag bits set"),
                ));
            }
            self.in_trailer = true;
            return self.finish().map(|()| None);
        }
        self.record_at = at;
        self.dec.record(s, at, tag).map(Some)
    }

    /// 3.x: read the next block whole, check its CRC-32C, then decode its records into
    /// `pending`. False at the end tag (a block length of 0): the trailer follows.
    fn read_block(&mut self) -> Result<bool, TraceError> {
        let start = self.src.offset;
        self.unit_at = start;
        let no = self.blocks + 1;
        let mut buf = std::mem::take(&mut self.block_buf);
        buf.clear();
        self.src.tap = Some(buf);
        let framed = self.read_frame(no, start);
        let bytes = self.src.tap.take().unwrap_or_default();
        let Some((len, n, payload_at)) = framed? else {
            self.in_trailer = true;
            return Ok(false);
        };
        let mut c = [0u8; 4];
        self.src.exact(&mut c, &format!("block {no}'s CRC-32C"))?;
        let (stored, computed) = (u32::from_le_bytes(c), crc32c(&bytes));
        if stored != computed {
            return Err(corrupt(start, format!(
                "block {no} (bytes {start} to {}) is damaged: its CRC-32C says {stored:#010x}, its bytes give {computed:#010x}; none of its records are read",
                self.src.offset
            )));
        }
        let mut bs = Src::new(&bytes[(payload_at - start) as usize..]);
        bs.offset = payload_at;
        let in_block = |e: TraceError| match e {
            TraceError::Truncated { offset, expected } => corrupt(offset, format!("block {no} ends inside its records: expected {expected}")),
            TraceError::Corrupt { offset, message } => corrupt(offset, format!("block {no}: {message}")),
            e => e,
        };
        for _ in 0..n {
            let at = bs.offset;
            let tag = bs.u8("a record tag").map_err(in_block)?;
            if tag & TAG_KIND == kind::END {
                return Err(corrupt(at, format!("block {no}: an end tag ({tag:#04x}) among its {n} records")));
            }
            let e = self.dec.record(&mut bs, at, tag).map_err(in_block)?;
            self.pending.push_back((at, e));
        }
        if bs.offset != payload_at + len {
            return Err(corrupt(bs.offset, format!("block {no}: its {n} records end at byte {}, its {len} bytes at byte {}", bs.offset, payload_at + len)));
        }
        self.blocks += 1;
        self.block_buf = bytes;
        Ok(true)
    }

    /// A block's length (None for 0, the end tag), record count, and records (into the tap):
    /// `(length, records, offset of the records)`.
    fn read_frame(&mut self, no: u64, start: u64) -> Result<Option<(u64, u64, u64)>, TraceError> {
        let s = &mut self.src;
        let len = s.varint("a block's length, or the trailer (0)")?;
        if len == 0 {
            return Ok(None);
        }
        if len > MAX_BLOCK {
            return Err(corrupt(start, format!("block {no}: length {len} exceeds the limit {MAX_BLOCK} (its length is damaged)")));
        }
        let n_at = s.offset;
        let n = s.varint(&format!("block {no}'s record count"))?;
        if n == 0 || n > len {
            return Err(corrupt(n_at, format!("block {no}: {n} records in {len} bytes; a block holds 1 to {len} (its count is damaged)")));
        }
        let at = s.offset;
        s.tap_n(len, &format!("block {no}'s {len} bytes of records from byte {at} (the file is cut short, or the block's length is damaged)"))?;
        Ok(Some((len, n, at)))
    }

    fn finish(&mut self) -> Result<(), TraceError> {
        finish(&mut self.src, &self.dec, &self.header).map(|t| {
            self.trailer = Some(t);
        })
    }
}

/// 3.x: the 4 bytes after the header are the CRC-32C of every byte before them.
fn check_header_crc<B: BufRead>(src: &mut Src<B>, head: &[u8]) -> Result<(), TraceError> {
    let at = src.offset;
    let mut c = [0u8; 4];
    src.exact(&mut c, "the header's CRC-32C")?;
    let (stored, computed) = (u32::from_le_bytes(c), crc32c(head));
    if stored != computed {
        return Err(corrupt(at, format!("the header is damaged: its CRC-32C says {stored:#010x}, bytes 0 to {at} give {computed:#010x}")));
    }
    Ok(())
}

impl Decoder {
    /// The record whose tag `tag` (not the end tag) was read at `at`, its fields from `s`.
    fn record<B: BufRead>(&mut self, s: &mut Src<B>, at: u64, tag: u8) -> Result<Event, TraceError> {
        let code = tag & TAG_KIND;
        let Some(name) = crate::kind_name(code) else {
            return Err(corrupt(
                at,
                format!("unknown record kind {code} (tag {tag:#04x})"),
            ));
        };
        let sys = SyscallKind::from_code(code);
        if tag & TAG_UNFINISHED != 0 && sys.is_none() {
            return Err(corrupt(
                at,
                format!("{name} record with the unfinished flag, which only system calls have"),
            ));
        }
        if tag & TAG_SWITCH != 0 {
            let tid = s.varint_u32("the thread id of a thread switch")?;
            let pid = s.varint_u32("the process id of a thread switch")?;
            self.current = Some((tid, pid));
        }
        let Some((tid, pid)) = self.current else {
            return Err(corrupt(
                at,
                format!("{name} record before any thread switch: no thread to attribute it to"),
            ));
        };
        let dt_at = s.offset;
        let dt = s.varint("the time delta")?;
        self.time = self
            .time
            .checked_add(dt)
            .ok_or_else(|| corrupt(dt_at, "time overflows 64 bits"))?;
        let body = self.body(s, at, tag, code, sys, tid)?;
        self.counts[code as usize] += 1;
        self.records += 1;
        Ok(Event {
            time_ns: self.time,
            tid,
            pid,
            body,
        })
    }

    /// The body of a record of kind `code` (tag `tag`, read at `at`; `sys` its system call) of
    /// thread `tid`.
    fn body<B: BufRead>(&mut self, s: &mut Src<B>, at: u64, tag: u8, code: u8, sys: Option<SyscallKind>, tid: u32) -> Result<EventBody, TraceError> {
        Ok(match code {
            kind::FAULT => {
                let error_code = s.varint("the fault's error code")?;
                let delta = s.zigzag("the fault's address delta")?;
                let prev = self.prev_fault.get(&tid).copied().unwrap_or(0);
                let addr = prev.wrapping_add(delta as u64);
                self.prev_fault.insert(tid, addr);
                EventBody::Fault { addr, error_code }
            }
            kind::TASK_NEW => {
                let tid = s.varint_u32("the new task's thread id")?;
                let pid = s.varint_u32("the new task's process id")?;
                EventBody::TaskNew { tid, pid }
            }
            kind::TASK_EXIT => EventBody::TaskExit,
            kind::COMM => {
                let f_at = s.offset;
                let exec = match s.varint("the comm record's exec flag")? {
                    0 => false,
                    1 => true,
                    v => {
                        return Err(corrupt(
                            f_at,
                            format!("comm exec flag {v}, expected 0 or 1"),
                        ))
                    }
                };
                EventBody::Comm {
                    exec,
                    comm: s.bytes("the comm string")?,
                }
            }
            kind::MAP => map_record(s, at)?,
            kind::EXEC_MAPS => exec_maps_record(s)?,
            kind::LOST => EventBody::Lost {
                count: s.varint("the lost record's count")?,
            },
            kind::PATH if self.major >= 2 => path_record(s, at)?,
            kind::MOUNTS if self.major >= 2 => mounts_record(s)?,
            kind::IOVECS if self.major >= 2 => {
                let c_at = s.offset;
                let call = s.varint("the iovecs record's call")?;
                if SyscallKind::from_code(call.min(255) as u8).is_none() {
                    return Err(corrupt(c_at, format!("iovecs record for call kind {call}, which is not a system call")));
                }
                let n_at = s.offset;
                let n = s.varint("the number of iovecs")?;
                // UIO_MAXIOV, and io_uring's IORING_MAX_REG_BUFFERS (16384).
                if n > 1 << 14 {
                    return Err(corrupt(n_at, format!("{n} iovecs, more than the limit 16384")));
                }
                let mut iovs = Vec::new();
                for i in 0..n {
                    let base = s.varint(&format!("iovec {i}: base"))?;
                    iovs.push((base, s.varint(&format!("iovec {i}: length"))?));
                }
                EventBody::Iovecs { call: call as u8, iovs }
            }
            kind::UFFD if self.major >= 2 => {
                let op_at = s.offset;
                let op = s.varint("the uffd record's operation")?;
                if op > 0xff || linux_abi::userfaultfd::name(op as u8) == "?" {
                    return Err(corrupt(op_at, format!("uffd record for operation {op}, which is not a UFFDIO request")));
                }
                EventBody::Uffd(crate::UffdIoctl {
                    op: op as u8,
                    fd: s.varint_u32("the uffd record's fd")?,
                    start: s.varint("the uffd record's start")?,
                    len: s.varint("the uffd record's length")?,
                    mode: s.varint("the uffd record's mode")?,
                    src: s.varint("the uffd record's src")?,
                })
            }
            kind::EXEC_STACK if self.major >= 2 => EventBody::ExecStack {
                start_stack: s.varint("the exec_stack record's start_stack")?,
            },
            kind::ANSWERED if self.major >= 2 => {
                let c_at = s.offset;
                let call = s.varint("the answered record's call")?;
                if SyscallKind::from_code(call.min(255) as u8).is_none() {
                    return Err(corrupt(c_at, format!("answered record for call kind {call}, which is not a system call")));
                }
                let ret = s.zigzag("the answered record's result")?;
                EventBody::Answered { call: call as u8, ret }
            }
            _ => {
                let Some(k) = sys else {
                    return Err(corrupt(at, format!("unknown record kind {code}")));
                };
                syscall_record(s, k, tag)?
            }
        })
    }
}

/// A `map` record: an mmap's address, length, offset, device, inode, prot, flags and path.
fn map_record<B: BufRead>(s: &mut Src<B>, at: u64) -> Result<EventBody, TraceError> {
    let mut v = [0u64; 9];
    for (x, what) in v.iter_mut().zip([
        "addr",
        "len",
        "pgoff",
        "maj",
        "min",
        "ino",
        "ino_generation",
        "prot",
        "flags",
    ]) {
        *x = s.varint(&format!("the map record's {what}"))?;
    }
    let u32_of = |x: u64, what: &str| {
        u32::try_from(x).map_err(|_| {
            corrupt(at, format!("map record: {what} {x} does not fit 32 bits"))
        })
    };
    Ok(EventBody::Map(MapInfo {
        addr: v[0],
        len: v[1],
        pgoff: v[2],
        maj: u32_of(v[3], "maj")?,
        min: u32_of(v[4], "min")?,
        ino: v[5],
        ino_generation: v[6],
        prot: u32_of(v[7], "prot")?,
        flags: u32_of(v[8], "flags")?,
        path: s.bytes("the map record's path")?,
    }))
}

/// An `exec_maps` record: the address space an execve left (/proc/PID/maps entries).
fn exec_maps_record<B: BufRead>(s: &mut Src<B>) -> Result<EventBody, TraceError> {
    let n_at = s.offset;
    let n = s.varint("the number of exec map entries")?;
    if n > 1 << 20 {
        return Err(corrupt(
            n_at,
            format!("{n} exec map entries, more than the limit 1048576"),
        ));
    }
    let mut entries = Vec::new();
    for i in 0..n {
        let mut v = [0u64; 7];
        for (x, what) in v
            .iter_mut()
            .zip(["start", "length", "perms", "offset", "maj", "min", "ino"])
        {
            *x = s.varint(&format!("exec map entry {i}: {what}"))?;
        }
        let end = v[0].checked_add(v[1]).ok_or_else(|| {
            corrupt(n_at, format!("exec map entry {i}: end overflows"))
        })?;
        let u32_of = |x: u64, what: &str| {
            u32::try_from(x).map_err(|_| {
                corrupt(
                    n_at,
                    format!("exec map entry {i}: {what} {x} does not fit 32 bits"),
                )
            })
        };
        entries.push(MapEntry {
            start: v[0],
            end,
            perms: u32_of(v[2], "perms")?,
            offset: v[3],
            maj: u32_of(v[4], "maj")?,
            min: u32_of(v[5], "min")?,
            ino: v[6],
            path: s.bytes(&format!("exec map entry {i}: path"))?,
        });
    }
    Ok(EventBody::ExecMaps(entries))
}

/// A `path` record: the file a call named (open, stat, ...), what the recorder found there.
fn path_record<B: BufRead>(s: &mut Src<B>, at: u64) -> Result<EventBody, TraceError> {
    let c_at = s.offset;
    let call = s.varint("the path record's call")?;
    if !matches!(SyscallKind::from_code(call.min(255) as u8), Some(k) if k.takes_path()) {
        return Err(corrupt(c_at, format!("path record for call kind {call}, which takes no path")));
    }
    let path = s.bytes("the path record's path")?;
    let mut v = [0u64; 6];
    for (x, what) in v.iter_mut().zip(["exists", "maj", "min", "ino", "size", "fs_magic"]) {
        *x = s.varint(&format!("the path record's {what}"))?;
    }
    let u32_of = |x: u64, what: &str| {
        u32::try_from(x).map_err(|_| corrupt(at, format!("path record: {what} {x} does not fit 32 bits")))
    };
    if v[0] > 1 {
        return Err(corrupt(at, format!("path record: exists flag {}, expected 0 or 1", v[0])));
    }
    Ok(EventBody::Path(PathInfo {
        call: call as u8,
        path,
        exists: v[0] == 1,
        maj: u32_of(v[1], "maj")?,
        min: u32_of(v[2], "min")?,
        ino: v[3],
        size: v[4],
        fs_magic: v[5],
    }))
}

/// A `mounts` record: the mounts the recorder saw (device, type, mount point, options).
fn mounts_record<B: BufRead>(s: &mut Src<B>) -> Result<EventBody, TraceError> {
    let n_at = s.offset;
    let n = s.varint("the number of mounts")?;
    if n > 1 << 16 {
        return Err(corrupt(n_at, format!("{n} mounts, more than the limit 65536")));
    }
    let mut v = Vec::new();
    for i in 0..n {
        let maj = s.varint_u32(&format!("mount {i}: maj"))?;
        let min = s.varint_u32(&format!("mount {i}: min"))?;
        v.push(MountEntry {
            maj,
            min,
            fstype: s.bytes(&format!("mount {i}: fstype"))?,
            mount_point: s.bytes(&format!("mount {i}: mount point"))?,
            options: s.bytes(&format!("mount {i}: options"))?,
        });
    }
    Ok(EventBody::Mounts(v))
}

/// A system call's record: its duration and result when it finished, its arguments.
fn syscall_record<B: BufRead>(s: &mut Src<B>, k: SyscallKind, tag: u8) -> Result<EventBody, TraceError> {
    let finished = tag & TAG_UNFINISHED == 0;
    let duration_ns = if finished {
        s.varint(&format!("{}: duration", k.name()))?
    } else {
        0
    };
    let mut args = Vec::with_capacity(k.args().len());
    for a in k.args() {
        args.push(s.varint(&format!("{}: argument {a}", k.name()))?);
    }
    let ret = if finished {
        Some(s.zigzag(&format!("{}: result", k.name()))?)
    } else {
        None
    };
    Ok(EventBody::Syscall(Syscall {
        kind: k,
        args,
        ret,
        duration_ns,
    }))
}

/// The trailer (its end tag read): the record count, the lost events, the whole file's CRC-32,
/// the header's counts, and nothing after it.
fn finish<B: BufRead>(s: &mut Src<B>, dec: &Decoder, header: &Header) -> Result<Trailer, TraceError> {
    let r_at = s.offset;
    let records = s.varint("the trailer's record count")?;
    let l_at = s.offset;
    let lost = s.varint("the trailer's lost-event count")?;
    let crc = s.crc.value();
    s.crc_on = false;
    let c_at = s.offset;
    let mut c = [0u8; 4];
    s.exact(&mut c, "the trailer's CRC-32")?;
    let stored = u32::from_le_bytes(c);
    if records != dec.records {
        return Err(corrupt(
            r_at,
            format!(
                "the trailer counts {records} records, the file has {}",
                dec.records
            ),
        ));
    }
    if lost != header.lost_events {
        return Err(corrupt(
            l_at,
            format!(
                "the trailer counts {lost} lost events, the header {}",
                header.lost_events
            ),
        ));
    }
    if stored != crc {
        return Err(corrupt(c_at, format!("checksum mismatch: the trailer says {stored:#010x}, the bytes give {crc:#010x} (corrupt file)")));
    }
    for &(k, n) in &header.counts {
        if dec.counts[k as usize] != n {
            let name = crate::kind_name(k).unwrap_or("?");
            return Err(corrupt(
                r_at,
                format!(
                    "the header counts {n} {name} records, the file has {}",
                    dec.counts[k as usize]
                ),
            ));
        }
    }
    for k in 1..64u8 {
        let n = dec.counts[k as usize];
        if n > 0 && !header.counts.iter().any(|&(hk, _)| hk == k) {
            return Err(corrupt(
                r_at,
                format!(
                    "the file has {n} {} records, the header counts none",
                    crate::kind_name(k).unwrap_or("?")
                ),
            ));
        }
    }
    let end = s.offset;
    if s.try_u8()?.is_some() {
        return Err(corrupt(end, "bytes after the trailer"));
    }
    Ok(Trailer {
        records,
        lost_events: lost,
        crc32: stored,
    })
}

impl<R: Read> Iterator for TraceReader<R> {
    type Item = Result<Event, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_event().transpose()
    }
}

fn read_header<R: std::io::BufRead>(s: &mut Src<R>, major: u16, minor: u16) -> Result<Header, TraceError> {
    let program = s.bytes("header: program")?;
    let exec_path = s.bytes("header: executed path")?;
    let n_at = s.offset;
    let n = s.varint("header: argument count")?;
    if n > 1 << 20 {
        return Err(corrupt(
            n_at,
            format!("header: {n} arguments, more than the limit 1048576"),
        ));
    }
    let mut argv = Vec::new();
    for i in 0..n {
        argv.push(s.bytes(&format!("header: argv[{i}]"))?);
    }
    let cwd = s.bytes("header: working directory")?;
    let kernel_release = s.string("header: kernel release")?;
    let machine = s.string("header: machine")?;
    let start_unix_ns = s.varint("header: start time")?;
    let start_monotonic_ns = s.varint("header: start monotonic time")?;
    let root_pid = s.varint_u32("header: root pid")?;
    let ps_at = s.offset;
    let page_size = s.varint("header: page size")?;
    // The recorder writes the base page size of an x86-64 machine; the model replays 4 KiB pages.
    if page_size != 4096 {
        return Err(corrupt(ps_at, format!("header: page size {page_size}; recordings are of 4096-byte base pages (x86-64)")));
    }
    let flags = s.varint("header: flags")?;
    let c_at = s.offset;
    let nc = s.varint("header: number of counts")?;
    if nc > 64 {
        return Err(corrupt(
            c_at,
            format!("header: {nc} record counts, there are at most 63 kinds"),
        ));
    }
    let mut counts = Vec::new();
    for _ in 0..nc {
        let k_at = s.offset;
        let k = s.varint("header: a count's record kind")?;
        let ok = k > 0 && k < 64 && crate::kind_name(k as u8).is_some();
        if !ok {
            return Err(corrupt(
                k_at,
                format!("header: count for unknown record kind {k}"),
            ));
        }
        if counts.iter().any(|&(ck, _)| ck == k as u8) {
            return Err(corrupt(
                k_at,
                format!("header: two counts for record kind {k}"),
            ));
        }
        counts.push((k as u8, s.varint("header: a record count")?));
    }
    let lost_events = s.varint("header: lost events")?;
    let exit_status = s.varint_u32("header: exit status")?;
    let duration_ns = s.varint("header: duration")?;
    let thp_settings = if major >= 2 { s.bytes("header: THP settings")? } else { Vec::new() };
    let untraced_wall_ns = if major >= 3 || (major == 2 && minor >= 3) { s.varint("header: untraced wall time")? } else { 0 };
    Ok(Header {
        program,
        exec_path,
        argv,
        cwd,
        kernel_release,
        machine,
        start_unix_ns,
        start_monotonic_ns,
        root_pid,
        page_size,
        flags,
        counts,
        lost_events,
        exit_status,
        duration_ns,
        thp_settings,
        untraced_wall_ns,
    })
}
