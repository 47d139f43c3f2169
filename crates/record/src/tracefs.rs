//! Tracepoint ids and field layouts from tracefs (`events/<system>/<name>/format`).
//!
//! tracefs is read where it is mounted (/sys/kernel/tracing, then /sys/kernel/debug/tracing).
//! When it is mounted nowhere (as on this project's machines), a short-lived child process
//! mounts it in a private mount namespace of its own (`unshare(CLONE_NEWNS)`, needs
//! CAP_SYS_ADMIN), copies the format files to a pipe and exits: nothing is mounted for anyone
//! else and nothing is left behind.

use std::ffi::CString;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};

use crate::RecordError;

/// One tracepoint: its id and its fields (name → offset, size).
#[derive(Clone, Debug)]
pub struct TpFormat {
    pub id: u16,
    pub fields: Vec<(String, usize, usize)>,
}

impl TpFormat {
    pub fn field(&self, name: &str) -> Option<(usize, usize)> {
        self.fields.iter().find(|f| f.0 == name).map(|f| (f.1, f.2))
    }
}

/// Parse a `format` file.
pub fn parse_format(text: &str) -> Option<TpFormat> {
    let mut id = None;
    let mut fields = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(v) = line.strip_prefix("ID:") {
            id = v.trim().parse::<u16>().ok();
        } else if let Some(rest) = line.strip_prefix("field:") {
            let mut parts = rest.split(';').map(str::trim);
            let decl = parts.next()?;
            let last = decl.rsplit([' ', '*']).next()?;
            let name = last.split('[').next().unwrap_or(last);
            let mut off = None;
            let mut size = None;
            for p in parts {
                if let Some(v) = p.strip_prefix("offset:") {
                    off = v.parse().ok();
                } else if let Some(v) = p.strip_prefix("size:") {
                    size = v.parse().ok();
                }
            }
            fields.push((name.to_string(), off?, size?));
        }
    }
    Some(TpFormat { id: id?, fields })
}

/// The format of each `system/name` (None where the tracepoint does not exist).
pub fn formats(events: &[String]) -> Result<Vec<Option<TpFormat>>, RecordError> {
    for root in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        let dir = std::path::Path::new(root).join("events");
        if dir.join("exceptions").is_dir() || dir.join("syscalls").is_dir() {
            return Ok(events
                .iter()
                .map(|e| {
                    std::fs::read_to_string(dir.join(e).join("format"))
                        .ok()
                        .and_then(|t| parse_format(&t))
                })
                .collect());
        }
    }
    let texts = read_in_private_mount(events)?;
    Ok(texts
        .into_iter()
        .map(|t| t.and_then(|t| parse_format(&t)))
        .collect())
}

fn read_in_private_mount(events: &[String]) -> Result<Vec<Option<String>>, RecordError> {
    let paths: Vec<CString> = events
        .iter()
        .map(|e| CString::new(format!("/sys/kernel/tracing/events/{e}/format")))
        .collect::<Result<_, _>>()
        .map_err(|_| RecordError::Other("tracepoint name with a NUL byte".into()))?;
    let mut fds = [0i32; 2];
    // SAFETY: fds is a two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(RecordError::Other(format!(
            "pipe: {}",
            std::io::Error::last_os_error()
        )));
    }
    let mut buf = vec![0u8; 64 * 1024];
    // SAFETY: the child calls only async-signal-safe functions on memory allocated before the
    // fork, and leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(RecordError::Other(format!(
            "fork: {}",
            std::io::Error::last_os_error()
        )));
    }
    if pid == 0 {
        // SAFETY: in the child after fork.
        unsafe { send_formats_from_child(fds, &paths, &mut buf) }
    }
    // SAFETY: fds[0] is the read end we own; fds[1] belongs to the child now.
    let mut r = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fds[0]) });
    unsafe {
        libc::close(fds[1]);
    }
    let mut all = Vec::new();
    let read = r.read_to_end(&mut all);
    let mut status = 0;
    // SAFETY: pid is our child.
    unsafe {
        libc::waitpid(pid, &mut status, 0);
    }
    read.map_err(|e| RecordError::Other(format!("reading tracepoint formats: {e}")))?;
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(RecordError::Unavailable(
            "tracefs is not mounted and could not be mounted in a private mount namespace (needs CAP_SYS_ADMIN)".into(),
        ));
    }
    Ok(split_formats(&all, events.len()))
}

