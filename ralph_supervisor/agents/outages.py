"""When the agent itself says it cannot reach its API: pure readers of its own status reports.

An outage is a wait, not the loop's failure (`outage.py`), so only the agent's *own* reports count, never
text that a tool prints inside a call (a test's `ECONNREFUSED 127.0.0.1:5432` is inside a tool result, a
JSON string, never a top-level event of the agent):

- Claude Code (stream-json): `{"type": "system", "subtype": "api_retry", "attempt": 1, "max_retries": 10,
  "retry_delay_ms": 529, "error_status": null, "error": "unknown", ...}` (2.1.197, recorded offline). A retry
  with status 429/529 is a usage limit and 401-403 is blocked (`claude.py`): not an outage.
- Codex (`exec --json`): a top-level `{"type": "error", "message": "Reconnecting... 2/5 (stream disconnected
  before completion: ...)"}` and `Reconnecting... waiting for network (...)` (0.171.0, recorded offline).
- The other adapters: their own error events whose text says the network or the API is unreachable
  (`API_UNREACHABLE`).

A call reached its API when the agent printed something only an answer produces: an assistant message, a
successful result (Claude); a completed turn, an agent message or reasoning (Codex).

    >>> retry_message({"type": "system", "subtype": "api_retry", "attempt": 2, "max_retries": 10,
    ...                "error_status": None, "error": "unknown"})
    'api_retry 2/10: unknown'
    >>> retry_message({"type": "error", "message": "Reconnecting... waiting for network (x)"})
    'Reconnecting... waiting for network (x)'
    >>> reached_api({"type": "turn.completed", "usage": {}})
    True
"""

from __future__ import annotations

import json
import re
from typing import Any

MESSAGE_CHARS = 300

API_UNREACHABLE = re.compile(
    r"\bConnection error\b|Unable to connect\b|failed to lookup address|stream disconnected"
    r"|\bENOTFOUND\b|\bEAI_AGAIN\b|getaddrinfo|\bfetch failed\b|network (?:is )?unreachable|waiting for network"
    r"|error sending request|socket hang up|\bECONNRESET\b",
    re.IGNORECASE,
)
"""An agent's own error text that says its API is out of reach (ECONNREFUSED is left out: a local service a
test needs is the usual case, not the agent's API)."""

_LIMIT_OR_BLOCKED = frozenset({401, 402, 403, 429, 529})
_LIVE_HINTS = ("api_retry", "Reconnecting...", "waiting for network")
_REACHED_HINTS = ('"assistant"', '"result"', "turn.completed", "agent_message", '"reasoning"')


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS - 1] + "…"


def retry_message(event: Any) -> str | None:
    """The agent's own report that it is retrying an unreachable API, as one line; else None."""
    if not isinstance(event, dict):
        return None
    kind = event.get("type")
    if kind == "system" and event.get("subtype") == "api_retry":
        status = event.get("error_status")
        if isinstance(status, int) and not isinstance(status, bool) and status in _LIMIT_OR_BLOCKED:
            return None
        attempt, most = event.get("attempt"), event.get("max_retries")
        count = f" {attempt}/{most}" if isinstance(attempt, int) and isinstance(most, int) else ""
        error = event.get("error")
        said = error if isinstance(error, str) and error else "no answer"
        if isinstance(status, int) and not isinstance(status, bool):
            said += f", HTTP {status}"
        return _clip(f"api_retry{count}: {said}")
    if kind == "error":
        message = event.get("message")
        if isinstance(message, str) and (message.startswith("Reconnecting...") or "waiting for network" in message):
            return _clip(message)
    return None


def reached_api(event: Any) -> bool:
    """The event is something only an answer from the API produces."""
    if not isinstance(event, dict):
        return False
    kind = event.get("type")
    if kind == "assistant":
        message = event.get("message")
        synthetic = bool(event.get("error")) or (isinstance(message, dict) and message.get("model") == "<synthetic>")
        return not synthetic
    if kind == "result":
        return event.get("is_error") is False
    if kind == "turn.completed":
        return True
    if kind in ("item.completed", "item.updated"):
        item = event.get("item")
        return isinstance(item, dict) and item.get("type") in ("agent_message", "reasoning")
    return False


def scan_lines(text: str, *, in_outage: bool = False) -> tuple[str | None, bool]:
    """Live, over a chunk of a call's output: (the last retry report in it, whether it shows the API reached
    after that report). Substring tests first, so ordinary output costs almost nothing; answers are looked
    for only `in_outage` (they are most of a healthy call's lines)."""
    if not in_outage and not any(hint in text for hint in _LIVE_HINTS):
        return None, False
    hints = _LIVE_HINTS + _REACHED_HINTS
    last: str | None = None
    reached = False
    for line in text.split("\n"):
        stripped = line.strip()
        if not stripped.startswith("{") or not any(hint in stripped for hint in hints):
            continue
        try:
            event = json.loads(stripped)
        except (ValueError, RecursionError):
            continue
        said = retry_message(event)
        if said is not None:
            last, reached = said, False
        elif reached_api(event) and (in_outage or last is not None):
            reached = True
    return last, reached
