//! Which pages a `touch` visits, in which order. Shared by the model and the live executor so
//! that both access the same pages in the same order.

use mm_types::prng::Prng;
use mm_types::PAGE_SIZE;

use crate::{Pace, Touch, TouchOrder};

/// The byte offsets (inside the region) of the pages a touch visits. Each selected page is
/// accessed once, at its first byte inside the range.
pub struct TouchPlan {
    start: u64,
    end: u64,
    stride: u64,
    n: u64,
    order: TouchOrder,
    perm: Vec<u32>,
}

impl TouchPlan {
    /// `base_offset` is added to every offset (pass the region's address to get addresses).
    pub fn new(t: &Touch, base_offset: u64) -> TouchPlan {
        let start = base_offset + t.range.offset;
        let end = start + t.range.len;
        let first_page = start / PAGE_SIZE * PAGE_SIZE;
        let span = end.saturating_sub(first_page);
        let selected = if t.range.len == 0 { 0 } else { span.div_ceil(t.stride) };
        let n = t.count.map_or(selected, |c| c.min(selected));
        let mut perm = Vec::new();
        if let TouchOrder::Random { seed } = t.order {
            perm = (0..selected as u32).collect();
            Prng::new(seed).shuffle(&mut perm);
            perm.truncate(n as usize);
        }
        TouchPlan { start, end, stride: t.stride, n, order: t.order, perm }
    }

    pub fn len(&self) -> u64 {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// `(first, stride)` when the accesses are `first + i * stride` for `i` in `0..len()`
    /// (sequential order from a page-aligned start), so a consumer may walk them in batches.
    pub fn ascending(&self) -> Option<(u64, u64)> {
        (matches!(self.order, TouchOrder::Sequential) && self.start % PAGE_SIZE == 0).then_some((self.start, self.stride))
    }

    /// The address of the `i`-th access.
    pub fn get(&self, i: u64) -> u64 {
        let first_page = self.start / PAGE_SIZE * PAGE_SIZE;
        let k = match self.order {
            TouchOrder::Sequential => i,
            TouchOrder::Reverse => {
                let selected = (self.end - first_page).div_ceil(self.stride);
                selected - 1 - i
            }
            TouchOrder::Random { .. } => self.perm[i as usize] as u64,
        };
        (first_page + k * self.stride).max(self.start)
    }

    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.n).map(move |i| self.get(i))
    }
}

/// The schedule of a paced touch (`rate=` or `duration=`), shared by the model and the live
/// executor: the plan's pages are visited in order in chunks of [`Pacing::chunk_pages`] (the
/// pages of about [`Pacing::CHUNK_NS`] at the rate, at least one), and the chunk that starts
/// with page `i` may not start before the touch's start + [`Pacing::offset_ns`]`(i)`; after the
/// last chunk the touch waits until `offset_ns(len)`, the whole touch's time. A side that falls
/// behind goes on at once (flat out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pacing {
    pages: u64,
    chunk: u64,
    pace: Pace,
}

impl Pacing {
    /// The time one chunk aims at.
    pub const CHUNK_NS: u64 = 1_000_000;

    /// The schedule of `pages` selected pages (`TouchPlan::len`) at `pace`.
    pub fn new(pace: Pace, pages: u64) -> Pacing {
        let per_chunk: u128 = match pace {
            // Pages of CHUNK_NS at the rate, rounded: bytes/s × 1 ms / 4 KiB.
            Pace::Rate { bytes_per_sec } => {
                let d = PAGE_SIZE as u128 * 1_000_000_000 / Self::CHUNK_NS as u128;
                (bytes_per_sec as u128 + d / 2) / d
            }
            Pace::Duration { ns } => (pages as u128 * Self::CHUNK_NS as u128 + ns as u128 / 2) / (ns as u128).max(1),
        };
        Pacing { pages, chunk: (per_chunk.min(u64::MAX as u128) as u64).max(1), pace }
    }

    /// Pages per chunk (at least 1).
    pub fn chunk_pages(&self) -> u64 {
        self.chunk
    }

    /// Chunks of the touch.
    pub fn chunks(&self) -> u64 {
        self.pages.div_ceil(self.chunk)
    }

    /// When, in ns after the touch started, the page with index `done` may be touched: `done`
    /// pages at the rate (`offset_ns(len)` is the whole touch's time).
    pub fn offset_ns(&self, done: u64) -> u64 {
        let ns: u128 = match self.pace {
            Pace::Rate { bytes_per_sec } => done as u128 * PAGE_SIZE as u128 * 1_000_000_000 / (bytes_per_sec as u128).max(1),
            Pace::Duration { ns } => done as u128 * ns as u128 / (self.pages as u128).max(1),
        };
        ns.min(u64::MAX as u128) as u64
    }
}
