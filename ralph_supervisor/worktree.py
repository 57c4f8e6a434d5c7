"""`--worktree`: the loop works in a fresh git worktree of the workspace, on a branch of its own.

The user's checkout is never touched: the loop gets `git worktree add -b ralph/<name>-<date>-<time>` of the
checkout's `HEAD`, in a folder beside the state folders (`$XDG_STATE_HOME/ralph-supervise/worktrees/`), and
the run's workspace is that folder, with a state folder of its own (so two loops on one repository never
share one). Uncommitted changes and ignored files stay in the checkout (one line says how many); at the end
the branch stays for a human to review and merge. Its git commands are hardened (safe_git): a hook or a
filter in the checkout's config does not run when the worktree is made.

In a box (sandbox.py) the worktree's commits need the repository's objects and refs: `git_binds` names what
to bind (the repository's git folder read-only, its objects, refs, logs and the worktree's own git folder
writable over it, its `hooks` covered by an empty folder).

    settings, note = take(settings, now=time.time())   # the run's workspace is now the worktree
    record(settings.state_dir, info)                    # worktree.json, for status and the report
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import time
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ralph_supervisor.safe_git import FILTER_LISTING, command, filter_names
from ralph_supervisor.state_folder import default_state_dir, is_default, state_home
from ralph_supervisor.store import atomic_write_json, read_json_object

if TYPE_CHECKING:
    from ralph_supervisor.sandbox import Bind

FILE = "worktree.json"
FOLDER = "worktrees"
BRANCH_PREFIX = "ralph/"
GIT_TIMEOUT = 60.0


class WorktreeError(Exception):
    """No worktree could be made: the message is the one line the user sees."""


@dataclass(frozen=True)
class Worktree:
    checkout: Path
    """The user's checkout (its top level), never written but for git's own worktree records."""
    path: Path
    branch: str
    base: str
    """The commit it started from (the checkout's HEAD)."""
    left_behind: int = 0
    """Uncommitted changes and ignored files of the checkout that are not in the worktree."""

    def to_json(self) -> dict[str, Any]:
        return {"checkout": str(self.checkout), "path": str(self.path), "branch": self.branch, "base": self.base,
                "left_behind": self.left_behind}


def branch_name(name: str, now: float, taken: Collection[str] = ()) -> str:
    """`ralph/<name>-<YYYYMMDD>-<HHMMSS>` (UTC), with `-2`, `-3`... when taken. Pure."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:40] or "loop"
    stamp = datetime.fromtimestamp(now, tz=timezone.utc).strftime("%Y%m%d-%H%M%S")
    base = f"{BRANCH_PREFIX}{slug}-{stamp}"
    candidate, n = base, 1
    while candidate in taken:
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def _git(checkout: Path, args: list[str], filters: set[str] | None = None, ok: tuple[int, ...] = (0,)) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(LC_ALL="C", GIT_TERMINAL_PROMPT="0")
    try:
        done = subprocess.run(command("git", ["-C", str(checkout), *args], filters=filters or ()), env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=GIT_TIMEOUT, check=False)
    except FileNotFoundError:
        raise WorktreeError("--worktree: git is not installed") from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WorktreeError(f"--worktree: git cannot run ({exc})") from None
    if done.returncode not in ok:
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise WorktreeError(f"--worktree: git {args[0]} failed in {checkout}: "
                            f"{lines[-1] if lines else f'exit code {done.returncode}'}")
    return done.stdout.decode("utf-8", "replace")


def create(checkout: Path, name: str, now: float, root: Path) -> Worktree:
    """A new worktree of `checkout`'s HEAD under `root`, on a new branch. WorktreeError on any failure."""
    try:
        top = Path(_git(checkout, ["rev-parse", "--show-toplevel"]).strip())
    except WorktreeError:
        raise WorktreeError(f"--worktree: {checkout} is not in a git repository") from None
    head = _git(top, ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], ok=(0, 1)).strip()
    if not head:
        raise WorktreeError(f"--worktree: the repository of {top} has no commit yet (a worktree starts from HEAD)")
    taken = {line.strip() for line in _git(top, ["for-each-ref", "--format=%(refname:short)",
                                                 f"refs/heads/{BRANCH_PREFIX}"]).splitlines()}
    branch = branch_name(name or top.name, now, taken)
    path = root / branch.removeprefix(BRANCH_PREFIX).replace("/", "-")
    filters = filter_names(_git(top, FILTER_LISTING, ok=(0, 1)))  # none of them runs (safe_git)
    dirt = _git(top, ["status", "--porcelain=v1", "--ignored=traditional", "--untracked-files=all"], filters=filters)
    left = sum(1 for line in dirt.splitlines() if line.strip())
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WorktreeError(f"--worktree: cannot make {root}: {exc.strerror or exc}") from None
    _git(top, ["worktree", "add", "--quiet", "-b", branch, str(path), head], filters=filters)
    return Worktree(checkout=top, path=path, branch=branch, base=head, left_behind=left)


