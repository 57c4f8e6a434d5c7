"""Properties of the breaker over random runs: random thresholds, random iterations, random time."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ralph_supervisor.breaker import (
    COOLDOWN_CAP,
    Breaker,
    Decision,
    Snapshot,
    State,
    Thresholds,
    is_neutral,
)
from ralph_supervisor.iteration import IterationReport
from ralph_supervisor.triggers import TRIGGERS
from tests.helpers.fuzzing import (
    BREAKER_THRESHOLDS,
    CHEAP,
    REPORT_FIELDS,
    SNAPSHOT_KEYS,
    SNAPSHOTS,
    STATE_DOCS,
    budget,
    one_line,
)


op_st = st.one_of(
    st.tuples(st.just("iteration"), REPORT_FIELDS),
    st.tuples(st.just("iteration"), REPORT_FIELDS),
    st.tuples(st.just("iteration"), REPORT_FIELDS),
    st.tuples(st.just("start")),
    st.tuples(st.just("observe"), REPORT_FIELDS),
    st.tuples(st.just("tick"), st.floats(0.0, 400.0), st.none() | st.floats(0.0, 200.0)),
    st.tuples(st.just("tick"), st.floats(0.0, 400.0), st.none()),
    st.tuples(st.just("cooldown")),
    st.sampled_from([("manual",), ("resume",), ("resume",), ("reset",), ("destructive",)]),
)
ops_st = st.lists(op_st, max_size=60)


@dataclass
class Driver:
    """Plays operations against a breaker with a clock that only moves forward."""

    breaker: Breaker
    now: float = 1_000.0
    number: int = 0
    daily: int = 0
    decisions: list[Decision] = field(default_factory=list)

    def apply(self, op: tuple[Any, ...]) -> tuple[Decision, IterationReport | None]:
        b = self.breaker
        self.now += 1.0
        rep: IterationReport | None = None
        kind = op[0]
        if kind == "iteration":  # a whole iteration: it starts, then its report arrives
            self.number += 1
            d = b.iteration_started(self.number, self.now - 0.5)
            if d.action != "none":  # the start itself opened (a cap): judge that decision
                self.decisions.append(d)
                return d, None
            rep = IterationReport(number=self.number, started_at=self.now - 0.5, ended_at=self.now, **op[1])
            self.daily += rep.tokens
            d = b.observe(rep, self.now, self.daily)
        elif kind == "start":
            self.number += 1
            d = b.iteration_started(self.number, self.now)
        elif kind == "observe":
            if self.number == 0:
                self.number = 1
            rep = IterationReport(number=self.number, started_at=self.now - 1, ended_at=self.now, **op[1])
            self.daily += rep.tokens
            d = b.observe(rep, self.now, self.daily)
        elif kind == "tick":
            self.now += op[1]
            silent = None if op[2] is None else self.now - op[2]
            d = b.tick(self.now, silent_since=silent)
        elif kind == "cooldown":  # wait out the cooldown, if one is running
            self.now += b.seconds_until_half_open(self.now) or 0.0
            d = b.tick(self.now)
        elif kind == "manual":
            d = b.manual_open("test", self.now)
        elif kind == "destructive":
            d = b.destructive_open("iteration deleted 30 files", self.now)
        elif kind == "resume":
            d = b.resume(self.now)
        else:
            d = b.reset()
        self.decisions.append(d)
        return d, rep


def counters(b: Breaker) -> tuple[Any, ...]:
    s = b.snapshot()
    return (
        s.consecutive_no_progress,
        s.consecutive_same_error,
        s.consecutive_failures,
        s.recent_error_sets,
        s.recent_reply_words,
        s.recent_output_bytes,
    )


@settings(max_examples=150, deadline=None)
@given(thresholds=BREAKER_THRESHOLDS, ops=ops_st)
def test_invariants_hold_over_random_runs(thresholds: Thresholds, ops: list[tuple[Any, ...]]) -> None:
    driver = Driver(Breaker(thresholds))
    b = driver.breaker
    base = thresholds.cooldown_s
    for op in ops:
        before = b.snapshot()
        before_counters = counters(b)
        d, rep = driver.apply(op)
        after = b.snapshot()

        # No OPEN without a trigger; every open names a known one.
        if after.state is State.OPEN:
            assert after.trigger in TRIGGERS
        if d.action in ("open", "final"):
            assert d.state is State.OPEN and d.trigger in TRIGGERS and after.trigger == d.trigger
        if before.state is not State.OPEN and after.state is State.OPEN:
            assert d.action in ("open", "final")

        # The Nth open is final; final opens say so.
        if d.action in ("open", "final") and d.trigger != "manual":
            assert after.total_opens == before.total_opens + 1
            if thresholds.max_opens > 0 and after.total_opens >= thresholds.max_opens:
                assert d.final and d.action == "final"
        if d.action in ("open", "final"):
            assert d.final == (d.action == "final")

        # Cooldown stays within [base, 8 x base] and never shrinks after a failed trial.
        assert base <= after.cooldown_s <= COOLDOWN_CAP * base
        if before.state is State.HALF_OPEN and after.state is State.OPEN and d.trigger != "manual":
            assert after.cooldown_s >= before.cooldown_s
            assert after.cooldown_s == min(2 * before.cooldown_s, COOLDOWN_CAP * base)

        if rep is not None:
            # Neutral reports (usage limits, our own cut-offs) never change a counter or a window.
            if is_neutral(rep):
                assert counters(b) == before_counters
            # Progress always clears the no-progress counter (when the report is judged at all).
            judged = before.state is State.CLOSED or (
                before.state is State.HALF_OPEN and rep.number > before.trial_after
            )
            if judged and rep.progress and not is_neutral(rep):
                assert after.consecutive_no_progress == 0


@settings(max_examples=150, deadline=None)
@given(thresholds=BREAKER_THRESHOLDS, prefix=ops_st, suffix=ops_st)
def test_a_breaker_restored_from_json_behaves_identically(
    thresholds: Thresholds, prefix: list[tuple[Any, ...]], suffix: list[tuple[Any, ...]]
) -> None:
    original = Driver(Breaker(thresholds))
    for op in prefix:
        original.apply(op)
    data = json.loads(json.dumps(original.breaker.to_dict()))
    restored = Driver(
        Breaker.from_dict(thresholds, data), now=original.now, number=original.number, daily=original.daily
    )
    assert restored.breaker.snapshot() == original.breaker.snapshot()
    for op in suffix:
        d1, _ = original.apply(op)
        d2, _ = restored.apply(op)
        assert d1 == d2
    assert restored.breaker.to_dict() == original.breaker.to_dict()


@settings(max_examples=100, deadline=None)
@given(thresholds=BREAKER_THRESHOLDS)
def test_usage_limited_reports_alone_never_open_on_evidence(thresholds: Thresholds) -> None:
    """However many usage-limited calls come in a row, only a cap (budget, iterations) can open."""
    b = Breaker(thresholds)
    for n in range(1, 30):
        b.iteration_started(n, n * 10.0)
        d = b.observe(
            IterationReport(number=n, started_at=n * 10.0, ended_at=n * 10.0 + 5, usage_limited=True, failed=True),
            n * 10.0 + 5,
        )
        if d.action != "none":
            assert d.trigger in ("max-iterations", "token-budget", "daily-budget")
            break
    assert b.status()["consecutive_failures"] == 0 and b.status()["consecutive_no_progress"] == 0


outcome_st = st.sampled_from(["progress", "no-progress", "failed", "usage-limited", "cut-short", "timeout"])


@settings(max_examples=150, deadline=None)
@given(
    cooldown=st.floats(1.0, 5000.0),
    max_opens=st.integers(0, 6),
    outcomes=st.lists(outcome_st, min_size=1, max_size=25),
)
def test_trials_cooldowns_and_the_last_allowed_open(cooldown: float, max_opens: int, outcomes: list[str]) -> None:
    """Open, then trial after trial: progress closes with the base cooldown, anything judged re-opens with it
    doubled (never shrinking, never past 8x), neutral trials wait, and the max_opens-th open is final."""
    t = Thresholds(no_progress=1, same_error=0, output_decline=0, max_failures=0, stall_s=0, paraphrase=0,
                   cooldown_s=cooldown, max_opens=max_opens, trial_timeout_s=100.0)
    b = Breaker(t)
    now, n = 0.0, 1
    b.iteration_started(n, now)
    d = b.observe(IterationReport(number=n, started_at=now, ended_at=now + 1), now + 1)
    assert d.trigger == "no-progress" and d.total_opens == 1
    for outcome in outcomes:
        if b.state is State.CLOSED:  # trip again so every outcome is a trial
            n += 1
            now += 1
            b.iteration_started(n, now)
            d = b.observe(IterationReport(number=n, started_at=now, ended_at=now), now)
            assert d.action in ("open", "final")
        if b.final:
            assert b.tick(now + 10 * cooldown * COOLDOWN_CAP).action == "none"
            break
        before = b.snapshot()
        now += b.seconds_until_half_open(now) or 0.0
        assert b.tick(now).action == "half_open"
        n += 1
        b.iteration_started(n, now)
        if outcome == "timeout":
            d = b.tick(now + 101.0)
        else:
            rep = IterationReport(
                number=n, started_at=now, ended_at=now + 1,
                files_changed=1 if outcome == "progress" else 0,
                failed=outcome == "failed",
                usage_limited=outcome == "usage-limited",
                cut_short=outcome == "cut-short",
            )
            d = b.observe(rep, now + 1)
        now += 1
        after = b.snapshot()
        if outcome in ("usage-limited", "cut-short"):
            assert d.action == "none" and after.state is State.HALF_OPEN
            b.resume(now)  # no-op in HALF_OPEN: the next iteration is still the trial
            n += 1
            b.iteration_started(n, now)
            d = b.observe(IterationReport(number=n, started_at=now, ended_at=now, files_changed=1), now)
            assert d.action == "close"
        elif outcome == "progress":
            assert d.action == "close" and after.cooldown_s == cooldown and after.consecutive_no_progress == 0
        else:
            assert d.action in ("open", "final") and after.total_opens == before.total_opens + 1
            assert after.cooldown_s >= before.cooldown_s
            assert after.cooldown_s == min(2 * before.cooldown_s, COOLDOWN_CAP * cooldown)
            assert d.final == (max_opens > 0 and after.total_opens >= max_opens)


@budget(60)
@given(data=STATE_DOCS)
@example(data={"state": ["OPEN"]})
@example(data={"state": {"a": 1}})
@example(data={"state": "OPEN", "trigger": "stall"})
@example(data={"cooldown_s": 1e308, "opened_at": -1.0})
@example(data={"recent_error_sets": [["a"], "b"]})
@example(data={"reason": "x" * 100_000, "trigger": "y" * 100_000})
def test_breaker_state_is_a_breaker_or_one_line_naming_the_field(data: Any) -> None:
    try:
        breaker = Breaker.from_dict(Thresholds(), data)
    except ValueError as exc:
        message = str(exc)
        assert one_line(message) and message.startswith("breaker state"), message
        if "field" in message:
            assert any(f"'{key}'" in message for key in SNAPSHOT_KEYS), message
    else:
        assert breaker.state in State
        report = breaker.status()
        assert report["trigger"] == "none" or report["trigger"] in TRIGGERS
        assert all(isinstance(report[k], int) and report[k] >= 0 for k in ("iteration", "total_opens", "tokens_used"))


@CHEAP
@given(snap=SNAPSHOTS)
def test_a_breaker_snapshot_round_trips_through_state_json(snap: Snapshot) -> None:
    assert Snapshot.from_dict(json.loads(json.dumps(snap.to_dict()))) == snap


@budget(10)
@given(field=st.sampled_from(["cooldown_s", "opened_at", "changed_at", "trial_started_at"]), digits=st.integers(310, 4000))
@example(field="cooldown_s", digits=400)
def test_a_huge_integer_in_a_time_field_is_a_value_error_naming_it(field: str, digits: int) -> None:
    with pytest.raises(ValueError, match=field):
        Breaker.from_dict(Thresholds(), json.loads('{"' + field + '": 1' + "0" * digits + "}"))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 10**6)), st.one_of(st.none(), st.floats(0, 5)),
                          st.booleans()), max_size=12))
def test_budgets_count_each_call_once_however_often_the_state_is_saved_and_reloaded(
    calls: list[tuple[int | None, float | None, bool]]
) -> None:
    t = Thresholds(no_progress=0, same_error=0, output_decline=0, max_failures=0, stall_s=0, paraphrase=0)
    breaker = Breaker(t)
    for number, (tokens, cost, reload) in enumerate(calls, start=1):
        breaker.iteration_started(number, float(number))
        breaker.observe(IterationReport(number=number, started_at=number, ended_at=number + 0.5, files_changed=1,
                                        tokens=tokens, cost_usd=cost), number + 0.5)
        if reload:  # saved to state.json and read back by the next supervisor on the folder
            breaker = Breaker(t, Snapshot.from_dict(json.loads(json.dumps(breaker.to_dict()))))
    assert breaker.status()["tokens_used"] == sum(tokens or 0 for tokens, _, _ in calls)
    assert breaker.snapshot().cost_used == pytest.approx(sum(cost or 0.0 for _, cost, _ in calls), abs=1e-5)
