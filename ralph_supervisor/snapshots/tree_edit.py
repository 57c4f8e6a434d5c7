"""A new tree made by hand from a stored one and a few edits: the tree `git update-index` and `git write-tree` make
of the same changes, written as loose objects.

A snapshot of a running loop stores the few files a call changed. Only the folders on their way change; the
rest of the tree is the parent snapshot's, shared by id. The stored trees it opens are read from the store's
loose objects (or from `TreeCache`, the trees of the last snapshots); where one is not loose, `NotLoose` is raised
and the caller asks git. Edits follow update-index's rules: a file put where a folder or a file stood replaces it
(`--replace`), removing a path removes a file or link, never a folder, and a folder left empty is no longer in
its tree.

    editor = TreeEditor(store / "objects", parent_tree, cache)
    editor.remove(b"old.txt")
    editor.put(b"src/new.py", b"100644", blob_id)
    tree = editor.write()
"""

from __future__ import annotations

from binascii import unhexlify
from pathlib import Path

from ralph_supervisor.snapshots.loose_objects import write_loose
from ralph_supervisor.snapshots.tree_diff import TREE_MODE, load_tree

Entries = dict[bytes, tuple[bytes, bytes]]
"""A tree's entries: {name: (mode, hex id)}, modes as trees store them (b"40000" for a folder)."""


class NotLoose(Exception):
    """A stored tree the edit needs is not a loose object of the store (packed, or damaged)."""


class TreeCache:
    """The entries of recently read or written trees, by id: the parent snapshot's folders are then not read and
    unpacked again at the next snapshot. At most `most` trees; all are forgotten when it is full."""

    def __init__(self, most: int = 512) -> None:
        self._most = most
        self._trees: dict[bytes, Entries] = {}

    def get(self, oid: bytes) -> Entries | None:
        return self._trees.get(oid)

    def put(self, oid: bytes, entries: Entries) -> None:
        if len(self._trees) >= self._most:
            self._trees.clear()
        self._trees[oid] = entries


class _Folder:
    __slots__ = ("changed", "entries", "opened")

    def __init__(self, entries: Entries) -> None:
        self.entries = dict(entries)
        """Its entries as stored, and as edited: a sub-folder being edited keeps its old entry until written."""
        self.opened: dict[bytes, _Folder] = {}
        self.changed = False


def _order(item: tuple[bytes, tuple[bytes, bytes]]) -> bytes:
    """Git's order of a tree's entries: by name, a folder's name as if it ended in a slash."""
    name, (mode, _oid) = item
    return name + b"/" if mode == TREE_MODE else name


class TreeEditor:
    """Edits to the tree `root` (hex id), written as new trees by `write`. Paths are relative, `/`-separated bytes."""

    def __init__(self, objects: Path, root: str, cache: TreeCache) -> None:
        self._objects = objects
        self._cache = cache
        self._root_id = root
        self._root = _Folder(self._read(root.encode("ascii")))

    def put(self, path: bytes, mode: bytes, oid: bytes) -> None:
        """A file or link (`mode` 100644, 100755 or 120000) with content `oid` at `path`."""
        *folders, name = path.split(b"/")
        chain = self._open(folders, make=True)
        assert chain is not None
        folder = chain[-1]
        if folder.opened.pop(name, None) is None and folder.entries.get(name) == (mode, oid):
            return
        folder.entries[name] = (mode, oid)
        for each in chain:
            each.changed = True

    def remove(self, path: bytes) -> None:
        """The file or link at `path` is gone (nothing where a folder or nothing is there)."""
        *folders, name = path.split(b"/")
        chain = self._open(folders, make=False)
        if chain is None:
            return
        folder = chain[-1]
        entry = folder.entries.get(name)
        if entry is None or entry[0] == TREE_MODE or name in folder.opened:
            return
        del folder.entries[name]
        for each in chain:
            each.changed = True

    def write(self) -> str:
        """Store the edited folders as new trees; the root's id (the tree of no files where nothing is left)."""
        if not self._root.changed:
            return self._root_id
        oid = self._write(self._root)
        return oid.decode("ascii") if oid is not None else write_loose(self._objects, b"tree", b"")

    def _open(self, folders: list[bytes], *, make: bool) -> list[_Folder] | None:
        """The folders from the root down to `folders`, opened for editing; made where missing or where a file
        stands in the way when `make`, else None there."""
        chain = [self._root]
        folder = self._root
        for name in folders:
            sub = folder.opened.get(name)
            if sub is None:
                entry = folder.entries.get(name)
                if entry is not None and entry[0] == TREE_MODE:
                    sub = _Folder(self._read(entry[1]))
                elif make:
                    sub = _Folder({})
                    sub.changed = True  # new: written even where nothing more is put in it
                    folder.entries.pop(name, None)
                else:
                    return None
                folder.opened[name] = sub
            chain.append(sub)
            folder = sub
        return chain

    def _read(self, oid: bytes) -> Entries:
        entries = load_tree(self._objects, oid, self._cache)
        if entries is None:
            raise NotLoose(oid.decode("ascii"))
        return entries

    def _write(self, folder: _Folder) -> bytes | None:
        """The folder's new id (its changed sub-folders written first); None where it is left empty."""
        for name, sub in folder.opened.items():
            if not sub.changed:
                continue
            oid = self._write(sub)
            if oid is None:
                folder.entries.pop(name, None)
            else:
                folder.entries[name] = (TREE_MODE, oid)
        if not folder.entries:
            return None
        body = b"".join(mode + b" " + name + b"\0" + unhexlify(oid)
                        for name, (mode, oid) in sorted(folder.entries.items(), key=_order))
        oid = write_loose(self._objects, b"tree", body).encode("ascii")
        self._cache.put(oid, dict(folder.entries))
        return oid


__all__ = ["Entries", "NotLoose", "TreeCache", "TreeEditor"]
