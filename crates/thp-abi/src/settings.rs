//! `/sys/kernel/mm/transparent_hugepage`, one field per knob.
//!
//! Kernel sources (6.18): `mm/huge_memory.c` (`enabled_store`, `defrag_store`, `anon_enabled_store`,
//! `hugepage_init_sysfs`, `setup_transparent_hugepage`, `setup_thp_anon`), `mm/shmem.c`
//! (`shmem_enabled_store`, `thpsize_shmem_enabled_store`, `setup_thp_shmem`), `mm/khugepaged.c`
//! (`khugepaged_init` and the `*_store` functions), and
//! `tools/testing/selftests/mm/thp_settings.h`, whose `struct thp_settings` this mirrors.
//!
//! Paths are relative to the sysfs directory and spelled as there: `enabled`,
//! `hugepages-64kB/enabled`, `khugepaged/max_ptes_none`. A value the kernel would refuse (an
//! unknown word, a knob 6.18 does not have, a number out of range) is an error that lists what is
//! valid.

use std::collections::BTreeMap;
use std::fmt;

use mm_types::{parse_size, Order, Orders, PMD_ORDER};

use crate::keys::KnobPath;

/// Sysfs directory of the THP tree.
pub const SYSFS_THP: &str = "/sys/kernel/mm/transparent_hugepage";

macro_rules! word_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident = $text:literal,)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $($variant,)* }
        impl $name {
            pub const WORDS: &'static [&'static str] = &[$($text,)*];
            pub fn word(self) -> &'static str {
                match self { $($name::$variant => $text,)* }
            }
            pub fn parse(text: &str) -> Option<$name> {
                match text { $($text => Some($name::$variant),)* _ => None }
            }
        }
    };
}

word_enum! {
    /// Top-level `enabled` (TRANSPARENT_HUGEPAGE_FLAG / _REQ_MADV_FLAG).
    TopEnabled { Always = "always", Madvise = "madvise", Never = "never", }
}
word_enum! {
    /// Per-size `hugepages-<N>kB/enabled` (huge_anon_orders_{always,inherit,madvise}).
    AnonEnabled { Always = "always", Inherit = "inherit", Madvise = "madvise", Never = "never", }
}
word_enum! {
    /// Top-level `defrag`.
    Defrag {
        Always = "always",
        Defer = "defer",
        DeferMadvise = "defer+madvise",
        Madvise = "madvise",
        Never = "never",
    }
}
word_enum! {
    /// Top-level `shmem_enabled` (the internal shm_mnt's huge= plus deny/force).
    ShmemEnabled {
        Always = "always",
        WithinSize = "within_size",
        Advise = "advise",
        Never = "never",
        Deny = "deny",
        Force = "force",
    }
}
word_enum! {
    /// Per-size `hugepages-<N>kB/shmem_enabled` (huge_shmem_orders_*).
    ShmemSizeEnabled {
        Always = "always",
        Inherit = "inherit",
        WithinSize = "within_size",
        Advise = "advise",
        Never = "never",
    }
}

/// `khugepaged/*` writable knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KhugepagedSettings {
    pub defrag: bool,
    pub max_ptes_none: u32,
    pub max_ptes_swap: u32,
    pub max_ptes_shared: u32,
    pub pages_to_scan: u32,
    pub scan_sleep_millisecs: u32,
    pub alloc_sleep_millisecs: u32,
}

