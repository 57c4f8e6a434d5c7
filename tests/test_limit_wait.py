"""Usage limits wait: until the reset the agent gave (plus the margin), or a doubling back-off."""

from __future__ import annotations

from ralph_supervisor.limit_wait import BACKOFF_MAX_S, HORIZON_S, LimitWait

NOW = 1_800_000_000.0


def test_a_known_reset_time_freezes_until_it_plus_the_margin_at_once() -> None:
    wait = LimitWait(margin_s=60).observe(limited=True, resets_at=NOW + 3600, now=NOW)
    assert wait is not None and wait.known_reset and wait.until == NOW + 3660
    assert "2027-01-15T09:00:00.000Z" in wait.reason


def test_without_a_reset_time_three_limited_calls_in_a_row_back_off_five_minutes_doubling_to_an_hour() -> None:
    waits = LimitWait()
    assert waits.observe(limited=True, resets_at=None, now=NOW) is None
    assert waits.observe(limited=True, resets_at=None, now=NOW) is None
    lengths = [waits.observe(limited=True, resets_at=None, now=NOW).until - NOW for _ in range(6)]  # type: ignore[union-attr]
    assert lengths == [300, 600, 1200, 2400, BACKOFF_MAX_S, BACKOFF_MAX_S]


def test_a_call_that_is_not_limited_starts_afresh() -> None:
    waits = LimitWait()
    for _ in range(4):
        waits.observe(limited=True, resets_at=None, now=NOW)
    assert waits.observe(limited=False, resets_at=None, now=NOW) is None
    assert waits.in_a_row == 0
    assert [waits.observe(limited=True, resets_at=None, now=NOW) is None for _ in range(3)] == [True, True, False]


def test_a_reset_time_in_the_past_or_too_far_ahead_is_not_believed() -> None:
    waits = LimitWait()
    for bad in (NOW - 10, NOW + HORIZON_S + 1):
        waits = LimitWait()
        results = [waits.observe(limited=True, resets_at=bad, now=NOW) for _ in range(3)]
        assert results[:2] == [None, None]
        assert results[2] is not None and not results[2].known_reset and results[2].ignored_reset == bad
