"""PIDs of a box's own PID namespace, mapped to ours (`NSpid`).

A loop boxed with `--unshare-pid` sees its own PIDs: a shim's notice names the call by the PID the box
gave it. The kernel lists each process's PIDs from our namespace inward in `/proc/PID/status` (`NSpid:`),
so the host PID of a box PID is the process whose PID namespace is the box's and whose innermost PID is
the one named.

    ns = pid_namespace_of(box_init_pid)         # "pid:[4026532845]"
    host = host_pid(ns, 7)                      # the host PID of the box's PID 7, or None
"""

from __future__ import annotations

import os

from ralph_supervisor.process.linux import children_of


def pid_namespace(pid: int) -> str | None:
    """The PID namespace a process is in (`pid:[inode]`), or None when it is gone."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def ns_pids(pid: int) -> tuple[int, ...]:
    """The process's PIDs from our namespace inward (`NSpid`); () when it is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"NSpid:"):
                    return tuple(int(part) for part in line.split()[1:])
    except (OSError, ValueError):
        pass
    return ()


def parse_ns_pids(status: str) -> tuple[int, ...]:
    """`NSpid:` of a `/proc/PID/status` text. Pure."""
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            try:
                return tuple(int(part) for part in line.split()[1:])
            except ValueError:
                return ()
    return ()


def box_namespace(outer: int) -> str | None:
    """The PID namespace of the box whose bubblewrap runs as `outer` (its first child is the box's init),
    or None when that is not (yet, or any longer) a namespace of its own."""
    mine = pid_namespace(outer)
    for child in children_of(outer) or []:
        theirs = pid_namespace(child)
        if theirs is not None and theirs != mine:
            return theirs
    return None


def host_pid(namespace: str, inner: int) -> int | None:
    """Our PID of the process that is `inner` in `namespace`; None when no live process is."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    for entry in entries:
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid_namespace(pid) != namespace:
            continue
        pids = ns_pids(pid)
        if len(pids) >= 2 and pids[-1] == inner and pids[0] == pid:
            return pid
    return None


def inner_pid(pid: int) -> int | None:
    """The innermost PID of a live process of ours (itself where it is in no namespace of its own)."""
    pids = ns_pids(pid)
    return pids[-1] if pids else None


__all__ = ["box_namespace", "host_pid", "inner_pid", "ns_pids", "parse_ns_pids", "pid_namespace"]
