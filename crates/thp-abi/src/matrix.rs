//! The standard settings matrices that `thplab compare --matrix` runs against the live kernel
//! and `thplab sim --matrix` runs in the model alone: one list of (label, settings), so that the
//! two commands always mean the same settings by the same label.

use crate::settings::ThpSettings;

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

/// The short name of a matrix entry, as `--matrix KIND:NAME,...` selects it: the first word of
/// its label (`4K`, `16K`, ..., `all`, `PMD`, `madvise`; shmem: `4K`, `64K`, `top`,
/// `16K+64K+256K`).
pub fn key(label: &str) -> &str {
    label.split_whitespace().next().unwrap_or(label)
}

/// Whether `spec` is meant as a matrix (`KIND` or `KIND:...`), not as a workload name.
pub fn is_spec(spec: &str) -> bool {
    KINDS.contains(&spec.split(':').next().unwrap_or(spec))
}

/// `--matrix KIND` (the whole matrix) or `--matrix KIND:NAME,NAME...` (those settings of it,
/// in the order given; a NAME is an entry's [`key`] or its whole label, in any letter case).
/// Returns the kind and the settings, or a message that says what is valid.
pub fn select(spec: &str) -> Result<(String, Vec<(String, ThpSettings)>), String> {
    let (kind, names) = match spec.split_once(':') {
        Some((k, n)) => (k, Some(n)),
        None => (spec, None),
    };
    let all = by_name(kind).ok_or_else(|| format!("--matrix {spec}: valid matrices: {} (or a subset of one, such as anon:4K,64K,PMD)", KINDS.join(", ")))?;
    let Some(names) = names else { return Ok((kind.to_string(), all)) };
    let valid = || all.iter().map(|(l, _)| key(l)).collect::<Vec<_>>().join(", ");
    let mut out: Vec<(String, ThpSettings)> = Vec::new();
    for name in names.split(',').map(str::trim) {
        if name.is_empty() {
            return Err(format!("--matrix {spec}: an empty name; give the settings of the {kind} matrix to run, comma-separated: {}", valid()));
        }
        let found = all.iter().find(|(l, _)| key(l).eq_ignore_ascii_case(name) || l.eq_ignore_ascii_case(name));
        let Some((label, s)) = found else {
            return Err(format!("--matrix {spec}: no setting '{name}' in the {kind} matrix; valid: {}", valid()));
        };
        if out.iter().any(|(l, _)| l == label) {
            return Err(format!("--matrix {spec}: '{name}' is named twice"));
        }
        out.push((label.clone(), s.clone()));
    }
    Ok((kind.to_string(), out))
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

    #[test]
    fn a_subset_is_selected_by_short_name_in_the_order_given() {
        // Every entry has a short name of its own.
        for kind in KINDS {
            let m = by_name(kind).unwrap();
            let mut keys: Vec<String> = m.iter().map(|(l, _)| key(l).to_ascii_lowercase()).collect();
            keys.sort();
            keys.dedup();
            assert_eq!(keys.len(), m.len(), "{kind}: short names collide");
        }
        let (kind, s) = select("anon:PMD,4k,64K alone").unwrap();
        assert_eq!(kind, "anon");
        let labels: Vec<&str> = s.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(labels, ["PMD always", "4K only", "64K alone"]);
        assert_eq!(s[2].1, anon()[3].1);
        let (_, s) = select("shmem:top").unwrap();
        assert_eq!(s[0].0, "top always, PMD inherit");
        assert_eq!(select("anon").unwrap().1.len(), 11);
        assert_eq!(select("anon:2M").unwrap_err(), "--matrix anon:2M: no setting '2M' in the anon matrix; valid: 4K, 16K, 32K, 64K, 128K, 256K, 512K, 1024K, all, PMD, madvise");
        assert_eq!(select("anon:4K,4K").unwrap_err(), "--matrix anon:4K,4K: '4K' is named twice");
        assert_eq!(select("anon:").unwrap_err(), "--matrix anon:: an empty name; give the settings of the anon matrix to run, comma-separated: 4K, 16K, 32K, 64K, 128K, 256K, 512K, 1024K, all, PMD, madvise");
        assert_eq!(select("file").unwrap_err(), "--matrix file: valid matrices: anon, shmem (or a subset of one, such as anon:4K,64K,PMD)");
        assert!(is_spec("anon:4K") && is_spec("shmem") && !is_spec("seed-anon-1g"));
    }
}
