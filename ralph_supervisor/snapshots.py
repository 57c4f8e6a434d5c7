"""The snapshot store: the workspace's files, one snapshot per iteration, in a private git repository.

Agents run with their permissions skipped, and `git reset --hard`, `git clean -fd` or `rm -rf` can destroy
days of uncommitted work that no `.git` can bring back. The supervisor sees every change as it happens,
so it keeps the files: after every iteration it records the workspace as the watcher sees it (the same
ignore rules) in `STATE_DIR/snapshots/`, a git repository of its own. Its `GIT_DIR`, index and refs are
ours alone; its work tree is the workspace. The user's `.git` (refs, index, stash, reflog, config, hooks)
is never read or written, and a folder that is not a git repository works the same.

Why git: its object store shares unchanged content between snapshots, and its index remembers each
file's stat data, so a snapshot costs in proportion to what changed. The watcher names the changed
paths; only they are re-read (`update-index`), and `write-tree` rebuilds only the changed directories.
A full pass (`ls-files --modified --others --deleted`, which still trusts the stat cache) runs for the
first snapshot, after the watcher lost events, and now and then to catch what a watcher cannot see.

Byte-exact: no user or system git config is read, `info/attributes` unsets every conversion (eol,
filters, working-tree encodings) whatever the workspace's `.gitattributes` say, and permission bits git
does not keep (anything but 644 and 755) are recorded beside each snapshot and put back on restore.

Usage:

    store = SnapshotStore(workspace, state_dir, max_file=50_000_000)
    info = store.take(iteration=3, kind="iteration", changed=None, now=time.time())  # None: a full pass
    store.restore(store.find(3), workspace, ["src"])
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ralph_supervisor import store as state_files
from ralph_supervisor.format import human_size  # noqa: F401 - `snapshots` and `status` import it here
from ralph_supervisor.evidence.ignore import read_text
from ralph_supervisor.process.helpers import HELPERS
from ralph_supervisor.rotating import read_json_lines
from ralph_supervisor.safe_git import command as safe_command

STORE_DIR = "snapshots"
TRIPS_FILE = "trips.jsonl"
LOCK_FILE = "store.lock"
REF_PREFIX = "refs/snapshots/"
"""start: when the supervisor starts, before its first iteration; iteration: at an iteration's end;
exit: when the supervisor exits in the middle of one; restore: taken by `restore` before it writes."""

LIST_MAX = 1000
"""Paths kept in a snapshot's lists (not stored, moved, modes); the counts stay exact."""
RETRIES = 2
"""Passes over files that changed while they were read, before they are listed as moved."""
GIT_TIMEOUT_S = 600.0
BULK_FILES = 100
"""A pass that stores more files than this writes them into one pack (git's bulk check-in), not one file each:
the first snapshot of 20,000 files then makes 2 files on disk instead of 20,000, and no repack follows."""
RECOUNT_EVERY = 20
"""The store's bytes on disk are counted at least every that many snapshots (between counts, an upper
bound of what was added stands in for them)."""
MAINTAIN_LOOSE = 2000
"""Loose objects before they are packed (many small files cost the disk more than one pack)."""
BUDGET_LOW_WATER = 0.9
"""Dropping for the budget goes on until the store is below this share of it (so not every snapshot
costs a garbage collection)."""
KEEP_NEWEST = 3
SKIP_MEASURE_EVERY_S = 600.0
"""A skipped tree's size is measured at most this often (walking a 2 GB node_modules takes a while)."""
"""The budget never drops the newest snapshots: the one before a destruction is among them."""
NEVER_STORED = frozenset({".git", ".ralph-supervise", ".ralph"})
"""Folder names never stored, ignored or not: git's internals, our old state folder, the loop's bookkeeping."""

ATTRIBUTES = "* -text -eol -crlf -filter -ident -working-tree-encoding -diff -merge\n"
"""`info/attributes` wins over every `.gitattributes`: no conversion, so what is stored is the bytes."""
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


