"""The timeline of the chosen runs: opens, trials, closes, pauses, limit waits, outages, restarts and exits as
marks at their place on the iteration axis, the breaker's states and the waits as bands behind them, and the
waits the loop cannot avoid in words.

Pure: rows, the breaker's history and the runs' events in, `Mark` and `Band` values out; iteration k covers
[k - 0.5, k + 0.5] on the axis, so the plot and the Markdown put a moment in the same place.

    marks, bands = timeline_marks(rows, history, runs, now)
    marks[0].text   # "breaker opened (no-progress): 3 iterations without progress"
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from ralph_supervisor import events as ev
from ralph_supervisor.event_fields import (
    ChildExited,
    LimitWaitStarted,
    OutageEnded,
    OutageStarted,
    UsageHigh,
    UsageWindow,
)
from ralph_supervisor.files.history_jsonl import Transition
from ralph_supervisor.format import duration, human_bytes, utc_clock
from ralph_supervisor.report.rows import IterationRow
from ralph_supervisor.report.runs import RunInfo, record_time
from ralph_supervisor.values import as_float, as_int

@dataclass(frozen=True)
class Mark:
    """Something that happened between (or during) iterations: `x` is its place on the timeline."""

    kind: str
    """open, final, pause, trial, close, reset, limit_wait, restart, run_start, exit."""
    x: float
    at: float | None
    iteration: int | None
    text: str


@dataclass(frozen=True)
class Band:
    """A stretch of the timeline in one breaker state (OPEN, HALF_OPEN, PAUSED by hand) or a LIMIT wait."""

    kind: str
    x0: float
    x1: float
    started_at: float | None
    ended_at: float | None
    text: str


class _Axis:
    """Maps a moment to a place on the iteration axis: iteration k covers [k - 0.5, k + 0.5]."""

    def __init__(self, rows: Sequence[IterationRow]) -> None:
        self.rows = [r for r in rows if r.started_at is not None]
        self.starts = [r.started_at or 0.0 for r in self.rows]
        self.end = len(rows) - 0.5
        self.tail = len(rows) + 0.2
        """Where a state that still holds at the end is drawn to: a little past the last iteration."""

    def x(self, t: float | None, iteration: int | None = None, rows: Sequence[IterationRow] = ()) -> float:
        if t is None or not self.rows:
            for row in rows:
                if row.number == iteration:
                    return row.position + 0.5
            return self.end
        index = bisect.bisect_right(self.starts, t)
        if index == 0:
            return -0.5
        row = self.rows[index - 1]
        if row.ended_at is not None and t < row.ended_at and row.ended_at > (row.started_at or 0):
            share = (t - (row.started_at or 0.0)) / (row.ended_at - (row.started_at or 0.0))
            return row.position - 0.5 + max(0.0, min(1.0, share))
        return row.position + 0.5


def timeline_marks(rows: Sequence[IterationRow], history: Sequence[Transition],
                   runs: Sequence[RunInfo], now: float, final: bool = False) -> tuple[list[Mark], list[Band]]:
    """Opens, trials, closes, pauses, limit waits, restarts and exits as marks; breaker states as bands."""
    axis = _Axis(rows)
    marks: list[Mark] = []
    bands: list[Band] = []
    open_band: tuple[str, float, float | None, str] | None = None

    def close_band(x1: float, t: float | None) -> None:
        nonlocal open_band
        if open_band is not None:
            kind, x0, t0, text = open_band
            bands.append(Band(kind, x0, max(x0, x1), t0, t, text))
            open_band = None

    last_open = max((i for i, h in enumerate(history) if h.to_state == "OPEN"), default=-1)
    for index, h in enumerate(history):
        t = h.at
        number = h.iteration
        x = axis.x(t, number, rows)
        to, frm = h.to_state, h.from_state
        trigger, reason = h.trigger, h.reason
        close_band(x, t)
        if to == "OPEN":
            # The breaker says so in its reason ("open 3 of 3: final"); state.json says so of the last one.
            for_good = reason.endswith(": final)") or (final and index == last_open)
            kind = "pause" if trigger == "manual" else ("final" if for_good else "open")
            words = {"pause": "paused by hand", "final": f"stopped for good ({trigger})",
                     "open": f"breaker opened ({trigger})"}[kind]
            marks.append(Mark(kind, x, t, number, f"{words}: {reason}"))
            open_band = ("PAUSED" if trigger == "manual" else "OPEN", x, t, words)
        elif to == "HALF_OPEN":
            marks.append(Mark("trial", x, t, number, f"trial: {reason}"))
            open_band = ("HALF_OPEN", x, t, "trial")
        elif to == "CLOSED":
            kind = "reset" if trigger in ("manual", "none") and frm != "HALF_OPEN" else "close"
            marks.append(Mark(kind, x, t, number, ("reset: " if kind == "reset" else "breaker closed: ") + reason))
    close_band(axis.tail, None)

    for run in runs:
        first_child = True
        limit: tuple[float, float | None, float | None] | None = None
        outage: tuple[float, float | None] | None = None
        if run.index > 1:
            marks.append(Mark("run_start", axis.x(run.started_at), run.started_at, None,
                              f"supervisor started again (run {run.index})"))
        for event in run.events:
            name = ev.name(event)
            t = record_time(event)
            if name == ev.CHILD_STARTED:
                if not first_child:
                    marks.append(Mark("restart", axis.x(t), t, None, "the loop's command was started again"))
                first_child = False
            elif name == ev.CHILD_EXITED:
                exited = ChildExited.of(event)
                marks.append(Mark("exit", axis.x(t), t, exited.iteration,
                                  f"the loop's command exited with code {exited.code or 0}"))
            elif name == ev.LIMIT_WAIT_STARTED:
                wait = LimitWaitStarted.of(event)
                until = wait.until
                x = axis.x(t)
                what = {"ceiling": "usage ceiling: waiting", "outage": "API outage: backing off"}.get(
                    wait.kind, "usage limit: waiting")
                marks.append(Mark("limit_wait", x, t, wait.iteration,
                                  what + (f" until {utc_clock(until)}" if until else "")))
                limit = (x, t, until)
            elif name == ev.OUTAGE_STARTED:
                outage = (axis.x(t), t)
            elif name == ev.OUTAGE_ENDED and outage is not None:
                bands.append(Band("OUTAGE", outage[0], max(outage[0], axis.x(t)), outage[1], t,
                                  f"API outage since {utc_clock(outage[1])}"))
                outage = None
            elif name == ev.LIMIT_WAIT_ENDED and limit is not None:
                x0, t0, _ = limit
                bands.append(Band("LIMIT", x0, max(x0, axis.x(t)), t0, t, "usage-limit wait"))
                limit = None
        if outage is not None:
            bands.append(Band("OUTAGE", outage[0], max(outage[0], axis.x(run.ended_at) if run.ended_at else axis.tail),
                              outage[1], run.ended_at, f"API outage since {utc_clock(outage[1])}"))
        if limit is not None:
            x0, t0, until = limit
            over = until is not None and until <= (run.ended_at or now)
            end_x = axis.x(until) if over else axis.tail
            bands.append(Band("LIMIT", x0, max(x0, end_x), t0, until, "usage-limit wait"))
    marks.sort(key=lambda m: (m.x, m.at or 0.0))
    return marks, bands


def wait_lines(runs: Sequence[RunInfo], now: float, running: bool) -> list[str]:
    """`OUTAGE since 03:12: api_retry 4/10: unknown`, `2 API outages, the longest 14 min`, `USAGE five_hour at
    93 % (resets 15:00)`: what the outage and usage events of these runs say."""
    lines: list[str] = []
    open_since: tuple[float | None, str] | None = None
    lasted: list[float] = []
    usage: tuple[UsageWindow, ...] = ()
    for run in runs:
        open_since = None
        for event in run.events:
            name = ev.name(event)
            if name == ev.OUTAGE_STARTED:
                outage = OutageStarted.of(event)
                open_since = (outage.since or record_time(event), outage.message)
            elif name == ev.OUTAGE_ENDED:
                open_since = None
                lasted.append(OutageEnded.of(event).seconds or 0.0)
            elif name == ev.USAGE_HIGH:
                windows = UsageHigh.of(event).windows
                usage = usage if windows is None else windows
    if open_since is not None and running:
        lines.append(f"OUTAGE since {utc_clock(open_since[0])}: {open_since[1] or 'the agent cannot reach its API'}")
    if lasted:
        lines.append(f"{len(lasted)} API outage{'s' if len(lasted) != 1 else ''} waited out, the longest "
                     f"{duration(max(lasted))}")
    cpu = [as_float(e.get("cpu_s")) or 0.0 for run in runs for e in run.events if ev.name(e) == ev.CGROUP_FIGURES]
    peaks = [as_int(e.get("memory_peak_bytes")) for run in runs for e in run.events
             if ev.name(e) == ev.CGROUP_FIGURES and e.get("memory_peak_bytes") is not None]
    ooms = sum(as_int(e.get("kills")) for run in runs for e in run.events if ev.name(e) == ev.CGROUP_OOM)
    if cpu:
        lines.append(f"CGROUP the loop used {sum(cpu):.1f} CPU s" + (f", memory at most {human_bytes(max(peaks))}"
                                                                    if peaks else "")
                     + (f"; the OOM killer struck {ooms} time{'s' if ooms != 1 else ''}" if ooms else ""))
    for window in usage[:4]:
        if window.resets_at is not None and window.resets_at > now:
            lines.append(f"USAGE {window.window} at {window.utilization or 0:g} % "
                         f"(resets {utc_clock(window.resets_at)})")
    return lines
