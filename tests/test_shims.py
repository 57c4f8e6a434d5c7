"""The call shims, run for real without a supervisor: invisible to the agent, never in the loop's way."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ralph_supervisor.evidence.shims import ShimDir, bad_agent_name, install_shims, parse_notice, read_notice
from tests.helpers import state_dir_of

# The agent: a python interpreter under the name `claude` (a real executable, so the kernel keeps the
# argv[0] its caller chose, as for a native agent binary), reporting what it sees.
REPORT = r"""
import json, os, sys, signal
def term(*_):
    open(os.environ["AGENT_OUT"] + ".term", "w").write("TERM")
    sys.exit(42)
signal.signal(signal.SIGTERM, term)
seen = {"argv": sys.orig_argv, "env": {k: v for k, v in os.environ.items() if k not in ("PATH", "_", "AGENT_OUT")},
        "stdin": sys.stdin.read(), "comm": open("/proc/self/comm").read().strip(), "pid": os.getpid(),
        "path": os.environ.get("PATH")}
open(os.environ["AGENT_OUT"], "w").write(json.dumps(seen))
if os.environ.get("AGENT_WAIT"):
    signal.pause()
sys.exit(int(os.environ.get("AGENT_CODE", "0")))
"""


@pytest.fixture
def agent_bin(tmp_path: Path) -> Path:
    folder = tmp_path / "agent-bin"
    folder.mkdir()
    (folder / "claude").symlink_to(sys.executable)
    return folder


def call_agent(path: str, tmp_path: Path, *, stdin: bytes = b"the prompt\n", **env: str) -> tuple[dict, subprocess.CompletedProcess[bytes]]:
    out = tmp_path / f"seen-{time.monotonic_ns()}.json"
    full = {**os.environ, "PATH": path, "AGENT_OUT": str(out), "WEIRD.NAME": "x", **env}
    script = 'claude -c "$REPORT" "a b" "" --flag'
    done = subprocess.run(["bash", "-c", script], input=stdin, env={**full, "REPORT": REPORT},
                          capture_output=True, timeout=30)
    return (json.loads(out.read_text()) if out.exists() else {}), done


@pytest.mark.parametrize("bash", [True, False], ids=["bash", "sh"])
def test_the_agent_sees_what_it_would_see_without_the_shim(tmp_path: Path, agent_bin: Path, bash: bool) -> None:
    shims = install_shims(tmp_path / "shims", ["claude"], bash=bash)
    base = f"{agent_bin}:{os.environ['PATH']}"
    plain, plain_run = call_agent(base, tmp_path, AGENT_CODE="3")
    shimmed, shim_run = call_agent(shims.path_for(base), tmp_path, AGENT_CODE="3")
    assert shim_run.returncode == plain_run.returncode == 3
    assert shim_run.stderr == plain_run.stderr == b""
    assert shimmed["stdin"] == plain["stdin"] == "the prompt\n"
    assert shimmed["comm"] == plain["comm"] == "claude"
    assert shimmed["path"] == base, "PATH is the caller's, without the shim folder"
    if bash:
        assert shimmed["argv"] == plain["argv"]
        assert shimmed["env"] == plain["env"]
    else:  # /bin/sh cannot set argv[0] (the agent sees its full path) and drops names that are not identifiers
        assert shimmed["argv"][1:] == plain["argv"][1:]
        assert shimmed["argv"][0] == str(agent_bin / "claude")
        assert shimmed["env"] == {k: v for k, v in plain["env"].items() if k != "WEIRD.NAME"}
    notice = read_notice(next(shims.calls.iterdir()))
    assert notice is not None and notice.kind == "call"
    assert notice.pid == shimmed["pid"], "exec keeps the pid: the notice names the agent itself"
    assert notice.argv == ("claude", "-c", REPORT, "a b", "", "--flag")
    assert notice.target == str(agent_bin / "claude")
    assert notice.at is not None and abs(notice.at - time.time()) < 30


def test_signals_reach_the_agent_itself(tmp_path: Path, agent_bin: Path) -> None:
    shims = install_shims(tmp_path / "shims", ["claude"])
    out = tmp_path / "seen.json"
    env = {**os.environ, "PATH": shims.path_for(f"{agent_bin}:{os.environ['PATH']}"), "AGENT_OUT": str(out),
           "AGENT_WAIT": "1"}
    proc = subprocess.Popen(["claude", "-c", REPORT], env=env, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert json.loads(out.read_text())["pid"] == proc.pid
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 42
        assert (tmp_path / "seen.json.term").read_text() == "TERM"
    finally:
        proc.kill()
        proc.wait()


def test_a_missing_agent_is_what_a_shell_would_say_and_leaves_a_notice(tmp_path: Path) -> None:
    shims = install_shims(tmp_path / "shims", ["claude"])
    path = shims.path_for("/usr/bin:/bin")
    done = subprocess.run(["bash", "-c", "claude -p go"], env={**os.environ, "PATH": path}, capture_output=True,
                          timeout=30)
    assert done.returncode == 127
    assert done.stderr == b"claude: command not found\n"
    notice = read_notice(next(shims.calls.iterdir()))
    assert notice is not None and notice.kind == "missing"
    assert notice.target == "/usr/bin:/bin" and notice.args == ("-p", "go")


def test_a_refusing_shim_exits_143_without_running_the_agent(tmp_path: Path, agent_bin: Path) -> None:
    shims = install_shims(tmp_path / "shims", ["claude"])
    shims.refuse(True)
    seen, done = call_agent(shims.path_for(f"{agent_bin}:{os.environ['PATH']}"), tmp_path)
    assert done.returncode == 143 and seen == {}
    notice = read_notice(next(shims.calls.iterdir()))
    assert notice is not None and notice.kind == "refused"
    shims.refuse(False)
    seen, done = call_agent(shims.path_for(f"{agent_bin}:{os.environ['PATH']}"), tmp_path)
    assert done.returncode == 0 and seen["comm"] == "claude"


@pytest.mark.parametrize("bash", [True, False], ids=["bash", "sh"])
def test_a_holding_shim_waits_past_the_gate_until_the_hold_goes_then_runs_the_agent(
        tmp_path: Path, agent_bin: Path, bash: bool) -> None:
    """The tree is frozen (a pause, a limit wait): a call that slipped through waits, however long, and runs
    once the supervisor lets the loop go on; it neither fails nor runs meanwhile."""
    from ralph_supervisor.evidence.shims import GATE_SECONDS

    shims = install_shims(tmp_path / "shims", ["claude"], bash=bash)
    shims.hold(True)
    out = tmp_path / "seen.json"
    env = {**os.environ, "PATH": shims.path_for(f"{agent_bin}:{os.environ['PATH']}"), "AGENT_OUT": str(out),
           "REPORT": REPORT}
    proc = subprocess.Popen(["bash", "-c", 'claude -c "$REPORT" </dev/null'], env=env)
    try:
        time.sleep(GATE_SECONDS + 0.5)  # past the gate's bound for a pending verdict
        assert proc.poll() is None and not out.exists(), "held: the agent has not run"
        assert list(shims.calls.iterdir()) == [], "no notice: the call has not begun"
        shims.hold(False)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert json.loads(out.read_text())["comm"] == "claude"
    notice = read_notice(next(shims.calls.iterdir()))
    assert notice is not None and notice.kind == "call"


def test_with_no_supervisor_listening_the_shim_just_runs_the_agent(tmp_path: Path, agent_bin: Path) -> None:
    shims = install_shims(tmp_path / "shims", ["claude"])
    shims.calls.rmdir()  # the supervisor is gone, and its notice folder with it
    seen, done = call_agent(shims.path_for(f"{agent_bin}:{os.environ['PATH']}"), tmp_path, AGENT_CODE="5")
    assert done.returncode == 5 and done.stderr == b""
    assert seen["comm"] == "claude"


def test_odd_folders_and_names(tmp_path: Path) -> None:
    spaced = install_shims(tmp_path / "state dir 'q'" / "shims", ["claude", "cursor-agent"])
    done = subprocess.run(["bash", "-c", "cursor-agent --version; echo rc=$?"],
                          env={**os.environ, "PATH": spaced.path_for("/usr/bin:/bin")}, capture_output=True, timeout=30)
    assert b"rc=127" in done.stdout and b"cursor-agent: command not found" in done.stderr
    with pytest.raises(ValueError, match="cannot go on PATH"):
        install_shims(tmp_path / "a:b" / "shims", ["claude"])
    blocker = tmp_path / "blocked"
    blocker.write_text("a file where the folder should be")
    with pytest.raises(OSError):
        install_shims(blocker, ["claude"])


@pytest.mark.parametrize("name", ["", "../claude", "/usr/bin/claude", "cl aude", "claude;rm", "$(x)", "a`b`", "-x"])
def test_names_a_shim_cannot_carry_are_refused(name: str) -> None:
    assert bad_agent_name(name) is not None


@pytest.mark.parametrize("name", ["claude", "cursor-agent", "codex", "node20", "my_agent.v2", "g++"])
def test_plain_program_names_are_fine(name: str) -> None:
    assert bad_agent_name(name) is None


@given(st.binary(max_size=400))
def test_any_bytes_in_the_notice_folder_never_crash_the_reader(data: bytes) -> None:
    notice = parse_notice(data)
    assert notice is None or notice.pid > 1


@given(st.lists(st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",))), max_size=6))
def test_a_notice_keeps_every_argument(args: list[str]) -> None:
    raw = b"\0".join(part.encode() for part in ["v1", "call", "claude", "1234", "1.5", "/x/claude", str(len(args)),
                                                *(args or [""])]) + b"\0"
    notice = parse_notice(raw)
    assert notice is not None and notice.args == tuple(args) and notice.at == 1.5


def test_shim_folder_predicates(tmp_path: Path) -> None:
    shims = ShimDir(tmp_path, ("claude",))
    assert shims.is_shim(["/bin/bash", "-p", f"{tmp_path}/bin/claude", "-p", "go"])
    assert not shims.is_shim(["claude", "-p", "go"])
    assert shims.path_for("") == str(tmp_path / "bin")


@pytest.mark.parametrize("value", ["claude,../bin/x", "cl;aude", "claude,$(rm -rf ~)"])
def test_a_bad_iteration_process_name_is_one_clear_line(tmp_path: Path, value: str) -> None:
    done = subprocess.run([sys.executable, "-m", "ralph_supervisor", "-w", str(tmp_path), "--iteration-process",
                           value, "--", "true"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("ralph-supervise: --iteration-process: ")
    assert not state_dir_of(tmp_path).exists()
