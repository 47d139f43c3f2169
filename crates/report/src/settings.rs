//! `thplab settings`: the settings as the model reads them (`/sys/kernel/mm/transparent_hugepage/`
//! paths and values: mm/huge_memory.c `hugepage_init_sysfs`, `thpsize_create`), or every
//! settable path with the values it accepts (`--list`), as text or JSON.

use std::io::Write;

use thp_abi::ThpSettings;

/// `thplab settings --list --json`: every settable path with the values it accepts, in the
/// order of the text list.
pub fn list_json() -> serde_json::Value {
    let list: Vec<serde_json::Value> = ThpSettings::valid_paths()
        .into_iter()
        .map(|p| {
            let values = ThpSettings::valid_values(&p).unwrap_or_default();
            serde_json::json!({ "path": p, "values": values })
        })
        .chain(thp_abi::version::list_entries().into_iter().map(|(p, v)| serde_json::json!({ "path": p, "values": v })))
        .collect();
    serde_json::Value::Array(list)
}

/// `thplab settings --list`: each settable path and its values, a line each (or [`list_json`]).
pub fn print_list(out: &mut impl Write, json: bool) -> anyhow::Result<()> {
    if json {
        serde_json::to_writer_pretty(&mut *out, &list_json())?;
        writeln!(out)?;
        return Ok(());
    }
    for p in ThpSettings::valid_paths() {
        writeln!(out, "{p}: {}", ThpSettings::valid_values(&p).unwrap_or_default())?;
    }
    for (path, values) in thp_abi::version::list_entries() {
        write!(out, "{}", wrap_entry(&path, &values, 100))?;
    }
    Ok(())
}

/// `PATH: VALUES` folded at spaces to lines of at most `width` columns, the continuation lines
/// indented by two spaces (a word longer than a line stays whole).
fn wrap_entry(path: &str, values: &str, width: usize) -> String {
    crate::text::wrap(&format!("{path}: {values}"), Some(width), 2).into_iter().map(|l| l + "\n").collect()
}

/// `thplab settings`: `s` as its knob map in JSON, or as text.
pub fn print(out: &mut impl Write, s: &ThpSettings, json: bool) -> anyhow::Result<()> {
    if json {
        serde_json::to_writer_pretty(&mut *out, &s.knob_map())?;
        writeln!(out)?;
    } else {
        write!(out, "{s}")?;
    }
    Ok(())
}

#[cfg(test)]
mod wrap_tests {
    #[test]
    fn an_entry_folds_at_spaces_within_the_width() {
        let t = super::wrap_entry("policy", "none, aaaa bbbb cccc", 14);
        assert_eq!(t, "policy: none,\n  aaaa bbbb\n  cccc\n");
        assert_eq!(super::wrap_entry("kernel", "6.18", 100), "kernel: 6.18\n");
    }
}
