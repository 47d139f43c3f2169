//! The run result: one JSON object that `thplab sim` and `thplab live` both print.
//!
//! Schema `thplab-run/1`, documented in docs/results-schema.md. Counter names are the kernel's;
//! a consumer cannot tell from the counters whether the model or the kernel produced them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub const RESULT_SCHEMA: &str = "thplab-run/1";

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessStats {
    /// Minor faults of the workload (getrusage ru_minflt delta).
    pub minflt: u64,
    /// Resident anonymous memory at the end (smaps_rollup Rss of the workload's mappings).
    pub rss_bytes: u64,
    /// PMD-mapped anonymous memory at the end (AnonHugePages).
    pub anon_huge_bytes: u64,
    /// Bytes in mapped folios that the workload never touched (model only: the kernel cannot
    /// see it; the live harness leaves it out).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub bloat_bytes: Option<u64>,
}

/// Folios of one size mapped by the process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CensusEntry {
    /// Distinct folios with at least one page mapped.
    pub folios: u64,
    /// Folios mapped by a PMD entry.
    pub pmd_mapped: u64,
    /// Folios mapped by PTEs.
    pub pte_mapped: u64,
    /// PTE-mapped folios of which some pages are not mapped in this process.
    pub partially_mapped: u64,
}

/// Which folio sizes a process maps, by size label (`4kB`, `64kB`, `2048kB`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Census {
    pub sizes: BTreeMap<String, CensusEntry>,
    /// PTEs that map the shared 4 KiB zero page.
    pub zero_page_ptes: u64,
    /// PMDs that map the huge zero folio.
    pub huge_zero_pmds: u64,
}

impl Census {
    /// `"64kB" -> folio count`, the `folios` section of the result.
    pub fn folio_counts(&self) -> BTreeMap<String, u64> {
        self.sizes.iter().filter(|(_, e)| e.folios > 0).map(|(k, e)| (k.clone(), e.folios)).collect()
    }
}

/// A region of the workload and where it was placed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionPlacement {
    pub name: String,
    pub start: u64,
    pub len: u64,
}

/// What one syscall of the workload returned.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallResult {
    /// Line of the workload.
    pub line: usize,
    /// `madvise(collapse)`, `munmap`, `mprotect(r)`, `brk`, `prctl(thp_disable)`.
    pub call: String,
    /// `0`, or the errno name (`EINVAL`); for brk, the new break in hex.
    pub ret: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub schema: String,
    /// `sim` or `live`.
    pub source: String,
    pub workload: String,
    /// The resolved settings, sysfs path → value.
    pub settings: BTreeMap<String, String>,
    /// `/proc/vmstat` `thp_*` deltas.
    pub vmstat: BTreeMap<String, i64>,
    /// `hugepages-<N>kB` → stats file → delta.
    pub mthp: BTreeMap<String, BTreeMap<String, i64>>,
    pub process: ProcessStats,
    /// Folio size → folios mapped at the end.
    pub folios: BTreeMap<String, u64>,
    pub census: Census,
    /// Model only: `hugepages-<N>kB` → reason → how often a fault did not get that size.
    /// Always written (empty in live results and when no fault fell back).
    #[serde(default)]
    pub fallbacks: BTreeMap<String, BTreeMap<String, u64>>,
    pub regions: Vec<RegionPlacement>,
    /// /proc/meminfo lines that the run moved, in kB: `Shmem`, `ShmemHugePages`, `ShmemPmdMapped`
    /// (model: the level at the end; live: the system-wide delta).
    #[serde(default)]
    pub meminfo: BTreeMap<String, i64>,
    /// The return of every non-touch operation, in order.
    #[serde(default)]
    pub calls: Vec<CallResult>,
    /// Model only: scan results, buddy state, page-table pages.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub model: Option<serde_json::Value>,
    /// Live only: kernel release, runs, spread and noise.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub live: Option<serde_json::Value>,
    /// Model only: the folio-size map, one entry per VMA at the end of the run (for a
    /// recording, each process's VMAs at its exit), in the shape `thplab observe` prints.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub vmas: Vec<VmaMap>,
    /// Model only: the process at its largest Rss (for a recording, the sum of each process's
    /// peak), with the census taken then.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub peak: Option<Peak>,
    /// Model only, with `--explain`: every fault in the explained range and why each larger
    /// order was refused.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub explain: Option<Explain>,
    /// Model only, with `--profile`: the run's time from the profile's `[fault]` costs.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub time: Option<TimeEstimate>,
    /// Model only, when the workload has `access` statements: the TLB model's counts and time
    /// estimate per region and in total (docs/tlb-model.md).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub accesses: Option<AccessReport>,
    /// Model only, when the workload has `read_direct` statements: what the reads pinned, and
    /// with `sim --profile` what that costs.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub io: Option<IoResult>,
    /// When the workload forks: every process, `main` first. The top-level `process`,
    /// `folios` and `census` are then `main`'s.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub processes: Vec<ProcResult>,
}

