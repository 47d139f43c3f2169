//! Hardware TLB counters through perf_event_open, where the machine's PMU has them: the generic
//! cache events `dTLB-load-misses`, `dTLB-store-misses` and `iTLB-load-misses`
//! (PERF_TYPE_HW_CACHE; include/uapi/linux/perf_event.h: `perf_hw_cache_id`,
//! `perf_hw_cache_op_id`, `perf_hw_cache_op_result_id`) and the completed page walks as raw
//! events of the CPU's core PMU, from perf's event descriptions
//! (tools/perf/pmu-events/arch/x86/*/ of Linux 6.18):
//!
//! | CPU | event | code | source |
//! |---|---|---|---|
//! | Intel Skylake | DTLB_LOAD_MISSES.WALK_COMPLETED | event=0x08,umask=0x0e | skylake/virtual-memory.json |
//! | Intel Skylake | DTLB_STORE_MISSES.WALK_COMPLETED | event=0x49,umask=0x0e | skylake/virtual-memory.json |
//! | Intel Skylake | DTLB_LOAD_MISSES.WALK_ACTIVE (cycles) | event=0x08,umask=0x10,cmask=1 | skylake/virtual-memory.json |
//! | Intel Golden Cove / Sapphire Rapids and later | DTLB_LOAD_MISSES.WALK_COMPLETED | event=0x12,umask=0x0e | sapphirerapids/virtual-memory.json |
//! | Intel Golden Cove / Sapphire Rapids and later | DTLB_STORE_MISSES.WALK_COMPLETED | event=0x13,umask=0x0e | sapphirerapids/virtual-memory.json |
//! | Intel Golden Cove / Sapphire Rapids and later | DTLB_LOAD_MISSES.WALK_ACTIVE (cycles) | event=0x12,umask=0x10,cmask=1 | sapphirerapids/virtual-memory.json |
//! | AMD Zen 4 | ls_l1_d_tlb_miss.all_l2_miss (walks requested) | event=0x45,umask=0xf0 | amdzen4/memory.json |
//! | AMD Zen 3 | ls_tablewalker.dside | event=0x46,umask=0x03 | amdzen3/memory.json |
//!
//! A raw event's config is the core PMU's format (/sys/bus/event_source/devices/cpu/format/):
//! event in bits 0-7 (AMD: and 32-35 for its 12-bit codes), umask 8-15, edge 18, inv 23, cmask
//! 24-31. Where the PMU is not exposed (a VM without a virtual PMU, as the machine this project
//! is developed on) perf_event_open of a hardware event fails with ENOENT or EOPNOTSUPP:
//! [`open_self`] says so in one sentence ([`NO_PMU`]) instead of counting zeros.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use crate::perf::{self, PerfEventAttr};

pub const PERF_TYPE_HW_CACHE: u32 = 3;
pub const PERF_TYPE_RAW: u32 = 4;

/// The sentence said once where the PMU is not available.
pub const NO_PMU: &str = "this machine's PMU is not available: no hardware TLB counters";

/// A hardware event: its name as perf spells it, and perf_event_attr's type and config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HwEvent {
    pub name: &'static str,
    pub type_: u32,
    pub config: u64,
}

/// `PERF_TYPE_HW_CACHE`'s config: cache | op << 8 | result << 16.
const fn hw_cache(cache: u64, op: u64, result: u64) -> u64 {
    cache | op << 8 | result << 16
}
const DTLB: u64 = 3;
const ITLB: u64 = 4;
const OP_READ: u64 = 0;
const OP_WRITE: u64 = 1;
const RESULT_MISS: u64 = 1;

/// The generic events every PMU driver that has TLB events maps.
pub const GENERIC: [HwEvent; 3] = [
    HwEvent { name: "dTLB-load-misses", type_: PERF_TYPE_HW_CACHE, config: hw_cache(DTLB, OP_READ, RESULT_MISS) },
    HwEvent { name: "dTLB-store-misses", type_: PERF_TYPE_HW_CACHE, config: hw_cache(DTLB, OP_WRITE, RESULT_MISS) },
    HwEvent { name: "iTLB-load-misses", type_: PERF_TYPE_HW_CACHE, config: hw_cache(ITLB, OP_READ, RESULT_MISS) },
];

