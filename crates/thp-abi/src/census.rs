//! The folio census: which folio sizes a process maps, and how (PMD, PTEs, partially).
//!
//! The model takes it from its page tables (`mm::debug`, CONFIG_DEBUG_VM-style walks); the live
//! harness from /proc/PID/pagemap and /proc/kpageflags (`KPF_THP`, `KPF_COMPOUND_HEAD`,
//! fs/proc/page.c: `stable_page_flags`). The figures are the kernel's: a folio is
//! `folio_nr_pages` pages, PMD-mapped as `folio_entire_mapcount` counts it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::keys::FolioSize;

/// Folios of one size mapped by the process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CensusEntry {
    /// Distinct folios with at least one page mapped.
    pub folios: u64,
    /// Folios mapped by a PMD entry.
    pub pmd_mapped: u64,
    /// Folios mapped by PTEs.
    pub pte_mapped: u64,
    /// PTE-mapped folios of which some pages are not mapped in this process.
    pub partially_mapped: u64,
}

impl CensusEntry {
    /// Add another entry's counts into this one.
    pub fn add(&mut self, o: &CensusEntry) {
        self.folios += o.folios;
        self.pmd_mapped += o.pmd_mapped;
        self.pte_mapped += o.pte_mapped;
        self.partially_mapped += o.partially_mapped;
    }
}

/// Which folio sizes a process maps, by size label (`4kB`, `64kB`, `2048kB`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Census {
    /// By size, smallest first (serialised in the order of the names as strings).
    #[serde(serialize_with = "crate::keys::serialize_by_name")]
    pub sizes: BTreeMap<FolioSize, CensusEntry>,
    /// PTEs that map the shared 4 KiB zero page.
    pub zero_page_ptes: u64,
    /// PMDs that map the huge zero folio.
    pub huge_zero_pmds: u64,
}

impl Census {
    /// `"64kB" -> folio count`, the `folios` section of the result.
    pub fn folio_counts(&self) -> BTreeMap<FolioSize, u64> {
        self.sizes.iter().filter(|(_, e)| e.folios > 0).map(|(k, e)| (k.clone(), e.folios)).collect()
    }

    /// Add another census into this one (several processes, VMAs or ranges make one census):
    /// every size's counts and the zero-page mappings.
    pub fn add(&mut self, o: &Census) {
        self.zero_page_ptes += o.zero_page_ptes;
        self.huge_zero_pmds += o.huge_zero_pmds;
        for (size, e) in &o.sizes {
            self.sizes.entry(size.clone()).or_default().add(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(folios: u64, pmd_mapped: u64, pte_mapped: u64, partially_mapped: u64) -> CensusEntry {
        CensusEntry { folios, pmd_mapped, pte_mapped, partially_mapped }
    }

    /// Two processes' censuses: sizes both have add up field by field, a size only one has is
    /// kept, the zero-page counts add.
    #[test]
    fn add_sums_every_size_and_the_zero_pages() {
        let mut a = Census { sizes: [("4kB".into(), entry(3, 0, 3, 0)), ("2048kB".into(), entry(1, 1, 0, 0))].into(), zero_page_ptes: 2, huge_zero_pmds: 0 };
        let b = Census { sizes: [("4kB".into(), entry(5, 0, 5, 0)), ("64kB".into(), entry(2, 0, 2, 1))].into(), zero_page_ptes: 1, huge_zero_pmds: 1 };
        a.add(&b);
        assert_eq!(a.sizes[&FolioSize::from("4kB")], entry(8, 0, 8, 0));
        assert_eq!(a.sizes[&FolioSize::from("64kB")], entry(2, 0, 2, 1));
        assert_eq!(a.sizes[&FolioSize::from("2048kB")], entry(1, 1, 0, 0));
        assert_eq!((a.zero_page_ptes, a.huge_zero_pmds), (3, 1));
        assert_eq!(a.folio_counts().into_iter().map(|(k, n)| (String::from(k), n)).collect::<Vec<_>>(), [("4kB".to_string(), 8), ("64kB".to_string(), 2), ("2048kB".to_string(), 1)]);
    }
}
