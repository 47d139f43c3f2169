//! `thplab exporter`: a Prometheus endpoint. Every scrape of `/metrics` reads the THP tree,
//! `/proc/vmstat` and the selected processes afresh through [`probe::metrics`] (read only: no
//! knob is written) and encodes them in the OpenMetrics text format with `prometheus-client`.
//! docs/exporter.md lists every series.
//!
//! Budget: the per-process part of a scrape ends [`RESERVE`] before the budget so that the
//! encoding and the reply fit in it; a process whose census would not end in time is skipped
//! with the rest and `thplab_scrape_truncated` is 1.
//!
//! [`command`] is `thplab exporter`: the tree checked, the socket bound, served until killed.

pub mod command;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Cursor;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use probe::metrics::{read_processes, read_system, select, ErrorKind, ProcessScrape, Root, ScrapeError, Selection, SystemSnapshot};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// Part of the budget kept for encoding and sending the reply, at most.
pub const RESERVE: Duration = Duration::from_millis(50);

/// The `Content-Type` of `/metrics`.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug)]
pub struct Options {
    pub root: Root,
    pub selection: Selection,
    pub budget: Duration,
    /// One line per scrape on stderr.
    pub debug: bool,
}

/// What one scrape did, besides its text.
#[derive(Clone, Debug, Default)]
pub struct ScrapeSummary {
    pub duration: Duration,
    pub selected: usize,
    pub read: usize,
    pub skipped: usize,
    pub truncated: bool,
    pub errors: Vec<ScrapeError>,
}

/// Figures of a scrape that are not read from the machine.
#[derive(Clone, Debug, Default)]
pub struct ScrapeMeta {
    pub duration: Duration,
    pub budget: Duration,
    /// Errors of every scrape so far, by kind (all kinds, 0 included).
    pub errors_total: BTreeMap<ErrorKind, u64>,
}

#[derive(Default)]
struct State {
    errors_total: BTreeMap<ErrorKind, u64>,
    estimates: HashMap<i32, Duration>,
    scrapes: u64,
}

/// The exporter: options and what it keeps between scrapes (error counts, census times).
pub struct Exporter {
    opts: Options,
    state: Mutex<State>,
}

impl Exporter {
    pub fn new(opts: Options) -> Exporter {
        let errors_total = ErrorKind::ALL.iter().map(|k| (*k, 0)).collect();
        Exporter { opts, state: Mutex::new(State { errors_total, ..Default::default() }) }
    }

    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// One scrape: the exposition text and what happened.
    pub fn scrape(&self) -> (String, ScrapeSummary) {
        let t0 = Instant::now();
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.scrapes += 1;
        let budget = self.opts.budget;
        let sys = read_system(&self.opts.root);
        let mut sel_errors = Vec::new();
        let selected = select(&self.opts.root, &self.opts.selection, &mut sel_errors);
        let deadline = t0 + budget.saturating_sub(RESERVE.min(budget / 10));
        let mut procs = read_processes(&self.opts.root, &selected, deadline, &mut st.estimates);
        // Forget the census times of processes no longer selected.
        st.estimates.retain(|pid, _| selected.iter().any(|s| s.pid == *pid));
        procs.errors.splice(0..0, sel_errors);
        let errors: Vec<ScrapeError> = sys.errors.iter().chain(&procs.errors).cloned().collect();
        for e in &errors {
            *st.errors_total.entry(e.kind).or_default() += 1;
        }
        let duration = t0.elapsed();
        let meta = ScrapeMeta { duration, budget, errors_total: st.errors_total.clone() };
        let text = encode(&sys, &procs, &meta);
        let summary = ScrapeSummary {
            duration,
            selected: procs.selected,
            read: procs.processes.len(),
            skipped: procs.skipped,
            truncated: procs.truncated,
            errors,
        };
        if self.opts.debug {
            let errs: Vec<String> = summary.errors.iter().map(|e| format!("{}: {}", e.kind.name(), e.message)).collect();
            eprintln!(
                "thplab exporter: scrape {}: {:.1} ms of {} ms, {} processes selected, {} read, {} skipped{}{}",
                st.scrapes,
                duration.as_secs_f64() * 1e3,
                budget.as_millis(),
                summary.selected,
                summary.read,
                summary.skipped,
                if summary.truncated { " (truncated)" } else { "" },
                if errs.is_empty() { String::new() } else { format!("; errors: {}", errs.join("; ")) }
            );
        }
        (text, summary)
    }
}

