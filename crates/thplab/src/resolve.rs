//! Resolution of what a command runs with, in one place: the settings (boot defaults, then
//! `--cmdline`, `--settings` sources and `--set`, as the kernel applies them: mm/huge_memory.c
//! `setup_transparent_hugepage`, `setup_thp_anon`, then the sysfs stores), the standard
//! matrices (`--matrix`: the one place thplab calls `thp_abi::matrix`), the simulated machine
//! (`--mem`, `--mmap-base`, `--brk-start`, `--hz`), the machine profile (`--profile`) and the
//! TLB choice (`--cpu`, `--paging`, `--order0-scatter`, else the profile's `[tlb]`).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use thp_abi::ThpSettings;

use crate::{checks, input, read_text_limited, MAX_SETTINGS_BYTES};

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
}

impl SettingsArgs {
    /// Boot defaults, then the command line, the files and the --set flags.
    pub fn resolve(&self) -> Result<ThpSettings> {
        checks::stdin_once(&[], self)?;
        let mut s = ThpSettings::default();
        if let Some(c) = &self.cmdline {
            s.apply_cmdline(c)?;
            for w in thp_abi::settings::cmdline_warnings(c) {
                eprintln!("thplab: warning: --cmdline: {w}");
            }
        }
        for f in &self.settings_file {
            apply_settings_source(&mut s, f)?;
        }
        for a in &self.set {
            s.apply_assignment(a).with_context(|| format!("--set {a}"))?;
        }
        if let Some(w) = s.unknown_warning() {
            eprintln!("thplab: warning: {w}");
        }
        Ok(s)
    }
}

/// The THP sysfs tree `--settings live` reads (`$THPLAB_SYSFS_THP` in tests, to read a copy).
fn live_tree() -> PathBuf {
    std::env::var_os("THPLAB_SYSFS_THP").filter(|s| !s.is_empty()).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(thp_abi::settings::SYSFS_THP))
}

/// Apply one `--settings` source: `live`, a sysfs tree directory, `settings --json` output, or
/// a settings file.
fn apply_settings_source(s: &mut ThpSettings, f: &std::path::Path) -> Result<()> {
    let name = input::display(f);
    let tree = if f.as_os_str() == "live" && !f.exists() { Some(live_tree()) } else { f.is_dir().then(|| f.to_path_buf()) };
    if let Some(dir) = tree {
        let text = live::sysfs::read_tree(&dir).with_context(|| format!("--settings {name}"))?;
        s.apply_tree(&dir.display().to_string(), &text)?;
        return Ok(());
    }
    let text = read_text_limited(f, "settings file", MAX_SETTINGS_BYTES)?;
    if text.trim_start_matches('\u{feff}').trim().is_empty() {
        bail!("settings file {name} is empty: no PATH=VALUE line (such as enabled=always); the boot defaults need no --settings");
    }
    if text.trim_start().starts_with('{') {
        // `thplab settings --json`: an object of path → value.
        let map: std::collections::BTreeMap<String, serde_json::Value> = serde_json::from_str(&text)
            .with_context(|| format!("settings file {name}: not the JSON of `thplab settings --json` (an object of \"path\": \"value\")"))?;
        let mut lines = String::new();
        for (k, v) in map {
            let v = match v {
                serde_json::Value::String(x) => x,
                serde_json::Value::Number(n) => n.to_string(),
                serde_json::Value::Bool(b) => (b as u8).to_string(),
                other => bail!("settings file {name}: \"{k}\" has {other}; give each knob a string or a number"),
            };
            if v.contains('\n') {
                bail!("settings file {name}: \"{k}\" has a value with a newline");
            }
            lines += &format!("{k}={v}\n");
        }
        s.apply_file(&name, &lines)?;
        return Ok(());
    }
    s.apply_file(&name, &text)?;
    Ok(())
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
}

