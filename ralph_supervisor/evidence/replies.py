"""Reading one agent call's output: the reply, its status block, tokens, and what kind of failure it was.

Claude Code prints one of three shapes: `--output-format json` (one result object on one line, possibly among
log lines on stderr), `stream-json` (one JSON event per line, lines of several MB, ending with the same result
object) or plain text. The supervisor is not the call's parent, so it never sees an exit code: whether the
call failed, hit a usage limit, or hit something only a human can clear (credentials, billing, policy) is read
from the output alone.

Misclassification is the risk. A reply that *talks about* rate limiting or API keys is ordinary work, so the
limit and blocked patterns are only looked for in error positions: results with `is_error: true`, synthetic
API-error messages, rejected rate-limit events, the CLI's own non-JSON lines, and, in text mode, error-shaped
lines among the last few. A call that ends with a successful result is neither limited nor blocked, whatever
retries it survived on the way.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from ralph_supervisor.evidence.errors import is_error_line

__all__ = [
    "AgentOutput",
    "LineClass",
    "classify_line",
    "parse_agent_output",
    "parse_status_block",
    "strip_status_block",
]

LineClass = Literal["usage-limit", "blocked"]
Mode = Literal["json", "stream-json", "text"]

STATUS_START = "---RALPH_STATUS---"
STATUS_END = "---END_RALPH_STATUS---"
_STATUS_BLOCK = re.compile(re.escape(STATUS_START) + r"(.*?)(?:" + re.escape(STATUS_END) + r"|\Z)", re.DOTALL)
_STATUS_FIELD = re.compile(r"^\s*([A-Z][A-Z0-9_]*)\s*:\s*(.*?)\s*$")

TEXT_TAIL_LINES = 5
"""In text mode, only this many last non-blank lines are error positions for limits and blocked errors."""
TEXT_FAILED_LINES = 3
"""In text mode, a call failed when one of its last this-many non-blank lines is an error line."""
SHORT_RESULT = 300
"""A result text this short that is nothing but a limit or login message is that message, even when the
CLI reported it without `is_error` (it has done so for usage limits)."""
MESSAGE_CHARS = 500

# Event types Claude Code prints in its JSON modes; their presence tells JSON output from plain text.
_STREAM_TYPES = frozenset({"assistant", "user", "system", "stream_event", "rate_limit_event"})

# --- what a usage limit and a blocked error look like ------------------------------------------------------

# Specific messages of the CLI and the API: they rarely occur in prose, but are still only believed in
# error positions (or as a short result that is nothing else).
_USAGE_STRONG = re.compile(
    r"usage limit (?:has been )?reached"
    r"|\b(?:5|five)-hour limit"
    r"|hit your (?:[\w-]+ )?limit"
    r"|out of extra usage"
    r"|\b(?:session|weekly|daily|opus|sonnet) limit reached"
    r"|limit reached\s*[∙·|]"
    r"|rate_limit_error|overloaded_error"
    r"|API Error:\s*(?:\w+ )*\(?(?:429|529)\b"
    r"|\b429 Too Many Requests",
    re.IGNORECASE,
)
# Generic words: believed only in error positions.
_USAGE_WEAK = re.compile(
    r"rate[ _-]?limit|overloaded|too many requests|usage limit"
    r"|(?:HTTP|status|code|API Error|error)\W{0,3}(?:429|529)\b",  # a status code, not any number 429
    re.IGNORECASE,
)

_BLOCKED: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (reason, re.compile(pattern, re.IGNORECASE))
    for reason, pattern in (
        ("invalid API key", r"invalid api key|invalid x-api-key"),
        (
            "authentication failed",
            r"authentication_error|authentication[_ ]failed|oauth token (?:has )?(?:expired|been revoked)"
            r"|\bAPI Error:\s*(?:\w+ )*\(?40[13]\b|\b401 Unauthorized\b|\b403 Forbidden\b",
        ),
        ("not logged in", r"please run /login|not logged in"),
        ("credit balance too low", r"credit balance is too low"),
        ("payment required", r"payment required|billing_error|(?:HTTP|status|code|API Error|error)\W{0,3}402\b"),
        ("quota exhausted", r"quota (?:is )?(?:exhausted|exceeded)|insufficient_quota"),
        (
            "permission denied by policy",
            r"(?:denied|blocked|disabled|prohibited|not allowed) by (?:[\w'-]+ ){0,3}polic(?:y|ies)|permission_error",
        ),
        ("account disabled", r"(?:organi[sz]ation|account) (?:has been |is )?(?:disabled|suspended)"),
    )
)

# A line shaped like an error the CLI or a tool prints (as opposed to a sentence of the agent's reply).
_ERROR_SHAPED = re.compile(
    r"^\s*(?:\[[^\]]*\]\s*)*(?:"
    r"API Error|Error:|error:|ERROR\b|Fatal:|FATAL\b|Claude AI usage limit|Invalid API key|Not logged in"
    r"|Please run /login|Credit balance|You've hit your|You're out of|You have reached|(?:5|five)-hour limit"
    r"|(?:Session|Weekly|Daily|Opus|Sonnet) limit|Rate limit|Usage limit"
    r"|HTTP \d{3}|\d{3} (?:Too Many|Unauthorized|Forbidden)"
    r")"
)
_STATUS_USAGE = frozenset({429, 529})
_STATUS_BLOCKED = {401: "authentication failed", 402: "payment required", 403: "authentication failed"}


def _blocked_reason(text: str) -> str:
    for reason, pattern in _BLOCKED:
        if pattern.search(text):
            return reason
    return ""


def _classify_text(text: str, strong_only: bool = False) -> tuple[LineClass | None, str]:
    """Classify text found in an error position. Blocked wins over a limit: waiting cannot clear it."""
    if not text:
        return None, ""
    reason = _blocked_reason(text)
    if reason:
        return "blocked", reason
    if _USAGE_STRONG.search(text) or (not strong_only and _USAGE_WEAK.search(text)):
        return "usage-limit", "usage limit"
    return None, ""


def _is_short_message(text: str) -> bool:
    return 0 < len(text.strip()) <= SHORT_RESULT


def _message_texts(message: Any) -> Iterable[str]:
    """The text blocks of an assistant message (`message.content[].text`), or a plain string content."""
    if not isinstance(message, dict):
        return
    content = message.get("content")
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                yield block["text"]


def _classify_event(event: dict[str, Any]) -> tuple[LineClass | None, str, str]:
    """(class, reason, the text that says so) for one decoded Claude event, looking only at error positions."""
    kind = event.get("type")
    if kind == "rate_limit_event":
        info = event.get("rate_limit_info")
        if isinstance(info, dict) and str(info.get("status", "")).lower() == "rejected":
            return "usage-limit", "usage limit", f"rate_limit_event rejected ({info.get('rateLimitType', '')})".strip()
        return None, "", ""
    if kind == "result":
        text = event.get("result") if isinstance(event.get("result"), str) else ""
        status = event.get("api_error_status")
        if event.get("is_error") is True:
            if isinstance(status, int) and status in _STATUS_BLOCKED:
                return "blocked", _STATUS_BLOCKED[status], text or f"HTTP {status}"
            if isinstance(status, int) and status in _STATUS_USAGE:
                return "usage-limit", "usage limit", text or f"HTTP {status}"
            cls, reason = _classify_text(text)
            return cls, reason, text
        if _is_short_message(text) and _ERROR_SHAPED.match(text):
            cls, reason = _classify_text(text, strong_only=True)
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
        cls, reason = _classify_text(f"{code or ''}\n{text}")
        return cls, reason, text or str(code)
    if kind == "system" and event.get("subtype") == "api_retry":
        status = event.get("error_status")
        if isinstance(status, int) and status in _STATUS_USAGE:
            return "usage-limit", "usage limit", f"api_retry HTTP {status}"
        if isinstance(status, int) and status in _STATUS_BLOCKED:
            return "blocked", _STATUS_BLOCKED[status], f"api_retry HTTP {status}"
        cls, reason = _classify_text(str(event.get("error", "")))
        return cls, reason, str(event.get("error", ""))
    return None, "", ""


def _classify_plain(line: str) -> tuple[LineClass | None, str]:
    """A non-JSON line: only error-shaped ones (the CLI's own messages, `Error:` lines) are believed; a
    sentence that merely mentions an exception or a rate limit is not."""
    if not line.strip():
        return None, ""
    if _ERROR_SHAPED.match(line):
        return _classify_text(line)
    return None, ""


def _decode(line: str) -> Any:
    stripped = line.strip()
    if stripped[:1] not in ("{", "["):
        return None
    try:
        return json.loads(stripped)
    except (ValueError, RecursionError):
        return None


def classify_line(line: str) -> LineClass | None:
    """Streaming detection for one output line: "usage-limit", "blocked" or None.

    A hint for the live view and for early warnings; the verdict on a call is `parse_agent_output`'s, which
    also knows whether the call ended with a successful result (a survived 429 retry is not a limit).
    """
    decoded = _decode(line)
    if isinstance(decoded, dict):
        return _classify_event(decoded)[0]
    if isinstance(decoded, list):
        for item in decoded:
            if isinstance(item, dict):
                cls = _classify_event(item)[0]
                if cls:
                    return cls
        return None
    return _classify_plain(line)[0]


# --- the status block ---------------------------------------------------------------------------------------


def parse_status_block(text: str) -> dict[str, str]:
    """The fields of the last ---RALPH_STATUS--- block (`KEY: value` lines), keys upper-case as written."""
    blocks = _STATUS_BLOCK.findall(text)
    if not blocks:
        return {}
    fields: dict[str, str] = {}
    for line in blocks[-1].split("\n"):
        match = _STATUS_FIELD.match(line)
        if match:
            fields[match.group(1)] = match.group(2)
    return fields


def strip_status_block(text: str) -> str:
    """The text without its status block(s) (a block cut off before its end marker runs to the end)."""
    return _STATUS_BLOCK.sub("", text).strip()


# --- one call's output -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentOutput:
    """What one agent call said, read from its output."""

    reply: str | None
    """The reply text without the status block; None for a failed, limited or blocked call (not a reply)."""
    is_error: bool | None
    """The result object's `is_error`; None without a result object (text mode, or no result)."""
    tokens: int
    """`input_tokens + output_tokens` of the result's usage (summed per message when the stream has no result).
    Cache tokens are kept apart in `cache_tokens`: they are the same context re-read on every turn (tens of
    thousands per call), billed at a fraction, and would swamp budgets stated in loop-cost's terms."""
    session_id: str
    status: dict[str, str] = field(default_factory=dict)
    exit_signal: bool = False
    permission_denials: int = 0
    has_result: bool = False
    usage_limited: bool = False
    blocked: bool = False
    blocked_reason: str = ""
    failed: bool = False
    mode: Mode = "text"
    cache_tokens: int = 0
    """Cache creation + cache read input tokens, reported apart: they dwarf the rest and cost a fraction."""
    message: str = ""
    """For humans: the result text, or the error that classified the call, cut to a few hundred characters."""
    timed_out: bool = False


def _event_type(event: dict[str, Any]) -> str:
    """The event's `type`, or "" when it is missing or not a string (a list there must not crash a lookup)."""
    kind = event.get("type")
    return kind if isinstance(kind, str) else ""


def _usage_tokens(usage: Any) -> tuple[int, int]:
    if not isinstance(usage, dict):
        return 0, 0

    def num(key: str) -> int:
        value = usage.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return 0
        if isinstance(value, float) and not math.isfinite(value):
            return 0  # JSON's Infinity / 1e999: not a count
        return int(value) if value > 0 else 0

    return (
        num("input_tokens") + num("output_tokens"),
        num("cache_creation_input_tokens") + num("cache_read_input_tokens"),
    )


def _stream_usage(events: list[dict[str, Any]]) -> tuple[int, int]:
    """Without a result object: the last usage seen for each assistant message id, summed (stream-json
    repeats a message's usage on every content block of that message)."""
    per_message: dict[str, tuple[int, int]] = {}
    for index, event in enumerate(events):
        message = event.get("message")
        if event.get("type") != "assistant" or not isinstance(message, dict) or "usage" not in message:
            continue
        key = str(message.get("id") or f"#{index}")
        per_message[key] = _usage_tokens(message["usage"])
    return sum(t for t, _ in per_message.values()), sum(c for _, c in per_message.values())


def _collect(text: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Split the output into decoded JSON objects (arrays flattened) and the other, non-blank lines."""
    events: list[dict[str, Any]] = []
    plain: list[str] = []
    for line in text.split("\n"):
        decoded = _decode(line)
        if isinstance(decoded, dict):
            events.append(decoded)
        elif isinstance(decoded, list) and any(isinstance(item, dict) for item in decoded):
            events.extend(item for item in decoded if isinstance(item, dict))
        elif line.strip():
            plain.append(line.rstrip("\r"))
    if not any(isinstance(e.get("type"), str) for e in events):
        whole = _decode(text)  # pretty-printed JSON over several lines
        if isinstance(whole, dict):
            return [whole], []
        if isinstance(whole, list):
            return [item for item in whole if isinstance(item, dict)], []
    return events, plain


def _clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS] + "…"


def parse_agent_output(text: str, timed_out: bool = False) -> AgentOutput:
    """Read one call's whole output (JSON, stream-json or plain text) into an `AgentOutput`.

    Failed (CONTRACT): JSON modes, no result object or `is_error: true`; text mode, one of the last non-blank
    lines is an error line (or there is no output at all); either mode, cut off by a timeout. A usage-limited
    call is not failed (it is neutral); a blocked call is failed and blocked.
    """
    events, plain = _collect(text)
    claude_events = [e for e in events if _event_type(e) == "result" or _event_type(e) in _STREAM_TYPES]
    results = [e for e in claude_events if _event_type(e) == "result"]
    if not claude_events:
        return _parse_text(text, timed_out)
    mode: Mode = "stream-json" if any(_event_type(e) in _STREAM_TYPES for e in claude_events) else "json"
    result = results[-1] if results else None

    session_id = ""
    for event in ([result] if result else []) + claude_events[::-1]:
        if isinstance(event.get("session_id"), str) and event["session_id"]:
            session_id = event["session_id"]
            break

    result_text = ""
    is_error: bool | None = None
    permission_denials = 0
    if result is not None:
        result_text = result["result"] if isinstance(result.get("result"), str) else ""
        is_error = result["is_error"] if isinstance(result.get("is_error"), bool) else None
        denials = result.get("permission_denials")
        permission_denials = len(denials) if isinstance(denials, list) else 0
    if result is not None and isinstance(result.get("usage"), dict):
        tokens, cache_tokens = _usage_tokens(result["usage"])
    else:
        tokens, cache_tokens = _stream_usage(claude_events)
    subtype = result.get("subtype") if result is not None else None
    error_subtype = isinstance(subtype, str) and subtype.startswith("error")  # error_max_turns, error_during_execution

    # Evidence of a limit or a blocked error, from error positions only.
    limit_text = ""
    blocked_reason = ""
    blocked_text = ""
    for event in claude_events:
        cls, reason, said = _classify_event(event)
        if cls == "blocked" and not blocked_reason:
            blocked_reason, blocked_text = reason, said
        elif cls == "usage-limit" and not limit_text:
            limit_text = said
    for line in plain:
        cls, reason = _classify_plain(line)
        if cls == "blocked" and not blocked_reason:
            blocked_reason, blocked_text = reason, line
        elif cls == "usage-limit" and not limit_text:
            limit_text = line

    result_is_limit_message = result is not None and _classify_event(result)[0] is not None
    succeeded = (
        result is not None
        and is_error is not True
        and not error_subtype
        and not result_is_limit_message
        and not timed_out
    )
    blocked = bool(blocked_reason) and not succeeded
    usage_limited = bool(limit_text) and not succeeded and not blocked
    failed = (not succeeded or blocked) and not usage_limited

    status = parse_status_block(result_text)
    reply = None if (failed or usage_limited or blocked) else strip_status_block(result_text)
    if blocked:
        message = blocked_text
    elif usage_limited:
        message = limit_text
    elif result_text:
        message = strip_status_block(result_text)
    else:
        message = "\n".join(plain[-3:]) or ("no result" if result is None else "")
    return AgentOutput(
        reply=reply,
        is_error=is_error,
        tokens=tokens,
        session_id=session_id,
        status=status,
        exit_signal=status.get("EXIT_SIGNAL", "").strip().lower() == "true",
        permission_denials=permission_denials,
        has_result=result is not None,
        usage_limited=usage_limited,
        blocked=blocked,
        blocked_reason=f"{blocked_reason}: {_clip(blocked_text)}" if blocked else "",
        failed=failed,
        mode=mode,
        cache_tokens=cache_tokens,
        message=_clip(message),
        timed_out=timed_out,
    )


def _parse_text(text: str, timed_out: bool) -> AgentOutput:
    """Plain text mode: the whole output is the reply; its last lines tell failure, limits and blocks."""
    lines = [line.rstrip("\r") for line in text.split("\n") if line.strip()]
    tail = lines[-TEXT_TAIL_LINES:]
    limit_text = ""
    blocked_reason = ""
    blocked_text = ""
    for line in tail:
        cls, reason = _classify_plain(line)
        if cls == "blocked" and not blocked_reason:
            blocked_reason, blocked_text = reason, line
        elif cls == "usage-limit" and not limit_text:
            limit_text = line
    blocked = bool(blocked_reason)
    usage_limited = bool(limit_text) and not blocked
    error_at_end = any(is_error_line(line) for line in lines[-TEXT_FAILED_LINES:])
    failed = (not lines or error_at_end or timed_out or blocked) and not usage_limited
    status = parse_status_block(text)
    reply = None if (failed or usage_limited or blocked) else strip_status_block(text)
    message = blocked_text or limit_text or "\n".join(lines[-3:])
    return AgentOutput(
        reply=reply,
        is_error=None,
        tokens=0,
        session_id="",
        status=status,
        exit_signal=status.get("EXIT_SIGNAL", "").strip().lower() == "true",
        permission_denials=0,
        has_result=False,
        usage_limited=usage_limited,
        blocked=blocked,
        blocked_reason=f"{blocked_reason}: {_clip(blocked_text)}" if blocked else "",
        failed=failed,
        mode="text",
        cache_tokens=0,
        message=_clip(message),
        timed_out=timed_out,
    )
