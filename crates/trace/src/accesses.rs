//! The companion file of a recording made with `thplab record --accesses`: `FILE.accesses`,
//! the program's data accesses at 4 KiB-page granularity in the native run's addresses, each
//! run of accesses to one page one record, placed in the recording's event order
//! (docs/trace-format.md, "Accesses"). Like the rest of this crate: `Read`/`Write` only.
//!
//! Layout: magic `THPACCES`, major u16 LE, minor u16 LE, then `trace_crc` u32 LE (the CRC-32 in
//! the recording's trailer: a companion of another recording is refused), `trace_records`
//! varint, `page_size` varint, `flags` varint (1: what follows is one zstd stream; 2: recorded under QEMU, not lackey), then items, each a tag byte: 1 region (`name` string; regions are
//! numbered in order from 0), 2 block (`anchor` delta varint, `n` varint, n runs), 0 end (the
//! trailer). A run is `zigzag(page - previous page)` varint (pages are address / page_size,
//! the previous page carried across blocks, 0 at the start), `count << 2 | write << 1 |
//! region_follows` varint, and when `region_follows` is set the run's region varint (else the
//! previous run's). A block's runs go after the first `anchor` records of the recording
//! (anchors never decrease). The trailer: raw accesses, writes, runs, unmapped accesses,
//! unmapped writes, instruction fetches, valgrind_ns, native_ns, valgrind system calls, matched
//! system calls (varints), then the CRC-32 (u32 LE) of every byte before it (of the
//! decompressed bytes, where compressed; byte offsets in errors count them too).

use std::io::{self, BufRead, Write};

use serde::Serialize;

use crate::codec::{put_bytes, put_varint, unzigzag, zigzag, Crc32, Src};
use crate::TraceError;

/// `THPACCES`: the first eight bytes of every companion file.
pub const ACCESS_MAGIC: &[u8; 8] = b"THPACCES";
/// Readers refuse another major version.
pub const ACCESS_VERSION_MAJOR: u16 = 1;
/// A reader accepts any minor version of its major (none is defined beyond 0 yet).
pub const ACCESS_VERSION_MINOR: u16 = 0;
/// The most runs one block holds (the writer splits longer ones).
pub const MAX_BLOCK_RUNS: usize = 1 << 16;

/// Header flag: the items and the trailer are one zstd stream.
pub const ACCESS_ZSTD: u64 = 1;
/// The header's flag: the accesses were recorded under QEMU user-mode with thplab's TCG plugin
/// (`record --accesses=qemu`), not under valgrind lackey.
pub const ACCESS_QEMU: u64 = 2;

const TAG_END: u8 = 0;
const TAG_REGION: u8 = 1;
const TAG_BLOCK: u8 = 2;

/// The file name of the companion of `trace_path`: the same name with `.accesses` appended.
pub fn companion_path(trace_path: &std::path::Path) -> std::path::PathBuf {
    let mut s = trace_path.as_os_str().to_os_string();
    s.push(".accesses");
    s.into()
}

/// What ties a companion file to its recording.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AccessHeader {
    /// The recording's trailer CRC-32.
    pub trace_crc: u32,
    /// The recording's number of records.
    pub trace_records: u64,
    pub page_size: u64,
    /// [`ACCESS_ZSTD`].
    pub flags: u64,
}

/// `count` accesses in a row to one page (page number: address / page size), `write` when
/// any of them was a store, in region `region` (an index into the file's regions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessRun {
    pub page: u64,
    pub count: u64,
    pub write: bool,
    pub region: u32,
}

/// Runs that happened after the recording's first `anchor` records (and before the next),
/// held encoded as the file encodes runs (the page as a delta, the region only when it
/// changes): two to four bytes a run in memory where an [`AccessRun`] takes 24, for recordings
/// of tens of millions of runs. [`AccessBlock::runs`] decodes them in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessBlock {
    pub anchor: u64,
    len: u32,
    bytes: Vec<u8>,
    /// The last run's page and region: where the next one's delta starts.
    page: u64,
    region: Option<u32>,
}

impl AccessBlock {
    pub fn new(anchor: u64, runs: &[AccessRun]) -> Self {
        let mut b = AccessBlock { anchor, ..Default::default() };
        for r in runs {
            b.push(*r);
        }
        b
    }

    /// Append a run.
    pub fn push(&mut self, r: AccessRun) {
        put_run(&mut self.bytes, &mut self.page, &mut self.region, &r);
        self.len += 1;
    }

