//! `thplab record --accesses`: the program's data accesses at page granularity, from a second
//! run under valgrind's lackey tool (`--trace-mem=yes --trace-syscalls=yes`), mapped onto the
//! native recording's address space and written as runs into the companion file
//! (`trace::accesses`, docs/trace-format.md "Accesses").
//!
//! Under valgrind the address space is not the native one: valgrind loads the executable and
//! its interpreter where it likes, gives the client a stack and a brk area of its own, and maps
//! its own preload library into the client. Every valgrind address is therefore translated:
//!
//! - **System calls.** ld.so runs as client code, so every mapping after the exec (the
//!   libraries included) is a client mmap that lackey's `--trace-syscalls` prints with its
//!   result. The memory calls (mmap, munmap, mremap, brk, mprotect, madvise) of the valgrind
//!   run are aligned in order with the native recording's (of the first process's first
//!   image): each is matched to the first native call within [`WINDOW`] calls of the last match
//!   with the same kind and arguments (mmap: length, prot, flags and, for a file, the file's
//!   path; the others: length and flags, and the translated address where it is known; brk:
//!   the offset from the start of brk). An anonymous mmap without such a partner may match one
//!   of another length among the next [`LOOSE_WINDOW`] native calls with the same prot and flags
//!   (ld.so sizes some of its allocations by its link map, which under valgrind holds the
//!   preload library too); then the length both have is mapped, from the start. A matched mmap
//!   maps its valgrind range onto the native one (munmap and mremap follow); unmatched valgrind
//!   calls (valgrind's own preload library) map nothing, and native calls without a partner are
//!   skipped.
//! - **The exec image.** The executable and its interpreter (mapped by valgrind, not by client
//!   calls) are matched by inode and file offset: valgrind's /proc/PID/maps is read at the
//!   client's first system call and each file mapping whose inode is in the native exec
//!   snapshot is mapped onto it, with the anonymous mapping that follows (bss).
//! - **The heap** by offset from the start of brk, **the stack** by offset from its top (the
//!   valgrind stack is the mapping holding the client's first store).
//!
//! Accesses that none of these maps are counted (`unmapped_accesses`), never dropped silently.
//! Each mapped run is placed after the native call matched to the last matched valgrind call
//! before it (the block's `anchor`): the replay puts it at the end of that interval, after the
//! interval's faults and before the next matched call (crates/sim: `access_places`).
//!
//! Lackey's log comes through a pipe (`--log-fd`) and is parsed line by line as it arrives.
//! Loads (`L`), stores (`S`) and modifies (`M`, one access that writes) count; instruction
//! fetches (`I`) are counted but not recorded (they go through the instruction TLB). An access
//! counts on the page of its first byte. Only the first process is followed
//! (`--child-silent-after-fork=yes`; an execve leaves valgrind).

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use linux_abi::mman::{MAP_ANONYMOUS, MAP_FIXED, MAP_FIXED_NOREPLACE};
use trace::accesses::{AccessHeader, AccessRun, AccessTotals, AccessWriter, MAX_BLOCK_RUNS};
use trace::{EventBody, MapEntry, SyscallKind};

use crate::{RecordError, Recording};

/// How far ahead of the last match a native call may be matched.
pub const WINDOW: usize = 256;
/// How far ahead an anonymous mmap of another length may be matched.
pub const LOOSE_WINDOW: usize = 4;
/// The valgrind stack extends this far below its top (valgrind's default client stack).
const STACK_MAX: u64 = 64 << 20;
const PAGE: u64 = 4096;

