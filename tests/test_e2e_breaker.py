"""End to end: a fake agent under a real loop, the real supervisor, the breaker acting on the real tree."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import psutil

from tests.helpers.fault_procs import cli, loop_tree, paused, states
from tests.helpers.supervise import LOOP, events, history, loop_env, run, start, supervise_argv, wait_for
from tests.helpers import state_dir_of

FAST = ("--no-echo", "--log-format", "json", "--grace", "2")


def state_of(state_dir: Path) -> dict:
    try:
        return json.loads((state_dir / "state.json").read_text())
    except (OSError, ValueError):
        return {}


def tree_of(pid: int) -> list[psutil.Process]:
    """The supervisor's live descendants but its helpers (zombies left out: a frozen parent cannot reap its
    child)."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    alive = []
    for child in children:
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child)
        except psutil.Error:
            continue
    return loop_tree(alive)


def stop_supervisor(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)


def test_a_stuck_loop_opens_at_iteration_3_and_the_tree_is_frozen(tmp_path: Path) -> None:
    proc = start(tmp_path, *FAST, "--cooldown", "10", "--", str(LOOP), env=loop_env("stuck"))
    state_dir = state_dir_of(tmp_path)
    try:
        wait_for(lambda: state_of(state_dir).get("state") == "OPEN", what="the breaker to open")
        wait_for(lambda: events(state_dir, "tree_paused"), what="tree_paused")
        opened = history(state_dir)[0]
        assert opened["to"] == "OPEN" and opened["trigger"] == "no-progress" and opened["iteration"] == 3
        members = tree_of(proc.pid)
        assert members, "the loop's tree should still exist, frozen"
        assert all(paused(members).values()), [(p.pid, p.name(), p.status()) for p in members]
        cpu_before = sum(sum(p.cpu_times()[:2]) for p in members)
        status = json.loads(cli(tmp_path, "status", "--json").stdout)
        assert status["state"] == "OPEN" and status["trigger"] == "no-progress"
        assert status["child"]["paused"] is True and status["supervisor"]["running"] is True
        # The latest iteration that started: 3, or 4 when the loop's next call began before the freeze.
        assert cli(tmp_path, "status", "--tmux").stdout.strip() in (
            "ralph: OPEN(no-progress) it3 paused", "ralph: OPEN(no-progress) it4 paused")
        escalation = (state_dir / "escalation.md").read_text()
        assert "no-progress" in escalation
        assert sum(sum(p.cpu_times()[:2]) for p in members) == cpu_before
    finally:
        stop_supervisor(proc)
    assert proc.returncode == 143


def test_resume_starts_a_trial_that_progress_closes(tmp_path: Path) -> None:
    scenario = tmp_path.parent / f"{tmp_path.name}-scenario"
    scenario.write_text("stuck")
    env = loop_env("stuck", FAKE_CLAUDE_SCENARIO_FILE=str(scenario))
    proc = start(tmp_path, *FAST, "--cooldown", "10", "--", str(LOOP), env=env)
    state_dir = state_dir_of(tmp_path)
    try:
        wait_for(lambda: events(state_dir, "tree_paused"), what="tree_paused")
        scenario.write_text("progress")
        resumed = cli(tmp_path, "resume")
        assert resumed.returncode == 0, resumed.stderr
        wait_for(lambda: state_of(state_dir).get("state") == "CLOSED", what="the trial to close the breaker")
        moves = [(h["from"], h["to"]) for h in history(state_dir)]
        assert moves == [("CLOSED", "OPEN"), ("OPEN", "HALF_OPEN"), ("HALF_OPEN", "CLOSED")]
        assert not any(paused(tree_of(proc.pid)).values())
    finally:
        stop_supervisor(proc)
        scenario.unlink()


def test_the_same_compile_error_five_times_opens_same_error(tmp_path: Path) -> None:
    proc = start(tmp_path, *FAST, "--no-progress", "20", "--paraphrase", "0", "--on-open", "stop",
                 "--", str(LOOP), env=loop_env("same-error"))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err.decode()[-2000:]
    opened = history(state_dir_of(tmp_path))[-1]
    assert opened["trigger"] == "same-error" and opened["iteration"] == 5
    ledger = json.loads((state_dir_of(tmp_path) / "ledger.json").read_text())
    outcomes = [a["outcome"] for a in ledger["attempts"]]
    # No call starts before the one before it is judged (the shim waits for the verdict): none after call 5.
    started = [e["iteration"] for e in events(state_dir_of(tmp_path), "iteration_started")]
    assert outcomes == ["failure"] * 5, outcomes
    assert started == [1, 2, 3, 4, 5], started
    assert "Failed to compile" in ledger["attempts"][0]["error"]


