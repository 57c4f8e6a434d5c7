"""opencode: `opencode run --format json` (JSON lines; without it, formatted text).

From anomalyco/opencode `packages/opencode/src/cli/cmd/run.ts` (`emit(type, data)` writes
`{type, timestamp, sessionID, ...data}` per line) and `session/message-v2.ts`:
- `step_start {part}`, `text {part: {text, messageID}}` (a finished text part), `reasoning` (with
  `--thinking`), `tool_use {part: {tool, state: {status: completed | error, error?}}}`,
  `step_finish {part: {reason, cost, tokens: {input, output, reasoning, cache: {read, write}}}}`,
  `error {error: {name, data: {message, statusCode?, isRetryable, responseHeaders?}}}`, and, in newer
  releases, `done {reason: "idle"}` at the end.
- Error names: `ProviderAuthError` (blocked), `APIError` (an HTTP status; 429 is a limit whose
  `responseHeaders` may carry `retry-after`), `UnknownError`, `MessageAbortedError`, `MessageOutputLengthError`,
  `ContextOverflowError`. Any session error exits 1. opencode retries a 429 itself without printing anything.
- The reply is the text of the last message that had text (its parts joined).
- Tokens: `input + output + reasoning` per step (`input` excludes the cache, which `cache.read + cache.write`
  counts); dollars: the sum of `step_finish.part.cost`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ralph_supervisor.agents.base import (
    RO,
    RUN,
    RW,
    Adapter,
    Findings,
    Output,
    classify_status,
    count,
    dollars,
    text_of,
)
from ralph_supervisor.agents.recognize import PromptMode
from ralph_supervisor.agents.limits import reset_time

UNFINISHED = frozenset({"tool-calls", "error", "unknown", "other"})
"""`step_finish.part.reason` values (the AI SDK's finish reasons) after which the agent meant to go on."""


def _part(event: dict[str, Any]) -> dict[str, Any]:
    part = event.get("part")
    return part if isinstance(part, dict) else {}


class Opencode(Adapter):
    name = "opencode"
    commands = ("opencode",)
    # Its folders are folders of the run (opencode writes its config folder's `opencode.jsonc`, its session
    # database, git snapshots, state and the npm packages it loads), the user's configuration, agents,
    # commands, modes, plugins, tools and their packages read-only, the logins shared.
    sandbox_home = ((".config/opencode", RUN),
                    *((f".config/opencode/{name}", RO) for name in (
                        "opencode.json", "opencode.jsonc", "config.json", "AGENTS.md", "agent", "agents", "command",
                        "commands", "mode", "modes", "plugin", "plugins", "tool", "tools", "skill", "skills", "themes",
                        "package.json", "bun.lock", "node_modules")),
                    (".local/share/opencode", RUN), (".local/share/opencode/auth.json", RW),
                    (".local/share/opencode/mcp-auth.json", RW), (".local/state/opencode", RUN),
                    (".cache/opencode", RUN))
    sandbox_env = ("OPENCODE_", "ANTHROPIC_", "OPENAI_")
    packages = ("opencode-ai",)
    prompt = PromptMode(commands=frozenset({"run"}))
    event_types: ClassVar[frozenset[str]] = frozenset({"step_start", "step_finish", "text", "reasoning", "tool_use",
                                                       "error", "done"})
    distinctive: ClassVar[frozenset[str]] = frozenset({"step_start", "step_finish", "text", "reasoning", "done"})

    def owns(self, output: Output) -> int:
        owned = super().owns(output)
        if owned or not (output.kinds["error"] or output.kinds["tool_use"]):
            return owned
        # A call that failed at once prints only an error event: its `sessionID` says it is opencode's.
        return sum(1 for e in output.events if e.get("type") in ("error", "tool_use") and "sessionID" in e)

    def read_events(self, output: Output, findings: Findings) -> bool:
        if not self.owns(output):
            return False
        events = self.known(findings, output)
        findings.mode = "stream-json"
        texts: list[tuple[str, str]] = []  # (messageID, text)
        finished = False
        for event in events:
            kind = event["type"]
            findings.session_id = text_of(event.get("sessionID")) or findings.session_id
            part = _part(event)
            if kind == "text":
                texts.append((text_of(part.get("messageID")), text_of(part.get("text"))))
            elif kind == "step_finish":
                finished = text_of(part.get("reason")) not in UNFINISHED
                findings.has_result = True
                tokens = part.get("tokens")
                if isinstance(tokens, dict):
                    main = [count(tokens.get(key)) for key in ("input", "output", "reasoning")]
                    cache = tokens.get("cache")
                    cached = [count(cache.get(key)) for key in ("read", "write")] if isinstance(cache, dict) else []
                    if any(n is not None for n in main):
                        findings.add_tokens(sum(n or 0 for n in main), sum(n or 0 for n in cached))
                findings.add_cost(dollars(part.get("cost")))
            elif kind == "done":
                finished = finished or text_of(event.get("reason")) == "idle"
            elif kind == "tool_use":
                state = part.get("state")
                if isinstance(state, dict) and state.get("status") == "error":
                    findings.error_position(text_of(state.get("error")))
            elif kind == "error":
                finished = False
                self._error(event.get("error"), findings)
        findings.plain_lines(output.plain)
        findings.succeeded = finished
        findings.is_error = None if not findings.has_result else not finished
        if texts:
            last_id = texts[-1][0]
            findings.result_text = "\n".join(text for mid, text in texts if mid == last_id and text)
        if not findings.result_text:
            findings.fallback_message = findings.error_lines[-1] if findings.error_lines else "no text"
        return True

    @staticmethod
    def _error(error: Any, findings: Findings) -> None:
        if not isinstance(error, dict):
            findings.agent_error("error")
            return
        name = text_of(error.get("name"))
        data = error.get("data") if isinstance(error.get("data"), dict) else {}
        message = text_of(data.get("message")) or name or "error"
        findings.agent_error(message if not name or name in message else f"{name}: {message}")
        if name == "ProviderAuthError":
            findings.block("authentication failed", message)
            return
        cls, reason = classify_status(data.get("statusCode"))
        if cls == "usage-limit" and not findings.blocked_reason:
            headers = data.get("responseHeaders")
            header_text = "\n".join(f"{key}: {value}" for key, value in headers.items()
                                    if isinstance(key, str) and isinstance(value, str)) if isinstance(headers, dict) else ""
            findings.limit(message, reset_time(header_text, findings.now, findings.tz))
        else:
            findings.classified(cls, reason, message)
