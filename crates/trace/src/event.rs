//! The decoded contents of a trace: the [`Header`], one [`Event`] per record, the [`Trailer`], and
//! the table of recorded system calls ([`SyscallKind`]). The byte layout is in `codec`, `write`
//! and `read`; docs/trace-format.md describes both.

use serde::Serialize;

/// Everything known about the recording, written before the first record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Header {
    /// The program as given on the command line (argv\[0\] before the PATH search).
    pub program: Vec<u8>,
    /// The path that was executed (after the PATH search).
    pub exec_path: Vec<u8>,
    /// The full argument vector, argv\[0\] included.
    pub argv: Vec<Vec<u8>>,
    /// The working directory of the program.
    pub cwd: Vec<u8>,
    /// `uname -r` of the recording machine.
    pub kernel_release: String,
    /// `uname -m` of the recording machine (system call arguments are this architecture's).
    pub machine: String,
    /// Wall-clock time of the start, nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
    /// CLOCK_MONOTONIC at the start: event times are nanoseconds after this.
    pub start_monotonic_ns: u64,
    /// The process id of the recorded program (the first process).
    pub root_pid: u32,
    /// The base page size of the recording machine.
    pub page_size: u64,
    /// [`flags`] bits: how the program was run.
    pub flags: u64,
    /// Records of each kind in the file, by record kind byte (must equal what the file holds).
    pub counts: Vec<(u8, u64)>,
    /// Events the kernel dropped (PERF_RECORD_LOST); a trace with any loss is incomplete.
    pub lost_events: u64,
    /// The program's exit status as a shell reports it: the exit code, or 128 + signal.
    pub exit_status: u32,
    /// Nanoseconds from the start to the end of the recording.
    pub duration_ns: u64,
    /// The recording machine's THP knobs when the recording started, as `grep -r .
    /// /sys/kernel/mm/transparent_hugepage` prints them (`enabled:always [madvise] never`, one
    /// per line); empty in version 1 files. Placement of shmem mappings depends on them.
    pub thp_settings: Vec<u8>,
    /// (2.3) The median wall time, in ns, of untraced runs of the program under the same
    /// conditions (THP disabled for it, no address randomisation), `thplab record --timed N`;
    /// 0: not timed. The model predicts the program's time under other settings from it.
    pub untraced_wall_ns: u64,
}

/// Bits of [`Header::flags`].
pub mod flags {
    /// The program ran with `prctl(PR_SET_THP_DISABLE, 1)` (so its faults are 4 KiB faults).
    pub const THP_DISABLED: u64 = 1;
    /// The program ran with `personality(ADDR_NO_RANDOMIZE)`.
    pub const NO_RANDOMIZE: u64 = 2;
    /// Kernel-mode faults on user addresses (`exceptions:page_fault_kernel`) were recorded too.
    pub const KERNEL_FAULTS: u64 = 4;
    /// The first process was stopped after its execve and its address space read ([`EventBody::ExecMaps`]).
    pub const EXEC_SNAPSHOT: u64 = 8;
    /// Every successful execve of every process was stopped and the new address space read: one
    /// [`EventBody::ExecMaps`] per execve, of that process, timed between the call's entry and
    /// anything the new image does. Without it (recordings made before), only the first
    /// process has one (flag [`EXEC_SNAPSHOT`]).
    pub const EXEC_SNAPSHOT_EVERY: u64 = 64;
    /// The files of open/openat/creat/unlink/unlinkat were resolved while the thread waited at
    /// the call's entry ([`EventBody::Path`]).
    pub const PATHS: u64 = 16;
    /// (2.1) Calls whose result PR_SET_THP_DISABLE would change (madvise(MADV_COLLAPSE),
    /// prctl(PR_GET_THP_DISABLE)) were stopped by the recorder and answered as they would be
    /// without it ([`EventBody::Answered`]).
    pub const ANSWERS: u64 = 32;
}

