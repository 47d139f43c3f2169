//! The buffers the reads land in, one per buffer kind, and the check that each is backed by
//! the folio size asked for.
//!
//! - `4K`: private anonymous memory with MADV_NOHUGEPAGE (VM_NOHUGEPAGE: no anonymous order
//!   above 0 is allowed, `thp_vma_allowable_orders`), so no knob changes.
//! - `mTHP-NK`: MADV_HUGEPAGE on a 2 MiB-aligned mapping while `hugepages-NkB/enabled=madvise`,
//!   every other size `never` (the knobs go through the settings guard and are put back as soon
//!   as the buffer is faulted: folios keep their size after the knob changes).
//! - `THP-2M`: the same with `hugepages-2048kB/enabled=madvise` (PMD THP).
//! - `hugetlb-2M`: MAP_HUGETLB from the 2 MiB pool, which the caller reserves through the guard.
//!
//! After faulting (a write to every page, so no zero page), THP buffers get MADV_NOHUGEPAGE so
//! that khugepaged (which may collapse VM_HUGEPAGE ranges once the knobs are back) leaves them
//! as they are. [`Buffer::verify`] takes the folio census of the buffer through
//! /proc/self/pagemap and /proc/kpageflags (`probe::census::census_of_ranges`) and says which sizes back
//! it; a buffer not wholly backed by the asked size is reported, never measured as if it were.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub const PAGE: u64 = 4096;
pub const PMD: u64 = 2 << 20;

/// A kind of buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum BufferKind {
    /// 4 KiB pages.
    Base,
    /// Anonymous mTHP of this many KiB (16 to 1024).
    Mthp(u64),
    /// PMD THP (2 MiB).
    Pmd,
    /// hugetlbfs 2 MiB pages (MAP_HUGETLB).
    Hugetlb,
}

impl BufferKind {
    /// The folio size this kind is backed by, in bytes.
    pub fn folio_bytes(self) -> u64 {
        match self {
            BufferKind::Base => PAGE,
            BufferKind::Mthp(kb) => kb * 1024,
            BufferKind::Pmd | BufferKind::Hugetlb => PMD,
        }
    }

    /// The column label: `4K`, `mTHP-64K`, `THP-2M`, `hugetlb-2M`.
    pub fn label(self) -> String {
        match self {
            BufferKind::Base => "4K".into(),
            BufferKind::Mthp(kb) if kb >= 1024 => format!("mTHP-{}M", kb / 1024),
            BufferKind::Mthp(kb) => format!("mTHP-{kb}K"),
            BufferKind::Pmd => "THP-2M".into(),
            BufferKind::Hugetlb => "hugetlb-2M".into(),
        }
    }

    /// Parse a label as [`BufferKind::label`] prints it (case-insensitive; `64K` alone means
    /// mTHP-64K, `2M`/`thp`/`pmd` PMD THP, `hugetlb`).
    pub fn parse(s: &str) -> Result<BufferKind, String> {
        let l = s.trim().to_ascii_lowercase();
        let kb = |t: &str| -> Option<u64> {
            if let Some(k) = t.strip_suffix('k') {
                k.parse().ok()
            } else {
                t.strip_suffix('m').and_then(|m| m.parse::<u64>().ok()).map(|m| m * 1024)
            }
        };
        let kind = match l.as_str() {
            "4k" | "base" => BufferKind::Base,
            "thp" | "pmd" | "thp-2m" | "2m" => BufferKind::Pmd,
            "hugetlb" | "hugetlb-2m" | "hugetlbfs" => BufferKind::Hugetlb,
            _ => match kb(l.strip_prefix("mthp-").unwrap_or(&l)) {
                Some(k) if (16..=1024).contains(&k) && k.is_power_of_two() => BufferKind::Mthp(k),
                _ => {
                    return Err(format!(
                        "buffer kind '{s}': give 4K, mTHP-16K ... mTHP-1M (a power of two), THP-2M or hugetlb-2M"
                    ))
                }
            },
        };
        Ok(kind)
    }

    /// The census label of the folio size (`64kB`).
    pub fn census_label(self) -> String {
        format!("{}kB", self.folio_bytes() / 1024)
    }

    /// The per-size `enabled` knob this kind needs set to `madvise` (the others `never`).
    pub fn knob(self) -> Option<String> {
        match self {
            BufferKind::Mthp(kb) => Some(format!("hugepages-{kb}kB/enabled")),
            BufferKind::Pmd => Some("hugepages-2048kB/enabled".into()),
            _ => None,
        }
    }
}

/// What backs a buffer after it was faulted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backing {
    /// Folio size label (`4kB`, `64kB`, `2048kB`) → folios of that size in the buffer.
    pub folios: BTreeMap<String, u64>,
    /// True when every page of the buffer lies in a folio of the asked size.
    pub as_asked: bool,
}