/// The selection of `--name REGEX`, `--cgroup PATH` and `--pid PID` (each repeatable), with
/// a message naming the flag for a value that cannot be used.
pub fn selection(names: &[String], cgroups: &[String], pids: &[i32]) -> Result<Selection, String> {
    let mut sel = Selection::default();
    for n in names {
        sel.names.push(regex::Regex::new(n).map_err(|e| format!("--name '{n}': not a valid regular expression: {e}"))?);
    }
    for c in cgroups {
        if c.trim().is_empty() {
            return Err(format!("--cgroup '{c}': an empty path (use / for every process)"));
        }
        sel.cgroups.push(probe::metrics::normalize_cgroup(c));
    }
    for &p in pids {
        if p <= 0 {
            return Err(format!("--pid {p}: a process id is a positive number"));
        }
        sel.pids.push(p);
    }
    Ok(sel)
}

/// A label name from a file name (`[a-zA-Z_][a-zA-Z0-9_]*`).
fn label_name(s: &str) -> String {
    let mut out: String = s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if out.chars().next().is_none_or(|c| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

type Labels = Vec<(String, String)>;

/// One metric family with its series, in the order given.
enum Family {
    Counter(Vec<(Labels, u64)>),
    Gauge(Vec<(Labels, i64)>),
    GaugeF(Vec<(Labels, f64)>),
    Info(Vec<Labels>),
}

/// The whole exposition of one scrape, as families in order.
#[derive(Default)]
struct Exposition {
    families: Vec<(String, String, Family)>,
}

impl std::fmt::Debug for Exposition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Exposition({} families)", self.families.len())
    }
}

impl Exposition {
    fn push(&mut self, name: impl Into<String>, help: impl Into<String>, fam: Family) {
        self.families.push((name.into(), help.into(), fam));
    }
}

impl Collector for Exposition {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (name, help, fam) in &self.families {
            let ty = match fam {
                Family::Counter(_) => MetricType::Counter,
                Family::Gauge(_) | Family::GaugeF(_) => MetricType::Gauge,
                Family::Info(_) => MetricType::Info,
            };
            let mut me = enc.encode_descriptor(name, help, None, ty)?;
            // A family of one series without labels is encoded on the descriptor itself (a
            // label set, even empty, prints braces).
            match fam {
                Family::Counter(series) if series.len() == 1 && series[0].0.is_empty() => ConstCounter::new(series[0].1).encode(me)?,
                Family::Gauge(series) if series.len() == 1 && series[0].0.is_empty() => ConstGauge::new(series[0].1).encode(me)?,
                Family::GaugeF(series) if series.len() == 1 && series[0].0.is_empty() => ConstGauge::new(series[0].1).encode(me)?,
                Family::Counter(series) => {
                    for (l, v) in series {
                        ConstCounter::new(*v).encode(me.encode_family(l)?)?;
                    }
                }
                Family::Gauge(series) => {
                    for (l, v) in series {
                        ConstGauge::new(*v).encode(me.encode_family(l)?)?;
                    }
                }
                Family::GaugeF(series) => {
                    for (l, v) in series {
                        ConstGauge::new(*v).encode(me.encode_family(l)?)?;
                    }
                }
                Family::Info(sets) => {
                    for l in sets.iter().filter(|l| !l.is_empty()) {
                        me.encode_info(l)?;
                    }
                }
            }
        }
        Ok(())
    }
}

