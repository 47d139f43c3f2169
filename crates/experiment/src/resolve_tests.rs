//! The resolution's results and error messages: each names the flag or file, the value, and
//! what is valid.

use super::*;

fn flags(mem: &str) -> MachineFlags<'_> {
    MachineFlags { mem, mmap_base: None, brk_start: None, hz: 250, memory_max: None, swap: None }
}

fn err(r: Result<impl std::fmt::Debug>) -> String {
    format!("{:#}", r.expect_err("an error"))
}

/// A file in a directory of its own under the temporary directory, removed with it.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
        let dir = std::env::temp_dir().join(format!("thplab-resolve-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        TempFile(p)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.0.parent().unwrap());
    }
}

#[test]
fn the_smallest_memory_is_the_watermark_and_a_block() {
    let m = sim::MachineConfig::default();
    assert_eq!(m.min_free_kbytes, 67584);
    assert_eq!(min_mem_bytes(&m), 70 << 20, "66 MiB of min watermark and 4 MiB");
}

#[test]
fn the_machine_flags_convert_once_into_the_machine() {
    let m = machine(&MachineFlags { mem: "512M", mmap_base: Some("0x7f0000000000"), brk_start: Some("0x560000000000"), hz: 1000, memory_max: None, swap: None }).unwrap();
    let d = sim::MachineConfig::default();
    assert_eq!((m.mem_bytes, m.mmap_base, m.brk_start, m.hz), (512 << 20, 0x7f00_0000_0000, 0x5600_0000_0000, 1000));
    assert_eq!(m.min_free_kbytes, d.min_free_kbytes, "the rest is the default machine");
    let m = machine(&flags("70M")).unwrap();
    assert_eq!((m.mem_bytes, m.mmap_base, m.brk_start, m.hz), (70 << 20, d.mmap_base, d.brk_start, 250));
}

#[test]
fn memory_out_of_range_says_the_range_and_why() {
    let want = |m: &str| {
        format!(
            "--mem {m}: give a size from 70M to 4T, such as 4G (below 70M, the min watermark of 66 MiB (vm.min_free_kbytes 67584), \
             which no allocation may take, leaves less than 4 MiB for the workload)"
        )
    };
    for m in ["69M", "5T", "lots"] {
        assert_eq!(err(machine(&flags(m))), want(m));
    }
}

#[test]
fn addresses_say_which_of_hex_aligned_and_user_they_are_not() {
    let base = |a: &'static str| err(machine(&MachineFlags { mmap_base: Some(a), ..flags("24G") }));
    assert_eq!(base("7dfffffc5000"), "--mmap-base 7dfffffc5000: give a hex address such as 0x7dfffffc5000");
    assert_eq!(base("0x7dfffffc5001"), "--mmap-base 0x7dfffffc5001: not page-aligned (a multiple of 0x1000), such as 0x7dfffffc5000");
    assert_eq!(base("0x0"), "--mmap-base 0x0: outside the user address space (0x1000 to 0x7ffffffff000)");
    let brk = err(machine(&MachineFlags { brk_start: Some("0x900000000000"), ..flags("24G") }));
    assert_eq!(brk, "--brk-start 0x900000000000: outside the user address space (0x1000 to 0x7ffffffff000)");
    let brk = err(machine(&MachineFlags { brk_start: Some("0x555555579"), ..flags("24G") }));
    assert_eq!(brk, "--brk-start 0x555555579: not page-aligned (a multiple of 0x1000), such as 0x555555579000");
}

#[test]
fn scatter_is_a_number_from_0_to_1() {
    assert_eq!(scatter_arg("0.25"), Ok(0.25));
    assert_eq!(scatter_arg("1"), Ok(1.0));
    assert_eq!(scatter_arg("1.5"), Err("'1.5' is not a number from 0 to 1".to_string()));
    assert_eq!(scatter_arg("x"), Err("'x' is not a number from 0 to 1".to_string()));
}

fn with_tlb(cpu: &str, paging: &str, scatter: f64) -> MachineProfile {
    MachineProfile::parse("p.toml", &format!("[tlb]\ncpu = \"{cpu}\"\npaging = \"{paging}\"\norder0_scatter = {scatter}\n")).unwrap()
}

