"""The breaker's triggers: one list, in precedence order, and which of them end a run for good.

A leaf module: the breaker, the metrics, the escalation summary, the docs and the tests all read the
names from here, so a trigger cannot be spelled or ordered differently in two places.

    >>> sorted(["no-progress", "same-error"], key=rank)[0]
    'same-error'
"""

from __future__ import annotations

PRECEDENCE: tuple[str, ...] = (
    "blocked",
    "destructive",
    "tampering",
    "same-error",
    "consecutive-failures",
    "regression",
    "false-completion",
    "paraphrase",
    "no-progress",
    "output-decline",
    "stall",
    "outage",
    "token-budget",
    "cost-budget",
    "daily-budget",
    "daily-cost-budget",
    "max-iterations",
)
"""Every rule's trigger. When several fire on one iteration, the first of them is the one reported."""

MANUAL = "manual"
"""A `pause` by hand: not a rule, never competes, never counts toward `--max-opens`."""

NONE = "none"
"""The trigger of a CLOSED breaker."""

TRIGGERS: tuple[str, ...] = (*PRECEDENCE, MANUAL)
"""Every trigger name `state.json`, `status --json` and the history may hold (besides `none`)."""

CAPS: frozenset[str] = frozenset({"token-budget", "cost-budget", "daily-budget", "daily-cost-budget", "max-iterations"})
"""Limits the user set: judged on every observed iteration, even a neutral one."""

FINAL: frozenset[str] = frozenset({"blocked", "outage", *CAPS})
"""Triggers that stop the run at once, whatever `--on-open` says: waiting cannot clear them (`outage`: the
API stayed out of reach through three back-offs after `--outage-max`)."""

HUMAN_ONLY: frozenset[str] = frozenset({"destructive", "tampering"})
"""Triggers whose open never ends by a cooldown: the tree waits for a human (like `manual`), but they count."""

WAITS_FOR_HUMAN: frozenset[str] = frozenset({*HUMAN_ONLY, MANUAL})
"""Opens that no cooldown ends: only `resume` (or `reset`) does."""


def rank(trigger: str) -> int:
    """The trigger's place in the precedence (unknown names last)."""
    try:
        return PRECEDENCE.index(trigger)
    except ValueError:
        return len(PRECEDENCE)
