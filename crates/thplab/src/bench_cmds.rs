//! `thplab bench`: `io` (argument parsing, progress and printing around `bench_io::run`) and
//! `chase` (crate::chase_cmds).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

use bench_io::buffer::BufferKind;
use bench_io::engine::Engine;
use bench_io::target::TargetKind;

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    cmd: BenchCmd,
}

#[derive(Subcommand)]
enum BenchCmd {
    /// A dependent pointer chase over SIZE bytes (64-byte items, one random cycle) with 4 KiB,
    /// mTHP or PMD pages, timed per access on this machine (needs root: the THP knobs are set
    /// through the settings guard and restored), beside the TLB model's prediction.
    Chase(crate::chase_cmds::ChaseArgs),
    /// O_DIRECT reads into buffers backed by 4 KiB pages, each mTHP size, PMD THP and hugetlbfs
    /// 2 MiB pages, through io_uring, AIO and pread, at several block sizes and queue depths:
    /// MB/s, IOPS and CPU time per byte with their spread, and a companion that times pinning
    /// and unpinning the same buffers without I/O (needs root; knobs and the hugetlb pool are
    /// changed through the settings guard and restored).
    Io(IoArgs),
}

#[derive(Args)]
pub struct IoArgs {
    /// Where to read from, comma-separated: `ram` (a loop device over a private tmpfs),
    /// `file` (an O_DIRECT file under --dir). --device adds a block device.
    #[arg(long, value_delimiter = ',', default_value = "ram,file", value_parser = ["ram", "file"])]
    target: Vec<String>,
    /// Also read from this block device (opened read-only with O_DIRECT).
    #[arg(long, value_name = "PATH")]
    device: Option<PathBuf>,
    /// Buffer kinds, comma-separated: 4K, mTHP-16K ... mTHP-1M, THP-2M, hugetlb-2M
    /// (default: 4K, every mTHP size this kernel has, THP-2M, hugetlb-2M).
    #[arg(long, value_delimiter = ',', value_name = "KIND,...")]
    kinds: Vec<String>,
    /// Engines, comma-separated: aio, io_uring, pread (pread runs at queue depth 1 only).
    #[arg(long, value_delimiter = ',', default_value = "aio,io_uring,pread", value_name = "ENGINE,...")]
    engines: Vec<String>,
    /// Block sizes, comma-separated (4K to 64M, multiples of 4K).
    #[arg(long, value_delimiter = ',', default_value = "4K,64K,1M", value_name = "SIZE,...")]
    block_sizes: Vec<String>,
    /// Queue depths (reads in flight), comma-separated, 1 to 1024.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32", value_name = "N,...")]
    queue_depths: Vec<usize>,
    /// Timed runs per case (interleaved across cases); the tables show median and spread.
    #[arg(long, default_value_t = 5, value_name = "N")]
    repeat: usize,
    /// Seconds per timed run.
    #[arg(long, default_value_t = 0.12, value_name = "SECONDS")]
    time: f64,
    /// Size of the file (and of the tmpfs file behind the loop device) read.
    #[arg(long, default_value = "256M", value_name = "SIZE")]
    size: String,
    /// Directory of the `file` target (O_DIRECT must work on its filesystem).
    #[arg(long, default_value = "/var/tmp", value_name = "DIR")]
    dir: PathBuf,
    /// Rounds of the pin companion: each times every buffer kind and range size once
    /// (interleaved, so other load on the machine spreads over all of them); the fit uses each
    /// sample's best round.
    #[arg(long, default_value_t = 9, value_name = "N")]
    pin_rounds: usize,
    /// Seconds per timing of the pin companion.
    #[arg(long, default_value_t = 0.03, value_name = "SECONDS")]
    pin_time: f64,
    /// Run only the pin companion (no reads).
    #[arg(long, conflicts_with = "no_pin")]
    pin_only: bool,
    /// Do not run the pin companion.
    #[arg(long)]
    no_pin: bool,
    /// Write a machine profile with the `[pin]` section fitted from the companion.
    #[arg(long, value_name = "FILE")]
    write_profile: Option<PathBuf>,
    /// Compare the companion's times with the `[pin]` costs of this profile; exits 4 when a
    /// prediction is off by more than --tolerance.
    #[arg(long, value_name = "FILE")]
    check_profile: Option<PathBuf>,
    /// With --check-profile: the largest allowed error, percent.
    #[arg(long, default_value_t = 15.0, value_name = "PCT")]
    tolerance: f64,
    /// Print one JSON object (schema thplab-bench-io/1).
    #[arg(long)]
    json: bool,
    /// Also write the JSON object to FILE (the tables still go to stdout).
    #[arg(long, value_name = "FILE")]
    save: Option<PathBuf>,
    /// No progress on stderr.
    #[arg(long, short)]
    quiet: bool,
}

