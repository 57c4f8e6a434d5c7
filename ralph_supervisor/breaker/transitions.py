"""The breaker's transitions: pure functions from what it knows and one input to what it knows now and why.

Each function takes the `Snapshot` (everything the breaker knows), the `Thresholds` and one input (an
iteration that started, a report, the passing time, a request of a human), and returns the new snapshot and
the `Decision` about it. No I/O and no clock: the time is an argument, so the same inputs always give the
same step, and each transition is tested alone with plain values. `machine.Breaker` holds the snapshot.

CLOSED (normal) -> OPEN (a rule tripped: the supervisor pauses, kills or stops the tree) -> HALF_OPEN
(the cooldown is over: the tree runs again and the next iteration that starts is the trial) -> CLOSED
(the trial made progress) or OPEN again (anything else; the cooldown doubles, capped at 8x the base).
The `max_opens`-th open is final: the supervisor stops the tree and `run` exits 2.

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
- `reset` clears the judgement (state, counters, windows, opens, cooldown) but keeps the accounting
  (`iteration`, `tokens_used`, `cost_used`): a reset must not silently lift a budget.

    >>> t = Thresholds(no_progress=1)
    >>> s, d = observe(Snapshot(), t, IterationReport(number=1, started_at=0, ended_at=1), now=1.0)
    >>> s.state.value, d.action, d.trigger
    ('OPEN', 'open', 'no-progress')
"""

from __future__ import annotations

from dataclasses import replace

from ralph_supervisor.breaker import rules
from ralph_supervisor.breaker.decision import Action, Decision
from ralph_supervisor.breaker.rules import Fired, Thresholds, is_neutral, progress_detail, seconds
from ralph_supervisor.breaker.snapshot import REASON_MAX, Snapshot, State
from ralph_supervisor.iteration import IterationReport
from ralph_supervisor.text import one_line
from ralph_supervisor.triggers import FINAL, WAITS_FOR_HUMAN, rank

Step = tuple[Snapshot, Decision]
"""What every transition returns: the breaker's new snapshot and the decision about it."""


# -- reading ----------------------------------------------------------------------------------------


def seconds_until_half_open(s: Snapshot, now: float) -> float | None:
    """How long until the cooldown ends (0 when due), or None when no cooldown is running."""
    if s.state is not State.OPEN or s.final or s.trigger in WAITS_FOR_HUMAN or s.opened_at is None:
        return None
    return max(0.0, s.opened_at + s.cooldown_s - now)


def clamp_cooldown(value: float, t: Thresholds) -> float:
    """A cooldown within [base, 8x base] (any non-negative value when the base is 0)."""
    base = t.cooldown_s
    if base <= 0:
        return max(0.0, value)
    return min(max(value, base), t.max_cooldown_s)


# -- the inputs ---------------------------------------------------------------------------------------


def iteration_started(s: Snapshot, t: Thresholds, number: int, now: float) -> Step:
    """An iteration began. In HALF_OPEN the first one after the cooldown is the trial (timed from
    here); in CLOSED the caps are checked again in case the iteration that reached them was never
    observed (a supervisor restart, say)."""
    s = replace(s, iteration=max(s.iteration, number))
    if s.state is State.HALF_OPEN:
        if number > s.trial_after and s.trial_iteration is None:
            return _stay(replace(s, trial_iteration=number, trial_started_at=now), f"iteration {number} is the trial")
        return _stay(s)
    if s.state is State.CLOSED:
        if t.max_iterations > 0 and number > t.max_iterations:
            return _open(s, t, "max-iterations", f"iteration cap reached ({number} > {t.max_iterations})", now)
        if t.token_budget > 0 and s.tokens_used >= t.token_budget:
            return _open(s, t, "token-budget", f"token budget reached ({s.tokens_used} >= {t.token_budget})", now)
        if t.cost_budget > 0 and s.cost_used >= t.cost_budget:
            return _open(s, t, "cost-budget", f"cost budget reached ({rules.dollars(s.cost_used)} >= "
                                              f"{rules.dollars(t.cost_budget)})", now)
    return _stay(s)


