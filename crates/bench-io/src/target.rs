//! Where the reads come from, each opened with O_DIRECT (the page cache bypassed):
//!
//! - `file`: a file the benchmark writes under a directory of this machine's filesystem
//!   (default /var/tmp), fsyncs, opens with O_DIRECT and unlinks at once, so that no exit path
//!   leaves it behind.
//! - `ram`: a loop device over a file on a tmpfs. The tmpfs is mounted in a private mount
//!   namespace of this process (`unshare(CLONE_NEWNS)`, `/` made private), so it disappears
//!   with the process; the loop device is bound with LO_FLAGS_AUTOCLEAR (and read-only), so the
//!   kernel detaches it when its last descriptor closes, also when the process is killed. The
//!   file is unlinked once bound. brd cannot be loaded on this kernel (`nomodule`); the loop
//!   device carries the reads to tmpfs pages, so the memory path dominates.
//! - `device PATH`: a block device given by the user, opened read-only.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::engine::Source;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    File,
    Ram,
    Device(String),
}

impl TargetKind {
    pub fn name(&self) -> String {
        match self {
            TargetKind::File => "file".into(),
            TargetKind::Ram => "ram".into(),
            TargetKind::Device(p) => format!("device {p}"),
        }
    }
}

/// An open target; closing it (drop) detaches the loop device and unmounts the tmpfs.
pub struct Target {
    pub kind: TargetKind,
    pub fd: OwnedFd,
    pub size: u64,
    /// What it is, for the report: `ext4 file /var/tmp`, `/dev/loop3 over tmpfs`.
    pub what: String,
    _loop: Option<OwnedFd>,
    mount: Option<PathBuf>,
}

impl Target {
    pub fn source(&self) -> Source {
        Source { fd: self.fd.as_raw_fd(), size: self.size }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(m) = self.mount.take() {
            // The loop device (autoclear) lets go of the file when its fds close: ours first.
            let fd = std::mem::replace(&mut self.fd, dev_null());
            drop(fd);
            self._loop.take();
            if let Ok(c) = CString::new(m.as_os_str().as_encoded_bytes()) {
                // SAFETY: unmounting our own private mount (lazily, should the loop still hold it).
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
            let _ = std::fs::remove_dir(&m);
        }
    }
}

fn dev_null() -> OwnedFd {
    OwnedFd::from(std::fs::File::open("/dev/null").expect("/dev/null"))
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_encoded_bytes()).expect("path without NUL")
}

fn last(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

fn open_direct(path: &Path, write: bool) -> Result<OwnedFd, String> {
    let flags = if write { libc::O_RDWR } else { libc::O_RDONLY } | libc::O_DIRECT | libc::O_CLOEXEC;
    // SAFETY: open on a valid path.
    let fd = unsafe { libc::open(cstr(path).as_ptr(), flags) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINVAL) {
            return Err(format!("{}: this filesystem does not support O_DIRECT", path.display()));
        }
        return Err(format!("cannot open {} with O_DIRECT: {e}", path.display()));
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Write `size` bytes of a pattern into a new file at `path` (exclusive create) and fsync it.
fn fill_file(path: &Path, size: u64) -> Result<(), String> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let chunk: Vec<u8> = (0..(1u32 << 20)).map(|i| (i.wrapping_mul(2654435761) >> 24) as u8).collect();
    let mut done = 0;
    while done < size {
        let n = (size - done).min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n]).map_err(|e| {
            let _ = std::fs::remove_file(path);
            format!("cannot write {}: {e}", path.display())
        })?;
        done += n as u64;
    }
    f.sync_all().map_err(|e| format!("cannot fsync {}: {e}", path.display()))
}

/// The `file` target: `size` bytes in a new file under `dir`.
pub fn open_file(dir: &Path, size: u64) -> Result<Target, String> {
    let path = dir.join(format!("thplab-bench-io.{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    fill_file(&path, size)?;
    let fd = open_direct(&path, false);
    let _ = std::fs::remove_file(&path);
    let fd = fd?;
    let fs = fs_type(dir);
    Ok(Target { kind: TargetKind::File, fd, size, what: format!("{fs} file in {}", dir.display()), _loop: None, mount: None })
}

fn fs_type(dir: &Path) -> String {
    // SAFETY: statfs fills the struct.
    let t = unsafe {
        let mut s: libc::statfs = std::mem::zeroed();
        if libc::statfs(cstr(dir).as_ptr(), &mut s) != 0 {
            return "unknown-fs".into();
        }
        s.f_type as u64
    };
    match t {
        0xEF53 => "ext4".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683E => "btrfs".into(),
        0x0102_1994 => "tmpfs".into(),
        0x794c_7630 => "overlayfs".into(),
        x => format!("fs-{x:#x}"),
    }
}

/// A user-given block device, read-only.
pub fn open_device(path: &Path) -> Result<Target, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("--device {}: {e}", path.display()))?;
    use std::os::unix::fs::FileTypeExt;
    if !meta.file_type().is_block_device() {
        return Err(format!("--device {}: not a block device", path.display()));
    }
    let fd = open_direct(path, false)?;
    let size = blk_size(&fd).map_err(|e| format!("--device {}: {e}", path.display()))?;
    if size < (1 << 20) {
        return Err(format!("--device {}: {size} bytes; the benchmark needs at least 1 MiB", path.display()));
    }
    Ok(Target { kind: TargetKind::Device(path.display().to_string()), fd, size, what: format!("{} (read-only)", path.display()), _loop: None, mount: None })
}

