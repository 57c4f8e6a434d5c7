"""The breaker's trip rules, state machine and serialisation, with plain IterationReport values."""

from __future__ import annotations

import json

import pytest

from ralph_supervisor.breaker import (
    Breaker,
    Decision,
    Snapshot,
    State,
    Thresholds,
)
from ralph_supervisor.iteration import IterationReport

OFF = dict(no_progress=0, same_error=0, output_decline=0.0, max_failures=0, stall_s=0.0, paraphrase=0.0)
"""Every evidence rule off: tests turn on the one they prove."""


def report(n: int, **fields: object) -> IterationReport:
    fields.setdefault("output_bytes", 1000)
    return IterationReport(number=n, started_at=n * 100.0, ended_at=n * 100.0 + 50.0, **fields)  # type: ignore[arg-type]


def run(breaker: Breaker, reports: list[IterationReport], daily: int = 0) -> list[Decision]:
    """Start and observe each report in turn, at its own times."""
    out = []
    for r in reports:
        breaker.iteration_started(r.number, r.started_at)
        out.append(breaker.observe(r, r.ended_at, daily))
    return out


def tripped_at(decisions: list[Decision]) -> int | None:
    for d in decisions:
        if d.action in ("open", "final"):
            return d.iteration
    return None


def only(**rule: object) -> Thresholds:
    return Thresholds(**{**OFF, **rule})  # type: ignore[arg-type]


# -- no-progress ----------------------------------------------------------------------------------


def test_no_progress_opens_on_the_third_iteration_without_progress() -> None:
    b = Breaker(Thresholds())
    decisions = run(b, [report(n) for n in (1, 2, 3)])
    assert [d.action for d in decisions] == ["none", "none", "open"]
    last = decisions[-1]
    assert last.state is State.OPEN and last.trigger == "no-progress" and not last.final
    assert "no progress in 3 iterations in a row (threshold 3)" in last.reason
    assert "no file changed, no commit" in last.reason
    assert last.cooldown_s == 1800.0 and last.total_opens == 1
    assert b.status()["consecutive_no_progress"] == 3


def test_a_changed_file_or_a_commit_resets_the_no_progress_count() -> None:
    b = Breaker(only(no_progress=3))
    decisions = run(
        b, [report(1), report(2), report(3, files_changed=1), report(4), report(5), report(6, commits=1), report(7)]
    )
    assert tripped_at(decisions) is None
    assert b.status()["consecutive_no_progress"] == 1


def test_completion_without_progress_is_not_counted_as_no_progress() -> None:
    b = Breaker(only(no_progress=2))
    decisions = run(b, [report(1), report(2, completed=True), report(3, completed=True)])
    assert tripped_at(decisions) is None
    assert b.status()["consecutive_no_progress"] == 1
    assert tripped_at(run(b, [report(4)])) == 4


# -- same-error -----------------------------------------------------------------------------------


def test_the_same_error_set_five_times_in_a_row_opens_same_error() -> None:
    b = Breaker(only(same_error=5))
    err = dict(
        error_signatures=frozenset({"error TS#: Type 'string' is not assignable to type 'number'. in main.ts"}),
        error_lines=("src/main.ts:12:5 - error TS2322: Type 'string' is not assignable to type 'number'.",),
    )
    # The agent edits files each time (progress), yet the same compile error comes back.
    decisions = run(b, [report(n, files_changed=1, **err) for n in range(1, 6)])
    assert [d.action for d in decisions] == ["none"] * 4 + ["open"]
    assert decisions[-1].trigger == "same-error"
    assert "the same error in 5 iterations in a row (threshold 5)" in decisions[-1].reason
    assert "TS2322" in decisions[-1].reason


def test_signatures_that_differ_only_in_line_numbers_and_ports_are_the_same_error() -> None:
    b = Breaker(only(same_error=3))
    sigs = ["Error: connect ECONNREFUSED #.#.#.# at db.js", "Error: connect ECONNREFUSED #.#.#.# at db.js "]
    decisions = run(b, [report(n, error_signatures=frozenset({sigs[n % 2]})) for n in range(1, 4)])
    assert tripped_at(decisions) == 3


