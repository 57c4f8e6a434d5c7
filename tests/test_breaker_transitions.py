"""Properties of each pure transition (ralph_supervisor/breaker/transitions.py), from any snapshot state.json
can hold: one input at a time, checked against the states before and after."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ralph_supervisor.breaker import COOLDOWN_CAP, Decision, Snapshot, State, Thresholds, transitions
from ralph_supervisor.iteration import IterationReport
from tests.helpers.fuzzing import BREAKER_THRESHOLDS, MEDIUM, REPORT_FIELDS, SNAPSHOTS

TIMES = st.floats(0.0, 1e12)

INPUTS = st.one_of(
    st.tuples(st.just("started"), st.integers(0, 10**6 + 5)),
    st.tuples(st.just("observe"), REPORT_FIELDS, st.integers(0, 10**6 + 5), st.integers(0, 10_000),
              st.floats(0.0, 50.0)),
    st.tuples(st.just("observe-odd"), st.integers(-500, 500), st.floats(-5.0, 5.0), st.integers(-9, 9)),
    st.tuples(st.just("tick"), st.none() | TIMES, st.booleans()),
    st.tuples(st.just("manual"), st.sampled_from(["", "lunch", "line one\nline two"])),
    st.tuples(st.just("destructive"), st.none() | st.integers(0, 10**6)),
    st.tuples(st.just("verdict"), st.sampled_from(["regression", "tampering", "false-completion"])),
    st.tuples(st.just("verified")),
    st.tuples(st.just("resume")),
    st.tuples(st.just("reset")),
)


def apply(s: Snapshot, t: Thresholds, op: tuple[Any, ...], now: float) -> tuple[Snapshot, Decision | None]:
    """One input to its transition; `verified_progress` gives no decision."""
    kind = op[0]
    if kind == "started":
        return transitions.iteration_started(s, t, op[1], now)
    if kind == "observe":
        report = IterationReport(number=op[2], started_at=now - 1, ended_at=now, **op[1])
        return transitions.observe(s, t, report, now, op[3], op[4])
    if kind == "observe-odd":  # what no agent reports, but a parser might let through: nothing goes negative
        report = IterationReport(number=s.iteration, started_at=now, ended_at=now, tokens=op[1], cost_usd=op[2],
                                 output_bytes=op[3])
        return transitions.observe(s, t, report, now)
    if kind == "tick":
        return transitions.tick(s, t, now, silent_since=op[1], waiting_for_call=op[2])
    if kind == "manual":
        return transitions.manual_open(s, op[1], now)
    if kind == "destructive":
        return transitions.destructive_open(s, t, "iteration deleted 30 files", now, op[1])
    if kind == "verdict":
        return transitions.verdict_open(s, t, op[1], "a test that passed fails", now)
    if kind == "verified":
        return transitions.verified_progress(s), None
    if kind == "resume":
        return transitions.resume(s, now)
    return transitions.reset(s, t)


def as_loaded(s: Snapshot, t: Thresholds) -> Snapshot:
    """The snapshot as `Breaker` holds it after reading state.json: its cooldown within the thresholds' bounds."""
    return replace(s, cooldown_s=transitions.clamp_cooldown(s.cooldown_s, t))


@MEDIUM
@given(s=SNAPSHOTS, t=BREAKER_THRESHOLDS, op=INPUTS, now=TIMES)
def test_open_goes_to_closed_only_by_a_reset(s: Snapshot, t: Thresholds, op: tuple[Any, ...], now: float) -> None:
    """OPEN never closes by itself: the way back is a trial (HALF_OPEN first) or a human's reset."""
    after, _ = apply(replace(s, state=State.OPEN), t, op, now)
    assert after.state is not State.CLOSED or op[0] == "reset"


@MEDIUM
@given(s=SNAPSHOTS, t=BREAKER_THRESHOLDS, op=INPUTS, now=TIMES)
def test_half_open_closes_only_on_a_trial_that_made_progress(s: Snapshot, t: Thresholds, op: tuple[Any, ...],
                                                             now: float) -> None:
    before = replace(s, state=State.HALF_OPEN)
    after, decision = apply(before, t, op, now)
    if op[0] == "reset":
        assert after.state is State.CLOSED
        return
    # A late report of the call the open cut off (numbered up to trial_after) is never the trial.
    trial_made_progress = op[0] == "observe" and op[2] > before.trial_after and IterationReport(
        number=op[2], started_at=0, ended_at=0, **op[1]).progress
    assert trial_made_progress or after.state is not State.CLOSED
    if after.state is State.CLOSED:
        assert decision is not None and decision.action == "close"
        assert (after.consecutive_no_progress, after.consecutive_failures, after.total_opens) == (0, 0, s.total_opens)


