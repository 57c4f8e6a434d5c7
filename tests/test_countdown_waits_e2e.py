"""The countdowns of the waits the loop cannot avoid (issue 30's part that waited on them): a usage-ceiling
freeze through a pipe (a plain line every few seconds) and an outage's back-off in a real tmux pane (one
line that moves in place)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import state_dir_of
from tests.helpers.supervise import events, start, wait_for
from tests.test_e2e_headroom import INIT, RATE, RESULT, env_of, fake, loop_of
from tests.test_terminal import supervisor_env, tmux_binary

pytestmark = pytest.mark.slow


def test_through_a_pipe_a_ceiling_freeze_counts_down_in_plain_lines(tmp_path: Path) -> None:
    workspace = fake(tmp_path, "claude", (
        'if [ "$N" -eq 1 ]; then u=95; reset=$(( $(date +%s) + 7 )); else u=5; reset=$(( $(date +%s) + 3600 )); fi\n'
        f"echo '{INIT}'\n"
        f"printf '{RATE}\\n' allowed $reset $u false\n"
        'echo "step $N" > "step$N.txt"\n'
        f"printf '{RESULT}\\n' \"implemented step $N\"\n"))
    proc = start(workspace, "--no-echo", "--log-format", "console", "--grace", "1", "--notify-desktop", "false",
                 "--limit-wait-margin", "0", "--usage-ceiling", "90", "--countdown-every", "1.5", "--",
                 *loop_of("claude -p go --output-format stream-json --verbose", 2), env=env_of(tmp_path))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode(errors="replace")[-2000:]
    text = err.decode("utf-8")
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    plain = [line for line in lines if "⧗ CEILING wait: " in line]
    assert 2 <= len(plain) <= 6, plain  # every 1.5 s of a wait of at most 7 s
    for line in plain:
        assert re.match(r"^\d\d:\d\d:\d\d  ⧗ CEILING wait: 0:00:0\d left, until \S+ · `ralph-supervise resume`", line), line
    started = next(i for i, line in enumerate(lines) if "  CEILING wait until " in line)
    assert "five_hour at 95 %" in lines[started]
    over = next(i for i, line in enumerate(lines) if "  LIMIT over: " in line)
    assert all(started < lines.index(line) < over for line in plain)
    assert any(re.match(r"^\d\d:\d\d:\d\d  USAGE: five_hour at 95 %", line) for line in lines[:started])


@pytest.mark.timeout(900)  # time for `apt-get install tmux` where it is missing
def test_in_a_tmux_pane_an_outage_back_off_counts_down_in_place(tmp_path: Path) -> None:
    tmux = tmux_binary()
    workspace = fake(tmp_path, "codex", (
        'echo \'{"type":"thread.started","thread_id":"0199a213-81c0-7800-8aa1-bbab2a035a53"}\'\n'
        "echo '{\"type\":\"turn.started\"}'\n"
        "while :; do echo '{\"type\":\"error\",\"message\":\"Reconnecting... waiting for network (Connection failed: "
        "error sending request)\"}'; sleep 0.3; done\n"))
    state = state_dir_of(workspace)
    socket_path = tmp_path / "tmux.sock"
    env = supervisor_env(**env_of(tmp_path))
    loop = " ".join(f"'{part}'" for part in loop_of("codex exec --json go", 1))
    command = (f"{sys.executable} -m ralph_supervisor run -w {workspace} --grace 1 --notify-desktop false "
               f"--no-echo --outage-max 0.03 -- {loop}; sleep 600")
    subprocess.run([tmux, "-S", str(socket_path), "new-session", "-d", "-x", "100", "-y", "40", command],
                   env=env, check=True, timeout=30)

    def pane() -> list[str]:
        out = subprocess.run([tmux, "-S", str(socket_path), "capture-pane", "-p", "-S", "-", "-E", "-"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        return [line.rstrip() for line in out.splitlines()]

    left = re.compile(r"^⧗ OUTAGE wait: 0:0(\d):(\d\d) left, until \S+ [━╺─]+ · `ralph-supervise resume` ends it$")
    try:
        wait_for(lambda: events(state, "limit_wait_started"), timeout=60, what="the outage back-off")
        seen: list[int] = []
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            shown = [line for line in pane() if "⧗ OUTAGE" in line]
            assert len(shown) <= 1, shown  # one line, in place
            for line in shown:
                match = left.match(line)
                assert match, line
                seconds = int(match[1]) * 60 + int(match[2])
                if not seen or seen[-1] != seconds:
                    seen.append(seconds)
            time.sleep(0.2)
        assert len(seen) >= 3 and seen == sorted(seen, reverse=True) and 280 <= seen[0] <= 300, seen
        text = "\n".join(pane())
        assert re.search(r"\d\d:\d\d:\d\d  OUTAGE since \d\d:\d\d: the agent cannot reach its API", text)
        assert re.search(r"\d\d:\d\d:\d\d  OUTAGE wait until \d\d:\d\d", text)
        subprocess.run([sys.executable, "-m", "ralph_supervisor", "stop", "-w", str(workspace)],
                       capture_output=True, timeout=60, env=env)
        wait_for(lambda: events(state, "supervisor_stopped"), timeout=60, what="the run's end")
        final = wait_for(lambda: (lambda lines: any(line.startswith("  Continue:") for line in lines) and lines)(
            pane()), timeout=30, what="the end lines in the pane")
        assert not any("⧗ OUTAGE" in line for line in final)  # no countdown left behind
    finally:
        if not events(state, "supervisor_stopped"):  # it ignores the SIGHUP of a closing pane: stop it
            subprocess.run([sys.executable, "-m", "ralph_supervisor", "stop", "-w", str(workspace)],
                           capture_output=True, timeout=60, env=env)
        subprocess.run([tmux, "-S", str(socket_path), "kill-server"], capture_output=True, timeout=30)
