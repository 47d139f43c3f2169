//! The search space of `thplab advise`: which THP settings and per-process choices are
//! predicted. A space is a TOML file ([`DEFAULT_SPACE`] is the built-in one, docs/advise.md):
//!
//! - `[product]`: every combination of `sizes` (which anonymous folio sizes are enabled: `never`,
//!   `16K`, `64K+PMD`, `PMD`, `all`, any `+`-joined list of 16K..1M and `PMD`), `mode` (what those
//!   sizes are set to: `always` or `madvise`; the PMD size through the top-level `enabled`, which
//!   `hugepages-2048kB/enabled=inherit` follows, as at boot) and `process` (per-process choices:
//!   `none`, `thp_disable` = prctl(PR_SET_THP_DISABLE, 1, 0), `thp_disable_except_advised` =
//!   prctl(PR_SET_THP_DISABLE, 1, PR_THP_DISABLE_EXCEPT_ADVISED), `madv_hugepage` = the program's
//!   anonymous mappings madvised MADV_HUGEPAGE, as glibc's malloc does with
//!   GLIBC_TUNABLES=glibc.malloc.hugetlb=1).
//! - `[refine]`: each value of `defrag`, `shmem_enabled`, `khugepaged`
//!   (`PAGES_TO_SCAN/SCAN_SLEEP_MILLISECS`) and `max_ptes_none`, alone, on the `top` fastest
//!   points of the product.
//!
//! The knobs are those of Documentation/admin-guide/mm/transhuge.rst (6.18) as
//! `thp_abi::ThpSettings` applies them (mm/huge_memory.c: `enabled_store`,
//! `anon_enabled_store`, `defrag_store`, `shmem_enabled_store`; mm/khugepaged.c:
//! `pages_to_scan_store`, `scan_sleep_millisecs_store`, `max_ptes_none_store`); the prctl forms
//! are kernel/sys.c: `prctl_set_thp_disable`. Errors name the file, the line and what is valid.

use anyhow::{anyhow, bail, Result};
use serde::Deserialize;
use thp_abi::ThpSettings;
use toml::Spanned;

/// The built-in space (docs/advise.md shows it): 6 size sets × 2 modes (one `never`) × 4
/// process choices = 44 points, then 11 refinements on each of the 3 fastest.
pub const DEFAULT_SPACE: &str = r#"[product]
sizes = ["never", "16K", "64K", "64K+PMD", "PMD", "all"]
mode = ["always", "madvise"]
process = ["none", "thp_disable", "thp_disable_except_advised", "madv_hugepage"]

[refine]
top = 3
defrag = ["always", "defer", "defer+madvise", "never"]
shmem_enabled = ["always", "within_size", "advise"]
khugepaged = ["512/60000", "65536/1000"]
max_ptes_none = [0, 255]
"#;

/// A per-process choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Process {
    None,
    ThpDisable,
    ThpDisableExceptAdvised,
    MadvHugepage,
}

impl Process {
    pub const WORDS: &'static [&'static str] = &["none", "thp_disable", "thp_disable_except_advised", "madv_hugepage"];

    pub fn parse(s: &str) -> Option<Process> {
        Some(match s {
            "none" => Process::None,
            "thp_disable" => Process::ThpDisable,
            "thp_disable_except_advised" => Process::ThpDisableExceptAdvised,
            "madv_hugepage" => Process::MadvHugepage,
            _ => return None,
        })
    }

    /// How it is written in a label (empty for none).
    pub fn label(self) -> &'static str {
        match self {
            Process::None => "",
            Process::ThpDisable => "prctl(PR_SET_THP_DISABLE)",
            Process::ThpDisableExceptAdvised => "prctl(PR_THP_DISABLE_EXCEPT_ADVISED)",
            Process::MadvHugepage => "MADV_HUGEPAGE (glibc.malloc.hugetlb=1)",
        }
    }
}

/// One point of the space: system settings and a per-process choice.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Choice {
    /// `64K+PMD always`, `never`, `PMD madvise, defrag=never`, with the process choice.
    pub label: String,
    #[serde(skip)]
    pub settings: ThpSettings,
    pub process: Process,
}

impl Choice {
    /// The knobs that differ from the 6.18 boot defaults, as `PATH=VALUE`.
    pub fn changes(&self) -> Vec<(String, String)> {
        let defaults = ThpSettings::default().knob_map();
        self.settings.knobs().into_iter().filter(|(p, v)| defaults.get(p.as_str()) != Some(v)).collect()
    }

