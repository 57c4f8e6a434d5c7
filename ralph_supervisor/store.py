"""The state folder on disk: atomic JSON files, the single-instance lock, the daily spend.

Every file we rewrite is written atomically (temp file, fsync, rename), so a crash or a full disk
leaves either the old or the new content, never half of one. Files we only read back (state,
daily spend) are validated; a corrupt one is moved aside with a warning, never trusted.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

STATE_FILE = "state.json"
HISTORY_FILE = "history.jsonl"
EVENTS_FILE = "events.jsonl"
CHILD_LOG = "child.log"
LEDGER_FILE = "ledger.json"
ESCALATION_FILE = "escalation.md"
CONTROL_SOCKET = "control.sock"
LOCK_FILE = "supervisor.lock"
TREE_FILE = "tree.json"
DAILY_FILE = "daily-spend.json"


def iso_utc(epoch: float | None = None) -> str:
    """ISO-8601 UTC with milliseconds, e.g. 2026-11-30T22:24:00.123Z (CONTRACT section 2)."""
    moment = datetime.fromtimestamp(time.time() if epoch is None else epoch, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def utc_day(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%d")


def prepare_state_dir(state_dir: Path) -> None:
    """Create the state folder with a `.gitignore` of `*` so it never shows in the user's git status."""
    state_dir.mkdir(parents=True, exist_ok=True)
    ignore = state_dir / ".gitignore"
    if not ignore.exists():
        try:
            ignore.write_text("*\n")
        except OSError:
            pass


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write `data` to `path` atomically: a unique temp file in the same folder, fsync, rename, fsync
    of the folder. A reader (or a crash) sees the old content or the new, never half of one."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


class CorruptFile(Exception):
    """A state file we cannot trust; `moved_to` is where it was put aside (None if it could not be)."""

    def __init__(self, path: Path, problem: str, moved_to: Path | None) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem
        self.moved_to = moved_to


def move_aside(path: Path) -> Path | None:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    try:
        os.replace(path, target)
        return target
    except OSError:
        return None


def read_json_object(path: Path) -> dict[str, Any] | None:
    """Read a JSON object; None when the file does not exist; CorruptFile (after moving it aside) when bad."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CorruptFile(path, f"unreadable ({exc.strerror or exc})", None) from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # bad UTF-8, bad JSON, huge ints, deep nesting
        raise CorruptFile(path, f"not valid JSON ({str(exc)[:200]})", move_aside(path)) from None
    if not isinstance(data, dict):
        raise CorruptFile(path, "not a JSON object", move_aside(path))
    return data


# ---------------------------------------------------------------------------------------------
# One supervisor per state folder.


class AlreadyRunning(Exception):
    def __init__(self, pid: int | None, state_dir: Path) -> None:
        who = f"pid {pid}" if pid else "another process"
        super().__init__(f"another supervisor ({who}) is already running for {state_dir}")
        self.pid = pid


@dataclass
class InstanceLock:
    """An flock on `supervisor.lock`; the file holds the owner's PID for the error message."""

    path: Path
    fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                os.close(fd)
                raise
            pid = _read_owner(fd)
            os.close(fd)
            raise AlreadyRunning(pid, self.path.parent) from None
        try:  # the PID is a courtesy for the "already running" message; the flock is the lock
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass
        self.fd = fd

    def release(self) -> None:
        """Unlock. The PID stays in the file: whether anyone runs is the flock's answer, not the text's."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _read_owner(fd: int, patience: float = 0.3) -> int | None:
    """The lock holder's PID. It writes it just after taking the lock (over a dead predecessor's),
    so wait a moment for a live one to appear."""
    deadline = time.monotonic() + patience
    while True:
        try:
            pid = int(os.pread(fd, 32, 0).decode().strip() or 0) or None
        except (ValueError, OSError):
            pid = None
        if (pid is not None and _alive(pid)) or time.monotonic() >= deadline:
            return pid
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running_supervisor_pid(state_dir: Path) -> int | None:
    """The PID of the supervisor holding the lock of this state folder, or None when none runs."""
    path = state_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            try:
                return int(os.pread(fd, 32, 0).decode().strip() or 0) or None
            except (ValueError, OSError):
                return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# Daily token spend, across runs.


@dataclass(frozen=True)
class DailySpend:
    date: str
    tokens: int

    def today(self, epoch: float) -> DailySpend:
        day = utc_day(epoch)
        return self if self.date == day else DailySpend(day, 0)


def load_daily_spend(path: Path, now: float) -> tuple[DailySpend, str | None]:
    """Today's spend so far, and a warning when the file was corrupt (it is moved aside, not trusted)."""
    try:
        data = read_json_object(path)
    except CorruptFile as exc:
        return DailySpend(utc_day(now), 0), f"{exc}; moved to {exc.moved_to}" if exc.moved_to else str(exc)
    if data is None:
        return DailySpend(utc_day(now), 0), None
    date, tokens = data.get("date"), data.get("tokens")
    if not isinstance(date, str) or not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
        moved = move_aside(path)
        return DailySpend(utc_day(now), 0), f"{path}: bad date or tokens field; moved to {moved}"
    return DailySpend(date, tokens).today(now), None


def add_daily_spend(path: Path, tokens: int, now: float) -> DailySpend:
    """Add one iteration's tokens to today's total (re-read first: several loops may share the file)."""
    spend, _ = load_daily_spend(path, now)
    spend = DailySpend(spend.date, spend.tokens + max(0, tokens))
    atomic_write_json(path, {"date": spend.date, "tokens": spend.tokens})
    return spend
