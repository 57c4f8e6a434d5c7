"""Agent calls: when each one starts and ends, observed where the system lets us, sampled where not.

Two ways to see a call:

- **Announced** (exact): a shim on the child's `PATH` (see `shims.py`) writes a notice and `exec`s the real
  agent. The notice is read on the workspace watcher's thread, in the same inotify queue as the agent's
  file events, so the call's workspace segment opens before its first write; a pidfd on the agent's pid
  tells its end the moment it exits, and the kernel keeps its wait status for us (PIDFD_INFO_EXIT, Linux
  6.15+; before that, the zombie's /proc/PID/stat while its parent has not reaped it).
- **Sampled** (fallback): an agent started by absolute path, under another name, by a loop that replaced
  `PATH`, or with no shims at all: the tree is sampled on each tick and a new agent process begins a call;
  a pidfd still tells its end. A process named like a shimmed agent gets a moment for its notice first.
  Its first writes came before the sampler saw it: the workspace gives it what changed since its process
  began (the kernel's start time).
- **Seen in the output** (last resort): a call too short for the sampler still prints its reply, and the
  agent's format says where a reply ends (`agents/reply_end.py`). Where no process was seen, each complete
  reply in the loop's output is an iteration, from the end of the one before it, with the files changed in
  between; a process found later that began before that reply's end is not counted again.

No call starts before the one before it is judged: a shim waits while the verdict is pending (see
`shims.py`), and a sampled call seen meanwhile is frozen (SIGSTOP) until the verdict is in, then thawed and
begun, or killed when the verdict stopped the loop. While a stop is decided or the tree is frozen (`hold`),
every shim refuses (exit 143) and any agent process that still appears is killed at once; both count as
refused.

Usage (the supervisor's wiring):

    calls = CallWatcher(tracker, workspace, pool, settings.iteration_process, hooks)
    env = calls.prepare(state_dir, env)      # shims first on PATH (or the sampler alone, with a warning)
    calls.start()                            # after workspace.start(), on the event loop
    calls.sample(stats, now)                 # each tick
    calls.hold("stop"); ...; calls.release()
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import os
import select
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from ralph_supervisor import events
from ralph_supervisor.agents import ADAPTERS
from ralph_supervisor.agents.recognize import SHELLS, Container, Known, Recognised, known, recognise, script_operand, stem
from ralph_supervisor.evidence.containers import ContainerCall, reference
from ralph_supervisor.agents.reply_end import reply_ends_in
from ralph_supervisor.evidence.iterations import SETTLE_SECONDS, CallEvidence, IterationTracker, build_report
from ralph_supervisor.evidence.shims import Notice, ShimDir, install_shims, read_notice
from ralph_supervisor.iteration import IterationReport
from ralph_supervisor.process.namespace import host_pid, inner_pid
from ralph_supervisor.process.linux import (
    ProcStat,
    descendant_stats,
    describe_wait_status,
    open_pidfd,
    pidfd_wait_status,
    process_age,
    read_stat,
    signal_if_same,
    zombie_wait_status,
)

log = structlog.get_logger(__name__)

ANNOUNCED_KEPT = 256
STRAY_NOTICE_SECONDS = 1.0
"""A notice the watcher thread has not taken after this long is read by the tick (a lost event)."""
IDENTITY_CACHE = 4096
REPLY_SETTLE_SECONDS = 0.3
"""A reply end in output no call claimed becomes an iteration only this long after it was read: a call's
notice, its late output and the sampler have all had their turn by then."""
STALE_PENDING_SECONDS = 2.0
"""A shim's pending mark no call awaits after this long is swept (its notice was lost)."""


@dataclass(frozen=True)
class CallHooks:
    """What the supervisor does around each call."""

    started: Callable[[CallEvidence, float], None]
    """A call began (wall time): log it, tell the breaker."""
    build: Callable[..., IterationReport]
    """`build(call, ended, delta, exit_status=, killed_by=, timed_out=)`: the finished call's report (its
    output read by its agent's adapter)."""
    report: Callable[[IterationReport, float], Awaitable[None]]
    """A call's report, in call order, to judge."""
    settle_output: Callable[[], Awaitable[None]]
    """Read what the pipes and tailed files hold now and wait until the analysis has seen it."""
    marks: Callable[[], dict[str, int]]
    """Any thread: how far each pipe's stream was written by now (`OutputTap.marks`): a call's output is
    what lies between its start and end marks."""


