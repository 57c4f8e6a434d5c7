"""A call found late (a sampled process) takes from the gap what changed since its process began; what
changed before stays the loop's own. Real files, real inotify (and the polling fallback)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ralph_supervisor.evidence.segments import COARSE_CLOCK_NS
from ralph_supervisor.evidence.workspace import Workspace


@pytest.fixture(params=["inotify", "polling"])
def workspace(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Workspace, Path, list]]:
    root = tmp_path / "ws"
    root.mkdir()
    gaps: list = []
    ws = Workspace(root, state_dir=tmp_path / "state", poll_interval=0.05, force_polling=request.param == "polling")
    ws.on_gap = gaps.append
    ws.start()
    ws.wait_primed(10)
    try:
        yield ws, root, gaps
    finally:
        ws.stop()


def test_a_late_found_call_gets_its_first_writes_and_the_loop_keeps_its_own(workspace) -> None:
    ws, root, gaps = workspace
    (root / "loop_status.json").write_text("{}")  # the loop's own, before the call began
    time.sleep(0.05 + COARSE_CLOCK_NS / 1e9)
    began = time.time()
    (root / "first.txt").write_text("the call's first instant")
    time.sleep(0.1)  # the sampler finds the process a tick later
    ws.begin_iteration("", since=began)
    (root / "later.txt").write_text("and what it writes after")
    delta = ws.end_iteration("")
    assert (delta.files_changed, delta.paths) == (2, ("first.txt", "later.txt"))
    assert [gap.paths for gap in gaps] == [("loop_status.json",)]


def test_a_file_the_loop_wrote_and_the_call_rewrote_counts_once_in_each(workspace) -> None:
    ws, root, gaps = workspace
    (root / "shared.txt").write_text("the loop's")
    time.sleep(0.05 + COARSE_CLOCK_NS / 1e9)
    began = time.time()
    (root / "shared.txt").write_text("the call's")
    time.sleep(0.1)
    ws.begin_iteration("", since=began)
    delta = ws.end_iteration("")
    assert delta.paths == ("shared.txt",)
    assert [gap.paths for gap in gaps] == [("shared.txt",)]


def test_without_a_start_time_the_gap_keeps_everything_as_before(workspace) -> None:
    ws, root, gaps = workspace
    (root / "a.txt").write_text("x")
    time.sleep(0.1)
    ws.begin_iteration("")
    delta = ws.end_iteration("")
    assert delta.files_changed == 0
    assert [gap.paths for gap in gaps] == [("a.txt",)]

