//! The primitives of the byte layout: LEB128 varints, zigzag signed integers, length-prefixed
//! byte strings, CRC-32, and the reading side's byte source that knows its offset and says what
//! it expected when the bytes run out.

use std::io::{self, BufRead};

use crate::TraceError;

/// `THPTRACE`: the first eight bytes of every trace.
pub const MAGIC: &[u8; 8] = b"THPTRACE";
/// The major version this thplab writes. 3.0 put the records in checksummed blocks; a reader
/// reads 1.x, 2.x and 3.x files, and refuses any other major version.
pub const VERSION_MAJOR: u16 = 3;
/// A reader accepts a newer minor version (new header fields at the end of the header, which it
/// skips). A record kind added in a minor version (2.1: `answered`, 2.4: `exec_stack`, 2.5: the
/// vmsplice, io_uring_register and process_vm_writev calls, 2.6: `uffd`) is written only where it
/// happened; an older reader refuses a file that holds one (unknown record kind), never misreads
/// it. Other new record kinds need a new major version.
pub const VERSION_MINOR: u16 = 0;
/// The last minor version of 2.x (2.6): its header and records are 3.0's, without blocks.
pub const LAST_V2_MINOR: u16 = 6;
/// 3.x: a block is closed once its records take this many bytes (the last record may take it
/// past); damage loses at most the records of the block it falls in.
pub const BLOCK_BYTES: usize = 4096;
/// 3.x: the longest block a reader accepts (one record longer than this cannot be written).
pub const MAX_BLOCK: u64 = 1 << 26;
/// Longest byte string (path, argument, comm) a reader accepts.
pub const MAX_STRING: u64 = 1 << 22;
/// Longest header a reader accepts.
pub const MAX_HEADER: u64 = 1 << 26;

/// Tag bit: a thread switch (varint tid, varint pid) follows the tag.
pub const TAG_SWITCH: u8 = 0x40;
/// Tag bit, system calls only: the call did not return while recorded (no duration, no result).
pub const TAG_UNFINISHED: u8 = 0x80;
/// The kind bits of a tag.
pub const TAG_KIND: u8 = 0x3f;

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

pub fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// CRC-32 (IEEE 802.3, as zlib's `crc32`).
#[derive(Clone, Copy, Debug)]
pub struct Crc32(u32);

const fn crc_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

static CRC_TABLE: [u32; 256] = crc_table();

impl Default for Crc32 {
    fn default() -> Self {
        Crc32(0xffff_ffff)
    }
}

