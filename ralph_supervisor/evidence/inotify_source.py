"""The inotify source: the workspace's file events, the shims' call notices and our barriers, in one queue.

One inotify instance (watchdog's `InotifyFD`: one file descriptor, one reader thread and its dispatcher)
with one non-recursive watch per folder that counts. watchdog's own `Observer` cannot do this: a recursive
schedule walks into `node_modules` and `.git` (and since watchdog 7 silently skips sub-directories it
cannot watch), and a schedule per folder costs one thread per folder.

Ordering is the point of having one queue. A shim's notice (`watch_calls`) is a file event like the
agent's own, so the notice is handled before the agent's first write. A barrier is one file of a folder of
our own renamed to `bN` (created where it is missing): a rename makes and frees no inode, which on a
filesystem without a journal costs a search past every inode freed in the last half minute. When the watcher
reaches barrier N, every event the kernel queued before it was made has been handled, and `then` (a segment's
close) runs right there, before any later event.
`sync` waits for a barrier (iteration boundaries); `barrier` does not (a call's end, from any thread).

Limits (ENOSPC, EMFILE, ENFILE, ENOMEM: out of watches or instances) are not handled here: `start` raises
them, and while running they go to `hooks.failed`, so the workspace falls back to polling.

Threads: the dispatcher thread handles the events and runs the barriers' `then`. The descriptor, the
watches, the barrier counters and the closed flag are this source's own, behind its condition, which is
never held while calling out (the hooks, watchdog). After `close` the source stays closed: `barrier` and
`sync` say so (None, False) and their caller does without the queue.

    source = InotifySource(scope, hooks)
    source.start()
    source.sync(then=lambda: close("call-1"))   # every event queued before now is handled, then `then`
    source.close()
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from ralph_supervisor.evidence.ignore import VENV_MARKER
from ralph_supervisor.evidence.scope import Scope, join, under

log = structlog.get_logger(__name__)

SYNC_TIMEOUT_S = 1.0
"""The longest `sync` waits for its barrier (then it runs `then` itself)."""
LIMIT_ERRNOS = frozenset({errno.ENOSPC, errno.EMFILE, errno.ENFILE, errno.ENOMEM})


@dataclass(frozen=True)
class InotifyHooks:
    """What the source tells the workspace, on the dispatcher thread, in queue order."""

    found: Callable[[str, bool], None]
    """A file was created (True) or written and closed (False): hash it now."""
    modified: Callable[[str], None]
    """A file is being written (it may be re-hashed later)."""
    gone: Callable[[str], None]
    """A file was deleted or moved away."""
    folder_gone: Callable[[str], None]
    """A folder was deleted or moved away, with every file below it."""
    notice: Callable[[str], None]
    """A shim wrote a notice of this name in the calls folder."""
    events_lost: Callable[[], None]
    """The kernel's queue overflowed."""
    failed: Callable[[BaseException], None]
    """Out of watches or instances: fall back (never wait for this thread: it is the one to stop)."""