/// What the writer puts after the last record; the reader checks it against the header and
/// against what it read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Trailer {
    /// Records before the trailer.
    pub records: u64,
    /// Same as [`Header::lost_events`].
    pub lost_events: u64,
    /// CRC-32 (IEEE) of every byte of the file before it (magic, header, records, trailer counts).
    pub crc32: u32,
}

/// One record: when, which thread, what.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Event {
    /// Nanoseconds after [`Header::start_monotonic_ns`]; never decreases along the file.
    pub time_ns: u64,
    /// The thread (kernel tid) the event belongs to.
    pub tid: u32,
    /// Its process (tgid).
    pub pid: u32,
    pub body: EventBody,
}

/// The kinds of record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum EventBody {
    /// A page fault taken by the thread. `error_code` is the x86 page fault error code: bit 0
    /// the page was present (protection fault, e.g. copy-on-write), bit 1 write, bit 2 user
    /// mode (clear: the kernel faulted on a user address, e.g. in copy_to_user), bit 4
    /// instruction fetch.
    Fault { addr: u64, error_code: u64 },
    /// A system call with its arguments and result.
    Syscall(Syscall),
    /// A new task (fork, vfork, clone: thread or process) created by the record's thread.
    TaskNew { tid: u32, pid: u32 },
    /// The record's thread exited.
    TaskExit,
    /// The thread's name changed (`exec` set: because of an execve).
    Comm { comm: Vec<u8>, exec: bool },
    /// A mapping was created (the kernel's PERF_RECORD_MMAP2: every mmap, brk growth and ELF
    /// segment mapped at exec), with the identity of its file.
    Map(MapInfo),
    /// The address space of the record's process right after its execve (from
    /// /proc/PID/maps while the process was stopped).
    ExecMaps(Vec<MapEntry>),
    /// The kernel dropped `count` events around this time.
    Lost { count: u64 },
    /// The file the thread's next path-taking system call (`call`: open, openat, creat, unlink,
    /// unlinkat) names, looked up by the recorder while the thread waited at the call's entry.
    Path(PathInfo),
    /// The tmpfs mounts the program could see at its execve (/proc/PID/mountinfo).
    Mounts(Vec<MountEntry>),
    /// (2.1) The thread's next system call record (of kind `call`) did not run: the recorder
    /// stopped it at its entry and gave it the result `ret` (what it would have returned without
    /// PR_SET_THP_DISABLE), without performing it.
    Answered { call: u8, ret: i64 },
    /// (2.4) Where the record's process's stack starts after its execve (`mm->start_stack`,
    /// /proc/PID/stat field 28: the address of argc): execve wrote every page from it to the
    /// stack's top (the argument and environment strings, auxv and the pointer arrays). Written
    /// just before the process's [`EventBody::ExecMaps`], at the same time.
    ExecStack { start_stack: u64 },
    /// (2.5) The iovecs of the thread's next system call record of kind `call` (vmsplice:
    /// its own; io_uring_register of buffers: the buffers; process_vm_writev: the remote
    /// ranges, in the target's address space), read by the recorder while the thread waited at
    /// the call's entry: (base, length) each.
    Iovecs { call: u8, iovs: Vec<(u64, u64)> },
    /// (2.6) A userfaultfd ioctl of the record's thread, read by the recorder from the
    /// program's memory while the thread waited at the call's entry; the call then ran.
    Uffd(UffdIoctl),
}

/// What a userfaultfd ioctl asked (include/uapi/linux/userfaultfd.h). Its result is not
/// recorded: the replay performs the operation, which fails where the kernel's failed as long
/// as the model's address space is the kernel's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UffdIoctl {
    /// The operation, the request's `_IOC_NR` (`linux_abi::userfaultfd::COPY`, ...).
    pub op: u8,
    /// The userfaultfd it was issued on.
    pub fd: u32,
    /// The range: REGISTER, UNREGISTER, WAKE, ZEROPAGE, WRITEPROTECT, CONTINUE, POISON their
    /// `range`; COPY and MOVE their `dst` and `len`; 0 for API.
    pub start: u64,
    pub len: u64,
    /// The struct's `mode` (API: the `features` asked for).
    pub mode: u64,
    /// COPY's and MOVE's `src`; 0 for the others.
    pub src: u64,
}

