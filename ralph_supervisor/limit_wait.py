"""Usage limits wait, they do not spin: when to freeze the tree for an agent's usage limit, and until when.

A limited call is neutral for the breaker (it stays CLOSED, no rule counts it, `--max-opens` is untouched),
but a loop that goes on calling a rejected agent only burns calls until the limit resets. So the supervisor
freezes the tree: until the reset time the agent gave plus a margin, or, when it gave none, after three
limited calls in a row for 5 minutes, doubling up to an hour. A reset time in the past or more than 7 days
ahead is not believed (the back-off applies, and the caller says so once).

Pure: every method takes `now`.

    >>> waits = LimitWait(margin_s=60)
    >>> wait = waits.observe(limited=True, resets_at=1_000_600.0, now=1_000_000.0)
    >>> wait.until, wait.known_reset
    (1000660.0, True)
"""

from __future__ import annotations

from dataclasses import dataclass

from ralph_supervisor.store import iso_utc

BACKOFF_AFTER = 3
"""Limited calls in a row, without a reset time, before the tree is frozen."""
BACKOFF_FIRST_S = 300.0
BACKOFF_MAX_S = 3600.0
HORIZON_S = 7 * 86400.0
"""A reset time further ahead than this is not believed."""


@dataclass(frozen=True)
class Wait:
    """Freeze the tree until `until` (epoch seconds)."""

    until: float
    known_reset: bool
    """The agent said when the limit resets (else: the back-off)."""
    reason: str
    ignored_reset: float | None = None
    """A reset time the agent gave that was not believed (in the past, or too far ahead)."""
    kind: str = "limit"
    """What the tree waits for: `limit` (a usage limit), `ceiling` (`--usage-ceiling`, `--no-overage`:
    `usage_headroom.py`), `outage` (an outage's back-off: `outage.py`). Every kind is waited out the same way."""


class LimitWait:
    """Counts limited calls in a row and says when a wait begins. A call that is not limited starts afresh."""

    def __init__(self, margin_s: float = 60.0) -> None:
        self.margin_s = max(0.0, margin_s)
        self.in_a_row = 0
        self._backoff_s = BACKOFF_FIRST_S

    def observe(self, *, limited: bool, resets_at: float | None, now: float) -> Wait | None:
        """A call ended; the wait to begin now, if any."""
        if not limited:
            self.in_a_row = 0
            self._backoff_s = BACKOFF_FIRST_S
            return None
        self.in_a_row += 1
        ignored = None
        if resets_at is not None:
            if now < resets_at <= now + HORIZON_S:
                return Wait(resets_at + self.margin_s, True,
                            f"the agent's usage limit resets at {iso_utc(resets_at)} (plus {self.margin_s:.0f} s)")
            ignored = resets_at
        if self.in_a_row < BACKOFF_AFTER:
            return None
        wait = Wait(now + self._backoff_s, False,
                    f"{self.in_a_row} limited calls in a row and no reset time: backing off "
                    f"{self._backoff_s / 60:.0f} minutes", ignored)
        self._backoff_s = min(self._backoff_s * 2, BACKOFF_MAX_S)
        return wait
