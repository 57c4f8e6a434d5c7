"""The supervisor's signals, in one place.

SIGTERM or SIGINT may arrive before the event loop exists (as PID 1 in a container an unhandled SIGTERM
would be dropped; elsewhere it would kill us before we unregister and unlock): `catch_early` keeps them,
and `install` hands them to the loop's handler once it is there. SIGHUP (a closed tmux pane or ssh session)
and SIGPIPE (a closed reader) never end a supervisor.

    >>> catch_early()                                              # doctest: +SKIP
    >>> install(loop, on_signal=stop_gracefully, on_sigchld=reap)   # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

EARLY: list[int] = []
"""SIGTERM / SIGINT received before the event loop's handlers exist."""


def catch_early() -> None:
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda received, _frame: EARLY.append(received))


def install(loop: asyncio.AbstractEventLoop, *, on_signal: Callable[[int], None],
            on_sigchld: Callable[[], None]) -> None:
    """The loop's handlers; a signal that came early is handled now."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    loop.add_signal_handler(signal.SIGINT, on_signal, signal.SIGINT)
    loop.add_signal_handler(signal.SIGTERM, on_signal, signal.SIGTERM)
    loop.add_signal_handler(signal.SIGCHLD, on_sigchld)
    for signum in EARLY:
        on_signal(signum)
    EARLY.clear()
