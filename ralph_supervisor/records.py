"""The records a running supervisor keeps in its state folder, through the owner of each file.

One object, so the supervisor has one place to say "write this down": a transition (history line, then
the log event), the breaker (`state.json`), an attempt (`ledger.json`), the day's spend (`daily-spend.json`),
the escalation summary. A full or read-only disk costs the record, never the supervision: each kind of
failure is warned about once, and the day's spend is counted in memory meanwhile.

A transition is written durably (the history line and `state.json`, each fsynced); what moves at every agent
call (the breaker's counters in `state.json`, `ledger.json`, the day's spend) is written atomically without
fsync (store.py says what each survives).

    >>> records = Records(state_dir, goal="supervised: ./ralph_loop.sh")   # doctest: +SKIP
    >>> records.transition(decision); records.save(breaker.snapshot())     # doctest: +SKIP
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import structlog

from ralph_supervisor import events
from ralph_supervisor.breaker import Decision, Snapshot
from ralph_supervisor.files import daily_spend_json, escalation_md, history_jsonl, ledger_json, state_json
from ralph_supervisor.files.daily_spend_json import DailySpend
from ralph_supervisor.iteration import IterationReport

log = structlog.get_logger("ralph_supervisor")


class Warnings:
    """One warning per kind of trouble (a full disk would otherwise say so every iteration)."""

    def __init__(self) -> None:
        self._said: set[str] = set()

    def once(self, key: str, *, event_name: str | None = None, **fields: Any) -> None:
        """Warn about `key` the first time only (the event is named `key` unless `event_name` says)."""
        if key not in self._said:
            self._said.add(key)
            log.warning(event_name or key, **fields)

    def said(self, key: str) -> bool:
        return key in self._said


class Records:
    def __init__(self, state_dir: Path, goal: str, warnings: Warnings | None = None) -> None:
        self.state_dir = state_dir
        self.warnings = warnings or Warnings()
        self.history = history_jsonl.History(
            state_dir, on_error=lambda exc: self.warnings.once("history_unwritable", error=str(exc)))
        self.ledger = ledger_json.Ledger(state_dir, goal)
        if self.ledger.warning:
            log.warning("ledger_corrupt", detail=self.ledger.warning)
        self.spend_dir = state_dir
        """Where today's spend is counted: this folder, or the checkout's for a run in a worktree (worktree.py),
        so the daily budgets hold across the worktrees of one repository."""
        self._daily_fallback = DailySpend("")
        """Today's spend counted in memory while daily-spend.json cannot be written."""
        self._saved_mark: tuple[Any, ...] | None = None
        """What of the breaker the last state.json holds that only a transition changes (see `save`)."""

    def transition(self, decision: Decision, **fields: Any) -> dict[str, Any]:
        """The history line first, then the `breaker_transition` event (the state is saved after it)."""
        line = self.history.record(decision)
        log.info(events.BREAKER_TRANSITION, **{k: v for k, v in line.items() if k != "ts"}, final=decision.final, **fields)
        return line

    def save(self, snapshot: Snapshot, *, limit_until: float | None = None) -> None:
        """Write the breaker's snapshot: durably when its state changed (a transition, an open, a usage-limit
        wait begun or ended) since the last save, without fsync when only its counters moved."""
        mark = (snapshot.state, snapshot.trigger, snapshot.final, snapshot.total_opens, snapshot.opened_at,
                limit_until)
        try:
            state_json.save(self.state_dir, snapshot, supervisor_pid=os.getpid(), limit_until=limit_until,
                            durable=mark != self._saved_mark)
        except OSError as exc:
            self.warnings.once("state_unwritable", error=str(exc))
            return
        self._saved_mark = mark

    def attempt(self, report: IterationReport) -> None:
        try:
            self.ledger.append(report)
        except OSError as exc:
            self.warnings.once("ledger_unwritable", error=str(exc))

    def spend(self, tokens: int, cost_usd: float, now: float) -> DailySpend:
        """Today's spend across runs, this call's added once."""
        try:
            if tokens or cost_usd:
                spend, warning = daily_spend_json.add(self.spend_dir, tokens, cost_usd, now)
            else:
                spend, warning = daily_spend_json.load(self.spend_dir, now)
        except OSError as exc:
            self.warnings.once("daily_spend_unwritable", error=str(exc))
            fallback = self._daily_fallback.today(now)
            self._daily_fallback = DailySpend(fallback.date, fallback.tokens + max(0, tokens),
                                              fallback.cost_usd + max(0.0, cost_usd))
            return self._daily_fallback
        if warning:
            self.warnings.once("daily_spend_corrupt", detail=warning)
        return spend

    def escalation(self, text: str) -> None:
        try:
            escalation_md.write(self.state_dir, text)
        except OSError as exc:
            self.warnings.once("escalation_unwritable", error=str(exc))

    def history_tail(self, count: int) -> list[dict[str, Any]]:
        return history_jsonl.tail(self.state_dir, count)

    def close(self) -> None:
        self.history.close()
