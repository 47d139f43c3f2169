//! The pin companion: pins and unpins the same buffers the reads use, without I/O.
//!
//! It registers a range of the buffer as an io_uring fixed buffer and unregisters it again.
//! `io_sqe_buffer_register` (io_uring/rsrc.c) pins the range with `pin_user_pages_fast`
//! (FOLL_WRITE | FOLL_LONGTERM), the call O_DIRECT reads make through `iov_iter_extract_pages`
//! (there without FOLL_LONGTERM), walks the page array once to coalesce pages of one folio
//! into one bio_vec, and unregistering unpins folio by folio (`unpin_user_folio`). A call's
//! time is thus a fixed part, a part per page (the page array: filled by the GUP-fast walk,
//! read by the coalescing loop) and a part per folio (one reference add and drop, one bio_vec).
//!
//! Timed per call pair (register + unregister), repeated for `time`; several range sizes per
//! buffer kind so that the fixed, per-page and per-folio parts can be told apart ([`fit`]).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::buffer::{Buffer, BufferKind, PAGE};

/// One pin measurement: a range of `bytes` of a buffer of `kind`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PinSample {
    pub kind: String,
    pub bytes: u64,
    pub pages: u64,
    pub folios: u64,
    /// Pages reached through PTEs (4 KiB and mTHP buffers) and through PMD leaves (PMD THP,
    /// hugetlb): GUP-fast takes the first one by one (`gup_fast_pte_range`) and the second a
    /// whole folio at a time (`gup_fast_pmd_leaf`).
    pub pte_pages: u64,
    /// PMD-mapped pages of THP and of hugetlb apart: both go through `gup_fast_pmd_leaf`, but
    /// with the hugetlb vmemmap optimisation (`/proc/sys/vm/hugetlb_optimize_vmemmap`) the
    /// `struct page`s of a hugetlb folio share memory-map pages, which could make walking them
    /// cheaper. On the reference machine it is off and both terms come out equal.
    pub pmd_pages: u64,
    #[serde(default)]
    pub hugetlb_pages: u64,
    /// compound_head comparisons of io_uring's `headpage_already_acct` (the companion's own
    /// cost, not the read path's; see [`scan_compares`]).
    pub scan_compares: u64,
    /// Register + unregister, ns per call pair (each round's median call): the median of the
    /// rounds, and their min and max. The fit and the check use `ns_min`, the least disturbed
    /// round: other load on the machine (this one has 2 CPUs and is shared) only ever adds
    /// time, and it comes in stretches that slow whole timings by 20-50 %.
    pub ns_median: f64,
    pub ns_min: f64,
    pub ns_max: f64,
    pub calls: u64,
}

/// The comparisons io_uring's accounting makes when registering `folios` large folios:
/// `io_sqe_buffer_register` coalesces the page array to one head page per folio
/// (`io_check_coalesce_buffer`, `io_coalesce_buffer`), then `io_buffer_account_pin` calls
/// `headpage_already_acct` for each head, which compares it with every head before it:
/// 0 + 1 + ... + (folios − 1). Order-0 pages are not compound and are never compared.
pub fn scan_compares(folios: u64, large: bool) -> u64 {
    if large {
        folios * folios.saturating_sub(1) / 2
    } else {
        0
    }
}

/// Time register+unregister of `[buf, buf + bytes)` call pair by call pair for `time`;
/// returns the median ns per pair (a pair the scheduler interrupted does not move it) and the
/// number of pairs.
pub fn time_pin(ring: &io_uring::IoUring, buf: &Buffer, bytes: u64, time: Duration) -> Result<(f64, u64), String> {
    let iov = [libc::iovec { iov_base: buf.ptr.cast(), iov_len: bytes as usize }];
    let sub = ring.submitter();
    let t0 = Instant::now();
    let mut each = Vec::new();
    while each.len() < 5 || t0.elapsed() < time {
        let t = Instant::now();
        // SAFETY: the buffer stays mapped while registered (unregistered before the next loop).
        unsafe { sub.register_buffers(&iov) }.map_err(|e| {
            format!("io_uring register_buffers of {} KiB failed: {e} (RLIMIT_MEMLOCK?)", bytes >> 10)
        })?;
        sub.unregister_buffers().map_err(|e| format!("io_uring unregister_buffers failed: {e}"))?;
        each.push(t.elapsed().as_nanos() as f64);
    }
    each.sort_by(f64::total_cmp);
    Ok((each[each.len() / 2], each.len() as u64))
}

/// The sample shape of a range of `bytes` of a buffer of `kind` (no timing).
/// (pages, folios, PTE-mapped pages, THP PMD-mapped pages, hugetlb pages, head compares).
pub fn shape(kind: BufferKind, bytes: u64) -> (u64, u64, u64, u64, u64, u64) {
    let pages = bytes / PAGE;
    let folios = bytes.div_ceil(kind.folio_bytes());
    let (pte, pmd, huge) = match kind {
        BufferKind::Pmd => (0, pages, 0),
        BufferKind::Hugetlb => (0, 0, pages),
        _ => (pages, 0, 0),
    };
    (pages, folios, pte, pmd, huge, scan_compares(folios, kind != BufferKind::Base))
}

