"""The fields of the events more than one module reads: one frozen value per event, read here once.

`events.py` names the events; this module reads the fields of those whose fields the report, `watch`, the web
page and the console all use, so each field has one conversion (`values.as_int` and the like: a missing,
damaged or hand-edited field gives a usable value or None, never an exception) and no reader names a key of
these events itself. An event read in one module only (`breaker_transition` by the console, `verify_finished`
by the page, `cgroup_figures` by the report) keeps its keys in that module; a field every event carries (`ts`,
`iteration`) is the envelope, read where it is used. `tests/test_event_fields.py` checks that every key read
here is one somebody writes, and that no function that handles one of these events reads its keys itself.

    >>> done = IterationFinished.of({"event": "iteration_finished", "iteration": 4, "files_changed": "2",
    ...                              "outcome": "success", "failed": False})
    >>> (done.iteration, done.files_changed, done.said().label)
    (4, 2, '✔ progress')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ralph_supervisor import events
from ralph_supervisor.outcomes import Outcome, outcome_of
from ralph_supervisor.values import as_float, as_int, as_opt_int, as_text, parse_time


def _time_of(record: Mapping[str, Any]) -> tuple[str, float | None]:
    """When the event was written, as written and as epoch seconds (`ts`; structlog's `timestamp` in older logs)."""
    ts = record.get("ts") or record.get("timestamp")
    return as_text(ts, 40), parse_time(ts)


def _flag(value: Any) -> bool:
    """A flag is set only by a JSON `true`."""
    return value is True


def _count(value: Any) -> int | None:
    """A number given as a number (not a bool, a text or a list), as an int; None otherwise."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return as_opt_int(value) if value == value and abs(value) < 1e18 else None
    return None


def _amount(value: Any) -> float | None:
    """A number given as a number (not a bool or a text), finite; None otherwise."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return as_float(value)
    return None


# -- an agent call ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class IterationFinished:
    """`iteration_finished`: what one agent call came to (written by the call judge, `runtime/judge.py`, with
    `report.sources.iteration_fields`)."""

    iteration: int | None = None
    ts: str = ""
    """The time as written (a view shows it as it is when it is not a time)."""
    at: float | None = None
    files_changed: int = 0
    commits: int = 0
    output_bytes: int = 0
    errors: int | None = None
    """The count of error signatures; None when the record does not say (the report counts its signatures)."""
    tokens: int | None = None
    cost_usd: float | None = None
    duration_s: float | None = None
    outcome: str = ""
    """The ledger's word: success, failure or noop ("" when the record has none)."""
    failed: bool | None = None
    """None when the record does not say (a hand-made or older record: its `outcome` says it)."""
    usage_limited: bool = False
    blocked: bool = False
    cut_short: bool = False
    completed: bool = False
    outage: bool = False
    states_blocker: bool = False
    returned_to: int | None = None
    reply: str = ""
    first_error: str = ""
    blocked_reason: str = ""
    error_signatures: tuple[str, ...] | None = None
    """None when the record holds no list of them."""
    status_block: Mapping[str, str] = field(default_factory=dict)
    """The reply's RALPH_STATUS block, at most 12 fields."""

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> IterationFinished:
        ts, at = _time_of(record)
        signatures = record.get("error_signatures")
        block = record.get("status_block")
        return cls(
            iteration=as_opt_int(record.get("iteration")),
            ts=ts,
            at=at,
            files_changed=as_int(record.get("files_changed")),
            commits=as_int(record.get("commits")),
            output_bytes=as_int(record.get("output_bytes")),
            errors=as_int(record.get("errors")) if "errors" in record else None,
            tokens=as_opt_int(record.get("tokens")),
            cost_usd=as_float(record.get("cost_usd")),
            duration_s=as_float(record.get("duration_s")),
            outcome=as_text(record.get("outcome"), 20),
            failed=_flag(record.get("failed")) if "failed" in record else None,
            usage_limited=_flag(record.get("usage_limited")),
            blocked=_flag(record.get("blocked")),
            cut_short=_flag(record.get("cut_short")),
            completed=_flag(record.get("completed")),
            outage=_flag(record.get("outage")),
            states_blocker=_flag(record.get("states_blocker")),
            returned_to=as_opt_int(record.get("returned_to")),
            reply=as_text(record.get("reply"), 500),
            first_error=as_text(record.get("first_error"), 300),
            blocked_reason=as_text(record.get("blocked_reason"), 300),
            error_signatures=(tuple(as_text(s, 200) for s in signatures if isinstance(s, str))
                              if isinstance(signatures, list) else None),
            status_block=({as_text(k, 40): as_text(v, 200) for k, v in list(block.items())[:12]}
                          if isinstance(block, Mapping) else {}),
        )

    def said(self) -> Outcome:
        """The outcome as the console and `watch` say it; a record that does not say whether it failed failed
        when its `outcome` is `failure`."""
        failed = self.failed if self.failed is not None else self.outcome == "failure"
        return outcome_of(progress=self.outcome == "success", failed=failed, usage_limited=self.usage_limited,
                          blocked=self.blocked, cut_short=self.cut_short, outage=self.outage)


# -- a supervisor run and its loop -----------------------------------------------------------------


@dataclass(frozen=True)
class Budgets:
    """`supervisor_started`'s `budgets`: the caps a run is measured against (`report.sources.started_fields`).
    A number is None when the run had none written (or something that is not a number)."""

    token_budget: int | None = None
    cost_budget: float | None = None
    daily_token_budget: int | None = None
    daily_cost_budget: float | None = None
    max_iterations: int | None = None
    on_open: str = ""
    """`pause` or `kill` ("" when not said)."""
    name: str = ""
    """The loop's `--name`."""
    sandbox: str = ""

    @classmethod
    def of(cls, value: Any) -> Budgets:
        if not isinstance(value, Mapping):
            return cls()
        return cls(
            token_budget=_count(value.get("token_budget")),
            cost_budget=_amount(value.get("cost_budget")),
            daily_token_budget=_count(value.get("daily_token_budget")),
            daily_cost_budget=_amount(value.get("daily_cost_budget")),
            max_iterations=_count(value.get("max_iterations")),
            on_open=as_text(value.get("on_open"), 10),
            name=as_text(value.get("name"), 60),
            sandbox=as_text(value.get("sandbox"), 20),
        )

    def numbers(self) -> dict[str, int | float]:
        """The caps that are numbers, by their names (what the web page shows)."""
        caps = {"token_budget": self.token_budget, "cost_budget": self.cost_budget,
                "max_iterations": self.max_iterations, "daily_token_budget": self.daily_token_budget,
                "daily_cost_budget": self.daily_cost_budget}
        return {name: value for name, value in caps.items() if value is not None}


@dataclass(frozen=True)
class SupervisorStarted:
    """`supervisor_started`: the run's first line after the sweep (written by `supervisor.py`)."""

    ts: str = ""
    at: float | None = None
    workspace: str = ""
    state_dir: str = ""
    command: tuple[str, ...] = ()
    budgets: Budgets = Budgets()

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> SupervisorStarted:
        ts, at = _time_of(record)
        command = record.get("command")
        return cls(ts=ts, at=at, workspace=as_text(record.get("workspace"), 500),
                   state_dir=as_text(record.get("state_dir"), 500),
                   command=tuple(str(c) for c in command) if isinstance(command, list) else (),
                   budgets=Budgets.of(record.get("budgets")))


@dataclass(frozen=True)
class SupervisorStopped:
    """`supervisor_stopped`: the run's last line, with the supervisor's exit `code`."""

    at: float | None = None
    code: int | None = None

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> SupervisorStopped:
        return cls(at=_time_of(record)[1], code=as_opt_int(record.get("code")))


@dataclass(frozen=True)
class ChildExited:
    """`child_exited`: the loop's command ended by itself."""

    code: int | None = None
    iteration: int | None = None

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> ChildExited:
        return cls(code=as_opt_int(record.get("code")), iteration=as_opt_int(record.get("iteration")))


@dataclass(frozen=True)
class TreeStopped:
    """`tree_stopped`: the loop's whole tree stopped (`tree_actions.py`); `reason` is one of `events.STOP_*`."""

    reason: str = ""
    survivors: int = 0
    survivor_pids: tuple[int, ...] = ()

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> TreeStopped:
        pids = record.get("survivor_pids")
        return cls(reason=as_text(record.get("reason"), 60), survivors=as_int(record.get("survivors")),
                   survivor_pids=tuple(p for p in (as_opt_int(v) for v in pids) if p is not None)
                   if isinstance(pids, list) else ())


# -- waits -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LimitWaitStarted:
    """`limit_wait_started`: the tree frozen until `until` (a usage limit, the usage ceiling, an outage's
    back-off: `kind`; written by `runtime/wait_episode.py`)."""

    until: float | None = None
    kind: str = ""
    reason: str = ""
    iteration: int | None = None

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> LimitWaitStarted:
        return cls(until=parse_time(record.get("until")), kind=as_text(record.get("kind"), 20),
                   reason=as_text(record.get("reason"), 1000), iteration=as_opt_int(record.get("iteration")))


@dataclass(frozen=True)
class OutageStarted:
    """`outage_started`: the agent says it cannot reach its API (`loop_waits.py`)."""

    since: float | None = None
    message: str = ""

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> OutageStarted:
        return cls(since=parse_time(record.get("since")), message=as_text(record.get("message"), 300))


@dataclass(frozen=True)
class OutageEnded:
    """`outage_ended`: after `seconds`, for `why`."""

    seconds: float | None = None
    why: str = ""

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> OutageEnded:
        return cls(seconds=as_float(record.get("seconds")), why=as_text(record.get("why"), 300))


@dataclass(frozen=True)
class UsageWindow:
    """One window of `usage_high` (`agents/usage.UsageWindow.to_dict`)."""

    window: str = ""
    utilization: float | None = None
    resets_at: float | None = None


@dataclass(frozen=True)
class UsageHigh:
    """`usage_high`: the usage windows at 75 % or more after a call (`loop_waits.py`)."""

    windows: tuple[UsageWindow, ...] | None = None
    """None when the record holds no list of windows (an entry that is not an object is left out)."""

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> UsageHigh:
        windows = record.get("windows")
        if not isinstance(windows, list):
            return cls()
        return cls(tuple(UsageWindow(window=as_text(w.get("window"), 40), utilization=as_float(w.get("utilization")),
                                     resets_at=parse_time(w.get("resets_at")))
                         for w in windows[:20] if isinstance(w, Mapping)))


READERS: Mapping[str, Any] = {
    events.ITERATION_FINISHED: IterationFinished, events.SUPERVISOR_STARTED: SupervisorStarted,
    events.SUPERVISOR_STOPPED: SupervisorStopped,
    events.CHILD_EXITED: ChildExited, events.TREE_STOPPED: TreeStopped, events.LIMIT_WAIT_STARTED: LimitWaitStarted,
    events.OUTAGE_STARTED: OutageStarted, events.OUTAGE_ENDED: OutageEnded, events.USAGE_HIGH: UsageHigh,
}
"""The events read here, and the value each is read as (`READERS[name].of(record)`)."""
