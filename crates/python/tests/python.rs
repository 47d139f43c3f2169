//! The Python package, run by python3: the extension module this crate builds (the cdylib
//! cargo wrote beside this test, target/release/deps/libthplab_native.so, so nothing is
//! compiled again) and python/thplab, laid out as `pip install .` lays them (thplab/_native.abi3.so
//! beside thplab/*.py) in a temporary directory on PYTHONPATH. tests/api_check.py checks the API
//! (values derived by hand there); the notebook examples/notebooks/thplab-seed.ipynb is executed
//! headless with nbclient. Each test skips with its reason where python3, or a Python package it
//! needs (pandas, matplotlib, nbclient, ipykernel, dask), is missing: .ci/run installs them.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The extension module cargo built with this test: beside its binary (target/release/deps),
/// where the library's cdylib is written (`cargo build` also copies it one level up).
fn native_module() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().join("libthplab_native.so")
}

/// python3 and whether it can import `modules`, or why the test skips.
fn python_with(modules: &[&str]) -> Result<(), String> {
    let probe = format!("import {}", if modules.is_empty() { "sys".to_string() } else { modules.join(", ") });
    match Command::new("python3").args(["-c", &probe]).output() {
        Err(e) => Err(format!("no python3 ({e})")),
        Ok(o) if !o.status.success() => Err(format!("python3 cannot import {} (.ci/run installs it: pip install {})", modules.join(", "), modules.join(" "))),
        Ok(_) => Ok(()),
    }
}

/// The package laid out in a temporary directory: thplab/*.py and thplab/_native.abi3.so.
fn package() -> tempfile::TempDir {
    let so = native_module();
    assert!(so.exists(), "{} is missing: cargo builds it with this crate (crate-type cdylib)", so.display());
    let dir = tempfile::tempdir().unwrap();
    let pkg = dir.path().join("thplab");
    std::fs::create_dir(&pkg).unwrap();
    for e in std::fs::read_dir(repo().join("python/thplab")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "py") {
            std::fs::copy(&p, pkg.join(p.file_name().unwrap())).unwrap();
        }
    }
    std::fs::copy(&so, pkg.join("_native.abi3.so")).unwrap();
    dir
}

/// Run `python3 ARGS` with the package on PYTHONPATH in `cwd`; its stdout, or a panic with its
/// output.
fn run_python(pkg: &Path, cwd: &Path, args: &[&str]) -> String {
    let out = Command::new("python3").args(args).current_dir(cwd).env("PYTHONPATH", pkg).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "python3 {args:?} failed ({}):\n{stdout}\n{stderr}", out.status);
    eprint!("{stdout}");
    stdout.into_owned()
}

fn api(part: &str) -> Option<String> {
    if let Err(why) = python_with(&[]) {
        eprintln!("skipped: {why}");
        return None;
    }
    let pkg = package();
    let script = repo().join("crates/python/tests/api_check.py");
    Some(run_python(pkg.path(), pkg.path(), &[script.to_str().unwrap(), part]))
}

/// `thplab.sim("seed-anon-1g", set=["enabled=always"])["process"]["minflt"] == 512`, the other
/// settings, the builder's error with its line, the examples.
#[test]
fn the_package_runs_the_model_and_its_builder_names_the_line() {
    let Some(out) = api("model") else { return };
    assert!(out.contains("ok model: seed-anon-1g minflt 512 / 16384 / 262144"), "{out}");
    assert!(out.contains("ok builder: bad:3: touch takes 'read' or 'write', not 'wrtie' (written at "), "{out}");
    assert!(out.contains("ok errors: --set enabled=sometimes: invalid value 'sometimes' for 'enabled'; valid values are: always, madvise, never"), "{out}");
}