/// What a path named when the system call was entered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PathInfo {
    /// The system call's record kind ([`SyscallKind::code`]).
    pub call: u8,
    /// The path made absolute with the thread's working directory or the dirfd's path (not
    /// canonicalised: symbolic links and `..` are left as the program wrote them).
    pub path: Vec<u8>,
    /// The file existed; then `maj`, `min`, `ino`, `size` are its own, else `maj` and `min` are
    /// those of the directory it would be created in and `ino` and `size` are 0.
    pub exists: bool,
    pub maj: u32,
    pub min: u32,
    pub ino: u64,
    pub size: u64,
    /// `statfs` f_type of the file or its directory (tmpfs: 0x01021994); 0 when unknown.
    pub fs_magic: u64,
}

/// tmpfs's `statfs` f_type (`include/uapi/linux/magic.h: TMPFS_MAGIC`).
pub const TMPFS_MAGIC: u64 = 0x0102_1994;

/// One tmpfs mount (a line of /proc/PID/mountinfo).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MountEntry {
    pub maj: u32,
    pub min: u32,
    pub fstype: Vec<u8>,
    pub mount_point: Vec<u8>,
    /// The superblock options (`rw,size=...,huge=always`).
    pub options: Vec<u8>,
}

impl MountEntry {
    /// The `huge=` option (`never` when absent).
    pub fn huge(&self) -> &str {
        let o = std::str::from_utf8(&self.options).unwrap_or("");
        o.split(',').find_map(|x| x.strip_prefix("huge=")).unwrap_or("never")
    }
}

/// A recorded system call: its kind, the tracepoint's arguments in order, the result, and how
/// long it took. The record's time is the time of entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Syscall {
    pub kind: SyscallKind,
    /// Exactly `kind.args().len()` values, as the tracepoint gives them (pointers included).
    pub args: Vec<u64>,
    /// The return value (negative: -errno); `None` when the call never returned while
    /// recorded (exit_group, a thread killed in the call, the end of the recording).
    pub ret: Option<i64>,
    /// Nanoseconds from entry to exit (0 when `ret` is `None`).
    pub duration_ns: u64,
}

/// A new mapping as the kernel reported it (PERF_RECORD_MMAP2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MapInfo {
    pub addr: u64,
    pub len: u64,
    /// File offset in bytes.
    pub pgoff: u64,
    pub maj: u32,
    pub min: u32,
    pub ino: u64,
    pub ino_generation: u64,
    /// PROT_* bits.
    pub prot: u32,
    /// MAP_* bits as the kernel reports them (MAP_SHARED 0x1, MAP_PRIVATE 0x2, ...).
    pub flags: u32,
    /// The file's path, or `//anon`, `[heap]`, `[stack]`, `/memfd:NAME (deleted)`, ...
    pub path: Vec<u8>,
}

/// One line of /proc/PID/maps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MapEntry {
    pub start: u64,
    pub end: u64,
    /// [`perm`] bits.
    pub perms: u32,
    pub offset: u64,
    pub maj: u32,
    pub min: u32,
    pub ino: u64,
    pub path: Vec<u8>,
}

/// Bits of [`MapEntry::perms`].
pub mod perm {
    pub const READ: u32 = 1;
    pub const WRITE: u32 = 2;
    pub const EXEC: u32 = 4;
    pub const SHARED: u32 = 8;
}

