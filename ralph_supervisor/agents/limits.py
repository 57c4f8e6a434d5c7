"""When a usage limit resets, read from what the agent said: a pure function of the text, `now` and a timezone.

The supervisor freezes the tree until the reset (plus a margin) instead of letting the loop burn calls against
a closed door, so a wrong answer costs either a long needless wait or a useless retry. Hence: only phrases
that say *when* (after "resets", "try again", "retry", a `Retry-After` header, an epoch after Claude's
`usage limit reached|`), the first one in the text wins, and anything unreadable is None, never an exception.

Where the phrases come from (each is a test case in tests/test_agents_limits.py):
- Claude Code: `Claude AI usage limit reached|1767225600` (older CLIs; epoch seconds), `5-hour limit reached ∙
  resets 3pm`, `resets 5pm (Europe/Berlin)`, and the stream-json `rate_limit_event` whose `rate_limit_info`
  has `status: "rejected"` and `resetsAt` (epoch seconds; field names as in anthropics/claude-agent-sdk-python
  `types.py`).
- OpenAI Codex: `You've hit your usage limit. ... Try again at 3:28 PM.` on the same local day, otherwise
  `Try again at Aug 18th, 2026 3:28 PM.` (openai/codex `codex-rs/core/src/error.rs`, `format_retry_timestamp`:
  local time, no zone), and reports of `try again in 3 days 6 hours 57 minutes`.
- Gemini CLI: `Please retry in 34.07s`, `Suggested retry after 60s.` (google-gemini/gemini-cli
  `packages/core/src/utils/googleQuotaErrors.ts`) and `Your quota will reset after 2h36m24s.`
- HTTP: `Retry-After: 120` or an HTTP date (RFC 9110 section 10.2.3), as opencode passes response headers on.

Usage:

    >>> from datetime import timezone
    >>> reset_time("Claude AI usage limit reached|1767225600", now=1767220000.0)
    1767225600.0
    >>> reset_time("Please retry in 30s", now=1000.0)
    1030.0
    >>> reset_time("resets 3pm (UTC)", now=1767268800.0)  # 2026-01-01 12:00 UTC
    1767279600.0
"""

from __future__ import annotations

import math
import re
from datetime import date, datetime, time as day_time, timedelta, timezone, tzinfo
from email.utils import parsedate_to_datetime
from typing import Any
from zoneinfo import ZoneInfo

__all__ = ["reset_from_epoch", "reset_from_event", "reset_time"]

MAX_AHEAD_S = 40 * 86400
"""A reset further ahead than this is not believed (monthly plans reset within a month)."""
MAX_BEHIND_S = 86400
"""A reset this far in the past is a stale message, not this call's limit."""
PAST_GRACE_S = 3600
"""A time of day up to this long ago is today's (the CLI rounds to the hour); earlier ones are tomorrow's."""
MAX_TEXT = 20_000
"""Only this much of a message is searched (the limit line is short; a 2 MB reply is not)."""

_MONTHS = {name: number for number, names in enumerate(
    [("jan", "january"), ("feb", "february"), ("mar", "march"), ("apr", "april"), ("may",), ("jun", "june"),
     ("jul", "july"), ("aug", "august"), ("sep", "sept", "september"), ("oct", "october"), ("nov", "november"),
     ("dec", "december")], start=1) for name in names}
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}

_EPOCH_AFTER_LIMIT = re.compile(r"usage limit reached\s*\|\s*(?P<epoch>\d{9,13})(?!\d)", re.IGNORECASE)
_EPOCH_FIELD = re.compile(r"\bresets_?at\W{0,3}(?P<epoch>\d{9,13})(?!\d)", re.IGNORECASE)
_RETRY_AFTER = re.compile(r"\bretry-after\s*[:=]\s*\"?(?P<value>\d+(?:\.\d+)?(?![\d.])|[A-Z][a-z]{2}, [^\r\n\"]{10,40}GMT)",
                          re.IGNORECASE)
