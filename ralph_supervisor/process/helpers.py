"""The supervisor's own helper processes: hooks, and git for the snapshots and the report.

They are descendants of the supervisor (it is their parent, and the subreaper) but not part of the loop's
tree: a pause must not freeze them, a stop must not kill them. A helper is known by its pid only once it
was forked, so the tree could scan in that moment, take it for the loop's, and freeze it for good. So a
helper is started under `lock`, and the tree scans and signals under the same lock: it sees either no
helper or a registered one.

    >>> proc = HELPERS.popen(["git", "--version"], stdout=subprocess.DEVNULL)   # doctest: +SKIP
    >>> proc.pid in HELPERS                                                       # doctest: +SKIP
    True
"""

from __future__ import annotations

import subprocess
import threading
from typing import Any


class Helpers:
    """The helper pids, and the lock that keeps their starts apart from the tree's scans."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._pids: set[int] = set()

    def popen(self, *args: Any, **kwargs: Any) -> subprocess.Popen[Any]:
        """`subprocess.Popen(...)`, registered as a helper before the tree can see it. Call `done` once
        it has been waited for (its pid may then be reused)."""
        with self.lock:
            proc: subprocess.Popen[Any] = subprocess.Popen(*args, **kwargs)
            self._pids.add(proc.pid)
        return proc

    def done(self, pid: int) -> None:
        with self.lock:
            self._pids.discard(pid)

    def wait_briefly(self, proc: subprocess.Popen[bytes], timeout: float) -> tuple[int | None, str]:
        """Wait at most `timeout` seconds for a helper started with `stderr=PIPE` (killed after that), and
        say it is done: (its exit code, None when it was killed for the time; its last line on stderr)."""
        try:
            try:
                _, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                return None, ""
        finally:
            self.done(proc.pid)
        lines = (err or b"").decode("utf-8", "replace").strip().splitlines()
        return proc.returncode, lines[-1] if lines else ""

    def __contains__(self, pid: object) -> bool:
        return pid in self._pids

    def pids(self) -> frozenset[int]:
        with self.lock:
            return frozenset(self._pids)


HELPERS = Helpers()
"""The one registry of this process's helpers."""