/// Measure every buffer at each of `sizes` (bytes, each at most the buffer): `rounds` rounds,
/// each timing every (buffer, size) for `time`, so that a disturbed stretch of time (other load
/// on the machine) spreads over all samples instead of spoiling one.
pub fn measure(bufs: &[&Buffer], sizes: &[u64], rounds: usize, time: Duration, progress: &mut dyn FnMut(usize, usize, String)) -> Result<Vec<PinSample>, String> {
    let ring = io_uring::IoUring::new(4).map_err(|e| format!("io_uring_setup failed: {e}"))?;
    let mut cases: Vec<(&Buffer, u64, Vec<f64>, u64)> = Vec::new();
    for b in bufs {
        for &bytes in sizes.iter().filter(|&&s| s <= b.len) {
            // One untimed pair first (first-touch costs of the ring's tables).
            time_pin(&ring, b, bytes, Duration::ZERO)?;
            cases.push((b, bytes, Vec::new(), 0));
        }
    }
    let total = rounds.max(1) * cases.len();
    let mut done = 0;
    for _ in 0..rounds.max(1) {
        for (b, bytes, v, calls) in cases.iter_mut() {
            progress(done, total, format!("pin companion: {} {} KiB", b.kind.label(), *bytes >> 10));
            let (ns, c) = time_pin(&ring, b, *bytes, time)?;
            v.push(ns);
            *calls += c;
            done += 1;
        }
    }
    let mut out = Vec::new();
    for (b, bytes, mut v, calls) in cases {
        v.sort_by(f64::total_cmp);
        let (pages, folios, pte_pages, pmd_pages, hugetlb_pages, scan) = shape(b.kind, bytes);
        out.push(PinSample {
            kind: b.kind.label(),
            bytes,
            pages,
            folios,
            pte_pages,
            pmd_pages,
            hugetlb_pages,
            scan_compares: scan,
            ns_median: v[v.len() / 2],
            ns_min: v[0],
            ns_max: v[v.len() - 1],
            calls,
        });
    }
    Ok(out)
}

/// The pin cost terms (ns): a companion call costs `per_call + folios·per_folio +
/// pte_pages·per_page + pmd_pages·per_pmd_page + hugetlb_pages·per_hugetlb_page + compares·scan`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PinFit {
    pub per_call_ns: f64,
    pub per_folio_ns: f64,
    pub per_page_ns: f64,
    pub per_pmd_page_ns: f64,
    pub per_hugetlb_page_ns: f64,
    pub scan_ns: f64,
}

const N: usize = 6;

impl PinFit {
    fn from(v: &[f64; N]) -> PinFit {
        PinFit { per_call_ns: v[0], per_folio_ns: v[1], per_page_ns: v[2], per_pmd_page_ns: v[3], per_hugetlb_page_ns: v[4], scan_ns: v[5] }
    }

    pub fn predict(&self, s: &PinSample) -> f64 {
        self.per_call_ns
            + s.folios as f64 * self.per_folio_ns
            + s.pte_pages as f64 * self.per_page_ns
            + s.pmd_pages as f64 * self.per_pmd_page_ns
            + s.hugetlb_pages as f64 * self.per_hugetlb_page_ns
            + s.scan_compares as f64 * self.scan_ns
    }
}

fn features(s: &PinSample) -> [f64; N] {
    [1.0, s.folios as f64, s.pte_pages as f64, s.pmd_pages as f64, s.hugetlb_pages as f64, s.scan_compares as f64]
}

/// Least squares of the [`PinFit`] terms, weighted by 1/ns² so that every sample's relative
/// error counts alike (the check is relative). None when the samples do not determine every
/// term: at least 4 KiB (folios = pages), one PTE-mapped large size at two range sizes, PMD THP
/// and hugetlb.
pub fn fit(samples: &[PinSample]) -> Option<PinFit> {
    let mut a = [[0f64; N]; N];
    let mut b = [0f64; N];
    for s in samples {
        let ns = s.ns_min;
        if ns <= 0.0 {
            continue;
        }
        let w = 1.0 / (ns * ns);
        let x = features(s);
        for i in 0..N {
            for j in 0..N {
                a[i][j] += w * x[i] * x[j];
            }
            b[i] += w * x[i] * ns;
        }
    }
    solve(a, b).map(|v| PinFit::from(&v))
}

/// Gaussian elimination with partial pivoting, on the system scaled to unit diagonal; None
/// when singular.
fn solve<const N: usize>(mut a: [[f64; N]; N], mut b: [f64; N]) -> Option<[f64; N]> {
    // Column scaling: the features differ by orders of magnitude.
    let mut scale = [1f64; N];
    for i in 0..N {
        if a[i][i] <= 0.0 {
            return None;
        }
        scale[i] = 1.0 / a[i][i].sqrt();
    }
    for i in 0..N {
        for j in 0..N {
            a[i][j] *= scale[i] * scale[j];
        }
        b[i] *= scale[i];
    }
    for c in 0..N {
        let p = (c..N).max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs()))?;
        if a[p][c].abs() <= 1e-9 {
            return None;
        }
        a.swap(c, p);
        b.swap(c, p);
        for r in c + 1..N {
            let f = a[r][c] / a[c][c];
            for k in c..N {
                a[r][k] -= f * a[c][k];
            }
            b[r] -= f * b[c];
        }
    }
    let mut x = [0f64; N];
    for c in (0..N).rev() {
        let s: f64 = (c + 1..N).map(|k| a[c][k] * x[k]).sum();
        x[c] = (b[c] - s) / a[c][c];
    }
    for i in 0..N {
        x[i] *= scale[i];
    }
    Some(x)
}