const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;

fn blk_size(fd: &OwnedFd) -> Result<u64, String> {
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes a u64.
    if unsafe { libc::ioctl(fd.as_raw_fd(), BLKGETSIZE64, &mut size) } != 0 {
        return Err(last("BLKGETSIZE64"));
    }
    Ok(size)
}

// include/uapi/linux/loop.h
const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LO_FLAGS_READ_ONLY: u32 = 1;
const LO_FLAGS_AUTOCLEAR: u32 = 4;

#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

/// Enter a private mount namespace. Must run before this process has other threads (io_uring
/// workers and progress threads included): unshare(CLONE_NEWNS) refuses a shared fs_struct.
pub fn enter_private_mount_ns() -> Result<(), String> {
    // SAFETY: plain syscalls.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(last("unshare(CLONE_NEWNS) for a private tmpfs"));
        }
        let root = CString::new("/").unwrap();
        if libc::mount(std::ptr::null(), root.as_ptr(), std::ptr::null(), libc::MS_REC | libc::MS_PRIVATE, std::ptr::null()) != 0 {
            return Err(last("making / private in the new mount namespace"));
        }
    }
    Ok(())
}

/// The `ram` target: a tmpfs (in the private mount namespace the caller entered) holding a
/// `size`-byte file bound to a free loop device.
pub fn open_ram(size: u64) -> Result<Target, String> {
    let dir = std::env::temp_dir().join(format!("thplab-bench-io-tmpfs.{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let opts = CString::new(format!("size={},mode=0700", size + (1 << 20))).unwrap();
    let tmpfs = CString::new("tmpfs").unwrap();
    // SAFETY: mount a tmpfs on our own directory.
    if unsafe { libc::mount(tmpfs.as_ptr(), cstr(&dir).as_ptr(), tmpfs.as_ptr(), 0, opts.as_ptr().cast()) } != 0 {
        let e = last(&format!("mount tmpfs on {}", dir.display()));
        let _ = std::fs::remove_dir(&dir);
        return Err(e);
    }
    let mut t = Target { kind: TargetKind::Ram, fd: dev_null(), size, what: String::new(), _loop: None, mount: Some(dir.clone()) };
    let file = dir.join("backing");
    fill_file(&file, size)?;
    let backing = std::fs::File::open(&file).map_err(|e| format!("cannot open {}: {e}", file.display()))?;
    let ctl = std::fs::File::open("/dev/loop-control").map_err(|e| format!("cannot open /dev/loop-control (no loop driver?): {e}"))?;
    let (n, lo) = loop {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument.
        let n = unsafe { libc::ioctl(ctl.as_raw_fd(), LOOP_CTL_GET_FREE) };
        if n < 0 {
            return Err(last("LOOP_CTL_GET_FREE"));
        }
        let dev = PathBuf::from(format!("/dev/loop{n}"));
        let lo = std::fs::OpenOptions::new()
            .read(true)
            .open(&dev)
            .map_err(|e| format!("cannot open {}: {e}", dev.display()))?;
        let mut cfg = LoopConfig {
            fd: backing.as_raw_fd() as u32,
            block_size: 4096,
            // SAFETY: all-zero is a valid loop_info64.
            info: unsafe { std::mem::zeroed() },
            reserved: [0; 8],
        };
        cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR | LO_FLAGS_READ_ONLY;
        // SAFETY: LOOP_CONFIGURE reads the struct.
        if unsafe { libc::ioctl(lo.as_raw_fd(), LOOP_CONFIGURE, &cfg) } == 0 {
            break (n, lo);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EBUSY) {
            return Err(format!("LOOP_CONFIGURE of /dev/loop{n}: {e}"));
        }
        // Another process took it between GET_FREE and CONFIGURE: ask again.
    };
    drop(backing);
    let _ = std::fs::remove_file(&file);
    let dev = PathBuf::from(format!("/dev/loop{n}"));
    t.fd = open_direct(&dev, false)?;
    t._loop = Some(OwnedFd::from(lo));
    t.what = format!("{} over a file on a private tmpfs (autoclear)", dev.display());
    Ok(t)
}
