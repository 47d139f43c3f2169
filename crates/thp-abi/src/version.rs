//! Which kernel the model is, and which proposal (a posted series not in any release) it runs
//! on top: `--kernel 6.18|7.2` and `--policy NAME[:PARAM=VALUE,...]`, also `kernel = 7.2` /
//! `policy = mthp-collapse-v18:scaled=1` lines in a settings file. Closed sets with their
//! sources, for `thplab settings --list` and docs/policies.md.
//!
//! 6.18 is the default and what the live kernel of this machine runs: every other choice is
//! model-only (compare marks its rows so).
//!
//! Sources: 7.2's khugepaged mTHP collapse is Nico Pache's series "khugepaged: mTHP support" as
//! merged (v19, `[PATCH mm-unstable v19 11/14] mm/khugepaged: Introduce mTHP collapse support`,
//! 2026-06-05, linux-mm; mm/khugepaged.c: `collapse_scan_pmd`, `mthp_collapse`,
//! `max_order_from_offset`, `collapse_max_ptes_none`); v18 (2026-05-22) is the stack recursion
//! kept as a policy. No 7.2 tree was reachable from here: the postings are the source.

use std::fmt;

/// A kernel release the model follows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KernelVersion {
    /// Linux 6.18: what this machine runs, and what the live side checks.
    #[default]
    V6_18,
    /// Linux 7.2: 6.18 plus khugepaged mTHP collapse (docs/policies.md lists what else 7.2
    /// changed and what the model takes).
    V7_2,
}

impl KernelVersion {
    pub const ALL: [KernelVersion; 2] = [KernelVersion::V6_18, KernelVersion::V7_2];

    /// As `--kernel` spells it.
    pub fn word(self) -> &'static str {
        match self {
            KernelVersion::V6_18 => "6.18",
            KernelVersion::V7_2 => "7.2",
        }
    }

    /// `6.18` or `7.2` (also `v7.2`, `7.2.0`).
    pub fn parse(text: &str) -> Result<KernelVersion, String> {
        let t = text.trim().trim_start_matches('v');
        let t = t.strip_suffix(".0").unwrap_or(t);
        KernelVersion::ALL
            .into_iter()
            .find(|k| k.word() == t)
            .ok_or_else(|| format!("unknown kernel version '{text}'; valid versions are: 6.18 (the default, this machine's), 7.2 (model-only)"))
    }

    /// What the model of this version adds to 6.18, one line.
    pub fn describe(self) -> &'static str {
        match self {
            KernelVersion::V6_18 => "the model's base and the live kernel of this machine",
            KernelVersion::V7_2 => {
                "6.18 plus khugepaged mTHP collapse as merged (Nico Pache, v19, mm tree June 2026): \
                 forward walk, max_ptes_none 0 or 511 only, per-size collapse_exceed_*_pte stats; model-only"
            }
        }
    }

    /// Whether the live kernel of this machine (6.18) can check results of this version.
    pub fn model_only(self) -> bool {
        self != KernelVersion::V6_18
    }
}

impl fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.word())
    }
}

/// The names of the policies the model knows (a closed set: [`Policy::parse`] lists them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyName {
    /// khugepaged mTHP collapse as posted in v18: the stack recursion over (offset, order).
    MthpCollapseV18,
    /// FHPM (ISCA 2023): a VM host's fine-grained huge page management (`sim::host`).
    Fhpm,
    /// Collapse hints (Luka Bai, May 2026): hot PMD ranges queued for khugepaged by a hint
    /// source (MGLRU aging or DAMON), served before its round-robin scan.
    CollapseHints,
    /// thplab's global hint system (docs/global-hints.md): hotness chooses the fault-time order
    /// and proposes splits of cold PMD folios within a memory budget.
    GlobalHints,
    /// The contiguous page hint for anonymous memory (Bamvor Zhang, LSF/MM 2017).
    ContigHint,
}

/// Where hotness comes from (`source=`): MGLRU's aging walk or DAMON's region sampling.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HintSource {
    /// MGLRU aging (`walk_mm`'s Bloom filter of PMDs with enough young PTEs), triggered from
    /// user space every `period` ms on the memcg (the series' experiment: 2 s).
    #[default]
    Mglru,
    /// DAMON virtual address monitoring (5 ms samples, 100 ms aggregations) with a
    /// DAMOS_COLLAPSE-shaped scheme on its hot regions.
    Damon,
}