    /// Changes from the defaults, the process choice counted as one: the simpler choice wins a tie.
    pub fn weight(&self) -> usize {
        self.changes().len() + (self.process != Process::None) as usize
    }

    /// The defaults with no process choice.
    pub fn is_default(&self) -> bool {
        self.process == Process::None && self.settings == ThpSettings::default()
    }
}

/// A checked space.
#[derive(Clone, Debug)]
pub struct Space {
    /// The product, in order (sizes outermost, then mode, then process).
    pub product: Vec<Choice>,
    /// How many of the fastest product points are refined.
    pub top: usize,
    /// Each refinement: its label (`defrag=never`) and its assignments.
    pub refine: Vec<(String, Vec<String>)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    product: Option<RawProduct>,
    refine: Option<RawRefine>,
}

type Words = Option<Vec<Spanned<String>>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProduct {
    sizes: Words,
    mode: Words,
    process: Words,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRefine {
    top: Option<Spanned<i64>>,
    defrag: Words,
    shmem_enabled: Words,
    khugepaged: Words,
    max_ptes_none: Option<Vec<Spanned<i64>>>,
}

/// Where an error is: `space FILE line N`.
struct At<'a> {
    file: &'a str,
    text: &'a str,
}

impl At<'_> {
    fn err<T>(&self, v: &Spanned<T>, msg: impl std::fmt::Display) -> anyhow::Error {
        let line = self.text[..v.span().start.min(self.text.len())].bytes().filter(|&b| b == b'\n').count() + 1;
        anyhow!("space {} line {line}: {msg}", self.file)
    }
}

/// The anonymous folio sizes that have a `hugepages-<size>kB/enabled` knob, in kB, smallest
/// first (x86-64: orders 2 to 9; the PMD size last).
pub fn anon_sizes_kb() -> Vec<u64> {
    let mut v: Vec<u64> = mm_types::Orders::ALL_ANON.iter_desc().map(|o| 4u64 << o.0).collect();
    v.sort_unstable();
    v
}

const PMD_KB: u64 = 2048;

/// A size set: `never`, `all`, or `+`-joined sizes (`16K`, `64K`, `1M`, `PMD`), in kB.
pub fn parse_sizes(s: &str) -> Result<Vec<u64>, String> {
    let valid = || format!("valid: never, all, or sizes joined by + among {} and PMD (such as 64K+PMD)", anon_sizes_kb().iter().filter(|&&k| k != PMD_KB).map(|k| human_kb(*k)).collect::<Vec<_>>().join(", "));
    match s {
        "never" => return Ok(vec![]),
        "all" => return Ok(anon_sizes_kb()),
        _ => {}
    }
    let mut out = Vec::new();
    for w in s.split('+') {
        let kb = match w.trim() {
            "PMD" | "2M" | "2048K" => PMD_KB,
            t => match t.strip_suffix('K').and_then(|n| n.parse::<u64>().ok()).or_else(|| t.strip_suffix('M').and_then(|n| n.parse::<u64>().ok()).map(|m| m * 1024)) {
                Some(kb) if anon_sizes_kb().contains(&kb) => kb,
                _ => return Err(format!("sizes '{s}': '{t}' is no anonymous mTHP size; {}", valid())),
            },
        };
        if out.contains(&kb) {
            return Err(format!("sizes '{s}' names {} twice", human_kb(kb)));
        }
        out.push(kb);
    }
    out.sort_unstable();
    Ok(out)
}

fn human_kb(kb: u64) -> String {
    if kb >= 1024 {
        format!("{}M", kb / 1024)
    } else {
        format!("{kb}K")
    }
}

/// The assignments of a size set under a mode (`always` or `madvise`): the sizes below the
/// PMD size get the mode, the PMD size inherits the top-level `enabled`, set to the mode; a
/// PMD size left out is `never`. `never` alone: the top-level `enabled=never` (nothing
/// inherits, no size is set).
pub fn size_assignments(sizes: &[u64], mode: &str) -> Vec<String> {
    if sizes.is_empty() {
        return vec!["enabled=never".into()];
    }
    let mut out = Vec::new();
    for &kb in sizes.iter().filter(|&&k| k != PMD_KB) {
        out.push(format!("hugepages-{kb}kB/enabled={mode}"));
    }
    if sizes.contains(&PMD_KB) {
        out.push(format!("enabled={mode}"));
    } else {
        out.push(format!("hugepages-{PMD_KB}kB/enabled=never"));
    }
    out
}

