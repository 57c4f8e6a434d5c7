"""One destination (a terminal, a pipe, a file) and the thread that writes to it: nothing waits for it.

The outlet's writer thread

- writes through its own non-blocking open of the terminal or pipe (`sink.py`): the file description the
  shell shares with us stays blocking, a write never waits, and every byte shown is counted exactly;
- writes the supervisor's own lines first (bounded; shown as soon as the terminal takes bytes again) and
  keeps one status line at the bottom (`our_lines.py`);
- keeps about a second of the echo; what does not fit is dropped (child.log has it), counted, and said
  once, in one line, when the terminal has caught up (`echo_budget.py`);
- blocks SIGTTOU in itself only (the loop we start inherits nothing of it), and writes nothing while the
  process is in the background of a terminal with `tostop`: the echo stops with one line in events.jsonl,
  and resumes when the job is brought to the foreground;
- puts the terminal back as it found it at each mark of the tree (paused, stopped), in the echo's order,
  and the tree's modes on resume (`modes.py`).

Threads: any thread may call `echo`, `line`, `status`, `mark`, `drained`, `settle` and `close`; they only
queue under the outlet's lock, which guards the queues and counts (`OurLines`, `StatusLine`, `EchoBudget`,
where the cursor stands) and is never held while writing, waiting or calling out. The writer thread alone
owns the sink and the modes (`TerminalModes`), and calls `on_event` with no lock held.

A full-screen view (`watch`):

    outlet = Outlet(1); console = Console(file=outlet.stream())
    if outlet.drained(): live.update(frame, refresh=True)   # a new frame only when the last one is out
    outlet.close(1.0)
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from ralph_supervisor.terminal.echo_budget import EchoBudget, Piece, Said
from ralph_supervisor.terminal.modes import Mark, TerminalModes, isatty, may_write
from ralph_supervisor.terminal.our_lines import OurLines, StatusLine
from ralph_supervisor.terminal.sink import Sink
from ralph_supervisor.terminal.stream import LineStream

WAIT_SECONDS = 0.1
"""How long the writer waits for a full terminal before it looks again (at priorities, job control, close)."""
HELD_SECONDS = 0.25
"""How often a terminal we may not write to (background with tostop) is looked at again."""
CLOSE_SECONDS = 1.0
"""At exit the terminal gets at most this long for the rest of the echo, and as long again for our last lines."""
STUCK_SECONDS = 0.25
"""A terminal that took nothing of what we offered for this long (Ctrl-S, a dead link) is not waited for at exit."""

Event = Callable[..., None]
"""Called with an event name and its fields, from the writer thread (the supervisor logs them)."""


class Outlet:
    """One destination and the thread that writes to it. See the module doc."""

    def __init__(self, fd: int, *, on_event: Event | None = None, label: str = "terminal") -> None:
        self.fd = fd
        self.label = label
        self.is_tty = isatty(fd)
        self._on_event = on_event
        # The writer thread's alone.
        self._sink = Sink(fd)
        self._modes = TerminalModes(fd, self.is_tty)
        self._held = False
        # Behind the lock.
        self._cond = threading.Condition(threading.Lock())
        self._lines = OurLines()
        self._status = StatusLine()
        self._echo = EchoBudget()
        self._mid_line = False
        """The last bytes written were echo that did not end a line."""
        self._idle = False
        self._closing = False
        self._deadline = float("inf")
        self._waiting_since: float | None = None
        """Since when the terminal has taken nothing of what we offered (None: it took all we had)."""
        self._thread = threading.Thread(target=self._run, name=f"ralph-{label}", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- what the others call

    def echo(self, data: bytes) -> None:
        """Queue the loop's output (the tap calls this for every chunk it reads): never blocks."""
        with self._cond:
            self._echo.accept(data)
            if self._idle:
                self._cond.notify()

    def line(self, data: bytes) -> None:
        """Queue a line of ours (or a frame of a view): written before any echo, never blocks."""
        if not data:
            return
        with self._cond:
            self._lines.add(data)
            if self._idle:
                self._cond.notify()

    def status(self, text: str | None) -> None:
        """Show `text` as one line at the bottom, updated in place; None takes it away. A terminal only
        (elsewhere nothing is written). The writer erases it before anything else it writes (our lines, the
        echo) and draws it again once all that is out, so the line and the echo never mix."""
        if not self.is_tty:
            return
        data = None if text is None else text.replace("\n", " ").encode("utf-8", "replace")
        with self._cond:
            self._status.want = data
            if self._idle:
                self._cond.notify()

    def mark(self, what: str) -> None:
        """The tree was `paused`, `resumed` or `stopped`: the terminal is put back in the echo's order."""
        mark = Mark(what)
        with self._cond:
            self._echo.add(mark)
            if self._idle:
                self._cond.notify()

    def drained(self) -> bool:
        """Nothing of ours waits for the terminal."""
        with self._cond:
            return not self._lines and not self._echo and not self._status.writing

    def stream(self) -> LineStream:
        return LineStream(self)

    @property
    def shown_bytes(self) -> int:
        """Echo bytes written to the terminal."""
        with self._cond:
            return self._echo.shown_bytes

    @property
    def dropped_bytes(self) -> int:
        """Echo bytes not shown whose count was said (or, once settled, that were left)."""
        with self._cond:
            return self._echo.dropped_bytes

    @property
    def not_shown_bytes(self) -> int:
        """Echo bytes dropped so far: said, or to be said when the terminal has caught up."""
        with self._cond:
            return self._echo.not_shown_bytes

    def settle(self, timeout: float = CLOSE_SECONDS) -> int:
        """The echo is over (the tap is done): put the screen modes back, give the terminal at most
        `timeout` seconds for the rest, and count what it did not take (one `echo_dropped` event).
        Returns those bytes."""
        deadline = time.monotonic() + timeout
        with self._cond:
            if self._echo.settled:
                return 0
            self._echo.end()
            if self.is_tty:
                self._echo.add(Mark("stopped"))
            self._cond.notify()
            while self._echo and self._thread.is_alive() and time.monotonic() < deadline and not self._stuck():
                self._cond.wait(0.02)
            left = self._echo.drop_rest()
            total = self._echo.dropped_bytes
        if left:
            self._event("echo_dropped", bytes=left, total_bytes=total, at_exit=True)
        return left

    def close(self, timeout: float = CLOSE_SECONDS) -> None:
        """`settle`, then write our lines that are left (all within `timeout` seconds), stop the thread."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._status.want = None  # no status line is left behind
        self.settle(timeout)
        with self._cond:
            self._closing = True
            self._deadline = deadline
            self._cond.notify()
        self._thread.join(max(0.0, deadline - time.monotonic()) + WAIT_SECONDS * 2)
        if not self._thread.is_alive():
            self._sink.close()

    # ---------------------------------------------------------------- the writer thread

    def _run(self) -> None:
        # Here only (the loop we start inherits nothing of it): a write or tcsetattr from the background
        # then neither stops the process nor fails. Linux's __tty_check_change (drivers/tty/tty_jobctrl.c)
        # sends SIGTTOU to a background process group unless the calling thread blocks or ignores it, and
        # then lets the operation go ahead; `may_write` keeps us from writing there with tostop anyway.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTOU})
        try:
            while self._step():
                pass
        except Exception as exc:  # noqa: BLE001 - losing the terminal must not lose the supervisor
            self._lose(f"{type(exc).__name__}: {exc}")

    def _step(self) -> bool:
        with self._cond:
            while not self._lines and not self._echo and not self._closing and not self._status.due():
                self._idle = True
                self._cond.wait()
            self._idle = False
            if self._closing and (time.monotonic() >= self._deadline or self._stuck()
                                  or (not self._lines and not self._echo and not self._status.due())):
                return False
        if self.is_tty and not may_write(self.fd):
            self._hold()
            return True
        if self._held:
            self._held = False
            self._event("echo_resumed", reason="the supervisor is in the foreground of its terminal again")
        self._modes.look_again()
        said: Said = []
        with self._cond:
            piece = self._take(said)
        for name, fields in said:
            self._event(name, **fields)
        if isinstance(piece, Mark):
            self._put_back(piece)
        elif piece is not None:
            return self._write(*piece)
        return True

    def _take(self, said: Said) -> Piece | Mark | None:
        """The next bytes to write (under the lock): our lines first, then the echo in its order (a Mark:
        the terminal is put back there). `data[start:end]`, and what they are: "line", "echo", "control"
        (ours, in the echo's order), "status" (erased before anything else, drawn when all is out)."""
        status = self._status.first(bool(self._lines) or bool(self._echo))
        if status is not None:
            return (*status, "status")
        if self._lines and not self._finish_echo_line_first():
            return (*self._lines.next_piece(self._mid_line), "line")
        piece = self._echo.next_piece(bool(self._lines), self._mid_line, said)
        if piece is not None:
            return piece
        status = self._status.last(self._mid_line)
        return None if status is None else (*status, "status")

    def _finish_echo_line_first(self) -> bool:
        """Our line waits while the echo is in the middle of a line that ends within a few KiB."""
        return self._mid_line and not self._lines.offset and self._echo.line_ends_soon()

    def _put_back(self, mark: Mark) -> None:
        """The terminal as we found it (or as the tree had it), with no lock held; our bytes for it go next."""
        data, restored = self._modes.put_back(mark)
        with self._cond:
            self._echo.take(mark, data)
        if restored:
            self._event("terminal_restored", after=f"tree {mark.what}", **restored)

    def _write(self, data: bytes, start: int, end: int, kind: str) -> bool:
        try:
            taken = self._sink.write(memoryview(data)[start:end])
        except OSError as exc:
            self._lose(exc.strerror or str(exc))
            return False
        self._modes.saw(data, start, start + max(0, taken))
        with self._cond:
            self._wrote(data, start, end, taken, kind)
            if taken < end - start:
                self._echo.fell_behind(time.monotonic())
        if taken < end - start:
            self._sink.wait(WAIT_SECONDS)
        return True

    def _wrote(self, data: bytes, start: int, end: int, taken: int, kind: str) -> None:
        """(Under the lock.) The terminal took `taken` bytes of the piece."""
        if taken >= end - start:
            self._waiting_since = None
        elif taken or self._waiting_since is None:
            self._waiting_since = time.monotonic()  # it takes something: not stuck
        if taken <= 0:
            return
        if kind == "status":
            self._status.wrote(taken)
            self._mid_line = False  # the cursor is on the status line, which is erased before any other write
        elif kind == "line":
            self._lines.wrote(taken)
            self._mid_line = False
        else:
            self._mid_line = kind == "echo" and data[start + taken - 1] != 10  # b"\n"
            self._echo.wrote(data, taken, kind)

    def _stuck(self) -> bool:
        """(Under the lock.) The terminal has taken nothing of what we offered for STUCK_SECONDS."""
        since = self._waiting_since
        return since is not None and time.monotonic() - since >= STUCK_SECONDS

    def _hold(self) -> None:
        """In the background with tostop: drop the echo (counted), keep our lines, look again soon."""
        with self._cond:
            self._echo.cut(None)
            closing = self._closing
        if not self._held:
            self._held = True
            self._event("echo_stopped", reason="in the background of a terminal with tostop (stty tostop)",
                        note="supervision goes on; the echo resumes in the foreground")
        if closing:
            with self._cond:
                self._deadline = 0.0  # nothing can be written: leave now
        else:
            time.sleep(HELD_SECONDS)

    def _lose(self, why: str) -> None:
        """The terminal is gone (hung up, closed): nothing more is written; the echo is counted as dropped."""
        with self._cond:
            self._closing = True
            self._deadline = 0.0
        self._event("terminal_lost", error=why)

    def _event(self, name: str, **fields: Any) -> None:
        if self._on_event is not None:
            try:
                self._on_event(name, fd=self.fd, **fields)
            except Exception:  # noqa: BLE001 - a record of the terminal is not worth the terminal
                pass
