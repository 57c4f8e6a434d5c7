"""The decision path: what a breaker decision or a control request means for the tree.

Pure. The supervisor applies every decision through one `Applier.apply` (`runtime/apply.py`), in one order:
the history line first, then `state.json` (whoever sees the new state finds its transition already written),
then the tree action this module names, then what follows an open (the summary, the hook, the notices). A
breaker open and a `pause` request differ only in the plan they get here.

    >>> plan_for(Decision("open", State.OPEN, "no-progress", "stuck", 9), on_open="pause")
    <Plan.PAUSE: 'pause'>
    >>> plan_for(Decision("final", State.OPEN, "blocked", "Invalid API key", 2, final=True), on_open="pause")
    <Plan.STOP_FOR_GOOD: 'stop_for_good'>
"""

from __future__ import annotations

from enum import Enum

from ralph_supervisor.breaker import Decision, State
from ralph_supervisor.triggers import FINAL, MANUAL

__all__ = ["Decision", "Plan", "State", "plan_for", "plan_for_request", "EXIT_FOR_GOOD", "EXIT_STOP_REQUEST"]

EXIT_FOR_GOOD = 2
"""`run`'s code when the supervisor ended the child because the breaker opened for good."""
EXIT_STOP_REQUEST = 0
"""`run`'s code after `ralph-supervise stop`."""


class Plan(str, Enum):
    NOTHING = "nothing"
    PAUSE = "pause"
    """Freeze the tree (SIGSTOP); a trial or a human thaws it."""
    STOP_AND_RESTART = "stop_and_restart"
    """`--on-open kill`: stop the tree now, start the command again for the trial."""
    STOP_FOR_GOOD = "stop_for_good"
    """Stop the tree and exit 2: a final open, `--on-open stop`, a blocked trigger."""
    TRIAL = "trial"
    """Thaw the tree, or start the command again when it was stopped: the next iteration is the trial."""
    STOP_AND_EXIT = "stop_and_exit"
    """A `stop` request: stop the tree and exit 0."""


def plan_for(decision: Decision, *, on_open: str) -> Plan:
    """The tree action a breaker decision asks for, given `--on-open`."""
    if decision.action in ("open", "final"):
        if decision.final or on_open == "stop" or decision.trigger in FINAL:
            return Plan.STOP_FOR_GOOD
        if decision.trigger == MANUAL or on_open == "pause":
            return Plan.PAUSE
        return Plan.STOP_AND_RESTART
    if decision.action == "half_open":
        return Plan.TRIAL
    return Plan.NOTHING


def plan_for_request(command: str) -> Plan:
    """The tree action of a control request (`pause`, `resume`, `reset`, `stop`)."""
    return {"pause": Plan.PAUSE, "resume": Plan.TRIAL, "reset": Plan.TRIAL, "stop": Plan.STOP_AND_EXIT}[command]
