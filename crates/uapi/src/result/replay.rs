//! `model.replay`: what the replay of a recording modelled, passed through and could not do
//! (`ReplayReport`), the placements it could not reproduce (`PlacementMiss`), each process image
//! (`ReplayProcess`), and what `--salvage` lost (`SalvageReport`).

use super::*;

/// `model.replay`: what the replay of a recording modelled, passed through and could not do.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayReport {
    /// Processes (thread groups) in the recording.
    pub processes: u64,
    /// Process images (a process between its execve and its exit or next execve).
    pub images: u64,
    /// Records replayed.
    pub events: u64,
    /// Page faults recorded.
    pub recorded_faults: u64,
    /// Recorded faults in modelled memory that the model says still fault under the settings.
    pub modelled_faults: u64,
    /// Recorded faults outside the memory the model backs, counted as recorded.
    pub passthrough_faults: u64,
    /// Recorded faults in modelled memory that the model could not resolve (SIGSEGV/SIGBUS in
    /// the model): counted as recorded; they point at a model gap.
    pub unresolved_faults: u64,
    /// Recorded faults inside execve, before its exec snapshot: the program's first execve's
    /// are before its count starts; any other execve's count as recorded (in
    /// `passthrough_faults`).
    pub exec_faults: u64,
    /// Events the recorder lost (trace buffer overruns).
    pub lost_events: u64,
    /// shmem files the replay modelled (memfd, tmpfs files, shared anonymous, /dev/zero).
    pub shmem_files: u64,
    /// write-family calls on shmem files replayed through the model's write path.
    pub shmem_writes: u64,
    /// Calls on shmem files the model cannot replay (truncating cached pages, hole punching,
    /// MAP_PRIVATE file mappings, mremap of shmem): their effect is left out.
    pub shmem_unmodelled: u64,
    /// Files that existed before the program and had data (modelled as 4 KiB pages).
    pub preexisting_files: u64,
    /// Mappings without MAP_FIXED whose placement the model computed under the recording's
    /// knobs, and how many of those gave the recorded address.
    pub placements_checked: u64,
    pub placements_matched: u64,
    /// Mappings placed elsewhere than recorded because the replay's knobs move them.
    pub relocated: u64,
    /// Processes forked without CLONE_VM whose mm the model copied: their faults are modelled.
    pub forked_images: u64,
    /// With a profile's `[host]` (a VM that reports free pages to its host): 4 KiB frames the
    /// replay wrote that the host had dropped (host faults, `time.host_faults`).
    #[serde(default)]
    pub host_faults: u64,
    /// Of `host_faults`, the frames of base pages (order-0 allocations), which a profile's
    /// `base_fault_ns_per_page` prices.
    #[serde(default)]
    pub host_base_faults: u64,
    /// Images whose address space was read at their execve (`exec_maps` records).
    #[serde(default)]
    pub exec_snapshots: u64,
    /// O_DIRECT reads (or parts of one) into memory the model does not back, not pinned (the
    /// pinned ones are the result's `io`).
    #[serde(default)]
    pub direct_reads_unmodelled: u64,
    /// The first 20 mappings the model could not place where the kernel did.
    pub placement_misses: Vec<PlacementMiss>,
    /// Calls that populate memory without faults the recorder sees (MAP_POPULATE, MAP_LOCKED,
    /// MADV_POPULATE_READ/WRITE, mlock, mlock2, mlockall), the GUP faults the model took for
    /// them (in minflt: in the model's VMAs, and in file mappings and the vDSO, which the replay
    /// follows page by page from the recorded faults and fault-around), populates that failed
    /// in the model, and the pages of file mappings and the vDSO they walked.
    pub populate_calls: u64,
    pub populate_faults: u64,
    pub populate_failed: u64,
    pub populate_file_pages: u64,
    /// Calls by which the kernel takes or populates the program's pages without a fault the
    /// recorder sees, which the replay does not model (`vmsplice`, `io_uring_register` of
    /// buffers, `process_vm_writev` into a recorded process): call → times (each kind also a
    /// warning).
    #[serde(default)]
    pub populate_unmodelled: BTreeMap<String, u64>,
    /// What the replay could not model faithfully, one sentence each (also printed on stderr).
    pub warnings: Vec<String>,
    /// `uname -r` of the recording machine.
    pub recorded_kernel: String,
    /// Knobs of the recording's THP tree that the model does not know, path → value.
    pub recorded_settings_unknown: BTreeMap<String, String>,
    /// Knobs the program opened while recorded (paths under /sys/kernel/mm/transparent_hugepage,
    /// `enabled`, `hpage_pmd_size`): what it did may depend on what it read there.
    #[serde(default)]
    pub knobs_read: Vec<String>,
    /// Of those, the ones whose value when recorded differs from the replay's, `knob: recorded
    /// → replayed` (each also a warning).
    #[serde(default)]
    pub knobs_read_differing: Vec<String>,
    /// What the census counts, in words.
    pub census_scope: String,
    /// One entry per process image.
    pub per_process: Vec<ReplayProcess>,
    /// `sim --salvage` of a damaged recording only: what was lost.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub salvage: Option<SalvageReport>,
    /// With `sim --recorded-time`: khugepaged's work on the recording's own timestamps
    /// (`registered`: some mm of the recording joined its list). Absent otherwise: the daemon
    /// did not run.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub khugepaged: Option<ModelKhugepaged>,
}

