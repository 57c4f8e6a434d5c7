"""End to end: the supervisor runs a real pytest project's tests itself, on each iteration's snapshot.

A real loop (examples/ralph_loop.sh) calls the fake agent, which plays one shell script per call
(FAKE_CLAUDE_CALLS_DIR): it fixes the code, breaks it, or weakens the tests and says it is done. The
verify is real pytest, run by the supervisor outside the workspace; every verdict is read from the
supervisor's own files (verify.jsonl, history.jsonl, events.jsonl).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import state_dir_of
from tests.helpers.fault_procs import cli, status
from tests.helpers.supervise import LOOP, events, history, run, start, wait_for

pytestmark = pytest.mark.slow

FAST = ("--no-echo", "--log-format", "json", "--grace", "2", "--no-progress", "50", "--stall", "60")
PYTEST = f"{sys.executable} -m pytest -q -p no:cacheprovider"

CALC_BROKEN = "def add(a, b):\n    return None\n\n\ndef sub(a, b):\n    return None\n\n\ndef mul(a, b):\n    return None\n"
CALC_GOOD = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
TESTS = """\
from calc import add, mul, sub


def test_add():
    assert add(2, 2) == 4


def test_sub():
    assert sub(3, 1) == 2


def test_mul():
    assert mul(2, 3) == 6
