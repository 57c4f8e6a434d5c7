"""Where a workspace's state folder is: outside the workspace, so nothing the agent runs there reaches it.

An agent works in its folder with its permissions skipped: `git clean -fdx`, `rm -rf .`, `git stash --all`
or a Makefile's `clean` target delete whatever lies there, and a state folder inside it would take the
snapshots that could have brought the user's work back with it. So by default every workspace gets a
folder of its own under the user's state directory:

    $XDG_STATE_HOME/ralph-supervise/workspaces/NAME-HASH/     (~/.local/state/... when the variable is unset)

NAME is the workspace folder's name (made safe for a file name), HASH the first 12 hex digits of the
SHA-256 of its real path: readable in a listing, and never shared by two workspaces (a symlink and its
target are one workspace). The `workspaces/` level keeps these folders apart from what else lives in
`$XDG_STATE_HOME/ralph-supervise/` (the registry's entries when there is no runtime directory, `serve`'s
token).

Every command finds the folder from the workspace alone (`find_state_dir`): the folder of a running
supervisor of the workspace through the registry (wherever `--state-dir` put it: a container's `/state`),
then the default place, then the folder of one that was killed without removing its entry, then a
`.ralph-supervise/` an earlier version left in the workspace (until `run` moves it out, `move_old_folder`).

A workspace moved or renamed is another path, so it gets a fresh folder; each folder records its
workspace's path and its repository's root commits (`workspace.json`), so `run` names, in one line, the
folder of the same repository whose workspace is gone, which `--state-dir` can take over.

    >>> default_state_dir(Path("/home/me/src/app"), {"XDG_STATE_HOME": "/home/me/.local/state"})  # doctest: +ELLIPSIS
    PosixPath('/home/me/.local/state/ralph-supervise/workspaces/app-...')
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ralph_supervisor import store

FOLDER = "ralph-supervise"
WORKSPACES = "workspaces"
OLD_NAME = ".ralph-supervise"
"""The state folder's name inside the workspace, where earlier versions kept it."""
ORIGIN_FILE = "workspace.json"
"""In each state folder: which workspace it belongs to (for `ls --orphans`, `forget` and a moved workspace)."""
HASH_DIGITS = 12
ROOTS_MAX = 4
"""Root commits a state folder records (a repository with more, merged from unrelated histories, is matched
by these)."""
ROOTS_TIMEOUT_S = 5.0
"""Finding the root commits walks the history (fast with a commit-graph); past this, not again for that folder."""
_HEX = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")


class StateFolderError(Exception):
    """The state folder cannot be used; the message is the one line to print."""


