"""The agent adapters: each agent's recorded outputs (tests/fixtures/agent/<agent>/), how calls are recognised and
which adapter reads them, bad input, and what each agent does not report (tokens, dollars)."""

from __future__ import annotations

import json
import random
from datetime import timezone
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ralph_supervisor.agents import ADAPTERS, NAMES, adapter_for_process, output_warnings, read_call
from ralph_supervisor.agents.base import AgentOutput, read_output
from ralph_supervisor.evidence.errors import error_lines_in_chunk
from ralph_supervisor.cli import build_run_settings
from ralph_supervisor.settings import SettingsError
from tests.helpers.agents import FIXTURES

NOW = 1767607200.0  # 2026-01-05 10:00 UTC
PROCESS = {"claude": "claude", "codex": "codex", "gemini": "gemini", "opencode": "opencode", "cursor": "cursor-agent",
           "amp": "amp"}


def read(agent: str, name: str, timed_out: bool = False) -> AgentOutput:
    """A recorded output of `agent`, read as a call of its process would be."""
    text = (FIXTURES / agent / name).read_text()
    return read_call(text, name=PROCESS[agent], argv=(PROCESS[agent],), now=NOW, tz=timezone.utc, timed_out=timed_out)


# --- recorded outputs, agent by agent --------------------------------------------------------------------

SUCCESS = [  # (agent, fixture, mode, tokens, cache tokens, dollars, session id prefix)
    ("codex", "success.jsonl", "stream-json", (48211 - 40960) + 1877, 40960, None, "0199a213"),
    ("gemini", "success.json", "json", 5530 + 1021, 12788, None, "b2b90938"),
    ("gemini", "success.jsonl", "stream-json", 5530 + 1021, 12788, None, "b2b90938"),
    ("opencode", "success.jsonl", "stream-json", (1203 + 211) + (517 + 388 + 64), 14592 + 15795, 0.0132 + 0.0101,
     "ses_4947"),
    ("cursor", "success.json", "json", None, None, None, "c6b62c6f"),  # the docs' json result: no usage
    ("cursor", "thinking_no_tools.jsonl", "stream-json", 12200 + 388, 9800 + 412, None, "c6b62c6f"),  # camelCase usage
    ("amp", "success.jsonl", "stream-json", (12783 + 40) + (412 + 388), 2 * (367 + 12416), None, "T-2775dc"),
    ("amp", "thinking.jsonl", "stream-json", 412 + 388, 367 + 12416, None, "T-2775dc"),  # --stream-json-thinking
]


@pytest.mark.parametrize(("agent", "name", "mode", "tokens", "cache", "cost", "session"), SUCCESS)
def test_a_successful_call_gives_its_reply_status_tokens_dollars_and_session(
        agent: str, name: str, mode: str, tokens: int | None, cache: int | None, cost: float | None, session: str) -> None:
    out = read(agent, name)
    assert out.agent == agent and out.mode == mode
    assert not out.failed and not out.usage_limited and not out.blocked
    assert out.reply is not None and out.reply.endswith("all 12 tests pass.") and "RALPH_STATUS" not in out.reply
    assert out.status["TESTS_STATUS"] == "PASSING" and not out.exit_signal
    assert out.tokens == tokens and out.cache_tokens == cache
    assert out.cost_usd == (pytest.approx(cost) if cost is not None else None)
    assert out.session_id.startswith(session)
    assert out.malformed_lines == 0 and out.unknown_events == 0


@pytest.mark.parametrize(("agent", "name"), [("codex", "error_in_reply.jsonl"), ("gemini", "error_in_reply.jsonl"),
                                             ("opencode", "error_in_reply.jsonl"), ("cursor", "success.jsonl")])
def test_an_error_inside_the_reply_is_ordinary_work_and_the_filter_finds_it(agent: str, name: str) -> None:
    out = read(agent, name)
    assert not out.failed and out.reply is not None and "Error: Failed to compile src/main.ts:12:5" in out.reply
    assert out.status["TESTS_STATUS"] == "FAILING"
    # The filter reads the output line by line; Gemini's deltas cut the reply's lines, so its adapter hands the
    # whole lines of the reassembled reply to the filter.
    found = error_lines_in_chunk((FIXTURES / agent / name).read_bytes()) + list(out.error_lines)
    assert "Error: Failed to compile src/main.ts:12:5" in found


