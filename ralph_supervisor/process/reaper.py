"""The one place that calls waitpid.

The supervisor is the child subreaper: every orphan of the tree re-parents to it and turns into a
zombie of ours when it exits. Something must reap them all, and only one thing may: a second waiter
(Popen.wait, psutil's wait) would steal exit statuses from it, or reap a recycled PID by mistake.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections import OrderedDict

import structlog

log = structlog.get_logger(__name__)


def exit_code_of(status: int) -> int:
    """The shell's convention: the exit code, or 128+N when signal N killed the process."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


class Reaper:
    """Reaps every child that has exited and remembers the last `memory` exit codes."""

    def __init__(self, memory: int = 4096) -> None:
        self._memory = memory
        self._codes: OrderedDict[int, int] = OrderedDict()
        self._adopted: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()

    def adopt(self, popen: subprocess.Popen[bytes]) -> None:
        """Let the Reaper set popen.returncode when it reaps that child.

        Without this, Popen would later waitpid() the PID itself (in poll() or its finaliser) and
        could reap an unrelated process that reused the number.
        """
        with self._lock:
            if popen.pid in self._codes:
                code = self._codes[popen.pid]
                popen.returncode = code  # exact signal lost once remembered; the code is what we report
            else:
                self._adopted[popen.pid] = popen

    def reap(self) -> dict[int, int]:
        """Reap every exited child without blocking; return {pid: exit code} of this round."""
        reaped: dict[int, int] = {}
        raw: dict[int, int] = {}
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            except InterruptedError:  # pragma: no cover - PEP 475 retries, kept for safety
                continue
            if pid == 0:
                break
            reaped[pid] = exit_code_of(status)
            raw[pid] = os.waitstatus_to_exitcode(status)
        if reaped:
            with self._lock:
                for pid, code in reaped.items():
                    self._codes.pop(pid, None)
                    self._codes[pid] = code
                    popen = self._adopted.pop(pid, None)
                    if popen is not None:
                        popen.returncode = raw[pid]  # Popen's convention: -N for signal N
                while len(self._codes) > self._memory:
                    self._codes.popitem(last=False)
        return reaped

    def exit_code(self, pid: int) -> int | None:
        """The remembered exit code of a reaped pid (None: not reaped yet, or forgotten)."""
        with self._lock:
            return self._codes.get(pid)

