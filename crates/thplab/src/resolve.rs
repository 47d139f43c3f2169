//! The clap side of what a command runs with: the settings flags ([`SettingsArgs`]: `--set`,
//! `--settings`, `--cmdline`) and the simulated machine's ([`MachineArgs`]: `--mem`,
//! `--mmap-base`, `--brk-start`, `--hz`). What they resolve to, with its error messages, is
//! `experiment::resolve` (settings as mm/huge_memory.c `setup_transparent_hugepage`,
//! `setup_thp_anon` and the sysfs stores apply them; the machine; the profile; the matrices).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use experiment::resolve::{self as r, MachineFlags};
use thp_abi::ThpSettings;

use crate::checks;

/// Settings given on the command line; applied in order: --cmdline, --settings, --set.
#[derive(Args, Clone, Default)]
pub struct SettingsArgs {
    /// Set a knob, as a path under /sys/kernel/mm/transparent_hugepage: `enabled=always`,
    /// `hugepages-64kB/enabled=always`, `khugepaged/max_ptes_none=0`. Repeatable.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
    /// A settings source: a file of PATH=VALUE lines (`-`: standard input), a
    /// `grep -r . /sys/kernel/mm/transparent_hugepage` dump, the JSON of `thplab settings --json`,
    /// a directory holding a THP sysfs tree (read, never written), or `live`: this machine's
    /// current knobs, read-only.
    #[arg(long = "settings", value_name = "FILE|DIR|live|-")]
    pub settings_file: Vec<PathBuf>,
    /// Kernel command-line options: `transparent_hugepage=always thp_anon=16K-64K:always`.
    /// Other words are ignored, as the kernel ignores them; near misses of the THP options
    /// (`transparent_hugepages=`) are named in a warning.
    #[arg(long = "cmdline", value_name = "OPTIONS")]
    pub cmdline: Option<String>,
    /// The kernel version the model follows: 6.18 (default; this machine's, what live runs
    /// check) or 7.2 (model-only: khugepaged mTHP collapse; docs/policies.md). Also a
    /// `kernel=VERSION` line of a settings file.
    #[arg(long = "kernel", value_name = "6.18|7.2")]
    pub kernel: Option<String>,
    /// A proposal the model runs (model-only), with its parameters:
    /// `mthp-collapse-v18:scaled=uncapped`. `thplab settings --list` lists them. Also a
    /// `policy=NAME[:PARAM=VALUE,...]` line of a settings file.
    #[arg(long = "policy", value_name = "NAME[:PARAM=VALUE,...]")]
    pub policy: Option<String>,
}

impl SettingsArgs {
    /// Boot defaults, then the command line, the files and the --set flags
    /// (`experiment::resolve::settings`).
    pub fn resolve(&self) -> Result<ThpSettings> {
        checks::stdin_once(&[], self)?;
        let mut s = r::settings(self.cmdline.as_deref(), &self.settings_file, &self.set)?;
        r::version_and_policy(&mut s, self.kernel.as_deref(), self.policy.as_deref())?;
        Ok(s)
    }

    /// The settings of `--matrix SPEC`, with --set on top of each, and its title
    /// (`experiment::resolve::matrix_runs`; --settings and --cmdline are refused).
    pub fn matrix_runs(&self, spec: &str) -> Result<(String, Vec<(String, ThpSettings)>)> {
        let (title, mut runs) = r::matrix_runs(spec, &self.set, !self.settings_file.is_empty() || self.cmdline.is_some())?;
        for (_, s) in &mut runs {
            r::version_and_policy(s, self.kernel.as_deref(), self.policy.as_deref())?;
        }
        Ok((title, runs))
    }
}

/// The simulated machine.
#[derive(Args, Clone)]
pub struct MachineArgs {
    /// Physical memory of the simulated machine, from 70M (the min watermark of
    /// vm.min_free_kbytes 67584 is 66 MiB, which no allocation may take) to 4T: 512M, 24G ...
    #[arg(long, default_value = "24G", value_name = "SIZE")]
    pub mem: String,
    /// Top of the simulated mmap area (hex), below which mappings are placed top-down.
    #[arg(long, value_name = "ADDR")]
    pub mmap_base: Option<String>,
    /// Start of the simulated heap (hex).
    #[arg(long, value_name = "ADDR")]
    pub brk_start: Option<String>,
    /// CONFIG_HZ of the simulated kernel: khugepaged sleeps `scan_sleep_millisecs` in jiffies
    /// (a 100 ms sleep lasts 104 ms at 250). This machine kind: 250 (/proc/config.gz).
    #[arg(long, default_value_t = 250, value_name = "HZ", value_parser = clap::value_parser!(u32).range(24..=1200))]
    pub hz: u32,
    /// A memcg limit (cgroup v2 memory.max, v1 memory.limit_in_bytes): the run's mms are
    /// charged every folio and reclaimed (swapped) or OOM-killed above it; at least 4M in whole
    /// pages: 512M, 8G. Live (`live`, `compare`), the workload runs in a memcg of its own with
    /// this limit, created and removed by the settings guard (result: `live.pressure`).
    #[arg(long, value_name = "SIZE")]
    pub memory_max: Option<String>,
    /// The swap device: zram:SIZE (synchronous, mTHP swap-in), file:SIZE or none. Live, the
    /// settings guard sets it up and removes it: /dev/zram0 only when nobody uses it (disksize
    /// 0, not in /proc/swaps), a swap file in $THPLAB_SWAP_DIR (default /var/tmp).
    #[arg(long, value_name = "zram:SIZE|file:SIZE|none")]
    pub swap: Option<String>,
    /// Base page size: 4K (x86-64, this machine). arm64's 16K and 64K are model-only and not
    /// run yet: refused with the geometry they would have (docs/page-sizes.md).
    #[arg(long, default_value = "4K", value_name = "4K|16K|64K")]
    pub page_size: String,
}

impl MachineArgs {
    fn flags(&self) -> MachineFlags<'_> {
        MachineFlags { mem: &self.mem, mmap_base: self.mmap_base.as_deref(), brk_start: self.brk_start.as_deref(), hz: self.hz, memory_max: self.memory_max.as_deref(), swap: self.swap.as_deref() }
    }

    /// The machine, converted once (`experiment::resolve::machine`).
    pub fn resolve(&self) -> Result<sim::MachineConfig> {
        Ok(sim::MachineConfig { geometry: r::page_size(&self.page_size)?, ..r::machine(&self.flags())? })
    }

    /// A recording brings its own layout: say which of these flags it overrides.
    pub fn warn_for_recording(&self, h: &trace::Header) {
        r::warn_for_recording(&self.flags(), h)
    }
}
