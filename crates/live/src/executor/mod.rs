//! The native executor: runs a workload on real memory in a child process and reports what the
//! kernel did, as a [`uapi::RunResult`] with source `live`.
//!
//! The child is `thplab __exec` (any program that calls [`exec_child_main`] with the spec read
//! from stdin), started with `personality(ADDR_NO_RANDOMIZE)` and
//! `GLIBC_TUNABLES=glibc.malloc.mmap_threshold=0` so that malloc never moves the program break
//! and the heap holds only what the workload's `brk` puts there. The parent resolves every
//! address before the child starts (regions where the model placed them, the heap relative to
//! the child's `start_brk`), so the child allocates nothing between "go" and "done".
//!
//! Shared memory: the child first mounts the workload's tmpfs mounts (`huge=` as declared) on
//! empty directories `$THPLAB_STATE_DIR/mnt/<parent pid>-<n>` in a mount namespace of its own
//! (`/` made recursively private), and binds the one `shm_open ... on=` uses over /dev/shm;
//! the mounts vanish with the child however it ends, and the parent removes the directories.
//! `shm_open NAME` without `on=` creates `/dev/shm/thplab-<child pid>-NAME` on the machine's
//! /dev/shm; the child unlinks it at the end, the parent after the child is gone, and every run
//! first removes those of dead pids. pwrite copies from a buffer mapped and filled before `go`
//! outside every region.
//!
//! Protocol (fd 3: child → parent lines, fd 4: parent → child lines):
//! `ready {json}` → `go` → `o<index>` before each op → `done {json}` → `exit`.
//! A child killed by a signal (a touch of unmapped memory) is reported with the workload line of
//! the last `o<index>` it sent.
//!
//! The child runs the workload's own operations ([`workload::OpKind`], sent with serde), each
//! with the address the parent resolved for it; adding a statement to the language adds one arm
//! to the op loop (crate::executor::tasks) and nothing else here.
//!
//! Modules, one job each:
//! - `spec`: from a workload to the spec (every address resolved), in the parent.
//! - `wire`: the spec on the child's stdin (serde JSON), written once, round-trip tested.
//! - `protocol`: the status and control lines, the turn pipes between the child's tasks.
//! - `child`: the child's setup before `go` (mounts, files, what each operation needs resolved,
//!   warm-up, threads) and its report at the end.
//! - `tasks`: the tasks (main, forked, threads, vfork children) and the op loop that runs each
//!   statement.
//! - `sys`: clocks, fault counts, the touch loop's stores, mounts and buffers of the child.
//! - `parent`: one run of the child and the whole live run under the settings guard.
//! - `assemble`: from the runs to the result.
//!
//! Module map:
//! - [`spec`]: from a workload to the spec the child runs, every address resolved.
//! - [`wire`]: the spec on the wire (serde JSON of the workload's own operations).
//! - [`protocol`]: the lines between parent and child (`ready`, `go`, `o<index>`, `done`).
//! - [`child`]: `thplab __exec`: reads the spec, mounts, resolves each operation before `go`.
//! - [`tasks`]: the workload's tasks in the child (main, fork children, threads, vfork) and their
//!   op loop.
//! - [`sys`]: the child's system-level helpers: clocks and fault counts read without allocating.
//! - [`hugetlb`]: the pool's knobs for the guard, MAP_HUGETLB and MFD_HUGETLB flags, meminfo lines.
//! - [`parent`]: one run of the child: spawn, messages, counters before and after, census.
//! - [`assemble`]: from the runs to one `RunResult` with source `live`.

mod assemble;
mod child;
pub mod hugetlb;
mod parent;
mod protocol;
pub mod spec;
mod sys;
mod tasks;
pub mod wire;

pub(crate) use assemble::khugepaged_sum;
pub use child::exec_child_main;
pub use parent::{errno_name, read_meminfo, remove_stale_leftovers, run_live, signal_name, ExecOptions, ProcOnce, RunOnce, DEV_SHM_DIR, MEMINFO_FIELDS};
pub use spec::{build_spec, ExecOp, ExecSpec, FileSpec, FileSpecKind, MountSpec, Piece, SHM_PREFIX, WRITE_BUF_MAX};
pub(crate) use sys::{minflt_now, store_page_byte};
pub(crate) use parent::join_memcg;

/// fd on which the child writes its status lines.
pub const STATUS_FD: i32 = 3;
/// fd from which the child reads `go` and `exit`.
pub const CONTROL_FD: i32 = 4;

#[cfg(test)]
mod tests {
    use super::assemble::median;
    use super::parent::leftover_pid;
    use super::spec::{harness_place, range_calls, HARNESS_MMAP_BASE};
    use super::*;
    use mm_types::PMD_SIZE;
    use uapi::result::RegionPlacement;
    use workload::{Backing, OpKind, Placement};

    /// An mmap's resolved address and backing.
    fn mmap_of(op: &ExecOp) -> (u64, u64, i32, Backing) {
        match (&op.op, op.at) {
            (OpKind::Mmap { len, prot, backing, .. }, Some(at)) => {
                assert_eq!(at.len, *len);
                (at.addr, *len, prot.bits(), *backing)
            }
            k => panic!("{k:?}"),
        }
    }