def observe(s: Snapshot, t: Thresholds, report: IterationReport, now: float, daily_tokens_today: int = 0,
            daily_cost_today: float = 0.0) -> Step:
    """Judge one finished iteration. `daily_tokens_today` and `daily_cost_today` are the supervisor's count
    of what was spent this UTC day across runs, this iteration included (it counts each call once).
    The decision names the iteration judged (the next call may have started already)."""
    s, decision = _judge(s, t, report, now, daily_tokens_today, daily_cost_today)
    return s, replace(decision, iteration=report.number) if decision.changed else decision


def _judge(s: Snapshot, t: Thresholds, report: IterationReport, now: float, daily_tokens_today: int,
           daily_cost_today: float) -> Step:
    s = replace(
        s,
        tokens_used=s.tokens_used + max(0, report.tokens or 0),
        cost_used=s.cost_used + max(0.0, report.cost_usd or 0.0),
        iteration=max(s.iteration, report.number),
    )
    if s.state is State.OPEN:
        return _stay(s)
    if s.state is State.HALF_OPEN and report.number <= s.trial_after:
        return _stay(s)  # the call that was cut off by the open, finishing late: not the trial

    cap = rules.caps(s, report, t, daily_tokens_today, daily_cost_today)
    if is_neutral(report):
        if cap is not None:
            return (_reopen if s.state is State.HALF_OPEN else _open)(s, t, cap.trigger, cap.reason, now)
        if s.state is State.HALF_OPEN and s.trial_iteration == report.number:
            # Not a trial after all: the next iteration that starts is.
            return _stay(replace(s, trial_iteration=None, trial_started_at=None),
                         f"iteration {report.number} was neutral; the next one is the trial")
        return _stay(s)

    judged, fired = rules.judge(s, report, t)
    if cap is not None:
        fired = sorted([*fired, cap], key=lambda f: rank(f.trigger))
    blocked = fired[0] if fired and fired[0].trigger == "blocked" else None

    if s.state is State.HALF_OPEN:
        if blocked is not None:
            return _reopen(judged, t, blocked.trigger, blocked.reason, now)
        if cap is not None:
            return _reopen(judged, t, cap.trigger, cap.reason, now)
        if report.progress:
            return _close(judged, t, report, now)
        return _failed_trial(judged, t, report, fired, now)

    if fired:
        first = fired[0]
        if cap is not None and first.trigger != cap.trigger:
            # Precedence names the trigger, but a reached cap still makes the open final.
            return _open(judged, t, first.trigger, f"{first.reason}; also {cap.reason}", now, force_final=True)
        return _open(judged, t, first.trigger, first.reason, now)
    return _stay(judged)


def tick(s: Snapshot, t: Thresholds, now: float, *, silent_since: float | None = None,
         waiting_for_call: bool = False, loop_errors: tuple[str, ...] = ()) -> Step:
    """Time passes: end a cooldown, bound a trial, catch a stall.

    `silent_since` is when the current call went silent on every channel (no output, no file change,
    under 1 % CPU), on the same clock as `now`; None when it is not silent or no call is running.
    With `waiting_for_call`, no call is running and `silent_since` is when the last one ended (or the
    loop started): a loop that never reaches its agent stalls too, `loop_errors` (its last error
    lines) as evidence. Silence from before the last state change (a frozen tree is silent) does not count.
    """
    if s.state is State.OPEN:
        due = seconds_until_half_open(s, now)
        if due is not None and due <= 0:
            return _half_open(s, now, f"cooldown of {seconds(s.cooldown_s)} over")
        return _stay(s)

    silent_for = _silent_for(s, now, silent_since)
    if silent_for is not None and t.stall_s > 0 and silent_for >= t.stall_s:
        if waiting_for_call:
            reason = rules.no_call_reason(silent_for, t, loop_errors)
        else:
            reason = rules.stall_reason(silent_for, t)
        if s.state is State.CLOSED:
            return _open(s, t, "stall", reason, now)
        what = f"trial iteration {s.trial_iteration}" if s.trial_iteration is not None else "the resumed call"
        return _reopen(s, t, "stall", f"{what}: {reason}", now)
    if s.state is State.CLOSED:
        return _stay(s)

    # HALF_OPEN
    if s.trial_started_at is not None and now - s.trial_started_at >= t.trial_timeout:
        return _reopen(
            s, t, s.trigger,
            f"trial iteration {s.trial_iteration} still running after {seconds(now - s.trial_started_at)} "
            f"(limit {seconds(t.trial_timeout)})",
            now,
        )
    return _stay(s)


