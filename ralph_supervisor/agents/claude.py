"""Claude Code: `claude -p --output-format json | stream-json | text`.

json is one result object on one line (possibly among log lines on stderr); stream-json is one event per line
(lines of several MB) ending with the same result object. Field names as in anthropics/claude-agent-sdk-python
(`_internal/message_parser.py`, `types.py`):
- result: `type: "result"`, `subtype` (`success`, `error_max_turns`, `error_during_execution`, ...),
  `is_error`, `result`, `session_id`, `total_cost_usd`, `usage {input_tokens, output_tokens,
  cache_creation_input_tokens, cache_read_input_tokens}`, `permission_denials`, `api_error_status` (newer CLIs).
  An API failure can arrive as `subtype: "success"` with `is_error: true` and `API Error: ...` in `result`.
- events: `system` (subtype `init`; `api_retry` with `error_status`), `assistant` (`message.content`,
  `message.usage`, an `error` code on synthetic API-error messages), `user`, `stream_event`,
  `rate_limit_event {rate_limit_info: {status, resetsAt, rateLimitType}}`, `conversation_reset`.
Cursor's agent and Amp print the same shapes (`cursor.py`, `amp.py`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from ralph_supervisor.agents.base import (
    COPY,
    RO,
    RUN,
    RW,
    Adapter,
    Findings,
    LineClass,
    Output,
    STATUS_BLOCKED,
    STATUS_USAGE,
    classify_text,
    count,
    dollars,
    event_type,
    first_line,
    is_error_shaped,
    is_short_message,
    text_of,
)
from ralph_supervisor.agents.recognize import PromptMode
from ralph_supervisor.agents.limits import reset_from_event
from ralph_supervisor.agents.outages import API_UNREACHABLE, retry_message
from ralph_supervisor.agents.usage import claude_windows

STREAM_TYPES = frozenset({"assistant", "user", "system", "stream_event", "rate_limit_event", "conversation_reset"})


def _message_texts(message: Any) -> list[str]:
    """The text blocks of an assistant message (`message.content[].text`), or a plain string content."""
    if not isinstance(message, dict):
        return []
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [block["text"] for block in content if isinstance(block, dict) and isinstance(block.get("text"), str)]
    return []


def classify_event(event: dict[str, Any]) -> tuple[LineClass | None, str, str]:
    """(class, reason, the text that says so) for one decoded event, looking only at error positions."""
    kind = event_type(event)
    if kind == "rate_limit_event":
        info = event.get("rate_limit_info")
        if isinstance(info, dict) and str(info.get("status", "")).lower() == "rejected":
            return "usage-limit", "usage limit", f"rate_limit_event rejected ({info.get('rateLimitType', '')})"
        return None, "", ""
    if kind == "result":
        text = text_of(event.get("result"))
        status = event.get("api_error_status")
        if event.get("is_error") is True:
            if isinstance(status, int) and status in STATUS_BLOCKED:
                return "blocked", STATUS_BLOCKED[status], text or f"HTTP {status}"
            if isinstance(status, int) and status in STATUS_USAGE:
                return "usage-limit", "usage limit", text or f"HTTP {status}"
            cls, reason = classify_text(text)
            return cls, reason, text
        if is_short_message(text) and is_error_shaped(text):
            cls, reason = classify_text(text, strong_only=True)
            if cls == "usage-limit" or (cls == "blocked" and reason in ("invalid API key", "not logged in")):
                return cls, reason, text
        return None, "", ""
    if kind == "assistant":
        code = event.get("error")
        message = event.get("message")
        synthetic = (
            bool(code)
            or event.get("is_api_error_message") is True
            or event.get("isApiErrorMessage") is True
            or (isinstance(message, dict) and message.get("model") == "<synthetic>")
        )
        if not synthetic:
            return None, "", ""
        text = "\n".join(_message_texts(message))
        cls, reason = classify_text(f"{code or ''}\n{text}")
        return cls, reason, text or str(code)
    if kind == "system" and event.get("subtype") == "api_retry":
        status = event.get("error_status")
        if isinstance(status, int) and status in STATUS_USAGE:
            return "usage-limit", "usage limit", f"api_retry HTTP {status}"
        if isinstance(status, int) and status in STATUS_BLOCKED:
            return "blocked", STATUS_BLOCKED[status], f"api_retry HTTP {status}"
        cls, reason = classify_text(str(event.get("error", "")))
        return cls, reason, str(event.get("error", ""))
    return None, "", ""


def usage_tokens(usage: Any) -> tuple[int | None, int | None]:
    """(input + output, cache creation + cache read) of a `usage` object; None for what it does not hold."""
    if not isinstance(usage, dict):
        return None, None
    main = [count(usage.get(key)) for key in ("input_tokens", "output_tokens")]
    cache = [count(usage.get(key)) for key in ("cache_creation_input_tokens", "cache_read_input_tokens")]
    tokens = sum(n for n in main if n is not None) if any(n is not None for n in main) else None
    cached = sum(n for n in cache if n is not None) if any(n is not None for n in cache) else None
    return tokens, cached


def stream_usage(events: list[dict[str, Any]], findings: Findings) -> None:
    """Without a result object's usage: the last usage seen for each assistant message id, summed (stream-json
    repeats a message's usage on every content block of that message)."""
    per_message: dict[str, tuple[int | None, int | None]] = {}
    for index, event in enumerate(events):
        message = event.get("message")
        if event_type(event) != "assistant" or not isinstance(message, dict) or "usage" not in message:
            continue
        key = message.get("id")
        per_message[key if isinstance(key, str) and key else f"#{index}"] = usage_tokens(message["usage"])
    for tokens, cached in per_message.values():
        findings.add_tokens(tokens, cached)


