"""`events.jsonl`: the supervisor's structured log, one JSON object per line, size-rotated.

`logging.py` writes it (structlog); this module knows its name, its budget and how to read it back,
rotated files included, for the report, `watch` and the tests.

    >>> read(Path("/tmp/ralph-example/.ralph-supervise"), frozenset({"iteration_finished"}))
    ([], [])
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ralph_supervisor.rotating import read_json_lines

NAME = "events.jsonl"
MAX_BYTES = 10_000_000
TOTAL_BYTES = 50_000_000


def path(state_dir: Path) -> Path:
    return state_dir / NAME


def read(state_dir: Path, names: frozenset[str] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Every event still on disk (rotated files included), oldest first, or only those named in `names`;
    and one warning per damaged file (a cut last line of the live file is not damage)."""
    return read_json_lines(path(state_dir), names)
