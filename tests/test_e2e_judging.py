"""End to end, judging what matters: a flip-flopping workspace, a crash loop named by its error, a blocker
restated while a file churns. Each is a real loop calling a small sh agent through PATH, under the real
supervisor with `--on-open stop`, so every run ends by itself and its files are read afterwards."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.helpers.supervise import events, history, run
from tests.helpers import state_dir_of

pytestmark = pytest.mark.slow

FAST = ("--no-echo", "--log-format", "json", "--grace", "1", "--on-open", "stop", "--notify-desktop", "false")

RESULT = ('{"type":"result","subtype":"success","is_error":false,"result":"%s","session_id":"s",'
          '"total_cost_usd":0.01,"usage":{"input_tokens":10,"output_tokens":5}}')


def agent_loop(tmp_path: Path, agent_body: str, calls: int = 12) -> tuple[Path, list[str]]:
    """A workspace with `bin/claude` (sh, the body given) and a loop calling it `calls` times."""
    workspace = tmp_path / "work"
    (workspace / "src").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    claude = bin_dir / "claude"
    claude.write_text("#!/bin/sh\n" + agent_body)
    claude.chmod(claude.stat().st_mode | stat.S_IXUSR)
    # 0.3 s between calls, as a loop does (the pipe is shared: words of calls ms apart may change hands)
    loop = ["bash", "-c", f'for n in $(seq {calls}); do N=$n claude -p go --output-format json; sleep 0.3; done']
    return workspace, loop


def agent_path(workspace: Path) -> dict[str, str]:
    """The fake agent first on PATH (behind the supervisor's shims, which find it there)."""
    return {"PATH": f"{workspace.parent / 'bin'}{os.pathsep}{os.environ['PATH']}"}


def supervise(workspace: Path, loop: list[str], *args: str) -> tuple[int, Path]:
    done = run(workspace, *FAST, *args, "--", *loop, env=agent_path(workspace), timeout=90)
    return done.returncode, state_dir_of(workspace)


def test_an_agent_that_flips_a_file_between_two_states_trips_no_progress_from_the_first_return(tmp_path: Path) -> None:
    workspace, loop = agent_loop(tmp_path, (
        'if [ $((N % 2)) -eq 1 ]; then echo "x = 1" > src/a.py; else echo "x = 2" > src/a.py; fi\n'
        'sleep 0.05\n'
        f"printf '{RESULT}\\n' \"Rewrote src/a.py, attempt number $N of the refactoring\"\n"))
    code, state_dir = supervise(workspace, loop, "--no-progress", "3", "--paraphrase", "0")
    assert code == 2
    finished = events(state_dir, "iteration_finished")
    assert [e["files_changed"] for e in finished[:5]] == [1, 1, 1, 1, 1]  # every call changed the file
    assert [e.get("returned_to") for e in finished[:5]] == [None, None, 1, 2, 1]
    opened = history(state_dir)[-1]
    assert opened["trigger"] == "no-progress" and opened["iteration"] == 5
    assert "the workspace returned to the state it had after iteration 1" in opened["reason"]
    assert "returned to the state it had after iteration 1" in (state_dir / "escalation.md").read_text()


def test_a_crash_loop_is_caught_at_the_threshold_and_named_by_its_error(tmp_path: Path) -> None:
    workspace, loop = agent_loop(tmp_path, "echo 'Error: connect ECONNREFUSED 127.0.0.1:443' >&2\nexit 1\n")
    code, state_dir = supervise(workspace, loop)
    assert code == 2
    opened = history(state_dir)[-1]
    seen = [(e["iteration"], e["failed"], e["exit_status"], e["error_signatures"], e["cut_short"])
            for e in events(state_dir, "iteration_finished")]
    assert opened["iteration"] == 5 and opened["trigger"] in ("same-error", "consecutive-failures"), (opened, seen)
    assert "ECONNREFUSED" in opened["reason"] and "no file changed" not in opened["reason"]
    escalation = (state_dir / "escalation.md").read_text()
    assert "ECONNREFUSED" in escalation
    assert all(e["failed"] for e in events(state_dir, "iteration_finished"))


def test_a_blocker_restated_while_a_scratch_file_churns_trips_paraphrase(tmp_path: Path) -> None:
    replies = ["I am still blocked on the missing database migration for the users table.",
               "Still blocked: the database migration for the users table is missing.",
               "Blocked on the missing migration of the users table in the database."]
    cases = "\n".join(f"  {n}) reply='{text}' ;;" for n, text in enumerate(replies, start=1))
    workspace, loop = agent_loop(tmp_path, (
        'echo "scratch $N $(date +%s%N)" > notes.txt\n'
        f'case $(( (N - 1) % 3 + 1 )) in\n{cases}\nesac\n'
        f"printf '%s\\n' \"$(printf '{RESULT}' \"$reply\")\"\n"))
    code, state_dir = supervise(workspace, loop, "--no-progress", "5")
    assert code == 2
    opened = history(state_dir)[-1]
    said = [(e["iteration"], e["reply"], e["output_bytes"]) for e in events(state_dir, "iteration_finished")]
    assert opened["trigger"] == "paraphrase" and opened["iteration"] == 3, (opened, said)
    assert "restate the same blocker" in opened["reason"]
    finished = events(state_dir, "iteration_finished")
    assert [e["files_changed"] for e in finished[:3]] == [1, 1, 1]
    escalation = (state_dir / "escalation.md").read_text()
    assert "blocked" in escalation.lower()
    ledger = json.loads((state_dir / "ledger.json").read_text())
    assert [a["outcome"] for a in ledger["attempts"][:3]] == ["success", "success", "success"]
    assert os.path.exists(workspace / "notes.txt")


def test_a_usage_limit_freezes_the_tree_until_it_resets_and_resume_ends_the_wait(tmp_path: Path) -> None:
    """The agent says its limit resets in an hour: the tree is frozen, the breaker stays CLOSED, status and
    the tmux line say until when, and `resume` ends the wait at once."""
    import subprocess
    import time

    from tests.helpers.supervise import start, supervise_argv, wait_for

    workspace, loop = agent_loop(tmp_path, (
        'if [ "$N" -eq 1 ]; then echo "Claude AI usage limit reached|$(( $(date +%s) + 3600 ))"; exit 1; fi\n'
        f"printf '{RESULT}\\n' \"implemented step $N\"\n"
        'echo "step $N" > "step$N.txt"\n'), calls=2)
    proc = start(workspace, *FAST, "--", *loop, env=agent_path(workspace), stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)
    state_dir = state_dir_of(workspace)

    def cli(*args: str) -> str:
        return subprocess.run(supervise_argv(*args, "-w", str(workspace)), capture_output=True, text=True,
                              timeout=30).stdout

    try:
        wait_for(lambda: events(state_dir, "limit_wait_started"), timeout=30, what="the limit wait")
        status = json.loads(cli("status", "--json"))
        assert status["state"] == "CLOSED" and status["limit_until"] and status["child"]["paused"] is True
        until = time.mktime(time.strptime(status["limit_until"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        assert 3600 <= until - time.time() <= 3660 + 5  # the reset plus the 60 s margin
        assert cli("status", "--tmux").startswith("ralph: LIMIT until ")
        assert json.loads((state_dir / "state.json").read_text())["limit_until"] == status["limit_until"]  # for ls
        assert "resumed" in cli("resume")
        assert proc.wait(timeout=60) == 0  # the second call ran and the loop ended by itself
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert history(state_dir) == []  # never an open: a limit is not the loop's fault
    assert [e["why"] for e in events(state_dir, "limit_wait_ended")] == ["resume by request"]
    assert (workspace / "step2.txt").exists()


def test_with_limit_wait_off_the_loop_waits_out_a_usage_limit_itself(tmp_path: Path) -> None:
    """Ralph has its own limit handling (a prompt, or a 60-minute wait): `--limit-wait off` leaves it to the
    loop. The tree is not frozen, the limited call counts toward no rule, and it is said once."""
    workspace, loop = agent_loop(tmp_path, (
        'if [ "$N" -le 2 ]; then echo "Claude AI usage limit reached|$(( $(date +%s) + 3600 ))"; exit 1; fi\n'
        f"printf '{RESULT}\\n' \"implemented step $N\"\n"
        'echo "step $N" > "step$N.txt"\n'), calls=3)
    code, state_dir = supervise(workspace, loop, "--limit-wait", "off", "--max-failures", "2")
    assert code == 0, "the loop ran its three calls to the end"
    assert history(state_dir) == [], "limited calls are no failures"
    assert events(state_dir, "limit_wait_started") == [] and events(state_dir, "tree_paused") == []
    assert [e["iteration"] for e in events(state_dir, "limit_wait_skipped")] == [1]
    assert (workspace / "step3.txt").exists()


def test_dollar_budgets_stop_the_run_and_the_daily_one_spans_runs(tmp_path: Path) -> None:
    workspace, loop = agent_loop(tmp_path, (
        'echo "step $N $$" > "step$N.txt"\n'
        f"printf '{RESULT}\\n' \"implemented step $N\"\n"), calls=6)  # each call costs $0.01
    code, state_dir = supervise(workspace, loop, "--cost-budget", "0.025", "--daily-cost-budget", "0.045")
    assert code == 2
    opened = history(state_dir)[-1]
    # The call whose dollars cross the budget opens it (call 3: a quick call's reply is its own however late
    # its notice is read); the next call waits in its shim for that verdict and is refused: no call begins
    # after the open, no dollar more.
    spent = json.loads((state_dir / "state.json").read_text())["cost_used"]
    assert opened["trigger"] == "cost-budget" and opened["iteration"] == 3, opened
    assert spent == pytest.approx(0.03), (spent, opened)
    priced = [e["iteration"] for e in events(state_dir, "iteration_finished") if e["cost_usd"]]
    assert priced[-1] == opened["iteration"] and len(priced) == 3, priced
    assert [e["iteration"] for e in events(state_dir, "iteration_started")] == list(range(1, opened["iteration"] + 1))
    assert "$0.0300 >= $0.0250" in opened["reason"]
    assert json.loads((state_dir / "daily-spend.json").read_text())["cost_usd"] == pytest.approx(spent)
    escalation = (state_dir / "escalation.md").read_text()
    share = round(spent * 100 / 0.025)
    assert f"dollars ${spent:.2f} of $0.03 ({share} %)" in escalation  # the run's, against --cost-budget
    assert "raise the cap (`--cost-budget`)" in escalation
    # A new run: the run budget starts again, the day's spend does not.
    run(workspace, "reset")
    code, _ = supervise(workspace, loop, "--cost-budget", "0.025", "--daily-cost-budget", "0.045")
    assert code == 2
    opened = history(state_dir)[-1]
    assert opened["trigger"] == "daily-cost-budget" and "$0.0500 today >= $0.0450" in opened["reason"]
    assert "dollars $0.05 of $0.04 (111 %)" in (state_dir / "escalation.md").read_text()  # today's
    assert json.loads((state_dir / "daily-spend.json").read_text())["cost_usd"] == pytest.approx(0.05)