"""


def project(tmp_path: Path, calc: str) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "calc.py").write_text(calc)
    (ws / "test_calc.py").write_text(TESTS)
    return ws


def calls(tmp_path: Path, scripts: dict[int, str], done: tuple[int, ...] = ()) -> Path:
    folder = tmp_path / "calls"
    folder.mkdir()
    for number, text in scripts.items():
        (folder / f"{number}.sh").write_text(text)
    for number in done:
        (folder / f"{number}.done").write_text("")
    return folder


def loop_env(calls_dir: Path, max_calls: int, **extra: str) -> dict[str, str]:
    env = {"FAKE_CLAUDE_CALLS_DIR": str(calls_dir), "FAKE_CLAUDE_SCENARIO": "stuck", "RALPH_LOOP_PAUSE": "0.3",
           "FAKE_CLAUDE_DELAY": "0.6", "RALPH_LOOP_MAX": str(max_calls),
           "PATH": f"{LOOP.parent / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    env.update(extra)
    return env


def verifies(state_dir: Path) -> list[dict]:
    path = state_dir / "verify.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def replace_in(path: str, old: str, new: str) -> str:
    """A shell line that edits a file in the workspace with Python (no sed portability questions)."""
    return (f"{sys.executable} - <<'EDIT'\nimport pathlib\np = pathlib.Path({path!r})\n"
            f"p.write_text(p.read_text().replace({old!r}, {new!r}))\nEDIT\n")


def test_an_agent_that_fixes_tests_one_by_one_is_verified_as_progress_and_never_tripped(tmp_path: Path) -> None:
    ws = project(tmp_path, CALC_BROKEN)
    scripts = {
        1: replace_in("calc.py", "def add(a, b):\n    return None", "def add(a, b):\n    return a + b"),
        2: replace_in("calc.py", "def sub(a, b):\n    return None", "def sub(a, b):\n    return a - b"),
        3: replace_in("calc.py", "def mul(a, b):\n    return None", "def mul(a, b):\n    return a * b"),
    }
    env = loop_env(calls(tmp_path, scripts), 3)
    done = run(ws, *FAST, "--verify", PYTEST, "--", str(LOOP), env=env, timeout=120)
    state = state_dir_of(ws)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    lines = verifies(state)
    assert lines[0]["iteration"] == 0 and (lines[0]["passed"], lines[0]["failed"]) == (0, 3), lines
    assert (lines[-1]["passed"], lines[-1]["failed"]) == (3, 0), lines
    assert lines[-1]["iteration"] == 3 and all(line["unverified"] is None for line in lines)
    passed = [line["passed"] for line in lines]
    assert passed == sorted(passed), "the passing count only rose"
    fixed = [name for line in lines for name in line["fixed"]]
    assert sorted(fixed) == ["test_calc::test_add", "test_calc::test_mul", "test_calc::test_sub"]
    assert not [row for row in history(state) if row["to"] == "OPEN"]
    started = events(state, "verify_started")
    finished = events(state, "verify_finished")
    assert len(started) == len(finished) >= 2 and finished[-1]["passed"] == 3
    assert {tuple(e["covers"]) for e in finished} and sum(len(e["covers"]) for e in finished) == 4  # 0..3, each once
    kept = (state / "verify-output.log").read_text()
    assert kept.startswith("# verify of iteration 3") and "3 passed" in kept  # the last verify's output, for a human
    assert not (ws / ".pytest_cache").exists() and not (ws / "junit.xml").exists(), "the verify never ran in the workspace"
    shown = status(ws)["verify"]
    assert (shown["iteration"], shown["passed"], shown["failed"], shown["skipped"]) == (3, 3, 0, 0) and shown["at"]
    text = cli(ws, "status").stdout
    assert "Last verify:    iteration 3: 3 passed, 0 failed, 0 errors, 0 skipped" in text


def test_two_working_tests_broken_for_two_verified_iterations_open_as_a_regression(tmp_path: Path) -> None:
    ws = project(tmp_path, CALC_GOOD)
    # Call 3 waits (bounded) until a verify has seen the break: calls outrun verifies, and on a loaded machine
    # one verify could otherwise cover every iteration that changes files, leaving a single verified one.
    seen_broken = ('for i in $(seq 300); do grep -q "test_calc::test_add" "$RALPH_SUPERVISE_STATE_DIR/verify.jsonl" '
                   '2>/dev/null && break; sleep 0.1; done\n')
    scripts = {
        1: replace_in("calc.py", "return a + b", "return a - b") + replace_in("calc.py", "return a * b", "return a ** b"),
        2: "echo 'NOTE = 1' > notes.py\n",
        3: seen_broken + "echo 'NOTE = 2' > notes.py\n",
        4: "echo 'NOTE = 3' > notes.py\n",
    }
    env = loop_env(calls(tmp_path, scripts), 6)
    done = run(ws, *FAST, "--verify", PYTEST, "--on-open", "stop", "--", str(LOOP), env=env, timeout=120)
    state = state_dir_of(ws)
    assert done.returncode == 2, done.stderr.decode()[-3000:]
    opens = [row for row in history(state) if row["to"] == "OPEN"]
    assert [row["trigger"] for row in opens] == ["regression"], opens
    reason = opens[0]["reason"]
    assert "test_calc::test_add" in reason and "test_calc::test_mul" in reason
    assert re.search(r"broken by (iteration 1|iterations 1-\d+):", reason), reason  # calls may outrun verifies
    lines = verifies(state)
    broke = [line for line in lines if line["broke"]]
    assert broke[0]["covers"][0] == 1 and sorted(broke[0]["broke"]) == ["test_calc::test_add", "test_calc::test_mul"]


def test_skipping_the_failing_tests_and_saying_all_pass_is_tampering_and_false_completion(tmp_path: Path) -> None:
    ws = project(tmp_path, CALC_GOOD.replace("return a * b", "return None").replace("return a - b", "return None"))
    skip = replace_in("test_calc.py", "def test_sub", "import pytest\n\n\n@pytest.mark.skip(reason='flaky')\ndef test_sub")
    skip += replace_in("test_calc.py", "def test_mul", "@pytest.mark.skip(reason='flaky')\ndef test_mul")
    env = loop_env(calls(tmp_path, {1: skip}, done=(1,)), 100)  # the loop runs on until the breaker pauses it
    proc = start(ws, *FAST, "--verify", PYTEST, "--", str(LOOP), env=env)
    state = state_dir_of(ws)
    try:
        wait_for(lambda: any(r["to"] == "OPEN" for r in history(state)), timeout=90)
        opens = [row for row in history(state) if row["to"] == "OPEN"]
        assert [row["trigger"] for row in opens] == ["tampering"]
        reason = opens[0]["reason"]
        assert "test_calc.py:11 skip marker added: `@pytest.mark.skip(reason='flaky')`" in reason, reason
        assert "the snapshot of iteration 0 holds the tests before" in reason
        assert "tests that were failing: test_mul, test_sub" in reason
        verdicts = {e["trigger"] for e in events(state, "verify_verdict")}
        assert verdicts == {"tampering", "false-completion"}
        time.sleep(1.0)  # tampering waits for a human: no cooldown ends it
        assert [row["to"] for row in history(state)][-1] == "OPEN"
        assert json.loads((state / "state.json").read_text())["trigger"] == "tampering"
        live = status(ws)["verify"]  # from the running supervisor
        assert live["iteration"] >= 1 and live["skipped"] == 2 and live["failed"] == 0
        escalation = (state / "escalation.md").read_text()
        assert "skip marker added" in escalation
        assert "The snapshot of iteration 0" in escalation and "before its tests were weakened" in escalation
        assert "ralph-supervise restore 0 -w" in escalation
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert proc.returncode == 143


OTHER_TESTS = "def test_other():\n    assert 1 + 1 == 2\n"
PYPROJECT = '[project]\nname = "calc"\n\n[tool.pytest.ini_options]\ntestpaths = ["."]\n'


@pytest.mark.parametrize(("script", "evidence"), [
    ("rm test_calc.py\n", "test_calc.py test file deleted"),
    (replace_in("pyproject.toml", 'testpaths = ["."]\n',
                'testpaths = ["."]\naddopts = "--deselect test_calc.py::test_sub --deselect test_calc.py::test_mul"\n'),
     "pyproject.toml:6 test configuration narrowed: `addopts = "),
], ids=["deletes-a-test-file", "rewrites-addopts"])
def test_deleting_failing_tests_or_deselecting_them_is_tampering(tmp_path: Path, script: str, evidence: str) -> None:
    ws = project(tmp_path, CALC_GOOD.replace("return a * b", "return None").replace("return a - b", "return None"))
    (ws / "test_other.py").write_text(OTHER_TESTS)
    (ws / "pyproject.toml").write_text(PYPROJECT)
    env = loop_env(calls(tmp_path, {1: script}), 100)
    done = run(ws, *FAST, "--verify", PYTEST, "--on-open", "stop", "--", str(LOOP), env=env, timeout=120)
    state = state_dir_of(ws)
    assert done.returncode == 2, done.stderr.decode()[-3000:]
    opens = [row for row in history(state) if row["to"] == "OPEN"]
    assert [row["trigger"] for row in opens] == ["tampering"], opens
    assert evidence in opens[0]["reason"], opens[0]["reason"]
    assert "iteration 1 weakened the tests" in opens[0]["reason"]


def test_a_verify_is_never_frozen_by_a_pause_of_the_tree(tmp_path: Path) -> None:
    ws = project(tmp_path, CALC_GOOD)
    gate = tmp_path / "gate"
    slow = f"while [ ! -e {gate} ]; do sleep 0.05; done; {PYTEST}"
    env = loop_env(calls(tmp_path, {}), 100)
    proc = start(ws, *FAST, "--verify", slow, "--", str(LOOP), env=env)
    state = state_dir_of(ws)
    try:
        wait_for(lambda: bool(events(state, "verify_started")), timeout=60)
        paused = cli(ws, "pause")
        assert paused.returncode == 0, paused.stderr
        gate.write_text("")  # the verify goes on while the tree is frozen, and finishes
        wait_for(lambda: bool(events(state, "verify_finished")), timeout=60)
        assert [e["event"] for e in events(state) if e["event"] in ("tree_paused", "tree_resumed")] == ["tree_paused"]
        assert events(state, "verify_finished")[0]["passed"] == 3
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert proc.returncode == 143


def test_an_agent_that_only_touches_comments_makes_no_verified_progress_when_that_is_asked(tmp_path: Path) -> None:
    ws = project(tmp_path, CALC_BROKEN)
    touch = {n: f"echo '# pass {n}' >> calc.py\n" for n in range(1, 20)}
    env = loop_env(calls(tmp_path, touch), 19)
    done = run(ws, *FAST, "--verify", PYTEST, "--no-verified-progress", "2", "--on-open", "stop", "--", str(LOOP),
               env=env, timeout=120)
    state = state_dir_of(ws)
    assert done.returncode == 2, done.stderr.decode()[-3000:]
    opens = [row for row in history(state) if row["to"] == "OPEN"]
    assert [row["trigger"] for row in opens] == ["no-progress"], opens
    assert "verified iteration(s) in a row" in opens[0]["reason"] and "made no failing test pass" in opens[0]["reason"]


NODE_TESTS = """\
const test = require('node:test');
const assert = require('node:assert');
const { add, sub } = require('./calc');

