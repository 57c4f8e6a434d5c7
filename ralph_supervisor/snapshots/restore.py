"""`ralph-supervise snapshots` and `ralph-supervise restore`: the user's side of the snapshot store.

`snapshots` lists what the store keeps; `restore ITERATION` brings a snapshot's files back, all of them or
the given paths (`select` names them, `write_files` writes them, byte for byte with their modes; the verify
writes a snapshot out the same way). Into the workspace it first snapshots the workspace as it is now (so
the restore can be undone) and refuses while a supervisor runs an unpaused tree there: an agent writing
while files are put back would leave a mix of both. `--to DIR` writes into another folder and touches
nothing else.

Every failure is one line on stderr and exit 1: no store, no such iteration, a path the snapshot does not
hold, a supervisor that runs its tree or does not answer.

    files = select(store, info, ["src"])          # the snapshot's files under src/
    write_files(store, info, Path("/tmp/it3"), files)
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence, TextIO

from ralph_supervisor.files import state_json
from ralph_supervisor.files.lock import running_supervisor_pid
from ralph_supervisor.format import human_size
from ralph_supervisor.snapshots.git import SnapshotError, errno_kind, git_mode_bits
from ralph_supervisor.snapshots.info import SnapshotInfo, restore_command
from ralph_supervisor.snapshots.store import SnapshotStore


def select(store: SnapshotStore, info: SnapshotInfo, paths: Sequence[str]) -> list[str]:
    """The snapshot's files named by `paths` (files, or folders for everything under them; none: all).
    A path it does not hold raises SnapshotError("missing") naming it."""
    files = store.files_in(info)
    if not paths:
        return files
    chosen: list[str] = []
    seen: set[str] = set()
    for raw in paths:
        wanted = raw.strip("/")
        hits = [f for f in files if f == wanted or f.startswith(wanted + "/")] if wanted else files
        if not hits:
            why = " (it was over --snapshot-max-file: listed, not stored)" if wanted in info.not_stored else ""
            raise SnapshotError("missing", f"{raw} is not in the snapshot of iteration {info.iteration}{why}")
        for hit in hits:
            if hit not in seen:
                seen.add(hit)
                chosen.append(hit)
    return chosen


def write_files(store: SnapshotStore, info: SnapshotInfo, dest: Path, files: Sequence[str]) -> int:
    """Write `files` of the snapshot into `dest` (created when missing), byte for byte, with their
    modes. Returns how many were written."""
    dest = Path(dest)
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SnapshotError(errno_kind(exc), f"cannot create {dest}: {exc.strerror or exc}") from None
    with store.locked(), tempfile.TemporaryDirectory(prefix=".restore-", dir=store.path) as tmp:
        index = Path(tmp) / "index"
        whole = ("-c", "core.splitIndex=false")  # a throwaway index: no shared part left in the store
        store.git.run(*whole, "read-tree", info.commit, index=index)
        data = b"".join(os.fsencode(f) + b"\0" for f in files)
        store.git.run(*whole, "checkout-index", "-f", "-z", "--stdin", f"--prefix={dest}/", input=data, index=index)
    for path in files:
        target = dest / path
        try:
            st = os.lstat(target)
            if stat.S_ISREG(st.st_mode):
                os.chmod(target, info.modes.get(path, git_mode_bits(st)))
        except OSError:
            continue
    return len(files)


def list_snapshots(workspace: Path, state_dir: Path, *, as_json: bool, out: TextIO = sys.stdout,
                   err: TextIO = sys.stderr) -> int:
    """Print the snapshots (a table, or JSON: `{"snapshots": [...], "store_bytes": N}`)."""
    try:
        store = SnapshotStore(workspace, state_dir)
        listed = store.list() if store.exists() else []
        size = store.size_on_disk() if store.exists() else 0
    except SnapshotError as exc:
        print(f"ralph-supervise snapshots: {exc}", file=err)
        return 1
    if as_json:
        print(json.dumps({"workspace": str(workspace), "store_bytes": size,
                          "snapshots": [info.to_dict() for info in listed]}, indent=2), file=out)
        return 0
    if not listed:
        print(f"no snapshots of {workspace} yet (they are taken while ralph-supervise runs there)", file=out)
        return 0
    print(render_table(listed), file=out)
    print(f"\n{len(listed)} snapshot(s), {human_size(size)} on disk in {store.path}.", file=out)
    print(f"Bring one back with `{restore_command(listed[-1].iteration, workspace)}` "
          "(or add --to DIR, and paths).", file=out)
    return 0


def render_table(listed: Sequence[SnapshotInfo]) -> str:
    """The human listing, one row per snapshot. Pure."""
    rows = [("iteration", "taken", "kind", "files", "size", "added", "modified", "deleted", "note")]
    for info in listed:
        notes = []
        if info.before_trip:
            notes.append(f"before a trip ({info.before_trip})")
        if info.not_stored_count:
            notes.append(f"{info.not_stored_count} too large, not stored")
        if info.moved:
            notes.append(f"{len(info.moved)} changed while read")
        if info.nested:
            notes.append(f"{len(info.nested)} nested repositories not stored")
        rows.append((str(info.iteration), info.at, info.kind, str(info.files), human_size(info.bytes),
                     str(info.added), str(info.modified), str(info.deleted), "; ".join(notes)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    right = {0, 3, 4, 5, 6, 7}
    lines = []
    for row in rows:
        cells = [cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]) for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def restore(workspace: Path, state_dir: Path, iteration: int, paths: Sequence[str], to: str | None, *,
            out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Bring the newest snapshot of `iteration` back (its files, or those under `paths`)."""

    def fail(message: str) -> int:
        print(f"ralph-supervise restore: {message}", file=err)
        return 1

    try:
        store = SnapshotStore(workspace, state_dir)
        if not store.exists():
            return fail(f"no snapshots of {workspace} (none in {store.path})")
        info = store.find(iteration)
        if info is None:
            kept = sorted({i.iteration for i in store.list()})
            have = f"there are snapshots of iterations {_ranges(kept)}" if kept else "there are none"
            return fail(f"no snapshot of iteration {iteration} ({have}; see `ralph-supervise snapshots -w {workspace}`)")
        relative = [_relative(workspace, p) for p in paths]
        files = select(store, info, relative)
    except (SnapshotError, ValueError) as exc:
        return fail(str(exc))
    before: SnapshotInfo | None = None
    paused = False
    if to is None:
        refusal, paused, current = _tree_check(state_dir, workspace)
        if refusal:
            return fail(refusal)
        dest = workspace
        try:
            before = store.take(current, "restore", None, now=time.time())
        except SnapshotError as exc:
            return fail(f"cannot snapshot the workspace before restoring (so nothing was restored): {exc}")
    else:
        dest = Path(os.path.abspath(os.path.expanduser(to)))
    try:
        written = write_files(store, info, dest, files)
    except SnapshotError as exc:
        return fail(str(exc))
    what = "files" if written != 1 else "file"
    print(f"restored {written} {what} of the snapshot of iteration {info.iteration} ({info.at}) into {dest}", file=out)
    if before is not None:
        print(f"the workspace as it was just before is the snapshot of iteration {before.iteration}: "
              f"`{restore_command(before.iteration, workspace)}` undoes this", file=out)
    if paused:
        print(f"the tree is still paused: `ralph-supervise resume -w {workspace}` lets the loop go on", file=out)
    return 0