def test_a_different_error_or_a_clean_iteration_breaks_the_same_error_run() -> None:
    b = Breaker(only(same_error=3))
    a = frozenset({"Error: Failed to compile main.ts"})
    other = frozenset({"FAILED tests/test_auth.py::test_login - AssertionError"})
    decisions = run(
        b,
        [
            report(1, error_signatures=a),
            report(2, error_signatures=a),
            report(3),
            report(4, error_signatures=a),
            report(5, error_signatures=a),
            report(6, error_signatures=other),
            report(7, error_signatures=a),
        ],
    )
    assert tripped_at(decisions) is None
    assert b.status()["consecutive_same_error"] == 1


def test_an_iteration_whose_errors_include_the_previous_set_and_more_is_not_the_same() -> None:
    b = Breaker(only(same_error=2))
    a = frozenset({"Error: Failed to compile main.ts"})
    decisions = run(b, [report(1, error_signatures=a), report(2, error_signatures=a | {"Fatal: out of memory"})])
    assert tripped_at(decisions) is None


# -- consecutive-failures -------------------------------------------------------------------------


def test_five_failed_calls_in_a_row_open_consecutive_failures() -> None:
    b = Breaker(only(max_failures=5))
    decisions = run(b, [report(n, failed=True, error_lines=(f"Error: API error {n}",)) for n in range(1, 6)])
    assert tripped_at(decisions) == 5
    assert decisions[-1].trigger == "consecutive-failures"
    assert decisions[-1].reason.startswith("5 failed agent calls in a row (threshold 5)")


def test_a_timeout_is_a_failed_call_and_the_reason_says_so() -> None:
    b = Breaker(only(max_failures=2))
    decisions = run(b, [report(1, failed=True, timed_out=True), report(2, failed=True, timed_out=True)])
    assert decisions[-1].trigger == "consecutive-failures"
    assert "timed out" in decisions[-1].reason


def test_usage_limits_between_failures_neither_count_nor_break_the_run() -> None:
    b = Breaker(only(max_failures=3))
    reports = [
        report(1, failed=True),
        report(2, failed=True, usage_limited=True),
        report(3, failed=True),
        report(4, usage_limited=True),
    ]
    assert tripped_at(run(b, reports)) is None
    assert b.status()["consecutive_failures"] == 2
    assert tripped_at(run(b, [report(5, failed=True)])) == 5


def test_a_successful_call_ends_a_run_of_failures() -> None:
    b = Breaker(only(max_failures=3))
    assert tripped_at(run(b, [report(1, failed=True), report(2, failed=True), report(3), report(4, failed=True)])) is None
    assert b.status()["consecutive_failures"] == 1


# -- paraphrase -----------------------------------------------------------------------------------

BLOCKED_REPLIES = [
    "Still blocked: the owner attestation gate is unsigned, so deploy is blocked.",
    "The deploy remains blocked because the owner attestation gate is unsigned.",
    "Owner attestation gate unsigned; deploy blocked.",
]


def test_three_rewordings_of_the_same_blocker_open_paraphrase() -> None:
    b = Breaker(only(paraphrase=0.82))
    decisions = run(b, [report(n + 1, reply=text) for n, text in enumerate(BLOCKED_REPLIES)])
    assert tripped_at(decisions) == 3
    assert decisions[-1].trigger == "paraphrase"
    # Word sets: A = {owner attestation gate unsigned deploy blocked}, B = A + {because}, C = A:
    # (6/7 + 1 + 6/7) / 3 = 0.905.
    assert "mean word-set Jaccard 0.90 >= 0.82" in decisions[-1].reason


def test_paraphrase_comes_before_no_progress_when_both_fire() -> None:
    b = Breaker(Thresholds())
    decisions = run(b, [report(n + 1, reply=text) for n, text in enumerate(BLOCKED_REPLIES)])
    assert decisions[-1].trigger == "paraphrase"


def test_different_work_in_each_reply_is_not_a_paraphrase() -> None:
    b = Breaker(only(paraphrase=0.82))
    replies = ["tests failing in auth module", "tests failing in billing module", "lint errors in docs folder"]
    assert tripped_at(run(b, [report(n + 1, reply=t) for n, t in enumerate(replies)])) is None


