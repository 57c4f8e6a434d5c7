"""A countdown for every wait: how long until the loop goes on, said on the terminal while it waits.

A usage-limit wait can last hours and a cooldown many minutes; a terminal that shows nothing all that time
looks hung. So while the supervisor waits, one line says what it waits for and how long is left: updated
in place on a terminal (the outlet's status line, `terminal/our_lines.py`, so the echo and our lines never
garble it), and as a plain line every `every_s` seconds where the output is a file or a journal.

A wait is a value (`Wait`); the supervisor says which waits are on (`waits_now`), so another kind of wait
(a usage-ceiling freeze, an outage back-off) plugs in as one more `Wait` there, with nothing to change here.

Pure but for `Countdown.update`, which takes the time as an argument and writes through the terminal.

    >>> said = text(Wait("limit", "LIMIT wait", 1000.0, 4600.0, "resume ends it"), 2200.0, width=80, with_bar=False)
    >>> said == f"⧗ LIMIT wait: 0:40:00 left, until {time_of_day(4600.0, weekday=True)} · resume ends it"
    True
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rich.cells import cell_len

from ralph_supervisor.format import duration, time_of_day
from ralph_supervisor.outcomes import breaker_label

EVERY_S = 300.0
"""Where the output is not a terminal: a plain line this often while a wait lasts."""
BAR = 20
"""Cells of the bar (on a terminal)."""


@dataclass(frozen=True)
class Wait:
    """The loop waits for something that ends by itself at `until` (epoch seconds)."""

    kind: str
    """limit, ceiling (`--usage-ceiling`, `--no-overage`), outage (an outage's back-off), cooldown."""
    label: str
    """What a person reads first: `LIMIT wait`, `OPEN no-progress, cooldown`."""
    started: float | None
    """When it began (None: when the countdown first saw it)."""
    until: float
    hint: str = ""
    """How to end it sooner, if there is a way."""


def bar(wait: Wait, now: float, cells: int = BAR) -> str:
    """`━━━━━━━━╺───────────`: how much of the wait is behind."""
    started = now if wait.started is None else wait.started
    span = wait.until - started
    done = 1.0 if span <= 0 else min(1.0, max(0.0, (now - started) / span))
    full = int(done * cells)
    return "━" * full + ("╺" if full < cells else "") + "─" * max(0, cells - full - 1)


def text(wait: Wait, now: float, *, width: int, with_bar: bool = True) -> str:
    """The countdown line for `wait` at `now`, at most `width - 1` cells (a full last column would wrap)."""
    parts = f"⧗ {wait.label}: {duration(wait.until - now, 'left')} left, until {time_of_day(wait.until, weekday=True)}"
    if with_bar:
        parts += f" {bar(wait, now)}"
    if wait.hint:
        parts += f" · {wait.hint}"
    return fit(parts, width - 1)


def fit(line: str, cells: int) -> str:
    if cell_len(line) <= cells:
        return line
    out, used = [], 0
    for char in line:
        used += cell_len(char)
        if used > cells - 1:
            break
        out.append(char)
    return "".join(out) + "…"


def waits_now(*, limit_until: float | None, breaker: Any, now: float, limit_kind: str = "limit") -> list[Wait]:
    """The waits that are on: a freeze until `limit_until` (a usage limit, the usage ceiling or an outage's
    back-off, by `limit_kind`; the words stay short, so the line fits 100 columns), the breaker's cooldown (a
    pause or a kill that ends by itself)."""
    waits = []
    if limit_until is not None:
        label = {"ceiling": "CEILING wait", "outage": "OUTAGE wait"}.get(limit_kind, "LIMIT wait")
        kind = limit_kind if limit_kind in ("ceiling", "outage") else "limit"
        waits.append(Wait(kind, label, None, limit_until, "`ralph-supervise resume` ends it"))
    cooldown = breaker.seconds_until_half_open(now)
    if cooldown is not None and cooldown > 0:
        snapshot = breaker.snapshot()
        started = snapshot.opened_at if snapshot.opened_at is not None else now
        waits.append(Wait("cooldown", f"{breaker_label('OPEN', snapshot.trigger)}, cooldown", started, now + cooldown,
                          "`ralph-supervise resume` starts the trial now"))
    return waits


@dataclass
class Countdown:
    """Says the current wait: in place on a terminal (`status`: the outlet's status line), else a plain
    line (`line`) every `every_s`. Told the waits at every supervisor tick; writes only when the text changes."""

    status: Callable[[str | None], None] | None
    """Sets (or, with None, clears) the terminal's in-place line; None where the output is not a terminal."""
    line: Callable[[str], None]
    every_s: float = EVERY_S
    width: Callable[[], int] = lambda: 100
    _shown: str | None = None
    _said_at: dict[str, float] | None = None
    _seen: dict[tuple[str, float], float] | None = None

    def update(self, waits: Sequence[Wait], now: float) -> None:
        seen = self._seen if self._seen is not None else {}
        self._seen = {(w.kind, w.until): seen.get((w.kind, w.until), now) for w in waits}
        waits = [w if w.started is not None else replace(w, started=self._seen[(w.kind, w.until)]) for w in waits]
        wait = waits[0] if waits else None
        if self.status is not None:
            shown = None if wait is None else text(wait, now, width=self.width())
            if shown != self._shown:
                self._shown = shown
                self.status(shown)
            return
        said = self._said_at if self._said_at is not None else {}
        self._said_at = {w.kind: said.get(w.kind, now) for w in waits}  # a wait that ended is forgotten
        if wait is not None and now - self._said_at[wait.kind] >= self.every_s:
            self._said_at[wait.kind] = now
            stamp = time_of_day(now, "%H:%M:%S")
            self.line(f"{stamp}  {text(wait, now, width=10_000, with_bar=False)}")

    def close(self) -> None:
        if self.status is not None and self._shown is not None:
            self._shown = None
            self.status(None)


def terminal_width(fd: int, default: int = 100) -> Callable[[], int]:
    def width() -> int:
        try:
            return max(20, os.get_terminal_size(fd).columns)
        except OSError:
            return default
    return width


def countdown_for(settings: Any, terminal: Any) -> Countdown | None:
    """The run's countdown: in the console form only (JSON has the waits' events), and not with `--quiet`."""
    from ralph_supervisor.logging import for_people

    if not for_people(settings.log_format, terminal.stderr) or settings.log_detail == "quiet":
        return None
    stream = terminal.stderr
    return Countdown(status=terminal.status if terminal.status_in_place else None,
                     line=lambda said: stream.write(said + "\n"), every_s=settings.countdown_every,
                     width=terminal_width(2))
