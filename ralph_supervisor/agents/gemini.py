"""Gemini CLI: `gemini -p ... -o json | stream-json` (and plain text without `-o`).

Shapes from google-gemini/gemini-cli `packages/core/src/output/types.ts`, `json-formatter.ts`,
`stream-json-formatter.ts`, `packages/cli/src/utils/errors.ts`:
- json: one pretty-printed (multi-line) object `{session_id, response, stats, error?: {type, message, code}}`;
  `stats.models.<name>.tokens.{prompt, candidates, cached, input, ...}` (`telemetry/uiTelemetry.ts`: `input` is
  `prompt - cached`). On a fatal error `handleError` prints `{session_id?, error: {type, message, code}}`,
  pretty-printed, on stderr and exits with `code` when it is a number.
- stream-json (every event has `timestamp`): `init {session_id, model}`, `message {role, content, delta?}`,
  `tool_use`, `tool_result {status, output, error}`, `error {severity: warning | error, message}`,
  `result {status: success | error, error?: {type, message}, stats: {total_tokens, input_tokens,
  output_tokens, cached, input, duration_ms, tool_calls}}`; a fatal error is a `result` with status error.
- Error `type` is the error class name: `TerminalQuotaError` (a daily or hard quota) and `RetryableQuotaError`
  (a per-minute one the CLI retries itself) are usage limits (`utils/googleQuotaErrors.ts`, whose messages
  say `Please retry in 34.07s` or `Your quota will reset after 2h36m24s.`).
- Exit codes (`utils/exitCodes.ts`, `FatalError` subclasses): 41 authentication (blocked), 42 input, 44 sandbox,
  52 config, 53 turn limit, 54 tool, 130 cancelled.
No cost field. Tokens are non-cached input + output (`input` + `output_tokens`; per model `input` + `candidates`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from ralph_supervisor.agents.base import (RO, RUN, RW, Adapter, Findings, Output, classify_status, count,
                                          event_type, text_of)
from ralph_supervisor.agents.recognize import PromptMode

STREAM_TYPES = frozenset({"init", "message", "tool_use", "tool_result", "error", "result"})
QUOTA_ERRORS = frozenset({"TerminalQuotaError", "RetryableQuotaError"})
EXIT_AUTHENTICATION = 41


def _is_json_output(event: dict[str, Any]) -> bool:
    """The object of `-o json` (or its error object): no `type`, and Gemini's keys."""
    return "type" not in event and (isinstance(event.get("response"), str) or isinstance(event.get("stats"), dict)
                                     or isinstance(event.get("error"), dict))


