"""Where an agent's reply ends, from its machine-readable output alone.

A call too short for the tree sampler to see (a few milliseconds, started by absolute path, so no shim
announced it) still prints its reply, and each agent's format says where a reply is complete: Claude's,
Cursor's, Amp's and Gemini's stream-json `result` object, Codex's `turn.completed` or `turn.failed`. Where no
process was seen, each such line ends an iteration (`evidence/calls.py`).

    >>> ends_reply('{"type":"result","subtype":"success","result":"done"}')
    True
    >>> ends_reply('{"type":"assistant","message":{}}'), ends_reply("plain text with \"type\":\"result\"")
    (False, False)
"""

from __future__ import annotations

import json

FINAL_TYPES = frozenset({"result", "turn.completed", "turn.failed"})
MAX_LINE = 4 << 20
"""A final object longer than this is not parsed (Claude's result holds the whole reply: a few MB at most)."""


def ends_reply(line: str) -> bool:
    """Is this output line an agent's final object for its reply? Pure; never raises."""
    stripped = line.strip()
    if not stripped.startswith("{") or not stripped.endswith("}") or '"type"' not in stripped:
        return False
    if len(stripped) > MAX_LINE or not any(f'"{kind}"' in stripped for kind in FINAL_TYPES):
        return False
    try:
        event = json.loads(stripped)
    except ValueError:
        return False
    return isinstance(event, dict) and event.get("type") in FINAL_TYPES


def reply_ends_in(text: str | None) -> bool:
    """Does this chunk of complete lines hold the end of a reply?"""
    if not text or '"type"' not in text:
        return False
    return any(ends_reply(line) for line in text.split("\n"))
