//! CPU presets: TLB geometry, walk caches and latencies, each with its sources.
//!
//! Sources are abbreviated; the full list is in /work/shared/reference/proposals-and-tlb.md §6
//! (copied into docs/tlb-model.md). Values marked ASSUMED were not found in a primary source; they
//! are the model's choices and are named as such in `thplab sim --cpu list`.

use crate::assoc::Geometry;

/// Instruction set, for the meaning of the contiguous bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    X86_64,
    Arm64,
}

/// One TLB array of a level and the entry shifts it holds.
#[derive(Clone, Copy, Debug)]
pub struct StructureSpec {
    pub name: &'static str,
    pub geometry: Geometry,
    /// Entry shifts held (12 = 4 KiB, 15 = 32 KiB coalesced, 16 = 64 KiB, 21 = 2 MiB, 30 = 1 GiB...).
    pub sizes: &'static [u8],
}

/// A cache of the data hierarchy, for the cost of data and page-table reads.
#[derive(Clone, Copy, Debug)]
pub struct CacheSpec {
    pub bytes: u64,
    pub cycles: f64,
}

#[derive(Clone, Copy, Debug)]
pub struct CpuPreset {
    /// The `--cpu` name.
    pub name: &'static str,
    pub description: &'static str,
    pub isa: Isa,
    pub l1: &'static [StructureSpec],
    pub l2: &'static [StructureSpec],
    /// Coalescing of 4 KiB PTEs in L1 / L2: the shift of a coalesced entry.
    pub l1_coalesce: Option<u8>,
    pub l2_coalesce: Option<u8>,
    /// Walk caches for PML4E/L0, PDPTE/L1, PDE/L2 descriptors.
    pub pwc: [Option<Geometry>; 3],
    /// Extra cycles of an L1 miss that hits L2.
    pub l2_hit_cycles: f64,
    /// Fixed cycles of a walk besides its memory references.
    pub walk_cycles: f64,
    /// Data caches, smallest first, and the memory latency in ns.
    pub caches: &'static [CacheSpec],
    pub dram_ns: f64,
    pub ghz: f64,
    /// Where the numbers come from.
    pub sources: &'static str,
}

const K4: u8 = 12;
const K16: u8 = 14;
const K32: u8 = 15;
const K64: u8 = 16;
const M1: u8 = 20;
const M2: u8 = 21;
const M16: u8 = 24;
const M32: u8 = 25;
const M512: u8 = 29;
const G1: u8 = 30;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

// AMD Zen 4 (EPYC 9004 "Genoa", family 19h model 11h).
// L1 DTLB: CPUID 0x80000005 on this machine kind: 72 entries, fully associative, 4K and 2M/4M
// (AMD describes the L1 DTLB as one fully associative array of all sizes); 1G assumed held too.
// L2 DTLB: CPUID 0x80000006: 3072 entries for 4K and for 2M. The array is skewed-associative with
// ways per size class (Hadi Brais via stackoverflow.com/questions/69814823); modelled as one
// 3072-entry 12-way array holding 4K, coalesced 32K and 2M entries (ASSUMED 12 ways, as Zen 2's
// 2048-entry 12-way, WikiChip zen_2 citing AMD SOG 17h); 1G pages are smashed to 2M in L2 (Zen 2
// SOG). PTE coalescing: 8 aligned 4K PTEs mapping contiguous aligned frames = one 32K L2 entry
// (Brais; Zi Yan on linux-mm "at 16KB or 32KB level"); not in L1 (ASSUMED).
// Walk caches: PDEs are cached in the L2 DTLB on Zen 2+ ("4K and 2M plus PDE entries used to
// speed up walks", WikiChip zen_2 citing AMD SOG 17h): modelled as a PDE cache of the L2 DTLB's
// geometry (3072 entries, 12-way) beside it (the capacity they share is not modelled); PML4E and
// PDPTE caches ASSUMED 4 and 8 entries. With nested paging the host walk uses caches of the same
// geometry (AMD's nested TLB is not modelled separately).
// Latencies ASSUMED: L2 DTLB hit 7 cycles (Chips and Cheese measurements of Zen 4, not retrieved
// here); caches from lscpu of this machine kind (32K L1D per core, 1M L2); the L3 is 32M per CCD
// of 8 cores, shared with the host's other tenants: one core's share, 4M, is what the model
// gives a stream (ASSUMED; with the whole 32M the model's PMD gain on a 2 GiB chase was a third
// of the one measured here by `thplab bench chase`, see docs/tlb-model.md).
static ZEN4_L1: [StructureSpec; 1] =
    [StructureSpec { name: "L1 DTLB", geometry: Geometry::full(72), sizes: &[K4, M2, G1] }];