fn l(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Help text of a per-size stat (`Documentation/admin-guide/mm/transhuge.rst`).
fn mthp_help(stat: &str) -> String {
    let what = match stat {
        "anon_fault_alloc" => "anonymous folios of this size allocated at page fault",
        "anon_fault_fallback" => "page faults that fell back from this size to a smaller one",
        "anon_fault_fallback_charge" => "fallbacks from this size because the memcg charge failed",
        "anon_fault_declined" => "page faults where this size was declined (anon_beside_full)",
        "zswpout" => "folios of this size swapped out to zswap whole",
        "swpin" => "folios of this size swapped in whole",
        "swpin_fallback" => "swap-ins that fell back from this size",
        "swpin_fallback_charge" => "swap-ins that fell back from this size because the memcg charge failed",
        "swpout" => "folios of this size swapped out whole",
        "swpout_fallback" => "folios of this size split before swap-out",
        "shmem_alloc" => "shmem folios of this size allocated",
        "shmem_fallback" => "shmem allocations that fell back from this size",
        "shmem_fallback_charge" => "shmem fallbacks from this size because the memcg charge failed",
        "split" => "folios of this size split into smaller ones",
        "split_failed" => "splits of folios of this size that failed",
        "split_deferred" => "folios of this size queued for a deferred split",
        "nr_anon" => "anonymous folios of this size now",
        "nr_anon_partially_mapped" => "anonymous folios of this size now partially mapped (on the deferred split queue)",
        _ => "",
    };
    if what.is_empty() {
        format!("hugepages-<size>/stats/{stat}")
    } else {
        format!("hugepages-<size>/stats/{stat}: {what}")
    }
}

/// The exposition of a scrape (OpenMetrics text, ending in `# EOF`).
pub fn encode(sys: &SystemSnapshot, procs: &ProcessScrape, meta: &ScrapeMeta) -> String {
    let mut x = Exposition::default();
    push_system_families(&mut x, sys);
    push_process_families(&mut x, procs);
    push_scrape_families(&mut x, procs, meta);
    let mut reg = Registry::default();
    reg.register_collector(Box::new(x));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &reg).expect("writing to a String cannot fail");
    out
}

/// The system-wide families: per-size stats (hugepages-<size>/stats), /proc/vmstat,
/// khugepaged/, and the knobs as info.
fn push_system_families(x: &mut Exposition, sys: &SystemSnapshot) {
    // Per-size stats: one family per stat, a series per size that has it.
    let stats: BTreeSet<&str> = sys.sizes.iter().flat_map(|d| d.stats.iter().map(|(n, _)| n.as_str())).collect();
    for stat in stats {
        let series = sys.sizes.iter().filter_map(|d| d.stats.iter().find(|(n, _)| n == stat).map(|(_, v)| (l(&[("size", &d.label)]), *v)));
        let name = format!("thplab_mthp_{}", label_name(stat));
        if probe::metrics::mthp_stat_is_gauge(stat) {
            x.push(name, mthp_help(stat), Family::Gauge(series.map(|(l, v)| (l, v as i64)).collect()));
        } else {
            x.push(name, mthp_help(stat), Family::Counter(series.collect()));
        }
    }
    for (n, v) in &sys.vmstat_events {
        x.push(format!("thplab_vmstat_{}", label_name(n)), format!("/proc/vmstat {n}"), Family::Counter(vec![(Vec::new(), *v)]));
    }
    for (n, v) in &sys.vmstat_gauges {
        x.push(format!("thplab_vmstat_{}", label_name(n)), format!("/proc/vmstat {n} (in PMD-sized THPs)"), Family::Gauge(vec![(Vec::new(), *v)]));
    }
    for (n, v) in &sys.khugepaged {
        let name = format!("thplab_khugepaged_{}", label_name(n));
        let help = format!("khugepaged/{n}");
        if probe::metrics::KHUGEPAGED_COUNTERS.contains(&n.as_str()) {
            x.push(name, help, Family::Counter(vec![(Vec::new(), (*v).max(0) as u64)]));
        } else {
            x.push(name, help, Family::Gauge(vec![(Vec::new(), *v)]));
        }
    }
    x.push(
        "thplab_settings",
        "the top-level knobs of /sys/kernel/mm/transparent_hugepage (selected values)",
        Family::Info(vec![sys.settings.iter().map(|(k, v)| (label_name(k), v.clone())).collect()]),
    );
    x.push(
        "thplab_size_settings",
        "the knobs of each hugepages-<size> directory (selected values)",
        Family::Info(
            sys.sizes
                .iter()
                .map(|d| std::iter::once(("size".to_string(), d.label.clone())).chain(d.knobs.iter().map(|(k, v)| (label_name(k), v.clone()))).collect())
                .collect(),
        ),
    );
}

