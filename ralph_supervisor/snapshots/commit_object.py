"""A snapshot's commit, written by hand as a loose object: the object `git commit-tree` would write, byte for byte.

A snapshot runs git for the index and the tree; the commit is a few hundred bytes of text around the
tree's id and the message, so writing it here saves a process a call (its start, its pipes, its SIGCHLD) at no
risk to the format: the same header, the same identity and date as `git_env` gives commit-tree, zlib-compressed
under its SHA-1 as git stores loose objects. A store whose objects are not SHA-1 (a tree id of another length)
is left to commit-tree.

    commit = write_commit(store / "objects", tree, b'{"id":7}', now=time.time())   # None: ask commit-tree
"""

from __future__ import annotations

from pathlib import Path

from ralph_supervisor.snapshots.loose_objects import write_loose

NAME, EMAIL = "ralph-supervise", "ralph-supervise@localhost"
"""Who the snapshots' commits are by: here, and in git_env's GIT_AUTHOR_* and GIT_COMMITTER_* for commit-tree."""
IDENTITY = f"{NAME} <{EMAIL}>"


def commit_bytes(tree: str, message: bytes, now: float) -> bytes:
    """The commit object's content (what `git cat-file commit` shows), as commit-tree makes it. Pure."""
    stamp = f"{IDENTITY} {int(now)} +0000"
    return f"tree {tree}\nauthor {stamp}\ncommitter {stamp}\n\n".encode("ascii") + message


def write_commit(objects: Path, tree: str, message: bytes, now: float) -> str | None:
    """Store the commit of `tree` with `message` as a loose object in `objects`; its id, or None where the
    store's ids are not SHA-1. Raises OSError (a full disk, a read-only store): the caller says which."""
    if len(tree) != 40:
        return None
    return write_loose(objects, b"commit", commit_bytes(tree, message, now))


__all__ = ["EMAIL", "IDENTITY", "NAME", "commit_bytes", "write_commit"]