fn label_of(sizes: &str, mode: Option<&str>, process: Process) -> String {
    let mut l = match mode {
        Some(m) => format!("{sizes} {m}"),
        None => sizes.to_string(),
    };
    if process != Process::None {
        l += &format!(" + {}", process.label());
    }
    l
}

/// The built-in space.
pub fn default_space() -> Space {
    parse("(built-in)", DEFAULT_SPACE).expect("the built-in space parses")
}

/// Check a space's `text` (read from `file`).
pub fn parse(file: &str, text: &str) -> Result<Space> {
    let at = At { file, text };
    let raw: Raw = toml::from_str(text).map_err(|e| anyhow!("space {file}: {}", e.to_string().trim_end()))?;
    let Some(p) = raw.product else { bail!("space {file}: no [product] table: give sizes = [...], mode = [...] and process = [...]") };
    let one = |w: &Words, default: &str| w.clone().unwrap_or_else(|| vec![Spanned::new(0..0, default.to_string())]);
    let mut product = Vec::new();
    for s in one(&p.sizes, "PMD") {
        let sizes = parse_sizes(s.get_ref()).map_err(|e| at.err(&s, e))?;
        for m in one(&p.mode, "madvise") {
            if !matches!(m.get_ref().as_str(), "always" | "madvise") {
                return Err(at.err(&m, format!("mode '{}': valid: always, madvise", m.get_ref())));
            }
            for pr in one(&p.process, "none") {
                let process = Process::parse(pr.get_ref()).ok_or_else(|| at.err(&pr, format!("process '{}': valid: {}", pr.get_ref(), Process::WORDS.join(", "))))?;
                let mode = (!sizes.is_empty()).then_some(m.get_ref().as_str());
                let label = label_of(s.get_ref(), mode, process);
                if product.iter().any(|c: &Choice| c.label == label) {
                    if sizes.is_empty() {
                        continue; // `never` is the same under every mode
                    }
                    return Err(at.err(&s, format!("'{label}' is named twice")));
                }
                let mut settings = ThpSettings::default();
                for a in size_assignments(&sizes, m.get_ref()) {
                    settings.apply_assignment(&a).map_err(|e| at.err(&s, e))?;
                }
                product.push(Choice { label, settings, process });
            }
        }
    }
    let (top, refine) = match raw.refine {
        Some(r) => refinements(&at, r)?,
        None => (0, Vec::new()),
    };
    Ok(Space { product, top, refine })
}

fn refinements(at: &At, r: RawRefine) -> Result<(usize, Vec<(String, Vec<String>)>)> {
    let top = match &r.top {
        Some(t) if !(0..=1000).contains(t.get_ref()) => return Err(at.err(t, "top: give 0 to 1000 (how many of the fastest points of the product are refined)")),
        Some(t) => *t.get_ref() as usize,
        None => 3,
    };
    let mut out = Vec::new();
    let mut knob = |name: &str, words: &Words| -> Result<()> {
        for w in words.iter().flatten() {
            let a = format!("{name}={}", w.get_ref());
            ThpSettings::default().apply_assignment(&a).map_err(|e| at.err(w, e))?;
            out.push((a.clone(), vec![a]));
        }
        Ok(())
    };
    knob("defrag", &r.defrag)?;
    knob("shmem_enabled", &r.shmem_enabled)?;
    for w in r.khugepaged.iter().flatten() {
        let bad = || at.err(w, format!("khugepaged '{}': give PAGES_TO_SCAN/SCAN_SLEEP_MILLISECS, such as 4096/10000 (the defaults)", w.get_ref()));
        let (p, s) = w.get_ref().split_once('/').ok_or_else(bad)?;
        let a = vec![format!("khugepaged/pages_to_scan={}", p.trim()), format!("khugepaged/scan_sleep_millisecs={}", s.trim())];
        for x in &a {
            ThpSettings::default().apply_assignment(x).map_err(|e| at.err(w, e))?;
        }
        out.push((format!("khugepaged {}", w.get_ref()), a));
    }
    for n in r.max_ptes_none.iter().flatten() {
        if !(0..=511).contains(n.get_ref()) {
            return Err(at.err(n, format!("max_ptes_none {}: valid: 0 to 511 (HPAGE_PMD_NR - 1)", n.get_ref())));
        }
        let a = format!("khugepaged/max_ptes_none={}", n.get_ref());
        out.push((format!("max_ptes_none={}", n.get_ref()), vec![a]));
    }
    Ok((top, out))
}

