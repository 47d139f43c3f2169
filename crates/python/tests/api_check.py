"""The package's API, checked by crates/python/tests/python.rs (run as `python3 api_check.py
PART`, with the package on PYTHONPATH). Each part prints `ok PART: ...` lines the Rust test
reads, or `skip PART: why`; a failed check raises and exits non-zero. Values are derived by
hand: 1 GiB written page by page takes 262144 faults with 4 KiB pages, 16384 with 64 KiB mTHP,
512 with PMD THP (1 GiB / 2 MiB), as the live kernel counts them (examples/seed-anon-1g.thpw).
"""

import json
import os
import sys
import tempfile

import thplab


def model():
    r = thplab.sim("seed-anon-1g", set=["enabled=always"])
    assert r["process"]["minflt"] == 512, r["process"]
    assert r["census"]["sizes"]["2048kB"]["pmd_mapped"] == 512
    assert thplab.sim("seed-anon-1g", set="hugepages-64kB/enabled=always")["process"]["minflt"] == 16384
    assert thplab.sim("seed-anon-1g", settings={"enabled": "never"})["process"]["minflt"] == 262144
    # A settings file, as --settings reads it.
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("enabled=always\n")
    assert thplab.sim("seed-anon-1g", settings=f.name)["process"]["minflt"] == 512
    os.unlink(f.name)
    print("ok model: seed-anon-1g minflt 512 / 16384 / 262144")
    # The builder: 4 MiB with MADV_HUGEPAGE under enabled=madvise, written: two PMD faults.
    w = thplab.Workload("built")
    w.mmap("buf", "4M")
    w.madvise("buf", "hugepage")
    w.touch("buf", "write")
    assert w.text() == "thplab-workload 1\nmmap buf 4M\nmadvise buf hugepage\ntouch buf write\n", w.text()
    assert thplab.sim(w)["process"]["minflt"] == 2
    bad = thplab.Workload("bad")
    bad.mmap("buf", "4M")
    touch_line = sys._getframe().f_lineno + 1
    bad.touch("buf", "wrtie")
    try:
        thplab.sim(bad)
        raise AssertionError("a misspelt touch mode was accepted")
    except thplab.WorkloadError as e:
        assert e.line == 3, e.line
        assert str(e).startswith("bad:3: touch takes 'read' or 'write', not 'wrtie'"), str(e)
        assert e.written_at.endswith(f"api_check.py:{touch_line}"), e.written_at
        print(f"ok builder: {e}")
    try:
        thplab.sim("no-such-example")
        raise AssertionError("an unknown example was accepted")
    except thplab.ThplabError as e:
        assert "built-in examples: seed-anon-1g" in str(e), str(e)
    try:
        thplab.sim("seed-anon-1g", set=["enabled=sometimes"])
        raise AssertionError("a bad knob value was accepted")
    except thplab.ThplabError as e:
        print(f"ok errors: {e}")
    assert "seed-anon-1g" in thplab.examples()
    assert thplab.example("seed-anon-1g").startswith("thplab-workload 1")
    print("ok examples:", len(thplab.examples()))


def frames():
    try:
        import pandas  # noqa: F401
    except ImportError:
        print("skip frames: pandas is not installed (pip install pandas)")
        return
    df = thplab.sim("seed-anon-1g", set=["hugepages-64kB/enabled=always"]).census()
    assert list(df.columns) == ["size", "size_kb", "folios", "pmd_mapped", "pte_mapped", "partially_mapped", "bytes"], list(df.columns)
    assert df.to_dict("records") == [{"size": "64kB", "size_kb": 64, "folios": 16384, "pmd_mapped": 0, "pte_mapped": 16384,
                                      "partially_mapped": 0, "bytes": 1 << 30}], df.to_dict("records")
    # TLB per region: 2 MiB read sequentially once, 8-byte items: 262144 accesses.
    w = thplab.Workload("tlb")
    w.mmap("a", "2M")
    w.touch("a", "write")
    w.access("a", "seq", count=262144, elem=8)
    t = thplab.sim(w, tlb="zen4").tlb()
    assert list(t["region"]) == ["a", "total"], list(t["region"])
    assert int(t.loc[t.region == "a", "accesses"].iloc[0]) == 262144
    assert {"l1_hits", "walks", "ns_per_access", "cpu", "paging"} <= set(t.columns), list(t.columns)
    assert set(t["cpu"]) == {"zen4"}
    # A timeline: 64 MiB written at 64 MiB/s, sampled every 250 ms.
    w = thplab.Workload("paced")
    w.mmap("buf", "64M")
    w.touch("buf", "write", rate="64M/s")
    tl = thplab.sim(w, set=["enabled=always"], sample=250).timeline()
    assert list(tl.columns[:2]) == ["t_ms", "rss_kb"], list(tl.columns)
    assert list(tl["t_ms"][:3]) == [250, 500, 750], list(tl["t_ms"])
    assert "folios.2048kB" in tl.columns, list(tl.columns)
    print(f"ok frames: census {list(df.columns)}; tlb {len(t)} rows; timeline {len(tl)} samples")


