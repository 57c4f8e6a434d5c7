"""Cursor's agent: `cursor-agent -p --output-format json | stream-json` (named `agent` in newer releases).

Claude-shaped (cursor.com/docs/cli/reference/output-format): json success is `{type: "result", subtype:
"success", is_error: false, duration_ms, result, session_id, request_id?}`; on failure the CLI prints no JSON at
all, only a message on stderr, and exits non-zero. stream-json: `system` (init), `user`, `assistant`,
`tool_call` (subtype `started` / `completed`), `result`; on failure the stream can end without a `result`.
No token or cost fields are documented, so a call's tokens and cost are unknown unless its output has them.
So it is read as Claude's output is; a failure without JSON is read as text (its stderr message).
"""

from __future__ import annotations

from typing import ClassVar

from ralph_supervisor.agents.base import Output
from ralph_supervisor.agents.claude import Claude
from ralph_supervisor.agents.recognize import PromptMode


class Cursor(Claude):
    name = "cursor"
    commands = ("cursor-agent", "agent")
    family = "claude"  # type: ignore[assignment]
    packages = ()
    prompt = PromptMode(flags=frozenset({"-p", "--print"}))
    event_types: ClassVar[frozenset[str]] = Claude.event_types | {"tool_call"}
    distinctive: ClassVar[frozenset[str]] = frozenset({"tool_call"})

    def owns(self, output: Output) -> int:
        # The same events as Claude's, plus its own tool calls: those tell them apart.
        return output.kinds["tool_call"]