@dataclass(frozen=True)
class SnapshotInfo:
    """One snapshot, as `snapshots --json` shows it (the commit message holds all of it but `before_trip`)."""

    id: int
    iteration: int
    kind: str
    at: str
    """ISO-8601 UTC."""
    files: int
    bytes: int
    """Total size of the stored files."""
    added: int = 0
    modified: int = 0
    deleted: int = 0
    commit: str = ""
    not_stored: tuple[str, ...] = ()
    """Files over --snapshot-max-file: listed, not stored (sorted, at most LIST_MAX)."""
    not_stored_count: int = 0
    moved: tuple[str, ...] = ()
    """Files that kept changing while the snapshot read them: stored as last read."""
    nested: tuple[str, ...] = ()
    """Folders that are git repositories of their own (not stored: git keeps their contents apart)."""
    skipped: tuple[str, ...] = ()
    """Ignored regenerable trees (`--snapshot-skip`), by their root: listed, not stored."""
    skipped_bytes: Mapping[str, int] = field(default_factory=dict)
    """Their sizes, as last measured (at most every SKIP_MEASURE_EVERY_S)."""
    modes: Mapping[str, int] = field(default_factory=dict)
    """Permission bits of the files whose mode git would not restore (not 0644 or 0755)."""
    before_trip: str | None = None
    """The trigger of the breaker open this snapshot was the last one before, if any."""

    def to_dict(self) -> dict[str, Any]:
        """What `snapshots --json` shows (the modes table stays inside)."""
        return {
            "id": self.id, "iteration": self.iteration, "kind": self.kind, "at": self.at,
            "files": self.files, "bytes": self.bytes,
            "added": self.added, "modified": self.modified, "deleted": self.deleted,
            "before_trip": self.before_trip,
            "not_stored": list(self.not_stored), "not_stored_count": self.not_stored_count,
            "moved": list(self.moved), "nested": list(self.nested), "skipped": list(self.skipped),
            "skipped_bytes": dict(self.skipped_bytes), "commit": self.commit,
        }

    def message(self) -> str:
        """The commit message: one line of JSON (so `%(contents:subject)` gives it back whole)."""
        data = {k: v for k, v in self.to_dict().items() if k not in ("commit", "before_trip")}
        data["modes"] = {path: f"{mode:o}" for path, mode in sorted(self.modes.items())}
        return json.dumps(data, separators=(",", ":"))  # ASCII: paths that are not UTF-8 survive

    @classmethod
    def from_message(cls, text: str, commit: str) -> SnapshotInfo:
        """Read a commit message back; ValueError when it is not one of ours."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a snapshot message")
        modes_raw = data.get("modes") or {}
        return cls(
            id=_int(data, "id"), iteration=_int(data, "iteration"), kind=str(data.get("kind", "iteration")),
            at=str(data.get("at", "")), files=_int(data, "files"), bytes=_int(data, "bytes"),
            added=_int(data, "added"), modified=_int(data, "modified"), deleted=_int(data, "deleted"),
            commit=commit, not_stored=_strings(data, "not_stored"), not_stored_count=_int(data, "not_stored_count"),
            moved=_strings(data, "moved"), nested=_strings(data, "nested"), skipped=_strings(data, "skipped"),
            skipped_bytes=_sizes(data, "skipped_bytes"),
            modes={str(p): int(str(m), 8) for p, m in modes_raw.items()} if isinstance(modes_raw, dict) else {},
        )


def _int(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"snapshot field {key!r} must be a non-negative integer")
    return value


def _sizes(data: Mapping[str, Any], key: str) -> dict[str, int]:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise ValueError(f"snapshot field {key!r} must be an object")
    return {str(k): v for k, v in value.items() if isinstance(v, int) and not isinstance(v, bool) and v >= 0}


def _strings(data: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = data.get(key) or []
    if not isinstance(value, list):
        raise ValueError(f"snapshot field {key!r} must be a list")
    return tuple(str(item) for item in value)


def restore_command(iteration: int, workspace: Path | str, to: str | None = None) -> str:
    """The exact command that brings a snapshot back (quoted for a POSIX shell)."""
    import shlex

    parts = ["ralph-supervise", "restore", str(iteration)]
    if to:
        parts += ["--to", to]
    parts += ["-w", str(workspace)]
    return " ".join(shlex.quote(p) for p in parts)


def summary(latest: SnapshotInfo | None, *, state: str, problem: str | None, count: int, store_bytes: int,
            budget: int | None = None) -> dict[str, Any]:
    """The `snapshots` part of `status --json`. Pure."""
    return {
        "state": state, "problem": problem, "count": count, "bytes": store_bytes, "budget": budget,
        "latest": None if latest is None else {
            "iteration": latest.iteration, "at": latest.at, "files": latest.files, "kind": latest.kind},
    }


def read_summary(state_dir: Path) -> dict[str, Any] | None:
    """The same, read from the store when no supervisor runs; None when there is no store."""
    try:
        store = SnapshotStore(state_dir.parent, state_dir)
        if not store.exists():
            return None
        latest = store.latest()
        return summary(latest, state="idle", problem=None, count=store.count(), store_bytes=store.size_on_disk())
    except SnapshotError as exc:
        return summary(None, state="off", problem=str(exc), count=0, store_bytes=0)


# ------------------------------------------------------------------------------ running git

def find_git() -> str | None:
    return shutil.which("git")


def _git_env(git_dir: Path, work_tree: Path, index: Path | None, now: float) -> dict[str, str]:
    """The user's environment without any GIT_* (a hook's GIT_DIR or GIT_INDEX_FILE must never leak
    in), and no user or system config: the store's own config is the only one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    stamp = f"@{int(now)} +0000"
    env.update(
        GIT_DIR=str(git_dir), GIT_WORK_TREE=str(work_tree), GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull,
        HOME=str(git_dir), XDG_CONFIG_HOME=str(git_dir), LC_ALL="C", LANGUAGE="C", GIT_TERMINAL_PROMPT="0",
        GIT_LITERAL_PATHSPECS="1", GIT_AUTHOR_NAME="ralph-supervise", GIT_AUTHOR_EMAIL="ralph-supervise@localhost",
        GIT_COMMITTER_NAME="ralph-supervise", GIT_COMMITTER_EMAIL="ralph-supervise@localhost",
        GIT_AUTHOR_DATE=stamp, GIT_COMMITTER_DATE=stamp,
    )
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