FAILED = [  # (agent, fixture, an error line the adapter adds for the filter, or None)
    ("codex", "interrupted.jsonl", None),  # no turn.completed: cut off
    ("gemini", "failed.jsonl", "Reached max session turns"),
    ("gemini", "failed_json.log", "Reached max session turns"),  # the pretty-printed error object on stderr
    ("opencode", "failed.jsonl", "UnknownError: Unexpected server error"),
    ("opencode", "error_only.jsonl", "UnknownError: Unexpected server error"),  # a recorded run's whole output
    ("opencode", "cut_off.jsonl", None),  # the last step wanted to call tools: it never ended
    ("cursor", "cut_off.jsonl", None),  # the stream ended without a result (its message went to stderr)
    ("amp", "failed.jsonl", None),  # an error result: `error` instead of `result`
]


@pytest.mark.parametrize(("agent", "name", "error"), FAILED)
def test_a_failed_call_is_no_reply_and_says_why(agent: str, name: str, error: str | None) -> None:
    out = read(agent, name)
    assert out.failed and out.reply is None and not out.usage_limited and not out.blocked
    assert out.message
    if error is not None:
        assert any(line.startswith(error) or error in line for line in out.error_lines), out.error_lines


def test_a_call_that_ends_in_its_api_retries_is_an_outage_not_a_failure() -> None:
    """Codex lost its stream and gave up after its reconnects: the API was out of reach, not the agent's fault
    (`outage.py`): neutral, no reply, the error still there for the filter."""
    out = read("codex", "failed.jsonl")
    assert out.outage and not out.failed and out.reply is None and not out.usage_limited and not out.blocked
    assert "stream disconnected before completion" in out.outage_message
    assert any("stream disconnected before completion" in line for line in out.error_lines), out.error_lines


LIMITS = [  # (agent, fixture, seconds from NOW to the reset, or None when the output says no time)
    ("claude", "json_usage_limit.log", None),  # reset in the past of NOW: see test_agents_claude for its own clock
    ("codex", "usage_limit_reset.jsonl", 5 * 3600 + 28 * 60),  # "try again at 3:28 PM", local time (UTC here)
    ("codex", "usage_limit.jsonl", None),  # "Try again later."
    ("gemini", "usage_limit_reset.log", 2 * 3600 + 36 * 60 + 24),  # "Your quota will reset after 2h36m24s."
    ("gemini", "usage_limit.jsonl", None),  # TerminalQuotaError: "You have exhausted your daily quota"
    ("gemini", "usage_limit_text.txt", 2 * 3600 + 52 * 60 + 39),  # text mode: "[API Error: ... reset after ...]"
    ("opencode", "usage_limit_reset.jsonl", 1800),  # APIError 429 with a retry-after header
    ("opencode", "usage_limit.jsonl", None),
    ("cursor", "usage_limit.txt", None),  # "Error: You've hit your usage limit" and seven indented lines
]


@pytest.mark.parametrize(("agent", "name", "reset_in"), LIMITS)
def test_a_usage_limit_is_neutral_and_gives_its_reset_time_when_stated(agent: str, name: str,
                                                                       reset_in: int | None) -> None:
    out = read(agent, name)
    assert out.usage_limited and not out.failed and not out.blocked and out.reply is None
    assert out.limit_resets_at == (None if reset_in is None else NOW + reset_in)


def test_claude_reset_times_from_the_result_text_the_rate_limit_event_and_text_mode() -> None:
    now = 1764550800.0  # 2025-12-01 01:00 UTC
    for name, expected in (("json_usage_limit.log", 1764561600.0), ("stream_usage_limit.jsonl", 1764561600.0),
                           ("text_usage_limit.txt", 1764601200.0)):  # "resets 3pm" -> 15:00 UTC that day
        text = (FIXTURES / "claude" / name).read_text()
        assert read_call(text, name="claude", now=now, tz=timezone.utc).limit_resets_at == expected, name


def test_the_reset_time_comes_from_whichever_limit_message_states_it() -> None:
    events = [{"type": "assistant", "error": "rate_limit",
               "message": {"model": "<synthetic>", "content": [{"type": "text", "text": "You've hit your session limit"}]}},
              {"type": "result", "is_error": True, "result": "You've hit your session limit · resets 3pm (UTC)"}]
    out = read_call("\n".join(json.dumps(e) for e in events), name="claude", now=NOW, tz=timezone.utc)
    assert out.usage_limited and out.message == "You've hit your session limit" and out.limit_resets_at == NOW + 5 * 3600


BLOCKED = [  # (agent, fixture, reason)
    ("codex", "blocked.jsonl", "authentication failed"),  # refresh token expired: sign in again
    ("codex", "quota_exceeded.jsonl", "quota exhausted"),  # billing, not a wait
    ("gemini", "blocked.log", "authentication failed"),  # FatalAuthenticationError, exit code 41
    ("opencode", "blocked.jsonl", "invalid API key"),
    ("cursor", "blocked.txt", "not logged in"),
]