/// A prediction beside a measurement.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PinCheck {
    pub kind: String,
    pub bytes: u64,
    pub measured_ns: f64,
    pub predicted_ns: f64,
    /// (predicted − measured) / measured, in percent.
    pub error_pct: f64,
}

/// Compare `fit` with every sample.
pub fn check(fit: &PinFit, samples: &[PinSample]) -> Vec<PinCheck> {
    samples
        .iter()
        .map(|s| {
            let p = fit.predict(s);
            PinCheck {
                kind: s.kind.clone(),
                bytes: s.bytes,
                measured_ns: s.ns_min,
                predicted_ns: p,
                error_pct: (p - s.ns_min) / s.ns_min * 100.0,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(kind: BufferKind, bytes: u64, ns: f64) -> PinSample {
        let (pages, folios, pte_pages, pmd_pages, hugetlb_pages, scan_compares) = shape(kind, bytes);
        PinSample { kind: kind.label(), bytes, pages, folios, pte_pages, pmd_pages, hugetlb_pages, scan_compares, ns_median: ns, ns_min: ns, ns_max: ns, calls: 1 }
    }

    #[test]
    fn shapes_by_hand() {
        // 1 MiB of 64 KiB folios: 256 pages through PTEs, 16 folios, 0+1+...+15 = 120 compares.
        assert_eq!(shape(BufferKind::Mthp(64), 1 << 20), (256, 16, 256, 0, 0, 120));
        // 4 MiB of PMD THP: 2 folios, 1024 pages through PMD leaves, 1 compare.
        assert_eq!(shape(BufferKind::Pmd, 4 << 20), (1024, 2, 0, 1024, 0, 1));
        assert_eq!(shape(BufferKind::Hugetlb, 4 << 20), (1024, 2, 0, 0, 1024, 1));
        // 4 KiB pages are not compound: no compares.
        assert_eq!(shape(BufferKind::Base, 1 << 20), (256, 256, 256, 0, 0, 0));
    }

    #[test]
    fn fit_recovers_hand_made_terms() {
        // ns = 3000 + 140·folios + 125·pte_pages + 6·pmd_pages + 3·hugetlb_pages + 4·compares:
        // 4K at 1 MiB is 3000 + 140·256 + 125·256 = 70840.
        let t = |s: &PinSample| {
            3000.0 + 140.0 * s.folios as f64 + 125.0 * s.pte_pages as f64 + 6.0 * s.pmd_pages as f64 + 3.0 * s.hugetlb_pages as f64 + 4.0 * s.scan_compares as f64
        };
        let mut v = Vec::new();
        for kind in [BufferKind::Base, BufferKind::Mthp(16), BufferKind::Mthp(64), BufferKind::Pmd, BufferKind::Hugetlb] {
            for bytes in [1u64 << 20, 4 << 20, 16 << 20] {
                let mut s = sample(kind, bytes, 0.0);
                s.ns_min = t(&s);
                s.ns_median = s.ns_min;
                v.push(s);
            }
        }
        assert_eq!(v[0].ns_min, 70840.0);
        let f = fit(&v).unwrap();
        for (got, want) in [(f.per_call_ns, 3000.0), (f.per_folio_ns, 140.0), (f.per_page_ns, 125.0), (f.per_pmd_page_ns, 6.0), (f.per_hugetlb_page_ns, 3.0), (f.scan_ns, 4.0)] {
            assert!((got - want).abs() < 1e-6 * want.max(1.0), "{f:?}");
        }
        assert!(check(&f, &v).iter().all(|c| c.error_pct.abs() < 1e-6));
    }

    #[test]
    fn fit_refuses_what_cannot_be_told_apart() {
        // Only 4 KiB buffers: folios == pages, and nothing is PMD-mapped.
        let v: Vec<PinSample> = [1u64 << 20, 4 << 20].iter().map(|&b| sample(BufferKind::Base, b, b as f64 / 100.0)).collect();
        assert!(fit(&v).is_none());
        assert!(fit(&[]).is_none());
    }

    #[test]
    fn check_reports_signed_percent() {
        let f = PinFit { per_call_ns: 0.0, per_folio_ns: 10.0, per_page_ns: 1.0, per_pmd_page_ns: 0.0, per_hugetlb_page_ns: 0.0, scan_ns: 0.0 };
        let s = sample(BufferKind::Base, 8192, 20.0);
        let c = check(&f, &[s]);
        assert_eq!(c[0].predicted_ns, 22.0);
        assert!((c[0].error_pct - 10.0).abs() < 1e-12);
    }
}