@MEDIUM
@given(s=SNAPSHOTS, t=BREAKER_THRESHOLDS, op=INPUTS, now=TIMES)
def test_a_final_open_stays_final_until_a_human_acts(s: Snapshot, t: Thresholds, op: tuple[Any, ...],
                                                     now: float) -> None:
    after, decision = apply(replace(s, state=State.OPEN, final=True), t, op, now)
    if op[0] in ("resume", "reset"):
        assert not after.final and after.state is not State.OPEN
    else:
        assert after.state is State.OPEN and after.final
        assert decision is None or decision.action == "none"


@MEDIUM
@given(s=SNAPSHOTS, t=BREAKER_THRESHOLDS, op=INPUTS, now=TIMES)
def test_counters_never_go_negative_and_the_accounting_never_goes_back(s: Snapshot, t: Thresholds,
                                                                       op: tuple[Any, ...], now: float) -> None:
    after, _ = apply(s, t, op, now)
    for name in ("iteration", "consecutive_no_progress", "consecutive_same_error", "consecutive_failures",
                 "total_opens", "tokens_used", "trial_after"):
        assert getattr(after, name) >= 0, name
    assert after.cost_used >= 0 and after.cooldown_s >= 0
    assert all(size >= 0 for size in after.recent_output_bytes)
    # Even a reset keeps what was spent and how far the run got: it must not silently lift a budget.
    assert after.iteration >= s.iteration and after.tokens_used >= s.tokens_used and after.cost_used >= s.cost_used
    assert after.total_opens >= s.total_opens or op[0] == "reset"


@MEDIUM
@given(s=SNAPSHOTS, t=BREAKER_THRESHOLDS, op=INPUTS, now=TIMES)
def test_the_decision_tells_the_step_it_comes_with(s: Snapshot, t: Thresholds, op: tuple[Any, ...],
                                                  now: float) -> None:
    """A decision changes something exactly when the state changed, and says from where to where."""
    after, decision = apply(s, t, op, now)
    if decision is None:
        assert after.state is s.state
        return
    assert decision.from_state is s.state and decision.state is after.state
    assert decision.changed == (after.state is not s.state)
    assert decision.total_opens == after.total_opens
    expected = {"open": State.OPEN, "final": State.OPEN, "half_open": State.HALF_OPEN, "close": State.CLOSED}
    if decision.changed:
        assert expected[decision.action] is after.state
        assert decision.final == after.final
    if decision.action in ("open", "final"):
        assert after.total_opens == s.total_opens + (0 if decision.trigger == "manual" else 1)
        assert after.opened_at == now and after.trigger == decision.trigger


@MEDIUM
@given(s=SNAPSHOTS, t=BREAKER_THRESHOLDS, op=INPUTS, now=TIMES)
def test_the_cooldown_stays_within_its_bounds(s: Snapshot, t: Thresholds, op: tuple[Any, ...], now: float) -> None:
    before = as_loaded(s, t)
    after, decision = apply(before, t, op, now)
    assert t.cooldown_s <= after.cooldown_s <= COOLDOWN_CAP * t.cooldown_s
    if before.state is State.HALF_OPEN and after.state is State.OPEN and decision is not None \
            and decision.trigger != "manual":
        assert after.cooldown_s == min(2 * before.cooldown_s, COOLDOWN_CAP * t.cooldown_s)  # a failed trial


@MEDIUM
@given(s=SNAPSHOTS, t=BREAKER_THRESHOLDS, op=INPUTS, now=TIMES)
def test_a_transition_is_a_function_of_its_inputs(s: Snapshot, t: Thresholds, op: tuple[Any, ...],
                                                  now: float) -> None:
    """No clock, no hidden state: the same snapshot and input give the same step, and the input is untouched."""
    copy = Snapshot.from_dict(s.to_dict())
    assert apply(s, t, op, now) == apply(copy, t, op, now)
    assert s == copy
