"""The supervisor's terminal: the loop's echo on stdout and our own lines on stderr, each through an outlet.

One outlet when stdout and stderr are the same file; `sys.stderr` goes through the lines' outlet until
`close`, so nothing of ours writes to the terminal directly. Every call here only queues (see `outlet.py`).

    terminal = Terminal.take_over(echo=None)    # echo when stdout is a terminal; sys.stderr goes through it
    terminal.tree_paused(); terminal.tree_resumed(); terminal.tree_stopped()
    terminal.close()
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import structlog

from ralph_supervisor.logging import FILE_ONLY
from ralph_supervisor.terminal.modes import isatty
from ralph_supervisor.terminal.outlet import CLOSE_SECONDS, Event, Outlet


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
            echo = isatty(1)
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
