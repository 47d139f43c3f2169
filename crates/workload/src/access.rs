//! Access streams (`access RANGE PATTERN ...`): the byte offsets, in order, that a stream of
//! loads and stores visits inside a range, for the TLB model (sim) and the live chase benchmark.
//!
//! Every pattern draws from [`mm_types::prng::Prng`] seeded by the statement's `seed`, so the
//! model and a live run visit the same offsets. Offsets are multiples of `elem` (the size of one
//! accessed item, 64 bytes by default: a cache line).
//!
//! - `seq`: items in address order, wrapping around.
//! - `stride`: every `stride` bytes, wrapping around.
//! - `uniform`: independent uniform draws over the items.
//! - `gaussian`: a normal distribution of byte offsets around `median` with `stddev` (Marsaglia's
//!   polar method, redrawn outside the range), as memtier_benchmark's G pattern.
//! - `zipf`: rank r (0 hottest) with probability ∝ 1/(r+1)^s, drawn by inverting the continuous
//!   power law (an approximation of the discrete law); rank r is item r, so hot items sit at the
//!   start of the range.
//! - `chase`: a dependent pointer chase: one random cycle through all items (a bijective
//!   scramble of the item index over the next power of two, walking past values out of range), so
//!   each load's address comes from the previous one and no item repeats before all were visited.

use mm_types::prng::Prng;

use crate::Range;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Pattern {
    Seq,
    Stride(u64),
    Uniform,
    Gaussian { median: u64, stddev: u64 },
    /// Exponent in thousandths (`s=1.2` is 1200).
    Zipf { s_milli: u32 },
    Chase,
}

impl Pattern {
    pub const WORDS: [&'static str; 6] = ["seq", "stride", "uniform", "gaussian", "zipf", "chase"];
    pub fn name(&self) -> &'static str {
        match self {
            Pattern::Seq => "seq",
            Pattern::Stride(_) => "stride",
            Pattern::Uniform => "uniform",
            Pattern::Gaussian { .. } => "gaussian",
            Pattern::Zipf { .. } => "zipf",
            Pattern::Chase => "chase",
        }
    }
    /// Whether each access depends on the previous one (no overlap in time).
    pub fn dependent(&self) -> bool {
        matches!(self, Pattern::Chase)
    }
}

/// One `access` statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AccessStream {
    pub range: Range,
    pub pattern: Pattern,
    /// Accesses; `None`: one per item.
    pub count: Option<u64>,
    /// Percent of accesses that are writes (drawn per access from a second generator).
    pub writes_pct: u8,
    pub seed: u64,
    /// Bytes per item (a power of two from 8 to 4096).
    pub elem: u64,
}

/// The offsets of one stream over a range of `len` bytes.
#[derive(Clone, Debug)]
pub struct AccessPlan {
    pattern: Pattern,
    elem: u64,
    items: u64,
    len: u64,
    count: u64,
    done: u64,
    rng: Prng,
    wrng: Prng,
    writes_pct: u8,
    /// chase: bits of the scramble domain, and its keys.
    bits: u32,
    keys: [u64; 3],
    zipf_pow: f64,
}

impl AccessPlan {
    pub fn new(s: &AccessStream, len: u64) -> AccessPlan {
        let elem = s.elem.max(1);
        let items = (len / elem).max(1);
        let mut rng = Prng::new(s.seed);
        let keys = [rng.next_u64() | 1, rng.next_u64() | 1, rng.next_u64()];
        let bits = 64 - (items - 1).leading_zeros().min(63);
        AccessPlan {
            pattern: s.pattern,
            elem,
            items,
            len,
            count: s.count.unwrap_or(items),
            done: 0,
            rng,
            wrng: Prng::new(s.seed ^ 0x5752_4954_4553_2121),
            writes_pct: s.writes_pct,
            bits: bits.max(1),
            keys,
            zipf_pow: match s.pattern {
                Pattern::Zipf { s_milli } => s_milli as f64 / 1000.0,
                _ => 0.0,
            },
        }
    }

    /// Accesses in the plan.
    pub fn len(&self) -> u64 {
        self.count
    }
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// A bijection of `[0, 2^bits)`.
    fn scramble(&self, mut x: u64) -> u64 {
        let mask = if self.bits >= 64 { u64::MAX } else { (1u64 << self.bits) - 1 };
        let half = (self.bits / 2).max(1);
        for k in 0..2 {
            x = x.wrapping_mul(self.keys[k]) & mask;
            x ^= x >> half;
        }
        (x ^ (self.keys[2] & mask)) & mask
    }

    /// Item `i` of the chase cycle: scramble, walking past values out of range. A bijection of
    /// `[0, items)` (cycle walking keeps a permutation a permutation).
    fn chase_item(&self, i: u64) -> u64 {
        let mut x = self.scramble(i);
        while x >= self.items {
            x = self.scramble(x);
        }
        x
    }

