//! The Linux system-call ABI numbers thplab uses, in one place (x86-64 values, which are also
//! the asm-generic ones for every constant here). Pure constants: the core crates (the model
//! and the replay) use them without depending on libc; the live and record crates may use
//! libc's, and the test below checks that the two agree.
//!
//! Sources (6.18): `include/uapi/asm-generic/mman-common.h`, `arch/x86/include/uapi/asm/mman.h`,
//! `include/uapi/linux/mman.h`, `include/uapi/linux/prctl.h`, `include/uapi/asm-generic/fcntl.h`,
//! `include/uapi/linux/fcntl.h`, `include/uapi/linux/fs.h`, `include/uapi/linux/falloc.h`,
//! `include/uapi/linux/memfd.h`, `include/uapi/linux/userfaultfd.h`, `arch/x86/include/asm/trap_pf.h`.

/// mmap, mremap, madvise, mlock.
pub mod mman {
    pub const PROT_READ: u64 = 0x1;
    pub const PROT_WRITE: u64 = 0x2;
    pub const PROT_EXEC: u64 = 0x4;

    pub const MAP_SHARED: u64 = 0x01;
    pub const MAP_PRIVATE: u64 = 0x02;
    pub const MAP_FIXED: u64 = 0x10;
    pub const MAP_ANONYMOUS: u64 = 0x20;
    pub const MAP_LOCKED: u64 = 0x2000;
    /// Becomes VM_NORESERVE unless vm.overcommit_memory is 2 (mm/mmap.c: do_mmap).
    pub const MAP_NORESERVE: u64 = 0x4000;
    pub const MAP_POPULATE: u64 = 0x8000;
    /// hugetlb memory (mm/mmap.c: `ksys_mmap_pgoff`); the page size's log2 in the bits from
    /// MAP_HUGE_SHIFT (0: the default hstate).
    pub const MAP_HUGETLB: u64 = 0x40000;
    pub const MAP_HUGE_SHIFT: u64 = 26;
    /// Becomes VM_NOHUGEPAGE (`include/linux/mman.h: calc_vm_flag_bits`, 6.18).
    pub const MAP_STACK: u64 = 0x20000;
    pub const MAP_FIXED_NOREPLACE: u64 = 0x10_0000;

    pub const MREMAP_MAYMOVE: u64 = 1;
    pub const MREMAP_FIXED: u64 = 2;

    pub const MADV_NORMAL: u64 = 0;
    pub const MADV_DONTNEED: u64 = 4;
    pub const MADV_FREE: u64 = 8;
    pub const MADV_DONTFORK: u64 = 10;
    pub const MADV_REMOVE: u64 = 9;
    pub const MADV_DOFORK: u64 = 11;
    pub const MADV_HUGEPAGE: u64 = 14;
    pub const MADV_NOHUGEPAGE: u64 = 15;
    pub const MADV_WIPEONFORK: u64 = 18;
    pub const MADV_KEEPONFORK: u64 = 19;
    pub const MADV_POPULATE_READ: u64 = 22;
    pub const MADV_POPULATE_WRITE: u64 = 23;
    pub const MADV_COLLAPSE: u64 = 25;

    /// mlock2 flag.
    pub const MLOCK_ONFAULT: u64 = 1;
    pub const MCL_CURRENT: u64 = 1;
    pub const MCL_FUTURE: u64 = 2;
    pub const MCL_ONFAULT: u64 = 4;
}

/// prctl options.
/// clone(2) flags.
pub mod sched {
    pub const CLONE_VM: u64 = 0x100;
    pub const CLONE_VFORK: u64 = 0x4000;
}

pub mod prctl {
    pub const PR_SET_THP_DISABLE: u64 = 41;
    pub const PR_GET_THP_DISABLE: u64 = 42;
    /// PR_SET_THP_DISABLE flag (6.18): disable THP except where MADV_HUGEPAGE asks for it.
    pub const PR_THP_DISABLE_EXCEPT_ADVISED: u64 = 1 << 1;
}

