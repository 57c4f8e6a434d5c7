"""The account of the runs in a state folder, as values: what the Markdown, JSON and HTML reports show.

Pure: it is built from the records `sources` read (and the time, handed in), so every verdict and every
grouping is tested with plain values. The human words for "what now" come from `escalation`
(`classify_residual`, `decide_next`, `how_to_continue`), so the report and `escalation.md` say the same.

    runs = split_runs(records.events)
    account = build_account(records, choose_runs(runs, since=None, now=now), git, now=now)
    account.verdict.line   # "Stopped for good by the breaker (no-progress) at iteration 6."
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ralph_supervisor import events as ev
from ralph_supervisor.breaker import Decision, State
from ralph_supervisor.escalation import Residual, classify_residual, decide_next, how_to_continue, outcome
from ralph_supervisor.files import child_log
from ralph_supervisor.format import utc_time
from ralph_supervisor.iteration import IterationReport
from ralph_supervisor.outcomes import outcome_of
from ralph_supervisor.report.sources import GitFacts, Records
from ralph_supervisor.residual import states_blocker
from ralph_supervisor.signature import error_signature
from ralph_supervisor.similarity import jaccard, word_set
from ralph_supervisor.values import as_float, as_int, as_opt_int, as_text, duration, parse_time

BLOCKER_SIMILARITY = 0.5
"""Two blocker statements whose word sets overlap this much (Jaccard) are one blocker restated."""
SPARK = "▁▂▃▄▅▆▇█"


# -- values -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class IterationRow:
    """One iteration as the report shows it; `position` is its place on the timeline (0-based)."""

    position: int
    number: int
    run: int
    started_at: float | None = None
    ended_at: float | None = None
    duration_s: float | None = None
    files_changed: int = 0
    commits: int = 0
    output_bytes: int = 0
    errors: int = 0
    tokens: int | None = None
    cost_usd: float | None = None
    outcome: str = "?"
    """The ledger's word: success (progress), failure, noop; or running / unfinished."""
    label: str = ""
    """The human words for what happened (escalation's `outcome`), e.g. "no progress", "usage limit"."""
    failed: bool = False
    usage_limited: bool = False
    blocked: bool = False
    blocked_reason: str = ""
    cut_short: bool = False
    completed: bool = False
    outage: bool = False
    """The call could not reach the agent's API (neutral, like a usage limit)."""
    trial: bool = False
    """It ran while the breaker was HALF_OPEN: the trial."""
    tripped: str = ""
    """The trigger, when this iteration opened the breaker."""
    action: str = ""
    first_error: str = ""
    signatures: tuple[str, ...] = ()
    reply: str = ""
    status: Mapping[str, str] = field(default_factory=dict)
    returned_to: int | None = None
    states_blocker: bool = False
    """The supervisor judged the reply to state a blocker (`residual.states_blocker` on the whole reply)."""
    progress: bool = False
    """As the breaker judges it (`IterationReport.progress`): a commit, or files changed into a new state."""

    @property
    def said(self) -> str:
        """The outcome as every view says it: `✔ progress`, `· no change`, ... (`outcomes.py`); the label alone
        for an iteration still running or left unfinished."""
        if self.label in ("running", "unfinished") or not self.label:
            return self.label or self.outcome
        mark = outcome_of(progress=self.progress, failed=self.failed, usage_limited=self.usage_limited,
                          blocked=self.blocked, cut_short=self.cut_short, outage=self.outage).mark
        return f"{mark} {self.label}"


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


@dataclass(frozen=True)
class RunInfo:
    """One supervisor run: from its start to `supervisor_stopped` (or now, or its last record)."""

    index: int
    started_at: float | None
    ended_at: float | None
    """When `supervisor_stopped` was written; None while it runs or when it died without a word."""
    last_at: float | None
    exit_code: int | None
    workspace: str
    command: tuple[str, ...]
    budgets: Mapping[str, Any]
    child_starts: int
    child_codes: tuple[int, ...]
    stop_reasons: tuple[str, ...]
    events: tuple[Mapping[str, Any], ...] = field(repr=False, default=())


@dataclass(frozen=True)
class Verdict:
    """The first line of the report. `status`: running, trial, paused, waiting, finished, stopped, ended."""

    status: str
    by: str
    """Who or what: breaker, hand, request, signal, limit, itself, or ""."""
    line: str
    trigger: str
    reason: str
    iteration: int
    code: int | None


@dataclass(frozen=True)
class Spend:
    iterations: int
    tokens: int
    token_budget: int
    cost_usd: float | None
    """None when no agent reported a cost."""
    cost_budget: float
    max_iterations: int


