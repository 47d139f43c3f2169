//! The machine profile: what this machine's kernel and hardware charge for the work the model
//! counts, as a small TOML file.
//!
//! The model core stays clockless: `mm` reports the work an operation did (orders allocated,
//! pages zeroed or copied, pages pinned, accesses), and a consumer turns that work into time with
//! a profile. Each capability owns one section, so the file grows by sections without breaking
//! older profiles (every section is optional and every field in a section has a documented unit):
//!
//! | section | filled by | what |
//! |---|---|---|
//! | `[machine]` | everyone | where and when the profile was measured |
//! | `[pin]` | `thplab bench io` (issue #12) | pin_user_pages/unpin cost per folio and per page |
//! | `[tlb]` | `thplab calibrate` (issue #11) | TLB/walk preset and nested paging |
//! | `[fault]` | `thplab calibrate` (issue #10) | per-order fault, zeroing and copy costs |
//!
//! A section a profile lacks means "not measured": consumers say so instead of inventing a cost.

use serde::{Deserialize, Serialize};

/// The text of [`MachineProfile::builtin`].
pub const BUILTIN: &str = include_str!("../profiles/builtin.toml");

/// Largest profile file accepted (a profile is a few hundred bytes).
pub const MAX_PROFILE_BYTES: usize = 1 << 20;

/// Where the profile was measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineInfo {
    /// Free text: host name or machine kind.
    #[serde(default)]
    pub name: String,
    /// `uname -r` of the kernel it was measured on.
    #[serde(default)]
    pub kernel: String,
}

/// A machine profile (see the module documentation for its sections).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineProfile {
    #[serde(default)]
    pub machine: MachineInfo,
    /// `[fault]`: what a page fault costs per folio size (absent: not measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<FaultCosts>,
}

/// `[fault]`: wall time per page fault of each folio size, as `thplab calibrate` measures it
/// (a fresh private anonymous range written one byte per 4 KiB page, under settings that give
/// every fault that size: mm/memory.c: do_anonymous_page, alloc_anon_folio; mm/huge_memory.c:
/// do_huge_pmd_anonymous_page). A fault's time includes its exception, the allocation, the
/// zeroing of the folio and the page-table work, so the model charges
/// `Σ faults(size) × ns_per_fault[size] + touched pages × touch_ns_per_page + calls ×
/// syscall_ns`, where the pages of a large folio after its first are touched without a fault.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultCosts {
    /// Size label (`4kB`, `16kB`, ..., `2048kB`) → ns per fault that allocated a folio of
    /// that size (write faults).
    pub ns_per_fault: std::collections::BTreeMap<String, f64>,
    /// ns per read fault that maps the shared zero page.
    #[serde(default)]
    pub zero_page_read_ns: f64,
    /// ns per touch of a page already mapped (one byte written per 4 KiB page).
    #[serde(default)]
    pub touch_ns_per_page: f64,
    /// ns per memory-management system call (mmap and munmap of one page, averaged).
    #[serde(default)]
    pub syscall_ns: f64,
    /// How it was measured.
    #[serde(default)]
    pub source: String,
}

impl FaultCosts {
    /// ns of one fault of `size` (a label such as `64kB`); None when it was not measured.
    pub fn fault_ns(&self, size: &str) -> Option<f64> {
        self.ns_per_fault.get(size).copied()
    }
}

/// A profile that could not be read: the message names the line and what is valid.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ProfileError(String);

impl MachineProfile {
    /// Parses a profile from TOML text; `source` names the file in errors.
    pub fn parse(source: &str, text: &str) -> Result<Self, ProfileError> {
        if text.len() > MAX_PROFILE_BYTES {
            return Err(ProfileError(format!(
                "{source}: {} bytes is too large for a machine profile (at most {MAX_PROFILE_BYTES})",
                text.len()
            )));
        }
        toml::from_str(text).map_err(|e| ProfileError(format!("{source}: {e}")))
    }

    /// The profile measured on this project's machine kind (a 2-vCPU VM running Linux 6.18,
    /// whose host backs guest memory with 4 KiB pages), by `thplab calibrate`.
    pub fn builtin() -> Self {
        Self::parse("builtin profile", BUILTIN).expect("the built-in profile parses")
    }

    /// The profile as TOML text, as `thplab calibrate` writes it.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a profile always serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_names_the_bad_line() {
        let p = MachineProfile {
            machine: MachineInfo { name: "vm".into(), kernel: "6.18.44".into() },
            fault: Some(FaultCosts {
                ns_per_fault: [("4kB".to_string(), 900.0), ("2048kB".to_string(), 90_000.0)].into(),
                zero_page_read_ns: 600.0,
                touch_ns_per_page: 20.0,
                syscall_ns: 1500.0,
                source: "test".into(),
            }),
        };
        assert_eq!(MachineProfile::parse("p.toml", &p.to_toml()).unwrap(), p);
        let err = MachineProfile::parse("p.toml", "[machine]\nnme = \"x\"\n").unwrap_err().to_string();
        assert!(err.starts_with("p.toml: ") && err.contains("line 2") && err.contains("nme"), "{err}");
    }
}
