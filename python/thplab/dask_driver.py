"""Run the points of a thplab study as Dask tasks: one driver for `thplab sweep STUDY.toml
--dask tcp://HOST:PORT` and for `thplab.sweep(study, dask_client=client)` in Python.

Each task runs one point on a worker and returns its one JSON line (the point's journal entry:
{"key", "row"}): with a thplab binary, `thplab sweep STUDY --point N`; without one (the Python
package), `thplab._native.sweep_point(STUDY, N)` in the worker's own process, so the workers
need the package installed. `thplab sweep --dask` starts this file as a script (it is built into
the binary) with the scheduler's address, the thplab binary, the study and, on standard input,
the points the journal lacks; the driver prints `N<TAB>LINE` for each point as it finishes, and
thplab writes them to the same journal and Parquet file as a local run. The workers need the
study and its files at the same paths (one machine, or a shared file system).

From Python: `for n, line in run_points(Client(addr), thplab_or_None, study, points): ...`.
This file imports nothing of the package, so that it runs alone as a script.
"""

import subprocess
import sys


def run_point(thplab, study, n):
    """One point on a worker: (n, its journal line)."""
    if thplab is None:
        from thplab import _native

        return n, _native.sweep_point(study, n)
    out = subprocess.run([thplab, "sweep", study, "--point", str(n)], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"thplab sweep {study} --point {n} exited {out.returncode}: {out.stderr.strip()}")
    return n, out.stdout.strip()


def run_points(client, thplab, study, points):
    """Yield (point, journal line) for each of `points`, as the tasks finish; `thplab` is the
    binary's path, or None to run the points with the Python package on the workers."""
    from dask.distributed import as_completed

    points = list(points)
    futures = client.map(run_point, [thplab] * len(points), [study] * len(points), points, pure=False)
    for fut in as_completed(futures):
        yield fut.result()


def main(argv):
    if len(argv) != 4:
        sys.exit("usage: thplab_dask.py SCHEDULER THPLAB STUDY < POINTS")
    scheduler, thplab, study = argv[1:]
    points = [int(x) for x in sys.stdin.read().split()]
    try:
        from dask.distributed import Client
    except ImportError:
        sys.exit("thplab sweep --dask: the Python package dask.distributed is not installed (pip install dask distributed)")
    client = Client(scheduler, timeout="30s")
    client.wait_for_workers(1, timeout=120)
    for n, line in run_points(client, thplab, study, points):
        sys.stdout.write(f"{n}\t{line}\n")
        sys.stdout.flush()
    client.close()


if __name__ == "__main__":
    main(sys.argv)
