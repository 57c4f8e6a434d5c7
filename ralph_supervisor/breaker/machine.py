"""The circuit breaker the supervisor talks to: it holds what the breaker knows and applies the transitions.

`Breaker` is the small stateful holder: every event method hands its snapshot, the thresholds and the input
to the pure function of the same name in `transitions.py`, keeps the new snapshot and returns the
`Decision`. The rules are in `rules.py`, the states and their meaning in `transitions.py`.

    >>> b = Breaker(Thresholds(no_progress=1))
    >>> b.observe(IterationReport(number=1, started_at=0, ended_at=1), now=1.0).trigger
    'no-progress'
    >>> b.state.value
    'OPEN'
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ralph_supervisor.breaker import transitions
from ralph_supervisor.breaker.decision import Decision
from ralph_supervisor.breaker.rules import Thresholds
from ralph_supervisor.breaker.snapshot import Snapshot, State
from ralph_supervisor.iteration import IterationReport


class Breaker:
    """The state machine. Feed it `iteration_started`, `observe` and `tick`; act on the Decisions.

    Persist `snapshot().to_dict()` after every `observe` and every decision whose action is not "none";
    `Breaker(thresholds, Snapshot.from_dict(data))` continues exactly where it left off. One thread uses it
    (the supervisor's event loop).
    """

    def __init__(self, thresholds: Thresholds, snapshot: Snapshot | None = None) -> None:
        self.thresholds = thresholds
        snap = snapshot if snapshot is not None else Snapshot()
        self._s = replace(snap, cooldown_s=transitions.clamp_cooldown(snap.cooldown_s, thresholds))

    # -- reading ---------------------------------------------------------------------------------

    @property
    def state(self) -> State:
        return self._s.state

    @property
    def trigger(self) -> str:
        return self._s.trigger

    @property
    def reason(self) -> str:
        return self._s.reason

    @property
    def final(self) -> bool:
        return self._s.final

    @property
    def total_opens(self) -> int:
        return self._s.total_opens

    @property
    def iteration(self) -> int:
        return self._s.iteration

    def snapshot(self) -> Snapshot:
        return self._s

    def to_dict(self) -> dict[str, Any]:
        return self._s.to_dict()

    @classmethod
    def from_dict(cls, thresholds: Thresholds, data: object) -> Breaker:
        return cls(thresholds, Snapshot.from_dict(data))

    def status(self) -> dict[str, Any]:
        """The breaker's part of `status --json`."""
        s = self._s
        return {
            "state": s.state.value,
            "trigger": s.trigger,
            "reason": s.reason,
            "iteration": s.iteration,
            "consecutive_no_progress": s.consecutive_no_progress,
            "consecutive_same_error": s.consecutive_same_error,
            "consecutive_failures": s.consecutive_failures,
            "total_opens": s.total_opens,
            "tokens_used": s.tokens_used,
            "cost_usd": round(s.cost_used, 6),
        }

    def seconds_until_half_open(self, now: float) -> float | None:
        """How long until the cooldown ends (0 when due), or None when no cooldown is running."""
        return transitions.seconds_until_half_open(self._s, now)

    # -- events (each one is documented at its transition) ----------------------------------------

    def iteration_started(self, number: int, now: float) -> Decision:
        return self._take(transitions.iteration_started(self._s, self.thresholds, number, now))

    def observe(self, report: IterationReport, now: float, daily_tokens_today: int = 0,
                daily_cost_today: float = 0.0) -> Decision:
        return self._take(transitions.observe(self._s, self.thresholds, report, now, daily_tokens_today,
                                              daily_cost_today))

    def tick(self, now: float, *, silent_since: float | None = None, waiting_for_call: bool = False,
             loop_errors: tuple[str, ...] = ()) -> Decision:
        return self._take(transitions.tick(self._s, self.thresholds, now, silent_since=silent_since,
                                           waiting_for_call=waiting_for_call, loop_errors=loop_errors))

    def manual_open(self, reason: str, now: float) -> Decision:
        return self._take(transitions.manual_open(self._s, reason, now))

    def destructive_open(self, reason: str, now: float, iteration: int | None = None) -> Decision:
        return self._take(transitions.destructive_open(self._s, self.thresholds, reason, now, iteration))

    def verdict_open(self, trigger: str, reason: str, now: float) -> Decision:
        return self._take(transitions.verdict_open(self._s, self.thresholds, trigger, reason, now))

    def verified_progress(self) -> None:
        self._s = transitions.verified_progress(self._s)

    def resume(self, now: float) -> Decision:
        return self._take(transitions.resume(self._s, now))

    def reset(self) -> Decision:
        return self._take(transitions.reset(self._s, self.thresholds))

    def _take(self, step: transitions.Step) -> Decision:
        self._s, decision = step
        return decision