/// open, fcntl, unlinkat, pwritev2, fallocate.
pub mod fcntl {
    pub const O_WRONLY: u64 = 0o1;
    pub const O_CREAT: u64 = 0o100;
    pub const O_TRUNC: u64 = 0o1000;
    pub const O_APPEND: u64 = 0o2000;
    /// x86-64 and asm-generic (arm64 has its own).
    pub const O_DIRECT: u64 = 0o40000;
    pub const F_DUPFD: u64 = 0;
    pub const F_DUPFD_CLOEXEC: u64 = 1030;
    pub const AT_REMOVEDIR: u64 = 0x200;
    pub const RWF_APPEND: u64 = 0x10;
    pub const FALLOC_FL_KEEP_SIZE: u64 = 1;
    pub const FALLOC_FL_PUNCH_HOLE: u64 = 2;
}

/// memfd_create flags.
pub mod memfd {
    pub const MFD_HUGETLB: u64 = 4;
}

/// io_uring_register opcodes (include/uapi/linux/io_uring.h) that register buffers.
pub mod io_uring {
    pub const IORING_REGISTER_BUFFERS: u64 = 0;
    pub const IORING_REGISTER_BUFFERS2: u64 = 15;
    pub const IORING_REGISTER_BUFFERS_UPDATE: u64 = 16;
    /// A flag in the opcode's bit 31 (the ring fd is a registered index), not an opcode.
    pub const IORING_REGISTER_USE_REGISTERED_RING: u64 = 1 << 31;
    /// The opcode of an io_uring_register argument, without the flag.
    pub fn opcode(arg: u64) -> u64 {
        arg & 0xffff_ffff & !IORING_REGISTER_USE_REGISTERED_RING
    }
}

/// userfaultfd's ioctls (include/uapi/linux/userfaultfd.h): type 0xAA, the number (`_IOC_NR`)
/// names the operation, the size is that of its struct.
pub mod userfaultfd {
    /// The ioctl type byte of every UFFDIO_* request.
    pub const UFFDIO: u64 = 0xAA;
    pub const API: u8 = 0x3F;
    pub const REGISTER: u8 = 0x00;
    pub const UNREGISTER: u8 = 0x01;
    pub const WAKE: u8 = 0x02;
    pub const COPY: u8 = 0x03;
    pub const ZEROPAGE: u8 = 0x04;
    pub const MOVE: u8 = 0x05;
    pub const WRITEPROTECT: u8 = 0x06;
    pub const CONTINUE: u8 = 0x07;
    pub const POISON: u8 = 0x08;
    /// The full request numbers (`_IOWR`/`_IOR` with the struct sizes: uffdio_api 24,
    /// uffdio_register 32, uffdio_range 16, uffdio_copy 40, uffdio_zeropage 32, uffdio_move
    /// 40, uffdio_writeprotect 24, uffdio_continue 32, uffdio_poison 32).
    pub const REQUESTS: [(u64, u8); 10] = [
        (0xc018_aa3f, API),
        (0xc020_aa00, REGISTER),
        (0x8010_aa01, UNREGISTER),
        (0x8010_aa02, WAKE),
        (0xc028_aa03, COPY),
        (0xc020_aa04, ZEROPAGE),
        (0xc028_aa05, MOVE),
        (0xc018_aa06, WRITEPROTECT),
        (0xc020_aa07, CONTINUE),
        (0xc020_aa08, POISON),
    ];
    /// The operation of a request number (its low 32 bits, as the kernel reads an `unsigned
    /// int cmd`), if it is one of [`REQUESTS`].
    pub fn op_of(cmd: u64) -> Option<u8> {
        REQUESTS.iter().find(|r| r.0 == cmd & 0xffff_ffff).map(|r| r.1)
    }
    /// The struct size of a request number (`_IOC_SIZE`).
    pub fn size_of(cmd: u64) -> usize {
        ((cmd >> 16) & 0x3fff) as usize
    }
    /// The operation's name as the header spells it (`UFFDIO_COPY`), `?` for another.
    pub fn name(op: u8) -> &'static str {
        match op {
            API => "UFFDIO_API",
            REGISTER => "UFFDIO_REGISTER",
            UNREGISTER => "UFFDIO_UNREGISTER",
            WAKE => "UFFDIO_WAKE",
            COPY => "UFFDIO_COPY",
            ZEROPAGE => "UFFDIO_ZEROPAGE",
            MOVE => "UFFDIO_MOVE",
            WRITEPROTECT => "UFFDIO_WRITEPROTECT",
            CONTINUE => "UFFDIO_CONTINUE",
            POISON => "UFFDIO_POISON",
            _ => "?",
        }
    }
    /// `uffdio_register.mode` bits.
    pub const UFFDIO_REGISTER_MODE_MISSING: u64 = 1 << 0;
    pub const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
    pub const UFFDIO_REGISTER_MODE_MINOR: u64 = 1 << 2;
    /// `uffdio_api.features` bits the model reads: the child of a fork keeps the registration
    /// only with EVENT_FORK (`dup_userfaultfd`).
    pub const UFFD_FEATURE_EVENT_FORK: u64 = 1 << 1;
}

