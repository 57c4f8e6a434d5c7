"""`state.json`: the breaker's snapshot, rewritten atomically after every change: durably (fsync) when the
breaker changes state, without fsync when only its counters moved (records.py decides; store.py says what
each survives).

Readers differ only in what they do with a bad file: the supervisor moves it aside and starts CLOSED
(`load(..., move_bad=True)`); `status`, `watch` and the scripts only read and report (`load` / `read_dict`).

    >>> snapshot, warning = load(Path("/tmp/ralph-example/.ralph-supervise"))
    >>> snapshot is None and warning is None  # no file yet: a fresh CLOSED breaker
    True
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ralph_supervisor import store
from ralph_supervisor.breaker import Snapshot
from ralph_supervisor.text import one_line

NAME = "state.json"
READ_LIMIT = 1 << 20
"""A state file is a few KB; more than this is not one of ours."""


def path(state_dir: Path) -> Path:
    return state_dir / NAME


def _read(state_dir: Path) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """(the object, None, None), or (None, what is wrong, the OS error text when it could not be read)."""
    file = path(state_dir)
    try:
        with open(file, "rb") as fh:
            raw = fh.read(READ_LIMIT + 1)
    except FileNotFoundError:
        return None, None, None
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or exc})", str(exc.strerror or exc)
    if len(raw) > READ_LIMIT:
        return None, f"larger than {READ_LIMIT} bytes", None
    try:
        value = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        return None, f"not valid JSON ({one_line(exc, 200)})", None
    if not isinstance(value, dict):
        return None, "not a JSON object", None
    return value, None, None


def read_dict(state_dir: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The file's JSON object as it is, or None and a short note saying why not (a missing file is not worth
    a note). Never moves or rewrites the file."""
    value, problem, os_error = _read(state_dir)
    if os_error is not None:
        return None, f"cannot read {NAME}: {os_error}"
    return value, None if problem is None else f"{NAME} is {problem} (ignored)"


def load(state_dir: Path, *, move_bad: bool = False) -> tuple[Snapshot | None, str | None]:
    """The breaker snapshot the file holds; None when there is none or it cannot be trusted, with a one-line
    warning in the second case. With `move_bad`, a bad file is moved aside (`state.json.corrupt-<time>`)."""
    data, problem, _ = _read(state_dir)
    if data is not None:
        try:
            return Snapshot.from_dict(data.get("breaker", data)), None
        except (ValueError, OverflowError, RecursionError, TypeError) as exc:
            problem = one_line(exc, 200)
    if problem is None:
        return None, None
    problem = f"{path(state_dir)}: {problem}"
    if move_bad and os.path.lexists(path(state_dir)):
        moved = store.move_aside(path(state_dir))
        if moved is not None:
            problem += f"; moved to {moved.name}"
    return None, problem


def save(state_dir: Path, snapshot: Snapshot, *, supervisor_pid: int | None = None,
         limit_until: float | None = None, durable: bool = True) -> None:
    """Write the snapshot atomically, with when and by whom (and, during a usage-limit wait, until when: for
    `ls`, which reads files only). Raises OSError (a full disk): the caller warns."""
    data = snapshot.to_dict()
    data["updated_at"] = store.iso_utc()
    if supervisor_pid is not None:
        data["supervisor_pid"] = supervisor_pid
    data["limit_until"] = None if limit_until is None else store.iso_utc(limit_until)
    store.atomic_write_json(path(state_dir), data, durable=durable)
