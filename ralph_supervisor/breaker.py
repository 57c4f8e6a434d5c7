"""The circuit breaker: a pure state machine that turns iteration reports into decisions.

CLOSED (normal) -> OPEN (a rule tripped: the supervisor pauses, kills or stops the tree) -> HALF_OPEN
(the cooldown is over: the tree runs again and the next iteration that starts is the trial) -> CLOSED
(the trial made progress) or OPEN again (anything else; the cooldown doubles, capped at 8x the base).
The `max_opens`-th open is final: the supervisor stops the tree and `run` exits 2.

No I/O and no clock: every method takes `now`, so the same inputs always give the same decisions and
the whole machine is tested with plain values. CONTRACT section 5 defines the rules; this module is the
one place that implements them.

Clock: every `now`, `silent_since` and the stored `opened_at` must be on ONE clock. The supervisor passes
wall-clock epoch seconds (`time.time()`), so an OPEN breaker persisted in `state.json` keeps its cooldown
across a supervisor restart. A wall-clock jump shortens or lengthens a cooldown by the jump; nothing worse.

Choices the contract leaves open (each one is tested):
- Neutral iterations (`usage_limited` or `cut_short`) feed no evidence rule and change no counter or
  window; they are never a trial. Their tokens still count toward `tokens_used` (tokens are spent).
- The caps `max-iterations`, `token-budget` and `daily-budget` are judged on every observed iteration,
  neutral or not, and are final like `blocked`: waiting for a cooldown cannot lower a cap, so a trial would
  only re-open until the last allowed open while spending past the cap. A human raises the cap or resets.
- A completed iteration (`EXIT_SIGNAL: true`) without progress leaves the no-progress counter unchanged
  and is not judged for output decline: a finishing agent that has nothing left to change is not stuck.
- `paraphrase` is judged only on an iteration without progress: a loop that changes files while it
  restates itself is working ("Done, all tests pass" three times in a row is not a stall).
- `output-decline` ignores failed calls (neither judged nor counted in the window): a failed call's short error
  output is not a decline of the agent's work, and failures have their own rule.
- A threshold of 0 (or less) turns its rule off; `max_opens` 0 means no open is final by count.
- Manual opens (`pause`) do not count toward `max_opens`, are never final and have no cooldown: the tree
  stays paused until `resume` (which starts a trial, as CONTRACT section 5 says) or `reset`.
- A trial that re-opens with no rule firing keeps the trigger it was trying to cure, and says so.
- `reset()` clears the judgement (state, counters, windows, opens, cooldown) but keeps the accounting
  (`iteration`, `tokens_used`): a reset must not silently lift a budget.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Literal

from ralph_supervisor.iteration import IterationReport


class State(str, Enum):
    CLOSED = "CLOSED"
    HALF_OPEN = "HALF_OPEN"
    OPEN = "OPEN"


TRIGGERS: tuple[str, ...] = (
    "blocked",
    "same-error",
    "consecutive-failures",
    "paraphrase",
    "no-progress",
    "output-decline",
    "stall",
    "token-budget",
    "daily-budget",
    "max-iterations",
    "manual",
)
"""Every trigger name (CONTRACT section 3), in the precedence order of CONTRACT section 5.