macro_rules! syscalls {
    ($($variant:ident = $code:literal, $name:literal, [$($arg:literal),*];)*) => {
        /// The recorded system calls. The number is the record kind byte (docs/trace-format.md).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(rename_all = "snake_case")]
        pub enum SyscallKind { $($variant = $code),* }

        impl SyscallKind {
            /// Every kind, in kind-byte order.
            pub const ALL: &'static [SyscallKind] = &[$(SyscallKind::$variant),*];

            /// The system call's name (as in `syscalls:sys_enter_NAME`).
            pub fn name(self) -> &'static str {
                match self { $(SyscallKind::$variant => $name),* }
            }

            /// The tracepoint's argument names, in order (x86_64).
            pub fn args(self) -> &'static [&'static str] {
                match self { $(SyscallKind::$variant => &[$($arg),*]),* }
            }

            /// The record kind byte.
            pub fn code(self) -> u8 {
                self as u8
            }

            /// The kind for a record kind byte, if it is a system call.
            pub fn from_code(code: u8) -> Option<SyscallKind> {
                match code { $($code => Some(SyscallKind::$variant),)* _ => None }
            }

            /// Whether the call takes a path that the recorder resolves ([`EventBody::Path`]).
            pub fn takes_path(self) -> bool {
                matches!(self, SyscallKind::Open | SyscallKind::Openat | SyscallKind::Creat | SyscallKind::Unlink | SyscallKind::Unlinkat)
            }

            /// The kind for a system call name.
            pub fn from_name(name: &str) -> Option<SyscallKind> {
                match name { $($name => Some(SyscallKind::$variant),)* _ => None }
            }
        }
    };
}

syscalls! {
    Mmap = 16, "mmap", ["addr", "len", "prot", "flags", "fd", "off"];
    Munmap = 17, "munmap", ["addr", "len"];
    Mremap = 18, "mremap", ["addr", "old_len", "new_len", "flags", "new_addr"];
    Mprotect = 19, "mprotect", ["start", "len", "prot"];
    Madvise = 20, "madvise", ["start", "len_in", "behavior"];
    Brk = 21, "brk", ["brk"];
    Prctl = 22, "prctl", ["option", "arg2", "arg3", "arg4", "arg5"];
    Clone = 23, "clone", ["clone_flags", "newsp", "parent_tidptr", "child_tidptr", "tls"];
    Clone3 = 24, "clone3", ["uargs", "size"];
    Fork = 25, "fork", [];
    Vfork = 26, "vfork", [];
    Execve = 27, "execve", ["filename", "argv", "envp"];
    Execveat = 28, "execveat", ["fd", "filename", "argv", "envp", "flags"];
    ExitGroup = 29, "exit_group", ["error_code"];
    Exit = 30, "exit", ["error_code"];
    MemfdCreate = 31, "memfd_create", ["uname", "flags"];
    Ftruncate = 32, "ftruncate", ["fd", "length"];
    Fallocate = 33, "fallocate", ["fd", "mode", "offset", "len"];
    Openat = 34, "openat", ["dfd", "filename", "flags", "mode"];
    Open = 35, "open", ["filename", "flags", "mode"];
    Close = 36, "close", ["fd"];
    Mlock = 37, "mlock", ["start", "len"];
    Mlock2 = 38, "mlock2", ["start", "len", "flags"];
    Munlock = 39, "munlock", ["start", "len"];
    Mlockall = 40, "mlockall", ["flags"];
    Munlockall = 41, "munlockall", [];
    Shmat = 42, "shmat", ["shmid", "shmaddr", "shmflg"];
    Shmdt = 43, "shmdt", ["shmaddr"];
    ProcessMadvise = 44, "process_madvise", ["pidfd", "vec", "vlen", "behavior", "flags"];
    Write = 45, "write", ["fd", "buf", "count"];
    Pwrite64 = 46, "pwrite64", ["fd", "buf", "count", "pos"];
    Writev = 47, "writev", ["fd", "vec", "vlen"];
    Pwritev = 48, "pwritev", ["fd", "vec", "vlen", "pos_l", "pos_h"];
    Pwritev2 = 49, "pwritev2", ["fd", "vec", "vlen", "pos_l", "pos_h", "flags"];
    Lseek = 50, "lseek", ["fd", "offset", "whence"];
    Read = 51, "read", ["fd", "buf", "count"];
    Readv = 52, "readv", ["fd", "vec", "vlen"];
    Dup = 53, "dup", ["fildes"];
    Dup2 = 54, "dup2", ["oldfd", "newfd"];
    Dup3 = 55, "dup3", ["oldfd", "newfd", "flags"];
    Fcntl = 56, "fcntl", ["fd", "cmd", "arg"];
    Unlink = 57, "unlink", ["pathname"];
    Unlinkat = 58, "unlinkat", ["dfd", "pathname", "flag"];
    Creat = 59, "creat", ["pathname", "mode"];
    Pread64 = 60, "pread64", ["fd", "buf", "count", "pos"];
    Vmsplice = 61, "vmsplice", ["fd", "uiov", "nr_segs", "flags"];
    IoUringRegister = 62, "io_uring_register", ["fd", "opcode", "arg", "nr_args"];
    ProcessVmWritev = 63, "process_vm_writev", ["pid", "lvec", "liovcnt", "rvec", "riovcnt", "flags"];
}