impl MachineArgs {
    pub fn resolve(&self) -> Result<sim::MachineConfig> {
        let mut m = sim::MachineConfig::default();
        let min = checks::min_mem_bytes(&m);
        m.mem_bytes = mm_types::parse_size(&self.mem).filter(|b| (min..=sim::MAX_MEM_BYTES).contains(b)).with_context(|| {
            let lo = sim::human_bytes(min).replace(" MiB", "M");
            format!(
                "--mem {}: give a size from {lo} to {}, such as 4G (below {lo}, the min watermark of {} (vm.min_free_kbytes {}), which no allocation may take, leaves less than {} for the workload)",
                self.mem,
                sim::human_bytes(sim::MAX_MEM_BYTES).replace(" TiB", "T"),
                sim::human_bytes(m.min_free_kbytes << 10),
                m.min_free_kbytes,
                sim::human_bytes(checks::MEM_ABOVE_WATERMARK),
            )
        })?;
        if let Some(a) = &self.mmap_base {
            m.mmap_base = address_arg("--mmap-base", a, "0x7dfffffc5000")?;
        }
        if let Some(a) = &self.brk_start {
            m.brk_start = address_arg("--brk-start", a, "0x555555579000")?;
        }
        m.hz = self.hz;
        Ok(m)
    }

    /// A recording brings its own layout: say which of these flags it overrides.
    pub fn warn_for_recording(&self, h: &trace::Header) {
        if let Some(a) = &self.mmap_base {
            if h.flags & trace::flags::EXEC_SNAPSHOT_EVERY != 0 {
                eprintln!(
                    "thplab: warning: --mmap-base {a} is not used for this recording: every program it executes has its mmap_base \
                     where its recorded address space (its exec snapshot) puts it"
                );
            } else if h.flags & trace::flags::EXEC_SNAPSHOT != 0 {
                eprintln!(
                    "thplab: warning: --mmap-base {a} does not move the recorded program: its mmap_base is where its recorded \
                     address space (the exec snapshot) puts it; it applies only to programs executed later in the recording"
                );
            }
        }
        if let Some(a) = &self.brk_start {
            eprintln!("thplab: warning: --brk-start {a} is not used for a recording: each process's heap starts where its recorded brk says");
        }
    }
}

/// A page-aligned user address given as hex, or an error that says which of the three it is not.
fn address_arg(flag: &str, a: &str, example: &str) -> Result<u64> {
    let Some(v) = a.strip_prefix("0x").and_then(|h| u64::from_str_radix(h, 16).ok()) else {
        bail!("{flag} {a}: give a hex address such as {example}");
    };
    if v % 4096 != 0 {
        bail!("{flag} {a}: not page-aligned (a multiple of 0x1000), such as {example}");
    }
    if v == 0 || v > mm_types::TASK_SIZE {
        bail!("{flag} {a}: outside the user address space (0x1000 to {:#x})", mm_types::TASK_SIZE);
    }
    Ok(v)
}

pub fn scatter_arg(v: &str) -> std::result::Result<f64, String> {
    v.parse::<f64>().ok().filter(|x| (0.0..=1.0).contains(x)).ok_or_else(|| format!("'{v}' is not a number from 0 to 1"))
}

/// The TLB preset and paging mode: `--cpu` and `--paging` (values clap checked), else the
/// profile's `[tlb]` (`thplab calibrate`), else zen4 and native paging.
pub fn tlb_choice(cpu: Option<&str>, paging: Option<&str>, profile: Option<&uapi::profile::MachineProfile>) -> Result<(&'static tlb::CpuPreset, tlb::Paging)> {
    let measured = profile.and_then(|p| p.tlb.as_ref());
    let preset = match (cpu, measured) {
        (Some(c), _) => tlb::presets::by_name(c).expect("clap checked --cpu"),
        (None, Some(t)) => tlb::presets::by_name(&t.cpu).with_context(|| format!("the profile's [tlb] cpu = '{}' is not a preset (valid: {})", t.cpu, tlb::presets::names().join(", ")))?,
        (None, None) => &tlb::presets::ZEN4,
    };
    let paging = match (paging, measured) {
        (Some(p), _) => tlb::Paging::parse(p).expect("clap checked --paging"),
        (None, Some(t)) => tlb::Paging::parse(&t.paging).with_context(|| format!("the profile's [tlb] paging = '{}' is not native, nested-4k, nested-2m or nested-1g", t.paging))?,
        (None, None) => tlb::Paging::Native,
    };
    Ok((preset, paging))
}

