"""A line proved free of errors without decoding (its candidate literals all in tool_use inputs) is one the
error filter, decoding it, finds no error in; and such lines are the ones an agent's tool calls write."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from ralph_supervisor.evidence.candidates import CANDIDATE_BYTES
from ralph_supervisor.evidence.errors import error_lines, error_lines_in_chunk
from ralph_supervisor.evidence.tool_input import MAX_BRACKETS, MAX_DIGITS, only_in_tool_inputs
from tests.helpers.fuzzing import CHEAP, json_values

CODE = "class ParseException extends Exception {\n  throw new Error('x'); // Fatal: no\n}"


def tool_use_event(input_value: Any, **extra: Any) -> dict[str, Any]:
    block = {"type": "tool_use", "id": "toolu_1", "name": "Write", "input": input_value}
    return {"type": "assistant", "message": {"id": "msg_1", "role": "assistant", "content": [block]},
            "session_id": "s", **extra}


def line_of(event: Any) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode()


def test_code_written_through_a_tool_is_proved_free_of_errors() -> None:
    line = line_of(tool_use_event({"file_path": "a.ts", "content": CODE}))
    assert only_in_tool_inputs(line, CANDIDATE_BYTES)
    assert error_lines(line.decode()) == [] and error_lines_in_chunk(line) == []


def test_a_literal_outside_the_inputs_is_decoded_and_found() -> None:
    event = tool_use_event({"content": CODE})
    event["message"]["content"].append({"type": "text", "text": "Error: the build failed"})
    line = line_of(event)
    assert not only_in_tool_inputs(line, CANDIDATE_BYTES)
    assert error_lines_in_chunk(line) == ["Error: the build failed"]


def test_what_the_filter_would_not_skip_is_not_proved() -> None:
    later_type = line_of(tool_use_event({"content": CODE})).replace(b'"input":', b'"type":"text","input":', 1)
    assert error_lines(later_type.decode()) != [] and not only_in_tool_inputs(later_type, CANDIDATE_BYTES)
    truncated = line_of(tool_use_event({"content": CODE}))[:-2]  # read as text, not JSON: its words count
    assert error_lines(truncated.decode()) != [] and not only_in_tool_inputs(truncated, CANDIDATE_BYTES)
    failed_result = line_of(tool_use_event({"content": CODE}, is_error=True, result="API Error: 500") | {"type": "result"})
    assert error_lines(failed_result.decode()) != [] and not only_in_tool_inputs(failed_result, CANDIDATE_BYTES)
    nan = line_of(tool_use_event({"content": CODE})).replace(b'"session_id":"s"', b'"session_id":NaN')
    assert not only_in_tool_inputs(nan, CANDIDATE_BYTES)  # json.loads reads NaN, msgspec does not: decoded


def test_lines_json_loads_could_not_read_are_never_proved() -> None:
    deep = tool_use_event({"content": CODE}, nested=json.loads("[" * (MAX_BRACKETS + 1) + "]" * (MAX_BRACKETS + 1)))
    assert not only_in_tool_inputs(line_of(deep), CANDIDATE_BYTES)
    huge = line_of(tool_use_event({"content": CODE})).replace(b'"s"', b"1" * (MAX_DIGITS + 1))
    assert not only_in_tool_inputs(huge, CANDIDATE_BYTES)
    assert not only_in_tool_inputs(line_of(tool_use_event({"content": CODE})) + b"\xff", CANDIDATE_BYTES)


PIECES = st.sampled_from(["Exception", "Error: x", "ok", "Fatal", "FATAL", "ERROR:", "]: error", "\n", "é", "{}",
                          '"is_error": true', "failed with error", "Link: error", "Error occurred"])
TEXT = st.lists(PIECES, max_size=5).map(" ".join)
BLOCK = st.fixed_dictionaries(
    {"type": st.sampled_from(["tool_use", "text", "tool_result", "thinking"])},
    optional={"input": json_values(st.sampled_from(["content", "command", "type", "input"]), 8) | TEXT,
              "text": TEXT, "id": TEXT, "name": TEXT, "content": TEXT},
)
EVENTS = st.fixed_dictionaries(
    {"type": st.sampled_from(["assistant", "user", "result"]),
     "message": st.fixed_dictionaries({"content": st.lists(BLOCK, max_size=3)}, optional={"id": TEXT, "role": TEXT})},
    optional={"session_id": TEXT, "is_error": st.booleans(), "result": TEXT, "extra": json_values(max_leaves=6)},
)


@CHEAP
@given(event=EVENTS, spaced=st.booleans())
@example(event=tool_use_event({"content": CODE}), spaced=False)
@example(event={"type": "assistant", "message": {"content": [{"type": "tool_use", "input": "Exception"},
                                                              {"type": "text", "input": "Exception"}]}}, spaced=True)
def test_a_proved_line_is_one_the_filter_finds_no_error_in(event: dict[str, Any], spaced: bool) -> None:
    line = json.dumps(event, separators=None if spaced else (",", ":"), ensure_ascii=False).encode()
    proved = only_in_tool_inputs(line, CANDIDATE_BYTES)
    assert not proved or error_lines(line.decode()) == []
    assert error_lines_in_chunk(line) == error_lines(line.decode())