/// Record kind bytes that are not system calls.
pub mod kind {
    /// The trailer (the end of the records).
    pub const END: u8 = 0;
    pub const FAULT: u8 = 1;
    pub const TASK_NEW: u8 = 2;
    pub const TASK_EXIT: u8 = 3;
    pub const COMM: u8 = 4;
    pub const MAP: u8 = 5;
    pub const EXEC_MAPS: u8 = 6;
    pub const LOST: u8 = 7;
    pub const PATH: u8 = 8;
    pub const MOUNTS: u8 = 9;
    /// (2.1)
    pub const ANSWERED: u8 = 10;
    /// (2.4)
    pub const EXEC_STACK: u8 = 11;
    /// (2.5)
    pub const IOVECS: u8 = 12;
    /// (2.6)
    pub const UFFD: u8 = 13;
}

impl EventBody {
    /// The record kind byte of this body.
    pub fn kind_code(&self) -> u8 {
        match self {
            EventBody::Fault { .. } => kind::FAULT,
            EventBody::Syscall(s) => s.kind.code(),
            EventBody::TaskNew { .. } => kind::TASK_NEW,
            EventBody::TaskExit => kind::TASK_EXIT,
            EventBody::Comm { .. } => kind::COMM,
            EventBody::Map(_) => kind::MAP,
            EventBody::ExecMaps(_) => kind::EXEC_MAPS,
            EventBody::Lost { .. } => kind::LOST,
            EventBody::Path(_) => kind::PATH,
            EventBody::Mounts(_) => kind::MOUNTS,
            EventBody::Answered { .. } => kind::ANSWERED,
            EventBody::ExecStack { .. } => kind::EXEC_STACK,
            EventBody::Iovecs { .. } => kind::IOVECS,
            EventBody::Uffd(_) => kind::UFFD,
        }
    }
}

/// The name of a record kind byte (`fault`, `mmap`, ...), or `None` for an unknown byte.
pub fn kind_name(code: u8) -> Option<&'static str> {
    Some(match code {
        kind::END => "end",
        kind::FAULT => "fault",
        kind::TASK_NEW => "task_new",
        kind::TASK_EXIT => "task_exit",
        kind::COMM => "comm",
        kind::MAP => "map",
        kind::EXEC_MAPS => "exec_maps",
        kind::LOST => "lost",
        kind::PATH => "path",
        kind::MOUNTS => "mounts",
        kind::ANSWERED => "answered",
        kind::EXEC_STACK => "exec_stack",
        kind::IOVECS => "iovecs",
        kind::UFFD => "uffd",
        c => return SyscallKind::from_code(c).map(SyscallKind::name),
    })
}
