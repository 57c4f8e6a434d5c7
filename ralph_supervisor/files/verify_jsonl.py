"""`verify.jsonl`: one JSON line per verify run, appended, rotated under a budget, never rewritten.

A line is `{"iteration", "covers", "snapshot", "started", "seconds", "exit", "passed", "failed", "errors",
"skipped", "runner", "unverified", "fixed", "broke", "skipped_iterations"}`; `started` is ISO-8601 UTC with
milliseconds; `fixed` and `broke` name the tests (at most NAMES_MAX of each) this verify found fixed or
broken since the last verified one; `unverified` says why a verify proved nothing (null when it did).

    >>> tail(Path("/tmp/ralph-example/.ralph-supervise"), 1)
    []
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ralph_supervisor.rotating import RotatingFile, read_json_lines, tail_lines
from ralph_supervisor.values import parse_json_lines

NAME = "verify.jsonl"
MAX_BYTES = 2_000_000
TOTAL_BYTES = 10_000_000
NAMES_MAX = 100
TAIL_BYTES = 256 * 1024


def path(state_dir: Path) -> Path:
    return state_dir / NAME


class VerifyLog:
    """The appender (whole lines only, rotated by size)."""

    def __init__(self, state_dir: Path, on_error: Callable[[OSError], None] | None = None) -> None:
        self._file = RotatingFile(path(state_dir), MAX_BYTES, TOTAL_BYTES, whole_lines=True, on_error=on_error)

    def record(self, line: dict[str, Any]) -> None:
        self._file.write((json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8"))

    def close(self) -> None:
        self._file.close()


def tail(state_dir: Path, count: int) -> list[dict[str, Any]]:
    """The last `count` verify lines (rotated files too), oldest first (unreadable lines skipped)."""
    rows, _problems = read_json_lines(path(state_dir))
    return rows[-count:] if count > 0 else []


def last(state_dir: Path) -> dict[str, Any] | None:
    """The last verify line of the current file (its end only is read), or None."""
    try:
        lines, _ = tail_lines(path(state_dir), TAIL_BYTES, last_unended=True)
    except OSError:
        return None
    for line in reversed(lines):
        records, _bad = parse_json_lines([line])
        if records:
            return records[0]
    return None


def status_of(line: dict[str, Any] | None, running: bool = False) -> dict[str, Any] | None:
    """The `verify` part of `status --json` from a verify line: iteration, counts, when, why unverified."""
    if not line:
        return None
    return {
        "iteration": line.get("iteration"), "passed": line.get("passed"), "failed": line.get("failed"),
        "errors": line.get("errors"), "skipped": line.get("skipped"), "at": line.get("started"),
        "unverified": line.get("unverified"), "running": running,
    }


def human(status: dict[str, Any]) -> str:
    """`status`'s line: `iteration 6: 41 passed, 2 failed, 0 errors, 1 skipped (2026-12-02T01:10:00.000Z)`."""
    head = f"iteration {status.get('iteration')}"
    if status.get("unverified"):
        text = f"{head}: unverified ({status['unverified']})"
    else:
        text = (f"{head}: {status.get('passed')} passed, {status.get('failed')} failed, "
                f"{status.get('errors')} errors, {status.get('skipped')} skipped")
    return text + f" ({status.get('at')})" + ("; a verify is running" if status.get("running") else "")