/// x86 page-fault error code bits (`enum x86_pf_error_code`).
pub mod x86_pf {
    pub const PF_WRITE: u64 = 1 << 1;
}

/// /proc/PID/mountinfo (fs/proc_namespace.c: show_mountinfo, which writes paths with
/// `seq_path(..., " \t\n\\")`).
pub mod mountinfo {
    /// Undo the `\ooo` octal escapes of space, tab, newline and backslash.
    pub fn unescape(b: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
                out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
                i += 4;
            } else {
                out.push(b[i]);
                i += 1;
            }
        }
        out
    }
}

/// /proc/PID/stat (fs/proc/array.c: do_task_stat).
pub mod stat {
    /// Field `n` (1-based, as proc(5) counts) of the text. The command name (field 2) may hold
    /// spaces and parentheses: the fields after it are counted from its last ')'.
    pub fn field(text: &str, n: usize) -> Option<u64> {
        let rest = &text[text.rfind(')')? + 1..];
        rest.split_whitespace().nth(n.checked_sub(3)?)?.parse().ok()
    }
}

/// Names of flags and values for people (`thplab trace show`): every bit and value of these
/// calls, not only those the model acts on.
pub mod names {
    pub const MAP_FLAGS: &[(u64, &str)] = &[
        (0x01, "shared"),
        (0x02, "private"),
        (0x10, "fixed"),
        (0x20, "anon"),
        (0x100, "growsdown"),
        (0x800, "denywrite"),
        (0x1000, "executable"),
        (0x2000, "locked"),
        (0x4000, "noreserve"),
        (0x8000, "populate"),
        (0x10000, "nonblock"),
        (0x20000, "stack"),
        (0x40000, "hugetlb"),
        (0x80000, "sync"),
        (0x100000, "fixed_noreplace"),
    ];

    pub const MREMAP_FLAGS: &[(u64, &str)] = &[(1, "maymove"), (2, "fixed"), (4, "dontunmap")];

    pub const OPEN_FLAGS: &[(u64, &str)] = &[
        (0o1, "O_WRONLY"),
        (0o2, "O_RDWR"),
        (0o100, "O_CREAT"),
        (0o200, "O_EXCL"),
        (0o1000, "O_TRUNC"),
        (0o2000, "O_APPEND"),
        (0o4000, "O_NONBLOCK"),
        (0o200000, "O_DIRECTORY"),
        (0o400000, "O_NOFOLLOW"),
        (0o2000000, "O_CLOEXEC"),
        (0o40000, "O_DIRECT"),
        (0o20200000, "O_TMPFILE"),
        (0o10000000, "O_PATH"),
    ];

