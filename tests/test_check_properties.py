"""`check` and the ledger parser on any input: exit 0, 1 or 2, one-line errors, valid ledgers round-trip.

Inputs that fuzzing found to break a parser are kept as explicit `@example`s.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from ralph_supervisor import check
from ralph_supervisor.ledger import attempt_dict, dump_ledger, parse_ledger
from tests.helpers.fuzzing import MEDIUM, budget, fresh, json_values, one_line


@contextlib.contextmanager
def captured() -> Iterator[dict[str, str]]:
    """sys.stdout (with a .buffer, as check writes bytes) and sys.stderr, read back after the block."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    err = io.StringIO()
    result: dict[str, str] = {}
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        yield result
    finally:
        sys.stdout, sys.stderr = saved
        out.flush()
        result["out"] = out.buffer.getvalue().decode("utf-8")  # type: ignore[attr-defined]
        result["err"] = err.getvalue()


def run_check(argv: list[str]) -> tuple[int, str, str]:
    with captured() as seen:
        code = check.main(argv)
    return code, seen["out"], seen["err"]


def assert_check_outcome(code: int, out: str, err: str, *, json_mode: bool = True) -> None:
    assert code in (0, 1, 2)
    assert "Traceback" not in err
    if code == 1:
        assert err.endswith("\n") and err.count("\n") == 1 and err.startswith("ralph-supervise check: "), err
        assert out == ""
    elif json_mode:
        decision = json.loads(out)
        assert list(decision) == ["iterations", "tokensUsed", "shouldContinue", "escalate", "trigger", "reason"]
        assert decision["escalate"] == (code == 2) and decision["shouldContinue"] == (code == 0)
        assert isinstance(decision["iterations"], int) and decision["tokensUsed"] >= 0


OUTCOME = st.sampled_from(["success", "failure", "noop"])


ERROR_TEXT = st.none() | st.sampled_from(
    ["Error: cannot find module 'x'", "TypeError: x is undefined\n    at a.js:1:2", "FATAL boom", ""]
) | st.text(max_size=40)


ATTEMPT = st.builds(
    attempt_dict,
    iteration=st.integers(0, 10**6),
    action=st.text(max_size=30) | st.sampled_from(["fix the test", "retry the build", "run npm test"]),
    outcome=OUTCOME,
    error=ERROR_TEXT,
    tokens=st.integers(0, 2**40),
)


VALID_LEDGER = st.tuples(st.text(max_size=30), st.lists(ATTEMPT, max_size=12))


LEDGER_KEYS = st.sampled_from(["goal", "attempts", "iteration", "action", "outcome", "error", "tokensUsed"]) | st.text(
    max_size=8
)


@st.composite
def mutated_ledger_text(draw: st.DrawFn) -> str:
    """A valid ledger, then a few of: a key dropped, a value replaced, junk attempts added, text cut or flipped."""
    goal, attempts = draw(VALID_LEDGER)
    doc: dict[str, Any] = {"goal": goal, "attempts": attempts}
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["drop", "replace", "attempt-field", "junk-attempt", "top"]))
        if kind == "drop" and doc:
            doc.pop(draw(st.sampled_from(sorted(doc))))
        elif kind == "replace" and doc:
            doc[draw(st.sampled_from(sorted(doc)))] = draw(json_values(LEDGER_KEYS, 10))
        elif kind == "attempt-field" and isinstance(doc.get("attempts"), list) and doc["attempts"]:
            i = draw(st.integers(0, len(doc["attempts"]) - 1))
            if isinstance(doc["attempts"][i], dict):
                doc["attempts"][i][draw(LEDGER_KEYS)] = draw(json_values(LEDGER_KEYS, 6))
        elif kind == "junk-attempt" and isinstance(doc.get("attempts"), list):
            doc["attempts"].insert(draw(st.integers(0, len(doc["attempts"]))), draw(json_values(LEDGER_KEYS, 6)))
        else:
            doc[draw(LEDGER_KEYS)] = draw(json_values(LEDGER_KEYS, 6))
    text = json.dumps(doc, indent=draw(st.sampled_from([None, 2])), ensure_ascii=draw(st.booleans()))
    edit = draw(st.sampled_from(["none", "none", "cut", "flip"]))
    if edit == "cut":
        text = text[: draw(st.integers(0, len(text)))]
    elif edit == "flip" and text:
        i = draw(st.integers(0, len(text) - 1))
        text = text[:i] + draw(st.sampled_from(["}", "{", "]", ",", '"', "\\", "\x00", "é", "NaN", "1e999"])) + text[i + 1:]
    return text


