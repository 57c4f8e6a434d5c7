"""Sampling the tree for agent calls no shim announced: started by absolute path, under another name, by a
loop that replaced `PATH`, or with no shims at all.

On each tick the tree's processes are looked at; the agent calls among them (`call_identity.py`) that no
shim announced, are not a shim still running, and were not seen before are candidates, and the oldest new
one begins a call. A process that began before the last reply counted from the output was that reply's call
and is not counted again. Its first writes came before the sampler saw it: it is dated from its process's
start (the kernel's start time).

    sampler = CallSampler(tracker, identities, announced=reader.announced, is_shim=shims.is_shim)
    candidates = sampler.candidates(stats)
    found = sampler.new_call(stats, candidates, reply_boundary)     # a ProcStat, or None
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from ralph_supervisor.evidence.call_gate import Candidate
from ralph_supervisor.evidence.call_identity import Identities
from ralph_supervisor.evidence.iterations import IterationTracker
from ralph_supervisor.process.linux import ProcStat, process_age

ANCESTORS_LOOKED_AT = 64


def started_at(stat: ProcStat) -> float:
    """When a process began, on the wall clock, from the kernel's start time (to a clock tick)."""
    return time.time() - process_age(stat.start_ticks)


class CallSampler:
    """Finds the agent calls in a sample of the tree that nothing announced. Lives on the event loop."""

    def __init__(self, tracker: IterationTracker, identities: Identities,
                 announced: Callable[[ProcStat], bool] = lambda stat: False,
                 is_shim: Callable[[Sequence[str]], bool] = lambda cmdline: False) -> None:
        self.tracker = tracker
        self.identities = identities
        self.announced = announced
        """Did a shim announce this process (its notice tells, not the sampler)?"""
        self.is_shim = is_shim

    def candidates(self, stats: Sequence[ProcStat]) -> list[Candidate]:
        """The agent calls among `stats` (to begin, or to kill while holding) that no shim announced."""
        found: list[Candidate] = []
        by_pid = {s.pid: s for s in stats}
        for stat in stats:
            name, cmdline, call = self.identities.of(stat)
            if call is None:
                continue
            if self.is_shim(cmdline) or self._under_announced(stat, by_pid):
                continue  # a shim not yet exec'd, or (inside) a call its shim announced: the notice tells
            found.append((stat.pid, stat.create_time, name, cmdline))
        return found

    def new_call(self, stats: Sequence[ProcStat], candidates: Sequence[Candidate], boundary: float) -> ProcStat | None:
        """The oldest candidate not seen before, but none that began before `boundary`, the end of the last
        reply counted from the output (that reply was its call)."""
        by_key = {(s.pid, s.create_time): s for s in stats}
        while (found := self.tracker.new_call_candidate(candidates)) is not None:
            stat = by_key[found]
            if not boundary or started_at(stat) >= boundary:
                return stat
            self.tracker.ignore_process(*found)
        return None

    def _under_announced(self, stat: ProcStat, by_pid: dict[int, ProcStat]) -> bool:
        """This process or one of its ancestors was announced (a forked subshell of an agent script
        carries the agent's name and command line)."""
        seen = 0
        current: ProcStat | None = stat
        while current is not None and seen < ANCESTORS_LOOKED_AT:
            if self.announced(current):
                return True
            current = by_pid.get(current.ppid)
            seen += 1
        return False
