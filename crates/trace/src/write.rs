//! [`TraceWriter`]: events in, bytes out (docs/trace-format.md). The writer checks what the
//! reader will check (times never decrease, argument counts, the header's counts), so a file it
//! finishes always reads back. It writes 3.0: the header with its CRC-32C, then the records in
//! blocks of about [`BLOCK_BYTES`], each with its record count and CRC-32C, then the trailer.

use std::collections::HashMap;
use std::io::{self, BufWriter, Write};

use crate::codec::{
    crc32c, put_bytes, put_varint, zigzag, Crc32, BLOCK_BYTES, LAST_V2_MINOR, MAGIC, MAX_BLOCK, TAG_SWITCH,
    TAG_UNFINISHED, VERSION_MAJOR, VERSION_MINOR,
};
use crate::event::{kind, EventBody, Header, MapEntry};
use crate::Event;

/// Writes a trace: [`TraceWriter::new`] writes the header, [`TraceWriter::write`] one record per
/// event, [`TraceWriter::finish`] the trailer. The header's counts must be those of the events
/// written (the recorder knows them: it writes the file after the program has ended).
pub struct TraceWriter<W: Write> {
    w: BufWriter<W>,
    expected: [u64; 64],
    counts: [u64; 64],
    lost: u64,
    records: u64,
    crc: Crc32,
    current: Option<(u32, u32)>,
    last_time: u64,
    prev_fault: HashMap<u32, u64>,
    buf: Vec<u8>,
    /// 3.x: the open block's records, how many, and the size that closes it. None: the 2.6
    /// layout (records straight after the header), [`TraceWriter::new_2_6`].
    block: Option<Vec<u8>>,
    block_records: u64,
    block_bytes: usize,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// The file's first bytes: magic, version, a varint length, the header's fields, and (3.x) the
/// CRC-32C of all of them.
pub(crate) fn encode_header(h: &Header, v3: bool) -> Vec<u8> {
    let mut b = Vec::new();
    put_bytes(&mut b, &h.program);
    put_bytes(&mut b, &h.exec_path);
    put_varint(&mut b, h.argv.len() as u64);
    for a in &h.argv {
        put_bytes(&mut b, a);
    }
    put_bytes(&mut b, &h.cwd);
    put_bytes(&mut b, h.kernel_release.as_bytes());
    put_bytes(&mut b, h.machine.as_bytes());
    put_varint(&mut b, h.start_unix_ns);
    put_varint(&mut b, h.start_monotonic_ns);
    put_varint(&mut b, h.root_pid as u64);
    put_varint(&mut b, h.page_size);
    put_varint(&mut b, h.flags);
    put_varint(&mut b, h.counts.len() as u64);
    for &(k, n) in &h.counts {
        put_varint(&mut b, k as u64);
        put_varint(&mut b, n);
    }
    put_varint(&mut b, h.lost_events);
    put_varint(&mut b, h.exit_status as u64);
    put_varint(&mut b, h.duration_ns);
    put_bytes(&mut b, &h.thp_settings);
    put_varint(&mut b, h.untraced_wall_ns);
    let mut out = Vec::with_capacity(b.len() + 16);
    out.extend_from_slice(MAGIC);
    let (major, minor) = if v3 { (VERSION_MAJOR, VERSION_MINOR) } else { (2, LAST_V2_MINOR) };
    out.extend_from_slice(&major.to_le_bytes());
    out.extend_from_slice(&minor.to_le_bytes());
    put_varint(&mut out, b.len() as u64);
    out.extend_from_slice(&b);
    if v3 {
        let c = crc32c(&out);
        out.extend_from_slice(&c.to_le_bytes());
    }
    out
}

impl<W: Write> TraceWriter<W> {
    /// A 3.0 file: what `thplab record` writes.
    pub fn new(w: W, header: &Header) -> io::Result<Self> {
        Self::with_layout(w, header, true)
    }

    /// A 2.6 file (no blocks, no header checksum): what thplab wrote before 3.0, for tests of
    /// the reader's 2.x path.
    #[doc(hidden)]
    pub fn new_2_6(w: W, header: &Header) -> io::Result<Self> {
        Self::with_layout(w, header, false)
    }

    /// 3.x: close a block once its records take `bytes` bytes (default [`BLOCK_BYTES`]; at
    /// least 1). Smaller blocks lose fewer records to damage and cost 6 to 10 bytes each.
    pub fn with_block_bytes(mut self, bytes: usize) -> Self {
        self.block_bytes = bytes.max(1);
        self
    }

