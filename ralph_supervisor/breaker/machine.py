"""The circuit breaker: a pure state machine that turns iteration reports into decisions.

CLOSED (normal) -> OPEN (a rule tripped: the supervisor pauses, kills or stops the tree) -> HALF_OPEN
(the cooldown is over: the tree runs again and the next iteration that starts is the trial) -> CLOSED
(the trial made progress) or OPEN again (anything else; the cooldown doubles, capped at 8x the base).
The `max_opens`-th open is final: the supervisor stops the tree and `run` exits 2.

No I/O and no clock: every method takes `now`, so the same inputs always give the same decisions and
the whole machine is tested with plain values. The rules themselves are the small functions of `rules.py`;
this module is the state machine around them.

Clock: every `now`, `silent_since` and the stored `opened_at` must be on ONE clock. The supervisor passes
wall-clock epoch seconds (`time.time()`), so an OPEN breaker persisted in `state.json` keeps its cooldown
across a supervisor restart. A wall-clock jump shortens or lengthens a cooldown by the jump; nothing worse.

Choices the contract leaves open (each one is tested):
- Neutral iterations (`usage_limited` or `cut_short`) feed no evidence rule and change no counter or
  window; they are never a trial. Their tokens and cost still count (they were spent).
- The caps (`max-iterations`, `token-budget`, `cost-budget`, `daily-budget`, `daily-cost-budget`) are judged on every observed iteration,
  neutral or not, and are final like `blocked`: waiting for a cooldown cannot lower a cap, so a trial would
  only re-open until the last allowed open while spending past the cap. A human raises the cap or resets.
- A completed iteration (`EXIT_SIGNAL: true`) without progress leaves the no-progress counter unchanged
  and is not judged for output decline: a finishing agent that has nothing left to change is not stuck.
- `paraphrase` is judged on an iteration without progress, or when every restatement is of a blocker:
  a loop that changes files while it restates its work is working ("Done, all tests pass" three times in
  a row is not a stall), one that churns a file while it restates a blocker is not.
- A failed call neither counts toward nor resets `no-progress`: `consecutive-failures` judges it.
- `output-decline` ignores failed calls (neither judged nor counted in the window): a failed call's short error
  output is not a decline of the agent's work, and failures have their own rule.
- A threshold of 0 (or less) turns its rule off; `max_opens` 0 means no open is final by count.
- Manual opens (`pause`) do not count toward `max_opens`, are never final and have no cooldown: the tree
  stays paused until `resume` (which starts a trial) or `reset`.
- `destructive` is judged on an iteration's net effect, from the workspace's states at the call's start
  and end (`destructive_open`, before the iteration's report is observed, so it precedes the other rules;
  a stash popped within the call destroyed nothing). It counts toward `max_opens` but, like a manual
  pause, has no cooldown and waits for a human.
- A trial that re-opens with no rule firing keeps the trigger it was trying to cure, and says so.
- `reset()` clears the judgement (state, counters, windows, opens, cooldown) but keeps the accounting
  (`iteration`, `tokens_used`, `cost_used`): a reset must not silently lift a budget.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from ralph_supervisor.breaker import rules
from ralph_supervisor.breaker.rules import Thresholds, is_neutral, progress_detail, seconds
from ralph_supervisor.breaker.snapshot import REASON_MAX, Snapshot, State
from ralph_supervisor.iteration import IterationReport
from ralph_supervisor.text import one_line
from ralph_supervisor.triggers import FINAL, WAITS_FOR_HUMAN, rank

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


class Breaker:
    """The state machine. Feed it `iteration_started`, `observe` and `tick`; act on the Decisions.

    Persist `snapshot().to_dict()` after every `observe` and every decision whose action is not "none";
    `Breaker(thresholds, Snapshot.from_dict(data))` continues exactly where it left off.
    """

    def __init__(self, thresholds: Thresholds, snapshot: Snapshot | None = None) -> None:
        self.thresholds = thresholds
        snap = snapshot if snapshot is not None else Snapshot()
        self._s = replace(snap, cooldown_s=self._clamp_cooldown(snap.cooldown_s))

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
        s = self._s
        if s.state is not State.OPEN or s.final or s.trigger in WAITS_FOR_HUMAN or s.opened_at is None:
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
            if t.cost_budget > 0 and s.cost_used >= t.cost_budget:
                return self._open("cost-budget", f"cost budget reached ({rules.dollars(s.cost_used)} >= "
                                                 f"{rules.dollars(t.cost_budget)})", now)
        return self._none()

    def observe(self, report: IterationReport, now: float, daily_tokens_today: int = 0,
                daily_cost_today: float = 0.0) -> Decision:
        """Judge one finished iteration. `daily_tokens_today` and `daily_cost_today` are the supervisor's count
        of what was spent this UTC day across runs, this iteration included (it counts each call once).
        The decision names the iteration judged (the next call may have started already)."""
        decision = self._observe(report, now, daily_tokens_today, daily_cost_today)
        return replace(decision, iteration=report.number) if decision.changed else decision

    def _observe(self, report: IterationReport, now: float, daily_tokens_today: int,
                 daily_cost_today: float) -> Decision:
        s = self._s
        self._s = s = replace(
            s,
            tokens_used=s.tokens_used + max(0, report.tokens or 0),
            cost_used=s.cost_used + max(0.0, report.cost_usd or 0.0),
            iteration=max(s.iteration, report.number),
        )
        if s.state is State.OPEN:
            return self._none()
        if s.state is State.HALF_OPEN and report.number <= s.trial_after:
            return self._none()  # the call that was cut off by the open, finishing late: not the trial

        cap = rules.caps(s, report, self.thresholds, daily_tokens_today, daily_cost_today)
        if is_neutral(report):
            if cap is not None:
                return self._reopen(cap.trigger, cap.reason, now) if s.state is State.HALF_OPEN else self._open(cap.trigger, cap.reason, now)
            if s.state is State.HALF_OPEN and s.trial_iteration == report.number:
                # Not a trial after all: the next iteration that starts is.
                self._s = replace(s, trial_iteration=None, trial_started_at=None)
                return self._none(f"iteration {report.number} was neutral; the next one is the trial")
            return self._none()

        self._s, fired = rules.judge(s, report, self.thresholds)
        if cap is not None:
            fired = sorted([*fired, cap], key=lambda f: rank(f.trigger))
        blocked = fired[0] if fired and fired[0].trigger == "blocked" else None

        if s.state is State.HALF_OPEN:
            if blocked is not None:
                return self._reopen(blocked.trigger, blocked.reason, now)
            if cap is not None:
                return self._reopen(cap.trigger, cap.reason, now)
            if report.progress:
                return self._close(report, now)
            return self._failed_trial(report, fired, now)

        if fired:
            first = fired[0]
            if cap is not None and first.trigger != cap.trigger:
                # Precedence names the trigger, but a reached cap still makes the open final.
                return self._open(first.trigger, f"{first.reason}; also {cap.reason}", now, force_final=True)
            return self._open(first.trigger, first.reason, now)
        return self._none()

    def tick(self, now: float, *, silent_since: float | None = None, waiting_for_call: bool = False,
             loop_errors: tuple[str, ...] = ()) -> Decision:
        """Time passes: end a cooldown, bound a trial, catch a stall.

        `silent_since` is when the current call went silent on every channel (no output, no file change,
        under 1 % CPU), on the same clock as `now`; None when it is not silent or no call is running.
        With `waiting_for_call`, no call is running and `silent_since` is when the last one ended (or the
        loop started): a loop that never reaches its agent stalls too, `loop_errors` (its last error
        lines) as evidence. Silence from before the last state change (a frozen tree is silent) does not count.
        """
        s = self._s
        t = self.thresholds
        if s.state is State.OPEN:
            due = self.seconds_until_half_open(now)
            if due is not None and due <= 0:
                return self._half_open(now, f"cooldown of {seconds(s.cooldown_s)} over")
            return self._none()

        silent_for = self._silent_for(now, silent_since)
        if silent_for is not None and t.stall_s > 0 and silent_for >= t.stall_s:
            if waiting_for_call:
                reason = rules.no_call_reason(silent_for, t, loop_errors)
            else:
                reason = self._stall_reason(silent_for)
            if s.state is State.CLOSED:
                return self._open("stall", reason, now)
            what = f"trial iteration {s.trial_iteration}" if s.trial_iteration is not None else "the resumed call"
            return self._reopen("stall", f"{what}: {reason}", now)
        if s.state is State.CLOSED:
            return self._none()

        # HALF_OPEN
        if s.trial_started_at is not None and now - s.trial_started_at >= t.trial_timeout:
            return self._reopen(
                s.trigger,
                f"trial iteration {s.trial_iteration} still running after {seconds(now - s.trial_started_at)} "
                f"(limit {seconds(t.trial_timeout)})",
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

    def destructive_open(self, reason: str, now: float, iteration: int | None = None) -> Decision:
        """An iteration destroyed the workspace (its net effect, told when it ended, before its report is
        judged; `iteration`: which one, when the next may have begun): OPEN with trigger "destructive". It
        counts as an open (final when it is the last allowed; from HALF_OPEN a failed trial) but has no
        cooldown: it never starts a trial by itself. Already OPEN: nothing changes."""
        s = self._s
        if s.state is State.OPEN:
            return self._none()
        decision = (self._reopen if s.state is State.HALF_OPEN else self._open)("destructive", reason, now)
        if iteration is not None:
            decision = replace(decision, iteration=iteration)
        return decision if decision.final else replace(decision, cooldown_s=0.0)

    def verdict_open(self, trigger: str, reason: str, now: float) -> Decision:
        """A verify's verdict on an iteration already judged (`regression`, `tampering`, `false-completion`):
        it opens a CLOSED breaker, fails a HALF_OPEN trial, and never undoes or replaces an open. A trigger
        that waits for a human (`tampering`) has no cooldown, like `destructive`."""
        s = self._s
        if s.state is State.OPEN:
            return self._none()
        decision = (self._reopen if s.state is State.HALF_OPEN else self._open)(trigger, reason, now)
        return decision if decision.final or trigger not in WAITS_FOR_HUMAN else replace(decision, cooldown_s=0.0)

    def verified_progress(self) -> None:
        """A verify found a failing test fixed: that is progress, whatever the file fingerprint said."""
        self._s = replace(self._s, consecutive_no_progress=0)

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
            cost_used=s.cost_used,
            cooldown_s=self.thresholds.cooldown_s,
            reason="reset by hand",
        )
        return self._decision("close" if s.state is not State.CLOSED else "none", "none", "reset by hand", s.state)

    # -- rules -----------------------------------------------------------------------------------

    def _stall_reason(self, silent_for: float) -> str:
        return rules.stall_reason(silent_for, self.thresholds)

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
        final = force_final or trigger in FINAL or (t.max_opens > 0 and opens >= t.max_opens)
        text = one_line(reason, REASON_MAX)
        if final and not force_final and trigger not in FINAL:
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

    def _failed_trial(self, report: IterationReport, fired: list[rules.Fired], now: float) -> Decision:
        s = self._s
        if fired:
            trigger, why = fired[0].trigger, fired[0].reason
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
            failure_error="",
            opened_at=None,
            cooldown_s=self._clamp_cooldown(self.thresholds.cooldown_s),
            final=False,
            changed_at=now,
            trial_iteration=None,
            trial_started_at=None,
            recent_error_sets=(),
            recent_reply_words=(),
            recent_reply_blockers=(),
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
            waits = s.trigger in WAITS_FOR_HUMAN
            cooldown_s = s.cooldown_s if s.state is State.OPEN and not s.final and not waits else 0.0
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
