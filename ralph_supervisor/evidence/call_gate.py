"""The call gate: no agent call starts before the one before it is judged, none while the tree is frozen, none
once a stop is decided.

- **Judged first.** A shim marks its call's verdict pending (`shims/pending/PID`) and the next shim waits
  while one is (see `shims.py`); the mark goes when the call is judged (`judged`). A call the sampler finds
  while a verdict is due is frozen (SIGSTOP) until it is in (`freeze_until_judged`, `thaw`), then begun at
  the next tick, or killed when that verdict stopped the loop.
- **Held.** While a stop is decided or the tree is frozen (`hold`), every shim refuses (a stop: exit 143,
  through `shims/refuse`, in the read-only part of a box's bind) or waits (a freeze), any agent process that
  still appears is killed at once, and the calls running at the hold are cut short (neutral, never a
  trial); refused shims and killed processes count as `refused`. `release` opens the way again.

The tree actions talk to the gate (`hold`, `release`, `refuse_process`, `running_calls`,
`running_container`); the call watcher tells it what runs. It lives on the event loop; a stop's
`refuse_process` runs on the pool and reads only `allowed`, a frozenset replaced whole, and the identity
cache (its own lock). The running call's container is published as one immutable value.

    gate = CallGate(tracker, identities, shims)
    gate.hold("stop", members); ...; gate.release()
    gate.judged(number)                     # the verdict on call `number` is in
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence

import structlog

from ralph_supervisor.evidence.call_identity import Identities
from ralph_supervisor.agents.recognize import Container
from ralph_supervisor.evidence.containers import ContainerCall, reference
from ralph_supervisor.evidence.iterations import IterationTracker
from ralph_supervisor.evidence.shims import ShimDir
from ralph_supervisor.process.linux import ProcStat, signal_if_same

log = structlog.get_logger(__name__)

STALE_PENDING_SECONDS = 2.0
"""A shim's pending mark no call awaits after this long is swept (its notice was lost)."""
CUT_SHORT_KEPT = 1024

Candidate = tuple[int, float, str, tuple[str, ...]]
"""An agent process the sampler found: pid, create time, name, command line."""