    #[test]
    fn spec_resolves_fixed_heap_and_every() {
        let w = workload::parse(
            "t",
            "mmap a 1M at=0x7e0000000000\nmunmap a[0+4K] every=64K\nbrk +10K\ntouch heap write\nmadvise heap[0+4K] dontneed\ntouch a[4K..8K] read\nmmap b 4M\n",
        )
        .unwrap();
        let (spec, regions, notes) = build_spec(&w, &[]).unwrap();
        assert_eq!(mmap_of(&spec.ops[0]), (0x7e00_0000_0000, 1 << 20, 3, Backing::PrivateAnon));
        match (&spec.ops[1].op, spec.ops[1].at) {
            (OpKind::Munmap(r), Some(base)) => {
                let pieces = range_calls(r, &base, 0);
                assert_eq!(pieces.len(), 16);
                assert_eq!(pieces[1], (0x7e00_0001_0000, 4096));
            }
            k => panic!("{k:?}"),
        }
        match (&spec.ops[3].op, spec.ops[3].at) {
            (OpKind::Touch(t), Some(base)) => {
                assert!(base.heap);
                assert_eq!(t.range.len_in(base.len), 10 * 1024, "bare heap runs to the current break, as the model reads it");
            }
            k => panic!("{k:?}"),
        }
        // A heap range: from the child's start_brk.
        match (&spec.ops[4].op, spec.ops[4].at) {
            (OpKind::Madvise(r, _), Some(base)) => assert_eq!(range_calls(r, &base, 0x5555_0000_0000), [(0x5555_0000_0000, 4096)]),
            k => panic!("{k:?}"),
        }
        // b had no model address: 2 MiB-aligned below the harness mmap base.
        let b = regions.iter().find(|r| r.name == "b").unwrap();
        assert_eq!(b.start % PMD_SIZE, 0);
        assert!(b.start + b.len <= HARNESS_MMAP_BASE);
        assert_eq!(notes.len(), 1);
        let h = regions.iter().find(|r| r.name == "heap").unwrap();
        assert_eq!(h.len, 12 * 1024);
        // Model addresses win for non-fixed regions.
        let (spec, _, notes) =
            build_spec(&w, &[RegionPlacement { name: "b".into(), start: 0x7d00_0000_0000, len: 4 << 20 }]).unwrap();
        assert!(notes.is_empty());
        assert_eq!(mmap_of(spec.ops.last().unwrap()), (0x7d00_0000_0000, 4 << 20, 3, Backing::PrivateAnon));
    }

    #[test]
    fn spec_of_shared_memory() {
        let w = workload::parse(
            "t",
            "tmpfs t huge=within_size\nshm_open s on=t\nfile f on=t\nmemfd m\nftruncate m 4M\nwrite f[0+256M] chunk=128M\n\
             fallocate s[0+2M]\nmmap a 4M file=m pgoff=2M at=0x7e0000000000\nmmap b 1M shared\n",
        )
        .unwrap();
        let (spec, regions, notes) = build_spec(&w, &[]).unwrap();
        let calls: Vec<&str> = spec.ops.iter().map(|o| o.call.as_str()).collect();
        assert_eq!(calls, ["mount(tmpfs)", "shm_open", "open", "memfd_create", "ftruncate", "pwrite", "fallocate", "mmap", "mmap"]);
        assert_eq!(spec.mounts, [MountSpec { huge: "within_size".into(), dir: String::new(), line: 1 }]);
        assert_eq!(spec.dev_shm, Some(0));
        assert_eq!(spec.files[1], FileSpec { name: "f".into(), kind: FileSpecKind::Open, mount: Some(0) });
        assert_eq!(
            mmap_of(&spec.ops[7]),
            (0x7e00_0000_0000, 4 << 20, 3, Backing::SharedFile { file: workload::FileId(2), pgoff: 2 << 20 })
        );
        assert!(matches!(mmap_of(&spec.ops[8]).3, Backing::SharedAnon));
        // The write buffer: capped, outside every region, and the cap is noted.
        let (a, l) = spec.write_buf.unwrap();
        assert_eq!(l, WRITE_BUF_MAX);
        assert!(regions.iter().all(|r| a + l <= r.start || r.start + r.len <= a));
        assert!(notes.iter().any(|n| n.contains("line 6") && n.contains("64 MiB")), "{notes:?}");
        // shm_open on two mounts: refused, naming the second line.
        let w = workload::parse("t", "tmpfs t huge=always\nshm_open a on=t\nshm_open b\n").unwrap();
        let e = build_spec(&w, &[]).unwrap_err().to_string();
        assert!(e.starts_with("t:3: ") && e.contains("line 2"), "{e}");
        assert_eq!(leftover_pid("thplab-123-obj-x"), Some(123));
        assert_eq!(leftover_pid("other-123-x"), None);
    }

    #[test]
    fn harness_placement_honours_align_offset() {
        let mut c = HARNESS_MMAP_BASE;
        let a = harness_place(&mut c, 1 << 20, Placement::Aligned { align: 64 << 10, offset: 4096 });
        assert_eq!(a % (64 << 10), 4096);
        assert!(a + (1 << 20) <= HARNESS_MMAP_BASE);
        let b = harness_place(&mut c, 8192, Placement::Kernel);
        assert!(b + 8192 <= a);
    }

    #[test]
    fn median_and_errno_names() {
        assert_eq!(median(&mut [5, 1, 3]), 3);
        assert_eq!(median(&mut [4, 1, 3, 2]), 2);
        assert_eq!(errno_name(libc::EINVAL), "EINVAL");
        assert_eq!(errno_name(0), "0");
    }
}

