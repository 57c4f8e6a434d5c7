"""`ralph-supervise check` as a command: flags, exit codes, stdin, errors, daily state file, --on-exceed hook."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ralph_supervisor import check
from ralph_supervisor.ledger import attempt_dict, dump_ledger

PY = sys.executable


def write_ledger(path: Path, attempts: list[dict[str, Any]], goal: str = "ship it") -> Path:
    path.write_text(json.dumps({"goal": goal, "attempts": attempts}), encoding="utf-8")
    return path


def att(outcome: str = "failure", action: str = "retry", error: str | None = "Error: boom", tokens: int = 0) -> dict[str, Any]:
    a: dict[str, Any] = {"iteration": 1, "action": action, "outcome": outcome, "tokensUsed": tokens}
    if error is not None:
        a["error"] = error
    return a


STUCK = [att(error=f"Error: connect ECONNREFUSED 127.0.0.1:{p}", action=f"try {i}") for i, p in enumerate((1, 2, 3))]
FINE = [att("success", "wrote code", None, 100)]


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = check.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def run_cli(args: list[str], stdin: bytes | None = None, cwd: Path | None = None, **kw: Any) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [PY, "-m", "ralph_supervisor.check", *args], input=stdin, capture_output=True, cwd=cwd, timeout=30, **kw
    )


# ── decisions and exit codes ───────────────────────────────────────


def test_continue_is_exit_0_and_escalate_is_exit_2_in_a_real_process(tmp_path: Path) -> None:
    fine = run_cli(["--ledger", str(write_ledger(tmp_path / "fine.json", FINE))])
    assert (fine.returncode, fine.stdout.decode()) == (0, "CONTINUE [ok] — Within limits — cleared to continue.\n")
    stuck = run_cli(["-f", str(write_ledger(tmp_path / "stuck.json", STUCK))])
    assert stuck.returncode == 2
    assert stuck.stdout.decode() == (
        'ESCALATE [stagnation] — Same error repeated 3× in a row (threshold 3): "Error: connect ECONNREFUSED #.#.#.#". '
        "Escalating instead of retrying.\n"
    )
    assert stuck.stderr == b""


def test_ledger_is_read_from_stdin_when_no_ledger_flag(tmp_path: Path) -> None:
    proc = run_cli(["--json"], stdin=json.dumps({"goal": "g", "attempts": STUCK}).encode())
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["trigger"] == "stagnation"


def test_a_terminal_on_stdin_is_an_error_not_a_hang() -> None:
    master, slave = os.openpty()
    try:
        proc = subprocess.run([PY, "-m", "ralph_supervisor.check"], stdin=slave, capture_output=True, timeout=30)
    finally:
        os.close(slave)
        os.close(master)
    assert proc.returncode == 1
    assert proc.stderr.decode() == "ralph-supervise check: No ledger provided. Pass --ledger <file.json> or pipe JSON on stdin.\n"


def test_json_output_has_loop_contexts_keys_order_and_indent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(["-f", str(write_ledger(tmp_path / "l.json", FINE)), "--json"], capsys)
    assert code == 0
    assert out == (
        '{\n  "iterations": 1,\n  "tokensUsed": 100,\n  "shouldContinue": true,\n  "escalate": false,\n'
        '  "trigger": "ok",\n  "reason": "Within limits — cleared to continue."\n}\n'
    )


def test_output_is_utf8_even_under_the_c_locale(tmp_path: Path) -> None:
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    env.pop("PYTHONIOENCODING", None)
    proc = run_cli(["-f", str(write_ledger(tmp_path / "l.json", FINE))], env=env)
    assert proc.stdout.decode("utf-8") == "CONTINUE [ok] — Within limits — cleared to continue.\n"


def test_flags_change_the_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(write_ledger(tmp_path / "l.json", STUCK))
    code, out, _ = run_main(["-f", path, "--stagnation", "4", "--no-progress", "3"], capsys)
    assert (code, out) == (2, "ESCALATE [no-progress] — 3 consecutive failures with no progress (threshold 3). Escalating.\n")
    code, out, _ = run_main(["-f", path, "--stagnation", "4", "--similarity-threshold", "1"], capsys)
    assert code == 0
    code, out, _ = run_main(["-f", str(write_ledger(tmp_path / "m.json", FINE * 3)), "--max-iterations", "3"], capsys)
    assert out == "ESCALATE [max-iterations] — Iteration cap reached (3 ≥ 3). Escalating.\n"


def test_numbers_are_read_like_javascripts_number(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(write_ledger(tmp_path / "l.json", FINE * 16))
    for raw in ("16", "1.6e1", " 16 ", "0x10", "16.0"):
        code, out, _ = run_main(["-f", path, "--max-iterations", raw], capsys)
        assert (code, out) == (2, "ESCALATE [max-iterations] — Iteration cap reached (16 ≥ 16). Escalating.\n"), raw


def test_check_flag_is_accepted_for_drop_in_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run_main(["--check", "-f", str(write_ledger(tmp_path / "l.json", FINE))], capsys)
    assert code == 0


# ── errors: one line, exit 1 ───────────────────────────────────────


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-iterations", "abc"], '--max-iterations must be a positive integer; got "abc".'),
        (["--stagnation", "0"], '--stagnation must be a positive integer; got "0".'),
        (["--no-progress", "2.5"], '--no-progress must be a positive integer; got "2.5".'),
        (["--token-budget", ""], "--token-budget requires a positive integer value."),
        (["--window", "-1"], '--window must be a positive integer; got "-1".'),
        (["--similarity-threshold", "95"], '--similarity-threshold must be a number greater than 0 and at most 1; got "95".'),
        (["--similarity-threshold", "nan"], '--similarity-threshold must be a number greater than 0 and at most 1; got "nan".'),
        (["--similarity-threshold", "0"], '--similarity-threshold must be a number greater than 0 and at most 1; got "0".'),
        (["--budget-from-pattern", "nope"], "Unknown pattern: nope. Use --list for ids."),
        (["--daily-budget-from-pattern", "nope"], "Unknown pattern: nope. Use --list for ids."),
        (["--budget-from-pattern", "ci-sweeper", "--budget-level", "L4"], "Invalid level: L4. Valid: L1, L2, L3"),
        (["--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["--max-iterations"], "argument --max-iterations: expected one argument"),
    ],
)
def test_bad_flags_are_one_line_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, out, err = run_main(["-f", str(write_ledger(tmp_path / "l.json", FINE)), *args], capsys)
    assert (code, out, err) == (1, "", f"ralph-supervise check: {message}\n")


def test_bad_ledger_files_are_one_line_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.json"
    code, _, err = run_main(["-f", str(missing)], capsys)
    assert (code, err) == (1, f"ralph-supervise check: ledger {missing}: cannot read: No such file or directory\n")
    code, _, err = run_main(["-f", str(tmp_path)], capsys)
    assert code == 1 and err.startswith(f"ralph-supervise check: ledger {tmp_path}: cannot read:")
    bad = tmp_path / "bad.json"
    bad.write_text('{"goal": "g",\n  "attempts": [,]}')
    code, _, err = run_main(["-f", str(bad)], capsys)
    assert (code, err) == (1, f"ralph-supervise check: {bad}: bad JSON at line 2 column 16: Expecting value\n")
    binary = tmp_path / "bin.json"
    binary.write_bytes(b'{"goal": "\xff"}')
    code, _, err = run_main(["-f", str(binary)], capsys)
    assert (code, err) == (1, f"ralph-supervise check: {binary}: not UTF-8 text (byte 10)\n")


def test_malformed_attempt_is_named_by_index_and_field(tmp_path: Path) -> None:
    path = write_ledger(tmp_path / "l.json", [*FINE, None])  # type: ignore[list-item]
    proc = run_cli(["-f", str(path)])
    assert proc.returncode == 1
    assert proc.stderr.decode() == f"ralph-supervise check: {path}: attempts[1] must be an object, got null\n"
    proc = run_cli([], stdin=json.dumps({"goal": "g", "attempts": [att(tokens="12")]}).encode())  # type: ignore[arg-type]
    assert proc.stderr.decode() == (
        'ralph-supervise check: <stdin>: attempts[0].tokensUsed must be a non-negative integer, got a string "12"\n'
    )


# ── budgets ────────────────────────────────────────────────────────


def test_budget_from_pattern_and_explicit_budget_wins(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(write_ledger(tmp_path / "l.json", [att("success", tokens=19250)]))
    code, out, _ = run_main(["-f", path, "--budget-from-pattern", "ci-sweeper", "--budget-level", "L2"], capsys)
    assert out == "ESCALATE [token-budget] — Token budget reached (19250 ≥ 19250). Escalating to avoid cost blowup.\n"
    code, out, _ = run_main(["-f", path, "--budget-from-pattern", "ci-sweeper", "--budget-level", "L2", "--token-budget", "20000"], capsys)
    assert code == 0


def test_list_prints_every_pattern(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(["--list"], capsys)
    assert code == 0
    assert "ci-sweeper\t9500\t19250\t69500\t1000000" in out.splitlines()
    assert len(out.splitlines()) == 8


def daily(tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    return run_main(
        ["-f", str(ledger), "--daily-budget-from-pattern", "issue-triage", "--daily-state-dir", str(tmp_path / "st"), *extra],
        capsys,
    )


def test_daily_spend_counts_each_attempt_once_across_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = write_ledger(tmp_path / "l.json", [att("success", tokens=30000), att("success", tokens=20000)])
    for _ in range(3):
        code, out, err = daily(tmp_path, ledger, capsys)
        assert (code, err) == (0, "")
    state_file = tmp_path / "st" / "daily-spend.issue-triage.json"
    state = json.loads(state_file.read_text())
    assert state["tokensUsedToday"] == 50000
    assert list(state)[:2] == ["date", "tokensUsedToday"]  # loop-context can read it
    assert sorted(p.name for p in state_file.parent.iterdir()) == ["daily-spend.issue-triage.json"]  # no temp left
    write_ledger(ledger, [att("success", tokens=30000), att("success", tokens=20000), att("success", tokens=30000)])
    code, out, _ = daily(tmp_path, ledger, capsys)
    assert (code, out) == (
        2,
        'ESCALATE [daily-budget] — Daily token spend for pattern "issue-triage" reached 80000 (cap 80000). '
        "Escalating to avoid cost blowup.\n",
    )


def test_daily_token_budget_wins_over_the_patterns_cap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = write_ledger(tmp_path / "l.json", [att("success", tokens=500)])
    code, out, _ = daily(tmp_path, ledger, capsys, "--daily-token-budget", "500")
    assert code == 2 and "(cap 500)" in out
    code, out, _ = run_main(["-f", str(ledger), "--daily-token-budget", "400", "--daily-state-dir", str(tmp_path / "d2")], capsys)
    assert out == "ESCALATE [daily-budget] — Daily token spend reached 500 (cap 400). Escalating to avoid cost blowup.\n"
    assert (tmp_path / "d2" / "daily-spend.default.json").exists()


def test_loop_contexts_state_file_carries_over_and_yesterdays_resets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from datetime import datetime, timezone

    today = datetime.now(timezone.utc).date().isoformat()
    (tmp_path / "st").mkdir()
    state_file = tmp_path / "st" / "daily-spend.issue-triage.json"
    state_file.write_text(json.dumps({"date": today, "tokensUsedToday": 79990}, indent=2))
    ledger = write_ledger(tmp_path / "l.json", [att("success", tokens=10)])
    code, out, _ = daily(tmp_path, ledger, capsys)
    assert code == 2 and "reached 80000" in out
    state_file.write_text(json.dumps({"date": "2000-01-01", "tokensUsedToday": 79990}))
    code, out, _ = daily(tmp_path, ledger, capsys)
    assert code == 0
    assert json.loads(state_file.read_text())["tokensUsedToday"] == 10


def test_a_corrupt_state_file_is_reported_and_kept_not_silently_zeroed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "st").mkdir()
    state_file = tmp_path / "st" / "daily-spend.issue-triage.json"
    state_file.write_text('{"date": "2026-')
    ledger = write_ledger(tmp_path / "l.json", [att("success", tokens=10)])
    code, out, err = daily(tmp_path, ledger, capsys)
    assert code == 0
    assert err.count("\n") == 1
    assert err.startswith(f"ralph-supervise check: warning: daily state {state_file} is unreadable (")
    (aside,) = (tmp_path / "st").glob("daily-spend.issue-triage.json.corrupt-*")  # the one naming scheme
    assert f"moved to {aside}" in err
    assert aside.read_text() == '{"date": "2026-'
    assert json.loads(state_file.read_text())["tokensUsedToday"] == 10


def test_concurrent_checks_of_different_ledgers_add_up(tmp_path: Path) -> None:
    ledgers = [write_ledger(tmp_path / f"l{i}.json", [att("success", tokens=100 + i)], goal=f"run {i}") for i in range(6)]
    args = ["--daily-budget-from-pattern", "pr-babysitter", "--daily-state-dir", str(tmp_path / "st")]
    procs = [subprocess.Popen([PY, "-m", "ralph_supervisor.check", "-f", str(p), *args], stdout=subprocess.DEVNULL) for p in ledgers]
    assert [p.wait(timeout=30) for p in procs] == [0] * 6
    state = json.loads((tmp_path / "st" / "daily-spend.pr-babysitter.json").read_text())
    assert state["tokensUsedToday"] == sum(100 + i for i in range(6))


# ── --on-exceed ────────────────────────────────────────────────────


def test_on_exceed_hook_gets_the_decision_as_one_compact_json_line(tmp_path: Path) -> None:
    got = tmp_path / "got.json"
    hook = f"cat > {got}; echo hook-ran; exit 7"
    proc = run_cli(["-f", str(write_ledger(tmp_path / "l.json", STUCK)), "--on-exceed", hook])
    assert proc.returncode == 2  # the hook's own exit code is not ours
    lines = proc.stdout.decode().splitlines()
    assert lines[0] == "hook-ran" and lines[1].startswith("ESCALATE [stagnation]")  # the hook runs first
    payload = got.read_bytes().decode("utf-8")
    assert "\n" not in payload
    assert payload.startswith('{"iterations":3,"tokensUsed":0,"shouldContinue":false,"escalate":true,"trigger":"stagnation"')
    assert "3× in a row" in payload


def test_on_exceed_hook_does_not_run_on_continue(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    proc = run_cli(["-f", str(write_ledger(tmp_path / "l.json", FINE)), "--on-exceed", f"touch {marker}"])
    assert proc.returncode == 0 and not marker.exists()


# ── --inject and the supervisor's own ledger ───────────────────────


def test_inject_prints_the_markdown_block_and_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(["-f", str(write_ledger(tmp_path / "l.json", STUCK, goal="Fix the DB")), "--inject"], capsys)
    assert code == 0
    assert out.startswith("## Loop Context (managed)\n\n**Goal:** Fix the DB\n**Progress:** iteration 3 · 0 ok · 3 failed\n")
    assert "- (3×) Error: connect ECONNREFUSED 127.0.0.1:1\n" in out
    assert out.endswith("> STOP — circuit breaker tripped (stagnation). " + 'Same error repeated 3× in a row (threshold 3): "Error: connect ECONNREFUSED #.#.#.#". Escalating instead of retrying.\n')


def test_supervisors_own_ledger_passes_through_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    attempts = [
        attempt_dict(1, "Implemented parser", "success", None, 1000),
        *(attempt_dict(i, f"Ran tests ({i})", "failure", f"FAILED tests/test_x.py::test_{i} - AssertionError", 500) for i in (2, 3, 4)),
    ]
    path = tmp_path / "ledger.json"
    path.write_text(dump_ledger("Build it", attempts), encoding="utf-8")
    code, out, err = run_main(["-f", str(path), "--json"], capsys)
    assert (code, err) == (2, "")
    decision = json.loads(out)
    assert (decision["iterations"], decision["tokensUsed"], decision["trigger"]) == (4, 2500, "stagnation")


def test_main_reads_stdin_in_process(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.dumps({"goal": "g", "attempts": FINE}).encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    code, out, _ = run_main([], capsys)
    assert (code, out) == (0, "CONTINUE [ok] — Within limits — cleared to continue.\n")


def test_help_prints_usage_and_returns_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(["--help"], capsys)
    assert code == 0 and "--similarity-threshold" in out and "--on-exceed" in out


@pytest.mark.parametrize(
    ("raw", "value"),
    [("16", 16.0), (" 16\n", 16.0), ("1.6e1", 16.0), ("0x10", 16.0), ("0b10", 2.0), ("0o10", 8.0), (".5", 0.5),
     ("5.", 5.0), ("+3", 3.0), ("-3", -3.0), ("Infinity", float("inf")), ("", 0.0), ("\u00a0", 0.0)],
)
def test_js_number_reads_like_javascript(raw: str, value: float) -> None:
    assert check.js_number(raw) == value


@pytest.mark.parametrize("raw", ["abc", "1_000", "0x", "1e", "--1", "0x1.8", "inf", "nan", "1 2", "١"])
def test_js_number_is_nan_where_javascript_says_nan(raw: str) -> None:
    import math

    assert math.isnan(check.js_number(raw))


def test_a_ledger_number_too_long_for_python_is_one_line_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "l.json"
    path.write_text('{"goal": "g", "attempts": [{"action": "a", "outcome": "success", "tokensUsed": ' + "1" * 4301 + "}]}")
    code, _, err = run_main(["-f", str(path)], capsys)
    assert (code, err) == (1, f"ralph-supervise check: {path}: bad JSON: a number too long to read\n")


def test_a_huge_hex_flag_is_infinity_like_javascript_and_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check.js_number("0x" + "f" * 300) == float("inf")
    code, _, err = run_main(["-f", str(write_ledger(tmp_path / "l.json", FINE)), "--max-iterations", "0x" + "f" * 300], capsys)
    assert code == 1 and err.count("\n") == 1 and "--max-iterations must be a positive integer" in err


@pytest.mark.parametrize("spent", ["Infinity", "NaN", "1e999", "1" * 4301, '"12"', "-5", "1.5"])
def test_a_daily_state_with_a_bad_spend_is_set_aside_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spent: str
) -> None:
    (tmp_path / "st").mkdir()
    state_file = tmp_path / "st" / "daily-spend.issue-triage.json"
    state_file.write_text('{"date": "2026-01-01", "tokensUsedToday": ' + spent + "}")
    code, _, err = daily(tmp_path, write_ledger(tmp_path / "l.json", [att("success", tokens=10)]), capsys)
    assert code == 0
    assert err.count("\n") == 1 and f"warning: daily state {state_file} is unreadable" in err
    assert list((tmp_path / "st").glob("daily-spend.issue-triage.json.corrupt-*"))


# ── the lean path: `ralph-supervise check` loads the ledger rules only ─────


def test_the_command_s_check_imports_nothing_of_the_supervisor(tmp_path: Path) -> None:
    ledger = write_ledger(tmp_path / "ledger.json", STUCK)
    probe = (
        "import sys; from ralph_supervisor.entry import main; code = main(['check', '-f', sys.argv[1], '--json']); "
        "sys.stdout.flush(); print(*sorted(sys.modules), file=sys.stderr); sys.exit(code)"
    )
    # -S: no site, so the editable install's import hook (which loads pathlib and more) is not counted; a
    # regular install has no such hook. check needs nothing outside the standard library.
    root = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([PY, "-S", "-c", probe, str(ledger)], capture_output=True, timeout=30,
                          env={**os.environ, "PYTHONPATH": root})
    assert done.returncode == 2 and json.loads(done.stdout)["trigger"] == "stagnation"
    loaded = set(done.stderr.decode().strip().splitlines()[-1].split())
    assert sorted(m for m in loaded if m.startswith("ralph_supervisor")) == [
        "ralph_supervisor", "ralph_supervisor.check", "ralph_supervisor.entry", "ralph_supervisor.ledger",
        "ralph_supervisor.signature", "ralph_supervisor.signature_code",
    ]
    heavy = {"structlog", "psutil", "asyncio", "tempfile", "shutil", "subprocess", "datetime", "pathlib", "re",
             "enum"} & loaded
    assert heavy == set(), f"check imported {sorted(heavy)}"


def test_python_m_and_the_console_script_reach_the_same_check(tmp_path: Path) -> None:
    ledger = write_ledger(tmp_path / "ledger.json", FINE)
    via_module = subprocess.run([PY, "-m", "ralph_supervisor", "check", "-f", str(ledger)], capture_output=True, timeout=30)
    assert via_module.returncode == 0 and via_module.stdout.decode().startswith("CONTINUE [ok]")
    version = subprocess.run([PY, "-m", "ralph_supervisor", "--version"], capture_output=True, timeout=30)
    assert version.returncode == 0 and version.stdout.decode().startswith("ralph-supervise ")
