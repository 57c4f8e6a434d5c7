"""Whether a process is held still: the one answer the pause, `status` and the tests share.

A paused tree is held one of two ways. Where the loop has a cgroup, the pause freezes it (`cgroup.freeze`):
its processes wait in the kernel's freezer in state `S`, like any sleeper, so their state cannot tell; the
cgroup's `cgroup.events` says `frozen 1` once every process in it (and in the cgroups below) is held. On the
signal path (no cgroup, or a process that left it) a process is held by SIGSTOP: state `T`. "Held" is
either, and nothing else decides it:

    >>> held(os.getpid())                          # any process: its state, else its own cgroup's events
    False
    >>> held(4242, "S", frozen=frozenset({4242}))  # many at once: the processes of a cgroup known to be frozen
    True
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path

from ralph_supervisor.process.cgroup import events_frozen, unified_mount
from ralph_supervisor.process.procfs import read_raw_stat

STOPPED_STATES = ("T", "t")
"""Stopped by a signal (`T`), or by a tracer (`t`)."""


def held(pid: int, state: str | None = None, *, frozen: Collection[int] = ()) -> bool:
    """Whether `pid` is held still: stopped by a signal, or in a frozen cgroup. `state`: its state letter when
    already read; `frozen`: processes known to be in a frozen cgroup (one read for the whole tree). False for a
    process that is gone or a zombie (it holds nothing)."""
    if pid in frozen:
        return True
    if state is None:
        state = _state(pid)
        if state is None:
            return False
    if state in STOPPED_STATES:
        return True
    if state in ("Z", "X", "x"):
        return False
    folder = cgroup_of(pid)
    return folder is not None and events_frozen(folder) is True


def cgroup_of(pid: int) -> Path | None:
    """The process's cgroup v2 folder: its `0::` line of /proc/PID/cgroup, under where cgroup2 is mounted
    (None when it has none, or is gone)."""
    mount = _mount()
    try:
        with open(f"/proc/{pid}/cgroup", "rb") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith(b"0::") and mount is not None:
            return mount / os.fsdecode(line[3:]).lstrip("/")
    return None


_MOUNT: list[Path | None] = []


def _mount() -> Path | None:
    """Where cgroup2 is mounted, read once (it does not move while we run)."""
    if not _MOUNT:
        try:
            with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
                _MOUNT.append(unified_mount(fh.read()))
        except OSError:
            return None
    return _MOUNT[0]


def _state(pid: int) -> str | None:
    raw = read_raw_stat(pid)
    if not raw:
        return None
    try:
        return raw[raw.rindex(b")") + 2:].split(maxsplit=1)[0].decode()
    except (ValueError, IndexError):
        return None
