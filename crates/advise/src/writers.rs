//! The recommended choice written out: sysfs commands, the kernel command line, a tmpfiles.d
//! file, a systemd unit, and the per-program alternatives.
//!
//! The boot parameters are those of Documentation/admin-guide/mm/transhuge.rst (6.18):
//! `transparent_hugepage=always|madvise|never` (mm/huge_memory.c:
//! `setup_transparent_hugepage`), `thp_anon=<size>[KMG],<size>[KMG]:<state>;<size>[KMG]-<size>[KMG]:<state>`
//! (`setup_thp_anon`: every anonymous size it does not name, the PMD size included, is
//! `never`), `transparent_hugepage_shmem=` (`setup_transparent_hugepage_shmem`). `defrag`,
//! khugepaged's knobs and `max_ptes_none` have no boot parameter in 6.18: sysfs only. The
//! prctl forms are kernel/sys.c: `prctl_set_thp_disable` (PR_SET_THP_DISABLE = 41,
//! PR_THP_DISABLE_EXCEPT_ADVISED = 1 << 1); the flag survives fork and execve (kernel/fork.c:
//! `mm_init` keeps MMF_INIT_MASK), so a wrapper that sets it and execs the program covers it.

use std::fmt::Write;

use thp_abi::settings::SYSFS_THP;
use thp_abi::ThpSettings;

use crate::space::{anon_sizes_kb, Choice, Process};

/// Every form of a choice, as text.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Written {
    /// `echo VALUE > /sys/kernel/mm/transparent_hugepage/PATH` lines (empty: the defaults).
    pub sysfs: String,
    /// The boot parameters, and the knobs that have none.
    pub cmdline: String,
    /// Knobs that no boot parameter sets (sysfs, tmpfiles.d or the unit only).
    pub sysfs_only: Vec<String>,
    /// /etc/tmpfiles.d/thp.conf.
    pub tmpfiles: String,
    /// /etc/systemd/system/thp-settings.service.
    pub unit: String,
    /// How to give the choice to the program alone (a wrapper, an environment variable, madvise).
    pub per_program: String,
}

/// All forms of `c` for the program `cmd` (its command line, for the per-program forms).
pub fn write(c: &Choice, cmd: &str) -> Written {
    let changes = c.changes();
    let mut sysfs = String::new();
    for (p, v) in &changes {
        writeln!(sysfs, "echo {v} > {SYSFS_THP}/{p}").unwrap();
    }
    let (cmdline, sysfs_only) = cmdline(&c.settings);
    Written { sysfs, cmdline, sysfs_only, tmpfiles: tmpfiles(&changes), unit: unit(&changes), per_program: per_program(c.process, cmd) }
}

/// The boot parameters that give `s`'s `enabled`, per-size and `shmem_enabled` knobs, and the
/// changed knobs no boot parameter sets.
pub fn cmdline(s: &ThpSettings) -> (String, Vec<String>) {
    let d = ThpSettings::default();
    let mut words = Vec::new();
    if s.enabled != d.enabled {
        words.push(format!("transparent_hugepage={}", s.enabled.word()));
    }
    if s.anon != d.anon {
        // Every size that is not `never`, grouped by state (thp_anon= makes the rest never).
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for kb in anon_sizes_kb() {
            let state = s.anon[(kb / 4).trailing_zeros() as usize].word().to_string();
            if state == "never" {
                continue;
            }
            let size = if kb >= 1024 { format!("{}M", kb / 1024) } else { format!("{kb}K") };
            match groups.iter_mut().find(|(st, _)| *st == state) {
                Some(g) => g.1.push(size),
                None => groups.push((state, vec![size])),
            }
        }
        let list: Vec<String> = groups.iter().map(|(st, sizes)| format!("{}:{st}", sizes.join(","))).collect();
        // Nothing enabled: one size named never is enough to clear the PMD default.
        words.push(format!("thp_anon={}", if list.is_empty() { "2M:never".to_string() } else { list.join(";") }));
    }
    if s.shmem_enabled != d.shmem_enabled {
        words.push(format!("transparent_hugepage_shmem={}", s.shmem_enabled.word()));
    }
    let boot = ["enabled", "shmem_enabled"];
    let defaults = d.knob_map();
    let only: Vec<String> = s
        .knobs()
        .into_iter()
        .filter(|(p, v)| defaults.get(p.as_str()) != Some(v) && !boot.contains(&p.as_str()) && !(p.starts_with("hugepages-") && p.ends_with("/enabled") && !p.contains("shmem")))
        .map(|(p, v)| format!("{p}={v}"))
        .collect();
    (words.join(" "), only)
}