CONTRACT section 5 lists `daily-token-budget` in its precedence but section 3 (the status JSON) names the
trigger `daily-budget`; we use `daily-budget` everywhere. `manual` is not a rule and never competes.
"""

PRECEDENCE: tuple[str, ...] = TRIGGERS[:-1]

FINAL_TRIGGERS: frozenset[str] = frozenset({"blocked", "max-iterations", "token-budget", "daily-budget"})
"""Triggers that stop the run at once whatever `--on-open` says: retrying cannot clear them."""

COOLDOWN_CAP = 8.0
"""The cooldown doubles after each failed trial, up to this many times the base."""

PARAPHRASE_WINDOW = 3
OUTPUT_WINDOW = 3
REASON_MAX = 300

Action = Literal["none", "open", "half_open", "close", "final"]


@dataclass(frozen=True)
class Thresholds:
    """The breaker's settings (CONTRACT section 5 defaults). 0 turns a rule off."""

    no_progress: int = 3
    same_error: int = 5
    output_decline: float = 70.0
    max_failures: int = 5
    stall_s: float = 1800.0
    paraphrase: float = 0.82
    max_iterations: int = 0
    token_budget: int = 0
    daily_token_budget: int = 0
    cooldown_s: float = 1800.0
    max_opens: int = 3
    trial_timeout_s: float | None = None
    """How long a trial iteration may run before it counts as failed. None: twice `stall_s` (one hour by
    default, four times Ralph's 15-minute call timeout), or one hour when stall detection is off."""
    same_error_similarity: float = 0.85
    """Passed to `repeats()`: how alike two error signatures must be to be the same error."""

    @property
    def trial_timeout(self) -> float:
        if self.trial_timeout_s is not None and self.trial_timeout_s > 0:
            return float(self.trial_timeout_s)
        return 2.0 * self.stall_s if self.stall_s > 0 else 3600.0

    @property
    def max_cooldown_s(self) -> float:
        return self.cooldown_s * COOLDOWN_CAP


@dataclass(frozen=True)
class Judges:
    """The pure text functions the same-error and paraphrase rules rely on.

    Injected so the breaker stays independent of how errors and replies are read; `default()` takes the
    project's own (imported lazily, so importing the breaker never pulls in the evidence package).
    """

    repeats: Callable[[frozenset[str], Sequence[frozenset[str]], float], bool]
    word_set: Callable[[str], frozenset[str]]
    mean_pairwise_jaccard: Callable[[Sequence[frozenset[str]]], float]

    @classmethod
    def default(cls) -> Judges:
        from ralph_supervisor.evidence.errors import repeats
        from ralph_supervisor.evidence.paraphrase import mean_pairwise_jaccard, word_set

        return cls(repeats=repeats, word_set=word_set, mean_pairwise_jaccard=mean_pairwise_jaccard)


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
    opened_at: float | None = None
    total_opens: int = 0
    cooldown_s: float = 0.0
    tokens_used: int = 0
    final: bool = False
    changed_at: float | None = None
    """When the state last changed (same clock as `now`): silence before it does not count as a stall."""
    trial_after: int = 0
    """In HALF_OPEN: the trial is the first counted iteration numbered above this."""
    trial_iteration: int | None = None
    trial_started_at: float | None = None
    recent_error_sets: tuple[frozenset[str], ...] = ()
    recent_reply_words: tuple[frozenset[str], ...] = ()
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
            "opened_at": self.opened_at,
            "total_opens": self.total_opens,
            "cooldown_s": self.cooldown_s,
            "tokens_used": self.tokens_used,
            "final": self.final,
            "changed_at": self.changed_at,
            "trial_after": self.trial_after,
            "trial_iteration": self.trial_iteration,
            "trial_started_at": self.trial_started_at,
            "recent_error_sets": [sorted(s) for s in self.recent_error_sets],
            "recent_reply_words": [sorted(s) for s in self.recent_reply_words],
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
        trigger = d.get("trigger", "none")
        if trigger is None:
            trigger = "none"
        if trigger != "none" and trigger not in TRIGGERS:
            raise ValueError(f"breaker state field 'trigger' is not a known trigger: {trigger!r}")
        if state is not State.CLOSED and trigger == "none":
            raise ValueError(f"breaker state field 'trigger' is 'none' but the state is {state.value}")
        snap = cls(
            state=state,
            trigger=trigger,
            reason=_str_field(d, "reason"),
            iteration=_int_field(d, "iteration"),
            consecutive_no_progress=_int_field(d, "consecutive_no_progress"),
            consecutive_same_error=_int_field(d, "consecutive_same_error"),
            consecutive_failures=_int_field(d, "consecutive_failures"),
            opened_at=_opt_float_field(d, "opened_at"),
            total_opens=_int_field(d, "total_opens"),
            cooldown_s=_float_field(d, "cooldown_s"),
            tokens_used=_int_field(d, "tokens_used"),
            final=_bool_field(d, "final"),
            changed_at=_opt_float_field(d, "changed_at"),
            trial_after=_int_field(d, "trial_after"),
            trial_iteration=_opt_int_field(d, "trial_iteration"),
            trial_started_at=_opt_float_field(d, "trial_started_at"),
            recent_error_sets=_sets_field(d, "recent_error_sets"),
            recent_reply_words=_sets_field(d, "recent_reply_words"),
            recent_output_bytes=_ints_field(d, "recent_output_bytes"),
        )
        if snap.state is State.OPEN and snap.opened_at is None:
            raise ValueError("breaker state field 'opened_at' is missing but the state is OPEN")
        return snap


