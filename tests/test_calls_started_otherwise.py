"""End to end: an agent the loop starts by absolute path, through `node` by its package path or through a
package runner is a call like one found on PATH: each call gets the files it writes from its first instant,
and a working loop is never stopped for no progress."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers import executable, state_dir_of
from tests.helpers.supervise import events, history, run

FAST = ("--no-echo", "--log-format", "json", "--grace", "2")

# A call that writes a new file at its very first instant, then works a while, then answers in JSON.
EARLY_WRITER = r"""#!/bin/sh
n=$(cat .ralph/count 2>/dev/null || echo 0); n=$((n + 1)); echo $n > .ralph/count
echo "step $n" > "step_$n.txt"
sleep "${AGENT_WORK:-1}"
echo '{"type":"result","subtype":"success","is_error":false,"result":"did step '$n'","total_cost_usd":0.01,"usage":{"input_tokens":1,"output_tokens":1}}'
"""
# The same agent as an npm package's script, for a real `node`.
EARLY_WRITER_JS = r"""
const fs = require("fs");
if (process.argv.includes("--version")) { console.log("2.0.0 (fake)"); process.exit(0); }
let n = 0;
try { n = parseInt(fs.readFileSync(".ralph/count", "utf8"), 10) || 0; } catch (e) {}
n += 1;
fs.writeFileSync(".ralph/count", String(n));
fs.writeFileSync(`step_${n}.txt`, `step ${n}\n`);
setTimeout(() => {
  console.log(JSON.stringify({type: "result", subtype: "success", is_error: false, result: `did step ${n}`,
                              total_cost_usd: 0.01, usage: {input_tokens: 1, output_tokens: 1}}));
}, 1000 * parseFloat(process.env.AGENT_WORK || "1"));
"""
# A package runner as npx is one: it starts the package's script as a child and waits for it.
FAKE_NPX = r"""#!/bin/sh
pkg=$1; shift
node "$PKGS/node_modules/$pkg/cli.js" "$@" &
child=$!
trap 'kill -TERM $child' TERM
wait $child
"""


def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / ".ralph").mkdir(parents=True)
    (ws / ".gitignore").write_text(".ralph/\n")
    return ws


def installed(tmp_path: Path, name: str, text: str) -> Path:
    """An executable `name` in a folder that is not on the loop's PATH: the loop names it by its path."""
    return executable(tmp_path / "opt" / "tools", name, text)


def package(tmp_path: Path) -> Path:
    """node_modules/@anthropic-ai/claude-code/cli.js, as an npm install lays it out (the agent's script fake)."""
    root = tmp_path / "pkgs"
    cli = root / "node_modules" / "@anthropic-ai" / "claude-code" / "cli.js"
    cli.parent.mkdir(parents=True)
    cli.write_text(EARLY_WRITER_JS)
    return root


def assert_each_call_got_its_own_file(ws: Path, calls: int, result) -> None:
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    done = events(state_dir_of(ws), "iteration_finished")
    assert [e["iteration"] for e in done] == list(range(1, calls + 1))
    assert [e["files_changed"] for e in done] == [1] * calls, [(e["iteration"], e["paths"]) for e in done]
    assert [e["paths"] for e in done] == [[f"step_{n}.txt"] for n in range(1, calls + 1)]
    assert all(e["agent"] == "claude" and e["tokens"] == 2 for e in done)
    assert events(state_dir_of(ws), "changed_between_calls") == []
    assert [h for h in history(state_dir_of(ws)) if h["to"] == "OPEN"] == []


@pytest.mark.slow
def test_calls_by_absolute_path_get_the_files_they_write_at_their_first_instant(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    claude = installed(tmp_path, "claude", EARLY_WRITER)
    script = f"for i in 1 2 3 4; do {claude} -p go --output-format json; sleep 0.3; done"
    result = run(ws, *FAST, "--no-progress", "2", "--paraphrase", "0", "--", "bash", "-c", script,
                 env={"AGENT_WORK": "0.8"}, timeout=90)
    assert_each_call_got_its_own_file(ws, 4, result)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("node") is None, reason="node is needed to run an npm package's script")