/// `valgrind` in PATH, if any.
pub fn valgrind_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("valgrind")).find(|p| {
        use std::os::unix::fs::PermissionsExt;
        p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// A memory system call of either run, as the alignment compares them. Arguments in the trace
/// format's order (mmap: addr, len, prot, flags, fd, off; munmap: addr, len; mremap: addr,
/// old_len, new_len, flags, new_addr; brk: brk; mprotect: start, len, prot; madvise: start,
/// len, behavior).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemCall {
    pub kind: SyscallKind,
    pub args: Vec<u64>,
    pub ret: i64,
    /// mmap of a file: the file's path, when known.
    pub path: Option<Vec<u8>>,
    /// Native calls: the record's index in the recording.
    pub index: u64,
}

/// What the alignment needs of the native recording: the first process's first image.
#[derive(Clone, Debug, Default)]
pub struct Native {
    pub calls: Vec<MemCall>,
    /// Its exec snapshot (/proc/PID/maps inside the execve).
    pub maps: Vec<MapEntry>,
    /// Records up to and including the exec snapshot: accesses before any matched call go there.
    pub start_anchor: u64,
}

impl Native {
    /// The first process's memory calls until it leaves its first image, with the file of every
    /// file mmap (from `path` records and the fds their opens returned).
    pub fn of(rec: &Recording) -> Native {
        let root = rec.header.root_pid;
        let mut n = Native::default();
        let mut paths: HashMap<u32, Vec<u8>> = HashMap::new();
        let mut fds: HashMap<i64, Vec<u8>> = HashMap::new();
        for (i, e) in rec.events.iter().enumerate() {
            if e.pid != root {
                continue;
            }
            match &e.body {
                EventBody::ExecMaps(m) if n.maps.is_empty() => {
                    n.maps = m.clone();
                    n.start_anchor = i as u64 + 1;
                }
                EventBody::Path(p) => {
                    paths.insert(e.tid, p.path.clone());
                }
                EventBody::Syscall(s) => {
                    let path = if s.kind.takes_path() { paths.remove(&e.tid) } else { None };
                    let Some(ret) = s.ret else { continue };
                    let arg = |i: usize| s.args.get(i).copied().unwrap_or(0);
                    match s.kind {
                        SyscallKind::Execve | SyscallKind::Execveat if ret == 0 => break,
                        SyscallKind::Open | SyscallKind::Openat | SyscallKind::Creat if ret >= 0 => {
                            if let Some(p) = path {
                                fds.insert(ret, p);
                            }
                        }
                        SyscallKind::Close => {
                            fds.remove(&(arg(0) as i32 as i64));
                        }
                        SyscallKind::Dup | SyscallKind::Dup2 | SyscallKind::Dup3 if ret >= 0 => {
                            if let Some(p) = fds.get(&(arg(0) as i32 as i64)).cloned() {
                                fds.insert(ret, p);
                            }
                        }
                        k if is_mem(k) => {
                            let path = (k == SyscallKind::Mmap && arg(3) & MAP_ANONYMOUS == 0).then(|| fds.get(&(arg(4) as i32 as i64)).cloned()).flatten();
                            n.calls.push(MemCall { kind: k, args: s.args.clone(), ret, path, index: i as u64 });
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        n
    }
}

fn is_mem(k: SyscallKind) -> bool {
    matches!(k, SyscallKind::Mmap | SyscallKind::Munmap | SyscallKind::Mremap | SyscallKind::Brk | SyscallKind::Mprotect | SyscallKind::Madvise)
}

fn page_up(v: u64) -> u64 {
    v.saturating_add(PAGE - 1) & !(PAGE - 1)
}

fn basename(p: &[u8]) -> &[u8] {
    p.rsplit(|&b| b == b'/').next().unwrap_or(p)
}

/// Valgrind ranges → native start and region.
#[derive(Default, Debug)]
struct RangeMap(BTreeMap<u64, (u64, u64, u32)>);

impl RangeMap {
    fn get(&self, a: u64) -> Option<(u64, u32)> {
        match self.0.range(..=a).next_back() {
            Some((&s, &(e, n, r))) if a < e => Some((n + (a - s), r)),
            _ => None,
        }
    }

    fn remove(&mut self, start: u64, end: u64) {
        let hit: Vec<(u64, (u64, u64, u32))> = self.0.range(..end).filter(|(_, &(e, _, _))| e > start).map(|(&s, &v)| (s, v)).collect();
        for (s, (e, n, r)) in hit {
            self.0.remove(&s);
            if s < start {
                self.0.insert(s, (start, n, r));
            }
            if e > end {
                self.0.insert(end, (e, n + (end - s), r));
            }
        }
    }

    fn insert(&mut self, start: u64, end: u64, native: u64, region: u32) {
        self.remove(start, end);
        if start < end {
            self.0.insert(start, (end, native, region));
        }
    }
}

/// Valgrind-run addresses → native addresses and regions, kept up to date by the valgrind run's
/// memory calls as they come (module docs).
#[derive(Debug)]
pub struct Aligner {
    native: Native,
    cursor: usize,
    map: RangeMap,
    /// Valgrind's brk: start and current end.
    vbrk: Option<(u64, u64)>,
    nbrk_start: Option<u64>,
    vstack_top: Option<u64>,
    nstack_top: Option<u64>,
    /// Where accesses go now: after this many records of the recording.
    pub anchor: u64,
    /// Region names, by number.
    pub names: Vec<String>,
    ids: HashMap<String, u32>,
    pub seen: u64,
    pub matched: u64,
    /// How far behind the last match an unmatched native call may still be matched (0 for
    /// lackey, whose ld.so makes its calls in the native order; under QEMU ld.so makes an early
    /// anonymous mmap after opening ld.so.cache instead of before).
    pub look_back: usize,
    taken: std::collections::HashSet<usize>,
}

impl Aligner {
    pub fn new(native: Native) -> Aligner {
        let nbrk_start = native.calls.iter().find(|c| c.kind == SyscallKind::Brk && c.ret > 0).map(|c| c.ret as u64);
        let nstack_top = native.maps.iter().find(|m| m.path == b"[stack]").map(|m| m.end);
        let anchor = native.start_anchor;
        Aligner { native, cursor: 0, map: RangeMap::default(), vbrk: None, nbrk_start, vstack_top: None, nstack_top, anchor, names: Vec::new(), ids: HashMap::new(), seen: 0, matched: 0, look_back: 0, taken: Default::default() }
    }

    fn region(&mut self, name: String) -> u32 {
        if let Some(&i) = self.ids.get(&name) {
            return i;
        }
        self.names.push(name.clone());
        self.ids.insert(name, self.names.len() as u32 - 1);
        self.names.len() as u32 - 1
    }

    /// The native address and region of a valgrind-run address.
    pub fn translate(&self, a: u64) -> Option<(u64, u32)> {
        if let (Some((s, e)), Some(n)) = (self.vbrk, self.nbrk_start) {
            if (s..e).contains(&a) {
                return Some((n + (a - s), *self.ids.get("heap")?));
            }
        }
        if let Some(x) = self.map.get(a) {
            return Some(x);
        }
        match (self.vstack_top, self.nstack_top) {
            (Some(vt), Some(nt)) if a < vt && a >= vt.saturating_sub(STACK_MAX) => Some((nt - (vt - a), *self.ids.get("stack")?)),
            _ => None,
        }
    }

    /// The valgrind run's stack: the mapping of its /proc/PID/maps text that holds the
    /// client's first store (a push of ld.so's first call).
    pub fn stack(&mut self, maps: &str, first_store: u64) {
        for (s, e, _, _) in maps_entries(maps) {
            if (s..e).contains(&first_store) {
                self.vstack_top = Some(e);
                self.region("stack".into());
            }
        }
    }

    /// The valgrind run's address space before the client runs (its /proc/PID/maps text): the
    /// executable, the interpreter and their bss are mapped onto the native exec snapshot by
    /// inode and offset.
    pub fn startup(&mut self, maps: &str) {
        let mut last: Option<(u64, usize)> = None; // (valgrind end, native entry) of the last file mapping matched
        for (s, e, off, ino) in maps_entries(maps) {
            if ino != 0 {
                last = None;
                let mut at = s;
                while at < e {
                    let foff = off + (at - s);
                    let Some(k) = self.native.maps.iter().position(|m| m.ino == ino && m.offset <= foff && foff < m.offset + (m.end - m.start)) else { break };
                    let m = &self.native.maps[k];
                    let n = m.start + (foff - m.offset);
                    let stop = e.min(at + (m.end - n));
                    let name = String::from_utf8_lossy(&m.path).into_owned();
                    let r = self.region(name);
                    self.map.insert(at, stop, n, r);
                    last = Some((stop, k));
                    at = stop;
                }
            } else if let Some((vend, k)) = last.take() {
                // The bss after a file mapping: the anonymous entry after its native partner.
                if vend == s {
                    if let Some(m) = self.native.maps.get(k + 1).filter(|m| m.ino == 0 && m.path.is_empty() && m.start == self.native.maps[k].end) {
                        let (n, len) = (m.start, (m.end - m.start).min(e - s));
                        let r = self.region(format!("anon {n:#x}"));
                        self.map.insert(s, s + len, n, r);
                    }
                }
            }
        }
    }

    fn same(&self, v: &MemCall, n: &MemCall) -> bool {
        if v.kind != n.kind || (v.ret >= 0) != (n.ret >= 0) {
            return false;
        }
        let a = |c: &MemCall, i: usize| c.args.get(i).copied().unwrap_or(0);
        // The address, where the valgrind one is known in native terms.
        let addr_ok = |i: usize| self.translate(a(v, i)).is_none_or(|(x, _)| x == a(n, i));
        match v.kind {
            SyscallKind::Mmap => {
                let paths = match (&v.path, &n.path) {
                    (Some(x), Some(y)) => x == y || basename(x) == basename(y),
                    (None, None) => true,
                    _ => a(v, 3) & MAP_ANONYMOUS != 0,
                };
                (1..4).all(|i| a(v, i) == a(n, i)) && paths && (a(v, 3) & (MAP_FIXED | MAP_FIXED_NOREPLACE) == 0 || addr_ok(0))
            }
            SyscallKind::Munmap => a(v, 1) == a(n, 1) && addr_ok(0),
            SyscallKind::Mremap => (1..4).all(|i| a(v, i) == a(n, i)) && addr_ok(0),
            SyscallKind::Mprotect | SyscallKind::Madvise => (1..3).all(|i| a(v, i) == a(n, i)) && addr_ok(0),
            SyscallKind::Brk => match (a(v, 0), a(n, 0), self.vbrk, self.nbrk_start) {
                (0, 0, _, _) => true,
                (0, _, _, _) | (_, 0, _, _) => false,
                (x, y, Some((vs, _)), Some(ns)) => x.wrapping_sub(vs) == y.wrapping_sub(ns),
                _ => true,
            },
            _ => false,
        }
    }

    fn loosely_same(&self, v: &MemCall, n: &MemCall) -> bool {
        let a = |c: &MemCall, i: usize| c.args.get(i).copied().unwrap_or(0);
        v.kind == SyscallKind::Mmap
            && n.kind == SyscallKind::Mmap
            && v.ret >= 0
            && n.ret >= 0
            && a(v, 0) == 0
            && a(n, 0) == 0
            && a(v, 3) & MAP_ANONYMOUS != 0
            && (2..4).all(|i| a(v, i) == a(n, i))
    }

    /// A memory call of the valgrind run, in its order: match it, then follow its effect on
    /// the valgrind address space. Returns whether it was matched (then `anchor` moved).
    pub fn syscall(&mut self, v: &MemCall) -> bool {
        self.seen += 1;
        let end = (self.cursor + WINDOW).min(self.native.calls.len());
        let j = (self.cursor..end).find(|&j| self.same(v, &self.native.calls[j])).or_else(|| {
            // An anonymous mmap whose length differs under valgrind (ld.so's allocations for
            // the static TLS and the link maps count valgrind's preload library too): the next
            // few native calls may hold one with the same prot and flags.
            let end = (self.cursor + LOOSE_WINDOW).min(self.native.calls.len());
            (self.cursor..end).find(|&j| self.loosely_same(v, &self.native.calls[j]))
        });
        // An anonymous mmap made later than natively: a native one not matched, a little behind.
        let back = j.is_none() && v.kind == SyscallKind::Mmap;
        let j = j.or_else(|| (self.cursor.saturating_sub(self.look_back)..self.cursor).find(|&k| back && !self.taken.contains(&k) && self.same(v, &self.native.calls[k])));
        let n = j.map(|j| self.native.calls[j].clone());
        if let Some(j) = j {
            self.matched += 1;
            self.cursor = self.cursor.max(j + 1);
            self.anchor = self.anchor.max(self.native.calls[j].index + 1);
            if self.look_back > 0 {
                self.taken.insert(j);
            }
        }
        let a = |i: usize| v.args.get(i).copied().unwrap_or(0);
        match v.kind {
            SyscallKind::Mmap if v.ret >= 0 => {
                let (s, e) = (v.ret as u64, v.ret as u64 + page_up(a(1)));
                self.map.remove(s, e);
                if let Some(n) = n.filter(|n| n.ret >= 0) {
                    // A loose match maps what both have, from the start.
                    let e = s + page_up(a(1).min(n.args.get(1).copied().unwrap_or(0)));
                    let name = match &n.path {
                        Some(p) => String::from_utf8_lossy(p).into_owned(),
                        None => format!("anon {:#x}", n.ret),
                    };
                    let r = self.region(name);
                    self.map.insert(s, e, n.ret as u64, r);
                }
            }
            SyscallKind::Munmap if v.ret == 0 => self.map.remove(a(0), a(0) + page_up(a(1))),
            SyscallKind::Mremap if v.ret >= 0 => {
                let old = self.map.get(a(0));
                self.map.remove(a(0), a(0) + page_up(a(1)));
                let (s, e) = (v.ret as u64, v.ret as u64 + page_up(a(2)));
                self.map.remove(s, e);
                if let Some(n) = n.filter(|n| n.ret >= 0) {
                    let r = match old {
                        Some((_, r)) => r,
                        None => self.region(format!("anon {:#x}", n.ret)),
                    };
                    self.map.insert(s, e, n.ret as u64, r);
                }
            }
            SyscallKind::Brk if v.ret > 0 => {
                let r = v.ret as u64;
                match &mut self.vbrk {
                    Some((_, cur)) => *cur = r,
                    None => {
                        self.vbrk = Some((r, r));
                        self.region("heap".into());
                    }
                }
                if self.nbrk_start.is_none() {
                    self.nbrk_start = n.filter(|n| n.ret > 0).map(|n| n.ret as u64);
                }
            }
            _ => {}
        }
        j.is_some()
    }
}

/// (start, end, offset, inode) of each line of a /proc/PID/maps text.
fn maps_entries(maps: &str) -> impl Iterator<Item = (u64, u64, u64, u64)> + '_ {
    maps.lines().filter_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (s, e) = f.first()?.split_once('-')?;
        let (s, e) = (u64::from_str_radix(s, 16).ok()?, u64::from_str_radix(e, 16).ok()?);
        let off = f.get(2).and_then(|o| u64::from_str_radix(o, 16).ok()).unwrap_or(0);
        let ino: u64 = f.get(4).and_then(|i| i.parse().ok()).unwrap_or(0);
        Some((s, e, off, ino))
    })
}

/// One parsed line of lackey's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogLine {
    /// A load, store or modify.
    Data { addr: u64, write: bool },
    Instr,
    /// A system call with its result (`Ok(value)` or `Err(errno)`), or without one yet
    /// (`[async] ...`: the result comes in a `Resume` line of the same thread).
    Call { pid: u64, tid: u64, nr: u64, args: Vec<(u64, Option<Vec<u8>>)>, ret: Option<Result<u64, u64>> },
    Resume { pid: u64, tid: u64, nr: u64, ret: Result<u64, u64> },
    /// valgrind's own lines (`==PID== ...`), printed from before the client runs.
    Banner { pid: u64 },
    Other,
}

fn hex(b: &[u8]) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    let mut n = 0;
    for &c in b {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => break,
        };
        v = v.checked_mul(16)?.checked_add(d as u64)?;
        n += 1;
    }
    (n > 0).then_some((v, n))
}

