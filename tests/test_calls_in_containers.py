"""End to end: an agent the loop runs in a container (`docker run … IMAGE claude -p …`) is a call whose agent
lives outside the supervised tree (a fake engine, started apart, runs it and streams its reply back to the
client). The call is the client's lifetime, its files are its own, and a pause, resume and stop reach the
container through its engine."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ralph_supervisor.process.frozen import held
from ralph_supervisor.process.linux import read_stat
from tests.helpers import REPO
from tests.helpers import state_dir_of
from tests.helpers.supervise import events, history, run, start, wait_for

FAST = ("--no-echo", "--log-format", "json", "--grace", "2", "--no-progress", "2", "--paraphrase", "0")
AGENT = r"""#!/bin/sh
n=$(cat .ralph/count 2>/dev/null || echo 0); n=$((n + 1)); echo $n > .ralph/count
echo $$ > .ralph/agent.pid
echo "step $n" > "step_$n.txt"
if [ -n "$AGENT_SPIN" ]; then end=$(($(date +%s) + AGENT_SPIN)); while [ "$(date +%s)" -lt "$end" ]; do :; done; fi
sleep "${AGENT_WORK:-0.5}"
echo '{"type":"result","subtype":"success","is_error":false,"result":"did step '$n'","usage":{"input_tokens":1,"output_tokens":1}}'
"""


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The fake engine, apart from any supervisor; its `docker` client and the agent its image holds."""
    image = tmp_path / "image"
    image.mkdir()
    (image / "claude").write_text(AGENT)
    (image / "claude").chmod(0o755)
    client = tmp_path / "client"
    client.mkdir()
    shutil.copy(REPO / "tests" / "helpers" / "fake_docker.py", client / "docker")
    (client / "docker").chmod(0o755)
    sock = tmp_path / "engine.sock"
    daemon = subprocess.Popen([sys.executable, str(REPO / "tests" / "helpers" / "fake_docker.py"), "daemon", str(sock)],
                              env={**os.environ, "FAKE_DOCKER_PATH": str(image), "AGENT_WORK": "0.5"},
                              stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert daemon.stdout is not None and daemon.stdout.readline().strip() == b"ready"
    try:
        yield {"PATH": f"{client}:{os.environ['PATH']}", "FAKE_DOCKER_SOCKET": str(sock)}
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)


def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / ".ralph").mkdir(parents=True)
    (ws / ".gitignore").write_text(".ralph/\n")
    return ws


@pytest.mark.slow
def test_calls_in_a_container_are_iterations_with_the_files_their_agent_writes(tmp_path: Path, engine) -> None:
    ws = workspace(tmp_path)
    script = ("for i in 1 2 3; do docker run --rm --name box$i -v \"$PWD:$PWD\" -w \"$PWD\" agent-image:1 "
              "claude -p go --output-format json; sleep 0.3; done")
    result = run(ws, *FAST, "--", "bash", "-c", script, env=engine, timeout=90)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    done = events(state_dir_of(ws), "iteration_finished")
    assert [e["iteration"] for e in done] == [1, 2, 3]
    assert [e["paths"] for e in done] == [["step_1.txt"], ["step_2.txt"], ["step_3.txt"]]
    assert [e["reply"] for e in done] == ["did step 1", "did step 2", "did step 3"]
    assert all(e["agent"] == "claude" for e in done)
    assert history(state_dir_of(ws)) == []


@pytest.mark.slow
def test_a_pause_resume_and_stop_reach_the_container_through_its_engine(tmp_path: Path, engine) -> None:
    ws = workspace(tmp_path)
    env = {**engine}
    script = ("i=0; while :; do i=$((i+1)); docker run --rm --name box$i -e AGENT_WORK=30 -w \"$PWD\" "
              "agent-image:1 claude -p go --output-format json; sleep 0.2; done")
    proc = start(ws, *FAST, "--no-progress", "100", "--", "bash", "-c", script, env=env)
    agent_pid = ws / ".ralph" / "agent.pid"
    try:
        wait_for(lambda: agent_pid.exists() and events(state_dir_of(ws), "iteration_started"), timeout=30, what="a call")
        agent = int(agent_pid.read_text())
        assert run(ws, "pause", "-w", str(ws)).returncode == 0
        wait_for(lambda: held(agent), timeout=10,
                 what="the agent in the container frozen")
        assert run(ws, "resume", "-w", str(ws)).returncode == 0
        wait_for(lambda: (s := read_stat(agent)) is not None and not held(agent), timeout=10,
                 what="the agent thawed")
        assert run(ws, "stop", "-w", str(ws)).returncode == 0
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    wait_for(lambda: (s := read_stat(agent)) is None or not s.alive, timeout=10, what="the agent gone with the stop")
    actions = [e["action"] for e in events(state_dir_of(ws), "container_action")]
    assert actions[:2] == ["pause", "unpause"] and "term" in actions[2:], actions
    assert events(state_dir_of(ws), "tree_stopped")[-1]["survivors"] == 0


@pytest.mark.slow
def test_a_container_call_that_cannot_be_named_is_observed_and_said_to_be_uncontrolled(tmp_path: Path, engine) -> None:
    ws = workspace(tmp_path)
    script = "docker run --rm -w \"$PWD\" agent-image:1 claude -p go --output-format json"
    result = run(ws, *FAST, "--", "bash", "-c", script, env=engine, timeout=60)
    assert result.returncode == 0
    assert [e["paths"] for e in events(state_dir_of(ws), "iteration_finished")] == [["step_1.txt"]]
    assert len(events(state_dir_of(ws), "container_call_uncontrolled")) == 1


@pytest.mark.slow
def test_the_stall_rule_reads_the_cpu_of_the_calls_container_not_only_its_client(tmp_path: Path, engine) -> None:
    """A containerised agent that works in silence (no output, no file after its first) is busy, not stalled: its CPU is read
    from its container's processes, found through the engine. One that sleeps in silence is stalled."""
    ws = workspace(tmp_path)
    busy = 'docker run --rm --name busy -e AGENT_SPIN=5 -w "$PWD" agent-image:1 claude -p go --output-format json'

    result = run(ws, *FAST, "--stall", "2", "--on-open", "stop", "--", "bash", "-c", busy, env=engine, timeout=60)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert history(state_dir_of(ws)) == [], "a container working in silence is not a stall"
    ws2 = workspace(tmp_path / "second")
    idle = 'docker run --rm --name idle -e AGENT_WORK=30 -w "$PWD" agent-image:1 claude -p go'
    result = run(ws2, *FAST, "--stall", "2", "--on-open", "stop", "--", "bash", "-c", idle, env=engine, timeout=60)
    assert result.returncode == 2
    assert [h["trigger"] for h in history(state_dir_of(ws2)) if h["to"] == "OPEN"] == ["stall"]