def test_failed_calls_are_not_replies_for_the_paraphrase_rule() -> None:
    b = Breaker(only(paraphrase=0.82))
    reports = [
        report(1, reply=BLOCKED_REPLIES[0]),
        report(2, reply=BLOCKED_REPLIES[1]),
        report(3, reply=BLOCKED_REPLIES[2], failed=True),
    ]
    assert tripped_at(run(b, reports)) is None
    assert tripped_at(run(b, [report(4, reply=BLOCKED_REPLIES[0])])) == 4


def test_restating_while_changing_files_is_not_a_paraphrase_stall() -> None:
    b = Breaker(only(paraphrase=0.82))
    reports = [report(n, reply="Done. All tests pass.", files_changed=2) for n in (1, 2, 3)]
    assert tripped_at(run(b, reports)) is None


def test_paraphrase_ratio_zero_turns_the_rule_off() -> None:
    b = Breaker(only(paraphrase=0.0))
    assert tripped_at(run(b, [report(n, reply="blocked on the owner attestation") for n in (1, 2, 3, 4)])) is None


# -- output-decline -------------------------------------------------------------------------------


def test_output_falling_seventy_percent_below_the_mean_of_the_three_before_opens() -> None:
    b = Breaker(only(output_decline=70.0))
    sizes = [1000, 1200, 800, 300]  # mean 1000, then 70 % less
    decisions = run(b, [report(n + 1, output_bytes=s) for n, s in enumerate(sizes)])
    assert tripped_at(decisions) == 4
    assert decisions[-1].trigger == "output-decline"
    assert "printed 300 bytes, 70% less than the mean 1000 of the 3 before it (threshold 70%)" in decisions[-1].reason


def test_output_decline_is_judged_only_after_three_counted_iterations() -> None:
    b = Breaker(only(output_decline=70.0))
    reports = [
        report(1, output_bytes=1000),
        report(2, output_bytes=1000, usage_limited=True),
        report(3, output_bytes=10, failed=True),
        report(4, output_bytes=1000),
        report(5, output_bytes=10),
    ]
    assert tripped_at(run(b, reports)) is None
    assert tripped_at(run(b, [report(6, output_bytes=1000), report(7, output_bytes=10)])) == 7


def test_a_smaller_decline_or_an_iteration_with_progress_does_not_open() -> None:
    b = Breaker(only(output_decline=70.0))
    reports = [report(1), report(2), report(3), report(4, output_bytes=400), report(5, output_bytes=1, files_changed=1)]
    assert tripped_at(run(b, reports)) is None


# -- stall ----------------------------------------------------------------------------------------


def test_a_call_silent_for_the_stall_time_opens_stall() -> None:
    b = Breaker(only(stall_s=60.0))
    b.iteration_started(1, 0.0)
    assert b.tick(59.0, silent_since=0.5).action == "none"
    assert b.tick(100.0, silent_since=None).action == "none"
    d = b.tick(60.5, silent_since=0.5)
    assert d.action == "open" and d.trigger == "stall"
    assert "silent for 60 s (threshold 60 s)" in d.reason


def test_silence_from_before_the_trial_does_not_count_as_a_stall() -> None:
    b = Breaker(only(stall_s=60.0, no_progress=1), )
    run(b, [report(1)])
    assert b.state is State.OPEN
    b.tick(b.snapshot().opened_at + 1800.0)  # cooldown over
    assert b.state is State.HALF_OPEN
    half_open_at = b.snapshot().changed_at
    assert half_open_at is not None
    # The call that was frozen has been silent since long before: only silence after the resume counts.
    assert b.tick(half_open_at + 30.0, silent_since=0.0).action == "none"
    d = b.tick(half_open_at + 60.0, silent_since=0.0)
    assert d.action == "open" and d.trigger == "stall" and d.from_state is State.HALF_OPEN


# -- blocked and the caps -------------------------------------------------------------------------


def test_one_blocked_call_is_final_on_the_first_iteration() -> None:
    b = Breaker(Thresholds())
    d = run(b, [report(1, blocked=True, blocked_reason="Invalid API key · Please run /login", failed=True)])[0]
    assert d.action == "final" and d.final and d.trigger == "blocked"
    assert "Invalid API key" in d.reason and d.cooldown_s == 0.0
    assert b.tick(10**9).action == "none" and b.state is State.OPEN


def test_blocked_wins_over_every_other_rule() -> None:
    b = Breaker(only(no_progress=1, max_failures=1, max_iterations=1))
    d = run(b, [report(1, blocked=True, failed=True)])[0]
    assert d.trigger == "blocked"