fn tmpfiles(changes: &[(String, String)]) -> String {
    let mut t = String::from("# /etc/tmpfiles.d/thp.conf: THP settings (thplab advise), written at boot by systemd-tmpfiles\n");
    for (p, v) in changes {
        writeln!(t, "w {SYSFS_THP}/{p} - - - - {v}").unwrap();
    }
    t
}

fn unit(changes: &[(String, String)]) -> String {
    let mut u = String::from(
        "# /etc/systemd/system/thp-settings.service: THP settings (thplab advise)\n\
         # systemctl daemon-reload && systemctl enable --now thp-settings.service\n\
         [Unit]\nDescription=THP settings recommended by thplab advise\nDefaultDependencies=no\n\
         After=sysinit.target local-fs.target\nBefore=basic.target\n\n[Service]\nType=oneshot\nRemainAfterExit=yes\n",
    );
    for (p, v) in changes {
        writeln!(u, "ExecStart=/bin/sh -c 'echo {v} > {SYSFS_THP}/{p}'").unwrap();
    }
    u += "\n[Install]\nWantedBy=basic.target\n";
    u
}

/// A wrapper that sets PR_SET_THP_DISABLE with `flags` and executes the program.
fn prctl_wrapper(flags: u32, cmd: &str) -> String {
    format!("python3 -c 'import ctypes, os, sys; ctypes.CDLL(None, use_errno=True).prctl(41, 1, {flags}, 0, 0) == 0 or sys.exit(\"prctl: \" + os.strerror(ctypes.get_errno())); os.execvp(sys.argv[1], sys.argv[1:])' {cmd}")
}

