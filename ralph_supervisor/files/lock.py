"""`supervisor.lock`: one supervisor per state folder (an flock; the file holds the owner's PID).

    >>> lock = InstanceLock(Path("/tmp/ralph-example/.ralph-supervise") / NAME)
    >>> lock.acquire()          # doctest: +SKIP  (AlreadyRunning when another supervisor holds it)
    >>> running_supervisor_pid(Path("/tmp/ralph-example/.ralph-supervise"))   # doctest: +SKIP
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from dataclasses import dataclass
from pathlib import Path

NAME = "supervisor.lock"


def path(state_dir: Path) -> Path:
    return state_dir / NAME


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
    try:
        fd = os.open(path(state_dir), os.O_RDONLY | os.O_CLOEXEC)
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