    pub const CLONE_FLAGS: &[(u64, &str)] = &[
        (0x100, "CLONE_VM"),
        (0x200, "CLONE_FS"),
        (0x400, "CLONE_FILES"),
        (0x800, "CLONE_SIGHAND"),
        (0x1000, "CLONE_PIDFD"),
        (0x4000, "CLONE_VFORK"),
        (0x8000, "CLONE_PARENT"),
        (0x10000, "CLONE_THREAD"),
        (0x40000, "CLONE_SYSVSEM"),
        (0x80000, "CLONE_SETTLS"),
        (0x100000, "CLONE_PARENT_SETTID"),
        (0x200000, "CLONE_CHILD_CLEARTID"),
        (0x1000000, "CLONE_CHILD_SETTID"),
    ];

    /// MADV_* names of this architecture (x86_64 = asm-generic).
    pub fn madvise_name(v: u64) -> String {
        match v {
            0 => "MADV_NORMAL",
            1 => "MADV_RANDOM",
            2 => "MADV_SEQUENTIAL",
            3 => "MADV_WILLNEED",
            4 => "MADV_DONTNEED",
            8 => "MADV_FREE",
            9 => "MADV_REMOVE",
            10 => "MADV_DONTFORK",
            11 => "MADV_DOFORK",
            12 => "MADV_MERGEABLE",
            13 => "MADV_UNMERGEABLE",
            14 => "MADV_HUGEPAGE",
            15 => "MADV_NOHUGEPAGE",
            16 => "MADV_DONTDUMP",
            17 => "MADV_DODUMP",
            18 => "MADV_WIPEONFORK",
            19 => "MADV_KEEPONFORK",
            20 => "MADV_COLD",
            21 => "MADV_PAGEOUT",
            22 => "MADV_POPULATE_READ",
            23 => "MADV_POPULATE_WRITE",
            24 => "MADV_DONTNEED_LOCKED",
            25 => "MADV_COLLAPSE",
            100 => "MADV_HWPOISON",
            101 => "MADV_SOFT_OFFLINE",
            102 => "MADV_GUARD_INSTALL",
            103 => "MADV_GUARD_REMOVE",
            _ => return v.to_string(),
        }
        .to_string()
    }

    pub fn prctl_name(v: u64) -> String {
        match v {
            15 => "PR_SET_NAME",
            16 => "PR_GET_NAME",
            41 => "PR_SET_THP_DISABLE",
            42 => "PR_GET_THP_DISABLE",
            35 => "PR_SET_MM",
            38 => "PR_SET_NO_NEW_PRIVS",
            0x53564d41 => "PR_SET_VMA",
            _ => return v.to_string(),
        }
        .to_string()
    }
}

#[cfg(test)]
mod stat_tests {
    use super::stat::field;

