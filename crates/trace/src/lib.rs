//! The thplab trace format: a recording of what a program did to its address space (memory
//! system calls with arguments and results, every page fault, tasks, mappings), compact and
//! versioned, with a reader that never panics on bad input (docs/trace-format.md).
//!
//! This crate does no I/O of its own: [`TraceWriter`] writes to any `std::io::Write`,
//! [`TraceReader`] reads from any `std::io::Read`. [`text`] renders records as lines of text and
//! [`stats`] summarises a trace.
//!
//! Module map:
//! - [`codec`]: the byte layout's primitives: LEB128, zigzag, length-prefixed bytes, CRC-32C
//!   blocks.
//! - [`event`]: the decoded contents: header, events, trailer.
//! - [`write`]: `TraceWriter`: events in, bytes out.
//! - [`read`]: `TraceReader`: bytes in, events out, every malformed input a `TraceError`.
//! - [`text`]: records as lines of text (`thplab trace show`).
//! - [`stats`]: a summary of a trace (`thplab trace stats`).
//! - [`accesses`]: the `FILE.accesses` companion of `record --accesses`.

pub mod accesses;
mod codec;
mod event;
mod read;
pub mod stats;
pub mod text;
mod write;

pub use codec::{MAGIC, VERSION_MAJOR, VERSION_MINOR};
pub use event::{
    flags, kind, kind_name, perm, Event, EventBody, Header, MapEntry, MapInfo, MountEntry, PathInfo,
    Syscall, SyscallKind, Trailer, UffdIoctl, TMPFS_MAGIC,
};
pub use read::{read_all, read_salvage, Salvaged, TraceReader};
pub use write::TraceWriter;

/// Why a trace could not be read: where (byte offset from the start of the file) and what was
/// expected there.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("byte {offset}: the file ends too early: expected {expected}")]
    Truncated { offset: u64, expected: String },
    #[error("byte {offset}: {message}")]
    Corrupt { offset: u64, message: String },
    #[error("byte {offset}: read error: {error}")]
    Io { offset: u64, error: std::io::Error },
}

impl TraceError {
    /// The byte offset the error refers to.
    pub fn offset(&self) -> u64 {
        match self {
            TraceError::Truncated { offset, .. }
            | TraceError::Corrupt { offset, .. }
            | TraceError::Io { offset, .. } => *offset,
        }
    }
}