def test_max_iterations_stops_after_the_capped_iteration() -> None:
    b = Breaker(only(max_iterations=3))
    decisions = run(b, [report(n, files_changed=1) for n in (1, 2, 3)])
    assert [d.action for d in decisions] == ["none", "none", "final"]
    assert decisions[-1].trigger == "max-iterations" and "iteration cap reached (3 >= 3)" in decisions[-1].reason


def test_an_iteration_starting_past_the_cap_is_stopped_even_if_the_last_one_was_never_observed() -> None:
    b = Breaker(only(max_iterations=3))
    run(b, [report(1), report(2)])
    d = b.iteration_started(4, 500.0)
    assert d.action == "final" and d.trigger == "max-iterations"


def test_token_budget_sums_the_reported_tokens_of_the_run() -> None:
    b = Breaker(only(token_budget=10_000))
    decisions = run(b, [report(1, tokens=4000, files_changed=1), report(2, tokens=4000, files_changed=1)])
    assert tripped_at(decisions) is None
    d = run(b, [report(3, tokens=2000, files_changed=1)])[0]
    assert d.action == "final" and d.trigger == "token-budget"
    assert "(10000 >= 10000)" in d.reason
    assert b.status()["tokens_used"] == 10_000


def test_daily_budget_uses_the_supervisors_count_for_today() -> None:
    b = Breaker(only(daily_token_budget=50_000))
    assert run(b, [report(1, tokens=100, files_changed=1)], daily=49_999)[0].action == "none"
    d = run(b, [report(2, tokens=100, files_changed=1)], daily=50_099)[0]
    assert d.action == "final" and d.trigger == "daily-budget"
    assert "50099 tokens today >= 50000" in d.reason


def test_a_cap_reached_together_with_a_rule_reports_the_rule_but_stops_for_good() -> None:
    b = Breaker(only(no_progress=3, max_iterations=3))
    d = run(b, [report(n) for n in (1, 2, 3)])[-1]
    assert d.trigger == "no-progress" and d.final and d.action == "final"
    assert "iteration cap reached" in d.reason


def test_usage_limited_tokens_count_toward_the_budget_but_nothing_else() -> None:
    b = Breaker(only(token_budget=1000, no_progress=1, max_failures=1))
    d = run(b, [report(1, usage_limited=True, failed=True, tokens=1000)])[0]
    assert d.trigger == "token-budget"
    assert b.status()["consecutive_failures"] == 0 and b.status()["consecutive_no_progress"] == 0


def test_same_error_comes_before_consecutive_failures_and_no_progress() -> None:
    b = Breaker(only(no_progress=3, same_error=3, max_failures=3))
    err = frozenset({"Error: Failed to compile main.ts"})
    d = run(b, [report(n, failed=True, error_signatures=err) for n in (1, 2, 3)])[-1]
    assert d.trigger == "same-error"


def test_consecutive_failures_come_before_no_progress() -> None:
    b = Breaker(only(no_progress=3, max_failures=3))
    d = run(b, [report(n, failed=True) for n in (1, 2, 3)])[-1]
    assert d.trigger == "consecutive-failures"


# -- the state machine ----------------------------------------------------------------------------


def opened(thresholds: Thresholds | None = None) -> Breaker:
    """A breaker that has just opened on no-progress at iteration 3 (at t=350)."""
    b = Breaker(thresholds or Thresholds(cooldown_s=600.0))
    run(b, [report(n) for n in (1, 2, 3)])
    assert b.state is State.OPEN
    return b


def test_the_cooldown_moves_open_to_half_open_and_not_before() -> None:
    b = opened()
    assert b.seconds_until_half_open(350.0) == 600.0
    assert b.tick(949.0).action == "none"
    d = b.tick(950.0)
    assert d.action == "half_open" and d.state is State.HALF_OPEN and d.from_state is State.OPEN
    assert d.trigger == "no-progress" and "next iteration is the trial" in d.reason


def test_progress_in_the_trial_closes_and_clears_the_counters() -> None:
    b = opened()
    b.tick(950.0)
    assert "trial" in b.iteration_started(4, 1000.0).reason
    d = b.observe(report(4, files_changed=2, commits=1), 1050.0)
    assert d.action == "close" and d.state is State.CLOSED
    assert d.reason == "trial iteration 4 made progress (2 files changed, 1 commit)"
    assert b.trigger == "none"
    assert b.status()["consecutive_no_progress"] == 0 and b.snapshot().cooldown_s == 600.0


