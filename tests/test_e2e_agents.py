"""End to end, for Codex, Gemini CLI, opencode, Cursor's agent and Amp: a stuck loop, a same-error loop, a blocked
loop and a token budget loop, each a real Ralph-style loop calling the agent's fake CLI (examples/bin) under the
real supervisor, with no flag saying which agent it is. The loops of an agent run at the same time (their
thresholds count iterations, not seconds), so the whole file costs about what one agent's loops cost one after
the other. Amp has no blocked loop: its wording for an authentication failure is published nowhere we could cite
(tests/fixtures/agent/amp/SOURCES.md), so its fake does not play one."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.helpers.supervise import LOOP, events, history, start
from tests.helpers import state_dir_of

FAST = ("--no-echo", "--log-format", "json", "--grace", "2", "--on-open", "stop")
CASES = {  # case: (scenario, supervisor flags)
    "stuck": ("stuck", ("--no-progress", "2", "--paraphrase", "0")),
    "same-error": ("same-error", ("--no-progress", "20", "--paraphrase", "0", "--same-error", "3")),
    "blocked": ("auth", ()),
    "budget": ("progress", ("--token-budget", "2000", "--cost-budget", "1")),
}
FORMATS = {"codex": "json", "gemini": "stream-json", "opencode": "json", "cursor": "stream-json", "amp": "json"}
COST = {"codex": None, "gemini": None, "opencode": 0.01, "cursor": None, "amp": None}
SKIPPED_CASES = {"amp": {"blocked"}}


def loop_env(agent: str, scenario: str) -> dict[str, str]:
    return {"RALPH_LOOP_AGENT": agent, "RALPH_LOOP_FORMAT": FORMATS[agent], "FAKE_AGENT_SCENARIO": scenario,
            "FAKE_AGENT_DELAY": "0.5", "RALPH_LOOP_PAUSE": "0.2", "RALPH_LOOP_MAX": "12"}


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["codex", "gemini", "opencode", "cursor", "amp"])
def test_stuck_same_error_blocked_and_budget_loops_open_the_breaker_for_each_agent(tmp_path: Path, agent: str) -> None:
    runs: dict[str, tuple[Path, subprocess.Popen[bytes]]] = {}
    cases = {case: how for case, how in CASES.items() if case not in SKIPPED_CASES.get(agent, set())}
    for case, (scenario, flags) in cases.items():
        workspace = tmp_path / case
        workspace.mkdir()
        runs[case] = workspace, start(workspace, *FAST, *flags, "--", str(LOOP), env=loop_env(agent, scenario))
    results = {}
    for case, (workspace, proc) in runs.items():
        _, err = proc.communicate(timeout=120)
        state_dir = state_dir_of(workspace)
        results[case] = (proc.returncode, history(state_dir), events(state_dir, "iteration_finished"), state_dir,
                         err.decode(errors="replace")[-2000:])

    def opened(case: str) -> dict:
        code, moves, finished, _, err = results[case]
        assert code == 2, f"{case}: exit {code}\n{err}"
        assert finished and all(e["agent"] == agent for e in finished), (case, finished)
        return moves[-1]

    stuck = opened("stuck")
    assert (stuck["trigger"], stuck["iteration"]) == ("no-progress", 2)
    for e in results["stuck"][2]:
        assert e["tokens"] == 1200 and e["cost_usd"] == COST[agent] and e["outcome"] == "noop" and not e["failed"]

    same = opened("same-error")
    assert (same["trigger"], same["iteration"]) == ("same-error", 3)
    ledger = json.loads((results["same-error"][3] / "ledger.json").read_text())["attempts"]
    assert all("Failed to compile src/main.ts" in (a["error"] or "") for a in ledger)

    if "blocked" in cases:
        blocked = opened("blocked")
        assert (blocked["trigger"], blocked["iteration"]) == ("blocked", 1)
        assert results["blocked"][2][0]["blocked"] and results["blocked"][2][0]["failed"]
    assert set(results) == set(cases)
    for finished in (results[case][2] for case in cases):
        assert all(e.get("agent") == agent for e in finished)

    budget = opened("budget")
    assert (budget["trigger"], budget["iteration"]) == ("token-budget", 2)
    assert [e["tokens"] for e in results["budget"][2]] == [1200, 1200]
    unjudged = events(results["budget"][3], "cost_unknown")
    if COST[agent] is None:  # one warning for the whole run, naming the agent: the dollar budget cannot be judged
        assert [w["agent"] for w in unjudged] == [agent]
    else:
        assert unjudged == []
