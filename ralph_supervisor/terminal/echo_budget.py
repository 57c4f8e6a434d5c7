"""What the echo may keep while the terminal is behind, what it drops, and the counting of both.

The echo waiting for the terminal is kept to about a second of what the terminal took recently (ECHO_MIN to
ECHO_MAX). What does not fit is dropped where it stands: one `Gap` in the queue counts it, and when the
terminal gets there the gap becomes one line saying how much was not shown (child.log has everything).
Every byte handed over is, at any moment, waiting, shown, or dropped and counted:

    accepted == budget.waiting_bytes + budget.shown_bytes + budget.not_shown_bytes

The queue also carries bytes of ours in the echo's order (`Control`: a notice, screen modes put back), which
are never dropped or counted, and the tree's `Mark`s. No lock and no clock of its own: its outlet uses it
under the outlet's lock, and passes the time.

    budget = EchoBudget()
    budget.accept(chunk)                        # the tap's bytes: kept, or counted in a gap
    piece = budget.next_piece(False, False, said)   # (data, start, end, "echo" | "control"), a Mark, or None
    budget.wrote(data, taken, "echo")           # what the terminal took of it
    budget.fell_behind(now)                     # it took less than offered: measure its speed, cut to a second
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from ralph_supervisor.terminal.modes import Mark

ECHO_MIN = 64 << 10
ECHO_MAX = 2 << 20
ECHO_SECONDS = 1.0
"""The echo waiting for the terminal: what it took in this many seconds, within ECHO_MIN..ECHO_MAX."""
RATE_WINDOW = 0.5
"""The terminal's speed is measured over this much time while it holds us up."""
PIECE = 64 << 10
"""At most this much is handed to one write."""
LINE_BREAK_WITHIN = 4096
"""When our line is due in the middle of an echoed line, the echo goes on to its end if it is this close."""

Said = list[tuple[str, dict[str, Any]]]
"""Events to record once the lock is let go: (name, fields)."""


def notice(nbytes: int) -> bytes:
    """The one line said when the terminal has caught up after the echo was cut."""
    return f"ralph-supervise: {nbytes} bytes not shown on the terminal; child.log has everything\n".encode()


@dataclass
class Gap:
    """Echo bytes dropped since the terminal fell behind; said when it reaches this point."""

    nbytes: int = 0


@dataclass(frozen=True)
class Control:
    """Bytes of ours in the echo's order (a notice, screen modes put back): never dropped, never counted."""

    data: bytes


Item = bytes | Gap | Control | Mark
Piece = tuple[bytes, int, int, str]
"""`data[start:end]` to write, and what it is: "echo" or "control"."""