test('adds', () => { assert.strictEqual(add(1, 2), 3); });
test('subs', () => { assert.strictEqual(sub(3, 1), 2); });
"""


@pytest.mark.skipif(not (shutil.which("node") and shutil.which("npm")), reason="node and npm are not installed")
def test_a_node_project_verified_with_npm_test_catches_a_test_skipped_to_pass(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "package.json").write_text('{"name": "calc", "version": "1.0.0", "scripts": {"test": "node --test"}}\n')
    (ws / "calc.js").write_text("module.exports = { add: (a, b) => a + b, sub: (a, b) => a + b };\n")
    (ws / "calc.test.js").write_text(NODE_TESTS)
    skip = replace_in("calc.test.js", "test('subs', () =>", "test.skip('subs', () =>")
    env = loop_env(calls(tmp_path, {1: skip}, done=(1,)), 100)
    done = run(ws, *FAST, "--verify", "auto", "--on-open", "stop", "--", str(LOOP), env=env, timeout=120)
    state = state_dir_of(ws)
    assert done.returncode == 2, done.stderr.decode()[-3000:]
    picked = events(state, "verify_command")[0]
    assert picked["command"] == "npm test" and "package.json's test script is 'node --test'" in picked["source"]
    lines = verifies(state)
    assert (lines[0]["runner"], lines[0]["passed"], lines[0]["failed"]) == ("node", 1, 1), lines
    opens = [row for row in history(state) if row["to"] == "OPEN"]
    assert [row["trigger"] for row in opens] == ["tampering"], opens
    assert "calc.test.js:6 skip marker added: `test.skip('subs'" in opens[0]["reason"]


def test_a_loop_that_ends_saying_done_while_its_tests_fail_exits_2_after_its_last_verify(tmp_path: Path) -> None:
    ws = project(tmp_path, CALC_BROKEN)
    fix_one = replace_in("calc.py", "def add(a, b):\n    return None", "def add(a, b):\n    return a + b")
    env = loop_env(calls(tmp_path, {1: fix_one}, done=(1,)), 1)  # one call, then the loop exits 0 by itself
    done = run(ws, *FAST, "--verify", PYTEST, "--", str(LOOP), env=env, timeout=120)
    state = state_dir_of(ws)
    assert done.returncode == 2, done.stderr.decode()[-3000:]
    exited = events(state, "child_exited")
    assert exited and exited[0]["code"] == 0
    verdicts = events(state, "verify_verdict")
    assert [v["trigger"] for v in verdicts] == ["false-completion"]
    assert "said the work is done at iteration 1, but its verify fails (2 failed, 0 errors, 1 passed" in verdicts[0]["reason"]
    assert "test_calc::test_mul" in verdicts[0]["reason"] and "test_calc::test_sub" in verdicts[0]["reason"]
    assert [line["iteration"] for line in verifies(state)] == [0, 1]  # the last iteration's verify was waited for


def test_a_hanging_verify_is_ended_at_its_timeout_as_unverified_and_never_trips(tmp_path: Path) -> None:
    ws = project(tmp_path, CALC_GOOD)
    hang = f"{sys.executable} -c 'import subprocess, time; subprocess.Popen([\"sleep\", \"300\"]); time.sleep(300)'"
    env = loop_env(calls(tmp_path, {1: "echo 'X = 1' > x.py\n"}), 1)
    began = time.monotonic()
    done = run(ws, *FAST, "--verify", hang, "--verify-timeout", "2", "--", str(LOOP), env=env, timeout=120)
    state = state_dir_of(ws)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    lines = verifies(state)
    assert lines and all("did not finish in 2 s" in line["unverified"] for line in lines), lines
    assert not [row for row in history(state) if row["to"] == "OPEN"]
    assert events(state, "verify_timeout")
    assert time.monotonic() - began < 60


def test_a_verify_that_forks_a_daemon_is_named_and_leaves_nothing_behind(tmp_path: Path) -> None:
    ws = project(tmp_path, CALC_GOOD)
    daemon = f"setsid sh -c 'sleep 300' > /dev/null 2>&1 < /dev/null & {PYTEST}"
    env = loop_env(calls(tmp_path, {1: "echo 'X = 1' > x.py\n"}), 1)
    done = run(ws, *FAST, "--verify", daemon, "--", str(LOOP), env=env, timeout=120)
    state = state_dir_of(ws)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    left = events(state, "verify_left_processes")
    assert left and any(p.startswith("sleep (") for p in left[0]["processes"]), left
    assert all(line["unverified"] is None and line["passed"] == 3 for line in verifies(state))
    # the autouse fixture proves the daemon is gone


def test_a_stop_during_a_verify_ends_it_and_its_whole_tree(tmp_path: Path) -> None:
    ws = project(tmp_path, CALC_GOOD)
    slow = f"{sys.executable} -c 'import subprocess, time; subprocess.Popen([\"sleep\", \"300\"]); time.sleep(300)'"
    env = loop_env(calls(tmp_path, {}), 100)
    proc = start(ws, *FAST, "--verify", slow, "--", str(LOOP), env=env)
    state = state_dir_of(ws)
    try:
        wait_for(lambda: bool(events(state, "verify_started")), timeout=60)
        time.sleep(0.5)
    finally:
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert time.monotonic() - began < 20
    # the autouse fixture proves no process (the verify's python, its `sleep`) was left behind
