//! Checks of the command line that clap cannot make alone (issue #27 items 11, 12; a `--matrix`
//! that took the workload's name as its value is given back in `resolve`): standard input named twice, the
//! smallest `--mem` that leaves memory above the min watermark, the message of a clap error
//! in a JSON error object (`settings --list --json` is `report::settings`).

use anyhow::{bail, Result};

use crate::SettingsArgs;

/// Standard input is read once: refuse `-` named by more than one of the inputs (`files`: the
/// workload, `--profile`; and each `--settings`), which would read it twice and find it empty
/// the second time.
pub fn stdin_once(files: &[&str], settings: &SettingsArgs) -> Result<()> {
    let mut named: Vec<&str> = Vec::new();
    for (i, f) in files.iter().enumerate() {
        if *f == "-" {
            named.push(if i == 0 { "the workload" } else { "--profile" });
        }
    }
    named.extend(settings.settings_file.iter().filter(|f| f.as_os_str() == "-").map(|_| "--settings"));
    if named.len() > 1 {
        bail!("standard input (-) is named {} times ({}), but it can be read only once: give the others as files", named.len(), named.join(", "));
    }
    Ok(())
}

/// What the simulated machine must have above the min watermark to run a workload: one
/// MAX_PAGE_ORDER block (4 MiB).
pub const MEM_ABOVE_WATERMARK: u64 = 4 << 20;

/// The smallest `--mem`: the min watermark (`vm.min_free_kbytes`, 66 MiB on this machine kind;
/// `__setup_per_zone_wmarks`), which no allocation may take, plus [`MEM_ABOVE_WATERMARK`];
/// below it the first fault runs out of memory.
pub fn min_mem_bytes(m: &sim::MachineConfig) -> u64 {
    ((m.min_free_kbytes << 10) + MEM_ABOVE_WATERMARK).max(sim::MIN_MEM_BYTES)
}

/// A clap error as one line for the JSON error object: its first paragraph (the error and the
/// lines that name the arguments: `the following required arguments were not provided:
/// <WORKLOAD>`), without `error: ` and the usage.
pub fn clap_message(rendered: &str) -> String {
    let words: Vec<&str> = rendered.lines().take_while(|l| !l.trim().is_empty()).map(str::trim).collect();
    words.join(" ").trim_start_matches("error: ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::workload_and_matrix;

    #[test]
    fn the_matrix_gives_back_a_workload_name_it_took() {
        let s = |x: &str| Some(x.to_string());
        assert_eq!(workload_and_matrix(None, s("seed-anon-1g")).unwrap(), (s("seed-anon-1g"), s("anon")));
        assert_eq!(workload_and_matrix(s("w"), s("shmem:top")).unwrap(), (s("w"), s("shmem:top")));
        assert_eq!(workload_and_matrix(None, s("anon")).unwrap(), (None, s("anon")));
        assert!(workload_and_matrix(s("w"), s("anon:2M")).is_err());
        assert_eq!(workload_and_matrix(s("w"), None).unwrap(), (s("w"), None));
    }

    #[test]
    fn the_smallest_memory_is_the_watermark_and_a_block() {
        let m = sim::MachineConfig::default();
        assert_eq!(m.min_free_kbytes, 67584);
        assert_eq!(min_mem_bytes(&m), 70 << 20, "66 MiB of min watermark and 4 MiB");
    }

    #[test]
    fn clap_messages_keep_the_argument_names() {
        let r = "error: the following required arguments were not provided:\n  <WORKLOAD>\n\nUsage: thplab sim --json <WORKLOAD>\n\nFor more information, try '--help'.\n";
        assert_eq!(clap_message(r), "the following required arguments were not provided: <WORKLOAD>");
        assert_eq!(clap_message("error: unexpected argument '--frobnicate' found\n\nUsage: x\n"), "unexpected argument '--frobnicate' found");
    }
}