class _Git:
    """One way to run git on the store: its environment, its pid kept out of the tree, its failures classified."""

    def __init__(self, git: str, git_dir: Path, work_tree: Path, filters: Collection[str] = ()) -> None:
        self.git = git
        self.git_dir = git_dir
        self.work_tree = work_tree
        self.filters = tuple(filters)
        """Filter drivers emptied in every command (safe_git): those of a config we do not write."""

    def run(self, *args: str, input: bytes | None = None, index: Path | None = None, now: float | None = None,
            ok: Sequence[int] = (0,)) -> bytes:
        env = _git_env(self.git_dir, self.work_tree, index, time.time() if now is None else now)
        command = next((a for a in args if not a.startswith("-") and "=" not in a), args[0])
        if command == "init":  # git refuses GIT_WORK_TREE without a repository to go with it
            del env["GIT_DIR"], env["GIT_WORK_TREE"]
        try:
            proc = HELPERS.popen(safe_command(self.git, args, filters=self.filters), cwd=self.work_tree, env=env, close_fds=True,
                                 stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as exc:
            raise SnapshotError(_errno_kind(exc), f"cannot run git: {exc.strerror or exc}") from None
        try:
            try:
                out, err = proc.communicate(input, timeout=GIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise SnapshotError("failed", f"git {command} did not finish in {GIT_TIMEOUT_S:.0f} s") from None
        finally:
            HELPERS.done(proc.pid)
        if proc.returncode not in ok:
            text = err.decode("utf-8", "replace").strip()
            last = text.splitlines()[-1] if text else f"exit code {proc.returncode}"
            raise SnapshotError(classify_failure(text), f"git {command} failed: {last}"[:400], text)
        return out


def _errno_kind(exc: OSError) -> str:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return "disk-full"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "no-access"
    return "failed"


# ------------------------------------------------------------------------------ what a pass reads


@dataclass
class _Pass:
    """The paths one snapshot re-reads, sorted by what git must do with them."""

    add: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)
    """Files and links to (re)store, with the (size, mtime, ctime, inode) they had when chosen."""
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


def _signature(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _git_mode_bits(st: os.stat_result) -> int:
    return 0o755 if st.st_mode & 0o100 else 0o644


def _under(path: str, prefixes: Collection[str]) -> bool:
    return any(path == p or path.startswith(p + "/") for p in prefixes)


# ------------------------------------------------------------------------------ the store


class SnapshotStore:
    """The private git repository in `STATE_DIR/snapshots/` (created on first use)."""

    def __init__(self, workspace: Path, state_dir: Path, *, max_file: int = 0, git: str | None = None,
                 skip: Collection[str] | None = None) -> None:
        self.workspace = Path(workspace).resolve()
        self.state_dir = Path(os.path.abspath(state_dir))
        self.path = self.state_dir / STORE_DIR
        self.max_file = max_file
        """Files larger than this are listed, not stored (0: no limit)."""
        self.skip = None if skip is None else frozenset(skip)
        """Store the files git ignores too, but for trees of these names (None: ignored files are not stored)."""
        self._skip_sizes: dict[str, tuple[float, int]] = {}
        """Each skipped root's size and when it was measured."""
        inside = os.path.relpath(self.state_dir, self.workspace)
        self._state_prefix = None if inside == ".." or inside.startswith("../") else inside
        found = git or find_git()
        if found is None:
            raise SnapshotError("no-git", "git is not installed (snapshots need it)")
        self._git = _Git(found, self.path, self.workspace)
        self.moved_aside: Path | None = None
        """Where a corrupt store was put, when `open` found one."""
        self._checked = False
        """The store was found healthy once: later snapshots trust it (a failure says otherwise)."""
        self._latest_seen: SnapshotInfo | None = None
        self._size: int | None = None
        """Bytes on disk at the last count, and what was stored since (an upper bound), and how often."""
        self._stored_since = 0
        self._takes_since = 0

    # -- opening --------------------------------------------------------------------------------

    def exists(self) -> bool:
        return (self.path / "HEAD").is_file()

    def open(self, *, create: bool = True) -> None:
        """Create the store, or check the one there; a broken one is moved aside and a new one started."""
        with self._locked():
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
            self._git.run("rev-parse", "--git-dir")
            latest = self._latest()
            if latest is not None:
                self._git.run("cat-file", "-e", f"{latest.commit}^{{tree}}")
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
            raise SnapshotError(_errno_kind(exc), f"cannot create {self.path}: {exc.strerror or exc}") from None
        try:
            git = _Git(self._git.git, tmp, self.workspace)
            git.run("init", "-q", "--bare", "--template=", str(tmp))
            (tmp / "config").write_text(CONFIG, encoding="utf-8")
            (tmp / "info").mkdir(exist_ok=True)
            (tmp / "info" / "attributes").write_text(ATTRIBUTES, encoding="utf-8")
            (tmp / "info" / "exclude").write_text("", encoding="utf-8")
            os.replace(tmp, self.path)  # whole or not at all
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise SnapshotError(_errno_kind(exc), f"cannot create {self.path}: {exc.strerror or exc}") from None
        except SnapshotError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """One writer at a time: the supervisor's snapshot thread and a `restore` command share the store."""
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.state_dir / f"snapshots.{LOCK_FILE}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise SnapshotError(_errno_kind(exc), f"cannot lock the snapshot store: {exc.strerror or exc}") from None
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
        out = self._git.run("for-each-ref", "--sort=refname",
                            "--format=%(objectname)%09%(contents:subject)", REF_PREFIX)
        found = [info for line in out.decode("utf-8", "replace").splitlines() if (info := _parse_ref_line(line))]
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
        raw = self._git.run("cat-file", "commit", commit).decode("utf-8", "replace")
        info = _parse_ref_line(f"{commit}\t{raw.partition(chr(10) + chr(10))[2].strip()}")
        self._latest_seen = info
        return info

    def _refs(self) -> dict[str, str]:
        """The snapshot refs (name -> commit), loose and packed, read from the files: no git process."""
        refs: dict[str, str] = {}
        for line in (read_text(self.path / "packed-refs") or "").splitlines():
            sha, _, ref = line.partition(" ")
            if ref.startswith(REF_PREFIX):
                refs[ref[len(REF_PREFIX):]] = sha
        try:
            with os.scandir(self.path / REF_PREFIX) as entries:
                for entry in entries:
                    sha = (read_text(Path(entry.path)) or "").strip()
                    if len(sha) == 40 and entry.name.isdigit():
                        refs[entry.name] = sha
        except OSError:
            pass
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
        return list(self._tree_listing(info.commit))

    def changed_between(self, old: SnapshotInfo, new: SnapshotInfo) -> list[str]:
        """The paths whose content differs between two snapshots (added, modified or deleted)."""
        out = self._git.run("diff-tree", "-r", "-z", "--no-renames", "--name-only", old.commit, new.commit)
        return [os.fsdecode(p) for p in out.split(b"\0") if p]

    # -- taking ---------------------------------------------------------------------------------

    def take(self, iteration: int, kind: str, changed: Collection[str] | None, *, now: float,
             exclude: Sequence[str] | None = None, full_every: int = 0) -> SnapshotInfo:
        """Record the workspace now. `changed`: the paths the watcher saw change since the last snapshot
        (None: look at everything). `exclude`: gitignore lines for `info/exclude` (None: keep them).
        `full_every`: every that many snapshots, look at everything anyway (0: never)."""
        with self._locked():
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
            self._git.run("read-tree", parent.commit)  # the stat cache is lost, the content is not
        nested = set(parent.nested) if parent is not None else set()
        work = self._full_pass(nested) if full else self._changed_pass(changed or (), nested)
        moved = self._update(work)
        next_id = max((int(name) for name in refs), default=0) + 1  # even past an unreadable newest
        return self._commit(next_id, iteration, kind, parent, work, moved, full, now)

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
            raise SnapshotError(_errno_kind(exc), f"cannot write {path}: {exc.strerror or exc}") from None

    def _full_pass(self, nested: set[str]) -> _Pass:
        out = self._git.run("ls-files", "-z", "--modified", "--others", "--deleted", "--exclude-standard")
        paths = {p for p in out.decode("utf-8", "surrogateescape").split("\0") if p}
        work = _Pass()
        nested.clear()
        for path in paths:
            if path.endswith("/"):
                nested.add(path.rstrip("/"))  # a git repository of its own: git lists its folder, not its files
        venvs = {p.rpartition("/")[0] for p in paths if p.rpartition("/")[2] == "pyvenv.cfg" and "/" in p}
        for path in paths:
            if path.endswith("/") or _under(path, venvs):
                continue
            self._classify(path, work)
        work.nested = nested
        if self.skip is not None:
            self._ignored_pass(work, venvs)
        return work

    def _never(self, path: str) -> bool:
        """Our state folder (when it is inside the workspace) and NEVER_STORED are never stored."""
        if self._state_prefix is not None and _under(path, [self._state_prefix]):
            return True
        return any(part in NEVER_STORED for part in path.split("/"))

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
            if os.path.exists(os.path.join(self.workspace, path, "pyvenv.cfg")):
                work.skipped.add(path)  # a virtual environment, whatever its name
                continue
            for dirpath, dirs, names in os.walk(os.path.join(self.workspace, path)):
                rel = os.path.relpath(dirpath, self.workspace)
                kept = []
                for name in sorted(dirs):
                    sub = f"{rel}/{name}"
                    full = os.path.join(dirpath, name)
                    if self._never(sub) or os.path.islink(full):
                        if os.path.islink(full):
                            self._classify(sub, work)  # a link is stored as a link, never followed
                        continue
                    if name in skip or os.path.exists(os.path.join(full, "pyvenv.cfg")):
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
            work.add[path] = _signature(st)
            work.modes[path] = None
        elif stat.S_ISREG(st.st_mode):
            if self.max_file > 0 and st.st_size > self.max_file:
                work.drop.add(path)
                work.big.add(path)
            elif not os.access(absolute, os.R_OK):
                work.drop.add(path)
            else:
                work.add[path] = _signature(st)
                bits = stat.S_IMODE(st.st_mode)
                work.modes[path] = bits if bits != _git_mode_bits(st) else None
        elif stat.S_ISDIR(st.st_mode):
            work.drop.add(path)  # a file became a folder: its files are paths of their own
        else:
            work.drop.add(path)  # FIFOs, sockets, devices: git stores none of them
        if path not in work.add:
            work.modes[path] = None

    def _update(self, work: _Pass) -> tuple[str, ...]:
        """Bring the index up to date with `work`. Each file is read again while it changed under the
        read (up to RETRIES times); the files still changing come back, stored as last read."""
        if work.drop:
            self._update_index(["--force-remove"], sorted(work.drop), work)
        # --replace: a file where a folder was (or the reverse) replaces the entries in its way.
        self._update_index(["--add", "--remove", "--replace"], sorted(work.add) + sorted(work.remove), work)
        pending = dict(work.add)
        moving: dict[str, tuple[int, int, int, int]] = {}
        for attempt in range(RETRIES + 1):
            moving = {}
            for path, before in pending.items():
                try:
                    after = _signature(os.lstat(os.path.join(self.workspace, path)))
                except OSError:
                    continue  # gone since: the next snapshot records that
                if after != before:
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
                moved: tuple[str, ...], full: bool, now: float) -> SnapshotInfo:
        tree = self._git.run("write-tree").decode().strip()
        added = modified = deleted = 0
        size_delta = 0
        if parent is not None:
            raw = self._git.run("diff-tree", "-r", "-z", "--no-renames", "--raw", f"{parent.commit}^{{tree}}", tree)
            fields = raw.split(b"\0")
            shas: list[bytes] = []
            signs: list[int] = []
            for i in range(0, len(fields) - 1, 2):
                meta = fields[i].split()
                if len(meta) < 5:
                    continue
                old_mode, new_mode, old_sha, new_sha, status = meta[0].lstrip(b":"), meta[1], meta[2], meta[3], meta[4][:1]
                added += status == b"A"
                deleted += status == b"D"
                modified += status in (b"M", b"T")
                if old_mode not in (b"000000", b"160000"):
                    shas.append(old_sha)
                    signs.append(-1)
                if new_mode not in (b"000000", b"160000"):
                    shas.append(new_sha)
                    signs.append(+1)
            if shas and not full:
                sizes = self._git.run("cat-file", "--batch-check=%(objectsize)", input=b"\n".join(shas) + b"\n")
                for sign, line in zip(signs, sizes.split()):
                    size_delta += sign * int(line) if line.isdigit() else 0
        listing: dict[str, int] | None = None
        if parent is None:  # everything is new: what was read is what is stored
            files, total = len(work.add), sum(sig[0] for sig in work.add.values())
            added = files
        elif full:
            listing = self._tree_listing(tree)
            files, total = len(listing), sum(listing.values())
        else:
            files = parent.files + added - deleted
            total = parent.bytes + size_delta
        big = (set(parent.not_stored) if parent is not None and not full else set())
        big = (big - set(work.add) - work.remove - (work.drop - work.big)) | work.big
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
        info = SnapshotInfo(
            id=snapshot_id, iteration=iteration, kind=kind,
            at=state_files.iso_utc(now), files=files, bytes=max(0, total),
            added=added, modified=modified, deleted=deleted,
            not_stored=tuple(sorted(big))[:LIST_MAX], not_stored_count=len(big), moved=moved,
            nested=tuple(sorted(work.nested))[:LIST_MAX], modes=modes,
            skipped=(tuple(sorted(work.skipped))[:LIST_MAX] if work.skipped is not None
                     else parent.skipped if parent is not None else ()),
        )
        info = replace(info, skipped_bytes=self._measure_skipped(info.skipped, now))
        # No parent link: each snapshot stands alone, so dropping the oldest refs frees what only they held.
        commit = self._git.run("commit-tree", tree, input=info.message().encode("utf-8"), now=now).decode().strip()
        self._write_ref(info.id, commit)
        info = replace(info, commit=commit)
        self._latest_seen = info
        self._stored_since += sum(sig[0] for sig in work.add.values()) + 1024
        self._takes_since += 1
        return info

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

    def _write_ref(self, snapshot_id: int, commit: str) -> None:
        """A loose ref is a file holding the commit (git's own format); written whole or not at all. Without
        fsync (one a call, like the breaker's counters): after a crash of the machine the store is checked
        before its next use (`_healthy`) and set aside when its latest snapshot is unreadable."""
        path = self.path / f"{REF_PREFIX}{snapshot_id:08d}"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            state_files.atomic_write_text(path, commit + "\n", durable=False)
        except OSError as exc:
            raise SnapshotError(_errno_kind(exc), f"cannot write {path}: {exc.strerror or exc}") from None

    def _tree_listing(self, tree: str) -> dict[str, int]:
        """Every file of a tree with its size (links count their target's length, as git stores them)."""
        out = self._git.run("ls-tree", "-r", "-l", "-z", "--full-tree", tree)
        listing: dict[str, int] = {}
        for entry in out.split(b"\0"):
            meta, _, name = entry.partition(b"\t")
            parts = meta.split()
            if name and len(parts) == 4 and parts[1] == b"blob":
                listing[os.fsdecode(name)] = int(parts[3]) if parts[3].isdigit() else 0
        return listing

    # -- the budget and the marks ---------------------------------------------------------------

    def keep_within(self, budget: int) -> tuple[int, int]:
        """Drop the oldest snapshots until the store fits `budget` bytes (the newest KEEP_NEWEST always stay);
        pack loose objects now and then. Returns (snapshots dropped, bytes on disk after)."""
        estimate = None if self._size is None else self._size + self._stored_since
        if (estimate is not None and self._takes_since < RECOUNT_EVERY
                and (budget <= 0 or estimate <= budget * BUDGET_LOW_WATER)):
            return 0, estimate  # far from the budget: counting the files on disk can wait
        with self._locked():
            size, loose = _tree_size(self.path)
            if loose > MAINTAIN_LOOSE and (budget <= 0 or size <= budget):
                self._git.run("repack", "-d", "-q")
                self._git.run("prune-packed", "-q")
                self._git.run("pack-refs", "--all", "--prune")
                size, loose = _tree_size(self.path)
            dropped = 0
            goal = int(budget * BUDGET_LOW_WATER)
            if budget > 0 and size > budget:
                while size > goal:
                    refs = self._git.run("for-each-ref", "--sort=refname", "--format=%(refname)", REF_PREFIX).split()
                    if len(refs) <= KEEP_NEWEST:
                        break  # the newest ones alone are over the budget: they stay
                    batch = refs[: max(1, min(len(refs) - KEEP_NEWEST, len(refs) // 10))]
                    self._git.run("update-ref", "--stdin", input=b"".join(b"delete " + r + b"\n" for r in batch))
                    self._git.run("gc", "--prune=now", "-q")
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
            raise SnapshotError(_errno_kind(exc), f"cannot write {TRIPS_FILE}: {exc.strerror or exc}") from None

    def start_over(self) -> Path | None:
        """The store is broken: move it aside and start an empty one. Returns where the old one went."""
        with self._locked():
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

    # -- restoring ------------------------------------------------------------------------------

    def select(self, info: SnapshotInfo, paths: Sequence[str]) -> list[str]:
        """The snapshot's files named by `paths` (files, or folders for everything under them; none: all).
        A path it does not hold raises SnapshotError("missing") naming it."""
        files = self.files_in(info)
        if not paths:
            return files
        chosen: list[str] = []
        seen: set[str] = set()
        for raw in paths:
            wanted = raw.strip("/")
            hits = [f for f in files if f == wanted or f.startswith(wanted + "/")] if wanted else files
            if not hits:
                why = " (it was over --snapshot-max-file: listed, not stored)" if wanted in info.not_stored else ""
                raise SnapshotError("missing", f"{raw} is not in the snapshot of iteration {info.iteration}{why}")
            for hit in hits:
                if hit not in seen:
                    seen.add(hit)
                    chosen.append(hit)
        return chosen

    def restore(self, info: SnapshotInfo, dest: Path, files: Sequence[str]) -> int:
        """Write `files` of the snapshot into `dest` (created when missing), byte for byte, with their
        modes. Returns how many were written."""
        dest = Path(dest)
        try:
            dest.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SnapshotError(_errno_kind(exc), f"cannot create {dest}: {exc.strerror or exc}") from None
        with self._locked(), tempfile.TemporaryDirectory(prefix=".restore-", dir=self.path) as tmp:
            index = Path(tmp) / "index"
            whole = ("-c", "core.splitIndex=false")  # a throwaway index: no shared part left in the store
            self._git.run(*whole, "read-tree", info.commit, index=index)
            data = b"".join(os.fsencode(f) + b"\0" for f in files)
            self._git.run(*whole, "checkout-index", "-f", "-z", "--stdin", f"--prefix={dest}/", input=data,
                          index=index)
        for path in files:
            target = dest / path
            try:
                st = os.lstat(target)
                if stat.S_ISREG(st.st_mode):
                    os.chmod(target, info.modes.get(path, _git_mode_bits(st)))
            except OSError:
                continue
        return len(files)


def _parse_ref_line(line: str) -> SnapshotInfo | None:
    commit, _, message = line.partition("\t")
    try:
        return SnapshotInfo.from_message(message, commit)
    except (ValueError, TypeError, RecursionError):
        return None  # not one of ours (or damaged): listing the rest is worth more than failing


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


def exclude_lines(names: Collection[str], prefixes: Sequence[str], patterns: Sequence[str],
                  user_exclude: str | None) -> list[str]:
    """The watcher's ignore rules as gitignore lines for the store's `info/exclude`. Pure.

    The workspace's own `.gitignore` files apply by themselves (git reads them in the work tree).
    """
    lines = ["# written by ralph-supervise: what the workspace watcher ignores"]
    lines += sorted(names)
    lines += [f"/{p.strip('/')}/" for p in prefixes if p.strip("/")]
    if user_exclude:
        lines += [line for line in user_exclude.splitlines() if line.strip()]
    lines += list(patterns)  # last: the user's --ignore patterns win, as in the watcher
    return lines


__all__ = [
    "SnapshotError", "SnapshotInfo", "SnapshotStore", "classify_failure", "exclude_lines", "find_git",
    "human_size", "read_summary", "restore_command", "summary",
]