LEDGER_DOCUMENTS = (
    json_values(LEDGER_KEYS).map(json.dumps)
    | mutated_ledger_text()
    | st.text(max_size=80)
    | st.just("")
)


@MEDIUM
@given(text=LEDGER_DOCUMENTS, inject=st.booleans())
@example(text='{"goal": "g", "attempts": null}', inject=False)
@example(text='{"goal": "g", "attempts": [{"action": "a", "outcome": "success", "tokensUsed": "12"}]}', inject=False)
@example(text='{"goal": "g", "attempts": [{"action": "a", "outcome": "maybe"}]}', inject=True)
@example(text='{"goal": "g", "attempts": [{"action": "a", "outcome": "failure", "error": null}]}', inject=True)
@example(text='{"goal": "g", "attempts": [{"action": "a", "outcome": "success", "tokensUsed": NaN}]}', inject=False)
@example(text="[" * 50_000, inject=False)
@example(text='"\\ud800"', inject=False)
def test_check_exits_0_1_or_2_on_any_ledger_with_one_line_errors(here: Path, text: str, inject: bool) -> None:
    path = fresh(here, "ledger.json")
    path.write_text(text, encoding="utf-8")
    argv = ["-f", str(path), "--json"] + (["--inject"] if inject else [])
    code, out, err = run_check(argv)
    assert_check_outcome(code, out, err, json_mode=not inject)
    if inject and code == 0:
        assert out.startswith("## Loop Context (managed)")


@MEDIUM
@given(data=st.binary(max_size=200))
@example(data=b"\xff{}")
def test_check_exits_0_1_or_2_on_any_ledger_bytes(here: Path, data: bytes) -> None:
    path = fresh(here, "ledger.json")
    path.write_bytes(data)
    assert_check_outcome(*run_check(["-f", str(path), "--json"]))


@MEDIUM
@given(ledger=VALID_LEDGER)
def test_a_valid_ledger_round_trips_and_is_decided(here: Path, ledger: tuple[str, list[dict[str, Any]]]) -> None:
    goal, attempts = ledger
    text = dump_ledger(goal, attempts)
    parsed = parse_ledger(text)
    assert parsed.goal == goal
    assert [(a.iteration, a.action, a.outcome, a.error, a.tokens_used) for a in parsed.attempts] == [
        (a["iteration"], a["action"], a["outcome"], a.get("error"), a["tokensUsed"]) for a in attempts
    ]
    path = fresh(here, "ledger.json")
    path.write_text(text, encoding="utf-8")
    code, out, err = run_check(["-f", str(path), "--json", "--max-iterations", "1000"])
    assert code in (0, 2), err
    decision = json.loads(out)
    assert decision["iterations"] == len(attempts)
    assert decision["tokensUsed"] == sum(a["tokensUsed"] for a in attempts)


CHECK_FLAGS = ["--max-iterations", "--stagnation", "--no-progress", "--token-budget", "--similarity-threshold",
               "--window", "--max-trace-lines", "--daily-token-budget", "--budget-level", "--budget-from-pattern"]


JS_NUMBERISH = st.text("0123456789.eE+-xXoObBaAfF Iinfty", max_size=20) | st.sampled_from(
    ["", "1", "0", "-3", "1e3", "0x10", "0b101", "0o7", "Infinity", "NaN", " 5 ", "1.5", "95", "L2", "ci-sweeper", "L9"]
)