pub fn cmd_bench(a: BenchArgs) -> Result<u8> {
    match a.cmd {
        BenchCmd::Io(a) => cmd_io(a),
        BenchCmd::Chase(a) => a.run(),
    }
}

fn size_arg(flag: &str, s: &str) -> Result<u64> {
    mm_types::parse_size(s).with_context(|| format!("{flag} {s}: give a size such as 64K or 1M"))
}

fn options(a: &IoArgs) -> Result<bench_io::BenchOptions> {
    let mut o = bench_io::BenchOptions::default();
    o.targets = a.target.iter().map(|t| if t == "ram" { TargetKind::Ram } else { TargetKind::File }).collect();
    if let Some(d) = &a.device {
        o.targets.push(TargetKind::Device(d.display().to_string()));
    }
    o.kinds = if a.kinds.is_empty() {
        let sysfs = live::sysfs::Paths::from_env().sysfs;
        let mut k = vec![BufferKind::Base];
        k.extend(bench_io::available_mthp_kb(&sysfs).into_iter().map(BufferKind::Mthp));
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

fn cmd_io(a: IoArgs) -> Result<u8> {
    let o = options(&a)?;
    // Read the profile to check before the run, so that a bad file fails fast.
    let check = match &a.check_profile {
        Some(p) => {
            let text = crate::read_text_limited(p, "machine profile", uapi::profile::MAX_PROFILE_BYTES as u64)?;
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
    let mut on = |p: bench_io::Progress| match p {
        bench_io::Progress::Step(s) => {
            bar.set_message(s.to_string());
            bar.tick();
        }
        bench_io::Progress::Run { done, total, what } => {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
            bar.set_message(what);
        }
    };
    let report = bench_io::run(&o, &mut on).map_err(|e| match e {
        bench_io::BenchError::NotAvailable(m) => anyhow::Error::new(live::LiveError::NotAvailable(m)),
        bench_io::BenchError::Failed(m) => anyhow::anyhow!(m),
    })?;
    bar.finish_and_clear();
    let mut code = crate::exit::OK;
    if let Some(path) = &a.write_profile {
        let pin = report.pin.as_ref().and_then(|p| p.fit.map(|f| bench_io::pin_costs(&f, p.samples.len())));
        let Some(pin) = pin else { bail!("--write-profile: the pin costs could not be fitted (measure 4K and at least one larger buffer kind)") };
        let prof = uapi::profile::MachineProfile {
            machine: uapi::profile::MachineInfo { name: bench_io::host_name(), kernel: report.kernel.clone() },
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
            code = crate::exit::DIFFERS;
        }
    }
    let mut v = serde_json::to_value(&report)?;
    if !check_lines.is_empty() {
        v["profile_check"] = serde_json::json!({ "lines": check_lines, "passed": code == crate::exit::OK });
    }
    if let Some(path) = &a.save {
        std::fs::write(path, serde_json::to_string_pretty(&v)? + "\n").with_context(|| format!("cannot write {}", path.display()))?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", bench_io::render_tables(&report));
        for l in &check_lines {
            println!("{l}");
        }
    }
    Ok(code)
}
