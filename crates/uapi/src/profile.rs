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
        };
        assert_eq!(MachineProfile::parse("p.toml", &p.to_toml()).unwrap(), p);
        let err = MachineProfile::parse("p.toml", "[machine]\nnme = \"x\"\n").unwrap_err().to_string();
        assert!(err.starts_with("p.toml: ") && err.contains("line 2") && err.contains("nme"), "{err}");
    }
}
