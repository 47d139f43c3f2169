//! The simulation engine: boot a machine, run a workload, report the kernel's counters.
//!
//! API boundary: [`run`] takes a parsed workload, resolved settings and a machine description and
//! returns a [`uapi::RunResult`]; nothing here reads files, the clock or ambient randomness, so the
//! same inputs give byte-identical output.

use uapi::{RunResult, ThpSettings};
use workload::Workload;

/// The simulated machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineConfig {
    /// Physical memory in bytes (one zone). Default 24 GiB, this machine kind.
    pub mem_bytes: u64,
    /// Top of the mmap area: placement searches top-down below it (`mm->mmap_base`).
    /// Default 0x7dff_fffc_5000: 4 KiB-aligned but not 64 KiB-aligned, as the address below a
    /// real process's libraries is, and free in the live executor.
    pub mmap_base: u64,
    /// Start of the heap (`mm->start_brk`).
    pub brk_start: u64,
}

impl Default for MachineConfig {
    fn default() -> Self {
        MachineConfig { mem_bytes: 24 << 30, mmap_base: 0x7dff_fffc_5000, brk_start: 0x5555_5557_9000 }
    }
}

/// Why a simulation stopped early: the workload did something the kernel would kill it for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}:{line}: {message}")]
pub struct SimError {
    pub source_name: String,
    pub line: usize,
    pub message: String,
}

/// Run `workload` under `settings` on `machine`.
pub fn run(workload: &Workload, settings: &ThpSettings, machine: &MachineConfig) -> Result<RunResult, SimError> {
    let _ = (workload, settings, machine);
    todo!("the model is being written")
}
