//! `thplab explain --pid PID [ADDR] [--json]`: the work is in the `explain` crate (the model's
//! order policy on the live inputs of the process, beside its census); this only adapts it to
//! the CLI.

use std::io::Write;

use anyhow::{bail, Context, Result};
use clap::Args;

/// Arguments of `thplab explain`.
#[derive(Args, Clone, Debug)]
pub struct ExplainArgs {
    /// The process to explain.
    #[arg(long)]
    pub pid: i32,
    /// Only the VMA holding this address (hex, with or without 0x); the fault verdict is then
    /// for a fault at this address.
    #[arg(value_name = "ADDR")]
    pub addr: Option<String>,
    /// Print one JSON object instead of the text.
    #[arg(long)]
    pub json: bool,
}

fn parse_addr(s: &str) -> Result<u64> {
    let t = s.trim().trim_start_matches("0x").trim_start_matches("0X");
    u64::from_str_radix(t, 16).with_context(|| format!("ADDR '{s}' is not a hexadecimal address (example: 7f3a12000000)"))
}

impl ExplainArgs {
    pub fn run(&self) -> Result<u8> {
        let addr = self.addr.as_deref().map(parse_addr).transpose()?;
        crate::live_cmds::require_observable("explain", self.pid)?;
        let report = match explain::explain_pid(self.pid, addr) {
            Ok(r) => r,
            Err(live::LiveError::NoSuchProcess { pid }) => bail!("explain --pid {pid}: process {pid} exited before it could be explained"),
            Err(e) => return Err(e).with_context(|| format!("explaining process {}", self.pid)),
        };
        if let Some(a) = addr {
            if report.vmas.is_empty() {
                bail!("process {} has no VMA holding {a:#x}", self.pid);
            }
        }
        let text = if self.json {
            format!("{}\n", serde_json::to_string(&report).context("cannot print JSON")?)
        } else {
            report.to_string()
        };
        std::io::stdout().lock().write_all(text.as_bytes()).context("cannot write to stdout")?;
        Ok(0)
    }
}
