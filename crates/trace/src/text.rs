//! Records as lines of text (`thplab trace show`): system calls with symbolic flags and errno
//! names, faults with their kind, tasks, mappings.

use linux_abi::names::{madvise_name, prctl_name, CLONE_FLAGS, MAP_FLAGS, MREMAP_FLAGS, OPEN_FLAGS};
use std::fmt::Write;

use crate::event::{perm, EventBody, MapEntry, MapInfo, Syscall, SyscallKind};
use crate::Event;

/// One event as text, without a trailing newline; [`EventBody::ExecMaps`] spans several lines.
pub fn event_line(e: &Event) -> String {
    let mut s = format!(
        "{}.{:06} tid {}",
        e.time_ns / 1_000_000_000,
        (e.time_ns % 1_000_000_000) / 1000,
        e.tid
    );
    if e.pid != e.tid {
        let _ = write!(s, " pid {}", e.pid);
    }
    s.push(' ');
    s.push_str(&body_text(&e.body));
    s
}

/// The event's body as text.
pub fn body_text(b: &EventBody) -> String {
    match b {
        EventBody::Fault { addr, error_code } => fault_text(*addr, *error_code),
        EventBody::Syscall(sc) => syscall_text(sc),
        EventBody::TaskNew { tid, pid } if tid == pid => format!("new process {pid}"),
        EventBody::TaskNew { tid, pid } => format!("new thread {tid} in process {pid}"),
        EventBody::TaskExit => "exit".to_string(),
        EventBody::Comm { comm, exec } => format!(
            "comm {:?}{}",
            String::from_utf8_lossy(comm),
            if *exec { " (exec)" } else { "" }
        ),
        EventBody::Map(m) => map_text(m),
        EventBody::ExecMaps(v) => {
            let mut s = format!("address space after execve, {} mappings:", v.len());
            for m in v {
                s.push_str("\n    ");
                s.push_str(&map_entry_text(m));
            }
            s
        }
        EventBody::Lost { count } => format!(
            "LOST {count} events (the kernel's buffer overflowed; this trace is incomplete)"
        ),
        EventBody::Path(p) => {
            let call = SyscallKind::from_code(p.call).map_or("?", SyscallKind::name);
            let fs = if p.fs_magic == crate::event::TMPFS_MAGIC { "tmpfs".to_string() } else { format!("fs {:#x}", p.fs_magic) };
            if p.exists {
                format!(
                    "path for {call}: {:?} exists: dev {}:{} ino {} size {} {fs}",
                    String::from_utf8_lossy(&p.path),
                    p.maj,
                    p.min,
                    p.ino,
                    p.size
                )
            } else {
                format!("path for {call}: {:?} does not exist (directory on dev {}:{}, {fs})", String::from_utf8_lossy(&p.path), p.maj, p.min)
            }
        }
        EventBody::Iovecs { call, iovs } => {
            let call = SyscallKind::from_code(*call).map_or("?", SyscallKind::name);
            let list: Vec<String> = iovs.iter().map(|&(b, l)| format!("{b:#x}+{l:#x}")).collect();
            format!("iovecs of the next {call}: {}", list.join(" "))
        }
        EventBody::Uffd(u) => {
            use linux_abi::userfaultfd as uffd;
            let name = uffd::name(u.op);
            match u.op {
                uffd::API => format!("{name} on fd {}: features {:#x}", u.fd, u.mode),
                uffd::COPY | uffd::MOVE => format!("{name} on fd {}: dst {:#x} len {:#x} src {:#x} mode {:#x}", u.fd, u.start, u.len, u.src, u.mode),
                _ => format!("{name} on fd {}: {:#x}+{:#x} mode {:#x}", u.fd, u.start, u.len, u.mode),
            }
        }
        EventBody::ExecStack { start_stack } => {
            format!("stack after execve starts at {start_stack:#x} (argc; execve wrote from there to the top)")
        }
        EventBody::Answered { call, ret } => {
            let call = SyscallKind::from_code(*call).map_or("?", SyscallKind::name);
            format!("answered by the recorder: the next {call} returns {ret} without running")
        }
        EventBody::Mounts(v) => {
            let mut s = format!("tmpfs mounts at execve, {}:", v.len());
            for m in v {
                let _ = write!(
                    s,
                    "\n    {}:{} {} {} {}",
                    m.maj,
                    m.min,
                    String::from_utf8_lossy(&m.mount_point),
                    String::from_utf8_lossy(&m.fstype),
                    String::from_utf8_lossy(&m.options)
                );
            }
            s
        }
    }
}

