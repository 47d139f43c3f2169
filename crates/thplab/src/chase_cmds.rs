//! `thplab bench chase`: the arguments; the command is `chase::command::run` (the live pointer
//! chase beside the model's prediction for the same chase).

use anyhow::Result;
use clap::Args;

#[derive(Args)]
pub struct ChaseArgs {
    /// Chase sizes, comma-separated (16M up to 16G).
    #[arg(long, default_value = "16M,256M,2G", value_delimiter = ',')]
    sizes: Vec<String>,
    /// Page sizes: 4K, an mTHP size (16K, 64K, ...) or PMD; the first is the ratio's base.
    #[arg(long, default_value = "4K,16K,64K,PMD", value_delimiter = ',')]
    pages: Vec<String>,
    /// Timed loads per point (after a warm-up lap of at most as many).
    #[arg(long, default_value_t = 2_000_000)]
    accesses: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Live runs of each point, in rounds over the page sizes (so that what changes on the
    /// machine meanwhile reaches every page size alike); the point's figure is the median run,
    /// and the runs' spread is shown beside it. On a VM a 1 GiB chase moves by 20 % from one
    /// run to the next.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=99))]
    repeat: u32,
    /// The model's CPU preset.
    #[arg(long, default_value = "zen4", value_parser = tlb::presets::names())]
    cpu: String,
    /// The model's paging mode (this machine kind: a VM whose host backs guest memory with 4 KiB pages).
    #[arg(long, default_value = "nested-4k", value_parser = ["native", "nested-4k", "nested-2m", "nested-1g"])]
    paging: String,
    /// How scattered the guest-physical frames of 4 KiB pages are, for the model's nested
    /// walks (docs/tlb-model.md): `measured` (default: from /proc/self/pagemap of the live 4K
    /// buffer of the same size; 1 with --model-only or without a 4K point), or a number from 0
    /// (consecutive, as on a freshly booted machine) to 1 (each alone in its host page-table
    /// line, as on a machine whose free lists have churned for hours).
    #[arg(long, default_value = "measured", value_name = "S|measured")]
    order0_scatter: String,
    /// The model only (no root needed).
    #[arg(long)]
    model_only: bool,
    /// One JSON object.
    #[arg(long)]
    json: bool,
}

impl ChaseArgs {
    pub fn run(self) -> Result<u8> {
        chase::command::run(&chase::command::Options {
            sizes: self.sizes,
            pages: self.pages,
            accesses: self.accesses,
            seed: self.seed,
            repeat: self.repeat,
            cpu: self.cpu,
            paging: self.paging,
            order0_scatter: self.order0_scatter,
            model_only: self.model_only,
            json: self.json,
            width: crate::print::fit_width(),
        })
    }
}