impl Crc32 {
    pub fn update(&mut self, bytes: &[u8]) {
        let mut c = self.0;
        for &b in bytes {
            c = CRC_TABLE[((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
        }
        self.0 = c;
    }

    pub fn value(&self) -> u32 {
        !self.0
    }
}

/// CRC-32C (Castagnoli, as iSCSI, ext4 and btrfs use): a 3.x header's and each block's checksum.
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// The reading side: bytes from a `BufRead`, with the offset of the next byte, a running CRC
/// (while `crc_on`), and errors that name the offset and what was expected there.
pub struct Src<R> {
    r: R,
    pub offset: u64,
    pub crc: Crc32,
    pub crc_on: bool,
    /// While set, every byte read is appended to it too (a 3.x header or block, for its CRC-32C).
    pub tap: Option<Vec<u8>>,
}

impl<R: BufRead> Src<R> {
    pub fn new(r: R) -> Self {
        Src {
            r,
            offset: 0,
            crc: Crc32::default(),
            crc_on: false,
            tap: None,
        }
    }

    fn io_err(&self, e: io::Error) -> TraceError {
        TraceError::Io {
            offset: self.offset,
            error: e,
        }
    }

    pub fn truncated(&self, expected: &str) -> TraceError {
        TraceError::Truncated {
            offset: self.offset,
            expected: expected.to_string(),
        }
    }

    /// The reader, for another layer over what follows.
    pub fn into_inner(self) -> R {
        self.r
    }

    /// A corrupt-input error at the current offset.
    pub fn corrupt(&self, message: String) -> TraceError {
        TraceError::Corrupt { offset: self.offset, message }
    }

    /// The next byte, or `None` at the end of the input.
    pub fn try_u8(&mut self) -> Result<Option<u8>, TraceError> {
        let b = loop {
            match self.r.fill_buf() {
                Ok([]) => return Ok(None),
                Ok(buf) => break buf[0],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.io_err(e)),
            }
        };
        self.r.consume(1);
        if self.crc_on {
            self.crc.update(&[b]);
        }
        if let Some(t) = &mut self.tap {
            t.push(b);
        }
        self.offset += 1;
        Ok(Some(b))
    }

    pub fn u8(&mut self, expected: &str) -> Result<u8, TraceError> {
        self.try_u8()?.ok_or_else(|| self.truncated(expected))
    }

    pub fn exact(&mut self, buf: &mut [u8], expected: &str) -> Result<(), TraceError> {
        for b in buf.iter_mut() {
            *b = self.u8(expected)?;
        }
        Ok(())
    }

    /// Read `n` bytes into the tap (which must be set), as they arrive: a length read from the
    /// file cannot allocate more than the file holds.
    pub fn tap_n(&mut self, mut n: u64, expected: &str) -> Result<(), TraceError> {
        while n > 0 {
            let buf = loop {
                match self.r.fill_buf() {
                    Ok([]) => return Err(self.truncated(expected)),
                    Ok(buf) => break buf,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(self.io_err(e)),
                }
            };
            let k = buf.len().min(n.min(1 << 20) as usize);
            if self.crc_on {
                self.crc.update(&buf[..k]);
            }
            self.tap.as_mut().expect("tap_n needs the tap").extend_from_slice(&buf[..k]);
            self.r.consume(k);
            self.offset += k as u64;
            n -= k as u64;
        }
        Ok(())
    }

    pub fn varint(&mut self, expected: &str) -> Result<u64, TraceError> {
        // Fast path: a whole varint in the reader's buffer (nearly always), decoded there.
        if let Ok(buf) = self.r.fill_buf() {
            if let Some(end) = buf.iter().take(9).position(|&b| b & 0x80 == 0) {
                let v = buf[..=end].iter().enumerate().fold(0u64, |v, (i, &b)| v | ((b & 0x7f) as u64) << (7 * i));
                if self.crc_on {
                    self.crc.update(&buf[..=end]);
                }
                if let Some(t) = &mut self.tap {
                    t.extend_from_slice(&buf[..=end]);
                }
                self.r.consume(end + 1);
                self.offset += end as u64 + 1;
                return Ok(v);
            }
        }
        let start = self.offset;
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = self.u8(expected)?;
            let bits = (b & 0x7f) as u64;
            if i == 9 && bits > 1 {
                return Err(TraceError::Corrupt {
                    offset: start,
                    message: format!("{expected}: varint overflows 64 bits"),
                });
            }
            v |= bits << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(TraceError::Corrupt {
            offset: start,
            message: format!("{expected}: varint longer than 10 bytes"),
        })
    }

    pub fn varint_u32(&mut self, expected: &str) -> Result<u32, TraceError> {
        let start = self.offset;
        let v = self.varint(expected)?;
        u32::try_from(v).map_err(|_| TraceError::Corrupt {
            offset: start,
            message: format!("{expected}: {v} does not fit 32 bits"),
        })
    }

    pub fn zigzag(&mut self, expected: &str) -> Result<i64, TraceError> {
        Ok(unzigzag(self.varint(expected)?))
    }

    /// A length-prefixed byte string of at most [`MAX_STRING`] bytes. Memory grows only as bytes
    /// arrive, so a corrupt length cannot allocate more than the input holds.
    pub fn bytes(&mut self, expected: &str) -> Result<Vec<u8>, TraceError> {
        let start = self.offset;
        let len = self.varint(expected)?;
        if len > MAX_STRING {
            return Err(TraceError::Corrupt {
                offset: start,
                message: format!("{expected}: length {len} exceeds the limit {MAX_STRING}"),
            });
        }
        let mut v = Vec::with_capacity(len.min(4096) as usize);
        for _ in 0..len {
            v.push(self.u8(expected)?);
        }
        Ok(v)
    }

    pub fn string(&mut self, expected: &str) -> Result<String, TraceError> {
        let start = self.offset;
        let b = self.bytes(expected)?;
        String::from_utf8(b).map_err(|_| TraceError::Corrupt {
            offset: start,
            message: format!("{expected}: not UTF-8"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_the_standard_check_value() {
        let mut c = Crc32::default();
        c.update(b"123456789");
        assert_eq!(c.value(), 0xcbf4_3926);
        // CRC-32C's check value (RFC 3720, B.4).
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn varints_and_zigzag_round_trip_at_the_edges() {
        for v in [
            0u64,
            1,
            127,
            128,
            16383,
            16384,
            u32::MAX as u64,
            u64::MAX - 1,
            u64::MAX,
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            let mut s = Src::new(&out[..]);
            assert_eq!(s.varint("v").unwrap(), v);
            assert!(s.try_u8().unwrap().is_none());
        }
        for v in [0i64, 1, -1, 4096, -4096, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }

    #[test]
    fn an_overlong_varint_is_an_error_not_a_panic() {
        let bytes = [0xffu8; 11];
        let mut s = Src::new(&bytes[..]);
        let e = s.varint("test value").unwrap_err().to_string();
        assert!(e.contains("byte 0") && e.contains("test value"), "{e}");
    }
}
