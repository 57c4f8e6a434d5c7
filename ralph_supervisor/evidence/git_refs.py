"""Commits: HEAD and the local branches and tags, read from the repository's files, compared before and after.

*Commits* = the number of local branches and tags (`refs/heads/**`, `refs/tags/**`, loose or packed)
created, deleted or moved during an iteration, or 1 when only HEAD moved (a commit on a detached HEAD, a
checkout). Remote-tracking refs, the stash and notes do not count: a fetch is not the agent's work, and a
push only follows a commit already counted. Worktrees (`.git` is a file) are followed through `gitdir:` and
`commondir`; a reftable repository is read with `git` when it is installed. No git process otherwise: a
read costs a few small files.

    before = read_git_refs(root)
    ...  # the agent works
    commits = count_commits(before, read_git_refs(root))
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from ralph_supervisor.evidence.ignore import read_text
from ralph_supervisor.safe_git import command as safe_command

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class GitRefs:
    """HEAD's commit and the local branches and tags, as read from the repository's files."""

    head: str = ""
    refs: Mapping[str, str] = field(default_factory=dict)


def count_commits(before: GitRefs, after: GitRefs) -> int:
    """Refs created, deleted or moved; or 1 when only HEAD moved. Pure."""
    names = set(before.refs) | set(after.refs)
    moved = sum(1 for name in names if before.refs.get(name) != after.refs.get(name))
    if moved == 0 and before.head != after.head:
        return 1
    return moved


def find_git_dirs(root: Path) -> tuple[Path, Path] | None:
    """(git dir, common dir) of the repository holding `root` (its top or any folder above), or None.

    `.git` may be a directory or, in worktrees and submodules, a file `gitdir: PATH`; a worktree's git
    dir names the shared one in its `commondir` file (refs live there, HEAD in the worktree's own).
    """
    for top in (root, *root.parents):
        if os.path.lexists(top / ".git"):
            return _git_dirs_at(top)
    return None


def _git_dirs_at(root: Path) -> tuple[Path, Path] | None:
    dot_git = root / ".git"
    if dot_git.is_dir():
        git_dir = dot_git
    elif dot_git.is_file():
        text = read_text(dot_git) or ""
        if not text.startswith("gitdir:"):
            return None
        target = Path(text[len("gitdir:") :].strip())
        git_dir = target if target.is_absolute() else (root / target)
        if not git_dir.is_dir():
            return None
    else:
        return None
    common = git_dir
    commondir = read_text(git_dir / "commondir")
    if commondir and commondir.strip():
        candidate = Path(commondir.strip())
        common = candidate if candidate.is_absolute() else (git_dir / candidate)
    return git_dir, common


def parse_packed_refs(text: str) -> dict[str, str]:
    """`packed-refs` content to {refname: sha}. Pure."""
    refs: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line.startswith(("#", "^")):
            continue
        sha, _, name = line.partition(" ")
        if name:
            refs[name.strip()] = sha.strip()
    return refs


def _is_counted_ref(name: str) -> bool:
    return name.startswith(("refs/heads/", "refs/tags/"))


def read_git_refs(root: Path) -> GitRefs:
    """HEAD and local refs, read from the files (no git process), or empty when not a repository."""
    dirs = find_git_dirs(root)
    if dirs is None:
        return GitRefs()
    git_dir, common = dirs
    if (common / "reftable").is_dir():
        return _read_refs_with_git(root)
    refs = {name: sha for name, sha in parse_packed_refs(read_text(common / "packed-refs") or "").items() if _is_counted_ref(name)}
    for top in ("heads", "tags"):
        base = common / "refs" / top
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                path = Path(dirpath) / name
                value = (read_text(path) or "").strip()
                if value and not value.startswith("ref:"):
                    refs[path.relative_to(common).as_posix()] = value
    head_text = (read_text(git_dir / "HEAD") or "").strip()
    head = head_text
    for _ in range(5):  # follow symbolic refs a few levels deep
        if not head.startswith("ref:"):
            break
        name = head[4:].strip()
        loose = read_text(git_dir / name) or read_text(common / name)
        if loose is not None and loose.strip():
            head = loose.strip()
        else:
            head = refs.get(name) or parse_packed_refs(read_text(common / "packed-refs") or "").get(name, "")
    if head.startswith("ref:"):
        head = ""
    return GitRefs(head=head, refs=refs)


def _read_refs_with_git(root: Path) -> GitRefs:
    """Fallback for repositories git's files cannot tell us about (reftable): ask git, if present."""
    git = shutil.which("git")
    if git is None:
        log.warning("git_refs_unreadable", root=str(root), reason="reftable repository and no git installed")
        return GitRefs()
    try:
        listing = subprocess.run(
            safe_command(git, ["-C", str(root), "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads",
                               "refs/tags"]),
            capture_output=True, text=True, timeout=10, check=False,
        ).stdout
        head = subprocess.run(
            safe_command(git, ["-C", str(root), "rev-parse", "--verify", "-q", "HEAD"]),
            capture_output=True, text=True, timeout=10, check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("git_refs_unreadable", root=str(root), reason=str(exc))
        return GitRefs()
    return GitRefs(head=head, refs=parse_packed_refs(listing))