    fn with_layout(w: W, header: &Header, v3: bool) -> io::Result<Self> {
        let mut expected = [0u64; 64];
        for &(k, n) in &header.counts {
            if k == kind::END || k >= 64 || crate::kind_name(k).is_none() {
                return Err(invalid(format!(
                    "header counts name an unknown record kind {k}"
                )));
            }
            expected[k as usize] = n;
        }
        let mut w = BufWriter::with_capacity(1 << 16, w);
        let head = encode_header(header, v3);
        let mut crc = Crc32::default();
        crc.update(&head);
        w.write_all(&head)?;
        Ok(TraceWriter {
            w,
            expected,
            counts: [0; 64],
            lost: header.lost_events,
            records: 0,
            crc,
            current: None,
            last_time: 0,
            prev_fault: HashMap::new(),
            buf: Vec::with_capacity(256),
            block: v3.then(|| Vec::with_capacity(2 * BLOCK_BYTES)),
            block_records: 0,
            block_bytes: BLOCK_BYTES,
        })
    }

    /// Append the record in `self.buf`: to the open block (3.x; closed once full), or to the
    /// file (2.6).
    fn put_record(&mut self) -> io::Result<()> {
        let Some(block) = &mut self.block else {
            self.crc.update(&self.buf);
            return self.w.write_all(&self.buf);
        };
        if (block.len() + self.buf.len()) as u64 > MAX_BLOCK {
            if block.is_empty() {
                return Err(invalid(format!("a record of {} bytes: a block holds at most {MAX_BLOCK}", self.buf.len())));
            }
            self.close_block()?;
        }
        let block = self.block.as_mut().expect("3.x");
        block.extend_from_slice(&self.buf);
        self.block_records += 1;
        if block.len() >= self.block_bytes {
            self.close_block()?;
        }
        Ok(())
    }

    /// Write the open block, if it holds records: length, record count, the records, CRC-32C.
    fn close_block(&mut self) -> io::Result<()> {
        let Some(block) = &mut self.block else { return Ok(()) };
        if block.is_empty() {
            return Ok(());
        }
        let mut frame = Vec::with_capacity(block.len() + 24);
        put_varint(&mut frame, block.len() as u64);
        put_varint(&mut frame, self.block_records);
        frame.extend_from_slice(block);
        let c = crc32c(&frame);
        frame.extend_from_slice(&c.to_le_bytes());
        block.clear();
        self.block_records = 0;
        self.crc.update(&frame);
        self.w.write_all(&frame)
    }

    /// Append one record. Events must come in time order.
    pub fn write(&mut self, ev: &Event) -> io::Result<()> {
        if ev.time_ns < self.last_time {
            return Err(invalid(format!(
                "event at {} ns comes after one at {} ns: events must be in time order",
                ev.time_ns, self.last_time
            )));
        }
        let b = &mut self.buf;
        b.clear();
        let code = ev.body.kind_code();
        let mut tag = code;
        let switch = self.current != Some((ev.tid, ev.pid));
        if switch {
            tag |= TAG_SWITCH;
        }
        if let EventBody::Syscall(s) = &ev.body {
            if s.args.len() != s.kind.args().len() {
                return Err(invalid(format!(
                    "{}: {} arguments given, the format has {}",
                    s.kind.name(),
                    s.args.len(),
                    s.kind.args().len()
                )));
            }
            if s.ret.is_none() {
                tag |= TAG_UNFINISHED;
            }
        }
        b.push(tag);
        if switch {
            put_varint(b, ev.tid as u64);
            put_varint(b, ev.pid as u64);
            self.current = Some((ev.tid, ev.pid));
        }
        put_varint(b, ev.time_ns - self.last_time);
        self.last_time = ev.time_ns;
        put_body(b, &mut self.prev_fault, ev)?;
        self.put_record()?;
        self.counts[code as usize] += 1;
        self.records += 1;
        Ok(())
    }

