//! A machine's free lists as the model lays its own out: the Movable rows of
//! /proc/pagetypeinfo (mm/vmstat.c: `pagetypeinfo_showfree_print`), the blocks free page
//! reporting has reported (mm/page_reporting.c: `page_reporting_process_zone`, `PageReported`
//! in /proc/kpageflags) and one CPU's per-CPU list (`struct per_cpu_pages`, /proc/zoneinfo
//! `count`). The live harness reads them; the model boots from them (`mm::Kernel::
//! enable_page_reporting`); profiles carry them.

use serde::{Deserialize, Serialize};

/// A live machine's free memory as the model lays its own out (`live::host::free_areas`): the
/// free blocks per order (0..=10) a program's pages come from (the Movable rows of
/// /proc/pagetypeinfo, zones summed) and, where /proc/kpageflags tells, how many blocks of each
/// order page reporting has reported (their frames the host has dropped). Without `reported`,
/// every block of `page_reporting_order` and above counts as reported, as after a long idle.
///
/// Free pages also sit on per-CPU lists (`struct per_cpu_pages`, /proc/zoneinfo `count`),
/// which pagetypeinfo leaves out: freed last, never reported, the first an allocation on that
/// CPU takes. A process that exits after writing 1 GiB leaves up to ~900 MiB there (`pcp->high`
/// grows while it frees, and decays by at most 2 016 pages a second: `decay_pcp_high`). With
/// `cpu`, the live run is pinned to that CPU and `pcp` is its list's length, read once the
/// THP-sized pages on it were taken (`live::host::take_cpu_thps`: held over the live run).
///
/// Also written in a live run's result (`live.free_lists`: the lists that run started from).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FreeLists {
    pub free: Vec<u64>,
    pub reported: Option<Vec<u64>>,
    pub cpu: Option<usize>,
    pub pcp: u64,
}
