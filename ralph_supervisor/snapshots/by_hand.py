"""An incremental snapshot stored without git: the few files a call changed hashed and written as loose blobs, the
folders on their way as new trees (tree_edit.py), what `git update-index` and `git write-tree` store for them.

A loop making ten calls a second takes ten snapshots a second, each a handful of changed paths; two git
processes for each cost the machine more than the supervisor's own work for the call. Here a snapshot costs
a read and a small write per changed file and folder. It is taken only where nothing git does differently
could apply: the store's attributes turn every conversion off (so git stores a file's bytes too), no folder on
the paths' way is a link (git refuses the path), no path git would refuse by its name, no more than
`MOST_FILES` files and none over `MOST_BYTES`, and every stored tree it must open a loose object or known. Otherwise, or where reading or writing fails, None: the caller asks git, which says what went wrong.

The store's index then no longer matches the newest snapshot; the caller brings it up to date with a full
pass before git takes the next snapshot (take.py).

    done = store_by_hand(workspace, store / "objects", parent_tree, add, remove, drop, cache)
    if done is not None:
        tree, moved = done.tree, done.moved
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from ralph_supervisor.snapshots.git import ATTRIBUTES
from ralph_supervisor.snapshots.info import LIST_MAX
from ralph_supervisor.snapshots.loose_objects import write_loose
from ralph_supervisor.snapshots.tree_edit import NotLoose, TreeCache, TreeEditor
from ralph_supervisor.store import read_all

MOST_FILES = 100
"""Files stored by hand at most in one snapshot: more go to git (whose bulk check-in packs them)."""
MOST_BYTES = 8_000_000
"""The biggest file stored by hand (read whole into memory): a bigger one goes to git, which streams it."""
RETRIES = 2
"""Passes over files that changed while they were read, before they are listed as moved (as take.py's)."""

Signature = tuple[int, int, int, int]
"""A file's (size, mtime, ctime, inode): when it differs after a read, the file changed while it was read."""


def signature(st: os.stat_result) -> Signature:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def changed_since(workspace: Path, path: str, before: Signature) -> Signature | None:
    """The file's signature now where it differs from `before` (it changed while it was read); None where it
    did not, or it is gone (the next snapshot records that)."""
    try:
        after = signature(os.lstat(os.path.join(workspace, path)))
    except OSError:
        return None
    return after if after != before else None


@dataclass(frozen=True)
class ByHand:
    """What a snapshot stored by hand made: its tree, the files still changing (stored as last read), and the
    files that could not be read (not stored, as update-index refuses them)."""

    tree: str
    moved: tuple[str, ...]
    refused: tuple[str, ...]


class _Declined(Exception):
    """Something git does differently, or a failure git should report: the snapshot is left to git."""


_GONE = object()
_REFUSED = object()


def store_by_hand(workspace: Path, objects: Path, parent_tree: str, add: Mapping[str, Signature],
                  remove: Collection[str], drop: Collection[str], cache: TreeCache) -> ByHand | None:
    """Store the files `add` names (with the signatures they had when chosen), and take `remove` and `drop` out,
    in a tree made from `parent_tree`; None where git must do it."""
    if len(add) > MOST_FILES or any(sig[0] > MOST_BYTES for sig in add.values()):
        return None
    if not plain_paths(workspace, objects, [*add, *remove, *drop]):
        return None
    try:
        editor = TreeEditor(objects, parent_tree, cache)
        for path in sorted(drop):
            editor.remove(os.fsencode(path))
        for path in sorted(remove):
            editor.remove(os.fsencode(path))
        refused: list[str] = []
        pending = dict(add)
        moving: dict[str, Signature] = {}
        for attempt in range(RETRIES + 1):
            moving = {}
            for path, before in sorted(pending.items()):
                stored = _store(workspace, objects, path)
                if stored is _GONE or stored is _REFUSED:
                    editor.remove(os.fsencode(path))
                    if stored is _REFUSED:
                        refused.append(path)
                    continue
                assert isinstance(stored, tuple)
                editor.put(os.fsencode(path), *stored)
                after = changed_since(workspace, path, before)
                if after is not None:
                    moving[path] = after
            if not moving or attempt == RETRIES:
                break
            pending = moving
        tree = editor.write()
    except (NotLoose, _Declined, OSError):
        return None
    return ByHand(tree, tuple(sorted(moving))[:LIST_MAX], tuple(refused))


def _store(workspace: Path, objects: Path, path: str) -> tuple[bytes, bytes] | object:
    """Write the blob of the file or link at `path`: (its mode, its id); _GONE or _REFUSED (unreadable)."""
    absolute = os.path.join(workspace, path)
    try:
        st = os.lstat(absolute)
    except FileNotFoundError:
        return _GONE
    if stat.S_ISLNK(st.st_mode):
        try:
            data = os.readlink(os.fsencode(absolute))
        except FileNotFoundError:
            return _GONE
        mode = b"120000"
    elif stat.S_ISREG(st.st_mode):
        try:
            fd = os.open(absolute, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return _GONE
        except PermissionError:
            return _REFUSED
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MOST_BYTES:
                raise _Declined(path)
            data = read_all(fd)
        finally:
            os.close(fd)
        mode = b"100755" if st.st_mode & stat.S_IXUSR else b"100644"
    else:
        raise _Declined(path)  # a folder or a special file now: git says what it makes of it
    return mode, write_loose(objects, b"blob", data).encode("ascii")


def plain_paths(workspace: Path, objects: Path, paths: Collection[str]) -> bool:
    """Whether git would store these paths' files as their bytes: the store's attributes turn every conversion
    off (its `info/attributes` is git.py's ATTRIBUTES, whatever `.gitattributes` say), no folder on their way is a
    link, and no name is one git refuses (`.git` in any case or spelling NTFS folds to it, a backslash, an
    empty, `.` or `..` part; `.gitmodules`, which git refuses as a link, is left to it too)."""
    try:
        with open(os.path.join(objects.parent, "info", "attributes"), encoding="utf-8") as attributes:
            if attributes.read() != ATTRIBUTES:
                return False
    except (OSError, ValueError):
        return False
    seen: set[str] = set()
    for path in paths:
        if "\\" in path or any(_refused_name(part) for part in path.split("/")):
            return False
        folder = path.rpartition("/")[0]
        while folder and folder not in seen:
            seen.add(folder)
            try:
                if not stat.S_ISDIR(os.lstat(os.path.join(workspace, folder)).st_mode):
                    return False
            except FileNotFoundError:
                pass  # gone: the paths under it are removals
            except OSError:
                return False
            folder = folder.rpartition("/")[0]
    return True


def _refused_name(part: str) -> bool:
    if part in ("", ".", ".."):
        return True
    folded = part.lower().rstrip(" .")
    return folded in (".git", "git~1", ".gitmodules")  # .gitmodules: git refuses it as a link


__all__ = ["MOST_BYTES", "MOST_FILES", "RETRIES", "ByHand", "Signature", "changed_since", "plain_paths", "signature",
           "store_by_hand"]
