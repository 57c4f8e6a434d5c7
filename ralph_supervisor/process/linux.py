"""The Linux primitives the process layer stands on: prctl, /proc/PID/stat, identity-checked signals.

Why our own /proc reader next to psutil: one read of `/proc/PID/stat` gives everything a tree walk
needs (parent, state, name, start time, CPU) in a single syscall trio, where psutil would read the
same file several times per process. Pausing 200 processes in well under 100 ms depends on that.
psutil stays the source of truth for the boot time, so `create_time` values here equal psutil's
`Process.create_time()` for the same process.

Identity: a process is (pid, start time). The start time is kept in clock ticks since boot
(`start_ticks`), which never changes and needs no wall clock; `create_time` (seconds since the epoch,
psutil's definition) is derived from it and converts back exactly.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psutil
import structlog

from ralph_supervisor.process.procfs import (  # noqa: F401 - the tree's readers import them from here too
    boot_id,
    children_of,
    own_children,
    read_raw_stat,
    read_start_ticks,
)

log = structlog.get_logger(__name__)

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37

CLOCK_TICKS: int = os.sysconf("SC_CLK_TCK")
BOOT_TIME: float = psutil.boot_time()
"""Read once: /proc/stat's btime can move with wall-clock adjustments; identity must not."""

_libc: ctypes.CDLL | None
try:
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    _prctl = _libc.prctl
    _prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    _prctl.restype = ctypes.c_int
except (OSError, AttributeError):  # not Linux / no libc prctl
    _libc = None


def _call_prctl(option: int, arg: int) -> None:
    if _libc is None:
        raise OSError(errno.ENOSYS, "prctl is not available")
    if _prctl(option, arg, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def set_child_subreaper(enable: bool = True) -> bool:
    """Become (or stop being) the child subreaper, so orphaned descendants re-parent to us, not to init.

    Returns False instead of raising where the kernel or platform does not support it.
    """
    try:
        _call_prctl(PR_SET_CHILD_SUBREAPER, 1 if enable else 0)
    except OSError as exc:
        log.warning("subreaper_unavailable", error=str(exc))
        return False
    return True


def is_child_subreaper() -> bool:
    """Whether this process is currently the child subreaper."""
    if _libc is None:
        return False
    value = ctypes.c_int(0)
    if _prctl(PR_GET_CHILD_SUBREAPER, ctypes.addressof(value), 0, 0, 0) != 0:
        return False
    return value.value != 0


def set_parent_death_signal(sig: int) -> None:
    """Ask the kernel to send `sig` to this process when its parent THREAD dies.

    Meant for a freshly forked child (see spawn.py). Raises OSError when prctl fails.
    """
    _call_prctl(PR_SET_PDEATHSIG, int(sig))


@dataclass(frozen=True)
class ProcStat:
    """One parsed line of /proc/PID/stat: what a tree walk needs about a process."""

    pid: int
    name: str
    state: str
    ppid: int
    pgid: int
    sid: int
    cpu_ticks: int
    """utime + stime + cutime + cstime: own CPU plus that of children it has reaped."""
    start_ticks: int
    code: tuple[int, int] = (0, 0)
    """(startcode, endcode): where the program text is mapped. An exec changes it even when the name
    stays the same (a pyenv `python3` shim that execs python3); (0, 0) when the kernel hides it."""

    @property
    def create_time(self) -> float:
        return ticks_to_create_time(self.start_ticks)

    @property
    def alive(self) -> bool:
        """Zombies (Z) and dead (X) processes are no longer members of anything."""
        return self.state not in ("Z", "X", "x")


def ticks_to_create_time(start_ticks: int) -> float:
    """psutil's create_time for a start time in clock ticks since boot."""
    return start_ticks / CLOCK_TICKS + BOOT_TIME


def create_time_to_ticks(create_time: float) -> int:
    """The inverse of ticks_to_create_time (exact for values it produced)."""
    return round((create_time - BOOT_TIME) * CLOCK_TICKS)


def parse_stat(raw: bytes | str) -> ProcStat:
    """Parse /proc/PID/stat. The name sits in parentheses and may itself contain ') (' and spaces."""
    data = raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else raw
    open_paren = data.index(b"(")
    close_paren = data.rindex(b")")
    rest = data[close_paren + 2 :].split()
    # rest[n] is field n+3 of proc(5): state=3, ppid=4, pgrp=5, session=6, utime=14 .. cstime=17, starttime=22,
    # startcode=26, endcode=27
    return ProcStat(
        pid=int(data[:open_paren]),
        name=data[open_paren + 1 : close_paren].decode("utf-8", "replace"),
        state=rest[0].decode("ascii", "replace"),
        ppid=int(rest[1]),
        pgid=int(rest[2]),
        sid=int(rest[3]),
        cpu_ticks=int(rest[11]) + int(rest[12]) + int(rest[13]) + int(rest[14]),
        start_ticks=int(rest[19]),
        code=(int(rest[23]), int(rest[24])) if len(rest) > 24 else (0, 0),
    )


def read_stat(pid: int) -> ProcStat | None:
    """The stat of one process, or None when it is gone (or unreadable)."""
    raw = read_raw_stat(pid)
    if not raw:
        return None
    try:
        return parse_stat(raw)
    except (ValueError, IndexError):
        return None


def descendant_stats(root: int, exclude: Callable[[int], bool] | None = None) -> list[ProcStat] | None:
    """The live descendants of `root`, parents first, following children files; None if unsupported. Those
    `exclude` names are left out with their descendants, without reading them."""
    found: list[ProcStat] = []
    queue = [root]
    seen = {root}
    index = 0
    while index < len(queue):
        pid = queue[index]
        kids = own_children() if pid == root == os.getpid() else children_of(pid)
        index += 1
        if kids is None:
            return None
        for kid in kids:
            if kid in seen or (exclude is not None and exclude(kid)):
                continue
            seen.add(kid)
            stat = read_stat(kid)
            if stat is not None and stat.alive:
                found.append(stat)
                queue.append(kid)
    return found


def all_stats() -> Iterator[ProcStat]:
    """Every process in the system right now (a snapshot that races with forks: callers re-scan)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = read_stat(int(entry))
            if stat is not None:
                yield stat


def read_environ(pid: int) -> list[bytes]:
    """A process's environment entries (NAME=value); empty when gone or not ours."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return fh.read().split(b"\0")
    except OSError:
        return []


def signal_if_same(pid: int, start_ticks: int, sig: int) -> bool:
    """Send `sig` to `pid` only if it is still the process that started at `start_ticks`.

    With a pidfd the check cannot race with PID reuse: the pidfd pins one process, and if the
    process holding `pid` after the pidfd is open has the expected start time, it is the pinned one.
    Returns True when the signal was delivered to that process.
    """
    if pid <= 1 or pid == os.getpid():
        return False
    fd = _pidfd_open(pid)
    try:
        if read_start_ticks(pid) != start_ticks:
            return False
        try:
            if fd is not None:
                signal.pidfd_send_signal(fd, sig)
            else:
                os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    finally:
        if fd is not None:
            os.close(fd)


_pidfd_supported = hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")


def _pidfd_open(pid: int) -> int | None:
    """A pidfd for pid, or None when pidfds are unsupported (fallback: check-then-kill, tiny race)."""
    global _pidfd_supported
    if not _pidfd_supported:
        return None
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EINVAL):
            _pidfd_supported = False
        return None