/// `fault 0x7f.. write`, with `kernel` when the kernel faulted on a user address, `present`
/// for a protection fault (copy-on-write, mprotect), `exec` for an instruction fetch.
pub fn fault_text(addr: u64, error_code: u64) -> String {
    let mut s = format!(
        "fault {addr:#x} {}",
        if error_code & 2 != 0 { "write" } else { "read" }
    );
    if error_code & 1 != 0 {
        s.push_str(" present");
    }
    if error_code & 16 != 0 {
        s.push_str(" exec");
    }
    if error_code & 4 == 0 {
        s.push_str(" kernel");
    }
    s
}

fn hex(v: u64) -> String {
    format!("{v:#x}")
}

fn ptr(v: u64) -> String {
    if v == 0 {
        "NULL".into()
    } else {
        hex(v)
    }
}

fn fd(v: u64) -> String {
    let v = v as i64 as i32;
    if v == -100 {
        "AT_FDCWD".into()
    } else {
        v.to_string()
    }
}

/// `rw-`-style protection, `none` for PROT_NONE.
pub fn prot_text(p: u64) -> String {
    if p == 0 {
        return "none".into();
    }
    let mut s = String::new();
    for (bit, c) in [(1, 'r'), (2, 'w'), (4, 'x')] {
        if p & bit != 0 {
            s.push(c);
        }
    }
    let rest = p & !7;
    if rest != 0 {
        let _ = write!(s, "|{rest:#x}");
    }
    s
}

fn bits(v: u64, names: &[(u64, &str)]) -> String {
    let mut parts = Vec::new();
    let mut rest = v;
    for &(bit, name) in names {
        if bit != 0 && v & bit == bit {
            parts.push(name.to_string());
            rest &= !bit;
        }
    }
    if rest != 0 || parts.is_empty() {
        parts.push(hex(rest));
    }
    parts.join("|")
}


/// The errno name for `-ret` (x86_64), or the number.
pub fn errno_name(e: i64) -> String {
    let n = match e {
        1 => "EPERM",
        2 => "ENOENT",
        3 => "ESRCH",
        4 => "EINTR",
        5 => "EIO",
        9 => "EBADF",
        10 => "ECHILD",
        11 => "EAGAIN",
        12 => "ENOMEM",
        13 => "EACCES",
        14 => "EFAULT",
        16 => "EBUSY",
        17 => "EEXIST",
        19 => "ENODEV",
        20 => "ENOTDIR",
        21 => "EISDIR",
        22 => "EINVAL",
        24 => "EMFILE",
        27 => "EFBIG",
        28 => "ENOSPC",
        38 => "ENOSYS",
        95 => "EOPNOTSUPP",
        _ => return format!("errno {e}"),
    };
    n.to_string()
}

fn ret_text(k: SyscallKind, r: i64) -> String {
    if (-4095..0).contains(&r) {
        return format!("-{}", errno_name(-r));
    }
    match k {
        SyscallKind::Mmap | SyscallKind::Mremap | SyscallKind::Brk | SyscallKind::Shmat => {
            hex(r as u64)
        }
        _ => r.to_string(),
    }
}