/// A mapping without MAP_FIXED that the model would place elsewhere than the kernel did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementMiss {
    pub pid: u32,
    /// `private anonymous`, `shared anonymous`, `shmem` or `file`.
    pub backing: String,
    /// Length in bytes.
    pub len: u64,
    /// The mmap address hint, hex `0x...`.
    pub hint: String,
    /// Where the kernel put it, hex `0x...`.
    pub recorded: String,
    /// Where the model would, hex `0x...`, or the errno name when it finds no room.
    pub model: String,
}

/// One process image of a replay, at its exit (before teardown).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayProcess {
    pub pid: u32,
    /// Which image of the replay (0: the recorded program's).
    pub image: u64,
    /// The executable: the recorded program's, or the one an execve's snapshot shows (the
    /// lowest file mapping); empty when unknown.
    pub exe: String,
    /// Its address space was read at its execve (`exec_maps`; a forked image inherits its
    /// parent's), so its stack, heap and ELF mappings are the model's from the start.
    #[serde(default)]
    pub exec_snapshot: bool,
    /// A later execve of its process replaced it: its Rss and census are at that execve, and
    /// the run's census (taken at each process's exit) leaves it out.
    #[serde(default)]
    pub replaced: bool,
    /// Faults the model took in memory it backs.
    pub modelled_faults: u64,
    /// Rss and AnonHugePages of its modelled memory at exit.
    pub rss_bytes: u64,
    pub anon_huge_bytes: u64,
    /// Its largest Rss (VmHWM of the modelled memory).
    pub peak_rss_bytes: u64,
    /// Folio size → folios mapped at exit.
    #[serde(serialize_with = "thp_abi::keys::serialize_by_name")]
    pub folios: BTreeMap<FolioSize, u64>,
    pub census: Census,
}

/// What `--salvage` lost of a damaged recording.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SalvageReport {
    /// The reader's error, with the byte offset where it found the damage.
    pub error: String,
    /// Where the replayed part ends, the first byte not replayed: in a 3.x recording the start
    /// of the damaged block (of the trailer when only the trailer is damaged); in a 1.x or 2.x
    /// recording where the reader found the damage.
    pub offset: u64,
    /// Bytes from `offset` to the end of the file.
    pub bytes_lost: u64,
    pub file_bytes: u64,
    /// Records replayed (read whole before the damage).
    pub records_read: u64,
    /// Records the header counts but were not read; None (null) when the header counts none (a
    /// recorder killed before it finished the file).
    pub records_lost: Option<u64>,
    /// 3.x: the damaged block, numbered from 1; absent when only the trailer is damaged, and
    /// for a 1.x or 2.x recording (no blocks).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub block: Option<u64>,
    /// 3.x: the blocks replayed, each checked by its CRC-32C before any of its records was read.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub blocks_kept: Option<u64>,
    /// The time span of the replayed records, ns after the recording's start (first and last
    /// record); absent when none was replayed.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub kept_from_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub kept_to_ns: Option<u64>,
    /// The recording's duration as its header gives it (0: a recorder that did not finish).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub duration_ns: Option<u64>,
    /// A 1.x or 2.x recording: no block checksums, so the records replayed were not checked
    /// (any of them may be misread, back to where the damage is: the reader finds it later).
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub unchecked: bool,
}
