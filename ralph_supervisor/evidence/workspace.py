"""Workspace progress: which files changed and which commits appeared during an iteration.

Ralph's breaker measured progress with `git diff` against HEAD, so a file left dirty counted again in
every later loop, new untracked files and commits with a clean tree never counted, and a folder that is
not a git repository never showed progress (their issues #141 and #340). Here progress is what changed
*during* the iteration: inotify events on the workspace, judged by content (a BLAKE2b hash per file we
have seen), and git refs compared before and after.

How it watches: one inotify instance (watchdog's `InotifyFD`: one file descriptor, one reader thread)
with one non-recursive watch per directory that is not ignored. watchdog's own `Observer` cannot do
this: a recursive schedule walks into `node_modules` and `.git` (and since watchdog 7 silently skips
sub-directories it cannot watch), and a schedule per directory costs one thread per directory. When
inotify runs out (watch or instance limit, ENOSPC/EMFILE), or is not available, the watcher falls back
to scanning mtime and size every `poll_interval`, with one `watcher_fallback` warning, never a crash.

Definitions (the breaker relies on them):
- A file *changed* in an iteration when its state at the end differs from its state at the start:
  created, deleted, renamed (both names count) or its content differs. A rewrite with identical content,
  a touch, or a file created and removed again inside the iteration does not count. To know a file's
  content before its first write, a low-priority background thread ("priming") hashes the existing small
  files after `start()`, skipping any whose inode changed (ctime) since shortly before the watch began,
  so it never takes new content for the old. A file not primed (larger than `PRIME_MAX_FILE`, beyond
  the budget, or written before priming reached it) has an unknown old content: its first write counts.
- *Commits* = the number of local branches and tags (`refs/heads/**`, `refs/tags/**`, loose or packed)
  created, deleted or moved during the iteration, or 1 when only HEAD moved (a commit on a detached
  HEAD, a checkout). Remote-tracking refs, the stash and notes do not count: a fetch is not the agent's
  work, and a push only follows a commit already counted. Worktrees (`.git` is a file) are followed
  through `gitdir:` and `commondir`; a reftable repository is read with `git` when it is installed.

Segments: the run is cut into segments, each either one agent call (a key) or the gap between calls. A
change belongs to the segment open when its event is handled. A call's segment opens either after a sync
(`begin_iteration`) or, for calls announced by a shim, on the watcher thread at the shim's notice
(`watch_calls`: the notice's event sits in the same inotify queue as the agent's file events, so its first
write lands in its own segment). It closes at its end (a barrier in the same queue) or when the next call
opens, whichever comes first, so a call that starts before the previous one's end was processed still
gets exactly its own changes. What changed in a gap is handed to `on_gap`: it is no call's progress.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import structlog

from ralph_supervisor.evidence.fingerprint import UNSEEN, Fingerprint, rewound
from ralph_supervisor.evidence.ignore import VENV_MARKER, IgnoreRules, load_ignore_rules, read_text
from ralph_supervisor.safe_git import command as safe_command

log = structlog.get_logger(__name__)

PATH_SAMPLE = 50
"""How many changed paths a `WorkspaceDelta` carries (the count is always exact)."""
HASH_LIMIT = 32 * 1024 * 1024
"""Files larger than this are identified by size and mtime instead of a content hash."""
MODIFY_REHASH_S = 0.25
"""A file still being written is re-hashed at most this often; its close or the iteration end settles it."""
SYNC_TIMEOUT_S = 1.0
PRIME_MAX_FILE = 1024 * 1024
PRIME_MAX_FILES = 100_000
PRIME_MAX_BYTES = 512 * 1024 * 1024
PRIME_CTIME_MARGIN_NS = 100_000_000
"""Files whose inode changed less than this before the watch began are not primed (file times are
stamped from a coarse clock, a few ms behind `time.time_ns()`)."""

ABSENT = b""
"""The state of a path that does not exist (a real state, unlike `None` = never seen)."""

_LIMIT_ERRNOS = frozenset({errno.ENOSPC, errno.EMFILE, errno.ENFILE, errno.ENOMEM})


@dataclass(frozen=True)
class Change:
    """One recorded change of a non-ignored file: its path, when (monotonic), and its states before
    and after (`file_state` values; `before` is None when the old content was never seen)."""

    path: str
    at: float
    before: bytes | None = None
    after: bytes = b""

    @property
    def deleted(self) -> bool:
        return self.after == ABSENT and self.before != ABSENT


def state_size(state: bytes | None) -> int | None:
    """The size in bytes a `file_state` value records (regular files only), else None."""
    if state is None:
        return None
    if state[:1] == b"H" and len(state) == 1 + 8 + 16:
        return int.from_bytes(state[1:9], "big")
    if state[:1] == b"B":
        try:
            return int(state[1:].split(b":", 1)[0])
        except ValueError:
            return None
    return None


@dataclass(frozen=True)
class WorkspaceDelta:
    """What the workspace evidence says about one iteration."""

    files_changed: int
    paths: tuple[str, ...]
    """Sorted sample (at most `PATH_SAMPLE`) of the changed paths, relative to the workspace."""
    commits: int
    events_lost: bool = False
    """The kernel dropped events (inotify queue overflow): `files_changed` is a lower bound."""
    fingerprint: int = 0
    """The whole workspace's state at the iteration's end (see `fingerprint.py`; 0 is the run's start)."""
    start: Mapping[str, bytes | None] = field(default_factory=dict, compare=False)
    """Each touched path's state when the iteration began (None: never seen) ..."""
    end: Mapping[str, bytes | None] = field(default_factory=dict, compare=False)
    """... and when it ended: the iteration's net effect, which the `destructive` trip judges."""
    head_before: str = ""
    """HEAD's commit when the iteration began, and when it ended ("" without a repository)."""
    head_after: str = ""


# --------------------------------------------------------------------------------------------- git


@dataclass
class _Segment:
    """One call (key) or one gap between calls (key None): the paths it touched with their states at its
    start, and, once closed, their states and the refs at its end."""

    key: str | None
    refs: GitRefs
    touched: dict[str, bytes | None] = field(default_factory=dict)
    events_lost: bool = False
    after: dict[str, bytes | None] | None = None
    refs_after: GitRefs | None = None
    fingerprint: int = 0
    """The whole workspace's state when the segment closed."""
    changes: list[tuple[int, str, bytes | None]] = field(default_factory=list)
    """A gap's changes in order: (when, in epoch ns; path; its state before). A call found late (sampled)
    takes from its gap what changed since its process began (`begin_iteration(since=)`)."""

    def split(self, since_ns: int) -> dict[str, bytes | None]:
        """The paths changed at or after `since_ns`, each with its state before the first such change. Pure."""
        moved: dict[str, bytes | None] = {}
        for at, path, before in self.changes:
            if at >= since_ns and path not in moved:
                moved[path] = before
        return moved

    def delta(self) -> WorkspaceDelta:
        after = self.after or {}
        refs_after = self.refs_after or self.refs
        changed = sorted(path for path, begin in self.touched.items() if begin is None or after.get(path) != begin)
        return WorkspaceDelta(files_changed=len(changed), paths=tuple(changed[:PATH_SAMPLE]),
                              commits=count_commits(self.refs, refs_after),
                              events_lost=self.events_lost, fingerprint=self.fingerprint,
                              start=self.touched, end=after, head_before=self.refs.head,
                              head_after=refs_after.head)


CLOSED_SEGMENTS = 64
GAP_CHANGES = 4096
"""Changes a gap remembers with their times (the oldest go first: a late-found call wants the newest)."""
COARSE_CLOCK_NS = 10_000_000
"""File times come from the kernel's coarse clock and a process's start in clock ticks (10 ms): a change
stamped this much before a call's start may still be the call's own first write, so it is."""
"""Closed call segments kept for their `end_iteration` (a caller that never asks does not grow us)."""


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


# ------------------------------------------------------------------------------------ file states


def file_state(path: Path) -> bytes:
    """What a path holds, as comparable bytes: ABSENT, size and content hash, a link target, or a marker.

    Never opens what is not a regular file (a FIFO would block us), never follows symlinks.
    """
    try:
        st = os.lstat(path)
    except OSError:
        return ABSENT
    if stat.S_ISDIR(st.st_mode):
        return ABSENT  # directories are not files; their files are tracked one by one
    if stat.S_ISLNK(st.st_mode):
        try:
            return b"L" + os.fsencode(os.readlink(path))
        except OSError:
            return b"L?"
    if not stat.S_ISREG(st.st_mode):
        return b"S%o" % stat.S_IFMT(st.st_mode)
    if st.st_size > HASH_LIMIT:
        return b"B%d:%d" % (st.st_size, st.st_mtime_ns)
    digest = hashlib.blake2b(digest_size=16)
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
    except OSError:
        return ABSENT if not os.path.lexists(path) else b"U%d:%d" % (st.st_size, st.st_mtime_ns)
    return b"H" + st.st_size.to_bytes(8, "big") + digest.digest()


def _changed_at(path: Path, state: bytes) -> int:
    """When a change happened (epoch ns): the file's ctime where it still exists (the kernel stamped the
    write), else now (a deletion is seen after it happened, never before)."""
    now = time.time_ns()
    if state == ABSENT:
        return now
    try:
        return min(now, os.lstat(path).st_ctime_ns)
    except OSError:
        return now


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top + "/")


