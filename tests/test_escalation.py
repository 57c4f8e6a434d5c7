"""The escalation summary, rendered from realistic runs of the real breaker."""

from __future__ import annotations

import re

from ralph_supervisor.breaker import Breaker, Decision, State, Thresholds
from ralph_supervisor.escalation import CAP_FLAGS, classify_residual, error_patterns, outcome, render_escalation, status_line
from ralph_supervisor.iteration import IterationReport
from ralph_supervisor.settings import OPTIONS
from ralph_supervisor.spend import spend_lines
from ralph_supervisor.triggers import CAPS

NOW = "2026-11-30T22:24:00.123Z"
SETTINGS = {"workspace": "/home/dev/shop", "no_progress": 3, "same_error": 5, "on_open": "pause"}


def feed(breaker: Breaker, reports: list[IterationReport]) -> Decision:
    decision = None
    for r in reports:
        breaker.iteration_started(r.number, r.started_at)
        decision = breaker.observe(r, r.ended_at)
    assert decision is not None and decision.action in ("open", "final")
    return decision


def section(text: str, title: str) -> str:
    """The body of one `## title` section."""
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def compile_error_run() -> tuple[Decision, list[IterationReport]]:
    reports = [
        IterationReport(
            number=n,
            started_at=n * 100.0,
            ended_at=n * 100.0 + 60,
            files_changed=1,
            changed_paths=("src/cart.ts",),
            output_bytes=4000,
            error_signatures=frozenset({"cart.ts - error TS#: Type 'string' is not assignable to type 'number'."}),
            error_lines=(f"src/cart.ts:{40 + n}:7 - error TS2322: Type 'string' is not assignable to type 'number'.",),
            reply=f"Attempt {n}: changed the total computation in cart.ts; the build still fails.",
            tokens=12_000,
            status={"STATUS": "IN_PROGRESS", "RECOMMENDATION": "Fix the type of total in cart.ts"},
        )
        for n in range(1, 6)
    ]
    return feed(Breaker(Thresholds()), reports), reports


