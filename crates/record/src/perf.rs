//! perf_event_open on tracepoints: the attribute structure (`struct perf_event_attr`, version 8,
//! 136 bytes), opening per-CPU inherited events on one task, redirecting them into one ring buffer
//! per CPU, and draining a ring buffer (`struct perf_event_mmap_page`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};

pub const PERF_TYPE_TRACEPOINT: u32 = 2;

pub const SAMPLE_TID: u64 = 1 << 1;
pub const SAMPLE_TIME: u64 = 1 << 2;
pub const SAMPLE_CPU: u64 = 1 << 7;
pub const SAMPLE_RAW: u64 = 1 << 10;
/// `read_format`: read() returns the samples the event could not write (`lost_samples`, 6.0).
pub const FORMAT_LOST: u64 = 1 << 4;

pub const RECORD_LOST: u32 = 2;
pub const RECORD_COMM: u32 = 3;
pub const RECORD_EXIT: u32 = 4;
pub const RECORD_FORK: u32 = 7;
pub const RECORD_SAMPLE: u32 = 9;
pub const RECORD_MMAP2: u32 = 10;
pub const MISC_COMM_EXEC: u16 = 1 << 13;

/// Bits of the flags word of `perf_event_attr` (include/uapi/linux/perf_event.h).
pub mod bit {
    pub const DISABLED: u64 = 1 << 0;
    pub const INHERIT: u64 = 1 << 1;
    pub const MMAP: u64 = 1 << 8;
    pub const COMM: u64 = 1 << 9;
    pub const ENABLE_ON_EXEC: u64 = 1 << 12;
    pub const TASK: u64 = 1 << 13;
    pub const WATERMARK: u64 = 1 << 14;
    pub const MMAP_DATA: u64 = 1 << 17;
    pub const SAMPLE_ID_ALL: u64 = 1 << 18;
    pub const MMAP2: u64 = 1 << 23;
    pub const COMM_EXEC: u64 = 1 << 24;
    pub const USE_CLOCKID: u64 = 1 << 25;
}

const PERF_EVENT_IOC_SET_OUTPUT: libc::c_ulong = 0x2405;

/// `struct perf_event_attr`, PERF_ATTR_SIZE_VER8.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct PerfEventAttr {
    pub type_: u32,
    pub size: u32,
    pub config: u64,
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    pub flags: u64,
    pub wakeup_watermark: u32,
    pub bp_type: u32,
    pub config1: u64,
    pub config2: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub sample_regs_intr: u64,
    pub aux_watermark: u32,
    pub sample_max_stack: u16,
    pub reserved_2: u16,
    pub aux_sample_size: u32,
    pub aux_action: u32,
    pub sig_data: u64,
    pub config3: u64,
}

const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == 136);