static ZEN4_L2: [StructureSpec; 1] =
    [StructureSpec { name: "L2 DTLB", geometry: Geometry::assoc(3072, 12), sizes: &[K4, K32, M2] }];
static ZEN_CACHES: [CacheSpec; 3] = [
    CacheSpec { bytes: 32 * KIB, cycles: 4.0 },
    CacheSpec { bytes: MIB, cycles: 14.0 },
    CacheSpec { bytes: 4 * MIB, cycles: 50.0 },
];

// AMD Zen 1 (family 17h): L1 DTLB 64 entries fully associative, all sizes; L2 DTLB 1536 entries
// 12-way for 4K and 2M, 1G smashed to 2M (AMD SOG 17h, 2017, via stackoverflow.com/questions/69814823
// and WikiChip zen). Coalescing as Zen 4 (Brais). Caches: 32K L1D, 512K L2, 8M L3 per CCX (WikiChip).
// Zen 1 walk caches: the 16-entry page directory cache of AMD family 16h (SOG) for PDEs, PML4E
// and PDPTE caches ASSUMED 4 and 8 entries.
static ZEN1_L1: [StructureSpec; 1] =
    [StructureSpec { name: "L1 DTLB", geometry: Geometry::full(64), sizes: &[K4, M2, G1] }];
static ZEN1_L2: [StructureSpec; 1] =
    [StructureSpec { name: "L2 DTLB", geometry: Geometry::assoc(1536, 12), sizes: &[K4, K32, M2] }];
static ZEN1_CACHES: [CacheSpec; 3] = [
    CacheSpec { bytes: 32 * KIB, cycles: 4.0 },
    CacheSpec { bytes: 512 * KIB, cycles: 17.0 },
    CacheSpec { bytes: 8 * MIB, cycles: 40.0 },
];

// Intel Golden Cove / Sapphire Rapids: L1 DTLB (loads) 96 entries 6-way for 4K; 2048-entry STLB;
// 4 walkers (jiegec/cpu docs/golden_cove.d2 @ 048df436, citing Chips and Cheese and Intel).
// ASSUMED (not verified from a primary source): L1 2M/4M array 32 entries 4-way, L1 1G 8 entries
// fully associative, STLB 16-way shared by 4K and 2M, STLB 1G 16 entries 4-way; paging-structure
// cache sizes (Intel does not document them, SDM vol. 3A §4.10.3): PML4E 2, PDPTE 4, PDE 32.
// Caches: Sapphire Rapids 48K L1D, 2M L2, 1.875M L3 per core (ASSUMED 60M shared).
static GLC_L1: [StructureSpec; 3] = [
    StructureSpec { name: "L1 DTLB 4K", geometry: Geometry::assoc(96, 6), sizes: &[K4] },
    StructureSpec { name: "L1 DTLB 2M", geometry: Geometry::assoc(32, 4), sizes: &[M2] },
    StructureSpec { name: "L1 DTLB 1G", geometry: Geometry::full(8), sizes: &[G1] },
];
static GLC_L2: [StructureSpec; 2] = [
    StructureSpec { name: "STLB 4K/2M", geometry: Geometry::assoc(2048, 16), sizes: &[K4, M2] },
    StructureSpec { name: "STLB 1G", geometry: Geometry::assoc(16, 4), sizes: &[G1] },
];
static GLC_CACHES: [CacheSpec; 3] = [
    CacheSpec { bytes: 48 * KIB, cycles: 5.0 },
    CacheSpec { bytes: 2 * MIB, cycles: 15.0 },
    CacheSpec { bytes: 60 * MIB, cycles: 70.0 },
];

