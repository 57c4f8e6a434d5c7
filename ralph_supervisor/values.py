"""Numbers, text and times read out of records we did not write in this process, or that may be damaged.

`watch` and `report` read the state folder's JSON lines while a supervisor may be writing them, and
after crashes, full disks and hand edits: every helper here returns a usable value or a marker
(None, 0, "") and never raises.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from typing import Any

from ralph_supervisor.text import one_line


def as_int(value: Any) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value == value and abs(value) < 1e18:
        return int(value)
    if isinstance(value, str):
        try:
            return int(float(value))
        except (ValueError, OverflowError):  # "nan", "inf"
            return 0
    if isinstance(value, (list, tuple, dict)):
        return len(value)  # `errors` may be the error lines themselves
    return 0


def as_opt_int(value: Any) -> int | None:
    """A number when there is one; None (shown as `?`) for missing or non-numeric values."""
    if value is None or isinstance(value, (list, tuple, dict)):
        return None
    if isinstance(value, str):
        try:
            return int(float(value))
        except (ValueError, OverflowError):  # "nan", "inf"
            return None
    return as_int(value)


def as_float(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        result = float(value)
    except (TypeError, ValueError):
        return None
    return result if result == result and abs(result) != float("inf") else None


def as_text(value: Any, limit: int = 200) -> str:
    """One line of at most `limit` characters; "" for a missing value."""
    return "" if value is None else one_line(value, limit)


def parse_json_lines(lines: Iterable[bytes]) -> tuple[list[dict[str, Any]], int]:
    """JSON objects of the lines, and how many non-blank lines were not one."""
    records: list[dict[str, Any]] = []
    bad = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            bad += 1
            continue
        if isinstance(value, dict):
            records.append(value)
        else:
            bad += 1
    return records, bad


def parse_time(value: Any) -> float | None:
    """Epoch seconds from an epoch number or an ISO-8601 string (`Z` or offset; naive means UTC)."""
    number = as_float(value) if not isinstance(value, str) else None
    if number is not None:
        return number
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return moment.timestamp()
