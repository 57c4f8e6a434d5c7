"""The account of the runs in a state folder, as one value: what the Markdown, JSON and HTML reports show.

Pure: it is built from the records `sources` read (and the time, handed in), by the modules that each do one
job: `runs` (where each supervisor run begins and ends), `rows` (one row per iteration), `timeline` (marks,
bands and waits), `verdict` (where the loop stands and what a human must decide) and `findings` (errors,
blockers, the last reply, spend, hygiene).

    runs = split_runs(records.events)
    account = build_account(records, choose_runs(runs, since=None, now=now), git, now=now)
    account.verdict.line   # "Stopped for good by the breaker (no-progress) at iteration 6."
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ralph_supervisor.escalation import Residual
from ralph_supervisor.report.findings import (
    BlockerGroup,
    ErrorGroup,
    Hygiene,
    LastReply,
    Spend,
    blocker_groups,
    error_groups,
    hygiene,
    last_reply,
    spend,
)
from ralph_supervisor.report.rows import IterationRow, iteration_rows
from ralph_supervisor.report.runs import RunInfo
from ralph_supervisor.report.sources import GitFacts, Records
from ralph_supervisor.report.timeline import Band, Mark, timeline_marks, wait_lines
from ralph_supervisor.report.verdict import Verdict, judge, restore_steps, what_next

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


def build_account(records: Records, runs: Sequence[RunInfo], git: GitFacts, *, now: float,
                  since: float | None = None, report_html: str = "") -> Account:
    """The account of `runs` (chosen by `choose_runs`) from what the folder held."""
    running = records.running_pid is not None
    start = runs[0].started_at if runs else None
    history = [h for h in records.history if start is None or (h.at or 0.0) >= start - 1.0]
    rows = iteration_rows(runs, records.ledger, history, running)
    marks, bands = timeline_marks(rows, history, runs, now, records.state is not None and records.state.snapshot.final)
    verdict = judge(runs, records.state, rows, running, now, history)
    workspace = next((r.workspace for r in reversed(runs) if r.workspace), "") or str(records.state_dir.parent)
    residual, decide, steps = what_next(verdict, records.state, rows, workspace, runs[-1].budgets if runs else None,
                                        records.state_dir)
    steps = steps + restore_steps(records.snapshots, workspace, called_a_human=residual is not None)
    name = next((r.budgets.name for r in reversed(runs) if r.budgets.name), "")
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