def test_a_trial_without_progress_reopens_with_the_cooldown_doubled_up_to_eight_times() -> None:
    b = opened(Thresholds(cooldown_s=600.0, max_opens=0))
    cooldowns = []
    now = 350.0
    n = 3
    for _ in range(6):
        now += b.snapshot().cooldown_s
        assert b.tick(now).action == "half_open"
        n += 1
        b.iteration_started(n, now + 1)
        d = b.observe(report(n), now + 2)
        assert d.action == "open" and d.from_state is State.HALF_OPEN
        assert d.reason.startswith(f"trial iteration {n} made no progress")
        cooldowns.append(d.cooldown_s)
        now += 2
    assert cooldowns == [1200.0, 2400.0, 4800.0, 4800.0, 4800.0, 4800.0]


def test_the_third_open_is_final() -> None:
    b = opened(Thresholds(cooldown_s=600.0, max_opens=3))
    assert b.total_opens == 1 and not b.final
    b.tick(950.0)
    run(b, [report(4)])
    assert b.total_opens == 2 and not b.final
    b.tick(10_000.0)
    d = run(b, [report(5)])[0]
    assert d.action == "final" and d.final and b.total_opens == 3
    assert "(open 3 of 3: final)" in d.reason
    assert b.tick(10**9).action == "none" and b.state is State.OPEN


def test_a_trial_that_runs_too_long_reopens() -> None:
    b = opened(Thresholds(cooldown_s=600.0, stall_s=100.0))  # trial bound: 2 x stall = 200 s
    b.tick(950.0)
    b.iteration_started(4, 1000.0)
    assert b.tick(1199.0).action == "none"
    d = b.tick(1200.0)
    assert d.action == "open" and d.trigger == "no-progress"
    assert "still running after 200 s (limit 200 s)" in d.reason and d.cooldown_s == 1200.0


def test_the_call_cut_off_by_the_pause_is_not_the_trial() -> None:
    b = Breaker(Thresholds(cooldown_s=600.0))
    run(b, [report(1), report(2)])
    b.iteration_started(3, 300.0)  # the third call is running when the breaker opens (by hand here)
    b.manual_open("", 310.0)
    b.resume(320.0)
    # The cut-off call finishes late without progress: ignored.
    assert b.observe(report(3), 330.0).action == "none" and b.state is State.HALF_OPEN
    b.iteration_started(4, 340.0)
    assert b.observe(report(4, files_changed=1), 350.0).action == "close"


def test_a_usage_limited_or_cut_short_trial_waits_for_the_next_iteration() -> None:
    b = opened()
    b.tick(950.0)
    b.iteration_started(4, 1000.0)
    d = b.observe(report(4, usage_limited=True), 1010.0)
    assert d.action == "none" and b.state is State.HALF_OPEN
    b.iteration_started(5, 1020.0)
    assert b.observe(report(5, cut_short=True), 1030.0).action == "none"
    b.iteration_started(6, 1040.0)
    assert b.observe(report(6, commits=1), 1050.0).action == "close"


def test_a_blocked_trial_is_final() -> None:
    b = opened()
    b.tick(950.0)
    d = run(b, [report(4, blocked=True, files_changed=3)])[0]
    assert d.action == "final" and d.trigger == "blocked"


def test_reports_while_open_change_nothing_but_the_token_count() -> None:
    b = opened()
    before = b.snapshot()
    assert b.observe(report(4, failed=True, tokens=50), 400.0).action == "none"
    after = b.snapshot()
    assert after.tokens_used == before.tokens_used + 50
    assert after.consecutive_failures == before.consecutive_failures == 0


def test_a_manual_pause_waits_for_resume_and_does_not_count_toward_max_opens() -> None:
    b = Breaker(Thresholds(cooldown_s=60.0, max_opens=1))
    b.iteration_started(1, 0.0)
    d = b.manual_open("operator lunch", 10.0)
    assert d.action == "open" and d.trigger == "manual" and not d.final and d.cooldown_s == 0.0
    assert d.reason == "paused by hand: operator lunch"
    assert b.total_opens == 0
    assert b.tick(10**6).action == "none" and b.state is State.OPEN
    d = b.resume(10**6)
    assert d.action == "half_open" and d.state is State.HALF_OPEN


