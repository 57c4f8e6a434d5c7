"""The supervisor's side of the snapshots: when one is taken, and the trip when an iteration destroys.

The supervisor makes a few calls (`start`, `saw` for every watcher change, `iteration_started`,
`iteration_ended`, `verdict`, `opened`, `close`); the keeper does the rest on a serial worker of its own
(`serial.py`), so a snapshot never holds up the event loop or an action on the tree. Requests that pile up
while a snapshot runs are merged into one (the files can only be read as they are now). The `destructive`
verdict and the snapshot it names are `verdict.py`'s.

Faults never stop supervision: git missing or a store that cannot be written turn snapshots off, a
full disk pauses them (they resume when a later one succeeds), a broken store is moved aside and a new
one started. Each says so once.

Usage (what `supervisor.py` does):

    keeper = SnapshotKeeper(settings)
    keeper.start(iteration=0, ignored_prefixes=lambda: workspace.ignored_prefixes)
    keeper.saw(change)                      # every workspace Change
    keeper.iteration_started(1); keeper.iteration_ended(1, events_lost=False, net=delta)
    reason = keeper.verdict(1)              # off the event loop: it may ask git; before the breaker judges
    keeper.close(iteration=1)
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import structlog

from ralph_supervisor.evidence.ignore import load_ignore_rules
from ralph_supervisor.evidence.workspace import Change, WorkspaceDelta
from ralph_supervisor.process.helpers import HELPERS
from ralph_supervisor.records import Warnings
from ralph_supervisor.serial import Job, SerialWorker
from ralph_supervisor.settings import Settings
from ralph_supervisor.snapshots import kept_commits
from ralph_supervisor.snapshots.git import SnapshotError
from ralph_supervisor.snapshots.info import Shown, SnapshotInfo, summary
from ralph_supervisor.snapshots.store import SnapshotStore
from ralph_supervisor.snapshots.verdict import AWAITING_MAX, DestructionJudge

log = structlog.get_logger(__name__)

PENDING_MAX = 100_000
"""Changed paths remembered between snapshots; beyond this the next snapshot looks at everything."""
FULL_EVERY = 20
"""Every that many snapshots, look at every file (a watcher cannot see everything: a folder moved away
whose files it never read, say)."""
CLOSE_WAIT_S = 60.0


class SnapshotKeeper:
    """Takes the workspace's snapshots and watches each iteration for destruction (`judge`).

    Threads: the keeper's worker (`ralph-snapshots`) takes snapshots and writes `Shown`; the event loop and the
    watcher's thread call in. What more than one of them touches here (`Shown`, the changed paths, the snapshot
    each iteration began from) is behind `_lock` (one lock, never held while calling out); the judge keeps its
    own state behind its own lock."""

    def __init__(self, settings: Settings, *, metrics: Callable[[], Any] = lambda: None,
                 on_snapshot: Callable[[SnapshotInfo], None] = lambda info: None) -> None:
        self.settings = settings
        self.on_snapshot = on_snapshot
        """Called on the keeper's thread with every snapshot taken (the verify's feed)."""
        self.workspace = settings.workspace
        self._metrics = metrics
        self._lock = threading.Lock()
        self._worker: SerialWorker | None = None
        self._pending: set[str] | None = None
        """Paths changed since the last snapshot; None: look at everything next time."""
        self._starts: dict[int, SnapshotInfo | None] = {}
        """The snapshot each running iteration began from (None: the one before was still being taken)."""
        self._due = 0
        """Snapshots asked for and not yet done: an iteration that begins meanwhile begins from the next one."""
        self._prefixes: Callable[[], Sequence[str]] = lambda: ()
        self._warnings = Warnings()
        self.store, problem = _store_for(settings)
        self._shown = Shown(state="on") if self.store is not None else Shown(problem=problem)
        self.judge = DestructionJudge(settings, self.store, shown=lambda: self._shown, warnings=self._warnings)

    # -- what the keeper's thread last found (read from any thread) --------------------------------------

    @property
    def latest(self) -> SnapshotInfo | None:
        return self._shown.latest

    @property
    def count(self) -> int:
        return self._shown.count

    @property
    def bytes(self) -> int:
        return self._shown.bytes

    @property
    def state(self) -> str:
        return self._shown.state

    @property
    def problem(self) -> str | None:
        return self._shown.problem

    def _show(self, **changes: Any) -> None:
        """Replace what is shown (the keeper's thread; never with `_lock` held)."""
        with self._lock:
            self._shown = replace(self._shown, **changes)

    # -- what the supervisor calls --------------------------------------------------------------------

    def start(self, iteration: int, ignored_prefixes: Callable[[], Sequence[str]] = lambda: ()) -> None:
        """Open the store and take the first snapshot (both on the keeper's thread)."""
        if self.store is None:
            if self.settings.snapshot_budget > 0:
                self._warn("snapshots_off", reason=self.problem, hint="install git to keep snapshots")
            else:
                log.info("snapshots_off", reason=self.problem)
            return
        self._prefixes = ignored_prefixes
        self._worker = SerialWorker("ralph-snapshots", merge={"snapshot"},
                                    on_error=lambda job, exc: self._warn("snapshot_failed", error=repr(exc)[:300]))
        self._submit("open", self._open)
        self._submit_snapshot(iteration, "start")

    def saw(self, change: Change) -> None:
        """Every change the watcher records (its own thread): remembered for the next snapshot."""
        with self._lock:
            if self._pending is not None:
                self._pending.add(change.path)
                if len(self._pending) > PENDING_MAX:
                    self._pending = None

    def iteration_started(self, number: int) -> None:
        self.judge.started(number)
        with self._lock:
            self._starts[number] = None if self._due else self._shown.latest
            while len(self._starts) > AWAITING_MAX:
                del self._starts[next(iter(self._starts))]

    def iteration_ended(self, number: int, *, events_lost: bool = False, net: WorkspaceDelta | None = None) -> None:
        """The iteration's report is in: keep its net effect for `verdict`, and snapshot the workspace it left
        (a full look when events were lost). With short calls the next one may have begun already."""
        self.judge.ended(number, net)
        if events_lost:
            with self._lock:
                self._pending = None
        self._submit_snapshot(number, "iteration")

    def verdict(self, number: int) -> str | None:
        """The reason for a `destructive` open when ended iteration `number` destroyed, net, more than the
        thresholds allow of the work it began with (`DestructionJudge.verdict`); else None. Call it off the
        event loop, before the breaker judges the iteration's report."""
        with self._lock:
            start = self._starts.pop(number, None)
        return self.judge.verdict(number, start)

    def repository_gone(self) -> str | None:
        """The reason for a `destructive` open when the user's `.git` is gone (`DestructionJudge.repository_gone`)."""
        return self.judge.repository_gone()

    def hold(self, trigger: str, info: SnapshotInfo) -> None:
        """The snapshot to restore after an open by `trigger` is `info` (tampering: the last verified one)."""
        self.judge.hold(trigger, info)

    def restore_lines(self, trigger: str) -> list[str]:
        """The escalation summary's words on the snapshot to restore, with the exact commands."""
        return self.judge.restore_lines(trigger)

    def opened(self, trigger: str) -> None:
        """The breaker opened: mark the snapshot before it (for `snapshots`)."""
        held = self.judge.held(trigger)
        if held is not None and trigger != "manual":
            self._submit("mark", lambda: self._mark(held.id, trigger))

    def close(self, iteration: int, *, last: bool = True) -> None:
        """The supervisor exits: a last snapshot of what changed since the last one (unless `last` is false:
        a second signal leaves at once), then stop (bounded)."""
        worker = self._worker
        if worker is None:
            return
        with self._lock:
            changed = self._pending is None or bool(self._pending)
        queued = worker.waiting()[-1:] == ("snapshot",)  # it reads the files as they are
        if last and changed and not queued and self.state != "off":
            self._submit_snapshot(iteration, "exit")
        wait_s = CLOSE_WAIT_S if last else 0.5
        if not worker.close(wait_s, drain=last):
            self._warn("snapshot_unfinished", hint=f"the snapshot under way took longer than {wait_s:g} s")
            for pid in HELPERS.pids():  # we leave: nothing of ours may outlive us
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            worker.close(5.0)
        if self.store is not None:
            self.store.close()

    def idle(self, timeout: float) -> bool:
        """Wait until every requested snapshot is done (tests and benchmarks); False on timeout."""
        return self._worker is None or self._worker.idle(timeout)

    def status(self) -> dict[str, Any]:
        """The `snapshots` part of `status --json`."""
        shown = self._shown
        return summary(shown.latest, state=shown.state, problem=shown.problem, count=shown.count,
                       store_bytes=shown.bytes, budget=self.settings.snapshot_budget)

    # -- the keeper's thread --------------------------------------------------------------------------

    def _submit(self, kind: str, run: Callable[[], None], about: Any = None) -> Job | None:
        """Hand a job to the keeper's worker (each does nothing once snapshots are off)."""
        worker = self._worker
        return None if worker is None else worker.submit(Job(kind, run, about))

    def _submit_snapshot(self, iteration: int, kind: str) -> None:
        with self._lock:
            self._due += 1
        replaced = self._submit("snapshot", lambda: self._snapshot(iteration, kind), about=iteration)
        if replaced is not None:  # not yet begun: the files can only be read as they are now
            with self._lock:
                self._due -= 1
            log.info("snapshot_merged", iteration=replaced.about, into=iteration)

    def _open(self) -> None:
        store = self.store
        if store is None or self.state == "off":
            return
        try:
            store.open()
            self._show(count=store.count(), latest=store.latest())
        except SnapshotError as exc:
            self._fault(exc)
            return
        if store.moved_aside is not None:
            self._warn("snapshot_store_corrupt", moved_to=str(store.moved_aside), hint="a new store was started")
        self._show(bytes=store.size_on_disk())
        self._report_metrics()

    def _snapshot(self, iteration: int, kind: str) -> None:
        info: SnapshotInfo | None = None
        try:
            if self.state != "off":
                info = self._take(iteration, kind)
        finally:
            with self._lock:  # iterations that began while it was taken begin from it
                self._due -= 1
                if info is not None:
                    for number, began in self._starts.items():
                        if began is None and number > iteration:
                            self._starts[number] = info
        if info is not None:
            self._after(info)

    def _take(self, iteration: int, kind: str, retry: bool = True) -> SnapshotInfo | None:
        """One snapshot, with what it says in the log; None when it could not be taken (a fault said so)."""
        store = self.store
        assert store is not None
        with self._lock:
            changed, self._pending = self._pending, set()
        began = time.monotonic()
        try:
            info = store.take(iteration, kind, changed, now=time.time(), exclude=self._exclude(changed),
                              full_every=FULL_EVERY)
        except SnapshotError as exc:
            with self._lock:  # the next one looks at everything (the stat cache keeps that cheap)
                self._pending = None
            if exc.kind == "corrupt" and retry:
                return self._take(iteration, kind, retry=False) if self._start_over(store, exc) else None
            self._fault(exc)
            return None
        took_ms = int((time.monotonic() - began) * 1000)
        was = self.state
        self._show(latest=info, count=store.kept_at_take, state="on", problem=None)
        if was == "paused":
            log.info("snapshots_resumed", iteration=iteration)
        log.info("snapshot_taken", iteration=iteration, snapshot=info.id, kind=kind, files=info.files,
                 bytes=info.bytes, added=info.added, modified=info.modified, deleted=info.deleted,
                 moved=len(info.moved), not_stored=info.not_stored_count, full=changed is None, duration_ms=took_ms)
        if info.moved:
            log.info("snapshot_files_moved", iteration=iteration, paths=list(info.moved[:20]))
        return info

    def _after(self, info: SnapshotInfo) -> None:
        """What follows a snapshot: the user's commits kept, the budget, the verify's feed."""
        store = self.store
        assert store is not None
        try:  # the commits the user's branches point to: a reset, a deleted branch and a gc cannot take them
            kept = kept_commits.keep(store)
            if kept:
                log.info("commits_kept", iteration=info.iteration, count=kept)
        except SnapshotError as exc:
            self._warn("commits_unkept", error=str(exc), hint="the files are still kept; the commits are not")
        self._keep_to_budget(store)
        self.on_snapshot(info)

    def _mark(self, snapshot_id: int, trigger: str) -> None:
        if self.store is None or self.state == "off":
            return
        try:
            self.store.mark_trip(snapshot_id, trigger, time.time())
        except SnapshotError as exc:
            self._warn("snapshot_mark_failed", error=str(exc))

    def _keep_to_budget(self, store: SnapshotStore) -> None:
        budget = self.settings.snapshot_budget
        try:
            dropped, store_bytes = store.keep_within(budget)
        except SnapshotError as exc:
            self._fault(exc)
            return
        self._show(bytes=store_bytes)
        if dropped:
            self._show(count=store.count())
            if not self._warnings.said("snapshots_dropped"):
                self._warn("snapshots_dropped", count=dropped, budget=budget, store_bytes=self.bytes,
                           hint="the oldest snapshots go first to keep within --snapshot-budget")
            else:
                log.info("snapshots_dropped", count=dropped, store_bytes=self.bytes)
        self._report_metrics()

    def _start_over(self, store: SnapshotStore, exc: SnapshotError) -> bool:
        """A corrupt store moved aside and a new one begun; False when that failed too."""
        try:
            moved = store.start_over()
        except SnapshotError as again:
            self._fault(again)
            return False
        self._warn("snapshot_store_corrupt", error=str(exc), moved_to=str(moved) if moved else None,
                   hint="a new store was started")
        self._show(latest=None, count=0)
        return True

    def _fault(self, exc: SnapshotError) -> None:
        """Supervision goes on whatever happens here; the kind decides whether snapshots do."""
        if exc.kind == "disk-full":
            self._show(state="paused", problem=str(exc))
            self._warn("snapshots_paused", reason=str(exc), hint="snapshots resume once there is room again")
        elif exc.kind in ("no-access", "no-git", "corrupt"):
            self._show(state="off", problem=str(exc))
            self._warn("snapshots_off", reason=str(exc))
        else:
            self._show(problem=str(exc))
            self._warn("snapshot_failed", error=str(exc), hint="tried again at the next iteration")

    def _exclude(self, changed: set[str] | None) -> list[str] | None:
        """The watcher's ignore rules for a full look (an incremental one only reads the watcher's paths): read
        again, as the watcher reads them, with the folders it found to ignore (the state folder, virtual
        environments)."""
        if changed is not None:
            return None
        rules = load_ignore_rules(self.workspace, state_dir=self.settings.state_dir, extra=self.settings.ignore)
        for prefix in self._prefixes():
            rules = rules.with_prefix(prefix)
        return rules.as_gitignore()

    def _report_metrics(self) -> None:
        metrics = self._metrics()
        if metrics is not None and hasattr(metrics, "snapshots"):
            metrics.snapshots(count=self.count, store_bytes=self.bytes)

    def _warn(self, event: str, **fields: Any) -> None:
        self._warnings.once(event, **fields)


def _store_for(settings: Settings) -> tuple[SnapshotStore | None, str | None]:
    """The store to keep snapshots in, or None and why there is none (no budget, no git)."""
    if settings.snapshot_budget <= 0:
        return None, "--snapshot-budget is 0"
    try:
        return SnapshotStore(settings.workspace, settings.state_dir, max_file=settings.snapshot_max_file,
                             skip=settings.snapshot_skip, keep_git_running=True), None
    except SnapshotError as exc:
        return None, str(exc)


__all__ = ["FULL_EVERY", "SnapshotKeeper"]