impl HintSource {
    pub fn word(self) -> &'static str {
        match self {
            HintSource::Mglru => "mglru",
            HintSource::Damon => "damon",
        }
    }
}

/// The parameters of the collapse-hint and global-hint policies (see their `PolicyParam`s).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HintParams {
    pub source: HintSource,
    /// NR_KHUGEPAGED_PRIORITY_LEVEL.
    pub levels: u8,
    /// Hints one mm may have queued (over all levels); more are dropped.
    pub per_mm: u32,
    /// Pages of `pages_to_scan` a hinted PMD range is charged (512: as a scanned range).
    pub charge: u32,
    /// The source's period in ms: MGLRU's aging trigger, DAMON's aggregation interval.
    pub period_ms: u32,
    /// Global hints: the bytes of PMD folios kept mapped (MiB; 0: no budget, no splits).
    pub budget_mb: u32,
}

impl HintParams {
    pub const DEFAULT: HintParams = HintParams { source: HintSource::Mglru, levels: 2, per_mm: 512, charge: 512, period_ms: 2000, budget_mb: 0 };
}

/// One parameter of a policy: its name, what it does, its values and default.
#[derive(Clone, Copy, Debug)]
pub struct PolicyParam {
    pub name: &'static str,
    pub values: &'static str,
    pub default: &'static str,
    pub doc: &'static str,
}

/// What `settings --list` says of a policy.
#[derive(Clone, Copy, Debug)]
pub struct PolicyInfo {
    pub name: PolicyName,
    pub word: &'static str,
    pub series: &'static str,
    pub version: &'static str,
    pub source: &'static str,
    pub doc: &'static str,
    pub params: &'static [PolicyParam],
}

const V18_PARAMS: &[PolicyParam] = &[PolicyParam {
    name: "scaled",
    values: "0, 1, uncapped",
    default: "0",
    doc: "max_ptes_none below PMD order. 0: v13+'s rule (0 or 511, other values warn and behave as 0); \
          1: v11/v12's min(max_ptes_none, 255) >> (9 - order); uncapped: earlier postings' \
          max_ptes_none >> (9 - order), which creeps to higher orders over successive scans above 256",
}];

/// How the v18 policy scales max_ptes_none below PMD order (`scaled=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Scaling {
    /// v13 onwards: 0 or 511 only (`collapse_max_ptes_none`).
    #[default]
    ZeroOr511,
    /// v11/v12: `min(max_ptes_none, 255) >> (9 - order)`, capped at HPAGE_PMD_NR/2 - 1 against creep.
    Capped,
    /// Earlier postings: `max_ptes_none >> (9 - order)`; above 256 a collapse qualifies the next
    /// order at the next scan ("creep").
    Uncapped,
}

const HINT_PARAMS: &[PolicyParam] = &[
    PolicyParam { name: "source", values: "mglru, damon", default: "mglru", doc: "where hotness comes from: MGLRU aging (walk_mm's Bloom filter) or DAMON region sampling" },
    PolicyParam { name: "levels", values: "1..8", default: "2", doc: "NR_KHUGEPAGED_PRIORITY_LEVEL (the series' diagram shows prio 0 and 1): every young PTE of the PMD gives prio 0, fewer prio 1, the lowest level the rest" },
    PolicyParam { name: "per_mm", values: "1..65536", default: "512", doc: "hints one mm may hold queued; a hint over the limit is dropped (not in the posted text)" },
    PolicyParam { name: "charge", values: "0..512", default: "512", doc: "pages of pages_to_scan a hinted PMD range costs (a vanished VMA costs 1, as a skipped VMA)" },
    PolicyParam { name: "period", values: "10..60000 (ms)", default: "2000", doc: "MGLRU: the user-space aging trigger's period; DAMON: the aggregation interval is 100 ms and hints go out every period" },
];

