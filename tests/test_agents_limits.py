"""When a usage limit resets, read from the agent's words: a pure function of the text, `now` and a timezone."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ralph_supervisor.agents.limits import MAX_AHEAD_S, reset_from_epoch, reset_from_event, reset_time

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 1, 5, 10, 0, tzinfo=UTC).timestamp()


def at(*args: int, tz: timezone | ZoneInfo = UTC) -> float:
    return datetime(*args, tzinfo=tz).timestamp()


@pytest.mark.parametrize(("text", "expected"), [
    # Claude Code
    ("Claude AI usage limit reached|1767621600", 1767621600.0),
    ("Claude AI usage limit reached|1767621600000", 1767621600.0),  # milliseconds
    ("5-hour limit reached ∙ resets 3pm", at(2026, 1, 5, 15, 0)),
    ("You're out of extra usage · resets 5pm (Europe/Berlin)", at(2026, 1, 5, 17, 0, tz=BERLIN)),
    ("You've hit your session limit · resets 9am (Europe/Berlin)", at(2026, 1, 6, 9, 0, tz=BERLIN)),  # tomorrow
    ("resets at 15:00 UTC", at(2026, 1, 5, 15, 0)),
    ('{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1767621600}}', 1767621600.0),
    # Codex (codex-rs/core/src/error.rs)
    ("You've hit your usage limit. Visit https://chatgpt.com/codex/settings/usage to purchase more credits or try "
     "again at 3:28 PM.", at(2026, 1, 5, 15, 28)),
    ("You've hit your usage limit. Try again at Jan 7th, 2026 12:30 AM.", at(2026, 1, 7, 0, 30)),
    ("You've hit your usage limit. Try again Jan 18.", at(2026, 1, 18, 0, 0)),
    ("You've hit your usage limit. To get more access now, send a request to your admin or try again in 3 days "
     "6 hours 57 minutes.", NOW + 3 * 86400 + 6 * 3600 + 57 * 60),
    ("Usage will reset when your monthly cycle ends on 1/23/2026.", at(2026, 1, 23, 0, 0)),
    # Gemini CLI (googleQuotaErrors.ts)
    ("You have exhausted your capacity on this model. Your quota will reset after 2h36m24s.", NOW + 9384),
    ("Quota exceeded for quota metric 'Generate Content API requests per minute'. Please retry in 34.07s", NOW + 34.07),
    ("RATE_LIMIT_EXCEEDED\nSuggested retry after 60s.", NOW + 60),
    ("Please retry in 900ms", NOW + 0.9),
    # HTTP
    ("retry-after: 120", NOW + 120),
    ("Retry-After: Mon, 05 Jan 2026 11:00:00 GMT", at(2026, 1, 5, 11, 0)),
    ("resets 2026-01-05T12:30:00Z", at(2026, 1, 5, 12, 30)),
])
def test_stated_reset_times_are_read(text: str, expected: float) -> None:
    assert reset_time(text, NOW, UTC) == pytest.approx(expected)


@pytest.mark.parametrize("text", [
    "You've hit your usage limit. Try again later.",
    "You have exhausted your daily quota on this model.",
    "Rate limit exceeded",
    "resets 3 files",  # a number is no time of day
    "retry 3 times",
    "Claude AI usage limit reached|1234",  # no epoch
    "Claude AI usage limit reached|1600000000",  # years ago: a stale message
    "try again in 90 days",  # further than any plan's reset: not believed
    "resets 25:00",
    "resets at 13pm",
    "Try again Feb 30.",
    "",
])
def test_no_time_or_an_implausible_one_is_none(text: str) -> None:
    assert reset_time(text, NOW, UTC) is None


def test_a_time_of_day_is_today_s_unless_well_past_then_tomorrow_s() -> None:
    assert reset_time("resets 9am", NOW, UTC) == at(2026, 1, 5, 9, 0)  # an hour ago: the CLI rounds to the hour
    assert reset_time("resets 8am", NOW, UTC) == at(2026, 1, 6, 8, 0)
    assert reset_time("resets 2am", at(2026, 1, 5, 23, 0), UTC) == at(2026, 1, 6, 2, 0)  # past midnight


def test_a_time_without_zone_is_in_the_given_zone_and_a_zone_in_the_text_wins() -> None:
    assert reset_time("try again at 3:28 PM", NOW, BERLIN) == at(2026, 1, 5, 15, 28, tz=BERLIN)
    assert reset_time("resets 3pm (UTC)", NOW, BERLIN) == at(2026, 1, 5, 15, 0)
    assert reset_time("resets 3pm (Mars/Olympus)", NOW, BERLIN) == at(2026, 1, 5, 15, 0, tz=BERLIN)  # unknown zone


def test_without_a_zone_the_machine_s_local_time_is_meant() -> None:
    local = datetime.fromtimestamp(NOW).replace(hour=23, minute=59, second=0, microsecond=0)
    assert reset_time("resets at 11:59 PM", NOW) == local.timestamp()


def test_the_first_stated_time_wins() -> None:
    text = "Retry-After: 60\nYou've hit your usage limit. Try again at 3:28 PM."
    assert reset_time(text, NOW, UTC) == NOW + 60
    assert reset_time("Try again at 3:28 PM. Retry-After: 60", NOW, UTC) == at(2026, 1, 5, 15, 28)


def test_epochs_and_claude_s_rejected_rate_limit_event() -> None:
    assert reset_from_epoch(1767621600, NOW) == 1767621600.0
    assert reset_from_epoch("1767621600", NOW) == 1767621600.0
    for bad in (None, True, "soon", float("nan"), float("inf"), -5, 0, NOW + MAX_AHEAD_S + 1, [1]):
        assert reset_from_epoch(bad, NOW) is None
    rejected = {"type": "rate_limit_event", "rate_limit_info": {"status": "rejected", "resetsAt": 1767621600}}
    allowed = {"type": "rate_limit_event", "rate_limit_info": {"status": "allowed_warning", "resetsAt": 1767621600}}
    assert reset_from_event(rejected, NOW) == 1767621600.0
    assert reset_from_event(allowed, NOW) is None
    assert reset_from_event({"type": "rate_limit_event", "rate_limit_info": []}, NOW) is None


@settings(max_examples=400, deadline=None)
@given(text=st.text(max_size=200) | st.builds(
    lambda words, n: " ".join(words) + f" {n}",
    st.lists(st.sampled_from(["resets", "try again", "at", "in", "after", "retry", "Retry-After:", "Aug", "18th,",
                              "2026", "3:28", "PM", "pm", "(Europe/Berlin)", "(Nowhere/Land)", "UTC", "days", "h",
                              "usage limit reached|", "13/45/2026", "ms", "9999", "on", "ends", "resetsAt\":"]),
             max_size=8),
    st.integers(-10, 10**14)),
       now=st.floats(allow_nan=True, allow_infinity=True) | st.floats(0, 4e9),
       zone=st.sampled_from([None, UTC, BERLIN]))
@example(text="resets 3pm", now=float("nan"), zone=None)
@example(text="Try again at Dec 31st, 9999 11:59 PM", now=253402300000.0, zone=UTC)
@example(text="retry in " + "9" * 400 + "s", now=NOW, zone=UTC)
@example(text="Retry-After: Mon, 99 Foo 2026 99:99:99 GMT", now=NOW, zone=UTC)
def test_reset_time_never_raises_and_gives_a_plausible_time_or_none(text: str, now: float, zone: object) -> None:
    value = reset_time(text, now, zone)  # type: ignore[arg-type]
    assert value is None or (isinstance(value, float) and now - 86400 <= value <= now + MAX_AHEAD_S)