def test_pausing_an_open_breaker_by_hand_stops_its_automatic_retry() -> None:
    b = opened()
    d = b.manual_open("", 400.0)
    assert d.action == "none" and b.trigger == "manual" and "was no-progress" in b.reason
    assert b.tick(10**6).action == "none"


def test_resume_ends_the_cooldown_at_once() -> None:
    b = opened()
    d = b.resume(360.0)
    assert d.action == "half_open" and b.state is State.HALF_OPEN
    assert b.resume(361.0).action == "none"


def test_reset_clears_the_breaker_but_keeps_the_accounting() -> None:
    b = opened(Thresholds(cooldown_s=600.0))
    b.tick(950.0)
    run(b, [report(4, tokens=77)])  # failed trial: cooldown doubled
    d = b.reset()
    assert d.action == "close" and d.state is State.CLOSED and d.from_state is State.OPEN
    s = b.snapshot()
    assert (s.total_opens, s.consecutive_no_progress, s.cooldown_s, s.trigger) == (0, 0, 600.0, "none")
    assert (s.iteration, s.tokens_used) == (4, 77)
    assert b.reset().action == "none"


# -- serialisation --------------------------------------------------------------------------------


def test_state_survives_a_json_round_trip_and_the_restored_breaker_continues() -> None:
    b = opened()
    data = json.loads(json.dumps(b.to_dict()))
    for key in (
        "state",
        "reason",
        "trigger",
        "iteration",
        "consecutive_no_progress",
        "consecutive_same_error",
        "consecutive_failures",
        "opened_at",
        "total_opens",
        "cooldown_s",
        "tokens_used",
    ):
        assert key in data
    restored = Breaker.from_dict(Thresholds(cooldown_s=600.0), data)
    assert restored.snapshot() == b.snapshot()
    assert restored.tick(949.0).action == "none"
    assert restored.tick(950.0).action == "half_open"


def test_a_restored_cooldown_is_clamped_to_the_current_base_and_cap() -> None:
    data = opened().to_dict()
    assert Breaker.from_dict(Thresholds(cooldown_s=60.0), {**data, "cooldown_s": 10**6}).snapshot().cooldown_s == 480.0
    assert Breaker.from_dict(Thresholds(cooldown_s=60.0), {**data, "cooldown_s": 1}).snapshot().cooldown_s == 60.0


def test_an_empty_state_file_object_is_a_closed_breaker() -> None:
    assert Snapshot.from_dict({}) == Snapshot()


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"state": "AJAR"}, "state"),
        ({"state": "OPEN", "trigger": "gremlins", "opened_at": 1.0}, "trigger"),
        ({"state": "OPEN", "trigger": "stall"}, "opened_at"),
        ({"state": "OPEN", "trigger": "none", "opened_at": 1.0}, "trigger"),
        ({"iteration": -1}, "iteration"),
        ({"iteration": "7"}, "iteration"),
        ({"total_opens": True}, "total_opens"),
        ({"cooldown_s": float("nan")}, "cooldown_s"),
        ({"opened_at": "yesterday"}, "opened_at"),
        ({"final": "yes"}, "final"),
        ({"reason": 3}, "reason"),
        ({"recent_error_sets": ["Error: x"]}, "recent_error_sets"),
        ({"recent_output_bytes": [1, -2]}, "recent_output_bytes"),
    ],
)
def test_bad_state_data_raises_a_value_error_naming_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=repr(field)):
        Snapshot.from_dict(data)


def test_state_data_that_is_not_an_object_raises_a_value_error() -> None:
    with pytest.raises(ValueError, match="JSON object"):
        Snapshot.from_dict(["CLOSED"])


def test_the_decision_as_json_carries_the_transition() -> None:
    d = run(Breaker(Thresholds()), [report(n) for n in (1, 2, 3)])[-1]
    data = json.loads(json.dumps(d.to_dict()))
    assert data["from"] == "CLOSED" and data["to"] == "OPEN" and data["trigger"] == "no-progress"
    assert data["action"] == "open" and data["iteration"] == 3 and data["total_opens"] == 1


