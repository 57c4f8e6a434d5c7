"""The output tap: drain the child's pipes at full speed, keep every byte, analyse behind.

Reading never waits for judging. The event loop reads each pipe in large chunks as soon as it is
readable, appends the bytes unchanged to `child.log` (rotated under a disk budget), hands them to the
terminal's echo when asked (a bounded queue of its own thread: `ralph_supervisor/terminal/`), and
to an analysis worker thread through a queue bounded in bytes. When the
worker falls behind by more than the bound, chunks are not analysed (and `analysis_dropped_bytes`
says so); the child is never blocked by us.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import struct
import termios
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from ralph_supervisor.rotating import RotatingFile

READ_SIZE = 1 << 20
PIPE_SIZE = 1 << 20
BURST_YIELD = 4.0
"""While a backlog waits, the analysis thread sleeps this many times as long as it just worked (CPU time)."""
BURST_BACKLOG = 1 << 20
"""A backlog is this many bytes waiting: small bursts (a call starting, stdout and stderr together) never wait."""
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


class LineSplitter:
    """Split a byte stream into lines, each cut at `cap` bytes; a longer line is never held whole.

    `feed` returns the complete lines (each without its newline) joined by b"\n", as one block:
    the analysis reads blocks, and splitting what it would join again costs the reader's GIL.
    None means no line was completed. The bytes of an over-long line past the cap are skipped as
    they arrive, and the line is counted in `cut_lines`.
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._partial = bytearray()
        self._skipping = False
        self.cut_lines = 0

    def feed(self, data: bytes) -> bytes | None:
        last = data.rfind(b"\n")
        if last < 0:
            self._append(data)
            return None
        parts: list[bytes] = []
        start = 0
        if self._partial or self._skipping:
            first = data.find(b"\n")
            self._append(data[:first])
            parts.append(bytes(self._partial))
            self._partial.clear()
            self._skipping = False
            start = first + 1
        if start <= last:
            body = data[start:last]
            if len(body) > self.cap:  # only then can a line inside it be over the cap
                body = self._cut(body)
            parts.append(body)
        if last < len(data) - 1:
            self._append(data[last + 1:])
        return parts[0] if len(parts) == 1 else b"\n".join(parts)

    def _cut(self, body: bytes) -> bytes:
        lines = body.split(b"\n")
        cap = self.cap
        for index, line in enumerate(lines):
            if len(line) > cap:
                lines[index] = line[:cap]
                self.cut_lines += 1
        return b"\n".join(lines)

    def _append(self, piece: bytes) -> None:
        if self._skipping:
            return
        room = self.cap - len(self._partial)
        if len(piece) > room:
            self._partial += piece[:room]
            self._skipping = True
            self.cut_lines += 1
        else:
            self._partial += piece

    def flush(self) -> bytes | None:
        """The last line when the stream ends without a newline."""
        if not self._partial and not self._skipping:
            return None
        line = bytes(self._partial)
        self._partial.clear()
        self._skipping = False
        return line


@dataclass(frozen=True)
class Chunk:
    """Bytes read from one source, tagged with what was current when they were read."""

    source: str
    data: bytes
    tag: int
    read_at: float
    """Wall-clock time of the read (comparable with a process's create time)."""
    final: bool = False
    offset: int | None = None
    """Where the chunk's first byte lies in its stream (bytes of that pipe before it); None for a tailed file."""


@dataclass
class TapCounters:
    bytes_read: int = 0
    last_output_at: float = field(default_factory=time.monotonic)


Analyse = Callable[[Chunk, "bytes | None"], None]
"""Called on the worker thread with the chunk and the lines it completed, joined by b"\n" (None: none)."""


