"""The verify's pieces: the box its command runs in, the runner over a real snapshot store, `--verify auto`,
and the judgement (pure) that turns verifies into regression, tampering and false-completion."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ralph_supervisor.breaker import Breaker, State, Thresholds
from ralph_supervisor.settings import SettingsError, load_settings
from ralph_supervisor.evidence.ignore import IgnoreRules
from ralph_supervisor.snapshots.git import find_git
from ralph_supervisor.snapshots.store import SnapshotStore
from ralph_supervisor.verify import box
from ralph_supervisor.verify.command import pick_command, pick_in
from ralph_supervisor.verify.judgement import FALSE_COMPLETION, REGRESSION, TAMPERING, VerifyJudge, says_done
from ralph_supervisor.verify.results import FAILED, PASSED, SKIPPED, TestResults
from ralph_supervisor.verify.runner import Verifier, VerifyPlan, VerifyRun, as_passed, changes, unverified_reason
from ralph_supervisor.verify.tampering import SKIP_ADDED, Finding

needs_git = pytest.mark.skipif(find_git() is None, reason="git is not installed (the snapshots need it)")


# The box --------------------------------------------------------------------------------------------------


def run_box(tmp_path: Path, script: str, timeout: float = 30) -> tuple[subprocess.CompletedProcess[str], dict]:
    status = tmp_path / "box.json"
    done = subprocess.run([sys.executable, "-I", str(box.__file__), str(status), "--", sys.executable, "-c", script],
                          capture_output=True, text=True, timeout=timeout)
    return done, json.loads(status.read_text())


def test_the_box_runs_the_command_at_the_lowest_priority_and_passes_its_exit_code(tmp_path: Path) -> None:
    done, status = run_box(tmp_path, "import os, sys; print('nice', os.nice(0)); sys.exit(3)")
    assert done.returncode == 3 and status["exit"] == 3 and status["left"] == []
    assert "nice 19" in done.stdout
    if shutil.which("ionice"):
        shown, _ = run_box(tmp_path, "import os, subprocess; print(subprocess.run(['ionice', '-p', str(os.getpid())], "
                                     "capture_output=True, text=True).stdout)")
        assert "idle" in shown.stdout


def test_the_box_names_and_kills_a_daemon_the_command_left_behind(tmp_path: Path) -> None:
    daemon = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.execvp('sleep', ['sleep', '300'])\n"
        "    os._exit(0)\n"
        "time.sleep(0.3)\n"
    )
    done, status = run_box(tmp_path, daemon)
    assert done.returncode == 0
    assert status["left_count"] == 1 and status["left"][0].startswith("sleep (") and status["subreaper"] is True
    pid = int(status["left"][0].split("(")[1].rstrip(")"))
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]


def test_sigterm_to_the_box_ends_its_whole_tree_at_once(tmp_path: Path) -> None:
    status = tmp_path / "box.json"
    proc = subprocess.Popen([sys.executable, "-I", str(box.__file__), str(status), "--", "sh", "-c",
                             "sleep 300 & sleep 300 & wait"])
    deadline = time.monotonic() + 10
    while len(box.descendants(proc.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    kids = box.descendants(proc.pid)
    assert len(kids) >= 3
    began = time.monotonic()
    proc.terminate()
    assert proc.wait(10) == 128 + 15 and time.monotonic() - began < 5
    assert json.loads(status.read_text())["ended_by"] == "SIGTERM"
    for pid, _name in kids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]


def test_a_command_that_cannot_start_is_said_in_one_line(tmp_path: Path) -> None:
    status = tmp_path / "box.json"
    done = subprocess.run([sys.executable, "-I", str(box.__file__), str(status), "--", str(tmp_path / "nope")],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 127 and "cannot run" in done.stderr and len(done.stderr.strip().splitlines()) == 1


# The runner on a real snapshot store -----------------------------------------------------------------------


def write_project(ws: Path, good: int) -> None:
    """A calc with `good` of its three functions right, and their tests."""
    bodies = ["a + b", "a - b", "a * b"]
    ws.joinpath("calc.py").write_text("".join(
        f"def {name}(a, b):\n    return {body if i < good else 'None'}\n\n" for i, (name, body) in
        enumerate(zip(("add", "sub", "mul"), bodies))))
    ws.joinpath("test_calc.py").write_text(
        "from calc import add, mul, sub\n\n\ndef test_add():\n    assert add(2, 2) == 4\n\n\n"
        "def test_sub():\n    assert sub(3, 1) == 2\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n")


@needs_git
def test_the_newest_waiting_snapshot_is_verified_and_those_between_are_marked_skipped(tmp_path: Path) -> None:
    ws, state = tmp_path / "ws", tmp_path / "state"
    ws.mkdir()
    store = SnapshotStore(ws, state)
    store.open()
    infos = []
    for good in range(4):
        write_project(ws, good)
        infos.append(store.take(good, "start" if good == 0 else "iteration", None, now=time.time()))
    runs: list[VerifyRun] = []
    gate = tmp_path / "gate"
    command = (f"while [ ! -e {gate} ]; do sleep 0.05; done; "
               f"{sys.executable} -m pytest -q -p no:cacheprovider")
    verifier = Verifier(VerifyPlan(command, 60, ws, state), store, on_finished=runs.append)
    verifier.start()
    try:
        verifier.submit(infos[0])
        deadline = time.monotonic() + 10
        while not verifier.busy() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)  # the first verify is running (held at the gate)
        for info in infos[1:]:
            verifier.submit(info)
        gate.write_text("")
        assert verifier.idle(60)
    finally:
        verifier.close()
    assert [r.iteration for r in runs] == [0, 3]
    assert runs[1].covers == (1, 2, 3) and runs[1].skipped_iterations == (1, 2)
    assert (runs[0].results.passed, runs[0].results.failed) == (0, 3)  # type: ignore[union-attr]
    assert (runs[1].results.passed, runs[1].results.failed) == (3, 0)  # type: ignore[union-attr]
    assert runs[1].fixed == ("test_calc::test_add", "test_calc::test_mul", "test_calc::test_sub")
    lines = [json.loads(line) for line in (state / "verify.jsonl").read_text().splitlines()]
    assert [line["iteration"] for line in lines] == [0, 3] and lines[1]["skipped_iterations"] == [1, 2]
    assert not VerifyPlan(command, 60, ws, state).root.exists(), "the verify's folder is removed at close"


@needs_git
def test_the_snapshot_is_what_runs_not_the_workspace_and_borrowed_folders_are_linked(tmp_path: Path) -> None:
    ws, state = tmp_path / "ws", tmp_path / "state"
    ws.mkdir()
    (ws / "node_modules").mkdir()
    (ws / "node_modules" / "dep.txt").write_text("from the workspace")
    write_project(ws, 3)
    store = SnapshotStore(ws, state)
    store.open()
    info = store.take(1, "iteration", None, now=time.time(), exclude=IgnoreRules().as_gitignore())
    assert "node_modules/dep.txt" not in store.files_in(info)  # as the keeper takes them: node_modules ignored
    write_project(ws, 0)  # the agent goes on: the workspace is now broken, the snapshot is not
    runs: list[VerifyRun] = []
    probe = ("cat node_modules/dep.txt && test -L node_modules && "
             f"{sys.executable} -m pytest -q -p no:cacheprovider && pwd")
    verifier = Verifier(VerifyPlan(probe, 60, ws, state), store, on_finished=runs.append)
    verifier.start()
    try:
        verifier.submit(info)
        assert verifier.idle(60)
    finally:
        verifier.close()
    assert runs[0].verified and (runs[0].results.passed, runs[0].results.failed) == (3, 0)  # type: ignore[union-attr]
    output = (state / "verify-output.log").read_text()
    assert "from the workspace" in output
    folder = output.strip().splitlines()[-1]
    assert not folder.startswith(str(ws)), "the verify ran outside the workspace"
    assert not (ws / "node_modules" / ".pytest_cache").exists() and sorted(p.name for p in (ws / "node_modules").iterdir()) == ["dep.txt"]


@needs_git
def test_a_newly_failing_test_is_run_once_more_and_a_flaky_one_does_not_count(tmp_path: Path) -> None:
    ws, state = tmp_path / "ws", tmp_path / "state"
    ws.mkdir()
    runs_file = tmp_path / "runs"
    (ws / "test_flaky.py").write_text(
        "import pathlib\n"
        f"RUNS = pathlib.Path({str(runs_file)!r})\n\n\n"
        "def test_steady():\n    assert True\n\n\n"
        "def test_flaky():\n"
        "    n = int(RUNS.read_text()) + 1 if RUNS.exists() else 1\n"
        "    RUNS.write_text(str(n))\n"
        "    assert n != 2  # fails the second time it runs only\n")
    store = SnapshotStore(ws, state)
    store.open()
    first = store.take(0, "start", None, now=time.time())
    (ws / "notes.py").write_text("X = 1\n")
    second = store.take(1, "iteration", None, now=time.time())
    runs: list[VerifyRun] = []
    verifier = Verifier(VerifyPlan(f"{sys.executable} -m pytest -q -p no:cacheprovider", 60, ws, state), store,
                        on_finished=runs.append)
    verifier.start()
    try:
        verifier.submit(first)
        assert verifier.idle(60)
        verifier.submit(second)
        assert verifier.idle(60)
    finally:
        verifier.close()
    assert runs_file.read_text() == "3", "the verify of iteration 1 ran the tests twice"
    assert runs[1].broke == (), runs[1]
    assert runs[1].results.tests.get("test_flaky::test_flaky") == PASSED, runs[1].results.tests  # type: ignore[union-attr]
    assert (runs[1].results.passed, runs[1].results.failed) == (2, 0)  # type: ignore[union-attr]


@needs_git
def test_a_borrowed_virtual_environment_with_an_editable_install_runs_the_snapshots_code(tmp_path: Path) -> None:
    ws, state = tmp_path / "ws", tmp_path / "state"
    (ws / "src" / "calc").mkdir(parents=True)
    (ws / "src" / "calc" / "__init__.py").write_text("VERSION = 'snapshot'\n")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(ws / ".venv")], check=True, timeout=60)
    site = next((ws / ".venv" / "lib").glob("python3*/site-packages"))
    (site / "__editable__.calc.pth").write_text(str(ws / "src") + "\n")  # what an editable install leaves
    store = SnapshotStore(ws, state)
    store.open()
    info = store.take(1, "iteration", None, now=time.time(), exclude=IgnoreRules().as_gitignore())
    (ws / "src" / "calc" / "__init__.py").write_text("VERSION = 'workspace'\n")  # the agent moved on
    runs: list[VerifyRun] = []
    probe = "python -c 'import calc, sys; print(calc.VERSION, calc.__file__, sys.prefix)'"
    verifier = Verifier(VerifyPlan(probe, 60, ws, state), store, on_finished=runs.append)
    verifier.start()
    try:
        verifier.submit(info)
        assert verifier.idle(60)
    finally:
        verifier.close()
    version, path, prefix = (state / "verify-output.log").read_text().strip().splitlines()[-1].split()
    assert version == "snapshot" and not path.startswith(str(ws)), path
    assert prefix.endswith(".venv"), "the workspace's virtual environment ran it"


@needs_git
def test_a_command_that_is_not_found_or_runs_no_test_is_unverified_never_failed(tmp_path: Path) -> None:
    ws, state = tmp_path / "ws", tmp_path / "state"
    ws.mkdir()
    write_project(ws, 1)
    store = SnapshotStore(ws, state)
    store.open()
    info = store.take(1, "iteration", None, now=time.time())
    for command, expected in [("no-such-test-runner --all", "could not run (exit 127"),
                              (f"{sys.executable} -m pytest -q -p no:cacheprovider -k nothing_matches", "ran no test"),
                              (f"{sys.executable} -c 'print(\"x\" * 50_000_000)'", None)]:
        runs: list[VerifyRun] = []
        verifier = Verifier(VerifyPlan(command, 60, ws, state), store, on_finished=runs.append)
        verifier.start()
        try:
            verifier.submit(info)
            assert verifier.idle(60)
        finally:
            verifier.close()
        run = runs[0]
        if expected is None:  # 50 MB of output with no result: the exit code speaks (0), and memory stayed bounded
            assert run.verified and run.results is not None and run.results.runner == "exit-code"
            kept = (state / "verify-output.log").stat().st_size
            assert kept < 3_000_000
        else:
            assert not run.verified and expected in (run.unverified or ""), run.unverified
            assert not run.failed


# --verify auto ---------------------------------------------------------------------------------------------


def test_auto_picks_the_projects_own_test_command_first() -> None:
    assert pick_command({"Makefile", "pyproject.toml"}, {"Makefile": "build:\n\tcc x.c\ntest: build\n\tpytest\n"}).command == "make test"  # type: ignore[union-attr]
    npm = '{"scripts": {"test": "jest"}}'
    assert pick_command({"package.json"}, {"package.json": npm}).command == "npm test"  # type: ignore[union-attr]
    placeholder = '{"scripts": {"test": "echo \\"Error: no test specified\\" && exit 1"}}'
    assert pick_command({"package.json"}, {"package.json": placeholder}) is None
    assert pick_command({"pytest.ini"}, {}).command == "python -m pytest -q"  # type: ignore[union-attr]
    assert pick_command({"tests"}, {}, tests_dir_has_python=True).command == "python -m pytest -q"  # type: ignore[union-attr]
    assert pick_command({"Cargo.toml", "src"}, {}).command == "cargo test"  # type: ignore[union-attr]
    assert pick_command({"go.mod"}, {}).command == "go test ./..."  # type: ignore[union-attr]
    assert pick_command({"README.md"}, {}) is None


def test_verify_auto_says_what_it_picked_or_fails_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    settings = load_settings(workspace=str(tmp_path), flags={"verify": "auto"}, env={})
    assert settings.verify == "python -m pytest -q" and "auto: test_*.py files" in settings.sources["verify"]
    assert pick_in(tmp_path) is not None
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SettingsError, match=r"^--verify auto: no test command found in .*give the command"):
        load_settings(workspace=str(empty), env={"RALPH_SUPERVISE_VERIFY": "auto"})
    with pytest.raises(SettingsError, match=r"^environment variable RALPH_SUPERVISE_TAMPERING: expected one of trip, warn, off"):
        load_settings(workspace=str(tmp_path), env={"RALPH_SUPERVISE_TAMPERING": "maybe"})


# The judgement (pure) -----------------------------------------------------------------------------------------


def results(**tests: str) -> TestResults:
    counts = {o: sum(1 for v in tests.values() if v == o) for o in (PASSED, FAILED, SKIPPED)}
    return TestResults("junit", passed=counts[PASSED], failed=counts[FAILED], skipped=counts[SKIPPED], tests=tests)


def verify_run(iteration: int, now: TestResults, before: TestResults | None = None, findings: tuple = (),
               covers: tuple[int, ...] | None = None) -> VerifyRun:
    fixed, broke = changes(before, now)
    return VerifyRun(iteration=iteration, snapshot=iteration + 1, covers=covers or (iteration,), started=0.0, seconds=1.0,
                     exit_code=0 if now.ok else 1, results=now, findings=findings, fixed=fixed, broke=broke,
                     previous_iteration=None if before is None else iteration - 1, previous_results=before)


def test_a_test_broken_for_n_verified_iterations_in_a_row_is_a_regression_naming_the_breaker() -> None:
    judge = VerifyJudge(regression=2)
    good = results(a=PASSED, b=PASSED, c=FAILED)
    bad = results(a=FAILED, b=PASSED, c=FAILED)
    assert judge.judge(verify_run(0, good), False).verdicts == ()
    first = judge.judge(verify_run(3, bad, good, covers=(1, 2, 3)), False)
    assert first.verdicts == () and first.broke == ("a",)
    second = judge.judge(verify_run(4, bad, bad), False)
    assert [v.trigger for v in second.verdicts] == [REGRESSION]
    assert "broken by iterations 1-3: a" in second.verdicts[0].reason
    assert judge.judge(verify_run(5, bad, bad), False).verdicts == (), "said once"
    assert judge.judge(verify_run(6, good, bad), False).progress, "fixing it again is progress"
    assert VerifyJudge(regression=0).judge(verify_run(1, bad, good), False).verdicts == ()
    never_passed = VerifyJudge(regression=1)
    assert never_passed.judge(verify_run(0, bad), False).verdicts == ()  # c never passed: not a regression


def test_saying_done_while_the_verify_fails_is_false_completion_unless_turned_off() -> None:
    failing = results(a=PASSED, b=FAILED)
    judged = VerifyJudge().judge(verify_run(2, failing), True)
    assert [v.trigger for v in judged.verdicts] == [FALSE_COMPLETION]
    assert "said the work is done at iteration 2, but its verify fails (1 failed, 0 errors, 1 passed: b)" in judged.verdicts[0].reason
    assert VerifyJudge(false_completion=False).judge(verify_run(2, failing), True).verdicts == ()
    assert VerifyJudge().judge(verify_run(2, results(a=PASSED)), True).verdicts == ()
    assert says_done(False, "Done. All tests pass now.") and says_done(True, None)
    assert says_done(False, "<promise>COMPLETE</promise>") and not says_done(False, "3 tests still fail")


def test_tampering_trips_warns_or_is_off_and_an_unverified_run_judges_nothing() -> None:
    before, after = results(a=PASSED, b=FAILED), results(a=PASSED, b=SKIPPED)
    finding = (Finding(SKIP_ADDED, "test_x.py", 4, "@pytest.mark.skip", "b"),)
    tripped = VerifyJudge(restore_command=lambda i: f"ralph-supervise restore {i}").judge(
        verify_run(5, after, before, finding), True)
    assert [v.trigger for v in tripped.verdicts] == [TAMPERING, FALSE_COMPLETION]
    assert tripped.verdicts[0].trip and "test_x.py:4 skip marker added" in tripped.verdicts[0].reason
    assert "`ralph-supervise restore 4`" in tripped.verdicts[0].reason
    warned = VerifyJudge(tampering="warn").judge(verify_run(5, after, before, finding), False)
    assert [(v.trigger, v.trip) for v in warned.verdicts] == [(TAMPERING, False)]
    assert VerifyJudge(tampering="off").judge(verify_run(5, after, before, finding), False).verdicts == ()
    unverified = VerifyRun(iteration=5, snapshot=6, covers=(5,), started=0, seconds=1, exit_code=None, results=None,
                           unverified="the test command did not finish in 600 s (--verify-timeout)")
    assert VerifyJudge().judge(unverified, True).verdicts == () and not unverified.failed


def test_changed_iterations_that_fix_nothing_are_no_progress_after_n_verifies_when_asked() -> None:
    judge = VerifyJudge(no_verified_progress=2)
    failing = results(a=PASSED, b=FAILED)
    assert judge.judge(verify_run(0, failing), False).verdicts == ()  # the baseline counts for nothing
    assert judge.judge(verify_run(1, failing, failing), False).verdicts == ()
    second = judge.judge(verify_run(2, failing, failing), False)
    assert [v.trigger for v in second.verdicts] == ["no-progress"]
    assert "2 verified iteration(s) in a row (1-2) changed files but made no failing test pass" in second.verdicts[0].reason
    fixed = judge.judge(verify_run(3, results(a=PASSED, b=PASSED), failing), False)
    assert fixed.verdicts == () and fixed.progress
    assert judge.judge(verify_run(4, results(a=PASSED, b=PASSED, c=PASSED), results(a=PASSED, b=PASSED)), False).verdicts == ()
    off = VerifyJudge()
    for n in range(5):
        assert off.judge(verify_run(n, failing, failing if n else None), False).verdicts == ()


def test_pure_helpers_of_the_runner() -> None:
    before, after = results(a=PASSED, b=FAILED, c=PASSED), results(a=FAILED, b=PASSED, c=PASSED)
    assert changes(before, after) == (("b",), ("a",))
    flaky = as_passed(after, ["a"])
    assert (flaky.passed, flaky.failed, flaky.tests["a"]) == (3, 0, PASSED)
    assert unverified_reason(TestResults("exit-code", exit_code=127), 127, "sh: 1: pytest: not found\n") == \
        "the test command could not run (exit 127: sh: 1: pytest: not found)"
    assert unverified_reason(TestResults("exit-code", exit_code=1), 1, "") is None  # a failure, by its exit code
    for missing in ("/usr/bin/python3: No module named pytest\n", "npm error Missing script: \"test\"\n",
                    "make: *** No rule to make target 'test'.  Stop.\n", "Error: Cannot find module 'jest'\n"):
        why = unverified_reason(TestResults("exit-code", exit_code=1), 1, missing) or ""
        assert why.startswith("the test command could not run (exit 1: "), (missing, why)
    assert "exited 4 with no test results" in (unverified_reason(TestResults("exit-code", exit_code=4), 4, "") or "")


def test_a_verdict_opens_a_closed_breaker_never_undoes_an_open_and_tampering_waits_for_a_human() -> None:
    breaker = Breaker(Thresholds(cooldown_s=60))
    decision = breaker.verdict_open(TAMPERING, "iteration 3 weakened the tests", 100.0)
    assert decision.action == "open" and decision.cooldown_s == 0.0 and breaker.state is State.OPEN
    assert breaker.verdict_open(REGRESSION, "later", 101.0).action == "none" and breaker.trigger == TAMPERING
    assert breaker.tick(10_000.0).action == "none" and breaker.state is State.OPEN, "no cooldown ends it"
    other = Breaker(Thresholds(cooldown_s=60))
    opened = other.verdict_open(REGRESSION, "2 tests broken", 100.0)
    assert opened.action == "open" and opened.cooldown_s == 60.0


def test_verified_progress_resets_the_no_progress_count() -> None:
    from tests.test_breaker import report  # the breaker tests' own report builder

    breaker = Breaker(Thresholds(no_progress=3))
    for n in (1, 2):
        breaker.observe(report(n, files_changed=0), float(n))
    assert breaker.snapshot().consecutive_no_progress == 2
    breaker.verified_progress()
    assert breaker.snapshot().consecutive_no_progress == 0


def test_many_tests_over_many_verifies_keep_the_history_bounded_by_the_tests() -> None:
    judge = VerifyJudge(regression=2)
    names = [f"t{i}" for i in range(2000)]
    previous = None
    for iteration in range(50):
        now = TestResults("junit", passed=2000, tests={n: PASSED if (i + iteration) % 7 else FAILED for i, n in enumerate(names)})
        judge.judge(verify_run(iteration, now, previous), False)
        previous = now
    assert judge.tracked <= 2 * len(names)


def test_the_verifier_thread_is_gone_after_close(tmp_path: Path) -> None:
    ws, state = tmp_path / "ws", tmp_path / "state"
    ws.mkdir()
    store = SnapshotStore(ws, state)
    verifier = Verifier(VerifyPlan("true", 5, ws, state), store)
    verifier.start()
    verifier.close()
    assert not [t for t in threading.enumerate() if t.name == "ralph-verify"]
