"""From an ended call to its verdict: the call's report, built when its late output is in, judged in call order.

A call's report waits briefly for what the pipes and tailed files still hold of it (a tee may still be
writing its last line; the next call's start ends the wait), takes what the workspace saw change during it,
and goes to the judge after every report before it. When the verdict is in, the gate lets the next call go
(its shim's pending mark goes, the sampled calls frozen meanwhile thaw). Two kinds of call have no process
to end: a call in marker mode (a marker line ends one and begins the next) and a call seen only in the
output (a complete reply no process was seen for: an iteration from the end of the one before it, with the
files changed in between). A `missing` agent is a blocked call of its own.

    reports = CallReports(tracker, workspace, pool, hooks, gate)
    reports.finish(call, ended, key, status, by_timeout=False)
    await reports.wait()
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import structlog

from ralph_supervisor.agents.reply_end import reply_ends_in
from ralph_supervisor.evidence.call_gate import CallGate
from ralph_supervisor.evidence.iterations import SETTLE_SECONDS, CallEvidence, IterationTracker, build_report
from ralph_supervisor.evidence.shims import Notice
from ralph_supervisor.iteration import IterationReport
from ralph_supervisor.process.linux import describe_wait_status
from ralph_supervisor.tasks import log_failure

if TYPE_CHECKING:
    from ralph_supervisor.evidence.calls import CallHooks

log = structlog.get_logger(__name__)

REPLY_SETTLE_SECONDS = 0.3
"""A reply end in output no call claimed becomes an iteration only this long after it was read: a call's
notice, its late output and the sampler have all had their turn by then."""


class CallReports:
    """Builds and delivers the reports of ended calls, one after the other. Lives on the event loop."""

    def __init__(self, tracker: IterationTracker, workspace: Any, pool: concurrent.futures.Executor,
                 hooks: CallHooks, gate: CallGate) -> None:
        self.tracker = tracker
        self.workspace = workspace
        self.pool = pool
        self.hooks = hooks
        self.gate = gate
        self.idle_since = time.time()
        """When the last call ended (or the loop started): the wait for the next one counts from then."""
        self.reply_boundary = 0.0
        """When the last reply seen only in the output ended (a process begun before it was that call's)."""
        self._finishing: asyncio.Future[None] | None = None
        self._settle: asyncio.Event | None = None
        self._last_usage_limited = False

    def began(self) -> None:
        """A new call began: the previous one's late output is over."""
        if self.pending() and self._settle is not None:
            self._settle.set()

    def finish(self, call: CallEvidence, ended: float, key: str, status: int | None, *, by_timeout: bool) -> None:
        """Call `call` (workspace segment `key`) ended with wait status `status`; `by_timeout`: GNU timeout
        started it (a signal death is a timeout)."""
        if self.tracker.current is call:
            self.tracker.finish(ended)
        self.idle_since = ended
        delta = self.pool.submit(self.workspace.end_iteration, key)  # closes here in the queue
        code, sig = describe_wait_status(status)
        self._settle = settle = asyncio.Event()
        self._chain(self._report(call, ended, delta, settle, code, sig, timed_out=sig is not None and by_timeout))

    def missing(self, notice: Notice) -> None:
        """The agent a shim looked for is not installed: a blocked call of its own (none while one runs)."""
        if self.tracker.current is not None:
            return
        now = time.time()
        call = self.tracker.start(time.monotonic(), now, None, None, notice.name, notice.argv, announced_at=notice.at)
        self.hooks.started(call, now)
        self.tracker.finish(now)
        searched = notice.target or "(empty)"
        report = build_report(call, ended_at=now, files_changed=0, changed_paths=(), commits=0, agent=None,
                              signatures=frozenset(), exit_status=127)
        report = dataclasses.replace(report, failed=True, blocked=True, blocked_reason=(
            f"{notice.name} is not installed: `{notice.name}` was not found on PATH ({searched}); "
            "install it or fix PATH"))
        self.idle_since = now
        self._chain(self._deliver(report, now, call.number))

    def marker_boundary(self, now: float, begin: bool = True) -> None:
        """Marker mode: a marker line ends the call in progress and begins the next."""
        ended = self.tracker.finish(now)
        if ended is not None:
            self.idle_since = now
            delta = self.pool.submit(self.workspace.end_iteration, "")

            async def report() -> None:
                result = await asyncio.wrap_future(delta)
                await self._deliver(self.hooks.build(ended, now, result), now, ended.number)

            self._chain(report())
        if begin:
            call = self.tracker.start(time.monotonic(), now)
            self.pool.submit(self.workspace.begin_iteration, "")
            self.hooks.started(call, now)

    def from_replies(self, now: float, before: float | None = None) -> None:
        """Tick, no call running: each reply that ended in the output no call claimed is an iteration (all
        those read `before` a process that is about to begin, whatever their age)."""
        if self.gate.holding is not None or self.tracker.marker is not None:
            return
        since = max(self.idle_since, self.reply_boundary)
        settled = now - REPLY_SETTLE_SECONDS if before is None else before
        for until in self.tracker.pending_reply_ends(since, reply_ends_in):
            if until > settled:
                break
            call = self.tracker.call_from_output(time.monotonic(), since, until)
            self.hooks.started(call, since)
            delta = self.pool.submit(self.workspace.take_from_gap, since, until)
            self._chain(self._report_from_output(call, until, delta))
            since = self.reply_boundary = self.idle_since = until

    def gap(self, delta: Any) -> None:
        """What the loop changed between two calls (its own `git commit`, a formatter): no call's progress."""
        log.info("changed_between_calls", files_changed=delta.files_changed, commits=delta.commits,
                 paths=list(delta.paths[:10]), iteration=self.tracker.number)

    def pending(self) -> bool:
        """A verdict is due: a report is being put together or judged."""
        return self._finishing is not None and not self._finishing.done()

    async def wait(self) -> None:
        """Until every report still being put together is judged."""
        while self.pending():
            assert self._finishing is not None
            await asyncio.shield(self._finishing)

    def waiting_since(self, released_at: float) -> float | None:
        """Since when the loop has run without an agent call (None while one runs, in marker mode, or
        after a usage-limited call: the loop is probably waiting for the limit to reset). During a wait
        the loop announced, a time in the future; never before calls were last let go (`released_at`)."""
        if self.tracker.marker is not None or self.tracker.current is not None or self._last_usage_limited:
            return None
        # A wait the loop announced (Ralph's hourly call limit) counts from its end, not from the last call.
        return max(self.idle_since, released_at, self.tracker.loop_wait_until)

    # ------------------------------------------------------------------ in call order

    def _chain(self, coro: Awaitable[None]) -> None:
        """Run a report after the ones before it (the breaker judges calls in order)."""
        previous = self._finishing

        async def in_order() -> None:
            if previous is not None:
                try:
                    await asyncio.shield(previous)
                except Exception:  # noqa: BLE001 - its failure was logged; ours still counts
                    pass
            await coro

        self._finishing = asyncio.ensure_future(in_order())
        self._finishing.add_done_callback(functools.partial(log_failure, event="call_report_failed"))

    async def _report(self, call: CallEvidence, ended: float, delta_future: concurrent.futures.Future[Any],
                      settle: asyncio.Event, code: int | None, sig: int | None, *, timed_out: bool) -> None:
        """Wait for the call's late output (briefly), then report it."""
        await self.hooks.settle_output()
        # Output placed by the stream's marks is the call's or not by position, whenever it is read; output
        # told by when it was read (a sampled call's, a tailed file's) may still come: a tee writing its last line.
        if call.start_marks is None or call.end_marks is None or self.hooks.timed_sources():
            try:
                await asyncio.wait_for(settle.wait(), SETTLE_SECONDS)
            except asyncio.TimeoutError:
                pass
            await self.hooks.settle_output()
        self.tracker.claim_late_output(call)
        delta = await asyncio.wrap_future(delta_future)
        report = self.hooks.build(call, ended, delta, exit_status=code, killed_by=sig, timed_out=timed_out)
        await self._deliver(report, ended, call.number)

    async def _report_from_output(self, call: CallEvidence, until: float,
                                  delta_future: concurrent.futures.Future[Any]) -> None:
        delta = await asyncio.wrap_future(delta_future)
        await self._deliver(self.hooks.build(call, until, delta), until, call.number)

    async def _deliver(self, report: IterationReport, ended: float, number: int) -> None:
        self.tracker.release(number)
        self._last_usage_limited = report.usage_limited
        try:
            await self.hooks.report(report, ended)
        finally:
            self.gate.judged(number)
            later = self._finishing  # a verdict after this one is due: its delivery thaws
            self.gate.thaw(still_due=later is not None and not later.done() and later is not asyncio.current_task())