/// One process (or thread) of a workload that forks or starts threads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcResult {
    /// `main`, or the name its `fork NAME` gave it.
    pub name: String,
    /// Its `exit` ran: `minflt` counts its whole life; Rss and census are not taken (its
    /// memory is gone).
    pub exited: bool,
    /// Minor faults since its fork (main: since the start); Rss and AnonHugePages at the end.
    pub process: ProcessStats,
    /// Folios its page tables map at the end (empty once exited).
    pub census: Census,
    /// Model only: write faults on pages shared by fork that copied the page, and that reused
    /// it (`wp_page_copy`, `wp_page_reuse`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cow_copied: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cow_reused: Option<u64>,
    /// A thread or a vfork child: the process whose mm it runs in (`main`). Its `minflt` is its
    /// own (the kernel counts faults per task); its Rss and census are that shared mm's.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub shares_mm_with: Option<String>,
}

/// What the model's work costs in time on the machine a profile was measured on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeEstimate {
    /// Everything below, in ns.
    pub total_ns: f64,
    /// Size label → ns of the faults that allocated a folio of that size.
    pub faults_ns: BTreeMap<String, f64>,
    /// Size label → those faults.
    pub faults: BTreeMap<String, u64>,
    /// Read faults that mapped the zero page or the huge zero folio, and their ns.
    pub zero_page_faults: u64,
    pub zero_page_ns: f64,
    /// Pages touched without a fault (the rest of a large folio, touches of mapped pages).
    pub touches_without_fault: u64,
    pub touch_ns: f64,
    /// Memory-management calls and their ns.
    pub calls: u64,
    pub calls_ns: f64,
    /// Sizes that faulted but have no cost in the profile (charged as 4kB faults).
    pub unmeasured_sizes: Vec<String>,
}

/// The TLB model's report of a run's `access` statements.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AccessReport {
    /// The `--cpu` preset and `--paging` mode.
    pub cpu: String,
    pub paging: String,
    /// The preset's clock, for the ns estimate.
    pub ghz: f64,
    pub regions: Vec<AccessCounts>,
    pub total: AccessCounts,
}

/// Counts of one region (or the total, `region` = `total`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AccessCounts {
    pub region: String,
    pub accesses: u64,
    pub writes: u64,
    pub l1_hits: u64,
    pub l1_misses: u64,
    pub l2_hits: u64,
    pub l2_misses: u64,
    pub walks: u64,
    pub walk_refs: u64,
    /// Entries read by walks per guest table level: PML4/L0, PDPT/L1, PD/L2, PT/L3.
    pub guest_refs: [u64; 4],
    /// Nested paging: host-table entries read per host level.
    pub host_refs: [u64; 4],
    pub tlb_flushed_entries: u64,
    /// Estimated cycles for data reads and for translation, their sum, and ns at `ghz`.
    pub data_cycles: f64,
    pub translation_cycles: f64,
    pub cycles: f64,
    pub ns: f64,
    pub ns_per_access: f64,
}

