"""Amp: `amp -x ... --stream-json` (ampcode.com/news/streaming-json: "Claude Code compatible").

`system` (subtype `init`: cwd, `session_id` `T-...`, tools), `user`, `assistant {message: {content,
stop_reason, usage: {input_tokens, cache_creation_input_tokens, cache_read_input_tokens, output_tokens}}}`,
`result {subtype, duration_ms, is_error, num_turns, result, session_id}`. No documented cost or limit event:
the result has no usage, so tokens come from the assistant messages, and dollars are unknown.
"""

from __future__ import annotations

from typing import ClassVar

from ralph_supervisor.agents.base import RO, RUN, RW, Output, text_of
from ralph_supervisor.agents.claude import Claude
from ralph_supervisor.agents.recognize import PromptMode


class Amp(Claude):
    name = "amp"
    commands = ("amp",)
    # Its folders are folders of the run (Amp 0.0.1790142911 writes `device-id.json` and its logs there), its
    # settings (MCP servers, permissions), guidance, skills, plugins and tools read-only, its login shared.
    sandbox_home = ((".config/amp", RUN),
                    *((f".config/amp/{name}", RO) for name in (
                        "settings.json", "settings.jsonc", "AGENTS.md", "skills", "plugins", "tools")),
                    (".local/share/amp", RUN), (".local/share/amp/secrets.json", RW), (".cache/amp", RUN))
    sandbox_folder = ("", "")
    sandbox_copied_from: ClassVar[dict[str, str]] = {}
    sandbox_env = ("AMP_",)
    family = "claude"  # type: ignore[assignment]
    packages = ("@sourcegraph/amp",)
    prompt = PromptMode(flags=frozenset({"-x", "--execute"}))

    def owns(self, output: Output) -> int:
        # The same events as Claude's; what tells them apart is Amp's thread id ("T-...") as session id.
        if not output.kinds["system"]:
            return 0
        first = next(event for event in output.events if event.get("type") == "system")
        return int(text_of(first.get("session_id")).startswith("T-"))
