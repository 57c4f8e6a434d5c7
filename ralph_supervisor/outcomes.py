"""The words a person reads for an iteration's outcome and for the breaker: one set, said the same everywhere.

A leaf module (only `triggers` below it): the console lines, `watch`, `status`, the report, `escalation.md`
and the notices all take their outcome marks and breaker labels from here, so "no change" cannot be
"noop" in one place and "no progress" in another.

    >>> outcome_of(progress=False, failed=True).word
    'failed'
    >>> breaker_label("OPEN", "no-progress")
    'OPEN no-progress'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ralph_supervisor.triggers import NONE


@dataclass(frozen=True)
class Outcome:
    """What one iteration came to: a key, a one-cell mark, the word for people, and its colour (rich style)."""

    key: str
    mark: str
    word: str
    style: str

    @property
    def label(self) -> str:
        """`✔ progress`: the mark and the word."""
        return f"{self.mark} {self.word}"


PROGRESS = Outcome("progress", "✔", "progress", "green")
NO_CHANGE = Outcome("no-change", "·", "no change", "yellow")
FAILED = Outcome("failed", "✗", "failed", "red")
LIMITED = Outcome("limited", "⧗", "usage limit", "blue")
BLOCKED = Outcome("blocked", "⊘", "blocked", "magenta")
CUT_SHORT = Outcome("cut-short", "✂", "cut short", "dim")
OUTAGE = Outcome("outage", "⌁", "API outage", "blue")
OUTCOMES: tuple[Outcome, ...] = (PROGRESS, NO_CHANGE, FAILED, LIMITED, BLOCKED, CUT_SHORT, OUTAGE)
"""Every outcome; the marks are one terminal cell wide each (no emoji: those take two)."""
WORD_WIDTH = max(len(o.word) for o in OUTCOMES)


def outcome_of(*, progress: bool, failed: bool = False, usage_limited: bool = False, blocked: bool = False,
               cut_short: bool = False, outage: bool = False) -> Outcome:
    """The worst thing first: a call cut short, a usage limit, an API outage, a blocked call, a failed one;
    then progress or not."""
    if cut_short:
        return CUT_SHORT
    if usage_limited:
        return LIMITED
    if outage:
        return OUTAGE
    if blocked:
        return BLOCKED
    if failed:
        return FAILED
    return PROGRESS if progress else NO_CHANGE


def outcome_words(outcome: Outcome, *, completed: bool = False, timed_out: bool = False) -> str:
    """The word with what else is worth saying: `progress, completed`, `failed (timeout)`, `no change, completed`."""
    if outcome is FAILED and timed_out:
        return "failed (timeout)"
    if completed and outcome in (PROGRESS, NO_CHANGE):
        return f"{outcome.word}, completed" if outcome is PROGRESS else "completed, no change"
    return outcome.word


# ---------------------------------------------------------------------------------------------- the breaker

STATE_STYLE: Mapping[str, str] = {"CLOSED": "bold green", "HALF_OPEN": "bold yellow", "OPEN": "bold red"}


def breaker_label(state: str, trigger: str | None) -> str:
    """`OPEN no-progress`, `HALF_OPEN no-progress`, `CLOSED`: the state, and the trigger when there is one."""
    if not trigger or trigger == NONE or state == "CLOSED":
        return state
    return f"{state} {trigger}"


def breaker_line(state: str, trigger: str | None, reason: str | None) -> str:
    """`OPEN no-progress: <the reason in full>`: how a transition is told (console, notices)."""
    label = breaker_label(state, trigger)
    return f"{label}: {reason}" if reason else label
