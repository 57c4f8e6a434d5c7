"""The segment book: which changes of the workspace belong to which agent call, and which to the gaps.

The run is cut into segments, each either one agent call (a key) or the gap between calls (key None).
A change belongs to the segment open when it is recorded; a segment's delta is the net change of each
path it touched (its state when the segment closed against its state before the segment's first change
of it), and the commits between the refs at its start and at its end. What changed in a gap is no
call's progress: closing a gap hands its delta back to the caller.

Not thread-safe, and never blocks: the workspace calls it under its own lock. No clock and no I/O either
(times, refs and file states come in as arguments), so it is tested with plain values.

    book = SegmentBook()
    book.open("call-1", refs_before)                     # a gap closes (its delta, if any, is returned)
    book.record("src/a.py", state, stamp=lambda: now_ns)
    book.close("call-1", refs_after)                     # a gap opens
    delta = book.take("call-1")                          # the call's WorkspaceDelta
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ralph_supervisor.evidence.file_state import ABSENT
from ralph_supervisor.evidence.fingerprint import UNSEEN, Fingerprint, rewound
from ralph_supervisor.evidence.git_refs import GitRefs, count_commits
from ralph_supervisor.evidence.scope import under

PATH_SAMPLE = 50
"""How many changed paths a `WorkspaceDelta` carries (the count is always exact)."""
CLOSED_SEGMENTS = 64
"""Closed call segments kept for their `take` (a caller that never asks does not grow us)."""
GAP_CHANGES = 4096
"""Changes a gap remembers with their times (the oldest go first: a late-found call wants the newest)."""
COARSE_CLOCK_NS = 10_000_000
"""File times come from the kernel's coarse clock and a process's start in clock ticks (10 ms): a change
stamped this much before a call's start may still be the call's own first write, so it is."""


@dataclass(frozen=True)
class Change:
    """One recorded change of a non-ignored file: its path, when (monotonic), and its states before
    and after (`file_state` values; `before` is None when the old content was never seen)."""

    path: str
    at: float
    before: bytes | None = None
    after: bytes = b""

    @property
    def deleted(self) -> bool:
        return self.after == ABSENT and self.before != ABSENT


@dataclass(frozen=True)
class WorkspaceDelta:
    """What the workspace evidence says about one iteration."""

    files_changed: int
    paths: tuple[str, ...]
    """Sorted sample (at most `PATH_SAMPLE`) of the changed paths, relative to the workspace."""
    commits: int
    events_lost: bool = False
    """The kernel dropped events (inotify queue overflow): `files_changed` is a lower bound."""
    fingerprint: int = 0
    """The whole workspace's state at the iteration's end (see `fingerprint.py`; 0 is the run's start)."""
    start: Mapping[str, bytes | None] = field(default_factory=dict, compare=False)
    """Each touched path's state when the iteration began (None: never seen) ..."""
    end: Mapping[str, bytes | None] = field(default_factory=dict, compare=False)
    """... and when it ended: the iteration's net effect, which the `destructive` trip judges."""
    head_before: str = ""
    """HEAD's commit when the iteration began, and when it ended ("" without a repository)."""
    head_after: str = ""


def net_change(start: Mapping[str, bytes | None], end: Mapping[str, bytes | None]) -> list[str]:
    """The paths whose state at the end differs from their state at the start (None: never seen, so
    changed), sorted. Pure."""
    return sorted(path for path, begin in start.items() if begin is None or end.get(path) != begin)


@dataclass
class Segment:
    """One call (key) or one gap between calls (key None): the paths it touched with their states at its
    start, and, once closed, their states and the refs at its end."""

    key: str | None
    refs: GitRefs
    touched: dict[str, bytes | None] = field(default_factory=dict)
    events_lost: bool = False
    after: dict[str, bytes | None] | None = None
    refs_after: GitRefs | None = None
    fingerprint: int = 0
    """The whole workspace's state when the segment closed."""
    changes: list[tuple[int, str, bytes | None]] = field(default_factory=list)
    """A gap's changes in order: (when, in epoch ns; path; its state before). A call found late (sampled)
    takes from its gap what changed since its process began."""

    def split(self, since_ns: int) -> dict[str, bytes | None]:
        """The paths changed at or after `since_ns`, each with its state before the first such change. Pure."""
        moved: dict[str, bytes | None] = {}
        for at, path, before in self.changes:
            if at >= since_ns and path not in moved:
                moved[path] = before
        return moved

    def delta(self) -> WorkspaceDelta:
        after = self.after or {}
        refs_after = self.refs_after or self.refs
        changed = net_change(self.touched, after)
        return WorkspaceDelta(files_changed=len(changed), paths=tuple(changed[:PATH_SAMPLE]),
                              commits=count_commits(self.refs, refs_after),
                              events_lost=self.events_lost, fingerprint=self.fingerprint,
                              start=self.touched, end=after, head_before=self.refs.head,
                              head_after=refs_after.head)


class SegmentBook:
    """What the workspace knows: each path's last state, the open segment, the closed calls' segments, and
    the running fingerprint of the whole workspace."""

    def __init__(self) -> None:
        self.known: dict[str, bytes] = {}
        """Each path's last state seen (priming and recorded changes)."""
        self._absent: set[str] = set()
        """Paths recorded ABSENT: forgotten at the next open so `known` does not grow with churn."""
        self.segment = Segment(None, GitRefs())
        """The open segment (a gap until the first call opens)."""
        self._closed: dict[str, Segment] = {}
        self.fingerprint = Fingerprint()

    def is_open(self, key: str | None) -> bool:
        """`key`'s segment is the open one (None: a gap is)."""
        return self.segment.key == key

    def learn(self, path: str, state: bytes) -> None:
        """A path's content before any change was seen (priming): keep it, unless a change came first."""
        self.known.setdefault(path, state)

    def record(self, path: str, state: bytes, *, created: bool = False, now: float = 0.0,
               stamp: Callable[[], int] = lambda: 0) -> Change | None:
        """A path is in `state` now: remember it in the open segment; the change when it is one (None
        when the state is the one known). `created`: the path did not exist before (a create event), so
        a path never seen was ABSENT. `stamp()` is when the change happened (epoch ns, a gap keeps it);
        `now` is the `Change`'s time."""
        prev = self.known.get(path)
        if prev is None and created:
            prev = ABSENT
        segment = self.segment
        segment.touched.setdefault(path, prev)
        if prev is not None and prev == state:
            return None
        if segment.key is None:
            segment.changes.append((stamp(), path, prev))
            if len(segment.changes) > GAP_CHANGES:
                del segment.changes[: GAP_CHANGES // 4]
        self.fingerprint.change(path, prev, state)
        self.known[path] = state
        if state == ABSENT:
            self._absent.add(path)
        return Change(path, now, prev, state)

    def lose_events(self) -> None:
        """The kernel dropped events: the open segment's count is a lower bound."""
        self.segment.events_lost = True

    def forget_under(self, top: str) -> None:
        """A directory turned out to be ignored (a new virtual environment): nothing under it is progress."""
        for table in (self.segment.touched, self.known):
            for path in [p for p in table if under(p, top)]:
                del table[path]
        self.segment.changes = [c for c in self.segment.changes if not under(c[1], top)]

    def open(self, key: str | None, refs: GitRefs, since_ns: int | None = None) -> WorkspaceDelta | None:
        """Close the open segment and open `key`'s, both at `refs`: one step, so every change lands in
        exactly one of them. `since_ns`: the call began then (epoch ns), before it was found: what the gap
        saw change since then is the call's. The closed gap's delta, or None when a call closed."""
        split_ns = None if since_ns is None else since_ns - COARSE_CLOCK_NS
        gap, moved = self._close_open(refs, split_ns)
        if key is not None:
            self._closed.pop(key, None)  # a key used again (a recycled pid) starts afresh
        self.segment = Segment(key, refs, touched=moved)
        for path in self._absent:  # a path that comes back announces itself with a create event
            if self.known.get(path) == ABSENT:
                del self.known[path]
        self._absent.clear()
        return gap

    def close(self, key: str | None, refs: GitRefs) -> WorkspaceDelta | None:
        """Close `key`'s segment if it is still the open one (else a later call already closed it) and open
        a gap. A call's segment is kept for `take`; a gap's delta (key None) is returned."""
        if self.segment.key != key:
            return None
        return self.open(None, refs)

    def present_under(self, top: str) -> list[str]:
        """The paths below `top` known to exist."""
        return [path for path, state in self.known.items() if under(path, top) and state != ABSENT]

    def take(self, key: str) -> WorkspaceDelta:
        """The delta of `key`'s closed segment (forgotten here); empty when it never opened or is open."""
        segment = self._closed.pop(key, None)
        if segment is None:
            return self.empty()
        return segment.delta()

    def empty(self) -> WorkspaceDelta:
        return WorkspaceDelta(0, (), 0, fingerprint=self.fingerprint.value)

    def take_from_gap(self, since_ns: int, until_ns: int) -> WorkspaceDelta:
        """A call seen only in the output: what changed in the open gap between `since_ns` and `until_ns`
        (epoch ns) is that call's. It is taken out of the gap, which stays open; empty when a call is open."""
        segment = self.segment
        if segment.key is not None:
            return self.empty()
        since_ns -= COARSE_CLOCK_NS
        window = [c for c in segment.changes if since_ns <= c[0] < until_ns]
        later = [c for c in segment.changes if c[0] >= until_ns]
        before: dict[str, bytes | None] = {}
        for _, path, prev in window:
            before.setdefault(path, prev)
        later_first = {}
        for _, path, prev in later:
            later_first.setdefault(path, prev)
        after: dict[str, bytes | None] = {path: later_first[path] if path in later_first else self.known.get(path)
                                          for path in before}
        earlier = {c[1] for c in segment.changes if c[0] < since_ns}
        segment.changes = [c for c in segment.changes if not (since_ns <= c[0] < until_ns)]
        for path in before:
            if path not in earlier:
                segment.touched[path] = after[path]  # no longer the gap's change
        changed = sorted(p for p in before if before[p] is None or before[p] != after[p])
        return WorkspaceDelta(len(changed), tuple(changed[:PATH_SAMPLE]), 0,
                              fingerprint=rewound(self.fingerprint.value, self._undone(later)),
                              start=before, end=after)

    def _undone(self, later: list[tuple[int, str, bytes | None]]) -> list[tuple[str, bytes | None, bytes]]:
        """The changes `later` of the gap as (path, before, after), newest first."""
        steps: list[tuple[str, bytes | None, bytes]] = []
        after_of: dict[str, bytes] = {}
        for _, path, prev in reversed(later):
            steps.append((path, prev, after_of.get(path, self.known.get(path) or ABSENT)))
            after_of[path] = prev if prev is not None else UNSEEN
        return steps

    def _close_open(self, refs: GitRefs, split_ns: int | None) -> tuple[WorkspaceDelta | None, dict[str, bytes | None]]:
        """Keep the open segment's end; return a gap's delta, and, for a gap split at `split_ns`, what
        changed since then (each path with its state before), which the gap leaves to the call."""
        segment = self.segment
        segment.after = {path: self.known.get(path) for path in segment.touched}
        moved: dict[str, bytes | None] = {}
        if split_ns is not None and segment.key is None:
            moved = segment.split(split_ns)
            segment.after.update(moved)  # the gap ends where the call's first change began
        segment.refs_after = refs
        segment.fingerprint = self.fingerprint.value
        if segment.key is None:
            return segment.delta(), moved
        self._closed[segment.key] = segment
        while len(self._closed) > CLOSED_SEGMENTS:
            del self._closed[next(iter(self._closed))]
        return None, moved

