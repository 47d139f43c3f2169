//! A real Prometheus server (Debian's `prometheus` package) scrapes the exporter every second
//! and the test asks its HTTP API whether every scrape succeeded within the budget, whether
//! every per-size series of this kernel was in every scrape, and what the census of a process
//! selected with --pid says.
//!
//! Length: `THPLAB_PROMETHEUS_SECONDS` (default 60; 20 when `CI=true`). Skips with a reason
//! when `prometheus` is not installed (`apt-get install prometheus`) or there is no THP tree.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use exporter::{Exporter, Options, Server};
use probe::metrics::Root;
use serde_json::Value;

const BUDGET: Duration = Duration::from_millis(500);
/// The target maps 16 MiB with MADV_NOHUGEPAGE (4096 pages written) and 4 MiB with
/// MADV_HUGEPAGE (one byte written per 2 MiB).
const NOHUGE_MIB: u64 = 16;
const HUGE_MIB: u64 = 4;

fn which(cmd: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(cmd)).find(|f| f.is_file()))
}

/// GET `path` from `addr` (HTTP/1.0): (status, body).
fn get(addr: &str, path: &str) -> std::io::Result<(u32, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut buf = String::new();
    s.read_to_string(&mut buf)?;
    let status = buf.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `/api/v1/query` at `time`: the `data.result` array.
fn query(prom: &str, q: &str, time: f64) -> Vec<Value> {
    let (status, body) = get(prom, &format!("/api/v1/query?query={}&time={time:.3}", urlencode(q))).expect("Prometheus answers");
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("query {q}: {e}: {body}"));
    assert_eq!((status, v["status"].as_str()), (200, Some("success")), "query {q}: {body}");
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// The sample values of a range-vector result entry.
fn values(r: &Value) -> Vec<f64> {
    r["values"].as_array().unwrap().iter().map(|p| p[1].as_str().unwrap().parse::<f64>().unwrap()).collect()
}

/// The latest value of the single series an instant query returns.
fn one(prom: &str, q: &str, time: f64) -> Option<f64> {
    let r = query(prom, q, time);
    assert!(r.len() <= 1, "{q}: {r:?}");
    r.first().map(|s| s["value"][1].as_str().unwrap().parse().unwrap())
}

fn summary(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

/// The children, killed on every way out (a failed assertion included).
struct Kill(Vec<Child>);

impl Drop for Kill {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Every `hugepages-<N>kB/stats/<stat>` of this kernel, as the series it must give:
/// (`thplab_mthp_<stat>[_total]`, `<N>kB`).
fn kernel_size_series(thp: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(thp).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        let Some(size) = name.strip_prefix("hugepages-") else { continue };
        let Ok(stats) = std::fs::read_dir(thp.join(&name).join("stats")) else { continue };
        for s in stats {
            let stat = s.unwrap().file_name().into_string().unwrap();
            let series = if stat.starts_with("nr_") { format!("thplab_mthp_{stat}") } else { format!("thplab_mthp_{stat}_total") };
            out.push((series, size.to_string()));
        }
    }
    out.sort();
    out
}

#[test]
fn prometheus_scrapes_every_second_within_the_budget() {
    let Some(prometheus) = which("prometheus") else {
        eprintln!("SKIP prometheus_scrapes_every_second_within_the_budget: no `prometheus` binary on PATH (apt-get install prometheus; .ci/run installs it as root)");
        return;
    };
    let root = Root::live();
    if probe::metrics::check_tree(&root).is_err() {
        eprintln!("SKIP prometheus_scrapes_every_second_within_the_budget: no THP sysfs tree at {}", root.thp.display());
        return;
    }
    let seconds: u64 = match std::env::var("THPLAB_PROMETHEUS_SECONDS") {
        Ok(s) => s.parse().expect("THPLAB_PROMETHEUS_SECONDS is a number of seconds"),
        Err(_) if std::env::var("CI").as_deref() == Ok("true") => 20,
        Err(_) => 60,
    };
    let mut kids = Kill(Vec::new());

    // The target process.
    let mut target = Command::new(env!("CARGO_BIN_EXE_thplab-exporter-target"))
        .args([NOHUGE_MIB.to_string(), HUGE_MIB.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(target.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("ready "), "target said {line:?}");
    let target_pid = target.id() as i32;
    kids.0.push(target);

    // The exporter, in this process, selecting the target by pid.
    let selection = exporter::selection(&[], &[], &[target_pid]).unwrap();
    let ex = Arc::new(Exporter::new(Options { root: root.clone(), selection, budget: BUDGET, debug: false }));
    let server = Server::start(ex, exporter::bind("127.0.0.1:0").unwrap());
    let target_addr = server.addr().to_string();

    // Prometheus, scraping it every second.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: thplab\n    static_configs:\n      - targets: ['{target_addr}']\n"
        ),
    )
    .unwrap();
    let prom = format!("127.0.0.1:{}", free_port());
    let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    let child = Command::new(&prometheus)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address={prom}"))
        .arg("--log.level=warn")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    kids.0.push(child);
    let t0 = Instant::now();
    while !matches!(get(&prom, "/-/ready"), Ok((200, _))) {
        assert!(t0.elapsed() < Duration::from_secs(60), "Prometheus not ready in 60 s: {}", std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default());
        std::thread::sleep(Duration::from_millis(200));
    }
    // Its discovery hands the target to the scrape loop a few seconds after start: the
    // window starts at the first scrape.
    let unix_now = || SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    while query(&prom, "up{job=\"thplab\"}", unix_now()).is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(60), "no scrape in 60 s: {}", std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default());
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!("Prometheus {prom} scraped first {:.1} s after start; scraping {target_addr} for {seconds} s", t0.elapsed().as_secs_f64());
    std::thread::sleep(Duration::from_secs(seconds + 2));
    // The window ends a second ago, so that its last scrape has been stored.
    let now = unix_now() - 1.0;
    let w = format!("[{seconds}s]");

    // Every scrape succeeded, one a second.
    let up = query(&prom, &format!("up{{job=\"thplab\"}}{w}"), now);
    assert_eq!(up.len(), 1, "{up:?}");
    let up = values(&up[0]);
    assert!(up.len() as u64 + 2 >= seconds, "{} scrapes in {seconds} s", up.len());
    assert!(up.iter().all(|&v| v == 1.0), "a scrape failed: up = {up:?}");
    let scrapes = up.len();

    // Within the budget, as the exporter measured it and as Prometheus did (HTTP included).
    let own = query(&prom, &format!("thplab_scrape_duration_seconds{w}"), now);
    let own = values(&own[0]);
    let prom_d = query(&prom, &format!("scrape_duration_seconds{{job=\"thplab\"}}{w}"), now);
    let prom_d = values(&prom_d[0]);
    let (a, m, z) = summary(own.clone());
    let (pa, pm, pz) = summary(prom_d.clone());
    let nseries = one(&prom, "scrape_samples_scraped{job=\"thplab\"}", now).unwrap();
    eprintln!(
        "{scrapes} scrapes in {seconds} s, {nseries} samples each; thplab_scrape_duration_seconds min {:.1} ms, median {:.1} ms, max {:.1} ms; \
         Prometheus scrape_duration_seconds min {:.1} ms, median {:.1} ms, max {:.1} ms (budget {} ms)",
        a * 1e3, m * 1e3, z * 1e3, pa * 1e3, pm * 1e3, pz * 1e3, BUDGET.as_millis()
    );
    assert_eq!(own.len(), scrapes);
    assert!(z < BUDGET.as_secs_f64() && pz < BUDGET.as_secs_f64(), "a scrape over the budget: exporter {own:?}, Prometheus {prom_d:?}");
    assert_eq!(one(&prom, &format!("max_over_time(thplab_scrape_truncated{w})"), now), Some(0.0));
    assert_eq!(one(&prom, "thplab_scrape_budget_seconds", now), Some(BUDGET.as_secs_f64()));

    // Every per-size series of this kernel, in every scrape.
    let want = kernel_size_series(&root.thp);
    assert!(!want.is_empty(), "no hugepages-*/stats files under {}", root.thp.display());
    let got = query(&prom, &format!("{{__name__=~\"thplab_mthp_.+\"}}{w}"), now);
    let mut have: Vec<(String, String)> = Vec::new();
    for r in &got {
        let key = (r["metric"]["__name__"].as_str().unwrap().to_string(), r["metric"]["size"].as_str().unwrap().to_string());
        assert_eq!(values(r).len(), scrapes, "{key:?} is missing from some scrapes");
        have.push(key);
    }
    have.sort();
    assert_eq!(have, want, "the per-size series differ from this kernel's hugepages-*/stats files");
    let sizes: std::collections::BTreeSet<&str> = want.iter().map(|(_, s)| s.as_str()).collect();
    eprintln!("{} per-size series for {} sizes ({})", want.len(), sizes.len(), sizes.iter().copied().collect::<Vec<_>>().join(" "));

    // The README's query gives one rate per size that has anon_fault_alloc.
    let with_alloc = want.iter().filter(|(n, _)| n == "thplab_mthp_anon_fault_alloc_total").count();
    let rates = query(&prom, "sum by (size) (rate(thplab_mthp_anon_fault_alloc_total[10s]))", now);
    assert_eq!(rates.len(), with_alloc, "{rates:?}");
    assert!(rates.iter().all(|r| r["value"][1].as_str().unwrap().parse::<f64>().unwrap() >= 0.0), "{rates:?}");

    // Every thp_* counter of /proc/vmstat, in every scrape.
    let vmstat = std::fs::read_to_string("/proc/vmstat").unwrap();
    let mut want_vm: Vec<String> =
        vmstat.lines().filter_map(|l| l.split_whitespace().next()).filter(|n| n.starts_with("thp_")).map(|n| format!("thplab_vmstat_{n}_total")).collect();
    want_vm.sort();
    let got = query(&prom, &format!("{{__name__=~\"thplab_vmstat_thp_.+\"}}{w}"), now);
    let mut have_vm: Vec<String> = got.iter().map(|r| r["metric"]["__name__"].as_str().unwrap().to_string()).collect();
    have_vm.sort();
    assert_eq!(have_vm, want_vm);
    assert!(got.iter().all(|r| values(r).len() == scrapes), "a thp_* series is missing from some scrapes");

    // The knobs, as this machine has them now.
    let enabled = probe::sysfs::selected_value(&std::fs::read_to_string(root.thp.join("enabled")).unwrap());
    let info = query(&prom, "thplab_settings_info", now);
    assert_eq!(info.len(), 1, "{info:?}");
    assert_eq!(info[0]["metric"]["enabled"].as_str(), Some(enabled.as_str()));
    let collapsed: f64 = std::fs::read_to_string(root.thp.join("khugepaged/pages_collapsed")).unwrap().trim().parse().unwrap();
    let served = one(&prom, "thplab_khugepaged_pages_collapsed_total", now).unwrap();
    assert!(served <= collapsed, "pages_collapsed served {served}, now {collapsed}: it only grows");

    // The target's census.
    let sel = format!("pid=\"{target_pid}\"");
    if !probe::sysfs::is_root() {
        eprintln!("SKIP the census checks: not root (pagemap hides PFNs, kpageflags is root-only)");
        let errs = one(&prom, "thplab_scrape_errors_total{kind=\"permission\"}", now).unwrap();
        assert!(errs >= scrapes as f64, "{errs} permission errors in {scrapes} scrapes");
        return;
    }
    let small = one(&prom, &format!("thplab_process_folios{{{sel},kind=\"anon\",size=\"4kB\"}}"), now).unwrap();
    let pages = NOHUGE_MIB * 256;
    // The MADV_NOHUGEPAGE region alone is 4096 order-0 folios; the rest of the process (stack,
    // heap, libc data) a few hundred pages at most.
    assert!(small >= pages as f64 && small < (pages + 1024) as f64, "4kB anon folios of the target: {small}, want 4096 plus a few");
    let rss = one(&prom, &format!("thplab_process_rss_bytes{{{sel}}}"), now).unwrap();
    assert!(rss >= (NOHUGE_MIB << 20) as f64, "Rss {rss}");
    // The MADV_HUGEPAGE region: a PMD THP per 2 MiB when the knobs allow one there.
    let size_2m = probe::sysfs::selected_value(&std::fs::read_to_string(root.thp.join("hugepages-2048kB/enabled")).unwrap_or_default());
    let pmd_allowed = matches!(size_2m.as_str(), "always" | "madvise") || (size_2m == "inherit" && matches!(enabled.as_str(), "always" | "madvise"));
    let thps = one(&prom, &format!("thplab_process_folios{{{sel},kind=\"anon\",size=\"2048kB\"}}"), now).unwrap_or(0.0);
    let huge = one(&prom, &format!("thplab_process_anon_huge_bytes{{{sel}}}"), now).unwrap();
    let bloat = one(&prom, &format!("thplab_process_bloat_bytes{{{sel}}}"), now).unwrap();
    let sampled = one(&prom, &format!("thplab_process_bloat_sampled{{{sel}}}"), now).unwrap();
    eprintln!("target pid {target_pid}: 4kB anon folios {small}, 2048kB anon folios {thps}, Rss {rss}, AnonHugePages {huge}, bloat {bloat} (sampled {sampled}); PMD THP allowed here: {pmd_allowed}");
    if pmd_allowed {
        let n = (HUGE_MIB / 2) as f64;
        assert_eq!(thps, n, "the MADV_HUGEPAGE region should hold {n} PMD THPs (knobs enabled={enabled}, hugepages-2048kB/enabled={size_2m})");
        assert!(huge >= n * 2097152.0, "AnonHugePages {huge}");
        // One byte written per THP: 2044 KiB of zeros in each; exact when every page was read.
        if sampled == 0.0 {
            assert!(bloat >= n * 2044.0 * 1024.0, "bloat {bloat}, want at least {} bytes", n * 2044.0 * 1024.0);
        }
    } else {
        assert_eq!(thps, 0.0, "no PMD THP can be allowed here");
    }
    drop(kids);
    server.stop();
}
