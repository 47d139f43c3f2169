//! `thplab explain`: for every VMA of a running process, the folio orders Linux 6.18 allows at
//! fault time and at khugepaged time, the reason for every order it refuses, and beside them the
//! census of what the VMA really has.
//!
//! The decision is the model's own code, run on the live inputs: [`mm::huge_memory::
//! anon_thp_vma_allowable_orders`] (`include/linux/huge_mm.h: thp_vma_allowable_orders`,
//! `mm/huge_memory.c: __thp_vma_allowable_orders`, `vma_thp_disabled`,
//! `thp_vma_suitable_order(s)`), [`mm::shmem::shmem_allowable_huge_orders_why`] and
//! [`mm::shmem::shmem_thp_vma_allowable_orders`] (`mm/shmem.c: shmem_huge_global_enabled`,
//! `shmem_allowable_huge_orders`, `shmem_get_orders_within_size`), each with a
//! [`Refusals`] sink that records why every order was dropped. The inputs come from
//! [`probe::inputs`] (knobs read only, /proc/cmdline, /proc/PID/status, smaps, mountinfo,
//! map_files) and the census from [`probe::census`], the same one `thplab observe` prints.
//!
//! What /proc does not show is inferred and said so: whether an anonymous VMA has an anon_vma
//! (from `Anonymous:`/`Swap:` in smaps), and MMF_DISABLE_THP_EXCEPT_ADVISED (the hypothesis
//! under which the model's TVA_SMAPS answer (any order) agrees with the kernel's `THPeligible`
//! on every VMA).
//!
//! This crate may depend on both `mm` and `probe` (ARCHITECTURE.md); it reads nothing itself.
//!
//! [`command`] is `thplab explain`: the pid and address checked, the report printed.

pub mod command;

use std::fmt;

use probe::census::census_of_ranges;
use probe::inputs::{read_policy_inputs, Backing, PolicyInputs, VmaInputs};
use mm::huge_memory::{anon_thp_vma_allowable_orders, thp_vma_suitable_order, Refusal, RefusalSink, Refusals, TvaType};
use mm::shmem::{
    file_vma_suitable_orders_why, shm_mnt_huge, shmem_allowable_huge_orders_why, shmem_thp_vma_allowable_orders, SbHuge,
    ShmemInodeFacts,
};
use mm::vma::{vm, Vma};
use mm::{MmFlags, ThpMasks};
use mm_types::{Order, Orders, PAGE_SIZE};
use serde::Serialize;
use thp_abi::{Census, ThpSettings};

/// The verdict for one order at one moment (fault or khugepaged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    Refused(Refusal),
}

impl Verdict {
    pub fn name(self) -> String {
        match self {
            Verdict::Allowed => "allowed".into(),
            Verdict::Refused(r) => r.name(),
        }
    }
}

/// One order of one VMA.
#[derive(Clone, Debug, Serialize)]
pub struct OrderLine {
    /// `64kB`.
    pub size: String,
    pub order: u8,
    pub fault: String,
    /// Other reasons that would refuse the order too, once the first is gone (the kernel
    /// stops at the first): VM_NOHUGEPAGE or prctl behind a sysfs reason, VMA geometry, anon_vma.
    pub fault_also: Vec<String>,
    pub khugepaged: String,
    pub khugepaged_also: Vec<String>,
    /// Folios of this size the census found in the VMA.
    pub folios: u64,
    /// An anonymous size allowed at fault that the VMA's memory is nevertheless mapped below:
    /// why, as far as the mapping now tells ([`unused_because`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unused: Option<String>,
}

