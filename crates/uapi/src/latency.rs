//! Fault latency distributions (issue #28): a fixed-bucket log-linear histogram of ns
//! ([`Histogram`], as HdrHistogram lays its buckets out: exact below 64 ns, then 64 buckets per
//! power of two, so a bucket is at most 1/64 of its values wide) and the percentiles a result
//! reports of it ([`LatencySummary`], [`FaultLatency`]). The model records each fault's priced
//! time in one (`sim::driver`); the live executor each timed first touch (`live::executor`).
//! Recording is one index computation and one increment: no allocation on the fault path.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// log2 of the buckets per power of two.
const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;
/// Values are clamped below 2^MAX_EXP ns (about 1100 s).
const MAX_EXP: u32 = 40;
/// Buckets: SUB exact ones, then SUB for each power of two from 2^SUB_BITS to 2^(MAX_EXP-1).
pub const BUCKETS: usize = (SUB + (MAX_EXP - SUB_BITS) as u64 * SUB) as usize;

/// A log-linear histogram of ns values with the exact count, sum, min and max beside it.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    counts: Box<[u64; BUCKETS]>,
    count: u64,
    sum: f64,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: Box::new([0; BUCKETS]), count: 0, sum: 0.0, min: u64::MAX, max: 0 }
    }
}

/// The bucket of `v`: `v` itself below 64; else, for v in [2^e, 2^(e+1)), the 64 + (e − 6) ×
/// 64 + the 6 bits below v's top bit.
pub fn bucket(v: u64) -> usize {
    let v = v.min((1 << MAX_EXP) - 1);
    if v < SUB {
        return v as usize;
    }
    let e = 63 - v.leading_zeros();
    let sub = (v >> (e - SUB_BITS)) - SUB;
    (SUB + (e - SUB_BITS) as u64 * SUB + sub) as usize
}

/// The highest value of bucket `i` (what a percentile in it reports, as HdrHistogram's
/// `highestEquivalentValue`).
pub fn bucket_high(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let e = (i - SUB) / SUB + SUB_BITS as u64;
    let sub = (i - SUB) % SUB;
    ((SUB + sub) << (e - SUB_BITS as u64)) + (1 << (e - SUB_BITS as u64)) - 1
}

impl Histogram {
    /// Count one value of `ns`.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.counts[bucket(ns)] += 1;
        self.count += 1;
        self.sum += ns as f64;
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
    }

    /// Values counted.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Add another histogram's counts.
    pub fn merge(&mut self, o: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(o.counts.iter()) {
            *a += b;
        }
        self.count += o.count;
        self.sum += o.sum;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }

    /// The value at percentile `p` (0..=100): the highest value of the bucket holding the
    /// value of rank ⌈p/100 × count⌉ (at least 1), at most the exact max; 0 when empty.
    pub fn percentile(&self, p: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((p / 100.0 * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return bucket_high(i).min(self.max);
            }
        }
        self.max
    }

    /// count, p50, p99, max and mean; None when empty.
    pub fn summary(&self) -> Option<LatencySummary> {
        (self.count > 0).then(|| LatencySummary {
            count: self.count,
            p50_ns: self.percentile(50.0),
            p99_ns: self.percentile(99.0),
            max_ns: self.max,
            mean_ns: (self.sum / self.count as f64 * 10.0).round() / 10.0,
        })
    }

    /// The non-empty buckets as (bucket index, count): what the live child sends its parent.
    pub fn nonzero(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.counts.iter().enumerate().filter(|(_, &n)| n > 0).map(|(i, &n)| (i, n))
    }

    /// Count `n` values in bucket `i` (the other side of [`Histogram::nonzero`]); the sum, min
    /// and max take the bucket's highest value.
    pub fn add_bucket(&mut self, i: usize, n: u64) {
        let v = bucket_high(i.min(BUCKETS - 1));
        self.counts[i.min(BUCKETS - 1)] += n;
        self.count += n;
        self.sum += v as f64 * n as f64;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }
}

impl Histogram {
    /// Empty it (keeping its buckets' memory: no allocation).
    pub fn clear(&mut self) {
        self.counts.iter_mut().for_each(|c| *c = 0);
        (self.count, self.sum, self.min, self.max) = (0, 0.0, u64::MAX, 0);
    }

    /// Add the `n` highest values counted here to `into`, at their buckets' highs, the
    /// highest at the exact max: what a statement's slowest `n` touches were.
    pub fn highest_into(&self, n: u64, into: &mut Histogram) {
        let mut left = n.min(self.count);
        if left == 0 {
            return;
        }
        let max_before = into.max;
        for i in (0..BUCKETS).rev() {
            let take = self.counts[i].min(left);
            if take > 0 {
                into.add_bucket(i, take);
                left -= take;
            }
            if left == 0 {
                break;
            }
        }
        // The top bucket's high stands for the exact max in the sum and the max.
        let top = bucket_high(bucket(self.max));
        into.sum -= (top - self.max) as f64;
        into.max = max_before.max(self.max);
    }
}

