"""The terminal's modes, job control, and putting the terminal back as it was when the tree is paused or stopped.

Two kinds of modes: the terminal modes (termios: echo, canonical input, ...), which a program of the tree
that opens the terminal device itself can change, and the screen modes that the echoed output switches
(alternate screen, hidden cursor, mouse reporting, bracketed paste, application keys). `ScreenModes` reads
the latter from the bytes as they are written; `TerminalModes` remembers the former as they were found and
puts both back at each mark (`Mark`: the tree was paused, resumed or stopped), and the tree's own again on
resume. Job control: `may_write` (False in the background of a terminal with `tostop`, where a write would
raise SIGTTOU) and `in_foreground` (only the foreground job may change the terminal's modes).

    modes = TerminalModes(fd, is_tty=True)      # the writer thread's alone
    modes.saw(data, 0, taken)                  # every byte written
    back, restored = modes.put_back(Mark("paused"))  # bytes to write in the echo's order, and what was put back
"""

from __future__ import annotations

import os
import re
import termios
from dataclasses import dataclass, field
from typing import Any

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


# ---------------------------------------------------------------------------------------------- job control

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


def isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def _read_modes(fd: int) -> list[Any] | None:
    try:
        return termios.tcgetattr(fd)
    except (OSError, termios.error):
        return None


def _set_modes(fd: int, modes: list[Any]) -> None:
    try:
        termios.tcsetattr(fd, termios.TCSANOW, modes)  # TCSADRAIN would wait for a stopped terminal
    except (OSError, termios.error):
        pass


# ---------------------------------------------------------------------------------------------- putting back

@dataclass(frozen=True, eq=False)
class Mark:
    """The tree was `paused`, `resumed` or `stopped` here (in the echo's order): put the terminal back, or the
    tree's modes again. Compared by identity: each mark queued is its own."""

    what: str

    def __post_init__(self) -> None:
        if self.what not in ("paused", "resumed", "stopped"):
            raise ValueError(f"a terminal mark is paused, resumed or stopped, not {self.what!r}")


class TerminalModes:
    """The terminal as the shell handed it to us, the tree's modes while paused, and the screen modes the
    echo switched. Used by the writer thread alone (no lock): it reads every byte written and puts the
    terminal back at each mark, outside its outlet's lock (a tcsetattr is a call to the terminal)."""

    def __init__(self, fd: int, is_tty: bool) -> None:
        self.fd = fd
        self.is_tty = is_tty
        self._found: list[Any] | None = _read_modes(fd) if is_tty and in_foreground(fd) else None
        """The terminal modes as the shell handed the terminal to us (read once we are in the foreground:
        in the background they are the shell's, which the line editor changes while it reads a command)."""
        self._tree: list[Any] | None = None
        self._screen = ScreenModes()
        self._screen_again = b""

    def saw(self, data: bytes, start: int, end: int) -> None:
        """These bytes went to the terminal: follow the screen modes they switch."""
        if self.is_tty and end > start:
            self._screen.feed(data, start, end)

    def look_again(self) -> None:
        """The modes as found, once we have the terminal in the foreground (if not read at start)."""
        if self.is_tty and self._found is None and in_foreground(self.fd):
            self._found = _read_modes(self.fd)

    def put_back(self, at: Mark) -> tuple[bytes, dict[str, Any]]:
        """The tree was paused, resumed or stopped: the terminal as we found it (or as the tree had it).
        Returns the bytes to write next (screen modes) and what was put back (empty: nothing)."""
        if not self.is_tty:
            return b"", {}
        restored: dict[str, Any] = {}
        if at.what == "resumed":
            data, self._screen_again = self._screen_again, b""
            if self._tree is not None and in_foreground(self.fd):
                _set_modes(self.fd, self._tree)
                restored["termios"] = "the tree's"
            self._tree = None
            return data, restored
        back, again = self._screen.put_back()
        self._screen_again = again if at.what == "paused" else b""
        if back:
            restored["screen_modes"] = back.decode("ascii", "replace").replace("\x1b", "ESC")
        now = _read_modes(self.fd)
        if self._found is not None and now is not None and now != self._found and in_foreground(self.fd):
            _set_modes(self.fd, self._found)
            self._tree = now if at.what == "paused" else None
            restored["termios"] = "as found at start"
        return back, restored
