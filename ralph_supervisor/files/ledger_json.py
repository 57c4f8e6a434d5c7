"""`ledger.json`: the loop-context ledger the supervisor writes itself, one attempt per observed iteration.

So `ralph-supervise check -f STATE_DIR/ledger.json`, or loop-context itself, can judge a live loop.
Bounded: the last `MAX_ATTEMPTS` attempts are kept (the rules judge the recent tail), across runs.
Rewritten at every call (at most once per `pacing.PACE_S`: records.py), so cheaply: each attempt's JSON is made
once, the file is those pieces joined (the same text as `dump_ledger`), written atomically without fsync
(store.py: per-call bookkeeping).

    >>> ledger = Ledger(Path("/tmp/ralph-example/.ralph-supervise"), goal="supervised: ./ralph_loop.sh")
    >>> ledger.add(report); ledger.write()   # doctest: +SKIP
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ralph_supervisor import store
from ralph_supervisor.iteration import IterationReport
from ralph_supervisor.ledger import attempt_dict, dump_ledger

NAME = "ledger.json"
MAX_ATTEMPTS = 1000
GOAL_MAX = 200


def path(state_dir: Path) -> Path:
    return state_dir / NAME


class Ledger:
    """The attempts so far (read once at start; a corrupt file is moved aside and reported) and the writer."""

    def __init__(self, state_dir: Path, goal: str) -> None:
        self.state_dir = state_dir
        self.goal = goal[:GOAL_MAX]
        self.warning: str | None = None
        self.attempts: list[dict[str, Any]] = []
        try:
            data = store.read_json_object(path(state_dir))
        except store.CorruptFile as exc:
            self.warning = str(exc) + (f"; moved to {exc.moved_to.name}" if exc.moved_to else "")
            data = None
        attempts = data.get("attempts") if data else None
        if isinstance(attempts, list):
            self.attempts = [a for a in attempts if isinstance(a, dict)][-MAX_ATTEMPTS:]
        self._pieces = [_piece(a) for a in self.attempts]
        """Each attempt as the file holds it (indented JSON): made once, joined at every write."""

    def add(self, report: IterationReport) -> None:
        """Add the iteration's attempt (`write` puts it in the file)."""
        attempt = attempt_dict(report.number, action_summary(report), outcome_of(report),
                               report.first_error or None, report.tokens or 0)
        self.attempts.append(attempt)
        self._pieces.append(_piece(attempt))
        del self.attempts[:-MAX_ATTEMPTS]
        del self._pieces[:-MAX_ATTEMPTS]

    def write(self) -> None:
        """Rewrite the file atomically. Raises OSError (a full disk)."""
        store.atomic_write_text(path(self.state_dir), self.text(), durable=False)

    def text(self) -> str:
        """The file's text: `dump_ledger(goal, attempts)`, from the pieces."""
        if not self._pieces:
            return dump_ledger(self.goal, [])
        goal = json.dumps(self.goal, ensure_ascii=False)
        return '{\n  "goal": ' + goal + ',\n  "attempts": [\n' + ",\n".join(self._pieces) + "\n  ]\n}\n"


def _piece(attempt: dict[str, Any]) -> str:
    """One attempt as `dump_ledger` writes it inside the list (two levels deep: four spaces more)."""
    return "    " + json.dumps(attempt, indent=2, ensure_ascii=False).replace("\n", "\n    ")


def read_attempts(state_dir: Path) -> tuple[list[dict[str, Any]], str | None]:
    """The attempts as they are (one per iteration: action, outcome, error, tokens), for the report, or none
    and a one-line warning; only reads (the supervisor moves a bad file aside at its start)."""
    file = path(state_dir)
    try:
        data = json.loads(file.read_bytes())
    except FileNotFoundError:
        return [], None
    except (OSError, ValueError, RecursionError) as exc:
        return [], f"{NAME} is unreadable ({str(exc)[:120]}): the agent's actions are not shown"
    attempts = data.get("attempts") if isinstance(data, dict) else None
    if not isinstance(attempts, list):
        return [], f"{NAME} has no attempts list: the agent's actions are not shown"
    return [a for a in attempts if isinstance(a, dict)], None


def outcome_of(report: IterationReport) -> str:
    """The ledger's outcome: success (progress), failure (a failed call or an error), noop (neither)."""
    if report.progress:
        return "success"
    if report.outage:
        return "noop"  # the API was out of reach: not the agent's failure (counted toward no rule)
    if report.failed or report.blocked or report.error_signatures:
        return "failure"
    return "noop"


def action_summary(report: IterationReport) -> str:
    """A short summary of what the agent said it did (its reply's first line, or what happened)."""
    if report.usage_limited:
        return "usage limit reached"
    if report.outage:
        return f"API unreachable: {report.outage_message}"[:200]
    if report.blocked:
        return f"blocked: {report.blocked_reason}"[:200]
    if report.reply:
        for line in report.reply.splitlines():
            if line.strip():
                return line.strip()[:200]
    if report.failed:
        return "failed call"
    return "no reply"