/// Why the anonymous order `o`, allowed at fault now, does not map the VMA's memory that the
/// census found in smaller folios (`c`); `khugepaged`: the order's verdict for the daemon. The
/// kernel decides at each fault (mm/memory.c: `__handle_mm_fault` takes a PMD fault only on an
/// empty PMD entry, `do_anonymous_page` → `alloc_anon_folio` the largest allowed order whose
/// aligned block is inside the VMA and has no PTE yet, `pte_range_none`), so memory faulted in
/// smaller folios stays so until it is freed or collapsed; the census shows the result, not
/// which condition applied then.
pub fn unused_because(o: Order, c: &Census, khugepaged: &str) -> Option<String> {
    let smaller_kb: u64 = c
        .sizes
        .iter()
        .filter_map(|(size, e)| Some((mm_types::parse_size(size)?, e.folios)))
        .filter(|&(bytes, folios)| folios > 0 && bytes < o.size())
        .map(|(bytes, folios)| (bytes >> 10) * folios)
        .sum();
    if smaller_kb == 0 {
        return None;
    }
    if o == Order::PMD {
        let by_whom = if khugepaged == Verdict::Allowed.name() {
            "khugepaged (allowed for this VMA) or MADV_COLLAPSE".to_string()
        } else {
            format!("MADV_COLLAPSE (khugepaged: {khugepaged})")
        };
        Some(format!(
            "pte_table_exists: {smaller_kb} kB is mapped by PTEs, and a PMD fault needs an empty PMD entry: those 2 MiB ranges \
             were first faulted while 2 MiB was not allowed there (other knobs, MADV_HUGEPAGE later, or the VMA not yet covering \
             the aligned 2 MiB, as a heap grown by brk); only {by_whom} can map them with a PMD"
        ))
    } else {
        Some(format!(
            "faulted_smaller: {smaller_kb} kB is in smaller folios: when they faulted, the aligned {} block held a mapped page \
             (pte_range_none), reached outside the VMA, or the size was not allowed (the census cannot tell which); it stays so \
             until freed (khugepaged collapses PMD size only)",
            o.label()
        ))
    }
}

/// One VMA.
#[derive(Clone, Debug, Serialize)]
pub struct VmaExplain {
    pub start: String,
    pub end: String,
    pub perms: String,
    pub name: String,
    pub backing: Backing,
    /// VmFlags that the policy reads (hg, nh, sh, io, de, pf, mm, ht).
    pub flags: Vec<String>,
    pub rss_kb: u64,
    /// For anonymous VMAs: whether it has an anon_vma (inferred from Anonymous/Swap in smaps).
    pub anon_vma: Option<bool>,
    /// The kernel's `THPeligible` and the model's TVA_SMAPS answer (any order allowed).
    pub thp_eligible_kernel: Option<bool>,
    pub thp_eligible_model: Option<bool>,
    /// Highest order first.
    pub orders: Vec<OrderLine>,
    pub census: Census,
}

/// The whole process.
#[derive(Clone, Debug, Serialize)]
pub struct ExplainReport {
    pub pid: i32,
    pub comm: String,
    /// `THP_enabled` of /proc/PID/status.
    pub thp_enabled: Option<bool>,
    /// `none`, `disable_thp_completely` or `disable_thp_except_advised`.
    pub prctl: String,
    /// How `prctl` was found.
    pub prctl_source: String,
    /// The knobs, as `PATH=VALUE` for what differs from the 6.18 boot defaults.
    pub settings: String,
    pub boot_params: Vec<String>,
    pub vmas: Vec<VmaExplain>,
    /// VMAs where the kernel's THPeligible and the model's differ (should be empty).
    pub thp_eligible_mismatches: usize,
    pub census_ms: f64,
}

/// Errors of [`explain_pid`].
pub type Error = probe::LiveError;

/// The VmFlags mnemonics the policy reads.
const POLICY_FLAGS: [&str; 8] = ["hg", "nh", "sh", "io", "de", "pf", "mm", "ht"];

/// `huge=` word of a mount as the model's [`SbHuge`] (`mm/shmem.c: shmem_parse_huge`).
fn sb_huge_of(word: Option<&str>) -> SbHuge {
    match word {
        Some("always") => SbHuge::Always,
        Some("within_size") => SbHuge::WithinSize,
        Some("advise") => SbHuge::Advise,
        _ => SbHuge::Never,
    }
}

