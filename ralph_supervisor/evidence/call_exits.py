"""A call's process until it exits: the pidfd we hold on it, the pipes' marks around it, the exits thread.

The moment a call's process exits, the exits thread (waiting on the calls' pidfds) marks its end: what the
loop writes right after its agent exited (a `cp`, a `git commit`) must land after the call's end in the
workspace's event queue, and its output is what lies between its start and end marks. Three threads touch
a call's marks: the workspace watcher's (a notice: the start marks), the exits thread (the end marks) and
the event loop (the call begins): `CallMarks` owns them, and the last call's end marks, behind one lock.

    marks = CallMarks(tap.marks)
    stat, running = hold_announced(pid, at, key, mark)     # or hold_sampled(stat)
    exits = Exits(on_exit)                  # on_exit(running) on the exits thread
    exits.watch(running.fd, running)
    status = exit_status(running)           # the wait status once it is over (None: not known)
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from ralph_supervisor.agents.recognize import Container
from ralph_supervisor.evidence.iterations import CallEvidence
from ralph_supervisor.process.linux import (
    ProcStat,
    open_pidfd,
    pidfd_wait_status,
    process_age,
    read_stat,
    zombie_wait_status,
)

log = structlog.get_logger(__name__)


@dataclass
class RunningCall:
    """What we hold on one call's process: made when its notice is read (or the sampler finds it), before
    the event loop begins the call, so that its exit is marked in the workspace queue the moment it happens.
    The fields below `parent` are the loop's; the marks, the exit and the call are `CallMarks`'."""

    key: str
    start_ticks: int | None
    fd: int | None
    parent: str
    """The name of the process that started it (`timeout`: a signal death is a timeout)."""
    mark: int | None = None
    """The PID its shim named itself by (its pending mark); None when no shim announced it."""
    container: Container | None = None
    """Where the call runs when its process is a container front-end (`docker run … claude -p`)."""
    container_pid: int | None = None
    """The container's first process on this machine, once its engine told."""
    asked_engine: bool = False
    call: CallEvidence | None = None
    exited: bool = False
    """The exits thread saw it exit (and marked its end)."""
    exited_at: float | None = None
    """When it saw that (wall clock): output read later is not the call's while it ran."""
    start_marks: dict[str, int] | None = None
    """The pipes' stream offsets when its notice was read (usually before the agent printed; for a call over
    before that, its end: all it printed lies between the floor and there)."""
    floor_marks: dict[str, int] | None = None
    """The offsets at the last call's end: output after them, read after the announcement, is this call's too."""
    end_marks: dict[str, int] | None = None
    """The same, the moment it exited."""
    exit_marks: dict[str, int] | None = None
    """The offsets the exits thread read at its exit, whether or not its notice was read yet."""


def floor_marks(last_end: dict[str, int] | None, start: dict[str, int] | None) -> dict[str, int]:
    """Where a call's output can begin at the earliest: where the call before it ended, and for the first
    call the stream's start (its quick words may lie before its start mark, which is taken when its notice
    is read: a busy machine reads it late). What lies past the floor counts only when read after the
    call's announcement, so the loop's own words before it stay the loop's.

    >>> floor_marks(None, {"stdout": 120})
    {'stdout': 0}
    """
    return dict(last_end) if last_end is not None else dict.fromkeys(start or {}, 0)


class CallMarks:
    """The calls' stream marks and exits, and the last call's end marks, behind one lock (any thread)."""

    def __init__(self, marks: Callable[[], dict[str, int]]) -> None:
        self._marks = marks
        self._lock = threading.Lock()
        self._last_end: dict[str, int] | None = None

    def announced(self, running: RunningCall, marks: dict[str, int]) -> None:
        """The watcher's thread, at its notice (`marks` taken first: the agent is still starting)."""
        # Over already (found gone, or its exit seen): all it printed is in the pipes now, while `marks`, taken
        # before we looked, may predate its words. So its end is read again, after it was known to be over.
        fresh = self._marks() if running.exited else None
        with self._lock:  # the exits thread may be marking its end right now
            if running.exited:  # over before we looked (a call of milliseconds): what it printed lies before
                over = running.exit_marks if running.exit_marks is not None else fresh  # its exit, past the
                running.end_marks = over if over is not None else marks  # floor (the last call's end, the
                running.start_marks = running.end_marks  # stream's start for the first), read after its notice
                running.floor_marks = floor_marks(self._last_end, running.end_marks)
                self._last_end = running.end_marks
                return
            running.start_marks = marks
            running.floor_marks = floor_marks(self._last_end, marks)  # a busy machine reads the notice late
            self._last_end = marks

    def gone(self, running: RunningCall) -> None:
        """Any thread, before anyone else knows of `running`: over and reaped already."""
        with self._lock:
            running.exited_at = time.time()
            running.exited = True

    def exited(self, running: RunningCall) -> None:
        """The exits thread: its end marks, and the call's (routing sees the end before the event loop does)."""
        marks = self._marks()
        with self._lock:  # the watcher's thread may be reading its notice, the loop beginning it
            running.exit_marks = marks
            if running.start_marks is not None:
                running.end_marks = self._last_end = marks
            running.exited_at = time.time()
            running.exited = True
            call = running.call
            if call is not None:
                call.end_marks = running.end_marks
                call.ended_wall = running.exited_at

    def attach(self, running: RunningCall, call: CallEvidence) -> None:
        """The event loop began `running`'s call: it may have exited before, or be exiting now."""
        with self._lock:
            call.end_marks = running.end_marks
            running.call = call

    def exit_of(self, running: RunningCall) -> tuple[bool, float | None]:
        """Whether the exits thread saw it exit, and when."""
        with self._lock:
            return running.exited, running.exited_at