# ------------------------------------------------------------------------------------------ watcher


class _Callbacks:
    """The object watchdog's InotifyFD calls back; forwards to the workspace without exposing it."""

    def __init__(self, workspace: Workspace) -> None:
        self._workspace = workspace

    def on_event(self, event: object) -> None:
        self._workspace._on_inotify_event(event)

    def on_watch_deleted(self, wd: int) -> None:
        self._workspace._on_watch_deleted(wd)

    def on_queue_overflow(self) -> None:
        self._workspace._on_queue_overflow()


class Workspace:
    """Watches a workspace folder and tells, per iteration, what changed in it.

    Thread model: inotify events (or polling scans) are handled on one watcher thread; the
    supervisor calls `begin_iteration` and `end_iteration` from its own thread.
    `begin_iteration` and `end_iteration` block briefly (a few ms; at most about a second, or one
    scan in polling mode) so that events already queued by the kernel are counted in the right
    iteration: call them off the event loop (`asyncio.to_thread`).
    """

    def __init__(
        self,
        root: Path,
        *,
        state_dir: Path,
        ignore: Sequence[str] = (),
        on_change: Callable[[Change], None] | None = None,
        poll_interval: float = 1.0,
        force_polling: bool = False,
    ) -> None:
        self.root = Path(root).resolve()
        self.state_dir = Path(state_dir)
        if not self.state_dir.is_absolute():
            self.state_dir = self.root / self.state_dir
        self._ignore_patterns = tuple(ignore)
        self._on_change = on_change
        self.poll_interval = max(0.01, float(poll_interval))
        self._force_polling = force_polling
        self._mode: Literal["inotify", "polling"] = "polling" if force_polling else "inotify"

        self._lock = threading.RLock()
        self._rules = IgnoreRules()
        self._known: dict[str, bytes] = {}
        self._absent: set[str] = set()
        """Paths recorded ABSENT: forgotten at the next iteration so `_known` does not grow with churn."""
        self._segment = _Segment(None, GitRefs())
        self._closed: dict[str, _Segment] = {}
        self.on_gap: Callable[[WorkspaceDelta], None] | None = None
        """Told what changed between two calls (on the thread that closed the gap)."""
        self._calls_wd: int | None = None
        self._on_notice: Callable[[str], str | None] | None = None
        self._at_barrier: dict[int, Callable[[], None]] = {}
        self._last_hashed: dict[str, float] = {}
        self._stale: set[str] = set()
        self._fingerprint = Fingerprint()
        self._started = False
        self._stopped = False
        self._watch_began_ns = 0
        self._primed = threading.Event()
        self._prime_stop = threading.Event()
        self._prime_thread: threading.Thread | None = None
        self.primed_files = 0
        self._fell_back = False

        # inotify mode
        self._fd: object | None = None
        self._callbacks = _Callbacks(self)
        self._wd_dir: dict[int, str] = {}
        self._dir_wd: dict[str, int] = {}
        self._barrier_dir: Path | None = None
        self._barrier_wd: int | None = None
        self._barrier_sent = 0
        self._barrier_seen = 0
        self._barrier_cond = threading.Condition()
        self._sync_lock = threading.Lock()

        # polling mode
        self._snapshot: dict[str, tuple[int, int, int]] = {}
        self._scan_lock = threading.Lock()
        self._poll_stop = threading.Event()
        self._poll_thread: threading.Thread | None = None

    # ---------------------------------------------------------------- public API

    @property
    def mode(self) -> Literal["inotify", "polling"]:
        return self._mode

    @property
    def ignored_prefixes(self) -> tuple[str, ...]:
        """Folders ignored with everything below them: the state folder and the virtual environments found."""
        with self._lock:
            return self._rules.prefixes

    @property
    def watched_directories(self) -> int:
        """Directories under an inotify watch (0 in polling mode)."""
        with self._lock:
            return len(self._dir_wd)

    def start(self) -> None:
        """Arm the watcher. Never raises for inotify limits: falls back to polling instead."""
        if self._started:
            return
        self._started = True
        if not self.root.is_dir():
            log.warning("workspace_missing", root=str(self.root), hint="nothing to watch until it exists")
        self._watch_began_ns = time.time_ns()
        self._rules = load_ignore_rules(self.root, state_dir=self.state_dir, extra=self._ignore_patterns)
        if self._mode == "inotify":
            try:
                self._start_inotify()
            except (OSError, ImportError, RuntimeError) as exc:
                self._close_inotify()
                self._fall_back(exc)
            else:
                log.info("watcher_started", mode="inotify", root=str(self.root), directories=len(self._dir_wd))
        else:
            self._start_polling()
            log.info("watcher_started", mode="polling", root=str(self.root), reason="forced")
        self._sync()
        self._open_segment(None)
        self._prime_thread = threading.Thread(target=self._prime, name="workspace-prime", daemon=True)
        self._prime_thread.start()

    def wait_primed(self, timeout: float | None = None) -> bool:
        """Wait until the background priming of file hashes is done (tests and benchmarks)."""
        return self._primed.wait(timeout)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._prime_stop.set()
        prime = self._prime_thread
        if prime is not None:
            prime.join(timeout=5)
        self._close_inotify()
        self._poll_stop.set()
        thread = self._poll_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        if self._barrier_dir is not None:
            shutil.rmtree(self._barrier_dir, ignore_errors=True)
            self._barrier_dir = None

    def __enter__(self) -> Workspace:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def begin_iteration(self, key: str = "", since: float | None = None) -> None:
        """Start a new iteration (segment `key`): earlier events are settled first and do not leak into it.
        `since` (epoch seconds): the call began then, before it was found (a sampled process): what changed
        in the gap since then is the call's."""
        self._sync()
        self._open_segment(key, since)

    def end_iteration(self, key: str = "") -> WorkspaceDelta:
        """What changed in segment `key` (files: net change of state; commits: refs moved). A segment that
        is still open closes here, at this point of the event queue; one that never opened is empty."""
        self._sync(then=lambda: self._close_segment(key))
        with self._lock:
            segment = self._closed.pop(key, None)
        if segment is None:
            with self._lock:
                return WorkspaceDelta(0, (), 0, fingerprint=self._fingerprint.value)
        return segment.delta()

    def take_from_gap(self, since: float, until: float) -> WorkspaceDelta:
        """A call seen only in the output (no process was seen): what changed in the gap between `since` and
        `until` (epoch seconds) is that call's. It is taken out of the gap, which stays open."""
        self._sync()
        since_ns = int(since * 1e9) - COARSE_CLOCK_NS
        until_ns = int(until * 1e9)
        with self._lock:
            segment = self._segment
            if segment.key is not None:
                return WorkspaceDelta(0, (), 0, fingerprint=self._fingerprint.value)
            window = [c for c in segment.changes if since_ns <= c[0] < until_ns]
            later = [c for c in segment.changes if c[0] >= until_ns]
            before: dict[str, bytes | None] = {}
            for _, path, prev in window:
                before.setdefault(path, prev)
            after: dict[str, bytes | None] = {}
            for path in before:
                nxt = next((prev for _, p, prev in later if p == path), None)
                after[path] = nxt if any(p == path for _, p, _ in later) else self._known.get(path)
            earlier = {c[1] for c in segment.changes if c[0] < since_ns}
            segment.changes = [c for c in segment.changes if not (since_ns <= c[0] < until_ns)]
            for path in before:
                if path not in earlier:
                    segment.touched[path] = after[path]  # no longer the gap's change
            changed = sorted(p for p in before if before[p] is None or before[p] != after[p])
            return WorkspaceDelta(len(changed), tuple(changed[:PATH_SAMPLE]), 0,
                                  fingerprint=rewound(self._fingerprint.value, self._undone(later)),
                                  start=before, end=after)

    def _undone(self, later: list[tuple[int, str, bytes | None]]) -> list[tuple[str, bytes | None, bytes]]:
        """Under the lock: the changes `later` of the gap as (path, before, after), newest first."""
        steps: list[tuple[str, bytes | None, bytes]] = []
        after_of: dict[str, bytes] = {}
        for _, path, prev in reversed(later):
            steps.append((path, prev, after_of.get(path, self._known.get(path) or ABSENT)))
            after_of[path] = prev if prev is not None else UNSEEN
        return steps

    def close_gap(self) -> None:
        """The run is over: what changed since the last call ended goes to `on_gap` now."""
        self._sync()
        with self._lock:
            in_gap = self._segment.key is None
        if in_gap:
            self._open_segment(None)

    @property
    def watching_calls(self) -> bool:
        """Notices are read in our inotify queue (False after a fall back to polling)."""
        return self._calls_wd is not None and self._mode == "inotify"

    def watch_calls(self, directory: Path, on_notice: Callable[[str], str | None]) -> bool:
        """Watch a shim notice folder in our own inotify queue. For each notice written there,
        `on_notice(file name)` runs on the watcher thread, before any later event is handled; when it
        returns a key, that call's segment opens right there. False in polling mode (the caller then
        reads the folder itself and calls `begin_iteration`)."""
        fd = self._fd
        if self._mode != "inotify" or fd is None:
            return False
        from watchdog.observers.inotify_c import InotifyConstants as C

        self._on_notice = on_notice
        try:
            self._calls_wd = fd.add_callback(os.fsencode(directory), C.IN_CLOSE_WRITE | C.IN_ONLYDIR,  # type: ignore[attr-defined]
                                             self._callbacks, 0)
        except OSError as exc:
            log.warning("watcher_calls_unwatched", directory=str(directory), error=str(exc))
            self._on_notice = None
            return False
        return True

    def _open_segment(self, key: str | None, since: float | None = None) -> None:
        """Close the open segment (a gap is handed to `on_gap`) and open `key`'s (with what the gap saw
        change since `since`, when given). The close and the open are one step under the lock: a change
        handled meanwhile on the watcher thread lands in the new segment, never in the one closing."""
        refs = read_git_refs(self.root)
        for path in self._take_stale():
            self._evaluate(path)
        with self._lock:
            gap, moved = self._close_open(refs, None if since is None else int(since * 1e9) - COARSE_CLOCK_NS)
            if key is not None:
                self._closed.pop(key, None)  # a key used again (a recycled pid) starts afresh
            self._segment = _Segment(key, refs, touched=moved)
            for path in self._absent:  # a path that comes back announces itself with a create event
                if self._known.get(path) == ABSENT:
                    del self._known[path]
            self._absent.clear()
            self._last_hashed.clear()
        if gap is not None and self.on_gap is not None and (gap.files_changed or gap.commits):
            try:
                self.on_gap(gap)
            except Exception as exc:  # the callback is the supervisor's; never let it kill the watcher
                log.warning("watcher_callback_failed", error=repr(exc))

    def _close_segment(self, key: str) -> None:
        """Close `key`'s segment if it is still the open one (else a later call already closed it); a gap opens."""
        with self._lock:
            if self._segment.key != key:
                return
        self._open_segment(None)

    def _close_open(self, refs: GitRefs, split_ns: int | None) -> tuple[WorkspaceDelta | None, dict[str, bytes | None]]:
        """Under the lock: keep the open segment's end for `end_iteration`; return a gap's delta, and, for a
        gap split at `split_ns`, what changed since then (each path with its state before), which the gap
        leaves to the call."""
        segment = self._segment
        segment.after = {path: self._known.get(path) for path in segment.touched}
        moved: dict[str, bytes | None] = {}
        if split_ns is not None and segment.key is None:
            moved = segment.split(split_ns)
            segment.after.update(moved)  # the gap ends where the call's first change began
        segment.refs_after = refs
        segment.fingerprint = self._fingerprint.value
        if segment.key is None:
            return segment.delta(), moved
        self._closed[segment.key] = segment
        while len(self._closed) > CLOSED_SEGMENTS:
            del self._closed[next(iter(self._closed))]
        return None, moved

    def _on_call_notice(self, name: str) -> None:
        callback = self._on_notice
        if callback is None or not name or name.startswith("."):
            return
        key = callback(name)
        if key is not None:
            self._open_segment(key)

    # ---------------------------------------------------------------- recording

    def _record(self, path: str, state: bytes, *, created: bool = False) -> None:
        """Compare a path's new state with what we knew; remember and report a real change."""
        now = time.monotonic()
        with self._lock:
            if self._rules.is_ignored(path, is_dir=False):
                return
            prev = self._known.get(path)
            if prev is None and created:
                prev = ABSENT
            segment = self._segment
            touched = segment.touched
            if path not in touched:
                touched[path] = prev
            if prev is not None and prev == state:
                return
            if segment.key is None:
                segment.changes.append((_changed_at(self.root / path, state), path, prev))
                if len(segment.changes) > GAP_CHANGES:
                    del segment.changes[: GAP_CHANGES // 4]
            self._fingerprint.change(path, prev, state)
            self._known[path] = state
            if state == ABSENT:
                self._absent.add(path)
        if self._on_change is not None:
            try:
                self._on_change(Change(path, now, prev, state))
            except Exception as exc:  # the callback is the supervisor's; never let it kill the watcher
                log.warning("watcher_callback_failed", error=repr(exc))

    def _evaluate(self, path: str, *, created: bool = False) -> None:
        with self._lock:
            self._last_hashed[path] = time.monotonic()
            self._stale.discard(path)
        self._record(path, file_state(self.root / path), created=created)

    def _take_stale(self) -> list[str]:
        with self._lock:
            stale = list(self._stale)
            self._stale.clear()
        return stale

    def _forget_under(self, top: str) -> None:
        """A directory turned out to be ignored (a new venv): nothing under it is progress."""
        with self._lock:
            for table in (self._segment.touched, self._known):
                for path in [p for p in table if _under(p, top)]:
                    del table[path]
            self._segment.changes = [c for c in self._segment.changes if not _under(c[1], top)]
            self._stale = {p for p in self._stale if not _under(p, top)}

    def _mark_venv(self, directory: str) -> None:
        with self._lock:
            self._rules = self._rules.with_prefix(directory)
        self._forget_under(directory)

    def _reload_gitignore(self, directory: str) -> None:
        text = read_text(self.root / directory / ".gitignore")
        with self._lock:
            self._rules = self._rules.with_gitignore(directory, text)

    def _prime(self) -> None:
        """Hash existing small files so that a first rewrite with identical content is recognised.

        A file is primed only when its inode has not changed (ctime: writes, renames, `touch -d` all
        set it) since shortly before the watch began: then what we read is what was there at the
        start, and no event about it can be pending. Runs at the lowest CPU priority, in a budget.
        """
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except (AttributeError, OSError):
            pass
        limit_ns = self._watch_began_ns - PRIME_CTIME_MARGIN_NS
        files = 0
        budget = PRIME_MAX_BYTES
        try:
            for directory, entries in self._walk(""):
                if self._prime_stop.is_set():
                    return
                rules = self._rules
                for entry in entries:
                    if files >= PRIME_MAX_FILES or budget <= 0 or self._prime_stop.is_set():
                        return
                    try:
                        if not entry.is_file(follow_symlinks=False):
                            continue
                        if rules.is_ignored_entry(directory, entry.name, is_dir=False):
                            continue
                        path = _join(directory, entry.name)
                        with self._lock:
                            if path in self._known:
                                continue
                        before = os.lstat(entry.path)
                        if before.st_ctime_ns >= limit_ns or before.st_size > PRIME_MAX_FILE:
                            continue
                        state = file_state(Path(entry.path))
                        after = os.lstat(entry.path)
                    except OSError:
                        continue
                    if (after.st_ctime_ns, after.st_size, after.st_ino) != (before.st_ctime_ns, before.st_size, before.st_ino):
                        continue
                    with self._lock:
                        self._known.setdefault(path, state)
                    files += 1
                    budget -= before.st_size
                    if files % 256 == 0:
                        time.sleep(0.001)  # let the watcher thread have the GIL
        except Exception as exc:
            log.warning("watcher_priming_failed", error=repr(exc))
        finally:
            self.primed_files = files
            self._primed.set()

    # ---------------------------------------------------------------- the tree walk

    def _walk(self, top: str, before_scan: Callable[[str], bool] | None = None) -> Iterator[tuple[str, list[os.DirEntry[str]]]]:
        """Non-ignored directories under `top` (itself included) with their entries, top-down.

        `before_scan(dir)` runs before a directory is listed (to place its watch first, so nothing
        created in between is missed); returning False skips the directory.
        """
        stack = [top]
        while stack:
            directory = stack.pop()
            absolute = self.root / directory if directory else self.root
            if directory and os.path.lexists(absolute / VENV_MARKER):
                self._mark_venv(directory)
                continue
            if before_scan is not None and not before_scan(directory):
                continue
            try:
                with os.scandir(absolute) as it:
                    entries = list(it)
            except OSError:
                continue
            if any(entry.name == ".gitignore" for entry in entries):
                self._reload_gitignore(directory)
            rules = self._rules
            yield directory, entries
            for entry in entries:
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    continue
                if is_dir and not rules.is_ignored_entry(directory, entry.name, is_dir=True):
                    stack.append(_join(directory, entry.name))

    # ---------------------------------------------------------------- inotify mode

    def _start_inotify(self) -> None:
        from watchdog.observers.inotify_c import InotifyFD  # Linux only; ImportError elsewhere

        fd = InotifyFD()  # our own instance: its limits and lifetime are ours, not watchdog's singleton
        self._fd = fd
        self._barrier_dir = Path(tempfile.mkdtemp(prefix="ralph-supervise-barrier-"))
        self._barrier_wd = fd.add_callback(os.fsencode(self._barrier_dir), self._barrier_mask(), self._callbacks, 0)
        for _directory, _entries in self._walk("", self._add_watch):
            pass
        fd.start()

    @staticmethod
    def _mask() -> int:
        from watchdog.observers.inotify_c import InotifyConstants as C

        return (
            C.IN_CREATE | C.IN_DELETE | C.IN_MOVED_FROM | C.IN_MOVED_TO | C.IN_MODIFY | C.IN_CLOSE_WRITE
            | C.IN_DONT_FOLLOW | C.IN_ONLYDIR | C.IN_EXCL_UNLINK
        )

    @staticmethod
    def _barrier_mask() -> int:
        from watchdog.observers.inotify_c import InotifyConstants as C

        return C.IN_CREATE | C.IN_ONLYDIR

    def _add_watch(self, directory: str) -> bool:
        """Place one non-recursive watch. Limit errors propagate (the caller falls back); a directory
        that vanished or cannot be read is skipped."""
        fd = self._fd
        if fd is None:
            return False
        with self._lock:
            if directory in self._dir_wd:
                return True  # already watched (a re-walk after an overflow, a directory seen twice)
        path = os.fsencode(self.root / directory if directory else self.root)
        try:
            wd = fd.add_callback(path, self._mask(), self._callbacks, 0)  # type: ignore[attr-defined]
        except OSError as exc:
            if exc.errno in _LIMIT_ERRNOS:
                raise
            return False
        with self._lock:
            old = self._wd_dir.get(wd)
            if old is not None and old != directory:
                self._dir_wd.pop(old, None)
            self._wd_dir[wd] = directory
            self._dir_wd[directory] = wd
        return True

    def _drop_watches_under(self, top: str) -> None:
        fd = self._fd
        with self._lock:
            gone = [(d, wd) for d, wd in self._dir_wd.items() if _under(d, top)]
            for directory, wd in gone:
                del self._dir_wd[directory]
                self._wd_dir.pop(wd, None)
        if fd is not None and gone:
            try:
                fd.remove_callbacks([(wd, 0) for _d, wd in gone])  # type: ignore[attr-defined]
            except OSError:
                pass

    def _on_watch_deleted(self, wd: int) -> None:
        with self._lock:
            directory = self._wd_dir.pop(wd, None)
            if directory is not None and self._dir_wd.get(directory) == wd:
                del self._dir_wd[directory]

    def _on_queue_overflow(self) -> None:
        """The kernel dropped events: say so, and re-walk so new directories get their watches."""
        log.warning("watcher_overflow", root=str(self.root))
        with self._lock:
            self._segment.events_lost = True
        try:
            for _d, _e in self._walk("", self._add_watch):
                pass
        except OSError as exc:
            self._fall_back_async(exc)

    def _on_inotify_event(self, event: object) -> None:
        try:
            self._handle_event(event)
        except OSError as exc:
            if exc.errno in _LIMIT_ERRNOS:
                self._fall_back_async(exc)
            else:
                log.warning("watcher_event_failed", error=repr(exc))
        except Exception as exc:  # never let one odd event kill the reader thread
            log.warning("watcher_event_failed", error=repr(exc))

    def _handle_event(self, event: object) -> None:
        wd: int = event.wd  # type: ignore[attr-defined]
        name = os.fsdecode(event.name)  # type: ignore[attr-defined]
        if wd == self._barrier_wd:
            if name.startswith("b") and name[1:].isdigit():
                self._barrier_reached(int(name[1:]))
            return
        if wd == self._calls_wd and wd is not None:
            if event.is_close_write:  # type: ignore[attr-defined]
                self._on_call_notice(name)
            return
        with self._lock:
            directory = self._wd_dir.get(wd)
        if directory is None or not name:
            return
        path = _join(directory, name)
        created = bool(event.is_create or event.is_moved_to)  # type: ignore[attr-defined]
        gone = bool(event.is_delete or event.is_moved_from)  # type: ignore[attr-defined]
        if event.is_directory:  # type: ignore[attr-defined]
            self._handle_directory_event(path, created=created, gone=gone)
            return
        if name == ".gitignore":
            self._reload_gitignore(directory)
        if name == VENV_MARKER and created and directory:
            self._drop_watches_under(directory)
            self._mark_venv(directory)
            return
        with self._lock:
            if self._rules.is_ignored_entry(directory, name, is_dir=False):
                return
        if gone:
            self._record(path, ABSENT)
        elif created or event.is_close_write:  # type: ignore[attr-defined]
            self._evaluate(path, created=created)
        elif event.is_modify:  # type: ignore[attr-defined]
            last = self._last_hashed.get(path)
            if last is None or time.monotonic() - last >= MODIFY_REHASH_S:
                self._evaluate(path)
            else:
                with self._lock:
                    self._stale.add(path)

    def _handle_directory_event(self, path: str, *, created: bool, gone: bool) -> None:
        with self._lock:
            ignored = self._rules.is_ignored(path, is_dir=True)
        if gone:
            self._drop_watches_under(path)
            with self._lock:
                known = [p for p, state in self._known.items() if _under(p, path) and state != ABSENT]
            for file_path in known:
                self._record(file_path, ABSENT)
            return
        if not created or ignored:
            return
        for directory, entries in self._walk(path, self._add_watch):
            rules = self._rules
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        continue
                except OSError:
                    continue
                if not rules.is_ignored_entry(directory, entry.name, is_dir=False):
                    self._evaluate(_join(directory, entry.name), created=True)

    def _sync(self, then: Callable[[], None] | None = None) -> None:
        """Wait until every event the kernel queued before now has been handled (a barrier file).
        `then` runs exactly once right at the barrier, on the watcher thread, before any later event
        (or here, after a timeout, in polling mode, or when inotify is gone)."""
        if self._mode == "polling" or self._fd is None or self._barrier_dir is None:
            if self._mode == "polling" and self._started and not self._stopped:
                self._scan()
            if then is not None:
                then()
            return
        target = self._barrier(then)
        if target is not None:
            with self._barrier_cond:
                self._barrier_cond.wait_for(lambda: self._barrier_seen >= target or self._mode != "inotify",
                                            SYNC_TIMEOUT_S)
        with self._barrier_cond:
            late = self._at_barrier.pop(target, None) if target is not None else then
        if late is not None:
            late()

    def _barrier(self, then: Callable[[], None] | None) -> int | None:
        """Put barrier number N into the event queue now (`then` runs when the watcher reaches it)."""
        barrier_dir = self._barrier_dir
        if barrier_dir is None:
            return None
        with self._sync_lock:  # numbers enter the queue in order: reaching N means every earlier one passed
            with self._barrier_cond:
                if self._mode != "inotify":  # fell back meanwhile (another thread): no watcher would reach it
                    return None
                self._barrier_sent += 1
                target = self._barrier_sent
                if then is not None:
                    self._at_barrier[target] = then
            marker = barrier_dir / f"b{target}"
            try:
                marker.touch()
                marker.unlink()
            except OSError:
                pass  # the waiter times out and runs `then` itself
        return target

    def mark_call_end(self, key: str) -> None:
        """Call `key` just ended: its segment closes at this point of the event queue. Does not wait
        (call it the moment the end is known: what the loop writes next is no longer the call's). Any
        thread: a fall-back to polling meanwhile leaves the close to `end_iteration`, as polling does."""
        if self._mode == "inotify" and self._fd is not None:
            self._barrier(lambda: self._close_segment(key))

    def _barrier_reached(self, number: int) -> None:
        with self._barrier_cond:
            due = [self._at_barrier.pop(n) for n in sorted(self._at_barrier) if n <= number]
        for then in due:
            try:
                then()
            except Exception as exc:  # noqa: BLE001 - never kill the reader thread
                log.warning("watcher_barrier_failed", error=repr(exc))
        with self._barrier_cond:
            self._barrier_seen = max(self._barrier_seen, number)
            self._barrier_cond.notify_all()

    def _close_inotify(self) -> None:
        fd = self._fd
        self._fd = None
        if fd is None:
            return
        try:
            if fd.is_alive():  # type: ignore[attr-defined]
                fd.stop()  # type: ignore[attr-defined]
                if fd is not threading.current_thread():
                    fd.join(timeout=5)  # type: ignore[attr-defined]
            else:  # never started: close() would wait for a reader that never ran and leak the fd
                fd._is_reading = False  # type: ignore[attr-defined]
                fd.close()  # type: ignore[attr-defined]
        except OSError:
            pass
        with self._lock:
            self._wd_dir.clear()
            self._dir_wd.clear()
        self._barrier_wd = None
        self._calls_wd = None

    # ---------------------------------------------------------------- fallback and polling mode

    def _fall_back(self, exc: BaseException) -> None:
        """Switch to polling once, with one warning."""
        with self._lock:
            if self._fell_back or self._stopped:
                return
            self._fell_back = True
            watched = set(self._dir_wd) if self._fd is not None and self._fd.is_alive() else None  # type: ignore[attr-defined]
        self._close_inotify()
        with self._barrier_cond:  # `_barrier` reads the mode under it: no barrier enters a dead queue after this
            self._mode = "polling"
            self._barrier_cond.notify_all()
        log.warning(
            "watcher_fallback",
            root=str(self.root),
            reason=str(exc) or type(exc).__name__,
            errno=getattr(exc, "errno", None),
            poll_interval=self.poll_interval,
            hint="raise fs.inotify.max_user_watches / max_user_instances to watch with inotify",
        )
        self._start_polling(watched)
        if watched is not None:  # mid-run: events still queued in the closed instance are lost
            with self._lock:
                self._segment.events_lost = True

    def _fall_back_async(self, exc: BaseException) -> None:
        """From the inotify thread itself: switch in another thread (it stops and joins this one)."""
        threading.Thread(target=self._fall_back, args=(exc,), name="watcher-fallback", daemon=True).start()

    def _start_polling(self, watched: set[str] | None = None) -> None:
        """`watched`: when falling back mid-run, the directories inotify covered; files found in any
        other directory appeared after their directory's watch failed, so they count as created."""
        self._scan(initial=True, watched=watched)
        self._poll_stop.clear()
        self._poll_thread = threading.Thread(target=self._poll_loop, name="workspace-poll", daemon=True)
        self._poll_thread.start()

    def _poll_loop(self) -> None:
        """Scan every `poll_interval`, but rest at least twice as long as a scan takes, so a huge tree
        costs at most about a third of one core (polling a big tree is expensive)."""
        pause = self.poll_interval
        while not self._poll_stop.wait(pause):
            began = time.monotonic()
            try:
                self._scan()
            except Exception as exc:
                log.warning("watcher_scan_failed", error=repr(exc))
            pause = max(self.poll_interval, 2 * (time.monotonic() - began))

    def _scan(self, *, initial: bool = False, watched: set[str] | None = None) -> None:
        """One polling pass: stat every non-ignored file, settle what differs from the last pass."""
        with self._scan_lock:
            seen: dict[str, tuple[int, int, int]] = {}
            for directory, entries in self._walk(""):
                rules = self._rules
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            continue
                        if rules.is_ignored_entry(directory, entry.name, is_dir=False):
                            continue
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    seen[_join(directory, entry.name)] = (st.st_mtime_ns, st.st_size, st.st_ino)
            previous = self._snapshot
            self._snapshot = seen
            if initial:
                if watched is not None:
                    for path in seen:
                        if path.rpartition("/")[0] not in watched:
                            self._evaluate(path, created=True)
                return
            for path, sig in seen.items():
                old = previous.get(path)
                if old is None:
                    self._evaluate(path, created=True)
                elif old != sig:
                    self._evaluate(path)
            for path in previous.keys() - seen.keys():
                self._record(path, ABSENT)