PIDFD_INFO_EXIT = 1 << 3
PIDFD_INFO_SIZE_VER0 = 64
PIDFD_GET_INFO = (3 << 30) | (PIDFD_INFO_SIZE_VER0 << 16) | (0xFF << 8) | 11
"""_IOWR(PIDFS_IOCTL_MAGIC 0xFF, 11, struct pidfd_info) with the 64-byte first version of the struct
(include/uapi/linux/pidfd.h, Linux 6.13+; the kernel reads the size from the request, so the first
version is accepted by every later kernel). `exit_code` sits at offset 60 (Linux 6.15+)."""
_EXIT_CODE_OFFSET = 60


def open_pidfd(pid: int) -> int | None:
    """A pidfd for `pid` (readable once it exits), or None when it is gone or pidfds are unsupported."""
    return _pidfd_open(pid)


def pidfd_wait_status(fd: int) -> int | None:
    """The wait status (as waitpid gives it) of the exited process behind a pidfd, or None.

    Linux 6.15+ keeps it for every pidfd holder once the process is reaped (PIDFD_INFO_EXIT), so a
    process that is not our child tells its exit code too. Before the reap, or on older kernels: None.
    """
    import fcntl
    import struct

    buf = bytearray(PIDFD_INFO_SIZE_VER0)
    struct.pack_into("Q", buf, 0, PIDFD_INFO_EXIT)
    try:
        fcntl.ioctl(fd, PIDFD_GET_INFO, buf, True)
    except OSError:  # ENOTTY/EINVAL before 6.13, ESRCH: reaped and no exit info kept
        return None
    (mask,) = struct.unpack_from("Q", buf, 0)
    if not mask & PIDFD_INFO_EXIT:
        return None
    (status,) = struct.unpack_from("i", buf, _EXIT_CODE_OFFSET)
    return status


def zombie_wait_status(pid: int, start_ticks: int) -> int | None:
    """The wait status of an exited, not yet reaped process (field 52 of /proc/PID/stat), or None."""
    raw = read_raw_stat(pid)
    if not raw:
        return None
    try:
        fields = raw[raw.rindex(b")") + 2 :].split()
        if fields[0] not in (b"Z", b"X") or int(fields[19]) != start_ticks or len(fields) < 50:
            return None
        return int(fields[49])
    except (ValueError, IndexError):
        return None


def describe_wait_status(status: int | None) -> tuple[int | None, int | None]:
    """(exit code, signal) from a wait status: one of them is set, or both None when unknown. Pure."""
    if status is None:
        return None, None
    if status & 0x7F == 0:
        return (status >> 8) & 0xFF, None
    if status & 0x7F != 0x7F:
        return None, status & 0x7F
    return None, None


def process_age(start_ticks: int) -> float:
    """Seconds since a process started, on the kernel's own clock (boot time in ticks): unlike
    `create_time`, free of the wall clock's steps and of the boot time's whole-second rounding."""
    return time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / CLOCK_TICKS