    fn unit(&mut self) -> f64 {
        (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn next_offset(&mut self) -> u64 {
        let i = self.done;
        match self.pattern {
            Pattern::Seq => (i % self.items) * self.elem,
            Pattern::Stride(st) => {
                let per_pass = self.len.div_ceil(st).max(1);
                ((i % per_pass) * st) / self.elem * self.elem
            }
            Pattern::Uniform => self.rng.below(self.items) * self.elem,
            Pattern::Gaussian { median, stddev } => loop {
                // Marsaglia's polar method.
                let (u, v, s) = loop {
                    let u = 2.0 * self.unit() - 1.0;
                    let v = 2.0 * self.unit() - 1.0;
                    let s = u * u + v * v;
                    if s > 0.0 && s < 1.0 {
                        break (u, v, s);
                    }
                };
                let _ = v;
                let z = u * (-2.0 * s.ln() / s).sqrt();
                let x = median as f64 + z * stddev as f64;
                if x >= 0.0 && x < self.len as f64 {
                    break (x as u64) / self.elem * self.elem;
                }
            },
            Pattern::Zipf { .. } => {
                let n = self.items as f64;
                let u = self.unit();
                let s = self.zipf_pow;
                let x = if (s - 1.0).abs() < 1e-9 {
                    n.powf(u)
                } else {
                    let a = 1.0 - s;
                    ((n.powf(a) - 1.0) * u + 1.0).powf(1.0 / a)
                };
                ((x as u64).saturating_sub(1)).min(self.items - 1) * self.elem
            }
            Pattern::Chase => self.chase_item(i % self.items) * self.elem,
        }
    }
}

impl Iterator for AccessPlan {
    /// (byte offset in the range, write).
    type Item = (u64, bool);
    fn next(&mut self) -> Option<(u64, bool)> {
        if self.done >= self.count {
            return None;
        }
        let off = self.next_offset();
        self.done += 1;
        let write = self.writes_pct > 0 && self.wrng.below(100) < self.writes_pct as u64;
        Some((off, write))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RegionId;

    fn stream(pattern: Pattern, count: Option<u64>) -> AccessStream {
        AccessStream { range: Range { region: RegionId(0), offset: 0, len: 1 << 20, every: None }, pattern, count, writes_pct: 0, seed: 7, elem: 4096 }
    }

    #[test]
    fn seq_and_stride_wrap() {
        let v: Vec<u64> = AccessPlan::new(&stream(Pattern::Seq, Some(258)), 1 << 20).map(|x| x.0).collect();
        assert_eq!(&v[..3], &[0, 4096, 8192]);
        assert_eq!(v[256], 0);
        let v: Vec<u64> = AccessPlan::new(&stream(Pattern::Stride(3 << 18), Some(3)), 1 << 20).map(|x| x.0).collect();
        // Strides of 768 KiB in 1 MiB: 0, 768K, then wrap to 0.
        assert_eq!(v, [0, 768 << 10, 0]);
    }

    #[test]
    fn chase_is_one_cycle_through_every_item() {
        // 256 pages of 1 MiB, and a range of 100 items (not a power of two: cycle walking).
        for items in [256u64, 100] {
            let s = AccessStream { elem: 4096, ..stream(Pattern::Chase, None) };
            let plan = AccessPlan::new(&s, items * 4096);
            assert_eq!(plan.len(), items);
            let mut seen: Vec<u64> = plan.map(|x| x.0 / 4096).collect();
            let first_ten = seen[..10].to_vec();
            seen.sort();
            assert_eq!(seen, (0..items).collect::<Vec<_>>());
            assert_ne!(first_ten, (0..10).collect::<Vec<_>>(), "not in address order");
        }
    }

    #[test]
    fn gaussian_and_zipf_concentrate() {
        // Gaussian median 512K, stddev 32K: about 95 % of draws within ±64K (2σ).
        let s = stream(Pattern::Gaussian { median: 512 << 10, stddev: 32 << 10 }, Some(10_000));
        let near = AccessPlan::new(&s, 1 << 20).filter(|&(o, _)| (448 << 10..576 << 10).contains(&o)).count();
        assert!((9300..9700).contains(&near), "{near}");
        // Zipf s=1 over 256 items: P(rank < 16) = ln 17 / ln 257 ≈ 0.51 for the continuous law.
        let s = stream(Pattern::Zipf { s_milli: 1000 }, Some(10_000));
        let hot = AccessPlan::new(&s, 1 << 20).filter(|&(o, _)| o < 16 * 4096).count();
        assert!((4800..5400).contains(&hot), "{hot}");
    }

    #[test]
    fn writes_fraction_and_determinism() {
        let s = AccessStream { writes_pct: 25, ..stream(Pattern::Uniform, Some(10_000)) };
        let a: Vec<_> = AccessPlan::new(&s, 1 << 20).collect();
        let b: Vec<_> = AccessPlan::new(&s, 1 << 20).collect();
        assert_eq!(a, b);
        let w = a.iter().filter(|x| x.1).count();
        assert!((2300..2700).contains(&w), "{w}");
        // The offsets do not depend on the write fraction.
        let r: Vec<u64> = AccessPlan::new(&AccessStream { writes_pct: 0, ..s }, 1 << 20).map(|x| x.0).collect();
        assert_eq!(r, a.iter().map(|x| x.0).collect::<Vec<_>>());
    }
}