def _tree_check(state_dir: Path, workspace: Path) -> tuple[str | None, bool, int]:
    """(why not, the tree is paused, the current iteration). Asks a running supervisor over its socket."""
    pid = running_supervisor_pid(state_dir)
    if pid is None:
        return None, False, _iteration_from_state(state_dir)
    from ralph_supervisor.control import ControlError, NoSupervisor, request

    try:
        live: dict[str, Any] = request(state_dir, "status", timeout=10.0)
    except NoSupervisor:
        return None, False, _iteration_from_state(state_dir)  # it has just exited
    except ControlError as exc:
        return f"cannot ask the supervisor (pid {pid}) whether its tree is paused: {exc}", False, 0
    child = live.get("child") if isinstance(live, dict) else None
    iteration = live.get("iteration", 0) if isinstance(live, dict) else 0
    iteration = iteration if isinstance(iteration, int) and iteration >= 0 else 0
    if isinstance(child, dict) and child.get("running") and not child.get("paused"):
        return (f"a supervisor (pid {pid}) runs an unpaused tree in {workspace}: pause it first "
                f"(`ralph-supervise pause -w {workspace}`), or restore elsewhere with --to DIR"), False, iteration
    return None, isinstance(child, dict) and bool(child.get("paused")), iteration


def _iteration_from_state(state_dir: Path) -> int:
    state, _problem = state_json.shown(state_dir)
    return (state.iteration if state is not None else None) or 0


def _relative(workspace: Path, path: str) -> str:
    """A PATH argument as the snapshot names it: relative to the workspace (absolute ones must lie inside)."""
    if os.path.isabs(path):
        rel = os.path.relpath(os.path.abspath(path), workspace)
        if rel == ".." or rel.startswith("../"):
            raise ValueError(f"{path} is outside the workspace {workspace}")
        return "" if rel == "." else rel
    norm = os.path.normpath(path)
    if norm == ".." or norm.startswith("../"):
        raise ValueError(f"{path} is outside the workspace {workspace}")
    return "" if norm == "." else norm


def _ranges(numbers: Sequence[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'. Pure."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


__all__ = ["list_snapshots", "render_table", "restore", "select", "write_files"]