@pytest.mark.parametrize(("agent", "name", "reason"), BLOCKED)
def test_a_blocked_call_is_failed_and_says_why(agent: str, name: str, reason: str) -> None:
    out = read(agent, name)
    assert out.blocked and out.failed and not out.usage_limited and out.reply is None
    assert out.blocked_reason.startswith(reason + ": ")


def test_every_adapter_has_recorded_outputs() -> None:
    assert {p.name for p in FIXTURES.iterdir() if p.is_dir()} == set(NAMES) - {"text"}


def test_gemini_exit_code_41_is_blocked_when_the_supervisor_knows_it() -> None:
    text = "Loaded cached credentials.\nSomething went wrong.\n"
    assert read_call(text, name="gemini", exit_code=41, now=NOW).blocked
    out = read_call(text, name="gemini", exit_code=53, now=NOW)
    assert out.failed and not out.blocked


def test_the_generic_text_adapter_reads_any_other_cli() -> None:
    out = read_call("Working on it\nDone: added two tests.\n", name="aider", argv=("aider",), now=NOW)
    assert out.agent == "text" and out.mode == "text" and out.reply == "Working on it\nDone: added two tests."
    assert out.tokens is None and out.cost_usd is None
    out = read_call("Working on it\nError: Failed to compile src/main.ts\n", name="aider", now=NOW)
    assert out.failed and out.reply is None


# --- which calls are whose ------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "argv", "agent"), [
    ("claude", ["claude", "-p", "x"], "claude"),
    ("node", ["node", "/usr/lib/node_modules/@anthropic-ai/claude-code/cli.js", "-p", "x"], "claude"),
    ("node", ["node", "/usr/local/bin/codex", "exec", "--json", "x"], "codex"),  # npm's shim, run by its shebang
    ("codex", ["/usr/local/lib/node_modules/@openai/codex/vendor/x86_64-unknown-linux-musl/codex/codex", "exec"],
     "codex"),
    ("node", ["node", "/home/u/.npm/_npx/1b2c/node_modules/@google/gemini-cli/dist/index.js", "-p", "x"], "gemini"),
    ("gemini", ["gemini", "-o", "json", "-p", "x"], "gemini"),
    ("bun", ["bun", "/home/u/.bun/install/global/node_modules/opencode-ai/bin/opencode", "run"], "opencode"),
    ("opencode", ["/home/u/.opencode/bin/opencode", "run", "--format", "json", "x"], "opencode"),
    ("cursor-agent", ["cursor-agent", "-p", "--output-format", "json", "x"], "cursor"),
    ("agent", ["/home/u/.local/bin/agent", "-p", "x"], "cursor"),  # Cursor's newer name
    ("node", ["node", "/home/u/.amp/bin/amp", "-x", "x", "--stream-json"], "amp"),
    ("python3", ["python3", "/repo/examples/bin/codex", "exec", "--json"], "codex"),  # the fakes
    ("bash", ["bash", "./ralph_loop.sh"], None),
    ("node", ["node", "server.js"], None),
])
def test_calls_are_recognised_by_name_command_line_and_npm_package(name: str, argv: list[str],
                                                                   agent: str | None) -> None:
    found = adapter_for_process(name, argv)
    assert (found.name if found else None) == agent


def test_the_adapter_is_the_process_s_or_the_format_s_or_the_forced_one() -> None:
    codex = (FIXTURES / "codex" / "success.jsonl").read_text()
    claude = (FIXTURES / "claude" / "json_compile_error.log").read_text()
    assert read_call(codex, name="codex", now=NOW).agent == "codex"
    assert read_call(codex, now=NOW).agent == "codex"  # marker mode: no process, the format decides
    assert read_call(claude, name="codex", now=NOW).agent == "claude"  # a wrapper named codex that runs claude
    assert read_call((FIXTURES / "cursor" / "success.jsonl").read_text(), now=NOW).agent == "cursor"
    assert read_call((FIXTURES / "amp" / "success.jsonl").read_text(), now=NOW).agent == "amp"
    assert read_call((FIXTURES / "amp" / "thinking.jsonl").read_text(), now=NOW).agent == "amp"
    forced = read_call(claude, name="claude", agent="codex", now=NOW)
    assert forced.agent == "codex" and forced.mode == "text" and forced.unknown_events == 1
    assert read_call("plain words\n", name="codex", now=NOW).agent == "codex"  # codex exec without --json