/// The page-walk events of a core, as perf's descriptions give them (module table).
pub fn walk_events(vendor: &str, family: u32, model: u32) -> Vec<(&'static str, &'static str)> {
    match (vendor, family) {
        ("AuthenticAMD", 0x19) if model >= 0x10 && !(0x20..0x60).contains(&model) => vec![("ls_l1_d_tlb_miss.all_l2_miss", "event=0x45,umask=0xf0")],
        ("AuthenticAMD", 0x19) => vec![("ls_tablewalker.dside", "event=0x46,umask=0x03")],
        // Skylake-era cores (models 0x4e, 0x5e, 0x55, 0x8e, 0x9e, 0xa5, 0xa6).
        ("GenuineIntel", 6) if matches!(model, 0x4e | 0x5e | 0x55 | 0x8e | 0x9e | 0xa5 | 0xa6) => vec![
            ("DTLB_LOAD_MISSES.WALK_COMPLETED", "event=0x08,umask=0x0e"),
            ("DTLB_STORE_MISSES.WALK_COMPLETED", "event=0x49,umask=0x0e"),
            ("DTLB_LOAD_MISSES.WALK_ACTIVE", "event=0x08,umask=0x10,cmask=1"),
        ],
        // Golden Cove and later P-cores (Alder Lake 0x97/0x9a, Sapphire/Emerald Rapids 0x8f/0xcf, ...).
        ("GenuineIntel", 6) if model >= 0x8f => vec![
            ("DTLB_LOAD_MISSES.WALK_COMPLETED", "event=0x12,umask=0x0e"),
            ("DTLB_STORE_MISSES.WALK_COMPLETED", "event=0x13,umask=0x0e"),
            ("DTLB_LOAD_MISSES.WALK_ACTIVE", "event=0x12,umask=0x10,cmask=1"),
        ],
        _ => Vec::new(),
    }
}

/// A core PMU event description as sysfs and `perf stat -e cpu/.../` take it
/// (`event=0x08,umask=0x0e[,cmask=1][,edge][,inv]`) → the raw config.
pub fn parse_event_desc(s: &str) -> Result<u64, String> {
    let mut config = 0u64;
    for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let (k, v) = term.split_once('=').unwrap_or((term, "1"));
        let n = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
            Some(h) => u64::from_str_radix(h, 16),
            None => v.parse(),
        }
        .map_err(|_| format!("{term:?}: {v:?} is not a number (decimal or 0x hex)"))?;
        let (shift, width) = match k {
            "event" => (0, 12),
            "umask" => (8, 8),
            "edge" => (18, 1),
            "inv" => (23, 1),
            "cmask" => (24, 8),
            _ => return Err(format!("{term:?}: unknown term {k:?}: valid are event, umask, edge, inv, cmask")),
        };
        if n >> width != 0 {
            return Err(format!("{term:?}: {n:#x} does not fit the field's {width} bits"));
        }
        config |= match k {
            // AMD's 12-bit event codes: bits 8-11 go to config bits 32-35.
            "event" => (n & 0xff) | (n >> 8) << 32,
            _ => n << shift,
        };
    }
    Ok(config)
}

/// The event named `name` in one of perf's JSON event files
/// (tools/perf/pmu-events/arch/x86/CPU/*.json: objects with EventName, EventCode, UMask,
/// CounterMask, EdgeDetect, Invert) → (PERF_TYPE_RAW, config).
pub fn parse_pmu_json(json: &str, name: &str) -> Result<(u32, u64), String> {
    let v: serde_json::Value = serde_json::from_str(json).map_err(|e| format!("not perf's event JSON: {e}"))?;
    let list = v.as_array().ok_or("not perf's event JSON: the top level is not a list")?;
    let e = list.iter().find(|e| e["EventName"].as_str().is_some_and(|n| n.eq_ignore_ascii_case(name))).ok_or_else(|| format!("no event {name:?} in the file"))?;
    let field = |k: &str| e[k].as_str().filter(|s| !s.is_empty() && *s != "0");
    let mut desc = format!("event={}", field("EventCode").ok_or_else(|| format!("{name}: no EventCode"))?);
    for (k, term) in [("UMask", "umask"), ("CounterMask", "cmask"), ("EdgeDetect", "edge"), ("Invert", "inv")] {
        if let Some(v) = field(k) {
            desc += &format!(",{term}={v}");
        }
    }
    Ok((PERF_TYPE_RAW, parse_event_desc(&desc)?))
}

/// Counters open on this process (user and kernel, every CPU), enabled while they live.
pub struct Counters {
    events: Vec<(String, OwnedFd)>,
}

/// `cpu family`, `model` and `vendor_id` of /proc/cpuinfo's first CPU.
fn cpu_id() -> (String, u32, u32) {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |k: &str| info.lines().find(|l| l.starts_with(k)).and_then(|l| l.split_once(':')).map(|(_, v)| v.trim().to_string()).unwrap_or_default();
    (field("vendor_id"), field("cpu family").parse().unwrap_or(0), field("model\t").parse().unwrap_or(0))
}

