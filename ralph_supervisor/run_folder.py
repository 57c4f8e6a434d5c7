"""A private folder for one supervisor run, in the runtime directory: where the shims live.

The shims (evidence/shims.py) are on the child's `PATH`, so the agent can read them; they must not be in
the workspace (a `git clean -fdx` would take them mid-run) nor in the state folder (a sandbox binds the
shims read-only into the box, and must never bind the state folder that holds the snapshots and the
breaker). So each run gets a folder of its own in the user's runtime directory:

    $XDG_RUNTIME_DIR/ralph-supervise/runs/run-PID-TICKS/  (a tmpfs per user, emptied at the last logout;
                                                          the registry's entries are beside `runs/`)
    /tmp/ralph-supervise-UID/run-PID-TICKS/               (where there is none: a private 0700 folder)

removed when the supervisor exits. The run holds an flock on the folder's `.lock` as long as it lives, so a
run that was killed with SIGKILL leaves a folder the next run recognises as dead (its lock is free) and
removes. The lock, not the PID in the name, is what tells: a supervisor in another PID namespace (a
container sharing /tmp, a test under `unshare --pid`) cannot see the others' PIDs, but the kernel's locks
are one for all. A folder without a lock (being made this instant, or from an older version) is removed
only when it is older than a minute and its PID and TICKS name no live process.

    folder = RunFolder.create()
    ...
    folder.remove()
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ralph_supervisor.registry import start_ticks

FOLDER = "ralph-supervise"
PREFIX = "run-"


class RunFolderError(Exception):
    """No private folder could be made (the caller goes on without what it was for)."""


def runtime_base(env: Mapping[str, str] | None = None) -> Path:
    """`$XDG_RUNTIME_DIR/ralph-supervise/runs` when the variable names a folder we can write, else
    `/tmp/ralph-supervise-UID` (`$TMPDIR` for /tmp)."""
    env = os.environ if env is None else env
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime) and os.path.isdir(runtime) and os.access(runtime, os.W_OK | os.X_OK):
        return Path(runtime) / FOLDER / "runs"
    tmp = env.get("TMPDIR", "")
    base = Path(tmp) if tmp and os.path.isabs(tmp) and os.path.isdir(tmp) else Path("/tmp")
    return base / f"{FOLDER}-{os.getuid()}"


def _private_dir(path: Path) -> None:
    """Make `path` a folder of ours alone (0700), refusing one that another user or a symlink holds:
    in a shared /tmp, someone else could have made it first to read or replace our shims."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # ralph-supervise/ too: ours alone
        path.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError as exc:
        raise RunFolderError(f"cannot make {path}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise RunFolderError(f"{path} is not a folder of this user's (a symlink, or made by someone else)")
    if stat.S_IMODE(info.st_mode) & 0o077:
        try:
            os.chmod(path, 0o700)
        except OSError as exc:
            raise RunFolderError(f"cannot make {path} private: {exc.strerror or exc}") from None


LOCK = ".lock"
UNLOCKED_GRACE_SECONDS = 60.0


def _is_dead(folder: Path, now: float) -> bool:
    """A `run-PID-TICKS` folder whose supervisor is gone: its lock is free (or, with no lock, it is old and
    its PID and TICKS name no live process)."""
    try:
        fd = os.open(folder / LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        try:
            pid_text, ticks_text = folder.name[len(PREFIX):].split("-", 1)
            pid, ticks = int(pid_text), int(ticks_text)
            old = now - os.lstat(folder).st_mtime > UNLOCKED_GRACE_SECONDS
        except (ValueError, OSError):
            return False  # not one of ours, or gone: leave it
        return old and start_ticks(pid) != ticks
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: its supervisor lives
    finally:
        os.close(fd)
    return True


@dataclass(frozen=True)
class RunFolder:
    """This run's private folder (and the lock that says it is alive)."""

    path: Path
    lock_fd: int = -1

    @classmethod
    def create(cls, env: Mapping[str, str] | None = None) -> RunFolder:
        base = runtime_base(env)
        _private_dir(base)
        now = time.time()
        for name in _names(base):  # what runs killed with SIGKILL left behind
            if name.startswith(PREFIX) and _is_dead(base / name, now):
                shutil.rmtree(base / name, ignore_errors=True)
        pid = os.getpid()
        path = base / f"{PREFIX}{pid}-{start_ticks(pid) or 0}"
        shutil.rmtree(path, ignore_errors=True)
        _private_dir(path)
        try:
            fd = os.open(path / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            raise RunFolderError(f"cannot lock {path / LOCK}: {exc.strerror or exc}") from None
        return cls(path, fd)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        if self.lock_fd >= 0:
            try:
                os.close(self.lock_fd)
            except OSError:
                pass


def _names(base: Path) -> list[str]:
    try:
        return os.listdir(base)
    except OSError:
        return []