/// Open one event (`perf_event_open(attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC)`).
pub fn open(attr: &PerfEventAttr, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
    // SAFETY: attr points to a live, correctly sized perf_event_attr.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const PerfEventAttr,
            pid,
            cpu,
            -1i32,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Send `fd`'s samples into `target`'s ring buffer (same CPU).
pub fn set_output(fd: &OwnedFd, target: &OwnedFd) -> io::Result<()> {
    // SAFETY: both are perf event descriptors we own.
    let r = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            PERF_EVENT_IOC_SET_OUTPUT as _,
            target.as_raw_fd(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The records an event could not write to its ring buffer (opened with [`FORMAT_LOST`]). The
/// kernel charges a loss to the parent of an inherited event (kernel/events/ring_buffer.c:
/// `__perf_output_begin`), so the events the recorder opened hold the whole program's.
pub fn lost_samples(fd: &OwnedFd) -> io::Result<u64> {
    let mut v = [0u64; 2];
    // SAFETY: reads at most 16 bytes into v, a value and the lost count.
    let n = unsafe { libc::read(fd.as_raw_fd(), v.as_mut_ptr().cast(), 16) };
    if n != 16 {
        return Err(if n < 0 { io::Error::last_os_error() } else { io::Error::other(format!("read {n} bytes of a perf event")) });
    }
    Ok(v[1])
}

/// Attach a tracepoint filter (`PERF_EVENT_IOC_SET_FILTER`).
pub fn set_filter(fd: &OwnedFd, filter: &std::ffi::CStr) -> io::Result<()> {
    const PERF_EVENT_IOC_SET_FILTER: libc::c_ulong = 0x4008_2406;
    // SAFETY: fd is a perf event descriptor; filter is a NUL-terminated string.
    let r = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            PERF_EVENT_IOC_SET_FILTER as _,
            filter.as_ptr(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A mapped perf ring buffer: one metadata page, then `data_size` bytes of records.
pub struct RingBuffer {
    base: *mut u8,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
    scratch: Vec<u8>,
}

// SAFETY: the mapping is owned by this value and only touched through &mut self.
unsafe impl Send for RingBuffer {}

impl RingBuffer {
    /// Map `1 + data_pages` pages of `fd` (data_pages a power of two).
    pub fn map(fd: &OwnedFd, data_pages: usize) -> io::Result<RingBuffer> {
        let page = page_size();
        let map_len = (1 + data_pages) * page;
        // SAFETY: a fresh shared mapping of a perf fd; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = p as *mut u8;
        // SAFETY: the metadata page is mapped; data_offset/data_size are at 1040/1048.
        let (off, size) = unsafe {
            (
                std::ptr::read_volatile(base.add(1040) as *const u64),
                std::ptr::read_volatile(base.add(1048) as *const u64),
            )
        };
        let (data_offset, data_size) = if size == 0 {
            (page, data_pages * page)
        } else {
            (off as usize, size as usize)
        };
        Ok(RingBuffer {
            base,
            map_len,
            data_offset,
            data_size,
            scratch: Vec::new(),
        })
    }

    /// Bytes of record space.
    pub fn data_size(&self) -> usize {
        self.data_size
    }

    /// Call `f(type, misc, body)` for every complete record in the buffer, then free the space.
    /// Returns the number of bytes consumed.
    pub fn drain(&mut self, mut f: impl FnMut(u32, u16, &[u8])) -> usize {
        // SAFETY: data_head (offset 1024) and data_tail (1032) are u64 fields of the metadata
        // page, which stays mapped while self lives; the data area is [data_offset, +data_size).
        unsafe {
            let head_p = self.base.add(1024) as *const u64;
            let tail_p = self.base.add(1032) as *mut u64;
            let head = std::ptr::read_volatile(head_p);
            fence(Ordering::Acquire);
            let mut tail = std::ptr::read_volatile(tail_p);
            let start = tail;
            let data = self.base.add(self.data_offset);
            let size = self.data_size as u64;
            while tail < head {
                let off = (tail % size) as usize;
                let mut hdr = [0u8; 8];
                copy_wrapped(data, self.data_size, off, &mut hdr);
                let ty = u32::from_ne_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
                let misc = u16::from_ne_bytes([hdr[4], hdr[5]]);
                let len = u16::from_ne_bytes([hdr[6], hdr[7]]) as usize;
                if len < 8 || tail + len as u64 > head {
                    // A malformed size would loop forever: drop the rest.
                    tail = head;
                    break;
                }
                let body_len = len - 8;
                let body_off = (off + 8) % self.data_size;
                if body_off + body_len <= self.data_size {
                    f(
                        ty,
                        misc,
                        std::slice::from_raw_parts(data.add(body_off), body_len),
                    );
                } else {
                    self.scratch.resize(body_len, 0);
                    copy_wrapped(data, self.data_size, body_off, &mut self.scratch);
                    f(ty, misc, &self.scratch);
                }
                tail += len as u64;
            }
            fence(Ordering::Release);
            std::ptr::write_volatile(tail_p, tail);
            (tail - start) as usize
        }
    }
}

/// Copy `out.len()` bytes starting at `off` of a circular area of `size` bytes at `data`.
///
/// # Safety
/// `data` must point to `size` readable bytes and `off < size`, `out.len() <= size`.
unsafe fn copy_wrapped(data: *const u8, size: usize, off: usize, out: &mut [u8]) {
    let first = (size - off).min(out.len());
    std::ptr::copy_nonoverlapping(data.add(off), out.as_mut_ptr(), first);
    if first < out.len() {
        std::ptr::copy_nonoverlapping(data, out.as_mut_ptr().add(first), out.len() - first);
    }
}

impl Drop for RingBuffer {
    fn drop(&mut self) {
        // SAFETY: base/map_len are the mapping made in map().
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.map_len);
        }
    }
}

pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// The online CPUs (/sys/devices/system/cpu/online: `0-3,5`).
pub fn online_cpus() -> Vec<i32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut v = Vec::new();
    for part in text.trim().split(',').filter(|s| !s.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<i32>(), b.parse::<i32>()) {
            v.extend(a..=b);
        }
    }
    if v.is_empty() {
        // SAFETY: sysconf has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1);
        v.extend(0..n as i32);
    }
    v
}

/// A little-endian/native reader over a record body.
pub struct Body<'a> {
    pub b: &'a [u8],
    pub at: usize,
}

impl<'a> Body<'a> {
    pub fn new(b: &'a [u8]) -> Self {
        Body { b, at: 0 }
    }

    pub fn u32(&mut self) -> Option<u32> {
        let v = self.b.get(self.at..self.at + 4)?;
        self.at += 4;
        Some(u32::from_ne_bytes(v.try_into().ok()?))
    }

    pub fn u64(&mut self) -> Option<u64> {
        let v = self.b.get(self.at..self.at + 8)?;
        self.at += 8;
        Some(u64::from_ne_bytes(v.try_into().ok()?))
    }

    /// A NUL-terminated string padded to 8 bytes, followed by `tail` bytes of sample_id.
    pub fn cstr_before(&mut self, tail: usize) -> Option<&'a [u8]> {
        let end = self.b.len().checked_sub(tail)?;
        let s = self.b.get(self.at..end)?;
        self.at = end;
        let n = s.iter().position(|&c| c == 0).unwrap_or(s.len());
        Some(&s[..n])
    }
}