# "in 3 days 6 hours 57 minutes", "after 2h36m24s", "in 34.07s", "in 900ms"
_DURATION_PART = r"\d+(?:\.\d+)?\s*(?:ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?|d|days?)(?![a-z])"
_DURATION = re.compile(
    r"\b(?:try(?:ing)? again|retry(?:ing)?|resets?|reset(?:s|ting)?|available(?: again)?|wait)\s+(?:in|after)\s+"
    r"(?P<duration>" + _DURATION_PART + r"(?:(?:\s*,\s*|\s+and\s+|\s*)" + _DURATION_PART + r")*)",
    re.IGNORECASE,
)
_DURATION_PIECE = re.compile(r"(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>ms|milli|[smhd])", re.IGNORECASE)
# A trigger word, then a date and/or a time: "resets 3pm (Europe/Berlin)", "try again at 3:28 PM",
# "Try again at Aug 18th, 2026 3:28 PM", "resets at 15:00 UTC", "Try again Aug 18.", "ends on 9/23/2026".
_WHEN = re.compile(
    r"\b(?:resets?|reset(?:s|ting)?|try(?:ing)? again|retry|available(?: again)?|until|(?:ends|renews)\s+on)"
    r"(?:\s+(?:at|on|after|from))?\s*[:,]?\s*"
    r"(?:(?P<iso>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)"
    r"|(?:" + _MONTH + r"\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?(?:,?\s+(?P<year>\d{4}))?"
    r"|(?P<num_month>\d{1,2})/(?P<num_day>\d{1,2})/(?P<num_year>\d{4}))?"
    r"(?:,?\s*(?:at\s+)?(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?(?::(?P<second>\d{2}))?\s*"
    r"(?P<ampm>[ap])?(?(ampm)\.?\s?m\b\.?))?)"
    r"(?:\s*\(?(?P<zone>UTC|GMT|Z\b|[A-Z][A-Za-z_]+/[A-Za-z_+-]+(?:/[A-Za-z_+-]+)?)\)?)?",
    re.IGNORECASE,
)


def reset_from_epoch(value: Any, now: float) -> float | None:
    """An epoch in seconds (or milliseconds, 13 digits) as a reset time, when it is a plausible one."""
    if isinstance(value, bool):
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(seconds) or seconds <= 0:
        return None
    if seconds > 1e11:  # milliseconds
        seconds /= 1000.0
    return _plausible(seconds, now)


def reset_from_event(event: Any, now: float) -> float | None:
    """Claude's stream-json `rate_limit_event` with `rate_limit_info.status: "rejected"`: its `resetsAt`."""
    if not isinstance(event, dict) or event.get("type") != "rate_limit_event":
        return None
    info = event.get("rate_limit_info")
    if not isinstance(info, dict) or str(info.get("status", "")).lower() != "rejected":
        return None
    return reset_from_epoch(info.get("resetsAt"), now)


def reset_time(text: Any, now: float, tz: tzinfo | None = None) -> float | None:
    """The reset time (epoch seconds) a limit message states, or None.

    `tz` is the zone of a time the text gives without one (the agent prints its machine's local time); None
    means the local zone of this machine. Never raises, whatever `text` holds.
    """
    if not isinstance(text, str) or not text or not math.isfinite(now):
        return None
    text = text[:MAX_TEXT]
    try:
        return _first_reset(text, now, tz)
    except (ValueError, OverflowError, ArithmeticError, KeyError, OSError):
        return None


def _first_reset(text: str, now: float, tz: tzinfo | None) -> float | None:
    found: list[tuple[int, float]] = []
    for pattern, read in ((_EPOCH_AFTER_LIMIT, _read_epoch), (_EPOCH_FIELD, _read_epoch),
                          (_RETRY_AFTER, _read_retry_after), (_DURATION, _read_duration), (_WHEN, _read_when)):
        for match in pattern.finditer(text):
            value = read(match, now, tz)
            if value is not None:
                found.append((match.start(), value))
                break
    return min(found)[1] if found else None


