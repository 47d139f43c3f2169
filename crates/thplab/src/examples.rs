//! The example workloads under examples/, built into the binary so that they run anywhere.

const EXAMPLES: &[(&str, &str)] = &[
    ("seed-anon-1g", include_str!("../../../examples/seed-anon-1g.thpw")),
    ("issue-program", include_str!("../../../examples/issue-program.thpw")),
    ("seed-shm-anon-1g", include_str!("../../../examples/seed-shm-anon-1g.thpw")),
    ("seed-shm-anon-1g-nohint", include_str!("../../../examples/seed-shm-anon-1g-nohint.thpw")),
    ("seed-shm-posix-1g", include_str!("../../../examples/seed-shm-posix-1g.thpw")),
    ("seed-tmpfs-write", include_str!("../../../examples/seed-tmpfs-write.thpw")),
];

pub fn get(name: &str) -> Option<&'static str> {
    let name = name.trim_end_matches(".thpw");
    EXAMPLES.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

pub fn names() -> Vec<&'static str> {
    EXAMPLES.iter().map(|(n, _)| *n).collect()
}