@MEDIUM
@given(flags=st.lists(st.tuples(st.sampled_from(CHECK_FLAGS), JS_NUMBERISH), max_size=3))
def test_check_flags_give_a_decision_or_one_line(here: Path, flags: list[tuple[str, str]]) -> None:
    path = fresh(here, "ledger.json")
    path.write_text(dump_ledger("g", [attempt_dict(1, "a", "failure", "Error: x", 5)]), encoding="utf-8")
    argv = ["-f", str(path), "--json", "--daily-state-dir", str(path.parent / "daily")]
    for flag, value in flags:
        argv += [f"{flag}={value}"]
    assert_check_outcome(*run_check(argv))


DAILY_STATE = (
    st.binary(max_size=120)
    | json_values(st.sampled_from(["date", "tokensUsedToday", "countedLedgers", "attempts", "hash"]) | st.text(max_size=6))
    .map(lambda v: json.dumps(v).encode())
    | st.fixed_dictionaries(
        {"date": st.sampled_from([datetime.now(timezone.utc).date().isoformat(), "2020-01-01"]) | st.text(max_size=5)},
        optional={
            "tokensUsedToday": st.integers(-5, 2**60) | st.floats(-1, 1e300) | st.text(max_size=3),
            "countedLedgers": json_values(st.sampled_from(["attempts", "hash"]), 8),
        },
    ).map(lambda v: json.dumps(v).encode())
)


@MEDIUM
@given(state=DAILY_STATE)
@example(state=b'{"date": "2026-01-01", "tokensUsedToday": -1}')
@example(state=b"[" * 50_000)
def test_check_survives_any_daily_state_file_and_moves_a_corrupt_one_aside(here: Path, state: bytes) -> None:
    path = fresh(here, "ledger.json")
    path.write_text(dump_ledger("g", [attempt_dict(1, "a", "success", None, 7)]), encoding="utf-8")
    daily = path.parent / "daily"
    daily.mkdir()
    (daily / "daily-spend.default.json").write_bytes(state)
    code, out, err = run_check(["-f", str(path), "--json", "--daily-token-budget", "100", "--daily-state-dir", str(daily)])
    assert code in (0, 2), err
    assert "Traceback" not in err
    for line in err.splitlines():
        assert line.startswith("ralph-supervise check: warning: daily state "), line
    if err:
        (aside,) = daily.glob("daily-spend.default.json.corrupt-*")
        assert aside.read_bytes() == state
    written = json.loads((daily / "daily-spend.default.json").read_text())
    assert written["tokensUsedToday"] >= 7


@budget(5)
@given(digits=st.integers(4301, 6000))
@example(digits=4301)
def test_a_ledger_with_a_huge_integer_is_exit_1(here: Path, digits: int) -> None:
    path = fresh(here, "ledger.json")
    path.write_text('{"goal": "g", "attempts": [{"action": "a", "outcome": "success", "tokensUsed": '
                    + "1" * digits + "}]}", encoding="utf-8")
    code, out, err = run_check(["-f", str(path)])
    assert code == 1 and one_line(err.strip())


@budget(5)
@given(flag=st.sampled_from(["--max-iterations", "--window", "--token-budget", "--similarity-threshold"]),
       digits=st.integers(257, 400))
@example(flag="--max-iterations", digits=257)
def test_a_huge_radix_flag_value_is_exit_1(here: Path, flag: str, digits: int) -> None:
    path = fresh(here, "ledger.json")
    path.write_text(dump_ledger("g", []), encoding="utf-8")
    code, _, err = run_check(["-f", str(path), flag, "0x" + "f" * digits])
    assert code == 1 and one_line(err.strip())


@budget(5)
@given(spent=st.sampled_from(["Infinity", "NaN", "1e999", "1" * 4301]))
@example(spent="Infinity")
def test_a_daily_state_with_a_non_finite_spend_is_set_aside(here: Path, spent: str) -> None:
    path = fresh(here, "ledger.json")
    path.write_text(dump_ledger("g", []), encoding="utf-8")
    daily = path.parent / "daily"
    daily.mkdir()
    (daily / "daily-spend.default.json").write_text('{"date": "2026-01-01", "tokensUsedToday": ' + spent + "}")
    code, _, err = run_check(["-f", str(path), "--daily-token-budget", "5", "--daily-state-dir", str(daily)])
    assert code in (0, 2) and "warning" in err
