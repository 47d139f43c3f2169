//! `thplab exporter`: the arguments; the command is `exporter::command::run` (encoding and
//! HTTP in crates/exporter, reading in `probe::metrics`).

use std::time::Duration;

use anyhow::Result;
use clap::Args;

/// Arguments of `thplab exporter`.
#[derive(Args, Clone, Debug)]
pub struct ExporterArgs {
    /// Address and port to serve on: GET /metrics is the exposition (OpenMetrics text), GET /
    /// a short page. Port 0 picks a free port (printed on stderr).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:9464")]
    pub listen: String,
    /// Select the processes whose command name (/proc/PID/comm, at most 15 characters)
    /// matches this regular expression, for the per-process census and bloat (repeatable;
    /// the selection is made again at every scrape).
    #[arg(long = "name", value_name = "REGEX")]
    pub names: Vec<String>,
    /// Select the processes in this cgroup (v2) or below it, as /proc/PID/cgroup shows it
    /// (/system.slice/foo.service) or under /sys/fs/cgroup (repeatable).
    #[arg(long = "cgroup", value_name = "PATH")]
    pub cgroups: Vec<String>,
    /// Select this process (repeatable). One that does not exist is counted in
    /// thplab_scrape_errors_total{kind="process_exited"} at every scrape.
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<i32>,
    /// Time budget of one scrape (500ms, 1s, 0.25s; a bare number is milliseconds). The
    /// per-process part stops before a census that would not end in time, and the scrape says
    /// so in thplab_scrape_truncated.
    #[arg(long, value_name = "DURATION", default_value = "500ms", value_parser = exporter::command::parse_budget)]
    pub budget: Duration,
    /// Print one line per scrape on stderr (its time, the processes read and skipped, and any
    /// errors).
    #[arg(long)]
    pub debug: bool,
}

impl ExporterArgs {
    pub fn run(&self) -> Result<u8> {
        exporter::command::run(&self.listen, &self.names, &self.cgroups, &self.pids, self.budget, self.debug)
    }
}
