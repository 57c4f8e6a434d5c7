"""What a dead supervisor leaves behind, and how the next one clears it.

PR_SET_PDEATHSIG kills only the direct child when the supervisor dies; the rest of the tree
(setsid'd shells, daemons) re-parents to init and lives on. So the supervisor records its tree's
members in the state folder as it sees them, and the next supervisor on that folder kills what is
still alive of them before it spawns anything.

Three nets, because a record is never quite current: (1) recorded members whose pid AND start
time still match; (2) every live descendant of those (born after the last record, or, being a recorded
member's child, not written at once: `MemberRecord.record`); (3) optionally,
every process of ours whose environment carries the tree's marker (`RALPH_SUPERVISE_TREE=<token>`,
inherited through setsid and double forks), which catches orphans born after the last record
whose recorded parents are already dead.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import time
from collections.abc import Iterable
from pathlib import Path

import structlog

from ralph_supervisor.process.linux import (
    CLOCK_TICKS,
    ProcStat,
    all_stats,
    boot_id,
    create_time_to_ticks,
    read_environ,
    read_stat,
    signal_if_same,
)
from ralph_supervisor.process.tree import Member, walk
from ralph_supervisor.store import atomic_write_bytes, move_aside

log = structlog.get_logger(__name__)

MARKER_VAR = "RALPH_SUPERVISE_TREE"
RECORD_NAME = "tree.json"
MAX_RECORDED = 4096
RECORD_EVERY_S = 2.0
"""A member whose parent is recorded is written once it is still alive this long after the last write."""
FORMAT_VERSION = 1


def record_path(state_dir: Path) -> Path:
    """Where a supervisor keeps its tree's record (`tree.json` in its state folder)."""
    return state_dir / RECORD_NAME


def new_marker() -> str:
    """A fresh `NAME=value` marker; put it into the child's environment and give it to MemberRecord."""
    return f"{MARKER_VAR}={secrets.token_hex(8)}"


class MemberRecord:
    """The tree's current members on disk (atomic replace), so a successor can sweep them."""

    def __init__(self, path: Path, marker: str | None = None) -> None:
        self._path = path
        self._marker = marker
        self._written: frozenset[tuple[int, int]] | None = None
        self._written_at = 0.0

    @property
    def path(self) -> Path:
        return self._path

    def record(self, members: Iterable[Member], now: float) -> None:
        """Replace the record with `members` (the tree as of now, parents first, as scan() orders them; at most
        MAX_RECORDED) when it misses one a sweep would not find; `now` is a monotonic time.

        A new member is written at once unless its parent is recorded (or is itself such a member): a sweep ends
        every live descendant of a recorded member too, so the children a loop starts at every call (its agent,
        a `sleep`) cost a write only when one is still alive RECORD_EVERY_S after the last write. A member that
        left costs no write: a sweep ends only a process whose pid and start time both match."""
        rows: list[tuple[int, int, str]] = []
        keys: set[tuple[int, int]] = set()
        found: dict[int, tuple[int, int]] = {}
        written = self._written if self._written is not None else frozenset()
        uncovered = deferred = False
        for member in members:
            key = (member.pid, create_time_to_ticks(member.create_time))
            rows.append((key[0], key[1], member.name))
            if key not in written:
                parent = found.get(member.ppid)
                if parent is not None and (parent in written or parent in keys):
                    deferred = True
                else:
                    uncovered = True
            keys.add(key)
            found[member.pid] = key
            if len(rows) >= MAX_RECORDED:
                break
        due = uncovered or (deferred and now - self._written_at >= RECORD_EVERY_S)
        if self._written is not None and not due:
            return
        document = {
            "version": FORMAT_VERSION,
            "boot_id": boot_id(),
            "supervisor_pid": os.getpid(),
            "clock_ticks": CLOCK_TICKS,
            "marker": self._marker,
            "members": [{"pid": pid, "start_ticks": ticks, "name": name} for pid, ticks, name in rows],
        }
        _write_atomically(self._path, json.dumps(document, separators=(",", ":")).encode())
        self._written, self._written_at = frozenset(keys), now

    def clear(self) -> None:
        """The tree is gone by our own hand: nothing to sweep next time."""
        try:
            self._path.unlink()
        except FileNotFoundError:
            pass
        self._written = None


