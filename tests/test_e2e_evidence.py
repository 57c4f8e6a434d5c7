"""End to end: iterations and evidence as the real supervisor reads them from real loops."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ralph_supervisor.ledger import attempt_dict, dump_ledger
from tests.helpers.supervise import EXAMPLES, LOOP, events, history, loop_env, run
from tests.helpers import state_dir_of

FAST = ("--no-echo", "--log-format", "json", "--grace", "2")
BACKGROUND_LOOP = EXAMPLES / "ralph_background_loop.sh"


def finished(workspace: Path) -> list[dict]:
    return events(state_dir_of(workspace), "iteration_finished")


def ledger(workspace: Path) -> list[dict]:
    return json.loads((state_dir_of(workspace) / "ledger.json").read_text())["attempts"]


@pytest.mark.parametrize("fmt", ["json", "stream-json", "text"])
def test_each_call_of_a_loop_through_gnu_timeout_is_one_iteration(tmp_path: Path, fmt: str) -> None:
    env = loop_env("progress", RALPH_LOOP_MAX="3", RALPH_LOOP_FORMAT=fmt)
    result = run(tmp_path, *FAST, "--", str(LOOP), env=env)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    done = finished(tmp_path)
    assert [e["iteration"] for e in done] == [1, 2, 3]
    assert all(e["files_changed"] == 1 and e["outcome"] == "success" for e in done)
    assert all(e["tokens"] == (0 if fmt == "text" else 1200) for e in done)  # text mode reports no usage
    assert all(e["agent"] == "claude" for e in done)
    if fmt != "text":  # in text mode the loop's own chatter on the shared pipe may lead the reply
        assert [a["action"] for a in ledger(tmp_path)] == [f"Implemented step {n}." for n in (1, 2, 3)]


@pytest.mark.parametrize("fmt", ["json", "stream-json"])
def test_ralph_background_mode_is_read_from_the_tailed_logs_and_its_churn_is_not_progress(
        tmp_path: Path, fmt: str) -> None:
    (tmp_path / ".ralph").mkdir()
    env = loop_env("stuck", RALPH_LOOP_MAX="3", RALPH_LOOP_FORMAT=fmt)
    result = run(tmp_path, *FAST, "--no-progress", "5", "--", str(BACKGROUND_LOOP), env=env)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    done = finished(tmp_path)
    assert [e["iteration"] for e in done] == [1, 2, 3]
    assert all(e["files_changed"] == 0 and e["outcome"] == "noop" for e in done), done
    assert all(e["output_bytes"] > 300 for e in done), "the reply comes from .ralph/logs, not the pipes"
    actions = [a["action"] for a in ledger(tmp_path)]
    assert actions[0].startswith("Reviewed the parser module")


def test_a_plain_while_loop_without_timeout_works_too(tmp_path: Path) -> None:
    script = (f"export PATH={EXAMPLES / 'bin'}:$PATH; for i in 1 2 3; do "
              "claude --output-format json --append-system-prompt \"Loop #$i\" -p x; sleep 0.2; done")
    result = run(tmp_path, *FAST, "--", "bash", "-c", script, env=loop_env("progress"))
    assert result.returncode == 0
    assert [e["files_changed"] for e in finished(tmp_path)] == [1, 1, 1]


def test_a_call_through_a_shim_that_execs_under_the_same_name_is_still_found(tmp_path: Path) -> None:
    # A pyenv-style shim: a bash script named python3 that later execs the real python3. Both stages are
    # called `python3`; what the first look finds (bash running the shim) must not stick to the process.
    shims, real = tmp_path.parent / f"{tmp_path.name}-shims", tmp_path.parent / f"{tmp_path.name}-real"
    shims.mkdir()
    real.mkdir()
    (real / "python3").symlink_to(sys.executable)
    shim = shims / "python3"
    shim.write_text(f"#!/bin/bash\nsleep 0.4\nexec {real / 'python3'} \"$@\"\n")
    shim.chmod(0o755)
    script = (f"export PATH={shims}:$PATH; for i in 1 2; do "
              f"python3 {EXAMPLES / 'bin' / 'claude'} --output-format json --append-system-prompt \"Loop #$i\" -p x; "
              "sleep 0.2; done")
    result = run(tmp_path, *FAST, "--", "bash", "-c", script, env=loop_env("progress"))
    assert result.returncode == 0
    assert [e["files_changed"] for e in finished(tmp_path)] == [1, 1]


def test_version_and_help_calls_are_not_iterations(tmp_path: Path) -> None:
    script = (f"export PATH={EXAMPLES / 'bin'}:$PATH; claude --version; sleep 0.5; claude --help; sleep 0.5; "
              "claude --output-format json -p x; sleep 0.3")
    result = run(tmp_path, *FAST, "--", "bash", "-c", script, env=loop_env("progress", FAKE_CLAUDE_DELAY="0.4"))
    assert result.returncode == 0
    assert len(finished(tmp_path)) == 1


def test_marker_mode_cuts_iterations_at_matching_lines(tmp_path: Path) -> None:
    script = ("for i in 1 2 3 4; do echo \"=== iteration $i\"; sleep 0.2; echo working on $i; "
              "if [ $i -le 2 ]; then echo $i > file_$i.txt; fi; sleep 0.3; done")
    result = run(tmp_path, *FAST, "--iteration-marker", "^=== iteration", "--no-progress", "9", "--paraphrase", "0", "--",
                 "bash", "-c", script)
    assert result.returncode == 0
    done = finished(tmp_path)
    assert [e["iteration"] for e in done] == [1, 2, 3, 4]
    assert [e["files_changed"] for e in done] == [1, 1, 0, 0]


def test_a_new_untracked_file_and_a_commit_with_a_clean_tree_are_progress(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    git = "git -c user.name=t -c user.email=t@t"
    script = (f"echo '=== 1'; sleep 0.2; echo a > new.txt; sleep 0.4; echo '=== 2'; sleep 0.2; {git} add new.txt; "
              f"{git} commit -qm one; sleep 0.4; echo '=== 3'; sleep 0.4")
    result = run(tmp_path, *FAST, "--iteration-marker", "^=== ", "--no-progress", "9", "--paraphrase", "0", "--",
                 "bash", "-c", script)
    assert result.returncode == 0, result.stderr.decode()[-1500:]
    done = finished(tmp_path)
    assert [e["outcome"] for e in done] == ["success", "success", "noop"]
    assert done[1]["commits"] >= 1


def test_the_ledger_keeps_the_last_1000_attempts_across_runs(tmp_path: Path) -> None:
    state = state_dir_of(tmp_path)
    state.mkdir(parents=True)
    seeded = [attempt_dict(n, f"seeded {n}", "success", None, 10) for n in range(1, 1006)]
    (state / "ledger.json").write_text(dump_ledger("earlier runs", seeded))
    script = "echo '=== 1'; sleep 0.2; echo a > a.txt; sleep 0.3; echo '=== 2'; sleep 0.2; echo b > b.txt; sleep 0.3"
    result = run(tmp_path, *FAST, "--iteration-marker", "^=== ", "--no-progress", "9", "--paraphrase", "0", "--",
                 "bash", "-c", script)
    assert result.returncode == 0, result.stderr.decode()[-1500:]
    attempts = ledger(tmp_path)
    assert len(attempts) == 1000
    assert attempts[0]["action"] == "seeded 8", "the oldest go first"
    assert [a["outcome"] for a in attempts[-2:]] == ["success", "success"]
    assert not any(a["action"].startswith("seeded") for a in attempts[-2:])


def test_gitignored_build_output_is_not_progress(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("build/\n*.o\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    script = "echo '=== 1'; sleep 0.2; mkdir -p build node_modules/x; echo x > build/out.bin; echo y > a.o; " \
             "echo z > node_modules/x/i.js; sleep 0.4; echo '=== 2'; sleep 0.2"
    result = run(tmp_path, *FAST, "--iteration-marker", "^=== ", "--no-progress", "9", "--paraphrase", "0", "--",
                 "bash", "-c", script)
    assert result.returncode == 0
    assert [e["files_changed"] for e in finished(tmp_path)] == [0, 0]


def test_a_stream_json_line_over_1_mib_is_cut_for_analysis_but_kept_whole_in_the_log(tmp_path: Path) -> None:
    big = json.dumps({"type": "assistant", "message": {"content": [{"type": "text", "text": "x" * 2_500_000}]}})
    (tmp_path / "big.jsonl").write_text(big + "\n")
    result = run(tmp_path, *FAST, "--iteration-marker", "^START", "--", "bash", "-c",
                 "echo START; cat big.jsonl; echo 'Error: Failed to compile src/main.ts'")
    assert result.returncode == 0
    log = (state_dir_of(tmp_path) / "child.log").read_bytes()
    assert big.encode() in log
    done = finished(tmp_path)
    assert done and done[0]["errors"] == 1
    assert done[0]["output_bytes"] >= len(big)


def test_a_loop_that_exits_while_its_last_output_is_in_analysis_still_reports_that_iteration(
        tmp_path: Path) -> None:
    # Three MB of error lines take the analysis a while; the loop has exited long before it is done.
    lines = "".join(f"Error: step {n} failed in src/module_{n % 97}.ts\n" for n in range(60_000))
    (tmp_path / "errors.txt").write_text(lines)
    result = run(tmp_path, *FAST, "--iteration-marker", "^=== ", "--no-progress", "9", "--same-error", "9",
                 "--paraphrase", "0", "--", "bash", "-c", "echo '=== 1'; cat errors.txt")
    assert result.returncode == 0
    done = finished(tmp_path)
    assert [e["iteration"] for e in done] == [1]
    assert done[0]["errors"] > 0 and done[0]["output_bytes"] >= len(lines)


def test_the_call_cut_off_by_a_pause_is_not_the_trial(tmp_path: Path) -> None:
    """A hung call is paused by the stall rule; after the cooldown its timeout kills it: that is not the trial."""
    env = loop_env("hang", RALPH_LOOP_TIMEOUT="3", RALPH_LOOP_MAX="2")
    result = run(tmp_path, *FAST, "--stall", "1", "--cooldown", "0.05", "--max-opens", "2", "--", str(LOOP), env=env,
                 timeout=90)
    state_dir = state_dir_of(tmp_path)
    moves = [(h["from"], h["to"], h["trigger"]) for h in history(state_dir)]
    assert moves[0] == ("CLOSED", "OPEN", "stall"), moves
    cut = [e for e in events(state_dir, "iteration_finished") if e["cut_short"]]
    assert cut and cut[0]["iteration"] == 1
    assert result.returncode in (0, 2)
