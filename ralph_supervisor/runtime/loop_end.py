"""The loop ended by itself: the call in progress is finished, the rest of the tree cleared, and `run` exits
with the loop's own code (or 2, when a verdict on its last iterations opens the breaker for good).

    >>> child = Child(..., on_exit=loop_end.child_exited)   # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from ralph_supervisor import events
from ralph_supervisor.breaker import Breaker
from ralph_supervisor.decisions import EXIT_FOR_GOOD
from ralph_supervisor.notify import notice_for_child_exit
from ralph_supervisor.runtime.child import Child
from ralph_supervisor.runtime.lifecycle import Lifecycle
from ralph_supervisor.tasks import Background

ANALYSIS_WAIT_S = 5.0
"""At most this long for the analysis to read the loop's last output."""


class LoopEnd:
    """What follows the loop's own exit. Event loop only."""

    def __init__(self, settings: Any, *, breaker: Breaker, tracker: Any, notifier: Any, tap: Any, analysis: Any,
                 tree: Any, calls: Any, verify: Any, keeper: Any, child: Child, lifecycle: Lifecycle,
                 background: Background, stop_tree: Callable[[str], Awaitable[None]],
                 wait_over: Callable[[], Awaitable[None]]) -> None:
        self._settings = settings
        self._breaker = breaker
        self._tracker = tracker
        self._notifier = notifier
        self._tap = tap
        self._analysis = analysis
        self._tree = tree
        self._calls = calls
        self._verify = verify
        self._keeper = keeper
        self._child = child
        self._life = lifecycle
        self._background = background
        self._stop_tree = stop_tree
        self._wait_over = wait_over

    def child_exited(self, code: int) -> None:
        """The loop's own process ended, not by our hand."""
        self._notifier.send(notice_for_child_exit(code=code, workspace=str(self._settings.workspace),
                                                  state=self._breaker.state.value, trigger=self._breaker.trigger,
                                                  iteration=self._tracker.number))
        self._background.spawn(self._finish(code))

    async def _finish(self, code: int) -> None:
        self._child.ended_by_itself = True  # a verdict that comes in while the last verifies run restarts nothing
        try:
            await self._wait_over()  # a wait the loop exited in is over: said, not left open in the records
            await self._tap.wait_closed(timeout=1.0)
            # The last output may still be in analysis: in marker mode it can start the very call to finish.
            await asyncio.to_thread(self._analysis.wait_done, self._tap.last_seq, ANALYSIS_WAIT_S)
            if self._tree.scan():
                await self._stop_tree(events.STOP_CHILD_EXITED)
            await self._calls.finish_current()
            if self._verify is not None:
                breaker = self._breaker
                opens = breaker.total_opens
                code = await asyncio.to_thread(self._verify.finish, code, self._keeper.idle)
                if breaker.total_opens > opens and (breaker.final or self._settings.on_open == "stop"):
                    code = EXIT_FOR_GOOD  # a verdict on the last iterations opened the breaker for good
        finally:
            self._life.finish(code)  # whatever went wrong in the bookkeeping, the child's code is the answer
