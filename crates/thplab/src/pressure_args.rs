//! `--memory-max SIZE` and `--swap zram:SIZE|file:SIZE|none` of `thplab record` (issue #28): the
//! program's memcg limit and swap, as `thp_abi::Pressure` (`sim`, `live` and `compare` take the
//! same flags with the machine's, `resolve::MachineArgs`). The live side creates
//! them under the settings guard (`live::pressure`).

use anyhow::Result;
use clap::Args;
use thp_abi::{Pressure, SwapSpec};

#[derive(Args, Clone, Debug, Default)]
pub struct PressureArgs {
    /// Run the workload in a memory cgroup of its own with this limit (cgroup v2 `memory.max`
    /// with `memory.swap.max=max`; v1 `memory.limit_in_bytes`, memsw left unlimited), created
    /// and removed by the settings guard: a SIZE of at least 4M in whole pages, such as 256M.
    /// The result's `live.pressure` has the memcg's counters, the reclaim and swap counters
    /// of /proc/vmstat over the run and the workload's major faults.
    #[arg(long, value_name = "SIZE", value_parser = Pressure::parse_memory_max)]
    pub memory_max: Option<u64>,
    /// Swap for the run, set up and removed by the settings guard: `zram:SIZE` (/dev/zram0,
    /// only when nobody uses it: disksize 0 and not in /proc/swaps), `file:SIZE` (a swap file
    /// in $THPLAB_SWAP_DIR, default /var/tmp), or `none` (the default: whatever swap the
    /// machine has).
    #[arg(long, value_name = "zram:SIZE|file:SIZE|none", value_parser = check_swap)]
    pub swap: Option<String>,
}

fn check_swap(s: &str) -> Result<String, String> {
    SwapSpec::parse(s).map(|_| s.to_string())
}

impl PressureArgs {
    pub fn resolve(&self) -> Result<Pressure> {
        let swap = match &self.swap {
            Some(s) => SwapSpec::parse(s).map_err(anyhow::Error::msg)?,
            None => None,
        };
        Ok(Pressure { memory_max: self.memory_max, swap })
    }
}
