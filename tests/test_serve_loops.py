"""What `serve` reads of the loops: rows from the registry and the state folders, re-read only where a file
changed, new events handed out once, a dead supervisor noticed on the injected clock; garbage never fatal."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from ralph_supervisor import registry
from ralph_supervisor.serve.loops import ALIVE_EVERY_S, Loops, loop_id, public_event, summarize


def add_loop(folder: Path, root: Path, name: str, *, pid: int | None = None, state: str = "CLOSED",
             events: list[dict] | None = None, ticks: int | None = None) -> str:
    workspace = root / name
    state_dir = workspace / ".ralph-supervise"
    state_dir.mkdir(parents=True)
    (state_dir / "state.json").write_text(json.dumps({"state": state, "trigger": "none", "iteration": 1}))
    (state_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events or []))
    me = os.getpid() if pid is None else pid
    entry = registry.Entry(path=folder / registry.entry_file_name(workspace, state_dir), pid=me,
                           workspace=str(workspace), state_dir=str(state_dir), name=name, started_at="",
                           start_ticks=registry.start_ticks(os.getpid()) if pid is None else ticks,
                           boot_id=registry.current_boot_id())
    folder.mkdir(parents=True, exist_ok=True)
    from ralph_supervisor import store

    store.atomic_write_bytes(entry.path, json.dumps(entry.to_dict()).encode())
    return loop_id(entry.path)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_loops_come_change_and_go_and_only_changes_are_reported(tmp_path: Path):
    folder = tmp_path / "registry"
    clock = Clock()
    loops = Loops([folder], clock=clock)
    assert loops.poll() == set() and loops.rows() == []
    first = add_loop(folder, tmp_path, "alpha", events=[{"event": "iteration_finished", "iteration": 1,
                                                         "files_changed": 2, "reply": "did it"}])
    assert loops.poll() == {first}
    row = loops.rows()[0]
    assert row["id"] == first and row["state"] == "CLOSED" and row["alive"] and not row["ended"]
    assert row["spark"] == [2] and row["last_reply"] == {"iteration": 1, "text": "did it"}
    assert loops.poll() == set()                                  # nothing changed, nothing re-read
    state_dir = Path(row["state_dir"])
    (state_dir / "state.json").write_text(json.dumps({"state": "OPEN", "trigger": "no-progress", "iteration": 2,
                                                      "reason": "stuck"}))
    with open(state_dir / "events.jsonl", "a") as fh:
        fh.write(json.dumps({"event": "breaker_transition", "from": "CLOSED", "to": "OPEN", "iteration": 2}) + "\n")
    assert loops.poll() == {first}
    loop = loops.get(first)
    assert loop is not None and loop.row["state"] == "OPEN" and loop.row["reason"] == "stuck"
    assert [e["event"] for e in loop.fresh_events] == ["breaker_transition"]
    second = add_loop(folder, tmp_path, "beta")
    assert loops.poll() == {second}
    os.unlink(folder / f"{first}.json")
    assert loops.poll() == {first}
    assert [r["id"] for r in loops.rows()] == [second]


def test_a_supervisor_that_died_is_noticed_within_the_alive_interval(tmp_path: Path):
    folder = tmp_path / "registry"
    clock = Clock()
    loops = Loops([folder], clock=clock)
    ghost = add_loop(folder, tmp_path, "ghost", pid=2 ** 22 - 7)
    stand_in = subprocess.Popen(["sleep", "60"])
    try:
        doomed = add_loop(folder, tmp_path, "doomed", pid=stand_in.pid, ticks=registry.start_ticks(stand_in.pid))
        loops.poll()
        assert {r["id"]: r["ended"] for r in loops.rows()} == {ghost: True, doomed: False}
        stand_in.kill()       # SIGKILL: its entry stays, no file changes
        stand_in.wait()
        assert loops.poll() == set()                  # not looked up again yet
        clock.now += ALIVE_EVERY_S
        assert loops.poll() == {doomed}
        assert {r["id"]: r["ended"] for r in loops.rows()} == {ghost: True, doomed: True}
    finally:
        if stand_in.poll() is None:
            stand_in.kill()
            stand_in.wait()


def test_a_loop_whose_supervisor_ended_stays_marked_ended_until_its_entry_is_pruned(tmp_path: Path):
    folder = tmp_path / "registry"
    loops = Loops([folder], clock=Clock())
    ident = add_loop(folder, tmp_path, "night")
    loops.poll()
    entry = loops.get(ident).entry  # type: ignore[union-attr]
    assert entry.mark_ended(2, at="2026-12-02T04:12:00.000Z") is not None   # as the supervisor does at exit
    assert loops.poll() == {ident}                  # at once: the entry's rename moved the folder's stamp
    row = loops.rows()[0]
    assert row["ended"] and not row["alive"] and (row["ended_at"], row["exit_code"]) == ("2026-12-02T04:12:00.000Z", 2)
    assert ", exit 2" in row["note"] and row["state"] == "CLOSED"
    assert loops.poll() == set()
    assert registry.prune([entry.path]) == ([entry.path], [])
    assert loops.poll() == {ident} and loops.rows() == []


def test_garbage_in_the_registry_and_the_state_folder_is_a_problem_line_not_an_error(tmp_path: Path):
    folder = tmp_path / "registry"
    ident = add_loop(folder, tmp_path, "odd")
    (folder / "junk.json").write_text("{")
    state_dir = tmp_path / "odd" / ".ralph-supervise"
    (state_dir / "state.json").write_bytes(b"\xff\xfe garbage")
    (state_dir / "events.jsonl").write_bytes(b"not json\n\x00\x01\n{\"event\": 3}\n")
    loops = Loops([folder])
    assert loops.poll() == {ident}
    row = loops.rows()[0]
    assert row["state"] == "?" and "not registry entries" in loops.problems[0]


@given(st.dictionaries(st.text(max_size=20), st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                                                       st.text(max_size=500), st.lists(st.integers(), max_size=3)),
                       max_size=12))
def test_any_event_becomes_a_short_public_event_and_any_list_a_summary(record: dict):
    shown = public_event(record)
    assert set(shown) <= {"event", "ts", "iteration", "detail"} and len(shown["detail"]) <= 600
    summary = summarize([record, {**record, "event": "iteration_finished"}])
    assert set(summary) == {"spark", "last_reply", "verify", "budgets"}


def test_a_row_shows_the_limit_wait_the_last_verify_the_budgets_and_the_last_reply_of_this_run(tmp_path: Path):
    folder = tmp_path / "registry"
    events = [
        {"event": "supervisor_started", "budgets": {"token_budget": 50000, "cost_budget": 2.5, "on_open": "pause"}},
        {"event": "iteration_finished", "iteration": 1, "files_changed": 3, "commits": 1, "reply": "old run"},
        {"event": "supervisor_started", "budgets": {"token_budget": 90000}},    # a new run starts afresh
        {"event": "iteration_finished", "iteration": 1, "files_changed": 0, "reply": "  "},
        {"event": "iteration_finished", "iteration": 2, "files_changed": 4, "reply": "x" * 1000},
        {"event": "verify_finished", "iteration": 2, "passed": 41, "failed": 2, "errors": 0, "skipped": 1},
    ]
    ident = add_loop(folder, tmp_path, "waiting", events=events)
    state_json = tmp_path / "waiting" / ".ralph-supervise" / "state.json"
    state_json.write_text(json.dumps({"state": "CLOSED", "trigger": "none", "iteration": 2, "tokens_used": 2400,
                                      "cost_used": 0.02, "limit_until": "2026-12-02T05:00:00.000Z",
                                      "opened_at": 1796179597.1}))
    loops = Loops([folder])
    loops.poll()
    row = loops.get(ident).row  # type: ignore[union-attr]
    assert row["limit_until"] == "2026-12-02T05:00:00.000Z" and "usage limit until" in row["note"]
    assert row["verify"] == {"iteration": 2, "passed": 41, "failed": 2, "errors": 0, "skipped": 1}
    assert row["budgets"] == {"token_budget": 90000}
    assert row["spark"] == [0, 4]
    assert row["last_reply"]["iteration"] == 2 and len(row["last_reply"]["text"]) <= 300
    assert row["cost_usd"] == 0.02 and row["opened_at"].startswith("2026-")