@dataclass
class _Running:
    """What we hold on one call's process: made when its notice is read (or the sampler finds it), before
    the event loop begins the call, so that its exit is marked in the workspace queue the moment it happens."""

    key: str
    start_ticks: int | None
    fd: int | None
    parent: str
    """The name of the process that started it (`timeout`: a signal death is a timeout)."""
    call: CallEvidence | None = None
    exited: bool = False
    """The exits thread saw it exit (and marked its end)."""
    exited_at: float | None = None
    """When it saw that (wall clock): output read later is not the call's while it ran."""
    start_marks: dict[str, int] | None = None
    """The pipes' stream offsets when its notice was read (usually before the agent printed)."""
    floor_marks: dict[str, int] | None = None
    """The offsets at the last call's end: output after them, read after the announcement, is this call's too."""
    end_marks: dict[str, int] | None = None
    """The same, the moment it exited."""
    container: Container | None = None
    """Where the call runs when its process is a container front-end (`docker run … claude -p`)."""
    container_pid: int | None = None
    """The container's first process on this machine, once its engine told (set from the pool)."""
    asked_engine: bool = False


class _Exits:
    """A thread waiting on the calls' pidfds. The moment a call exits, `on_exit(item)` runs here, not
    after whatever the event loop is busy with: what the loop writes right after its agent exited (a
    `cp`, a `git commit`) must land after the call's end in the workspace's event queue."""

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


def floor_marks(last_end: dict[str, int] | None, start: dict[str, int] | None) -> dict[str, int]:
    """Where a call's output can begin at the earliest: where the call before it ended, and for the first
    call the stream's start (its quick words may lie before its start mark, which is taken when its notice
    is read: a busy machine reads it late). What lies past the floor counts only when read after the
    call's announcement, so the loop's own words before it stay the loop's.

    >>> floor_marks(None, {"stdout": 120})
    {'stdout': 0}
    """
    return dict(last_end) if last_end is not None else dict.fromkeys(start or {}, 0)


