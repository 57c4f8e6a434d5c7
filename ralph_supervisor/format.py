"""How a value is written for a person: one function per kind of value, so two views never disagree.

Times of day (local) and timestamps (UTC), durations, dollars, byte sizes, Markdown table cells and code
spans, sparklines. Pure and total: a value that is not what it should be gives a fallback text, never an exception
(every view reads files any process may have damaged).

    >>> duration(3725)
    '1h02m'
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
    from ralph_supervisor.values import parse_time  # values imports this module for its re-exports

    return parse_time(value)


# -- times ---------------------------------------------------------------------------------------------


def time_of_day(value: Any, form: str = "%H:%M", *, otherwise: str | None = None) -> str:
    """`HH:MM` (or `form`) in the local time zone for an ISO-8601 UTC (or Unix) time; `otherwise` (by default
    the text itself) when it is not one."""
    moment = _moment(value)
    if moment is not None:
        try:
            return dt.datetime.fromtimestamp(moment).strftime(form)
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


def duration(seconds: float | None) -> str:
    """`42s`, `3m05s`, `2h07m`, `1d03h`; `?` when unknown."""
    if seconds is None:
        return "?"
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


# -- amounts -------------------------------------------------------------------------------------------


def dollars(value: float, places: int = 2) -> str:
    """`$1,234.56`: what a run or a day cost, as every view prints it (`places` for a few cents: `$0.0123`)."""
    return f"${value:,.{places}f}"


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


def md_cell(text: object, limit: int = 100) -> str:
    """A table cell: one line, no bare pipe, `-` when empty."""
    return one_line(str(text), limit).replace("|", "\\|") or "-"


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
