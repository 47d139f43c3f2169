//! `thplab exporter`: the work is in `crates/exporter` (encoding and HTTP) and `live::metrics`
//! (reading); this only adapts it to the CLI.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Result};
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
    #[arg(long, value_name = "DURATION", default_value = "500ms", value_parser = parse_budget)]
    pub budget: Duration,
    /// Print one line per scrape on stderr (its time, the processes read and skipped, and any
    /// errors).
    #[arg(long)]
    pub debug: bool,
}

/// `500ms`, `1s`, `0.25s`, `500`: a budget between 1 ms and 60 s.
pub fn parse_budget(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        (t, 1e-3)
    };
    let v: f64 = num.trim().parse().map_err(|_| format!("'{s}' is not a duration (examples: 500ms, 1s, 0.25s)"))?;
    let secs = v * scale;
    if !secs.is_finite() || !(0.001..=60.0).contains(&secs) {
        return Err(format!("'{s}': the budget must be between 1ms and 60s"));
    }
    Ok(Duration::from_secs_f64(secs))
}

impl ExporterArgs {
    pub fn run(&self) -> Result<u8> {
        let root = live::metrics::Root::live();
        live::metrics::check_tree(&root)?;
        let selection = exporter::selection(&self.names, &self.cgroups, &self.pids).map_err(|e| anyhow!(e))?;
        let http = exporter::bind(&self.listen).map_err(|e| anyhow!(e))?;
        let addr = http.server_addr().to_ip().map(|a| a.to_string()).unwrap_or_else(|| self.listen.clone());
        eprintln!("thplab exporter: serving http://{addr}/metrics (budget {} ms)", self.budget.as_millis());
        if !selection.is_empty() && !live::sysfs::is_root() {
            eprintln!(
                "thplab exporter: not root: the census and bloat of the selected processes are left out \
                 (counted in thplab_scrape_errors_total{{kind=\"permission\"}}); Rss and AnonHugePages of your own processes are served"
            );
        }
        let ex = Arc::new(exporter::Exporter::new(exporter::Options { root, selection, budget: self.budget, debug: self.debug }));
        exporter::serve(&ex, &http);
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets() {
        assert_eq!(parse_budget("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_budget("0.25s"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_budget("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_budget("750"), Ok(Duration::from_millis(750)));
        assert_eq!(parse_budget("fast"), Err("'fast' is not a duration (examples: 500ms, 1s, 0.25s)".into()));
        assert_eq!(parse_budget("0ms"), Err("'0ms': the budget must be between 1ms and 60s".into()));
        assert_eq!(parse_budget("2m"), Err("'2m' is not a duration (examples: 500ms, 1s, 0.25s)".into()));
    }
}