// Arm Neoverse N1 (≈ Cortex-A76: A76 TRM 100798; WikiChip "almost identical"): L1 DTLB 48 entries
// fully associative, 4K/16K/64K/2M/512M entries; unified L2 TLB 1280 entries 5-way for all sizes
// (4K..1G), ~3 cycles; an L2 entry can hold four contiguous 4K pages ("coalesced" bit), modelled as
// a 16K coalesced entry. Contiguous bit: a contpte block is one 64K entry in both levels. Walk
// caches ASSUMED (sizes not found): L0/L1 descriptors 4 each fully associative, L2 (PDE) 32 4-way.
// Caches: 64K L1D, 1M L2 (Ampere Altra; 32M SLC ASSUMED).
static N1_L1: [StructureSpec; 1] =
    [StructureSpec { name: "L1 DTLB", geometry: Geometry::full(48), sizes: &[K4, K16, K64, M2, M512] }];
static N1_L2: [StructureSpec; 1] =
    [StructureSpec { name: "L2 TLB", geometry: Geometry::assoc(1280, 5), sizes: &[K4, K16, K64, M2, M32, M512, G1] }];
static N1_CACHES: [CacheSpec; 3] = [
    CacheSpec { bytes: 64 * KIB, cycles: 4.0 },
    CacheSpec { bytes: MIB, cycles: 11.0 },
    CacheSpec { bytes: 32 * MIB, cycles: 60.0 },
];

// Arm Cortex-A57 (TRM DDI 0488 §5.2, via pytorch/cpuinfo src/arm/tlb.c @ 547fa364): L1 DTLB 32
// entries fully associative, natively 4K, 64K and 1M entries (larger blocks cached as 1M pieces);
// unified L2 TLB 1024 entries 4-way for 4K, 64K, 1M, 16M, 2M, 1G. Walk caches ASSUMED (the TRM
// mentions intermediate-entry caching; sizes not retrieved): 4/4/16. Caches: 32K L1D, 2M L2.
static A57_L1: [StructureSpec; 1] =
    [StructureSpec { name: "L1 DTLB", geometry: Geometry::full(32), sizes: &[K4, K64, M1] }];
static A57_L2: [StructureSpec; 1] =
    [StructureSpec { name: "L2 TLB", geometry: Geometry::assoc(1024, 4), sizes: &[K4, K64, M1, M2, M16, G1] }];
static A57_CACHES: [CacheSpec; 2] =
    [CacheSpec { bytes: 32 * KIB, cycles: 4.0 }, CacheSpec { bytes: 2 * MIB, cycles: 21.0 }];

// Arm Cortex-A53 (TRM DDI 0500 §5.2, via pytorch/cpuinfo src/arm/tlb.c): data micro-TLB 10 entries
// (fully associative; sizes held ASSUMED all up to 2M); unified main TLB 512 entries 4-way for all
// VMSAv8 block sizes except 1G (split into 512M pieces). Walk cache: 64 entries 4-way (A53 TRM,
// ASSUMED here to hold PDE-level descriptors); upper levels ASSUMED 2 entries each.
// Caches: 32K L1D, 1M L2 (typical configuration).
static A53_L1: [StructureSpec; 1] =
    [StructureSpec { name: "micro DTLB", geometry: Geometry::full(10), sizes: &[K4, K64, M1, M2] }];
static A53_L2: [StructureSpec; 1] =
    [StructureSpec { name: "main TLB", geometry: Geometry::assoc(512, 4), sizes: &[K4, K64, M1, M2, M32, M512] }];
static A53_CACHES: [CacheSpec; 2] =
    [CacheSpec { bytes: 32 * KIB, cycles: 3.0 }, CacheSpec { bytes: MIB, cycles: 15.0 }];

pub static ZEN4: CpuPreset = CpuPreset {
    name: "zen4",
    description: "AMD Zen 4 (EPYC 9004 Genoa)",
    isa: Isa::X86_64,
    l1: &ZEN4_L1,
    l2: &ZEN4_L2,
    l1_coalesce: None,
    l2_coalesce: Some(K32),
    pwc: [Some(Geometry::full(4)), Some(Geometry::full(8)), Some(Geometry::assoc(3072, 12))],
    l2_hit_cycles: 7.0,
    walk_cycles: 5.0,
    caches: &ZEN_CACHES,
    dram_ns: 110.0,
    ghz: 2.6,
    sources: "CPUID 0x80000005/6 on EPYC 9004 (VM); stackoverflow.com/questions/69814823 (Brais: skewed L2, 32K coalescing); WikiChip zen_2 (AMD SOG 17h); latencies ASSUMED",
};