def take(settings: Any, now: float | None = None, env: Any = None) -> tuple[Any, Worktree]:
    """`settings` with the run moved into a new worktree (and its own state folder, unless `--state-dir`)."""
    info = create(settings.workspace, settings.name or "", time.time() if now is None else now,
                  state_home(env) / FOLDER)
    state = default_state_dir(info.path, env) if is_default(settings.workspace, settings.state_dir, env) \
        else settings.state_dir
    moved = dataclasses.replace(settings, workspace=info.path.resolve(), state_dir=state, workspace_given=str(info.path))
    return moved, info


def note(info: Worktree) -> str:
    """The one line said at start. Pure."""
    left = (f"; {info.left_behind} uncommitted or ignored file(s) of the checkout are not carried over"
            if info.left_behind else "")
    return (f"--worktree: the loop works in {info.path} on branch {info.branch} (from {info.base[:12]}); "
            f"{info.checkout} is not touched{left}")


def record(state_dir: Path, info: Worktree) -> None:
    atomic_write_json(state_dir / FILE, info.to_json())


def read(state_dir: Path) -> dict[str, Any] | None:
    """What `record` wrote, or None (no worktree, or a file we cannot trust)."""
    data = read_json_object(state_dir / FILE)
    if data is None or not all(isinstance(data.get(k), str) for k in ("checkout", "path", "branch")):
        return None
    return data


def spend_folder(state_dir: Path, fallback: Path, env: Any = None) -> Path:
    """Where a run in a worktree counts today's spend: the checkout's own default state folder (made when
    missing, with its workspace.json), shared by the checkout's runs and all its worktrees'; `fallback` when
    the run is in no worktree or that folder cannot be made."""
    from ralph_supervisor.state_folder import write_origin

    info = read(state_dir)
    if info is None:
        return fallback
    folder = default_state_dir(Path(info["checkout"]), env)
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return fallback
    write_origin(Path(info["checkout"]), folder)
    return folder


def running_in_worktrees(checkout: Path) -> list[dict[str, Any]]:
    """The live supervisors (from the registry) whose loop works in a worktree of `checkout`: for
    `status -w CHECKOUT`. Each: `path`, `branch`, `state_dir`, `pid`."""
    from ralph_supervisor.registry import current_boot_id, is_alive, read_registry, start_ticks

    real = os.path.realpath(checkout)
    boot = current_boot_id()
    found = []
    for entry in read_registry().entries:
        if not is_alive(entry, start_ticks(entry.pid), boot):
            continue
        info = read(Path(entry.state_dir))
        if info is not None and os.path.realpath(info["checkout"]) == real:
            found.append({"path": info["path"], "branch": info["branch"], "state_dir": entry.state_dir,
                          "pid": entry.pid})
    return sorted(found, key=lambda item: item["branch"])


def git_binds(workspace: Path) -> list[Bind]:
    """What a box needs of the repository of a linked worktree (its `.git` is a file naming its git folder);
    [] for any other workspace. Reads the disk.

    The repository's git folder is read-only as a whole, so nothing can be created at its top: not a hook,
    not a config, and not a `packed-refs` that would live only in the box (`git pack-refs` there fails with
    the system's error instead of moving the refs into a file that is gone when the box ends). Its
    objects, refs and logs are writable over it (the loop commits on its branch), its hooks are covered by
    an empty read-only folder (none runs in the box), the worktree's own git folder (its HEAD, index, logs)
    is writable."""
    from ralph_supervisor.sandbox import Bind

    dot = workspace / ".git"
    try:
        text = dot.read_text(encoding="utf-8", errors="replace") if dot.is_file() else ""
    except OSError:
        return []
    if not text.startswith("gitdir:"):
        return []
    what = "the worktree's repository"
    private = Path(text[len("gitdir:"):].strip())
    private = private if private.is_absolute() else (workspace / private).resolve()
    try:
        common_text = (private / "commondir").read_text(encoding="utf-8").strip()
    except OSError:
        return [Bind(private, True, what)] if private.is_dir() else []
    common = Path(common_text) if os.path.isabs(common_text) else (private / common_text).resolve()
    binds = [Bind(common, False, what)]
    binds += [Bind(common / name, True, what) for name in ("objects", "refs", "logs") if (common / name).is_dir()]
    if (common / "hooks").is_dir():
        binds.append(Bind(common / "hooks", False, what, empty=True))
    binds.append(Bind(private, True, what))
    return binds


__all__ = ["FILE", "Worktree", "WorktreeError", "branch_name", "create", "git_binds", "note", "read", "record",
           "running_in_worktrees", "spend_folder", "take"]
