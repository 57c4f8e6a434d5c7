"""The Claude Code adapter: replies, status blocks, tokens, dollars, failed calls, usage limits and blocked errors,
from recorded json, stream-json and text outputs (tests/fixtures/agent/claude)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ralph_supervisor.agents.base import AgentOutput, parse_status_block, strip_status_block
from tests.helpers.agents import FIXTURES as ALL_FIXTURES, classify_line, claude_output as parse_agent_output

FIXTURES = ALL_FIXTURES / "claude"


def parse(name: str, timed_out: bool = False) -> AgentOutput:
    return parse_agent_output((FIXTURES / name).read_text(), timed_out=timed_out)


def test_json_reply_without_status_block_and_status_fields() -> None:
    out = parse("json_compile_error.log")
    assert out.mode == "json"
    assert out.has_result and out.is_error is False and not out.failed
    assert out.reply is not None
    assert out.reply.startswith("I added the parser module")
    assert out.reply.endswith("I will fix the type next loop.")
    assert "RALPH_STATUS" not in out.reply
    assert out.status["STATUS"] == "IN_PROGRESS"
    assert out.status["FILES_MODIFIED"] == "3"
    assert out.status["RECOMMENDATION"] == "Fix the remaining type error in src/main.ts"
    assert not out.exit_signal
    assert out.session_id == "4f1c2a9e-7b3d-4e8a-9c61-2d5b0e7f3a18"


def test_tokens_are_input_plus_output_and_cache_tokens_apart() -> None:
    out = parse("json_compile_error.log")
    assert out.tokens == 1234 + 987
    assert out.cache_tokens == 5120 + 48211


def test_json_result_among_log_lines_with_exit_signal_and_permission_denials() -> None:
    out = parse("json_complete.log")
    assert out.has_result and not out.failed
    assert out.exit_signal and out.status["STATUS"] == "COMPLETE"
    assert out.permission_denials == 1
    assert out.reply == "All tasks in @fix_plan.md are complete. Tests pass (42 passed)."


def test_json_is_error_result_is_a_failed_call_without_reply() -> None:
    out = parse("json_api_error.log")
    assert out.failed and out.is_error is True
    assert out.reply is None
    assert not out.usage_limited and not out.blocked
    assert out.message.startswith("API Error: 500")


def test_error_subtype_result_is_a_failed_call() -> None:
    text = json.dumps({"type": "result", "subtype": "error_max_turns", "is_error": False, "session_id": "s", "num_turns": 50})
    out = parse_agent_output(text)
    assert out.failed and out.reply is None


def test_result_without_usage_takes_tokens_from_the_stream() -> None:
    events = [
        {"type": "assistant", "message": {"id": "m1", "content": [], "usage": {"input_tokens": 5, "output_tokens": 7}}},
        {"type": "result", "is_error": False, "result": "ok"},
    ]
    assert parse_agent_output("\n".join(json.dumps(e) for e in events)).tokens == 12


@pytest.mark.parametrize("kind", ["[1]", '{"a": 1}', "3", "null"])
def test_an_event_whose_type_is_not_a_string_is_ignored(kind: str) -> None:
    out = parse_agent_output('{"type": ' + kind + '}\n{"type":"result","is_error":false,"result":"ok"}')
    assert out.reply == "ok"
    assert parse_agent_output('{"type": ' + kind + "}").mode == "text"  # not a Claude event: plain output


@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "NaN", "1e999"])
def test_a_non_finite_token_count_counts_zero(value: str) -> None:
    usage = '{"input_tokens": ' + value + ', "output_tokens": 5}'
    assert parse_agent_output('{"type":"result","result":"done","usage":' + usage + "}").tokens == 5
    stream = '{"type":"assistant","message":{"id":"m1","usage":' + usage + "}}"
    assert parse_agent_output(stream).tokens == 5


def test_no_result_object_is_a_failed_call() -> None:
    out = parse_agent_output("starting...\nsome log line\n")
    assert out.mode == "text"
    out = parse("stream_cut_off.jsonl")
    assert out.mode == "stream-json"
    assert not out.has_result and out.failed and out.reply is None


def test_cut_off_stream_counts_tokens_once_per_message() -> None:
    out = parse("stream_cut_off.jsonl")
    # msg_01A is reported twice (text block, then tool_use block): its last usage counts once.
    assert out.tokens == (3 + 140) + (5 + 60)
    assert out.cache_tokens == (2100 + 12000) + (300 + 14100)


def test_timeout_makes_a_call_failed_even_with_a_result() -> None:
    out = parse("json_compile_error.log", timed_out=True)
    assert out.failed and out.timed_out and out.reply is None


def test_stream_json_reply_and_tokens_from_the_result_object() -> None:
    out = parse("stream_tests_failing.jsonl")
    assert out.mode == "stream-json"
    assert out.reply == "One test still fails; I will fix the off-by-one next loop."
    assert out.tokens == 10 + 242
    assert not out.failed and not out.usage_limited and not out.blocked
    assert out.status["TESTS_STATUS"] == "FAILING"


def test_stream_json_with_2_mb_lines() -> None:
    big = "x" * 2_000_000
    lines = [
        json.dumps({"type": "system", "subtype": "init", "session_id": "s"}),
        json.dumps({"type": "user", "message": {"content": [{"type": "tool_result", "content": big}]}}),
        json.dumps({"type": "assistant", "message": {"id": "m", "content": [{"type": "text", "text": big}]}}),
        json.dumps({"type": "result", "is_error": False, "result": "done " + big[:10], "session_id": "s", "usage": {"input_tokens": 1, "output_tokens": 2}}),
    ]
    out = parse_agent_output("\n".join(lines) + "\n")
    assert out.reply == "done xxxxxxxxxx" and out.tokens == 3 and out.session_id == "s"


def test_json_array_output_is_read_too() -> None:
    events = [{"type": "system", "subtype": "init", "session_id": "a"}, {"type": "result", "is_error": False, "result": "hi", "session_id": "a"}]
    assert parse_agent_output(json.dumps(events)).reply == "hi"
    assert parse_agent_output(json.dumps(events[1], indent=2)).reply == "hi"


# --- usage limits ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["json_usage_limit.log", "stream_usage_limit.jsonl", "text_usage_limit.txt"])
def test_usage_limit_is_neutral_not_failed(name: str) -> None:
    out = parse(name)
    assert out.usage_limited
    assert not out.failed and not out.blocked and out.reply is None


def test_retries_that_clear_are_not_a_usage_limit() -> None:
    text = (FIXTURES / "stream_retry_then_success.jsonl").read_text()
    assert any(classify_line(line) == "usage-limit" for line in text.splitlines())  # retries were seen
    out = parse_agent_output(text)
    assert not out.usage_limited and not out.failed and out.reply is not None


def test_call_cut_off_while_retrying_529_is_usage_limited() -> None:
    lines = (FIXTURES / "stream_retry_then_success.jsonl").read_text().splitlines()[:3]
    out = parse_agent_output("\n".join(lines), timed_out=True)
    assert out.usage_limited and not out.failed


@pytest.mark.parametrize(
    "text",
    [
        "Claude AI usage limit reached|1764561600",
        "5-hour limit reached ∙ resets 3pm",
        "You're out of extra usage · resets 5pm (Europe/Berlin)",
        "API Error: 429 {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"Number of request tokens has exceeded your per-minute rate limit\"}}",
        "API Error: 529 {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}",
        "API Error: Request rejected (429) · The usage limit has been reached",
    ],
)
def test_cli_limit_messages_are_usage_limits_in_every_mode(text: str) -> None:
    result = json.dumps({"type": "result", "subtype": "success", "is_error": True, "result": text, "session_id": "s"})
    assert parse_agent_output(result).usage_limited
    assert parse_agent_output("Working...\n" + text + "\n").usage_limited
    assert classify_line(text) == "usage-limit"


def test_rate_limit_event_rejected_line_is_a_usage_limit() -> None:
    rejected = '{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","rateLimitType":"five_hour"}}'
    allowed = '{"type":"rate_limit_event","rate_limit_info":{"status":"allowed","rateLimitType":"five_hour"}}'
    assert classify_line(rejected) == "usage-limit"
    assert classify_line(allowed) is None
    assert parse_agent_output(rejected + "\n").usage_limited


# --- blocked --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("json_not_logged_in.log", "invalid API key"),
        ("json_credit_balance.log", "credit balance too low"),
        ("stream_auth_expired.jsonl", "authentication failed"),
        ("text_not_logged_in.txt", "invalid API key"),
    ],
)
def test_blocked_calls_are_failed_and_say_why(name: str, reason: str) -> None:
    out = parse(name)
    assert out.blocked and out.failed and not out.usage_limited
    assert out.blocked_reason.startswith(reason + ": ")
    assert out.reply is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("Not logged in · Please run /login", "not logged in"),
        ("API Error: 403 {\"type\":\"error\",\"error\":{\"type\":\"permission_error\",\"message\":\"Your organization has been disabled.\"}}", "authentication failed"),
        ("Error: Tool use denied by your organization's policy", "permission denied by policy"),
        ("Error: 402 Payment Required", "payment required"),
        ("Error: quota exhausted for this billing period", "quota exhausted"),
    ],
)
def test_blocked_messages_in_error_positions(text: str, reason: str) -> None:
    result = json.dumps({"type": "result", "is_error": True, "result": text})
    assert parse_agent_output(result).blocked_reason.startswith(reason)
    assert parse_agent_output(text + "\n").blocked
    assert classify_line(text) == "blocked"


def test_api_error_status_in_result_classifies() -> None:
    assert parse_agent_output(json.dumps({"type": "result", "is_error": True, "api_error_status": 401, "result": "x"})).blocked
    limited = parse_agent_output(json.dumps({"type": "result", "is_error": True, "api_error_status": 429, "result": "x"}))
    assert limited.usage_limited and not limited.failed


# --- false positives ------------------------------------------------------------------------------------------


def test_json_reply_talking_about_rate_limits_and_api_keys_is_ordinary_work() -> None:
    out = parse("json_prose_about_limits.log")
    assert not out.usage_limited and not out.blocked and not out.failed
    assert out.reply is not None and "rate limiter" in out.reply


def test_text_reply_talking_about_rate_limits_and_api_keys_is_ordinary_work() -> None:
    out = parse("text_prose_about_limits.txt")
    assert not out.usage_limited and not out.blocked and not out.failed
    for line in (FIXTURES / "text_prose_about_limits.txt").read_text().splitlines():
        assert classify_line(line) is None


def test_tool_output_mentioning_limits_inside_a_successful_stream_is_not_a_limit() -> None:
    events = [
        {"type": "system", "subtype": "init", "session_id": "s"},
        {"type": "user", "message": {"content": [{"type": "tool_result", "content": "Error: 429 Too Many Requests from api.github.com (rate limit)"}]}},
        {"type": "result", "is_error": False, "result": "Handled the GitHub rate limit with backoff.", "session_id": "s"},
    ]
    out = parse_agent_output("\n".join(json.dumps(e) for e in events))
    assert not out.usage_limited and not out.failed


def test_a_failing_assertion_about_the_number_429_is_a_failure_not_a_limit() -> None:
    out = parse_agent_output("Running tests\nError: expected 429 to equal 430\n")
    assert out.failed and not out.usage_limited


def test_limit_mentioned_early_in_text_output_does_not_count() -> None:
    text = "Error: rate limit exceeded while calling the test API\n" + "\n".join(f"step {i} done" for i in range(10))
    assert not parse_agent_output(text).usage_limited


# --- text mode ------------------------------------------------------------------------------------------------


def test_text_reply_is_whole_output_without_status_block() -> None:
    out = parse("text_success.txt")
    assert out.mode == "text" and not out.failed
    assert out.reply == "I refactored the config loader and added tests for the defaults.\nAll 18 tests pass."
    assert out.status["TESTS_STATUS"] == "PASSING"


def test_text_output_ending_in_error_lines_is_failed() -> None:
    out = parse("text_build_error.txt")
    assert out.failed and out.reply is None
    assert "Error: Failed to compile src/main.ts" in out.message


def test_empty_output_is_failed() -> None:
    out = parse_agent_output("")
    assert out.failed and out.reply is None


def test_status_block_parsing_and_stripping() -> None:
    text = "did it\n---RALPH_STATUS---\nSTATUS: COMPLETE\nEXIT_SIGNAL: true\n---END_RALPH_STATUS---\n"
    assert parse_status_block(text) == {"STATUS": "COMPLETE", "EXIT_SIGNAL": "true"}
    assert strip_status_block(text) == "did it"
    truncated = "did it\n---RALPH_STATUS---\nSTATUS: IN_PROGRESS\n"
    assert strip_status_block(truncated) == "did it"
    assert parse_status_block(truncated) == {"STATUS": "IN_PROGRESS"}
    assert parse_status_block("no block") == {}


@settings(max_examples=300, deadline=None)
@given(st.text(), st.booleans())
def test_parse_never_raises_and_failed_excludes_limited(text: str, timed_out: bool) -> None:
    out = parse_agent_output(text, timed_out=timed_out)
    assert not (out.failed and out.usage_limited)
    assert not (out.blocked and out.usage_limited)
    if out.reply is not None:
        assert not out.failed and "---RALPH_STATUS---" not in out.reply
    for line in text.split("\n"):
        assert classify_line(line) in (None, "usage-limit", "blocked")
