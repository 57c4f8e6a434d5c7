"""One row per iteration: what the events, the ledger and the history say of each, joined.

Pure: `iteration_rows` takes the chosen runs, the ledger's attempts and the breaker's history and gives one
`IterationRow` per iteration, in order, with escalation's words for its outcome (`outcome`), so the report
and `escalation.md` call an iteration the same.

    rows = iteration_rows(runs, records.ledger, records.history, running=False)
    rows[-1].said   # "· no change"
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ralph_supervisor import events as ev
from ralph_supervisor.escalation import outcome
from ralph_supervisor.event_fields import IterationFinished
from ralph_supervisor.files.history_jsonl import Transition
from ralph_supervisor.iteration import IterationReport
from ralph_supervisor.outcomes import outcome_of
from ralph_supervisor.report.runs import RunInfo, record_time
from ralph_supervisor.signature import error_signature
from ralph_supervisor.values import as_opt_int, as_text


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



def _words(text: Any, limit: int = 300) -> str:
    return as_text(text, limit)


def _state_at(history: Sequence[Transition], times: Sequence[float], t: float | None) -> str:
    """The breaker's state at moment `t` (the `to` of the last transition before it)."""
    if t is None or not times:
        return ""
    index = bisect.bisect_right(times, t) - 1
    return history[index].to_state if index >= 0 else ""


def iteration_rows(runs: Sequence[RunInfo], ledger: Sequence[Mapping[str, Any]],
                   history: Sequence[Transition], running: bool) -> list[IterationRow]:
    """The iterations of the chosen runs in order, joined with the ledger's words about each."""
    attempts: dict[int, Mapping[str, Any]] = {}
    for attempt in ledger:
        number = as_opt_int(attempt.get("iteration"))
        if number is not None:
            attempts[number] = attempt
    times = [h.at or 0.0 for h in history]
    tripped = {(h.iteration, h.at): h.trigger for h in history if h.to_state == "OPEN"}
    opened_at: dict[int, str] = {}
    for (number, _), trigger in tripped.items():
        if number is not None:
            opened_at[number] = trigger
    rows: list[IterationRow] = []
    for run in runs:
        started: dict[int, float | None] = {}
        finished: dict[int, IterationFinished] = {}
        order: list[int] = []
        for event in run.events:
            name = ev.name(event)
            number = as_opt_int(event.get("iteration"))
            if number is None or name not in (ev.ITERATION_STARTED, ev.ITERATION_FINISHED):
                continue
            if number not in started and number not in finished:
                order.append(number)
            if name == ev.ITERATION_STARTED:
                started[number] = record_time(event)
            else:
                finished[number] = IterationFinished.of(event)
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


def _row(position: int, number: int, run: int, started_at: float | None, done: IterationFinished | None,
         attempt: Mapping[str, Any] | None, history: Sequence[Transition], times: Sequence[float],
         opened_at: Mapping[int, str], current: bool) -> IterationRow:
    attempt = attempt or {}
    ended = done.at if done is not None else None
    took = done.duration_s if done is not None else None
    if started_at is None and ended is not None and took is not None:
        started_at = ended - took
    if took is None and started_at is not None and ended is not None:
        took = max(0.0, ended - started_at)
    said = done or IterationFinished()
    action = _words(attempt.get("action"), 200)
    first_error = said.first_error or _words(attempt.get("error"), 300)
    if said.error_signatures is not None:
        sigs = said.error_signatures
    else:
        sigs = (error_signature(first_error),) if first_error else ()
    blocked_reason = said.blocked_reason
    if said.blocked and not blocked_reason and action.startswith("blocked: "):
        blocked_reason = action[len("blocked: "):]
    if done is not None:
        result = done.outcome or _words(attempt.get("outcome"), 20) or "?"
    elif attempt:
        result = _words(attempt.get("outcome"), 20) or "?"
    else:
        result = "running" if current else "unfinished"
    tokens = said.tokens if said.tokens is not None else as_opt_int(attempt.get("tokensUsed"))
    fields: dict[str, Any] = dict(
        position=position,
        number=number,
        run=run,
        started_at=started_at,
        ended_at=ended,
        duration_s=took,
        files_changed=said.files_changed,
        commits=said.commits,
        output_bytes=said.output_bytes,
        errors=said.errors if said.errors is not None else len(sigs),
        tokens=tokens,
        cost_usd=said.cost_usd,
        outcome=result,
        failed=said.failed is True or (done is None and result == "failure"),
        usage_limited=said.usage_limited,
        blocked=said.blocked,
        blocked_reason=blocked_reason,
        cut_short=said.cut_short,
        completed=said.completed,
        outage=said.outage,
        states_blocker=said.states_blocker,
        trial=_state_at(history, times, started_at) == "HALF_OPEN",
        tripped=opened_at.get(number, ""),
        action=action,
        first_error=first_error,
        signatures=sigs,
        reply=said.reply,
        status=said.status_block,
        returned_to=said.returned_to,
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