def sweep_orphans(path: Path, grace: float = 1.0) -> int:
    """Kill what is still alive of the tree recorded at `path` (TERM, `grace`, KILL); return how many
    processes were found alive. A corrupt record is moved aside (`<name>.corrupt-<ts>`), never fatal.
    The record is removed afterwards."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return 0
    except OSError as exc:
        log.warning("orphan_record_unreadable", path=str(path), error=str(exc))
        return 0
    try:
        recorded, marker, same_boot = _parse_record(raw)
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        aside = move_aside(path)
        log.warning("orphan_record_corrupt", path=str(path), moved_to=str(aside), error=str(exc))
        return 0
    if not same_boot:
        path.unlink(missing_ok=True)
        return 0
    protected = _self_and_ancestors()

    def find() -> list[ProcStat]:
        return _find_orphans(recorded, marker, protected)

    found = find()
    seen: set[tuple[int, int]] = set()
    deadline = time.monotonic() + grace
    targets = found
    for stat in targets:
        seen.add((stat.pid, stat.start_ticks))
        if signal_if_same(stat.pid, stat.start_ticks, signal.SIGTERM) and stat.state in ("T", "t"):
            signal_if_same(stat.pid, stat.start_ticks, signal.SIGCONT)
    while targets and time.monotonic() < deadline:
        time.sleep(0.02)
        targets = [s for s in targets if _alive(s)]
    for _ in range(50):
        for stat in targets:
            signal_if_same(stat.pid, stat.start_ticks, signal.SIGKILL)
        time.sleep(0.01 if targets else 0)
        # Newcomers (descendants forked meanwhile, marker carriers) are killed outright.
        targets = find()
        for stat in targets:
            seen.add((stat.pid, stat.start_ticks))
        if not targets:
            break
    path.unlink(missing_ok=True)
    if targets:
        log.warning("orphan_sweep_incomplete", survivors=[(s.pid, s.name) for s in targets])
    return len(seen)


def _parse_record(raw: bytes) -> tuple[set[tuple[int, int]], bytes | None, bool]:
    document = json.loads(raw)
    if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
        raise ValueError("not a member record of this version")
    recorded: set[tuple[int, int]] = set()
    for row in document["members"]:
        pid, ticks = row["pid"], row["start_ticks"]
        if not isinstance(pid, int) or not isinstance(ticks, int) or isinstance(pid, bool):
            raise ValueError(f"bad member {row!r}")
        recorded.add((pid, ticks))
    marker = document.get("marker")
    if marker is not None and (not isinstance(marker, str) or not marker.startswith(MARKER_VAR + "=")):
        raise ValueError(f"bad marker {marker!r}")
    same_boot = document.get("boot_id") == boot_id()
    return recorded, marker.encode() if marker else None, same_boot


def _find_orphans(recorded: set[tuple[int, int]], marker: bytes | None, protected: set[int]) -> list[ProcStat]:
    stats = [s for s in all_stats() if s.alive and s.pid not in protected]
    roots = [s.pid for s in stats if (s.pid, s.start_ticks) in recorded]
    uid = os.getuid()
    if marker is not None:
        for stat in stats:
            if stat.pid not in roots and _owned_by(stat.pid, uid) and marker in read_environ(stat.pid):
                roots.append(stat.pid)
    return walk(stats, roots, exclude=lambda pid: pid in protected, include_roots=True)


def _owned_by(pid: int, uid: int) -> bool:
    try:
        return os.stat(f"/proc/{pid}").st_uid == uid
    except OSError:
        return False


def _alive(stat: ProcStat) -> bool:
    now = read_stat(stat.pid)
    return now is not None and now.start_ticks == stat.start_ticks and now.alive


def _self_and_ancestors() -> set[int]:
    """Never sweep ourselves or whoever started us (a supervisor run from inside an old tree)."""
    protected = {0, 1}
    pid = os.getpid()
    while pid > 1 and pid not in protected:
        protected.add(pid)
        stat = read_stat(pid)
        if stat is None:
            break
        pid = stat.ppid
    return protected


def _write_atomically(path: Path, data: bytes) -> None:
    """Temp file in the same folder, rename: a reader sees the old record or the new one. No fsync: the
    record is rewritten whenever the tree changes (at every agent call), and after a crash of the machine,
    the only crash fsync would help with, it names another boot and is not swept anyway."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, data, mode=0o600, durable=False)
