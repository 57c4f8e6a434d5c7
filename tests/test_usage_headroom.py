"""The usage ceiling and API outages as pure rules: the agents' reports read field by field (bad ones dropped,
never raised), the freeze a ceiling calls for, an outage's start, end, back-offs and final open."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

from hypothesis import given, settings, strategies as st

from ralph_supervisor.agents import ADAPTERS
from ralph_supervisor.agents.base import read_output
from ralph_supervisor.agents.outages import reached_api, retry_message, scan_lines
from ralph_supervisor.agents.usage import (
    UsageReport,
    UsageWindow,
    claude_windows,
    codex_session_file,
    codex_session_windows,
    codex_windows,
)
from ralph_supervisor.outage import BACKOFFS, Final, Outage
from ralph_supervisor.usage_headroom import SHOW_AT, UsageHeadroom

NOW = 1_800_000_000.0


def rate_event(**info: object) -> dict[str, object]:
    return {"type": "rate_limit_event", "rate_limit_info": info, "session_id": "s"}


# --- reading the agents' figures -----------------------------------------------------------------------------


def test_claude_rate_limit_events_give_each_window_its_last_figure() -> None:
    report = claude_windows([
        rate_event(status="allowed", rateLimitType="five_hour", resetsAt=NOW + 3600, utilization=60),
        rate_event(status="allowed_warning", rateLimitType="five_hour", resetsAt=NOW + 3600, utilization=81.5),
        rate_event(status="allowed", rateLimitType="seven_day", resetsAt=NOW + 86400, isUsingOverage=False),
    ], NOW)
    assert report.windows == (UsageWindow("five_hour", 81.5, NOW + 3600, "allowed_warning"),
                              UsageWindow("seven_day", None, NOW + 86400, "allowed"))
    assert report.overage is False and report.problems == ()


def test_bad_rate_limit_fields_are_dropped_one_by_one_and_named() -> None:
    report = claude_windows([
        rate_event(status="allowed", rateLimitType="five_hour", resetsAt="soon", utilization="80"),
        rate_event(status="allowed", rateLimitType="seven_day", resetsAt=NOW - 10, utilization=140),
        rate_event(status="allowed", rateLimitType="seven_day_opus", resetsAt=NOW + 3 * 365 * 86400, utilization=True),
        rate_event(status=None, rateLimitType=["x"], resetsAt=float("nan") if False else None, utilization=-1),
        {"type": "rate_limit_event", "rate_limit_info": "rejected"},
    ], NOW)
    assert all(w.utilization is None and w.resets_at is None for w in report.windows)
    said = " | ".join(report.problems)
    for phrase in ("five_hour utilization is not a number", "five_hour resetsAt is not a time",
                   "seven_day utilization 140 is outside 0-100", "seven_day resetsAt is in the past",
                   "seven_day_opus resetsAt is more than 7 days ahead", "without rate_limit_info"):
        assert phrase in said


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["status", "rateLimitType", "resetsAt", "utilization",
                                                 "isUsingOverage"]),
                                st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5),
                                          st.lists(st.integers(), max_size=2))), max_size=4))
def test_any_rate_limit_info_is_read_without_raising_and_figures_stay_in_range(infos: list[dict]) -> None:
    report = claude_windows([{"type": "rate_limit_event", "rate_limit_info": info} for info in infos], NOW)
    for window in report.windows:
        assert window.utilization is None or 0 <= window.utilization <= 100
        assert window.resets_at is None or NOW < window.resets_at <= NOW + 8 * 86400
    wait = UsageHeadroom(ceiling=90, no_overage=True, margin_s=60).observe(report, NOW)
    assert wait is None or NOW < wait.until <= NOW + 8 * 86400  # never frozen for ever


def test_codex_rate_limits_are_read_from_events_and_from_the_session_file(tmp_path: Path) -> None:
    limits = {"primary": {"used_percent": 95.0, "window_minutes": 300, "resets_at": NOW + 600},
              "secondary": {"used_percent": 40.0, "window_minutes": 10080, "resets_in_seconds": 86400}}
    from_events = codex_windows([{"type": "token_count", "rate_limits": limits}], NOW)
    assert [(w.name, w.utilization) for w in from_events.windows] == [("five_hour", 95.0), ("seven_day", 40.0)]
    assert from_events.windows[1].resets_at == NOW + 86400
    assert codex_windows([{"type": "token_count", "rate_limits": {"primary": None, "secondary": None}}], NOW).windows == ()

    folder = tmp_path / "sessions" / "2027" / "01" / "15"
    folder.mkdir(parents=True)
    when = 1_800_000_000.0  # 2027-01-15 08:00 UTC
    thread = "019a9776-0a34-7842-8627-112b63d66e90"
    path = folder / f"rollout-2027-01-15T08-00-00-{thread}.jsonl"
    lines = [{"type": "session_meta", "payload": {"id": thread}},
             {"type": "event_msg", "payload": {"type": "token_count", "info": None,
                                               "rate_limits": {**limits, "primary": {**limits["primary"], "used_percent": 70.0}}}},
             {"type": "event_msg", "payload": {"type": "token_count", "info": None, "rate_limits": limits}}]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n{cut off")
    (folder / "rollout-2027-01-15T07-00-00-another-thread.jsonl").write_text("")
    assert codex_session_file(tmp_path, thread, when) == path
    assert codex_session_file(tmp_path, "../../etc", when) is None
    report = codex_session_windows(tmp_path, thread, when)
    assert [(w.name, w.utilization) for w in report.windows] == [("five_hour", 95.0), ("seven_day", 40.0)]
    assert report.source == str(path)
    assert codex_session_windows(tmp_path, "no-such-thread", when) == UsageReport()


# --- the ceiling ---------------------------------------------------------------------------------------------


def window(percent: float | None, resets: float | None = NOW + 3600, name: str = "five_hour",
           status: str = "allowed") -> UsageReport:
    return UsageReport((UsageWindow(name, percent, resets, status),))


def test_the_ceiling_freezes_after_the_call_at_or_above_it_until_the_reset_plus_the_margin() -> None:
    headroom = UsageHeadroom(ceiling=90, no_overage=False, margin_s=0)
    assert headroom.observe(window(60), NOW) is None and headroom.shown(NOW) == []
    assert headroom.observe(window(80), NOW) is None
    assert [w.utilization for w in headroom.shown(NOW)] == [80]  # shown before anything is frozen
    wait = headroom.observe(window(93), NOW)
    assert wait is not None and wait.kind == "ceiling" and wait.known_reset
    assert wait.until == NOW + 3600
    assert "five_hour at 93 %" in wait.reason and "usage ceiling 90 %" in wait.reason
    assert headroom.observe(window(90), NOW) is not None  # "at or above"
    assert headroom.shown(NOW + 3601) == []  # a window past its reset is forgotten


def test_the_jitter_is_at_most_a_tenth_of_the_margin_and_none_without_one() -> None:
    for seed in range(50):
        wait = UsageHeadroom(ceiling=90, no_overage=False, margin_s=300, rng=random.Random(seed)).observe(window(95), NOW)
        assert wait is not None and NOW + 3600 + 300 <= wait.until <= NOW + 3600 + 330
    wait = UsageHeadroom(ceiling=90, no_overage=False, margin_s=0, rng=random.Random(1)).observe(window(95), NOW)
    assert wait is not None and wait.until == NOW + 3600


def test_every_full_window_must_reset_and_an_unbelievable_reset_backs_off_instead() -> None:
    headroom = UsageHeadroom(ceiling=90, no_overage=False, margin_s=0)
    both = UsageReport((UsageWindow("five_hour", 95.0, NOW + 3600), UsageWindow("seven_day", 91.0, NOW + 86400)))
    wait = headroom.observe(both, NOW)
    assert wait is not None and wait.until == NOW + 86400 and "seven_day" in wait.reason
    first = headroom.observe(window(95, resets=None), NOW)
    second = headroom.observe(window(95, resets=None), NOW)
    assert first is not None and second is not None and not first.known_reset
    assert first.until == NOW + 300 and second.until == NOW + 600  # doubling, as a limit wait's back-off


def test_overage_freezes_only_with_no_overage_and_an_agent_that_reports_nothing_is_left_alone() -> None:
    spending = UsageReport((UsageWindow("five_hour", 100.0, NOW + 1800, "allowed"),), overage=True)
    assert UsageHeadroom(ceiling=0, no_overage=False, margin_s=0).observe(spending, NOW) is None
    wait = UsageHeadroom(ceiling=0, no_overage=True, margin_s=0).observe(spending, NOW)
    assert wait is not None and wait.until == NOW + 1800 and "overage" in wait.reason
    assert UsageHeadroom(ceiling=90, no_overage=True, margin_s=0).observe(UsageReport(), NOW) is None
    assert SHOW_AT == 75


# --- outages ---------------------------------------------------------------------------------------------------


def test_the_agents_own_retry_reports_are_outages_and_tool_text_never_is() -> None:
    assert retry_message({"type": "system", "subtype": "api_retry", "attempt": 1, "max_retries": 10,
                          "retry_delay_ms": 529, "error_status": None, "error": "unknown"}) == "api_retry 1/10: unknown"
    assert retry_message({"type": "system", "subtype": "api_retry", "error_status": 429, "error": "rate_limit"}) is None
    assert retry_message({"type": "error", "message": "Reconnecting... 2/5 (stream disconnected before completion)"})
    assert retry_message({"type": "error", "message": "Quota exceeded."}) is None
    tool_lines = [
        {"type": "user", "message": {"content": [{"type": "tool_result", "content":
                                                  "Error: connect ECONNREFUSED 127.0.0.1:5432\nReconnecting... waiting for network"}]}},
        {"type": "item.completed", "item": {"type": "command_execution", "aggregated_output":
                                            '{"type":"error","message":"Reconnecting... 1/5"}', "exit_code": 1}},
    ]
    text = "\n".join(json.dumps(line) for line in tool_lines) + "\nReconnecting... waiting for network\n"
    assert scan_lines(text) == (None, False)
    assert reached_api({"type": "assistant", "message": {"content": [{"type": "text", "text": "hi"}]}})
    assert not reached_api({"type": "assistant", "error": "unknown", "message": {"model": "<synthetic>"}})
    live = "\n".join([json.dumps({"type": "system", "subtype": "api_retry", "attempt": 3, "max_retries": 10,
                                  "error": "unknown"}),
                      json.dumps({"type": "assistant", "message": {"content": []}})])
    assert scan_lines(live) == ("api_retry 3/10: unknown", True)


def test_a_call_that_ends_in_its_retries_is_an_outage_not_a_failure() -> None:
    claude = "\n".join(json.dumps(e) for e in [
        {"type": "system", "subtype": "init", "session_id": "s"},
        {"type": "system", "subtype": "api_retry", "attempt": 1, "max_retries": 10, "error_status": None,
         "error": "unknown"},
        {"type": "result", "subtype": "success", "is_error": True, "result": "API Error: Connection error.",
         "session_id": "s", "total_cost_usd": 0}])
    said = ADAPTERS["claude"].read(read_output(claude), now=NOW)
    assert said.outage and not said.failed and not said.usage_limited and said.reply is None
    codex = "\n".join(json.dumps(e) for e in [
        {"type": "thread.started", "thread_id": "t"}, {"type": "turn.started"},
        {"type": "error", "message": "Reconnecting... 5/5 (stream disconnected before completion: failed to lookup "
                                     "address information: Name does not resolve)"},
        {"type": "error", "message": "Reconnecting... waiting for network (Connection failed: error sending request)"}])
    said = ADAPTERS["codex"].read(read_output(codex), now=NOW, timed_out=True)
    assert said.outage and not said.failed and "waiting for network" in said.outage_message
    survived = claude.replace('"is_error": true, "result": "API Error: Connection error."', '"is_error": false, "result": "done"')
    said = ADAPTERS["claude"].read(read_output(survived), now=NOW)
    assert not said.outage and not said.failed and said.reply == "done"  # retries it survived are nothing


def test_an_outage_starts_once_backs_off_three_times_after_the_max_and_then_is_final() -> None:
    outage = Outage(max_s=60.0)
    assert outage.retry("api_retry 1/10: unknown", NOW) is True
    assert outage.retry("api_retry 2/10: unknown", NOW + 5) is False and outage.since == NOW
    assert outage.due(NOW + 59) is None
    untils = []
    for n in range(BACKOFFS):
        wait = outage.due(NOW + 61 + n)
        assert wait is not None and not isinstance(wait, Final) and wait.kind == "outage"
        assert "api_retry 2/10" in wait.reason or n > 0
        untils.append(wait.until - (NOW + 61 + n))
        assert outage.due(NOW + 62 + n) is None  # not again on the same report: the loop tries again first
        outage.retry("Reconnecting... waiting for network", NOW + 62 + n)
    assert untils == [300, 600, 1200]
    final = outage.due(NOW + 100)
    assert isinstance(final, Final) and "through 3 back-offs" in final.reason and "waiting for network" in final.reason
    assert outage.reached() == NOW and not outage.on
    assert outage.retry("again", NOW + 200) and outage.due(NOW + 261).until == NOW + 261 + 300  # a fresh outage


def test_the_codex_home_default_is_the_users_folder() -> None:
    from ralph_supervisor.agents.usage import codex_home

    assert codex_home({}) == Path(os.path.expanduser("~/.codex"))
    assert codex_home({"CODEX_HOME": "/tmp/cx"}) == Path("/tmp/cx")


def test_an_outage_is_one_notice_when_it_starts_and_one_when_it_ends() -> None:
    from ralph_supervisor.notify import APPRISE_KINDS, notice_for_limit_wait, notice_for_outage

    began = notice_for_outage(started=True, since=NOW, message="api_retry 1/10: unknown", workspace="/w/app",
                              iteration=4)
    ended = notice_for_outage(started=False, since=NOW, message="", workspace="/w/app", iteration=6, now=NOW + 600)
    assert began.kind == ended.kind == "outage" and "outage" in APPRISE_KINDS
    assert "API outage since" in began.title and "api_retry 1/10" in began.body and began.state == "CLOSED"
    assert ended.title.endswith("API outage over after 10 min") and began.key != ended.key
    frozen = notice_for_limit_wait(until="2027-01-15T09:00:00Z", reason="usage ceiling 90 %: five_hour at 93 %",
                                   workspace="/w/app", iteration=3, kind="ceiling")
    assert "usage ceiling, waiting until" in frozen.title


def test_the_console_says_the_outage_and_the_usage_in_a_few_words() -> None:
    from ralph_supervisor.console import ConsoleLines

    say = ConsoleLines(colors=False)
    ts = "2027-01-15T08:00:00.000Z"
    began = say({"event": "outage_started", "level": "info", "ts": ts, "since": ts, "message": "api_retry 1/10: unknown"})
    assert began is not None and "OUTAGE since" in began and "api_retry 1/10: unknown" in began
    ended = say({"event": "outage_ended", "level": "info", "ts": ts, "seconds": 600.0, "why": "the API answered"})
    assert ended is not None and "OUTAGE over after" in ended and "the API answered" in ended
    high = say({"event": "usage_high", "level": "info", "ts": ts, "windows": [
        {"window": "five_hour", "utilization": 81.0, "resets_at": "2027-01-15T10:00:00Z"}, "junk", {"window": "x"}]})
    assert high is not None and "USAGE: five_hour at 81 % (resets" in high and "x at ? %" in high
    frozen = say({"event": "limit_wait_started", "level": "info", "ts": ts, "until": "2027-01-15T09:00:00Z",
                  "kind": "outage", "reason": "out of reach"})
    assert frozen is not None and "OUTAGE wait until" in frozen
    quiet = ConsoleLines(colors=False, detail="quiet")
    assert quiet({"event": "outage_started", "level": "info", "ts": ts, "since": ts, "message": "m"}) is not None


def test_the_other_adapters_own_api_errors_are_outages_and_their_tools_errors_are_not() -> None:
    def opencode(*events: dict) -> object:
        lines = [{"type": "step_start", "timestamp": 1, "sessionID": "ses_1", "part": {}}, *events]
        return ADAPTERS["opencode"].read(read_output("\n".join(json.dumps(e) for e in lines)), now=NOW)

    unreachable = opencode({"type": "error", "timestamp": 2, "sessionID": "ses_1", "error": {
        "name": "APIError", "data": {"message": "Unable to connect. Is the computer able to access the url?"}}})
    assert unreachable.outage and not unreachable.failed
    tool = opencode({"type": "tool_use", "timestamp": 2, "sessionID": "ses_1", "part": {
        "tool": "webfetch", "state": {"status": "error", "error": "fetch failed: getaddrinfo ENOTFOUND example.test"}}})
    assert not tool.outage and tool.failed  # a tool that could not reach its server: the call's own business
    gemini = ADAPTERS["gemini"].read(read_output("\n".join(json.dumps(e) for e in [
        {"type": "init", "timestamp": "t", "session_id": "g", "model": "m"},
        {"type": "error", "timestamp": "t", "severity": "error", "message": "exception TypeError: fetch failed sending request"},
        {"type": "result", "timestamp": "t", "status": "error", "stats": {}}])), now=NOW)
    assert gemini.outage and not gemini.failed