class InotifySource:
    """One inotify instance over the folders of the workspace that count, with barriers in its queue."""

    def __init__(self, scope: Scope, hooks: InotifyHooks) -> None:
        self.scope = scope
        self._hooks = hooks
        self._callbacks = _Callbacks(self)
        self._mask = 0
        self._cond = threading.Condition()
        self._fd: object | None = None
        self._closed = False
        self._wd_dir: dict[int, str] = {}
        self._dir_wd: dict[str, int] = {}
        self._barrier_dir: Path | None = None
        self._barrier_wd: int | None = None
        self._barrier_name: str | None = None
        """The barrier file's name now (renamed at each barrier); None: there is none to rename."""
        self._calls_wd: int | None = None
        self._sent = 0
        self._seen = 0
        self._at_barrier: dict[int, Callable[[], None]] = {}

    # ---------------------------------------------------------------- life

    def start(self) -> None:
        """Watch every folder that counts and start reading. Raises OSError (limits), ImportError (no
        inotify) or RuntimeError; the caller then closes the source and polls."""
        from watchdog.observers.inotify_c import InotifyConstants as C
        from watchdog.observers.inotify_c import InotifyFD  # Linux only; ImportError elsewhere

        self._mask = (C.IN_CREATE | C.IN_DELETE | C.IN_MOVED_FROM | C.IN_MOVED_TO | C.IN_MODIFY | C.IN_CLOSE_WRITE
                      | C.IN_DONT_FOLLOW | C.IN_ONLYDIR | C.IN_EXCL_UNLINK)
        fd = InotifyFD()  # our own instance: its limits and lifetime are ours, not watchdog's singleton
        inotify_fd = getattr(fd, "_inotify_fd", None)  # watchdog opens it without close-on-exec
        if isinstance(inotify_fd, int):
            os.set_inheritable(inotify_fd, False)  # so no helper (git, a hook) holds it
        barrier_dir = Path(tempfile.mkdtemp(prefix="ralph-supervise-barrier-"))
        with self._cond:
            closed = self._closed  # stopped meanwhile
            if not closed:
                self._fd, self._barrier_dir = fd, barrier_dir
        if closed:
            _release(fd, running=False)
            shutil.rmtree(barrier_dir, ignore_errors=True)
            return
        wd = fd.add_callback(os.fsencode(barrier_dir), C.IN_CREATE | C.IN_MOVED_TO | C.IN_ONLYDIR,
                             self._callbacks, 0)  # type: ignore[attr-defined]
        with self._cond:
            self._barrier_wd = wd
        for _directory, _entries in self.scope.walk("", self._add_watch):
            pass
        fd.start()  # type: ignore[attr-defined]

    def close(self) -> frozenset[str] | None:
        """Stop reading and release the instance. The folders that were watched while the reader ran
        (None when it never ran, or another thread closed it): events still queued in it are lost."""
        with self._cond:
            if self._closed:
                return None
            self._closed = True
            fd, self._fd = self._fd, None
            running = fd is not None and fd.is_alive()  # type: ignore[attr-defined]
            watched = frozenset(self._dir_wd) if running else None
            barrier_dir, self._barrier_dir = self._barrier_dir, None
            self._cond.notify_all()  # `sync` waiters: no barrier will be reached now
        if fd is not None:
            _release(fd, running)
        with self._cond:
            self._wd_dir.clear()
            self._dir_wd.clear()
            self._barrier_wd = self._calls_wd = None
        if barrier_dir is not None:
            shutil.rmtree(barrier_dir, ignore_errors=True)
        return watched

    @property
    def watched(self) -> int:
        """Folders under a watch now."""
        with self._cond:
            return len(self._dir_wd)

    @property
    def watching_calls(self) -> bool:
        with self._cond:
            return self._calls_wd is not None and not self._closed

    def watch_calls(self, directory: Path) -> bool:
        """Watch a shim notice folder in this queue (its notices go to `hooks.notice`). False when closed
        or the watch cannot be placed (one warning)."""
        from watchdog.observers.inotify_c import InotifyConstants as C

        with self._cond:
            fd = None if self._closed else self._fd
        if fd is None:
            return False
        try:
            wd = fd.add_callback(os.fsencode(directory), C.IN_CLOSE_WRITE | C.IN_ONLYDIR, self._callbacks, 0)  # type: ignore[attr-defined]
        except OSError as exc:
            log.warning("watcher_calls_unwatched", directory=str(directory), error=str(exc))
            return False
        with self._cond:
            if self._closed:
                return False
            self._calls_wd = wd
        return True

    # ---------------------------------------------------------------- barriers

    def barrier(self, then: Callable[[], None] | None = None) -> int | None:
        """Put barrier number N into the queue now; `then` runs on the dispatcher thread when it is
        reached, before any later event. None when the source is closed (no one would reach it)."""
        with self._cond:  # held while the marker is made: numbers enter the queue in order
            if self._closed or self._barrier_dir is None or self._fd is None:
                return None
            self._sent += 1
            target = self._sent
            if then is not None:
                self._at_barrier[target] = then
            self._barrier_name = _mark_barrier(self._barrier_dir, self._barrier_name, f"b{target}")
        return target

    def sync(self, then: Callable[[], None] | None = None) -> bool:
        """Wait until every event queued before now is handled; `then` runs exactly once, at the barrier
        (or here, after `SYNC_TIMEOUT_S`). False, and `then` not run, when the source is closed before its
        barrier was reached: its caller must do without the queue."""
        target = self.barrier(then)
        if target is None:
            return False
        with self._cond:
            self._cond.wait_for(lambda: self._seen >= target or self._closed, SYNC_TIMEOUT_S)
            late = self._at_barrier.pop(target, None)
            if self._closed and self._seen < target:
                return False
        if late is not None:
            late()
        return True

    def _barrier_reached(self, number: int) -> None:
        with self._cond:
            due = [self._at_barrier.pop(n) for n in sorted(self._at_barrier) if n <= number]
        for then in due:
            try:
                then()
            except Exception as exc:  # noqa: BLE001 - never kill the reader
                log.warning("watcher_barrier_failed", error=repr(exc))
        with self._cond:
            self._seen = max(self._seen, number)
            self._cond.notify_all()

    # ---------------------------------------------------------------- watches

    def _add_watch(self, directory: str) -> bool:
        """Place one non-recursive watch. Limit errors propagate; a folder that vanished or cannot be read
        is skipped."""
        with self._cond:
            fd = None if self._closed else self._fd
            if fd is None:
                return False
            if directory in self._dir_wd:
                return True  # already watched (a re-walk after an overflow, a folder seen twice)
        path = os.fsencode(self.scope.root / directory if directory else self.scope.root)
        try:
            wd = fd.add_callback(path, self._mask, self._callbacks, 0)  # type: ignore[attr-defined]
        except OSError as exc:
            if exc.errno in LIMIT_ERRNOS:
                raise
            return False
        with self._cond:
            if self._closed:
                return False
            old = self._wd_dir.get(wd)
            if old is not None and old != directory:
                self._dir_wd.pop(old, None)
            self._wd_dir[wd] = directory
            self._dir_wd[directory] = wd
        return True

    def _drop_watches_under(self, top: str) -> None:
        with self._cond:
            gone = [(d, wd) for d, wd in self._dir_wd.items() if under(d, top)]
            for directory, wd in gone:
                del self._dir_wd[directory]
                self._wd_dir.pop(wd, None)
            fd = self._fd
        if fd is not None and gone:
            try:
                fd.remove_callbacks([(wd, 0) for _d, wd in gone])  # type: ignore[attr-defined]
            except OSError:
                pass

    def _watch_deleted(self, wd: int) -> None:
        with self._cond:
            directory = self._wd_dir.pop(wd, None)
            if directory is not None and self._dir_wd.get(directory) == wd:
                del self._dir_wd[directory]

    # ---------------------------------------------------------------- events

    def _overflowed(self) -> None:
        """The kernel dropped events: say so, and re-walk so new folders get their watches."""
        log.warning("watcher_overflow", root=str(self.scope.root))
        self._hooks.events_lost()
        try:
            for _d, _e in self.scope.walk("", self._add_watch):
                pass
        except OSError as exc:
            self._hooks.failed(exc)

    def _on_event(self, event: object) -> None:
        try:
            self._handle(event)
        except OSError as exc:
            if exc.errno in LIMIT_ERRNOS:
                self._hooks.failed(exc)
            else:
                log.warning("watcher_event_failed", error=repr(exc))
        except Exception as exc:  # noqa: BLE001 - never let one odd event kill the reader
            log.warning("watcher_event_failed", error=repr(exc))

    def _handle(self, event: object) -> None:
        wd: int = event.wd  # type: ignore[attr-defined]
        name = os.fsdecode(event.name)  # type: ignore[attr-defined]
        with self._cond:
            barrier = wd == self._barrier_wd
            notice = wd == self._calls_wd
            directory = self._wd_dir.get(wd)
        if barrier:
            if name.startswith("b") and name[1:].isdigit():
                self._barrier_reached(int(name[1:]))
            return
        if notice:
            if event.is_close_write:  # type: ignore[attr-defined]
                self._hooks.notice(name)
            return
        if directory is None or not name:
            return
        path = join(directory, name)
        created = bool(event.is_create or event.is_moved_to)  # type: ignore[attr-defined]
        gone = bool(event.is_delete or event.is_moved_from)  # type: ignore[attr-defined]
        if event.is_directory:  # type: ignore[attr-defined]
            self._folder_event(path, created=created, gone=gone)
            return
        if name == ".gitignore":
            self.scope.reload_gitignore(directory)
        if name == VENV_MARKER and created and directory:
            self._drop_watches_under(directory)
            self.scope.mark_venv(directory)
            return
        if self.scope.is_ignored_entry(directory, name, is_dir=False):
            return
        if gone:
            self._hooks.gone(path)
        elif created or event.is_close_write:  # type: ignore[attr-defined]
            self._hooks.found(path, created)
        elif event.is_modify:  # type: ignore[attr-defined]
            self._hooks.modified(path)

    def _folder_event(self, path: str, *, created: bool, gone: bool) -> None:
        if gone:
            self._drop_watches_under(path)
            self._hooks.folder_gone(path)
            return
        if not created or self.scope.is_ignored(path, is_dir=True):
            return
        for file_path, _entry in self.scope.files(path, self._add_watch):  # watch first: nothing slips between
            self._hooks.found(file_path, True)


