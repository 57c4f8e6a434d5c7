"""One adapter per agent CLI, behind one small interface (`base.Adapter`): which calls are its calls, and what
its output says (the reply, errors, a failed call, a usage limit and when it resets, a blocked error, tokens,
dollars, the session id), turned into the same `AgentOutput` for every agent.

Each call is read by the adapter of the process that made it (`claude`, `codex`, `gemini`, `opencode`,
`cursor-agent`, `amp`, or their `node`/`bun` wrappers); when the process name says nothing (marker mode, a
wrapper script) or the output is not in that agent's format, the format itself decides; `--agent NAME`
forces one adapter for every call. Anything else is plain text.

Usage:

    >>> from ralph_supervisor.agents import read_call
    >>> out = read_call('{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":4,'
    ...                 '"output_tokens":3}}', name="codex")
    >>> out.agent, out.failed, out.tokens
    ('codex', False, 9)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import tzinfo
from typing import Any

from ralph_supervisor.agents.amp import Amp
from ralph_supervisor.agents.base import Adapter, AgentOutput, Output, read_output
from ralph_supervisor.agents.claude import Claude
from ralph_supervisor.agents.codex import Codex
from ralph_supervisor.agents.cursor import Cursor
from ralph_supervisor.agents.gemini import Gemini
from ralph_supervisor.agents.opencode import Opencode
from ralph_supervisor.agents.text import Text

__all__ = ["ADAPTERS", "AUTO", "AgentOutput", "NAMES", "adapter_for_process", "output_warnings", "read_call", "sniff"]

AUTO = "auto"
ADAPTERS: dict[str, Adapter] = {a.name: a for a in (Claude(), Codex(), Gemini(), Opencode(), Cursor(), Amp(), Text())}
NAMES: tuple[str, ...] = tuple(ADAPTERS)
"""The values `--agent` takes besides "auto"."""
TEXT = ADAPTERS["text"]
_FAMILIES = (ADAPTERS["codex"], ADAPTERS["gemini"], ADAPTERS["opencode"], ADAPTERS["claude"])
_VARIANTS = {"claude": (ADAPTERS["amp"], ADAPTERS["cursor"])}
"""Agents that print Claude's format, told apart by a detail of it."""


def adapter_for_process(name: str, argv: Sequence[str]) -> Adapter | None:
    """The adapter whose agent made this process (by name, command line or npm package), if any."""
    for adapter in ADAPTERS.values():
        if adapter.matches(name, argv):
            return adapter
    return None


def sniff(output: Output) -> Adapter | None:
    """The adapter whose format the output's JSON events are in, if any (the one owning the most events)."""
    best, most = None, 0
    for adapter in _FAMILIES:
        owned = adapter.owns(output)
        if owned > most:
            best, most = adapter, owned
    if best is not None:
        for variant in _VARIANTS.get(best.name, ()):
            if variant.owns(output):
                return variant
    return best


def read_call(text: str, *, name: str = "", argv: Sequence[str] = (), agent: str = AUTO, timed_out: bool = False,
              exit_code: int | None = None, now: float | None = None, tz: tzinfo | None = None) -> AgentOutput:
    """Read one call's output with its agent's adapter. Never raises on any text.

    `agent` forces an adapter ("auto": the process's, else the format's). `now` (default: the clock) and `tz`
    (default: this machine's zone) place a reset time the output states as a time of day.
    """
    output = read_output(text)
    when = time.time() if now is None else now
    if agent != AUTO and agent in ADAPTERS:
        return ADAPTERS[agent].read(output, timed_out=timed_out, exit_code=exit_code, now=when, tz=tz)
    adapter = adapter_for_process(name, argv)
    if output.events and (adapter is None or not adapter.owns(output)):
        found = sniff(output)
        if found is not None and (adapter is None or found.family != adapter.family):
            adapter = found  # the output is in another agent's format: that agent's adapter reads it
    return (adapter or TEXT).read(output, timed_out=timed_out, exit_code=exit_code, now=when, tz=tz)


def output_warnings(out: AgentOutput) -> list[tuple[str, str, dict[str, Any]]]:
    """The warnings one call's output gives, as (key, event, fields), meant to be logged once per key per run:
    output that could not be read (lines of JSON cut off or garbled, events of a type its agent's format does
    not have). The rest of the call was judged."""
    if not (out.malformed_lines or out.unknown_events):
        return []
    return [(f"agent_output_unreadable:{out.agent}", "agent_output_unreadable",
             {"agent": out.agent, "malformed_lines": out.malformed_lines, "unknown_events": out.unknown_events})]
