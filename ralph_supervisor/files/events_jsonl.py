"""`events.jsonl`: the supervisor's structured log, one JSON object per line, size-rotated.

`logging.py` writes it (structlog); this module knows its name, its budget and how to read it back,
rotated files included, for the report, `watch` and the tests.

    >>> [e["iteration"] for e in read(Path("/tmp/ralph-example/.ralph-supervise"), "iteration_finished")]
    []
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

NAME = "events.jsonl"
MAX_BYTES = 10_000_000
TOTAL_BYTES = 50_000_000


def path(state_dir: Path) -> Path:
    return state_dir / NAME


def files(state_dir: Path) -> list[Path]:
    """The current file and its rotated ones that exist, oldest first."""
    names = [path(state_dir)] + [state_dir / f"{NAME}.{i}" for i in range(1, TOTAL_BYTES // MAX_BYTES + 1)]
    return list(reversed([p for p in names if p.exists()]))


def read(state_dir: Path, name: str | None = None) -> Iterator[dict[str, Any]]:
    """Every event still on disk (oldest first), or only those called `name`; unreadable lines skipped."""
    needle = f'"event": "{name}"'.encode() if name else None
    for file in files(state_dir):
        try:
            data = file.read_bytes()
        except OSError:
            continue
        for line in data.splitlines():
            if needle is not None and needle not in line:
                continue
            try:
                event = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(event, dict) and (name is None or event.get("event") == name):
                yield event