fn result(s: &str) -> Option<Result<u64, u64>> {
    let val = |tag: &str| s.find(tag).and_then(|i| hex(s[i + tag.len()..].as_bytes())).map(|(v, _)| v);
    val("Success(0x").map(Ok).or_else(|| val("Failure(0x").map(Err))
}

/// Parse one line of lackey's log (`--trace-mem=yes --trace-syscalls=yes`).
pub fn parse_line(l: &[u8]) -> LogLine {
    match l {
        [b' ', k @ (b'L' | b'S' | b'M'), b' ', rest @ ..] => match hex(rest) {
            Some((addr, _)) => LogLine::Data { addr, write: *k != b'L' },
            None => LogLine::Other,
        },
        [b'I', b' ', ..] => LogLine::Instr,
        _ if l.starts_with(b"SYSCALL[") => parse_call(&String::from_utf8_lossy(l)).unwrap_or(LogLine::Other),
        [b'=', b'=', rest @ ..] => {
            let n = rest.iter().take_while(|c| c.is_ascii_digit()).count();
            match std::str::from_utf8(&rest[..n]).ok().and_then(|d| d.parse().ok()) {
                Some(pid) if rest.get(n..n + 2) == Some(b"==") => LogLine::Banner { pid },
                _ => LogLine::Other,
            }
        }
        _ => LogLine::Other,
    }
}

