"""What every agent adapter shares: the value one call's output becomes, the reading of output into JSON events
and plain lines, the words that mark a usage limit or an error only a human can clear, and plain text mode.

Whether a call failed, hit a usage limit, or hit something only a human can clear (credentials, billing,
policy) is read from its output: an exit code is known only for a call the shims saw, and then it adds one
case (`evidence.iterations.build_report`: a call that printed nothing and exited non-zero failed).
Misclassification is the risk. A reply that *talks about* rate limiting or API keys is ordinary work, so the
limit and blocked patterns are only looked for in error positions: the error events and fields of each agent's
format, the CLI's own non-JSON lines when they are shaped like errors, and, in text mode, error-shaped lines
among the last few. A call that ends with a successful result is neither limited nor blocked, whatever
retries it survived on the way.

An adapter (one module per agent) turns the decoded output into a `Findings` and `Findings.verdict` turns that
into the `AgentOutput` every rule of the breaker reads the same way, whatever agent printed it.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import tzinfo
from typing import Any, ClassVar, Literal

from ralph_supervisor.agents.limits import reset_time
from ralph_supervisor.agents.outages import API_UNREACHABLE
from ralph_supervisor.agents.usage import UsageReport
from ralph_supervisor.evidence.errors import MAX_ERROR_LINE, error_lines, is_error_line
from ralph_supervisor.agents.recognize import ANY, PromptMode, name_matches, stem
from ralph_supervisor.text import clip as clip_text

LineClass = Literal["usage-limit", "blocked"]

STATUS_START = "---RALPH_STATUS---"
STATUS_END = "---END_RALPH_STATUS---"
_STATUS_BLOCK = re.compile(re.escape(STATUS_START) + r"(.*?)(?:" + re.escape(STATUS_END) + r"|\Z)", re.DOTALL)
_STATUS_FIELD = re.compile(r"^\s*([A-Z][A-Z0-9_]*)\s*:\s*(.*?)\s*$")

TEXT_TAIL_LINES = 5
"""In text mode, only this many last non-blank lines are error positions for limits and blocked errors."""
TEXT_FAILED_LINES = 3
"""In text mode, a call failed when one of its last this-many non-blank lines is an error line."""
MAX_BLOCK_LINES = 20
"""... those last lines reach back at most this many lines more, to the head of an indented block."""
SHORT_RESULT = 300
"""A result text this short that is nothing but a limit or login message is that message, even when the
CLI reported it without an error flag (Claude Code has done so for usage limits)."""
MESSAGE_CHARS = 500
MAX_AGENT_ERROR_LINES = 20
"""Error lines an adapter adds for the filter (the agent's own error events), at most this many per call."""
MAX_LIMIT_TEXTS = 8
"""Texts saying "usage limit" kept per call, for the one that says when it resets."""
MAX_PRETTY_LINES = 2_000
"""A pretty-printed JSON block (Gemini's error object) is looked for over at most this many lines ..."""
MAX_PRETTY_TRIES = 20
"""... and at most this many times per call (an agent prints one or two; garbage must not cost n^2)."""

# --- what a usage limit and a blocked error look like ------------------------------------------------------

# Specific messages of the CLIs and their APIs: they rarely occur in prose, but are still only believed in
# error positions (or as a short result that is nothing else).
_USAGE_STRONG = re.compile(
    r"usage limit (?:has been )?reached"
    r"|\b(?:5|five)-hour limit"
    r"|hit your (?:[\w-]+ )?limit"  # Claude Code, and Codex's "You've hit your usage limit"
    r"|out of extra usage"
    r"|\b(?:session|weekly|daily|opus|sonnet) limit reached"
    r"|limit reached\s*[∙·|]"
    r"|rate_limit_error|overloaded_error"
    r"|API Error:\s*(?:\w+ )*\(?(?:429|529)\b"
    r"|\b429 Too Many Requests"
    r"|exhausted your (?:\w+ )?(?:capacity|quota)|quota will reset"  # Gemini CLI (googleQuotaErrors.ts)
    r"|RESOURCE_EXHAUSTED|TerminalQuotaError|RetryableQuotaError",
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
        ("invalid API key", r"invalid api key|invalid x-api-key|api key not valid"),
        (
            "authentication failed",
            r"authentication_error|authentication[_ ]failed|oauth token (?:has )?(?:expired|been revoked)"
            r"|refresh token (?:has )?(?:expired|been revoked|was already used)|ProviderAuthError"
            r"|FatalAuthenticationError"
            r"|\bAPI Error:\s*(?:\w+ )*\(?40[13]\b|\b401 Unauthorized\b|\b403 Forbidden\b",
        ),
        ("not logged in", r"please run /login|not logged in|(?:log|sign) in again|please (?:log|sign) in"
                          r"|run [`'\"]?[\w-]+ login\b"),
        ("credit balance too low", r"credit balance is too low"),
        ("payment required", r"payment required|billing_error|(?:HTTP|status|code|API Error|error)\W{0,3}402\b"
                             r"|upgrade to (?:Plus|Pro) to continue"),
        ("quota exhausted", r"quota (?:is )?(?:exhausted|exceeded)|insufficient_quota"),
        (
            "permission denied by policy",
            r"(?:denied|blocked|disabled|prohibited|not allowed) by (?:[\w'-]+ ){0,3}polic(?:y|ies)|permission_error",
        ),
        ("account disabled", r"(?:organi[sz]ation|account) (?:has been |is )?(?:disabled|suspended)"),
    )
)