/// The whole writable THP tree. Array slots are indexed by order; slots for orders the kernel
/// has no knob for (anon order 0/1, shmem order 0) are kept at `Never` and never printed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ThpSettings {
    pub enabled: TopEnabled,
    pub defrag: Defrag,
    pub shmem_enabled: ShmemEnabled,
    pub use_zero_page: bool,
    pub shrink_underused: bool,
    pub anon: [AnonEnabled; PMD_ORDER as usize + 1],
    pub shmem: [ShmemSizeEnabled; PMD_ORDER as usize + 1],
    pub khugepaged: KhugepagedSettings,
    /// `anon_beside_full`: a knob of this machine kind's kernel build (6.18.44-fc), not of
    /// upstream 6.18. `None` is upstream behaviour (the knob absent or 0). Measured here
    /// (docs/kernel-notes.md 15): when 1, an anonymous fault takes an mTHP order only if a
    /// neighbouring naturally aligned block of the same order, in the same PTE table and inside
    /// the VMA, has every PTE populated; PMD faults are unaffected.
    pub anon_beside_full: Option<bool>,
    /// Knobs of the live tree that this model does not know (another kernel build's, such as
    /// `anon_beside_full`), as read from a settings file or a dump: carried into results and
    /// recordings and named in a warning, never written and never deciding anything.
    pub unknown: BTreeMap<String, String>,
    /// The kernel version the model follows (`--kernel`, a `kernel =` line): not a sysfs knob,
    /// never written live; 6.18 (the default) prints nothing.
    pub kernel: crate::version::KernelVersion,
    /// A proposal the model runs (`--policy`, a `policy =` line): model-only, not a knob.
    pub policy: Option<crate::version::Policy>,
}

impl Default for ThpSettings {
    /// 6.18 boot defaults with CONFIG_TRANSPARENT_HUGEPAGE_MADVISE (this machine kind): PMD size
    /// `inherit`, every other size `never`, khugepaged limits derived from HPAGE_PMD_NR.
    fn default() -> Self {
        let mut anon = [AnonEnabled::Never; PMD_ORDER as usize + 1];
        anon[PMD_ORDER as usize] = AnonEnabled::Inherit;
        let mut shmem = [ShmemSizeEnabled::Never; PMD_ORDER as usize + 1];
        shmem[PMD_ORDER as usize] = ShmemSizeEnabled::Inherit;
        ThpSettings {
            enabled: TopEnabled::Madvise,
            defrag: Defrag::Madvise,
            shmem_enabled: ShmemEnabled::Never,
            use_zero_page: true,
            shrink_underused: true,
            anon,
            shmem,
            khugepaged: KhugepagedSettings {
                defrag: true,
                max_ptes_none: 511,
                max_ptes_swap: 64,
                max_ptes_shared: 256,
                pages_to_scan: 4096,
                scan_sleep_millisecs: 10000,
                alloc_sleep_millisecs: 60000,
            },
            anon_beside_full: None,
            unknown: BTreeMap::new(),
            kernel: crate::version::KernelVersion::V6_18,
            policy: None,
        }
    }
}

/// What went wrong applying a setting. `Display` names what is valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("unknown setting '{path}'; valid settings are: {valid}")]
    UnknownPath { path: String, valid: String },
    #[error("'{path}' is read-only in the kernel and cannot be set")]
    ReadOnly { path: String },
    #[error("invalid value '{value}' for '{path}'; valid values are: {valid}")]
    InvalidValue { path: String, value: String, valid: String },
    #[error("'{text}' is not of the form PATH=VALUE (for example hugepages-64kB/enabled=always)")]
    NotAnAssignment { text: String },
    #[error("{file}:{line}: {error}")]
    AtLine { file: String, line: usize, error: Box<SettingsError> },
    #[error("invalid kernel command-line option '{option}': {why}")]
    Cmdline { option: String, why: String },
    #[error("unknown setting '{path}'; did you mean '{known}'? (a knob of another kernel build is carried from a dump of its tree, `grep -r . /sys/kernel/mm/transparent_hugepage`, not from a PATH=VALUE line that misspells a knob of 6.18)")]
    NearMiss { path: String, known: String },
    #[error("{why} (`thplab settings --list` lists them; `none`: no policy)")]
    Policy { why: String },
}

/// The comment line before the carried knobs in a printed settings file: the lines after it
/// are read back as carried, near misses included.
pub const CARRIED_MARKER: &str = "# not known to this model of 6.18: carried, not modelled";

