"""End to end: no agent call starts before the one before it is judged. A shimmed call waits in its shim for
the verdict; a call the loop starts by absolute path (sampled) is frozen from the moment it is seen until the
verdict is in. So a cap is never overrun by calls that raced ahead of the judgement."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers import executable, state_dir_of
from tests.helpers.supervise import events, history, run

FAST = ("--no-echo", "--log-format", "json", "--grace", "2", "--on-open", "stop", "--no-progress", "1000",
        "--paraphrase", "0")
# Each call costs $0.01 and takes `AGENT_WORK` seconds.
PAID_AGENT = r"""#!/bin/sh
sleep "${AGENT_WORK:-0}"
echo '{"type":"result","subtype":"success","is_error":false,"result":"did a step","total_cost_usd":0.01,"usage":{"input_tokens":1,"output_tokens":1}}'
"""


def paid_agent(tmp_path: Path) -> Path:
    return executable(tmp_path / "bin", "claude", PAID_AGENT)


def spent_and_started(ws: Path) -> tuple[float, list[int], dict]:
    state = json.loads((state_dir_of(ws) / "state.json").read_text())
    started = [e["iteration"] for e in events(state_dir_of(ws), "iteration_started")]
    return state["cost_used"], started, history(state_dir_of(ws))[-1]


@pytest.mark.slow
def test_calls_of_milliseconds_in_a_tight_loop_never_overrun_the_dollar_budget(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    agent = paid_agent(tmp_path)
    result = run(ws, *FAST, "--cost-budget", "0.025", "--", "bash", "-c", "while :; do claude -p go --output-format json; done",
                 env={"PATH": f"{agent.parent}:{os.environ['PATH']}"}, timeout=60)
    assert result.returncode == 2, result.stderr.decode()[-2000:]
    spent, started, opened = spent_and_started(ws)
    assert opened["trigger"] == "cost-budget" and opened["iteration"] == 3
    assert started == [1, 2, 3], "the shims waited for each verdict: no call began before the open"
    assert spent == pytest.approx(0.03)
    assert json.loads((state_dir_of(ws) / "daily-spend.json").read_text())["cost_usd"] == pytest.approx(0.03)


@pytest.mark.slow
def test_a_sampled_call_seen_before_the_verdict_is_frozen_until_it_then_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    agent = paid_agent(tmp_path)
    result = run(ws, *FAST, "--cost-budget", "0.025", "--", "bash", "-c", f"while :; do {agent} -p go; done",
                 env={"AGENT_WORK": "0.6"}, timeout=60)
    assert result.returncode == 2, result.stderr.decode()[-2000:]
    spent, started, opened = spent_and_started(ws)
    assert opened["trigger"] == "cost-budget" and opened["iteration"] == 3
    assert started == [1, 2, 3], started
    assert spent == pytest.approx(0.03)
    assert events(state_dir_of(ws), "agent_call_gated"), "the calls after the first were seen while a verdict was due"
