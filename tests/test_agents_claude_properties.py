"""The Claude Code adapter on any input: it never raises, and what it reads is bounded (every adapter on arbitrary
bytes: tests/test_agents.py)."""

# Inputs that fuzzing found to break a parser are kept as explicit `@example`s.

from __future__ import annotations

import json
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from ralph_supervisor.agents.base import MESSAGE_CHARS
from tests.helpers.agents import classify_line, claude_output as parse_agent_output
from tests.helpers.fuzzing import AGENT_OUTPUTS, CHEAP, HUGE, budget


def assert_agent_output(text: str, timed_out: bool) -> None:
    out = parse_agent_output(text, timed_out=timed_out)
    assert out.tokens is None or (isinstance(out.tokens, int) and out.tokens >= 0)
    assert out.cache_tokens is None or (isinstance(out.cache_tokens, int) and out.cache_tokens >= 0)
    assert out.cost_usd is None or out.cost_usd >= 0
    assert out.limit_resets_at is None or out.usage_limited
    assert out.reply is None or isinstance(out.reply, str)
    assert out.is_error in (None, True, False)
    assert isinstance(out.session_id, str) and isinstance(out.message, str)
    assert len(out.message) <= MESSAGE_CHARS + 1
    assert out.mode in ("json", "stream-json", "text")
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in out.status.items())
    assert out.permission_denials >= 0
    # The verdicts are exclusive: a usage limit is neither a failure nor blocked.
    assert not (out.usage_limited and (out.failed or out.blocked))
    assert not out.blocked or out.failed
    if out.failed or out.usage_limited:
        assert out.reply is None
    if timed_out:
        assert out.reply is None
    assert classify_line(text) in (None, "usage-limit", "blocked")


@CHEAP
@given(text=AGENT_OUTPUTS, timed_out=st.booleans())
@example(text="", timed_out=False)
@example(text='{"type":"result","result":null,"usage":"lots","is_error":"yes"}', timed_out=False)
@example(text='{"type":"result","result":"ok","usage":{"input_tokens":-5,"output_tokens":1e300}}', timed_out=False)
@example(text='{"type":"assistant","message":{"usage":{"input_tokens":3},"id":[1]}}', timed_out=False)
@example(text='[{"type":"result"}, 1, "x"]', timed_out=True)
@example(text="---RALPH_STATUS---\nEXIT_SIGNAL: true", timed_out=False)
@example(text='{"type":"result","result":"' + "x" * 2_000_000 + '"}', timed_out=False)
@example(text="[" * 100_000, timed_out=False)
def test_any_agent_output_is_read_without_raising(text: str, timed_out: bool) -> None:
    assert_agent_output(text, timed_out)


@budget(12)
@given(text=HUGE)
def test_huge_agent_outputs_are_read_without_raising(text: str) -> None:
    assert_agent_output(text, False)


@budget(20)
@given(kind=st.lists(st.integers(), max_size=2) | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
@example(kind=[1])
def test_an_event_whose_type_is_not_a_string_is_read(kind: Any) -> None:
    assert_agent_output(json.dumps({"type": kind}), False)


@budget(10)
@given(key=st.sampled_from(["input_tokens", "output_tokens", "cache_read_input_tokens"]),
       value=st.sampled_from(["Infinity", "1e999", "1e400"]),
       shape=st.sampled_from(["result", "stream"]))
@example(key="input_tokens", value="Infinity", shape="result")
def test_an_infinite_token_count_is_read(key: str, value: str, shape: str) -> None:
    usage = '{"' + key + '": ' + value + "}"
    if shape == "result":
        text = '{"type":"result","result":"done","usage":' + usage + "}"
    else:
        text = '{"type":"assistant","message":{"id":"m1","usage":' + usage + "}}"
    assert_agent_output(text, False)
