"""The snapshot keeper in-process: when snapshots are taken, the destructive verdict, and every fault
(git missing, a full disk, a store that cannot be written, a broken store) costing one warning, never
supervision."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from ralph_supervisor.evidence.workspace import ABSENT, Change
from ralph_supervisor.keeper import SnapshotKeeper
from ralph_supervisor.metrics import Metrics
from ralph_supervisor.settings import load_settings
from ralph_supervisor.snapshots import SnapshotStore
from tests.helpers import held, state_dir_of


def keeper_for(ws: Path, state_dir: Path | None = None, **flags: object) -> tuple[SnapshotKeeper, list[str]]:
    settings = load_settings(workspace=str(ws), state_dir=str(state_dir) if state_dir else None, flags=flags,
                             env={"XDG_STATE_HOME": os.environ["XDG_STATE_HOME"]})
    reasons: list[str] = []
    return SnapshotKeeper(settings, on_destruction=reasons.append), reasons


def warnings(logs: list[dict], event: str) -> list[dict]:
    return [e for e in logs if e["event"] == event and e["log_level"] == "warning"]


def keeper_after_one_iteration(ws: Path) -> tuple[SnapshotKeeper, list[str]]:
    """Ten files (a.txt and f0..f8.py), a keeper that opens on more than 5 deleted, iteration 1 snapshotted."""
    for i in range(9):
        (ws / f"f{i}.py").write_text(f"{i}\n")
    keeper, reasons = keeper_for(ws, destructive_files=5)
    keeper.start(0)
    keeper.iteration_ended(1)
    assert keeper.idle(30)
    return keeper, reasons


def delete_nine(keeper: SnapshotKeeper) -> None:
    for i in range(9):
        keeper.saw(Change(f"f{i}.py", 0.0, held(b"%d\n" % i), ABSENT))


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    return root


def test_snapshots_at_start_and_at_each_iteration_end_with_metrics(ws: Path) -> None:
    keeper, _ = keeper_for(ws)
    metrics = Metrics(str(ws))
    keeper._metrics = lambda: metrics
    keeper.start(0)
    assert keeper.idle(30)
    (ws / "b.txt").write_text("b\n")
    keeper.iteration_started(1)
    keeper.saw(Change("b.txt", 0.0, ABSENT, held(b"b\n")))
    keeper.iteration_ended(1)
    assert keeper.idle(30)
    (ws / "c.txt").write_text("c\n")
    keeper.saw(Change("c.txt", 0.0, ABSENT, held(b"c\n")))
    keeper.close(iteration=1)  # what changed since the last one is kept too
    kinds = [(i.iteration, i.kind, i.files) for i in SnapshotStore(ws, state_dir_of(ws)).list()]
    assert kinds == [(0, "start", 1), (1, "iteration", 2), (1, "exit", 3)]
    status = keeper.status()
    assert status["state"] == "on" and status["count"] == 3 and status["latest"]["kind"] == "exit"
    exposed = {s.name: s.value for f in text_string_to_metric_families(generate_latest(metrics.registry).decode())
               for s in f.samples}
    assert exposed["ralph_supervise_snapshots"] == 3
    assert exposed["ralph_supervise_snapshot_bytes"] > 0
    metrics.close()


def test_a_destructive_iteration_is_reported_once_while_it_runs(ws: Path) -> None:
    keeper, reasons = keeper_after_one_iteration(ws)
    keeper.iteration_started(2)
    delete_nine(keeper)
    assert len(reasons) == 1
    assert reasons[0].startswith("iteration 2 deleted or emptied 4 files of the 10 it started with (more than 30%)")
    assert f"the snapshot of iteration 1 holds them: `ralph-supervise restore 1 -w {ws}`" in reasons[0]
    assert "among them f0.py, f1.py, f2.py, f3.py" in reasons[0]
    keeper.opened("destructive")
    lines = "\n".join(keeper.restore_lines("destructive"))
    assert f"ralph-supervise restore 1 -w {ws}" in lines and "before the files were destroyed" in lines
    keeper.iteration_ended(2)
    keeper.close(2)
    marks = [(i.iteration, i.before_trip) for i in SnapshotStore(ws, state_dir_of(ws)).list()]
    assert (1, "destructive") in marks
    # Between iterations nothing is judged.
    keeper2, reasons2 = keeper_for(ws, destructive_files=1)
    for i in range(5):
        keeper2.saw(Change(f"x{i}", 0.0, held(b"x"), ABSENT))
    assert reasons2 == []


def test_without_git_snapshots_are_off_with_one_warning(ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with capture_logs() as logs:
        keeper, reasons = keeper_for(ws, destructive_files=1)
        keeper.start(0)
        keeper.iteration_started(1)
        keeper.saw(Change("a.txt", 0.0, held(b"a\n"), ABSENT))
        keeper.saw(Change("b.txt", 0.0, held(b"b\n"), ABSENT))
        keeper.iteration_ended(1)
        keeper.close(1)
    assert [e["reason"] for e in warnings(logs, "snapshots_off")] == ["git is not installed (snapshots need it)"]
    assert keeper.status()["state"] == "off"
    assert len(reasons) == 1 and "no snapshot holds them (git is not installed" in reasons[0], "the trip still works"
    assert not (state_dir_of(ws) / "snapshots").exists()


def test_a_budget_of_zero_means_no_snapshots_and_no_warning(ws: Path) -> None:
    with capture_logs() as logs:
        keeper, _ = keeper_for(ws, snapshot_budget=0)
        keeper.start(0)
        keeper.iteration_ended(1)
        keeper.close(1)
    assert [e["log_level"] for e in logs if e["event"] == "snapshots_off"] == ["info"]
    assert keeper.status()["problem"] == "--snapshot-budget is 0"
    assert not (state_dir_of(ws) / "snapshots").exists()


def test_a_full_disk_pauses_snapshots_with_one_warning_until_there_is_room(ws: Path, tiny_disk: Path) -> None:
    (ws / "big.bin").write_bytes(os.urandom(1_500_000))  # more than the 1 MiB disk holds
    with capture_logs() as logs:
        keeper, _ = keeper_for(ws, tiny_disk)
        keeper.start(0)
        for n in (1, 2):
            keeper.iteration_ended(n)
            assert keeper.idle(30)
        assert keeper.status()["state"] == "paused" and "No space left" in keeper.status()["problem"]
        os.unlink(ws / "big.bin")
        keeper.saw(Change("big.bin", 0.0, None, ABSENT))
        keeper.iteration_ended(3)
        assert keeper.idle(30)
        keeper.close(3)
    assert len(warnings(logs, "snapshots_paused")) == 1
    assert [e["event"] for e in logs if e["event"] == "snapshots_resumed"] == ["snapshots_resumed"]
    assert keeper.status()["state"] == "on"
    assert SnapshotStore(ws, tiny_disk).list()[-1].iteration == 3


def test_a_store_that_cannot_be_written_turns_snapshots_off(ws: Path, tiny_disk: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_disk)], check=True, capture_output=True)
    with capture_logs() as logs:
        keeper, _ = keeper_for(ws, tiny_disk)
        keeper.start(0)
        keeper.iteration_ended(1)
        keeper.close(1)
    off = warnings(logs, "snapshots_off")
    assert len(off) == 1 and "Read-only file system" in off[0]["reason"], logs
    assert keeper.status()["state"] == "off"


def test_a_broken_store_is_moved_aside_with_one_warning_and_snapshots_go_on(ws: Path) -> None:
    state = state_dir_of(ws)
    store = SnapshotStore(ws, state)
    store.take(0, "start", None, now=0.0)
    for path in (state / "snapshots" / "objects").rglob("*"):
        if path.is_file():
            path.chmod(0o644)
            path.write_bytes(b"not an object")
    with capture_logs() as logs:
        keeper, _ = keeper_for(ws)
        keeper.start(0)
        assert keeper.idle(30)
        keeper.iteration_ended(1)
        keeper.close(1)
    corrupt = warnings(logs, "snapshot_store_corrupt")
    assert len(corrupt) == 1 and "snapshots.corrupt-" in corrupt[0]["moved_to"]
    assert [i.iteration for i in SnapshotStore(ws, state).list()] == [0, 1]
    assert keeper.status()["state"] == "on"


def test_a_short_calls_late_report_does_not_stop_the_watch_over_the_next_call(ws: Path) -> None:
    """With exact call boundaries the next call may begin before the previous one's report is in."""
    keeper, reasons = keeper_after_one_iteration(ws)
    keeper.iteration_started(2)
    keeper.iteration_started(3)  # call 3 began ...
    keeper.iteration_ended(2)    # ... before call 2's report
    delete_nine(keeper)
    assert len(reasons) == 1 and reasons[0].startswith("iteration 3 deleted or emptied")
    keeper.close(3)
