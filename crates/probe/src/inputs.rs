//! What the THP order policy of a running process depends on, read (never written) from the
//! live system, for `thplab explain`: the knobs under /sys/kernel/mm/transparent_hugepage, the
//! THP parameters of the kernel command line, the process's `THP_enabled`, and per VMA its flags,
//! size, file offset, backing (anonymous, anon shmem, a tmpfs file and that mount's `huge=`,
//! another file) and file size.
//!
//! Sources: `/proc/PID/smaps` (`fs/proc/task_mmu.c: show_smap`, `show_smap_vma_flags`),
//! `/proc/PID/status` (`fs/proc/array.c: task_thp_status`: `THP_enabled` is 0 when
//! MMF_DISABLE_THP_COMPLETELY is set), `/proc/PID/mountinfo` (`fs/proc_namespace.c:
//! show_mountinfo`; tmpfs prints `huge=` in its super options, `mm/shmem.c: shmem_show_options`,
//! only when it is not `never`), `/proc/PID/map_files/START-END` (its `stat` is the mapped file's:
//! i_size), `/proc/cmdline` (`transparent_hugepage=`, `thp_anon=`, `transparent_hugepage_shmem=`,
//! `thp_shmem=`, `transparent_hugepage_tmpfs=`: mm/huge_memory.c and mm/shmem.c `__setup`s).
//!
//! MMF_DISABLE_THP_EXCEPT_ADVISED is not shown anywhere in /proc; `thplab explain` infers it
//! from the kernel's own `THPeligible` (see the explain crate).

use serde::Serialize;
use thp_abi::ThpSettings;

use crate::sysfs::current_settings;
use crate::procfs::{comm, read_smaps, Vma};
use crate::sysfs::Paths;
use crate::{io_err, LiveError, Result};

/// What backs a VMA, as far as the THP rules care.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Backing {
    /// Private anonymous memory (heap, stack, anonymous mmap).
    Anon,
    /// shmem with the anonymous-shmem VMA ops: memfd, MAP_SHARED|MAP_ANONYMOUS, SysV SHM
    /// (an unlinked shmem file, `shmem_mmap`). Its mount is the internal shm_mnt.
    AnonShmem { i_size: u64 },
    /// A file on a tmpfs mount: the mount's `huge=` decides (None: the option is absent, so the
    /// boot default `transparent_hugepage_tmpfs=` or never).
    Tmpfs { mount_point: String, huge: Option<String>, i_size: u64 },
    /// A file on another file system (page cache of a regular file).
    File { fstype: String },
    /// hugetlb, PFN/IO mappings, the vDSO and other special mappings.
    Special,
}

/// One VMA and its backing.
#[derive(Clone, Debug, Serialize)]
pub struct VmaInputs {
    pub vma: Vma,
    pub backing: Backing,
}

/// Everything the policy of one process depends on.
#[derive(Clone, Debug, Serialize)]
pub struct PolicyInputs {
    pub pid: i32,
    pub comm: String,
    /// The live knobs (read only).
    #[serde(skip)]
    pub settings: ThpSettings,
    /// `THP_enabled` of /proc/PID/status (false: PR_SET_THP_DISABLE without flags).
    pub thp_enabled: Option<bool>,
    /// The THP words of /proc/cmdline.
    pub boot_params: Vec<String>,
    /// `transparent_hugepage_tmpfs=` if given (the `huge=` of tmpfs mounts without the option).
    pub tmpfs_default_huge: Option<String>,
    pub vmas: Vec<VmaInputs>,
}

/// The boot parameters that set THP defaults.
const BOOT_PARAMS: [&str; 6] =
    ["transparent_hugepage", "thp_anon", "transparent_hugepage_shmem", "thp_shmem", "transparent_hugepage_tmpfs", "thp_tmpfs"];

/// Read the inputs for `pid` (all VMAs).
pub fn read_policy_inputs(pid: i32) -> Result<PolicyInputs> {
    let paths = Paths::from_env();
    if !paths.knob("enabled").exists() {
        return Err(LiveError::NotAvailable(format!("{} has no THP knobs", paths.sysfs.display())));
    }
    let settings = current_settings(&paths)?;
    let vmas = read_smaps(pid)?;
    let status_path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&status_path).map_err(|e| io_err("cannot read", &status_path, e))?;
    let thp_enabled = status.lines().find_map(|l| l.strip_prefix("THP_enabled:")).map(|v| v.trim() == "1");
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let boot_params: Vec<String> = cmdline
        .split_whitespace()
        .filter(|w| BOOT_PARAMS.contains(&w.split('=').next().unwrap_or("")))
        .map(str::to_string)
        .collect();
    let tmpfs_default_huge = boot_params
        .iter()
        .find_map(|w| w.strip_prefix("transparent_hugepage_tmpfs=").or_else(|| w.strip_prefix("thp_tmpfs=")))
        .map(str::to_string);
    let mi_path = format!("/proc/{pid}/mountinfo");
    let mountinfo = std::fs::read_to_string(&mi_path).map_err(|e| io_err("cannot read", &mi_path, e))?;
    let mounts = parse_mountinfo(&mountinfo);
    let vmas = vmas
        .into_iter()
        .map(|vma| {
            let backing = backing_of(pid, &vma, &mounts);
            VmaInputs { vma, backing }
        })
        .collect();
    Ok(PolicyInputs { pid, comm: comm(pid), settings, thp_enabled, boot_params, tmpfs_default_huge, vmas })
}

