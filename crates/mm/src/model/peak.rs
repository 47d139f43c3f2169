//! The process at its largest Rss: the model keeps the figure the kernel's `mm->hiwater_rss`
//! keeps (`include/linux/mm.h: update_hiwater_rss`, read as VmHWM in /proc/PID/status), and
//! besides it a census taken near that moment, so that a program that frees its memory before
//! it exits still shows which folio sizes it had.
//!
//! Cost: nothing on the fault path. Rss only falls when mappings are zapped, so, as the kernel
//! updates hiwater_rss in `unmap_vmas`/`exit_mmap` before zapping, [`Kernel::note_rss_peak`] runs
//! before every zap of munmap, exit, mremap and MADV_DONTNEED/MADV_FREE; it compares two numbers
//! and takes a census only when Rss has grown by a sixteenth since the last one (so the censuses
//! of a run cost at most about 17 times the last one). The largest `nr_anon` of every size is
//! kept exactly where a large folio is first mapped (`folio_add_new_anon_rmap`).

use mm_types::{Order, PMD_ORDER};
use thp_abi::MthpStat;

use crate::debug::CensusReport;
use crate::Kernel;

/// What the run looked like at its largest Rss.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeakState {
    /// `hiwater_rss`: the largest Rss (anonymous and shmem pages mapped), in pages.
    pub rss_pages: u64,
    /// The latest census taken before a zap, with the Rss (pages) it was taken at.
    pub census: Option<(u64, CensusReport)>,
    /// The largest `nr_anon` of each order.
    pub max_nr_anon: [u64; PMD_ORDER as usize + 1],
}

impl Kernel {
    /// Rss now: anonymous and shmem pages mapped (MM_ANONPAGES + MM_SHMEMPAGES).
    pub fn rss_pages(&self) -> u64 {
        self.mm.stats.anon_rss_pages + self.mm.stats.shmem_rss_pages
    }

    /// `update_hiwater_rss`, before something may lower Rss; and a census when Rss grew by a
    /// sixteenth since the last.
    pub(crate) fn note_rss_peak(&mut self) {
        let rss = self.rss_pages();
        if rss <= self.mm.stats.peak.rss_pages {
            return;
        }
        self.mm.stats.peak.rss_pages = rss;
        let last = self.mm.stats.peak.census.as_ref().map_or(0, |(r, _)| *r);
        if rss > last + last / 16 {
            let c = self.census_of_all();
            self.mm.stats.peak.census = Some((rss, c));
        }
    }

    /// The census of every VMA the model backs.
    pub fn census_of_all(&self) -> CensusReport {
        let ranges: Vec<(u64, u64)> = self.vmas().filter(|v| v.is_modelled()).map(|v| (v.start, v.end)).collect();
        self.census(&ranges)
    }

    /// `nr_anon` of `order` went up: keep its largest value.
    #[inline]
    pub(crate) fn note_nr_anon(&mut self, order: Order) {
        let n = self.counters.mthp(order, MthpStat::NrAnon).max(0) as u64;
        let m = &mut self.mm.stats.peak.max_nr_anon[order.0 as usize];
        if n > *m {
            *m = n;
        }
    }

    /// The peak, final: Rss now may be the largest (nothing was freed since), and then the
    /// census now is the census at the peak. Returns (peak Rss in pages, census at the peak,
    /// largest `nr_anon` per order).
    pub fn peak(&self) -> (u64, CensusReport, [u64; PMD_ORDER as usize + 1]) {
        let rss = self.rss_pages();
        let peak = self.mm.stats.peak.rss_pages.max(rss);
        let census = match &self.mm.stats.peak.census {
            Some((at, c)) if *at > rss => c.clone(),
            _ => self.census_of_all(),
        };
        (peak, census, self.mm.stats.peak.max_nr_anon)
    }
}
