"""End to end: agent calls as the real supervisor observes them, over real loops with real sh agents."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ralph_supervisor.process.frozen import held
from tests.helpers.supervise import events, history, run, start, supervise_argv, wait_for
from tests.helpers import executable, state_dir_of

FAST = ("--no-echo", "--log-format", "json", "--grace", "2")

# A call of a few milliseconds: one new file at its very start, a JSON result, exit 3 on every 25th call.
QUICK_AGENT = r"""#!/bin/sh
case "$1" in --version|--help) echo "quick 1.0"; exit 0 ;; esac
n=$(cat .ralph/count 2>/dev/null || echo 0); n=$((n + 1)); echo $n > .ralph/count
echo "step $n" > "step_$n.txt"
echo '{"type":"result","subtype":"success","is_error":false,"result":"did step '$n'","usage":{"input_tokens":1,"output_tokens":1}}'
[ $((n % 25)) -eq 0 ] && exit 3
exit 0
"""
CRASHING_AGENT = r"""#!/bin/sh
sleep 0.02
echo "Error: Claude Code cannot be launched inside another Claude Code session." >&2
exit 1
"""
SLOW_AGENT = r"""#!/bin/bash
trap 'echo "agent TERM $EPOCHREALTIME" >> "$LOG"; exit 143' TERM
echo "agent start $EPOCHREALTIME" >> "$LOG"
echo "working" > "work_$$.txt"
sleep 30 & wait
"""


def agent(tmp_path: Path, text: str, name: str = "claude") -> Path:
    return executable(tmp_path / "bin", name, text).parent


def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / ".ralph").mkdir(parents=True)
    return ws


def path_env(folder: Path, **extra: str) -> dict[str, str]:
    return {"PATH": f"{folder}:{os.environ['PATH']}", **extra}


def finished(ws: Path) -> list[dict]:
    return events(state_dir_of(ws), "iteration_finished")


@pytest.mark.slow
def test_a_hundred_calls_of_milliseconds_are_a_hundred_iterations_each_with_its_own_files(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    bin_dir = agent(tmp_path, QUICK_AGENT)
    # Between calls the loop commits (every 20th) and copies a file, as a loop's own bookkeeping does after
    # reading the call's result (Ralph's takes a second; 0.1 s here).
    script = ("for i in $(seq 1 100); do claude -p go --output-format json; "
              "if [ $((i % 20)) -eq 0 ]; then sleep 0.1; cp step_$i.txt copy_$i.txt; "
              "git add -A >/dev/null && git -c user.name=l -c user.email=l@x commit -qm loop$i; fi; "
              "if [ $i -eq 50 ]; then claude --version >/dev/null; fi; done; sleep 0.3")
    result = run(ws, *FAST, "--no-progress", "1000", "--paraphrase", "0", "--", "bash", "-c", script,
                 env=path_env(bin_dir), timeout=120)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    done = finished(ws)
    assert [e["iteration"] for e in done] == list(range(1, 101)), "every call counted, --version not"
    assert [e["files_changed"] for e in done] == [1] * 100, "each call its own file, the loop's copies no call's"
    assert all(e["commits"] == 0 for e in done), "the loop's commits are no call's progress"
    # The exit code is known when the supervisor held the process before its parent reaped it (nearly always;
    # a call of a millisecond can be over and reaped before its notice is read: then it is unknown, None).
    assert all(e["exit_status"] in ((3, None) if e["iteration"] % 25 == 0 else (0, None)) for e in done)
    assert sum(e["exit_status"] is not None for e in done) >= 50
    between = events(state_dir_of(ws), "changed_between_calls")
    assert sum(e["files_changed"] for e in between) == 5 and sum(e["commits"] for e in between) == 5
    assert sum(e["tokens"] for e in done) > 0


@pytest.mark.slow
def test_a_crash_loop_trips_at_the_threshold_and_no_call_starts_after_the_stop(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    bin_dir = agent(tmp_path, CRASHING_AGENT)
    script = "trap '' TERM; while :; do claude -p go --output-format json; sleep 0.1; done"
    result = run(ws, *FAST, "--on-open", "stop", "--no-progress", "100", "--", "bash", "-c", script,
                 env=path_env(bin_dir), timeout=60)
    assert result.returncode == 2
    opened = [h for h in history(state_dir_of(ws)) if h["to"] == "OPEN"]
    assert opened[0]["trigger"] in ("same-error", "consecutive-failures")
    assert " in 5 iterations in a row" in opened[0]["reason"] or "5 failed agent calls in a row" in opened[0]["reason"]
    done = finished(ws)
    assert all(e["failed"] and e["exit_status"] in (1, None) for e in done if not e["cut_short"])
    stopped = events(state_dir_of(ws), "tree_stopped")[-1]
    started = events(state_dir_of(ws), "iteration_started")
    assert max(e["iteration"] for e in started) <= 7, "no new call once the stop was decided"
    assert stopped["refused"] >= 1, "the loop ignored TERM and kept trying: its calls were refused"


@pytest.mark.slow
def test_a_missing_agent_is_blocked_at_the_first_attempt(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    script = "while :; do claude -p go; echo \"loop: claude exited with $?\"; sleep 0.2; done"
    result = run(ws, *FAST, "--", "bash", "-c", script, env={"PATH": "/usr/bin:/bin"}, timeout=60)
    assert result.returncode == 2
    opened = [h for h in history(state_dir_of(ws)) if h["to"] == "OPEN"]
    assert opened[0]["trigger"] == "blocked" and opened[0]["iteration"] == 1
    assert "claude is not installed" in opened[0]["reason"] and "/usr/bin:/bin" in opened[0]["reason"]
    child_log = (state_dir_of(ws) / "child.log").read_bytes()
    assert b"claude: command not found" in child_log and b"loop: claude exited with 127" in child_log


@pytest.mark.slow
def test_a_loop_that_never_reaches_its_agent_stalls_with_its_last_errors(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    script = "while :; do echo 'Error: sandbox not reachable at 10.0.0.7' >&2; sleep 0.3; done"
    result = run(ws, *FAST, "--stall", "2", "--on-open", "stop", "--", "bash", "-c", script, timeout=60)
    assert result.returncode == 2
    opened = [h for h in history(state_dir_of(ws)) if h["to"] == "OPEN"][0]
    assert opened["trigger"] == "stall" and "no agent call started" in opened["reason"]
    assert "sandbox not reachable" in opened["reason"]
    assert finished(ws) == []


@pytest.mark.slow
def test_a_wait_the_loop_announces_is_no_stall_but_the_silence_after_it_is(tmp_path: Path) -> None:
    """Ralph's loop waits out its hourly call limit and says so ("Sleeping for N seconds until next hour..."):
    not reaching the agent meanwhile is no stall; going on not reaching it after the wait is."""
    ws = workspace(tmp_path)
    script = ("echo '[2026-12-01 10:00:00] [INFO] Sleeping for 3 seconds until next hour...'; sleep 3; "
              "echo 'Rate limit reset! Ready for new calls.'; sleep 600")
    began = time.monotonic()
    result = run(ws, *FAST, "--stall", "1.5", "--on-open", "stop", "--", "bash", "-c", script, timeout=60)
    assert result.returncode == 2
    opened = [h for h in history(state_dir_of(ws)) if h["to"] == "OPEN"][0]
    assert opened["trigger"] == "stall" and "no agent call started" in opened["reason"]
    assert time.monotonic() - began >= 3 + 1.5  # not before the announced wait was over, plus --stall


@pytest.mark.slow
def test_a_stop_terms_the_loop_first_and_refuses_new_calls(tmp_path: Path) -> None:
    """A TERM-trapping loop that writes its own status and carries on (as Ralph's does): its trap runs
    while the agent call (in GNU timeout's own group) still works; then everything gets TERM."""
    ws = workspace(tmp_path)
    log_file = tmp_path / "order.log"
    bin_dir = agent(tmp_path, SLOW_AGENT)
    script = (f"trap 'echo \"loop TERM $EPOCHREALTIME\" >> {log_file}; echo interrupted > status' TERM; "
              "while :; do timeout 60 claude -p go & wait $!; echo \"failed $?\" >> status; sleep 0.05; done")
    proc = start(ws, *FAST, "--grace", "3", "--", "bash", "-c", script, env=path_env(bin_dir, LOG=str(log_file)))
    try:
        wait_for(lambda: events(state_dir_of(ws), "iteration_started"), timeout=30, what="the first call")
        wait_for(lambda: log_file.exists() and "agent start" in log_file.read_text(), timeout=30)
        assert run(ws, "stop", "-w", str(ws)).returncode == 0
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = log_file.read_text().split("\n")
    order = [line.split()[0] + " " + line.split()[1] for line in lines if "TERM" in line]
    assert order[:2] == ["loop TERM", "agent TERM"], lines
    times = {line.split()[0]: float(line.split()[2]) for line in lines if "TERM" in line}
    assert times["agent"] - times["loop"] >= 1.0, "the agent call got TERM only at half the grace"
    assert (ws / "status").read_text().startswith("interrupted")
    stopped = events(state_dir_of(ws), "tree_stopped")[-1]
    assert stopped["refused"] >= 1 and stopped["survivors"] == 0
    assert [e["iteration"] for e in events(state_dir_of(ws), "iteration_started")] == [1]
    assert finished(ws)[0]["cut_short"]


def waiting_shim(loop_pid: int, agent_folder: Path) -> int | None:
    """The pid of a shim of `claude` below the loop that has not yet run the agent (None: none)."""
    import psutil

    try:
        below = psutil.Process(loop_pid).children(recursive=True)
    except psutil.Error:
        return None
    for proc in below:
        try:
            cmdline = proc.cmdline()
        except psutil.Error:
            continue
        script = cmdline[2] if len(cmdline) > 2 and cmdline[1] == "-p" else ""
        if script.endswith("/bin/claude") and not script.startswith(str(agent_folder)):
            return proc.pid
    return None


@pytest.mark.slow
@pytest.mark.parametrize("way", ["cgroup", "signals"])
def test_a_frozen_tree_thawed_from_outside_starts_no_call(tmp_path: Path, way: str) -> None:
    """Someone thaws the paused loop behind the supervisor's back: SIGCONT to each process on the signal path;
    on the cgroup path SIGCONT changes nothing (the freeze holds), so it takes `cgroup.freeze` 0 from outside.
    Either way the loop's next call waits in its shim until `resume`."""
    ws = workspace(tmp_path)
    bin_dir = agent(tmp_path, QUICK_AGENT)
    script = "while :; do claude -p go --output-format json; sleep 0.2; done"
    options = ("--cgroup", "off") if way == "signals" else ()
    proc = start(ws, *FAST, *options, "--no-progress", "1000", "--paraphrase", "0", "--", "bash", "-c", script,
                 env=path_env(bin_dir))
    try:
        wait_for(lambda: len(finished(ws)) >= 2, timeout=30, what="two calls")
        assert run(ws, "pause", "-w", str(ws)).returncode == 0
        paused_at = len(events(state_dir_of(ws), "iteration_started"))
        state = json.loads(subprocess.run(supervise_argv("status", "--json", "-w", str(ws)), capture_output=True,
                                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}).stdout)
        child = state["child"]["pid"]
        cgroup = state["cgroup"]
        if way == "cgroup" and cgroup is None:
            pytest.skip("no cgroup can be made here: the signal path is the other half of this test")
        os.kill(child, signal.SIGCONT)  # something outside thaws the loop
        for member in state["tree"]:
            try:
                os.kill(member["pid"], signal.SIGCONT)
            except ProcessLookupError:
                pass
        if way == "cgroup":
            time.sleep(0.5)
            still = [m["pid"] for m in state["tree"] if Path(f"/proc/{m['pid']}").exists()]
            assert still and all(held(pid) for pid in still), "SIGCONT thawed a frozen cgroup"
            assert len(events(state_dir_of(ws), "iteration_started")) == paused_at
            Path(cgroup["path"], "cgroup.freeze").write_text("0")  # someone with the rights thaws it
        # the loop goes on to its next call, whose shim waits while the tree is meant to be frozen
        shim = wait_for(lambda: waiting_shim(child, bin_dir), timeout=30, what="a shim waiting for the thaw")
        live = json.loads(subprocess.run(supervise_argv("status", "--json", "-w", str(ws)), capture_output=True).stdout)
        assert live["child"]["paused"] is False and live["state"] == "OPEN"  # status tells the truth
        time.sleep(1.0)  # ten of its looks at the flag
        assert waiting_shim(child, bin_dir) == shim, "the same shim still waits"
        assert len(events(state_dir_of(ws), "iteration_started")) == paused_at
        assert events(state_dir_of(ws), "agent_call_refused") == [], "a freeze delays a call, never fails it"
        assert run(ws, "resume", "-w", str(ws)).returncode == 0
        wait_for(lambda: len(events(state_dir_of(ws), "iteration_started")) > paused_at, timeout=30,
                 what="calls again after resume")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.mark.slow
def test_without_a_shim_folder_and_with_a_replaced_path_the_sampler_counts_the_calls(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (tmp / f"ralph-supervise-{os.getuid()}").write_text("not a folder")  # the run's folder cannot be made
    # Sampled calls are seen late (the tree is sampled every 0.1-0.5 s): this agent works after a pause.
    bin_dir = agent(tmp_path, "#!/bin/sh\nsleep 0.8\n" + QUICK_AGENT.split("\n", 1)[1])
    script = "for i in 1 2; do claude -p go --output-format json; sleep 0.2; done"
    result = run(ws, *FAST, "--", "bash", "-c", script,
                 env=path_env(bin_dir, XDG_RUNTIME_DIR="", TMPDIR=str(tmp)))
    assert result.returncode == 0
    assert [e["files_changed"] for e in finished(ws)] == [1, 1]
    assert len(events(state_dir_of(ws), "shims_unavailable")) == 1
    # A loop that replaces PATH entirely skips the shims: the sampler still sees its calls.
    ws2 = workspace(tmp_path / "second")
    script = f"export PATH={bin_dir}:/usr/bin:/bin; for i in 1 2; do claude -p go --output-format json; sleep 0.2; done"
    result = run(ws2, *FAST, "--", "bash", "-c", script)
    assert result.returncode == 0
    assert [e["files_changed"] for e in finished(ws2)] == [1, 1]


@pytest.mark.slow
def test_a_call_ended_by_the_loops_timeout_is_reported_cut_off_with_its_signal(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    bin_dir = agent(tmp_path, "#!/bin/sh\necho started\nexec sleep 30\n")
    script = "for i in 1 2; do timeout 0.5 claude -p go; done; sleep 0.2"
    result = run(ws, *FAST, "--max-failures", "10", "--", "bash", "-c", script, env=path_env(bin_dir))
    assert result.returncode == 0
    done = finished(ws)
    assert [(e["killed_by"], e["timed_out"], e["failed"]) for e in done] == [(15, True, True)] * 2
