//! Checks that keep ARCHITECTURE.md and the module maps true (issue #26 item 7).
//!
//! - A module map is the list of entries in a crate root's or folder module's `//!` header
//!   that are a module's name in backticks and brackets followed by a colon. Every `lib.rs`, `main.rs` and `mod.rs` with three or more file modules (`mod x;`,
//!   test modules aside) has one, and it names exactly those modules: none missing, none gone.
//! - Every file of this workspace that ARCHITECTURE.md or the tidy crate cites by path exists
//!   (a path such as `benches/faults.rs` in a crate's section is looked for under each crate).
//! - Every function ARCHITECTURE.md's codemap tables name in backticks exists in the sources
//!   (the codemap once said `__rmqueue_smallest` where the code had `rmqueue_smallest`).

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    use crate::tests::{all_src_dirs, code_part, rust_files, workspace_root as root};

    fn all_sources() -> Vec<PathBuf> {
        all_src_dirs().iter().flat_map(|d| rust_files(d)).collect()
    }

    fn is_ident(s: &str) -> bool {
        !s.is_empty() && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    }

    /// The modules a source declares (`mod x;`, `pub mod x;`, `pub(crate) mod x;`, and inline
    /// `mod x {` at the top level), without those under `#[cfg(test)]` or named `*tests`.
    pub(super) fn file_modules(text: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let mut prev = "";
        for line in text.lines() {
            let t = line.trim();
            let rest = t.strip_prefix("pub(crate) ").or_else(|| t.strip_prefix("pub ")).unwrap_or(t);
            // `mod x;`, or an inline `mod x {` at the top level of the file.
            let decl = rest.strip_prefix("mod ").and_then(|r| r.strip_suffix(';').or_else(|| r.strip_suffix(" {").filter(|_| !line.starts_with(' '))));
            if let Some(name) = decl {
                let name = name.trim();
                if is_ident(name) && !prev.contains("cfg(test)") && !name.ends_with("tests") {
                    out.insert(name.to_string());
                }
            }
            prev = t;
        }
        out
    }

    /// The names of the `[`name`]:` entries of the `//!` header: its module map.
    pub(super) fn module_map(text: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for line in text.lines().take_while(|l| l.starts_with("//!")) {
            let mut rest = line;
            while let Some(i) = rest.find("[`") {
                rest = &rest[i + 2..];
                let Some(j) = rest.find("`]") else { break };
                let name = &rest[..j];
                if is_ident(name) && rest[j + 2..].starts_with(':') {
                    out.insert(name.to_string());
                }
                rest = &rest[j + 2..];
            }
        }
        out
    }

    fn rel(p: &Path) -> String {
        p.strip_prefix(root()).unwrap_or(p).display().to_string()
    }

    #[test]
    fn every_module_map_lists_exactly_its_mod_lines() {
        let mut bad = Vec::new();
        let mut checked = 0;
        for f in all_sources() {
            let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let text = std::fs::read_to_string(&f).expect("read");
            let mods = file_modules(&text);
            let map = module_map(&text);
            let root_file = matches!(name, "lib.rs" | "main.rs" | "mod.rs");
            // A map is required of a root with three or more modules in files of their own (a
            // file of inline constant modules, each with its doc above it, needs none).
            let in_files = mods.iter().filter(|m| text.contains(&format!("mod {m};"))).count();
            if mods.is_empty() || (map.is_empty() && !(root_file && in_files >= 3)) {
                continue;
            }
            checked += 1;
            if map.is_empty() {
                bad.push(format!("{}: {} modules and no module map (one `//! - [`module`]: what it does` line each)", rel(&f), mods.len()));
                continue;
            }
            let missing: Vec<_> = mods.difference(&map).cloned().collect();
            let gone: Vec<_> = map.difference(&mods).cloned().collect();
            if !missing.is_empty() {
                bad.push(format!("{}: the module map lacks {}", rel(&f), missing.join(", ")));
            }
            if !gone.is_empty() {
                bad.push(format!("{}: the module map names {}, which it does not declare", rel(&f), gone.join(", ")));
            }
        }
        assert!(checked >= 8, "only {checked} module maps checked; is the workspace root right?");
        assert!(bad.is_empty(), "module maps out of date:\n{}", bad.join("\n"));
    }

    /// Path-like words of `text` that name a file of ours: ending in .rs, .md, .toml, .sh or
    /// .json, or beginning with crates/, docs/, scripts/, examples/ or .ci/ (kernel paths such
    /// as mm/memory.c end in .c or .h and are not ours).
    pub(super) fn cited_paths(text: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || "_-./".contains(c))) {
            let w = word.trim_end_matches('.');
            let ours_by_ext = [".rs", ".md", ".toml", ".sh", ".json"].iter().any(|e| w.ends_with(e));
            let ours_by_dir = ["crates/", "docs/", "scripts/", "examples/", ".ci/"].iter().any(|d| w.starts_with(d));
            if w.contains('/') && !w.contains("..") && !w.starts_with('/') && (ours_by_ext || ours_by_dir) && !w.contains("*") {
                out.insert(w.to_string());
            }
        }
        out
    }

    fn exists_somewhere(path: &str) -> bool {
        let r = root();
        if r.join(path).exists() || r.join("crates").join(path).exists() {
            return true;
        }
        std::fs::read_dir(r.join("crates")).expect("crates/").flatten().any(|c| c.path().join(path).exists())
    }

    #[test]
    fn every_file_that_architecture_and_tidy_cite_exists() {
        let r = root();
        let mut sources = vec![r.join("ARCHITECTURE.md")];
        sources.extend(rust_files(&r.join("crates/tidy/src")));
        let mut bad = Vec::new();
        let mut seen = 0;
        for s in &sources {
            let text = std::fs::read_to_string(s).expect("read");
            for p in cited_paths(&text) {
                seen += 1;
                if !exists_somewhere(&p) {
                    bad.push(format!("{} cites {p}, which does not exist", rel(s)));
                }
            }
        }
        assert!(seen >= 10, "only {seen} cited paths found");
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }

    /// The line without its parenthesised asides (outside backticks): where the codemap names
    /// the kernel's functions that one of ours models, `populate_range`
    /// (`populate_vma_page_range`), the aside is the kernel's and is not looked for.
    fn without_asides(line: &str) -> String {
        let (mut out, mut depth, mut in_tick) = (String::new(), 0usize, false);
        for c in line.chars() {
            match c {
                '`' => in_tick = !in_tick,
                '(' if !in_tick => depth += 1,
                ')' if !in_tick && depth > 0 => {
                    depth -= 1;
                    continue;
                }
                _ => {}
            }
            if depth == 0 {
                out.push(c);
            }
        }
        out
    }

    /// Backticked identifiers in ARCHITECTURE.md's table rows (`| ... |`) outside parenthesised
    /// asides that look like function names (lower case with an underscore, or with a leading
    /// `__`).
    pub(super) fn codemap_functions(text: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for line in text.lines().filter(|l| l.trim_start().starts_with('|')).map(without_asides) {
            for (k, piece) in line.split('`').enumerate() {
                if k % 2 == 1 && is_ident(piece) && piece.contains('_') && !piece.starts_with('_') || piece.starts_with("__") && is_ident(piece) {
                    out.insert(piece.to_string());
                }
            }
        }
        out
    }

    #[test]
    fn every_function_the_codemap_names_exists() {
        let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
        // Every whole word of the sources outside comments: functions, fields, variants and the
        // counter names in string literals (`nr_anon`); a name only in a comment does not count.
        let mut defined = BTreeSet::new();
        for f in all_sources() {
            let src = std::fs::read_to_string(&f).expect("read");
            for line in src.lines() {
                for w in code_part(line).split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                    if !w.is_empty() {
                        defined.insert(w.to_string());
                    }
                }
            }
        }
        let names = codemap_functions(&text);
        assert!(names.len() >= 20, "only {} names found in the codemap tables", names.len());
        let missing: Vec<_> = names.iter().filter(|n| !defined.contains(*n)).cloned().collect();
        assert!(missing.is_empty(), "ARCHITECTURE.md's codemap names what the sources do not have outside comments: {}", missing.join(", "));
    }

    // The checks themselves.

    #[test]
    fn a_module_map_is_its_name_colon_entries() {
        let text = "//! Intro with [`Census`] and [`other`] links.\n//! - [`alpha`]: one.\n//! - [`beta`]: two; [`gamma`]: three.\n\nmod alpha;\npub mod beta;\n#[cfg(test)]\nmod delta;\npub(crate) mod gamma;\nmod inline_tests;\n";
        let want: BTreeSet<String> = ["alpha", "beta", "gamma"].iter().map(|s| s.to_string()).collect();
        assert_eq!(module_map(text), want);
        assert_eq!(file_modules(text), want);
        assert_eq!(file_modules("mod x {\n    mod inner {\n    }\n}\nmod y;\n").len(), 2);
    }

    #[test]
    fn cited_paths_are_ours_and_kernel_paths_are_not() {
        let got = cited_paths("see `benches/faults.rs`, mm/memory.c, docs/trace-format.md. and crates/sim/src/tests.rs");
        let want: BTreeSet<String> = ["benches/faults.rs", "docs/trace-format.md", "crates/sim/src/tests.rs"].iter().map(|s| s.to_string()).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn codemap_functions_are_the_backticked_names_of_table_rows() {
        let text = "| `mm` | mm/page_alloc.c | `__rmqueue_smallest`, `free_one_page` (`free_pcppages_bulk`), `Zone` |\nnot a row `other_name`\n";
        let want: BTreeSet<String> = ["__rmqueue_smallest", "free_one_page", "mm"].iter().filter(|s| s.contains('_')).map(|s| s.to_string()).collect();
        assert_eq!(codemap_functions(text), want);
    }
}
