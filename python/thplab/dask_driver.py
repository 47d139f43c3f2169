"""Run the points of a thplab study as Dask tasks: one driver for `thplab sweep STUDY.toml
--dask tcp://HOST:PORT` and for `thplab.sweep(study, dask_client=client)` in Python.

Each task runs one point on a worker and returns its one JSON line (the point's journal entry:
{"key", "row"}): with a thplab binary, `thplab sweep STUDY --point N` (the driver's path, or
`thplab` on the worker's PATH); without one (the Python package),
`thplab._native.sweep_point(STUDY, N)` in the worker's own process, so the workers need the
package installed. `thplab sweep --dask` starts this file as a script (it is built into the
binary) with the scheduler's address, the thplab binary, the study, the manifest of the files
the study reads ({"NAME": ["PATH", companion...]}, `sweep::dask::manifest`) and, on standard
input, the points the journal lacks; the driver prints `N<TAB>LINE` for each point as it
finishes, and thplab writes them to the same journal and Parquet file as a local run.

The workers need not share the driver's file system: the study and its files are read here,
uploaded once to every worker (`Client.scatter(..., broadcast=True)`) with their SHA-256, and
each task writes them under the worker's temporary folder (once per content: a folder named by
the bundle's hash), checks the hash of what it wrote, and runs the point on the copies.

From Python: `for n, line in run_points(Client(addr), thplab_or_None, study, points, files): ...`.
This file imports nothing of the package, so that it runs alone as a script.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def bundle(study, files):
    """The study and its files as bytes with their hashes: {"study": [BASENAME, BYTES, SHA],
    "files": {NAME: [[BASENAME, BYTES, SHA], ...]}, "sha": SHA of it all}."""
    def one(path):
        with open(path, "rb") as f:
            data = f.read()
        return [os.path.basename(path), data, sha256(data)]

    b = {"study": one(study), "files": {name: [one(p) for p in paths] for name, paths in sorted((files or {}).items())}}
    h = hashlib.sha256(b["study"][2].encode())
    for name, entries in b["files"].items():
        h.update(name.encode() + b"\0" + b"".join(e[0].encode() + b"\0" + e[2].encode() for e in entries))
    b["sha"] = h.hexdigest()
    return b


def _write(path, data, sha):
    """Write `data` at `path` unless a file of that content is there, then check its hash."""
    if not (os.path.exists(path) and _hash_file(path) == sha):
        tmp = f"{path}.{os.getpid()}.{id(data)}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    got = _hash_file(path)
    if got != sha:
        raise RuntimeError(f"thplab dask worker: {path} has SHA-256 {got}, the driver sent {sha}")


def _hash_file(path):
    with open(path, "rb") as f:
        return sha256(f.read())


def unpack(b):
    """The bundle written under this worker's temporary folder: (the study's path, the --files
    map's path). Each shipped file's bytes are checked against the hash the driver computed."""
    root = os.path.join(tempfile.gettempdir(), "thplab-shipped", b["sha"])
    os.makedirs(os.path.join(root, "study"), exist_ok=True)
    base, data, sha = b["study"]
    if sha256(data) != sha:
        raise RuntimeError(f"thplab dask worker: the study {base} arrived with SHA-256 {sha256(data)}, the driver sent {sha}")
    study = os.path.join(root, "study", base)
    _write(study, data, sha)
    names = {}
    for name, entries in b["files"].items():
        folder = os.path.join(root, "files", entries[0][2])
        os.makedirs(folder, exist_ok=True)
        for base, data, sha in entries:
            _write(os.path.join(folder, base), data, sha)
        names[name] = os.path.join(folder, entries[0][0])
    files = os.path.join(root, "files.json")
    text = json.dumps(names, sort_keys=True).encode()
    _write(files, text, sha256(text))
    return study, files


def run_point(thplab, study, n, shipped=None):
    """One point on a worker: (n, its journal line); with `shipped` (a [`bundle`]), on its copies."""
    files = None
    if shipped is not None:
        study, files = unpack(shipped)
    if thplab is None:
        from thplab import _native

        return n, _native.sweep_point(study, n)
    if not os.path.exists(thplab):
        thplab = shutil.which("thplab") or thplab
    argv = [thplab, "sweep", study, "--point", str(n)] + (["--files", files] if files else [])
    out = subprocess.run(argv, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"thplab sweep {study} --point {n} exited {out.returncode}: {out.stderr.strip()}")
    return n, out.stdout.strip()


def run_points(client, thplab, study, points, files=None):
    """Yield (point, journal line) for each of `points`, as the tasks finish; `thplab` is the
    binary's path, or None to run the points with the Python package on the workers; `files`
    the manifest of the study's files ({"NAME": ["PATH", ...]}): the study and these are sent
    to the workers (None: the study alone, as `thplab.sweep` gives it)."""
    from dask.distributed import as_completed

    points = list(points)
    # The package's workers (thplab None) read the study where it is (not yet shipped).
    shipped = None
    if thplab is not None:
        [shipped] = client.scatter([bundle(study, files)], broadcast=True, hash=False)
    futures = client.map(run_point, [thplab] * len(points), [study] * len(points), points, [shipped] * len(points), pure=False)
    for fut in as_completed(futures):
        yield fut.result()


def main(argv):
    if len(argv) != 5:
        sys.exit("usage: thplab_dask.py SCHEDULER THPLAB STUDY FILES.json < POINTS")
    scheduler, thplab, study, manifest = argv[1:]
    points = [int(x) for x in sys.stdin.read().split()]
    with open(manifest) as f:
        files = json.load(f)
    try:
        from dask.distributed import Client
    except ImportError:
        sys.exit("thplab sweep --dask: the Python package dask.distributed is not installed (pip install dask distributed)")
    client = Client(scheduler, timeout="30s")
    client.wait_for_workers(1, timeout=120)
    for n, line in run_points(client, thplab, study, points, files):
        sys.stdout.write(f"{n}\t{line}\n")
        sys.stdout.flush()
    client.close()


if __name__ == "__main__":
    main(sys.argv)
