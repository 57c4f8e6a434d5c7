"""Which replaced files lost their uncommitted changes: their content now is a committed version.

`git checkout -- .`, `git restore .`, `git reset --hard` and `git stash` delete nothing: they put files
back to what HEAD holds, and the changes made since the last commit are gone. The watcher sees only a
file whose content changed, as an edit would. Telling the two apart needs the repository: a file that
held other content at the iteration's start and holds exactly HEAD's version at its end was reverted.
HEAD at the iteration's start is the version compared with, and HEAD at its end too when the iteration
moved HEAD back (`git reset --hard HEAD~3`: HEAD is now an ancestor of where it was).

The user's repository is only read (`cat-file`, `merge-base`), with no user or system config (no filter,
no hook runs). Blobs are compared as stored: a file git converts on checkout (`eol=crlf`, a smudge filter)
does not match, so it is not counted (an undercount: when in doubt, no trip).

    committed = committed_states(workspace, head_before, head_after, paths)   # one map per commit
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Collection
from pathlib import Path

from ralph_supervisor.snapshots.git import Git, SnapshotError, find_git, user_git_dir

PATHS_MAX = 20_000
"""Replaced files looked up per iteration (an agent that rewrites more is judged on these)."""


def content_state(data: bytes) -> bytes:
    """The watcher's state of a regular file holding `data` (`workspace.file_state`'s hashed form)."""
    return b"H" + len(data).to_bytes(8, "big") + hashlib.blake2b(data, digest_size=16).digest()


def _repository(workspace: Path) -> tuple[Path, Path, str] | None:
    """(top of the work tree, its git dir, the workspace's path inside it with a trailing slash or '')."""
    for top in (workspace, *workspace.parents):
        if os.path.lexists(top / ".git"):
            git_dir = user_git_dir(top)
            if git_dir is None:
                return None
            inside = os.path.relpath(workspace, top)
            return top, git_dir, "" if inside == "." else inside.replace(os.sep, "/") + "/"
    return None


def committed_states(workspace: Path, head_before: str, head_after: str,
                     paths: Collection[str]) -> list[dict[str, bytes]]:
    """For each commit to compare with (HEAD at the start; HEAD at the end when it moved back), the
    watcher's state of each of `paths` in it (paths it lacks are left out). [] when there is no
    repository, no git, or git fails: nothing is judged reverted."""
    git_path = find_git()
    found = _repository(Path(workspace))
    if git_path is None or found is None or not head_before or not paths:
        return []
    top, git_dir, prefix = found
    git = Git(git_path, git_dir, top)
    commits = [head_before]
    try:
        if head_after and head_after != head_before:
            git.run("merge-base", "--is-ancestor", head_after, head_before)  # exit 1: not moved back
            commits.append(head_after)
    except SnapshotError:
        pass
    wanted = sorted(p for p in paths if "\n" not in p)[:PATHS_MAX]
    out: list[dict[str, bytes]] = []
    for commit in commits:
        try:
            found_states = _blobs(git, commit, prefix, wanted)
        except (SnapshotError, ValueError):  # git failed, or its answer was cut short
            continue
        if found_states:
            out.append(found_states)
    return out


def _blobs(git: Git, commit: str, prefix: str, paths: list[str]) -> dict[str, bytes]:
    """`git cat-file --batch` of `commit:prefix+path` for each path: the states of those that are blobs."""
    data = b"".join(f"{commit}:{prefix}{path}\n".encode("utf-8", "surrogateescape") for path in paths)
    raw = git.run("cat-file", "--batch", input=data)
    states: dict[str, bytes] = {}
    at = 0
    for path in paths:
        end = raw.index(b"\n", at)
        header = raw[at:end].split()
        at = end + 1
        if not header or header[-1] == b"missing" or len(header) != 3 or not header[2].isdigit():
            continue  # "<spec> missing" (or ambiguous): this commit lacks the path
        size = int(header[2])
        if header[1] == b"blob":
            states[path] = content_state(raw[at:at + size])
        at += size + 1
    return states


__all__ = ["PATHS_MAX", "committed_states", "content_state"]