    /// A /proc/PID/stat line as 6.18 prints it, with a command name that holds a space and a
    /// parenthesis: startstack is field 28 (140737488346480 here).
    #[test]
    fn fields_count_from_the_last_parenthesis() {
        let line = "4242 (a) b (c) S 1 4242 4242 0 -1 4194560 98 0 0 0 0 0 0 0 20 0 1 0 5431 2600960 224 \
                    18446744073709551615 94281129136128 94281129157217 140737488346480 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
        assert_eq!(field(line, 28), Some(140737488346480));
        assert_eq!(field("4242 (a) S 1", 28), None);
        assert_eq!(field("no parenthesis", 28), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every number here is libc's.
    /// The names `thplab trace show` prints are those of the constants the model acts on.
    #[test]
    fn the_names_name_the_constants() {
        use mman::*;
        for (v, name) in [(MADV_DONTNEED, "MADV_DONTNEED"), (MADV_FREE, "MADV_FREE"), (MADV_HUGEPAGE, "MADV_HUGEPAGE"), (MADV_COLLAPSE, "MADV_COLLAPSE"), (MADV_WIPEONFORK, "MADV_WIPEONFORK")] {
            assert_eq!(names::madvise_name(v), name);
        }
        assert_eq!(names::prctl_name(prctl::PR_SET_THP_DISABLE), "PR_SET_THP_DISABLE");
        let bit = |t: &[(u64, &str)], n: &str| t.iter().find(|(_, x)| *x == n).map(|(v, _)| *v);
        assert_eq!(bit(names::MAP_FLAGS, "fixed_noreplace"), Some(MAP_FIXED_NOREPLACE));
        assert_eq!(bit(names::MAP_FLAGS, "populate"), Some(MAP_POPULATE));
        assert_eq!(bit(names::CLONE_FLAGS, "CLONE_VFORK"), Some(sched::CLONE_VFORK));
        assert_eq!(bit(names::OPEN_FLAGS, "O_APPEND"), Some(fcntl::O_APPEND));
    }

    #[test]
    fn the_numbers_are_libcs() {
        use libc as c;
        let pairs: &[(&str, u64, i64)] = &[
            ("PROT_READ", mman::PROT_READ, c::PROT_READ as i64),
            ("PROT_WRITE", mman::PROT_WRITE, c::PROT_WRITE as i64),
            ("PROT_EXEC", mman::PROT_EXEC, c::PROT_EXEC as i64),
            ("MAP_SHARED", mman::MAP_SHARED, c::MAP_SHARED as i64),
            ("MAP_PRIVATE", mman::MAP_PRIVATE, c::MAP_PRIVATE as i64),
            ("MAP_FIXED", mman::MAP_FIXED, c::MAP_FIXED as i64),
            ("MAP_ANONYMOUS", mman::MAP_ANONYMOUS, c::MAP_ANONYMOUS as i64),
            ("MAP_LOCKED", mman::MAP_LOCKED, c::MAP_LOCKED as i64),
            ("MAP_POPULATE", mman::MAP_POPULATE, c::MAP_POPULATE as i64),
            ("MAP_STACK", mman::MAP_STACK, c::MAP_STACK as i64),
            ("MAP_FIXED_NOREPLACE", mman::MAP_FIXED_NOREPLACE, c::MAP_FIXED_NOREPLACE as i64),
            ("MREMAP_MAYMOVE", mman::MREMAP_MAYMOVE, c::MREMAP_MAYMOVE as i64),
            ("MREMAP_FIXED", mman::MREMAP_FIXED, c::MREMAP_FIXED as i64),
            ("MADV_NORMAL", mman::MADV_NORMAL, c::MADV_NORMAL as i64),
            ("MADV_DONTNEED", mman::MADV_DONTNEED, c::MADV_DONTNEED as i64),
            ("MADV_FREE", mman::MADV_FREE, c::MADV_FREE as i64),
            ("MADV_DONTFORK", mman::MADV_DONTFORK, c::MADV_DONTFORK as i64),
            ("MADV_DOFORK", mman::MADV_DOFORK, c::MADV_DOFORK as i64),
            ("MADV_WIPEONFORK", mman::MADV_WIPEONFORK, c::MADV_WIPEONFORK as i64),
            ("MADV_KEEPONFORK", mman::MADV_KEEPONFORK, c::MADV_KEEPONFORK as i64),
            ("MADV_REMOVE", mman::MADV_REMOVE, c::MADV_REMOVE as i64),
            ("MADV_HUGEPAGE", mman::MADV_HUGEPAGE, c::MADV_HUGEPAGE as i64),
            ("MADV_NOHUGEPAGE", mman::MADV_NOHUGEPAGE, c::MADV_NOHUGEPAGE as i64),
            ("MADV_POPULATE_READ", mman::MADV_POPULATE_READ, c::MADV_POPULATE_READ as i64),
            ("MADV_POPULATE_WRITE", mman::MADV_POPULATE_WRITE, c::MADV_POPULATE_WRITE as i64),
            ("MLOCK_ONFAULT", mman::MLOCK_ONFAULT, c::MLOCK_ONFAULT as i64),
            ("MCL_CURRENT", mman::MCL_CURRENT, c::MCL_CURRENT as i64),
            ("MCL_FUTURE", mman::MCL_FUTURE, c::MCL_FUTURE as i64),
            ("MCL_ONFAULT", mman::MCL_ONFAULT, c::MCL_ONFAULT as i64),
            ("PR_SET_THP_DISABLE", prctl::PR_SET_THP_DISABLE, c::PR_SET_THP_DISABLE as i64),
            ("CLONE_VM", sched::CLONE_VM, c::CLONE_VM as i64),
            ("CLONE_VFORK", sched::CLONE_VFORK, c::CLONE_VFORK as i64),
            ("PR_GET_THP_DISABLE", prctl::PR_GET_THP_DISABLE, c::PR_GET_THP_DISABLE as i64),
            ("O_WRONLY", fcntl::O_WRONLY, c::O_WRONLY as i64),
            ("O_CREAT", fcntl::O_CREAT, c::O_CREAT as i64),
            ("O_TRUNC", fcntl::O_TRUNC, c::O_TRUNC as i64),
            ("O_APPEND", fcntl::O_APPEND, c::O_APPEND as i64),
            ("O_DIRECT", fcntl::O_DIRECT, c::O_DIRECT as i64),
            ("F_DUPFD", fcntl::F_DUPFD, c::F_DUPFD as i64),
            ("F_DUPFD_CLOEXEC", fcntl::F_DUPFD_CLOEXEC, c::F_DUPFD_CLOEXEC as i64),
            ("AT_REMOVEDIR", fcntl::AT_REMOVEDIR, c::AT_REMOVEDIR as i64),
            ("RWF_APPEND", fcntl::RWF_APPEND, c::RWF_APPEND as i64),
            ("FALLOC_FL_KEEP_SIZE", fcntl::FALLOC_FL_KEEP_SIZE, c::FALLOC_FL_KEEP_SIZE as i64),
            ("FALLOC_FL_PUNCH_HOLE", fcntl::FALLOC_FL_PUNCH_HOLE, c::FALLOC_FL_PUNCH_HOLE as i64),
            ("MFD_HUGETLB", memfd::MFD_HUGETLB, c::MFD_HUGETLB as i64),
        ];
        for (name, ours, libc) in pairs {
            assert_eq!(*ours as i64, *libc, "{name}");
        }
        // Not in the libc crate: MADV_COLLAPSE (mman-common.h: 25) and the 6.18 prctl flag.
        assert_eq!((mman::MADV_COLLAPSE, prctl::PR_THP_DISABLE_EXCEPT_ADVISED), (25, 2));
    }

    /// Not in the libc crate either: the UFFDIO requests, rebuilt from `_IOC(dir, 0xAA, nr,
    /// size)` (include/uapi/asm-generic/ioctl.h: nr bits 0-7, type 8-15, size 16-29, dir 30-31
    /// with _IOC_WRITE 1 and _IOC_READ 2) and the structs' sizes in userfaultfd.h.
    #[test]
    fn the_uffdio_requests_are_their_ioc_encodings() {
        use userfaultfd::*;
        let ioc = |dir: u64, nr: u8, size: u64| dir << 30 | size << 16 | UFFDIO << 8 | nr as u64;
        let (r, wr) = (2, 3);
        let expected = [
            (ioc(wr, API, 24), API),
            (ioc(wr, REGISTER, 32), REGISTER),
            (ioc(r, UNREGISTER, 16), UNREGISTER),
            (ioc(r, WAKE, 16), WAKE),
            (ioc(wr, COPY, 40), COPY),
            (ioc(wr, ZEROPAGE, 32), ZEROPAGE),
            (ioc(wr, MOVE, 40), MOVE),
            (ioc(wr, WRITEPROTECT, 24), WRITEPROTECT),
            (ioc(wr, CONTINUE, 32), CONTINUE),
            (ioc(wr, POISON, 32), POISON),
        ];
        assert_eq!(REQUESTS, expected);
        assert_eq!((op_of(0xffff_ffff_c028_aa03), size_of(0xc028_aa03)), (Some(COPY), 40));
        // USERFAULTFD_IOC_NEW (_IO(0xAA, 0), on /dev/userfaultfd) is not an operation on a range.
        assert_eq!(op_of(0xaa00), None);
    }
}
