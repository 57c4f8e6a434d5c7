"""Leave the person some of their quota: stop new work at a usage ceiling, before the limit is hit.

A subscription's usage windows are shared with the person's own work; a loop that runs into the limit leaves
them nothing in the morning. The agents say how full each window is (`agents/usage.py`), so once a call
reports a window at or above `--usage-ceiling` (or, with `--no-overage`, that it is spending paid overage),
the supervisor lets that call finish and then freezes the tree until the window resets, plus
`--limit-wait-margin` and a little jitter (at most a tenth of the margin, none when it is 0), exactly as it
waits out a usage limit (`limit_wait.py`: the wait is a `Wait` of kind `ceiling`). Without a believable reset
time it backs off as a limit wait does: 5 minutes, doubling up to an hour.

Windows at or above `SHOW_AT` are shown (status, watch, the report) before anything is frozen.

Pure: every method takes `now`; the jitter comes from the `random.Random` it is given.

    >>> from ralph_supervisor.agents.usage import UsageReport, UsageWindow
    >>> headroom = UsageHeadroom(ceiling=90, no_overage=False, margin_s=0)
    >>> headroom.observe(UsageReport((UsageWindow("five_hour", 80.0, 2000.0),)), now=1000.0) is None
    True
    >>> headroom.observe(UsageReport((UsageWindow("five_hour", 93.0, 2000.0),)), now=1100.0).until
    2000.0
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ralph_supervisor.agents.usage import UsageReport, UsageWindow
from ralph_supervisor.limit_wait import BACKOFF_FIRST_S, BACKOFF_MAX_S, Wait
from ralph_supervisor.store import iso_utc

SHOW_AT = 75.0
"""A window this full (percent) is shown before anything is frozen."""
JITTER_SHARE = 0.1
"""The jitter after a reset is at most this share of the margin."""


@dataclass(frozen=True)
class CeilingHit:
    """The window (or the overage) that froze the tree, for the `usage_ceiling` event."""

    window: str
    utilization: float | None
    resets_at: float | None


def window_words(window: UsageWindow) -> str:
    """`five_hour at 93 %`."""
    figure = "?" if window.utilization is None else f"{window.utilization:g} %"
    return f"{window.name} at {figure}"


class UsageHeadroom:
    """Keeps the last figure of each window and says when a call's report calls for a freeze."""

    def __init__(self, *, ceiling: float, no_overage: bool, margin_s: float, rng: random.Random | None = None) -> None:
        self.ceiling = ceiling
        self.no_overage = no_overage
        self.margin_s = max(0.0, margin_s)
        self.rng = rng or random.Random()
        self.windows: dict[str, UsageWindow] = {}
        self.hit: CeilingHit | None = None
        """What the last freeze was for."""
        self._backoff_s = BACKOFF_FIRST_S

    @property
    def on(self) -> bool:
        return self.ceiling > 0 or self.no_overage

    def observe(self, report: UsageReport, now: float) -> Wait | None:
        """A call ended with this report of its windows: the freeze to begin now, if any."""
        for window in report.windows:
            self.windows[window.name] = window
        self._forget_reset(now)
        if not self.on or not report.reported:
            return None
        full = [w for w in report.windows if self.ceiling > 0 and w.utilization is not None
                and w.utilization >= self.ceiling]
        if full:
            return self._freeze(full, f"usage ceiling {self.ceiling:g} %", now)
        if self.no_overage and report.overage:
            spent = [w for w in report.windows if w.status == "rejected" or (w.utilization or 0) >= 100]
            if not spent:  # the window that is spent is not named: the fullest one that says when it resets
                known = [w for w in report.windows if w.resets_at is not None]
                spent = sorted(known, key=lambda w: -(w.utilization or 0))[:1]
            return self._freeze(spent, "the call is using paid overage (--no-overage)", now)
        self._backoff_s = BACKOFF_FIRST_S
        return None

    def shown(self, now: float) -> list[UsageWindow]:
        """The windows worth showing: at or above `SHOW_AT`, fullest first, their reset not yet passed."""
        self._forget_reset(now)
        return sorted((w for w in self.windows.values() if w.utilization is not None and w.utilization >= SHOW_AT),
                      key=lambda w: -(w.utilization or 0))

    def _forget_reset(self, now: float) -> None:
        for name, window in list(self.windows.items()):
            if window.resets_at is not None and window.resets_at <= now:
                del self.windows[name]

    def _freeze(self, windows: list[UsageWindow], why: str, now: float) -> Wait:
        """Until the last of these windows resets (all of them must have room again), plus margin and jitter;
        a back-off when none of them says a believable reset time."""
        resets = [w for w in windows if w.resets_at is not None and w.resets_at > now]
        named = ", ".join(window_words(w) for w in windows) or "no window named"
        if resets:
            last = max(resets, key=lambda w: w.resets_at or 0.0)
            assert last.resets_at is not None
            jitter = self.rng.uniform(0.0, self.margin_s * JITTER_SHARE) if self.margin_s > 0 else 0.0
            self.hit = CeilingHit(last.name, last.utilization, last.resets_at)
            self._backoff_s = BACKOFF_FIRST_S
            return Wait(last.resets_at + self.margin_s + jitter, True,
                        f"{why}: {named}; {last.name} resets at {iso_utc(last.resets_at)} "
                        f"(plus {self.margin_s + jitter:.0f} s)", kind="ceiling")
        first = windows[0] if windows else None
        self.hit = CeilingHit(first.name if first else "overage", first.utilization if first else None, None)
        wait = Wait(now + self._backoff_s, False,
                    f"{why}: {named}, and no reset time: backing off {self._backoff_s / 60:.0f} minutes",
                    kind="ceiling")
        self._backoff_s = min(self._backoff_s * 2, BACKOFF_MAX_S)
        return wait
