"""The supervised process tree: every live descendant of the supervisor, wherever it went.

A Ralph loop's processes leave their parents' sessions and process groups (GNU timeout, tool shells,
`setsid`, double-forked daemons), so group signals miss them. As the child subreaper the supervisor
inherits every orphan of the tree, which makes "all live descendants of the supervisor" exactly the
tree. Each member is tracked by (pid, start time); a signal goes out only after the kernel confirms
that pid still names the same process (linux.signal_if_same), so a recycled PID is never hit.

Where the loop has a cgroup (`freezer`, process/cgroup.py), a pause is its freeze: atomic, and within
milliseconds however big the tree; the few processes of the tree outside it (they left it, or never entered)
are paused by signals, as the whole tree is where there is no cgroup. process/frozen.py says what "held"
means on either path.

All methods may be called from any thread; kill_now() may interrupt a stop() running in another
thread (the supervisor's second SIGINT). The pause's own state (paused, the cgroup it froze, the strays it
stopped) is behind `_lock`; a look (`sample`) that finds a stray while frozen stops it only when no pause,
resume or stop holds that lock.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import structlog

from ralph_supervisor.process.cgroup import FREEZE_WAIT, LoopCgroup
from ralph_supervisor.process.frozen import STOPPED_STATES, held
from ralph_supervisor.process.helpers import HELPERS, Helpers
from ralph_supervisor.process.linux import (
    ProcStat,
    all_stats,
    children_of,
    create_time_to_ticks,
    descendant_stats,
    read_stat,
    signal_if_same,
)
from ralph_supervisor.process.reaper import Reaper

log = structlog.get_logger(__name__)

HELD_WAIT = FREEZE_WAIT
"""How long a pause waits for what it signalled to report state T: as long as for the cgroup's freeze (one in
uninterruptible sleep, an exec reading a busy disk, stops only when it leaves it)."""
MEMBERS_EVERY = 1.0
"""A look reads who is in the cgroup at most this often while it is not frozen (`cgroup.procs` costs about a
third of a µs a process; CPU and memory, read at every look, a few µs): benchmarks say per tick (docs/bench)."""


@dataclass(frozen=True)
class Member:
    """One process of the tree, identified by pid AND create_time (psutil's definition)."""

    pid: int
    create_time: float
    name: str
    ppid: int

    @property
    def key(self) -> tuple[int, float]:
        return (self.pid, self.create_time)


@dataclass(frozen=True)
class StopResult:
    survivors: tuple[Member, ...]
    """Members still alive when stop gave up (normally none)."""
    duration_ms: int
    signalled: int
    """Distinct processes that received TERM or KILL."""
    refused: int = 0
    """Agent calls that started during the stop and were killed at once."""


def member_of(stat: ProcStat) -> Member:
    return Member(pid=stat.pid, create_time=stat.create_time, name=stat.name, ppid=stat.ppid)


def walk(
    stats: Iterable[ProcStat],
    roots: Iterable[int],
    exclude: Callable[[int], bool] | None = None,
    include_roots: bool = False,
) -> list[ProcStat]:
    """The live descendants of `roots` in breadth-first order (parents before children).

    Pure. Zombies are left out (they have exited; their children were already re-parented).
    An excluded pid is left out together with its whole subtree.
    """
    by_pid: dict[int, ProcStat] = {}
    children: dict[int, list[ProcStat]] = {}
    for stat in stats:
        by_pid[stat.pid] = stat
        children.setdefault(stat.ppid, []).append(stat)
    found: list[ProcStat] = []
    seen: set[int] = set()
    queue: list[int] = []
    for root in roots:
        if root in seen:
            continue
        seen.add(root)
        if include_roots:
            stat = by_pid.get(root)
            if stat is None or not stat.alive or (exclude is not None and exclude(root)):
                continue
            found.append(stat)
        queue.append(root)
    index = 0
    while index < len(queue):
        parent = queue[index]
        index += 1
        for child in children.get(parent, ()):
            if child.pid in seen or not child.alive:
                continue
            seen.add(child.pid)
            if exclude is not None and exclude(child.pid):
                continue
            found.append(child)
            queue.append(child.pid)
    return found


class ProcessTree:
    """Scan, stop, pause and resume every live descendant of `supervisor_pid`."""

    def __init__(
        self,
        supervisor_pid: int,
        reaper: Reaper,
        exclude: Callable[[int], bool] | None = None,
        kill_timeout: float = 2.0,
        helpers: Helpers = HELPERS,
        freezer: LoopCgroup | None = None,
    ) -> None:
        self._root = supervisor_pid
        self._reaper = reaper
        self._helpers = helpers
        self._exclude = (lambda pid: pid in helpers or exclude(pid)) if exclude is not None else helpers.__contains__
        self._kill_timeout = kill_timeout
        self.freezer = freezer
        """The loop's cgroup, whose freeze is the pause; None where there is none (or it was lost): signals."""
        self._lock = threading.Lock()
        self._paused = False
        self._frozen: LoopCgroup | None = None
        """The cgroup the current pause froze (None: none, or paused by signals)."""
        self._stopped: dict[tuple[int, int], ProcStat] = {}
        """The strays (members outside the frozen cgroup) this pause stopped by signal."""
        self._strays: tuple[ProcStat, ...] = ()
        """The members outside the cgroup at the last look (`sample`): where a pause looks for them first."""
        self._inside: tuple[float, frozenset[int]] = (-MEMBERS_EVERY, frozenset())
        """When the last look read who is in the cgroup, and who (the looks' own: `sample`'s caller's thread)."""
        self._kill_requested = threading.Event()

    # --- looking -------------------------------------------------------------------------------

    def scan(self) -> list[Member]:
        """The live members now, parents before children."""
        return [member_of(stat) for stat in self._scan_stats()]

    def sample(self) -> list[ProcStat]:
        """The members with their CPU ticks, read the cheap way (children files) for periodic sampling.

        Costs reads proportional to the tree, not to the whole system; falls back to a full scan
        where the kernel has no children files. Stop, and a pause by signals, keep using full scans. With a
        cgroup it is also the tick's look at it (`_look`: its figures, the members outside it).
        """
        stats = descendant_stats(self._root, self._exclude)
        if stats is None:
            stats = self._scan_stats()
        cgroup = self.freezer
        if cgroup is not None:
            self._look(cgroup, stats)
        return stats

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def freezes(self) -> bool:
        """A pause is the cgroup's freeze (else signals)."""
        return self.freezer is not None

    def held(self, stats: Iterable[ProcStat]) -> bool:
        """Every one of `stats` is held still (process/frozen.py): in the frozen cgroup, or stopped by a signal."""
        cgroup = self._frozen
        inside = cgroup.members() if cgroup is not None and cgroup.frozen() else frozenset()
        return all(held(s.pid, s.state, frozen=inside) for s in stats)

    # --- acting --------------------------------------------------------------------------------

    def send(self, member: Member, sig: int) -> bool:
        """Signal one member if, and only if, its pid still names the same process."""
        return signal_if_same(member.pid, create_time_to_ticks(member.create_time), sig)

    def stop(self, grace: float, *, leader: int | None = None,
             refuse: Callable[[ProcStat], bool] | None = None,
             calls: frozenset[tuple[int, int]] = frozenset(),
             calls_termed: Callable[[], object] | None = None) -> StopResult:
        """Stop the tree in the loop's order, the way a terminal's Ctrl-C and systemd's KillMode=mixed do:

        1. TERM the process group of `leader` (the loop: a session and group leader), so its trap runs
           first, but not the agent calls running (`calls`: (pid, start_ticks)) and what belongs to them
           (`call_family`: their descendants, a wrapper between a call and the loop such as GNU `timeout`
           or a package runner, a `tee` reading a call's output), so the loop records its interruption
           while its call still works;
        2. once the leader has exited or half the grace has passed, TERM everything left (and run
           `calls_termed`: a call in a container gets its TERM through its engine);
        3. KILL at the grace, then re-scan until nothing is left (bounded by kill_timeout).

        Newcomers are TERMed in phase 2 and after; a newcomer for which `refuse(stat)` is true (an agent
        call starting while we stop) is KILLed at once, in any phase. Without `leader` phase 2 starts at
        once (everything is TERMed together). A frozen cgroup is thawed right after the first TERMs, so the
        loop meets them before it runs again."""
        started = time.monotonic()
        self._kill_requested.clear()
        signalled: set[tuple[int, int]] = set()
        refused: set[tuple[int, int]] = set()
        at_start: set[tuple[int, int]] = set()
        deadline = started + grace
        with self._lock:
            wake, frozen = self._paused, self._frozen
            self._paused, self._frozen, self._stopped = False, None, {}
        with self._helpers.lock:  # each scan and its signals: no helper starts in between (helpers.py)
            stats = self._scan_stats()
            at_start.update((s.pid, s.start_ticks) for s in stats)
            head = next((s for s in stats if s.pid == leader), None) if leader is not None else None
            everyone = head is None
            if head is None and calls_termed is not None:
                calls_termed()
            if head is not None:
                spared = call_family(stats, calls, leader) if calls else set()
                self._term([s for s in stats if s.pgid == head.pgid and (s.pid, s.start_ticks) not in spared],
                           signalled, wake=wake)
            else:
                self._term(stats, signalled, wake=wake)
        if frozen is not None:
            self._thaw(frozen)
        half = started + grace / 2
        pause_s = 0.005
        while stats:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._kill_requested.wait(min(pause_s, remaining)):
                break
            pause_s = min(pause_s * 2, 0.05)
            self._reaper.reap()
            with self._helpers.lock:
                stats = self._scan_stats()
                if refuse is not None:
                    # every newcomer not yet signalled, on each scan: one seen between its fork and its exec
                    # still has its parent's command line, and is refused once it shows what it runs
                    for stat in stats:
                        key = (stat.pid, stat.start_ticks)
                        if key in at_start or key in signalled:
                            continue
                        if refuse(stat) and signal_if_same(stat.pid, stat.start_ticks, signal.SIGKILL):
                            refused.add((stat.pid, stat.start_ticks))
                            signalled.add((stat.pid, stat.start_ticks))
                if not everyone and (time.monotonic() >= half or not any(s.pid == leader for s in stats)):
                    everyone = True
                    pause_s = 0.005
                    if calls_termed is not None:
                        calls_termed()
                if everyone:
                    rest = [s for s in stats if (s.pid, s.start_ticks) not in signalled]
                    if rest:
                        self._term(rest, signalled, wake=wake)
        survivors: list[ProcStat] = []
        if stats:
            survivors = self._kill_until_empty(signalled)
        else:
            self._reaper.reap()
        return StopResult(
            survivors=tuple(member_of(s) for s in survivors),
            duration_ms=int((time.monotonic() - started) * 1000),
            signalled=len(signalled),
            refused=len(refused),
        )

    def kill_now(self) -> StopResult:
        """SIGKILL everything at once; also cuts short a stop() waiting out its grace."""
        started = time.monotonic()
        self._kill_requested.set()
        signalled: set[tuple[int, int]] = set()
        survivors = self._kill_until_empty(signalled)  # a frozen process dies of SIGKILL too
        frozen, self._frozen, self._paused, self._stopped = self._frozen, None, False, {}  # no lock: we hurry
        if frozen is not None:
            self._thaw(frozen)  # what the cgroup gets next (a restart) is not born frozen
        return StopResult(
            survivors=tuple(member_of(s) for s in survivors),
            duration_ms=int((time.monotonic() - started) * 1000),
            signalled=len(signalled),
        )

    def pause(self) -> int:
        """Hold every member still; return how many. With a cgroup: freeze it, then SIGSTOP the strays outside
        it. Without: SIGSTOP every member, parents first, re-scanning until no newcomer shows up. Returns once
        they are all held (bounded: a process in uninterruptible sleep is held only when it leaves it).

        Clocks keep running while paused: GNU `timeout` around an agent call counts the pause, so a
        pause longer than the call's timeout ends that call right after resume()."""
        with self._lock:
            cgroup = self.freezer
            if cgroup is not None:
                problem = cgroup.freeze()
                if problem is None:
                    if not cgroup.frozen():
                        _say_slow("cgroup", FREEZE_WAIT, path=str(cgroup.path))
                    self._paused, self._frozen = True, cgroup
                    inside = cgroup.members()
                    return len(inside) + self._stop_strays(inside, [*self._strays, *self._children()])
                self._lose_freezer(cgroup, problem)
            count = self._pause_by_signals()
            self._paused = True
            return count

    def resume(self) -> int:
        """Thaw what the pause held (the cgroup, and the strays it stopped; without a cgroup, SIGCONT every
        member, children before parents); return the count."""
        with self._lock:
            frozen, self._frozen = self._frozen, None
            stopped, self._stopped = self._stopped, {}
            self._paused = False
            if frozen is None:
                return self._resume_by_signals()
            count = len(frozen.members())
            self._thaw(frozen)
            with self._helpers.lock:
                for stat in stopped.values():
                    signal_if_same(stat.pid, stat.start_ticks, signal.SIGCONT)
            return count + len(stopped)

    def _pause_by_signals(self) -> int:
        stopped: dict[tuple[int, int], ProcStat] = {}
        with self._helpers.lock:  # no helper may start between a scan and its SIGSTOPs (helpers.py)
            for _ in range(50):
                fresh = [s for s in self._scan_stats() if (s.pid, s.start_ticks) not in stopped]
                if not fresh:
                    break
                for stat in fresh:
                    if signal_if_same(stat.pid, stat.start_ticks, signal.SIGSTOP):
                        stopped[(stat.pid, stat.start_ticks)] = stat
        if not _await_held(list(stopped.values()), timeout=HELD_WAIT):
            _say_slow("signals", HELD_WAIT)
        return len(stopped)

    def _resume_by_signals(self) -> int:
        count = 0
        with self._helpers.lock:
            for stat in reversed(self._scan_stats()):
                if signal_if_same(stat.pid, stat.start_ticks, signal.SIGCONT):
                    count += 1
        return count

    def _stop_strays(self, inside: frozenset[int], candidates: Iterable[ProcStat | None], wait: bool = True) -> int:
        """SIGSTOP the members among `candidates` outside the frozen cgroup (`inside`), and their descendants;
        the number this pause holds by signal (`wait`: once they report it). The caller holds `_lock`."""
        queue = [s for s in candidates if s is not None]
        with self._helpers.lock:
            while queue:
                stat = queue.pop()
                key = (stat.pid, stat.start_ticks)
                if stat.pid in inside or key in self._stopped or self._exclude(stat.pid) or not stat.alive:
                    continue
                if signal_if_same(stat.pid, stat.start_ticks, signal.SIGSTOP):
                    self._stopped[key] = stat
                    queue.extend(read_stat(kid) for kid in children_of(stat.pid) or ())
        if wait:
            _await_held(list(self._stopped.values()), timeout=HELD_WAIT)
        return len(self._stopped)

    def _children(self) -> list[ProcStat | None]:
        """Our own children: a loop that never entered the cgroup, the orphans it left (we are their reaper)."""
        return [read_stat(pid) for pid in children_of(self._root) or ()]

    def _look(self, cgroup: LoopCgroup, stats: list[ProcStat]) -> None:
        """The tick's look at the cgroup: its figures (`cgroup.latest`), the members outside it (who is inside
        read at most every MEMBERS_EVERY seconds, at each look while frozen), and, while it is frozen, a pause
        of any of those not held yet (one that left it since the pause)."""
        now = time.monotonic()
        read_at, inside = self._inside
        fresh = self._frozen is cgroup or now - read_at >= MEMBERS_EVERY
        if fresh:
            inside = cgroup.members()
            self._inside = (now, inside)
        if cgroup.look(inside if fresh else None) is None:
            if cgroup.lost is not None:
                self._lose_freezer(cgroup, cgroup.lost)
            return
        self._strays = strays = tuple(s for s in stats if s.pid not in inside)
        if strays and self._frozen is cgroup and self._lock.acquire(blocking=False):
            try:
                if self._frozen is cgroup:  # no resume came in between
                    self._stop_strays(inside, strays, wait=False)  # the tick waits for nothing
            finally:
                self._lock.release()

    def _thaw(self, cgroup: LoopCgroup) -> None:
        problem = cgroup.thaw()
        if problem is not None:
            self._lose_freezer(cgroup, problem)

    def _lose_freezer(self, cgroup: LoopCgroup, problem: str) -> None:
        """The cgroup cannot be used any more (gone, read-only): said once, and the signals do the work."""
        if self.freezer is cgroup:
            self.freezer = None
            log.warning("cgroup_lost", path=str(cgroup.path), error=problem,
                        fallback="the tree is paused and stopped by signals from now on")

    # --- inside --------------------------------------------------------------------------------

    def _scan_stats(self) -> list[ProcStat]:
        return walk(all_stats(), [self._root], self._exclude)

    def _term(self, stats: list[ProcStat], signalled: set[tuple[int, int]], wake: bool) -> None:
        for stat in stats:
            if signal_if_same(stat.pid, stat.start_ticks, signal.SIGTERM):
                signalled.add((stat.pid, stat.start_ticks))
                if wake or stat.state in STOPPED_STATES:
                    # A stopped process keeps TERM pending until it runs again.
                    signal_if_same(stat.pid, stat.start_ticks, signal.SIGCONT)

    def _kill_until_empty(self, signalled: set[tuple[int, int]]) -> list[ProcStat]:
        """KILL, reap, re-scan until the tree is empty or kill_timeout passes; return what is left."""
        deadline = time.monotonic() + self._kill_timeout
        pause_s = 0.001
        while True:
            self._reaper.reap()
            with self._helpers.lock:
                stats = self._scan_stats()
                if not stats:
                    self._reaper.reap()  # whoever turned zombie after the reap above
                    return []
                if time.monotonic() >= deadline:
                    log.warning("tree_kill_incomplete", survivors=[(s.pid, s.name, s.state) for s in stats])
                    return stats
                for stat in stats:  # parents first: a killed parent forks no more
                    if signal_if_same(stat.pid, stat.start_ticks, signal.SIGKILL):
                        signalled.add((stat.pid, stat.start_ticks))
            time.sleep(pause_s)
            pause_s = min(pause_s * 2, 0.02)


def call_family(stats: list[ProcStat], calls: Iterable[tuple[int, int]], leader: int | None,
                read_pipes: Callable[[int], tuple[set[str], str | None]] | None = None) -> set[tuple[int, int]]:
    """The processes that belong to the agent calls (pid, start_ticks) among `stats`: each call, its
    descendants, the ancestors between it and the loop (`leader`, never included: a wrapper such as
    GNU `timeout`, `npx` or a container client passes signals on to the call), and the processes that
    read a call's output through a pipe (`claude -p … | tee log`), with their descendants."""
    by_pid = {s.pid: s for s in stats}
    children: dict[int, list[ProcStat]] = {}
    for stat in stats:
        children.setdefault(stat.ppid, []).append(stat)
    family: set[tuple[int, int]] = set()
    heads = [by_pid[pid] for pid, ticks in calls if pid in by_pid and by_pid[pid].start_ticks == ticks]
    pipes: set[str] = set()
    read = read_pipes or _pipes_of
    for head in heads:
        current = by_pid.get(head.ppid)
        hops = 0
        while current is not None and current.pid != leader and hops < 64:
            family.add((current.pid, current.start_ticks))
            current = by_pid.get(current.ppid)
            hops += 1
        pipes |= read(head.pid)[0]
    readers = [s for s in stats if (read(s.pid)[1] or "") in pipes] if pipes else []
    stack = heads + readers
    seen: set[int] = set()
    while stack:
        stat = stack.pop()
        if stat.pid in seen:
            continue
        seen.add(stat.pid)
        family.add((stat.pid, stat.start_ticks))
        stack.extend(children.get(stat.pid, ()))
    return family


def _pipes_of(pid: int) -> tuple[set[str], str | None]:
    """The pipes a process writes to (its stdout and stderr) and the one it reads (stdin), as /proc names them."""
    out: set[str] = set()
    stdin = None
    for fd in (0, 1, 2):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("pipe:"):
            if fd == 0:
                stdin = target
            else:
                out.add(target)
    return out, stdin


def _await_held(stats: list[ProcStat], timeout: float) -> bool:
    """Wait until every process is held (process/frozen.py) or gone, at most `timeout` seconds; whether they are."""
    deadline = time.monotonic() + timeout
    pending = stats
    while pending:
        still: list[ProcStat] = []
        for stat in pending:
            now = read_stat(stat.pid)
            if now is not None and now.start_ticks == stat.start_ticks and now.alive and not held(now.pid, now.state):
                still.append(stat)
        pending = still
        if not pending:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)
    return True


def _say_slow(how: str, waited_s: float, **where: str) -> None:
    """A pause that returns before every process is held says so (it is held when it leaves the kernel)."""
    log.warning("tree_hold_slow", how=how, waited_s=waited_s, **where,
                note="not every process is held yet: one in uninterruptible sleep is held when it leaves it")
