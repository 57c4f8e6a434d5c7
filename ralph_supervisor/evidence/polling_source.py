"""The polling fallback: where inotify is out of watches or instances (or absent), scan instead.

Every `interval` it stats each file that counts (mtime, size, inode) and reports what differs from the
last pass: `found(path, created)` for a new or altered file, `gone(path)` for one no longer there. The
first pass only sets the baseline (after a fall back mid-run, files in folders inotify did not cover count
as created: they appeared after their folder's watch failed). Polling a huge tree is expensive, so the
thread rests at least twice as long as a scan takes: at most about a third of one core.

Threads: the `workspace-poll` thread makes every pass after the baseline and owns the last pass's
snapshot (the baseline is made by `start` before the thread exists). An iteration boundary that needs a
pass now (`scan()`) asks the thread for one and waits for it, so passes never overlap and changes are
reported in order. The request counters are behind the source's condition, never held during a pass.

    polling = PollingSource(scope, found=evaluate, gone=record_absent, interval=1.0)
    polling.start()    # the baseline pass, then the thread
    polling.scan()     # one pass now (an iteration boundary), on the thread
    polling.stop()
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection

import structlog

from ralph_supervisor.evidence.scope import Scope

log = structlog.get_logger(__name__)


class PollingSource:
    """Scans the workspace's files every `interval` seconds and reports what changed since the last pass."""

    def __init__(self, scope: Scope, *, found: Callable[[str, bool], None], gone: Callable[[str], None],
                 interval: float) -> None:
        self.scope = scope
        self.interval = interval
        self._found = found
        self._gone = gone
        self._snapshot: dict[str, tuple[int, int, int]] = {}
        """The last pass: (mtime, size, inode) per file. The poll thread's."""
        self._cond = threading.Condition()
        self._asked = 0
        self._done = 0
        self._stopped = False
        self._thread: threading.Thread | None = None

    def start(self, watched: Collection[str] | None = None) -> None:
        """The baseline pass here, then a pass every `interval` on a thread of its own. `watched`: when
        falling back mid-run, the folders inotify covered (files found elsewhere count as created)."""
        self._snapshot = self._stat_all()
        if watched is not None:
            for path in self._snapshot:
                if path.rpartition("/")[0] not in watched:
                    self._found(path, True)
        with self._cond:
            if self._stopped:
                return
            self._thread = threading.Thread(target=self._run, name="workspace-poll", daemon=True)
            self._thread.start()

    def scan(self) -> None:
        """One pass now, made by the poll thread; returns when it is done (or the source stopped)."""
        with self._cond:
            if self._thread is None or self._stopped:
                return
            self._asked += 1
            target = self._asked
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._done >= target or self._stopped)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _run(self) -> None:
        pause = self.interval
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stopped or self._asked > self._done, pause)
                if self._stopped:
                    return
                target = self._asked
            began = time.monotonic()
            try:
                self._pass()
            except Exception as exc:  # noqa: BLE001 - one odd pass never ends the polling
                log.warning("watcher_scan_failed", error=repr(exc))
            with self._cond:
                self._done = target
                self._cond.notify_all()
            pause = max(self.interval, 2 * (time.monotonic() - began))

    def _stat_all(self) -> dict[str, tuple[int, int, int]]:
        seen: dict[str, tuple[int, int, int]] = {}
        for path, entry in self.scope.files(""):
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            seen[path] = (st.st_mtime_ns, st.st_size, st.st_ino)
        return seen

    def _pass(self) -> None:
        previous, self._snapshot = self._snapshot, self._stat_all()
        for path, sig in self._snapshot.items():
            old = previous.get(path)
            if old is None:
                self._found(path, True)
            elif old != sig:
                self._found(path, False)
        for path in previous.keys() - self._snapshot.keys():
            self._gone(path)
