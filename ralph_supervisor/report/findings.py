"""What the rows add up to: the recurring errors, the blockers the agent restated, its last reply, the spend
against the budgets and the process hygiene (orphans swept, tree stops, survivors).

Pure: rows and runs in, small values out.

    errors = error_groups(rows)
    errors[0].count, errors[0].first, errors[0].last   # (4, 3, 6): one signature in 4 iterations
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ralph_supervisor import events as ev
from ralph_supervisor.event_fields import Budgets, TreeStopped
from ralph_supervisor.files.state_json import Recorded
from ralph_supervisor.report.rows import IterationRow
from ralph_supervisor.report.runs import RunInfo
from ralph_supervisor.residual import states_blocker
from ralph_supervisor.similarity import jaccard, word_set
from ralph_supervisor.values import as_int, as_text

BLOCKER_SIMILARITY = 0.5
"""Two blocker statements whose word sets overlap this much (Jaccard) are one blocker restated."""


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
                stopped = TreeStopped.of(event)
                stops += 1
                survivors += stopped.survivors
                pids += stopped.survivor_pids
    return Hygiene(swept, stops, survivors, tuple(pids[:50]))


def spend(rows: Sequence[IterationRow], runs: Sequence[RunInfo], state: Recorded | None) -> Spend:
    """Tokens and dollars of the rows against the last run's budgets; the dollars of state.json (the breaker's
    count for the latest run) when no row says what its call cost (their events rotated away)."""
    budgets = runs[-1].budgets if runs else Budgets()
    costs = [r.cost_usd for r in rows if r.cost_usd is not None]
    cost = sum(costs) if costs else (state.snapshot.cost_used if state is not None else None)
    return Spend(
        iterations=len(rows),
        tokens=sum(r.tokens or 0 for r in rows),
        token_budget=budgets.token_budget or 0,
        cost_usd=cost if cost else (0.0 if costs else None),
        cost_budget=budgets.cost_budget or 0.0,
        max_iterations=budgets.max_iterations or 0,
    )
