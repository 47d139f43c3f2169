//! Text tables that fit a terminal: cells laid out in columns as wide as their widest cell,
//! words wrapped, long names cut in the middle, and the folio-size map (`thplab sim`,
//! `thplab observe`) fitted to [`TEXT_WIDTH`] columns.

use std::collections::BTreeSet;

use thp_abi::{Census, FolioSize};
use uapi::result::VmaMap;

/// The width text tables fit by default (`--wide` lifts it).
pub const TEXT_WIDTH: usize = 100;

/// The folio-size map as a table, one row per VMA and a total: address range, perms, Rss,
/// folios per size (`-` for none), PMD-mapped, partially mapped, zero-page PTEs, huge-zero
/// PMDs, name. `thplab observe` and `thplab sim` print the same table, fitted to
/// [`TEXT_WIDTH`] columns ([`vma_table_fit`]).
pub fn vma_table(vmas: &[VmaMap], total: &Census, total_rss_kb: u64) -> String {
    vma_table_fit(vmas, total, total_rss_kb, Some(TEXT_WIDTH))
}

/// One row of [`vma_table_fit`] before it is laid out.
struct VmaRow {
    pid: String,
    range: String,
    perms: String,
    rss: String,
    sizes: Vec<String>,
    /// The sizes in one cell: `4kB×398 64kB×3`.
    folios: String,
    tail: [String; 4],
    name: String,
}

fn vma_row(pid: Option<u32>, range: String, perms: &str, rss_kb: u64, c: &Census, sizes: &[FolioSize], name: String) -> VmaRow {
    let dash = |n: u64| if n == 0 { "-".to_string() } else { n.to_string() };
    let count = |s: &FolioSize| c.sizes.get(s).map(|e| e.folios).unwrap_or(0);
    let folios: Vec<String> = sizes.iter().filter(|s| count(s) > 0).map(|s| format!("{s}×{}", count(s))).collect();
    VmaRow {
        pid: pid.map(|p| p.to_string()).unwrap_or_default(),
        range,
        perms: perms.to_string(),
        rss: format!("{rss_kb} kB"),
        sizes: sizes.iter().map(|s| dash(count(s))).collect(),
        folios: if folios.is_empty() { "-".into() } else { folios.join(" ") },
        tail: [
            dash(c.sizes.values().map(|e| e.pmd_mapped).sum()),
            dash(c.sizes.values().map(|e| e.partially_mapped).sum()),
            dash(c.zero_page_ptes),
            dash(c.huge_zero_pmds),
        ],
        name,
    }
}

/// Cells laid out in columns two spaces apart, each as wide as its widest cell; `left` columns
/// are aligned left, the others right. The last column is never padded.
pub fn layout(rows: &[Vec<String>], left: &[bool]) -> Vec<String> {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width = |i: usize| rows.iter().filter_map(|r| r.get(i)).map(|c| c.chars().count()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n).map(width).collect();
    rows.iter()
        .map(|r| {
            let mut line = String::new();
            for (i, c) in r.iter().enumerate() {
                if i > 0 {
                    line += "  ";
                }
                let pad = widths[i].saturating_sub(c.chars().count());
                let last = i + 1 == r.len();
                if left.get(i).copied().unwrap_or(false) {
                    line += c;
                    if !last {
                        line += &" ".repeat(pad);
                    }
                } else {
                    line += &" ".repeat(pad);
                    line += c;
                }
            }
            line.trim_end().to_string()
        })
        .collect()
}

/// Lines wider than `max` with their last column (words apart by single spaces) wrapped onto
/// continuation lines that start where it starts, or, when that leaves it under 30 columns, on
/// lines of their own indented by 4.
fn wrap_last(lines: Vec<String>, max: usize) -> Vec<String> {
    let mut out = Vec::new();
    for l in lines {
        let at = l.rfind("  ").map(|i| l[..i + 2].chars().count());
        let Some(at) = at.filter(|_| l.chars().count() > max) else {
            out.push(l);
            continue;
        };
        let words: String = l.chars().skip(at).collect();
        let prefix: String = l.chars().take(at).collect();
        let (indent, mut cur) = if at + 30 <= max {
            (at, prefix)
        } else {
            out.push(prefix.trim_end().to_string());
            (4, " ".repeat(4))
        };
        for word in words.split(' ') {
            let n = cur.chars().count();
            if n > indent && n + 1 + word.chars().count() > max {
                out.push(cur);
                cur = " ".repeat(indent);
            }
            if cur.chars().count() > indent {
                cur.push(' ');
            }
            cur += word;
        }
        out.push(cur);
    }
    out
}

