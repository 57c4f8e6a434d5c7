"""How a run ends: the exit code once it is decided, and a second signal's hurry.

The exit code is decided once (`finish`, whoever decides first wins); from then on no new iteration may
begin (`exiting`). After a second SIGINT or SIGTERM the shutdown waits for nothing (`hurry`).

    >>> life = Lifecycle(asyncio.get_running_loop())    # doctest: +SKIP
    >>> life.finish(2)                                   # doctest: +SKIP
    >>> await life.exit_code                             # doctest: +SKIP
    2
"""

from __future__ import annotations

import asyncio


class Lifecycle:
    """The run's exit code and how hurried its end is. Event loop only."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.exit_code: asyncio.Future[int] = loop.create_future()
        self.hurry = False
        """A second signal: leave at once (the shutdown waits for nothing)."""
        self.signals = 0
        """SIGINT and SIGTERM received so far."""

    def finish(self, code: int) -> None:
        if not self.exit_code.done():
            self.exit_code.set_result(code)

    @property
    def exiting(self) -> bool:
        """The exit code is decided: no new iteration may begin."""
        return self.exit_code.done()