    /// Write the trailer and flush; checks that the records written match the header's counts.
    pub fn finish(mut self) -> io::Result<W> {
        for k in 0..64 {
            if self.counts[k] != self.expected[k] {
                let name = crate::kind_name(k as u8).unwrap_or("?");
                return Err(invalid(format!(
                    "the header says {} {name} records, {} were written",
                    self.expected[k], self.counts[k]
                )));
            }
        }
        self.close_block()?;
        // The end tag; in 3.x, the same byte is a block length of 0.
        let mut b = vec![kind::END];
        put_varint(&mut b, self.records);
        put_varint(&mut b, self.lost);
        self.crc.update(&b);
        b.extend_from_slice(&self.crc.value().to_le_bytes());
        self.w.write_all(&b)?;
        self.w.into_inner().map_err(|e| e.into_error())
    }
}

/// An `exec_maps` record's body: the entries' count, then each as start, length, perms,
/// offset, device, inode and path.
fn put_exec_maps(b: &mut Vec<u8>, entries: &[MapEntry]) -> io::Result<()> {
    put_varint(b, entries.len() as u64);
    for e in entries {
        if e.end < e.start {
            return Err(invalid(format!(
                "map entry {:#x}-{:#x} ends before it starts",
                e.start, e.end
            )));
        }
        for v in [
            e.start,
            e.end - e.start,
            e.perms as u64,
            e.offset,
            e.maj as u64,
            e.min as u64,
            e.ino,
        ] {
            put_varint(b, v);
        }
        put_bytes(b, &e.path);
    }
    Ok(())
}

/// A record's body after its tag, thread switch and time delta: its fields in the format's
/// order (a fault's address as the zigzag delta from its thread's last fault, `prev_fault`).
fn put_body(b: &mut Vec<u8>, prev_fault: &mut HashMap<u32, u64>, ev: &Event) -> io::Result<()> {
    match &ev.body {
        EventBody::Fault { addr, error_code } => {
            put_varint(b, *error_code);
            let prev = prev_fault.insert(ev.tid, *addr).unwrap_or(0);
            put_varint(b, zigzag(addr.wrapping_sub(prev) as i64));
        }
        EventBody::Syscall(s) => {
            if s.ret.is_some() {
                put_varint(b, s.duration_ns);
            }
            for &a in &s.args {
                put_varint(b, a);
            }
            if let Some(r) = s.ret {
                put_varint(b, zigzag(r));
            }
        }
        EventBody::TaskNew { tid, pid } => {
            put_varint(b, *tid as u64);
            put_varint(b, *pid as u64);
        }
        EventBody::TaskExit => {}
        EventBody::Comm { comm, exec } => {
            put_varint(b, *exec as u64);
            put_bytes(b, comm);
        }
        EventBody::Map(m) => {
            for v in [
                m.addr,
                m.len,
                m.pgoff,
                m.maj as u64,
                m.min as u64,
                m.ino,
                m.ino_generation,
                m.prot as u64,
                m.flags as u64,
            ] {
                put_varint(b, v);
            }
            put_bytes(b, &m.path);
        }
        EventBody::ExecMaps(entries) => put_exec_maps(b, entries)?,
        EventBody::Lost { count } => put_varint(b, *count),
        EventBody::Path(p) => {
            put_varint(b, p.call as u64);
            put_bytes(b, &p.path);
            for v in [p.exists as u64, p.maj as u64, p.min as u64, p.ino, p.size, p.fs_magic] {
                put_varint(b, v);
            }
        }
        EventBody::ExecStack { start_stack } => put_varint(b, *start_stack),
        EventBody::Uffd(u) => {
            if linux_abi::userfaultfd::name(u.op) == "?" {
                return Err(invalid(format!("uffd record for operation {}, which is not a UFFDIO request", u.op)));
            }
            for v in [u.op as u64, u.fd as u64, u.start, u.len, u.mode, u.src] {
                put_varint(b, v);
            }
        }
        EventBody::Iovecs { call, iovs } => {
            if crate::SyscallKind::from_code(*call).is_none() {
                return Err(invalid(format!("iovecs record for kind {call}, which is not a system call")));
            }
            put_varint(b, *call as u64);
            put_varint(b, iovs.len() as u64);
            for &(base, len) in iovs {
                put_varint(b, base);
                put_varint(b, len);
            }
        }
        EventBody::Answered { call, ret } => {
            if crate::SyscallKind::from_code(*call).is_none() {
                return Err(invalid(format!("answered record for kind {call}, which is not a system call")));
            }
            put_varint(b, *call as u64);
            put_varint(b, zigzag(*ret));
        }
        EventBody::Mounts(v) => {
            put_varint(b, v.len() as u64);
            for m in v {
                put_varint(b, m.maj as u64);
                put_varint(b, m.min as u64);
                put_bytes(b, &m.fstype);
                put_bytes(b, &m.mount_point);
                put_bytes(b, &m.options);
            }
        }
    }
    Ok(())
}
