"""What the breaker knows, as a value (`Snapshot`), and how it is read back from `state.json`.

`Snapshot.from_dict` validates every field: a field of the wrong type or value raises ValueError naming
it, so the file's owner (`files/state_json.py`) can move a bad file aside and start CLOSED.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from ralph_supervisor.text import one_line
from ralph_supervisor.triggers import NONE, TRIGGERS

REASON_MAX = 300


class State(str, Enum):
    CLOSED = "CLOSED"
    HALF_OPEN = "HALF_OPEN"
    OPEN = "OPEN"


@dataclass(frozen=True)
class Snapshot:
    """Everything the breaker knows, as a value: what `state.json` holds.

    The windows (`recent_*`) keep only what the rules need: the error sets of the current run of
    erroring iterations, the word sets (not the text) of the last replies, the last output sizes.
    """

    state: State = State.CLOSED
    trigger: str = "none"
    reason: str = ""
    iteration: int = 0
    consecutive_no_progress: int = 0
    consecutive_same_error: int = 0
    consecutive_failures: int = 0
    failure_error: str = ""
    """The newest error line of the current run of failed calls."""
    opened_at: float | None = None
    total_opens: int = 0
    cooldown_s: float = 0.0
    tokens_used: int = 0
    cost_used: float = 0.0
    """Dollars the agent reported in this run."""
    final: bool = False
    changed_at: float | None = None
    """When the state last changed (same clock as `now`): silence before it does not count as a stall."""
    trial_after: int = 0
    """In HALF_OPEN: the trial is the first counted iteration numbered above this."""
    trial_iteration: int | None = None
    trial_started_at: float | None = None
    recent_error_sets: tuple[frozenset[str], ...] = ()
    recent_reply_words: tuple[frozenset[str], ...] = ()
    recent_reply_blockers: tuple[bool, ...] = ()
    """Beside `recent_reply_words`: whether each of those replies stated a blocker."""
    recent_output_bytes: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "trigger": self.trigger,
            "reason": self.reason,
            "iteration": self.iteration,
            "consecutive_no_progress": self.consecutive_no_progress,
            "consecutive_same_error": self.consecutive_same_error,
            "consecutive_failures": self.consecutive_failures,
            "failure_error": self.failure_error,
            "opened_at": self.opened_at,
            "total_opens": self.total_opens,
            "cooldown_s": self.cooldown_s,
            "tokens_used": self.tokens_used,
            "cost_used": round(self.cost_used, 6),
            "final": self.final,
            "changed_at": self.changed_at,
            "trial_after": self.trial_after,
            "trial_iteration": self.trial_iteration,
            "trial_started_at": self.trial_started_at,
            "recent_error_sets": [sorted(s) for s in self.recent_error_sets],
            "recent_reply_words": [sorted(s) for s in self.recent_reply_words],
            "recent_reply_blockers": list(self.recent_reply_blockers),
            "recent_output_bytes": list(self.recent_output_bytes),
        }

    @classmethod
    def from_dict(cls, data: object) -> Snapshot:
        """Read `state.json` data back. Missing fields take their defaults (older files); a field of the
        wrong type or value raises ValueError naming it, so the supervisor can move the file aside."""
        if not isinstance(data, Mapping):
            raise ValueError(f"breaker state must be a JSON object, got {type(data).__name__}")
        d = data
        raw_state = d.get("state", State.CLOSED.value)
        try:
            state = State(raw_state)
        except ValueError:
            raise ValueError(
                f"breaker state field 'state' must be one of CLOSED, HALF_OPEN, OPEN, got {raw_state!r}"
            ) from None
        trigger = d.get("trigger", NONE)
        if trigger is None:
            trigger = NONE
        if trigger != NONE and trigger not in TRIGGERS:
            raise ValueError(f"breaker state field 'trigger' is not a known trigger: {trigger!r}")
        if state is not State.CLOSED and trigger == NONE:
            raise ValueError(f"breaker state field 'trigger' is 'none' but the state is {state.value}")
        snap = cls(
            state=state,
            trigger=trigger,
            reason=_str_field(d, "reason"),
            iteration=_int_field(d, "iteration"),
            consecutive_no_progress=_int_field(d, "consecutive_no_progress"),
            consecutive_same_error=_int_field(d, "consecutive_same_error"),
            consecutive_failures=_int_field(d, "consecutive_failures"),
            failure_error=_str_field(d, "failure_error"),
            opened_at=_opt_float_field(d, "opened_at"),
            total_opens=_int_field(d, "total_opens"),
            cooldown_s=_float_field(d, "cooldown_s"),
            tokens_used=_int_field(d, "tokens_used"),
            cost_used=_float_field(d, "cost_used"),
            final=_bool_field(d, "final"),
            changed_at=_opt_float_field(d, "changed_at"),
            trial_after=_int_field(d, "trial_after"),
            trial_iteration=_opt_int_field(d, "trial_iteration"),
            trial_started_at=_opt_float_field(d, "trial_started_at"),
            recent_error_sets=_sets_field(d, "recent_error_sets"),
            recent_reply_words=_sets_field(d, "recent_reply_words"),
            recent_reply_blockers=_bools_field(d, "recent_reply_blockers"),
            recent_output_bytes=_ints_field(d, "recent_output_bytes"),
        )
        blockers = snap.recent_reply_blockers
        if len(blockers) != len(snap.recent_reply_words):  # an older file, or a mismatch: unknown is "no"
            blockers = (blockers + (False,) * len(snap.recent_reply_words))[: len(snap.recent_reply_words)]
            snap = replace(snap, recent_reply_blockers=blockers)
        if snap.state is State.OPEN and snap.opened_at is None:
            raise ValueError("breaker state field 'opened_at' is missing but the state is OPEN")
        return snap


def _bad(name: str, expected: str, value: object) -> ValueError:
    return ValueError(one_line(f"breaker state field {name!r} must be {expected}, got {value!r}", REASON_MAX))


def _str_field(d: Mapping[str, Any], name: str) -> str:
    value = d.get(name, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _bad(name, "a string", value)
    return value


def _int_field(d: Mapping[str, Any], name: str) -> int:
    value = d.get(name, 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad(name, "a non-negative integer", value)
    return value


def _opt_int_field(d: Mapping[str, Any], name: str) -> int | None:
    if d.get(name) is None:
        return None
    return _int_field(d, name)


def _finite(value: int | float) -> bool:
    """Finite and representable as a float (a 400-digit int is not: float() would overflow)."""
    if isinstance(value, int):
        return abs(value) < 1e300
    return math.isfinite(value)


def _float_field(d: Mapping[str, Any], name: str) -> float:
    value = d.get(name, 0.0)
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value) or value < 0:
        raise _bad(name, "a non-negative finite number", value)
    return float(value)


def _opt_float_field(d: Mapping[str, Any], name: str) -> float | None:
    if d.get(name) is None:
        return None
    value = d[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value):
        raise _bad(name, "a finite number or null", value)
    return float(value)


def _bool_field(d: Mapping[str, Any], name: str) -> bool:
    value = d.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _bad(name, "true or false", value)
    return value


def _sets_field(d: Mapping[str, Any], name: str) -> tuple[frozenset[str], ...]:
    value = d.get(name, [])
    if value is None:
        return ()
    if not isinstance(value, list) or not all(
        isinstance(item, list) and all(isinstance(word, str) for word in item) for item in value
    ):
        raise _bad(name, "a list of lists of strings", value)
    return tuple(frozenset(item) for item in value)


def _ints_field(d: Mapping[str, Any], name: str) -> tuple[int, ...]:
    value = d.get(name, [])
    if value is None:
        return ()
    if not isinstance(value, list) or not all(
        isinstance(item, int) and not isinstance(item, bool) and item >= 0 for item in value
    ):
        raise _bad(name, "a list of non-negative integers", value)
    return tuple(value)


def _bools_field(d: Mapping[str, Any], name: str) -> tuple[bool, ...]:
    value = d.get(name, [])
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, bool) for item in value):
        raise _bad(name, "a list of true or false", value)
    return tuple(value)
