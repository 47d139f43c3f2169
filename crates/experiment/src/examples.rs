//! The example workloads under examples/, built into the binary so that they run anywhere, each
//! with the one line `thplab examples` prints beside its name.

/// (name, one-line description, text).
const EXAMPLES: &[(&str, &str, &str)] = &[
    (
        "seed-anon-1g",
        "1 GiB of private anonymous memory written page by page (the README's demo)",
        include_str!("../../../examples/seed-anon-1g.thpw"),
    ),
    (
        "issue-program",
        "256 MiB + 12 KiB of anonymous memory written page by page (not 2 MiB-sized)",
        include_str!("../../../examples/issue-program.thpw"),
    ),
    (
        "seed-shm-anon-1g",
        "a 1 GiB memfd mapped at a fixed 2 MiB-aligned address, written page by page",
        include_str!("../../../examples/seed-shm-anon-1g.thpw"),
    ),
    (
        "seed-shm-anon-1g-nohint",
        "the same memfd with a NULL hint: placed 4 KiB-aligned, no 64 KiB folio fits",
        include_str!("../../../examples/seed-shm-anon-1g-nohint.thpw"),
    ),
    (
        "seed-shm-posix-1g",
        "a 1 GiB POSIX shm object on a huge=always tmpfs, written page by page",
        include_str!("../../../examples/seed-shm-posix-1g.thpw"),
    ),
    (
        "seed-tmpfs-write",
        "1 GiB write() in 1 MiB blocks to a file on a huge=always tmpfs (no faults)",
        include_str!("../../../examples/seed-tmpfs-write.thpw"),
    ),
    (
        "fork-bgsave",
        "64 MiB filled; a forked saver reads it as the parent writes (COW of THPs)",
        include_str!("../../../examples/fork-bgsave.thpw"),
    ),
    (
        "fhpm-vm",
        "a VM guest, one hot page per 2 MiB: host THP vs FHPM (model-only)",
        include_str!("../../../examples/fhpm-vm.thpw"),
    ),
    (
        "valkey-hints",
        "collapse hints: a valkey-shaped heap under gaussian keys (model-only)",
        include_str!("../../../examples/valkey-hints.thpw"),
    ),
    (
        "reach-small-heap",
        "reach: a 1.2 MiB heap read at random (fits any L2 TLB at 4 KiB)",
        include_str!("../../../examples/reach-small-heap.thpw"),
    ),
    (
        "reach-large-ws",
        "reach: 128 MiB read at random, TLB-bound (libquantum-, mcf-like)",
        include_str!("../../../examples/reach-large-ws.thpw"),
    ),
    (
        "reach-pointer-chase",
        "reach: a pointer chase over 32 MiB (omnetpp-, xalancbmk-like)",
        include_str!("../../../examples/reach-pointer-chase.thpw"),
    ),
    (
        "contig-phone-heaps",
        "reach: twelve small heaps, one page in four written (phone-like)",
        include_str!("../../../examples/contig-phone-heaps.thpw"),
    ),
];

/// The built-in studies (name, one-line description, what `thplab examples NAME` prints: how
/// to run it). Listed after the workloads; not workloads (`sim` does not take them).
const STUDIES: &[(&str, &str, &str)] = &[(
    "sat-study",
    "study: a SAT solver recorded, predicted and run live (4K, PMD, hugetlb=1)",
    "# The SAT-solver experiment (issue #32, docs/sat-study.md). Run it (root, qemu-user, minisat):\n\
     thplab study sat --solver minisat --vars 250 --seed 1 --runs 3 --dir sat-study\n\
     # Model only (record and predict, no live runs): add --no-live. Options: thplab study sat --help\n",
)];

pub fn get(name: &str) -> Option<&'static str> {
    let name = name.trim_end_matches(".thpw");
    EXAMPLES.iter().find(|(n, _, _)| *n == name).map(|(_, _, t)| *t)
}

pub fn names() -> Vec<&'static str> {
    EXAMPLES.iter().map(|(n, _, _)| *n).collect()
}

/// (name, one-line description) of every example.
pub fn described() -> Vec<(&'static str, &'static str)> {
    EXAMPLES.iter().map(|(n, d, _)| (*n, *d)).collect()
}

/// `thplab examples [NAME]`: each example's name and line, or the text of the one named.
pub fn print(out: &mut impl std::io::Write, name: Option<&str>) -> anyhow::Result<()> {
    match name {
        None => {
            let width = names().iter().chain(STUDIES.iter().map(|s| &s.0)).map(|n| n.len()).max().unwrap_or(0);
            for (n, d) in described() {
                writeln!(out, "{n:<width$}  {d}")?;
            }
            for (n, d, _) in STUDIES {
                writeln!(out, "{n:<width$}  {d}")?;
            }
        }
        Some(n) => match (get(n), STUDIES.iter().find(|s| s.0 == n)) {
            (Some(t), _) => write!(out, "{t}")?,
            (None, Some((_, _, how))) => write!(out, "{how}")?,
            (None, None) => anyhow::bail!("no built-in example '{n}'; built-in examples: {}", names().join(", ")),
        },
    }
    Ok(())
}