/// The direct I/O of a run (`read_direct`): each read pins its buffer with
/// `pin_user_pages_fast` and unpins it at completion.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IoResult {
    /// read(2) calls.
    pub direct_reads: u64,
    pub bytes: u64,
    /// Folio runs pinned, summed over the reads.
    pub pinned_folios: u64,
    /// Pages pinned through PTEs and through PMD leaves, summed over the reads.
    pub pinned_pte_pages: u64,
    pub pinned_pmd_pages: u64,
    /// Write faults the pinning took (also in `process.minflt`).
    pub pin_faults: u64,
    /// With `sim --profile FILE` whose profile has `[pin]`: the pin + unpin time of all the
    /// reads, ns (`folios × per_folio_ns + pte_pages × per_page_ns + pmd_pages × per_pmd_page_ns`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pin_ns: Option<f64>,
}

/// One VMA and the folios that back it: an entry of `thplab observe`'s `vmas` and of the
/// model's `vmas` (one consumer reads both).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmaMap {
    /// Start and end, hex without `0x`, as /proc/PID/maps.
    pub start: String,
    pub end: String,
    /// `rw-p`, as /proc/PID/maps.
    pub perms: String,
    /// The mapping's name (`[heap]`, a path, `/memfd:x (deleted)`); empty for anonymous memory.
    pub name: String,
    /// `anon`, `shmem`, `file`, or `placeholder` (a replayed mapping the model does not back).
    #[serde(default)]
    pub kind: String,
    /// The process, for the VMAs of a replayed recording (several processes).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pid: Option<u32>,
    pub rss_kb: u64,
    pub anon_huge_kb: u64,
    pub census: Census,
}

impl VmaMap {
    /// The start address as a number.
    pub fn start_addr(&self) -> u64 {
        u64::from_str_radix(&self.start, 16).unwrap_or(0)
    }
    pub fn end_addr(&self) -> u64 {
        u64::from_str_radix(&self.end, 16).unwrap_or(0)
    }
}

/// `kind` of a VMA from its /proc/PID/maps name: shared memory (memfd, /dev/shm, SysV,
/// /dev/zero shared mappings), anonymous memory (no name, `[heap]`, `[stack]`, `[anon:...]`),
/// or a file.
pub fn vma_kind_of_name(name: &str) -> &'static str {
    if name.starts_with("/memfd:") || name.starts_with("/dev/shm/") || name.starts_with("/SYSV") || name.starts_with("/dev/zero") {
        "shmem"
    } else if name.is_empty() || name == "[heap]" || name.starts_with("[stack") || name.starts_with("[anon") {
        "anon"
    } else {
        "file"
    }
}

