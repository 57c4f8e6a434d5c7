"""Running git for the snapshots: on the private store, and (read only) on the user's repository.

Every command goes through `safe_git.command` (nothing the workspace's config names is run), with none of the
user's environment's `GIT_*` and no user or system config, in the C locale; its pid is a helper's
(`process/helpers.py`), never part of the loop's tree. A failure is a `SnapshotError` whose `kind` says what a
caller should do about it (`classify_failure`).

    git = Git(find_git() or "git", store_path, workspace)
    tree = git.run("write-tree").decode().strip()
    listing = tree_listing(git, tree)      # every file of the tree, with its size
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import time
from collections.abc import Collection, Sequence
from pathlib import Path

from ralph_supervisor.process.helpers import HELPERS, TimedOut
from ralph_supervisor.safe_git import command as safe_command
from ralph_supervisor.snapshots.commit_object import EMAIL, NAME

GIT_TIMEOUT_S = 600.0
ATTRIBUTES = "* -text -eol -crlf -filter -ident -working-tree-encoding -diff -merge\n"
"""The store's `info/attributes`, which wins over every `.gitattributes`: no conversion, so what is stored is the
bytes."""


class SnapshotError(Exception):
    """A snapshot could not be taken or read. `kind` says what a caller should do about it:

    no-git (git is not installed), no-access (the store cannot be written), disk-full, corrupt (the
    store is broken: move it aside), failed (anything else: try again later), missing (restore: no such
    iteration or path).
    """

    def __init__(self, kind: str, message: str, stderr: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.stderr = stderr


def find_git() -> str | None:
    return shutil.which("git")


def git_env(git_dir: Path, work_tree: Path) -> dict[str, str]:
    """The user's environment without any GIT_* (a hook's GIT_DIR or GIT_INDEX_FILE must never leak
    in), and no user or system config: the store's own config is the only one. `dated` adds a command's
    dates and index."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_DIR=str(git_dir), GIT_WORK_TREE=str(work_tree), GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull,
        HOME=str(git_dir), XDG_CONFIG_HOME=str(git_dir), LC_ALL="C", LANGUAGE="C", GIT_TERMINAL_PROMPT="0",
        GIT_LITERAL_PATHSPECS="1", GIT_AUTHOR_NAME=NAME, GIT_AUTHOR_EMAIL=EMAIL, GIT_COMMITTER_NAME=NAME,
        GIT_COMMITTER_EMAIL=EMAIL,
    )
    return env


def dated(base: dict[str, str], index: Path | None, now: float) -> dict[str, str]:
    """`base` (git_env's) with the commit dates of `now` and the index to use."""
    stamp = f"@{int(now)} +0000"
    env = {**base, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
    if index is not None:
        env["GIT_INDEX_FILE"] = str(index)
    return env


def classify_failure(stderr: str) -> str:
    """What a git failure means for the store (its stderr, in the C locale). Pure."""
    text = stderr.lower()
    if any(w in text for w in ("no space left", "out of diskspace", "disk quota", "file too large")):
        return "disk-full"
    if "read-only file system" in text or "permission denied" in text or "insufficient permission" in text:
        return "no-access"
    if any(word in text for word in ("corrupt", "bad object", "not a git repository", "bad signature",
                                     "invalid object", "unable to read", "bad tree", "broken",
                                     "not a valid object", "unknown index entry format")):
        return "corrupt"
    return "failed"


def errno_kind(exc: OSError) -> str:
    """What a failed file operation means for the store (`SnapshotError.kind`). Pure."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return "disk-full"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "no-access"
    return "failed"


class Git:
    """One way to run git on a repository: its environment, its pid kept out of the tree, its failures classified."""

    def __init__(self, git: str, git_dir: Path, work_tree: Path, filters: Collection[str] = ()) -> None:
        self.git = git
        self.git_dir = git_dir
        self.work_tree = work_tree
        self.filters = tuple(filters)
        """Filter drivers emptied in every command (safe_git): those of a config we do not write."""
        self.base_env = git_env(git_dir, work_tree)
        """The environment as it was when the store opened: a snapshot runs git four times, and building it
        from os.environ (encoding each of the user's variables) cost more than the rest of a run's setup."""

    def run(self, *args: str, input: bytes | None = None, index: Path | None = None, now: float | None = None,
            ok: Sequence[int] = (0,)) -> bytes:
        env = dated(self.base_env, index, time.time() if now is None else now)
        command = next((a for a in args if not a.startswith("-") and "=" not in a), args[0])
        if command == "init":  # git refuses GIT_WORK_TREE without a repository to go with it
            del env["GIT_DIR"], env["GIT_WORK_TREE"]
        argv = safe_command(self.git, args, filters=self.filters)
        argv[1:1] = ["-C", str(self.work_tree)]  # the working folder, which HELPERS.run leaves as ours
        try:
            done = HELPERS.run(argv, env=env, input=input, timeout=GIT_TIMEOUT_S)
        except OSError as exc:
            raise SnapshotError(errno_kind(exc), f"cannot run git: {exc.strerror or exc}") from None
        except TimedOut:
            raise SnapshotError("failed", f"git {command} did not finish in {GIT_TIMEOUT_S:.0f} s") from None
        if done.code not in ok:
            text = done.err.decode("utf-8", "replace").strip()
            last = text.splitlines()[-1] if text else f"exit code {done.code}"
            raise SnapshotError(classify_failure(text), f"git {command} failed: {last}"[:400], text)
        return done.out


def tree_listing(git: Git, tree: str) -> dict[str, int]:
    """Every file of a tree (or commit) with its size (links count their target's length, as git stores them)."""
    out = git.run("ls-tree", "-r", "-l", "-z", "--full-tree", tree)
    listing: dict[str, int] = {}
    for entry in out.split(b"\0"):
        meta, _, name = entry.partition(b"\t")
        parts = meta.split()
        if name and len(parts) == 4 and parts[1] == b"blob":
            listing[os.fsdecode(name)] = int(parts[3]) if parts[3].isdigit() else 0
    return listing


def git_mode_bits(st: os.stat_result) -> int:
    """The permission bits git gives back for a file of this mode (it keeps only whether it is executable). Pure."""
    return 0o755 if st.st_mode & 0o100 else 0o644


_REFUSED = (
    re.compile(r"Unable to process path (.+)$"),
    re.compile(r"[Uu]nable to index file '(.+)'$"),
    re.compile(r'error: open\("(.+)"\): '),
)


def refused_path(stderr: str) -> str | None:
    """The workspace path a failed `update-index` names (git's own wording), or None. Pure."""
    for line in stderr.splitlines():
        for pattern in _REFUSED:
            match = pattern.search(line)
            if match:
                return match.group(1)
    return None


def user_git_dir(workspace: Path) -> Path | None:
    """The workspace's own repository: `.git` as a folder, or the one a `.git` file names (a worktree)."""
    dot = workspace / ".git"
    if dot.is_dir():
        return dot
    try:
        text = dot.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    if text.startswith("gitdir:"):
        target = Path(text[len("gitdir:"):].strip())
        return target if target.is_absolute() else (workspace / target).resolve()
    return None


__all__ = ["GIT_TIMEOUT_S", "Git", "SnapshotError", "classify_failure", "errno_kind", "find_git", "git_env",
           "git_mode_bits", "refused_path", "tree_listing", "user_git_dir"]
