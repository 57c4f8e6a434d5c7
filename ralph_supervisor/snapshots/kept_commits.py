"""Commits are kept too: every commit the user's branches pointed to at a snapshot is kept in the store.

A snapshot holds files, and files are not all an agent can destroy: work it committed and then dropped
(`git reset --hard HEAD~3`, `git branch -D`, a rebase, then `git reflog expire --expire=now --all && git gc
--prune=now`) is gone from the user's repository for good. So at every snapshot the store fetches the
commits the user's branches (and a detached HEAD) point to, each kept under `refs/kept/<commit>`, which
keeps its history with it. `restore --commits` lists them; `restore --commit C --branch NAME` puts one back
on a new branch of the user's repository, never moving a ref of the user's that exists.

Only the user's `.git` is read (`for-each-ref`, and git's own upload-pack for the fetch); its config does
not apply to the store, whose config is its own.

    count = keep(store)                       # at a snapshot: the new tips, fetched
    for commit in kept(store): ...            # what `restore --commits` shows
    bring_back(store, "3f2a9c1", "rescued")   # a branch of the user's, at that commit
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ralph_supervisor.snapshots.git import Git, SnapshotError, user_git_dir
from ralph_supervisor.snapshots.store import SnapshotStore
from ralph_supervisor.store import folder_bytes

KEPT = "refs/kept/"
REPOSITORY_MAX = 200_000_000
"""The first keep copies the branches' whole history into the store: a repository whose objects take more
than this is not copied (one warning), so the store stays within its budget and a snapshot stays quick."""
FETCHING = "refs/kept-fetching/"
_TOO_LARGE: dict[str, int] = {}
BRANCH_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}")


def _user_git(store: SnapshotStore, git_dir: Path) -> Git:
    return Git(store.git.git, git_dir, store.workspace)


def tips(store: SnapshotStore) -> dict[str, str]:
    """The commits the user's branches (and a detached HEAD) point to now: commit -> one ref naming it."""
    git_dir = user_git_dir(store.workspace)
    if git_dir is None:
        return {}
    user = _user_git(store, git_dir)
    out = user.run("for-each-ref", "--format=%(objectname) %(objecttype) %(refname)", "refs/heads/")
    found: dict[str, str] = {}
    for line in out.decode("utf-8", "replace").splitlines():
        sha, kind, ref = (line.split(" ", 2) + ["", ""])[:3]
        if kind == "commit":
            found.setdefault(sha, ref)
    head = user.run("rev-parse", "-q", "--verify", "HEAD^{commit}", ok=(0, 1)).decode().strip()
    if head:
        found.setdefault(head, "HEAD")
    return found


def keep(store: SnapshotStore) -> int:
    """Fetch the user's branch tips the store does not keep yet; how many new ones. SnapshotError on failure."""
    now = tips(store)
    if not now:
        return 0
    have = set(_kept_refs(store))
    new = {sha: ref for sha, ref in now.items() if sha not in have}
    if not new:
        return 0
    git_dir = user_git_dir(store.workspace)
    assert git_dir is not None
    if not have:
        size = _TOO_LARGE.get(str(git_dir)) or _objects_bytes(git_dir)
        if size > REPOSITORY_MAX:
            _TOO_LARGE[str(git_dir)] = size  # measured once: the next snapshots do not walk it again
            raise SnapshotError("failed", f"the repository's history takes {size // 1_000_000} MB, more than "
                                          f"{REPOSITORY_MAX // 1_000_000} MB: its commits are not kept")
    specs = [f"+{ref}:{FETCHING}{i}" for i, ref in enumerate(sorted(set(new.values())))]
    store.git.run("fetch", "--no-tags", "--quiet", "--no-write-fetch-head", "--no-auto-gc", str(git_dir), *specs)
    fetched = store.git.run("for-each-ref", "--format=%(objectname) %(refname)", FETCHING).decode().split("\n")
    lines = []
    for line in fetched:
        if " " not in line:
            continue
        sha, ref = line.split(" ", 1)
        lines.append(f"create {KEPT}{sha} {sha}\n" if sha not in have else "")
        lines.append(f"delete {ref}\n")
        have.add(sha)
    store.git.run("update-ref", "--stdin", input="".join(lines).encode())
    return len(new)


def _objects_bytes(git_dir: Path) -> int:
    """What the repository's objects take (a worktree's `.git` points to the main one's `commondir`)."""
    common = git_dir
    try:
        text = (git_dir / "commondir").read_text(encoding="utf-8").strip()
        common = (git_dir / text).resolve()
    except OSError:
        pass
    return folder_bytes(common / "objects")


@dataclass(frozen=True)
class Kept:
    commit: str
    at: str
    """The commit's date (ISO-8601)."""
    subject: str
    in_repository: bool
    """Whether the user's repository still has it (False: dropped and collected, only the store has it)."""

    def to_dict(self) -> dict[str, object]:
        return {"commit": self.commit, "at": self.at, "subject": self.subject, "in_repository": self.in_repository}


def _kept_refs(store: SnapshotStore) -> list[str]:
    if not store.exists():
        return []
    out = store.git.run("for-each-ref", "--format=%(objectname)", KEPT).decode()
    return [line for line in out.split() if line]


def kept(store: SnapshotStore) -> list[Kept]:
    """Every kept commit, newest first."""
    shas = _kept_refs(store)
    if not shas:
        return []
    out = store.git.run("log", "--no-walk=sorted", "--format=%H%x00%cI%x00%s", *shas).decode("utf-8", "replace")
    git_dir = user_git_dir(store.workspace)
    user = _user_git(store, git_dir) if git_dir is not None else None
    found = []
    for line in out.splitlines():
        sha, at, subject = (line.split("\0") + ["", ""])[:3]
        found.append(Kept(sha, at, subject, _has(user, sha)))
    return found


def _has(user: Git | None, sha: str) -> bool:
    if user is None:
        return False
    try:
        user.run("cat-file", "-e", f"{sha}^{{commit}}")
    except SnapshotError:
        return False
    return True


def bring_back(store: SnapshotStore, commit: str, branch: str) -> str:
    """Create `refs/heads/<branch>` in the user's repository at a kept commit (its history fetched back);
    the full commit id. ValueError when the commit is not kept, the name is not a branch name, or the
    branch exists (the user's refs are never moved)."""
    if not BRANCH_NAME.fullmatch(branch) or ".." in branch or branch.endswith((".lock", "/")) or "//" in branch:
        raise ValueError(f"--branch: {branch!r} is not a branch name")
    matches = [sha for sha in _kept_refs(store) if sha.startswith(commit.lower())] if len(commit) >= 4 else []
    if len(matches) != 1:
        raise ValueError(f"no kept commit {commit!r} (see `ralph-supervise restore --commits`)" if not matches
                         else f"{commit!r} names {len(matches)} kept commits: give more of it")
    git_dir = user_git_dir(store.workspace)
    if git_dir is None:
        raise ValueError(f"{store.workspace} is not a git repository: nowhere to put a branch")
    user = _user_git(store, git_dir)
    if _ref_exists(user, branch):
        raise ValueError(f"branch {branch!r} exists: pick a new name (your branches are never moved)")
    user.run("fetch", "--no-tags", "--quiet", "--no-write-fetch-head", str(store.path),
             f"{KEPT}{matches[0]}:refs/heads/{branch}")
    return matches[0]


def _ref_exists(user: Git, branch: str) -> bool:
    try:
        user.run("show-ref", "--verify", "-q", f"refs/heads/{branch}")
    except SnapshotError:
        return False
    return True


__all__ = ["Kept", "bring_back", "keep", "kept", "tips"]