class CallWatcher:
    """Knows when agent calls start and end, and feeds the tracker. Lives on the event loop.

    Three other threads call in: the workspace watcher's (notices), the exits thread (a call's end) and the
    pool (a stop's `refuse_process`). What they share with the loop is behind one of three small locks:
    `_marks_lock` (the stream marks of `_Running`, its exit, `_last_end_marks`), `_announced_lock`,
    `_identities_lock`. None is held while calling out."""

    def __init__(self, tracker: IterationTracker, workspace: Any, pool: concurrent.futures.Executor,
                 names: Sequence[str], hooks: CallHooks) -> None:
        self.tracker = tracker
        self.workspace = workspace
        self.pool = pool
        self.names = tuple(names)
        self.hooks = hooks
        self.shims: ShimDir | None = None
        self.refused = 0
        """Calls refused since the last `hold` (shims that exited 143, agents killed at once)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running: _Running | None = None
        self._finishing: asyncio.Future[None] | None = None
        self._settle: asyncio.Event | None = None
        self._holding: str | None = None
        self._allowed: set[tuple[int, float]] = set()
        self._cut_short: set[tuple[int, float]] = set()
        self._identities: dict[tuple[int, int, str, tuple[int, int]], tuple[str, tuple[str, ...], Recognised | None]] = {}
        self._identities_lock = threading.Lock()
        self._known: Known = known(self.names, ADAPTERS.values())
        self._idle_since = time.time()
        self._last_end_marks: dict[str, int] | None = None
        """The pipes' marks at the last call's end (the watcher's and the exits thread write it, under
        `_marks_lock`, with the marks of the `_Running` they set)."""
        self._marks_lock = threading.Lock()
        self._last_usage_limited = False
        self._exits: _Exits | None = None
        self._announced: dict[int, float] = {}
        """pid -> announcement time of the notices read lately (the sampler leaves those processes alone);
        written on the watcher's thread and the loop, behind `_announced_lock`."""
        self._announced_lock = threading.Lock()
        self._awaiting: set[int] = set()
        """Shimmed calls begun and not yet judged (their pending marks stay)."""
        self._gated: dict[tuple[int, int], ProcStat] = {}
        self.box_namespace: Callable[[], str | None] | None = None
        """Where the loop runs in a PID namespace of its own (`--sandbox`): the namespace's name (None while it
        is not known yet). A shim's notice then names the box's PID, mapped to ours through `NSpid`."""
        self._inner: dict[int, int] = {}
        """Our PID -> the box's PID of the shimmed calls read (their pending marks are named by the latter)."""
        self._reply_boundary = 0.0
        """When the last reply seen only in the output ended (a process begun before it was that call's)."""
        """Sampled calls frozen until the verdict on the call before them is in."""

    # ------------------------------------------------------------------ set-up

    def prepare(self, state_dir: Path, env: dict[str, str], owner_pid: int | None = None) -> dict[str, str]:
        """Install the shims and return the child's environment with them first on PATH. A shim folder
        that cannot be made (a read-only state folder) leaves the sampler alone, with one warning.
        `owner_pid`: the PID the shims see the supervisor alive by (1 in a box of its own: its init lives
        exactly as long as we do)."""
        if self.tracker.marker is not None:
            return env
        try:
            self.shims = install_shims(state_dir / "shims", self.names, supervisor_pid=owner_pid)
        except (OSError, ValueError) as exc:
            log.warning(events.SHIMS_UNAVAILABLE, error=str(exc), fallback="agent calls are sampled from the tree")
            self.shims = None
            return env
        return {**env, "PATH": self.shims.path_for(env.get("PATH"))}

    def start(self) -> None:
        """Read notices in the workspace watcher's queue (or by polling, each tick)."""
        self._loop = asyncio.get_running_loop()
        self._exits = _Exits(self._exited_threadsafe)
        self.workspace.on_gap = self._gap_threadsafe
        if self.shims is not None and not self.workspace.watch_calls(self.shims.calls, self._notice_on_watcher):
            log.info("call_notices_polled", reason="the workspace is watched by polling")

    def child_started(self, wall: float) -> None:
        self._idle_since = wall

    def close(self) -> None:
        running, self._running = self._running, None
        if running is not None:
            self._drop_fd(running)
        if self._exits is not None:
            self._exits.close()
            self._exits = None
        if self.shims is not None:
            self.shims.remove()

    # ------------------------------------------------------------------ notices

    def _notice_on_watcher(self, name: str) -> str | None:
        """Watcher thread, in queue order: take a notice; its key when a call's segment opens here."""
        shims = self.shims
        if shims is None or self._loop is None:
            return None
        notice = self._read_notice(shims.calls / name)  # noted before the file goes
        if notice is None:
            return None
        real = notice.kind == "call" and self._notice_is_call(notice)
        marks = self.hooks.marks() if real else None  # first: the agent is still starting, it printed nothing yet
        stat, running = self._hold_process(notice, _key(notice)) if real else (None, None)
        if running is not None:
            with self._marks_lock:  # the exits thread may be marking its end right now
                if running.exited:  # over before we looked (a crash in a millisecond): what it printed lies
                    running.start_marks = self._last_end_marks or {}  # after the last call's end, before now
                    running.end_marks = marks
                else:
                    running.start_marks = marks
                    running.floor_marks = floor_marks(self._last_end_marks, marks)  # a busy machine reads the notice late
                self._last_end_marks = marks
        if not self._call_soon(self._notice_arrived, notice, stat, running, True):  # shutting down
            self._let_go(running)
            self._judged(notice.pid)
            return None
        return running.key if running is not None else None

    def _hold_process(self, notice: Notice, key: str) -> tuple[ProcStat | None, _Running]:
        """Any thread: the announced process (if it is still the one that wrote the notice) and a pidfd
        on it, watched by the exits thread from now on."""
        fd = open_pidfd(notice.pid)
        stat = read_stat(notice.pid)
        if stat is not None and notice.at is not None and process_age(stat.start_ticks) < time.time() - notice.at - 0.05:
            stat = None  # younger than its own notice: the pid was recycled, the call itself is long gone
        if stat is None and fd is not None:
            os.close(fd)
            fd = None
        parent = read_stat(stat.ppid) if stat is not None else None
        running = _Running(key, stat.start_ticks if stat else None, fd, parent.name if parent is not None else "")
        if fd is not None and self._exits is not None:
            self._exits.watch(fd, running)
        elif fd is None:  # over and reaped already: its end lies in what the queue holds now, so close there
            running.exited_at = time.time()
            running.exited = True
            self.workspace.mark_call_end(key)
        return stat, running

    def _read_notice(self, path: Path) -> Notice | None:
        """Read one notice, its PID ours (a box's PID mapped through NSpid). A call already over when its
        notice is read cannot be mapped: it gets PID 0, which names no process (so it begins and ends at
        once, as a call reaped before we looked does), and a PID of the box is never taken for one of ours."""
        mapped: list[Notice | None] = []

        def seen(notice: Notice) -> None:
            mapped.append(self._ours(notice))
            if mapped[0] is not None:
                self._note_announced(mapped[0])

        notice = read_notice(path, seen)
        return mapped[0] if notice is not None and mapped else None

    def _ours(self, notice: Notice) -> Notice | None:
        if self.box_namespace is None:
            return notice
        namespace = self.box_namespace()
        host = host_pid(namespace, notice.pid) if namespace is not None else None
        host = host or 0
        if host and notice.kind == "call" and not self._is_announcer(host, notice):
            # Anyone in the box can write into calls/: a notice whose process is neither the shim nor the agent
            # it names is not a call (the loop's shell naming itself, say). Its pending mark goes with it.
            log.warning("agent_call_forged", pid=host, name=notice.name, note="a notice no shim wrote: ignored")
            if self.shims is not None:
                self.shims.judged(notice.pid)
            return None
        self._inner[host] = notice.pid
        if len(self._inner) > ANNOUNCED_KEPT:
            del self._inner[next(iter(self._inner))]
        return dataclasses.replace(notice, pid=host)

    def _is_announcer(self, pid: int, notice: Notice) -> bool:
        """Is `pid` the shim that wrote this notice, or the agent it `exec`ed: its name or path among the first
        arguments (a script agent runs as `INTERPRETER PATH ...`, through `env` as `env node PATH ...`)?"""
        cmdline = read_cmdline(pid)
        if not cmdline:
            return True  # gone since it was mapped: nothing to tell it by, and it is no process of ours any more
        shims = self.shims
        return ((shims is not None and shims.is_shim(cmdline))
                or any(arg == notice.target or os.path.basename(arg) == notice.name for arg in cmdline[:3]))

    def _note_announced(self, notice: Notice) -> None:
        """Before its file goes: the sampler must find one or the other, or it takes the call for its own."""
        with self._announced_lock:
            self._announced[notice.pid] = notice.at if notice.at is not None else time.time()
            if len(self._announced) > ANNOUNCED_KEPT:
                del self._announced[next(iter(self._announced))]

    def _announced_process(self, stat: ProcStat) -> bool:
        """Did a shim announce this process? Its notice was written before the exec that gave it its name,
        so it is either still in the folder or already read."""
        shims = self.shims
        if shims is None:
            return False
        name = stat.pid if self.box_namespace is None else inner_pid(stat.pid)
        if name is not None and os.path.exists(shims.calls / str(name)):
            return True
        with self._announced_lock:
            at = self._announced.get(stat.pid)
        return at is not None and at >= time.time() - process_age(stat.start_ticks) - 0.05

    def _under_announced(self, stat: ProcStat, by_pid: dict[int, ProcStat]) -> bool:
        """This process or one of its ancestors was announced (a forked subshell of an agent script
        carries the agent's name and command line)."""
        seen = 0
        current: ProcStat | None = stat
        while current is not None and seen < 64:
            if self._announced_process(current):
                return True
            current = by_pid.get(current.ppid)
            seen += 1
        return False

    def _let_go(self, running: _Running | None) -> None:
        if running is not None:
            self._drop_fd(running)

    def poll_notices(self, now: float) -> None:
        """Tick: notices no watcher thread took (polling mode, or an event lost in an overflow)."""
        shims = self.shims
        if shims is None:
            return
        watched = self.workspace.watching_calls
        try:
            entries = list(os.scandir(shims.calls))
        except OSError:
            return
        for entry in sorted(entries, key=lambda e: e.name):
            if watched:
                try:
                    if now - entry.stat().st_mtime < STRAY_NOTICE_SECONDS:
                        continue
                except OSError:
                    continue
            notice = self._read_notice(Path(entry.path))
            if notice is not None:
                real = notice.kind == "call" and self._notice_is_call(notice)
                stat, running = self._hold_process(notice, _key(notice)) if real else (None, None)
                self._notice_arrived(notice, stat, running, False)

    def _notice_arrived(self, notice: Notice, stat: ProcStat | None, held: _Running | None, queued: bool) -> None:
        """Event loop: act on one notice (`queued`: its workspace segment is already open in the queue)."""
        if notice.kind == "refused":
            self.refused += 1
            log.info("agent_call_refused", name=notice.name, pid=notice.pid, holding=self._holding)
            return
        if notice.kind == "missing":
            self._missing(notice)
            return
        if held is None:  # --version, --help, claude mcp list
            self._judged(notice.pid)
            return
        if stat is not None and self.tracker.knows(stat.pid, stat.create_time):  # the sampler was quicker
            self._let_go(held)
            self._judged(notice.pid)
            return
        running = self._running
        if running is not None and (running.exited or (running.fd is not None and _readable(running.fd))):
            self._ended(running, marked=running.exited)  # its end and this start came in one batch
            running = self._running
        if running is not None:
            log.warning("agent_call_parallel", pid=notice.pid, running=running.call.pid if running.call else None,
                        note="one call at a time: this one is not an iteration of its own")
            self._let_go(held)
            self._judged(notice.pid)
            return
        self._awaiting.add(notice.pid)
        if not queued:  # read by the tick: no segment opened in the queue, so open one now
            self.pool.submit(self.workspace.begin_iteration, held.key)
        # A call whose process is already gone (a crash in a millisecond) still ran: it begins and ends here.
        self._begin(stat, notice.name, notice.argv, held, announced_at=notice.at, pid=notice.pid)

    def _missing(self, notice: Notice) -> None:
        if self.tracker.current is not None:
            return
        now = time.time()
        call = self.tracker.start(time.monotonic(), now, None, None, notice.name, notice.argv, announced_at=notice.at)
        self.hooks.started(call, now)
        self.tracker.finish(now)
        searched = notice.target or "(empty)"
        report = build_report(call, ended_at=now, files_changed=0, changed_paths=(), commits=0, agent=None,
                              signatures=frozenset(), exit_status=127)
        report = dataclasses.replace(report, failed=True, blocked=True, blocked_reason=(
            f"{notice.name} is not installed: `{notice.name}` was not found on PATH ({searched}); "
            "install it or fix PATH"))
        self._idle_since = now
        self._chain(self._deliver(report, now, call.number))

    # ------------------------------------------------------------------ the sampler

    def sample(self, stats: list[ProcStat], now: float) -> None:
        """Tick: begin calls no shim announced; end a call whose process left without a pidfd to say so;
        while holding, kill agent processes that appear."""
        self.poll_notices(now)
        if self.shims is not None:
            self.shims.sweep_pending({self._inner.get(pid, pid) for pid in self._awaiting}, now - STALE_PENDING_SECONDS)
        running = self._running
        if running is not None:
            call = running.call
            if running.fd is None and call is not None and call.pid is not None:
                live = {(s.pid, s.create_time) for s in stats}
                if (call.pid, call.create_time) not in live:
                    self._ended(running)
            return
        if self.tracker.current is not None:
            return
        candidates = []
        by_pid = {s.pid: s for s in stats}
        for stat in stats:
            name, cmdline, call = self._identity(stat)
            if call is None:
                continue  # only agent calls are candidates (to begin, or to kill while holding)
            if self.shims is not None and (self.shims.is_shim(cmdline) or self._under_announced(stat, by_pid)):
                continue  # a shim not yet exec'd, or (inside) a call its shim announced: the notice tells
            candidates.append((stat.pid, stat.create_time, name, cmdline))
        if self._holding is not None:
            self._kill_newcomers(stats, candidates)
            return
        found = self._new_call(stats, candidates)
        if found is None:
            self._bound_replies(now)
            return
        if self._verdict_pending():  # frozen until the call before it is judged; begun at a tick after that
            if (found.pid, found.start_ticks) not in self._gated and signal_if_same(found.pid, found.start_ticks, signal.SIGSTOP):
                self._gated[(found.pid, found.start_ticks)] = found
                log.info("agent_call_gated", pid=found.pid, name=found.name, until="the verdict on the call before it")
            return
        began = _started_at(found)
        self._bound_replies(now, before=began)  # replies read before it began are theirs, not this one's
        fd = open_pidfd(found.pid)
        if fd is not None and (read_stat(found.pid) or found).start_ticks != found.start_ticks:
            os.close(fd)
            fd = None
        if fd is None:  # gone already: when it ended is unknown, so its reply in the output tells the call
            self.tracker.ignore_process(found.pid, found.create_time)
            return
        parent = read_stat(found.ppid)
        running = _Running("", found.start_ticks, fd, parent.name if parent is not None else "")
        if self._exits is not None:
            self._exits.watch(fd, running)
        began = max(began, self._idle_since)
        self.pool.submit(self.workspace.begin_iteration, "", began)  # its first writes came before we saw it
        name, argv, _ = self._identity(found)
        self._begin(found, name, argv, running, announced_at=began)

    def _new_call(self, stats: list[ProcStat], candidates: list[tuple[int, float, str, tuple[str, ...]]]) -> ProcStat | None:
        """The oldest candidate not seen before, but none that began before the last reply counted from the
        output (that reply was its call)."""
        by_key = {(s.pid, s.create_time): s for s in stats}
        while (found := self.tracker.new_call_candidate(candidates)) is not None:
            stat = by_key[found]
            if not self._reply_boundary or _started_at(stat) >= self._reply_boundary:
                return stat
            self.tracker.ignore_process(*found)
        return None

    def _bound_replies(self, now: float, before: float | None = None) -> None:
        """Tick, no call running: each reply that ended in the output no call claimed is an iteration (all
        those read `before` a process that is about to begin, whatever their age)."""
        if self._holding is not None or self.tracker.marker is not None:
            return
        since = max(self._idle_since, self._reply_boundary)
        settled = now - REPLY_SETTLE_SECONDS if before is None else before
        for until in self.tracker.pending_reply_ends(since, reply_ends_in):
            if until > settled:
                break
            call = self.tracker.call_from_output(time.monotonic(), since, until)
            self.hooks.started(call, since)
            delta = self.pool.submit(self.workspace.take_from_gap, since, until)
            self._chain(self._report_from_output(call, until, delta))
            since = self._reply_boundary = self._idle_since = until

    async def _report_from_output(self, call: CallEvidence, until: float,
                                  delta_future: concurrent.futures.Future[Any]) -> None:
        delta = await asyncio.wrap_future(delta_future)
        await self._deliver(self.hooks.build(call, until, delta), until, call.number)

    def _kill_newcomers(self, stats: list[ProcStat], candidates: list[tuple[int, float, str, tuple[str, ...]]]) -> None:
        for pid, ctime, name, cmdline in candidates:
            if (pid, ctime) in self._allowed or self.tracker.knows(pid, ctime):
                continue
            stat = next(s for s in stats if s.pid == pid)  # every candidate is an agent call
            if signal_if_same(pid, stat.start_ticks, signal.SIGKILL):
                self.refused += 1
                log.warning("agent_call_killed", pid=pid, name=name, holding=self._holding)
            self.tracker.ignore_process(pid, ctime)

    def refuse_process(self, stat: ProcStat) -> bool:
        """For the tree's stop (any thread): is this newcomer an agent call to kill at once?"""
        if (stat.pid, stat.create_time) in self._allowed:
            return False
        _, cmdline, call = self._identity(stat)
        if self.shims is not None and self.shims.is_shim(cmdline):
            return False  # it refuses by itself, with its own notice
        return call is not None

    def running_container(self) -> ContainerCall | None:
        """Any thread: the container the running call runs in, when it can be named (None: no such call)."""
        running = self._running
        container = running.container if running is not None else None
        ref = reference(container) if container is not None else None
        return ContainerCall(container.engine, ref) if container is not None and ref is not None else None

    def container_processes(self) -> list[ProcStat]:
        """The processes of the running call's container (outside our tree): their CPU is the call's for the
        stall rule. The engine is asked once per call, off the event loop; [] until it answered."""
        running = self._running
        if running is None or running.container is None:
            return []
        if running.container_pid is None:
            if not running.asked_engine:
                running.asked_engine = True
                self.pool.submit(self._ask_container_pid, running)
            return []
        first = read_stat(running.container_pid)
        return ([first] if first is not None else []) + (descendant_stats(running.container_pid) or [])

    def _ask_container_pid(self, running: _Running) -> None:
        for _ in range(20):  # a --cidfile is written a moment after the client starts
            container = self.running_container() if self._running is running else None
            if container is None:
                return
            pid = container.host_pid()
            if pid is not None:
                running.container_pid = pid
                return
            time.sleep(0.25)

    def running_calls(self, members: Sequence[ProcStat]) -> frozenset[tuple[int, int]]:
        """The agent calls among the tree's members, (pid, start_ticks): a stop TERMs them after the loop."""
        return frozenset((s.pid, s.start_ticks) for s in members if self._identity(s)[2] is not None)

    def _notice_is_call(self, notice: Notice) -> bool:
        return recognise(notice.name, notice.argv, self._known) is not None

    def _identity(self, stat: ProcStat) -> tuple[str, tuple[str, ...], Recognised | None]:
        """Name, command line and the agent call it is (None: not one), cached per process image. The name
        alone does not tell an exec: a pyenv `python3` shim (bash) execs python3 under the same name, so the
        key holds where the code is mapped."""
        key = (stat.pid, stat.start_ticks, stat.name, stat.code)
        with self._identities_lock:  # the loop's sampler and a stop's `refuse_process` on the pool
            known = self._identities.get(key)
        if known is None:
            cmdline = read_cmdline(stat.pid)
            call = recognise(stat.name, cmdline, self._known)
            if call is None and cmdline:
                exe, script = resolved_paths(stat.pid, cmdline)
                if exe or script:
                    call = recognise(stat.name, cmdline, self._known, exe=exe, script=script)
            known = (stat.name, cmdline, call)
            with self._identities_lock:
                self._identities[key] = known
                if len(self._identities) > IDENTITY_CACHE:
                    self._identities.clear()
        return known

    # ------------------------------------------------------------------ begin and end

    def _begin(self, stat: ProcStat | None, name: str, argv: Sequence[str], running: _Running, *,
               announced_at: float | None = None, pid: int | None = None) -> None:
        """Begin the call of `running` (`stat`: its process; None when it is already gone, `pid` names it)."""
        now = time.time()
        if self._finishing is not None and not self._finishing.done() and self._settle is not None:
            self._settle.set()  # a new call began: the previous one's late output is over
        if stat is not None:
            self.tracker.ignore_process(stat.pid, stat.create_time)
        call = self.tracker.start(time.monotonic(), announced_at or now, stat.pid if stat else pid,
                                  stat.create_time if stat else None, name, argv, announced_at=announced_at,
                                  start_marks=running.start_marks, floor_marks=running.floor_marks)
        with self._marks_lock:  # it may have exited before the event loop began it, or be exiting now
            call.end_marks = running.end_marks
            running.call = call
        self._running = running
        if stat is not None:
            found = self._identity(stat)[2]
            running.container = found.container if found is not None else None
            if running.container is not None and not running.container.target and not running.container.cidfile:
                log.warning("container_call_uncontrolled", pid=stat.pid, engine=running.container.engine,
                            detail="observed, not controlled: a pause, resume or stop reaches the client only "
                                   "(name the container with --name or --cidfile)")
        identity = (stat.pid, stat.create_time) if stat is not None else None
        if identity in self._cut_short or (self._holding is not None and identity not in self._allowed):
            call.cut_short = True  # running when we froze or stopped the tree, or started since
        self.hooks.started(call, now)
        if stat is not None and self._holding is not None and identity not in self._allowed:
            if signal_if_same(stat.pid, stat.start_ticks, signal.SIGKILL):
                self.refused += 1
                log.warning("agent_call_killed", pid=stat.pid, name=name, holding=self._holding)
        if running.exited or stat is None or (running.fd is None and read_stat(stat.pid) is None):
            self._ended(running, marked=running.exited)  # over already, or gone before we could hold it

    def _exited_threadsafe(self, running: _Running) -> None:
        """The exits thread: close the call's segment now, then tell the event loop."""
        marks = self.hooks.marks()
        with self._marks_lock:  # the watcher's thread may be reading its notice, the loop beginning it
            if running.start_marks is not None:
                running.end_marks = self._last_end_marks = marks
            running.exited_at = time.time()
            running.exited = True
            call = running.call
            if call is not None:
                call.end_marks = running.end_marks
                call.ended_wall = running.exited_at  # routing sees the end before the event loop does
        self.workspace.mark_call_end(running.key)
        self._call_soon(self._exit_seen, running)

    def _exit_seen(self, running: _Running) -> None:
        if self._running is running:
            self._ended(running, marked=True)
        # else: not begun yet (its begin ends it at once), or already ended

    def _ended(self, running: _Running, marked: bool = False) -> None:
        """The call's process exited (its pidfd is readable, or the sampler saw it go)."""
        if self._running is not running or running.call is None:
            return
        self._running = None
        if not marked:
            self.workspace.mark_call_end(running.key)  # first: what the loop writes next is not the call's
        status = None
        if running.fd is not None:
            status = pidfd_wait_status(running.fd)
            if status is None and running.call.pid is not None and running.start_ticks is not None:
                status = zombie_wait_status(running.call.pid, running.start_ticks)
            if status is None:
                status = pidfd_wait_status(running.fd)  # reaped between the two looks
            self._drop_fd(running)
        self._finish(running, running.call, running.exited_at or time.time(), status)

    def _drop_fd(self, running: _Running) -> None:
        fd, running.fd = running.fd, None
        if fd is None:
            return
        if self._exits is not None:
            self._exits.forget(fd)
        os.close(fd)

    def _finish(self, running: _Running, call: CallEvidence, ended: float, status: int | None) -> None:
        if self.tracker.current is call:
            self.tracker.finish(ended)
        self._idle_since = ended
        delta = self.pool.submit(self.workspace.end_iteration, running.key)  # closes here in the queue
        code, sig = describe_wait_status(status)
        self._settle = settle = asyncio.Event()
        self._chain(self._report(call, ended, delta, settle, code, sig, timed_out=sig is not None and running.parent == "timeout"))

    def _chain(self, coro: Awaitable[None]) -> None:
        """Run a report after the ones before it (the breaker judges calls in order)."""
        previous = self._finishing

        async def in_order() -> None:
            if previous is not None:
                try:
                    await asyncio.shield(previous)
                except Exception:  # noqa: BLE001 - its failure was logged; ours still counts
                    pass
            await coro

        self._finishing = asyncio.ensure_future(in_order())
        self._finishing.add_done_callback(_log_failure)

    async def _report(self, call: CallEvidence, ended: float, delta_future: concurrent.futures.Future[Any],
                      settle: asyncio.Event, code: int | None, sig: int | None, *, timed_out: bool) -> None:
        """Wait for the call's late output (briefly), then report it."""
        await self.hooks.settle_output()
        try:
            await asyncio.wait_for(settle.wait(), SETTLE_SECONDS)  # a tee may still be writing its last line
        except asyncio.TimeoutError:
            pass
        await self.hooks.settle_output()
        self.tracker.claim_late_output(call)
        delta = await asyncio.wrap_future(delta_future)
        report = self.hooks.build(call, ended, delta, exit_status=code, killed_by=sig, timed_out=timed_out)
        await self._deliver(report, ended, call.number, call.pid)

    async def _deliver(self, report: IterationReport, ended: float, number: int, pid: int | None = None) -> None:
        self.tracker.release(number)
        self._last_usage_limited = report.usage_limited
        try:
            await self.hooks.report(report, ended)
        finally:
            self._judged(pid)
            self._thaw_gated()

    def _verdict_pending(self) -> bool:
        return self._finishing is not None and not self._finishing.done()

    def _judged(self, pid: int | None) -> None:
        """The verdict on `pid`'s call is in (or it was no call): the shim of the next one may go on."""
        if pid is None:
            return
        self._awaiting.discard(pid)
        inner = self._inner.pop(pid, None) if self.box_namespace is not None else pid
        if self.shims is not None and inner is not None:
            self.shims.judged(inner)

    def _thaw_gated(self) -> None:
        """The verdict is in: the sampled calls frozen meanwhile run on (begun at the next tick), unless that
        verdict stopped or froze the loop (the hold refuses them) or another call's verdict is still due
        (its delivery thaws them)."""
        later = self._finishing
        if self._holding is not None or (later is not None and not later.done() and later is not asyncio.current_task()):
            return
        gated, self._gated = self._gated, {}
        for stat in gated.values():
            signal_if_same(stat.pid, stat.start_ticks, signal.SIGCONT)

    async def finish_current(self) -> None:
        """The loop exited: end the call in progress (its pidfd says whether it is gone) and wait for
        every report still being put together."""
        running = self._running
        if running is not None:
            self._ended(running)
        elif self.tracker.current is not None:  # marker mode
            self.marker_boundary(time.time(), begin=False)
        await self.wait_reports()
        if self.tracker.marker is None:
            await asyncio.wrap_future(self.pool.submit(self.workspace.close_gap))

    async def wait_reports(self) -> None:
        while self._finishing is not None and not self._finishing.done():
            await asyncio.shield(self._finishing)

    def marker_boundary(self, now: float, begin: bool = True) -> None:
        """Marker mode: a marker line ends the call in progress and begins the next."""
        ended = self.tracker.finish(now)
        if ended is not None:
            self._idle_since = now
            delta = self.pool.submit(self.workspace.end_iteration, "")

            async def report() -> None:
                result = await asyncio.wrap_future(delta)
                await self._deliver(self.hooks.build(ended, now, result), now, ended.number)

            self._chain(report())
        if begin:
            call = self.tracker.start(time.monotonic(), now)
            self.pool.submit(self.workspace.begin_iteration, "")
            self.hooks.started(call, now)

    # ------------------------------------------------------------------ holding

    def hold(self, why: str, members: Sequence[ProcStat]) -> None:
        """A stop is decided ("stop": shims refuse) or the tree freezes ("freeze": shims wait until it is
        thawed); agent processes that appear from now on are killed, and the calls running now (in
        `members`) are cut short by us (neutral, never a trial)."""
        if self._holding is None:
            self.refused = 0
        self._holding = why
        if self.tracker.current is not None:
            self.tracker.current.cut_short = True
        for stat in members:
            if self._identity(stat)[2] is not None:
                self._cut_short.add((stat.pid, stat.create_time))
            self._allowed.add((stat.pid, stat.create_time))
        if len(self._cut_short) > 1024:
            self._cut_short.clear()
        if self.shims is not None:
            try:
                if why == "stop":
                    self.shims.refuse(True)
                else:
                    self.shims.hold(True)
            except OSError as exc:
                log.warning("shims_cannot_refuse", error=str(exc))

    def release(self) -> None:
        """New calls may start again (a resume, a trial, a restart); the wait for one counts from now."""
        self._holding = None
        self._allowed.clear()
        if self.shims is not None:  # first: a shim thawed below must find the way open
            try:
                self.shims.refuse(False)
                self.shims.hold(False)
            except OSError as exc:
                log.warning("shims_cannot_refuse", error=str(exc))
        gated, self._gated = self._gated, {}
        for stat in gated.values():  # frozen while a verdict was due, then held: they may run now
            signal_if_same(stat.pid, stat.start_ticks, signal.SIGCONT)
        self._idle_since = max(self._idle_since, time.time())

    # ------------------------------------------------------------------ between calls

    def waiting_since(self) -> float | None:
        """Since when the loop has run without an agent call (None while one runs, in marker mode, or
        after a usage-limited call: the loop is probably waiting for the limit to reset). During a wait
        the loop announced, a time in the future."""
        if self.tracker.marker is not None or self.tracker.current is not None or self._last_usage_limited:
            return None
        # A wait the loop announced (Ralph's hourly call limit) counts from its end, not from the last call.
        return max(self._idle_since, self.tracker.loop_wait_until)

    def _gap_threadsafe(self, delta: Any) -> None:
        self._call_soon(self._gap, delta)

    def _call_soon(self, callback: Callable[..., None], *args: Any) -> bool:
        """From another thread: run `callback(*args)` on the event loop; False once the loop is closed."""
        loop = self._loop
        if loop is None:
            return False
        try:
            loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:
            return False
        return True

    def _gap(self, delta: Any) -> None:
        log.info("changed_between_calls", files_changed=delta.files_changed, commits=delta.commits,
                 paths=list(delta.paths[:10]), iteration=self.tracker.number)


def _started_at(stat: ProcStat) -> float:
    """When a process began, on the wall clock, from the kernel's start time (to a clock tick)."""
    return time.time() - process_age(stat.start_ticks)


def read_cmdline(pid: int) -> tuple[str, ...]:
    """A process's arguments (the first 64 KiB: a command line of any size is read, never walked whole);
    () when it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read(65536)
    except OSError:
        return ()
    return tuple(part.decode("utf-8", "replace") for part in raw.split(b"\0") if part)


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


def _key(notice: Notice) -> str:
    """A call's workspace segment: its pid and announcement time (a pid alone is recycled)."""
    return f"{notice.pid}@{notice.at}"


def _readable(fd: int) -> bool:
    try:
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):
        return False


def _log_failure(task: asyncio.Future[None]) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.error("call_report_failed", error=repr(exc))