/// One counter on this process and, inherited, on every task it creates after (a live run's
/// workload child, its threads): read() then sums them, the exited children's counts included
/// (kernel/events/core.c: `perf_event_read_value` adds the child events').
fn open_one(type_: u32, config: u64) -> io::Result<OwnedFd> {
    let attr = PerfEventAttr { type_, size: std::mem::size_of::<PerfEventAttr>() as u32, config, flags: perf::bit::INHERIT, ..Default::default() };
    perf::open(&attr, 0, -1)
}

/// The generic TLB events and the core's walk events on this process; `Err(NO_PMU and why)`
/// when the first generic event cannot be opened because the machine has no PMU
/// (ENOENT, EOPNOTSUPP, ENODEV), or why else it cannot. Walk events the core refuses are left
/// out.
pub fn open_self() -> Result<Counters, String> {
    let mut events = Vec::new();
    for e in GENERIC {
        match open_one(e.type_, e.config) {
            Ok(fd) => events.push((e.name.to_string(), fd)),
            Err(err) if events.is_empty() => {
                let no_pmu = matches!(err.raw_os_error(), Some(libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV));
                return Err(match no_pmu {
                    true => format!("{NO_PMU} (perf_event_open of {}: {err})", e.name),
                    false => format!("no hardware TLB counters: perf_event_open of {}: {err}", e.name),
                });
            }
            Err(_) => {}
        }
    }
    let (vendor, family, model) = cpu_id();
    for (name, desc) in walk_events(&vendor, family, model) {
        if let Ok(fd) = parse_event_desc(desc).and_then(|c| open_one(PERF_TYPE_RAW, c).map_err(|e| e.to_string())) {
            events.push((name.to_string(), fd));
        }
    }
    Ok(Counters { events })
}

/// Whether [`say_once`] has spoken in this process.
static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `why` on stderr as `who: why`, the first time in this process only (a matrix of live runs
/// says that the PMU is not there once, not once per run).
pub fn say_once(who: &str, why: &str) {
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        eprintln!("{who}: {why}");
    }
}

/// `f` with the hardware TLB counters open around it (on this process and the tasks it creates
/// meanwhile): its result and each event's count over it, by name; where the counters cannot
/// be opened, no counts and the reason said once on stderr ([`say_once`], prefixed by `who`).
pub fn around<T>(who: &str, f: impl FnOnce() -> T) -> (T, Vec<(String, u64)>) {
    match open_self() {
        Ok(c) => {
            let before = c.read();
            let out = f();
            let counts = c.read().into_iter().zip(before).map(|((n, v), (_, b))| (n, v.saturating_sub(b))).collect();
            (out, counts)
        }
        Err(why) => {
            say_once(who, &why);
            (f(), Vec::new())
        }
    }
}

/// The model's count that a hardware event is set beside: the generic dTLB misses are misses
/// of the last-level data TLB, a walk started, on the cores perf maps them for
/// (arch/x86/events/amd/core.c, `amd_hw_cache_event_ids_f17h`: 0xf045, L2 DTLB misses;
/// arch/x86/events/intel/core.c, `skl_hw_cache_event_ids`, `glc_hw_cache_event_ids`:
/// DTLB_*_MISSES.WALK_COMPLETED): the model's L2 misses; the walk events: its walks. `None`:
/// the iTLB (the model has no instruction TLB) and walk cycles (the model prices them, it does
/// not count them).
pub fn model_counterpart(event: &str) -> Option<ModelCount> {
    match event {
        "dTLB-load-misses" | "dTLB-store-misses" => Some(ModelCount::L2Misses),
        "iTLB-load-misses" | "DTLB_LOAD_MISSES.WALK_ACTIVE" => None,
        _ => Some(ModelCount::Walks),
    }
}

/// A count of the TLB model's (`uapi::result::AccessCounts`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelCount {
    L2Misses,
    Walks,
}

