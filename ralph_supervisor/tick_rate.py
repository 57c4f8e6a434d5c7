"""How often the supervisor looks at the tree: fast while a call may be starting, slow when nothing happens.

Every tick samples the process tree, checks the state files and asks the breaker about time, so the idle tick is
most of an idle supervisor's CPU. A loop that has been quiet for a while (no output, no call starting or ending
for QUIET_AFTER seconds) is looked at once a second: anything it prints wakes the tick at once, a call announced
by its shim needs no tick, and a call found by sampling is dated from its process's start, so looking less
often loses nothing but a second on noticing a silent call's start or end.

Pure: the clock (monotonic seconds) comes in as arguments.
"""

from __future__ import annotations

TICK_ACTIVE = 0.1
"""A call may be starting (output and no call yet) or has just started."""
TICK_OUTPUT = 0.25
"""A long call that prints."""
TICK_IDLE = 0.5
"""Nothing printed for 2 s."""
TICK_QUIET = 1.0
"""Nothing printed and no call begun or ended for QUIET_AFTER seconds."""
QUIET_AFTER = 10.0
RECENT = 2.0


def tick_interval(now: float, *, call_started_at: float | None, last_output_at: float, changed_at: float,
                  watchdog: float | None = None) -> float:
    """Seconds until the next tick.

    `call_started_at`: when the running call began (None between calls); `changed_at`: when the running call
    last changed (one began or ended); `watchdog`: systemd's ping interval, which a quiet tick never exceeds.
    """
    since_output = now - last_output_at
    if call_started_at is None:
        if since_output < RECENT:
            return TICK_ACTIVE
    else:
        if now - call_started_at < RECENT:
            return TICK_ACTIVE
        if since_output < RECENT:
            return TICK_OUTPUT
    quiet = min(since_output, now - changed_at) >= QUIET_AFTER
    if quiet and (watchdog is None or watchdog >= TICK_QUIET):
        return TICK_QUIET
    return TICK_IDLE
