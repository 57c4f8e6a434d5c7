"""The countdown of a real usage-limit wait, as a person sees it: in a real tmux pane the one line moves in
place and leaves no debris; through a pipe it is a plain line every few seconds (`--countdown-every`)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import state_dir_of
from tests.helpers.supervise import LOOP, events, loop_env, run, wait_for
from tests.test_terminal import supervisor_env, tmux_binary

pytestmark = pytest.mark.slow

LEFT = re.compile(r"^⧗ LIMIT wait: (\d+):(\d\d):(\d\d) left, until \S+ [━╺─]+ · `ralph-supervise resume` ends it$")
WAIT_ENV = {"RALPH_LOOP_MAX": "2", "FAKE_AGENT_RESET_IN": "8"}
"""Two limited calls: the first ends by itself, and the wait for its reset (8 s after it, no margin) freezes the
second."""


@pytest.mark.timeout(900)  # time for `apt-get install tmux` where it is missing
def test_in_a_tmux_pane_the_countdown_moves_in_place_and_leaves_no_debris(tmp_path: Path) -> None:
    tmux = tmux_binary()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    state = state_dir_of(workspace)
    socket_path = tmp_path / "tmux.sock"
    env = supervisor_env(**loop_env("usage-limit", **WAIT_ENV))

    def pane() -> list[str]:
        out = subprocess.run([tmux, "-S", str(socket_path), "capture-pane", "-p", "-S", "-", "-E", "-"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        return [line.rstrip() for line in out.splitlines()]

    command = (f"{sys.executable} -m ralph_supervisor run -w {workspace} --grace 1 --notify-desktop false "
               f"--limit-wait-margin 0 -- {LOOP}; sleep 600")
    config = tmp_path / "tmux.conf"
    config.write_text("set -g history-limit 10000\n")
    subprocess.run([tmux, "-S", str(socket_path), "-f", str(config), "new-session", "-d", "-x", "100", "-y", "40",
                    command], env=env, check=True, timeout=30)
    try:
        wait_for(lambda: events(state, "limit_wait_started"), timeout=60, what="the usage-limit wait")
        seen: list[int] = []
        while not events(state, "limit_wait_ended"):
            shown = [line for line in pane() if "⧗ LIMIT wait:" in line]
            assert len(shown) <= 1, shown  # one line, updated in place: never a second copy
            for line in shown:
                match = LEFT.match(line)
                assert match, line  # alone on its line, whole, within the pane's 100 columns
                seconds = int(match[1]) * 3600 + int(match[2]) * 60 + int(match[3])
                if not seen or seen[-1] != seconds:
                    seen.append(seconds)
            time.sleep(0.2)
        assert len(seen) >= 3 and seen == sorted(seen, reverse=True), seen  # it moved, down
        wait_for(lambda: events(state, "supervisor_stopped"), timeout=60, what="the run's end")
        final = wait_for(lambda: (lambda lines: any(line.startswith("  Continue:") for line in lines) and lines)(
            pane()), timeout=30, what="the end lines in the pane")
        text = "\n".join(final)
        assert "⧗" not in text.replace("⧗ usage limit", "")  # no countdown left behind, nothing half-erased
        assert "LIMIT over: the limit has reset" in text
        over = next(i for i, line in enumerate(final) if "LIMIT over" in line)
        assert any(re.match(r"^\d\d:\d\d:\d\d  LIMIT wait until ", line) for line in final[:over])
        for line in final:  # the echo and our lines whole: nothing of the countdown written into them
            if "[ralph]" in line:
                assert line.startswith("[ralph] "), line
            if " #1 " in line or " #2 " in line:
                assert re.match(r"^\d\d:\d\d:\d\d  #[12] ", line), line
        assert any(line.startswith("ralph-supervise: Finished by itself with code 0") for line in final)
    finally:
        subprocess.run([tmux, "-S", str(socket_path), "kill-server"], capture_output=True, timeout=30)


def test_through_a_pipe_the_countdown_is_a_plain_line_every_so_often(tmp_path: Path) -> None:
    result = run(tmp_path, "--no-echo", "--log-format", "console", "--grace", "1", "--notify-desktop", "false",
                 "--limit-wait-margin", "0", "--countdown-every", "1.5", "--", str(LOOP),
                 env=loop_env("usage-limit", **WAIT_ENV), timeout=120)
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-2000:]
    text = result.stderr.decode("utf-8")
    assert "\r" not in text and "\x1b" not in text  # no in-place tricks and no colour in a pipe
    lines = text.splitlines()
    plain = [line for line in lines if "⧗ LIMIT wait: " in line]
    for line in plain:
        assert re.match(r"^\d\d:\d\d:\d\d  ⧗ LIMIT wait: 0:00:0\d left, until \S+ · `ralph-supervise resume`", line), line
    # Each wait: from its "wait until" line to its "over" line. The second call is mostly frozen mid-call by the
    # first wait (its limit then lies in the past); on a busy machine the freeze may come before the loop starts
    # it, and it waits for a limit of its own afterwards.
    waits, begun = [], None
    for i, line in enumerate(lines):
        if "  LIMIT wait until " in line and begun is None:
            begun = i
        elif "  LIMIT over: " in line and begun is not None:
            waits.append((begun, i))
            begun = None
    assert waits and begun is None, lines
    first = [i for i, line in enumerate(lines) if "⧗ LIMIT wait: " in line and waits[0][0] < i < waits[0][1]]
    assert 2 <= len(first) <= 6, plain  # every 1.5 s of a wait of at most 8 s
    assert all(any(a < i < b for a, b in waits) for i, line in enumerate(lines) if "⧗ LIMIT wait: " in line)
