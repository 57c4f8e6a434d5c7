"""The daily token budget of `check` (`--daily-token-budget`, `--daily-budget-from-pattern`): the day's spend
across checks, each attempt counted once however often its ledger is checked.

Imported only when a check has a daily cap, so a plain check does not pay for json, hashlib and dataclasses.

    >>> state, added = record_daily_spend(None, ledger, "2026-11-30")    # doctest: +SKIP
    >>> apply_daily_budget(check_breaker(ledger), state.tokens_used_today, 80000, "issue-triage")  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from ralph_supervisor.ledger import Ledger, LedgerError, Verdict, json_type

MAX_COUNTED_LEDGERS = 500


@dataclass(frozen=True)
class CountedLedger:
    """A ledger already counted today: how many of its attempts, and the hash of that prefix."""

    attempts: int
    hash: str


@dataclass(frozen=True)
class DailyState:
    """`.loop-context/daily-spend.<key>.json`: loop-context's two keys plus which ledgers we counted."""

    date: str
    tokens_used_today: int
    counted: tuple[CountedLedger, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return {
            "date": self.date,
            "tokensUsedToday": self.tokens_used_today,
            "countedLedgers": [{"attempts": c.attempts, "hash": c.hash} for c in self.counted],
        }


def daily_state_from_json(raw: Any) -> DailyState:
    """Read a state file's object. loop-context's own files (no countedLedgers) are accepted."""
    if not isinstance(raw, dict):
        raise LedgerError(f"expected an object, got {json_type(raw)}")
    date = raw.get("date")
    spent = raw.get("tokensUsedToday")
    if not isinstance(date, str):
        raise LedgerError("date must be a string")
    if (
        isinstance(spent, bool)
        or not isinstance(spent, (int, float))
        or not math.isfinite(spent)
        or spent < 0
        or spent != int(spent)
    ):
        raise LedgerError("tokensUsedToday must be a non-negative integer")
    counted_raw = raw.get("countedLedgers", [])
    if not isinstance(counted_raw, list):
        raise LedgerError("countedLedgers must be an array")
    counted = []
    for i, c in enumerate(counted_raw):
        if (
            not isinstance(c, dict)
            or isinstance(c.get("attempts"), bool)
            or not isinstance(c.get("attempts"), int)
            or not isinstance(c.get("hash"), str)
        ):
            raise LedgerError(f"countedLedgers[{i}] must be {{attempts: integer, hash: string}}")
        counted.append(CountedLedger(c["attempts"], c["hash"]))
    return DailyState(date, int(spent), tuple(counted))


def prefix_hashes(ledger: Ledger) -> list[str]:
    """hashes[i] identifies the ledger's first i attempts (a hash chain seeded by the goal)."""
    h = hashlib.sha256(("goal\0" + ledger.goal).encode("utf-8", "surrogatepass")).hexdigest()
    out = [h]
    for a in ledger.attempts:
        canon = json.dumps(
            [a.iteration, a.action, a.outcome, a.error, a.tokens_used], ensure_ascii=True, sort_keys=True
        )
        h = hashlib.sha256((h + canon).encode("ascii")).hexdigest()
        out.append(h)
    return out


def record_daily_spend(state: DailyState | None, ledger: Ledger, today: str) -> tuple[DailyState, int]:
    """Add the tokens of the attempts not counted yet today; returns the new state and the tokens added.

    A ledger already seen (same prefix of attempts) adds only its new attempts, so checking an unchanged
    ledger twice adds nothing. A ledger whose earlier attempts changed is a different run and counts whole.
    """
    if state is None or state.date != today:
        state = DailyState(today, 0, ())
    hashes = prefix_hashes(ledger)
    n = len(ledger.attempts)
    best: CountedLedger | None = None
    for c in state.counted:
        if 0 <= c.attempts <= n and hashes[c.attempts] == c.hash and (best is None or c.attempts > best.attempts):
            best = c
    already = best.attempts if best is not None else 0
    added = sum(a.tokens_used for a in ledger.attempts[already:])
    kept = tuple(c for c in state.counted if c is not best)
    counted = (kept + (CountedLedger(n, hashes[n]),))[-MAX_COUNTED_LEDGERS:]
    return DailyState(today, state.tokens_used_today + added, counted), added


def apply_daily_budget(decision: Verdict, spent_today: int, cap: int, pattern: str | None) -> Verdict:
    """Escalate on the daily cap, but only when no per-run rule already did (loop-context's order)."""
    if decision.escalate or spent_today < cap:
        return decision
    what = f'Daily token spend for pattern "{pattern}"' if pattern else "Daily token spend"
    return Verdict(
        decision.iterations,
        decision.tokens_used,
        False,
        True,
        "daily-budget",
        f"{what} reached {spent_today} (cap {cap}). Escalating to avoid cost blowup.",
    )
