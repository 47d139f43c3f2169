//! The TLB model's report of a run's accesses (`AccessReport`, `AccessCounts`), and of a
//! recording's recorded accesses (`RecordedAccesses`).

use super::*;

/// The TLB model's report of a run's `access` statements.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AccessReport {
    /// The `--cpu` preset and `--paging` mode.
    pub cpu: String,
    pub paging: String,
    /// The preset's clock, for the ns estimate.
    pub ghz: f64,
    /// CPUs whose TLBs the accesses went through: each thread of a workload that makes
    /// accesses runs on a CPU of its own (1: main only, or a recording). Counts are summed
    /// over them, and so are cycles and ns (CPU time, not wall time).
    #[serde(default)]
    pub cpus: u64,
    pub regions: Vec<AccessCounts>,
    pub total: AccessCounts,
    /// A recording's accesses (`record --accesses`): what was recorded and what the replay did
    /// with it; absent for a workload's `access` statements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<RecordedAccesses>,
}

/// The accesses of a recording (`thplab record --accesses`, FILE.accesses) and their replay.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordedAccesses {
    /// The companion file.
    pub file: String,
    /// Data accesses of the run under valgrind, mapped or not, and of them writes.
    pub raw_accesses: u64,
    pub raw_writes: u64,
    /// Runs in the file (accesses in a row to one page).
    pub runs: u64,
    /// Accesses (and writes) the recorder could not map onto the recorded run: not replayed.
    pub unmapped_accesses: u64,
    pub unmapped_writes: u64,
    /// The run under valgrind, and the native run it is compared with, in ns.
    pub valgrind_ns: u64,
    pub native_ns: u64,
    /// Memory system calls of the run under valgrind, and how many were matched to recorded ones.
    pub valgrind_syscalls: u64,
    pub matched_syscalls: u64,
    /// Accesses replayed on memory the model backs (through its page tables: young and dirty
    /// bits), on mappings it keeps as placeholders (file mappings, the vDSO: looked up as 4 KiB
    /// pages), and not replayed (no mapping at that address in the model, or the process had
    /// left the recorded image).
    pub modelled: u64,
    pub placeholder: u64,
    pub not_replayed: u64,
    /// Accesses to a page the model had not mapped at the end of their interval (between two
    /// matched calls), not replayed: an access never faults in the replay, the recording's
    /// faults being the program's (the run under valgrind touches some pages the native run
    /// did not: its stack deeper, its heap laid out a little otherwise).
    #[serde(default)]
    pub not_present: u64,
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
