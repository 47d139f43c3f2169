//! `thplab agent` as an entry point that takes already-parsed arguments (the CLI keeps only
//! its argument struct): checks them, runs [`crate::run`] and prints every action and the
//! summary, as text or as JSON lines (schema `thplab-agent/1`).

use std::time::Duration;

use anyhow::Result;

/// The arguments of `thplab agent`, parsed by the CLI (clap) and checked by [`run`].
#[derive(clap::Args, Clone, Debug)]
pub struct Options {
    /// A process the agent may touch (repeatable). The allowlist is --pid and --name together;
    /// nothing else is touched.
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<i32>,
    /// A command name (as /proc/PID/comm shows it, at most 15 bytes) whose processes the agent
    /// may touch (repeatable).
    #[arg(long = "name", value_name = "NAME")]
    pub names: Vec<String>,
    /// Print every range it would collapse, best first, and why (one pass, within --max-collapses
    /// and --memory; --rate and --cpu pace a real run only), and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Collapses per second at most (sustained; at most one second's worth saved up).
    #[arg(long, value_name = "N", default_value_t = 1.0)]
    pub rate: f64,
    /// Collapses in all, then stop.
    #[arg(long, value_name = "N")]
    pub max_collapses: Option<u64>,
    /// CPU time the agent may use, in percent of one CPU over its run (the collapses' copy and
    /// allocation run in the agent's context and count here).
    #[arg(long = "cpu", value_name = "PERCENT", default_value_t = 5.0)]
    pub cpu_percent: f64,
    /// Memory the collapses may add in all (pages of a range that were not present are filled):
    /// a size such as 64M.
    #[arg(long = "memory", value_name = "SIZE", default_value = "64M", value_parser = probe::command::size_arg)]
    pub memory_bytes: u64,
    /// A collapse that takes longer than this stalls its target (the mmap lock is held while
    /// it copies): the target is left alone for a while (1 s, doubling up to 64 s), as after a
    /// failed collapse.
    #[arg(long, value_name = "MS", default_value_t = 50)]
    pub max_stall_ms: u64,
    /// A 2 MiB range needs at least this many present pages (of 512) to be collapsed.
    #[arg(long, value_name = "PAGES", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=512))]
    pub min_present: u64,
    /// Milliseconds between passes over the targets.
    #[arg(long = "interval", value_name = "MS", default_value_t = 1000, value_parser = probe::command::interval_ms)]
    pub interval_ms: u64,
    /// Stop after this many seconds (default: until Ctrl-C or until --max-collapses).
    #[arg(long = "duration", value_name = "SECONDS", value_parser = probe::command::seconds)]
    pub duration_s: Option<f64>,
    /// Print every action and the summary as JSON lines (schema `thplab-agent/1`).
    #[arg(long)]
    pub json: bool,
}

/// Exit codes: 0 after the run; 2 with no allowlist; 5 without root.
pub fn run(o: &Options) -> Result<i32> {
    if o.pids.is_empty() && o.names.is_empty() {
        anyhow::bail!("the agent touches only the processes you allow: give --pid PID or --name COMM (repeatable)");
    }
    if !(o.rate > 0.0 && o.rate.is_finite()) {
        anyhow::bail!("--rate {}: give a positive number of collapses per second, such as 1 or 0.2", o.rate);
    }
    if !probe::sysfs::is_root() {
        return Err(probe::LiveError::NotAvailable("thplab agent reads other processes' pagemaps and calls process_madvise(MADV_COLLAPSE) on them: it needs root".into()).into());
    }
    for pid in &o.pids {
        probe::command::require_user_process("agent", *pid, "to collapse")?;
    }
    let allow = crate::Allowlist { pids: o.pids.clone(), names: o.names.clone() };
    if allow.resolve().is_empty() {
        eprintln!("thplab agent: warning: no process on the allowlist is running now (names are matched against /proc/PID/comm, at most 15 bytes){}", if o.dry_run { "" } else { "; waiting for one" });
    }
    probe::khugepaged::stop_on_signals();
    let budget = crate::Budget {
        per_sec: o.rate,
        total: o.max_collapses,
        cpu_fraction: o.cpu_percent / 100.0,
        memory_bytes: o.memory_bytes,
        max_stall: Duration::from_millis(o.max_stall_ms),
        min_present: o.min_present,
    };
    let json = o.json;
    let duration = o.duration_s.map(Duration::from_secs_f64).unwrap_or(Duration::from_secs(u64::MAX / 4));
    let log = |a: &crate::Action| {
        let line = if json {
            let mut v = serde_json::to_value(a).expect("serializable");
            v.as_object_mut().expect("object").insert("schema".into(), "thplab-agent/1".into());
            v.to_string()
        } else {
            let what = match (&a.start, a.present_pages) {
                (Some(s), Some(p)) => format!(" {s} ({p} pages present, adds {} kB)", a.adds_bytes.unwrap_or(0) >> 10),
                _ => String::new(),
            };
            let took = a.duration_us.map(|d| format!(" in {d} µs")).unwrap_or_default();
            let err = a.errno.as_ref().map(|e| format!(": {e}")).unwrap_or_default();
            format!("{:8.3} {:<14} {} {}{what}{took}{err}: {}", a.t, a.action, a.pid, a.comm, a.reason)
        };
        println!("{line}");
    };
    let s = crate::run(&allow, &budget, o.dry_run, Duration::from_millis(o.interval_ms), duration, probe::khugepaged::stop_requested, log)?;
    if json {
        let mut v = serde_json::to_value(&s)?;
        v.as_object_mut().expect("object").insert("schema".into(), "thplab-agent/1".into());
        v.as_object_mut().expect("object").insert("summary".into(), true.into());
        println!("{v}");
    } else {
        let fails: Vec<String> = s.failures.iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!(
            "{} over {:.1} s: {} collapsed{}, {} failed{}; memory added {} kB of {} kB; CPU {:.1} ms ({:.2} % of one CPU, budget {} %); at most {} in any second (budget {}/s)",
            if o.dry_run { "dry run" } else { "agent" },
            s.seconds,
            if o.dry_run { s.would_collapse } else { s.collapses },
            if o.dry_run { " (would be)" } else { "" },
            s.failures.values().sum::<u64>(),
            if fails.is_empty() { String::new() } else { format!(" ({})", fails.join(", ")) },
            s.memory_added_bytes >> 10,
            s.budget_memory_bytes >> 10,
            s.cpu_ms,
            if s.seconds >= 0.1 { s.cpu_ms / (s.seconds * 10.0) } else { 0.0 },
            o.cpu_percent,
            s.max_collapses_in_a_second,
            o.rate,
        );
    }
    Ok(0)
}
