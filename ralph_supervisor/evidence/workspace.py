"""Workspace progress: which files changed and which commits appeared during an iteration.

Ralph's breaker measured progress with `git diff` against HEAD, so a file left dirty counted again in
every later loop, new untracked files and commits with a clean tree never counted, and a folder that is
not a git repository never showed progress (their issues #141 and #340). Here progress is what changed
*during* the iteration: inotify events on the workspace, judged by content (a BLAKE2b hash per file we
have seen), and git refs compared before and after.

How it watches: one inotify instance with one non-recursive watch per folder that is not ignored
(`inotify_source.py`). When inotify runs out (watch or instance limit, ENOSPC/EMFILE), or is not
available, the watcher falls back to scanning mtime and size every `poll_interval` (`polling_source.py`),
with one `watcher_fallback` warning, never a crash. Which files count is the scope's (`scope.py`); what
changed in which segment is the segment book's (`segments.py`); commits are `git_refs.py`'s.

Definitions (the breaker relies on them):
- A file *changed* in an iteration when its state at the end differs from its state at the start:
  created, deleted, renamed (both names count) or its content differs. A rewrite with identical content,
  a touch, or a file created and removed again inside the iteration does not count. To know a file's
  content before its first write, a low-priority background thread hashes the existing small files
  after `start()` (`priming.py`); a file not primed has an unknown old content: its first write counts.
- *Commits* = the number of local branches and tags created, deleted or moved during the iteration, or
  1 when only HEAD moved (`git_refs.py`).

Segments: the run is cut into segments, each either one agent call (a key) or the gap between calls. A
change belongs to the segment open when its event is handled. A call's segment opens either after a sync
(`begin_iteration`) or, for calls announced by a shim, on the watcher thread at the shim's notice
(`watch_calls`: the notice's event sits in the same inotify queue as the agent's file events, so its first
write lands in its own segment). It closes at its end (a barrier in the same queue) or when the next call
opens, whichever comes first, so a call that starts before the previous one's end was processed still
gets exactly its own changes. What changed in a gap is handed to `on_gap`: it is no call's progress.

The parts, each with one job and its own state: `Scope` (which files count), `InotifySource` or
`PollingSource` (what happened), `Recorder` (hashes it, and keeps the segment book behind its lock),
`Priming` (old contents, in the background). This façade starts and stops them, switches from inotify to
polling once when it must (`mode`, behind its own small lock), and answers the iteration boundaries.

    ws = Workspace(root, state_dir=state, on_change=print)
    ws.start()
    ws.begin_iteration("call-1")
    ...  # the agent works
    delta = ws.end_iteration("call-1")   # WorkspaceDelta(files_changed=..., paths=..., commits=...)
    ws.stop()
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Literal

import structlog

from ralph_supervisor.evidence.inotify_source import InotifyHooks, InotifySource
from ralph_supervisor.evidence.polling_source import PollingSource
from ralph_supervisor.evidence.priming import Priming
from ralph_supervisor.evidence.recorder import Recorder
from ralph_supervisor.evidence.scope import Scope
from ralph_supervisor.evidence.segments import Change, WorkspaceDelta

log = structlog.get_logger(__name__)

__all__ = ["Change", "Workspace", "WorkspaceDelta"]

SWITCH_TIMEOUT_S = 30.0
"""The longest an iteration boundary waits for a fall back's first polling pass (a huge tree's takes seconds)."""


class Workspace:
    """Watches a workspace folder and tells, per iteration (segment), what changed in it.

    `begin_iteration`, `end_iteration`, `take_from_gap` and `close_gap` block briefly (a few ms; at most
    about a second, or one scan in polling mode) so that events already queued by the kernel are counted
    in the right segment: call them off the event loop, in order (one worker thread).
    """

    def __init__(
        self,
        root: Path,
        *,
        state_dir: Path,
        ignore: Sequence[str] = (),
        on_change: Callable[[Change], None] | None = None,
        poll_interval: float = 1.0,
        force_polling: bool = False,
    ) -> None:
        self.root = Path(root).resolve()
        self.state_dir = Path(state_dir)
        if not self.state_dir.is_absolute():
            self.state_dir = self.root / self.state_dir
        self._ignore_patterns = tuple(ignore)
        self.poll_interval = max(0.01, float(poll_interval))
        self._scope = Scope(self.root)
        self._recorder = Recorder(self._scope, on_change)
        self._scope.on_venv = self._recorder.forget_under
        self._priming = Priming(self._scope, known=self._recorder.knows, learn=self._recorder.learn)
        self._on_notice: Callable[[str], str | None] | None = None
        self._source: InotifySource | None = None
        """Set once by `start` (None when polling from the start); after a fall back it stays, closed."""

        self._lock = threading.Lock()
        """The switch's: the mode, the polling source, started, stopped, fell back."""
        self._mode: Literal["inotify", "polling"] = "polling" if force_polling else "inotify"
        self._polling: PollingSource | None = None
        self._started = self._stopped = self._fell_back = False
        self._switched = threading.Event()
        """Set once polling made its first pass after a fall back (or the watcher stopped): a boundary
        that finds the inotify queue closed waits for it, so no change slips between the two."""

    # ---------------------------------------------------------------- public API

    @property
    def mode(self) -> Literal["inotify", "polling"]:
        with self._lock:
            return self._mode

    @property
    def on_gap(self) -> Callable[[WorkspaceDelta], None] | None:
        """Told what changed between two calls (on the thread that closed the gap)."""
        return self._recorder.on_gap

    @on_gap.setter
    def on_gap(self, callback: Callable[[WorkspaceDelta], None] | None) -> None:
        self._recorder.on_gap = callback

    @property
    def ignored_prefixes(self) -> tuple[str, ...]:
        """Folders ignored with everything below them: the state folder and the virtual environments found."""
        return self._scope.rules.prefixes

    @property
    def watched_directories(self) -> int:
        """Directories under an inotify watch (0 in polling mode)."""
        return self._source.watched if self._source is not None else 0

    @property
    def primed_files(self) -> int:
        return self._priming.files

    def wait_primed(self, timeout: float | None = None) -> bool:
        """Wait until the background priming of file hashes is done (tests and benchmarks)."""
        return self._priming.wait(timeout)

    def start(self) -> None:
        """Arm the watcher. Never raises for inotify limits: falls back to polling instead."""
        with self._lock:
            if self._started:
                return
            self._started = True
            mode = self._mode
        if not self.root.is_dir():
            log.warning("workspace_missing", root=str(self.root), hint="nothing to watch until it exists")
        began_ns = time.time_ns()
        self._scope.load(self.state_dir, self._ignore_patterns)
        if mode == "inotify":
            recorder = self._recorder
            self._source = InotifySource(self._scope, InotifyHooks(
                found=recorder.found, modified=recorder.modified, gone=recorder.gone,
                folder_gone=recorder.folder_gone, notice=self._notice, events_lost=recorder.lose_events,
                failed=self._fall_back_async))
            try:
                self._source.start()
            except (OSError, ImportError, RuntimeError) as exc:
                self._fall_back(exc)
            else:
                log.info("watcher_started", mode="inotify", root=str(self.root), directories=self._source.watched)
        else:
            self._start_polling(None)
            log.info("watcher_started", mode="polling", root=str(self.root), reason="forced")
        self._sync()
        self._recorder.open_segment(None)
        self._priming.start(began_ns)

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            polling = self._polling
        self._switched.set()
        self._priming.stop()
        if self._source is not None:
            self._source.close()
        if polling is not None:
            polling.stop()

    def __enter__(self) -> Workspace:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def begin_iteration(self, key: str = "", since: float | None = None) -> None:
        """Start a new iteration (segment `key`): earlier events are settled first and do not leak into it.
        `since` (epoch seconds): the call began then, before it was found (a sampled process): what changed
        in the gap since then is the call's."""
        self._sync()
        self._recorder.open_segment(key, since)

    def end_iteration(self, key: str = "") -> WorkspaceDelta:
        """What changed in segment `key` (files: net change of state; commits: refs moved). A segment that
        is still open closes here, at this point of the event queue; one that never opened is empty."""
        self._sync(then=lambda: self._recorder.close_segment(key))
        return self._recorder.take(key)

    def take_from_gap(self, since: float, until: float) -> WorkspaceDelta:
        """A call seen only in the output (no process was seen): what changed in the gap between `since` and
        `until` (epoch seconds) is that call's. It is taken out of the gap, which stays open."""
        self._sync()
        return self._recorder.take_from_gap(since, until)

    def close_gap(self) -> None:
        """The run is over: what changed since the last call ended goes to `on_gap` now."""
        self._sync()
        self._recorder.close_segment(None)

    def mark_call_end(self, key: str) -> None:
        """Call `key` just ended: its segment closes at this point of the event queue. Does not wait
        (call it the moment the end is known: what the loop writes next is no longer the call's). Any
        thread: in polling mode (or after a fall back) the close is left to `end_iteration`."""
        if self._source is not None:
            self._source.barrier(lambda: self._recorder.close_segment(key))

    @property
    def watching_calls(self) -> bool:
        """Notices are read in our inotify queue (False after a fall back to polling)."""
        return self._source is not None and self._source.watching_calls

    def watch_calls(self, directory: Path, on_notice: Callable[[str], str | None]) -> bool:
        """Watch a shim notice folder in our own inotify queue. For each notice written there,
        `on_notice(file name)` runs on the watcher thread, before any later event is handled; when it
        returns a key, that call's segment opens right there. False in polling mode (the caller then
        reads the folder itself and calls `begin_iteration`)."""
        if self._source is None:
            return False
        self._on_notice = on_notice  # before the watch: a notice may come at once
        if self._source.watch_calls(directory):
            return True
        self._on_notice = None
        return False

    # ---------------------------------------------------------------- inside

    def _sync(self, then: Callable[[], None] | None = None) -> None:
        """Every change that happened before now is recorded when this returns; `then` runs exactly once,
        at that point of the event queue (inotify) or after a scan (polling)."""
        if self._source is not None:
            if self._source.sync(then):
                return
            self._switched.wait(SWITCH_TIMEOUT_S)  # the queue is closed: a fall back is under way
        with self._lock:
            polling = self._polling if self._started and not self._stopped else None
        if polling is not None:
            polling.scan()
        if then is not None:
            then()

    def _notice(self, name: str) -> None:
        """A shim's notice, on the watcher thread: its call's segment opens here in the queue."""
        callback = self._on_notice
        if callback is None or not name or name.startswith("."):
            return
        key = callback(name)
        if key is not None:
            self._recorder.open_segment(key)

    def _fall_back_async(self, exc: BaseException) -> None:
        """From the watcher thread itself: switch in another thread (it stops and joins this one)."""
        threading.Thread(target=self._fall_back, args=(exc,), name="watcher-fallback", daemon=True).start()

    def _fall_back(self, exc: BaseException) -> None:
        """Close the inotify source and poll instead: once, with one warning."""
        with self._lock:
            if self._fell_back or self._stopped:
                return
            self._fell_back = True
        try:
            watched = self._source.close() if self._source is not None else None
            if watched is not None:  # mid-run: what the closed queue held, and what changes before the first pass, is lost
                self._recorder.lose_events()
            log.warning(
                "watcher_fallback",
                root=str(self.root),
                reason=str(exc) or type(exc).__name__,
                errno=getattr(exc, "errno", None),
                poll_interval=self.poll_interval,
                hint="raise fs.inotify.max_user_watches / max_user_instances to watch with inotify",
            )
            self._start_polling(watched)
            with self._lock:
                self._mode = "polling"
        finally:
            self._switched.set()

    def _start_polling(self, watched: Collection[str] | None) -> None:
        polling = PollingSource(self._scope, found=self._recorder.found, gone=self._recorder.gone,
                                interval=self.poll_interval)
        with self._lock:
            if self._stopped:
                return
            self._polling = polling
        polling.start(watched)