/// A mapped buffer (unmapped on drop).
pub struct Buffer {
    pub kind: BufferKind,
    pub ptr: *mut u8,
    pub len: u64,
    map_ptr: *mut libc::c_void,
    map_len: usize,
}

impl Buffer {
    /// Map `len` bytes (a multiple of 2 MiB) of `kind`, 2 MiB aligned, and fault every page by
    /// writing it. The knobs for THP kinds must already be in place.
    pub fn map(kind: BufferKind, len: u64) -> Result<Buffer, String> {
        assert!(len % PMD == 0 && len > 0);
        // SAFETY: plain anonymous mappings; every pointer used below lies inside them.
        unsafe {
            let (map_ptr, map_len, ptr) = if kind == BufferKind::Hugetlb {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    len as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB,
                    -1,
                    0,
                );
                if p == libc::MAP_FAILED {
                    return Err(format!(
                        "mmap(MAP_HUGETLB) of {} MiB failed: {}",
                        len >> 20,
                        std::io::Error::last_os_error()
                    ));
                }
                (p, len as usize, p as *mut u8)
            } else {
                let map_len = (len + PMD) as usize;
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    map_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                if p == libc::MAP_FAILED {
                    return Err(format!("mmap of {} MiB failed: {}", len >> 20, std::io::Error::last_os_error()));
                }
                let aligned = ((p as u64).div_ceil(PMD) * PMD) as *mut u8;
                let advice = if kind == BufferKind::Base { libc::MADV_NOHUGEPAGE } else { libc::MADV_HUGEPAGE };
                if libc::madvise(aligned.cast(), len as usize, advice) != 0 {
                    let e = std::io::Error::last_os_error();
                    libc::munmap(p, map_len);
                    return Err(format!("madvise on the buffer failed: {e}"));
                }
                (p, map_len, aligned)
            };
            let mut off = 0;
            while off < len {
                std::ptr::write_volatile(ptr.add(off as usize), 0x5a);
                off += PAGE;
            }
            if matches!(kind, BufferKind::Mthp(_) | BufferKind::Pmd) {
                // Keep khugepaged away from it from now on (the folios stay as they are).
                libc::madvise(ptr.cast(), len as usize, libc::MADV_NOHUGEPAGE);
            }
            Ok(Buffer { kind, ptr, len, map_ptr, map_len })
        }
    }

    /// The folio census of the buffer (needs root: /proc/self/pagemap shows PFNs to
    /// CAP_SYS_ADMIN only).
    pub fn verify(&self) -> Result<Backing, String> {
        let pid = std::process::id() as i32;
        let vmas = probe::procfs::read_smaps(pid).map_err(|e| e.to_string())?;
        let (s, e) = (self.ptr as u64, self.ptr as u64 + self.len);
        let report = probe::census::census_of_ranges(pid, &[(s, e)], &vmas).map_err(|e| e.to_string())?;
        let folios: BTreeMap<String, u64> =
            report.total.sizes.iter().filter(|(_, v)| v.folios > 0).map(|(k, v)| (k.to_string(), v.folios)).collect();
        let want = self.len / self.kind.folio_bytes();
        let as_asked = folios.len() == 1 && folios.get(&self.kind.census_label()) == Some(&want);
        Ok(Backing { folios, as_asked })
    }

    /// The bytes `[off, off + len)` of the buffer.
    pub fn at(&self, off: u64) -> *mut u8 {
        debug_assert!(off < self.len);
        // SAFETY: inside the mapping.
        unsafe { self.ptr.add(off as usize) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`.
        unsafe { libc::munmap(self.map_ptr, self.map_len) };
    }
}

/// A backing described in one short phrase: `2048kB×16` or `4kB×3, 64kB×510`.
pub fn describe(b: &Backing) -> String {
    if b.folios.is_empty() {
        return "nothing mapped".into();
    }
    b.folios.iter().map(|(k, v)| format!("{k}×{v}")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_and_label() {
        for k in [BufferKind::Base, BufferKind::Mthp(16), BufferKind::Mthp(64), BufferKind::Mthp(1024), BufferKind::Pmd, BufferKind::Hugetlb] {
            assert_eq!(BufferKind::parse(&k.label()).unwrap(), k);
        }
        assert_eq!(BufferKind::parse("64K").unwrap(), BufferKind::Mthp(64));
        assert_eq!(BufferKind::Mthp(1024).label(), "mTHP-1M");
        assert_eq!(BufferKind::Mthp(64).folio_bytes(), 65536);
        assert_eq!(BufferKind::Hugetlb.census_label(), "2048kB");
        assert_eq!(BufferKind::Mthp(128).knob().unwrap(), "hugepages-128kB/enabled");
        let e = BufferKind::parse("48K").unwrap_err();
        assert!(e.contains("48K") && e.contains("power of two"), "{e}");
        assert!(BufferKind::parse("8K").is_err());
    }
}