/// The model's VMA for a live one.
pub fn model_vma(v: &VmaInputs) -> Vma {
    let l = &v.vma;
    let mut flags = 0;
    for (c, bit) in [(0, vm::READ), (1, vm::WRITE), (2, vm::EXEC)] {
        if l.perms.as_bytes().get(c).is_some_and(|b| *b != b'-') {
            flags |= bit;
        }
    }
    for (f, bit) in [("hg", vm::HUGEPAGE), ("nh", vm::NOHUGEPAGE), ("sh", vm::SHARED)] {
        if l.has_flag(f) {
            flags |= bit;
        }
    }
    if ["io", "de", "pf", "mm", "ht"].iter().any(|f| l.has_flag(f)) {
        flags |= vm::NO_KHUGEPAGED;
    }
    let mut file = 0;
    match v.backing {
        Backing::AnonShmem { .. } => {
            flags |= vm::ANON_SHMEM;
            file = 1;
        }
        Backing::Tmpfs { .. } => file = 1,
        _ => {}
    }
    let anon_vma = u32::from(l.anonymous_kb > 0 || l.swap_kb > 0);
    Vma { start: l.start, end: l.end, flags, anon_vma, file, pgoff: l.pgoff }
}

/// The fixed inputs of one process.
pub struct Policy<'a> {
    pub settings: &'a ThpSettings,
    pub masks: ThpMasks,
    pub mm: MmFlags,
    pub tmpfs_default_huge: Option<&'a str>,
}

