"""How a value is written for a person: one function per kind of value, so two views never disagree.

Times of day (local) and timestamps (UTC), durations, dollars and tokens (alone and against a budget), byte
sizes, Markdown table cells and code spans, sparklines. Pure and total: a value that is not what it should be gives a fallback text, never an exception
(every view reads files any process may have damaged).

    >>> duration(3725)
    '1h02m'
    >>> dollars(1234.5), dollars_share(1.2, 5.0), tokens(12_345)
    ('$1,234.50', '$1.20 of $5.00 (24 %)', '12.3k tok')
    >>> human_size(1_234_567), human_bytes(1_234_567)
    ('1.2 MB', '1.2 MiB')
    >>> md_cell("a | b")
    'a \\\\| b'
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from ralph_supervisor.text import one_line


def _moment(value: Any) -> float | None:
    from ralph_supervisor.values import parse_time

    return parse_time(value)


# -- times ---------------------------------------------------------------------------------------------


def time_of_day(value: Any, form: str = "%H:%M", *, otherwise: str | None = None, weekday: bool = False) -> str:
    """`HH:MM` (or `form`) in the local time zone for an ISO-8601 UTC (or Unix) time; `otherwise` (by default
    the text itself) when it is not one. `weekday`: `Wed HH:MM` when it is not today (a wait's end)."""
    moment = _moment(value)
    if moment is not None:
        try:
            when = dt.datetime.fromtimestamp(moment)
            return when.strftime(form if not weekday or when.date() == dt.date.today() else "%a " + form)
        except (OverflowError, OSError, ValueError):
            pass
    return str(value) if otherwise is None else otherwise


def utc_time(t: float | None, form: str = "%Y-%m-%d %H:%M:%S UTC", *, otherwise: str = "?") -> str:
    """`2026-12-01 17:10:23 UTC` (or `form`: `%H:%M:%S` for a table's column) for a Unix time, or `otherwise`."""
    if t is None:
        return otherwise
    try:
        return dt.datetime.fromtimestamp(t, tz=dt.timezone.utc).strftime(form)
    except (OverflowError, OSError, ValueError):
        return otherwise


def utc_clock(t: float | None) -> str:
    """`17:10 UTC`, or `?`: a moment of today's story (a limit's reset, an outage's start) in the report."""
    return utc_time(t, "%H:%M UTC")


def duration(seconds: float | None, style: str = "short") -> str:
    """`42s`, `3m05s`, `2h07m`, `1d03h`; `?` when unknown. `style`: "tenths" keeps a tenth of a second under a
    minute (`4.2s`: an iteration in a table), "left" is a countdown's clock rounded up, so it reads 0:00:00
    only when the wait is over (`2:59:12`, `2d 3:00:00`)."""
    if seconds is None:
        return "?"
    if style == "left":
        s = max(0, int(seconds + 0.999))
        days, s = divmod(s, 86400)
        return (f"{days}d " if days else "") + f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
    if style == "tenths" and seconds < 60:
        return f"{seconds:.1f}s"
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


# -- amounts -------------------------------------------------------------------------------------------


def dollars(value: float | None, places: int = 2, *, small: bool = False, brief: bool = False) -> str:
    """`$1,234.56`: what a run or a day cost, as every view prints it; `$?` when no call reported a cost.
    `places`: more digits where a few cents matter (`status`: `$0.0123`); `small`: 4 places below ten cents
    only (a budget's reason: `$0.0600 >= $0.0500`); `brief`: no cents from $100 up (a terminal line: `$1,234`)."""
    if value is None:
        return "$?"
    if small and 0 < abs(value) < 0.1:
        places = 4
    if brief and abs(value) >= 100:
        places = 0
    return f"${value:,.{places}f}"


def dollars_share(used: float | None, budget: float) -> str:
    """`$1.20 of $5.00 (24 %)`, or the amount alone without a budget; None: no call reported a cost (then
    what budget there is, is said)."""
    if used is None:
        return "not reported by the agent" + (f" (budget {dollars(budget)})" if budget > 0 else "")
    if budget > 0:
        return f"{dollars(used)} of {dollars(budget)} ({100.0 * used / budget:.0f} %)"
    return dollars(used)


def share(used: float, budget: float) -> str:
    """`7,200 of 100,000 (7 %)`, or the amount alone without a budget (tokens, iterations)."""
    return f"{used:,.0f} of {budget:,.0f} ({100.0 * used / budget:.0f} %)" if budget > 0 else f"{used:,.0f}"


def tokens(n: int | None) -> str:
    """`980 tok`, `12.3k tok`, `1.2M tok`; `? tok` when the agent reported none."""
    if n is None:
        return "? tok"
    if n < 1000:
        return f"{n} tok"
    if n < 999_950:
        return f"{n / 1000:.1f}k tok"
    return f"{n / 1_000_000:.1f}M tok"


def human_bytes(n: int) -> str:
    """Binary units (memory, files read): `512 B`, `1.2 MiB`."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def human_size(n: int) -> str:
    """Decimal units, like the sizes the options take (`--snapshot-budget 2GB`): 1234567 -> `1.2 MB`."""
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


# -- Markdown ------------------------------------------------------------------------------------------


def md_cell(text: object, limit: int = 100, *, empty: str = "-") -> str:
    """A table cell: one line, no bare pipe, `empty` when empty (a blank cell where blank says "none")."""
    return one_line(str(text), limit).replace("|", "\\|") or empty


def md_code(text: str, limit: int = 200) -> str:
    """A code span: one line, no backtick inside, `(empty)` when empty."""
    flat = one_line(text, limit).replace("`", "'")
    return f"`{flat}`" if flat else "`(empty)`"


# -- series --------------------------------------------------------------------------------------------

SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int = 60) -> str:
    """Values as block characters, at most `width` wide (each character the largest of its share)."""
    if not values:
        return ""
    width = max(1, width)
    if len(values) > width:
        size = len(values) / width
        values = [max(values[int(i * size):max(int(i * size) + 1, int((i + 1) * size))]) for i in range(width)]
    top = max(values)
    if top <= 0:
        return SPARK[0] * len(values)
    return "".join(SPARK[0] if v <= 0 else SPARK[min(len(SPARK) - 1, 1 + int((v / top) * (len(SPARK) - 2)))]
                   for v in values)
