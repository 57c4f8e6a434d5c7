"""`daily-spend.json`: what this folder's runs spent today (UTC), tokens and dollars, across runs.

`{"date": "YYYY-MM-DD", "tokens": N, "cost_usd": X}`; a new UTC day starts from zero. Each call is added
once, by a read-modify-write under an exclusive lock (`daily-spend.lock`), so no writer's addition is
lost whoever else writes the file. Written at every call, so without fsync (store.py). A corrupt file is moved aside, reported, and today counts from zero.

    >>> spend = add(Path("/tmp/ralph-example/.ralph-supervise"), tokens=1200, cost_usd=0.01, now=0.0)  # doctest: +SKIP
    >>> spend.tokens, spend.cost_usd                                                                   # doctest: +SKIP
    (1200, 0.01)
"""

from __future__ import annotations

import fcntl
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ralph_supervisor import store

NAME = "daily-spend.json"
LOCK_NAME = "daily-spend.lock"


def path(state_dir: Path) -> Path:
    return state_dir / NAME


@dataclass(frozen=True)
class DailySpend:
    date: str
    tokens: int = 0
    cost_usd: float = 0.0

    def today(self, epoch: float) -> DailySpend:
        day = store.utc_day(epoch)
        return self if self.date == day else DailySpend(day)


def _valid(data: dict[str, object]) -> DailySpend | None:
    date, tokens, cost = data.get("date"), data.get("tokens"), data.get("cost_usd", 0.0)
    if not isinstance(date, str) or isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        return None
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not math.isfinite(cost) or cost < 0:
        return None
    return DailySpend(date, tokens, float(cost))


def load(state_dir: Path, now: float) -> tuple[DailySpend, str | None]:
    """Today's spend so far, and a one-line warning when the file was corrupt (moved aside, not trusted)."""
    file = path(state_dir)
    try:
        data = store.read_json_object(file)
    except store.CorruptFile as exc:
        moved = f"; moved to {exc.moved_to.name}" if exc.moved_to else ""
        return DailySpend(store.utc_day(now)), f"{exc}{moved}; today's spend counts from 0"
    if data is None:
        return DailySpend(store.utc_day(now)), None
    spend = _valid(data)
    if spend is None:
        moved = store.move_aside(file)
        where = f"; moved to {moved.name}" if moved else ""
        return DailySpend(store.utc_day(now)), f"{file}: bad date, tokens or cost_usd field{where}; today's spend counts from 0"
    return spend.today(now), None


@contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    fd = os.open(state_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def add(state_dir: Path, tokens: int, cost_usd: float, now: float) -> tuple[DailySpend, str | None]:
    """Add one call's spend to today's and return the new total (and a warning if the old file was bad).
    Raises OSError when the folder cannot be written (the caller counts in memory and warns once)."""
    with _locked(state_dir):
        spend, warning = load(state_dir, now)
        spend = DailySpend(spend.date, spend.tokens + max(0, tokens), spend.cost_usd + max(0.0, cost_usd))
        store.atomic_write_json(path(state_dir), {"date": spend.date, "tokens": spend.tokens,
                                                  "cost_usd": round(spend.cost_usd, 6)}, durable=False)
    return spend, warning
