"""Priming: hash the workspace's existing small files in the background, so a first rewrite with the same
content is recognised as no change.

Without it a file's content before its first write is unknown, and that write counts. A file is primed
only when its inode has not changed (ctime: writes, renames, `touch -d` all set it) since shortly before
the watch began: then what is read is what was there at the start, and no event about it can be pending.
A file not primed (larger than `PRIME_MAX_FILE`, beyond the budget, or written before priming reached it)
keeps an unknown old content. Runs on the `workspace-prime` thread at the lowest CPU priority, in a
budget of files and bytes, and owns nothing but its count: what it learns goes to `learn(path, state)`
unless `known(path)` says a change came first.

    priming = Priming(scope, known=recorder.knows, learn=recorder.learn)
    priming.start(watch_began_ns)
    priming.wait(10); priming.files   # how many were hashed
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from ralph_supervisor.evidence.file_state import file_state
from ralph_supervisor.evidence.scope import Scope

log = structlog.get_logger(__name__)

PRIME_MAX_FILE = 1024 * 1024
PRIME_MAX_FILES = 100_000
PRIME_MAX_BYTES = 512 * 1024 * 1024
PRIME_CTIME_MARGIN_NS = 100_000_000
"""Files whose inode changed less than this before the watch began are not primed (file times are
stamped from a coarse clock, a few ms behind `time.time_ns()`)."""


class Priming:
    """The background hashing of the files that were there when the watch began."""

    def __init__(self, scope: Scope, *, known: Callable[[str], bool], learn: Callable[[str, bytes], None]) -> None:
        self.scope = scope
        self._known = known
        self._learn = learn
        self._limit_ns = 0
        self.files = 0
        """Files hashed (set when priming is done)."""
        self._done = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, watch_began_ns: int) -> None:
        """Hash in the background what has not changed since shortly before `watch_began_ns` (epoch ns)."""
        self._limit_ns = watch_began_ns - PRIME_CTIME_MARGIN_NS
        self._thread = threading.Thread(target=self._run, name="workspace-prime", daemon=True)
        self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except (AttributeError, OSError):
            pass
        files = 0
        budget = PRIME_MAX_BYTES
        try:
            for path, entry in self.scope.files(""):
                if files >= PRIME_MAX_FILES or budget <= 0 or self._stop.is_set():
                    break
                size = self._prime(path, entry)
                if size is not None:
                    files += 1
                    budget -= size
                    if files % 256 == 0:
                        time.sleep(0.001)  # let the watcher thread have the GIL
        except Exception as exc:  # noqa: BLE001 - priming is an optimisation: never a crash
            log.warning("watcher_priming_failed", error=repr(exc))
        finally:
            self.files = files
            self._done.set()

    def _prime(self, path: str, entry: os.DirEntry[str]) -> int | None:
        """Hash one file if it is unchanged since before the watch began; its size when it was primed."""
        try:
            if not entry.is_file(follow_symlinks=False) or self._known(path):
                return None
            before = os.lstat(entry.path)
            if before.st_ctime_ns >= self._limit_ns or before.st_size > PRIME_MAX_FILE:
                return None
            state = file_state(Path(entry.path))
            after = os.lstat(entry.path)
        except OSError:
            return None
        if (after.st_ctime_ns, after.st_size, after.st_ino) != (before.st_ctime_ns, before.st_size, before.st_ino):
            return None
        self._learn(path, state)
        return before.st_size