def _release(fd: object, running: bool) -> None:
    """Stop watchdog's reader (and wait for it) or, if it never ran, close the instance."""
    try:
        if running:
            fd.stop()  # type: ignore[attr-defined]
            if fd is not threading.current_thread():
                fd.join(timeout=5)  # type: ignore[attr-defined]
        else:  # never started: close() would wait for a reader that never ran and leak the fd
            fd._is_reading = False  # type: ignore[attr-defined]
            fd.close()  # type: ignore[attr-defined]
    except OSError:
        pass


class _Callbacks:
    """What watchdog's InotifyFD calls back (its `WatchCallback`); forwards to the source without exposing it."""

    def __init__(self, source: InotifySource) -> None:
        self._source = source

    def on_event(self, event: object) -> None:
        self._source._on_event(event)

    def on_watch_deleted(self, wd: int) -> None:
        self._source._watch_deleted(wd)

    def on_queue_overflow(self) -> None:
        self._source._overflowed()

    def on_events_lost(self) -> None:
        """After every callback's `on_queue_overflow`: the loss is already recorded there."""


def _mark_barrier(folder: Path, current: str | None, name: str) -> str | None:
    """Queue the event of barrier `name`: the barrier file renamed from `current` to `name` (IN_MOVED_TO), or,
    where that fails (the first barrier, a file a cleaner removed), made anew (IN_CREATE). The file's name now;
    None when neither worked (a waiter then times out and runs `then` itself)."""
    if current is not None:
        try:
            os.rename(folder / current, folder / name)
            return name
        except OSError:
            pass
    try:
        os.close(os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
    except OSError:
        return None
    return name
