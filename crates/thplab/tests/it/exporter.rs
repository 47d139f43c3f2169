//! `thplab exporter` as a user runs it: bad flags exit 2 with a message naming the flag; the
//! server answers /metrics, / and nothing else; as another user (nobody) the census of
//! root's processes is left out with a counted permission error. The Prometheus test is in
//! crates/exporter/tests/prometheus.rs.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{shared, skip_reason, thplab, THPLAB};

#[test]
fn bad_flags_name_the_flag_and_exit_2() {
    let r = thplab(&["exporter", "--budget", "fast"]);
    r.fails(2);
    assert!(r.stderr.contains("invalid value 'fast' for '--budget <DURATION>': 'fast' is not a duration (examples: 500ms, 1s, 0.25s)"), "{}", r.stderr);
    let r = thplab(&["exporter", "--budget", "90s"]);
    r.fails(2);
    assert!(r.stderr.contains("'90s': the budget must be between 1ms and 60s"), "{}", r.stderr);
    if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
        eprintln!("skipped the rest: no THP sysfs tree (the exporter exits 5 first)");
        return;
    }
    let r = thplab(&["exporter", "--name", "redis(", "--listen", "127.0.0.1:0"]);
    r.fails(2);
    assert!(r.stderr.starts_with("thplab: --name 'redis(': not a valid regular expression"), "{}", r.stderr);
    let r = thplab(&["exporter", "--pid", "0", "--listen", "127.0.0.1:0"]);
    r.fails(2);
    assert_eq!(r.stderr, "thplab: --pid 0: a process id is a positive number\n");
    let r = thplab(&["exporter", "--listen", "nowhere"]);
    r.fails(2);
    assert!(r.stderr.starts_with("thplab: cannot listen on nowhere: "), "{}", r.stderr);
}

/// A running `thplab exporter`, killed on drop.
struct Running {
    child: Child,
    addr: String,
    stderr: BufReader<std::process::ChildStderr>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `[prefix...] thplab exporter --listen 127.0.0.1:0 ARGS` and read its address.
fn start(prefix: &[&str], args: &[&str]) -> Running {
    let mut cmd = match prefix.split_first() {
        Some((p, rest)) => {
            let mut c = Command::new(p);
            c.args(rest).arg(THPLAB);
            c
        }
        None => Command::new(THPLAB),
    };
    let mut child = cmd.args(["exporter", "--listen", "127.0.0.1:0"]).args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let addr = line
        .strip_prefix("thplab exporter: serving http://")
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("first line: {line:?}"))
        .to_string();
    assert!(line.ends_with("/metrics (budget 500 ms)\n"), "{line:?}");
    Running { child, addr, stderr }
}

/// `METHOD path` (HTTP/1.0): (status line, headers and body).
fn request(addr: &str, method: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    let (head, body) = buf.split_once("\r\n\r\n").unwrap_or((&buf, ""));
    (head.to_string(), body.to_string())
}

#[test]
fn serves_metrics_of_a_selected_process() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let _g = shared();
    let me = std::process::id().to_string();
    let mut ex = start(&[], &["--pid", &me, "--debug"]);
    let (head, body) = request(&ex.addr, "GET", "/metrics");
    assert!(head.starts_with("HTTP/1.0 200 "), "{head}");
    assert!(head.contains("Content-Type: application/openmetrics-text; version=1.0.0; charset=utf-8"), "{head}");
    assert!(body.ends_with("\n# EOF\n"), "{body}");
    // This process's Rss as smaps says it, within what it can change between two reads.
    let comm = std::fs::read_to_string("/proc/self/comm").unwrap().trim().to_string();
    let key = format!("thplab_process_rss_bytes{{pid=\"{me}\",comm=\"{comm}\"}} ");
    let served: u64 = body.lines().find_map(|l| l.strip_prefix(key.as_str())).unwrap_or_else(|| panic!("no {key} in\n{body}")).parse().unwrap();
    assert!(served > 0, "{served}");
    assert!(body.contains(&format!("thplab_process_folios{{pid=\"{me}\",comm=\"{comm}\",kind=\"anon\",size=\"4kB\"}} ")), "{body}");
    assert!(body.contains("\nthplab_scrape_processes_read 1\n") && body.contains("\nthplab_scrape_truncated 0\n"), "{body}");
    // One line on stderr per scrape with --debug.
    let mut line = String::new();
    ex.stderr.read_line(&mut line).unwrap();
    assert!(line.starts_with("thplab exporter: scrape 1: ") && line.ends_with(" ms of 500 ms, 1 processes selected, 1 read, 0 skipped\n"), "{line:?}");

    let (head, body) = request(&ex.addr, "GET", "/");
    assert!(head.starts_with("HTTP/1.0 200 ") && body.contains("<a href=\"/metrics\">"), "{head}\n{body}");
    let (head, _) = request(&ex.addr, "GET", "/metric");
    assert!(head.starts_with("HTTP/1.0 404 "), "{head}");
    let (head, _) = request(&ex.addr, "POST", "/metrics");
    assert!(head.starts_with("HTTP/1.0 405 "), "{head}");
}

#[test]
fn unprivileged_it_counts_what_it_may_not_read() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why} (the test drops to user nobody with setpriv)");
        return;
    }
    if !std::path::Path::new("/usr/bin/setpriv").exists() {
        eprintln!("skipped: no /usr/bin/setpriv to run as nobody");
        return;
    }
    let _g = shared();
    // This test runs as root: its smaps is not readable by nobody.
    let me = std::process::id().to_string();
    let mut ex = start(&["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"], &["--pid", &me]);
    let mut note = String::new();
    ex.stderr.read_line(&mut note).unwrap();
    assert!(note.starts_with("thplab exporter: not root: the census and bloat of the selected processes are left out"), "{note:?}");
    for scrape in 1..=2 {
        let (head, body) = request(&ex.addr, "GET", "/metrics");
        assert!(head.starts_with("HTTP/1.0 200 "), "{head}");
        assert!(body.contains(&format!("\nthplab_scrape_errors_total{{kind=\"permission\"}} {scrape}\n")), "scrape {scrape}:\n{body}");
        assert!(!body.contains("thplab_process_rss_bytes{"), "{body}");
        // The system-wide part needs no privilege.
        assert!(body.contains("thplab_mthp_anon_fault_alloc_total{size=\"2048kB\"} ") && body.contains("\nthplab_settings_info{"), "{body}");
    }
}
