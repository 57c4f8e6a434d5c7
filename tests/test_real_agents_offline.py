"""The real Codex CLI (0.171.0, from the npm registry: scripts/setup.d/45-agent-clis.sh) run here without a
network, under the real supervisor: its own `Reconnecting... waiting for network` reports are an API outage,
not a stuck call nor failures, and past --outage-max the tree is frozen for a back-off. Skipped, saying why,
where the CLI could not be installed."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO, state_dir_of
from tests.helpers.supervise import events, history, start, supervise_argv, wait_for

pytestmark = pytest.mark.slow

CODEX_BIN = REPO / ".agent-clis" / "node_modules" / ".bin"


def test_the_real_codex_without_network_is_an_outage_frozen_after_outage_max(tmp_path: Path) -> None:
    if not (CODEX_BIN / "codex").exists():
        pytest.skip(f"the real Codex CLI is not installed in {CODEX_BIN} (scripts/setup.d/45-agent-clis.sh "
                    "installs @openai/codex 0.171.0 from the npm registry)")
    workspace = tmp_path / "work"
    workspace.mkdir()
    subprocess.run(["git", "init", "-q", str(workspace)], check=True, timeout=30)
    home = tmp_path / "codex-home"
    home.mkdir()
    env = {"PATH": f"{CODEX_BIN}{os.pathsep}{os.environ['PATH']}", "CODEX_HOME": str(home),
           "OPENAI_API_KEY": "sk-offline-test"}
    loop = ["bash", "-c", "for n in 1 2; do codex exec --json 'say hi' </dev/null; sleep 1; done"]
    proc = start(workspace, "--no-echo", "--log-format", "json", "--grace", "1", "--notify-desktop", "false",
                 "--outage-max", "0.05", "--stall", "2", "--", *loop, env=env,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state_dir = state_dir_of(workspace)
    try:
        (began,) = wait_for(lambda: events(state_dir, "outage_started"), timeout=90, what="the outage")
        assert began["message"].startswith("Reconnecting... ")
        (frozen,) = wait_for(lambda: events(state_dir, "limit_wait_started"), timeout=90, what="the back-off")
        assert frozen["kind"] == "outage" and "Reconnecting..." in frozen["reason"]
        status = json.loads(subprocess.run(supervise_argv("status", "--json", "-w", str(workspace)),
                                           capture_output=True, text=True, timeout=30).stdout)
        assert status["state"] == "CLOSED" and status["child"]["paused"] and status["outage_since"]
        assert history(state_dir) == []  # no stall, no failure: the API is out of reach
        subprocess.run(supervise_argv("stop", "-w", str(workspace)), capture_output=True, timeout=60)
        assert proc.wait(timeout=60) == 0  # stopped on request
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert list(home.glob("sessions/*/*/*/rollout-*.jsonl"))  # where its usage figures would be read from
