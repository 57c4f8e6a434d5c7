"""The `destructive` verdict: did an ended iteration destroy the work it began with, and which snapshot holds it.

The verdict is given on the iteration's net effect (the watcher's states of each touched path at the call's
start and end): what it deleted, emptied or reverted to a committed version, against the snapshot that held the
workspace when it began. An agent that stashes and pops, or moves work away and back, within one call has
destroyed nothing. The user's `.git` gone is judged the same way: when the iteration it went in ends.

The reasons name the snapshot to restore, only if the store still holds it, and the exact command; the
escalation's words on it come from here too (`restore_lines`).

    judge = DestructionJudge(settings, store, shown=lambda: keeper_shown, warnings=Warnings())
    judge.started(2); judge.ended(2, net=delta)
    reason = judge.verdict(2, start=snapshot_it_began_from)   # off the event loop: it may ask git
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from ralph_supervisor.evidence.destruction import Destruction, destroyed_paths, discard_candidates, judge, reverted
from ralph_supervisor.evidence.workspace import WorkspaceDelta
from ralph_supervisor.format import human_size
from ralph_supervisor.records import Warnings
from ralph_supervisor.settings import Settings
from ralph_supervisor.snapshots.discarded import committed_states
from ralph_supervisor.snapshots.git import SnapshotError
from ralph_supervisor.snapshots.info import Shown, SnapshotInfo, restore_command
from ralph_supervisor.snapshots.store import SnapshotStore
from ralph_supervisor.text import one_line

AWAITING_MAX = 16
"""Iterations whose verdict is still to be asked for (a caller that never asks does not grow us)."""


class DestructionJudge:
    """Judges each ended iteration for destruction, and keeps the snapshot to name after an open.

    Threads: the event loop (`started`, `ended`, `repository_gone`, `hold`, `held`), the default pool (`verdict`)
    and the keeper's thread (`held`) call in; everything here is behind `_lock`, never held while calling out."""

    def __init__(self, settings: Settings, store: SnapshotStore | None, *, shown: Callable[[], Shown],
                 warnings: Warnings) -> None:
        self.settings = settings
        self.workspace = settings.workspace
        self.store = store
        self._shown = shown
        """What the keeper last made of the store (its latest snapshot, its problem)."""
        self._warnings = warnings
        self._lock = threading.Lock()
        self._nets: dict[int, WorkspaceDelta] = {}
        """Ended iterations' net effects, until their verdict."""
        self._iteration = 0
        self._running = False
        self._repository_gone_in: int | None = None
        """The iteration during which the user's `.git` went (judged when it ends: it may come back)."""
        self._had_repository: bool | None = None
        """Whether the workspace had a `.git` when first asked (None: not asked yet)."""
        self._held_at_trip: SnapshotInfo | None = None
        self._held_for: tuple[str, SnapshotInfo] | None = None

    @property
    def judging(self) -> bool:
        """Whether the `destructive` trip is on (a threshold is not 0)."""
        return self.settings.destructive_files > 0 or self.settings.destructive_share > 0

    def started(self, number: int) -> None:
        with self._lock:
            self._iteration = number
            self._running = True

    def ended(self, number: int, net: WorkspaceDelta | None) -> None:
        """Iteration `number`'s report is in: keep its net effect for `verdict` (the next may have begun already)."""
        with self._lock:
            if number >= self._iteration:
                self._running = False
            if net is not None and self.judging:
                self._nets[number] = net
                while len(self._nets) > AWAITING_MAX:
                    del self._nets[next(iter(self._nets))]

    def verdict(self, number: int, start: SnapshotInfo | None) -> str | None:
        """The reason for a `destructive` open when ended iteration `number` destroyed, net, more than the
        thresholds allow of the work it began with (`start`: the snapshot it began from, if known); else None.
        It may run git on the user's repository (which replaced files went back to a commit): call it off the
        event loop. A fault of ours is one warning, never a lost report."""
        try:
            return self._verdict(number, start)
        except Exception as exc:  # noqa: BLE001 - the iteration is still judged by the other rules
            self._warnings.once("destructive_unjudged", iteration=number, error=repr(exc)[:300])
            return None

    def _verdict(self, number: int, start: SnapshotInfo | None) -> str | None:
        with self._lock:
            net = self._nets.pop(number, None)
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

    def repository_gone(self) -> str | None:
        """The reason for a `destructive` open when the workspace's `.git` was there at start and is gone
        now (once; None otherwise). The watcher never looks inside `.git`, so this is asked at every tick.
        Gone while an iteration runs, it is judged when that iteration ends (`verdict`): moved away and back
        within a call, it was not destroyed."""
        if not self.judging:
            return None
        with self._lock:
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
        with self._lock:
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
                held = self._shown().latest
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
            text += f"; no snapshot holds them ({self._shown().problem or 'none was taken yet'})"
        return one_line(text, 400)

    def hold(self, trigger: str, info: SnapshotInfo) -> None:
        """The snapshot to restore after an open by `trigger` is `info` (tampering: the last verified one)."""
        with self._lock:
            self._held_for = (trigger, info)

    def held(self, trigger: str) -> SnapshotInfo | None:
        """The snapshot to restore after `trigger`: for a destruction, the one taken before it."""
        with self._lock:
            held_for, at_trip = self._held_for, self._held_at_trip
        if held_for is not None and held_for[0] == trigger:
            return held_for[1]
        return at_trip if trigger == "destructive" and at_trip else self._shown().latest

    def restore_lines(self, trigger: str) -> list[str]:
        """The escalation summary's words on the snapshot to restore, with the exact commands."""
        held = self.held(trigger)
        w = self.workspace
        if held is None:
            why = self._shown().problem or "none was taken yet"
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


__all__ = ["AWAITING_MAX", "DestructionJudge"]
