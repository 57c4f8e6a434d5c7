"""The silence meter: since when the current call has been quiet on every channel (the `stall` rule).

A call is silent while it prints nothing (pipes and tailed files), changes no file outside the ignored
paths, and uses under 1 % of one core on average. CPU is judged over windows of a second, from the CPU
ticks of the processes watched (the call's subtree, or the whole tree in marker mode), so a burst of
work resets the silence and a sleeping poller does not.

Everything takes the time as an argument; the meter reads no clock.

    >>> meter = SilenceMeter(now=0.0)
    >>> meter.silent_since([], now=5.0, call_started=0.0, last_output=0.0)
    0.0
"""

from __future__ import annotations

from collections.abc import Iterable

from ralph_supervisor.process.linux import CLOCK_TICKS, ProcStat

CPU_ACTIVE_FRACTION = 0.01
"""Below this share of one core a call counts as idle."""
CPU_WINDOW_SECONDS = 1.0


class SilenceMeter:
    """Remembers the last file change and the last busy CPU window; says since when all was quiet."""

    def __init__(self, now: float) -> None:
        self.last_change = now
        self.last_cpu_active = now
        self._cpu_seen: dict[tuple[int, int], int] = {}
        self._window_start = now
        self._window_ticks = 0

    def file_changed(self, now: float) -> None:
        self.last_change = now

    def restart(self, now: float) -> None:
        """Silence counts from here (a call begins, a frozen tree runs again)."""
        self.last_change = now
        self.last_cpu_active = now

    def silent_since(self, watched: Iterable[ProcStat], now: float, *, call_started: float,
                     last_output: float) -> float:
        """The latest of: the call's start, its last output, the last file change, the last busy CPU window."""
        ticks = 0
        seen: dict[tuple[int, int], int] = {}
        for stat in watched:
            key = (stat.pid, stat.start_ticks)
            seen[key] = stat.cpu_ticks
            ticks += max(0, stat.cpu_ticks - self._cpu_seen.get(key, stat.cpu_ticks))
        self._cpu_seen = seen
        self._window_ticks += ticks
        window = now - self._window_start
        if window >= CPU_WINDOW_SECONDS:
            if self._window_ticks / CLOCK_TICKS / window >= CPU_ACTIVE_FRACTION:
                self.last_cpu_active = now
            self._window_start, self._window_ticks = now, 0
        return max(call_started, last_output, self.last_change, self.last_cpu_active)
