"""The on-open hook: real shell commands, their process groups, their stdin and stderr."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import processes_with_test_id

from ralph_supervisor.hooks import run_hook
from tests.helpers import wait_for




DECISION = json.dumps({"state": "OPEN", "trigger": "no-progress", "iteration": 9})


def test_hook_gets_the_decision_json_on_stdin(tmp_path: Path):
    result = run_hook("cat > got.json", DECISION, cwd=tmp_path, timeout=10)
    assert result.ok and result.code == 0 and not result.timed_out
    assert (tmp_path / "got.json").read_text() == DECISION


def test_a_failing_hook_reports_its_code_and_stderr(tmp_path: Path):
    result = run_hook("echo 'webhook down' >&2; exit 3", DECISION, cwd=tmp_path, timeout=10)
    assert not result.ok
    assert result.code == 3 and not result.timed_out
    assert result.stderr_tail == "webhook down"


def test_a_hanging_hook_is_killed_with_its_whole_group(tmp_path: Path, no_process_left_behind: str):
    result = run_hook("sleep 1000; echo never", DECISION, cwd=tmp_path, timeout=0.5)
    assert result.timed_out and not result.ok
    assert result.code is not None and result.code < 0
    assert "timed out after 0.5s" in result.stderr_tail
    # SIGKILL is asynchronous: the killed group is gone a moment later, without any further action.
    assert wait_for(lambda: processes_with_test_id(no_process_left_behind) == [], timeout=3.0)


def test_a_background_child_holding_stderr_cannot_hang_the_caller(tmp_path: Path, no_process_left_behind: str):
    # The hook exits at once but leaves `sleep` holding its stderr open: we must not wait for EOF.
    result = run_hook("sleep 1000 & echo started >&2; exit 0", DECISION, cwd=tmp_path, timeout=30)
    assert result.ok and not result.timed_out
    assert result.stderr_tail == "started"
    # SIGKILL is asynchronous: the killed group is gone a moment later, without any further action.
    assert wait_for(lambda: processes_with_test_id(no_process_left_behind) == [], timeout=3.0)


def test_a_hook_that_ignores_a_large_stdin_still_finishes(tmp_path: Path):
    big = json.dumps({"evidence": "x" * 1_000_000})
    result = run_hook("exit 0", big, cwd=tmp_path, timeout=10)
    assert result.ok and not result.timed_out


def test_a_hook_in_a_missing_folder_reports_instead_of_raising(tmp_path: Path):
    result = run_hook("true", DECISION, cwd=tmp_path / "missing", timeout=5)
    assert not result.ok and result.code is None
    assert "cannot start hook" in result.stderr_tail
