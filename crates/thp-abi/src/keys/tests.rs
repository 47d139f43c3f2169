//! Tests of the typed keys: kernel spellings, order and JSON equal to string keys'.

use std::collections::BTreeMap;

use super::*;
use crate::ThpSettings;

/// Every known name round-trips, and a name outside the set is kept as read.
#[test]
fn names_are_the_kernels_and_others_are_kept() {
    for e in VmEvent::ALL {
        assert_eq!(VmStatKey::from(e.name()).known(), Some(*e));
    }
    for s in MthpStat::ALL {
        assert_eq!(MthpStatKey::from(s.name()).known(), Some(*s));
    }
    assert_eq!(FolioSize::of(Order(0)).as_str(), "4kB");
    assert_eq!(FolioSize::of(Order(4)).as_str(), "64kB");
    assert_eq!(FolioSize::of(Order(9)).as_str(), "2048kB");
    assert_eq!(FolioSize::of(Order(18)).as_str(), "1048576kB");
    assert_eq!(SizeDir::of(Order(1)).as_str(), "hugepages-8kB");
    assert_eq!(SizeDir::from("hugepages-2048kB").order(), Some(Order(9)));
    assert_eq!(FolioSize::from("64kB").order(), Some(Order(4)));
    // Another build's vmstat line and a size no order has are kept as read, unknown to the set.
    let other = VmStatKey::from("thp_migration_success");
    assert_eq!((other.known(), other.as_str()), (None, "thp_migration_success"));
    assert_eq!(FolioSize::from("12kB").order(), None);
    assert_eq!(KnobPath::from("khugepaged/max_ptes_none").known().map(|k| k.name()), Some("khugepaged/max_ptes_none"));
    assert_eq!(KnobPath::from("thp_exec_enabled").known(), None);
    // Formatted as the string, padding included (text tables align on it).
    assert_eq!(format!("[{:<6}|{:>7}]", FolioSize::of(Order(0)), SizeDir::of(Order(1)).as_str()), "[4kB   |hugepages-8kB]");
    assert_eq!(format!("[{:>6}]", FolioSize::of(Order(4))), "[  64kB]");
}

/// The table of knob paths is exactly the paths `ThpSettings` writes.
#[test]
fn knob_table_is_the_settings_knobs() {
    let mut table: Vec<&str> = KNOB_PATHS.to_vec();
    table.sort_unstable();
    let mut paths = ThpSettings::valid_paths();
    paths.sort();
    assert_eq!(table, paths);
}

/// A map keyed by vmstat names orders, looks up and serialises as a map keyed by the strings.
/// Sizes order by the order they name (`12kB`, which no order has, last) and look up by key; serialised with `serialize_by_name` their JSON is a string-keyed map's
/// (`1024kB < 128kB < 16kB < 2048kB < 4kB < 64kB`).
#[test]
fn maps_keep_the_order_and_json_of_string_keys() {
    #[derive(Serialize)]
    struct Folios {
        #[serde(serialize_with = "serialize_by_name")]
        folios: BTreeMap<FolioSize, u64>,
    }
    let names = ["4kB", "64kB", "2048kB", "16kB", "128kB", "1024kB", "12kB"];
    let typed: BTreeMap<FolioSize, u64> = names.iter().enumerate().map(|(i, n)| (FolioSize::from(*n), i as u64)).collect();
    let strings: BTreeMap<String, u64> = names.iter().enumerate().map(|(i, n)| (n.to_string(), i as u64)).collect();
    assert_eq!(typed.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["4kB", "16kB", "64kB", "128kB", "1024kB", "2048kB", "12kB"]);
    let by_name = serde_json::to_string(&Folios { folios: typed.clone() }).unwrap();
    assert_eq!(by_name, format!(r#"{{"folios":{}}}"#, serde_json::to_string(&strings).unwrap()));
    assert_eq!(by_name, r#"{"folios":{"1024kB":5,"128kB":4,"12kB":6,"16kB":3,"2048kB":2,"4kB":0,"64kB":1}}"#);
    assert_eq!(typed.get(&FolioSize::from("64kB")), Some(&1));
    assert_eq!(typed[&FolioSize::of(Order(9))], 2);
    let back: BTreeMap<FolioSize, u64> = serde_json::from_str(&serde_json::to_string(&strings).unwrap()).unwrap();
    assert_eq!(back, typed);
    assert_eq!(back.keys().filter(|k| k.known().is_none()).map(|k| k.as_str()).collect::<Vec<_>>(), ["12kB"]);
    assert_eq!(FolioSize::from("2048kB").kb(), Some(2048));
    let dirs: Vec<SizeDir> = ["hugepages-2048kB", "hugepages-16kB", "hugepages-128kB"].into_iter().map(SizeDir::from).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
    assert_eq!(dirs.iter().map(|d| d.as_str()).collect::<Vec<_>>(), ["hugepages-16kB", "hugepages-128kB", "hugepages-2048kB"]);
    let vm: BTreeMap<VmStatKey, i64> = [(VmStatKey::from(VmEvent::ThpSplitPmd), 1), ("thp_fault_alloc".into(), 2), ("thp_migration_fail".into(), 3)].into();
    assert_eq!(serde_json::to_string(&vm).unwrap(), r#"{"thp_fault_alloc":2,"thp_migration_fail":3,"thp_split_pmd":1}"#);
    assert_eq!(vm.get("thp_fault_alloc"), Some(&2));
    assert_eq!(vm.get(&"thp_split_pmd".to_string()), Some(&1), "a String borrows too");
}

/// The /proc/meminfo fields a result keeps and the model's fallback reasons are keys too: each
/// member round-trips its name, another name is kept as read, and maps print in string order
/// and look up by name.
#[test]
fn meminfo_fields_and_fallback_reasons_are_keys() {
    for m in Meminfo::ALL {
        assert_eq!(MeminfoKey::from(m.name()).known(), Some(m));
    }
    for r in FallbackReason::ALL {
        assert_eq!(FallbackKey::from(r.name()).known(), Some(r));
    }
    assert_eq!(MeminfoKey::from(Meminfo::ShmemHugePages).as_str(), "ShmemHugePages");
    assert_eq!(FallbackKey::from(FallbackReason::NotMadvised).as_str(), "not_madvised");
    assert_eq!(MeminfoKey::from("SwapCached").known(), None);
    assert_eq!(FallbackKey::from("compaction_failed").known(), None);
    let m: BTreeMap<MeminfoKey, i64> = [(Meminfo::ShmemPmdMapped.into(), 3), (Meminfo::Shmem.into(), 1), ("AnonHugePages".into(), 2)].into();
    assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"AnonHugePages":2,"Shmem":1,"ShmemPmdMapped":3}"#);
    assert_eq!(m["Shmem"], 1);
    let f: BTreeMap<FallbackKey, u64> = [(FallbackReason::VmaRange.into(), 16), (FallbackReason::AllocFailed.into(), 1)].into();
    assert_eq!(serde_json::to_string(&f).unwrap(), r#"{"alloc_failed":1,"vma_range":16}"#);
    assert_eq!(f["vma_range"], 16);
}