pub static ZEN1: CpuPreset = CpuPreset {
    name: "zen1",
    description: "AMD Zen 1 (family 17h)",
    isa: Isa::X86_64,
    l1: &ZEN1_L1,
    l2: &ZEN1_L2,
    l1_coalesce: None,
    l2_coalesce: Some(K32),
    pwc: [Some(Geometry::full(4)), Some(Geometry::full(8)), Some(Geometry::full(16))],
    l2_hit_cycles: 7.0,
    walk_cycles: 5.0,
    caches: &ZEN1_CACHES,
    dram_ns: 90.0,
    ghz: 3.0,
    sources: "AMD SOG 17h (2017) via stackoverflow.com/questions/69814823; WikiChip zen; latencies ASSUMED",
};

pub static GOLDEN_COVE: CpuPreset = CpuPreset {
    name: "golden-cove",
    description: "Intel Golden Cove / Sapphire Rapids",
    isa: Isa::X86_64,
    l1: &GLC_L1,
    l2: &GLC_L2,
    l1_coalesce: None,
    l2_coalesce: None,
    pwc: [Some(Geometry::full(2)), Some(Geometry::full(4)), Some(Geometry::assoc(32, 4))],
    l2_hit_cycles: 8.0,
    walk_cycles: 5.0,
    caches: &GLC_CACHES,
    dram_ns: 110.0,
    ghz: 3.0,
    sources: "jiegec/cpu docs/golden_cove.d2 (Chips and Cheese, Intel); Intel SDM vol. 3A §4.10.3; 2M/1G arrays and PWC sizes ASSUMED",
};

pub static NEOVERSE_N1: CpuPreset = CpuPreset {
    name: "neoverse-n1",
    description: "Arm Neoverse N1 (Ampere Altra, Graviton 2)",
    isa: Isa::Arm64,
    l1: &N1_L1,
    l2: &N1_L2,
    l1_coalesce: None,
    l2_coalesce: Some(K16),
    pwc: [Some(Geometry::full(4)), Some(Geometry::full(4)), Some(Geometry::assoc(32, 4))],
    l2_hit_cycles: 3.0,
    walk_cycles: 5.0,
    caches: &N1_CACHES,
    dram_ns: 100.0,
    ghz: 3.0,
    sources: "Cortex-A76 TRM 100798 (L1 48 full, L2 1280 5-way, coalesced entries); WikiChip neoverse_n1; walk caches ASSUMED",
};

pub static CORTEX_A57: CpuPreset = CpuPreset {
    name: "cortex-a57",
    description: "Arm Cortex-A57",
    isa: Isa::Arm64,
    l1: &A57_L1,
    l2: &A57_L2,
    l1_coalesce: None,
    l2_coalesce: None,
    pwc: [Some(Geometry::full(4)), Some(Geometry::full(4)), Some(Geometry::assoc(16, 4))],
    l2_hit_cycles: 4.0,
    walk_cycles: 5.0,
    caches: &A57_CACHES,
    dram_ns: 120.0,
    ghz: 1.9,
    sources: "Cortex-A57 TRM DDI 0488 §5.2 (via pytorch/cpuinfo src/arm/tlb.c); walk caches and latencies ASSUMED",
};

pub static CORTEX_A53: CpuPreset = CpuPreset {
    name: "cortex-a53",
    description: "Arm Cortex-A53",
    isa: Isa::Arm64,
    l1: &A53_L1,
    l2: &A53_L2,
    l1_coalesce: None,
    l2_coalesce: None,
    pwc: [Some(Geometry::full(2)), Some(Geometry::full(2)), Some(Geometry::assoc(64, 4))],
    l2_hit_cycles: 2.0,
    walk_cycles: 5.0,
    caches: &A53_CACHES,
    dram_ns: 130.0,
    ghz: 1.5,
    sources: "Cortex-A53 TRM DDI 0500 §5.2 (via pytorch/cpuinfo src/arm/tlb.c); walk cache 64 entries 4-way; latencies ASSUMED",
};