def manual_open(s: Snapshot, reason: str, now: float) -> Step:
    """`pause` from the CLI: OPEN with trigger "manual", no cooldown, not counted toward max_opens.
    Already OPEN: the breaker stays OPEN but now waits for the human instead of its cooldown."""
    text = one_line(f"paused by hand: {reason}" if reason else "paused by hand")
    if s.state is State.OPEN:
        if s.final or s.trigger == "manual":
            return _stay(s)
        s = replace(s, trigger="manual", reason=one_line(f"{text} (was {s.trigger}: {s.reason})", REASON_MAX))
        return _stay(s, s.reason)
    opened = replace(s, state=State.OPEN, trigger="manual", reason=text, opened_at=now, changed_at=now,
                     trial_iteration=None, trial_started_at=None)
    return opened, _decide(opened, "open", "manual", text, s.state, cooldown_s=0.0)


def destructive_open(s: Snapshot, t: Thresholds, reason: str, now: float, iteration: int | None = None) -> Step:
    """An iteration destroyed the workspace (its net effect, told when it ended, before its report is
    judged; `iteration`: which one, when the next may have begun): OPEN with trigger "destructive". It
    counts as an open (final when it is the last allowed; from HALF_OPEN a failed trial) but has no
    cooldown: it never starts a trial by itself. Already OPEN: nothing changes."""
    if s.state is State.OPEN:
        return _stay(s)
    s, decision = (_reopen if s.state is State.HALF_OPEN else _open)(s, t, "destructive", reason, now)
    if iteration is not None:
        decision = replace(decision, iteration=iteration)
    return s, decision if decision.final else replace(decision, cooldown_s=0.0)


def verdict_open(s: Snapshot, t: Thresholds, trigger: str, reason: str, now: float) -> Step:
    """A verify's verdict on an iteration already judged (`regression`, `tampering`, `false-completion`):
    it opens a CLOSED breaker, fails a HALF_OPEN trial, and never undoes or replaces an open. A trigger
    that waits for a human (`tampering`) has no cooldown, like `destructive`."""
    if s.state is State.OPEN:
        return _stay(s)
    s, decision = (_reopen if s.state is State.HALF_OPEN else _open)(s, t, trigger, reason, now)
    return s, decision if decision.final or trigger not in WAITS_FOR_HUMAN else replace(decision, cooldown_s=0.0)


def verified_progress(s: Snapshot) -> Snapshot:
    """A verify found a failing test fixed: that is progress, whatever the file fingerprint said."""
    return replace(s, consecutive_no_progress=0)


def resume(s: Snapshot, now: float) -> Step:
    """`resume` from the CLI: end any OPEN now (even a final one: a human decided) and start the trial."""
    if s.state is not State.OPEN:
        return _stay(s)
    return _half_open(replace(s, final=False), now, "resumed by hand")


def reset(s: Snapshot, t: Thresholds) -> Step:
    """`reset`: CLOSED, counters, windows, opens and cooldown cleared; iteration and tokens kept."""
    cleared = Snapshot(iteration=s.iteration, tokens_used=s.tokens_used, cost_used=s.cost_used,
                       cooldown_s=t.cooldown_s, reason="reset by hand")
    action: Action = "close" if s.state is not State.CLOSED else "none"
    return cleared, _decide(cleared, action, "none", "reset by hand", s.state)


# -- the steps they share ------------------------------------------------------------------------------


