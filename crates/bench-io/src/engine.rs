//! The three ways a read is issued: io_uring (IORING_OP_READ), Linux AIO (io_setup, io_submit
//! and io_getevents through raw syscalls, as libaio does) and pread. Each keeps `qd` reads in
//! flight, slot `i` reading into its own `bs`-sized part of the buffer, at consecutive offsets
//! of the target (wrapping at its end), until `time` has passed; then it drains.

use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::buffer::Buffer;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    IoUring,
    Aio,
    Pread,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::IoUring => "io_uring",
            Engine::Aio => "aio",
            Engine::Pread => "pread",
        }
    }

    pub fn parse(s: &str) -> Result<Engine, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "io_uring" | "uring" | "io-uring" => Ok(Engine::IoUring),
            "aio" | "libaio" => Ok(Engine::Aio),
            "pread" | "sync" => Ok(Engine::Pread),
            _ => Err(format!("engine '{s}': give io_uring, aio or pread")),
        }
    }
}

/// What one timed run did.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunStats {
    pub bytes: u64,
    pub ops: u64,
    pub wall: Duration,
    /// User + system CPU time of this thread (getrusage(RUSAGE_THREAD)).
    pub cpu: Duration,
}

/// The calling thread's user + system time.
pub fn thread_cpu() -> Duration {
    // SAFETY: getrusage fills the struct.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The target of the reads: an fd opened with O_DIRECT and its size.
pub struct Source {
    pub fd: RawFd,
    pub size: u64,
}

struct Offsets {
    next: u64,
    bs: u64,
    size: u64,
}

impl Offsets {
    fn take(&mut self) -> u64 {
        if self.next + self.bs > self.size {
            self.next = 0;
        }
        let o = self.next;
        self.next += self.bs;
        o
    }
}

fn slot_addr(buf: &Buffer, slot: usize, bs: u64) -> *mut u8 {
    buf.at((slot as u64 * bs) % buf.len)
}

/// Run `engine` for `time` (at least one read per slot).
pub fn run(engine: Engine, src: &Source, buf: &Buffer, bs: u64, qd: usize, time: Duration) -> Result<RunStats, String> {
    if bs > src.size {
        return Err(format!("block size {bs} is larger than the target ({} bytes)", src.size));
    }
    let mut offs = Offsets { next: 0, bs, size: src.size / bs * bs };
    let cpu0 = thread_cpu();
    let t0 = Instant::now();
    let (bytes, ops) = match engine {
        Engine::Pread => run_pread(src, buf, bs, &mut offs, t0, time)?,
        Engine::Aio => run_aio(src, buf, bs, qd, &mut offs, t0, time)?,
        Engine::IoUring => run_uring(src, buf, bs, qd, &mut offs, t0, time)?,
    };
    Ok(RunStats { bytes, ops, wall: t0.elapsed(), cpu: thread_cpu() - cpu0 })
}

fn short_read(n: i64, bs: u64, off: u64) -> String {
    if n < 0 {
        format!("read of {bs} bytes at offset {off} failed: {}", std::io::Error::from_raw_os_error(-n as i32))
    } else {
        format!("read of {bs} bytes at offset {off} returned {n}")
    }
}

fn run_pread(src: &Source, buf: &Buffer, bs: u64, offs: &mut Offsets, t0: Instant, time: Duration) -> Result<(u64, u64), String> {
    let (mut bytes, mut ops) = (0, 0);
    while ops == 0 || t0.elapsed() < time {
        let off = offs.take();
        // SAFETY: the destination lies in the buffer (slot 0, bs bytes).
        let n = unsafe { libc::pread(src.fd, slot_addr(buf, 0, bs).cast(), bs as usize, off as libc::off_t) };
        let n = if n < 0 { -(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO) as i64) } else { n as i64 };
        if n != bs as i64 {
            return Err(short_read(n, bs, off));
        }
        bytes += bs;
        ops += 1;
    }
    Ok((bytes, ops))
}

/// `struct iocb` of include/uapi/linux/aio_abi.h (little-endian x86-64 layout).
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct Iocb {
    aio_data: u64,
    aio_key: u32,
    aio_rw_flags: i32,
    aio_lio_opcode: u16,
    aio_reqprio: i16,
    aio_fildes: u32,
    aio_buf: u64,
    aio_nbytes: u64,
    aio_offset: i64,
    aio_reserved2: u64,
    aio_flags: u32,
    aio_resfd: u32,
}

/// `struct io_event`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

const IOCB_CMD_PREAD: u16 = 0;

struct AioCtx(libc::c_ulong);

impl Drop for AioCtx {
    fn drop(&mut self) {
        // SAFETY: destroying the context we set up.
        unsafe { libc::syscall(libc::SYS_io_destroy, self.0) };
    }
}

