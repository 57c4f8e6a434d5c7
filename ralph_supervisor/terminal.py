"""The terminal: nothing written there can hold up supervision, and it is left as it was found.

The supervisor writes two things to its terminal: the loop's output (the echo, on stdout) and its own
log lines (on stderr). A terminal can stop taking bytes at any moment: Ctrl-S (XOFF), a stalled SSH
link, a tmux pane nobody reads; and a write from the background of a terminal with `stty tostop`
raises SIGTTOU, which stops the whole process. So the thread that supervises never writes there. Each
destination is an `Outlet` with a writer thread of its own that

- writes through its own non-blocking open of the terminal (or pipe): the file description the shell
  shares with us stays blocking, a write never waits, and every byte shown is counted exactly;
- writes the supervisor's own lines first (bounded; shown as soon as the terminal takes bytes again);
- keeps about a second of the echo (what the terminal took in the last second, 64 KiB to 2 MiB):
  what does not fit is dropped (child.log has it), counted, and said once, in one line, when the
  terminal has caught up;
- blocks SIGTTOU in itself only (the loop we start inherits nothing of it), and writes nothing while
  the process is in the background of a terminal with `tostop`: the echo stops with one line in
  events.jsonl, and resumes when the job is brought to the foreground;
- puts the terminal back as it found it when the tree is paused or stopped: the terminal modes
  (termios, as found at start) and the screen modes the echoed output switched (alternate screen,
  hidden cursor, mouse reporting, bracketed paste, application keys); on resume, the tree's own.

Usage (the supervisor):

    terminal = Terminal.take_over(echo=None)    # echo when stdout is a terminal; sys.stderr goes through it
    configure_logging(path, "auto", stream=terminal.stderr)
    tap = OutputTap(log, queue, echo=terminal.echo)
    terminal.tree_paused(); terminal.tree_resumed(); terminal.tree_stopped()
    terminal.status("⧗ LIMIT wait: 2:59:12 left")   # one line at the bottom, in place; erased around the rest
    log.info("supervisor_stopped", **terminal.settle())  # the echo's last second; what it showed and dropped
    terminal.close()                            # our last lines: at most CLOSE_SECONDS for a stuck terminal

and a full-screen view (`watch`):

    outlet = Outlet(1); console = Console(file=outlet.stream())
    if outlet.drained(): live.update(frame, refresh=True)   # a new frame only when the last one is out
    outlet.close(1.0)
"""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import stat
import sys
import termios
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

import structlog

from ralph_supervisor.logging import FILE_ONLY

ECHO_MIN = 64 << 10
ECHO_MAX = 2 << 20
ECHO_SECONDS = 1.0
"""The echo waiting for the terminal: what it took in this many seconds, within ECHO_MIN..ECHO_MAX."""
LINES_MAX = 256 << 10
"""Our own lines waiting for the terminal; beyond this the oldest are dropped (events.jsonl has them)."""
PIECE = 64 << 10
"""At most this much is handed to one write."""
LINE_BREAK_WITHIN = 4096
"""When our line is due in the middle of an echoed line, the echo goes on to its end if it is this close."""
WAIT_SECONDS = 0.1
"""How long the writer waits for a full terminal before it looks again (at priorities, job control, close)."""
HELD_SECONDS = 0.25
"""How often a terminal we may not write to (background with tostop) is looked at again."""
RATE_WINDOW = 0.5
"""The terminal's speed is measured over this much time while it holds us up."""
CLOSE_SECONDS = 1.0
"""At exit the terminal gets at most this long for the rest of the echo, and as long again for our last lines."""
STUCK_SECONDS = 0.25
"""A terminal that took nothing of what we offered for this long (Ctrl-S, a dead link) is not waited for at exit."""

Event = Callable[..., None]
"""Called with an event name and its fields, from the writer thread (the supervisor logs them)."""


def notice(nbytes: int) -> bytes:
    """The one line said when the terminal has caught up after the echo was cut."""
    return f"ralph-supervise: {nbytes} bytes not shown on the terminal; child.log has everything\n".encode()


