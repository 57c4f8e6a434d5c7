"""The console lines a person reads: one short line per iteration, transitions set apart, warnings once."""

from __future__ import annotations

import io
import json
from pathlib import Path

import structlog
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len

from ralph_supervisor.console import WIDTH, ConsoleLines
from ralph_supervisor.format import dollars, tokens
from ralph_supervisor.logging import configure_logging

TS = "2026-12-02T02:43:37.386Z"


def finished(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {"event": "iteration_finished", "level": "info", "ts": TS, "iteration": 6,
                               "files_changed": 0, "commits": 0, "tokens": 1200, "cost_usd": 0.01, "outcome": "noop",
                               "failed": False, "usage_limited": False, "blocked": False, "cut_short": False,
                               "reply": "Looked at the deployment scripts again; nothing to change.", "first_error": ""}
    base.update(fields)
    return base


def test_an_iteration_is_one_line_with_its_mark_counts_spend_and_the_start_of_the_reply() -> None:
    line = ConsoleLines(colors=False)(finished(files_changed=3, commits=1, tokens=12_345, cost_usd=0.042,
                                               outcome="success", reply="Implemented step 2 of the plan."))
    assert line is not None and "\n" not in line
    assert "#6" in line and "✔ progress" in line and "3 files" in line and "1 commit " in line
    assert "12.3k tok" in line and "$0.04" in line and line.endswith("Implemented step 2 of the plan.")
    assert cell_len(line) <= WIDTH


def test_each_outcome_has_its_own_mark_and_word() -> None:
    render = ConsoleLines(colors=False)
    said = {
        "progress": render(finished(outcome="success", files_changed=1)),
        "no change": render(finished()),
        "failed": render(finished(outcome="failure", failed=True, first_error="Error: boom")),
        "usage limit": render(finished(usage_limited=True)),
        "blocked": render(finished(outcome="failure", blocked=True, blocked_reason="Invalid API key")),
    }
    for word, line in said.items():
        assert line is not None and word in line, (word, line)
    assert said["failed"] is not None and said["failed"].endswith("Error: boom")  # the error, not the reply
    marks = {line.split()[2] for line in said.values() if line}
    assert len(marks) == 5


@settings(max_examples=200, deadline=None)
@given(number=st.integers(0, 10**7), files=st.integers(0, 10**6), commits=st.integers(0, 10**4),
       tok=st.one_of(st.none(), st.integers(0, 10**10)), cost=st.one_of(st.none(), st.floats(0, 10**6)),
       reply=st.text(max_size=400) | st.sampled_from(["\x1b[2J\x1b[?1049h cleared", "漢字" * 80, "🙂" * 90]), outcome=st.sampled_from(["success", "noop", "failure"]))
def test_an_iteration_line_never_passes_the_width(number: int, files: int, commits: int, tok: int | None,
                                                  cost: float | None, reply: str, outcome: str) -> None:
    line = ConsoleLines(colors=False)(finished(iteration=number, files_changed=files, commits=commits, tokens=tok,
                                               cost_usd=cost, reply=reply, outcome=outcome))
    assert line is not None and "\n" not in line and "\x1b" not in line
    assert cell_len(line) <= WIDTH


def test_a_transition_says_its_state_trigger_and_whole_reason() -> None:
    reason = "no progress in 3 iterations in a row (threshold 3): no file changed, no commit " + "x" * 150
    line = ConsoleLines(colors=False)({"event": "breaker_transition", "level": "info", "ts": TS, "from": "CLOSED",
                                       "to": "OPEN", "trigger": "no-progress", "reason": reason, "final": False})
    assert line is not None and line.endswith(f"OPEN no-progress: {reason}")
    final = ConsoleLines(colors=False)({"event": "breaker_transition", "ts": TS, "to": "OPEN", "final": True,
                                        "trigger": "max-iterations", "reason": "cap of 5 reached"})
    assert final is not None and "OPEN max-iterations (for good): cap of 5 reached" in final


def test_colour_only_where_asked_and_the_words_are_the_same() -> None:
    record = {"event": "breaker_transition", "ts": TS, "to": "OPEN", "trigger": "stall", "reason": "silent"}
    plain = ConsoleLines(colors=False)(record)
    coloured = ConsoleLines(colors=True)(record)
    assert plain is not None and coloured is not None
    assert "\x1b[" not in plain and "\x1b[" in coloured
    assert coloured.replace("\x1b[1;31m", "").replace("\x1b[0m", "") == plain


def test_a_warning_is_said_once_in_plain_words() -> None:
    render = ConsoleLines(colors=False)
    record = {"event": "child_log_unwritable", "level": "warning", "ts": TS, "error": "No space left on device"}
    first = render(record)
    assert first is not None and first.endswith("warning: child log unwritable: No space left on device")
    assert render(record) is None


def test_quiet_keeps_the_transitions_and_errors_only() -> None:
    render = ConsoleLines(colors=False, detail="quiet")
    assert render(finished()) is None
    assert render({"event": "child_started", "ts": TS, "pid": 1, "command": ["x"]}) is None
    assert render({"event": "some_warning", "level": "warning", "ts": TS}) is None
    assert render({"event": "breaker_transition", "ts": TS, "to": "OPEN", "trigger": "stall", "reason": "r"})
    assert render({"event": "limit_wait_started", "ts": TS, "until": "2026-12-02T05:00:00Z", "reason": "r"})
    assert render({"event": "supervisor_failed", "level": "error", "ts": TS, "error": "bug"})


def test_events_for_the_file_only_say_nothing() -> None:
    render = ConsoleLines(colors=False)
    for name in ("snapshot_taken", "iteration_started", "control_request", "orphans_swept", "supervisor_stopped"):
        assert render({"event": name, "level": "info", "ts": TS}) is None


def test_the_module_examples_hold() -> None:
    import doctest

    from ralph_supervisor import console

    assert doctest.testmod(console).failed == 0


def test_a_limit_wait_says_until_when_and_an_absurd_time_does_not_crash() -> None:
    render = ConsoleLines(colors=False)
    line = render({"event": "limit_wait_started", "ts": TS, "until": "2026-12-02T05:43:37.386Z", "reason": "reset"})
    assert line is not None and "LIMIT wait until " in line and "(3h" in line and line.endswith("ends the wait")
    odd = render({"event": "limit_wait_started", "ts": TS, "until": 1e300, "reason": "reset"})
    assert odd is not None and "LIMIT wait until ?" in odd


def test_small_numbers() -> None:
    assert [tokens(None), tokens(980), tokens(12_345), tokens(2_500_000)] == ["? tok", "980 tok", "12.3k tok", "2.5M tok"]
    assert tokens(999_999) == "1.0M tok"
    assert [dollars(None, brief=True), dollars(0.012, brief=True), dollars(1234.5, brief=True)] == ["$?", "$0.01", "$1,234"]


def _configure(tmp_path: Path, detail: str, fmt: str = "console") -> tuple[io.StringIO, Path]:
    stream = io.StringIO()
    path = tmp_path / "events.jsonl"
    events = configure_logging(path, fmt, stream=stream, detail=detail)
    log = structlog.get_logger("ralph_supervisor")
    log.info("iteration_finished", **{k: v for k, v in finished().items() if k not in ("event", "level", "ts")})
    log.info("snapshot_taken", files=3)
    assert events is not None
    events.close()
    return stream, path


def test_the_file_keeps_every_event_whatever_the_console_shows(tmp_path: Path) -> None:
    stream, path = _configure(tmp_path, "normal")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and "· no change" in lines[0]
    names = [json.loads(line)["event"] for line in path.read_text().splitlines()]
    assert names == ["iteration_finished", "snapshot_taken"]


def test_verbose_is_the_key_value_form(tmp_path: Path) -> None:
    stream, _ = _configure(tmp_path, "verbose")
    text = stream.getvalue()
    assert "iteration_finished" in text and "files_changed=0" in text and "snapshot_taken" in text


def test_json_is_unchanged_by_the_detail(tmp_path: Path) -> None:
    stream, _ = _configure(tmp_path, "quiet", fmt="json")
    assert [json.loads(line)["event"] for line in stream.getvalue().splitlines()] == ["iteration_finished",
                                                                                       "snapshot_taken"]
