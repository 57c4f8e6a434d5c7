"""OpenAI Codex: `codex exec --json` (JSON lines; without `--json` it prints text).

Event and field names from openai/codex `codex-rs/exec/src/exec_events.rs` (`ThreadEvent`, `ThreadItem`):
`thread.started {thread_id}`, `turn.started`, `turn.completed {usage: {input_tokens, cached_input_tokens,
output_tokens}}`, `turn.failed {error: {message}}`, `item.started | item.updated | item.completed {item: {id,
type, ...}}` with item types `agent_message {text}`, `reasoning`, `command_execution`, `file_change`,
`mcp_tool_call`, `web_search`, `todo_list`, `error {message}` (non-fatal), and a top-level `error {message}`
("an unrecoverable error emitted directly by the event stream"). No cost field.

- The reply is the last `agent_message` (what `-o/--output-last-message` writes).
- Success is a turn that completed; an interrupted turn emits neither `turn.completed` nor `turn.failed`, so a
  stream without `turn.completed` (or ending in `turn.failed`) is a failed call.
- Tokens are `input_tokens - cached_input_tokens + output_tokens`: Codex's `input_tokens` includes the cached
  ones (`TokenUsage::non_cached_input` and `blended_total` in `codex-rs/protocol/src/protocol.rs`).
- Usage limits and blocked errors arrive as the message of `turn.failed` or `error`, e.g. `You've hit your usage
  limit. ... try again at 3:28 PM.` or `Quota exceeded. Check your plan and billing details.`
  (`codex-rs/core/src/error.rs`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from ralph_supervisor.agents.base import RO, RUN, RW, Adapter, Findings, Output, count, text_of
from ralph_supervisor.agents.outages import retry_message
from ralph_supervisor.agents.recognize import PromptMode
from ralph_supervisor.agents.usage import codex_windows

TURN_EVENTS = frozenset({"thread.started", "turn.started", "turn.completed", "turn.failed"})
ITEM_EVENTS = frozenset({"item.started", "item.updated", "item.completed", "item.plan.delta"})


def _message(value: Any) -> str:
    """`{message}` of an error event or of `turn.failed.error`."""
    return text_of(value.get("message")) if isinstance(value, dict) else ""


class Codex(Adapter):
    name = "codex"
    commands = ("codex",)
    # ~/.codex is a folder of the run (Codex keeps its databases and shell snapshots at its top), the user's
    # configuration, `.env`, instructions, hooks, rules, prompts, plugins and skills read-only in it (Codex
    # installs its own skills in `skills/.system`: a folder of the run), the sessions and the login shared.
    sandbox_home = ((".codex", RUN),
                    *((f".codex/{name}", RO) for name in (
                        "config.toml", "managed_config.toml", "requirements.toml", ".env", "AGENTS.md",
                        "AGENTS.override.md", "hooks.json", "hooks", "agents", "rules", "prompts", "themes",
                        "plugins")),
                    (".codex/skills", RUN), (".codex/skills/*", RO), (".codex/sessions/", RW), (".codex/auth.json", RW))
    sandbox_folder = ("CODEX_HOME", ".codex")
    sandbox_env = ("OPENAI_", "CODEX_")
    packages = ("@openai/codex",)
    prompt = PromptMode(commands=frozenset({"exec", "e"}))
    event_types: ClassVar[frozenset[str]] = TURN_EVENTS | ITEM_EVENTS | {"error", "request_user_input"}
    distinctive: ClassVar[frozenset[str]] = TURN_EVENTS | ITEM_EVENTS

    def read_events(self, output: Output, findings: Findings) -> bool:
        if not self.owns(output):
            return False
        events = self.known(findings, output)
        findings.mode = "stream-json"
        completed = False
        failed_turn = False
        last_error = ""
        last_message = ""
        for event in events:
            kind = event["type"]
            if kind == "thread.started":
                findings.session_id = text_of(event.get("thread_id")) or findings.session_id
            elif kind == "turn.started":
                completed = False
            elif kind == "turn.completed":
                completed = True
                usage = event.get("usage")
                if isinstance(usage, dict):
                    total_in, cached, out = (count(usage.get(key)) for key in
                                             ("input_tokens", "cached_input_tokens", "output_tokens"))
                    findings.add_tokens(max(0, (total_in or 0) - (cached or 0)) + (out or 0), cached or 0)
            elif kind == "turn.failed":
                completed, failed_turn = False, True
                findings.agent_error(_message(event.get("error")) or "turn.failed")
            elif kind == "error":  # also the retries it survives ("Reconnecting... 1/5"): an error position only
                last_error = _message(event)
                findings.error_position(last_error)
                retry = retry_message(event)
                if retry is not None:
                    findings.unreachable(retry)
            elif kind == "item.completed":
                item = event.get("item")
                if isinstance(item, dict) and item.get("type") == "agent_message":
                    last_message = text_of(item.get("text")) or last_message
        if not completed and not failed_turn and last_error:
            findings.agent_error(last_error)  # the stream ended on it: it is why the call failed
        findings.plain_lines(output.plain)
        findings.usage = codex_windows(output.events, findings.now)  # where its JSON carries them
        findings.succeeded = completed
        findings.has_result = completed
        findings.result_text = last_message
        if not last_message:
            findings.fallback_message = findings.error_lines[-1] if findings.error_lines else "no agent message"
        return True
