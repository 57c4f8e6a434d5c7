"""The tick: what time alone decides, and what is only seen by looking.

Each tick reaps what exited, keeps the state folder whole, follows the agent's log files, samples the tree
(the calls no shim announced, `tree.json` for a successor's sweep), ends or begins waits, updates the
countdown, and asks the breaker what the time says (cooldowns, stalls, trial bounds). The tick is fast when
a call may be starting and slow when nothing moves (`tick_rate.py`); output while no call is known wakes it
at once (`wake`).

    >>> ticker.run()        # doctest: +SKIP  (a task until it is cancelled)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from ralph_supervisor.breaker import Breaker, Decision
from ralph_supervisor.countdown import waits_now
from ralph_supervisor.evidence.iterations import CallEvidence
from ralph_supervisor.process.linux import ProcStat
from ralph_supervisor.process.tree import member_of, walk
from ralph_supervisor.records import Warnings
from ralph_supervisor.runtime.child import Child
from ralph_supervisor.runtime.wait_episode import WaitEpisode
from ralph_supervisor.tick_rate import tick_interval

log = structlog.get_logger("ralph_supervisor")

TICK_MIN = 0.02
"""Woken by output: look now, but not more often than this."""
TEXTFILE_EVERY = 10.0
"""Seconds between two writes of `--metrics-textfile`."""


class Ticker:
    """The supervisor's tick. Event loop only (`wake` too)."""

    def __init__(self, settings: Any, *, breaker: Breaker, child: Child, actions: Any, tree: Any, calls: Any,
                 tracker: Any, tap: Any, tailer: Any, silence: Any, episode: WaitEpisode, loop_waits: Any,
                 keeper: Any, member_record: Any, countdown: Any, metrics: Any, sd: Any, warnings: Warnings,
                 keep_whole: Callable[[], Awaitable[None]], destroying: Callable[[str], None],
                 apply: Callable[[Decision], Awaitable[None]], started_wall: float) -> None:
        self._settings = settings
        self._breaker = breaker
        self._child = child
        self._actions = actions
        self._tree = tree
        self._calls = calls
        self._tracker = tracker
        self._tap = tap
        self._tailer = tailer
        self._silence = silence
        self._episode = episode
        self._loop_waits = loop_waits
        self._keeper = keeper
        self._member_record = member_record
        self._countdown = countdown
        self._metrics = metrics
        self._sd = sd
        self._warnings = warnings
        self._keep_whole = keep_whole
        self._destroying = destroying
        self._apply = apply
        self._started_wall = started_wall
        self._wake = asyncio.Event()
        self._interval_call: CallEvidence | None = None
        self._call_changed_at = time.monotonic()
        """The call the tick last saw and since when: a quiet loop is looked at less often (tick_rate.py)."""
        self.tree_size = 0
        """Processes in the tree at the last tick."""
        self._last_textfile = 0.0

    def wake(self) -> None:
        """Look now: output while no call is known (a short call may be running)."""
        self._wake.set()

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a fault of ours never takes the child down
                log.exception("tick_failed", error=str(exc))
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), self._interval(time.monotonic()))
                await asyncio.sleep(TICK_MIN)
            except asyncio.TimeoutError:
                pass

    def _interval(self, now: float) -> float:
        """Sample fast only when a call may be starting (output, no call yet) or has just started; slower
        while a long call runs: its end can wait a moment, and a stall is judged in minutes (tick_rate.py)."""
        call = self._tracker.current
        if call is not self._interval_call:
            self._interval_call, self._call_changed_at = call, now
        return tick_interval(now, call_started_at=call.started_at if call is not None else None,
                             last_output_at=self._tap.counters.last_output_at, changed_at=self._call_changed_at,
                             watchdog=self._sd.watchdog_interval)

    async def tick(self) -> None:
        now = time.time()
        self._child.collect_exits()
        await self._keep_whole()
        gone = self._keeper.repository_gone()  # the user's .git deleted: its commits are in the store
        if gone is not None:
            self._destroying(gone)
        self._tailer.poll()
        stopping = self._actions.stopping
        stats = self._tree.sample() if not stopping else []
        self._record_members(stats)
        if self._tracker.marker is None and not stopping:
            self._calls.sample(stats, now)
        episode = self._episode
        await episode.expire(now)
        if self._countdown is not None:
            self._countdown.update(waits_now(limit_until=episode.until, breaker=self._breaker, now=now,
                                             limit_kind=episode.kind), now)
        await episode.begin_due(now, stopping=stopping)
        in_retries = self._loop_waits.outage.on and self._tracker.current is not None  # an agent waiting for its API
        silent_since = None if in_retries else self._silent_since(stats, now)
        waiting = None
        if (silent_since is None and not in_retries and self._child.info is not None and not self._actions.paused
                and not stopping):
            waiting = self._calls.waiting_since()  # no call runs: since when the loop has not reached its agent
        if waiting is not None:
            decision = self._breaker.tick(now, silent_since=waiting, waiting_for_call=True,
                                          loop_errors=tuple(self._tracker.loop_errors))
        else:
            decision = self._breaker.tick(now, silent_since=silent_since)
        if decision.changed:
            await self._apply(decision)
        self._sd.maybe_watchdog(time.monotonic())
        self.write_metrics_textfile()

    def write_metrics_textfile(self, force: bool = False) -> None:
        path = self._settings.metrics_textfile
        if path is None:
            return
        now = time.monotonic()
        if force or now - self._last_textfile >= TEXTFILE_EVERY:
            self._last_textfile = now
            self._metrics.write_textfile(path)

    def _record_members(self, stats: list[ProcStat]) -> None:
        """Keep `tree.json` current (cheap when unchanged) so a successor can sweep what we leave."""
        size = len(stats)
        if size != self.tree_size:
            self.tree_size = size
            self._metrics.tree_size(size)
        try:
            self._member_record.record([member_of(stat) for stat in stats], time.monotonic())
        except OSError as exc:
            self._warnings.once("tree_record_failed", error=str(exc))

    def _silent_since(self, stats: list[ProcStat], now: float) -> float | None:
        """Since when the current call (or, in marker mode, the tree) has been silent on every channel."""
        if self._actions.paused or not stats:
            return None
        call = self._tracker.current
        if self._tracker.marker is None:
            if call is None or call.pid is None:
                return None
            watched = walk(stats, [call.pid], include_roots=True) + self._calls.container_processes()
        else:
            watched = stats
        last_output = time.time() - (time.monotonic() - self._tap.counters.last_output_at)
        started = call.started_wall if call is not None else self._started_wall
        return self._silence.silent_since(watched, now, call_started=started, last_output=last_output)
