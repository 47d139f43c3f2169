//! Resolution of what a command runs with, in one place (the CLI keeps only the clap structs and
//! calls these): the settings ([`settings`]: boot defaults, then `--cmdline`, `--settings`
//! sources and `--set`, as the kernel applies them: mm/huge_memory.c
//! `setup_transparent_hugepage`, `setup_thp_anon`, then the sysfs stores such as
//! `enabled_store`), the standard matrices ([`matrix`], [`matrix_runs`]: `thp_abi::matrix`), the
//! simulated machine ([`machine`]: `--mem`, `--mmap-base`, `--brk-start`, `--hz`, converted once
//! into a `sim::MachineConfig`), and the profile ([`profile`]: `--profile`'s file, `--cpu`,
//! `--paging`, `--order0-scatter`, `--sample`, converted once into a `sim::Profile`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use thp_abi::ThpSettings;
use uapi::profile::MachineProfile;

use crate::input::{self, read_text_limited, MAX_SETTINGS_BYTES};

/// The settings: boot defaults, then the kernel command line (`cmdline`), the settings sources
/// (`files`, in order) and the `PATH=VALUE` assignments (`sets`, in order); warnings (near
/// misses of the THP boot options, unknown knobs) on stderr.
pub fn settings(cmdline: Option<&str>, files: &[PathBuf], sets: &[String]) -> Result<ThpSettings> {
    let mut s = ThpSettings::default();
    if let Some(c) = cmdline {
        s.apply_cmdline(c)?;
        for w in thp_abi::settings::cmdline_warnings(c) {
            eprintln!("thplab: warning: --cmdline: {w}");
        }
    }
    for f in files {
        apply_settings_source(&mut s, f)?;
    }
    for a in sets {
        s.apply_assignment(a).with_context(|| format!("--set {a}"))?;
    }
    if let Some(w) = s.unknown_warning() {
        eprintln!("thplab: warning: {w}");
    }
    Ok(s)
}

/// `--kernel VERSION` and `--policy NAME[:PARAM=VALUE,...]` on top of the settings (they win
/// over `kernel=` and `policy=` lines of a settings file); errors say what is valid.
pub fn version_and_policy(s: &mut ThpSettings, kernel: Option<&str>, policy: Option<&str>) -> Result<()> {
    if let Some(k) = kernel {
        s.set("kernel", k).with_context(|| format!("--kernel {k}"))?;
    }
    if let Some(p) = policy {
        s.set("policy", p).with_context(|| format!("--policy {p}"))?;
    }
    Ok(())
}

/// The THP sysfs tree `--settings live` reads (`$THPLAB_SYSFS_THP` in tests, to read a copy).
fn live_tree() -> PathBuf {
    std::env::var_os("THPLAB_SYSFS_THP").filter(|s| !s.is_empty()).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(thp_abi::settings::SYSFS_THP))
}

/// Apply one `--settings` source: `live`, a sysfs tree directory, `settings --json` output, or
/// a settings file.
fn apply_settings_source(s: &mut ThpSettings, f: &Path) -> Result<()> {
    let name = input::display(f);
    let tree = if f.as_os_str() == "live" && !f.exists() { Some(live_tree()) } else { f.is_dir().then(|| f.to_path_buf()) };
    if let Some(dir) = tree {
        let text = probe::sysfs::read_tree(&dir).with_context(|| format!("--settings {name}"))?;
        s.apply_tree(&dir.display().to_string(), &text)?;
        return Ok(());
    }
    let text = read_text_limited(f, "settings file", MAX_SETTINGS_BYTES)?;
    if text.trim_start_matches('\u{feff}').trim().is_empty() {
        bail!("settings file {name} is empty: no PATH=VALUE line (such as enabled=always); the boot defaults need no --settings");
    }
    if text.trim_start().starts_with('{') {
        s.apply_file(&name, &json_settings_lines(&name, &text)?)?;
        return Ok(());
    }
    s.apply_file(&name, &text)?;
    Ok(())
}

