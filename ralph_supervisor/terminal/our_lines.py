"""What the supervisor itself says on its terminal: its lines, written before any waiting echo, and the one
status line at the bottom (a countdown), updated in place.

Our lines wait up to LINES_MAX bytes; beyond, the oldest go (never the one being written), and the next
line written says how many (events.jsonl has them all). The status line is erased before anything else is
written and drawn again once all is out, so it never mixes with the echo. No lock of their own: the outlet
uses them under its lock.

    lines = OurLines(); lines.add(b"OPEN no-progress: ...\\n")
    data, start, end = lines.next_piece(mid_line=False); lines.wrote(taken)
"""

from __future__ import annotations

from collections import deque

from ralph_supervisor.terminal.echo_budget import PIECE

LINES_MAX = 256 << 10
"""Our own lines waiting for the terminal; beyond this the oldest are dropped (events.jsonl has them)."""
ERASE = b"\r\x1b[2K"
"""Back to the start of the line, and the line erased."""

Span = tuple[bytes, int, int]
"""`data[start:end]` to write."""


def lines_notice(count: int) -> bytes:
    return f"ralph-supervise: {count} of our lines not shown on the terminal; events.jsonl has them\n".encode()


class OurLines:
    """Our lines waiting for the terminal, the first one possibly half written."""

    def __init__(self) -> None:
        self._items: deque[bytes] = deque()
        self._bytes = 0
        self._dropped = 0
        self.offset = 0
        """How much of the first line is written."""
        self._begun = False
        """The first line is being written (decorated, maybe partly out): it is never dropped."""

    def __bool__(self) -> bool:
        return bool(self._items)

    @property
    def waiting_bytes(self) -> int:
        return self._bytes

    def add(self, data: bytes) -> None:
        self._items.append(data)
        self._bytes += len(data)
        first = 1 if self._begun else 0  # never the one being written
        while self._bytes > LINES_MAX and len(self._items) > first + 1:
            dropped = self._items[first]
            del self._items[first]
            self._bytes -= len(dropped)
            self._dropped += 1

    def next_piece(self, mid_line: bool) -> Span:
        """The next bytes of ours (there must be a line). Once per line, before it: a line break when the
        echo stopped mid-line, and what was dropped before it."""
        if not self._begun:
            self._begun = True
            before = (b"\n" if mid_line else b"") + (lines_notice(self._dropped) if self._dropped else b"")
            self._dropped = 0
            if before:
                self._items[0] = before + self._items[0]
                self._bytes += len(before)
        front = self._items[0]
        return front, self.offset, min(len(front), self.offset + PIECE)

    def wrote(self, taken: int) -> None:
        self.offset += taken
        self._bytes -= taken
        if self.offset >= len(self._items[0]):
            self._items.popleft()
            self.offset = 0
            self._begun = False


class StatusLine:
    """The one line at the bottom: what is wanted there, what is shown, and a write of it in progress."""

    def __init__(self) -> None:
        self.want: bytes | None = None
        """The status line wanted at the bottom (a countdown), updated in place; None: none."""
        self._shown: bytes | None = None
        self._buf = b""
        """Status bytes being written (an erase, or an erase and the line): finished before anything else."""
        self._off = 0

    @property
    def writing(self) -> bool:
        return bool(self._buf)

    def due(self) -> bool:
        """It needs writing: one is half written, or what is shown is not wanted."""
        return bool(self._buf) or self.want != self._shown

    def first(self, others_wait: bool) -> Span | None:
        """What must go before anything else: the rest of a status write, or the erase of the line shown
        when other bytes wait."""
        if self._buf:
            return self._buf, self._off, len(self._buf)
        if self._shown is not None and others_wait:
            self._buf, self._off, self._shown = ERASE, 0, None
            return self._buf, 0, len(self._buf)
        return None

    def last(self, mid_line: bool) -> Span | None:
        """When all else is out: the line (again), or its erase, if what is shown is not what is wanted."""
        if self.want == self._shown:
            return None
        want = self.want
        self._buf = (b"\n" if mid_line and want else b"") + ERASE + (want or b"")
        self._off, self._shown = 0, want
        return self._buf, 0, len(self._buf)

    def wrote(self, taken: int) -> None:
        self._off += taken
        if self._off >= len(self._buf):
            self._buf, self._off = b"", 0
