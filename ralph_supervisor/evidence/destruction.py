"""Destruction: how many of the files an iteration started with it has deleted or emptied, as it happens.

An agent that runs `git clean -fd`, `rm -rf src` or `git reset --hard` over uncommitted work changes
files, so by the progress rule it is doing well. This counter tells destruction apart: a file that
existed when the iteration began (or whose earlier state is unknown) and is now gone, or cut to a tenth
of its size or less. It is fed the watcher's `Change`s one by one, so the trip can come while the agent
is still deleting, not only when its call ends.

Content that moved is not destroyed: a deleted file whose exact content (the watcher's hash) now lives
at another path changed in the same iteration was renamed (`git mv`, a refactor), and does not count.

Pure: no I/O, no clock, no lock (the caller serialises). Usage:

    watch = DestructionWatch(max_files=25, max_share=30.0)
    watch.begin(files_at_start=40)
    for change in changes:
        if (found := watch.saw(change)) is not None:
            trip(found)  # once per iteration
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ralph_supervisor.evidence.workspace import ABSENT, Change, state_size

SHARE_MIN_FILES = 3
"""The share rule needs at least this many destroyed files: deleting one of a new project's two files
is a refactor more often than a disaster (the count rule has no such floor)."""

SAMPLE = 5
"""How many of the destroyed paths a `Destruction` names."""


@dataclass(frozen=True)
class Destruction:
    """The rule fired: `count` files destroyed (deleted or emptied) of `files_at_start`."""

    count: int
    files_at_start: int | None
    sample: tuple[str, ...]
    """A few of the destroyed paths, sorted."""
    why: str
    """Which threshold: "more than 25 files" or "more than 30%"."""


def is_destroyed(first: bytes | None, now: bytes) -> bool:
    """A path that held `first` when the iteration began (None: unknown) and holds `now`: gone or emptied."""
    if first == ABSENT:
        return False  # created during the iteration: not the user's earlier work
    if now == ABSENT:
        return True
    before, after = state_size(first), state_size(now)
    return before is not None and before > 0 and after is not None and after * 10 <= before


def threshold_crossed(count: int, files_at_start: int | None, max_files: int, max_share: float) -> str | None:
    """Which threshold `count` destroyed files cross, or None. Pure; 0 turns a threshold off."""
    if max_files > 0 and count > max_files:
        return f"more than {max_files} files"
    if (max_share > 0 and files_at_start and count >= SHARE_MIN_FILES
            and count * 100.0 > max_share * files_at_start):
        return f"more than {max_share:g}%"
    return None


class DestructionWatch:
    """Counts destroyed files per iteration; `saw` answers a `Destruction` once, when a threshold is crossed."""

    def __init__(self, max_files: int, max_share: float) -> None:
        self.max_files = max_files
        self.max_share = max_share
        self.files_at_start: int | None = None
        self._first: dict[str, bytes | None] = {}
        """Each touched path's state when the iteration began."""
        self._now: dict[str, bytes] = {}
        self._destroyed: dict[bytes | None, set[str]] = {}
        """Destroyed paths by the content they held (None: unknown content)."""
        self._holding: Counter[bytes] = Counter()
        """How many touched paths hold each content now (where moved content went)."""
        self._count = 0
        self._tripped = False

    @property
    def enabled(self) -> bool:
        return self.max_files > 0 or self.max_share > 0

    @property
    def count(self) -> int:
        """Files destroyed so far in this iteration (renames excluded)."""
        return self._count

    def begin(self, files_at_start: int | None) -> None:
        """A new iteration: nothing destroyed yet. `files_at_start`: None when unknown (the share rule waits)."""
        self.files_at_start = files_at_start
        self._first.clear()
        self._now.clear()
        self._destroyed.clear()
        self._holding.clear()
        self._count = 0
        self._tripped = False

    def know_files_at_start(self, files: int) -> None:
        """The count arrived late (the snapshot that tells it finished after the iteration began)."""
        if self.files_at_start is None:
            self.files_at_start = files

    def saw(self, change: Change) -> Destruction | None:
        """Take one change into account; a `Destruction` the first time this iteration crosses a threshold."""
        if not self.enabled:
            return None
        path = change.path
        if path not in self._first:
            self._first[path] = change.before
        old = self._now.get(path)
        if old is not None and old != ABSENT:
            self._hold(old, -1)
        self._now[path] = change.after
        if change.after != ABSENT:
            self._hold(change.after, +1)
        first = self._first[path]
        self._set_destroyed(path, first, is_destroyed(first, change.after))
        if self._tripped:
            return None
        why = threshold_crossed(self._count, self.files_at_start, self.max_files, self.max_share)
        if why is None:
            return None
        self._tripped = True
        sample = sorted(p for paths in self._destroyed.values() for p in paths)[:SAMPLE]
        return Destruction(self._count, self.files_at_start, tuple(sample), why)

    # -- the count: destroyed paths whose content no other touched path now holds ----------------

    def _excess(self, content: bytes | None) -> int:
        paths = self._destroyed.get(content)
        if not paths:
            return 0
        if content is None or content[:1] != b"H":
            return len(paths)  # unknown or unhashed content: it cannot be shown to have moved
        return max(0, len(paths) - self._holding[content])

    def _hold(self, content: bytes, delta: int) -> None:
        before = self._excess(content)
        self._holding[content] += delta
        if self._holding[content] <= 0:
            del self._holding[content]
        self._count += self._excess(content) - before

    def _set_destroyed(self, path: str, content: bytes | None, destroyed: bool) -> None:
        paths = self._destroyed.get(content)
        if destroyed == (paths is not None and path in paths):
            return
        before = self._excess(content)
        if destroyed:
            self._destroyed.setdefault(content, set()).add(path)
        else:
            assert paths is not None
            paths.discard(path)
            if not paths:
                del self._destroyed[content]
        self._count += self._excess(content) - before


__all__ = ["Destruction", "DestructionWatch", "SHARE_MIN_FILES", "is_destroyed", "threshold_crossed"]