@dataclass(frozen=True)
class Hygiene:
    orphans_swept: int
    tree_stops: int
    survivors: int
    survivor_pids: tuple[int, ...]


@dataclass(frozen=True)
class ErrorGroup:
    signature: str
    count: int
    first: int
    last: int
    sample: str


@dataclass(frozen=True)
class BlockerGroup:
    text: str
    count: int
    first: int
    last: int


@dataclass(frozen=True)
class LastReply:
    iteration: int
    text: str
    status: Mapping[str, str]


@dataclass(frozen=True)
class Account:
    """Everything the report says, read at one moment."""

    workspace: str
    state_dir: str
    name: str
    generated_at: float
    since: float | None
    runs: tuple[RunInfo, ...]
    verdict: Verdict
    wall_s: float | None
    spend: Spend
    iterations: tuple[IterationRow, ...]
    marks: tuple[Mark, ...]
    bands: tuple[Band, ...]
    git: GitFacts
    errors: tuple[ErrorGroup, ...]
    blockers: tuple[BlockerGroup, ...]
    last_reply: LastReply | None
    hygiene: Hygiene
    residual: Residual | None
    decide: tuple[str, ...]
    next_steps: tuple[str, ...]
    escalation: str | None
    report_html: str
    warnings: tuple[str, ...]
    waits: tuple[str, ...] = ()
    """The waits the loop cannot avoid, in words: an API outage in progress, outages past, usage windows at
    75 % or more (`wait_lines`)."""


# -- runs -------------------------------------------------------------------------------------


