"""The lines of a chunk of output that could be error lines, found in one scan at C speed.

Every line the error filter keeps holds one of a handful of literals (`Error:`, `Exception`, `Fatal`, ...,
or `"is_error": true`); every other line is skipped without decoding or parsing. The scan is Hyperscan's:
one pass for every pattern, each pattern followed by the rest of its line, so a pattern is reported once
per line (Hyperscan reports a pattern once per end offset) however often the line holds it. Where Hyperscan
is not installed, cannot compile on this CPU, or is still compiling (a tenth of a second, on a thread of its
own from import on, while the supervisor starts), Python's own `re` and `bytes.find` find the same lines.

Each candidate line comes with a mask of the literals it holds, so that the filter can prove some lines
free of errors without decoding them (tool_input.py).

    >>> candidate_lines(b"ok\\nError: boom\\nok")[0]
    [3]
"""

from __future__ import annotations

import re
import threading
from typing import Any

CANDIDATE_BYTES: tuple[bytes, ...] = (
    b"rror:",  # ^Error: ^error:
    b"RROR:",  # ^ERROR:
    b"]: error",
    b"Link: error",
    b"Error occurred",
    b"failed with error",
    b"xception",  # [Ee]xception
    b"Fatal",
    b"FATAL",
    b'"is_error"',  # a candidate only as `"is_error": true`, in any spacing within the line
)
"""The literals, as bytes; bit i of a line's mask is CANDIDATE_BYTES[i]. JSON escapes never touch these
ASCII letters and colons, so they hold for text inside JSON strings too (short of `\\u0045rror` escapes)."""

EVERY_LITERAL = (1 << len(CANDIDATE_BYTES)) - 1
_SPACE = rb"[ \t\r\f\x0b]*"  # whitespace within a line
_IS_ERROR_TRUE = rb'"is_error"' + _SPACE + rb":" + _SPACE + rb"true"
_REST_OF_LINE = rb"[^\n]*(?:\n|\z)"
_HYPERSCAN_PATTERNS: tuple[bytes, ...] = (
    *(re.escape(literal) + _REST_OF_LINE for literal in CANDIDATE_BYTES[:-1]),
    _IS_ERROR_TRUE + _REST_OF_LINE,
)

# The Python scan: the literals holding "rror" (and `"is_error": true`) in one regex, whose literal prefix
# lets the engine skip ahead like `bytes.find`; "Fatal|FATAL" in another (the engine factors out the "F");
# one `find` pass for each other literal.
_RROR_FAMILY = re.compile(
    rb'rror(?::| occurred|"[ \t\r\f\x0b]*:[ \t\r\f\x0b]*true|(?<=\]: error)|(?<=Link: error)|(?<=failed with error))'
)
_FATAL = re.compile(rb"Fatal|FATAL")
_FIND_LITERALS: tuple[bytes, ...] = (b"RROR:", b"xception")

_literal_sets: dict[int, tuple[bytes, ...]] = {}


def literals(mask: int) -> tuple[bytes, ...]:
    """The candidate literals whose bits are set in `mask`."""
    found = _literal_sets.get(mask)
    if found is None:
        found = _literal_sets[mask] = tuple(lit for i, lit in enumerate(CANDIDATE_BYTES) if mask >> i & 1)
    return found


def python_line_starts(data: bytes) -> list[int]:
    """Start offsets of the lines of `data` that hold a candidate, by Python's own scan.

    Each pass is one scan at C speed and the passes are the cost. After a hit the scan resumes at the end of
    that line (a 2 MB line full of "Exception" costs one hit).
    """
    starts: set[int] = set()
    size = len(data)
    for regex in (_RROR_FAMILY, _FATAL):
        pos = 0
        while pos < size:
            match = regex.search(data, pos)
            if match is None:
                break
            starts.add(data.rfind(b"\n", 0, match.start()) + 1)
            pos = data.find(b"\n", match.end())
            if pos < 0:
                break
    for lit in _FIND_LITERALS:
        pos = data.find(lit)
        while pos >= 0:
            starts.add(data.rfind(b"\n", 0, pos) + 1)
            end = data.find(b"\n", pos)
            if end < 0:
                break
            pos = data.find(lit, end)
    return sorted(starts)


class HyperscanScan:
    """The candidate patterns in one Hyperscan database, compiled on a thread of its own: the database is
    written once, before `_compiled` is set, and only read after it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # a database's scratch space serves one scan at a time
        self._compiled = threading.Event()
        self._database: Any = None
        threading.Thread(target=self._compile, name="hyperscan-compile", daemon=True).start()

    def _compile(self) -> None:
        try:
            import hyperscan

            database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            database.compile(expressions=list(_HYPERSCAN_PATTERNS), ids=list(range(len(_HYPERSCAN_PATTERNS))),
                             elements=len(_HYPERSCAN_PATTERNS), flags=[0] * len(_HYPERSCAN_PATTERNS))
            self._database = database
        except Exception:  # no wheel for this platform, or a CPU without the instructions it needs
            self._database = None
        finally:
            self._compiled.set()

    def database(self, wait: bool) -> Any:
        """The compiled database; None without Hyperscan, or (unless `wait`) while it compiles."""
        if wait:
            self._compiled.wait()
        return self._database if self._compiled.is_set() else None

    def candidate_lines(self, data: bytes, wait: bool = False) -> tuple[list[int], list[int]] | None:
        """`candidate_lines` by Hyperscan; None when it cannot serve (see `database`)."""
        database = self.database(wait)
        if database is None:
            return None
        starts: list[int] = []
        masks: list[int] = []
        last_end = [-1]
        rfind = data.rfind

        def on_match(pattern: int, _start: int, end: int, _flags: int, _context: object) -> None:
            if end == last_end[0]:  # another literal of the same line
                masks[-1] |= 1 << pattern
            else:
                last_end[0] = end
                starts.append(rfind(b"\n", 0, end - 1) + 1)
                masks.append(1 << pattern)

        with self._lock:
            database.scan(data, match_event_handler=on_match)
        return starts, masks


_HYPERSCAN = HyperscanScan()


def candidate_lines(data: bytes) -> tuple[list[int], list[int]]:
    """The start offsets of the lines of `data` (split on b"\\n") that could be error lines, in order, and
    for each the literals it holds as a bit mask over CANDIDATE_BYTES (every bit from the Python scan, which
    does not tell them apart)."""
    found = _HYPERSCAN.candidate_lines(data)
    if found is not None:
        return found
    starts = python_line_starts(data)
    return starts, [EVERY_LITERAL] * len(starts)


def scan_engine() -> str:
    """Which engine finds the candidate lines here: "hyperscan" or "python" (for the benchmark and `--version`)."""
    return "hyperscan" if _HYPERSCAN.database(wait=True) is not None else "python"
