"""Output analysis: the worker thread behind the tap that turns chunks of output into findings.

The tap (event loop thread) reads the child's pipes and queues each chunk (`submit`); this worker decodes
it once, cuts it at iteration markers (marker mode), runs the two-stage error filter, and hands the
findings (`OutputResult`s) back to the event loop through `deliver`. Both hand-overs are bounded: the
queue in bytes (over it a chunk is not analysed, only counted, so the child is never blocked), and the
findings waiting for the event loop (the worker waits on a condition, at most `HANDOFF_PATIENCE`, while
the loop is that far behind).

    >>> analysis = OutputAnalysis(loop, line_cap=1 << 20, marker=None, deliver=route)   # doctest: +SKIP
    >>> seq = analysis.submit(Chunk("stdout", b"Error: boom\\n", 0, time.time()))           # doctest: +SKIP
    >>> analysis.wait_done(seq, 5.0)                                                       # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable

from ralph_supervisor.evidence.errors import error_lines_in_chunk
from ralph_supervisor.evidence.iterations import OutputResult, marker_pieces
from ralph_supervisor.evidence.tap import AnalysisQueue, Chunk

HANDOFF_MAX_BYTES = 2 << 20
"""Findings (counted in the bytes they cover) that may wait for the event loop before the worker waits."""
HANDOFF_PATIENCE = 2.0
"""The longest the worker waits for a busy event loop; past it, it hands over anyway."""

Deliver = Callable[[list[OutputResult]], None]


def unread(chunk: Chunk) -> OutputResult:
    """A chunk's findings when none of its lines were read: its bytes, source and time, no text."""
    return OutputResult(chunk.source, len(chunk.data), chunk.tag, chunk.read_at, None, (), offset=chunk.offset)


def analyse(chunk: Chunk, lines: bytes | None, marker: re.Pattern[str] | None) -> list[OutputResult]:
    """Pure: a chunk and the complete lines it brought, as findings (one per marker piece)."""
    if lines is None:
        return [unread(chunk)]
    text = lines.decode("utf-8", "replace")  # one decode per chunk (a line holds no b"\n")
    pieces = marker_pieces(lines, text, marker) if marker is not None else [(lines, text, False)]
    results = []
    rest = len(chunk.data)
    for index, (raw, piece_text, starts) in enumerate(pieces):
        # Bytes apportioned by lines; the last piece takes the rest, so the chunk's total stays exact.
        nbytes = rest if index == len(pieces) - 1 else min(rest, len(raw) + 1)
        rest -= nbytes
        at = None if chunk.offset is None else chunk.offset + len(chunk.data) - rest - nbytes
        results.append(OutputResult(chunk.source, nbytes, chunk.tag, chunk.read_at, piece_text,
                                    tuple(error_lines_in_chunk(raw)), starts, at))
    return results


class OutputAnalysis:
    """The analysis worker and its two bounded hand-overs. `deliver` runs on the event loop thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, line_cap: int, marker: re.Pattern[str] | None,
                 deliver: Deliver) -> None:
        self._loop = loop
        self._marker = marker
        self._deliver = deliver
        self._waiting = 0
        """Bytes of findings handed to the event loop and not yet taken (guarded by `_handoff`)."""
        self._handoff = threading.Condition()
        self.queue = AnalysisQueue(self._work, line_cap, on_drop=self._dropped)

    # -- the event loop's side --------------------------------------------------------------------

    def submit(self, chunk: Chunk) -> int:
        """Queue a chunk (never blocks); its sequence number, for `wait_done`."""
        return self.queue.submit(chunk)

    def wait_done(self, seq: int, timeout: float) -> bool:
        """Block until chunk `seq` was analysed (call it off the event loop)."""
        return self.queue.wait_done(seq, timeout)

    def analysed(self, seq: int) -> bool:
        """Whether chunk `seq` was analysed: its findings are then in the event loop's queue already."""
        return self.queue.analysed(seq)

    @property
    def dropped_bytes(self) -> int:
        return self.queue.dropped_bytes

    @property
    def lag_bytes(self) -> int:
        return self.queue.lag_bytes

    def cut_lines(self) -> int:
        return self.queue.cut_lines()

    def close(self) -> None:
        """Stop the worker (blocks up to a few seconds: call it off the event loop)."""
        self.queue.close()
        with self._handoff:
            self._handoff.notify_all()

    def _dropped(self, chunk: Chunk) -> None:
        # Called by `submit`, on the event loop: not analysed, but its bytes still belong to their iteration.
        self._deliver([unread(chunk)])

    def _taken(self, results: list[OutputResult]) -> None:
        with self._handoff:
            self._waiting -= sum(r.nbytes for r in results)
            self._handoff.notify_all()
        self._deliver(results)

    # -- the worker's side ------------------------------------------------------------------------

    def _work(self, chunk: Chunk, lines: bytes | None) -> None:
        results = analyse(chunk, lines, self._marker)
        deadline = time.monotonic() + HANDOFF_PATIENCE
        with self._handoff:
            while (self._waiting > HANDOFF_MAX_BYTES and not self.queue.closed and not self._loop.is_closed()):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._handoff.wait(left)
            self._waiting += len(chunk.data)
        try:
            self._loop.call_soon_threadsafe(self._taken, results)
        except RuntimeError:  # the loop is closed: the run is over
            pass