def lines_notice(count: int) -> bytes:
    return f"ralph-supervise: {count} of our lines not shown on the terminal; events.jsonl has them\n".encode()


# ---------------------------------------------------------------------------------------------- screen modes

SCREEN_MODES: dict[int, bool] = {
    1: False,  # application cursor keys
    7: True,  # autowrap
    25: True,  # cursor shown
    47: False, 1047: False, 1049: False,  # alternate screen
    1000: False, 1002: False, 1003: False, 1005: False, 1006: False, 1015: False,  # mouse reporting
    1004: False,  # focus events
    2004: False,  # bracketed paste
    2026: False,  # synchronized output: left on, some terminals stop showing anything new
}
"""The DEC private modes (`ESC [ ? N h` sets, `... l` resets) put back, each with its usual state (True: set).
The numbers are xterm's (its "Xterm Control Sequences", DECSET/DECRST), which other terminals and tmux follow;
full-screen agent CLIs use these (Claude Code's own ink renderer: 25, 1049, 1000-1006, 1004, 2004, 2026)."""
KEYPAD = 0
"""Stands for the keypad mode: `ESC =` (application keypad, True) and `ESC >` (normal, the usual)."""
_ALT_SCREENS = (47, 1047, 1049)
_MODE_SEQUENCE = re.compile(rb"\x1b\[\?([0-9;]*)([hl])|\x1b([=>])")
_PARTIAL = re.compile(rb"\x1b(\[(\?[0-9;]*)?)?")
"""The start of a mode sequence cut off at the end of a piece (read again with the next one)."""


def _sequence(mode: int, on: bool) -> bytes:
    if mode == KEYPAD:
        return b"\x1b=" if on else b"\x1b>"
    return b"\x1b[?%d%s" % (mode, b"h" if on else b"l")


@dataclass
class ScreenModes:
    """The screen modes that the bytes written to a terminal switched, read as they are written.

    Bytes are fed in the pieces they were written in; a sequence cut between two pieces is read whole.
    `put_back()` gives the bytes that return every switched mode to its usual state, and the bytes that
    switch them again (for a resume).

        modes = ScreenModes(); modes.feed(b"\\x1b[?1049h\\x1b[?25l")
        modes.put_back()  ->  (b"\\x1b[?25h\\x1b[?1049l", b"\\x1b[?1049h\\x1b[?25l")
    """

    state: dict[int, bool] = field(default_factory=dict)
    _tail: bytes = b""

    def feed(self, data: bytes, start: int = 0, end: int | None = None) -> None:
        """Read `data[start:end]` (without copying it when it holds no escape)."""
        end = len(data) if end is None else end
        if self._tail:
            data, start, end = self._tail + data[start:end], 0, len(self._tail) + end - start
            self._tail = b""
        elif data.find(b"\x1b", start, end) < 0:
            return
        for match in _MODE_SEQUENCE.finditer(data, start, end):
            if match.group(3):
                self.state[KEYPAD] = match.group(3) == b"="
                continue
            on = match.group(2) == b"h"
            for part in match.group(1).split(b";"):
                if part.isdigit() and int(part) in SCREEN_MODES:
                    self.state[int(part)] = on
        last = data.rfind(b"\x1b", max(start, end - 32), end)
        if last >= 0 and _PARTIAL.fullmatch(data, last, end):
            self._tail = data[last:end]

    def switched(self) -> list[tuple[int, bool]]:
        """The modes not in their usual state, with the state they are in."""
        return [(mode, on) for mode, on in self.state.items()
                if on != (False if mode == KEYPAD else SCREEN_MODES[mode])]

    def put_back(self) -> tuple[bytes, bytes]:
        switched = self.switched()
        self.state.clear()
        screens = [(m, on) for m, on in switched if m in _ALT_SCREENS]
        others = [(m, on) for m, on in switched if m not in _ALT_SCREENS]
        back = b"".join(_sequence(m, not on) for m, on in others + screens)  # the main screen last
        again = b"".join(_sequence(m, on) for m, on in screens + others)  # the alternate screen first
        return back, again