/// The package's results are `thplab sim --json`'s: equal, as JSON, to the golden outputs of
/// crates/thplab/tests/it/golden.rs (a workload, a recording, a profile with samples).
#[test]
fn results_equal_the_golden_json_of_thplab_sim() {
    if let Err(why) = python_with(&[]) {
        eprintln!("skipped: {why}");
        return;
    }
    let pkg = package();
    let golden = repo().join("crates/thplab/tests/it/data/golden");
    let out = pkg.path().join("golden");
    std::fs::create_dir(&out).unwrap();
    for name in ["sim-issue-program-always", "sim-rec-gzip-64k", "sim-fork-bgsave-profile-sample"] {
        let bytes = std::fs::read(golden.join(format!("{name}.json.zst"))).unwrap();
        std::fs::write(out.join(format!("{name}.json")), zstd::decode_all(&bytes[..]).unwrap()).unwrap();
    }
    let script = repo().join("crates/python/tests/api_check.py");
    let stdout = run_python(pkg.path(), pkg.path(), &[script.to_str().unwrap(), "golden", out.to_str().unwrap(), golden.to_str().unwrap()]);
    assert!(stdout.contains("ok golden: 3 results equal thplab sim --json's"), "{stdout}");
}

/// The census, TLB and timeline DataFrames (pandas).
#[test]
fn dataframes_of_census_tlb_and_timeline() {
    if let Err(why) = python_with(&["pandas"]) {
        eprintln!("skipped: {why}");
        return;
    }
    let Some(out) = api("frames") else { return };
    assert!(out.contains("ok frames: census ['size', 'size_kb', 'folios', 'pmd_mapped', 'pte_mapped', 'partially_mapped', 'bytes']"), "{out}");
}

/// A study here, resumed from its journal, and on a Dask client (in-process LocalCluster): the
/// same Parquet bytes.
#[test]
fn a_sweep_here_and_on_a_dask_client_give_the_same_file() {
    let Some(out) = api("sweeps") else { return };
    assert!(out.contains("ok sweep: 3 points, resumed 3"), "{out}");
    if python_with(&["dask.distributed"]).is_ok() {
        assert!(out.contains("ok dask: 3 points on a Dask client, the same"), "{out}");
    }
}

/// `thplab.live` (root on a kernel with the THP sysfs tree): 8 MiB with MADV_HUGEPAGE, written,
/// through the settings guard.
#[test]
fn live_runs_through_the_settings_guard() {
    let Some(out) = api("live") else { return };
    assert!(out.contains("ok live: ") || out.contains("skip live: "), "{out}");
}

/// The example notebook, executed headless (nbclient and ipykernel; pandas and matplotlib for
/// its frames and plots): every cell runs without an error.
#[test]
fn the_example_notebook_executes() {
    if let Err(why) = python_with(&["pandas", "matplotlib", "nbclient", "nbformat", "ipykernel"]) {
        eprintln!("skipped: {why}");
        return;
    }
    let pkg = package();
    let nb = repo().join("examples/notebooks/thplab-seed.ipynb");
    let code = format!(
        "import nbformat, nbclient\nnb = nbformat.read({nb:?}, as_version=4)\nnbclient.NotebookClient(nb, timeout=300, kernel_name='python3', resources={{'metadata': {{'path': {dir:?}}}}}).execute()\n\
         outs = [o for c in nb.cells if c.cell_type == 'code' for o in c.get('outputs', [])]\n\
         print('cells', sum(c.cell_type == 'code' for c in nb.cells), 'images', sum('image/png' in o.get('data', {{}}) for o in outs))\n\
         print(''.join(o.get('text', '') for o in outs if o.get('output_type') == 'stream'))",
        nb = nb.to_str().unwrap(),
        dir = pkg.path().to_str().unwrap()
    );
    let out = run_python(pkg.path(), pkg.path(), &["-c", &code]);
    assert!(out.contains("seed minflt: 4K 262144, 64K 16384, PMD 512"), "{out}");
    let images: usize = out.split("images ").nth(1).and_then(|s| s.split_whitespace().next()).and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(images >= 2, "the notebook drew {images} plots: {out}");
}
