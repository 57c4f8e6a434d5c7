"""The supervisor's side of the snapshots: when one is taken, and the trip when an iteration destroys.

The supervisor makes a few calls (`start`, `saw` for every watcher change, `iteration_started`,
`iteration_ended`, `verdict`, `opened`, `close`); the keeper does the rest on one thread of its own, so
a snapshot never holds up the event loop or an action on the tree. Requests that pile up while a
snapshot runs are merged into one (the files can only be read as they are now).

The `destructive` verdict is given when an iteration has ended, on its net effect (the watcher's
states of each touched path at the call's start and end): what it deleted, emptied or reverted to a
committed version, against the snapshot that held the workspace when it began. An agent that stashes
and pops, or moves work away and back, within one call has destroyed nothing.

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
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import structlog

from ralph_supervisor import kept_commits
from ralph_supervisor.discarded import committed_states
from ralph_supervisor.evidence.destruction import Destruction, destroyed_paths, discard_candidates, judge, reverted
from ralph_supervisor.evidence.ignore import BUILTIN_IGNORED_NAMES, read_text
from ralph_supervisor.evidence.workspace import Change, WorkspaceDelta
from ralph_supervisor.process.helpers import HELPERS
from ralph_supervisor.records import Warnings
from ralph_supervisor.settings import Settings
from ralph_supervisor.snapshots import (
    SnapshotError,
    SnapshotInfo,
    SnapshotStore,
    exclude_lines,
    human_size,
    restore_command,
    summary,
)
from ralph_supervisor.text import one_line

log = structlog.get_logger(__name__)

PENDING_MAX = 100_000
"""Changed paths remembered between snapshots; beyond this the next snapshot looks at everything."""
FULL_EVERY = 20
"""Every that many snapshots, look at every file (a watcher cannot see everything: a folder moved away
whose files it never read, say)."""
CLOSE_WAIT_S = 60.0
AWAITING_MAX = 16
"""Iterations whose verdict is still to be asked for (a caller that never asks does not grow us)."""


@dataclass(frozen=True)
class Shown:
    """What the keeper's thread last made of the store. Replaced whole under the keeper's lock, so the event
    loop and the watcher's thread, which read it, see one consistent state, never half of an update."""

    latest: SnapshotInfo | None = None
    count: int = 0
    bytes: int = 0
    state: str = "off"
    """on, paused (a full disk: tried again at the next iteration) or off."""
    problem: str | None = None