/// The per-process families: the census by VMA kind and folio size, Rss, AnonHugePages, zero
/// page mappings, census time, bloat and page tables.
fn push_process_families(x: &mut Exposition, procs: &ProcessScrape) {
    let who = |p: &probe::metrics::ProcessMetrics| l(&[("pid", &p.pid.to_string()), ("comm", &p.comm)]);
    let mut folios = Vec::new();
    let mut pmd = Vec::new();
    let mut partial = Vec::new();
    for p in &procs.processes {
        for ((kind, size), e) in p.census.iter().flatten() {
            let mut lb = who(p);
            lb.push(("kind".into(), kind.clone()));
            lb.push(("size".into(), size.clone()));
            folios.push((lb.clone(), e.folios as i64));
            // An order-0 folio is neither PMD-mapped nor partially mapped.
            if size != "4kB" {
                pmd.push((lb.clone(), e.pmd_mapped as i64));
                partial.push((lb, e.partially_mapped as i64));
            }
        }
    }
    x.push("thplab_process_folios", "folios mapped by the process, by VMA kind (anon, shmem, file) and folio size (census of pagemap and kpageflags)", Family::Gauge(folios));
    x.push("thplab_process_pmd_mapped_folios", "of those, folios mapped by a PMD", Family::Gauge(pmd));
    x.push("thplab_process_partially_mapped_folios", "of those, PTE-mapped folios of which some pages are not mapped in the process", Family::Gauge(partial));
    let per = |f: &dyn Fn(&probe::metrics::ProcessMetrics) -> Option<i64>| -> Vec<(Labels, i64)> {
        procs.processes.iter().filter_map(|p| Some((who(p), f(p)?))).collect()
    };
    let kib = |v: u64| (v * 1024) as i64;
    x.push("thplab_process_rss_bytes", "Rss of the process (sum of /proc/PID/smaps)", Family::Gauge(per(&|p| Some(kib(p.rss_kb)))));
    x.push("thplab_process_anon_huge_bytes", "AnonHugePages of the process (sum of /proc/PID/smaps)", Family::Gauge(per(&|p| Some(kib(p.anon_huge_kb)))));
    x.push("thplab_process_zero_page_ptes", "PTEs mapping the shared zero page", Family::Gauge(per(&|p| p.census.as_ref().map(|_| p.zero_page_ptes as i64))));
    x.push("thplab_process_huge_zero_pmds", "PMDs mapping the huge zero folio", Family::Gauge(per(&|p| p.census.as_ref().map(|_| p.huge_zero_pmds as i64))));
    x.push(
        "thplab_process_census_seconds",
        "time to read smaps and take the census of the process",
        Family::GaugeF(procs.processes.iter().filter(|p| p.census.is_some()).map(|p| (who(p), p.census_time.as_secs_f64())).collect()),
    );
    x.push("thplab_process_large_folio_bytes", "memory mapped by pages of large folios (what the bloat is sampled from)", Family::Gauge(per(&|p| p.bloat.as_ref().map(|b| kib(b.total.large_kb)))));
    x.push("thplab_process_bloat_bytes", "estimated zero-filled memory in large folios (bloat)", Family::Gauge(per(&|p| p.bloat.as_ref().map(|b| kib(b.total.zero_kb)))));
    x.push("thplab_process_bloat_error_bytes", "95 % error of the bloat estimate (0 when every page was read)", Family::Gauge(per(&|p| p.bloat.as_ref().map(|b| kib(b.total.zero_kb_error)))));
    x.push("thplab_process_rss_4k_bytes", "estimated Rss with 4 KiB pages only (Rss minus the bloat)", Family::Gauge(per(&|p| p.bloat.as_ref().map(|b| kib(b.total.rss_4k_kb)))));
    x.push("thplab_process_page_table_bytes", "page-table memory of the process (VmPTE)", Family::Gauge(per(&|p| p.bloat.as_ref().map(|b| kib(b.page_tables_kb)))));
    x.push(
        "thplab_process_bloat_sampled",
        "1 when the bloat is an estimate from a sample (the time ran out before every page was read), 0 when exact",
        Family::Gauge(per(&|p| p.bloat.as_ref().map(|b| b.sampled as i64))),
    );
}

