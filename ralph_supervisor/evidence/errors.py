"""The two-stage error filter and error sets.

Ralph's filter runs on whole lines: stage 1 drops every line holding a JSON key with
"error" in its name, stage 2 keeps lines matching a fixed set of error patterns. In Claude's default JSON mode
the whole reply is one line holding `"is_error":`, so stage 1 throws the reply away and no error is ever seen.
Here stage 1 works on JSON *fields*: a decodable JSON line is decoded, error-named keys with falsy values are
dropped, and stage 2 runs over every line of the string values that remain (the reply, tool results, nested
message content). Lines that are not decodable JSON keep Ralph's semantics with the same fix applied to the
fragments: error fields are blanked out, the text of error fields with a string value is checked line by line,
and the rest of the line goes through stage 2. Ralph's own vectors keep their verdicts.

Everything here is pure. The output tap calls `error_lines_in_chunk` on whole chunks of bytes: a scan finds
the few lines that could be errors (every stage-2 match needs one of a handful of literals: candidates.py),
and only those lines are decoded and parsed, but for the commonest of them, code an agent writes through a
tool, which is proved free of errors without decoding (tool_input.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from ralph_supervisor.evidence.candidates import candidate_lines, literals
from ralph_supervisor.evidence.tool_input import only_in_tool_inputs
from ralph_supervisor.signature import error_signature
from ralph_supervisor.text import clip

__all__ = [
    "error_lines",
    "error_lines_in_chunk",
    "error_set",
    "is_error_line",
]

# Stage 2, Ralph's own patterns (grep -E over one line: `^` is the start of the line).
STAGE2 = re.compile(
    r"^Error:|^ERROR:|^error:|\]: error|Link: error|Error occurred|failed with error|[Ee]xception|Fatal|FATAL"
)
# The same patterns over a block of text whose lines are separated by "\n" (`^` after each "\n").
_STAGE2_BLOCK = re.compile(STAGE2.pattern, re.MULTILINE)

# A line that matches stage 2 (or holds `"is_error": true`) must contain one of these literals; everything
# else is skipped without decoding or regex work. JSON escapes never touch these ASCII letters and colons,
# so the check also holds for text inside JSON strings (short of deliberate `\u0045rror` escapes).
_CANDIDATE_LITERALS: tuple[str, ...] = (
    "rror:",  # ^Error: ^error:
    "RROR:",  # ^ERROR:
    "]: error",
    "Link: error",
    "Error occurred",
    "failed with error",
    "xception",  # [Ee]xception
    "Fatal",
    "FATAL",
)
_IS_ERROR_TRUE = re.compile(r'"is_error"\s*:\s*true', re.ASCII)
# Stage 1 on fragments of a line that is not decodable JSON: an error-named key and, when recognisable, its
# value (a falsy literal, or a JSON string).
_ERROR_FIELD = re.compile(
    r'"(?=[^"]*error)[^"]*+"\s*:\s*'  # lookahead + possessive: linear on long non-JSON lines
    r'(?:(?P<falsy>false|null|0+(?:\.0+)?|""|\[\s*\]|\{\s*\})(?![\w.])'
    r'|(?P<string>"(?:[^"\\]|\\.)*")'
    r")?",
    re.IGNORECASE,
)

_BLANKABLE = re.compile(r"[^\\n]")

MAX_ERROR_LINE = 1000
"""Error lines are cut to this many characters: a signature needs the start, not a 2 MB line."""


def _clip(line: str) -> str:
    return clip(line.rstrip("\r"), MAX_ERROR_LINE, ellipsis="")


def _has_candidate(line: str) -> bool:
    for lit in _CANDIDATE_LITERALS:
        if lit in line:
            return True
    return _IS_ERROR_TRUE.search(line) is not None


def _stage2_block(text: str, out: list[str], report: str | None = None) -> None:
    """Append every line of `text` (split on "\\n") that stage 2 keeps, in order, each once.

    `report`, when given, is a text of the same length and line layout whose lines are reported instead
    (the original of a line whose stage-1 fields were blanked out).
    """
    shown = text if report is None else report
    last_start = -1
    for match in _STAGE2_BLOCK.finditer(text):
        start = text.rfind("\n", 0, match.start()) + 1
        if start == last_start:
            continue
        last_start = start
        end = text.find("\n", match.start())
        out.append(_clip(shown[start : end if end >= 0 else len(text)]))


def _first_non_blank(text: str) -> str:
    return next((line for line in text.split("\n") if line.strip()), "")


def _json_error_lines(value: Any, out: list[str]) -> None:
    """Walk a decoded JSON value in document order and run stage 2 over its strings.

    Dropped: error-named keys with falsy values (stage 1 on fields) and the `input` of `tool_use` blocks (what
    the agent asked a tool to do, such as a file it writes, is not output). A result object with
    `is_error: true` proves its message is an error even when no pattern matches it ("API Error: 500 ..."),
    so the first line of its `result` (or its `subtype` when there is no text) is kept as an error line.
    """
    stack: list[Any] = [value]
    pop = stack.pop
    extend = stack.extend
    search = _STAGE2_BLOCK.search
    while stack:
        node = pop()
        kind = type(node)
        if kind is str:
            if search(node) is not None:  # most strings hold no error: one C call, no Python work
                _stage2_block(node, out)
        elif kind is dict:
            node_type = node.get("type")
            if node_type == "result" and node.get("is_error") is True:
                message = node.get("result")
                first = _first_non_blank(message) if isinstance(message, str) else ""
                if not first:
                    subtype = node.get("subtype")
                    first = subtype if isinstance(subtype, str) else "is_error"
                out.append(_clip(first))
            children = [
                child
                for key, child in node.items()
                if (child or "error" not in key.lower()) and not (key == "input" and node_type == "tool_use")
            ]
            children.reverse()
            extend(children)
        elif kind is list:
            extend(reversed(node))


def _decode_json_string(quoted: str) -> str:
    try:
        decoded = json.loads(quoted)
    except ValueError:
        return quoted[1:-1]
    return decoded if isinstance(decoded, str) else quoted[1:-1]


def _fragment_error_lines(line: str, looks_like_json: bool, out: list[str]) -> None:
    """Stage 1 and 2 for a line that is not decodable JSON (pretty-printed or truncated JSON, plain logs).

    Error fields are blanked out (Ralph dropped the whole line); the string value of an error field is
    checked line by line; the rest of the line goes through stage 2. A line that looks like JSON but does not
    decode (the tap caps line length) still holds its strings' "\\n" escapes: those count as line breaks.
    """
    in_values: list[str] = []

    def cut(match: re.Match[str]) -> str:
        quoted = match.group("string")
        if quoted is not None:
            _stage2_block(_decode_json_string(quoted), in_values)
        # Blank, not remove, and keep "\\" and "n": positions and "\\n" escapes stay those of `line`.
        return _BLANKABLE.sub(" ", match.group(0))

    rest = _ERROR_FIELD.sub(cut, line) if '"' in line else line
    if looks_like_json:
        _stage2_block(rest.replace("\\n", "\n"), out, report=line.replace("\\n", "\n"))
    elif STAGE2.search(rest):
        out.append(_clip(line))
    out.extend(in_values)


def error_lines(line: str) -> list[str]:
    """The error lines the two-stage filter finds in ONE line of output (already decoded text).

    A plain line yields itself or nothing; a JSON line yields the lines of its strings that are errors.
    """
    if not line or not _has_candidate(line):
        return []
    if "\n" in line:
        return [found for part in line.split("\n") for found in error_lines(part)]
    return _candidate_error_lines(line)


def _candidate_error_lines(line: str) -> list[str]:
    """`error_lines` for a line already known to hold a candidate literal (and no "\\n")."""
    out: list[str] = []
    stripped = line.lstrip()
    looks_like_json = stripped[:1] in ("{", "[")
    if looks_like_json:
        try:
            decoded = json.loads(line)
        except (ValueError, RecursionError):
            pass
        else:
            if isinstance(decoded, (dict, list)):
                _json_error_lines(decoded, out)
                return _unique(out)
    _fragment_error_lines(line, looks_like_json, out)
    return _unique(out)


def _unique(lines: list[str]) -> list[str]:
    if len(lines) < 2:
        return lines
    return list(dict.fromkeys(lines))


def is_error_line(line: str) -> bool:
    """True when the filter finds at least one error in the line."""
    return bool(error_lines(line))


def error_lines_in_chunk(data: bytes) -> list[str]:
    """The error lines of a chunk of whole lines (split on b"\\n"; the caller keeps a partial last line for
    the next chunk). Same result as `error_lines(line.decode("utf-8", "replace"))` over every line, in order,
    at a fraction of the cost: only lines holding a candidate literal are decoded and parsed. (The one
    difference: a JSON string that spells an error word with `\\u` escapes of ASCII letters, which no JSON
    encoder writes, may be read differently here and by `error_lines`.)"""
    out: list[str] = []
    starts, masks = candidate_lines(data)
    for start, mask in zip(starts, masks):
        end = data.find(b"\n", start)
        raw = data[start : end if end >= 0 else len(data)]
        if only_in_tool_inputs(raw, literals(mask)):
            continue  # code the agent writes through a tool, mentioning exceptions: proved without decoding
        out.extend(_candidate_error_lines(raw.decode("utf-8", errors="replace")))
    return out


def error_set(lines: Iterable[str]) -> frozenset[str]:
    """The signatures (loop-context's normalisation) of some error lines: an iteration's error set."""
    return frozenset(sig for sig in (error_signature(line) for line in lines) if sig)