impl Policy<'_> {
    fn shmem_facts(&self, b: &Backing) -> Option<ShmemInodeFacts> {
        match b {
            Backing::AnonShmem { i_size } => Some(ShmemInodeFacts { sb_huge: shm_mnt_huge(self.settings), i_size: *i_size }),
            Backing::Tmpfs { huge, i_size, .. } => Some(ShmemInodeFacts {
                sb_huge: sb_huge_of(huge.as_deref().or(self.tmpfs_default_huge)),
                i_size: *i_size,
            }),
            _ => None,
        }
    }

    /// Orders allowed at a fault at `addr` (or anywhere in the VMA when None), with reasons.
    pub fn at_fault(&self, v: &VmaInputs, addr: Option<u64>) -> (Orders, Refusals) {
        let vma = model_vma(v);
        let mut why = Refusals::default();
        let allowed = match &v.backing {
            Backing::Anon => {
                let o = anon_thp_vma_allowable_orders(&self.masks, &self.mm, &vma, TvaType::PageFault, Orders::ALL_ANON, &mut why);
                fault_geometry(&vma, addr, o, &mut why)
            }
            b @ (Backing::AnonShmem { .. } | Backing::Tmpfs { .. }) => {
                let f = self.shmem_facts(b).expect("shmem");
                let a = addr.unwrap_or(vma.start);
                let index = vma.linear_page_index(a);
                let o = shmem_allowable_huge_orders_why(self.settings, &self.mm, f, Some(&vma), index, 0, false, &mut why);
                match addr {
                    Some(a) => file_vma_suitable_orders_why(&vma, a, o, &mut why),
                    None => fault_geometry(&vma, None, o, &mut why),
                }
            }
            Backing::File { .. } | Backing::Special => {
                why.refuse(Orders::ALL_FILE, Refusal::NotAnonOrShmem);
                Orders::NONE
            }
        };
        (allowed, why)
    }

    /// Orders khugepaged may collapse to (PMD only in 6.18), with reasons.
    pub fn at_khugepaged(&self, v: &VmaInputs) -> (Orders, Refusals) {
        let mut why = Refusals::default();
        // The kernel never asks for the other orders: that is their reason, first.
        why.refuse(Orders::ALL_FILE.without(Order::PMD), Refusal::KhugepagedPmdOnly);
        let allowed = self.tva(v, TvaType::Khugepaged, Orders::single(Order::PMD), &mut why);
        (allowed, why)
    }

    /// `thp_vma_allowable_orders(vma, tva, orders)` for a live VMA.
    pub fn tva(&self, v: &VmaInputs, tva: TvaType, orders: Orders, why: &mut Refusals) -> Orders {
        let vma = model_vma(v);
        match &v.backing {
            Backing::Anon => anon_thp_vma_allowable_orders(&self.masks, &self.mm, &vma, tva, orders, why),
            b @ (Backing::AnonShmem { .. } | Backing::Tmpfs { .. }) => {
                let f = self.shmem_facts(b).expect("shmem");
                shmem_thp_vma_allowable_orders(self.settings, &self.mm, f, &vma, tva, orders, why)
            }
            Backing::File { .. } | Backing::Special => {
                why.refuse(orders, Refusal::NotAnonOrShmem);
                Orders::NONE
            }
        }
    }

    /// The independent refusals behind `first` for order `o` (see [`OrderLine::fault_also`]).
    fn also(&self, v: &VmaInputs, o: Order, first: Verdict, khugepaged: bool) -> Vec<String> {
        let Verdict::Refused(first) = first else { return vec![] };
        if matches!(v.backing, Backing::File { .. } | Backing::Special) || first == Refusal::KhugepagedPmdOnly {
            return vec![];
        }
        let vma = model_vma(v);
        let mut out = Vec::new();
        if let Some(r) = mm::huge_memory::vma_thp_disabled_why(&self.mm, vma.flags, false) {
            out.push(r);
        }
        let mut geo = Refusals::default();
        let fits = if khugepaged {
            // The block must fit below vm_end (__thp_vma_allowable_orders).
            let end = vma.end.wrapping_sub(o.size());
            if vma.file != 0 {
                mm::shmem::file_vma_suitable_orders_why(&vma, end, Orders::single(o), &mut geo)
            } else {
                mm::huge_memory::thp_vma_suitable_orders(&vma, end, Orders::single(o))
            }
        } else {
            fault_geometry(&vma, None, Orders::single(o), &mut geo)
        };
        if fits.is_empty() {
            out.push(geo.get(o).unwrap_or(Refusal::NoAlignedBlock));
        }
        if khugepaged && v.backing == Backing::Anon && vma.anon_vma == 0 {
            out.push(Refusal::NoAnonVma);
        }
        out.retain(|r| *r != first);
        out.dedup();
        out.iter().map(|r| r.name()).collect()
    }

    /// The model's `THPeligible` (TVA_SMAPS, any order); None where the model does not decide
    /// (regular files, special mappings).
    pub fn thp_eligible(&self, v: &VmaInputs) -> Option<bool> {
        match v.backing {
            Backing::File { .. } | Backing::Special => None,
            // show_smap asks for every order (THP_ORDERS_ALL), not only PMD: a VMA where only
            // 64K is allowed shows THPeligible 1 (seen on 6.18.44).
            _ => Some(!self.tva(v, TvaType::Smaps, Orders::ALL_FILE, &mut Refusals::default()).is_empty()),
        }
    }
}

/// At fault time the kernel checks the aligned block around the faulting address
/// (`thp_vma_suitable_order(s)` in `do_huge_pmd_anonymous_page`, `alloc_anon_folio`,
/// `shmem_suitable_orders`). For a whole VMA: an order is usable if some aligned block fits.
fn fault_geometry(vma: &Vma, addr: Option<u64>, orders: Orders, why: &mut Refusals) -> Orders {
    let mut kept = Orders::NONE;
    for o in orders.iter_desc() {
        let a = addr.unwrap_or_else(|| vma.start.div_ceil(o.size()) * o.size());
        let fits = if vma.file != 0 {
            mm::shmem::file_vma_suitable_order(vma, a, o)
        } else {
            thp_vma_suitable_order(vma, a, o)
        };
        if fits {
            kept = kept.with(o);
        } else if vma.file != 0 && (vma.start / PAGE_SIZE).wrapping_sub(vma.pgoff) % o.nr_pages() as u64 != 0 {
            why.refuse(Orders::single(o), Refusal::FileOffsetMisaligned);
        } else {
            why.refuse(Orders::single(o), Refusal::NoAlignedBlock);
        }
    }
    kept
}

