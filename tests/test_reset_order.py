"""`reset` without a supervisor writes its records in the documented order: the history line, then
`state.json` (as `records.Records.transition` and the supervisor's `apply` do). So a `state.json` that says
CLOSED always has the transition that made it so in `history.jsonl`, whenever a crash or a full disk stops
the second write.

The order is observed with an audit hook (PEP 578): the real opens and renames the process makes, in order."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ralph_supervisor import status
from ralph_supervisor.breaker import Breaker, Thresholds
from ralph_supervisor.files import history_jsonl, state_json

_seen: list[tuple[str, str]] | None = None


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if _seen is None:
        return
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        mode = args[1] if isinstance(args[1], str) else ""
        writes = bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_APPEND)) or any(c in mode for c in "wax+")
        if writes:
            _seen.append(("write", os.fsdecode(args[0])))
    elif event == "os.rename":
        _seen.append(("rename", os.fsdecode(args[1])))


sys.addaudithook(_hook)


@contextmanager
def watching() -> Iterator[list[tuple[str, str]]]:
    global _seen
    _seen = []
    try:
        yield _seen
    finally:
        _seen = None


def test_reset_writes_the_history_line_before_state_json(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    breaker = Breaker(Thresholds())
    assert breaker.manual_open("paused by hand", now=time.time()).changed
    state_json.save(state_dir, breaker.snapshot())
    with watching() as seen:
        assert "CLOSED" in status.reset(state_dir)
    history = str(history_jsonl.path(state_dir))
    state = str(state_json.path(state_dir))
    steps = [step for step in seen if step in (("write", history), ("rename", state))]
    assert steps == [("write", history), ("rename", state)], seen
    lines = history_jsonl.tail(state_dir, 5)
    assert [(line["from"], line["to"]) for line in lines] == [("OPEN", "CLOSED")]
    snapshot, warning = state_json.load(state_dir)
    assert warning is None and snapshot is not None and snapshot.state.value == "CLOSED"