/// The base pages' scatter for nested walks: `--order0-scatter`, else the profile's `[tlb]`,
/// else 0 (as `tlb_choice` resolves the preset and paging).
pub fn scatter_choice(given: Option<f64>, profile: Option<&uapi::profile::MachineProfile>) -> f64 {
    given.or(profile.and_then(|p| p.tlb.as_ref()).map(|t| t.order0_scatter)).unwrap_or(0.0)
}

/// A machine profile from a file, or the built-in one.
pub fn load_profile(arg: &str) -> Result<uapi::profile::MachineProfile> {
    if arg == "builtin" {
        return Ok(uapi::profile::MachineProfile::builtin());
    }
    let path = std::path::Path::new(arg);
    let text = read_text_limited(path, "machine profile", uapi::profile::MAX_PROFILE_BYTES as u64)?;
    let p = uapi::profile::MachineProfile::parse(&input::display(path), &text)?;
    if p.fault.is_none() && p.pin.is_none() {
        eprintln!(
            "thplab: warning: --profile {arg}: no [fault] section, so no time (measure one with `thplab calibrate -o FILE`), and no [pin] section, so no io.pin_ns (`thplab bench io --pin-only --write-profile FILE`)"
        );
    }
    Ok(p)
}

/// The settings of a standard matrix `KIND[:NAME,...]` and its kind (`anon`, `shmem`).
pub fn matrix(spec: &str) -> Result<(String, Vec<(String, ThpSettings)>)> {
    thp_abi::matrix::select(spec).map_err(anyhow::Error::msg)
}

/// `--matrix [KIND]` takes the word after it as its value, so `sim --matrix seed-anon-1g`
/// gives the workload's name to `--matrix`: a value that names no matrix (see
/// `thp_abi::matrix::is_spec`) while no workload was given is the workload, under the whole anon
/// matrix. Otherwise the matrix is checked here, before anything runs. Returns the workload
/// and the matrix.
pub fn workload_and_matrix(workload: Option<String>, matrix: Option<String>) -> Result<(Option<String>, Option<String>)> {
    match (workload, matrix) {
        (None, Some(m)) if !thp_abi::matrix::is_spec(&m) => Ok((Some(m), Some("anon".into()))),
        (w, Some(m)) => {
            self::matrix(&m)?;
            Ok((w, Some(m)))
        }
        (w, None) => Ok((w, None)),
    }
}

/// The settings of a `--matrix KIND[:NAME,...]` run, with `--set` applied on top of each (and
/// named in the label), and its title (`the anon matrix`, `3 settings of the anon matrix`);
/// `--settings` and `--cmdline` are refused (the matrix is the settings).
pub fn matrix_runs(spec: &str, given: &SettingsArgs) -> Result<(String, Vec<(String, ThpSettings)>)> {
    if !given.settings_file.is_empty() || given.cmdline.is_some() {
        bail!("--matrix runs its own settings; leave out --settings and --cmdline (--set applies on top of each)");
    }
    let (kind, mut m) = matrix(spec)?;
    let whole = thp_abi::matrix::by_name(&kind).map_or(0, |w| w.len());
    let title = if m.len() == whole { format!("the {kind} matrix") } else { format!("{} of {whole} settings of the {kind} matrix", m.len()) };
    // --set applies on top of every setting of the matrix (anon_beside_full=1, a khugepaged knob).
    for (label, s) in &mut m {
        for x in &given.set {
            s.apply_assignment(x).with_context(|| format!("--set {x}"))?;
        }
        if !given.set.is_empty() {
            *label = format!("{label} + {}", given.set.join(" "));
        }
    }
    Ok((title, m))
}