fn verdict(allowed: Orders, why: &Refusals, o: Order) -> Verdict {
    if allowed.contains(o) {
        Verdict::Allowed
    } else {
        Verdict::Refused(why.get(o).unwrap_or(Refusal::NotThpOrder))
    }
}

/// Which prctl state explains the kernel's THPeligible lines: `THP_enabled: 0` is
/// MMF_DISABLE_THP_COMPLETELY; otherwise try with and without MMF_DISABLE_THP_EXCEPT_ADVISED.
fn infer_prctl(inp: &PolicyInputs, masks: ThpMasks) -> (MmFlags, String, String) {
    if inp.thp_enabled == Some(false) {
        let mm = MmFlags { disable_thp_completely: true, ..Default::default() };
        return (mm, "disable_thp_completely".into(), "/proc/PID/status THP_enabled: 0".into());
    }
    let mismatches = |mm: MmFlags| {
        let p = Policy { settings: &inp.settings, masks, mm, tmpfs_default_huge: inp.tmpfs_default_huge.as_deref() };
        inp.vmas
            .iter()
            .filter(|v| matches!((p.thp_eligible(v), v.vma.thp_eligible), (Some(a), Some(b)) if a != b))
            .count()
    };
    let none = MmFlags::default();
    let advised = MmFlags { disable_thp_except_advised: true, ..Default::default() };
    let (m0, m1) = (mismatches(none), mismatches(advised));
    if m1 < m0 {
        (advised, "disable_thp_except_advised".into(), format!("inferred: THPeligible of {m0} VMAs is explained only with PR_THP_DISABLE_EXCEPT_ADVISED"))
    } else if m0 == m1 {
        (none, "none".into(), "THP_enabled: 1; PR_THP_DISABLE_EXCEPT_ADVISED cannot be told apart here (no VMA's THPeligible depends on it), assumed off".into())
    } else {
        (none, "none".into(), "THP_enabled: 1 and THPeligible agrees without PR_THP_DISABLE_EXCEPT_ADVISED".into())
    }
}

/// Explain the VMAs of `inp` (only the one holding `addr`, if given) with their census.
pub fn explain(inp: &PolicyInputs, census: &probe::census::CensusReport, addr: Option<u64>) -> ExplainReport {
    let masks = ThpMasks::from(&inp.settings);
    let (mm, prctl, prctl_source) = infer_prctl(inp, masks);
    let p = Policy { settings: &inp.settings, masks, mm, tmpfs_default_huge: inp.tmpfs_default_huge.as_deref() };
    let mut vmas = Vec::new();
    let mut mismatches = 0;
    for (i, v) in inp.vmas.iter().enumerate() {
        if addr.is_some_and(|a| !(v.vma.start <= a && a < v.vma.end)) {
            continue;
        }
        let (fo, fw) = p.at_fault(v, addr);
        let (ko, kw) = p.at_khugepaged(v);
        let c = census.per_vma.get(i).cloned().unwrap_or_default();
        let range = match v.backing {
            Backing::Anon => Orders::ALL_ANON,
            _ => Orders::ALL_FILE,
        };
        let orders = range
            .iter_desc()
            .map(|o| {
                let fault = verdict(fo, &fw, o);
                let khugepaged = verdict(ko, &kw, o).name();
                let unused = (v.backing == Backing::Anon && fault == Verdict::Allowed).then(|| unused_because(o, &c, &khugepaged)).flatten();
                OrderLine {
                    size: o.label(),
                    order: o.0,
                    fault: fault.name(),
                    fault_also: p.also(v, o, fault, false),
                    khugepaged_also: p.also(v, o, verdict(ko, &kw, o), true),
                    khugepaged,
                    folios: c.sizes.get(&thp_abi::FolioSize::of(o)).map(|e| e.folios).unwrap_or(0),
                    unused,
                }
            })
            .collect();
        let model = p.thp_eligible(v);
        if matches!((model, v.vma.thp_eligible), (Some(a), Some(b)) if a != b) {
            mismatches += 1;
        }
        vmas.push(VmaExplain {
            start: format!("{:x}", v.vma.start),
            end: format!("{:x}", v.vma.end),
            perms: v.vma.perms.clone(),
            name: v.vma.name.clone(),
            backing: v.backing.clone(),
            flags: v.vma.vm_flags.iter().filter(|f| POLICY_FLAGS.contains(&f.as_str())).cloned().collect(),
            rss_kb: v.vma.rss_kb,
            anon_vma: matches!(v.backing, Backing::Anon).then(|| model_vma(v).anon_vma != 0),
            thp_eligible_kernel: v.vma.thp_eligible,
            thp_eligible_model: model,
            orders,
            census: c,
        });
    }
    ExplainReport {
        pid: inp.pid,
        comm: inp.comm.clone(),
        thp_enabled: inp.thp_enabled,
        prctl,
        prctl_source,
        settings: inp.settings.summary(),
        boot_params: inp.boot_params.clone(),
        vmas,
        thp_eligible_mismatches: mismatches,
        census_ms: census.elapsed.as_secs_f64() * 1e3,
    }
}