/// The known path that `path` (unknown to the model) misspells, if it is one: the same but for
/// letter case (`hugepages-64KB/enabled`), or one edit away (a letter left out, added, changed,
/// or two neighbours swapped: `enable`, `enabeld`). A well-formed per-size path of another size
/// (`hugepages-4096kB/enabled`, another architecture's) is no misspelling.
pub fn near_miss(path: &str) -> Option<String> {
    if let Some((size, leaf)) = path.strip_prefix("hugepages-").and_then(|r| r.split_once("kB/")) {
        let pow2 = size.parse::<u64>().is_ok_and(|kb| kb >= 8 && kb.is_power_of_two()) && !size.starts_with('0');
        if pow2 && matches!(leaf, "enabled" | "shmem_enabled") {
            return None;
        }
    }
    let lower = path.to_ascii_lowercase();
    let mut best: Option<(usize, String)> = None;
    for known in ThpSettings::valid_paths() {
        let d = if known.to_ascii_lowercase() == lower { 0 } else { osa_distance(path, &known) };
        if d <= 1 && best.as_ref().is_none_or(|(b, _)| d < *b) {
            best = Some((d, known));
        }
    }
    best.map(|(_, k)| k)
}

/// Edit distance with adjacent transpositions (optimal string alignment).
fn osa_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for j in 0..=b.len() {
        d[0][j] = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = (a[i - 1] != b[j - 1]) as usize;
            d[i][j] = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

/// Knobs the kernel exposes read-only; a dump of a live tree contains them and they are skipped.
const READ_ONLY: &[&str] = &["hpage_pmd_size", "khugepaged/pages_collapsed", "khugepaged/full_scans"];

fn bool_value(path: &str, value: &str) -> Result<bool, SettingsError> {
    match value {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(invalid(path, value, "0, 1")),
    }
}

fn invalid(path: &str, value: &str, valid: &str) -> SettingsError {
    SettingsError::InvalidValue { path: path.to_string(), value: value.to_string(), valid: valid.to_string() }
}

fn number(path: &str, value: &str, lo: u32, hi: u32) -> Result<u32, SettingsError> {
    match value.parse::<u32>() {
        Ok(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(invalid(path, value, &format!("an integer from {lo} to {hi}"))),
    }
}

fn words_of(words: &[&str]) -> String {
    words.join(", ")
}

impl ThpSettings {
    /// Every writable knob with its current value, in a stable order that is also a safe write
    /// order for the live tree (per-size knobs before the top-level ones that check them, as
    /// `shmem_enabled=force` requires the per-size inherit set to be exactly PMD; where these
    /// settings clear PMD's inherit under force, force comes first instead, while the inherit set
    /// is still the boot default {PMD}).
    pub fn knobs(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        // `shmem_enabled_store` takes force only while the inherit set is {PMD}: force with PMD's
        // inherit cleared (`thp_shmem=2048K:never transparent_hugepage_shmem=force`, or force
        // written and then `hugepages-2048kB/shmem_enabled=never`) is reached only that way.
        let force_first = self.shmem_enabled == ShmemEnabled::Force && self.shmem_inherit_orders() != Orders::single(Order::PMD);
        if force_first {
            out.push(("shmem_enabled".into(), self.shmem_enabled.word().into()));
        }
        for order in (1..=PMD_ORDER).map(Order) {
            if Orders::ALL_ANON.contains(order) {
                out.push((format!("{}/enabled", order.sysfs_dir()), self.anon[order.0 as usize].word().into()));
            }
            out.push((format!("{}/shmem_enabled", order.sysfs_dir()), self.shmem[order.0 as usize].word().into()));
        }
        out.push(("enabled".into(), self.enabled.word().into()));
        out.push(("defrag".into(), self.defrag.word().into()));
        if !force_first {
            out.push(("shmem_enabled".into(), self.shmem_enabled.word().into()));
        }
        out.push(("use_zero_page".into(), (self.use_zero_page as u8).to_string()));
        out.push(("shrink_underused".into(), (self.shrink_underused as u8).to_string()));
        let k = &self.khugepaged;
        out.push(("khugepaged/defrag".into(), (k.defrag as u8).to_string()));
        out.push(("khugepaged/max_ptes_none".into(), k.max_ptes_none.to_string()));
        out.push(("khugepaged/max_ptes_swap".into(), k.max_ptes_swap.to_string()));
        out.push(("khugepaged/max_ptes_shared".into(), k.max_ptes_shared.to_string()));
        out.push(("khugepaged/pages_to_scan".into(), k.pages_to_scan.to_string()));
        out.push(("khugepaged/scan_sleep_millisecs".into(), k.scan_sleep_millisecs.to_string()));
        out.push(("khugepaged/alloc_sleep_millisecs".into(), k.alloc_sleep_millisecs.to_string()));
        if let Some(b) = self.anon_beside_full {
            out.push(("anon_beside_full".into(), (b as u8).to_string()));
        }
        out
    }

    /// Knobs of some kernel builds that these settings leave at upstream behaviour, with the
    /// value that gives it: a live run writes them where the file exists, so the kernel decides
    /// as upstream 6.18 (and as the model) unless the settings say otherwise.
    pub fn upstream_build_knobs(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if self.anon_beside_full.is_none() {
            out.push(("anon_beside_full".into(), "0".into()));
        }
        out
    }

    /// Every knob with its value: the writable ones this model knows, and the unknown ones it
    /// carries.
    pub fn knob_map(&self) -> BTreeMap<KnobPath, String> {
        let mut m: BTreeMap<KnobPath, String> = self.knobs().into_iter().map(|(p, v)| (p.into(), v)).collect();
        m.extend(self.unknown.iter().map(|(p, v)| (p.into(), v.clone())));
        m
    }

    /// Every writable path, for error messages and `thplab settings --list`.
    pub fn valid_paths() -> Vec<String> {
        let mut all = ThpSettings::default();
        all.anon_beside_full = Some(false);
        all.knobs().into_iter().map(|(p, _)| p).collect()
    }

    /// The values a path accepts, as words for an error or a help text.
    pub fn valid_values(path: &str) -> Option<String> {
        let v = match path {
            "enabled" => words_of(TopEnabled::WORDS),
            "defrag" => words_of(Defrag::WORDS),
            "shmem_enabled" => words_of(ShmemEnabled::WORDS),
            "use_zero_page" | "shrink_underused" | "khugepaged/defrag" | "anon_beside_full" => "0, 1".into(),
            "khugepaged/max_ptes_none" | "khugepaged/max_ptes_swap" | "khugepaged/max_ptes_shared" => {
                "an integer from 0 to 511".into()
            }
            "khugepaged/pages_to_scan" => "an integer from 1 to 4294967295".into(),
            "khugepaged/scan_sleep_millisecs" | "khugepaged/alloc_sleep_millisecs" => {
                "an integer from 0 to 4294967295".into()
            }
            _ => {
                let (order, leaf) = split_size_path(path)?;
                match leaf {
                    "enabled" if Orders::ALL_ANON.contains(order) => words_of(AnonEnabled::WORDS),
                    "shmem_enabled" if Orders::ALL_FILE.contains(order) => words_of(ShmemSizeEnabled::WORDS),
                    _ => return None,
                }
            }
        };
        Some(v)
    }

    /// Set one knob, as `echo VALUE > PATH` would. `PATH` may also be the shorthand
    /// `hugepages-64kB` for `hugepages-64kB/enabled`, and may carry the sysfs prefix.
    pub fn set(&mut self, path: &str, value: &str) -> Result<(), SettingsError> {
        let path = normalize_path(path);
        let path = path.as_str();
        let value = value.trim();
        if READ_ONLY.contains(&path) {
            return Err(SettingsError::ReadOnly { path: path.into() });
        }
        let bad = || invalid(path, value, &ThpSettings::valid_values(path).unwrap_or_default());
        let k = &mut self.khugepaged;
        match path {
            "kernel" => {
                self.kernel = crate::version::KernelVersion::parse(value)
                    .map_err(|_| invalid(path, value, "6.18 (the default, this machine's), 7.2 (model-only)"))?
            }
            "policy" if value == "none" => self.policy = None,
            "policy" => {
                let p = crate::version::Policy::parse(value).map_err(|why| SettingsError::Policy { why })?;
                self.policy = Some(p);
            }
            "enabled" => self.enabled = TopEnabled::parse(value).ok_or_else(bad)?,
            "defrag" => self.defrag = Defrag::parse(value).ok_or_else(bad)?,
            "shmem_enabled" => {
                let v = ShmemEnabled::parse(value).ok_or_else(bad)?;
                // shmem_enabled_store → shmem_parse_huge: force needs inherit == {PMD}.
                if v == ShmemEnabled::Force && self.shmem_inherit_orders() != Orders::single(Order::PMD) {
                    return Err(invalid(
                        path,
                        value,
                        "always, within_size, advise, never, deny (force is refused unless the only \
                         size set to inherit is hugepages-2048kB/shmem_enabled)",
                    ));
                }
                self.shmem_enabled = v;
            }
            "use_zero_page" => self.use_zero_page = bool_value(path, value)?,
            "shrink_underused" => self.shrink_underused = bool_value(path, value)?,
            "anon_beside_full" => self.anon_beside_full = Some(bool_value(path, value)?),
            "khugepaged/defrag" => k.defrag = bool_value(path, value)?,
            "khugepaged/max_ptes_none" => k.max_ptes_none = number(path, value, 0, 511)?,
            "khugepaged/max_ptes_swap" => k.max_ptes_swap = number(path, value, 0, 511)?,
            "khugepaged/max_ptes_shared" => k.max_ptes_shared = number(path, value, 0, 511)?,
            "khugepaged/pages_to_scan" => k.pages_to_scan = number(path, value, 1, u32::MAX)?,
            "khugepaged/scan_sleep_millisecs" => k.scan_sleep_millisecs = number(path, value, 0, u32::MAX)?,
            "khugepaged/alloc_sleep_millisecs" => k.alloc_sleep_millisecs = number(path, value, 0, u32::MAX)?,
            _ => {
                let unknown = || SettingsError::UnknownPath { path: path.into(), valid: valid_paths_text() };
                let (order, leaf) = split_size_path(path).ok_or_else(unknown)?;
                match leaf {
                    "enabled" if Orders::ALL_ANON.contains(order) => {
                        self.anon[order.0 as usize] = AnonEnabled::parse(value).ok_or_else(bad)?
                    }
                    "shmem_enabled" if Orders::ALL_FILE.contains(order) => {
                        let v = ShmemSizeEnabled::parse(value).ok_or_else(bad)?;
                        // thpsize_shmem_enabled_store refuses to leave inherit while top is force.
                        self.shmem[order.0 as usize] = v;
                    }
                    _ => return Err(unknown()),
                }
            }
        }
        Ok(())
    }

    /// Apply `PATH=VALUE`.
    pub fn apply_assignment(&mut self, text: &str) -> Result<(), SettingsError> {
        let (path, value) =
            text.split_once('=').ok_or_else(|| SettingsError::NotAnAssignment { text: text.into() })?;
        self.set(path.trim(), value)
    }

    /// Apply a settings file: one `PATH=VALUE` per line, `#` comments, or the output of
    /// `grep -r . /sys/kernel/mm/transparent_hugepage` (`PATH:always [madvise] never`), whose
    /// read-only files and `stats/` are skipped; a UTF-8 byte-order mark at its start is skipped.
    /// A path this model does not know is carried in `unknown` (a kernel build may have knobs
    /// upstream 6.18 lacks), except on a `PATH=VALUE` line (written by hand) where it is a near
    /// miss of a known path ([`near_miss`]: a typo, not another build's knob), which is an
    /// error naming the known path. Lines after [`CARRIED_MARKER`] (as `Display` prints carried
    /// knobs) are carried as they are. A known path with a bad value is an error. Errors carry
    /// the file name and line.
    pub fn apply_file(&mut self, file_name: &str, text: &str) -> Result<(), SettingsError> {
        self.apply_lines(file_name, text, true)
    }

    /// [`ThpSettings::apply_file`] for the knobs read from a THP sysfs tree (a live machine's, or a copy):
    /// every path this model does not know is carried, near misses included (a tree holds no
    /// typos).
    pub fn apply_tree(&mut self, file_name: &str, text: &str) -> Result<(), SettingsError> {
        self.apply_lines(file_name, text, false)
    }

    fn apply_lines(&mut self, file_name: &str, text: &str, by_hand: bool) -> Result<(), SettingsError> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut carried = false;
        for (idx, raw) in text.lines().enumerate() {
            carried |= raw.trim() == CARRIED_MARKER;
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let at = |error| SettingsError::AtLine { file: file_name.into(), line: idx + 1, error: Box::new(error) };
            let (path, value) = parse_settings_line(line).map_err(at)?;
            let path = normalize_path(&path);
            if READ_ONLY.contains(&path.as_str()) || path.contains("/stats/") {
                continue;
            }
            // `PATH:VALUE` is a `grep -r` dump of a live tree: no typos there.
            let dump_line = line.find(':').is_some_and(|c| line.find('=').is_none_or(|e| c < e));
            match self.set(&path, &value) {
                Err(SettingsError::UnknownPath { .. }) if is_knob_path(&path) => {
                    if let Some(known) = near_miss(&path).filter(|_| by_hand && !carried && !dump_line) {
                        return Err(at(SettingsError::NearMiss { path, known }));
                    }
                    self.unknown.insert(path, value);
                }
                r => r.map_err(at)?,
            }
        }
        Ok(())
    }

    /// A warning naming the knobs this model carries but does not know, if any.
    pub fn unknown_warning(&self) -> Option<String> {
        (!self.unknown.is_empty()).then(|| {
            let list: Vec<String> = self.unknown.iter().map(|(p, v)| format!("{p}={v}")).collect();
            format!("knobs this model of Linux 6.18 does not know, carried but not modelled: {}", list.join(" "))
        })
    }

    /// Apply kernel command-line options: `transparent_hugepage=`, `thp_anon=`,
    /// `transparent_hugepage_shmem=`, `thp_shmem=`. Other words (a pasted /proc/cmdline) are
    /// ignored. Unlike the kernel, which warns and boots on, a bad value here is an error.
    pub fn apply_cmdline(&mut self, cmdline: &str) -> Result<(), SettingsError> {
        let mut anon_configured = false;
        let mut shmem_configured = false;
        for word in cmdline.split_whitespace() {
            let Some((key, value)) = word.split_once('=') else { continue };
            let err = |why: String| SettingsError::Cmdline { option: word.into(), why };
            match key {
                "transparent_hugepage" => {
                    self.enabled =
                        TopEnabled::parse(value).ok_or_else(|| err("valid values are always, madvise, never".into()))?
                }
                "transparent_hugepage_shmem" => {
                    self.shmem_enabled = ShmemEnabled::parse(value)
                        .ok_or_else(|| err(format!("valid values are {}", words_of(ShmemEnabled::WORDS))))?
                }
                "thp_anon" => {
                    // setup_thp_anon starts from empty masks: the PMD-inherit default is only
                    // applied by hugepage_init_sysfs when thp_anon= was not given.
                    if !anon_configured {
                        self.anon = [AnonEnabled::Never; PMD_ORDER as usize + 1];
                        anon_configured = true;
                    }
                    for (orders, policy) in parse_size_policy_list(value, Orders::ALL_ANON).map_err(err)? {
                        let p = AnonEnabled::parse(&policy).ok_or_else(|| {
                            err(format!("invalid policy '{policy}'; valid: {}", words_of(AnonEnabled::WORDS)))
                        })?;
                        for o in orders.iter_desc() {
                            self.anon[o.0 as usize] = p;
                        }
                    }
                }
                "thp_shmem" => {
                    if !shmem_configured {
                        self.shmem = [ShmemSizeEnabled::Never; PMD_ORDER as usize + 1];
                        shmem_configured = true;
                    }
                    for (orders, policy) in parse_size_policy_list(value, Orders::ALL_FILE).map_err(err)? {
                        let p = ShmemSizeEnabled::parse(&policy).ok_or_else(|| {
                            err(format!("invalid policy '{policy}'; valid: {}", words_of(ShmemSizeEnabled::WORDS)))
                        })?;
                        for o in orders.iter_desc() {
                            self.shmem[o.0 as usize] = p;
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// huge_anon_orders_always / _madvise / _inherit.
    pub fn anon_orders(&self, which: AnonEnabled) -> Orders {
        let mut o = Orders::NONE;
        for order in Orders::ALL_ANON.iter_desc() {
            if self.anon[order.0 as usize] == which {
                o = o.with(order);
            }
        }
        o
    }

    /// huge_shmem_orders_{always,inherit,within_size,madvise}.
    pub fn shmem_orders(&self, which: ShmemSizeEnabled) -> Orders {
        let mut o = Orders::NONE;
        for order in Orders::ALL_FILE.iter_desc() {
            if self.shmem[order.0 as usize] == which {
                o = o.with(order);
            }
        }
        o
    }

    pub fn shmem_inherit_orders(&self) -> Orders {
        self.shmem_orders(ShmemSizeEnabled::Inherit)
    }

    /// A one-line summary, for table headers: only what differs from the boot defaults.
    pub fn summary(&self) -> String {
        let defaults = ThpSettings::default().knob_map();
        let diffs: Vec<String> = self
            .knobs()
            .into_iter()
            .filter(|(p, v)| defaults.get(p.as_str()) != Some(v))
            .map(|(p, v)| format!("{p}={v}"))
            .collect();
        if diffs.is_empty() {
            "boot defaults".into()
        } else {
            diffs.join(" ")
        }
    }
}

impl fmt::Display for ThpSettings {
    /// One `PATH=VALUE` per line: the settings-file format, so the output can be read back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (p, v) in self.knobs() {
            writeln!(f, "{p}={v}")?;
        }
        if self.kernel != crate::version::KernelVersion::V6_18 {
            writeln!(f, "kernel={}", self.kernel)?;
        }
        if let Some(p) = self.policy {
            writeln!(f, "policy={p}")?;
        }
        if !self.unknown.is_empty() {
            writeln!(f, "{CARRIED_MARKER}")?;
            for (p, v) in &self.unknown {
                writeln!(f, "{p}={v}")?;
            }
        }
        Ok(())
    }
}

fn valid_paths_text() -> String {
    let mut v = ThpSettings::valid_paths();
    v.extend(crate::version::list_entries().into_iter().map(|(p, _)| p));
    v.sort();
    v.join(", ")
}

/// Strip the sysfs prefix or a leading `./`, and expand the `hugepages-64kB` shorthand.
fn normalize_path(path: &str) -> String {
    let p = path.trim();
    let p = p.strip_prefix(SYSFS_THP).unwrap_or(p);
    let p = p.trim_start_matches("./").trim_start_matches('/');
    if p.starts_with("hugepages-") && !p.contains('/') {
        return format!("{p}/enabled");
    }
    p.to_string()
}

/// A path that could name a sysfs file: words of `[A-Za-z0-9_-]` separated by `/`.
fn is_knob_path(path: &str) -> bool {
    !path.is_empty()
        && path.split('/').all(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'))
}

fn split_size_path(path: &str) -> Option<(Order, &str)> {
    let rest = path.strip_prefix("hugepages-")?;
    let (size, leaf) = rest.split_once("kB/")?;
    let order = Order::from_size_kb(size.parse().ok()?)?;
    Some((order, leaf))
}

/// One line of a settings file or a sysfs dump → (path, selected value).
fn parse_settings_line(line: &str) -> Result<(String, String), SettingsError> {
    let eq = line.find('=');
    let colon = line.find(':');
    match (eq, colon) {
        (Some(e), c) if c.is_none_or(|c| e < c) => {
            Ok((line[..e].trim().to_string(), line[e + 1..].trim().to_string()))
        }
        (_, Some(c)) => {
            let (path, content) = (line[..c].trim(), line[c + 1..].trim());
            // sysfs marks exactly one choice: `always [madvise] never`.
            if content.matches('[').count() > 1 {
                return Err(SettingsError::InvalidValue {
                    path: path.to_string(),
                    value: content.to_string(),
                    valid: "one choice in brackets, as sysfs prints it (always [madvise] never)".into(),
                });
            }
            let value = match (content.find('['), content.find(']')) {
                (Some(a), Some(b)) if a < b => &content[a + 1..b],
                _ => content,
            };
            Ok((path.to_string(), value.to_string()))
        }
        _ => Err(SettingsError::NotAnAssignment { text: line.into() }),
    }
}

/// The kernel command-line options of 6.18 that set THP knobs (`__setup` in mm/huge_memory.c
/// and mm/shmem.c); `transparent_hugepage_tmpfs=` (the default `huge=` of tmpfs mounts) is read
/// but not a sysfs knob.
pub const CMDLINE_OPTIONS: [&str; 5] = ["transparent_hugepage", "transparent_hugepage_shmem", "transparent_hugepage_tmpfs", "thp_anon", "thp_shmem"];

/// Words of a kernel command line that look meant for THP but that the kernel would not apply:
/// a near miss of an option's name (`transparent_hugepages=always`), an option without `=`, and
/// `transparent_hugepage_tmpfs=`, which thplab does not model. The kernel ignores unknown
/// parameters (it hands them to init), so these are warnings that name the valid options, and
/// the settings are what the kernel would make of the line.
pub fn cmdline_warnings(cmdline: &str) -> Vec<String> {
    let valid = CMDLINE_OPTIONS.iter().map(|o| format!("{o}=")).collect::<Vec<_>>().join(", ");
    let mut out = Vec::new();
    for word in cmdline.split_whitespace() {
        let (key, has_value) = match word.split_once('=') {
            Some((k, _)) => (k, true),
            None => (word, false),
        };
        if CMDLINE_OPTIONS.contains(&key) {
            if !has_value {
                out.push(format!("'{word}' has no '=VALUE' and is ignored (the kernel's option is {key}=)"));
            } else if key == "transparent_hugepage_tmpfs" {
                out.push(format!("'{word}' (the default huge= of tmpfs mounts) is not modelled and is ignored; give huge= on the workload's tmpfs statement"));
            }
            continue;
        }
        let lower = key.to_ascii_lowercase();
        let closest = CMDLINE_OPTIONS.iter().map(|o| (edit_distance(&lower, o), *o)).min().expect("options");
        if closest.0 <= 2 || lower.starts_with("transparent_huge") || lower.starts_with("thp_") || lower.starts_with("thp-") {
            out.push(format!(
                "'{word}' is not a THP option and is ignored, as the kernel ignores unknown parameters; did you mean {}=? The THP options are {valid}",
                closest.1
            ));
        }
    }
    out
}

/// Levenshtein distance (for near misses of option names).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + (ca != *cb) as usize).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// `16K-64K,2M:always;128K:inherit` → [(orders, policy)], as `setup_thp_anon` parses it.
fn parse_size_policy_list(text: &str, supported: Orders) -> Result<Vec<(Orders, String)>, String> {
    let mut out = Vec::new();
    for token in text.split(';') {
        let (range, policy) = token.split_once(':').ok_or_else(|| format!("'{token}' has no ':POLICY'"))?;
        let mut orders = Orders::NONE;
        for sub in range.split(',') {
            let (a, b) = sub.split_once('-').unwrap_or((sub, sub));
            let oa = order_from_str(a, supported)?;
            let ob = order_from_str(b, supported)?;
            if oa > ob {
                return Err(format!("range '{sub}' runs backwards"));
            }
            for o in oa.0..=ob.0 {
                orders = orders.with(Order(o));
            }
        }
        out.push((orders, policy.to_string()));
    }
    Ok(out)
}

fn order_from_str(size: &str, supported: Orders) -> Result<Order, String> {
    let valid = || {
        let v: Vec<String> = supported.iter_desc().collect::<Vec<_>>().into_iter().rev().map(|o| {
            let kb = o.size_kb();
            if kb >= 1024 { format!("{}M", kb / 1024) } else { format!("{kb}K") }
        }).collect();
        format!("invalid size '{size}'; valid sizes are {}", v.join(", "))
    };
    let bytes = parse_size(size).ok_or_else(valid)?;
    let order = Order::from_size_kb(bytes / 1024).filter(|_| bytes % 4096 == 0).ok_or_else(valid)?;
    if supported.contains(order) {
        Ok(order)
    } else {
        Err(valid())
    }
}

#[cfg(test)]
mod tests;
