"""`child.log`: the loop's stdout and stderr as it printed them, size-rotated under a disk budget.

The output tap appends to it (`open`); `watch` and the report read its tail.

    >>> log = open_log(Path("/tmp/ralph-example"), 50_000_000, 500_000_000)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ralph_supervisor.rotating import RotatingFile

NAME = "child.log"


def path(state_dir: Path) -> Path:
    return state_dir / NAME


def open_log(state_dir: Path, max_bytes: int, total_bytes: int,
             on_error: Callable[[OSError], None] | None = None) -> RotatingFile:
    """The appender the tap writes every byte to (a full disk costs bytes, counted, never supervision)."""
    return RotatingFile(path(state_dir), max_bytes, total_bytes, on_error=on_error, mode=0o600)
