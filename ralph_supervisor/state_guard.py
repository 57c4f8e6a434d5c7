"""Keeping the state folder whole while the supervisor runs: a file of ours deleted or replaced comes back.

The state folder is outside the workspace, but a user's cleanup script, a `rm -rf` of the wrong folder or
an agent that wanders off can still take it or a file in it. The supervisor must not go on writing into
files nobody can read (an unlinked inode) or answer on a socket nobody can reach. So at every tick it looks
(a few stats):

- the folder itself: recreated (with its `.gitignore`);
- `supervisor.lock`: taken again on the new file, so a second supervisor still cannot start here;
- `state.json`, `ledger.json`, `escalation.md`: written again from what the supervisor holds;
- `snapshots/`: a new store begins at the next snapshot (the old snapshots are gone with it);
- `child.log`, `events.jsonl`, `history.jsonl`: reopened by their writer at its next write, with what was
  written since its last look copied over (rotating.py), so nothing written after the loss is lost;
- `control.sock`: listened on again by the supervisor (`control.lost`, `control.rebind`).

Each loss is one `state_file_lost` event naming the file (a whole folder: `file` is the folder).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ralph_supervisor import files, rotating
from ralph_supervisor.files import escalation_md, ledger_json, state_json
from ralph_supervisor.files import lock as lock_file
from ralph_supervisor.files.lock import AlreadyRunning, InstanceLock
from ralph_supervisor.snapshots.store import STORE_DIR
from ralph_supervisor.state_folder import ORIGIN_FILE


def _ident(path: Path | str) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class StateGuard:
    """Looks after one state folder. `rewrite` names what to write again for a lost file (state.json and
    the others the supervisor holds in memory); `check` returns the names of what was lost since the last."""

    WATCHED = (state_json.NAME, ledger_json.NAME, escalation_md.NAME, STORE_DIR, lock_file.NAME, ORIGIN_FILE)
    ABSENCE_ONLY = frozenset({state_json.NAME, ledger_json.NAME, escalation_md.NAME, ORIGIN_FILE, STORE_DIR})
    """Written atomically (or, the store, started over by the keeper): a new inode is no loss, absence is."""

    def __init__(self, state_dir: Path, rewrite: Callable[[str], None]) -> None:
        self.state_dir = state_dir
        self._rewrite = rewrite
        self._folder = _ident(state_dir)
        self._seen: dict[str, tuple[int, int] | None] = {}
        self._paths = {name: os.path.join(state_dir, name) for name in self.WATCHED}
        """Each watched file's path as a string: a tick stats them all, and Path's `/` costs more than the stat."""
        self._relocks: list[InstanceLock] = []
        self.look()

    def look(self, known: dict[str, tuple[int, int] | None] | None = None) -> None:
        """Remember what is there now (call it after writing a file of ours for the first time); `known`: what
        a look of this same moment already found."""
        for name in self.WATCHED:
            ident = known[name] if known is not None and name in known else _ident(self._paths[name])
            if ident is not None:
                self._seen[name] = ident

    def check(self) -> list[str]:
        lost: list[str] = []
        folder = _ident(self.state_dir)
        if folder is None or folder != self._folder:
            try:
                files.prepare(self.state_dir)
            except OSError:
                return lost  # cannot make it now (its parent is gone too, a read-only disk): next tick
            self._folder = _ident(self.state_dir)
            lost.append(str(self.state_dir))
        found: dict[str, tuple[int, int] | None] = {}
        for name, before in list(self._seen.items()):
            now = found[name] = _ident(self._paths[name])
            if now == before or (now is not None and name in self.ABSENCE_ONLY):
                continue
            del found[name]  # rewritten below: looked at afresh
            if folder is not None and folder == self._folder:
                lost.append(name)
            if name == lock_file.NAME:
                self._lock_again()
            elif name != STORE_DIR:
                self._rewrite(name)
            self._seen.pop(name, None)
        self.look(found)
        lost += [path.name for path in rotating.take_losses() if path.parent == self.state_dir]
        return lost

    def _lock_again(self) -> None:
        lock = InstanceLock(lock_file.path(self.state_dir))
        try:
            lock.acquire()
        except (AlreadyRunning, OSError):
            return  # someone else holds the new file: nothing we can do but say it was lost
        self._relocks.append(lock)

    def close(self) -> None:
        for lock in self._relocks:
            lock.release()
        self._relocks.clear()
