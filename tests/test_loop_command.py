"""A loop command that needs a terminal the supervisor does not give it (Ralph's --monitor) is named before it
starts: the run goes ahead, and the warning says why it ends at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from ralph_supervisor.loop_command import terminal_only
from tests.helpers import executable, state_dir_of
from tests.helpers.supervise import events, run


@pytest.mark.parametrize("command", [
    ["ralph", "--monitor"],
    ["ralph", "--calls", "50", "-m"],
    ["./ralph_loop.sh", "--monitor"],
    ["/opt/ralph/ralph_loop.sh", "--live", "--monitor"],
    ["bash", "ralph_loop.sh", "-m"],
    ["/usr/bin/env", "bash", "-x", "/home/me/ralph-claude-code/ralph_loop.sh", "--monitor"],
])
def test_ralphs_monitor_is_named_however_the_loop_is_started(command: list[str]) -> None:
    warning = terminal_only(command)
    assert warning is not None and "attaches tmux to a terminal" in warning
    flag = "-m" if "-m" in command else "--monitor"
    assert f"without {flag}" in warning


@pytest.mark.parametrize("command", [
    ["ralph"],
    ["ralph", "--live"],
    ["./ralph_loop.sh", "--calls", "50"],
    ["bash", "-c", "ralph --monitor"],  # a script given inline is not read
    ["./my_loop.sh", "--monitor"],  # another loop's flag of that name means what that loop says
    ["claude", "-m", "opus"],
    [],
])
def test_anything_else_is_left_alone(command: list[str]) -> None:
    assert terminal_only(command) is None


def test_the_warning_comes_before_the_run_and_is_an_event(tmp_path: Path) -> None:
    executable(tmp_path, "ralph_loop.sh", "#!/bin/sh\necho 'open terminal failed: not a terminal'\nexit 0\n")
    done = run(tmp_path, "--no-echo", "--log-format", "json", "--", "./ralph_loop.sh", "--monitor")
    assert done.returncode == 0, "the loop's own code: it ended by itself"
    first = done.stderr.decode().splitlines()[0]
    assert first.startswith("ralph-supervise: warning: ralph_loop.sh --monitor attaches tmux to a terminal")
    warned = events(state_dir_of(tmp_path), "loop_needs_terminal")
    assert len(warned) == 1 and "Run it without --monitor" in warned[0]["note"]