# ---------------------------------------------------------------------------------------------- the fd

class _Sink:
    """Where an outlet writes: its own non-blocking open of the terminal or pipe when it can have one.

    O_NONBLOCK on the inherited descriptor would be shared with the shell that started us (and left
    behind for it); an open of our own (`/proc/self/fd/N`) is ours alone. A socket (the journal) takes
    MSG_DONTWAIT per call. A regular file, or anything we cannot reopen, gets blocking writes: the writer
    thread waits, never the supervisor.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.own: int | None = None
        self.sock: socket.socket | None = None
        try:
            found = os.fstat(fd)
        except OSError:
            return
        if stat.S_ISCHR(found.st_mode) or stat.S_ISFIFO(found.st_mode):
            try:
                own = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
            except OSError:
                return
            mine = os.fstat(own)
            if (mine.st_dev, mine.st_ino, mine.st_rdev) == (found.st_dev, found.st_ino, found.st_rdev):
                self.own = own
            else:
                os.close(own)
        elif stat.S_ISSOCK(found.st_mode):
            try:
                self.sock = socket.socket(fileno=os.dup(fd))
            except OSError:
                pass

    @property
    def nonblocking(self) -> bool:
        return self.own is not None or self.sock is not None

    def write(self, data: memoryview) -> int:
        """Bytes taken; 0 when the terminal has no room now. OSError: it is gone."""
        try:
            if self.sock is not None:
                return self.sock.send(data, socket.MSG_DONTWAIT)
            return os.write(self.fd if self.own is None else self.own, data)
        except (BlockingIOError, InterruptedError):
            return 0

    def wait(self, timeout: float) -> None:
        """Until there is room (or `timeout`)."""
        if not self.nonblocking:
            return  # a blocking write waits by itself
        poller = select.poll()
        poller.register(self.sock.fileno() if self.sock is not None else self.own, select.POLLOUT)  # type: ignore[arg-type]
        poller.poll(timeout * 1000)

    def close(self) -> None:
        if self.own is not None:
            os.close(self.own)
            self.own = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def may_write(fd: int) -> bool:
    """False in the background of a terminal with `tostop`, where a write would raise SIGTTOU."""
    try:
        if os.tcgetpgrp(fd) == os.getpgrp():
            return True
        return not termios.tcgetattr(fd)[3] & termios.TOSTOP
    except (OSError, termios.error):
        return True  # not our controlling terminal (or no terminal): no job control applies


def in_foreground(fd: int) -> bool:
    """We may change the terminal's modes: we are its foreground job (or it does no job control for us)."""
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return True


def _termios(fd: int) -> list[Any] | None:
    try:
        return termios.tcgetattr(fd)
    except (OSError, termios.error):
        return None


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------- the outlet

@dataclass
class _Gap:
    """Echo bytes dropped since the terminal fell behind; said when it reaches this point."""

    nbytes: int = 0


@dataclass(frozen=True)
class _Control:
    """Bytes of ours in the echo's order (a notice, screen modes put back): never dropped, never counted."""

    data: bytes


@dataclass(frozen=True)
class _Mark:
    """The tree was paused, resumed or stopped here: put the terminal back (or the tree's modes again)."""

    what: str


_PAUSED, _RESUMED, _STOPPED = _Mark("paused"), _Mark("resumed"), _Mark("stopped")
_Item = bytes | _Gap | _Control | _Mark


