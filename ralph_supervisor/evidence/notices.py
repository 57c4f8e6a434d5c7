"""The shims' notices, read: which call a notice announces, and whether a shim wrote it.

A shim leaves a notice file in `shims/calls/` (see `shims.py`); the workspace watcher's inotify queue tells
us its name in order with the agent's file events, which is what opens the call's workspace segment at the
right place. Outside a box that file is the notice. In a box (`--sandbox`) anything in the box can write
into `calls/`, and so forge a notice or delete one before it is read. There the notice that counts is the
shim's record in the channel (a FIFO the box can write to but not read, delete or replace): the file is
only the mark of its place in the queue, and the source of its full arguments when they agree with the
record and with the process's own command line. So in a box:

- a file whose record never came is no shim's (`agent_call_forged`), and hides no process from the sampler;
- a record whose file was deleted still counts: read at the file's event (its event is queued before the
  file can go), or by the tick a moment later when no file was ever made (a refusal at once: the event
  loop reads the channel whenever it is readable, so a stop counts its refusals);
- a notice names the box's PID, mapped to ours through `NSpid`; a call notice whose process is neither the
  shim nor the agent it names is forged (the loop's shell naming itself), and so is a `refused` or
  `missing` notice whose process is still there and no shim. A call over before its notice is read cannot
  be mapped: it gets PID 0, which names no process, so it begins and ends at once; when its file is gone
  too, its arguments are lost, and it is taken for a call (not `--version`: we cannot tell).

What a process in the box can still do is add records (checked as above); what it cannot do is take one
away. One lock guards what the watcher's thread and the event loop share (the channel, the records read
and not yet taken, the PIDs announced lately); /proc is read outside it.

    reader = NoticeReader(shims, channel, box_namespace)
    found = reader.take("4242")                  # the watcher's thread, at a notice file's event
    later = reader.strays(now, watched=True)     # the tick: notices no event brought
    refused = reader.refusals()                  # the event loop, when the channel is readable
    reader.announced(process)                    # the sampler: leave this process to its notice
"""

from __future__ import annotations

import dataclasses
import os
import stat
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from ralph_supervisor.evidence.call_identity import cmdline_of
from ralph_supervisor.evidence.shims import Notice, Record, ShimDir, parse_record, read_notice
from ralph_supervisor.process.linux import ProcStat, process_age
from ralph_supervisor.process.namespace import host_pid, inner_pid

log = structlog.get_logger(__name__)

ANNOUNCED_KEPT = 256
STRAY_NOTICE_SECONDS = 1.0
"""A notice the watcher thread has not taken after this long is read by the tick (a lost event, a record
whose file was never made)."""
UNREAD_NOTICE_SECONDS = 10.0
"""A notice file this old that is still there is one no reader can take (the tick takes the others after
STRAY_NOTICE_SECONDS): it no longer stands for a call still to begin."""
LINE_BYTES = 8192
"""A line of the channel longer than this is no record (the rest of it is dropped up to its newline)."""
PENDING_KEPT = 1024
RECORDS_PER_PID = 8


@dataclass(frozen=True)
class Announcement:
    """A notice as we act on it: its PID ours (0: gone before it could be mapped), and `mark`, the PID its
    shim named itself by (the box's), which names its pending mark."""

    notice: Notice
    mark: int
    unknown_args: bool = False
    """Its arguments are lost (a boxed notice whose file and process were both gone): taken for a call's."""