fn run_aio(src: &Source, buf: &Buffer, bs: u64, qd: usize, offs: &mut Offsets, t0: Instant, time: Duration) -> Result<(u64, u64), String> {
    let mut ctx: libc::c_ulong = 0;
    // SAFETY: io_setup writes the context id.
    if unsafe { libc::syscall(libc::SYS_io_setup, qd as libc::c_long, &mut ctx as *mut libc::c_ulong) } != 0 {
        return Err(format!("io_setup({qd}) failed: {} (see /proc/sys/fs/aio-max-nr)", std::io::Error::last_os_error()));
    }
    let ctx = AioCtx(ctx);
    let mut iocbs = vec![Iocb::default(); qd];
    let mut ptrs: Vec<*mut Iocb> = Vec::with_capacity(qd);
    let mut events = vec![IoEvent::default(); qd];
    let prep = |cb: &mut Iocb, slot: usize, off: u64| {
        *cb = Iocb {
            aio_data: slot as u64,
            aio_lio_opcode: IOCB_CMD_PREAD,
            aio_fildes: src.fd as u32,
            aio_buf: slot_addr(buf, slot, bs) as u64,
            aio_nbytes: bs,
            aio_offset: off as i64,
            ..Iocb::default()
        };
    };
    let submit = |ptrs: &mut Vec<*mut Iocb>| -> Result<(), String> {
        let mut done = 0;
        while done < ptrs.len() {
            // SAFETY: the iocbs outlive their completion (we drain before returning).
            let n = unsafe {
                libc::syscall(libc::SYS_io_submit, ctx.0, (ptrs.len() - done) as libc::c_long, ptrs[done..].as_mut_ptr())
            };
            if n <= 0 {
                return Err(format!("io_submit failed: {}", std::io::Error::last_os_error()));
            }
            done += n as usize;
        }
        ptrs.clear();
        Ok(())
    };
    for (slot, cb) in iocbs.iter_mut().enumerate() {
        prep(cb, slot, offs.take());
    }
    for cb in iocbs.iter_mut() {
        ptrs.push(cb as *mut Iocb);
    }
    submit(&mut ptrs)?;
    let (mut bytes, mut ops, mut inflight) = (0, 0, qd);
    while inflight > 0 {
        // SAFETY: events has room for qd entries.
        let n = unsafe {
            libc::syscall(
                libc::SYS_io_getevents,
                ctx.0,
                1 as libc::c_long,
                qd as libc::c_long,
                events.as_mut_ptr(),
                std::ptr::null_mut::<libc::timespec>(),
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(format!("io_getevents failed: {e}"));
        }
        let more = t0.elapsed() < time;
        for ev in &events[..n as usize] {
            let slot = ev.data as usize;
            if ev.res != bs as i64 {
                return Err(short_read(ev.res, bs, iocbs[slot].aio_offset as u64));
            }
            bytes += bs;
            ops += 1;
            inflight -= 1;
            if more {
                prep(&mut iocbs[slot], slot, offs.take());
                ptrs.push(&mut iocbs[slot] as *mut Iocb);
                inflight += 1;
            }
        }
        submit(&mut ptrs)?;
    }
    drop(ctx);
    Ok((bytes, ops))
}

fn run_uring(src: &Source, buf: &Buffer, bs: u64, qd: usize, offs: &mut Offsets, t0: Instant, time: Duration) -> Result<(u64, u64), String> {
    use io_uring::{opcode, types, IoUring};
    let mut ring = IoUring::new(qd.next_power_of_two() as u32).map_err(|e| format!("io_uring_setup failed: {e}"))?;
    let mut slot_off = vec![0u64; qd];
    let push = |ring: &mut IoUring, slot: usize, off: u64| -> Result<(), String> {
        let e = opcode::Read::new(types::Fd(src.fd), slot_addr(buf, slot, bs), bs as u32)
            .offset(off)
            .build()
            .user_data(slot as u64);
        // SAFETY: the buffer outlives the request (we drain before returning).
        unsafe { ring.submission().push(&e) }.map_err(|_| "io_uring submission queue full".to_string())
    };
    for (slot, so) in slot_off.iter_mut().enumerate() {
        *so = offs.take();
        push(&mut ring, slot, *so)?;
    }
    let (mut bytes, mut ops, mut inflight) = (0, 0, qd);
    while inflight > 0 {
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(format!("io_uring_enter failed: {e}")),
        }
        let more = t0.elapsed() < time;
        let done: Vec<(usize, i32)> = ring.completion().map(|c| (c.user_data() as usize, c.result())).collect();
        for (slot, res) in done {
            if res as i64 != bs as i64 {
                return Err(short_read(res as i64, bs, slot_off[slot]));
            }
            bytes += bs;
            ops += 1;
            inflight -= 1;
            if more {
                slot_off[slot] = offs.take();
                push(&mut ring, slot, slot_off[slot])?;
                inflight += 1;
            }
        }
    }
    Ok((bytes, ops))
}
