//! `thplab study sat`: the SAT-solver experiment of issue #32 (item 5) as a built-in study.
//! A solver of the distribution on a generated instance is recorded once with its accesses,
//! its replay predicted under 4 KiB pages, PMD THP (`enabled=always`) and
//! `GLIBC_TUNABLES=glibc.malloc.hugetlb=1`, each run live, and the time ratios over 4 KiB set
//! beside the document's table (docs/sat-study.md). Kernel behaviour modelled: by crates/mm,
//! through the replay (mm/huge_memory.c `__thp_vma_allowable_orders`, mm/khugepaged.c
//! `hugepage_madvise`); nothing here models the kernel.
//!
//! Module map:
//! - [`gen`]: random 3-SAT instances, uniform or planted, deterministic for a seed; DIMACS.
//! - [`solver`]: minisat, picosat, cadical: where, command line, answer, witness.
//! - [`study`]: the pipeline: record, predict per paging mode, run live through the guard.
//! - [`table`]: the text, and the document's table.
//! - [`command`]: the clap options and the run.

pub mod command;
pub mod gen;
pub mod solver;
pub mod study;
pub mod table;