    /// How many runs.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes the runs take in memory.
    pub fn encoded_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// The runs, in order.
    pub fn runs(&self) -> Runs<'_> {
        Runs { bytes: &self.bytes, page: 0, region: 0 }
    }
}

/// Run `r` as the file encodes it after a run of page `page` in region `region` (updated).
fn put_run(out: &mut Vec<u8>, page: &mut u64, region: &mut Option<u32>, r: &AccessRun) {
    put_varint(out, zigzag(r.page.wrapping_sub(*page) as i64));
    *page = r.page;
    let follows = *region != Some(r.region);
    put_varint(out, r.count << 2 | (r.write as u64) << 1 | follows as u64);
    if follows {
        put_varint(out, r.region as u64);
        *region = Some(r.region);
    }
}

/// The runs of an [`AccessBlock`].
pub struct Runs<'a> {
    bytes: &'a [u8],
    page: u64,
    region: u32,
}

impl Runs<'_> {
    /// A varint of bytes this crate wrote (`AccessBlock::push`).
    fn varint(&mut self) -> u64 {
        let mut v = 0u64;
        for (i, &b) in self.bytes.iter().enumerate() {
            v |= ((b & 0x7f) as u64) << (7 * i);
            if b & 0x80 == 0 {
                self.bytes = &self.bytes[i + 1..];
                return v;
            }
        }
        unreachable!("a block's bytes end with a whole varint")
    }
}

impl Iterator for Runs<'_> {
    type Item = AccessRun;

    fn next(&mut self) -> Option<AccessRun> {
        if self.bytes.is_empty() {
            return None;
        }
        self.page = self.page.wrapping_add(unzigzag(self.varint()) as u64);
        let w = self.varint();
        if w & 1 != 0 {
            self.region = self.varint() as u32;
        }
        Some(AccessRun { page: self.page, count: w >> 2, write: w & 2 != 0, region: self.region })
    }
}

/// The trailer: what the recorder saw and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AccessTotals {
    /// Data accesses (loads, stores, modifies) the instrumented run made, mapped or not.
    pub raw_accesses: u64,
    /// Of them, stores and modifies.
    pub writes: u64,
    /// Runs written (mapped accesses only).
    pub runs: u64,
    /// Accesses the recorder could not map to the native run's address space (not written).
    pub unmapped_accesses: u64,
    pub unmapped_writes: u64,
    /// Instruction fetches seen (not recorded).
    pub instructions: u64,
    /// Wall time of the instrumented run and of the native run it is compared with.
    pub valgrind_ns: u64,
    pub native_ns: u64,
    /// The instrumented run's memory system calls, and how many were matched to native ones.
    pub valgrind_syscalls: u64,
    pub matched_syscalls: u64,
}

/// Counts the bytes written through it.
struct Count<W: Write> {
    w: W,
    n: u64,
}

impl<W: Write> Write for Count<W> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let n = self.w.write(b)?;
        self.n += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }
}

enum Sink<W: Write> {
    Plain(Count<W>),
    Zstd(zstd::stream::write::Encoder<'static, Count<W>>),
}

impl<W: Write> Sink<W> {
    fn out(&mut self) -> &mut dyn Write {
        match self {
            Sink::Plain(w) => w,
            Sink::Zstd(z) => z,
        }
    }
}

/// Writes a companion file item by item, as the accesses arrive.
pub struct AccessWriter<W: Write> {
    w: Sink<W>,
    crc: Crc32,
    buf: Vec<u8>,
    regions: u32,
    anchor: u64,
    page: u64,
    region: Option<u32>,
    runs: u64,
    mapped: u64,
}

impl<W: Write> AccessWriter<W> {
    pub fn new(w: W, h: &AccessHeader) -> io::Result<Self> {
        let mut a = AccessWriter { w: Sink::Plain(Count { w, n: 0 }), crc: Crc32::default(), buf: Vec::new(), regions: 0, anchor: 0, page: 0, region: None, runs: 0, mapped: 0 };
        a.buf.extend_from_slice(ACCESS_MAGIC);
        a.buf.extend_from_slice(&ACCESS_VERSION_MAJOR.to_le_bytes());
        a.buf.extend_from_slice(&ACCESS_VERSION_MINOR.to_le_bytes());
        a.buf.extend_from_slice(&h.trace_crc.to_le_bytes());
        put_varint(&mut a.buf, h.trace_records);
        put_varint(&mut a.buf, h.page_size);
        put_varint(&mut a.buf, h.flags);
        a.emit()?;
        if h.flags & ACCESS_ZSTD != 0 {
            let Sink::Plain(c) = a.w else { unreachable!("plain until here") };
            a.w = Sink::Zstd(zstd::stream::write::Encoder::new(c, 3)?);
        }
        Ok(a)
    }

