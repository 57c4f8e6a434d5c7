"""Cutting text to size: reasons, messages and sample lines are bounded and, where they say so, one line.

A leaf module (it imports nothing of the project), so the pure core and the shell share one clipper.

    >>> one_line("no progress\\n  in 3 iterations", 20)
    'no progress in 3 it…'
    >>> clip("x" * 10, 4, ellipsis="")
    'xxxx'
"""

from __future__ import annotations

ELLIPSIS = "…"


def clip(text: str, limit: int, *, ellipsis: str = ELLIPSIS) -> str:
    """`text` cut to at most `limit` characters, the last of them `ellipsis` when it was cut."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(ellipsis))] + ellipsis


def one_line(text: object, limit: int = 160, *, ellipsis: str = ELLIPSIS) -> str:
    """Whitespace (newlines included) collapsed to single spaces, then clipped: reasons are one line."""
    return clip(" ".join(str(text).split()), limit, ellipsis=ellipsis)
