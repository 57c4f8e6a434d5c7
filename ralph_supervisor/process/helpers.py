"""The supervisor's own helper processes: hooks, and git for the snapshots and the report.

They are descendants of the supervisor (it is their parent, and the subreaper) but not part of the loop's
tree: a pause must not freeze them, a stop must not kill them. A helper is known by its pid only once it
was forked, so the tree could scan in that moment, take it for the loop's, and freeze it for good. So a
helper is started under `lock`, and the tree scans and signals under the same lock: it sees either no
helper or a registered one.

    >>> proc = HELPERS.popen(["git", "--version"], stdout=subprocess.DEVNULL)   # doctest: +SKIP
    >>> proc.pid in HELPERS                                                       # doctest: +SKIP
    True
    >>> HELPERS.run(["/usr/bin/git", "--version"], env={}).out                   # doctest: +SKIP
    b'git version 2.39.5\n'

`run` is the lean way for a short command whose output is read whole (git, four times a snapshot): its input,
output and errors are memory files, not pipes, so there is no reading loop, and posix_spawn starts it. Its
parent-side cost is about a third of Popen's and communicate's.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
from dataclasses import dataclass
from typing import Any

from ralph_supervisor.store import write_all


@dataclass(frozen=True)
class Finished:
    """A command `Helpers.run` ran: its exit code (Popen's convention: -N for signal N), stdout and stderr."""

    code: int
    out: bytes
    err: bytes


class TimedOut(Exception):
    """`Helpers.run`'s command did not end in time; it was killed."""


class Helpers:
    """The helper pids, and the lock that keeps their starts apart from the tree's scans."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._pids: set[int] = set()

    def popen(self, *args: Any, **kwargs: Any) -> subprocess.Popen[Any]:
        """`subprocess.Popen(...)`, registered as a helper before the tree can see it. Call `done` once
        it has been waited for (its pid may then be reused)."""
        with self.lock:
            proc: subprocess.Popen[Any] = subprocess.Popen(*args, **kwargs)
            self._pids.add(proc.pid)
        return proc

    def run(self, argv: list[str], *, env: dict[str, str], input: bytes | None = None,
            timeout: float | None = None) -> Finished:
        """Run `argv[0]` (a bare name is looked up in our PATH) with `input` on stdin and wait for it. Raises
        OSError where it cannot start, TimedOut after `timeout` seconds (killed and waited for). The working
        folder is ours (git takes `-C`), and the descriptors it inherits are the ones without close-on-exec:
        Python makes none."""
        files = [os.memfd_create(name, os.MFD_CLOEXEC) for name in ("stdin", "stdout", "stderr")]
        try:
            if input:
                write_all(files[0], input)
                os.lseek(files[0], 0, os.SEEK_SET)
            actions = [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(files)]
            with self.lock:
                spawn = os.posix_spawn if "/" in argv[0] else os.posix_spawnp
                pid = spawn(argv[0], argv, env, file_actions=actions)
                self._pids.add(pid)
            try:
                status = _wait(pid, timeout)
            finally:
                self.done(pid)
            return Finished(os.waitstatus_to_exitcode(status), _read_all(files[1]), _read_all(files[2]))
        finally:
            for fd in files:
                os.close(fd)

    def done(self, pid: int) -> None:
        with self.lock:
            self._pids.discard(pid)

    def wait_briefly(self, proc: subprocess.Popen[bytes], timeout: float) -> tuple[int | None, str]:
        """Wait at most `timeout` seconds for a helper started with `stderr=PIPE` (killed after that), and
        say it is done: (its exit code, None when it was killed for the time; its last line on stderr)."""
        try:
            try:
                _, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                return None, ""
        finally:
            self.done(proc.pid)
        lines = (err or b"").decode("utf-8", "replace").strip().splitlines()
        return proc.returncode, lines[-1] if lines else ""

    def __contains__(self, pid: object) -> bool:
        return pid in self._pids

    def pids(self) -> frozenset[int]:
        with self.lock:
            return frozenset(self._pids)


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    return os.pread(fd, size, 0) if size else b""


def _wait(pid: int, timeout: float | None) -> int:
    """The wait status of our child `pid`, waited for at most `timeout` seconds (then killed: TimedOut)."""
    if timeout is not None:
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:  # a kernel before 5.3: wait without a bound, as Popen.wait() does
            pidfd = -1
        if pidfd >= 0:
            try:
                poller = select.poll()
                poller.register(pidfd, select.POLLIN)
                ready = poller.poll(timeout * 1000)
            finally:
                os.close(pidfd)
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise TimedOut(f"{timeout:.0f} s")
    return os.waitpid(pid, 0)[1]


HELPERS = Helpers()
"""The one registry of this process's helpers."""
