//! `torture`: replay one seed verbosely, or run a range of seeds.
//!
//! Usage: `torture --seed N [--steps S] [--verbose]`, `torture --seeds A..B [--steps S]`, or
//! `torture --emit-workload SEED` (a random workload, settings as `#set` comments).

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let steps: u32 = get("--steps").and_then(|s| s.parse().ok()).unwrap_or(300);
    let verbose = args.iter().any(|a| a == "--verbose");
    if let Some(s) = get("--emit-workload") {
        // Print a random workload and, as comments, the settings to run it under.
        let Ok(seed) = s.parse::<u64>() else { return usage(&format!("--emit-workload takes a number, not '{s}'")) };
        let (text, settings) = torture::workload_gen::random_workload(seed);
        print!("{text}");
        for line in settings.to_string().lines() {
            println!("#set {line}");
        }
        return ExitCode::SUCCESS;
    }
    let seeds: std::ops::Range<u64> = if let Some(s) = get("--seed") {
        match s.parse::<u64>() {
            Ok(n) => n..n + 1,
            Err(_) => return usage(&format!("--seed takes a number, not '{s}'")),
        }
    } else if let Some(r) = get("--seeds") {
        match r.split_once("..").and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?))) {
            Some((a, b)) => a..b,
            None => return usage(&format!("--seeds takes A..B, not '{r}'")),
        }
    } else {
        return usage("give --seed N or --seeds A..B");
    };
    let mut failed = 0;
    let total = seeds.end - seeds.start;
    for seed in seeds {
        let mut print = |l: &str| println!("{l}");
        let log: Option<&mut dyn FnMut(&str)> = if verbose { Some(&mut print) } else { None };
        if let Err(f) = torture::run_seed(seed, steps, log) {
            eprintln!("{f}");
            failed += 1;
        }
    }
    println!("{} passed, {failed} failed", total - failed);
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("torture: {msg}\nusage: torture --seed N [--steps S] [--verbose] | torture --seeds A..B [--steps S]");
    ExitCode::from(2)
}
