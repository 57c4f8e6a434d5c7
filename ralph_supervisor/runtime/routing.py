"""Where evidence goes as it arrives: analysed output, the agent's tailed log files, file events.

Analysed output (from the analysis thread, handed over on the event loop) feeds the iteration tracker, a
marker's call boundary, the waits' reading of the agent's own retry reports, and the metrics. Tailed files
join the same analysis as the pipes. A file event (on the workspace watcher's thread) goes to the snapshot
keeper there, and to the stall meter on the event loop.

    >>> analysis = OutputAnalysis(loop, ..., deliver=routing.output_analysed)   # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ralph_supervisor.evidence.iterations import OutputResult
from ralph_supervisor.evidence.tap import Chunk
from ralph_supervisor.evidence.workspace import Change
from ralph_supervisor.runtime.lifecycle import Lifecycle


class Routing:
    """Routes evidence to the parts that read it. `file_changed_threadsafe` runs on the watcher's thread;
    the rest on the event loop."""

    def __init__(self, *, loop: asyncio.AbstractEventLoop, tracker: Any, calls: Any, loop_waits: Any,
                 metrics: Any, tap: Any, analysis: Any, keeper: Any, silence: Any, lifecycle: Lifecycle,
                 wake: Any) -> None:
        self._loop = loop
        self._tracker = tracker
        self._calls = calls
        self._loop_waits = loop_waits
        self._metrics = metrics
        self._tap = tap
        self._analysis = analysis
        self._keeper = keeper
        self._silence = silence
        self._life = lifecycle
        self._wake = wake
        tracker.owned = self._owned

    def _owned(self, result: OutputResult, number: int) -> None:
        """A chunk whose call is known: the agent's own retry reports, counted for that call, at their time."""
        if result.text is not None:
            self._loop_waits.output(result.text, number, result.read_at)

    def output_analysed(self, results: list[OutputResult]) -> None:
        for result in results:
            self._route(result)

    def _route(self, result: OutputResult) -> None:
        tracker = self._tracker
        if tracker.marker is None:
            tracker.add_output(result, time.time())
            if tracker.current is None:
                self._wake()  # output while no call is known: a short call may be running, sample now
        else:
            if result.starts and not self._life.exiting:
                self._calls.marker_boundary(time.time())
            tracker.add_output(result, time.time())
        self._metrics.add_output_bytes(result.nbytes)

    def tailed(self, source: str, data: bytes) -> None:
        """New lines of a tailed log file: analysed like the pipes' output."""
        self._tap.counters.last_output_at = time.monotonic()
        self._tap.last_seq = self._analysis.submit(Chunk(source, data, self._tracker.tag, time.time()))

    def file_changed_threadsafe(self, change: Change) -> None:
        """The workspace watcher's thread: the keeper hears of it here, the stall meter on the event loop."""
        self._keeper.saw(change)
        try:
            self._loop.call_soon_threadsafe(self._silence.file_changed, time.time())
        except RuntimeError:  # the loop is closed: we are leaving
            pass