impl Counters {
    /// Each event's count so far, by name.
    pub fn read(&self) -> Vec<(String, u64)> {
        self.events
            .iter()
            .map(|(n, fd)| {
                let mut v = 0u64;
                // SAFETY: reads 8 bytes (read_format 0: the value) into v.
                let r = unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
                (n.clone(), if r == 8 { v } else { 0 })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generic_configs_are_perfs() {
        // perf list: dTLB-load-misses is hw_cache 0x10003, dTLB-store-misses 0x10103,
        // iTLB-load-misses 0x10004 (DTLB 3 / ITLB 4, op read 0 / write 1, result miss 1).
        assert_eq!(GENERIC.map(|e| e.config), [0x10003, 0x10103, 0x10004]);
    }

    #[test]
    fn event_descriptions_parse_to_raw_configs() {
        assert_eq!(parse_event_desc("event=0x08,umask=0x0e"), Ok(0x0e08));
        assert_eq!(parse_event_desc("event=0x12,umask=0x10,cmask=1"), Ok(0x0100_1012));
        assert_eq!(parse_event_desc("event=0x45,umask=0xf0"), Ok(0xf045));
        // AMD's 12-bit codes: bits 8-11 of the event in config bits 32-35.
        assert_eq!(parse_event_desc("event=0x1c0,umask=0x1"), Ok(0x1_0000_01c0));
        assert_eq!(parse_event_desc("event=0xc5,edge,inv"), Ok(0xc5 | 1 << 18 | 1 << 23));
        assert!(parse_event_desc("event=0x08,mask=1").unwrap_err().contains("valid are event"));
        assert!(parse_event_desc("umask=0x100").unwrap_err().contains("8 bits"));
        assert!(parse_event_desc("event=zz").unwrap_err().contains("not a number"));
    }

    #[test]
    fn perf_json_entries_parse() {
        // The shape of tools/perf/pmu-events/arch/x86/sapphirerapids/virtual-memory.json.
        let json = r#"[
            {"BriefDescription": "Cycles when at least one PMH is busy with a page walk for a demand load.",
             "CounterMask": "1", "EventCode": "0x12", "EventName": "DTLB_LOAD_MISSES.WALK_ACTIVE", "UMask": "0x10"},
            {"BriefDescription": "Load miss in all TLB levels causes a page walk that completes. (All page sizes)",
             "EventCode": "0x12", "EventName": "DTLB_LOAD_MISSES.WALK_COMPLETED", "UMask": "0xe"}
        ]"#;
        assert_eq!(parse_pmu_json(json, "DTLB_LOAD_MISSES.WALK_COMPLETED"), Ok((PERF_TYPE_RAW, 0x0e12)));
        assert_eq!(parse_pmu_json(json, "dtlb_load_misses.walk_active"), Ok((PERF_TYPE_RAW, 0x0100_1012)));
        assert!(parse_pmu_json(json, "ITLB_MISSES.WALK_COMPLETED").unwrap_err().contains("no event"));
        assert!(parse_pmu_json("{}", "x").unwrap_err().contains("not a list"));
    }

    #[test]
    fn hardware_events_meet_the_models_counts() {
        assert_eq!(model_counterpart("dTLB-load-misses"), Some(ModelCount::L2Misses));
        assert_eq!(model_counterpart("dTLB-store-misses"), Some(ModelCount::L2Misses));
        assert_eq!(model_counterpart("DTLB_LOAD_MISSES.WALK_COMPLETED"), Some(ModelCount::Walks));
        assert_eq!(model_counterpart("ls_l1_d_tlb_miss.all_l2_miss"), Some(ModelCount::Walks));
        assert_eq!(model_counterpart("iTLB-load-misses"), None);
        assert_eq!(model_counterpart("DTLB_LOAD_MISSES.WALK_ACTIVE"), None);
    }

    #[test]
    fn walk_events_by_core() {
        assert_eq!(walk_events("GenuineIntel", 6, 0x55)[0].1, "event=0x08,umask=0x0e");
        assert_eq!(walk_events("GenuineIntel", 6, 0xcf)[0].1, "event=0x12,umask=0x0e");
        assert_eq!(walk_events("AuthenticAMD", 0x19, 0x61)[0].1, "event=0x45,umask=0xf0");
        assert_eq!(walk_events("AuthenticAMD", 0x19, 0x21)[0].1, "event=0x46,umask=0x03");
        assert!(walk_events("AuthenticAMD", 0x17, 0x31).is_empty());
    }

    /// Where no core PMU is exposed (no /sys/bus/event_source/devices/cpu, as in this
    /// project's VMs), opening the counters fails with the one sentence; where one is, they
    /// open and count.
    #[test]
    fn no_pmu_is_said_once_or_counters_count() {
        let core_pmu = ["cpu", "cpu_core", "cpu_atom"].iter().any(|d| std::path::Path::new("/sys/bus/event_source/devices").join(d).exists());
        match open_self() {
            Err(why) if !core_pmu => {
                assert!(why.starts_with(NO_PMU), "{why}");
                // The kernel's answer on a machine without a PMU driver for hardware events.
                let e = open_one(GENERIC[0].type_, GENERIC[0].config).unwrap_err();
                assert!(matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EOPNOTSUPP)), "{e}");
            }
            Err(why) => panic!("a core PMU is exposed but the counters did not open: {why}"),
            Ok(c) => {
                assert!(core_pmu, "counters opened without a core PMU in sysfs");
                let v: Vec<u8> = vec![1; 64 << 20];
                assert!(v.iter().map(|&b| b as u64).sum::<u64>() > 0);
                assert_eq!(c.read()[0].0, "dTLB-load-misses");
            }
        }
    }
}