def state_home(env: Mapping[str, str] | None = None) -> Path:
    """`$XDG_STATE_HOME/ralph-supervise` (an absolute value only, as the XDG spec says), else
    `~/.local/state/ralph-supervise`."""
    env = os.environ if env is None else env
    base = env.get("XDG_STATE_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path(env.get("HOME") or Path.home()) / ".local" / "state"
    return root / FOLDER


def workspaces_home(env: Mapping[str, str] | None = None) -> Path:
    return state_home(env) / WORKSPACES


def folder_name(real_path: Path) -> str:
    """`NAME-HASH` for a workspace's real path. Pure."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", real_path.name).strip("-.")[:40] or "root"
    digest = hashlib.sha256(os.fsencode(str(real_path))).hexdigest()[:HASH_DIGITS]
    return f"{slug}-{digest}"


def default_state_dir(workspace: Path, env: Mapping[str, str] | None = None) -> Path:
    """The state folder a workspace gets when no `--state-dir` is given (symlinks resolved first)."""
    return workspaces_home(env) / folder_name(Path(os.path.realpath(workspace)))


def old_state_dir(workspace: Path) -> Path:
    return Path(os.path.realpath(workspace)) / OLD_NAME


def is_default(workspace: Path, state_dir: Path, env: Mapping[str, str] | None = None) -> bool:
    return Path(os.path.abspath(state_dir)) == default_state_dir(workspace, env)


# ---------------------------------------------------------------------------------------------
# Finding it


def registered_state_dirs(workspace: Path) -> tuple[list[Path], list[Path]]:
    """State folders the registry names for this workspace: the running supervisors', and those of
    supervisors that died without removing their entry; only folders that exist."""
    from ralph_supervisor import registry

    real = os.path.realpath(workspace)
    boot = registry.current_boot_id()
    alive: list[Path] = []
    stale: list[Path] = []
    for folder in registry.reading_dirs():
        for entry in registry.read_registry(folder).entries:
            if os.path.realpath(entry.workspace) != real:
                continue
            path = Path(entry.state_dir)
            live = registry.is_alive(entry, registry.start_ticks(entry.pid), boot)
            bucket = alive if live else stale
            if path not in alive and path not in stale and path.is_dir():
                bucket.append(path)
    return alive, [path for path in stale if path not in alive]


def find_state_dir(workspace: Path, env: Mapping[str, str] | None = None) -> Path:
    """The state folder of a workspace, found from the workspace alone (see the module docstring)."""
    default = default_state_dir(workspace, env)
    alive, stale = registered_state_dirs(workspace)
    if alive:
        return alive[0]  # a running supervisor's folder, wherever --state-dir put it
    if default.is_dir():
        return default
    if stale:
        return stale[0]  # one killed with SIGKILL, its folder elsewhere
    old = old_state_dir(workspace)
    if old.is_dir() and not old.is_symlink():
        return old
    return default


# ---------------------------------------------------------------------------------------------
# Setting it up (`run`)


def move_old_folder(workspace: Path, state_dir: Path) -> str | None:
    """Move a `.ralph-supervise/` an earlier version left in the workspace to `state_dir` (the default
    place): the line to print, or None when there is nothing to move. StateFolderError when it cannot be
    moved (a supervisor of the old version still runs there, or the disk refuses)."""
    old = old_state_dir(workspace)
    if not old.is_dir() or old.is_symlink():
        return None
    from ralph_supervisor.files.lock import running_supervisor_pid

    pid = running_supervisor_pid(old)
    if pid is not None:
        raise StateFolderError(f"a supervisor (pid {pid}) still runs with its state in {old}: stop it first "
                               f"(`ralph-supervise stop -w {workspace}`), or pass --state-dir {old}")
    from ralph_supervisor.control import SOCKET_NAME

    sock = old / SOCKET_NAME  # a dead supervisor's socket: nothing listens, and a copy cannot take it
    if sock.is_socket():
        sock.unlink(missing_ok=True)
    if state_dir.exists() and any(state_dir.iterdir()):
        aside = state_dir / f"from-workspace-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
        target, note = aside, f" (kept beside the newer state already there, in {aside.name}/)"
    else:
        target, note = state_dir, ""
    try:
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if target.exists():
            target.rmdir()  # empty: os.rename onto it would work, shutil.move would nest
        shutil.move(str(old), str(target))  # a rename on one disk; else a copy, then the old is removed
    except OSError as exc:
        raise StateFolderError(f"cannot move the old state folder {old} to {target}: {exc.strerror or exc} "
                               f"(move it yourself, or pass --state-dir {old})") from None
    return f"moved the state folder out of the workspace: {old} is now {target}{note}"


def check_writable(state_dir: Path) -> str | None:
    """Create the folder (mode 0700) and prove a file can be written there: StateFolderError with one line
    naming the folder and the way out when it cannot (a read-only disk, no permission, a file in the way).
    A full disk is a warning line only (returned): the loop runs, its records wait for room, as when the disk
    fills up mid-run."""
    probe = state_dir / f".write-test-{os.getpid()}"
    try:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(probe, "wb") as fh:
            fh.write(b"ok\n")
            fh.flush()
            os.fsync(fh.fileno())
        probe.unlink()
    except OSError as exc:
        with contextlib.suppress(OSError):
            probe.unlink()
        if exc.errno in (errno.ENOSPC, errno.EDQUOT) and state_dir.is_dir():
            return (f"state folder {state_dir}: the disk is full: the loop runs, but what the supervisor records "
                    f"is lost until there is room")
        why = {errno.EROFS: "the disk is read-only", errno.EACCES: "permission denied",
               errno.ENOTDIR: "a file is in the way", errno.EEXIST: "a file is in the way"}.get(
            exc.errno or 0, exc.strerror or str(exc))
        raise StateFolderError(f"state folder {state_dir}: cannot write there ({why}); pass --state-dir DIR "
                               f"on a writable disk, or set XDG_STATE_HOME") from None
    return None


@dataclass(frozen=True)
class Origin:
    """What a state folder records about its workspace."""

    workspace: str
    created: str = ""
    roots: tuple[str, ...] = ()
    """The root commits of the workspace's repository: what a moved or renamed workspace is known by."""
    roots_timed_out: bool = False
    """Finding them took longer than ROOTS_TIMEOUT_S: not tried again at each start."""


def read_origin(state_dir: Path) -> Origin | None:
    try:
        with open(state_dir / ORIGIN_FILE, "rb") as fh:
            data = json.loads(fh.read(64 * 1024).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("workspace"), str):
        return None
    created = data.get("created")
    roots = data.get("roots")
    roots = tuple(r for r in roots if isinstance(r, str) and _HEX.fullmatch(r))[:ROOTS_MAX] if isinstance(roots, list) else ()
    return Origin(data["workspace"], created if isinstance(created, str) else "", roots,
                  data.get("roots_timed_out") is True)


def root_commits(workspace: Path, timeout: float | None = None) -> tuple[str, ...] | None:
    """The root commits of the repository the workspace is in (sorted; () without git, a repository or a
    commit; None when git took longer than `timeout`). They stay when the folder is moved or renamed, and a
    clone has them too."""
    git = shutil.which("git")
    if git is None:
        return ()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C", GIT_TERMINAL_PROMPT="0")
    try:
        done = subprocess.run([git, "-C", str(workspace), "rev-list", "--max-parents=0", "HEAD"], env=env,
                              stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=ROOTS_TIMEOUT_S if timeout is None else timeout, check=False)
    except subprocess.TimeoutExpired:
        return None
    except (OSError, subprocess.SubprocessError):
        return ()
    if done.returncode != 0:
        return ()
    found = {line for line in done.stdout.decode("ascii", "replace").split() if _HEX.fullmatch(line)}
    return tuple(sorted(found))[:ROOTS_MAX]


def write_origin(workspace: Path, state_dir: Path) -> None:
    """Record the workspace's real path and its repository's root commits in its state folder (kept when
    it already says so)."""
    real = os.path.realpath(workspace)
    known = read_origin(state_dir)
    if known is not None and known.workspace == real and (known.roots or known.roots_timed_out):
        return
    roots = root_commits(Path(real))
    if known is not None and known.workspace == real and roots == ():
        return  # no repository (or no commit) yet: looked for again at the next start
    created = known.created if known is not None and known.workspace == real and known.created else store.iso_utc()
    data: dict[str, Any] = {"workspace": real, "created": created}
    if roots:
        data["roots"] = list(roots)
    elif roots is None:
        data["roots_timed_out"] = True
    try:
        store.atomic_write_bytes(state_dir / ORIGIN_FILE, (json.dumps(data) + "\n").encode(), mode=0o600)
    except OSError:
        pass  # a courtesy for ls --orphans; check_writable has proved the folder already


def same_repository(workspace: Path, roots: tuple[str, ...],
                    env: Mapping[str, str] | None = None) -> list[tuple[Path, Origin]]:
    """Other state folders under the default place of a workspace of the same repository (a root commit in
    common), oldest first (by when each was made)."""
    if not roots:
        return []
    home = workspaces_home(env)
    mine = default_state_dir(workspace, env)
    real = os.path.realpath(workspace)
    try:
        names = sorted(os.listdir(home))
    except OSError:
        return []
    found = []
    for name in names:
        path = home / name
        if path == mine or not path.is_dir():
            continue
        origin = read_origin(path)
        if origin is not None and origin.workspace != real and set(origin.roots) & set(roots):
            found.append((path, origin))
    return sorted(found, key=lambda item: item[1].created)


def namesakes(workspace: Path, env: Mapping[str, str] | None = None) -> list[tuple[Path, Origin | None]]:
    """Other state folders under the default place for a workspace of the same folder name."""
    mine = default_state_dir(workspace, env)
    prefix = mine.name[: -HASH_DIGITS]
    try:
        names = sorted(os.listdir(mine.parent))
    except OSError:
        return []
    found = []
    for name in names:
        path = mine.parent / name
        if name != mine.name and name.startswith(prefix) and len(name) == len(mine.name) and path.is_dir():
            found.append((path, read_origin(path)))
    return found


def start_lines(given: str | None, workspace: Path, state_dir: Path, created: bool,
                env: Mapping[str, str] | None = None) -> list[str]:
    """The lines `run` prints about where its state goes: a symlinked workspace (one folder with its
    target), and, for a new default folder, the folder of a moved workspace that `--state-dir` can take
    over: one of the same repository (a root commit in common) whose workspace is gone, else one of the
    same folder name whose workspace is gone (not of another repository); or a workspace of the same
    name elsewhere, which has its own folder."""
    lines = []
    real = os.path.realpath(workspace)
    shown = os.path.abspath(os.path.expanduser(given or "."))
    if shown != real and os.path.realpath(shown) == real:
        lines.append(f"workspace {shown} is reached through a symlink: it is {real}, whose state folder "
                     f"is {state_dir} however it is named")
    if created and is_default(workspace, state_dir, env):
        mine = read_origin(state_dir)
        roots = mine.roots if mine is not None and mine.workspace == real else (root_commits(Path(real)) or ())
        moved = [(path, origin) for path, origin in same_repository(workspace, roots, env)
                 if not os.path.isdir(origin.workspace)]
        if moved:  # the same repository, its folder gone: moved or renamed
            path, origin = moved[-1]
            lines.append(f"a state folder of this repository (root commit {roots[0][:12]}) whose workspace is gone "
                         f"({origin.workspace}: moved?) is {path}: pass --state-dir {path} to carry on with it")
            return lines
        known = [(path, origin) for path, origin in namesakes(workspace, env) if origin is not None]
        gone = [(path, origin) for path, origin in known if not os.path.isdir(origin.workspace)
                and not (roots and origin.roots and not set(roots) & set(origin.roots))]  # not another repository
        if gone:  # a moved workspace, most likely: its history can be carried on
            path, origin = gone[-1]
            lines.append(f"a state folder of a workspace of the same name that is gone ({origin.workspace}) "
                         f"is {path}: pass --state-dir {path} to carry on with it")
        elif known:
            lines.append(f"another workspace named {Path(real).name} ({known[0][1].workspace}) has its own "
                         f"state folder; this one's is {state_dir}")
    return lines


def set_up(settings: Any) -> list[str]:
    """Make the run's state folder ready (`run`, before it is locked): an old in-workspace folder moved to
    the default place, the folder proved writable, its workspace recorded. The lines to print;
    StateFolderError (one line) when the folder cannot be used."""
    workspace, state_dir = settings.workspace, settings.state_dir
    lines: list[str] = []
    if is_default(workspace, state_dir):  # an explicit --state-dir is the user's choice: never moved into
        moved = move_old_folder(workspace, state_dir)
        if moved is not None:
            lines.append(moved)
    created = not state_dir.exists()
    full = check_writable(state_dir)
    if full is not None:
        lines.append(full)
    write_origin(workspace, state_dir)
    return start_lines(settings.workspace_given or None, workspace, state_dir, created) + lines
