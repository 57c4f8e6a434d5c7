"""Stress: the hand-overs between the supervisor's threads, driven hard, with every count checked.

A loop makes calls of a few milliseconds as fast as the shims let it, each writing one new file (a file event
on the watcher's thread, a snapshot on the keeper's, a call's end on the exits thread, its output through the
analysis thread), while a pause lands in the middle of the snapshots being taken and a stop ends the run. The
supervisor runs under `PYTHONDEVMODE=1` (asyncio's debug mode, ResourceWarnings, unawaited coroutines shown):
anything it prints that is not one of its own JSON events is a fault. Bounded in calls and in seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from ralph_supervisor.files.ledger_json import MAX_ATTEMPTS
from tests.helpers import executable, state_dir_of
from tests.helpers.fault_procs import cli, status
from tests.helpers.supervise import events, history, start, wait_for

CALLS_BEFORE_PAUSE = 1000
CALLS_BEFORE_STOP = 3000
"""About a minute of calls on a quiet 2-core machine (some 50 a second); the run is cut by time as well
(`SECONDS_BOUND`), whichever comes first, so a loaded machine makes fewer."""
SECONDS_BOUND = 150.0

# One new file per call, its number counted in .ralph/ (ignored: the loop's bookkeeping is no progress).
QUICK_AGENT = r"""#!/bin/sh
n=$(cat .ralph/count 2>/dev/null || echo 0); n=$((n + 1)); echo $n > .ralph/count
echo "step $n" > "work/step_$n.txt"
echo '{"type":"result","subtype":"success","is_error":false,"result":"did step '$n'","usage":{"input_tokens":1,"output_tokens":1}}'
"""

DEV_MODE_NOISE = ("Executing <",)
"""asyncio's debug mode reports a slow callback ("Executing <Handle ...> took 0.12 seconds"): on a loaded
machine that is the machine, not a fault of the hand-overs."""


def _not_ours(stderr: str) -> list[str]:
    """Lines on stderr that are not the supervisor's JSON events (a traceback, a warning, asyncio's complaints)."""
    strange = []
    for line in stderr.splitlines():
        if not line.strip() or any(noise in line for noise in DEV_MODE_NOISE):
            continue
        try:
            json.loads(line)
        except ValueError:
            strange.append(line)
    return strange


def _reply_bytes(n: int) -> int:
    """What QUICK_AGENT prints at its call n (its one JSON line and the newline)."""
    line = ('{"type":"result","subtype":"success","is_error":false,"result":"did step %d",'
            '"usage":{"input_tokens":1,"output_tokens":1}}\n' % n)
    return len(line.encode())


def _iterations_finished(state_dir: Path) -> int:
    return len(events(state_dir, "iteration_finished"))


@pytest.mark.slow
@pytest.mark.timeout(SECONDS_BOUND + 120)
def test_thousands_of_short_calls_a_pause_among_the_snapshots_and_a_stop_keep_every_count(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / ".ralph").mkdir(parents=True)
    (ws / "work").mkdir()
    for i in range(300):  # enough files that each snapshot takes a moment: the pause lands among them
        (ws / "src" / f"m{i // 50}").mkdir(parents=True, exist_ok=True)
        (ws / "src" / f"m{i // 50}" / f"f{i}.py").write_text(f"x = {i}\n" * 20)
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    bin_dir = executable(tmp_path / "bin", "claude", QUICK_AGENT).parent
    script = "i=0; while [ $i -lt 100000 ]; do i=$((i + 1)); claude -p go --output-format json; done"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONDEVMODE": "1"}
    proc = start(ws, "--no-echo", "--log-format", "json", "--grace", "3", "--no-progress", "100000",
                 "--paraphrase", "0", "--output-decline", "0", "--stall", "600", "--", "bash", "-c", script, env=env)
    state_dir = state_dir_of(ws)
    halfway, deadline = time.monotonic() + SECONDS_BOUND / 2, time.monotonic() + SECONDS_BOUND
    try:
        wait_for(lambda: _iterations_finished(state_dir) >= CALLS_BEFORE_PAUSE or time.monotonic() > halfway,
                 timeout=SECONDS_BOUND, what="the first calls", interval=0.5)
        # A pause while the keeper is taking one snapshot after another; then a resume, and on.
        taken_before = len(events(state_dir, "snapshot_taken"))
        assert cli(ws, "pause").returncode == 0
        paused = status(ws)
        assert paused["child"]["paused"] is True and paused["state"] == "OPEN"
        count_at_pause = (ws / ".ralph" / "count").read_text()
        time.sleep(1.0)
        assert (ws / ".ralph" / "count").read_text() == count_at_pause, "no call ran while the tree was frozen"
        assert cli(ws, "resume").returncode == 0
        wait_for(lambda: _iterations_finished(state_dir) >= CALLS_BEFORE_STOP or time.monotonic() > deadline,
                 timeout=SECONDS_BOUND, what="the calls after the resume", interval=0.5)
        stopped = cli(ws, "stop", timeout=60)
        assert stopped.returncode == 0, stopped.stderr
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    assert code == 0, stderr[-3000:]
    assert _not_ours(stderr) == [], "nothing but our events on stderr under PYTHONDEVMODE"

    calls_made = int((ws / ".ralph" / "count").read_text())
    finished = events(state_dir, "iteration_finished")
    numbers = [e["iteration"] for e in finished]
    assert calls_made >= min(CALLS_BEFORE_PAUSE, 200), f"a stress needs calls: only {calls_made} were made"
    assert numbers == list(range(1, len(numbers) + 1)), "every call judged once, in order"
    assert len(numbers) == calls_made, f"{calls_made} calls made, {len(numbers)} judged"
    cut = [e for e in finished if e["cut_short"]]
    assert len(cut) <= 2, "only the calls the pause and the stop caught running are cut short"
    whole = [e for e in finished if not e["cut_short"]]
    assert all(e["files_changed"] == 1 for e in whole), \
        f"each call its own one file: {[(e['iteration'], e['files_changed']) for e in whole if e['files_changed'] != 1][:10]}"
    assert sum(e["files_changed"] for e in finished) == calls_made, "every file event landed in exactly one call"
    wrong_bytes = [(e["iteration"], e["output_bytes"]) for e in whole if e["output_bytes"] != _reply_bytes(e["iteration"])]
    assert wrong_bytes == [], f"each call's output its own, through the analysis thread: {wrong_bytes[:10]}"
    assert len(list((ws / "work").iterdir())) == calls_made
    ledger = json.loads((state_dir / "ledger.json").read_text())
    attempts = [a["iteration"] for a in ledger["attempts"]]
    assert attempts == numbers[-len(attempts):] and len(attempts) == min(len(numbers), MAX_ATTEMPTS), \
        "one ledger attempt per judged call (the last 1,000 kept)"
    transitions = [(h["from"], h["to"]) for h in history(state_dir)]
    assert transitions[:3] == [("CLOSED", "OPEN"), ("OPEN", "HALF_OPEN"), ("HALF_OPEN", "CLOSED")], \
        "the pause, the resume, and the trial that closed it"
    assert history(state_dir)[0]["trigger"] == "manual"
    snapshots = events(state_dir, "snapshot_taken")
    merged = events(state_dir, "snapshot_merged")
    assert len(snapshots) > taken_before, "snapshots went on after the resume"
    ended = {e["iteration"] for e in snapshots if e.get("kind") == "iteration"} | {e["iteration"] for e in merged}
    missing = [n for n in numbers if n not in ended]
    assert len(missing) <= 1, f"every call's end snapshotted or merged into the next: missing {missing[:10]}"
    for failure in ("tick_failed", "supervisor_task_failed", "call_report_failed", "snapshot_failed",
                    "agent_call_parallel", "supervisor_failed"):
        assert events(state_dir, failure) == [], failure
    assert [e for e in events(state_dir, "tree_stopped")][-1]["survivors"] == 0