def _bad(name: str, expected: str, value: object) -> ValueError:
    return ValueError(f"breaker state field {name!r} must be {expected}, got {value!r}"[:REASON_MAX])


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


def one_line(text: str, limit: int = 160) -> str:
    """Collapse whitespace and cut to `limit` characters: reasons are one line."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 1 or value == 0 else f"{value:g} s"


def is_neutral(report: IterationReport) -> bool:
    """Usage-limited calls and iterations cut short by the supervisor itself count toward no rule."""
    return report.usage_limited or report.cut_short


def progress_detail(report: IterationReport) -> str:
    if not report.progress:
        return "no file changed, no commit"
    parts = []
    if report.files_changed:
        parts.append(f"{_plural(report.files_changed, 'file')} changed")
    if report.commits:
        parts.append(_plural(report.commits, "commit"))
    return ", ".join(parts)


class Breaker:
    """The state machine. Feed it `iteration_started`, `observe` and `tick`; act on the Decisions.

    Persist `snapshot().to_dict()` after every `observe` and every decision whose action is not "none";
    `Breaker(thresholds, Snapshot.from_dict(data))` continues exactly where it left off.
    """

    def __init__(
        self, thresholds: Thresholds, snapshot: Snapshot | None = None, judges: Judges | None = None
    ) -> None:
        self.thresholds = thresholds
        self._judges = judges
        snap = snapshot if snapshot is not None else Snapshot()
        self._s = replace(snap, cooldown_s=self._clamp_cooldown(snap.cooldown_s))

    # -- reading ---------------------------------------------------------------------------------

    @property
    def judges(self) -> Judges:
        if self._judges is None:
            self._judges = Judges.default()
        return self._judges

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
    def from_dict(cls, thresholds: Thresholds, data: object, judges: Judges | None = None) -> Breaker:
        return cls(thresholds, Snapshot.from_dict(data), judges)

    def status(self) -> dict[str, Any]:
        """The breaker's part of `status --json` (CONTRACT section 3)."""
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
        }

    def seconds_until_half_open(self, now: float) -> float | None:
        """How long until the cooldown ends (0 when due), or None when no cooldown is running."""
        s = self._s
        if s.state is not State.OPEN or s.final or s.trigger == "manual" or s.opened_at is None:
            return None
        return max(0.0, s.opened_at + s.cooldown_s - now)

    # -- events ----------------------------------------------------------------------------------

    def iteration_started(self, number: int, now: float) -> Decision:
        """An iteration began. In HALF_OPEN the first one after the cooldown is the trial (timed from
        here); in CLOSED the caps are checked again in case the iteration that reached them was never
        observed (a supervisor restart, say)."""
        self._s = replace(self._s, iteration=max(self._s.iteration, number))
        s = self._s
        if s.state is State.HALF_OPEN:
            if number > s.trial_after and s.trial_iteration is None:
                self._s = replace(s, trial_iteration=number, trial_started_at=now)
                return self._none(f"iteration {number} is the trial")
            return self._none()
        if s.state is State.CLOSED:
            t = self.thresholds
            if t.max_iterations > 0 and number > t.max_iterations:
                return self._open(
                    "max-iterations", f"iteration cap reached ({number} > {t.max_iterations})", now
                )
            if t.token_budget > 0 and s.tokens_used >= t.token_budget:
                return self._open(
                    "token-budget", f"token budget reached ({s.tokens_used} >= {t.token_budget})", now
                )
        return self._none()

    def observe(self, report: IterationReport, now: float, daily_tokens_today: int = 0) -> Decision:
        """Judge one finished iteration. `daily_tokens_today` is the supervisor's count of tokens spent
        this UTC day across runs, this iteration included (it counts each iteration once)."""
        s = self._s
        self._s = s = replace(
            s,
            tokens_used=s.tokens_used + max(0, report.tokens or 0),
            iteration=max(s.iteration, report.number),
        )
        if s.state is State.OPEN:
            return self._none()
        if s.state is State.HALF_OPEN and report.number <= s.trial_after:
            return self._none()  # the call that was cut off by the open, finishing late: not the trial

        cap = self._cap_fired(report, daily_tokens_today)
        if is_neutral(report):
            if cap is not None:
                return self._reopen(*cap, now) if s.state is State.HALF_OPEN else self._open(*cap, now)
            if s.state is State.HALF_OPEN and s.trial_iteration == report.number:
                # Not a trial after all: the next iteration that starts is.
                self._s = replace(s, trial_iteration=None, trial_started_at=None)
                return self._none(f"iteration {report.number} was neutral; the next one is the trial")
            return self._none()

        fired = self._update_counters(report)
        if cap is not None:
            fired.append(cap)
        fired.sort(key=lambda item: PRECEDENCE.index(item[0]))
        blocked = fired[0] if fired and fired[0][0] == "blocked" else None

        if s.state is State.HALF_OPEN:
            if blocked is not None:
                return self._reopen(*blocked, now)
            if cap is not None:
                return self._reopen(*cap, now)
            if report.progress:
                return self._close(report, now)
            return self._failed_trial(report, fired, now)

        if fired:
            trigger, reason = fired[0]
            if cap is not None and trigger != cap[0]:
                # Precedence names the trigger, but a reached cap still makes the open final.
                return self._open(trigger, f"{reason}; also {cap[1]}", now, force_final=True)
            return self._open(trigger, reason, now)
        return self._none()

    def tick(self, now: float, *, silent_since: float | None = None) -> Decision:
        """Time passes: end a cooldown, bound a trial, catch a stall.

        `silent_since` is when the current call went silent on every channel (no output, no file change,
        under 1 % CPU), on the same clock as `now`; None when it is not silent or no call is running.
        Silence from before the last state change (a frozen tree is silent) does not count.
        """
        s = self._s
        t = self.thresholds
        if s.state is State.OPEN:
            due = self.seconds_until_half_open(now)
            if due is not None and due <= 0:
                return self._half_open(now, f"cooldown of {_seconds(s.cooldown_s)} over")
            return self._none()

        silent_for = self._silent_for(now, silent_since)
        if s.state is State.CLOSED:
            if silent_for is not None and t.stall_s > 0 and silent_for >= t.stall_s:
                return self._open("stall", self._stall_reason(silent_for), now)
            return self._none()

        # HALF_OPEN
        if silent_for is not None and t.stall_s > 0 and silent_for >= t.stall_s:
            what = f"trial iteration {s.trial_iteration}" if s.trial_iteration is not None else "the resumed call"
            return self._reopen("stall", f"{what}: {self._stall_reason(silent_for)}", now)
        if s.trial_started_at is not None and now - s.trial_started_at >= t.trial_timeout:
            return self._reopen(
                s.trigger,
                f"trial iteration {s.trial_iteration} still running after {_seconds(now - s.trial_started_at)} "
                f"(limit {_seconds(t.trial_timeout)})",
                now,
            )
        return self._none()

    def manual_open(self, reason: str, now: float) -> Decision:
        """`pause` from the CLI: OPEN with trigger "manual", no cooldown, not counted toward max_opens.
        Already OPEN: the breaker stays OPEN but now waits for the human instead of its cooldown."""
        s = self._s
        text = one_line(f"paused by hand: {reason}" if reason else "paused by hand")
        if s.state is State.OPEN:
            if s.final or s.trigger == "manual":
                return self._none()
            self._s = replace(s, trigger="manual", reason=one_line(f"{text} (was {s.trigger}: {s.reason})", REASON_MAX))
            return self._none(self._s.reason)
        self._s = replace(
            s,
            state=State.OPEN,
            trigger="manual",
            reason=text,
            opened_at=now,
            changed_at=now,
            trial_iteration=None,
            trial_started_at=None,
        )
        return self._decision("open", "manual", text, s.state, cooldown_s=0.0)

    def resume(self, now: float) -> Decision:
        """`resume` from the CLI: end any OPEN now (even a final one: a human decided) and start the trial."""
        s = self._s
        if s.state is not State.OPEN:
            return self._none()
        self._s = replace(s, final=False)
        return self._half_open(now, "resumed by hand")

    def reset(self) -> Decision:
        """`reset`: CLOSED, counters, windows, opens and cooldown cleared; iteration and tokens kept."""
        s = self._s
        self._s = Snapshot(
            iteration=s.iteration,
            tokens_used=s.tokens_used,
            cooldown_s=self.thresholds.cooldown_s,
            reason="reset by hand",
        )
        return self._decision("close" if s.state is not State.CLOSED else "none", "none", "reset by hand", s.state)

    # -- rules -----------------------------------------------------------------------------------

    def _update_counters(self, report: IterationReport) -> list[tuple[str, str]]:
        """Apply a counted iteration to the counters and windows; return every rule that fires."""
        t = self.thresholds
        s = self._s
        fired: list[tuple[str, str]] = []
        n = report.number

        if report.blocked:
            what = report.blocked_reason or report.first_error or "an error only a human can clear"
            fired.append(("blocked", f"iteration {n} is blocked: {one_line(what)}; retrying cannot help"))

        # consecutive-failures
        failures = s.consecutive_failures + 1 if report.failed else 0
        if t.max_failures > 0 and failures >= t.max_failures:
            detail = f": {one_line(report.first_error)}" if report.first_error else ""
            if report.timed_out:
                detail = f": timed out{'; ' + one_line(report.first_error) if report.first_error else ''}"
            fired.append(
                (
                    "consecutive-failures",
                    f"{failures} failed agent calls in a row (threshold {t.max_failures}){detail}",
                )
            )

        # same-error: how many iterations in a row (this one included) carry the same error set
        current = frozenset(report.error_signatures)
        errors_window: tuple[frozenset[str], ...] = ()
        same = 0
        if current:
            same = 1
            for previous in reversed(s.recent_error_sets):
                if not self.judges.repeats(current, [previous], t.same_error_similarity):
                    break
                same += 1
            keep = max(1, t.same_error - 1) if t.same_error > 0 else 1
            errors_window = (s.recent_error_sets + (current,))[-keep:]
        if t.same_error > 0 and same >= t.same_error:
            sample = one_line(report.first_error or sorted(current)[0])
            fired.append(
                (
                    "same-error",
                    f"the same error in {same} iterations in a row (threshold {t.same_error}): {sample}",
                )
            )

        # no-progress (a completed iteration without progress is neither progress nor a stuck one)
        if report.progress:
            no_progress = 0
        elif report.completed:
            no_progress = s.consecutive_no_progress
        else:
            no_progress = s.consecutive_no_progress + 1
        if t.no_progress > 0 and no_progress >= t.no_progress and not report.progress and not report.completed:
            fired.append(
                (
                    "no-progress",
                    f"no progress in {no_progress} iterations in a row (threshold {t.no_progress}): "
                    "no file changed, no commit",
                )
            )

        # paraphrase: failed calls and calls without a reply are not replies
        replies = s.recent_reply_words
        if not report.failed and report.reply is not None:
            replies = (replies + (self.judges.word_set(report.reply),))[-PARAPHRASE_WINDOW:]
            if t.paraphrase > 0 and len(replies) == PARAPHRASE_WINDOW and not report.progress:
                score = self.judges.mean_pairwise_jaccard(list(replies))
                if score >= t.paraphrase:
                    fired.append(
                        (
                            "paraphrase",
                            f"the last {PARAPHRASE_WINDOW} replies restate the same thing "
                            f"(mean word-set Jaccard {score:.2f} >= {t.paraphrase:g})",
                        )
                    )

        # output-decline: against the mean of the 3 counted iterations before this one
        outputs = s.recent_output_bytes
        if not report.failed:
            if (
                t.output_decline > 0
                and len(outputs) >= OUTPUT_WINDOW
                and not report.progress
                and not report.completed
            ):
                mean = sum(outputs) / len(outputs)
                if mean > 0:
                    decline = (mean - report.output_bytes) / mean * 100.0
                    if decline >= t.output_decline:
                        fired.append(
                            (
                                "output-decline",
                                f"iteration {n} printed {report.output_bytes} bytes, {decline:.0f}% less than "
                                f"the mean {mean:.0f} of the {OUTPUT_WINDOW} before it "
                                f"(threshold {t.output_decline:g}%), with no progress",
                            )
                        )
            outputs = (outputs + (max(0, report.output_bytes),))[-OUTPUT_WINDOW:]

        self._s = replace(
            s,
            consecutive_failures=failures,
            consecutive_same_error=same,
            consecutive_no_progress=no_progress,
            recent_error_sets=errors_window,
            recent_reply_words=replies,
            recent_output_bytes=outputs,
        )
        return fired

    def _cap_fired(self, report: IterationReport, daily_tokens_today: int) -> tuple[str, str] | None:
        """The first cap reached, in precedence order (token, daily, iterations)."""
        t = self.thresholds
        s = self._s
        if t.token_budget > 0 and s.tokens_used >= t.token_budget:
            return "token-budget", f"token budget reached ({s.tokens_used} >= {t.token_budget})"
        if t.daily_token_budget > 0 and daily_tokens_today >= t.daily_token_budget:
            return (
                "daily-budget",
                f"daily token budget reached ({daily_tokens_today} tokens today >= {t.daily_token_budget})",
            )
        if t.max_iterations > 0 and report.number >= t.max_iterations:
            return "max-iterations", f"iteration cap reached ({report.number} >= {t.max_iterations})"
        return None

    def _stall_reason(self, silent_for: float) -> str:
        return (
            f"the current call has been silent for {_seconds(silent_for)} (threshold "
            f"{_seconds(self.thresholds.stall_s)}): no output, no file change, no CPU"
        )

    def _silent_for(self, now: float, silent_since: float | None) -> float | None:
        if silent_since is None:
            return None
        s = self._s
        start = silent_since
        for floor in (s.changed_at, s.trial_started_at if s.state is State.HALF_OPEN else None):
            if floor is not None and floor > start:
                start = floor
        return max(0.0, now - start)

    # -- transitions -----------------------------------------------------------------------------

    def _clamp_cooldown(self, value: float) -> float:
        base = self.thresholds.cooldown_s
        if base <= 0:
            return max(0.0, value)
        return min(max(value, base), self.thresholds.max_cooldown_s)

    def _open(self, trigger: str, reason: str, now: float, *, force_final: bool = False) -> Decision:
        """Trip (from CLOSED or HALF_OPEN). Counts toward max_opens; final when it is the last one allowed
        or when the trigger cannot be cleared by waiting."""
        s = self._s
        t = self.thresholds
        opens = s.total_opens + 1
        final = force_final or trigger in FINAL_TRIGGERS or (t.max_opens > 0 and opens >= t.max_opens)
        text = one_line(reason, REASON_MAX)
        if final and not force_final and trigger not in FINAL_TRIGGERS:
            text = one_line(f"{reason} (open {opens} of {t.max_opens}: final)", REASON_MAX)
        self._s = replace(
            s,
            state=State.OPEN,
            trigger=trigger,
            reason=text,
            opened_at=now,
            changed_at=now,
            total_opens=opens,
            final=final,
            trial_iteration=None,
            trial_started_at=None,
        )
        return self._decision(
            "final" if final else "open",
            trigger,
            text,
            s.state,
            final=final,
            cooldown_s=0.0 if final else self._s.cooldown_s,
        )

    def _reopen(self, trigger: str, reason: str, now: float) -> Decision:
        """A failed trial: the cooldown doubles (capped), then open again."""
        self._s = replace(self._s, cooldown_s=self._clamp_cooldown(self._s.cooldown_s * 2))
        return self._open(trigger, reason, now)

    def _failed_trial(self, report: IterationReport, fired: list[tuple[str, str]], now: float) -> Decision:
        s = self._s
        if fired:
            trigger, why = fired[0]
        else:
            trigger, why = s.trigger, progress_detail(report)
            if report.failed:
                why = "the call failed" + (f": {one_line(report.first_error)}" if report.first_error else "")
        return self._reopen(trigger, f"trial iteration {report.number} made no progress ({why})", now)

    def _half_open(self, now: float, why: str) -> Decision:
        s = self._s
        self._s = replace(
            s,
            state=State.HALF_OPEN,
            changed_at=now,
            trial_after=s.iteration,
            trial_iteration=None,
            trial_started_at=None,
        )
        text = f"{why}: the next iteration is the trial"
        return self._decision("half_open", s.trigger, text, s.state)

    def _close(self, report: IterationReport, now: float) -> Decision:
        s = self._s
        text = f"trial iteration {report.number} made progress ({progress_detail(report)})"
        self._s = replace(
            s,
            state=State.CLOSED,
            trigger="none",
            reason=text,
            consecutive_no_progress=0,
            consecutive_same_error=0,
            consecutive_failures=0,
            opened_at=None,
            cooldown_s=self._clamp_cooldown(self.thresholds.cooldown_s),
            final=False,
            changed_at=now,
            trial_iteration=None,
            trial_started_at=None,
            recent_error_sets=(),
            recent_reply_words=(),
            recent_output_bytes=(),
        )
        return self._decision("close", s.trigger, text, s.state)

    def _none(self, reason: str | None = None) -> Decision:
        s = self._s
        return self._decision("none", s.trigger, s.reason if reason is None else reason, s.state)

    def _decision(
        self,
        action: Action,
        trigger: str,
        reason: str,
        from_state: State,
        *,
        final: bool | None = None,
        cooldown_s: float | None = None,
    ) -> Decision:
        s = self._s
        if cooldown_s is None:
            cooldown_s = s.cooldown_s if s.state is State.OPEN and not s.final and s.trigger != "manual" else 0.0
        return Decision(
            action=action,
            state=s.state,
            trigger=trigger,
            reason=reason,
            iteration=s.iteration,
            final=s.final if final is None else final,
            cooldown_s=cooldown_s,
            from_state=from_state,
            total_opens=s.total_opens,
        )


__all__ = [
    "COOLDOWN_CAP",
    "FINAL_TRIGGERS",
    "PRECEDENCE",
    "TRIGGERS",
    "Breaker",
    "Decision",
    "Judges",
    "Snapshot",
    "State",
    "Thresholds",
    "is_neutral",
    "one_line",
    "progress_detail",
]
