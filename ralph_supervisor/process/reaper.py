"""The one place that reaps the tree's processes.

The supervisor is the child subreaper: every orphan of the tree re-parents to it and turns into a
zombie of ours when it exits. Something must reap them all, and only one thing may for each process:
a second waiter would steal exit statuses, or reap a recycled PID by mistake.

The supervisor also runs short commands of its own (git, notifications, hooks) through subprocess,
whose Popen.wait() must get the real exit status. `waitpid(-1)` would steal it (Popen then silently
reports 0). So the Reaper peeks first (waitid with WNOWAIT) and only reaps what is the tree's:

- A process in the supervisor's own session is never the tree's: the tree starts in a new session
  (spawn() uses setsid) and no process can join an existing session. subprocess.run() children stay
  in our session, so they are left to their Popen.
- A pid given to leave_alone() (a hook started with start_new_session, say) is left to its owner.
- Either kind is reaped after all once it has been a zombie for `foreign_grace` seconds: nobody is
  waiting for it, and a zombie must not linger forever.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections import OrderedDict

import structlog

from ralph_supervisor.process.helpers import HELPERS
from ralph_supervisor.process.linux import read_stat
from ralph_supervisor.process.procfs import children_of

log = structlog.get_logger(__name__)


def exit_code_of(status: int) -> int:
    """The shell's convention: the exit code, or 128+N when signal N killed the process."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


class Reaper:
    """Reaps the tree's exited processes and remembers the last `memory` exit codes."""

    def __init__(self, memory: int = 4096, foreign_grace: float = 30.0) -> None:
        self._memory = memory
        self._foreign_grace = foreign_grace
        self._session = os.getsid(0)
        self._me = os.getpid()
        self._codes: OrderedDict[int, int] = OrderedDict()
        self._adopted: dict[int, subprocess.Popen[bytes]] = {}
        self._left_alone: set[int] = set()
        self._foreign_since: dict[int, float] = {}
        self._lock = threading.Lock()
        self._reaping = threading.Lock()
        self.helper_in_the_way = False
        """The last `reap(helpers_first=True)` stopped at a helper's exit: what lies behind it is not reaped yet."""

    def adopt(self, popen: subprocess.Popen[bytes]) -> None:
        """Let the Reaper set popen.returncode when it reaps that child (the spawned command).

        Without this, Popen would later waitpid() the PID itself (in poll() or its finaliser) and
        could reap an unrelated process that reused the number.
        """
        with self._lock:
            if popen.pid in self._codes:
                popen.returncode = self._codes[popen.pid]
            else:
                self._adopted[popen.pid] = popen

    def leave_alone(self, pid: int) -> None:
        """A child of ours in another session whose owner waits for it itself (e.g. a hook)."""
        with self._lock:
            self._left_alone.add(pid)

    def reap(self, now: float | None = None, *, helpers_first: bool = False) -> dict[int, int]:
        """Reap every exited process that is the tree's, without blocking; return {pid: exit code}.

        `helpers_first` (a SIGCHLD, which a helper's exit sends as often as the tree's): when the first
        waitable child is a helper of ours (git, a hook), whose owner waits for it at once, stop there instead
        of listing every zombie of ours (a /proc read per thread and per child, four times a snapshot), and
        say so in `helper_in_the_way`: the caller looks again a moment later, when the helper is gone."""
        now = time.monotonic() if now is None else now
        reaped: dict[int, tuple[int, int]] = {}
        self.helper_in_the_way = False
        with self._reaping:
            while True:
                try:
                    info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                except ChildProcessError:
                    break
                if info is None:
                    break
                if self._is_ours(info.si_pid, now):
                    if not self._collect(info.si_pid, reaped):
                        break
                    continue
                if helpers_first and info.si_pid in HELPERS:
                    self.helper_in_the_way = True
                    break
                # The first waitable child is someone else's: find the others by listing our zombies.
                for pid in _zombie_children(self._me):
                    if pid != info.si_pid and self._is_ours(pid, now):
                        self._collect(pid, reaped)
                break
            self._forget_departed_foreigners()
        if reaped:
            self._remember(reaped)
        return {pid: code for pid, (code, _) in reaped.items()}

    def exit_code(self, pid: int) -> int | None:
        """The remembered exit code of a reaped pid (None: not reaped yet, or forgotten)."""
        with self._lock:
            return self._codes.get(pid)

    # --- inside --------------------------------------------------------------------------------

    def _is_ours(self, pid: int, now: float) -> bool:
        with self._lock:
            if pid in self._adopted:
                return True
            foreign = pid in self._left_alone
        if not foreign:
            stat = read_stat(pid)
            foreign = stat is not None and stat.sid == self._session
        if not foreign:
            return True
        since = self._foreign_since.setdefault(pid, now)
        if now - since >= self._foreign_grace:
            log.warning("reaped_unclaimed_child", pid=pid, zombie_for_s=round(now - since, 1))
            return True
        return False

    def _collect(self, pid: int, reaped: dict[int, tuple[int, int]]) -> bool:
        try:
            got, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # its owner was quicker
            return False
        if got == 0:
            return False
        reaped[pid] = (exit_code_of(status), os.waitstatus_to_exitcode(status))
        self._foreign_since.pop(pid, None)
        return True

    def _remember(self, reaped: dict[int, tuple[int, int]]) -> None:
        with self._lock:
            for pid, (code, popen_code) in reaped.items():
                self._codes.pop(pid, None)
                self._codes[pid] = code
                self._left_alone.discard(pid)
                popen = self._adopted.pop(pid, None)
                if popen is not None:
                    popen.returncode = popen_code  # Popen's convention: -N for signal N
            while len(self._codes) > self._memory:
                self._codes.popitem(last=False)

    def _forget_departed_foreigners(self) -> None:
        """Drop bookkeeping for foreign children their owners have reaped (keeps the sets bounded)."""
        if not self._foreign_since and len(self._left_alone) < 64:
            return
        for pid in list(self._foreign_since):
            if not _is_child(pid, self._me):
                del self._foreign_since[pid]
        with self._lock:
            for pid in list(self._left_alone):
                if not _is_child(pid, self._me):
                    self._left_alone.discard(pid)


def _is_child(pid: int, parent: int) -> bool:
    stat = read_stat(pid)
    return stat is not None and stat.ppid == parent


def _zombie_children(parent: int) -> list[int]:
    """Our exited, unreaped children (any thread's), from /proc/PID/task/*/children."""
    pids: list[int] = []
    for child in children_of(parent) or []:
        stat = read_stat(child)
        if stat is not None and stat.state == "Z":
            pids.append(stat.pid)
    return pids
