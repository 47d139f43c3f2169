//! `thplab bench io` as an entry point that takes already-parsed arguments (the CLI keeps only
//! its argument struct): the options checked and turned into [`crate::BenchOptions`], the run
//! ([`crate::run`]) with a progress bar, the `[pin]` profile written or checked, and the
//! tables or one JSON object (schema thplab-bench-io/1) printed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::buffer::BufferKind;
use crate::engine::Engine;
use crate::target::TargetKind;

/// The arguments of `thplab bench io`, parsed by the CLI (clap) and run by [`run_io`].
#[derive(clap::Args, Clone, Debug)]
pub struct IoOptions {
    /// Where to read from, comma-separated: `ram` (a loop device over a private tmpfs),
    /// `file` (an O_DIRECT file under --dir). --device adds a block device.
    #[arg(long = "target", value_name = "TARGET", value_delimiter = ',', default_value = "ram,file", value_parser = ["ram", "file"])]
    pub targets: Vec<String>,
    /// Also read from this block device (opened read-only with O_DIRECT).
    #[arg(long, value_name = "PATH")]
    pub device: Option<PathBuf>,
    /// Buffer kinds, comma-separated: 4K, mTHP-16K ... mTHP-1M, THP-2M, hugetlb-2M
    /// (default: 4K, every mTHP size this kernel has, THP-2M, hugetlb-2M).
    #[arg(long, value_delimiter = ',', value_name = "KIND,...")]
    pub kinds: Vec<String>,
    /// Engines, comma-separated: aio, io_uring, pread (pread runs at queue depth 1 only).
    #[arg(long, value_delimiter = ',', default_value = "aio,io_uring,pread", value_name = "ENGINE,...")]
    pub engines: Vec<String>,
    /// Block sizes, comma-separated (4K to 64M, multiples of 4K).
    #[arg(long, value_delimiter = ',', default_value = "4K,64K,1M", value_name = "SIZE,...")]
    pub block_sizes: Vec<String>,
    /// Queue depths (reads in flight), comma-separated, 1 to 1024.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32", value_name = "N,...")]
    pub queue_depths: Vec<usize>,
    /// Timed runs per case (interleaved across cases); the tables show median and spread.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub repeat: usize,
    /// Seconds per timed run.
    #[arg(long, default_value_t = 0.12, value_name = "SECONDS")]
    pub time: f64,
    /// Size of the file (and of the tmpfs file behind the loop device) read.
    #[arg(long, default_value = "256M", value_name = "SIZE")]
    pub size: String,
    /// Directory of the `file` target (O_DIRECT must work on its filesystem).
    #[arg(long, default_value = "/var/tmp", value_name = "DIR")]
    pub dir: PathBuf,
    /// Rounds of the pin companion: each times every buffer kind and range size once
    /// (interleaved, so other load on the machine spreads over all of them); the fit uses each
    /// sample's best round.
    #[arg(long, default_value_t = 9, value_name = "N")]
    pub pin_rounds: usize,
    /// Seconds per timing of the pin companion.
    #[arg(long, default_value_t = 0.03, value_name = "SECONDS")]
    pub pin_time: f64,
    /// Run only the pin companion (no reads).
    #[arg(long, conflicts_with = "no_pin")]
    pub pin_only: bool,
    /// Do not run the pin companion.
    #[arg(long)]
    pub no_pin: bool,
    /// Write a machine profile with the `[pin]` section fitted from the companion.
    #[arg(long, value_name = "FILE")]
    pub write_profile: Option<PathBuf>,
    /// Compare the companion's times with the `[pin]` costs of this profile; exits 4 when a
    /// prediction is off by more than --tolerance.
    #[arg(long, value_name = "FILE")]
    pub check_profile: Option<PathBuf>,
    /// With --check-profile: the largest allowed error, percent.
    #[arg(long, default_value_t = 15.0, value_name = "PCT")]
    pub tolerance: f64,
    /// Print one JSON object (schema thplab-bench-io/1).
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON object to FILE (the tables still go to stdout).
    #[arg(long, value_name = "FILE")]
    pub save: Option<PathBuf>,
    /// No progress on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

fn size_arg(flag: &str, s: &str) -> Result<u64> {
    mm_types::parse_size(s).with_context(|| format!("{flag} {s}: give a size such as 64K or 1M"))
}

fn options(a: &IoOptions) -> Result<crate::BenchOptions> {
    let mut o = crate::BenchOptions::default();
    o.targets = a.targets.iter().map(|t| if t == "ram" { TargetKind::Ram } else { TargetKind::File }).collect();
    if let Some(d) = &a.device {
        o.targets.push(TargetKind::Device(d.display().to_string()));
    }
    o.kinds = if a.kinds.is_empty() {
        let sysfs = live::sysfs::Paths::from_env().sysfs;
        let mut k = vec![BufferKind::Base];
        k.extend(crate::available_mthp_kb(&sysfs).into_iter().map(BufferKind::Mthp));
        k.extend([BufferKind::Pmd, BufferKind::Hugetlb]);
        k
    } else {
        a.kinds.iter().map(|k| BufferKind::parse(k).map_err(anyhow::Error::msg)).collect::<Result<_>>().context("--kinds")?
    };
    o.engines = a.engines.iter().map(|e| Engine::parse(e).map_err(anyhow::Error::msg)).collect::<Result<_>>().context("--engines")?;
    o.block_sizes = a.block_sizes.iter().map(|b| size_arg("--block-sizes", b)).collect::<Result<_>>()?;
    o.queue_depths = a.queue_depths.clone();
    o.repeats = a.repeat;
    if !(a.time > 0.0 && a.time <= 600.0) {
        bail!("--time {}: give seconds above 0 and at most 600", a.time);
    }
    o.time = Duration::from_secs_f64(a.time);
    if !(a.pin_time > 0.0 && a.pin_time <= 60.0) {
        bail!("--pin-time {}: give seconds above 0 and at most 60", a.pin_time);
    }
    o.pin_time = Duration::from_secs_f64(a.pin_time);
    o.pin_rounds = a.pin_rounds;
    o.target_size = size_arg("--size", &a.size)?;
    o.file_dir = a.dir.clone();
    o.pin = !a.no_pin;
    o.io = !a.pin_only;
    if (a.write_profile.is_some() || a.check_profile.is_some()) && a.no_pin {
        bail!("--write-profile and --check-profile need the pin companion (drop --no-pin)");
    }
    o.validate().map_err(anyhow::Error::msg)?;
    Ok(o)
}

/// Run `thplab bench io`: check the options, read the profile to check (`read_profile`: the
/// CLI's limited reader, for its error messages), measure with a progress bar on stderr, write
/// the `[pin]` profile, the JSON file, and print the tables or the JSON. `Ok(false)` when the
/// profile check found an error above the tolerance (exit 4).
pub fn run_io(a: &IoOptions, read_profile: &dyn Fn(&Path) -> Result<String>) -> Result<bool> {
    let o = options(&a)?;
    // Read the profile to check before the run, so that a bad file fails fast.
    let check = match &a.check_profile {
        Some(p) => {
            let text = read_profile(p)?;
            let prof = uapi::profile::MachineProfile::parse(&p.display().to_string(), &text)?;
            let Some(pin) = prof.pin else { bail!("{}: the profile has no [pin] section (write one with --write-profile)", p.display()) };
            Some(pin)
        }
        None => None,
    };
    if a.tolerance <= 0.0 {
        bail!("--tolerance {}: give a positive percentage", a.tolerance);
    }
    let bar = if a.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        // No steady tick: a ticking thread would stop the benchmark from entering its private
        // mount namespace (unshare refuses a process with threads sharing its fs).
        let b = indicatif::ProgressBar::with_draw_target(Some(0), indicatif::ProgressDrawTarget::stderr());
        b.set_style(indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed_precise} eta {eta} {msg}").unwrap());
        b
    };
    let mut on = |p: crate::Progress| match p {
        crate::Progress::Step(s) => {
            bar.set_message(s.to_string());
            bar.tick();
        }
        crate::Progress::Run { done, total, what } => {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
            bar.set_message(what);
        }
    };
    let report = crate::run(&o, &mut on).map_err(|e| match e {
        crate::BenchError::NotAvailable(m) => anyhow::Error::new(live::LiveError::NotAvailable(m)),
        crate::BenchError::Failed(m) => anyhow::anyhow!(m),
    })?;
    bar.finish_and_clear();
    let mut passed = true;
    if let Some(path) = &a.write_profile {
        let pin = report.pin.as_ref().and_then(|p| p.fit.map(|f| crate::pin_costs(&f, p.samples.len())));
        let Some(pin) = pin else { bail!("--write-profile: the pin costs could not be fitted (measure 4K and at least one larger buffer kind)") };
        let prof = uapi::profile::MachineProfile {
            machine: uapi::profile::MachineInfo { name: crate::host_name(), kernel: report.kernel.clone() },
            pin: Some(pin),
            ..Default::default()
        };
        std::fs::write(path, prof.to_toml()).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("thplab: wrote the [pin] section to {}", path.display());
    }
    let mut check_lines = Vec::new();
    if let (Some(pin), Some(p)) = (&check, &report.pin) {
        check_lines.push(format!(
            "profile check: {:.0} ns + {:.1} ns/folio + {:.2} ns/PTE page + {:.2} ns/THP PMD page + {:.2} ns/hugetlb page + {:.2} ns/compare against the companion (tolerance {}%)",
            pin.per_call_ns, pin.per_folio_ns, pin.per_page_ns, pin.per_pmd_page_ns, pin.per_hugetlb_page_ns, pin.companion_scan_ns, a.tolerance
        ));
        let mut worst: f64 = 0.0;
        for s in &p.samples {
            let pred = pin.companion_ns(s.folios, s.pte_pages, s.pmd_pages, s.hugetlb_pages, s.scan_compares);
            let err = (pred - s.ns_min) / s.ns_min * 100.0;
            worst = worst.max(err.abs());
            check_lines.push(format!(
                "  {:>11} {:>6} KiB: measured {:>9.0} ns (best repeat), predicted {:>9.0} ns, {:+.1}%",
                s.kind,
                s.bytes >> 10,
                s.ns_min,
                pred,
                err
            ));
        }
        check_lines.push(format!("largest error {worst:.1}%: {}", if worst <= a.tolerance { "within tolerance" } else { "OUTSIDE tolerance" }));
        if worst > a.tolerance {
            passed = false;
        }
    }
    let mut v = serde_json::to_value(&report)?;
    if !check_lines.is_empty() {
        v["profile_check"] = serde_json::json!({ "lines": check_lines, "passed": passed });
    }
    if let Some(path) = &a.save {
        std::fs::write(path, serde_json::to_string_pretty(&v)? + "\n").with_context(|| format!("cannot write {}", path.display()))?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", crate::render_tables(&report));
        for l in &check_lines {
            println!("{l}");
        }
    }
    Ok(passed)
}