def hold_announced(pid: int, at: float | None, key: str, mark: int | None) -> tuple[ProcStat | None, RunningCall]:
    """The process a notice of time `at` announced, if it is still the one that wrote it, and a pidfd on it
    (`fd` None: over and reaped already)."""
    fd = open_pidfd(pid)
    stat = read_stat(pid)
    if stat is not None and at is not None and process_age(stat.start_ticks) < time.time() - at - 0.05:
        stat = None  # younger than its own notice: the pid was recycled, the call itself is long gone
    if stat is None and fd is not None:
        os.close(fd)
        fd = None
    parent = read_stat(stat.ppid) if stat is not None else None
    return stat, RunningCall(key, stat.start_ticks if stat else None, fd, parent.name if parent is not None else "",
                             mark=mark)


def hold_sampled(found: ProcStat) -> RunningCall | None:
    """A pidfd on a process the sampler found, if it is still that process (None: gone already)."""
    fd = open_pidfd(found.pid)
    if fd is not None and (read_stat(found.pid) or found).start_ticks != found.start_ticks:
        os.close(fd)
        fd = None
    if fd is None:
        return None
    parent = read_stat(found.ppid)
    return RunningCall("", found.start_ticks, fd, parent.name if parent is not None else "")


def exit_status(running: RunningCall, pid: int | None) -> int | None:
    """The wait status of the call's process `pid`, once it is over: its pidfd's (Linux 6.15+), else its
    zombie's while its parent has not reaped it; None when neither tells."""
    if running.fd is None:
        return None
    status = pidfd_wait_status(running.fd)
    if status is None and pid is not None and running.start_ticks is not None:
        status = zombie_wait_status(pid, running.start_ticks)
    if status is None:
        status = pidfd_wait_status(running.fd)  # reaped between the two looks
    return status


class Exits:
    """A thread waiting on the calls' pidfds. The moment a call exits, `on_exit(item)` runs here, not
    after whatever the event loop is busy with."""

    def __init__(self, on_exit: Callable[[Any], None]) -> None:
        self._on_exit = on_exit
        self._poll = select.epoll()
        self._wake_r, self._wake_w = os.pipe()
        self._poll.register(self._wake_r, select.EPOLLIN)
        self._items: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="ralph-call-exits", daemon=True)
        self._thread.start()

    def watch(self, fd: int, item: Any) -> None:
        with self._lock:
            self._items[fd] = item
            self._poll.register(fd, select.EPOLLIN)

    def forget(self, fd: int) -> None:
        with self._lock:
            if self._items.pop(fd, None) is not None:
                try:
                    self._poll.unregister(fd)
                except OSError:
                    pass

    def _run(self) -> None:
        while True:
            try:
                ready = self._poll.poll()
            except InterruptedError:
                continue
            except (OSError, ValueError):
                return
            for fd, _mask in ready:
                if fd == self._wake_r:
                    return
                with self._lock:
                    item = self._items.pop(fd, None)
                    if item is not None:
                        self._poll.unregister(fd)
                if item is not None:
                    try:
                        self._on_exit(item)
                    except Exception as exc:  # noqa: BLE001 - never kill the thread
                        log.warning("call_exit_failed", error=repr(exc))

    def close(self) -> None:
        os.write(self._wake_w, b"x")
        self._thread.join(timeout=5)
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
        self._poll.close()