/// The output of `thplab settings --json` (an object of path → value) as `PATH=VALUE` lines.
fn json_settings_lines(name: &str, text: &str) -> Result<String> {
    let map: std::collections::BTreeMap<String, serde_json::Value> =
        serde_json::from_str(text).with_context(|| format!("settings file {name}: not the JSON of `thplab settings --json` (an object of \"path\": \"value\")"))?;
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
    Ok(lines)
}

/// What the simulated machine must have above the min watermark to run a workload: one
/// MAX_PAGE_ORDER block (4 MiB).
pub const MEM_ABOVE_WATERMARK: u64 = 4 << 20;

/// The smallest `--mem`: the min watermark (`vm.min_free_kbytes`, 66 MiB on this machine kind;
/// mm/page_alloc.c `__setup_per_zone_wmarks`), which no allocation may take, plus
/// [`MEM_ABOVE_WATERMARK`]; below it the first fault runs out of memory.
pub fn min_mem_bytes(m: &sim::MachineConfig) -> u64 {
    ((m.min_free_kbytes << 10) + MEM_ABOVE_WATERMARK).max(sim::MIN_MEM_BYTES)
}

/// The simulated machine's flags as given (`--mem`, `--mmap-base`, `--brk-start`, `--hz`).
#[derive(Clone, Copy, Debug)]
pub struct MachineFlags<'a> {
    pub mem: &'a str,
    pub mmap_base: Option<&'a str>,
    pub brk_start: Option<&'a str>,
    pub hz: u32,
    /// `--memory-max SIZE` (thp_abi::Pressure::parse_memory_max).
    pub memory_max: Option<&'a str>,
    /// `--swap zram:SIZE|file:SIZE|none` (thp_abi::SwapSpec::parse).
    pub swap: Option<&'a str>,
}

/// The simulated machine: the flags converted once into a `sim::MachineConfig` (the rest its
/// defaults, this machine kind), or an error that says which flag and what is valid.
pub fn machine(f: &MachineFlags) -> Result<sim::MachineConfig> {
    let mut m = sim::MachineConfig::default();
    let min = min_mem_bytes(&m);
    m.mem_bytes = mm_types::parse_size(f.mem).filter(|b| (min..=sim::MAX_MEM_BYTES).contains(b)).with_context(|| {
        let lo = sim::human_bytes(min).replace(" MiB", "M");
        format!(
            "--mem {}: give a size from {lo} to {}, such as 4G (below {lo}, the min watermark of {} (vm.min_free_kbytes {}), which no allocation may take, leaves less than {} for the workload)",
            f.mem,
            sim::human_bytes(sim::MAX_MEM_BYTES).replace(" TiB", "T"),
            sim::human_bytes(m.min_free_kbytes << 10),
            m.min_free_kbytes,
            sim::human_bytes(MEM_ABOVE_WATERMARK),
        )
    })?;
    if let Some(a) = f.mmap_base {
        m.mmap_base = address_arg("--mmap-base", a, "0x7dfffffc5000")?;
    }
    if let Some(a) = f.brk_start {
        m.brk_start = address_arg("--brk-start", a, "0x555555579000")?;
    }
    m.hz = f.hz;
    if let Some(t) = f.memory_max {
        m.pressure.memory_max = Some(thp_abi::Pressure::parse_memory_max(t).map_err(|e| anyhow::anyhow!("--{e}"))?);
    }
    if let Some(t) = f.swap {
        m.pressure.swap = thp_abi::SwapSpec::parse(t).map_err(|e| anyhow::anyhow!("--{e}"))?;
    }
    Ok(m)
}