const GLOBAL_PARAMS: &[PolicyParam] = &[
    PolicyParam { name: "source", values: "mglru, damon", default: "mglru", doc: "where hotness comes from" },
    PolicyParam { name: "period", values: "10..60000 (ms)", default: "2000", doc: "how often hotness is gathered" },
    PolicyParam { name: "budget", values: "0..1048576 (MiB)", default: "0", doc: "PMD folios kept mapped; above it the coldest are split (0: no budget)" },
];
const CONTIG_PARAMS: &[PolicyParam] = &[
    PolicyParam {
        name: "fill",
        values: "1..16",
        default: "2",
        doc: "the fault in a 64 KiB chunk that maps its other pages and sets the contiguous bit \
              (2: the proposal's second fault; n: the n-th)",
    },
    PolicyParam {
        name: "gfp",
        values: "nowait, reclaim",
        default: "nowait",
        doc: "the chunk's allocation: nowait (GFP_NOWAIT, the proposal: free lists only, wakes kswapd) \
              or reclaim (direct reclaim and compaction allowed)",
    },
];

/// The contiguous page hint's chunk allocation (`gfp=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HintGfp {
    /// GFP_NOWAIT: the free lists, kswapd woken, no direct reclaim (the proposal).
    #[default]
    NoWait,
    /// Direct reclaim and compaction allowed (GFP_HIGHUSER_MOVABLE's slow path).
    Reclaim,
}

/// Every policy, with its series, version and source.
pub const POLICIES: &[PolicyInfo] = &[PolicyInfo {
    name: PolicyName::MthpCollapseV18,
    word: "mthp-collapse-v18",
    series: "khugepaged: mTHP support (Nico Pache)",
    version: "v18, 2026-05-22",
    source: "https://lore.kernel.org/linux-mm/?q=khugepaged+mTHP+support+v18",
    doc: "khugepaged mTHP collapse with v18's stack recursion over (offset, order): halves of a \
          failed region are tried at the next order, left first; 7.2 merged v19's forward walk instead",
    params: V18_PARAMS,
}, PolicyInfo {
    name: PolicyName::Fhpm,
    word: "fhpm",
    series: "FHPM: Fine-grained Huge Page Management For Virtualization (Chuandong Li et al.)",
    version: "ISCA 2023",
    source: "https://arxiv.org/abs/2307.10618",
    doc: "a policy of the VM host (sim::host; implies a host of enabled=always where --host gives none): \
          coarse then companion-page monitoring of EPT A/D bits, PSR split and promotion, proactive EPT \
          fill; the guest runs the kernel version's own policy",
    params: FHPM_PARAMS,
}, PolicyInfo {
    name: PolicyName::CollapseHints,
    word: "collapse-hints",
    series: "mm/khugepaged: add collapse hint machanism for khugepaged and use in mglru (Luka Bai)",
    version: "v1, 2026-05-31",
    source: "https://lkml.iu.edu/2605.3/12390.html",
    doc: "hot PMD ranges from a hint source queued per mm in priority queues, served by khugepaged before its \
          round-robin scan, one attempt each (docs/collapse-hints.md)",
    params: HINT_PARAMS,
}, PolicyInfo {
    name: PolicyName::GlobalHints,
    word: "global-hints",
    series: "thplab's own design after the collapse-hint review (the thp=auto direction)",
    version: "thplab",
    source: "docs/global-hints.md",
    doc: "hotness from MGLRU or DAMON chooses the fault-time order (PMD only where hot) and splits the \
          coldest PMD folios above a memory budget; hinted collapses as collapse-hints",
    params: GLOBAL_PARAMS,
}, PolicyInfo {
    name: PolicyName::ContigHint,
    word: "contig-hint",
    series: "contiguous page hint for anonymous memory (Bamvor Zhang, LSF/MM 2017 proposal)",
    version: "2017-01-15",
    source: "https://lore.kernel.org/all/CAFy1USSdqRMJ2X5MNc3OUOEcGVy-_EMdB=qqOdA=fSASR8Oiew@mail.gmail.com/",
    doc: "after THP declined a PTE fault, allocate 64 KiB, split it, map the faulting page; the fill-th \
          fault in the chunk maps the other 15 with the contiguous bit; chunks split on mprotect, mremap, \
          munmap, MADV_DONTNEED, reclaim, migration and COW (docs/contig-hint.md)",
    params: CONTIG_PARAMS,
}];