/// Read the inputs and the census of `pid` and explain (the VMA holding `addr`, or all).
pub fn explain_pid(pid: i32, addr: Option<u64>) -> Result<ExplainReport, Error> {
    let inp = read_policy_inputs(pid)?;
    let vmas: Vec<probe::procfs::Vma> = inp.vmas.iter().map(|v| v.vma.clone()).collect();
    let ranges = match addr {
        Some(a) => vec![(a & !(PAGE_SIZE - 1), (a & !(PAGE_SIZE - 1)) + PAGE_SIZE)],
        None => vec![(0, u64::MAX)],
    };
    // With ADDR the census covers the whole VMA holding it.
    let ranges = match addr {
        Some(a) => vmas.iter().filter(|v| v.start <= a && a < v.end).map(|v| (v.start, v.end)).collect(),
        None => ranges,
    };
    let census = census_of_ranges(pid, &ranges, &vmas)?;
    Ok(explain(&inp, &census, addr))
}

/// `16kB 32kB` runs of sizes with the same verdict, highest first.
fn grouped(lines: &[OrderLine], pick: impl Fn(&OrderLine) -> (&str, &[String])) -> String {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for l in lines {
        let (first, also) = pick(l);
        let v = std::iter::once(first.to_string()).chain(also.iter().cloned()).collect::<Vec<_>>().join("+");
        match groups.iter_mut().find(|(k, _)| *k == v) {
            Some((_, sizes)) => sizes.push(l.size.clone()),
            None => groups.push((v, vec![l.size.clone()])),
        }
    }
    groups.iter().map(|(v, sizes)| format!("{} {}", sizes.join(" "), v)).collect::<Vec<_>>().join("; ")
}

