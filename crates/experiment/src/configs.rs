//! Memory against reach (`thplab sim W --configs FILE`): one workload under several
//! configurations (settings, policy, kernel, hugetlb backing), side by side: resident memory,
//! bloat (allocated, never touched), page-table memory, TLB reach, TLB misses by level and the
//! access time estimate. Issue #30 item 4; docs/contig-hint.md.
//!
//! The file is TOML (errors name the file and line):
//! ```toml
//! cpu = "cortex-a57"            # optional: the TLB preset when --cpu is not given
//! [[config]]
//! name = "4K+THP"
//! settings = ["enabled=always"] # knob assignments on top of the command line's settings
//! policy = "contig-hint"        # optional, as --policy
//! kernel = "6.18"               # optional, as --kernel
//! hugetlb = "2M"                # optional: every private anonymous mmap as MAP_HUGETLB (2M, 1G),
//!                               # the pool sized to hold them (libhugetlbfs's heap backing)
//! page_size = "4K"              # the base page size; only 4K until the model has --page-size
//! ```
//!
//! TLB reach: the L2 TLB's entries times the average translation size, Rss (hugetlb included)
//! over the entries needed to map it: a PMD-mapped folio or a hugetlb page one entry, a
//! PTE-mapped folio of 64 KiB or more one per 64 KiB (arm64's contiguous bit folds each aligned
//! block, arch/arm64/mm/contpte.c: `contpte_set_ptes`), a completed contig-hint chunk one, every
//! other page one. Counted from the census at the end of the run.

use std::io::Write;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use thp_abi::ThpSettings;
use uapi::RunResult;
use workload::{Backing, HugePage, OpKind, Workload};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    cpu: Option<String>,
    #[serde(default)]
    config: Vec<toml::Spanned<RawConfig>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    name: String,
    #[serde(default)]
    settings: Vec<String>,
    policy: Option<String>,
    kernel: Option<String>,
    hugetlb: Option<String>,
    page_size: Option<String>,
}

/// One configuration of the file.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub name: String,
    pub settings: ThpSettings,
    pub hugetlb: Option<HugePage>,
}

/// The file: its default CPU preset and its configurations, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigFile {
    pub cpu: Option<String>,
    pub configs: Vec<Config>,
}

/// The line of the first non-blank character at or after `offset`.
fn line_of(text: &str, offset: usize) -> usize {
    let offset = offset.min(text.len());
    let start = offset + (text[offset..].len() - text[offset..].trim_start().len());
    text[..start].matches('\n').count() + 1
}

/// Parse `text` (from `file`) on top of `base` (the command line's settings).
pub fn parse(file: &str, text: &str, base: &ThpSettings) -> Result<ConfigFile> {
    let raw: RawFile = toml::from_str(text).map_err(|e| anyhow::anyhow!("configs {file}: {}", e.to_string().trim_end()))?;
    if raw.config.is_empty() {
        bail!("configs {file}: no [[config]] table; each has name = \"...\" and any of settings, policy, kernel, hugetlb, page_size");
    }
    let mut configs = Vec::new();
    for c in raw.config {
        let line = line_of(text, c.span().start);
        let c = c.into_inner();
        let at = || format!("configs {file}:{line}: config '{}'", c.name);
        let mut s = base.clone();
        for a in &c.settings {
            s.apply_assignment(a).map_err(|e| anyhow::anyhow!("{e}")).with_context(|| format!("{}: setting '{a}'", at()))?;
        }
        crate::resolve::version_and_policy(&mut s, c.kernel.as_deref(), c.policy.as_deref()).with_context(at)?;
        let hugetlb = match c.hugetlb.as_deref() {
            None | Some("none") => None,
            Some("2M") => Some(HugePage::Size2M),
            Some("1G") => Some(HugePage::Size1G),
            Some(h) => bail!("{}: hugetlb = \"{h}\": valid are 2M, 1G, none (the model has x86-64's two hstates; for 64 KiB contiguous-PTE pages use settings = [\"hugepages-64kB/enabled=always\"], which the TLB sees alike)", at()),
        };
        match c.page_size.as_deref() {
            None | Some("4K") => {}
            Some(p) => bail!("{}: page_size = \"{p}\": only 4K in this build (16K and 64K base pages come with --page-size)", at()),
        }
        configs.push(Config { name: c.name, settings: s, hugetlb });
    }
    Ok(ConfigFile { cpu: raw.cpu, configs })
}