/// `--page-size SIZE`: the base page size's geometry, or an error that says what is valid. 4K
/// is x86-64's (this machine's) and the model's; 16K and 64K are arm64's granules, model-only
/// on this machine, and the model's fault path does not run them yet (it has 4 KiB pages
/// throughout): they are refused with the geometry they would have (docs/page-sizes.md).
pub fn page_size(text: &str) -> Result<mm_types::PageGeometry> {
    let Some(g) = mm_types::Granule::parse(text) else {
        bail!("--page-size {text}: give 4K (x86-64 and arm64, the default), 16K or 64K (arm64 only)");
    };
    if g != mm_types::Granule::K4 {
        bail!(
            "--page-size {g}: model-only (this x86-64 machine and its live kernel have 4 KiB pages), and the model's fault path runs \
             4 KiB pages only so far (docs/page-sizes.md); with {g} pages it would have {}",
            g.geometry().summary()
        );
    }
    Ok(g.geometry())
}

/// A recording brings its own layout: say which of the machine's flags it overrides.
pub fn warn_for_recording(f: &MachineFlags, h: &trace::Header) {
    if let Some(a) = f.mmap_base {
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
    if let Some(a) = f.brk_start {
        eprintln!("thplab: warning: --brk-start {a} is not used for a recording: each process's heap starts where its recorded brk says");
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

/// `--order0-scatter S`: a number from 0 to 1 (clap's value parser).
pub fn scatter_arg(v: &str) -> std::result::Result<f64, String> {
    v.parse::<f64>().ok().filter(|x| (0.0..=1.0).contains(x)).ok_or_else(|| format!("'{v}' is not a number from 0 to 1"))
}

/// The TLB preset and paging mode: `--cpu` and `--paging` (values clap checked), else the
/// profile's `[tlb]` (`thplab calibrate`), else zen4 and native paging.
pub fn tlb_choice(cpu: Option<&str>, paging: Option<&str>, profile: Option<&MachineProfile>) -> Result<sim::TlbSetup> {
    let measured = profile.and_then(|p| p.tlb.as_ref());
    let preset = match (cpu, measured) {
        (Some(c), _) => tlb::presets::by_name(c).with_context(|| format!("--cpu {c} is not a preset (valid: {})", tlb::presets::names().join(", ")))?,
        (None, Some(t)) => tlb::presets::by_name(&t.cpu).with_context(|| format!("the profile's [tlb] cpu = '{}' is not a preset (valid: {})", t.cpu, tlb::presets::names().join(", ")))?,
        (None, None) => &tlb::presets::ZEN4,
    };
    let paging = match (paging, measured) {
        (Some(p), _) => tlb::Paging::parse(p).with_context(|| format!("--paging {p} is not native, nested-4k, nested-2m or nested-1g"))?,
        (None, Some(t)) => tlb::Paging::parse(&t.paging).with_context(|| format!("the profile's [tlb] paging = '{}' is not native, nested-4k, nested-2m or nested-1g", t.paging))?,
        (None, None) => tlb::Paging::Native,
    };
    Ok((preset, paging))
}

/// The base pages' scatter for nested walks: `--order0-scatter`, else the profile's `[tlb]`,
/// else 0 (as [`tlb_choice`] resolves the preset and paging).
pub fn scatter_choice(given: Option<f64>, profile: Option<&MachineProfile>) -> f64 {
    given.or(profile.and_then(|p| p.tlb.as_ref()).map(|t| t.order0_scatter)).unwrap_or(0.0)
}

/// A machine profile from a file, or the built-in one (`builtin`).
pub fn load_profile(arg: &str) -> Result<MachineProfile> {
    if arg == "builtin" {
        return Ok(MachineProfile::builtin());
    }
    let path = Path::new(arg);
    let text = read_text_limited(path, "machine profile", uapi::profile::MAX_PROFILE_BYTES as u64)?;
    let p = MachineProfile::parse(&input::display(path), &text)?;
    if p.fault.is_none() && p.pin.is_none() {
        eprintln!(
            "thplab: warning: --profile {arg}: no [fault] section, so no time (measure one with `thplab calibrate -o FILE`), and no [pin] section, so no io.pin_ns (`thplab bench io --pin-only --write-profile FILE`)"
        );
    }
    Ok(p)
}

/// The flags a run's profile is resolved from.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProfileFlags<'a> {
    /// `--cpu PRESET`.
    pub cpu: Option<&'a str>,
    /// `--paging MODE`.
    pub paging: Option<&'a str>,
    /// `--order0-scatter S`.
    pub order0_scatter: Option<f64>,
    /// `--sample MS`.
    pub sample_ms: Option<u64>,
    /// `--latency`.
    pub latency: bool,
    /// Whether the run sets up the TLB model (a workload; a recording's accesses): only then are
    /// `--cpu`, `--paging` and the profile's `[tlb]` resolved (and refused where invalid).
    pub tlb: bool,
}

/// The profile of a run, converted once from the flags and the machine profile (`--profile`,
/// loaded by [`load_profile`]): its `[fault]` and `[pin]` costs, and its `[host]` where the
/// run is priced (with the profile's own free lists: the commands that run live next replace
/// them, `crate::host::host_model`).
pub fn profile(f: &ProfileFlags, file: Option<&MachineProfile>) -> Result<sim::Profile> {
    let tlb = if f.tlb { Some(tlb_choice(f.cpu, f.paging, file)?) } else { None };
    let costs = file.and_then(|p| p.fault.clone());
    let host = costs.as_ref().and(file.and_then(|p| p.host.clone())).map(|h| (h, None));
    Ok(sim::Profile {
        tlb,
        order0_scatter: scatter_choice(f.order0_scatter, file),
        costs,
        host,
        pin: file.and_then(|p| p.pin.clone()),
        sample_ms: f.sample_ms,
        latency: f.latency,
        accesses: None,
        vm_host: None,
    })
}

/// The settings of a standard matrix `KIND[:NAME,...]` and its kind (`anon`, `shmem`).
pub fn matrix(spec: &str) -> Result<(String, Vec<(String, ThpSettings)>)> {
    thp_abi::matrix::select(spec).map_err(anyhow::Error::msg)
}

/// `--matrix [KIND]` takes the word after it as its value, so `sim --matrix seed-anon-1g`
/// gives the workload's name to `--matrix`: a value that names no matrix (see
/// `thp_abi::matrix::is_spec`) while no workload was given is the workload, under the whole
/// anon matrix. Otherwise the matrix is checked here, before anything runs. Returns the
/// workload and the matrix.
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

/// The settings of a `--matrix KIND[:NAME,...]` run, with `sets` (`--set`) applied on top of
/// each (and named in the label), and its title (`the anon matrix`, `3 of 11 settings of the
/// anon matrix`); `other_sources` (`--settings` or `--cmdline` given) is refused: the matrix is
/// the settings.
pub fn matrix_runs(spec: &str, sets: &[String], other_sources: bool) -> Result<(String, Vec<(String, ThpSettings)>)> {
    if other_sources {
        bail!("--matrix runs its own settings; leave out --settings and --cmdline (--set applies on top of each)");
    }
    let (kind, mut m) = matrix(spec)?;
    let whole = thp_abi::matrix::by_name(&kind).map_or(0, |w| w.len());
    let title = if m.len() == whole { format!("the {kind} matrix") } else { format!("{} of {whole} settings of the {kind} matrix", m.len()) };
    // --set applies on top of every setting of the matrix (anon_beside_full=1, a khugepaged knob).
    for (label, s) in &mut m {
        for x in sets {
            s.apply_assignment(x).with_context(|| format!("--set {x}"))?;
        }
        if !sets.is_empty() {
            *label = format!("{label} + {}", sets.join(" "));
        }
    }
    Ok((title, m))
}

#[cfg(test)]
#[path = "resolve_tests.rs"]
mod tests;
