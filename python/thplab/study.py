"""`thplab.sweep`: a study (docs/sweeps.md) run here on every core, or on a Dask client, into
the same journal and Parquet file as `thplab sweep STUDY.toml -o OUT` writes."""

import json
import os

from . import _native
from . import dask_driver


def _toml_value(v, where):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x, where) for x in v) + "]"
    raise TypeError(f"study {where}: {type(v).__name__} is not a TOML value (give strings, numbers or lists of them)")


# Axis values that name files (relative paths are taken from the current directory).
_PATH_AXES = ("workloads", "recordings", "profile")


def _absolute(key, v):
    """A file named by a study dict, made absolute when it exists relative to the current
    directory (the TOML is written beside the output, and a study's paths are relative to it)."""
    if isinstance(v, list):
        return [_absolute(key, x) for x in v]
    if not isinstance(v, str):
        return v
    if key == "settings" and v.startswith("file:") and os.path.exists(v[5:]):
        return "file:" + os.path.abspath(v[5:])
    if key in _PATH_AXES + ("workload", "recording") and not os.path.isabs(v) and os.path.exists(v):
        return os.path.abspath(v)
    return v


def study_toml(study):
    """The TOML text of a study given as a dict: {"keep": [...], "axes": {...}, "point": [...]}."""
    unknown = set(study) - {"keep", "axes", "point"}
    if unknown:
        raise ValueError(f"study: unknown key(s) {sorted(unknown)}; valid: keep, axes, point (docs/sweeps.md)")
    lines = []
    if "keep" in study:
        lines.append(f"keep = {_toml_value(study['keep'], 'keep')}")
    lines.append("[axes]")
    for k, v in study.get("axes", {}).items():
        lines.append(f"{k} = {_toml_value(_absolute(k, v), 'axes.' + k)}")
    for i, p in enumerate(study.get("point", [])):
        lines.append("[[point]]")
        for k, v in p.items():
            lines.append(f"{k} = {_toml_value(_absolute(k, v), f'point {i} {k}')}")
    return "\n".join(lines) + "\n"


def sweep(study, out, jobs=None, dask_client=None, progress=False):
    """Run a study's points into the Parquet file `out` (and its journal `out.journal`: run it
    again and only the points it lacks run). `study` is a TOML file or a dict {"keep", "axes",
    "point"} (written beside `out` as OUT.study.toml). Here on `jobs` threads (default: every
    core), or as tasks on `dask_client` (a dask.distributed Client whose workers have this
    package installed and the study's files at the same paths). Returns the summary of
    `thplab sweep --json` (points, resumed, ran, failed, seconds, points_per_second ...)."""
    out = os.path.abspath(os.fspath(out))
    if isinstance(study, dict):
        path = os.path.splitext(out)[0] + ".study.toml"
        with open(path, "w") as f:
            f.write(study_toml(study))
        study = path
    study = os.path.abspath(os.fspath(study))
    if dask_client is None:
        return json.loads(_native.sweep(study, out, jobs=jobs, progress=progress))
    runner = lambda points: dask_driver.run_points(dask_client, None, study, points)  # noqa: E731
    return json.loads(_native.sweep_remote(study, out, runner))
