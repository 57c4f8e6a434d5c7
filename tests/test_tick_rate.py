"""How often the supervisor ticks: fast around a call's start, slow once the loop has been quiet a while."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ralph_supervisor.tick_rate import (
    QUIET_AFTER,
    TICK_ACTIVE,
    TICK_IDLE,
    TICK_OUTPUT,
    TICK_QUIET,
    tick_interval,
)

NOW = 1000.0


def test_output_with_no_call_known_is_looked_at_fast() -> None:
    assert tick_interval(NOW, call_started_at=None, last_output_at=NOW - 0.5, changed_at=NOW - 60) == TICK_ACTIVE


def test_a_call_that_just_began_is_looked_at_fast_then_by_its_output() -> None:
    assert tick_interval(NOW, call_started_at=NOW - 1, last_output_at=NOW - 60, changed_at=NOW - 1) == TICK_ACTIVE
    assert tick_interval(NOW, call_started_at=NOW - 30, last_output_at=NOW - 1, changed_at=NOW - 30) == TICK_OUTPUT


def test_a_loop_quiet_for_a_while_is_looked_at_once_a_second() -> None:
    between = tick_interval(NOW, call_started_at=None, last_output_at=NOW - 60, changed_at=NOW - QUIET_AFTER)
    inside = tick_interval(NOW, call_started_at=NOW - 60, last_output_at=NOW - 60, changed_at=NOW - 60)
    assert between == inside == TICK_QUIET


def test_a_call_that_ended_or_printed_lately_keeps_the_half_second_tick() -> None:
    ended = tick_interval(NOW, call_started_at=None, last_output_at=NOW - 60, changed_at=NOW - 3)
    printed = tick_interval(NOW, call_started_at=NOW - 60, last_output_at=NOW - 5, changed_at=NOW - 60)
    assert ended == printed == TICK_IDLE


def test_a_systemd_watchdog_shorter_than_the_quiet_tick_keeps_the_idle_tick() -> None:
    assert tick_interval(NOW, call_started_at=None, last_output_at=NOW - 60, changed_at=NOW - 60,
                         watchdog=0.5) == TICK_IDLE
    assert tick_interval(NOW, call_started_at=None, last_output_at=NOW - 60, changed_at=NOW - 60,
                         watchdog=30.0) == TICK_QUIET


@settings(max_examples=300, deadline=None)
@given(st.floats(0, 1e4), st.one_of(st.none(), st.floats(0, 1e4)), st.floats(0, 1e4),
       st.one_of(st.none(), st.floats(0.01, 100)))
def test_the_interval_is_always_one_of_the_ticks_and_never_quiet_right_after_output(
        ago_output: float, ago_call: float | None, ago_change: float, watchdog: float | None) -> None:
    now = 20_000.0
    interval = tick_interval(now, call_started_at=None if ago_call is None else now - ago_call,
                             last_output_at=now - ago_output, changed_at=now - ago_change, watchdog=watchdog)
    assert interval in (TICK_ACTIVE, TICK_OUTPUT, TICK_IDLE, TICK_QUIET)
    if ago_output < QUIET_AFTER or ago_change < QUIET_AFTER:
        assert interval != TICK_QUIET
