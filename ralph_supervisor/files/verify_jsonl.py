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

from ralph_supervisor.rotating import RotatingFile, read_json_lines

NAME = "verify.jsonl"
MAX_BYTES = 2_000_000
TOTAL_BYTES = 10_000_000
NAMES_MAX = 100


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
    """The last `count` verify lines of the current file, oldest first (unreadable lines skipped)."""
    rows, _problems = read_json_lines(path(state_dir))
    return rows[-count:] if count > 0 else []
