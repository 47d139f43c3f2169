//! `thplab explain --pid PID [ADDR] [--json]`: the arguments; the command is
//! `explain::command::run` (the model's order policy on the live inputs of the process, beside
//! its census).

use anyhow::Result;
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

impl ExplainArgs {
    pub fn run(&self) -> Result<u8> {
        explain::command::run(self.pid, self.addr.as_deref(), self.json)
    }
}
