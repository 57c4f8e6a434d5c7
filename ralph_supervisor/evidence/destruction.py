"""Destruction: the work an iteration started with that is gone when it ends, judged on the net effect.

An agent that runs `git clean -fd`, `rm -rf src` or `git reset --hard` over uncommitted work changes
files, so by the progress rule it is doing well. This judgement tells destruction apart, from each
touched path's state when the iteration began and when it ended (the watcher's segment of the call):

- destroyed: a file that existed at the start (or whose earlier state is unknown) and is gone at the
  end, or cut to a tenth of its size or less;
- discarded: a file whose uncommitted changes are gone, back to the version a commit holds (`git checkout
  -- .`, `git restore .`, `git reset --hard`, `git stash`); which files those are needs git
  (`discarded.py`), this module only names the candidates and applies the answer.

Only the ends count: an agent that stashes and pops (`git stash -u; pytest; git stash pop`), moves a
folder away and back, or reverts its own attempt within the call has destroyed nothing. Content that
moved is not destroyed either: a deleted file whose exact content (the watcher's hash) another touched
path holds at the end was renamed (`git mv`, a refactor).

Pure: no I/O, no clock. Usage:

    lost = destroyed_paths(delta.start, delta.end)
    lost += reverted(discard_candidates(delta.start, delta.end), committed)   # committed: discarded.py
    found = judge(lost, files_at_start=40, max_files=25, max_share=30.0)      # a Destruction, or None
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from ralph_supervisor.evidence.file_state import ABSENT, state_size

SHARE_MIN_FILES = 3
"""The share rule needs at least this many destroyed files: deleting one of a new project's two files
is a refactor more often than a disaster (the count rule has no such floor)."""

SAMPLE = 5
"""How many of the destroyed paths a `Destruction` names."""


@dataclass(frozen=True)
class Destruction:
    """The rule fired: `count` files destroyed (deleted, emptied or discarded) of `files_at_start`."""

    count: int
    files_at_start: int | None
    sample: tuple[str, ...]
    """A few of the destroyed paths, sorted."""
    why: str
    """Which threshold: "more than 25 files" or "more than 30%"."""
    discarded: int = 0
    """How many of `count` still exist, back at a committed version (their uncommitted changes gone)."""


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


def _hashed(state: bytes | None) -> bool:
    return state is not None and state[:1] == b"H"


def destroyed_paths(start: Mapping[str, bytes | None], end: Mapping[str, bytes | None]) -> list[str]:
    """The paths the iteration destroyed, net: gone or emptied at the end, less as many of each content as
    touched paths hold at the end (moved, not lost). `end` lacks a path (or has None): its state is
    unknown, so it is not judged. Sorted."""
    holding = Counter(state for state in end.values() if _hashed(state))
    by_content: dict[bytes | None, list[str]] = {}
    for path, first in start.items():
        now = end.get(path)
        if now is not None and is_destroyed(first, now):
            by_content.setdefault(first, []).append(path)
    lost: list[str] = []
    for content, paths in by_content.items():
        if not _hashed(content):
            lost += paths  # unknown or unhashed content: it cannot be shown to have moved
        else:
            paths.sort()
            lost += paths[holding[content]:]
    return sorted(lost)


def discard_candidates(start: Mapping[str, bytes | None], end: Mapping[str, bytes | None]) -> dict[str, tuple[bytes, bytes]]:
    """The paths whose content was replaced (not destroyed), known by hash at both ends: (start, end) each.
    Whether a replacement discarded uncommitted work is for `reverted` to say."""
    found: dict[str, tuple[bytes, bytes]] = {}
    for path, first in start.items():
        now = end.get(path)
        if first is None or now is None or not (_hashed(first) and _hashed(now)) or first == now:
            continue
        if not is_destroyed(first, now):
            found[path] = (first, now)
    return found


def reverted(candidates: Mapping[str, tuple[bytes, bytes]], committed: Sequence[Mapping[str, bytes]]) -> list[str]:
    """The candidates whose end state is a committed version of the path that their start state was not:
    the changes they held at the start (uncommitted, or in commits dropped since) are gone from the
    workspace. `committed`: one map per commit to compare with (path -> the watcher's state of that
    version). Sorted."""
    found = []
    for path, (first, now) in candidates.items():
        for versions in committed:
            version = versions.get(path)
            if version is not None and now == version and first != version:
                found.append(path)
                break
    return sorted(found)


def judge(lost: Collection[str], files_at_start: int | None, max_files: int, max_share: float,
          discarded: int = 0) -> Destruction | None:
    """A `Destruction` when the iteration's net loss crosses a threshold, else None."""
    why = threshold_crossed(len(lost), files_at_start, max_files, max_share)
    if why is None:
        return None
    return Destruction(len(lost), files_at_start, tuple(sorted(lost)[:SAMPLE]), why, discarded)


__all__ = [
    "Destruction", "SHARE_MIN_FILES", "discard_candidates", "destroyed_paths", "is_destroyed", "judge",
    "reverted", "threshold_crossed",
]
