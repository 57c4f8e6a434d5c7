"""Files rewritten at every agent call, written at most once per `PACE_S` while calls come faster than that.

`state.json`'s counters, `ledger.json` and `daily-spend.json` change at every call. Each write is a new file
renamed over the old one, which costs the kernel most of a millisecond on a busy filesystem, so a loop making
ten short calls a second would have the supervisor spend a third of its time rewriting the same three files.
While calls come slower than `PACE_S` apart (every real agent call takes seconds), each change is written at
once, as it always was. Faster, a change waits until `PACE_S` after the file's last write, and whatever is
newest then is written: nothing is skipped, the file is at most `PACE_S` behind. A write that must not wait
(a transition, the start of a call, the exit, a report about to read the files) is made at once, and takes
whatever was waiting with it.

    >>> when_written(last_written=None, now=10.0, every_s=PACE_S)   # nothing written yet: at once
    10.0
    >>> when_written(last_written=10.0, now=10.1, every_s=PACE_S)   # written 0.1 s ago: 0.4 s from now
    10.5
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

PACE_S = 0.5
"""At most one write per file in this time, while changes come faster."""


def when_written(*, last_written: float | None, now: float, every_s: float) -> float:
    """When a change made at `now` is written: at once, or `every_s` after the file's last write. A clock
    that went back (a last write "in the future") never holds a change longer than `every_s`."""
    if last_written is None or now >= last_written + every_s or last_written > now:
        return now
    return last_written + every_s


class PacedFile:
    """One file's writes: `changed` writes now or soon, `write_now` at once, `flush` what waits. `write` writes
    the owner's newest content (and handles its own errors). Event loop only; with no running event loop
    (a command, a test) every change is written at once."""

    def __init__(self, write: Callable[[], None], every_s: float = PACE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._write = write
        self._every_s = every_s
        self._clock = clock
        self._last: float | None = None
        self._timer: asyncio.TimerHandle | None = None

    @property
    def waiting(self) -> bool:
        """A change is waiting to be written."""
        return self._timer is not None

    def changed(self) -> None:
        """The content changed: write it now, or at the time `when_written` says (one write for every change
        made meanwhile)."""
        if self._timer is not None:
            return  # the write already waiting will take this change too
        now = self._clock()
        at = when_written(last_written=self._last, now=now, every_s=self._every_s)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if at <= now or loop is None:
            self.write_now()
        else:
            self._timer = loop.call_later(at - now, self._due)

    def write_now(self) -> None:
        """Write at once; a write that was waiting is this one."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._last = self._clock()
        self._write()

    def flush(self) -> None:
        """Write now what is waiting, if anything is (the exit; a reader about to read the file)."""
        if self._timer is not None:
            self.write_now()

    def _due(self) -> None:
        self._timer = None
        self.write_now()