class SnapshotKeeper:
    """Takes the workspace's snapshots and watches each iteration for destruction.

    Threads: the keeper's own thread takes snapshots and writes `Shown`; the event loop and the watcher's
    thread call in. Everything more than one of them touches is behind `_lock` (one lock, never held
    while calling out)."""

    def __init__(self, settings: Settings, *, metrics: Callable[[], Any] = lambda: None,
                 on_snapshot: Callable[[SnapshotInfo], None] = lambda info: None) -> None:
        self.settings = settings
        self.on_snapshot = on_snapshot
        """Called on the keeper's thread with every snapshot taken (the verify's feed)."""
        self.workspace = settings.workspace
        self._metrics = metrics
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._jobs: deque[tuple[Any, ...]] = deque()
        self._busy: str | None = None
        """The kind of job the keeper's thread is doing now (snapshot, open, mark), or None."""
        self._closing = False
        self._thread: threading.Thread | None = None
        self._pending: set[str] | None = None
        """Paths changed since the last snapshot; None: look at everything next time."""
        self._starts: dict[int, SnapshotInfo | None] = {}
        """The snapshot each running iteration began from (None: the one before was still being taken)."""
        self._nets: dict[int, WorkspaceDelta] = {}
        """Ended iterations' net effects, until their verdict."""
        self._running = False
        self._repository_gone_in: int | None = None
        """The iteration during which the user's `.git` went (judged when it ends: it may come back)."""
        self._iteration = 0
        self._prefixes: Callable[[], Sequence[str]] = lambda: ()
        self._warnings = Warnings()
        self.store: SnapshotStore | None = None
        self._shown = Shown()
        self._held_at_trip: SnapshotInfo | None = None
        self._held_for: tuple[str, SnapshotInfo] | None = None
        self._had_repository: bool | None = None
        """Whether the workspace had a `.git` when first asked (None: not asked yet)."""
        if settings.snapshot_budget <= 0:
            self._shown = Shown(problem="--snapshot-budget is 0")
            return
        try:
            self.store = SnapshotStore(settings.workspace, settings.state_dir, max_file=settings.snapshot_max_file,
                                       skip=settings.snapshot_skip)
        except SnapshotError as exc:
            self._shown = Shown(problem=str(exc))
            return
        self._shown = Shown(state="on")

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
        self._iteration = iteration
        self._thread = threading.Thread(target=self._work, name="ralph-snapshots", daemon=True)
        self._thread.start()
        self._submit(("open",))
        self._submit(("snapshot", iteration, "start"))

    @property
    def judging(self) -> bool:
        """Whether the `destructive` trip is on (a threshold is not 0)."""
        return self.settings.destructive_files > 0 or self.settings.destructive_share > 0

    def saw(self, change: Change) -> None:
        """Every change the watcher records (its own thread): remembered for the next snapshot."""
        with self._lock:
            if self._pending is not None:
                self._pending.add(change.path)
                if len(self._pending) > PENDING_MAX:
                    self._pending = None

    def iteration_started(self, number: int) -> None:
        with self._lock:
            self._iteration = number
            self._running = True
            behind = self._busy in ("open", "snapshot") or any(job[0] == "snapshot" for job in self._jobs)
            self._starts[number] = None if behind else self.latest
            while len(self._starts) > AWAITING_MAX:
                del self._starts[next(iter(self._starts))]

    def iteration_ended(self, number: int, *, events_lost: bool = False, net: WorkspaceDelta | None = None) -> None:
        """The iteration's report is in: keep its net effect for `verdict`, and snapshot the workspace it left
        (a full look when events were lost). With short calls the next one may have begun already."""
        with self._lock:
            if number >= self._iteration:
                self._running = False
            if events_lost:
                self._pending = None
            if net is not None and self.judging:
                self._nets[number] = net
                while len(self._nets) > AWAITING_MAX:
                    del self._nets[next(iter(self._nets))]
        self._submit(("snapshot", number, "iteration"))

    def verdict(self, number: int) -> str | None:
        """The reason for a `destructive` open when ended iteration `number` destroyed, net, more than the
        thresholds allow of the work it began with; else None. It may run git on the user's repository
        (which replaced files went back to a commit): call it off the event loop, before the breaker judges
        the iteration's report. A fault of ours is one warning, never a lost report."""
        try:
            return self._verdict(number)
        except Exception as exc:  # noqa: BLE001 - the iteration is still judged by the other rules
            self._warn("destructive_unjudged", iteration=number, error=repr(exc)[:300])
            return None

    def _verdict(self, number: int) -> str | None:
        with self._lock:
            net = self._nets.pop(number, None)
            start = self._starts.pop(number, None)
            gone_in = self._repository_gone_in
            if gone_in is not None and gone_in <= number:
                self._repository_gone_in = None
        if gone_in is not None and gone_in <= number and not os.path.lexists(self.workspace / ".git"):
            return self._repository_reason(gone_in, start, number)
        if net is None or not self.judging:
            return None
        lost = destroyed_paths(net.start, net.end)
        discarded: list[str] = []
        files_at_start = start.files if start is not None else None
        s = self.settings
        candidates = discard_candidates(net.start, net.end)
        could = judge([*lost, *candidates], files_at_start, s.destructive_files, s.destructive_share) is not None
        if could:  # enough files replaced to matter: back at a commit's version? (one `git cat-file` for them all)
            discarded = reverted(candidates, committed_states(self.workspace, net.head_before, net.head_after,
                                                              candidates))
        found = judge([*lost, *discarded], files_at_start, s.destructive_files, s.destructive_share,
                      discarded=len(discarded))
        if found is None:
            return None
        return self.destruction_reason(found, number, start)

    def opened(self, trigger: str) -> None:
        """The breaker opened: mark the snapshot before it (for `snapshots`)."""
        held = self._held(trigger)
        if held is not None and trigger != "manual":
            self._submit(("mark", held.id, trigger))

    def close(self, iteration: int, *, last: bool = True) -> None:
        """The supervisor exits: a last snapshot of what changed since the last one (unless `last` is false:
        a second signal leaves at once), then stop (bounded)."""
        thread = self._thread
        if thread is None:
            return
        with self._lock:
            changed = self._pending is None or bool(self._pending)
            queued = bool(self._jobs) and self._jobs[-1][0] == "snapshot"  # it reads the files as they are
            if not last:
                self._jobs.clear()
        if last and changed and not queued and self.state != "off":
            self._submit(("snapshot", iteration, "exit"))
        with self._wake:
            self._closing = True
            self._wake.notify_all()
        wait_s = CLOSE_WAIT_S if last else 0.5
        thread.join(wait_s)
        if thread.is_alive():
            self._warn("snapshot_unfinished", hint=f"the snapshot under way took longer than {wait_s:g} s")
            for pid in HELPERS.pids():  # we leave: nothing of ours may outlive us
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            thread.join(5.0)

    def idle(self, timeout: float) -> bool:
        """Wait until every requested snapshot is done (tests and benchmarks); False on timeout."""
        with self._wake:
            return self._wake.wait_for(lambda: not self._jobs and self._busy is None, timeout)

    # -- what the supervisor shows --------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The `snapshots` part of `status --json`."""
        shown = self._shown
        return summary(shown.latest, state=shown.state, problem=shown.problem, count=shown.count,
                       store_bytes=shown.bytes, budget=self.settings.snapshot_budget)

    def repository_gone(self) -> str | None:
        """The reason for a `destructive` open when the workspace's `.git` was there at start and is gone
        now (once; None otherwise). The watcher never looks inside `.git`, so this is asked at every tick.
        Gone while an iteration runs, it is judged when that iteration ends (`verdict`): moved away and back
        within a call, it was not destroyed."""
        if not self.judging:
            return None
        had = self._had_repository
        if had is None:
            self._had_repository = (self.workspace / ".git").exists()
            return None
        if not had or os.path.lexists(self.workspace / ".git"):
            return None
        with self._lock:
            if self._repository_gone_in is not None:
                return None  # already waiting for its iteration's end
            if self._running:
                self._repository_gone_in = self._iteration
                return None
            iteration = self._iteration
        return self._repository_reason(iteration, None, None)

    def _repository_reason(self, iteration: int, start: SnapshotInfo | None, before: int | None) -> str:
        self._had_repository = False  # said once
        held = self._existing(start, before)
        with self._lock:
            self._held_at_trip = held
        text = f"iteration {iteration} deleted the repository (.git); its commits are kept: " \
               f"`ralph-supervise restore --commits -w {self.workspace}`"
        if held is not None:
            text += f"; the files are in the snapshot of iteration {held.iteration}: " \
                    f"`{restore_command(held.iteration, self.workspace)}`"
        return one_line(text, 400)

    def _existing(self, start: SnapshotInfo | None, before: int | None = None) -> SnapshotInfo | None:
        """The snapshot to name in a reason, only if the store still holds it: the iteration's start snapshot;
        unknown, the newest taken before iteration `before` (None: the latest)."""
        store = self.store
        if store is None:
            return None
        held = start
        try:
            if held is None and before is not None:
                held = next((i for i in reversed(store.list()) if i.iteration < before and i.kind != "restore"), None)
            elif held is None:
                held = self.latest
            return held if held is not None and store.holds(held) else None
        except SnapshotError:
            return None

    def destruction_reason(self, found: Destruction, iteration: int, start: SnapshotInfo | None = None) -> str:
        """The breaker's reason: the count, the snapshot that holds the files (the one the iteration began
        from, checked to be in the store) and the command, a few paths."""
        held = self._existing(start, iteration)
        with self._lock:
            self._held_at_trip = held
        of = f" of the {found.files_at_start} it started with" if found.files_at_start else ""
        if found.discarded:
            text = (f"iteration {iteration} deleted, emptied or reverted {found.count} files{of} ({found.why}; "
                    f"{found.discarded} back at a committed version, their uncommitted changes gone)")
        else:
            text = f"iteration {iteration} deleted or emptied {found.count} files{of} ({found.why})"
        more = ", …" if found.count > len(found.sample) else ""
        text += f"; among them {one_line(', '.join(found.sample) + more, 100)}"
        # last, since a long workspace path may be cut from the breaker's reason: escalation.md has it whole
        if held is not None:
            text += (f"; the snapshot of iteration {held.iteration} holds them: "
                     f"`{restore_command(held.iteration, self.workspace)}`")
        else:
            text += f"; no snapshot holds them ({self.problem or 'none was taken yet'})"
        return one_line(text, 400)

    def restore_lines(self, trigger: str) -> list[str]:
        """The escalation summary's words on the snapshot to restore, with the exact commands."""
        held = self._held(trigger)
        w = self.workspace
        if held is None:
            why = self.problem or "none was taken yet"
            return [f"No snapshot of the workspace is available ({why})."]
        what = {"destructive": "before the files were destroyed",
                "tampering": "before its tests were weakened (its last verified snapshot)"}.get(trigger, "at its last snapshot")
        return [
            f"The snapshot of iteration {held.iteration} ({held.at}, {held.files} files, {human_size(held.bytes)}) "
            f"holds the workspace as it was {what}.",
            "",
            f"- `{restore_command(held.iteration, w)}` writes its files back into the workspace (it first "
            "snapshots the workspace as it is now, so the restore can be undone; the tree must be paused),",
            f"- `{restore_command(held.iteration, w, to='/tmp/iteration-' + str(held.iteration))}` writes them "
            "elsewhere, to compare first; add paths to restore only those,",
            f"- `ralph-supervise snapshots -w {w}` lists every snapshot.",
        ]

    # -- the keeper's thread --------------------------------------------------------------------------

    def _submit(self, job: tuple[Any, ...]) -> None:
        with self._wake:
            if self._thread is None or self.store is None:
                return
            if job[0] == "snapshot" and self._jobs and self._jobs[-1][0] == "snapshot":
                skipped = self._jobs.pop()  # not yet begun: the files can only be read as they are now
                log.info("snapshot_merged", iteration=skipped[1], into=job[1])
            self._jobs.append(job)
            self._wake.notify_all()

    def _work(self) -> None:
        while True:
            with self._wake:
                while not self._jobs and not self._closing:
                    self._wake.wait()
                if not self._jobs:
                    return
                job = self._jobs.popleft()
                self._busy = job[0]
            try:
                self._do(job)
            except Exception as exc:  # noqa: BLE001 - a fault of ours never stops supervision
                self._warn("snapshot_failed", error=repr(exc)[:300])
            finally:
                with self._wake:
                    self._busy = None
                    self._wake.notify_all()

    def _do(self, job: tuple[Any, ...]) -> None:
        store = self.store
        if store is None or self.state == "off":
            return
        if job[0] == "open":
            self._open(store)
        elif job[0] == "snapshot":
            self._snapshot(store, job[1], job[2])
        elif job[0] == "mark":
            try:
                store.mark_trip(job[1], job[2], time.time())
            except SnapshotError as exc:
                self._warn("snapshot_mark_failed", error=str(exc))

    def _open(self, store: SnapshotStore) -> None:
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

    def _snapshot(self, store: SnapshotStore, iteration: int, kind: str, retry: bool = True) -> None:
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
                if self._start_over(store, exc):
                    self._snapshot(store, iteration, kind, retry=False)
                return
            self._fault(exc)
            return
        took_ms = int((time.monotonic() - began) * 1000)
        was = self.state
        self._show(latest=info, count=store.count(), state="on", problem=None)
        with self._lock:  # iterations that began while it was taken begin from it
            for number, began in self._starts.items():
                if began is None and number > iteration:
                    self._starts[number] = info
        if was == "paused":
            log.info("snapshots_resumed", iteration=iteration)
        log.info("snapshot_taken", iteration=iteration, snapshot=info.id, kind=kind, files=info.files,
                 bytes=info.bytes, added=info.added, modified=info.modified, deleted=info.deleted,
                 moved=len(info.moved), not_stored=info.not_stored_count, full=changed is None, duration_ms=took_ms)
        if info.moved:
            log.info("snapshot_files_moved", iteration=iteration, paths=list(info.moved[:20]))
        try:  # the commits the user's branches point to: a reset, a deleted branch and a gc cannot take them
            kept = kept_commits.keep(store)
            if kept:
                log.info("commits_kept", iteration=iteration, count=kept)
        except SnapshotError as exc:
            self._warn("commits_unkept", error=str(exc), hint="the files are still kept; the commits are not")
        self._keep_to_budget(store)
        self.on_snapshot(info)

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
        """The watcher's ignore rules for a full look (an incremental one only reads the watcher's paths)."""
        if changed is not None:
            return None
        user = None
        git_dir = self.workspace / ".git"
        if git_dir.is_dir():
            user = read_text(git_dir / "info" / "exclude")
        return exclude_lines(BUILTIN_IGNORED_NAMES, list(self._prefixes()), list(self.settings.ignore), user)

    def _report_metrics(self) -> None:
        metrics = self._metrics()
        if metrics is not None and hasattr(metrics, "snapshots"):
            metrics.snapshots(count=self.count, store_bytes=self.bytes)

    def hold(self, trigger: str, info: SnapshotInfo) -> None:
        """The snapshot to restore after an open by `trigger` is `info` (tampering: the last verified one)."""
        with self._lock:
            self._held_for = (trigger, info)

    def _held(self, trigger: str) -> SnapshotInfo | None:
        """The snapshot to restore after `trigger`: for a destruction, the one taken before it."""
        with self._lock:
            held_for, at_trip, latest = self._held_for, self._held_at_trip, self._shown.latest
        if held_for is not None and held_for[0] == trigger:
            return held_for[1]
        return at_trip if trigger == "destructive" and at_trip else latest

    def _warn(self, event: str, **fields: Any) -> None:
        self._warnings.once(event, **fields)


__all__ = ["SnapshotKeeper"]
