"""`state.json`: the breaker's snapshot, rewritten atomically after every change: durably (fsync) when the
breaker changes state, without fsync when only its counters moved (records.py decides; store.py says what
each survives).

Readers differ only in what they do with a bad file: the supervisor moves it aside and starts CLOSED
(`load(..., move_bad=True)`); `status` and `watch` only read and report (`load` / `read`).
What the file holds besides the breaker (`limit_until`, `updated_at`, `supervisor_pid`) is read here too:
`read` (the breaker checked as the supervisor checks it, for the report and `watch`) and `shown` (each field on its own,
for `ls`, the page and `restore`, which show a loop whatever version wrote its file) are the only readers
that name a key.

    >>> snapshot, warning = load(Path("/tmp/ralph-example/.ralph-supervise"))
    >>> snapshot is None and warning is None  # no file yet: a fresh CLOSED breaker
    True
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ralph_supervisor import store
from ralph_supervisor.breaker import Snapshot, State
from ralph_supervisor.text import one_line
from ralph_supervisor.values import parse_time

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


@dataclass(frozen=True)
class Recorded:
    """The file as the supervisor wrote it: the breaker, checked, and what was saved beside it."""

    snapshot: Snapshot
    limit_until: float | None = None
    """The end of a usage-limit wait the supervisor was in when it wrote the file (None: none)."""


def read(state_dir: Path) -> tuple[Recorded | None, str | None]:
    """The breaker checked as the supervisor checks it (`Snapshot.from_dict`), or None and a one-line note
    (none for a missing file). Never moves or rewrites the file."""
    data, note = read_dict(state_dir)
    return (None, note) if data is None else parse(data)


def parse(data: dict[str, Any]) -> tuple[Recorded | None, str | None]:
    """The file's JSON object as `Recorded`, or None and what is wrong with it in one line."""
    try:
        snapshot = Snapshot.from_dict(data.get("breaker", data))
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        return None, f"{NAME}: {one_line(exc, 160)}"
    return Recorded(snapshot, parse_time(data.get("limit_until"))), None


@dataclass(frozen=True)
class Shown:
    """What the file says, for the views that only show it: each field checked on its own, so a bad field
    costs only itself (`state` is "?" when the file names no valid state)."""

    state: str = "?"
    trigger: str | None = None
    reason: str = ""
    iteration: int | None = None
    tokens_used: int | None = None
    cost_usd: float | None = None
    """The breaker's `cost_used`: the run's dollars so far."""
    total_opens: int = 0
    opened_at: float | None = None
    final: bool = False
    limit_until: str | None = None
    updated_at: str | None = None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def shown(state_dir: Path) -> tuple[Shown | None, str | None]:
    """The file's fields for a view, or None and a note (None for a missing file); never moves the file."""
    data, note = read_dict(state_dir)
    if data is None:
        return None, note
    text = {key: data[key] for key in ("trigger", "reason", "limit_until", "updated_at")
            if isinstance(data.get(key), str)}
    cost = _number(data.get("cost_used"))
    opened = _number(data.get("opened_at"))
    valid = data.get("state") in tuple(s.value for s in State)
    return Shown(
        state=data["state"] if valid else "?",
        trigger=text.get("trigger"),
        reason=text.get("reason", ""),
        iteration=_count(data.get("iteration")),
        tokens_used=_count(data.get("tokens_used")),
        cost_usd=cost if cost is not None and 0 <= cost < 1e12 else None,
        total_opens=_count(data.get("total_opens")) or 0,
        opened_at=opened if opened is not None and opened > 0 else None,
        final=data.get("final") is True,
        limit_until=text.get("limit_until"),
        updated_at=text.get("updated_at"),
    ), None if valid else f"{NAME} has no valid state"


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
