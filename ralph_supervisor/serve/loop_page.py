"""What a loop's own page shows of its report: the account `report/` builds from the state folder (without
git, so the page stays light), cut to what the page draws, and escalation.md's text.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ralph_supervisor.text import one_line

ESCALATION_CHARS = 64 * 1024


def _escalation_text(state_dir: Path) -> str | None:
    """escalation.md's text (its first 64 KiB) when the breaker has opened, else None."""
    from ralph_supervisor.files import escalation_md

    try:
        with open(escalation_md.path(state_dir), "rb") as fh:
            return fh.read(ESCALATION_CHARS).decode("utf-8", "replace")
    except OSError:
        return None


def loop_report(state_dir: Path) -> dict[str, Any]:
    """The report's content for the loop's page (no git: the page must stay light), JSON-ready."""
    from ralph_supervisor.report import collect
    from ralph_supervisor.report.html import plot_data

    try:
        account = collect(state_dir, git=False)
    except Exception as exc:  # noqa: BLE001 - a bad state folder is a line on the page, not a crash
        return {"error": f"the report could not be read: {one_line(exc, 200)}"}
    rows = account.iterations[-200:]
    return {
        "verdict": dataclasses.asdict(account.verdict),
        "spend": dataclasses.asdict(account.spend),
        "wall_s": account.wall_s,
        "plot": plot_data(account),
        "iterations": [{"n": r.number, "outcome": r.label or r.outcome, "files": r.files_changed,
                        "commits": r.commits, "errors": r.errors, "tokens": r.tokens,
                        "note": one_line(r.first_error or r.action or r.reply, 160)} for r in reversed(rows)],
        "errors": [dataclasses.asdict(e) for e in account.errors[:20]],
        "blockers": [dataclasses.asdict(b) for b in account.blockers[:20]],
        "last_reply": dataclasses.asdict(account.last_reply) if account.last_reply else None,
        "decide": list(account.decide),
        "next_steps": list(account.next_steps),
        "escalation": _escalation_text(state_dir),
        "warnings": list(account.warnings),
    }