class EchoBudget:
    """The echo's queue, its bound, and its counts. See the module doc."""

    def __init__(self) -> None:
        self.items: deque[Item] = deque()
        self.offset = 0
        """Where the front item's writing stands."""
        self.waiting_bytes = 0
        """Echo bytes accepted and not yet written (the bound applies to these)."""
        self.gap: Gap | None = None
        """The gap new echo goes into while the terminal has not caught up."""
        self.bound = ECHO_MAX
        self.shown_bytes = 0
        """Echo bytes written to the terminal."""
        self.dropped_bytes = 0
        """Echo bytes not shown whose count was said (or, once settled, that were left)."""
        self.settled = False
        """The echo is over (`end`): what still comes is counted as dropped."""
        self._limited_since: float | None = None
        self._limited_bytes = 0

    def __bool__(self) -> bool:
        return bool(self.items)

    @property
    def not_shown_bytes(self) -> int:
        """Echo bytes dropped so far: said, or to be said when the terminal has caught up."""
        return self.dropped_bytes + sum(item.nbytes for item in self.items if isinstance(item, Gap))

    # ---------------------------------------------------------------- what comes in

    def accept(self, data: bytes) -> None:
        """The loop's output: queued within the bound (whole lines of it where it does not all fit), the rest
        counted in a gap."""
        if self.settled:
            self.dropped_bytes += len(data)
            return
        if self.gap is not None:
            self.gap.nbytes += len(data)
            return
        room = self.bound - self.waiting_bytes
        if len(data) > room:
            keep = data.rfind(b"\n", 0, room) + 1 if room > 0 else 0  # whole lines of it, if any fit
            if keep:
                self.items.append(data[:keep])
                self.waiting_bytes += keep
            self.gap = Gap(len(data) - keep)
            self.items.append(self.gap)
        else:
            self.items.append(data)
            self.waiting_bytes += len(data)

    def add(self, mark: Mark) -> None:
        self.items.append(mark)

    # ---------------------------------------------------------------- what goes out

    def next_piece(self, line_waits: bool, mid_line: bool, said: Said) -> Piece | Mark | None:
        """The next bytes to write in the echo's order; a Mark at the front (left there: `take` it once the
        terminal is put back); None when nothing waits. A gap reached is said here (the notice, and an
        `echo_dropped` event in `said`). With `line_waits`, the echo stops at the end of its line."""
        while self.items:
            front = self.items[0]
            if isinstance(front, bytes):
                end = self.offset + PIECE
                if line_waits:
                    end = front.find(b"\n", self.offset, self.offset + LINE_BREAK_WITHIN) + 1 or end
                return front, self.offset, min(len(front), end), "echo"
            if isinstance(front, Control):
                return front.data, self.offset, len(front.data), "control"
            if isinstance(front, Mark):
                return front
            # A gap: everything before the cut is out. Say it, and take the echo again.
            self.items.popleft()
            if self.gap is front:
                self.gap = None
            self.dropped_bytes += front.nbytes
            said.append(("echo_dropped", {"bytes": front.nbytes, "total_bytes": self.dropped_bytes}))
            self.items.appendleft(Control((b"\n" if mid_line else b"") + notice(front.nbytes)))
        return None

    def take(self, mark: Mark, data: bytes) -> None:
        """The terminal was put back for `mark`: it leaves the queue, and `data` (ours) is written next."""
        if self.items and self.items[0] is mark:
            self.items.popleft()
        if data:
            self.items.appendleft(Control(data))

    def line_ends_soon(self) -> bool:
        """The echo's front is in a line that ends within LINE_BREAK_WITHIN bytes."""
        front = self.items[0] if self.items else None
        return isinstance(front, bytes) and front.find(b"\n", self.offset, self.offset + LINE_BREAK_WITHIN) >= 0

    def wrote(self, data: bytes, taken: int, kind: str) -> None:
        """The terminal took `taken` bytes of a piece from `next_piece` (written outside the lock)."""
        front = self.items[0] if self.items else None
        if front is not data and not (isinstance(front, Control) and front.data is data):
            return  # dropped meanwhile (`drop_rest`): this piece was counted as not shown
        if kind == "echo":
            self.shown_bytes += taken
            self.waiting_bytes -= taken
            if self._limited_since is not None:
                self._limited_bytes += taken
        self.offset += taken
        if self.offset >= len(data):
            self.items.popleft()
            self.offset = 0
        if not self.waiting_bytes and self.gap is None:
            self._limited_since, self.bound = None, ECHO_MAX  # it keeps up again

    def fell_behind(self, now: float) -> None:
        """The terminal took less than offered: measure how fast it takes bytes, and keep about a
        second of that (what is queued beyond is cut now, so the terminal never shows old output)."""
        if self._limited_since is None:
            self._limited_since, self._limited_bytes = now, 0
            return
        spent = now - self._limited_since
        if spent >= RATE_WINDOW:
            rate = self._limited_bytes / spent
            self.bound = int(min(ECHO_MAX, max(ECHO_MIN, rate * ECHO_SECONDS)))
            self._limited_since, self._limited_bytes = now, 0
            if self.waiting_bytes > self.bound:
                self.cut(self.bound)

    def cut(self, room: int | None) -> None:
        """Keep the first `room` bytes of the queued echo (and the piece being written); None: keep none.
        What is cut becomes one gap, said when the terminal gets there. Our controls and marks stay."""
        kept: deque[Item] = deque()
        after: list[Item] = []
        total = dropped = 0
        offset = 0
        for index, item in enumerate(self.items):
            skip = self.offset if index == 0 else 0
            if isinstance(item, bytes):
                size = len(item) - skip
                if room is not None and not dropped and (index == 0 or total + size <= room):
                    kept.append(item)
                    total += size
                    if index == 0:
                        offset = skip  # the piece in flight goes on from where it stands
                else:
                    dropped += size
            elif isinstance(item, Gap):
                dropped += item.nbytes
            else:
                if isinstance(item, Control) and skip:
                    item = Control(item.data[skip:])  # the rest of ours
                (after if dropped else kept).append(item)
        if dropped:
            self.gap = Gap(dropped)
            kept.append(self.gap)
        kept.extend(after)
        self.items = kept
        self.offset = offset
        self.waiting_bytes = total

    def end(self) -> None:
        """The echo is over: what still comes is counted as dropped at once."""
        self.settled = True

    def drop_rest(self) -> int:
        """The terminal had its time: what is still queued counts as dropped. Returns those bytes. Our
        controls and marks go too."""
        self.settled = True
        left = self.waiting_bytes + sum(item.nbytes for item in self.items if isinstance(item, Gap))
        self.items.clear()  # (a piece in flight, if any, is seen to be gone in `wrote`)
        self.offset = self.waiting_bytes = 0
        self.gap = None
        self.dropped_bytes += left
        return left