def test_a_repeated_compile_error_is_actionable_with_its_evidence_and_the_commands() -> None:
    decision, reports = compile_error_run()
    text = render_escalation(decision, reports, [], SETTINGS, NOW)

    assert text.startswith("# ralph-supervise: the circuit breaker opened")
    assert NOW in text and "**Trigger:** `same-error`" in text
    assert "the same error in 5 iterations in a row (threshold 5)" in text
    assert "## Verdict: actionable" in text and "## Verdict: blocked" not in text
    assert "TS2322" in section(text, "Verdict")

    table = section(text, "Evidence")
    assert "| iteration | files changed | commits | errors | tokens | outcome | status |" in table
    rows = [line for line in table.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == 5
    assert rows[0].startswith("| 1 | 1 (src/cart.ts) | 0 | 1: src/cart.ts:41:7 - error TS2322")
    assert "| 12000 | progress | IN_PROGRESS: Fix the type of total in cart.ts |" in rows[-1]

    patterns = section(text, "Error patterns")
    assert "(5×) `cart.ts - error TS#: Type 'string' is not assignable to type 'number'.`" in patterns

    cont = section(text, "How to continue")
    assert "after the cooldown (30 min)" in cont
    for command in ("resume", "reset", "stop", "status"):
        assert f"`ralph-supervise {command} -w /home/dev/shop`" in cont
    assert "Nothing yet: this is the first time the breaker opened" in section(text, "What was tried")
    assert "| on_open | pause |" in section(text, "Settings")


def test_an_invalid_api_key_is_blocked_final_and_says_a_human_must_act() -> None:
    reports = [
        IterationReport(
            number=1,
            started_at=0.0,
            ended_at=3.0,
            output_bytes=120,
            failed=True,
            blocked=True,
            blocked_reason="Invalid API key · Please run /login",
            error_lines=("Invalid API key · Please run /login",),
            error_signatures=frozenset({"Invalid API key · Please run /login"}),
        )
    ]
    decision = feed(Breaker(Thresholds()), reports)
    assert decision.final
    text = render_escalation(decision, reports, [], SETTINGS, NOW)

    assert text.startswith("# ralph-supervise: the circuit breaker stopped the loop for good")
    verdict = section(text, "Verdict")
    assert "## Verdict: blocked" in verdict and "needs a human" in verdict
    assert "Invalid API key" in verdict
    assert "(final)" in text
    assert "do not simply resume" in section(text, "What a human must decide")
    cont = section(text, "How to continue")
    assert "stopped for good" in cont and "`ralph-supervise reset -w /home/dev/shop`" in cont
    assert "ralph-supervise run -w /home/dev/shop --" in cont
    assert "resume" not in cont
    assert "| 1 | 0 | 0 | 1: Invalid API key · Please run /login | 0 | blocked |" in section(text, "Evidence")


def test_paraphrased_blocker_replies_with_status_blocked_are_blocked_and_stated_once() -> None:
    replies = [
        "Still blocked: the owner attestation gate is unsigned, so I cannot deploy.",
        "I cannot deploy: the owner attestation gate remains unsigned.",
        "Deploy blocked on the unsigned owner attestation gate.",
    ]
    reports = [
        IterationReport(
            number=n + 1,
            started_at=n * 100.0,
            ended_at=n * 100.0 + 40,
            output_bytes=900,
            reply=text,
            tokens=3000,
            status={"STATUS": "BLOCKED", "RECOMMENDATION": "Owner must sign the attestation gate"},
        )
        for n, text in enumerate(replies)
    ]
    decision = feed(Breaker(Thresholds(paraphrase=0.6)), reports)
    assert decision.trigger == "paraphrase"
    residual = classify_residual(decision, reports)
    assert residual.kind == "blocked"
    # The same blocker reported in three iterations is one item, not three.
    assert sum("STATUS: BLOCKED" in item for item in residual.because) == 1

    text = render_escalation(decision, reports, [], SETTINGS, NOW)
    assert text.count("## Verdict:") == 1 and "## Verdict: blocked" in text
    assert "BLOCKED: Owner must sign the attestation gate" in section(text, "Evidence")
    assert "unsigned owner attestation gate" in section(text, "The agent's last replies")


def test_what_was_tried_lists_earlier_opens_and_trials_from_history() -> None:
    decision, reports = compile_error_run()
    history = [
        {"ts": "2026-11-30T20:00:00.000Z", "iteration": 3, "from": "CLOSED", "to": "OPEN",
         "trigger": "no-progress", "reason": "no progress in 3 iterations in a row (threshold 3)"},
        {"ts": "2026-11-30T20:30:00.000Z", "iteration": 3, "from": "OPEN", "to": "HALF_OPEN",
         "trigger": "no-progress", "reason": "cooldown of 1800 s over"},
        {"ts": "2026-11-30T20:31:00.000Z", "iteration": 4, "from": "HALF_OPEN", "to": "OPEN",
         "trigger": "no-progress", "reason": "trial iteration 4 made no progress"},
        "not a dict",  # a damaged line must not break the summary
        {"iteration": 9},
    ]
    tried = section(render_escalation(decision, reports, history, SETTINGS, NOW), "What was tried")  # type: ignore[arg-type]
    assert "2 open(s) before this one were recorded; 1 trial(s) started, 0 closed the breaker, 1 failed" in tried
    assert "- 2026-11-30T20:31:00.000Z iteration 4: HALF_OPEN -> OPEN (no-progress): trial iteration 4" in tried
    assert "- ? iteration 9: ? -> ? (?)" in tried


def test_a_stuck_loop_without_errors_is_actionable_and_says_there_were_no_errors() -> None:
    reports = [
        IterationReport(number=n, started_at=n * 10.0, ended_at=n * 10.0 + 5, output_bytes=500, reply="Looked around.")
        for n in (1, 2, 3)
    ]
    decision = feed(Breaker(Thresholds(paraphrase=0)), reports)
    text = render_escalation(decision, reports, [], {}, NOW)
    assert decision.trigger == "no-progress"
    assert "## Verdict: actionable" in text
    assert "No error lines in these iterations." in text
    assert "`ralph-supervise resume -w DIR`" in text  # no workspace given: a placeholder
    assert "## Settings" not in text


def test_a_reached_budget_is_a_decision_for_a_human() -> None:
    reports = [
        IterationReport(number=n, started_at=n * 10.0, ended_at=n * 10.0 + 5, files_changed=1, tokens=60_000)
        for n in (1, 2)
    ]
    decision = feed(Breaker(Thresholds(token_budget=100_000)), reports)
    text = render_escalation(decision, reports, [], SETTINGS, NOW)
    assert decision.trigger == "token-budget" and "## Verdict: blocked" in text
    assert "raise the cap (`--token-budget`)" in section(text, "What a human must decide")
    assert "## Spend" not in text  # only when the supervisor says what was spent


def test_every_cap_names_the_option_that_raises_it() -> None:
    assert set(CAP_FLAGS) == set(CAPS)
    assert {flag for flag in CAP_FLAGS.values()} <= {option.flag for option in OPTIONS}


def test_the_spend_section_sets_the_run_and_the_day_against_their_budgets() -> None:
    reports = [IterationReport(number=1, started_at=0.0, ended_at=5.0, files_changed=1, tokens=60, cost_usd=1.2)]
    decision = feed(Breaker(Thresholds(cost_budget=1.0)), reports)
    spend = spend_lines(tokens=60, cost_usd=1.2, token_budget=0, cost_budget=1.0, daily_tokens=500,
                        daily_cost_usd=4.0, daily_token_budget=1000, daily_cost_budget=0.0)
    text = section(render_escalation(decision, reports, [], SETTINGS, NOW, spend=spend), "Spend")
    assert "**This run:** tokens 60; dollars $1.20 of $1.00 (120 %)" in text
    assert "tokens 500 of 1,000 (50 %); dollars $4.00" in text
    unknown = spend_lines(tokens=0, cost_usd=None, token_budget=0, cost_budget=2.0, daily_tokens=0,
                          daily_cost_usd=0.0, daily_token_budget=0, daily_cost_budget=0.0)
    assert "dollars not reported by the agent (budget $2.00)" in unknown[0]


def test_a_manual_pause_says_it_waits_for_someone_to_resume() -> None:
    b = Breaker(Thresholds())
    b.iteration_started(1, 0.0)
    decision = b.manual_open("checking the plan", 5.0)
    text = render_escalation(decision, [], [], SETTINGS, NOW)
    assert text.startswith("# ralph-supervise: the circuit breaker was paused by hand")
    assert "No iteration finished before the breaker opened." in text
    assert "stays paused until someone resumes it" in section(text, "How to continue")


def test_table_cells_stay_one_line_and_escape_pipes() -> None:
    r = IterationReport(
        number=1,
        started_at=0,
        ended_at=1,
        error_lines=("Error: a | b\nsecond line",),
        error_signatures=frozenset({"Error: a | b"}),
        status={"STATUS": "IN_PROGRESS", "RECOMMENDATION": "x | y"},
    )
    decision = Breaker(Thresholds()).manual_open("", 1.0)
    table = section(render_escalation(decision, [r], [], {}, NOW), "Evidence")
    row = [line for line in table.splitlines() if line.startswith("| 1 ")][0]
    assert "a \\| b second line" in row and "x \\| y" in row
    assert len(re.split(r"(?<!\\)\|", row)) == 9  # seven cells between the outer pipes


def test_outcome_and_status_line_describe_an_iteration_in_a_few_words() -> None:
    base = dict(number=1, started_at=0.0, ended_at=1.0)
    assert outcome(IterationReport(**base, failed=True, timed_out=True)) == "failed (timeout)"  # type: ignore[arg-type]
    assert outcome(IterationReport(**base, usage_limited=True, failed=True)) == "usage limit"  # type: ignore[arg-type]
    assert outcome(IterationReport(**base, completed=True)) == "completed, no change"  # type: ignore[arg-type]
    assert outcome(IterationReport(**base, commits=1)) == "progress"  # type: ignore[arg-type]
    assert status_line(IterationReport(**base, status={"status": "COMPLETE"})) == "COMPLETE"  # type: ignore[arg-type]


def test_error_patterns_count_iterations_most_frequent_first() -> None:
    a, b = "Error: Failed to compile main.ts", "FAILED tests/test_auth.py::test_login"
    reports = [
        IterationReport(number=n, started_at=0, ended_at=1, error_signatures=frozenset(sigs))
        for n, sigs in enumerate([{a}, {a, b}, {a}, {b}], start=1)
    ]
    assert [(sig, n) for sig, n, _ in error_patterns(reports)] == [(a, 3), (b, 2)]


def test_with_on_open_stop_an_open_is_the_end_of_the_run_not_a_wait_for_the_cooldown() -> None:
    from ralph_supervisor.escalation import how_to_continue

    opened = Decision("open", State.OPEN, "no-progress", "stuck", 3, cooldown_s=1800.0)
    assert "after the cooldown" in " ".join(how_to_continue(opened, "/w"))
    stopped = " ".join(how_to_continue(opened, "/w", on_open="stop"))
    assert "stopped for good" in stopped and "cooldown" not in stopped