class CallGate:
    """Holds agent calls back: until the call before them is judged, while the tree is frozen, during a stop."""

    def __init__(self, tracker: IterationTracker, identities: Identities, shims: ShimDir | None = None) -> None:
        self.tracker = tracker
        self.identities = identities
        self.shims = shims
        self.refused = 0
        """Calls refused since the last `hold` (shims that exited 143, agents killed at once)."""
        self.holding: str | None = None
        """Why calls are held ("stop", "freeze"), None while they may start."""
        self.allowed: frozenset[tuple[int, float]] = frozenset()
        """The processes running at the hold (pid, create time): theirs to finish, not newcomers to kill."""
        self.released_at = 0.0
        """When calls were last let go again (the wait for one counts from then)."""
        self.container: Container | None = None
        """Where the running call runs when its process is a container front-end (set by the call watcher,
        replaced whole: any thread reads it)."""
        self._cut_short: set[tuple[int, float]] = set()
        self._gated: dict[tuple[int, int], ProcStat] = {}
        """Sampled calls frozen until the verdict on the call before them is in."""
        self._awaiting: dict[int, int] = {}
        """Shimmed calls begun and not yet judged: call number -> the PID naming its pending mark."""

    # ------------------------------------------------------------------ the tree actions' side

    def hold(self, why: str, members: Sequence[ProcStat]) -> None:
        """A stop is decided ("stop": shims refuse) or the tree freezes ("freeze": shims wait until it is
        thawed); agent processes that appear from now on are killed, and the calls running now (in
        `members`) are cut short by us (neutral, never a trial)."""
        if self.holding is None:
            self.refused = 0
        self.holding = why
        if self.tracker.current is not None:
            self.tracker.current.cut_short = True
        for stat in members:
            if self.identities.is_call(stat):
                self._cut_short.add((stat.pid, stat.create_time))
        self.allowed = self.allowed | {(stat.pid, stat.create_time) for stat in members}
        if len(self._cut_short) > CUT_SHORT_KEPT:
            self._cut_short.clear()
        self._flag(lambda shims: shims.refuse(True) if why == "stop" else shims.hold(True))

    def release(self) -> None:
        """New calls may start again (a resume, a trial, a restart); the wait for one counts from now."""
        self.holding = None
        self.allowed = frozenset()
        self._flag(lambda shims: (shims.refuse(False), shims.hold(False)))  # first: a shim thawed below must find the way open
        self._thaw_all()  # frozen while a verdict was due, then held: they may run now
        self.released_at = time.time()

    def refuse_process(self, stat: ProcStat) -> bool:
        """For the tree's stop (any thread): is this newcomer an agent call to kill at once?"""
        if (stat.pid, stat.create_time) in self.allowed:
            return False
        _, cmdline, call = self.identities.of(stat)
        if self.shims is not None and self.shims.is_shim(cmdline):
            return False  # it refuses by itself, with its own notice
        return call is not None

    def running_calls(self, members: Sequence[ProcStat]) -> frozenset[tuple[int, int]]:
        """The agent calls among the tree's members, (pid, start_ticks): a stop TERMs them after the loop."""
        return frozenset((s.pid, s.start_ticks) for s in members if self.identities.is_call(s))

    def running_container(self) -> ContainerCall | None:
        """Any thread: the container the running call runs in, when it can be named (None: no such call)."""
        container = self.container
        ref = reference(container) if container is not None else None
        return ContainerCall(container.engine, ref) if container is not None and ref is not None else None

    # ------------------------------------------------------------------ the call watcher's side

    def follow_container(self, container: Container | None, pid: int | None = None) -> None:
        """The running call (process `pid`) runs in `container` (None: no call, or not in one)."""
        self.container = container
        if container is not None and not container.target and not container.cidfile:
            log.warning("container_call_uncontrolled", pid=pid, engine=container.engine,
                        detail="observed, not controlled: a pause, resume or stop reaches the client only "
                               "(name the container with --name or --cidfile)")

    def cut_short(self, stat: ProcStat | None) -> bool:
        """Is the call of `stat` (None: gone already) cut short: running at a hold, or started during one?"""
        identity = (stat.pid, stat.create_time) if stat is not None else None
        return identity in self._cut_short or (self.holding is not None and identity not in self.allowed)

    def refuse_begun(self, stat: ProcStat, name: str) -> None:
        """A call that began during a hold is killed at once (and counts as refused)."""
        if self.holding is not None and (stat.pid, stat.create_time) not in self.allowed \
                and signal_if_same(stat.pid, stat.start_ticks, signal.SIGKILL):
            self.refused += 1
            log.warning("agent_call_killed", pid=stat.pid, name=name, holding=self.holding)

    def refused_by_shim(self, name: str, pid: int) -> None:
        self.refused += 1
        log.info("agent_call_refused", name=name, pid=pid, holding=self.holding)

    def kill_newcomers(self, stats: Sequence[ProcStat], candidates: Sequence[Candidate]) -> None:
        """While holding: the agent processes that appeared are killed at once."""
        for pid, ctime, name, _cmdline in candidates:
            if (pid, ctime) in self.allowed or self.tracker.knows(pid, ctime):
                continue
            stat = next(s for s in stats if s.pid == pid)  # every candidate is an agent call
            if signal_if_same(pid, stat.start_ticks, signal.SIGKILL):
                self.refused += 1
                log.warning("agent_call_killed", pid=pid, name=name, holding=self.holding)
            self.tracker.ignore_process(pid, ctime)

    def awaiting(self, number: int, mark: int | None) -> None:
        """Call `number` began, announced by a shim: its pending mark stays until its verdict is in."""
        if mark is not None:
            self._awaiting[number] = mark

    def judged(self, number: int) -> None:
        """The verdict on call `number` is in: the shim of the next one may go on."""
        if number in self._awaiting:
            self.no_verdict(self._awaiting.pop(number))

    def no_verdict(self, mark: int | None) -> None:
        """A shim's notice that began no call (`--version`, a parallel call): nothing to wait for. Any thread."""
        if self.shims is not None and mark is not None:
            self.shims.judged(mark)

    def sweep(self, now: float) -> None:
        """Tick: pending marks no call awaits (a notice lost, a call never judged) go after a while."""
        if self.shims is not None:
            self.shims.sweep_pending(set(self._awaiting.values()), now - STALE_PENDING_SECONDS)

    def freeze_until_judged(self, found: ProcStat) -> None:
        """A sampled call seen while a verdict is due: frozen until it is in (begun at a tick after that)."""
        if (found.pid, found.start_ticks) not in self._gated and signal_if_same(found.pid, found.start_ticks, signal.SIGSTOP):
            self._gated[(found.pid, found.start_ticks)] = found
            log.info("agent_call_gated", pid=found.pid, name=found.name, until="the verdict on the call before it")

    def thaw(self, still_due: bool) -> None:
        """A verdict is in: the sampled calls frozen meanwhile run on (begun at the next tick), unless that
        verdict stopped or froze the loop (the hold refuses them) or another call's verdict is `still_due`
        (its delivery thaws them)."""
        if self.holding is None and not still_due:
            self._thaw_all()

    def _thaw_all(self) -> None:
        gated, self._gated = self._gated, {}
        for stat in gated.values():
            signal_if_same(stat.pid, stat.start_ticks, signal.SIGCONT)

    def _flag(self, change: Callable[[ShimDir], object]) -> None:
        if self.shims is None:
            return
        try:
            change(self.shims)
        except OSError as exc:
            log.warning("shims_cannot_refuse", error=str(exc))