/// One line of mountinfo: mount point, file system type, super options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub mount_point: String,
    pub fstype: String,
    pub super_options: String,
}

impl Mount {
    /// The value of `huge=` in the super options.
    pub fn huge(&self) -> Option<String> {
        self.super_options.split(',').find_map(|o| o.strip_prefix("huge=")).map(str::to_string)
    }
}

/// Parse /proc/PID/mountinfo; lines that do not parse are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else { continue };
        let Some(mp) = left.split_whitespace().nth(4) else { continue };
        let mut r = right.split_whitespace();
        let (Some(fstype), _source, Some(opts)) = (r.next(), r.next(), r.next()) else { continue };
        out.push(Mount { mount_point: String::from_utf8_lossy(&linux_abi::mountinfo::unescape(mp.as_bytes())).into_owned(), fstype: fstype.to_string(), super_options: opts.to_string() });
    }
    out
}

/// The mount holding `path`: the longest mount point that is a prefix of it at a `/` boundary
/// (the last of equal ones: a later mount hides an earlier one).
pub fn mount_of<'a>(mounts: &'a [Mount], path: &str) -> Option<&'a Mount> {
    let mut best: Option<&Mount> = None;
    for m in mounts {
        let mp = m.mount_point.as_str();
        let inside = path == mp || mp == "/" || (path.starts_with(mp) && path.as_bytes().get(mp.len()) == Some(&b'/'));
        if inside && best.is_none_or(|b| mp.len() >= b.mount_point.len()) {
            best = Some(m);
        }
    }
    best
}

fn file_size(pid: i32, v: &Vma) -> u64 {
    std::fs::metadata(format!("/proc/{pid}/map_files/{:x}-{:x}", v.start, v.end)).map(|m| m.len()).unwrap_or(0)
}

/// Classify a VMA from its name, flags and the mount table.
fn backing_of(pid: i32, v: &Vma, mounts: &[Mount]) -> Backing {
    let special = ["ht", "pf", "io", "mm"];
    if special.iter().any(|f| v.has_flag(f)) || matches!(v.name.as_str(), "[vdso]" | "[vvar]" | "[vvar_vclock]" | "[vsyscall]" | "[uprobes]") {
        return Backing::Special;
    }
    if v.name.is_empty() || v.name.starts_with('[') {
        return if v.has_flag("sh") { Backing::AnonShmem { i_size: file_size(pid, v) } } else { Backing::Anon };
    }
    if v.name.starts_with("/memfd:") || v.name.starts_with("/SYSV") || v.name == "/dev/zero (deleted)" {
        return Backing::AnonShmem { i_size: file_size(pid, v) };
    }
    let path = v.name.strip_suffix(" (deleted)").unwrap_or(&v.name);
    match mount_of(mounts, path) {
        Some(m) if m.fstype == "tmpfs" => {
            Backing::Tmpfs { mount_point: m.mount_point.clone(), huge: m.huge(), i_size: file_size(pid, v) }
        }
        Some(m) => Backing::File { fstype: m.fstype.clone() },
        None => Backing::File { fstype: String::new() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_and_lookup() {
        let text = "\
22 1 0:21 / / rw,relatime - ext4 /dev/vda rw
30 22 0:25 / /dev/shm rw,nosuid,nodev - tmpfs tmpfs rw,inode64
31 22 0:26 / /mnt/huge\\040dir rw - tmpfs none rw,size=1048576k,huge=within_size,inode64
32 22 0:27 / /mnt/hu rw - tmpfs none rw,huge=always
";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 4);
        assert_eq!(m[2].mount_point, "/mnt/huge dir");
        assert_eq!(m[2].huge().as_deref(), Some("within_size"));
        assert_eq!(m[1].huge(), None);
        assert_eq!(mount_of(&m, "/mnt/huge dir/f").unwrap().mount_point, "/mnt/huge dir");
        // Not a component boundary: /mnt/huge dir is not under /mnt/hu.
        assert_eq!(mount_of(&m, "/mnt/hugefile").unwrap().mount_point, "/");
        assert_eq!(mount_of(&m, "/dev/shm/x").unwrap().fstype, "tmpfs");
    }
}