const FHPM_PARAMS: &[PolicyParam] = &[
    PolicyParam { name: crate::fhpm::PARAMS[0].0, values: crate::fhpm::PARAMS[0].1, default: crate::fhpm::PARAMS[0].2, doc: crate::fhpm::PARAMS[0].3 },
    PolicyParam { name: crate::fhpm::PARAMS[1].0, values: crate::fhpm::PARAMS[1].1, default: crate::fhpm::PARAMS[1].2, doc: crate::fhpm::PARAMS[1].3 },
    PolicyParam { name: crate::fhpm::PARAMS[2].0, values: crate::fhpm::PARAMS[2].1, default: crate::fhpm::PARAMS[2].2, doc: crate::fhpm::PARAMS[2].3 },
    PolicyParam { name: crate::fhpm::PARAMS[3].0, values: crate::fhpm::PARAMS[3].1, default: crate::fhpm::PARAMS[3].2, doc: crate::fhpm::PARAMS[3].3 },
    PolicyParam { name: crate::fhpm::PARAMS[4].0, values: crate::fhpm::PARAMS[4].1, default: crate::fhpm::PARAMS[4].2, doc: crate::fhpm::PARAMS[4].3 },
];

/// A policy with its parameters, as `--policy NAME[:PARAM=VALUE,...]` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    /// See [`PolicyName::MthpCollapseV18`]; `scaled`: the max_ptes_none rule below PMD.
    MthpCollapseV18 { scaled: Scaling },
    /// See [`PolicyName::Fhpm`]: a policy of the VM host, not the guest.
    Fhpm(crate::fhpm::FhpmParams),
    /// See [`PolicyName::CollapseHints`].
    CollapseHints(HintParams),
    /// See [`PolicyName::GlobalHints`].
    GlobalHints(HintParams),
    /// See [`PolicyName::ContigHint`]; `fill`: the fault (1..=16) that completes a chunk.
    ContigHint { fill: u8, gfp: HintGfp },
}

impl Policy {
    pub fn name(self) -> PolicyName {
        match self {
            Policy::MthpCollapseV18 { .. } => PolicyName::MthpCollapseV18,
            Policy::Fhpm(_) => PolicyName::Fhpm,
            Policy::CollapseHints(_) => PolicyName::CollapseHints,
            Policy::GlobalHints(_) => PolicyName::GlobalHints,
            Policy::ContigHint { .. } => PolicyName::ContigHint,
        }
    }

    pub fn info(self) -> &'static PolicyInfo {
        let n = self.name();
        POLICIES.iter().find(|p| p.name == n).expect("every policy is listed")
    }

    /// `NAME[:PARAM=VALUE,...]`; errors name what is valid.
    pub fn parse(text: &str) -> Result<Policy, String> {
        let text = text.trim();
        let (word, params) = text.split_once(':').unwrap_or((text, ""));
        let names: Vec<&str> = POLICIES.iter().map(|p| p.word).collect();
        let info = POLICIES
            .iter()
            .find(|p| p.word == word.trim())
            .ok_or_else(|| format!("unknown policy '{}'; valid policies are: {}", word.trim(), names.join(", ")))?;
        let mut policy = match info.name {
            PolicyName::MthpCollapseV18 => Policy::MthpCollapseV18 { scaled: Scaling::ZeroOr511 },
            PolicyName::Fhpm => Policy::Fhpm(Default::default()),
            PolicyName::CollapseHints => Policy::CollapseHints(HintParams::DEFAULT),
            PolicyName::GlobalHints => Policy::GlobalHints(HintParams::DEFAULT),
            PolicyName::ContigHint => Policy::ContigHint { fill: 2, gfp: HintGfp::NoWait },
        };
        for kv in params.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let valid: Vec<String> = info.params.iter().map(|p| format!("{}={}", p.name, p.values.replace(", ", "|"))).collect();
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("policy {}: '{kv}' is not PARAM=VALUE; valid parameters are: {}", info.word, valid.join(", ")))?;
            match (&mut policy, k.trim(), v.trim()) {
                (Policy::Fhpm(p), k, v) => p.set(k, v)?,
                (Policy::MthpCollapseV18 { scaled }, "scaled", v @ ("0" | "1" | "uncapped")) => {
                    *scaled = match v {
                        "0" => Scaling::ZeroOr511,
                        "1" => Scaling::Capped,
                        _ => Scaling::Uncapped,
                    }
                }
                (Policy::CollapseHints(h) | Policy::GlobalHints(h), k, v) if info.params.iter().any(|p| p.name == k) => {
                    if !set_hint_param(h, k, v) {
                        return Err(format!("policy {}: invalid value '{v}' for {k}; valid values are: {}", info.word, info.params.iter().find(|p| p.name == k).unwrap().values));
                    }
                }
                (Policy::ContigHint { fill, .. }, "fill", v) if v.parse::<u8>().is_ok_and(|n| (1..=16).contains(&n)) => *fill = v.parse().unwrap(),
                (Policy::ContigHint { gfp, .. }, "gfp", v @ ("nowait" | "reclaim")) => {
                    *gfp = if v == "nowait" { HintGfp::NoWait } else { HintGfp::Reclaim }
                }
                (_, k, v) if info.params.iter().any(|p| p.name == k) => {
                    return Err(format!("policy {}: invalid value '{v}' for {k}; valid values are: {}", info.word, info.params.iter().find(|p| p.name == k).unwrap().values))
                }
                (_, k, _) => return Err(format!("policy {}: unknown parameter '{k}'; valid parameters are: {}", info.word, valid.join(", "))),
            }
        }
        Ok(policy)
    }
}

