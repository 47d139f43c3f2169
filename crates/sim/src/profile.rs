//! What a run is priced and observed with, in one type ([`Profile`]): the TLB model that
//! accesses drive (`--cpu`, `--paging`, `--order0-scatter`, else a machine profile's `[tlb]`),
//! the `[fault]` costs that move the clock, the `[host]` costs with the free lists the
//! machine's memory is laid out by (mm/page_reporting.c `page_reporting_process` decides which
//! free frames the host backs), the `[pin]` costs of direct I/O, the sampling interval of the
//! timeline, and a recording's accesses. A workload's run ([`crate::RunOptions`]) and a
//! recording's replay ([`crate::ReplayOptions`]) carry one; `experiment::resolve::profile`
//! builds it once from the command line and the `--profile` file.

use std::sync::Arc;

use uapi::profile::{FaultCosts, FreeLists, HostCosts, PinCosts};

/// The TLB model's preset and paging mode.
pub type TlbSetup = (&'static tlb::CpuPreset, tlb::Paging);

/// What a run is priced and observed with. The default prices nothing, samples nothing and
/// sets up the TLB model only for a workload's `access` statements (zen4, native).
#[derive(Clone, Debug, Default)]
pub struct Profile {
    /// `--cpu` and `--paging` (else the profile's `[tlb]`): the TLB model that `access`
    /// statements and a recording's accesses drive (`None`: zen4, native, where there are any).
    pub tlb: Option<TlbSetup>,
    /// `--order0-scatter S` (else the profile's `[tlb]`): under nested paging, how scattered the
    /// guest-physical frames of base pages are for the TLB model's host walks (0: as the model
    /// allocates them; 1: each in a host page-table line of its own, as on a machine that has
    /// run for hours).
    pub order0_scatter: f64,
    /// The profile's `[fault]` costs: a workload's every step is priced, so that the clock moves
    /// with the work (`driver`) and the result has `time`; a recording's time is estimated from
    /// its totals (`time::recording`).
    pub costs: Option<FaultCosts>,
    /// The profile's `[host]` (a VM that reports free pages to its host), with the free lists
    /// to lay the machine's memory out by (a live row of Movable free lists,
    /// `live::host::free_areas`; `None`: the profile's): `driver::Machine::set_host`,
    /// `replay::Replay::enable_host`. Set only where the run is priced (`costs`).
    pub host: Option<(HostCosts, Option<FreeLists>)>,
    /// The profile's `[pin]` costs: what the run's `read_direct` reads cost to pin and unpin
    /// (`io.pin_ns`), priced after the run from its pin counts (`PinCosts::pin_ns`).
    pub pin: Option<PinCosts>,
    /// `--sample MS`: the result's `timeline`, a sample every MS ms of simulated time (of a
    /// recording: with its recorded time).
    pub sample_ms: Option<u64>,
    /// `--latency`: with `costs`, each fault's priced time goes into the result's
    /// `time.latency` (p50, p99, max per folio size: `crate::latency`).
    pub latency: bool,
    /// A recording's accesses (`record --accesses`), replayed through the TLB model of `tlb`.
    pub accesses: Option<RecordedAccessInput>,
    /// `--host SETTING...`: a modelled VM host under the guest (`crate::host`, model-only);
    /// `--policy fhpm` implies one. `None`: no host, every result as before.
    pub vm_host: Option<crate::host::HostConfig>,
}

/// A recording's accesses (its companion file, `trace::accesses`), which the replay drives the
/// TLB model of [`Profile::tlb`] with.
#[derive(Clone, Debug)]
pub struct RecordedAccessInput {
    /// The companion file's name, for the result.
    pub file: String,
    pub trace: Arc<trace::accesses::AccessTrace>,
}

impl Profile {
    /// The TLB model's preset and paging: [`Profile::tlb`], else zen4 and native paging.
    pub fn tlb_or_default(&self) -> TlbSetup {
        self.tlb.unwrap_or((&tlb::presets::ZEN4, tlb::Paging::Native))
    }

    /// This profile with the host's free lists replaced (`free`: every frame reported, or the
    /// lists a live run started from), where it has a `[host]`.
    pub fn with_free_lists(&self, free: Option<FreeLists>) -> Profile {
        Profile { host: self.host.as_ref().map(|(h, _)| (h.clone(), free)), ..self.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_tlb_is_zen4_native_and_free_lists_replace_only_a_host() {
        let p = Profile::default();
        let (cpu, paging) = p.tlb_or_default();
        assert_eq!((cpu.name, paging), ("zen4", tlb::Paging::Native));
        assert!(p.with_free_lists(Some(FreeLists::default())).host.is_none(), "no [host]: nothing to lay out");
        let h = Profile { host: Some((HostCosts::default(), None)), sample_ms: Some(5), ..Default::default() };
        let f = h.with_free_lists(Some(FreeLists::default()));
        assert_eq!(f.host.as_ref().map(|(_, free)| free.is_some()), Some(true));
        assert_eq!(f.sample_ms, Some(5), "the rest is kept");
    }
}
