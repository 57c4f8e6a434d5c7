"""Lines whose candidate literals all sit in the input of tool_use blocks: proved without decoding them.

The error filter decodes every line that holds one of its candidate literals (`Exception`, `Error:`, ...) and
walks its strings, skipping the `input` of `tool_use` blocks: what the agent asks a tool to do (the code it
writes) is not output. In an agent's output the most common candidate line by far is exactly that: an
assistant event whose tool_use block writes code that mentions exceptions. Decoding it to learn that the
mention is inside the input costs the filter as much as its whole scan of the stream.

`only_in_tool_inputs` proves it more cheaply, and exactly: msgspec reads the line's structure (checking all
of it as JSON, building only each content block's `type` and the raw bytes of its `input`), and every
candidate literal occurs as often in the line as in the inputs of its tool_use blocks. Then no string the
filter would read holds a candidate literal, so the line yields no error line. A line msgspec cannot prove
this way (another shape, invalid JSON, a literal elsewhere) is decoded as before.

    >>> only_in_tool_inputs(b'{"message":{"content":[{"type":"tool_use","input":{"code":"raise Exception"}}]}}',
    ...                     [b"xception"])
    True
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

try:
    import msgspec
except ImportError:  # without msgspec every candidate line is decoded
    msgspec = None

MAX_BRACKETS = 500
"""More `{` and `[` than this and a line could nest deeper than json.loads reads (it would then be read as
text, not JSON): such a line is decoded as before. JSON nests at most half its length deep, so only a line
longer than twice this is counted."""

MAX_DIGITS = 4300
"""json.loads refuses an integer of more digits than this (sys.get_int_max_str_digits), msgspec skips it."""


if msgspec is not None:

    class _Block(msgspec.Struct, gc=False):
        """A content block: its type, and its input as raw JSON (checked, not built); the rest is checked only."""

        type: Any = None
        input: msgspec.Raw = msgspec.Raw()

    class _Message(msgspec.Struct, gc=False):
        content: list[_Block] = []

    class _Event(msgspec.Struct, gc=False):
        """A stream-json event as Claude Code writes it: `{"type": ..., "message": {"content": [...]}, ...}`."""

        message: _Message | None = None

    _read_event = msgspec.json.Decoder(_Event).decode
    _Refused: type[Exception] = msgspec.DecodeError
else:
    _read_event = None
    _Refused = Exception


def only_in_tool_inputs(line: bytes, literals: Iterable[bytes]) -> bool:
    """True when `line` is a JSON object (as json.loads would read it too) whose occurrences of every one of
    `literals` all lie in the `input` of its message's tool_use content blocks."""
    if _read_event is None:
        return False
    if len(line) > 2 * MAX_BRACKETS and line.count(b"{") + line.count(b"[") > MAX_BRACKETS:
        return False
    if len(line) > MAX_DIGITS and max(map(len, line.translate(_NON_DIGITS_TO_SPACE).split()), default=0) > MAX_DIGITS:
        return False
    try:
        event = _read_event(line)
    except (_Refused, RecursionError):
        return False
    blocks = event.message.content if event.message is not None else []
    if len(blocks) == 1:
        inputs = bytes(blocks[0].input) if blocks[0].type == "tool_use" else b""
    else:  # joined by "\n", which no literal holds: none can span two inputs
        inputs = b"\n".join(bytes(block.input) for block in blocks if block.type == "tool_use")
    for literal in literals:
        if line.count(literal) != inputs.count(literal):
            return False
    return True


_NON_DIGITS_TO_SPACE = bytes(c if 48 <= c <= 57 else 32 for c in range(256))
"""Cuts a line into its runs of digits (only for a line long enough to hold an integer json.loads refuses)."""