/// One `PARAM=VALUE` of a hint policy; false for a value out of range.
fn set_hint_param(h: &mut HintParams, k: &str, v: &str) -> bool {
    let n = |lo: u32, hi: u32| v.parse::<u32>().ok().filter(|n| (lo..=hi).contains(n));
    match k {
        "source" => match v {
            "mglru" => h.source = HintSource::Mglru,
            "damon" => h.source = HintSource::Damon,
            _ => return false,
        },
        "levels" => match n(1, 8) {
            Some(x) => h.levels = x as u8,
            None => return false,
        },
        "per_mm" => match n(1, 65536) {
            Some(x) => h.per_mm = x,
            None => return false,
        },
        "charge" => match n(0, 512) {
            Some(x) => h.charge = x,
            None => return false,
        },
        "period" => match n(10, 60000) {
            Some(x) => h.period_ms = x,
            None => return false,
        },
        "budget" => match n(0, 1 << 20) {
            Some(x) => h.budget_mb = x,
            None => return false,
        },
        _ => return false,
    }
    true
}

/// `NAME[:k=v,...]` of a hint policy, parameters at their default left out.
fn fmt_hints(f: &mut fmt::Formatter<'_>, word: &str, h: &HintParams, global: bool) -> fmt::Result {
    let d = HintParams::DEFAULT;
    let mut kv = Vec::new();
    if h.source != d.source {
        kv.push(format!("source={}", h.source.word()));
    }
    if !global && h.levels != d.levels {
        kv.push(format!("levels={}", h.levels));
    }
    if !global && h.per_mm != d.per_mm {
        kv.push(format!("per_mm={}", h.per_mm));
    }
    if !global && h.charge != d.charge {
        kv.push(format!("charge={}", h.charge));
    }
    if h.period_ms != d.period_ms {
        kv.push(format!("period={}", h.period_ms));
    }
    if global && h.budget_mb != d.budget_mb {
        kv.push(format!("budget={}", h.budget_mb));
    }
    if kv.is_empty() {
        f.write_str(word)
    } else {
        write!(f, "{word}:{}", kv.join(","))
    }
}

impl fmt::Display for Policy {
    /// The form [`Policy::parse`] reads back; parameters at their default are left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::MthpCollapseV18 { scaled: Scaling::ZeroOr511 } => f.write_str("mthp-collapse-v18"),
            Policy::MthpCollapseV18 { scaled: Scaling::Capped } => f.write_str("mthp-collapse-v18:scaled=1"),
            Policy::MthpCollapseV18 { scaled: Scaling::Uncapped } => f.write_str("mthp-collapse-v18:scaled=uncapped"),
            Policy::Fhpm(p) => match p.non_default() {
                v if v.is_empty() => f.write_str("fhpm"),
                v => write!(f, "fhpm:{}", v.join(",")),
            },
            Policy::CollapseHints(h) => fmt_hints(f, "collapse-hints", h, false),
            Policy::GlobalHints(h) => fmt_hints(f, "global-hints", h, true),
            Policy::ContigHint { fill, gfp } => {
                let mut params = Vec::new();
                if *fill != 2 {
                    params.push(format!("fill={fill}"));
                }
                if *gfp == HintGfp::Reclaim {
                    params.push("gfp=reclaim".to_string());
                }
                if params.is_empty() { f.write_str("contig-hint") } else { write!(f, "contig-hint:{}", params.join(",")) }
            }
        }
    }
}