/// The families about the scrape itself: processes selected, read and skipped, errors, budget
/// and duration.
fn push_scrape_families(x: &mut Exposition, procs: &ProcessScrape, meta: &ScrapeMeta) {
    x.push("thplab_scrape_processes_selected", "processes selected by --name, --cgroup and --pid", Family::Gauge(vec![(Vec::new(), procs.selected as i64)]));
    x.push("thplab_scrape_processes_read", "selected processes read in this scrape", Family::Gauge(vec![(Vec::new(), procs.processes.len() as i64)]));
    x.push("thplab_scrape_processes_skipped", "selected processes skipped because the budget ran out", Family::Gauge(vec![(Vec::new(), procs.skipped as i64)]));
    x.push("thplab_scrape_truncated", "1 when the budget ran out before every selected process was read", Family::Gauge(vec![(Vec::new(), procs.truncated as i64)]));
    x.push(
        "thplab_scrape_errors",
        "parts of scrapes left out since the exporter started, by kind (permission, process_exited, sysfs, parse, io)",
        Family::Counter(meta.errors_total.iter().map(|(k, v)| (l(&[("kind", k.name())]), *v)).collect()),
    );
    x.push("thplab_scrape_budget_seconds", "the time budget of a scrape (--budget)", Family::GaugeF(vec![(Vec::new(), meta.budget.as_secs_f64())]));
    x.push("thplab_scrape_duration_seconds", "time this scrape took to read everything, before encoding", Family::GaugeF(vec![(Vec::new(), meta.duration.as_secs_f64())]));
}

/// A running HTTP server.
pub struct Server {
    http: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
}

/// Bind `listen` (`127.0.0.1:9464`; port 0 picks one).
pub fn bind(listen: &str) -> Result<tiny_http::Server, String> {
    tiny_http::Server::http(listen).map_err(|e| format!("cannot listen on {listen}: {e}"))
}

impl Server {
    /// Serve `exporter` on `http` in a thread.
    pub fn start(exporter: Arc<Exporter>, http: tiny_http::Server) -> Server {
        let http = Arc::new(http);
        let h = http.clone();
        let thread = std::thread::spawn(move || serve(&exporter, &h));
        Server { http, thread: Some(thread) }
    }

    pub fn addr(&self) -> SocketAddr {
        self.http.server_addr().to_ip().expect("an IP listener")
    }

    /// Stop serving and wait for the thread.
    pub fn stop(mut self) {
        self.http.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

const INDEX: &str = "<html><head><title>thplab exporter</title></head><body><h1>thplab exporter</h1>\
<p>Transparent huge page metrics of this machine: <a href=\"/metrics\">/metrics</a>.</p></body></html>\n";

/// Answer requests until the server is unblocked: `GET /metrics` scrapes, `GET /` is a short
/// page, anything else is 404 (405 for another method).
pub fn serve(exporter: &Exporter, http: &tiny_http::Server) {
    let header = |k: &str, v: &str| tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()).expect("a valid header");
    for req in http.incoming_requests() {
        let path = req.url().split('?').next().unwrap_or("").to_string();
        let resp = if *req.method() != tiny_http::Method::Get && *req.method() != tiny_http::Method::Head {
            tiny_http::Response::new(405.into(), vec![header("Allow", "GET, HEAD")], Cursor::new(b"method not allowed\n".to_vec()), None, None)
        } else if path == "/metrics" {
            let (text, _) = exporter.scrape();
            tiny_http::Response::from_data(text.into_bytes()).with_header(header("Content-Type", CONTENT_TYPE))
        } else if path == "/" {
            tiny_http::Response::from_data(INDEX.as_bytes().to_vec()).with_header(header("Content-Type", "text/html; charset=utf-8"))
        } else {
            tiny_http::Response::from_data(b"not found: the metrics are at /metrics\n".to_vec()).with_status_code(404)
        };
        // A client that went away is not the exporter's problem.
        let _ = req.respond(resp);
    }
}

#[cfg(test)]
mod tests;