/// Words wrapped to `width` columns (none with `None`), continuation lines indented by
/// `indent`; the text's own leading spaces stay on its first line.
pub fn wrap(text: &str, width: Option<usize>, indent: usize) -> Vec<String> {
    let Some(width) = width else { return vec![text.to_string()] };
    let mut out = Vec::new();
    let lead = text.len() - text.trim_start_matches(' ').len();
    let (mut cur, mut start) = (" ".repeat(lead), lead);
    for word in text[lead..].split(' ') {
        let n = cur.chars().count();
        if n > start && n + 1 + word.chars().count() > width {
            out.push(std::mem::replace(&mut cur, " ".repeat(indent)));
            start = indent;
        }
        if cur.chars().count() > start {
            cur.push(' ');
        }
        cur += word;
    }
    out.push(cur);
    out
}

/// `s` cut to `max` characters by an ellipsis in its middle (a path keeps its file name).
pub fn elide(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max || max < 5 {
        return s.to_string();
    }
    let base = s.rsplit('/').next().map_or(0, |b| b.chars().count() + 1);
    let tail = if s.contains('/') && base + 4 <= max { base } else { (max - 1) / 2 };
    let head = max - 1 - tail;
    let chars: Vec<char> = s.chars().collect();
    format!("{}…{}", chars[..head].iter().collect::<String>(), chars[n - tail..].iter().collect::<String>())
}