/// A distribution's summary: how many values, their median, 99th percentile (bucket highs:
/// within 1/64 above the exact value), exact max, and mean (to 0.1), in ns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
}

/// Fault latency: every fault together (`all`) and by what the fault mapped (`sizes`: a
/// folio size label such as `4kB` or `2048kB`, `zero` for the zero page, `swapin 64kB` for a
/// major fault that read a folio of that size from swap; the model only: live cannot tell a
/// fault's folio size from its time).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FaultLatency {
    pub all: LatencySummary,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sizes: BTreeMap<String, LatencySummary>,
    /// How it was measured (the model: priced with the profile; live: the method).
    pub source: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_exact_below_64_then_64_per_power_of_two() {
        assert_eq!((bucket(0), bucket(63), bucket(64), bucket(127)), (0, 63, 64, 127));
        // 128..=129 share a bucket (width 2 between 128 and 255): 64 + 64 + 0.
        assert_eq!((bucket(128), bucket(129), bucket(130)), (128, 128, 129));
        assert_eq!((bucket_high(128), bucket_high(129)), (129, 131));
        // 1000 = 0b1111101000: e = 9, the 6 bits below the top: 0b111101 = 61 → 64 + 3·64 + 61.
        assert_eq!(bucket(1000), 64 + 3 * 64 + 61);
        // That bucket holds 1000..=1007 (width 8).
        assert_eq!(bucket_high(bucket(1000)), 1007);
        assert_eq!(bucket(1008), bucket(1000) + 1);
        for v in [1u64, 100, 4095, 4096, 170_000, 3_000_000_000] {
            let h = bucket_high(bucket(v));
            assert!(h >= v && (h - v) as f64 <= v as f64 / 64.0, "{v} → {h}");
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    /// 100 values 1..=100 ns (exact buckets): p50 is the 50th value, p99 the 99th, max 100.
    /// Then one 10 ms stall among 99 faults of 1500 ns: p50 and p99 are the common fault's bucket
    /// high (2^10..2^11 has buckets of 2^(10−6) = 16: 1500 is in 1488..=1503), max the exact
    /// stall.
    #[test]
    fn percentiles_derived_by_hand() {
        let mut h = Histogram::default();
        for v in 1..=100 {
            h.record(v);
        }
        let s = h.summary().unwrap();
        assert_eq!((s.count, s.p50_ns, s.p99_ns, s.max_ns, s.mean_ns), (100, 50, 99, 100, 50.5));
        let mut f = Histogram::default();
        for _ in 0..99 {
            f.record(1500);
        }
        f.record(10_000_000);
        let s = f.summary().unwrap();
        assert_eq!((s.p50_ns, s.p99_ns, s.max_ns), (1503, 1503, 10_000_000));
        assert_eq!(f.percentile(100.0), 10_000_000);
        // Two stalls in 100: the 99th value is a stall, reported as its bucket high capped at max.
        f.record(10_000_000);
        assert_eq!(f.percentile(99.0), 10_000_000);
        assert!(Histogram::default().summary().is_none());
    }

    #[test]
    fn buckets_round_trip_through_nonzero_and_merge() {
        let mut a = Histogram::default();
        [5u64, 5, 700, 90_000].iter().for_each(|&v| a.record(v));
        let mut b = Histogram::default();
        a.nonzero().for_each(|(i, n)| b.add_bucket(i, n));
        assert_eq!((b.count(), b.percentile(50.0), b.percentile(100.0)), (4, 5, bucket_high(bucket(90_000))));
        b.merge(&a);
        assert_eq!(b.count(), 8);
    }

    /// A statement of 6 touches, 2 of which faulted (minflt grew by 2): the 2 slowest are the
    /// faults, the highest at its exact value.
    #[test]
    fn the_slowest_touches_are_the_faults() {
        let mut scratch = Histogram::default();
        [20u64, 25, 30, 1600, 22, 170_001].iter().for_each(|&v| scratch.record(v));
        let mut faults = Histogram::default();
        scratch.highest_into(2, &mut faults);
        let s = faults.summary().unwrap();
        // 1600 is in 1600..=1615 (width 16 in 1024..2047); p50 is the lower of the two.
        assert_eq!((s.count, s.p50_ns, s.max_ns), (2, 1615, 170_001));
        assert_eq!(s.mean_ns, (1615.0 + 170_001.0) / 2.0);
        scratch.clear();
        assert_eq!((scratch.count(), scratch.percentile(50.0)), (0, 0));
        scratch.highest_into(5, &mut faults);
        assert_eq!(faults.count(), 2, "nothing to take from an empty one");
    }
}