class NoticeChannel:
    """The read end of the box's channel: held open (read and write, so it never reads as closed and a
    shim's open never waits), then made write-only for everyone else. Not thread-safe: its reader's lock."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        os.fchmod(self.fd, 0o200)  # the box (same user) may write, never read; a read-only bind: no chmod back
        self._partial = b""

    def drain(self) -> list[Record]:
        """The records written since the last drain (never waits)."""
        data = bytearray()
        while self.fd >= 0:
            try:
                chunk = os.read(self.fd, 65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
            if not chunk:
                break
            data += chunk
        lines, self._partial = split_lines(self._partial + bytes(data))
        return [record for record in map(parse_record, lines) if record is not None]

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


def split_lines(data: bytes, limit: int = LINE_BYTES) -> tuple[list[bytes], bytes]:
    """Complete lines (without their newline) and the unfinished rest, kept only while it could still be a
    record (a longer one is dropped: its end is dropped with the line it ends). Pure.

    >>> split_lines(b"a\\nb\\nc")
    ([b'a', b'b'], b'c')
    """
    *lines, rest = data.split(b"\n")
    lines = [line for line in lines if len(line) <= limit]
    return lines, rest if len(rest) <= limit else b"\0" * (limit + 1)


def announcer_args(cmdline: Sequence[str], notice: Notice, is_shim: Callable[[str], bool]) -> tuple[str, ...] | None:
    """Where `cmdline` is the shim that wrote `notice` or the agent it `exec`ed (its name, path or shim among
    the first arguments: a script agent runs as `INTERPRETER PATH ...`, through `env` as `env node PATH ...`),
    the arguments after that one; None when it is neither. Pure.

    >>> announcer_args(("node", "/opt/claude", "-p", "go"), Notice("call", "claude", 7, None, "/opt/claude", ()),
    ...                lambda arg: False)
    ('-p', 'go')
    """
    for index, arg in enumerate(cmdline[:3]):
        if is_shim(arg) or (notice.target and arg == notice.target) or os.path.basename(arg) == notice.name:
            return tuple(cmdline[index + 1:])
    return None


def trusted_args(told: tuple[str, ...] | None, seen: tuple[str, ...] | None, whole: bool = True) -> tuple[str, ...]:
    """A boxed call's arguments: its notice file's (`told`, complete) where the process's own (`seen`, as far
    as /proc showed them) agree, else the process's; the file's when the process is gone. Pure.

    >>> trusted_args(("-p", "a long prompt"), ("-p", "a lo"), whole=False)
    ('-p', 'a long prompt')
    >>> trusted_args(("--version",), ("-p", "go"))
    ('-p', 'go')
    """
    if seen is None:
        return told or ()
    if told is None:
        return seen
    if whole:
        return told if told == seen else seen
    head = len(seen) - 1
    agree = head >= 0 and told[:head] == seen[:head] and len(told) > head and told[head].startswith(seen[head])
    return told if agree or not seen else seen


class NoticeReader:
    """Reads the notices (files; in a box the channel's records too) into announcements. Any thread: the
    watcher's (`take`) and the event loop (`strays`, `announced`)."""

    def __init__(self, shims: ShimDir, channel: NoticeChannel | None = None,
                 box_namespace: Callable[[], str | None] | None = None) -> None:
        self.shims = shims
        self.channel = channel
        self.box_namespace = box_namespace
        self._lock = threading.Lock()
        self._pending: dict[int, list[tuple[Record, float]]] = {}
        """Records read from the channel and not taken yet, by the PID they name (with when they were read)."""
        self._announced: dict[int, float] = {}
        """PID named -> announcement time of the notices taken lately (the sampler leaves those alone)."""
        self._in_hand = 0
        """Notices the watcher's thread took (their files are gone) and the event loop has not had yet."""

    # ------------------------------------------------------------------ reading

    def take(self, name: str, *, to_loop: bool = False) -> Announcement | None:
        """A notice file's event (or the tick's look at one): read it, and in a box its record. `to_loop`: the
        watcher's thread, handing it to the event loop, where `arrived()` says it came (`waiting()` till then)."""
        if to_loop:
            with self._lock:
                self._in_hand += 1  # before its file goes: the notice is waiting all along
        found = self._take(name)
        if found is None and to_loop:
            self.arrived()
        return found

    def arrived(self) -> None:
        """The event loop: a notice the watcher's thread took has come (or never will)."""
        with self._lock:
            self._in_hand -= 1

    def _take(self, name: str) -> Announcement | None:
        path = self.shims.calls / name
        if self.channel is None:
            notice = read_notice(path, self._note)  # noted before the file goes: the sampler finds one or the other
            return Announcement(notice, notice.pid) if notice is not None else None
        told = read_notice(path)
        try:
            pid = int(name)
        except ValueError:
            return None
        with self._lock:
            self._drain()
            records = [r for r, _ in self._pending.pop(pid, [])]
            # the one its file describes, else the last told (a PID named twice: the others go)
            record = next((r for r in records if told is not None and r.describes(told)), records[-1] if records else None)
            seen_before = record is None and pid in self._announced
            if record is not None:
                self._note_locked(record.pid, record.at)
        if record is None:
            if told is not None and not seen_before:
                self._forged(told, "a notice file no shim told the channel of: ignored")
            return None
        return self._from_box(record, told if told is not None and record.describes(told) else None)

    def strays(self, now: float, watched: bool, final: bool = False) -> list[Announcement]:
        """Tick: notices no watcher thread took (polling mode, an event lost in an overflow; in a box, a record
        whose file was never made). `watched`: the watcher reads the folder, so only the old ones; `final`:
        the loop is over, so every record, however young."""
        try:
            entries = sorted(os.scandir(self.shims.calls), key=lambda e: e.name)
        except OSError:
            entries = []
        found: list[Announcement] = []
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISREG(info.st_mode) or (watched and now - info.st_mtime < STRAY_NOTICE_SECONDS):
                continue  # a shim writes a plain file; what the box planted instead is no notice
            taken = self.take(entry.name)
            if taken is not None:
                found.append(taken)
        if self.channel is not None:
            with self._lock:
                self._drain()
                due = float("inf") if final else now - STRAY_NOTICE_SECONDS
                late = [records[-1][0] for records in self._pending.values() if records[-1][1] <= due]
                for record in late:  # the last one told for its PID (a PID named twice: the others go)
                    del self._pending[record.pid]
                    self._note_locked(record.pid, record.at)
            found += [a for a in (self._from_box(record, None) for record in late) if a is not None]
        return found

    def refusals(self) -> list[Announcement]:
        """The event loop, when the channel is readable: read it, and take its refusals at once (they open no
        segment, so they need no place in the queue, and a stop counts them while the tick rests)."""
        if self.channel is None:
            return []
        with self._lock:
            self._drain()
            refused = [records[-1][0] for records in self._pending.values() if records[-1][0].kind == "refused"]
            for record in refused:
                del self._pending[record.pid]
                self._note_locked(record.pid, record.at)
        return [a for a in (self._from_box(record, None) for record in refused) if a is not None]

    def waiting(self, now: float) -> bool:
        """A notice was told whose call is still to begin: on its way to the event loop, or not read yet (a
        busy machine runs the watcher's thread late; a quick call's reply may be read before its notice).
        Not read yet: in a box, a record not taken; else a notice file younger than UNREAD_NOTICE_SECONDS (one
        that cannot be taken does not hold the loop's replies back for ever)."""
        with self._lock:
            if self._in_hand > 0:
                return True
            if self.channel is not None:
                self._drain()
                return bool(self._pending)
        return _unread_notice(self.shims.calls, now - UNREAD_NOTICE_SECONDS)

    def announced(self, process: ProcStat) -> bool:
        """Did a shim announce this process? Its notice was told before the exec that gave it its name, so it
        is either still to be read or read already."""
        name = process.pid if self.channel is None else inner_pid(process.pid)
        if name is None:
            return False
        if self.channel is None and os.path.exists(self.shims.calls / str(name)):
            return True
        with self._lock:
            if self.channel is not None:
                self._drain()
                if name in self._pending:
                    return True
            at = self._announced.get(name)
        return at is not None and at >= time.time() - process_age(process.start_ticks) - 0.05

    def close(self) -> None:
        with self._lock:
            if self.channel is not None:
                self.channel.close()

    # ------------------------------------------------------------------ under the lock

    def _drain(self) -> None:
        assert self.channel is not None
        now = time.time()
        for record in self.channel.drain():
            told = self._pending.setdefault(record.pid, [])
            told.append((record, now))
            del told[:-RECORDS_PER_PID]
        while len(self._pending) > PENDING_KEPT:
            del self._pending[next(iter(self._pending))]

    def _note(self, notice: Notice) -> None:
        with self._lock:
            self._note_locked(notice.pid, notice.at)

    def _note_locked(self, pid: int, at: float | None) -> None:
        self._announced[pid] = at if at is not None else time.time()
        if len(self._announced) > ANNOUNCED_KEPT:
            del self._announced[next(iter(self._announced))]

    # ------------------------------------------------------------------ which process

    def _from_box(self, record: Record, told: Notice | None) -> Announcement | None:
        """A boxed notice: its record, with the arguments the file and the process agree on."""
        notice = told if told is not None else record.notice()
        host = self._host(notice.pid)
        seen = cmdline_of(host) if host else None
        if seen is not None:
            args = announcer_args(seen[0], notice, self._is_shim)
            if args is None or (notice.kind != "call" and not self.shims.is_shim(seen[0])):
                self._forged(notice, "a notice no shim wrote: ignored", host)
                return None
            notice = dataclasses.replace(notice, args=trusted_args(told.args if told else None, args, seen[1]))
        unknown = told is None and seen is None and record.argc > 0
        return Announcement(dataclasses.replace(notice, pid=host), record.pid, unknown)

    def _host(self, pid: int) -> int:
        if self.box_namespace is None:
            return pid
        namespace = self.box_namespace()
        return (host_pid(namespace, pid) if namespace is not None else None) or 0

    def _is_shim(self, arg: str) -> bool:
        return self.shims.is_shim((arg,))

    def _forged(self, notice: Notice, note: str, host: int | None = None) -> None:
        """Anyone in the box can write into calls/ and the channel: a notice that is no shim's is no call, and
        its pending mark goes with it."""
        if host is None:
            host = self._host(notice.pid)
        log.warning("agent_call_forged", pid=host, name=notice.name, kind=notice.kind, note=note)
        with self._lock:
            self._announced.pop(notice.pid, None)  # it hides no process from the sampler
        self.shims.judged(notice.pid)


def _unread_notice(calls: Path, since: float) -> bool:
    """Does the folder hold a notice file written after `since` (wall clock)?"""
    try:
        with os.scandir(calls) as entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(info.st_mode) and info.st_mtime >= since:
                    return True
    except OSError:
        pass
    return False
