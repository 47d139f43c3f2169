//! The lite torture run of CI, and the canary that proves the checker can fail.

#[test]
fn lite_swarm() {
    // 300 seeds × 200 steps in CI (about 40 s of CPU), spread over every CPU (each seed is its
    // own machine: the seeds and the checks are the same as one after another); RUN_SLOW_TESTS=1
    // runs 2000 seeds.
    let n: u64 = if std::env::var_os("RUN_SLOW_TESTS").is_some() { 2000 } else { 300 };
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get()) as u64;
    let mut failures: Vec<String> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..cpus)
            .map(|w| s.spawn(move || (w..n).step_by(cpus as usize).filter_map(|seed| torture::run_seed(seed, 200, None).err().map(|f| f.to_string())).collect::<Vec<_>>()))
            .collect();
        workers.into_iter().flat_map(|h| h.join().expect("a torture worker panicked")).collect()
    });
    failures.sort();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn canary_a_broken_mapcount_is_caught() {
    // The checker must be able to fail: corrupt one mapcount and expect the walk to say where.
    let params = mm::BootParams { mem_bytes: 32 << 20, min_free_kbytes: 0, mmap_base: 0x7dff_fffc_5000, brk_start: 0x5555_5557_9000, ..mm::BootParams::default() };
    let mut k = mm::Kernel::boot(&params, &thp_abi::ThpSettings::default());
    let a = k.do_mmap(1 << 20, mm::mmap::prot_to_vm(true, true, false), mm::mmap::MmapPlacement::Kernel).unwrap();
    assert_eq!(k.access(a, true), mm::Access::Fault);
    k.check_invariants().unwrap();
    k.corrupt_mapcount_for_canary(a);
    let e = k.check_invariants().unwrap_err();
    assert!(e.contains("mapcount"), "{e}");
    // The incremental check of `sim --check` sees it from the touched range alone, and not from
    // a range elsewhere.
    let e = k.check_invariants_in(&[(a, a + 4096)]).unwrap_err();
    assert!(e.starts_with("page 0x") && e.ends_with(": 1 PTEs here map it, mapcount says 2"), "{e}");
    k.check_invariants_in(&[(a + (64 << 20), a + (65 << 20))]).unwrap();
}