impl fmt::Display for ExplainReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Lines fit 100 columns; `{:#}` prints them whole.
        let width = (!f.alternate()).then_some(report::text::TEXT_WIDTH);
        let line = |f: &mut fmt::Formatter<'_>, text: &str, indent: usize| -> fmt::Result {
            for l in report::text::wrap(text, width, indent) {
                writeln!(f, "{l}")?;
            }
            Ok(())
        };
        let head = format!(
            "pid {} ({}): THP_enabled {}, prctl {} ({})",
            self.pid,
            self.comm,
            self.thp_enabled.map(|b| if b { "1" } else { "0" }).unwrap_or("?"),
            self.prctl,
            self.prctl_source
        );
        line(f, &head, 2)?;
        line(f, &format!("knobs: {}", self.settings), 7)?;
        if !self.boot_params.is_empty() {
            writeln!(f, "boot: {}", self.boot_params.join(" "))?;
        }
        for v in &self.vmas {
            let name = if v.name.is_empty() { "[anon]" } else { v.name.as_str() };
            let kind = match &v.backing {
                Backing::Anon => format!("anon{}", if v.anon_vma == Some(false) { ", no anon_vma" } else { "" }),
                Backing::AnonShmem { i_size } => format!("anon shmem, i_size {i_size}"),
                Backing::Tmpfs { mount_point, huge, i_size } => {
                    format!("tmpfs {mount_point} huge={}, i_size {i_size}", huge.as_deref().unwrap_or("never"))
                }
                Backing::File { fstype } => format!("file ({fstype})"),
                Backing::Special => "special".into(),
            };
            let elig = |b: Option<bool>| b.map(|b| if b { "1" } else { "0" }).unwrap_or("-");
            let rest = format!(
                " ({}{}{}) THPeligible {} (model {})",
                kind,
                if v.flags.is_empty() { "" } else { ", " },
                v.flags.join(" "),
                elig(v.thp_eligible_kernel),
                elig(v.thp_eligible_model)
            );
            let head = format!("{}-{} {} {} kB ", v.start, v.end, v.perms, v.rss_kb);
            // A long path is cut in the middle to what the line leaves it (16 at least).
            let room = width.map_or(usize::MAX, |w| w.saturating_sub(head.chars().count() + rest.chars().count()).max(16));
            writeln!(f)?;
            line(f, &format!("{head}{}{rest}", report::text::elide(name, room)), 2)?;
            line(f, &format!("  fault:      {}", grouped(&v.orders, |l| (&l.fault, &l.fault_also))), 14)?;
            line(f, &format!("  khugepaged: {}", grouped(&v.orders, |l| (&l.khugepaged, &l.khugepaged_also))), 14)?;
            // Largest size first.
            let sizes: Vec<(_, &thp_abi::CensusEntry)> = v.census.sizes.iter().rev().filter(|(_, e)| e.folios > 0).collect();
            let mut c: Vec<String> = sizes
                .iter()
                .map(|(s, e)| {
                    let mut t = format!("{s} x{}", e.folios);
                    if e.pmd_mapped > 0 {
                        t += &format!(" ({} pmd)", e.pmd_mapped);
                    }
                    if e.partially_mapped > 0 {
                        t += &format!(" ({} partial)", e.partially_mapped);
                    }
                    t
                })
                .collect();
            if v.census.zero_page_ptes > 0 {
                c.push(format!("zero-page PTEs x{}", v.census.zero_page_ptes));
            }
            if v.census.huge_zero_pmds > 0 {
                c.push(format!("huge zero PMDs x{}", v.census.huge_zero_pmds));
            }
            line(f, &format!("  census:     {}", if c.is_empty() { "nothing mapped".into() } else { c.join(", ") }), 14)?;
            for l in v.orders.iter().filter(|l| l.unused.is_some()) {
                writeln!(f, "  not used:   {} allowed, but {}", l.size, l.unused.as_deref().unwrap_or_default())?;
            }
        }
        if self.thp_eligible_mismatches > 0 {
            writeln!(f, "\nwarning: THPeligible differs from the model on {} VMAs", self.thp_eligible_mismatches)?;
        }
        writeln!(f, "\nreasons:")?;
        let mut used: Vec<Refusal> = Refusal::ALL
            .iter()
            .copied()
            .filter(|r| {
                let n = r.name();
                self.vmas.iter().any(|v| {
                    v.orders.iter().any(|l| l.fault == n || l.khugepaged == n || l.fault_also.contains(&n) || l.khugepaged_also.contains(&n))
                })
            })
            .collect();
        used.sort();
        for r in used {
            line(f, &format!("  {:<32} {}", r.name(), r.describe()), 35)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
