"""The one list of triggers: the precedence the interface documents, and what is final."""

from __future__ import annotations

from ralph_supervisor.triggers import CAPS, FINAL, MANUAL, PRECEDENCE, TRIGGERS, rank


def test_precedence_follows_the_documented_order() -> None:
    assert PRECEDENCE == (
        "blocked",
        "destructive",
        "tampering",
        "same-error",
        "consecutive-failures",
        "regression",
        "false-completion",
        "paraphrase",
        "no-progress",
        "output-decline",
        "stall",
        "outage",
        "token-budget",
        "cost-budget",
        "daily-budget",
        "daily-cost-budget",
        "max-iterations",
    )
    assert set(PRECEDENCE) | {MANUAL} == set(TRIGGERS)


def test_caps_and_blocked_are_final_and_the_first_by_precedence_wins() -> None:
    assert FINAL == CAPS | {"blocked", "outage"}
    assert sorted(["max-iterations", "no-progress", "same-error"], key=rank)[0] == "same-error"
    assert rank("not-a-trigger") == len(PRECEDENCE)