    fn emit(&mut self) -> io::Result<()> {
        self.crc.update(&self.buf);
        self.w.out().write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    /// Declare the next region; returns its number.
    pub fn region(&mut self, name: &str) -> io::Result<u32> {
        self.buf.push(TAG_REGION);
        put_bytes(&mut self.buf, name.as_bytes());
        self.emit()?;
        self.regions += 1;
        Ok(self.regions - 1)
    }

    /// Runs placed after the recording's first `anchor` records; anchors never decrease.
    pub fn block(&mut self, anchor: u64, runs: &[AccessRun]) -> io::Result<()> {
        assert!(anchor >= self.anchor, "anchors never decrease");
        for chunk in runs.chunks(MAX_BLOCK_RUNS) {
            self.buf.push(TAG_BLOCK);
            put_varint(&mut self.buf, anchor - self.anchor);
            self.anchor = anchor;
            put_varint(&mut self.buf, chunk.len() as u64);
            for r in chunk {
                assert!(r.count > 0 && r.region < self.regions, "a run has accesses and a declared region");
                put_run(&mut self.buf, &mut self.page, &mut self.region, r);
                self.runs += 1;
                self.mapped += r.count;
            }
            self.emit()?;
        }
        Ok(())
    }

    /// Runs and accesses written so far.
    pub fn written(&self) -> (u64, u64) {
        (self.runs, self.mapped)
    }

    /// Write the trailer (`runs` is the writer's own count); returns the sink and the file's size.
    pub fn finish(mut self, t: &AccessTotals) -> io::Result<(W, u64)> {
        self.buf.push(TAG_END);
        for v in [t.raw_accesses, t.writes, self.runs, t.unmapped_accesses, t.unmapped_writes, t.instructions, t.valgrind_ns, t.native_ns, t.valgrind_syscalls, t.matched_syscalls] {
            put_varint(&mut self.buf, v);
        }
        self.emit()?;
        let crc = self.crc.value().to_le_bytes();
        self.w.out().write_all(&crc)?;
        let mut c = match self.w {
            Sink::Plain(c) => c,
            Sink::Zstd(z) => z.finish()?,
        };
        c.flush()?;
        Ok((c.w, c.n))
    }
}

/// A whole companion file.
#[derive(Clone, Debug, Default)]
pub struct AccessTrace {
    pub header: AccessHeader,
    pub regions: Vec<String>,
    pub blocks: Vec<AccessBlock>,
    pub totals: AccessTotals,
}

/// Read a companion file, checking every rule of the layout (errors name the byte offset).
pub fn read_accesses(r: impl BufRead) -> Result<AccessTrace, TraceError> {
    let mut s = Src::new(r);
    s.crc_on = true;
    let mut magic = [0u8; 8];
    s.exact(&mut magic, "magic")?;
    if &magic != ACCESS_MAGIC {
        return Err(TraceError::Corrupt { offset: 0, message: "not an accesses file (magic is not THPACCES)".into() });
    }
    let mut v = [0u8; 2];
    s.exact(&mut v, "major version")?;
    let major = u16::from_le_bytes(v);
    if major != ACCESS_VERSION_MAJOR {
        return Err(TraceError::Corrupt { offset: 8, message: format!("accesses format {major}.x; this reader reads {ACCESS_VERSION_MAJOR}.x") });
    }
    s.exact(&mut v, "minor version")?;
    let mut c = [0u8; 4];
    s.exact(&mut c, "trace_crc")?;
    let header = AccessHeader { trace_crc: u32::from_le_bytes(c), trace_records: s.varint("trace_records")?, page_size: s.varint("page_size")?, flags: s.varint("flags")? };
    if !header.page_size.is_power_of_two() {
        return Err(s.corrupt(format!("page_size {} is not a power of two", header.page_size)));
    }
    if header.flags & !(ACCESS_ZSTD | ACCESS_QEMU) != 0 {
        return Err(s.corrupt(format!("unknown flags {:#x}", header.flags)));
    }
    if header.flags & ACCESS_ZSTD == 0 {
        return read_items(&mut s, header);
    }
    let (offset, crc) = (s.offset, s.crc);
    let dec = zstd::stream::read::Decoder::with_buffer(s.into_inner()).map_err(|error| TraceError::Io { offset, error })?;
    let mut z = Src::new(io::BufReader::new(dec));
    (z.offset, z.crc, z.crc_on) = (offset, crc, true);
    read_items(&mut z, header)
}

/// The items and the trailer, after the header.
fn read_items<R: BufRead>(s: &mut Src<R>, header: AccessHeader) -> Result<AccessTrace, TraceError> {
    let mut c = [0u8; 4];
    let mut out = AccessTrace { header, ..Default::default() };
    let (mut anchor, mut page, mut region, mut runs, mut mapped) = (0u64, 0u64, None::<u32>, 0u64, 0u64);
    loop {
        let at = s.offset;
        match s.u8("an item tag")? {
            TAG_REGION => out.regions.push(s.string("region name")?),
            TAG_BLOCK => {
                anchor = anchor.checked_add(s.varint("block anchor")?).ok_or_else(|| s.corrupt("anchor overflows".into()))?;
                if anchor > header.trace_records {
                    return Err(s.corrupt(format!("anchor {anchor} is past the recording's {} records", header.trace_records)));
                }
                let n = s.varint("block runs")?;
                if n == 0 || n > MAX_BLOCK_RUNS as u64 {
                    return Err(s.corrupt(format!("a block of {n} runs (1 to {MAX_BLOCK_RUNS})")));
                }
                let mut b = AccessBlock { anchor, ..Default::default() };
                for _ in 0..n {
                    page = page.wrapping_add(unzigzag(s.varint("run page")?) as u64);
                    let w = s.varint("run count")?;
                    if w >> 2 == 0 {
                        return Err(s.corrupt("a run of 0 accesses".into()));
                    }
                    if w & 1 != 0 {
                        let r = s.varint_u32("run region")?;
                        if r as usize >= out.regions.len() {
                            return Err(s.corrupt(format!("region {r} is not declared ({} are)", out.regions.len())));
                        }
                        region = Some(r);
                    }
                    let Some(r) = region else { return Err(s.corrupt("the first run names no region".into())) };
                    b.push(AccessRun { page, count: w >> 2, write: w & 2 != 0, region: r });
                    runs += 1;
                    mapped += w >> 2;
                }
                out.blocks.push(b);
            }
            TAG_END => {
                let mut f = [0u64; 10];
                for (i, x) in f.iter_mut().enumerate() {
                    *x = s.varint(["raw accesses", "writes", "runs", "unmapped accesses", "unmapped writes", "instructions", "valgrind_ns", "native_ns", "valgrind system calls", "matched system calls"][i])?;
                }
                let t = AccessTotals {
                    raw_accesses: f[0],
                    writes: f[1],
                    runs: f[2],
                    unmapped_accesses: f[3],
                    unmapped_writes: f[4],
                    instructions: f[5],
                    valgrind_ns: f[6],
                    native_ns: f[7],
                    valgrind_syscalls: f[8],
                    matched_syscalls: f[9],
                };
                if t.runs != runs {
                    return Err(s.corrupt(format!("the trailer counts {} runs, the file holds {runs}", t.runs)));
                }
                if t.raw_accesses != mapped + t.unmapped_accesses {
                    return Err(s.corrupt(format!("the trailer counts {} accesses, the runs hold {mapped} and {} are unmapped", t.raw_accesses, t.unmapped_accesses)));
                }
                let expect = s.crc.value();
                s.crc_on = false;
                s.exact(&mut c, "crc32")?;
                if u32::from_le_bytes(c) != expect {
                    return Err(s.corrupt(format!("checksum mismatch: the file says {:#010x}, its bytes give {expect:#010x}", u32::from_le_bytes(c))));
                }
                if s.try_u8()?.is_some() {
                    return Err(s.corrupt("bytes after the trailer".into()));
                }
                out.totals = t;
                return Ok(out);
            }
            t => return Err(TraceError::Corrupt { offset: at, message: format!("unknown item tag {t}") }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(flags: u64) -> (Vec<u8>, Vec<AccessBlock>) {
        let h = AccessHeader { trace_crc: 0xdead_beef, trace_records: 10, page_size: 4096, flags };
        let mut w = AccessWriter::new(Vec::new(), &h).unwrap();
        let heap = w.region("heap").unwrap();
        let stack = w.region("stack").unwrap();
        let blocks = vec![
            (2, vec![AccessRun { page: 0x7fff_fff0, count: 3, write: false, region: stack }, AccessRun { page: 0x5555_5555, count: 1, write: true, region: heap }]),
            (2, vec![AccessRun { page: 0x5555_5554, count: 7, write: true, region: heap }]),
            (9, vec![AccessRun { page: 0x7fff_fff0, count: 1, write: false, region: stack }]),
        ];
        for (anchor, runs) in &blocks {
            w.block(*anchor, runs).unwrap();
        }
        let blocks: Vec<AccessBlock> = blocks.iter().map(|(a, runs)| AccessBlock::new(*a, runs)).collect();
        let t = AccessTotals { raw_accesses: 12 + 5, writes: 8, unmapped_accesses: 5, ..Default::default() };
        let (bytes, n) = w.finish(&t).unwrap();
        assert_eq!(n, bytes.len() as u64);
        (bytes, blocks)
    }

    /// Deltas that wrap, counts and regions of every width come back as they went in, and a
    /// run beside the last one takes two bytes (by hand: page delta +1 is zigzag 2, one byte;
    /// 2 << 2 | write << 1 is 10, one byte; the region is the last one's, not written).
    #[test]
    fn a_block_gives_its_runs_back_from_a_few_bytes_each() {
        let run = |page: u64, count: u64, write: bool, region: u32| AccessRun { page, count, write, region };
        let runs = [run(0x7_ffff_ffff, 1, false, 3), run(0x8_0000_0000, 2, true, 3), run(0x10, 1 << 40, false, u32::MAX), run(u64::MAX >> 12, 5, true, 0), run(0, 1, false, 0)];
        let b = AccessBlock::new(7, &runs);
        assert_eq!((b.anchor, b.len(), b.is_empty()), (7, 5, false));
        assert_eq!(b.runs().collect::<Vec<_>>(), runs);
        // The first run: zigzag(0x7_ffff_ffff) = 0xf_ffff_fffe, 36 bits in 6 bytes; count 1 << 2
        // | region follows = 5, one byte; region 3, one byte.
        assert_eq!(AccessBlock::new(0, &runs[..1]).encoded_bytes(), 8);
        assert_eq!(AccessBlock::new(0, &runs[..2]).encoded_bytes(), 8 + 2);
        assert!(AccessBlock::default().is_empty() && AccessBlock::default().runs().next().is_none());
    }

    #[test]
    fn a_companion_file_reads_back_and_every_byte_flip_is_detected_or_harmless() {
        for flags in [0, ACCESS_ZSTD] {
            one(flags);
        }
    }

    fn one(flags: u64) {
        let (bytes, blocks) = sample(flags);
        let t = read_accesses(&bytes[..]).unwrap();
        assert_eq!(t.blocks, blocks);
        let runs: Vec<Vec<AccessRun>> = t.blocks.iter().map(|b| b.runs().collect()).collect();
        assert_eq!(runs.iter().map(Vec::len).collect::<Vec<_>>(), [2, 1, 1]);
        assert_eq!(runs[0][1], AccessRun { page: 0x5555_5555, count: 1, write: true, region: 0 });
        assert_eq!(runs[2][0], AccessRun { page: 0x7fff_fff0, count: 1, write: false, region: 1 });
        assert_eq!(t.regions, ["heap", "stack"]);
        assert_eq!((t.totals.runs, t.totals.unmapped_accesses, t.header.trace_crc), (4, 5, 0xdead_beef));
        // Every flip is refused; in a zstd stream, a flip of a frame-header bit that does not
        // change the decompressed bytes (the window size) may also read them back unchanged.
        for i in 0..bytes.len() {
            for bit in [0x01, 0x80] {
                let mut b = bytes.clone();
                b[i] ^= bit;
                match read_accesses(&b[..]) {
                    Err(_) => {}
                    Ok(t2) => assert!(flags & ACCESS_ZSTD != 0 && t2.blocks == t.blocks && t2.totals == t.totals && t2.regions == t.regions, "flip {bit:#x} at byte {i} not detected"),
                }
            }
        }
        assert!(read_accesses(&bytes[..bytes.len() - 1]).is_err());
    }
}