def _silent_for(s: Snapshot, now: float, silent_since: float | None) -> float | None:
    if silent_since is None:
        return None
    start = silent_since
    for floor in (s.changed_at, s.trial_started_at if s.state is State.HALF_OPEN else None):
        if floor is not None and floor > start:
            start = floor
    return max(0.0, now - start)


def _open(s: Snapshot, t: Thresholds, trigger: str, reason: str, now: float, *, force_final: bool = False) -> Step:
    """Trip (from CLOSED or HALF_OPEN). Counts toward max_opens; final when it is the last one allowed
    or when the trigger cannot be cleared by waiting."""
    opens = s.total_opens + 1
    final = force_final or trigger in FINAL or (t.max_opens > 0 and opens >= t.max_opens)
    text = one_line(reason, REASON_MAX)
    if final and not force_final and trigger not in FINAL:
        text = one_line(f"{reason} (open {opens} of {t.max_opens}: final)", REASON_MAX)
    opened = replace(s, state=State.OPEN, trigger=trigger, reason=text, opened_at=now, changed_at=now,
                     total_opens=opens, final=final, trial_iteration=None, trial_started_at=None)
    action: Action = "final" if final else "open"
    return opened, _decide(opened, action, trigger, text, s.state, final=final,
                           cooldown_s=0.0 if final else opened.cooldown_s)


def _reopen(s: Snapshot, t: Thresholds, trigger: str, reason: str, now: float) -> Step:
    """A failed trial: the cooldown doubles (capped), then open again."""
    return _open(replace(s, cooldown_s=clamp_cooldown(s.cooldown_s * 2, t)), t, trigger, reason, now)


def _failed_trial(s: Snapshot, t: Thresholds, report: IterationReport, fired: list[Fired], now: float) -> Step:
    if fired:
        trigger, why = fired[0].trigger, fired[0].reason
    else:
        trigger, why = s.trigger, progress_detail(report)
        if report.failed:
            why = "the call failed" + (f": {one_line(report.first_error)}" if report.first_error else "")
    return _reopen(s, t, trigger, f"trial iteration {report.number} made no progress ({why})", now)


def _half_open(s: Snapshot, now: float, why: str) -> Step:
    trial = replace(s, state=State.HALF_OPEN, changed_at=now, trial_after=s.iteration, trial_iteration=None,
                    trial_started_at=None)
    return trial, _decide(trial, "half_open", s.trigger, f"{why}: the next iteration is the trial", s.state)


def _close(s: Snapshot, t: Thresholds, report: IterationReport, now: float) -> Step:
    text = f"trial iteration {report.number} made progress ({progress_detail(report)})"
    closed = replace(
        s,
        state=State.CLOSED,
        trigger="none",
        reason=text,
        consecutive_no_progress=0,
        consecutive_same_error=0,
        consecutive_failures=0,
        failure_error="",
        opened_at=None,
        cooldown_s=clamp_cooldown(t.cooldown_s, t),
        final=False,
        changed_at=now,
        trial_iteration=None,
        trial_started_at=None,
        recent_error_sets=(),
        recent_reply_words=(),
        recent_reply_blockers=(),
        recent_output_bytes=(),
    )
    return closed, _decide(closed, "close", s.trigger, text, s.state)


def _stay(s: Snapshot, reason: str | None = None) -> Step:
    """No change of state (the snapshot may have learned something): action "none"."""
    return s, _decide(s, "none", s.trigger, s.reason if reason is None else reason, s.state)


def _decide(s: Snapshot, action: Action, trigger: str, reason: str, from_state: State, *,
            final: bool | None = None, cooldown_s: float | None = None) -> Decision:
    """The decision that leads to `s` (the new snapshot) from `from_state`."""
    if cooldown_s is None:
        waits = s.trigger in WAITS_FOR_HUMAN
        cooldown_s = s.cooldown_s if s.state is State.OPEN and not s.final and not waits else 0.0
    return Decision(action=action, state=s.state, trigger=trigger, reason=reason, iteration=s.iteration,
                    final=s.final if final is None else final, cooldown_s=cooldown_s, from_state=from_state,
                    total_opens=s.total_opens)