# A line shaped like an error a CLI or a tool prints (as opposed to a sentence of the agent's reply).
_ERROR_SHAPED = re.compile(
    r"^\s*(?:■\s*)?(?:\[(?!API Error)[^\]]*\]\s*)*\[?(?:"
    r"API Error|Error:|error:|ERROR\b|Fatal:|FATAL\b|Claude AI usage limit|Invalid API key|Not logged in"
    r"|Please run /login|Credit balance|You've hit your|You're out of|You have reached|You have exhausted"
    r"|(?:5|five)-hour limit|(?:Session|Weekly|Daily|Opus|Sonnet) limit|Rate limit|Usage limit|Quota exceeded"
    r"|HTTP \d{3}|\d{3} (?:Too Many|Unauthorized|Forbidden)"
    r")"
)
STATUS_USAGE = frozenset({429, 529})
STATUS_BLOCKED = {401: "authentication failed", 402: "payment required", 403: "authentication failed"}


def blocked_reason(text: str) -> str:
    for reason, pattern in _BLOCKED:
        if pattern.search(text):
            return reason
    return ""


def classify_text(text: str, strong_only: bool = False) -> tuple[LineClass | None, str]:
    """Classify text found in an error position. Blocked wins over a limit: waiting cannot clear it."""
    if not text:
        return None, ""
    reason = blocked_reason(text)
    if reason:
        return "blocked", reason
    if _USAGE_STRONG.search(text) or (not strong_only and _USAGE_WEAK.search(text)):
        return "usage-limit", "usage limit"
    return None, ""


def classify_status(status: Any) -> tuple[LineClass | None, str]:
    """An HTTP status an agent reports with its error: 429/529 are limits, 401/402/403 blocked."""
    if isinstance(status, int) and not isinstance(status, bool):
        if status in STATUS_USAGE:
            return "usage-limit", "usage limit"
        if status in STATUS_BLOCKED:
            return "blocked", STATUS_BLOCKED[status]
    return None, ""


def classify_plain(line: str) -> tuple[LineClass | None, str]:
    """A non-JSON line: only error-shaped ones (the CLI's own messages, `Error:` lines) are believed; a
    sentence that merely mentions an exception or a rate limit is not."""
    if line.strip() and _ERROR_SHAPED.match(line):
        return classify_text(line)
    return None, ""


def is_short_message(text: str) -> bool:
    return 0 < len(text.strip()) <= SHORT_RESULT


def is_error_shaped(text: str) -> bool:
    return _ERROR_SHAPED.match(text) is not None


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


# --- small readers of JSON values ---------------------------------------------------------------------------


def count(value: Any) -> int | None:
    """A token count from a JSON value: a finite, non-negative number (as int), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON's Infinity / 1e999: not a count
    return int(value) if value > 0 else 0


def dollars(value: Any) -> float | None:
    """A cost in dollars from a JSON value: a finite, non-negative number, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    amount = float(value)
    return amount if math.isfinite(amount) and amount >= 0 else None


def text_of(value: Any) -> str:
    return value if isinstance(value, str) else ""


def event_type(event: dict[str, Any]) -> str:
    """The event's `type`, or "" when it is missing or not a string (a list there must not crash a lookup)."""
    kind = event.get("type")
    return kind if isinstance(kind, str) else ""


def first_line(text: str) -> str:
    return next((line.strip() for line in text.split("\n") if line.strip()), "")


