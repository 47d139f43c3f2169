//! The standard settings matrices that `thplab compare --matrix` runs against the live kernel
//! and `thplab sim --matrix` runs in the model alone: one list of (label, settings), so that the
//! two commands always mean the same settings by the same label.

use uapi::ThpSettings;

/// The matrix names `--matrix` accepts.
pub const KINDS: [&str; 2] = ["anon", "shmem"];

/// The matrix of `kind` (`anon` or `shmem`), or None for another name.
pub fn by_name(kind: &str) -> Option<Vec<(String, ThpSettings)>> {
    match kind {
        "anon" => Some(anon()),
        "shmem" => Some(shmem()),
        _ => None,
    }
}

fn with(assignments: &[&str]) -> ThpSettings {
    let mut s = ThpSettings::default();
    for a in assignments {
        s.apply_assignment(a).expect("valid");
    }
    s
}

/// The shmem matrix: 4 KiB only, 64 KiB always, top-level always with PMD inherit, several
/// sizes always.
pub fn shmem() -> Vec<(String, ThpSettings)> {
    vec![
        ("4K only".to_string(), with(&["hugepages-2048kB/shmem_enabled=never"])),
        ("64K always".to_string(), with(&["hugepages-64kB/shmem_enabled=always"])),
        ("top always, PMD inherit".to_string(), with(&["shmem_enabled=always"])),
        (
            "16K+64K+256K always".to_string(),
            with(&["hugepages-16kB/shmem_enabled=always", "hugepages-64kB/shmem_enabled=always", "hugepages-256kB/shmem_enabled=always"]),
        ),
    ]
}

/// The anonymous-memory matrix: 4 KiB only, each mTHP size alone, all sizes, PMD always,
/// madvise mode.
pub fn anon() -> Vec<(String, ThpSettings)> {
    let mut v = Vec::new();
    let four_k = with(&["enabled=never"]);
    v.push(("4K only".to_string(), four_k.clone()));
    for kb in [16, 32, 64, 128, 256, 512, 1024] {
        let mut s = four_k.clone();
        s.apply_assignment(&format!("hugepages-{kb}kB/enabled=always")).expect("valid");
        v.push((format!("{kb}K alone"), s));
    }
    let mut all = with(&["enabled=always"]);
    for kb in [16, 32, 64, 128, 256, 512, 1024] {
        all.apply_assignment(&format!("hugepages-{kb}kB/enabled=always")).expect("valid");
    }
    v.push(("all sizes".to_string(), all));
    v.push(("PMD always".to_string(), with(&["enabled=always"])));
    v.push(("madvise mode".to_string(), ThpSettings::default()));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matrices_say_what_their_labels_say() {
        let a = anon();
        assert_eq!(a.len(), 11, "4K only, 7 sizes alone (16K..1M), all sizes, PMD always, madvise mode");
        let knob = |s: &ThpSettings, p: &str| s.knob_map()[p].clone();
        assert_eq!(knob(&a[0].1, "enabled"), "never");
        assert_eq!(knob(&a[3].1, "hugepages-64kB/enabled"), "always");
        assert_eq!(knob(&a[3].1, "enabled"), "never");
        assert_eq!(knob(&a[8].1, "hugepages-1024kB/enabled"), "always");
        assert_eq!(knob(&a[8].1, "hugepages-16kB/enabled"), "always");
        assert_eq!(a[10].0, "madvise mode");
        assert_eq!(knob(&a[10].1, "enabled"), "madvise");
        let s = shmem();
        assert_eq!(knob(&s[2].1, "shmem_enabled"), "always");
        assert!(by_name("file").is_none());
        assert_eq!(by_name("shmem").unwrap().len(), 4);
    }
}
