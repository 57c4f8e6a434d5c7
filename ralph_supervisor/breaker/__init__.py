"""The circuit breaker: pure, no I/O, no clock of its own.

- `machine.py`: the state machine the supervisor talks to (`Breaker`), which holds what the breaker knows;
- `transitions.py`: its transitions, pure functions from a snapshot and one input to a new snapshot and a
  `Decision` (`decision.py`: what the supervisor acts on);
- `rules.py`: the trip rules, one small pure function each, and the `Thresholds`;
- `snapshot.py`: what the breaker knows (`Snapshot`, the content of `state.json`) and its validation.

It imports nothing of the project but leaf modules (`iteration`, `triggers`, `similarity`, `text`).

    >>> from ralph_supervisor.iteration import IterationReport
    >>> b = Breaker(Thresholds(no_progress=1))
    >>> b.observe(IterationReport(number=1, started_at=0, ended_at=1), now=1.0).trigger
    'no-progress'
"""

from __future__ import annotations

from ralph_supervisor.breaker.decision import Action, Decision
from ralph_supervisor.breaker.machine import Breaker
from ralph_supervisor.breaker.rules import COOLDOWN_CAP, Fired, Thresholds, is_neutral, progress_detail
from ralph_supervisor.breaker.snapshot import Snapshot, State

__all__ = ["COOLDOWN_CAP", "Action", "Breaker", "Decision", "Fired", "Snapshot", "State", "Thresholds",
           "is_neutral", "progress_detail"]
