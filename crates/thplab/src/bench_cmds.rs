//! `thplab bench`: the arguments of `io` (the command is `bench_io::command::run_io`) and
//! `chase` (crate::chase_cmds).

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
    Io(bench_io::command::IoOptions),
}

pub fn cmd_bench(a: BenchArgs) -> Result<u8> {
    match a.cmd {
        BenchCmd::Io(a) => cmd_io(a),
        BenchCmd::Chase(a) => a.run(),
    }
}

fn cmd_io(o: bench_io::command::IoOptions) -> Result<u8> {
    let read_profile = |p: &std::path::Path| crate::read_text_limited(p, "machine profile", uapi::profile::MAX_PROFILE_BYTES as u64);
    let within_tolerance = bench_io::command::run_io(&o, &read_profile)?;
    Ok(if within_tolerance { crate::exit::OK } else { crate::exit::DIFFERS })
}