/// The child: close the read end, unshare(CLONE_NEWNS), make / MS_REC|MS_PRIVATE, mount
/// tracefs on /sys/kernel/tracing, and write each format file to the pipe as a length (u32::MAX
/// when it cannot be opened) and its bytes; _exit 3 when the mount fails, 4 when the pipe does.
///
/// # Safety
/// Only in the child after fork(): it makes only async-signal-safe calls.
unsafe fn send_formats_from_child(fds: [i32; 2], paths: &[CString], buf: &mut [u8]) -> ! {
    libc::close(fds[0]);
    let w = fds[1];
    let ok = libc::unshare(libc::CLONE_NEWNS) == 0
        && libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) == 0
        && libc::mount(
            c"tracefs".as_ptr(),
            c"/sys/kernel/tracing".as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        ) == 0;
    if !ok {
        libc::_exit(3);
    }
    for p in paths {
        let fd = libc::open(p.as_ptr(), libc::O_RDONLY);
        let mut n: usize = 0;
        if fd >= 0 {
            loop {
                let r = libc::read(
                    fd,
                    buf.as_mut_ptr().add(n) as *mut libc::c_void,
                    buf.len() - n,
                );
                if r <= 0 {
                    break;
                }
                n += r as usize;
                if n == buf.len() {
                    break;
                }
            }
            libc::close(fd);
        }
        let len: u32 = if fd >= 0 { n as u32 } else { u32::MAX };
        if !write_all(w, &len.to_ne_bytes()) || !write_all(w, &buf[..n]) {
            libc::_exit(4);
        }
    }
    libc::_exit(0);
}

/// The `n` format files in what the child wrote (None for one it could not open, or missing).
fn split_formats(all: &[u8], n: usize) -> Vec<Option<String>> {
    let mut out = Vec::new();
    let mut at = 0;
    for _ in 0..n {
        let Some(len) = all.get(at..at + 4) else {
            break;
        };
        let len = u32::from_ne_bytes(len.try_into().unwrap_or([0; 4]));
        at += 4;
        if len == u32::MAX {
            out.push(None);
            continue;
        }
        let end = (at + len as usize).min(all.len());
        out.push(Some(String::from_utf8_lossy(&all[at..end]).into_owned()));
        at = end;
    }
    out.resize(n, None);
    out
}

/// write(2) all of `b` (async-signal-safe).
unsafe fn write_all(fd: i32, mut b: &[u8]) -> bool {
    while !b.is_empty() {
        let r = libc::write(fd, b.as_ptr() as *const libc::c_void, b.len());
        if r < 0 && *libc::__errno_location() == libc::EINTR {
            continue;
        }
        if r <= 0 {
            return false;
        }
        b = &b[r as usize..];
    }
    true
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_a_syscall_format() {
        let t = "name: sys_enter_munmap\nID: 123\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
                 \tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;\n\tfield:unsigned long addr;\toffset:16;\tsize:8;\tsigned:0;\n\
                 \tfield:unsigned long arg2;\toffset:40;\tsize:8;\tsigned:0;\n\tfield:char comm[16];\toffset:48;\tsize:16;\tsigned:0;\n\
                 \tfield:size_t len;\toffset:24;\tsize:8;\tsigned:0;\n\tfield:int * parent_tidptr;\toffset:32;\tsize:8;\tsigned:0;\n";
        let f = super::parse_format(t).unwrap();
        assert_eq!(f.id, 123);
        assert_eq!(f.field("addr"), Some((16, 8)));
        assert_eq!(f.field("len"), Some((24, 8)));
        assert_eq!(f.field("parent_tidptr"), Some((32, 8)));
        assert_eq!(f.field("arg2"), Some((40, 8)));
        assert_eq!(f.field("comm"), Some((48, 16)));
    }
}