/// The per-program forms of a process choice (for `None`: how to get the recommended sizes for
/// this program alone instead of system-wide).
pub fn per_program(p: Process, cmd: &str) -> String {
    match p {
        Process::ThpDisable => format!(
            "THP off for this program alone, its children and what it executes (prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0)):\n  {}\n\
             or in the program: prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) before it allocates; in a systemd unit: the wrapper in ExecStart=\n",
            prctl_wrapper(0, cmd)
        ),
        Process::ThpDisableExceptAdvised => format!(
            "THP only where this program madvises (prctl(PR_SET_THP_DISABLE, 1, PR_THP_DISABLE_EXCEPT_ADVISED, 0, 0), Linux 6.18):\n  {}\n\
             or in the program: prctl(PR_SET_THP_DISABLE, 1, PR_THP_DISABLE_EXCEPT_ADVISED, 0, 0) before it allocates\n",
            prctl_wrapper(2, cmd)
        ),
        Process::MadvHugepage => format!(
            "MADV_HUGEPAGE on the program's malloc memory (glibc ≥ 2.35; sizes set to madvise, or inherit under enabled=madvise, then apply to it):\n  \
             GLIBC_TUNABLES=glibc.malloc.hugetlb=1 {cmd}\n\
             or in the program: madvise(addr, len, MADV_HUGEPAGE) on its large, long-lived buffers\n"
        ),
        Process::None => format!(
            "for this program alone instead of system-wide: set the sizes to madvise where the choice sets them to always, and madvise the program's memory:\n  \
             GLIBC_TUNABLES=glibc.malloc.hugetlb=1 {cmd}\n\
             or in the program: madvise(addr, len, MADV_HUGEPAGE) on its large buffers; other programs that should not get THP under a system-wide always: {}\n",
            prctl_wrapper(0, "OTHER-PROGRAM")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(assignments: &[&str], process: Process) -> Choice {
        let mut settings = ThpSettings::default();
        for a in assignments {
            settings.apply_assignment(a).unwrap();
        }
        Choice { label: "x".into(), settings, process }
    }

    #[test]
    fn sysfs_tmpfiles_and_unit_write_each_changed_knob() {
        let c = choice(&["hugepages-64kB/enabled=always", "enabled=always", "defrag=never"], Process::None);
        let w = write(&c, "xz -6 in");
        assert_eq!(
            w.sysfs,
            "echo always > /sys/kernel/mm/transparent_hugepage/hugepages-64kB/enabled\n\
             echo always > /sys/kernel/mm/transparent_hugepage/enabled\n\
             echo never > /sys/kernel/mm/transparent_hugepage/defrag\n"
        );
        assert_eq!(
            w.tmpfiles,
            "# /etc/tmpfiles.d/thp.conf: THP settings (thplab advise), written at boot by systemd-tmpfiles\n\
             w /sys/kernel/mm/transparent_hugepage/hugepages-64kB/enabled - - - - always\n\
             w /sys/kernel/mm/transparent_hugepage/enabled - - - - always\n\
             w /sys/kernel/mm/transparent_hugepage/defrag - - - - never\n"
        );
        let service = concat!(
            "\n[Service]\nType=oneshot\nRemainAfterExit=yes\n",
            "ExecStart=/bin/sh -c 'echo always > /sys/kernel/mm/transparent_hugepage/hugepages-64kB/enabled'\n",
            "ExecStart=/bin/sh -c 'echo always > /sys/kernel/mm/transparent_hugepage/enabled'\n",
            "ExecStart=/bin/sh -c 'echo never > /sys/kernel/mm/transparent_hugepage/defrag'\n\n[Install]\nWantedBy=basic.target\n"
        );
        assert!(w.unit.contains(service), "{}", w.unit);
        assert_eq!(w.cmdline, "transparent_hugepage=always thp_anon=64K:always;2M:inherit");
        assert_eq!(w.sysfs_only, ["defrag=never"]);
    }

    /// The command line, applied to the boot defaults as the kernel does, gives the choice's
    /// `enabled`, per-size and `shmem_enabled` knobs.
    #[test]
    fn the_command_line_reads_back_to_the_choice() {
        for a in [
            &["enabled=never"][..],
            &["hugepages-16kB/enabled=madvise", "hugepages-2048kB/enabled=never"],
            &["hugepages-16kB/enabled=always", "hugepages-32kB/enabled=always", "hugepages-1024kB/enabled=always", "enabled=always", "shmem_enabled=advise"],
            &["hugepages-2048kB/enabled=never"],
        ] {
            let c = choice(a, Process::None);
            let (line, _) = cmdline(&c.settings);
            let mut s = ThpSettings::default();
            s.apply_cmdline(&line).unwrap();
            assert_eq!((s.enabled, s.anon, s.shmem_enabled), (c.settings.enabled, c.settings.anon, c.settings.shmem_enabled), "{a:?}: {line}");
        }
        assert_eq!(cmdline(&choice(&["hugepages-2048kB/enabled=never"], Process::None).settings).0, "thp_anon=2M:never");
        assert_eq!(cmdline(&ThpSettings::default()).0, "");
    }

    #[test]
    fn per_program_forms_name_the_prctl_and_the_tunable() {
        let w = per_program(Process::ThpDisableExceptAdvised, "sqlite3 db");
        assert!(w.contains("prctl(41, 1, 2, 0, 0)") && w.ends_with("os.execvp(sys.argv[1], sys.argv[1:])' sqlite3 db\nor in the program: prctl(PR_SET_THP_DISABLE, 1, PR_THP_DISABLE_EXCEPT_ADVISED, 0, 0) before it allocates\n"), "{w}");
        assert!(per_program(Process::ThpDisable, "x").contains("prctl(41, 1, 0, 0, 0)"));
        assert!(per_program(Process::MadvHugepage, "xz -6").contains("\n  GLIBC_TUNABLES=glibc.malloc.hugetlb=1 xz -6\n"));
    }
}
