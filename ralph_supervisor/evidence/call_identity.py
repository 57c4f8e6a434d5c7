"""Which processes are agent calls: each process image recognised once (`agents/recognize.py`), from any thread.

The sampler asks on every tick, a stop's `refuse_process` on the pool while the stop runs, the gate at a
hold: the answers are cached per process image behind one lock of the cache's own, never held while /proc
is read.

    identities = Identities(["claude", "codex"])
    name, cmdline, call = identities.of(stat)       # call: None when the process is no agent call
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

from ralph_supervisor.agents import ADAPTERS
from ralph_supervisor.agents.recognize import SHELLS, Known, Recognised, known, recognise, script_operand, stem
from ralph_supervisor.evidence.shims import Notice
from ralph_supervisor.process.linux import ProcStat
from ralph_supervisor.process.procfs import read_small

IDENTITY_CACHE = 4096
CMDLINE_BYTES = 65536

Identity = tuple[str, tuple[str, ...], Recognised | None]
"""A process's name, its command line, and the agent call it is (None: none)."""


class Identities:
    """The agent calls among processes, cached per process image (any thread)."""

    def __init__(self, names: Sequence[str]) -> None:
        self._known: Known = known(tuple(names), ADAPTERS.values())
        self._cache: dict[tuple[int, int, str, tuple[int, int]], Identity] = {}
        self._lock = threading.Lock()

    def of(self, stat: ProcStat) -> Identity:
        """Name, command line and the agent call it is (None: not one). The name alone does not tell an exec: a
        pyenv `python3` shim (bash) execs python3 under the same name, so the key holds where the code is mapped."""
        key = (stat.pid, stat.start_ticks, stat.name, stat.code)
        with self._lock:
            found = self._cache.get(key)
        if found is None:
            cmdline = read_cmdline(stat.pid)
            call = recognise(stat.name, cmdline, self._known)
            if call is None and cmdline:
                exe, script = resolved_paths(stat.pid, cmdline)
                if exe or script:
                    call = recognise(stat.name, cmdline, self._known, exe=exe, script=script)
            found = (stat.name, cmdline, call)
            with self._lock:
                self._cache[key] = found
                if len(self._cache) > IDENTITY_CACHE:
                    self._cache.clear()
        return found

    def is_call(self, stat: ProcStat) -> bool:
        return self.of(stat)[2] is not None

    def announces_call(self, notice: Notice) -> bool:
        """Does a shim's notice name a call (not `--version`, `mcp list`, ...)?"""
        return recognise(notice.name, notice.argv, self._known) is not None


def cmdline_of(pid: int) -> tuple[tuple[str, ...], bool] | None:
    """A process's arguments, empty ones kept, and whether they were read whole (the first 64 KiB: a command
    line of any size is read, never walked whole); None when it is gone."""
    raw = read_small(f"/proc/{pid}/cmdline", limit=CMDLINE_BYTES)
    if not raw:
        return None
    whole = len(raw) < CMDLINE_BYTES
    parts = raw.split(b"\0")
    if whole and parts[-1] == b"":
        parts.pop()
    return tuple(part.decode("utf-8", "replace") for part in parts), whole


def read_cmdline(pid: int) -> tuple[str, ...]:
    """A process's non-empty arguments (the first 64 KiB); () when it is gone."""
    found = cmdline_of(pid)
    return tuple(part for part in found[0] if part) if found is not None else ()


def resolved_paths(pid: int, cmdline: Sequence[str]) -> tuple[str, str]:
    """For an interpreter (not a shell: its scripts are the loop's own), the executable it runs and its
    script with symlinks resolved (a symlink loop resolves to itself): ("", "") for anything else, or when
    the process is gone. Read only when the command line alone names no agent."""
    operand = script_operand(cmdline)
    if operand is None or stem(cmdline[0]) in SHELLS:
        return "", ""
    try:
        exe = os.path.realpath(os.readlink(f"/proc/{pid}/exe"))
        script = os.path.realpath(os.path.join(os.readlink(f"/proc/{pid}/cwd"), operand))
    except OSError:
        return "", ""
    return exe, script
