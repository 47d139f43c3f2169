"""thplab from Python: the Linux 6.18 THP/mTHP model (and the live kernel, as root) through the
same library functions as the `thplab` CLI (docs/python.md).

    import thplab
    r = thplab.sim("seed-anon-1g", set=["enabled=always"])
    r["process"]["minflt"]          # 512: the result indexes as `thplab sim --json` prints it
    thplab.census_frame(r)          # pandas: one row per folio size

Runs: `sim`, `replay`, `live`; inputs: `examples`, `example`, `Workload` (a builder of the
workload language); studies: `sweep`, `study_frame`; DataFrames: `census_frame`,
`timeline_frame`, `tlb_frame` (pandas, imported when called).
"""

import json
import os
import sys

from . import _native
from ._native import ThplabError
from .builder import Workload, WorkloadError
from .frames import census_frame, timeline_frame, tlb_frame, study_frame
from .study import sweep

__all__ = [
    "sim", "replay", "live", "live_unavailable", "examples", "example", "Workload", "Result",
    "ThplabError", "WorkloadError", "census_frame", "timeline_frame", "tlb_frame", "sweep",
    "study_frame",
]


class Result(dict):
    """A run's result: the dict of `thplab sim --json` (or `live --json`), with the
    DataFrame helpers as methods."""

    def census(self, process=None):
        """The folio census per size (`census_frame`)."""
        return census_frame(self, process)

    def timeline(self):
        """The samples of `sample=MS` (`timeline_frame`)."""
        return timeline_frame(self)

    def tlb(self):
        """The TLB model's figures per region (`tlb_frame`)."""
        return tlb_frame(self)


def _input(workload):
    """(name, text) for the native calls: a builder's text, or a name or path as given."""
    if isinstance(workload, Workload):
        workload.check()  # a WorkloadError names the Python line that wrote the statement
        return workload.name, workload.text()
    if isinstance(workload, os.PathLike):
        return os.fspath(workload), None
    if isinstance(workload, str):
        return workload, None
    raise TypeError(f"a workload is a built-in example's name, a path or a thplab.Workload, not {type(workload).__name__}")


def _settings(set, settings):
    """`set` (a string or a list of PATH=VALUE) and `settings` (a path, a list of paths, or a
    dict {knob: value}, applied before `set`, as --settings is before --set)."""
    sets = [set] if isinstance(set, str) else list(set or [])
    files = []
    if isinstance(settings, dict):
        sets = [f"{k}={v}" for k, v in settings.items()] + sets
    elif isinstance(settings, (str, os.PathLike)):
        files = [os.fspath(settings)]
    elif settings is not None:
        files = [os.fspath(s) for s in settings]
    return sets, files


def _tlb(tlb):
    """`tlb`: None, a CPU preset name ("zen4"), or a dict of cpu, paging, order0_scatter."""
    if tlb is None:
        return {}
    if isinstance(tlb, str):
        return {"cpu": tlb}
    if isinstance(tlb, dict):
        unknown = set(tlb) - {"cpu", "paging", "order0_scatter"}
        if unknown:
            raise ValueError(f"tlb: unknown key(s) {sorted(unknown)}; valid: cpu, paging, order0_scatter")
        return dict(tlb)
    raise TypeError("tlb: give a CPU preset name (zen4, zen1, golden-cove, neoverse-n1, cortex-a57, cortex-a53) or a dict of cpu, paging, order0_scatter")


def sim(workload, set=None, settings=None, profile=None, memory_max=None, swap=None, tlb=None,
        mem="24G", cmdline=None, sample=None, check=False):
    """Run `workload` in the model, as `thplab sim WORKLOAD --json` does.

    workload: a built-in example's name, a workload file, a recording, or a `Workload`.
    set: PATH=VALUE assignments (`--set`), a string or a list. settings: a settings file, a
    list of them, or a dict {knob: value} (`--settings`). profile: a machine profile file or
    "builtin" (the run's time). memory_max, swap: `--memory-max`, `--swap`. tlb: a CPU preset
    or {"cpu", "paging", "order0_scatter"}. mem: the machine's memory. cmdline: kernel
    command-line options. sample: sample every MS ms (the result's `timeline`).
    """
    name, text = _input(workload)
    sets, files = _settings(set, settings)
    out = _native.sim(name, text=text, sets=sets, settings=files, cmdline=cmdline, profile=profile, mem=mem,
                      memory_max=memory_max, swap=swap, sample=sample, check=check, **_tlb(tlb))
    return Result(json.loads(out))


def replay(recording, set=None, settings=None, profile=None, memory_max=None, swap=None, tlb=None,
           mem="24G", cmdline=None, sample=None, recorded_time=True):
    """Replay a recording (`thplab record`) in the model, as `thplab sim RECORDING --json`;
    `recorded_time=False` is `--no-recorded-time`. The other arguments are `sim`'s."""
    path = os.fspath(recording)
    with open(path, "rb") as f:
        if f.read(8) != b"THPTRACE":
            raise ThplabError(f"{path} is not a recording (it does not start with THPTRACE); run workloads with thplab.sim")
    sets, files = _settings(set, settings)
    out = _native.sim(path, sets=sets, settings=files, cmdline=cmdline, profile=profile, mem=mem, memory_max=memory_max,
                      swap=swap, sample=sample, recorded_time=recorded_time, **_tlb(tlb))
    return Result(json.loads(out))


def live_unavailable():
    """Why live runs cannot happen here (not root, no THP sysfs tree), or None."""
    return _native.live_unavailable()


def live(workload, set=None, settings=None, memory_max=None, swap=None, mem="24G", cmdline=None, sample=None, repeat=1):
    """Run `workload` on this machine's kernel, as `thplab live WORKLOAD --json` (root only):
    the knobs are set through the settings guard and restored, as the CLI does; the regions are
    where the model places them. Raises ThplabError saying why where live runs are not possible."""
    why = _native.live_unavailable()
    if why is not None:
        raise ThplabError(f"live runs are not available here: {why}")
    name, text = _input(workload)
    sets, files = _settings(set, settings)
    # The child side of the run (`thplab __exec`): this package in a fresh interpreter.
    home = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    child = [sys.executable, "-c", f"import sys; sys.path.insert(0, {home!r}); from thplab import _native; _native.exec_child()"]
    out = _native.live(name, child[0], child[1:], text=text, sets=sets, settings=files, cmdline=cmdline, mem=mem,
                       memory_max=memory_max, swap=swap, sample=sample, repeat=repeat)
    return Result(json.loads(out))


def examples():
    """The built-in example workloads: {name: one-line description}."""
    return dict(_native.examples())


def example(name):
    """A built-in example's text (the workload language)."""
    return _native.example_text(name)
