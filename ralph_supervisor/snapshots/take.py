"""Taking one snapshot: which paths to read again, bringing the store's index up to date, the commit.

A full pass asks git for every tracked, untracked and deleted path that changed (`ls-files --modified
--others --deleted`, which trusts the index's stat cache, so unchanged files are not read), and then for the
ignored ones (`.env`, local config, data: what `git clean -x` deletes), but for regenerable trees (`--snapshot-skip`
names and virtual environments), which are listed by their root and measured, not stored. An incremental pass
reads only the paths the watcher saw change. Each path is sorted by what git must do with it (`_Pass`). An
incremental pass is stored by hand where it can be (by_hand.py: the changed files' blobs and the folders on their
way written here, no git process), which leaves git's index behind until it catches up (`catch_up_index`, or the
next full pass); otherwise the index is updated (files that change while read are read again, then listed as
moved) and `write-tree` makes the tree. The commit is written by hand (commit_object.py). What is ignored is the watcher's rules, written to the store's `info/exclude`
by the store.

    taker = Taker(git, ObjectSizes(git), workspace, max_file=50_000_000, skip=frozenset({"node_modules"}),
                  state_prefix=None)
    info, stored = taker.take(7, iteration=3, kind="iteration", parent=latest, changed=None, now=time.time())
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ralph_supervisor import store as state_files
from ralph_supervisor.evidence.ignore import BOOKKEEPING_NAMES, VENV_MARKER
from ralph_supervisor.snapshots.by_hand import RETRIES, Signature, changed_since, signature, store_by_hand
from ralph_supervisor.snapshots.commit_object import write_commit
from ralph_supervisor.snapshots.git import Git, SnapshotError, errno_kind, git_mode_bits, refused_path, tree_listing
from ralph_supervisor.snapshots.info import LIST_MAX, SKIP_MEASURE_EVERY_S, SnapshotInfo
from ralph_supervisor.snapshots.object_sizes import ObjectSizes
from ralph_supervisor.snapshots.tree_diff import diff_trees, tree_of_commit
from ralph_supervisor.snapshots.tree_edit import TreeCache

INDEX_BEHIND = "ralph-index-behind"
"""The file in the store that says its index is behind the newest snapshot (stored by hand)."""
BULK_FILES = 100
"""A pass that stores more files than this writes them into one pack (git's bulk check-in), not one file each:
the first snapshot of 20,000 files then makes 2 files on disk instead of 20,000, and no repack follows."""

@dataclass
class _Pass:
    """The paths one snapshot re-reads, sorted by what git must do with them."""

    add: dict[str, Signature] = field(default_factory=dict)
    """Files and links to (re)store, with the signature they had when chosen."""
    remove: set[str] = field(default_factory=set)
    """Paths gone (git's --remove)."""
    drop: set[str] = field(default_factory=set)
    """Paths that exist but are not stored (too large, not a file, a nested repository)."""
    big: set[str] = field(default_factory=set)
    nested: set[str] = field(default_factory=set)
    skipped: set[str] | None = None
    """Roots of the ignored trees left out (None: not looked at in this pass, the parent's stand)."""
    modes: dict[str, int | None] = field(default_factory=dict)
    """New permission bits of files git would restore wrongly (None: back to git's own)."""


def _under(path: str, prefixes: Collection[str]) -> bool:
    return any(path == p or path.startswith(p + "/") for p in prefixes)


class Taker:
    """Takes snapshots into a store's index and objects. Only used with the store's lock held (one at a time)."""

    by_hand = True
    """Store an incremental snapshot without git where by_hand.py can (False: git takes every one)."""

    def __init__(self, git: Git, sizes: ObjectSizes, workspace: Path, *, max_file: int,
                 skip: frozenset[str] | None, state_prefix: str | None) -> None:
        self._git = git
        self._sizes = sizes
        self.workspace = workspace
        self.max_file = max_file
        """Files larger than this are listed, not stored (0: no limit)."""
        self.skip = skip
        """Store the files git ignores too, but for trees of these names (None: ignored files are not stored)."""
        self._state_prefix = state_prefix
        """The state folder, relative, when it lies inside the workspace (never stored)."""
        self._skip_sizes: dict[str, tuple[float, int]] = {}
        """Each skipped root's size and when it was measured."""
        self._last_tree = ("", "")
        """The last snapshot's commit and its tree: the next one's parent, most often."""
        self._trees = TreeCache()
        """The folders of the last snapshots, as stored: a snapshot by hand opens them without reading them."""
        self._behind_marker = git.git_dir / INDEX_BEHIND
        self._index_behind = False
        """Whether snapshots stored by hand (by_hand.py) left the store's index behind the newest snapshot
        (`catch_up_index` mends it). A file in the store says so, read again under the store's lock at each
        snapshot: another process (a supervisor started again, a restore) may take the next one."""

    def take(self, snapshot_id: int, iteration: int, kind: str, parent: SnapshotInfo | None,
             changed: Collection[str] | None, now: float) -> tuple[SnapshotInfo, int]:
        """Record the workspace as snapshot `snapshot_id` (`changed`: the paths to read again; None: a full pass).
        Returns its info, committed (no ref names it yet), and the bytes read (what the store may have grown by)."""
        full = changed is None or parent is None
        nested = set(parent.nested) if parent is not None else set()
        self._index_behind = self._behind_marker.exists()  # another process may have stored one by hand
        tree: str | None = None
        work: _Pass | None = None
        if not full and parent is not None:
            work = self._changed_pass(changed or (), nested)
            done = self._by_hand(work, parent)
            if done is not None:
                tree, moved = done
            else:
                self._catch_up(parent)  # git takes it from the parent's tree, which its index may lack
        if tree is None:
            if work is None:
                work = self._full_pass(nested)
            moved = self._update(work)
            tree = self._git.run("write-tree").decode().strip()
            if full:
                self._index_caught_up()
        info = self._commit(snapshot_id, iteration, kind, parent, work, moved, full, tree, now)
        return info, sum(sig[0] for sig in work.add.values()) + 1024

    def _by_hand(self, work: _Pass, parent: SnapshotInfo) -> tuple[str, tuple[str, ...]] | None:
        """The pass stored without git (by_hand.py): its tree and the files still moving; None where git must."""
        objects = self._git.git_dir / "objects"
        parent_tree = self._tree_of(parent) if self.by_hand else None
        if parent_tree is None:
            return None
        done = store_by_hand(self.workspace, objects, parent_tree, work.add, work.remove, work.drop, self._trees)
        if done is None:
            return None
        if not self._index_behind and done.tree != parent_tree:
            try:  # before the snapshot's ref: a supervisor started again must know the index is behind it
                state_files.atomic_write_bytes(self._behind_marker, b"")
            except OSError:
                return None  # git takes it, and says what is wrong with the store
            self._index_behind = True
        for path in done.refused:  # unreadable: not stored, as update-index refuses it
            work.add.pop(path, None)
            work.drop.add(path)
        return done.tree, done.moved

    def catch_up_index(self, latest: SnapshotInfo | None) -> None:
        """Bring git's index to the newest snapshot's tree where snapshots stored by hand left it behind: before
        git takes a snapshot from it, and before a garbage collection (whose prune keeps what the index names).
        `read-tree --reset` (not `-m`, which refuses where a file changed since) keeps the stat cache of the files
        whose content the tree has, so a full pass after it reads only those that changed; it leaves the files
        alone."""
        self._index_behind = self._behind_marker.exists()
        self._catch_up(latest)

    def _catch_up(self, latest: SnapshotInfo | None) -> None:
        """`catch_up_index`, the marker read already (at this snapshot's start)."""
        if not self._index_behind or latest is None:
            return
        tree = self._tree_of(latest) or f"{latest.commit}^{{tree}}"
        self._git.run("read-tree", "--reset", tree)
        self._index_caught_up()

    def _index_caught_up(self) -> None:
        """Git's index holds the newest snapshot (a full pass, or read-tree)."""
        if self._index_behind:
            try:
                self._behind_marker.unlink()
            except FileNotFoundError:
                pass
            self._index_behind = False

    def _tree_of(self, info: SnapshotInfo) -> str | None:
        """The tree of a snapshot's commit, where it is known or loose."""
        last_commit, last_tree = self._last_tree
        if info.commit == last_commit:
            return last_tree
        return tree_of_commit(self._git.git_dir / "objects", info.commit) if info.commit else None

    # -- what a pass reads ------------------------------------------------------------------------

    def _full_pass(self, nested: set[str]) -> _Pass:
        out = self._git.run("ls-files", "-z", "--modified", "--others", "--deleted", "--exclude-standard")
        paths = {p for p in out.decode("utf-8", "surrogateescape").split("\0") if p}
        work = _Pass()
        nested.clear()
        for path in paths:
            if path.endswith("/"):
                nested.add(path.rstrip("/"))  # a git repository of its own: git lists its folder, not its files
        venvs = {p.rpartition("/")[0] for p in paths if p.rpartition("/")[2] == VENV_MARKER and "/" in p}
        for path in paths:
            if path.endswith("/") or _under(path, venvs):
                continue
            self._classify(path, work)
        work.nested = nested
        if self.skip is not None:
            self._ignored_pass(work, venvs)
        return work

    def _never(self, path: str) -> bool:
        """Our state folder (when it is inside the workspace) and the bookkeeping folders are never stored."""
        if self._state_prefix is not None and _under(path, [self._state_prefix]):
            return True
        return any(part in BOOKKEEPING_NAMES for part in path.split("/"))

    def _ignored_pass(self, work: _Pass, venvs: set[str]) -> None:
        """The files git ignores (`.env`, local config, data), which `git clean -x` deletes and no `.git` can
        bring back: stored too, but for regenerable trees, whose roots are listed. `--directory` names an
        ignored folder once instead of every file in it; its files are walked here, skip names pruned."""
        out = self._git.run("ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory")
        skip = self.skip or frozenset()
        work.skipped = set()
        for entry in sorted({p for p in out.decode("utf-8", "surrogateescape").split("\0") if p}):
            path = entry.rstrip("/")
            if not path or self._never(path) or _under(path, venvs) or _under(path, work.nested):
                continue
            parts = path.split("/")
            hit = next((i for i, part in enumerate(parts) if part in skip), None)
            if hit is not None:
                work.skipped.add("/".join(parts[: hit + 1]))
                continue
            if not entry.endswith("/"):
                self._classify(path, work)
                continue
            if os.path.exists(os.path.join(self.workspace, path, VENV_MARKER)):
                work.skipped.add(path)  # a virtual environment, whatever its name
                continue
            self._walk_ignored(path, work, skip)

    def _walk_ignored(self, folder: str, work: _Pass, skip: frozenset[str]) -> None:
        """The files of an ignored folder, but for skipped trees, nested repositories and our own folders."""
        for dirpath, dirs, names in os.walk(os.path.join(self.workspace, folder)):
            rel = os.path.relpath(dirpath, self.workspace)
            kept = []
            for name in sorted(dirs):
                sub = f"{rel}/{name}"
                full = os.path.join(dirpath, name)
                if self._never(sub) or os.path.islink(full):
                    if os.path.islink(full):
                        self._classify(sub, work)  # a link is stored as a link, never followed
                    continue
                if name in skip or os.path.exists(os.path.join(full, VENV_MARKER)):
                    work.skipped.add(sub)
                elif os.path.exists(os.path.join(full, ".git")):
                    work.nested.add(sub)
                else:
                    kept.append(name)
            dirs[:] = kept
            for name in names:
                self._classify(f"{rel}/{name}", work)

    def _changed_pass(self, changed: Collection[str], nested: set[str]) -> _Pass:
        work = _Pass(nested=nested)
        for path in changed:
            if path and not _under(path, nested):
                self._classify(path, work)
        return work

    def _classify(self, path: str, work: _Pass) -> None:
        absolute = os.path.join(self.workspace, path)
        try:
            st = os.lstat(absolute)
        except FileNotFoundError:
            work.remove.add(path)
            work.modes[path] = None
            return
        except OSError:
            work.drop.add(path)
            return
        if stat.S_ISLNK(st.st_mode):
            work.add[path] = signature(st)
            work.modes[path] = None
        elif stat.S_ISREG(st.st_mode):
            if self.max_file > 0 and st.st_size > self.max_file:
                work.drop.add(path)
                work.big.add(path)
            elif not os.access(absolute, os.R_OK):
                work.drop.add(path)
            else:
                work.add[path] = signature(st)
                bits = stat.S_IMODE(st.st_mode)
                work.modes[path] = bits if bits != git_mode_bits(st) else None
        elif stat.S_ISDIR(st.st_mode):
            work.drop.add(path)  # a file became a folder: its files are paths of their own
        else:
            work.drop.add(path)  # FIFOs, sockets, devices: git stores none of them
        if path not in work.add:
            work.modes[path] = None

    # -- the index and the commit -----------------------------------------------------------------

    def _update(self, work: _Pass) -> tuple[str, ...]:
        """Bring the index up to date with `work`. Each file is read again while it changed under the
        read (up to RETRIES times); the files still changing come back, stored as last read."""
        if work.drop:
            self._update_index(["--force-remove"], sorted(work.drop), work)
        # --replace: a file where a folder was (or the reverse) replaces the entries in its way.
        self._update_index(["--add", "--remove", "--replace"], sorted(work.add) + sorted(work.remove), work)
        pending = dict(work.add)
        moving: dict[str, Signature] = {}
        for attempt in range(RETRIES + 1):
            moving = {}
            for path, before in pending.items():
                after = changed_since(self.workspace, path, before)
                if after is not None:
                    moving[path] = after
            if not moving or attempt == RETRIES:
                break
            self._update_index(["--add", "--remove", "--replace"], sorted(moving), work)
            pending = moving
        return tuple(sorted(moving))[:LIST_MAX]

    def _update_index(self, mode: list[str], names: list[str], work: _Pass) -> None:
        """`git update-index MODE -z --stdin`; a path git refuses (unreadable, an odd type) is left out."""
        names = list(names)
        for _ in range(16):
            if not names:
                return
            data = b"".join(os.fsencode(n) + b"\0" for n in names)
            # core.bigFileThreshold is the size above which git streams a blob into a pack of its own making.
            bulk = ("-c", "core.bigFileThreshold=1") if "--add" in mode and len(names) > BULK_FILES else ()
            try:
                self._git.run(*bulk, "update-index", *mode, "-z", "--stdin", input=data)
                return
            except SnapshotError as exc:
                refused = refused_path(exc.stderr)
                if exc.kind == "disk-full" or "insufficient permission" in exc.stderr or refused not in names:
                    raise
                names.remove(refused)
                work.add.pop(refused, None)
                work.drop.add(refused)
        raise SnapshotError("failed", "git update-index refused too many paths")

    def _commit(self, snapshot_id: int, iteration: int, kind: str, parent: SnapshotInfo | None, work: _Pass,
                moved: tuple[str, ...], full: bool, tree: str, now: float) -> SnapshotInfo:
        added = modified = deleted = size_delta = 0
        if parent is not None:
            added, modified, deleted, size_delta = self._diff(parent, tree, sizes=not full)
        listing: dict[str, int] | None = None
        if parent is None:  # everything is new: what was read is what is stored
            files, total = len(work.add), sum(sig[0] for sig in work.add.values())
            added = files
        elif full:
            listing = tree_listing(self._git, tree)
            files, total = len(listing), sum(listing.values())
        else:
            files = parent.files + added - deleted
            total = parent.bytes + size_delta
        big = (set(parent.not_stored) if parent is not None and not full else set())
        big = (big - set(work.add) - work.remove - (work.drop - work.big)) | work.big
        info = SnapshotInfo(
            id=snapshot_id, iteration=iteration, kind=kind,
            at=state_files.iso_utc(now), files=files, bytes=max(0, total),
            added=added, modified=modified, deleted=deleted,
            not_stored=tuple(sorted(big))[:LIST_MAX], not_stored_count=len(big), moved=moved,
            nested=tuple(sorted(work.nested))[:LIST_MAX], modes=_modes(parent, work, listing),
            skipped=(tuple(sorted(work.skipped))[:LIST_MAX] if work.skipped is not None
                     else parent.skipped if parent is not None else ()),
        )
        info = replace(info, skipped_bytes=self._measure_skipped(info.skipped, now))
        # No parent link: each snapshot stands alone, so dropping the oldest refs frees what only they held.
        message = info.message().encode("utf-8")
        try:
            commit = write_commit(self._git.git_dir / "objects", tree, message, now)
        except OSError as exc:
            raise SnapshotError(errno_kind(exc), f"cannot write the snapshot's commit: {exc.strerror or exc}") from None
        if commit is None:
            commit = self._git.run("commit-tree", tree, input=message, now=now).decode().strip()
        self._last_tree = (commit, tree)
        return replace(info, commit=commit)

    def _diff(self, parent: SnapshotInfo, tree: str, *, sizes: bool) -> tuple[int, int, int, int]:
        """(added, modified, deleted, the stored bytes' change) from the parent's tree to `tree`; the bytes
        only when `sizes` (a full pass counts them from the listing instead)."""
        added = modified = deleted = size_delta = 0
        shas: list[bytes] = []
        signs: list[int] = []
        for old_mode, new_mode, old_sha, new_sha, status in self._changes(parent, tree):
            added += status == b"A"
            deleted += status == b"D"
            modified += status in (b"M", b"T")
            if old_mode not in (b"000000", b"160000"):
                shas.append(old_sha)
                signs.append(-1)
            if new_mode not in (b"000000", b"160000"):
                shas.append(new_sha)
                signs.append(+1)
        if shas and sizes:
            size_delta = sum(sign * size for sign, size in zip(signs, self._sizes.of(shas)))
        return added, modified, deleted, size_delta

    def _changes(self, parent: SnapshotInfo, tree: str) -> list[tuple[bytes, bytes, bytes, bytes, bytes]]:
        """The files changed from the parent's tree to `tree`: (old mode, new mode, old id, new id, status), as
        diff-tree's raw format gives them. Read from the store's loose objects (tree_diff.py) where they are
        there, as they are between two snapshots of a running loop; else from `git diff-tree`."""
        parent_tree = self._tree_of(parent)
        changes = (diff_trees(self._git.git_dir / "objects", parent_tree, tree, self._trees)
                   if parent_tree is not None else None)
        if changes is not None:
            return [change[:5] for change in changes]
        raw = self._git.run("diff-tree", "-r", "-z", "--no-renames", "--raw", f"{parent.commit}^{{tree}}", tree)
        fields = raw.split(b"\0")
        found = []
        for i in range(0, len(fields) - 1, 2):
            meta = fields[i].split()
            if len(meta) >= 5:
                found.append((meta[0].lstrip(b":"), meta[1], meta[2], meta[3], meta[4][:1]))
        return found

    def _measure_skipped(self, roots: Sequence[str], now: float) -> dict[str, int]:
        """The skipped trees' sizes, each walked again only when its last measure is SKIP_MEASURE_EVERY_S old."""
        sizes = {}
        for root in roots:
            measured = self._skip_sizes.get(root)
            if measured is None or now - measured[0] >= SKIP_MEASURE_EVERY_S:
                measured = self._skip_sizes[root] = (now, state_files.folder_bytes(os.path.join(self.workspace, root)))
            sizes[root] = measured[1]
        for gone in set(self._skip_sizes) - set(roots):
            del self._skip_sizes[gone]
        return sizes


def _modes(parent: SnapshotInfo | None, work: _Pass, listing: dict[str, int] | None) -> dict[str, int]:
    """The permission bits git would not restore, carried on from the parent with this pass's changes. Pure."""
    modes = dict(parent.modes) if parent is not None else {}
    for path, bits in work.modes.items():
        if bits is None:
            modes.pop(path, None)
        else:
            modes[path] = bits
    if listing is not None:
        modes = {p: m for p, m in modes.items() if p in listing}
    if len(modes) > LIST_MAX * 10:
        modes = dict(sorted(modes.items())[: LIST_MAX * 10])
    return modes


__all__ = ["BULK_FILES", "RETRIES", "Taker"]
