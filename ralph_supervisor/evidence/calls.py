"""Agent calls: when each one starts and ends, observed where the system lets us, sampled where not.

Three ways to see a call:

- **Announced** (exact): a shim on the child's `PATH` (see `shims.py`) writes a notice and `exec`s the real
  agent. The notice is read on the workspace watcher's thread (`notices.py`), in the same inotify queue as
  the agent's file events, so the call's workspace segment opens before its first write; a pidfd on the
  agent's pid tells its end the moment it exits (`call_exits.py`), and the kernel keeps its wait status for
  us (PIDFD_INFO_EXIT, Linux 6.15+; before that, the zombie's /proc/PID/stat while its parent has not
  reaped it).
- **Sampled** (fallback, `call_sampler.py`): an agent started by absolute path, under another name, by a
  loop that replaced `PATH`, or with no shims at all: the tree is sampled on each tick and a new agent
  process begins a call; a pidfd still tells its end. Its first writes came before the sampler saw it: the
  workspace gives it what changed since its process began (the kernel's start time).
- **Seen in the output** (last resort, `call_reports.py`): a call too short for the sampler still prints its
  reply, and the agent's format says where a reply ends (`agents/reply_end.py`). Where no process was seen,
  each complete reply in the loop's output is an iteration, from the end of the one before it, with the
  files changed in between; a process found later that began before that reply's end is not counted again.

No call starts before the one before it is judged, none while the tree is frozen, none once a stop is
decided: `call_gate.py`, which the tree actions hold and release. The watcher is the call's life: a notice
or a sampled process begins a call, its exit ends it, and its report goes to the judge (`call_reports.py`)
through `CallHooks`, its one surface toward the supervisor.

Usage (the supervisor's wiring):

    calls = CallWatcher(tracker, workspace, pool, settings.iteration_process, hooks)
    env = calls.prepare(state_dir, env, boxed=False)  # shims first on PATH (or the sampler alone, with a warning)
    actions.calls = calls.gate                        # the tree actions hold and release the calls
    calls.start()                                     # after workspace.start(), on the event loop
    calls.sample(stats, now)                          # each tick
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import select
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from ralph_supervisor import events
from ralph_supervisor.evidence.call_exits import CallMarks, Exits, RunningCall, exit_status, hold_announced, hold_sampled
from ralph_supervisor.evidence.call_gate import CallGate
from ralph_supervisor.evidence.call_identity import Identities
from ralph_supervisor.evidence.call_reports import CallReports
from ralph_supervisor.evidence.call_sampler import CallSampler, started_at
from ralph_supervisor.evidence.iterations import CallEvidence, IterationTracker
from ralph_supervisor.evidence.notices import Announcement, NoticeChannel, NoticeReader
from ralph_supervisor.evidence.shims import Notice, ShimDir, install_shims
from ralph_supervisor.iteration import IterationReport
from ralph_supervisor.evidence.containers import ask_host_pid, processes_of
from ralph_supervisor.process.linux import ProcStat, read_stat

log = structlog.get_logger(__name__)


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
    timed_sources: Callable[[], bool] = lambda: True
    """Whether output is read that no stream mark places (a tailed file is followed): a call's share of it is
    told by when it was read, so a finished call waits a moment for its late words there."""


class CallWatcher:
    """Knows when agent calls start and end, and feeds the tracker. Lives on the event loop; the workspace
    watcher's thread reads notices (`NoticeReader`) and the exits thread marks ends (`CallMarks`), each
    handing what it found to the loop."""

    def __init__(self, tracker: IterationTracker, workspace: Any, pool: concurrent.futures.Executor,
                 names: Sequence[str], hooks: CallHooks) -> None:
        self.tracker = tracker
        self.workspace = workspace
        self.pool = pool
        self.names = tuple(names)
        self.hooks = hooks
        self.identities = Identities(self.names)
        self.gate = CallGate(tracker, self.identities)
        self.reports = CallReports(tracker, workspace, pool, hooks, self.gate)
        self.marks = CallMarks(hooks.marks)
        self.sampler = CallSampler(tracker, self.identities, self._announced, self._is_shim)
        self.shims: ShimDir | None = None
        self.notices: NoticeReader | None = None
        self.box_namespace: Callable[[], str | None] | None = None
        """Where the loop runs in a PID namespace of its own (`--sandbox`): the namespace's name (None while it
        is not known yet). A shim's notice then names the box's PID, mapped to ours through `NSpid`."""
        self._channel: NoticeChannel | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running: RunningCall | None = None
        self._exits: Exits | None = None

    # ------------------------------------------------------------------ set-up

    def prepare(self, state_dir: Path, env: dict[str, str], boxed: bool = False) -> dict[str, str]:
        """Install the shims and return the child's environment with them first on PATH. A shim folder
        that cannot be made (a read-only state folder) leaves the sampler alone, with one warning. `boxed`:
        the loop runs in a box of its own, whose init the shims see the supervisor alive by (it lives exactly
        as long as we do), and whose notices come through the channel too."""
        if self.tracker.marker is not None:
            return env
        try:
            self.shims = install_shims(state_dir / "shims", self.names, supervisor_pid=1 if boxed else None,
                                       channel=boxed)
            self._channel = NoticeChannel(self.shims.channel) if boxed else None
        except (OSError, ValueError) as exc:
            log.warning(events.SHIMS_UNAVAILABLE, error=str(exc), fallback="agent calls are sampled from the tree")
            if self.shims is not None:
                self.shims.remove()
            self.shims = None
            return env
        self.gate.shims = self.shims
        return {**env, "PATH": self.shims.path_for(env.get("PATH"))}

    def start(self) -> None:
        """Read notices in the workspace watcher's queue (or by polling, each tick)."""
        self._loop = asyncio.get_running_loop()
        self._exits = Exits(self._exited_threadsafe)
        self.workspace.on_gap = lambda delta: self._call_soon(self.reports.gap, delta)
        if self.shims is None:
            return
        self.notices = NoticeReader(self.shims, self._channel, self.box_namespace)
        if self._channel is not None:
            self._loop.add_reader(self._channel.fd, self._channel_readable)
        if not self.workspace.watch_calls(self.shims.calls, self._notice_on_watcher):
            log.info("call_notices_polled", reason="the workspace is watched by polling")

    def child_started(self, wall: float) -> None:
        self.reports.idle_since = wall

    def close(self) -> None:
        running, self._running = self._running, None
        if running is not None:
            self._drop_fd(running)
        if self._exits is not None:
            self._exits.close()
            self._exits = None
        if self._channel is not None and self._loop is not None:
            self._loop.remove_reader(self._channel.fd)
        if self.notices is not None:
            self.notices.close()
        elif self._channel is not None:
            self._channel.close()
        if self.shims is not None:
            self.shims.remove()

    # ------------------------------------------------------------------ notices

    def _notice_on_watcher(self, name: str) -> str | None:
        """Watcher thread, in queue order: take a notice; its key when a call's segment opens here."""
        notices = self.notices
        if notices is None or self._loop is None:
            return None
        found = notices.take(name, to_loop=True)
        if found is None:
            return None
        try:
            stat, running = self._hold(found)
        except BaseException:
            notices.arrived()  # it never will: the replies must not wait for it
            raise
        if not self._call_soon(self._notice_arrived, found, stat, running, True):  # shutting down
            notices.arrived()
            if running is not None:
                self._drop_fd(running)
            self.gate.no_verdict(found.mark)
            return None
        return running.key if running is not None else None

    def _hold(self, found: Announcement) -> tuple[ProcStat | None, RunningCall | None]:
        """Any thread: for a call's notice, the pipes' marks (first: the agent is still starting, it printed
        nothing yet; read late, the call's floor is the last call's end) and a hold on its process."""
        if not self._is_call(found):
            return None, None
        marks = self.hooks.marks()
        notice = found.notice
        stat, running = hold_announced(notice.pid, notice.at, _key(notice), found.mark)
        self._watch(running)
        self.marks.announced(running, marks)
        return stat, running

    def _watch(self, running: RunningCall) -> None:
        """Any thread: the exits thread tells its end from now on; over and reaped already, its end lies in
        what the queue holds now, so it closes there."""
        if running.fd is not None and self._exits is not None:
            self._exits.watch(running.fd, running)
        elif running.fd is None:
            self.marks.gone(running)
            self.workspace.mark_call_end(running.key)

    def _poll_notices(self, now: float, final: bool = False) -> None:
        """Tick: notices no watcher thread took (polling mode, a lost event, a record whose file never came);
        `final`: the loop is over, so every one left."""
        if self.notices is None:
            return
        for found in self.notices.strays(now, self.workspace.watching_calls, final):
            self._notice_arrived(found, *self._hold(found), False)

    def _channel_readable(self) -> None:
        if self.notices is not None:
            for found in self.notices.refusals():
                self._notice_arrived(found, None, None, False)

    def _notice_arrived(self, found: Announcement, stat: ProcStat | None, held: RunningCall | None,
                        queued: bool) -> None:
        """Event loop: act on one notice (`queued`: its workspace segment is already open in the queue)."""
        notice = found.notice
        if queued and self.notices is not None:
            self.notices.arrived()
        if notice.kind == "refused":
            self.gate.refused_by_shim(notice.name, notice.pid)
            return
        if notice.kind == "missing":
            self.reports.missing(notice)
            return
        if held is None:  # --version, --help, claude mcp list
            self.gate.no_verdict(found.mark)
            return
        if stat is not None and self.tracker.knows(stat.pid, stat.create_time):  # the sampler was quicker
            self._drop_fd(held)
            self.gate.no_verdict(found.mark)
            return
        running = self._running
        if running is not None and (self.marks.exit_of(running)[0] or (running.fd is not None and _readable(running.fd))):
            self._ended(running, marked=self.marks.exit_of(running)[0])  # its end and this start came in one batch
            running = self._running
        if running is not None:
            log.warning("agent_call_parallel", pid=notice.pid, running=running.call.pid if running.call else None,
                        note="one call at a time: this one is not an iteration of its own")
            self._drop_fd(held)
            self.gate.no_verdict(found.mark)
            return
        if not queued:  # read by the tick: no segment opened in the queue, so open one, from its start
            self.pool.submit(self.workspace.begin_iteration, held.key, notice.at)
        # A call whose process is already gone (a crash in a millisecond) still ran: it begins and ends here.
        self._begin(stat, notice.name, notice.argv, held, announced_at=notice.at, pid=notice.pid)

    def _is_call(self, found: Announcement) -> bool:
        return found.notice.kind == "call" and (found.unknown_args or self.identities.announces_call(found.notice))

    def _announced(self, stat: ProcStat) -> bool:
        return self.notices is not None and self.notices.announced(stat)

    def _is_shim(self, cmdline: Sequence[str]) -> bool:
        return self.shims is not None and self.shims.is_shim(cmdline)

    # ------------------------------------------------------------------ the sampler

    def sample(self, stats: list[ProcStat], now: float) -> None:
        """Tick: begin calls no shim announced; end a call whose process left without a pidfd to say so;
        while holding, kill agent processes that appear."""
        self._poll_notices(now)
        self.gate.sweep(now)
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
        candidates = self.sampler.candidates(stats)
        if self.gate.holding is not None:
            self.gate.kill_newcomers(stats, candidates)
            return
        found = self.sampler.new_call(stats, candidates, self.reports.reply_boundary)
        if found is None:
            if self.notices is None or not self.notices.waiting(time.time()):  # else a reply may be its call's
                self.reports.from_replies(now)
            return
        if self.reports.pending():  # frozen until the call before it is judged; begun at a tick after that
            self.gate.freeze_until_judged(found)
            return
        began = started_at(found)
        self.reports.from_replies(now, before=began)  # replies read before it began are theirs, not this one's
        running = hold_sampled(found)
        if running is None:  # gone already: when it ended is unknown, so its reply in the output tells the call
            self.tracker.ignore_process(found.pid, found.create_time)
            return
        self._watch(running)
        began = max(began, self.reports.idle_since)
        self.pool.submit(self.workspace.begin_iteration, "", began)  # its first writes came before we saw it
        name, argv, _ = self.identities.of(found)
        self._begin(found, name, argv, running, announced_at=began)

    # ------------------------------------------------------------------ begin and end

    def _begin(self, stat: ProcStat | None, name: str, argv: Sequence[str], running: RunningCall, *,
               announced_at: float | None = None, pid: int | None = None) -> None:
        """Begin the call of `running` (`stat`: its process; None when it is already gone, `pid` names it).
        Its start marks were set before it was handed to the loop, and stay as they are."""
        now = time.time()
        self.reports.began()
        if stat is not None:
            self.tracker.ignore_process(stat.pid, stat.create_time)
        call = self.tracker.start(time.monotonic(), announced_at or now, stat.pid if stat else pid,
                                  stat.create_time if stat else None, name, argv, announced_at=announced_at,
                                  start_marks=running.start_marks, floor_marks=running.floor_marks)
        self.marks.attach(running, call)
        self.gate.awaiting(call.number, running.mark)
        self._running = running
        if stat is not None:
            found = self.identities.of(stat)[2]
            running.container = found.container if found is not None else None
            self.gate.follow_container(running.container, stat.pid)
        if self.gate.cut_short(stat):
            call.cut_short = True  # running when we froze or stopped the tree, or started since
        self.hooks.started(call, now)
        if stat is not None:
            self.gate.refuse_begun(stat, name)
        exited = self.marks.exit_of(running)[0]
        if exited or stat is None or (running.fd is None and read_stat(stat.pid) is None):
            self._ended(running, marked=exited)  # over already, or gone before we could hold it

    def _exited_threadsafe(self, running: RunningCall) -> None:
        """The exits thread: close the call's segment now, then tell the event loop."""
        self.marks.exited(running)
        self.workspace.mark_call_end(running.key)
        self._call_soon(self._exit_seen, running)

    def _exit_seen(self, running: RunningCall) -> None:
        if self._running is running:
            self._ended(running, marked=True)
        # else: not begun yet (its begin ends it at once), or already ended

    def _ended(self, running: RunningCall, marked: bool = False) -> None:
        """The call's process exited (its pidfd is readable, or the sampler saw it go)."""
        call = running.call
        if self._running is not running or call is None:
            return
        self._running = None
        self.gate.follow_container(None)
        if not marked:
            self.workspace.mark_call_end(running.key)  # first: what the loop writes next is not the call's
        status = exit_status(running, call.pid)
        self._drop_fd(running)
        ended = self.marks.exit_of(running)[1] or time.time()
        self.reports.finish(call, ended, running.key, status, by_timeout=running.parent == "timeout")

    def _drop_fd(self, running: RunningCall) -> None:
        fd, running.fd = running.fd, None
        if fd is None:
            return
        if self._exits is not None:
            self._exits.forget(fd)
        os.close(fd)

    async def finish_current(self) -> None:
        """The loop exited: end the call in progress (its pidfd says whether it is gone), or make calls of the
        replies read from its output that no call claimed yet (a tick makes them only REPLY_SETTLE_SECONDS after
        they were read), and wait for every report still being put together."""
        if self._running is None:
            self._poll_notices(time.time(), final=True)  # a call whose notice is still to be taken ran too
        running = self._running
        if running is not None:
            self._ended(running)
        elif self.tracker.current is not None:  # marker mode
            self.reports.marker_boundary(time.time(), begin=False)
        await self.reports.wait()  # a call's report takes its own late output first
        if self.tracker.marker is None:  # replies that no call claimed: with the loop gone, nothing else will
            now = time.time()
            self.reports.from_replies(now, before=now)
            await self.reports.wait()
        if self.tracker.marker is None:
            await asyncio.wrap_future(self.pool.submit(self.workspace.close_gap))

    def marker_boundary(self, now: float) -> None:
        """Marker mode: a marker line ends the call in progress and begins the next."""
        self.reports.marker_boundary(now)

    # ------------------------------------------------------------------ between calls

    def waiting_since(self) -> float | None:
        """Since when the loop has run without an agent call (`CallReports.waiting_since`)."""
        return self.reports.waiting_since(self.gate.released_at)

    def container_processes(self) -> list[ProcStat]:
        """The processes of the running call's container (outside our tree): their CPU is the call's for the
        stall rule. The engine is asked once per call, off the event loop; [] until it answered."""
        running = self._running
        if running is None or running.container is None:
            return []
        if running.container_pid is None:
            if not running.asked_engine and self._loop is not None:  # never the workspace's own worker
                running.asked_engine = True
                self._loop.run_in_executor(None, self._ask_container_pid, running)
            return []
        return processes_of(running.container_pid)

    def _ask_container_pid(self, running: RunningCall) -> None:
        """The pool: ask the engine, and hand its answer to the loop."""
        pid = ask_host_pid(lambda: self.gate.running_container() if self.gate.container is running.container else None)
        if pid is not None:
            self._call_soon(setattr, running, "container_pid", pid)

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


def _key(notice: Notice) -> str:
    """A call's workspace segment: its pid and announcement time (a pid alone is recycled)."""
    return f"{notice.pid}@{notice.at}"


def _readable(fd: int) -> bool:
    try:
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):
        return False
