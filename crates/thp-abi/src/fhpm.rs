//! The parameters of FHPM, the host policy `--policy fhpm:...` (Chuandong Li, Sai Sha, Yangqing
//! Zeng, Xiran Yang, Yingwei Luo, Xiaolin Wang, Zhenlin Wang, "FHPM: Fine-grained Huge Page
//! Management For Virtualization", ISCA 2023, arXiv:2307.10618). Model-only: the paper's
//! mechanisms run in the model's host (`sim::host`), decided by `policy::fhpm`; where the paper
//! leaves a value open (or the text could not be read: only its abstract was reachable) the
//! default is this model's choice, said so in docs/vm-host.md.

/// FHPM's parameters (`fhpm:window_ms=N,split_psr=N,promote_psr=N,fill=0|1,share=0|1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FhpmParams {
    /// Length of a monitoring window (coarse, then companion-page), in ms of simulated time.
    pub window_ms: u32,
    /// Split a hot huge page whose page skew ratio (accessed base pages per mille) is below this.
    pub split_psr: u16,
    /// Promote (merge) a 2 MiB range of base pages whose accessed share, per mille, is at least this.
    pub promote_psr: u16,
    /// Proactive EPT fill after a split or a merge (the paper's VM-friendly split/collapse);
    /// 0: the entries are left to fault in, one EPT violation (VM exit) each.
    pub fill: bool,
    /// After a split, free the cold base pages the guest never wrote (they are zero pages: the
    /// sharing FHPM-Share does); 0: keep them.
    pub share: bool,
}

impl Default for FhpmParams {
    fn default() -> Self {
        FhpmParams { window_ms: 100, split_psr: 250, promote_psr: 875, fill: true, share: true }
    }
}

/// `settings --list`'s parameter lines: (name, values, default, what it does).
pub const PARAMS: &[(&str, &str, &str, &str)] = &[
    ("window_ms", "1..=60000", "100", "ms of simulated time of a monitoring window (coarse, then companion-page)"),
    ("split_psr", "0..=1000", "250", "split a hot huge page whose page skew ratio (accessed base pages per mille) is below this"),
    ("promote_psr", "1..=1000", "875", "merge a 2 MiB range of base pages whose accessed share (per mille) is at least this"),
    ("fill", "0, 1", "1", "proactive EPT fill after a split or merge (0: entries fault in, a VM exit each)"),
    ("share", "0, 1", "1", "after a split, free the cold base pages the guest never wrote (zero pages)"),
];

impl FhpmParams {
    /// Sets parameter `k` to `v`; the error says what is valid.
    pub fn set(&mut self, k: &str, v: &str) -> Result<(), String> {
        let num = |lo: u32, hi: u32| v.parse::<u32>().ok().filter(|n| (lo..=hi).contains(n));
        let bad = || {
            let values = PARAMS.iter().find(|p| p.0 == k).map_or("", |p| p.1);
            format!("policy fhpm: invalid value '{v}' for {k}; valid values are: {values}")
        };
        match k {
            "window_ms" => self.window_ms = num(1, 60_000).ok_or_else(bad)?,
            "split_psr" => self.split_psr = num(0, 1000).ok_or_else(bad)? as u16,
            "promote_psr" => self.promote_psr = num(1, 1000).ok_or_else(bad)? as u16,
            "fill" => self.fill = num(0, 1).ok_or_else(bad)? == 1,
            "share" => self.share = num(0, 1).ok_or_else(bad)? == 1,
            _ => {
                let valid: Vec<String> = PARAMS.iter().map(|p| format!("{}={}", p.0, p.1.replace(", ", "|"))).collect();
                return Err(format!("policy fhpm: unknown parameter '{k}'; valid parameters are: {}", valid.join(", ")));
            }
        }
        Ok(())
    }

    /// The parameters that differ from the default, as `k=v` (for `Display`).
    pub fn non_default(&self) -> Vec<String> {
        let d = FhpmParams::default();
        let mut out = Vec::new();
        if self.window_ms != d.window_ms {
            out.push(format!("window_ms={}", self.window_ms));
        }
        if self.split_psr != d.split_psr {
            out.push(format!("split_psr={}", self.split_psr));
        }
        if self.promote_psr != d.promote_psr {
            out.push(format!("promote_psr={}", self.promote_psr));
        }
        if self.fill != d.fill {
            out.push(format!("fill={}", self.fill as u8));
        }
        if self.share != d.share {
            out.push(format!("share={}", self.share as u8));
        }
        out
    }
}
