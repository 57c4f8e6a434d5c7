"""Background asyncio tasks: work the event loop starts and does not await, kept and never failing silently.

A task nobody awaits loses its exception: asyncio only complains about it when the task is collected, if
ever. Every such task of ours gets `log_failure` as a done-callback, so a fault in an apply, a hook or a call's
report is one event in `events.jsonl` and never takes the supervisor down.

    >>> tasks = Background()                       # doctest: +SKIP
    >>> tasks.spawn(apply(decision))               # doctest: +SKIP
    >>> await tasks.settle(deadline)               # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any

import structlog

log = structlog.get_logger("ralph_supervisor")


def log_failure(task: asyncio.Future[Any], *, event: str = "supervisor_task_failed") -> None:
    """A done-callback: the task's exception, if it raised one, as one error event."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.error(event, error=repr(exc))


class Background:
    """The event loop's background tasks: kept until done (so they are not collected half-way), each one's
    failure logged, and waited for at shutdown. Event loop only."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(log_failure)
        return task

    async def settle(self, deadline: float) -> None:
        """Wait for the tasks running now, each at most until `deadline` (monotonic); none is cancelled."""
        for task in list(self._tasks):
            try:
                await asyncio.wait_for(asyncio.shield(task), max(0.01, deadline - time.monotonic()))
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - its failure is logged by log_failure
                pass
