//! Errors as JSON: under `--json`, a command that fails prints one line on stdout, an object of
//! schema `thplab-error/1` (docs/results-schema.md), besides the usual `thplab: ...` line on
//! stderr, so that a program reading stdout always gets JSON.

use std::ffi::OsString;
use std::io::Write;

/// Whether `--json` is among the arguments (before a `--` that starts a program's own).
pub fn json_requested(args: impl Iterator<Item = OsString>) -> bool {
    args.skip(1).take_while(|a| a != "--").any(|a| a == "--json")
}

/// The name of an exit code in the error object.
pub fn kind(code: u8) -> &'static str {
    match code {
        crate::exit::SIM_FAILED => "sim_failed",
        crate::exit::DIFFERS => "differs",
        crate::exit::LIVE_UNAVAILABLE => "live_unavailable",
        _ => "bad_input",
    }
}

/// The error object of `e` with exit code `code`.
pub fn object(e: &anyhow::Error, code: u8) -> serde_json::Value {
    let mut o = serde_json::json!({
        "schema": "thplab-error/1",
        "exit_code": code,
        "kind": kind(code),
        "message": format!("{e:#}"),
    });
    for c in e.chain() {
        if let Some(s) = c.downcast_ref::<sim::SimError>() {
            o["file"] = s.source_name.clone().into();
            match s.record {
                Some((n, b)) => {
                    o["record"] = n.into();
                    if let Some(b) = b {
                        o["byte"] = b.into();
                    }
                }
                None => o["line"] = s.line.into(),
            }
            break;
        }
        if let Some(w) = c.downcast_ref::<workload::WorkloadError>() {
            o["file"] = w.source_name.clone().into();
            o["line"] = w.line.into();
            break;
        }
        if let Some(thp_abi::settings::SettingsError::AtLine { file, line, .. }) = c.downcast_ref::<thp_abi::settings::SettingsError>() {
            o["file"] = file.clone().into();
            o["line"] = (*line).into();
            break;
        }
        if let Some(t) = c.downcast_ref::<trace::TraceError>() {
            o["byte"] = t.offset().into();
            break;
        }
        if let Some(d) = c.downcast_ref::<crate::input::Damaged>() {
            o["byte"] = d.offset.into();
            break;
        }
    }
    o
}

/// Print the error object on stdout, one line (a closed stdout is ignored).
pub fn print_json(e: &anyhow::Error, code: u8) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", object(e, code));
}
