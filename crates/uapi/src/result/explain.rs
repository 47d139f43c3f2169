//! `--explain`: the faults in a range and what each larger order met (`Explain`,
//! `ExplainedFault`).

use super::*;

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
    #[serde(serialize_with = "thp_abi::keys::serialize_by_name")]
    pub totals: BTreeMap<SizeDir, BTreeMap<FallbackKey, u64>>,
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