def _plausible(seconds: float, now: float) -> float | None:
    return seconds if now - MAX_BEHIND_S <= seconds <= now + MAX_AHEAD_S else None


def _read_epoch(match: re.Match[str], now: float, tz: tzinfo | None) -> float | None:
    return reset_from_epoch(match.group("epoch"), now)


def _read_retry_after(match: re.Match[str], now: float, tz: tzinfo | None) -> float | None:
    value = match.group("value")
    if value[0].isdigit():
        return _plausible(now + float(value), now)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return _plausible(when.timestamp(), now)


def _read_duration(match: re.Match[str], now: float, tz: tzinfo | None) -> float | None:
    total = 0.0
    for piece in _DURATION_PIECE.finditer(match.group("duration")):
        unit = piece.group("unit").lower()
        total += float(piece.group("n")) * _UNIT_SECONDS["ms" if unit in ("ms", "milli") else unit]
    return _plausible(now + total, now) if total > 0 else None


def _zone(name: str | None, tz: tzinfo | None) -> tzinfo | None:
    if not name:
        return tz
    if name.upper() in ("UTC", "GMT", "Z"):
        return timezone.utc
    try:
        return ZoneInfo(name)
    except (ValueError, KeyError, OSError):  # unknown or malformed zone name: fall back to the default
        return tz


def _read_when(match: re.Match[str], now: float, tz: tzinfo | None) -> float | None:
    g = match.groupdict()
    zone = _zone(g["zone"], tz)
    if g["iso"]:
        when = datetime.fromisoformat(g["iso"].replace("Z", "+00:00").replace(" ", "T"))
        if when.tzinfo is None:
            return _plausible(_stamp(when, zone), now)
        return _plausible(when.timestamp(), now)
    clock = _clock(g)
    day = _date(g, now, zone)
    if clock is None and day is None:
        return None
    local_now = _local(now, zone)
    if day is None:  # a time of day: today's, unless it is well past (then tomorrow's)
        candidate = datetime.combine(local_now.date(), clock)
        if _stamp(candidate, zone) < now - PAST_GRACE_S:
            candidate += timedelta(days=1)
        return _plausible(_stamp(candidate, zone), now)
    return _plausible(_stamp(datetime.combine(day, clock or day_time(0, 0)), zone), now)


def _clock(g: dict[str, str | None]) -> day_time | None:
    if g["hour"] is None:
        return None
    hour, minute, second = int(g["hour"]), int(g["minute"] or 0), int(g["second"] or 0)
    ampm = (g["ampm"] or "").lower()
    if ampm:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if ampm == "p" else 0)
    elif g["minute"] is None:
        return None  # a bare number is no time of day
    if hour > 23 or minute > 59 or second > 59:
        return None
    return day_time(hour, minute, second)


def _date(g: dict[str, str | None], now: float, zone: tzinfo | None) -> date | None:
    if g["month"]:
        month, day, year = _MONTHS[g["month"].lower()], int(g["day"] or 0), g["year"]
    elif g["num_month"]:
        month, day, year = int(g["num_month"]), int(g["num_day"] or 0), g["num_year"]
    else:
        return None
    today = _local(now, zone).date()
    if year:
        return date(int(year), month, day)
    guess = date(today.year, month, day)
    return guess if guess >= today - timedelta(days=1) else date(today.year + 1, month, day)


def _local(now: float, zone: tzinfo | None) -> datetime:
    """`now` as a wall-clock datetime in `zone` (naive local time when `zone` is None)."""
    return datetime.fromtimestamp(now, zone) if zone is not None else datetime.fromtimestamp(now)


def _stamp(wall: datetime, zone: tzinfo | None) -> float:
    """A naive wall-clock datetime in `zone` (the machine's local zone when None) as epoch seconds."""
    if zone is None:
        return wall.replace(tzinfo=None).timestamp()  # naive: the C library applies the local zone and its DST
    return wall.replace(tzinfo=zone).timestamp()
