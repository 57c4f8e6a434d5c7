"""What the breaker decides: the one value the supervisor acts on, writes to history.jsonl and hands to hooks.

    >>> d = Decision("open", State.OPEN, "no-progress", "no progress in 3 iterations", 7, cooldown_s=1800.0)
    >>> d.changed, d.to_dict()["from"]
    (True, 'CLOSED')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ralph_supervisor.breaker.snapshot import State

Action = Literal["none", "open", "half_open", "close", "final"]


@dataclass(frozen=True)
class Decision:
    """What the supervisor must do now, and why.

    `action`: "none" (carry on), "open" (apply `--on-open`: pause, kill or stop), "final" (stop the tree and
    exit 2, whatever `--on-open` says), "half_open" (resume the tree or restart the command: the next
    iteration is the trial), "close" (the trial made progress). `trigger` is the trigger this decision is
    about: for "close" and "half_open" the one being cured. `cooldown_s` is how long this OPEN lasts before
    the trial; 0 when it waits for a human (manual or final).
    """

    action: Action
    state: State
    trigger: str
    reason: str
    iteration: int
    final: bool = False
    cooldown_s: float = 0.0
    from_state: State = State.CLOSED
    total_opens: int = 0

    @property
    def changed(self) -> bool:
        """True when the breaker changed state (write history, act on the tree)."""
        return self.action != "none"

    def to_dict(self) -> dict[str, Any]:
        """The decision as JSON-ready data (the `--on-open-hook` stdin, the history line)."""
        return {
            "action": self.action,
            "from": self.from_state.value,
            "to": self.state.value,
            "state": self.state.value,
            "trigger": self.trigger,
            "reason": self.reason,
            "iteration": self.iteration,
            "final": self.final,
            "cooldown_s": self.cooldown_s,
            "total_opens": self.total_opens,
        }
