//! A run's memory pressure as the user gives it: a memory cgroup's limit (`--memory-max SIZE`:
//! cgroup v2 `memory.max`, cgroup v1 `memory.limit_in_bytes`) and the swap behind it (`--swap
//! zram:SIZE|file:SIZE|none`: a zram device's `disksize` or a swap file's size, as `swapon`
//! gives it to mm/swapfile.c `SYSCALL_DEFINE2(swapon)`).
//!
//! The model (`sim::MachineConfig`) and the live harness (`live`, which creates the memcg and
//! the swap device under the settings guard) read the same values. No I/O here.

use serde::{Deserialize, Serialize};

use crate::counters::ReclaimEvent;

/// What backs swap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SwapKind {
    /// A zram device (drivers/block/zram): a synchronous device (`SWP_SYNCHRONOUS_IO`), so
    /// swap-in skips the swap cache and may bring mTHPs back whole (mm/memory.c `do_swap_page`).
    Zram,
    /// A swap file on a filesystem (through a loop device or directly): asynchronous, read ahead.
    File,
}

/// A swap device of `bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwapSpec {
    pub kind: SwapKind,
    pub bytes: u64,
}

impl SwapSpec {
    /// `zram:SIZE`, `file:SIZE` or `none` (sizes as the workload language writes them: 512M, 4G).
    pub fn parse(text: &str) -> Result<Option<SwapSpec>, String> {
        let t = text.trim();
        if t == "none" {
            return Ok(None);
        }
        let valid = "give zram:SIZE, file:SIZE or none, such as zram:4G";
        let (kind, size) = t.split_once(':').ok_or_else(|| format!("swap '{t}': {valid}"))?;
        let kind = match kind {
            "zram" => SwapKind::Zram,
            "file" => SwapKind::File,
            k => return Err(format!("swap '{t}': '{k}' is not a kind of swap; {valid}")),
        };
        let bytes = mm_types::parse_size(size)
            .filter(|b| *b >= 1 << 20 && b % 4096 == 0)
            .ok_or_else(|| format!("swap '{t}': '{size}' is not a size of at least 1M in whole pages; {valid}"))?;
        Ok(Some(SwapSpec { kind, bytes }))
    }

    /// The spelling [`SwapSpec::parse`] reads.
    pub fn spelling(spec: Option<&SwapSpec>) -> String {
        match spec {
            None => "none".into(),
            Some(s) => {
                let kind = match s.kind {
                    SwapKind::Zram => "zram",
                    SwapKind::File => "file",
                };
                format!("{kind}:{}", mm_types::format_size(s.bytes))
            }
        }
    }
}

/// The /proc/vmstat lines of reclaim and swap that a result under pressure carries in its
/// `vmstat`, model and live alike (so `compare` sets them side by side), each a
/// [`ReclaimEvent`] (include/linux/vm_event_item.h, mm/vmstat.c `vmstat_text` spell them).
pub const RESULT_RECLAIM: [ReclaimEvent; 8] = [
    ReclaimEvent::Pswpin,
    ReclaimEvent::Pswpout,
    ReclaimEvent::Pgmajfault,
    ReclaimEvent::PgscanAnon,
    ReclaimEvent::PgstealAnon,
    ReclaimEvent::Pgactivate,
    ReclaimEvent::Pgdeactivate,
    ReclaimEvent::OomKill,
];

/// A run's memory pressure: its memcg's limit and its swap. The default is none: no limit, no swap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pressure {
    /// `--memory-max`: the memcg's limit in bytes (`memory.max`; v1 `memory.limit_in_bytes`).
    pub memory_max: Option<u64>,
    /// `--swap`: the swap device the run may use.
    pub swap: Option<SwapSpec>,
}

impl Pressure {
    /// `--memory-max SIZE`: at least 4M and whole pages.
    pub fn parse_memory_max(text: &str) -> Result<u64, String> {
        mm_types::parse_size(text)
            .filter(|b| *b >= 4 << 20 && b % 4096 == 0)
            .ok_or_else(|| format!("memory-max '{text}': give a size of at least 4M in whole pages, such as 512M"))
    }

    /// No limit and no swap: the machine never runs short (every result before memory pressure).
    pub fn is_none(&self) -> bool {
        self.memory_max.is_none() && self.swap.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swap_specs_parse_and_spell_back() {
        assert_eq!(SwapSpec::parse("none"), Ok(None));
        let z = SwapSpec::parse("zram:4G").unwrap().unwrap();
        assert_eq!(z, SwapSpec { kind: SwapKind::Zram, bytes: 4 << 30 });
        assert_eq!(SwapSpec::spelling(Some(&z)), "zram:4G");
        let f = SwapSpec::parse("file:512M").unwrap().unwrap();
        assert_eq!((f.kind, f.bytes), (SwapKind::File, 512 << 20));
        assert_eq!(SwapSpec::spelling(None), "none");
    }

    #[test]
    fn bad_swap_and_limits_say_what_is_valid() {
        assert!(SwapSpec::parse("disk:4G").unwrap_err().contains("'disk' is not a kind of swap"));
        assert!(SwapSpec::parse("zram").unwrap_err().contains("zram:SIZE, file:SIZE or none"));
        assert!(SwapSpec::parse("zram:12K").unwrap_err().contains("at least 1M"));
        assert_eq!(Pressure::parse_memory_max("512M"), Ok(512 << 20));
        assert!(Pressure::parse_memory_max("1M").unwrap_err().contains("at least 4M"));
        assert!(Pressure::default().is_none());
    }
}
