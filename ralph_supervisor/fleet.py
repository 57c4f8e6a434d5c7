"""`ralph-supervise ls`: every supervisor of this user on this machine, one line per loop.

The registry says which supervisors there are; each loop's own state folder says how it is doing
(`state.json`, which the supervisor rewrites at every iteration start, every finished call and every
transition). `ls` only reads: it asks no control socket (a hung supervisor cannot hang it), takes no
lock, moves no file aside. Everything it reads may be missing or garbage: the row says so and the rest
of the listing goes on.

    rows, problems = collect()          # registry + state folders, as values
    print("\\n".join(table(rows, time.time())))
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ralph_supervisor import registry
from ralph_supervisor.breaker import State
from ralph_supervisor.files import state_json
from ralph_supervisor.format import dollars, duration, time_of_day, tokens
from ralph_supervisor.values import parse_time
STATES = tuple(s.value for s in State)
"""CLOSED, HALF_OPEN, OPEN: the counts of the live view's title."""


@dataclass(frozen=True)
class LoopRow:
    """One loop as `ls` shows it."""

    name: str
    workspace: str
    state_dir: str
    pid: int
    alive: bool
    since: str
    """When the supervisor started (ISO-8601 UTC)."""
    state: str
    """CLOSED, HALF_OPEN, OPEN, or ? when its state.json cannot be read."""
    trigger: str
    iteration: int | None
    tokens_used: int | None
    cost_usd: float | None
    limit_until: str | None
    final: bool
    updated_at: str | None
    """When state.json was last written."""
    note: str
    """What is odd about this loop (final stop, limit wait, unreadable state), or empty."""
    entry: str
    """The registry file."""
    ended_at: str | None = None
    """When the supervisor exited (ISO-8601 UTC), for a loop that ended; None while it runs or when it died."""
    exit_code: int | None = None

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ended": self.ended}


def read_state(state_dir: Path) -> tuple[state_json.Shown, str]:
    """What `ls` shows of state.json (its owner checks each field), and a note when the file is bad."""
    state, note = state_json.shown(state_dir)  # only reads: a bad file is the loop's to move aside
    if state is None:
        return state_json.Shown(), note or ("" if state_dir.is_dir() else "no state folder")
    return state, note or ""


def loop_row(entry: registry.Entry, *, alive: bool, state: state_json.Shown | None = None,
             note: str = "") -> LoopRow:
    """The loop's row; `state` (and its `note`) when the caller read state.json already."""
    if state is None:
        state, note = read_state(Path(entry.state_dir))
    notes = [note] if note else []
    if state.final:
        notes.insert(0, "stopped for good")
    limit = state.limit_until
    if limit and not entry.ended:
        notes.insert(0, f"usage limit until {time_of_day(limit)}")
    if entry.ended:
        notes.insert(0, ended_note(entry.ended_at, entry.exit_code))
    return LoopRow(
        name=entry.name, workspace=entry.workspace, state_dir=entry.state_dir, pid=entry.pid, alive=alive,
        since=entry.started_at, state=state.state, trigger=state.trigger or "none",
        iteration=state.iteration, tokens_used=state.tokens_used, cost_usd=state.cost_usd,
        limit_until=limit, final=state.final, updated_at=state.updated_at,
        note="; ".join(notes), entry=str(entry.path), ended_at=entry.ended_at, exit_code=entry.exit_code,
    )


def collect(dirs: list[Path] | None = None) -> tuple[list[LoopRow], list[str], list[Path]]:
    """Rows (sorted by name, then workspace), problem lines, and the files `--prune` would remove."""
    dirs = registry.reading_dirs() if dirs is None else dirs
    listings = [registry.read_registry(folder) for folder in dirs]
    problems: list[str] = []
    if all(listing.missing for listing in listings):
        problems.append(listings[0].problems[0])
    for listing in listings:
        if not listing.missing:
            problems.extend(listing.problems)
    boot = registry.current_boot_id()
    rows: list[LoopRow] = []
    prunable: list[Path] = []
    for listing in listings:
        prunable.extend(p for p in listing.garbage if not p.is_dir())
        for entry in listing.entries:
            alive = registry.is_alive(entry, registry.start_ticks(entry.pid), boot)
            if not alive:
                prunable.append(entry.path)
            rows.append(loop_row(entry, alive=alive))
    rows.sort(key=lambda r: (r.name, r.workspace, r.entry))
    return rows, problems, prunable


# ---------------------------------------------------------------------------------------------
# Pure: how a row reads


def ended_note(ended_at: str | None, exit_code: int | None) -> str:
    """`ended 06:12, exit 2`: when the supervisor exited (local time) and with which code."""
    return f"ended {time_of_day(ended_at) if ended_at else '?'}, exit {'?' if exit_code is None else exit_code}"


def age(since: str | None, now: float) -> str:
    """How long ago (45s, 12m05s, 3h05m, 2d04h); ? when unknown."""
    moment = parse_time(since)
    return duration(None if moment is None else now - moment)


def spend(row: LoopRow) -> str:
    """Tokens (and dollars, when the agent reports them) of the current run."""
    parts = []
    if row.tokens_used is not None:
        parts.append(tokens(row.tokens_used))
    if row.cost_usd is not None:
        parts.append(dollars(row.cost_usd))
    return " ".join(parts) or "-"


COLUMNS = ("NAME", "STATE", "TRIGGER", "ITER", "SPEND", "PID", "SINCE", "ALIVE", "WORKSPACE", "NOTE")


def cells(row: LoopRow, now: float) -> tuple[str, ...]:
    return (row.name, row.state, row.trigger if row.trigger not in ("", "none") else "-",
            "?" if row.iteration is None else str(row.iteration), spend(row), str(row.pid), age(row.since, now),
            "yes" if row.alive else "ended" if row.ended else "STALE", row.workspace, row.note)


def table(rows: list[LoopRow], now: float) -> list[str]:
    """Aligned plain-text lines (a header, then one per loop) that grep and awk can read."""
    grid = [COLUMNS] + [cells(row, now) for row in rows]
    widths = [max(len(line[i]) for line in grid) for i in range(len(COLUMNS))]
    right = {"ITER", "PID"}
    out = []
    for line in grid:
        parts = [value.rjust(w) if COLUMNS[i] in right else value.ljust(w)
                 for i, (value, w) in enumerate(zip(line, widths))]
        out.append("  ".join(parts).rstrip())
    return out


# ---------------------------------------------------------------------------------------------
# The command


def main(*, as_json: bool = False, prune: bool = False, now: float | None = None) -> int:
    """Print the listing (and prune ended and stale entries); always 0: a bad registry is reported, never fatal."""
    import time

    rows, problems, prunable = collect()
    if prune and prunable:
        removed, failures = registry.prune(prunable)
        gone = {str(path) for path in removed}
        rows = [row for row in rows if row.entry not in gone]
        count = len(removed)
        print(f"ralph-supervise ls: removed {count} ended, stale or unreadable entr{'y' if count == 1 else 'ies'}",
              file=sys.stderr)
        if failures:
            problems.append(f"could not remove {len(failures)} entr{'y' if len(failures) == 1 else 'ies'} "
                            f"({failures[0]}{'; ...' if len(failures) > 1 else ''})")
    for problem in problems:
        print(f"ralph-supervise ls: {problem}", file=sys.stderr)
    if as_json:
        print(json.dumps([row.to_json() for row in rows], indent=2))
    elif rows:
        print("\n".join(table(rows, time.time() if now is None else now)))
    elif not problems:
        print("no supervisor is registered", file=sys.stderr)
    return 0