#[test]
fn the_tlb_is_the_flags_then_the_profile_then_zen4_native() {
    let (cpu, paging) = tlb_choice(None, None, None).unwrap();
    assert_eq!((cpu.name, paging), ("zen4", tlb::Paging::Native));
    let arm = with_tlb("neoverse-n1", "nested-2m", 0.5);
    let (cpu, paging) = tlb_choice(None, None, Some(&arm)).unwrap();
    assert_eq!((cpu.name, paging), ("neoverse-n1", tlb::Paging::parse("nested-2m").unwrap()));
    let (cpu, paging) = tlb_choice(Some("golden-cove"), Some("native"), Some(&arm)).unwrap();
    assert_eq!((cpu.name, paging), ("golden-cove", tlb::Paging::Native));
    assert_eq!(scatter_choice(None, Some(&arm)), 0.5);
    assert_eq!(scatter_choice(Some(0.125), Some(&arm)), 0.125);
    assert_eq!(scatter_choice(None, None), 0.0);
}

#[test]
fn a_profiles_bad_tlb_names_its_value_and_the_valid_ones() {
    let names = tlb::presets::names().join(", ");
    assert_eq!(err(tlb_choice(None, None, Some(&with_tlb("pentium", "native", 0.0)))), format!("the profile's [tlb] cpu = 'pentium' is not a preset (valid: {names})"));
    assert_eq!(
        err(tlb_choice(None, None, Some(&with_tlb("zen4", "nested-3m", 0.0)))),
        "the profile's [tlb] paging = 'nested-3m' is not native, nested-4k, nested-2m or nested-1g"
    );
    assert_eq!(err(tlb_choice(Some("pentium"), None, None)), format!("--cpu pentium is not a preset (valid: {names})"));
}

#[test]
fn the_profile_is_converted_once_host_only_where_priced() {
    let builtin = MachineProfile::builtin();
    assert!(builtin.fault.is_some() && builtin.host.is_some() && builtin.tlb.is_some(), "the builtin profile has [fault], [host] and [tlb]");
    let f = ProfileFlags { sample_ms: Some(50), tlb: true, ..Default::default() };
    let p = profile(&f, Some(&builtin)).unwrap();
    assert_eq!(p.costs, builtin.fault);
    assert_eq!(p.pin, builtin.pin);
    assert_eq!(p.host.as_ref().map(|(h, free)| (h, free.is_none())), Some((builtin.host.as_ref().unwrap(), true)), "the profile's own free lists");
    assert_eq!(p.tlb.map(|(c, g)| (c.name, g)), Some(("zen4", tlb::Paging::parse("nested-4k").unwrap())));
    assert_eq!((p.sample_ms, p.order0_scatter), (Some(50), builtin.tlb.as_ref().unwrap().order0_scatter));
    // A [host] without [fault] is not priced, so not laid out either.
    let unpriced = MachineProfile { fault: None, ..builtin.clone() };
    assert!(profile(&f, Some(&unpriced)).unwrap().host.is_none());
    // No TLB model asked for: the profile's [tlb] is not read, even where it is bad.
    let bad = with_tlb("pentium", "native", 0.0);
    assert!(profile(&ProfileFlags::default(), Some(&bad)).unwrap().tlb.is_none());
    assert!(profile(&ProfileFlags { tlb: true, ..Default::default() }, Some(&bad)).is_err());
    let none = profile(&ProfileFlags::default(), None).unwrap();
    assert!(none.costs.is_none() && none.host.is_none() && none.pin.is_none() && none.tlb.is_none() && none.sample_ms.is_none());
}

#[test]
fn settings_apply_cmdline_then_files_then_sets() {
    let f = TempFile::new("s.conf", "enabled=madvise\nhugepages-64kB/enabled=always\n");
    let s = settings(Some("transparent_hugepage=always"), std::slice::from_ref(&f.0), &["hugepages-64kB/enabled=never".to_string()]).unwrap();
    let knobs = s.knob_map();
    assert_eq!(knobs["enabled"], "madvise", "the file after the command line");
    assert_eq!(knobs["hugepages-64kB/enabled"], "never", "--set after the file");
    let e = err(settings(None, &[], &["enabled=sometimes".to_string()]));
    assert!(e.starts_with("--set enabled=sometimes: "), "{e}");
}