fn parse_call(l: &str) -> Option<LogLine> {
    let rest = l.strip_prefix("SYSCALL[")?;
    let (ids, rest) = rest.split_once("](")?;
    let (pid, tid) = ids.split_once(',')?;
    let (pid, tid): (u64, u64) = (pid.trim().parse().ok()?, tid.trim().parse().ok()?);
    let (nr, rest) = rest.split_once(')')?;
    let nr: u64 = nr.parse().ok()?;
    let rest = rest.trim_start();
    if rest.starts_with("... [async] -->") {
        return Some(LogLine::Resume { pid, tid, nr, ret: result(rest)? });
    }
    let (head, tail) = match rest.find("-->") {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let open = head.find(" ( ")? + 3;
    let close = head.rfind(" )")?;
    let args = if close > open {
        head[open..close]
            .split(", ")
            .map(|a| {
                let a = a.trim();
                if let Some(h) = a.strip_prefix("0x") {
                    let (v, n) = hex(h.as_bytes()).unwrap_or((0, 0));
                    let path = h[n..].strip_prefix('(').and_then(|p| p.strip_suffix(')')).map(|p| p.as_bytes().to_vec());
                    (v, path)
                } else {
                    (a.parse::<i64>().map(|v| v as u64).unwrap_or(0), None)
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    let ret = if tail.contains("[async] ...") { None } else { Some(result(tail)?) };
    Some(LogLine::Call { pid, tid, nr, args, ret })
}

/// x86_64 system call numbers (as valgrind prints them) of the calls the alignment follows.
fn kind_of(nr: u64) -> Option<SyscallKind> {
    Some(match nr {
        9 => SyscallKind::Mmap,
        11 => SyscallKind::Munmap,
        25 => SyscallKind::Mremap,
        12 => SyscallKind::Brk,
        10 => SyscallKind::Mprotect,
        28 => SyscallKind::Madvise,
        2 => SyscallKind::Open,
        257 => SyscallKind::Openat,
        85 => SyscallKind::Creat,
        3 => SyscallKind::Close,
        32 => SyscallKind::Dup,
        33 => SyscallKind::Dup2,
        292 => SyscallKind::Dup3,
        _ => return None,
    })
}

/// Parses lackey's log line by line, aligns, compresses accesses into runs and writes them.
pub struct Collector<W: Write> {
    pub aligner: Aligner,
    writer: AccessWriter<W>,
    declared: u32,
    cur: Option<AccessRun>,
    block: Vec<AccessRun>,
    block_anchor: u64,
    pub totals: AccessTotals,
    pending: HashMap<(u64, u64), (u64, Vec<(u64, Option<Vec<u8>>)>)>,
    fds: HashMap<i64, Vec<u8>>,
    /// The first process's pid (valgrind's first line's), once seen.
    root: Option<u64>,
    first_store: Option<u64>,
    /// The valgrind process's /proc/PID/maps, read at valgrind's first line.
    maps: String,
    /// Reads the valgrind process's /proc/PID/maps.
    maps_of: Box<dyn FnMut(u64) -> Option<String>>,
    /// Why the exec image could not be mapped, if it could not.
    pub startup_missing: Option<String>,
    /// Page-base translations (page, native address, region or u32::MAX for unmapped,
    /// generation), direct-mapped; empty (unused) for lackey's per-access addresses. The QEMU
    /// path's runs are on page bases, whose translation holds until the address space changes
    /// (a memory call, the stack's discovery, the exec image): each bumps `generation`.
    page_cache: Vec<(u64, u64, u32, u32)>,
    generation: u32,
}

impl<W: Write> Collector<W> {
    pub fn new(aligner: Aligner, writer: AccessWriter<W>, maps_of: Box<dyn FnMut(u64) -> Option<String>>) -> Self {
        let block_anchor = aligner.anchor;
        Collector {
            aligner,
            writer,
            declared: 0,
            cur: None,
            block: Vec::new(),
            block_anchor,
            totals: AccessTotals::default(),
            pending: HashMap::new(),
            fds: HashMap::new(),
            root: None,
            first_store: None,
            maps: String::new(),
            maps_of,
            startup_missing: None,
            page_cache: Vec::new(),
            generation: 0,
        }
    }

    /// Cache page-base translations (the QEMU path: every address is a page base).
    fn cache_pages(&mut self) {
        self.page_cache = vec![(u64::MAX, 0, 0, 0); 1 << 14];
    }

    /// The address space changed: cached translations are stale.
    fn invalidate(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.page_cache.iter_mut().for_each(|e| e.0 = u64::MAX);
        }
    }

    fn translate(&mut self, addr: u64) -> Option<(u64, u32)> {
        if self.page_cache.is_empty() {
            return self.aligner.translate(addr);
        }
        let (page, slot) = (addr / PAGE, (addr / PAGE) as usize & ((1 << 14) - 1));
        let e = self.page_cache[slot];
        if e.0 == page && e.3 == self.generation {
            return (e.2 != u32::MAX).then_some((e.1 + addr % PAGE, e.2));
        }
        let base = self.aligner.translate(page * PAGE);
        self.page_cache[slot] = (page, base.map_or(0, |b| b.0), base.map_or(u32::MAX, |b| b.1), self.generation);
        base.map(|(n, r)| (n + addr % PAGE, r))
    }

    fn flush_run(&mut self) {
        if let Some(r) = self.cur.take() {
            self.block.push(r);
        }
    }

    fn flush_block(&mut self) -> io::Result<()> {
        self.flush_run();
        if self.block.is_empty() {
            return Ok(());
        }
        while self.declared < self.aligner.names.len() as u32 {
            self.writer.region(&self.aligner.names[self.declared as usize])?;
            self.declared += 1;
        }
        self.writer.block(self.block_anchor, &self.block)?;
        self.block.clear();
        Ok(())
    }

    fn access(&mut self, addr: u64, write: bool) -> io::Result<()> {
        self.accesses(addr, 1, write as u64)
    }

    /// `count` accesses in a row at `addr` (its page), `writes` of them stores: one of
    /// lackey's lines (count 1), or one of the QEMU plugin's runs.
    fn accesses(&mut self, addr: u64, count: u64, writes: u64) -> io::Result<()> {
        self.totals.raw_accesses += count;
        self.totals.writes += writes;
        if writes > 0 && self.first_store.is_none() {
            self.first_store = Some(addr);
            self.aligner.stack(&self.maps, addr);
            self.invalidate();
        }
        let Some((n, region)) = self.translate(addr) else {
            self.totals.unmapped_accesses += count;
            self.totals.unmapped_writes += writes;
            return Ok(());
        };
        let page = n / PAGE;
        match &mut self.cur {
            Some(r) if r.page == page && r.region == region => {
                r.count += count;
                r.write |= writes > 0;
            }
            _ => {
                self.flush_run();
                if self.block.len() >= MAX_BLOCK_RUNS {
                    self.flush_block()?;
                }
                self.cur = Some(AccessRun { page, count, write: writes > 0, region });
            }
        }
        Ok(())
    }

    fn call(&mut self, nr: u64, args: &[(u64, Option<Vec<u8>>)], ret: Result<u64, u64>) -> io::Result<()> {
        let Some(kind) = kind_of(nr) else { return Ok(()) };
        let arg = |i: usize| args.get(i).map_or(0, |a| a.0);
        match kind {
            SyscallKind::Open | SyscallKind::Openat | SyscallKind::Creat => {
                let i = if kind == SyscallKind::Openat { 1 } else { 0 };
                if let (Ok(fd), Some(p)) = (ret, args.get(i).and_then(|a| a.1.clone())) {
                    self.fds.insert(fd as i64, p);
                }
            }
            SyscallKind::Close => {
                self.fds.remove(&(arg(0) as i32 as i64));
            }
            SyscallKind::Dup | SyscallKind::Dup2 | SyscallKind::Dup3 => {
                if let (Ok(fd), Some(p)) = (ret, self.fds.get(&(arg(0) as i32 as i64)).cloned()) {
                    self.fds.insert(fd as i64, p);
                }
            }
            _ => {
                let ret = match ret {
                    Ok(v) => v as i64,
                    Err(e) => -(e as i64),
                };
                let vargs: Vec<u64> = args.iter().map(|a| a.0).collect();
                let path = (kind == SyscallKind::Mmap && arg(3) & MAP_ANONYMOUS == 0).then(|| self.fds.get(&(arg(4) as i32 as i64)).cloned()).flatten();
                self.mem_call(MemCall { kind, args: vargs, ret, path, index: 0 })?;
            }
        }
        Ok(())
    }

    /// A memory call of the instrumented run, aligned; a match starts a new block.
    fn mem_call(&mut self, call: MemCall) -> io::Result<()> {
        let before = self.aligner.anchor;
        self.aligner.syscall(&call);
        self.invalidate();
        if self.aligner.anchor != before {
            self.flush_block()?;
            self.block_anchor = self.aligner.anchor;
        }
        Ok(())
    }

    /// One line of the log.
    pub fn line(&mut self, l: &[u8]) -> io::Result<()> {
        match parse_line(l) {
            LogLine::Data { addr, write } => self.access(addr, write)?,
            LogLine::Instr => self.totals.instructions += 1,
            LogLine::Banner { pid } if self.root.is_none() => {
                // valgrind prints its preamble after loading the client and before running it.
                self.root = Some(pid);
                match (self.maps_of)(pid) {
                    Some(m) => {
                        self.aligner.startup(&m);
                        self.maps = m;
                    }
                    None => self.startup_missing = Some(format!("/proc/{pid}/maps of the valgrind run could not be read")),
                }
            }
            LogLine::Call { pid, tid, nr, args, ret } => {
                if self.root.is_some_and(|r| r != pid) {
                    return Ok(());
                }
                match ret {
                    Some(r) => self.call(nr, &args, r)?,
                    None => {
                        self.pending.insert((pid, tid), (nr, args));
                    }
                }
            }
            LogLine::Resume { pid, tid, nr, ret } => {
                if let Some((n, args)) = self.pending.remove(&(pid, tid)).filter(|(n, _)| *n == nr) {
                    self.call(n, &args, ret)?;
                }
            }
            LogLine::Banner { .. } | LogLine::Other => {}
        }
        Ok(())
    }

    /// Write the last runs and the trailer; returns the totals, the sink and the file's size.
    pub fn finish(mut self) -> io::Result<(AccessTotals, W, u64)> {
        self.flush_block()?;
        self.totals.valgrind_syscalls = self.aligner.seen;
        self.totals.matched_syscalls = self.aligner.matched;
        self.totals.runs = self.writer.written().0;
        let (w, bytes) = self.writer.finish(&self.totals)?;
        Ok((self.totals, w, bytes))
    }
}

/// The pipe's size: room for the log while the reader sleeps between short reads.
const PIPE_BYTES: i32 = 1 << 20;

/// The read end of the log pipe, read in batches: valgrind writes every line with a system call
/// of its own, and a reader that waits on the pipe would be woken for each (two context
/// switches a line, most of the recorder's overhead); after a read that did not fill the
/// buffer the reader sleeps 2 ms first, while the pipe fills.
struct Batched {
    f: std::fs::File,
    short: bool,
}

impl io::Read for Batched {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.short {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let n = self.f.read(buf)?;
        self.short = n < buf.len() / 2;
        Ok(n)
    }
}

/// The instrumentation engine of `record --accesses=ENGINE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// QEMU user-mode with thplab's TCG plugin when it can run here, else lackey.
    Auto,
    /// QEMU user-mode (`qemu-x86_64`) with thplab's TCG plugin ([`qemu`]).
    Qemu,
    /// valgrind's lackey tool (this module).
    Lackey,
}

impl std::str::FromStr for Engine {
    type Err = String;
    fn from_str(s: &str) -> Result<Engine, String> {
        match s {
            "auto" => Ok(Engine::Auto),
            "qemu" => Ok(Engine::Qemu),
            "lackey" | "valgrind" => Ok(Engine::Lackey),
            _ => Err(format!("unknown access recorder {s:?}: valid are qemu (QEMU user-mode with thplab's TCG plugin), lackey (valgrind lackey) and auto (qemu when it can run here, else lackey)")),
        }
    }
}

impl Engine {
    /// The engine `record --accesses=self` runs: auto is qemu when `qemu-x86_64` is in PATH
    /// and the plugin was built, else lackey when valgrind is installed; an error says what is
    /// missing.
    pub fn resolve(self) -> Result<Engine, String> {
        let lackey = || valgrind_path().map(|_| Engine::Lackey).ok_or_else(|| "--accesses=lackey runs the program under valgrind (lackey), which is not installed here (no valgrind in PATH): install it (apt-get install valgrind)".to_string());
        match self {
            Engine::Lackey => lackey(),
            Engine::Qemu => qemu::available().map(|_| Engine::Qemu),
            Engine::Auto => qemu::available().map(|_| Engine::Qemu).or_else(|q| lackey().map_err(|l| format!("--accesses needs QEMU user-mode or valgrind: {q}; {l}"))),
        }
    }

    /// The tool's name in messages.
    pub fn tool(self) -> &'static str {
        match self {
            Engine::Qemu => "QEMU",
            _ => "valgrind",
        }
    }
}

/// Record `argv`'s accesses under `engine` (resolved: qemu or lackey): [`qemu::record_accesses_qemu`]
/// or [`record_accesses`].
pub fn record_with(engine: Engine, argv: &[OsString], rec: &Recording, trace_crc: u32, native_ns: u64, out: impl Write) -> Result<AccessSummary, RecordError> {
    match engine {
        Engine::Qemu => qemu::record_accesses_qemu(argv, rec, trace_crc, native_ns, out),
        _ => record_accesses(argv, rec, trace_crc, native_ns, out),
    }
}

/// What `record --accesses` did.
#[derive(Clone, Debug)]
pub struct AccessSummary {
    /// The engine that ran the program (qemu or lackey).
    pub engine: Engine,
    pub totals: AccessTotals,
    /// Bytes of the companion file.
    pub bytes: u64,
    /// Why the exec image (executable, interpreter, their bss) was not mapped, if it was not.
    pub startup_missing: Option<String>,
    /// valgrind's exit status.
    pub status: std::process::ExitStatus,
    /// The names of the images the first process became by execve after the first (a wrapper
    /// such as a pyenv shim or a shell script that execs the real program): valgrind does not
    /// follow them, so their accesses are not recorded.
    pub later_images: Vec<String>,
    /// Why the instrumented run's accesses are incomplete, if they are (QEMU's plugin did not
    /// reach its end record).
    pub incomplete: Option<String>,
}

impl AccessSummary {
    /// What the user must know about the accesses recorded, one sentence each.
    pub fn warnings(&self) -> Vec<String> {
        let t = &self.totals;
        let mut w = Vec::new();
        if !self.later_images.is_empty() {
            w.push(format!(
                "the program's process became {} by execve after it started (a wrapper script or shim?): {} does not follow an execve, so only the first image's accesses were recorded; record the program itself",
                self.later_images.join(", then "),
                self.engine.tool()
            ));
        }
        if t.unmapped_accesses > 0 {
            w.push(format!(
                "{} of {} accesses ({:.2}%, {} writes) under {} fall outside every mapping known in the recorded run ({}'s own, or mappings not matched): counted, not replayed",
                t.unmapped_accesses,
                t.raw_accesses,
                100.0 * t.unmapped_accesses as f64 / t.raw_accesses.max(1) as f64,
                t.unmapped_writes,
                self.engine.tool(),
                self.engine.tool()
            ));
        }
        if let Some(why) = &self.incomplete {
            w.push(why.clone());
        }
        if let Some(why) = &self.startup_missing {
            w.push(format!("{why}: accesses to the executable, its interpreter and the stack are not mapped"));
        }
        if !self.status.success() {
            w.push(format!("the program under {} ended with {}: its accesses may not be the recorded run's", self.engine.tool(), self.status));
        }
        w
    }
}

/// The names of the images the first process (`root`) became by execve after its first.
pub(crate) fn later_images(root: u32, events: &[trace::Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::Comm { comm, exec: true } if e.pid == root => Some(String::from_utf8_lossy(comm).into_owned()),
            _ => None,
        })
        .skip(1)
        .collect()
}

/// The descriptor an engine writes its output to (lackey's `--log-fd`, the plugin's `fd=`).
pub(crate) const ENGINE_FD: i32 = 3;

/// Spawn `cmd` (an engine named `what` running the program: THP disabled, no randomisation,
/// stdin/stdout/stderr on /dev/null) with the write end of a pipe on [`ENGINE_FD`]; the read
/// end, the child and the time it started.
pub(crate) fn spawn_engine(mut cmd: Command, what: &std::path::Path) -> Result<(OwnedFd, std::process::Child, Instant), RecordError> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(RecordError::Other(format!("pipe: {}", io::Error::last_os_error())));
    }
    // SAFETY: both fds were just created and are owned here.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let w = wr.as_raw_fd();
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if w == ENGINE_FD {
                libc::fcntl(ENGINE_FD, libc::F_SETFD, 0);
            } else if libc::dup2(w, ENGINE_FD) < 0 {
                return Err(io::Error::last_os_error());
            }
            crate::timed::as_recorded();
            Ok(())
        });
    }
    let t = Instant::now();
    let child = cmd.spawn().map_err(|e| RecordError::Other(format!("cannot run {}: {e}", what.display())))?;
    drop(wr);
    Ok((rd, child, t))
}

