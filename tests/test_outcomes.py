"""One set of outcome marks and breaker labels: the console, watch, the report and escalation.md say the same."""

from __future__ import annotations

import doctest

from rich.cells import cell_len

from ralph_supervisor import outcomes
from ralph_supervisor.console import ConsoleLines
from ralph_supervisor.escalation import outcome
from ralph_supervisor.iteration import IterationReport
from ralph_supervisor.event_fields import IterationFinished
from ralph_supervisor.outcomes import OUTCOMES, breaker_label, outcome_of
from ralph_supervisor.status import human
from ralph_supervisor.watch import iteration_row


def test_the_module_examples_hold() -> None:
    assert doctest.testmod(outcomes).failed == 0


def test_every_mark_is_one_cell_and_every_word_and_mark_its_own() -> None:
    assert all(cell_len(o.mark) == 1 for o in OUTCOMES)
    assert len({o.mark for o in OUTCOMES}) == len({o.word for o in OUTCOMES}) == len(OUTCOMES)


def test_the_worst_thing_is_said_first() -> None:
    assert outcome_of(progress=True, failed=True).key == "failed"
    assert outcome_of(progress=True, usage_limited=True, blocked=True).key == "limited"
    assert outcome_of(progress=False, blocked=True, failed=True).key == "blocked"
    assert outcome_of(progress=True, cut_short=True, failed=True).key == "cut-short"
    assert outcome_of(progress=False).word == "no change"


def test_console_watch_and_report_say_an_iteration_in_the_same_words() -> None:
    cases = [({"outcome": "success", "files_changed": 2}, dict(files_changed=2)),
             ({"outcome": "noop"}, {}),
             ({"outcome": "failure", "failed": True}, dict(failed=True)),
             ({"outcome": "noop", "usage_limited": True}, dict(usage_limited=True)),
             ({"outcome": "failure", "blocked": True}, dict(blocked=True))]
    for record, report_fields in cases:
        event = {"event": "iteration_finished", "ts": "2026-12-02T02:00:00Z", "iteration": 1, **record}
        expected = IterationFinished.of(event).said()
        console = ConsoleLines(colors=False)(event)
        assert console is not None and expected.label in console
        row = iteration_row(IterationFinished.of(event))
        assert row.said is expected
        report = IterationReport(1, 0.0, 1.0, **report_fields)  # type: ignore[arg-type]
        assert outcome(report) == expected.word


def test_the_breaker_is_labelled_the_same_in_status_and_the_console() -> None:
    assert breaker_label("OPEN", "no-progress") == "OPEN no-progress"
    assert breaker_label("CLOSED", "none") == breaker_label("CLOSED", "no-progress") == "CLOSED"
    said = human({"state": "OPEN", "trigger": "same-error", "reason": "r"})
    assert said.splitlines()[0].endswith("OPEN same-error")
    line = ConsoleLines(colors=False)({"event": "breaker_transition", "to": "OPEN", "trigger": "same-error", "reason": "r"})
    assert line is not None and "OPEN same-error: r" in line
