"""The snapshot store: the workspace's files, one snapshot per iteration, in a private git repository.

Agents run with their permissions skipped, and `git reset --hard`, `git clean -fd` or `rm -rf` can destroy
days of uncommitted work that no `.git` can bring back. The supervisor sees every change as it happens,
so it keeps the files: after every iteration it records the workspace as the watcher sees it (the same
ignore rules) in `STATE_DIR/snapshots/`, a git repository of its own. Its `GIT_DIR`, index and refs are
ours alone; its work tree is the workspace. The user's `.git` (refs, index, stash, reflog, config, hooks)
is never read or written, and a folder that is not a git repository works the same.

Why git: its object store shares unchanged content between snapshots, and its index remembers each
file's stat data, so a snapshot costs in proportion to what changed. The watcher names the changed
paths; only they are re-read, and only the changed directories are rebuilt: by hand for a few files
(`by_hand.py`, as git stores them), else by `update-index` and `write-tree` (`take.py`). A full pass runs for the first snapshot, after the watcher lost events, and now and then to catch
what a watcher cannot see.

Byte-exact: no user or system git config is read, `info/attributes` unsets every conversion (eol,
filters, working-tree encodings) whatever the workspace's `.gitattributes` say, and permission bits git
does not keep (anything but 644 and 755) are recorded beside each snapshot and put back on restore.

This module owns the store's files: its refs (one per snapshot), `trips.jsonl` (which snapshot came before a
breaker open), its config, its lock, and its size within the budget.

Usage:

    store = SnapshotStore(workspace, state_dir, max_file=50_000_000)
    info = store.take(iteration=3, kind="iteration", changed=None, now=time.time())  # None: a full pass
    store.keep_within(2_000_000_000)                                                  # the budget
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ralph_supervisor import store as state_files
from ralph_supervisor.evidence.ignore import read_text, relative_inside
from ralph_supervisor.rotating import read_json_lines
from ralph_supervisor.snapshots.git import ATTRIBUTES, Git, SnapshotError, errno_kind, find_git, tree_listing
from ralph_supervisor.snapshots.info import SnapshotInfo, parse_ref_line, summary
from ralph_supervisor.snapshots.object_sizes import ObjectSizes
from ralph_supervisor.snapshots.take import Taker

STORE_DIR = "snapshots"
TRIPS_FILE = "trips.jsonl"
LOCK_FILE = "store.lock"
REF_PREFIX = "refs/snapshots/"
RECOUNT_EVERY = 50
"""The store's bytes on disk are counted at least every that many snapshots (between counts, an upper
bound of what was added stands in for them, and a store near its budget is counted at every snapshot). A
count walks every file of the store: at 2,000 loose objects about 15 ms, so every 20 snapshots it was a
tenth of what a snapshot cost a loop of short calls."""
MAINTAIN_LOOSE = 2000
"""Loose objects before they are packed (many small files cost the disk more than one pack)."""
BUDGET_LOW_WATER = 0.9
"""Dropping for the budget goes on until the store is below this share of it (so not every snapshot
costs a garbage collection)."""
KEEP_NEWEST = 3
"""The budget never drops the newest snapshots: the one before a destruction is among them."""

CONFIG = """\
[core]
\trepositoryformatversion = 0
\tbare = false
\tfilemode = true
\tsymlinks = true
\tignorecase = false
\tprecomposeunicode = false
\tautocrlf = false
\tsafecrlf = false
\tlogallrefupdates = false
\texcludesfile = /dev/null
\tattributesfile = /dev/null
\thooksPath = /dev/null
\tfsmonitor = false
\tuntrackedCache = false
\tsplitIndex = true
[splitIndex]
\tsharedIndexExpire = now
[gc]
\tauto = 0
\tautoDetach = false
[maintenance]
\tauto = false
[commit]
\tgpgSign = false
"""
"""The whole config: written at creation, so nothing of the user's or the system's applies (their
`core.autocrlf`, filters or hooks would change what is stored, or run code). A split index: each snapshot
rewrites only the entries that changed, not one entry per file (twice as fast at 100,000 files)."""


def read_summary(state_dir: Path) -> dict[str, Any] | None:
    """The `snapshots` part of `status --json` read from the store when no supervisor runs; None when there is
    no store."""
    try:
        store = SnapshotStore(state_dir.parent, state_dir)
        if not store.exists():
            return None
        latest = store.latest()
        return summary(latest, state="idle", problem=None, count=store.count(), store_bytes=store.size_on_disk())
    except SnapshotError as exc:
        return summary(None, state="off", problem=str(exc), count=0, store_bytes=0)


@dataclass(frozen=True)
class _PackedRefs:
    """The snapshot refs in `packed-refs` as last read, kept compact (a store may hold thousands): their
    names joined by newlines and their commits joined in the same order, 40 characters each."""

    key: tuple[int, int, int] | None
    names: str
    commits: str

    @classmethod
    def read(cls, path: Path, key: tuple[int, int, int] | None) -> _PackedRefs:
        lines = (read_text(path) or "").splitlines() if key is not None else []
        pairs = [(ref[len(REF_PREFIX):], sha) for sha, _, ref in (line.partition(" ") for line in lines)
                 if ref.startswith(REF_PREFIX) and len(sha) == 40]
        return cls(key, "\n".join(name for name, _ in pairs), "".join(sha for _, sha in pairs))

    def as_dict(self) -> dict[str, str]:
        if not self.names:
            return {}
        commits = self.commits
        return {name: commits[i * 40:i * 40 + 40] for i, name in enumerate(self.names.split("\n"))}


class SnapshotStore:
    """The private git repository in `STATE_DIR/snapshots/` (created on first use)."""

    def __init__(self, workspace: Path, state_dir: Path, *, max_file: int = 0, git: str | None = None,
                 skip: Collection[str] | None = None, keep_git_running: bool = False) -> None:
        self.workspace = Path(workspace).resolve()
        self.state_dir = Path(os.path.abspath(state_dir))
        self.path = self.state_dir / STORE_DIR
        found = git or find_git()
        if found is None:
            raise SnapshotError("no-git", "git is not installed (snapshots need it)")
        self.git = Git(found, self.path, self.workspace)
        """git on the store (its work tree the workspace)."""
        self.sizes = ObjectSizes(self.git, keep_running=keep_git_running)
        """Blob sizes for a snapshot's diff, from a git kept running where `keep_git_running` (the supervisor's
        store, until `close`)."""
        self._taker = Taker(self.git, self.sizes, self.workspace, max_file=max_file,
                            skip=None if skip is None else frozenset(skip),
                            state_prefix=relative_inside(self.workspace, self.state_dir) or None)
        self.moved_aside: Path | None = None
        """Where a corrupt store was put, when `open` found one."""
        self._checked = False
        """The store was found healthy once: later snapshots trust it (a failure says otherwise)."""
        self._latest_seen: SnapshotInfo | None = None
        self._packed = _PackedRefs(None, "", "")
        self._loose: dict[str, tuple[int, str]] = {}
        """The ref files as last read: packed-refs by (inode, mtime, size), each loose ref by its inode (loose
        refs are few: `keep_within` packs them with the objects)."""
        self._size: int | None = None
        """Bytes on disk at the last count, and what was stored since (an upper bound), and how often."""
        self._stored_since = 0
        self._takes_since = 0
        self.kept_at_take = 0
        """How many snapshots the store kept when the last `take` ended (`count()` without reading the refs again)."""

    # -- opening --------------------------------------------------------------------------------

    def exists(self) -> bool:
        return (self.path / "HEAD").is_file()

    def open(self, *, create: bool = True) -> None:
        """Create the store, or check the one there; a broken one is moved aside and a new one started."""
        with self.locked():
            self._open(create)

    def _open(self, create: bool) -> None:
        if self.exists() and self._checked:
            return
        if self.exists():
            self._clean_leftovers()  # a git killed in the middle (a crash, a timeout) left them
            if self._healthy():
                return
        self._checked = False
        if os.path.lexists(self.path):
            if not create:
                raise SnapshotError("corrupt", f"{self.path} is not a snapshot store")
            self.moved_aside = state_files.move_aside(self.path)
            if self.moved_aside is None:
                raise SnapshotError("no-access", f"{self.path} is broken and cannot be moved aside")
        if not create:
            raise SnapshotError("missing", "no snapshots have been taken here")
        self._create()

    def _healthy(self) -> bool:
        try:
            self.git.run("rev-parse", "--git-dir")
            latest = self._latest()
            if latest is not None:
                self.git.run("cat-file", "-e", f"{latest.commit}^{{tree}}")
        except SnapshotError as exc:
            if exc.kind in ("disk-full", "no-access", "no-git"):
                raise
            return False
        self._checked = True
        return True

    def _clean_leftovers(self) -> None:
        """Remove what an interrupted git leaves: half-written objects and packs, a stale index lock.
        Only called with the store's lock held, so no git of ours is running."""
        objects = self.path / "objects"
        leftovers = [*objects.glob("??/tmp_obj_*"), *objects.glob("pack/tmp_*"), self.path / "index.lock"]
        for path in leftovers:
            with contextlib.suppress(OSError):
                path.unlink()

    def _create(self) -> None:
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".snapshots-new-", dir=self.state_dir))
        except OSError as exc:
            raise SnapshotError(errno_kind(exc), f"cannot create {self.path}: {exc.strerror or exc}") from None
        try:
            Git(self.git.git, tmp, self.workspace).run("init", "-q", "--bare", "--template=", str(tmp))
            (tmp / "config").write_text(CONFIG, encoding="utf-8")
            (tmp / "info").mkdir(exist_ok=True)
            (tmp / "info" / "attributes").write_text(ATTRIBUTES, encoding="utf-8")
            (tmp / "info" / "exclude").write_text("", encoding="utf-8")
            os.replace(tmp, self.path)  # whole or not at all
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise SnapshotError(errno_kind(exc), f"cannot create {self.path}: {exc.strerror or exc}") from None
        except SnapshotError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """One writer at a time: the supervisor's snapshot thread and a `restore` command share the store."""
        lock = self.state_dir / f"snapshots.{LOCK_FILE}"
        try:
            fd = state_files.open_making_folder(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise SnapshotError(errno_kind(exc), f"cannot lock the snapshot store: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # -- reading --------------------------------------------------------------------------------

    def list(self) -> list[SnapshotInfo]:
        """Every snapshot, oldest first, with the trips they preceded."""
        if not self.exists():
            return []
        out = self.git.run("for-each-ref", "--sort=refname",
                           "--format=%(objectname)%09%(contents:subject)", REF_PREFIX)
        found = [info for line in out.decode("utf-8", "replace").splitlines() if (info := parse_ref_line(line))]
        trips = self._trips()
        return [replace(info, before_trip=trips[info.id]) if info.id in trips else info for info in found]

    def latest(self) -> SnapshotInfo | None:
        if not self.exists():
            return None
        return self._latest()

    def _latest(self, refs: dict[str, str] | None = None) -> SnapshotInfo | None:
        """The newest snapshot, read from the ref files (or `refs`, just read); its commit is read only when
        it is not the one this store wrote or read last (another process, a `restore`, may have added one)."""
        refs = self._refs() if refs is None else refs
        if not refs:
            return None
        commit = refs[max(refs)]
        cached = self._latest_seen
        if cached is not None and cached.commit == commit:
            return cached
        raw = self.git.run("cat-file", "commit", commit).decode("utf-8", "replace")
        info = parse_ref_line(f"{commit}\t{raw.partition(chr(10) + chr(10))[2].strip()}")
        self._latest_seen = info
        return info

    def _refs(self) -> dict[str, str]:
        """The snapshot refs (name -> commit), loose and packed, read from the files: no git process.

        A ref file is written whole under a new name and renamed into place (by us and by git alike), so a
        file with the inode it had at the last read holds what it held then: only new or replaced refs are
        opened (a store of hundreds of snapshots is otherwise hundreds of file reads at every snapshot)."""
        packed = self.path / "packed-refs"
        try:
            st = os.stat(packed)
            key: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            key = None
        if key != self._packed.key:
            self._packed = _PackedRefs.read(packed, key)
        refs = self._packed.as_dict()
        loose: dict[str, tuple[int, str]] = {}
        known = self._loose
        try:
            with os.scandir(self.path / REF_PREFIX) as entries:
                for entry in entries:
                    if not entry.name.isdigit():
                        continue
                    inode = entry.inode()
                    seen = known.get(entry.name)
                    if seen is not None and seen[0] == inode:
                        sha = seen[1]
                    else:
                        sha = (read_text(Path(entry.path)) or "").strip()
                    if len(sha) == 40:
                        loose[entry.name] = (inode, sha)
                        refs[entry.name] = sha
        except OSError:
            pass
        self._loose = loose
        return refs

    def find(self, iteration: int) -> SnapshotInfo | None:
        """The newest snapshot of that iteration."""
        matches = [info for info in self.list() if info.iteration == iteration]
        return matches[-1] if matches else None

    def count(self) -> int:
        """How many snapshots the store keeps (read from the ref files: no git process)."""
        return len(self._refs())

    def size_on_disk(self) -> int:
        return _tree_size(self.path)[0]

    def holds(self, info: SnapshotInfo) -> bool:
        """Whether the store still keeps that snapshot (its ref is there: the budget may have dropped it)."""
        return self._refs().get(f"{info.id:08d}") == info.commit

    def files_in(self, info: SnapshotInfo) -> list[str]:
        return list(tree_listing(self.git, info.commit))

    def changed_between(self, old: SnapshotInfo, new: SnapshotInfo) -> list[str]:
        """The paths whose content differs between two snapshots (added, modified or deleted)."""
        out = self.git.run("diff-tree", "-r", "-z", "--no-renames", "--name-only", old.commit, new.commit)
        return [os.fsdecode(p) for p in out.split(b"\0") if p]

    # -- taking ---------------------------------------------------------------------------------

    def take(self, iteration: int, kind: str, changed: Collection[str] | None, *, now: float,
             exclude: Sequence[str] | None = None, full_every: int = 0) -> SnapshotInfo:
        """Record the workspace now. `changed`: the paths the watcher saw change since the last snapshot
        (None: look at everything). `exclude`: gitignore lines for `info/exclude` (None: keep them;
        `IgnoreRules.as_gitignore` writes the watcher's). `full_every`: every that many snapshots, look at
        everything anyway (0: never)."""
        with self.locked():
            try:
                return self._take(iteration, kind, changed, now, exclude, full_every)
            except SnapshotError:
                self._clean_leftovers()  # a failed git (a full disk) leaves half-written files behind
                raise

    def _take(self, iteration: int, kind: str, changed: Collection[str] | None, now: float,
              exclude: Sequence[str] | None, full_every: int) -> SnapshotInfo:
        self._open(create=True)
        if exclude is not None:
            self._write_exclude(exclude)
        refs = self._refs()  # under the store's lock: no other writer adds one meanwhile
        parent = self._latest(refs)
        index = self.path / "index"
        full = (changed is None or parent is None or not index.exists()
                or (full_every > 0 and len(refs) % full_every == 0))
        if parent is not None and not index.exists():
            self.git.run("read-tree", parent.commit)  # the stat cache is lost, the content is not
        next_id = max((int(name) for name in refs), default=0) + 1  # even past an unreadable newest
        info, stored = self._taker.take(next_id, iteration, kind, parent, None if full else changed, now)
        self._write_ref(info.id, info.commit)
        self._latest_seen = info
        self.kept_at_take = len(refs) + 1
        self._stored_since += stored
        self._takes_since += 1
        return info

    def _write_exclude(self, lines: Sequence[str]) -> None:
        path = self.path / "info" / "exclude"
        text = "".join(f"{line}\n" for line in lines)
        try:
            if path.read_text(encoding="utf-8") == text:
                return
        except OSError:
            pass
        try:
            path.parent.mkdir(exist_ok=True)
            state_files.atomic_write_text(path, text)
        except OSError as exc:
            raise SnapshotError(errno_kind(exc), f"cannot write {path}: {exc.strerror or exc}") from None

    def _write_ref(self, snapshot_id: int, commit: str) -> None:
        """A loose ref is a file holding the commit (git's own format); written whole or not at all. Without
        fsync (one a call, like the breaker's counters): after a crash of the machine the store is checked
        before its next use (`_healthy`) and set aside when its latest snapshot is unreadable."""
        path = self.path / f"{REF_PREFIX}{snapshot_id:08d}"
        try:
            state_files.atomic_write_text(path, commit + "\n", durable=False, make_folder=True)
        except OSError as exc:
            raise SnapshotError(errno_kind(exc), f"cannot write {path}: {exc.strerror or exc}") from None

    # -- the budget and the marks ---------------------------------------------------------------

    def keep_within(self, budget: int) -> tuple[int, int]:
        """Drop the oldest snapshots until the store fits `budget` bytes (the newest KEEP_NEWEST always stay);
        pack loose objects now and then. Returns (snapshots dropped, bytes on disk after)."""
        estimate = None if self._size is None else self._size + self._stored_since
        if (estimate is not None and self._takes_since < RECOUNT_EVERY
                and (budget <= 0 or estimate <= budget * BUDGET_LOW_WATER)):
            return 0, estimate  # far from the budget: counting the files on disk can wait
        with self.locked():
            size, loose = _tree_size(self.path)
            if loose > MAINTAIN_LOOSE and (budget <= 0 or size <= budget):
                self.git.run("repack", "-d", "-q")
                self.git.run("prune-packed", "-q")
                self.git.run("pack-refs", "--all", "--prune")
                self.sizes.close()  # a git started after the repack reads the new packs from its start
                size, loose = _tree_size(self.path)
            dropped = 0
            goal = int(budget * BUDGET_LOW_WATER)
            if budget > 0 and size > budget:
                self._taker.catch_up_index(self._latest(self._refs()))  # the gc keeps what the index names
                while size > goal:
                    refs = self.git.run("for-each-ref", "--sort=refname", "--format=%(refname)", REF_PREFIX).split()
                    if len(refs) <= KEEP_NEWEST:
                        break  # the newest ones alone are over the budget: they stay
                    batch = refs[: max(1, min(len(refs) - KEEP_NEWEST, len(refs) // 10))]
                    self.git.run("update-ref", "--stdin", input=b"".join(b"delete " + r + b"\n" for r in batch))
                    self.git.run("gc", "--prune=now", "-q")
                    self.sizes.close()
                    dropped += len(batch)
                    size, loose = _tree_size(self.path)
            self._size, self._stored_since, self._takes_since = size, 0, 0
            return dropped, size

    def mark_trip(self, snapshot_id: int, trigger: str, now: float) -> None:
        """Note that a snapshot was the last one before a breaker open (for `snapshots`)."""
        line = json.dumps({"snapshot": snapshot_id, "trigger": trigger, "at": state_files.iso_utc(now)}) + "\n"
        try:
            with open(self.path / TRIPS_FILE, "a", encoding="utf-8") as fh:
                fh.write(line)
        except OSError as exc:
            raise SnapshotError(errno_kind(exc), f"cannot write {TRIPS_FILE}: {exc.strerror or exc}") from None

    def close(self) -> None:
        """End the git kept running for the store (`keep_git_running`), if any."""
        self.sizes.close()

    def start_over(self) -> Path | None:
        """The store is broken: move it aside and start an empty one. Returns where the old one went."""
        self.sizes.close()  # its git reads the store that is moved aside
        with self.locked():
            moved = state_files.move_aside(self.path) if os.path.lexists(self.path) else None
            self._checked = False
            self._create()
            return moved

    def _trips(self) -> dict[int, str]:
        entries, _ = read_json_lines(self.path / TRIPS_FILE)  # a torn last line after a crash: the others count
        trips: dict[int, str] = {}
        for entry in entries:
            try:
                trips[int(entry["snapshot"])] = str(entry["trigger"])
            except (ValueError, KeyError, TypeError):
                continue
        return trips


def _tree_size(root: Path) -> tuple[int, int]:
    """Bytes on disk under `root` (apparent sizes), and how many loose objects it holds."""
    total = loose = 0
    for dirpath, _dirs, files in os.walk(root):
        is_loose = os.path.basename(dirpath) not in ("pack", "info") and os.path.basename(os.path.dirname(dirpath)) == "objects"
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
            loose += is_loose
    return total, loose


__all__ = ["STORE_DIR", "TRIPS_FILE", "SnapshotStore", "read_summary"]
