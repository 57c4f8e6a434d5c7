"""State that outlives its project: `forget` removes a workspace's state folder, `ls --orphans` finds those
whose workspace is gone.

The state is outside the workspace, so deleting a project leaves its state folder (snapshots included,
up to --snapshot-budget) in ~/.local/state. These two commands are how a user cleans up, and both are
careful: `forget` asks first (or takes `--yes`), refuses while a supervisor runs there, and only removes a
folder that holds our files.

    $ ralph-supervise ls --orphans
    $ ralph-supervise forget -w ~/src/old-project        # asks: remove ...? [y/N]
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ralph_supervisor import registry
from ralph_supervisor.files import events_jsonl, history_jsonl, lock, state_json
from ralph_supervisor.files.lock import running_supervisor_pid
from ralph_supervisor.format import human_size
from ralph_supervisor.snapshots.store import STORE_DIR
from ralph_supervisor.store import folder_bytes
from ralph_supervisor.state_folder import ORIGIN_FILE, read_origin, workspaces_home

OURS = (ORIGIN_FILE, state_json.NAME, events_jsonl.NAME, lock.NAME, history_jsonl.NAME, STORE_DIR)
"""A folder holding one of these is a state folder (forget never removes anything else)."""


def is_state_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and any((path / name).exists() for name in OURS)


def _ask(question: str, stdin: TextIO, stdout: TextIO) -> bool:
    stdout.write(f"{question} [y/N] ")
    stdout.flush()
    answer = stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def forget(workspace: Path, state_dir: Path, *, yes: bool, stdin: TextIO | None = None,
           stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Remove the state folder of `workspace` (after asking): 0 removed, 1 not (one line says why)."""
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr

    def fail(message: str) -> int:
        print(f"ralph-supervise forget: {message}", file=stderr)
        return 1

    if not state_dir.exists():
        return fail(f"no state folder for {workspace} (looked for {state_dir})")
    if not is_state_folder(state_dir):
        return fail(f"{state_dir} holds none of the supervisor's files: not removed")
    real = Path(os.path.realpath(state_dir))
    if real == Path(os.path.realpath(workspace)) or Path(os.path.realpath(workspace)).is_relative_to(real):
        return fail(f"{state_dir} holds the workspace {workspace}: not removed")
    pid = running_supervisor_pid(state_dir)
    if pid is not None:
        return fail(f"a supervisor (pid {pid}) runs with this state folder: stop it first "
                    f"(`ralph-supervise stop -w {workspace}`)")
    size = human_size(folder_bytes(state_dir))
    origin = read_origin(state_dir)
    whose = origin.workspace if origin is not None else str(workspace)
    question = f"remove {state_dir} (the state of {whose}: breaker, history, logs, snapshots; {size})?"
    if not yes:
        if not stdin.isatty():
            return fail(f"would remove {state_dir} ({size}): pass --yes to do it without a question")
        if not _ask(question, stdin, stdout):
            return fail("nothing removed")
    try:
        shutil.rmtree(state_dir)
    except OSError as exc:
        return fail(f"cannot remove {state_dir}: {exc.strerror or exc}")
    print(f"removed {state_dir} ({size})", file=stdout)
    registry.forget_state_dir(state_dir)  # its ended (or stale) entry: nothing is left for `ls` to show
    return 0


@dataclass(frozen=True)
class Orphan:
    """A state folder under the default place whose workspace is gone (or was never recorded)."""

    state_dir: str
    workspace: str | None
    bytes: int

    def to_dict(self) -> dict[str, object]:
        return {"state_dir": self.state_dir, "workspace": self.workspace, "bytes": self.bytes}


def find_orphans(home: Path | None = None) -> list[Orphan]:
    home = workspaces_home() if home is None else home
    try:
        names = sorted(os.listdir(home))
    except OSError:
        return []
    found = []
    for name in names:
        path = home / name
        if not is_state_folder(path):
            continue
        origin = read_origin(path)
        if origin is not None and os.path.isdir(origin.workspace):
            continue
        found.append(Orphan(str(path), origin.workspace if origin is not None else None, folder_bytes(path)))
    return found


def orphans_main(*, as_json: bool, home: Path | None = None) -> int:
    orphans = find_orphans(home)
    if as_json:
        print(json.dumps([o.to_dict() for o in orphans], indent=2))
        return 0
    if not orphans:
        print(f"no state folder whose workspace is gone (in {workspaces_home() if home is None else home})")
        return 0
    width = max(len(o.state_dir) for o in orphans)
    print(f"{'STATE FOLDER'.ljust(width)}  {'SIZE':>8}  WORKSPACE (gone)")
    for o in orphans:
        print(f"{o.state_dir.ljust(width)}  {human_size(o.bytes):>8}  {o.workspace or '(not recorded)'}")
    print("remove one with `ralph-supervise forget --state-dir DIR`, or carry it on with `run --state-dir DIR`")
    return 0