def test_three_paraphrased_blocker_replies_open_paraphrase(tmp_path: Path) -> None:
    proc = start(tmp_path, *FAST, "--no-progress", "20", "--on-open", "stop", "--", str(LOOP),
                 env=loop_env("paraphrase"))
    proc.communicate(timeout=60)
    assert proc.returncode == 2
    opened = history(state_dir_of(tmp_path))[-1]
    assert opened["trigger"] == "paraphrase" and opened["iteration"] == 3


def test_an_invalid_api_key_stops_with_exit_2_at_once(tmp_path: Path) -> None:
    proc = start(tmp_path, *FAST, "--on-open", "pause", "--", str(LOOP), env=loop_env("auth"))
    proc.communicate(timeout=60)
    assert proc.returncode == 2
    opened = history(state_dir_of(tmp_path))[-1]
    assert opened["trigger"] == "blocked" and opened["iteration"] <= 2
    assert "blocked" in (state_dir_of(tmp_path) / "escalation.md").read_text().lower()
    assert not tree_of(proc.pid)


def test_usage_limit_replies_do_not_count(tmp_path: Path) -> None:
    # Each limited call says its limit resets in 2 s: the tree waits that long (no margin), then goes on.
    env = loop_env("usage-limit", RALPH_LOOP_MAX="3", FAKE_AGENT_RESET_IN="2")
    result = run(tmp_path, *FAST, "--no-progress", "2", "--max-failures", "2", "--limit-wait-margin", "0",
                 "--", str(LOOP), env=env)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    state_dir = state_dir_of(tmp_path)
    assert history(state_dir) == []
    finished = events(state_dir, "iteration_finished")
    # A call that starts while the tree is being frozen for the limit waits in its shim for the thaw: none
    # is refused, all three run.
    assert events(state_dir, "agent_call_refused") == []
    assert len(finished) == 3 and all(e["usage_limited"] for e in finished), finished
    assert state_of(state_dir)["state"] == "CLOSED"
    waits = events(state_dir, "limit_wait_started")
    assert waits and all(w["known_reset"] for w in waits)  # the last limited call may end after the loop exits
    assert len(events(state_dir, "limit_wait_ended")) == len(waits)  # a frozen loop cannot exit: each wait ended


