"""What a person reads when a real loop gets stuck, read as they would read it: through a pipe (the plain
form), every line short, the OPEN line with its reason in full, and the run's end in the report's words."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from rich.cells import cell_len

from ralph_supervisor.console import WIDTH
from tests.helpers import state_dir_of
from tests.helpers.supervise import LOOP, events, history, loop_env, run

pytestmark = pytest.mark.slow

PEOPLE = ("--no-echo", "--log-format", "console", "--grace", "1", "--notify-desktop", "false")
ITERATION_LINE = re.compile(r"^\d\d:\d\d:\d\d  #(\d+) ")


def test_a_stuck_loop_reads_as_one_line_per_iteration_an_open_line_and_the_end(tmp_path: Path) -> None:
    workspace = tmp_path / "work"
    workspace.mkdir()
    result = run(workspace, *PEOPLE, "--no-progress", "3", "--on-open", "stop", "--", str(LOOP),
                 env=loop_env("stuck"), timeout=120)
    assert result.returncode == 2, result.stderr.decode(errors="replace")[-2000:]
    text = result.stderr.decode("utf-8")
    lines = text.splitlines()
    state_dir = state_dir_of(workspace)

    assert "\x1b[" not in text  # a pipe gets no colour
    assert "iteration_finished" not in text and "files_changed=" not in text  # no key=value dumps
    numbers = [int(m.group(1)) for m in map(ITERATION_LINE.match, lines) if m]
    finished = [e["iteration"] for e in events(state_dir, "iteration_finished")]
    assert numbers == finished and len(numbers) >= 3  # one line per iteration, in order
    for line in lines:
        if ITERATION_LINE.match(line):
            assert cell_len(line) <= WIDTH, line
            assert "· no change" in line and "0 files" in line and "0 commits" in line

    opened = history(state_dir)[-1]
    open_lines = [line for line in lines if "OPEN no-progress" in line]
    assert len(open_lines) == 1
    assert open_lines[0].endswith(f": {opened['reason']}")  # the reason in full, however long

    end = lines.index(next(line for line in lines if line.startswith("ralph-supervise: ")))
    report = subprocess.run([*_cli(), "report", "-w", str(workspace)], capture_output=True, text=True, timeout=60)
    verdict = re.search(r"^\*\*(.+)\*\*$", report.stdout, re.M)
    assert verdict is not None and lines[end] == f"ralph-supervise: {verdict.group(1)} Exit code 2."
    facts = {label: value.strip() for label, _, value in (line.strip().partition(":") for line in lines[end + 1:])}
    assert facts["Why"] == opened["reason"]
    assert facts["Iterations"].startswith(f"{len(finished)} iterations")
    assert facts["Report"] == str(state_dir / "report.html") and (state_dir / "report.html").is_file()
    assert facts["Escalation"] == str(state_dir / "escalation.md")
    assert facts["Continue"].startswith(f"ralph-supervise reset -w {workspace} && ralph-supervise run ")
    assert facts["Continue"].endswith(f"-- {LOOP}")
    assert lines[-1].startswith("  Continue:")  # the end is the last thing said


def test_quiet_says_the_transitions_and_the_end_only(tmp_path: Path) -> None:
    workspace = tmp_path / "work"
    workspace.mkdir()
    result = run(workspace, *PEOPLE, "--quiet", "--no-progress", "2", "--on-open", "stop", "--", str(LOOP),
                 env=loop_env("stuck"), timeout=120)
    assert result.returncode == 2
    lines = result.stderr.decode("utf-8").splitlines()
    assert not [line for line in lines if ITERATION_LINE.match(line)]
    assert [line for line in lines if "OPEN no-progress: " in line]
    assert any(line.startswith("ralph-supervise: Stopped for good by the breaker (no-progress)") for line in lines)
    assert not any("started the loop" in line for line in lines)


def test_a_loop_that_ends_by_itself_is_continued_without_a_reset(tmp_path: Path) -> None:
    result = run(tmp_path, *PEOPLE, "--", "sh", "-c", "exit 3", timeout=60)
    assert result.returncode == 3
    lines = result.stderr.decode("utf-8").splitlines()
    assert "ralph-supervise: Finished by itself with code 3 after 0 iterations. Exit code 3." in lines
    assert lines[-1].strip() == f"Continue:   ralph-supervise run {' '.join(PEOPLE)} -- sh -c 'exit 3'"
    assert not any(line.strip().startswith("Escalation:") for line in lines)


def _cli() -> list[str]:
    import sys

    return [sys.executable, "-m", "ralph_supervisor"]