class AnalysisQueue:
    """A queue bounded in bytes between the reader and the analysis worker thread."""

    def __init__(self, analyse: Analyse, line_cap: int, max_bytes: int = 4 << 20,
                 on_drop: Callable[[Chunk], None] | None = None) -> None:
        self._analyse = analyse
        self._on_drop = on_drop
        self._line_cap = line_cap
        self._max_bytes = max_bytes
        self._items: deque[tuple[int, Chunk]] = deque()
        self._busy = False
        self._bytes = 0
        self._cond = threading.Condition()
        self._closed = False
        self._splitters: dict[str, LineSplitter] = {}
        self.submitted = 0
        self.done = 0
        self.dropped_bytes = 0
        self._thread = threading.Thread(target=self._run, name="ralph-analysis", daemon=True)
        self._thread.start()

    def submit(self, chunk: Chunk) -> int:
        """Queue a chunk; returns its sequence number. Never blocks: over the bound it is dropped."""
        with self._cond:
            self.submitted += 1
            dropped = self._bytes + len(chunk.data) > self._max_bytes and not chunk.final
            if dropped:
                self.dropped_bytes += len(chunk.data)
                if not self._items and not self._busy:
                    self.done = self.submitted  # nothing before it is still waiting
                    self._cond.notify_all()
            else:
                self._items.append((self.submitted, chunk))
                self._bytes += len(chunk.data)
                self._cond.notify_all()  # the worker and any wait_done() share this condition
            seq = self.submitted
        if dropped and self._on_drop is not None:
            self._on_drop(chunk)  # not analysed, but its bytes still count for its iteration
        return seq

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def lag_bytes(self) -> int:
        return self._bytes

    def cut_lines(self) -> int:
        return sum(s.cut_lines for s in self._splitters.values())

    def analysed(self, seq: int) -> bool:
        """Whether chunk `seq` has been analysed already (no wait: the event loop may ask)."""
        with self._cond:
            return self.done >= seq

    def wait_done(self, seq: int, timeout: float) -> bool:
        """Block until chunk `seq` has been analysed (used off the event loop)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.done < seq:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._closed:
                    self._cond.wait()
                if not self._items and self._closed:
                    return
                seq, chunk = self._items.popleft()
                self._bytes -= len(chunk.data)
                self._busy = True
                backlog = self._bytes >= BURST_BACKLOG and not self._closed
            started = time.thread_time()
            splitter = self._splitters.get(chunk.source)
            if splitter is None:
                splitter = self._splitters[chunk.source] = LineSplitter(self._line_cap)
            lines = splitter.feed(chunk.data)
            if chunk.final:
                last = splitter.flush()
                if last is not None:
                    lines = last if lines is None else lines + b"\n" + last
                del self._splitters[chunk.source]
            try:
                self._analyse(chunk, lines)
            except Exception:  # noqa: BLE001 - analysis faults never stop the reader
                pass
            with self._cond:
                # Done up to this chunk; with nothing left queued, every later (dropped) chunk is done too.
                self.done = seq if self._items else self.submitted
                self._busy = False
                self._cond.notify_all()
            if backlog:
                # Behind a burst: give the GIL back for as long as we held it, so the reader (which
                # needs it after every read and write) keeps the child's pipe drained. What we cannot
                # keep up with is dropped at the queue's bound, and counted.
                time.sleep(min(0.05, time.thread_time() - started) * BURST_YIELD)

    def close(self, timeout: float = 2.0) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)


class OutputTap:
    """Reads the child's pipes on the event loop; tees to child.log, the echo and the analysis queue.

    `echo` is called with every chunk and must not block (the terminal's `Outlet.echo` queues it)."""

    def __init__(
        self,
        log: RotatingFile,
        queue: AnalysisQueue,
        *,
        echo: Callable[[bytes], None] | None = None,
        tag: Callable[[], int] = lambda: 0,
        on_bytes: Callable[[int], None] | None = None,
    ) -> None:
        self.log = log
        self.queue = queue
        self.echo = echo
        self.counters = TapCounters()
        self._tag = tag
        self._on_bytes = on_bytes
        self._open: dict[int, str] = {}
        self._all_closed: asyncio.Event | None = None
        self.last_seq = 0
        self._offsets: dict[int, int] = {}
        """Bytes read so far, per pipe (the next chunk's stream offset)."""
        self._cuts: dict[int, list[int]] = {}
        """Per pipe, stream offsets handed out by `marks()` not yet read past: a chunk is split there, so
        each chunk lies wholly before or after every mark."""
        self._reading = threading.Lock()
        """Held around each read and its offset, and by `marks()` (other threads): a mark is exact."""

    def attach(self, fd: int, source: str) -> None:
        """Start reading `fd` (non-blocking) on the running loop."""
        loop = asyncio.get_running_loop()
        if self._all_closed is None:
            self._all_closed = asyncio.Event()
        self._all_closed.clear()
        try:
            fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:
            pass
        os.set_blocking(fd, False)
        with self._reading:
            self._open[fd] = source
            self._offsets[fd] = 0
            self._cuts[fd] = []
        loop.add_reader(fd, self._readable, fd)

    def marks(self) -> dict[str, int]:
        """Any thread: for each pipe, the stream offset up to which its bytes were written by now (what was
        read plus what waits unread in the pipe). An agent call's start and end are marked this way, so
        what a call printed is told apart from its neighbours' by position, not by when it was read."""
        found: dict[str, int] = {}
        with self._reading:
            for fd, source in self._open.items():
                try:
                    waiting = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
                except OSError:
                    waiting = 0
                offset = self._offsets[fd] + waiting
                found[source] = offset
                if waiting:
                    self._cuts[fd].append(offset)
        return found

    def _readable(self, fd: int) -> None:
        source = self._open.get(fd)
        if source is None:
            return
        with self._reading:
            try:
                data = os.read(fd, READ_SIZE)  # cheap for short reads too: see ralph_supervisor/memory.py
            except BlockingIOError:
                return
            except OSError:
                data = b""
            offset = self._offsets.get(fd, 0)
            self._offsets[fd] = offset + len(data)
            cuts = self._cuts.get(fd)
            pieces = _split(data, offset, cuts) if cuts else None
        if not data:
            self._close(fd, source)
            return
        now = time.monotonic()
        counters = self.counters
        counters.bytes_read += len(data)
        counters.last_output_at = now
        self.log.write(data)
        if self.echo is not None:
            self.echo(data)
        read_at = time.time()
        tag = self._tag()
        if pieces is None:
            self.last_seq = self.queue.submit(Chunk(source, data, tag, read_at, offset=offset))
        else:
            for at, piece in pieces:
                self.last_seq = self.queue.submit(Chunk(source, piece, tag, read_at, offset=at))
        if self._on_bytes is not None:
            self._on_bytes(len(data))

    def read_now(self) -> None:
        """Read what each pipe holds right now (an agent call just ended: its last words are in there)."""
        for fd in list(self._open):
            self._readable(fd)

    def _close(self, fd: int, source: str) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(fd)
        with self._reading:
            del self._open[fd]
            self._offsets.pop(fd, None)
            self._cuts.pop(fd, None)
        try:
            os.close(fd)
        except OSError:
            pass
        self.last_seq = self.queue.submit(Chunk(source, b"", self._tag(), time.time(), final=True))
        if not self._open and self._all_closed is not None:
            self._all_closed.set()

    async def wait_closed(self, timeout: float | None = None) -> bool:
        """Wait until every attached pipe reached end of file (the child and all holders closed it)."""
        if self._all_closed is None or not self._open:
            return True
        try:
            await asyncio.wait_for(self._all_closed.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    def detach_all(self) -> None:
        """Stop reading (e.g. when the tree is gone but a stray process still holds a pipe)."""
        for fd, source in list(self._open.items()):
            try:
                self._readable(fd)
            except Exception:  # noqa: BLE001
                pass
            if fd in self._open:
                self._close(fd, source)


def _split(data: bytes, offset: int, cuts: list[int]) -> list[tuple[int, bytes]] | None:
    """`data` (read at stream `offset`) cut at the marks inside it, as (offset, bytes) pieces; None when
    no mark falls inside. Marks at or before the data's end are used up (removed from `cuts`)."""
    end = offset + len(data)
    inside = sorted({c for c in cuts if offset < c < end})
    cuts[:] = [c for c in cuts if c > end]
    if not inside:
        return None
    pieces = []
    start = offset
    for cut in [*inside, end]:
        pieces.append((start, data[start - offset:cut - offset]))
        start = cut
    return pieces
