"""What the state folder's writes survive: a transition is fsynced, per-call bookkeeping is atomic only.

A breaker transition (its history line and state.json) must survive a crash of the machine; what moves at
every agent call (the breaker's counters, ledger.json, the day's spend, tree.json) is written atomically
(temp file, rename) without fsync, so a crash of the supervisor loses nothing and a crash of the machine
at most the last moment's counters. The fsyncs are observed with a spy that calls the real `os.fsync`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ralph_supervisor import store
from ralph_supervisor.breaker import Snapshot, State
from ralph_supervisor.breaker.machine import Decision
from ralph_supervisor.files import ledger_json
from ralph_supervisor.iteration import IterationReport
from ralph_supervisor.ledger import attempt_dict, dump_ledger
from ralph_supervisor.records import Records
from tests.helpers.fuzzing import CHEAP, fresh


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names (without folder) of what each os.fsync flushed, in order: a file, or a folder (its name + '/')."""
    names: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        target = os.readlink(f"/proc/self/fd/{fd}")
        names.append(Path(target).name + ("/" if os.path.isdir(target) else ""))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    yield names


def report(n: int) -> IterationReport:
    return IterationReport(number=n, started_at=n * 10.0, ended_at=n * 10.0 + 5.0, reply=f"did step {n}", tokens=7)


def test_counters_are_written_without_fsync_and_a_transition_with_it(tmp_path: Path, fsynced: list[str]) -> None:
    records = Records(tmp_path, goal="supervised: ./loop.sh")
    records.save(Snapshot(iteration=1))  # the first save: what the file holds of the breaker is new
    assert fsynced and fsynced[-1] == f"{tmp_path.name}/"
    fsynced.clear()
    records.save(Snapshot(iteration=2, consecutive_no_progress=1))
    records.attempt(report(2))
    records.spend(7, 0.0, 1_000_000.0)
    assert fsynced == []
    assert json.loads((tmp_path / "state.json").read_text())["iteration"] == 2  # written all the same
    assert json.loads((tmp_path / "ledger.json").read_text())["attempts"][-1]["iteration"] == 2
    opened = Decision("open", State.OPEN, "no-progress", "stuck", 3, cooldown_s=1800.0, total_opens=1)
    records.transition(opened)
    records.save(Snapshot(state=State.OPEN, trigger="no-progress", iteration=3, total_opens=1, opened_at=30.0))
    assert fsynced[0] == "history.jsonl" and len(fsynced) == 3  # the line; state.json's temp file and folder
    assert fsynced[-1] == f"{tmp_path.name}/"
    records.close()


def test_a_write_without_fsync_is_atomic_all_the_same(tmp_path: Path, fsynced: list[str]) -> None:
    target = tmp_path / "state.json"
    store.atomic_write_bytes(target, b"old", durable=False)
    store.atomic_write_bytes(target, b"new", mode=0o600, durable=False)
    assert target.read_bytes() == b"new" and target.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"] and fsynced == []


ATTEMPTS = st.lists(st.builds(attempt_dict, iteration=st.integers(0, 10**6), action=st.text(max_size=20),
                              outcome=st.sampled_from(["success", "failure", "noop"]),
                              error=st.none() | st.text(max_size=20), tokens=st.integers(0, 10**6)), max_size=6)


@CHEAP
@given(goal=st.text(max_size=20), before=ATTEMPTS, after=st.integers(0, 4))
def test_the_ledger_file_is_dump_ledgers_text_when_built_from_pieces(here: Path, goal: str,
                                                                     before: list[dict], after: int) -> None:
    state_dir = fresh(here, "state")
    state_dir.mkdir()
    (state_dir / "ledger.json").write_text(dump_ledger(goal, before), encoding="utf-8")
    ledger = ledger_json.Ledger(state_dir, goal)
    for n in range(after):
        ledger.add(report(len(before) + n + 1))
        ledger.write()
    text = (state_dir / "ledger.json").read_text(encoding="utf-8") if after else ledger.text()
    assert text == dump_ledger(goal[: ledger_json.GOAL_MAX], ledger.attempts)


def test_a_write_that_may_make_its_folder_makes_a_missing_one_and_only_then(tmp_path: Path) -> None:
    target = tmp_path / "refs" / "snapshots" / "00000001"
    with pytest.raises(FileNotFoundError):
        store.atomic_write_bytes(target, b"a", durable=False)
    store.atomic_write_bytes(target, b"a", durable=False, make_folder=True)
    assert target.read_bytes() == b"a"
    store.atomic_write_text(target.with_name("00000002"), "b", durable=False, make_folder=True)
    assert sorted(p.name for p in target.parent.iterdir()) == ["00000001", "00000002"]
