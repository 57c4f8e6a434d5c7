"""What the supervisor does to the whole tree: pause, resume, stop; one at a time, and on the record.

Every action runs off the event loop (the tree may hold hundreds of processes) and under one lock: a
resume interleaved with a pause could thaw a tree the pause still froze, leaving it running while the
supervisor believes it paused. Each action logs its event (`tree_paused`, `tree_resumed`, `tree_stopped`)
and tells the metrics. With a call gate (`calls`, evidence/call_gate.py), a pause or a stop
first holds the calls (no new one may start; the running ones are cut short), a resume releases them, and
a stop goes in the loop's order (`leader`: the loop's pid) killing agent calls that start meanwhile.

    >>> actions = TreeActions(tree, grace=10.0, metrics=metrics, leader=lambda: child_pid)  # doctest: +SKIP
    >>> actions.calls = calls.gate                                                             # doctest: +SKIP
    >>> async with actions.lock:                                                                    # doctest: +SKIP
    ...     await actions.pause(iteration=7)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from ralph_supervisor import events
from ralph_supervisor.evidence.containers import ContainerCall
from ralph_supervisor.process.tree import ProcessTree, StopResult

if TYPE_CHECKING:
    from ralph_supervisor.evidence.call_gate import CallGate
    from ralph_supervisor.terminal import Terminal

log = structlog.get_logger("ralph_supervisor")


async def _on_container(container: ContainerCall | None, verb: str) -> None:
    """A call in a container is outside our tree: its engine pauses, thaws and stops it."""
    if container is not None:
        await asyncio.to_thread(container.act, verb)


class TreeActions:
    """Pause, resume and stop the tree. Callers hold `lock` around a sequence of actions that belong together."""

    def __init__(self, tree: ProcessTree, *, grace: float, metrics: Any,
                 collect_exits: Callable[[], None] = lambda: None,
                 extend_timeout: Callable[[float], None] = lambda seconds: None,
                 terminal: Terminal | None = None, leader: Callable[[], int | None] = lambda: None) -> None:
        self.tree = tree
        self.grace = grace
        self.lock = asyncio.Lock()
        self.paused = False
        self.stopping = False
        """A stop is under way: the tick does not sample (the stop scans) and exits are not the loop's own."""
        self._metrics = metrics
        self.calls: CallGate | None = None
        self._leader = leader
        self._collect_exits = collect_exits
        self._extend_timeout = extend_timeout
        self._terminal = terminal
        """Told of every pause, resume and stop: it puts the terminal back as it found it (terminal/modes.py)."""

    async def pause(self, iteration: int) -> int:
        """Hold every process still (the cgroup's freeze, or SIGSTOP to each: `ProcessTree.pause`); the number
        held. No agent call starts while paused, even when something outside thaws the tree."""
        if self.calls is not None and not self.tree.freezes:  # the signals take a while: no call starts meanwhile
            self.calls.hold("freeze", self.tree.sample())
        started = time.monotonic()
        count = await asyncio.to_thread(self.tree.pause)
        if self.calls is not None:
            self.calls.hold("freeze", self.tree.sample())  # whatever started while the pause went round
            await _on_container(self.calls.running_container(), "pause")  # the agent outside our tree
        if self._terminal is not None:
            self._terminal.tree_paused()
        self.paused = True
        log.info(events.TREE_PAUSED, processes=count, iteration=iteration,
                 duration_ms=int((time.monotonic() - started) * 1000))
        return count

    async def resume(self, iteration: int) -> int:
        if self.calls is not None:
            self.calls.release()
            await _on_container(self.calls.running_container(), "unpause")
        if self._terminal is not None:
            self._terminal.tree_resumed()  # the terminal as the tree had it
        count = await asyncio.to_thread(self.tree.resume)
        self.paused = False
        log.info(events.TREE_RESUMED, processes=count, iteration=iteration)
        return count

    async def stop(self, why: str, iteration: int) -> StopResult:
        """No new call from now on; TERM the loop's group but its agent calls, then the rest once it exited or
        half the grace passed, KILL at the grace, re-scan until nothing is left; logs `tree_stopped` with the survivors."""
        calls = self.calls
        running: frozenset[tuple[int, int]] = frozenset()
        if calls is not None:
            members = self.tree.sample()
            calls.hold("stop", members)
            running = calls.running_calls(members)
        self.stopping = True
        try:
            self._extend_timeout(self.grace + 10)
            container = calls.running_container() if calls is not None else None
            if container is not None and self.paused:
                await _on_container(container, "unpause")
            result = await asyncio.to_thread(self.tree.stop, self.grace, leader=self._leader(),
                                             refuse=calls.refuse_process if calls is not None else None,
                                             calls=running,
                                             calls_termed=(lambda: container.act("term")) if container else None)
            await _on_container(container, "kill")  # what TERM left, if anything
            self._collect_exits()  # while `stopping` holds: these exits are ours, not the loop's own
            self.record_stop(result, why, iteration)
            self.paused = False
            return result
        finally:
            self.stopping = False

    def kill_now(self, why: str, iteration: int) -> StopResult:
        """SIGKILL everything at once (the second signal); also cuts short a stop waiting out its grace."""
        result = self.tree.kill_now()
        self.record_stop(result, why, iteration)
        self.paused = False
        return result

    def record_stop(self, result: StopResult, why: str, iteration: int) -> None:
        if self._terminal is not None:
            self._terminal.tree_stopped()
        survivors = [m.pid for m in result.survivors]
        (log.warning if survivors else log.info)(
            events.TREE_STOPPED, reason=why, survivors=len(survivors), survivor_pids=survivors,
            duration_ms=result.duration_ms, signalled=result.signalled, iteration=iteration,
            refused=result.refused + (self.calls.refused if self.calls is not None else 0))
        self._metrics.tree_stopped(len(survivors))
        self._metrics.child_running(False)
