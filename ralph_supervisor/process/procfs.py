"""/proc, read directly, with nothing but `os`: the reads every part needs, in one place.

`ls`, `watch --all` and the web page must start fast, and `process/linux.py` pulls in psutil (for the boot
time its `create_time` values must agree with) and structlog, a tenth of a second. So the raw reads live here,
and `linux.py` (the tree walks, signals, pidfds), `registry.py` and the reaper all use these.

    >>> read_start_ticks(os.getpid()) is not None
    True
    >>> children_of(os.getpid())
    []
"""

from __future__ import annotations

import os


def read_raw_stat(pid: int) -> bytes | None:
    """The bytes of /proc/PID/stat, or None when the process is gone (or unreadable)."""
    return read_small(f"/proc/{pid}/stat")


def read_small(path: str | os.PathLike[str], size: int = 4096, *, limit: int | None = None) -> bytes | None:
    """A small file of the kernel's (/proc, a cgroup's), whole or its first `limit` bytes, or None when it cannot
    be read. One read when it fits in `size`: os.open/os.read cost about half of a Python file object, and scans
    read hundreds of these."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        chunk = size if limit is None else min(size, limit)
        data = os.read(fd, chunk)
        if len(data) < chunk:  # all of it in one read
            return data
        parts, got = [data], len(data)
        while limit is None or got < limit:
            part = os.read(fd, size if limit is None else min(size, limit - got))
            if not part:
                break
            parts.append(part)
            got += len(part)
        return b"".join(parts)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks since boot: with the pid, a process's identity),
    or None when there is no such process."""
    raw = read_raw_stat(pid)
    if not raw:
        return None
    try:
        return int(raw[raw.rindex(b")") + 2 :].split()[19])
    except (ValueError, IndexError):
        return None


def children_of(pid: int) -> list[int] | None:
    """The children of a process from /proc/PID/task/*/children; None where the kernel lacks that file.

    Cheap (one read per thread of `pid`) but, as the kernel documents, it may miss a child that is
    being re-parented at that instant: good for sampling, not for stopping (stop re-scans fully).
    """
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for task in tasks:
        raw = read_small(f"/proc/{pid}/task/{task}/children")
        if raw is None:
            if task == str(pid) and os.path.exists(f"/proc/{pid}/task/{task}") \
                    and not os.path.exists(f"/proc/{pid}/task/{task}/children"):
                return None
            continue
        found.extend(_pids(raw) or ())
    return found


def own_children() -> list[int] | None:
    """This process's children that may be the loop's: those of its main thread. The loop is started from the
    main thread (process/spawn.py), and an orphan handed to a subreaper goes to its first live thread, the main
    one, as do the children of a thread that ends; a child of another thread is a helper (git from the snapshots'
    thread). One read instead of one a thread. None where the kernel lacks the file."""
    pid = os.getpid()
    raw = read_small(f"/proc/{pid}/task/{pid}/children")
    pids = _pids(raw) if raw is not None else None
    return pids if pids is not None else children_of(pid)


def _pids(raw: bytes) -> list[int] | None:
    """The pids of a children file; None where it holds anything else."""
    try:
        return list(map(int, raw.split()))
    except ValueError:
        return None


_boot_id: str | None = None


def boot_id() -> str:
    """This boot's random id: a record from an earlier boot names processes that no longer exist. Read once: it
    is the same until the machine starts again ("" where it cannot be read, and read again next time)."""
    global _boot_id
    if _boot_id is None:
        try:
            with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
                _boot_id = fh.read().strip()
        except OSError:
            return ""
    return _boot_id
