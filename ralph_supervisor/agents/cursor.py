"""Cursor's agent: `cursor-agent -p --output-format json | stream-json` (named `agent` in newer releases).

Claude-shaped (cursor.com/docs/cli/reference/output-format): json success is `{type: "result", subtype:
"success", is_error: false, duration_ms, duration_api_ms, result, session_id, request_id?}`; on failure the CLI
prints no JSON at all, only a message on stderr, and exits non-zero. stream-json: `system` (init: apiKeySource,
cwd, session_id, model, permissionMode), `user`, `assistant` (with `--stream-partial-output`, deltas carrying
`timestamp_ms`, then the whole text once more without it), `tool_call` (subtype `started` / `completed`, the
tool's result inline), `result`; on failure the stream can end without a `result`.

What the docs leave out, recorded from live runs in public threads (tests/fixtures/agent/cursor/SOURCES.md):
`thinking` events (subtype `delta` with a top-level `text`, then `completed`), a `timestamp_ms` and a
`model_call_id` on streamed events, and a `usage` in camelCase on the result (`inputTokens`, `outputTokens`,
`cacheReadTokens`, `cacheWriteTokens`). No cost is reported.

Told apart from Claude's stream, when no process name says, by what only Cursor prints: its `thinking` and
`tool_call` events, `timestamp_ms` / `model_call_id` on events, a result's `request_id` or camelCase usage.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ralph_supervisor.agents.base import COPY, RO, RUN, RW, Findings, Output, count
from ralph_supervisor.agents.claude import Claude
from ralph_supervisor.agents.recognize import PromptMode

CURSOR_EVENTS = frozenset({"tool_call", "thinking"})
CURSOR_EVENT_FIELDS = ("timestamp_ms", "model_call_id")
CURSOR_USAGE = ("inputTokens", "outputTokens")
CURSOR_CACHE = ("cacheReadTokens", "cacheWriteTokens")


def _is_cursor_result(event: dict[str, Any]) -> bool:
    usage = event.get("usage")
    return "request_id" in event or (isinstance(usage, dict) and any(key in usage for key in CURSOR_USAGE))


def cursor_marks(output: Output) -> int:
    """How many events carry something only Cursor's agent prints."""
    marks = sum(output.kinds[kind] for kind in CURSOR_EVENTS)
    for event in output.events:
        kind = event.get("type")
        if kind in CURSOR_EVENTS:
            continue
        if any(key in event for key in CURSOR_EVENT_FIELDS) or (kind == "result" and _is_cursor_result(event)):
            marks += 1
    return marks


def _camel_usage(usage: Any) -> tuple[int | None, int | None]:
    """(input + output, cache read + write) of Cursor's camelCase `usage`; None for what it does not hold."""
    if not isinstance(usage, dict):
        return None, None
    main = [count(usage.get(key)) for key in CURSOR_USAGE]
    cache = [count(usage.get(key)) for key in CURSOR_CACHE]
    tokens = sum(n for n in main if n is not None) if any(n is not None for n in main) else None
    cached = sum(n for n in cache if n is not None) if any(n is not None for n in cache) else None
    return tokens, cached


class Cursor(Claude):
    name = "cursor"
    commands = ("cursor-agent", "agent")
    # ~/.cursor is a folder of the run with the user's MCP servers, rules, hooks, commands and agents read-only
    # in it; the CLI rewrites `cli-config.json` (its permissions are there too): a copy. Its login (in
    # ~/.config/cursor) is shared; its install read-only.
    sandbox_home = ((".cursor", RUN), (".cursor/cli-config.json", COPY),
                    *((f".cursor/{name}", RO) for name in (
                        "mcp.json", "hooks.json", "hooks", "rules", "commands", "agents", "skills", "plugins")),
                    (".config/cursor", RUN), (".config/cursor/auth.json", RW), (".local/share/cursor-agent", RO))
    sandbox_folder = ("CURSOR_CONFIG_DIR", ".cursor")
    sandbox_copied_from: ClassVar[dict[str, str]] = {}
    sandbox_env = ("CURSOR_",)
    family = "claude"  # type: ignore[assignment]
    packages = ()
    prompt = PromptMode(flags=frozenset({"-p", "--print"}))
    event_types: ClassVar[frozenset[str]] = Claude.event_types | CURSOR_EVENTS
    distinctive: ClassVar[frozenset[str]] = CURSOR_EVENTS

    def owns(self, output: Output) -> int:
        # The same events as Claude's, plus what only Cursor prints: those tell them apart.
        return cursor_marks(output)

    def read_events(self, output: Output, findings: Findings) -> bool:
        if not super().read_events(output, findings):
            return False
        if findings.tokens is None and findings.cache_tokens is None:
            results = [e for e in output.events if e.get("type") == "result"]
            if results:
                findings.add_tokens(*_camel_usage(results[-1].get("usage")))
        return True