/// The folio-size map as a table, one row per VMA and a total: address range, perms, Rss,
/// folios per size (`-` for none), PMD-mapped, partially mapped, zero-page PTEs, huge-zero
/// PMDs, name. `thplab observe` and `thplab sim` print the same table.
pub fn vma_table(vmas: &[VmaMap], total: &Census, total_rss_kb: u64) -> String {
    use std::fmt::Write;
    let mut sizes: Vec<String> = total.sizes.keys().cloned().collect();
    for v in vmas {
        for k in v.census.sizes.keys() {
            if !sizes.contains(k) {
                sizes.push(k.clone());
            }
        }
    }
    sizes.sort_by_key(|s| size_sort_key(s));
    let with_pid = vmas.iter().any(|v| v.pid.is_some());
    let mut out = String::new();
    let mut head = String::new();
    if with_pid {
        head += &format!("{:>7} ", "pid");
    }
    head += &format!("{:<33} {:<4} {:>10}", "address range", "perm", "Rss");
    for s in &sizes {
        head += &format!(" {:>8}", s);
    }
    head += &format!(" {:>6} {:>7} {:>6} {:>6}  name", "pmd", "partial", "zero", "hzero");
    let _ = writeln!(out, "{head}");
    let dash = |n: u64| if n == 0 { "-".to_string() } else { n.to_string() };
    let mut row = |pid: Option<u32>, range: &str, perms: &str, rss: u64, c: &Census, name: &str| {
        let mut line = String::new();
        if with_pid {
            line += &format!("{:>7} ", pid.map(|p| p.to_string()).unwrap_or_default());
        }
        line += &format!("{:<33} {:<4} {:>7} kB", range, perms, rss);
        for s in &sizes {
            line += &format!(" {:>8}", dash(c.sizes.get(s).map(|e| e.folios).unwrap_or(0)));
        }
        let pmd: u64 = c.sizes.values().map(|e| e.pmd_mapped).sum();
        let partial: u64 = c.sizes.values().map(|e| e.partially_mapped).sum();
        line += &format!(" {:>6} {:>7} {:>6} {:>6}  {}", dash(pmd), dash(partial), dash(c.zero_page_ptes), dash(c.huge_zero_pmds), name);
        let _ = writeln!(out, "{}", line.trim_end());
    };
    for v in vmas {
        let name = if !v.name.is_empty() {
            v.name.clone()
        } else if v.kind.is_empty() || v.kind == "anon" {
            "[anon]".to_string()
        } else {
            format!("[{}]", v.kind)
        };
        row(v.pid, &format!("{}-{}", v.start, v.end), &v.perms, v.rss_kb, &v.census, &name);
    }
    row(None, "total", "", total_rss_kb, total, "");
    out
}

/// The run at its largest Rss.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peak {
    /// The largest Rss (anonymous and shmem pages mapped) the run reached.
    pub rss_bytes: u64,
    /// AnonHugePages when the census below was taken.
    pub anon_huge_bytes: u64,
    /// The census at the peak (taken before the first operation that unmapped or freed memory
    /// after Rss last grew by a sixteenth or more; at the end when Rss never fell).
    pub census: Census,
    /// The largest number of folios of each size mapped at any moment (`nr_anon` per size,
    /// exact, anonymous only), by size label.
    pub max_folios: BTreeMap<String, u64>,
}

/// `--explain`: the faults in a range and what each larger order met.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Explain {
    /// The explained range, hex `0x...`, end exclusive.
    pub start: String,
    pub end: String,
    /// Faults recorded (each fault's page or the folio it got lies in the range).
    pub faults: Vec<ExplainedFault>,
    /// Faults beyond the recorded ones (only the first [`Explain::MAX_FAULTS`] are kept).
    pub more_faults: u64,
    /// Reason → count over the recorded faults, by size (`hugepages-64kB`), the same
    /// reasons as the result's `fallbacks`.
    pub totals: BTreeMap<String, BTreeMap<String, u64>>,
}

impl Explain {
    pub const MAX_FAULTS: usize = 10_000;
}

/// One fault and the orders it did not get.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExplainedFault {
    /// The process (recordings only).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pid: Option<u32>,
    /// Faulting address, hex.
    pub addr: String,
    /// `read` or `write`.
    pub access: String,
    /// The folio size it mapped (`4kB`, `64kB`, `2048kB`), or `zero page`, `huge zero page`.
    pub got: String,
    /// Larger sizes the settings enable and why this fault did not get them, largest first:
    /// (`hugepages-2048kB`, `pte_table_exists`).
    pub refused: Vec<(String, String)>,
}

impl RunResult {
    pub fn new(source: &str, workload: &str) -> RunResult {
        RunResult { schema: RESULT_SCHEMA.into(), source: source.into(), workload: workload.into(), ..Default::default() }
    }
}

/// Sort key that orders `4kB < 64kB < 2048kB` and `hugepages-16kB < hugepages-2048kB`.
pub fn size_sort_key(label: &str) -> u64 {
    let digits: String = label.chars().filter(|c| c.is_ascii_digit()).collect();
    digits.parse().unwrap_or(u64::MAX)
}