/// `mmap(NULL, 1048576, rw, private|anon) = 0x7ffff7a00000`.
pub fn syscall_text(sc: &Syscall) -> String {
    let a = |i: usize| sc.args.get(i).copied().unwrap_or(0);
    let args: Vec<String> = match sc.kind {
        SyscallKind::Mmap => {
            let mut v = vec![
                ptr(a(0)),
                a(1).to_string(),
                prot_text(a(2)),
                bits(a(3), MAP_FLAGS),
            ];
            if a(3) & 0x20 == 0 {
                v.push(format!("fd {}", fd(a(4))));
                v.push(format!("off {}", hex(a(5))));
            }
            v
        }
        SyscallKind::Munmap | SyscallKind::Mlock | SyscallKind::Munlock => {
            vec![hex(a(0)), a(1).to_string()]
        }
        SyscallKind::Mremap => {
            let mut v = vec![
                hex(a(0)),
                a(1).to_string(),
                a(2).to_string(),
                bits(a(3), MREMAP_FLAGS),
            ];
            if a(3) & 2 != 0 {
                v.push(hex(a(4)));
            }
            v
        }
        SyscallKind::Mprotect => vec![hex(a(0)), a(1).to_string(), prot_text(a(2))],
        SyscallKind::Madvise => vec![hex(a(0)), a(1).to_string(), madvise_name(a(2))],
        SyscallKind::Brk => vec![ptr(a(0))],
        SyscallKind::Prctl => vec![prctl_name(a(0)), hex(a(1)), hex(a(2)), hex(a(3)), hex(a(4))],
        SyscallKind::Clone => {
            vec![bits(a(0) & !0xff, CLONE_FLAGS) + &format!("|sig {}", a(0) & 0xff)]
        }
        SyscallKind::ExitGroup | SyscallKind::Exit => vec![(a(0) as i64 as i32).to_string()],
        SyscallKind::Openat => vec![
            fd(a(0)),
            hex(a(1)),
            bits(a(2), OPEN_FLAGS),
            format!("{:#o}", a(3)),
        ],
        SyscallKind::Open => vec![hex(a(0)), bits(a(1), OPEN_FLAGS), format!("{:#o}", a(2))],
        SyscallKind::Close => vec![fd(a(0))],
        SyscallKind::Ftruncate => vec![fd(a(0)), a(1).to_string()],
        SyscallKind::Fallocate => vec![fd(a(0)), hex(a(1)), a(2).to_string(), a(3).to_string()],
        SyscallKind::MemfdCreate => vec![hex(a(0)), hex(a(1))],
        SyscallKind::Write | SyscallKind::Read => vec![fd(a(0)), hex(a(1)), a(2).to_string()],
        SyscallKind::Pwrite64 => vec![fd(a(0)), hex(a(1)), a(2).to_string(), a(3).to_string()],
        SyscallKind::Writev | SyscallKind::Readv => vec![fd(a(0)), hex(a(1)), a(2).to_string()],
        SyscallKind::Pwritev => vec![fd(a(0)), hex(a(1)), a(2).to_string(), a(3).to_string()],
        SyscallKind::Pwritev2 => vec![fd(a(0)), hex(a(1)), a(2).to_string(), (a(3) as i64).to_string(), hex(a(5))],
        SyscallKind::Lseek => vec![fd(a(0)), (a(1) as i64).to_string(), ["SEEK_SET", "SEEK_CUR", "SEEK_END", "SEEK_DATA", "SEEK_HOLE"].get(a(2) as usize).map_or(a(2).to_string(), |s| s.to_string())],
        SyscallKind::Dup => vec![fd(a(0))],
        SyscallKind::Dup2 => vec![fd(a(0)), fd(a(1))],
        SyscallKind::Dup3 => vec![fd(a(0)), fd(a(1)), hex(a(2))],
        SyscallKind::Fcntl => vec![fd(a(0)), a(1).to_string(), hex(a(2))],
        SyscallKind::Unlinkat => vec![fd(a(0)), hex(a(1)), hex(a(2))],
        _ => sc.args.iter().map(|&v| hex(v)).collect(),
    };
    let mut s = format!("{}({})", sc.kind.name(), args.join(", "));
    match sc.ret {
        Some(r) => {
            let _ = write!(s, " = {}", ret_text(sc.kind, r));
        }
        None => s.push_str(" = ?"),
    }
    s
}

fn perms_text(prot: u32, shared: bool) -> String {
    let mut s = String::new();
    s.push(if prot & 1 != 0 { 'r' } else { '-' });
    s.push(if prot & 2 != 0 { 'w' } else { '-' });
    s.push(if prot & 4 != 0 { 'x' } else { '-' });
    s.push(if shared { 's' } else { 'p' });
    s
}

/// A new mapping: range, permissions, device, inode, offset, path.
pub fn map_text(m: &MapInfo) -> String {
    format!(
        "map {:#x}-{:#x} {} {:02x}:{:02x} ino {} off {:#x} {}",
        m.addr,
        m.addr.wrapping_add(m.len),
        perms_text(m.prot, m.flags & 1 != 0),
        m.maj,
        m.min,
        m.ino,
        m.pgoff,
        printable(&m.path)
    )
}

/// Bytes as one line of text: invalid UTF-8 replaced, control characters (a newline in a file
/// name) escaped as `\n`, `\t`, `\u{1}`.
pub fn printable(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    if !s.chars().any(char::is_control) {
        return s.into_owned();
    }
    s.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

/// A command line as one line: arguments that are empty or hold spaces, quotes, backslashes or
/// control characters (a newline) are quoted and escaped, so that the line reads back as the
/// arguments (`python3 -c "d = {}\nprint(d)"`).
pub fn command_line<S: AsRef<[u8]>>(argv: &[S]) -> String {
    let word = |a: &[u8]| {
        let s = String::from_utf8_lossy(a);
        let plain = !s.is_empty() && s.chars().all(|c| !c.is_control() && !c.is_whitespace() && !matches!(c, '"' | '\\' | '\''));
        if plain {
            s.into_owned()
        } else {
            format!("{s:?}")
        }
    };
    argv.iter().map(|a| word(a.as_ref())).collect::<Vec<_>>().join(" ")
}

/// A /proc/PID/maps line.
pub fn map_entry_text(m: &MapEntry) -> String {
    let p = m.perms;
    let prot = (p & perm::READ != 0) as u32
        | ((p & perm::WRITE != 0) as u32) << 1
        | ((p & perm::EXEC != 0) as u32) << 2;
    format!(
        "{:x}-{:x} {} {:08x} {:02x}:{:02x} {} {}",
        m.start,
        m.end,
        perms_text(prot, p & perm::SHARED != 0),
        m.offset,
        m.maj,
        m.min,
        m.ino,
        printable(&m.path)
    )
}