def test_a_loop_that_ends_while_frozen_for_a_limit_ends_the_wait_in_the_records(tmp_path: Path) -> None:
    """A loop that exits while frozen for a usage limit (here killed from outside; a loop on its way out
    when the freeze comes does the same): the wait is said to be over, and the supervisor leaves nothing."""
    env = loop_env("usage-limit", RALPH_LOOP_MAX="3", FAKE_AGENT_RESET_IN="300")
    proc = start(tmp_path, *FAST, "--limit-wait-margin", "0", "--", str(LOOP), env=env,
                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    state_dir = state_dir_of(tmp_path)
    try:
        wait_for(lambda: events(state_dir, "limit_wait_started"), timeout=60, what="the limit wait")
        loop = json.loads(cli(tmp_path, "status", "--json").stdout)["child"]["pid"]
        os.kill(loop, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    (ended,) = events(state_dir, "limit_wait_ended")
    assert ended["why"] == "the loop exited"
    assert len(events(state_dir, "limit_wait_started")) == 1 and events(state_dir, "child_exited")
    assert state_of(state_dir).get("limit_until") is None


def test_kill_mode_stops_the_tree_and_restarts_the_command_for_the_trial(tmp_path: Path) -> None:
    proc = start(tmp_path, *FAST, "--on-open", "kill", "--cooldown", "0.03", "--max-opens", "2", "--", str(LOOP),
                 env=loop_env("stuck"))
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 2, err.decode()[-2000:]
    state_dir = state_dir_of(tmp_path)
    assert len(events(state_dir, "child_started")) == 2
    moves = [(h["from"], h["to"]) for h in history(state_dir)]
    assert moves == [("CLOSED", "OPEN"), ("OPEN", "HALF_OPEN"), ("HALF_OPEN", "OPEN")]
    assert all(e["survivors"] == 0 for e in events(state_dir, "tree_stopped"))


def test_a_supervisor_restarted_while_open_stays_open(tmp_path: Path) -> None:
    args = (*FAST, "--cooldown", "5", "--", str(LOOP))
    proc = start(tmp_path, *args, env=loop_env("stuck"))
    state_dir = state_dir_of(tmp_path)
    wait_for(lambda: events(state_dir, "tree_paused"), what="tree_paused")
    stop_supervisor(proc)
    assert state_of(state_dir)["state"] == "OPEN"
    again = start(tmp_path, *args, env=loop_env("stuck"))
    try:
        wait_for(lambda: events(state_dir, "breaker_still_open"), what="breaker_still_open")
        status = json.loads(cli(tmp_path, "status", "--json").stdout)
        assert status["state"] == "OPEN" and status["child"] is None
        assert len(events(state_dir, "child_started")) == 1, "no child while the cooldown runs"
    finally:
        stop_supervisor(again)


def test_a_hook_that_fails_or_hangs_is_logged_and_never_fatal(tmp_path: Path) -> None:
    marker = tmp_path / "hook-ran"
    proc = start(tmp_path, *FAST, "--on-open", "stop", "--hook-timeout", "0.5",
                 "--on-open-hook", f"cat > {marker}; sleep 100", "--", str(LOOP), env=loop_env("stuck"))
    proc.communicate(timeout=60)
    assert proc.returncode == 2
    failed = events(state_dir_of(tmp_path), "hook_failed")
    assert failed and failed[0]["timed_out"] is True
    decision = json.loads(marker.read_text())
    assert decision["trigger"] == "no-progress" and decision["to"] == "OPEN"
    workspace = tmp_path / "again"
    workspace.mkdir()
    proc = start(workspace, *FAST, "--on-open", "stop", "--on-open-hook", "exit 3", "--", str(LOOP),
                 env=loop_env("stuck"))
    proc.communicate(timeout=60)
    assert proc.returncode == 2
    failed = events(state_dir_of(workspace), "hook_failed")
    assert failed and failed[0]["code"] == 3


def test_pause_resume_stop_over_the_control_socket(tmp_path: Path) -> None:
    assert cli(tmp_path, "pause").returncode == 1, "no supervisor runs yet"
    proc = start(tmp_path, *FAST, "--", str(LOOP), env=loop_env("progress"))
    state_dir = state_dir_of(tmp_path)
    try:
        wait_for(lambda: events(state_dir, "iteration_started"), what="a first iteration")
        asked = cli(tmp_path, "pause")
        assert asked.returncode == 0, asked.stderr
        assert all(paused(tree_of(proc.pid)).values()), states(tree_of(proc.pid))
        assert json.loads(cli(tmp_path, "status", "--json").stdout)["trigger"] == "manual"
        assert cli(tmp_path, "resume").returncode == 0
        assert not any(paused(tree_of(proc.pid)).values()), states(tree_of(proc.pid))
        stopped = cli(tmp_path, "stop")
        assert stopped.returncode == 0
        proc.communicate(timeout=30)
        assert proc.returncode == 0
    finally:
        stop_supervisor(proc)


def test_reset_without_a_supervisor_clears_the_state_file(tmp_path: Path) -> None:
    proc = start(tmp_path, *FAST, "--on-open", "stop", "--", str(LOOP), env=loop_env("stuck"))
    proc.communicate(timeout=60)
    state_dir = state_dir_of(tmp_path)
    assert state_of(state_dir)["state"] == "OPEN"
    assert cli(tmp_path, "reset").returncode == 0
    assert state_of(state_dir)["state"] == "CLOSED"
    status = subprocess.run(supervise_argv("--circuit-status", "-w", str(tmp_path)), capture_output=True, text=True)
    assert status.returncode == 0 and "CLOSED" in status.stdout and "not running" in status.stdout


def test_status_with_no_state_at_all(tmp_path: Path) -> None:
    result = cli(tmp_path, "status", "--json")
    assert result.returncode == 0
    data = json.loads(result.stdout)
    assert data["state"] == "CLOSED" and data["iteration"] == 0 and data["child"] is None
    assert data["supervisor"]["running"] is False