def test_the_trial_time_bound_defaults_to_twice_the_stall_time() -> None:
    assert Thresholds().trial_timeout == 3600.0
    assert Thresholds(stall_s=100.0).trial_timeout == 200.0
    assert Thresholds(stall_s=0.0).trial_timeout == 3600.0
    assert Thresholds(trial_timeout_s=90.0).trial_timeout == 90.0


def test_resume_after_a_final_open_starts_a_trial_because_a_human_decided() -> None:
    b = Breaker(Thresholds())
    run(b, [report(1, blocked=True)])
    assert b.final
    d = b.resume(500.0)
    assert d.action == "half_open" and not b.final
    assert b.observe(report(2, files_changed=1), 600.0).action == "close"


def test_a_restored_final_open_stays_open_and_final() -> None:
    b = Breaker(Thresholds(max_opens=1))
    run(b, [report(n) for n in (1, 2, 3)])
    restored = Breaker.from_dict(Thresholds(max_opens=1), json.loads(json.dumps(b.to_dict())))
    assert restored.final and restored.state is State.OPEN
    assert restored.seconds_until_half_open(10**9) is None and restored.tick(10**9).action == "none"


# -- judging what matters: net progress, failures as failures, restated blockers, dollars -------------


def test_returning_to_an_earlier_state_is_not_progress_and_trips_at_the_threshold_from_the_first_return() -> None:
    b = Breaker(only(no_progress=3))
    flips = [report(1, files_changed=1), report(2, files_changed=1),        # x = 1, x = 2: new states
             report(3, files_changed=1, returned_to=1), report(4, files_changed=1, returned_to=2),
             report(5, files_changed=1, returned_to=1)]
    decisions = run(b, flips)
    assert tripped_at(decisions) == 5
    assert decisions[-1].trigger == "no-progress"
    assert "the workspace returned to the state it had after iteration 1" in decisions[-1].reason


def test_a_return_to_the_runs_start_is_named_so() -> None:
    b = Breaker(only(no_progress=1))
    d = run(b, [report(1, files_changed=2, returned_to=0)])[0]
    assert "returned to the state it had after the run's start" in d.reason


def test_failed_calls_neither_count_toward_nor_reset_no_progress() -> None:
    b = Breaker(only(no_progress=3, max_failures=0))
    decisions = run(b, [report(1), report(2), report(3, failed=True), report(4, failed=True), report(5)])
    assert tripped_at(decisions) == 5  # two without progress, two failures (not counted), then the third
    b = Breaker(only(no_progress=3, max_failures=0))
    decisions = run(b, [report(1), report(2), report(3, failed=True), report(4, files_changed=1), report(5)])
    assert tripped_at(decisions) is None  # a success after failures is judged as usual: progress resets


def test_a_crash_loop_is_named_by_its_error_not_as_no_progress() -> None:
    b = Breaker(Thresholds())  # no-progress 3, max-failures 5
    refused = dict(failed=True, error_lines=("Error: connect ECONNREFUSED 127.0.0.1:443",),
                   error_signatures=frozenset({"Error: connect ECONNREFUSED #.#.#.#"}))
    decisions = run(b, [report(n, **refused) for n in range(1, 6)])
    assert tripped_at(decisions) == 5
    assert decisions[-1].trigger == "same-error"  # the same error five times comes first by precedence
    assert "ECONNREFUSED" in decisions[-1].reason and "no file changed" not in decisions[-1].reason


def test_a_restated_blocker_trips_paraphrase_even_while_a_file_churns() -> None:
    b = Breaker(only(paraphrase=0.82))
    wordings = ["I am still blocked on the missing database migration for the users table.",
                "Still blocked: the users table database migration is missing.",
                "Blocked on the missing migration for the users table in the database."]
    decisions = run(b, [report(n + 1, files_changed=1, reply=text, states_blocker=True)
                        for n, text in enumerate(wordings)])
    assert tripped_at(decisions) == 3 and decisions[-1].trigger == "paraphrase"
    assert "restate the same blocker" in decisions[-1].reason


def test_done_all_tests_pass_three_times_with_progress_is_not_a_stall() -> None:
    b = Breaker(only(paraphrase=0.82))
    decisions = run(b, [report(n, files_changed=1, reply="Done, all tests pass.") for n in (1, 2, 3)])
    assert tripped_at(decisions) is None


