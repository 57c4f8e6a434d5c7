"""The recorder: what the workspace knows, kept up to date from whichever thread saw a change.

The sources (inotify's dispatcher, the polling thread, the fall back's first scan) say that a path was
found, written or is gone; the recorder hashes it (`file_state`), and the segment book judges whether its
state changed and in which segment. A file still being written is re-hashed at most every
`MODIFY_REHASH_S`; a segment's close hashes what that pace skipped, so its end is exact.

Threads: the segment book, the pace and the skipped paths are the recorder's own, behind its one lock,
never held while calling out: `on_change` (each change) and `on_gap` (what changed between two calls) are
told after it is released, on the thread that recorded the change or closed the gap. Git's refs are read
and files hashed outside it too.

    recorder = Recorder(scope, on_change=print)
    recorder.found("src/a.py", created=True)
    recorder.open_segment("call-1")
    recorder.close_segment("call-1"); recorder.take("call-1")   # the call's WorkspaceDelta
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

from ralph_supervisor.evidence.file_state import ABSENT, changed_at, file_state
from ralph_supervisor.evidence.git_refs import read_git_refs
from ralph_supervisor.evidence.scope import Scope, under
from ralph_supervisor.evidence.segments import Change, SegmentBook, WorkspaceDelta

log = structlog.get_logger(__name__)

MODIFY_REHASH_S = 0.25
"""A file still being written is re-hashed at most this often; its close or the segment's end settles it."""


class Recorder:
    """Records the changes the sources report into the segment book, and opens and closes its segments."""

    def __init__(self, scope: Scope, on_change: Callable[[Change], None] | None = None) -> None:
        self.scope = scope
        self.root = scope.root
        self.on_change = on_change
        self.on_gap: Callable[[WorkspaceDelta], None] | None = None
        self._lock = threading.Lock()
        self._book = SegmentBook()
        self._last_hashed: dict[str, float] = {}
        self._stale: set[str] = set()
        """Paths written since their last hash (the pace skipped them): hashed before a segment closes."""

    # ---------------------------------------------------------------- what the sources report

    def found(self, path: str, created: bool = False) -> None:
        """A file was created (`created`) or written: hash it now."""
        with self._lock:
            self._last_hashed[path] = time.monotonic()
            self._stale.discard(path)
        self._record(path, file_state(self.root / path), created=created)

    def modified(self, path: str) -> None:
        """A write in progress: hash it now, unless it was hashed less than `MODIFY_REHASH_S` ago."""
        with self._lock:
            last = self._last_hashed.get(path)
            due = last is None or time.monotonic() - last >= MODIFY_REHASH_S
            if not due:
                self._stale.add(path)
        if due:
            self.found(path)

    def gone(self, path: str) -> None:
        self._record(path, ABSENT)

    def folder_gone(self, top: str) -> None:
        with self._lock:
            present = self._book.present_under(top)
        for path in present:
            self._record(path, ABSENT)

    def forget_under(self, top: str) -> None:
        """A folder turned out to be ignored (a new virtual environment): nothing under it is progress."""
        with self._lock:
            self._book.forget_under(top)
            self._stale = {p for p in self._stale if not under(p, top)}

    def lose_events(self) -> None:
        """Events were lost: the open segment's count is a lower bound."""
        with self._lock:
            self._book.lose_events()

    def knows(self, path: str) -> bool:
        with self._lock:
            return path in self._book.known

    def learn(self, path: str, state: bytes) -> None:
        """Priming read a file's content from before the watch began."""
        with self._lock:
            self._book.learn(path, state)

    # ---------------------------------------------------------------- segments

    def open_segment(self, key: str | None, since: float | None = None) -> None:
        """Close the open segment (a gap goes to `on_gap`) and open `key`'s; `since` (epoch seconds): see
        `SegmentBook.open`."""
        refs = read_git_refs(self.root)
        self._hash_stale()
        with self._lock:
            gap = self._book.open(key, refs, None if since is None else int(since * 1e9))
            self._last_hashed.clear()
        self._hand_over(gap)

    def close_segment(self, key: str | None) -> None:
        """Close `key`'s segment (the gap's, for None) if it is still the open one; a gap opens."""
        with self._lock:
            if not self._book.is_open(key):
                return
        refs = read_git_refs(self.root)
        self._hash_stale()
        with self._lock:
            gap = self._book.close(key, refs)
            self._last_hashed.clear()
        self._hand_over(gap)

    def take(self, key: str) -> WorkspaceDelta:
        """What changed in `key`'s closed segment (empty when it never opened)."""
        with self._lock:
            return self._book.take(key)

    def take_from_gap(self, since: float, until: float) -> WorkspaceDelta:
        """What changed in the open gap between `since` and `until` (epoch seconds), taken out of it."""
        with self._lock:
            return self._book.take_from_gap(int(since * 1e9), int(until * 1e9))

    # ---------------------------------------------------------------- inside

    def _record(self, path: str, state: bytes, *, created: bool = False) -> None:
        """Compare a path's new state with what we knew; remember and report a real change."""
        now = time.monotonic()
        with self._lock:
            if self.scope.is_ignored(path, is_dir=False):  # under the lock: a venv found meanwhile is forgotten after
                return
            change = self._book.record(path, state, created=created, now=now,
                                       stamp=lambda: changed_at(self.root / path, state))
        if change is not None and self.on_change is not None:
            try:
                self.on_change(change)
            except Exception as exc:  # noqa: BLE001 - the callback is the supervisor's; never let it kill the watcher
                log.warning("watcher_callback_failed", error=repr(exc))

    def _hash_stale(self) -> None:
        with self._lock:
            stale, self._stale = self._stale, set()
        for path in stale:
            self.found(path)

    def _hand_over(self, gap: WorkspaceDelta | None) -> None:
        on_gap = self.on_gap
        if gap is not None and on_gap is not None and (gap.files_changed or gap.commits):
            try:
                on_gap(gap)
            except Exception as exc:  # noqa: BLE001 - the callback is the supervisor's; never let it kill the watcher
                log.warning("watcher_callback_failed", error=repr(exc))
