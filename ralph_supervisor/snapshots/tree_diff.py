"""What changed between two snapshot trees, read from the store's loose objects: the changes `git diff-tree -r
--no-renames --raw` lists, without starting git.

A snapshot compares its tree with its parent's (what was added, modified, deleted, and the bytes that came or
went). Both trees were written since the store's last repack, so the objects that differ between them are
loose files in the store: a few small zlib-compressed files for the directories on the way to what changed,
where a git process costs the machine a millisecond or more of CPU for its start alone, ten times a second while
a fast loop runs. Where an object is not loose (packed by a repack, or an older tree come back), is not what
it should be, or the trees are bigger than `MOST_ENTRIES` entries to read, the answer is None and the caller
asks git.

    changes = diff_trees(store / "objects", parent_tree, tree)   # [Change(b"100644", b"100644", old, new, b"M")]
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from ralph_supervisor.snapshots.loose_objects import read_loose

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ralph_supervisor.snapshots.tree_edit import TreeCache

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
"""The tree of no files: git knows it without storing it."""
MOST_ENTRIES = 20_000
"""Tree entries read at most for one diff; past that git's diff-tree is the quicker."""
TREE_MODE = b"40000"
ABSENT = b"000000"
"""diff-tree's mode and id for the side of a change where the path is not."""
NO_ID = b"0" * 40


class Change(NamedTuple):
    """One changed path as diff-tree's raw format gives it: the modes as six digits, the ids in hex, the status
    A (added), D (deleted), M (modified) or T (its type changed: a file became a link, or the reverse)."""

    old_mode: bytes
    new_mode: bytes
    old_id: bytes
    new_id: bytes
    status: bytes
    path: bytes


class _NotHere(Exception):
    """An object the diff needs is not a loose tree in the store (or there are too many entries)."""


def diff_trees(objects: Path, old_tree: str, new_tree: str, cache: TreeCache | None = None) -> list[Change] | None:
    """The changes from `old_tree` to `new_tree` (hex ids), files only, as `git diff-tree -r --no-renames`;
    None where they cannot be read from loose objects (ask git), or the ids are not SHA-1's. `cache`: trees
    known already (tree_edit.py's), and where those read here are kept."""
    if len(old_tree) != 40 or len(new_tree) != 40:
        return None
    reader = _Reader(objects, cache)
    changes: list[Change] = []
    try:
        reader.diff(old_tree.encode("ascii"), new_tree.encode("ascii"), b"", changes)
    except _NotHere:
        return None
    return changes


def tree_of_commit(objects: Path, commit: str) -> str | None:
    """The tree a loose commit object names; None where it is not loose or not a commit."""
    raw = read_loose(objects, commit, b"commit")
    if raw is None or not raw.startswith(b"tree ") or raw[45:46] != b"\n":
        return None
    return raw[5:45].decode("ascii")


def parse_tree(body: bytes) -> dict[bytes, tuple[bytes, bytes]]:
    """A tree object's content as {name: (mode, hex id)}. Pure; raises ValueError where it is malformed."""
    entries: dict[bytes, tuple[bytes, bytes]] = {}
    pos, end = 0, len(body)
    find = body.find
    while pos < end:
        nul = find(b"\0", pos)
        if nul < 0 or nul + 21 > end:
            raise ValueError("a tree entry runs past the end")
        mode, space, name = body[pos:nul].partition(b" ")
        if not space or not name:
            raise ValueError("a tree entry without a name")
        entries[name] = (mode, body[nul + 1 : nul + 21].hex().encode("ascii"))
        pos = nul + 21
    return entries


def load_tree(objects: Path, tree_id: bytes, cache: TreeCache | None = None) -> dict[bytes, tuple[bytes, bytes]] | None:
    """A stored tree's entries (parse_tree's), from `cache` or its loose object (then kept in `cache`); None where
    it is not a loose tree, or a damaged one."""
    if tree_id == EMPTY_TREE.encode("ascii"):
        return {}
    entries = cache.get(tree_id) if cache is not None else None
    if entries is None:
        body = read_loose(objects, tree_id.decode("ascii"), b"tree")
        if body is None:
            return None
        try:
            entries = parse_tree(body)
        except ValueError:
            return None
        if cache is not None:
            cache.put(tree_id, entries)
    return entries


def _kind(mode: bytes) -> bytes:
    """What a mode stores, as diff-tree tells a modification (M) from a change of type (T): executable or not
    is the same kind, a file."""
    return b"100644" if mode in (b"100644", b"100755", b"100664") else mode


class _Reader:
    def __init__(self, objects: Path, cache: TreeCache | None) -> None:
        self._objects = objects
        self._cache = cache
        self._entries_left = MOST_ENTRIES

    def _tree(self, tree_id: bytes | None) -> dict[bytes, tuple[bytes, bytes]]:
        if tree_id is None:
            return {}
        entries = load_tree(self._objects, tree_id, self._cache)
        if entries is None:
            raise _NotHere
        self._entries_left -= len(entries)
        if self._entries_left < 0:
            raise _NotHere
        return entries

    def diff(self, old_id: bytes | None, new_id: bytes | None, prefix: bytes, out: list[Change]) -> None:
        if old_id == new_id:
            return
        old, new = self._tree(old_id), self._tree(new_id)
        for name in old.keys() | new.keys():
            before, after = old.get(name), new.get(name)
            if before == after:
                continue
            path = prefix + name
            was_tree = before is not None and before[0] == TREE_MODE
            is_tree = after is not None and after[0] == TREE_MODE
            if was_tree or is_tree:  # a folder on either side: its files, each added or deleted or changed
                self.diff(before[1] if was_tree and before else None, after[1] if is_tree and after else None,
                          path + b"/", out)
            old_file = before if before is not None and not was_tree else None
            new_file = after if after is not None and not is_tree else None
            if old_file is not None and new_file is not None:
                status = b"M" if _kind(old_file[0]) == _kind(new_file[0]) else b"T"
                out.append(Change(old_file[0].rjust(6, b"0"), new_file[0].rjust(6, b"0"), old_file[1], new_file[1],
                                  status, path))
            elif old_file is not None:
                out.append(Change(old_file[0].rjust(6, b"0"), ABSENT, old_file[1], NO_ID, b"D", path))
            elif new_file is not None:
                out.append(Change(ABSENT, new_file[0].rjust(6, b"0"), NO_ID, new_file[1], b"A", path))


__all__ = ["EMPTY_TREE", "MOST_ENTRIES", "TREE_MODE", "Change", "diff_trees", "load_tree", "parse_tree", "tree_of_commit"]
