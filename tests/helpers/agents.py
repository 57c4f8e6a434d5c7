"""Helpers for the agent adapter tests: the Claude adapter at a fixed time, and one line's classification."""

from __future__ import annotations

import json
from datetime import timezone
from pathlib import Path

from ralph_supervisor.agents import ADAPTERS
from ralph_supervisor.agents.base import AgentOutput, LineClass, classify_plain, read_output
from ralph_supervisor.agents.claude import classify_event

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agent"
NOW = 1764550800.0
"""2025-12-01 01:00 UTC: shortly before the Claude fixtures' limits reset."""


def claude_output(text: str, timed_out: bool = False) -> AgentOutput:
    return ADAPTERS["claude"].read(read_output(text), timed_out=timed_out, now=NOW, tz=timezone.utc)


def classify_line(line: str) -> LineClass | None:
    """Streaming detection for one line: a decoded event's error positions, or an error-shaped plain line."""
    try:
        event = json.loads(line)
    except (ValueError, RecursionError):
        event = None
    if isinstance(event, dict):
        return classify_event(event)[0]
    if isinstance(event, list):
        return next((cls for item in event if isinstance(item, dict) for cls in [classify_event(item)[0]] if cls), None)
    return classify_plain(line)[0]
