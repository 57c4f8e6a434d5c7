"""What one snapshot is, as `snapshots --json` and `status --json` show it: values and their text. Pure.

A snapshot's facts travel in its commit message, one line of JSON, so the store needs no other file to list
them; `SnapshotInfo.from_message` reads one back and refuses what is not one of ours.

    info = SnapshotInfo.from_message(message, commit)
    print(restore_command(info.iteration, workspace))   # ralph-supervise restore 3 -w /home/me/proj
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LIST_MAX = 1000
"""Paths kept in a snapshot's lists (not stored, moved, modes); the counts stay exact."""
SKIP_MEASURE_EVERY_S = 600.0
"""A skipped tree's size is measured at most this often (walking a 2 GB node_modules takes a while)."""


@dataclass(frozen=True)
class SnapshotInfo:
    """One snapshot, as `snapshots --json` shows it (the commit message holds all of it but `before_trip`)."""

    id: int
    iteration: int
    kind: str
    """start: when the supervisor starts, before its first iteration; iteration: at an iteration's end;
    exit: when the supervisor exits in the middle of one; restore: taken by `restore` before it writes."""
    at: str
    """ISO-8601 UTC."""
    files: int
    bytes: int
    """Total size of the stored files."""
    added: int = 0
    modified: int = 0
    deleted: int = 0
    commit: str = ""
    not_stored: tuple[str, ...] = ()
    """Files over --snapshot-max-file: listed, not stored (sorted, at most LIST_MAX)."""
    not_stored_count: int = 0
    moved: tuple[str, ...] = ()
    """Files that kept changing while the snapshot read them: stored as last read."""
    nested: tuple[str, ...] = ()
    """Folders that are git repositories of their own (not stored: git keeps their contents apart)."""
    skipped: tuple[str, ...] = ()
    """Ignored regenerable trees (`--snapshot-skip`), by their root: listed, not stored."""
    skipped_bytes: Mapping[str, int] = field(default_factory=dict)
    """Their sizes, as last measured (at most every SKIP_MEASURE_EVERY_S)."""
    modes: Mapping[str, int] = field(default_factory=dict)
    """Permission bits of the files whose mode git would not restore (not 0644 or 0755)."""
    before_trip: str | None = None
    """The trigger of the breaker open this snapshot was the last one before, if any."""

    def to_dict(self) -> dict[str, Any]:
        """What `snapshots --json` shows (the modes table stays inside)."""
        return {
            "id": self.id, "iteration": self.iteration, "kind": self.kind, "at": self.at,
            "files": self.files, "bytes": self.bytes,
            "added": self.added, "modified": self.modified, "deleted": self.deleted,
            "before_trip": self.before_trip,
            "not_stored": list(self.not_stored), "not_stored_count": self.not_stored_count,
            "moved": list(self.moved), "nested": list(self.nested), "skipped": list(self.skipped),
            "skipped_bytes": dict(self.skipped_bytes), "commit": self.commit,
        }

    def message(self) -> str:
        """The commit message: one line of JSON (so `%(contents:subject)` gives it back whole)."""
        data = {k: v for k, v in self.to_dict().items() if k not in ("commit", "before_trip")}
        data["modes"] = {path: f"{mode:o}" for path, mode in sorted(self.modes.items())}
        return json.dumps(data, separators=(",", ":"))  # ASCII: paths that are not UTF-8 survive

    @classmethod
    def from_message(cls, text: str, commit: str) -> SnapshotInfo:
        """Read a commit message back; ValueError when it is not one of ours."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a snapshot message")
        modes_raw = data.get("modes") or {}
        return cls(
            id=_int(data, "id"), iteration=_int(data, "iteration"), kind=str(data.get("kind", "iteration")),
            at=str(data.get("at", "")), files=_int(data, "files"), bytes=_int(data, "bytes"),
            added=_int(data, "added"), modified=_int(data, "modified"), deleted=_int(data, "deleted"),
            commit=commit, not_stored=_strings(data, "not_stored"), not_stored_count=_int(data, "not_stored_count"),
            moved=_strings(data, "moved"), nested=_strings(data, "nested"), skipped=_strings(data, "skipped"),
            skipped_bytes=_sizes(data, "skipped_bytes"),
            modes={str(p): int(str(m), 8) for p, m in modes_raw.items()} if isinstance(modes_raw, dict) else {},
        )


@dataclass(frozen=True)
class Shown:
    """What the keeper's thread last made of the store. Replaced whole (behind the keeper's lock), so the event
    loop and the watcher's thread, which read it, see one consistent state, never half of an update."""

    latest: SnapshotInfo | None = None
    count: int = 0
    bytes: int = 0
    state: str = "off"
    """on, paused (a full disk: tried again at the next iteration) or off."""
    problem: str | None = None


def _int(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"snapshot field {key!r} must be a non-negative integer")
    return value


def _sizes(data: Mapping[str, Any], key: str) -> dict[str, int]:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise ValueError(f"snapshot field {key!r} must be an object")
    return {str(k): v for k, v in value.items() if isinstance(v, int) and not isinstance(v, bool) and v >= 0}


def _strings(data: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = data.get(key) or []
    if not isinstance(value, list):
        raise ValueError(f"snapshot field {key!r} must be a list")
    return tuple(str(item) for item in value)


def parse_ref_line(line: str) -> SnapshotInfo | None:
    """`<commit>TAB<message>` (as `for-each-ref` lists a snapshot) read back; None when it is not one of ours."""
    commit, _, message = line.partition("\t")
    try:
        return SnapshotInfo.from_message(message, commit)
    except (ValueError, TypeError, RecursionError):
        return None  # not one of ours (or damaged): listing the rest is worth more than failing


def restore_command(iteration: int, workspace: Path | str, to: str | None = None) -> str:
    """The exact command that brings a snapshot back (quoted for a POSIX shell)."""
    parts = ["ralph-supervise", "restore", str(iteration)]
    if to:
        parts += ["--to", to]
    parts += ["-w", str(workspace)]
    return " ".join(shlex.quote(p) for p in parts)


def summary(latest: SnapshotInfo | None, *, state: str, problem: str | None, count: int, store_bytes: int,
            budget: int | None = None) -> dict[str, Any]:
    """The `snapshots` part of `status --json`."""
    return {
        "state": state, "problem": problem, "count": count, "bytes": store_bytes, "budget": budget,
        "latest": None if latest is None else {
            "iteration": latest.iteration, "at": latest.at, "files": latest.files, "kind": latest.kind},
    }


__all__ = ["LIST_MAX", "SKIP_MEASURE_EVERY_S", "Shown", "SnapshotInfo", "parse_ref_line", "restore_command", "summary"]
