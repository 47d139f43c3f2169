//! `thplab bench`: the arguments of `io` (the command is `bench_io::command::run_io`) and
//! `chase` (crate::chase_cmds).

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};

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

fn cmd_io(a: IoArgs) -> Result<u8> {
    let o = bench_io::command::IoOptions {
        targets: a.target,
        device: a.device,
        kinds: a.kinds,
        engines: a.engines,
        block_sizes: a.block_sizes,
        queue_depths: a.queue_depths,
        repeat: a.repeat,
        time: a.time,
        size: a.size,
        dir: a.dir,
        pin_rounds: a.pin_rounds,
        pin_time: a.pin_time,
        pin_only: a.pin_only,
        no_pin: a.no_pin,
        write_profile: a.write_profile,
        check_profile: a.check_profile,
        tolerance: a.tolerance,
        json: a.json,
        save: a.save,
        quiet: a.quiet,
    };
    let read_profile = |p: &std::path::Path| crate::read_text_limited(p, "machine profile", uapi::profile::MAX_PROFILE_BYTES as u64);
    let within_tolerance = bench_io::command::run_io(&o, &read_profile)?;
    Ok(if within_tolerance { crate::exit::OK } else { crate::exit::DIFFERS })
}