class Outlet:
    """One destination (a terminal, a pipe, a file) and the thread that writes to it. See the module doc."""

    def __init__(self, fd: int, *, on_event: Event | None = None, label: str = "terminal") -> None:
        self.fd = fd
        self.label = label
        self.is_tty = _isatty(fd)
        self._sink = _Sink(fd)
        self._on_event = on_event
        self._found_modes: list[Any] | None = None
        """The terminal modes as the shell handed the terminal to us (read once we are in the foreground:
        in the background they are the shell's, which the line editor changes while it reads a command)."""
        self._tree_modes: list[Any] | None = None
        self._screen = ScreenModes()
        self._screen_again = b""
        self._cond = threading.Condition(threading.Lock())
        self._lines: deque[bytes] = deque()
        self._lines_bytes = 0
        self._lines_dropped = 0
        self._line_offset = 0
        self._line_begun = False
        """The first line is being written (decorated, maybe partly out): it is never dropped."""
        self._echo: deque[_Item] = deque()
        self._echo_offset = 0
        self._echo_bytes = 0
        """Echo bytes accepted and not yet written (the bound applies to these)."""
        self._gap: _Gap | None = None
        self._bound = ECHO_MAX
        self._mid_line = False
        """The last bytes written were echo that did not end a line."""
        self._idle = False
        self._settled = False
        self._closing = False
        self._deadline = float("inf")
        self._held = False
        self._limited_since: float | None = None
        self._limited_bytes = 0
        self._waiting_since: float | None = None
        """Since when the terminal has taken nothing of what we offered (None: it took all we had)."""
        self._status_want: bytes | None = None
        """The status line wanted at the bottom (a countdown), updated in place; None: none."""
        self._status_shown: bytes | None = None
        self._status_buf = b""
        """Status bytes being written (an erase, or an erase and the line): finished before anything else."""
        self._status_off = 0
        self.shown_bytes = 0
        """Echo bytes written to the terminal."""
        self.dropped_bytes = 0
        """Echo bytes not shown whose count was said (or, at close, that were left)."""
        if self.is_tty and in_foreground(fd):
            self._found_modes = _termios(fd)
        self._thread = threading.Thread(target=self._run, name=f"ralph-{label}", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- what the others call

    def echo(self, data: bytes) -> None:
        """Queue the loop's output (the tap calls this for every chunk it reads): never blocks."""
        with self._cond:
            if self._settled:
                self.dropped_bytes += len(data)
                return
            gap = self._gap
            if gap is not None:
                gap.nbytes += len(data)
                return
            room = self._bound - self._echo_bytes
            if len(data) > room:
                keep = data.rfind(b"\n", 0, room) + 1 if room > 0 else 0  # whole lines of it, if any fit
                if keep:
                    self._echo.append(data[:keep])
                    self._echo_bytes += keep
                self._gap = _Gap(len(data) - keep)
                self._echo.append(self._gap)
            else:
                self._echo.append(data)
                self._echo_bytes += len(data)
            if self._idle:
                self._cond.notify()

    def line(self, data: bytes) -> None:
        """Queue a line of ours (or a frame of a view): written before any echo, never blocks."""
        if not data:
            return
        with self._cond:
            self._lines.append(data)
            self._lines_bytes += len(data)
            first = 1 if self._line_begun else 0  # never the one being written
            while self._lines_bytes > LINES_MAX and len(self._lines) > first + 1:
                dropped = self._lines[first]
                del self._lines[first]
                self._lines_bytes -= len(dropped)
                self._lines_dropped += 1
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
            self._status_want = data
            if self._idle:
                self._cond.notify()

    def _status_due(self) -> bool:
        """(Under the lock.) The status line needs writing: one is half written, or what is shown is not wanted."""
        return bool(self._status_buf) or self._status_want != self._status_shown

    def mark(self, what: str) -> None:
        """The tree was `paused`, `resumed` or `stopped`: the terminal is put back in the echo's order."""
        with self._cond:
            self._echo.append({"paused": _PAUSED, "resumed": _RESUMED, "stopped": _STOPPED}[what])
            if self._idle:
                self._cond.notify()

    def drained(self) -> bool:
        """Nothing of ours waits for the terminal."""
        with self._cond:
            return not self._lines and not self._echo and not self._status_buf

    def stream(self) -> LineStream:
        return LineStream(self)

    @property
    def not_shown_bytes(self) -> int:
        """Echo bytes dropped so far: said, or to be said when the terminal has caught up."""
        with self._cond:
            return self.dropped_bytes + sum(item.nbytes for item in self._echo if isinstance(item, _Gap))

    def settle(self, timeout: float = CLOSE_SECONDS) -> int:
        """The echo is over (the tap is done): put the screen modes back, give the terminal at most
        `timeout` seconds for the rest, and count what it did not take (one `echo_dropped` event).
        Returns those bytes."""
        deadline = time.monotonic() + timeout
        with self._cond:
            if self._settled:
                return 0
            self._settled = True
            if self.is_tty:
                self._echo.append(_STOPPED)
            self._cond.notify()
            while self._echo and self._thread.is_alive() and time.monotonic() < deadline and not self._stuck():
                self._cond.wait(0.02)
            left = self._echo_bytes + sum(item.nbytes for item in self._echo if isinstance(item, _Gap))
            self._echo.clear()  # (the writer's piece in flight, if any, is seen to be gone in _wrote)
            self._echo_offset = self._echo_bytes = 0
            self._gap = None
            self.dropped_bytes += left
        if left:
            self._event("echo_dropped", bytes=left, total_bytes=self.dropped_bytes, at_exit=True)
        return left

    def close(self, timeout: float = CLOSE_SECONDS) -> None:
        """`settle`, then write our lines that are left (all within `timeout` seconds), stop the thread."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._status_want = None  # no status line is left behind
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
            while not self._lines and not self._echo and not self._closing and not self._status_due():
                self._idle = True
                self._cond.wait()
            self._idle = False
            if self._closing and (time.monotonic() >= self._deadline or self._stuck()
                                  or (not self._lines and not self._echo and not self._status_due())):
                return False
        if self.is_tty and not may_write(self.fd):
            self._hold()
            return True
        if self._held:
            self._held = False
            self._event("echo_resumed", reason="the supervisor is in the foreground of its terminal again")
        if self.is_tty and self._found_modes is None and in_foreground(self.fd):
            self._found_modes = _termios(self.fd)
        events: list[tuple[str, dict[str, Any]]] = []
        with self._cond:
            data, start, end, kind = self._take(events)
        for name, fields in events:
            self._event(name, **fields)
        if not kind:
            return True
        try:
            taken = self._sink.write(memoryview(data)[start:end])
        except OSError as exc:
            self._lose(exc.strerror or str(exc))
            return False
        self._wrote(data, start, end, taken, kind)
        if taken < end - start:
            self._limited()
            self._sink.wait(WAIT_SECONDS)
        return True

    def _take(self, events: list[tuple[str, dict[str, Any]]]) -> tuple[bytes, int, int, str]:
        """The next bytes to write (under the lock): our lines first, then the echo in its order.
        `data[start:end]`, and what they are: "line", "echo", "control" (ours, in the echo's order),
        or "" for nothing to write now. The status line: erased before anything else, drawn when all is out."""
        if self._status_buf:  # a status write in progress is finished first
            return self._status_buf, self._status_off, len(self._status_buf), "status"
        if self._status_shown is not None and (self._lines or self._echo):
            self._status_buf, self._status_off, self._status_shown = b"\r\x1b[2K", 0, None
            return self._status_buf, 0, len(self._status_buf), "status"
        if self._lines and not self._finish_echo_line_first():
            if not self._line_begun:  # once per line: what was dropped before it, and a line of its own
                self._line_begun = True
                before = (b"\n" if self._mid_line else b"") + (
                    lines_notice(self._lines_dropped) if self._lines_dropped else b"")
                self._lines_dropped = 0
                if before:
                    self._lines[0] = before + self._lines[0]
                    self._lines_bytes += len(before)
            front = self._lines[0]
            return front, self._line_offset, min(len(front), self._line_offset + PIECE), "line"
        while self._echo:
            front = self._echo[0]
            if isinstance(front, bytes):
                end = self._echo_offset + PIECE
                if self._lines:  # our line waits: stop at the end of this echoed line
                    end = front.find(b"\n", self._echo_offset, self._echo_offset + LINE_BREAK_WITHIN) + 1 or end
                return front, self._echo_offset, min(len(front), end), "echo"
            if isinstance(front, _Control):
                return front.data, self._echo_offset, len(front.data), "control"
            self._echo.popleft()
            if isinstance(front, _Gap):
                # Caught up: everything before the cut is out. Say it, and take the echo again.
                if self._gap is front:
                    self._gap = None
                self.dropped_bytes += front.nbytes
                events.append(("echo_dropped", {"bytes": front.nbytes, "total_bytes": self.dropped_bytes}))
                self._echo.appendleft(_Control((b"\n" if self._mid_line else b"") + notice(front.nbytes)))
            else:
                data = self._put_back(front, events)
                if data:
                    self._echo.appendleft(_Control(data))
        if self._status_want != self._status_shown:  # all is out: the status line (again), or its erase
            want = self._status_want
            self._status_buf = (b"\n" if self._mid_line and want else b"") + b"\r\x1b[2K" + (want or b"")
            self._status_off, self._status_shown = 0, want
            return self._status_buf, 0, len(self._status_buf), "status"
        return b"", 0, 0, ""

    def _finish_echo_line_first(self) -> bool:
        """Our line waits while the echo is in the middle of a line that ends within a few KiB."""
        if not self._mid_line or not self._echo or self._line_offset:
            return False
        front = self._echo[0]
        return isinstance(front, bytes) and front.find(
            b"\n", self._echo_offset, self._echo_offset + LINE_BREAK_WITHIN) >= 0

    def _put_back(self, mark: _Mark, events: list[tuple[str, dict[str, Any]]]) -> bytes:
        """The tree was paused, resumed or stopped: the terminal as we found it (or as the tree had it)."""
        if not self.is_tty:
            return b""
        restored: dict[str, Any] = {}
        data = b""
        if mark is _RESUMED:
            data, self._screen_again = self._screen_again, b""
            if self._tree_modes is not None and in_foreground(self.fd):
                _set_modes(self.fd, self._tree_modes)
                restored["termios"] = "the tree's"
            self._tree_modes = None
        else:
            back, again = self._screen.put_back()
            data = back
            self._screen_again = again if mark is _PAUSED else b""
            if back:
                restored["screen_modes"] = back.decode("ascii", "replace").replace("\x1b", "ESC")
            now = _termios(self.fd)
            if self._found_modes is not None and now is not None and now != self._found_modes \
                    and in_foreground(self.fd):
                _set_modes(self.fd, self._found_modes)
                self._tree_modes = now if mark is _PAUSED else None
                restored["termios"] = "as found at start"
        if restored:
            events.append(("terminal_restored", {"after": f"tree {mark.what}", **restored}))
        return data

    def _wrote(self, data: bytes, start: int, end: int, taken: int, kind: str) -> None:
        if self.is_tty and taken > 0:
            self._screen.feed(data, start, start + taken)  # only the writer thread reads or changes it
        with self._cond:
            if taken >= end - start:
                self._waiting_since = None
            elif taken or self._waiting_since is None:
                self._waiting_since = time.monotonic()  # it takes something: not stuck
            if taken <= 0:
                return
            if kind == "status":
                self._status_off += taken
                if self._status_off >= len(self._status_buf):
                    self._status_buf, self._status_off = b"", 0
                self._mid_line = False  # the cursor is on the status line, which is erased before any other write
                return
            if kind == "line":
                self._line_offset += taken
                self._lines_bytes -= taken
                self._mid_line = False
                if self._line_offset >= len(self._lines[0]):
                    self._lines.popleft()
                    self._line_offset = 0
                    self._line_begun = False
                return
            if kind == "echo":
                self.shown_bytes += taken
                self._echo_bytes -= taken
                self._mid_line = data[start + taken - 1] != 10  # b"\n"
                if self._limited_since is not None:
                    self._limited_bytes += taken
            else:
                self._mid_line = False
            front = self._echo[0] if self._echo else None
            if front is not data and not (isinstance(front, _Control) and front.data is data):
                return  # settled meanwhile: what was queued is gone
            self._echo_offset += taken
            if self._echo_offset >= len(data):
                self._echo.popleft()
                self._echo_offset = 0
            if not self._echo_bytes and self._gap is None:
                self._limited_since, self._bound = None, ECHO_MAX  # it keeps up again

    def _stuck(self) -> bool:
        """(Under the lock.) The terminal has taken nothing of what we offered for STUCK_SECONDS."""
        since = self._waiting_since
        return since is not None and time.monotonic() - since >= STUCK_SECONDS

    def _limited(self) -> None:
        """The terminal took less than offered: measure how fast it takes bytes, and keep about a
        second of that (what is queued beyond is cut now, so the terminal never shows old output)."""
        now = time.monotonic()
        with self._cond:
            if self._limited_since is None:
                self._limited_since, self._limited_bytes = now, 0
                return
            spent = now - self._limited_since
            if spent >= RATE_WINDOW:
                rate = self._limited_bytes / spent
                self._bound = int(min(ECHO_MAX, max(ECHO_MIN, rate * ECHO_SECONDS)))
                self._limited_since, self._limited_bytes = now, 0
                if self._echo_bytes > self._bound:
                    self._cut_echo(self._bound)

    def _cut_echo(self, room: int | None) -> None:
        """Keep the first `room` bytes of the queued echo (and the piece being written); None: keep none.
        What is cut becomes one gap, said when the terminal gets there. Our controls and marks stay."""
        kept: deque[_Item] = deque()
        after: list[_Item] = []
        total = dropped = 0
        offset = 0
        for index, item in enumerate(self._echo):
            skip = self._echo_offset if index == 0 else 0
            if isinstance(item, bytes):
                size = len(item) - skip
                if room is not None and not dropped and (index == 0 or total + size <= room):
                    kept.append(item)
                    total += size
                    if index == 0:
                        offset = skip  # the piece in flight goes on from where it stands
                else:
                    dropped += size
            elif isinstance(item, _Gap):
                dropped += item.nbytes
            else:
                if isinstance(item, _Control) and skip:
                    item = _Control(item.data[skip:])  # the rest of ours
                (after if dropped else kept).append(item)
        if dropped:
            self._gap = _Gap(dropped)
            kept.append(self._gap)
        kept.extend(after)
        self._echo = kept
        self._echo_offset = offset
        self._echo_bytes = total

    def _hold(self) -> None:
        """In the background with tostop: drop the echo (counted), keep our lines, look again soon."""
        with self._cond:
            self._cut_echo(None)
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


def _set_modes(fd: int, modes: list[Any]) -> None:
    try:
        termios.tcsetattr(fd, termios.TCSANOW, modes)  # TCSADRAIN would wait for a stopped terminal
    except (OSError, termios.error):
        pass


# ---------------------------------------------------------------------------------------------- streams

class LineStream:
    """A text stream that hands whole lines to an outlet: for structlog's console, `sys.stderr`, rich."""

    def __init__(self, outlet: Outlet, encoding: str = "utf-8") -> None:
        self.outlet = outlet
        self.encoding = encoding
        self.errors = "replace"
        self._partial = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            whole = self._partial + text
            end = whole.rfind("\n") + 1
            self._partial = whole[end:]
        if end:
            self.outlet.line(whole[:end].encode(self.encoding, self.errors))
        return len(text)

    def flush(self) -> None:
        with self._lock:
            text, self._partial = self._partial, ""
        if text:
            self.outlet.line(text.encode(self.encoding, self.errors))

    def drained(self) -> bool:
        return not self._partial and self.outlet.drained()

    def isatty(self) -> bool:
        return self.outlet.is_tty

    def fileno(self) -> int:
        return self.outlet.fd

    def writable(self) -> bool:
        return True

    @property
    def closed(self) -> bool:
        return False


# ---------------------------------------------------------------------------------------------- the supervisor's

class Terminal:
    """The supervisor's terminal: the echo on stdout and our lines on stderr, one outlet when they are
    the same file. `take_over` also points `sys.stderr` at it until `close`."""

    def __init__(self, echo_outlet: Outlet | None, lines_outlet: Outlet | None) -> None:
        self._echo = echo_outlet
        self._lines = lines_outlet
        self.stderr: TextIO = lines_outlet.stream() if lines_outlet is not None else sys.stderr  # type: ignore[assignment]
        self._saved_stderr: Any = None

    @classmethod
    def take_over(cls, echo: bool | None = None, on_event: Event | None = None) -> Terminal:
        """Outlets for fd 1 (when echoing: `echo`, or stdout is a terminal) and fd 2; sys.stderr through them."""
        if echo is None:
            echo = _isatty(1)
        on_event = on_event or _log_event
        lines = Outlet(2, on_event=on_event) if _usable(2) else None
        echo_outlet = None
        if echo and _usable(1):
            echo_outlet = lines if lines is not None and _same_file(1, 2) else Outlet(1, on_event=on_event)
        terminal = cls(echo_outlet, lines)
        if lines is not None:
            terminal._saved_stderr, sys.stderr = sys.stderr, terminal.stderr  # type: ignore[assignment]
        return terminal

    @property
    def echo(self) -> Callable[[bytes], None] | None:
        """What the tap calls with every chunk (None: no echo)."""
        return self._echo.echo if self._echo is not None else None

    @property
    def echo_dropped_bytes(self) -> int:
        """Echo bytes not shown so far (said, or waiting to be said when the terminal catches up)."""
        return self._echo.not_shown_bytes if self._echo is not None else 0

    def _outlets(self) -> list[Outlet]:
        return [o for o in dict.fromkeys((self._echo, self._lines)) if o is not None]

    def tree_paused(self) -> None:
        for outlet in self._outlets():
            outlet.mark("paused")

    def tree_resumed(self) -> None:
        for outlet in self._outlets():
            outlet.mark("resumed")

    @property
    def status_in_place(self) -> bool:
        """Our lines go to a terminal: a status line (a countdown) can be updated in place there."""
        return self._lines is not None and self._lines.is_tty

    def status(self, text: str | None) -> None:
        """The one line at the bottom, updated in place (see `Outlet.status`); None takes it away."""
        if self._lines is not None:
            self._lines.status(text)

    def tree_stopped(self) -> None:
        for outlet in self._outlets():
            outlet.mark("stopped")

    def settle(self, timeout: float = CLOSE_SECONDS) -> dict[str, int]:
        """The loop's output is over: the rest of the echo gets at most `timeout` seconds, and what
        the terminal showed and did not show is counted (fields for the last log line)."""
        outlet = self._echo
        if outlet is None:
            return {}
        outlet.settle(timeout)
        return {"echo_shown_bytes": outlet.shown_bytes, "echo_dropped_bytes": outlet.dropped_bytes}

    def close(self, timeout: float = CLOSE_SECONDS) -> None:
        """Write what is left (at most `timeout` seconds in all), put sys.stderr back."""
        if self._saved_stderr is not None:
            self.stderr.flush()
        deadline = time.monotonic() + timeout
        for outlet in self._outlets():
            outlet.close(max(0.0, deadline - time.monotonic()))
        if self._saved_stderr is not None:
            sys.stderr, self._saved_stderr = self._saved_stderr, None


def _usable(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def _same_file(a: int, b: int) -> bool:
    try:
        x, y = os.fstat(a), os.fstat(b)
    except OSError:
        return False
    return (x.st_dev, x.st_ino, x.st_rdev) == (y.st_dev, y.st_ino, y.st_rdev)


def _log_event(name: str, **fields: Any) -> None:
    """Terminal events go to events.jsonl only: on the terminal they would be noise (or the cause)."""
    structlog.get_logger("ralph_supervisor").info(name, **fields, **{FILE_ONLY: True})