/// The workload with every private anonymous mapping backed by hugetlb pages of `page`, and a
/// pool that holds them all (the pool's size: each mapping rounded up to the page size), and the
/// pool's bytes (resident from boot, touched or not).
pub fn with_hugetlb(w: &Workload, page: HugePage) -> (Workload, u64) {
    let mut w = w.clone();
    let size = match page {
        HugePage::Size2M => 2u64 << 20,
        HugePage::Size1G => 1u64 << 30,
    };
    let mut pages = 0;
    for op in &mut w.ops {
        if let OpKind::Mmap { len, backing, .. } = &mut op.kind {
            if *backing == Backing::PrivateAnon {
                *backing = Backing::Hugetlb { page, shared: false, noreserve: false };
                pages += len.div_ceil(size);
            }
        }
    }
    w.hugetlb_pools.retain(|p| p.page != page);
    w.hugetlb_pools.push(workload::HugetlbPool { page, pages, overcommit: None, line: 0 });
    (w, pages * size)
}

/// One configuration's figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReachRow {
    pub name: String,
    /// Rss plus the hugetlb pool (the configuration's `hugetlb =`: its pages are taken at boot).
    pub resident_bytes: u64,
    /// Allocated, never touched (`process.bloat_bytes`) plus contig-hint pages allocated, not mapped.
    pub bloat_bytes: u64,
    pub pgtable_bytes: u64,
    /// TLB entries needed to map the resident memory (see the module header).
    pub tlb_entries: u64,
    /// L2 TLB entries × the average translation size, at most the resident memory.
    pub l2_reach_bytes: u64,
    pub accesses: u64,
    pub l1_misses: u64,
    pub l2_misses: u64,
    pub walk_refs: u64,
    /// The TLB model's time of the accesses (`accesses.total.ns`).
    pub access_ns: f64,
}

/// The figures of `r` (run on a CPU whose L2 TLB has `l2_entries`) with a hugetlb pool of
/// `pool_bytes`.
pub fn row(name: &str, r: &RunResult, l2_entries: u64, pool_bytes: u64) -> ReachRow {
    let resident = r.process.rss_bytes + pool_bytes;
    let run = r.model.as_ref().and_then(|m| m.run.as_ref());
    let contig = run.and_then(|m| m.contig_hint);
    let mut entries = 0u64;
    let mut mapped = 0u64;
    for (size, e) in &r.census.sizes {
        let Some(order) = size.order() else { continue };
        let bytes = 4096u64 << order.0;
        entries += e.pmd_mapped;
        let pte_bytes = e.pte_mapped * bytes;
        entries += if bytes >= 64 << 10 { pte_bytes >> 16 } else { pte_bytes >> 12 };
        mapped += (e.pmd_mapped + e.pte_mapped) * bytes;
    }
    // Pages the census does not list, one entry each; a completed chunk's 16 pages are one.
    entries += resident.saturating_sub(mapped) >> 12;
    entries = entries.saturating_sub(contig.map_or(0, |c| c.completed * 15));
    let reach = if entries == 0 { 0 } else { (l2_entries * resident / entries).min(resident) };
    let t = r.accesses.as_ref().map(|a| a.total.clone()).unwrap_or_default();
    ReachRow {
        name: name.to_string(),
        resident_bytes: resident,
        bloat_bytes: r.process.bloat_bytes.unwrap_or(0) + contig.map_or(0, |c| c.unmapped_bytes),
        pgtable_bytes: run.map_or(0, |m| m.pgtable_pages * 4096),
        tlb_entries: entries,
        l2_reach_bytes: reach,
        accesses: t.accesses,
        l1_misses: t.l1_misses,
        l2_misses: t.l2_misses,
        walk_refs: t.walk_refs,
        access_ns: t.ns,
    }
}

/// The L2 TLB entries of a preset (every L2 structure's).
pub fn l2_entries(cpu: &str) -> u64 {
    tlb::presets::by_name(cpu).map_or(0, |p| p.l2.iter().map(|s| s.geometry.entries as u64).sum())
}

/// "-" where the TLB model ran no access (a hugetlb mapping: the TLB model does not walk them).
fn dash(r: &ReachRow, s: String) -> String {
    if r.accesses == 0 { "-".into() } else { s }
}

fn kib(b: u64) -> String {
    format!("{} kB", b >> 10)
}

