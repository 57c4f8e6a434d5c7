"""The supervisor runs in a state folder's log: where each begins and ends, and what it was started with.

Pure: the structured log's records in, `RunInfo` values out. A run begins at `orphans_swept` or
`supervisor_started` and ends at `supervisor_stopped` (or where the next begins, when it died without a word).

    runs = choose_runs(split_runs(records.events), since=None, now=now)
    runs[-1].exit_code   # 2: the breaker stopped it for good
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ralph_supervisor import events as ev
from ralph_supervisor.event_fields import Budgets, ChildExited, SupervisorStarted, SupervisorStopped, TreeStopped
from ralph_supervisor.values import parse_time


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
    budgets: Budgets
    child_starts: int
    child_codes: tuple[int, ...]
    stop_reasons: tuple[str, ...]
    events: tuple[Mapping[str, Any], ...] = field(repr=False, default=())


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


def record_time(record: Mapping[str, Any]) -> float | None:
    """When an event or a history line was written (`ts`; structlog's `timestamp` in older logs)."""
    return parse_time(record.get("ts") or record.get("timestamp"))


def run_info(index: int, events: Sequence[Mapping[str, Any]]) -> RunInfo:
    first = next((e for e in events if ev.name(e) == ev.SUPERVISOR_STARTED), None)
    started = SupervisorStarted.of(first) if first is not None else None
    last = next((e for e in reversed(events) if ev.name(e) == ev.SUPERVISOR_STOPPED), None)
    stopped = SupervisorStopped.of(last) if last is not None else None
    times = [t for t in (record_time(e) for e in events) if t is not None]
    return RunInfo(
        index=index,
        started_at=(started.at if started else None) or (times[0] if times else None),
        ended_at=stopped.at if stopped else None,
        last_at=times[-1] if times else None,
        exit_code=stopped.code if stopped else None,
        workspace=started.workspace if started else "",
        command=started.command if started else (),
        budgets=started.budgets if started else Budgets(),
        child_starts=sum(1 for e in events if ev.name(e) == ev.CHILD_STARTED),
        child_codes=tuple(ChildExited.of(e).code or 0 for e in events if ev.name(e) == ev.CHILD_EXITED),
        stop_reasons=tuple(TreeStopped.of(e).reason for e in events if ev.name(e) == ev.TREE_STOPPED),
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