#[test]
fn settings_files_that_cannot_be_read_say_which_and_why() {
    let empty = TempFile::new("empty.conf", " \n\n");
    let name = empty.0.display().to_string();
    assert_eq!(
        err(settings(None, std::slice::from_ref(&empty.0), &[])),
        format!("settings file {name} is empty: no PATH=VALUE line (such as enabled=always); the boot defaults need no --settings")
    );
    let json = TempFile::new("s.json", "{\"enabled\": \"always\", \"khugepaged/pages_to_scan\": 4096, \"khugepaged/defrag\": true}");
    let s = settings(None, std::slice::from_ref(&json.0), &[]).unwrap();
    let knobs = s.knob_map();
    assert_eq!((knobs["enabled"].as_str(), knobs["khugepaged/pages_to_scan"].as_str(), knobs["khugepaged/defrag"].as_str()), ("always", "4096", "1"));
    let list = TempFile::new("l.json", "{\"enabled\": [\"always\"]}");
    let name = list.0.display().to_string();
    assert_eq!(err(settings(None, std::slice::from_ref(&list.0), &[])), format!("settings file {name}: \"enabled\" has [\"always\"]; give each knob a string or a number"));
    let nl = TempFile::new("n.json", "{\"enabled\": \"always\\nnever\"}");
    let name = nl.0.display().to_string();
    assert_eq!(err(settings(None, std::slice::from_ref(&nl.0), &[])), format!("settings file {name}: \"enabled\" has a value with a newline"));
}

#[test]
fn the_matrix_gives_back_a_workload_name_it_took() {
    let s = |x: &str| Some(x.to_string());
    assert_eq!(workload_and_matrix(None, s("seed-anon-1g")).unwrap(), (s("seed-anon-1g"), s("anon")));
    assert_eq!(workload_and_matrix(s("w"), s("shmem:top")).unwrap(), (s("w"), s("shmem:top")));
    assert_eq!(workload_and_matrix(None, s("anon")).unwrap(), (None, s("anon")));
    assert!(workload_and_matrix(s("w"), s("anon:2M")).is_err());
    assert_eq!(workload_and_matrix(s("w"), None).unwrap(), (s("w"), None));
}

#[test]
fn matrix_runs_take_set_on_top_and_refuse_other_sources() {
    assert_eq!(
        err(matrix_runs("anon", &[], true)),
        "--matrix runs its own settings; leave out --settings and --cmdline (--set applies on top of each)"
    );
    let (title, runs) = matrix_runs("anon", &[], false).unwrap();
    assert_eq!((title.as_str(), runs.len()), ("the anon matrix", 11), "4K, 16K ... 1024K, all, PMD, madvise");
    let set = vec!["khugepaged/max_ptes_none=0".to_string()];
    let (title, runs) = matrix_runs("anon:4K,64K,PMD", &set, false).unwrap();
    assert_eq!(title, "3 of 11 settings of the anon matrix");
    let labels: Vec<&str> = runs.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(labels, ["4K only + khugepaged/max_ptes_none=0", "64K alone + khugepaged/max_ptes_none=0", "PMD always + khugepaged/max_ptes_none=0"]);
    assert!(runs.iter().all(|(_, s)| s.khugepaged.max_ptes_none == 0));
}

#[test]
fn page_size_takes_4k_and_refuses_the_arm64_granules_with_their_geometry() {
    assert_eq!(page_size("4K").unwrap(), mm_types::PageGeometry::X86_4K);
    assert_eq!(page_size("4096").unwrap(), mm_types::PageGeometry::X86_4K);
    let e = err(page_size("8K"));
    assert!(e.contains("--page-size 8K: give 4K") && e.contains("16K or 64K"), "{e}");
    let e = err(page_size("16k"));
    assert!(e.contains("--page-size 16K: model-only") && e.contains("PMD 32M (order 11)") && e.contains("hugepages-32kB .. hugepages-32768kB"), "{e}");
    let e = err(page_size("64K"));
    assert!(e.contains("3 levels of 8192-entry tables") && e.contains("docs/page-sizes.md"), "{e}");
}
