//! Checks of the command line that clap cannot make alone (issue #27 items 11, 12; a `--matrix`
//! that took the workload's name as its value is given back, and the smallest `--mem` that
//! leaves memory above the min watermark is checked, in `experiment::resolve`): standard input
//! named twice, the message of a clap error in a JSON error object (`settings --list --json` is
//! `report::settings`).

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

    #[test]
    fn clap_messages_keep_the_argument_names() {
        let r = "error: the following required arguments were not provided:\n  <WORKLOAD>\n\nUsage: thplab sim --json <WORKLOAD>\n\nFor more information, try '--help'.\n";
        assert_eq!(clap_message(r), "the following required arguments were not provided: <WORKLOAD>");
        assert_eq!(clap_message("error: unexpected argument '--frobnicate' found\n\nUsage: x\n"), "unexpected argument '--frobnicate' found");
    }
}