def _result_error(result: dict[str, Any] | None) -> str:
    """The error text of a result without a `result` text: Amp's `error`, Claude's first `errors[]` entry."""
    if result is None:
        return ""
    errors = result.get("errors")
    first = next((e for e in errors if isinstance(e, str) and e), "") if isinstance(errors, list) else ""
    return text_of(result.get("error")) or first


class Claude(Adapter):
    name = "claude"
    commands = ("claude",)
    # In the box ~/.claude is a folder of the run, with the user's settings, memory, hooks, commands, agents,
    # skills and plugins read-only in it; only the sessions (`projects/`) and the credentials are shared
    # read-write. Claude rewrites its configuration (~/.claude.json: MCP servers, trust) by rename, which a
    # bound file cannot take, so the box points CLAUDE_CONFIG_DIR at ~/.claude, where Claude keeps it as
    # `.claude.json`: a copy of the user's, made at the first start, never written back. The credentials are
    # one bound file: Claude's writer copies over a file it cannot rename onto (EBUSY), so a refreshed login
    # still reaches the user's.
    sandbox_home = ((".claude", RUN), (".claude/.claude.json", COPY), (".claude/.config.json", COPY),
                    *((f".claude/{name}", RO) for name in (
                        "settings.json", "settings.local.json", "CLAUDE.md", "hooks", "commands", "agents", "skills",
                        "plugins", "rules", "output-styles", "themes", "workflows", "keybindings.json")),
                    (".claude/projects/", RW), (".claude/.credentials.json", RW), (".local/share/claude", RO))
    sandbox_folder = ("CLAUDE_CONFIG_DIR", ".claude")
    sandbox_copied_from = {".claude/.claude.json": ".claude.json"}
    sandbox_env = ("ANTHROPIC_", "CLAUDE_")
    packages = ("@anthropic-ai/claude-code",)
    prompt = PromptMode(flags=frozenset({"-p", "--print"}))
    event_types: ClassVar[frozenset[str]] = STREAM_TYPES | {"result"}
    distinctive: ClassVar[frozenset[str]] = STREAM_TYPES

    def owns(self, output: Output) -> int:
        # A result object is Claude-shaped too (json mode prints nothing else).
        return super().owns(output) + output.kinds["result"]

    def read_events(self, output: Output, findings: Findings) -> bool:
        events = self.known(findings, output)
        if not events:
            return False
        results = [e for e in events if e["type"] == "result"]
        findings.mode = "stream-json" if any(output.kinds[kind] for kind in STREAM_TYPES) else "json"
        result = results[-1] if results else None
        for event in ([result] if result else []) + events[::-1]:
            if isinstance(event.get("session_id"), str) and event["session_id"]:
                findings.session_id = event["session_id"]
                break
        error_subtype = False
        if result is not None:
            findings.has_result = True
            findings.result_text = text_of(result.get("result"))
            findings.is_error = result["is_error"] if isinstance(result.get("is_error"), bool) else None
            denials = result.get("permission_denials")
            findings.permission_denials = len(denials) if isinstance(denials, list) else 0
            findings.cost_usd = dollars(result.get("total_cost_usd"))
            subtype = result.get("subtype")
            error_subtype = isinstance(subtype, str) and subtype.startswith("error")  # error_max_turns, ...
        if result is not None and isinstance(result.get("usage"), dict):
            findings.add_tokens(*usage_tokens(result["usage"]))
        else:
            stream_usage(events, findings)
        # Evidence of a limit or a blocked error, from error positions only.
        for event in events:
            cls, reason, said = classify_event(event)
            if cls == "usage-limit":
                findings.limit(said, reset_from_event(event, findings.now))
            else:
                findings.classified(cls, reason, said)
            if cls is None:
                retry = retry_message(event)
                if retry is not None:
                    findings.unreachable(retry)
                elif event["type"] == "result" and event.get("is_error") is True \
                        and API_UNREACHABLE.search(text_of(event.get("result"))[:2000]):
                    findings.unreachable(first_line(text_of(event.get("result"))))  # "API Error: Connection error."
        if output.kinds["rate_limit_event"]:
            findings.usage = claude_windows(events, findings.now)
        findings.plain_lines(output.plain)
        result_is_limit_message = result is not None and classify_event(result)[0] is not None
        findings.succeeded = (result is not None and findings.is_error is not True and not error_subtype
                              and not result_is_limit_message)
        if not findings.result_text:
            said = _result_error(result)
            if said and not findings.succeeded:
                findings.error_position(said)
            findings.fallback_message = said or "\n".join(output.plain[-3:]) or ("no result" if result is None else "")
        return True
