//! `thplab exporter` as an entry point that takes already-parsed arguments (the CLI keeps only
//! its argument struct): checks the THP tree, binds, says where it serves and serves until
//! killed; and the parser of its `--budget`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Result};

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

/// Serve `/metrics` on `listen` for the processes selected by `names`, `cgroups` and `pids`,
/// each scrape within `budget`; `debug` prints a line per scrape on stderr.
pub fn run(listen: &str, names: &[String], cgroups: &[String], pids: &[i32], budget: Duration, debug: bool) -> Result<u8> {
    let root = probe::metrics::Root::live();
    probe::metrics::check_tree(&root)?;
    let selection = crate::selection(names, cgroups, pids).map_err(|e| anyhow!(e))?;
    let http = crate::bind(listen).map_err(|e| anyhow!(e))?;
    let addr = http.server_addr().to_ip().map(|a| a.to_string()).unwrap_or_else(|| listen.to_string());
    eprintln!("thplab exporter: serving http://{addr}/metrics (budget {} ms)", budget.as_millis());
    if !selection.is_empty() && !probe::sysfs::is_root() {
        eprintln!(
            "thplab exporter: not root: the census and bloat of the selected processes are left out \
             (counted in thplab_scrape_errors_total{{kind=\"permission\"}}); Rss and AnonHugePages of your own processes are served"
        );
    }
    let ex = Arc::new(crate::Exporter::new(crate::Options { root, selection, budget, debug }));
    crate::serve(&ex, &http);
    Ok(0)
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