class Gemini(Adapter):
    name = "gemini"
    commands = ("gemini",)
    # ~/.gemini is a folder of the run (its chats and checkpoints, its shadow git repositories), the user's
    # settings, `.env` (read into Gemini's environment), memory, commands, extensions, skills, agents,
    # policies and folder trust read-only in it, the login files shared. GEMINI_CLI_HOME moves the home.
    sandbox_home = ((".gemini", RUN),
                    *((f".gemini/{name}", RO) for name in (
                        "settings.json", ".env", "GEMINI.md", "system.md", "commands", "extensions", "skills", "agents",
                        "policies", "hooks", "keybindings.json", "trustedFolders.json")),
                    *((f".gemini/{name}", RW) for name in (
                        "oauth_creds.json", "google_accounts.json", "mcp-oauth-tokens.json", "a2a-oauth-tokens.json")))
    sandbox_folder = ("GEMINI_CLI_HOME", "")
    sandbox_env = ("GEMINI_", "GOOGLE_API_KEY", "GOOGLE_GENAI_", "GOOGLE_CLOUD_")
    packages = ("@google/gemini-cli",)
    prompt = PromptMode(flags=frozenset({"-p", "--prompt"}))
    event_types: ClassVar[frozenset[str]] = STREAM_TYPES
    distinctive: ClassVar[frozenset[str]] = frozenset({"init", "message", "tool_result"})

    def owns(self, output: Output) -> int:
        return super().owns(output) + len(self._objects(output))

    @staticmethod
    def _objects(output: Output) -> list[dict[str, Any]]:
        return [e for e in output.events if _is_json_output(e)] if output.kinds[""] else []

    def read_events(self, output: Output, findings: Findings) -> bool:
        objects = self._objects(output)
        if not objects and not super().owns(output):
            return False
        stream = [e for e in output.events if event_type(e) in STREAM_TYPES]
        findings.unknown += len(output.events) - len(objects) - len(stream)
        findings.mode = "stream-json" if stream else "json"
        if stream:
            self._stream(stream, findings)
        for event in objects:
            self._object(event, findings)
        findings.plain_lines(output.plain)
        if not findings.result_text:
            findings.fallback_message = (findings.error_lines[-1] if findings.error_lines
                                         else "\n".join(output.plain[-3:]) or "no result")
        return True

    def _stream(self, events: list[dict[str, Any]], findings: Findings) -> None:
        reply: list[str] = []
        pieces = False
        for event in events:
            kind = event["type"]
            if kind == "init":
                findings.session_id = text_of(event.get("session_id")) or findings.session_id
            elif kind == "message" and event.get("role") == "assistant":
                reply.append(text_of(event.get("content")))  # deltas are pieces of one text, as -o json joins them
                pieces = pieces or event.get("delta") is True
            elif kind == "error":
                message = text_of(event.get("message"))
                if event.get("severity") == "error":
                    findings.agent_error(message or "error")
                else:
                    findings.error_position(message)
            elif kind == "result":
                findings.has_result = True
                findings.succeeded = event.get("status") == "success"
                findings.is_error = not findings.succeeded
                error = event.get("error")
                if isinstance(error, dict):
                    self._error(error, findings)
                stats = event.get("stats")
                if isinstance(stats, dict):
                    self._stream_tokens(stats, findings)
        findings.result_text = "".join(reply)
        if pieces:
            findings.reply_errors(findings.result_text)

    @staticmethod
    def _stream_tokens(stats: dict[str, Any], findings: Findings) -> None:
        output, fresh, cached, prompt = (count(stats.get(key)) for key in ("output_tokens", "input", "cached",
                                                                          "input_tokens"))
        if fresh is None and prompt is not None:
            fresh = max(0, prompt - (cached or 0))
        if output is None and fresh is None:
            return
        findings.tokens, findings.cache_tokens = (fresh or 0) + (output or 0), cached

    def _object(self, event: dict[str, Any], findings: Findings) -> None:
        findings.session_id = text_of(event.get("session_id")) or findings.session_id
        response = event.get("response")
        error = event.get("error")
        if isinstance(response, str):
            findings.has_result = True
            findings.result_text = response
            findings.succeeded = not isinstance(error, dict)
        if isinstance(error, dict):
            findings.is_error = True
            findings.succeeded = False
            self._error(error, findings)
        stats = event.get("stats")
        models = stats.get("models") if isinstance(stats, dict) else None
        if isinstance(models, dict):
            for model in models.values():
                tokens = model.get("tokens") if isinstance(model, dict) else None
                if not isinstance(tokens, dict):
                    continue
                fresh, prompt, cached, output = (count(tokens.get(key)) for key in ("input", "prompt", "cached",
                                                                                  "candidates"))
                if fresh is None and prompt is not None:
                    fresh = max(0, prompt - (cached or 0))
                if fresh is not None or output is not None:
                    findings.add_tokens((fresh or 0) + (output or 0), cached or 0)

    def _error(self, error: dict[str, Any], findings: Findings) -> None:
        kind = text_of(error.get("type"))
        message = text_of(error.get("message")) or kind or "error"
        code = error.get("code")
        findings.agent_error(message)
        if kind in QUOTA_ERRORS:
            findings.limit(message)
        elif kind == "FatalAuthenticationError" or code == EXIT_AUTHENTICATION:
            findings.block("authentication failed", message)
        else:
            findings.classified(*classify_status(code), message)

    def exit_code(self, code: int, findings: Findings) -> None:
        findings.succeeded = False
        if code == EXIT_AUTHENTICATION:
            findings.block("authentication failed", f"gemini exited with code {code} (authentication)")
