"""A builder of the workload language (docs/workload-format.md): each call writes one
statement, words in order and keyword arguments as KEY=VALUE, and the text goes to the same
parser as a workload file's (`workload::parse`), so its errors are the parser's, with the line
of the text and the Python line that wrote it.

    w = thplab.Workload("seed")
    w.mmap("buf", "1G")
    w.madvise("buf", "hugepage")
    w.touch("buf", "write", order="random", seed=7)
    with w.fork("saver"):            # fork saver {  ...  }
        w.touch("buf", "read")
        w.exit()
    w.wait("saver")
    thplab.sim(w, set=["enabled=always"])

Any statement is a method of its name (`w.ftruncate("m", "1G")`, `w.sleep("100ms")`);
`w.statement("in child {")` writes a line as it is; `w.block(...)` (or `fork`, `in_`,
`repeat`) opens a block that the `with` closes. Keyword values: True writes the bare word
(`w.mmap("b", "2M", shared=True)` is `mmap b 2M shared`); None leaves the key out.
"""

import re
import sys

from . import _native
from ._native import ThplabError

HEADER = "thplab-workload 1"


class WorkloadError(ThplabError):
    """A workload the parser refused: `line` is the line of the text (1 is the header),
    `written_at` the Python file:line that wrote that statement (None for the header)."""

    def __init__(self, message, line=None, written_at=None):
        super().__init__(message)
        self.line = line
        self.written_at = written_at


def _word(v):
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


def _caller():
    """The file:line of the user's code that called the builder."""
    f = sys._getframe(1)
    here = f.f_code.co_filename
    while f is not None and f.f_code.co_filename == here:
        f = f.f_back
    return f"{f.f_code.co_filename}:{f.f_lineno}" if f is not None else None


class _Block:
    def __init__(self, w):
        self.w = w

    def __enter__(self):
        return self.w

    def __exit__(self, *exc):
        self.w._line("}")
        return False


class Workload:
    """A workload written statement by statement; `text()` is the workload file's text."""

    def __init__(self, name="<thplab.Workload>"):
        self.name = name
        self.lines = [HEADER]
        self.written_at = [None]

    def _line(self, text):
        if "\n" in text:
            raise ValueError(f"a statement is one line: {text!r}")
        self.lines.append(text)
        self.written_at.append(_caller())
        return self

    def statement(self, *words, **kw):
        """One statement: the words, then each KEY=VALUE (True: the bare KEY; None: left out)."""
        parts = [_word(w) for w in words]
        for k, v in kw.items():
            if v is None:
                continue
            k = k.rstrip("_")
            parts.append(k if v is True else f"{k}={_word(v)}")
        return self._line(" ".join(parts))

    def comment(self, text):
        """A `#` comment line."""
        return self._line("# " + text)

    def block(self, *words, **kw):
        """A statement that opens a block (`fork NAME {`, `in NAME {`, `repeat N {`): use it with
        `with`, which writes the closing brace."""
        self.statement(*words, **kw)
        self.lines[-1] += " {"
        return _Block(self)

    def fork(self, name):
        """`fork NAME {` ... `}`."""
        return self.block("fork", name)

    def in_(self, name):
        """`in NAME {` ... `}` (`in` is a Python keyword)."""
        return self.block("in", name)

    def repeat(self, times_or_duration):
        """`repeat N {` or `repeat DURATION {` ... `}`."""
        return self.block("repeat", times_or_duration)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *words, **kw: self.statement(name.rstrip("_"), *words, **kw)

    def text(self):
        """The workload file's text."""
        return "\n".join(self.lines) + "\n"

    def check(self):
        """Parse the text as `thplab sim` would: the number of operations, or WorkloadError with
        the parser's message (file, line, what is valid) and the Python line that wrote it."""
        try:
            return _native.parse_workload(self.name, self.text())
        except ThplabError as e:
            msg = str(e)
            m = re.search(re.escape(self.name) + r":(\d+):", msg)
            line = int(m.group(1)) if m else None
            at = self.written_at[line - 1] if line and line <= len(self.written_at) else None
            raise WorkloadError(msg + (f" (written at {at})" if at else ""), line, at) from None

    def save(self, path):
        """Write the text to `path` (a .thpw file `thplab sim` reads)."""
        with open(path, "w") as f:
            f.write(self.text())
        return path

    def __repr__(self):
        return f"thplab.Workload({self.name!r}, {len(self.lines) - 1} statements)"
