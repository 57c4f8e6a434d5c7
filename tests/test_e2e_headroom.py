"""End to end, the waits the loop cannot avoid: the usage ceiling and API outages, with real loops calling
small sh fakes of Claude Code and Codex that print the agents' own formats (REFERENCE.md: `rate_limit_event`,
Codex's `token_count` in its session file, Claude's `api_retry`, Codex's `Reconnecting...`), under the real
supervisor."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import state_dir_of
from tests.helpers.supervise import events, history, start, supervise_argv, wait_for

pytestmark = pytest.mark.slow

FAST = ("--no-echo", "--log-format", "json", "--grace", "1", "--on-open", "stop", "--notify-desktop", "false",
        "--limit-wait-margin", "0")

RESULT = ('{"type":"result","subtype":"success","is_error":false,"result":"%s","session_id":"s",'
          '"total_cost_usd":0.01,"usage":{"input_tokens":10,"output_tokens":5}}')
INIT = '{"type":"system","subtype":"init","session_id":"s","tools":[]}'
RATE = ('{"type":"rate_limit_event","rate_limit_info":{"status":"%s","resetsAt":%s,"rateLimitType":"five_hour",'
        '"utilization":%s,"isUsingOverage":%s},"uuid":"u","session_id":"s"}')
RETRY = ('{"type":"system","subtype":"api_retry","attempt":%s,"max_retries":10,"retry_delay_ms":529,'
         '"error_status":null,"error":"unknown","session_id":"s","uuid":"u"}')


def fake(tmp_path: Path, name: str, body: str) -> Path:
    workspace = tmp_path / "work"
    workspace.mkdir(exist_ok=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    agent = bin_dir / name
    agent.write_text("#!/bin/sh\n" + body)
    agent.chmod(agent.stat().st_mode | stat.S_IXUSR)
    return workspace


def loop_of(call: str, calls: int) -> list[str]:
    return ["bash", "-c", f"for n in $(seq {calls}); do N=$n {call}; sleep 0.3; done"]


def env_of(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}", **extra}


def cli(workspace: Path, *args: str) -> str:
    return subprocess.run(supervise_argv(*args, "-w", str(workspace)), capture_output=True, text=True,
                          timeout=30).stdout


def finish(proc: subprocess.Popen[bytes], timeout: float = 90) -> int:
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def started_at(state_dir: Path, iteration: int) -> float:
    from ralph_supervisor.values import parse_time

    found = [e for e in events(state_dir, "iteration_started") if e.get("iteration") == iteration]
    assert found, f"iteration {iteration} never started"
    moment = parse_time(found[0]["ts"])
    assert moment is not None
    return moment


def test_a_five_hour_window_at_60_80_93_is_shown_at_80_frozen_after_93_and_resumed_at_the_reset(tmp_path: Path) -> None:
    workspace = fake(tmp_path, "claude", (
        'case $N in 1) u=60;; 2) u=80;; 3) u=93;; *) u=12;; esac\n'
        'if [ "$N" -eq 3 ]; then reset=$(( $(date +%s) + 15 )); else reset=$(( $(date +%s) + 3600 )); fi\n'
        f"echo '{INIT}'\n"
        f"printf '{RATE}\\n' allowed $reset $u false\n"
        'echo "step $N" > "step$N.txt"\n'
        f"printf '{RESULT}\\n' \"implemented step $N\"\n"))
    loop = loop_of("claude -p go --output-format stream-json --verbose", 4)
    proc = start(workspace, *FAST, "--usage-ceiling", "90", "--", *loop, env=env_of(tmp_path),
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state_dir = state_dir_of(workspace)
    try:
        wait_for(lambda: events(state_dir, "limit_wait_started"), timeout=40, what="the ceiling freeze")
        # The three views at once, while the freeze lasts (each is a process of its own: on a loaded machine one
        # after the other could outlast the wait).
        views = [subprocess.Popen(supervise_argv("status", *flags, "-w", str(workspace)), stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True) for flags in (["--json"], ["--tmux"], [])]
        as_json, tmux, text = (view.communicate(timeout=30)[0] for view in views)
        status = json.loads(as_json)
        assert status["state"] == "CLOSED" and status["limit_until"] and status["child"]["paused"] is True
        assert status["wait_kind"] == "ceiling"
        assert [(w["window"], w["utilization"]) for w in status["usage"]] == [("five_hour", 93.0)]
        assert tmux.startswith("ralph: LIMIT until ")
        assert "five_hour at 93" in text
        assert finish(proc) == 0  # the fourth call ran after the reset and the loop ended by itself
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert [e["iteration"] for e in events(state_dir, "usage_high")] == [2, 3]  # 60 is not shown, 80 is
    assert events(state_dir, "usage_high")[0]["windows"][0]["utilization"] == 80
    (ceiling,) = events(state_dir, "usage_ceiling")
    assert (ceiling["iteration"], ceiling["window"], ceiling["utilization"]) == (3, "five_hour", 93)
    (frozen,) = events(state_dir, "limit_wait_started")
    assert frozen["kind"] == "ceiling" and frozen["iteration"] == 3 and "five_hour at 93 %" in frozen["reason"]
    from ralph_supervisor.values import parse_time

    reset = parse_time(ceiling["resets_at"])
    assert reset is not None and started_at(state_dir, 4) >= reset  # not before the window reset
    assert started_at(state_dir, 4) - reset < 10
    assert [e["why"] for e in events(state_dir, "limit_wait_ended")] == ["the limit has reset"]
    assert history(state_dir) == []  # nothing counted, never an open
    assert (workspace / "step4.txt").exists()


def test_no_overage_freezes_after_a_call_that_spends_paid_overage(tmp_path: Path) -> None:
    workspace = fake(tmp_path, "claude", (
        'reset=$(( $(date +%s) + 10 ))\n'  # still ahead when the call is judged, however loaded the machine
        f"echo '{INIT}'\n"
        'if [ "$N" -eq 1 ]; then ' f"printf '{RATE}\\n' allowed_warning $reset 100 true; fi\n"
        'echo "step $N" > "step$N.txt"\n'
        f"printf '{RESULT}\\n' \"implemented step $N\"\n"))
    loop = loop_of("claude -p go --output-format stream-json --verbose", 2)
    proc = start(workspace, *FAST, "--no-overage", "--", *loop, env=env_of(tmp_path),
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert finish(proc) == 0
    state_dir = state_dir_of(workspace)
    (ceiling,) = events(state_dir, "usage_ceiling")
    assert ceiling["overage"] is True and ceiling["iteration"] == 1
    (frozen,) = events(state_dir, "limit_wait_started")
    assert frozen["kind"] == "ceiling" and "paid overage" in frozen["reason"]
    from ralph_supervisor.values import parse_time

    assert started_at(state_dir, 2) >= (parse_time(ceiling["resets_at"]) or 0)
    assert history(state_dir) == []


def test_codex_figures_come_from_its_session_file_matched_by_thread_id(tmp_path: Path) -> None:
    codex_home = tmp_path / "codex-home"
    workspace = fake(tmp_path, "codex", (
        'id="0199a213-81c0-7800-8aa1-bbab2a03$N$N$N$N"\n'
        'if [ "$N" -eq 1 ]; then u=95.0; reset=$(( $(date +%s) + 5 )); else u=10.0; reset=$(( $(date +%s) + 3600 )); fi\n'
        'd="$CODEX_HOME/sessions/$(date -u +%Y/%m/%d)"; mkdir -p "$d"\n'
        'printf \'{"type":"event_msg","payload":{"type":"token_count","info":null,"rate_limits":{"primary":'
        '{"used_percent":%s,"window_minutes":300,"resets_at":%s},"secondary":{"used_percent":80.0,'
        '"window_minutes":10080,"resets_at":%s}}}}\\n\' $u $reset $(( $(date +%s) + 86400 ))'
        ' > "$d/rollout-$(date -u +%Y-%m-%dT%H-%M-%S)-$id.jsonl"\n'
        'echo \'{"type":"thread.started","thread_id":"\'$id\'"}\'\n'
        "echo '{\"type\":\"turn.started\"}'\n"
        'echo "step $N" > "step$N.txt"\n'
        "echo '{\"type\":\"item.completed\",\"item\":{\"id\":\"item_0\",\"type\":\"agent_message\",\"text\":\"did a step\"}}'\n"
        "echo '{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":10,\"cached_input_tokens\":0,\"output_tokens\":5}}'\n"))
    loop = loop_of("codex exec --json go", 2)
    proc = start(workspace, *FAST, "--usage-ceiling", "90", "--", *loop,
                 env=env_of(tmp_path, CODEX_HOME=str(codex_home)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert finish(proc) == 0
    state_dir = state_dir_of(workspace)
    (ceiling,) = events(state_dir, "usage_ceiling")
    assert (ceiling["iteration"], ceiling["window"], ceiling["utilization"]) == (1, "five_hour", 95)
    (high,) = events(state_dir, "usage_high")
    assert high["source"].startswith(str(codex_home / "sessions")) and high["source"].endswith("1111.jsonl")
    assert events(state_dir, "usage_unreported") == []
    assert history(state_dir) == []
    report = cli(workspace, "report")
    assert "USAGE seven_day at 80 %" in report  # still full until its reset: the report shows it
    assert "USAGE five_hour" not in report  # that one has reset


def test_an_agent_that_reports_no_windows_keeps_todays_behaviour_said_once(tmp_path: Path) -> None:
    workspace = fake(tmp_path, "claude", ('echo "step $N" > "step$N.txt"\n'
                                          f"printf '{RESULT}\\n' \"implemented step $N\"\n"))
    proc = start(workspace, *FAST, "--usage-ceiling", "90", "--",
                 *loop_of("claude -p go --output-format json", 3), env=env_of(tmp_path),
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert finish(proc) == 0
    state_dir = state_dir_of(workspace)
    (said,) = events(state_dir, "usage_unreported")
    assert "claude reports no usage windows" in said["detail"]
    assert events(state_dir, "limit_wait_started") == [] and len(events(state_dir, "iteration_finished")) == 3


def test_claude_retrying_an_unreachable_api_is_an_outage_not_failures_nor_a_stall(tmp_path: Path) -> None:
    """Two calls end in their retries (silent for longer than --stall between them), a third reaches the API:
    one outage from the first retry to the third call, no rule counts them, the breaker stays CLOSED."""
    workspace = fake(tmp_path, "claude", (
        f"echo '{INIT}'\n"
        'if [ "$N" -le 2 ]; then\n'
        f"  printf '{RETRY}\\n' 1; sleep 2.5; printf '{RETRY}\\n' 2\n"
        '  echo \'{"type":"result","subtype":"success","is_error":true,"api_error_status":null,'
        '"result":"API Error: Connection error.","session_id":"s","total_cost_usd":0,'
        '"usage":{"input_tokens":0,"output_tokens":0}}\'\n'
        '  exit 1\n'
        'fi\n'
        'echo "step $N" > "step$N.txt"\n'
        f"printf '{RESULT}\\n' \"implemented step $N\"\n"))
    proc = start(workspace, *FAST, "--max-failures", "1", "--stall", "1.5", "--no-progress", "1", "--",
                 *loop_of("claude -p go --output-format stream-json --verbose", 3), env=env_of(tmp_path),
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert finish(proc) == 0, "the loop ran its three calls"
    state_dir = state_dir_of(workspace)
    assert history(state_dir) == []  # neither failures, nor no-progress, nor a stall
    finished = events(state_dir, "iteration_finished")
    assert [(e["outage"], e["failed"]) for e in finished[:2]] == [(True, False), (True, False)]
    assert "api_retry 2/10: unknown" in finished[0]["outage_message"] or "Connection error" in finished[0]["outage_message"]
    assert "outage" not in finished[2] and not finished[2]["failed"]
    (began,) = events(state_dir, "outage_started")
    assert began["iteration"] == 1 and began["message"] == "api_retry 1/10: unknown"
    (ended,) = events(state_dir, "outage_ended")
    assert ended["seconds"] > 5 and ended["why"] in ("the API answered", "a call reached the API")
    assert ended["iteration"] in (2, 3)  # seen live, the answer may come before call 3 is known as a call
    ledger = json.loads((state_dir / "ledger.json").read_text())
    assert [a["outcome"] for a in ledger["attempts"]] == ["noop", "noop", "success"]
    report = cli(workspace, "report")
    assert "2 met an API outage" in report and "1 API outage waited out, the longest" in report
    assert "OUTAGE since" not in report  # it is over
    assert "API outage" in (state_dir / "report.html").read_text()


def test_codex_waiting_for_the_network_for_ever_is_frozen_backed_off_and_final_after_three(tmp_path: Path) -> None:
    """The real Codex without network prints `Reconnecting... waiting for network` without end: past
    --outage-max the tree is frozen (OUTAGE in status and tmux), `resume` lets the loop try again, and when it
    is still out after three back-offs the open is final with trigger `outage`."""
    workspace = fake(tmp_path, "codex", (
        'echo \'{"type":"thread.started","thread_id":"0199a213-81c0-7800-8aa1-bbab2a035a53"}\'\n'
        "echo '{\"type\":\"turn.started\"}'\n"
        "while :; do echo '{\"type\":\"error\",\"message\":\"Reconnecting... waiting for network (Connection failed: "
        "error sending request)\"}'; sleep 0.2; done\n"))
    proc = start(workspace, *FAST, "--outage-max", "0.04", "--stall", "1", "--",
                 *loop_of("codex exec --json go", 1), env=env_of(tmp_path),
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state_dir = state_dir_of(workspace)
    try:
        wait_for(lambda: events(state_dir, "outage_started"), timeout=30, what="the outage")
        for n in range(1, 4):
            wait_for(lambda: len(events(state_dir, "limit_wait_started")) >= n, timeout=30, what=f"back-off {n}")
            status: dict[str, Any] = json.loads(cli(workspace, "status", "--json"))
            assert status["state"] == "CLOSED" and status["wait_kind"] == "outage" and status["child"]["paused"]
            assert status["outage_since"] and "waiting for network" in status["outage_message"]
            assert cli(workspace, "status", "--tmux").startswith("ralph: OUTAGE since ")
            assert "resumed" in cli(workspace, "resume")
        assert finish(proc, 60) == 2  # still out after three back-offs: final
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    backoffs = events(state_dir, "limit_wait_started")
    assert [e["kind"] for e in backoffs] == ["outage"] * 3
    assert "waiting for network" in backoffs[0]["reason"] and "(1 of 3)" in backoffs[0]["reason"]
    assert 290 <= _seconds(backoffs[0]) <= 310 and 590 <= _seconds(backoffs[1]) <= 610
    (opened,) = history(state_dir)
    assert opened["trigger"] == "outage" and opened["to"] == "OPEN"
    assert "through 3 back-offs" in opened["reason"]
    assert json.loads((state_dir / "state.json").read_text())["final"] is True
    assert len(events(state_dir, "outage_started")) == 1  # one outage, one notice
    assert "OPEN outage" in cli(workspace, "report") or "outage" in cli(workspace, "report")


def _seconds(event: dict[str, Any]) -> float:
    from ralph_supervisor.values import parse_time

    return (parse_time(event["until"]) or 0) - (parse_time(event["ts"]) or 0)
