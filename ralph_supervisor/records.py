"""The records a running supervisor keeps in its state folder, through the owner of each file.

One object, so the supervisor has one place to say "write this down": a transition (history line, then
the log event), the breaker (`state.json`), an attempt (`ledger.json`), the day's spend (`daily-spend.json`),
the escalation summary. A full or read-only disk costs the record, never the supervision: each kind of
failure is warned about once, and the day's spend is counted in memory meanwhile.

A transition is written durably (the history line and `state.json`, each fsynced); what moves at every agent
call (the breaker's counters in `state.json`, `ledger.json`, the day's spend) is written atomically without
fsync (store.py says what each survives), and at most once per `PACE_S` while calls come faster than that
(pacing.py). A transition, `flush` (the exit) and the start of a call write at once what waits.

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
from ralph_supervisor.files.pacing import PACE_S, PacedFile
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
    def __init__(self, state_dir: Path, goal: str, warnings: Warnings | None = None, *, pace_s: float = PACE_S) -> None:
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
        self._saved_mark: tuple[Any, ...] | None = None
        """What of the breaker the last state.json holds that only a transition changes (see `save`)."""
        self._state_next: tuple[Snapshot, float | None] | None = None
        """The breaker's snapshot (and the end of a wait) to write next."""
        self._spend_seen = DailySpend("")
        """Today's spend as daily-spend.json last said (this run's and the other runs')."""
        self._spend_unsaved = DailySpend("")
        """This run's spend not in daily-spend.json yet: waiting to be written, or the folder cannot be written
        (counted all the same, added at the next write that succeeds)."""
        self._spend_at = 0.0
        """The time of the last call's spend: its day is the day the unsaved spend is added to."""
        self._state_file = PacedFile(self._write_state, pace_s)
        self._ledger_file = PacedFile(self._write_ledger, pace_s)
        self._spend_file = PacedFile(self._write_spend, pace_s)

    def transition(self, decision: Decision, **fields: Any) -> dict[str, Any]:
        """The history line first, then the `breaker_transition` event (the state is saved after it)."""
        line = self.history.record(decision)
        log.info(events.BREAKER_TRANSITION, **{k: v for k, v in line.items() if k != "ts"}, final=decision.final, **fields)
        return line

    def save(self, snapshot: Snapshot, *, limit_until: float | None = None, paced: bool = False) -> None:
        """Write the breaker's snapshot: durably when its state changed (a transition, an open, a usage-limit
        wait begun or ended) since the last save, and with it whatever else waits; without fsync when only its
        counters moved, and `paced` (a call's end): now or soon (pacing.py)."""
        self._state_next = (snapshot, limit_until)
        if _mark(snapshot, limit_until) != self._saved_mark:
            self._ledger_file.flush()  # a report about the transition reads the ledger: every attempt is in it
            self._spend_file.flush()
            self._state_file.write_now()
        elif paced:
            self._state_file.changed()
        else:
            self._state_file.write_now()

    def attempt(self, report: IterationReport) -> None:
        """The iteration's attempt in `ledger.json` (now or soon)."""
        self.ledger.add(report)
        self._ledger_file.changed()

    def spend(self, tokens: int, cost_usd: float, now: float) -> DailySpend:
        """Today's spend across runs, this call's added once (to daily-spend.json now or soon)."""
        if tokens or cost_usd:
            unsaved = self._spend_unsaved.today(now)
            self._spend_unsaved = DailySpend(unsaved.date, unsaved.tokens + max(0, tokens),
                                             unsaved.cost_usd + max(0.0, cost_usd))
            self._spend_at = now
            self._spend_file.changed()
        elif not self._spend_file.waiting:
            self._load_spend(now)  # what the other runs spent meanwhile
        seen, unsaved = self._spend_seen.today(now), self._spend_unsaved.today(now)
        return DailySpend(seen.date, seen.tokens + unsaved.tokens, seen.cost_usd + unsaved.cost_usd)

    def flush(self) -> None:
        """Write now whatever waits (the exit, a failure)."""
        self._ledger_file.flush()
        self._spend_file.flush()
        self._state_file.flush()

    def _write_state(self) -> None:
        assert self._state_next is not None  # written only after a save
        snapshot, limit_until = self._state_next
        mark = _mark(snapshot, limit_until)
        try:
            state_json.save(self.state_dir, snapshot, supervisor_pid=os.getpid(), limit_until=limit_until,
                            durable=mark != self._saved_mark)
        except OSError as exc:
            self.warnings.once("state_unwritable", error=str(exc))
            return
        self._saved_mark = mark

    def _write_ledger(self) -> None:
        try:
            self.ledger.write()
        except OSError as exc:
            self.warnings.once("ledger_unwritable", error=str(exc))

    def _write_spend(self) -> None:
        now = self._spend_at
        unsaved = self._spend_unsaved.today(now)
        try:
            spend, warning = daily_spend_json.add(self.spend_dir, unsaved.tokens, unsaved.cost_usd, now)
        except OSError as exc:
            self.warnings.once("daily_spend_unwritable", error=str(exc))
            return
        self._spend_seen, self._spend_unsaved = spend, DailySpend(spend.date)
        if warning:
            self.warnings.once("daily_spend_corrupt", detail=warning)

    def _load_spend(self, now: float) -> None:
        try:
            spend, warning = daily_spend_json.load(self.spend_dir, now)
        except OSError as exc:
            self.warnings.once("daily_spend_unwritable", error=str(exc))
            return
        self._spend_seen = spend
        if warning:
            self.warnings.once("daily_spend_corrupt", detail=warning)

    def escalation(self, text: str) -> None:
        try:
            escalation_md.write(self.state_dir, text)
        except OSError as exc:
            self.warnings.once("escalation_unwritable", error=str(exc))

    def history_tail(self, count: int) -> list[dict[str, Any]]:
        return history_jsonl.tail(self.state_dir, count)

    def close(self) -> None:
        self.flush()
        self.history.close()


def _mark(snapshot: Snapshot, limit_until: float | None) -> tuple[Any, ...]:
    """What of the breaker only a transition (or a wait begun or ended) changes: a save that changes it is
    durable and never waits."""
    return (snapshot.state, snapshot.trigger, snapshot.final, snapshot.total_opens, snapshot.opened_at, limit_until)