def test_the_cost_budget_is_final_and_counts_each_call_once() -> None:
    b = Breaker(only(cost_budget=0.05))
    decisions = run(b, [report(n, files_changed=1, cost_usd=0.02) for n in (1, 2, 3)])
    assert tripped_at(decisions) == 3
    assert decisions[-1].trigger == "cost-budget" and decisions[-1].final
    assert "$0.0600 >= $0.0500" in decisions[-1].reason
    assert b.status()["cost_usd"] == pytest.approx(0.06)


def test_the_daily_cost_budget_is_judged_from_the_days_total() -> None:
    b = Breaker(only(daily_cost_budget=1.0))
    b.iteration_started(1, 0.0)
    assert b.observe(report(1, files_changed=1, cost_usd=0.1), 1.0, daily_cost_today=0.95).action == "none"
    b.iteration_started(2, 2.0)
    d = b.observe(report(2, files_changed=1, cost_usd=0.1), 3.0, daily_cost_today=1.05)
    assert d.trigger == "daily-cost-budget" and d.final


def test_a_call_without_a_reported_cost_adds_nothing() -> None:
    b = Breaker(only(cost_budget=0.05))
    assert tripped_at(run(b, [report(n, files_changed=1, cost_usd=None, tokens=None) for n in (1, 2, 3)])) is None
    assert b.status()["cost_usd"] == 0.0 and b.status()["tokens_used"] == 0


# -- destructive (judged on the iteration's net effect, before its report) ----------------------------


def test_a_destructive_open_counts_but_waits_for_a_human_without_a_cooldown() -> None:
    b = Breaker(Thresholds(cooldown_s=60.0, max_opens=3))
    b.iteration_started(1, 0.0)
    d = b.destructive_open("iteration 1 deleted 30 files", 5.0)
    assert (d.action, d.state, d.trigger, d.final, d.cooldown_s) == ("open", State.OPEN, "destructive", False, 0.0)
    assert b.total_opens == 1 and b.seconds_until_half_open(10**6) is None
    assert b.tick(10**6).action == "none" and b.state is State.OPEN  # never a trial by itself
    assert b.observe(report(1, files_changed=30), 6.0).action == "none"  # the cut-off call's report
    assert b.destructive_open("again", 7.0).action == "none"  # already open
    d = b.resume(100.0)
    assert d.action == "half_open" and d.trigger == "destructive"


def test_a_destructive_open_that_is_the_last_allowed_is_final() -> None:
    b = Breaker(Thresholds(max_opens=1))
    b.iteration_started(1, 0.0)
    d = b.destructive_open("iteration 1 deleted 30 files", 5.0)
    assert d.action == "final" and d.final and "final" in d.reason


def test_a_destructive_open_during_a_trial_reopens_it() -> None:
    b = opened()
    b.resume(400.0)
    b.iteration_started(4, 401.0)
    d = b.destructive_open("iteration 4 deleted 40 files", 402.0)
    assert d.action == "open" and d.from_state is State.HALF_OPEN and d.trigger == "destructive"
    assert d.cooldown_s == 0.0 and b.total_opens == 2


def test_a_destructive_open_survives_state_json() -> None:
    b = Breaker(Thresholds())
    b.destructive_open("iteration 1 deleted 30 files", 5.0)
    restored = Breaker.from_dict(Thresholds(), json.loads(json.dumps(b.to_dict())))
    assert restored.trigger == "destructive" and restored.seconds_until_half_open(10**6) is None


def test_a_run_of_failures_is_named_by_its_newest_error_even_when_the_last_call_said_nothing() -> None:
    b = Breaker(only(max_failures=3))
    refused = ("Error: connect ECONNREFUSED 127.0.0.1:443",)
    decisions = run(b, [report(1, failed=True, error_lines=refused), report(2, failed=True),
                        report(3, failed=True)])
    assert decisions[-1].trigger == "consecutive-failures" and "ECONNREFUSED" in decisions[-1].reason
    b = Breaker(only(max_failures=2))
    decisions = run(b, [report(1, failed=True, error_lines=refused), report(2), report(3, failed=True),
                        report(4, failed=True)])
    assert decisions[-1].trigger == "consecutive-failures" and "ECONNREFUSED" not in decisions[-1].reason