def split_runs(events: Iterable[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """Cut the structured log into supervisor runs.

    A run's first line is `orphans_swept` (logged once, before anything else) or `supervisor_started`;
    a run ends at `supervisor_stopped`, or where the next one begins when it died without a word.
    """
    runs: list[list[Mapping[str, Any]]] = []
    current: list[Mapping[str, Any]] = []
    started = stopped = swept = False
    for event in events:
        name = ev.name(event)
        begins = (stopped or (name == ev.SUPERVISOR_STARTED and started)
                  or (name == ev.ORPHANS_SWEPT and (started or swept)))
        if current and begins:
            runs.append(current)
            current, started, stopped, swept = [], False, False, False
        current.append(event)
        started = started or name == ev.SUPERVISOR_STARTED
        stopped = stopped or name == ev.SUPERVISOR_STOPPED
        swept = swept or name == ev.ORPHANS_SWEPT
    if current:
        runs.append(current)
    return runs


def _ts(record: Mapping[str, Any]) -> float | None:
    return parse_time(record.get("ts") or record.get("timestamp"))


def run_info(index: int, events: Sequence[Mapping[str, Any]]) -> RunInfo:
    started = next((e for e in events if ev.name(e) == ev.SUPERVISOR_STARTED), None)
    stopped = next((e for e in reversed(events) if ev.name(e) == ev.SUPERVISOR_STOPPED), None)
    times = [t for t in (_ts(e) for e in events) if t is not None]
    command = started.get("command") if started else None
    budgets = started.get("budgets") if started else None
    return RunInfo(
        index=index,
        started_at=(_ts(started) if started else None) or (times[0] if times else None),
        ended_at=_ts(stopped) if stopped else None,
        last_at=times[-1] if times else None,
        exit_code=as_opt_int(stopped.get("code")) if stopped else None,
        workspace=as_text(started.get("workspace"), 500) if started else "",
        command=tuple(str(c) for c in command) if isinstance(command, list) else (),
        budgets=budgets if isinstance(budgets, Mapping) else {},
        child_starts=sum(1 for e in events if ev.name(e) == ev.CHILD_STARTED),
        child_codes=tuple(as_int(e.get("code")) for e in events if ev.name(e) == ev.CHILD_EXITED),
        stop_reasons=tuple(as_text(e.get("reason"), 40) for e in events if ev.name(e) == ev.TREE_STOPPED),
        events=tuple(events),
    )


def choose_runs(runs: Sequence[Sequence[Mapping[str, Any]]], since: float | None, now: float) -> list[RunInfo]:
    """The latest run; with `since`, every run that was still going at or after that moment."""
    infos = [run_info(i + 1, events) for i, events in enumerate(runs)]
    if not infos:
        return []
    if since is None:
        return [infos[-1]]
    chosen = [r for r in infos if (r.ended_at or r.last_at or now) >= since]
    return [replace(r, index=i + 1) for i, r in enumerate(chosen or infos[-1:])]


# -- iterations -------------------------------------------------------------------------------


def _words(text: Any, limit: int = 300) -> str:
    return as_text(text, limit)


def _status_block(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {as_text(k, 40): as_text(v, 200) for k, v in list(value.items())[:12]}


def _state_at(history: Sequence[Mapping[str, Any]], times: Sequence[float], t: float | None) -> str:
    """The breaker's state at moment `t` (the `to` of the last transition before it)."""
    if t is None or not times:
        return ""
    index = bisect.bisect_right(times, t) - 1
    return as_text(history[index].get("to"), 20) if index >= 0 else ""


def iteration_rows(runs: Sequence[RunInfo], ledger: Sequence[Mapping[str, Any]],
                   history: Sequence[Mapping[str, Any]], running: bool) -> list[IterationRow]:
    """The iterations of the chosen runs in order, joined with the ledger's words about each."""
    attempts: dict[int, Mapping[str, Any]] = {}
    for attempt in ledger:
        number = as_opt_int(attempt.get("iteration"))
        if number is not None:
            attempts[number] = attempt
    times = [_ts(h) or 0.0 for h in history]
    tripped = {(as_opt_int(h.get("iteration")), _ts(h)): as_text(h.get("trigger"), 40)
               for h in history if h.get("to") == "OPEN"}
    opened_at: dict[int, str] = {}
    for (number, _), trigger in tripped.items():
        if number is not None:
            opened_at[number] = trigger
    rows: list[IterationRow] = []
    for run in runs:
        started: dict[int, float | None] = {}
        finished: dict[int, Mapping[str, Any]] = {}
        order: list[int] = []
        for event in run.events:
            name = ev.name(event)
            number = as_opt_int(event.get("iteration"))
            if number is None or name not in (ev.ITERATION_STARTED, ev.ITERATION_FINISHED):
                continue
            if number not in started and number not in finished:
                order.append(number)
            if name == ev.ITERATION_STARTED:
                started[number] = _ts(event)
            else:
                finished[number] = event
        for number in order:
            rows.append(_row(len(rows), number, run.index, started.get(number), finished.get(number),
                             attempts.get(number), history, times, opened_at,
                             running and run is runs[-1] and number == order[-1]))
    if not rows and ledger and runs:
        for attempt in ledger:  # no iteration events (rotated away): the ledger alone still tells a story
            number = as_opt_int(attempt.get("iteration"))
            if number is not None:
                rows.append(_row(len(rows), number, runs[-1].index, None, None, attempt, history, times,
                                 opened_at, False))
    return rows


def _row(position: int, number: int, run: int, started_at: float | None, done: Mapping[str, Any] | None,
         attempt: Mapping[str, Any] | None, history: Sequence[Mapping[str, Any]], times: Sequence[float],
         opened_at: Mapping[int, str], current: bool) -> IterationRow:
    done = done or {}
    attempt = attempt or {}
    ended = _ts(done) if done else None
    took = as_float(done.get("duration_s"))
    if started_at is None and ended is not None and took is not None:
        started_at = ended - took
    if took is None and started_at is not None and ended is not None:
        took = max(0.0, ended - started_at)
    action = _words(attempt.get("action"), 200)
    first_error = _words(done.get("first_error") or attempt.get("error"), 300)
    signatures = done.get("error_signatures")
    if isinstance(signatures, list):
        sigs = tuple(_words(s, 200) for s in signatures if isinstance(s, str))
    else:
        sigs = (error_signature(first_error),) if first_error else ()
    blocked = done.get("blocked") is True
    blocked_reason = _words(done.get("blocked_reason"), 300)
    if blocked and not blocked_reason and action.startswith("blocked: "):
        blocked_reason = action[len("blocked: "):]
    if done:
        result = _words(done.get("outcome"), 20) or _words(attempt.get("outcome"), 20) or "?"
    elif attempt:
        result = _words(attempt.get("outcome"), 20) or "?"
    else:
        result = "running" if current else "unfinished"
    tokens = as_opt_int(done.get("tokens")) if "tokens" in done else as_opt_int(attempt.get("tokensUsed"))
    fields: dict[str, Any] = dict(
        position=position,
        number=number,
        run=run,
        started_at=started_at,
        ended_at=ended,
        duration_s=took,
        files_changed=as_int(done.get("files_changed")),
        commits=as_int(done.get("commits")),
        output_bytes=as_int(done.get("output_bytes")),
        errors=as_int(done.get("errors")) if "errors" in done else len(sigs),
        tokens=tokens,
        cost_usd=as_float(done.get("cost_usd")),
        outcome=result,
        failed=done.get("failed") is True or (not done and result == "failure"),
        usage_limited=done.get("usage_limited") is True,
        blocked=blocked,
        blocked_reason=blocked_reason,
        cut_short=done.get("cut_short") is True,
        completed=done.get("completed") is True,
        outage=done.get("outage") is True,
        states_blocker=done.get("states_blocker") is True,
        trial=_state_at(history, times, started_at) == "HALF_OPEN",
        tripped=opened_at.get(number, ""),
        action=action,
        first_error=first_error,
        signatures=sigs,
        reply=_words(done.get("reply"), 500),
        status=_status_block(done.get("status_block")),
        returned_to=as_opt_int(done.get("returned_to")),
    )
    judged = IterationReport(number, 0.0, 0.0, **{k: fields[k] for k in _OUTCOME_FIELDS})
    label = result if result in ("running", "unfinished") else outcome(judged)  # escalation's words
    return IterationRow(**fields, label=label, progress=judged.progress)


_OUTCOME_FIELDS = ("files_changed", "commits", "failed", "usage_limited", "blocked", "cut_short", "completed",
                   "returned_to", "outage")


def as_iteration_report(row: IterationRow) -> IterationReport:
    """The row as the breaker saw it, for the judgements `escalation` makes of a run."""
    return IterationReport(
        number=row.number,
        started_at=row.started_at or 0.0,
        ended_at=row.ended_at or 0.0,
        files_changed=row.files_changed,
        commits=row.commits,
        output_bytes=row.output_bytes,
        error_signatures=frozenset(row.signatures),
        error_lines=(row.first_error,) if row.first_error else (),
        reply=row.reply or (row.action if row.outcome != "failure" and not row.blocked else None) or None,
        tokens=row.tokens,
        cost_usd=row.cost_usd,
        failed=row.failed,
        usage_limited=row.usage_limited,
        outage=row.outage,
        blocked=row.blocked,
        blocked_reason=row.blocked_reason,
        completed=row.completed,
        status=dict(row.status),
        cut_short=row.cut_short,
        returned_to=row.returned_to,
    )


# -- the timeline's marks and bands -------------------------------------------------------------


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


def _clock(t: float | None) -> str:
    return utc_time(t, "%H:%M UTC")


stamp = utc_time
"""`2026-12-01 17:10:23 UTC`, or `?` (`format.utc_time`; the report's modules import it here)."""


def timeline_marks(rows: Sequence[IterationRow], history: Sequence[Mapping[str, Any]],
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

    last_open = max((i for i, h in enumerate(history) if h.get("to") == "OPEN"), default=-1)
    for index, h in enumerate(history):
        t = _ts(h)
        number = as_opt_int(h.get("iteration"))
        x = axis.x(t, number, rows)
        to, frm = as_text(h.get("to"), 20), as_text(h.get("from"), 20)
        trigger, reason = as_text(h.get("trigger"), 40), as_text(h.get("reason"), 300)
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
            t = _ts(event)
            if name == ev.CHILD_STARTED:
                if not first_child:
                    marks.append(Mark("restart", axis.x(t), t, None, "the loop's command was started again"))
                first_child = False
            elif name == ev.CHILD_EXITED:
                code = as_int(event.get("code"))
                marks.append(Mark("exit", axis.x(t), t, as_opt_int(event.get("iteration")),
                                  f"the loop's command exited with code {code}"))
            elif name == ev.LIMIT_WAIT_STARTED:
                until = parse_time(event.get("until"))
                x = axis.x(t)
                what = {"ceiling": "usage ceiling: waiting", "outage": "API outage: backing off"}.get(
                    as_text(event.get("kind"), 20), "usage limit: waiting")
                marks.append(Mark("limit_wait", x, t, as_opt_int(event.get("iteration")),
                                  what + (f" until {_clock(until)}" if until else "")))
                limit = (x, t, until)
            elif name == ev.OUTAGE_STARTED:
                outage = (axis.x(t), t)
            elif name == ev.OUTAGE_ENDED and outage is not None:
                bands.append(Band("OUTAGE", outage[0], max(outage[0], axis.x(t)), outage[1], t,
                                  f"API outage since {_clock(outage[1])}"))
                outage = None
            elif name == ev.LIMIT_WAIT_ENDED and limit is not None:
                x0, t0, _ = limit
                bands.append(Band("LIMIT", x0, max(x0, axis.x(t)), t0, t, "usage-limit wait"))
                limit = None
        if outage is not None:
            bands.append(Band("OUTAGE", outage[0], max(outage[0], axis.x(run.ended_at) if run.ended_at else axis.tail),
                              outage[1], run.ended_at, f"API outage since {_clock(outage[1])}"))
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
    usage: list[Any] = []
    for run in runs:
        open_since = None
        for event in run.events:
            name = ev.name(event)
            if name == ev.OUTAGE_STARTED:
                open_since = (parse_time(event.get("since")) or _ts(event), as_text(event.get("message"), 300))
            elif name == ev.OUTAGE_ENDED:
                open_since = None
                lasted.append(as_float(event.get("seconds")) or 0.0)
            elif name == ev.USAGE_HIGH and isinstance(event.get("windows"), list):
                usage = event["windows"]
    if open_since is not None and running:
        lines.append(f"OUTAGE since {_clock(open_since[0])}: {open_since[1] or 'the agent cannot reach its API'}")
    if lasted:
        lines.append(f"{len(lasted)} API outage{'s' if len(lasted) != 1 else ''} waited out, the longest "
                     f"{duration(max(lasted))}")
    cpu = [as_float(e.get("cpu_s")) or 0.0 for run in runs for e in run.events if ev.name(e) == ev.CGROUP_FIGURES]
    peaks = [as_int(e.get("memory_peak_bytes")) for run in runs for e in run.events
             if ev.name(e) == ev.CGROUP_FIGURES and e.get("memory_peak_bytes") is not None]
    ooms = sum(as_int(e.get("kills")) for run in runs for e in run.events if ev.name(e) == ev.CGROUP_OOM)
    if cpu:
        lines.append(f"CGROUP the loop used {sum(cpu):.1f} CPU s" + (f", memory at most {max(peaks) / 2**20:.0f} MiB"
                                                                    if peaks else "")
                     + (f"; the OOM killer struck {ooms} time{'s' if ooms != 1 else ''}" if ooms else ""))
    for window in usage[:4]:
        if isinstance(window, Mapping):
            resets = parse_time(window.get("resets_at"))
            if resets is not None and resets > now:
                lines.append(f"USAGE {as_text(window.get('window'), 40)} at {as_float(window.get('utilization')) or 0:g} % "
                             f"(resets {_clock(resets)})")
    return lines


# -- verdict ----------------------------------------------------------------------------------


def verdict_line(status: str, by: str, *, trigger: str = "none", iteration: int = 0, code: int | None = None,
                 until: float | None = None, iterations: int | None = None) -> str:
    """The one line that says where the loop stands; the report's first line and every notice's."""
    t = f" ({trigger})" if trigger and trigger != "none" else ""
    at = f" at iteration {iteration}"
    when = f" at {_clock(until)}" if until else ""
    if status == "running":
        return f"Running: iteration {iteration}, breaker CLOSED."
    if status == "trial":
        return f"Running, on trial{t}: the next iteration decides whether the breaker closes (iteration {iteration})."
    if status == "paused":
        if by == "hand":
            return f"Paused by hand{at}: it waits for `ralph-supervise resume`."
        if by == "restart":
            return f"Stopped by the breaker{t}{at}: the loop starts again after the cooldown{when}."
        return f"Paused by the breaker{t}{at}: it tries again after the cooldown{when}."
    if status == "waiting":
        return f"Waiting for a usage limit to reset{' until ' + _clock(until) if until else ''} (iteration {iteration})."
    if status == "finished":
        count = iterations if iterations is not None else iteration
        return f"Finished by itself with code {code} after {count} iteration{'s' if count != 1 else ''}."
    if status == "stopped":
        if by == "request":
            return f"Stopped on request (`ralph-supervise stop`){at}."
        if by == "signal":
            return f"Stopped by a signal{at} (exit {code})."
        if by == "refused":
            return f"Did not start: the breaker is open for good since an earlier run{t}."
        return f"Stopped for good by the breaker{t}{at}."
    if status == "ended":
        return f"Ended without a stop record after iteration {iteration} (the supervisor was killed or crashed)."
    return "Nothing ran yet."


def judge(runs: Sequence[RunInfo], state: Mapping[str, Any] | None, rows: Sequence[IterationRow],
          running: bool, now: float, history: Sequence[Mapping[str, Any]] = ()) -> Verdict:
    """Where the latest run stands: running (and how), or how it ended. An open is told at the iteration
    that opened it (the history's), not at the one that had just started when the tree froze."""
    s = state or {}
    run = runs[-1] if runs else None
    breaker = as_text(s.get("state"), 20) or "CLOSED"
    trigger = as_text(s.get("trigger"), 40) or "none"
    reason = as_text(s.get("reason"), 400)
    iteration = as_int(s.get("iteration")) or (rows[-1].number if rows else 0)
    last = history[-1] if history else None
    if breaker == "OPEN" and last is not None and last.get("to") == "OPEN":
        iteration = as_opt_int(last.get("iteration")) or iteration
    opened = parse_time(s.get("opened_at"))
    cooldown = as_float(s.get("cooldown_s")) or 0.0
    budgets = run.budgets if run else {}

    def make(status: str, by: str, code: int | None = None, until: float | None = None,
             why: str = reason, what: str = trigger) -> Verdict:
        line = verdict_line(status, by, trigger=what, iteration=iteration, code=code, until=until,
                            iterations=len(rows))
        return Verdict(status, by, line, what, why, iteration, code)

    if run is None and not rows:
        return Verdict("empty", "", verdict_line("empty", ""), trigger, reason, iteration, None)
    if running and (run is None or run.ended_at is None):
        until = limit_until(s, run, now)
        if until is not None:
            return make("waiting", "limit", until=until, why="a usage limit was reached", what="usage-limit")
        if breaker == "OPEN":
            if trigger == "manual":
                return make("paused", "hand")
            mode = as_text(budgets.get("on_open"), 10)
            return make("paused", "restart" if mode == "kill" else "breaker",
                        until=opened + cooldown if opened is not None and cooldown else None)
        if breaker == "HALF_OPEN":
            return make("trial", "breaker")
        return make("running", "", why="")
    assert run is not None
    code = run.exit_code
    if run.ended_at is None:
        return make("ended", "")
    if ev.STOP_BREAKER_FINAL in run.stop_reasons:
        return make("stopped", "breaker", code)
    if ev.STOP_REQUEST in run.stop_reasons:
        return make("stopped", "request", code, why="stopped with `ralph-supervise stop`", what="manual")
    if ev.STOP_SIGNAL in run.stop_reasons or (code in (130, 143) and not run.child_codes):
        return make("stopped", "signal", code, why=f"the supervisor got a signal (exit {code})", what="none")
    if run.child_starts == 0 and s.get("final") is True:
        return make("stopped", "refused", code)
    if run.child_codes:
        return make("finished", "itself", run.child_codes[-1], why="", what="none")
    return make("stopped", "", code, why=f"the supervisor exited with code {code}")


def limit_until(state: Mapping[str, Any], run: RunInfo | None, now: float) -> float | None:
    """The end of a usage-limit wait in progress: `limit_until` in state.json, or an unended wait event."""
    until = parse_time(state.get("limit_until"))
    if until is not None and until > now:
        return until
    if run is None:
        return None
    waiting: float | None = None
    for event in run.events:
        name = ev.name(event)
        if name == ev.LIMIT_WAIT_STARTED:
            waiting = parse_time(event.get("until")) or float("inf")
        elif name == ev.LIMIT_WAIT_ENDED or name == ev.ITERATION_STARTED:
            waiting = None
    if waiting is None or waiting <= now:
        return None
    return None if waiting == float("inf") else waiting


# -- what went wrong, grouped -------------------------------------------------------------------


def error_groups(rows: Sequence[IterationRow]) -> list[ErrorGroup]:
    """Each error signature: in how many iterations, the first and the last, a sample line; most first."""
    counts: Counter[str] = Counter()
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    sample: dict[str, str] = {}
    for row in rows:
        for sig in dict.fromkeys(row.signatures):
            counts[sig] += 1
            first.setdefault(sig, row.number)
            last[sig] = row.number
            if sig not in sample and row.first_error and len(set(row.signatures)) == 1:
                sample[sig] = row.first_error
    ordered = sorted(counts.items(), key=lambda item: (-item[1], first[item[0]]))
    return [ErrorGroup(sig, n, first[sig], last[sig], sample.get(sig, "")) for sig, n in ordered]


def blocker_statements(row: IterationRow) -> list[str]:
    """What this iteration said stands in the way: a blocked call, STATUS: BLOCKED, or a reply naming a blocker."""
    said: list[str] = []
    if row.blocked:
        said.append(row.blocked_reason or row.first_error or "blocked")
    text = row.reply or row.action
    # residual.py's judgement: STATUS: BLOCKED, or a blocker in the reply's words.
    if not row.blocked and (row.states_blocker or states_blocker(text, row.status)):
        status = {k.upper(): v for k, v in row.status.items()}
        said.append(text or status.get("RECOMMENDATION", "") or "STATUS: BLOCKED")
    return [as_text(s, 300) for s in said if s]


def blocker_groups(rows: Sequence[IterationRow]) -> list[BlockerGroup]:
    """Blocker statements grouped: rewordings of one blocker (word sets overlapping by half) are one group."""
    groups: list[tuple[frozenset[str], str, list[int]]] = []
    for row in rows:
        for text in blocker_statements(row):
            words = word_set(text)
            for group_words, _, numbers in groups:
                if (words and jaccard(words, group_words) >= BLOCKER_SIMILARITY) or (not words and not group_words):
                    if not numbers or numbers[-1] != row.number:
                        numbers.append(row.number)
                    break
            else:
                groups.append((words, text, [row.number]))
    ordered = sorted(groups, key=lambda g: (-len(g[2]), g[2][0]))
    return [BlockerGroup(text, len(numbers), numbers[0], numbers[-1]) for _, text, numbers in ordered]


def last_reply(rows: Sequence[IterationRow]) -> LastReply | None:
    for row in reversed(rows):
        if row.reply or row.status:
            return LastReply(row.number, row.reply, row.status)
    for row in reversed(rows):
        if row.action and row.outcome != "failure":
            return LastReply(row.number, row.action, {})
    return None


def hygiene(runs: Sequence[RunInfo]) -> Hygiene:
    swept = stops = survivors = 0
    pids: list[int] = []
    for run in runs:
        for event in run.events:
            name = ev.name(event)
            if name == ev.ORPHANS_SWEPT:
                swept += as_int(event.get("count"))
            elif name == ev.TREE_STOPPED:
                stops += 1
                survivors += as_int(event.get("survivors"))
                more = event.get("survivor_pids")
                if isinstance(more, list):
                    pids += [p for p in (as_opt_int(v) for v in more) if p is not None]
    return Hygiene(swept, stops, survivors, tuple(pids[:50]))


def spend(rows: Sequence[IterationRow], runs: Sequence[RunInfo], state: Mapping[str, Any] | None) -> Spend:
    budgets = runs[-1].budgets if runs else {}
    costs = [r.cost_usd for r in rows if r.cost_usd is not None]
    cost = sum(costs) if costs else as_float((state or {}).get("cost_usd"))
    return Spend(
        iterations=len(rows),
        tokens=sum(r.tokens or 0 for r in rows),
        token_budget=as_int(budgets.get("token_budget")),
        cost_usd=cost if cost else (0.0 if costs else None),
        cost_budget=as_float(budgets.get("cost_budget")) or 0.0,
        max_iterations=as_int(budgets.get("max_iterations")),
    )


def _decision(state: Mapping[str, Any] | None, verdict: Verdict) -> Decision:
    s = state or {}
    try:
        breaker_state = State(as_text(s.get("state"), 20) or "OPEN")
    except ValueError:
        breaker_state = State.OPEN
    final = s.get("final") is True or verdict.status == "stopped"
    return Decision(action="final" if final else "open", state=breaker_state, trigger=verdict.trigger,
                    reason=verdict.reason, iteration=verdict.iteration, final=final,
                    cooldown_s=as_float(s.get("cooldown_s")) or 0.0, total_opens=as_int(s.get("total_opens")))


def what_next(verdict: Verdict, state: Mapping[str, Any] | None, rows: Sequence[IterationRow],
              workspace: str, verdict_budgets: Mapping[str, Any] | None = None, state_dir: Path | None = None
              ) -> tuple[Residual | None, list[str], list[str]]:
    """The residual (when the breaker called a human), what to decide, and the commands that continue.
    `state_dir`: the folder the records came from, where the loop's output is (wherever `--state-dir` put it)."""
    w = workspace or "DIR"
    verdict_budgets = verdict_budgets or {}
    if verdict.by in ("breaker", "restart", "hand", "refused"):
        decision = _decision(state, verdict)
        reports = [as_iteration_report(r) for r in rows[-10:]]
        residual = classify_residual(decision, reports)
        has_errors = any(r.signatures for r in rows[-10:])
        on_open = as_text(verdict_budgets.get("on_open"), 10) or "pause"
        return residual, decide_next(residual, decision, has_errors), how_to_continue(decision, w, on_open)
    if verdict.status == "running":
        return None, ["- Nothing yet: the loop is running and the breaker is closed."], [
            f"- `ralph-supervise watch -w {w}` follows it live; `ralph-supervise stop -w {w}` ends it."]
    if verdict.status == "trial":
        return None, ["- Nothing yet: the trial decides by itself whether the loop carries on."], [
            f"- `ralph-supervise watch -w {w}` follows it live."]
    if verdict.status == "waiting":
        return None, ["- Nothing: the loop waits for the usage limit to reset and carries on by itself."], [
            f"- `ralph-supervise stop -w {w}` ends the wait and the loop, if the work should stop here."]
    if verdict.status == "finished" and verdict.code == 0:
        return None, ["- Whether the work is done: the loop finished by itself (code 0); "
                      "check the commits and the last reply above."], [
            f"- `ralph-supervise run -w {w} -- <your loop command>` starts another run."]
    if verdict.status == "finished":
        output = (f"`{child_log.path(state_dir)}`" if state_dir is not None else
                  f"`child.log` in the state folder, which `ralph-supervise status -w {w}` names")
        return None, [f"- Why the loop exited with code {verdict.code} by itself: read the last iterations above "
                      f"and the end of the loop's output ({output}); then start it again or stop here."], [
            f"- `ralph-supervise run -w {w} -- <your loop command>` starts it again."]
    if verdict.status == "ended":
        return None, ["- The supervisor ended without its stop record (killed, or the machine went down): "
                      "whether to start the loop again; the next start sweeps what it left behind."], [
            f"- `ralph-supervise status -w {w}` shows the breaker; `ralph-supervise run -w {w} -- ...` starts again."]
    return None, ["- Whether to start the loop again: it was stopped from outside, not by the breaker."], [
        f"- `ralph-supervise run -w {w} -- <your loop command>` starts it again."]


def restore_steps(summary: Mapping[str, Any] | None, workspace: str, *, called_a_human: bool) -> list[str]:
    """The snapshot a human may restore, with the exact command (when the store holds one)."""
    from ralph_supervisor.snapshots.info import restore_command

    latest = (summary or {}).get("latest")
    if not isinstance(latest, Mapping) or not called_a_human:
        return []
    number = as_int(latest.get("iteration"))
    w = workspace or "DIR"
    return [f"- `{restore_command(number, w)}` brings back the workspace's files as the newest snapshot "
            f"(iteration {number}, {as_int(latest.get('files'))} files) holds them; "
            f"`ralph-supervise snapshots -w {w}` lists the others."]


# -- the whole account ------------------------------------------------------------------------


def build_account(records: Records, runs: Sequence[RunInfo], git: GitFacts, *, now: float,
                  since: float | None = None, report_html: str = "") -> Account:
    """The account of `runs` (chosen by `choose_runs`) from what the folder held."""
    running = records.running_pid is not None
    start = runs[0].started_at if runs else None
    history = [h for h in records.history if start is None or (_ts(h) or 0.0) >= start - 1.0]
    rows = iteration_rows(runs, records.ledger, history, running)
    marks, bands = timeline_marks(rows, history, runs, now, (records.state or {}).get("final") is True)
    verdict = judge(runs, records.state, rows, running, now, history)
    workspace = next((r.workspace for r in reversed(runs) if r.workspace), "") or str(records.state_dir.parent)
    residual, decide, steps = what_next(verdict, records.state, rows, workspace, runs[-1].budgets if runs else {},
                                        records.state_dir)
    steps = steps + restore_steps(records.snapshots, workspace, called_a_human=residual is not None)
    name = next((as_text(r.budgets.get("name"), 60) for r in reversed(runs) if r.budgets.get("name")), "")
    walls = [(r.ended_at or (now if running and r is runs[-1] else r.last_at) or 0.0) - r.started_at
             for r in runs if r.started_at is not None]
    return Account(
        workspace=workspace,
        state_dir=str(records.state_dir),
        name=name or workspace.rstrip("/").rsplit("/", 1)[-1] or workspace,
        generated_at=now,
        since=since,
        runs=tuple(runs),
        verdict=verdict,
        wall_s=sum(max(0.0, w) for w in walls) if walls else None,
        spend=spend(rows, runs, records.state),
        iterations=tuple(rows),
        marks=tuple(marks),
        bands=tuple(bands),
        git=git,
        errors=tuple(error_groups(rows)),
        blockers=tuple(blocker_groups(rows)),
        last_reply=last_reply(rows),
        hygiene=hygiene(runs),
        residual=residual,
        decide=tuple(decide),
        next_steps=tuple(steps),
        escalation=str(records.escalation) if records.escalation else None,
        report_html=report_html,
        warnings=tuple(records.warnings),
        waits=tuple(wait_lines(runs, now, running)),
    )


# -- small pictures -----------------------------------------------------------------------------


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