def test_a_loop_calling_node_on_the_agents_package_path_is_supervised(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    root = package(tmp_path)
    cli = root / "node_modules" / "@anthropic-ai" / "claude-code" / "cli.js"
    script = (f"for i in 1 2 3; do node {cli} -p go --output-format json; sleep 0.3; done; "
              f"node {cli} --version >/dev/null 2>&1; true")
    result = run(ws, *FAST, "--no-progress", "2", "--paraphrase", "0", "--", "bash", "-c", script,
                 env={"AGENT_WORK": "0.8"}, timeout=90)
    assert_each_call_got_its_own_file(ws, 3, result)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("node") is None, reason="node is needed to run an npm package's script")
def test_a_loop_calling_its_agent_through_a_package_runner_counts_one_call_per_run(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    root = package(tmp_path)
    npx = installed(tmp_path, "npx", FAKE_NPX)
    script = f"for i in 1 2 3; do {npx} @anthropic-ai/claude-code -p go --output-format json; sleep 0.3; done"
    result = run(ws, *FAST, "--no-progress", "2", "--paraphrase", "0", "--", "bash", "-c", script,
                 env={"AGENT_WORK": "0.8", "PKGS": str(root)}, timeout=90)
    assert_each_call_got_its_own_file(ws, 3, result)
    assert events(state_dir_of(ws), "agent_call_parallel") == [], "the runner and the script it starts are one call"


@pytest.mark.slow
def test_a_stuck_loop_calling_its_agent_by_absolute_path_is_still_caught(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    stuck = EARLY_WRITER.replace('echo "step $n" > "step_$n.txt"\n', "")
    claude = installed(tmp_path, "claude", stuck)
    script = f"while :; do {claude} -p go --output-format json; sleep 0.2; done"
    result = run(ws, *FAST, "--no-progress", "2", "--paraphrase", "0", "--on-open", "stop", "--", "bash", "-c",
                 script, env={"AGENT_WORK": "0.5"}, timeout=90)
    assert result.returncode == 2
    opened = [h for h in history(state_dir_of(ws)) if h["to"] == "OPEN"][0]
    assert (opened["trigger"], opened["iteration"]) == ("no-progress", 2)


# The times come from bash's own clock: a `date` forked in a trap is a newcomer the stop may TERM at once.
SLOW_AGENT = r"""#!/bin/bash
trap 'echo "agent TERM $EPOCHREALTIME" >> "$LOG"; exit 143' TERM
echo "agent start $EPOCHREALTIME" >> "$LOG"
sleep 30 & wait
"""


@pytest.mark.slow
@pytest.mark.parametrize("form", ["foreground", "piped"])
def test_a_stop_lets_the_loop_record_its_interruption_while_its_call_in_its_own_group_still_works(
        tmp_path: Path, form: str) -> None:
    """Ralph's loop runs its agent in the loop's own process group (no `timeout` group), with a TERM trap
    that writes `interrupted`. The stop TERMs the loop and its monitor `sleep` first, and the call (and the
    `tee` reading it) only once half the grace has passed."""
    from tests.helpers.supervise import start, wait_for

    ws = workspace(tmp_path)
    log_file = tmp_path / "order.log"
    claude = installed(tmp_path, "claude", SLOW_AGENT)
    call = f"{claude} -p go" if form == "foreground" else f"{claude} -p go | tee -a out.log"
    script = (f"trap 'echo \"loop TERM $EPOCHREALTIME\" >> {log_file}; echo interrupted > status' TERM; "
              f"while :; do ( {call} ) & job=$!; while kill -0 $job 2>/dev/null; do sleep 10 & wait $!; done; "
              "echo \"failed\" >> status; done")
    proc = start(ws, *FAST, "--grace", "3", "--", "bash", "-c", script, env={"LOG": str(log_file)})
    try:
        wait_for(lambda: log_file.exists() and "agent start" in log_file.read_text(), timeout=30, what="the call")
        wait_for(lambda: events(state_dir_of(ws), "iteration_started"), timeout=30, what="the call seen")
        assert run(ws, "stop", "-w", str(ws)).returncode == 0
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = log_file.read_text().split("\n")
    times = {line.split()[0]: float(line.split()[2]) for line in lines if "TERM" in line}
    assert set(times) == {"loop", "agent"}, lines
    assert times["agent"] - times["loop"] >= 1.0, "the call got TERM only at half the grace"
    assert (ws / "status").read_text().startswith("interrupted"), "the loop recorded its interruption first"
    stopped = events(state_dir_of(ws), "tree_stopped")[-1]
    assert stopped["survivors"] == 0


QUICK_AGENT = r"""#!/bin/sh
n=$(cat .ralph/count 2>/dev/null || echo 0); n=$((n + 1)); echo $n > .ralph/count
echo "step $n" > "step_$n.txt"
echo '{"type":"result","subtype":"success","is_error":false,"result":"did step '$n'","usage":{"input_tokens":1,"output_tokens":1}}'
"""


@pytest.mark.slow
def test_calls_too_short_to_sample_are_cut_from_their_replies_each_with_its_file(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    claude = installed(tmp_path, "claude", QUICK_AGENT)
    calls = 40
    # 0.2 s of the loop's own between calls: output read in one chunk with the next call's cannot be told
    # apart by time, and a busy machine reads the pipe that late at times.
    script = f"for i in $(seq 1 {calls}); do {claude} -p go --output-format json; sleep 0.2; done; sleep 1"
    result = run(ws, *FAST, "--no-progress", "2", "--paraphrase", "0", "--output-decline", "0", "--", "bash", "-c",
                 script, timeout=120)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    done = events(state_dir_of(ws), "iteration_finished")
    assert [e["iteration"] for e in done] == list(range(1, calls + 1))
    assert [e["paths"] for e in done] == [[f"step_{n}.txt"] for n in range(1, calls + 1)]
    assert [e["reply"] for e in done] == [f"did step {n}" for n in range(1, calls + 1)]
    assert [h for h in history(state_dir_of(ws)) if h["to"] == "OPEN"] == []


@pytest.mark.slow
def test_a_crash_loop_started_by_absolute_path_trips_at_the_threshold(tmp_path: Path) -> None:
    """An agent that fails in milliseconds (an error, exit 1) and prints no reply: the calls the sampler
    catches alive are failed calls, and the same-error or consecutive-failures rule opens."""
    ws = workspace(tmp_path)
    claude = installed(tmp_path, "claude", "#!/bin/sh\nsleep 0.05\necho 'Error: Claude Code cannot be launched "
                                           "inside another Claude Code session.' >&2\nexit 1\n")
    script = f"while :; do {claude} -p go --output-format json; sleep 0.1; done"
    result = run(ws, *FAST, "--on-open", "stop", "--no-progress", "100", "--", "bash", "-c", script, timeout=90)
    assert result.returncode == 2, result.stderr.decode()[-2000:]
    opened = [h for h in history(state_dir_of(ws)) if h["to"] == "OPEN"][0]
    assert opened["trigger"] in ("same-error", "consecutive-failures"), opened
    done = events(state_dir_of(ws), "iteration_finished")
    assert done and all(e["failed"] for e in done if not e["cut_short"])


@pytest.mark.slow
def test_a_short_calls_reply_just_before_the_loop_exits_is_still_a_call(tmp_path: Path) -> None:
    """The loop exits right after its last call replied, before a tick could make that reply a call (a reply
    settles for REPLY_SETTLE_SECONDS first): it is still an iteration, with its file."""
    ws = workspace(tmp_path)
    claude = installed(tmp_path, "claude", QUICK_AGENT)
    script = f"for i in 1 2 3; do {claude} -p go --output-format json; sleep 0.2; done"
    result = run(ws, *FAST, "--no-progress", "10", "--paraphrase", "0", "--output-decline", "0", "--", "bash", "-c",
                 script, timeout=60)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    done = events(state_dir_of(ws), "iteration_finished")
    assert [e["iteration"] for e in done] == [1, 2, 3]
    assert [e["reply"] for e in done] == [f"did step {n}" for n in (1, 2, 3)]
    assert [e["paths"] for e in done] == [[f"step_{n}.txt"] for n in (1, 2, 3)]
