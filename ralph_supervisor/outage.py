"""An API outage is a wait, not a failure: when it starts and ends, and when it has lasted too long.

When the agent's API is out of reach the loop can do nothing about it: a five-minute network blip must not
count as failed calls and stop the night for good, and an agent that waits for the network for ever must not
be left spinning unseen. So the agent's own retry reports (`agents/outages.py`), seen live or at a call's end,
put the loop in an outage: counted toward no rule, the breaker stays CLOSED, one notice when it starts and
one when it ends. The next call (or event) that reaches the API ends it. An outage that has lasted longer than
`--outage-max` freezes the tree for a back-off (5 minutes, doubling up to an hour, as a limit wait without a
reset time does), after which the loop tries again; when it is still out after three back-offs, the open is
final with trigger `outage`.

Pure: every method takes `now`.

    >>> outage = Outage(max_s=60.0)
    >>> outage.retry("api_retry 1/10: unknown", now=1000.0)
    True
    >>> outage.due(now=1030.0) is None
    True
    >>> outage.due(now=1061.0).kind
    'outage'
"""

from __future__ import annotations

from dataclasses import dataclass

from ralph_supervisor.limit_wait import BACKOFF_FIRST_S, BACKOFF_MAX_S, Wait
from ralph_supervisor.store import iso_utc

BACKOFFS = 3
"""Back-offs after `--outage-max` before the open is final."""


@dataclass(frozen=True)
class Final:
    """The outage outlasted its back-offs: open for good, with this reason."""

    reason: str


class Outage:
    """The current outage, if any: since when, what the agent last said, how many back-offs it has had."""

    def __init__(self, max_s: float) -> None:
        self.max_s = max_s
        self.since: float | None = None
        self.message = ""
        self.backoffs = 0
        self._armed = False
        """New evidence since the last back-off began: a freeze may be due (never twice on the same report)."""
        self._backoff_s = BACKOFF_FIRST_S

    @property
    def on(self) -> bool:
        return self.since is not None

    def retry(self, message: str, now: float) -> bool:
        """The agent reported that it cannot reach its API; True when this starts an outage."""
        started = self.since is None
        if started:
            self.since = now
        self.message = message or self.message or "the API is unreachable"
        self._armed = True
        return started

    def reached(self) -> float | None:
        """The API answered: the outage (if any) is over; since when it had lasted."""
        since, self.since = self.since, None
        self.message, self.backoffs, self._armed, self._backoff_s = "", 0, False, BACKOFF_FIRST_S
        return since

    def due(self, now: float) -> Wait | Final | None:
        """What an outage longer than `max_s` calls for now: a back-off freeze, or (after `BACKOFFS` of them)
        the final open; None while it is shorter, or until the agent reports again after a back-off."""
        if self.since is None or not self._armed or now - self.since < self.max_s:
            return None
        self._armed = False
        lasted = f"the agent's API has been out of reach since {iso_utc(self.since)} ({(now - self.since) / 60:.0f} min)"
        if self.backoffs >= BACKOFFS:
            return Final(f"{lasted}, through {BACKOFFS} back-offs; last said: {self.message}")
        self.backoffs += 1
        wait = Wait(now + self._backoff_s, False,
                    f"{lasted}, longer than --outage-max; backing off {self._backoff_s / 60:.0f} minutes "
                    f"({self.backoffs} of {BACKOFFS}); last said: {self.message}", kind="outage")
        self._backoff_s = min(self._backoff_s * 2, BACKOFF_MAX_S)
        return wait
