"""pandas DataFrames of a result (the JSON of `thplab sim --json`, docs/results-schema.md) and
of a study's table (docs/sweeps.md). pandas is imported when a function is called.

- `census_frame(r)`: one row per folio size of the census: size, size_kb, folios, pmd_mapped,
  pte_mapped, partially_mapped, bytes.
- `timeline_frame(r)`: one row per sample of `sample=MS`: t_ms, rss_kb, anon_huge_pages_kb,
  shmem_pmd_mapped_kb, pages_collapsed, full_scans, thp_collapse_alloc, and folios.SIZE.
- `tlb_frame(r)`: one row per region of the TLB model's report (`accesses.regions`, then the
  total as region "total"): accesses, l1_hits, l2_hits, walks, cycles, ns, ns_per_access ...
- `study_frame(out)`: a sweep's table, one row per point (pyarrow's Parquet reader when it is
  installed, else the rows of its journal, the same figures).
"""

import json
import os
import re

CENSUS_COLUMNS = ["size", "size_kb", "folios", "pmd_mapped", "pte_mapped", "partially_mapped", "bytes"]


def _pd():
    try:
        import pandas
    except ImportError:
        raise ImportError("the DataFrame helpers need pandas: pip install pandas") from None
    return pandas


def size_kb(size):
    """The kB of a size key as the kernel names it ("64kB", "2048kB", "hugepages-64kB")."""
    m = re.search(r"(\d+)kB$", size)
    if not m:
        raise ValueError(f"not a folio size: {size!r} (sizes are written as the kernel does: 4kB, 64kB, 2048kB)")
    return int(m.group(1))


def census_frame(result, process=None):
    """The census of `result` (or of the forked process named `process`): one row per folio
    size, smallest first."""
    pd = _pd()
    census = result["census"]
    if process is not None:
        procs = {p["name"]: p for p in result.get("processes", [])}
        if process not in procs:
            raise KeyError(f"no process {process!r} in the result; processes: {', '.join(procs) or 'none (the workload does not fork)'}")
        census = procs[process]["census"]
    rows = []
    for size, c in census.get("sizes", {}).items():
        kb = size_kb(size)
        rows.append({"size": size, "size_kb": kb, "folios": c.get("folios", 0), "pmd_mapped": c.get("pmd_mapped", 0),
                     "pte_mapped": c.get("pte_mapped", 0), "partially_mapped": c.get("partially_mapped", 0),
                     "bytes": c.get("folios", 0) * kb * 1024})
    rows.sort(key=lambda r: r["size_kb"])
    return pd.DataFrame(rows, columns=CENSUS_COLUMNS)


def timeline_frame(result):
    """The samples of a run with `sample=MS`: one row per sample, `t_ms` first; the census of
    each sample as columns `folios.SIZE` (0 where a sample has none of a size)."""
    pd = _pd()
    t = result.get("timeline")
    if t is None:
        raise KeyError("the result has no timeline: run it with sample=MS (thplab sim --sample MS)")
    rows = []
    for s in t.get("samples", []):
        row = {k: v for k, v in s.items() if k != "folios"}
        for size, n in (s.get("folios") or {}).items():
            row[f"folios.{size}"] = n
        rows.append(row)
    df = pd.DataFrame(rows)
    folio_cols = sorted((c for c in df.columns if c.startswith("folios.")), key=lambda c: size_kb(c))
    for c in folio_cols:
        df[c] = df[c].fillna(0).astype("int64")
    return df[[c for c in df.columns if not c.startswith("folios.")] + folio_cols]


def tlb_frame(result):
    """The TLB model's report per region (`accesses.regions`) and its total (region "total"),
    with cpu and paging as columns."""
    pd = _pd()
    a = result.get("accesses")
    if a is None:
        raise KeyError("the result has no TLB figures: the workload needs `access` statements (or the recording `record --accesses`)")
    rows = [dict(r) for r in a.get("regions", [])] + [dict(a["total"], region="total")]
    for r in rows:
        r["cpu"], r["paging"] = a.get("cpu"), a.get("paging")
        for k, v in list(r.items()):
            if isinstance(v, list):
                r[k] = tuple(v)
    df = pd.DataFrame(rows)
    return df[["region"] + [c for c in df.columns if c != "region"]]


def _journal_rows(out):
    """The rows of a sweep's journal (OUT.journal), in point order; floats as the table reads
    them ({"f": "DIGITS"})."""
    rows = {}
    with open(os.fspath(out) + ".journal") as f:
        for i, line in enumerate(f):
            if i == 0 or not line.endswith("\n"):
                continue
            entry = json.loads(line)
            rows[entry["key"]] = {k: float(v["f"]) if isinstance(v, dict) and "f" in v else v for k, v in entry["row"].items()}
    return sorted(rows.values(), key=lambda r: r["point"])


def study_frame(out):
    """A sweep's table (`thplab sweep -o OUT`, `thplab.sweep(out=OUT)`), one row per point:
    the Parquet file through pyarrow when it is installed, else the journal beside it."""
    pd = _pd()
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return pd.DataFrame(_journal_rows(out))
    return pd.read_parquet(out)