STUDY = {
    "keep": ["process", "census"],
    "axes": {"workloads": ["seed-anon-1g"], "settings": ["default", "enabled=always", "hugepages-64kB/enabled=always"]},
}


def sweeps():
    d = tempfile.mkdtemp()
    s = thplab.sweep(STUDY, out=os.path.join(d, "local.parquet"), jobs=1)
    assert (s["points"], s["ran"], s["failed"]) == (3, 3, 0), s
    try:
        import pandas  # noqa: F401
        df = thplab.study_frame(os.path.join(d, "local.parquet"))
        assert list(df["process.minflt"]) == [262144, 512, 16384], list(df["process.minflt"])
    except ImportError:
        print("skip sweeps frame: pandas is not installed")
    again = thplab.sweep(STUDY, out=os.path.join(d, "local.parquet"), jobs=1)
    assert (again["resumed"], again["ran"]) == (3, 0), again
    print(f"ok sweep: {s['points']} points, resumed {again['resumed']}")
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        print("skip dask: dask.distributed is not installed (pip install dask distributed)")
        return
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster, Client(cluster) as client:
        r = thplab.sweep(STUDY, out=os.path.join(d, "dask.parquet"), dask_client=client)
    assert (r["points"], r["ran"]) == (3, 3), r
    local, remote = (open(os.path.join(d, f), "rb").read() for f in ("local.parquet", "dask.parquet"))
    assert local == remote, "the Dask run's Parquet file differs from the local run's"
    print(f"ok dask: {r['ran']} points on a Dask client, the same {len(local)} bytes as the local run")


def golden():
    """The package's results equal `thplab sim --json`'s, the golden outputs of
    crates/thplab/tests/it/data/golden (cases.txt), as parsed JSON: a workload, a recording,
    and a workload with a profile and samples. argv: the decompressed outputs' folder, the
    recordings' folder."""
    out, recordings = sys.argv[2], sys.argv[3]
    cases = {
        "sim-issue-program-always": lambda: thplab.sim("issue-program", set=["enabled=always"]),
        "sim-rec-gzip-64k": lambda: thplab.replay(os.path.join(recordings, "gzip.thpt"), set=["hugepages-64kB/enabled=always"]),
        "sim-fork-bgsave-profile-sample": lambda: thplab.sim("fork-bgsave", profile="builtin", sample=1),
    }
    for name, run in cases.items():
        with open(os.path.join(out, name + ".json")) as f:
            want = json.load(f)
        got = json.loads(json.dumps(run()))
        if name == "sim-rec-gzip-64k":
            # The CLI names the recording as it was given ($G/gzip.thpt).
            assert got["workload"].endswith("gzip.thpt"), got["workload"]
            got["workload"] = want["workload"]
        assert got == want, f"{name}: " + ", ".join(k for k in want if got.get(k) != want[k])
    try:
        thplab.replay(os.path.join(out, "sim-rec-gzip-64k.json"))
        raise AssertionError("a JSON file was replayed")
    except thplab.ThplabError as e:
        assert "is not a recording (it does not start with THPTRACE)" in str(e), str(e)
    print(f"ok golden: {len(cases)} results equal thplab sim --json's")


def live():
    why = thplab.live_unavailable()
    if why is not None:
        print(f"skip live: {why}")
        return
    # 8 MiB with MADV_HUGEPAGE under enabled=madvise (the default), written: 4 PMD faults.
    w = thplab.Workload("live-small")
    w.mmap("buf", "8M")
    w.madvise("buf", "hugepage")
    w.touch("buf", "write")
    try:
        r = thplab.live(w, set=["enabled=madvise"])
    except thplab.ThplabError as e:
        if "another thplab live run holds" not in str(e):
            raise
        # Another live run (another test, another user) kept the guard's lock past its wait.
        print(f"skip live: {e}")
        return
    assert r["source"] == "live", r["source"]
    assert r["census"]["sizes"]["2048kB"]["pmd_mapped"] == 4, r["census"]
    assert abs(r["process"]["minflt"] - 4) <= 2, r["process"]
    print(f"ok live: minflt {r['process']['minflt']}, census {r['census']['sizes']}")


if __name__ == "__main__":
    {"model": model, "frames": frames, "sweeps": sweeps, "golden": golden, "live": live}[sys.argv[1]]()