/// The entries `thplab settings --list` adds after the knobs, as (path, values): `kernel` and
/// `policy` with every version and every policy (its series, version, source and parameters).
pub fn list_entries() -> Vec<(String, String)> {
    let kernels: Vec<String> = KernelVersion::ALL
        .iter()
        .map(|k| match k {
            KernelVersion::V6_18 => "6.18 (the default: this machine's, what live runs check)".to_string(),
            k => format!("{} (model-only: {})", k.word(), k.describe()),
        })
        .collect();
    let mut policies = vec!["none".to_string()];
    for p in POLICIES {
        let params: Vec<String> = p.params.iter().map(|x| format!("{}={} (default {}: {})", x.name, x.values.replace(", ", "|"), x.default, x.doc)).collect();
        policies.push(format!("{} (model-only; series \"{}\" {}, {}; {}; parameters: {})", p.word, p.series, p.version, p.source, p.doc, params.join("; ")));
    }
    vec![("kernel".into(), kernels.join(", ")), ("policy".into(), policies.join(", "))]
}

/// [`list_entries`] as `PATH: VALUES` lines.
pub fn list_text() -> String {
    list_entries().into_iter().map(|(p, v)| format!("{p}: {v}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_refuse_with_the_valid_list() {
        assert_eq!(KernelVersion::parse("7.2"), Ok(KernelVersion::V7_2));
        assert_eq!(KernelVersion::parse("v6.18"), Ok(KernelVersion::V6_18));
        assert_eq!(KernelVersion::parse("7.2.0"), Ok(KernelVersion::V7_2));
        let e = KernelVersion::parse("7.1").unwrap_err();
        assert!(e.contains("'7.1'") && e.contains("6.18") && e.contains("7.2"), "{e}");
        assert!(!KernelVersion::V6_18.model_only());
        assert!(KernelVersion::V7_2.model_only());
    }

    #[test]
    fn policies_parse_with_parameters_and_say_what_is_valid() {
        assert_eq!(Policy::parse("mthp-collapse-v18"), Ok(Policy::MthpCollapseV18 { scaled: Scaling::ZeroOr511 }));
        assert_eq!(Policy::parse("mthp-collapse-v18:scaled=1"), Ok(Policy::MthpCollapseV18 { scaled: Scaling::Capped }));
        assert_eq!(Policy::parse(" mthp-collapse-v18: scaled = uncapped "), Ok(Policy::MthpCollapseV18 { scaled: Scaling::Uncapped }));
        let e = Policy::parse("hot-first").unwrap_err();
        assert!(e.contains("unknown policy 'hot-first'") && e.contains("mthp-collapse-v18, fhpm, collapse-hints, global-hints, contig-hint"), "{e}");
        let e = Policy::parse("mthp-collapse-v18:scaled=2").unwrap_err();
        assert!(e.contains("invalid value '2' for scaled") && e.contains("0, 1, uncapped"), "{e}");
        let e = Policy::parse("mthp-collapse-v18:depth=3").unwrap_err();
        assert!(e.contains("unknown parameter 'depth'") && e.contains("scaled=0|1|uncapped"), "{e}");
        for scaled in [Scaling::ZeroOr511, Scaling::Capped, Scaling::Uncapped] {
            let p = Policy::MthpCollapseV18 { scaled };
            assert_eq!(Policy::parse(&p.to_string()), Ok(p));
        }
    }

    #[test]
    fn fhpm_parses_its_parameters_and_refuses_with_the_valid_ones() {
        use crate::fhpm::FhpmParams;
        assert_eq!(Policy::parse("fhpm"), Ok(Policy::Fhpm(FhpmParams::default())));
        let p = Policy::parse("fhpm:window_ms=50,split_psr=100,fill=0").unwrap();
        assert_eq!(p, Policy::Fhpm(FhpmParams { window_ms: 50, split_psr: 100, fill: false, ..Default::default() }));
        assert_eq!(p.to_string(), "fhpm:window_ms=50,split_psr=100,fill=0");
        assert_eq!(Policy::parse(&p.to_string()), Ok(p));
        let e = Policy::parse("fhpm:split_psr=2000").unwrap_err();
        assert!(e.contains("invalid value '2000' for split_psr") && e.contains("0..=1000"), "{e}");
        let e = Policy::parse("fhpm:psr=1").unwrap_err();
        assert!(e.contains("unknown parameter 'psr'") && e.contains("window_ms=1..=60000"), "{e}");
    }

    #[test]
    fn hint_policies_parse_their_parameters_and_print_back() {
        let d = HintParams::DEFAULT;
        assert_eq!(Policy::parse("collapse-hints"), Ok(Policy::CollapseHints(d)));
        let p = Policy::parse("collapse-hints:source=damon,levels=3,per_mm=8,charge=64,period=1000").unwrap();
        assert_eq!(p, Policy::CollapseHints(HintParams { source: HintSource::Damon, levels: 3, per_mm: 8, charge: 64, period_ms: 1000, budget_mb: 0 }));
        assert_eq!(p.to_string(), "collapse-hints:source=damon,levels=3,per_mm=8,charge=64,period=1000");
        assert_eq!(Policy::parse(&p.to_string()), Ok(p));
        let g = Policy::parse("global-hints:budget=64").unwrap();
        assert_eq!(g, Policy::GlobalHints(HintParams { budget_mb: 64, ..d }));
        assert_eq!(g.to_string(), "global-hints:budget=64");
        let e = Policy::parse("collapse-hints:source=lru").unwrap_err();
        assert!(e.contains("invalid value 'lru' for source") && e.contains("mglru, damon"), "{e}");
        let e = Policy::parse("collapse-hints:levels=9").unwrap_err();
        assert!(e.contains("invalid value '9' for levels") && e.contains("1..8"), "{e}");
        // A global-hints parameter is not a collapse-hints one, and the other way round.
        let e = Policy::parse("collapse-hints:budget=1").unwrap_err();
        assert!(e.contains("unknown parameter 'budget'"), "{e}");
        let e = Policy::parse("global-hints:levels=1").unwrap_err();
        assert!(e.contains("unknown parameter 'levels'"), "{e}");
    }

    #[test]
    fn the_list_names_every_version_and_policy_with_its_source() {
        let t = list_text();
        assert!(t.starts_with("kernel: 6.18 (the default: this machine's, what live runs check), 7.2 (model-only: 6.18 plus khugepaged mTHP collapse"), "{t}");
        assert!(t.contains("\npolicy: none, mthp-collapse-v18 (model-only; series \"khugepaged: mTHP support (Nico Pache)\" v18, 2026-05-22, https://lore.kernel.org"), "{t}");
        assert!(t.contains("scaled=0|1|uncapped (default 0: "), "{t}");
        assert!(t.contains(", fhpm (model-only; series \"FHPM: Fine-grained Huge Page Management For Virtualization"), "{t}");
        assert_eq!(t.lines().count(), 2);
        assert!(t.contains(", contig-hint (model-only; series \"contiguous page hint for anonymous memory (Bamvor Zhang"), "{t}");
        assert!(t.contains("fill=1..16 (default 2: ") && t.contains("gfp=nowait|reclaim (default nowait: "), "{t}");
    }

    #[test]
    fn the_contig_hint_parses_its_fill_and_gfp() {
        assert_eq!(Policy::parse("contig-hint"), Ok(Policy::ContigHint { fill: 2, gfp: HintGfp::NoWait }));
        assert_eq!(Policy::parse("contig-hint:fill=16,gfp=reclaim"), Ok(Policy::ContigHint { fill: 16, gfp: HintGfp::Reclaim }));
        let e = Policy::parse("contig-hint:fill=17").unwrap_err();
        assert!(e.contains("invalid value '17' for fill") && e.contains("1..16"), "{e}");
        let e = Policy::parse("contig-hint:gfp=atomic").unwrap_err();
        assert!(e.contains("invalid value 'atomic' for gfp") && e.contains("nowait, reclaim"), "{e}");
        for p in [Policy::ContigHint { fill: 2, gfp: HintGfp::NoWait }, Policy::ContigHint { fill: 3, gfp: HintGfp::Reclaim }, Policy::ContigHint { fill: 1, gfp: HintGfp::NoWait }] {
            assert_eq!(Policy::parse(&p.to_string()), Ok(p));
        }
        assert_eq!(Policy::ContigHint { fill: 3, gfp: HintGfp::Reclaim }.to_string(), "contig-hint:fill=3,gfp=reclaim");
    }
}