/// Every preset, in `--cpu` order.
pub static PRESETS: [&CpuPreset; 6] = [&ZEN4, &ZEN1, &GOLDEN_COVE, &NEOVERSE_N1, &CORTEX_A57, &CORTEX_A53];

/// The preset named `name`.
pub fn by_name(name: &str) -> Option<&'static CpuPreset> {
    PRESETS.iter().copied().find(|p| p.name == name)
}

/// The names, for help text and errors.
pub fn names() -> Vec<&'static str> {
    PRESETS.iter().map(|p| p.name).collect()
}

/// The preset for the CPU that /proc/cpuinfo's `text` describes, and why: x86 by vendor, family
/// and model (AMD family 0x19 models 0x10-0x1f, 0x60-0x7f and 0xa0-0xaf are Zen 4, family 0x17
/// is Zen 1/Zen 2; Intel family 6 models 0x8f, 0xcf, 0x97, 0x9a, 0xb7, 0xba and 0xbf are Golden
/// Cove or Raptor Cove cores), arm64 by `CPU part` (0xd0c Neoverse N1, 0xd07 Cortex-A57, 0xd03
/// Cortex-A53). Another CPU gets the nearest preset of its vendor, and the reason says so.
pub fn for_cpuinfo(text: &str) -> (&'static CpuPreset, String) {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim().to_string())
        })
    };
    let num = |name: &str| {
        field(name).and_then(|v| match v.strip_prefix("0x") {
            Some(h) => u32::from_str_radix(h, 16).ok(),
            None => v.parse::<u32>().ok(),
        })
    };
    let model_name = field("model name").unwrap_or_default();
    match (field("vendor_id").as_deref(), num("cpu family"), num("model")) {
        (Some("AuthenticAMD"), Some(f), Some(m)) => {
            let what = format!("AMD family {f:#x} model {m:#x} ({model_name})");
            match f {
                0x19 if matches!(m, 0x10..=0x1f | 0x60..=0x7f | 0xa0..=0xaf) => (&ZEN4, format!("{what}: Zen 4")),
                0x19 => (&ZEN4, format!("{what}: Zen 3, nearest preset zen4 (Zen 3: 64-entry L1, 2048-entry L2)")),
                0x1a => (&ZEN4, format!("{what}: Zen 5, nearest preset zen4")),
                0x17 => (&ZEN1, format!("{what}: Zen 1 or Zen 2 (Zen 2: 2048-entry L2)")),
                _ => (&ZEN1, format!("{what}: no preset, nearest zen1")),
            }
        }
        (Some("GenuineIntel"), Some(f), Some(m)) => {
            let what = format!("Intel family {f} model {m:#x} ({model_name})");
            if f == 6 && matches!(m, 0x8f | 0xcf | 0x97 | 0x9a | 0xb7 | 0xba | 0xbf) {
                (&GOLDEN_COVE, format!("{what}: Golden Cove or Raptor Cove"))
            } else {
                (&GOLDEN_COVE, format!("{what}: no preset, nearest golden-cove"))
            }
        }
        _ => match num("CPU part") {
            Some(0xd0c) => (&NEOVERSE_N1, "Arm CPU part 0xd0c: Neoverse N1".into()),
            Some(0xd07) => (&CORTEX_A57, "Arm CPU part 0xd07: Cortex-A57".into()),
            Some(0xd03) => (&CORTEX_A53, "Arm CPU part 0xd03: Cortex-A53".into()),
            Some(p) => (&NEOVERSE_N1, format!("Arm CPU part {p:#x}: no preset, nearest neoverse-n1")),
            None => (&ZEN4, "CPU not recognised in /proc/cpuinfo: zen4".into()),
        },
    }
}

/// Whether /proc/cpuinfo's `text` says the machine is a guest (the `hypervisor` CPU flag:
/// CPUID leaf 1 ECX bit 31 on x86).
pub fn is_guest(text: &str) -> bool {
    text.lines().any(|l| l.split_once(':').is_some_and(|(k, v)| k.trim() == "flags" && v.split_whitespace().any(|f| f == "hypervisor")))
}