/// [`vma_table`] laid out to `max` columns, or as wide as it needs with `None`: a column per
/// folio size while that fits (names cut in the middle to the width left, 16 at least), else
/// the sizes in a last `folios` column (`4kB×398 64kB×3`, wrapped), names cut to 24.
pub fn vma_table_fit(vmas: &[VmaMap], total: &Census, total_rss_kb: u64, max: Option<usize>) -> String {
    // Every size of the total and of the VMAs, smallest first (the keys' order).
    let sizes: Vec<FolioSize> =
        total.sizes.keys().chain(vmas.iter().flat_map(|v| v.census.sizes.keys())).cloned().collect::<BTreeSet<_>>().into_iter().collect();
    let with_pid = vmas.iter().any(|v| v.pid.is_some());
    let mut rows: Vec<VmaRow> = vmas
        .iter()
        .map(|v| {
            let name = if !v.name.is_empty() {
                v.name.clone()
            } else if v.kind.is_empty() || v.kind == "anon" {
                "[anon]".to_string()
            } else {
                format!("[{}]", v.kind)
            };
            vma_row(v.pid, format!("{}-{}", v.start, v.end), &v.perms, v.rss_kb, &v.census, &sizes, name)
        })
        .collect();
    rows.push(vma_row(None, "total".into(), "", total_rss_kb, total, &sizes, String::new()));
    let tail_head = ["pmd", "partial", "zero", "hzero"].map(String::from);
    let table = |compact: bool, name_width: Option<usize>| -> Vec<String> {
        let mut head: Vec<String> = Vec::new();
        let mut left: Vec<bool> = Vec::new();
        if with_pid {
            head.push("pid".into());
            left.push(false);
        }
        head.extend(["address range".to_string(), "perm".into(), "Rss".into()]);
        left.extend([true, true, false]);
        if !compact {
            head.extend(sizes.iter().map(|s| s.to_string()));
            left.extend(sizes.iter().map(|_| false));
        }
        head.extend(tail_head.iter().cloned());
        left.extend([false; 4]);
        head.push("name".into());
        left.push(true);
        if compact {
            head.push("folios".into());
            left.push(true);
        }
        let mut cells = vec![head];
        for r in &rows {
            let mut c: Vec<String> = Vec::new();
            if with_pid {
                c.push(r.pid.clone());
            }
            c.extend([r.range.clone(), r.perms.clone(), r.rss.clone()]);
            if !compact {
                c.extend(r.sizes.iter().cloned());
            }
            c.extend(r.tail.iter().cloned());
            // Some(0): no name, to measure the rest.
            c.push(match name_width {
                None => r.name.clone(),
                Some(0) => String::new(),
                Some(w) => elide(&r.name, w),
            });
            if compact {
                c.push(r.folios.clone());
            }
            cells.push(c);
        }
        layout(&cells, &left)
    };
    let widest = |lines: &[String]| lines.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let mut lines = table(false, None);
    if let Some(max) = max {
        if widest(&lines) > max {
            // Names cut to the room the rest of the widest line leaves (16 at least).
            let fit = |compact: bool| {
                let room = max.saturating_sub(widest(&table(compact, Some(0))) + 2).max(16);
                table(compact, Some(room))
            };
            let per_size = fit(false);
            lines = if widest(&per_size) <= max { per_size } else { wrap_last(table(true, Some(24)), max) };
        }
    }
    let mut out = String::new();
    for l in lines {
        out += &l;
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use thp_abi::CensusEntry;

    #[test]
    fn layout_aligns_columns_on_their_widest_cell() {
        let cells = |v: &[&[&str]]| v.iter().map(|r| r.iter().map(|c| c.to_string()).collect()).collect::<Vec<Vec<String>>>();
        assert_eq!(layout(&cells(&[&["a", "1", "x"], &["long", "1234", "y"]]), &[true, false, true]), ["a        1  x", "long  1234  y"]);
        // Width is in characters: `×` and `µ` take one column.
        assert_eq!(layout(&cells(&[&["4kB×3", "1 µs"], &["4kB", "10 µs"]]), &[true, false]), ["4kB×3   1 µs", "4kB    10 µs"]);
        // A short last cell is not padded.
        assert_eq!(layout(&cells(&[&["ab", "c"], &["d"]]), &[true, true]), ["ab  c", "d"]);
        assert_eq!(elide("/usr/lib/x86_64-linux-gnu/libc.so.6", 16), "/usr/…/libc.so.6");
        assert_eq!(elide("abcdefghijklmnopqrstuvwxyz", 9), "abcd…wxyz");
        assert_eq!(elide("[anon]", 16), "[anon]");
    }

    fn vma(start: &str, end: &str, name: &str, sizes: &[(&str, u64)]) -> VmaMap {
        let census = Census { sizes: sizes.iter().map(|(s, n)| ((*s).into(), CensusEntry { folios: *n, ..Default::default() })).collect(), ..Default::default() };
        VmaMap { start: start.into(), end: end.into(), perms: "rw-p".into(), name: name.into(), rss_kb: 8192, census, ..Default::default() }
    }

    #[test]
    fn the_vma_table_fits_its_width() {
        let a = vma("7dffef400000", "7dffefc00000", "", &[("2048kB", 4)]);
        let t = vma_table(std::slice::from_ref(&a), &a.census, 8192);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "address range              perm      Rss  2048kB  pmd  partial  zero  hzero  name");
        assert_eq!(lines[1], "7dffef400000-7dffefc00000  rw-p  8192 kB       4    -        -     -      -  [anon]");
        assert_eq!(lines[2], "total                            8192 kB       4    -        -     -      -");
        // Ten sizes do not fit 100 columns: one `folios` column, the long name cut; --wide
        // (None) keeps a column per size and the whole name.
        let all: Vec<(String, u64)> = [4u64, 16, 32, 64, 128, 256, 512, 1024, 2048].iter().map(|k| (format!("{k}kB"), 100)).collect();
        let all: Vec<(&str, u64)> = all.iter().map(|(s, n)| (s.as_str(), *n)).collect();
        let name = "/usr/lib/x86_64-linux-gnu/a-rather-long-library-name.so.1";
        let b = vma("7f0000000000", "7f0000800000", name, &all);
        let t = vma_table(std::slice::from_ref(&b), &b.census, 8192);
        assert!(t.lines().all(|l| l.chars().count() <= TEXT_WIDTH), "{t}");
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "address range              perm      Rss  pmd  partial  zero  hzero  name");
        assert_eq!(lines[1], "    folios");
        let lines = &lines[1..];
        assert_eq!(lines[1], "7f0000000000-7f0000800000  rw-p  8192 kB    -        -     -      -  /usr/lib/x86…y-name.so.1");
        assert_eq!(lines[2], "    4kB×100 16kB×100 32kB×100 64kB×100 128kB×100 256kB×100 512kB×100 1024kB×100 2048kB×100");
        assert_eq!(lines[3], "total                            8192 kB    -        -     -      -");
        assert_eq!(lines.len(), 5);
        let wide = vma_table_fit(std::slice::from_ref(&b), &b.census, 8192, None);
        assert!(wide.lines().next().unwrap().contains("  1024kB  2048kB  pmd"), "{wide}");
        assert!(wide.lines().nth(1).unwrap().ends_with(name) && wide.lines().map(|l| l.chars().count()).max().unwrap() > TEXT_WIDTH);
    }
}