/// `base` with a refinement applied (None when it changes nothing).
pub fn refined(base: &Choice, (label, assignments): &(String, Vec<String>)) -> Option<Choice> {
    let mut s = base.settings.clone();
    for a in assignments {
        s.apply_assignment(a).expect("checked when the space was parsed");
    }
    (s != base.settings).then(|| Choice { label: format!("{}, {label}", base.label), settings: s, process: base.process })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_space_has_44_product_points_and_11_refinements() {
        let s = default_space();
        // 6 size sets × 2 modes, `never` once: 11; × 4 process choices.
        assert_eq!(s.product.len(), 44);
        assert_eq!(s.refine.len(), 4 + 3 + 2 + 2);
        assert_eq!(s.top, 3);
        let labels: Vec<&str> = s.product.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(&labels[..6], ["never", "never + prctl(PR_SET_THP_DISABLE)", "never + prctl(PR_THP_DISABLE_EXCEPT_ADVISED)", "never + MADV_HUGEPAGE (glibc.malloc.hugetlb=1)", "16K always", "16K always + prctl(PR_SET_THP_DISABLE)"]);
        // `PMD madvise` with no process choice is the boot default.
        let d: Vec<&Choice> = s.product.iter().filter(|c| c.is_default()).collect();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].label, "PMD madvise");
    }

    #[test]
    fn size_sets_become_the_per_size_knobs() {
        assert_eq!(size_assignments(&parse_sizes("64K+PMD").unwrap(), "always"), ["hugepages-64kB/enabled=always", "enabled=always"]);
        assert_eq!(size_assignments(&parse_sizes("16K").unwrap(), "madvise"), ["hugepages-16kB/enabled=madvise", "hugepages-2048kB/enabled=never"]);
        assert_eq!(size_assignments(&[], "always"), ["enabled=never"]);
        assert_eq!(parse_sizes("all").unwrap(), [16, 32, 64, 128, 256, 512, 1024, 2048]);
        assert_eq!(parse_sizes("1M+16K").unwrap(), [16, 1024]);
    }

    fn err(text: &str) -> String {
        parse("s.toml", text).err().expect("an error").to_string()
    }

    #[test]
    fn errors_name_the_file_the_line_and_what_is_valid() {
        assert_eq!(err("[product]\nsizes = [\"PMD\", \"8K\"]\n"), "space s.toml line 2: sizes '8K': '8K' is no anonymous mTHP size; valid: never, all, or sizes joined by + among 16K, 32K, 64K, 128K, 256K, 512K, 1M and PMD (such as 64K+PMD)");
        assert_eq!(err("[product]\nsizes = [\"PMD\"]\nmode = [\"inherit\"]\n"), "space s.toml line 3: mode 'inherit': valid: always, madvise");
        assert_eq!(err("[product]\n\n\nprocess = [\"nohuge\"]\n"), "space s.toml line 4: process 'nohuge': valid: none, thp_disable, thp_disable_except_advised, madv_hugepage");
        assert_eq!(err("[product]\n[refine]\ndefrag = [\"sometimes\"]\n"), "space s.toml line 3: invalid value 'sometimes' for 'defrag'; valid values are: always, defer, defer+madvise, madvise, never");
        assert_eq!(err("[product]\n[refine]\nkhugepaged = [\"fast\"]\n"), "space s.toml line 3: khugepaged 'fast': give PAGES_TO_SCAN/SCAN_SLEEP_MILLISECS, such as 4096/10000 (the defaults)");
        assert_eq!(err("[product]\n[refine]\nmax_ptes_none = [512]\n"), "space s.toml line 3: max_ptes_none 512: valid: 0 to 511 (HPAGE_PMD_NR - 1)");
        assert_eq!(err("[refine]\ntop = 2\n"), "space s.toml: no [product] table: give sizes = [...], mode = [...] and process = [...]");
        assert!(err("[product]\nsize = [\"PMD\"]\n").starts_with("space s.toml: TOML parse error at line 2, column 1"), "{}", err("[product]\nsize = [\"PMD\"]\n"));
        assert_eq!(err("[product]\nsizes = [\"64K\", \"64K\"]\n"), "space s.toml line 2: '64K madvise' is named twice");
    }

    #[test]
    fn a_refinement_that_changes_nothing_is_no_point() {
        let s = parse("s.toml", "[product]\nsizes = [\"PMD\"]\n[refine]\ndefrag = [\"madvise\", \"never\"]\n").unwrap();
        let base = &s.product[0];
        assert!(refined(base, &s.refine[0]).is_none());
        let r = refined(base, &s.refine[1]).unwrap();
        assert_eq!(r.label, "PMD madvise, defrag=never");
        assert_eq!(r.changes(), [("defrag".to_string(), "never".to_string())]);
    }
}