def clip(text: str) -> str:
    """A message for humans: stripped, at most MESSAGE_CHARS characters and an ellipsis."""
    return clip_text(text.strip(), MESSAGE_CHARS + 1)


# --- reading the output -------------------------------------------------------------------------------------


@dataclass
class Output:
    """One call's output, read once for every adapter: the JSON objects in order, how many there are of each
    `type` ("" for none), the other non-blank lines, and how many lines looked like JSON but did not decode
    (cut off, or binary)."""

    text: str
    events: list[dict[str, Any]] = field(default_factory=list)
    kinds: Counter[str] = field(default_factory=Counter)
    plain: list[str] = field(default_factory=list)
    malformed: int = 0

    def add(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        kind = event.get("type")
        self.kinds[kind if isinstance(kind, str) else ""] += 1


_SCAN = json.JSONDecoder().scan_once
"""The C scanner under `json.loads`, called directly: one call per line instead of three and two regex matches
(most of the cost of a stream of small events)."""


def _decode(line: str) -> Any:
    """The JSON value that is the whole (stripped) line, or None."""
    try:
        value, end = _SCAN(line, 0)
    except (StopIteration, ValueError, RecursionError):
        return None
    return value if end == len(line) else None


_JSON_ARRAY_START = re.compile(r"\[\s*(?:[{\[\"]|\]|$)")


def _looks_like_json(stripped: str) -> bool:
    """An object, or an array of objects, arrays or strings: not a log line such as `[INFO] ...`."""
    return stripped[0] == "{" or (stripped[0] == "[" and _JSON_ARRAY_START.match(stripped) is not None)


def read_output(text: str) -> Output:
    """Split a call's output into decoded JSON objects (arrays flattened; pretty-printed objects over several
    lines, such as Gemini's error object on stderr, put together) and the remaining non-blank lines."""
    out = Output(text)
    lines = text.split("\n")
    index = 0
    total = len(lines)
    tries = MAX_PRETTY_TRIES
    while index < total:
        line = lines[index]
        index += 1
        stripped = line.strip()
        if not stripped:
            continue
        if not _looks_like_json(stripped):
            out.plain.append(line.rstrip("\r"))
            continue
        decoded = _decode(stripped)
        if decoded is None and stripped in ("{", "[") and tries > 0:
            tries -= 1
            decoded, index = _pretty_block(lines, index - 1, stripped)
        if isinstance(decoded, dict):
            out.events.append(decoded)
            kind = decoded.get("type")
            out.kinds[kind if isinstance(kind, str) else ""] += 1
        elif isinstance(decoded, list) and any(isinstance(item, dict) for item in decoded):
            for item in decoded:
                if isinstance(item, dict):
                    out.add(item)
        else:
            if decoded is None:
                out.malformed += 1
            out.plain.append(line.rstrip("\r"))
    return out


def _pretty_block(lines: list[str], start: int, opener: str) -> tuple[Any, int]:
    """The JSON value that starts with a line holding only `{` (or `[`) and ends with a line holding only the
    closing bracket at the same indentation; (None, start + 1) when there is no such value."""
    indent = len(lines[start]) - len(lines[start].lstrip())
    closer = "}" if opener == "{" else "]"
    stop = min(len(lines), start + MAX_PRETTY_LINES)
    for end in range(start + 1, stop):
        candidate = lines[end].rstrip()
        if candidate.strip() in (closer, closer + ",") and len(candidate) - len(candidate.lstrip()) == indent:
            decoded = _decode("\n".join(lines[start:end + 1]).strip().rstrip(","))
            if decoded is not None:
                return decoded, end + 1
            break
    return None, start + 1


# --- what an adapter finds, and the verdict ---------------------------------------------------------------


@dataclass(frozen=True)
class AgentOutput:
    """What one agent call said, read from its output by the adapter of its agent."""

    reply: str | None
    """The reply text without the status block; None for a failed, limited or blocked call (not a reply)."""
    agent: str = "text"
    """The adapter that read the output (claude, codex, gemini, opencode, cursor, amp, text)."""
    mode: str = "text"
    """The format found: "json", "stream-json" or "text"."""
    failed: bool = False
    usage_limited: bool = False
    limit_resets_at: float | None = None
    """When the usage limit resets (epoch seconds), when the output said so."""
    blocked: bool = False
    blocked_reason: str = ""
    tokens: int | None = None
    """Non-cached input + output tokens the agent reported; None when it reported none."""
    cache_tokens: int | None = None
    """Cached input tokens, kept apart: the same context re-read on every turn (tens of thousands per call),
    billed at a fraction; they would swamp budgets stated in loop-cost's terms."""
    cost_usd: float | None = None
    """Dollars the agent reported for this call; None when it reports none."""
    session_id: str = ""
    status: dict[str, str] = field(default_factory=dict)
    exit_signal: bool = False
    error_lines: tuple[str, ...] = ()
    """Errors the agent reported in its own events (a failed turn, an error event), for the error filter,
    which finds the errors inside its JSON text itself."""
    is_error: bool | None = None
    """The result object's error flag; None without a result object."""
    has_result: bool = False
    permission_denials: int = 0
    message: str = ""
    """For humans: the reply, or the error that classified the call, cut to a few hundred characters."""
    timed_out: bool = False
    malformed_lines: int = 0
    """Lines that looked like JSON but did not decode (cut off, binary): skipped, counted."""
    unknown_events: int = 0
    """JSON events of a type this agent's format does not have (another format, a newer CLI): skipped, counted."""
    outage: bool = False
    """The agent said it cannot reach its API (its own retry reports or error events) and the call did not
    succeed: neutral, like a usage limit (`outage.py`)."""
    outage_message: str = ""
    """The last thing it said about that (`api_retry 3/10: unknown`, `Reconnecting... waiting for network`)."""
    usage: UsageReport = field(default_factory=UsageReport)
    """Its usage windows, as it reported them (`agents/usage.py`); empty when it said nothing."""


@dataclass
class Findings:
    """What an adapter found in one call's output, before the verdict."""

    agent: str
    now: float = 0.0
    """The call's end (epoch seconds): a reset time the output gives as a time of day is placed after it."""
    tz: tzinfo | None = None
    """The zone of times the output gives without one; None: this machine's."""
    mode: str = "text"
    succeeded: bool = False
    """The output ends with a successful result (the format's own success marker)."""
    result_text: str = ""
    """The reply as the agent gave it (status block included)."""
    limit_text: str = ""
    """The first evidence of a usage limit: what the call's message says."""
    limit_texts: list[str] = field(default_factory=list)
    """All of it (a few), where a reset time may be stated."""
    limit_resets_at: float | None = None
    blocked_reason: str = ""
    blocked_text: str = ""
    tokens: int | None = None
    cache_tokens: int | None = None
    cost_usd: float | None = None
    session_id: str = ""
    error_lines: list[str] = field(default_factory=list)
    is_error: bool | None = None
    has_result: bool = False
    permission_denials: int = 0
    fallback_message: str = ""
    malformed: int = 0
    unknown: int = 0
    outage_text: str = ""
    """The agent's last report that its API is out of reach (the last one is kept)."""
    usage: UsageReport = field(default_factory=UsageReport)

    def unreachable(self, text: str) -> None:
        """The agent said it cannot reach its API (a retry report, an error event saying so)."""
        self.outage_text = text or "the API is unreachable"

    def limit(self, text: str, resets_at: float | None = None) -> None:
        """Evidence of a usage limit (the first text is kept; a reset time is taken wherever it comes)."""
        if not self.limit_text:
            self.limit_text = text or "usage limit"
        if text and len(self.limit_texts) < MAX_LIMIT_TEXTS and text not in self.limit_texts:
            self.limit_texts.append(text)
        if self.limit_resets_at is None and resets_at is not None:
            self.limit_resets_at = resets_at

    def block(self, reason: str, text: str) -> None:
        """Evidence of an error only a human can clear (the first is kept)."""
        if not self.blocked_reason:
            self.blocked_reason, self.blocked_text = reason, text or reason

    def classified(self, cls: LineClass | None, reason: str, text: str) -> None:
        if cls == "blocked":
            self.block(reason, text)
        elif cls == "usage-limit":
            self.limit(text)

    def error_position(self, text: str) -> None:
        """Text the format marks as an error: it may say limit or blocked."""
        self.classified(*classify_text(text), text)

    def agent_error(self, text: str) -> None:
        """An error the agent reported in its own event: an error line for the filter, and an error position;
        one that says its API is out of reach is an outage (never a tool's error: those are error positions
        only, so a test's `fetch failed` inside a tool call is not)."""
        line = first_line(text)
        if line and len(self.error_lines) < MAX_AGENT_ERROR_LINES and line not in self.error_lines:
            self.error_lines.append(clip_text(line, MAX_ERROR_LINE, ellipsis=""))
        cls, reason = classify_text(text)
        self.classified(cls, reason, text)
        if cls is None and API_UNREACHABLE.search(text[:MESSAGE_CHARS * 4]):
            self.unreachable(line)

    def reply_errors(self, text: str) -> None:
        """The error filter over a reply the agent printed in pieces (deltas): the output's lines hold only
        fragments of its lines, so the whole lines are handed to the filter here."""
        for line in text.split("\n"):
            for found in error_lines(line):
                if len(self.error_lines) < MAX_AGENT_ERROR_LINES and found not in self.error_lines:
                    self.error_lines.append(found)

    def add_tokens(self, tokens: int | None, cache: int | None = None) -> None:
        if tokens is not None:
            self.tokens = (self.tokens or 0) + tokens
        if cache is not None:
            self.cache_tokens = (self.cache_tokens or 0) + cache

    def add_cost(self, amount: float | None) -> None:
        if amount is not None:
            self.cost_usd = (self.cost_usd or 0.0) + amount

    def plain_lines(self, lines: Iterable[str]) -> None:
        """The CLI's own non-JSON lines (stderr, logs): error-shaped ones are error positions."""
        for line in lines:
            cls, reason = classify_plain(line)
            self.classified(cls, reason, line)

    def verdict(self, *, timed_out: bool) -> AgentOutput:
        """Failed (CONTRACT 5): no successful result, or cut off by a timeout. A usage-limited call is not
        failed (it is neutral); a blocked call is failed and blocked; neither is a reply."""
        succeeded = self.succeeded and not timed_out
        blocked = bool(self.blocked_reason) and not succeeded
        usage_limited = bool(self.limit_text) and not succeeded and not blocked
        outage = bool(self.outage_text) and not succeeded and not blocked and not usage_limited
        failed = (not succeeded or blocked) and not usage_limited and not outage
        resets_at = None
        if usage_limited:
            resets_at = self.limit_resets_at
            for text in self.limit_texts:
                if resets_at is not None:
                    break
                resets_at = reset_time(text, self.now, self.tz)
        status = parse_status_block(self.result_text)
        reply = None if (failed or usage_limited or blocked or outage) else strip_status_block(self.result_text)
        if blocked:
            message = self.blocked_text
        elif usage_limited:
            message = self.limit_text
        elif outage:
            message = self.outage_text
        elif self.mode == "text":
            message = self.fallback_message
        else:
            message = strip_status_block(self.result_text) or self.fallback_message
        return AgentOutput(
            reply=reply,
            agent=self.agent,
            mode=self.mode,
            failed=failed,
            usage_limited=usage_limited,
            limit_resets_at=resets_at,
            blocked=blocked,
            blocked_reason=f"{self.blocked_reason}: {clip(self.blocked_text)}" if blocked else "",
            tokens=self.tokens,
            cache_tokens=self.cache_tokens,
            cost_usd=self.cost_usd,
            session_id=self.session_id,
            status=status,
            exit_signal=status.get("EXIT_SIGNAL", "").strip().lower() == "true",
            error_lines=tuple(self.error_lines),
            is_error=self.is_error,
            has_result=self.has_result,
            permission_denials=self.permission_denials,
            message=clip(message),
            timed_out=timed_out,
            malformed_lines=self.malformed,
            unknown_events=self.unknown,
            outage=outage,
            outage_message=clip(self.outage_text) if outage else "",
            usage=self.usage,
        )


def _tail_start(lines: list[str], tail: int) -> int:
    """Where the last `tail` lines begin, moved back to the head of the indented block they begin inside:
    a CLI's error is often one `Error: ...` line and indented details (Cursor's usage limit is eight lines)."""
    start = max(0, len(lines) - tail)
    floor = max(0, start - MAX_BLOCK_LINES)
    while start > floor and lines[start][:1] in (" ", "\t"):
        start -= 1
    return start


def read_text_mode(findings: Findings, output: Output) -> None:
    """Plain text: the whole output is the reply; its last lines tell failure, limits and blocks."""
    findings.mode = "text"
    lines = [line.rstrip("\r") for line in output.text.split("\n") if line.strip()]
    findings.plain_lines(lines[_tail_start(lines, TEXT_TAIL_LINES):])
    error_at_end = any(is_error_line(line) for line in lines[_tail_start(lines, TEXT_FAILED_LINES):])
    said_so = bool(findings.limit_text or findings.blocked_reason)  # a text call has no success marker to trust
    findings.succeeded = bool(lines) and not error_at_end and not said_so
    findings.result_text = output.text
    findings.fallback_message = "\n".join(lines[-3:])


# --- the adapter interface ------------------------------------------------------------------------------

RUN, RO, RW, COPY = "run", "ro", "rw", "copy"
"""How an agent's path is held in a `--sandbox` box (`Adapter.sandbox_home`)."""



class Adapter:
    """One agent CLI: how its calls are recognised and how its output is read.

    Subclasses set `name`, `commands` (process names), `packages` (paths of the npm packages a `node`/`bun`
    wrapper runs), `event_types` (the `type`s of its JSON events) and implement `read_events`; everything
    else (text mode, limits, the verdict) is shared.
    """

    name: ClassVar[str] = "text"
    commands: ClassVar[tuple[str, ...]] = ()
    packages: ClassVar[tuple[str, ...]] = ()
    event_types: ClassVar[frozenset[str]] = frozenset()
    distinctive: ClassVar[frozenset[str]] = frozenset()
    """Event types only this agent prints: the evidence `owns` looks for when no process name says."""
    prompt: ClassVar[PromptMode] = ANY
    """How its CLI is run for a one-shot call (`-p`, `exec`): only those invocations are iterations."""
    sandbox_home: ClassVar[tuple[tuple[str, str], ...]] = ()
    """What its CLI has of the home folder in a `--sandbox` box, as (path under home, how), parents first:
    `RUN` a folder of the run's own in its place (what the CLI writes there never reaches the user's folder),
    `RO` the user's file or folder read-only where it exists (`name/*`: each entry of that folder but the
    hidden ones), `RW` the user's read-write (a folder, written `name/`, is made where missing and its parent
    exists; a file only where it exists), `COPY` a copy of the user's file, made in the run's folder at the
    first start (the CLI rewrites its copy). The layout is agent_folders.py's."""
    sandbox_folder: ClassVar[tuple[str, str]] = ("", "")
    """(variable, path under home): the variable that moves the CLI's folder (`CLAUDE_CONFIG_DIR`); where it
    is set, the paths under that folder are under its value. The box sets it to the folder."""
    sandbox_copied_from: ClassVar[dict[str, str]] = {}
    """A `COPY` made from another path under home than its own (while the folder is not moved)."""
    sandbox_env: ClassVar[tuple[str, ...]] = ()
    """Prefixes of its own environment variables, kept in the box's allow-list."""

    @property
    def family(self) -> str:
        """The format it prints: its own name, or the agent whose format it copies (Claude's, for two)."""
        return self.name

    def matches(self, name: str, argv: Sequence[str]) -> bool:
        """Is this process (name and command line) a call of this agent? A `node` or `bun` wrapper counts by
        the script it runs: its name, or the npm package it lives in."""
        if not self.commands:
            return False
        if name_matches(name, argv, self.commands):
            return True
        for script in (arg for arg in argv[:2] if arg):
            if stem(script) in self.commands or any(package in script for package in self.packages):
                return True
        return False

    def owns(self, output: Output) -> int:
        """How many of the output's events only this agent prints (0: not this agent's format)."""
        return sum(output.kinds[kind] for kind in self.distinctive)

    def read(self, output: Output, *, timed_out: bool = False, exit_code: int | None = None,
             now: float = 0.0, tz: tzinfo | None = None) -> AgentOutput:
        """The verdict on one call's output (`now` and `tz` place a reset time the output states)."""
        findings = Findings(self.name, now=now, tz=tz, malformed=output.malformed)
        if not self.read_events(output, findings):
            if self.event_types:  # an agent with a JSON format: the events found are some other format's
                findings.unknown = len(output.events)
            read_text_mode(findings, output)
        if exit_code:
            self.exit_code(exit_code, findings)
        return findings.verdict(timed_out=timed_out)

    def read_events(self, output: Output, findings: Findings) -> bool:
        """Fill `findings` from the output's events; False when none of them is this agent's (text mode)."""
        return False

    def exit_code(self, code: int, findings: Findings) -> None:
        """A non-zero exit code, when the supervisor knows it: the call did not succeed."""
        findings.succeeded = False

    def known(self, findings: Findings, output: Output) -> list[dict[str, Any]]:
        """The events of this agent's format (each with a `type` of it); the others are counted as unknown."""
        if all(kind in self.event_types for kind in output.kinds):
            return output.events
        mine = [event for event in output.events if event_type(event) in self.event_types]
        findings.unknown += len(output.events) - len(mine)
        return mine