/// The rows side by side, a column per configuration (`reference`: the first's time, for the
/// last line's ratio).
pub fn print_table(out: &mut impl Write, heading: &str, rows: &[ReachRow]) -> std::io::Result<()> {
    writeln!(out, "{heading}\n")?;
    let lines: [(&str, &dyn Fn(&ReachRow) -> String); 11] = [
        ("resident (Rss + hugetlb)", &|r| kib(r.resident_bytes)),
        ("bloat (allocated, never touched)", &|r| kib(r.bloat_bytes)),
        ("page tables", &|r| kib(r.pgtable_bytes)),
        ("TLB entries to map it", &|r| r.tlb_entries.to_string()),
        ("L2 TLB reach", &|r| kib(r.l2_reach_bytes)),
        ("accesses", &|r| r.accesses.to_string()),
        ("L1 TLB misses", &|r| dash(r, r.l1_misses.to_string())),
        ("L2 TLB misses (walks)", &|r| dash(r, r.l2_misses.to_string())),
        ("walk memory references", &|r| dash(r, r.walk_refs.to_string())),
        ("est. access time", &|r| dash(r, format!("{:.2} ms", r.access_ns / 1e6))),
        ("time against the first", &|r| match rows.first() {
            Some(f) if f.access_ns > 0.0 && r.accesses > 0 => format!("{:+.2} %", (r.access_ns / f.access_ns - 1.0) * 100.0),
            _ => "-".into(),
        }),
    ];
    let w = rows.iter().map(|r| r.name.len()).max().unwrap_or(0).max(12);
    write!(out, "{:<34}", "")?;
    for r in rows {
        write!(out, " {:>w$}", r.name)?;
    }
    writeln!(out)?;
    for (label, f) in lines {
        write!(out, "{label:<34}")?;
        for r in rows {
            write!(out, " {:>w$}", f(r))?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// `thplab sim W --configs FILE`: every configuration of the file in the model, printed side
/// by side (or one JSON object: `configs`, each with its figures and its whole result).
pub struct RunArgs<'a> {
    pub path: &'a std::path::Path,
    pub input: &'a crate::simulate::SimInput,
    pub base: &'a ThpSettings,
    pub flags: &'a crate::resolve::ProfileFlags<'a>,
    pub profile_file: Option<&'a uapi::profile::MachineProfile>,
    pub machine: &'a sim::MachineConfig,
    pub check: bool,
    pub json: bool,
}

pub fn run(a: &RunArgs) -> Result<()> {
    let name = a.path.display().to_string();
    let text = std::fs::read_to_string(a.path).with_context(|| format!("cannot read the configs file {name}"))?;
    let cf = parse(&name, &text, a.base)?;
    let cpu = a.flags.cpu.or(cf.cpu.as_deref()).unwrap_or("zen4");
    if tlb::presets::by_name(cpu).is_none() {
        bail!("configs {name}: cpu = \"{cpu}\" is not a preset (valid: {})", tlb::presets::names().join(", "));
    }
    let flags = crate::resolve::ProfileFlags { cpu: Some(cpu), ..*a.flags };
    let profile = crate::resolve::profile(&flags, a.profile_file)?;
    let o = crate::simulate::SimOptions { check: a.check, recorded_time: true, profile: &profile, salvage: None };
    let mut rows = Vec::new();
    let mut results = Vec::new();
    for c in &cf.configs {
        let backed;
        let mut pool = 0;
        let input = match (c.hugetlb, a.input) {
            (None, i) => i,
            (Some(page), crate::simulate::SimInput::Workload(w)) => {
                let (w, bytes) = with_hugetlb(w, page);
                (backed, pool) = (crate::simulate::SimInput::Workload(w), bytes);
                &backed
            }
            (Some(_), _) => bail!("configs {name}: config '{}': hugetlb = applies to workloads, not to recordings (a recording replays the mappings it recorded)", c.name),
        };
        let r = crate::simulate::sim_one(&o, input, &c.settings, a.machine, None, false).with_context(|| format!("config '{}'", c.name))?;
        rows.push(row(&c.name, &r, l2_entries(cpu), pool));
        results.push(r);
    }
    let mut out = std::io::stdout().lock();
    if a.json {
        let v: Vec<_> = rows.iter().zip(&results).map(|(row, r)| serde_json::json!({ "name": row.name, "figures": row, "model": r })).collect();
        serde_json::to_writer_pretty(&mut out, &serde_json::json!({ "cpu": cpu, "configs": v }))?;
        writeln!(out)?;
    } else {
        print_table(&mut out, &format!("{}: memory against TLB reach ({cpu}, model; contig-hint and hugetlb rows are model-only)", a.input_name()), &rows)?;
    }
    Ok(())
}

impl RunArgs<'_> {
    fn input_name(&self) -> String {
        match self.input {
            crate::simulate::SimInput::Workload(w) => w.source.clone(),
            crate::simulate::SimInput::Recording { name, .. } => name.clone(),
        }
    }
}

#[cfg(test)]
#[path = "configs_tests.rs"]
mod tests;
