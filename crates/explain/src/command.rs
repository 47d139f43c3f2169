//! `thplab explain --pid PID [ADDR] [--json]` as an entry point that takes already-parsed
//! arguments (the CLI keeps only its argument struct): checks the pid and the address, explains
//! the process ([`crate::explain_pid`]) and prints the report, as text or one JSON object.

use std::io::Write;

use anyhow::{bail, Context, Result};

fn parse_addr(s: &str) -> Result<u64> {
    let t = s.trim().trim_start_matches("0x").trim_start_matches("0X");
    u64::from_str_radix(t, 16).with_context(|| format!("ADDR '{s}' is not a hexadecimal address (example: 7f3a12000000)"))
}

/// Explain process `pid` (only the VMA holding `addr`, hex, where given). Exit codes: 0 after
/// the report; 2 for a pid without a user address space or an address no VMA holds.
pub fn run(pid: i32, addr: Option<&str>, json: bool) -> Result<u8> {
    let addr = addr.map(parse_addr).transpose()?;
    probe::command::require_observable("explain", pid)?;
    let report = match crate::explain_pid(pid, addr) {
        Ok(r) => r,
        Err(probe::LiveError::NoSuchProcess { pid }) => bail!("explain --pid {pid}: process {pid} exited before it could be explained"),
        Err(e) => return Err(e).with_context(|| format!("explaining process {pid}")),
    };
    if let Some(a) = addr {
        if report.vmas.is_empty() {
            bail!("process {pid} has no VMA holding {a:#x}");
        }
    }
    let text = if json {
        format!("{}\n", serde_json::to_string(&report).context("cannot print JSON")?)
    } else {
        report.to_string()
    };
    std::io::stdout().lock().write_all(text.as_bytes()).context("cannot write to stdout")?;
    Ok(0)
}