/// The native time the run under valgrind is compared with: `rec`'s untraced median (`record
/// --timed`), else one untraced run of `argv`, else (a program that cannot run twice the same
/// way) the recorded run's.
pub fn native_ns(argv: &[OsString], rec: &Recording) -> u64 {
    match rec.header.untraced_wall_ns {
        0 => crate::time_untraced(argv, 1).unwrap_or(rec.header.duration_ns),
        t => t,
    }
}

/// Run `argv` under valgrind lackey (THP disabled, no randomisation, stdin/stdout/stderr on
/// /dev/null) and write its accesses, mapped onto `rec`, to `out` as the companion file of the
/// recording whose trailer CRC is `trace_crc`. `native_ns` is the native run's time that the
/// valgrind run's is compared with.
pub fn record_accesses(argv: &[OsString], rec: &Recording, trace_crc: u32, native_ns: u64, out: impl Write) -> Result<AccessSummary, RecordError> {
    let valgrind = valgrind_path().ok_or_else(|| RecordError::Unavailable("--accesses runs the program under valgrind, which is not installed (not in PATH): apt-get install valgrind".into()))?;
    let (program, args) = argv.split_first().ok_or_else(|| RecordError::Other("no program to run".into()))?;
    let program = crate::resolve_program(program)?;
    let mut cmd = Command::new(&valgrind);
    cmd.args(["--tool=lackey", "--trace-mem=yes", "--trace-syscalls=yes", "--child-silent-after-fork=yes"])
        .arg(format!("--log-fd={ENGINE_FD}"))
        .arg("--")
        .arg(&program)
        .args(args);
    let (rd, mut child, t) = spawn_engine(cmd, &valgrind)?;
    let header = AccessHeader { trace_crc, trace_records: rec.events.len() as u64, page_size: PAGE, flags: trace::accesses::ACCESS_ZSTD };
    let writer = AccessWriter::new(out, &header).map_err(|e| RecordError::Other(format!("writing the accesses: {e}")))?;
    let maps_of = Box::new(|pid: u64| std::fs::read_to_string(format!("/proc/{pid}/maps")).ok());
    let mut c = Collector::new(Aligner::new(Native::of(rec)), writer, maps_of);
    // SAFETY: fcntl on an fd owned here; a refusal (above pipe-max-size) leaves the default.
    unsafe { libc::fcntl(rd.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES) };
    let mut r = BufReader::with_capacity(1 << 20, Batched { f: std::fs::File::from(rd), short: false });
    let mut line = Vec::with_capacity(256);
    let werr = |e: io::Error| RecordError::Other(format!("writing the accesses: {e}"));
    loop {
        line.clear();
        match r.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => c.line(&line).map_err(werr)?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(RecordError::Other(format!("reading valgrind's log: {e}"))),
        }
    }
    let status = child.wait().map_err(|e| RecordError::Other(format!("waiting for valgrind: {e}")))?;
    c.totals.valgrind_ns = t.elapsed().as_nanos() as u64;
    c.totals.native_ns = native_ns;
    let startup_missing = c.startup_missing.take();
    if c.totals.raw_accesses == 0 {
        return Err(RecordError::Other(format!("valgrind reported no accesses ({status}): is {} runnable under valgrind?", program.to_string_lossy())));
    }
    let (totals, _, bytes) = c.finish().map_err(werr)?;
    Ok(AccessSummary { engine: Engine::Lackey, totals, bytes, startup_missing, status, later_images: later_images(rec.header.root_pid, &rec.events), incomplete: None })
}

pub mod qemu;

#[cfg(test)]
mod tests;