def test_agent_option_takes_auto_or_an_adapter_name_and_one_line_otherwise(tmp_path: Path) -> None:
    workspace = ["-w", str(tmp_path)]
    assert build_run_settings([*workspace, "--agent", "Codex", "--", "true"], env={}).agent == "codex"
    assert build_run_settings([*workspace, "--", "true"], env={}).agent == "auto"
    with pytest.raises(SettingsError) as caught:
        build_run_settings([*workspace, "--agent", "copilot", "--", "true"], env={})
    message = str(caught.value)
    assert "--agent" in message and "copilot" in message and "codex" in message and "\n" not in message
    with pytest.raises(SettingsError, match="RALPH_SUPERVISE_AGENT_FORMAT"):
        build_run_settings([*workspace, "--", "true"], env={"RALPH_SUPERVISE_AGENT_FORMAT": "nope"})


# --- bad input ------------------------------------------------------------------------------------------


def test_truncated_lines_unknown_events_binary_and_a_format_switch_are_counted_and_the_rest_is_judged() -> None:
    lines = (FIXTURES / "codex" / "success.jsonl").read_text().splitlines()
    garbage = [
        lines[3][: len(lines[3]) // 2],  # a JSON line cut in the middle
        json.dumps({"type": "item.teleported", "item": {"id": "x"}}),  # an event type no version printed
        "\x00\xff\xfe binary \x1b[31m",
        json.dumps({"type": "assistant", "message": {"content": [{"type": "text", "text": "claude in between"}]}}),
    ]
    text = "\n".join(lines[:3] + garbage + lines[3:])
    out = read_call(text, name="codex", now=NOW)
    assert out.agent == "codex" and not out.failed and out.reply.endswith("all 12 tests pass.")
    assert out.tokens == (48211 - 40960) + 1877
    assert out.malformed_lines == 1 and out.unknown_events == 2
    [(key, event, fields)] = output_warnings(out)
    assert event == "agent_output_unreadable" and fields["malformed_lines"] == 1 and fields["unknown_events"] == 2


@pytest.mark.parametrize("agent", ["claude", "codex", "gemini", "opencode"])
def test_a_2_mb_line_is_read(agent: str) -> None:
    big = "x" * 2_000_000
    text = {
        "claude": json.dumps({"type": "result", "is_error": False, "result": "done " + big, "session_id": "s",
                              "usage": {"input_tokens": 1, "output_tokens": 2}}),
        "codex": json.dumps({"type": "item.completed", "item": {"id": "i", "type": "agent_message", "text": "done " + big}})
        + "\n" + json.dumps({"type": "turn.completed", "usage": {"input_tokens": 1, "cached_input_tokens": 0,
                                                                 "output_tokens": 2}}),
        "gemini": json.dumps({"type": "message", "role": "assistant", "content": "done " + big})
        + "\n" + json.dumps({"type": "result", "status": "success", "stats": {"input": 1, "output_tokens": 2}}),
        "opencode": json.dumps({"type": "text", "sessionID": "s", "part": {"messageID": "m", "text": "done " + big}})
        + "\n" + json.dumps({"type": "step_finish", "sessionID": "s", "part": {"reason": "stop",
                                                                               "tokens": {"input": 1, "output": 2}}}),
    }[agent]
    out = read_call(text, name=agent, now=NOW)
    assert out.agent == agent and not out.failed and out.tokens == 3 and out.reply == "done " + big


ARBITRARY = (st.binary(max_size=600).map(lambda b: b.decode("utf-8", "replace"))
             | st.lists(st.sampled_from([p for p in FIXTURES.rglob("*") if p.is_file()]), min_size=1, max_size=3)
             .flatmap(lambda paths: st.randoms(use_true_random=False).map(
                 lambda rnd: _shuffled_cut("\n".join(p.read_text() for p in paths), rnd))))


def _shuffled_cut(text: str, rnd: random.Random) -> str:
    """Recorded outputs of several agents, their lines cut, dropped and reordered."""
    lines = text.split("\n")
    rnd.shuffle(lines)
    return "\n".join(line[: rnd.randint(0, len(line))] if rnd.random() < 0.3 else line
                     for line in lines if rnd.random() < 0.9)


@settings(max_examples=150, deadline=None)
@given(text=ARBITRARY, agent=st.sampled_from(("auto",) + NAMES), timed_out=st.booleans(),
       exit_code=st.none() | st.integers(-1, 255), now=st.floats(0, 4e9))
@example(text="{\n" * 50_000, agent="gemini", timed_out=False, exit_code=None, now=NOW)
@example(text="[" * 100_000, agent="auto", timed_out=False, exit_code=None, now=NOW)
@example(text='{"type":"step_finish","part":{"tokens":{"input":1e999,"cache":[1]},"cost":"NaN"}}', agent="opencode",
         timed_out=False, exit_code=None, now=NOW)
def test_no_adapter_raises_on_arbitrary_bytes_and_verdicts_stay_exclusive(
        text: str, agent: str, timed_out: bool, exit_code: int | None, now: float) -> None:
    out = read_call(text, name=agent if agent in PROCESS else "", agent=agent, timed_out=timed_out,
                    exit_code=exit_code, now=now, tz=timezone.utc)
    assert out.agent in NAMES
    assert not (out.usage_limited and (out.failed or out.blocked))
    assert not out.blocked or out.failed
    assert out.reply is None or (not out.failed and not timed_out)
    assert out.tokens is None or out.tokens >= 0
    assert out.cost_usd is None or out.cost_usd >= 0
    assert out.limit_resets_at is None or out.usage_limited
    assert all(isinstance(line, str) and "\n" not in line for line in out.error_lines)


# --- what each agent reports ----------------------------------------------------------------------------


def test_tokens_and_dollars_are_unknown_where_an_agent_reports_none() -> None:
    reported = {agent: (out.tokens is not None, out.cost_usd is not None) for agent, out in (
        ("claude", read("claude", "json_compile_error.log")), ("codex", read("codex", "success.jsonl")),
        ("gemini", read("gemini", "success.json")), ("opencode", read("opencode", "success.jsonl")),
        ("cursor", read("cursor", "success.jsonl")), ("amp", read("amp", "success.jsonl")))}
    assert reported == {"claude": (True, True), "codex": (True, False), "gemini": (True, False),
                        "opencode": (True, True), "cursor": (True, False), "amp": (True, False)}
    assert read("cursor", "success.json").tokens is None  # the json result documented has no usage
    assert output_warnings(read("codex", "success.jsonl")) == []


def test_every_adapter_is_registered_under_its_own_name() -> None:
    assert all(ADAPTERS[name].name == name for name in NAMES)
    assert read_output("").events == []


# --- Cursor's stream: thinking events, and told apart from Claude's without a process name -----------------

CURSOR_STREAMS = ("success.jsonl", "thinking_no_tools.jsonl", "cut_off.jsonl", "success.json")


@pytest.mark.parametrize("name", CURSOR_STREAMS)
def test_a_cursor_stream_is_read_as_cursor_s_with_no_process_name_even_without_tool_calls(name: str) -> None:
    text = (FIXTURES / "cursor" / name).read_text()
    out = read_call(text, now=NOW)  # marker mode: no process says which agent
    assert out.agent == "cursor", name
    assert out.unknown_events == 0 and output_warnings(out) == []


@pytest.mark.parametrize("name", ["success.jsonl", "thinking_no_tools.jsonl", "cut_off.jsonl"])
def test_cursor_thinking_events_are_read_not_reported_as_unreadable(name: str) -> None:
    text = (FIXTURES / "cursor" / name).read_text()
    assert '"type":"thinking"' in text
    out = read(("cursor"), name)
    assert out.unknown_events == 0 and output_warnings(out) == []
    assert out.reply is None or "The user requested" not in out.reply  # thinking is not the reply


def test_claude_s_own_stream_is_still_claude_s() -> None:
    for name in ("stream_tests_failing.jsonl", "stream_usage_limit.jsonl", "json_complete.log"):
        assert read_call((FIXTURES / "claude" / name).read_text(), now=NOW).agent == "claude", name


def test_a_cursor_error_block_is_read_from_its_first_line() -> None:
    out = read("cursor", "usage_limit.txt")
    assert out.message == "Error: You've hit your usage limit"
    reply = read_call("Done.\n  indented detail of the reply\n", name="aider", now=NOW)
    assert reply.reply is not None and not reply.failed  # an indented block that is no error stays a reply


def test_every_fixture_cites_where_its_format_comes_from() -> None:
    for agent in ("claude", "codex", "gemini", "cursor", "amp", "opencode"):
        sources = (FIXTURES / agent / "SOURCES.md").read_text()
        for path in (FIXTURES / agent).iterdir():
            if path.name == "SOURCES.md":
                continue
            entries = sources.split("\n- ")[1:]  # one entry per file: "`NAME`: what, and from where" (lines wrap)
            entry = next((e for e in entries if e.startswith(f"`{path.name}`")), "")
            assert "https://" in entry, f"{agent}/{path.name} is not cited in {agent}/SOURCES.md"
