"""The tree frozen for what the loop cannot fix: a usage limit, the usage ceiling, an API outage's back-off.

When to wait and until when is decided elsewhere (`limit_wait.py` for usage limits, `loop_waits.py` for the
ceiling and outages); this part carries one wait out: it freezes the tree, keeps `limit_until` for
`state.json` and `status`, tells the metrics, systemd and the notices, and thaws the tree when the time is
up or on `resume`. The breaker stays CLOSED throughout and no rule counts the wait. A wait only begins on
a running, CLOSED, unpaused tree: a wait never takes over from an open or a pause.

    >>> await episode.begin(wait, iteration=7)        # doctest: +SKIP
    >>> await episode.expire(now)                      # doctest: +SKIP  (its time is up: thawed)
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from ralph_supervisor import events, store
from ralph_supervisor.breaker import Breaker, Decision, State
from ralph_supervisor.limit_wait import Wait
from ralph_supervisor.notify import notice_for_limit_wait
from ralph_supervisor.records import Warnings
from ralph_supervisor.runtime.lifecycle import Lifecycle

log = structlog.get_logger("ralph_supervisor")


class WaitEpisode:
    """The wait the tree is frozen for, if any. Event loop only."""

    def __init__(self, settings: Any, *, breaker: Breaker, actions: Any, loop_waits: Any, silence: Any,
                 metrics: Any, notifier: Any, warnings: Warnings, lifecycle: Lifecycle,
                 child_running: Callable[[], bool], iteration: Callable[[], int],
                 apply: Callable[[Decision], Awaitable[None]], save: Callable[[], None],
                 tell_systemd: Callable[[], None]) -> None:
        self._settings = settings
        self._breaker = breaker
        self._actions = actions
        self._loop_waits = loop_waits
        self._silence = silence
        self._metrics = metrics
        self._notifier = notifier
        self._warnings = warnings
        self._life = lifecycle
        self._child_running = child_running
        self._iteration = iteration
        self._apply = apply
        self._save = save
        self._tell_systemd = tell_systemd
        self.until: float | None = None
        """While the tree is frozen for a wait: until when (epoch seconds)."""
        self.kind = "limit"
        """The kind of the last wait begun (`Wait.kind`): `limit`, `ceiling` or `outage`."""

    @property
    def frozen_for(self) -> str | None:
        """The kind of the wait the tree is frozen for now, None when it is not."""
        return self.kind if self.until is not None else None

    async def begin(self, wait: Wait, iteration: int) -> None:
        """Freeze the tree until the wait is over (the breaker stays CLOSED; no rule counts it)."""
        if wait.ignored_reset is not None:
            self._warnings.once("limit_reset_ignored", reset=store.iso_utc(wait.ignored_reset),
                                detail="a reset time in the past or more than 7 days ahead is not believed")
        async with self._actions.lock:
            if (self._life.exiting or not self._child_running() or self._breaker.state is not State.CLOSED
                    or self._actions.paused):
                return
            await self._actions.pause(iteration)
            self.until = wait.until
            self.kind = wait.kind
            self._save()
            log.info(events.LIMIT_WAIT_STARTED, until=store.iso_utc(wait.until), known_reset=wait.known_reset,
                     reason=wait.reason, iteration=iteration, kind=wait.kind)
            self._metrics.limit_wait(wait.until)
            self._tell_systemd()
            self._notifier.send(notice_for_limit_wait(until=store.iso_utc(wait.until), reason=wait.reason,
                                                      workspace=str(self._settings.workspace), iteration=iteration,
                                                      kind=wait.kind))

    async def end(self, why: str) -> None:
        """Thaw the tree frozen for a wait (its time is up, or `resume`). Call with `TreeActions.lock` held."""
        if self.until is None:
            return
        self.until = None
        self._save()
        self._metrics.limit_wait(None)
        log.info(events.LIMIT_WAIT_ENDED, why=why, iteration=self._iteration())
        if self._actions.paused and self._breaker.state is State.CLOSED:
            self._silence.restart(time.time())
            await self._actions.resume(self._iteration())
        self._tell_systemd()

    async def loop_exited(self) -> None:
        """The loop ended by itself while the tree was frozen for a wait (it was on its way out when the
        freeze came): the wait is over, said once; what is left of the tree is stopped next. The lock comes
        first: a wait being begun (its freeze under way when the loop exited) has set its time by then."""
        async with self._actions.lock:
            await self.end("the loop exited")

    def taken_over(self) -> None:
        """A pause or stop by hand takes over from the wait: no thaw when its time is up. Lock held."""
        self.until = None
        self._metrics.limit_wait(None)

    async def expire(self, now: float) -> None:
        """Each tick: a wait whose time is up ends."""
        if self.until is not None and now >= self.until:
            async with self._actions.lock:
                await self.end("the limit has reset")

    async def begin_due(self, now: float, *, stopping: bool) -> None:
        """Each tick: an outage longer than `--outage-max` begins its back-off (after three, the final open)."""
        due = self._loop_waits.due(now) if self.until is None and not self._actions.paused and not stopping else None
        if isinstance(due, Wait):
            await self.begin(due, self._iteration())
        elif due is not None and not self._life.exiting:
            await self._apply(self._breaker.verdict_open("outage", due.reason, now))
